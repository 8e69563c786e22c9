//! The conversion of a parsed pickle [`Value`] into the typed [`Snapshot`].
//!
//! Conversion is strict about types (a wrong type names the exact path, e.g.
//! `segments[3].blocks[7].size: expected int, found str`) and lenient about
//! versions: keys PyTorch added over time are optional, unknown keys are
//! ignored, torch 2.0's per-block `history` is understood, and trace entries
//! with an action this reader does not know are skipped and counted.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Read as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use rustc_hash::FxHashMap;

use super::pickle::{self, Limits, PickleError, Value};
use super::types::{
    AllocatorSettings, Annotation, Block, EntryTime, Frame, Frames, KNOWN_SETTINGS_KEYS, Segment,
    SettingsKey, Snapshot, SnapshotError, SnapshotFormat, TraceEntry, TraceExtra, UnknownActions,
};
use crate::alloc::{BlockState, PoolKind, TraceAction, sizing::MAX_DEVICE_BYTES};

/// Reads a snapshot from pickle bytes with the default [`Limits`].
pub fn read_snapshot(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
    read_snapshot_with_limits(bytes, &Limits::default())
}

pub fn read_snapshot_with_limits(bytes: &[u8], limits: &Limits) -> Result<Snapshot, SnapshotError> {
    read_snapshot_bytes_with(bytes, limits, Stacks::Read)
}

/// [`read_snapshot_with_limits`], converting stacks or not.
pub fn read_snapshot_bytes_with(
    bytes: &[u8],
    limits: &Limits,
    stacks: Stacks,
) -> Result<Snapshot, SnapshotError> {
    snapshot_from_document(pickle::parse_document(bytes, limits, None)?, stacks)
}

/// Reads a snapshot file; errors name the file.
pub fn read_snapshot_file(path: &Path) -> Result<Snapshot, SnapshotError> {
    read_file(path, None, Stacks::Read)
}

/// Whether a read converts the stack frames of blocks, segments and trace
/// entries. Most of a long recording's conversion is its stacks; a command
/// that shows none (`replay --verify` compares addresses, sizes and
/// streams) skips them and its reader leaves every traceback empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stacks {
    #[default]
    Read,
    /// The tracebacks of the trace's frees and segment releases are left
    /// empty and not looked at (the rest are read): what a moment's live
    /// blocks and segments show, which the summary and `diff` report,
    /// comes from allocations and segment allocations only.
    OfAllocations,
    /// Every traceback is left empty and not looked at: a malformed one is
    /// not reported either (the pickle around it still is, as parsing it is
    /// the same).
    Skip,
}

impl Stacks {
    /// Whether the traceback of a trace entry of `action` is read.
    fn of_entry(self, action: TraceAction) -> bool {
        match self {
            Stacks::Read => true,
            Stacks::Skip => false,
            Stacks::OfAllocations => !matches!(
                action,
                TraceAction::FreeRequested
                    | TraceAction::FreeCompleted
                    | TraceAction::SegmentFree
                    | TraceAction::SegmentUnmap
            ),
        }
    }
}

/// [`read_snapshot_file`], converting stacks or not.
pub fn read_snapshot_file_with(path: &Path, stacks: Stacks) -> Result<Snapshot, SnapshotError> {
    read_file(path, None, stacks)
}

/// Reads a snapshot from a stream (a pipe, standard input) to its end,
/// refused at its first bytes when they are not a pickle and once it passes
/// the input limit; errors name the stream `name`.
pub fn read_snapshot_from(
    input: impl std::io::Read,
    name: &Path,
) -> Result<Snapshot, SnapshotError> {
    read_snapshot_from_with(input, name, Stacks::Read)
}

/// [`read_snapshot_from`], converting stacks or not.
pub fn read_snapshot_from_with(
    input: impl std::io::Read,
    name: &Path,
    stacks: Stacks,
) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    let mut input = input;
    let bytes = read_within_limit(&mut input, 0, &limits).map_err(|e| match e {
        BoundedReadError::Io(e) => io_error(name, e),
        BoundedReadError::Pickle(e) => in_file(name, e.into()),
    })?;
    let document =
        pickle::parse_document_owned(bytes, &limits, None).map_err(|e| in_file(name, e.into()))?;
    snapshot_from_document(document, stacks).map_err(|e| in_file(name, e))
}

/// [`read_snapshot_file`], storing into `progress` the bytes of the file
/// parsed so far (every 64 KiB, relaxed; poll it from another thread and
/// compare with the file's length). It reaches the file's length when the
/// pickle is parsed, before the conversion into a [`Snapshot`] (a few
/// tenths of the whole time).
pub fn read_snapshot_file_with_progress(
    path: &Path,
    progress: &AtomicU64,
) -> Result<Snapshot, SnapshotError> {
    read_file(path, Some(progress), Stacks::Read)
}

/// The top-level key after which a snapshot's bulk comes: every event with
/// its stack frames. PyTorch writes `segments` (the final state) before it.
const TRACE_KEY: &str = "device_traces";

/// What the beginning of a snapshot says before the rest is read
/// ([`read_segments_stage`]).
#[derive(Debug)]
pub enum SegmentsStage {
    /// The final state: the snapshot's segments, with its allocator
    /// settings and annotations if they came before the trace; the trace
    /// itself is empty. Boxed: a snapshot is some 200 bytes, the other
    /// variants none.
    Ready(Box<Snapshot>),
    /// The segments may be complete in a longer prefix.
    NeedMore,
    /// This file is read in one stage: a bare segment list, a dict without
    /// a trace or with the trace before the segments, or input the full
    /// read will report an error for.
    Single,
}

/// The segments stage of a snapshot from `prefix`, the first bytes of a
/// `file_len`-byte file (or all of them): parsed up to the `device_traces`
/// key and converted, without the trace. Bounded like a full read (the
/// whole file's memory budget); errors are left to the full read, which
/// reports them as it always does.
pub fn read_segments_stage(prefix: &[u8], file_len: u64, limits: &Limits) -> SegmentsStage {
    let partial = pickle::parse_document_until_key(prefix, file_len, limits, TRACE_KEY);
    match partial {
        Ok(Some(document)) => match snapshot_from_document(document, Stacks::Read) {
            Ok(snapshot) => SegmentsStage::Ready(Box::new(Snapshot {
                trace_not_read: true,
                ..snapshot
            })),
            Err(_) => SegmentsStage::Single,
        },
        Ok(None) => SegmentsStage::Single,
        Err(_) if (prefix.len() as u64) < file_len => SegmentsStage::NeedMore,
        Err(_) => SegmentsStage::Single,
    }
}

/// [`read_snapshot_with_limits`] in two stages: `on_segments` gets the
/// segments stage (see [`SegmentsStage::Ready`]) when the file has one,
/// then the complete snapshot is returned. A file read in one stage
/// never calls `on_segments`; errors are those of the one-stage read.
pub fn read_snapshot_staged(
    bytes: &[u8],
    limits: &Limits,
    on_segments: impl FnOnce(Snapshot),
) -> Result<Snapshot, SnapshotError> {
    if let SegmentsStage::Ready(stage) = read_segments_stage(bytes, bytes.len() as u64, limits) {
        on_segments(*stage);
    }
    read_snapshot_with_limits(bytes, limits)
}

/// Bytes read from a file at a time by [`read_snapshot_file_staged`].
const STAGED_READ_CHUNK: usize = 4 << 20;

/// [`read_snapshot_file_with_progress`] in two stages: `on_segments` gets
/// the segments stage as soon as the beginning of the file holds it
/// (typically the first few MiB of a long recording: the file is read in
/// 4 MiB chunks and the stage is tried where the `device_traces` key
/// appears), then the whole file is read and the complete snapshot
/// returned. The stage's extra parsing is bounded: a try only when the bytes
/// read have doubled since the last one, none past half the file. Files
/// read in one stage, and every error, are as with the one-stage read.
pub fn read_snapshot_file_staged(
    path: &Path,
    progress: &AtomicU64,
    on_segments: impl FnOnce(Snapshot),
) -> Result<Snapshot, SnapshotError> {
    read_file_staged(
        path,
        progress,
        on_segments,
        STAGED_READ_CHUNK,
        pickle::PIECES_MIN_BYTES,
    )
}

/// [`read_snapshot_file_staged`] reading `chunk` bytes at a time, and
/// parsing a file of `pieces_from` bytes or more in pieces.
fn read_file_staged(
    path: &Path,
    progress: &AtomicU64,
    on_segments: impl FnOnce(Snapshot),
    chunk: usize,
    pieces_from: u64,
) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    let in_file = |source| in_file(path, source);
    let io_error = |source| io_error(path, source);
    let len = std::fs::metadata(path).map_err(io_error)?.len();
    if len > limits.max_input_bytes {
        return read_file(path, Some(progress), Stacks::Read);
    }
    let mut file = std::fs::File::open(path).map_err(io_error)?;
    // The metadata's length is a hint: the file may change while read.
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut on_segments = Some(on_segments);
    let mut key = TraceKeySearch::new();
    let mut last_try = 0usize;
    // A large file is parsed in pieces from the disk once the stage is
    // settled, so its bytes are never all in memory.
    let in_pieces = len >= pieces_from;
    loop {
        // A stream that never ends (a device file, a pipe) is refused at
        // the size limit.
        if bytes.len() as u64 > limits.max_input_bytes {
            return Err(in_file(SnapshotError::Pickle(over_the_limit(&limits))));
        }
        let read = (&mut file)
            .take(chunk as u64)
            .read_to_end(&mut bytes)
            .map_err(io_error)?;
        if read == 0 {
            break;
        }
        if bytes.len() == read {
            // What is not a pickle says so from its first bytes.
            pickle::check_looks_like_pickle(&bytes).map_err(|e| in_file(e.into()))?;
        }
        let in_first_half = bytes.len() as u64 <= (len / 2).max(chunk as u64);
        if in_pieces && (on_segments.is_none() || !in_first_half) {
            break;
        }
        if on_segments.is_none() || !in_first_half {
            continue;
        }
        if !key.seen_in(&bytes) || bytes.len() < last_try.saturating_mul(2) {
            continue;
        }
        last_try = bytes.len();
        match read_segments_stage(&bytes, len.max(bytes.len() as u64), &limits) {
            SegmentsStage::Ready(stage) => {
                if let Some(deliver) = on_segments.take() {
                    deliver(*stage);
                }
            }
            SegmentsStage::NeedMore => {}
            SegmentsStage::Single => on_segments = None,
        }
    }
    if in_pieces {
        drop(bytes);
        if let Some(document) =
            pickle::parse_file_in_pieces(&mut file, len, &limits, Some(progress))
                .map_err(io_error)?
        {
            return snapshot_from_document(document, Stacks::Read).map_err(in_file);
        }
        return read_whole_file(path, Some(progress), Stacks::Read);
    }
    snapshot_from_bytes_read(path, bytes, Some(progress))
}

/// The snapshot in `bytes`, all of the file at `path` as read.
fn snapshot_from_bytes_read(
    path: &Path,
    bytes: Vec<u8>,
    progress: Option<&AtomicU64>,
) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    if bytes.len() as u64 > limits.max_input_bytes {
        // It grew while read: refused as its new length would have been.
        return read_file(path, progress, Stacks::Read);
    }
    let document = pickle::parse_document_owned(bytes, &limits, progress)
        .map_err(|e| in_file(path, e.into()))?;
    snapshot_from_document(document, Stacks::Read).map_err(|e| in_file(path, e))
}

/// Finds the `device_traces` key in a file's bytes as they are read,
/// looking at each byte about once.
struct TraceKeySearch {
    finder: memchr::memmem::Finder<'static>,
    /// Bytes already searched.
    searched: usize,
    seen: bool,
}

impl TraceKeySearch {
    fn new() -> Self {
        TraceKeySearch {
            finder: memchr::memmem::Finder::new(TRACE_KEY.as_bytes()),
            searched: 0,
            seen: false,
        }
    }

    /// Whether the key is in `bytes`, which extend the bytes of the last call.
    fn seen_in(&mut self, bytes: &[u8]) -> bool {
        if !self.seen {
            // The key may straddle the end of the last bytes searched.
            let from = self.searched.saturating_sub(TRACE_KEY.len());
            self.searched = bytes.len();
            self.seen = bytes
                .get(from..)
                .is_some_and(|new| self.finder.find(new).is_some());
        }
        self.seen
    }
}

/// Bytes [`check_file_start`] reads: more than the first-bytes check
/// looks at (it quotes a text file's first line from its first 256).
const FILE_START_BYTES: u64 = 4096;

/// Whether `path` can be read and starts as a pickle: its first
/// [`FILE_START_BYTES`] only, checked as every reader checks its first
/// chunk, with the same errors ("cannot read …", "…: not a pickle: looks
/// like text: …"), and a file that ends inside its first frame (cut
/// short, as a whole read would say it). What can be said of a file this
/// cheaply is said before anything that would send the user on to read it
/// another way.
pub fn check_file_start(path: &Path) -> Result<(), SnapshotError> {
    let mut start = Vec::new();
    let file = std::fs::File::open(path).map_err(|e| io_error(path, e))?;
    // The length of a regular file; of anything else (a pipe), only when
    // it ends within the bytes read.
    let file_len = file
        .metadata()
        .ok()
        .filter(std::fs::Metadata::is_file)
        .map(|m| m.len());
    file.take(FILE_START_BYTES)
        .read_to_end(&mut start)
        .map_err(|e| io_error(path, e))?;
    pickle::check_looks_like_pickle(&start).map_err(|e| in_file(path, e.into()))?;
    let read = start.len() as u64;
    let len = if read < FILE_START_BYTES {
        Some(read)
    } else {
        file_len.filter(|&len| len >= read)
    };
    match len {
        Some(len) => pickle::check_first_frame(&start, len).map_err(|e| in_file(path, e.into())),
        None => Ok(()),
    }
}

/// A snapshot file's final state without its trace: the segments (and
/// the allocator settings and annotations if they come before the trace),
/// every trace empty and [`Snapshot::trace_not_read`] set. It reads and
/// parses only the file's beginning when the segments come first, as in
/// every `_dump_snapshot` pickle, so its cost does not grow with the
/// trace: reads growing from 256 KiB to 4 MiB until the `device_traces`
/// key, a parse of the bytes read each time they have doubled. A file read
/// in one stage is read whole, trace and all (`trace_not_read` unset); its
/// errors are the one-stage read's.
pub fn read_snapshot_file_final_state(path: &Path) -> Result<Snapshot, SnapshotError> {
    read_final_state(path, STAGED_READ_CHUNK)
}

/// The first read of [`read_snapshot_file_final_state`], in bytes.
const FIRST_FINAL_STATE_READ: usize = 256 << 10;

/// [`read_snapshot_file_final_state`] with reads of at most `chunk` bytes.
fn read_final_state(path: &Path, chunk: usize) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    let io_error = |source| io_error(path, source);
    let len = std::fs::metadata(path).map_err(io_error)?.len();
    if len > limits.max_input_bytes {
        return read_file(path, None, Stacks::Read);
    }
    let mut file = std::fs::File::open(path).map_err(io_error)?;
    let mut bytes = Vec::new();
    let mut key = TraceKeySearch::new();
    let mut last_try = 0usize;
    // The segments of a small file end in its first few hundred KiB.
    let mut next_read = chunk.min(FIRST_FINAL_STATE_READ);
    loop {
        // A stream that never ends (a device file, a pipe) is refused at
        // the size limit, and a failed allocation is an error, not an abort.
        if bytes.len() as u64 > limits.max_input_bytes {
            return Err(in_file(
                path,
                SnapshotError::Pickle(over_the_limit(&limits)),
            ));
        }
        bytes
            .try_reserve(next_read)
            .map_err(|e| io_error(std::io::Error::other(e)))?;
        let read = (&mut file)
            .take(next_read as u64)
            .read_to_end(&mut bytes)
            .map_err(io_error)?;
        if read > 0 && bytes.len() == read {
            // What is not a pickle says so from its first bytes.
            pickle::check_looks_like_pickle(&bytes).map_err(|e| in_file(path, e.into()))?;
        }
        next_read = next_read.saturating_mul(2).min(chunk);
        let at_end = read == 0;
        let doubled = bytes.len() >= last_try.saturating_mul(2);
        if key.seen_in(&bytes) && (doubled || (at_end && bytes.len() > last_try)) {
            last_try = bytes.len();
            match read_segments_stage(&bytes, len.max(bytes.len() as u64), &limits) {
                SegmentsStage::Ready(stage) => return Ok(*stage),
                SegmentsStage::NeedMore => {}
                SegmentsStage::Single => break,
            }
        }
        if at_end {
            break;
        }
    }
    // Read in one stage: the rest of the file (the parse refuses a
    // stream too long), then all of it parsed.
    read_rest(&mut file, &mut bytes, &limits).map_err(io_error)?;
    snapshot_from_bytes_read(path, bytes, None)
}

/// Bytes one read of a stream asks for in
/// [`read_snapshot_from_final_state`]: a pipe gives what its writer has
/// written so far, up to this.
const STREAM_READ: usize = 256 << 10;

/// [`read_snapshot_file_final_state`] for a stream (a pipe, standard
/// input), whose errors name `name`: it reads only as far as the final
/// state and stops there, leaving the rest of the stream unread (a writer
/// still writing then gets EPIPE, or dies of SIGPIPE, as `head` does to
/// it). What arrives is looked at as it arrives, not in fixed chunks, so a
/// slow writer is not waited on past the final state; a parse is tried
/// each time the bytes read since the `device_traces` key have doubled
/// and at the stream's end. A stream read in one stage is read to its end
/// and parsed whole, refused past the input limit; its errors are
/// [`read_snapshot_from`]'s.
pub fn read_snapshot_from_final_state(
    input: impl std::io::Read,
    name: &Path,
) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    let mut input = input;
    let io_error = |source| io_error(name, source);
    let in_file = |source| in_file(name, source);
    let mut bytes = Vec::new();
    let mut buffer = vec![0u8; STREAM_READ];
    let mut key = TraceKeySearch::new();
    let mut last_try = 0usize;
    let mut checked = false;
    loop {
        // A stream that never ends (`/dev/zero`) is refused at the limit.
        if bytes.len() as u64 > limits.max_input_bytes {
            return Err(in_file(SnapshotError::Pickle(over_the_limit(&limits))));
        }
        let read = loop {
            match input.read(&mut buffer) {
                Ok(read) => break read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_error(e)),
            }
        };
        let chunk = buffer.get(..read).unwrap_or_default();
        bytes
            .try_reserve(chunk.len())
            .map_err(|e| io_error(std::io::Error::other(e)))?;
        bytes.extend_from_slice(chunk);
        let at_end = read == 0;
        // What is not a pickle says so from its first bytes: as many as a
        // whole read of a stream looks at, however the writer split them.
        if !checked && (at_end || bytes.len() as u64 >= FIRST_LOOK_BYTES) {
            pickle::check_looks_like_pickle(&bytes).map_err(|e| in_file(e.into()))?;
            checked = true;
        }
        let doubled = bytes.len() >= last_try.saturating_mul(2);
        if checked && key.seen_in(&bytes) && (doubled || (at_end && bytes.len() > last_try)) {
            last_try = bytes.len();
            // The stream's length is known only at its end: before it, one
            // byte more says "more may come".
            let len = if at_end {
                bytes.len() as u64
            } else {
                (bytes.len() as u64).saturating_add(1)
            };
            match read_segments_stage(&bytes, len, &limits) {
                SegmentsStage::Ready(stage) => return Ok(*stage),
                SegmentsStage::NeedMore => {}
                SegmentsStage::Single => break,
            }
        }
        if at_end {
            break;
        }
    }
    // Read in one stage: the rest of the stream, then all of it parsed.
    read_rest(&mut input, &mut bytes, &limits).map_err(io_error)?;
    if bytes.len() as u64 > limits.max_input_bytes {
        return Err(in_file(SnapshotError::Pickle(over_the_limit(&limits))));
    }
    let document =
        pickle::parse_document_owned(bytes, &limits, None).map_err(|e| in_file(e.into()))?;
    snapshot_from_document(document, Stacks::Read).map_err(in_file)
}

/// `source`, found reading the snapshot at `path`.
fn in_file(path: &Path, source: SnapshotError) -> SnapshotError {
    SnapshotError::InFile {
        path: path.to_path_buf(),
        source: Box::new(source),
    }
}

/// An I/O error opening or reading `path`; for a file not found, with
/// the names beside it that it may have meant ([`super::near`]).
pub fn io_error(path: &Path, source: std::io::Error) -> SnapshotError {
    let near = if source.kind() == std::io::ErrorKind::NotFound {
        super::near::near_names(path)
    } else {
        super::near::Near::default()
    };
    SnapshotError::Io {
        path: path.to_path_buf(),
        source,
        near,
    }
}

fn read_file(
    path: &Path,
    progress: Option<&AtomicU64>,
    stacks: Stacks,
) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    let in_file = |source| in_file(path, source);
    let io_error = |source| io_error(path, source);
    // Refuse an oversized file before reading it into memory.
    let len = std::fs::metadata(path).map_err(io_error)?.len();
    if len > limits.max_input_bytes {
        return Err(in_file(SnapshotError::Pickle(PickleError::LimitExceeded {
            detail: format!(
                "file is {len} bytes, the limit is {}",
                limits.max_input_bytes
            ),
        })));
    }
    if len >= pickle::PIECES_MIN_BYTES {
        let mut file = std::fs::File::open(path).map_err(io_error)?;
        if let Some(document) =
            pickle::parse_file_in_pieces(&mut file, len, &limits, progress).map_err(io_error)?
        {
            return snapshot_from_document(document, stacks).map_err(in_file);
        }
    }
    read_whole_file(path, progress, stacks)
}

/// [`read_file`] from one copy of the file in memory.
fn read_whole_file(
    path: &Path,
    progress: Option<&AtomicU64>,
    stacks: Stacks,
) -> Result<Snapshot, SnapshotError> {
    let limits = Limits::default();
    let in_file = |source| in_file(path, source);
    let io_error = |source| io_error(path, source);
    let mut file = std::fs::File::open(path).map_err(io_error)?;
    let len_hint = file.metadata().map_or(0, |m| m.len());
    let bytes = read_within_limit(&mut file, len_hint, &limits).map_err(|e| match e {
        BoundedReadError::Io(e) => io_error(e),
        BoundedReadError::Pickle(e) => in_file(e.into()),
    })?;
    // The bytes are dropped once parsed, before any value is built.
    let document =
        pickle::parse_document_owned(bytes, &limits, progress).map_err(|e| in_file(e.into()))?;
    snapshot_from_document(document, stacks).map_err(in_file)
}

/// The bytes the first look at an input takes, before it is read on.
const FIRST_LOOK_BYTES: u64 = 64 << 10;

/// The refusal of a stream (a device file, a pipe, a file that grew) that
/// went on past the size limit.
fn over_the_limit(limits: &Limits) -> PickleError {
    PickleError::LimitExceeded {
        detail: format!("file is over {} bytes", limits.max_input_bytes),
    }
}

/// Reads the rest of `input` onto `bytes`, to one byte past the input
/// limit at most: that byte tells an input at the limit from a longer one.
fn read_rest(
    input: &mut impl std::io::Read,
    bytes: &mut Vec<u8>,
    limits: &Limits,
) -> std::io::Result<()> {
    let rest = limits
        .max_input_bytes
        .saturating_add(1)
        .saturating_sub(bytes.len() as u64);
    input.take(rest).read_to_end(bytes).map(|_| ())
}

/// Why [`read_within_limit`] gave no bytes.
#[derive(Debug)]
enum BoundedReadError {
    Io(std::io::Error),
    Pickle(PickleError),
}

/// All of `input` (about `len_hint` bytes), refused at its first bytes when
/// they are not a pickle and once it passes the input limit. A pipe or a
/// device has no length to check before reading (`/dev/zero` never ends),
/// so the memory this takes is bounded here, not by the metadata.
fn read_within_limit(
    input: &mut impl std::io::Read,
    len_hint: u64,
    limits: &Limits,
) -> Result<Vec<u8>, BoundedReadError> {
    let capacity = usize::try_from(len_hint.min(limits.max_input_bytes)).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    input
        .take(FIRST_LOOK_BYTES)
        .read_to_end(&mut bytes)
        .map_err(BoundedReadError::Io)?;
    pickle::check_looks_like_pickle(&bytes).map_err(BoundedReadError::Pickle)?;
    read_rest(input, &mut bytes, limits).map_err(BoundedReadError::Io)?;
    if bytes.len() as u64 > limits.max_input_bytes {
        return Err(BoundedReadError::Pickle(over_the_limit(limits)));
    }
    Ok(bytes)
}

/// Converts a parsed pickle into a [`Snapshot`] without ever holding the
/// whole trace as values: everything but the per-device trace lists is
/// frozen and converted first, then each trace entry is frozen, converted
/// and dropped in turn. Same result as [`snapshot_from_value`] of the whole
/// tree (a file with several bad fields may have another one reported
/// first); peak memory for a long trace is a fraction of it.
fn snapshot_from_document(
    mut document: pickle::Document,
    stacks: Stacks,
) -> Result<Snapshot, SnapshotError> {
    let deferred = document.defer_device_traces();
    let mut reader = Reader {
        stacks,
        skip_stacks: stacks == Stacks::Skip,
        memory: MemoryBudget {
            used: document.memory_used,
            budget: document.memory_budget,
            input_len: document.input_len,
        },
        ..Reader::default()
    };
    // Segments are read in place only when no trace is read after them:
    // trace entries then find the frame dicts the segments share with
    // them frozen, which is faster for them than reading them in place
    // again (`replay --verify` of a 4 MB file was 12 % slower). Without
    // stacks nothing is shared: the segments are read in place.
    let in_place = deferred.is_none() || reader.skip_stacks;
    let segments = if in_place && document.max_depth() >= SEGMENTS_IN_PLACE_DEPTH {
        if deferred.is_none()
            && let Some(snapshot) = reader.segment_list_snapshot_in_place(&document)
        {
            return Ok(snapshot);
        }
        reader.segments_in_place(&mut document)
    } else {
        None
    };
    let root = document.freeze_root()?;
    let mut snapshot = reader.snapshot_with(&root, segments)?;
    drop(root);
    let Some(traces) = deferred else {
        return Ok(snapshot);
    };
    // Entries are dropped after conversion, so the identity caches must
    // keep what they are keyed by alive (addresses could be reused).
    reader.keep_alive = true;
    let path = FieldPath::ROOT;
    let traces_path = path.key("device_traces");
    for (device, trace) in traces.iter().enumerate() {
        let device_path = traces_path.index(device);
        let mut out = Vec::with_capacity(trace.len());
        for index in 0..trace.len() {
            // Fast path: a well-formed entry converted from its fields in
            // place (no value built); anything unusual, including every
            // error, takes the general path below, which reports it.
            let entry_path = device_path.index(index);
            reader
                .memory
                .charge(std::mem::size_of::<TraceEntry>(), &entry_path)?;
            if let Some(entry) = document
                .flat_entry(trace, index)
                .and_then(|flat| reader.flat_trace_entry(&flat, &entry_path))
            {
                out.push(entry);
                continue;
            }
            let value = document.freeze_entry(trace, index)?;
            if let Some(entry) = reader.trace_entry(&value, &device_path.index(index))? {
                out.push(entry);
            }
            drop(value);
            document.release_entry();
        }
        if let Some(slot) = snapshot.device_traces.get_mut(device) {
            *slot = out;
        }
    }
    snapshot.skipped_trace_entries = reader.skipped_trace_entries;
    snapshot.skipped_trace_actions = std::mem::take(&mut reader.skipped_trace_actions);
    let large = document.input_len >= BACKGROUND_DROP_BYTES;
    drop_in_background((document, reader, traces), large);
    Ok(snapshot)
}

/// From this file size (bytes) the parsed document is freed on a thread of
/// its own: it is one allocation or more per trace entry (56 ms for a
/// 198 MB file, a quarter of a second for 1 GB), and the snapshot is ready
/// without waiting for that. Below it the document is freed here: the
/// freeing thread takes glibc's heap lock for every block, so while the
/// caller goes on allocating (the summary's scrub, `replay`'s search) the
/// two wait on each other, which cost more than the drop itself on small
/// files (whole-process, interleaved: `open --summary` of a 1.6 MB file
/// 8 % faster with the drop here, of a 4 MB one 4 %; a 20 MB one alike
/// either way; a 198 MB one 11 % slower).
const BACKGROUND_DROP_BYTES: usize = 32 << 20;

/// Drops `parts` on a new thread when `large`, else (or when no thread can
/// be started) here. Nothing is waited for: the memory is freed as soon as
/// that thread gets to it.
fn drop_in_background<T: Send + 'static>(parts: T, large: bool) {
    if large {
        let spawned = std::thread::Builder::new()
            .name("vramtop-free".to_string())
            .spawn(move || drop(parts));
        // A refused thread has dropped `parts` already, here.
        drop(spawned);
    }
}

/// Most distinct [`TraceExtra`]s the reader shares: real files have a
/// handful; a file with a new string in every entry gets one per entry.
const MAX_SHARED_EXTRAS: usize = 4096;

/// The trace entry keys [`Reader::flat_trace_entry`] reads.
/// Key set ids [`Reader::flat_slots`] keeps slots for: more than a parse
/// makes (it keeps 4,096 key sets).
const MAX_KEY_SET_SLOTS: usize = 1 << 13;

const FLAT_KEYS: [&str; 9] = [
    "action",
    "addr",
    "device_free",
    "size",
    "stream",
    "time_us",
    "frames",
    "compile_context",
    "user_metadata",
];

/// The index of `key` in [`FLAT_KEYS`], worked out at compile time (a key
/// not in the list does not compile): a run-time search compared strings
/// nine times per trace entry.
const fn flat_slot(key: &str) -> usize {
    key_slot(&FLAT_KEYS, key)
}

/// The index of `key` in [`SEGMENT_KEYS`], at compile time.
const fn segment_slot(key: &str) -> usize {
    key_slot(&SEGMENT_KEYS, key)
}

/// The index of `key` in [`BLOCK_KEYS`], at compile time.
const fn block_slot(key: &str) -> usize {
    key_slot(&BLOCK_KEYS, key)
}

/// The index of `key` in `keys`; used in `const` blocks, where a key not
/// in the list fails to compile (a run-time search compared strings at
/// every field of every segment and block: a tenth of a summary that
/// reads no trace).
const fn key_slot(keys: &[&str], key: &str) -> usize {
    let mut i = 0;
    while i < keys.len() {
        let k = keys[i].as_bytes();
        let wanted = key.as_bytes();
        if k.len() == wanted.len() {
            let mut j = 0;
            while j < k.len() && k[j] == wanted[j] {
                j += 1;
            }
            if j == k.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("not a key of the list")
}

/// Converts an already parsed pickle into a [`Snapshot`].
pub fn snapshot_from_value(root: &Value) -> Result<Snapshot, SnapshotError> {
    Reader::default().snapshot(root)
}

impl Reader {
    fn snapshot(&mut self, root: &Value) -> Result<Snapshot, SnapshotError> {
        self.snapshot_with(root, None)
    }

    /// [`Reader::snapshot`], with the segments already read in place when
    /// `read_segments` holds them (then the root's `segments` is None).
    fn snapshot_with(
        &mut self,
        root: &Value,
        read_segments: Option<Vec<Segment>>,
    ) -> Result<Snapshot, SnapshotError> {
        let reader = self;
        let top = FieldPath::ROOT;
        match root {
            Value::Dict(_) => {
                let segments = match read_segments {
                    Some(segments) => segments,
                    None => {
                        let Some(segments) = present(root, "segments") else {
                            if let Some(none) = root.get("segments") {
                                return Err(mismatch(&top.key("segments"), "list", none));
                            }
                            return Err(SnapshotError::Shape(format!(
                                "top level is a dict without a 'segments' key (keys: {})",
                                describe_keys(root)
                            )));
                        };
                        reader.segments(segments, &top.key("segments"))?
                    }
                };
                let device_traces = match present(root, "device_traces") {
                    Some(traces) => reader.device_traces(traces, &top.key("device_traces"))?,
                    None => Vec::new(),
                };
                let allocator_settings = present(root, "allocator_settings")
                    .map(|s| allocator_settings(s, &top.key("allocator_settings")))
                    .transpose()?;
                let external_annotations = match present(root, "external_annotations") {
                    Some(list) => annotations(list, &top.key("external_annotations"))?,
                    None => Vec::new(),
                };
                Ok(Snapshot {
                    format: SnapshotFormat::DumpSnapshot,
                    segments,
                    device_traces,
                    allocator_settings,
                    external_annotations,
                    skipped_trace_entries: reader.skipped_trace_entries,
                    skipped_trace_actions: reader.skipped_trace_actions.clone(),
                    trace_not_read: false,
                    block_history: reader.saw_block_history,
                })
            }
            Value::List(items) => {
                if let Some((index, item)) = items
                    .iter()
                    .enumerate()
                    .find(|(_, v)| !matches!(v, Value::Dict(_)))
                {
                    return Err(SnapshotError::Shape(format!(
                        "top level is a list whose item [{index}] is {}, not a segment dict",
                        a_type(item)
                    )));
                }
                Ok(segment_list_snapshot(reader.segments(root, &top)?))
            }
            other => Err(SnapshotError::Shape(format!(
                "top level is {}, not a dict with 'segments' or a list of segments",
                a_type(other)
            ))),
        }
    }
}

/// The snapshot of a bare list of segments.
fn segment_list_snapshot(segments: Vec<Segment>) -> Snapshot {
    Snapshot::of_segments(SnapshotFormat::SegmentList, segments)
}

/// A map keyed by [`Value::identity`] (an address): such keys need no
/// collision-resistant hashing, and SipHash showed up in profiles.
type IdentityMap<T> = HashMap<usize, T, BuildHasherDefault<AddressHasher>>;

/// Multiplicative word-at-a-time hashing for address keys (and sequences
/// of them); not collision resistant, which identity keys do not need.
#[derive(Default)]
struct AddressHasher(u64);

impl AddressHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        // Fold the well-mixed high bits into the low ones the table indexes by.
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for chunk in &mut words {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
        for &byte in words.remainder() {
            self.mix(u64::from(byte));
        }
    }

    fn write_usize(&mut self, address: usize) {
        self.mix(address as u64);
    }

    /// A node id (the frames caches' keys): one mix, not one a byte.
    fn write_u32(&mut self, id: u32) {
        self.mix(u64::from(id));
    }
}

/// Conversion state: the frames interned so far.
#[derive(Default)]
struct Reader {
    /// Keyed by [`Value::identity`] of the source list. Sound because the
    /// root value, which owns every list, outlives the reader.
    frames_by_identity: IdentityMap<Frames>,
    /// Keyed by the identities of the frame dicts in the list: PyTorch builds
    /// a new list per allocation from cached frame objects, so thousands of
    /// distinct lists hold only ~100 distinct sequences in real snapshots.
    frames_by_content: HashMap<Vec<usize>, Frames, BuildHasherDefault<AddressHasher>>,
    /// Frames lists read in place (never frozen), by their document node.
    frames_by_list_node: HashMap<u32, Frames, BuildHasherDefault<AddressHasher>>,
    /// The same, by the nodes of their frame dicts when none was frozen.
    frames_by_dict_nodes: HashMap<Vec<u32>, Frames, BuildHasherDefault<AddressHasher>>,
    /// Frame dicts converted so far, by identity.
    frame_by_identity: IdentityMap<Frame>,
    /// One shared allocation for every empty traceback.
    empty_frames: Option<Frames>,
    /// The trace entries' extras so far, by content.
    extras: HashMap<TraceExtra, Arc<TraceExtra>>,
    /// Per key set of the trace entries read in place (indexed by the
    /// set's id, which the parser numbers from 0), the [`FLAT_KEYS`] index
    /// of each key.
    flat_slots: Vec<Option<Vec<Option<usize>>>>,
    /// The same for segment and block dicts read in place.
    segment_slots: FxHashMap<u32, Vec<KeySlot>>,
    block_slots: FxHashMap<u32, Vec<KeySlot>>,
    skipped_trace_entries: usize,
    skipped_trace_actions: UnknownActions,
    /// A block with torch 2.0's `history` was read.
    saw_block_history: bool,
    /// Which tracebacks are read.
    stacks: Stacks,
    /// Every traceback read as empty (see [`Stacks::Skip`]).
    skip_stacks: bool,
    /// Keep every value whose identity keys a cache (set while converting
    /// trace entries that are dropped after use).
    keep_alive: bool,
    kept: Vec<Value>,
    memory: MemoryBudget,
}

/// What the snapshot being built may take: the file's budget (see
/// [`Limits::memory_budget`]) less what parsing took. A value the pickle
/// refers to many times is converted each time (segments, blocks, trace
/// entries) and charged each time; shared tracebacks are charged once.
#[derive(Debug)]
struct MemoryBudget {
    used: u64,
    budget: u64,
    input_len: usize,
}

impl Default for MemoryBudget {
    fn default() -> Self {
        MemoryBudget {
            used: 0,
            budget: u64::MAX,
            input_len: 0,
        }
    }
}

impl MemoryBudget {
    /// Counts `bytes` of converted values, doubled for the slack of growing
    /// vectors and the allocator's headers.
    fn charge(&mut self, bytes: usize, path: &FieldPath) -> Result<(), SnapshotError> {
        self.used = self.used.saturating_add(2 * bytes as u64);
        if self.used > self.budget {
            return Err(path.error(pickle::memory_exceeded_detail(self.budget, self.input_len)));
        }
        Ok(())
    }
}

/// The most nesting the segments read in place have (root dict, segment
/// list, segment, block list, block, frames list, frame dict): below this
/// limit the general path reports the file too deep.
const SEGMENTS_IN_PLACE_DEPTH: usize = 7;

/// The keys of a segment dict that [`Reader::segment_in_place`] reads.
const SEGMENT_KEYS: [&str; 12] = [
    "address",
    "segment_type",
    "frames",
    "blocks",
    "total_size",
    "device",
    "allocated_size",
    "active_size",
    "requested_size",
    "stream",
    "segment_pool_id",
    "is_expandable",
];

/// The keys of a block dict that [`Reader::blocks_in_place`] reads.
const BLOCK_KEYS: [&str; 6] = [
    "address",
    "size",
    "requested_size",
    "state",
    "frames",
    "history",
];

/// Where a key of a dict read in place goes (see [`InPlaceFields::of`]).
#[derive(Debug, Clone, Copy)]
enum KeySlot {
    /// The field at this index of the keys read.
    Read(usize),
    /// A string key not read.
    Other,
    NotAString,
}

/// The fields of a dict read in place, by `N` keys, in the order of the
/// keys read ([`SEGMENT_KEYS`], [`BLOCK_KEYS`]).
struct InPlaceFields<'d, const N: usize> {
    values: [Option<pickle::Field<'d>>; N],
}

impl<'d, const N: usize> InPlaceFields<'d, N> {
    /// Walks the pairs of `entry` once. `None` (leave the dict to the
    /// general path) for a key that is not a string, one of `keys` met
    /// twice, or under another key a container (or anything but None, a
    /// bool, an int or a str): those are what the general path could read
    /// differently (or report), so only plain dicts are read in place. Where each key goes is worked out once per key set
    /// (`slots_by_key_set`), not per dict.
    fn of(
        entry: &pickle::FlatEntry<'d>,
        keys: &'static [&'static str; N],
        slots_by_key_set: &mut FxHashMap<u32, Vec<KeySlot>>,
    ) -> Option<Self> {
        let slot_of = |key: Option<&str>| match key {
            None => KeySlot::NotAString,
            Some(key) => keys
                .iter()
                .position(|&k| k == key)
                .map_or(KeySlot::Other, KeySlot::Read),
        };
        let mut values = [None; N];
        let mut keep = |slot: KeySlot, field: pickle::Field<'d>| -> Option<()> {
            match slot {
                KeySlot::NotAString => None,
                KeySlot::Read(index) => {
                    let value = values.get_mut(index)?;
                    if value.is_some() {
                        return None;
                    }
                    *value = Some(field);
                    Some(())
                }
                KeySlot::Other => match field {
                    pickle::Field::Unfrozen(_)
                    | pickle::Field::Frozen(_)
                    | pickle::Field::Other => None,
                    _ => Some(()),
                },
            }
        };
        match entry.key_set() {
            Some(set) => {
                let slots = slots_by_key_set
                    .entry(set)
                    .or_insert_with(|| entry.keys().map(slot_of).collect());
                for (&slot, field) in slots.iter().zip(entry.values()) {
                    keep(slot, field)?;
                }
            }
            None => {
                for (key, field) in entry.keys().zip(entry.values()) {
                    keep(slot_of(key), field)?;
                }
            }
        }
        Some(InPlaceFields { values })
    }

    /// The value of the key at `slot` of the keys read (`segment_slot` or
    /// `block_slot` of its name), a None value read as absent (see
    /// [`present`]).
    fn get(&self, slot: usize) -> Option<pickle::Field<'d>> {
        given(self.values.get(slot).copied().flatten())
    }

    /// An unsigned int field, as [`optional_u64`] reads it; `Err(())`
    /// where that reports an error.
    fn u64(&self, slot: usize) -> Result<Option<u64>, ()> {
        match self.get(slot) {
            None => Ok(None),
            Some(pickle::Field::Int(i)) => u64::try_from(i).map(Some).map_err(|_| ()),
            Some(_) => Err(()),
        }
    }
}

/// A field's value with a None value read as absent (see [`present`]).
fn given<'d>(field: Option<pickle::Field<'d>>) -> Option<pickle::Field<'d>> {
    field.filter(|f| !matches!(f, pickle::Field::None))
}

impl Reader {
    /// The root's segments read straight from the document, without
    /// building their values (which is most of the time of a summary that
    /// reads no trace), for well-formed segments of the usual shape only:
    /// `None` for anything else, and then the general path reads them (and
    /// reports what is wrong), so results and errors stay those of the
    /// general path. When read here, the root's `segments` is set to None.
    /// The caller checks the nesting limit ([`SEGMENTS_IN_PLACE_DEPTH`]).
    fn segments_in_place(&mut self, document: &mut pickle::Document) -> Option<Vec<Segment>> {
        let (segments, index) = {
            let (root, index) = document.root_in_place("segments")?;
            let node = match root.values().nth(index)? {
                pickle::Field::Unfrozen(node) => node,
                _ => return None,
            };
            let list = root.list_in_place(node)?;
            let segments = self.segment_list_in_place(list, &FieldPath::ROOT.key("segments"));
            (segments, index)
        };
        if segments.is_some() {
            document.detach_root_value(index);
        }
        segments
    }

    /// A bare list of segments (the top level of `torch.cuda.memory_snapshot()`
    /// pickled) read in place, as [`Reader::segments_in_place`] reads a
    /// dict's.
    fn segment_list_snapshot_in_place(&mut self, document: &pickle::Document) -> Option<Snapshot> {
        let list = document.root_list_in_place()?;
        self.segment_list_in_place(list, &FieldPath::ROOT)
            .map(segment_list_snapshot)
    }

    /// Every segment of `list` read in place, or `None` with nothing
    /// charged (the general path charges the segments afresh).
    fn segment_list_in_place(
        &mut self,
        list: pickle::ListInPlace<'_>,
        path: &FieldPath,
    ) -> Option<Vec<Segment>> {
        let used_before = self.memory.used;
        let mut segments = Vec::with_capacity(list.len());
        for (index, item) in list.dict_items().enumerate() {
            match item.and_then(|entry| self.segment_in_place(&entry, &path.index(index))) {
                Some(segment) => segments.push(segment),
                None => {
                    self.memory.used = used_before;
                    return None;
                }
            }
        }
        Some(segments)
    }

    /// [`Reader::segment`] of a segment dict read in place; `None` where
    /// the general path could differ.
    fn segment_in_place(
        &mut self,
        entry: &pickle::FlatEntry<'_>,
        path: &FieldPath,
    ) -> Option<Segment> {
        use pickle::Field;
        self.memory
            .charge(std::mem::size_of::<Segment>(), path)
            .ok()?;
        let fields = InPlaceFields::of(entry, &SEGMENT_KEYS, &mut self.segment_slots)?;
        let address = fields.u64(const { segment_slot("address") }).ok()??;
        let Some(Field::Str(type_name)) = fields.get(const { segment_slot("segment_type") }) else {
            return None;
        };
        let segment_type = PoolKind::parse(type_name)?;
        let frames = match fields.get(const { segment_slot("frames") }) {
            None => self.empty_frames(),
            Some(Field::Unfrozen(node)) => {
                self.frames_in_place(entry, node, &path.key("frames"))?
            }
            Some(_) => return None,
        };
        let Some(Field::Unfrozen(blocks_node)) = fields.get(const { segment_slot("blocks") })
        else {
            return None;
        };
        let blocks = self.blocks_in_place(entry, blocks_node, address, &path.key("blocks"))?;
        let total_size = fields.u64(const { segment_slot("total_size") }).ok()??;
        if total_size > MAX_DEVICE_BYTES {
            return None;
        }
        address.checked_add(total_size)?;
        let device = u32::try_from(fields.u64(const { segment_slot("device") }).ok()??).ok()?;
        let Some(Field::Int(stream)) = fields.get(const { segment_slot("stream") }) else {
            return None;
        };
        let segment_pool_id = match fields.get(const { segment_slot("segment_pool_id") }) {
            None => (0, 0),
            Some(Field::Unfrozen(node)) => {
                let (first, second) = entry.int_pair(node)?;
                (
                    int64_cast(first)?.cast_signed(),
                    int64_cast(second)?.cast_signed(),
                )
            }
            Some(_) => return None,
        };
        let is_expandable = match fields.get(const { segment_slot("is_expandable") }) {
            None => false,
            Some(Field::Bool(b)) => b,
            Some(_) => return None,
        };
        Some(Segment {
            device,
            address,
            total_size,
            allocated_size: fields.u64(const { segment_slot("allocated_size") }).ok()?,
            active_size: fields.u64(const { segment_slot("active_size") }).ok()?,
            requested_size: fields.u64(const { segment_slot("requested_size") }).ok()?,
            stream: int64_cast(stream.into())?,
            segment_type,
            segment_pool_id,
            is_expandable,
            frames,
            blocks,
        })
    }

    /// [`Reader::blocks`] of a block list read in place (blocks of the
    /// torch 2.0 form, with a `history`, are left to the general path).
    fn blocks_in_place(
        &mut self,
        segment: &pickle::FlatEntry<'_>,
        node: u32,
        segment_address: u64,
        path: &FieldPath,
    ) -> Option<Vec<Block>> {
        use pickle::Field;
        let list = segment.list_in_place(node)?;
        let mut blocks = Vec::with_capacity(list.len());
        let mut next_address = Some(segment_address);
        for (index, item) in list.dict_items().enumerate() {
            let entry = item?;
            let path = path.index(index);
            self.memory
                .charge(std::mem::size_of::<Block>(), &path)
                .ok()?;
            let fields = InPlaceFields::of(&entry, &BLOCK_KEYS, &mut self.block_slots)?;
            if fields.get(const { block_slot("history") }).is_some() {
                return None;
            }
            let size = fields.u64(const { block_slot("size") }).ok()??;
            if size > MAX_DEVICE_BYTES {
                return None;
            }
            let Some(Field::Str(state_name)) = fields.get(const { block_slot("state") }) else {
                return None;
            };
            let state = BlockState::parse(state_name)?;
            let address = match fields.u64(const { block_slot("address") }).ok()? {
                Some(address) => address,
                None => next_address?,
            };
            next_address = Some(address.checked_add(size)?);
            let requested_size = fields
                .u64(const { block_slot("requested_size") })
                .ok()?
                .unwrap_or(size);
            let frames = match fields.get(const { block_slot("frames") }) {
                None => self.empty_frames(),
                Some(Field::Unfrozen(node)) => {
                    self.frames_in_place(&entry, node, &path.key("frames"))?
                }
                Some(_) => return None,
            };
            blocks.push(Block {
                address,
                size,
                requested_size,
                state,
                frames,
            });
        }
        Some(blocks)
    }
}

impl Reader {
    fn segments(&mut self, value: &Value, path: &FieldPath) -> Result<Vec<Segment>, SnapshotError> {
        let list = expect_list(value, path)?;
        let mut segments = Vec::with_capacity(list.len());
        for (index, item) in list.iter().enumerate() {
            segments.push(self.segment(item, &path.index(index))?);
        }
        Ok(segments)
    }

    fn segment(&mut self, value: &Value, path: &FieldPath) -> Result<Segment, SnapshotError> {
        expect_dict(value, path)?;
        self.memory.charge(std::mem::size_of::<Segment>(), path)?;
        let address = u64_field(value, "address", path)?;
        let segment_type_path = path.key("segment_type");
        let segment_type_name =
            expect_str(required(value, "segment_type", path)?, &segment_type_path)?;
        let segment_type = PoolKind::parse(segment_type_name).ok_or_else(|| {
            segment_type_path.error(format!(
                "unknown segment type '{}' (expected 'small' or 'large')",
                segment_type_name.escape_debug()
            ))
        })?;
        let frames = match present(value, "frames") {
            Some(frames) => self.frames(frames, &path.key("frames"))?,
            None => self.empty_frames(),
        };
        let blocks_path = path.key("blocks");
        let blocks = self.blocks(required(value, "blocks", path)?, address, &blocks_path)?;
        let total_size = device_bytes_field(value, "total_size", path)?;
        within_address_space(address, total_size, path)?;
        Ok(Segment {
            device: u32_field(value, "device", path)?,
            address,
            total_size,
            allocated_size: optional_u64(value, "allocated_size", path)?,
            active_size: optional_u64(value, "active_size", path)?,
            requested_size: optional_u64(value, "requested_size", path)?,
            stream: int64_cast_field(value, "stream", path)?,
            segment_type,
            segment_pool_id: match present(value, "segment_pool_id") {
                Some(id) => pool_id(id, &path.key("segment_pool_id"))?,
                None => (0, 0),
            },
            is_expandable: optional_bool(value, "is_expandable", path)?.unwrap_or(false),
            frames,
            blocks,
        })
    }

    fn blocks(
        &mut self,
        value: &Value,
        segment_address: u64,
        path: &FieldPath,
    ) -> Result<Vec<Block>, SnapshotError> {
        let list = expect_list(value, path)?;
        let mut blocks = Vec::with_capacity(list.len());
        // Where the next block starts if it does not say (torch 2.0); `None`
        // once that would pass 2^64.
        let mut next_address = Some(segment_address);
        for (index, item) in list.iter().enumerate() {
            let path = path.index(index);
            expect_dict(item, &path)?;
            self.memory.charge(std::mem::size_of::<Block>(), &path)?;
            let size = device_bytes_field(item, "size", &path)?;
            let state_path = path.key("state");
            let state_name = expect_str(required(item, "state", &path)?, &state_path)?;
            let state = BlockState::parse(state_name).ok_or_else(|| {
                state_path.error(format!(
                    "unknown block state '{}' (expected 'active_allocated', 'active_pending_free' or 'inactive')",
                    state_name.escape_debug()
                ))
            })?;
            let address = match optional_u64(item, "address", &path)? {
                Some(address) => address,
                None => next_address.ok_or_else(|| {
                    path.error(
                        "blocks before this one extend past the 64-bit address space".to_string(),
                    )
                })?,
            };
            within_address_space(address, size, &path)?;
            next_address = address.checked_add(size);

            // Torch 2.0 kept `history: [{addr, real_size, frames}]` instead of
            // `requested_size`/`frames`; the last entry is the current use.
            let history_path = path.key("history");
            let last_history = match present(item, "history") {
                Some(history) => {
                    self.saw_block_history = true;
                    let entries = expect_list(history, &history_path)?;
                    match entries.last() {
                        Some(last) => {
                            let last_path = history_path.index(entries.len() - 1);
                            expect_dict(last, &last_path)?;
                            Some((last, last_path))
                        }
                        None => None,
                    }
                }
                None => None,
            };
            let requested_size = match optional_u64(item, "requested_size", &path)? {
                Some(requested) => requested,
                None => match &last_history {
                    Some((last, last_path)) => {
                        optional_u64(last, "real_size", last_path)?.unwrap_or(size)
                    }
                    None => size,
                },
            };
            let frames = match (present(item, "frames"), &last_history) {
                (Some(frames), _) => self.frames(frames, &path.key("frames"))?,
                (None, Some((last, last_path))) => match present(last, "frames") {
                    Some(frames) => self.frames(frames, &last_path.key("frames"))?,
                    None => self.empty_frames(),
                },
                (None, None) => self.empty_frames(),
            };
            blocks.push(Block {
                address,
                size,
                requested_size,
                state,
                frames,
            });
        }
        Ok(blocks)
    }

    fn device_traces(
        &mut self,
        value: &Value,
        path: &FieldPath,
    ) -> Result<Vec<Vec<TraceEntry>>, SnapshotError> {
        let devices = expect_list(value, path)?;
        let mut traces = Vec::with_capacity(devices.len());
        for (device, trace) in devices.iter().enumerate() {
            let device_path = path.index(device);
            let entries = expect_list(trace, &device_path)?;
            let mut out = Vec::with_capacity(entries.len());
            for (index, entry) in entries.iter().enumerate() {
                let entry_path = device_path.index(index);
                self.memory
                    .charge(std::mem::size_of::<TraceEntry>(), &entry_path)?;
                if let Some(entry) = self.trace_entry(entry, &entry_path)? {
                    out.push(entry);
                }
            }
            traces.push(out);
        }
        Ok(traces)
    }

    /// `None` for an entry whose action this reader does not know.
    fn trace_entry(
        &mut self,
        value: &Value,
        path: &FieldPath,
    ) -> Result<Option<TraceEntry>, SnapshotError> {
        expect_dict(value, path)?;
        let action_name = expect_str(required(value, "action", path)?, &path.key("action"))?;
        let Some(action) = TraceAction::parse(action_name) else {
            // Only entries of an unknown action come here for it: the
            // fast path gives them up on their action.
            self.skipped_trace_entries += 1;
            self.skipped_trace_actions.note(action_name);
            return Ok(None);
        };
        let addr = if action == TraceAction::Oom && present(value, "addr").is_none() {
            u64_field(value, "device_free", path)?
        } else {
            u64_field(value, "addr", path)?
        };
        let frames = match present(value, "frames") {
            Some(frames) if self.stacks.of_entry(action) => {
                self.frames(frames, &path.key("frames"))?
            }
            _ => self.empty_frames(),
        };
        // An oom entry's size is the request that failed (any size may be
        // asked for) and its address the device's free bytes.
        let size = if action == TraceAction::Oom {
            u64_field(value, "size", path)?
        } else {
            let size = device_bytes_field(value, "size", path)?;
            within_address_space(addr, size, path)?;
            size
        };
        Ok(Some(TraceEntry {
            action,
            addr,
            size,
            stream: int64_cast_field(value, "stream", path)?,
            time: EntryTime::new(optional_i64(value, "time_us", path)?),
            frames,
            extra: self.extra(
                optional_arc_str(value, "compile_context", path)?,
                optional_arc_str(value, "user_metadata", path)?,
            ),
        }))
    }

    /// [`Reader::trace_entry`] of an entry read in place, for the common
    /// case only: `None` wherever the general path could differ (a missing
    /// or mistyped field, an unknown action, a frames list not frozen yet),
    /// so the caller falls back to it and results stay identical.
    fn flat_trace_entry<'d>(
        &mut self,
        entry: &pickle::FlatEntry<'d>,
        path: &FieldPath,
    ) -> Option<TraceEntry> {
        use pickle::Field;
        // One walk over the pairs, keeping the last value of each key (as
        // `Value::get` does); `present` semantics: a None value is absent.
        // Plain fields, not `Option`s of them: an `Option<Field>` put its
        // payload one byte past its tag, and reading it back just after
        // writing it stalled on every entry (perf: two thirds of the
        // conversion's samples).
        let mut fields: [Field<'d>; FLAT_KEYS.len()] = [Field::None; FLAT_KEYS.len()];
        let mut keep = |slot: Option<usize>, field: Field<'d>| {
            if let Some(slot) = slot.and_then(|i| fields.get_mut(i)) {
                *slot = field;
            }
        };
        let slot_of = |key: &str| FLAT_KEYS.iter().position(|&k| k == key);
        // Entries that share their keys: where each key goes is worked out
        // once per key set, not per entry (a set's id indexes the table; an
        // id past any parse's sets is read key by key).
        let set = entry
            .key_set()
            .map(|set| set as usize)
            .filter(|&set| set < MAX_KEY_SET_SLOTS);
        match set {
            Some(set) => {
                if set >= self.flat_slots.len() {
                    self.flat_slots.resize(set + 1, None);
                }
                let slots = match self.flat_slots.get_mut(set) {
                    Some(slots) => slots
                        .get_or_insert_with(|| entry.keys().map(|k| k.and_then(slot_of)).collect())
                        .as_slice(),
                    None => &[],
                };
                // By index (see `FlatEntry::value`); the slots are as many
                // as the set's keys, so as the entry's pairs.
                for (index, &slot) in slots.iter().enumerate() {
                    if let Some(field) = entry.value(index) {
                        keep(slot, field);
                    }
                }
            }
            None => {
                for (key, field) in entry.fields() {
                    keep(slot_of(key), field);
                }
            }
        }
        // By slot (`flat_slot` of the key, a constant).
        let present = |slot: usize| match fields.get(slot).copied() {
            None | Some(Field::None) => None,
            field => field,
        };
        let int = |slot: usize| match present(slot)? {
            Field::Int(i) => Some(i),
            _ => None,
        };
        let u64_of = |slot: usize| int(slot).and_then(|i| u64::try_from(i).ok());
        let cast_of = |slot: usize| int(slot).map(i128::from).and_then(int64_cast);
        let optional_i64 = |slot: usize| match present(slot) {
            None => Some(None),
            Some(Field::Int(i)) => Some(Some(i)),
            Some(_) => None,
        };
        let optional_str = |slot: usize| match present(slot) {
            None => Some(None),
            Some(Field::Str(s)) => Some(Some(Arc::clone(s))),
            Some(_) => None,
        };
        let Field::Str(action_name) = present(const { flat_slot("action") })? else {
            return None;
        };
        let action = TraceAction::parse(action_name)?;
        let addr = if action == TraceAction::Oom && present(const { flat_slot("addr") }).is_none() {
            u64_of(const { flat_slot("device_free") })?
        } else {
            u64_of(const { flat_slot("addr") })?
        };
        let size = u64_of(const { flat_slot("size") })?;
        // Out-of-bounds sizes take the general path, which reports them.
        if action != TraceAction::Oom
            && (size > MAX_DEVICE_BYTES || addr.checked_add(size).is_none())
        {
            return None;
        }
        let stream = cast_of(const { flat_slot("stream") })?;
        let time_us = optional_i64(const { flat_slot("time_us") })?;
        let compile_context = optional_str(const { flat_slot("compile_context") })?;
        let user_metadata = optional_str(const { flat_slot("user_metadata") })?;
        let frames = match present(const { flat_slot("frames") }) {
            _ if !self.stacks.of_entry(action) => self.empty_frames(),
            None => self.empty_frames(),
            Some(Field::Frozen(value)) => self.frames(value, &path.key("frames")).ok()?,
            Some(Field::Unfrozen(node)) => {
                self.frames_in_place(entry, node, &path.key("frames"))?
            }
            Some(_) => return None,
        };
        Some(TraceEntry {
            action,
            addr,
            size,
            stream,
            time: EntryTime::new(time_us),
            frames,
            extra: self.extra(compile_context, user_metadata),
        })
    }

    /// The shared [`TraceExtra`] of these strings (one per distinct pair,
    /// up to [`MAX_SHARED_EXTRAS`]; past that, one per entry).
    fn extra(
        &mut self,
        compile_context: Option<Arc<str>>,
        user_metadata: Option<Arc<str>>,
    ) -> Option<Arc<TraceExtra>> {
        let key = TraceExtra {
            compile_context,
            user_metadata,
        };
        if key.compile_context.is_none() && key.user_metadata.is_none() {
            return None;
        }
        if let Some(shared) = self.extras.get(&key) {
            return Some(Arc::clone(shared));
        }
        let extra = Arc::new(key.clone());
        if self.extras.len() < MAX_SHARED_EXTRAS {
            self.extras.insert(key, Arc::clone(&extra));
        }
        Some(extra)
    }

    fn empty_frames(&mut self) -> Frames {
        self.empty_frames
            .get_or_insert_with(|| Arc::from([]))
            .clone()
    }

    /// Converts a frame dict once per source object: real snapshots reuse a
    /// few hundred frame dicts across ~10^5 traceback slots.
    fn frame(&mut self, value: &Value, path: &FieldPath) -> Result<Frame, SnapshotError> {
        let identity = value.identity();
        if let Some(frame) = identity.and_then(|id| self.frame_by_identity.get(&id)) {
            return Ok(frame.clone());
        }
        expect_dict(value, path)?;
        let frame = Frame {
            filename: arc_str_field(value, "filename", path)?,
            line: int64_cast_field(value, "line", path)?,
            name: arc_str_field(value, "name", path)?,
        };
        if let Some(id) = identity {
            self.frame_by_identity.insert(id, frame.clone());
            self.keep(value);
        }
        Ok(frame)
    }

    /// Converts a frames list once per source object.
    fn frames(&mut self, value: &Value, path: &FieldPath) -> Result<Frames, SnapshotError> {
        if self.skip_stacks {
            return Ok(self.empty_frames());
        }
        let list = expect_list(value, path)?;
        if list.is_empty() {
            return Ok(self.empty_frames());
        }
        let identity = value.identity();
        if let Some(frames) = identity.and_then(|id| self.frames_by_identity.get(&id)) {
            return Ok(frames.clone());
        }
        let frames = self.frames_of(list.iter(), list.len(), path)?;
        if let Some(id) = identity {
            self.frames_by_identity.insert(id, frames.clone());
            self.keep(value);
        }
        Ok(frames)
    }

    /// Converts the frames list at `node`, read in place (see
    /// [`pickle::Field::Unfrozen`]), to what [`Reader::frames`] makes of
    /// the same list frozen, once per distinct list of frame dicts; `None`
    /// (leave it to that) for anything but frame dicts with a str filename
    /// and name and an int line.
    fn frames_in_place(
        &mut self,
        entry: &pickle::FlatEntry<'_>,
        node: u32,
        path: &FieldPath,
    ) -> Option<Frames> {
        if self.skip_stacks {
            return Some(self.empty_frames());
        }
        // Looked up before the list itself is (its node is far in memory).
        if let Some(frames) = self.frames_by_list_node.get(&node) {
            return Some(frames.clone());
        }
        let list = entry.list_in_place(node)?;
        if list.is_empty() {
            return Some(self.empty_frames());
        }
        if !list.readable() {
            return None;
        }
        let frames = self.new_frames_in_place(list, path)?;
        self.frames_by_list_node.insert(list.node(), frames.clone());
        Some(frames)
    }

    /// [`Reader::frames_in_place`] of a list node met for the first time.
    fn new_frames_in_place(
        &mut self,
        list: pickle::ListInPlace<'_>,
        path: &FieldPath,
    ) -> Option<Frames> {
        // Frame dicts all frozen before: converted as a frozen list of them.
        let frozen = all_some(
            list.items().map(|item| match item {
                pickle::ListItem::Frozen(value) => Some(value),
                pickle::ListItem::Flat(..) => None,
            }),
            list.len(),
        );
        if let Some(values) = frozen {
            return self.frames_of(values.into_iter(), list.len(), path).ok();
        }
        // Some not frozen: a list of only those is known by their nodes
        // (equal nodes, equal frames); a mix of both kinds is converted
        // each time it is met.
        let nodes = all_some(
            list.items().map(|item| match item {
                pickle::ListItem::Flat(node, _) => Some(node),
                pickle::ListItem::Frozen(_) => None,
            }),
            list.len(),
        );
        if let Some(frames) = nodes
            .as_ref()
            .and_then(|k| self.frames_by_dict_nodes.get(k))
        {
            return Some(frames.clone());
        }
        self.memory
            .charge(
                list.len().saturating_mul(std::mem::size_of::<Frame>()),
                path,
            )
            .ok()?;
        let mut frames = Vec::with_capacity(list.len());
        for (index, item) in list.items().enumerate() {
            frames.push(match item {
                pickle::ListItem::Frozen(value) => self.frame(value, &path.index(index)).ok()?,
                pickle::ListItem::Flat(_, dict) => flat_frame(&dict)?,
            });
        }
        let frames: Frames = frames.into();
        if let Some(key) = nodes {
            self.frames_by_dict_nodes.insert(key, frames.clone());
        }
        Some(frames)
    }

    /// The frames of a list of `len` frame dicts, once per distinct list of
    /// frame dicts.
    fn frames_of<'v>(
        &mut self,
        list: impl Iterator<Item = &'v Value> + Clone,
        len: usize,
        path: &FieldPath,
    ) -> Result<Frames, SnapshotError> {
        // `None` if an element is not a shared object (then it is not a frame
        // dict either and conversion below reports it).
        let content_key = all_some(list.clone().map(Value::identity), len);
        let cached = content_key
            .as_ref()
            .and_then(|key| self.frames_by_content.get(key))
            .cloned();
        if let Some(frames) = cached {
            return Ok(frames);
        }
        self.memory
            .charge(len.saturating_mul(std::mem::size_of::<Frame>()), path)?;
        let mut frames = Vec::with_capacity(len);
        for (index, frame) in list.enumerate() {
            frames.push(self.frame(frame, &path.index(index))?);
        }
        let frames: Frames = frames.into();
        if let Some(key) = content_key {
            // The key's identities are the frame dicts, kept alive by
            // `frame` above.
            self.frames_by_content.insert(key, frames.clone());
        }
        Ok(frames)
    }

    fn keep(&mut self, value: &Value) {
        if self.keep_alive {
            self.kept.push(value.clone());
        }
    }
}

/// Every item of `items` (about `len` of them, already in memory), or
/// `None` at the first `None`. What `collect::<Option<Vec<_>>>()` does, with
/// the vector sized once: that one grows from 4 items by doubling, three
/// copies for a typical 25-frame stack, per stack.
fn all_some<T>(items: impl Iterator<Item = Option<T>>, len: usize) -> Option<Vec<T>> {
    let mut out = Vec::with_capacity(len);
    for item in items {
        out.push(item?);
    }
    Some(out)
}

fn allocator_settings(value: &Value, path: &FieldPath) -> Result<AllocatorSettings, SnapshotError> {
    expect_dict(value, path)?;
    let max_split_size = match present(value, "max_split_size") {
        None => -1,
        Some(v) => {
            let v_path = path.key("max_split_size");
            let raw = expect_int(v, &v_path)?;
            // C++ keeps "unset" as SIZE_MAX; newer bindings write -1.
            if raw == i128::from(u64::MAX) {
                -1
            } else {
                i64::try_from(raw)
                    .map_err(|_| v_path.error(format!("{raw} does not fit in 64 bits")))?
            }
        }
    };
    let garbage_collection_threshold = match present(value, "garbage_collection_threshold") {
        None => 0.0,
        Some(v) => v
            .as_f64()
            .ok_or_else(|| mismatch(&path.key("garbage_collection_threshold"), "float", v))?,
    };
    let roundup_power2_divisions = match present(value, "roundup_power2_divisions") {
        None => Vec::new(),
        Some(v) => roundup_divisions(v, &path.key("roundup_power2_divisions"))?,
    };
    let mut file_order: Vec<SettingsKey> = Vec::new();
    if let Value::Dict(pairs) = value {
        for (key, entry) in pairs.iter() {
            let known = key
                .as_str()
                .and_then(|name| KNOWN_SETTINGS_KEYS.iter().find(|k| **k == name));
            match known {
                // A repeated known key is read as Python would (the last
                // value wins) and written once, where it first stood.
                Some(name) if file_order.contains(&SettingsKey::Known(name)) => {}
                Some(name) => file_order.push(SettingsKey::Known(name)),
                None => file_order.push(SettingsKey::Other(key.clone(), entry.clone())),
            }
        }
    }
    Ok(AllocatorSettings {
        file_order,
        conf: optional_arc_str(value, "PYTORCH_CUDA_ALLOC_CONF", path)?
            .map(|s| s.to_string())
            .unwrap_or_default(),
        max_split_size,
        garbage_collection_threshold,
        expandable_segments: optional_bool(value, "expandable_segments", path)?.unwrap_or(false),
        roundup_power2_divisions,
        release_lock_on_cudamalloc: optional_bool(value, "release_lock_on_cudamalloc", path)?
            .unwrap_or(false),
        pinned_num_register_threads: optional_u64(value, "pinned_num_register_threads", path)?,
        pinned_use_cuda_host_register: optional_bool(value, "pinned_use_cuda_host_register", path)?,
        graph_capture_record_stream_reuse: optional_bool(
            value,
            "graph_capture_record_stream_reuse",
            path,
        )?,
    })
}

/// `{"1": 0, "2": 0, …}` (size class in MiB → divisions). A list is read as
/// the C++ vector it comes from, indexed by log2 of the size class.
fn roundup_divisions(value: &Value, path: &FieldPath) -> Result<Vec<(u64, u64)>, SnapshotError> {
    match value {
        Value::Dict(pairs) => pairs
            .iter()
            .map(|(key, divisions)| {
                let mib = match key {
                    Value::Str(s) => s.trim().parse::<u64>().ok(),
                    other => other.as_u64(),
                }
                .ok_or_else(|| {
                    path.error(format!(
                        "key {} is not a size in MiB",
                        match key.as_str() {
                            Some(s) => format!("'{}'", s.escape_debug()),
                            None => a_type(key),
                        }
                    ))
                })?;
                let label = mib.to_string();
                Ok((mib, expect_u64(divisions, &path.key(&label))?))
            })
            .collect(),
        Value::List(items) | Value::Tuple(items) => items
            .iter()
            .enumerate()
            .map(|(index, divisions)| {
                let mib = u32::try_from(index).ok().and_then(|i| 1u64.checked_shl(i));
                let mib = mib
                    .ok_or_else(|| path.error(format!("more than 64 entries ({})", items.len())))?;
                Ok((mib, expect_u64(divisions, &path.index(index))?))
            })
            .collect(),
        other => Err(mismatch(path, "dict", other)),
    }
}

fn annotations(value: &Value, path: &FieldPath) -> Result<Vec<Annotation>, SnapshotError> {
    let list = expect_list(value, path)?;
    let mut out = Vec::with_capacity(list.len());
    for (index, item) in list.iter().enumerate() {
        let path = path.index(index);
        expect_dict(item, &path)?;
        out.push(Annotation {
            stage: arc_str_field(item, "stage", &path)?.to_string(),
            name: arc_str_field(item, "name", &path)?.to_string(),
            device: i64_field(item, "device", &path)?,
            time_us: i64_field(item, "time_us", &path)?,
        });
    }
    Ok(out)
}

fn pool_id(value: &Value, path: &FieldPath) -> Result<(i64, i64), SnapshotError> {
    // PyTorch's pool id is a pair of unsigned 64-bit ints (the Python
    // binding) or their signed casts (the C++ writer). Ids only tell pools
    // apart, so the bits are kept as they are in a signed pair.
    let half = |item: &Value, index: usize| -> Result<i64, SnapshotError> {
        let item_path = path.index(index);
        let raw = expect_int(item, &item_path)?;
        int64_cast(raw)
            .map(u64::cast_signed)
            .ok_or_else(|| item_path.error(format!("{raw} does not fit in 64 bits")))
    };
    match value.as_list() {
        Some([first, second]) => Ok((half(first, 0)?, half(second, 1)?)),
        Some(other) => Err(path.error(format!(
            "expected a pair of ints, found {} items",
            other.len()
        ))),
        None => Err(mismatch(path, "tuple", value)),
    }
}

// ---- field access -----------------------------------------------------------

/// A path into the snapshot, built on the stack and only rendered into text
/// when there is an error to report.
#[derive(Clone, Copy)]
struct FieldPath<'a> {
    parent: Option<&'a FieldPath<'a>>,
    step: Step<'a>,
}

#[derive(Clone, Copy)]
enum Step<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

impl<'a> FieldPath<'a> {
    const ROOT: FieldPath<'static> = FieldPath {
        parent: None,
        step: Step::Root,
    };

    fn key(&'a self, key: &'a str) -> FieldPath<'a> {
        FieldPath {
            parent: Some(self),
            step: Step::Key(key),
        }
    }

    fn index(&'a self, index: usize) -> FieldPath<'a> {
        FieldPath {
            parent: Some(self),
            step: Step::Index(index),
        }
    }

    fn render(&self) -> String {
        let mut steps = Vec::new();
        let mut cursor = Some(self);
        while let Some(path) = cursor {
            steps.push(path.step);
            cursor = path.parent;
        }
        let mut out = String::new();
        for step in steps.into_iter().rev() {
            match step {
                Step::Root => {}
                Step::Key(key) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(key);
                }
                Step::Index(index) => {
                    let _ = write!(out, "[{index}]");
                }
            }
        }
        if out.is_empty() {
            out.push_str("top level");
        }
        out
    }

    fn error(&self, message: String) -> SnapshotError {
        SnapshotError::Field {
            path: self.render(),
            message,
        }
    }
}

/// A dict entry, treating an explicit Python `None` as absent.
fn present<'v>(dict: &'v Value, key: &str) -> Option<&'v Value> {
    dict.get(key).filter(|v| !matches!(v, Value::None))
}

fn required<'v>(dict: &'v Value, key: &str, path: &FieldPath) -> Result<&'v Value, SnapshotError> {
    present(dict, key).ok_or_else(|| path.error(format!("missing key '{key}'")))
}

fn a_type(value: &Value) -> String {
    let name = value.type_name();
    match value {
        Value::Int(i) => format!("an int ({i})"),
        Value::Str(s) if s.len() <= 40 => format!("a str ('{}')", s.escape_debug()),
        _ if name.starts_with(['a', 'e', 'i', 'o', 'u']) => format!("an {name}"),
        _ => format!("a {name}"),
    }
}

fn describe_keys(dict: &Value) -> String {
    const SHOWN: usize = 8;
    let pairs = dict.as_dict().unwrap_or_default();
    if pairs.is_empty() {
        return "none".to_string();
    }
    let mut keys: Vec<String> = pairs
        .iter()
        .take(SHOWN)
        .map(|(k, _)| match k.as_str() {
            Some(s) => format!(
                "'{}'",
                s.chars().take(40).collect::<String>().escape_debug()
            ),
            None => format!("<{}>", k.type_name()),
        })
        .collect();
    if pairs.len() > SHOWN {
        keys.push(format!("… {} more", pairs.len() - SHOWN));
    }
    keys.join(", ")
}

fn mismatch(path: &FieldPath, expected: &str, found: &Value) -> SnapshotError {
    path.error(format!("expected {expected}, found {}", found.type_name()))
}

fn expect_dict(value: &Value, path: &FieldPath) -> Result<(), SnapshotError> {
    match value {
        Value::Dict(_) => Ok(()),
        other => Err(mismatch(path, "dict", other)),
    }
}

fn expect_list<'v>(value: &'v Value, path: &FieldPath) -> Result<&'v [Value], SnapshotError> {
    value.as_list().ok_or_else(|| mismatch(path, "list", value))
}

fn expect_str<'v>(value: &'v Value, path: &FieldPath) -> Result<&'v str, SnapshotError> {
    value.as_str().ok_or_else(|| mismatch(path, "str", value))
}

fn expect_int(value: &Value, path: &FieldPath) -> Result<i128, SnapshotError> {
    value.as_int().ok_or_else(|| mismatch(path, "int", value))
}

fn expect_u64(value: &Value, path: &FieldPath) -> Result<u64, SnapshotError> {
    let raw = expect_int(value, path)?;
    u64::try_from(raw).map_err(|_| {
        if raw < 0 {
            path.error(format!("expected a non-negative int, found {raw}"))
        } else {
            path.error(format!("{raw} does not fit in 64 bits"))
        }
    })
}

fn expect_i64(value: &Value, path: &FieldPath) -> Result<i64, SnapshotError> {
    let raw = expect_int(value, path)?;
    i64::try_from(raw).map_err(|_| path.error(format!("{raw} does not fit in a signed 64-bit int")))
}

/// An unsigned 64-bit value that PyTorch may write through a signed 64-bit
/// cast (`int64_t(stream)`, the C++ writer's `int64_t(lineno)`): a negative
/// int is the same bits, so it reads back as what was cast.
/// A frame dict read in place, as [`Reader::frame`] reads it frozen: the
/// last `filename`, `line` and `name` (a None value counts as absent);
/// `None` where that would report an error.
fn flat_frame(dict: &pickle::FlatEntry<'_>) -> Option<Frame> {
    use pickle::Field;
    let (mut filename, mut line, mut name) = (None, None, None);
    for (key, field) in dict.fields() {
        let slot = match key {
            "filename" => &mut filename,
            "line" => &mut line,
            "name" => &mut name,
            _ => continue,
        };
        *slot = Some(field).filter(|f| !matches!(f, Field::None));
    }
    let (Some(Field::Str(filename)), Some(Field::Int(line)), Some(Field::Str(name))) =
        (filename, line, name)
    else {
        return None;
    };
    Some(Frame {
        filename: Arc::clone(filename),
        line: int64_cast(line.into())?,
        name: Arc::clone(name),
    })
}

fn int64_cast(raw: i128) -> Option<u64> {
    match i64::try_from(raw) {
        Ok(signed) if signed < 0 => Some(signed.cast_unsigned()),
        _ => u64::try_from(raw).ok(),
    }
}

fn int64_cast_field(dict: &Value, key: &str, path: &FieldPath) -> Result<u64, SnapshotError> {
    let field_path = path.key(key);
    let raw = expect_int(required(dict, key, path)?, &field_path)?;
    int64_cast(raw).ok_or_else(|| field_path.error(format!("{raw} does not fit in 64 bits")))
}

/// A byte count of device memory: more than any device holds is bad input.
fn device_bytes_field(dict: &Value, key: &str, path: &FieldPath) -> Result<u64, SnapshotError> {
    let bytes = u64_field(dict, key, path)?;
    if bytes > MAX_DEVICE_BYTES {
        return Err(path.key(key).error(format!(
            "{bytes} bytes is more than any device holds (at most {MAX_DEVICE_BYTES})"
        )));
    }
    Ok(bytes)
}

/// `[address, address + size)` must end inside the 64-bit address space.
fn within_address_space(address: u64, size: u64, path: &FieldPath) -> Result<(), SnapshotError> {
    match address.checked_add(size) {
        Some(_) => Ok(()),
        None => Err(path.error(format!(
            "{address:#x} + {size} bytes runs past the end of the 64-bit address space"
        ))),
    }
}

fn u64_field(dict: &Value, key: &str, path: &FieldPath) -> Result<u64, SnapshotError> {
    expect_u64(required(dict, key, path)?, &path.key(key))
}

fn u32_field(dict: &Value, key: &str, path: &FieldPath) -> Result<u32, SnapshotError> {
    let field_path = path.key(key);
    let raw = expect_u64(required(dict, key, path)?, &field_path)?;
    u32::try_from(raw)
        .map_err(|_| field_path.error(format!("{raw} is not a plausible device index")))
}

fn i64_field(dict: &Value, key: &str, path: &FieldPath) -> Result<i64, SnapshotError> {
    expect_i64(required(dict, key, path)?, &path.key(key))
}

fn arc_str_field(dict: &Value, key: &str, path: &FieldPath) -> Result<Arc<str>, SnapshotError> {
    let value = required(dict, key, path)?;
    value
        .as_arc_str()
        .cloned()
        .ok_or_else(|| mismatch(&path.key(key), "str", value))
}

fn optional_u64(dict: &Value, key: &str, path: &FieldPath) -> Result<Option<u64>, SnapshotError> {
    present(dict, key)
        .map(|v| expect_u64(v, &path.key(key)))
        .transpose()
}

fn optional_i64(dict: &Value, key: &str, path: &FieldPath) -> Result<Option<i64>, SnapshotError> {
    present(dict, key)
        .map(|v| expect_i64(v, &path.key(key)))
        .transpose()
}

fn optional_bool(dict: &Value, key: &str, path: &FieldPath) -> Result<Option<bool>, SnapshotError> {
    present(dict, key)
        .map(|v| {
            v.as_bool()
                .ok_or_else(|| mismatch(&path.key(key), "bool", v))
        })
        .transpose()
}

fn optional_arc_str(
    dict: &Value,
    key: &str,
    path: &FieldPath,
) -> Result<Option<Arc<str>>, SnapshotError> {
    present(dict, key)
        .map(|v| {
            v.as_arc_str()
                .cloned()
                .ok_or_else(|| mismatch(&path.key(key), "str", v))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(text: &str) -> Value {
        Value::Str(text.into())
    }

    fn dict(pairs: Vec<(&str, Value)>) -> Value {
        Value::Dict(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
    }

    fn list(items: Vec<Value>) -> Value {
        Value::List(items.into())
    }

    fn torch20_segment() -> Value {
        let frame = dict(vec![
            ("filename", s("a.py")),
            ("name", s("f")),
            ("line", Value::Int(3)),
        ]);
        let history = list(vec![dict(vec![
            ("addr", Value::Int(4096)),
            ("real_size", Value::Int(1000)),
            ("frames", list(vec![frame])),
        ])]);
        dict(vec![
            ("device", Value::Int(0)),
            ("address", Value::Int(4096)),
            ("total_size", Value::Int(2 << 20)),
            ("stream", Value::Int(0)),
            ("segment_type", s("small")),
            (
                "blocks",
                list(vec![
                    dict(vec![
                        ("size", Value::Int(1024)),
                        ("state", s("active_allocated")),
                        ("history", history),
                    ]),
                    dict(vec![
                        ("size", Value::Int((2 << 20) - 1024)),
                        ("state", s("inactive")),
                    ]),
                ]),
            ),
        ])
    }

    #[test]
    fn torch20_blocks_get_addresses_requested_sizes_and_frames_from_history() {
        let snapshot = snapshot_from_value(&list(vec![torch20_segment()])).unwrap();
        let segment = &snapshot.segments[0];
        assert_eq!(segment.segment_pool_id, (0, 0));
        assert!(!segment.is_expandable);
        let [first, second] = &segment.blocks[..] else {
            panic!("two blocks")
        };
        assert_eq!((first.address, first.requested_size), (4096, 1000));
        assert_eq!(&*first.frames[0].filename, "a.py");
        assert_eq!(
            (second.address, second.requested_size),
            (4096 + 1024, (2 << 20) - 1024)
        );
        assert!(second.frames.is_empty());
    }

    #[test]
    fn lists_of_the_same_frame_objects_share_one_frames_arc() {
        let frame = |file: &str, line| {
            dict(vec![
                ("filename", s(file)),
                ("name", s("f")),
                ("line", Value::Int(line)),
            ])
        };
        let (a_py, b_py) = (frame("a.py", 1), frame("b.py", 2));
        // All lists stay alive while the reader runs, as under a real root:
        // identities are addresses and must not be reused.
        let lists = [
            list(vec![a_py.clone(), b_py.clone()]),
            // A different list object holding the same frame objects.
            list(vec![a_py.clone(), b_py.clone()]),
            list(vec![b_py.clone(), a_py.clone()]),
            // Equal text, but a different frame object: not assumed equal.
            list(vec![frame("a.py", 1), b_py.clone()]),
        ];
        let mut reader = Reader::default();
        let [first, same_objects, reordered, lookalike] = lists
            .each_ref()
            .map(|l| reader.frames(l, &FieldPath::ROOT).unwrap());
        assert!(Arc::ptr_eq(&first, &same_objects));
        assert!(!Arc::ptr_eq(&first, &reordered));
        assert!(!Arc::ptr_eq(&first, &lookalike));
        assert_eq!(first, lookalike);
    }

    #[test]
    fn field_path_renders_keys_and_indices() {
        let root = FieldPath::ROOT;
        let segments = root.key("segments");
        let segment = segments.index(3);
        let blocks = segment.key("blocks");
        let block = blocks.index(7);
        assert_eq!(block.key("size").render(), "segments[3].blocks[7].size");
        assert_eq!(root.index(2).key("x").render(), "[2].x");
        assert_eq!(root.render(), "top level");
    }

    #[test]
    fn max_split_size_written_as_size_max_means_unset() {
        let settings = dict(vec![("max_split_size", Value::Int(u64::MAX.into()))]);
        let parsed = allocator_settings(&settings, &FieldPath::ROOT).unwrap();
        assert_eq!(parsed.max_split_size, -1);
        assert_eq!(parsed.conf, "");
    }

    #[test]
    fn roundup_divisions_accept_a_dict_or_a_log2_indexed_list() {
        let from_dict = roundup_divisions(
            &dict(vec![("1", Value::Int(4)), ("64", Value::Int(8))]),
            &FieldPath::ROOT,
        );
        assert_eq!(from_dict.unwrap(), vec![(1, 4), (64, 8)]);
        let from_list = roundup_divisions(
            &list(vec![Value::Int(1), Value::Int(2), Value::Int(0)]),
            &FieldPath::ROOT,
        );
        assert_eq!(from_list.unwrap(), vec![(1, 1), (2, 2), (4, 0)]);
    }

    /// A generated 1 MiB snapshot in PyTorch's layout, written to `dir`:
    /// its path and length.
    fn generated_file(dir: &tempfile::TempDir) -> (std::path::PathBuf, u64) {
        use crate::snapshot::synth::{LargeShape, large};
        use crate::snapshot::writer::{WriteOptions, write_snapshot_file_with};
        let snapshot = large(&LargeShape::about_bytes(1 << 20));
        let path = dir.path().join("large.pickle");
        let options = WriteOptions {
            fresh_frame_lists: true,
        };
        let len = write_snapshot_file_with(&snapshot, &path, &options).unwrap();
        (path, len)
    }

    #[test]
    fn staged_file_read_in_small_chunks_hands_out_the_segments_then_the_same_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = generated_file(&dir);
        let progress = AtomicU64::new(0);
        let mut stage = None;
        // 4 KiB chunks: the stage comes from a prefix that ends inside a
        // pickle frame (the writer frames every 64 KiB).
        let full = read_file_staged(&path, &progress, |s| stage = Some(s), 4096, u64::MAX).unwrap();
        assert_eq!(full, read_snapshot_file(&path).unwrap());
        let stage = stage.expect("a segments stage");
        assert_eq!(stage.segments, full.segments);
        assert!(stage.device_traces.iter().all(Vec::is_empty));
        assert!(full.device_traces.iter().any(|t| !t.is_empty()));
        assert_eq!(progress.into_inner(), len);
    }

    #[test]
    fn final_state_read_in_small_chunks_stops_before_the_trace() {
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = generated_file(&dir);
        let full = read_snapshot_file(&path).unwrap();
        // 4 KiB reads: the key and the segments' end straddle reads.
        let state = read_final_state(&path, 4096).unwrap();
        assert_eq!(state.segments, full.segments);
        assert!(state.trace_not_read && !full.trace_not_read);
        assert!(state.device_traces.iter().all(Vec::is_empty));
        // Cut inside its trace, the file still gives its final state; the
        // full read says it is truncated.
        let cut = dir.path().join("cut.pickle");
        let bytes = std::fs::read(&path).unwrap();
        let half = usize::try_from(len / 2).unwrap();
        std::fs::write(&cut, &bytes[..half]).unwrap();
        assert!(read_snapshot_file(&cut).is_err());
        let state = read_final_state(&cut, 4096).unwrap();
        assert!(state.trace_not_read);
        assert_eq!(state.segments, full.segments);
        // A file without a trace key is read whole, as the full read does.
        let unframed = dir.path().join("unframed.pickle");
        std::fs::write(&unframed, b"\x80\x02]q\x00.").unwrap();
        let state = read_final_state(&unframed, 4096).unwrap();
        assert!(!state.trace_not_read);
        assert_eq!(state, read_snapshot_file(&unframed).unwrap());
        // And a bad one gives the full read's error.
        let bad = dir.path().join("bad.pickle");
        std::fs::write(&bad, b"not a pickle").unwrap();
        assert_eq!(
            read_final_state(&bad, 4096).unwrap_err().to_string(),
            read_snapshot_file(&bad).unwrap_err().to_string()
        );
    }

    #[test]
    fn final_state_read_of_an_endless_stream_ends_with_an_error() {
        // /dev/zero never ends and holds no pickle: refused from its first
        // bytes, not read until memory runs out.
        let zero = Path::new("/dev/zero");
        if !zero.exists() {
            eprintln!("skipping: no /dev/zero on this system");
            return;
        }
        let err = read_final_state(zero, 4096).unwrap_err().to_string();
        assert!(err.contains("not a pickle opcode"), "{err}");
    }

    #[test]
    fn staged_read_of_a_large_file_parses_it_in_pieces_to_the_same_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let (path, len) = generated_file(&dir);
        let progress = AtomicU64::new(0);
        let mut stage = None;
        // Every file counts as large: after the stage, the file is parsed
        // from the disk in pieces instead of from the bytes read.
        let full = read_file_staged(&path, &progress, |s| stage = Some(s), 4096, 0).unwrap();
        assert_eq!(full, read_snapshot_file(&path).unwrap());
        assert_eq!(stage.expect("a segments stage").segments, full.segments);
        assert_eq!(progress.into_inner(), len);
        // A file without frames falls back to the whole-file read.
        let unframed = dir.path().join("unframed.pickle");
        std::fs::write(&unframed, b"\x80\x02]q\x00.").unwrap();
        let one_stage = read_file_staged(&unframed, &AtomicU64::new(0), |_| {}, 4096, 0).unwrap();
        assert_eq!(one_stage, read_snapshot_file(&unframed).unwrap());
    }

    #[test]
    fn snapshot_serialises_to_json_with_frames_inline() {
        let snapshot = snapshot_from_value(&list(vec![torch20_segment()])).unwrap();
        let json = serde_json::to_string(&snapshot).unwrap();
        assert!(
            json.contains(r#""frames":[{"filename":"a.py","line":3,"name":"f"}]"#),
            "{json}"
        );
        assert!(json.contains(r#""format":"segment_list""#));
    }

    /// A reader that counts the bytes taken from it.
    struct Counted<R> {
        inner: R,
        taken: u64,
    }

    impl<R: std::io::Read> std::io::Read for Counted<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.taken += n as u64;
            Ok(n)
        }
    }

    fn limits_of(max_input_bytes: u64) -> Limits {
        Limits {
            max_input_bytes,
            ..Limits::default()
        }
    }

    #[test]
    fn an_endless_stream_of_zeros_is_refused_at_its_first_bytes() {
        let mut zeros = Counted {
            inner: std::io::repeat(0),
            taken: 0,
        };
        let e = read_within_limit(&mut zeros, 0, &Limits::default()).expect_err("refused");
        assert!(
            matches!(e, BoundedReadError::Pickle(PickleError::NotAPickle { .. })),
            "{e:?}"
        );
        assert_eq!(zeros.taken, FIRST_LOOK_BYTES);
    }

    #[test]
    fn an_endless_stream_of_opcodes_is_refused_one_byte_past_the_limit() {
        let limit = 1 << 20;
        let mut ints = Counted {
            inner: std::io::repeat(b'K'),
            taken: 0,
        };
        let e = read_within_limit(&mut ints, 0, &limits_of(limit)).expect_err("refused");
        assert!(
            matches!(&e, BoundedReadError::Pickle(PickleError::LimitExceeded { detail }) if detail.contains("1048576")),
            "{e:?}"
        );
        assert_eq!(ints.taken, limit + 1);
    }

    #[test]
    fn an_input_as_long_as_the_limit_is_read_whole() {
        let limit = 1 << 20;
        let mut input = std::io::Read::take(std::io::repeat(b'K'), limit);
        let bytes = read_within_limit(&mut input, limit, &limits_of(limit)).expect("read");
        assert_eq!(bytes.len() as u64, limit);
        let mut short = &b"K"[..];
        assert_eq!(
            read_within_limit(&mut short, 0, &limits_of(limit)).expect("read"),
            b"K"
        );
    }
}
