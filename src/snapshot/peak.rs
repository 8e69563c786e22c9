//! The peaks of a trace: the cursor where allocated bytes were highest,
//! where reserved bytes were highest, and the biggest single allocation;
//! the highest between two cursors; and the moments the command line names
//! (`--at 40`, `--at peak`, `--at mark:3`). Pure: computed from a [`DeviceScrub`]'s
//! timeline (its table of maxima: a trace of millions of events is not
//! walked again).

use std::num::NonZeroUsize;

use serde::Serialize;
use thiserror::Error;

use super::scrub::{DeviceScrub, MarkKind, Point};

/// A moment of the trace and a figure there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Moment {
    /// Events applied (0…=N); the first cursor the figure is reached.
    pub cursor: usize,
    /// Bytes.
    pub bytes: u64,
    /// Microseconds as recorded at that cursor; `None` without time.
    pub time_us: Option<i64>,
}

/// One device's peaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Peaks {
    pub allocated: Moment,
    pub reserved: Moment,
    /// The largest `alloc` event of the trace (its requested bytes; the
    /// cursor just after it); `None` when the trace has no allocation. Not
    /// the largest live block: one allocated before a mid-run trace began
    /// can be larger.
    pub biggest_allocation: Option<Moment>,
}

/// The peaks of `device`'s timeline. The first cursor wins a tie.
pub fn peaks(device: &DeviceScrub) -> Peaks {
    let (most_reserved, most_allocated) = device.peaks();
    // The first cursor at the highest value (cursor 0 when all are 0, or
    // without points).
    let moment = |pick: fn(&Point) -> u64, bytes: u64| {
        let cursor = device.first_reaching(pick, bytes).unwrap_or(0);
        Moment {
            cursor,
            bytes,
            time_us: device.time_at(cursor),
        }
    };
    let biggest = device.biggest_allocation().and_then(|i| {
        let e = device.events().get(i)?;
        Some(Moment {
            cursor: i.saturating_add(1),
            bytes: e.size,
            time_us: e.time_us(),
        })
    });
    Peaks {
        allocated: moment(|p| p.allocated, most_allocated),
        reserved: moment(|p| p.reserved, most_reserved),
        biggest_allocation: biggest,
    }
}

/// The highest allocated and reserved bytes at the cursors `a..=b` (in
/// either order, clamped to the trace), each at the first cursor of the
/// range that reaches it: what a step between two moments needed at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Highest {
    pub allocated: Moment,
    pub reserved: Moment,
}

/// [`Highest`] between cursors `a` and `b`, both included.
pub fn highest_between(device: &DeviceScrub, a: usize, b: usize) -> Highest {
    let (a, b) = (a.min(b).min(device.len()), a.max(b).min(device.len()));
    let (most_reserved, most_allocated) = device.highest(a..b.saturating_add(1));
    let moment = |pick: fn(&Point) -> u64, bytes: u64| {
        let cursor = device.first_reaching_from(pick, bytes, a).unwrap_or(a);
        Moment {
            cursor,
            bytes,
            time_us: device.time_at(cursor),
        }
    };
    Highest {
        allocated: moment(|p| p.allocated, most_allocated),
        reserved: moment(|p| p.reserved, most_reserved),
    }
}

/// A moment of a device's trace as the command line names it (`--at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// The cursor after this many events, as the viewer shows it ("event
    /// N/M").
    Event(usize),
    /// Just after the event at this index of the trace as stored, counted
    /// from 0 as `replay` and the viewer's "(#40)" name events (`#N`: the
    /// cursor N+1, "event 41/97 (#40)").
    Index(usize),
    /// Before the first event (cursor 0).
    Start,
    /// The first cursor at the peak of allocated bytes (the viewer's `P`).
    Peak,
    /// After the last event: the file's own state.
    End,
    /// Just after the trace's last OOM event.
    Oom,
    /// Just after the trace's N-th `snapshot`/`annotate` entry, counted
    /// from 1 as `open --summary` lists them (`mark:N`).
    Mark(NonZeroUsize),
    /// Just after the trace's last `snapshot`/`annotate` entry
    /// (`mark:last`).
    LastMark,
}

/// The event at trace index `index` (0-based, as `replay` and what-if
/// name events) of a trace of `events` events, in the viewer's words:
/// its count from 1 and its index, "event 41/97 (#40)" (`--at #40` and
/// `--at 41` land just after it).
pub fn event_at_index(index: usize, events: usize) -> String {
    format!(
        "event {}/{events} ({INDEX_PREFIX}{index})",
        index.saturating_add(1)
    )
}

/// What `--at` takes besides an event number, for messages: a trace
/// index, the words and the `snapshot`/`annotate` entries.
pub const AT_FORMS: &str = "#N (replay's #N: event N+1), start, peak, end, oom, \
                            mark:N (the N-th snapshot/annotate entry) or mark:last";

/// The prefix of `--at mark:N`.
const MARK_PREFIX: &str = "mark:";

/// The prefix of `--at #N`, a trace index.
const INDEX_PREFIX: &str = "#";

/// `#N` (what follows the prefix): an index from 0.
fn index_from_str(rest: &str) -> Result<At, String> {
    let rest = rest.trim();
    if !crate::quote::is_digits(rest) {
        return Err(format!(
            "'{INDEX_PREFIX}{}' is not a trace index: write #N for the event replay and the \
             viewer call #N (#0 is the first event, \"event 1/…\")",
            crate::quote::cut(rest)
        ));
    }
    rest.parse::<usize>().map(At::Index).map_err(|_| {
        crate::quote::not_in_range(
            &format!("{INDEX_PREFIX}{rest}"),
            0,
            u64::try_from(usize::MAX).unwrap_or(u64::MAX),
        )
    })
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            At::Event(n) => write!(f, "{n}"),
            At::Index(n) => write!(f, "{INDEX_PREFIX}{n}"),
            At::Start => f.write_str("start"),
            At::Peak => f.write_str("peak"),
            At::End => f.write_str("end"),
            At::Oom => f.write_str("oom"),
            At::Mark(n) => write!(f, "{MARK_PREFIX}{n}"),
            At::LastMark => write!(f, "{MARK_PREFIX}last"),
        }
    }
}

/// `mark:N` (what follows the prefix): a count from 1, or `last`.
fn mark_from_str(rest: &str) -> Result<At, String> {
    let rest = rest.trim();
    if rest.eq_ignore_ascii_case("last") {
        return Ok(At::LastMark);
    }
    if !crate::quote::is_digits(rest) {
        return Err(format!(
            "'{MARK_PREFIX}{}' is not a mark: write mark:N for the N-th snapshot/annotate entry \
             (mark:1 is the first), or mark:last",
            crate::quote::cut(rest)
        ));
    }
    match rest.parse::<usize>().map(NonZeroUsize::new) {
        Ok(Some(n)) => Ok(At::Mark(n)),
        Ok(None) => Err(format!(
            "'{MARK_PREFIX}{}' is not a mark: marks count from 1 (mark:1 is the first \
             snapshot/annotate entry)",
            crate::quote::cut(rest)
        )),
        Err(_) => Err(crate::quote::not_in_range(
            &format!("{MARK_PREFIX}{rest}"),
            1,
            u64::try_from(usize::MAX).unwrap_or(u64::MAX),
        )),
    }
}

impl std::str::FromStr for At {
    type Err = String;

    /// An event number (digits only: no sign), or one of [`AT_FORMS`], any
    /// case.
    fn from_str(text: &str) -> Result<At, String> {
        let word = text.trim();
        match word.to_ascii_lowercase().as_str() {
            "start" => return Ok(At::Start),
            "peak" => return Ok(At::Peak),
            "end" => return Ok(At::End),
            "oom" => return Ok(At::Oom),
            _ => {}
        }
        if let Some(rest) = word
            .get(..MARK_PREFIX.len())
            .filter(|prefix| prefix.eq_ignore_ascii_case(MARK_PREFIX))
            .and_then(|_| word.get(MARK_PREFIX.len()..))
        {
            return mark_from_str(rest);
        }
        if let Some(rest) = word.strip_prefix(INDEX_PREFIX) {
            return index_from_str(rest);
        }
        // `-0` is 0, as a count's `-0` (`--top`) is.
        let word = match word.strip_prefix('-') {
            Some(rest) if !rest.is_empty() && rest.bytes().all(|b| b == b'0') => rest,
            _ => word,
        };
        // As a count's error (`--top`) says it: not "not a moment".
        if word.starts_with('-') {
            return Err(format!(
                "'{}' is negative: an event number is 0 or more (0 is before the first event)",
                crate::quote::cut(word)
            ));
        }
        let digits = crate::quote::is_digits(word);
        match word.parse::<usize>() {
            Ok(n) if digits => Ok(At::Event(n)),
            // An event number past what a count holds is a number, too
            // large: its range, not "not a moment".
            Err(_) if digits => Err(crate::quote::not_in_range(
                word,
                0,
                u64::try_from(usize::MAX).unwrap_or(u64::MAX),
            )),
            _ => Err(format!(
                "'{}' is not a moment: write an event number as the viewer shows it (40 for \
                 \"event 40/97\"), or {AT_FORMS}",
                crate::quote::cut(text),
            )),
        }
    }
}

/// Why `--at` names no moment of a trace.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AtError {
    #[error(
        "event {event} is past the end of GPU {device}'s trace: it has {events} events \
         (--at takes 0 to {events}, or {AT_FORMS})"
    )]
    PastEnd {
        device: u32,
        event: usize,
        events: usize,
    },
    /// `--at #N` past the trace's last index.
    #[error(
        "#{index} is past the end of GPU {device}'s trace: it has {events} events{}",
        index_range(*events)
    )]
    PastLastIndex {
        device: u32,
        index: usize,
        events: usize,
    },
    #[error("GPU {device}'s trace has no OOM event: --at oom needs one")]
    NoOom { device: u32 },
    /// `--at mark:N` past the trace's `snapshot`/`annotate` entries, or
    /// `mark:…` of a trace with none.
    #[error("{}", past_marks(*device, *at, *marks))]
    NoMark { device: u32, at: At, marks: usize },
    /// `at` is a moment of the trace (not `end`, which every file has)
    /// and the file has none.
    /// `cause` picks the advice on recording one, the summary's.
    #[error(
        "no trace of memory events in the file: --at {at} names a moment of the trace, and the \
         file holds its final state only, which --at end names ({})",
        cause.how_to_get_a_trace()
    )]
    NoTrace {
        at: At,
        cause: super::sites::NoTraceCause,
    },
    /// `at` is a moment of the trace and `--no-trace` did not read it.
    #[error(
        "the trace was not read (--no-trace): --at {at} names a moment of it; --at end is the \
         final state, which was read"
    )]
    TraceNotRead { at: At },
}

/// What `--at #N` takes of a trace of `events` events: " (--at takes #0
/// to #96)",
/// or nothing of an empty one.
fn index_range(events: usize) -> String {
    match events.checked_sub(1) {
        Some(last) => format!(" (--at takes #0 to #{last})"),
        None => String::new(),
    }
}

/// "GPU 0's trace has 41 snapshot/annotate entries: --at mark:50 is past
/// them (mark:1 to mark:41, or mark:last)", or has none.
fn past_marks(device: u32, at: At, marks: usize) -> String {
    match marks {
        0 => format!(
            "GPU {device}'s trace has no snapshot/annotate entry: --at {at} needs one (an \
             event number names any moment)"
        ),
        1 => format!(
            "GPU {device}'s trace has 1 snapshot/annotate entry: --at {at} is past it (mark:1 \
             or mark:last names it)"
        ),
        n => format!(
            "GPU {device}'s trace has {n} snapshot/annotate entries: --at {at} is past them \
             (mark:1 to mark:{n}, or mark:last)"
        ),
    }
}

impl At {
    /// The cursor this moment is on `device`'s trace.
    pub fn cursor(self, device: &DeviceScrub) -> Result<usize, AtError> {
        let events = device.len();
        match self {
            At::Event(event) if event > events => Err(AtError::PastEnd {
                device: device.device,
                event,
                events,
            }),
            At::Event(event) => Ok(event),
            // After the event at `index`: the cursor one past it.
            At::Index(index) => index
                .checked_add(1)
                .filter(|&cursor| cursor <= events)
                .ok_or(AtError::PastLastIndex {
                    device: device.device,
                    index,
                    events,
                }),
            At::Start => Ok(0),
            At::End => Ok(events),
            At::Peak => Ok(peaks(device).allocated.cursor),
            At::Oom => device
                .mark_events(MarkKind::Oom)
                .last()
                .map(|i| i.saturating_add(1))
                .ok_or(AtError::NoOom {
                    device: device.device,
                }),
            At::Mark(n) => {
                // After the entry, as the viewer's `i` lands and the
                // summary lists it.
                let nth = n
                    .get()
                    .checked_sub(1)
                    .and_then(|skip| device.mark_events(MarkKind::Marker).nth(skip));
                self.after_mark(device, nth)
            }
            At::LastMark => self.after_mark(device, device.mark_events(MarkKind::Marker).last()),
        }
    }

    /// The cursor just after the marker entry at index `entry`, or why
    /// there is none.
    fn after_mark(self, device: &DeviceScrub, entry: Option<usize>) -> Result<usize, AtError> {
        entry
            .map(|i| i.saturating_add(1))
            .ok_or_else(|| AtError::NoMark {
                device: device.device,
                at: self,
                marks: device.count(MarkKind::Marker),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_reads_event_numbers_and_words_and_refuses_the_rest() {
        assert_eq!("40".parse::<At>(), Ok(At::Event(40)));
        assert_eq!("0".parse::<At>(), Ok(At::Event(0)));
        assert_eq!("Peak".parse::<At>(), Ok(At::Peak));
        assert_eq!(" oom ".parse::<At>(), Ok(At::Oom));
        assert_eq!("end".parse::<At>(), Ok(At::End));
        assert_eq!("start".parse::<At>(), Ok(At::Start));
        let e = "-1".parse::<At>().expect_err("negative");
        assert!(e.contains("'-1' is negative"), "{e}");
        for bad in ["+3", "", "4x", "1e3", "pea"] {
            let e = bad.parse::<At>().expect_err(bad);
            assert!(e.contains("is not a moment"), "{bad}: {e}");
        }
        // A number, too large: its range, not "not a moment".
        let e = "99999999999999999999999"
            .parse::<At>()
            .expect_err("past usize");
        assert_eq!(
            e,
            format!("'99999999999999999999999' is not in 0..={}", usize::MAX)
        );
        assert_eq!(At::Event(7).to_string(), "7");
        assert_eq!(At::Oom.to_string(), "oom");
    }

    #[test]
    fn at_reads_hash_n_as_the_trace_index_the_event_after_it() {
        assert_eq!("#40".parse::<At>(), Ok(At::Index(40)));
        assert_eq!(" #0 ".parse::<At>(), Ok(At::Index(0)));
        assert_eq!(At::Index(40).to_string(), "#40");
        for bad in ["#", "#-1", "#x", "#4.0"] {
            let e = bad.parse::<At>().expect_err(bad);
            assert!(e.contains("is not a trace index"), "{bad}: {e}");
        }
        let e = "#99999999999999999999999"
            .parse::<At>()
            .expect_err("past usize");
        assert!(e.contains("is not in 0..="), "{e}");
        assert_eq!(event_at_index(40, 97), "event 41/97 (#40)");
    }

    #[test]
    fn at_reads_mark_n_from_one_and_mark_last_in_any_case() {
        let n = |k| At::Mark(NonZeroUsize::new(k).expect("not 0"));
        assert_eq!("mark:1".parse::<At>(), Ok(n(1)));
        assert_eq!(" Mark: 12 ".parse::<At>(), Ok(n(12)));
        assert_eq!("mark:LAST".parse::<At>(), Ok(At::LastMark));
        assert_eq!(n(3).to_string(), "mark:3");
        assert_eq!(At::LastMark.to_string(), "mark:last");
        let e = "mark:0".parse::<At>().expect_err("0");
        assert!(e.contains("marks count from 1"), "{e}");
        for bad in ["mark:", "mark:-1", "mark:+2", "mark:first", "mark:1.5"] {
            let e = bad.parse::<At>().expect_err(bad);
            assert!(e.contains("is not a mark"), "{bad}: {e}");
        }
        let e = "mark:99999999999999999999999"
            .parse::<At>()
            .expect_err("past usize");
        assert!(e.contains("is not in 1..="), "{e}");
        // A multi-byte text where the prefix would be is not a mark, and
        // no panic.
        let e = "märk:1".parse::<At>().expect_err("not a mark");
        assert!(e.contains("is not a moment") && e.contains("mark:N"), "{e}");
    }

    #[test]
    fn at_minus_zero_is_event_zero_not_negative() {
        assert_eq!("-0".parse::<At>(), Ok(At::Event(0)));
        let e = "-01".parse::<At>().expect_err("negative");
        assert!(e.contains("is negative"), "{e}");
    }
}
