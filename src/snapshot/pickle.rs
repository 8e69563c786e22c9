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

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::{FxHashMap, FxHasher};

use thiserror::Error;

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

/// Bytes charged per value pushed: its 8-byte slot, doubled for the slack
/// of a growing vector.
const ITEM_CHARGE: u64 = 2 * std::mem::size_of::<Item>() as u64;
/// Bytes charged per container, on top of its slot (same slack).
const NODE_CHARGE: u64 = 2 * std::mem::size_of::<Node>() as u64;

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

/// A plain-data Python value.
///
/// Containers and strings are [`Arc`]-shared: an object the pickle references
/// twice is one allocation, and cloning a `Value` is cheap.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(Arc<str>),
    Bytes(Arc<[u8]>),
    List(Arc<[Value]>),
    Tuple(Arc<[Value]>),
    /// Key/value pairs in insertion order. Python overwrites a repeated key
    /// in place; this keeps both pairs and [`Value::get`] returns the last.
    Dict(Arc<[(Value, Value)]>),
}

impl Value {
    /// The value under a string key of a dict (the last one if the key is
    /// repeated, as Python would see it); `None` for non-dicts.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let Value::Dict(pairs) = self else {
            return None;
        };
        pairs
            .iter()
            .rev()
            .find(|(k, _)| matches!(k, Value::Str(s) if &**s == key))
            .map(|(_, v)| v)
    }

    /// The integer, if this is an int (bools are not ints here).
    pub fn as_int(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The integer, if this is an int in `0..2^64`.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_int().and_then(|i| u64::try_from(i).ok())
    }

    /// The integer, if this is an int that fits `i64`.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_int().and_then(|i| i64::try_from(i).ok())
    }

    /// The number as `f64`, for floats and ints (Python accepts either
    /// wherever a float is expected).
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            // Precision loss above 2^53 is what Python's float() does too.
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The shared string itself, so callers can keep it without copying.
    pub fn as_arc_str(&self) -> Option<&Arc<str>> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }

    /// The elements of a list or a tuple.
    pub fn as_list(&self) -> Option<&[Value]> {
        match self {
            Value::List(items) | Value::Tuple(items) => Some(items),
            _ => None,
        }
    }

    /// The pairs of a dict.
    pub fn as_dict(&self) -> Option<&[(Value, Value)]> {
        match self {
            Value::Dict(pairs) => Some(pairs),
            _ => None,
        }
    }

    /// Python's name for the type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::None => "None",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Tuple(_) => "tuple",
            Value::Dict(_) => "dict",
        }
    }

    /// A stable identity for the shared allocation behind a str, bytes or
    /// container: two values have the same identity when the pickle
    /// referenced the same object (through the memo), and also for two
    /// completed lists with identical items (the parser shares those, see
    /// `Parser::intern`). Valid while any clone of the value is alive.
    /// `None` for scalars.
    pub fn identity(&self) -> Option<usize> {
        let ptr: *const u8 = match self {
            Value::Str(s) => Arc::as_ptr(s).cast(),
            Value::Bytes(b) => Arc::as_ptr(b).cast(),
            Value::List(items) | Value::Tuple(items) => Arc::as_ptr(items).cast(),
            Value::Dict(pairs) => Arc::as_ptr(pairs).cast(),
            Value::None | Value::Bool(_) | Value::Int(_) | Value::Float(_) => return None,
        };
        Some(ptr as usize)
    }
}

/// Why a pickle was not read. Every message is one line and says what was
/// found and at which byte offset.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PickleError {
    #[error("not a pickle: the input is empty")]
    Empty,

    #[error("not a pickle: {reason}")]
    NotAPickle { reason: String },

    #[error(
        "truncated pickle: input ends at byte {end} inside {opcode} (the opcode at byte {offset} needs {needed} more bytes)"
    )]
    Truncated {
        opcode: &'static str,
        offset: usize,
        end: usize,
        needed: u64,
    },

    #[error(
        "truncated pickle: input ends at byte {end} inside {opcode} (the opcode at byte {offset} has no terminating newline)"
    )]
    TruncatedLine {
        opcode: &'static str,
        offset: usize,
        end: usize,
    },

    #[error("truncated pickle: input ends at byte {end} without a STOP opcode")]
    MissingStop { end: usize },

    #[error(
        "refused pickle opcode {opcode}{} at byte {offset}: snapshots contain only plain data; nothing was executed",
        detail_suffix(.detail)
    )]
    Refused {
        opcode: &'static str,
        offset: usize,
        detail: Option<String>,
    },

    #[error("unsupported pickle opcode {opcode} at byte {offset}: {reason}")]
    Unsupported {
        opcode: &'static str,
        offset: usize,
        reason: &'static str,
    },

    #[error("unknown pickle opcode 0x{byte:02x}{} at byte {offset}", quoted_char_suffix(*.byte))]
    UnknownOpcode { byte: u8, offset: usize },

    #[error("unsupported pickle protocol {protocol} at byte {offset} (this reader knows 0 to 5)")]
    UnsupportedProtocol { protocol: u8, offset: usize },

    #[error("integer too large in {opcode} at byte {offset}: {detail} (at most 16 bytes are read)")]
    IntegerTooLarge {
        opcode: &'static str,
        offset: usize,
        detail: String,
    },

    #[error("malformed pickle: {opcode} at byte {offset}: {detail}")]
    Malformed {
        opcode: &'static str,
        offset: usize,
        detail: String,
    },

    #[error(
        "malformed pickle: a {container} contains itself through the memo (a cycle); a memory snapshot never does"
    )]
    Cycle { container: &'static str },

    #[error("pickle exceeds the reader's limits: {detail}")]
    LimitExceeded { detail: String },
}

fn detail_suffix(detail: &Option<String>) -> String {
    match detail {
        Some(d) => format!(" ({d})"),
        None => String::new(),
    }
}

/// " ('z')" for a printable ASCII byte, nothing otherwise.
fn quoted_char_suffix(byte: u8) -> String {
    if byte.is_ascii_graphic() {
        format!(" ('{}')", char::from(byte))
    } else {
        String::new()
    }
}

/// Makes input-derived text safe for a one-line message: control characters
/// escaped, long text cut.
fn sanitize(bytes: &[u8]) -> String {
    const MAX_CHARS: usize = 80;
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .take(MAX_CHARS)
        .flat_map(char::escape_debug)
        .collect();
    if text.chars().nth(MAX_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// Opcode bytes (names as in CPython's `pickletools`); the writer
/// (`super::writer`) emits them too.
pub(super) mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const FLOAT: u8 = b'F';
    pub const INT: u8 = b'I';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const LONG: u8 = b'L';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const PERSID: u8 = b'P';
    pub const BINPERSID: u8 = b'Q';
    pub const REDUCE: u8 = b'R';
    pub const STRING: u8 = b'S';
    pub const BINSTRING: u8 = b'T';
    pub const SHORT_BINSTRING: u8 = b'U';
    pub const UNICODE: u8 = b'V';
    pub const BINUNICODE: u8 = b'X';
    pub const APPEND: u8 = b'a';
    pub const BUILD: u8 = b'b';
    pub const GLOBAL: u8 = b'c';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const APPENDS: u8 = b'e';
    pub const GET: u8 = b'g';
    pub const BINGET: u8 = b'h';
    pub const INST: u8 = b'i';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const OBJ: u8 = b'o';
    pub const PUT: u8 = b'p';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const BINFLOAT: u8 = b'G';
    pub const PROTO: u8 = 0x80;
    pub const NEWOBJ: u8 = 0x81;
    pub const EXT1: u8 = 0x82;
    pub const EXT2: u8 = 0x83;
    pub const EXT4: u8 = 0x84;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const NEWOBJ_EX: u8 = 0x92;
    pub const STACK_GLOBAL: u8 = 0x93;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    pub const BYTEARRAY8: u8 = 0x96;
    pub const NEXT_BUFFER: u8 = 0x97;
    pub const READONLY_BUFFER: u8 = 0x98;
}

/// The `pickletools` name of an opcode byte, or `None` if it is not one.
fn opcode_name(byte: u8) -> Option<&'static str> {
    Some(match byte {
        op::MARK => "MARK",
        op::STOP => "STOP",
        op::POP => "POP",
        op::POP_MARK => "POP_MARK",
        op::DUP => "DUP",
        op::FLOAT => "FLOAT",
        op::INT => "INT",
        op::BININT => "BININT",
        op::BININT1 => "BININT1",
        op::LONG => "LONG",
        op::BININT2 => "BININT2",
        op::NONE => "NONE",
        op::PERSID => "PERSID",
        op::BINPERSID => "BINPERSID",
        op::REDUCE => "REDUCE",
        op::STRING => "STRING",
        op::BINSTRING => "BINSTRING",
        op::SHORT_BINSTRING => "SHORT_BINSTRING",
        op::UNICODE => "UNICODE",
        op::BINUNICODE => "BINUNICODE",
        op::APPEND => "APPEND",
        op::BUILD => "BUILD",
        op::GLOBAL => "GLOBAL",
        op::DICT => "DICT",
        op::EMPTY_DICT => "EMPTY_DICT",
        op::APPENDS => "APPENDS",
        op::GET => "GET",
        op::BINGET => "BINGET",
        op::INST => "INST",
        op::LONG_BINGET => "LONG_BINGET",
        op::LIST => "LIST",
        op::EMPTY_LIST => "EMPTY_LIST",
        op::OBJ => "OBJ",
        op::PUT => "PUT",
        op::BINPUT => "BINPUT",
        op::LONG_BINPUT => "LONG_BINPUT",
        op::SETITEM => "SETITEM",
        op::TUPLE => "TUPLE",
        op::EMPTY_TUPLE => "EMPTY_TUPLE",
        op::SETITEMS => "SETITEMS",
        op::BINFLOAT => "BINFLOAT",
        op::PROTO => "PROTO",
        op::NEWOBJ => "NEWOBJ",
        op::EXT1 => "EXT1",
        op::EXT2 => "EXT2",
        op::EXT4 => "EXT4",
        op::TUPLE1 => "TUPLE1",
        op::TUPLE2 => "TUPLE2",
        op::TUPLE3 => "TUPLE3",
        op::NEWTRUE => "NEWTRUE",
        op::NEWFALSE => "NEWFALSE",
        op::LONG1 => "LONG1",
        op::LONG4 => "LONG4",
        op::BINBYTES => "BINBYTES",
        op::SHORT_BINBYTES => "SHORT_BINBYTES",
        op::SHORT_BINUNICODE => "SHORT_BINUNICODE",
        op::BINUNICODE8 => "BINUNICODE8",
        op::BINBYTES8 => "BINBYTES8",
        op::EMPTY_SET => "EMPTY_SET",
        op::ADDITEMS => "ADDITEMS",
        op::FROZENSET => "FROZENSET",
        op::NEWOBJ_EX => "NEWOBJ_EX",
        op::STACK_GLOBAL => "STACK_GLOBAL",
        op::MEMOIZE => "MEMOIZE",
        op::FRAME => "FRAME",
        op::BYTEARRAY8 => "BYTEARRAY8",
        op::NEXT_BUFFER => "NEXT_BUFFER",
        op::READONLY_BUFFER => "READONLY_BUFFER",
        _ => return None,
    })
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
    let (arena, scalars, root, used) = run_parser(bytes, limits, progress)?;
    let mut document = Document::new(arena, scalars, root, limits.max_depth);
    document.memory_used = used;
    document.memory_budget = limits.memory_budget(bytes.len() as u64);
    document.input_len = bytes.len();
    Ok(document)
}

/// [`parse_document`] of bytes that are dropped once the opcodes are read.
pub(crate) fn parse_document_owned(
    bytes: Vec<u8>,
    limits: &Limits,
    progress: Option<&AtomicU64>,
) -> Result<Document, PickleError> {
    check_input(&bytes, limits)?;
    let (arena, scalars, root, used) = run_parser(&bytes, limits, progress)?;
    let input_len = bytes.len();
    drop(bytes);
    let mut document = Document::new(arena, scalars, root, limits.max_depth);
    document.memory_used = used;
    document.memory_budget = limits.memory_budget(input_len as u64);
    document.input_len = input_len;
    Ok(document)
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
        parser.progress = progress;
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

/// Recognises common non-pickle inputs up front, so that the user reads
/// "looks like a zip archive" rather than a refused `PERSID` opcode.
fn check_looks_like_pickle(bytes: &[u8]) -> Result<(), PickleError> {
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
    if opcode_name(first).is_some() {
        return Ok(());
    }
    let shown = quoted_char_suffix(first);
    let trimmed = bytes.trim_ascii_start();
    let hint = if trimmed.starts_with(b"{") || trimmed.starts_with(b"[") {
        " (looks like JSON)"
    } else if bytes
        .iter()
        .take(256)
        .all(|b| (b.is_ascii() && !b.is_ascii_control()) || b.is_ascii_whitespace())
    {
        " (looks like text)"
    } else {
        ""
    };
    not_a_pickle(format!(
        "first byte 0x{first:02x}{shown} is not a pickle opcode{hint}"
    ))
}

/// An arena index.
type NodeId = u32;

/// An index into the scalar table.
type ScalarId = u32;

/// A stack, memo or container entry during parsing: a small scalar inline, a
/// larger scalar in the scalar table, or a (possibly still growing)
/// container in the arena. Eight bytes and `Copy`, so the memo fetches that
/// dominate real snapshots copy a handle instead of touching reference
/// counts, and containers are cheap to fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Item {
    None,
    Bool(bool),
    /// Most ints in a snapshot (BININT, BININT1, BININT2) fit.
    SmallInt(i32),
    /// An int that fits `i64` but not `i32` (addresses, timestamps: two
    /// per trace entry), in [`Scalars::ints`].
    WideInt(ScalarId),
    /// Any other scalar, in [`Scalars::values`].
    Scalar(ScalarId),
    Node(NodeId),
}

impl Item {
    /// The item as one word, distinct for distinct items: tag in the high
    /// half, payload in the low half.
    fn word(self) -> u64 {
        let (tag, payload) = match self {
            Item::None => (0u64, 0u32),
            Item::Bool(b) => (1, u32::from(b)),
            Item::SmallInt(i) => (2, i as u32),
            Item::Scalar(id) => (3, id),
            Item::Node(id) => (4, id),
            Item::WideInt(id) => (5, id),
        };
        (tag << 32) | u64::from(payload)
    }
}

/// The hash of a list's items for [`Parser::intern`], which runs for every
/// completed list (millions in a large snapshot). One multiply per item,
/// in two independent lanes so the multiplies overlap (the derived `Hash`
/// with `FxHasher` costs two dependent multiplies per item). Collisions
/// only cost a comparison: interning checks equality before sharing.
fn hash_items(items: &[Item]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut lanes = [items.len() as u64, 0x9e37_79b9_7f4a_7c15];
    let mut pairs = items.chunks_exact(2);
    for pair in &mut pairs {
        for (lane, item) in lanes.iter_mut().zip(pair) {
            *lane = (lane.rotate_left(26) ^ item.word()).wrapping_mul(K);
        }
    }
    if let [last] = pairs.remainder() {
        lanes[0] = (lanes[0].rotate_left(26) ^ last.word()).wrapping_mul(K);
    }
    let mut hasher = FxHasher::default();
    lanes.hash(&mut hasher);
    hasher.finish()
}

/// Scalars too big to sit in an [`Item`]. Ints that fit `i64` get their
/// own table (8 bytes each instead of a 32-byte [`Value`]): a snapshot has
/// two per trace entry, tens of millions in a 1 GB file.
#[derive(Debug, Default)]
struct Scalars {
    values: Vec<Value>,
    ints: Vec<i64>,
}

impl Scalars {
    /// The value of an [`Item::WideInt`] or [`Item::Scalar`].
    fn value(&self, item: Item) -> Option<Value> {
        match item {
            Item::WideInt(id) => self.ints.get(id as usize).map(|&i| Value::Int(i.into())),
            Item::Scalar(id) => self.values.get(id as usize).cloned(),
            _ => None,
        }
    }
}

#[derive(Debug)]
enum NodeKind {
    List(Vec<Item>),
    Tuple(Vec<Item>),
    Dict(Vec<(Item, Item)>),
    /// A completed list whose items equal those of an earlier completed
    /// list: its items were dropped and every reference goes to that one
    /// (see [`Parser::intern`]).
    Alias(NodeId),
}

impl NodeKind {
    fn type_name(&self) -> &'static str {
        match self {
            NodeKind::List(_) => "list",
            NodeKind::Tuple(_) => "tuple",
            NodeKind::Dict(_) => "dict",
            NodeKind::Alias(_) => "list",
        }
    }

    /// Children in order, a dict's as key, value, key, value, …
    fn child(&self, index: usize) -> Option<&Item> {
        match self {
            NodeKind::List(items) | NodeKind::Tuple(items) => items.get(index),
            NodeKind::Dict(pairs) => pairs
                .get(index / 2)
                .map(|(k, v)| if index.is_multiple_of(2) { k } else { v }),
            NodeKind::Alias(_) => None,
        }
    }
}

#[derive(Debug)]
struct Node {
    kind: NodeKind,
    /// Nesting height as far as parsing can tell (1 + the tallest child when
    /// it was added). A child that grows after being added is not
    /// propagated here; the freeze measures the exact height. `u32` keeps a
    /// node at 32 bytes (tens of millions of nodes in a 1 GB snapshot);
    /// stored heights never exceed `max_depth` (checked before storing) and
    /// saturate rather than wrap for an absurd limit.
    height: u32,
    /// A completed list other lists may alias: mutating it is not allowed
    /// while interning.
    canonical: bool,
}

/// CPython's memo: a dict from index to object. Pickles number their memo
/// entries 0, 1, 2, … so those live in a vector; any other index (only a
/// hand-made file would use one) goes to a map, so a huge `LONG_BINPUT`
/// index cannot make us allocate a huge vector. Invariant: every key in
/// `sparse` is greater than `dense.len()`.
#[derive(Debug, Default)]
struct Memo {
    dense: Vec<Item>,
    sparse: HashMap<u64, Item>,
}

impl Memo {
    fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    fn put(&mut self, index: u64, item: Item) {
        let dense_len = self.dense.len() as u64;
        if index < dense_len {
            if let Some(slot) = usize::try_from(index)
                .ok()
                .and_then(|i| self.dense.get_mut(i))
            {
                *slot = item;
            }
        } else if index == dense_len {
            self.dense.push(item);
            // Only a hand-made memo has sparse entries; skip hashing otherwise.
            while !self.sparse.is_empty()
                && let Some(next) = self.sparse.remove(&(self.dense.len() as u64))
            {
                self.dense.push(next);
            }
        } else {
            self.sparse.insert(index, item);
        }
    }

    fn get(&self, index: u64) -> Option<&Item> {
        match usize::try_from(index).ok().and_then(|i| self.dense.get(i)) {
            Some(item) => Some(item),
            None => self.sparse.get(&index),
        }
    }
}

struct Parser<'a> {
    data: &'a [u8],
    pos: usize,
    limits: &'a Limits,
    stack: Vec<Item>,
    /// Stack lengths at each open MARK (CPython's metastack). Operations pop
    /// only from the frame above the innermost mark.
    marks: Vec<usize>,
    memo: Memo,
    arena: Vec<Node>,
    /// Scalars that do not fit in an [`Item`].
    scalars: Scalars,
    pushed: u64,
    /// Estimated bytes of the values built so far, and the most allowed.
    memory_used: u64,
    memory_budget: u64,
    /// Where to publish the parse position, and the position that triggers
    /// the next store.
    progress: Option<&'a AtomicU64>,
    next_progress: usize,
    /// Share completed lists with equal items (see [`Parser::intern`]).
    intern: bool,
    /// Canonical completed lists by the hash of their items.
    interned: FxHashMap<u64, NodeId>,
    /// Set when the input mutates a completed list: the parse is then
    /// redone without interning.
    intern_broken: bool,
}

impl<'a> Parser<'a> {
    fn new(data: &'a [u8], limits: &'a Limits) -> Self {
        Parser {
            data,
            pos: 0,
            limits,
            stack: Vec::with_capacity(64),
            marks: Vec::with_capacity(16),
            memo: Memo::default(),
            arena: Vec::new(),
            scalars: Scalars::default(),
            pushed: 0,
            memory_used: 0,
            memory_budget: limits.memory_budget(data.len() as u64),
            progress: None,
            next_progress: PROGRESS_STEP,
            intern: false,
            interned: FxHashMap::default(),
            intern_broken: false,
        }
    }

    /// The node an item stands for, through an alias.
    fn resolve(&self, item: Item) -> Item {
        match item {
            Item::Node(id) => match self.arena.get(id as usize).map(|n| &n.kind) {
                Some(NodeKind::Alias(canonical)) => Item::Node(*canonical),
                _ => item,
            },
            other => other,
        }
    }

    /// Called when the list `id` is moved into a container (APPEND(S),
    /// SETITEM(S)): CPython's pickler has then written all of it and never
    /// touches it again. If an earlier completed list has the same items,
    /// `id` becomes an alias of it and its items are dropped.
    ///
    /// PyTorch builds a new traceback list for every allocation from a few
    /// hundred cached frame objects: millions of lists with a few hundred
    /// distinct contents. Sharing them keeps a large snapshot's parse within
    /// a small multiple of the file size. Observable only through
    /// [`Value::identity`] (equal lists may now share an allocation); if the
    /// input does mutate a completed list (CPython's pickler never does),
    /// the parse is redone without interning, so results stay exact.
    fn intern(&mut self, id: NodeId) -> NodeId {
        let Some(node) = self.arena.get(id as usize) else {
            return id;
        };
        let NodeKind::List(items) = &node.kind else {
            return id;
        };
        if node.canonical {
            return id;
        }
        let hash = hash_items(items);
        let same = self.interned.get(&hash).copied().filter(|&c| {
            c != id
                && matches!(self.arena.get(c as usize).map(|n| &n.kind),
                    Some(NodeKind::List(other)) if other == items)
        });
        match same {
            Some(canonical) => {
                if let Some(node) = self.arena.get_mut(id as usize) {
                    node.kind = NodeKind::Alias(canonical);
                }
                canonical
            }
            None => {
                self.interned.entry(hash).or_insert(id);
                if let Some(node) = self.arena.get_mut(id as usize) {
                    node.canonical = true;
                }
                id
            }
        }
    }

    fn run(&mut self) -> Result<Item, PickleError> {
        loop {
            let offset = self.pos;
            let Some(&code) = self.data.get(offset) else {
                return Err(PickleError::MissingStop {
                    end: self.data.len(),
                });
            };
            self.pos += 1;
            if code == op::STOP {
                let root = self.pop("STOP", offset)?;
                return Ok(self.resolve(root));
            }
            if offset >= self.next_progress
                && let Some(progress) = self.progress
            {
                progress.store(offset as u64, Ordering::Relaxed);
                self.next_progress = offset + PROGRESS_STEP;
            }
            self.step(code, offset)?;
        }
    }

    /// Executes one opcode other than STOP.
    fn step(&mut self, code: u8, offset: usize) -> Result<(), PickleError> {
        match code {
            op::PROTO => {
                let protocol = self.take_array::<1>("PROTO", offset)?[0];
                if protocol > 5 {
                    return Err(PickleError::UnsupportedProtocol { protocol, offset });
                }
            }
            op::FRAME => {
                // Frames only help buffered readers; check that the announced
                // frame is present and read on as if it were not there.
                let len = u64::from_le_bytes(self.take_array::<8>("FRAME", offset)?);
                let remaining = (self.data.len() - self.pos) as u64;
                if len > remaining {
                    return Err(self.truncated("FRAME", offset, len - remaining));
                }
            }
            op::MARK => self.marks.push(self.stack.len()),
            op::POP => {
                // CPython: popping an empty frame discards the mark instead.
                if self.stack.len() > self.frame_base() {
                    self.stack.pop();
                } else {
                    self.pop_mark("POP", offset)?;
                }
            }
            op::POP_MARK => {
                self.pop_mark("POP_MARK", offset)?;
            }
            op::DUP => {
                let top = *self.top("DUP", offset)?;
                let top = self.resolve(top);
                self.push(top)?;
            }

            op::NONE => self.push_value(Value::None)?,
            op::NEWTRUE => self.push_value(Value::Bool(true))?,
            op::NEWFALSE => self.push_value(Value::Bool(false))?,
            op::BININT => {
                let v = i32::from_le_bytes(self.take_array::<4>("BININT", offset)?);
                self.push_value(Value::Int(v.into()))?;
            }
            op::BININT1 => {
                let v = self.take_array::<1>("BININT1", offset)?[0];
                self.push_value(Value::Int(v.into()))?;
            }
            op::BININT2 => {
                let v = u16::from_le_bytes(self.take_array::<2>("BININT2", offset)?);
                self.push_value(Value::Int(v.into()))?;
            }
            op::LONG1 => {
                let len = self.take_array::<1>("LONG1", offset)?[0];
                let v = self.read_le_signed("LONG1", offset, len.into())?;
                self.push_value(Value::Int(v))?;
            }
            op::LONG4 => {
                let len = i32::from_le_bytes(self.take_array::<4>("LONG4", offset)?);
                let len = u64::try_from(len).map_err(|_| PickleError::Malformed {
                    opcode: "LONG4",
                    offset,
                    detail: format!("negative length {len}"),
                })?;
                let v = self.read_le_signed("LONG4", offset, len)?;
                self.push_value(Value::Int(v))?;
            }
            op::INT => {
                let line = self.take_line("INT", offset)?;
                let value = match line {
                    // Protocol 0 spells the bools as INT 01 / INT 00.
                    b"01" => Value::Bool(true),
                    b"00" => Value::Bool(false),
                    text => Value::Int(parse_decimal(text, "INT", offset)?),
                };
                self.push_value(value)?;
            }
            op::LONG => {
                let line = self.take_line("LONG", offset)?;
                let digits = line.strip_suffix(b"L").unwrap_or(line);
                let v = parse_decimal(digits, "LONG", offset)?;
                self.push_value(Value::Int(v))?;
            }
            op::BINFLOAT => {
                let v = f64::from_be_bytes(self.take_array::<8>("BINFLOAT", offset)?);
                self.push_value(Value::Float(v))?;
            }
            op::FLOAT => {
                let line = self.take_line("FLOAT", offset)?;
                let v = std::str::from_utf8(line)
                    .ok()
                    .and_then(|text| text.trim().parse::<f64>().ok())
                    .ok_or_else(|| PickleError::Malformed {
                        opcode: "FLOAT",
                        offset,
                        detail: format!("'{}' is not a float", sanitize(line)),
                    })?;
                self.push_value(Value::Float(v))?;
            }

            op::SHORT_BINUNICODE => {
                let len = self.take_array::<1>("SHORT_BINUNICODE", offset)?[0];
                self.push_utf8("SHORT_BINUNICODE", offset, len.into())?;
            }
            op::BINUNICODE => {
                let len = u32::from_le_bytes(self.take_array::<4>("BINUNICODE", offset)?);
                self.push_utf8("BINUNICODE", offset, len.into())?;
            }
            op::BINUNICODE8 => {
                let len = u64::from_le_bytes(self.take_array::<8>("BINUNICODE8", offset)?);
                self.push_utf8("BINUNICODE8", offset, len)?;
            }
            op::UNICODE => {
                let line = self.take_line("UNICODE", offset)?;
                let text =
                    decode_raw_unicode_escape(line).ok_or_else(|| PickleError::Malformed {
                        opcode: "UNICODE",
                        offset,
                        detail: "bad \\u or \\U escape".to_string(),
                    })?;
                self.push_value(Value::Str(text.into()))?;
            }
            op::SHORT_BINBYTES => {
                let len = self.take_array::<1>("SHORT_BINBYTES", offset)?[0];
                self.push_bytes("SHORT_BINBYTES", offset, len.into())?;
            }
            op::BINBYTES => {
                let len = u32::from_le_bytes(self.take_array::<4>("BINBYTES", offset)?);
                self.push_bytes("BINBYTES", offset, len.into())?;
            }
            op::BINBYTES8 => {
                let len = u64::from_le_bytes(self.take_array::<8>("BINBYTES8", offset)?);
                self.push_bytes("BINBYTES8", offset, len)?;
            }
            op::BYTEARRAY8 => {
                let len = u64::from_le_bytes(self.take_array::<8>("BYTEARRAY8", offset)?);
                self.push_bytes("BYTEARRAY8", offset, len)?;
            }

            op::EMPTY_LIST => self.push_node(NodeKind::List(Vec::new()), 1, offset)?,
            op::EMPTY_DICT => self.push_node(NodeKind::Dict(Vec::new()), 1, offset)?,
            op::EMPTY_TUPLE => self.push_node(NodeKind::Tuple(Vec::new()), 1, offset)?,
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let (name, count) = match code {
                    op::TUPLE1 => ("TUPLE1", 1),
                    op::TUPLE2 => ("TUPLE2", 2),
                    _ => ("TUPLE3", 3),
                };
                if self.stack.len() < self.frame_base() + count {
                    return Err(underflow(name, offset, count));
                }
                let mut items = self.stack.split_off(self.stack.len() - count);
                for item in &mut items {
                    *item = self.resolve(*item);
                }
                self.push_container(NodeKind::Tuple(items), offset)?;
            }
            op::TUPLE => {
                let items = self.pop_mark("TUPLE", offset)?;
                self.push_container(NodeKind::Tuple(items), offset)?;
            }
            op::LIST => {
                let items = self.pop_mark("LIST", offset)?;
                self.push_container(NodeKind::List(items), offset)?;
            }
            op::DICT => {
                let items = self.pop_mark("DICT", offset)?;
                let pairs = self.pair_up(items, "DICT", offset)?;
                self.push_container(NodeKind::Dict(pairs), offset)?;
            }
            op::APPEND => {
                let start = self.stack.len().checked_sub(1);
                self.move_into_target(start, Wanted::List, "APPEND", offset)?;
            }
            op::APPENDS => {
                let start = self.pop_mark_position("APPENDS", offset)?;
                self.move_into_target(Some(start), Wanted::List, "APPENDS", offset)?;
            }
            op::SETITEM => {
                let start = self.stack.len().checked_sub(2);
                self.move_into_target(start, Wanted::Dict, "SETITEM", offset)?;
            }
            op::SETITEMS => {
                let start = self.pop_mark_position("SETITEMS", offset)?;
                self.move_into_target(Some(start), Wanted::Dict, "SETITEMS", offset)?;
            }

            op::MEMOIZE => {
                let top = *self.top("MEMOIZE", offset)?;
                let index = self.memo.len() as u64;
                self.memo.put(index, top);
            }
            op::PUT => {
                let line = self.take_line("PUT", offset)?;
                let index = parse_memo_index(line, "PUT", offset)?;
                let top = *self.top("PUT", offset)?;
                self.memo.put(index, top);
            }
            op::BINPUT => {
                let index = self.take_array::<1>("BINPUT", offset)?[0];
                let top = *self.top("BINPUT", offset)?;
                self.memo.put(index.into(), top);
            }
            op::LONG_BINPUT => {
                let index = u32::from_le_bytes(self.take_array::<4>("LONG_BINPUT", offset)?);
                let top = *self.top("LONG_BINPUT", offset)?;
                self.memo.put(index.into(), top);
            }
            op::GET => {
                let line = self.take_line("GET", offset)?;
                let index = parse_memo_index(line, "GET", offset)?;
                self.push_memo(index, "GET", offset)?;
            }
            op::BINGET => {
                let index = self.take_array::<1>("BINGET", offset)?[0];
                self.push_memo(index.into(), "BINGET", offset)?;
            }
            op::LONG_BINGET => {
                let index = u32::from_le_bytes(self.take_array::<4>("LONG_BINGET", offset)?);
                self.push_memo(index.into(), "LONG_BINGET", offset)?;
            }

            op::GLOBAL | op::INST => {
                let name = if code == op::GLOBAL { "GLOBAL" } else { "INST" };
                return Err(PickleError::Refused {
                    opcode: name,
                    offset,
                    detail: self.peek_two_lines(),
                });
            }
            op::STACK_GLOBAL => {
                return Err(PickleError::Refused {
                    opcode: "STACK_GLOBAL",
                    offset,
                    detail: self.stack_global_name(),
                });
            }
            op::PERSID => {
                let detail = self
                    .peek_line()
                    .map(|id| format!("persistent id '{}'", sanitize(id)));
                return Err(PickleError::Refused {
                    opcode: "PERSID",
                    offset,
                    detail,
                });
            }
            op::EXT1 | op::EXT2 | op::EXT4 => {
                let (name, width) = match code {
                    op::EXT1 => ("EXT1", 1),
                    op::EXT2 => ("EXT2", 2),
                    _ => ("EXT4", 4),
                };
                let detail = self.data.get(self.pos..self.pos + width).map(|raw| {
                    let mut le = [0u8; 4];
                    le[..width].copy_from_slice(raw);
                    format!("extension code {}", u32::from_le_bytes(le))
                });
                return Err(PickleError::Refused {
                    opcode: name,
                    offset,
                    detail,
                });
            }
            op::REDUCE
            | op::BUILD
            | op::OBJ
            | op::NEWOBJ
            | op::NEWOBJ_EX
            | op::BINPERSID
            | op::NEXT_BUFFER
            | op::READONLY_BUFFER => {
                return Err(PickleError::Refused {
                    opcode: opcode_name(code).unwrap_or("?"),
                    offset,
                    detail: None,
                });
            }
            op::STRING | op::BINSTRING | op::SHORT_BINSTRING => {
                return Err(PickleError::Unsupported {
                    opcode: opcode_name(code).unwrap_or("?"),
                    offset,
                    reason: "Python 2 byte strings never occur in a memory snapshot",
                });
            }
            op::EMPTY_SET | op::ADDITEMS | op::FROZENSET => {
                return Err(PickleError::Unsupported {
                    opcode: opcode_name(code).unwrap_or("?"),
                    offset,
                    reason: "sets never occur in a memory snapshot",
                });
            }
            byte => return Err(PickleError::UnknownOpcode { byte, offset }),
        }
        Ok(())
    }

    // ---- input ----------------------------------------------------------

    fn truncated(&self, opcode: &'static str, offset: usize, needed: u64) -> PickleError {
        PickleError::Truncated {
            opcode,
            offset,
            end: self.data.len(),
            needed,
        }
    }

    /// The next `len` bytes. The length is compared with what is left before
    /// anything is allocated, so a forged length costs nothing.
    fn take(
        &mut self,
        len: u64,
        opcode: &'static str,
        offset: usize,
    ) -> Result<&'a [u8], PickleError> {
        let remaining = self.data.len() - self.pos;
        if len > remaining as u64 {
            return Err(self.truncated(opcode, offset, len - remaining as u64));
        }
        // `len <= remaining`, so it fits in usize and the range is in bounds.
        let end = self.pos + len as usize;
        let bytes = self.data.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(bytes)
    }

    fn take_array<const N: usize>(
        &mut self,
        opcode: &'static str,
        offset: usize,
    ) -> Result<[u8; N], PickleError> {
        let bytes = self.take(N as u64, opcode, offset)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// A text argument up to (not including) the next newline.
    fn take_line(&mut self, opcode: &'static str, offset: usize) -> Result<&'a [u8], PickleError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            return Err(PickleError::TruncatedLine {
                opcode,
                offset,
                end: self.data.len(),
            });
        };
        let line = rest.get(..newline).unwrap_or_default();
        self.pos += newline + 1;
        Ok(line)
    }

    /// The next line, without consuming it, for error details.
    fn peek_line(&self) -> Option<&'a [u8]> {
        let rest = self.data.get(self.pos..)?;
        let newline = rest.iter().position(|&b| b == b'\n')?;
        rest.get(..newline)
    }

    /// "module.name" from GLOBAL/INST's two text lines, if present.
    fn peek_two_lines(&self) -> Option<String> {
        let rest = self.data.get(self.pos..)?;
        let mut lines = rest.splitn(3, |&b| b == b'\n');
        let module = lines.next()?;
        let name = lines.next()?;
        // A third piece exists only if the name line was terminated.
        lines.next()?;
        Some(format!("{}.{}", sanitize(module), sanitize(name)))
    }

    /// "module.name" from the two strings STACK_GLOBAL would consume.
    fn stack_global_name(&self) -> Option<String> {
        let base = self.frame_base();
        let len = self.stack.len();
        if len < base + 2 {
            return None;
        }
        let module = self.item_str(self.stack.get(len - 2)?)?;
        let name = self.item_str(self.stack.get(len - 1)?)?;
        Some(format!(
            "{}.{}",
            sanitize(module.as_bytes()),
            sanitize(name.as_bytes())
        ))
    }

    /// A little-endian two's-complement integer of `len` bytes (LONG1/4).
    fn read_le_signed(
        &mut self,
        opcode: &'static str,
        offset: usize,
        len: u64,
    ) -> Result<i128, PickleError> {
        if len > 16 {
            return Err(PickleError::IntegerTooLarge {
                opcode,
                offset,
                detail: format!("{len} bytes"),
            });
        }
        let bytes = self.take(len, opcode, offset)?;
        let Some(&last) = bytes.last() else {
            return Ok(0);
        };
        // Sign-extend from the top byte.
        let mut buf = if last & 0x80 != 0 {
            [0xffu8; 16]
        } else {
            [0u8; 16]
        };
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(i128::from_le_bytes(buf))
    }

    fn push_utf8(
        &mut self,
        opcode: &'static str,
        offset: usize,
        len: u64,
    ) -> Result<(), PickleError> {
        let bytes = self.take(len, opcode, offset)?;
        let text = std::str::from_utf8(bytes).map_err(|e| PickleError::Malformed {
            opcode,
            offset,
            detail: format!(
                "string is not valid UTF-8 (bad byte {} of {len})",
                e.valid_up_to()
            ),
        })?;
        self.push_value(Value::Str(Arc::from(text)))
    }

    fn push_bytes(
        &mut self,
        opcode: &'static str,
        offset: usize,
        len: u64,
    ) -> Result<(), PickleError> {
        let bytes = self.take(len, opcode, offset)?;
        self.push_value(Value::Bytes(Arc::from(bytes)))
    }

    // ---- stack ----------------------------------------------------------

    fn frame_base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// Counts `bytes` more of parsed values against the memory budget.
    fn charge(&mut self, bytes: u64) -> Result<(), PickleError> {
        self.memory_used = self.memory_used.saturating_add(bytes);
        if self.memory_used > self.memory_budget {
            return Err(PickleError::LimitExceeded {
                detail: format!(
                    "{} (at byte {})",
                    memory_exceeded_detail(self.memory_budget, self.data.len()),
                    self.pos
                ),
            });
        }
        Ok(())
    }

    fn push(&mut self, item: Item) -> Result<(), PickleError> {
        self.charge(ITEM_CHARGE)?;
        self.pushed += 1;
        if self.pushed > self.limits.max_items {
            return Err(PickleError::LimitExceeded {
                detail: format!(
                    "more than {} values at byte {}",
                    self.limits.max_items, self.pos
                ),
            });
        }
        self.stack.push(item);
        Ok(())
    }

    fn push_value(&mut self, value: Value) -> Result<(), PickleError> {
        let item = match value {
            Value::None => Item::None,
            Value::Bool(b) => Item::Bool(b),
            Value::Int(i) if i32::try_from(i).is_ok() => Item::SmallInt(i as i32),
            Value::Int(i) if i64::try_from(i).is_ok() => {
                let id = self.scalar_id(self.scalars.ints.len())?;
                self.scalars.ints.push(i as i64);
                Item::WideInt(id)
            }
            other => {
                let id = self.scalar_id(self.scalars.values.len())?;
                let payload = match &other {
                    Value::Str(text) => text.len(),
                    Value::Bytes(bytes) => bytes.len(),
                    _ => 0,
                };
                self.charge(2 * std::mem::size_of::<Value>() as u64 + payload as u64)?;
                self.scalars.values.push(other);
                Item::Scalar(id)
            }
        };
        self.push(item)
    }

    /// The id of the next entry of a scalar table of length `len`.
    fn scalar_id(&self, len: usize) -> Result<ScalarId, PickleError> {
        ScalarId::try_from(len).map_err(|_| PickleError::LimitExceeded {
            detail: format!("more than {} scalars at byte {}", ScalarId::MAX, self.pos),
        })
    }

    /// The string a stack item stands for, if it is one.
    fn item_str(&self, item: &Item) -> Option<&str> {
        match item {
            Item::Scalar(id) => self.scalars.values.get(*id as usize)?.as_str(),
            _ => None,
        }
    }

    fn push_memo(
        &mut self,
        index: u64,
        opcode: &'static str,
        offset: usize,
    ) -> Result<(), PickleError> {
        let item = self
            .memo
            .get(index)
            .copied()
            .ok_or_else(|| PickleError::Malformed {
                opcode,
                offset,
                detail: format!("memo index {index} was never stored"),
            })?;
        let item = self.resolve(item);
        self.push(item)
    }

    fn pop(&mut self, opcode: &'static str, offset: usize) -> Result<Item, PickleError> {
        if self.stack.len() <= self.frame_base() {
            return Err(underflow(opcode, offset, 1));
        }
        self.stack.pop().ok_or_else(|| underflow(opcode, offset, 1))
    }

    fn top(&self, opcode: &'static str, offset: usize) -> Result<&Item, PickleError> {
        if self.stack.len() <= self.frame_base() {
            return Err(underflow(opcode, offset, 1));
        }
        self.stack
            .last()
            .ok_or_else(|| underflow(opcode, offset, 1))
    }

    /// Removes the innermost MARK and returns the stack length it recorded.
    fn pop_mark_position(
        &mut self,
        opcode: &'static str,
        offset: usize,
    ) -> Result<usize, PickleError> {
        let base = self.marks.pop().ok_or_else(|| PickleError::Malformed {
            opcode,
            offset,
            detail: "no MARK to pop".to_string(),
        })?;
        Ok(base.min(self.stack.len()))
    }

    /// Removes the innermost MARK and returns the items pushed since.
    fn pop_mark(&mut self, opcode: &'static str, offset: usize) -> Result<Vec<Item>, PickleError> {
        let base = self.pop_mark_position(opcode, offset)?;
        let mut items = self.stack.split_off(base);
        for item in &mut items {
            *item = self.resolve(*item);
        }
        Ok(items)
    }

    // ---- containers -----------------------------------------------------

    fn item_height(&self, item: &Item) -> usize {
        match item {
            Item::Node(id) => self
                .arena
                .get(*id as usize)
                .map_or(0, |n| n.height as usize),
            _ => 0,
        }
    }

    fn check_height(&self, height: usize, offset: usize) -> Result<(), PickleError> {
        if height > self.limits.max_depth {
            return Err(too_deep(self.limits.max_depth, Some(offset)));
        }
        Ok(())
    }

    fn push_node(
        &mut self,
        kind: NodeKind,
        height: usize,
        offset: usize,
    ) -> Result<(), PickleError> {
        self.check_height(height, offset)?;
        self.charge(NODE_CHARGE)?;
        let id = NodeId::try_from(self.arena.len()).map_err(|_| PickleError::LimitExceeded {
            detail: format!("more than {} containers at byte {offset}", NodeId::MAX),
        })?;
        self.arena.push(Node {
            kind,
            height: saturating_u32(height),
            canonical: false,
        });
        self.push(Item::Node(id))
    }

    /// Pushes a container made from popped items.
    fn push_container(&mut self, kind: NodeKind, offset: usize) -> Result<(), PickleError> {
        let tallest_child = match &kind {
            NodeKind::List(items) | NodeKind::Tuple(items) => {
                items.iter().map(|i| self.item_height(i)).max()
            }
            NodeKind::Dict(pairs) => pairs
                .iter()
                .map(|(k, v)| self.item_height(k).max(self.item_height(v)))
                .max(),
            NodeKind::Alias(_) => None,
        };
        self.push_node(kind, tallest_child.unwrap_or(0) + 1, offset)
    }

    fn pair_up(
        &self,
        items: Vec<Item>,
        opcode: &'static str,
        offset: usize,
    ) -> Result<Vec<(Item, Item)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(PickleError::Malformed {
                opcode,
                offset,
                detail: format!("odd number of items ({}) for key/value pairs", items.len()),
            });
        }
        let mut pairs = Vec::with_capacity(items.len() / 2);
        let mut iter = items.into_iter();
        while let (Some(key), Some(value)) = (iter.next(), iter.next()) {
            self.check_key(&key, opcode, offset)?;
            pairs.push((key, value));
        }
        Ok(pairs)
    }

    /// Python refuses lists and dicts as dict keys (unhashable); so do we.
    fn check_key(
        &self,
        key: &Item,
        opcode: &'static str,
        offset: usize,
    ) -> Result<(), PickleError> {
        if let Item::Node(id) = key
            && let Some(node) = self.arena.get(*id as usize)
            && !matches!(node.kind, NodeKind::Tuple(_))
        {
            return Err(PickleError::Malformed {
                opcode,
                offset,
                detail: format!("unhashable dict key of type {}", node.kind.type_name()),
            });
        }
        Ok(())
    }

    /// Moves `stack[start..]` into the container just below it (APPEND(S),
    /// SETITEM(S)): CPython mutates that container in place. Draining the
    /// stack straight into the node avoids a temporary vector per opcode.
    fn move_into_target(
        &mut self,
        start: Option<usize>,
        wanted: Wanted,
        opcode: &'static str,
        offset: usize,
    ) -> Result<(), PickleError> {
        // The target and the moved items must all lie in the current frame.
        let target_index = start
            .and_then(|s| s.checked_sub(1))
            .filter(|&t| t >= self.frame_base() && t < self.stack.len())
            .ok_or_else(|| underflow(opcode, offset, wanted.min_items()))?;
        let start = target_index + 1;
        let target = match self.stack.get(target_index) {
            Some(Item::Node(id)) => *id,
            Some(scalar) => {
                let type_name = match scalar {
                    Item::None => "None",
                    Item::Bool(_) => "bool",
                    Item::SmallInt(_) | Item::WideInt(_) => "int",
                    Item::Scalar(id) => self
                        .scalars
                        .values
                        .get(*id as usize)
                        .map_or("?", Value::type_name),
                    Item::Node(_) => "container",
                };
                return Err(PickleError::Malformed {
                    opcode,
                    offset,
                    detail: format!("target is {}, not a container", with_article(type_name)),
                });
            }
            None => return Err(internal(opcode, offset)),
        };
        let moved = self.stack.get(start..).unwrap_or_default();
        if wanted == Wanted::Dict {
            if !moved.len().is_multiple_of(2) {
                return Err(PickleError::Malformed {
                    opcode,
                    offset,
                    detail: format!("odd number of items ({}) for key/value pairs", moved.len()),
                });
            }
            for key in moved.iter().step_by(2) {
                self.check_key(key, opcode, offset)?;
            }
        }
        let grown = moved
            .iter()
            .map(|i| self.item_height(i) + 1)
            .max()
            .unwrap_or(0);
        self.check_height(grown, offset)?;

        if self.intern {
            let completed = self
                .arena
                .get(target as usize)
                .is_some_and(|n| n.canonical || matches!(n.kind, NodeKind::Alias(_)));
            if completed {
                self.intern_broken = true;
                return Err(PickleError::Malformed {
                    opcode,
                    offset,
                    detail: "a completed list is mutated (retried without interning)".to_string(),
                });
            }
            for index in start..self.stack.len() {
                let Some(&item) = self.stack.get(index) else {
                    break;
                };
                // One look at the node: aliases resolve, lists intern, the
                // rest (dicts, tuples, scalars: most items) stays as it is.
                let item = match item {
                    Item::Node(id) if id != target => {
                        match self.arena.get(id as usize).map(|n| &n.kind) {
                            Some(NodeKind::Alias(canonical)) => Item::Node(*canonical),
                            Some(NodeKind::List(_)) => Item::Node(self.intern(id)),
                            _ => item,
                        }
                    }
                    other => other,
                };
                if let Some(slot) = self.stack.get_mut(index) {
                    *slot = item;
                }
            }
        }

        let node = self
            .arena
            .get_mut(target as usize)
            .ok_or_else(|| internal(opcode, offset))?;
        node.height = node.height.max(saturating_u32(grown));
        let mut drained = self.stack.drain(start..);
        match (&mut node.kind, wanted) {
            (NodeKind::List(list), Wanted::List) => list.extend(drained),
            (NodeKind::Dict(dict), Wanted::Dict) => {
                dict.reserve(drained.len() / 2);
                while let (Some(key), Some(value)) = (drained.next(), drained.next()) {
                    dict.push((key, value));
                }
            }
            (other, _) => {
                return Err(wrong_target(
                    opcode,
                    offset,
                    wanted.name(),
                    other.type_name(),
                ));
            }
        }
        Ok(())
    }
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn underflow(opcode: &'static str, offset: usize, needed: usize) -> PickleError {
    let what = if needed == 1 {
        "an item".to_string()
    } else {
        format!("{needed} items")
    };
    PickleError::Malformed {
        opcode,
        offset,
        detail: format!("stack underflow: needs {what} above the last MARK"),
    }
}

fn wrong_target(opcode: &'static str, offset: usize, wanted: &str, found: &str) -> PickleError {
    PickleError::Malformed {
        opcode,
        offset,
        detail: format!("target is {}, not a {wanted}", with_article(found)),
    }
}

/// "an int", "a dict": for messages naming a Python type.
fn with_article(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {type_name}")
}

/// The container kind a mutating opcode expects as its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    List,
    Dict,
}

impl Wanted {
    fn name(self) -> &'static str {
        match self {
            Wanted::List => "list",
            Wanted::Dict => "dict",
        }
    }

    /// Stack items the single-item form (APPEND / SETITEM) consumes.
    fn min_items(self) -> usize {
        match self {
            Wanted::List => 2,
            Wanted::Dict => 3,
        }
    }
}

/// A broken parser invariant; reported instead of panicking.
fn internal(opcode: &'static str, offset: usize) -> PickleError {
    PickleError::Malformed {
        opcode,
        offset,
        detail: "internal reader error (dangling container reference)".to_string(),
    }
}

fn too_deep(max_depth: usize, offset: Option<usize>) -> PickleError {
    let at = offset.map(|o| format!(" at byte {o}")).unwrap_or_default();
    PickleError::LimitExceeded {
        detail: format!("containers nested deeper than {max_depth} levels{at}"),
    }
}

/// Decimal integer text as protocol 0 writes it (optional sign).
fn parse_decimal(text: &[u8], opcode: &'static str, offset: usize) -> Result<i128, PickleError> {
    let str_text = std::str::from_utf8(text).ok().map(str::trim);
    let digits = str_text.map(|t| t.trim_start_matches(['+', '-']));
    match (str_text, digits) {
        (Some(t), Some(d)) if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) => {
            t.parse::<i128>().map_err(|_| PickleError::IntegerTooLarge {
                opcode,
                offset,
                detail: format!("{} decimal digits", d.len()),
            })
        }
        _ => Err(PickleError::Malformed {
            opcode,
            offset,
            detail: format!("'{}' is not an integer", sanitize(text)),
        }),
    }
}

fn parse_memo_index(text: &[u8], opcode: &'static str, offset: usize) -> Result<u64, PickleError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .ok_or_else(|| PickleError::Malformed {
            opcode,
            offset,
            detail: format!("'{}' is not a memo index", sanitize(text)),
        })
}

/// Python's `raw-unicode-escape`: bytes are Latin-1 characters, except
/// `\uXXXX` and `\UXXXXXXXX`. `None` for a bad escape.
fn decode_raw_unicode_escape(bytes: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let width = match (b, bytes.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => {
                out.push(char::from(b));
                i += 1;
                continue;
            }
        };
        let hex = bytes.get(i + 2..i + 2 + width)?;
        let code = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        out.push(char::from_u32(code)?);
        i += 2 + width;
    }
    Some(out)
}

/// Freeze state of one arena node.
enum Slot {
    Unvisited,
    /// On the current DFS path: meeting it again means a cycle.
    InProgress,
    /// Frozen value and its exact nesting height.
    Done(Value, usize),
    /// Frozen, used once and dropped: nothing else refers to it.
    Released,
}

fn lost() -> PickleError {
    PickleError::Malformed {
        opcode: "STOP",
        offset: 0,
        detail: "internal reader error (dangling reference)".to_string(),
    }
}

/// A parsed pickle before (or while) it becomes a [`Value`] tree: the
/// parser's arena, frozen on demand.
///
/// The snapshot reader freezes everything but the per-device trace lists,
/// then freezes, converts and releases one trace entry at a time
/// ([`Document::defer_device_traces`], [`Document::freeze_entry`],
/// [`Document::release_entry`]), so that a long trace never exists as
/// values all at once.
pub(crate) struct Document {
    /// Estimated bytes of the parsed values, the most reading the input may
    /// take (see [`Limits::memory_budget`]) and the input's length: what is
    /// built from the document is charged to the same budget.
    pub(crate) memory_used: u64,
    pub(crate) memory_budget: u64,
    pub(crate) input_len: usize,
    arena: Vec<Node>,
    scalars: Scalars,
    slots: Vec<Slot>,
    root: Item,
    max_depth: usize,
    /// How many container slots refer to each node (saturating): a node
    /// referred to at most once can be released after its one use.
    in_degree: Vec<u8>,
    /// Nodes frozen by the last [`Document::freeze_entry`].
    frozen_now: Vec<usize>,
    /// The depth-first path of [`Document::freeze`], kept between calls
    /// (one allocation for millions of trace entries).
    path: Vec<(usize, usize)>,
}

/// Where the trace entries of one device are, when deferred: the items of
/// its list, in order.
pub(crate) struct DeferredTrace(Vec<Item>);

impl DeferredTrace {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// A field of a flat dict read straight from the arena (see
/// [`Document::flat_entry`]): no value is built and no reference count is
/// touched.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'d> {
    None,
    Int(i128),
    Str(&'d Arc<str>),
    /// A container that was frozen before (a shared frames list).
    Frozen(&'d Value),
    /// Anything else (bool, float, bytes, a container not frozen yet).
    Other,
}

/// A trace entry that is a dict not frozen yet, read in place. Lookups
/// follow [`Value::get`]: the last pair whose key is that string.
pub(crate) struct FlatEntry<'d> {
    document: &'d Document,
    pairs: &'d [(Item, Item)],
}

impl<'d> FlatEntry<'d> {
    /// The value under `key`, `None` if no pair has that key.
    pub(crate) fn get(&self, key: &str) -> Option<Field<'d>> {
        let document = self.document;
        let (_, value) = self.pairs.iter().rev().find(|(k, _)| match k {
            Item::Scalar(id) => {
                matches!(document.scalars.values.get(*id as usize), Some(Value::Str(s)) if &**s == key)
            }
            _ => false,
        })?;
        Some(match *value {
            Item::None => Field::None,
            Item::SmallInt(i) => Field::Int(i.into()),
            Item::WideInt(id) => document
                .scalars
                .ints
                .get(id as usize)
                .map_or(Field::Other, |&i| Field::Int(i.into())),
            Item::Scalar(id) => match document.scalars.values.get(id as usize) {
                Some(Value::Int(i)) => Field::Int(*i),
                Some(Value::Str(s)) => Field::Str(s),
                _ => Field::Other,
            },
            Item::Node(id) => match document.slots.get(id as usize) {
                // Within the depth limit `freeze_entry` would apply.
                Some(Slot::Done(value, height))
                    if height.saturating_add(1) <= document.max_depth.saturating_sub(3) =>
                {
                    Field::Frozen(value)
                }
                _ => Field::Other,
            },
            Item::Bool(_) => Field::Other,
        })
    }
}

impl Document {
    fn new(arena: Vec<Node>, scalars: Scalars, root: Item, max_depth: usize) -> Self {
        let mut in_degree = vec![0u8; arena.len()];
        for node in &arena {
            let mut count = |item: &Item| {
                if let Item::Node(id) = item
                    && let Some(d) = in_degree.get_mut(*id as usize)
                {
                    *d = d.saturating_add(1);
                }
            };
            match &node.kind {
                NodeKind::List(items) | NodeKind::Tuple(items) => items.iter().for_each(&mut count),
                NodeKind::Dict(pairs) => pairs.iter().for_each(|(k, v)| {
                    count(k);
                    count(v);
                }),
                NodeKind::Alias(_) => {}
            }
        }
        let mut slots = Vec::with_capacity(arena.len());
        slots.resize_with(arena.len(), || Slot::Unvisited);
        Document {
            memory_used: 0,
            memory_budget: u64::MAX,
            input_len: 0,
            arena,
            scalars,
            slots,
            root,
            max_depth,
            in_degree,
            frozen_now: Vec::new(),
            path: Vec::new(),
        }
    }

    fn node_kind(&self, item: Item) -> Option<&NodeKind> {
        match item {
            Item::Node(id) => self.arena.get(id as usize).map(|n| &n.kind),
            _ => None,
        }
    }

    fn referred_once(&self, item: Item) -> bool {
        matches!(item, Item::Node(id) if self.in_degree.get(id as usize) == Some(&1))
    }

    /// Takes the items of every per-device trace list out of the tree, so
    /// that [`Document::freeze_root`] sees them empty: when the root is a
    /// dict nothing refers to, whose `device_traces` is a list of lists,
    /// each referred to only there. `None` (nothing taken) for any other
    /// shape: then nothing an entry refers to can contain the entry.
    pub(crate) fn defer_device_traces(&mut self) -> Option<Vec<DeferredTrace>> {
        let NodeKind::Dict(pairs) = self.node_kind(self.root)? else {
            return None;
        };
        // The last pair with the key wins, as in Python (and `Value::get`).
        let traces = pairs.iter().rev().find_map(|(key, value)| match key {
            Item::Scalar(id) => match self.scalars.values.get(*id as usize) {
                Some(Value::Str(name)) if &**name == "device_traces" => Some(*value),
                _ => None,
            },
            _ => None,
        })?;
        let NodeKind::List(devices) = self.node_kind(traces)? else {
            return None;
        };
        // Nothing may refer back to the root either: an entry that did would
        // be a cycle, which only the whole-tree freeze can see.
        let root_unreferenced = match self.root {
            Item::Node(id) => self.in_degree.get(id as usize) == Some(&0),
            _ => false,
        };
        let deferrable = root_unreferenced
            && self.referred_once(traces)
            && devices.iter().all(|&d| {
                self.referred_once(d) && matches!(self.node_kind(d), Some(NodeKind::List(_)))
            });
        if !deferrable {
            return None;
        }
        let ids: Vec<usize> = devices
            .iter()
            .filter_map(|d| match d {
                Item::Node(id) => Some(*id as usize),
                _ => None,
            })
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let items = match self.arena.get_mut(id).map(|n| &mut n.kind) {
                Some(NodeKind::List(items)) => std::mem::take(items),
                _ => Vec::new(),
            };
            out.push(DeferredTrace(items));
        }
        Some(out)
    }

    /// The whole (remaining) tree as a value.
    pub(crate) fn freeze_root(&mut self) -> Result<Value, PickleError> {
        let root = self.root;
        let max_depth = self.max_depth;
        self.freeze(root, max_depth)
    }

    /// Trace entry `index` of a deferred trace, as a value. Entries sit 4
    /// levels down (root dict, device_traces, the device's list, the
    /// entry), so they get the depth limit less 3.
    pub(crate) fn freeze_entry(
        &mut self,
        trace: &DeferredTrace,
        index: usize,
    ) -> Result<Value, PickleError> {
        let item = trace.0.get(index).copied().ok_or_else(lost)?;
        self.frozen_now.clear();
        let max_depth = self.max_depth.saturating_sub(3);
        self.freeze(item, max_depth)
    }

    /// Trace entry `index` read in place, when it is a dict that was not
    /// frozen yet (nothing else refers to it): the snapshot reader converts
    /// such an entry from its fields, without building its value, and falls
    /// back to [`Document::freeze_entry`] for anything else.
    pub(crate) fn flat_entry(&self, trace: &DeferredTrace, index: usize) -> Option<FlatEntry<'_>> {
        let Some(&Item::Node(id)) = trace.0.get(index) else {
            return None;
        };
        let id = id as usize;
        // Below 2 levels even a flat entry is too deep for `freeze_entry`.
        if self.max_depth.saturating_sub(3) < 2
            || !matches!(self.slots.get(id), Some(Slot::Unvisited))
        {
            return None;
        }
        match self.arena.get(id).map(|n| &n.kind) {
            Some(NodeKind::Dict(pairs)) => Some(FlatEntry {
                document: self,
                pairs,
            }),
            _ => None,
        }
    }

    /// Drops the values of the nodes the last [`Document::freeze_entry`]
    /// made that nothing else refers to.
    pub(crate) fn release_entry(&mut self) {
        for id in std::mem::take(&mut self.frozen_now) {
            if self.in_degree.get(id).is_some_and(|&d| d <= 1)
                && let Some(slot) = self.slots.get_mut(id)
            {
                *slot = Slot::Released;
            }
        }
    }

    fn scalar(&self, item: Item) -> Option<Value> {
        match item {
            Item::None => Some(Value::None),
            Item::Bool(b) => Some(Value::Bool(b)),
            Item::SmallInt(i) => Some(Value::Int(i.into())),
            Item::WideInt(_) | Item::Scalar(_) => self.scalars.value(item),
            Item::Node(_) => None,
        }
    }

    fn set_slot(&mut self, id: usize, slot: Slot) -> Result<(), PickleError> {
        *self.slots.get_mut(id).ok_or_else(lost)? = slot;
        Ok(())
    }

    /// Freezes `item`. Iterative depth-first: the explicit path never grows
    /// past `max_depth`, so neither hostile depth nor hostile cycles can
    /// overflow the stack. Frozen nodes keep their value (shared nodes stay
    /// shared) until released.
    fn freeze(&mut self, item: Item, max_depth: usize) -> Result<Value, PickleError> {
        let root_id = match item {
            Item::Node(id) => id as usize,
            other => return self.scalar(other).ok_or_else(lost),
        };
        match self.slots.get(root_id).ok_or_else(lost)? {
            Slot::Done(value, _) => return Ok(value.clone()),
            Slot::Unvisited => {}
            Slot::InProgress | Slot::Released => return Err(lost()),
        }
        if max_depth == 0 {
            return Err(too_deep(max_depth, None));
        }
        self.set_slot(root_id, Slot::InProgress)?;
        // (node, index of the next child to look at)
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        path.push((root_id, 0));
        let result = self.freeze_path(&mut path, max_depth);
        self.path = path;
        result?;
        match self.slots.get(root_id) {
            Some(Slot::Done(value, _)) => Ok(value.clone()),
            _ => Err(lost()),
        }
    }

    /// The depth-first loop of [`Document::freeze`].
    fn freeze_path(
        &mut self,
        path: &mut Vec<(usize, usize)>,
        max_depth: usize,
    ) -> Result<(), PickleError> {
        while let Some(&mut (id, ref mut next_child)) = path.last_mut() {
            let node = self.arena.get(id).ok_or_else(lost)?;
            let mut descend_into = None;
            while let Some(child) = node.kind.child(*next_child) {
                if let Item::Node(child_id) = child {
                    let child_id = *child_id as usize;
                    match self.slots.get(child_id).ok_or_else(lost)? {
                        Slot::Done(..) => {}
                        Slot::InProgress => {
                            let container = self
                                .arena
                                .get(child_id)
                                .map_or("container", |n| n.kind.type_name());
                            return Err(PickleError::Cycle { container });
                        }
                        Slot::Unvisited => {
                            descend_into = Some(child_id);
                            break;
                        }
                        Slot::Released => return Err(lost()),
                    }
                }
                *next_child += 1;
            }
            if let Some(child_id) = descend_into {
                if path.len() >= max_depth {
                    return Err(too_deep(max_depth, None));
                }
                self.set_slot(child_id, Slot::InProgress)?;
                path.push((child_id, 0));
                continue;
            }

            // Every child is frozen: build this node. Its children vector is
            // no longer needed, so take it (scalars are moved, not cloned).
            let kind = std::mem::replace(
                &mut self.arena.get_mut(id).ok_or_else(lost)?.kind,
                NodeKind::Tuple(Vec::new()),
            );
            let mut height = 0;
            let mut dangling = false;
            let slots = &self.slots;
            let scalars = &self.scalars;
            // Infallible so that `collect` can build each `Arc<[_]>` in one
            // allocation straight from the node's vector.
            let mut resolve = |item: Item| -> Value {
                match item {
                    Item::Node(child_id) => match slots.get(child_id as usize) {
                        Some(Slot::Done(value, child_height)) => {
                            height = height.max(*child_height);
                            value.clone()
                        }
                        // Unreachable: the loop above froze every child first.
                        _ => {
                            dangling = true;
                            Value::None
                        }
                    },
                    Item::None => Value::None,
                    Item::Bool(b) => Value::Bool(b),
                    Item::SmallInt(i) => Value::Int(i.into()),
                    Item::WideInt(_) | Item::Scalar(_) => {
                        scalars.value(item).unwrap_or_else(|| {
                            dangling = true;
                            Value::None
                        })
                    }
                }
            };
            let value = match kind {
                NodeKind::List(items) => Value::List(items.into_iter().map(&mut resolve).collect()),
                NodeKind::Tuple(items) => {
                    Value::Tuple(items.into_iter().map(&mut resolve).collect())
                }
                NodeKind::Dict(pairs) => Value::Dict(
                    pairs
                        .into_iter()
                        .map(|(key, value)| (resolve(key), resolve(value)))
                        .collect(),
                ),
                // Every reference was redirected to the canonical list.
                NodeKind::Alias(_) => return Err(lost()),
            };
            if dangling {
                return Err(lost());
            }
            let height = height + 1;
            if height > max_depth {
                return Err(too_deep(max_depth, None));
            }
            self.set_slot(id, Slot::Done(value, height))?;
            self.frozen_now.push(id);
            path.pop();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_default(bytes: &[u8]) -> Result<Value, PickleError> {
        parse(bytes, &Limits::default())
    }

    #[test]
    fn protocol_zero_text_opcodes_parse() {
        // [1, True, -7, 2.5, 'h\xe9\u20ac', 12345678901234567890L] in protocol 0.
        let pickle =
            b"(lp0\nI1\naI01\naI-7\naF2.5\naVh\xe9\\u20ac\np1\naL12345678901234567890L\na.";
        let value = parse_default(pickle).unwrap();
        let items = value.as_list().unwrap();
        assert_eq!(items[0], Value::Int(1));
        assert_eq!(items[1], Value::Bool(true));
        assert_eq!(items[2], Value::Int(-7));
        assert_eq!(items[3], Value::Float(2.5));
        assert_eq!(items[4].as_str(), Some("hé€"));
        assert_eq!(items[5], Value::Int(12345678901234567890));
    }

    #[test]
    fn memo_get_shares_one_allocation() {
        // d = {'a': 1}; {'x': d, 'y': d} in protocol 4 (hand-assembled).
        let pickle = b"\x80\x04}\x94(\x8c\x01x\x94}\x94\x8c\x01a\x94K\x01s\x8c\x01y\x94h\x02u.";
        let value = parse_default(pickle).unwrap();
        let x = value.get("x").unwrap();
        let y = value.get("y").unwrap();
        assert_eq!(x.identity(), y.identity());
        assert_eq!(x.get("a"), Some(&Value::Int(1)));
    }

    #[test]
    fn sparse_memo_index_does_not_allocate_a_huge_vector() {
        // LONG_BINPUT 0xfffffff0 then LONG_BINGET of it.
        let pickle = b"K\x05r\xf0\xff\xff\xff0j\xf0\xff\xff\xff.";
        assert_eq!(parse_default(pickle).unwrap(), Value::Int(5));
    }

    #[test]
    fn repeated_dict_key_reads_as_the_last_value() {
        let pickle = b"}(\x8c\x01kK\x01\x8c\x01kK\x02u.";
        assert_eq!(
            parse_default(pickle).unwrap().get("k"),
            Some(&Value::Int(2))
        );
    }

    #[test]
    fn pop_on_an_empty_frame_discards_the_mark_like_cpython() {
        assert_eq!(parse_default(b"K\x07(0.").unwrap(), Value::Int(7));
    }

    #[test]
    fn operations_cannot_reach_below_the_innermost_mark() {
        let err = parse_default(b"](a.").unwrap_err();
        assert!(
            matches!(
                err,
                PickleError::Malformed {
                    opcode: "APPEND",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn list_as_dict_key_is_refused_as_unhashable() {
        let err = parse_default(b"}]K\x01s.").unwrap_err();
        assert!(err.to_string().contains("unhashable"), "{err}");
    }

    #[test]
    fn raw_unicode_escape_decodes_latin1_and_escapes() {
        assert_eq!(
            decode_raw_unicode_escape(b"a\xff\\u0041\\U0001F600\\x").as_deref(),
            Some("a\u{ff}A\u{1F600}\\x")
        );
        assert_eq!(decode_raw_unicode_escape(b"\\u12"), None);
    }

    #[test]
    fn long1_sign_extends() {
        assert_eq!(parse_default(b"\x8a\x01\xff.").unwrap(), Value::Int(-1));
        assert_eq!(
            parse_default(b"\x8a\x02\xff\x00.").unwrap(),
            Value::Int(255)
        );
        assert_eq!(parse_default(b"\x8a\x00.").unwrap(), Value::Int(0));
    }

    #[test]
    fn ints_of_every_width_read_back_exactly() {
        // [2**40, -2**40, 2**63 - 1, 2**64, 2**40 (memo fetch)]: i64 ints sit
        // in their own table, wider ones among the values.
        let pickle = b"\x80\x04](\x8a\x06\x00\x00\x00\x00\x00\x01\x94\x8a\x06\x00\x00\x00\x00\x00\xff\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01h\x00e.";
        let value = parse_default(pickle).unwrap();
        assert_eq!(
            value.as_list().unwrap(),
            &[
                Value::Int(1 << 40),
                Value::Int(-(1 << 40)),
                Value::Int(i64::MAX.into()),
                Value::Int(1 << 64),
                Value::Int(1 << 40),
            ][..]
        );
    }

    #[test]
    fn value_accessors_check_types_and_ranges() {
        assert_eq!(Value::Int(-1).as_u64(), None);
        assert_eq!(Value::Int(1 << 64).as_u64(), None);
        assert_eq!(Value::Int(1 << 63).as_i64(), None);
        assert_eq!(Value::Int(3).as_f64(), Some(3.0));
        assert_eq!(Value::Bool(true).as_int(), None);
        assert_eq!(Value::Str("s".into()).type_name(), "str");
        assert!(Value::Int(1).identity().is_none());
    }

    #[test]
    fn mutation_after_sharing_is_seen_by_every_reference() {
        // l = []; t = (l, l); l.append(1) -- via memo, then return t.
        let pickle = b"]\x94h\x00h\x00\x86\x94h\x00K\x01a0h\x01.";
        let value = parse_default(pickle).unwrap();
        let pair = value.as_list().unwrap();
        assert_eq!(pair[0].as_list().unwrap(), &[Value::Int(1)]);
        assert_eq!(pair[0].identity(), pair[1].identity());
    }

    /// {'a': [1], 'b': [1]}, then (when `mutate`) `a.append(2)` through
    /// the memo after both lists were completed.
    fn two_equal_lists(mutate: bool) -> Vec<u8> {
        let mut pickle =
            b"\x80\x04}\x94(\x8c\x01a\x94]\x94K\x01a\x8c\x01b\x94]\x94K\x01au".to_vec();
        if mutate {
            pickle.extend_from_slice(b"h\x02K\x02a0");
        }
        pickle.push(b'.');
        pickle
    }

    #[test]
    fn completed_lists_with_equal_items_share_one_allocation() {
        let value = parse_default(&two_equal_lists(false)).unwrap();
        let (a, b) = (value.get("a").unwrap(), value.get("b").unwrap());
        assert_eq!(a.as_list(), Some(&[Value::Int(1)][..]));
        assert_eq!(a.identity(), b.identity());
    }

    #[test]
    fn mutating_a_completed_list_is_exact_through_the_retry() {
        let value = parse_default(&two_equal_lists(true)).unwrap();
        let (a, b) = (value.get("a").unwrap(), value.get("b").unwrap());
        assert_eq!(a.as_list(), Some(&[Value::Int(1), Value::Int(2)][..]));
        assert_eq!(b.as_list(), Some(&[Value::Int(1)][..]));
        assert_ne!(a.identity(), b.identity());
    }

    #[test]
    fn progress_is_published_every_step_and_ends_at_the_length() {
        // A list of 100,000 ints (BININT1: 2 bytes each) in 1000-item batches.
        let mut pickle = b"\x80\x04]\x94".to_vec();
        for _ in 0..100 {
            pickle.push(b'(');
            for _ in 0..1000 {
                pickle.extend_from_slice(b"K\x07");
            }
            pickle.push(b'e');
        }
        pickle.push(b'.');
        let progress = AtomicU64::new(0);
        let value = parse_with_progress(&pickle, &Limits::default(), &progress).unwrap();
        assert_eq!(value.as_list().map(<[Value]>::len), Some(100_000));
        assert_eq!(progress.load(Ordering::Relaxed), pickle.len() as u64);
        assert!(pickle.len() > 3 * PROGRESS_STEP);
    }

    #[test]
    fn growth_after_nesting_is_caught_by_the_freeze_depth_check() {
        // inner = []; outer = [inner]; then inner gets [[[]]] appended, so
        // outer's depth becomes 5 but parsing still records 2 for it: only
        // the freeze sees the final depth.
        let pickle = b"]\x94]\x94h\x00a0h\x00]]]aaa0h\x01.";
        let limits = Limits {
            max_depth: 4,
            ..Limits::default()
        };
        let err = parse(pickle, &limits).unwrap_err();
        assert!(matches!(err, PickleError::LimitExceeded { .. }), "{err}");
    }
}
