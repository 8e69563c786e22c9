//! Why a pickle was refused, and the message helpers the parser shares.

use thiserror::Error;

/// Why a pickle was not read. Every message is one line and says what was
/// found and at which byte offset.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PickleError {
    #[error("not a pickle: the input is empty")]
    Empty,

    #[error("not a pickle: {reason}")]
    NotAPickle { reason: String },

    #[error(
        "truncated pickle: input ends at byte {end} inside {opcode} (the opcode at byte {offset} needs {needed} more {})",
        if *.needed == 1 { "byte" } else { "bytes" }
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
pub(super) fn quoted_char_suffix(byte: u8) -> String {
    if byte.is_ascii_graphic() {
        format!(" ('{}')", char::from(byte))
    } else {
        String::new()
    }
}

/// Makes input-derived text safe for a one-line message: control characters
/// escaped, long text cut.
pub(super) fn sanitize(bytes: &[u8]) -> String {
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

pub(super) fn underflow(opcode: &'static str, offset: usize, needed: usize) -> PickleError {
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

pub(super) fn wrong_target(
    opcode: &'static str,
    offset: usize,
    wanted: &str,
    found: &str,
) -> PickleError {
    PickleError::Malformed {
        opcode,
        offset,
        detail: format!("target is {}, not a {wanted}", with_article(found)),
    }
}

/// "an int", "a dict": for messages naming a Python type.
pub(super) fn with_article(type_name: &str) -> String {
    let article = if type_name.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {type_name}")
}

/// A broken parser invariant; reported instead of panicking.
pub(super) fn internal(opcode: &'static str, offset: usize) -> PickleError {
    PickleError::Malformed {
        opcode,
        offset,
        detail: "internal reader error (dangling container reference)".to_string(),
    }
}

pub(super) fn too_deep(max_depth: usize, offset: Option<usize>) -> PickleError {
    let at = offset.map(|o| format!(" at byte {o}")).unwrap_or_default();
    PickleError::LimitExceeded {
        detail: format!("containers nested deeper than {max_depth} levels{at}"),
    }
}
