//! The probe wire protocol, versions 1 and 2 (`docs/probe-protocol.md`): one
//! JSON object per `\n`-terminated line, at most [`MAX_LINE_BYTES`] a line.
//! Version 2 only adds keys and message types to version 1: a v1 probe
//! sends figures, a v2 probe also answers snapshot requests.
//!
//! [`LineReader`] cuts a byte stream into lines (dropping oversized ones up
//! to their newline) and [`parse_line`] turns one line into a typed
//! [`Message`]. Neither panics on any input: every problem is a
//! [`ProtocolError`] that says what was wrong, with the line number
//! ([`LineError`]) when the reader knows it.

use std::collections::BTreeMap;
use std::io::{self, BufRead};
use std::path::PathBuf;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::alloc::{BlockInfo, BlockState, DeviceStats, PoolKind, SegmentInfo};
use crate::quote::{cut, cut_to, visible_controls};

/// The newest protocol version this vramtop speaks.
pub const PROTOCOL_VERSION: u64 = 2;
/// The oldest protocol version this vramtop still reads (figures only).
pub const OLDEST_PROTOCOL_VERSION: u64 = 1;
/// The hello capability of a probe that serves snapshot requests.
pub const CAPABILITY_SNAPSHOT: &str = "snapshot";
/// The longest request id (characters of `[A-Za-z0-9_.-]`).
pub const MAX_REQUEST_ID_CHARS: usize = 64;
/// The longest line accepted, newline included (bytes): 1 MiB. A
/// `memory_stats()` dict is ~6 KiB; a segments message of a few thousand
/// blocks fits comfortably.
pub const MAX_LINE_BYTES: usize = 1_048_576;

/// What is wrong with one line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("not JSON ({0})")]
    NotJson(String),
    #[error("not a JSON object")]
    NotObject,
    #[error("no \"v\" (protocol version)")]
    NoVersion,
    #[error("protocol version {0} not supported")]
    Version(String),
    #[error("no \"type\" string")]
    NoType,
    #[error("bad {kind} message: {detail}")]
    Bad { kind: String, detail: String },
    #[error("line longer than {MAX_LINE_BYTES} bytes dropped ({bytes} bytes)")]
    Oversized { bytes: u64 },
    #[error("incomplete last line ({bytes} bytes without a newline)")]
    Partial { bytes: usize },
}

impl ProtocolError {
    /// The probe speaks another protocol version: vramtop disconnects.
    pub fn is_version(&self) -> bool {
        matches!(self, ProtocolError::Version(_))
    }
}

/// A [`ProtocolError`] with the (1-based) line it was found on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {error}")]
pub struct LineError {
    pub line: u64,
    pub error: ProtocolError,
}

/// The first message: who the probe is.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Hello {
    /// The protocol version of the probe (1 or 2).
    #[serde(rename = "v")]
    pub version: u64,
    /// `os.getpid()` inside the probe's PID namespace.
    pub pid: u32,
    #[serde(default)]
    pub host: Option<String>,
    #[serde(default)]
    pub argv: Vec<String>,
    /// `torch.__version__`.
    #[serde(default)]
    pub torch: Option<String>,
    /// CUDA device ordinals the process has initialised.
    #[serde(default)]
    pub devices: Vec<u32>,
    #[serde(default)]
    pub stats_interval_s: Option<f64>,
    #[serde(default)]
    pub segments_interval_s: Option<f64>,
    /// Unix seconds.
    #[serde(default)]
    pub time: Option<f64>,
    /// `RANK` (or `SLURM_PROCID`) of a distributed run; v2 only.
    #[serde(default)]
    pub rank: Option<u32>,
    /// `LOCAL_RANK` (or `SLURM_LOCALID`); v2 only.
    #[serde(default)]
    pub local_rank: Option<u32>,
    /// `WORLD_SIZE` (or `SLURM_NTASKS`); v2 only.
    #[serde(default)]
    pub world_size: Option<u32>,
    /// The `max_entries` the probe turned history recording on with, or
    /// `None` when the probe did not turn it on (the script may have).
    #[serde(default)]
    pub record_history: Option<u64>,
    /// What the probe serves beyond figures, e.g. `"snapshot"`; v2 only.
    #[serde(default)]
    pub capabilities: Vec<String>,
}

impl Hello {
    /// Whether the probe answers snapshot requests (a v2 probe that says
    /// so; a v1 probe is never sent a request).
    pub fn serves_snapshots(&self) -> bool {
        self.version >= 2 && self.capabilities.iter().any(|c| c == CAPABILITY_SNAPSHOT)
    }

    /// "rank 3/8 local 1" (what the hello says of the distributed run),
    /// or `None` when it says nothing.
    pub fn rank_label(&self) -> Option<String> {
        let mut parts = Vec::new();
        match (self.rank, self.world_size) {
            (Some(r), Some(w)) => parts.push(format!("rank {r}/{w}")),
            (Some(r), None) => parts.push(format!("rank {r}")),
            _ => {}
        }
        if let Some(l) = self.local_rank {
            parts.push(format!("local {l}"));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}

/// `torch.cuda.memory_stats(device)` of one device.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub time: Option<f64>,
    /// The CUDA ordinal (inside the probe's `CUDA_VISIBLE_DEVICES`).
    pub device: u32,
    pub stats: DeviceStats,
    /// How many keys of the dict vramtop recognised.
    pub known_keys: usize,
    /// Keys the probe sent as `null` (a non-finite value): unknown, so
    /// left at 0 in `stats` and shown as n/a.
    pub unknown_keys: Vec<String>,
}

/// The segments of one device, as `memory_snapshot()` lists them.
#[derive(Debug, Clone, PartialEq)]
pub struct Segments {
    pub time: Option<f64>,
    pub device: u32,
    pub segments: Vec<SegmentInfo>,
    /// Some block came without its requested size (`null`: PyTorch older
    /// than 2.1). Such a block counts as requested = size, so the bytes
    /// lost to rounding (internal fragmentation) are unknown.
    pub requested_unknown: bool,
}

/// An out-of-memory event (PyTorch's OOM observer).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct Oom {
    #[serde(default)]
    pub time: Option<f64>,
    pub device: u32,
    /// Bytes the failed request asked for.
    #[serde(default)]
    pub alloc_bytes: Option<u64>,
    /// PyTorch's third observer argument under its version-1 name: the
    /// device's total memory, or the allowed maximum under a memory
    /// fraction, in bytes; not what PyTorch has allocated.
    #[serde(default)]
    pub device_allocated: Option<u64>,
    #[serde(default)]
    pub device_free: Option<u64>,
    #[serde(default)]
    pub message: String,
    /// The snapshot the probe wrote of the moment of the OOM (v2), or
    /// `None` when it wrote none.
    #[serde(default)]
    pub snapshot: Option<PathBuf>,
    /// Why no snapshot was written, when writing one failed (v2).
    #[serde(default)]
    pub snapshot_error: Option<String>,
    /// The probe's last OOM, sent again right after `hello` to a client
    /// that connected after it: it happened before this connection.
    #[serde(default)]
    pub earlier: bool,
}

/// The probe began taking the snapshot request `id` asked for.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SnapshotStarted {
    pub id: String,
    #[serde(default)]
    pub time: Option<f64>,
    /// The folder (absolute) the probe writes the file into; `None` from a
    /// probe older than the field. Said before the file is written, so a
    /// client that stops waiting can say where it may still appear.
    #[serde(default)]
    pub dir: Option<PathBuf>,
}

/// The snapshot request `id` asked for is written at `path`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SnapshotDone {
    pub id: String,
    #[serde(default)]
    pub time: Option<f64>,
    pub path: PathBuf,
    /// The file's size.
    #[serde(default)]
    pub bytes: Option<u64>,
    /// Whether any device trace has entries (history was recorded).
    #[serde(default)]
    pub has_trace: bool,
    #[serde(default)]
    pub trace_entries: Option<u64>,
    #[serde(default)]
    pub segments: Option<u64>,
}

/// The probe could not take a snapshot; `id` is `None` when the request
/// it answers was unreadable.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SnapshotFailed {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub time: Option<f64>,
    #[serde(default)]
    pub reason: String,
}

/// Whether `id` may be a request id: 1 to [`MAX_REQUEST_ID_CHARS`]
/// characters of `[A-Za-z0-9_.-]`.
pub fn valid_request_id(id: &str) -> bool {
    (1..=MAX_REQUEST_ID_CHARS).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The one line a client sends: a snapshot request, newline included.
/// `None` for an id the probe would refuse.
pub fn snapshot_request_line(id: &str) -> Option<String> {
    valid_request_id(id).then(|| {
        let line = serde_json::json!({"v": PROTOCOL_VERSION, "type": "snapshot_request", "id": id});
        format!("{line}\n")
    })
}

/// The probe is stopping.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct Bye {
    #[serde(default)]
    pub time: Option<f64>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Hello(Hello),
    /// Boxed: `DeviceStats` is ~1 KiB, the other messages are small.
    Stats(Box<Stats>),
    Segments(Segments),
    Oom(Oom),
    Bye(Bye),
    SnapshotStarted(SnapshotStarted),
    SnapshotDone(SnapshotDone),
    SnapshotFailed(SnapshotFailed),
    /// A type this version does not know (ignored: forward compatibility).
    Unknown(String),
}

#[derive(Deserialize)]
struct StatsWire {
    #[serde(default)]
    time: Option<f64>,
    device: u32,
    /// `null` for a figure the probe could not send as a number.
    stats: BTreeMap<String, Option<serde_json::Number>>,
}

#[derive(Deserialize)]
struct SegmentsWire {
    #[serde(default)]
    time: Option<f64>,
    device: u32,
    segments: Vec<SegmentWire>,
}

#[derive(Deserialize)]
struct SegmentWire {
    address: u64,
    total_size: u64,
    #[serde(default)]
    stream: u64,
    segment_type: String,
    #[serde(default)]
    allocated_size: u64,
    #[serde(default)]
    active_size: u64,
    /// `null` (or absent) before PyTorch 2.1.
    #[serde(default)]
    requested_size: Option<u64>,
    #[serde(default)]
    is_expandable: bool,
    /// `[size, requested_size, state]` in address order; `requested_size`
    /// is `null` before PyTorch 2.1.
    blocks: Vec<(u64, Option<u64>, String)>,
}

fn bad(kind: &str, detail: impl std::fmt::Display) -> ProtocolError {
    ProtocolError::Bad {
        kind: kind.to_string(),
        detail: detail.to_string(),
    }
}

fn typed<T: DeserializeOwned>(kind: &str, value: serde_json::Value) -> Result<T, ProtocolError> {
    // serde quotes a wrong-typed string whole.
    serde_json::from_value(value).map_err(|e| bad(kind, cut_to(&e.to_string(), 200)))
}

/// A stats value as i64: integers as they are, finite floats in range
/// rounded; anything else is an error (a made-up figure is worse than none).
fn stat_value(key: &str, n: &serde_json::Number) -> Result<i64, ProtocolError> {
    if let Some(v) = n.as_i64() {
        return Ok(v);
    }
    match n.as_f64() {
        // i64::MAX as f64 rounds up to 2^63, hence the strict bound.
        Some(f) if f.is_finite() && f >= i64::MIN as f64 && f < i64::MAX as f64 => {
            Ok(f.round() as i64)
        }
        _ => Err(bad(
            "stats",
            format!("\"{}\": {} is out of range", cut(key), cut(&n.to_string())),
        )),
    }
}

/// One segment, and whether a block's requested size was unknown.
fn convert_segment(
    device: u32,
    i: usize,
    w: SegmentWire,
) -> Result<(SegmentInfo, bool), ProtocolError> {
    let kind = "segments";
    let segment_type = PoolKind::parse(&w.segment_type).ok_or_else(|| {
        bad(
            kind,
            format!(
                "segment {i}: segment_type \"{}\" is not small or large",
                cut(&w.segment_type)
            ),
        )
    })?;
    if w.address.checked_add(w.total_size).is_none() {
        return Err(bad(
            kind,
            format!("segment {i}: address + total_size overflows 64 bits"),
        ));
    }
    let mut blocks = Vec::with_capacity(w.blocks.len());
    let mut offset = 0u64;
    let mut requested_unknown = false;
    for (j, (size, requested_size, state)) in w.blocks.into_iter().enumerate() {
        // Unknown: counted as no rounding loss, and said so.
        let requested_size = requested_size.unwrap_or_else(|| {
            requested_unknown = true;
            size
        });
        let state = BlockState::parse(&state).ok_or_else(|| {
            bad(
                kind,
                format!("segment {i} block {j}: unknown state \"{}\"", cut(&state)),
            )
        })?;
        let address = w.address.checked_add(offset).ok_or_else(|| {
            bad(
                kind,
                format!("segment {i} block {j}: address overflows 64 bits"),
            )
        })?;
        offset = offset
            .checked_add(size)
            .filter(|&end| end <= w.total_size)
            .ok_or_else(|| {
                bad(
                    kind,
                    format!(
                        "segment {i}: blocks add up to more than total_size {}",
                        w.total_size
                    ),
                )
            })?;
        blocks.push(BlockInfo {
            address,
            size,
            requested_size,
            state,
        });
    }
    let requested_size = match w.requested_size {
        Some(r) => r,
        None => {
            requested_unknown = true;
            w.allocated_size
        }
    };
    let segment = SegmentInfo {
        device,
        address: w.address,
        total_size: w.total_size,
        allocated_size: w.allocated_size,
        active_size: w.active_size,
        requested_size,
        stream: w.stream,
        segment_type,
        segment_pool_id: (0, 0),
        is_expandable: w.is_expandable,
        blocks,
    };
    Ok((segment, requested_unknown))
}

/// Parses one line (without its newline) into a message.
pub fn parse_line(line: &[u8]) -> Result<Message, ProtocolError> {
    let text = std::str::from_utf8(line).map_err(|_| ProtocolError::NotUtf8)?;
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| ProtocolError::NotJson(e.to_string()))?;
    let serde_json::Value::Object(map) = value else {
        return Err(ProtocolError::NotObject);
    };
    match map.get("v") {
        None => return Err(ProtocolError::NoVersion),
        Some(v)
            if v.as_u64()
                .is_some_and(|v| (OLDEST_PROTOCOL_VERSION..=PROTOCOL_VERSION).contains(&v)) => {}
        Some(v @ serde_json::Value::Number(_)) => {
            return Err(ProtocolError::Version(v.to_string()));
        }
        Some(v) => {
            return Err(bad(
                "message",
                format!("\"v\" must be an integer, got {}", cut(&v.to_string())),
            ));
        }
    }
    let kind = match map.get("type") {
        Some(serde_json::Value::String(s)) => s.clone(),
        _ => return Err(ProtocolError::NoType),
    };
    let value = serde_json::Value::Object(map);
    parse_typed(&kind, value).map(visible_text)
}

/// The message with the text it brings for people (argv, host, torch
/// version, messages, reasons) made drawable, once, where it enters:
/// control characters become visible stand-ins ([`visible_controls`]), so
/// an escape sequence in a script's argv never reaches the terminal and
/// what is drawn is what widths are counted on. Paths are left as sent:
/// they are opened, and quoted with escapes where they are shown.
fn visible_text(message: Message) -> Message {
    fn fix(s: &mut String) {
        if let std::borrow::Cow::Owned(v) = visible_controls(s) {
            *s = v;
        }
    }
    let mut message = message;
    match &mut message {
        Message::Hello(h) => {
            h.argv.iter_mut().for_each(fix);
            h.host.iter_mut().for_each(fix);
            h.torch.iter_mut().for_each(fix);
        }
        Message::Oom(o) => {
            fix(&mut o.message);
            o.snapshot_error.iter_mut().for_each(fix);
        }
        Message::Bye(b) => b.reason.iter_mut().for_each(fix),
        Message::SnapshotFailed(f) => fix(&mut f.reason),
        _ => {}
    }
    message
}

/// A message of type `kind`, read from `value`.
fn parse_typed(kind: &str, value: serde_json::Value) -> Result<Message, ProtocolError> {
    Ok(match kind {
        "hello" => Message::Hello(typed("hello", value)?),
        "stats" => {
            let w: StatsWire = typed("stats", value)?;
            let mut entries = Vec::with_capacity(w.stats.len());
            let mut unknown_keys = Vec::new();
            for (k, n) in &w.stats {
                match n {
                    Some(n) => entries.push((k.as_str(), stat_value(k, n)?)),
                    None => unknown_keys.push(k.clone()),
                }
            }
            let (stats, known_keys) = DeviceStats::from_memory_stats(entries);
            Message::Stats(Box::new(Stats {
                time: w.time,
                device: w.device,
                stats,
                known_keys,
                unknown_keys,
            }))
        }
        "segments" => {
            let w: SegmentsWire = typed("segments", value)?;
            // Sums over segments (reserved bytes, free bytes) must not wrap.
            w.segments
                .iter()
                .try_fold(0u64, |sum, seg| sum.checked_add(seg.total_size))
                .ok_or_else(|| bad("segments", "the segments add up to more than 2^64 bytes"))?;
            let mut segments = Vec::with_capacity(w.segments.len());
            let mut requested_unknown = false;
            for (i, s) in w.segments.into_iter().enumerate() {
                let (segment, unknown) = convert_segment(w.device, i, s)?;
                requested_unknown |= unknown;
                segments.push(segment);
            }
            Message::Segments(Segments {
                time: w.time,
                device: w.device,
                segments,
                requested_unknown,
            })
        }
        "oom" => Message::Oom(typed("oom", value)?),
        "bye" => Message::Bye(typed("bye", value)?),
        "snapshot_started" => Message::SnapshotStarted(typed("snapshot_started", value)?),
        "snapshot_done" => Message::SnapshotDone(typed("snapshot_done", value)?),
        "snapshot_failed" => Message::SnapshotFailed(typed("snapshot_failed", value)?),
        _ => Message::Unknown(kind.to_string()),
    })
}

/// Cuts a byte stream into lines of at most [`MAX_LINE_BYTES`]. A longer
/// line is dropped up to its newline and reported once; a last line
/// without a newline is reported at end of stream. Keeps partial lines
/// across read timeouts, so a reader with a socket timeout loses nothing.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Lines finished so far (the next one is `line + 1`).
    line: u64,
    /// Bytes of an oversized line dropped so far, while dropping it.
    discarding: Option<u64>,
    done: bool,
}

/// One item of the stream: a line's bytes (newline removed) or a problem
/// with it.
pub type LineItem = Result<(u64, Vec<u8>), LineError>;

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            buf: Vec::new(),
            line: 0,
            discarding: None,
            done: false,
        }
    }

    /// The next line with its number, a problem, `Ok(None)` at end of
    /// stream, or the I/O error of the underlying reader (timeouts
    /// included: call again to continue).
    pub fn next_line(&mut self) -> io::Result<Option<LineItem>> {
        loop {
            if self.done {
                return Ok(None);
            }
            let avail = match self.inner.fill_buf() {
                Ok(a) => a,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                self.done = true;
                let line = self.line + 1;
                if let Some(bytes) = self.discarding.take() {
                    return Ok(Some(Err(LineError {
                        line,
                        error: ProtocolError::Oversized { bytes },
                    })));
                }
                if !self.buf.is_empty() {
                    let bytes = self.buf.len();
                    self.buf.clear();
                    return Ok(Some(Err(LineError {
                        line,
                        error: ProtocolError::Partial { bytes },
                    })));
                }
                return Ok(None);
            }
            let len = avail.len();
            match avail.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    let with_newline = (i + 1) as u64;
                    let item = if let Some(dropped) = self.discarding.take() {
                        Err(ProtocolError::Oversized {
                            bytes: dropped + with_newline,
                        })
                    } else if self.buf.len() + i + 1 > MAX_LINE_BYTES {
                        let bytes = self.buf.len() as u64 + with_newline;
                        self.buf.clear();
                        Err(ProtocolError::Oversized { bytes })
                    } else {
                        self.buf.extend_from_slice(&avail[..i]);
                        Ok(())
                    };
                    self.inner.consume(i + 1);
                    self.line += 1;
                    let line = self.line;
                    return Ok(Some(match item {
                        Ok(()) => {
                            let mut bytes = std::mem::take(&mut self.buf);
                            if bytes.last() == Some(&b'\r') {
                                bytes.pop();
                            }
                            Ok((line, bytes))
                        }
                        Err(error) => Err(LineError { line, error }),
                    }));
                }
                None => {
                    if let Some(dropped) = self.discarding.as_mut() {
                        *dropped += len as u64;
                    } else if self.buf.len() + len >= MAX_LINE_BYTES {
                        // Even with the newline right after, it is too long.
                        self.discarding = Some((self.buf.len() + len) as u64);
                        self.buf.clear();
                        self.buf.shrink_to(64 * 1024);
                    } else {
                        self.buf.extend_from_slice(avail);
                    }
                    self.inner.consume(len);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Message, ProtocolError> {
        parse_line(s.as_bytes())
    }

    fn read_all(bytes: &[u8]) -> Vec<LineItem> {
        let mut r = LineReader::new(io::BufReader::with_capacity(4096, bytes));
        let mut out = Vec::new();
        while let Some(item) = r.next_line().expect("in-memory reads cannot fail") {
            out.push(item);
        }
        out
    }

    const HELLO: &str = r#"{"v":1,"type":"hello","pid":1234,"host":"node7","argv":["train.py","--lr","3e-4"],"torch":"2.5.1","devices":[0,1],"stats_interval_s":1.0,"segments_interval_s":5.0,"time":1764489600.123,"future_key":{"x":1}}"#;

    #[test]
    fn hello_parses_with_unknown_keys_ignored() {
        let Ok(Message::Hello(h)) = parse(HELLO) else {
            panic!("hello expected");
        };
        assert_eq!(h.pid, 1234);
        assert_eq!(h.devices, vec![0, 1]);
        assert_eq!(h.argv[0], "train.py");
        assert_eq!(h.torch.as_deref(), Some("2.5.1"));
    }

    const HELLO_V2: &str = r#"{"v":2,"type":"hello","pid":1234,"host":"node7","argv":["train.py"],"torch":"2.5.1","devices":[0],"stats_interval_s":1.0,"segments_interval_s":5.0,"time":1764489600.1,"rank":3,"local_rank":1,"world_size":8,"record_history":100000,"capabilities":["snapshot","later"]}"#;

    #[test]
    fn a_v1_hello_has_no_ranks_and_serves_no_snapshots() {
        let Ok(Message::Hello(h)) = parse(HELLO) else {
            panic!("hello expected");
        };
        assert_eq!(h.version, 1);
        assert_eq!((h.rank, h.local_rank, h.world_size), (None, None, None));
        assert_eq!(h.record_history, None);
        assert!(!h.serves_snapshots());
        assert_eq!(h.rank_label(), None);
        // A v1 probe that lists the capability anyway is still never asked.
        let odd = HELLO.replace("\"devices\"", "\"capabilities\":[\"snapshot\"],\"devices\"");
        let Ok(Message::Hello(h)) = parse(&odd) else {
            panic!("hello expected");
        };
        assert!(!h.serves_snapshots());
    }

    #[test]
    fn a_v2_hello_carries_ranks_history_and_capabilities() {
        let Ok(Message::Hello(h)) = parse(HELLO_V2) else {
            panic!("hello expected: {:?}", parse(HELLO_V2));
        };
        assert_eq!(h.version, 2);
        assert_eq!(
            (h.rank, h.local_rank, h.world_size),
            (Some(3), Some(1), Some(8))
        );
        assert_eq!(h.record_history, Some(100_000));
        assert!(h.serves_snapshots());
        assert_eq!(h.rank_label().as_deref(), Some("rank 3/8 local 1"));
        let nulls = r#"{"v":2,"type":"hello","pid":1,"rank":null,"local_rank":null,"world_size":null,"record_history":null,"capabilities":[]}"#;
        let Ok(Message::Hello(h)) = parse(nulls) else {
            panic!("hello expected");
        };
        assert_eq!(h.rank_label(), None);
        assert!(!h.serves_snapshots());
        let e = parse(r#"{"v":2,"type":"hello","pid":1,"rank":-1}"#).expect_err("negative rank");
        assert!(e.to_string().contains("bad hello message"), "{e}");
    }

    #[test]
    fn a_v2_oom_names_its_snapshot_or_why_there_is_none() {
        let with = r#"{"v":2,"type":"oom","time":3,"device":0,"alloc_bytes":1024,"message":"m","snapshot":"/s/node7-1-rank0-20261201T120002Z-oom.pickle","snapshot_error":null}"#;
        let Ok(Message::Oom(o)) = parse(with) else {
            panic!("oom expected");
        };
        assert_eq!(
            o.snapshot.as_deref(),
            Some(std::path::Path::new(
                "/s/node7-1-rank0-20261201T120002Z-oom.pickle"
            ))
        );
        assert_eq!(o.snapshot_error, None);
        let without =
            r#"{"v":2,"type":"oom","device":0,"snapshot":null,"snapshot_error":"disk full"}"#;
        let Ok(Message::Oom(o)) = parse(without) else {
            panic!("oom expected");
        };
        assert_eq!(o.snapshot, None);
        assert_eq!(o.snapshot_error.as_deref(), Some("disk full"));
        assert!(!o.earlier, "as it happens unless said otherwise");
    }

    #[test]
    fn an_oom_resent_to_a_later_client_says_it_was_earlier() {
        let line = r#"{"v":2,"type":"oom","device":0,"snapshot":"/s/x-oom.pickle","earlier":true}"#;
        let Ok(Message::Oom(o)) = parse(line) else {
            panic!("oom expected");
        };
        assert!(o.earlier);
        let bad = r#"{"v":2,"type":"oom","device":0,"earlier":"yes"}"#;
        assert!(parse(bad).is_err(), "not a bool");
    }

    #[test]
    fn snapshot_answers_parse_and_a_failure_may_have_no_id() {
        let started = r#"{"v":2,"type":"snapshot_started","id":"a1b2c3","time":1764489601.0}"#;
        assert!(matches!(parse(started), Ok(Message::SnapshotStarted(s)) if s.id == "a1b2c3"));
        let done = r#"{"v":2,"type":"snapshot_done","id":"a1b2c3","time":1764489601.8,"path":"/s/x-demand.pickle","bytes":123456,"has_trace":true,"trace_entries":23000,"segments":28}"#;
        let Ok(Message::SnapshotDone(d)) = parse(done) else {
            panic!("snapshot_done expected");
        };
        assert_eq!(d.path, std::path::PathBuf::from("/s/x-demand.pickle"));
        assert_eq!(
            (d.bytes, d.has_trace, d.trace_entries, d.segments),
            (Some(123_456), true, Some(23_000), Some(28))
        );
        let failed = r#"{"v":2,"type":"snapshot_failed","id":null,"reason":"bad request"}"#;
        let Ok(Message::SnapshotFailed(f)) = parse(failed) else {
            panic!("snapshot_failed expected");
        };
        assert_eq!(f.id, None);
        assert_eq!(f.reason, "bad request");
        let e = parse(r#"{"v":2,"type":"snapshot_done","id":"a"}"#).expect_err("no path");
        assert!(e.to_string().contains("missing field `path`"), "{e}");
    }

    #[test]
    fn a_request_line_is_one_json_line_and_bad_ids_are_refused() {
        let line = snapshot_request_line("vramtop-17.a_b").expect("valid id");
        assert!(line.ends_with('\n'));
        assert_eq!(line.matches('\n').count(), 1);
        let v: serde_json::Value = serde_json::from_str(line.trim_end()).expect("JSON");
        assert_eq!(v["v"], 2);
        assert_eq!(v["type"], "snapshot_request");
        assert_eq!(v["id"], "vramtop-17.a_b");
        for bad in ["", "a b", "a\nb", "x/y", "\"", &"a".repeat(65)] {
            assert_eq!(snapshot_request_line(bad), None, "{bad:?}");
        }
        assert!(snapshot_request_line(&"a".repeat(64)).is_some());
    }

    #[test]
    fn stats_become_device_stats_with_pytorch_key_names() {
        let line = r#"{"v":1,"type":"stats","time":1.5,"device":1,"stats":{"allocated_bytes.all.current":1073741824,"reserved_bytes.all.current":1610612736,"num_ooms":2,"segment.all.current":3,"max_split_size":-1,"brand_new.all.current":5,"requested_bytes.all.peak":12.0}}"#;
        let Ok(Message::Stats(s)) = parse(line) else {
            panic!("stats expected");
        };
        assert_eq!(s.device, 1);
        assert_eq!(s.stats.allocated_bytes.all.current, 1 << 30);
        assert_eq!(s.stats.reserved_bytes.all.current, 3 << 29);
        assert_eq!(s.stats.num_ooms, 2);
        assert_eq!(s.stats.max_split_size, -1);
        assert_eq!(s.stats.requested_bytes.all.peak, 12, "a float is accepted");
        assert_eq!(s.known_keys, 6, "the unknown key is not counted");
    }

    #[test]
    fn segments_triples_become_blocks_at_increasing_addresses() {
        let line = r#"{"v":1,"type":"segments","time":2,"device":0,"segments":[{"address":139900000000000,"total_size":2097152,"stream":0,"segment_type":"small","allocated_size":1024,"active_size":1024,"requested_size":1000,"is_expandable":false,"blocks":[[1024,1000,"active_allocated"],[2096128,0,"inactive"]]}]}"#;
        let Ok(Message::Segments(s)) = parse(line) else {
            panic!("segments expected");
        };
        assert_eq!(s.segments.len(), 1);
        let seg = &s.segments[0];
        assert_eq!(seg.segment_type, PoolKind::Small);
        assert_eq!(seg.blocks.len(), 2);
        assert_eq!(seg.blocks[0].address, 139_900_000_000_000);
        assert_eq!(seg.blocks[1].address, 139_900_000_000_000 + 1024);
        assert_eq!(seg.blocks[1].state, BlockState::Inactive);
    }

    #[test]
    fn null_requested_sizes_of_an_old_pytorch_keep_the_segments() {
        let line = r#"{"v":1,"type":"segments","device":0,"segments":[{"address":4096,"total_size":1073741824,"segment_type":"large","allocated_size":0,"active_size":0,"requested_size":null,"blocks":[[1073741824,null,"inactive"]]}]}"#;
        let Ok(Message::Segments(s)) = parse(line) else {
            panic!("segments expected: {:?}", parse(line));
        };
        assert!(s.requested_unknown);
        assert_eq!(s.segments.len(), 1);
        assert_eq!(s.segments[0].blocks[0].size, 1 << 30);
        assert_eq!(s.segments[0].blocks[0].state, BlockState::Inactive);
        let known = r#"{"v":1,"type":"segments","device":0,"segments":[{"address":0,"total_size":8,"segment_type":"large","requested_size":3,"blocks":[[8,3,"active_allocated"]]}]}"#;
        let Ok(Message::Segments(s)) = parse(known) else {
            panic!("segments expected");
        };
        assert!(!s.requested_unknown);
    }

    #[test]
    fn a_null_stat_is_unknown_and_the_other_stats_are_kept() {
        let line = r#"{"v":1,"type":"stats","device":0,"stats":{"allocated_bytes.all.current":1024,"reserved_bytes.all.current":null,"num_ooms":1}}"#;
        let Ok(Message::Stats(s)) = parse(line) else {
            panic!("stats expected: {:?}", parse(line));
        };
        assert_eq!(s.stats.allocated_bytes.all.current, 1024);
        assert_eq!(s.stats.num_ooms, 1);
        assert_eq!(
            s.unknown_keys,
            vec!["reserved_bytes.all.current".to_string()]
        );
        assert_eq!(s.known_keys, 2);
    }

    #[test]
    fn oom_and_bye_parse() {
        let oom = r#"{"v":1,"type":"oom","time":3,"device":0,"alloc_bytes":1024,"device_allocated":5,"device_free":6,"message":"tried to allocate 1 KiB"}"#;
        let Ok(Message::Oom(o)) = parse(oom) else {
            panic!("oom expected");
        };
        assert_eq!(o.alloc_bytes, Some(1024));
        assert_eq!(o.message, "tried to allocate 1 KiB");
        assert!(matches!(
            parse(r#"{"v":1,"type":"bye","time":4,"reason":"exit"}"#),
            Ok(Message::Bye(Bye { reason: Some(r), .. })) if r == "exit"
        ));
    }

    #[test]
    fn unknown_type_is_ignored_not_an_error() {
        assert_eq!(
            parse(r#"{"v":1,"type":"gossip","anything":[1,2]}"#),
            Ok(Message::Unknown("gossip".to_string()))
        );
    }

    #[test]
    fn version_3_is_reported_as_not_supported() {
        let e = parse(r#"{"v":3,"type":"hello","pid":1}"#).expect_err("v3");
        assert!(e.is_version());
        assert_eq!(e.to_string(), "protocol version 3 not supported");
        let e = parse(r#"{"v":0,"type":"hello","pid":1}"#).expect_err("v0");
        assert!(e.is_version());
        assert!(parse(r#"{"v":"1","type":"hello","pid":1}"#).is_err());
        assert_eq!(
            parse(r#"{"type":"hello","pid":1}"#),
            Err(ProtocolError::NoVersion)
        );
    }

    #[test]
    fn garbage_lines_are_typed_errors() {
        assert!(matches!(
            parse("hello there"),
            Err(ProtocolError::NotJson(_))
        ));
        assert!(matches!(parse("{\"v\":1,"), Err(ProtocolError::NotJson(_))));
        assert_eq!(parse("[1,2,3]"), Err(ProtocolError::NotObject));
        assert_eq!(parse(r#"{"v":1}"#), Err(ProtocolError::NoType));
        assert_eq!(parse_line(&[0xff, 0xfe]), Err(ProtocolError::NotUtf8));
        let deep = "[".repeat(10_000);
        assert!(matches!(parse(&deep), Err(ProtocolError::NotJson(_))));
    }

    #[test]
    fn wrong_types_and_missing_fields_say_which() {
        let e = parse(r#"{"v":1,"type":"hello","pid":"1234"}"#).expect_err("string pid");
        assert!(e.to_string().contains("bad hello message"), "{e}");
        assert!(e.to_string().contains("invalid type"), "{e}");
        let e = parse(r#"{"v":1,"type":"stats","stats":{}}"#).expect_err("no device");
        assert!(e.to_string().contains("missing field `device`"), "{e}");
        let e = parse(r#"{"v":1,"type":"stats","device":0,"stats":{"num_ooms":"x"}}"#)
            .expect_err("string stat");
        assert!(e.to_string().contains("bad stats message"), "{e}");
        let e = parse(r#"{"v":1,"type":"segments","device":0,"segments":[{"address":0,"total_size":10,"segment_type":"huge","blocks":[]}]}"#)
            .expect_err("bad segment type");
        assert!(e.to_string().contains("segment_type \"huge\""), "{e}");
        let e = parse(r#"{"v":1,"type":"segments","device":0,"segments":[{"address":0,"total_size":10,"segment_type":"large","blocks":[[5,5,"sleeping"]]}]}"#)
            .expect_err("bad state");
        assert!(e.to_string().contains("unknown state \"sleeping\""), "{e}");
    }

    #[test]
    fn huge_and_negative_numbers_are_rejected_not_wrapped() {
        let e = parse(
            r#"{"v":1,"type":"stats","device":0,"stats":{"allocated_bytes.all.current":1e300}}"#,
        )
        .expect_err("1e300");
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = parse(r#"{"v":1,"type":"stats","device":0,"stats":{"allocated_bytes.all.current":18446744073709551615}}"#)
            .expect_err("u64::MAX");
        assert!(e.to_string().contains("out of range"), "{e}");
        let e = parse(r#"{"v":1,"type":"segments","device":0,"segments":[{"address":0,"total_size":-2097152,"segment_type":"large","blocks":[]}]}"#)
            .expect_err("negative size");
        assert!(e.to_string().contains("bad segments message"), "{e}");
        let e = parse(r#"{"v":1,"type":"stats","device":-1,"stats":{}}"#).expect_err("device -1");
        assert!(e.to_string().contains("bad stats message"), "{e}");
        let e = parse(r#"{"v":1,"type":"segments","device":0,"segments":[{"address":18446744073709551615,"total_size":10,"segment_type":"large","blocks":[[1,1,"inactive"],[1,1,"inactive"]]}]}"#)
            .expect_err("address overflow");
        assert!(e.to_string().contains("overflows"), "{e}");
        let e = parse(r#"{"v":1,"type":"segments","device":0,"segments":[{"address":0,"total_size":18446744073709551615,"segment_type":"large","blocks":[]},{"address":0,"total_size":2,"segment_type":"large","blocks":[]}]}"#)
            .expect_err("total overflow");
        assert!(e.to_string().contains("more than 2^64"), "{e}");
        let e = parse(r#"{"v":1,"type":"segments","device":0,"segments":[{"address":0,"total_size":10,"segment_type":"large","blocks":[[8,8,"inactive"],[8,8,"inactive"]]}]}"#)
            .expect_err("blocks beyond the segment");
        assert!(e.to_string().contains("more than total_size"), "{e}");
    }

    #[test]
    fn long_input_in_a_problem_is_quoted_cut_short() {
        let long = "z".repeat(500_000);
        for line in [
            format!(
                r#"{{"v":1,"type":"segments","device":0,"segments":[{{"address":0,"total_size":10,"segment_type":"large","blocks":[[5,5,"{long}"]]}}]}}"#
            ),
            format!(
                r#"{{"v":1,"type":"segments","device":0,"segments":[{{"address":0,"total_size":10,"segment_type":"{long}","blocks":[]}}]}}"#
            ),
            format!(r#"{{"v":"{long}","type":"hello","pid":1}}"#),
            format!(r#"{{"v":1,"type":"stats","device":0,"stats":{{"{long}":1e300}}}}"#),
            format!(r#"{{"v":1,"type":"hello","pid":"{long}"}}"#),
        ] {
            let e = parse(&line).expect_err("bad line").to_string();
            assert!(e.len() < 300, "{} bytes: {}", e.len(), &e[..300]);
        }
    }

    #[test]
    fn reader_numbers_lines_and_reports_a_partial_last_line() {
        let items = read_all(b"{\"a\":1}\r\nsecond\n{\"partial\"");
        assert_eq!(items.len(), 3);
        assert_eq!(items[0], Ok((1, b"{\"a\":1}".to_vec())));
        assert_eq!(items[1], Ok((2, b"second".to_vec())));
        let Err(e) = &items[2] else {
            panic!("partial expected")
        };
        assert_eq!(e.line, 3);
        assert_eq!(e.error, ProtocolError::Partial { bytes: 10 });
        assert!(e.to_string().starts_with("line 3: incomplete last line"));
    }

    #[test]
    fn reader_drops_an_oversized_line_and_keeps_the_next() {
        let mut input = vec![b'x'; MAX_LINE_BYTES + 10];
        input.push(b'\n');
        input.extend_from_slice(HELLO.as_bytes());
        input.push(b'\n');
        let items = read_all(&input);
        assert_eq!(items.len(), 2);
        assert_eq!(
            items[0],
            Err(LineError {
                line: 1,
                error: ProtocolError::Oversized {
                    bytes: (MAX_LINE_BYTES + 11) as u64
                }
            })
        );
        let Ok((2, line)) = &items[1] else {
            panic!("line 2 expected")
        };
        assert!(matches!(parse_line(line), Ok(Message::Hello(_))));
    }

    #[test]
    fn reader_accepts_a_line_of_exactly_the_limit() {
        let mut input = vec![b' '; MAX_LINE_BYTES - 1];
        input.push(b'\n');
        let items = read_all(&input);
        assert!(matches!(&items[..], [Ok((1, l))] if l.len() == MAX_LINE_BYTES - 1));
        let mut input = vec![b' '; MAX_LINE_BYTES];
        input.push(b'\n');
        let items = read_all(&input);
        assert!(matches!(
            &items[..],
            [Err(LineError {
                error: ProtocolError::Oversized { .. },
                ..
            })]
        ));
    }

    #[test]
    fn reader_reports_an_oversized_unterminated_tail() {
        let input = vec![b'y'; MAX_LINE_BYTES * 2];
        let items = read_all(&input);
        assert!(matches!(
            &items[..],
            [Err(LineError {
                line: 1,
                error: ProtocolError::Oversized { bytes }
            })] if *bytes == (MAX_LINE_BYTES * 2) as u64
        ));
    }
}
