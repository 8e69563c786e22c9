//! `vramtop record`'s JSON lines read back: a night of samples summed up
//! per GPU (when memory peaked and whose it was, the allocators' peaks,
//! every OOM and allocation retry, the most fragmented moment, the gaps in
//! the sampling) without keeping the samples.
//!
//! A recording is read line by line into running figures: the memory
//! kept is bounded by the caps below, whatever the file's length (a line
//! is held only while it is read, and one longer than [`MAX_LINE_BYTES`]
//! is skipped unread). Every line is read leniently, as a
//! `serde_json::Value` whose fields are looked up one by one: a field this
//! version does not know is ignored, one it expects and does not find (an
//! older or newer `record`) or of another type is unknown, never an
//! error; a line that is not JSON, or JSON but not a sample, is counted
//! and skipped. A last line cut mid-write (a recording stopped by a kill
//! or a full disk: the normal end of a long one) is counted apart, and a
//! sample appended after such a cut (`record` appends to its file) is
//! found again inside the joined line.
//!
//! Pure: no terminal, no clock, no words for people (`cli::recording`
//! writes them).

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::Serialize;
use serde_json::{Map, Value};
use thiserror::Error;

/// The longest line read (bytes): one sample of 64 GPUs with 64 simulated
/// allocators each is ~10 MiB. A longer line is skipped unread, so that a
/// binary file without a newline costs no more memory than this.
pub const MAX_LINE_BYTES: usize = 32 << 20;

/// GPUs (physical and MIG) summed up; samples of more are counted in
/// [`RecordingSummary::gpus_left_out`].
pub const MAX_GPUS: usize = 256;

/// Allocators (probed or simulated processes) kept per GPU.
pub const MAX_ALLOCATORS_PER_GPU: usize = 64;

/// Processes kept of the sample at a GPU's memory peak, largest first.
pub const MAX_PEAK_PROCESSES: usize = 32;

/// Counter increases (OOMs, allocation retries) kept per GPU and kind;
/// the rest are counted.
pub const MAX_EVENTS_PER_KIND: usize = 500;

/// Distinct values a [`Distribution`] keeps exactly; past them its values
/// are rounded to 8 significant bits (under 0.8 % off).
pub const MAX_EXACT_VALUES: usize = 4096;

/// Characters kept of a text the file gives (a command line, a reason).
const MAX_TEXT_CHARS: usize = 512;

/// How a sample line starts (`record` writes `time_unix_ms` first): what
/// is looked for inside a line that is not JSON, where a sample was
/// appended to a line cut mid-write.
const SAMPLE_START: &[u8] = b"{\"time_unix_ms\":";

/// Why a recording could not be read to its end.
#[derive(Debug, Error)]
pub enum RecordingError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Bytes of a file's start searched for a sample's line when its first
/// line is none (a recording cut at its start, junk in front).
pub const SNIFF_LINES_BYTES: usize = 16 << 10;

/// Whether `prefix` (the first bytes of a file) is a recording's start:
/// JSON text whose first line (or as much of it as `prefix` holds) has
/// the fields of a sample, or, where the first line is something else (a
/// recording whose start was cut off: `tail -c`; junk in front of it), a
/// line in the first [`SNIFF_LINES_BYTES`] that opens as `record` writes
/// a sample. A pickle starts with its protocol byte, never with `{`.
pub fn looks_like_recording(prefix: &[u8]) -> bool {
    if is_sample_start(prefix) {
        return true;
    }
    let head = &prefix[..prefix.len().min(SNIFF_LINES_BYTES)];
    // Any line's opening: `record` writes `time_unix_ms` first. The line
    // from there on (as much as `prefix` holds) is checked as the first.
    memchr::memmem::find_iter(head, SAMPLE_START)
        .take(8)
        .any(|at| is_sample_start(&prefix[at..]))
}

/// Whether `bytes` open with a line that is (or, cut by the end of
/// `bytes`, opens as) a sample.
fn is_sample_start(bytes: &[u8]) -> bool {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let rest = &bytes[start..];
    if rest.first() != Some(&b'{') {
        return false;
    }
    let first_line = match memchr::memchr(b'\n', rest) {
        Some(end) => &rest[..end],
        None => rest,
    };
    match serde_json::from_slice::<Value>(first_line) {
        Ok(v) => v.get("time_unix_ms").is_some() && v.get("gpus").is_some(),
        // A first line longer than the prefix: its opening says it.
        Err(_) => {
            memchr::memmem::find(first_line, b"\"time_unix_ms\"").is_some()
                && memchr::memmem::find(first_line, b"\"gpus\"").is_some()
        }
    }
}

/// Values whose median is asked for: exact while they take at most
/// [`MAX_EXACT_VALUES`] distinct values, then rounded to 8 significant
/// bits, so that its size is bounded (64 × 128 keys at most).
#[derive(Debug, Clone, Default)]
pub struct Distribution {
    counts: BTreeMap<u64, u64>,
    total: u64,
    rounded: bool,
}

/// `v` with its bits below the 8 most significant cleared.
fn round_to_8_bits(v: u64) -> u64 {
    let bits = 64 - v.leading_zeros();
    if bits <= 8 {
        return v;
    }
    let shift = bits - 8;
    (v >> shift) << shift
}

impl Distribution {
    pub fn add(&mut self, v: u64) {
        let key = if self.rounded { round_to_8_bits(v) } else { v };
        *self.counts.entry(key).or_insert(0) += 1;
        self.total = self.total.saturating_add(1);
        if !self.rounded && self.counts.len() > MAX_EXACT_VALUES {
            let mut rounded = BTreeMap::new();
            for (k, n) in std::mem::take(&mut self.counts) {
                let c: &mut u64 = rounded.entry(round_to_8_bits(k)).or_insert(0);
                *c = c.saturating_add(n);
            }
            self.counts = rounded;
            self.rounded = true;
        }
    }

    /// The lower median (the value of rank ⌈n/2⌉), `None` of no values.
    pub fn median(&self) -> Option<u64> {
        let rank = self.total.div_ceil(2).max(1);
        let mut seen = 0u64;
        for (&v, &n) in &self.counts {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return Some(v);
            }
        }
        None
    }

    /// How many values are above `bound`.
    pub fn count_above(&self, bound: u64) -> u64 {
        self.counts
            .range(bound.saturating_add(1)..)
            .map(|(_, &n)| n)
            .fold(0u64, u64::saturating_add)
    }

    /// Whether the figures are exact (no value was rounded).
    pub fn exact(&self) -> bool {
        !self.rounded
    }
}

/// Why lines were skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// Lines that are not JSON (or not UTF-8), the last line apart.
    pub not_json: u64,
    /// JSON lines without a sample's `time_unix_ms` and `gpus`.
    pub not_a_sample: u64,
    /// Lines longer than [`MAX_LINE_BYTES`], skipped unread.
    pub too_long: u64,
    /// The last line has no newline and is no whole sample: the recording
    /// stopped mid-write.
    pub cut_last_line: bool,
    /// Lines where a sample follows the start of one cut mid-write (the
    /// recording was stopped, then appended to): the cut start is
    /// skipped, the sample after it read.
    pub cut_then_appended: u64,
    /// The first skipped line's number (1-based), for a person to look at.
    pub first_line: Option<u64>,
}

impl Skipped {
    /// Lines skipped in all (a joined line counts: its cut start was).
    pub fn lines(&self) -> u64 {
        self.not_json
            .saturating_add(self.not_a_sample)
            .saturating_add(self.too_long)
            .saturating_add(u64::from(self.cut_last_line))
            .saturating_add(self.cut_then_appended)
    }
}

/// A figure and the sample time it was seen at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Moment {
    pub bytes: u64,
    /// The sample's `time_unix_ms`.
    pub time_unix_ms: u64,
}

/// A process of the sample at a memory peak.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeakProcess {
    pub pid: u32,
    /// Its user, `None` where unknown.
    pub user: Option<String>,
    /// The command line (cut to 512 characters), `None` where unknown.
    pub command: Option<String>,
    /// Bytes the driver attributes to it, `None` where unknown.
    pub used_memory: Option<u64>,
    /// Its parent process (a DataLoader worker's: the training script),
    /// `None` where the sample does not say.
    pub parent_pid: Option<u32>,
}

/// The most memory a GPU had in use, and who held it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsedPeak {
    pub bytes: u64,
    pub time_unix_ms: u64,
    /// The GPU's memory then (bytes), where known.
    pub memory_total: Option<u64>,
    /// `false` where the driver could not list the processes then.
    pub processes_listed: bool,
    /// The processes then, by `used_memory`, largest first (unknown last),
    /// at most [`MAX_PEAK_PROCESSES`].
    pub processes: Vec<PeakProcess>,
    /// Processes then past those listed.
    pub processes_left_out: u64,
    /// The bytes those left out held, of the figures known.
    pub processes_left_out_bytes: u64,
}

/// A GPU's memory in use over the recording (the driver's `memory_used`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryUsed {
    /// Samples that gave `memory_used`.
    pub samples: u64,
    pub peak: UsedPeak,
    /// The least (the first sample of it).
    pub min: Moment,
    /// The lower median of the samples' values (bytes).
    pub median: u64,
    /// `false` when the samples took so many values that the median was
    /// taken of values rounded to 8 significant bits (under 0.8 % off).
    pub median_exact: bool,
}

/// A time without samples of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Gap {
    /// The sample before the gap.
    pub from_unix_ms: u64,
    /// The sample after it.
    pub to_unix_ms: u64,
    pub ms: u64,
}

/// Which counter of an allocator rose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CounterKind {
    /// `num_ooms`: allocations that failed with out of memory.
    Oom,
    /// `num_alloc_retries`: cudaMalloc failures after which the allocator
    /// freed its cache and tried again.
    AllocRetry,
    /// `num_ooms` fell: the process restarted under the same pid (or its
    /// counters were reset, or recordings of two runs were joined).
    OomsFell,
    /// `num_alloc_retries` fell, as `num_ooms` for [`CounterKind::OomsFell`].
    AllocRetriesFell,
}

/// A rise of an allocator's `num_ooms` or `num_alloc_retries` between two
/// samples, and the allocator's memory at the later one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterEvent {
    pub kind: CounterKind,
    /// The sample the counter was first seen higher in.
    pub time_unix_ms: u64,
    pub pid: Option<u32>,
    /// The counter before and after: OOMs `from + 1` to `to` happened
    /// (of a fall: `to` is below `from`).
    pub from: u64,
    pub to: u64,
    /// How many times the allocator's counters had fallen (restarts) by
    /// this sample, this one's included: 0 before any, so that the OOMs
    /// `#1` of two runs are told apart.
    pub restart: u64,
    /// The allocator's figures in that sample (bytes), where known.
    pub reserved: Option<u64>,
    pub allocated: Option<u64>,
}

/// The highest fragmentation an allocator of the GPU showed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FragmentationPeak {
    /// 1 − largest free block / free bytes, 0 to 1 (as `record` writes it).
    pub fragmentation: f64,
    pub time_unix_ms: u64,
    pub pid: Option<u32>,
    /// Bytes of inactive (cached, free) blocks then.
    pub external_free: Option<u64>,
    pub largest_free_block: Option<u64>,
    /// The allocator's reserved bytes then.
    pub reserved: Option<u64>,
}

/// One allocator (a probed or simulated process) over the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllocatorRecord {
    pub pid: Option<u32>,
    /// Its `source` in its last sample that gave one ("pid 4242
    /// (simulated training, step 980)"), and in its first where that one
    /// differs.
    pub source: Option<String>,
    pub first_source: Option<String>,
    pub samples: u64,
    pub allocated_peak: Option<Moment>,
    pub reserved_peak: Option<Moment>,
    /// The highest of PyTorch's own peaks (a probe's `torch_peak`) the
    /// recording holds, at the first sample that carried it (the peak was
    /// reached by then): the samples above miss a peak inside a step.
    /// `None` for a simulated allocator and recordings made before vramtop
    /// wrote it.
    pub torch_allocated_peak: Option<Moment>,
    pub torch_reserved_peak: Option<Moment>,
    /// `num_ooms` in its first sample: OOMs before the recording began.
    pub ooms_before: Option<u64>,
    /// OOMs during the recording (the rises of `num_ooms`).
    pub ooms: u64,
    pub alloc_retries_before: Option<u64>,
    pub alloc_retries: u64,
    /// Samples where its `num_ooms` or `num_alloc_retries` fell: a
    /// process restarted under its pid (or counters reset).
    pub restarts: u64,
}

/// One GPU (or MIG device) over the recording.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuRecord {
    /// The NVML index (a MIG device's: its physical GPU's).
    pub index: u32,
    /// A MIG device's slot on its GPU; `None` for a physical GPU.
    pub mig_index: Option<u32>,
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// Samples with its figures (status ok).
    pub samples: u64,
    /// Samples where it was listed lost, the first of them, and the last
    /// reason given.
    pub lost_samples: u64,
    pub first_lost_unix_ms: Option<u64>,
    pub lost_reason: Option<String>,
    /// Samples between its first and last that do not list it at all.
    pub absent_samples: u64,
    /// Samples of the file after its last (it was gone at the end, or a
    /// recording of fewer GPUs was appended).
    pub samples_after_last: u64,
    /// Where a sample names it otherwise than its first (another card,
    /// or another recording appended): the first such sample's time and
    /// the name of its last sample.
    pub name_changed_unix_ms: Option<u64>,
    pub last_name: Option<String>,
    /// Its first and last sample with figures (those it was lost in
    /// where it had none).
    pub first_unix_ms: u64,
    pub last_unix_ms: u64,
    /// The median time between two of its samples (ms).
    pub interval_ms: Option<u64>,
    /// Times between two samples longer than twice `interval_ms`.
    pub gaps: u64,
    pub longest_gap: Option<Gap>,
    /// Samples whose time is before the sample before them (a clock set
    /// back, files joined out of order).
    pub time_went_back: u64,
    pub memory_used: Option<MemoryUsed>,
    /// By pid (those without a pid by source), at most
    /// [`MAX_ALLOCATORS_PER_GPU`].
    pub allocators: Vec<AllocatorRecord>,
    pub allocators_left_out: u64,
    /// Rises of `num_ooms` and `num_alloc_retries`, in file order, at most
    /// [`MAX_EVENTS_PER_KIND`] of each kind.
    pub events: Vec<CounterEvent>,
    pub ooms_left_out: u64,
    pub alloc_retries_left_out: u64,
    pub fragmentation_peak: Option<FragmentationPeak>,
}

/// A recording summed up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordingSummary {
    /// Lines read, blank ones and skipped ones included.
    pub lines: u64,
    pub samples: u64,
    pub skipped: Skipped,
    /// The earliest and latest sample time (ms since the Unix epoch).
    pub first_unix_ms: Option<u64>,
    pub last_unix_ms: Option<u64>,
    /// `last_unix_ms − first_unix_ms`.
    pub duration_ms: u64,
    /// Samples whose time is before the sample before them.
    pub time_went_back: u64,
    /// The `backend` values seen, first first (at most 8).
    pub backends: Vec<String>,
    pub gpus: Vec<GpuRecord>,
    /// GPU entries past [`MAX_GPUS`] distinct GPUs, not summed up.
    pub gpus_left_out: u64,
}

/// A GPU's identity across samples: its index, MIG slot and uuid (a
/// different card at the same index is another GPU).
type GpuKey = (u32, Option<u32>, Option<String>);

/// An allocator's identity on its GPU.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum AllocatorKey {
    Pid(u32),
    Source(String),
}

#[derive(Debug, Default)]
struct AllocatorState {
    record: Option<AllocatorRecord>,
    last_ooms: Option<u64>,
    last_retries: Option<u64>,
}

#[derive(Debug)]
struct GpuState {
    record: GpuRecord,
    /// The sample number of its first and last appearance (1-based).
    first_sample: u64,
    last_sample: u64,
    /// Samples that listed it (ok or lost).
    listed: u64,
    last_ok_ms: Option<u64>,
    /// The latest time of its samples so far (ms): after a step back, the
    /// next interval is measured from here where that is nearer, so that
    /// one line with a time set back makes no gap.
    latest_ok_ms: Option<u64>,
    used: Distribution,
    intervals: Distribution,
    allocators: BTreeMap<AllocatorKey, AllocatorState>,
    ooms_kept: usize,
    retries_kept: usize,
}

/// The running figures of a recording: feed it lines, then
/// [`RecordingReader::finish`].
#[derive(Debug, Default)]
pub struct RecordingReader {
    lines: u64,
    samples: u64,
    skipped: Skipped,
    first_ms: Option<u64>,
    last_ms: Option<u64>,
    previous_ms: Option<u64>,
    time_went_back: u64,
    backends: Vec<String>,
    gpus: BTreeMap<GpuKey, GpuState>,
    /// Keys in the order first seen, for the output's order.
    order: Vec<GpuKey>,
    gpus_left_out: u64,
}

fn text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str)
        .map(|s| s.chars().take(MAX_TEXT_CHARS).collect())
}

fn unsigned(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64)
}

fn small(v: Option<&Value>) -> Option<u32> {
    unsigned(v).and_then(|n| u32::try_from(n).ok())
}

/// A sample's time: ms since the Unix epoch, written as an integer (a
/// whole float taken too).
fn time_ms(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0 && *f < u64::MAX as f64)
            .map(|f| f as u64)
    })
}

impl RecordingReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// One line, without its newline; `complete`: a newline ended it
    /// (only the file's last line may lack one).
    pub fn feed_line(&mut self, line: &[u8], complete: bool) {
        self.lines = self.lines.saturating_add(1);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(map)) if is_sample(&map) => self.sample(&map),
            Ok(_) => self.skip(|s| s.not_a_sample += 1),
            Err(_) => {
                if let Some(map) = appended_sample(line) {
                    self.skip(|s| s.cut_then_appended += 1);
                    self.sample(&map);
                } else if complete || !first_is_brace(line) {
                    // A last line that does not open as JSON was never a
                    // sample: no cut, just not JSON (a binary file's).
                    self.skip(|s| s.not_json += 1);
                } else {
                    self.skip(|s| s.cut_last_line = true);
                }
            }
        }
    }

    /// A line longer than [`MAX_LINE_BYTES`], skipped unread.
    pub fn feed_overlong(&mut self) {
        self.lines = self.lines.saturating_add(1);
        self.skip(|s| s.too_long += 1);
    }

    fn skip(&mut self, count: impl FnOnce(&mut Skipped)) {
        count(&mut self.skipped);
        if self.skipped.first_line.is_none() {
            self.skipped.first_line = Some(self.lines);
        }
    }

    fn sample(&mut self, map: &Map<String, Value>) {
        let Some(t) = time_ms(map.get("time_unix_ms")) else {
            return;
        };
        self.samples = self.samples.saturating_add(1);
        self.first_ms = Some(self.first_ms.map_or(t, |f| f.min(t)));
        self.last_ms = Some(self.last_ms.map_or(t, |l| l.max(t)));
        if self.previous_ms.is_some_and(|p| t < p) {
            self.time_went_back = self.time_went_back.saturating_add(1);
        }
        self.previous_ms = Some(t);
        if let Some(backend) = text(map.get("backend"))
            && self.backends.len() < 8
            && !self.backends.contains(&backend)
        {
            self.backends.push(backend);
        }
        let Some(gpus) = map.get("gpus").and_then(Value::as_array) else {
            return;
        };
        for gpu in gpus {
            if let Some(gpu) = gpu.as_object() {
                self.gpu(gpu, t);
            }
        }
    }

    /// The state of the GPU `key`, made at its first sight (`None` past
    /// [`MAX_GPUS`]).
    fn gpu_state(&mut self, key: GpuKey, t: u64) -> Option<&mut GpuState> {
        if !self.gpus.contains_key(&key) {
            if self.gpus.len() >= MAX_GPUS {
                self.gpus_left_out = self.gpus_left_out.saturating_add(1);
                return None;
            }
            self.order.push(key.clone());
            self.gpus.insert(
                key.clone(),
                GpuState {
                    record: GpuRecord {
                        index: key.0,
                        mig_index: key.1,
                        uuid: key.2.clone(),
                        name: None,
                        samples: 0,
                        lost_samples: 0,
                        first_lost_unix_ms: None,
                        lost_reason: None,
                        absent_samples: 0,
                        samples_after_last: 0,
                        name_changed_unix_ms: None,
                        last_name: None,
                        first_unix_ms: t,
                        last_unix_ms: t,
                        interval_ms: None,
                        gaps: 0,
                        longest_gap: None,
                        time_went_back: 0,
                        memory_used: None,
                        allocators: Vec::new(),
                        allocators_left_out: 0,
                        events: Vec::new(),
                        ooms_left_out: 0,
                        alloc_retries_left_out: 0,
                        fragmentation_peak: None,
                    },
                    first_sample: self.samples,
                    last_sample: self.samples,
                    listed: 0,
                    last_ok_ms: None,
                    latest_ok_ms: None,
                    used: Distribution::default(),
                    intervals: Distribution::default(),
                    allocators: BTreeMap::new(),
                    ooms_kept: 0,
                    retries_kept: 0,
                },
            );
        }
        let samples = self.samples;
        let state = self.gpus.get_mut(&key)?;
        // A GPU listed twice in one sample counts once there.
        if state.listed == 0 || state.last_sample != samples {
            state.listed = state.listed.saturating_add(1);
        }
        state.last_sample = samples;
        Some(state)
    }

    fn gpu(&mut self, gpu: &Map<String, Value>, t: u64) {
        let Some(index) = small(gpu.get("index")) else {
            return;
        };
        let mig_index = small(gpu.get("mig_index"));
        let lost = gpu.get("status").and_then(Value::as_str) == Some("lost");
        if lost {
            // A lost GPU is listed by index alone: it is the one of that
            // index seen last (or a new one if none was).
            let key = self
                .order
                .iter()
                .rev()
                .find(|k| k.0 == index && k.1.is_none())
                .cloned()
                .unwrap_or((index, None, None));
            if let Some(state) = self.gpu_state(key, t) {
                state.record.lost_samples = state.record.lost_samples.saturating_add(1);
                if state.record.first_lost_unix_ms.is_none() {
                    state.record.first_lost_unix_ms = Some(t);
                }
                state.record.lost_reason =
                    text(gpu.get("reason")).or(state.record.lost_reason.take());
            }
            return;
        }
        let key = (index, mig_index, text(gpu.get("uuid")));
        let Some(state) = self.gpu_state(key, t) else {
            return;
        };
        state.observe(gpu, t);
    }

    /// The summary of the lines fed.
    pub fn finish(mut self) -> RecordingSummary {
        let mut gpus = Vec::with_capacity(self.order.len());
        for key in &self.order {
            if let Some(state) = self.gpus.remove(key) {
                let after = self.samples.saturating_sub(state.last_sample);
                let mut g = state.finish();
                g.samples_after_last = after;
                gpus.push(g);
            }
        }
        RecordingSummary {
            lines: self.lines,
            samples: self.samples,
            skipped: self.skipped,
            first_unix_ms: self.first_ms,
            last_unix_ms: self.last_ms,
            duration_ms: match (self.first_ms, self.last_ms) {
                (Some(f), Some(l)) => l.saturating_sub(f),
                _ => 0,
            },
            time_went_back: self.time_went_back,
            backends: self.backends,
            gpus,
            gpus_left_out: self.gpus_left_out,
        }
    }
}

/// A sample appended after the start of one cut mid-write, found inside
/// a line that is not JSON.
fn appended_sample(line: &[u8]) -> Option<Map<String, Value>> {
    let at = memchr::memmem::rfind(line, SAMPLE_START).filter(|&at| at > 0)?;
    match serde_json::from_slice::<Value>(line.get(at..)?) {
        Ok(Value::Object(map)) if is_sample(&map) => Some(map),
        _ => None,
    }
}

/// The sample `line` holds, if it holds one (after a cut start too).
fn sample_of(line: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(map)) if is_sample(&map) => Some(map),
        Ok(_) => None,
        Err(_) => appended_sample(line),
    }
}

/// Which sample `--at` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The sample nearest this time (ms since the Unix epoch), the
    /// earlier of two as near.
    Time(u64),
    /// The N-th sample of the file (1-based; the caller checks that the
    /// file has it), the last where it has fewer.
    Ordinal(u64),
}

/// The sample `--at` picked: its line number, its time and its fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Picked {
    pub line: u64,
    pub time_unix_ms: u64,
    pub sample: Map<String, Value>,
}

/// The sample of `input` that `target` names, read line by line (one
/// sample kept besides the line being read); `None` of a file without.
pub fn pick_sample(input: impl BufRead, target: Target) -> Result<Option<Picked>, RecordingError> {
    let mut best: Option<Picked> = None;
    let mut line_number = 0u64;
    let mut samples = 0u64;
    for_each_line(input, MAX_LINE_BYTES, |line| {
        line_number = line_number.saturating_add(1);
        let Line::Whole(bytes, _) = line else { return };
        if let Target::Ordinal(n) = target
            && samples >= n.max(1)
        {
            return;
        }
        let Some(map) = sample_of(bytes) else { return };
        let Some(t) = time_ms(map.get("time_unix_ms")) else {
            return;
        };
        samples = samples.saturating_add(1);
        let better = match (target, &best) {
            (_, None) | (Target::Ordinal(_), Some(_)) => true,
            (Target::Time(want), Some(b)) => t.abs_diff(want) < b.time_unix_ms.abs_diff(want),
        };
        if better {
            best = Some(Picked {
                line: line_number,
                time_unix_ms: t,
                sample: map,
            });
        }
    })?;
    Ok(best)
}

/// A moment of a recording as `--at` writes it, before the recording
/// is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingTime {
    /// A date and time, UTC (ms since the Unix epoch).
    Utc(u64),
    /// A time of day, UTC (ms after midnight), on the recording's day.
    TimeOfDay(u64),
    /// This long after the first sample (ms).
    After(u64),
}

/// What `--at` takes of a recording, for messages.
pub const TIME_FORMS: &str = "a UTC time (03:14:07, 2026-12-07T03:14:07Z) or +DURATION after \
                              the first sample (+90s, +2m30s, +1h30m, +1.5h)";

/// Examples of `+DURATION`: one unit or several, a fraction.
const AFTER_FORMS: &str = "+90s, +2m30s, +1h30m or +1.5h (units ms, s, m, h)";

/// Parses a moment of a recording: `+DURATION`, `HH:MM[:SS[.fff]]`, or a
/// date and time (`2026-12-07T03:14:07Z`, `2026-12-07 03:14:07`, a `Z`
/// or ` UTC` after it taken, no other zone).
pub fn parse_time(text: &str) -> Result<RecordingTime, String> {
    use chrono::{NaiveDateTime, NaiveTime, Timelike as _};
    let t = text.trim();
    if let Some(rest) = t.strip_prefix('+') {
        use crate::alloc::sizing::{MAX_PARSED_DURATION_MS, QuantityError, compound_duration_ms};
        let quoted = crate::quote::cut(t);
        // The unit is part of the value, as every duration's: a bare
        // number is refused, as a term without its unit is (`+1h30`).
        let read = if crate::alloc::sizing::is_bare_number(rest) {
            Err(QuantityError::Malformed)
        } else {
            compound_duration_ms(rest)
        };
        return read.map(RecordingTime::After).map_err(|e| match e {
            QuantityError::TooLarge => format!(
                "'{quoted}' is too long: the most is {}h after the first sample",
                MAX_PARSED_DURATION_MS / 3_600_000
            ),
            QuantityError::Malformed => format!(
                "'{quoted}' is not a duration after the first sample: write e.g. {AFTER_FORMS}"
            ),
        });
    }
    let bare = t
        .strip_suffix('Z')
        .or_else(|| t.strip_suffix(" UTC"))
        .unwrap_or(t);
    for format in [
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%d %H:%M",
    ] {
        if let Ok(at) = NaiveDateTime::parse_from_str(bare, format) {
            let ms = at.and_utc().timestamp_millis();
            return u64::try_from(ms)
                .map(RecordingTime::Utc)
                .map_err(|_| format!("'{}' is before 1970", crate::quote::cut(t)));
        }
    }
    for format in ["%H:%M:%S%.f", "%H:%M"] {
        if let Ok(at) = NaiveTime::parse_from_str(bare, format) {
            let ms = u64::from(at.num_seconds_from_midnight()) * 1_000
                + u64::from(at.nanosecond() / 1_000_000).min(999);
            return Ok(RecordingTime::TimeOfDay(ms));
        }
    }
    Err(format!("'{}' is not {TIME_FORMS}", crate::quote::cut(t)))
}

/// Ms in a day.
const DAY_MS: u64 = 86_400_000;

impl RecordingTime {
    /// The time (ms since the Unix epoch) this names in a recording from
    /// `first` to `last`: a time of day on the first day of the span that
    /// puts it inside it (the first day where none does).
    pub fn resolve(self, first: u64, last: u64) -> u64 {
        match self {
            RecordingTime::Utc(ms) => ms,
            RecordingTime::After(ms) => first.saturating_add(ms),
            RecordingTime::TimeOfDay(ms) => {
                let first_day = first / DAY_MS;
                // A span of more than a year is looked at in its first.
                let last_day = (last / DAY_MS).min(first_day.saturating_add(366));
                (first_day..=last_day)
                    .map(|day| day.saturating_mul(DAY_MS).saturating_add(ms))
                    .find(|t| (first..=last).contains(t))
                    .unwrap_or_else(|| first_day.saturating_mul(DAY_MS).saturating_add(ms))
            }
        }
    }
}

/// Whether `line`'s first byte past blanks is `{`: JSON, and never a
/// pickle (whose first byte is its protocol's, or an opcode other than `{`).
pub fn first_is_brace(line: &[u8]) -> bool {
    line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
}

/// Where `open` sends a file, told by its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// No byte at all: neither a snapshot nor a recording.
    Empty,
    /// A pickle's protocol marker: a snapshot, whatever the file's name.
    Snapshot,
    /// A sample's line, or JSON of any other kind: read as a recording,
    /// whose reader says "no sample" of JSON that holds none.
    Recording,
    /// Something else: the file's name decides (`.jsonl`: a recording).
    ByName,
}

/// The first byte of a pickle of protocol 2 and up (`PROTO`).
pub const PICKLE_PROTO: u8 = 0x80;

/// Where `open` sends a file whose first bytes are `prefix` (as many as
/// were read: the whole file, or its start). JSON goes to the recording
/// reader, be it an object (`{`, no pickle opcode) or an array (`[1,2]`,
/// one line or many; a `[section]` of TOML is text), so
/// that JSON of every shape ends in the same "no sample" error.
pub fn route(prefix: &[u8]) -> Route {
    if prefix.is_empty() {
        return Route::Empty;
    }
    if prefix.first() == Some(&PICKLE_PROTO) {
        return Route::Snapshot;
    }
    if looks_like_recording(prefix) || first_is_brace(prefix) || opens_json_array(prefix) {
        return Route::Recording;
    }
    Route::ByName
}

/// Whether `prefix` past blanks opens a JSON array: one whole (pretty
/// printed over lines too), or cut by the end of `prefix` (its start of a
/// larger file), not text that merely starts with `[` (TOML's
/// `[section]`).
fn opens_json_array(prefix: &[u8]) -> bool {
    let start = prefix
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(prefix.len());
    let rest = &prefix[start..];
    if rest.first() != Some(&b'[') {
        return false;
    }
    let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
    match values.next() {
        Some(Ok(v)) => v.is_array(),
        Some(Err(e)) => e.is_eof(),
        None => false,
    }
}

/// Whether a JSON object has a sample's fields.
fn is_sample(map: &Map<String, Value>) -> bool {
    time_ms(map.get("time_unix_ms")).is_some() && map.get("gpus").is_some_and(Value::is_array)
}

/// An allocator's figures in one sample, as far as the line gives them.
struct AllocatorFigures {
    key: AllocatorKey,
    pid: Option<u32>,
    source: Option<String>,
    allocated: Option<u64>,
    reserved: Option<u64>,
    ooms: Option<u64>,
    retries: Option<u64>,
    fragmentation: Option<f64>,
    external_free: Option<u64>,
    largest_free_block: Option<u64>,
    /// PyTorch's own peaks (`torch_peak`), where the line has them.
    torch_allocated: Option<u64>,
    torch_reserved: Option<u64>,
}

impl AllocatorFigures {
    fn read(a: &Map<String, Value>) -> Option<AllocatorFigures> {
        let pid = small(a.get("pid"));
        let source = text(a.get("source"));
        let key = match (pid, &source) {
            (Some(p), _) => AllocatorKey::Pid(p),
            (None, Some(s)) => AllocatorKey::Source(s.clone()),
            (None, None) => return None,
        };
        // Figures the probe sent as null are 0 in the line and listed in
        // `unknown`: unknown here too.
        let unknown: Vec<&str> = a
            .get("unknown")
            .and_then(Value::as_array)
            .map(|u| u.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let known = |stat: &str| !unknown.contains(&stat);
        let frag = a.get("fragmentation").and_then(Value::as_object);
        let torch_peak = a.get("torch_peak").and_then(Value::as_object);
        let segments_received = a
            .get("segments_received")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let counter = |name: &str| {
            if known(name) {
                // An i64 in the line; a negative one is no count.
                unsigned(a.get(name))
            } else {
                None
            }
        };
        Some(AllocatorFigures {
            key,
            pid,
            source,
            allocated: unsigned(a.get("allocated"))
                .filter(|_| known("allocated_bytes.all.current")),
            reserved: unsigned(a.get("reserved")).filter(|_| known("reserved_bytes.all.current")),
            ooms: counter("num_ooms"),
            retries: counter("num_alloc_retries"),
            fragmentation: frag
                .filter(|_| segments_received)
                .and_then(|f| f.get("fragmentation"))
                .and_then(Value::as_f64)
                .filter(|f| f.is_finite() && (0.0..=1.0).contains(f)),
            external_free: frag.and_then(|f| unsigned(f.get("external_free"))),
            largest_free_block: frag.and_then(|f| unsigned(f.get("largest_free_block"))),
            torch_allocated: torch_peak.and_then(|p| unsigned(p.get("allocated"))),
            torch_reserved: torch_peak.and_then(|p| unsigned(p.get("reserved"))),
        })
    }
}

/// `peak` replaced by `bytes` at `t` when it is higher (the first of
/// equal peaks stays).
fn raise(peak: &mut Option<Moment>, bytes: Option<u64>, t: u64) {
    if let Some(bytes) = bytes
        && peak.is_none_or(|p| bytes > p.bytes)
    {
        *peak = Some(Moment {
            bytes,
            time_unix_ms: t,
        });
    }
}

impl GpuState {
    fn observe(&mut self, gpu: &Map<String, Value>, t: u64) {
        let r = &mut self.record;
        if r.samples == 0 {
            r.first_unix_ms = t;
            r.last_unix_ms = t;
        }
        r.samples = r.samples.saturating_add(1);
        r.first_unix_ms = r.first_unix_ms.min(t);
        r.last_unix_ms = r.last_unix_ms.max(t);
        let name = text(gpu.get("name"));
        if r.samples == 1 {
            r.name = name;
        } else if name.is_some() && name != r.name {
            if r.name_changed_unix_ms.is_none() {
                r.name_changed_unix_ms = Some(t);
            }
            r.last_name = name;
        } else if name.is_some() && r.last_name.is_some() {
            // Back to its first name: the last sample's is that one.
            r.last_name = name;
        }
        match self.last_ok_ms {
            Some(prev) if t < prev => r.time_went_back = r.time_went_back.saturating_add(1),
            Some(last) => {
                // Forward from the sample before, or from the latest one
                // where time went back in between and is past it again:
                // whichever is nearer.
                let prev = match self.latest_ok_ms {
                    Some(latest) if latest > last && t >= latest => latest,
                    _ => last,
                };
                let ms = t - prev;
                self.intervals.add(ms);
                if r.longest_gap.is_none_or(|g| ms > g.ms) {
                    r.longest_gap = Some(Gap {
                        from_unix_ms: prev,
                        to_unix_ms: t,
                        ms,
                    });
                }
            }
            None => {}
        }
        self.last_ok_ms = Some(t);
        self.latest_ok_ms = Some(self.latest_ok_ms.map_or(t, |l| l.max(t)));
        if let Some(used) = unsigned(gpu.get("memory_used")) {
            self.used.add(used);
            let total = unsigned(gpu.get("memory_total"));
            match &mut r.memory_used {
                None => {
                    r.memory_used = Some(MemoryUsed {
                        samples: 1,
                        peak: used_peak(gpu, used, total, t),
                        min: Moment {
                            bytes: used,
                            time_unix_ms: t,
                        },
                        median: used,
                        median_exact: true,
                    });
                }
                Some(m) => {
                    m.samples = m.samples.saturating_add(1);
                    if used > m.peak.bytes {
                        m.peak = used_peak(gpu, used, total, t);
                    }
                    if used < m.min.bytes {
                        m.min = Moment {
                            bytes: used,
                            time_unix_ms: t,
                        };
                    }
                }
            }
        }
        let allocators: Vec<&Map<String, Value>> = match gpu.get("allocators") {
            Some(Value::Array(list)) if !list.is_empty() => {
                list.iter().filter_map(Value::as_object).collect()
            }
            // Older lines, or a sample built with the shown one alone.
            _ => gpu
                .get("allocator")
                .and_then(Value::as_object)
                .into_iter()
                .collect(),
        };
        for a in allocators {
            if let Some(figures) = AllocatorFigures::read(a) {
                self.allocator(figures, t);
            }
        }
    }

    fn allocator(&mut self, a: AllocatorFigures, t: u64) {
        if !self.allocators.contains_key(&a.key) {
            if self.allocators.len() >= MAX_ALLOCATORS_PER_GPU {
                self.record.allocators_left_out = self.record.allocators_left_out.saturating_add(1);
                return;
            }
            self.allocators
                .insert(a.key.clone(), AllocatorState::default());
        }
        let Some(state) = self.allocators.get_mut(&a.key) else {
            return;
        };
        let record = state.record.get_or_insert_with(|| AllocatorRecord {
            pid: a.pid,
            source: a.source.clone(),
            first_source: None,
            samples: 0,
            allocated_peak: None,
            reserved_peak: None,
            torch_allocated_peak: None,
            torch_reserved_peak: None,
            ooms_before: a.ooms,
            ooms: 0,
            alloc_retries_before: a.retries,
            alloc_retries: 0,
            restarts: 0,
        });
        record.samples = record.samples.saturating_add(1);
        // The last source said (a step count, a probe's state moves on),
        // the first kept beside it once they differ.
        if a.source.is_some() && a.source != record.source {
            if record.first_source.is_none() {
                record.first_source = record.source.take();
            }
            record.source = a.source.clone();
        }
        raise(&mut record.allocated_peak, a.allocated, t);
        raise(&mut record.reserved_peak, a.reserved, t);
        raise(&mut record.torch_allocated_peak, a.torch_allocated, t);
        raise(&mut record.torch_reserved_peak, a.torch_reserved, t);
        // A counter that fell is a new process (or a reset): counted again
        // from where it is, and said, once per sample.
        let fell = |last: Option<u64>, now: Option<u64>| matches!((last, now), (Some(l), Some(n)) if n < l);
        if fell(state.last_ooms, a.ooms) || fell(state.last_retries, a.retries) {
            record.restarts = record.restarts.saturating_add(1);
        }
        let restart = record.restarts;
        for (kind, now) in [
            (CounterKind::Oom, a.ooms),
            (CounterKind::AllocRetry, a.retries),
        ] {
            let last = match kind {
                CounterKind::Oom => &mut state.last_ooms,
                _ => &mut state.last_retries,
            };
            let Some(now) = now else { continue };
            let Some(before) = last.replace(now).filter(|&b| now != b) else {
                continue;
            };
            let kind = match kind {
                CounterKind::Oom if now < before => CounterKind::OomsFell,
                _ if now < before => CounterKind::AllocRetriesFell,
                k => k,
            };
            let (kept, left_out) = match kind {
                CounterKind::Oom | CounterKind::OomsFell => {
                    (&mut self.ooms_kept, &mut self.record.ooms_left_out)
                }
                CounterKind::AllocRetry | CounterKind::AllocRetriesFell => (
                    &mut self.retries_kept,
                    &mut self.record.alloc_retries_left_out,
                ),
            };
            match kind {
                CounterKind::Oom => record.ooms = record.ooms.saturating_add(now - before),
                CounterKind::AllocRetry => {
                    record.alloc_retries = record.alloc_retries.saturating_add(now - before);
                }
                CounterKind::OomsFell | CounterKind::AllocRetriesFell => {}
            }
            if *kept >= MAX_EVENTS_PER_KIND {
                *left_out = left_out.saturating_add(1);
                continue;
            }
            *kept += 1;
            self.record.events.push(CounterEvent {
                kind,
                time_unix_ms: t,
                pid: a.pid,
                from: before,
                to: now,
                restart,
                reserved: a.reserved,
                allocated: a.allocated,
            });
        }
        if let Some(f) = a.fragmentation
            && self
                .record
                .fragmentation_peak
                .as_ref()
                .is_none_or(|p| f > p.fragmentation)
        {
            self.record.fragmentation_peak = Some(FragmentationPeak {
                fragmentation: f,
                time_unix_ms: t,
                pid: a.pid,
                external_free: a.external_free,
                largest_free_block: a.largest_free_block,
                reserved: a.reserved,
            });
        }
    }

    fn finish(mut self) -> GpuRecord {
        let span = self
            .last_sample
            .saturating_sub(self.first_sample)
            .saturating_add(1);
        self.record.absent_samples = span.saturating_sub(self.listed);
        if let Some(m) = &mut self.record.memory_used {
            m.median = self.used.median().unwrap_or(m.min.bytes);
            m.median_exact = self.used.exact();
        }
        self.record.interval_ms = self.intervals.median();
        self.record.gaps = self
            .record
            .interval_ms
            .map_or(0, |i| self.intervals.count_above(i.saturating_mul(2)));
        self.record.allocators = self
            .allocators
            .into_values()
            .filter_map(|a| a.record)
            .collect();
        self.record
    }
}

/// The peak of a GPU's memory at `t`: `used` bytes, and the processes
/// the sample lists, largest first.
fn used_peak(gpu: &Map<String, Value>, used: u64, total: Option<u64>, t: u64) -> UsedPeak {
    let list = gpu.get("processes").and_then(Value::as_array);
    let mut processes: Vec<PeakProcess> = list
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .filter_map(|p| {
            Some(PeakProcess {
                pid: small(p.get("pid"))?,
                user: text(p.get("user")),
                command: text(p.get("command")),
                used_memory: unsigned(p.get("used_memory")),
                parent_pid: small(p.get("parent_pid")),
            })
        })
        .collect();
    // Largest first, unknown last; the pid breaks ties so the order is
    // the same on every run.
    processes.sort_by(|a, b| {
        b.used_memory
            .cmp(&a.used_memory)
            .then_with(|| a.pid.cmp(&b.pid))
    });
    let left_out = processes.len().saturating_sub(MAX_PEAK_PROCESSES);
    let left_out_bytes = processes
        .iter()
        .skip(MAX_PEAK_PROCESSES)
        .filter_map(|p| p.used_memory)
        .fold(0u64, u64::saturating_add);
    processes.truncate(MAX_PEAK_PROCESSES);
    UsedPeak {
        bytes: used,
        time_unix_ms: t,
        memory_total: total,
        processes_listed: list.is_some(),
        processes,
        processes_left_out: left_out as u64,
        processes_left_out_bytes: left_out_bytes,
    }
}

/// Reads a recording from `input` line by line, no line longer than
/// [`MAX_LINE_BYTES`] held.
pub fn read_recording(input: impl BufRead) -> Result<RecordingSummary, RecordingError> {
    let mut reader = RecordingReader::new();
    for_each_line(input, MAX_LINE_BYTES, |line| match line {
        Line::Whole(bytes, complete) => reader.feed_line(bytes, complete),
        Line::TooLong => reader.feed_overlong(),
    })?;
    Ok(reader.finish())
}

/// A line as [`for_each_line`] gives it.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// The line without its newline; `true` when a newline ended it.
    Whole(&'a [u8], bool),
    /// A line past the limit, skipped.
    TooLong,
}

/// Calls `each` with every line of `input`, holding at most `max` bytes
/// of one: a longer line is read through and given as [`Line::TooLong`].
pub fn for_each_line(
    mut input: impl BufRead,
    max: usize,
    mut each: impl FnMut(Line<'_>),
) -> std::io::Result<()> {
    let mut line: Vec<u8> = Vec::new();
    let mut too_long = false;
    loop {
        let buf = match input.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            if too_long {
                each(Line::TooLong);
            } else if !line.is_empty() {
                each(Line::Whole(&line, false));
            }
            return Ok(());
        }
        let (part, newline) = match memchr::memchr(b'\n', buf) {
            Some(at) => (&buf[..at], true),
            None => (buf, false),
        };
        let used = part.len() + usize::from(newline);
        if !too_long {
            if line.len().saturating_add(part.len()) > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(part);
            }
        }
        input.consume(used);
        if newline {
            if too_long {
                each(Line::TooLong);
            } else {
                each(Line::Whole(&line, true));
            }
            line.clear();
            too_long = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn summary(text: &str) -> RecordingSummary {
        read_recording(text.as_bytes()).expect("reading from memory cannot fail")
    }

    /// A sample line of one GPU (index 0) with `used` bytes in use.
    fn line(t: u64, used: u64) -> String {
        format!(
            r#"{{"time_unix_ms":{t},"backend":"sim","gpus":[{{"status":"ok","index":0,"name":"H100","uuid":"GPU-a","memory_total":{},"memory_used":{used},"processes":[]}}]}}"#,
            80 * GIB
        )
    }

    fn allocator(
        pid: u32,
        allocated: u64,
        reserved: u64,
        ooms: i64,
        retries: i64,
        frag: f64,
    ) -> String {
        format!(
            r#"{{"source":"pid {pid}","pid":{pid},"allocated":{allocated},"reserved":{reserved},"active":0,"inactive_split_bytes":0,"segments":1,"num_alloc_retries":{retries},"num_ooms":{ooms},"fragmentation":{{"fragmentation":{frag},"external_free":{},"largest_free_block":1024}},"segments_age_s":0.0,"segments_received":true}}"#,
            reserved.saturating_sub(allocated)
        )
    }

    fn with_allocators(t: u64, allocators: &[String]) -> String {
        format!(
            r#"{{"time_unix_ms":{t},"gpus":[{{"status":"ok","index":0,"name":"H100","memory_used":1,"allocators":[{}]}}]}}"#,
            allocators.join(",")
        )
    }

    fn gpu(s: &RecordingSummary) -> &GpuRecord {
        s.gpus.first().expect("one GPU")
    }

    #[test]
    fn one_sample_with_its_time_set_back_counts_as_time_going_back_not_as_a_gap() {
        // Every 100 ms, but the fourth line's time is 60 s early.
        let times = [
            100_000,
            100_100,
            100_200,
            100_300 - 60_000,
            100_400,
            100_500,
        ];
        let text: Vec<String> = times.iter().map(|&t| line(t, 1)).collect();
        let s = summary(&text.join("\n"));
        let g = gpu(&s);
        assert_eq!((s.time_went_back, g.time_went_back), (1, 1));
        assert_eq!(g.gaps, 0);
        assert_eq!(g.interval_ms, Some(100));
        assert_eq!(g.longest_gap.map(|gap| gap.ms), Some(200));
    }

    #[test]
    fn a_clock_set_back_for_good_counts_once_and_samples_go_on_from_there() {
        let times = [100_000, 100_100, 40_000, 40_100, 40_200];
        let text: Vec<String> = times.iter().map(|&t| line(t, 1)).collect();
        let g = summary(&text.join("\n")).gpus.remove(0);
        assert_eq!(g.time_went_back, 1);
        assert_eq!((g.gaps, g.interval_ms), (0, Some(100)));
    }

    #[test]
    fn an_allocator_keeps_its_last_source_and_its_first_beside_it() {
        let with_source = |t: u64, step: u32| {
            with_allocators(t, &[allocator(1, 1, 1, 0, 0, 0.0)])
                .replace("\"source\":\"", &format!("\"source\":\"step {step} "))
        };
        let text = [
            with_source(1_000, 0),
            with_source(2_000, 5),
            with_source(3_000, 9),
        ]
        .join("\n");
        let s = summary(&text);
        let a = &gpu(&s).allocators[0];
        assert!(
            a.source
                .as_deref()
                .is_some_and(|x| x.starts_with("step 9 ")),
            "{a:?}"
        );
        assert!(
            a.first_source
                .as_deref()
                .is_some_and(|x| x.starts_with("step 0 ")),
            "{a:?}"
        );
    }

    #[test]
    fn a_gpu_gone_before_the_end_or_renamed_is_noted() {
        let two = |t: u64, second: &str| {
            format!(
                r#"{{"time_unix_ms":{t},"gpus":[{{"status":"ok","index":0,"uuid":"GPU-a","name":"H100","memory_used":1}},{{"status":"ok","index":1,"uuid":"GPU-b","name":"{second}","memory_used":1}}]}}"#
            )
        };
        let text = [
            two(1_000, "A100"),
            two(2_000, "A100"),
            two(3_000, "A100 (other)"),
            line(4_000, 1),
            line(5_000, 1),
        ]
        .join("\n");
        let s = summary(&text);
        let (first, second) = (&s.gpus[0], &s.gpus[1]);
        assert_eq!(first.samples_after_last, 0);
        assert_eq!(second.samples_after_last, 2);
        assert_eq!(second.last_unix_ms, 3_000);
        assert_eq!(first.name_changed_unix_ms, None);
        assert_eq!(second.name.as_deref(), Some("A100"));
        assert_eq!(second.name_changed_unix_ms, Some(3_000));
        assert_eq!(second.last_name.as_deref(), Some("A100 (other)"));
    }

    #[test]
    fn the_span_is_from_the_earliest_to_the_latest_sample() {
        let s = summary(&format!(
            "{}\n{}\n{}\n",
            line(1_000, 1),
            line(3_500, 1),
            line(2_000, 1)
        ));
        assert_eq!(s.samples, 3);
        assert_eq!(s.first_unix_ms, Some(1_000));
        assert_eq!(s.last_unix_ms, Some(3_500));
        assert_eq!(s.duration_ms, 2_500);
        assert_eq!(s.time_went_back, 1);
        assert_eq!(gpu(&s).time_went_back, 1);
    }

    #[test]
    fn the_memory_peak_keeps_its_time_and_processes_largest_first() {
        let peak = format!(
            r#"{{"time_unix_ms":2000,"gpus":[{{"index":0,"uuid":"GPU-a","memory_used":{},"processes":[{{"pid":7,"command":"small","used_memory":1}},{{"pid":9,"command":null,"used_memory":null}},{{"pid":8,"command":"big","used_memory":{}}}]}}]}}"#,
            50 * GIB,
            40 * GIB
        );
        let s = summary(&format!(
            "{}\n{peak}\n{}\n",
            line(1_000, GIB),
            line(3_000, 50 * GIB)
        ));
        let m = gpu(&s).memory_used.as_ref().expect("memory used");
        // The first of equal peaks.
        assert_eq!(m.peak.bytes, 50 * GIB);
        assert_eq!(m.peak.time_unix_ms, 2_000);
        let pids: Vec<u32> = m.peak.processes.iter().map(|p| p.pid).collect();
        assert_eq!(pids, [8, 7, 9]);
        assert_eq!(m.peak.processes[0].command.as_deref(), Some("big"));
        assert!(m.peak.processes_listed);
    }

    #[test]
    fn the_peak_keeps_at_most_the_cap_of_processes_and_counts_the_rest() {
        let procs: Vec<String> = (0..40)
            .map(|i| format!(r#"{{"pid":{i},"used_memory":{i}}}"#))
            .collect();
        let l = format!(
            r#"{{"time_unix_ms":1,"gpus":[{{"index":0,"memory_used":5,"processes":[{}]}}]}}"#,
            procs.join(",")
        );
        let s = summary(&l);
        let peak = &gpu(&s).memory_used.as_ref().expect("used").peak;
        assert_eq!(peak.processes.len(), MAX_PEAK_PROCESSES);
        assert_eq!(peak.processes_left_out, 40 - MAX_PEAK_PROCESSES as u64);
        assert_eq!(peak.processes[0].pid, 39);
        // Largest first: those left out are pids 0..8, holding 0 + … + 7 B.
        let left = 40 - MAX_PEAK_PROCESSES as u64;
        assert_eq!(peak.processes_left_out_bytes, left * (left - 1) / 2);
    }

    #[test]
    fn the_minimum_and_the_lower_median_of_memory_used() {
        let text: String = [5, 1, 4, 2, 3, 6]
            .iter()
            .enumerate()
            .map(|(i, &u)| line(i as u64 * 1_000, u * GIB) + "\n")
            .collect();
        let m = gpu(&summary(&text)).memory_used.clone().expect("used");
        assert_eq!(
            m.min,
            Moment {
                bytes: GIB,
                time_unix_ms: 1_000
            }
        );
        assert_eq!(m.median, 3 * GIB);
        assert!(m.median_exact);
        assert_eq!(m.samples, 6);
    }

    #[test]
    fn a_median_of_many_distinct_values_is_rounded_within_a_percent() {
        let mut d = Distribution::default();
        for v in 0..(MAX_EXACT_VALUES as u64 * 3) {
            d.add(1_000_000 + v * 997);
        }
        assert!(!d.exact());
        let exact = 1_000_000 + (MAX_EXACT_VALUES as u64 * 3 / 2 - 1) * 997;
        let got = d.median().expect("a median");
        assert!(got.abs_diff(exact) * 100 < exact, "{got} vs {exact}");
    }

    #[test]
    fn the_longest_gap_and_the_gaps_past_twice_the_interval() {
        let times = [0, 1_000, 2_000, 9_000, 10_000, 13_000, 14_000];
        let text: String = times.iter().map(|&t| line(t, 1) + "\n").collect();
        let g = gpu(&summary(&text)).clone();
        assert_eq!(g.interval_ms, Some(1_000));
        assert_eq!(
            g.longest_gap,
            Some(Gap {
                from_unix_ms: 2_000,
                to_unix_ms: 9_000,
                ms: 7_000
            })
        );
        assert_eq!(g.gaps, 2);
    }

    #[test]
    fn allocator_peaks_are_per_pid_with_their_times() {
        let text = [
            with_allocators(
                1_000,
                &[
                    allocator(1, 10, 20, 0, 0, 0.1),
                    allocator(2, 5, 5, 0, 0, 0.0),
                ],
            ),
            with_allocators(2_000, &[allocator(1, 30, 25, 0, 0, 0.1)]),
            with_allocators(3_000, &[allocator(1, 20, 40, 0, 0, 0.1)]),
        ]
        .join("\n");
        let s = summary(&text);
        let a = &gpu(&s).allocators;
        assert_eq!(a.len(), 2);
        assert_eq!(a[0].pid, Some(1));
        assert_eq!(
            a[0].allocated_peak,
            Some(Moment {
                bytes: 30,
                time_unix_ms: 2_000
            })
        );
        assert_eq!(
            a[0].reserved_peak,
            Some(Moment {
                bytes: 40,
                time_unix_ms: 3_000
            })
        );
        assert_eq!(a[1].samples, 1);
    }

    #[test]
    fn each_rise_of_num_ooms_is_an_event_with_the_memory_then() {
        let text = [
            with_allocators(1_000, &[allocator(1, 10, 20, 1, 0, 0.0)]),
            with_allocators(2_000, &[allocator(1, 61, 78, 2, 3, 0.0)]),
            with_allocators(3_000, &[allocator(1, 61, 78, 2, 3, 0.0)]),
            with_allocators(4_000, &[allocator(1, 62, 79, 4, 3, 0.0)]),
        ]
        .join("\n");
        let s = summary(&text);
        let g = gpu(&s);
        let ooms: Vec<&CounterEvent> = g
            .events
            .iter()
            .filter(|e| e.kind == CounterKind::Oom)
            .collect();
        assert_eq!(ooms.len(), 2);
        assert_eq!(
            (ooms[0].from, ooms[0].to, ooms[0].time_unix_ms),
            (1, 2, 2_000)
        );
        assert_eq!((ooms[0].reserved, ooms[0].allocated), (Some(78), Some(61)));
        assert_eq!((ooms[1].from, ooms[1].to), (2, 4));
        let retries: Vec<&CounterEvent> = g
            .events
            .iter()
            .filter(|e| e.kind == CounterKind::AllocRetry)
            .collect();
        assert_eq!(retries.len(), 1);
        assert_eq!((retries[0].from, retries[0].to), (0, 3));
        let a = &g.allocators[0];
        assert_eq!((a.ooms_before, a.ooms), (Some(1), 3));
        assert_eq!((a.alloc_retries_before, a.alloc_retries), (Some(0), 3));
    }

    #[test]
    fn a_counter_that_falls_is_a_restart_not_an_oom() {
        let text = [
            with_allocators(1_000, &[allocator(1, 1, 1, 5, 0, 0.0)]),
            with_allocators(2_000, &[allocator(1, 1, 1, 0, 0, 0.0)]),
            with_allocators(3_000, &[allocator(1, 1, 1, 1, 0, 0.0)]),
        ]
        .join("\n");
        let s = summary(&text);
        let g = gpu(&s);
        let events: Vec<_> = g
            .events
            .iter()
            .map(|e| (e.kind, e.from, e.to, e.restart))
            .collect();
        assert_eq!(
            events,
            [
                (CounterKind::OomsFell, 5, 0, 1),
                (CounterKind::Oom, 0, 1, 1)
            ]
        );
        assert_eq!((g.allocators[0].ooms, g.allocators[0].restarts), (1, 1));
    }

    #[test]
    fn an_unknown_counter_is_no_event() {
        let a1 = allocator(1, 1, 1, 0, 0, 0.0);
        let a2 = allocator(1, 1, 1, 3, 0, 0.0).replace(
            r#""segments_received":true"#,
            r#""segments_received":true,"unknown":["num_ooms"]"#,
        );
        let s = summary(&[with_allocators(1, &[a1]), with_allocators(2, &[a2])].join("\n"));
        assert!(gpu(&s).events.is_empty());
    }

    #[test]
    fn events_past_the_cap_are_counted_not_kept() {
        let text: String = (0..(MAX_EVENTS_PER_KIND as u64 + 10))
            .map(|i| with_allocators(i, &[allocator(1, 1, 1, i as i64, 0, 0.0)]) + "\n")
            .collect();
        let s = summary(&text);
        let g = gpu(&s);
        assert_eq!(g.events.len(), MAX_EVENTS_PER_KIND);
        assert_eq!(g.ooms_left_out, 9);
        assert_eq!(g.allocators[0].ooms, MAX_EVENTS_PER_KIND as u64 + 9);
    }

    #[test]
    fn the_highest_fragmentation_moment_is_kept() {
        let text = [
            with_allocators(1_000, &[allocator(1, 10, 20, 0, 0, 0.2)]),
            with_allocators(2_000, &[allocator(1, 10, 30, 0, 0, 0.7)]),
            with_allocators(3_000, &[allocator(1, 10, 20, 0, 0, 0.7)]),
            with_allocators(4_000, &[allocator(1, 10, 20, 0, 0, 0.5)]),
        ]
        .join("\n");
        let s = summary(&text);
        let f = gpu(&s).fragmentation_peak.clone().expect("a peak");
        assert_eq!((f.fragmentation, f.time_unix_ms), (0.7, 2_000));
        assert_eq!((f.external_free, f.reserved), (Some(20), Some(30)));
    }

    #[test]
    fn a_cut_last_line_is_counted_apart_and_the_rest_summed() {
        let whole = line(1_000, 1);
        let text = format!("{whole}\n{}", &whole[..whole.len() / 2]);
        let s = summary(&text);
        assert_eq!(s.samples, 1);
        assert!(s.skipped.cut_last_line);
        assert_eq!(s.skipped.not_json, 0);
        assert_eq!(s.skipped.first_line, Some(2));
    }

    #[test]
    fn a_last_line_that_never_opened_as_json_is_not_json_not_cut() {
        let s = summary("\u{7f}ELF\u{2}\u{1}");
        assert_eq!(s.skipped.not_json, 1);
        assert!(!s.skipped.cut_last_line);
    }

    #[test]
    fn a_sample_appended_after_a_cut_line_is_read() {
        let whole = line(1_000, 1);
        let text = format!("{}{}\n{}\n", &whole[..30], line(2_000, 2), line(3_000, 3));
        let s = summary(&text);
        assert_eq!(s.samples, 2);
        assert_eq!(s.skipped.cut_then_appended, 1);
        assert_eq!(s.first_unix_ms, Some(2_000));
    }

    #[test]
    fn malformed_and_foreign_lines_are_counted_and_skipped() {
        let text = format!(
            "not json\n{}\n[1,2]\n{{\"time_unix_ms\":\"soon\",\"gpus\":[]}}\n\n{}\n",
            line(1, 1),
            line(2, 1)
        );
        let s = summary(&text);
        assert_eq!(s.samples, 2);
        assert_eq!(s.skipped.not_json, 1);
        assert_eq!(s.skipped.not_a_sample, 2);
        assert_eq!(s.skipped.first_line, Some(1));
        assert_eq!(s.skipped.lines(), 3);
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_ignored() {
        let l = r#"{"time_unix_ms":5,"new_field":{"x":1},"gpus":[{"index":0,"memory_used":"lots","name":7,"processes":"none","allocator":{"pid":"x"}},{"index":-1},"junk"]}"#;
        let s = summary(l);
        assert_eq!(s.samples, 1);
        let g = gpu(&s);
        assert_eq!(g.samples, 1);
        assert_eq!(g.memory_used, None);
        assert_eq!(g.name, None);
        assert!(g.allocators.is_empty());
    }

    #[test]
    fn gpus_that_come_and_go_are_counted_absent_and_lost() {
        let two = |t: u64| {
            format!(
                r#"{{"time_unix_ms":{t},"gpus":[{{"index":0,"uuid":"A","memory_used":1}},{{"index":1,"uuid":"B","memory_used":1}}]}}"#
            )
        };
        let lost = r#"{"time_unix_ms":3,"gpus":[{"index":0,"uuid":"A","memory_used":1},{"status":"lost","index":1,"reason":"fell off the bus"}]}"#;
        let one = r#"{"time_unix_ms":4,"gpus":[{"index":0,"uuid":"A","memory_used":1}]}"#;
        let text = [two(1), two(2), lost.to_string(), one.to_string(), two(5)].join("\n");
        let s = summary(&text);
        assert_eq!(s.gpus.len(), 2);
        let b = &s.gpus[1];
        assert_eq!((b.index, b.uuid.as_deref()), (1, Some("B")));
        assert_eq!(b.samples, 3);
        assert_eq!(b.lost_samples, 1);
        assert_eq!(b.lost_reason.as_deref(), Some("fell off the bus"));
        assert_eq!(b.first_lost_unix_ms, Some(3));
        assert_eq!((b.first_unix_ms, b.last_unix_ms), (1, 5));
        assert_eq!(b.absent_samples, 1);
        assert_eq!(s.gpus[0].absent_samples, 0);
    }

    #[test]
    fn a_mig_device_is_its_own_gpu() {
        let l = r#"{"time_unix_ms":1,"gpus":[{"index":0,"memory_used":1},{"index":0,"mig_index":1,"uuid":"MIG-x","memory_used":2}]}"#;
        let s = summary(l);
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(s.gpus[1].mig_index, Some(1));
    }

    #[test]
    fn an_empty_input_has_no_samples() {
        let s = summary("");
        assert_eq!((s.lines, s.samples, s.first_unix_ms), (0, 0, None));
        assert!(s.gpus.is_empty());
    }

    #[test]
    fn a_line_past_the_limit_is_skipped_unheld() {
        let mut lines = Vec::new();
        let input = format!("{}\n{}\nxy", "a".repeat(100), "b".repeat(10));
        for_each_line(
            std::io::BufReader::with_capacity(7, input.as_bytes()),
            50,
            |l| {
                lines.push(match l {
                    Line::Whole(b, complete) => Some((b.to_vec(), complete)),
                    Line::TooLong => None,
                })
            },
        )
        .expect("in memory");
        assert_eq!(
            lines,
            [
                None,
                Some((b"bbbbbbbbbb".to_vec(), true)),
                Some((b"xy".to_vec(), false))
            ]
        );
    }

    #[test]
    fn gpus_past_the_cap_are_counted_not_kept() {
        let gpus: Vec<String> = (0..(MAX_GPUS as u32 + 3))
            .map(|i| format!(r#"{{"index":{i},"memory_used":1}}"#))
            .collect();
        let s = summary(&format!(
            r#"{{"time_unix_ms":1,"gpus":[{}]}}"#,
            gpus.join(",")
        ));
        assert_eq!(s.gpus.len(), MAX_GPUS);
        assert_eq!(s.gpus_left_out, 3);
    }

    #[test]
    fn the_sample_nearest_a_time_is_picked_the_earlier_of_two_as_near() {
        let text = format!(
            "{}\n{}\nnot json\n{}\n",
            line(1_000, 1),
            line(3_000, 3),
            line(5_000, 5)
        );
        let pick = |target| {
            pick_sample(text.as_bytes(), target)
                .expect("in memory")
                .map(|p| (p.line, p.time_unix_ms))
        };
        assert_eq!(pick(Target::Time(4_100)), Some((4, 5_000)));
        assert_eq!(pick(Target::Time(2_000)), Some((1, 1_000)));
        assert_eq!(pick(Target::Time(0)), Some((1, 1_000)));
        assert_eq!(pick(Target::Ordinal(2)), Some((2, 3_000)));
        assert_eq!(pick(Target::Ordinal(9)), Some((4, 5_000)));
        assert_eq!(
            pick_sample(&b"junk\n"[..], Target::Time(1)).expect("in memory"),
            None
        );
    }

    #[test]
    fn at_times_parse_as_utc_times_of_day_or_offsets() {
        // 2026-12-07 03:14:07 UTC.
        let t = 1_796_613_247_000;
        assert_eq!(
            parse_time("2026-12-07T03:14:07Z"),
            Ok(RecordingTime::Utc(t))
        );
        assert_eq!(
            parse_time("2026-12-07 03:14:07.5"),
            Ok(RecordingTime::Utc(t + 500))
        );
        assert_eq!(
            parse_time("2026-12-07 03:14:07 UTC"),
            Ok(RecordingTime::Utc(t))
        );
        assert_eq!(
            parse_time("03:14:07"),
            Ok(RecordingTime::TimeOfDay(11_647_000))
        );
        assert_eq!(
            parse_time("03:14"),
            Ok(RecordingTime::TimeOfDay(11_640_000))
        );
        assert_eq!(parse_time("+90s"), Ok(RecordingTime::After(90_000)));
        for bad in ["+4", "3pm", "", "2026-12-07T03:14:07+02:00", "25:00"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_offset_takes_several_units_and_says_junk_and_overflow_in_one_line() {
        assert_eq!(parse_time("+1h30m"), Ok(RecordingTime::After(5_400_000)));
        assert_eq!(parse_time("+2m30s"), Ok(RecordingTime::After(150_000)));
        assert_eq!(parse_time("+1.5h"), Ok(RecordingTime::After(5_400_000)));
        assert_eq!(parse_time(" +1h 30m"), Ok(RecordingTime::After(5_400_000)));
        for junk in ["+4", "+1h30", "+", "+1h-5m", "+1hx"] {
            let e = parse_time(junk).expect_err(junk);
            assert!(
                e.contains("is not a duration after the first sample: write e.g. +90s, +2m30s"),
                "{junk}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        let e = parse_time("+99999999999999999999h").expect_err("overflow");
        assert!(
            e.ends_with("is too long: the most is 277777777h after the first sample"),
            "{e}"
        );
        let e = parse_time("+200000000h200000000h").expect_err("a sum past the limit");
        assert!(e.contains("is too long"), "{e}");
    }

    #[test]
    fn a_time_of_day_lands_on_the_day_of_the_span_that_holds_it() {
        let day = DAY_MS * 20_000;
        // From 22:00 to 02:00 the next day: 01:00 is on the second.
        let (first, last) = (day + 22 * 3_600_000, day + DAY_MS + 2 * 3_600_000);
        assert_eq!(
            RecordingTime::TimeOfDay(3_600_000).resolve(first, last),
            day + DAY_MS + 3_600_000
        );
        assert_eq!(
            RecordingTime::TimeOfDay(23 * 3_600_000).resolve(first, last),
            day + 23 * 3_600_000
        );
        // Outside the span: on its first day.
        assert_eq!(
            RecordingTime::TimeOfDay(12 * 3_600_000).resolve(first, last),
            day + 12 * 3_600_000
        );
        assert_eq!(RecordingTime::After(5).resolve(first, last), first + 5);
    }

    #[test]
    fn a_recording_is_told_by_its_first_line_not_its_name() {
        assert!(looks_like_recording(line(1, 1).as_bytes()));
        assert!(looks_like_recording(
            b"\n  {\"time_unix_ms\":1,\"gpus\":[]}\n"
        ));
        // Cut inside its first line by the prefix's length.
        assert!(looks_like_recording(&line(1, 1).as_bytes()[..120]));
        assert!(!looks_like_recording(b"{\"a\":1}\n"));
        assert!(!looks_like_recording(b"\x80\x02}q\x00"));
        assert!(!looks_like_recording(b""));
    }

    #[test]
    fn a_recording_whose_start_is_cut_off_or_behind_junk_is_told_by_a_later_line() {
        let whole = [line(1, 1), line(2, 1)].join("\n");
        // `tail -c`: the first line starts mid-sample.
        assert!(looks_like_recording(&whole.as_bytes()[30..]));
        // A line of junk (a shell's banner) in front, or junk on the line.
        assert!(looks_like_recording(
            format!("Last login: Mon Dec 7\n{whole}").as_bytes()
        ));
        assert!(looks_like_recording(format!("\u{1b}[0m{whole}").as_bytes()));
        // Text without a sample's line is not one.
        assert!(!looks_like_recording(b"_mw\":1}\n[package]\nname = 1\n"));
    }

    #[test]
    fn json_of_any_shape_is_routed_to_the_recording_reader_and_pickles_and_toml_are_not() {
        assert_eq!(route(b""), Route::Empty);
        assert_eq!(route(b"[1,2]"), Route::Recording);
        assert_eq!(route(b"  [1,\n2]\n"), Route::Recording, "pretty printed");
        assert_eq!(
            route(b"[1, 2, 3"),
            Route::Recording,
            "the start of a longer one"
        );
        assert_eq!(route(b"{\"a\":1}"), Route::Recording);
        assert_eq!(route(line(1, 1).as_bytes()), Route::Recording);
        assert_eq!(route(b"\x80\x02}q\x00"), Route::Snapshot);
        // A pickle's protocol byte wins over a sample further on.
        let mut pickle_first = vec![PICKLE_PROTO, b'\n'];
        pickle_first.extend_from_slice(line(1, 1).as_bytes());
        assert_eq!(route(&pickle_first), Route::Snapshot);
        assert_eq!(route(b"[package]\nname = 1\n"), Route::ByName);
        assert_eq!(route(b"notes\n"), Route::ByName);
    }

    /// `allocator`'s line with PyTorch's own peaks (`torch_peak`).
    fn with_torch_peak(line: String, allocated: u64, reserved: u64) -> String {
        let peak = format!(
            r#","torch_peak":{{"allocated":{allocated},"reserved":{reserved},"since":"x"}}}}"#
        );
        match line.strip_suffix('}') {
            Some(head) => format!("{head}{peak}"),
            None => line,
        }
    }

    #[test]
    fn pytorchs_own_peak_is_the_highest_recorded_at_the_first_sample_that_carried_it() {
        let text = [
            with_allocators(1_000, &[allocator(1, 10, 20, 0, 0, 0.1)]),
            with_allocators(
                2_000,
                &[with_torch_peak(allocator(1, 10, 20, 0, 0, 0.1), 200, 230)],
            ),
            with_allocators(
                3_000,
                &[with_torch_peak(allocator(1, 12, 20, 0, 0, 0.1), 200, 240)],
            ),
        ]
        .join("\n");
        let s = summary(&text);
        let a = &gpu(&s).allocators[0];
        let at = |bytes, time_unix_ms| {
            Some(Moment {
                bytes,
                time_unix_ms,
            })
        };
        assert_eq!(
            a.torch_allocated_peak,
            at(200, 2_000),
            "the first of equal peaks"
        );
        assert_eq!(a.torch_reserved_peak, at(240, 3_000));
        // The samples' own highest stays beside it.
        assert_eq!(a.allocated_peak, at(12, 3_000));
        // A recording without it (an older vramtop's, a simulated
        // allocator's) has none.
        let old = summary(&with_allocators(1_000, &[allocator(1, 10, 20, 0, 0, 0.1)]));
        assert_eq!(gpu(&old).allocators[0].torch_allocated_peak, None);
    }
}
