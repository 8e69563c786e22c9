//! The process detail (Enter in Processes): which process it is about,
//! everything the dashboard knows about it gathered from the state, and
//! which keys act on it from there. Pure: `ui::process_detail` words and
//! draws it, `update` opens, scrolls and closes it.

use serde::Serialize;

use super::capture::{CaptureTarget, cannot_capture, capture_target};
use super::process_list::ProcessTag;
use super::source::ProbeRow;
use super::state::{AllocatorView, AppState, ProcessRow};
use crate::device::GpuProcess;

/// The open process detail: the process it is about (by pid and command,
/// as a tag holds it, so a pid reused by another command is not taken
/// for it), the GPU line it was opened on and how far it is scrolled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessDetail {
    pub process: ProcessTag,
    /// The NVML index of the line it was opened on.
    pub gpu: u32,
    /// When (ms, the dashboard's clock) the first sample that lists the
    /// process no more came: the detail then says it ended, and keeps
    /// what it last knew; `None` while it is listed.
    pub ended_ms: Option<u64>,
    /// Rows the detail is scrolled down.
    pub scroll: usize,
    /// A live probe was attached to it while the detail was open: its pid
    /// is real even on a simulated GPU, and still after the probe went.
    pub probed: bool,
}

impl ProcessDetail {
    /// The detail of the process on `row`.
    pub fn of(row: &ProcessRow, probed: bool) -> Self {
        ProcessDetail {
            process: ProcessTag::of(&row.process),
            gpu: row.gpu,
            ended_ms: None,
            scroll: 0,
            probed,
        }
    }
}

/// One GPU the process holds memory on, as the driver lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct DetailGpu<'a> {
    /// The NVML index.
    pub gpu: u32,
    pub process: &'a GpuProcess,
    /// Its allocator's allocated and reserved bytes on this GPU, where
    /// one is visible (`None` inside: the source could not say).
    pub allocator: Option<(Option<u64>, Option<u64>)>,
    /// Its allocator in full, where this GPU's panes show it now (the
    /// figures beyond allocated and reserved are only of that one).
    pub shown: Option<&'a AllocatorView>,
    /// It has an allocator `v` can show on this GPU (a probe's or a
    /// simulated training process's) that is not shown now.
    pub can_show: bool,
}

/// Everything the dashboard knows about the detail's process now.
#[derive(Debug, Clone, PartialEq)]
pub struct DetailFacts<'a> {
    pub pid: u32,
    /// Its lines, one per GPU it uses, the line it was opened on first;
    /// empty once it ended.
    pub gpus: Vec<DetailGpu<'a>>,
    /// The parent's pid and, where the parent is a GPU process too (the
    /// pane's "own CUDA context!"), its command as listed.
    pub parent: Option<(u32, Option<&'a str>)>,
    pub parent_on_gpu: bool,
    /// Its live probe, where one is attached.
    pub probe: Option<&'a ProbeRow>,
    /// Its pid is made up: a simulated GPU's process without a probe.
    pub simulated: bool,
    /// Its pid is of a recording or another machine, not a live process
    /// here (neither the driver's nor simulated).
    pub recorded: bool,
    pub tagged: bool,
    /// When the process was first seen gone (ms), see
    /// [`ProcessDetail::ended_ms`].
    pub ended_ms: Option<u64>,
}

impl DetailFacts<'_> {
    /// The process as listed on the line it was opened on (else its first).
    pub fn process(&self) -> Option<&GpuProcess> {
        self.gpus.first().map(|g| g.process)
    }
}

impl AppState {
    /// What the open process detail is about, gathered from the state;
    /// `None` while no detail is open.
    pub fn process_detail_facts(&self) -> Option<DetailFacts<'_>> {
        let detail = self.ui.process_detail.as_ref()?;
        let pid = detail.process.pid;
        let mut gpus: Vec<DetailGpu<'_>> = self
            .whole_gpu_processes()
            .filter(|(_, p)| detail.process.holds(p))
            .map(|(gpu, process)| {
                let shown = self
                    .gpus
                    .iter()
                    .filter(|g| g.index() == gpu)
                    .filter_map(|g| g.allocator.as_ref())
                    .find(|a| a.pid == Some(pid));
                let allocator = shown
                    .map(|a| (a.known_allocated(), a.known_reserved()))
                    .or_else(|| self.allocator_figures.get(&(gpu, pid)).copied());
                let can_show = shown.is_none() && self.allocator_pids_on(gpu).contains(&pid);
                DetailGpu {
                    gpu,
                    process,
                    allocator,
                    shown,
                    can_show,
                }
            })
            .collect();
        // The line it was opened on first (stable: the others in GPU order).
        gpus.sort_by_key(|g| g.gpu != detail.gpu);
        let process = gpus.first().map(|g| g.process);
        let parent_pid = process.and_then(|p| p.parent_pid).filter(|&pp| pp != pid);
        let parent_line =
            parent_pid.and_then(|pp| self.whole_gpu_processes().find(|(_, p)| p.pid == pp));
        let probe = self
            .probes
            .rows
            .iter()
            .find(|r| r.connected && r.pid == Some(pid));
        let live = self.processes_are_live() || detail.probed || probe.is_some();
        Some(DetailFacts {
            pid,
            parent: parent_pid.map(|pp| (pp, parent_line.and_then(|(_, p)| p.command.as_deref()))),
            parent_on_gpu: parent_line.is_some(),
            simulated: !live && self.status.backend == "sim",
            recorded: !live && self.status.backend != "sim",
            tagged: self.ui.process_tags.contains(&detail.process),
            ended_ms: detail.ended_ms,
            probe,
            gpus,
        })
    }

    /// After a sample: the open detail's process ended (no GPU lists it,
    /// or its pid runs another command) or is back.
    pub(super) fn follow_process_detail(&mut self) {
        let Some(detail) = self.ui.process_detail.as_ref() else {
            return;
        };
        let here = self
            .whole_gpu_processes()
            .any(|(_, p)| detail.process.holds(p));
        let probed = self.probes.attached_pids().contains(&detail.process.pid);
        let now = self.now_ms;
        if let Some(detail) = self.ui.process_detail.as_mut() {
            detail.probed |= probed;
            detail.ended_ms = match (here, detail.ended_ms) {
                (true, _) => None,
                (false, Some(t)) => Some(t),
                (false, None) => Some(now),
            };
        }
    }

    /// Which keys act on the open detail's process from the detail.
    pub fn process_detail_keys(&self) -> DetailKeys {
        let Some(facts) = self.process_detail_facts() else {
            return DetailKeys::default();
        };
        let pid = facts.pid;
        let signal = match (facts.ended_ms, facts.gpus.first()) {
            (None, Some(line)) => {
                super::update::signal_target(self, line.process, line.gpu).is_ok()
            }
            _ => false,
        };
        let capture = match capture_target(self) {
            Ok(CaptureTarget::Probe(row)) => row.pid == Some(pid) && cannot_capture(row).is_none(),
            Ok(CaptureTarget::Simulated { pid: p } | CaptureTarget::StressPanel { pid: p }) => {
                p == pid
            }
            Err(_) => false,
        };
        DetailKeys {
            signal,
            capture: capture && facts.ended_ms.is_none(),
            show_allocator: facts.ended_ms.is_none() && facts.gpus.iter().any(|g| g.can_show),
        }
    }
}

/// The keys that act on the detail's process from the detail (besides
/// those that close and scroll it), which it hints.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DetailKeys {
    /// `K`: a signal may be sent to it (a live process, not vramtop's).
    pub signal: bool,
    /// `c`: its allocator is the one shown, and can be captured.
    pub capture: bool,
    /// `v`: it has an allocator the dashboard does not show now.
    pub show_allocator: bool,
}
