//! A restricted, bounded unpickler for plain-data pickles.
//!
//! PyTorch memory snapshots are pickles of nothing but dicts, lists, tuples,
//! ints, floats, strings and bools, heavily memoised: one traceback `frames`
//! list is referenced from many blocks and trace entries. This reader
//!
//! * understands the data opcodes of protocols 0–5 and refuses every opcode
//!   that would import or call anything (`GLOBAL`, `REDUCE`, …), so parsing
//!   a hostile file can never run code;
//! * checks every length prefix against the remaining input before it
//!   allocates, and bounds nesting depth and the number of items;
//! * keeps shared references shared: an object referenced twice through the
//!   memo becomes one [`Arc`] in the result, so the typed layer can intern it
//!   by pointer (see [`Value::identity`]).
//!
//! CPython's semantics need mutable containers (a list is memoised while
//! empty and filled later by `APPENDS`; any memoised list can be appended to
//! again), so parsing builds an arena of mutable nodes addressed by index and
//! a final, iterative "freeze" turns the nodes reachable from the result into
//! the immutable [`Value`] tree, caching each node's value so that shared
//! nodes stay shared. The freeze also detects cycles and measures depth.

mod document;
mod error;
mod opcodes;
mod parser;
#[cfg(test)]
mod tests;
mod trace;
mod value;

use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use document::Document;
pub use error::PickleError;
pub(super) use opcodes::op;
pub(crate) use trace::{Field, FlatEntry, ListInPlace, ListItem};
pub use value::Value;

use error::quoted_char_suffix;
use opcodes::opcode_name;
use parser::{Item, Node, Parser, Scalars};

/// Resource bounds for [`parse`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest allowed container nesting (a list of ints has depth 1).
    ///
    /// Dropping a [`Value`] recurses once per level, so keep this moderate
    /// (the default, 64, is far above the 4 levels a snapshot uses).
    pub max_depth: usize,
    /// Largest accepted input, in bytes.
    pub max_input_bytes: u64,
    /// Most values the pickle may push (every opcode that produces a value,
    /// including memo fetches, counts one). Bounds memory for inputs made of
    /// cheap opcodes that each create an object.
    pub max_items: u64,
    /// Memory the read may take per byte of input (the parsed values, then
    /// the snapshot built from them), so that a small file cannot make the
    /// reader, the replay or the viewer hold far more than its size.
    pub memory_per_input_byte: u64,
    /// Memory any input may take, however small.
    pub min_memory_bytes: u64,
}

impl Limits {
    /// The bytes of memory reading `input_len` bytes may take.
    pub fn memory_budget(&self, input_len: u64) -> u64 {
        input_len
            .saturating_mul(self.memory_per_input_byte)
            .max(self.min_memory_bytes)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: 64,
            max_input_bytes: 8 << 30,
            max_items: 500_000_000,
            // The charges count twice what the values hold (vector
            // growth); real snapshots are charged 5-16 bytes a byte.
            memory_per_input_byte: 24,
            min_memory_bytes: 64 << 20,
        }
    }
}

/// Parses a pickle made of plain data into a [`Value`].
///
/// Data after the `STOP` opcode is ignored, as Python does.
pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Value, PickleError> {
    parse_inner(bytes, limits, None)
}

/// How often [`parse_with_progress`] publishes its position (bytes).
pub const PROGRESS_STEP: usize = 64 * 1024;

/// [`parse`], storing into `progress` the bytes parsed so far: every
/// [`PROGRESS_STEP`] bytes (a relaxed store; another thread may poll it),
/// and `bytes.len()` once the opcodes are read.
pub fn parse_with_progress(
    bytes: &[u8],
    limits: &Limits,
    progress: &AtomicU64,
) -> Result<Value, PickleError> {
    parse_inner(bytes, limits, Some(progress))
}

fn parse_inner(
    bytes: &[u8],
    limits: &Limits,
    progress: Option<&AtomicU64>,
) -> Result<Value, PickleError> {
    parse_document(bytes, limits, progress)?.freeze_root()
}

/// Why an input whose values would take more than `budget` bytes is refused.
pub(crate) fn memory_exceeded_detail(budget: u64, input_len: usize) -> String {
    format!(
        "reading it would take more than {} MiB of memory, the limit for a file of {input_len} \
         bytes (a real snapshot takes a few times its size)",
        budget >> 20,
    )
}

/// The checks before any opcode runs: size, non-pickle formats, frames.
fn check_input(bytes: &[u8], limits: &Limits) -> Result<(), PickleError> {
    if bytes.len() as u64 > limits.max_input_bytes {
        return Err(PickleError::LimitExceeded {
            detail: format!(
                "input is {} bytes, the limit is {}",
                bytes.len(),
                limits.max_input_bytes
            ),
        });
    }
    check_looks_like_pickle(bytes)?;
    check_frame_chain(bytes)
}

/// The parsed arena of `bytes`, not yet a value tree.
pub(crate) fn parse_document(
    bytes: &[u8],
    limits: &Limits,
    progress: Option<&AtomicU64>,
) -> Result<Document, PickleError> {
    check_input(bytes, limits)?;
    let parsed = run_parser(bytes, limits, progress)?;
    Ok(parsed_document(
        parsed,
        limits,
        bytes.len(),
        bytes.len() as u64,
    ))
}

/// The document of a finished parse (arena, scalars, root, memory used) of
/// an `input_len`-byte input whose memory budget is that of `budget_len`
/// bytes.
fn parsed_document(
    (arena, scalars, root, used): (Vec<Node>, Scalars, Item, u64),
    limits: &Limits,
    input_len: usize,
    budget_len: u64,
) -> Document {
    let mut document = Document::new(arena, scalars, root, limits.max_depth);
    document.memory_used = used;
    document.memory_budget = limits.memory_budget(budget_len);
    document.input_len = input_len;
    document
}

/// [`parse_document`] of bytes that are dropped once the opcodes are read.
pub(crate) fn parse_document_owned(
    bytes: Vec<u8>,
    limits: &Limits,
    progress: Option<&AtomicU64>,
) -> Result<Document, PickleError> {
    check_input(&bytes, limits)?;
    let parsed = run_parser(&bytes, limits, progress)?;
    let input_len = bytes.len();
    drop(bytes);
    Ok(parsed_document(parsed, limits, input_len, input_len as u64))
}

/// Files at least this long are parsed in pieces by [`parse_file_in_pieces`]
/// (bytes): below it the whole file in memory costs little.
pub(crate) const PIECES_MIN_BYTES: u64 = 64 << 20;

/// The bytes of a file [`parse_file_in_pieces`] holds at once, about: whole
/// 64 KiB frames up to this, a few pieces read ahead. Small enough that a
/// piece is still in the caches when the parser reads what the kernel has
/// just copied there: 16 MiB pieces read the 1 GB file in 3.00–3.12 s, 1
/// MiB pieces in 2.95–2.99 s (`parse_rss`, interleaved, when one thread
/// both read and parsed); with the reading thread 256 KiB, 1 MiB and 4 MiB
/// pieces parse the 198 MB file alike.
const PIECE_BYTES: usize = 1 << 20;

/// Parses the pickle file `file` of `file_len` bytes a piece at a time,
/// whole FRAMEs of about [`PIECE_BYTES`] each, so that the file is never in
/// memory at once: a large snapshot's peak is then its parsed values, not
/// those and its bytes. CPython's pickler writes protocol 4 and 5 in frames
/// of whole opcodes, so the pieces parse exactly as the whole input does.
///
/// `Ok(None)` when a parse of the whole file in memory must answer instead:
/// the file is not made of frames (protocol 3 or older, hand-made), or
/// something went wrong (an opcode across a frame's end, a truncated frame,
/// any error, a file that changes while read); the whole-file parse then
/// reports it exactly as it always has (a damaged file is read twice).
pub(crate) fn parse_file_in_pieces<R: Read + Seek + Send>(
    file: &mut R,
    file_len: u64,
    limits: &Limits,
    progress: Option<&AtomicU64>,
) -> std::io::Result<Option<Document>> {
    parse_file_in_pieces_of(file, file_len, limits, progress, PIECE_BYTES)
}

/// [`parse_file_in_pieces`] with pieces of about `piece_bytes`.
fn parse_file_in_pieces_of<R: Read + Seek + Send>(
    file: &mut R,
    file_len: u64,
    limits: &Limits,
    progress: Option<&AtomicU64>,
    piece_bytes: usize,
) -> std::io::Result<Option<Document>> {
    let Ok(input_len) = usize::try_from(file_len) else {
        return Ok(None);
    };
    if file_len > limits.max_input_bytes {
        return Ok(None);
    }
    let mut outcome = parse_pieces(file, input_len, limits, progress, piece_bytes, true)?;
    if let PiecesOutcome::InternBroken = outcome {
        outcome = parse_pieces(file, input_len, limits, progress, piece_bytes, false)?;
    }
    Ok(match outcome {
        PiecesOutcome::WholeFile | PiecesOutcome::InternBroken => None,
        PiecesOutcome::Done {
            arena,
            scalars,
            root,
            used,
        } => {
            if let Some(progress) = progress {
                progress.store(file_len, Ordering::Relaxed);
            }
            let parsed = (arena, scalars, root, used);
            Some(parsed_document(parsed, limits, input_len, file_len))
        }
    })
}

/// How one attempt of [`parse_file_in_pieces`] ended.
enum PiecesOutcome {
    Done {
        arena: Vec<Node>,
        scalars: Scalars,
        root: Item,
        used: u64,
    },
    /// Interning met a mutated list: parse again without.
    InternBroken,
    WholeFile,
}

/// Appends up to `len` more bytes of `file` to `buf`; `false` when the file
/// ended first.
fn read_more<R: Read>(file: &mut R, buf: &mut Vec<u8>, len: usize) -> std::io::Result<bool> {
    let before = buf.len();
    buf.try_reserve(len).map_err(std::io::Error::other)?;
    file.by_ref().take(len as u64).read_to_end(buf)?;
    Ok(buf.len() - before == len)
}

/// The end of the frame whose FRAME opcode is at `pos`, if all of it is in
/// `buf`.
fn complete_frame_at(buf: &[u8], pos: usize) -> Option<usize> {
    if buf.get(pos) != Some(&op::FRAME) {
        return None;
    }
    let header_end = pos.checked_add(9)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(buf.get(pos + 1..header_end)?);
    let end = header_end.checked_add(usize::try_from(u64::from_le_bytes(len)).ok()?)?;
    (end <= buf.len()).then_some(end)
}

/// What the reading thread of [`parse_pieces`] hands the parser.
enum Piece {
    /// Whole frames from `base` in the file; `last` when they end it.
    Frames {
        bytes: Vec<u8>,
        base: usize,
        last: bool,
    },
    /// The file is not read in pieces (see [`parse_file_in_pieces`]).
    WholeFile,
    Failed(std::io::Error),
}

/// Pieces read ahead of the parser, at most: the parser never waits for
/// the disk while the next piece is there, and the bytes held stay a few
/// pieces.
const PIECES_AHEAD: usize = 2;

/// Reads `file` from its start and sends it on `pieces` as runs of whole
/// frames of about `piece_bytes` (whatever is left at the end of the file
/// in the last). Buffers the parser is done with come back on `spare`, so
/// the pieces reuse memory already faulted in. Stops when the parser stops
/// listening.
fn read_pieces<R: Read + Seek>(
    file: &mut R,
    input_len: usize,
    piece_bytes: usize,
    pieces: &std::sync::mpsc::SyncSender<Piece>,
    spare: &std::sync::mpsc::Receiver<Vec<u8>>,
) {
    let failed = |e: std::io::Error| {
        let _ = pieces.send(Piece::Failed(e));
    };
    let whole_file = || {
        let _ = pieces.send(Piece::WholeFile);
    };
    if let Err(e) = file.seek(SeekFrom::Start(0)) {
        return failed(e);
    }
    let mut buf = Vec::new();
    // At least PROTO and the first FRAME's opcode.
    let first = piece_bytes.max(3).min(input_len);
    match read_more(file, &mut buf, first) {
        Ok(true) => {}
        Ok(false) => return whole_file(),
        Err(e) => return failed(e),
    }
    if buf.first() != Some(&op::PROTO)
        || !matches!(buf.get(1), Some(4 | 5))
        || buf.get(2) != Some(&op::FRAME)
    {
        return whole_file();
    }
    // Where the next piece starts: `base` in the file, `scan_from` in `buf`
    // (after PROTO in the first piece).
    let mut base = 0usize;
    let mut scan_from = 2usize;
    loop {
        let read_all = base + buf.len() == input_len;
        let mut end = scan_from;
        while let Some(frame_end) = complete_frame_at(&buf, end) {
            end = frame_end;
        }
        let (piece_len, last) = if read_all {
            (buf.len(), true)
        } else if end > scan_from {
            (end, false)
        } else {
            // A frame longer than what is read, or no frame here (a large
            // opcode CPython writes between frames, or unframed data): read
            // more. Every turn reads or sends, so the loop ends.
            let wanted = piece_bytes.min(input_len - base - buf.len());
            match read_more(file, &mut buf, wanted) {
                Ok(true) => continue,
                Ok(false) => return whole_file(),
                Err(e) => return failed(e),
            }
        };
        // The start of a frame not yet whole moves to the next buffer.
        let mut next = spare.try_recv().unwrap_or_default();
        next.clear();
        next.extend_from_slice(buf.get(piece_len..).unwrap_or_default());
        buf.truncate(piece_len);
        let piece = Piece::Frames {
            bytes: buf,
            base,
            last,
        };
        if pieces.send(piece).is_err() || last {
            return;
        }
        buf = next;
        base += piece_len;
        scan_from = 0;
        let wanted = piece_bytes
            .saturating_sub(buf.len())
            .min(input_len - base - buf.len());
        match read_more(file, &mut buf, wanted) {
            Ok(true) => {}
            Ok(false) => return whole_file(),
            Err(e) => return failed(e),
        }
    }
}

/// One attempt of [`parse_file_in_pieces`]: a thread reads the file ahead
/// ([`read_pieces`]) while this one parses, so the copy from the page cache
/// (a tenth of a large parse) is off the parser's path.
fn parse_pieces<R: Read + Seek + Send>(
    file: &mut R,
    input_len: usize,
    limits: &Limits,
    progress: Option<&AtomicU64>,
    piece_bytes: usize,
    intern: bool,
) -> std::io::Result<PiecesOutcome> {
    let (piece_sender, piece_receiver) = std::sync::mpsc::sync_channel(PIECES_AHEAD);
    let (spare_sender, spare_receiver) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("snapshot-read".into())
            .spawn_scoped(scope, move || {
                read_pieces(file, input_len, piece_bytes, &piece_sender, &spare_receiver)
            });
        if reader.is_err() {
            // No thread to be had (a process at its limit): the whole-file
            // parse reads on this one.
            return Ok(PiecesOutcome::WholeFile);
        }
        let mut state = Parser::new(&[], limits);
        state.set_input_len(input_len);
        state.intern = intern;
        state.set_progress(progress);
        // Dropping the receiver on any return stops the reading thread.
        for piece in piece_receiver {
            let (bytes, base, last) = match piece {
                Piece::Frames { bytes, base, last } => (bytes, base, last),
                Piece::WholeFile => return Ok(PiecesOutcome::WholeFile),
                Piece::Failed(e) => return Err(e),
            };
            let mut parser = state.with_data(&bytes, base);
            parser.more_input = !last;
            let result = parser.run_piece();
            state = parser.with_data(&[], base + bytes.len());
            match result {
                Ok(Some(root)) => {
                    return Ok(PiecesOutcome::Done {
                        arena: state.arena,
                        scalars: state.scalars,
                        root,
                        used: state.memory_used,
                    });
                }
                Ok(None) => {}
                Err(_) if state.intern_broken => return Ok(PiecesOutcome::InternBroken),
                Err(_) => return Ok(PiecesOutcome::WholeFile),
            }
            let _ = spare_sender.send(bytes);
        }
        // The reader ended without the last piece (it cannot, short of a
        // panic): the whole-file parse answers.
        Ok(PiecesOutcome::WholeFile)
    })
}

/// Parses the beginning of a pickle whose top level is a dict, up to the
/// moment `key` is pushed as its next key: the top-level dict with the
/// pairs before the key, which are then complete. `None` when the key never
/// came (the whole pickle was parsed). `bytes` may be a prefix of a `file_len`-byte file: the
/// memory budget is the whole file's, and a prefix that ends before the
/// key is an error (truncated, or a missing STOP). FRAME headers are not
/// checked against the input's end: a prefix ends inside a frame.
pub(crate) fn parse_document_until_key(
    bytes: &[u8],
    file_len: u64,
    limits: &Limits,
    key: &'static str,
) -> Result<Option<Document>, PickleError> {
    if file_len > limits.max_input_bytes {
        return Err(PickleError::LimitExceeded {
            detail: format!(
                "input is {file_len} bytes, the limit is {}",
                limits.max_input_bytes
            ),
        });
    }
    check_looks_like_pickle(bytes)?;
    let budget = limits.memory_budget(file_len.max(bytes.len() as u64));
    let attempt = |intern: bool| {
        let mut parser = Parser::new(bytes, limits);
        parser.memory_budget = budget;
        parser.intern = intern;
        parser.stop_before_top_level_key(key);
        parser.input_is_prefix = true;
        let result = parser.run();
        let broken = parser.intern_broken;
        let (used, stopped) = (parser.memory_used, parser.stopped);
        (
            result.map(|root| (parser.arena, parser.scalars, root, used, stopped)),
            broken,
        )
    };
    let (result, broken) = attempt(true);
    let (arena, scalars, root, used, stopped) = if broken { attempt(false).0 } else { result }?;
    let mut document = Document::new(arena, scalars, root, limits.max_depth);
    document.memory_used = used;
    document.memory_budget = budget;
    document.input_len = usize::try_from(file_len)
        .unwrap_or(usize::MAX)
        .max(bytes.len());
    Ok(stopped.then_some(document))
}

/// Runs the opcodes with list interning, and again without it if the input
/// turns out to mutate a completed list (see [`Parser::intern`]).
fn run_parser(
    bytes: &[u8],
    limits: &Limits,
    progress: Option<&AtomicU64>,
) -> Result<(Vec<Node>, Scalars, Item, u64), PickleError> {
    let attempt = |intern: bool| {
        let mut parser = Parser::new(bytes, limits);
        parser.set_progress(progress);
        parser.intern = intern;
        let result = parser.run();
        let broken = parser.intern_broken;
        let used = parser.memory_used;
        (
            result.map(|root| (parser.arena, parser.scalars, root, used)),
            broken,
        )
    };
    let (result, broken) = attempt(true);
    let result = if broken { attempt(false).0 } else { result };
    let result = result.map_err(|e| text_instead_of(bytes, e));
    if result.is_ok()
        && let Some(progress) = progress
    {
        progress.store(bytes.len() as u64, Ordering::Relaxed);
    }
    result
}

/// Walks the chain of FRAME headers that protocol 4+ writers put right after
/// PROTO (each frame's payload is followed by the next FRAME opcode) before
/// anything is parsed. A truncated file is then refused in time proportional
/// to its number of 64 KiB frames, not its size, and the message names the
/// frame that runs past the end.
fn check_frame_chain(bytes: &[u8]) -> Result<(), PickleError> {
    if bytes.first() != Some(&op::PROTO) {
        return Ok(());
    }
    let mut pos = 2usize;
    while bytes.get(pos) == Some(&op::FRAME) {
        let header_end = pos.saturating_add(9);
        let Some(len_bytes) = bytes.get(pos + 1..header_end) else {
            return Err(PickleError::Truncated {
                opcode: "FRAME",
                offset: pos,
                end: bytes.len(),
                needed: (header_end - bytes.len()) as u64,
            });
        };
        let mut len = [0u8; 8];
        len.copy_from_slice(len_bytes);
        let frame_end = (header_end as u64).saturating_add(u64::from_le_bytes(len));
        if frame_end > bytes.len() as u64 {
            return Err(PickleError::Truncated {
                opcode: "FRAME",
                offset: pos,
                end: bytes.len(),
                needed: frame_end - bytes.len() as u64,
            });
        }
        pos = frame_end as usize;
    }
    Ok(())
}

/// [`check_frame_chain`]'s verdict on the first frame only, from `start`,
/// the input's first bytes, and `len`, its length in bytes: a file cut
/// inside its first frame is said from its first few bytes, in the words
/// of a whole read.
pub(crate) fn check_first_frame(start: &[u8], len: u64) -> Result<(), PickleError> {
    let Ok(len) = usize::try_from(len) else {
        return Ok(());
    };
    if start.first() != Some(&op::PROTO) || start.get(2) != Some(&op::FRAME) {
        return Ok(());
    }
    // Bytes 3..11: the frame's length, little-endian.
    let Some(length) = start.get(3..11) else {
        // Only where the input ends there: a short start of a longer one
        // says nothing.
        return match 11usize.checked_sub(len) {
            Some(needed) if needed > 0 && start.len() == len => Err(PickleError::Truncated {
                opcode: "FRAME",
                offset: 2,
                end: len,
                needed: needed as u64,
            }),
            _ => Ok(()),
        };
    };
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(length);
    let frame_end = 11u64.saturating_add(u64::from_le_bytes(bytes));
    if frame_end > len as u64 {
        return Err(PickleError::Truncated {
            opcode: "FRAME",
            offset: 2,
            end: len,
            needed: frame_end - len as u64,
        });
    }
    Ok(())
}

/// Recognises common non-pickle inputs up front, so that the user reads
/// "looks like a zip archive" rather than a refused `PERSID` opcode.
pub(crate) fn check_looks_like_pickle(bytes: &[u8]) -> Result<(), PickleError> {
    let Some(&first) = bytes.first() else {
        return Err(PickleError::Empty);
    };
    let not_a_pickle = |reason: String| Err(PickleError::NotAPickle { reason });
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        return not_a_pickle(
            "this is a zip archive (a torch.save checkpoint?), not a memory snapshot".into(),
        );
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return not_a_pickle("looks like gzip-compressed data; decompress it first".into());
    }
    let name = opcode_name(first);
    if name.is_some() && !CANNOT_START.contains(&first) {
        return Ok(());
    }
    if let Some(text) = text_refusal(bytes) {
        return Err(text);
    }
    let shown = quoted_char_suffix(first);
    match name {
        // A text file "hello" starts with 'h', BINGET: an opcode, but one
        // that needs a value or mark already read.
        Some(name) => not_a_pickle(format!(
            "first byte 0x{first:02x}{shown} is {name}, which no pickle starts with"
        )),
        None => not_a_pickle(format!(
            "first byte 0x{first:02x}{shown} is not a pickle opcode"
        )),
    }
}

/// Bytes at the start of an input looked at to tell text: the window the
/// refusal of text quotes from and the failure must fall in.
const TEXT_WINDOW: usize = 256;

/// The refusal of `bytes` as text (JSON, a Python traceback, any other
/// text) when its first [`TEXT_WINDOW`] bytes are printable UTF-8; `None`
/// for anything else, a pickle's `PROTO` header (0x80) included.
fn text_refusal(bytes: &[u8]) -> Option<PickleError> {
    let trimmed = bytes.trim_ascii_start();
    // JSON opens an object or an array of values; "[package]" (TOML, INI)
    // opens neither. Neither bracket is an opcode, so JSON is said from its
    // first byte, whatever follows.
    let json_value_follows = |rest: &[u8]| {
        rest.trim_ascii_start()
            .first()
            .is_none_or(|&b| b"\"{[]-0123456789tfn".contains(&b))
    };
    let json = trimmed.starts_with(b"{")
        || (trimmed.starts_with(b"[") && json_value_follows(&trimmed[1..]));
    if !json && !reads_as_text(bytes) {
        return None;
    }
    let window = &trimmed[..trimmed.len().min(TEXT_WINDOW)];
    let not_a_pickle = |reason: String| Some(PickleError::NotAPickle { reason });
    // What the file looks like comes first: it is what the user needs to
    // read on an 80-column line. A saved error is said as one: the user
    // meant to open the snapshot of it.
    if !json && let Some(what) = python_error_text(window) {
        return not_a_pickle(format!(
            "this is {what}, not a memory snapshot: save one from the failing process \
             with torch.cuda.memory._dump_snapshot(\"snapshot.pickle\")"
        ));
    }
    let hint = if json {
        "looks like JSON"
    } else {
        "looks like text"
    };
    // Text needs no opcode names: what it starts with says it all. Its
    // first 24 characters, "…" inside the quote where the line goes on: a
    // byte count there read as part of the file, and counted the line, not
    // the file.
    let start = String::from_utf8_lossy(&trimmed[..trimmed.len().min(64)]);
    let line = start.lines().next().unwrap_or_default();
    let shown: String = line.chars().take(24).collect();
    let more = if shown.len() < line.len() { "…" } else { "" };
    not_a_pickle(format!(
        "{hint}: it starts \"{}{more}\"; a memory snapshot is the binary pickle \
         torch.cuda.memory._dump_snapshot() writes",
        crate::quote::escape_controls(&shown)
    ))
}

/// Whether the first [`TEXT_WINDOW`] bytes of `bytes` (all of a shorter
/// input) are printable UTF-8: characters other than controls, and
/// whitespace (line breaks, tabs, form and line feeds). A character cut by the window's end counts as text.
fn reads_as_text(bytes: &[u8]) -> bool {
    let window = &bytes[..bytes.len().min(TEXT_WINDOW)];
    let text = match std::str::from_utf8(window) {
        Ok(text) => text,
        // Cut inside a character at the window's end (not at the input's).
        Err(e) if e.error_len().is_none() && window.len() < bytes.len() => {
            match std::str::from_utf8(&window[..e.valid_up_to()]) {
                Ok(text) => text,
                Err(_) => return false,
            }
        }
        Err(_) => return false,
    };
    !text.is_empty()
        && text
            .chars()
            .all(|c| !c.is_control() || c.is_ascii_whitespace() || c == '\x0b')
}

/// What `window`, the start of a text, says it is when it is a Python
/// traceback or PyTorch's out-of-memory error: a user who saved the error
/// opens it for the snapshot.
fn python_error_text(window: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(window);
    if text.starts_with("Traceback (most recent call last)") {
        Some("a Python traceback")
    } else if text.contains("OutOfMemoryError") || text.contains("CUDA out of memory") {
        Some("a PyTorch out-of-memory error")
    } else {
        None
    }
}

/// `error`, a failed parse of `bytes`, said as text when `bytes` read as
/// text and the parse failed early, within [`TEXT_WINDOW`] bytes of a
/// first line of words ("Name: foo" is NONE then APPEND), or at the first
/// opcode of a first line with a word in it ("Loading..." is LONG).
/// A refused code-running opcode is said as text only on a first line of
/// words with a gap between them (`class Foo:` is GLOBAL, `Python 3` is
/// PERSID, `Notes on` is NONE then OBJ): a pickle's `GLOBAL` or `INST`
/// names a module, which has no space (`cos`, `cbuiltins`), and one after
/// the first line follows opcodes that read. Nothing ran either way: the
/// refusal came before the opcode did anything. Limits and cycles are
/// said as they are: they are about what the bytes would do, text or not;
/// so are failures later in the input, where a protocol 0 pickle (text
/// itself) was read for a while, and those of a first line of no words
/// (`I12x`).
fn text_instead_of(bytes: &[u8], error: PickleError) -> PickleError {
    use PickleError as E;
    if let E::Refused { offset, .. } = &error {
        let (letters, gap) = first_line_words(bytes);
        let window = &bytes[..bytes.len().min(TEXT_WINDOW)];
        let first_line_end = window
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or(window.len());
        if *offset < first_line_end && letters >= 2 && gap {
            return text_refusal(bytes).unwrap_or(error);
        }
        return error;
    }
    let offset = match &error {
        E::Malformed { offset, .. }
        | E::Unsupported { offset, .. }
        | E::UnknownOpcode { offset, .. }
        | E::Truncated { offset, .. }
        | E::TruncatedLine { offset, .. }
        | E::IntegerTooLarge { offset, .. } => *offset,
        E::MissingStop { end } => *end,
        E::Empty
        | E::NotAPickle { .. }
        | E::Refused { .. }
        | E::UnsupportedProtocol { .. }
        | E::Cycle { .. }
        | E::LimitExceeded { .. } => return error,
    };
    let (letters, gap) = first_line_words(bytes);
    // Two letters and a gap make words; a first opcode that fails on its
    // own line needs a word of 5 letters after the opcode's byte (the
    // malformed protocol 0 arguments of `I12x` or `Sabc` have none).
    let first_opcode_on_a_word = offset == 0
        && first_line_words(bytes.get(1..).unwrap_or_default()).0 >= 5
        && !matches!(error, E::IntegerTooLarge { .. });
    let words = (letters >= 2 && gap) || first_opcode_on_a_word;
    if offset >= TEXT_WINDOW || !words {
        return error;
    }
    text_refusal(bytes).unwrap_or(error)
}

/// The first line of `bytes` (within [`TEXT_WINDOW`]): its longest run of
/// ASCII letters, and whether a space or tab follows something else on it.
/// A protocol 0 pickle's opcode lines have no such gap but in a string's
/// argument (`Va b`).
fn first_line_words(bytes: &[u8]) -> (usize, bool) {
    let window = &bytes[..bytes.len().min(TEXT_WINDOW)];
    let line = window.split(|&b| b == b'\n').next().unwrap_or_default();
    let letters = line
        .split(|b| !b.is_ascii_alphabetic())
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    let gap = line
        .trim_ascii_start()
        .iter()
        .any(|&b| b == b' ' || b == b'\t');
    (letters, gap)
}

/// Opcodes that take what earlier opcodes left (the stack, a mark, the
/// memo): at byte 0 there is none, so a file starting with one of them is
/// not a pickle at all, whatever a parse would say next.
const CANNOT_START: &[u8] = &[
    op::STOP,
    op::POP,
    op::POP_MARK,
    op::DUP,
    op::REDUCE,
    op::APPEND,
    op::BUILD,
    op::DICT,
    op::APPENDS,
    op::GET,
    op::BINGET,
    op::INST,
    op::LONG_BINGET,
    op::LIST,
    op::OBJ,
    op::PUT,
    op::BINPUT,
    op::LONG_BINPUT,
    op::SETITEM,
    op::TUPLE,
    op::SETITEMS,
    op::NEWOBJ,
    op::TUPLE1,
    op::TUPLE2,
    op::TUPLE3,
    op::ADDITEMS,
    op::FROZENSET,
    op::NEWOBJ_EX,
    op::STACK_GLOBAL,
    op::MEMOIZE,
    op::BINPERSID,
    op::READONLY_BUFFER,
];
