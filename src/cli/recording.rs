//! `vramtop open REC.jsonl --summary [--json]`: a `vramtop record` file
//! read back (`device::recording` sums it up; this words it).
//!
//! A file is a recording by its content: a first line that is a sample
//! (`time_unix_ms`, `gpus`), or a sample's line in its first 16 KiB (the
//! start cut off, junk in front), or JSON at all (an object or an array:
//! no pickle starts with `{` or `[`; JSON without a sample is then said
//! to be neither), or a `.jsonl`/`.ndjson` name; a snapshot pickle goes
//! on to the snapshot reader as before. An empty input is neither, said
//! in one line whatever the flags.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::app::source::{
    AllocatorSummary, HeadlessGpu, HeadlessOom, HeadlessProbe, HeadlessProbeDevice, HeadlessSample,
};
use crate::device::{GpuProcess, GpuReading, GpuSample, MigInfo, Unanswered};
use crate::probe::pid::{PidSource, VisibleDevices};
use color_eyre::eyre::WrapErr;
use serde::Serialize;

use super::EXIT_BAD_INPUT;
use super::text::{REPORT_WIDTH, path_heading, wrap_under};
use crate::device::recording::{
    CounterEvent, CounterKind, GpuRecord, PeakProcess, RecordingSummary, Route,
    looks_like_recording, read_recording, route,
};
use crate::device::recording::{Picked, RecordingTime, Target, pick_sample};
use crate::snapshot::peak::At;
use crate::ui::format::{self, NA, count, count_of};

/// Bytes of a file looked at to tell a recording from a snapshot.
const SNIFF_BYTES: usize = 1 << 20;

/// Counter rises listed per GPU in the text (all that were kept are in
/// the JSON).
const EVENT_LINES: usize = 20;

/// Cells of the label column, as the snapshot summary's.
const LABEL: usize = 21;

/// What `open` makes of a file before reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// No byte: said in one line, the same for a file and standard input.
    Empty,
    /// Read as a recording.
    Recording,
    /// Read as a snapshot.
    Snapshot,
}

/// How `file` is to be read: by its first bytes ([`route`]: empty, a
/// pickle's protocol byte, a sample's line or other JSON), else by its
/// name (`.jsonl`, `.ndjson`: a damaged one is said as a recording). A
/// file that cannot be read goes by its name, its reader saying why.
/// Standard input is told by the bytes that have come, peeked without
/// being taken; a terminal is not peeked (the peek would wait for a
/// line: the snapshot reader refuses one with its own words).
pub fn opened(file: &Path) -> Opened {
    if file.as_os_str() == super::STDIN_ARG {
        use std::io::IsTerminal as _;
        let stdin = std::io::stdin();
        if stdin.is_terminal() {
            return Opened::Snapshot;
        }
        let mut lock = stdin.lock();
        return match lock.fill_buf() {
            Ok(buf) => match route(buf) {
                Route::Empty => Opened::Empty,
                Route::Recording => Opened::Recording,
                Route::Snapshot | Route::ByName => Opened::Snapshot,
            },
            Err(_) => Opened::Snapshot,
        };
    }
    let by_name = file
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("jsonl") || e.eq_ignore_ascii_case("ndjson"));
    let named = if by_name {
        Opened::Recording
    } else {
        Opened::Snapshot
    };
    let Ok(f) = std::fs::File::open(file) else {
        return named;
    };
    let mut prefix = Vec::new();
    if f.take(SNIFF_BYTES as u64).read_to_end(&mut prefix).is_err() {
        return named;
    }
    match route(&prefix) {
        Route::Empty => Opened::Empty,
        Route::Snapshot => Opened::Snapshot,
        Route::Recording => Opened::Recording,
        Route::ByName => named,
    }
}

/// The one line for an input without a byte, file or standard input:
/// none of what the command `reads` came, and the likely why.
pub fn empty_input(file: &Path, reads: super::Reads) -> String {
    let none = reads.none_of();
    if file.as_os_str() == super::STDIN_ARG {
        format!(
            "{}: it is empty: {none} came (did the command writing to the pipe fail?)",
            super::STDIN_NAME
        )
    } else {
        format!(
            "{}: the file is empty: {none} in it yet (still being written?)",
            super::input_name(file)
        )
    }
}

/// Why `file`, which [`opened`] reads as a recording, is none, in one
/// line naming it: `None` where its start opens as a sample does, or
/// where, read whole, it holds one (or cannot be read: the caller's own
/// message then stands). Standard input is read to its end: the caller
/// refuses it either way.
pub fn not_a_recording(file: &Path) -> Option<String> {
    let read = if file.as_os_str() == super::STDIN_ARG {
        let mut stdin = super::piped_stdin().ok()?;
        if looks_like_recording(stdin.fill_buf().ok()?) {
            return None;
        }
        read_recording(stdin).ok()?
    } else {
        let mut prefix = Vec::new();
        std::fs::File::open(file)
            .ok()?
            .take(SNIFF_BYTES as u64)
            .read_to_end(&mut prefix)
            .ok()?;
        if looks_like_recording(&prefix) {
            return None;
        }
        read_recording(BufReader::with_capacity(
            1 << 16,
            std::fs::File::open(file).ok()?,
        ))
        .ok()?
    };
    no_samples(&read).map(|why| format!("{}: {why}", super::input_name(file)))
}

/// Whether `file` (not standard input, which a first read used up) opens
/// as a `vramtop record` file does, told by content as `open` tells it
/// (a sample line among its first lines), not by its name.
pub fn is_recording_file(file: &Path) -> bool {
    if file.as_os_str() == super::STDIN_ARG {
        return false;
    }
    let mut prefix = Vec::new();
    std::fs::File::open(file)
        .and_then(|f| f.take(SNIFF_BYTES as u64).read_to_end(&mut prefix))
        .is_ok_and(|_| looks_like_recording(&prefix))
}

/// What an empty input holds none of, to `open` (which reads both).
pub(super) const NEITHER: &str = "no memory snapshot and no `vramtop record` sample";

/// What `open` of a recording was asked with.
#[derive(Debug, Clone, Copy)]
pub struct RecordingOptions {
    /// Print the summary (`--summary`).
    pub summary: bool,
    pub json: bool,
    /// Processes listed at a peak.
    pub top: usize,
    pub ascii: bool,
    /// Also (or, without `--summary`, only) the sample there (`--at`).
    pub at: Option<RecordingAt>,
}

/// `--at` of a recording: a moment's word or number, or a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordingAt {
    Moment(At),
    Time(RecordingTime),
}

/// The sample `at` names in the recording `s` sums up, or why none.
pub fn target(at: RecordingAt, s: &RecordingSummary) -> Result<Target, String> {
    let (Some(first), Some(last)) = (s.first_unix_ms, s.last_unix_ms) else {
        return Err("the recording has no sample".to_string());
    };
    Ok(match at {
        RecordingAt::Time(t) => Target::Time(t.resolve(first, last)),
        RecordingAt::Moment(At::Start) => Target::Time(first),
        RecordingAt::Moment(At::End) => Target::Time(last),
        RecordingAt::Moment(At::Event(n)) => {
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            // As a snapshot's event number past its trace: said, not
            // silently the nearest end.
            if n == 0 || n > s.samples {
                return Err(format!(
                    "--at {n}: the recording has {} (--at takes 1 to {}, or a time, +DURATION, \
                     start, end, peak, oom)",
                    count(s.samples, "sample", "samples"),
                    s.samples
                ));
            }
            Target::Ordinal(n)
        }
        RecordingAt::Moment(At::Peak) => {
            // The highest peak of any GPU; the first of equal ones.
            let peak = s
                .gpus
                .iter()
                .filter_map(|g| g.memory_used.as_ref())
                .map(|m| (m.peak.bytes, std::cmp::Reverse(m.peak.time_unix_ms)))
                .max()
                .ok_or("no sample gives memory used: --at peak needs one")?;
            Target::Time(peak.1.0)
        }
        RecordingAt::Moment(At::Oom) => {
            let last_oom = s
                .gpus
                .iter()
                .flat_map(|g| &g.events)
                .filter(|e| e.kind == CounterKind::Oom)
                .map(|e| e.time_unix_ms)
                .max()
                .ok_or("no allocator's num_ooms rose in the recording: --at oom needs an OOM")?;
            Target::Time(last_oom)
        }
        RecordingAt::Moment(At::Index(index)) => {
            return Err(format!(
                "--at #{index} is an index into a snapshot's trace; a recording has none (--at \
                 takes a time, +DURATION, start, end, peak, oom or a sample's number)"
            ));
        }
        RecordingAt::Moment(At::Mark(_) | At::LastMark) => {
            return Err(
                "--at mark:… is a snapshot's annotate entry; a recording has none (--at takes \
                 a time, +DURATION, start, end, peak, oom or a sample's number)"
                    .to_string(),
            );
        }
    })
}

/// The summary of the recording `file` (`-`: standard input), or its one
/// line of error (exit 2) when it holds no sample.
pub fn run(file: &Path, options: RecordingOptions) -> color_eyre::Result<ExitCode> {
    let name = super::input_name(file);
    let read = if file.as_os_str() == super::STDIN_ARG {
        match super::piped_stdin() {
            Ok(stdin) => read_recording(stdin),
            Err(e) => {
                super::say_error(e);
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        }
    } else {
        match std::fs::File::open(file) {
            Ok(f) => read_recording(BufReader::with_capacity(1 << 16, f)),
            Err(e) => {
                super::say_error(format_args!(
                    "cannot read {name}: {}",
                    crate::quote::io_reason(&e)
                ));
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        }
    };
    let summary = match read {
        Ok(s) => s,
        Err(e) => {
            super::say_error(format_args!("cannot read {name}: {e}"));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    if let Some(why) = no_samples(&summary) {
        super::say_error(format_args!("{name}: {why}"));
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    let picked = match options.at {
        None => None,
        Some(at) => match pick(file, at, &summary, options.summary) {
            Ok(p) => Some(p),
            Err(why) => {
                super::say_error(format_args!("{name}: {why}"));
                return Ok(ExitCode::from(EXIT_BAD_INPUT));
            }
        },
    };
    if options.json {
        let full = RecordingJson {
            kind: "recording",
            first_utc: summary.first_unix_ms.map(utc),
            last_utc: summary.last_unix_ms.map(utc),
            summary: &summary,
            at: picked.as_ref().map(|(p, _)| AtJson {
                line: p.line,
                time_unix_ms: p.time_unix_ms,
                utc: utc(p.time_unix_ms),
                sample: &p.sample,
            }),
        };
        let text = serde_json::to_string_pretty(&full).wrap_err("cannot encode the summary")?;
        super::emit(&format!("{text}\n")).wrap_err("cannot write the output")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut text = String::new();
    if options.summary {
        text.push_str(&render(&name, &summary, options.top));
    }
    if let Some((p, asked)) = &picked {
        if options.summary {
            text.push('\n');
        }
        text.push_str(&sample_at(&name, p, *asked));
    }
    super::emit_text(&text, options.ascii).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// The sample `at` names in `file` (read a second time), and the time it
/// was asked at (`None`: a sample's number).
fn pick(
    file: &Path,
    at: RecordingAt,
    summary: &RecordingSummary,
    with_summary: bool,
) -> Result<(Picked, Option<u64>), String> {
    if file.as_os_str() == super::STDIN_ARG {
        // What the first reading is for, as asked.
        let first = if with_summary {
            "the summary"
        } else {
            "where the moment is"
        };
        return Err(format!(
            "--at reads a recording twice ({first}, then the sample): save standard input to \
             a file first"
        ));
    }
    let target = target(at, summary)?;
    let f = std::fs::File::open(file)
        .map_err(|e| format!("cannot read it again: {}", crate::quote::io_reason(&e)))?;
    let picked = pick_sample(BufReader::with_capacity(1 << 16, f), target)
        .map_err(|e| format!("cannot read it again: {e}"))?
        .ok_or("no sample is left in it (was it rewritten meanwhile?)")?;
    let asked = match target {
        Target::Time(t) => Some(t),
        Target::Ordinal(_) => None,
    };
    Ok((picked, asked))
}

/// The picked sample as `--once` prints one, under a line that says
/// which it is and how far from the time asked.
fn sample_at(name: &str, p: &Picked, asked: Option<u64>) -> String {
    let full = Clock {
        date: true,
        millis: true,
    };
    let mut head = format!(
        "the sample of {} UTC (line {} of {name})",
        full.at(p.time_unix_ms),
        p.line
    );
    if let Some(asked) = asked {
        let off = p.time_unix_ms.abs_diff(asked);
        if off >= 1_000 {
            let _ = write!(
                head,
                ", the nearest: {} {} the time asked",
                span(off),
                if p.time_unix_ms > asked {
                    "after"
                } else {
                    "before"
                }
            );
        }
    }
    let mut out = wrap_under("at: ", &head, REPORT_WIDTH);
    out.push('\n');
    out.push_str(&super::sample_text::render(&headless(&p.sample)));
    out
}

/// `--summary --json` of a recording: `"kind": "recording"`, the span's
/// ends in UTC (RFC 3339), then the summary's fields
/// (`device::recording::RecordingSummary`).
#[derive(Serialize)]
struct RecordingJson<'a> {
    kind: &'static str,
    first_utc: Option<String>,
    last_utc: Option<String>,
    #[serde(flatten)]
    summary: &'a RecordingSummary,
    /// `--at`'s sample: its line, time, and the object as recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<AtJson<'a>>,
}

#[derive(Serialize)]
struct AtJson<'a> {
    line: u64,
    time_unix_ms: u64,
    utc: String,
    sample: &'a serde_json::Map<String, Value>,
}

fn opt_u64(v: Option<&Value>) -> Option<u64> {
    v.and_then(Value::as_u64)
}

fn opt_u32(v: Option<&Value>) -> Option<u32> {
    opt_u64(v).and_then(|n| u32::try_from(n).ok())
}

fn opt_i64(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64)
}

fn opt_text(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_string)
}

/// A recorded sample as `--once` holds one, from its JSON object read
/// leniently (what this version does not find is unknown, as `--once`
/// says it: "n/a"), the probes' own entries included.
pub fn headless(map: &serde_json::Map<String, Value>) -> HeadlessSample {
    let gpus = map
        .get("gpus")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .filter_map(headless_gpu)
        .collect();
    let ooms = map
        .get("ooms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object)
        .map(|o| HeadlessOom {
            gpu: opt_u32(o.get("gpu")),
            device: opt_u32(o.get("device")).unwrap_or(0),
            pid: opt_u32(o.get("pid")),
            seq: opt_u64(o.get("seq")).unwrap_or(0),
            alloc_bytes: opt_u64(o.get("alloc_bytes")),
            time: o.get("time").and_then(Value::as_f64),
            message: opt_text(o.get("message")).unwrap_or_default(),
            snapshot: opt_text(o.get("snapshot")).map(Into::into),
            snapshot_error: opt_text(o.get("snapshot_error")),
        })
        .collect();
    HeadlessSample {
        time_unix_ms: opt_u64(map.get("time_unix_ms")).unwrap_or(0),
        backend: opt_text(map.get("backend")).unwrap_or_else(|| NA.to_string()),
        banner: opt_text(map.get("banner")),
        gpus,
        probes: map
            .get("probes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .map(headless_probe)
            .collect(),
        probes_skipped: map
            .get("probes_skipped")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|s| opt_text(Some(s)))
            .collect(),
        ooms,
        not_started: Vec::new(),
        not_started_note: opt_text(map.get("not_started_note")),
    }
}

/// A recorded probe as `--once` holds one, read leniently as the rest:
/// its line and each CUDA device's allocator figures. Its OOM events are
/// left out (the sample's `ooms` lists them, as `--once` prints them).
fn headless_probe(p: &serde_json::Map<String, Value>) -> HeadlessProbe {
    let visible = p.get("visible_devices").and_then(Value::as_object);
    let visible_devices = match visible.and_then(|v| v.get("kind")).and_then(Value::as_str) {
        Some("indices") => VisibleDevices::Indices(
            visible
                .and_then(|v| v.get("value"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|i| opt_u32(Some(i)))
                .collect(),
        ),
        Some("unresolved") => VisibleDevices::Unresolved(
            opt_text(visible.and_then(|v| v.get("value"))).unwrap_or_default(),
        ),
        // Unset, or a form this version does not know: not shown in the
        // text either way.
        _ => VisibleDevices::All,
    };
    let pid_source = match p.get("pid_source").and_then(Value::as_str) {
        Some("peer_cred") => Some(PidSource::PeerCred),
        Some("ns_pid") => Some(PidSource::NsPid),
        Some("hello") => Some(PidSource::Hello),
        _ => None,
    };
    HeadlessProbe {
        socket: opt_text(p.get("socket")).unwrap_or_default(),
        pid: opt_u32(p.get("pid")),
        probe_pid: opt_u32(p.get("probe_pid")),
        pid_source,
        status: opt_text(p.get("status")).unwrap_or_else(|| NA.to_string()),
        problem: opt_text(p.get("problem")),
        command: opt_text(p.get("command")),
        host: opt_text(p.get("host")),
        torch: opt_text(p.get("torch")),
        visible_devices,
        devices: p
            .get("devices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_object)
            .filter_map(|d| {
                Some(HeadlessProbeDevice {
                    device: opt_u32(d.get("device"))?,
                    gpu: opt_u32(d.get("gpu")),
                    allocator: d
                        .get("allocator")
                        .and_then(Value::as_object)
                        .map(headless_allocator),
                    invalid: opt_text(d.get("invalid")),
                })
            })
            .collect(),
        oom_total: opt_u64(p.get("oom_total")).unwrap_or(0),
        ooms: Vec::new(),
    }
}

fn headless_gpu(g: &serde_json::Map<String, Value>) -> Option<HeadlessGpu> {
    let index = opt_u32(g.get("index"))?;
    if g.get("status").and_then(Value::as_str) == Some("lost") {
        return Some(HeadlessGpu::bare(GpuReading::Lost {
            index,
            reason: opt_text(g.get("reason")).unwrap_or_else(|| NA.to_string()),
            cause: Unanswered::from_name(g.get("cause").and_then(Value::as_str).unwrap_or("lost")),
        }));
    }
    let mut s = GpuSample::unknown(
        index,
        opt_text(g.get("name")).unwrap_or_else(|| NA.to_string()),
    );
    s.uuid = opt_text(g.get("uuid"));
    s.memory_total = opt_u64(g.get("memory_total"));
    s.memory_used = opt_u64(g.get("memory_used"));
    s.memory_free = opt_u64(g.get("memory_free"));
    s.gpu_utilization = opt_u32(g.get("gpu_utilization"));
    s.memory_utilization = opt_u32(g.get("memory_utilization"));
    s.temperature_c = opt_u32(g.get("temperature_c"));
    s.power_draw_mw = opt_u32(g.get("power_draw_mw"));
    s.power_limit_mw = opt_u32(g.get("power_limit_mw"));
    s.sm_clock_mhz = opt_u32(g.get("sm_clock_mhz"));
    s.memory_clock_mhz = opt_u32(g.get("memory_clock_mhz"));
    s.fan_percent = opt_u32(g.get("fan_percent"));
    s.processes = g.get("processes").and_then(Value::as_array).map(|list| {
        list.iter()
            .filter_map(Value::as_object)
            .filter_map(|p| {
                Some(GpuProcess {
                    pid: opt_u32(p.get("pid"))?,
                    used_memory: opt_u64(p.get("used_memory")),
                    user: opt_text(p.get("user")),
                    command: opt_text(p.get("command")),
                    parent_pid: opt_u32(p.get("parent_pid")),
                    gpu_instance_id: opt_u32(p.get("gpu_instance_id")),
                    compute_instance_id: opt_u32(p.get("compute_instance_id")),
                    usage: crate::device::ProcessUsage {
                        sm_percent: opt_u32(p.get("sm_percent")),
                        cpu_percent: p
                            .get("cpu_percent")
                            .and_then(Value::as_f64)
                            .filter(|c| c.is_finite() && *c >= 0.0),
                        host_memory: opt_u64(p.get("host_memory")),
                    },
                })
            })
            .collect()
    });
    s.mig = g.get("mig").and_then(Value::as_object).map(|m| MigInfo {
        parent_index: opt_u32(m.get("parent_index")).unwrap_or(index),
        gpu_instance_id: opt_u32(m.get("gpu_instance_id")),
        compute_instance_id: opt_u32(m.get("compute_instance_id")),
    });
    let allocator = |a: &Value| a.as_object().map(headless_allocator);
    Some(HeadlessGpu {
        reading: GpuReading::Ok(s),
        allocator: g.get("allocator").and_then(allocator),
        allocators: g
            .get("allocators")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(allocator)
            .collect(),
        breakdown: None,
        unattributed: opt_u64(g.get("unattributed")),
        mig_index: opt_u32(g.get("mig_index")),
    })
}

fn headless_allocator(a: &serde_json::Map<String, Value>) -> AllocatorSummary {
    let f = a.get("fragmentation").and_then(Value::as_object);
    let fu = |key: &str| f.and_then(|f| opt_u64(f.get(key))).unwrap_or(0);
    AllocatorSummary {
        source: opt_text(a.get("source")).unwrap_or_else(|| NA.to_string()),
        pid: opt_u32(a.get("pid")),
        allocated: opt_u64(a.get("allocated")).unwrap_or(0),
        reserved: opt_u64(a.get("reserved")).unwrap_or(0),
        active: opt_i64(a.get("active")).unwrap_or(0),
        inactive_split_bytes: opt_i64(a.get("inactive_split_bytes")).unwrap_or(0),
        segments: opt_i64(a.get("segments")).unwrap_or(0),
        num_alloc_retries: opt_i64(a.get("num_alloc_retries")),
        num_ooms: opt_i64(a.get("num_ooms")),
        fragmentation: crate::alloc::Fragmentation {
            // The histogram is not in the text.
            histogram: Vec::new(),
            internal_free: fu("internal_free"),
            external_free: fu("external_free"),
            non_releasable: fu("non_releasable"),
            free_in_whole_segments: fu("free_in_whole_segments"),
            whole_free_segments: fu("whole_free_segments"),
            largest_free_block: fu("largest_free_block"),
            // 0 in a record written before vramtop wrote it.
            largest_split_free_block: fu("largest_split_free_block"),
            free_blocks: fu("free_blocks"),
            fragmentation: f
                .and_then(|f| f.get("fragmentation"))
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        },
        segments_age_s: a.get("segments_age_s").and_then(Value::as_f64),
        segments_received: a
            .get("segments_received")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        unknown: a
            .get("unknown")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|u| opt_text(Some(u)))
            .collect(),
        // Absent in recordings made before vramtop wrote it.
        torch_peak: a
            .get("torch_peak")
            .and_then(|p| serde_json::from_value(p.clone()).ok()),
    }
}

/// An allocator's peaks over a recording: PyTorch's own where the lines
/// carry them (`torch_peak`), then the highest sample, which misses a peak
/// between two samples and says so where it is all there is.
fn allocator_peaks(
    a: &crate::device::recording::AllocatorRecord,
    moment: &dyn Fn(Option<crate::device::recording::Moment>) -> String,
    clock: &Clock,
) -> String {
    let sampled = format!(
        "highest sample allocated {}, reserved {}",
        moment(a.allocated_peak),
        moment(a.reserved_peak)
    );
    if a.torch_allocated_peak.is_none() && a.torch_reserved_peak.is_none() {
        return format!("{sampled} (a peak between samples is missed)");
    }
    // Reached by the first sample that carried it, not at it.
    let by = |p: Option<crate::device::recording::Moment>| {
        p.map_or_else(
            || NA.to_string(),
            |p| format!("{} by {}", format::bytes(p.bytes), clock.at(p.time_unix_ms)),
        )
    };
    format!(
        "PyTorch's own peak allocated {}, reserved {} (since {}); {sampled}",
        by(a.torch_allocated_peak),
        by(a.torch_reserved_peak),
        crate::app::state::OWN_PEAK_SINCE
    )
}

/// Why a recording gives no summary: it holds no sample.
pub fn no_samples(s: &RecordingSummary) -> Option<String> {
    if s.samples > 0 {
        return None;
    }
    let k = &s.skipped;
    Some(if s.lines == 0 {
        format!("it is empty: {NEITHER} in it (still being written?)")
    } else if k.lines() == 0 {
        format!(
            "{} and no sample",
            count(s.lines, "blank line", "blank lines")
        )
    } else if k.cut_last_line && k.lines() == 1 {
        "its only sample is cut mid-write (the recording was stopped while writing it): \
         no whole sample"
            .to_string()
    } else {
        format!(
            "neither a `vramtop record` file nor a memory snapshot: no line is a recorded \
             sample ({}), and a snapshot is a pickle (torch.cuda.memory._dump_snapshot())",
            skipped_words(s)
        )
    })
}

/// "3 lines skipped: 2 not JSON (the first: line 17), the last cut
/// mid-write".
fn skipped_words(s: &RecordingSummary) -> String {
    let k = &s.skipped;
    let mut parts = Vec::new();
    if k.not_json > 0 {
        parts.push(format!("{} not JSON", count(k.not_json, "line", "lines")));
    }
    if k.not_a_sample > 0 {
        parts.push(format!(
            "{} JSON but no sample",
            count(k.not_a_sample, "line", "lines")
        ));
    }
    if k.too_long > 0 {
        parts.push(format!(
            "{} over {}",
            count(k.too_long, "line", "lines"),
            format::bytes(crate::device::recording::MAX_LINE_BYTES as u64)
        ));
    }
    if k.cut_then_appended > 0 {
        parts.push(format!(
            "{} cut mid-write, then appended to (its sample after the cut is read)",
            count(k.cut_then_appended, "sample", "samples")
        ));
    }
    if k.cut_last_line {
        parts.push(
            "the last line cut mid-write (the recording was stopped while writing it)".into(),
        );
    }
    let mut out = parts.join(", ");
    if let Some(first) = k.first_line {
        let _ = write!(out, "; the first at line {first}");
    }
    out
}

/// `ms` since the Unix epoch in UTC, RFC 3339 with milliseconds.
fn utc(ms: u64) -> String {
    datetime(ms).map_or_else(
        || format!("{ms} ms since the epoch"),
        |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
    )
}

fn datetime(ms: u64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(i64::try_from(ms).ok()?)
}

/// How the text writes a sample's time: with the date when the recording
/// spans more than one UTC day, with milliseconds when samples come
/// faster than one a second.
#[derive(Debug, Clone, Copy)]
struct Clock {
    date: bool,
    millis: bool,
}

impl Clock {
    fn of(s: &RecordingSummary) -> Clock {
        let day = |ms: Option<u64>| ms.and_then(datetime).map(|t| t.date_naive());
        Clock {
            date: day(s.first_unix_ms) != day(s.last_unix_ms),
            millis: s
                .gpus
                .iter()
                .any(|g| g.interval_ms.is_some_and(|i| i < 1_000)),
        }
    }

    fn at(self, ms: u64) -> String {
        let Some(t) = datetime(ms) else {
            return format!("{ms} ms since the epoch");
        };
        let pattern = match (self.date, self.millis) {
            (true, true) => "%Y-%m-%d %H:%M:%S%.3f",
            (true, false) => "%Y-%m-%d %H:%M:%S",
            (false, true) => "%H:%M:%S%.3f",
            (false, false) => "%H:%M:%S",
        };
        t.format(pattern).to_string()
    }
}

/// A length of time: "200 ms", "1.5s", "45s", then "7h47m53s".
fn span(ms: u64) -> String {
    if ms < 60_000 {
        format::interval(ms)
    } else {
        format::seconds(ms.saturating_add(500) / 1_000)
    }
}

/// `label` padded to the label column, 2 cells in.
fn lead(label: &str) -> String {
    format!("  {label:<LABEL$}")
}

fn line_under(out: &mut String, label: &str, text: &str) {
    let _ = writeln!(out, "{}", wrap_under(&lead(label), text, REPORT_WIDTH));
}

/// The text summary: the file's span and what was skipped, then per GPU
/// its samples and gaps, memory used (peak and who held it, minimum,
/// median), its allocators' peaks, each OOM and allocation retry, and
/// the most fragmented moment.
pub fn render(name: &str, s: &RecordingSummary, top: usize) -> String {
    let mut out = String::new();
    let counts = format!(
        "{}, {}",
        count(s.samples, "sample", "samples"),
        count_of(s.gpus.len(), "GPU", "GPUs")
    );
    let _ = writeln!(out, "{}", path_heading(name, &counts, REPORT_WIDTH));
    let clock = Clock::of(s);
    if let (Some(first), Some(last)) = (s.first_unix_ms, s.last_unix_ms) {
        let full = Clock {
            date: true,
            millis: clock.millis,
        };
        let end = if clock.date {
            full.at(last)
        } else {
            clock.at(last)
        };
        line_under(
            &mut out,
            "time (UTC)",
            &format!("{} to {end} ({})", full.at(first), span(s.duration_ms)),
        );
    }
    if !s.backends.is_empty() {
        line_under(&mut out, "backend", &s.backends.join(", "));
    }
    if s.time_went_back > 0 {
        line_under(
            &mut out,
            "note:",
            &format!(
                "time went back in {} (a clock set back, or files joined out of order): \
                 the span is from the earliest to the latest",
                count(s.time_went_back, "sample", "samples")
            ),
        );
    }
    if s.skipped.lines() > 0 {
        line_under(
            &mut out,
            "skipped",
            &format!(
                "{}: {}",
                count(s.skipped.lines(), "line", "lines"),
                skipped_words(s)
            ),
        );
    }
    if s.gpus.is_empty() {
        let _ = writeln!(out, "no GPU: the samples list none");
    }
    for g in &s.gpus {
        gpu_text(&mut out, g, clock, top);
    }
    if s.gpus_left_out > 0 {
        line_under(
            &mut out,
            "note:",
            &format!(
                "{} past the first {} GPUs not summed up",
                count(s.gpus_left_out, "GPU entry", "GPU entries"),
                crate::device::recording::MAX_GPUS
            ),
        );
    }
    out
}

fn gpu_text(out: &mut String, g: &GpuRecord, clock: Clock, top: usize) {
    let head = match g.mig_index {
        Some(slot) => format!("GPU {} MIG {slot}", g.index),
        None => format!("GPU {}", g.index),
    };
    let name = g.name.as_deref().unwrap_or(NA);
    let head = format!("{head}  {name}");
    let _ = writeln!(out, "{}", super::text::elide_end(&head, REPORT_WIDTH));
    if let Some(uuid) = &g.uuid {
        line_under(out, "uuid", uuid);
    }
    let mut samples = format!(
        "{} from {} to {}",
        g.samples,
        clock.at(g.first_unix_ms),
        clock.at(g.last_unix_ms)
    );
    if let Some(i) = g.interval_ms {
        let _ = write!(samples, ", every {} (median)", span(i));
    }
    if g.lost_samples > 0 {
        let _ = write!(samples, "; lost in {}", g.lost_samples);
        if let Some(t) = g.first_lost_unix_ms {
            let _ = write!(samples, " from {}", clock.at(t));
        }
        if let Some(reason) = &g.lost_reason {
            let _ = write!(samples, " ({reason})");
        }
    }
    if g.absent_samples > 0 {
        let _ = write!(samples, "; absent from {}", g.absent_samples);
    }
    if g.time_went_back > 0 {
        let _ = write!(
            samples,
            "; time went back {}",
            count(g.time_went_back, "time", "times")
        );
    }
    if g.samples_after_last > 0 {
        let _ = write!(
            samples,
            "; last seen at {}, {} after without it",
            clock.at(g.last_unix_ms),
            count(g.samples_after_last, "sample", "samples")
        );
    }
    line_under(out, "samples", &samples);
    if let (Some(t), Some(last)) = (g.name_changed_unix_ms, &g.last_name) {
        line_under(
            out,
            "note:",
            &format!(
                "name changed at {} to {last} (another card, or another recording \
                 appended)",
                clock.at(t)
            ),
        );
    }
    if let Some(gap) = g.longest_gap {
        let over = match g.gaps {
            0 => "none over twice the interval".to_string(),
            n => format!("{} over twice the interval", count(n, "gap", "gaps")),
        };
        line_under(
            out,
            "gaps",
            &format!(
                "longest {} after {}; {over}",
                span(gap.ms),
                clock.at(gap.from_unix_ms)
            ),
        );
    }
    match &g.memory_used {
        None => line_under(out, "memory used", &format!("{NA} (no sample gives it)")),
        Some(m) => {
            let of_total = match m.peak.memory_total {
                Some(total) => format!(
                    " of {} ({})",
                    format::bytes(total),
                    format::percent_of(m.peak.bytes, total)
                ),
                None => String::new(),
            };
            line_under(
                out,
                "memory used",
                &format!(
                    "peak {}{of_total} at {}; min {} at {}; median {}{}",
                    format::bytes(m.peak.bytes),
                    clock.at(m.peak.time_unix_ms),
                    format::bytes(m.min.bytes),
                    clock.at(m.min.time_unix_ms),
                    if m.median_exact { "" } else { "about " },
                    format::bytes(m.median)
                ),
            );
            peak_processes(out, &m.peak, top);
        }
    }
    for a in &g.allocators {
        let whose = match a.pid {
            Some(pid) => format!("allocator pid {pid}"),
            None => format!("allocator {}", a.source.as_deref().unwrap_or(NA)),
        };
        let moment = |p: Option<crate::device::recording::Moment>| {
            p.map_or_else(
                || NA.to_string(),
                |p| format!("{} at {}", format::bytes(p.bytes), clock.at(p.time_unix_ms)),
            )
        };
        let mut figures = allocator_peaks(a, &moment, &clock);
        let _ = write!(
            figures,
            ", {}",
            counter_words(a.ooms, a.ooms_before, "OOM", "OOMs")
        );
        let _ = write!(
            figures,
            ", {}",
            counter_words(
                a.alloc_retries,
                a.alloc_retries_before,
                "alloc retry",
                "alloc retries"
            )
        );
        if a.restarts > 0 {
            let _ = write!(
                figures,
                ", {} (its counters fell)",
                count(a.restarts, "restart", "restarts")
            );
        }
        line_under(out, &whose, &figures);
    }
    // No allocator view is mapped to a MIG device (as `--once`).
    if g.allocators.is_empty() && g.mig_index.is_none() {
        line_under(
            out,
            "allocator",
            &format!("{NA} (no probed process in the samples: docs/attach.md)"),
        );
    }
    if g.allocators_left_out > 0 {
        line_under(
            out,
            "",
            &format!(
                "{} past the first {} not summed up",
                count(
                    g.allocators_left_out,
                    "allocator sighting",
                    "allocator sightings"
                ),
                crate::device::recording::MAX_ALLOCATORS_PER_GPU
            ),
        );
    }
    let lines = event_lines(&g.events, clock);
    for (label, text) in lines.iter().take(EVENT_LINES) {
        // A label past the column ("OOMs #12-#14 (restart 2)") keeps a
        // space before its text.
        let lead = if super::text::cells(label) < LABEL {
            lead(label)
        } else {
            format!("  {label} ")
        };
        let _ = writeln!(out, "{}", wrap_under(&lead, text, REPORT_WIDTH));
    }
    let unlisted = (lines.len().saturating_sub(EVENT_LINES) as u64)
        .saturating_add(g.ooms_left_out)
        .saturating_add(g.alloc_retries_left_out);
    if unlisted > 0 {
        let _ = writeln!(
            out,
            "  … {} more (the first {} of each kind are in --json)",
            count(unlisted, "event", "events"),
            crate::device::recording::MAX_EVENTS_PER_KIND
        );
    }
    if let Some(f) = &g.fragmentation_peak {
        let mut text = format!(
            "highest {} at {}",
            format::percent(f.fragmentation),
            clock.at(f.time_unix_ms)
        );
        if let Some(pid) = f.pid {
            let _ = write!(text, " (pid {pid})");
        }
        if let (Some(free), Some(largest)) = (f.external_free, f.largest_free_block) {
            let _ = write!(
                text,
                ": {} external free, largest free block {}",
                format::bytes(free),
                format::bytes(largest)
            );
        }
        line_under(out, "fragmentation", &text);
    }
}

/// "2 OOMs (1 before)", "0 OOMs", "OOMs n/a" where no sample said.
fn counter_words(rises: u64, before: Option<u64>, one: &str, many: &str) -> String {
    match before {
        None if rises == 0 => format!("{many} {NA}"),
        Some(b) if b > 0 => format!("{} ({b} before)", count(rises, one, many)),
        _ => count(rises, one, many),
    }
}

/// An event as a labelled row: "OOM #2" and "at 03:14:07 (pid 4242):
/// reserved 78.1 GiB, allocated 61.0 GiB (+5 alloc retries)" (`retries`:
/// the rise of `num_alloc_retries` at the same sample); a rise of several:
/// "OOMs #2-#4"; after a counter fell (a restart), numbered by the counter
/// since: "OOM #1 (restart 2)".
fn event_words(e: &CounterEvent, retries: Option<&CounterEvent>, clock: Clock) -> (String, String) {
    let (one, many) = match e.kind {
        CounterKind::Oom => ("OOM", "OOMs"),
        CounterKind::AllocRetry => ("alloc retry", "alloc retries"),
        CounterKind::OomsFell | CounterKind::AllocRetriesFell => {
            return fell_words(e, None, clock);
        }
    };
    let mut which = if e.to == e.from.saturating_add(1) {
        format!("{one} #{}", e.to)
    } else {
        format!("{many} #{}-#{}", e.from.saturating_add(1), e.to)
    };
    if e.restart > 0 {
        let _ = write!(which, " (restart {})", e.restart);
    }
    let mut text = format!("at {}", clock.at(e.time_unix_ms));
    if let Some(pid) = e.pid {
        let _ = write!(text, " (pid {pid})");
    }
    let figure = |b: Option<u64>| b.map_or_else(|| NA.to_string(), format::bytes);
    let _ = write!(
        text,
        ": reserved {}, allocated {}",
        figure(e.reserved),
        figure(e.allocated)
    );
    if let Some(r) = retries {
        let _ = write!(
            text,
            " (+{})",
            count(r.to.saturating_sub(r.from), "alloc retry", "alloc retries")
        );
    }
    (which, text)
}

/// A fall as a labelled row: "restart 1" and "num_ooms fell from 1 to 0
/// at 14:32:50 (pid 4242): process restarted (or counters reset)";
/// `retries`: the fall of `num_alloc_retries` at the same sample, said in
/// the same row.
fn fell_words(e: &CounterEvent, retries: Option<&CounterEvent>, clock: Clock) -> (String, String) {
    let counter = |e: &CounterEvent| match e.kind {
        CounterKind::Oom | CounterKind::OomsFell => "num_ooms",
        CounterKind::AllocRetry | CounterKind::AllocRetriesFell => "num_alloc_retries",
    };
    let mut text = format!("{} fell from {} to {}", counter(e), e.from, e.to);
    if let Some(r) = retries {
        let _ = write!(text, " and {} from {} to {}", counter(r), r.from, r.to);
    }
    let _ = write!(text, " at {}", clock.at(e.time_unix_ms));
    if let Some(pid) = e.pid {
        let _ = write!(text, " (pid {pid})");
    }
    text.push_str(": process restarted (or counters reset)");
    (format!("restart {}", e.restart), text)
}

/// The rows of a GPU's counter events: a rise (or fall) of
/// `num_alloc_retries` at the sample where `num_ooms` rose (fell) too is
/// said in the same row, so that the OOMs are not crowded out by the
/// retries each of them comes with.
fn event_lines(events: &[CounterEvent], clock: Clock) -> Vec<(String, String)> {
    let same =
        |a: &CounterEvent, b: &CounterEvent| a.time_unix_ms == b.time_unix_ms && a.pid == b.pid;
    // The retries' kind that goes with an OOM's.
    let partner = |k: CounterKind| match k {
        CounterKind::Oom => Some(CounterKind::AllocRetry),
        CounterKind::OomsFell => Some(CounterKind::AllocRetriesFell),
        CounterKind::AllocRetry | CounterKind::AllocRetriesFell => None,
    };
    let mut lines = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if let Some(with) = partner(e.kind) {
            let retries = events
                .iter()
                .skip(i + 1)
                .take_while(|r| same(e, r))
                .find(|r| r.kind == with);
            lines.push(match e.kind {
                CounterKind::OomsFell => fell_words(e, retries, clock),
                _ => event_words(e, retries, clock),
            });
        } else if !events[..i]
            .iter()
            .rev()
            .take_while(|o| same(e, o))
            .any(|o| partner(o.kind) == Some(e.kind))
        {
            lines.push(event_words(e, None, clock));
        }
    }
    lines
}

/// The processes at a peak in the Processes pane's tree order, each with
/// its depth: a child (a DataLoader worker) under its parent where the
/// parent is listed too, a family (a process and its children) by what
/// it holds in all, largest first; the rest as they come, largest first.
fn peak_tree(processes: &[PeakProcess]) -> Vec<(&PeakProcess, usize, bool)> {
    let mut gpu = GpuSample::unknown(0, String::new());
    gpu.processes = Some(
        processes
            .iter()
            .map(|p| GpuProcess {
                parent_pid: p.parent_pid,
                ..GpuProcess::new(p.pid, p.used_memory)
            })
            .collect(),
    );
    let rows = crate::app::state::process_rows_sorted(
        &[&gpu],
        true,
        "",
        Some(crate::app::process_list::ProcessSort::default()),
    );
    // Every process once, in the tree's order (a pid listed twice is one
    // line there: its other entries follow at the end, as listed).
    let mut taken = vec![false; processes.len()];
    let mut out = Vec::with_capacity(processes.len());
    for row in &rows {
        if let Some(i) =
            (0..processes.len()).find(|&i| !taken[i] && processes[i].pid == row.process.pid)
        {
            taken[i] = true;
            out.push((&processes[i], row.depth, row.own_context_in_child));
        }
    }
    out.extend(
        processes
            .iter()
            .zip(&taken)
            .filter(|(_, t)| !**t)
            .map(|(p, _)| (p, 0, false)),
    );
    out
}

/// The processes at a memory peak, as `--once` lists them, `top` of them,
/// children under their parent as the Processes pane's tree draws them.
fn peak_processes(out: &mut String, peak: &crate::device::recording::UsedPeak, top: usize) {
    if !peak.processes_listed {
        let _ = writeln!(out, "{}", lead("at the peak") + format::PROCESSES_NA);
        return;
    }
    let all = (peak.processes.len() as u64).saturating_add(peak.processes_left_out);
    if all == 0 {
        let _ = writeln!(out, "{}no processes", lead("at the peak"));
        return;
    }
    let _ = writeln!(
        out,
        "{}{}:",
        lead("at the peak"),
        count(all, "process", "processes")
    );
    let rows = peak_tree(&peak.processes);
    super::sample_text::process_rows(
        out,
        rows.iter()
            .take(top)
            .map(|(p, depth, own_context)| super::sample_text::ProcessRow {
                pid: p.pid,
                user: p.user.as_deref(),
                command: p.command.as_deref(),
                used_memory: p.used_memory,
                depth: *depth,
                own_context: *own_context,
            }),
    );
    let shown = peak.processes.len().min(top) as u64;
    if all > shown {
        // The bytes of those not listed (past `top` in the tree's order):
        // the figures known.
        let rest = rows
            .iter()
            .skip(top)
            .filter_map(|(p, ..)| p.used_memory)
            .fold(peak.processes_left_out_bytes, u64::saturating_add);
        let _ = writeln!(
            out,
            "    … {} more, {}{}",
            all - shown,
            format::bytes(rest),
            if shown < peak.processes.len() as u64 {
                " (--top N lists more)"
            } else {
                ""
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::recording::read_recording;

    const GIB: u64 = 1 << 30;

    fn summary(text: &str) -> RecordingSummary {
        read_recording(text.as_bytes()).expect("in memory")
    }

    fn sample(t: u64, used: u64, ooms: u64) -> String {
        format!(
            r#"{{"time_unix_ms":{t},"backend":"nvml","gpus":[{{"status":"ok","index":0,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-1","memory_total":{},"memory_used":{used},"processes":[{{"pid":4242,"command":"python train.py --model a-very-long-model-name --batch 8 --and-many-more-flags-than-fit","used_memory":{used}}}],"allocators":[{{"source":"pid 4242","pid":4242,"allocated":{},"reserved":{used},"num_ooms":{ooms},"num_alloc_retries":0,"fragmentation":{{"fragmentation":0.25,"external_free":{},"largest_free_block":{}}},"segments_received":true}}]}}]}}"#,
            80 * GIB,
            used / 2,
            used / 4,
            used / 16
        )
    }

    // 2026-12-07 03:14:05 UTC.
    const T0: u64 = 1_796_613_245_000;

    #[test]
    fn dataloader_workers_at_the_peak_are_listed_under_their_parent_as_the_tree_draws_them() {
        let process = |pid: u32, parent: u32, gib: u64| {
            format!(
                r#"{{"pid":{pid},"parent_pid":{parent},"user":"alice","command":"python job{pid}.py","used_memory":{}}}"#,
                gib * GIB
            )
        };
        // The workers (4300, 4301) hold less than another job (5000):
        // flat, largest first, they were listed apart from their parent.
        let processes = [
            process(4242, 1, 30),
            process(5000, 1, 20),
            process(4300, 4242, 2),
            process(4301, 4242, 1),
            // A worker of a parent not on the GPU: a line of its own.
            process(7001, 7000, 3),
        ]
        .join(",");
        let text = format!(
            r#"{{"time_unix_ms":{T0},"gpus":[{{"status":"ok","index":0,"memory_used":{},"processes":[{processes}]}}]}}"#,
            56 * GIB
        );
        let s = summary(&text);
        let out = render("run.jsonl", &s, 10);
        let pids: Vec<&str> = out
            .lines()
            .filter_map(|l| l.trim_start().strip_prefix("pid "))
            .map(|l| l.split_whitespace().next().unwrap_or_default())
            .collect();
        assert_eq!(pids, ["4242", "4300", "4301", "5000", "7001"], "{out}");
        // A worker under its parent holds a CUDA context of its own, marked
        // as the Processes pane marks it; one whose parent is not on the
        // GPU is not.
        // The first of the two is drawn with a sibling below it.
        assert!(
            out.contains("alice  ├ own CUDA context! python job4300.py"),
            "{out}"
        );
        assert!(
            out.contains("alice  └ own CUDA context! python job4301.py"),
            "{out}"
        );
        assert!(out.contains("alice  python job7001.py"), "{out}");
        // --top counts lines in that order; the rest are said with their
        // bytes: those past the first 2 lines (4301, 5000, 7001).
        let top2 = render("run.jsonl", &s, 2);
        assert!(
            top2.contains("    … 3 more, 24.0 GiB (--top N lists more)"),
            "{top2}"
        );
        // The JSON keeps the flat list, largest first, with the parent.
        let json = serde_json::to_value(&s).expect("encodes");
        let listed = &json["gpus"][0]["memory_used"]["peak"]["processes"];
        assert_eq!(listed[0]["pid"], 4242);
        assert_eq!(listed[1]["pid"], 5000);
        assert_eq!(listed[2]["parent_pid"], 7000);
        for line in out.lines() {
            assert!(super::super::text::cells(line) <= 80, "{line}");
        }
    }

    #[test]
    fn a_peak_recorded_without_parents_is_listed_flat_largest_first() {
        // A recording from before `record` wrote parent_pid.
        let processes = [(4242, 1), (4300, 3), (5000, 2)]
            .map(|(pid, gib)| {
                format!(
                    r#"{{"pid":{pid},"command":"python job{pid}.py","used_memory":{}}}"#,
                    gib * GIB
                )
            })
            .join(",");
        let text = format!(
            r#"{{"time_unix_ms":{T0},"gpus":[{{"status":"ok","index":0,"memory_used":{},"processes":[{processes}]}}]}}"#,
            6 * GIB
        );
        let out = render("run.jsonl", &summary(&text), 10);
        let at = |pid: &str| out.find(&format!("pid {pid}")).expect(pid);
        assert!(at("4300") < at("5000") && at("5000") < at("4242"), "{out}");
        assert!(!out.contains('└'), "{out}");
    }

    #[test]
    fn the_peak_names_each_processs_user_and_the_bytes_of_those_not_listed() {
        let process = |pid: u32, user: &str, gib: u64| {
            format!(
                r#"{{"pid":{pid},"user":"{user}","command":"python job{pid}.py","used_memory":{}}}"#,
                gib * GIB
            )
        };
        let processes = [
            process(4242, "alice", 40),
            process(5000, "bob", 2),
            process(6000, "carol", 1),
        ]
        .join(",");
        let text = format!(
            r#"{{"time_unix_ms":{T0},"backend":"nvml","gpus":[{{"status":"ok","index":0,"name":"GPU","uuid":"GPU-1","memory_total":{},"memory_used":{},"processes":[{processes}]}}]}}"#,
            80 * GIB,
            43 * GIB
        );
        let out = render("run.jsonl", &summary(&text), 1);
        assert!(out.contains("pid 4242  alice  python job4242.py"), "{out}");
        assert!(
            out.contains("… 2 more, 3.00 GiB (--top N lists more)"),
            "{out}"
        );
        let all = render("run.jsonl", &summary(&text), 10);
        assert!(all.contains("pid 6000  carol  python job6000.py"), "{all}");
        assert!(!all.contains("more,"), "{all}");
    }

    #[test]
    fn the_text_names_the_peak_its_holder_and_each_oom_in_80_columns() {
        let text: String = [
            sample(T0, 10 * GIB, 0),
            sample(T0 + 1_000, 78 * GIB, 0),
            sample(T0 + 2_000, 78 * GIB, 1),
            sample(T0 + 3_000, 20 * GIB, 2),
        ]
        .join("\n");
        let out = render("run.jsonl", &summary(&text), 10);
        assert!(out.starts_with("run.jsonl: 4 samples, 1 GPU\n"), "{out}");
        assert!(
            out.contains("2026-12-07 03:14:05 to 03:14:08 (3s)"),
            "{out}"
        );
        assert!(
            out.contains("peak 78.0 GiB of 80.0 GiB (98%) at 03:14:06"),
            "{out}"
        );
        assert!(out.contains("pid 4242  python train.py"), "{out}");
        assert!(
            out.contains(
                "  OOM #1               at 03:14:07 (pid 4242): reserved 78.0 GiB,\n\
                 \x20                      allocated 39.0 GiB\n"
            ),
            "{out}"
        );
        assert!(out.contains("  OOM #2               at 03:14:08"), "{out}");
        for l in out.lines() {
            assert!(super::super::text::cells(l) <= REPORT_WIDTH, "{l}");
        }
    }

    #[test]
    fn a_counter_that_falls_is_said_as_a_restart_and_the_ooms_after_it_numbered_apart() {
        // Two nights joined: OOM #1 in each, num_ooms back to 0 between.
        let text: String = [
            sample(T0, GIB, 0),
            sample(T0 + 1_000, GIB, 1),
            sample(T0 + 2_000, GIB, 0),
            sample(T0 + 3_000, GIB, 1),
            sample(T0 + 4_000, GIB, 0),
            sample(T0 + 5_000, GIB, 1),
        ]
        .join("\n");
        let s = summary(&text);
        let out = render("run.jsonl", &s, 10);
        assert!(
            out.contains("  OOM #1               at 03:14:06 (pid 4242)"),
            "{out}"
        );
        assert!(
            out.contains(
                "  restart 1            num_ooms fell from 1 to 0 at 03:14:07 (pid 4242): process\n\
                 \x20                      restarted (or counters reset)\n"
            ),
            "{out}"
        );
        assert!(out.contains("  OOM #1 (restart 1)   at 03:14:08"), "{out}");
        assert!(out.contains("  OOM #1 (restart 2)   at 03:14:10"), "{out}");
        assert!(out.contains("2 restarts (its counters fell)"), "{out}");
        let fell: Vec<_> = s.gpus[0]
            .events
            .iter()
            .filter(|e| e.kind == CounterKind::OomsFell)
            .map(|e| (e.time_unix_ms, e.from, e.to, e.restart))
            .collect();
        assert_eq!(fell, [(T0 + 2_000, 1, 0, 1), (T0 + 4_000, 1, 0, 2)]);
        let json = serde_json::to_value(&s).expect("encodes");
        assert_eq!(json["gpus"][0]["events"][1]["kind"], "ooms_fell");
        assert_eq!(json["gpus"][0]["allocators"][0]["restarts"], 2);
    }

    #[test]
    fn time_going_back_once_is_said_in_the_singular_and_makes_no_gap() {
        let text = [
            sample(T0, GIB, 0),
            sample(T0 + 1_000, GIB, 0),
            sample(T0 + 2_000 - 60_000, GIB, 0),
            sample(T0 + 3_000, GIB, 0),
        ]
        .join("\n");
        let out = render("r", &summary(&text), 10);
        assert!(out.contains("time went back 1 time\n"), "{out}");
        assert!(out.contains("none over twice the interval"), "{out}");
    }

    #[test]
    fn a_gpu_missing_from_the_last_samples_says_when_it_was_last_seen() {
        let text = [
            sample(T0, GIB, 0),
            sample(T0 + 1_000, GIB, 0),
            sample(T0 + 2_000, GIB, 0).replace("\"index\":0", "\"index\":1"),
            sample(T0 + 3_000, GIB, 0)
                .replace("\"index\":0", "\"index\":1")
                .replace("HBM3", "PCIe"),
        ]
        .join("\n");
        let out = render("r", &summary(&text), 10);
        assert!(
            out.contains("last seen at 03:14:06, 2 samples after without it"),
            "{out}"
        );
        // GPU 1 (the same uuid at another index is another GPU).
        assert!(
            out.contains("name changed at 03:14:08 to NVIDIA H100 80GB PCIe"),
            "{out}"
        );
    }

    #[test]
    fn a_recording_over_midnight_writes_dates() {
        let text = [sample(T0, GIB, 0), sample(T0 + 86_400_000, GIB, 0)].join("\n");
        let out = render("r", &summary(&text), 10);
        assert!(out.contains("2026-12-08 03:14:05"), "{out}");
    }

    #[test]
    fn a_cut_last_line_is_said_in_the_text() {
        let whole = sample(T0, GIB, 0);
        let text = format!("{whole}\n{}", &whole[..40]);
        let out = render("r", &summary(&text), 10);
        assert!(out.contains("the last line cut mid-write"), "{out}");
    }

    #[test]
    fn a_file_without_samples_says_why_in_one_line() {
        assert_eq!(no_samples(&summary(&sample(T0, 1, 0))), None);
        let empty = no_samples(&summary("")).expect("an error");
        assert!(empty.contains("empty"), "{empty}");
        let cut = no_samples(&summary(&sample(T0, 1, 0)[..50])).expect("an error");
        assert!(cut.contains("cut mid-write"), "{cut}");
        let junk = no_samples(&summary("\u{1}\u{2}binary\nzz\n")).expect("an error");
        assert!(junk.contains("2 lines not JSON"), "{junk}");
        for e in [empty, cut, junk] {
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_recorded_sample_reads_back_as_once_prints_it_its_probes_included() {
        let mut s = GpuSample::unknown(0, "NVIDIA H100 80GB HBM3");
        s.memory_total = Some(80 * GIB);
        s.memory_used = Some(61 * GIB);
        s.temperature_c = Some(61);
        s.processes = Some(vec![GpuProcess {
            command: Some("python train.py".to_string()),
            ..GpuProcess::new(4242, Some(60 * GIB))
        }]);
        let mut mig = GpuSample::unknown(3, "H100 MIG 1g.10gb");
        mig.mig = Some(MigInfo {
            parent_index: 1,
            gpu_instance_id: Some(7),
            compute_instance_id: Some(0),
        });
        let allocator = AllocatorSummary {
            source: "pid 4242 (probe)".to_string(),
            pid: Some(4242),
            allocated: 40 * GIB,
            reserved: 50 * GIB,
            active: 0,
            inactive_split_bytes: 0,
            segments: 3,
            num_alloc_retries: Some(2),
            num_ooms: Some(1),
            fragmentation: crate::alloc::fragmentation(&[]),
            segments_age_s: Some(4.0),
            segments_received: true,
            unknown: vec!["num_alloc_retries".to_string()],
            torch_peak: None,
        };
        // The histogram is not in the text, nor read back.
        let mut allocator = allocator;
        allocator.fragmentation.histogram.clear();
        let sample = HeadlessSample {
            time_unix_ms: T0,
            backend: "nvml".to_string(),
            banner: Some("a banner".to_string()),
            gpus: vec![
                HeadlessGpu {
                    allocator: Some(allocator.clone()),
                    allocators: vec![allocator.clone()],
                    ..HeadlessGpu::bare(GpuReading::Ok(s))
                },
                HeadlessGpu::bare(GpuReading::Ok(mig)),
                HeadlessGpu::bare(GpuReading::Lost {
                    index: 2,
                    reason: "fell off the bus".to_string(),
                    cause: Unanswered::Lost,
                }),
            ],
            // A probe's own entry: its line and every CUDA device's
            // figures, one not mapped to a GPU, one whose figures
            // cannot be true.
            probes: vec![HeadlessProbe {
                socket: "/run/user/1/vramtop/4242.sock".to_string(),
                pid: Some(4242),
                probe_pid: Some(17),
                pid_source: Some(PidSource::NsPid),
                status: "connected".to_string(),
                problem: Some("a line skipped".to_string()),
                command: Some("python train.py".to_string()),
                host: Some("node7".to_string()),
                torch: Some("2.5.1".to_string()),
                visible_devices: VisibleDevices::Indices(vec![0, 2]),
                devices: vec![
                    HeadlessProbeDevice {
                        device: 0,
                        gpu: Some(0),
                        allocator: Some(allocator.clone()),
                        invalid: None,
                    },
                    HeadlessProbeDevice {
                        device: 1,
                        gpu: None,
                        allocator: Some(allocator.clone()),
                        invalid: None,
                    },
                    HeadlessProbeDevice {
                        device: 2,
                        gpu: Some(2),
                        allocator: None,
                        invalid: Some("allocated exceeds reserved".to_string()),
                    },
                ],
                oom_total: 1,
                // Not read back: the sample's `ooms` lists them.
                ooms: Vec::new(),
            }],
            probes_skipped: vec!["/tmp/vramtop-x: not ours".to_string()],
            ooms: vec![HeadlessOom {
                gpu: Some(0),
                device: 0,
                pid: Some(4242),
                seq: 1,
                alloc_bytes: Some(GIB),
                time: Some(1.5),
                message: "CUDA out of memory".to_string(),
                snapshot: None,
                snapshot_error: None,
            }],
            not_started: Vec::new(),
            not_started_note: Some("1 simulated process did not start".to_string()),
        };
        let json = serde_json::to_value(&sample).expect("encodes");
        let back = headless(json.as_object().expect("an object"));
        let once = super::super::sample_text::render(&sample);
        assert_eq!(super::super::sample_text::render(&back), once);
        assert!(once.contains("GPU 1 MIG 3"), "{once}");
        assert_eq!(back.probes, sample.probes);
        assert!(
            once.contains("probe: pid 4242, connected, python train.py; a line skipped"),
            "{once}"
        );
        assert!(once.contains("  CUDA device 1: "), "{once}");
        assert!(once.contains("  GPU 2: figures not shown"), "{once}");
        assert!(once.contains("1 probe socket or folder not read"), "{once}");
    }

    #[test]
    fn at_words_name_the_samples_of_the_summary() {
        let text: String = [
            sample(T0, 10 * GIB, 0),
            sample(T0 + 1_000, 78 * GIB, 0),
            sample(T0 + 2_000, 78 * GIB, 1),
            sample(T0 + 3_000, 20 * GIB, 1),
        ]
        .join("\n");
        let s = summary(&text);
        let at = |a| target(RecordingAt::Moment(a), &s);
        assert_eq!(at(At::Start), Ok(Target::Time(T0)));
        assert_eq!(at(At::End), Ok(Target::Time(T0 + 3_000)));
        // The first of equal peaks.
        assert_eq!(at(At::Peak), Ok(Target::Time(T0 + 1_000)));
        assert_eq!(at(At::Oom), Ok(Target::Time(T0 + 2_000)));
        assert_eq!(at(At::Event(2)), Ok(Target::Ordinal(2)));
        assert_eq!(at(At::Event(4)), Ok(Target::Ordinal(4)));
        assert!(at(At::LastMark).is_err());
        let index = at(At::Index(1)).expect_err("a snapshot trace's index");
        assert!(
            index.contains("--at #1 is an index into a snapshot's trace"),
            "{index}"
        );
        assert_eq!(
            target(RecordingAt::Time(RecordingTime::After(500)), &s),
            Ok(Target::Time(T0 + 500))
        );
        let calm = summary(&sample(T0, GIB, 0));
        let none = target(RecordingAt::Moment(At::Oom), &calm).expect_err("no OOM");
        assert!(none.contains("--at oom needs an OOM"), "{none}");
    }

    #[test]
    fn a_sample_number_past_the_recording_or_zero_is_an_error_naming_how_many() {
        let text = [sample(T0, GIB, 0), sample(T0 + 1_000, GIB, 0)].join("\n");
        let s = summary(&text);
        for n in [0, 3, usize::MAX] {
            let why = target(RecordingAt::Moment(At::Event(n)), &s).expect_err("past the end");
            assert!(
                why.contains("the recording has 2 samples (--at takes 1 to 2,"),
                "{why}"
            );
        }
    }

    #[test]
    fn a_sample_far_from_the_time_asked_says_how_far() {
        let line = sample(T0, GIB, 0);
        let p = crate::device::recording::pick_sample(line.as_bytes(), Target::Time(T0 - 90_000))
            .expect("in memory")
            .expect("a sample");
        let text = sample_at("r.jsonl", &p, Some(T0 - 90_000));
        assert!(
            text.starts_with("at: the sample of 2026-12-07 03:14:05.000 UTC (line 1 of r.jsonl),"),
            "{text}"
        );
        assert!(
            text.contains("the nearest: 1m30s after the time asked"),
            "{text}"
        );
        assert!(text.contains("GPU 0  NVIDIA H100 80GB HBM3"), "{text}");
    }

    #[test]
    fn a_retry_rise_at_an_oom_joins_its_row_so_the_cap_shows_twenty_ooms() {
        let with_retries = |t: u64, n: u64| {
            sample(t, GIB, n).replace(
                "\"num_alloc_retries\":0",
                &format!("\"num_alloc_retries\":{}", 5 * n),
            )
        };
        let text: Vec<String> = (0..=25).map(|n| with_retries(T0 + n * 1_000, n)).collect();
        let out = render("r", &summary(&text.join("\n")), 10);
        assert!(
            out.contains("  OOM #20              at 03:14:25 (pid 4242): reserved 1.00 GiB,\n"),
            "{out}"
        );
        assert!(
            out.contains("allocated 512 MiB (+5 alloc retries)\n"),
            "{out}"
        );
        assert!(!out.contains("alloc retry #"), "{out}");
        assert!(!out.contains("alloc retries #"), "{out}");
        // 25 OOM rises and 25 retry rises in 25 rows, 20 shown.
        assert!(out.contains("… 5 events more"), "{out}");
        // Every continuation of a row is at the figure column.
        for l in out.lines().filter(|l| l.starts_with("   ")) {
            assert!(
                l.starts_with(&" ".repeat(2 + LABEL)) || l.starts_with("    pid "),
                "{l}"
            );
        }
    }

    #[test]
    fn a_rise_of_several_names_the_range() {
        let e = CounterEvent {
            kind: CounterKind::Oom,
            time_unix_ms: T0,
            pid: None,
            from: 1,
            to: 3,
            restart: 0,
            reserved: None,
            allocated: Some(GIB),
        };
        let clock = Clock {
            date: false,
            millis: false,
        };
        assert_eq!(
            event_words(&e, None, clock),
            (
                "OOMs #2-#3".to_string(),
                "at 03:14:05: reserved n/a, allocated 1.00 GiB".to_string()
            )
        );
    }

    #[test]
    fn an_allocators_line_says_pytorchs_own_peak_where_recorded_else_that_samples_miss_one() {
        let sampled = [sample(T0, 10 * GIB, 0), sample(T0 + 1_000, 20 * GIB, 0)].join("\n");
        let out = render("run.jsonl", &summary(&sampled), 10);
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "allocator pid 4242 highest sample allocated 10.0 GiB at 03:14:06, reserved \
                 20.0 GiB at 03:14:06 (a peak between samples is missed)"
            ),
            "{out}"
        );
        assert!(!flat.contains("PyTorch's own peak"), "{out}");
        // The same samples with the probe's peaks in their lines.
        let peak = format!(
            r#","torch_peak":{{"allocated":{},"reserved":{},"since":"x"}}}}]}}]}}"#,
            30 * GIB,
            31 * GIB
        );
        let with_peak: Vec<String> = sampled
            .lines()
            .map(|l| format!("{}{peak}", l.strip_suffix("}]}]}").unwrap_or(l)))
            .collect();
        let out = render("run.jsonl", &summary(&with_peak.join("\n")), 10);
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            flat.contains(
                "allocator pid 4242 PyTorch's own peak allocated 30.0 GiB by 03:14:05, \
                 reserved 31.0 GiB by 03:14:05 (since the process started or its last \
                 reset_peak_memory_stats()); highest sample allocated 10.0 GiB at 03:14:06"
            ),
            "{out}"
        );
        for l in out.lines() {
            assert!(super::super::text::cells(l) <= REPORT_WIDTH, "{l}");
        }
    }
}
