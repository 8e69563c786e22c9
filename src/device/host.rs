//! What a GPU process costs the host, from Linux `/proc`: the CPU time it
//! used between two samples (`/proc/PID/stat`) and the memory it has
//! resident (`/proc/PID/statm`), for the processes pane's %CPU and
//! HOST-MEM columns.
//!
//! As in [`super::procfs`], nothing here fails loudly: a process that
//! exited, a `/proc` mounted `hidepid`, or text that does not parse gives
//! `None`, shown as "-". The parsing is pure functions over text, tested on
//! fixture strings; [`HostSampler`] only reads the files and keeps each
//! process's previous CPU time.
//!
//! Only real pids are read: the simulated backend makes its pids up and
//! never calls this (a made-up pid may be another program's).

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::procfs::read_to_string_limited;

/// Largest `/proc/PID/stat` read, bytes. The line is about 300 bytes (52
/// numbers and a name of at most 15 bytes); the limit only bounds odd
/// content.
const MAX_STAT_BYTES: u64 = 4096;
/// Largest `/proc/PID/statm` read, bytes (7 numbers).
const MAX_STATM_BYTES: u64 = 512;

/// A process's CPU time so far and when it started, from `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuTimes {
    /// When the process started, clock ticks after boot: a pid that now
    /// runs another process (it was reused) has another start.
    pub start: u64,
    /// User plus system time, clock ticks (`utime + stime`).
    pub busy: u64,
}

/// The CPU times in the text of `/proc/PID/stat`. The second field is the
/// command name in parentheses, which may itself hold spaces and
/// parentheses, so the fields are counted from the last `)`. `None` for
/// text that does not parse.
pub fn parse_stat(text: &str) -> Option<CpuTimes> {
    let (_, rest) = text.rsplit_once(')')?;
    // After the `)`, field 3 of proc(5) (the state) is the first.
    let mut fields = rest.split_ascii_whitespace();
    let utime: u64 = fields.nth(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // Field 15 was the last taken: 22 (starttime) is the 7th after it.
    let start: u64 = fields.nth(22 - 16)?.parse().ok()?;
    Some(CpuTimes {
        start,
        busy: utime.checked_add(stime)?,
    })
}

/// Resident pages in the text of `/proc/PID/statm` (its second field: the
/// same count as `VmRSS` in `status`, in pages). `None` for text that does
/// not parse.
pub fn parse_statm_resident(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Percent of one CPU a process used between two readings `elapsed`
/// apart (above 100 with several busy threads, as top shows it), to 0.1.
/// `None` when the two are not of the same process (another start: the pid
/// was reused), when its time went backwards, or when the readings are
/// less than a clock tick apart (their difference would say nothing).
pub fn cpu_percent(
    before: CpuTimes,
    now: CpuTimes,
    elapsed: Duration,
    ticks_per_second: u64,
) -> Option<f64> {
    if before.start != now.start || ticks_per_second == 0 {
        return None;
    }
    let ticks = now.busy.checked_sub(before.busy)?;
    let tick_s = 1.0 / ticks_per_second as f64;
    let seconds = elapsed.as_secs_f64();
    if seconds < tick_s {
        return None;
    }
    let percent = ticks as f64 * tick_s / seconds * 100.0;
    Some((percent * 10.0).round() / 10.0)
}

/// Host figures of one process; `None` where `/proc` does not say.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostUsage {
    /// Percent of one CPU since the previous sample (see [`cpu_percent`]).
    pub cpu_percent: Option<f64>,
    /// Resident bytes.
    pub host_memory: Option<u64>,
}

/// Reads the host figures of the GPU processes each sample, keeping each
/// one's CPU time for the next: a process's first sample has no %CPU.
#[derive(Debug)]
pub struct HostSampler {
    /// `sysconf(_SC_CLK_TCK)`: the unit of stat's times (100 on Linux).
    ticks_per_second: u64,
    /// Bytes a page (statm counts pages: 4 KiB, 16 or 64 KiB on some
    /// arm64 and ppc64 kernels).
    page_size: u64,
    /// Each pid's CPU times at the last sample and when they were read;
    /// only the pids of the last sample (so bounded by the driver's list).
    last: HashMap<u32, (CpuTimes, Instant)>,
}

impl Default for HostSampler {
    fn default() -> Self {
        HostSampler::new()
    }
}

impl HostSampler {
    pub fn new() -> Self {
        HostSampler {
            ticks_per_second: rustix::param::clock_ticks_per_second(),
            page_size: u64::try_from(rustix::param::page_size()).unwrap_or(4096),
            last: HashMap::new(),
        }
    }

    /// The figures of each of `pids` at `now` (each pid read once however
    /// many GPUs list it); pids not among them are forgotten.
    pub fn sample(&mut self, pids: &BTreeSet<u32>, now: Instant) -> HashMap<u32, HostUsage> {
        let mut last = HashMap::with_capacity(pids.len());
        let mut out = HashMap::with_capacity(pids.len());
        for &pid in pids {
            let times = read_to_string_limited(&format!("/proc/{pid}/stat"), MAX_STAT_BYTES)
                .and_then(|text| parse_stat(&text));
            let cpu_percent = match (times, self.last.get(&pid)) {
                (Some(now_times), Some(&(before, at))) => cpu_percent(
                    before,
                    now_times,
                    now.saturating_duration_since(at),
                    self.ticks_per_second,
                ),
                _ => None,
            };
            if let Some(times) = times {
                last.insert(pid, (times, now));
            }
            let host_memory =
                read_to_string_limited(&format!("/proc/{pid}/statm"), MAX_STATM_BYTES)
                    .and_then(|text| parse_statm_resident(&text))
                    .and_then(|pages| pages.checked_mul(self.page_size));
            out.insert(
                pid,
                HostUsage {
                    cpu_percent,
                    host_memory,
                },
            );
        }
        self.last = last;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A python process's stat line (utime 1234, stime 56, starttime
    /// 987654), its name with a space and parentheses in it.
    const STAT: &str = "4242 (python (train) x) S 4100 4242 4100 34816 4242 4194304 \
        123456 0 12 0 1234 56 0 0 20 0 33 0 987654 12345678901 524288 \
        18446744073709551615 1 1 0 0 0 0 0 16781312 17442 0 0 0 17 3 0 0 0 0 0\n";

    #[test]
    fn stat_gives_user_plus_system_ticks_and_the_start() {
        assert_eq!(
            parse_stat(STAT),
            Some(CpuTimes {
                start: 987_654,
                busy: 1290
            })
        );
    }

    #[test]
    fn stat_that_is_cut_short_or_garbled_gives_none() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("4242 (python"), None, "no closing parenthesis");
        assert_eq!(parse_stat("4242 (python) S 1 2 3"), None, "cut short");
        let garbled = STAT.replace(" 1234 56 ", " 12x4 56 ");
        assert_eq!(parse_stat(&garbled), None);
        let negative = STAT.replace(" 1234 56 ", " -1 56 ");
        assert_eq!(parse_stat(&negative), None);
        let overflow = STAT.replace(" 1234 56 ", " 18446744073709551615 18446744073709551615 ");
        assert_eq!(parse_stat(&overflow), None, "the sum overflows");
        assert_eq!(parse_stat(&"(".repeat(10_000)), None);
    }

    proptest::proptest! {
        #[test]
        fn parsing_any_text_never_panics(text in "\\PC{0,400}") {
            let _ = parse_stat(&text);
            let _ = parse_statm_resident(&text);
        }

        #[test]
        fn a_stat_line_with_any_name_gives_its_times(
            name in "[^\n]{0,64}",
            utime in 0u64..u64::MAX / 2,
            stime in 0u64..u64::MAX / 2,
            start in proptest::num::u64::ANY,
        ) {
            let line = format!(
                "7 ({name}) R 1 7 7 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0 1 0 {start} 0 0\n"
            );
            proptest::prop_assert_eq!(
                parse_stat(&line),
                Some(CpuTimes { start, busy: utime + stime })
            );
        }
    }

    #[test]
    fn statm_gives_the_resident_pages() {
        assert_eq!(
            parse_statm_resident("1061223 52431 9013 1 0 143223 0\n"),
            Some(52_431)
        );
        assert_eq!(parse_statm_resident("1061223\n"), None);
        assert_eq!(parse_statm_resident("a b c"), None);
        assert_eq!(parse_statm_resident(""), None);
    }

    #[test]
    fn cpu_percent_is_busy_ticks_over_wall_time() {
        let before = CpuTimes {
            start: 7,
            busy: 100,
        };
        let after = |busy| CpuTimes { start: 7, busy };
        let second = Duration::from_secs(1);
        // 50 ticks of 10 ms in a second: half a CPU.
        assert_eq!(cpu_percent(before, after(150), second, 100), Some(50.0));
        // Four busy threads for 2 s: 400 %.
        assert_eq!(
            cpu_percent(before, after(900), 2 * second, 100),
            Some(400.0)
        );
        assert_eq!(cpu_percent(before, after(100), second, 100), Some(0.0));
        // 1 tick in 3 s: 0.333… rounds to 0.3.
        assert_eq!(cpu_percent(before, after(101), 3 * second, 100), Some(0.3));
    }

    #[test]
    fn cpu_percent_is_unknown_for_a_reused_pid_a_clock_going_back_or_no_time() {
        let before = CpuTimes {
            start: 7,
            busy: 100,
        };
        let second = Duration::from_secs(1);
        let reused = CpuTimes {
            start: 8,
            busy: 150,
        };
        assert_eq!(cpu_percent(before, reused, second, 100), None);
        let back = CpuTimes { start: 7, busy: 99 };
        assert_eq!(cpu_percent(before, back, second, 100), None);
        assert_eq!(cpu_percent(before, before, Duration::ZERO, 100), None);
        assert_eq!(
            cpu_percent(before, before, Duration::from_millis(9), 100),
            None,
            "under a tick apart"
        );
        assert_eq!(cpu_percent(before, before, second, 0), None);
    }

    #[test]
    fn own_process_has_no_cpu_at_first_then_a_figure_and_resident_memory() {
        let pid = std::process::id();
        let pids = BTreeSet::from([pid]);
        let mut host = HostSampler::new();
        let t0 = Instant::now();
        let first = host.sample(&pids, t0)[&pid];
        assert_eq!(first.cpu_percent, None, "one reading has no interval");
        assert!(first.host_memory.is_some_and(|b| b > 0), "{first:?}");
        let second = host.sample(&pids, t0 + Duration::from_secs(1))[&pid];
        assert!(second.cpu_percent.is_some_and(|c| c >= 0.0), "{second:?}");
    }

    #[test]
    fn a_pid_that_does_not_exist_gives_nothing_and_is_not_kept() {
        // Linux pids never exceed 2^22 (PID_MAX_LIMIT), so this one is free.
        let pid = u32::MAX - 1;
        let mut host = HostSampler::new();
        let figures = host.sample(&BTreeSet::from([pid]), Instant::now());
        assert_eq!(figures[&pid], HostUsage::default());
        assert!(host.last.is_empty());
    }

    #[test]
    fn a_pid_no_longer_listed_is_forgotten() {
        let pid = std::process::id();
        let mut host = HostSampler::new();
        let now = Instant::now();
        host.sample(&BTreeSet::from([pid]), now);
        assert!(host.last.contains_key(&pid));
        host.sample(&BTreeSet::new(), now);
        assert!(host.last.is_empty());
    }
}
