//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot` pickles and
//! the bare segment list of `torch.cuda.memory_snapshot()`).
//!
//! Four layers, each usable on its own:
//! - [`pickle`]: a restricted unpickler that refuses anything but plain data
//!   and keeps memoised objects shared;
//! - [`types`]: the typed snapshot ([`Snapshot`], [`Segment`], [`Block`],
//!   [`TraceEntry`]) with interned traceback frames;
//! - [`reader`]: the conversion of a parsed pickle into a [`Snapshot`];
//! - [`invariants`]: the structural rules every real allocator dump obeys.

pub mod capture;
pub mod diff;
pub mod invariants;
pub mod near;
pub mod peak;
pub mod pickle;
pub mod reader;
pub mod replay;
pub mod scrub;
pub mod sites;
pub mod start_state;
pub mod summary;
pub mod synth;
pub mod types;
pub mod whatif;
pub mod writer;

pub use invariants::{Finding, FindingKind, check_invariants};
pub use pickle::{Limits, PickleError, Value};
pub use reader::{
    SegmentsStage, Stacks, check_file_start, read_segments_stage, read_snapshot,
    read_snapshot_bytes_with, read_snapshot_file, read_snapshot_file_final_state,
    read_snapshot_file_staged, read_snapshot_file_with, read_snapshot_file_with_progress,
    read_snapshot_from, read_snapshot_from_final_state, read_snapshot_from_with,
    read_snapshot_staged, read_snapshot_with_limits, snapshot_from_value,
};
pub use types::{
    AllocatorSettings, Annotation, Block, EntryTime, Frame, Frames, Segment, Snapshot,
    SnapshotError, SnapshotFormat, TraceEntry, TraceExtra, UnknownActions,
};
pub use writer::{
    WriteError, WriteOptions, snapshot_to_bytes, write_snapshot, write_snapshot_file,
    write_snapshot_file_with, write_snapshot_with,
};
