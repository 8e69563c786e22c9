//! The typed snapshot: segments, blocks, trace entries and allocator
//! settings, with interned traceback frames. Reading one from a pickle is
//! [`super::reader`]'s job; writing one is [`super::writer`]'s.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use thiserror::Error;

use super::pickle::{PickleError, Value};
use crate::alloc::{BlockState, PoolKind, TraceAction};

/// A traceback, innermost frame first as PyTorch records it.
///
/// Interned: every place the pickle referenced the same list object gets the
/// same `Arc` (compare with [`Arc::ptr_eq`]); so do distinct lists made of
/// the same frame objects.
pub type Frames = Arc<[Frame]>;

/// One Python (or C++) stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Frame {
    #[serde(serialize_with = "ser::arc_str")]
    pub filename: Arc<str>,
    /// PyTorch's unsigned 64-bit line number; [`Frame::UNKNOWN_LINE`] when
    /// the unwinder could not tell (serialised as `null`).
    #[serde(serialize_with = "ser::line")]
    pub line: u64,
    #[serde(serialize_with = "ser::arc_str")]
    pub name: Arc<str>,
}

impl Frame {
    /// What PyTorch writes for a line it does not know: −1 stored in its
    /// unsigned line field.
    pub const UNKNOWN_LINE: u64 = u64::MAX;

    /// The line number, `None` when unknown.
    pub fn known_line(&self) -> Option<u64> {
        (self.line != Self::UNKNOWN_LINE).then_some(self.line)
    }

    /// The line as shown to people: the number, or `?` when unknown or 0
    /// (PyTorch's line for a C++ frame without line information).
    pub fn shown_line(&self) -> ShownLine {
        ShownLine(self.known_line().filter(|&line| line > 0))
    }
}

/// A frame's line for display: the number, or `?` when none is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShownLine(Option<u64>);

impl std::fmt::Display for ShownLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(line) => write!(f, "{line}"),
            None => f.write_str("?"),
        }
    }
}

/// Which of PyTorch's two snapshot shapes the input was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotFormat {
    /// `_dump_snapshot()` / `_snapshot()`: a dict with `segments` and more.
    DumpSnapshot,
    /// `memory_snapshot()`: a bare list of segments.
    SegmentList,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    pub format: SnapshotFormat,
    pub segments: Vec<Segment>,
    /// Indexed by device, oldest entry first.
    pub device_traces: Vec<Vec<TraceEntry>>,
    pub allocator_settings: Option<AllocatorSettings>,
    pub external_annotations: Vec<Annotation>,
    /// Trace entries dropped because their action is unknown to this reader
    /// (a newer PyTorch); the rest of the trace is kept.
    pub skipped_trace_entries: usize,
    /// The actions of those entries (see [`UnknownActions`]).
    pub skipped_trace_actions: UnknownActions,
    /// True when only the final state was read (the segments stage): the
    /// trace of the file, if it has one, is not in `device_traces`.
    #[serde(skip)]
    pub trace_not_read: bool,
    /// Torch 2.0's form: blocks carry a `history` of their uses instead of
    /// `frames`. Such a torch records a trace only when
    /// `trace_alloc_max_entries` is set, so its stacks do not mean a trace.
    #[serde(skip)]
    pub block_history: bool,
}

impl Snapshot {
    /// A snapshot of `segments` and nothing else: no trace, settings or
    /// annotations. The base the other fields are set over (`Snapshot {
    /// device_traces, ..Snapshot::of_segments(format, segments) }`), so a
    /// new field has one default to add.
    pub fn of_segments(format: SnapshotFormat, segments: Vec<Segment>) -> Snapshot {
        Snapshot {
            format,
            segments,
            device_traces: Vec::new(),
            allocator_settings: None,
            external_annotations: Vec::new(),
            skipped_trace_entries: 0,
            skipped_trace_actions: UnknownActions::default(),
            trace_not_read: false,
            block_history: false,
        }
    }

    /// The devices this snapshot is about, ascending: each with segments,
    /// or whose trace records memory events. A trace of only `snapshot`
    /// and annotation markers does not make a device (PyTorch marks the
    /// current device when a snapshot is taken, used or not). Every view of
    /// a file (summary, viewer, sites) lists these and no others.
    pub fn devices(&self) -> Vec<u32> {
        let mut devices: Vec<u32> = self.segments.iter().map(|s| s.device).collect();
        for (index, trace) in self.device_traces.iter().enumerate() {
            let records_memory = trace.iter().any(|e| !is_marker(e.action));
            if records_memory && let Ok(device) = u32::try_from(index) {
                devices.push(device);
            }
        }
        devices.sort_unstable();
        devices.dedup();
        devices
    }
}

/// The names of the trace actions a reader did not know, bounded whatever
/// the file: the first [`UnknownActions::MAX_NAMES`] distinct ones, in the
/// order met, each cut to [`UnknownActions::MAX_CHARS`] characters with its
/// control characters escaped (the names come from the file and are shown
/// on terminals).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UnknownActions {
    pub names: Vec<String>,
    /// Other names were met past the first [`UnknownActions::MAX_NAMES`].
    pub more: bool,
}

impl UnknownActions {
    /// Distinct names kept.
    pub const MAX_NAMES: usize = 4;
    /// Characters kept of a name (before escaping).
    pub const MAX_CHARS: usize = 32;

    /// Notes an entry's unknown action `name`. At most
    /// [`UnknownActions::MAX_NAMES`] comparisons of a short name, and an
    /// allocation only for a name not seen yet.
    pub fn note(&mut self, name: &str) {
        if self.more {
            return;
        }
        if self
            .names
            .iter()
            .any(|kept| kept.chars().eq(Self::shown(name)))
        {
            return;
        }
        if self.names.len() < Self::MAX_NAMES {
            self.names.push(Self::shown(name).collect());
        } else {
            self.more = true;
        }
    }

    /// `name` as kept: cut, control characters escaped, `…` where cut.
    fn shown(name: &str) -> impl Iterator<Item = char> + '_ {
        let cut = name.chars().nth(Self::MAX_CHARS).is_some();
        name.chars()
            .take(Self::MAX_CHARS)
            .flat_map(|c| {
                let escaped = c.is_control().then(|| c.escape_debug());
                let plain = (!c.is_control()).then_some(c);
                escaped.into_iter().flatten().chain(plain)
            })
            .chain(cut.then_some('…'))
    }
}

impl Snapshot {
    /// What the reader left out of the trace, for people (see
    /// [`skipped_trace_text`]).
    pub fn skipped_trace_text(&self) -> Option<String> {
        skipped_trace_text(self.skipped_trace_entries, &self.skipped_trace_actions)
    }
}

/// `entries` trace entries left out, of `actions`, for people: "3 trace
/// entries left out: their actions (teleport, warp) are unknown to this
/// vramtop (a newer PyTorch?)"; `None` when none was.
pub fn skipped_trace_text(entries: usize, actions: &UnknownActions) -> Option<String> {
    if entries == 0 {
        return None;
    }
    let mut names = actions.names.join(", ");
    if actions.more {
        names.push_str(", …");
    }
    let (what, their, is) = if entries == 1 {
        ("1 trace entry".to_string(), "its action", "is")
    } else {
        (format!("{entries} trace entries"), "their actions", "are")
    };
    let named = if names.is_empty() {
        String::new()
    } else {
        format!(" ({names})")
    };
    Some(format!(
        "{what} left out: {their}{named} {is} unknown to this vramtop (a newer PyTorch?)"
    ))
}

/// Whether `action` marks a moment rather than records memory changing.
pub fn is_marker(action: TraceAction) -> bool {
    matches!(action, TraceAction::Snapshot | TraceAction::Annotate)
}

/// One cudaMalloc'd range (or, for expandable segments, one mapped range).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Segment {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    /// Σ sizes of `active_allocated` blocks, as recorded.
    pub allocated_size: Option<u64>,
    /// Σ sizes of active (allocated or pending free) blocks, as recorded.
    pub active_size: Option<u64>,
    /// Σ requested sizes of active blocks, as recorded.
    pub requested_size: Option<u64>,
    /// The `cudaStream_t` value; 0 is the default stream.
    pub stream: u64,
    pub segment_type: PoolKind,
    /// `(0, 0)` for the default pools, also when the key is absent.
    pub segment_pool_id: (i64, i64),
    /// `false` when the key is absent (torch ≤ 2.0).
    pub is_expandable: bool,
    /// Stack of the cudaMalloc, empty if not recorded.
    #[serde(serialize_with = "ser::frames")]
    pub frames: Frames,
    pub blocks: Vec<Block>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Block {
    /// Torch 2.0 files do not record it: then the segment address plus the
    /// sizes of the blocks before this one.
    pub address: u64,
    pub size: u64,
    /// Stale for inactive blocks (PyTorch keeps the last value). Torch 2.0:
    /// the last history entry's `real_size`, else the block size.
    pub requested_size: u64,
    pub state: BlockState,
    /// Stack of the allocation that last used the block. Torch 2.0: the last
    /// history entry's frames.
    #[serde(serialize_with = "ser::frames")]
    pub frames: Frames,
}

/// A trace entry's time: microseconds as recorded, or none (older dumps
/// record none). Eight bytes, where an `Option<i64>` takes sixteen, for
/// each of a long recording's millions of entries: `i64::MIN`, a time no
/// recording has, stands for none (a file that writes it reads as none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryTime(i64);

impl EntryTime {
    /// No time recorded.
    pub const NONE: EntryTime = EntryTime(i64::MIN);

    pub const fn new(time_us: Option<i64>) -> Self {
        match time_us {
            Some(t) => EntryTime(t),
            None => Self::NONE,
        }
    }

    /// Microseconds as recorded; `None` when none was.
    pub const fn get(self) -> Option<i64> {
        if self.0 == i64::MIN {
            None
        } else {
            Some(self.0)
        }
    }
}

/// A trace event. Millions of them in a long recording: 64 bytes each (the
/// strings few entries differ in are behind one shared pointer).
#[derive(Debug, Clone, PartialEq)]
pub struct TraceEntry {
    pub action: TraceAction,
    /// For [`TraceAction::Oom`], the device's free bytes (`device_free`).
    pub addr: u64,
    pub size: u64,
    pub stream: u64,
    /// See [`TraceEntry::time_us`].
    pub time: EntryTime,
    pub frames: Frames,
    /// `compile_context` and `user_metadata`; `None` when the entry has
    /// neither. Make it with [`TraceExtra::of`].
    pub extra: Option<Arc<TraceExtra>>,
}

impl TraceEntry {
    /// Microseconds as recorded; `None` when the entry has no time.
    pub fn time_us(&self) -> Option<i64> {
        self.time.get()
    }

    /// `compile_context` (torch ≥ 2.4): what `torch.compile` was doing.
    pub fn compile_context(&self) -> Option<&Arc<str>> {
        self.extra.as_ref()?.compile_context.as_ref()
    }

    /// `user_metadata` (torch ≥ 2.4): what the script attached.
    pub fn user_metadata(&self) -> Option<&Arc<str>> {
        self.extra.as_ref()?.user_metadata.as_ref()
    }
}

/// The strings of a trace entry beyond its event, shared by every entry
/// that says the same (most entries of a file do).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct TraceExtra {
    pub compile_context: Option<Arc<str>>,
    pub user_metadata: Option<Arc<str>>,
}

impl TraceExtra {
    /// The extra of an entry with these strings: `None` for neither.
    pub fn of(
        compile_context: Option<Arc<str>>,
        user_metadata: Option<Arc<str>>,
    ) -> Option<Arc<TraceExtra>> {
        (compile_context.is_some() || user_metadata.is_some()).then(|| {
            Arc::new(TraceExtra {
                compile_context,
                user_metadata,
            })
        })
    }
}

// Written by hand for the JSON's flat shape: both strings are fields of the
// entry (null when absent), as they were before they were shared.
impl Serialize for TraceEntry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct FramesOf<'a>(&'a Frames);
        impl Serialize for FramesOf<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                ser::frames(self.0, serializer)
            }
        }
        let mut entry = serializer.serialize_struct("TraceEntry", 8)?;
        entry.serialize_field("action", &self.action)?;
        entry.serialize_field("addr", &self.addr)?;
        entry.serialize_field("size", &self.size)?;
        entry.serialize_field("stream", &self.stream)?;
        entry.serialize_field("time_us", &self.time_us())?;
        entry.serialize_field("frames", &FramesOf(&self.frames))?;
        entry.serialize_field("compile_context", &self.compile_context().map(|t| &**t))?;
        entry.serialize_field("user_metadata", &self.user_metadata().map(|t| &**t))?;
        entry.end()
    }
}

/// `allocator_settings` (torch ≥ 2.3). Absent keys take PyTorch's defaults.
/// Two settings are equal when their values are: the key order of a file is
/// how it is written, not what it says.
#[derive(Debug, Clone, Serialize)]
pub struct AllocatorSettings {
    /// The last `PYTORCH_CUDA_ALLOC_CONF` string applied.
    pub conf: String,
    /// Bytes; −1 when unset (also when written as `SIZE_MAX`).
    pub max_split_size: i64,
    pub garbage_collection_threshold: f64,
    pub expandable_segments: bool,
    /// (size class in MiB, divisions), in file order.
    pub roundup_power2_divisions: Vec<(u64, u64)>,
    pub release_lock_on_cudamalloc: bool,
    pub pinned_num_register_threads: Option<u64>,
    pub pinned_use_cuda_host_register: Option<bool>,
    pub graph_capture_record_stream_reuse: Option<bool>,
    /// The file's keys in the file's order, with the value of any key this
    /// reader does not know, so that a written copy of a newer PyTorch's
    /// file equals the original. Empty for settings made here (the writer
    /// then uses PyTorch's current order).
    #[serde(skip)]
    pub file_order: Vec<SettingsKey>,
}

impl PartialEq for AllocatorSettings {
    fn eq(&self, other: &Self) -> bool {
        let unknown = |s: &Self| {
            s.file_order
                .iter()
                .filter_map(|key| match key {
                    SettingsKey::Other(k, v) => Some((k.clone(), v.clone())),
                    SettingsKey::Known(_) => None,
                })
                .collect::<Vec<_>>()
        };
        self.conf == other.conf
            && self.max_split_size == other.max_split_size
            && self.garbage_collection_threshold == other.garbage_collection_threshold
            && self.expandable_segments == other.expandable_segments
            && self.roundup_power2_divisions == other.roundup_power2_divisions
            && self.release_lock_on_cudamalloc == other.release_lock_on_cudamalloc
            && self.pinned_num_register_threads == other.pinned_num_register_threads
            && self.pinned_use_cuda_host_register == other.pinned_use_cuda_host_register
            && self.graph_capture_record_stream_reuse == other.graph_capture_record_stream_reuse
            && unknown(self) == unknown(other)
    }
}

/// One key of an `allocator_settings` dict as the file has it.
#[derive(Debug, Clone, PartialEq)]
pub enum SettingsKey {
    /// A key read into a field of [`AllocatorSettings`].
    Known(&'static str),
    /// A key this reader does not know, kept with its value.
    Other(Value, Value),
}

/// The `allocator_settings` keys read into fields, in PyTorch's order.
pub const KNOWN_SETTINGS_KEYS: [&str; 9] = [
    "PYTORCH_CUDA_ALLOC_CONF",
    "max_split_size",
    "garbage_collection_threshold",
    "expandable_segments",
    "pinned_num_register_threads",
    "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register",
    "roundup_power2_divisions",
    "graph_capture_record_stream_reuse",
];

/// An `external_annotations` entry (record_function ranges).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Annotation {
    /// "START" or "END".
    pub stage: String,
    pub name: String,
    pub device: i64,
    pub time_us: i64,
}

#[derive(Debug, Error)]
pub enum SnapshotError {
    #[error(transparent)]
    Pickle(#[from] PickleError),

    /// The pickle is fine but is not shaped like a snapshot at all.
    #[error("not a PyTorch memory snapshot: {0}")]
    Shape(String),

    /// A snapshot field has the wrong type or an impossible value.
    #[error("{path}: {message}")]
    Field { path: String, message: String },

    #[error(
        "cannot read {}: {}{}",
        path.display(),
        crate::quote::io_reason(source),
        near.hint()
    )]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
        /// For a file not found, the names beside it it may have meant.
        near: super::near::Near,
    },

    /// Any of the above, for a named file.
    #[error("{}: {source}", path.display())]
    InFile {
        path: PathBuf,
        #[source]
        source: Box<SnapshotError>,
    },
}
/// Serde helpers: serde's `rc` feature is off, so `Arc` fields serialise
/// through their contents here.
mod ser {
    use std::sync::Arc;

    use serde::Serializer;

    use super::Frames;

    pub fn arc_str<S: Serializer>(value: &Arc<str>, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(value)
    }

    pub fn frames<S: Serializer>(value: &Frames, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(value.iter())
    }

    pub fn line<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        if *value == super::Frame::UNKNOWN_LINE {
            serializer.serialize_none()
        } else {
            serializer.serialize_u64(*value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_entry_takes_at_most_64_bytes() {
        // Millions of entries in a long recording: each 8 bytes more is
        // 48 MB more for a 1 GB file.
        assert!(std::mem::size_of::<TraceEntry>() <= 64);
    }

    #[test]
    fn entry_time_keeps_every_time_but_the_one_that_stands_for_none() {
        for t in [0, 1, -1, 1_772_552_953_882_198, i64::MAX, i64::MIN + 1] {
            assert_eq!(EntryTime::new(Some(t)).get(), Some(t));
        }
        assert_eq!(EntryTime::new(None).get(), None);
        assert_eq!(EntryTime::new(Some(i64::MIN)), EntryTime::NONE);
    }
}
