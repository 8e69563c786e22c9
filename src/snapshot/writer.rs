//! Writes a [`Snapshot`] as the pickle PyTorch writes: what
//! `pickle.dump(torch.cuda.memory._snapshot(), f)` (protocol 4) produces, so
//! that `torch.cuda.memory._memory_viz`, pytorch.org/memory_viz and this
//! crate's reader all open it.
//!
//! Hand-written rather than through a serde pickle crate: those write
//! protocol 3 from serde's data model, which has no notion of one object
//! referenced from many places, so every traceback would be written out in
//! full at each block and trace entry. Here, as in CPython's pickler:
//!
//! * every str, list, dict and tuple is memoised (`MEMOIZE`), and a later
//!   reference to the same object is a `BINGET`/`LONG_BINGET`: a frames list
//!   shared between blocks and trace entries (one [`Frames`] `Arc`) is
//!   written once, and so is each distinct frame dict and string;
//! * containers are filled in batches of 1000 (`MARK … APPENDS/SETITEMS`, a
//!   single item as `APPEND/SETITEM`), ints take the shortest opcode
//!   (`BININT1`/`BININT2`/`BININT`/`LONG1`), and the output is cut into
//!   64 KiB `FRAME`s.
//!
//! Keys and their order follow PyTorch's `_snapshot()` (checked against the
//! pickles in `shared/snapshots`): optional keys this crate reads as absent
//! (`time_us`, `compile_context`, `user_metadata`, the newer
//! `allocator_settings` entries) are written only when present, so a file
//! read and written back reads back equal.

use std::collections::HashMap;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use thiserror::Error;

// The opcode bytes are the reader's table, so both sides name them alike.
use super::pickle::{Value, op};
use super::types::{
    AllocatorSettings, Annotation, Block, Frame, Frames, KNOWN_SETTINGS_KEYS, Segment, SettingsKey,
    Snapshot, SnapshotFormat, TraceEntry,
};
use crate::alloc::TraceAction;

/// Why a snapshot file was not written.
#[derive(Debug, Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct WriteError {
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

/// How [`write_snapshot_with`] lays out shared tracebacks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Write a new frames list at every reference, made of memoised frame
    /// dicts, as PyTorch does (it builds one list per allocation from
    /// cached frame objects). Larger files; `false` (the default) writes
    /// each shared [`Frames`] list once and refers back to it.
    pub fresh_frame_lists: bool,
}

/// Writes `snapshot` as a protocol 4 pickle.
pub fn write_snapshot<W: Write>(snapshot: &Snapshot, out: W) -> io::Result<()> {
    write_snapshot_with(snapshot, out, &WriteOptions::default())
}

/// Writes `snapshot` as a protocol 4 pickle, with `options`.
pub fn write_snapshot_with<W: Write>(
    snapshot: &Snapshot,
    out: W,
    options: &WriteOptions,
) -> io::Result<()> {
    let mut pickler = Pickler::new(out, *options);
    pickler.start()?;
    match snapshot.format {
        SnapshotFormat::DumpSnapshot => pickler.snapshot_dict(snapshot)?,
        SnapshotFormat::SegmentList => pickler.segments(&snapshot.segments)?,
    }
    pickler.finish()
}

/// The pickle bytes of `snapshot`. Writing into memory fails only past
/// 2^32 memoised objects (hundreds of GB of snapshot); the result is then
/// empty, which no reader accepts. Use [`write_snapshot`] to see the error.
pub fn snapshot_to_bytes(snapshot: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    if write_snapshot(snapshot, &mut out).is_err() {
        out.clear();
    }
    out
}

/// Writes `snapshot` to `path`, mode 0600 (through a `.partial` file
/// renamed into place, so a failed write never leaves half a pickle under
/// the name).
/// Returns the bytes written.
pub fn write_snapshot_file(snapshot: &Snapshot, path: &Path) -> Result<u64, WriteError> {
    write_snapshot_file_with(snapshot, path, &WriteOptions::default())
}

/// [`write_snapshot_file`], with `options`.
pub fn write_snapshot_file_with(
    snapshot: &Snapshot,
    path: &Path,
    options: &WriteOptions,
) -> Result<u64, WriteError> {
    let wrap = |source| WriteError {
        path: path.to_path_buf(),
        source,
    };
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let result = (|| {
        // Made 0600 as it is created, like the files `vramtop snapshot`
        // copies: a snapshot's stack frames name the user's code. A
        // `.partial` left by a write that died is removed first, so the
        // new file is created (and the mode applied), never reused.
        if let Err(e) = std::fs::remove_file(&partial)
            && e.kind() != io::ErrorKind::NotFound
        {
            return Err(e);
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&partial)?;
        let mut out = io::BufWriter::with_capacity(1 << 20, file);
        write_snapshot_with(snapshot, &mut out, options)?;
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()?;
        let len = file.metadata()?.len();
        std::fs::rename(&partial, path)?;
        Ok(len)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    result.map_err(wrap)
}

/// CPython's `_FRAME_SIZE_TARGET` (bytes): a frame is closed at the first
/// opcode boundary past it.
const FRAME_SIZE_TARGET: usize = 64 * 1024;
/// CPython's `_BATCHSIZE`: items per `MARK … APPENDS/SETITEMS`.
const BATCH: usize = 1000;

/// One value of a dict or list being written.
enum Item<'a> {
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(&'a str),
    Frames(&'a Frames),
    PoolId((i64, i64)),
    Settings(&'a AllocatorSettings),
    Divisions(&'a [(u64, u64)]),
    Segments(&'a [Segment]),
    Blocks(&'a [Block]),
    Traces(&'a [Vec<TraceEntry>]),
    Trace(&'a [TraceEntry]),
    Annotations(&'a [Annotation]),
    /// A plain value kept from a file as it was.
    Value(&'a Value),
}

struct Pickler<W: Write> {
    out: W,
    /// The current frame's bytes.
    frame: Vec<u8>,
    /// Index the next MEMOIZE stores at.
    next_memo: u64,
    strings: HashMap<Arc<str>, u64>,
    /// Frames lists by `Arc` address (valid: the snapshot outlives us).
    frame_lists: HashMap<usize, u64>,
    /// Frame dicts by content: equal frames are one object, as PyTorch's
    /// frame cache makes them.
    frame_dicts: HashMap<Frame, u64>,
    options: WriteOptions,
}

impl<W: Write> Pickler<W> {
    fn new(out: W, options: WriteOptions) -> Self {
        Pickler {
            out,
            frame: Vec::with_capacity(FRAME_SIZE_TARGET + 4096),
            next_memo: 0,
            strings: HashMap::new(),
            frame_lists: HashMap::new(),
            frame_dicts: HashMap::new(),
            options,
        }
    }

    fn start(&mut self) -> io::Result<()> {
        // PROTO goes before the first frame, as CPython writes it.
        self.out.write_all(&[op::PROTO, 4])
    }

    fn finish(mut self) -> io::Result<()> {
        self.frame.push(op::STOP);
        self.commit_frame(true)?;
        self.out.flush()
    }

    /// Closes the frame when it is big enough (or `force`).
    fn commit_frame(&mut self, force: bool) -> io::Result<()> {
        if self.frame.is_empty() || (!force && self.frame.len() < FRAME_SIZE_TARGET) {
            return Ok(());
        }
        let mut header = [0u8; 9];
        header[0] = op::FRAME;
        header[1..].copy_from_slice(&(self.frame.len() as u64).to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(&self.frame)?;
        self.frame.clear();
        Ok(())
    }

    // ---- scalars ----------------------------------------------------------

    fn int(&mut self, value: i128) {
        let f = &mut self.frame;
        if (0..256).contains(&value) {
            f.extend_from_slice(&[op::BININT1, value as u8]);
        } else if (0..65536).contains(&value) {
            f.push(op::BININT2);
            f.extend_from_slice(&(value as u16).to_le_bytes());
        } else if let Ok(small) = i32::try_from(value) {
            f.push(op::BININT);
            f.extend_from_slice(&small.to_le_bytes());
        } else {
            // CPython's encode_long: the shortest little-endian two's
            // complement (one byte more than the bit length needs).
            let bits = if value < 0 {
                128 - (!value).leading_zeros()
            } else {
                128 - value.leading_zeros()
            };
            let len = (bits / 8 + 1) as usize;
            let bytes = value.to_le_bytes();
            f.extend_from_slice(&[op::LONG1, len as u8]);
            f.extend_from_slice(&bytes[..len.min(16)]);
        }
    }

    fn float(&mut self, value: f64) {
        self.frame.push(op::BINFLOAT);
        self.frame.extend_from_slice(&value.to_be_bytes());
    }

    fn bool(&mut self, value: bool) {
        self.frame
            .push(if value { op::NEWTRUE } else { op::NEWFALSE });
    }

    fn get(&mut self, index: u64) {
        if let Ok(small) = u8::try_from(index) {
            self.frame.extend_from_slice(&[op::BINGET, small]);
        } else {
            self.frame.push(op::LONG_BINGET);
            // `memoize` refuses indices past u32::MAX.
            self.frame.extend_from_slice(&(index as u32).to_le_bytes());
        }
    }

    /// MEMOIZE the object just written; returns its memo index.
    fn memoize(&mut self) -> io::Result<u64> {
        let index = self.next_memo;
        if index > u64::from(u32::MAX) {
            return Err(io::Error::other(
                "more than 2^32 objects: the pickle memo cannot address them",
            ));
        }
        self.frame.push(op::MEMOIZE);
        self.next_memo += 1;
        Ok(index)
    }

    fn str(&mut self, text: &str) -> io::Result<()> {
        if let Some(&index) = self.strings.get(text) {
            self.get(index);
            return Ok(());
        }
        let len = text.len();
        if let Ok(short) = u8::try_from(len) {
            self.frame.extend_from_slice(&[op::SHORT_BINUNICODE, short]);
        } else if let Ok(medium) = u32::try_from(len) {
            self.frame.push(op::BINUNICODE);
            self.frame.extend_from_slice(&medium.to_le_bytes());
        } else {
            self.frame.push(op::BINUNICODE8);
            self.frame.extend_from_slice(&(len as u64).to_le_bytes());
        }
        self.frame.extend_from_slice(text.as_bytes());
        let index = self.memoize()?;
        self.strings.insert(Arc::from(text), index);
        self.commit_frame(false)
    }

    // ---- containers -------------------------------------------------------

    /// A dict from `(key, value)` pairs, batched like CPython.
    fn dict(&mut self, pairs: &[(&str, Item<'_>)]) -> io::Result<()> {
        self.dict_with(pairs, |p, key| p.str(key))
    }

    /// The dict opcodes for `pairs`, each key written by `key` and each
    /// value as an item: the one batching loop behind [`Self::dict`] and
    /// [`Self::dict_of`] (string keys stay allocation-free on the hot path).
    fn dict_with<K>(
        &mut self,
        pairs: &[(K, Item<'_>)],
        mut key: impl FnMut(&mut Self, &K) -> io::Result<()>,
    ) -> io::Result<()> {
        self.frame.push(op::EMPTY_DICT);
        self.memoize()?;
        for batch in pairs.chunks(BATCH) {
            let single = batch.len() == 1;
            if !single {
                self.frame.push(op::MARK);
            }
            for (k, value) in batch {
                key(self, k)?;
                self.item(value)?;
            }
            self.frame
                .push(if single { op::SETITEM } else { op::SETITEMS });
        }
        self.commit_frame(false)
    }

    /// A list of `len` items written by `each(self, index)`, batched.
    fn list(
        &mut self,
        len: usize,
        mut each: impl FnMut(&mut Self, usize) -> io::Result<()>,
    ) -> io::Result<u64> {
        self.frame.push(op::EMPTY_LIST);
        let index = self.memoize()?;
        let mut start = 0;
        while start < len {
            let end = (start + BATCH).min(len);
            let single = end - start == 1;
            if !single {
                self.frame.push(op::MARK);
            }
            for i in start..end {
                each(self, i)?;
            }
            self.frame
                .push(if single { op::APPEND } else { op::APPENDS });
            self.commit_frame(false)?;
            start = end;
        }
        Ok(index)
    }

    fn item(&mut self, item: &Item<'_>) -> io::Result<()> {
        match item {
            Item::Int(i) => self.int(*i),
            Item::Float(f) => self.float(*f),
            Item::Bool(b) => self.bool(*b),
            Item::Str(s) => self.str(s)?,
            Item::Frames(frames) => self.frames(frames)?,
            Item::PoolId((a, b)) => {
                self.int((*a).into());
                self.int((*b).into());
                self.frame.push(op::TUPLE2);
                self.memoize()?;
            }
            Item::Settings(settings) => self.settings(settings)?,
            Item::Value(value) => self.value(value)?,
            Item::Divisions(divisions) => {
                let labels: Vec<String> = divisions.iter().map(|(m, _)| m.to_string()).collect();
                let pairs: Vec<(&str, Item<'_>)> = labels
                    .iter()
                    .zip(divisions.iter())
                    .map(|(label, (_, d))| (label.as_str(), Item::Int((*d).into())))
                    .collect();
                self.dict(&pairs)?;
            }
            Item::Segments(segments) => self.segments(segments)?,
            Item::Blocks(blocks) => {
                self.list(blocks.len(), |p, i| match blocks.get(i) {
                    Some(block) => p.block(block),
                    None => Ok(()),
                })?;
            }
            Item::Traces(traces) => {
                self.list(traces.len(), |p, i| match traces.get(i) {
                    Some(trace) => p.item(&Item::Trace(trace)),
                    None => Ok(()),
                })?;
            }
            Item::Trace(entries) => {
                self.list(entries.len(), |p, i| match entries.get(i) {
                    Some(entry) => p.trace_entry(entry),
                    None => Ok(()),
                })?;
            }
            Item::Annotations(annotations) => {
                self.list(annotations.len(), |p, i| match annotations.get(i) {
                    Some(a) => p.dict(&[
                        ("stage", Item::Str(&a.stage)),
                        ("name", Item::Str(&a.name)),
                        ("device", Item::Int(a.device.into())),
                        ("time_us", Item::Int(a.time_us.into())),
                    ]),
                    None => Ok(()),
                })?;
            }
        }
        Ok(())
    }

    fn frames(&mut self, frames: &Frames) -> io::Result<()> {
        let identity = Arc::as_ptr(frames).cast::<u8>() as usize;
        if !self.options.fresh_frame_lists
            && let Some(&index) = self.frame_lists.get(&identity)
        {
            self.get(index);
            return Ok(());
        }
        let index = self.list(frames.len(), |p, i| match frames.get(i) {
            Some(frame) => p.frame_dict(frame),
            None => Ok(()),
        })?;
        if !self.options.fresh_frame_lists {
            self.frame_lists.insert(identity, index);
        }
        Ok(())
    }

    fn frame_dict(&mut self, frame: &Frame) -> io::Result<()> {
        if let Some(&index) = self.frame_dicts.get(frame) {
            self.get(index);
            return Ok(());
        }
        let index = self.next_memo;
        // PyTorch's key order: name, filename, line.
        self.dict(&[
            ("name", Item::Str(&frame.name)),
            ("filename", Item::Str(&frame.filename)),
            ("line", Item::Int(frame.line.into())),
        ])?;
        self.frame_dicts.insert(frame.clone(), index);
        Ok(())
    }

    // ---- the snapshot -----------------------------------------------------

    fn snapshot_dict(&mut self, s: &Snapshot) -> io::Result<()> {
        let mut pairs = vec![
            ("segments", Item::Segments(&s.segments)),
            ("device_traces", Item::Traces(&s.device_traces)),
        ];
        if let Some(settings) = &s.allocator_settings {
            pairs.push(("allocator_settings", Item::Settings(settings)));
        }
        // Current PyTorch (the one that writes allocator_settings) always
        // writes the list, also empty; older files had neither.
        if s.allocator_settings.is_some() || !s.external_annotations.is_empty() {
            pairs.push((
                "external_annotations",
                Item::Annotations(&s.external_annotations),
            ));
        }
        self.dict(&pairs)
    }

    fn segments(&mut self, segments: &[Segment]) -> io::Result<()> {
        self.list(segments.len(), |p, i| match segments.get(i) {
            Some(segment) => p.segment(segment),
            None => Ok(()),
        })?;
        Ok(())
    }

    fn segment(&mut self, s: &Segment) -> io::Result<()> {
        let mut pairs = vec![
            ("device", Item::Int(s.device.into())),
            ("address", Item::Int(s.address.into())),
            ("total_size", Item::Int(s.total_size.into())),
        ];
        // Absent only in hand-made files: then absent here too, so that a
        // file read and written back reads back equal.
        for (key, size) in [
            ("allocated_size", s.allocated_size),
            ("active_size", s.active_size),
            ("requested_size", s.requested_size),
        ] {
            if let Some(size) = size {
                pairs.push((key, Item::Int(size.into())));
            }
        }
        pairs.extend([
            ("stream", Item::Int(s.stream.into())),
            ("segment_type", Item::Str(s.segment_type.as_str())),
            ("segment_pool_id", Item::PoolId(s.segment_pool_id)),
            ("is_expandable", Item::Bool(s.is_expandable)),
            ("frames", Item::Frames(&s.frames)),
            ("blocks", Item::Blocks(&s.blocks)),
        ]);
        self.dict(&pairs)
    }

    fn block(&mut self, b: &Block) -> io::Result<()> {
        self.dict(&[
            ("address", Item::Int(b.address.into())),
            ("size", Item::Int(b.size.into())),
            ("requested_size", Item::Int(b.requested_size.into())),
            ("state", Item::Str(b.state.as_str())),
            ("frames", Item::Frames(&b.frames)),
        ])
    }

    fn trace_entry(&mut self, e: &TraceEntry) -> io::Result<()> {
        // PyTorch stores an OOM's free bytes under `device_free`.
        let addr_key = if e.action == TraceAction::Oom {
            "device_free"
        } else {
            "addr"
        };
        let mut pairs = vec![
            ("action", Item::Str(e.action.as_str())),
            (addr_key, Item::Int(e.addr.into())),
            ("size", Item::Int(e.size.into())),
            ("stream", Item::Int(e.stream.into())),
        ];
        if let Some(time) = e.time_us() {
            pairs.push(("time_us", Item::Int(time.into())));
        }
        pairs.push(("frames", Item::Frames(&e.frames)));
        if let Some(context) = e.compile_context() {
            pairs.push(("compile_context", Item::Str(context)));
        }
        if let Some(metadata) = e.user_metadata() {
            pairs.push(("user_metadata", Item::Str(metadata)));
        }
        self.dict(&pairs)
    }

    fn settings(&mut self, s: &AllocatorSettings) -> io::Result<()> {
        let known = |key: &str| -> Option<Item<'_>> {
            Some(match key {
                "PYTORCH_CUDA_ALLOC_CONF" => Item::Str(&s.conf),
                "max_split_size" => Item::Int(s.max_split_size.into()),
                "garbage_collection_threshold" => Item::Float(s.garbage_collection_threshold),
                "expandable_segments" => Item::Bool(s.expandable_segments),
                "pinned_num_register_threads" => Item::Int(s.pinned_num_register_threads?.into()),
                "release_lock_on_cudamalloc" => Item::Bool(s.release_lock_on_cudamalloc),
                "pinned_use_cuda_host_register" => Item::Bool(s.pinned_use_cuda_host_register?),
                "roundup_power2_divisions" => Item::Divisions(&s.roundup_power2_divisions),
                "graph_capture_record_stream_reuse" => {
                    Item::Bool(s.graph_capture_record_stream_reuse?)
                }
                _ => return None,
            })
        };
        if s.file_order.is_empty() {
            // Settings made here: PyTorch's current order (torch 2.5+), the
            // optional entries only where they are set.
            let pairs: Vec<(Item<'_>, Item<'_>)> = KNOWN_SETTINGS_KEYS
                .iter()
                .filter_map(|key| Some((Item::Str(key), known(key)?)))
                .collect();
            return self.dict_of(&pairs);
        }
        // A file's settings: its keys in its order, unknown ones as they were.
        let pairs: Vec<(Item<'_>, Item<'_>)> = s
            .file_order
            .iter()
            .filter_map(|key| match key {
                SettingsKey::Known(name) => Some((Item::Str(name), known(name)?)),
                SettingsKey::Other(key, value) => Some((Item::Value(key), Item::Value(value))),
            })
            .collect();
        self.dict_of(&pairs)
    }

    /// A dict whose keys are items too (a file's unknown keys need not be
    /// strings), batched like [`Self::dict`].
    fn dict_of(&mut self, pairs: &[(Item<'_>, Item<'_>)]) -> io::Result<()> {
        self.dict_with(pairs, |p, key| p.item(key))
    }

    /// Any plain value read from a file (nesting is bounded by the reader's
    /// depth limit, so the recursion is too).
    fn value(&mut self, value: &Value) -> io::Result<()> {
        match value {
            Value::None => self.frame.push(op::NONE),
            Value::Bool(b) => self.bool(*b),
            Value::Int(i) => self.int(*i),
            Value::Float(f) => self.float(*f),
            Value::Str(s) => self.str(s)?,
            Value::Bytes(bytes) => {
                let len = bytes.len();
                if let Ok(short) = u8::try_from(len) {
                    self.frame.extend_from_slice(&[op::SHORT_BINBYTES, short]);
                } else if let Ok(medium) = u32::try_from(len) {
                    self.frame.push(op::BINBYTES);
                    self.frame.extend_from_slice(&medium.to_le_bytes());
                } else {
                    self.frame.push(op::BINBYTES8);
                    self.frame.extend_from_slice(&(len as u64).to_le_bytes());
                }
                self.frame.extend_from_slice(bytes);
                self.memoize()?;
            }
            Value::List(items) => {
                self.list(items.len(), |p, i| match items.get(i) {
                    Some(item) => p.value(item),
                    None => Ok(()),
                })?;
            }
            Value::Tuple(items) => {
                if items.is_empty() {
                    self.frame.push(op::EMPTY_TUPLE);
                } else {
                    self.frame.push(op::MARK);
                    for item in items.iter() {
                        self.value(item)?;
                    }
                    self.frame.push(op::TUPLE);
                    self.memoize()?;
                }
            }
            Value::Dict(pairs) => {
                let pairs: Vec<(Item<'_>, Item<'_>)> = pairs
                    .iter()
                    .map(|(k, v)| (Item::Value(k), Item::Value(v)))
                    .collect();
                self.dict_of(&pairs)?;
            }
        }
        self.commit_frame(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::pickle::{Limits, Value, parse};

    fn roundtrip_int(i: i128) -> Value {
        let mut p = Pickler::new(Vec::new(), WriteOptions::default());
        p.int(i);
        p.frame.push(op::STOP);
        parse(&p.frame, &Limits::default()).unwrap()
    }

    #[test]
    fn ints_take_the_shortest_opcode_and_read_back() {
        for i in [
            0,
            255,
            256,
            65535,
            65536,
            -1,
            i32::MIN.into(),
            i32::MAX.into(),
            1 << 31,
            17_242_783_744,
            u64::MAX.into(),
            i64::MIN.into(),
            -(1 << 40),
        ] {
            assert_eq!(roundtrip_int(i), Value::Int(i), "{i}");
        }
        let mut p = Pickler::new(Vec::new(), WriteOptions::default());
        p.int(17_242_783_744);
        // CPython: LONG1 with 5 bytes for a 34-bit address.
        assert_eq!(p.frame[..2], [op::LONG1, 5]);
    }

    #[test]
    fn repeated_strings_are_memo_fetches() {
        let mut p = Pickler::new(Vec::new(), WriteOptions::default());
        p.str("address").unwrap();
        let first = p.frame.len();
        p.str("address").unwrap();
        assert_eq!(&p.frame[first..], &[op::BINGET, 0]);
    }

    fn settings_keys(bytes: &[u8]) -> Vec<String> {
        let root = parse(bytes, &Limits::default()).unwrap();
        let Some(Value::Dict(pairs)) = root.get("allocator_settings") else {
            panic!("no allocator_settings dict");
        };
        pairs.iter().map(|(k, _)| format!("{k:?}")).collect()
    }

    #[test]
    fn a_snapshot_file_is_written_private_even_over_a_stale_partial() {
        use std::os::unix::fs::PermissionsExt as _;
        let model = crate::snapshot::capture::recording_model("", 1 << 30).unwrap();
        let snapshot = crate::snapshot::capture::snapshot_of(&model, 0);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.pickle");
        write_snapshot_file(&snapshot, &path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        // A write that died left a world-readable `.partial`: the next one
        // does not reuse it (and its mode).
        let partial = dir.path().join("b.pickle.partial");
        std::fs::write(&partial, b"half").unwrap();
        std::fs::set_permissions(&partial, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = dir.path().join("b.pickle");
        write_snapshot_file(&snapshot, &path).unwrap();
        assert_eq!(mode(&path), 0o600);
        assert!(!partial.exists());
    }

    #[test]
    fn unknown_settings_keys_are_written_back_where_the_file_had_them() {
        let model = crate::snapshot::capture::recording_model("", 1 << 30).unwrap();
        let mut snapshot = crate::snapshot::capture::snapshot_of(&model, 0);
        let settings = snapshot.allocator_settings.as_mut().unwrap();
        let future = Value::Dict(vec![(Value::Str("depth".into()), Value::Int(2))].into());
        settings.file_order = vec![
            SettingsKey::Known("expandable_segments"),
            SettingsKey::Other(Value::Str("a_newer_knob".into()), future.clone()),
            SettingsKey::Known("PYTORCH_CUDA_ALLOC_CONF"),
        ];
        let written = snapshot_to_bytes(&snapshot);
        assert_eq!(
            settings_keys(&written),
            [
                r#"Str("expandable_segments")"#,
                r#"Str("a_newer_knob")"#,
                r#"Str("PYTORCH_CUDA_ALLOC_CONF")"#
            ]
        );
        let read = crate::snapshot::read_snapshot(&written).unwrap();
        let read_settings = read.allocator_settings.unwrap();
        assert_eq!(
            read_settings.file_order.get(1),
            Some(&SettingsKey::Other(
                Value::Str("a_newer_knob".into()),
                future
            ))
        );
        // Written again, the copy has the same bytes: the order is kept.
        let mut again = snapshot.clone();
        again.allocator_settings = Some(read_settings);
        assert_eq!(snapshot_to_bytes(&again), written);
    }

    #[test]
    fn settings_made_here_are_written_in_pytorchs_order() {
        let model = crate::snapshot::capture::recording_model("", 1 << 30).unwrap();
        let snapshot = crate::snapshot::capture::snapshot_of(&model, 0);
        let keys = settings_keys(&snapshot_to_bytes(&snapshot));
        let expected: Vec<String> = KNOWN_SETTINGS_KEYS
            .iter()
            .filter(|k| **k != "graph_capture_record_stream_reuse")
            .map(|k| format!("Str({k:?})"))
            .collect();
        assert_eq!(keys, expected);
    }
}
