//! Where the dashboard's data comes from: the chosen telemetry backend plus
//! the allocators vramtop can see (the simulated training processes, the
//! stress panel, and live probes: `docs/attach.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::state::{
    AllocatorFigures, AllocatorView, AppState, Breakdown, GpuState, Marker, MarkerKind, OwnPeak,
    REQUESTED_SIZE, SegmentTotals, SegmentsAge, breakdown, unattributed,
};
use crate::alloc::{DeviceStats, Fragmentation};
use crate::device::GpuReading;
use crate::device::sim::{NotStarted, SimCluster, TrainerView, not_started_note};
use crate::probe::pid::{PidSource, VisibleDevices};
use crate::probe::registry::{DeviceData, OomEvent, pid_order};
use crate::probe::{ProbeSnapshot, ProbeState};

/// Allocator views by GPU index (one per GPU: the first visible process).
pub fn allocator_views(sim: Option<&SimCluster>) -> BTreeMap<u32, AllocatorView> {
    picked_allocator_views(sim, &BTreeMap::new())
}

/// [`allocator_views`] with the trainer `picks` names for a GPU shown in
/// place of the GPU's first one.
fn picked_allocator_views(
    sim: Option<&SimCluster>,
    picks: &BTreeMap<u32, u32>,
) -> BTreeMap<u32, AllocatorView> {
    let mut out = BTreeMap::new();
    if let Some(cluster) = sim {
        // The lowest pid by default: the first of `v`'s order.
        let mut trainers = cluster.trainers();
        trainers.sort_by_key(|t| t.pid);
        for t in trainers {
            if picks.get(&t.gpu) == Some(&t.pid) {
                out.insert(t.gpu, trainer_view(t));
            } else {
                out.entry(t.gpu).or_insert_with(|| trainer_view(t));
            }
        }
    }
    out
}

/// The GPU, pid and counters of each simulated training process
/// ([`SimCluster::trainer_stats`]), none without a simulation.
pub type TrainerStats = Vec<(u32, u32, DeviceStats)>;

/// The pids of the simulated training processes on each GPU, ascending.
pub fn simulated_allocators(trainers: &TrainerStats) -> BTreeMap<u32, Vec<u32>> {
    let mut out: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for &(gpu, pid, _) in trainers {
        out.entry(gpu).or_default().push(pid);
    }
    for pids in out.values_mut() {
        pids.sort_unstable();
        pids.dedup();
    }
    out
}

/// `memory_allocated()` and `memory_reserved()` of every allocator seen in
/// a sample (each simulated trainer, each probe's devices) by (GPU, pid),
/// `None` where the source could not say: the processes pane shows them
/// beside every process, not only the one whose view the breakdown shows.
pub fn allocator_figures(trainers: &TrainerStats, probes: &ProbeSnapshot) -> AllocatorFigures {
    let of = |stats: &DeviceStats, knows: &dyn Fn(&str) -> bool| {
        let known = |key: &str, value: i64| knows(key).then(|| value.max(0) as u64);
        (
            known(
                "allocated_bytes.all.current",
                stats.allocated_bytes.all.current,
            ),
            known(
                "reserved_bytes.all.current",
                stats.reserved_bytes.all.current,
            ),
        )
    };
    let mut out = AllocatorFigures::new();
    for (gpu, pid, stats) in trainers {
        out.insert((*gpu, *pid), of(stats, &|_| true));
    }
    for p in probes.probes.iter().filter(|p| p.status.is_connected()) {
        let Some(pid) = p.pid() else {
            continue;
        };
        for (&device, data) in &p.devices {
            let (Some(gpu), Some(stats)) = (p.gpu_index(device), data.stats.as_ref()) else {
                continue;
            };
            out.insert((gpu, pid), of(stats, &|key| data.knows(key)));
        }
    }
    out
}

/// The allocator view of one simulated training process.
pub fn trainer_view(t: TrainerView) -> AllocatorView {
    AllocatorView::new(
        format!("pid {} (simulated training, step {})", t.pid, t.step),
        Some(t.pid),
        t.stats,
        t.layout,
    )
}

/// Every attached probe's allocator view with the GPU (NVML index) it is
/// on, by pid (numerically: a GPU shows its lowest-pid probe by default,
/// the first of `v`'s order, where socket names sort "11144" before
/// "9180"); devices whose GPU is unknown (unresolved
/// `CUDA_VISIBLE_DEVICES`) or that sent no stats yet are left out. The
/// shape `vramtop serve` and the dashboard read.
pub fn probe_views(probes: &ProbeSnapshot) -> Vec<(u32, AllocatorView)> {
    let mut connected: Vec<&ProbeState> = probes
        .probes
        .iter()
        .filter(|p| p.status.is_connected())
        .collect();
    connected.sort_by_key(|p| pid_order(p));
    let mut out = Vec::new();
    for p in connected {
        for (&device, data) in &p.devices {
            let (Some(gpu), Some(stats)) = (p.gpu_index(device), data.stats.as_ref()) else {
                continue;
            };
            out.push((gpu, probe_view(p, device, data, stats)));
        }
    }
    out
}

/// The allocator view of one device of a probe, its `null`s as unknown.
fn probe_view(
    p: &ProbeState,
    device: u32,
    data: &DeviceData,
    stats: &crate::alloc::DeviceStats,
) -> AllocatorView {
    let mut unknown = data.unknown_stats.clone();
    if data.requested_unknown {
        unknown.push(REQUESTED_SIZE.to_string());
    }
    let view = AllocatorView::new(
        probe_source(p, device),
        p.pid(),
        stats.clone(),
        data.segments.clone().unwrap_or_default(),
    )
    .with_unknown(unknown)
    .with_own_peak(OwnPeak::of(stats, |key| data.knows(key)));
    let age = match &data.segments {
        None => Some(SegmentsAge::NotYet),
        Some(layout) => SegmentsAge::of(
            data.segments_time,
            data.stats_time,
            SegmentTotals::of(layout),
            view.known_reserved().zip(view.known_allocated()),
        ),
    };
    view.with_segments_age(age)
}

/// "pid 5678 (probe, cuda:0: train.py --lr 3e-4)", with the probe's own pid
/// when its namespace numbers it differently.
/// The label names the allocator's owner: it is also the `source` of
/// `--once --json`, so it is data, not a sentence; a part the probe did not
/// say (no pid before its hello, no command line) is left out.
fn probe_source(p: &ProbeState, device: u32) -> String {
    let pid = p.pid().map(|x| format!("pid {x} ")).unwrap_or_default();
    let ns = match (&p.hello, p.host_pid) {
        (Some(h), Some(host)) if h.pid != host => format!(", pid {} in its namespace", h.pid),
        _ => String::new(),
    };
    let command = p.command().map(|c| format!(": {c}")).unwrap_or_default();
    format!("{pid}(probe{ns}, cuda:{device}{command})")
}

/// Maps the probes' `CUDA_VISIBLE_DEVICES=GPU-<uuid>,…` to NVML indices with
/// the UUIDs of `readings` (integer lists need no readings), and flags the
/// figures that cannot be on these GPUs (a GPU the machine does not have,
/// reserved above the GPU's memory): those are not drawn. Call before
/// taking views.
pub fn resolve_probe_devices(probes: &mut ProbeSnapshot, readings: &[GpuReading]) {
    let gpus: Vec<(u32, Option<u64>)> = readings
        .iter()
        .map(|r| match r {
            // A MIG instance's memory is part of its GPU's: no total to hold to.
            GpuReading::Ok(s) => (s.index, s.memory_total.filter(|_| s.mig.is_none())),
            GpuReading::Lost { index, .. } => (*index, None),
        })
        .collect();
    let uuids: Vec<(u32, String)> = readings
        .iter()
        .filter_map(GpuReading::sample)
        .filter(|s| s.mig.is_none())
        .filter_map(|s| Some((s.index, s.uuid.clone()?)))
        .collect();
    for p in &mut probes.probes {
        p.visible_devices = p.visible_devices.resolve_uuids(&uuids);
        p.check_against_gpus(&gpus);
    }
}

/// Puts the probed processes into the simulated GPUs' readings, as NVML
/// would list them on a real GPU: one process row per probe on a GPU
/// (its reserved bytes plus a CUDA context of `context_bytes`) and that
/// much more driver-used memory, up to the GPU's total. Without it a probe
/// of a stand-in `torch` on the simulated GPU was drawn as that GPU's
/// allocator while "used" held only the simulation's own processes:
/// "context & other" mixed two processes and the probe had no row. Only
/// for the simulation: NVML already counts every process.
///
/// Returns the bytes added to each GPU's driver used (by GPU index, only
/// GPUs it added to): the simulated device's own `cudaMemGetInfo`, which
/// the stress panel's worker reads, does not count them.
pub fn account_probes_in_simulation(
    readings: &mut [GpuReading],
    probes: &ProbeSnapshot,
    context_bytes: u64,
) -> BTreeMap<u32, u64> {
    let mut added: BTreeMap<u32, u64> = BTreeMap::new();
    for p in probes.probes.iter().filter(|p| p.status.is_connected()) {
        let Some(pid) = p.pid() else {
            continue;
        };
        // Bytes the probe's process holds on each GPU (several CUDA
        // devices of one process may map to one GPU only in a damaged
        // visible-devices list: summed, as the driver would).
        let mut held: BTreeMap<u32, u64> = BTreeMap::new();
        for (&device, data) in &p.devices {
            let (Some(gpu), Some(stats)) = (p.gpu_index(device), data.stats.as_ref()) else {
                continue;
            };
            let reserved = if data.knows("reserved_bytes.all.current") {
                u64::try_from(stats.reserved_bytes.all.current).unwrap_or(0)
            } else {
                0
            };
            let entry = held.entry(gpu).or_insert(context_bytes);
            *entry = entry.saturating_add(reserved);
        }
        for (gpu, bytes) in held {
            let Some(sample) = readings.iter_mut().find_map(|r| match r {
                GpuReading::Ok(s) if s.index == gpu && s.mig.is_none() => Some(s),
                _ => None,
            }) else {
                continue;
            };
            if sample.listed_processes().iter().any(|row| row.pid == pid) {
                continue;
            }
            if let Some(used) = sample.memory_used.as_mut() {
                let total = sample.memory_total.unwrap_or(u64::MAX);
                let before = *used;
                *used = used.saturating_add(bytes).min(total);
                // At most `bytes`; 0 where used was already past total.
                let grew = used.saturating_sub(before);
                if let Some(free) = sample.memory_free.as_mut() {
                    *free = free.saturating_sub(grew);
                }
                if grew > 0 {
                    let entry = added.entry(gpu).or_insert(0);
                    *entry = entry.saturating_add(grew);
                }
            }
            // A driver that cannot list processes keeps its list unknown.
            let Some(list) = sample.processes.as_mut() else {
                continue;
            };
            list.push(crate::device::GpuProcess {
                user: p.user.clone(),
                command: p.command(),
                ..crate::device::GpuProcess::new(pid, Some(bytes))
            });
        }
    }
    added
}

/// Allocator views by GPU index: the simulated training processes, then
/// the probes over them (a real probe's figures win). With several probes on
/// one GPU, the one whose pid `picks` names for that GPU (the dashboard's
/// `v` key) is shown, else the first socket's; all are in `--once --json`.
pub fn allocator_views_with_probes(
    sim: Option<&SimCluster>,
    probes: &ProbeSnapshot,
    picks: &BTreeMap<u32, u32>,
) -> BTreeMap<u32, AllocatorView> {
    let mut out = picked_allocator_views(sim, picks);
    let mut taken = BTreeSet::new();
    for (gpu, view) in probe_views(probes) {
        let pick = picks.get(&gpu);
        let picked = pick.is_some_and(|&pid| view.pid == Some(pid));
        // A probe wins over a trainer, unless `v` picked the trainer.
        let trainer_picked =
            pick.is_some_and(|&pid| out.get(&gpu).is_some_and(|v| v.pid == Some(pid)));
        let first = taken.insert(gpu);
        if (first && !trainer_picked) || picked {
            out.insert(gpu, view);
        }
    }
    out
}

/// How long a probe's OOM or disconnection stays on the status line (ms).
pub const PROBE_NOTE_MS: u64 = 60_000;

/// One probe as the dashboard shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeRow {
    pub socket: String,
    /// In vramtop's PID namespace.
    pub pid: Option<u32>,
    pub connected: bool,
    /// "attached", "disconnected: …", "rejected: protocol version 2 not supported".
    pub status: String,
    /// The last skipped line, e.g. "line 3: not JSON (…)".
    pub problem: Option<String>,
    pub command: Option<String>,
    /// NVML indices of the devices it reported.
    pub gpus: Vec<u32>,
    /// The protocol version of its hello (0 before the hello).
    pub protocol: u64,
    /// OOMs the process has had, before the dashboard connected included:
    /// its allocators' `num_ooms`, summed over devices, or the oom messages
    /// received where that is more (stats not in yet).
    pub ooms: u64,
    /// It answers snapshot requests (a v2 probe with the capability).
    pub serves_snapshots: bool,
    /// "rank 3/8 local 1" when the hello says so.
    pub rank: Option<String>,
    /// Its command line as `/proc` gave it when the hello came, where `pid`
    /// is this machine's (peer credentials, NSpid), else `None`: a real
    /// process that `K` may signal even on the simulated GPU.
    pub host_command: Option<String>,
}

/// The snapshot a probe wrote at an OOM: what the banner names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomSnapshot {
    pub pid: Option<u32>,
    pub command: Option<String>,
    pub path: PathBuf,
    /// When the dashboard saw it (ms).
    pub seen_ms: u64,
}

/// An OOM a probe reported, as data: `ui` words it for the status line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OomNote {
    /// When the dashboard saw it (ms).
    pub seen_ms: u64,
    pub pid: Option<u32>,
    /// The NVML index of its GPU, when the probe's device maps to one.
    pub gpu: Option<u32>,
    /// The probe's CUDA device index (what the process calls `cuda:N`).
    pub cuda_device: u32,
    /// PyTorch's message, empty when the probe sent none.
    pub message: String,
    /// The allocation that failed (bytes), when known.
    pub alloc_bytes: Option<u64>,
    /// It happened before the dashboard connected (the probe told of its
    /// last OOM on connecting): `seen_ms` is when the dashboard learnt of
    /// it, not when it happened.
    pub earlier: bool,
}

/// What the status line should say about the probes now, most important
/// first (see [`ProbeBoard::status_note`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProbeNote<'a> {
    /// A recent OOM.
    Oom(&'a OomNote),
    /// A connected probe's last problem.
    Problem(&'a ProbeRow),
    /// A probe that ended recently (its row's `status` says how).
    Ended(&'a ProbeRow),
}

/// The probes as the dashboard holds them: rows, plus what the status line
/// says about them (the last OOM, recent disconnections, problems).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProbeBoard {
    pub rows: Vec<ProbeRow>,
    /// The last OOM a probe reported.
    pub last_oom: Option<OomNote>,
    /// The last OOM snapshot a probe wrote (the banner; `O` opens it).
    pub oom_snapshot: Option<OomSnapshot>,
    /// The user hid the banner of `oom_snapshot` (`Esc`); `O` still opens
    /// it, and the next OOM snapshot shows again.
    pub oom_banner_hidden: bool,
    /// OOM events already marked, by socket.
    seen_ooms: BTreeMap<String, u64>,
    /// When each probe was first seen not connected (ms), by socket.
    ended_at: BTreeMap<String, u64>,
    now_ms: u64,
}

impl ProbeBoard {
    /// The OOM snapshot the status line names, unless the user hid it.
    pub fn oom_banner(&self) -> Option<&OomSnapshot> {
        self.oom_snapshot
            .as_ref()
            .filter(|_| !self.oom_banner_hidden)
    }

    /// Whether the banner on screen names the OOM of `oom`: its snapshot
    /// is of that OOM (the same process, seen in the same sample), so the
    /// note need not tell of it again in full.
    pub fn banner_names(&self, oom: &OomNote) -> bool {
        !self.oom_banner_hidden && self.snapshot_is_of(oom)
    }

    /// The OOM snapshot (shown or hidden) was written at the OOM of `oom`.
    fn snapshot_is_of(&self, oom: &OomNote) -> bool {
        self.oom_snapshot
            .as_ref()
            .is_some_and(|s| s.pid == oom.pid && s.seen_ms == oom.seen_ms)
    }

    /// Pids of the attached probes that report GPU `gpu` (NVML index),
    /// ascending: the processes whose allocator `v` cycles through.
    pub fn pids_on(&self, gpu: u32) -> Vec<u32> {
        let pids: BTreeSet<u32> = self
            .rows
            .iter()
            .filter(|r| r.connected && r.gpus.contains(&gpu))
            .filter_map(|r| r.pid)
            .collect();
        pids.into_iter().collect()
    }

    /// How many OOMs the attached probe of `pid` says its process has had
    /// (0 when none is attached), those from before the dashboard
    /// connected included (they get no timeline mark: their time is not
    /// now).
    pub fn ooms_of(&self, pid: u32) -> u64 {
        self.rows
            .iter()
            .find(|r| r.connected && r.pid == Some(pid))
            .map_or(0, |r| r.ooms)
    }

    /// The rank label of the attached probe of `pid`, if its hello gave one.
    pub fn rank_of(&self, pid: u32) -> Option<&str> {
        self.rows
            .iter()
            .find(|r| r.connected && r.pid == Some(pid))
            .and_then(|r| r.rank.as_deref())
    }

    /// Pids of the attached (connected) probes.
    pub fn attached_pids(&self) -> BTreeSet<u32> {
        self.rows
            .iter()
            .filter(|r| r.connected)
            .filter_map(|r| r.pid)
            .collect()
    }

    /// The status line's note about probes, most important first: a recent
    /// OOM, a probe's last problem, a recent disconnection or rejection.
    /// An OOM whose banner the user hid (`Esc`) gives no note either: the
    /// banner and the note told of the same OOM, and `Esc` dismissed only
    /// half of it.
    pub fn status_note(&self) -> Option<ProbeNote<'_>> {
        if let Some(oom) = &self.last_oom
            && self.now_ms.saturating_sub(oom.seen_ms) < PROBE_NOTE_MS
            && !(self.oom_banner_hidden && self.snapshot_is_of(oom))
        {
            return Some(ProbeNote::Oom(oom));
        }
        if let Some(r) = self
            .rows
            .iter()
            .find(|r| r.connected && r.problem.is_some())
        {
            return Some(ProbeNote::Problem(r));
        }
        self.rows
            .iter()
            .filter(|r| !r.connected)
            .find(|r| {
                self.ended_at
                    .get(&r.socket)
                    .is_some_and(|&t| self.now_ms.saturating_sub(t) < PROBE_NOTE_MS)
            })
            .map(ProbeNote::Ended)
    }
}

/// The probed processes of one GPU when there are several: what `v` cycles
/// through and the breakdown title counts.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeChoice {
    /// `v`'s order ([`AppState::allocator_pids_on`]).
    pub pids: Vec<u32>,
    /// Some of them are simulated training processes, not probes.
    pub simulated: bool,
    /// The pid whose allocator the GPU shows now.
    pub shown: Option<u32>,
    /// The pid `v` asked for (`UiState::allocator_pick`), shown from the
    /// next sample on.
    pub picked: Option<u32>,
}

impl ProbeChoice {
    /// 1-based position of `pid` among the probed processes.
    pub fn position(&self, pid: Option<u32>) -> Option<usize> {
        pid.and_then(|pid| self.pids.iter().position(|&p| p == pid))
            .map(|i| i + 1)
    }

    /// A pick still waiting for the next sample (and still attached).
    pub fn pending(&self) -> Option<u32> {
        self.picked
            .filter(|&p| Some(p) != self.shown && self.pids.contains(&p))
    }

    /// The pid `v` moves to: after the picked one (else the shown one),
    /// wrapping; the first when neither is among them.
    pub fn next(&self) -> u32 {
        match self.position(self.picked.or(self.shown)) {
            Some(n) => self.pids[n % self.pids.len()],
            None => self.pids[0],
        }
    }
}

impl AppState {
    /// The pids on GPU `gpu` whose allocator the dashboard can show, what
    /// `v` cycles through: the probes by pid, then the simulated training
    /// processes by pid. A probe is shown by default (real figures win over
    /// simulated ones), so the default is the first of this order.
    pub fn allocator_pids_on(&self, gpu: u32) -> Vec<u32> {
        let mut pids = self.probes.pids_on(gpu);
        let mut trainers: Vec<u32> = self
            .simulated_allocators
            .get(&gpu)
            .into_iter()
            .flatten()
            .copied()
            .filter(|p| !pids.contains(p))
            .collect();
        trainers.sort_unstable();
        trainers.dedup();
        pids.extend(trainers);
        pids
    }

    /// Whether the stress panel's allocator holds memory on GPU `gpu`,
    /// where its process has a row with allocator figures. `v` does not
    /// cycle to it: the panes show it while the panel is open (and,
    /// closed, only where no other allocator is seen on the GPU; see
    /// [`AppState::apply_sample`]), so `v` and the help say where it is.
    pub fn stress_allocator_on(&self, gpu: u32) -> bool {
        self.stress.gpu == Some(gpu)
            && self.stress.device == super::stress::PanelDevice::Gpu
            && self.stress.view.as_ref().is_some_and(|v| v.reserved() > 0)
    }

    /// Whether `v` on GPU `gpu` has nothing to switch to but the stress
    /// panel's allocator: one other process's allocator is shown, and the
    /// panel's holds memory there. With none, the panes show the panel's
    /// allocator already (`v` says no process has a probe); with two or
    /// more, `v` switches between those. `v` and its help hint both ask.
    pub fn only_the_stress_allocator_besides(&self, gpu: u32) -> bool {
        self.allocator_pids_on(gpu).len() == 1 && self.stress_allocator_on(gpu)
    }

    /// The processes of `gpu` whose allocator can be shown (probes and
    /// simulated trainers), when there is more than one.
    pub fn probe_choice(&self, gpu: &GpuState) -> Option<ProbeChoice> {
        let pids = self.allocator_pids_on(gpu.index());
        let simulated = self
            .simulated_allocators
            .get(&gpu.index())
            .is_some_and(|s| s.iter().any(|p| pids.contains(p)));
        (pids.len() >= 2).then(|| ProbeChoice {
            pids,
            simulated,
            shown: gpu.allocator.as_ref().and_then(|a| a.pid),
            picked: self.ui.allocator_pick.get(&gpu.index()).copied(),
        })
    }

    /// Takes the probes' state after a sample (after [`AppState::apply_sample`]
    /// with the same views): rows for the panes, the status line's note, and
    /// timeline OOM markers. An OOM of the probe whose view the GPU shows is
    /// marked by `apply_sample` when `num_ooms` rises (the probe's next
    /// stats, up to a stats interval after the event), so its events are not
    /// marked again; other probes' OOM events are marked here, at most one
    /// per GPU and sample. A newly seen OOM's process line is selected and
    /// brought into view, once.
    pub fn apply_probes(&mut self, now_ms: u64, probes: &ProbeSnapshot) {
        let board = &mut self.probes;
        board.now_ms = now_ms;
        board.rows = probes
            .probes
            .iter()
            .map(|p| ProbeRow {
                socket: p.socket.display().to_string(),
                pid: p.pid(),
                connected: p.status.is_connected(),
                status: p.status.to_string(),
                problem: p.problem.clone(),
                command: p.command(),
                gpus: p.devices.keys().filter_map(|&d| p.gpu_index(d)).collect(),
                protocol: p.hello.as_ref().map_or(0, |h| h.version),
                ooms: process_ooms(p),
                serves_snapshots: p.hello.as_ref().is_some_and(|h| h.serves_snapshots()),
                rank: p.hello.as_ref().and_then(|h| h.rank_label()),
                host_command: p.host_command.clone(),
            })
            .collect();
        let live: BTreeSet<&String> = board.rows.iter().map(|r| &r.socket).collect();
        board.ended_at.retain(|k, _| live.contains(k));
        board.seen_ooms.retain(|k, _| live.contains(k));
        for r in &board.rows {
            if r.connected {
                board.ended_at.remove(&r.socket);
            } else {
                board.ended_at.entry(r.socket.clone()).or_insert(now_ms);
            }
        }
        // The process of the last OOM first seen in this sample, and its
        // GPU: its line is brought into view once, below.
        let mut oomed: Option<(u32, Option<u32>)> = None;
        for p in &probes.probes {
            let key = p.socket.display().to_string();
            let seen = board.seen_ooms.get(&key).copied().unwrap_or(0);
            for e in p.ooms.iter().filter(|e| e.seq > seen) {
                let gpu = p.gpu_index(e.oom.device);
                if let Some(path) = &e.oom.snapshot {
                    board.oom_banner_hidden = false;
                    board.oom_snapshot = Some(OomSnapshot {
                        pid: p.pid(),
                        command: p.command(),
                        path: path.clone(),
                        seen_ms: now_ms,
                    });
                }
                let note = OomNote {
                    seen_ms: now_ms,
                    pid: p.pid(),
                    gpu,
                    cuda_device: e.oom.device,
                    message: e.oom.message.clone(),
                    alloc_bytes: e.oom.alloc_bytes,
                    earlier: e.oom.earlier,
                };
                if let Some(pid) = p.pid() {
                    oomed = Some((pid, gpu));
                }
                if e.oom.earlier {
                    // Before the dashboard connected: its time is not now,
                    // so no timeline mark; the note says it was earlier,
                    // and `O` opens its snapshot.
                    board.last_oom = Some(note);
                    continue;
                }
                if let Some(g) = gpu.and_then(|g| self.gpus.iter_mut().find(|s| s.index() == g))
                    && !g
                        .allocator
                        .as_ref()
                        .is_some_and(|a| a.pid.is_some() && a.pid == p.pid())
                {
                    let h = &mut g.history;
                    let already = h
                        .markers
                        .iter()
                        .any(|m| m.t_ms == now_ms && m.kind == MarkerKind::Oom);
                    if !already {
                        h.mark(Marker {
                            t_ms: now_ms,
                            kind: MarkerKind::Oom,
                            count: 1,
                        });
                    }
                }
                board.last_oom = Some(note);
            }
            board.seen_ooms.insert(key, p.oom_total);
        }
        // The banner names the OOM; its process's line (`[probe · 1 OOM]`)
        // may be scrolled out of the pane: selected and shown, as selecting
        // a GPU does, only now (later samples leave the scroll to the
        // user). Not under an open signal prompt: the user is deciding
        // about the selected process.
        if let Some((pid, gpu)) = oomed
            && self.ui.signal_prompt.is_none()
        {
            self.show_process(pid, gpu);
        }
    }
}

/// OOMs of a probed process: its allocators' `num_ooms` summed over its
/// devices (a negative figure counts 0), or the oom messages received when
/// that is more.
fn process_ooms(p: &ProbeState) -> u64 {
    let counted = p
        .devices
        .values()
        .filter_map(|d| d.stats.as_ref())
        .map(|s| u64::try_from(s.num_ooms).unwrap_or(0))
        .fold(0u64, u64::saturating_add);
    counted.max(p.oom_total)
}

/// One CUDA device of a probe in a headless sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessProbeDevice {
    /// The CUDA ordinal inside the probe.
    pub device: u32,
    /// The NVML index (`null` when `CUDA_VISIBLE_DEVICES` was not mapped).
    pub gpu: Option<u32>,
    pub allocator: Option<AllocatorSummary>,
    /// Why the device's figures are not shown (they cannot be true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// One probe in a headless sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessProbe {
    pub socket: String,
    /// In vramtop's PID namespace.
    pub pid: Option<u32>,
    /// The pid the probe reported (its own namespace).
    pub probe_pid: Option<u32>,
    pub pid_source: Option<PidSource>,
    pub status: String,
    pub problem: Option<String>,
    pub command: Option<String>,
    pub host: Option<String>,
    pub torch: Option<String>,
    pub visible_devices: VisibleDevices,
    pub devices: Vec<HeadlessProbeDevice>,
    pub oom_total: u64,
    pub ooms: Vec<OomEvent>,
}

/// The probes of a snapshot as `--once --json` lists them.
pub fn headless_probes(probes: &ProbeSnapshot) -> Vec<HeadlessProbe> {
    probes
        .probes
        .iter()
        .map(|p| HeadlessProbe {
            socket: p.socket.display().to_string(),
            pid: p.pid(),
            probe_pid: p.hello.as_ref().map(|h| h.pid),
            pid_source: p.pid_source,
            status: p.status.to_string(),
            problem: p.problem.clone(),
            command: p.command(),
            host: p.hello.as_ref().and_then(|h| h.host.clone()),
            torch: p.hello.as_ref().and_then(|h| h.torch.clone()),
            visible_devices: p.visible_devices.clone(),
            devices: p
                .devices
                .iter()
                .map(|(&device, data)| HeadlessProbeDevice {
                    device,
                    gpu: p.gpu_index(device),
                    allocator: data
                        .stats
                        .as_ref()
                        .map(|stats| AllocatorSummary::from(&probe_view(p, device, data, stats))),
                    invalid: data.invalid.clone(),
                })
                .collect(),
            oom_total: p.oom_total,
            ooms: p.ooms.clone(),
        })
        .collect()
}

/// The allocator figures in a headless sample (bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorSummary {
    pub source: String,
    pub pid: Option<u32>,
    pub allocated: u64,
    pub reserved: u64,
    pub active: i64,
    pub inactive_split_bytes: i64,
    pub segments: i64,
    /// `null` when the probe sent it as `null` (unknown, not 0).
    pub num_alloc_retries: Option<i64>,
    /// `null` when the probe sent it as `null` (unknown, not 0).
    pub num_ooms: Option<i64>,
    pub fragmentation: Fragmentation,
    /// Seconds, by the probe's clock, that the segments `fragmentation` is
    /// computed from are older than the stats the other figures are, as
    /// the dashboard's Fragmentation pane says it ("segments 4 s old"): 0
    /// where the pane says nothing (as new, or under a second behind with
    /// the same totals; every simulated allocator); `None` where the age
    /// is unknown (messages without times, the pane's "stale segments",
    /// or no segments yet: see `segments_received`).
    pub segments_age_s: Option<f64>,
    /// Whether any segments have come: `false` while a probe's stats have
    /// and its segments not (the pane's "segments not received yet"),
    /// `fragmentation` then being of no segments.
    pub segments_received: bool,
    /// Figures the probe sent as `null` (`memory_stats()` keys, or
    /// `requested_size`): their values here are 0 and mean nothing.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
    /// PyTorch's own peaks (a probe's `max_memory_allocated()` and
    /// `max_memory_reserved()`), which the one-second samples above miss
    /// inside a step; absent for a simulated allocator and in recordings
    /// made before vramtop wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torch_peak: Option<OwnPeak>,
}

impl From<&AllocatorView> for AllocatorSummary {
    fn from(a: &AllocatorView) -> Self {
        AllocatorSummary {
            source: a.source.clone(),
            pid: a.pid,
            allocated: a.allocated(),
            reserved: a.reserved(),
            active: a.stats.active_bytes.all.current,
            inactive_split_bytes: a.stats.inactive_split_bytes.all.current,
            segments: a.stats.segment.all.current,
            num_alloc_retries: a
                .knows("num_alloc_retries")
                .then_some(a.stats.num_alloc_retries),
            num_ooms: a.knows("num_ooms").then_some(a.stats.num_ooms),
            fragmentation: a.fragmentation.clone(),
            segments_age_s: match a.segments_age {
                None => Some(0.0),
                Some(SegmentsAge::NotYet) => None,
                Some(SegmentsAge::Older { age_s, .. }) => age_s,
            },
            segments_received: a.segments_age != Some(SegmentsAge::NotYet),
            unknown: a.unknown.clone(),
            torch_peak: a.own_peak.clone(),
        }
    }
}

/// One GPU in a headless sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessGpu {
    #[serde(flatten)]
    pub reading: GpuReading,
    /// The allocator the dashboard shows first for this GPU.
    pub allocator: Option<AllocatorSummary>,
    /// Every allocator the dashboard can show for this GPU, in the order
    /// its `v` key cycles them (probes by pid, then simulated training
    /// processes by pid): `allocator` and the others on the same GPU.
    pub allocators: Vec<AllocatorSummary>,
    pub breakdown: Option<Breakdown>,
    /// Driver-used bytes no listed process accounts for.
    pub unattributed: Option<u64>,
    /// A MIG device's slot on its physical GPU (nvidia-smi's "MIG dev"),
    /// `None` for a physical GPU. A MIG row's `index` is its physical
    /// GPU's, so that no two rows share an (`index`, `mig_index`).
    pub mig_index: Option<u32>,
}

impl HeadlessGpu {
    /// `reading` with no allocator figures yet. The telemetry's MIG row
    /// carries its slot as `index`; here `index` is the physical GPU's and
    /// the slot is `mig_index`.
    pub fn bare(mut reading: GpuReading) -> HeadlessGpu {
        let mut mig_index = None;
        if let GpuReading::Ok(s) = &mut reading
            && let Some(mig) = &s.mig
        {
            mig_index = Some(s.index);
            s.index = mig.parent_index;
        }
        HeadlessGpu {
            reading,
            allocator: None,
            allocators: Vec::new(),
            breakdown: None,
            unattributed: None,
            mig_index,
        }
    }
}

/// One line of `--once --json` / `vramtop record`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessSample {
    /// Wall-clock time of the sample (ms since the Unix epoch).
    pub time_unix_ms: u64,
    pub backend: String,
    /// Why the backend is a fallback, if it is.
    pub banner: Option<String>,
    pub gpus: Vec<HeadlessGpu>,
    /// The attached probes (`--once --json`; absent when there are none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes: Vec<HeadlessProbe>,
    /// Probe directories and sockets that were not read, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub probes_skipped: Vec<String>,
    /// The OOM events the probes reported (the newest each keeps), oldest
    /// probe socket first; absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ooms: Vec<HeadlessOom>,
    /// Simulated processes the flags asked for that could not start (no
    /// room for their CUDA context), so not among any GPU's `processes`;
    /// absent when every one started.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_started: Vec<NotStarted>,
    /// [`Self::not_started`] in one line, as the dashboard says it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_started_note: Option<String>,
}

/// One OOM event a probe reported, as `--once --json` and `record` list it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessOom {
    /// The NVML index (`null` when `CUDA_VISIBLE_DEVICES` was not mapped).
    pub gpu: Option<u32>,
    /// The CUDA ordinal inside the process.
    pub device: u32,
    /// In vramtop's PID namespace.
    pub pid: Option<u32>,
    /// 1 for the probe's first OOM, 2 for the next, …
    pub seq: u64,
    /// Bytes the failed request asked for.
    pub alloc_bytes: Option<u64>,
    /// The probe's clock (Unix seconds).
    pub time: Option<f64>,
    pub message: String,
    /// The snapshot the probe wrote of the moment (`null`: none).
    pub snapshot: Option<PathBuf>,
    /// Why none was written, when writing one failed.
    pub snapshot_error: Option<String>,
}

/// The OOM events of `snapshot`'s probes.
pub fn headless_ooms(snapshot: &ProbeSnapshot) -> Vec<HeadlessOom> {
    snapshot
        .probes
        .iter()
        .flat_map(|p| {
            p.ooms.iter().map(move |e| HeadlessOom {
                gpu: p.gpu_index(e.oom.device),
                device: e.oom.device,
                pid: p.pid(),
                seq: e.seq,
                alloc_bytes: e.oom.alloc_bytes,
                time: e.oom.time,
                message: e.oom.message.clone(),
                snapshot: e.oom.snapshot.clone(),
                snapshot_error: e.oom.snapshot_error.clone(),
            })
        })
        .collect()
}

/// OOM events seen per (NVML index, pid) over every probe, for the
/// `vramtop_allocator_ooms_total` counter.
pub fn probe_oom_counts(snapshot: &ProbeSnapshot) -> BTreeMap<(u32, u32), u64> {
    let mut counts = BTreeMap::new();
    for p in &snapshot.probes {
        let Some(pid) = p.pid() else { continue };
        for (&device, &n) in &p.oom_by_device {
            if let Some(gpu) = p.gpu_index(device) {
                let c: &mut u64 = counts.entry((gpu, pid)).or_insert(0);
                *c = c.saturating_add(n);
            }
        }
    }
    counts
}

impl HeadlessSample {
    /// Adds every allocator of each GPU (`every`: by NVML index, in `v`'s
    /// order) to the GPUs that show one (not a MIG instance's: no view is
    /// mapped to one).
    pub fn with_allocators(mut self, every: &BTreeMap<u32, Vec<AllocatorView>>) -> Self {
        for gpu in &mut self.gpus {
            let Some(s) = gpu.reading.sample().filter(|s| s.mig.is_none()) else {
                continue;
            };
            gpu.allocators = every
                .get(&s.index)
                .into_iter()
                .flatten()
                .map(AllocatorSummary::from)
                .collect();
        }
        self
    }

    /// Adds the simulated processes that could not start.
    pub fn with_not_started(mut self, not_started: Vec<NotStarted>) -> Self {
        self.not_started_note = not_started_note(&not_started);
        self.not_started = not_started;
        self
    }

    /// Adds the probes of `snapshot` (their views should already be in the
    /// allocators the sample was built from).
    pub fn with_probes(mut self, snapshot: &ProbeSnapshot) -> Self {
        self.probes = headless_probes(snapshot);
        self.ooms = headless_ooms(snapshot);
        self.probes_skipped = snapshot
            .skipped
            .iter()
            .map(|(path, why)| format!("{}: {why}", path.display()))
            .collect();
        self
    }
}

/// Builds a headless sample from readings and allocator views.
pub fn headless_sample(
    backend: &str,
    banner: Option<&str>,
    readings: Vec<GpuReading>,
    allocators: &BTreeMap<u32, AllocatorView>,
) -> HeadlessSample {
    let gpus = readings
        .into_iter()
        .map(|reading| {
            let (allocator, bd, un) = match reading.sample() {
                Some(s) if s.mig.is_none() => {
                    let a = allocators.get(&s.index);
                    (
                        a.map(AllocatorSummary::from),
                        breakdown(s, a),
                        unattributed(s),
                    )
                }
                Some(s) => (None, None, unattributed(s)),
                None => (None, None, None),
            };
            HeadlessGpu {
                allocator,
                breakdown: bd,
                unattributed: un,
                ..HeadlessGpu::bare(reading)
            }
        })
        .collect();
    HeadlessSample {
        time_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        backend: backend.to_string(),
        banner: banner.map(str::to_string),
        gpus,
        probes: Vec::new(),
        probes_skipped: Vec::new(),
        ooms: Vec::new(),
        not_started: Vec::new(),
        not_started_note: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::DeviceStats;
    use crate::device::GpuSample;
    use crate::probe::protocol::{Hello, Oom};
    use crate::probe::registry::DeviceData;
    use crate::probe::{ProbeState, ProbeStatus};
    use std::path::PathBuf;

    #[test]
    fn the_json_allocator_says_how_old_its_segments_are_as_the_pane_does() {
        let view = |age| {
            AllocatorView::new("probe".into(), Some(7), DeviceStats::default(), Vec::new())
                .with_segments_age(age)
        };
        let json = |age| serde_json::to_value(AllocatorSummary::from(&view(age))).expect("JSON");
        let older = |age_s| SegmentsAge::Older { age_s, then: None };
        let cases = [
            (None, serde_json::json!(0.0), true),
            (Some(older(Some(4.5))), serde_json::json!(4.5), true),
            (Some(older(None)), serde_json::Value::Null, true),
            (Some(SegmentsAge::NotYet), serde_json::Value::Null, false),
        ];
        for (age, want_age, received) in cases {
            let v = json(age);
            assert_eq!(v["segments_age_s"], want_age, "{age:?}: {v}");
            assert_eq!(v["segments_received"], received, "{age:?}: {v}");
        }
    }

    fn snapshot(pid: u32, num_ooms: i64, events: u64) -> ProbeSnapshot {
        let stats = DeviceStats {
            num_ooms,
            ..DeviceStats::default()
        };
        ProbeSnapshot {
            probes: vec![ProbeState {
                socket: PathBuf::from(format!("/x/{pid}.sock")),
                status: ProbeStatus::Connected,
                problem: None,
                hello: Some(Hello {
                    pid,
                    host: None,
                    argv: vec!["train.py".into()],
                    torch: None,
                    devices: vec![0],
                    stats_interval_s: None,
                    segments_interval_s: None,
                    time: None,
                    ..Hello::default()
                }),
                host_pid: Some(pid),
                user: None,
                pid_source: Some(PidSource::PeerCred),
                host_command: None,
                visible_devices: VisibleDevices::All,
                devices: BTreeMap::from([(
                    0,
                    DeviceData {
                        stats: Some(stats),
                        segments: None,
                        stats_time: None,
                        ..DeviceData::default()
                    },
                )]),
                ooms: (1..=events)
                    .map(|seq| OomEvent {
                        seq,
                        oom: Oom {
                            time: None,
                            device: 0,
                            alloc_bytes: Some(1 << 30),
                            device_allocated: None,
                            device_free: None,
                            message: String::new(),
                            ..Oom::default()
                        },
                    })
                    .collect(),
                oom_total: events,
                oom_by_device: BTreeMap::new(),
                lines: 0,
            }],
            skipped: Vec::new(),
        }
    }

    fn step(state: &mut AppState, t: u64, snap: &ProbeSnapshot) {
        let reading = GpuReading::Ok(GpuSample::unknown(0, "GPU"));
        state.apply_sample(
            t,
            vec![reading],
            allocator_views_with_probes(None, snap, &BTreeMap::new()),
        );
        state.apply_probes(t, snap);
    }

    fn ooms(state: &AppState) -> Vec<u64> {
        state.gpus[0]
            .history
            .markers
            .iter()
            .filter(|m| m.kind == MarkerKind::Oom)
            .map(|m| m.t_ms)
            .collect()
    }

    #[test]
    fn an_oom_event_before_its_counter_is_marked_once() {
        let mut st = AppState::new(crate::app::state::StatusState::default());
        step(&mut st, 0, &snapshot(7, 0, 0));
        // The event arrives first, the counter with the next stats.
        step(&mut st, 1000, &snapshot(7, 0, 1));
        step(&mut st, 2000, &snapshot(7, 1, 1));
        assert_eq!(ooms(&st), vec![2000]);
        let Some(ProbeNote::Oom(note)) = st.probes.status_note() else {
            panic!("an OOM note, got {:?}", st.probes.status_note());
        };
        assert_eq!(
            (note.pid, note.gpu, note.alloc_bytes),
            (Some(7), Some(0), Some(1 << 30))
        );
    }

    #[test]
    fn an_oom_from_before_the_connection_offers_its_snapshot_and_a_note_without_a_mark() {
        let mut st = AppState::new(crate::app::state::StatusState::default());
        let mut snap = snapshot(7, 1, 1);
        let oom = &mut snap.probes[0].ooms[0].oom;
        oom.earlier = true;
        oom.snapshot = Some(PathBuf::from("/s/node-7-rankx-oom.pickle"));
        step(&mut st, 0, &snap);
        step(&mut st, 1000, &snap);
        assert_eq!(ooms(&st), Vec::<u64>::new(), "it did not happen now");
        let Some(ProbeNote::Oom(note)) = st.probes.status_note() else {
            panic!("an OOM note, got {:?}", st.probes.status_note());
        };
        assert!(note.earlier, "the note says it was earlier");
        assert_eq!(note.seen_ms, 0, "when the dashboard learnt of it");
        let offered = st.probes.oom_snapshot.as_ref().map(|o| o.path.clone());
        assert_eq!(offered, Some(PathBuf::from("/s/node-7-rankx-oom.pickle")));
    }

    #[test]
    fn another_probes_oom_on_a_shown_gpu_is_marked_from_its_event() {
        let mut st = AppState::new(crate::app::state::StatusState::default());
        let mut snap = snapshot(7, 0, 0);
        snap.probes.extend(snapshot(8, 0, 0).probes);
        step(&mut st, 0, &snap);
        // Probe 8 (not the one shown on GPU 0) reports an OOM.
        snap.probes[1] = snapshot(8, 1, 1).probes.remove(0);
        step(&mut st, 1000, &snap);
        assert_eq!(ooms(&st), vec![1000]);
        assert_eq!(st.gpus[0].allocator.as_ref().and_then(|a| a.pid), Some(7));
    }

    /// GPU 0 listing pids 100 (5 GiB), 101 (3 GiB) and the probe's 7
    /// (1 GiB): by memory, the probe's line is the last of three.
    fn step_listing(state: &mut AppState, t: u64, snap: &ProbeSnapshot) {
        let mut g = GpuSample::unknown(0, "GPU");
        g.processes = Some(
            [(100, 5u64), (101, 3), (7, 1)]
                .into_iter()
                .map(|(pid, gib)| crate::device::GpuProcess::new(pid, Some(gib << 30)))
                .collect(),
        );
        state.apply_sample(
            t,
            vec![GpuReading::Ok(g)],
            allocator_views_with_probes(None, snap, &BTreeMap::new()),
        );
        state.apply_probes(t, snap);
    }

    fn selected_pid(state: &AppState) -> Option<u32> {
        use crate::app::state::ProcessLine;
        let lines = state.process_lines();
        match state.selected_process_index(&lines).map(|i| &lines[i]) {
            Some(ProcessLine::Process(r)) => Some(r.process.pid),
            _ => None,
        }
    }

    fn press(state: &mut AppState, code: crossterm::event::KeyCode) {
        use crossterm::event::{KeyEvent, KeyModifiers};
        crate::app::update::handle_key(
            state,
            &crate::app::keymap::Keymap::default(),
            KeyEvent::new(code, KeyModifiers::NONE),
        );
    }

    #[test]
    fn a_new_oom_selects_its_process_and_scrolls_its_line_into_view_once() {
        use crossterm::event::KeyCode;
        let mut st = AppState::new(crate::app::state::StatusState::default());
        // Two of the three lines drawn, as at 80x24: 100 and 101.
        st.ui.process_lines_shown.set(2);
        step_listing(&mut st, 0, &snapshot(7, 0, 0));
        assert_eq!((st.ui.process_scroll, selected_pid(&st)), (0, Some(100)));
        step_listing(&mut st, 1000, &snapshot(7, 0, 1));
        assert_eq!(selected_pid(&st), Some(7), "the OOM's process selected");
        let lines = st.process_lines();
        let first = st.process_view_first(&lines, 2);
        assert_eq!(first, 1, "its line (the third) drawn: 101 and 7");
        // The user goes back to the top; the same OOM, in the next samples,
        // does not pull the view back.
        st.ui.focus = crate::app::state::Pane::Processes;
        press(&mut st, KeyCode::Home);
        assert_eq!((st.ui.process_scroll, selected_pid(&st)), (0, Some(100)));
        step_listing(&mut st, 2000, &snapshot(7, 1, 1));
        step_listing(&mut st, 3000, &snapshot(7, 1, 1));
        assert_eq!((st.ui.process_scroll, selected_pid(&st)), (0, Some(100)));
        // A second OOM is new: shown again.
        step_listing(&mut st, 4000, &snapshot(7, 2, 2));
        assert_eq!((st.ui.process_scroll, selected_pid(&st)), (1, Some(7)));
    }

    #[test]
    fn a_new_oom_leaves_the_selection_alone_under_an_open_signal_prompt() {
        let mut st = AppState::new(crate::app::state::StatusState::default());
        st.ui.process_lines_shown.set(2);
        step_listing(&mut st, 0, &snapshot(7, 0, 0));
        // `K` on the selected line, pid 100, asks for a confirmation.
        st.ui.signal_prompt = Some(crate::app::process_list::SignalPrompt::one(
            crate::app::process_list::SignalTarget {
                pid: 100,
                gpus: vec![0],
                command: "cmd-100".into(),
                shown: None,
                used_memory: Some(5 << 30),
            },
        ));
        step_listing(&mut st, 1000, &snapshot(7, 0, 1));
        assert_eq!((st.ui.process_scroll, selected_pid(&st)), (0, Some(100)));
    }

    fn simulated_gpu(used: u64) -> GpuReading {
        let mut sample = GpuSample::unknown(0, "Simulated");
        sample.memory_total = Some(80 << 30);
        sample.memory_used = Some(used);
        sample.memory_free = Some((80 << 30) - used);
        sample
            .processes
            .get_or_insert_with(Vec::new)
            .push(crate::device::GpuProcess {
                user: Some("sim".into()),
                command: Some("python train.py".into()),
                parent_pid: Some(1),
                ..crate::device::GpuProcess::new(4242, Some(used))
            });
        GpuReading::Ok(sample)
    }

    fn with_reserved(mut snap: ProbeSnapshot, reserved: i64) -> ProbeSnapshot {
        for d in snap.probes[0].devices.values_mut() {
            if let Some(stats) = d.stats.as_mut() {
                stats.reserved_bytes.all.current = reserved;
            }
        }
        snap
    }

    #[test]
    fn a_probe_on_the_simulated_gpu_is_listed_and_counted_in_used() {
        let mut readings = vec![simulated_gpu(1 << 30)];
        let mut snap = with_reserved(snapshot(77, 0, 0), 300 << 20);
        snap.probes[0].user = Some("alice".into());
        account_probes_in_simulation(&mut readings, &snap, 500 << 20);
        let s = readings[0].sample().expect("a sample");
        assert_eq!(s.memory_used, Some((1 << 30) + (800 << 20)));
        assert_eq!(s.memory_free, Some((80 << 30) - (1 << 30) - (800 << 20)));
        let row = s
            .listed_processes()
            .iter()
            .find(|p| p.pid == 77)
            .expect("the probe's row");
        assert_eq!(row.used_memory, Some(800 << 20));
        assert_eq!(row.command.as_deref(), Some("train.py"));
        assert_eq!(row.user.as_deref(), Some("alice"));
        // "context & other" is then the other process and the probe's own
        // context, as on a real GPU.
        let views = allocator_views_with_probes(None, &snap, &BTreeMap::new());
        let b = crate::app::state::breakdown(s, views.get(&0)).expect("a breakdown");
        assert_eq!(b.context_and_other, (1 << 30) + (500 << 20));
    }

    #[test]
    fn a_probe_already_listed_or_off_the_gpus_adds_nothing() {
        let mut listed = vec![simulated_gpu(1 << 30)];
        let snap = with_reserved(snapshot(4242, 0, 0), 300 << 20);
        account_probes_in_simulation(&mut listed, &snap, 500 << 20);
        assert_eq!(listed, vec![simulated_gpu(1 << 30)]);
        let mut elsewhere = vec![simulated_gpu(1 << 30)];
        let mut snap = with_reserved(snapshot(77, 0, 0), 300 << 20);
        snap.probes[0].visible_devices = VisibleDevices::Indices(vec![3]);
        account_probes_in_simulation(&mut elsewhere, &snap, 500 << 20);
        assert_eq!(elsewhere, vec![simulated_gpu(1 << 30)]);
    }

    #[test]
    fn a_probe_never_pushes_used_past_the_gpus_total() {
        let mut readings = vec![simulated_gpu((80 << 30) - (100 << 20))];
        let snap = with_reserved(snapshot(77, 0, 0), 300 << 20);
        account_probes_in_simulation(&mut readings, &snap, 500 << 20);
        let s = readings[0].sample().expect("a sample");
        assert_eq!(s.memory_used, Some(80 << 30));
        assert_eq!(s.memory_free, Some(0));
    }

    #[test]
    fn a_probe_wins_over_the_simulated_trainer_on_its_gpu() {
        let cluster = SimCluster::new(crate::device::sim::SimConfig {
            gpus: 2,
            training_processes: 2,
            seed: 7,
            ..crate::device::sim::SimConfig::default()
        });
        cluster.advance(5_000);
        let plain = allocator_views(Some(&cluster));
        let views =
            allocator_views_with_probes(Some(&cluster), &snapshot(7, 0, 0), &BTreeMap::new());
        assert_eq!(views[&0].pid, Some(7));
        assert!(
            views[&0]
                .source
                .starts_with("pid 7 (probe, cuda:0: train.py")
        );
        assert_eq!(
            views.get(&1),
            plain.get(&1),
            "the other GPU keeps its trainer"
        );
    }
}
