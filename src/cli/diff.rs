//! `vramtop diff BEFORE AFTER [--json]`: what changed between two
//! snapshot files, and `vramtop diff FILE --at A --at B`: between two
//! moments of one file's trace (see [`crate::snapshot::diff`]).

use crate::ui::format::{count_of, signed_change};
use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use color_eyre::eyre::WrapErr;

use super::EXIT_BAD_INPUT;
use super::text::{
    REPORT_WIDTH, cells, elide_folders, elide_middle, wrap_hanging, wrap_phrases_under, wrap_under,
    wrap_words,
};
use crate::alloc::human_bytes;
use crate::snapshot::Snapshot;
use crate::snapshot::diff::{
    Change, CursorDiff, Diff, ResizedSegment, SegmentRef, diff_cursors, diff_snapshot_devices,
    diff_snapshots,
};
use crate::snapshot::peak::{At, AtError, Highest, Moment};
use crate::snapshot::scrub::{DeviceScrub, scrub_devices};
use crate::snapshot::sites::{
    Grouping, NoStackReason, SiteKey, Sites, no_trace_cause, snapshot_no_stack_reason,
};
use crate::snapshot::summary::SitesAt;
use serde::Serialize;
use std::sync::Arc;

/// The usage error of `--device` in the one-file form without `--at`:
/// it picks the GPU of the two moments `--at` names.
pub const DEVICE_NEEDS_AT: &str = "--device picks the GPU of two moments of one file, and --at was \
     not provided: diff FILE --at A --at B --device N";

/// The usage error of `diff FILE` alone: what each form takes.
pub const AFTER_OR_AT: &str = "diff compares two snapshots or two moments of one, and AFTER was \
     not provided: diff BEFORE AFTER, or diff FILE --at A --at B";

/// Which of `diff`'s options were given, as far as its two forms differ:
/// two files (`diff BEFORE AFTER [--devices GPU:GPU]`) or one file's two
/// moments (`diff FILE --at A --at B [--device N]`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FormArgs {
    /// AFTER was given.
    pub two_files: bool,
    /// `--devices` was given.
    pub devices: bool,
    /// `--at` was given (any number of times).
    pub at: bool,
    /// `--device` was given.
    pub device: bool,
}

/// Why the options given make neither form of `diff`, if they do not: one
/// form's options with the other's (named as given: a refusal naming
/// `--device` to someone who gave only `--at` reads as a misparse),
/// `--device` without `--at` ([`DEVICE_NEEDS_AT`]), or one file without
/// `--at` ([`AFTER_OR_AT`]). Checked on the parsed arguments, not by clap's
/// conflicts and requirements, whose errors name the arguments as clap
/// displays them and say nothing of the other form.
pub fn form_problem(args: FormArgs) -> Option<String> {
    let given: Vec<&str> = [("--at", args.at), ("--device", args.device)]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect();
    let one_file = given.join(" and ");
    let verb = if given.len() > 1 { "are" } else { "is" };
    if !given.is_empty() && args.two_files {
        Some(format!(
            "{one_file} {verb} for one file, and two were given: diff FILE --at A --at B; two \
             files pair GPUs with --devices GPU:GPU"
        ))
    } else if !given.is_empty() && args.devices {
        Some(format!(
            "--devices pairs the GPUs of two files, and {one_file} {verb} for one file: diff \
             BEFORE AFTER --devices GPU:GPU, or diff FILE --at A --at B"
        ))
    } else if args.device && !args.at {
        Some(DEVICE_NEEDS_AT.to_string())
    } else if !args.two_files && !args.at {
        Some(AFTER_OR_AT.to_string())
    } else {
        None
    }
}

/// Lines per section in the text output (`--top`); the JSON has all.
pub const DEFAULT_LINES: usize = 20;

/// `GPU:GPU` of `--devices`: two device numbers.
pub fn parse_device_pair(text: &str) -> Result<(u32, u32), String> {
    let bad = || {
        format!(
            "\"{}\" is not GPU:GPU (two device numbers, as 0:1)",
            crate::quote::cut(text)
        )
    };
    let (b, a) = text.split_once(':').ok_or_else(bad)?;
    let number = |t: &str| {
        let t = t.trim();
        t.parse::<u32>().map_err(|_| {
            if crate::quote::is_digits(t) {
                // Two device numbers, one too large: its range, not "not GPU:GPU".
                format!(
                    "{} (a GPU number of --devices)",
                    crate::quote::not_in_range(t, 0, u32::MAX.into())
                )
            } else {
                bad()
            }
        })
    };
    Ok((number(b)?, number(a)?))
}

/// How `diff` prints: text (`--top` lines a section, `--ascii`) or JSON,
/// with sites by `grouping`.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    pub json: bool,
    pub top: usize,
    pub ascii: bool,
    pub grouping: Grouping,
}

pub fn run(
    before: &Path,
    after: &Path,
    devices: Option<(u32, u32)>,
    output: Output,
) -> color_eyre::Result<ExitCode> {
    if before.as_os_str() == super::STDIN_ARG && after.as_os_str() == super::STDIN_ARG {
        super::say_error("only one of BEFORE and AFTER can be - (standard input)");
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    }
    // Only the text says whether the two sides are one file, and only
    // where they are compared GPU for GPU alike.
    let note = !output.json && devices.is_none_or(|(b, a)| b == a);
    // Standard input is compared with the other side's file as it is read:
    // once read, its bytes are gone.
    let mut stdin_same = None;
    // The reader's errors already start with the file's name.
    let mut read = |p: &Path, other: &Path| {
        let compared = note
            && p.as_os_str() == super::STDIN_ARG
            && std::fs::metadata(other).is_ok_and(|m| m.is_file());
        let read = if compared {
            super::piped_stdin().and_then(|stdin| {
                let mut input = SameBytes::new(stdin, other);
                let read = super::read_stdin_snapshot(&mut input, DIFF_STACKS);
                stdin_same = Some(input.same());
                read
            })
        } else {
            super::read_snapshot_arg_with(p, DIFF_STACKS)
        };
        read.map_err(|e| super::snapshot_read_error(p, &e, super::Reads::Snapshots))
    };
    let (b, a) = match (read(before, after), read(after, before)) {
        (Ok(b), Ok(a)) => (b, a),
        (Err(e), _) | (_, Err(e)) => {
            super::say_error(e);
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let compared = match devices {
        Some(pair) => diff_snapshot_devices(&b, &a, pair, output.grouping),
        None => diff_snapshots(&b, &a, output.grouping),
    };
    let diff = match compared {
        Ok(d) => d,
        Err(e) => {
            super::say_error(e);
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let text = if output.json {
        let mut t = serde_json::to_string_pretty(&diff).wrap_err("cannot encode the diff")?;
        t.push('\n');
        t
    } else {
        let mut t = String::new();
        // A report of zeros reads as "nothing changed" when the cause is
        // that one file was given twice: say which first.
        let how = match stdin_same {
            Some(true) => Some(COPY),
            _ if note => same_file(before, after),
            _ => None,
        };
        if let Some(how) = how {
            let _ = writeln!(t, "note: BEFORE and AFTER {how}: nothing can differ");
        }
        t.push_str(&render_diff(
            &on_device(before, devices.map(|d| d.0)),
            &on_device(after, devices.map(|d| d.1)),
            &diff,
            output.top,
        ));
        t
    };
    super::emit_text(&text, output.ascii).wrap_err("cannot write the output")?;
    Ok(ExitCode::SUCCESS)
}

/// The stacks a diff reads: those of what is live at a moment (allocations
/// and segments), which its sites show; a free's are never shown.
const DIFF_STACKS: crate::snapshot::Stacks = crate::snapshot::Stacks::OfAllocations;

/// How the note says two sides with the same bytes.
const COPY: &str = "hold the same bytes (a copy)";

/// Whether `before` and `after` are one file: "are one file (the same
/// path)" when both paths lead to it, [`COPY`] when two files do, compared
/// a chunk at a time. Standard input is not compared here (it has been
/// read already: [`SameBytes`] compared it while it was), and a file that
/// cannot be read again is not the same either.
fn same_file(before: &Path, after: &Path) -> Option<&'static str> {
    if before.as_os_str() == super::STDIN_ARG || after.as_os_str() == super::STDIN_ARG {
        return None;
    }
    let (b, a) = (before.canonicalize().ok()?, after.canonicalize().ok()?);
    if b == a {
        return Some("are one file (the same path)");
    }
    let size = |p: &Path| std::fs::metadata(p).ok().map(|m| m.len());
    if size(&b)? != size(&a)? {
        return None;
    }
    let mut copy = SameBytes::new(std::fs::File::open(&b).ok()?, &a);
    std::io::copy(&mut copy, &mut std::io::sink()).ok()?;
    copy.same().then_some(COPY)
}

/// Bytes compared in one go with the other file: what [`SameBytes`] holds
/// besides the reader's own buffer.
const COMPARE_CHUNK: usize = 64 * 1024;

/// A reader passing `input` on while comparing it with a file, a chunk at
/// a time (memory: one [`COMPARE_CHUNK`]), the file read only as far as
/// they agree.
struct SameBytes<R> {
    input: R,
    /// The file, while every byte so far matched it.
    other: Option<std::fs::File>,
    chunk: Vec<u8>,
}

impl<R> SameBytes<R> {
    fn new(input: R, other: &Path) -> Self {
        SameBytes {
            input,
            other: std::fs::File::open(other).ok(),
            chunk: Vec::new(),
        }
    }

    /// Whether every byte read so far was the file's, and the file ends
    /// there too: after the input was read to its end, they are a copy.
    fn same(mut self) -> bool {
        use std::io::Read as _;
        self.other
            .as_mut()
            .is_some_and(|f| matches!(f.read(&mut [0; 1]), Ok(0)))
    }
}

impl<R: std::io::Read> std::io::Read for SameBytes<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = self.input.read(out)?;
        let read = out.get(..n).unwrap_or_default();
        if let Some(file) = &mut self.other {
            for part in read.chunks(COMPARE_CHUNK) {
                self.chunk.resize(part.len(), 0);
                if file.read_exact(&mut self.chunk).is_err() || self.chunk != part {
                    self.other = None;
                    break;
                }
            }
        }
        Ok(n)
    }
}

/// One moment of `diff FILE --at A --at B`: as asked, and where it is.
#[derive(Debug, Serialize)]
struct MomentJson {
    asked: String,
    cursor: usize,
    time_us: Option<i64>,
}

/// The JSON of `diff FILE --at A --at B`: the GPU and its trace's length,
/// the two moments, the two-file diff's keys, the blocks allocated between
/// the moments still alive at the later, and the highest figures between.
#[derive(Serialize)]
struct MomentsJson<'a> {
    device: u32,
    events: usize,
    /// The trace's first recorded time (µs), the origin of the text's
    /// "t+", as `open --summary --json` gives it.
    first_time_us: Option<i64>,
    before_at: MomentJson,
    after_at: MomentJson,
    /// The first `--at` named the later moment: BEFORE is the second.
    moments_swapped: bool,
    #[serde(flatten)]
    diff: &'a Diff,
    allocated_between: &'a Sites,
    highest_between: &'a Highest,
}

/// `vramtop diff FILE --at A --at B`: two moments of one file's trace
/// compared, as the viewer's A/B comparison (`c`) compares them.
pub fn run_moments(
    file: &Path,
    at: &[At],
    device: Option<u32>,
    output: Output,
) -> color_eyre::Result<ExitCode> {
    let name = super::input_name(file);
    let [first, second] = at else {
        super::say_error(format_args!(
            "--at compares two moments of {name}: give it twice, as --at 40 --at peak (it was \
             given {} {})",
            at.len(),
            if at.len() == 1 { "time" } else { "times" }
        ));
        return Ok(ExitCode::from(EXIT_BAD_INPUT));
    };
    let snapshot = match super::read_snapshot_arg_with(file, DIFF_STACKS) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            super::say_error(super::snapshot_read_error(
                file,
                &e,
                super::Reads::Snapshots,
            ));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let compared = match compare_moments(&snapshot, (*first, *second), device, output.grouping) {
        Ok(c) => c,
        Err(e) => {
            super::say_error(format_args!("{name}: {e}"));
            return Ok(ExitCode::from(EXIT_BAD_INPUT));
        }
    };
    let Compared {
        diff: c,
        events,
        first_time_us,
        asked,
        ..
    } = &compared;
    let text = if output.json {
        let at = |cursor: usize, asked: At| MomentJson {
            asked: asked.to_string(),
            cursor,
            time_us: compared.time_at(cursor),
        };
        let json = MomentsJson {
            device: c.device,
            events: *events,
            first_time_us: *first_time_us,
            before_at: at(c.a, asked.0),
            after_at: at(c.b, asked.1),
            moments_swapped: compared.swapped,
            diff: &c.diff,
            allocated_between: &c.between,
            highest_between: &c.highest,
        };
        let mut t = serde_json::to_string_pretty(&json).wrap_err("cannot encode the diff")?;
        t.push('\n');
        t
    } else {
        render_moments(&name, &compared, *first_time_us, output.top)
    };
    super::emit_text(&text, output.ascii).wrap_err("cannot write the output")?;
    super::leave_to_exit(compared);
    super::leave_to_exit(snapshot);
    Ok(ExitCode::SUCCESS)
}

/// Two moments of one trace compared, with what the text says of them.
struct Compared {
    diff: CursorDiff,
    /// Events in the device's trace.
    events: usize,
    /// The trace's first recorded time (µs), the origin of "t+".
    first_time_us: Option<i64>,
    /// The moments as asked, the earlier first.
    asked: (At, At),
    /// The first `--at` named the later moment (the two were swapped).
    swapped: bool,
    /// The device's trace, for the moments' times.
    scrub: DeviceScrub,
}

impl Compared {
    fn time_at(&self, cursor: usize) -> Option<i64> {
        self.scrub.time_at(cursor)
    }

    /// A cursor as [`super::open::moment`] names it: `None`, "the end (the
    /// file's own state)", on a GPU without a trace, where cursor 0 is the
    /// end and no event number means anything.
    fn cursor(&self, cursor: usize) -> Option<usize> {
        (self.events > 0).then_some(cursor)
    }
}

/// Why `--at` cannot compare two moments of a file.
#[derive(Debug, thiserror::Error)]
enum MomentsError {
    #[error(transparent)]
    At(#[from] AtError),
    #[error(
        "GPU {device} has no trace of memory events (GPUs with one: {})",
        list(have)
    )]
    NoSuchTrace { device: u32, have: Vec<u32> },
    #[error(
        "GPUs {} each have a trace: --device N says which GPU's two moments to compare",
        list(have)
    )]
    WhichDevice { have: Vec<u32> },
    #[error(
        "the file has GPUs {}: --device N says which GPU's final state to compare",
        list(have)
    )]
    WhichEnd { have: Vec<u32> },
    #[error("GPU {device} is not in the file (GPUs in it: {})", list(have))]
    NoSuchGpu { device: u32, have: Vec<u32> },
    /// `--at end --at end` of a file with no segment and no trace: no
    /// GPU's final state to name the comparison after.
    #[error(
        "the file has no GPU (no segment, no trace): its final state holds nothing, so there is \
         nothing to compare"
    )]
    NoGpu,
}

fn list(devices: &[u32]) -> String {
    let names: Vec<String> = devices.iter().map(u32::to_string).collect();
    names.join(", ")
}

/// The states of one GPU's trace at the two moments `at` names compared.
fn compare_moments(
    snapshot: &Arc<Snapshot>,
    at: (At, At),
    device: Option<u32>,
    grouping: Grouping,
) -> Result<Compared, MomentsError> {
    let all = scrub_devices(snapshot);
    let traced: Vec<(u32, usize)> = all
        .iter()
        .filter_map(|&(d, trace)| Some((d, trace?)))
        .collect();
    let have = || traced.iter().map(|t| t.0).collect::<Vec<u32>>();
    // Every GPU has its final state (`end`), with a trace or without: the
    // other moments are the trace's.
    let both_end = at == (At::End, At::End);
    let (device, trace) = match (device, traced.as_slice()) {
        (_, []) if !both_end => {
            let at = if at.0 == At::End { at.1 } else { at.0 };
            return Err(AtError::NoTrace {
                at,
                cause: no_trace_cause(snapshot),
            }
            .into());
        }
        (None, [only]) => (only.0, Some(only.1)),
        (_, []) if all.is_empty() => return Err(MomentsError::NoGpu),
        (None, []) => match all.as_slice() {
            [only] => *only,
            _ => {
                return Err(MomentsError::WhichEnd {
                    have: all.iter().map(|t| t.0).collect(),
                });
            }
        },
        (None, _) => return Err(MomentsError::WhichDevice { have: have() }),
        (Some(d), _) => match all.iter().find(|t| t.0 == d) {
            Some(&(d, Some(trace))) => (d, Some(trace)),
            Some(&(d, None)) if both_end => (d, None),
            Some(_) => {
                return Err(MomentsError::NoSuchTrace {
                    device: d,
                    have: have(),
                });
            }
            None if !both_end => {
                return Err(MomentsError::NoSuchTrace {
                    device: d,
                    have: have(),
                });
            }
            None => {
                return Err(MomentsError::NoSuchGpu {
                    device: d,
                    have: all.iter().map(|t| t.0).collect(),
                });
            }
        },
    };
    let scrub = DeviceScrub::new(Arc::clone(snapshot), device, trace);
    let (a, b) = (at.0.cursor(&scrub)?, at.1.cursor(&scrub)?);
    let swapped = a > b;
    let asked = if swapped { (at.1, at.0) } else { at };
    let diff = diff_cursors(&scrub, a, b, grouping, snapshot_no_stack_reason(snapshot));
    Ok(Compared {
        diff,
        events: scrub.len(),
        first_time_us: scrub.events().iter().find_map(|e| e.time_us()),
        asked,
        swapped,
        scrub,
    })
}

/// A moment of the trace for a header: "event 40/97, t+806.590 ms", and
/// the word it was asked by ("(--at peak)").
fn moment_text(compared: &Compared, cursor: usize, asked: At, t0: Option<i64>) -> String {
    let at = super::open::moment(
        compared.cursor(cursor),
        compared.events,
        compared.time_at(cursor),
        t0,
        compared.scrub.whole_ms(),
    );
    match asked {
        At::Event(_) => at,
        word => format!("{at} (--at {word})"),
    }
}

/// The human-readable comparison of two moments of one file: the two-file
/// report with the moments in its header, then the highest figures
/// between them and the blocks allocated between them still alive.
fn render_moments(name: &str, compared: &Compared, t0: Option<i64>, top: usize) -> String {
    let c = &compared.diff;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}",
        path_line("file:   ", &format!("{name} (GPU {})", c.device))
    );
    let sides = [
        ("before: ", moment_text(compared, c.a, compared.asked.0, t0)),
        ("after:  ", moment_text(compared, c.b, compared.asked.1, t0)),
    ];
    for (label, at) in sides {
        let _ = writeln!(out, "{}", wrap_under(label, &at, WRAP_WIDTH));
    }
    if compared.swapped {
        // As the viewer's A/B comparison does: always earlier to later.
        note_line(
            &mut out,
            &format!(
                "the first --at ({}) is later in the trace than the second ({}): compared \
                 earlier to later, BEFORE is the second",
                compared.asked.1, compared.asked.0
            ),
        );
    }
    let h = &c.highest;
    let at = |m: &Moment| {
        super::open::moment(
            compared.cursor(m.cursor),
            compared.events,
            m.time_us,
            t0,
            compared.scrub.whole_ms(),
        )
    };
    let _ = writeln!(
        out,
        "{}",
        wrap_under(
            "highest between: ",
            &format!(
                "{} allocated at {}; {} reserved at {}",
                human_bytes(h.allocated.bytes),
                at(&h.allocated),
                human_bytes(h.reserved.bytes),
                at(&h.reserved)
            ),
            WRAP_WIDTH
        )
    );
    out.push_str(&render_body(&c.diff, top, c.between.sites.len()));
    let between = SitesAt::new(c.between.clone(), top, Some(c.b), None);
    let _ = writeln!(
        out,
        "{}",
        wrap_hanging(
            &format!(
                "allocated between BEFORE and AFTER and still alive at AFTER: {} in {}",
                human_bytes(between.allocated),
                count_of(c.between.sites.len(), "site", "sites")
            ),
            WRAP_WIDTH,
            2
        )
    );
    super::open::render_sites_at(&mut out, &between);
    out
}

/// A file's name for the header, with the device compared when one is.
fn on_device(path: &Path, device: Option<u32>) -> String {
    match device {
        Some(d) => format!("{} (GPU {d})", super::input_name(path)),
        None => super::input_name(path),
    }
}

fn change_line(out: &mut String, what: &str, c: &Change, bytes: bool) {
    let show = |v: u64| if bytes { human_bytes(v) } else { v.to_string() };
    let change = signed_change(c.change, show);
    let _ = writeln!(
        out,
        "  {what:<10} {:>12} {:>12} {:>12}",
        show(c.before),
        show(c.after),
        change
    );
}

fn segment_lines(out: &mut String, title: &str, list: &[SegmentRef], top: usize) {
    let total: u64 = list.iter().map(|s| s.total_size).sum();
    let _ = writeln!(
        out,
        "{title}: {}, {}",
        count_of(list.len(), "segment", "segments"),
        human_bytes(total)
    );
    for s in list.iter().take(top) {
        // Phrases, so that a wide stream number wraps the row between its
        // figures, the rest indented under the address.
        let row = [
            format!("{:#x}", s.address),
            format!("dev {}", s.device),
            format!("stream {}", s.stream),
            // As `open --summary` names a segment: "large expandable".
            format!(
                "{}{} {}",
                s.segment_type.as_str(),
                if s.is_expandable { " expandable" } else { "" },
                human_bytes(s.total_size)
            ),
            format!("({} allocated)", human_bytes(s.allocated)),
        ];
        let _ = writeln!(
            out,
            "  {}",
            wrap_words(row.iter().map(String::as_str), WRAP_WIDTH - 2, 4)
        );
    }
    if list.len() > top {
        let _ = writeln!(out, "  … {} more (all are in --json)", list.len() - top);
    }
}

/// Columns every line is fitted to: it reads whole on an 80-column
/// terminal.
const WRAP_WIDTH: usize = REPORT_WIDTH;

/// `before: PATH` in 80 columns with the file's name whole: beside the
/// label when the name and `…/` fit there (the folders that do not fit
/// left out for the `…`, [`elide_folders`], the same rule for both
/// lines), else on a line of its own under the label, 2 cells in, or
/// from the margin when the name needs the whole line. Only a name wider than the line by itself loses its middle. The
/// ` (GPU N)` that `--devices` adds is not part of the name: it follows
/// the path, on the line under it where the name leaves it no room.
fn path_line(label: &str, shown: &str) -> String {
    let (path, device) = split_device(shown);
    // Piped: beside its label whole, however wide, to be grepped.
    if super::text::paths_whole() {
        return format!("{label}{path}{device}");
    }
    let name = &path[path.rfind('/').map_or(0, |at| at + 1)..];
    // Whole, or its name and `…` and a cell of its folders, in `room`.
    let fits = |room: usize| cells(path) <= room || cells(name) + 2 <= room;
    let beside = WRAP_WIDTH.saturating_sub(cells(label) + cells(device));
    if fits(beside) {
        return format!("{label}{}{device}", elide_folders(path, beside));
    }
    let label = label.trim_end();
    let under = |margin: &str, path: String| {
        let device = device.trim_start();
        if device.is_empty() {
            format!("{label}\n{margin}{path}")
        } else {
            format!("{label}\n{margin}{path}\n{margin}{device}")
        }
    };
    for margin in ["  ", ""] {
        let room = WRAP_WIDTH - margin.len();
        if fits(room.saturating_sub(cells(device))) {
            let path = elide_folders(path, room - cells(device));
            return format!("{label}\n{margin}{path}{device}");
        }
        if fits(room) {
            return under(margin, elide_folders(path, room));
        }
    }
    // No room for a folder beside it: the name alone, whole where it fits.
    under("", elide_middle(name, WRAP_WIDTH))
}

/// `PATH (GPU N)` as the path and ` (GPU N)`, or `PATH` and nothing.
fn split_device(shown: &str) -> (&str, &str) {
    let Some(at) = shown.rfind(" (GPU ") else {
        return (shown, "");
    };
    let device = &shown[at..];
    let number = device
        .strip_prefix(" (GPU ")
        .and_then(|rest| rest.strip_suffix(')'));
    if number.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
        (&shown[..at], device)
    } else {
        (shown, "")
    }
}

/// `note: TEXT`, wrapped with its later lines indented under the text.
fn note_line(out: &mut String, text: &str) {
    const LEAD: &str = "note: ";
    let wrapped = wrap_hanging(&format!("{LEAD}{text}"), WRAP_WIDTH, LEAD.len());
    let _ = writeln!(out, "{wrapped}");
}

/// The human-readable comparison.
pub fn render_diff(before: &str, after: &str, diff: &Diff, top: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", path_line("before: ", before));
    let _ = writeln!(out, "{}", path_line("after:  ", after));
    out.push_str(&render_body(diff, top, 0));
    out
}

/// The comparison under its header: the figures, the notes, the segments
/// on one side only and the sites. `renewed`: the sites with blocks
/// allocated between the two moments and alive at the second (0 for two
/// files).
fn render_body(diff: &Diff, top: usize, renewed: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  {:<10} {:>12} {:>12} {:>12}",
        "", "before", "after", "change"
    );
    change_line(&mut out, "reserved", &diff.reserved, true);
    change_line(&mut out, "allocated", &diff.allocated, true);
    change_line(&mut out, "segments", &diff.segments, false);
    let none_shared = !diff.only_before.is_empty()
        && !diff.only_after.is_empty()
        && diff.only_before.len() as u64 == diff.segments.before
        && diff.only_after.len() as u64 == diff.segments.after;
    // One side without stacks: every site with a stack of the other reads
    // "new" or "gone" against its "no stack" groups, which answers nothing
    // about what grew; the groups themselves still compare. Every reason a
    // side's groups give is named (a mid-run trace's start holds blocks
    // allocated while history was off and before the trace began).
    let reasons = |before: bool, named: NoStackReason| {
        let mut groups: Vec<(u64, NoStackReason)> = diff
            .sites
            .iter()
            .filter_map(|s| match s.key {
                SiteKey::NoStack(r) => {
                    let bytes = if before {
                        s.bytes.before
                    } else {
                        s.bytes.after
                    };
                    (bytes > 0).then_some((bytes, r))
                }
                _ => None,
            })
            .collect();
        groups.sort_by_key(|g| std::cmp::Reverse(g.0));
        if groups.is_empty() {
            groups.push((0, named));
        }
        groups
            .iter()
            .map(|&(_, r)| r.describe().trim_start_matches("no stack: ").to_string())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let stackless = match (diff.before_without_stacks, diff.after_without_stacks) {
        (Some(b), Some(a)) if reasons(true, b) == reasons(false, a) => Some(format!(
            "no live block of either side has a stack ({}): only the totals and those \
             groups compare",
            reasons(true, b)
        )),
        (Some(b), Some(a)) => Some(format!(
            "no live block of either side has a stack (BEFORE: {}; AFTER: {}): only the \
             totals and those groups compare",
            reasons(true, b),
            reasons(false, a)
        )),
        (Some(b), None) => Some(format!(
            "no live block of BEFORE has a stack ({}): AFTER's sites with a stack all read \
             new against it; the totals and the no-stack groups compare",
            reasons(true, b)
        )),
        (None, Some(a)) => Some(format!(
            "no live block of AFTER has a stack ({}): BEFORE's sites with a stack all read \
             gone against it; the totals and the no-stack groups compare",
            reasons(false, a)
        )),
        (None, None) => None,
    };
    let compare = if stackless.is_some() {
        "the totals compare"
    } else {
        "the totals and the sites compare"
    };
    match (none_shared, resized_text(&diff.resized)) {
        (true, None) => note_line(
            &mut out,
            &format!(
                "no segment is at the same address on both sides (two processes, two GPUs or \
                 a restart): the lists below are all of each side; {compare}"
            ),
        ),
        // Segments match by address and size: one at the same address
        // with another size is on both lists, and "no segment at the same
        // address" would be false.
        (true, Some(resized)) => note_line(
            &mut out,
            &format!(
                "no segment is the same (address and size) on both sides: the lists below are \
                 all of each side; {resized}; {compare}"
            ),
        ),
        (false, Some(resized)) => {
            note_line(&mut out, &format!("{resized}: each is in both lists below"))
        }
        (false, None) => {}
    }
    if let Some(note) = stackless {
        note_line(&mut out, &note);
    }
    if let Some(note) = paired_by_portable_paths(diff) {
        note_line(&mut out, &note);
    }
    segment_lines(&mut out, "only in BEFORE", &diff.only_before, top);
    segment_lines(&mut out, "only in AFTER", &diff.only_after, top);
    out.push_str(&render_site_changes(diff, top, renewed));
    out
}

/// What the note says of the addresses that hold a segment on both sides
/// with two sizes: "the segment at 0x… grew from 200 MiB to 6.41 GiB" where
/// it is expandable (such a segment maps pages as it grows and unmaps them
/// as it is released), else "0x… holds 200 MiB before and 6.41 GiB after"
/// (two segments that began at one address: two runs, or a segment freed
/// and another obtained there); how many, for several; `None` when there
/// is none.
fn resized_text(resized: &[ResizedSegment]) -> Option<String> {
    const WHY: &str = "expandable segments grow and shrink in place";
    match resized {
        [] => None,
        [one] if one.expandable => Some(format!(
            "the expandable segment at {:#x} {} from {} to {} ({WHY})",
            one.address,
            if one.after > one.before {
                "grew"
            } else {
                "shrank"
            },
            human_bytes(one.before),
            human_bytes(one.after)
        )),
        [one] => Some(format!(
            "{:#x} holds a segment of {} in BEFORE and one of {} in AFTER",
            one.address,
            human_bytes(one.before),
            human_bytes(one.after)
        )),
        many => {
            let grew = many.iter().filter(|r| r.after > r.before).count();
            let shrank = many.len() - grew;
            let how = match (grew, shrank) {
                (_, 0) => "all larger after".to_string(),
                (0, _) => "all smaller after".to_string(),
                (g, s) => format!("{g} larger after, {s} smaller"),
            };
            let expandable = many.iter().filter(|r| r.expandable).count();
            let why = match expandable {
                0 => String::new(),
                n if n == many.len() => format!("; all expandable: {WHY}"),
                n => format!("; {n} expandable: {WHY}"),
            };
            Some(format!(
                "{} segments are at the same address on both sides with another size ({how}{why})",
                many.len()
            ))
        }
    }
}

/// Says how many sites were paired across paths that differ (the two
/// files come from two checkouts, machines or environments), with the
/// first pair of paths as the example; `None` when none was.
fn paired_by_portable_paths(diff: &Diff) -> Option<String> {
    let paired: Vec<(&SiteKey, &SiteKey)> = diff
        .sites
        .iter()
        .filter_map(|s| Some((&s.key, s.after_key.as_ref()?)))
        .collect();
    let files = |key: &SiteKey| -> Vec<String> {
        match key {
            SiteKey::Frame(f) => vec![f.filename.to_string()],
            SiteKey::Function { filename, .. } => vec![filename.to_string()],
            SiteKey::Stack(frames) => frames.iter().map(|f| f.filename.to_string()).collect(),
            SiteKey::NoStack(_) => Vec::new(),
        }
    };
    // The shortest pair of paths that differ reads best as the example.
    let example = paired
        .iter()
        .flat_map(|(before, after)| files(before).into_iter().zip(files(after)))
        .filter(|(b, a)| b != a)
        .min_by_key(|(b, a)| b.len() + a.len())
        .map(|(b, a)| format!(" (BEFORE's {b} is AFTER's {a})"))
        .unwrap_or_default();
    let n = paired.len();
    if n == 0 {
        return None;
    }
    Some(format!(
        "{n} site{} matched by file name, not path: the files name the same code by other \
         paths{example}",
        if n == 1 { "" } else { "s" }
    ))
}

/// The "live bytes by site" table (also the viewer's A/B text).
/// `renewed`: as for [`render_body`].
pub fn render_site_changes(diff: &Diff, top: usize, renewed: usize) -> String {
    let mut out = String::new();
    let changed = crate::ui::largest_changes_first(&diff.sites);
    // Phrases, so that a wrap keeps each count with what it counts.
    let heading = [
        format!("live bytes by site (by {}):", diff.grouping.name()),
        format!("{} changed,", changed.len()),
        format!("{} unchanged,", diff.sites.len() - changed.len()),
        "largest change first".to_string(),
    ];
    let _ = writeln!(
        out,
        "{}",
        wrap_words(heading.iter().map(String::as_str), WRAP_WIDTH, 2)
    );
    if changed.is_empty() {
        // Sites that allocated between the moments and, changed by
        // nothing, freed as much: "allocated between … 2 KiB in 4 sites"
        // after a bare "no site … changed" read as a contradiction.
        let again = if renewed == 0 {
            String::new()
        } else {
            format!(
                " ({} freed and allocated the same again)",
                count_of(renewed, "site", "sites")
            )
        };
        let _ = writeln!(
            out,
            "{}",
            wrap_under(
                "  ",
                &format!("no site's live bytes changed{again}"),
                WRAP_WIDTH
            )
        );
        return out;
    }
    let _ = writeln!(
        out,
        "  {:>12} {:>12} {:>12}  {:<6}  site",
        "before", "after", "change", ""
    );
    for s in changed.iter().take(top) {
        let figures = format!(
            "  {:>12} {:>12} {:>12}  {:<6}  ",
            human_bytes(s.bytes.before),
            human_bytes(s.bytes.after),
            signed_change(s.bytes.change, human_bytes),
            s.kind.name(),
        );
        // The figures stay in their columns; a site's label longer than
        // the room left wraps under its start, whole.
        let _ = writeln!(
            out,
            "{}",
            wrap_phrases_under(&figures, [s.label.as_str()], WRAP_WIDTH)
        );
    }
    if changed.len() > top {
        let _ = writeln!(out, "  … {} more (all are in --json)", changed.len() - top);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::PoolKind;

    /// Reads `input` through [`SameBytes`] against a file of `file`'s bytes,
    /// `step` bytes a read (as a pipe hands them), and says whether they
    /// were found the same; what passes through must be `input` unchanged.
    fn same_bytes(input: &[u8], file: &[u8], step: usize) -> bool {
        use std::io::Read as _;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("other");
        std::fs::write(&path, file).expect("written");
        let mut reader = SameBytes::new(input, &path);
        let mut passed = Vec::new();
        let mut buf = vec![0; step];
        loop {
            let n = reader.read(&mut buf).expect("reads");
            if n == 0 {
                break;
            }
            passed.extend_from_slice(&buf[..n]);
        }
        assert_eq!(passed, input);
        reader.same()
    }

    #[test]
    fn bytes_read_are_the_same_as_a_file_only_when_all_of_both_match() {
        // Past one comparison chunk, in reads larger and smaller than it.
        let bytes: Vec<u8> = (0..3 * COMPARE_CHUNK + 7)
            .map(|i| (i % 251) as u8)
            .collect();
        for step in [1000, COMPARE_CHUNK + 3, 5 * COMPARE_CHUNK] {
            assert!(same_bytes(&bytes, &bytes, step), "{step}");
            let mut last = bytes.clone();
            *last.last_mut().expect("bytes") ^= 1;
            assert!(!same_bytes(&last, &bytes, step), "{step}");
            // One the other's beginning: the input short, or the file.
            let short = &bytes[..bytes.len() - 1];
            assert!(!same_bytes(short, &bytes, step), "{step}");
            assert!(!same_bytes(&bytes, short, step), "{step}");
        }
        assert!(same_bytes(b"", b"", 10));
        assert!(!same_bytes(b"", b"x", 10));
    }

    fn segment(device: u32, address: u64) -> SegmentRef {
        SegmentRef {
            device,
            address,
            total_size: 20 << 20,
            stream: 0,
            segment_type: PoolKind::Large,
            is_expandable: false,
            allocated: 0,
        }
    }

    #[test]
    fn notes_and_the_sites_heading_wrap_within_80_columns_under_their_text() {
        // No segment shared, neither side with a stack (for two reasons):
        // the longest notes, and the widest grouping's heading.
        let diff = Diff {
            grouping: Grouping::PythonFrame,
            reserved: Change::new(20 << 20, 20 << 20),
            allocated: Change::new(0, 0),
            segments: Change::new(1, 1),
            only_before: vec![segment(0, 0x7f00_0000_0000)],
            only_after: vec![segment(1, 0x7e00_0000_0000)],
            resized: Vec::new(),
            sites: Vec::new(),
            before_without_stacks: Some(NoStackReason::WithoutStacks),
            after_without_stacks: Some(NoStackReason::BeforeRecording),
        };
        let text = render_diff("a.pickle", "b.pickle", &diff, DEFAULT_LINES);
        for line in text.lines() {
            assert!(cells(line) <= 80, "{line:?}\n{text}");
        }
        assert!(
            text.contains(concat!(
                "note: no segment is at the same address on both sides (two processes, two GPUs\n",
                "      or a restart): "
            )),
            "{text}"
        );
        assert!(
            text.contains("\nnote: no live block of either side has a stack (BEFORE: recorded"),
            "{text}"
        );
        assert!(
            text.contains(concat!(
                "live bytes by site (by python frame): 0 changed, 0 unchanged,\n",
                "  largest change first\n"
            )),
            "{text}"
        );
    }

    #[test]
    fn segments_at_one_address_with_two_sizes_are_said_grown_and_shrunk() {
        let resized = |address, before: u64, after: u64| ResizedSegment {
            address,
            before: before << 20,
            after: after << 20,
            expandable: true,
        };
        // Some segment shared: the note says only what changed size.
        let diff = Diff {
            grouping: Grouping::UserFrame,
            reserved: Change::new(60 << 20, 60 << 20),
            allocated: Change::new(0, 0),
            segments: Change::new(3, 3),
            only_before: vec![segment(0, 0x7f00_0000_0000), segment(0, 0x7e00_0000_0000)],
            only_after: vec![segment(0, 0x7f00_0000_0000), segment(0, 0x7e00_0000_0000)],
            resized: vec![
                resized(0x7f00_0000_0000, 20, 40),
                resized(0x7e00_0000_0000, 20, 2),
            ],
            sites: Vec::new(),
            before_without_stacks: None,
            after_without_stacks: None,
        };
        let text = render_diff("a.pickle", "b.pickle", &diff, DEFAULT_LINES);
        let unwrapped = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            unwrapped.contains(
                "note: 2 segments are at the same address on both sides with another size (1 \
                 larger after, 1 smaller; all expandable: expandable segments grow and shrink in \
                 place): each is in both lists below"
            ),
            "{text}"
        );
        assert!(!unwrapped.contains("no segment is"), "{text}");
        assert_eq!(
            resized_text(&[resized(1, 20, 2)]).as_deref(),
            Some(
                "the expandable segment at 0x1 shrank from 20 MiB to 2 MiB (expandable segments \
                 grow and shrink in place)"
            )
        );
        // Not both expandable: two segments that began at one address.
        let two = ResizedSegment {
            expandable: false,
            ..resized(1, 20, 2)
        };
        assert_eq!(
            resized_text(&[two]).as_deref(),
            Some("0x1 holds a segment of 20 MiB in BEFORE and one of 2 MiB in AFTER")
        );
        assert_eq!(resized_text(&[]), None);
    }

    #[test]
    fn no_change_reads_as_a_dash_for_bytes_and_counts_alike() {
        let diff = Diff {
            grouping: Grouping::UserFrame,
            reserved: Change::new(20 << 20, 20 << 20),
            allocated: Change::new(3 << 20, 3 << 20),
            segments: Change::new(1, 1),
            only_before: Vec::new(),
            only_after: Vec::new(),
            resized: Vec::new(),
            sites: Vec::new(),
            before_without_stacks: None,
            after_without_stacks: None,
        };
        let text = render_diff("a.pickle", "b.pickle", &diff, DEFAULT_LINES);
        for line in [
            "  reserved         20 MiB       20 MiB            -",
            "  allocated         3 MiB        3 MiB            -",
            "  segments              1            1            -",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line:?}\n{text}");
        }
        // A change keeps its sign, bytes and counts alike.
        assert_eq!(signed_change(-(2 << 10), human_bytes), "-2 KiB");
        assert_eq!(signed_change(3, |n| n.to_string()), "+3");
    }

    #[test]
    fn both_header_lines_shorten_a_path_alike_to_its_last_whole_folders() {
        let folders = "a/very/deep/folder/of/copies/for/the/comparison/runs/2026-12-06";
        let name = "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl";
        let before = path_line("before: ", &format!("/work/{folders}/{name}"));
        let after = path_line("after:  ", &format!("{folders}/{name}"));
        // One rule for both: `…/`, then whole folders and the whole name,
        // whatever each path starts with.
        assert_eq!(before, format!("before: …/{name}"));
        assert_eq!(after, format!("after:  …/{name}"));
        let short = path_line("before: ", &format!("/tmp/{folders}/s.pickle"));
        assert_eq!(
            short,
            "before: …/very/deep/folder/of/copies/for/the/comparison/runs/2026-12-06/s.pickle"
        );
        assert!(cells(&short) <= 80, "{short}");
    }

    #[test]
    fn a_file_name_too_long_to_share_the_label_s_line_goes_on_its_own_whole() {
        assert_eq!(path_line("before: ", "a.pickle"), "before: a.pickle");
        // A usual name beside the label, the folders that do not fit
        // elided, the rest whole.
        let deep = format!("/work/{}snapshot.pickle", "copies/".repeat(12));
        let beside = path_line("before: ", &deep);
        assert_eq!(
            beside,
            format!("before: …/{}snapshot.pickle", "copies/".repeat(7))
        );
        // A 75-cell name: under the label, whole, its folders elided.
        let name = format!("{}.pickle", "a-long-name".repeat(6) + "-x");
        assert_eq!(cells(&name), 75);
        let own = path_line("after:  ", &format!("/work/{}{name}", "copies/".repeat(12)));
        let lines: Vec<&str> = own.lines().collect();
        assert_eq!(lines[0], "after:", "{own}");
        assert!(lines[1] == format!("  …/{name}"), "{own}");
        assert_eq!(lines.len(), 2, "{own}");
        // A name of 79 cells: the whole line, the name alone.
        let wide = "n".repeat(72) + ".pickle";
        assert_eq!(
            path_line("before: ", &format!("/d/{wide}")),
            format!("before:\n{wide}")
        );
        // Only a name wider than the line loses its middle.
        let widest = path_line("before: ", &format!("/d/{}.pickle", "n".repeat(100)));
        assert!(widest.lines().all(|l| cells(l) <= 80), "{widest}");
        assert!(
            widest.ends_with("nnn.pickle") && widest.contains('…'),
            "{widest}"
        );
        // The GPU `--devices` names is not part of the name: it goes
        // under it rather than cut it.
        let deep = format!("/work/{}{name}", "copies/".repeat(12));
        assert_eq!(
            path_line("after:  ", &format!("{deep} (GPU 1)")),
            format!("after:\n  …/{name}\n  (GPU 1)")
        );
        assert_eq!(
            path_line("before: ", "/d/a.pickle (GPU 0)"),
            "before: /d/a.pickle (GPU 0)"
        );
        // A file's own parenthesis is its name's.
        assert_eq!(
            split_device("/d/a (GPU x).pickle"),
            ("/d/a (GPU x).pickle", "")
        );
    }

    #[test]
    fn a_segment_row_with_a_wide_stream_wraps_between_its_figures() {
        let mut wide = segment(0, 0x7f00_0000_0000);
        // A stream is a CUDA stream pointer: 20 digits as a number.
        wide.stream = u64::MAX;
        wide.allocated = 15 << 20;
        let mut out = String::new();
        segment_lines(&mut out, "only in BEFORE", &[wide], DEFAULT_LINES);
        assert_eq!(
            out,
            "only in BEFORE: 1 segment, 20 MiB\n  0x7f0000000000 dev 0 stream \
             18446744073709551615 large 20 MiB\n    (15 MiB allocated)\n"
        );
    }

    #[test]
    fn each_form_takes_only_its_own_options() {
        let given = |two_files, devices, at, device| FormArgs {
            two_files,
            devices,
            at,
            device,
        };
        let at_with_two = "--at is for one file, and two were given: diff FILE --at A --at B; \
                           two files pair GPUs with --devices GPU:GPU";
        for (what, args, problem) in [
            ("diff A B", given(true, false, false, false), None),
            (
                "diff A B --devices 0:1",
                given(true, true, false, false),
                None,
            ),
            (
                "diff F --at 1 --at 2",
                given(false, false, true, false),
                None,
            ),
            (
                "diff F --at 1 --at 2 --device 1",
                given(false, false, true, true),
                None,
            ),
            (
                "diff A B --at 5",
                given(true, false, true, false),
                Some(at_with_two),
            ),
            (
                "diff A B --device 0",
                given(true, false, false, true),
                Some(
                    "--device is for one file, and two were given: diff FILE --at A --at B; \
                     two files pair GPUs with --devices GPU:GPU",
                ),
            ),
            (
                "diff F --at 1 --at 2 --devices 0:1",
                given(false, true, true, false),
                Some(
                    "--devices pairs the GPUs of two files, and --at is for one file: diff \
                     BEFORE AFTER --devices GPU:GPU, or diff FILE --at A --at B",
                ),
            ),
            (
                "diff F --devices 0:1 --device 1",
                given(false, true, false, true),
                Some(
                    "--devices pairs the GPUs of two files, and --device is for one file: diff \
                     BEFORE AFTER --devices GPU:GPU, or diff FILE --at A --at B",
                ),
            ),
            (
                "diff A B --devices 0:1 --at 1 --at 2 --device 1",
                given(true, true, true, true),
                Some(
                    "--at and --device are for one file, and two were given: diff FILE --at A \
                     --at B; two files pair GPUs with --devices GPU:GPU",
                ),
            ),
            (
                "diff F --device 0",
                given(false, false, false, true),
                Some(DEVICE_NEEDS_AT),
            ),
            (
                "diff F",
                given(false, false, false, false),
                Some(AFTER_OR_AT),
            ),
            (
                "diff F --devices 0:1",
                given(false, true, false, false),
                Some(AFTER_OR_AT),
            ),
        ] {
            assert_eq!(form_problem(args).as_deref(), problem, "{what}");
        }
    }
}
