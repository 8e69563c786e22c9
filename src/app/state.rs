//! The dashboard's state. Data (what was sampled) and UI state (focus,
//! overlays, scroll positions) are separate structs; panes render from both
//! and never change them. Everything here is pure: time comes in as
//! milliseconds, samples come in as values.

use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::keymap::{TypingKey, TypingMode};
use super::process_list::{LineKey, ProcessSort, ProcessTag, SignalPrompt, SortColumn};
use super::stress::{PanelDevice, StressPanel};
use crate::alloc::{DeviceStats, Fragmentation, SegmentInfo, fragmentation};
use crate::device::sim::NotStarted;
use crate::device::{GpuProcess, GpuReading, GpuSample};

/// Points kept per GPU (one per sample: an hour at 1 Hz).
pub const HISTORY_CAPACITY: usize = 3600;
/// Timeline windows the zoom keys step through (seconds).
pub const ZOOM_WINDOWS_S: [u64; 6] = [30, 60, 120, 300, 900, 3600];
/// The zoom step a fresh dashboard starts at (60 s).
pub const DEFAULT_ZOOM: usize = 1;

/// One point of the timeline (bytes; `None` when unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HistoryPoint {
    pub t_ms: u64,
    pub allocated: Option<u64>,
    pub reserved: Option<u64>,
    pub driver_used: Option<u64>,
    /// The device these figures are of: the timeline draws one device's
    /// points only, so that a GPU's 62 GiB is never drawn on a 24 GiB
    /// scenario device's scale.
    pub device: PlottedDevice,
}

/// The device a timeline point's figures are of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlottedDevice {
    /// The GPU itself (the driver's used memory, its allocator's figures).
    Gpu,
    /// The stress panel's scenario device of `capacity` bytes, standing in
    /// for the GPU while a scenario runs.
    Scenario { capacity: u64 },
}

impl PlottedDevice {
    /// The device `view` runs on (the GPU when there is no view).
    pub fn of(view: Option<&AllocatorView>) -> Self {
        match view.and_then(|a| a.device_memory) {
            Some((capacity, _)) => PlottedDevice::Scenario { capacity },
            None => PlottedDevice::Gpu,
        }
    }
}

/// An event drawn on the timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MarkerKind {
    /// Cached segments were released (empty_cache, or the retry path).
    EmptyCache,
    /// An allocation failed with out-of-memory.
    Oom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Marker {
    pub t_ms: u64,
    pub kind: MarkerKind,
    /// How many at that moment: the OOMs an allocator's `num_ooms` grew by
    /// between two samples (a training loop that fails every step makes
    /// hundreds a second); 1 for a release or an OOM a probe's note reports.
    pub count: u64,
}

/// A GPU's timeline: bounded, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct History {
    pub points: VecDeque<HistoryPoint>,
    pub markers: VecDeque<Marker>,
}

impl History {
    pub fn push(&mut self, point: HistoryPoint) {
        if self.points.len() >= HISTORY_CAPACITY {
            self.points.pop_front();
        }
        self.points.push_back(point);
        let oldest = self.points.front().map_or(0, |p| p.t_ms);
        while self.markers.front().is_some_and(|m| m.t_ms < oldest) {
            self.markers.pop_front();
        }
    }

    pub fn mark(&mut self, marker: Marker) {
        self.markers.push_back(marker);
    }

    /// The device of the latest point at or before `t_ms` (`None` before
    /// the first point): what the timeline plots when it ends there, and
    /// the device a mark made at `t_ms` was seen on.
    pub fn device_at(&self, t_ms: u64) -> Option<PlottedDevice> {
        self.points
            .iter()
            .rev()
            .find(|p| p.t_ms <= t_ms)
            .map(|p| p.device)
    }

    /// The points within the last `window_ms` before `now_ms`.
    pub fn window(&self, now_ms: u64, window_ms: u64) -> impl Iterator<Item = &HistoryPoint> {
        let from = now_ms.saturating_sub(window_ms);
        self.points.iter().filter(move |p| p.t_ms >= from)
    }
}

/// The allocator of one process on a GPU, when vramtop can see it (a
/// simulated training run, the stress panel, or a probe).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorView {
    /// Who this allocator belongs to, e.g. "pid 4242 (simulated training)".
    pub source: String,
    pub pid: Option<u32>,
    pub stats: DeviceStats,
    pub layout: Vec<SegmentInfo>,
    pub fragmentation: Fragmentation,
    /// Figures the source could not give (a probe's `null`s): `memory_stats()`
    /// keys, and [`REQUESTED_SIZE`] when blocks came without their
    /// requested size. Shown as n/a; their slots hold 0.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
    /// `(total, used)` bytes of the device this allocator runs on when it
    /// is not the GPU's own (the stress panel's scenario device): the
    /// breakdown splits these instead of the GPU's telemetry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_memory: Option<(u64, u64)>,
    /// How the segments (`layout`, `fragmentation`) stand to `stats`
    /// where they are not of the same moment: a probe sends its stats
    /// every second and its segments every 5 s. `None`: of one moment (a
    /// simulation, a snapshot) or as new as the stats. Not in the JSON,
    /// whose figures are each the probe's latest.
    #[serde(skip)]
    pub segments_age: Option<SegmentsAge>,
    /// PyTorch's own peaks of this allocator, where a probe sent them: the
    /// figures above are each one sample (a second apart), which misses a
    /// peak inside a training step; these are the allocator's counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_peak: Option<OwnPeak>,
}

/// What PyTorch's own peaks count from, in its words
/// (`torch.cuda.max_memory_allocated`'s documentation).
pub const OWN_PEAK_SINCE: &str = "the process started or its last reset_peak_memory_stats()";

/// PyTorch's own peaks of an allocator (bytes): `max_memory_allocated()`
/// and `max_memory_reserved()` (`allocated_bytes.all.peak`,
/// `reserved_bytes.all.peak`), `None` where the probe could not say.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct OwnPeak {
    pub allocated: Option<u64>,
    pub reserved: Option<u64>,
    /// What the peaks count from ([`OWN_PEAK_SINCE`]).
    pub since: String,
}

impl OwnPeak {
    /// The peaks in `stats`, a figure known only where the source sent it
    /// (`knows`) and it is not below its current value: a peak under the
    /// current figure cannot be true (a probe that left the key out,
    /// whose slot holds 0). `None` when neither is known.
    pub fn of(stats: &DeviceStats, knows: impl Fn(&str) -> bool) -> Option<OwnPeak> {
        let peak = |key: &str, stat: &crate::alloc::Stat| {
            knows(key).then(|| stat.plausible_peak()).flatten()
        };
        let allocated = peak("allocated_bytes.all.peak", &stats.allocated_bytes.all);
        let reserved = peak("reserved_bytes.all.peak", &stats.reserved_bytes.all);
        (allocated.is_some() || reserved.is_some()).then(|| OwnPeak {
            allocated,
            reserved,
            since: OWN_PEAK_SINCE.to_string(),
        })
    }
}

/// Where a probe's segments are behind its stats (see
/// [`AllocatorView::segments_age`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SegmentsAge {
    /// The stats came and the segments have not yet: the layout is empty
    /// though memory may be reserved.
    NotYet,
    /// The segments are from before the stats.
    Older {
        /// Seconds (by the probe's clock) between the segments and the
        /// stats; `None` when a message came without its time.
        age_s: Option<f64>,
        /// Reserved and allocated bytes (the segments' sums) where either
        /// differs from the stats': the figures drawn from the segments
        /// are then of another moment than the breakdown's.
        then: Option<SegmentTotals>,
    },
}

/// Bytes the segments add up to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentTotals {
    pub reserved: u64,
    pub allocated: u64,
}

impl SegmentTotals {
    /// The sums of `layout`'s segments (saturating: they are input).
    pub fn of(layout: &[SegmentInfo]) -> Self {
        layout.iter().fold(
            SegmentTotals {
                reserved: 0,
                allocated: 0,
            },
            |t, s| SegmentTotals {
                reserved: t.reserved.saturating_add(s.total_size),
                allocated: t.allocated.saturating_add(s.allocated_size),
            },
        )
    }
}

impl SegmentsAge {
    /// How segments received at `segments_time` stand to stats received at
    /// `stats_time` (Unix seconds by the probe's clock, `None` where the
    /// message had none): `None` when they are as new as the stats or
    /// newer, or agree with the stats and are less than a second older.
    /// `totals` are the segments' sums, `stats` the stats' known
    /// `(reserved, allocated)`, `None` when either is unknown.
    pub fn of(
        segments_time: Option<f64>,
        stats_time: Option<f64>,
        totals: SegmentTotals,
        stats: Option<(u64, u64)>,
    ) -> Option<Self> {
        let differ = stats.is_some_and(|(r, a)| totals.reserved != r || totals.allocated != a);
        let then = differ.then_some(totals);
        let lag = segments_time
            .zip(stats_time)
            .map(|(seg, st)| st - seg)
            .filter(|l| l.is_finite());
        match lag {
            // A second or more: said even when the totals agree (blocks
            // may have moved within them).
            Some(l) if l >= 1.0 => Some(SegmentsAge::Older {
                age_s: Some(l),
                then,
            }),
            Some(l) if l > 0.0 && differ => Some(SegmentsAge::Older {
                age_s: Some(l),
                then,
            }),
            // As new as the stats or newer: the next stats catch up.
            Some(_) => None,
            // No times: only the figures can say they are of another
            // moment.
            None => differ.then_some(SegmentsAge::Older { age_s: None, then }),
        }
    }
}

/// The name in [`AllocatorView::unknown`] for blocks without a requested
/// size (PyTorch older than 2.1): the internal fragmentation is unknown.
pub const REQUESTED_SIZE: &str = "requested_size";

impl AllocatorView {
    /// Says the allocator runs on a device of its own of `total` bytes,
    /// `used` of them used (see [`AllocatorView::device_memory`]).
    pub fn on_device(mut self, total: u64, used: u64) -> Self {
        self.device_memory = Some((total, used.min(total)));
        self
    }

    pub fn new(
        source: String,
        pid: Option<u32>,
        stats: DeviceStats,
        layout: Vec<SegmentInfo>,
    ) -> Self {
        let fragmentation = fragmentation(&layout);
        AllocatorView {
            source,
            pid,
            stats,
            layout,
            fragmentation,
            unknown: Vec::new(),
            device_memory: None,
            segments_age: None,
            own_peak: None,
        }
    }

    /// The view with PyTorch's own peaks (a probe's; see
    /// [`AllocatorView::own_peak`]).
    pub fn with_own_peak(mut self, peak: Option<OwnPeak>) -> Self {
        self.own_peak = peak;
        self
    }

    /// The view with its [`AllocatorView::segments_age`].
    pub fn with_segments_age(mut self, age: Option<SegmentsAge>) -> Self {
        self.segments_age = age;
        self
    }

    /// The view with `unknown` figures (see [`AllocatorView::unknown`]).
    pub fn with_unknown(mut self, unknown: Vec<String>) -> Self {
        self.unknown = unknown;
        self
    }

    /// Whether figure `name` (a `memory_stats()` key or [`REQUESTED_SIZE`])
    /// is known.
    pub fn knows(&self, name: &str) -> bool {
        !self.unknown.iter().any(|u| u == name)
    }

    /// Whether `memory_allocated()` and `memory_reserved()` are both known.
    pub fn knows_totals(&self) -> bool {
        self.knows("allocated_bytes.all.current") && self.knows("reserved_bytes.all.current")
    }

    /// `memory_allocated()` (bytes).
    pub fn allocated(&self) -> u64 {
        self.stats.allocated_bytes.all.current.max(0) as u64
    }

    /// `memory_reserved()` (bytes).
    pub fn reserved(&self) -> u64 {
        self.stats.reserved_bytes.all.current.max(0) as u64
    }

    /// `memory_allocated()` (bytes), `None` when the source could not say.
    pub fn known_allocated(&self) -> Option<u64> {
        self.knows("allocated_bytes.all.current")
            .then(|| self.allocated())
    }

    /// `memory_reserved()` (bytes), `None` when the source could not say.
    pub fn known_reserved(&self) -> Option<u64> {
        self.knows("reserved_bytes.all.current")
            .then(|| self.reserved())
    }
}

/// The four parts of a GPU's memory (bytes), the dashboard's core pitch: why
/// nvidia-smi and PyTorch disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Breakdown {
    pub total: u64,
    /// Handed out to tensors (`memory_allocated()`).
    pub allocated: u64,
    /// Reserved by the caching allocator but free (`reserved − allocated`).
    pub cached_free: u64,
    /// Driver-used memory outside the allocator: CUDA contexts, other
    /// processes, non-PyTorch allocations (`driver used − reserved`).
    pub context_and_other: u64,
    /// Not used at all: the driver's free figure (NVML's, what nvidia-smi
    /// shows) where it gives one, else `total − driver used`.
    pub free: u64,
    /// What the driver keeps for itself outside every process (NVML v2:
    /// `total − used − free`): 0 where the driver gives no separate free
    /// figure or reserves nothing. Not PyTorch's "reserved".
    pub driver_held: u64,
    /// By how much the allocator's reserved exceeds the GPU's used memory
    /// (bytes), which cannot be on one GPU: the view is then likely of
    /// another GPU (CUDA and NVML numbering them differently). The other
    /// parts are not to be trusted and `context_and_other` is 0 only
    /// because nothing is left for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reserved_over_used: Option<u64>,
}

/// A GPU's memory in parts that sum to `total` (bytes): used, free and
/// what the driver holds for itself. NVML's v2 figures count the driver's
/// own reservation in neither used nor free, so `total − used` is more
/// than the free memory nvidia-smi (and `--once`, and the metrics) show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceMemory {
    pub total: u64,
    /// Driver used, at most `total`.
    pub used: u64,
    /// The driver's free figure where it gives one (at most
    /// `total − used`), else `total − used`.
    pub free: u64,
    /// `total − used − free`: kept by the driver, in no process.
    pub driver_held: u64,
}

impl DeviceMemory {
    /// The sample's parts; `None` without a total or used figure.
    pub fn of(sample: &GpuSample) -> Option<DeviceMemory> {
        let total = sample.memory_total?;
        let used = sample.memory_used?.min(total);
        let rest = total - used;
        let free = sample.memory_free.map_or(rest, |f| f.min(rest));
        Some(DeviceMemory {
            total,
            used,
            free,
            driver_held: rest - free,
        })
    }

    /// A device with no separate free figure: free is `total − used`.
    pub fn of_used(total: u64, used: u64) -> DeviceMemory {
        let used = used.min(total);
        DeviceMemory {
            total,
            used,
            free: total - used,
            driver_held: 0,
        }
    }
}

/// Computes the breakdown; without an allocator view the allocated and
/// cached parts are unknown (`None`), and only used/free are shown.
pub fn breakdown(sample: &GpuSample, allocator: Option<&AllocatorView>) -> Option<Breakdown> {
    // Unknown totals (a probe's nulls) split nothing: only used/free.
    let a = allocator.filter(|a| a.knows_totals())?;
    let memory = match a.device_memory {
        // The allocator's own device (the stress panel's scenario device)
        // has no driver reservation.
        Some((total, used)) => DeviceMemory::of_used(total, used),
        None => DeviceMemory::of(sample)?,
    };
    let used = memory.used;
    let reserved = a.reserved().min(used);
    let allocated = a.allocated().min(reserved);
    Some(Breakdown {
        total: memory.total,
        allocated,
        cached_free: reserved - allocated,
        context_and_other: used - reserved,
        free: memory.free,
        driver_held: memory.driver_held,
        reserved_over_used: a.reserved().checked_sub(used).filter(|&d| d > 0),
    })
}

/// Driver-used memory no listed process accounts for (other PID namespaces,
/// zombies), when every figure is known: `None` too where the driver cannot
/// list the processes (all of "used" would read as unattributed).
pub fn unattributed(sample: &GpuSample) -> Option<u64> {
    let used = sample.memory_used?;
    let mut listed = 0u64;
    for p in sample.processes.as_ref()? {
        listed = listed.saturating_add(p.used_memory?);
    }
    Some(used.saturating_sub(listed))
}

/// The words the Processes pane puts before the command of a child
/// holding a CUDA context of its own (and that the filter finds).
pub const OWN_CONTEXT_MARK: &str = "own CUDA context!";

/// A row of the process tree.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRow {
    pub gpu: u32,
    pub process: GpuProcess,
    /// 0 for a root, 1 for a child of a listed GPU process, …
    pub depth: usize,
    /// A child of another GPU process holding its own CUDA context (e.g. a
    /// DataLoader worker that touched CUDA: a whole context wasted).
    pub own_context_in_child: bool,
}

/// Every GPU process of `samples`, in tree order when `tree` is set
/// (children under their GPU-using parent), filtered by `filter` (a
/// case-insensitive substring of the pid, user or command), in the
/// driver's order GPU by GPU.
pub fn process_rows(samples: &[&GpuSample], tree: bool, filter: &str) -> Vec<ProcessRow> {
    process_rows_sorted(samples, tree, filter, None)
}

/// [`process_rows`] sorted by `sort` (`None`: the driver's order): in tree
/// order the roots are sorted, and each parent's children under it (a
/// child's line under its parent's line on the same GPU); by memory, a
/// family (a line and its descendants' lines) by what it holds in all.
pub fn process_rows_sorted(
    samples: &[&GpuSample],
    tree: bool,
    filter: &str,
    sort: Option<ProcessSort>,
) -> Vec<ProcessRow> {
    let mut all: Vec<(u32, &GpuProcess)> = samples
        .iter()
        .filter(|s| s.mig.is_none())
        .flat_map(|s| s.listed_processes().iter().map(move |p| (s.index, p)))
        .collect();
    // Sorted before the tree is built: roots and each parent's children
    // are taken in this order.
    if let Some(sort) = sort {
        all.sort_by(|a, b| sort.compare(*a, *b));
    }
    let gpu_pids: std::collections::BTreeSet<u32> = all.iter().map(|(_, p)| p.pid).collect();
    let is_child = |p: &GpuProcess| p.own_context_in_child(&gpu_pids);
    let needle = filter.to_lowercase();
    // What the line shows: the pid, user and command, and the mark of a
    // child holding a context of its own (`/context` finds the workers).
    let matches = |p: &GpuProcess| {
        needle.is_empty()
            || p.pid.to_string().contains(&needle)
            || p.user
                .as_deref()
                .is_some_and(|u| u.to_lowercase().contains(&needle))
            || p.command
                .as_deref()
                .is_some_and(|c| c.to_lowercase().contains(&needle))
            || (is_child(p) && OWN_CONTEXT_MARK.to_lowercase().contains(&needle))
    };
    let row = |gpu: u32, p: &GpuProcess, depth: usize| ProcessRow {
        gpu,
        process: p.clone(),
        depth,
        own_context_in_child: is_child(p),
    };
    if !tree {
        return all
            .iter()
            .filter(|(_, p)| matches(p))
            .map(|&(g, p)| row(g, p, 0))
            .collect();
    }
    // A process on several GPUs is a line per GPU: a child's line goes
    // under its parent's line on the same GPU. Where the parent holds
    // nothing on the child's GPU, the child's line is a root there.
    let lines: std::collections::BTreeSet<(u32, u32)> =
        all.iter().map(|(g, p)| (*g, p.pid)).collect();
    let parent_line = |g: u32, p: &GpuProcess| {
        p.parent_pid
            .filter(|&pp| pp != p.pid && lines.contains(&(g, pp)))
            .map(|pp| (g, pp))
    };
    let mut children: BTreeMap<(u32, u32), Vec<(u32, &GpuProcess)>> = BTreeMap::new();
    for &(g, p) in &all {
        if let Some(parent) = parent_line(g, p) {
            // A pid the driver lists twice on a GPU is one line (the
            // walk below draws it once), and one in its parent's family.
            let kids = children.entry(parent).or_default();
            if !kids.iter().any(|(kg, kp)| *kg == g && kp.pid == p.pid) {
                kids.push((g, p));
            }
        }
    }
    let mut roots: Vec<(u32, &GpuProcess)> = all
        .iter()
        .copied()
        .filter(|&(g, p)| parent_line(g, p).is_none())
        .collect();
    // By memory, a family goes by what it holds in all (a launcher that
    // holds little above the workers holding most): the biggest first.
    if let Some(sort) = sort.filter(|s| s.column == SortColumn::Memory) {
        let memory: BTreeMap<(u32, u32), Option<u64>> = all
            .iter()
            .map(|&(g, p)| ((g, p.pid), family_memory(g, p, &children, 0)))
            .collect();
        let of = |(g, p): &(u32, &GpuProcess)| memory.get(&(*g, p.pid)).copied().flatten();
        let by_family = |a: &(u32, &GpuProcess), b: &(u32, &GpuProcess)| {
            sort.compare_families((a.0, a.1, of(a)), (b.0, b.1, of(b)))
        };
        roots.sort_by(by_family);
        for kids in children.values_mut() {
            kids.sort_by(by_family);
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<(u32, &GpuProcess, usize)> =
        roots.iter().rev().map(|&(g, p)| (g, p, 0)).collect();
    let mut seen = std::collections::BTreeSet::new();
    // Lines no root leads to (processes listed as each other's parents, a
    // pid reused under a stale parent) are drawn as roots after the rest:
    // every line is drawn once, whatever the driver and /proc say.
    let mut unreached = all.iter();
    loop {
        while let Some((g, p, depth)) = stack.pop() {
            if !seen.insert((g, p.pid)) {
                continue;
            }
            let shown = matches(p);
            if shown {
                // Deeper than 16 is drawn at 16: the indent has to end.
                out.push(row(g, p, depth.min(MAX_TREE_DEPTH)));
            }
            // A line the filter hides leaves its children at its own
            // depth: no branch points at a parent not drawn.
            let kids_depth = if shown {
                depth.saturating_add(1)
            } else {
                depth
            };
            if let Some(kids) = children.get(&(g, p.pid)) {
                for &(kg, kp) in kids.iter().rev() {
                    stack.push((kg, kp, kids_depth));
                }
            }
        }
        match unreached.find(|(g, p)| !seen.contains(&(*g, p.pid))) {
            Some(&(g, p)) => stack.push((g, p, 0)),
            None => break,
        }
    }
    out
}

/// The deepest indent the process tree draws.
const MAX_TREE_DEPTH: usize = 16;

/// GPU memory (bytes) of `p`'s line on GPU `gpu` and of its descendants'
/// lines there (`children` by parent line): the figures known, `None`
/// where none is. Deeper than the tree is drawn (16) is not counted.
fn family_memory(
    gpu: u32,
    p: &GpuProcess,
    children: &BTreeMap<(u32, u32), Vec<(u32, &GpuProcess)>>,
    depth: usize,
) -> Option<u64> {
    let mut total = p.used_memory;
    if depth >= MAX_TREE_DEPTH {
        return total;
    }
    for &(g, kid) in children.get(&(gpu, p.pid)).into_iter().flatten() {
        if let Some(bytes) = family_memory(g, kid, children, depth + 1) {
            total = Some(total.unwrap_or(0).saturating_add(bytes));
        }
    }
    total
}

/// A line of the processes pane, in its order: the processes of every GPU
/// (as [`process_rows`] orders them), then per GPU the driver-used memory
/// no listed process holds. The pane draws these lines and the keys scroll
/// over them, so both count the same lines.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessLine {
    Process(ProcessRow),
    /// Driver-used bytes of GPU `gpu` that no listed process holds.
    Unattributed {
        gpu: u32,
        bytes: u64,
    },
    /// GPU `gpu`'s driver cannot list its processes: unknown, not idle.
    Unlisted {
        gpu: u32,
    },
}

impl ProcessLine {
    /// What the line is about, which the selection is kept as.
    pub fn key(&self) -> LineKey {
        match self {
            ProcessLine::Process(r) => LineKey::Process {
                gpu: r.gpu,
                pid: r.process.pid,
            },
            ProcessLine::Unattributed { gpu, .. } => LineKey::Unattributed { gpu: *gpu },
            ProcessLine::Unlisted { gpu } => LineKey::Unlisted { gpu: *gpu },
        }
    }

    /// The NVML index of the GPU the line is about.
    pub fn gpu(&self) -> u32 {
        match self {
            ProcessLine::Process(r) => r.gpu,
            ProcessLine::Unattributed { gpu, .. } | ProcessLine::Unlisted { gpu } => *gpu,
        }
    }
}

/// A GPU as the dashboard holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuState {
    pub reading: GpuReading,
    pub allocator: Option<AllocatorView>,
    pub history: History,
    /// The allocator view as it was at `reading`, held when the view has
    /// changed since (the stress panel acted between two driver samples):
    /// the driver's used memory is compared only with allocator figures of
    /// its own moment, else a new allocation looks like reserved memory
    /// the GPU does not have. `None` when `allocator` is of that moment;
    /// the next sample drops it.
    #[serde(skip)]
    pub allocator_at_reading: Option<Option<AllocatorView>>,
}

impl GpuState {
    /// The allocator view the driver's reading is compared with: the one
    /// of the reading's moment.
    pub fn breakdown_view(&self) -> Option<&AllocatorView> {
        match &self.allocator_at_reading {
            Some(held) => held.as_ref(),
            None => self.allocator.as_ref(),
        }
    }

    /// Shows `view` as this GPU's allocator after the reading was taken:
    /// the panel's previous view, of the reading's moment, is held for the
    /// breakdown until the next sample.
    pub fn show_newer_view(&mut self, view: AllocatorView) {
        if self.allocator.as_ref() == Some(&view) {
            return;
        }
        // Another allocator taking the GPU over is not a change the reading
        // missed, and a view of its own device compares with nothing here.
        let same_allocator = self
            .allocator
            .as_ref()
            .is_some_and(|a| a.pid == view.pid && a.source == view.source);
        if same_allocator && view.device_memory.is_none() && self.allocator_at_reading.is_none() {
            self.allocator_at_reading = Some(self.allocator.take());
        }
        self.allocator = Some(view);
    }

    pub fn sample(&self) -> Option<&GpuSample> {
        self.reading.sample()
    }

    pub fn index(&self) -> u32 {
        match &self.reading {
            GpuReading::Ok(s) => s.index,
            GpuReading::Lost { index, .. } => *index,
        }
    }

    /// The physical GPU this row is on: a MIG instance's parent, else the
    /// row's own index. A MIG row's index is its slot on the parent, so
    /// slot 1 is not GPU 1; the process list (whose lines are per physical
    /// GPU) is matched by this.
    pub fn physical_index(&self) -> u32 {
        self.sample()
            .and_then(|s| s.mig.as_ref())
            .map_or_else(|| self.index(), |m| m.parent_index)
    }

    /// The row's name in pane titles: "GPU 3", or "GPU 0 MIG 1" for the MIG
    /// device in slot 1 of GPU 0 (a bare "GPU 1" named another GPU).
    pub fn label(&self) -> String {
        match self.sample().and_then(|s| s.mig.as_ref()) {
            Some(m) => format!("GPU {} MIG {}", m.parent_index, self.index()),
            None => format!("GPU {}", self.index()),
        }
    }
}

/// The panes, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Pane {
    Gpus,
    Breakdown,
    Timeline,
    Fragmentation,
    Segments,
    Processes,
}

impl Pane {
    pub const ALL: [Pane; 6] = [
        Pane::Gpus,
        Pane::Breakdown,
        Pane::Timeline,
        Pane::Fragmentation,
        Pane::Segments,
        Pane::Processes,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Pane::Gpus => "GPUs",
            Pane::Breakdown => "Memory breakdown",
            Pane::Timeline => "Timeline",
            Pane::Fragmentation => "Fragmentation",
            Pane::Segments => "Segments",
            Pane::Processes => "Processes",
        }
    }

    pub fn next(self) -> Pane {
        let i = Pane::ALL.iter().position(|&p| p == self).unwrap_or(0);
        Pane::ALL[(i + 1) % Pane::ALL.len()]
    }

    pub fn prev(self) -> Pane {
        let i = Pane::ALL.iter().position(|&p| p == self).unwrap_or(0);
        Pane::ALL[(i + Pane::ALL.len() - 1) % Pane::ALL.len()]
    }
}

/// What is drawn over the panes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Overlay {
    None,
    Help,
}

/// The most characters the process filter holds: a filter is a handful,
/// and the cap keeps a pasted novel from growing the state without bound.
pub const MAX_FILTER_CHARS: usize = 64;

/// What a character typed into a full process filter is told, the key
/// that deletes named from the filter's table, as the stress panel's
/// full fields say it.
pub fn full_filter_message() -> String {
    let delete = TypingMode::ProcessFilter
        .key_name(TypingKey::Delete)
        .unwrap_or_default();
    format!(
        "the process filter holds {MAX_FILTER_CHARS} characters: the rest is not typed \
         ({delete} deletes)"
    )
}

/// The process filter (a substring of the command or pid, typed after `/`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum ProcessFilter {
    /// Keys go into the filter, which applies as it is typed.
    Editing(String),
    /// Typed and closed (Enter or Esc); empty: every process is listed.
    Set(String),
}

impl ProcessFilter {
    pub fn text(&self) -> &str {
        match self {
            ProcessFilter::Editing(text) | ProcessFilter::Set(text) => text,
        }
    }

    pub fn is_editing(&self) -> bool {
        matches!(self, ProcessFilter::Editing(_))
    }

    /// `/`: keys go into the filter, keeping what it holds.
    pub fn edit(&mut self) {
        if let ProcessFilter::Set(text) = self {
            *self = ProcessFilter::Editing(std::mem::take(text));
        }
    }

    /// Enter or Esc while editing: the filter stays as typed.
    pub fn close(&mut self) {
        if let ProcessFilter::Editing(text) = self {
            *self = ProcessFilter::Set(std::mem::take(text));
        }
    }

    /// The text, to edit.
    pub fn text_mut(&mut self) -> &mut String {
        match self {
            ProcessFilter::Editing(text) | ProcessFilter::Set(text) => text,
        }
    }
}

/// Focus, overlays, scroll positions: everything about the view, nothing
/// about the GPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UiState {
    pub focus: Pane,
    pub overlay: Overlay,
    /// The timeline stops scrolling (samples are still recorded).
    pub paused: bool,
    /// The time `paused` was set (ms), which the timeline then shows.
    pub paused_at_ms: Option<u64>,
    /// Index into [`ZOOM_WINDOWS_S`].
    pub zoom: usize,
    /// Index into `AppState::gpus`.
    pub selected_gpu: usize,
    /// The process filter typed after `/`, and whether keys go into it.
    pub process_filter: ProcessFilter,
    pub process_tree: bool,
    /// The process list's sort column and direction (`s`, `S`).
    pub process_sort: ProcessSort,
    /// The selected line of the process list, by what it is about, so it
    /// stays on its process across re-sorts and samples; `None`: the first
    /// line.
    pub selected_process: Option<LineKey>,
    /// The row of `selected_process` when it was last placed: where the
    /// selection goes when its process has ended (the line now there).
    pub selected_process_row: usize,
    /// The digit of the last key when that key selected a GPU: the next
    /// digit makes a two-digit GPU number (`1` then `2`: GPU 12) where a
    /// machine lists GPU 10 or more. Any other key forgets it.
    pub gpu_digit: Option<u8>,
    /// A signal waiting for its confirmation: keys go to the prompt.
    pub signal_prompt: Option<SignalPrompt>,
    /// The processes tagged (Space) for `K` to signal together, in the
    /// order they were tagged; a tag whose process is listed no more is
    /// dropped with the sample that no longer lists it.
    pub process_tags: Vec<ProcessTag>,
    /// The process detail (Enter in Processes), while it is open: it
    /// takes the keys as the help does (the help opens over it).
    pub process_detail: Option<super::process_detail::ProcessDetail>,
    /// The largest useful scroll of the process detail as last drawn
    /// (rows below its view at the top) and the rows it showed: written
    /// by the drawing like `help_scroll_limit`, so its keys clamp to it
    /// and page by it.
    #[serde(skip)]
    pub detail_scroll_limit: Cell<usize>,
    #[serde(skip)]
    pub detail_page_rows: Cell<usize>,
    pub process_scroll: usize,
    /// Process lines in view as the processes pane was last drawn (below
    /// its header); 0 before it was drawn. Written by the drawing like
    /// `help_page_rows`: selecting a GPU scrolls the list only when that
    /// GPU's first line is out of this view.
    #[serde(skip)]
    pub process_lines_shown: Cell<usize>,
    /// Index of the selected block among the selected GPU's blocks, in
    /// layout order.
    pub selected_block: usize,
    /// The address of the block the user selected: after a sample the
    /// selection follows it (or the block now holding that address)
    /// instead of staying at an index that now names another block.
    pub selected_block_address: Option<u64>,
    /// The stress panel is open: panel keys act on it.
    pub stress_open: bool,
    /// Per GPU (NVML index), the pid whose probe's allocator to show when
    /// several processes on it have a probe (`v` cycles; applied from the
    /// next sample). A pid no longer there falls back to the first probe.
    pub allocator_pick: BTreeMap<u32, u32>,
    /// Why the last key did nothing ("no GPU 3: GPUs 0…1"), shown on the
    /// status line until the next key.
    pub notice: Option<String>,
    /// When `notice` was given (ms, the dashboard's clock): an answer to a
    /// key given after an OOM was seen comes before the OOM's line.
    pub notice_ms: u64,
    /// Below the size where the stress panel and the segment map sit side
    /// by side: the map is shown instead of the panel (`M`).
    pub stress_map: bool,
    /// Rows the help overlay is scrolled down (reset when it opens).
    pub help_scroll: usize,
    /// The largest useful `help_scroll` as the help was last drawn (rows
    /// of help below the view when scrolled to the top); `usize::MAX`
    /// before it was drawn. Only the drawing knows the terminal size and
    /// how the help wraps, so it writes this and the keys clamp to it:
    /// PgDn past the end leaves the scroll at the end, and PgUp moves at
    /// once. Not serialized: it describes the last frame, not the state.
    #[serde(skip)]
    pub help_scroll_limit: Cell<usize>,
    /// Rows of help in view as the help was last drawn (the popup's
    /// height inside its border); 0 before it was drawn. Written by the
    /// drawing like `help_scroll_limit`: PgUp/PgDn move by this page.
    #[serde(skip)]
    pub help_page_rows: Cell<usize>,
    /// The terminal's size (columns, rows) as last drawn or told by a
    /// resize; `None` before either. Written by the drawing like
    /// `help_scroll_limit` and by `update::on_resize`, so keys whose
    /// effect depends on the layout (`M`) can say what they do at this
    /// size, and keys below [`MIN_SCREEN`] do nothing but quit.
    #[serde(skip)]
    pub screen: Cell<Option<(u16, u16)>>,
}

/// The smallest terminal the dashboard and the viewer draw panes in
/// (columns, rows). Below it the screen says only its size: no key but
/// quit acts, since none of what the others do could be seen.
pub const MIN_SCREEN: (u16, u16) = (40, 10);

/// From this size the stress panel and the segment map sit side by side
/// (columns, rows); smaller, `M` shows one or the other.
pub const STRESS_BESIDE_MAP: (u16, u16) = (120, 40);

/// How the open stress panel is drawn, which decides what its keys can
/// act on: its tensor list is not drawn while the segment map is shown
/// in its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StressView {
    /// The panel, without the segment map beside it (below 120×40).
    Panel,
    /// The panel beside the segment map (from 120×40): `M` has nothing
    /// to switch.
    BesideMap,
    /// The segment map in place of the panel (`M` below 120×40).
    Map,
}

impl Default for UiState {
    fn default() -> Self {
        UiState {
            focus: Pane::Gpus,
            overlay: Overlay::None,
            paused: false,
            paused_at_ms: None,
            zoom: DEFAULT_ZOOM,
            selected_gpu: 0,
            process_filter: ProcessFilter::Set(String::new()),
            process_tree: true,
            process_sort: ProcessSort::default(),
            selected_process: None,
            selected_process_row: 0,
            signal_prompt: None,
            gpu_digit: None,
            process_tags: Vec::new(),
            process_detail: None,
            detail_scroll_limit: Cell::new(usize::MAX),
            detail_page_rows: Cell::new(0),
            process_scroll: 0,
            process_lines_shown: Cell::new(0),
            selected_block: 0,
            selected_block_address: None,
            stress_open: false,
            allocator_pick: BTreeMap::new(),
            notice: None,
            notice_ms: 0,
            help_scroll: 0,
            help_scroll_limit: Cell::new(usize::MAX),
            help_page_rows: Cell::new(0),
            stress_map: false,
            screen: Cell::new(None),
        }
    }
}

impl UiState {
    /// Selects line `at` of `lines` by what it is about (its process, so
    /// that the selection stays on it across re-sorts and samples).
    pub fn select_process_line(&mut self, lines: &[ProcessLine], at: usize) {
        if let Some(line) = lines.get(at) {
            self.selected_process = Some(line.key());
            self.selected_process_row = at;
        }
    }

    /// Whether the terminal, as last told (a resize) or drawn, is below
    /// [`MIN_SCREEN`]; `false` before either.
    pub fn too_small(&self) -> bool {
        self.screen
            .get()
            .is_some_and(|(columns, rows)| columns < MIN_SCREEN.0 || rows < MIN_SCREEN.1)
    }

    /// Whether the stress panel and the segment map sit side by side at
    /// `(columns, rows)`.
    pub fn stress_beside_map_at((columns, rows): (u16, u16)) -> bool {
        columns >= STRESS_BESIDE_MAP.0 && rows >= STRESS_BESIDE_MAP.1
    }

    /// Whether they did in the last frame drawn.
    pub fn stress_beside_map(&self) -> bool {
        self.screen.get().is_some_and(Self::stress_beside_map_at)
    }

    /// How the stress panel was drawn in the last frame (as the layout
    /// decides it); meaningful while it is open.
    pub fn stress_view(&self) -> StressView {
        if self.stress_beside_map() {
            StressView::BesideMap
        } else if self.stress_map {
            StressView::Map
        } else {
            StressView::Panel
        }
    }

    /// Whether `process` is tagged for `K` (Space).
    pub fn is_tagged(&self, process: &GpuProcess) -> bool {
        self.process_tags.iter().any(|t| t.holds(process))
    }

    /// The timeline window in milliseconds.
    pub fn window_ms(&self) -> u64 {
        ZOOM_WINDOWS_S[self.zoom.min(ZOOM_WINDOWS_S.len() - 1)] * 1000
    }
}

/// The status line's facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatusState {
    /// "sim" or "nvml".
    pub backend: String,
    /// Why the backend is a fallback, shown as a banner.
    pub banner: Option<String>,
    /// The banner with the reason in a few words, for a row too narrow
    /// for `banner` (before "vramtop doctor says why").
    pub banner_short: Option<String>,
    pub sample_interval_ms: u64,
    pub samples: u64,
    pub dropped_samples: u64,
    pub last_error: Option<String>,
    /// The user's home directory, so paths under it are written `~/…`
    /// (a snapshot's path then fits the status line).
    pub home_dir: Option<std::path::PathBuf>,
}

/// Everything the dashboard shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppState {
    pub gpus: Vec<GpuState>,
    pub ui: UiState,
    pub status: StatusState,
    /// Milliseconds since the dashboard started (the clock of the last sample).
    pub now_ms: u64,
    /// The stress panel (kept while closed: its tensors stay allocated).
    pub stress: StressPanel,
    /// Attached live probes (`docs/attach.md`).
    pub probes: super::source::ProbeBoard,
    /// Snapshots asked of probes from the dashboard.
    pub capture: super::capture::CaptureState,
    /// The pids of the simulated training processes on each GPU (NVML
    /// index), ascending: allocators `v` cycles through beside the probes'.
    pub simulated_allocators: BTreeMap<u32, Vec<u32>>,
    /// Which simulated processes the flags asked for could not start and
    /// why (no room for a CUDA context), said on the status line: the
    /// Processes pane does not list them, as nvidia-smi does not.
    pub sim_not_started: Vec<NotStarted>,
    /// Every visible allocator's allocated and reserved bytes, by (GPU,
    /// pid), for the processes pane.
    pub allocator_figures: AllocatorFigures,
}

/// `memory_allocated()` and `memory_reserved()` (bytes, `None` when the
/// source could not say) of allocators by (GPU index, pid).
pub type AllocatorFigures = BTreeMap<(u32, u32), (Option<u64>, Option<u64>)>;

impl AppState {
    /// The snapshots of this session a user may want to open later: the
    /// ones taken from the dashboard, then the last OOM snapshot a probe
    /// wrote; each once.
    pub fn session_snapshots(&self) -> Vec<std::path::PathBuf> {
        let mut out: Vec<std::path::PathBuf> = Vec::new();
        let oom = self.probes.oom_snapshot.as_ref().map(|o| &o.path);
        for path in self.capture.taken.iter().chain(oom) {
            if !out.contains(path) {
                out.push(path.clone());
            }
        }
        out
    }

    /// What the snapshot keys can act on now (their status-line hints).
    pub fn offers(&self) -> crate::app::keymap::Offers {
        crate::app::keymap::Offers {
            capture: super::capture::can_capture(self),
            open: self.capture.last.is_some(),
            open_oom: self.probes.oom_snapshot.is_some(),
            // As `v` and the digits act: on the selected GPU's row (none
            // without GPUs), and on the GPUs' numbers.
            next_allocator: self
                .gpus
                .get(self.ui.selected_gpu)
                .is_some_and(|g| self.probe_choice(g).is_some()),
            stress_allocator: self
                .gpus
                .get(self.ui.selected_gpu)
                .is_some_and(|g| self.only_the_stress_allocator_besides(g.index())),
            several_gpus: {
                let mut numbers: Vec<u32> = self.gpus.iter().map(GpuState::index).collect();
                numbers.sort_unstable();
                numbers.dedup();
                numbers.len() > 1
            },
            panel: crate::app::keymap::PanelOffers {
                scenario_loaded: self.stress.scenario.is_some(),
                tensors: self.stress.tensors.len(),
                size: self.stress.size_ends(),
                count: self.stress.count_ends(),
            },
        }
    }

    pub fn new(status: StatusState) -> Self {
        AppState {
            gpus: Vec::new(),
            ui: UiState::default(),
            status,
            now_ms: 0,
            stress: StressPanel::default(),
            probes: super::source::ProbeBoard::default(),
            capture: super::capture::CaptureState::default(),
            simulated_allocators: BTreeMap::new(),
            sim_not_started: Vec::new(),
            allocator_figures: AllocatorFigures::new(),
        }
    }

    /// The selected GPU, if any.
    pub fn selected(&self) -> Option<&GpuState> {
        self.gpus
            .get(self.ui.selected_gpu)
            .or_else(|| self.gpus.first())
    }

    /// Whether the listed processes are live ones of this machine that a
    /// signal may be sent to: only from the driver (NVML). A simulated
    /// GPU's pids are made up (one may be a real process's), and a
    /// snapshot's are of another time.
    pub fn processes_are_live(&self) -> bool {
        self.status.backend == "nvml"
    }

    /// The index in `lines` (as [`AppState::process_lines`] gives them) of
    /// the selected line: the line of the selected process, else (it
    /// ended, or none was picked) the one at its last row, clamped to the
    /// list; `None` for an empty list.
    pub fn selected_process_index(&self, lines: &[ProcessLine]) -> Option<usize> {
        if lines.is_empty() {
            return None;
        }
        let ui = &self.ui;
        ui.selected_process
            .and_then(|key| lines.iter().position(|l| l.key() == key))
            .or(Some(ui.selected_process_row.min(lines.len() - 1)))
    }

    /// The first line of the process list drawn in a pane of `shown`
    /// lines: the user's scroll, never past the last page, and while
    /// Processes has the focus moved just enough to show the selected
    /// line (a re-sort or a sample may have carried it out of view). The
    /// pane draws from it and the keys move from it.
    pub fn process_view_first(&self, lines: &[ProcessLine], shown: usize) -> usize {
        let shown = shown.max(1);
        let first = self
            .ui
            .process_scroll
            .min(lines.len().saturating_sub(shown));
        match self.selected_process_index(lines) {
            Some(at) if self.ui.focus == Pane::Processes => {
                if at < first {
                    at
                } else if at >= first + shown {
                    at + 1 - shown
                } else {
                    first
                }
            }
            _ => first,
        }
    }

    /// Selects line `at` of `lines` and, unless it is drawn already,
    /// scrolls the list to put it at the top (the last page in view where
    /// it is on the last page, as the pane would draw it). Selecting a GPU
    /// and an OOM seen in a probed process bring a line into view this
    /// way; the scroll is the user's again afterwards.
    pub fn show_process_line(&mut self, lines: &[ProcessLine], at: usize) {
        if at >= lines.len() {
            return;
        }
        let ui = &mut self.ui;
        // The selection follows too: `K` then names the line's process.
        ui.select_process_line(lines, at);
        let shown = ui.process_lines_shown.get();
        // The first line drawn: the pane clamps the scroll the same way.
        let first = ui.process_scroll.min(lines.len().saturating_sub(shown));
        if shown > 0 && at >= first && at - first < shown {
            return;
        }
        ui.process_scroll = at.min(lines.len().saturating_sub(shown.max(1)));
    }

    /// Selects the line of process `pid` and brings it into view (see
    /// [`AppState::show_process_line`]): its line on GPU `gpu` (NVML
    /// index) where it has one, else its first. `false`, and nothing
    /// moves, when no line shows it (the filter hides it, or the driver
    /// does not list it).
    pub fn show_process(&mut self, pid: u32, gpu: Option<u32>) -> bool {
        let lines = self.process_lines();
        let of_pid = |l: &ProcessLine| matches!(l, ProcessLine::Process(r) if r.process.pid == pid);
        let at = lines
            .iter()
            .position(|l| of_pid(l) && gpu.is_none_or(|g| l.gpu() == g))
            .or_else(|| lines.iter().position(of_pid));
        let Some(at) = at else {
            return false;
        };
        self.show_process_line(&lines, at);
        true
    }

    /// The lines of the processes pane (see [`ProcessLine`]), filtered by
    /// the process filter, in tree order when the tree is on, sorted as
    /// the user chose (`s`, `S`).
    pub fn process_lines(&self) -> Vec<ProcessLine> {
        let ui = &self.ui;
        let samples: Vec<&GpuSample> = self.gpus.iter().filter_map(GpuState::sample).collect();
        let mut lines: Vec<ProcessLine> = process_rows_sorted(
            &samples,
            ui.process_tree,
            ui.process_filter.text(),
            Some(ui.process_sort),
        )
        .into_iter()
        .map(ProcessLine::Process)
        .collect();
        // A filter looks for processes: the per-GPU remainder is not one.
        if !ui.process_filter.text().is_empty() {
            return lines;
        }
        // MIG instances share their parent's memory: counted once, there.
        for s in samples.iter().filter(|s| s.mig.is_none()) {
            if s.processes.is_none() {
                lines.push(ProcessLine::Unlisted { gpu: s.index });
            }
            if let Some(bytes) = unattributed(s)
                && bytes > 0
            {
                lines.push(ProcessLine::Unattributed {
                    gpu: s.index,
                    bytes,
                });
            }
        }
        lines
    }

    /// Takes one sample: readings from telemetry and the allocator views
    /// known per GPU index. Extends every GPU's timeline and marks
    /// empty_cache/OOM events seen in the allocator counters.
    pub fn apply_sample(
        &mut self,
        now_ms: u64,
        readings: Vec<GpuReading>,
        mut allocators: BTreeMap<u32, AllocatorView>,
    ) {
        self.now_ms = now_ms;
        self.status.samples += 1;
        // While the stress panel is open its allocator is its GPU's view.
        // Closed, it still is where it holds memory on the GPU and no other
        // allocator is seen there: the breakdown then says whose it is
        // rather than "no process's allocator" beside the panel's process.
        if let (Some(gpu), Some(view)) = (self.stress.gpu, self.stress.view.as_ref()) {
            let holds_memory_here = self.stress.device == PanelDevice::Gpu && view.reserved() > 0;
            if self.ui.stress_open || (holds_memory_here && !allocators.contains_key(&gpu)) {
                allocators.insert(gpu, view.clone());
            }
        }
        // Closed, the panel keeps its tensors: its process row keeps their
        // figures.
        if let (Some(gpu), Some(view)) = (self.stress.gpu, self.stress.view.as_ref())
            && let Some(pid) = view.pid
        {
            self.allocator_figures
                .insert((gpu, pid), (view.known_allocated(), view.known_reserved()));
        }
        let mut next = Vec::with_capacity(readings.len());
        for reading in readings {
            let index = match &reading {
                GpuReading::Ok(s) => s.index,
                GpuReading::Lost { index, .. } => *index,
            };
            let is_mig = reading.sample().is_some_and(|s| s.mig.is_some());
            let previous = self
                .gpus
                .iter()
                .position(|g| {
                    g.index() == index && g.sample().is_some_and(|s| s.mig.is_some()) == is_mig
                })
                .map(|i| self.gpus.swap_remove(i));
            let allocator = if is_mig {
                None
            } else {
                allocators.remove(&index)
            };
            let mut history = previous
                .as_ref()
                .map(|g| g.history.clone())
                .unwrap_or_default();
            // Counters are compared only within one allocator: when the
            // view changes hands (another probe, the stress panel, the
            // simulation) a difference says nothing about an OOM or a release.
            if let (Some(prev), Some(now)) = (
                previous.as_ref().and_then(|g| g.allocator.as_ref()),
                allocator.as_ref(),
            ) && prev.pid == now.pid
                && (prev.pid.is_some() || prev.source == now.source)
            {
                // An unknown counter (sent as null) compares to nothing.
                let known = |key: &str| now.knows(key) && prev.knows(key);
                if known("num_ooms") && now.stats.num_ooms > prev.stats.num_ooms {
                    history.mark(Marker {
                        t_ms: now_ms,
                        kind: MarkerKind::Oom,
                        count: u64::try_from(
                            now.stats.num_ooms.saturating_sub(prev.stats.num_ooms),
                        )
                        .unwrap_or(1),
                    });
                }
                if known("num_device_free")
                    && now.stats.num_device_free > prev.stats.num_device_free
                {
                    history.mark(Marker {
                        t_ms: now_ms,
                        kind: MarkerKind::EmptyCache,
                        count: 1,
                    });
                }
            }
            history.push(HistoryPoint {
                t_ms: now_ms,
                allocated: allocator.as_ref().and_then(AllocatorView::known_allocated),
                reserved: allocator.as_ref().and_then(AllocatorView::known_reserved),
                // The device the allocator runs on, as the breakdown: a
                // scenario device's own use, not the GPU's beside it.
                driver_used: match allocator.as_ref().and_then(|a| a.device_memory) {
                    Some((_, used)) => Some(used),
                    None => reading.sample().and_then(|s| s.memory_used),
                },
                device: PlottedDevice::of(allocator.as_ref()),
            });
            next.push(GpuState {
                reading,
                allocator,
                history,
                allocator_at_reading: None,
            });
        }
        self.gpus = next;
        if self.ui.selected_gpu >= self.gpus.len() {
            self.ui.selected_gpu = self.gpus.len().saturating_sub(1);
        }
        self.follow_selected_block();
        self.drop_stale_tags();
        self.follow_process_detail();
    }

    /// Drops the tags of processes the list shows no more: ended, or their
    /// pid now running another command (reused). A process the list cannot
    /// show (its GPU lost, its driver not listing) loses its tag too: `K`
    /// signals only what the pane shows tagged.
    fn drop_stale_tags(&mut self) {
        if self.ui.process_tags.is_empty() {
            return;
        }
        let mut tags = std::mem::take(&mut self.ui.process_tags);
        tags.retain(|t| self.whole_gpu_processes().any(|(_, p)| t.holds(p)));
        self.ui.process_tags = tags;
    }

    /// The processes of whole GPUs with their GPU's number, as the
    /// process list takes them (a MIG row lists its GPU's processes
    /// again).
    pub fn whole_gpu_processes(&self) -> impl Iterator<Item = (u32, &GpuProcess)> {
        self.gpus
            .iter()
            .filter_map(GpuState::sample)
            .filter(|s| s.mig.is_none())
            .flat_map(|s| s.listed_processes().iter().map(move |p| (s.index, p)))
    }

    /// Puts the selection back on the block the user selected, by address:
    /// the block starting there, else the block now covering it (after a
    /// merge), else the index stays.
    fn follow_selected_block(&mut self) {
        let Some(address) = self.ui.selected_block_address else {
            return;
        };
        let Some(view) = self.selected().and_then(|g| g.allocator.as_ref()) else {
            return;
        };
        let blocks = || view.layout.iter().flat_map(|s| &s.blocks);
        let found = blocks().position(|b| b.address == address).or_else(|| {
            blocks().position(|b| b.address <= address && address - b.address < b.size)
        });
        if let Some(i) = found {
            self.ui.selected_block = i;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::GpuSample;

    const GIB: u64 = 1 << 30;

    fn sample(index: u32, used: u64) -> GpuSample {
        let mut s = GpuSample::unknown(index, "GPU");
        s.memory_total = Some(80 * GIB);
        s.memory_used = Some(used);
        s.memory_free = Some(80 * GIB - used);
        s
    }

    fn proc_(pid: u32, parent: Option<u32>, used: Option<u64>) -> GpuProcess {
        GpuProcess {
            user: Some("u".into()),
            command: Some(format!("python job{pid}")),
            parent_pid: parent,
            ..GpuProcess::new(pid, used)
        }
    }

    #[test]
    fn breakdown_splits_driver_used_into_allocated_cached_and_context() {
        let s = sample(0, 10 * GIB);
        let mut stats = DeviceStats::default();
        stats.allocated_bytes.all.current = (6 * GIB) as i64;
        stats.reserved_bytes.all.current = (9 * GIB) as i64;
        let a = AllocatorView::new("t".into(), None, stats, Vec::new());
        let b = breakdown(&s, Some(&a)).expect("all known");
        assert_eq!(b.allocated, 6 * GIB);
        assert_eq!(b.cached_free, 3 * GIB);
        assert_eq!(b.context_and_other, GIB);
        assert_eq!(b.free, 70 * GIB);
        assert_eq!(
            b.allocated + b.cached_free + b.context_and_other + b.free,
            b.total
        );
        assert_eq!(
            breakdown(&s, None),
            None,
            "no allocator: no split, not zeros"
        );
    }

    #[test]
    fn breakdown_free_is_the_drivers_free_and_its_own_reservation_a_part_of_its_own() {
        // NVML v2: total = used + free + the driver's reservation.
        let mut s = sample(0, 10 * GIB);
        s.memory_free = Some(70 * GIB - 512 * (1 << 20));
        let mut stats = DeviceStats::default();
        stats.allocated_bytes.all.current = (6 * GIB) as i64;
        stats.reserved_bytes.all.current = (9 * GIB) as i64;
        let a = AllocatorView::new("t".into(), None, stats, Vec::new());
        let b = breakdown(&s, Some(&a)).expect("all known");
        assert_eq!(b.free, s.memory_free.expect("set"));
        assert_eq!(b.driver_held, 512 << 20);
        assert_eq!(
            b.allocated + b.cached_free + b.context_and_other + b.free + b.driver_held,
            b.total
        );
        // No separate free figure: free is what used leaves.
        s.memory_free = None;
        let m = DeviceMemory::of(&s).expect("known");
        assert_eq!((m.free, m.driver_held), (70 * GIB, 0));
        // A free figure past what used leaves is cut to it, never summed
        // past the total.
        s.memory_free = Some(75 * GIB);
        let m = DeviceMemory::of(&s).expect("known");
        assert_eq!((m.free, m.driver_held), (70 * GIB, 0));
    }

    #[test]
    fn unattributed_memory_is_what_no_listed_process_holds() {
        let mut s = sample(0, 10 * GIB);
        s.processes = Some(vec![
            proc_(1, None, Some(4 * GIB)),
            proc_(2, None, Some(GIB)),
        ]);
        assert_eq!(unattributed(&s), Some(5 * GIB));
        s.processes
            .get_or_insert_with(Vec::new)
            .push(proc_(3, None, None));
        assert_eq!(
            unattributed(&s),
            None,
            "one unknown figure: unknown, not a guess"
        );
    }

    #[test]
    fn a_gpu_whose_driver_cannot_list_processes_has_no_unattributed_figure() {
        let mut s = sample(0, 10 * GIB);
        s.processes = None;
        assert_eq!(unattributed(&s), None, "unknown, not all of used");
        s.processes = Some(Vec::new());
        assert_eq!(unattributed(&s), Some(10 * GIB));
    }

    #[test]
    fn process_tree_puts_children_under_parents_and_flags_their_contexts() {
        let mut s = sample(0, 10 * GIB);
        s.processes = Some(vec![
            proc_(100, Some(1), Some(4 * GIB)),
            proc_(101, Some(100), Some(GIB)),
            proc_(200, Some(1), Some(GIB)),
        ]);
        let rows = process_rows(&[&s], true, "");
        let order: Vec<(u32, usize, bool)> = rows
            .iter()
            .map(|r| (r.process.pid, r.depth, r.own_context_in_child))
            .collect();
        assert_eq!(
            order,
            vec![(100, 0, false), (101, 1, true), (200, 0, false)]
        );
        let filtered = process_rows(&[&s], false, "JOB2");
        assert_eq!(filtered.len(), 1);
        assert_eq!(filtered[0].process.pid, 200);
        // The filter finds what the line shows: the worker by its mark.
        // Its parent filtered out, it is a line of its own, not a branch
        // pointing at a line not drawn.
        let workers = process_rows(&[&s], true, "Context");
        let found: Vec<(u32, usize, bool)> = workers
            .iter()
            .map(|r| (r.process.pid, r.depth, r.own_context_in_child))
            .collect();
        assert_eq!(found, [(101, 0, true)]);
    }

    #[test]
    fn a_child_on_several_gpus_sits_under_its_parents_line_on_each_gpu() {
        // The launcher (10) and its worker (11) on GPUs 0-3, as a shell
        // that starts a trainer shows on every GPU the trainer uses; on
        // GPU 4 only the worker: a root there.
        let samples: Vec<GpuSample> = (0..5)
            .map(|g| {
                let mut s = sample(g, 10 * GIB);
                let mut processes = vec![proc_(11, Some(10), Some(GIB))];
                if g < 4 {
                    processes.insert(0, proc_(10, Some(1), None));
                }
                s.processes = Some(processes);
                s
            })
            .collect();
        let refs: Vec<&GpuSample> = samples.iter().collect();
        for sort in [None, Some(ProcessSort::default())] {
            let rows = process_rows_sorted(&refs, true, "", sort);
            let mut parent_gpu = None;
            for r in &rows {
                match (r.process.pid, r.depth) {
                    (10, 0) => parent_gpu = Some(r.gpu),
                    (11, 1) => assert_eq!(
                        Some(r.gpu),
                        parent_gpu,
                        "the worker's GPU {} line under the launcher's GPU {parent_gpu:?} line ({sort:?})",
                        r.gpu
                    ),
                    (11, 0) => assert_eq!(r.gpu, 4, "a root only where no parent line is"),
                    other => panic!("unexpected line {other:?} ({sort:?})"),
                }
            }
            assert_eq!(rows.len(), 9, "every line once ({sort:?})");
        }
    }

    #[test]
    fn processes_listed_as_each_others_parents_are_still_drawn() {
        // 10's parent is 11 and 11's is 10: neither is a root, yet both are
        // on the GPU; with a root beside them, and a chain deeper than the
        // tree's indent.
        let mut s = sample(0, 40 * GIB);
        let mut processes = vec![
            proc_(10, Some(11), Some(GIB)),
            proc_(11, Some(10), Some(GIB)),
            proc_(20, Some(1), Some(GIB)),
        ];
        // 100 <- 101 <- ... <- 129: thirty generations.
        processes.push(proc_(100, Some(1), Some(GIB)));
        for pid in 101..130 {
            processes.push(proc_(pid, Some(pid - 1), Some(GIB)));
        }
        s.processes = Some(processes);
        for sort in [None, Some(ProcessSort::default())] {
            let rows = process_rows_sorted(&[&s], true, "", sort);
            let mut pids: Vec<u32> = rows.iter().map(|r| r.process.pid).collect();
            pids.sort_unstable();
            let mut want: Vec<u32> = [10, 11, 20].into_iter().chain(100..130).collect();
            want.sort_unstable();
            assert_eq!(pids, want, "every line once ({sort:?})");
            assert!(rows.iter().all(|r| r.depth <= MAX_TREE_DEPTH), "{sort:?}");
        }
    }

    #[test]
    fn by_memory_the_tree_puts_the_family_holding_most_first() {
        // A launcher (10: 1 GiB) with two workers (5 and 4 GiB) holds 10
        // GiB in all: above a lone 6 GiB process, though each of its lines
        // holds less. Its workers go biggest first under it.
        let mut s = sample(0, 20 * GIB);
        s.processes = Some(vec![
            proc_(10, Some(1), Some(GIB)),
            proc_(11, Some(10), Some(4 * GIB)),
            proc_(12, Some(10), Some(5 * GIB)),
            proc_(20, Some(1), Some(6 * GIB)),
        ]);
        let order = |sort: ProcessSort| -> Vec<u32> {
            process_rows_sorted(&[&s], true, "", Some(sort))
                .iter()
                .map(|r| r.process.pid)
                .collect()
        };
        assert_eq!(order(ProcessSort::default()), [10, 12, 11, 20]);
        assert_eq!(order(ProcessSort::default().reversed()), [20, 10, 11, 12]);
        let flat: Vec<u32> = process_rows_sorted(&[&s], false, "", Some(ProcessSort::default()))
            .iter()
            .map(|r| r.process.pid)
            .collect();
        assert_eq!(flat, [20, 12, 11, 10], "flat: each line by its own memory");
    }

    #[test]
    fn history_is_bounded_and_windows_by_time() {
        let mut h = History::default();
        for t in 0..(HISTORY_CAPACITY as u64 + 10) {
            h.push(HistoryPoint {
                t_ms: t * 1000,
                allocated: None,
                reserved: None,
                driver_used: Some(t),
                device: PlottedDevice::Gpu,
            });
        }
        assert_eq!(h.points.len(), HISTORY_CAPACITY);
        let now = (HISTORY_CAPACITY as u64 + 9) * 1000;
        assert_eq!(h.window(now, 30_000).count(), 31);
    }

    #[test]
    fn timeline_driver_used_is_the_scenario_devices_while_the_allocator_runs_on_one() {
        let mut st = AppState::new(StatusState::default());
        let on_scenario_device = AllocatorView::new(
            "stress panel".into(),
            None,
            DeviceStats::default(),
            Vec::new(),
        )
        .on_device(8 * GIB, 6 * GIB);
        st.apply_sample(
            0,
            vec![GpuReading::Ok(sample(0, GIB))],
            BTreeMap::from([(0, on_scenario_device)]),
        );
        st.apply_sample(1000, vec![GpuReading::Ok(sample(0, GIB))], BTreeMap::new());
        let used: Vec<Option<u64>> = st.gpus[0]
            .history
            .points
            .iter()
            .map(|p| p.driver_used)
            .collect();
        assert_eq!(used, vec![Some(6 * GIB), Some(GIB)]);
        let devices: Vec<PlottedDevice> =
            st.gpus[0].history.points.iter().map(|p| p.device).collect();
        assert_eq!(
            devices,
            vec![
                PlottedDevice::Scenario { capacity: 8 * GIB },
                PlottedDevice::Gpu
            ],
            "each point says which device its figures are of"
        );
        assert_eq!(st.gpus[0].history.device_at(500), devices.first().copied());
        assert_eq!(st.gpus[0].history.device_at(5000), Some(PlottedDevice::Gpu));
    }

    #[test]
    fn apply_sample_marks_ooms_and_releases_from_allocator_counters() {
        let mut st = AppState::new(StatusState::default());
        let view = |ooms: i64, frees: i64| {
            let stats = DeviceStats {
                num_ooms: ooms,
                num_device_free: frees,
                ..DeviceStats::default()
            };
            AllocatorView::new("t".into(), Some(7), stats, Vec::new())
        };
        st.apply_sample(
            0,
            vec![GpuReading::Ok(sample(0, GIB))],
            BTreeMap::from([(0, view(0, 0))]),
        );
        st.apply_sample(
            1000,
            vec![GpuReading::Ok(sample(0, GIB))],
            BTreeMap::from([(0, view(1, 2))]),
        );
        // A loop failing every step: 40 more OOMs by the next sample are
        // one mark that counts them all.
        st.apply_sample(
            2000,
            vec![GpuReading::Ok(sample(0, GIB))],
            BTreeMap::from([(0, view(41, 2))]),
        );
        let h = &st.gpus[0].history;
        assert_eq!(h.points.len(), 3);
        let marks: Vec<(MarkerKind, u64)> = h.markers.iter().map(|m| (m.kind, m.count)).collect();
        assert_eq!(
            marks,
            vec![
                (MarkerKind::Oom, 1),
                (MarkerKind::EmptyCache, 1),
                (MarkerKind::Oom, 40)
            ]
        );
        assert_eq!(st.status.samples, 3);
    }

    #[test]
    fn an_unknown_oom_count_marks_no_oom() {
        let mut st = AppState::new(StatusState::default());
        let view = |ooms: i64, unknown: bool| {
            let stats = DeviceStats {
                num_ooms: ooms,
                ..DeviceStats::default()
            };
            let v = AllocatorView::new("t".into(), Some(7), stats, Vec::new());
            if unknown {
                v.with_unknown(vec!["num_ooms".to_string()])
            } else {
                v
            }
        };
        for (t, v) in [
            (0, view(0, true)),
            (1000, view(2, false)),
            (2000, view(0, true)),
        ] {
            st.apply_sample(
                t,
                vec![GpuReading::Ok(sample(0, GIB))],
                BTreeMap::from([(0, v)]),
            );
        }
        assert!(st.gpus[0].history.markers.is_empty());
    }

    #[test]
    fn pane_tab_order_wraps_both_ways() {
        assert_eq!(Pane::Processes.next(), Pane::Gpus);
        assert_eq!(Pane::Gpus.prev(), Pane::Processes);
    }

    #[test]
    fn pytorchs_own_peak_is_known_only_where_sent_and_not_below_the_current_figure() {
        let mut stats = DeviceStats::default();
        stats.allocated_bytes.all.current = 20 << 20;
        stats.allocated_bytes.all.peak = 216 << 20;
        stats.reserved_bytes.all.current = 40 << 20;
        stats.reserved_bytes.all.peak = 232 << 20;
        let peak = OwnPeak::of(&stats, |_| true).expect("both sent");
        assert_eq!(
            (peak.allocated, peak.reserved),
            (Some(216 << 20), Some(232 << 20))
        );
        assert_eq!(peak.since, OWN_PEAK_SINCE);
        // Sent as null: unknown, that figure only.
        let peak = OwnPeak::of(&stats, |k| k != "reserved_bytes.all.peak").expect("one sent");
        assert_eq!((peak.allocated, peak.reserved), (Some(216 << 20), None));
        // Left out (the slot holds 0, below the current figure): none.
        stats.allocated_bytes.all.peak = 0;
        stats.reserved_bytes.all.peak = 0;
        assert_eq!(OwnPeak::of(&stats, |_| true), None);
        // A view without one (a simulated allocator's) has none.
        let view = AllocatorView::new("sim".to_string(), Some(1), stats, Vec::new());
        assert_eq!(view.own_peak, None);
    }
}
