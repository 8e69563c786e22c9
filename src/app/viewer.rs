//! The snapshot viewer's state (`vramtop open FILE`): a snapshot source for
//! the dashboard's app. The scrub engine ([`crate::snapshot::scrub`]) gives
//! the allocator state at a cursor; the viewer puts it into an ordinary
//! [`AppState`] (one "GPU" per snapshot device, its allocator view the state
//! at the cursor), so the dashboard's fragmentation and segment panes draw
//! it unchanged. Pure: keys in, state out, no terminal.

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crossterm::event::KeyEvent;
use serde::Serialize;

use super::keymap::{Action, CompareKey, DetailKey, Keymap, Scrolled};
use super::state::{AllocatorView, AppState, GpuState, History, Overlay, Pane, StatusState};
use super::timeline_range::{NoZoom, ZoomRange, zoom_range};
use super::update::{Effect, apply};
use crate::alloc::{BlockState, DeviceStats, PoolKind};
use crate::device::{GpuReading, GpuSample};
use crate::snapshot::Snapshot;
use crate::snapshot::diff::{CursorDiff, diff_cursors};
use crate::snapshot::peak::{At, AtError, Peaks, peaks};
use crate::snapshot::scrub::{DeviceScrub, EndMismatch, LastHeld, MarkKind, Scrub, ScrubState};
use crate::snapshot::sites::{
    Grouping, NoStackReason, SiteKey, Sites, group, site_key, sites_of_live_blocks,
    snapshot_no_stack_reason,
};
use crate::snapshot::summary::{OomMemory, cursors_at, segment_info};
use crate::snapshot::types::{Block, Segment};

/// Events a page key moves at least (and 1 % of the trace when that is more).
pub const PAGE_EVENTS: usize = 100;

/// Rows PgUp/PgDn scroll a popup by before it is first drawn.
const POPUP_PAGE_ROWS: isize = 10;

/// Rows a page key scrolls a popup that showed `rows` rows when last
/// drawn: a page less one row, which stays in view to keep the reader's
/// place; [`POPUP_PAGE_ROWS`] before it is drawn.
fn popup_page(rows: &Cell<usize>) -> isize {
    match rows.get() {
        0 => POPUP_PAGE_ROWS,
        rows => isize::try_from(rows.saturating_sub(1).max(1)).unwrap_or(POPUP_PAGE_ROWS),
    }
}

/// A viewer intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum ViewerAction {
    StepBack,
    StepForward,
    PageBack,
    PageForward,
    First,
    Last,
    NextOom,
    PrevOom,
    NextSegmentAlloc,
    PrevSegmentAlloc,
    NextEmptyCache,
    PrevEmptyCache,
    /// Jump to just after the next (previous) `snapshot` or `annotate`
    /// entry: the marks a training loop leaves once per iteration.
    NextMarker,
    PrevMarker,
    /// Select the first block of the next segment in the map.
    NextSegment,
    /// Select the first block of the selected block's segment, or of the
    /// one before when it is selected already.
    PrevSegment,
    /// Open (or close) the detail of the selected block.
    BlockDetail,
    CycleStream,
    CyclePool,
    /// Jump to the first cursor at the peak of allocated bytes.
    PeakAllocated,
    /// Jump to the first cursor at the peak of reserved bytes.
    PeakReserved,
    /// Jump to just after the biggest single allocation.
    BiggestAllocation,
    /// Open (or close) the sites pane.
    ToggleSites,
    /// In the sites pane: expand (or fold) the selected site.
    ExpandSite,
    /// Group the sites by the next mode.
    CycleGrouping,
    /// Show (or count only) the C++ frames of an expanded site.
    ToggleCppFrames,
    /// Mark the cursor as A.
    MarkA,
    /// Mark the cursor as B.
    MarkB,
    /// Open (or close) the comparison of A and B.
    Compare,
    /// Fit the timeline's y-axis to the trace's own range, or back to 0.
    ToggleZoom,
}

impl ViewerAction {
    /// Whether the action moves along, or looks into, the trace: while
    /// only the segments stage is read it waits for the trace.
    pub fn needs_trace(self) -> bool {
        use ViewerAction as V;
        match self {
            V::StepBack
            | V::StepForward
            | V::PageBack
            | V::PageForward
            | V::First
            | V::NextOom
            | V::PrevOom
            | V::NextSegmentAlloc
            | V::PrevSegmentAlloc
            | V::NextEmptyCache
            | V::PrevEmptyCache
            | V::NextMarker
            | V::PrevMarker
            | V::PeakAllocated
            | V::PeakReserved
            | V::BiggestAllocation
            | V::MarkA
            | V::MarkB
            | V::Compare
            | V::ToggleZoom => true,
            // The final state's blocks carry their stacks: the block
            // detail and the sites pane work without the trace.
            V::Last
            | V::NextSegment
            | V::PrevSegment
            | V::BlockDetail
            | V::CycleStream
            | V::CyclePool
            | V::ToggleSites
            | V::ExpandSite
            | V::CycleGrouping
            | V::ToggleCppFrames => false,
        }
    }

    /// For a key that moves back: the key that moves the same way
    /// forward. The hints offer the back key only where the forward one
    /// has nowhere to go, in its place, so the hint line names one
    /// direction of each move and changes only at the end of what lies
    /// ahead ([`ViewerState::hinted`]).
    pub fn forward_twin(self) -> Option<ViewerAction> {
        use ViewerAction as V;
        match self {
            V::StepBack => Some(V::StepForward),
            V::PageBack => Some(V::PageForward),
            V::First => Some(V::Last),
            V::PrevOom => Some(V::NextOom),
            V::PrevSegmentAlloc => Some(V::NextSegmentAlloc),
            V::PrevEmptyCache => Some(V::NextEmptyCache),
            V::PrevMarker => Some(V::NextMarker),
            _ => None,
        }
    }

    /// Whether the action is the sites pane's own, answered while the
    /// pane takes the keys ([`Keymap::sites_key_for`]).
    pub fn in_sites_pane(self) -> bool {
        self == ViewerAction::ExpandSite
    }

    pub fn describe(self) -> &'static str {
        match self {
            ViewerAction::StepBack => "one event back",
            ViewerAction::StepForward => "one event forward",
            ViewerAction::PageBack => "back 1% of the trace (at least 100 events)",
            ViewerAction::PageForward => "forward 1% of the trace (at least 100 events)",
            ViewerAction::First => "before the first event",
            ViewerAction::Last => "after the last event (the snapshot's own state)",
            ViewerAction::NextOom => "next OOM",
            ViewerAction::PrevOom => "previous OOM",
            ViewerAction::NextSegmentAlloc => "next segment_alloc or segment_map (new memory)",
            ViewerAction::PrevSegmentAlloc => "previous segment_alloc or segment_map",
            ViewerAction::NextEmptyCache => "next empty_cache point",
            ViewerAction::PrevEmptyCache => "previous empty_cache point",
            ViewerAction::NextMarker => "next snapshot/annotate entry (an iteration's end)",
            ViewerAction::PrevMarker => "previous snapshot/annotate entry",
            ViewerAction::NextSegment => "next segment in the map (its first block)",
            ViewerAction::PrevSegment => "this segment's first block, then the previous one's",
            ViewerAction::BlockDetail => "block detail and stack; on an OOM, the failed call's",
            ViewerAction::CycleStream => "filter by stream: all, then each stream",
            // "Each memory pool" only where the GPU has private ones (the
            // help's words define both kinds of pool).
            ViewerAction::CyclePool => "filter by pool: all, large, small, each memory pool",
            ViewerAction::PeakAllocated => "jump to the peak of allocated bytes",
            ViewerAction::PeakReserved => "jump to the peak of reserved bytes",
            ViewerAction::BiggestAllocation => {
                "jump to just after the biggest allocation in the trace"
            }
            // The help adds the pane's keys ([`Keymap::describe_viewer`]).
            ViewerAction::ToggleSites => "sites pane: memory by site",
            ViewerAction::ExpandSite => "sites pane: expand / fold the site; OOM row: its stack",
            ViewerAction::CycleGrouping => "next grouping: user frame, python frame, file:line, …",
            ViewerAction::ToggleCppFrames => "in an expanded site: show or count C++ frames",
            ViewerAction::MarkA => "mark the cursor as A (for A/B)",
            ViewerAction::MarkB => "mark the cursor as B",
            ViewerAction::Compare => "compare A and B (and what was allocated between)",
            // Short: a longer row widened the help's keys column past
            // where the definitions fit beside it.
            ViewerAction::ToggleZoom => "timeline: zoom to the trace's own range / from 0 B",
        }
    }
}

/// What `p` keeps of the segment map. PyTorch's allocator has two size
/// classes, its large and small pools, in each memory pool: the default
/// one and the private pools of CUDA graphs and `MemPool`s, each with its
/// own segments, whose free bytes serve only its own allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolFilter {
    /// One size class, in every memory pool.
    Size(PoolKind),
    /// One memory pool (its `segment_pool_id`: `(0, 0)` the default
    /// one, else a private one), both size classes.
    Memory((i64, i64)),
}

impl PoolFilter {
    /// Whether a segment of size class `kind` in memory pool `pool_id`
    /// passes.
    pub fn keeps(self, kind: PoolKind, pool_id: (i64, i64)) -> bool {
        match self {
            PoolFilter::Size(k) => kind == k,
            PoolFilter::Memory(id) => pool_id == id,
        }
    }
}

/// The viewer: the snapshot, its scrub engine, a cursor per device, the
/// filters, and the dashboard state the panes draw.
#[derive(Debug, Clone)]
pub struct ViewerState {
    /// The file name as shown.
    pub file: String,
    pub scrub: Scrub,
    /// Per device (index into `scrub.devices`): events applied, 0…=N.
    pub cursors: Vec<usize>,
    /// Only segments of this stream are shown.
    pub stream_filter: Option<u64>,
    /// Only segments of this pool are shown.
    pub pool_filter: Option<PoolFilter>,
    /// The block-detail overlay is open.
    pub detail_open: bool,
    /// The open detail is the failed request's of the OOM event at the
    /// cursor (`Enter` on an OOM), not the selected block's.
    pub detail_oom: bool,
    /// The selected block's address, kept while the cursor moves.
    pub selected_address: Option<u64>,
    /// The segments at the cursor after the filters (with frames), in
    /// the order the segment pane lists them.
    pub segments: Vec<Segment>,
    /// Segments at the cursor before the filters: none, and an empty map
    /// is an allocator holding no memory, whatever the filters.
    pub unfiltered_segments: usize,
    /// The dashboard state the reused panes draw (its `gpus` are the
    /// snapshot's devices).
    pub app: AppState,
    /// Per device (index into `scrub.devices`): the trace's peaks.
    pub peaks: Vec<Peaks>,
    /// Per device (index into `scrub.devices`): the lowest allocated or
    /// reserved bytes at any cursor, the bottom of what the timeline
    /// plots (found once: a frame does not walk millions of points).
    pub lowest: Vec<u64>,
    /// The timeline's y-axis spans the trace's own range
    /// ([`ViewerState::timeline_zoom`]), not 0 B to its peak.
    pub timeline_zoomed: bool,
    /// The sites pane is open.
    pub sites_open: bool,
    pub grouping: Grouping,
    /// The sites at the cursor (of the shown segments), while the pane is
    /// open.
    pub sites: Option<Sites>,
    /// Index into `sites.sites`.
    pub selected_site: usize,
    /// The sites pane's OOM row is selected, not a site: the row the pane
    /// shows above the sites while the cursor is on an OOM event
    /// ([`ViewerState::sites_oom_row`]), where `Enter` shows the failed
    /// request's stack. No site is selected (or highlighted) meanwhile.
    pub sites_oom_selected: bool,
    /// The selected site shows its stack and blocks.
    pub site_expanded: bool,
    /// Rows the expanded site's stack and blocks are scrolled down (`↑`/`↓`
    /// while it is expanded).
    pub site_scroll: usize,
    /// The largest useful `site_scroll` as the expanded site was last
    /// drawn (its rows that did not fit); `usize::MAX` before it is drawn.
    pub site_scroll_limit: Cell<usize>,
    /// The row of the expanded site's first listed frame, as last drawn
    /// (its heading rows wrap with the pane's width): `x` keeps the rows
    /// being read in view with it.
    pub site_frames_row: Cell<usize>,
    /// An expanded site lists its C++ frames too.
    pub show_cpp: bool,
    /// Why blocks without stacks have none (the same for the whole file).
    pub no_stack: NoStackReason,
    /// The A and B marks, each on the GPU it was set on: a comparison is
    /// of one GPU's two moments, so a mark on another GPU is not used.
    pub mark_a: Option<Mark>,
    pub mark_b: Option<Mark>,
    /// Rows the A/B comparison is scrolled down (`↑`/`↓` while it is open)
    /// and the largest useful scroll as it was last drawn (`usize::MAX`
    /// before it is drawn).
    pub compare_scroll: usize,
    pub compare_scroll_limit: Cell<usize>,
    /// Rows the A/B comparison showed as last drawn (0 before): a page
    /// key moves that many less one.
    pub compare_page_rows: Cell<usize>,
    /// The same for the block detail (`PgUp`/`PgDn` while it is open; its
    /// `↑`/`↓` move to the neighbouring block, which starts at the top).
    pub detail_scroll: usize,
    pub detail_scroll_limit: Cell<usize>,
    /// The same for the block detail.
    pub detail_page_rows: Cell<usize>,
    /// The A/B comparison, while it is open.
    pub compare: Option<AbCompare>,
    /// While the viewer shows a file's segments stage (its final state)
    /// and the trace is still being read: how far the reading is.
    pub trace_reading: Option<TraceReading>,
    /// The keys that needed the trace while it was being read, in order
    /// (at most [`MAX_WAITING_KEYS`]): done once it is, as the notice
    /// promised; `Esc` drops them.
    pub waiting_actions: Vec<ViewerAction>,
    /// Why the file's trace could not be read after its final state was
    /// shown (a file cut or damaged there): the final state stays, and the
    /// keys that need the trace say this.
    pub trace_error: Option<String>,
    /// Opened from the dashboard: `q` goes back to it, not out of vramtop.
    pub returns_to_dashboard: bool,
    /// The segment map at the cursor is the file's final state although
    /// the cursor is not at the end, and not the cursor's: an inconsistent
    /// trace whose blocks lie outside every segment leaves the map, the
    /// breakdown and the fragmentation where the file's state has them,
    /// while the devices row and the timeline count those blocks. Their
    /// titles say so. Where the cursor's state has no such block the
    /// panes show it, whether or not it equals the final one.
    pub shows_final_state: bool,
    /// At an OOM event: what the allocator held right after it and the
    /// cause that points to, as `open --summary` says it (one computation,
    /// [`OomMemory::of`], over every segment, whatever the filters show).
    /// `None` off an OOM.
    pub oom_memory: Option<OomMemory>,
    /// The last [`ViewerState::selected_last_held`] answer and what it
    /// was asked (device index, cursor, block address, block size): the
    /// detail asks it every frame, the answer changes only with those.
    last_held: RefCell<Option<(LastHeldAsked, LastHeld)>>,
}

/// What [`ViewerState::selected_last_held`] was asked: device index,
/// cursor, block address and size (bytes).
type LastHeldAsked = (usize, usize, u64, u64);

/// How much of a file the reader has parsed, while the viewer waits for
/// Keys kept while the trace is read: a held arrow key must not grow
/// the queue without bound.
pub const MAX_WAITING_KEYS: usize = 64;

/// Where an expanded site's stack frames are in its rows: the row of the
/// first listed frame, then each listed frame's index in the stack.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SiteListing {
    first_frame_row: usize,
    frames: Vec<usize>,
}

/// The row of listing `after` that shows what row `scroll` of `before`
/// showed: the same frame (or the next one listed), the same block row
/// past the frames, the same heading row above them.
fn same_row_in(scroll: usize, before: &SiteListing, after: &SiteListing) -> usize {
    let start = before.first_frame_row;
    let Some(k) = scroll.checked_sub(start) else {
        return scroll;
    };
    match before.frames.get(k) {
        Some(&index) => {
            let j = after
                .frames
                .iter()
                .position(|&i| i >= index)
                .unwrap_or(after.frames.len());
            after.first_frame_row.saturating_add(j)
        }
        // Past the frames: the blocks' title and rows keep their order.
        None => {
            let past = k - before.frames.len();
            after
                .first_frame_row
                .saturating_add(after.frames.len())
                .saturating_add(past)
        }
    }
}

/// its trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceReading {
    /// Bytes of the file parsed so far.
    pub read: u64,
    /// The file's size in bytes.
    pub total: u64,
}

/// An A or B mark: a cursor of one GPU (each GPU has its own trace, so a
/// bare cursor would mean another moment on another GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    /// The GPU's device number, as the GPUs pane lists it.
    pub device: u32,
    pub cursor: usize,
}

/// Where a mark is, seen from the selected GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkHere {
    Unset,
    /// On the selected GPU, at this cursor.
    Here(usize),
    /// On another GPU (its device number).
    Elsewhere(u32),
}

/// The comparison of the states at the A and B marks (the one
/// `vramtop diff FILE --at A --at B` prints).
pub type AbCompare = CursorDiff;

impl ViewerState {
    /// A viewer on `snapshot`, every cursor at the end of its trace (the
    /// state the file shows).
    pub fn new(file: String, snapshot: Snapshot) -> Self {
        let scrub = Scrub::new(Arc::new(snapshot));
        let cursors = scrub.devices.iter().map(DeviceScrub::len).collect();
        let mut app = AppState::new(StatusState {
            backend: "snapshot".to_string(),
            ..StatusState::default()
        });
        app.gpus = scrub
            .devices
            .iter()
            .map(|d| GpuState {
                reading: GpuReading::Ok(GpuSample::unknown(
                    d.device,
                    format!("snapshot GPU {}", d.device),
                )),
                allocator: None,
                history: History::default(),
                allocator_at_reading: None,
            })
            .collect();
        app.ui.focus = Pane::Segments;
        let peaks = scrub.devices.iter().map(peaks).collect();
        let lowest = scrub
            .devices
            .iter()
            .map(|d| {
                d.points
                    .iter()
                    .map(|p| p.allocated.min(p.reserved))
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        // Blocks whose stack the trace lost say so themselves (sites).
        let no_stack = snapshot_no_stack_reason(&scrub.snapshot);
        let mut v = ViewerState {
            file,
            scrub,
            cursors,
            stream_filter: None,
            pool_filter: None,
            detail_open: false,
            detail_oom: false,
            selected_address: None,
            segments: Vec::new(),
            unfiltered_segments: 0,
            app,
            peaks,
            lowest,
            timeline_zoomed: false,
            sites_open: false,
            grouping: Grouping::default(),
            sites: None,
            selected_site: 0,
            sites_oom_selected: false,
            site_expanded: false,
            site_scroll: 0,
            site_scroll_limit: Cell::new(usize::MAX),
            site_frames_row: Cell::new(0),
            show_cpp: false,
            no_stack,
            mark_a: None,
            mark_b: None,
            compare: None,
            compare_scroll: 0,
            compare_scroll_limit: Cell::new(usize::MAX),
            compare_page_rows: Cell::new(0),
            detail_scroll: 0,
            detail_scroll_limit: Cell::new(usize::MAX),
            detail_page_rows: Cell::new(0),
            trace_reading: None,
            waiting_actions: Vec::new(),
            trace_error: None,
            returns_to_dashboard: false,
            shows_final_state: false,
            oom_memory: None,
            last_held: RefCell::new(None),
        };
        // Open on a GPU that holds memory: a dump of a process on GPU 1 can
        // list GPU 0 first with nothing but the dump's `snapshot` event, and
        // "nothing reserved" reads as an empty file.
        let empty_at_end = |d: &DeviceScrub| d.segments_at(d.len()).is_empty();
        if v.scrub.devices.first().is_some_and(empty_at_end)
            && let Some(i) = v.scrub.devices.iter().position(|d| !empty_at_end(d))
        {
            v.app.ui.selected_gpu = i;
        }
        v.refresh();
        v.app.ui.notice = v.left_out_notice();
        v
    }

    /// The notice a file whose trace lost entries opens with: "3 trace
    /// entries left out: unknown actions (teleport, warp)", short for the
    /// status line (what `replay` and `open --summary` say at length).
    fn left_out_notice(&self) -> Option<String> {
        let snapshot = &self.scrub.snapshot;
        let n = snapshot.skipped_trace_entries;
        if n == 0 {
            return None;
        }
        let actions = &snapshot.skipped_trace_actions;
        let mut names = actions.names.join(", ");
        if actions.more {
            names.push_str(", …");
        }
        let entries = if n == 1 {
            "1 trace entry".to_string()
        } else {
            format!("{n} trace entries")
        };
        Some(if names.is_empty() {
            format!("{entries} left out: actions unknown to this vramtop")
        } else {
            format!("{entries} left out: unknown actions ({names})")
        })
    }

    /// A viewer on a file's segments stage (see
    /// [`crate::snapshot::read_snapshot_file_staged`]): its final state,
    /// while the trace of the `total`-byte file is still being read. Keys
    /// that need the trace say so until [`ViewerState::complete_trace`].
    pub fn segments_stage(file: String, stage: Snapshot, total: u64) -> Self {
        let mut v = ViewerState::new(file, stage);
        v.trace_reading = Some(TraceReading { read: 0, total });
        v
    }

    /// Records how many bytes of the file are parsed; whether that
    /// changed what the screen shows.
    pub fn set_trace_read(&mut self, read: u64) -> bool {
        match &mut self.trace_reading {
            Some(reading) if reading.read != read => {
                reading.read = read;
                true
            }
            _ => false,
        }
    }

    /// The trace of the file whose segments stage is shown could not be
    /// read (`why`, one line): the final state stays on screen, and the
    /// keys that need the trace say why there is none.
    pub fn trace_failed(&mut self, why: String) {
        self.trace_reading = None;
        self.waiting_actions.clear();
        self.app.ui.notice = None;
        self.trace_error = Some(why);
    }

    /// Swaps in `next`, the viewer on the complete snapshot of the file
    /// whose segments stage is shown, keeping what the user chose: the
    /// device, focus, overlay, filters, the selected block (by address),
    /// the open panes and the selected site. `next`'s cursors are at the
    /// end of their traces: the state the stage showed.
    /// `keymap` answers the keys that waited for the trace.
    pub fn complete_trace(&mut self, mut next: ViewerState, keymap: &Keymap) {
        let device = self.device().map(|d| d.device);
        next.app.ui = self.app.ui.clone();
        next.app.ui.selected_gpu = device
            .and_then(|id| next.scrub.devices.iter().position(|d| d.device == id))
            .unwrap_or(0);
        next.stream_filter = self.stream_filter;
        next.pool_filter = self.pool_filter;
        next.selected_address = self.selected_address;
        next.grouping = self.grouping;
        next.sites_open = self.sites_open;
        next.selected_site = self.selected_site;
        next.sites_oom_selected = self.sites_oom_selected;
        next.site_expanded = self.site_expanded;
        next.site_scroll = self.site_scroll;
        next.show_cpp = self.show_cpp;
        next.returns_to_dashboard = self.returns_to_dashboard;
        // Keep the selected site by its key (refresh_sites looks it up).
        next.sites = self.sites.take();
        next.refresh();
        // An OOM's detail needs the trace: the stage had none to show.
        next.detail_open = self.detail_open && !self.detail_oom && next.selected_block().is_some();
        let waiting = std::mem::take(&mut self.waiting_actions);
        *self = next;
        // The "waiting for the trace" notice is answered now: the keys'
        // own notices, if any, replace it.
        if !waiting.is_empty() {
            self.app.ui.notice = None;
        }
        let answered = !waiting.is_empty();
        for action in waiting {
            self.act(keymap, action);
        }
        // Entries the trace lost are said once it is read, unless the keys
        // pressed while waiting have their answer on the line.
        if !answered || self.app.ui.notice.is_none() {
            let earlier = self.app.ui.notice.take();
            self.app.ui.notice = self.left_out_notice().or(earlier);
        }
    }

    /// Shows the state at the (last) OOM of the first device whose trace
    /// has one, with the allocation-sites pane open: who held the memory
    /// when the allocation failed. Without an OOM in any trace (a snapshot
    /// taken without history) the cursor stays at the end: the file's
    /// state is the state at the OOM.
    pub fn open_at_oom(&mut self, keymap: &Keymap) {
        // The last OOM, found from past the end: an OOM snapshot's last
        // event is often the OOM itself, so the cursor lands on the end.
        if let Some((i, at)) = self
            .scrub
            .devices
            .iter()
            .enumerate()
            .find_map(|(i, d)| d.prev_mark(MarkKind::Oom, usize::MAX).map(|at| (i, at)))
        {
            self.app.ui.selected_gpu = i;
            self.set_cursor(at);
        }
        self.show_sites(keymap);
    }

    /// Opens the allocation-sites pane if it is closed (as `w` does): a
    /// viewer opened at a moment (`O`, `open FILE --at`) answers first who
    /// holds the memory there.
    pub fn show_sites(&mut self, keymap: &Keymap) {
        if !self.sites_open {
            self.act(keymap, ViewerAction::ToggleSites);
        }
    }

    /// Moves the cursors to the moment `at` names (`open FILE --at`): on
    /// every GPU with a trace, where `open FILE --summary --at` lists the
    /// sites, and with its errors (an event past the end, no OOM, no
    /// marks, no trace), the cursors then unmoved. The GPU shown stays
    /// the one the viewer opens on unless it has no trace: then the first
    /// that has one, where the moment is.
    pub fn start_at(&mut self, at: At) -> Result<(), AtError> {
        let cursors = cursors_at(&self.scrub.snapshot, &self.scrub.devices, at)?;
        for (cursor, moment) in self.cursors.iter_mut().zip(&cursors) {
            if let Some(moment) = moment {
                *cursor = *moment;
            }
        }
        if cursors
            .get(self.device_index())
            .is_some_and(Option::is_none)
            && let Some(i) = cursors.iter().position(Option::is_some)
        {
            self.app.ui.selected_gpu = i;
        }
        self.refresh();
        self.select_event_block();
        Ok(())
    }

    /// The selected device's peaks.
    pub fn device_peaks(&self) -> Option<&Peaks> {
        self.peaks.get(self.device_index())
    }

    /// The y-range the selected device's timeline zooms to: from its
    /// lowest to its highest allocated or reserved bytes over the trace
    /// ([`zoom_range`]); why there is none where a 0-based axis shows
    /// it all (a flat trace, one that reaches 0 B). `None`: no trace.
    pub fn zoom_here(&self) -> Option<Result<ZoomRange, NoZoom>> {
        let d = self.device().filter(|d| !d.is_empty())?;
        let lowest = self.lowest.get(self.device_index()).copied()?;
        let (reserved, allocated) = d.peaks();
        Some(zoom_range(lowest, reserved.max(allocated)))
    }

    /// The y-range the timeline draws zoomed: while the zoom is on and
    /// the selected device's trace has one; `None`: from 0 B.
    pub fn timeline_zoom(&self) -> Option<ZoomRange> {
        self.timeline_zoomed
            .then(|| self.zoom_here()?.ok())
            .flatten()
    }

    /// The sites of the shown segments' allocated blocks.
    pub fn sites_now(&self) -> Sites {
        match self.device() {
            Some(d) => self.sites_in(&d.state_at(self.cursor())),
            None => group(std::iter::empty(), self.grouping, self.no_stack),
        }
    }

    /// [`ViewerState::sites_now`] of `state`, the state at the cursor: its
    /// blocks know whether the trace lost their stack; those within the
    /// shown segments' ranges.
    fn sites_in(&self, state: &ScrubState) -> Sites {
        let blocks = self.segments.iter().flat_map(|s| {
            let end = s.address.saturating_add(s.total_size);
            state.blocks.range(s.address..end)
        });
        sites_of_live_blocks(blocks, self.grouping, self.no_stack)
    }

    /// Whether a segment of the file on the selected GPU is in a private
    /// memory pool (a CUDA graph's or a `MemPool`'s: its `segment_pool_id`
    /// is not the default `(0, 0)`): the segment map marks them, at every
    /// cursor alike.
    pub fn has_private_pools(&self) -> bool {
        !self.private_pools().is_empty()
    }

    /// The private memory pools of the selected GPU's segments in the
    /// file, by id: what `p` cycles through after the size classes and
    /// the default pool. (The
    /// trace names no pool: a segment it frees before the end is in the
    /// default pool's as far as the file tells.)
    pub fn private_pools(&self) -> Vec<(i64, i64)> {
        let Some(device) = self.device().map(|d| d.device) else {
            return Vec::new();
        };
        let mut pools: Vec<(i64, i64)> = (self.scrub.snapshot.segments.iter())
            .filter(|s| s.device == device && s.segment_pool_id != (0, 0))
            .map(|s| s.segment_pool_id)
            .collect();
        pools.sort_unstable();
        pools.dedup();
        pools
    }

    /// The selected site, while the sites pane is open (`None` while its
    /// OOM row is selected).
    pub fn selected_site(&self) -> Option<&crate::snapshot::sites::Site> {
        if self.sites_oom_selected {
            return None;
        }
        self.sites.as_ref()?.sites.get(self.selected_site)
    }

    /// Whether the sites pane shows its OOM row: it is open and the cursor
    /// is on an OOM event. The row names the failed request above the
    /// sites that held the memory, and `Enter` on it shows the request's
    /// stack, which the pane's own `Enter` (expand a site) would hide.
    pub fn sites_oom_row(&self) -> bool {
        self.sites_open && self.at_oom()
    }

    /// The addresses of the selected site's blocks (ascending), for the
    /// segment map's highlight.
    pub fn highlighted(&self) -> &[u64] {
        self.selected_site().map_or(&[], |s| s.addresses.as_slice())
    }

    fn refresh_sites(&mut self) {
        // Keep the same site selected when it is still there.
        let key = self.selected_site().map(|s| s.key.clone());
        self.refresh_sites_keeping(key);
    }

    /// [`ViewerState::refresh_sites`] with the state at the cursor already
    /// worked out.
    fn refresh_sites_in(&mut self, state: &ScrubState) {
        if !self.sites_open {
            self.sites = None;
            return;
        }
        let key = self.selected_site().map(|s| s.key.clone());
        let sites = self.sites_in(state);
        self.install_sites(sites, key);
    }

    /// Recomputes the sites, selecting the one that is the same site as
    /// `key` when there is one (else the row selected before, clamped);
    /// whether there was.
    fn refresh_sites_keeping(&mut self, key: Option<SiteKey>) -> bool {
        if !self.sites_open {
            self.sites = None;
            return false;
        }
        let sites = self.sites_now();
        self.install_sites(sites, key)
    }

    /// Shows `sites`, selecting the same site as `key` when there is one
    /// (else the row selected before, clamped); whether there was.
    fn install_sites(&mut self, sites: Sites, key: Option<SiteKey>) -> bool {
        // Off the OOM the row is gone: the site below it is selected.
        if !self.at_oom() {
            self.sites_oom_selected = false;
        }
        // The same key first: a state can hold two groups without a stack.
        let at = key.and_then(|k| {
            let list = &sites.sites;
            (list.iter().position(|s| s.key == k))
                .or_else(|| list.iter().position(|s| s.key.same_site(&k)))
        });
        if at.is_none() {
            // Another site is selected now: its stack starts at the top.
            self.site_scroll = 0;
        }
        self.selected_site = at
            .unwrap_or(self.selected_site)
            .min(sites.sites.len().saturating_sub(1));
        self.sites = Some(sites);
        at.is_some()
    }

    /// Moves the block selection to the block whose stack the selected
    /// site shows (the largest of its main caller path; the
    /// lowest-addressed of equally large ones), so the block's detail and
    /// the site's stack agree; else to the site's largest block.
    fn select_site_block(&mut self) {
        let Some(site) = self.selected_site() else {
            return;
        };
        // (shows the site's stack, size): the larger wins.
        let mut best: Option<(usize, (bool, u64), u64)> = None;
        for (i, b) in self.segments.iter().flat_map(|s| &s.blocks).enumerate() {
            if b.state != BlockState::ActiveAllocated
                || site.addresses.binary_search(&b.address).is_err()
            {
                continue;
            }
            let rank = (std::sync::Arc::ptr_eq(&b.frames, &site.stack), b.size);
            if best.is_none_or(|(_, r, _)| rank > r) {
                best = Some((i, rank, b.address));
            }
        }
        if let Some((i, _, addr)) = best {
            self.app.ui.selected_block = i;
            self.selected_address = Some(addr);
        }
    }

    fn move_site(&mut self, delta: isize) -> Effect {
        // The OOM row is above the first site: ↑ from it, ↓ back.
        if self.sites_oom_selected {
            if delta <= 0 {
                return Effect::None;
            }
            self.sites_oom_selected = false;
            self.site_scroll = 0;
            self.select_site_block();
            return Effect::Redraw;
        }
        if delta < 0 && self.selected_site == 0 && self.sites_oom_row() {
            self.sites_oom_selected = true;
            return Effect::Redraw;
        }
        let n = self.sites.as_ref().map_or(0, |s| s.sites.len());
        if n == 0 {
            return Effect::None;
        }
        let next = (self.selected_site as isize + delta).clamp(0, n as isize - 1) as usize;
        self.select_site(next)
    }

    /// Selects site `index` (into the listed sites) as `↑`/`↓` do: its
    /// stack from the top, its blocks highlighted and the block selection
    /// on the one whose stack it shows (the OOM row no longer selected).
    /// Nothing for the selected site or an index past the list.
    fn select_site(&mut self, index: usize) -> Effect {
        let n = self.sites.as_ref().map_or(0, |s| s.sites.len());
        if index >= n || (index == self.selected_site && !self.sites_oom_selected) {
            return Effect::None;
        }
        self.sites_oom_selected = false;
        self.selected_site = index;
        self.site_scroll = 0;
        self.select_site_block();
        Effect::Redraw
    }

    /// Scrolls the A/B comparison `delta` rows, within what it last drew.
    fn scroll_compare(&mut self, delta: isize) -> Effect {
        let limit = self.compare_scroll_limit.get();
        scroll_within(&mut self.compare_scroll, limit, delta)
    }

    /// Which ways the A/B comparison can scroll from where it stands, as
    /// last drawn: its hints offer only those moves.
    pub fn compare_scrolled(&self) -> Scrolled {
        Scrolled::at(self.compare_scroll, self.compare_scroll_limit.get())
    }

    /// Which ways the block detail can scroll, as [`Self::compare_scrolled`].
    pub fn detail_scrolled(&self) -> Scrolled {
        Scrolled::at(self.detail_scroll, self.detail_scroll_limit.get())
    }

    /// Which ways the block detail can move to another block of the map
    /// (`up`: a block before the selected one, `down`: one after it).
    pub fn detail_blocks(&self) -> Scrolled {
        // An OOM's detail has no block to step to.
        if self.detail_oom {
            return Scrolled::at(0, 0);
        }
        let n = self.block_count();
        Scrolled::at(self.app.ui.selected_block, n.saturating_sub(1))
    }

    /// Scrolls the block detail `delta` rows, within what it last drew.
    fn scroll_detail(&mut self, delta: isize) -> Effect {
        let limit = self.detail_scroll_limit.get();
        scroll_within(&mut self.detail_scroll, limit, delta)
    }

    /// Scrolls the expanded site's stack and blocks `delta` rows, within
    /// what the pane last drew (so a scroll past the end never has to be
    /// paid back).
    fn scroll_site(&mut self, delta: isize) -> Effect {
        let limit = self.site_scroll_limit.get();
        let current = self.site_scroll.min(limit);
        let next = current.saturating_add_signed(delta).min(limit);
        if next == self.site_scroll {
            return Effect::None;
        }
        self.site_scroll = next;
        Effect::Redraw
    }

    /// Where `mark` is, seen from the selected GPU.
    pub fn mark_here(&self, mark: Option<Mark>) -> MarkHere {
        match (mark, self.device()) {
            (None, _) => MarkHere::Unset,
            (Some(m), Some(d)) if m.device == d.device => MarkHere::Here(m.cursor),
            (Some(m), _) => MarkHere::Elsewhere(m.device),
        }
    }

    /// Whether A is after B on the selected GPU: the comparison then runs
    /// from B to A, the earlier to the later, as `vramtop diff FILE --at A
    /// --at B` does whatever order its moments come in; the marks stay as
    /// the user set them, and the comparison says so in one line.
    pub fn marks_reversed(&self) -> bool {
        matches!(
            (self.mark_here(self.mark_a), self.mark_here(self.mark_b)),
            (MarkHere::Here(a), MarkHere::Here(b)) if a > b
        )
    }

    /// Recomputes the A/B comparison (both marks set on the selected GPU).
    fn refresh_compare(&mut self) {
        let (MarkHere::Here(a), MarkHere::Here(b)) =
            (self.mark_here(self.mark_a), self.mark_here(self.mark_b))
        else {
            self.compare = None;
            return;
        };
        let Some(d) = self.device() else {
            return;
        };
        self.compare = Some(diff_cursors(d, a, b, self.grouping, self.no_stack));
    }

    /// The file has no trace to move along (read, or failed to read) on
    /// the selected GPU, or no GPU at all: the keys that need one say so,
    /// and the hints leave them out.
    pub fn trace_less(&self) -> bool {
        self.trace_reading.is_none() && self.device().is_none_or(DeviceScrub::is_empty)
    }

    /// The file, read whole, has no GPU: no segments and no trace (a
    /// pickle of an empty segment list). No viewer key has anything to act on.
    /// While a segments stage is shown the trace may still bring one.
    pub fn gpu_less(&self) -> bool {
        self.trace_reading.is_none() && self.scrub.devices.is_empty()
    }

    /// Whether `action` can do something in this file: none can in a file
    /// with no GPU, and the keys that need a trace cannot in a file
    /// without one. The status line hints only these; the others say why
    /// when pressed, and the help marks them with
    /// [`ViewerState::unavailable`]'s reason.
    /// Once the trace is read, a move offers only what goes somewhere
    /// from the cursor: a step or a page ahead only before the last event,
    /// back only after the start, a jump to an OOM, a segment_alloc or an
    /// empty_cache point only where the trace has one that way.
    pub fn offers(&self, action: ViewerAction) -> bool {
        self.unavailable(action).is_none()
    }

    /// Why `action` can do nothing here, in a few words for the help
    /// (`None`: it is offered, [`ViewerState::offers`]).
    pub fn unavailable(&self, action: ViewerAction) -> Option<&'static str> {
        if self.gpu_less() {
            return Some("no GPU in this file");
        }
        if action.needs_trace() && self.trace_less() {
            // A trace there but unreadable is not a file without one.
            return Some(if self.trace_error.is_some() {
                "the trace could not be read"
            } else {
                "no trace in this file"
            });
        }
        // The keys that look at what the map shows at the cursor: nothing
        // to look at in an empty map (before the first event, or under a
        // filter that hides every segment), or an empty sites list.
        match action {
            ViewerAction::BlockDetail
                if !self.detail_open && !self.at_oom() && self.selected_block().is_none() =>
            {
                return Some(if self.segments.is_empty() {
                    "the segment map is empty here"
                } else {
                    "no block selected"
                });
            }
            ViewerAction::ExpandSite
                if self.sites_open
                    && !self.sites_oom_selected
                    && self.selected_site().is_none() =>
            {
                return Some("no site here");
            }
            // An empty map, or the first (last) segment selected: no
            // segment that way.
            ViewerAction::NextSegment | ViewerAction::PrevSegment => {
                if let Err(why) = self.segment_target(action == ViewerAction::NextSegment) {
                    return Some(why);
                }
            }
            _ => {}
        }
        // While the trace is read the moves wait for it: offered as keys
        // that will act.
        if self.trace_reading.is_some() {
            return None;
        }
        let d = self.device()?;
        let (c, n) = (self.cursor(), d.len());
        use ViewerAction as V;
        let ahead = |kind, what_none, what_ahead| match d.next_mark(kind, c) {
            Some(_) => None,
            None if d.prev_mark(kind, c).is_none() => Some(what_none),
            None => Some(what_ahead),
        };
        let behind = |kind, what_none, what_behind| match d.prev_mark(kind, c) {
            Some(_) => None,
            None if d.next_mark(kind, c).is_none() => Some(what_none),
            None => Some(what_behind),
        };
        // (`End` needs no trace, but without one has no end to go to.)
        let no_trace = "no trace in this file";
        match action {
            V::StepForward | V::PageForward | V::Last if c >= n => Some(if n == 0 {
                no_trace
            } else {
                "at the last event"
            }),
            V::StepBack | V::PageBack | V::First if c == 0 => {
                Some(if n == 0 { no_trace } else { "at the start" })
            }
            V::NextOom => ahead(MarkKind::Oom, "no OOM in the trace", "no OOM ahead"),
            V::PrevOom => behind(MarkKind::Oom, "no OOM in the trace", "no OOM before"),
            V::NextSegmentAlloc => ahead(
                MarkKind::SegmentAlloc,
                "no segment_alloc in the trace",
                "none ahead",
            ),
            V::PrevSegmentAlloc => behind(
                MarkKind::SegmentAlloc,
                "no segment_alloc in the trace",
                "none before",
            ),
            V::NextEmptyCache => ahead(
                MarkKind::EmptyCache,
                "no empty_cache in the trace",
                "none ahead",
            ),
            V::PrevEmptyCache => behind(
                MarkKind::EmptyCache,
                "no empty_cache in the trace",
                "none before",
            ),
            V::NextMarker => ahead(
                MarkKind::Marker,
                "no snapshot/annotate entry in the trace",
                "none ahead",
            ),
            V::PrevMarker => behind(
                MarkKind::Marker,
                "no snapshot/annotate entry in the trace",
                "none before",
            ),
            // A zoom that would show what the 0-based axis does. While it
            // is on it is offered to turn it off.
            V::ToggleZoom if self.timeline_zoom().is_none() => match self.zoom_here() {
                Some(Err(why)) => Some(why.why()),
                _ => None,
            },
            // `c` compares two marks on this GPU (or closes the comparison).
            V::Compare if self.compare.is_none() => {
                match (self.mark_here(self.mark_a), self.mark_here(self.mark_b)) {
                    (MarkHere::Here(_), MarkHere::Here(_)) => None,
                    (MarkHere::Elsewhere(_), _) | (_, MarkHere::Elsewhere(_)) => {
                        Some("A and B are not both marked on this GPU")
                    }
                    (MarkHere::Here(_), _) => Some("mark B first"),
                    (_, MarkHere::Here(_)) => Some("mark A first"),
                    _ => Some("mark A and B first"),
                }
            }
            _ => None,
        }
    }

    /// Whether the status line hints `action`: it is offered
    /// ([`ViewerState::offers`]) and, for a key that moves back, its
    /// forward twin is not ([`ViewerAction::forward_twin`]), so the line
    /// reads "→ event" until the last event and "← event" there.
    ///
    /// While the trace is read only the keys that act then are hinted: a
    /// key that needs the trace waits for it, and the moves it would hint
    /// depend on where the trace puts the cursor (a "→ event" at the last
    /// event, an "o OOM" in a trace without one).
    pub fn hinted(&self, action: ViewerAction) -> bool {
        if self.trace_reading.is_some() && action.needs_trace() {
            return false;
        }
        self.offers(action) && action.forward_twin().is_none_or(|f| !self.offers(f))
    }

    /// Index of the selected device in `scrub.devices`.
    pub fn device_index(&self) -> usize {
        self.app
            .ui
            .selected_gpu
            .min(self.scrub.devices.len().saturating_sub(1))
    }

    pub fn device(&self) -> Option<&DeviceScrub> {
        self.scrub.devices.get(self.device_index())
    }

    /// The selected device's cursor.
    pub fn cursor(&self) -> usize {
        self.cursors.get(self.device_index()).copied().unwrap_or(0)
    }

    /// At the last cursor of a trace that does not lead to the file's
    /// recorded final state: how the two differ. The viewer shows the
    /// recorded state there (what PyTorch wrote; the segments stage shows
    /// it too, before the trace is read), and the status line says that
    /// the trace leads elsewhere. `None` elsewhere and for a consistent
    /// file.
    pub fn end_mismatch_here(&self) -> Option<EndMismatch> {
        let d = self.device()?;
        (self.cursor() == d.len() && !d.is_empty())
            .then(|| d.end_mismatch())
            .flatten()
    }

    /// Streams seen on the selected device (segments and trace), ascending.
    pub fn streams(&self) -> Vec<u64> {
        let Some(d) = self.device() else {
            return Vec::new();
        };
        let mut s: Vec<u64> = self
            .scrub
            .snapshot
            .segments
            .iter()
            .filter(|s| s.device == d.device)
            .map(|s| s.stream)
            .chain(d.trace_streams().iter().copied())
            .collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// The selected block (segment, block), if any.
    pub fn selected_block(&self) -> Option<(&Segment, &Block)> {
        let mut i = self.app.ui.selected_block;
        for s in &self.segments {
            if i < s.blocks.len() {
                return Some((s, &s.blocks[i]));
            }
            i -= s.blocks.len();
        }
        None
    }

    fn block_count(&self) -> usize {
        self.segments.iter().map(|s| s.blocks.len()).sum()
    }

    /// Recomputes the state at the cursor for the selected device: the
    /// segments (filtered), its allocator view, and the block selection
    /// (the block at the same address, if there still is one).
    pub fn refresh(&mut self) {
        let cursor = self.cursor();
        let index = self.device_index();
        let Some(d) = self.scrub.devices.get(index) else {
            return;
        };
        let (stream, pool) = (self.stream_filter, self.pool_filter);
        // A block selected as the selected site's follows the site: when a
        // step leaves it outside (freed, or the site gone and another
        // selected) the site's block is selected, or the footer describes
        // a block of no site next to the site's highlight.
        let following_site = self
            .selected_address
            .is_some_and(|a| self.highlighted().binary_search(&a).is_ok());
        // One state for the segments and the sites.
        let state = d.state_at(cursor);
        let layout = d.layout_of(&state);
        // Only where the trace does not fit the file (a consistent trace's
        // layout is its own at every cursor), and only where the map
        // leaves out blocks of the cursor's state (outside every segment,
        // counted by the GPUs row and the timeline): where it holds them
        // all it shows the cursor's own state, the figures agree, and that
        // state being the final one too (at Home on SnapViewer's file) is
        // no reason for a note.
        let placed = layout
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state.is_active())
            .count();
        self.shows_final_state = d.misfits > 0
            && cursor < d.len()
            && placed < state.blocks.len()
            && same_blocks(&layout, &d.segments_at(d.len()));
        // The cause of an OOM is the allocator's, which searched every
        // segment: from the whole layout, before the filters.
        self.oom_memory = cursor
            .checked_sub(1)
            .and_then(|i| d.events().get(i))
            .filter(|e| e.action == crate::alloc::TraceAction::Oom)
            .map(|e| OomMemory::of(e, &state, &layout));
        self.unfiltered_segments = layout.len();
        self.segments = layout
            .into_iter()
            .filter(|s| stream.is_none_or(|x| s.stream == x))
            .filter(|s| pool.is_none_or(|p| p.keeps(s.segment_type, s.segment_pool_id)))
            .collect();
        let layout: Vec<_> = self.segments.iter().map(segment_info).collect();
        let mut stats = DeviceStats::default();
        let sum = |f: fn(&crate::alloc::SegmentInfo) -> u64| layout.iter().map(f).sum::<u64>();
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        stats.reserved_bytes.all.current = as_i64(sum(|s| s.total_size));
        stats.allocated_bytes.all.current = as_i64(sum(|s| s.allocated_size));
        stats.active_bytes.all.current = as_i64(sum(|s| s.active_size));
        stats.requested_bytes.all.current = as_i64(sum(|s| s.requested_size));
        let source = format!("{} · event {cursor}/{}", self.file, d.len());
        let view = AllocatorView::new(source, None, stats, layout);
        if let Some(g) = self.app.gpus.get_mut(index) {
            g.allocator = Some(view);
        }
        // Keep the selection on the same block (or the block now covering
        // its address); else clamp.
        let count = self.block_count();
        if let Some(addr) = self.selected_address {
            let at =
                self.segments.iter().flat_map(|s| &s.blocks).position(|b| {
                    b.address <= addr && addr < b.address.saturating_add(b.size.max(1))
                });
            if let Some(i) = at {
                self.app.ui.selected_block = i;
            }
        }
        self.app.ui.selected_block = self.app.ui.selected_block.min(count.saturating_sub(1));
        self.selected_address = self.selected_block().map(|(_, b)| b.address);
        self.refresh_sites_in(&state);
        let still_the_sites = self
            .selected_address
            .is_some_and(|a| self.highlighted().binary_search(&a).is_ok());
        if following_site && !still_the_sites {
            self.select_site_block();
        }
    }

    fn set_cursor(&mut self, cursor: usize) -> Effect {
        let n = self.device().map_or(0, DeviceScrub::len);
        let index = self.device_index();
        let cursor = cursor.min(n);
        match self.cursors.get_mut(index) {
            Some(c) if *c != cursor => {
                *c = cursor;
                self.refresh();
                Effect::Redraw
            }
            _ => Effect::None,
        }
    }

    /// Moves the cursor to a moment of the trace (`what` names it), or
    /// says the cursor is there already rather than doing nothing.
    fn go_to_moment(&mut self, at: Option<usize>, what: &str) -> Effect {
        match at {
            Some(c) if c == self.cursor() => {
                self.app.ui.notice = Some(format!("already at {what} (event {c})"));
                Effect::Redraw
            }
            Some(c) => {
                self.set_cursor(c);
                self.select_event_block();
                Effect::Redraw
            }
            None => Effect::None,
        }
    }

    /// After a jump: moves the block selection to the block the event
    /// jumped to is about (the block an `alloc` handed out, the free block
    /// a free left, the first block of a new segment), so `Enter` shows
    /// the stack of what the status line describes. An event about no
    /// block (an OOM, a marker) or about one gone at the cursor, or hidden
    /// by the filters (a freed segment), leaves the selection where it is.
    fn select_event_block(&mut self) {
        use crate::alloc::TraceAction as T;
        let Some(addr) = self.current_event().and_then(|e| match e.action {
            T::Alloc
            | T::FreeRequested
            | T::FreeCompleted
            | T::SegmentAlloc
            | T::SegmentFree
            | T::SegmentMap
            | T::SegmentUnmap => Some(e.addr),
            T::Snapshot | T::Oom | T::Annotate => None,
        }) else {
            return;
        };
        let Some((i, address)) = self
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .enumerate()
            .find(|(_, b)| b.address <= addr && addr < b.address.saturating_add(b.size.max(1)))
            .map(|(i, b)| (i, b.address))
        else {
            return;
        };
        self.app.ui.selected_block = i;
        self.selected_address = Some(address);
        // The sites pane selects the site the block is of, or its
        // highlight would name another site than the selected block's.
        let site = self.sites.as_ref().and_then(|s| {
            s.sites
                .iter()
                .position(|site| site.addresses.binary_search(&address).is_ok())
        });
        if let Some(site) = site
            && site != self.selected_site
        {
            self.selected_site = site;
            self.site_scroll = 0;
        }
    }

    fn jump(&mut self, kind: MarkKind, forward: bool) -> Effect {
        let cursor = self.cursor();
        let target = self.device().and_then(|d| {
            if forward {
                d.next_mark(kind, cursor)
            } else {
                d.prev_mark(kind, cursor)
            }
        });
        match target {
            Some(t) => {
                self.set_cursor(t);
                self.select_event_block();
                Effect::Redraw
            }
            None => {
                // Say why the key did nothing.
                let what = match kind {
                    MarkKind::Oom => "OOM",
                    MarkKind::SegmentAlloc => "segment_alloc or segment_map",
                    MarkKind::EmptyCache => "empty_cache point",
                    MarkKind::Marker => "snapshot/annotate entry",
                };
                let any = self
                    .device()
                    .is_some_and(|d| d.next_mark(kind, 0).is_some());
                let where_ = match (any, forward) {
                    (false, _) => "in this trace",
                    (true, true) => "after this event",
                    (true, false) => "before this event",
                };
                self.app.ui.notice = Some(format!("no {what} {where_}"));
                Effect::Redraw
            }
        }
    }

    /// Events a page key moves: 1 % of the trace, at least [`PAGE_EVENTS`].
    pub fn page(&self) -> usize {
        let n = self.device().map_or(0, DeviceScrub::len);
        (n / 100).max(PAGE_EVENTS)
    }

    /// Applies a viewer action.
    /// `keymap`: the texts that name a key name it as its table binds it.
    pub fn act(&mut self, keymap: &Keymap, action: ViewerAction) -> Effect {
        use ViewerAction as V;
        let back = keymap.key_name(Action::Back).unwrap_or_default();
        let key = |a| keymap.viewer_key_name(a).unwrap_or_default();
        if self.trace_reading.is_some() && action.needs_trace() {
            if self.waiting_actions.len() < MAX_WAITING_KEYS {
                self.waiting_actions.push(action);
            }
            let n = self.waiting_actions.len();
            // The count and how to cancel only once there is more than one.
            let more = if n > 1 {
                format!(" ({n} keys; {back} drops them)")
            } else {
                format!(" ({back} drops it)")
            };
            self.app.ui.notice = Some(format!(
                "waiting for the trace: {}{more}",
                action.describe()
            ));
            return Effect::Redraw;
        }
        // A state-only file: a step or a jump in a trace there is not, or a
        // mark at "event 0" of none, would answer with a silent no-op, a
        // misleading "no OOM in this trace" or a comparison of the one
        // state with itself.
        if self.trace_less() && action.needs_trace() {
            let what = match action {
                V::MarkA | V::MarkB => "mark",
                V::Compare => "compare",
                V::ToggleZoom => "zoom into",
                V::StepBack | V::StepForward | V::PageBack | V::PageForward | V::First => {
                    "step through"
                }
                _ => "jump to",
            };
            // The error is long (a path, a byte offset): the key's answer
            // comes first so that a narrow line cuts the error's end.
            self.app.ui.notice = Some(match &self.trace_error {
                Some(e) => format!("nothing to {what}: the trace could not be read: {e}"),
                None => format!("no trace in this file (its final state only): nothing to {what}"),
            });
            return Effect::Redraw;
        }
        // No GPU: a filter, the sites pane or a grouping would change
        // state with nothing on screen to show for it.
        if self.gpu_less() {
            self.app.ui.notice = Some(format!(
                "no GPU in this file (no segments, no trace): {} has nothing to act on",
                key(action)
            ));
            return Effect::Redraw;
        }
        let cursor = self.cursor();
        // A step that cannot move says why and where to go instead: a
        // silent key at the end of the trace reads as a broken one.
        let len = self.device().map_or(0, DeviceScrub::len);
        let forward = matches!(action, V::StepForward | V::PageForward | V::Last);
        let back = matches!(action, V::StepBack | V::PageBack | V::First);
        // (While the trace is read, `End` goes to the final state shown.)
        let read = self.trace_reading.is_none();
        if read && ((forward && cursor >= len) || (back && cursor == 0)) {
            self.app.ui.notice = Some(if len == 0 {
                "no trace on this GPU: its final state is all there is".to_string()
            } else if forward {
                format!("at the last event; {} goes to the start", key(V::First))
            } else {
                format!(
                    "at the start, before the first event; {} goes to the last",
                    key(V::Last)
                )
            });
            return Effect::Redraw;
        }
        match action {
            V::StepBack => self.set_cursor(cursor.saturating_sub(1)),
            V::StepForward => self.set_cursor(cursor.saturating_add(1)),
            V::PageBack => self.set_cursor(cursor.saturating_sub(self.page())),
            V::PageForward => self.set_cursor(cursor.saturating_add(self.page())),
            V::First => self.set_cursor(0),
            V::Last => self.set_cursor(usize::MAX),
            V::NextOom => self.jump(MarkKind::Oom, true),
            V::PrevOom => self.jump(MarkKind::Oom, false),
            V::NextSegmentAlloc => self.jump(MarkKind::SegmentAlloc, true),
            V::PrevSegmentAlloc => self.jump(MarkKind::SegmentAlloc, false),
            V::NextEmptyCache => self.jump(MarkKind::EmptyCache, true),
            V::PrevEmptyCache => self.jump(MarkKind::EmptyCache, false),
            V::NextMarker => self.jump(MarkKind::Marker, true),
            V::PrevMarker => self.jump(MarkKind::Marker, false),
            V::NextSegment => self.move_segment(true),
            V::PrevSegment => self.move_segment(false),
            V::BlockDetail => {
                if self.detail_open {
                    self.detail_open = false;
                    self.detail_oom = false;
                    return Effect::Redraw;
                }
                // On an OOM event the detail is the failed request's:
                // which code asked, its whole stack.
                if self.at_oom() {
                    return self.open_oom_detail();
                }
                if self.selected_block().is_none() {
                    // The hints offer "Enter block" outside the sites
                    // pane: say why there is none rather than ignore the key.
                    self.app.ui.notice = Some(if self.segments.is_empty() {
                        "no block to show: the segment map is empty here".to_string()
                    } else {
                        format!(
                            "no block selected: {}/{} select one",
                            keymap.key_name(Action::Up).unwrap_or_default(),
                            keymap.key_name(Action::Down).unwrap_or_default()
                        )
                    });
                    return Effect::Redraw;
                }
                self.detail_open = true;
                Effect::Redraw
            }
            V::CycleStream => {
                let streams = self.streams();
                self.stream_filter = match self.stream_filter {
                    None => streams.first().copied(),
                    Some(s) => streams.iter().copied().find(|&x| x > s),
                };
                self.refresh();
                Effect::Redraw
            }
            V::CyclePool => {
                // All, the size classes, then, where the GPU has private
                // pools, the default memory pool and each private one (by
                // id), then all again.
                let private = self.private_pools();
                let pools: Vec<(i64, i64)> = if private.is_empty() {
                    Vec::new()
                } else {
                    std::iter::once((0, 0)).chain(private).collect()
                };
                self.pool_filter = match self.pool_filter {
                    None => Some(PoolFilter::Size(PoolKind::Large)),
                    Some(PoolFilter::Size(PoolKind::Large)) => {
                        Some(PoolFilter::Size(PoolKind::Small))
                    }
                    Some(PoolFilter::Size(PoolKind::Small)) => {
                        pools.first().copied().map(PoolFilter::Memory)
                    }
                    Some(PoolFilter::Memory(id)) => pools
                        .iter()
                        .copied()
                        .find(|&p| p > id)
                        .map(PoolFilter::Memory),
                };
                self.refresh();
                Effect::Redraw
            }
            V::PeakAllocated => {
                let at = self.device_peaks().map(|p| p.allocated.cursor);
                self.go_to_moment(at, "the peak of allocated bytes")
            }
            V::PeakReserved => {
                let at = self.device_peaks().map(|p| p.reserved.cursor);
                self.go_to_moment(at, "the peak of reserved bytes")
            }
            V::BiggestAllocation => {
                let at = self
                    .device_peaks()
                    .and_then(|p| p.biggest_allocation)
                    .map(|m| m.cursor);
                self.go_to_moment(at, "the biggest allocation")
            }
            V::ToggleSites => {
                self.sites_open = !self.sites_open;
                // Opened, the pane selects its first site, as it always has.
                self.sites_oom_selected = false;
                self.site_expanded = false;
                self.site_scroll = 0;
                self.refresh_sites();
                if self.sites_open {
                    self.select_site_block();
                }
                Effect::Redraw
            }
            V::ExpandSite => {
                if !self.sites_open {
                    return Effect::None;
                }
                // On the OOM row: the failed request's stack, as `Enter`
                // shows it on an OOM with the pane closed.
                if self.sites_oom_selected && self.at_oom() {
                    return self.open_oom_detail();
                }
                if self.selected_site().is_none() {
                    // Hinted only with a site (`unavailable`); pressed
                    // anyway, it says why rather than nothing.
                    self.app.ui.notice = Some("no site to expand here".to_string());
                    return Effect::Redraw;
                }
                self.site_expanded = !self.site_expanded;
                self.site_scroll = 0;
                Effect::Redraw
            }
            V::CycleGrouping => {
                // The selected site's stack, keyed by the next grouping, is
                // the site that holds its frame and blocks there: it stays
                // selected (and expanded), as a step keeps the same site.
                // A key that names no site gives the first row, folded:
                // another site opened in its place reads as the same one.
                // The selected block's stack when the block is one of the
                // site's: under a finer grouping the site splits, and the
                // part to keep is the one whose block the detail shows.
                let next = self.grouping.next();
                let selected_block = self.selected_address;
                let key = self.selected_site().map(|s| {
                    let stack = selected_block
                        .filter(|a| s.addresses.binary_search(a).is_ok())
                        .and_then(|_| self.selected_block())
                        .map_or(&s.stack, |(_, b)| &b.frames);
                    site_key(stack, next).unwrap_or(SiteKey::NoStack(self.no_stack))
                });
                self.grouping = next;
                self.selected_site = 0;
                self.site_scroll = 0;
                if !self.refresh_sites_keeping(key) {
                    self.site_expanded = false;
                }
                // The block detail and the site's stack agree again when the
                // block is no longer in the selected site.
                if self.sites_open
                    && self
                        .selected_address
                        .is_none_or(|a| self.highlighted().binary_search(&a).is_err())
                {
                    self.select_site_block();
                }
                if self.compare.is_some() {
                    self.refresh_compare();
                }
                // With the sites pane closed nothing on screen shows the
                // grouping (the block detail's site row and the A/B
                // comparison use it later): say what changed, as `x` does.
                if !self.sites_open {
                    let name = |a| keymap.viewer_key_name(a).unwrap_or_default();
                    self.app.ui.notice = Some(format!(
                        "{}: sites now grouped by {} ({} shows them)",
                        name(V::CycleGrouping),
                        next.name(),
                        name(V::ToggleSites)
                    ));
                }
                Effect::Redraw
            }
            V::ToggleCppFrames => {
                let rows_before = self.site_listing_rows();
                self.show_cpp = !self.show_cpp;
                // The rows being read stay in view: back at the top, or at
                // the same row number of a listing that gained or lost C++
                // frames above them, the user lost their place. A listing
                // now shorter than the scroll shows its end: the pane
                // clamps when it draws, and `scroll_site` before it moves.
                if let (Some(before), Some(after)) = (rows_before, self.site_listing_rows()) {
                    self.site_scroll = same_row_in(self.site_scroll, &before, &after);
                }
                // With no expanded site's stack on screen the key would seem
                // to do nothing: say what it changed and where it shows.
                let on_screen = self.sites_open
                    && self.site_expanded
                    && self.selected_site().is_some_and(|s| !s.key.is_no_stack());
                let how = if self.show_cpp { "listed" } else { "counted" };
                if !on_screen {
                    // What is left to do to see it, from the pane's state:
                    // open it, expand a site, or none (a site without a
                    // stack is expanded).
                    let next = if !self.sites_open {
                        format!(
                            " ({} sites, {} expands one)",
                            key(V::ToggleSites),
                            key(V::ExpandSite)
                        )
                    } else if !self.site_expanded {
                        format!(" ({} expands the selected one)", key(V::ExpandSite))
                    } else if self.selected_site().is_some() {
                        "; this one has no stack recorded, the others show it".to_string()
                    } else {
                        "; there is no site at this moment".to_string()
                    };
                    self.app.ui.notice = Some(format!(
                        "{}: C++ frames now {how} in expanded sites{next}",
                        key(V::ToggleCppFrames),
                    ));
                } else if self.selected_site().is_some_and(|s| s.python_frames == 0) {
                    // A stack of C++ frames only is always listed whole: the
                    // key changes nothing here, but it does for other sites.
                    // Said first: this site is why nothing moved.
                    self.app.ui.notice = Some(format!(
                        "{}: this site's frames are all C++ (no Python frame), so all stay \
                         listed; in other sites C++ frames are now {how}",
                        key(V::ToggleCppFrames)
                    ));
                }
                Effect::Redraw
            }
            V::MarkA | V::MarkB => {
                let Some(device) = self.device().map(|d| d.device) else {
                    return Effect::None;
                };
                let mark = Some(Mark { device, cursor });
                if action == V::MarkA {
                    self.mark_a = mark;
                } else {
                    self.mark_b = mark;
                }
                // Said on the status line: the marks' own place (the end of
                // the event line) is cut on a narrow terminal.
                let (a, b) = (self.mark_here(self.mark_a), self.mark_here(self.mark_b));
                let next = missing_marks(keymap, a, b, false)
                    .unwrap_or_else(|| format!("{} compares them", key(V::Compare)));
                let which = if action == V::MarkA { "A" } else { "B" };
                // With more than one GPU, which one the mark belongs to.
                let on = if self.scrub.devices.len() > 1 {
                    format!(" on GPU {device}")
                } else {
                    String::new()
                };
                self.app.ui.notice = Some(format!("{which} = event {cursor}{on}; {next}"));
                if self.compare.is_some() {
                    self.refresh_compare();
                }
                Effect::Redraw
            }
            V::Compare => {
                if self.compare.is_some() {
                    self.compare = None;
                    self.compare_scroll = 0;
                    return Effect::Redraw;
                }
                let (a, b) = (self.mark_here(self.mark_a), self.mark_here(self.mark_b));
                if let Some(missing) = missing_marks(keymap, a, b, true) {
                    self.app.ui.notice =
                        Some(format!("{} compares A and B: {missing}", key(V::Compare)));
                    return Effect::Redraw;
                }
                self.refresh_compare();
                if self.compare.is_some() {
                    Effect::Redraw
                } else {
                    Effect::None
                }
            }
            V::ToggleZoom => {
                if self.timeline_zoom().is_some() {
                    self.timeline_zoomed = false;
                    return Effect::Redraw;
                }
                match self.zoom_here() {
                    Some(Ok(_)) => self.timeline_zoomed = true,
                    // Pressed where it has nothing to zoom into (on this
                    // GPU: another one's zoom is not kept for it), it says
                    // why, as the help does.
                    Some(Err(why)) => {
                        self.timeline_zoomed = false;
                        self.app.ui.notice = Some(format!("{}: {}", key(V::ToggleZoom), why.why()));
                    }
                    None => {
                        self.app.ui.notice =
                            Some("no trace on this GPU: its final state is all there is".into());
                    }
                }
                Effect::Redraw
            }
        }
    }

    fn move_block(&mut self, delta: isize) -> Effect {
        let n = self.block_count();
        if n == 0 {
            return Effect::None;
        }
        let ui = &mut self.app.ui;
        ui.selected_block = (ui.selected_block as isize + delta).clamp(0, n as isize - 1) as usize;
        self.selected_address = self.selected_block().map(|(_, b)| b.address);
        Effect::Redraw
    }

    /// Moves the selection to the first block of the next segment in the
    /// map (`forward`), or of the selected block's own segment, or the one
    /// before when the selection is there already. A map of hundreds of
    /// segments is otherwise crossed one block a key.
    fn move_segment(&mut self, forward: bool) -> Effect {
        match self.segment_target(forward) {
            Ok(target) => {
                self.app.ui.selected_block = target;
                self.selected_address = self.selected_block().map(|(_, b)| b.address);
            }
            Err(why) => self.app.ui.notice = Some(why.to_string()),
        }
        Effect::Redraw
    }

    /// The block [`Self::move_segment`] selects (index into the map's
    /// blocks), or why there is none: the help dims `]`/`[` with it.
    fn segment_target(&self, forward: bool) -> Result<usize, &'static str> {
        let selected = self.app.ui.selected_block;
        // One pass over each segment's first block (empty segments have
        // none), nothing allocated: this runs on every draw, for the hints.
        // `own`: the selected block's segment's first block (the last one
        // at or before it), `before_own` the one before; `next` the first
        // after the selected block.
        let (mut own, mut before_own, mut next) = (None, None, None);
        let mut any = false;
        let mut at = 0usize;
        for s in &self.segments {
            if !s.blocks.is_empty() {
                any = true;
                if at <= selected {
                    before_own = own;
                    own = Some(at);
                } else if next.is_none() {
                    next = Some(at);
                }
            }
            at = at.saturating_add(s.blocks.len());
        }
        let target = if forward {
            next
        } else {
            match own {
                Some(first) if first < selected => Some(first),
                _ => before_own,
            }
        };
        target.ok_or(if !any {
            "the segment map is empty here"
        } else if forward {
            "the last segment of the map is selected"
        } else {
            "the first segment of the map is selected"
        })
    }

    /// Whether the sites pane takes the keys it answers (↑/↓, Enter, Esc):
    /// it is open with no block detail or help over it.
    pub fn sites_take_keys(&self) -> bool {
        self.sites_open && !self.detail_open && self.app.ui.overlay == Overlay::None
    }

    /// Handles a key press.
    pub fn handle_key(&mut self, keymap: &Keymap, key: KeyEvent) -> Effect {
        // Below the smallest size only the size is on screen.
        if self.app.ui.too_small() {
            return super::update::quit_only(keymap, key);
        }
        // A notice answers one key: a key that changes nothing else still
        // has to redraw, or the screen keeps the old notice as if it were
        // this key's answer ("no OOM in this trace" after `P`).
        let had_notice = self.app.ui.notice.take().is_some();
        match self.answer_key(keymap, key) {
            Effect::None if had_notice => Effect::Redraw,
            effect => effect,
        }
    }

    /// A left click on `pane` (`None`: on no pane, or on the sites pane,
    /// which takes its keys whatever has the focus), on the row of GPU
    /// `gpu` (index into `scrub.devices`) in the GPUs pane: focuses the
    /// pane and selects that GPU, as Tab and the GPU's number do. The block
    /// detail, the A/B comparison and the help are modal over the panes: a
    /// click under them changes nothing. A notice answers one key or
    /// click: a click clears it, as a key does.
    pub fn click(&mut self, pane: Option<Pane>, gpu: Option<usize>) -> Effect {
        let had_notice = self.app.ui.notice.take().is_some();
        let modal =
            self.detail_open || self.compare.is_some() || self.app.ui.overlay != Overlay::None;
        let before = (self.app.ui.focus, self.device_index());
        if !modal && let Some(pane) = pane {
            self.app.ui.focus = pane;
            if pane == Pane::Gpus
                && let Some(i) = gpu.filter(|&i| i < self.scrub.devices.len())
                && i != self.device_index()
            {
                super::update::pick_gpu(&mut self.app, i);
                self.selected_address = None;
                self.refresh();
            }
        }
        if had_notice || before != (self.app.ui.focus, self.device_index()) {
            Effect::Redraw
        } else {
            Effect::None
        }
    }

    /// A left click on the sites pane, on the row of site `site` (index
    /// into the listed sites; `None`: on its title, its stack or a row of
    /// no site): selects that site as `↑`/`↓` would have, an expanded
    /// site's list included (the new site's stack then shows). Under the
    /// block detail, the A/B comparison or the help it changes nothing,
    /// as [`ViewerState::click`]; it clears a notice, as a key does.
    pub fn click_site(&mut self, site: Option<usize>) -> Effect {
        let had_notice = self.app.ui.notice.take().is_some();
        let modal =
            self.detail_open || self.compare.is_some() || self.app.ui.overlay != Overlay::None;
        let effect = match site {
            Some(i) if self.sites_open && !modal => self.select_site(i),
            _ => Effect::None,
        };
        if had_notice { Effect::Redraw } else { effect }
    }

    /// A left click on the sites pane's OOM row: selects it as `↑` from
    /// the first site does (an expanded site folds: the row is read from
    /// the list). Modal overlays and a notice as [`ViewerState::click_site`].
    pub fn click_oom_row(&mut self) -> Effect {
        let had_notice = self.app.ui.notice.take().is_some();
        let modal =
            self.detail_open || self.compare.is_some() || self.app.ui.overlay != Overlay::None;
        let effect = if self.sites_oom_row() && !modal && !self.sites_oom_selected {
            self.sites_oom_selected = true;
            self.site_expanded = false;
            self.site_scroll = 0;
            Effect::Redraw
        } else {
            Effect::None
        };
        if had_notice { Effect::Redraw } else { effect }
    }

    fn answer_key(&mut self, keymap: &Keymap, key: KeyEvent) -> Effect {
        // The help is modal over everything, the block detail and the A/B
        // comparison included, and opens from them as from the rest: it
        // lists their keys.
        if self.app.ui.overlay != Overlay::None {
            return keymap
                .action_for(key)
                .map_or(Effect::None, |action| apply(&mut self.app, keymap, action));
        }
        if (self.compare.is_some() || self.detail_open)
            && keymap.action_for(key) == Some(Action::ToggleHelp)
        {
            return apply(&mut self.app, keymap, Action::ToggleHelp);
        }
        if self.compare.is_some() {
            return match keymap.compare_key_for(key) {
                Some(CompareKey::Quit) => Effect::Quit,
                Some(CompareKey::Close) => {
                    self.compare = None;
                    self.compare_scroll = 0;
                    Effect::Redraw
                }
                Some(CompareKey::ScrollUp) => self.scroll_compare(-1),
                Some(CompareKey::ScrollDown) => self.scroll_compare(1),
                Some(CompareKey::PageUp) => {
                    self.scroll_compare(-popup_page(&self.compare_page_rows))
                }
                Some(CompareKey::PageDown) => {
                    self.scroll_compare(popup_page(&self.compare_page_rows))
                }
                Some(CompareKey::Top) => self.scroll_compare(isize::MIN),
                Some(CompareKey::Bottom) => self.scroll_compare(isize::MAX),
                None => Effect::None,
            };
        }
        if self.sites_take_keys() {
            if let Some(action) = keymap.sites_key_for(key) {
                return self.act(keymap, action);
            }
            // The dashboard's ↑/↓ and Esc, read from its table: an
            // expanded site is read with ↑/↓, which scroll its stack and
            // blocks; folded (Esc, Enter), they select a site.
            match keymap.action_for(key) {
                Some(Action::Up) if self.site_expanded => return self.scroll_site(-1),
                Some(Action::Down) if self.site_expanded => return self.scroll_site(1),
                Some(Action::Up) => return self.move_site(-1),
                Some(Action::Down) => return self.move_site(1),
                Some(Action::Back) => {
                    let action = if self.site_expanded {
                        ViewerAction::ExpandSite
                    } else {
                        ViewerAction::ToggleSites
                    };
                    return self.act(keymap, action);
                }
                _ => {}
            }
        }
        if self.detail_open {
            return match keymap.detail_key_for(key) {
                Some(DetailKey::Quit) => Effect::Quit,
                Some(DetailKey::Close) => {
                    self.detail_open = false;
                    self.detail_oom = false;
                    self.detail_scroll = 0;
                    Effect::Redraw
                }
                Some(DetailKey::PrevBlock | DetailKey::NextBlock) if self.detail_oom => {
                    let close = keymap
                        .detail_key_label(DetailKey::Close)
                        .and_then(|keys| keys.split(' ').next())
                        .unwrap_or_default();
                    self.app.ui.notice = Some(format!(
                        "the OOM's detail has no blocks to step through; {close} closes it"
                    ));
                    Effect::Redraw
                }
                Some(step @ (DetailKey::PrevBlock | DetailKey::NextBlock)) => {
                    let back = step == DetailKey::PrevBlock;
                    let blocks = self.detail_blocks();
                    if (back && !blocks.up) || (!back && !blocks.down) {
                        // A silent key at the end of the map reads as a
                        // broken one: say why, and which key goes on.
                        let other = if back {
                            DetailKey::NextBlock
                        } else {
                            DetailKey::PrevBlock
                        };
                        let other_key = keymap
                            .detail_key_label(other)
                            .and_then(|keys| keys.split(' ').next())
                            .unwrap_or_default();
                        self.app.ui.notice = Some(if back {
                            format!("at the first block of the map; {other_key} goes to the next")
                        } else {
                            format!(
                                "at the last block of the map; {other_key} goes to the previous"
                            )
                        });
                        return Effect::Redraw;
                    }
                    self.detail_scroll = 0;
                    self.move_block(if back { -1 } else { 1 })
                }
                Some(DetailKey::ScrollUp) => {
                    self.scroll_detail(-popup_page(&self.detail_page_rows))
                }
                Some(DetailKey::ScrollDown) => {
                    self.scroll_detail(popup_page(&self.detail_page_rows))
                }
                Some(DetailKey::Top) => self.scroll_detail(isize::MIN),
                Some(DetailKey::Bottom) => self.scroll_detail(isize::MAX),
                None => Effect::None,
            };
        }
        if self.app.ui.overlay == Overlay::None
            && let Some(action) = keymap.viewer_key_for(key)
        {
            return self.act(keymap, action);
        }
        let Some(action) = keymap.action_for(key) else {
            // The dashboard's `a` opens its stress panel, which the
            // viewer has not.
            if keymap.opens_stress(key) {
                return self.does_nothing_here(keymap, key);
            }
            return Effect::None;
        };
        if self.app.ui.overlay != Overlay::None {
            // Help is modal: apply() lets only quit/help/back through.
            return apply(&mut self.app, keymap, action);
        }
        match action {
            Action::Back if !self.waiting_actions.is_empty() => {
                let n = self.waiting_actions.len();
                self.waiting_actions.clear();
                self.app.ui.notice = Some(format!(
                    "dropped {} waiting for the trace",
                    if n == 1 {
                        "the key".to_string()
                    } else {
                        format!("the {n} keys")
                    }
                ));
                Effect::Redraw
            }
            Action::Quit | Action::ToggleHelp | Action::Back => {
                apply(&mut self.app, keymap, action)
            }
            Action::FocusNext | Action::FocusPrev => {
                let effect = apply(&mut self.app, keymap, action);
                // The viewer has no process list.
                if self.app.ui.focus == Pane::Processes {
                    apply(&mut self.app, keymap, action);
                }
                effect
            }
            Action::Up | Action::Down => {
                let delta = if action == Action::Up { -1 } else { 1 };
                if self.app.ui.focus == Pane::Gpus {
                    let before = self.app.ui.selected_gpu;
                    let effect = apply(&mut self.app, keymap, action);
                    if self.app.ui.selected_gpu != before {
                        self.selected_address = None;
                        self.refresh();
                    }
                    effect
                } else {
                    self.move_block(delta)
                }
            }
            Action::SelectGpu(_) => {
                let effect = apply(&mut self.app, keymap, action);
                if effect == Effect::Redraw {
                    self.selected_address = None;
                    self.refresh();
                }
                effect
            }
            // A dashboard key the viewer has no use for (`/`, `K`, `t`):
            // silent, it read as a key that had not registered.
            _ => self.does_nothing_here(keymap, key),
        }
    }

    /// Says that `key`, a dashboard key, does nothing in the viewer, and
    /// which key lists the viewer's own (as the dashboard's keys say why
    /// they do nothing where they cannot act). A key no table binds stays
    /// silent, as it does on the dashboard.
    fn does_nothing_here(&mut self, keymap: &Keymap, key: KeyEvent) -> Effect {
        let pressed = keymap.pressed_label(key);
        let help = keymap.key_name(Action::ToggleHelp).unwrap_or("?");
        self.app.ui.notice = Some(format!(
            "{pressed} does nothing here: {help} lists the viewer's keys"
        ));
        Effect::Redraw
    }

    /// The stack frames listed in the expanded site, by index into its
    /// stack, and the row they start at (as last drawn); `None` when no
    /// site is expanded or its stack is not listed.
    fn site_listing_rows(&self) -> Option<SiteListing> {
        if !self.site_expanded {
            return None;
        }
        let site = self.selected_site().filter(|s| !s.key.is_no_stack())?;
        let with_cpp =
            self.show_cpp || crate::snapshot::sites::frame_counts(&site.stack).python == 0;
        let frames = crate::snapshot::sites::listed_frames(&site.stack, with_cpp)
            .into_iter()
            .filter_map(|f| site.stack.iter().position(|g| std::ptr::eq(g, f)))
            .collect();
        Some(SiteListing {
            first_frame_row: self.site_frames_row.get(),
            frames,
        })
    }

    /// The event the cursor is after (the last one applied), if any.
    pub fn current_event(&self) -> Option<&crate::snapshot::TraceEntry> {
        let c = self.cursor();
        self.device()
            .and_then(|d| c.checked_sub(1).and_then(|i| d.events().get(i)))
    }

    /// Whether the cursor stands just after an OOM event: `Enter` then
    /// shows the failed request's stack.
    pub fn at_oom(&self) -> bool {
        self.current_event()
            .is_some_and(|e| e.action == crate::alloc::TraceAction::Oom)
    }

    /// Opens the OOM detail: the failed request's of the OOM event at the
    /// cursor (`Enter` on an OOM, or on the sites pane's OOM row).
    fn open_oom_detail(&mut self) -> Effect {
        self.detail_open = true;
        self.detail_oom = true;
        self.detail_scroll = 0;
        Effect::Redraw
    }

    /// Which code asked for the failed request of the OOM event at the
    /// cursor (`None` off an OOM).
    pub fn oom_stack(&self) -> Option<crate::snapshot::summary::OomStack> {
        let e = self.current_event()?;
        (e.action == crate::alloc::TraceAction::Oom).then(|| {
            crate::snapshot::summary::OomStack::of(
                &e.frames,
                self.no_stack != NoStackReason::WithoutStacks,
            )
        })
    }

    /// Why the selected block (allocated or pending, without a stack) has
    /// no stack: the reason the sites pane groups it under (the file's,
    /// or "allocated before the trace began" for a block the trace freed
    /// and no longer holds the allocation of). `None` for a free block.
    pub fn selected_no_stack_reason(&self) -> Option<NoStackReason> {
        let (_, b) = self.selected_block()?;
        if b.state == BlockState::Inactive {
            return None;
        }
        let lost = self
            .device()
            .and_then(|d| d.block_at(self.cursor(), b.address))
            .is_some_and(|l| l.stack_lost);
        Some(self.no_stack.within_trace(lost))
    }

    /// What last held the selected free block, from the trace: `None` for
    /// a block that is not free, or without events to search. Asked every
    /// frame the detail is drawn; searched once per block and cursor.
    pub fn selected_last_held(&self) -> Option<LastHeld> {
        let (_, b) = self.selected_block()?;
        if b.state != BlockState::Inactive {
            return None;
        }
        let d = self.device().filter(|d| !d.is_empty())?;
        let key = (self.device_index(), self.cursor(), b.address, b.size);
        if let Some((asked, held)) = *self.last_held.borrow()
            && asked == key
        {
            return Some(held);
        }
        let held = d.last_held(self.cursor(), b.address, b.size);
        *self.last_held.borrow_mut() = Some((key, held));
        Some(held)
    }

    /// Whether the selected block's size was inferred (see the scrub docs).
    pub fn selected_size_inferred(&self) -> bool {
        let Some((_, b)) = self.selected_block() else {
            return false;
        };
        if b.state == BlockState::Inactive {
            return false;
        }
        self.device()
            .and_then(|d| d.block_at(self.cursor(), b.address))
            .is_some_and(|l| l.size_inferred)
    }
}

/// The keys still to press before `c` compares, seen from the selected GPU
/// (`None` when both marks are on it), and where the marks are: a mark on
/// another GPU is named with its GPU, as it does not count here; one on
/// this GPU with its event when `with_set` (the notice of `m` names the mark
/// it set itself). Whole on an 80-column status line after "c compares A
/// and B: ", the longest event number included.
fn missing_marks(keymap: &Keymap, a: MarkHere, b: MarkHere, with_set: bool) -> Option<String> {
    let key = |action| keymap.viewer_key_name(action).unwrap_or_default();
    let marks = [
        (a, "A", format!("{} marks A", key(ViewerAction::MarkA))),
        (b, "B", format!("{} marks B", key(ViewerAction::MarkB))),
    ];
    let keys: Vec<&str> = marks
        .iter()
        .filter(|(m, _, _)| !matches!(m, MarkHere::Here(_)))
        .map(|(_, _, key)| key.as_str())
        .collect();
    if keys.is_empty() {
        return None;
    }
    let elsewhere = marks
        .iter()
        .any(|(m, _, _)| matches!(m, MarkHere::Elsewhere(_)));
    let here = if elsewhere { " here" } else { "" };
    let facts: Vec<String> = marks
        .iter()
        .filter_map(|(m, name, _)| match m {
            MarkHere::Here(c) if with_set => Some(format!("{name} is event {c}")),
            MarkHere::Elsewhere(g) => Some(format!("{name} is on GPU {g}")),
            _ => None,
        })
        .collect();
    let facts = match (facts.is_empty(), with_set) {
        (false, _) => format!(" ({})", facts.join("; ")),
        (true, true) => " (neither is marked)".to_string(),
        (true, false) => String::new(),
    };
    Some(format!("{}{here}{facts}", keys.join(", ")))
}

/// Whether two layouts have the same segments and blocks (addresses,
/// sizes and states).
fn same_blocks(a: &[Segment], b: &[Segment]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            (x.address, x.total_size, x.blocks.len()) == (y.address, y.total_size, y.blocks.len())
                && x.blocks
                    .iter()
                    .zip(&y.blocks)
                    .all(|(p, q)| (p.address, p.size, p.state) == (q.address, q.size, q.state))
        })
}

/// Moves `scroll` by `delta` rows within `0..=limit`: a redraw if it moved.
fn scroll_within(scroll: &mut usize, limit: usize, delta: isize) -> Effect {
    let next = (*scroll).min(limit).saturating_add_signed(delta).min(limit);
    if next == *scroll {
        return Effect::None;
    }
    *scroll = next;
    Effect::Redraw
}
