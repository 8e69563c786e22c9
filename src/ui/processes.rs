//! The processes pane: every GPU process (children under their parents in
//! tree view), the allocator figures of every process whose allocator is
//! visible, and per GPU the driver-used memory no listed process accounts
//! for. The selected GPU's lines are marked; selecting a GPU scrolls the
//! list to them (`app::update`). The title says the sort column and its
//! direction (`by memory ▼`; in the tree `families by memory ▼`), the
//! header puts the arrow beside the sorted column's name; while the pane
//! has the focus the selected line is highlighted (the one `K` signals).
//! A process tagged for `K` (Space) has a mark before its pid (`●`; `*`
//! in ASCII), and the title counts them ("2 tagged").
//! The signal prompt is drawn over the screen by [`render_signal_prompt`].

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Widget;

use super::chrome::{self, left, right};
use super::format::{self, NA};
use super::theme::Theme;
use crate::app::keymap::{TypingKey, TypingMode};
use crate::app::process_list::{Signal, SignalPrompt, SortColumn};
use crate::app::state::{AppState, GpuState, OWN_CONTEXT_MARK, Pane, ProcessFilter, ProcessLine};
use crate::device::ProcessUsage;

/// The processes pane of one frame.
pub struct ProcessesPane<'a> {
    state: &'a AppState,
    theme: &'a Theme,
}

impl<'a> ProcessesPane<'a> {
    pub fn new(state: &'a AppState, theme: &'a Theme) -> Self {
        ProcessesPane { state, theme }
    }

    /// Rows this pane would like: title, header and one per table row.
    pub fn preferred_height(state: &AppState) -> u16 {
        let rows = state.process_lines().len().max(1);
        u16::try_from(rows).unwrap_or(u16::MAX).saturating_add(2)
    }

    /// "allocated/reserved" of the allocator owned by `pid` on `gpu`, if
    /// that allocator is visible: the one the breakdown shows, else any
    /// other seen in the sample (another trainer or probe on the GPU).
    fn allocator_of(&self, pid: u32, gpu: u32) -> Option<String> {
        self.state
            .gpus
            .iter()
            .filter(|g| g.index() == gpu)
            .filter_map(|g| g.allocator.as_ref())
            .find(|a| a.pid == Some(pid))
            .map(|a| (a.known_allocated(), a.known_reserved()))
            .or_else(|| self.state.allocator_figures.get(&(gpu, pid)).copied())
            .map(|(allocated, reserved)| format::bytes_pair(allocated, reserved))
    }
}

impl Widget for ProcessesPane<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let theme = self.theme;
        let g = theme.glyphs();
        let ui = &self.state.ui;
        let sort = ui.process_sort;
        let arrow = if sort.descending {
            g.sort_descending
        } else {
            g.sort_ascending
        };
        // In the tree a family (a process and its children's lines) goes
        // by what it holds in all: the title says so, as the rows are not
        // ranked one by one then.
        let families = if ui.process_tree && sort.column == SortColumn::Memory {
            "families "
        } else {
            ""
        };
        let mut detail = vec![
            Span::styled(if ui.process_tree { "tree" } else { "flat" }, theme.text),
            Span::styled(
                format!(" · {families}by {} {arrow}", sort.column.title()),
                theme.text,
            ),
        ];
        match &ui.process_filter {
            ProcessFilter::Editing(text) => {
                detail.push(Span::styled(" · filter: ", theme.text));
                detail.push(Span::styled(text.clone(), theme.key));
                detail.push(Span::styled(g.cursor, theme.key));
            }
            ProcessFilter::Set(text) if !text.is_empty() => {
                detail.push(Span::styled(format!(" · filter: {text}"), theme.text));
            }
            ProcessFilter::Set(_) => {}
        }
        // Tagged processes may be filtered out of sight: the count says
        // how many `K` would signal.
        let tagged = ui.process_tags.len();
        if tagged > 0 {
            detail.push(Span::styled(format!(" · {tagged} tagged"), theme.key));
        }
        let rows = self.state.process_lines();
        let block = |detail| {
            chrome::pane_block_within(
                Pane::Processes,
                detail,
                ui.focus == Pane::Processes,
                false,
                theme,
                usize::from(area.width),
            )
        };
        // Below the header, the rows shown; the title says which when some
        // are out of sight (Tab here, then the arrows scroll).
        let visible = usize::from(block(detail.clone()).inner(area).height.saturating_sub(1));
        ui.process_lines_shown.set(visible);
        let first = self.state.process_view_first(&rows, visible);
        // Highlighted only while the keys act on it.
        let selected_line = self
            .state
            .selected_process_index(&rows)
            .filter(|_| ui.focus == Pane::Processes);
        // The selected GPU's lines are marked where lines of several GPUs
        // are listed (with one, every line would be); a selected GPU with
        // none is said in the title, so an unmarked list is not read as
        // its processes.
        let selected = self.state.selected().map(GpuState::physical_index);
        let several = rows
            .iter()
            .any(|r| Some(r.gpu()) != rows.first().map(ProcessLine::gpu));
        let mark = selected.filter(|_| several);
        if let Some(gpu) = selected
            && !rows.is_empty()
            && self.state.gpus.len() > 1
            && !rows.iter().any(|r| r.gpu() == gpu)
        {
            detail.push(Span::styled(format!(" · none on GPU {gpu}"), theme.text));
        }
        if visible > 0 && rows.len() > visible {
            let last = (first + visible).min(rows.len());
            detail.push(Span::styled(
                format!(" · rows {}–{last} of {}", first + 1, rows.len()),
                theme.text,
            ));
        }
        let Some(inner) = chrome::inside(block(detail), area, buf, theme) else {
            return;
        };
        if rows.is_empty() {
            let filter = ui.process_filter.text();
            let text = if filter.is_empty() {
                "no GPU processes".to_string()
            } else {
                format!("no process matches \"{filter}\"")
            };
            chrome::line_at(buf, inner, 0, &Line::styled(text, theme.dim));
            theme.finish(area, buf);
            return;
        }

        let width = usize::from(inner.width);
        // With tags the pid column takes a cell more, for the mark before
        // a 7-digit pid (pid_max goes to 4194304).
        let tag_w = usize::from(tagged > 0);
        let pid_w = 7 + tag_w;
        let gpu_w = 3;
        let mem_w = 9;
        let alloc_w = Optional::Alloc.width();
        let user_w = Optional::User.width();
        let (sm_w, cpu_w, host_w) = (
            Optional::Sm.width(),
            Optional::Cpu.width(),
            Optional::HostMemory.width(),
        );
        // Where no process has a usage figure (the simulated GPUs: their
        // pids are made up) its columns would be dashes only: they show
        // when sorted by, so `s` still says what it sorts by.
        let measured = rows.iter().any(|r| match r {
            ProcessLine::Process(r) => r.process.usage != ProcessUsage::default(),
            _ => false,
        });
        let shown = optional_columns(width.saturating_sub(tag_w), sort.column, measured);
        let show_alloc = shown.contains(&Optional::Alloc);
        let show_user = shown.contains(&Optional::User);
        let show_sm = shown.contains(&Optional::Sm);
        let show_cpu = shown.contains(&Optional::Cpu);
        let show_host = shown.contains(&Optional::HostMemory);
        // The cells of the columns after MEMORY, which a line that is no
        // process leaves blank.
        let after_memory: usize = shown
            .iter()
            .filter(|&&c| c != Optional::User)
            .map(|c| c.width() + 1)
            .sum();
        // The sorted column's name carries the title's arrow, on the side
        // of its padding: before a right-aligned name, after a left one.
        let named = |column: SortColumn, before: bool| {
            let label = column.label();
            match (sort.column == column, before) {
                (false, _) => label.to_string(),
                (true, true) => format!("{arrow}{label}"),
                (true, false) => format!("{label}{arrow}"),
            }
        };
        let mut header = vec![Span::raw(right(&named(SortColumn::Pid, true), pid_w))];
        if show_user {
            header.push(Span::raw(format!(
                " {}",
                left(&named(SortColumn::User, false), user_w)
            )));
        }
        // GPU fills its 3 cells: its arrow takes the space before it.
        let gpu_lead = if sort.column == SortColumn::Gpu {
            arrow
        } else {
            " "
        };
        header.push(Span::raw(format!("{gpu_lead}{}", right("GPU", gpu_w))));
        header.push(Span::raw(format!(
            " {}",
            right(&named(SortColumn::Memory, true), mem_w)
        )));
        if show_alloc {
            header.push(Span::raw(format!(" {}", right("alloc/res", alloc_w))));
        }
        for (show, column, w) in [
            (show_sm, SortColumn::Sm, sm_w),
            (show_cpu, SortColumn::Cpu, cpu_w),
            (show_host, SortColumn::HostMemory, host_w),
        ] {
            if show {
                header.push(Span::raw(format!(" {}", right(&named(column, true), w))));
            }
        }
        header.push(Span::raw(format!(" {}", named(SortColumn::Command, false))));
        chrome::line_at(buf, inner, 0, &Line::from(header).style(theme.header));

        let attached = self.state.probes.attached_pids();
        // A child with a sibling below it gets `├`, the last one `└`.
        let more_siblings = more_siblings_below(&rows);
        // Scrolling never leaves the last page half empty (`first` above).
        for (i, row) in rows.iter().skip(first).take(visible).enumerate() {
            let y = u16::try_from(i + 1).unwrap_or(u16::MAX);
            let mut spans = Vec::new();
            match row {
                ProcessLine::Process(r) => {
                    let p = &r.process;
                    if ui.is_tagged(p) {
                        // The mark right before the pid, as the GPU
                        // column's pointer before its number.
                        let pid = p.pid.to_string();
                        let lead = pid_w.saturating_sub(pid.chars().count() + 1);
                        spans.push(Span::raw(" ".repeat(lead)));
                        spans.push(Span::styled(g.tag, theme.key));
                        spans.push(Span::styled(pid, theme.key));
                    } else {
                        spans.push(Span::raw(right(&p.pid.to_string(), pid_w)));
                    }
                    if show_user {
                        let user = p.user.as_deref().unwrap_or(NA);
                        spans.push(Span::raw(format!(" {}", left(user, user_w))));
                    }
                    spans.extend(gpu_cell(r.gpu, mark == Some(r.gpu), gpu_w, theme));
                    let mem = format::opt_bytes(p.used_memory);
                    let mem_style = if p.used_memory.is_some() {
                        theme.text
                    } else {
                        theme.dim
                    };
                    spans.push(Span::styled(format!(" {}", right(&mem, mem_w)), mem_style));
                    if show_alloc {
                        let a = self.allocator_of(p.pid, r.gpu).unwrap_or_default();
                        spans.push(Span::styled(
                            format!(" {}", right(&a, alloc_w)),
                            theme.allocated,
                        ));
                    }
                    let usage = &p.usage;
                    for (show, figure, w) in [
                        (show_sm, usage.sm_percent.map(|v| v.to_string()), sm_w),
                        (show_cpu, usage.cpu_percent.map(format::cpu_percent), cpu_w),
                        (show_host, usage.host_memory.map(format::bytes), host_w),
                    ] {
                        if show {
                            // "-": not measured (a simulated process, the
                            // first sample, a driver that cannot say).
                            let style = if figure.is_some() {
                                theme.text
                            } else {
                                theme.dim
                            };
                            let text = figure.unwrap_or_else(|| format::NOT_MEASURED.to_string());
                            spans.push(Span::styled(format!(" {}", right(&text, w)), style));
                        }
                    }
                    spans.push(Span::raw(" "));
                    if r.depth > 0 {
                        let branch = if more_siblings.get(first + i).copied().unwrap_or(false) {
                            g.branch_more
                        } else {
                            g.branch
                        };
                        spans.push(Span::styled(
                            format!("{}{branch}", "  ".repeat(r.depth - 1)),
                            theme.dim,
                        ));
                    }
                    if r.own_context_in_child {
                        spans.push(Span::styled(format!("{OWN_CONTEXT_MARK} "), theme.warning));
                    }
                    // A live probe reports this process's real allocator,
                    // and its OOMs: one from before the dashboard connected
                    // is on no timeline and no status line.
                    if attached.contains(&p.pid) {
                        let probes = &self.state.probes;
                        let mut tag = match probes.rank_of(p.pid) {
                            Some(rank) => format!("[probe {rank}"),
                            None => "[probe".to_string(),
                        };
                        let ooms = probes.ooms_of(p.pid);
                        let style = if ooms > 0 {
                            tag.push_str(&format!(
                                " · {ooms} {}",
                                if ooms == 1 { "OOM" } else { "OOMs" }
                            ));
                            theme.warning
                        } else {
                            theme.key
                        };
                        tag.push_str("] ");
                        spans.push(Span::styled(tag, style));
                    }
                    let command = p.command.as_deref().unwrap_or(NA);
                    let used: usize = spans.iter().map(Span::width).sum();
                    let room = width.saturating_sub(used);
                    spans.push(Span::raw(format::truncate(command, room)));
                }
                ProcessLine::Unlisted { gpu } => {
                    spans.push(Span::styled(right("-", pid_w), theme.dim));
                    if show_user {
                        spans.push(Span::styled(format!(" {}", left("-", user_w)), theme.dim));
                    }
                    spans.extend(gpu_cell(*gpu, mark == Some(*gpu), gpu_w, theme));
                    spans.push(Span::styled(format!(" {}", right(NA, mem_w)), theme.dim));
                    spans.push(Span::raw(" ".repeat(after_memory)));
                    let used: usize = spans.iter().map(Span::width).sum();
                    let room = width.saturating_sub(used);
                    // The longest wording that fits, cut only where none does.
                    let note = [format::PROCESSES_NA, format::PROCESSES_NA_SHORT]
                        .into_iter()
                        .map(|n| format!(" {n}"))
                        .find(|n| n.chars().count() <= room)
                        .unwrap_or_else(|| format!(" {}", format::PROCESSES_NA_SHORT));
                    spans.push(Span::styled(format::truncate(&note, room), theme.dim));
                }
                ProcessLine::Unattributed { gpu, bytes } => {
                    spans.push(Span::styled(right("-", pid_w), theme.dim));
                    if show_user {
                        spans.push(Span::styled(format!(" {}", left("-", user_w)), theme.dim));
                    }
                    spans.extend(gpu_cell(*gpu, mark == Some(*gpu), gpu_w, theme));
                    spans.push(Span::raw(format!(
                        " {}",
                        right(&format::bytes(*bytes), mem_w)
                    )));
                    spans.push(Span::raw(" ".repeat(after_memory)));
                    let used: usize = spans.iter().map(Span::width).sum();
                    spans.push(Span::styled(
                        format::truncate(
                            " unattributed (no listed process holds it: other \
                             containers, zombies, the driver)",
                            width.saturating_sub(used),
                        ),
                        theme.dim,
                    ));
                }
            }
            // Long commands are cut at the pane's edge by the line itself.
            let mut line = Line::from(spans);
            if selected_line == Some(first + i) {
                // Padded to the pane's width: the highlight is a bar.
                let used = line.width();
                if used < width {
                    line.push_span(Span::raw(" ".repeat(width - used)));
                }
                line = line.patch_style(theme.selected);
            }
            chrome::line_at(buf, inner, y, &line);
        }
        theme.finish(area, buf);
    }
}

/// A column the pane shows where the width allows (each after a space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Optional {
    /// The allocator's allocated/reserved.
    Alloc,
    User,
    Sm,
    Cpu,
    HostMemory,
}

impl Optional {
    /// Most important first; a narrow pane drops them from the end.
    /// alloc/res are the allocator's figures vramtop is for; USER answers
    /// a shared GPU's first question, whose it is; %SM says whether a
    /// process holding memory computes at all (an idle one is memory to
    /// reclaim); %CPU finds a process the host holds back (a starved data
    /// loader); host memory is the least about the GPU.
    const BY_IMPORTANCE: [Optional; 5] = [
        Optional::Alloc,
        Optional::User,
        Optional::Sm,
        Optional::Cpu,
        Optional::HostMemory,
    ];

    /// Cells, without the leading space: each fits its header with the
    /// sort arrow ("▼HOST-MEM") and its widest figure ("100.0", "1.04
    /// GiB").
    fn width(self) -> usize {
        match self {
            Optional::Alloc => 13,
            Optional::User => 8,
            Optional::Sm => 4,
            Optional::Cpu => 5,
            Optional::HostMemory => 9,
        }
    }

    /// What a process uses besides GPU memory (`GpuProcess::usage`).
    fn is_usage(self) -> bool {
        matches!(self, Optional::Sm | Optional::Cpu | Optional::HostMemory)
    }

    /// The column the list is sorted by, when it is this one.
    fn sorts(self, column: SortColumn) -> bool {
        matches!(
            (self, column),
            (Optional::User, SortColumn::User)
                | (Optional::Sm, SortColumn::Sm)
                | (Optional::Cpu, SortColumn::Cpu)
                | (Optional::HostMemory, SortColumn::HostMemory)
        )
    }
}

/// Cells PID, GPU and MEMORY take with their spaces, and the space before
/// COMMAND.
const FIXED_CELLS: usize = 7 + 1 + 3 + 1 + 9 + 1;
/// The fewest cells a command keeps: the optional columns go first.
const MIN_COMMAND_CELLS: usize = 20;

/// For each line: whether it is a child with a sibling further down (a
/// line of the same depth before any line of its parent's depth or
/// less, or a line that is no process), so that its branch is `├`, not
/// the last child's `└`.
fn more_siblings_below(rows: &[ProcessLine]) -> Vec<bool> {
    let depths: Vec<Option<usize>> = rows
        .iter()
        .map(|l| match l {
            ProcessLine::Process(r) => Some(r.depth),
            _ => None,
        })
        .collect();
    super::format::siblings_below(&depths)
}

/// The optional columns a pane `width` cells wide shows, in their order of
/// importance until one does not fit, the sorted column's first (its
/// figures are what the list is ranked by). At 80 cells all but host
/// memory show, at 86 and more all of them. The usage columns (%SM,
/// %CPU, HOST-MEM) only where some process is `measured` or the list is
/// sorted by them.
fn optional_columns(width: usize, sorted: SortColumn, measured: bool) -> Vec<Optional> {
    let wanted = |c: &Optional| measured || !c.is_usage() || c.sorts(sorted);
    let mut order: Vec<Optional> = Optional::BY_IMPORTANCE
        .iter()
        .copied()
        .filter(|c| c.sorts(sorted))
        .collect();
    order.extend(
        Optional::BY_IMPORTANCE
            .iter()
            .copied()
            .filter(|c| !c.sorts(sorted) && wanted(c)),
    );
    let mut used = FIXED_CELLS + MIN_COMMAND_CELLS;
    let mut shown = Vec::new();
    for column in order {
        used += column.width() + 1;
        if used > width {
            break;
        }
        shown.push(column);
    }
    shown
}

/// The GPU column (a space, then `width` cells) of a line about `gpu`; on
/// a line of the selected GPU, led by the pointer the GPUs pane puts
/// before the selected GPU, in its style.
fn gpu_cell(gpu: u32, selected: bool, width: usize, theme: &Theme) -> Vec<Span<'static>> {
    let index = gpu.to_string();
    if !selected {
        return vec![Span::raw(format!(" {}", right(&index, width)))];
    }
    // The pointer takes the column's leading space's place: just before
    // the number, which stays right-aligned with the others.
    let lead = " ".repeat(width.saturating_sub(index.chars().count()));
    vec![
        Span::raw(lead),
        Span::styled(theme.glyphs().pointer, theme.key),
        Span::styled(index, theme.selected),
    ]
}

/// The pid of a PID namespace's init.
const INIT_PID: u32 = 1;

/// The prompt that confirms a signal (`K`), centred over `area`: what it
/// sends and to whom (pid, command, GPU memory; for several tagged
/// processes their count, pids and memory together), and the keys that
/// send it or another signal (SIGKILL, SIGINT), or cancel, named from the
/// prompt's table.
pub fn render_signal_prompt(area: Rect, buf: &mut Buffer, prompt: &SignalPrompt, theme: &Theme) {
    let area = area.intersection(buf.area);
    if area.width < 20 || area.height < 4 {
        return;
    }
    let Some(first) = prompt.targets.first() else {
        return;
    };
    let several = prompt.targets.len() > 1;
    let key = |k| TypingMode::SignalPrompt.key_name(k).unwrap_or("?");
    let (term, kill, int, cancel) = (
        key(TypingKey::SendTerm),
        key(TypingKey::SendKill),
        key(TypingKey::SendInt),
        key(TypingKey::Cancel),
    );
    let memory = prompt
        .used_memory()
        .map(|b| format!(" ({})", format::bytes(b)))
        .unwrap_or_default();
    let head = if several {
        format!(
            "Send {} to {} processes: ",
            Signal::Term.name(),
            prompt.targets.len()
        )
    } else {
        format!("Send {} to {} ", Signal::Term.name(), first.pid)
    };
    let tail = format!("{memory}? {term}/{cancel}");
    let keys = Line::from(vec![
        Span::styled(term, theme.key),
        Span::styled(format!(" {}  ", Signal::Term.name()), theme.text),
        Span::styled(kill, theme.key),
        Span::styled(format!(" {}  ", Signal::Kill.name()), theme.text),
        Span::styled(int, theme.key),
        Span::styled(format!(" {}  ", Signal::Int.name()), theme.text),
        Span::styled(cancel, theme.key),
        Span::styled(" cancel (any other key too)", theme.text),
    ]);
    // What gives way to the width: the command, or the list of pids.
    let whom_all = if several {
        prompt.pids_within(usize::MAX)
    } else {
        first.name().to_string()
    };
    let wanted = head.chars().count() + whom_all.chars().count() + tail.chars().count();
    let width = (wanted.max(keys.width()) + 4).min(usize::from(area.width));
    let inner_w = width.saturating_sub(4);
    // Pids (or the pid), memory and keys always show.
    let room = inner_w.saturating_sub(head.chars().count() + tail.chars().count());
    let whom = if several {
        prompt.pids_within(room)
    } else {
        format::truncate(first.name(), room.max(1))
    };
    let question = Line::from(vec![
        Span::styled(head, theme.text),
        Span::styled(whom, theme.key),
        Span::styled(tail, theme.text),
    ]);
    let title = if prompt.is_tagged() {
        let signalled = prompt.targets.len();
        let of = if signalled < prompt.tagged {
            format!("{signalled} of {} tagged", prompt.tagged)
        } else if signalled == 1 {
            "the tagged process".to_string()
        } else {
            format!("{signalled} tagged processes")
        };
        format!(" Signal {of} on {} ", prompt.gpus_named())
    } else if first.pid == INIT_PID {
        // The init of vramtop's PID namespace (a container's main
        // process, or the machine's): the kernel drops a SIGKILL sent to
        // it from inside, and ending it ends every process under it.
        format!(" pid {INIT_PID} is init: ending it ends all in its namespace ")
    } else {
        format!(" Signal a process on {} ", prompt.gpus_named())
    };
    let width = u16::try_from(width).unwrap_or(area.width);
    let (_, inner) = chrome::popup(buf, area, (width, 4), &title, "", 2, theme);
    let inner = Rect {
        x: inner.x.saturating_add(1),
        width: inner.width.saturating_sub(2),
        ..inner
    };
    chrome::line_at(buf, inner, 0, &question);
    chrome::line_at(buf, inner, 1, &keys);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_with_a_sibling_below_is_drawn_as_a_middle_branch_and_the_last_as_the_end() {
        let line = |pid: u32, depth: usize| {
            ProcessLine::Process(crate::app::state::ProcessRow {
                gpu: 0,
                process: crate::device::GpuProcess::new(pid, None),
                depth,
                own_context_in_child: depth > 0,
            })
        };
        // A parent with two workers, the first with a child of its own,
        // then another root with one worker, then a line that is no
        // process, then an orphaned depth-1 line.
        let rows = vec![
            line(1, 0),
            line(2, 1),
            line(3, 2),
            line(4, 1),
            line(5, 0),
            line(6, 1),
            ProcessLine::Unattributed { gpu: 0, bytes: 1 },
            line(7, 1),
        ];
        assert_eq!(
            more_siblings_below(&rows),
            [false, true, false, false, false, false, false, false]
        );
    }

    #[test]
    fn narrow_panes_drop_host_memory_then_cpu_then_sm_then_user_then_alloc() {
        use Optional::*;
        let at = |width| optional_columns(width, SortColumn::Memory, true);
        assert_eq!(at(120), [Alloc, User, Sm, Cpu, HostMemory]);
        assert_eq!(at(86), [Alloc, User, Sm, Cpu, HostMemory]);
        assert_eq!(at(85), [Alloc, User, Sm, Cpu]);
        assert_eq!(at(80), [Alloc, User, Sm, Cpu]);
        assert_eq!(at(75), [Alloc, User, Sm]);
        assert_eq!(at(69), [Alloc, User]);
        assert_eq!(at(64), [Alloc]);
        assert_eq!(at(55), []);
        assert_eq!(at(0), []);
    }

    #[test]
    fn the_sorted_column_is_shown_before_the_others() {
        use Optional::*;
        assert_eq!(
            optional_columns(80, SortColumn::HostMemory, true),
            [HostMemory, Alloc, User, Sm]
        );
        assert_eq!(optional_columns(70, SortColumn::Cpu, true), [Cpu, Alloc]);
        assert_eq!(optional_columns(120, SortColumn::Sm, true).len(), 5);
    }

    #[test]
    fn usage_columns_no_process_has_show_only_while_sorted_by() {
        use Optional::*;
        assert_eq!(
            optional_columns(120, SortColumn::Memory, false),
            [Alloc, User]
        );
        assert_eq!(
            optional_columns(120, SortColumn::Cpu, false),
            [Cpu, Alloc, User]
        );
    }
}
