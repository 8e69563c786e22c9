//! Text formatting shared by the panes: bytes in binary units, percentages,
//! "n/a" for what is unknown. Pure and unit-tested; no pane formats numbers
//! on its own, so the whole screen agrees on units and rounding.

/// What every pane shows for a figure the driver or allocator does not
/// report. Never a 0: an unknown value is not an empty one.
pub const NA: &str = "n/a";

/// What `--once` and the processes pane say of a GPU whose driver cannot
/// list its processes: unknown, not idle.
pub const PROCESSES_NA: &str = "processes: n/a (not supported by the driver)";

/// [`PROCESSES_NA`] for the Processes pane's command column where that
/// is cut (at 80 columns it read "processes: n/a (not supported by t…"):
/// the column's header says "processes" already.
pub const PROCESSES_NA_SHORT: &str = "n/a: the driver does not list them";

const KIB: u64 = 1 << 10;

/// Binary units, smallest first; index = power of 1024.
const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

/// The power of 1024 that shows `bytes` with 1 to 4 integer digits.
pub fn unit_exp(bytes: u64) -> usize {
    let mut exp = 0;
    let mut v = bytes;
    while v >= KIB && exp + 1 < UNITS.len() {
        v /= KIB;
        exp += 1;
    }
    exp
}

/// The unit name for a power of 1024 ("B", "KiB", "MiB", …).
pub fn unit_name(exp: usize) -> &'static str {
    UNITS[exp.min(UNITS.len() - 1)]
}

/// "1 segment", "2 segments": `n` and the noun it takes (`one` for
/// exactly one, else `many`).
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// [`count`] of a `usize`.
pub fn count_of(n: usize, one: &str, many: &str) -> String {
    count(n as u64, one, many)
}

/// A memory pool's id as the summary and the block detail write it:
/// "(0,1)", PyTorch's `segment_pool_id` pair without the space, so that a
/// wrapped line never parts it ("(0," / "1)"). `(0,0)` is the default
/// pools'.
pub fn pool_id(id: (i64, i64)) -> String {
    format!("({},{})", id.0, id.1)
}

/// `us` microseconds after a trace's first event, as the viewer and the
/// summary write it: "t+951.991 ms" under a second, "t+26.181 s" from one.
pub fn since_start(us: i64) -> String {
    since_start_on(us, false)
}

/// [`since_start`] of a trace whose clock counts whole milliseconds
/// (`whole_ms`: every time a multiple of 1000 µs, as the synthetic clock of
/// `vramtop scenario`/`demo --save-snapshot` stamps step n at n × 1000 µs):
/// "t+12 ms" rather than "t+12.000 ms", no precision the file lacks.
/// From a second "t+26.181 s" either way: that is milliseconds.
pub fn since_start_on(us: i64, whole_ms: bool) -> String {
    // unsigned_abs: the negation of i64::MIN (a file's time) overflows.
    if us.unsigned_abs() >= 1_000_000 {
        format!("t+{:.3} s", us as f64 / 1e6)
    } else if whole_ms {
        // Under a second: |us| < 1e6, so the division is exact and small.
        format!("t+{} ms", us / 1000)
    } else {
        format!("t+{:.3} ms", us as f64 / 1e3)
    }
}

/// `bytes` expressed in the unit 1024^`exp` (not rounded).
pub fn in_unit(bytes: u64, exp: usize) -> f64 {
    bytes as f64 / (1u64 << (10 * exp.min(UNITS.len() - 1))) as f64
}

/// `bytes` in the unit 1024^`exp` with three significant digits (two
/// decimals below 10, one below 100, none above), so columns of sizes keep
/// a steady width; rounded to the nearest, as [`bytes`] is.
fn three_digits(bytes: u64, exp: usize) -> String {
    crate::alloc::sizing::three_significant_digits(bytes, exp)
}

/// Bytes in the largest binary unit that keeps an integer part once
/// rounded: "512 B", "1.50 GiB", "12.3 MiB", "501 MiB" (500.95 MiB),
/// "1.00 GiB" (1023.6 MiB, not "1024 MiB"); three significant digits,
/// rounded to the nearest. The one byte style of every screen; the
/// application layer's messages use the same function
/// (`alloc::sizing::display_bytes`).
pub fn bytes(b: u64) -> String {
    crate::alloc::sizing::display_bytes(b)
}

/// What a change column says of no change: a dash, for bytes and counts
/// alike (`0 B` beside `+0` read as two different answers).
pub const NO_CHANGE: &str = "-";

/// A change with its sign, its magnitude as `show` writes it (a size:
/// `+1.50 MiB`, `-2 KiB`; a count: `+1`, `-304`); [`NO_CHANGE`] for none.
/// `diff`'s and the viewer's A/B comparison's change columns.
pub fn signed_change(change: i64, show: impl FnOnce(u64) -> String) -> String {
    match change.signum() {
        1 => format!("+{}", show(change.unsigned_abs())),
        -1 => format!("-{}", show(change.unsigned_abs())),
        _ => NO_CHANGE.to_string(),
    }
}

/// Like [`bytes`] but without the space ("1.50GiB", "512MiB", "64KiB",
/// "512B"), for histogram labels and tight columns: the same units as
/// everywhere else, only packed.
pub fn bytes_short(b: u64) -> String {
    let exp = crate::alloc::sizing::unit_exp(b);
    if exp == 0 {
        return format!("{b}B");
    }
    // Powers of two (histogram bounds) read better without decimals.
    if b.trailing_zeros() as usize >= 10 * exp {
        format!("{}{}", b >> (10 * exp), unit_name(exp))
    } else {
        format!("{}{}", three_digits(b, exp), unit_name(exp))
    }
}

/// "a/b unit" with both in the unit of the larger one and three
/// significant digits each ("397/560 MiB", "0.39/1.04 GiB"), for a pair
/// read together in a tight column (allocated/reserved); an unknown side
/// reads "n/a", both unknown: "n/a". Two known sides compare as the bytes
/// do ([`sizes_apart`]): "560.2/560.4 MiB", not "560/560 MiB".
pub fn bytes_pair(a: Option<u64>, b: Option<u64>) -> String {
    let exp = match (a, b) {
        (None, None) => return NA.to_string(),
        (Some(a), Some(b)) => {
            let (a, b, exp) = sizes_apart(
                a,
                b,
                crate::alloc::sizing::unit_exp(a.max(b)),
                crate::alloc::sizing::three_digit_decimals,
            );
            return format!("{a}/{b} {}", unit_name(exp));
        }
        _ => crate::alloc::sizing::unit_exp(a.unwrap_or(0).max(b.unwrap_or(0))),
    };
    let part = |v: Option<u64>| match v {
        Some(v) if exp == 0 => v.to_string(),
        Some(v) => three_digits(v, exp),
        None => NA.to_string(),
    };
    format!("{}/{} {}", part(a), part(b), unit_name(exp))
}

/// The most decimals [`sizes_apart`] gives a pair in one unit before it
/// takes the next smaller unit.
const MAX_PAIR_DECIMALS: u32 = 3;

/// Two sizes written to be read together (used/total, allocated/reserved)
/// in one unit: each rounded to the nearest as every size is, so that the
/// pair compares as the bytes do: the smaller never reads as large as the
/// larger or above it, and two sizes read equal only when they are. Each
/// side starts at `decimals(side, exp)` decimals in the unit 1024^`exp`;
/// where the two figures do not compare as the bytes do, both take more
/// decimals (up to [`MAX_PAIR_DECIMALS`], where the smaller side is cut
/// rather than rounded if that parts them), then the next smaller unit:
/// 0.99 of 1 GiB is "0.99/1.00 GiB", where one decimal gave "1.0/1.0 GiB".
/// Bytes are exact, so the search ends there at the latest. The two
/// figures and the unit's power of 1024.
fn sizes_apart(
    a: u64,
    b: u64,
    exp: usize,
    decimals: impl Fn(u64, usize) -> u32,
) -> (String, String, usize) {
    use crate::alloc::sizing::{figure_text, nearest_figure};
    // x / 10^dx against y / 10^dy, exactly (figures < 2^84, 10^6 < 2^20).
    let order = |x: u128, dx: u32, y: u128, dy: u32| {
        (x * 10u128.pow(dy.min(6))).cmp(&(y * 10u128.pow(dx.min(6))))
    };
    let mut exp = exp.min(UNITS.len() - 1);
    while exp > 0 {
        let (mut da, mut db) = (decimals(a, exp), decimals(b, exp));
        loop {
            let (fa, fb) = (nearest_figure(a, exp, da), nearest_figure(b, exp, db));
            if order(fa, da, fb, db) == a.cmp(&b) {
                return (figure_text(fa, da), figure_text(fb, db), exp);
            }
            if da.max(db) >= MAX_PAIR_DECIMALS {
                // At the most decimals the smaller side is cut, not
                // rounded, where that parts the two: 80 GiB − 1 B of
                // 80 GiB is "79.999/80.000 GiB", not a pair of byte counts.
                let cut = |size: u64, d: u32| {
                    (u128::from(size) * 10u128.pow(d.min(6))) >> (10 * exp.min(6))
                };
                let (ca, cb) = match a.cmp(&b) {
                    std::cmp::Ordering::Less => (cut(a, da), fb),
                    _ => (fa, cut(b, db)),
                };
                if order(ca, da, cb, db) == a.cmp(&b) {
                    return (figure_text(ca, da), figure_text(cb, db), exp);
                }
                break;
            }
            // Both alike from here: one more decimal than either had.
            da = da.max(db) + 1;
            db = da;
        }
        exp -= 1;
    }
    (a.to_string(), b.to_string(), 0)
}

/// What a process's usage column (%SM, %CPU, HOST-MEM) shows for a figure
/// not measured: a simulated process (its pid is made up), the first
/// sample (CPU time needs two), a driver or `/proc` that does not say.
pub const NOT_MEASURED: &str = "-";

/// Percent of one CPU as the processes pane and `--once` show it: one
/// decimal below 100 ("0.3", "99.5"), whole from 100 ("350", several busy
/// threads), so it fits 5 cells up to 99999 %.
pub fn cpu_percent(percent: f64) -> String {
    if percent < 99.95 {
        format!("{percent:.1}")
    } else {
        format!("{percent:.0}")
    }
}

/// `bytes` or "n/a".
pub fn opt_bytes(b: Option<u64>) -> String {
    b.map_or_else(|| NA.to_string(), bytes)
}

/// "PyTorch's own peak: allocated 216 MiB, reserved 232 MiB (since the
/// process started or its last reset_peak_memory_stats())": the
/// allocator's counters, which the one-second samples miss inside a step.
pub fn own_peak(p: &crate::app::state::OwnPeak) -> String {
    format!(
        "PyTorch's own peak: allocated {}, reserved {} (since {})",
        opt_bytes(p.allocated),
        opt_bytes(p.reserved),
        p.since
    )
}

/// "used/total unit" with both in the total's unit ("20.1/80.0 GiB"); an
/// unknown side reads "n/a" ("n/a/80.0 GiB"); both unknown: "n/a". Two
/// known sides compare as the bytes do ([`sizes_apart`]): a used figure
/// that would round onto the total's takes more decimals ("0.99/1.00
/// GiB", "79.999/80.000 GiB"), never reads as the total or above it.
pub fn bytes_of(used: Option<u64>, total: Option<u64>) -> String {
    let exp = match (used, total) {
        (None, None) => return NA.to_string(),
        (Some(u), Some(t)) => {
            let (u, t, exp) = sizes_apart(u, t, unit_exp(t), |_, _| 1);
            return format!("{u}/{t} {}", unit_name(exp));
        }
        (_, Some(t)) => unit_exp(t),
        (Some(u), None) => unit_exp(u),
    };
    let part = |v: Option<u64>| match v {
        Some(v) if exp == 0 => v.to_string(),
        Some(v) => crate::alloc::sizing::size_figure(v, exp, 1),
        None => NA.to_string(),
    };
    format!("{}/{} {}", part(used), part(total), unit_name(exp))
}

/// `part / whole` as a percentage: one decimal below 10 % ("0.6%"), none
/// above ("15%"); "n/a" when the whole is 0.
pub fn percent_of(part: u64, whole: u64) -> String {
    if whole == 0 {
        return NA.to_string();
    }
    percent(part as f64 / whole as f64)
}

/// A fraction in [0, 1] as a percentage, as [`percent_of`]. Never rounded
/// onto all or none it is not: "<0.1%" above none, ">99%" short of all.
pub fn percent(fraction: f64) -> String {
    let p = (fraction * 100.0).clamp(0.0, 100.0);
    if p.is_nan() {
        return NA.to_string();
    }
    if p > 0.0 && p < 0.05 {
        return "<0.1%".to_string();
    }
    if (99.5..100.0).contains(&p) {
        return ">99%".to_string();
    }
    if p < 10.0 && p > 0.0 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// An optional integer with a unit suffix ("87%", "65°C") or "n/a".
pub fn opt_unit(v: Option<u32>, unit: &str) -> String {
    v.map_or_else(|| NA.to_string(), |v| format!("{v}{unit}"))
}

/// "a/b unit" for a pair read together (power draw/limit, SM/memory
/// clocks); an unknown side reads "n/a", both unknown: "n/a".
pub fn pair(a: Option<u32>, b: Option<u32>, unit: &str) -> String {
    let side = |v: Option<u32>| v.map_or_else(|| NA.to_string(), |v| v.to_string());
    match (a, b) {
        (None, None) => NA.to_string(),
        _ => format!("{}/{}{unit}", side(a), side(b)),
    }
}

/// Power in watts from milliwatts, rounded to the nearest watt.
pub fn watts(mw: Option<u32>) -> Option<u32> {
    mw.map(|mw| (mw + 500) / 1000)
}

/// A duration in seconds for axis labels and titles: "45s", "5m", "1h",
/// "90s" stays "90s" (only whole minutes and hours are abbreviated).
pub fn seconds(s: u64) -> String {
    // One style on one axis: "2m30s" beside "5m", never "150s".
    let (h, m, sec) = (s / 3600, s % 3600 / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        out.push_str(&format!("{sec}s"));
    }
    out
}

/// A sampling interval: "250 ms" below a second, then as [`seconds`] does
/// ("1s", "10s", "5m") when whole, else to a tenth ("1.5s").
pub fn interval(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms.is_multiple_of(1000) {
        seconds(ms / 1000)
    } else {
        format!("{:.1}s", ms as f64 / 1000.0)
    }
}

/// Units a figure is written with: a word of them stays with the number
/// before it when text is broken into lines.
const UNIT_WORDS: [&str; 8] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "%"];

/// `text` in words, except that a unit after a number stays with it:
/// `"reserved 3.01 GiB (3232 B),"` is `reserved`, `3.01 GiB`, `(3232 B),`,
/// so a line break never parts a figure from its unit.
pub fn unit_words(text: &str) -> Vec<&str> {
    let base = text.as_ptr() as usize;
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for word in text.split_whitespace() {
        let start = word.as_ptr() as usize - base;
        let end = start + word.len();
        let unit = UNIT_WORDS.contains(&word.trim_end_matches([',', ';', ')', '.', ':']));
        match spans.last_mut() {
            Some(last) if unit && text[..last.1].ends_with(|c: char| c.is_ascii_digit()) => {
                last.1 = end;
            }
            _ => spans.push((start, end)),
        }
    }
    spans
        .into_iter()
        .map(|(start, end)| &text[start..end])
        .collect()
}

/// Cuts `text` to at most `width` terminal cells, ending with "…" when
/// cut. Cells, not characters: a CJK or emoji character takes two, and a
/// cut counted in characters overflowed its column by as many.
pub fn truncate(text: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthStr as _;
    if text.width() <= width {
        return text.to_string();
    }
    let Some(room) = width.checked_sub(1) else {
        return String::new();
    };
    let mut out = take_cells(text, room).to_string();
    out.push('…');
    out
}

/// `text` in at most `width` terminal cells: whole when it fits, else its
/// end after a "…" (the start cut). A text field's end is where its
/// cursor is, and what was just typed.
pub fn truncate_start(text: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthStr as _;
    if text.width() <= width {
        return text.to_string();
    }
    let Some(room) = width.checked_sub(1) else {
        return String::new();
    };
    format!("…{}", take_cells_from_end(text, room))
}

/// `text` in at most `width` terminal cells: whole when it fits, else its
/// start and its end around a "…", the start the larger. A file name keeps
/// its start (host, pid) and its end (time, kind, extension), which tell
/// snapshots apart.
pub fn elide_middle(text: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthStr as _;
    if text.width() <= width {
        return text.to_string();
    }
    let Some(room) = width.checked_sub(1) else {
        return String::new();
    };
    let head = take_cells(text, room.div_ceil(2));
    let tail = take_cells_from_end(text, room - head.width());
    format!("{head}…{tail}")
}

/// `path` in at most `width` cells: whole when it fits, else its file
/// name kept whole and the middle of its folders left out for a `…`
/// (`/work/deep/…/b/muduard_dump_snapshot_a.pickle`). A file name too
/// long for the width itself keeps its start and its end (the extension).
pub fn elide_path(path: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthStr as _;
    if path.width() <= width {
        return path.to_string();
    }
    let name_at = path.rfind('/').map_or(0, |at| at + 1);
    let (folders, name) = path.split_at(name_at);
    // `…` and at least one cell of the folders before the name.
    if folders.is_empty() || name.width() + 2 > width {
        return elide_middle(path, width);
    }
    // The folders' start and end around the `…` (they do not fit whole,
    // as the path does not), the start the larger; with room for two
    // cells only, the `…` and the `/` that says a name follows.
    let room = width - name.width();
    if room == 2 {
        return format!("…/{name}");
    }
    format!("{}{name}", elide_middle(folders, room))
}

/// `path` (`/`-separated) in at most `width` cells, where it is before
/// what it is called: whole when it fits; else its first folders and its
/// last one around a `…` for those between (`~/.local/…/snapshots/a.pickle`);
/// else its root, its last folder and its name's start and end
/// (`~/…/snapshots/vm-17-…oom.pickle`) while the name keeps
/// [`MIN_NAME_CELLS`]; else as [`elide_path`] (`…/vm-17-…oom.pickle`). A
/// note that kept the name whole left only `…/` of the folder it is in.
pub fn elide_path_keeping_folder(path: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthStr as _;
    if path.width() <= width {
        return path.to_string();
    }
    let parts: Vec<&str> = path.split('/').collect();
    // The root ("~", "" of an absolute path, a relative path's first
    // folder) and the folders after it, the last folder, the name.
    let [head @ .., folder, name] = parts.as_slice() else {
        return elide_path(path, width);
    };
    if head.is_empty() || folder.is_empty() || name.is_empty() {
        return elide_path(path, width);
    }
    // Folders left out from the middle, whole ones, the first kept longest.
    for keep in (1..head.len()).rev() {
        let shown = format!("{}/…/{folder}/{name}", head[..keep].join("/"));
        if shown.width() <= width {
            return shown;
        }
    }
    let prefix = if head.len() > 1 {
        format!("{}/…/{folder}/", head[0])
    } else {
        format!("{}/{folder}/", head[0])
    };
    match width.checked_sub(prefix.width()) {
        Some(room) if room >= MIN_NAME_CELLS => format!("{prefix}{}", elide_middle(name, room)),
        _ if name.width() + 2 <= width => elide_path(path, width),
        _ if width > 2 => format!("…/{}", elide_middle(name, width - 2)),
        _ => elide_middle(name, width),
    }
}

/// The cells of a file's name [`elide_path_keeping_folder`] keeps beside
/// its folder: its start and its end (`vm-17-…-oom.pickle`).
const MIN_NAME_CELLS: usize = 12;

/// The terminal cells `c` takes (none for a control character).
fn char_cells(c: char) -> usize {
    unicode_width::UnicodeWidthChar::width(c).unwrap_or(0)
}

/// The longest start of `text` in at most `width` cells.
fn take_cells(text: &str, width: usize) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices() {
        used += char_cells(c);
        if used > width {
            return &text[..at];
        }
    }
    text
}

/// The longest end of `text` in at most `width` cells.
fn take_cells_from_end(text: &str, width: usize) -> &str {
    let mut used = 0;
    for (at, c) in text.char_indices().rev() {
        used += char_cells(c);
        if used > width {
            return &text[at + c.len_utf8()..];
        }
    }
    text
}

/// What a pane says when there is no GPU to show: before the first sample
/// nothing is known yet, which is not the same as no GPU.
pub fn no_gpu(state: &crate::app::state::AppState) -> &'static str {
    if state.status.samples == 0 {
        "sampling the GPUs…"
    } else {
        "no GPU found"
    }
}

/// A truncated pickle said as a user needs it first (the input ends early,
/// how far it got, was it copied whole?) and the parser's detail after, on
/// one line, as every command and the viewer say it; `None` for any other
/// error.
pub fn file_cut_text(error: &crate::snapshot::SnapshotError, from_stdin: bool) -> Option<String> {
    use crate::snapshot::{PickleError, SnapshotError};
    let (path, inner) = match error {
        SnapshotError::InFile { path, source } => (Some(path), source.as_ref()),
        other => (None, other),
    };
    let SnapshotError::Pickle(pickle) = inner else {
        return None;
    };
    let more = |needed: u64| {
        if needed == 1 {
            "1 more byte was expected".to_string()
        } else {
            format!("{needed} more bytes were expected")
        }
    };
    // Where the input stops, and the parser's words for it (the opcode and
    // its byte offset) for whoever looks into the file.
    let (end, cut, detail) = match *pickle {
        PickleError::Truncated {
            opcode,
            offset,
            end,
            needed,
        } => {
            // A FRAME's payload starts 9 bytes in (the opcode, an 8-byte
            // length): its size is what was read of it and what is missing.
            let frame = (opcode == "FRAME")
                .then(|| end.checked_sub(offset.checked_add(9)?))
                .flatten()
                .and_then(|read| u64::try_from(read).ok())
                .and_then(|read| read.checked_add(needed));
            let cut = match frame {
                // PROTO takes bytes 0 and 1: a frame at byte 2 is the first.
                Some(size) if offset == 2 => {
                    format!(
                        "cut inside its first {} frame",
                        crate::alloc::human_bytes(size)
                    )
                }
                Some(size) => format!("cut inside a {} frame", crate::alloc::human_bytes(size)),
                // Cut inside the frame's 8-byte length.
                None if opcode == "FRAME" => "cut inside a frame's header".to_string(),
                None => format!("cut inside a {opcode}"),
            };
            (
                end,
                format!("{cut} ({})", more(needed)),
                format!("the {opcode} opcode at byte {offset}"),
            )
        }
        PickleError::TruncatedLine {
            opcode,
            offset,
            end,
        } => (
            end,
            format!("cut inside a {opcode} line"),
            format!("the {opcode} opcode at byte {offset} has no newline"),
        ),
        PickleError::MissingStop { end } => (
            end,
            "cut before the pickle's end mark".to_string(),
            "no STOP opcode".to_string(),
        ),
        _ => return None,
    };
    let (what, question) = if from_stdin {
        ("the input", "did its writer stop early?")
    } else {
        ("the file", "was it copied whole?")
    };
    let bytes = if end == 1 { "byte" } else { "bytes" };
    let message =
        format!("{what} ends early: {end} {bytes}, {cut}; {question} (truncated pickle: {detail})");
    Some(match path {
        Some(path) => format!("{}: {message}", path.display()),
        None => message,
    })
}

/// For each line of a process tree given by its depth (`None`: a line
/// that is no process, which ends every family above it): whether it is a
/// child with a sibling further down, drawn `├` rather than the last
/// child's `└`, as the Processes pane and the text reports draw trees.
pub fn siblings_below(depths: &[Option<usize>]) -> Vec<bool> {
    // From the end: `next_at[d]` is whether a line of depth `d` follows
    // within the current family.
    let mut out = vec![false; depths.len()];
    let mut next_at: Vec<bool> = Vec::new();
    for (i, depth) in depths.iter().enumerate().rev() {
        let Some(d) = *depth else {
            next_at.clear();
            continue;
        };
        if d > 0 {
            out[i] = next_at.get(d).copied().unwrap_or(false);
        }
        // Deeper lines below belong to this one: their depths start over.
        next_at.truncate(d.saturating_add(1));
        next_at.resize(d.saturating_add(1), false);
        next_at[d] = true;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shortened_path_keeps_its_last_folder_before_its_whole_name() {
        let path = "~/.local/state/vramtop/snapshots/vm-4447-rankx-20261207T214924Z-demand.pickle";
        let cells = |s: &str| unicode_width::UnicodeWidthStr::width(s);
        assert_eq!(elide_path_keeping_folder(path, 200), path);
        // Whole folders go from the middle, the first kept longest.
        assert_eq!(
            elide_path_keeping_folder(path, 70),
            "~/.local/…/snapshots/vm-4447-rankx-20261207T214924Z-demand.pickle"
        );
        assert_eq!(
            elide_path_keeping_folder(path, 60),
            "~/…/snapshots/vm-4447-rankx-20261207T214924Z-demand.pickle"
        );
        // Then the name's middle, the folder it is in still said: the
        // note at 80 columns has about 35 cells for it.
        let shown = elide_path_keeping_folder(path, 35);
        assert!(cells(&shown) <= 35, "{shown}");
        assert!(shown.starts_with("~/…/snapshots/vm-4447-"), "{shown}");
        assert!(shown.contains('…') && shown.ends_with(".pickle"), "{shown}");
        // Too narrow for the folder and a readable name: the name's ends.
        let shown = elide_path_keeping_folder(path, 24);
        assert!(cells(&shown) <= 24, "{shown}");
        assert!(shown.starts_with("…/vm-4447-"), "{shown}");
        // An absolute path keeps its root.
        let shown =
            elide_path_keeping_folder("/tmp/tmp.k2Xv9aQ/vm-17-20261207T214924Z-oom.pickle", 40);
        assert!(cells(&shown) <= 40, "{shown}");
        assert!(shown.starts_with("/…/tmp.k2Xv9aQ/vm-17-"), "{shown}");
        assert!(shown.ends_with("-oom.pickle"), "{shown}");
        // A long folder of its own ($VRAMTOP_SNAPSHOT_DIR from mktemp -d)
        // still said where the name keeps 12 cells: 33 at 80 columns.
        let shown = elide_path_keeping_folder(
            "/tmp/tmp.hqJ0EZ7SF9/vm-8398-rankx-20261207T220435Z-demand.pickle",
            33,
        );
        assert!(shown.starts_with("/…/tmp.hqJ0EZ7SF9/vm-8398"), "{shown}");
        for w in 0..90 {
            assert!(cells(&elide_path_keeping_folder(path, w)) <= w, "{w}");
        }
    }

    #[test]
    fn cpu_percent_has_a_decimal_below_100_and_none_above() {
        assert_eq!(cpu_percent(0.0), "0.0");
        assert_eq!(cpu_percent(0.34), "0.3");
        assert_eq!(cpu_percent(99.94), "99.9");
        assert_eq!(cpu_percent(99.95), "100");
        assert_eq!(cpu_percent(350.0), "350");
        assert!(cpu_percent(99_999.0).chars().count() <= 5);
    }

    #[test]
    fn a_pool_id_has_no_space_for_a_wrapped_line_to_part_it_at() {
        assert_eq!(pool_id((0, 1)), "(0,1)");
        assert_eq!(pool_id((0, 0)), "(0,0)");
        assert_eq!(pool_id((-3, i64::MAX)), format!("(-3,{})", i64::MAX));
    }

    #[test]
    fn a_percentage_is_never_rounded_onto_all_or_none_it_is_not() {
        assert_eq!(percent_of(0, 100), "0%");
        assert_eq!(percent_of(1, 1 << 30), "<0.1%");
        assert_eq!(percent_of(6, 1000), "0.6%");
        assert_eq!(percent_of(999, 1000), ">99%");
        assert_eq!(percent_of(1000, 1000), "100%");
        assert_eq!(percent_of(150, 1000), "15%");
    }

    #[test]
    fn times_since_the_start_switch_to_seconds_at_one_second() {
        assert_eq!(since_start(951_991), "t+951.991 ms");
        assert_eq!(since_start(999_999), "t+999.999 ms");
        assert_eq!(since_start(1_000_000), "t+1.000 s");
        assert_eq!(since_start(26_180_692), "t+26.181 s");
        assert_eq!(since_start(i64::MIN).split(' ').nth(1), Some("s"));
    }

    #[test]
    fn a_whole_millisecond_clock_shows_no_fraction_of_a_millisecond() {
        assert_eq!(since_start_on(12_000, true), "t+12 ms");
        assert_eq!(since_start_on(0, true), "t+0 ms");
        assert_eq!(since_start_on(999_000, true), "t+999 ms");
        // From a second the figure is milliseconds already.
        assert_eq!(since_start_on(26_181_000, true), "t+26.181 s");
        assert_eq!(since_start_on(12_000, false), "t+12.000 ms");
    }

    #[test]
    fn a_count_of_one_takes_the_singular() {
        assert_eq!(count(1, "segment", "segments"), "1 segment");
        assert_eq!(count(0, "segment", "segments"), "0 segments");
        assert_eq!(
            count_of(2, "trace entry", "trace entries"),
            "2 trace entries"
        );
    }

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn bytes_use_three_significant_digits_in_binary_units() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1024), "1.00 KiB");
        assert_eq!(bytes(3 * GIB / 2), "1.50 GiB");
        assert_eq!(bytes(12 * GIB + 300 * MIB), "12.3 GiB");
        assert_eq!(bytes(500 * MIB), "500 MiB");
        assert_eq!(bytes(u64::MAX), "16.0 EiB", "16 EiB less a byte");
        // Rounded to the nearest, the unit picked after the rounding.
        assert_eq!(bytes(500 * MIB + 973 * KIB), "501 MiB");
        assert_eq!(bytes(1023 * MIB + 614 * KIB), "1.00 GiB");
    }

    #[test]
    fn packed_and_paired_sizes_round_to_the_nearest_and_pairs_stay_apart() {
        let under = 2 * MIB - 512;
        assert_eq!(bytes_short(under), "2.00MiB");
        assert_eq!(bytes_short(500 * MIB + 973 * KIB), "501MiB");
        assert_eq!(bytes_short(1023 * MIB + 614 * KIB), "1.00GiB");
        // Beside the size it is just under, whose figure its nearest one
        // would be, both take a decimal more.
        assert_eq!(bytes_pair(Some(under), Some(2 * MIB)), "1.999/2.000 MiB");
        assert_eq!(
            bytes_of(Some(80 * GIB - 1), Some(80 * GIB)),
            "79.999/80.000 GiB"
        );
    }

    #[test]
    fn a_nearly_full_gpu_reads_nearly_full_not_a_tenth_short() {
        // 1014 MiB of 1 GiB (>99%) read "0.9/1.0 GiB": the used figure
        // kept off the total's 1.0 by a whole tenth.
        assert_eq!(bytes_of(Some(GIB - 10 * MIB), Some(GIB)), "0.99/1.00 GiB");
        assert_eq!(bytes_of(Some(GIB - MIB), Some(GIB)), "0.999/1.000 GiB");
        // Figures far apart keep their one decimal.
        assert_eq!(bytes_of(Some(GIB / 2), Some(GIB)), "0.5/1.0 GiB");
        assert_eq!(bytes_of(Some(GIB - 60 * MIB), Some(GIB)), "0.9/1.0 GiB");
    }

    #[test]
    fn a_pair_that_would_read_equal_takes_decimals_then_a_smaller_unit() {
        // allocated/reserved: three significant digits made both 560.
        assert_eq!(
            bytes_pair(Some(560 * MIB + 200 * KIB), Some(560 * MIB + 400 * KIB)),
            "560.2/560.4 MiB"
        );
        // An H100's 81559 MiB less 100 KiB: equal to three decimals of a
        // GiB (79.647), apart in MiB.
        let total = 81_559 * MIB;
        assert_eq!(
            bytes_of(Some(total - 100 * KIB), Some(total)),
            "81558.9/81559.0 MiB"
        );
        // A byte apart: the unit where they part.
        assert_eq!(bytes_of(Some(1023), Some(1024)), "0.999/1.000 KiB");
        assert_eq!(bytes_of(Some(1000), Some(1001)), "1000/1001 B");
        // Equal sizes read equal, as before.
        assert_eq!(bytes_of(Some(80 * GIB), Some(80 * GIB)), "80.0/80.0 GiB");
        assert_eq!(bytes_pair(Some(560 * MIB), Some(560 * MIB)), "560/560 MiB");
    }

    /// The two figures of a pair as numbers in the same steps: "0.99/1.00
    /// GiB" is (99, 100); different decimals are brought to the finer.
    fn pair_figures(text: &str) -> (u128, u128) {
        let (figures, _unit) = text.split_once(' ').expect("a unit");
        let (a, b) = figures.split_once('/').expect("a pair");
        let decimals = |t: &str| t.split_once('.').map_or(0, |(_, f)| f.len() as u32);
        let finest = decimals(a).max(decimals(b));
        let value = |t: &str| -> u128 {
            let digits: u128 = t.replace('.', "").parse().expect("a figure");
            digits * 10u128.pow(finest - decimals(t))
        };
        (value(a), value(b))
    }

    /// The bytes a figure of `text` stands for, as a fraction (numerator,
    /// denominator): "1.50 KiB" is 1536/1.
    fn figure_bytes(figure: &str, unit: &str) -> (u128, u128) {
        let exp = UNITS.iter().position(|u| *u == unit).expect("a unit");
        let decimals = figure.split_once('.').map_or(0, |(_, f)| f.len() as u32);
        let digits: u128 = figure.replace('.', "").parse().expect("a figure");
        (digits << (10 * exp), 10u128.pow(decimals))
    }

    proptest::proptest! {
        #[test]
        fn paired_sizes_compare_as_their_bytes_do(
            a in proptest::num::u64::ANY,
            gap in proptest::prop_oneof![0u64..4096, 0u64..(1 << 30), proptest::num::u64::ANY],
            scale in 0u32..64,
        ) {
            // Sizes of every magnitude, often close together.
            let small = a >> scale;
            let large = small.saturating_add(gap >> scale);
            for text in [bytes_of(Some(small), Some(large)), bytes_pair(Some(small), Some(large))] {
                let (u, t) = pair_figures(&text);
                proptest::prop_assert!(u <= t, "{small} {large}: {text}");
                proptest::prop_assert_eq!(u == t, small == large, "{} {}: {}", small, large, text);
                // Each figure within one step of its bytes.
                let (figures, unit) = text.split_once(' ').expect("a unit");
                let (fa, fb) = figures.split_once('/').expect("a pair");
                for (figure, bytes) in [(fa, small), (fb, large)] {
                    let (num, den) = figure_bytes(figure, unit);
                    let exp = UNITS.iter().position(|x| *x == unit).expect("unit");
                    let step = 1u128 << (10 * exp);
                    // |num/den − bytes| < step/den
                    let exact = u128::from(bytes) * den;
                    proptest::prop_assert!(num.abs_diff(exact) < step, "{bytes}: {text}");
                }
            }
            // A share said ">99%" is not contradicted by its figures.
            if percent_of(small, large) == ">99%" {
                let text = bytes_of(Some(small), Some(large));
                let (u, t) = pair_figures(&text);
                proptest::prop_assert!(u * 100 >= t * 99, "{small} {large}: {text}");
            }
        }
    }

    #[test]
    fn short_bytes_drop_decimals_for_whole_values() {
        assert_eq!(bytes_short(512), "512B");
        assert_eq!(bytes_short(2 * MIB), "2MiB");
        assert_eq!(bytes_short(GIB), "1GiB");
        assert_eq!(bytes_short(3 * GIB / 2), "1.50GiB");
    }

    #[test]
    fn byte_pairs_share_the_larger_unit_with_three_digits_each() {
        assert_eq!(bytes_pair(Some(397 * MIB), Some(560 * MIB)), "397/560 MiB");
        assert_eq!(bytes_pair(Some(400 * MIB), Some(GIB)), "0.39/1.00 GiB");
        assert_eq!(bytes_pair(Some(100), Some(1000)), "100/1000 B");
        assert_eq!(bytes_pair(None, Some(GIB)), "n/a/1.00 GiB");
        assert_eq!(bytes_pair(None, None), "n/a");
    }

    #[test]
    fn unknown_values_read_na_never_zero() {
        assert_eq!(opt_bytes(None), "n/a");
        assert_eq!(opt_unit(None, "%"), "n/a");
        assert_eq!(pair(None, None, " W"), "n/a");
        assert_eq!(pair(Some(612), None, " W"), "612/n/a W");
        assert_eq!(bytes_of(None, None), "n/a");
        assert_eq!(bytes_of(None, Some(80 * GIB)), "n/a/80.0 GiB");
        assert_eq!(percent_of(1, 0), "n/a");
    }

    #[test]
    fn used_of_total_shares_the_total_unit() {
        assert_eq!(bytes_of(Some(512 * MIB), Some(80 * GIB)), "0.5/80.0 GiB");
        assert_eq!(bytes_of(Some(20 * GIB), Some(80 * GIB)), "20.0/80.0 GiB");
        assert_eq!(bytes_of(Some(100), Some(1000)), "100/1000 B");
    }

    #[test]
    fn percentages_keep_one_decimal_only_below_ten() {
        assert_eq!(percent_of(0, 100), "0%");
        assert_eq!(percent_of(6, 1000), "0.6%");
        assert_eq!(percent_of(15, 100), "15%");
        assert_eq!(percent_of(100, 100), "100%");
        assert_eq!(percent(f64::NAN), "n/a");
        assert_eq!(percent(2.0), "100%", "clamped");
    }

    #[test]
    fn watts_round_milliwatts_to_the_nearest_watt() {
        assert_eq!(watts(Some(612_499)), Some(612));
        assert_eq!(watts(Some(612_500)), Some(613));
        assert_eq!(watts(None), None);
    }

    #[test]
    fn intervals_read_in_the_unit_they_were_given_in() {
        assert_eq!(interval(250), "250 ms");
        assert_eq!(interval(1000), "1s");
        assert_eq!(interval(10_000), "10s", "not 10000 ms");
        assert_eq!(interval(1500), "1.5s");
        assert_eq!(interval(600_000), "10m");
    }

    #[test]
    fn seconds_abbreviate_whole_minutes_and_hours() {
        assert_eq!(seconds(30), "30s");
        assert_eq!(seconds(90), "1m30s");
        assert_eq!(seconds(150), "2m30s", "not 150s beside 5m");
        assert_eq!(seconds(1800), "30m");
        assert_eq!(seconds(0), "0s");
        assert_eq!(seconds(300), "5m");
        assert_eq!(seconds(3600), "1h");
    }

    #[test]
    fn truncate_marks_a_cut_with_an_ellipsis() {
        assert_eq!(truncate("python train.py", 20), "python train.py");
        assert_eq!(truncate("python train.py", 8), "python …");
        assert_eq!(truncate("abc", 0), "");
        assert_eq!(truncate("abc", 1), "…");
    }

    #[test]
    fn truncate_start_keeps_the_end_where_a_fields_cursor_is() {
        assert_eq!(
            truncate_start("max_split_size_mb:128", 30),
            "max_split_size_mb:128"
        );
        assert_eq!(truncate_start("max_split_size_mb:128", 8), "…_mb:128");
        assert_eq!(truncate_start("表表表", 4), "…表");
        assert_eq!(truncate_start("abc", 1), "…");
        assert_eq!(truncate_start("abc", 0), "");
    }

    #[test]
    fn truncate_counts_terminal_cells_not_characters() {
        use unicode_width::UnicodeWidthStr as _;
        // Four wide characters are eight cells: cut to 6 cells, two of
        // them fit before the ellipsis (a third would need cells 5 and 6).
        let cut = truncate("训练脚本.py", 6);
        assert_eq!(cut, "训练…");
        assert!(cut.width() <= 6, "{cut:?} is {} cells", cut.width());
        assert_eq!(truncate("训练脚本.py", 11), "训练脚本.py");
        assert_eq!(truncate("训练脚本.py", 10), "训练脚本.…");
    }
}
