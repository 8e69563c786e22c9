//! The scenario file format (TOML), its parsing and its validation.
//!
//! A file is parsed into raw serde structures (unknown keys are errors that
//! name the key), then checked and flattened into a [`Scenario`]: sizes are
//! parsed, `repeat` blocks are unrolled, `count` is expanded into names and
//! every variant's sequence of allocations and frees is simulated by name so
//! that a free of a name not held is caught before anything runs.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::alloc::sizing::{
    MAX_PARSED_SIZE, MAX_PARSED_SIZE_TEXT, SizeRefusal, bare_size_message, bare_size_suggestions,
    is_bare_number, typed_size,
};
use crate::alloc::{AllocatorConfig, SimProcesses, human_bytes};
use crate::quote::{cut, parser_complaint};

/// The name of the single run of a scenario without `[[variant]]` tables.
pub const DEFAULT_VARIANT: &str = "default";

/// The most steps a scenario may unroll to (repeats included).
pub const MAX_STEPS: usize = 10_000;

/// The most allocations a scenario's unrolled steps may make in all (an
/// `alloc` with `count` makes several): every step of a run looks at every
/// live block, so this and [`MAX_STEPS`] bound a run's work.
pub const MAX_ALLOCATIONS: usize = 10_000;

/// The largest `count` of one `alloc`: all the allocations a scenario may
/// make ([`MAX_ALLOCATIONS`]).
pub const MAX_COUNT: u32 = 10_000;
const _: () = assert!(MAX_COUNT as usize == MAX_ALLOCATIONS);

/// The most `[[variant]]` tables a scenario may have (each is a whole run).
pub const MAX_VARIANTS: usize = 8;

/// The most characters of the TOML parser's message an error keeps.
const MAX_SYNTAX_MESSAGE_CHARS: usize = 200;

/// Why a scenario file was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScenarioError {
    #[error("not a valid scenario file: {0}")]
    Syntax(String),
    #[error("{what}: '{text}' is not a size: write e.g. 96MiB, 1.5GiB, 512KiB or 4096B")]
    BadSize { what: String, text: String },
    #[error(
        "{what}: '{text}' is more than the largest size, {}",
        crate::alloc::sizing::MAX_PARSED_SIZE_TEXT
    )]
    SizeTooLarge { what: String, text: String },
    /// A fraction of a byte (`0.5B`, `1.5`, `0.0001KiB`): refused as the
    /// command line refuses it, not rounded.
    #[error("{what}: {}", SizeRefusal::NotWholeBytes.message(text, MAX_PARSED_SIZE_TEXT))]
    NotWholeBytes { what: String, text: String },
    /// A number without a unit (`"8"`): refused as the command line
    /// refuses `--capacity 8`, not read as 8 bytes; `message` is the
    /// shared wording ("'8' has no unit: 8 what? write e.g. 8GiB, …").
    #[error("{what}: {message}")]
    NoUnit { what: String, message: String },
    #[error("{what}: invalid alloc_conf '{text}': {reason}")]
    BadAllocConf {
        what: String,
        text: String,
        reason: String,
    },
    #[error("step {step}: {message}")]
    Step { step: String, message: String },
    #[error("variant '{variant}', step {step}: {message}")]
    Names {
        variant: String,
        step: String,
        message: String,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The TOML parser's error on one line: where, and its message without the
/// echo of the source line (which may be megabytes long).
fn syntax(text: &str, e: &toml::de::Error) -> ScenarioError {
    let start = e.span().map(|span| span.start);
    let found_datetime = start.and_then(|at| datetime_at(text, at)).map(|kind| {
        // What a table there expects, which the error does not say: by
        // the key the value stands at, or the array it is an element of.
        let table_key = key_before(text, start).or_else(|| array_key(text, start?));
        (kind, table_expected(table_key))
    });
    let message = reworded(e.message(), key_before(text, start), found_datetime);
    ScenarioError::Syntax(parser_complaint(
        text,
        start,
        &message,
        MAX_SYNTAX_MESSAGE_CHARS,
    ))
}

/// The key whose value starts at byte `offset` of `text`: the `KEY =`
/// just before it on its line (`alloc = "1GiB"`, `{ name = 1`), or the
/// one an array's first element follows (`steps = [ 3`).
fn key_before(text: &str, offset: Option<usize>) -> Option<&str> {
    let before = text.get(..offset?)?;
    let line = before.rsplit('\n').next()?.trim_end();
    let line = line.strip_suffix('[').unwrap_or(line).trim_end();
    let line = line.strip_suffix('=')?.trim_end();
    line.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .next()
        .filter(|key| !key.is_empty())
}

/// What a TOML date or time is called in a message: "a date"
/// (`1979-05-27`), "a date and time" (`1979-05-27T07:32:00Z`), "a time
/// of day" (`07:32:00`).
pub fn datetime_kind(datetime: &toml::value::Datetime) -> &'static str {
    match (datetime.date, datetime.time) {
        (Some(_), None) => "a date",
        (Some(_), Some(_)) => "a date and time",
        (None, _) => "a time of day",
    }
}

/// What the TOML value at byte `at` of `text` is called ([`datetime_kind`])
/// when it is a date or a time: the deserializer gives one to serde as a
/// table of one private key, so an error about it would say "a table"
/// or name that key.
fn datetime_at(text: &str, at: usize) -> Option<&'static str> {
    let rest = text.get(at..)?;
    let value = rest
        .split(['\n', '\r', ',', ']', '}', '#'])
        .next()
        .unwrap_or_default()
        .trim_end();
    // A date and time may be parted by a space (`1979-05-27 07:32:00`).
    let first_word = value.split([' ', '\t']).next().unwrap_or_default();
    [value, first_word]
        .into_iter()
        .find_map(|v| v.parse::<toml::value::Datetime>().ok())
        .map(|d| datetime_kind(&d))
}

/// The key of the array whose element starts at byte `offset` of
/// `text` (`steps = [{ … }, 3`): the `KEY = [` of the innermost bracket
/// still open before it, none where that is an inline table's `{`.
fn array_key(text: &str, offset: usize) -> Option<&str> {
    let before = text.get(..offset)?.as_bytes();
    let mut depth = 0usize;
    for (at, byte) in before.iter().enumerate().rev() {
        match byte {
            b']' | b'}' => depth = depth.checked_add(1)?,
            b'[' | b'{' if depth > 0 => depth -= 1,
            b'[' => return key_before(text, Some(at + 1)),
            b'{' => return None,
            _ => {}
        }
    }
    None
}

/// What a table of the format expects where a value of another type
/// stands (each raw table's `#[serde(expecting)]`, which a date's error
/// does not carry: it reads as a table with an unknown key), by the key
/// it stands at.
fn table_expected(key: Option<&str>) -> &'static str {
    match key {
        Some("alloc") => "a table: alloc = { name = \"a\", size = \"1GiB\" }",
        Some("repeat") => {
            "a table: repeat = { times = 2, steps = [{ alloc = … }, { free = \"a\" }] }"
        }
        Some("step" | "steps") => "a step: a table with one of alloc, free, empty_cache or repeat",
        Some("variant") => "a [[variant]] table: [[variant]] name = \"v\" alloc_conf = \"…\"",
        _ => "a table",
    }
}

/// The deserializer's "invalid type: FOUND, expected WHAT" in the file's
/// words: "KEY expects WHAT (found FOUND)", with TOML's names for what
/// serde calls a sequence (an array) and the `[[step]]` / `[[variant]]`
/// tables for the arrays of them; "missing field `size`" of an inline
/// table is "alloc needs `size`". Each raw table says what it expects
/// (`#[serde(expecting)]`), so no Rust type name ("struct RawAlloc")
/// reaches the message. Where the value is a date or a time
/// (`found_datetime`: its [`datetime_kind`], and what a table there
/// expects), that is what was found, not the table TOML hands serde for
/// it. Any other message is kept.
fn reworded(message: &str, key: Option<&str>, found_datetime: Option<(&str, &str)>) -> String {
    if let Some((found, expected)) = found_datetime
        && message.starts_with("unknown field `$__toml_private_datetime`")
    {
        return match key {
            Some(key) => format!("{key} expects {expected} (found {found})"),
            None => format!("expected {expected} (found {found})"),
        };
    }
    if let (Some(field), Some(key)) = (
        message
            .strip_prefix("missing field `")
            .and_then(|f| f.strip_suffix('`')),
        key,
    ) {
        return format!("{key} needs `{field}`");
    }
    let Some((found, expected)) = message
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected "))
    else {
        return message.to_string();
    };
    // TOML's names for serde's.
    let found = match (found, found_datetime) {
        ("map", Some((datetime, _))) => datetime,
        ("sequence", _) => "an array",
        ("map", None) => "a table",
        (other, _) => other,
    };
    let expected = match (expected, key) {
        ("a sequence", Some(key @ ("step" | "variant"))) => {
            format!("[[{key}]] tables (an array of tables)")
        }
        ("a sequence", _) => "an array".to_string(),
        (other, _) => other.to_string(),
    };
    match key {
        Some(key) => format!("{key} expects {expected} (found {found})"),
        None => format!("expected {expected} (found {found})"),
    }
}

// ------------------------------------------------------------------ raw form

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a scenario: name, title, explanation, device_memory and [[step]] tables"
)]
struct RawScenario {
    name: String,
    title: String,
    explanation: String,
    device_memory: RawSize,
    #[serde(default)]
    context: Option<RawSize>,
    #[serde(default)]
    alloc_conf: Option<String>,
    #[serde(default)]
    variant: Vec<RawVariant>,
    #[serde(default)]
    step: Vec<RawStep>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a [[variant]] table: [[variant]] name = \"v\" alloc_conf = \"…\""
)]
struct RawVariant {
    name: String,
    #[serde(default)]
    alloc_conf: Option<String>,
    #[serde(default)]
    worker_contexts: Option<RawInt>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a step: a table with one of alloc, free, empty_cache or repeat"
)]
struct RawStep {
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    only: Option<Vec<String>>,
    #[serde(default)]
    alloc: Option<RawAlloc>,
    #[serde(default)]
    free: Option<toml::Value>,
    #[serde(default)]
    empty_cache: Option<bool>,
    #[serde(default)]
    repeat: Option<RawRepeat>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table: alloc = { name = \"a\", size = \"1GiB\" }"
)]
struct RawAlloc {
    name: String,
    size: RawSize,
    #[serde(default)]
    count: Option<RawInt>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table: repeat = { times = 2, steps = [{ alloc = … }, { free = \"a\" }] }"
)]
struct RawRepeat {
    times: RawInt,
    steps: Vec<RawStep>,
}

/// A size field: a string with its unit (`"96MiB"`, `"4096B"`), checked
/// later. A bare
/// TOML number is refused where it stands, with the question the command
/// line asks ("24 what?"), not serde's "invalid type: integer `24`".
#[derive(Debug, Clone, PartialEq)]
struct RawSize(String);

impl std::ops::Deref for RawSize {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for RawSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, Visitor};
        struct Size;
        fn what<E: Error>(n: impl std::fmt::Display) -> E {
            // The units a string of this number would be told
            // (`bare_size_suggestions`), each in the file's quotes.
            let n = n.to_string();
            let suggestions = bare_size_suggestions(&n, |_| true);
            let quoted = |text: &str| format!("\"{}\"", cut(text));
            let shown: Vec<String> = suggestions.iter().map(|s| s.shown(quoted)).collect();
            E::custom(match shown.as_slice() {
                [] => format!("{n} what? a size is a string with its unit, such as \"24GiB\""),
                [only] if suggestions.iter().all(|s| s.unit == "B") => {
                    format!("{n} what? a size is a string with its unit: as bytes, write {only}")
                }
                [only] => format!("{n} what? a size is a string with its unit: write e.g. {only}"),
                [rest @ .., last] => format!(
                    "{n} what? a size is a string with its unit: write e.g. {} or {last}",
                    rest.join(", ")
                ),
            })
        }
        impl Visitor<'_> for Size {
            type Value = RawSize;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a size string such as \"24GiB\"")
            }
            fn visit_str<E>(self, v: &str) -> Result<RawSize, E> {
                Ok(RawSize(v.to_string()))
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<RawSize, E> {
                Err(what(v))
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<RawSize, E> {
                Err(what(v))
            }
            fn visit_f64<E: Error>(self, v: f64) -> Result<RawSize, E> {
                Err(what(v))
            }
        }
        deserializer.deserialize_any(Size)
    }
}

/// An integer field as the file wrote it, of any size, or what was there
/// instead: its range is checked with the key's own message ("'count'
/// expects an integer 1–10000, found -1"), not serde's ("invalid value:
/// integer `-1`, expected u32").
#[derive(Debug, Clone, PartialEq)]
enum RawInt {
    Int(i128),
    /// Not an integer (or one past `i128`): how to show it.
    Other(String),
}

impl RawInt {
    /// The value when it is an integer in `range`, else "'KEY' expects an
    /// integer LO–HI, found …".
    fn within<T>(&self, key: &str, range: std::ops::RangeInclusive<T>) -> Result<T, String>
    where
        T: Copy + PartialOrd + std::fmt::Display + TryFrom<i128>,
    {
        let found = match self {
            RawInt::Int(n) => match T::try_from(*n) {
                Ok(v) if range.contains(&v) => return Ok(v),
                _ => n.to_string(),
            },
            RawInt::Other(shown) => shown.clone(),
        };
        Err(format!(
            "'{key}' expects an integer {}–{}, found {found}",
            range.start(),
            range.end()
        ))
    }
}

impl<'de> Deserialize<'de> for RawInt {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::value::MapAccessDeserializer;
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = RawInt;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_bool<E>(self, v: bool) -> Result<RawInt, E> {
                Ok(RawInt::Other(v.to_string()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<RawInt, E> {
                Ok(RawInt::Int(i128::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<RawInt, E> {
                Ok(RawInt::Int(i128::from(v)))
            }
            fn visit_i128<E>(self, v: i128) -> Result<RawInt, E> {
                Ok(RawInt::Int(v))
            }
            fn visit_u128<E>(self, v: u128) -> Result<RawInt, E> {
                Ok(i128::try_from(v).map_or_else(|_| RawInt::Other(v.to_string()), RawInt::Int))
            }
            fn visit_f64<E>(self, v: f64) -> Result<RawInt, E> {
                Ok(RawInt::Other(v.to_string()))
            }
            fn visit_str<E>(self, v: &str) -> Result<RawInt, E> {
                Ok(RawInt::Other(format!("\"{}\"", cut(v))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawInt, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(RawInt::Other("a list".to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawInt, A::Error> {
                // A date or a time reaches serde as a table of one private
                // key: toml's own Value tells it from a table.
                let value = toml::Value::deserialize(MapAccessDeserializer::new(map))?;
                Ok(RawInt::Other(match value {
                    toml::Value::Datetime(d) => datetime_kind(&d).to_string(),
                    _ => "a table".to_string(),
                }))
            }
        }
        deserializer.deserialize_any(Any)
    }
}

// --------------------------------------------------------------- checked form

/// A checked scenario, ready to run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Scenario {
    pub name: String,
    pub title: String,
    /// One paragraph: what the scenario shows and why.
    pub explanation: String,
    /// Device capacity in bytes.
    pub device_memory: u64,
    /// Driver memory outside the allocator (CUDA context), in bytes.
    pub context: u64,
    /// At least one; a file without `[[variant]]` has one named `default`.
    pub variants: Vec<Variant>,
    /// The unrolled steps (repeats and labels expanded).
    pub steps: Vec<Step>,
}

/// One run of a scenario's steps under allocator settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Variant {
    pub name: String,
    /// PYTORCH_CUDA_ALLOC_CONF syntax; empty = PyTorch's defaults.
    pub alloc_conf: String,
    /// Other processes on the device that each pay a CUDA context of the
    /// scenario's `context` size (e.g. DataLoader workers that touched CUDA).
    pub worker_contexts: u32,
}

impl Variant {
    /// Bytes of the device used outside the allocator: the main process's
    /// context and one more per worker context.
    pub fn external_use(&self, context: u64) -> u64 {
        context.saturating_mul(1 + u64::from(self.worker_contexts))
    }

    /// The processes on the device, each with a `context`-byte CUDA
    /// context: the main one ([`MAIN_PID`]) and a worker per worker
    /// context, numbered after it, as NVML would list them for PyTorch's
    /// OOM message.
    pub fn processes(&self, context: u64) -> SimProcesses {
        SimProcesses {
            others: (1..=self.worker_contexts)
                .map(|n| (MAIN_PID.saturating_add(n), context))
                .collect(),
            ..Variant::default_processes(context)
        }
    }

    /// The processes of a variant without workers: the main one alone.
    pub fn default_processes(context: u64) -> SimProcesses {
        SimProcesses {
            pid: MAIN_PID,
            context,
            others: Vec::new(),
        }
    }
}

/// The pid a scenario's main process has in PyTorch's OOM message (a
/// simulated one: the first the dashboard's simulation gives out too);
/// its workers follow it.
pub const MAIN_PID: u32 = 4242;

/// The most worker contexts a variant may declare.
pub const MAX_WORKER_CONTEXTS: u32 = 64;

/// One unrolled step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub label: String,
    /// The variants this step runs in; `None` = all.
    pub only: Option<Vec<String>>,
    pub action: Action,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Allocate `size` bytes once per name, in order.
    Alloc { names: Vec<String>, size: u64 },
    /// Free these patterns: exact names, or prefixes when ending in `*`.
    Free { patterns: Vec<String> },
    /// `torch.cuda.empty_cache()`.
    EmptyCache,
}

impl Step {
    /// Whether this step runs in `variant`.
    pub fn runs_in(&self, variant: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|v| v.iter().any(|n| n == variant))
    }
}

/// `text` as a size, read as the command line reads it
/// ([`typed_size`]): too large and malformed are told apart, a fraction
/// of a byte is refused (`0.5B`, not 1 B), and a fraction of a larger unit
/// is the whole bytes in it (`1.1GiB` is 1181116006 B). Zero is the
/// caller's to refuse, with what its key needs (a `context` may be none).
fn size_of(text: &str, what: impl FnOnce() -> String) -> Result<u64, ScenarioError> {
    // A bare number could be bytes or GiB: `device_memory = "8"` ran an
    // 8-byte GPU unsaid. Refused as `--capacity 8` is, in its words.
    if is_bare_number(text) {
        let t = text.trim();
        let suggestions = bare_size_suggestions(t, |_| true);
        if let Some(message) = bare_size_message(&cut(t), &suggestions, cut) {
            return Err(ScenarioError::NoUnit {
                what: what(),
                message,
            });
        }
        // No unit takes it (too large in every one): the number's own
        // refusal below says its limit.
    }
    let refusal = match typed_size(text, MAX_PARSED_SIZE) {
        Ok(bytes) => return Ok(bytes),
        Err(SizeRefusal::Zero) => return Ok(0),
        Err(refusal) => refusal,
    };
    let (what, text) = (what(), cut(text));
    Err(match refusal {
        SizeRefusal::TooLarge => ScenarioError::SizeTooLarge { what, text },
        SizeRefusal::NotWholeBytes => ScenarioError::NotWholeBytes { what, text },
        // A minus sign is no size a scenario takes: "not a size" as before.
        SizeRefusal::Negative | SizeRefusal::NotASize | SizeRefusal::Zero => {
            ScenarioError::BadSize { what, text }
        }
    })
}

fn check_alloc_conf(text: &str, what: impl FnOnce() -> String) -> Result<(), ScenarioError> {
    AllocatorConfig::parse_modelled(text)
        .map(|_| ())
        .map_err(|e| ScenarioError::BadAllocConf {
            what: what(),
            text: cut(text),
            reason: e.to_string(),
        })
}

/// Parses and checks a scenario file's text.
pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
    let raw: RawScenario = toml::from_str(text).map_err(|e| syntax(text, &e))?;
    let name = raw.name.trim().to_string();
    if name.is_empty() {
        return Err(ScenarioError::Invalid("`name` must not be empty".into()));
    }
    let device_memory = size_of(&raw.device_memory, || "device_memory".into())?;
    if device_memory == 0 {
        return Err(ScenarioError::Invalid(
            "device_memory must be more than 0 bytes".into(),
        ));
    }
    let context = match &raw.context {
        Some(t) => size_of(t, || "context".into())?,
        None => 0,
    };
    if context >= device_memory {
        return Err(ScenarioError::Invalid(format!(
            "the context ({}) leaves nothing of device_memory ({})",
            human_bytes(context),
            human_bytes(device_memory)
        )));
    }
    let base_conf = raw.alloc_conf.clone().unwrap_or_default();
    check_alloc_conf(&base_conf, || "alloc_conf".into())?;

    if raw.variant.len() > MAX_VARIANTS {
        return Err(ScenarioError::Invalid(format!(
            "{} [[variant]] tables; at most {MAX_VARIANTS} are run",
            raw.variant.len()
        )));
    }
    let mut variants = Vec::new();
    if raw.variant.is_empty() {
        variants.push(Variant {
            name: DEFAULT_VARIANT.into(),
            alloc_conf: base_conf.clone(),
            worker_contexts: 0,
        });
    }
    for v in &raw.variant {
        let vname = v.name.trim().to_string();
        if vname.is_empty() {
            return Err(ScenarioError::Invalid(
                "a [[variant]] has an empty name".into(),
            ));
        }
        if variants.iter().any(|x: &Variant| x.name == vname) {
            return Err(ScenarioError::Invalid(format!(
                "variant '{}' is defined twice",
                cut(&vname)
            )));
        }
        let conf = v.alloc_conf.clone().unwrap_or_else(|| base_conf.clone());
        check_alloc_conf(&conf, || format!("variant '{}'", cut(&vname)))?;
        let worker_contexts = v
            .worker_contexts
            .as_ref()
            .map(|w| w.within("worker_contexts", 0..=MAX_WORKER_CONTEXTS))
            .transpose()
            .map_err(|m| ScenarioError::Invalid(format!("variant '{}': {m}", cut(&vname))))?
            .unwrap_or(0);
        let variant = Variant {
            name: vname,
            alloc_conf: conf,
            worker_contexts,
        };
        if variant.external_use(context) >= device_memory {
            return Err(ScenarioError::Invalid(format!(
                "variant '{}': its {} contexts leave nothing of device_memory",
                variant.name,
                1 + worker_contexts
            )));
        }
        variants.push(variant);
    }

    let mut unrolled = Unrolled::default();
    let names: Vec<&str> = variants.iter().map(|v| v.name.as_str()).collect();
    for (i, s) in raw.step.iter().enumerate() {
        unroll(s, &(i + 1).to_string(), None, None, &names, &mut unrolled)?;
    }
    let steps = unrolled.steps;
    if steps.is_empty() {
        return Err(ScenarioError::Invalid(
            "the scenario has no [[step]]".into(),
        ));
    }
    let scenario = Scenario {
        name,
        title: raw.title.trim().to_string(),
        explanation: raw
            .explanation
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
        device_memory,
        context,
        variants,
        steps,
    };
    for v in &scenario.variants {
        check_names(&scenario, &v.name)?;
    }
    Ok(scenario)
}

/// One pass of a `repeat`: which (from 0) of how many.
#[derive(Debug, Clone, Copy)]
struct Iteration {
    index: u32,
    times: u32,
}

/// `text` with the iteration's placeholders filled: `{i}` counts from 0,
/// `{n}` from 1 and `{r}` down to 0 (`times - 1 - i`: a backward pass
/// visits the layers a forward pass named `a{i}` last to first).
fn substitute(text: &str, iteration: Option<Iteration>) -> String {
    match iteration {
        Some(Iteration { index, times }) => text
            .replace("{i}", &index.to_string())
            .replace("{n}", &(u64::from(index) + 1).to_string())
            .replace(
                "{r}",
                &times.saturating_sub(index).saturating_sub(1).to_string(),
            ),
        None => text.to_string(),
    }
}

/// The steps unrolled so far, and the allocations they make.
#[derive(Default)]
struct Unrolled {
    steps: Vec<Step>,
    allocations: usize,
}

/// Unrolls one raw step (recursively for `repeat`) into `out`. Every call
/// that returns `Ok` adds at least one step (a `repeat` has at least one
/// inner step and runs at least once), so the bound on the steps, checked
/// after every step pushed, ends a `repeat` of any `times` early.
fn unroll(
    s: &RawStep,
    id: &str,
    iteration: Option<Iteration>,
    outer_only: Option<&Vec<String>>,
    variants: &[&str],
    out: &mut Unrolled,
) -> Result<(), ScenarioError> {
    let err = |message: String| ScenarioError::Step {
        step: id.to_string(),
        message,
    };
    let actions = [
        s.alloc.is_some(),
        s.free.is_some(),
        s.empty_cache.is_some(),
        s.repeat.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if actions != 1 {
        return Err(err(format!(
            "needs exactly one of `alloc`, `free`, `empty_cache`, `repeat` (found {actions})"
        )));
    }
    if let Some(only) = &s.only {
        if only.is_empty() {
            return Err(err("`only` lists no variant".into()));
        }
        if let Some(unknown) = only.iter().find(|n| !variants.contains(&n.as_str())) {
            return Err(err(format!(
                "`only` names variant '{}', which is not defined (variants: {})",
                cut(unknown),
                cut(&variants.join(", "))
            )));
        }
    }
    let only = match (outer_only, &s.only) {
        (None, None) => None,
        (Some(o), None) => Some(o.clone()),
        (None, Some(i)) => Some(i.clone()),
        (Some(o), Some(i)) => Some(i.iter().filter(|n| o.contains(n)).cloned().collect()),
    };
    let label = s.label.as_deref().map(|l| substitute(l, iteration));

    if let Some(r) = &s.repeat {
        let times = r
            .times
            .within("times", 1..=u32::MAX)
            .map_err(|m| err(format!("repeat: {m}")))?;
        if r.steps.is_empty() {
            return Err(err("`repeat.steps` is empty".into()));
        }
        for t in 0..times {
            for (j, inner) in r.steps.iter().enumerate() {
                let inner_id = format!("{id}, repeat {}/{times}, step {}", t + 1, j + 1);
                let before = out.steps.len();
                let pass = Iteration { index: t, times };
                unroll(inner, &inner_id, Some(pass), only.as_ref(), variants, out)?;
                // A repeat's own label counts its own iterations ("micro-batch
                // {n}" reads 1, 2, 3): substituted with the outer one it
                // printed a literal "{n}" at the top level.
                if let Some(l) = s.label.as_deref().map(|l| substitute(l, Some(pass))) {
                    for step in out.steps.get_mut(before..).unwrap_or_default() {
                        step.label = format!("{l}: {}", step.label);
                    }
                }
            }
        }
        return Ok(());
    }

    let (action, default_label) = if let Some(a) = &s.alloc {
        let name = substitute(a.name.trim(), iteration);
        if name.is_empty() || name.contains('*') {
            return Err(err(format!(
                "alloc name '{}' must be non-empty and without '*'",
                cut(&name)
            )));
        }
        let size = size_of(&a.size, || format!("step {id}: alloc '{}'", cut(&name)))?;
        if size == 0 {
            return Err(err(format!("alloc '{}' has size 0", cut(&name))));
        }
        let count = a
            .count
            .as_ref()
            .map(|c| c.within("count", 1..=MAX_COUNT))
            .transpose()
            .map_err(|m| err(format!("alloc '{}': {m}", cut(&name))))?;
        let allocations = count.map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
        if allocations > MAX_ALLOCATIONS.saturating_sub(out.allocations) {
            return Err(err(format!(
                "the scenario allocates more than {MAX_ALLOCATIONS} times \
                 (an alloc with `count` allocates several)"
            )));
        }
        let (names, label) = match count {
            None => (vec![name.clone()], format!("alloc {name} ({})", a.size.0)),
            Some(n) => (
                (0..n).map(|k| format!("{name}{k}")).collect(),
                format!(
                    "alloc {name}0..{name}{} ({n} × {})",
                    n.saturating_sub(1),
                    a.size.0
                ),
            ),
        };
        (Action::Alloc { names, size }, label)
    } else if let Some(f) = &s.free {
        let as_name = |v: &toml::Value| v.as_str().map(|p| substitute(p.trim(), iteration));
        let patterns: Option<Vec<String>> = match f {
            toml::Value::Array(items) => items.iter().map(as_name).collect(),
            one => as_name(one).map(|p| vec![p]),
        };
        let Some(patterns) = patterns else {
            return Err(err(format!(
                "`free = {}`: write a name, a prefix ending in '*', or a list of them",
                cut(&f.to_string())
            )));
        };
        if patterns.is_empty() {
            return Err(err("`free` lists no name".into()));
        }
        if let Some(bad) = patterns
            .iter()
            .find(|p| p.is_empty() || p.trim_end_matches('*').contains('*'))
        {
            return Err(err(format!(
                "free pattern '{}' must be a name or a prefix ending in a single '*'",
                cut(bad)
            )));
        }
        let label = format!("free {}", patterns.join(", "));
        (Action::Free { patterns }, label)
    } else {
        if s.empty_cache != Some(true) {
            return Err(err("`empty_cache` may only be `true`".into()));
        }
        (Action::EmptyCache, "empty_cache()".to_string())
    };
    if let Action::Alloc { names, .. } = &action {
        out.allocations = out.allocations.saturating_add(names.len());
    }
    out.steps.push(Step {
        label: label.unwrap_or(default_label),
        only,
        action,
    });
    if out.steps.len() > MAX_STEPS {
        return Err(err(format!("unrolls to more than {MAX_STEPS} steps")));
    }
    Ok(())
}

/// Expands free patterns against the names held, in allocation order.
pub(crate) fn matching<'a>(pattern: &str, held: &'a [String]) -> Vec<&'a String> {
    match pattern.strip_suffix('*') {
        Some(prefix) => held.iter().filter(|n| n.starts_with(prefix)).collect(),
        None => held.iter().filter(|n| *n == pattern).collect(),
    }
}

/// Simulates `variant`'s steps by name: no name allocated twice while held,
/// no free of a name not held, no pattern matching nothing.
fn check_names(s: &Scenario, variant: &str) -> Result<(), ScenarioError> {
    let mut held: Vec<String> = Vec::new();
    for (i, step) in s.steps.iter().enumerate() {
        if !step.runs_in(variant) {
            continue;
        }
        let err = |message: String| ScenarioError::Names {
            variant: cut(variant),
            step: format!("{} ({})", i + 1, cut(&step.label)),
            message,
        };
        match &step.action {
            Action::Alloc { names, .. } => {
                for n in names {
                    if held.contains(n) {
                        return Err(err(format!("'{}' is allocated while already held", cut(n))));
                    }
                    held.push(n.clone());
                }
            }
            Action::Free { patterns } => {
                let mut gone = BTreeSet::new();
                for p in patterns {
                    let m = matching(p, &held);
                    if m.is_empty() {
                        return Err(err(format!("frees '{}', but no such name is held", cut(p))));
                    }
                    gone.extend(m.into_iter().cloned());
                }
                held.retain(|n| !gone.contains(n));
            }
            Action::EmptyCache => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str =
        "name = \"t\"\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = \"1GiB\"\n";

    fn steps(body: &str) -> Result<Scenario, ScenarioError> {
        parse(&format!("{HEADER}{body}"))
    }

    #[test]
    fn count_expands_to_numbered_names_with_a_default_label() {
        let s = steps("[[step]]\nalloc = { name = \"w\", size = \"2MiB\", count = 3 }\n")
            .expect("parses");
        assert_eq!(
            s.steps[0].action,
            Action::Alloc {
                names: vec!["w0".into(), "w1".into(), "w2".into()],
                size: 2 << 20
            }
        );
        assert_eq!(s.steps[0].label, "alloc w0..w2 (3 × 2MiB)");
    }

    #[test]
    fn a_prefix_pattern_matches_held_names_in_allocation_order() {
        let held = vec!["act1".to_string(), "w0".into(), "act0".into()];
        assert_eq!(matching("act*", &held), vec!["act1", "act0"]);
        assert_eq!(matching("w0", &held), vec!["w0"]);
        assert!(matching("w", &held).is_empty());
    }

    #[test]
    fn repeat_only_is_intersected_with_its_inner_steps_only() {
        let s = parse(&format!(
            "{HEADER}[[variant]]\nname = \"a\"\n[[variant]]\nname = \"b\"\n\
             [[step]]\nonly = [\"a\"]\nrepeat = {{ times = 2, steps = [\n\
             {{ empty_cache = true }},\n{{ only = [\"b\"], empty_cache = true }},\n] }}\n"
        ))
        .expect("parses");
        assert_eq!(s.steps.len(), 4);
        assert!(s.steps[0].runs_in("a") && !s.steps[0].runs_in("b"));
        assert!(!s.steps[1].runs_in("a") && !s.steps[1].runs_in("b"));
    }

    #[test]
    fn a_repeats_own_label_counts_its_own_iterations() {
        let s = steps(
            "[[step]]\nlabel = \"batch {n} ({i})\"\nrepeat = { times = 2, steps = [\n\
             { label = \"drop\", empty_cache = true },\n] }\n",
        )
        .expect("parses");
        let labels: Vec<&str> = s.steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(labels, ["batch 1 (0): drop", "batch 2 (1): drop"]);
    }

    #[test]
    fn r_counts_a_repeats_iterations_down_to_zero_as_backward_visits_layers() {
        let s = steps(
            "[[step]]\nrepeat = { times = 3, steps = [\n\
             { label = \"layer {r} ({n} of 3)\", empty_cache = true },\n] }\n",
        )
        .expect("parses");
        let labels: Vec<&str> = s.steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            ["layer 2 (1 of 3)", "layer 1 (2 of 3)", "layer 0 (3 of 3)"]
        );
    }

    #[test]
    fn a_size_written_as_a_bare_number_asks_what_unit_where_it_stands() {
        let text = "name = \"t\"\ntitle = \"t\"\nexplanation = \"e\"\ndevice_memory = 24\n";
        let e = parse(text).expect_err("a bare number").to_string();
        assert!(
            e.contains("line 4, column 17: 24 what? a size is a string with its unit"),
            "{e}"
        );
        assert!(!e.contains("invalid type"), "{e}");
        let e = steps("[[step]]\nalloc = { name = \"w\", size = 96 }\n")
            .expect_err("a bare size")
            .to_string();
        assert!(e.contains("96 what?"), "{e}");
    }

    #[test]
    fn a_size_too_large_is_told_from_a_malformed_one_as_on_the_command_line() {
        let refused = |size: &str| {
            steps(&format!(
                "[[step]]\nempty_cache = true\n\n[[step]]\nalloc = {{ name = \"w\", size = \"{size}\" }}\n"
            ))
            .expect_err("refused")
            .to_string()
        };
        // Said as an alloc's other errors are: `step 2: alloc 'w': …`.
        assert_eq!(
            refused("16EiB"),
            "step 2: alloc 'w': '16EiB' is more than the largest size, \
             16 EiB - 1 B (18446744073709551615 B)"
        );
        assert_eq!(
            refused("12 parsecs"),
            "step 2: alloc 'w': '12 parsecs' is not a size: write e.g. 96MiB, 1.5GiB, 512KiB \
             or 4096B"
        );
        // The largest size itself is a size.
        assert!(
            steps("[[step]]\nalloc = { name = \"w\", size = \"18446744073709551615B\" }\n").is_ok()
        );
    }

    #[test]
    fn empty_cache_false_and_zero_counts_are_refused() {
        let e = steps("[[step]]\nempty_cache = false\n").expect_err("refused");
        assert!(e.to_string().contains("only be `true`"), "{e}");
        let e = steps("[[step]]\nalloc = { name = \"w\", size = \"2MiB\", count = 0 }\n")
            .expect_err("refused");
        assert!(
            e.to_string()
                .contains("alloc 'w': 'count' expects an integer 1–10000, found 0"),
            "{e}"
        );
    }

    #[test]
    fn an_integer_out_of_range_says_what_its_key_expects_not_the_parsers_type() {
        for (field, said) in [
            (
                "alloc = { name = \"w\", size = \"1MiB\", count = -1 }",
                "step 1: alloc 'w': 'count' expects an integer 1–10000, found -1",
            ),
            (
                "alloc = { name = \"w\", size = \"1MiB\", count = 99999999999999999999 }",
                "'count' expects an integer 1–10000, found 99999999999999999999",
            ),
            (
                "alloc = { name = \"w\", size = \"1MiB\", count = \"x\" }",
                "'count' expects an integer 1–10000, found \"x\"",
            ),
            (
                "alloc = { name = \"w\", size = \"1MiB\", count = 2.5 }",
                "'count' expects an integer 1–10000, found 2.5",
            ),
            (
                "repeat = { times = -2, steps = [{ empty_cache = true }] }",
                "step 1: repeat: 'times' expects an integer 1–4294967295, found -2",
            ),
            (
                "repeat = { times = [1], steps = [{ empty_cache = true }] }",
                "'times' expects an integer 1–4294967295, found a list",
            ),
        ] {
            let e = steps(&format!("[[step]]\n{field}\n")).expect_err("refused");
            assert!(e.to_string().contains(said), "{field}: {e}");
        }
        for (value, found) in [("-1", "-1"), ("65", "65"), ("true", "true")] {
            let e = steps(&format!(
                "[[variant]]\nname = \"a\"\nworker_contexts = {value}\n\
                 [[step]]\nempty_cache = true\n"
            ))
            .expect_err("refused");
            assert!(
                e.to_string().contains(&format!(
                    "variant 'a': 'worker_contexts' expects an integer 0–64, found {found}"
                )),
                "{value}: {e}"
            );
        }
    }

    #[test]
    fn allocating_a_held_name_again_is_refused() {
        let e = steps(
            "[[step]]\nalloc = { name = \"x\", size = \"2MiB\" }\n\
             [[step]]\nalloc = { name = \"x\", size = \"2MiB\" }\n",
        )
        .expect_err("refused");
        assert!(
            e.to_string()
                .contains("'x' is allocated while already held"),
            "{e}"
        );
    }

    #[test]
    fn a_context_as_large_as_the_device_is_refused() {
        let e = parse(&format!(
            "{HEADER}context = \"1GiB\"\n[[step]]\nempty_cache = true\n"
        ))
        .expect_err("refused");
        assert!(e.to_string().contains("context"), "{e}");
    }

    #[test]
    fn a_file_without_steps_is_refused() {
        let e = parse(HEADER).expect_err("refused");
        assert!(e.to_string().contains("no [[step]]"), "{e}");
    }

    #[test]
    fn a_repeat_of_billions_of_times_is_refused_at_the_step_bound() {
        let e = steps(
            "[[step]]\nrepeat = { times = 4000000000, steps = [ { empty_cache = true } ] }\n",
        )
        .expect_err("refused");
        let text = e.to_string();
        assert!(
            text.contains(&format!("more than {MAX_STEPS} steps")),
            "{text}"
        );
        assert!(
            text.contains(&format!("repeat {}/4000000000", MAX_STEPS + 1)),
            "{text}"
        );
    }

    #[test]
    fn nested_repeats_are_refused_as_soon_as_they_pass_the_step_bound() {
        let inner = "{ repeat = { times = 100000, steps = [ { empty_cache = true } ] } }";
        let e = steps(&format!(
            "[[step]]\nrepeat = {{ times = 100000, steps = [ {inner} ] }}\n"
        ))
        .expect_err("refused");
        assert!(
            e.to_string()
                .contains("repeat 1/100000, step 1, repeat 10001/100000"),
            "{e}"
        );
    }

    #[test]
    fn a_count_beyond_the_allocation_bound_is_refused_before_naming_them() {
        let e = steps("[[step]]\nalloc = { name = \"w\", size = \"512B\", count = 4000000000 }\n")
            .expect_err("refused");
        assert!(
            e.to_string()
                .contains(&format!("'count' expects an integer 1–{MAX_ALLOCATIONS}")),
            "{e}"
        );
        let at_the_bound = format!(
            "[[step]]\nalloc = {{ name = \"w\", size = \"512B\", count = {MAX_ALLOCATIONS} }}\n"
        );
        assert!(steps(&at_the_bound).is_ok());
        let over = format!("{at_the_bound}[[step]]\nalloc = {{ name = \"x\", size = \"512B\" }}\n");
        assert!(steps(&over).is_err());
    }

    #[test]
    fn more_variants_than_the_bound_are_refused() {
        let variants: String = (0..=MAX_VARIANTS)
            .map(|i| format!("[[variant]]\nname = \"v{i}\"\n"))
            .collect();
        let e = steps(&format!("{variants}[[step]]\nempty_cache = true\n")).expect_err("refused");
        assert!(
            e.to_string().contains(&format!("at most {MAX_VARIANTS}")),
            "{e}"
        );
    }

    #[test]
    fn a_syntax_error_is_one_line_with_its_place_and_without_the_source_line() {
        let long = "a".repeat(1 << 20);
        let e = parse(&format!("name = \"t\"\ntitle = \"{long}\" junk\n")).expect_err("refused");
        let text = e.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.len() < 400, "{} bytes", text.len());
        assert!(
            text.contains(&format!("line 2, column {}", long.len() + 12)),
            "{text}"
        );
    }

    #[test]
    fn a_long_name_is_quoted_cut_short() {
        let name = "n".repeat(100_000);
        let e = steps(&format!(
            "[[step]]\nalloc = {{ name = \"{name}\", size = \"0\" }}\n"
        ))
        .expect_err("refused");
        assert!(e.to_string().len() < 400, "{} bytes", e.to_string().len());
        assert!(e.to_string().contains("(100000 bytes)"), "{e}");
    }
}
