//! The processes pane's order, selection and signals as data: which column
//! the list is sorted by, which line is selected (by what it is about, not
//! by its row, so a re-sort or a sample keeps it on the same process), and
//! the confirmation a signal waits for. The update acts on these
//! (`app::update`), the pane draws them (`ui::processes`), the shell sends
//! the signal (`shell::dashboard`).

use std::cmp::Ordering;

use serde::Serialize;

use crate::device::GpuProcess;

/// A column the process list can be sorted by, in the order the sort key
/// steps through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum SortColumn {
    /// GPU memory the driver attributes to the process (bytes).
    Memory,
    /// The process's share of the GPU's SMs (percent).
    Sm,
    /// The process's share of a host CPU since the last sample (percent).
    Cpu,
    /// Host memory resident (bytes).
    HostMemory,
    Pid,
    User,
    /// The GPU's NVML index.
    Gpu,
    Command,
}

impl SortColumn {
    /// Every column, in the order the sort key steps through them: what a
    /// process uses first (GPU memory, then the GPU's SMs, a CPU and host
    /// memory: the figures a busy machine is ranked by), then who and
    /// where it is.
    pub const ALL: [SortColumn; 8] = [
        SortColumn::Memory,
        SortColumn::Sm,
        SortColumn::Cpu,
        SortColumn::HostMemory,
        SortColumn::Pid,
        SortColumn::User,
        SortColumn::Gpu,
        SortColumn::Command,
    ];

    /// The column after this one (after the last, the first).
    pub fn next(self) -> SortColumn {
        let i = Self::ALL.iter().position(|&c| c == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    /// Whether the column starts largest first when the key steps to it:
    /// the figures a process uses do (who holds or uses the most is what
    /// a crowded GPU is read for), the others read as a list does, from
    /// the smallest.
    pub fn descending_by_default(self) -> bool {
        matches!(
            self,
            SortColumn::Memory | SortColumn::Sm | SortColumn::Cpu | SortColumn::HostMemory
        )
    }

    /// The column's name in the pane's header.
    pub fn label(self) -> &'static str {
        match self {
            SortColumn::Memory => "MEMORY",
            SortColumn::Sm => "%SM",
            SortColumn::Cpu => "%CPU",
            SortColumn::HostMemory => "HOST-MEM",
            SortColumn::Pid => "PID",
            SortColumn::User => "USER",
            SortColumn::Gpu => "GPU",
            SortColumn::Command => "COMMAND",
        }
    }

    /// The column in the pane's title ("by memory ▼", "by %SM ▼").
    pub fn title(self) -> &'static str {
        match self {
            SortColumn::Memory => "memory",
            SortColumn::Sm => "%SM",
            SortColumn::Cpu => "%CPU",
            SortColumn::HostMemory => "host memory",
            SortColumn::Pid => "pid",
            SortColumn::User => "user",
            SortColumn::Gpu => "gpu",
            SortColumn::Command => "command",
        }
    }
}

/// How the process list is sorted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ProcessSort {
    pub column: SortColumn,
    /// Largest (or last in order) first.
    pub descending: bool,
}

impl Default for ProcessSort {
    /// GPU memory, largest first.
    fn default() -> Self {
        ProcessSort {
            column: SortColumn::Memory,
            descending: true,
        }
    }
}

impl ProcessSort {
    /// The next column, in its own first direction.
    pub fn next_column(self) -> ProcessSort {
        let column = self.column.next();
        ProcessSort {
            column,
            descending: column.descending_by_default(),
        }
    }

    /// The same column the other way.
    pub fn reversed(self) -> ProcessSort {
        ProcessSort {
            descending: !self.descending,
            ..self
        }
    }

    /// The order of two processes (each with its GPU's index): by the
    /// column in the sort's direction; a value not known (no memory
    /// figure, no user or command readable in /proc) last either way, so
    /// reversing does not put the unknowns on top; ties by GPU, then pid,
    /// ascending, so equal rows keep one order from sample to sample.
    pub fn compare(self, (ga, a): (u32, &GpuProcess), (gb, b): (u32, &GpuProcess)) -> Ordering {
        self.compare_families((ga, a, a.used_memory), (gb, b, b.used_memory))
    }

    /// [`ProcessSort::compare`] with each process's memory given: in the
    /// tree, a family's (the process and its descendants' lines on that
    /// GPU, bytes), so the family holding the most comes first.
    pub fn compare_families(
        self,
        (ga, a, ma): (u32, &GpuProcess, Option<u64>),
        (gb, b, mb): (u32, &GpuProcess, Option<u64>),
    ) -> Ordering {
        let by_column = match self.column {
            SortColumn::Memory => known_last(ma, mb, self.descending),
            SortColumn::Sm => known_last(a.usage.sm_percent, b.usage.sm_percent, self.descending),
            SortColumn::Cpu => known_last_by(
                a.usage.cpu_percent,
                b.usage.cpu_percent,
                self.descending,
                f64::total_cmp,
            ),
            SortColumn::HostMemory => {
                known_last(a.usage.host_memory, b.usage.host_memory, self.descending)
            }
            SortColumn::Pid => directed(a.pid.cmp(&b.pid), self.descending),
            SortColumn::User => known_last(a.user.as_deref(), b.user.as_deref(), self.descending),
            SortColumn::Gpu => directed(ga.cmp(&gb), self.descending),
            SortColumn::Command => known_last(
                a.command.as_deref().map(str::to_lowercase),
                b.command.as_deref().map(str::to_lowercase),
                self.descending,
            ),
        };
        by_column.then(ga.cmp(&gb)).then(a.pid.cmp(&b.pid))
    }
}

fn directed(order: Ordering, descending: bool) -> Ordering {
    if descending { order.reverse() } else { order }
}

/// Known values in the direction asked, unknown ones after them.
fn known_last<T: Ord>(a: Option<T>, b: Option<T>, descending: bool) -> Ordering {
    known_last_by(a, b, descending, |a, b| a.cmp(b))
}

/// [`known_last`] with the values ordered by `cmp`.
fn known_last_by<T>(
    a: Option<T>,
    b: Option<T>,
    descending: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => directed(cmp(&a, &b), descending),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// What a line of the processes pane is about: the selection is kept as
/// this, so it stays on its process when the list is re-sorted or a
/// sample reorders it (a process on two GPUs is two lines, one per GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum LineKey {
    Process { gpu: u32, pid: u32 },
    Unattributed { gpu: u32 },
    Unlisted { gpu: u32 },
}

/// The signal a confirmed prompt sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Signal {
    /// Asks the process to end (it may clean up: a trainer can save).
    Term,
    /// Ends it at once.
    Kill,
    /// Interrupts it, as Ctrl-C in its terminal would: Python raises
    /// KeyboardInterrupt, which a training loop can catch to save.
    Int,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "SIGTERM",
            Signal::Kill => "SIGKILL",
            Signal::Int => "SIGINT",
        }
    }
}

/// The process a signal prompt is about, as the list showed it when the
/// key was pressed: the prompt names it, and the shell sends nothing if
/// the pid runs something else by then (the process ended and its pid
/// was reused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignalTarget {
    pub pid: u32,
    /// Every GPU the driver lists the pid on, ascending: the signal ends
    /// it on all of them.
    pub gpus: Vec<u32>,
    /// The command line from /proc: what the shell checks the pid still
    /// runs before sending.
    pub command: String,
    /// The process's words as its Processes line shows them, where they
    /// are not /proc's (a probe names its script, not the interpreter's
    /// path): what the prompt and the outcome name it by.
    pub shown: Option<String>,
    /// GPU memory the driver attributed to it on those GPUs together
    /// (bytes; the figures known, `None` where none is).
    pub used_memory: Option<u64>,
}

impl SignalTarget {
    /// What the prompt and the outcome call it: its line's words.
    pub fn name(&self) -> &str {
        self.shown.as_deref().unwrap_or(&self.command)
    }

    /// The GPUs it is listed on, in words (see [`gpus_in_words`]).
    pub fn gpus_named(&self) -> String {
        gpus_in_words(&self.gpus)
    }
}

/// GPU numbers in words: "GPU 3", "GPUs 0–3", "GPUs 0, 2, 5–7" (runs of
/// three or more as a range; order and repeats do not matter).
pub fn gpus_in_words(gpus: &[u32]) -> String {
    let mut gpus = gpus.to_vec();
    gpus.sort_unstable();
    gpus.dedup();
    let mut runs: Vec<(u32, u32)> = Vec::new();
    for g in gpus {
        match runs.last_mut() {
            Some((_, last)) if last.checked_add(1) == Some(g) => *last = g,
            _ => runs.push((g, g)),
        }
    }
    let parts: Vec<String> = runs
        .iter()
        .flat_map(|&(a, b)| match b - a {
            0 => vec![a.to_string()],
            1 => vec![a.to_string(), b.to_string()],
            _ => vec![format!("{a}–{b}")],
        })
        .collect();
    let plural = runs.len() > 1 || runs.first().is_some_and(|(a, b)| a != b);
    format!(
        "{} {}",
        if plural { "GPUs" } else { "GPU" },
        parts.join(", ")
    )
}

/// A process tagged in the processes pane (Space), for `K` to signal with
/// the other tagged ones: its pid and the command the list showed for it
/// (from /proc), the identity the shell checks again before it sends. A
/// tag whose pid is listed no more, or runs another command (the process
/// ended and its pid was reused), is dropped ([`ProcessTag::holds`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct ProcessTag {
    pub pid: u32,
    /// `None`: the list showed no command (not in /proc here).
    pub command: Option<String>,
}

impl ProcessTag {
    /// The tag of `process` as the list shows it now.
    pub fn of(process: &GpuProcess) -> Self {
        ProcessTag {
            pid: process.pid,
            command: process.command.clone(),
        }
    }

    /// Whether `process` is the one tagged: its pid, running the command
    /// that was tagged.
    pub fn holds(&self, process: &GpuProcess) -> bool {
        self.pid == process.pid && self.command == process.command
    }
}

/// What a signal prompt asks to signal: the selected process, or the
/// tagged ones `K` was pressed with (those of them a signal may be sent
/// to, in the order they were tagged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SignalPrompt {
    /// Never empty: a prompt with nothing to send is not opened.
    pub targets: Vec<SignalTarget>,
    /// How many processes were tagged when `K` was pressed (0: the prompt
    /// is about the selected process alone); more than `targets` where
    /// some of them cannot be signalled (simulated, vramtop's own).
    pub tagged: usize,
}

impl SignalPrompt {
    /// The prompt about one process, the selected one.
    pub fn one(target: SignalTarget) -> Self {
        SignalPrompt {
            targets: vec![target],
            tagged: 0,
        }
    }

    /// Whether it is about the tagged processes.
    pub fn is_tagged(&self) -> bool {
        self.tagged > 0
    }

    /// Every GPU its processes are listed on, in words (as
    /// [`SignalTarget::gpus_named`]).
    pub fn gpus_named(&self) -> String {
        let gpus: Vec<u32> = self.targets.iter().flat_map(|t| t.gpus.clone()).collect();
        gpus_in_words(&gpus)
    }

    /// GPU memory its processes hold together (bytes; `None` where no
    /// figure is known).
    pub fn used_memory(&self) -> Option<u64> {
        self.targets
            .iter()
            .filter_map(|t| t.used_memory)
            .reduce(u64::saturating_add)
    }

    /// Its pids, comma separated, in at most `room` characters: as many as
    /// fit, then "+N more" for the rest (at least the first pid and the
    /// count of the others, past `room` if need be).
    pub fn pids_within(&self, room: usize) -> String {
        let pids: Vec<String> = self.targets.iter().map(|t| t.pid.to_string()).collect();
        let all = pids.join(", ");
        if all.chars().count() <= room || pids.len() <= 1 {
            return all;
        }
        let mut shown = pids.len() - 1;
        loop {
            let more = format!(", +{} more", pids.len() - shown);
            let text = format!("{}{more}", pids[..shown].join(", "));
            if shown == 1 || text.chars().count() <= room {
                return text;
            }
            shown -= 1;
        }
    }
}

/// What became of a signal the user confirmed, as the shell saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignalOutcome {
    Sent,
    /// EPERM: the process is another user's.
    NotPermitted,
    /// ESRCH, or no such process in /proc any more.
    Gone,
    /// The pid now runs this command, not the one confirmed: nothing sent.
    Changed(String),
    /// Any other failure, in the system's words.
    Failed(String),
}

impl SignalOutcome {
    /// The status line's one line about `signal` sent (or not) to `target`.
    pub fn describe(&self, signal: Signal, target: &SignalTarget) -> String {
        let (pid, name) = (target.pid, signal.name());
        match self {
            SignalOutcome::Sent => format!("sent {name} to {pid} {}", target.name()),
            SignalOutcome::NotPermitted => {
                format!("{name} to {pid}: not yours: permission denied")
            }
            SignalOutcome::Gone => format!("{name} to {pid}: already gone"),
            // The process confirmed ended, and its pid went to another.
            SignalOutcome::Changed(now) => {
                format!("{name} not sent: pid {pid} now runs {now} (pid reused)")
            }
            SignalOutcome::Failed(why) => format!("{name} to {pid} failed: {why}"),
        }
    }
}

/// The status line's one line about `signal` sent (or not) to each of
/// several processes (the tagged ones): how many got it, and of those that
/// did not, which and why (the first few, each as [`SignalOutcome::describe`]
/// says it less the signal's name); one process is said as for one.
pub fn describe_outcomes(signal: Signal, outcomes: &[(SignalTarget, SignalOutcome)]) -> String {
    if let [(target, outcome)] = outcomes {
        return outcome.describe(signal, target);
    }
    let name = signal.name();
    let sent = outcomes
        .iter()
        .filter(|(_, o)| *o == SignalOutcome::Sent)
        .count();
    let mut text = format!("{name} sent to {sent} of {}", outcomes.len());
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|(_, o)| *o != SignalOutcome::Sent)
        .map(|(t, o)| match o {
            SignalOutcome::Sent => String::new(),
            SignalOutcome::NotPermitted => format!("{}: not yours", t.pid),
            SignalOutcome::Gone => format!("{}: already gone", t.pid),
            SignalOutcome::Changed(_) => format!("{}: pid reused, not sent", t.pid),
            SignalOutcome::Failed(why) => format!("{}: {why}", t.pid),
        })
        .collect();
    // The status line wraps a notice: three reasons and a count keep it
    // to a line or two at 80 columns.
    const NAMED: usize = 3;
    if !failed.is_empty() {
        text.push_str(" (");
        text.push_str(&failed[..failed.len().min(NAMED)].join("; "));
        if failed.len() > NAMED {
            text.push_str(&format!("; {} more not sent", failed.len() - NAMED));
        }
        text.push(')');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: u32, mem: Option<u64>, command: Option<&str>) -> GpuProcess {
        GpuProcess {
            command: command.map(str::to_string),
            ..GpuProcess::new(pid, mem)
        }
    }

    #[test]
    fn a_signal_target_names_every_gpu_it_is_listed_on_with_runs_as_ranges() {
        let named = |gpus: &[u32]| {
            SignalTarget {
                pid: 1,
                gpus: gpus.to_vec(),
                command: String::new(),
                shown: None,
                used_memory: None,
            }
            .gpus_named()
        };
        assert_eq!(named(&[3]), "GPU 3");
        assert_eq!(named(&[3, 0, 2, 1]), "GPUs 0–3");
        assert_eq!(named(&[0, 1]), "GPUs 0, 1");
        assert_eq!(named(&[0, 2, 5, 6, 7]), "GPUs 0, 2, 5–7");
        assert_eq!(named(&[4, 4]), "GPU 4");
    }

    #[test]
    fn the_sort_key_steps_through_every_column_and_back_to_memory() {
        let mut sort = ProcessSort::default();
        let mut seen = vec![sort.column];
        for _ in 1..SortColumn::ALL.len() {
            sort = sort.next_column();
            seen.push(sort.column);
        }
        assert_eq!(seen, SortColumn::ALL);
        assert_eq!(sort.next_column(), ProcessSort::default());
        let pid = SortColumn::ALL
            .iter()
            .position(|&c| c == SortColumn::Pid)
            .expect("pid is a column");
        let mut sort = ProcessSort::default();
        for _ in 0..pid {
            sort = sort.next_column();
        }
        assert!(!sort.descending, "pid ascends");
    }

    #[test]
    fn unknown_memory_sorts_last_in_both_directions() {
        let (a, b, c) = (p(1, Some(5), None), p(2, None, None), p(3, Some(9), None));
        for descending in [true, false] {
            let sort = ProcessSort {
                column: SortColumn::Memory,
                descending,
            };
            let mut v = [(0, &a), (0, &b), (0, &c)];
            v.sort_by(|x, y| sort.compare(*x, *y));
            let pids: Vec<u32> = v.iter().map(|(_, p)| p.pid).collect();
            let want = if descending { [3, 1, 2] } else { [1, 3, 2] };
            assert_eq!(pids, want, "descending {descending}");
        }
    }

    #[test]
    fn usage_columns_sort_largest_first_with_the_unknown_last() {
        let with = |pid, sm, cpu, host| {
            let mut p = p(pid, None, None);
            p.usage = crate::device::ProcessUsage {
                sm_percent: sm,
                cpu_percent: cpu,
                host_memory: host,
            };
            p
        };
        let a = with(1, Some(10), Some(150.5), Some(3 << 30));
        let b = with(2, None, None, None);
        let c = with(3, Some(80), Some(2.5), Some(1 << 20));
        let order = |sort: ProcessSort| {
            let mut v = [(0, &a), (0, &b), (0, &c)];
            v.sort_by(|x, y| sort.compare(*x, *y));
            v.iter().map(|(_, p)| p.pid).collect::<Vec<u32>>()
        };
        let mut sort = ProcessSort::default().next_column();
        assert_eq!(sort.column, SortColumn::Sm);
        assert!(sort.descending, "largest first when stepped to");
        assert_eq!(order(sort), [3, 1, 2]);
        assert_eq!(order(sort.reversed()), [1, 3, 2], "unknown still last");
        sort = sort.next_column();
        assert_eq!((sort.column, sort.descending), (SortColumn::Cpu, true));
        assert_eq!(order(sort), [1, 3, 2]);
        sort = sort.next_column();
        assert_eq!(
            (sort.column, sort.descending),
            (SortColumn::HostMemory, true)
        );
        assert_eq!(order(sort), [1, 3, 2]);
        assert_eq!(sort.next_column().column, SortColumn::Pid);
    }

    #[test]
    fn commands_sort_ignoring_case_and_ties_go_by_gpu_then_pid() {
        let (a, b, c) = (
            p(9, None, Some("b")),
            p(4, None, Some("A")),
            p(2, None, Some("b")),
        );
        let sort = ProcessSort {
            column: SortColumn::Command,
            descending: false,
        };
        let mut v = [(1, &a), (0, &b), (1, &c)];
        v.sort_by(|x, y| sort.compare(*x, *y));
        let pids: Vec<u32> = v.iter().map(|(_, p)| p.pid).collect();
        assert_eq!(pids, [4, 2, 9]);
    }

    fn target(pid: u32, gpus: &[u32], used_memory: Option<u64>) -> SignalTarget {
        SignalTarget {
            pid,
            gpus: gpus.to_vec(),
            command: format!("cmd-{pid}"),
            shown: None,
            used_memory,
        }
    }

    #[test]
    fn a_prompt_for_several_names_their_pids_as_fit_and_the_rest_counted() {
        let prompt = SignalPrompt {
            targets: (1..=5).map(|i| target(4_190_000 + i, &[0], None)).collect(),
            tagged: 5,
        };
        let all = "4190001, 4190002, 4190003, 4190004, 4190005";
        assert_eq!(prompt.pids_within(100), all);
        assert_eq!(prompt.pids_within(all.len()), all);
        assert_eq!(prompt.pids_within(30), "4190001, 4190002, +3 more");
        // Never less than the first and a count, even past the room.
        assert_eq!(prompt.pids_within(3), "4190001, +4 more");
        let one = SignalPrompt::one(target(7, &[1], Some(3)));
        assert_eq!(one.pids_within(0), "7");
        assert!(!one.is_tagged());
    }

    #[test]
    fn a_prompt_for_several_sums_their_memory_and_names_all_their_gpus() {
        let prompt = SignalPrompt {
            targets: vec![
                target(1, &[0, 1], Some(2 << 30)),
                target(2, &[3], None),
                target(3, &[2], Some(1 << 30)),
            ],
            tagged: 3,
        };
        assert_eq!(prompt.used_memory(), Some(3 << 30));
        assert_eq!(prompt.gpus_named(), "GPUs 0–3");
        let unknown = SignalPrompt {
            targets: vec![target(2, &[3], None)],
            tagged: 1,
        };
        assert_eq!(unknown.used_memory(), None);
    }

    #[test]
    fn a_tag_holds_its_pid_only_while_it_runs_the_command_tagged() {
        let tag = ProcessTag::of(&p(10, None, Some("python train.py")));
        assert!(tag.holds(&p(10, Some(5), Some("python train.py"))));
        assert!(!tag.holds(&p(10, None, Some("bash"))), "pid reused");
        assert!(!tag.holds(&p(11, None, Some("python train.py"))));
    }

    #[test]
    fn the_outcomes_of_one_signal_read_as_that_of_one() {
        let t = target(10, &[0], None);
        assert_eq!(
            describe_outcomes(Signal::Int, &[(t, SignalOutcome::Sent)]),
            "sent SIGINT to 10 cmd-10"
        );
    }
}
