//! Actions and typed text in, state changes and effects out. Pure: no
//! terminal, no clock, no I/O, so every key flow is testable.

use std::path::PathBuf;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::capture::{CaptureMsg, CaptureTarget, cannot_capture, capture_target};
use super::keymap::{Action, Keymap, PanelKey, TypingKey, TypingMode};
use super::process_detail::ProcessDetail;
use super::process_list::{
    ProcessTag, Signal, SignalOutcome, SignalPrompt, SignalTarget, describe_outcomes,
};
use super::state::{
    AppState, GpuState, MAX_FILTER_CHARS, Overlay, Pane, ProcessLine, STRESS_BESIDE_MAP,
    StressView, UiState, ZOOM_WINDOWS_S, full_filter_message,
};
use super::stress::{KeyUse, StressAction, StressCommand, StressOutcome, StressResult};
use crate::device::GpuProcess;

/// What the event loop must do after an update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Leave the dashboard (restore the terminal).
    Quit,
    /// Redraw: something visible changed.
    Redraw,
    /// Send these commands to the stress worker, then redraw.
    Stress(Vec<StressCommand>),
    /// Ask the probe at `socket` (of `pid`) for a snapshot, then redraw.
    RequestSnapshot { pid: u32, socket: PathBuf },
    /// Write the allocator model of the simulated training process `pid`
    /// as a snapshot, then redraw.
    SaveSimulatedSnapshot { pid: u32 },
    /// Open `path` in the snapshot viewer in this terminal; `at_oom`: at
    /// its OOM, with the allocation sites shown.
    OpenSnapshot { path: PathBuf, at_oom: bool },
    /// Send `signal` to each target's pid (the selected process, or the
    /// tagged ones), which the user confirmed, if it still runs the
    /// target's command; then tell [`on_signal_result`] what became of
    /// each.
    Signal {
        signal: Signal,
        targets: Vec<SignalTarget>,
    },
    /// Nothing changed.
    None,
}

/// Rows a page key moves (the help's words for PgUp/PgDn say it); in the
/// help, before it is drawn, too.
pub const PAGE_ROWS: usize = 10;
/// The furthest the help scrolls (rows): more than its longest content
/// at 80 columns, so the bottom is always reachable.
const MAX_HELP_SCROLL: usize = 200;

/// Handles a key press: while the process filter is being edited, keys go
/// into it; otherwise the keymap decides.
pub fn handle_key(state: &mut AppState, keymap: &Keymap, key: KeyEvent) -> Effect {
    if state.ui.too_small() {
        return quit_only(keymap, key);
    }
    // A notice answers one key: the next key replaces it.
    let had_notice = state.ui.notice.take().is_some();
    let previous_digit = state.ui.gpu_digit.take();
    let mut effect = dispatch_key(state, keymap, key);
    if let (Some(tens), Some(ones)) = (previous_digit, state.ui.gpu_digit) {
        // Two digits one after the other: GPU 10 and up, where listed
        // (the second digit selected GPU `ones` meanwhile).
        let number = u32::from(tens) * 10 + u32::from(ones);
        if tens > 0
            && let Some(i) = state.gpus.iter().position(|g| g.index() == number)
        {
            pick_gpu(state, i);
            state.ui.notice = None;
            state.ui.gpu_digit = None;
            effect = Effect::Redraw;
        }
    }
    if state.ui.notice.is_some() {
        state.ui.notice_ms = state.now_ms;
    }
    if had_notice && effect == Effect::None {
        Effect::Redraw
    } else {
        effect
    }
}

/// A key on a terminal below [`super::state::MIN_SCREEN`], which shows
/// only its size: quit quits, every other key does nothing (it would
/// act unseen: `a a` opened the stress panel and allocated a tensor
/// behind the message).
pub fn quit_only(keymap: &Keymap, key: KeyEvent) -> Effect {
    if keymap.action_for(key) == Some(Action::Quit) {
        Effect::Quit
    } else {
        Effect::None
    }
}

/// Says on the status line why a key did nothing.
fn notice(state: &mut AppState, text: impl Into<String>) -> Effect {
    state.ui.notice = Some(text.into());
    Effect::Redraw
}

fn dispatch_key(state: &mut AppState, keymap: &Keymap, key: KeyEvent) -> Effect {
    // A signal prompt takes every key (Ctrl-C still quits): its own send,
    // any other closes it, sending nothing.
    if state.ui.signal_prompt.is_some() && TypingMode::SignalPrompt.takes(key) {
        return answer_signal_prompt(state, key);
    }
    // The filter takes the keys while it is typed (Ctrl-C still quits).
    if state.ui.process_filter.is_editing() && TypingMode::ProcessFilter.takes(key) {
        let filter = &mut state.ui.process_filter;
        match (TypingMode::ProcessFilter.key_for(key), key.code) {
            (Some(TypingKey::Done | TypingKey::Cancel), _) => filter.close(),
            (Some(TypingKey::Delete), _) => {
                filter.text_mut().pop();
            }
            (Some(TypingKey::Clear), _) => filter.text_mut().clear(),
            (Some(_), _) => return Effect::None,
            (None, KeyCode::Char(c)) if !c.is_control() => {
                // Full, a character is refused aloud: dropped silently,
                // the rest of a pasted filter went missing unseen.
                let text = filter.text_mut();
                if text.chars().count() >= MAX_FILTER_CHARS {
                    return notice(state, full_filter_message());
                }
                text.push(c);
            }
            _ => return Effect::None,
        }
        state.ui.process_scroll = 0;
        return Effect::Redraw;
    }
    // The stress panel's size or settings field takes the keys while it
    // is open (Ctrl-C still quits).
    if state.ui.stress_open && state.stress.editing() && TypingMode::StressField.takes(key) {
        return edit_size(state, key);
    }
    // The scenario list takes the arrows, Enter and Esc while it is open.
    if state.ui.stress_open
        && state.stress.picking()
        && !key.modifiers.contains(KeyModifiers::CONTROL)
    {
        return pick_scenario(state, key);
    }
    // Help and the process detail are modal over the panel too: their
    // keys go through `apply`.
    if state.ui.overlay == Overlay::None && state.ui.process_detail.is_none() {
        if state.ui.stress_open {
            if let Some(k) = keymap.stress_key_for(key) {
                // Behind the segment map nobody sees which tensor is
                // selected: `d` would free one unseen, `j`/`k` move a
                // selection that is not drawn.
                if k.acts_on_tensor_list() && state.ui.stress_view() == StressView::Map {
                    let pressed = keymap.stress_key_label(key).unwrap_or("this key");
                    let back = keymap
                        .stress_key_name(PanelKey::ToggleMap)
                        .map(|m| format!(": {m} returns to it"))
                        .unwrap_or_default();
                    return notice(state, format!("{pressed} acts on the tensor list{back}"));
                }
                return apply_panel_key(state, k);
            }
        } else if keymap.opens_stress(key) {
            return apply_panel_key(state, PanelKey::Open);
        }
    }
    match keymap.action_for(key) {
        Some(action) => apply(state, keymap, action),
        // A key of the snapshot viewer or the stress panel: silent, it
        // read as a key that had not registered (`w` for the sites).
        None => match keymap.bound_elsewhere(key, state.ui.stress_open, state.offers()) {
            Some(text) => notice(state, text),
            None => Effect::None,
        },
    }
}

/// A key in the signal prompt: `y` sends SIGTERM, `9` SIGKILL, `i`
/// SIGINT (as the prompt's table binds them), any other key cancels.
fn answer_signal_prompt(state: &mut AppState, key: KeyEvent) -> Effect {
    let Some(prompt) = state.ui.signal_prompt.take() else {
        return Effect::None;
    };
    let signal = match TypingMode::SignalPrompt.key_for(key) {
        Some(TypingKey::SendTerm) => Signal::Term,
        Some(TypingKey::SendKill) => Signal::Kill,
        Some(TypingKey::SendInt) => Signal::Int,
        _ => {
            let whom = match prompt.targets.as_slice() {
                [one] if !prompt.is_tagged() => one.pid.to_string(),
                [_] => "the tagged process".to_string(),
                all => format!("the {} tagged processes", all.len()),
            };
            return notice(state, format!("cancelled: nothing sent to {whom}"));
        }
    };
    Effect::Signal {
        signal,
        targets: prompt.targets,
    }
}

/// What became of a confirmed signal (the shell's answer to
/// [`Effect::Signal`]: each target with its outcome, in the effect's
/// order), said on the status line.
pub fn on_signal_result(
    state: &mut AppState,
    signal: Signal,
    outcomes: &[(SignalTarget, SignalOutcome)],
) {
    state.ui.notice = Some(describe_outcomes(signal, outcomes));
    state.ui.notice_ms = state.now_ms;
}

/// How the focus gets from pane `from` to pane `to` in the fewest presses
/// of the keys `keymap` binds to the next and previous pane, in the order
/// the focus cycles: "Tab moves there", "Shift-Tab twice moves there".
fn way_to(keymap: &Keymap, from: Pane, to: Pane) -> String {
    let n = Pane::ALL.len();
    let at = |p: Pane| Pane::ALL.iter().position(|&q| q == p).unwrap_or(0);
    let forward = (at(to) + n - at(from)) % n;
    let back = (n - forward) % n;
    let (action, presses) = if forward <= back {
        (Action::FocusNext, forward)
    } else {
        (Action::FocusPrev, back)
    };
    let key = keymap.key_name(action).unwrap_or(match action {
        Action::FocusNext => "Tab",
        _ => "Shift-Tab",
    });
    match presses {
        0 => "the focus is there".to_string(),
        1 => format!("{key} moves there"),
        2 => format!("{key} twice moves there"),
        k => format!("{key} {k} times moves there"),
    }
}

/// `K`: the prompt that confirms a signal to the selected process (to
/// the tagged ones where some are), or why none can be sent (said led by
/// the key as `keymap` names it).
fn ask_to_signal(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::SignalProcess;
    let tagged = state.ui.process_tags.len();
    let what = match tagged {
        0 => "the process selected".to_string(),
        1 => "the process tagged".to_string(),
        n => format!("the {n} processes tagged"),
    };
    if let Some(said) = outside_processes(state, keymap, action, |way| {
        format!("signals {what} in Processes ({way})")
    }) {
        return said;
    }
    if tagged > 0 {
        return ask_to_signal_tagged(state, keymap);
    }
    let lines = state.process_lines();
    let row = match state.selected_process_index(&lines).map(|i| &lines[i]) {
        Some(ProcessLine::Process(row)) => row,
        Some(_) => return key_notice(state, keymap, action, "this line is no process"),
        None => return key_notice(state, keymap, action, "no process to signal"),
    };
    let target = signal_target(state, &row.process, row.gpu);
    prompt_or_say_why(state, keymap, target)
}

/// Opens the prompt that confirms a signal to `target`, or says on the
/// status line why no signal may be sent.
fn prompt_or_say_why(
    state: &mut AppState,
    keymap: &Keymap,
    target: Result<SignalTarget, String>,
) -> Effect {
    match target {
        Ok(target) => {
            state.ui.signal_prompt = Some(SignalPrompt::one(target));
            Effect::Redraw
        }
        Err(why) => key_notice(state, keymap, Action::SignalProcess, why),
    }
}

/// `K` with processes tagged: the prompt names those a signal may be sent
/// to; a notice says why the others are left out (simulated, vramtop's
/// own…), or why none is signalled.
fn ask_to_signal_tagged(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::SignalProcess;
    let tags = state.ui.process_tags.clone();
    let mut targets = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    for tag in &tags {
        // The tag's process as the list shows it now (dropped with the
        // sample that no longer lists it, so normally found).
        let listed = state
            .whole_gpu_processes()
            .find(|(_, p)| tag.holds(p))
            .map(|(gpu, p)| (p.clone(), gpu));
        match listed {
            Some((process, gpu)) => match signal_target(state, &process, gpu) {
                Ok(target) => targets.push(target),
                Err(why) => refused.push(why),
            },
            None => refused.push(format!("pid {} is listed no more: nothing sent", tag.pid)),
        }
    }
    let n = tags.len();
    if targets.is_empty() {
        let first = refused.first().cloned().unwrap_or_default();
        let text = if n == 1 {
            first
        } else {
            format!("none of the {n} tagged can be signalled: {first}")
        };
        return key_notice(state, keymap, action, text);
    }
    if let Some(first) = refused.first() {
        // Said under the prompt: the prompt counts those it signals.
        let left = refused.len();
        let text = if left == 1 {
            format!("1 tagged left out: {first}")
        } else {
            format!("{left} tagged left out, as {first}")
        };
        key_notice(state, keymap, action, text);
    }
    state.ui.signal_prompt = Some(SignalPrompt { targets, tagged: n });
    Effect::Redraw
}

/// What a signal to `process` (listed on GPU `gpu`) would be sent to, or
/// why none may be: pids that are no single process's, vramtop's own,
/// simulated ones, and processes without a command to check again before
/// sending.
pub(super) fn signal_target(
    state: &AppState,
    process: &GpuProcess,
    gpu: u32,
) -> Result<SignalTarget, String> {
    let pid = process.pid;
    // kill(2) reads 0 and negative pids as process groups: never sent.
    if pid == 0 || i32::try_from(pid).is_err() {
        return Err(format!("pid {pid} names no single process: nothing sent"));
    }
    if pid == std::process::id() || state.stress.pid == Some(pid) {
        return Err(format!("pid {pid} is vramtop's own: nothing sent"));
    }
    // Off the driver (a simulated GPU, a snapshot) a pid is made up, but
    // a probed process's is real: the socket's peer credentials gave it,
    // and its command is /proc's, as the shell checks it before sending.
    let command = if state.processes_are_live() {
        process.command.clone()
    } else {
        let probed = state
            .probes
            .rows
            .iter()
            .find(|r| r.connected && r.pid == Some(pid));
        match probed {
            Some(r) if r.host_command.is_some() => r.host_command.clone(),
            Some(_) => {
                return Err(format!(
                    "pid {pid} is the probe's own number (another PID namespace's, not found \
                     here): nothing sent"
                ));
            }
            None if state.status.backend == "sim" => {
                return Err(format!(
                    "pid {pid} is simulated (its pid is made up): never signalled; only a \
                     [probe] process is real here"
                ));
            }
            None => {
                return Err("these processes are not live ones: none is signalled".to_string());
            }
        }
    };
    // The prompt names what it signals, and the shell checks the pid
    // still runs it: without a command there is nothing to check.
    let Some(command) = command else {
        return Err(format!(
            "pid {pid} is not in /proc here (it ended, or another PID namespace's): \
             nothing sent"
        ));
    };
    // The signal ends the process on every GPU it uses: the prompt names
    // them all, and what it holds on them together.
    let mut gpus = Vec::new();
    let mut used_memory: Option<u64> = None;
    for (gpu, p) in state.whole_gpu_processes().filter(|(_, p)| p.pid == pid) {
        if !gpus.contains(&gpu) {
            gpus.push(gpu);
        }
        if let Some(bytes) = p.used_memory {
            used_memory = Some(used_memory.unwrap_or(0).saturating_add(bytes));
        }
    }
    if gpus.is_empty() {
        gpus.push(gpu);
    }
    gpus.sort_unstable();
    // A probed process on a simulated GPU: its line shows the probe's
    // words (the script), /proc's command line starts with the
    // interpreter's path; the prompt names it as the line does.
    let shown = process.command.clone().filter(|c| *c != command);
    Ok(SignalTarget {
        pid,
        gpus,
        command,
        shown,
        used_memory,
    })
}

/// `None` where Processes has the focus, else the notice that `action`
/// acts there: `says` words it, given the way to move there ("Shift-Tab
/// moves there").
fn outside_processes(
    state: &mut AppState,
    keymap: &Keymap,
    action: Action,
    says: impl FnOnce(String) -> String,
) -> Option<Effect> {
    if state.ui.focus == Pane::Processes {
        return None;
    }
    let way = way_to(keymap, state.ui.focus, Pane::Processes);
    Some(key_notice(state, keymap, action, says(way)))
}

/// Space in Processes: tags the selected process for `K`, or untags it
/// (by pid and command, so a re-sort, a sample or its other GPU's line
/// keep it tagged, and a pid reused by another command is not).
fn toggle_tag(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::ToggleTag;
    if let Some(said) = outside_processes(state, keymap, action, |way| {
        format!("tags a process in Processes: nothing tagged ({way})")
    }) {
        return said;
    }
    let lines = state.process_lines();
    let process = match state.selected_process_index(&lines).map(|i| &lines[i]) {
        Some(ProcessLine::Process(row)) => &row.process,
        Some(_) => return key_notice(state, keymap, action, "this line is no process"),
        None => return key_notice(state, keymap, action, "no process to tag"),
    };
    let tags = &mut state.ui.process_tags;
    match tags.iter().position(|t| t.holds(process)) {
        Some(i) => {
            tags.remove(i);
        }
        None => tags.push(ProcessTag::of(process)),
    }
    Effect::Redraw
}

/// A key in the stress panel's size or settings field: Enter sets the size
/// (or validates the settings and replaces the allocator), Esc cancels,
/// Backspace deletes, Ctrl-U clears, characters type.
fn edit_size(state: &mut AppState, key: KeyEvent) -> Effect {
    let panel = &mut state.stress;
    match (TypingMode::StressField.key_for(key), key.code) {
        (Some(TypingKey::Done), _) => {
            let commands = panel.submit_input();
            if !commands.is_empty() {
                return Effect::Stress(commands);
            }
        }
        (Some(TypingKey::Cancel), _) => panel.cancel_input(),
        (Some(TypingKey::Delete), _) => panel.backspace(),
        (Some(TypingKey::Clear), _) => panel.clear_field(),
        (None, KeyCode::Char(c)) => panel.type_char(c),
        _ => return Effect::None,
    }
    Effect::Redraw
}

/// A key in the stress panel's scenario list: ↑/↓ (k/j) move, Enter loads
/// the scenario (rewinding to its first variant), Esc closes the list.
fn pick_scenario(state: &mut AppState, key: KeyEvent) -> Effect {
    let panel = &mut state.stress;
    match TypingMode::ScenarioList.key_for(key) {
        Some(TypingKey::Up) => panel.pick_move(true),
        Some(TypingKey::Down) => panel.pick_move(false),
        Some(TypingKey::Done) => {
            let commands = panel.pick_choose();
            if !commands.is_empty() {
                return Effect::Stress(commands);
            }
        }
        Some(TypingKey::Cancel) => panel.pick_cancel(),
        _ => return Effect::None,
    }
    Effect::Redraw
}

/// Shows the stress allocator as its GPU's allocator while the panel is
/// open, so the breakdown, fragmentation and segment panes follow it (the
/// breakdown once a driver sample has seen it: see
/// `GpuState::allocator_at_reading`).
pub fn show_stress_view(state: &mut AppState) {
    if !state.ui.stress_open {
        return;
    }
    let (Some(gpu), Some(view)) = (state.stress.gpu, state.stress.view.as_ref()) else {
        return;
    };
    if let Some(g) = state.gpus.iter_mut().find(|g| g.index() == gpu) {
        g.show_newer_view(view.clone());
    }
}

/// What `M` says of where the segment map is: beside the panel (`beside`:
/// the screen is large enough), else in its place or not, as
/// `stress_map` says.
fn say_map_view(state: &mut AppState, beside: bool) {
    let (w, h) = STRESS_BESIDE_MAP;
    if beside {
        state.stress.say_then(
            "the segment map is beside the panel at this size:",
            vec![KeyUse::new(
                PanelKey::ToggleMap,
                format!("switches between them below {w}×{h}"),
            )],
        );
    } else if state.ui.stress_map {
        // Said on the status line (the panel is not drawn), in 80
        // columns: the hints say which of the panel's keys act.
        state.stress.say_then(
            "segment map in place of the panel (tensor list keys wait):",
            vec![KeyUse::new(PanelKey::ToggleMap, "shows the panel")],
        );
    } else {
        state.stress.say_then(
            "panel shown:",
            vec![KeyUse::new(
                PanelKey::ToggleMap,
                format!("shows the segment map (side by side from {w}×{h})"),
            )],
        );
    }
}

/// The terminal is now `screen` (columns, rows) large: it is kept (keys
/// below the smallest size only quit), and a message of `M` about where
/// the segment map is, true of the old size, is said again for the new
/// one (it read "beside the panel at this size" at 80×24).
pub fn on_resize(state: &mut AppState, screen: (u16, u16)) {
    // Before the next frame: keys pressed meanwhile act at this size.
    state.ui.screen.set(Some(screen));
    let about_map = state
        .stress
        .message_keys
        .iter()
        .any(|k| k.key == PanelKey::ToggleMap);
    if about_map {
        say_map_view(state, UiState::stress_beside_map_at(screen));
    }
}

/// Opens, closes or acts on the stress panel.
pub fn apply_panel_key(state: &mut AppState, key: PanelKey) -> Effect {
    match key {
        PanelKey::Open => {
            state.ui.stress_open = true;
            // The panes follow the panel's GPU.
            if let Some(i) = state
                .stress
                .gpu
                .and_then(|gpu| state.gpus.iter().position(|g| g.index() == gpu))
            {
                select_gpu(state, i);
            }
            show_stress_view(state);
            Effect::Redraw
        }
        PanelKey::Close => {
            state.ui.stress_open = false;
            Effect::Redraw
        }
        PanelKey::ToggleMap if state.ui.stress_beside_map() => {
            say_map_view(state, true);
            Effect::Redraw
        }
        PanelKey::ToggleMap => {
            state.ui.stress_map = !state.ui.stress_map;
            say_map_view(state, false);
            Effect::Redraw
        }
        PanelKey::Act(action) => {
            let commands = state.stress.apply(action);
            if commands.is_empty() {
                Effect::Redraw
            } else {
                Effect::Stress(commands)
            }
        }
    }
}

/// Takes the stress worker's answer; queued panel keys may send more.
pub fn on_stress_result(state: &mut AppState, result: StressResult) -> Effect {
    let started = state.stress.gpu.is_none();
    // A snapshot `c` asked of the panel's allocator: its answer goes to the
    // status line, as a simulated process's does (the panel is closed).
    if state.stress.saving
        && let (Some(pid), Some(panel)) = (state.capture.pending, state.stress.pid)
        && pid == panel
    {
        let msg = match &result.outcome {
            StressOutcome::SnapshotSaved {
                path,
                trace_entries,
                ..
            } => Some(CaptureMsg::Done {
                pid,
                path: PathBuf::from(path),
                has_trace: *trace_entries > 0,
            }),
            StressOutcome::Failed { message, .. } => Some(CaptureMsg::Failed {
                pid,
                why: message.clone(),
            }),
            _ => None,
        };
        if let Some(msg) = msg {
            state.capture.on_msg(state.now_ms, msg);
        }
    }
    let commands = state.stress.on_result(result);
    if started
        && state.ui.stress_open
        && let Some(i) = state
            .stress
            .gpu
            .and_then(|gpu| state.gpus.iter().position(|g| g.index() == gpu))
    {
        select_gpu(state, i);
    }
    show_stress_view(state);
    if commands.is_empty() {
        Effect::Redraw
    } else {
        Effect::Stress(commands)
    }
}

fn block_count(state: &AppState) -> usize {
    state
        .selected()
        .and_then(|g| g.allocator.as_ref())
        .map_or(0, |a| a.layout.iter().map(|s| s.blocks.len()).sum())
}

fn move_selection(state: &mut AppState, delta: isize) {
    let ui = &mut state.ui;
    match ui.focus {
        Pane::Gpus | Pane::Breakdown => {
            let n = state.gpus.len();
            if n > 0 {
                let i = (ui.selected_gpu as isize + delta).clamp(0, n as isize - 1) as usize;
                pick_gpu(state, i);
            }
        }
        Pane::Segments | Pane::Fragmentation => {
            let n = block_count(state);
            let ui = &mut state.ui;
            ui.selected_block = if n == 0 {
                0
            } else {
                (ui.selected_block as isize + delta).clamp(0, n as isize - 1) as usize
            };
            remember_selected_address(state);
        }
        Pane::Processes => move_process_selection(state, delta),
        Pane::Timeline => {}
    }
}

/// Moves the process list's selection `delta` lines (clamped to the
/// list) from the selected line, and the view just enough to show it,
/// from the first line drawn ([`AppState::process_view_first`]).
fn move_process_selection(state: &mut AppState, delta: isize) {
    let lines = state.process_lines();
    let Some(at) = state.selected_process_index(&lines) else {
        return;
    };
    let shown = state.ui.process_lines_shown.get().max(1);
    let first = state.process_view_first(&lines, shown);
    let to = at.saturating_add_signed(delta).min(lines.len() - 1);
    state.ui.select_process_line(&lines, to);
    state.ui.process_scroll = if to < first {
        to
    } else if to >= first + shown {
        to + 1 - shown
    } else {
        first
    };
}

/// Re-sorts the process list (`s`, `S`): the selection stays on its
/// process (it is kept by pid), and the view follows it.
fn sort_processes(state: &mut AppState, sort: super::process_list::ProcessSort) {
    state.ui.process_sort = sort;
    // Nothing picked yet (no key in Processes, no GPU selected): the
    // selection stays on the first line, the view where it is.
    if state.ui.selected_process.is_none() {
        return;
    }
    let lines = state.process_lines();
    if let Some(at) = state.selected_process_index(&lines) {
        state.ui.selected_process_row = at;
        let shown = state.ui.process_lines_shown.get().max(1);
        // Into view wherever the list is focused or not: the title says
        // the order, the selection where its process went.
        let first = state
            .ui
            .process_scroll
            .min(lines.len().saturating_sub(shown));
        if at < first {
            state.ui.process_scroll = at;
        } else if at >= first + shown {
            state.ui.process_scroll = at + 1 - shown;
        }
    }
}

/// Selects the GPU at `i` of `state.gpus` (keys, a click, the stress
/// panel's GPU) and scrolls the process list to the GPU's processes.
pub fn select_gpu(state: &mut AppState, i: usize) {
    state.ui.selected_gpu = i;
    show_selected_gpus_processes(state);
}

/// [`select_gpu`] by the user (keys, a click): the block selection starts
/// over on the GPU's layout.
pub fn pick_gpu(state: &mut AppState, i: usize) {
    select_gpu(state, i);
    state.ui.selected_block = 0;
    state.ui.selected_block_address = None;
}

/// Scrolls the process list so the selected GPU's first line is in view:
/// left as it is when that line already shows (the list does not jump
/// under the reader), else scrolled to put it at the top, with the GPU's
/// other lines below it. A GPU with no line leaves the list where it is.
fn show_selected_gpus_processes(state: &mut AppState) {
    let Some(gpu) = state.selected().map(GpuState::physical_index) else {
        return;
    };
    let lines = state.process_lines();
    if let Some(at) = lines.iter().position(|l| l.gpu() == gpu) {
        state.show_process_line(&lines, at);
    }
}

/// Remembers the address of the selected block, so the selection follows
/// that block when the layout changes between samples.
fn remember_selected_address(state: &mut AppState) {
    let address = state
        .selected()
        .and_then(|g| g.allocator.as_ref())
        .and_then(|a| {
            a.layout
                .iter()
                .flat_map(|s| &s.blocks)
                .nth(state.ui.selected_block)
        })
        .map(|b| b.address);
    state.ui.selected_block_address = address;
}

/// Moves the segment map's selection `rows` segment rows up (negative) or
/// down, keeping the block's place within its row where the new row has
/// that many blocks.
fn move_segment_rows(state: &mut AppState, rows: isize) {
    let Some(layout) = state
        .selected()
        .and_then(|g| g.allocator.as_ref())
        .map(|a| &a.layout)
    else {
        return;
    };
    if layout.is_empty() {
        return;
    }
    // (segment, block within it) of the selection.
    let mut left = state.ui.selected_block;
    let mut at = (layout.len() - 1, 0);
    for (i, s) in layout.iter().enumerate() {
        if left < s.blocks.len() {
            at = (i, left);
            break;
        }
        left -= s.blocks.len();
    }
    let target = (at.0 as isize + rows).clamp(0, layout.len() as isize - 1) as usize;
    let within = at.1.min(layout[target].blocks.len().saturating_sub(1));
    let before: usize = layout[..target].iter().map(|s| s.blocks.len()).sum();
    state.ui.selected_block = before + within;
    remember_selected_address(state);
}

/// Rows PgUp/PgDn scroll the help: a page, the rows it last showed less
/// one, which stays in view to keep the reader's place; [`PAGE_ROWS`]
/// before it is drawn.
fn help_page(ui: &UiState) -> usize {
    match ui.help_page_rows.get() {
        0 => PAGE_ROWS,
        rows => rows.saturating_sub(1).max(1),
    }
}

/// Says on the status line why `action`'s key did nothing, led by the key
/// as `keymap` names it ("o: no snapshot yet"): a key moved in the table is
/// the one named.
fn key_notice(
    state: &mut AppState,
    keymap: &Keymap,
    action: Action,
    text: impl Into<String>,
) -> Effect {
    let text = text.into();
    match keymap.key_name(action) {
        Some(key) => notice(state, format!("{key}: {text}")),
        None => notice(state, text),
    }
}

/// Applies one action; `keymap` names the keys its notices mention.
pub fn apply(state: &mut AppState, keymap: &Keymap, action: Action) -> Effect {
    let ui = &mut state.ui;
    if ui.overlay == Overlay::Help {
        // The help overlay is modal: it scrolls like less, other keys do
        // nothing behind it. The drawing keeps the last row in view.
        // Clamped here to what the help last drew, not only when drawn,
        // so that a scroll past the end never has to be paid back.
        let limit = ui.help_scroll_limit.get().min(MAX_HELP_SCROLL);
        let current = ui.help_scroll.min(limit);
        let scroll = match action {
            Action::Up => Some(current.saturating_sub(1)),
            Action::Down => Some(current.saturating_add(1)),
            Action::PageUp => Some(current.saturating_sub(help_page(ui))),
            Action::PageDown => Some(current.saturating_add(help_page(ui))),
            Action::First => Some(0),
            Action::Last => Some(limit),
            Action::Quit | Action::ToggleHelp | Action::Back => None,
            _ => return Effect::None,
        };
        if let Some(scroll) = scroll.map(|s| s.min(limit)) {
            if scroll == ui.help_scroll {
                return Effect::None;
            }
            ui.help_scroll = scroll;
            return Effect::Redraw;
        }
    }
    if ui.overlay == Overlay::None && ui.process_detail.is_some() {
        return apply_in_process_detail(state, keymap, action);
    }
    match action {
        Action::Quit => return Effect::Quit,
        Action::ToggleHelp => {
            ui.overlay = if ui.overlay == Overlay::Help {
                Overlay::None
            } else {
                ui.help_scroll = 0;
                Overlay::Help
            };
        }
        Action::Back => {
            if ui.overlay != Overlay::None {
                ui.overlay = Overlay::None;
            } else if !ui.process_filter.text().is_empty() && ui.focus == Pane::Processes {
                ui.process_filter.text_mut().clear();
            } else if !ui.process_tags.is_empty() && ui.focus == Pane::Processes {
                // The tags go together (Space untags one).
                ui.process_tags.clear();
            } else if state.probes.oom_banner().is_some() {
                // Nothing else to close: the OOM's line goes (it stayed
                // after the process ended); `O` still opens the snapshot.
                state.probes.oom_banner_hidden = true;
            } else {
                return Effect::None;
            }
        }
        Action::FocusNext => ui.focus = ui.focus.next(),
        Action::FocusPrev => ui.focus = ui.focus.prev(),
        // In the segment map ↑/↓ move by segment row, ←/→ by block and
        // the page keys by a page of rows.
        Action::Up if ui.focus == Pane::Segments => move_segment_rows(state, -1),
        Action::Down if ui.focus == Pane::Segments => move_segment_rows(state, 1),
        Action::PageUp if ui.focus == Pane::Segments => {
            move_segment_rows(state, -(PAGE_ROWS as isize));
        }
        Action::PageDown if ui.focus == Pane::Segments => {
            move_segment_rows(state, PAGE_ROWS as isize);
        }
        Action::Up => move_selection(state, -1),
        Action::Down => move_selection(state, 1),
        Action::Left if matches!(ui.focus, Pane::Segments) => move_selection(state, -1),
        Action::Right if matches!(ui.focus, Pane::Segments) => move_selection(state, 1),
        Action::Left | Action::Right => {
            // A key that can do nothing says why (blocks are only in Segments).
            let way = way_to(keymap, ui.focus, Pane::Segments);
            return key_notice(
                state,
                keymap,
                action,
                format!("← and → step between blocks in Segments ({way})"),
            );
        }
        Action::PageUp => move_selection(state, -(PAGE_ROWS as isize)),
        Action::PageDown => move_selection(state, PAGE_ROWS as isize),
        // As far as a move goes: the moves clamp to the first and last row.
        Action::First => move_selection(state, isize::MIN / 2),
        Action::Last => move_selection(state, isize::MAX / 2),
        // At either end the key says so instead of doing nothing.
        Action::ZoomIn if ui.zoom == 0 => {
            return key_notice(
                state,
                keymap,
                action,
                // The window is named once, in the timeline's title
                // ("last 30s"), in its units.
                "the timeline already shows its shortest window (its title's)".to_string(),
            );
        }
        Action::ZoomOut if ui.zoom + 1 >= ZOOM_WINDOWS_S.len() => {
            return key_notice(
                state,
                keymap,
                action,
                "the timeline already shows its longest window (its title's)".to_string(),
            );
        }
        Action::ZoomIn => ui.zoom = ui.zoom.saturating_sub(1),
        Action::ZoomOut => ui.zoom = (ui.zoom + 1).min(ZOOM_WINDOWS_S.len() - 1),
        Action::TogglePause => {
            ui.paused = !ui.paused;
            ui.paused_at_ms = ui.paused.then_some(state.now_ms);
        }
        Action::StartFilter => {
            ui.focus = Pane::Processes;
            ui.process_filter.edit();
        }
        Action::ToggleTree => {
            if ui.focus != Pane::Processes {
                // A key that can do nothing says why.
                let way = way_to(keymap, ui.focus, Pane::Processes);
                return key_notice(
                    state,
                    keymap,
                    action,
                    format!("tree view is a Processes key: nothing changed ({way})"),
                );
            }
            ui.process_tree = !ui.process_tree;
        }
        Action::SortNext => {
            let sort = ui.process_sort.next_column();
            sort_processes(state, sort);
        }
        Action::SortReverse => {
            let sort = ui.process_sort.reversed();
            sort_processes(state, sort);
        }
        Action::SignalProcess => return ask_to_signal(state, keymap),
        Action::ToggleTag => return toggle_tag(state, keymap),
        Action::ProcessDetail => return open_process_detail(state, keymap),
        Action::NextAllocator => {
            let Some(gpu) = state.gpus.get(state.ui.selected_gpu) else {
                return Effect::None;
            };
            let Some(choice) = state.probe_choice(gpu) else {
                let index = gpu.index();
                let probes = state.allocator_pids_on(index).len();
                // The panel's own allocator is not among `v`'s: say where
                // it shows, as its process row has allocator figures too.
                if state.only_the_stress_allocator_besides(index) {
                    // Open, the panes show it now: no key to name.
                    let text = if state.ui.stress_open {
                        "nothing to switch to: the stress panel's allocator is the one shown now"
                            .to_string()
                    } else {
                        let open = keymap
                            .stress_key_name(PanelKey::Open)
                            .map(|k| format!(" ({k})"))
                            .unwrap_or_default();
                        format!(
                            "nothing to switch to: the stress panel's allocator \
                             shows with the panel{open}"
                        )
                    };
                    return key_notice(state, keymap, action, text);
                }
                return key_notice(
                    state,
                    keymap,
                    action,
                    if probes == 0 {
                        format!(
                            "no process on GPU {index} has a probe to switch to \
                             (python -m vramtop_probe; docs/attach.md)"
                        )
                    } else {
                        format!(
                            "GPU {index} has one {}: nothing to switch to",
                            if state.simulated_allocators.contains_key(&index) {
                                "process with an allocator"
                            } else {
                                "probed process"
                            }
                        )
                    },
                );
            };
            let index = gpu.index();
            state.ui.allocator_pick.insert(index, choice.next());
        }
        Action::CaptureSnapshot => return capture_snapshot(state, keymap),
        Action::OpenSnapshot => {
            return match state.capture.last.clone() {
                Some(path) => Effect::OpenSnapshot {
                    path,
                    at_oom: false,
                },
                None if state.capture.pending.is_some() => {
                    key_notice(state, keymap, action, "the snapshot is still being taken")
                }
                None => {
                    let ask = keymap
                        .key_name(Action::CaptureSnapshot)
                        .map(|c| format!(" ({c} takes one of the allocator shown)"))
                        .unwrap_or_default();
                    key_notice(state, keymap, action, format!("no snapshot yet{ask}"))
                }
            };
        }
        Action::OpenOomSnapshot => {
            return match state.probes.oom_snapshot.as_ref() {
                Some(o) => Effect::OpenSnapshot {
                    path: o.path.clone(),
                    at_oom: true,
                },
                None => key_notice(
                    state,
                    keymap,
                    action,
                    "no OOM snapshot yet (a probe with --snapshot-on-oom or history on \
                     writes one)",
                ),
            };
        }
        Action::SelectGpu(n) => {
            // The number on screen (nvidia-smi's index), not the row.
            let Some(i) = state.gpus.iter().position(|g| g.index() == u32::from(n)) else {
                let numbers: Vec<String> = {
                    let mut v: Vec<u32> = state.gpus.iter().map(GpuState::index).collect();
                    v.dedup();
                    v.iter().map(u32::to_string).collect()
                };
                let have = if numbers.is_empty() {
                    "no GPU is listed".to_string()
                } else {
                    format!("GPUs here: {}", numbers.join(", "))
                };
                // Still the first digit of a number (`1` of GPU 12 where
                // GPU 1 is gone).
                state.ui.gpu_digit = Some(n);
                return notice(state, format!("no GPU {n}: {have}"));
            };
            pick_gpu(state, i);
            state.ui.gpu_digit = Some(n);
            // Where GPUs 10 and up are listed, the help's `0…9` row does
            // not say how to reach them: the status line does, when the
            // digit can start one.
            let first = u32::from(n) * 10;
            let last = state.gpus.iter().map(GpuState::index).max().unwrap_or(0);
            if n > 0 && last >= first {
                let to = last.min(first + 9);
                return notice(
                    state,
                    format!("GPU {n} · {n} then 0…{}: GPU {first}…{to}", to - first),
                );
            }
        }
    }
    Effect::Redraw
}

/// Enter in Processes: opens the detail of the selected process, or says
/// why there is none (led by its key as `keymap` names it).
fn open_process_detail(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::ProcessDetail;
    if let Some(said) = outside_processes(state, keymap, action, |way| {
        format!("shows the process selected in Processes ({way})")
    }) {
        return said;
    }
    let lines = state.process_lines();
    match state.selected_process_index(&lines).map(|i| &lines[i]) {
        Some(ProcessLine::Process(row)) => {
            let probed = state.probes.attached_pids().contains(&row.process.pid);
            state.ui.process_detail = Some(ProcessDetail::of(row, probed));
            // Not drawn yet: the keys clamp to the drawing's limit.
            state.ui.detail_scroll_limit.set(usize::MAX);
            state.ui.detail_page_rows.set(0);
            Effect::Redraw
        }
        Some(_) => key_notice(
            state,
            keymap,
            action,
            "this line is no process (memory no listed process holds)",
        ),
        None => key_notice(state, keymap, action, "no process to show"),
    }
}

/// A key while the process detail is open (it takes the keys, as the help
/// does): the moves scroll it, Esc and Enter close it, quit and help act
/// as everywhere, `K`, `c` and `v` act on its process; other keys do
/// nothing behind it.
fn apply_in_process_detail(state: &mut AppState, keymap: &Keymap, action: Action) -> Effect {
    let ui = &mut state.ui;
    let Some(at) = ui.process_detail.as_ref().map(|d| d.scroll) else {
        return Effect::None;
    };
    let limit = ui.detail_scroll_limit.get();
    let page = match ui.detail_page_rows.get() {
        0 => PAGE_ROWS,
        rows => rows.saturating_sub(1).max(1),
    };
    let current = at.min(limit);
    let scroll = match action {
        Action::Up => current.saturating_sub(1),
        Action::Down => current.saturating_add(1),
        Action::PageUp => current.saturating_sub(page),
        Action::PageDown => current.saturating_add(page),
        Action::First => 0,
        Action::Last => limit,
        Action::Quit => return Effect::Quit,
        Action::ToggleHelp => {
            ui.help_scroll = 0;
            ui.overlay = Overlay::Help;
            return Effect::Redraw;
        }
        Action::Back | Action::ProcessDetail => {
            ui.process_detail = None;
            return Effect::Redraw;
        }
        Action::SignalProcess => return signal_detail_process(state, keymap),
        Action::CaptureSnapshot => return capture_detail_process(state, keymap),
        Action::NextAllocator => return show_detail_allocator(state, keymap),
        _ => return Effect::None,
    }
    .min(limit);
    match state.ui.process_detail.as_mut() {
        Some(detail) if detail.scroll != scroll => {
            detail.scroll = scroll;
            Effect::Redraw
        }
        _ => Effect::None,
    }
}

/// `K` in the process detail: asks to signal its process (not the tagged
/// ones: the detail is about one), or says why it cannot be.
fn signal_detail_process(state: &mut AppState, keymap: &Keymap) -> Effect {
    let Some(facts) = state.process_detail_facts() else {
        return Effect::None;
    };
    let pid = facts.pid;
    let target = match (facts.ended_ms, facts.gpus.first()) {
        (None, Some(line)) => signal_target(state, line.process, line.gpu),
        _ => Err(format!("pid {pid} has ended: nothing sent")),
    };
    prompt_or_say_why(state, keymap, target)
}

/// `c` in the process detail: captures its allocator where it is the one
/// shown, else says how to show it (`v`) or that it has none.
fn capture_detail_process(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::CaptureSnapshot;
    let keys = state.process_detail_keys();
    if keys.capture {
        return capture_snapshot(state, keymap);
    }
    let pid = state
        .ui
        .process_detail
        .as_ref()
        .map_or(0, |d| d.process.pid);
    let text = match keymap.key_name(Action::NextAllocator) {
        Some(v) if keys.show_allocator => {
            format!("pid {pid}'s allocator is not the one shown: {v} shows it")
        }
        _ => format!(
            "pid {pid} has no allocator to capture (a probe gives it one: \
             python -m vramtop_probe; docs/attach.md)"
        ),
    };
    key_notice(state, keymap, action, text)
}

/// `v` in the process detail: shows its allocator (on the first of its
/// GPUs that does not show it yet), selecting that GPU; the selection
/// stays on its line.
fn show_detail_allocator(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::NextAllocator;
    let Some(facts) = state.process_detail_facts() else {
        return Effect::None;
    };
    let pid = facts.pid;
    let Some(gpu) = facts.gpus.iter().find(|g| g.can_show).map(|g| g.gpu) else {
        let text = if facts.gpus.iter().any(|g| g.shown.is_some()) {
            format!("pid {pid}'s allocator is the one shown")
        } else {
            format!(
                "pid {pid} has no allocator to show (a probe gives it one: \
                 python -m vramtop_probe; docs/attach.md)"
            )
        };
        return key_notice(state, keymap, action, text);
    };
    if let Some(i) = state
        .gpus
        .iter()
        .position(|g| g.index() == gpu && g.physical_index() == gpu)
    {
        pick_gpu(state, i);
    }
    state.ui.allocator_pick.insert(gpu, pid);
    state.show_process(pid, Some(gpu));
    notice(
        state,
        format!("GPU {gpu} shows pid {pid}'s allocator from the next sample"),
    )
}

/// `c`: asks the probe of the selected probed process for a snapshot, or
/// has the shell write the shown simulated training process's allocator
/// model as one, or says why it cannot (led by its key as `keymap` names
/// it).
fn capture_snapshot(state: &mut AppState, keymap: &Keymap) -> Effect {
    let action = Action::CaptureSnapshot;
    if let Some(pid) = state.capture.pending {
        let text = format!("a snapshot of pid {pid} is being taken");
        return key_notice(state, keymap, action, text);
    }
    let row = match capture_target(state) {
        Ok(CaptureTarget::Probe(row)) => row,
        Ok(CaptureTarget::Simulated { pid }) => {
            state.capture.pending = Some(pid);
            state.capture.note = Some((state.now_ms, CaptureMsg::Writing { pid }));
            return Effect::SaveSimulatedSnapshot { pid };
        }
        Ok(CaptureTarget::StressPanel { pid }) => {
            // The panel's own `W`: queued behind a command in flight, its
            // answer ends the capture (`on_stress_result`).
            let commands = state.stress.apply(StressAction::SaveSnapshot);
            let sent = state.stress.saving
                || state.stress.queued.last() == Some(&StressAction::SaveSnapshot);
            if !sent {
                let why = state
                    .stress
                    .message
                    .clone()
                    .unwrap_or_else(|| "the stress panel cannot write a snapshot now".into());
                return key_notice(state, keymap, action, why);
            }
            state.capture.pending = Some(pid);
            state.capture.note = Some((state.now_ms, CaptureMsg::Writing { pid }));
            return if commands.is_empty() {
                Effect::Redraw
            } else {
                Effect::Stress(commands)
            };
        }
        Err(why) => return key_notice(state, keymap, action, why),
    };
    if let Some(why) = cannot_capture(row) {
        return key_notice(state, keymap, action, why);
    }
    let (Some(pid), socket) = (row.pid, PathBuf::from(&row.socket)) else {
        return key_notice(state, keymap, action, "the probe has no pid yet");
    };
    state.capture.pending = Some(pid);
    state.capture.note = Some((state.now_ms, CaptureMsg::Asking { pid }));
    Effect::RequestSnapshot { pid, socket }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::process_list::{ProcessSort, SortColumn};
    use crate::app::state::{ProcessFilter, StatusState};
    use crate::device::{GpuReading, GpuSample};
    use crossterm::event::KeyModifiers;
    use std::collections::BTreeMap;

    fn state_with_gpus(n: u32) -> AppState {
        let mut s = AppState::new(StatusState::default());
        let readings = (0..n)
            .map(|i| GpuReading::Ok(GpuSample::unknown(i, "GPU")))
            .collect();
        s.apply_sample(0, readings, BTreeMap::new());
        s
    }

    fn press(s: &mut AppState, code: KeyCode) -> Effect {
        handle_key(
            s,
            &Keymap::default(),
            KeyEvent::new(code, KeyModifiers::NONE),
        )
    }

    #[test]
    fn two_digits_one_after_the_other_select_gpu_ten_and_up_where_listed() {
        let mut s = state_with_gpus(16);
        press(&mut s, KeyCode::Char('1'));
        assert_eq!(s.selected().map(GpuState::index), Some(1));
        // The status line says how to go on (the help's row says 0…9).
        assert_eq!(
            s.ui.notice.as_deref(),
            Some("GPU 1 · 1 then 0…5: GPU 10…15")
        );
        press(&mut s, KeyCode::Char('2'));
        assert_eq!(s.selected().map(GpuState::index), Some(12), "1 then 2");
        assert_eq!(s.ui.notice, None);
        // A third digit starts a new number.
        press(&mut s, KeyCode::Char('3'));
        assert_eq!(s.selected().map(GpuState::index), Some(3));
        // Any other key between two digits keeps them apart.
        press(&mut s, KeyCode::Char('1'));
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char('5'));
        assert_eq!(s.selected().map(GpuState::index), Some(5));
        // A number not listed leaves the second digit's own GPU.
        press(&mut s, KeyCode::Char('2'));
        press(&mut s, KeyCode::Char('7'));
        assert_eq!(s.selected().map(GpuState::index), Some(7), "no GPU 27");
        // 0 leads no number: 0 then 5 is GPU 5.
        press(&mut s, KeyCode::Char('0'));
        press(&mut s, KeyCode::Char('5'));
        assert_eq!(s.selected().map(GpuState::index), Some(5));
        // With ten GPUs or fewer each digit is its GPU, as before.
        let mut few = state_with_gpus(4);
        press(&mut few, KeyCode::Char('1'));
        press(&mut few, KeyCode::Char('2'));
        assert_eq!(few.selected().map(GpuState::index), Some(2));
    }

    #[test]
    fn a_viewer_or_stress_panel_key_on_the_dashboard_says_whose_key_it_is() {
        let mut s = state_with_gpus(1);
        // No probe, nothing taken: capturing is not offered, so the route
        // named is the command line's, not `c`, which would only say why
        // it cannot.
        assert!(!s.offers().capture);
        let viewer = "is the snapshot viewer's: `vramtop open FILE` opens a snapshot";
        for code in ['w', 'P', 'm', 'e', 'x', 'z', 'g', 'n', 'i'].map(KeyCode::Char) {
            assert_eq!(press(&mut s, code), Effect::Redraw, "{code:?}");
            let said = s.ui.notice.clone().unwrap_or_default();
            assert!(said.ends_with(viewer), "{code:?}: {said}");
        }
        assert_eq!(s.ui.notice.as_deref(), Some(format!("i {viewer}").as_str()));
        // The stress panel's own key, with the panel closed.
        press(&mut s, KeyCode::Char('W'));
        assert_eq!(
            s.ui.notice.as_deref(),
            Some("W is the stress panel's: a opens it")
        );
        // A key no table binds stays silent, and clears the last notice.
        assert_eq!(press(&mut s, KeyCode::Char('Q')), Effect::Redraw);
        assert_eq!(s.ui.notice, None);
        assert_eq!(press(&mut s, KeyCode::Char('Q')), Effect::None);
        assert_eq!(s.ui.notice, None);
    }

    #[test]
    fn below_the_smallest_terminal_only_quit_acts() {
        let mut s = state_with_gpus(2);
        on_resize(&mut s, (20, 5));
        // Typed on the "needs 40×10" screen: nothing opens, nothing is
        // allocated unseen, no GPU is picked.
        for code in [
            KeyCode::Char('a'),
            KeyCode::Char('a'),
            KeyCode::Char('?'),
            KeyCode::Char('1'),
            KeyCode::Tab,
        ] {
            assert_eq!(press(&mut s, code), Effect::None, "{code:?}");
        }
        assert!(!s.ui.stress_open);
        assert_eq!(s.ui.overlay, Overlay::None);
        assert_eq!(s.ui.selected_gpu, 0);
        assert_eq!(s.ui.focus, Pane::Gpus);
        assert_eq!(press(&mut s, KeyCode::Char('q')), Effect::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(handle_key(&mut s, &Keymap::default(), ctrl_c), Effect::Quit);
        // Too narrow alone or too low alone is too small as well.
        for small in [(39, 24), (80, 9)] {
            on_resize(&mut s, small);
            assert_eq!(press(&mut s, KeyCode::Char('?')), Effect::None, "{small:?}");
        }
        // Grown to the smallest size, keys act again.
        on_resize(&mut s, (40, 10));
        assert_eq!(press(&mut s, KeyCode::Char('?')), Effect::Redraw);
        assert_eq!(s.ui.overlay, Overlay::Help);
    }

    #[test]
    fn below_the_smallest_terminal_the_filter_being_typed_takes_nothing_but_quit() {
        let mut s = state_with_gpus(1);
        assert_eq!(press(&mut s, KeyCode::Char('/')), Effect::Redraw);
        on_resize(&mut s, (20, 5));
        assert_eq!(press(&mut s, KeyCode::Char('x')), Effect::None);
        assert_eq!(s.ui.process_filter.text(), "");
        // `q` would type into the filter; unseen, it quits.
        assert_eq!(press(&mut s, KeyCode::Char('q')), Effect::Quit);
    }

    /// Four GPUs: GPU 0 runs pid 100, GPU 1 pids 110 and 111, GPU 2 pid
    /// 120, GPU 3 nothing. The process list is 100, 110, 111, 120.
    fn state_with_processes() -> AppState {
        let mut s = AppState::new(StatusState::default());
        let pids: [&[u32]; 4] = [&[100], &[110, 111], &[120], &[]];
        let readings = pids
            .iter()
            .enumerate()
            .map(|(i, pids)| {
                let mut g = GpuSample::unknown(i as u32, "GPU");
                g.processes = Some(
                    pids.iter()
                        .map(|&pid| crate::device::GpuProcess::new(pid, None))
                        .collect(),
                );
                GpuReading::Ok(g)
            })
            .collect();
        s.apply_sample(0, readings, BTreeMap::new());
        s
    }

    #[test]
    fn selecting_a_gpu_scrolls_the_process_list_to_its_first_process() {
        let mut s = state_with_processes();
        // As drawn at 80x24 with many GPUs: one process line in view.
        s.ui.process_lines_shown.set(1);
        press(&mut s, KeyCode::Char('2'));
        assert_eq!(s.ui.process_scroll, 3, "pid 120, GPU 2's, at the top");
        press(&mut s, KeyCode::Char('1'));
        assert_eq!(s.ui.process_scroll, 1, "pid 110, GPU 1's first");
        // ↑/↓ in GPUs select too.
        s.ui.focus = Pane::Gpus;
        press(&mut s, KeyCode::Up);
        assert_eq!(s.ui.process_scroll, 0, "pid 100, GPU 0's");
        press(&mut s, KeyCode::Down);
        assert_eq!(s.ui.process_scroll, 1);
    }

    #[test]
    fn selecting_a_gpu_whose_process_is_in_view_leaves_the_list_still() {
        let mut s = state_with_processes();
        // Three lines in view from the second: 110, 111, 120.
        s.ui.process_lines_shown.set(3);
        s.ui.process_scroll = 1;
        press(&mut s, KeyCode::Char('2'));
        assert_eq!(s.ui.process_scroll, 1, "120 shows: no jump");
        press(&mut s, KeyCode::Char('0'));
        assert_eq!(s.ui.process_scroll, 0, "100 did not show");
    }

    #[test]
    fn a_gpu_without_processes_leaves_the_process_list_where_the_user_put_it() {
        let mut s = state_with_processes();
        s.ui.process_lines_shown.set(1);
        s.ui.process_scroll = 2;
        press(&mut s, KeyCode::Char('3'));
        assert_eq!(s.ui.selected_gpu, 3);
        assert_eq!(s.ui.process_scroll, 2);
    }

    #[test]
    fn scrolling_in_processes_is_the_users_until_a_gpu_is_selected_again() {
        let mut s = state_with_processes();
        s.ui.process_lines_shown.set(1);
        press(&mut s, KeyCode::Char('1'));
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Down);
        assert_eq!(s.ui.process_scroll, 3, "the arrows scroll past GPU 1");
        assert_eq!(s.ui.selected_gpu, 1, "and select no GPU");
        // A sample keeps the user's place.
        let readings = s.gpus.iter().map(|g| g.reading.clone()).collect();
        s.apply_sample(1000, readings, BTreeMap::new());
        assert_eq!(s.ui.process_scroll, 3);
        press(&mut s, KeyCode::Char('1'));
        assert_eq!(s.ui.process_scroll, 1, "selecting GPU 1 brings it back");
    }

    #[test]
    fn the_process_list_scrolls_no_further_than_its_last_page_and_follows_the_selection() {
        let mut s = state_with_processes();
        // Two of the four lines in view: the last page is 111, 120.
        s.ui.process_lines_shown.set(2);
        s.ui.focus = Pane::Processes;
        for _ in 0..4 {
            press(&mut s, KeyCode::PageDown);
        }
        assert_eq!(s.ui.process_scroll, 2, "PgDn stops at the last page");
        assert_eq!(s.ui.selected_process_row, 3, "on the last line");
        // The selection moves at once; the view once it would leave it.
        press(&mut s, KeyCode::Up);
        assert_eq!(s.ui.selected_process_row, 2);
        assert_eq!(s.ui.process_scroll, 2);
        press(&mut s, KeyCode::Up);
        assert_eq!(s.ui.process_scroll, 1, "the second Up moves the view");
        press(&mut s, KeyCode::End);
        assert_eq!(s.ui.process_scroll, 2, "End is the last page");
        press(&mut s, KeyCode::PageUp);
        assert_eq!(s.ui.process_scroll, 0);
        // A scroll past the end (the list shrank under it) is not paid back
        // either: the move starts from the page drawn, which shows the
        // selection.
        s.ui.process_scroll = 9;
        press(&mut s, KeyCode::Down);
        assert_eq!(s.ui.selected_process_row, 1);
        assert_eq!(s.ui.process_scroll, 0, "lines 1 and 2 drawn: no scroll");
        // Selecting a GPU on the last page shows the last page.
        s.ui.process_scroll = 0;
        press(&mut s, KeyCode::Char('2'));
        assert_eq!(s.ui.process_scroll, 2, "120 in view, on the last page");
    }

    #[test]
    fn zoom_keys_act_from_every_pane() {
        for focus in Pane::ALL {
            let mut s = state_with_gpus(1);
            s.ui.focus = focus;
            let zoom = s.ui.zoom;
            press(&mut s, KeyCode::Char('-'));
            assert_eq!(s.ui.zoom, zoom + 1, "- in {focus:?}");
            press(&mut s, KeyCode::Char('+'));
            assert_eq!(s.ui.zoom, zoom, "+ in {focus:?}");
        }
    }

    #[test]
    fn tree_key_outside_processes_says_where_it_acts() {
        let mut s = state_with_gpus(1);
        s.ui.focus = Pane::Gpus;
        let tree = s.ui.process_tree;
        assert_eq!(press(&mut s, KeyCode::Char('t')), Effect::Redraw);
        assert_eq!(
            s.ui.process_tree, tree,
            "nothing switched outside Processes"
        );
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("Processes") && said.contains("Tab"), "{said}");
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char('t'));
        assert_ne!(s.ui.process_tree, tree, "switched in Processes");
    }

    #[test]
    fn block_keys_outside_segments_say_where_they_act() {
        for focus in [Pane::Gpus, Pane::Fragmentation, Pane::Processes] {
            let mut s = state_with_gpus(1);
            s.ui.focus = focus;
            for key in [KeyCode::Char('h'), KeyCode::Right] {
                assert_eq!(press(&mut s, key), Effect::Redraw, "{focus:?}");
                let said = s.ui.notice.clone().unwrap_or_default();
                assert!(
                    said.contains("Segments") && said.contains("Tab"),
                    "{focus:?}: {said}"
                );
            }
        }
    }

    #[test]
    fn help_scroll_stops_at_the_drawn_end_so_page_up_moves_at_once() {
        let mut s = state_with_gpus(1);
        press(&mut s, KeyCode::Char('?'));
        assert_eq!(s.ui.overlay, Overlay::Help);
        // As the drawing reports it: 23 rows of help below the view.
        s.ui.help_scroll_limit.set(23);
        for _ in 0..10 {
            press(&mut s, KeyCode::PageDown);
        }
        assert_eq!(s.ui.help_scroll, 23, "PgDn stops at the end");
        assert_eq!(press(&mut s, KeyCode::PageDown), Effect::None);
        assert_eq!(press(&mut s, KeyCode::PageUp), Effect::Redraw);
        assert_eq!(s.ui.help_scroll, 13, "the first PgUp moves a page");
        // A larger terminal shows more: the scroll is clamped to the new
        // end before the key applies.
        s.ui.help_scroll = 23;
        s.ui.help_scroll_limit.set(5);
        press(&mut s, KeyCode::Up);
        assert_eq!(s.ui.help_scroll, 4);
        // Up at the top does nothing, behind the help neither.
        s.ui.help_scroll = 0;
        assert_eq!(press(&mut s, KeyCode::Up), Effect::None);
    }

    #[test]
    fn help_page_keys_move_by_the_rows_last_drawn_less_one() {
        let mut s = state_with_gpus(1);
        press(&mut s, KeyCode::Char('?'));
        s.ui.help_scroll_limit.set(100);
        // Not drawn yet: the page keys' usual rows.
        press(&mut s, KeyCode::PageDown);
        assert_eq!(s.ui.help_scroll, PAGE_ROWS);
        // As the drawing reports it: 22 rows in view.
        s.ui.help_page_rows.set(22);
        press(&mut s, KeyCode::PageDown);
        assert_eq!(s.ui.help_scroll, PAGE_ROWS + 21);
        press(&mut s, KeyCode::PageUp);
        assert_eq!(s.ui.help_scroll, PAGE_ROWS);
        // One row in view still moves.
        s.ui.help_page_rows.set(1);
        press(&mut s, KeyCode::PageUp);
        assert_eq!(s.ui.help_scroll, PAGE_ROWS - 1);
    }

    #[test]
    fn home_and_end_go_to_the_first_and_last_row_and_the_help_says_what_page_keys_move() {
        let mut s = state_with_gpus(5);
        s.ui.focus = Pane::Gpus;
        assert_eq!(press(&mut s, KeyCode::End), Effect::Redraw);
        assert_eq!(s.ui.selected_gpu, 4, "End: the last GPU");
        press(&mut s, KeyCode::Home);
        assert_eq!(s.ui.selected_gpu, 0, "Home: the first");
        // In the help they scroll it to its end and back to the top.
        press(&mut s, KeyCode::Char('?'));
        s.ui.help_scroll_limit.set(23);
        press(&mut s, KeyCode::End);
        assert_eq!(s.ui.help_scroll, 23);
        press(&mut s, KeyCode::Home);
        assert_eq!(s.ui.help_scroll, 0);
        // The help's words for the page keys are what they do.
        let rows = Keymap::default().help_rows();
        let says = |keys: &str| {
            rows.iter()
                .find(|r| r.0 == keys)
                .map(|r| r.1.to_string())
                .unwrap_or_default()
        };
        assert!(says("PgDn").contains(&format!("down {PAGE_ROWS} rows")));
        assert!(says("PgUp").contains(&format!("up {PAGE_ROWS} rows")));
        assert!(says("Home").starts_with("first row"));
        assert!(says("End").starts_with("last row"));
    }

    #[test]
    fn number_keys_select_the_gpu_of_that_number_and_say_when_there_is_none() {
        let mut s = state_with_gpus(3);
        assert_eq!(press(&mut s, KeyCode::Char('2')), Effect::Redraw);
        assert_eq!(s.ui.selected_gpu, 2, "2 is GPU 2, as on screen");
        press(&mut s, KeyCode::Char('0'));
        assert_eq!(s.ui.selected_gpu, 0);
        press(&mut s, KeyCode::Char('2'));
        assert_eq!(press(&mut s, KeyCode::Char('9')), Effect::Redraw);
        assert_eq!(s.ui.selected_gpu, 2);
        assert_eq!(s.ui.notice.as_deref(), Some("no GPU 9: GPUs here: 0, 1, 2"));
        press(&mut s, KeyCode::Tab);
        assert_eq!(s.ui.notice, None, "the next key clears the notice");
        press(&mut s, KeyCode::BackTab);
        press(&mut s, KeyCode::Up);
        assert_eq!(s.ui.selected_gpu, 1);
        press(&mut s, KeyCode::PageDown);
        assert_eq!(s.ui.selected_gpu, 2, "clamped at the last GPU");
    }

    /// A view of segments at `starts`, each of `blocks` 1 MiB blocks.
    fn map(starts: &[u64], blocks: u64) -> crate::app::state::AllocatorView {
        use crate::alloc::{BlockInfo, BlockState, PoolKind, SegmentInfo};
        const MIB: u64 = 1 << 20;
        let layout = starts
            .iter()
            .map(|&address| SegmentInfo {
                device: 0,
                address,
                total_size: blocks * MIB,
                allocated_size: blocks * MIB,
                active_size: blocks * MIB,
                requested_size: blocks * MIB,
                stream: 0,
                segment_type: PoolKind::Large,
                segment_pool_id: (0, 0),
                is_expandable: false,
                blocks: (0..blocks)
                    .map(|b| BlockInfo {
                        address: address + b * MIB,
                        size: MIB,
                        requested_size: MIB,
                        state: BlockState::ActiveAllocated,
                    })
                    .collect(),
            })
            .collect();
        crate::app::state::AllocatorView::new(
            "t".into(),
            None,
            crate::alloc::DeviceStats::default(),
            layout,
        )
    }

    fn sample_with(s: &mut AppState, view: crate::app::state::AllocatorView) {
        let now = s.now_ms + 1000;
        s.apply_sample(
            now,
            vec![GpuReading::Ok(GpuSample::unknown(0, "GPU"))],
            BTreeMap::from([(0, view)]),
        );
    }

    #[test]
    fn segment_map_moves_by_row_block_and_page_and_follows_the_block_by_address() {
        const GIB: u64 = 1 << 30;
        let starts: Vec<u64> = (1..=30).map(|i| i * GIB).collect();
        let mut s = AppState::new(StatusState::default());
        sample_with(&mut s, map(&starts, 4));
        s.ui.focus = Pane::Segments;
        press(&mut s, KeyCode::Down);
        assert_eq!(s.ui.selected_block, 4, "↓: the next segment row");
        press(&mut s, KeyCode::Right);
        press(&mut s, KeyCode::Right);
        assert_eq!(s.ui.selected_block, 6, "→: the next block");
        press(&mut s, KeyCode::Down);
        assert_eq!(s.ui.selected_block, 10, "↓ keeps the place in the row");
        press(&mut s, KeyCode::PageDown);
        assert_eq!(s.ui.selected_block, 12 * 4 + 2, "PgDn: ten rows");
        press(&mut s, KeyCode::PageDown);
        press(&mut s, KeyCode::PageDown);
        assert_eq!(s.ui.selected_block, 29 * 4 + 2, "stops at the last row");
        press(&mut s, KeyCode::Up);
        assert_eq!(s.ui.selected_block, 28 * 4 + 2);
        let address = starts[28] + 2 * (1 << 20);
        // Two segments appear before it: the selection follows the block.
        let mut more = vec![GIB / 4, GIB / 2];
        more.extend(&starts);
        sample_with(&mut s, map(&more, 4));
        assert_eq!(s.ui.selected_block, 30 * 4 + 2);
        let view = s.gpus[0].allocator.as_ref().expect("view");
        let block = view
            .layout
            .iter()
            .flat_map(|g| &g.blocks)
            .nth(s.ui.selected_block);
        assert_eq!(block.map(|b| b.address), Some(address));
    }

    #[test]
    fn help_is_modal_and_closes_with_escape_or_question_mark() {
        let mut s = state_with_gpus(1);
        press(&mut s, KeyCode::Char('?'));
        assert_eq!(s.ui.overlay, Overlay::Help);
        assert_eq!(
            press(&mut s, KeyCode::Tab),
            Effect::None,
            "Tab is ignored behind help"
        );
        assert_eq!(s.ui.focus, Pane::Gpus);
        press(&mut s, KeyCode::Esc);
        assert_eq!(s.ui.overlay, Overlay::None);
        press(&mut s, KeyCode::F(1));
        press(&mut s, KeyCode::Char('?'));
        assert_eq!(s.ui.overlay, Overlay::None);
        assert_eq!(press(&mut s, KeyCode::Char('q')), Effect::Quit);
    }

    #[test]
    fn slash_edits_the_filter_until_enter_and_escape_clears_it() {
        let mut s = state_with_gpus(1);
        press(&mut s, KeyCode::Char('/'));
        assert!(s.ui.process_filter.is_editing());
        assert_eq!(s.ui.focus, Pane::Processes);
        for c in "pyq".chars() {
            press(&mut s, KeyCode::Char(c));
        }
        press(&mut s, KeyCode::Backspace);
        assert_eq!(s.ui.process_filter, ProcessFilter::Editing("py".into()));
        assert_eq!(
            s.ui.overlay,
            Overlay::None,
            "'?' typed in the filter would not open help"
        );
        press(&mut s, KeyCode::Enter);
        assert_eq!(s.ui.process_filter, ProcessFilter::Set("py".into()));
        assert_eq!(
            press(&mut s, KeyCode::Char('q')),
            Effect::Quit,
            "keys act again"
        );
        press(&mut s, KeyCode::Esc);
        assert_eq!(s.ui.process_filter.text(), "");
    }

    #[test]
    fn a_full_process_filter_says_so_and_keeps_what_it_holds() {
        let mut s = state_with_gpus(1);
        press(&mut s, KeyCode::Char('/'));
        for _ in 0..MAX_FILTER_CHARS {
            press(&mut s, KeyCode::Char('x'));
        }
        assert_eq!(s.ui.notice, None, "not full until the next character");
        press(&mut s, KeyCode::Char('y'));
        assert_eq!(s.ui.process_filter.text(), "x".repeat(MAX_FILTER_CHARS));
        assert_eq!(
            s.ui.notice.as_deref(),
            Some("the process filter holds 64 characters: the rest is not typed (Bksp deletes)")
        );
        // The key it names deletes, and the notice goes with the next key.
        press(&mut s, KeyCode::Backspace);
        assert_eq!(s.ui.notice, None);
        assert_eq!(s.ui.process_filter.text().len(), MAX_FILTER_CHARS - 1);
        press(&mut s, KeyCode::Char('y'));
        assert_eq!(s.ui.notice, None);
        assert!(s.ui.process_filter.text().ends_with('y'));
        assert!(s.ui.process_filter.is_editing());
        // The help's row for `/` gives the same bound.
        assert!(
            Action::StartFilter
                .describe()
                .contains(&format!("{MAX_FILTER_CHARS} max")),
            "{}",
            Action::StartFilter.describe()
        );
    }

    #[test]
    fn zoom_steps_stay_within_the_windows() {
        let mut s = state_with_gpus(1);
        for _ in 0..10 {
            press(&mut s, KeyCode::Char('+'));
        }
        assert_eq!(s.ui.zoom, 0);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("shortest window (its title's)"), "{said}");
        for _ in 0..10 {
            press(&mut s, KeyCode::Char('-'));
        }
        assert_eq!(s.ui.zoom, ZOOM_WINDOWS_S.len() - 1);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("longest window (its title's)"), "{said}");
    }

    #[test]
    fn pause_freezes_the_timeline_at_the_current_time() {
        let mut s = state_with_gpus(1);
        s.now_ms = 12_000;
        press(&mut s, KeyCode::Char('p'));
        assert_eq!(s.ui.paused_at_ms, Some(12_000));
        press(&mut s, KeyCode::Char('p'));
        assert_eq!(s.ui.paused_at_ms, None);
    }

    #[test]
    fn tab_cycles_focus_through_every_pane() {
        let mut s = state_with_gpus(1);
        let mut seen = vec![s.ui.focus];
        for _ in 0..Pane::ALL.len() {
            press(&mut s, KeyCode::Tab);
            seen.push(s.ui.focus);
        }
        assert_eq!(seen.first(), seen.last());
        for p in Pane::ALL {
            assert!(seen.contains(&p));
        }
        press(&mut s, KeyCode::BackTab);
        assert_eq!(s.ui.focus, Pane::Processes);
    }

    #[test]
    fn panel_keys_act_only_while_the_panel_is_open() {
        let mut s = state_with_gpus(1);
        press(&mut s, KeyCode::Char('+'));
        assert_eq!(s.ui.zoom, 0, "closed: + zooms the timeline");
        assert_eq!(s.stress.size_index, crate::app::stress::DEFAULT_SIZE);
        press(&mut s, KeyCode::F(2));
        assert!(s.ui.stress_open);
        press(&mut s, KeyCode::Char('+'));
        assert_eq!(s.stress.size_index, crate::app::stress::DEFAULT_SIZE + 1);
        assert_eq!(s.ui.zoom, 0, "open: + steps the size");
        assert_eq!(press(&mut s, KeyCode::Char('q')), Effect::Quit);
        press(&mut s, KeyCode::Esc);
        assert!(!s.ui.stress_open);
    }

    /// One GPU per entry of `gpus`, each with its (pid, GiB) processes
    /// (command `cmd-PID`), sampled through `backend` ("nvml": live).
    fn state_with_memory(backend: &str, gpus: &[&[(u32, u64)]]) -> AppState {
        let mut s = AppState::new(StatusState {
            backend: backend.to_string(),
            ..StatusState::default()
        });
        s.apply_sample(0, readings_of(gpus), BTreeMap::new());
        s
    }

    fn readings_of(gpus: &[&[(u32, u64)]]) -> Vec<GpuReading> {
        gpus.iter()
            .enumerate()
            .map(|(i, procs)| {
                let mut g = GpuSample::unknown(i as u32, "GPU");
                g.processes = Some(
                    procs
                        .iter()
                        .map(|&(pid, gib)| crate::device::GpuProcess {
                            command: Some(format!("cmd-{pid}")),
                            ..crate::device::GpuProcess::new(pid, Some(gib << 30))
                        })
                        .collect(),
                );
                GpuReading::Ok(g)
            })
            .collect()
    }

    /// The pids of the process lines, in the list's order.
    fn listed_pids(s: &AppState) -> Vec<u32> {
        s.process_lines()
            .iter()
            .filter_map(|l| match l {
                ProcessLine::Process(r) => Some(r.process.pid),
                _ => None,
            })
            .collect()
    }

    /// The pid of the selected line, if it is a process's.
    fn selected_pid(s: &AppState) -> Option<u32> {
        let lines = s.process_lines();
        match s.selected_process_index(&lines).map(|i| &lines[i]) {
            Some(ProcessLine::Process(r)) => Some(r.process.pid),
            _ => None,
        }
    }

    fn shift(s: &mut AppState, c: char) -> Effect {
        handle_key(
            s,
            &Keymap::default(),
            KeyEvent::new(KeyCode::Char(c), KeyModifiers::SHIFT),
        )
    }

    #[test]
    fn the_process_list_is_sorted_by_memory_largest_first_and_s_steps_the_column() {
        // Two GPUs, listed by the driver GPU by GPU: 30 (1 GiB), 10 (5
        // GiB) on GPU 0, 20 (3 GiB) on GPU 1.
        let mut s = state_with_memory("sim", &[&[(30, 1), (10, 5)], &[(20, 3)]]);
        assert_eq!(listed_pids(&s), [10, 20, 30], "memory, largest first");
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.ui.process_sort.column, SortColumn::Sm);
        assert_eq!(
            listed_pids(&s),
            [10, 30, 20],
            "none known: by GPU, then pid"
        );
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.ui.process_sort.column, SortColumn::Cpu);
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.ui.process_sort.column, SortColumn::HostMemory);
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.ui.process_sort.column, SortColumn::Pid);
        assert_eq!(listed_pids(&s), [10, 20, 30], "pid, smallest first");
        shift(&mut s, 'S');
        assert_eq!(listed_pids(&s), [30, 20, 10], "S reverses");
        press(&mut s, KeyCode::Char('s'));
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.ui.process_sort.column, SortColumn::Gpu);
        assert_eq!(listed_pids(&s), [10, 30, 20], "GPU, then pid");
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(s.ui.process_sort.column, SortColumn::Command);
        assert_eq!(listed_pids(&s), [10, 20, 30], "cmd-10 < cmd-20 < cmd-30");
        press(&mut s, KeyCode::Char('s'));
        assert_eq!(
            s.ui.process_sort,
            ProcessSort::default(),
            "back to memory ▼"
        );
        // The per-GPU remainder stays after the processes whatever the order.
        let mut g = GpuSample::unknown(0, "GPU");
        g.memory_used = Some(10 << 30);
        g.processes = Some(Vec::new());
        s.apply_sample(1000, vec![GpuReading::Ok(g)], BTreeMap::new());
        assert!(matches!(
            s.process_lines().last(),
            Some(ProcessLine::Unattributed { .. })
        ));
    }

    #[test]
    fn the_selection_stays_on_its_process_across_re_sorts() {
        let mut s = state_with_memory("sim", &[&[(30, 1), (10, 5)], &[(20, 3)]]);
        s.ui.focus = Pane::Processes;
        s.ui.process_lines_shown.set(3);
        press(&mut s, KeyCode::Down);
        assert_eq!(selected_pid(&s), Some(20), "the second line: 5, 3, 1 GiB");
        while s.ui.process_sort.column != SortColumn::Pid {
            press(&mut s, KeyCode::Char('s'));
            assert_eq!(selected_pid(&s), Some(20));
        }
        assert_eq!(listed_pids(&s), [10, 20, 30]);
        assert_eq!(selected_pid(&s), Some(20));
        shift(&mut s, 'S');
        assert_eq!(listed_pids(&s), [30, 20, 10]);
        assert_eq!(selected_pid(&s), Some(20));
        // Moved to the end and re-sorted: still pid 10, now on top.
        press(&mut s, KeyCode::End);
        assert_eq!(selected_pid(&s), Some(10));
        shift(&mut s, 'S');
        assert_eq!(listed_pids(&s), [10, 20, 30]);
        assert_eq!(selected_pid(&s), Some(10));
    }

    #[test]
    fn a_sample_that_reorders_the_list_keeps_the_selection_and_the_view_on_its_process() {
        let mut s = state_with_memory("sim", &[&[(10, 5), (20, 3), (30, 1)]]);
        s.ui.focus = Pane::Processes;
        // One line in view: the view follows the selection.
        s.ui.process_lines_shown.set(1);
        press(&mut s, KeyCode::Down);
        assert_eq!(selected_pid(&s), Some(20));
        assert_eq!(s.ui.process_scroll, 1);
        // Pid 20 grows to the most memory: first by memory now.
        s.apply_sample(
            1000,
            readings_of(&[&[(10, 5), (20, 9), (30, 1)]]),
            BTreeMap::new(),
        );
        assert_eq!(listed_pids(&s), [20, 10, 30]);
        assert_eq!(selected_pid(&s), Some(20));
        let lines = s.process_lines();
        assert_eq!(s.process_view_first(&lines, 1), 0, "its line is drawn");
        // Down from it goes to the line below it now, not below its old row.
        press(&mut s, KeyCode::Down);
        assert_eq!(selected_pid(&s), Some(10));
        // Its process ends: the line that takes its row is selected.
        s.apply_sample(1000, readings_of(&[&[(20, 9), (30, 1)]]), BTreeMap::new());
        assert_eq!(selected_pid(&s), Some(30));
    }

    #[test]
    fn k_on_a_simulated_gpus_process_is_refused_and_opens_no_prompt() {
        let mut s = state_with_memory("sim", &[&[(10, 5)]]);
        s.ui.focus = Pane::Processes;
        assert_eq!(shift(&mut s, 'K'), Effect::Redraw);
        assert_eq!(s.ui.signal_prompt, None);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(
            said.contains("pid 10 is simulated (its pid is made up): never signalled"),
            "{said}"
        );
        // Nor does y then send anything.
        assert_eq!(press(&mut s, KeyCode::Char('y')), Effect::Redraw);
        // A snapshot's processes are no live ones either.
        let mut s = state_with_memory("snapshot", &[&[(10, 5)]]);
        s.ui.focus = Pane::Processes;
        shift(&mut s, 'K');
        assert_eq!(s.ui.signal_prompt, None);
    }

    fn probe_row(pid: u32, host_command: Option<&str>) -> crate::app::source::ProbeRow {
        crate::app::source::ProbeRow {
            socket: format!("/tmp/vramtop-u/{pid}.sock"),
            pid: Some(pid),
            connected: true,
            status: "attached".to_string(),
            problem: None,
            command: Some("train.py".to_string()),
            gpus: vec![0],
            protocol: 2,
            ooms: 0,
            serves_snapshots: true,
            rank: None,
            host_command: host_command.map(str::to_string),
        }
    }

    #[test]
    fn k_on_a_probed_process_on_the_simulated_gpu_asks_with_its_proc_command() {
        let mut s = state_with_memory("sim", &[&[(10, 5), (20, 3)]]);
        s.probes.rows = vec![probe_row(20, Some("python -m vramtop_probe train.py"))];
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Down);
        assert_eq!(shift(&mut s, 'K'), Effect::Redraw);
        let target = only_target(&s).expect("a probed pid is real: a prompt");
        assert_eq!(
            (target.pid, target.command.as_str()),
            (20, "python -m vramtop_probe train.py"),
            "the command /proc gave, which the shell checks again before sending"
        );
        // The prompt names it as its line does, not by the interpreter's
        // path that /proc's command line starts with.
        assert_eq!(target.name(), "cmd-20");
        // The simulated one beside it is still refused.
        s.ui.signal_prompt = None;
        press(&mut s, KeyCode::Up);
        shift(&mut s, 'K');
        assert_eq!(s.ui.signal_prompt, None);
        // A probe whose pid is only the hello's (another namespace's): refused.
        let mut s = state_with_memory("sim", &[&[(20, 3)]]);
        s.probes.rows = vec![probe_row(20, None)];
        s.ui.focus = Pane::Processes;
        shift(&mut s, 'K');
        assert_eq!(s.ui.signal_prompt, None);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("pid 20 is the probe's own number"), "{said}");
    }

    /// The process the open signal prompt is about, when it is about one
    /// selected process.
    fn only_target(s: &AppState) -> Option<SignalTarget> {
        match s.ui.signal_prompt.as_ref() {
            Some(p) if !p.is_tagged() && p.targets.len() == 1 => p.targets.first().cloned(),
            _ => None,
        }
    }

    #[test]
    fn k_asks_and_only_y_9_or_i_send_the_signal_as_an_effect() {
        let mut s = state_with_memory("nvml", &[&[(10, 5), (20, 3)]]);
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Down);
        assert_eq!(shift(&mut s, 'K'), Effect::Redraw);
        let target = only_target(&s).expect("a prompt");
        assert_eq!(
            (target.pid, target.gpus.as_slice(), target.command.as_str()),
            (20, [0].as_slice(), "cmd-20")
        );
        assert_eq!(target.used_memory, Some(3 << 30));
        // y sends SIGTERM to the process the prompt named.
        assert_eq!(
            press(&mut s, KeyCode::Char('y')),
            Effect::Signal {
                signal: Signal::Term,
                targets: vec![target.clone()]
            }
        );
        assert_eq!(s.ui.signal_prompt, None, "answered, the prompt closes");
        shift(&mut s, 'K');
        assert_eq!(
            press(&mut s, KeyCode::Char('9')),
            Effect::Signal {
                signal: Signal::Kill,
                targets: vec![target.clone()]
            }
        );
        // i interrupts it (a PyTorch job can catch it and save).
        shift(&mut s, 'K');
        assert_eq!(
            press(&mut s, KeyCode::Char('i')),
            Effect::Signal {
                signal: Signal::Int,
                targets: vec![target]
            }
        );
    }

    #[test]
    fn k_on_a_process_on_several_gpus_targets_all_of_them_with_their_memory_summed() {
        let mut s = state_with_memory("nvml", &[&[(10, 5)], &[(11, 1)], &[(10, 2)], &[(10, 1)]]);
        s.ui.focus = Pane::Processes;
        shift(&mut s, 'K');
        let target = only_target(&s).expect("a prompt");
        assert_eq!(target.pid, 10);
        assert_eq!(target.gpus, [0, 2, 3]);
        assert_eq!(target.used_memory, Some(8 << 30));
        assert_eq!(target.gpus_named(), "GPUs 0, 2, 3");
    }

    #[test]
    fn the_signal_prompt_cancels_on_n_esc_enter_and_any_other_key_sending_nothing() {
        let mut s = state_with_memory("nvml", &[&[(10, 5)]]);
        s.ui.focus = Pane::Processes;
        for code in [
            KeyCode::Char('n'),
            KeyCode::Esc,
            KeyCode::Enter,
            KeyCode::Char('K'),
            KeyCode::Char('q'),
        ] {
            shift(&mut s, 'K');
            assert!(s.ui.signal_prompt.is_some());
            assert_eq!(press(&mut s, code), Effect::Redraw, "{code:?}");
            assert_eq!(s.ui.signal_prompt, None, "{code:?} closes it");
            assert_eq!(
                s.ui.notice.as_deref(),
                Some("cancelled: nothing sent to 10"),
                "{code:?}"
            );
        }
        // Ctrl-C still quits from the prompt, sending nothing.
        shift(&mut s, 'K');
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(handle_key(&mut s, &Keymap::default(), ctrl_c), Effect::Quit);
    }

    #[test]
    fn k_refuses_vramtops_own_pid_pid_0_and_a_process_proc_does_not_show() {
        let own = std::process::id();
        let mut s = state_with_memory("nvml", &[&[(own, 5), (0, 4), (77, 3)]]);
        s.ui.focus = Pane::Processes;
        // The third line, pid 77: its command unreadable here.
        let mut readings = readings_of(&[&[(own, 5), (0, 4), (77, 3)]]);
        if let GpuReading::Ok(g) = &mut readings[0]
            && let Some(p) = g.processes.as_mut().and_then(|p| p.get_mut(2))
        {
            p.command = None;
        }
        s.apply_sample(1000, readings, BTreeMap::new());
        for (line, says) in [
            (0, "is vramtop's own"),
            (1, "names no single process"),
            (2, "is not in /proc here"),
        ] {
            press(&mut s, KeyCode::Home);
            for _ in 0..line {
                press(&mut s, KeyCode::Down);
            }
            assert_eq!(shift(&mut s, 'K'), Effect::Redraw);
            assert_eq!(s.ui.signal_prompt, None, "line {line}");
            let said = s.ui.notice.clone().unwrap_or_default();
            assert!(said.starts_with("K: "), "{said}");
            assert!(said.contains(says), "{said}");
        }
    }

    #[test]
    fn k_outside_processes_says_the_fewest_presses_that_move_there() {
        for (from, way) in [
            (Pane::Gpus, "Shift-Tab moves there"),
            (Pane::Breakdown, "Shift-Tab twice moves there"),
            (Pane::Timeline, "Tab 3 times moves there"),
            (Pane::Fragmentation, "Tab twice moves there"),
            (Pane::Segments, "Tab moves there"),
        ] {
            let mut s = state_with_memory("nvml", &[&[(10, 5)]]);
            s.ui.focus = from;
            shift(&mut s, 'K');
            assert_eq!(s.ui.signal_prompt, None);
            let said = s.ui.notice.clone().unwrap_or_default();
            assert!(
                said.contains(&format!("Processes ({way})")),
                "{from:?}: {said}"
            );
        }
        // And it is the truth: Shift-Tab from GPUs lands there.
        let mut s = state_with_memory("nvml", &[&[(10, 5)]]);
        s.ui.focus = Pane::Gpus;
        let back = KeyEvent::new(KeyCode::BackTab, KeyModifiers::SHIFT);
        handle_key(&mut s, &Keymap::default(), back);
        assert_eq!(s.ui.focus, Pane::Processes);
    }

    #[test]
    fn arrows_outside_segments_say_the_way_to_segments() {
        let mut s = state_with_memory("nvml", &[&[(10, 5)]]);
        s.ui.focus = Pane::Gpus;
        press(&mut s, KeyCode::Left);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(
            said.contains("Segments (Shift-Tab twice moves there)"),
            "{said}"
        );
    }

    #[test]
    fn a_signals_outcome_is_one_status_line() {
        let mut s = state_with_memory("nvml", &[&[(10, 5)]]);
        let target = SignalTarget {
            pid: 10,
            gpus: vec![0],
            command: "python train.py".to_string(),
            shown: None,
            used_memory: None,
        };
        for (outcome, said) in [
            (SignalOutcome::Sent, "sent SIGTERM to 10 python train.py"),
            (
                SignalOutcome::NotPermitted,
                "SIGTERM to 10: not yours: permission denied",
            ),
            (SignalOutcome::Gone, "SIGTERM to 10: already gone"),
        ] {
            on_signal_result(&mut s, Signal::Term, &[(target.clone(), outcome)]);
            assert_eq!(s.ui.notice.as_deref(), Some(said));
        }
    }

    fn tagged_pids(s: &AppState) -> Vec<u32> {
        s.ui.process_tags.iter().map(|t| t.pid).collect()
    }

    #[test]
    fn space_tags_and_untags_the_selected_process_only_in_processes() {
        let mut s = state_with_memory("nvml", &[&[(10, 5), (20, 3), (30, 1)]]);
        s.ui.focus = Pane::Gpus;
        assert_eq!(press(&mut s, KeyCode::Char(' ')), Effect::Redraw);
        assert!(s.ui.process_tags.is_empty(), "not outside Processes");
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(
            said.starts_with("Space: tags a process in Processes"),
            "{said}"
        );
        assert!(said.contains("Shift-Tab moves there"), "{said}");
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char(' '));
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(tagged_pids(&s), [10, 20]);
        assert_eq!(
            s.ui.process_tags[0].command.as_deref(),
            Some("cmd-10"),
            "tagged with the command the shell checks"
        );
        // Space again on a tagged line untags it alone.
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(tagged_pids(&s), [10]);
        // Esc in Processes untags all; then, with none, does nothing.
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(press(&mut s, KeyCode::Esc), Effect::Redraw);
        assert!(s.ui.process_tags.is_empty());
        assert_eq!(press(&mut s, KeyCode::Esc), Effect::None);
    }

    #[test]
    fn esc_clears_the_filter_before_the_tags_and_leaves_tags_elsewhere() {
        let mut s = state_with_memory("nvml", &[&[(10, 5), (20, 3)]]);
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char(' '));
        s.ui.process_filter = crate::app::state::ProcessFilter::Set("cmd".to_string());
        press(&mut s, KeyCode::Esc);
        assert_eq!(s.ui.process_filter.text(), "");
        assert_eq!(tagged_pids(&s), [10], "the filter went first");
        s.ui.focus = Pane::Gpus;
        press(&mut s, KeyCode::Esc);
        assert_eq!(tagged_pids(&s), [10], "Esc untags in Processes only");
    }

    #[test]
    fn a_tag_stays_on_its_process_across_a_re_sort_and_a_sample() {
        let mut s = state_with_memory("nvml", &[&[(10, 5), (20, 3), (30, 1)]]);
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(tagged_pids(&s), [20]);
        shift(&mut s, 'S');
        assert_eq!(listed_pids(&s), [30, 20, 10]);
        s.apply_sample(
            1000,
            readings_of(&[&[(10, 5), (20, 9), (30, 1)]]),
            BTreeMap::new(),
        );
        assert_eq!(tagged_pids(&s), [20], "still pid 20, wherever it sorts");
        assert!(s.ui.is_tagged(&crate::device::GpuProcess {
            command: Some("cmd-20".to_string()),
            ..crate::device::GpuProcess::new(20, None)
        }));
    }

    #[test]
    fn a_tag_is_dropped_when_its_process_ends_or_its_pid_runs_another_command() {
        let mut s = state_with_memory("nvml", &[&[(10, 5), (20, 3)]]);
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char(' '));
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(tagged_pids(&s), [10, 20]);
        // Pid 10 ends; pid 20 is reused by another command.
        let mut readings = readings_of(&[&[(20, 3)]]);
        if let GpuReading::Ok(g) = &mut readings[0]
            && let Some(p) = g.processes.as_mut().and_then(|p| p.first_mut())
        {
            p.command = Some("another".to_string());
        }
        s.apply_sample(1000, readings, BTreeMap::new());
        assert!(s.ui.process_tags.is_empty());
        // The new pid 20 is not tagged: K asks about the selected line.
        shift(&mut s, 'K');
        let target = only_target(&s).expect("a prompt about the selected line");
        assert_eq!((target.pid, target.command.as_str()), (20, "another"));
    }

    #[test]
    fn k_with_tags_asks_about_all_of_them_and_sends_one_effect_naming_each() {
        let mut s = state_with_memory("nvml", &[&[(10, 5), (20, 3), (30, 1)], &[(30, 2)]]);
        s.ui.focus = Pane::Processes;
        // Tag 30 (first on GPU 0's last line) and 10; 20 stays untagged.
        press(&mut s, KeyCode::Char(' '));
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(tagged_pids(&s), [10, 30]);
        press(&mut s, KeyCode::Up);
        assert_eq!(selected_pid(&s), Some(20), "the selection is not tagged");
        assert_eq!(shift(&mut s, 'K'), Effect::Redraw);
        let prompt = s.ui.signal_prompt.clone().expect("a prompt");
        assert_eq!(prompt.tagged, 2);
        let pids: Vec<u32> = prompt.targets.iter().map(|t| t.pid).collect();
        assert_eq!(pids, [10, 30], "the tagged, not the selected");
        assert_eq!(prompt.targets[1].gpus, [0, 1]);
        assert_eq!(prompt.used_memory(), Some(8 << 30));
        assert_eq!(prompt.gpus_named(), "GPUs 0, 1");
        assert_eq!(
            press(&mut s, KeyCode::Char('9')),
            Effect::Signal {
                signal: Signal::Kill,
                targets: prompt.targets.clone(),
            }
        );
        // Cancelled, it says so of all of them.
        shift(&mut s, 'K');
        press(&mut s, KeyCode::Char('n'));
        assert_eq!(
            s.ui.notice.as_deref(),
            Some("cancelled: nothing sent to the 2 tagged processes")
        );
        // Outside Processes the notice counts them.
        s.ui.focus = Pane::Gpus;
        shift(&mut s, 'K');
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("signals the 2 processes tagged"), "{said}");
    }

    #[test]
    fn k_with_tags_leaves_out_those_it_may_not_signal_and_says_why() {
        let own = std::process::id();
        let mut s = state_with_memory("nvml", &[&[(10, 5), (own, 3)]]);
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char(' '));
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char(' '));
        shift(&mut s, 'K');
        let prompt = s.ui.signal_prompt.clone().expect("a prompt for pid 10");
        assert_eq!((prompt.targets.len(), prompt.tagged), (1, 2));
        assert_eq!(prompt.targets[0].pid, 10);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("1 tagged left out"), "{said}");
        assert!(said.contains("is vramtop's own"), "{said}");
    }

    #[test]
    fn k_with_only_simulated_processes_tagged_opens_no_prompt() {
        let mut s = state_with_memory("sim", &[&[(10, 5), (20, 3)]]);
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char(' '));
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Char(' '));
        assert_eq!(tagged_pids(&s), [10, 20], "tagging is only a mark");
        assert_eq!(shift(&mut s, 'K'), Effect::Redraw);
        assert_eq!(s.ui.signal_prompt, None);
        let said = s.ui.notice.clone().unwrap_or_default();
        assert!(
            said.contains("none of the 2 tagged can be signalled"),
            "{said}"
        );
        assert!(said.contains("is simulated"), "{said}");
        assert_eq!(press(&mut s, KeyCode::Char('y')), Effect::Redraw);
    }

    #[test]
    fn the_outcome_of_a_signal_to_several_says_how_many_got_it_and_why_not() {
        let mut s = state_with_memory("nvml", &[&[(10, 5)]]);
        let t = |pid| SignalTarget {
            pid,
            gpus: vec![0],
            command: format!("cmd-{pid}"),
            shown: None,
            used_memory: None,
        };
        on_signal_result(
            &mut s,
            Signal::Term,
            &[(t(1), SignalOutcome::Sent), (t(2), SignalOutcome::Sent)],
        );
        assert_eq!(s.ui.notice.as_deref(), Some("SIGTERM sent to 2 of 2"));
        on_signal_result(
            &mut s,
            Signal::Kill,
            &[
                (t(1), SignalOutcome::Sent),
                (t(2), SignalOutcome::NotPermitted),
                (t(3), SignalOutcome::Changed("other".to_string())),
                (t(4), SignalOutcome::Gone),
                (t(5), SignalOutcome::Failed("odd".to_string())),
            ],
        );
        assert_eq!(
            s.ui.notice.as_deref(),
            Some(
                "SIGKILL sent to 1 of 5 (2: not yours; 3: pid reused, not sent; \
                 4: already gone; 1 more not sent)"
            )
        );
    }

    #[test]
    fn enter_in_processes_opens_the_detail_of_the_selected_line_and_esc_or_enter_closes_it() {
        let mut s = state_with_processes();
        // Outside Processes Enter says where it acts, and opens nothing.
        assert_eq!(press(&mut s, KeyCode::Enter), Effect::Redraw);
        assert!(s.ui.process_detail.is_none());
        assert!(
            s.ui.notice
                .as_deref()
                .is_some_and(|n| n.starts_with("Enter: shows the process selected in Processes")),
            "{:?}",
            s.ui.notice
        );
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Down);
        assert_eq!(press(&mut s, KeyCode::Enter), Effect::Redraw);
        let detail = s.ui.process_detail.clone().expect("Enter opens the detail");
        assert_eq!((detail.process.pid, detail.gpu), (110, 1));
        // It takes the keys: ↓ scrolls it (nothing to scroll before it is
        // drawn past its end) and leaves the selection where it is.
        s.ui.detail_scroll_limit.set(3);
        assert_eq!(press(&mut s, KeyCode::Down), Effect::Redraw);
        assert_eq!(s.ui.process_detail.as_ref().map(|d| d.scroll), Some(1));
        assert_eq!(press(&mut s, KeyCode::End), Effect::Redraw);
        assert_eq!(s.ui.process_detail.as_ref().map(|d| d.scroll), Some(3));
        assert_eq!(press(&mut s, KeyCode::Down), Effect::None, "at its end");
        assert_eq!(selected_pid(&s), Some(110));
        // Keys of the panes behind it do nothing (`t` would flip the tree).
        assert_eq!(press(&mut s, KeyCode::Char('t')), Effect::None);
        assert!(s.ui.process_tree);
        // The help opens over it; Esc closes the help, then the detail.
        press(&mut s, KeyCode::Char('?'));
        assert_eq!(s.ui.overlay, Overlay::Help);
        press(&mut s, KeyCode::Esc);
        assert_eq!(s.ui.overlay, Overlay::None);
        assert!(s.ui.process_detail.is_some());
        press(&mut s, KeyCode::Esc);
        assert!(s.ui.process_detail.is_none());
        // Enter closes it too, and q quits from it as from the help.
        press(&mut s, KeyCode::Enter);
        assert!(s.ui.process_detail.is_some());
        press(&mut s, KeyCode::Enter);
        assert!(s.ui.process_detail.is_none());
        press(&mut s, KeyCode::Enter);
        assert_eq!(press(&mut s, KeyCode::Char('q')), Effect::Quit);
    }

    #[test]
    fn enter_on_a_line_that_is_no_process_says_so_and_opens_nothing() {
        let mut s = AppState::new(StatusState::default());
        let mut g = GpuSample::unknown(0, "GPU");
        g.memory_used = Some(4 << 30);
        g.processes = Some(vec![crate::device::GpuProcess::new(7, Some(1 << 30))]);
        s.apply_sample(0, vec![GpuReading::Ok(g)], BTreeMap::new());
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::End);
        assert!(matches!(
            s.process_lines().last(),
            Some(ProcessLine::Unattributed { .. })
        ));
        press(&mut s, KeyCode::Enter);
        assert!(s.ui.process_detail.is_none());
        assert!(
            s.ui.notice
                .as_deref()
                .is_some_and(|n| n.starts_with("Enter: this line is no process")),
            "{:?}",
            s.ui.notice
        );
    }

    #[test]
    fn the_detail_of_a_process_that_ends_says_when_and_is_back_if_it_is_listed_again() {
        let mut s = state_with_processes();
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Enter);
        assert_eq!(
            s.ui.process_detail.as_ref().map(|d| d.process.pid),
            Some(100)
        );
        assert_eq!(s.process_detail_facts().map(|f| f.gpus.len()), Some(1));
        // GPU 0 lists pid 100 no more.
        let gone: Vec<GpuReading> = (0..4)
            .map(|i| GpuReading::Ok(GpuSample::unknown(i, "GPU")))
            .collect();
        s.apply_sample(5000, gone.clone(), BTreeMap::new());
        s.apply_sample(6000, gone, BTreeMap::new());
        let facts = s.process_detail_facts().expect("the detail stays open");
        assert_eq!(facts.ended_ms, Some(5000), "when it was first missed");
        assert!(facts.gpus.is_empty());
        // Ended, nothing acts on it: K says so.
        assert_eq!(s.process_detail_keys(), Default::default());
        shift(&mut s, 'K');
        assert!(s.ui.signal_prompt.is_none());
        assert!(
            s.ui.notice
                .as_deref()
                .is_some_and(|n| n.contains("pid 100 has ended")),
            "{:?}",
            s.ui.notice
        );
        // Its pid running another command is not it.
        let reused = readings_of(&[&[(100, 1)]]);
        s.apply_sample(7000, reused, BTreeMap::new());
        assert_eq!(
            s.process_detail_facts().and_then(|f| f.ended_ms),
            Some(5000)
        );
    }

    #[test]
    fn k_in_the_detail_signals_its_process_not_the_tagged_ones() {
        let mut s = state_with_processes();
        s.status.backend = "nvml".to_string();
        let readings = readings_of(&[&[(100, 1)], &[(110, 2), (111, 3)]]);
        s.apply_sample(1000, readings, BTreeMap::new());
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Char(' '));
        // Sorted by memory: 111, 110, 100; 111 is tagged.
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Enter);
        let pid = s.ui.process_detail.as_ref().map(|d| d.process.pid);
        assert_eq!(pid, Some(110));
        assert!(s.process_detail_keys().signal);
        shift(&mut s, 'K');
        let prompt = s.ui.signal_prompt.clone().expect("K asks");
        assert_eq!(
            prompt.targets.iter().map(|t| t.pid).collect::<Vec<_>>(),
            [110]
        );
        assert!(!prompt.is_tagged());
    }

    #[test]
    fn a_probed_process_on_a_simulated_gpu_is_not_called_simulated_even_after_it_ended() {
        let mut s = state_with_processes();
        s.status.backend = "sim".to_string();
        s.probes.rows.push(crate::app::source::ProbeRow {
            socket: "/tmp/vramtop-test/100.sock".to_string(),
            pid: Some(100),
            connected: true,
            status: "attached".to_string(),
            problem: None,
            command: None,
            gpus: vec![0],
            protocol: 2,
            ooms: 0,
            serves_snapshots: true,
            rank: None,
            host_command: None,
        });
        s.ui.focus = Pane::Processes;
        press(&mut s, KeyCode::Enter);
        let facts = s.process_detail_facts().expect("open");
        assert!(facts.probe.is_some());
        assert!(!facts.simulated && !facts.recorded);
        // pid 110 has no probe: its pid is made up.
        press(&mut s, KeyCode::Esc);
        press(&mut s, KeyCode::Down);
        press(&mut s, KeyCode::Enter);
        assert!(s.process_detail_facts().is_some_and(|f| f.simulated));
        press(&mut s, KeyCode::Esc);
        press(&mut s, KeyCode::Up);
        press(&mut s, KeyCode::Enter);
        // The probe goes, and its process with it.
        s.probes.rows.clear();
        let gone: Vec<GpuReading> = (0..4)
            .map(|i| GpuReading::Ok(GpuSample::unknown(i, "GPU")))
            .collect();
        s.apply_sample(5000, gone, BTreeMap::new());
        let facts = s.process_detail_facts().expect("still open");
        assert_eq!(facts.ended_ms, Some(5000));
        assert!(!facts.simulated, "its pid was real");
    }
}
