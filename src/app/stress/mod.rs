//! The stress panel's state machine: a person presses keys and watches
//! PyTorch's caching allocator react.
//!
//! Pure: actions come in ([`StressPanel::apply`]) and commands for the device
//! worker go out; the worker's answers come back in
//! ([`StressPanel::on_result`]). No threads, no clock, no device here, so
//! every flow (cap refusals, OOMs, holes, compare marks) is testable as
//! plain values. The worker that executes the commands is
//! [`super::stress_worker`].

use serde::Serialize;

use super::keymap::{AtEnd, PanelKey, TypingKey, TypingMode};
use super::state::AllocatorView;
use crate::alloc::explain::Why;

mod figures;
mod input;
mod patterns;
mod protocol;
mod runner;

pub use figures::*;
pub use input::*;
pub use patterns::*;
pub use protocol::*;
pub use runner::*;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Tensor sizes `+`/`-` step through (bytes): a small-pool crumb, a
/// small-pool-sized tensor, and large-pool tensors up to a whole GiB.
pub const SIZE_PRESETS: [u64; 5] = [512, MIB, 10 * MIB, 100 * MIB, GIB];
/// The preset a fresh panel starts at (1 MiB: small-pool tensors, two per
/// 2 MiB segment, so freeing every other one leaves every segment half
/// used: holes that empty_cache cannot return).
pub const DEFAULT_SIZE: usize = 1;
/// Tensors per allocation `]`/`[` step through.
pub const COUNT_PRESETS: [u32; 7] = [1, 2, 5, 10, 20, 50, 100];
/// The count a fresh panel starts at.
pub const DEFAULT_COUNT: usize = 3;
/// On a real GPU the panel may use this share of the memory free when it
/// started (percent): the rest stays for whatever else runs there.
pub const REAL_GPU_CAP_PERCENT: u64 = 50;
/// Actions kept while the worker is busy (keys typed faster than it
/// answers); more are dropped and counted, except free all and
/// empty_cache, which are never dropped (see [`StressPanel::enqueue`]).
pub const MAX_QUEUED: usize = 32;

/// A live tensor of the panel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Tensor {
    /// Allocation order: smaller is older.
    pub id: u64,
    pub address: u64,
    pub size: u64,
    pub requested: u64,
}

/// The last out-of-memory, kept until the next successful allocation or
/// until memory is freed (a free, an empty_cache that releases some).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomState {
    pub message: String,
    pub reserved_but_unallocated: u64,
    pub room: OomRoom,
}

/// What takes the panel's keys: its own actions, or the one field or list
/// that is open (opening one closes any other).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum PanelModal {
    /// The panel's keys act.
    Keys,
    /// The size field is open (`s`), with its text.
    SizeField(String),
    /// The allocator-settings field is open (`S`), with its text.
    SettingsField(String),
    /// The built-in scenario list is open (`n`).
    ScenarioList(ScenarioPicker),
}

/// The compare view's marks: `c` marks A, then B, then starts over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
// One per panel, as large as the two marks it holds: boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum CompareMarks {
    None,
    A(Figures),
    Both(Figures, Figures),
}

impl CompareMarks {
    /// The figures marked A, if any.
    pub fn a(&self) -> Option<&Figures> {
        match self {
            CompareMarks::None => None,
            CompareMarks::A(a) | CompareMarks::Both(a, _) => Some(a),
        }
    }

    /// A and B, once both are marked.
    pub fn both(&self) -> Option<(&Figures, &Figures)> {
        match self {
            CompareMarks::Both(a, b) => Some((a, b)),
            _ => None,
        }
    }
}

/// The default cap: on a real GPU [`REAL_GPU_CAP_PERCENT`] of the memory
/// free at start; the simulation has none, so OOM can be reached.
pub fn default_cap(free_at_start: u64, real_gpu: bool) -> Option<u64> {
    // In u128 so that the product cannot overflow and no byte is lost to
    // dividing first.
    real_gpu.then(|| (u128::from(free_at_start) * u128::from(REAL_GPU_CAP_PERCENT) / 100) as u64)
}

/// Why a request is refused before it is sent: the live tensors' blocks
/// (`allocated`) and the requested bytes already pass the cap, and reserved
/// holds at least both. Whether the blocks the request gets fit under the
/// cap (a cached block may serve it; a new segment may be larger than the
/// request) only the worker's allocator knows: it refuses the rest
/// (`StressCommand::Malloc`'s `cap`). Bytes in the message.
pub fn cap_refusal(allocated: u64, request: u64, cap: u64) -> Option<String> {
    let total = allocated.saturating_add(request);
    (total > cap).then(|| {
        format!(
            "refused: allocated {} + request {} = {} exceeds the stress cap of {}",
            crate::alloc::sizing::display_bytes(allocated),
            crate::alloc::sizing::display_bytes(request),
            crate::alloc::sizing::display_bytes(total),
            crate::alloc::sizing::display_bytes(cap),
        )
    })
}

/// The keys that apply and cancel the size and settings fields ("Enter",
/// "Esc"), as the fields' table binds them: fixed keys (the field takes
/// every other), named from the one table that dispatches them.
pub fn field_keys() -> (&'static str, &'static str) {
    let key = |k| TypingMode::StressField.key_name(k).unwrap_or_default();
    (key(TypingKey::Done), key(TypingKey::Cancel))
}

/// A panel key a message ends with, and what it does ("n" "lists them"):
/// the ui names the key as the keymap binds it, so that a message and the
/// help cannot name different keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyUse {
    pub key: PanelKey,
    pub does: String,
}

impl KeyUse {
    pub fn new(key: PanelKey, does: impl Into<String>) -> Self {
        KeyUse {
            key,
            does: does.into(),
        }
    }

    /// The key of a panel action.
    pub fn act(action: StressAction, does: impl Into<String>) -> Self {
        KeyUse::new(PanelKey::Act(action), does)
    }
}

/// The stress panel's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StressPanel {
    /// Index into [`SIZE_PRESETS`].
    pub size_index: usize,
    /// A typed size (bytes) in place of the preset, until `+`/`-`.
    pub custom_size: Option<u64>,
    /// Which field or list takes the keys, if any.
    pub modal: PanelModal,
    /// Validated settings waiting for [`StressAction::Reconfigure`].
    pub pending_settings: Option<String>,
    /// Transformer steps completed (every tensor allocated) since the start
    /// or the last reconfigure: the first one also allocates the weights.
    /// A step the cap or the device refused partway is not one.
    pub transformer_steps: u64,
    /// The tensors the transformer step with the worker asks for, until
    /// its answer says whether it completed.
    pub transformer_step_sent: Option<usize>,
    /// The ids of the tensors a refused transformer step obtained: the
    /// next Allocate asks for the rest of that step while they all live.
    pub transformer_step_obtained: Vec<u64>,
    /// The settings the worker's allocator runs under (`""`: PyTorch's
    /// defaults).
    pub settings: String,
    /// Index into [`COUNT_PRESETS`].
    pub count_index: usize,
    pub pattern: Pattern,
    /// The random pattern's generator state.
    pub rng: u64,
    /// Live tensors, oldest first.
    pub tensors: Vec<Tensor>,
    /// Index into `tensors`.
    pub selected: usize,
    pub next_id: u64,
    /// The GPU the worker runs on, once it started.
    pub gpu: Option<u32>,
    /// The process whose memory the worker allocates on the GPU (vramtop
    /// itself on CUDA, a process of its own on the simulation): its row in
    /// the process list shows the panel's figures.
    pub pid: Option<u32>,
    /// Bytes the panel may hold reserved; `None`: no cap (simulation).
    pub cap: Option<u64>,
    /// The cap given with `--stress-cap`: it replaces the default (on the
    /// simulated GPU too) when the worker starts.
    pub cap_setting: Option<u64>,
    /// The allocator's figures after the last result, as the worker's
    /// device reports them.
    pub figures: Figures,
    /// Bytes the dashboard's GPUs row counts in each GPU's driver used
    /// (by GPU index) that the worker's device does not: the probed
    /// processes the dashboard adds to a simulated GPU's readings. Set by
    /// each sample; empty on a real GPU, whose driver counts every
    /// process. The compare marks add them, so that its driver-used row
    /// reads what the GPUs row does.
    pub unseen_driver_used: std::collections::BTreeMap<u32, u64>,
    /// The worker's allocator, for the dashboard's panes.
    pub view: Option<AllocatorView>,
    /// Whether the compare view lists the free-block histogram too (`H`).
    pub show_histogram: bool,
    /// The figures `c` marked for the compare view.
    pub marks: CompareMarks,
    /// The device's answers taken since the worker started (allocations,
    /// frees, empty_caches, …): the moments the marks are of are counted
    /// in them.
    pub answers: u64,
    /// [`StressPanel::answers`] when B was marked.
    pub marked_b_at: u64,
    pub oom: Option<OomState>,
    /// One line about the last thing that happened: its words up to the
    /// keys it ends with ([`StressPanel::message_keys`]).
    pub message: Option<String>,
    /// The keys the message ends with and what each does, after its words
    /// ("no scenario loaded:" then "n lists them"). [`StressPanel::say`]
    /// and [`StressPanel::say_then`] set both.
    pub message_keys: Vec<KeyUse>,
    /// Why the figures moved as the message says (the lessons `vramtop
    /// demo` gives, from the model's [`Why`]): drawn under the message
    /// where the panel has room. A new message drops them.
    pub why: Vec<Why>,
    /// Whether an allocation has succeeded on the GPU since the worker
    /// started: on the simulated GPU the first one also creates the
    /// process's CUDA context (a real GPU's worker made it when it
    /// started, and other processes move its figure).
    pub allocated_once: bool,
    /// Whether the worker runs on a real GPU (its `Started` answer).
    pub real_gpu: bool,
    /// The CUDA context the first allocation created on the simulated
    /// GPU: [`StressPanel::answers`] with that answer, and its bytes.
    pub context_created: Option<(u64, u64)>,
    /// [`StressPanel::answers`] when A was marked.
    pub marked_a_at: u64,
    /// A command in `message` to copy ("vramtop replay FILE", or the
    /// allocator settings applied): the panel breaks its rows before it,
    /// never inside it (one wider than a row is broken where it has a `/`
    /// or a `,`). A new message drops it.
    pub message_command: Option<String>,
    /// A command is with the worker: new requests wait for its answer, so
    /// the panel never frees an address twice.
    pub busy: bool,
    /// The worker was spawned and its first answer has not come yet: keys
    /// typed meanwhile wait in [`StressPanel::queued`] as they do while
    /// busy, and run once it says it is ready (`a a` typed quickly on a
    /// fresh dashboard opened the panel and lost the allocation).
    pub starting: bool,
    /// The command with the worker is a snapshot to write (`W`, or `c`
    /// on the panel's allocator with the panel closed): its answer is the
    /// snapshot's, whether written or failed.
    pub saving: bool,
    /// Actions typed while busy, applied in order after the answer (so a
    /// mark typed after a free sees the free's figures).
    pub queued: Vec<StressAction>,
    /// Keys dropped since the panel was last idle: typed while
    /// [`MAX_QUEUED`] others were waiting. Said when the queue drains.
    pub dropped_keys: u64,
    /// Allocations the cap refused since the panel was last idle (the
    /// panel's check or the worker's): in a burst each refusal's words are
    /// replaced by the next answer's, so the count is said instead.
    pub refused_keys: u64,
    /// Whether a queued action ran since the panel was last idle: only then
    /// are refusals counted aloud (a lone refusal says itself).
    pub queued_ran: bool,
    /// Queued allocations and frees a free all typed behind them cancelled
    /// since the panel was last idle (their tensors would have gone anyway).
    pub cancelled_keys: u64,
    /// The scenario loaded into the panel.
    pub scenario: Option<ScenarioRun>,
    /// Where the allocator runs: the GPU, or a loaded scenario's device.
    pub device: PanelDevice,
}

impl Default for StressPanel {
    fn default() -> Self {
        StressPanel {
            size_index: DEFAULT_SIZE,
            custom_size: None,
            modal: PanelModal::Keys,
            pending_settings: None,
            settings: String::new(),
            transformer_steps: 0,
            transformer_step_sent: None,
            transformer_step_obtained: Vec::new(),
            count_index: DEFAULT_COUNT,
            pattern: Pattern::Fixed,
            rng: DEFAULT_SEED,
            tensors: Vec::new(),
            selected: 0,
            next_id: 1,
            gpu: None,
            pid: None,
            cap: None,
            cap_setting: None,
            figures: Figures::default(),
            unseen_driver_used: std::collections::BTreeMap::new(),
            view: None,
            show_histogram: false,
            marks: CompareMarks::None,
            answers: 0,
            marked_b_at: 0,
            oom: None,
            message: None,
            message_keys: Vec::new(),
            message_command: None,
            why: Vec::new(),
            allocated_once: false,
            real_gpu: false,
            context_created: None,
            marked_a_at: 0,
            busy: false,
            starting: false,
            saving: false,
            queued: Vec::new(),
            dropped_keys: 0,
            refused_keys: 0,
            queued_ran: false,
            cancelled_keys: 0,
            scenario: None,
            device: PanelDevice::Gpu,
        }
    }
}

impl StressPanel {
    /// A fresh panel whose cap is `cap` (bytes) instead of the default
    /// (`--stress-cap`); `None`: the default.
    pub fn with_cap(cap: Option<u64>) -> Self {
        StressPanel {
            cap_setting: cap,
            ..StressPanel::default()
        }
    }

    pub fn size(&self) -> u64 {
        self.custom_size
            .unwrap_or(SIZE_PRESETS[self.size_index.min(SIZE_PRESETS.len() - 1)])
    }

    /// `+`/`-`: the next or previous preset, from a typed size the nearest
    /// preset above or below it.
    fn step_size(&mut self, up: bool) {
        let len = SIZE_PRESETS.len();
        self.size_index = match self.custom_size.take() {
            Some(c) if up => SIZE_PRESETS.iter().position(|&p| p > c).unwrap_or(len - 1),
            Some(c) => SIZE_PRESETS.iter().rposition(|&p| p < c).unwrap_or(0),
            None => Self::step(self.size_index, len, up),
        };
    }

    fn set_size(&mut self, size: u64) {
        match SIZE_PRESETS.iter().position(|&p| p == size) {
            Some(i) => {
                self.size_index = i;
                self.custom_size = None;
            }
            None => self.custom_size = Some(size),
        }
        self.say(format!(
            "size set to {}",
            crate::alloc::sizing::display_bytes(size)
        ));
    }

    /// Which end of [`SIZE_PRESETS`] the size stands at: none while a
    /// typed size is set (`+`/`-` then go to the nearest preset).
    pub fn size_ends(&self) -> AtEnd {
        let last = SIZE_PRESETS.len() - 1;
        let at = self.size_index.min(last);
        AtEnd {
            first: self.custom_size.is_none() && at == 0,
            last: self.custom_size.is_none() && at == last,
        }
    }

    /// Which end of [`COUNT_PRESETS`] the tensors per allocation stand at.
    pub fn count_ends(&self) -> AtEnd {
        let last = COUNT_PRESETS.len() - 1;
        let at = self.count_index.min(last);
        AtEnd {
            first: at == 0,
            last: at == last,
        }
    }

    pub fn count(&self) -> u32 {
        COUNT_PRESETS[self.count_index.min(COUNT_PRESETS.len() - 1)]
    }

    /// Whether the worker has started and answers.
    pub fn ready(&self) -> bool {
        self.gpu.is_some()
    }

    /// The shell spawned the worker: until its first answer, keys wait.
    pub fn worker_spawned(&mut self) {
        self.starting = !self.ready();
    }

    /// Whether keys must wait for an answer: one to the command with the
    /// worker, or the worker's first (it is starting).
    fn waiting(&self) -> bool {
        self.busy || (self.starting && !self.ready())
    }

    /// The cap that applies now: a scenario's simulated device has none
    /// (running out of its memory is the point).
    pub fn active_cap(&self) -> Option<u64> {
        match self.device {
            PanelDevice::Gpu => self.cap,
            PanelDevice::Scenario { .. } => None,
        }
    }

    /// The histogram rows when both marks are set and `H` shows them.
    pub fn histogram_compare(&self) -> Option<Vec<HistogramRow>> {
        if !self.show_histogram {
            return None;
        }
        let (a, b) = self.marks.both()?;
        Some(histogram_rows(a, b))
    }

    /// The device's answers taken since B was marked, once A and B are:
    /// the compare table's figures are of a moment that many actions ago
    /// (0: B is the figures now).
    pub fn answers_since_b(&self) -> Option<u64> {
        self.marks
            .both()
            .map(|_| self.answers.saturating_sub(self.marked_b_at))
    }

    /// The bytes of the CUDA context the panel's first allocation created
    /// between A and B, once both are marked: part of the driver-used
    /// row's Δ that reserved's does not have.
    pub fn context_between_marks(&self) -> Option<u64> {
        self.marks.both()?;
        let (at, bytes) = self.context_created?;
        (self.marked_a_at < at && at <= self.marked_b_at).then_some(bytes)
    }

    /// The compare rows when both marks are set.
    pub fn compare(&self) -> Option<Vec<CompareRow>> {
        let (a, b) = self.marks.both()?;
        Some(compare_rows(a, b))
    }

    /// The sizes of the next allocation; advances the generator.
    fn next_sizes(&mut self) -> Vec<u64> {
        if self.pattern == Pattern::TransformerStep {
            let mut sizes = transformer_step_sizes(self.transformer_steps == 0);
            // A refused step is resumed where it stopped while what it
            // obtained is still there; freed, the step starts over.
            let obtained = &self.transformer_step_obtained;
            // The list is in id order (ids grow as tensors are added;
            // frees keep the order): a search, not a scan of up to 100,000
            // tensors per id on every Allocate.
            let all_live = obtained
                .iter()
                .all(|id| self.tensors.binary_search_by_key(id, |t| t.id).is_ok());
            if all_live && obtained.len() < sizes.len() {
                sizes.drain(..obtained.len());
            } else {
                self.transformer_step_obtained.clear();
            }
            return sizes;
        }
        let size = self.size();
        (0..self.count())
            .map(|_| match self.pattern {
                Pattern::Fixed | Pattern::TransformerStep => size,
                Pattern::RandomLogUniform => {
                    let (state, draw) = next_random(self.rng);
                    self.rng = state;
                    log_uniform(draw, RANDOM_MIN_BYTES, size)
                }
            })
            .collect()
    }

    /// Says `text` as the panel's message.
    pub fn say(&mut self, text: impl Into<String>) {
        self.say_then(text, Vec::new());
    }

    /// Says `text`, then what `keys` do (the ui names each key after the
    /// words, which end where the keys come in: "no scenario loaded:").
    pub fn say_then(&mut self, text: impl Into<String>, keys: Vec<KeyUse>) {
        self.message = Some(text.into());
        self.message_keys = keys;
        self.message_command = None;
        self.why.clear();
    }

    /// Why no command can go to the worker now.
    fn unavailable(&self) -> Option<&'static str> {
        if !self.ready() {
            Some("the stress worker has not started")
        } else if self.busy {
            Some("busy: the last request has not been answered")
        } else {
            None
        }
    }

    /// Sends `command` unless the worker is unavailable.
    fn send(&mut self, command: StressCommand) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        self.busy = true;
        vec![command]
    }

    fn free(&mut self, addresses: Vec<u64>) -> Vec<StressCommand> {
        if addresses.is_empty() {
            self.say("no live tensors to free");
            return Vec::new();
        }
        self.send(StressCommand::Free { addresses })
    }

    fn allocate(&mut self) -> Vec<StressCommand> {
        if let Some(why) = self.unavailable() {
            self.say(why);
            return Vec::new();
        }
        let sizes = self.next_sizes();
        let request = sizes.iter().fold(0u64, |sum, &s| sum.saturating_add(s));
        let cap = self.active_cap();
        if let Some(cap) = cap
            && let Some(why) = cap_refusal(self.figures.allocated, request, cap)
        {
            self.refused_keys += 1;
            self.say(why);
            return Vec::new();
        }
        let tensors = sizes.len();
        let commands = self.send(StressCommand::Malloc { sizes, cap });
        if self.pattern == Pattern::TransformerStep && !commands.is_empty() {
            // Counted when the answer says every tensor was allocated.
            self.transformer_step_sent = Some(tensors);
        }
        commands
    }

    /// Why an allocation of the tensors `new` grew reserved by `grew`
    /// bytes, as the model's rules tell it: the cache held no free block
    /// for the request, and a request of that size gets a segment of a set
    /// size (spec §1.4), or expandable segments mapped pages.
    fn allocation_why(&self, new: &[NewTensor], grew: u64) -> Option<Why> {
        if new.is_empty() {
            return None;
        }
        if grew == 0 {
            return Some(Why::ServedFromCache);
        }
        let config = crate::alloc::AllocatorConfig::parse(&self.settings).unwrap_or_default();
        if config.expandable_segments {
            return Some(Why::PagesMapped);
        }
        let first = new[0].requested;
        if new.iter().any(|t| t.requested != first) {
            return Some(Why::NoCachedBlockFitsAll);
        }
        let request = crate::alloc::round_size(first, &config);
        let segment = crate::alloc::allocation_size(request);
        Some(Why::NewSegment {
            request,
            segment,
            several: grew > segment,
        })
    }

    /// Forgets the last OOM once memory was freed since (a free, or an
    /// empty_cache that released some): its figures ("… of which 3.97 GiB
    /// is free", the live tensors its advice would free) describe a state
    /// that is gone, and shown on they read as the last action's. The words
    /// to add to the message, if there was one.
    fn oom_past(&mut self) -> &'static str {
        if self.oom.take().is_some() {
            "; the OOM's message went (memory was freed since)"
        } else {
            ""
        }
    }

    /// Forgets the compare marks: they were figures of an allocator that
    /// has just been replaced. The words to add to the message, if any.
    fn clear_marks(&mut self) -> &'static str {
        let had = std::mem::replace(&mut self.marks, CompareMarks::None) != CompareMarks::None;
        if had {
            "; compare cleared (its marks were of the old allocator)"
        } else {
            ""
        }
    }

    /// The figures a compare mark takes now: the worker's, with driver
    /// used the whole GPU's as the GPUs row counts it (the probed
    /// processes a simulated GPU's device does not see added). A scenario's
    /// device is the panel's own: nothing else is on it.
    pub fn mark_figures(&self) -> Figures {
        let unseen = match (self.device, self.gpu) {
            (PanelDevice::Gpu, Some(gpu)) => {
                self.unseen_driver_used.get(&gpu).copied().unwrap_or(0)
            }
            _ => 0,
        };
        Figures {
            driver_used: self.figures.driver_used.saturating_add(unseen),
            ..self.figures
        }
    }

    fn mark(&mut self) {
        let figures = self.mark_figures();
        match self.marks {
            CompareMarks::None => {
                self.marks = CompareMarks::A(figures);
                self.marked_a_at = self.answers;
                self.say_then(
                    "marked A: act, then",
                    vec![KeyUse::act(StressAction::MarkCompare, "marks B")],
                );
            }
            CompareMarks::A(a) => {
                self.marks = CompareMarks::Both(a, figures);
                self.marked_b_at = self.answers;
                self.say_then(
                    "marked B: A | B | Δ below;",
                    vec![KeyUse::act(StressAction::MarkCompare, "starts over")],
                );
                // The driver-used row is the whole GPU's: where it moved
                // apart from reserved, say what else moved it.
                let b = figures;
                let past_reserved = (i128::from(b.driver_used) - i128::from(a.driver_used))
                    - (i128::from(b.reserved) - i128::from(a.reserved));
                if past_reserved != 0 && self.device == PanelDevice::Gpu {
                    self.why.push(Why::DriverPastReserved {
                        bytes: i64::try_from(past_reserved).unwrap_or(i64::MAX),
                        context: self.context_between_marks(),
                    });
                }
            }
            CompareMarks::Both(..) => {
                self.marks = CompareMarks::A(figures);
                self.marked_a_at = self.answers;
                self.say("marked a new A");
            }
        }
    }

    fn step(index: usize, len: usize, up: bool) -> usize {
        if up {
            (index + 1).min(len - 1)
        } else {
            index.saturating_sub(1)
        }
    }

    /// Keeps an action typed while the worker is busy. Up to [`MAX_QUEUED`]
    /// wait in order; past that a key is dropped and counted ("N keys
    /// dropped: the panel is busy", said at once and again when the queue
    /// drains). What gives memory back is never dropped, so that a burst
    /// of allocations cannot hold the GPU against a free typed after it:
    /// - free all cancels the allocations and frees waiting before it
    ///   (after it their tensors are gone either way) and waits behind
    ///   what is left, so it runs next but for keys that allocate nothing;
    /// - empty_cache waits past the limit too, unless the key waiting last
    ///   is already one (a second would release nothing more).
    ///
    /// The queue so stays bounded: no two empty_caches in it are next to
    /// each other, and it holds at most one free all.
    fn enqueue(&mut self, action: StressAction) {
        match action {
            StressAction::FreeAll => {
                let before = self.queued.len();
                self.queued.retain(|a| !a.allocates_or_frees());
                // Two empty_caches the cancelled keys stood between are one.
                self.queued.dedup_by(|a, b| {
                    *a == StressAction::EmptyCache && *b == StressAction::EmptyCache
                });
                let cancelled = before - self.queued.len();
                self.cancelled_keys += cancelled as u64;
                self.queued.push(action);
                if cancelled > 0 {
                    self.say(format!(
                        "free all runs next: {} waiting before it cancelled",
                        keys(cancelled as u64)
                    ));
                }
            }
            StressAction::EmptyCache => {
                if self.queued.last() != Some(&StressAction::EmptyCache) {
                    self.queued.push(action);
                }
            }
            _ if self.queued.len() < MAX_QUEUED => self.queued.push(action),
            _ => {
                self.dropped_keys += 1;
                self.say(dropped_note(self.dropped_keys));
            }
        }
    }

    /// After an answer in a burst: says how many keys were dropped or
    /// cancelled and how many allocations the cap refused on the way, after
    /// the answer's words, so that the counts stay in view while the queue
    /// drains; once it has (`drained`), starts counting afresh.
    fn say_skipped_keys(&mut self, drained: bool) {
        let mut notes = Vec::new();
        if self.cancelled_keys > 0 {
            notes.push(format!(
                "{} cancelled by free all",
                keys(self.cancelled_keys)
            ));
        }
        if self.refused_keys > 0 && self.queued_ran {
            notes.push(refused_note(self.refused_keys));
        }
        if self.dropped_keys > 0 {
            notes.push(dropped_note(self.dropped_keys));
        }
        if drained {
            self.cancelled_keys = 0;
            self.dropped_keys = 0;
            self.refused_keys = 0;
            self.queued_ran = false;
        }
        if notes.is_empty() {
            return;
        }
        let notes = notes.join("; ");
        let message = self.message.take().unwrap_or_default();
        // A message that ends where its keys come in ("…:") keeps them last.
        self.message = Some(if message.is_empty() {
            notes
        } else if self.message_keys.is_empty() {
            format!("{message}; {notes}")
        } else {
            format!("{notes}; {message}")
        });
    }

    /// Applies a key's action: the commands for the worker (at most one).
    /// While the worker is busy, actions other than moving the cursor wait
    /// in [`StressPanel::queued`].
    pub fn apply(&mut self, action: StressAction) -> Vec<StressCommand> {
        if !self.waiting() {
            // A key typed at an idle panel: a refusal before it was said.
            self.refused_keys = 0;
        }
        self.apply_now(action)
    }

    /// [`StressPanel::apply`] of a key typed now or waiting in the queue.
    fn apply_now(&mut self, action: StressAction) -> Vec<StressCommand> {
        if self.waiting()
            && !matches!(
                action,
                StressAction::Up
                    | StressAction::Down
                    | StressAction::TypeSize
                    | StressAction::TypeSettings
                    | StressAction::ToggleHistogram
                    | StressAction::OpenScenarios
            )
        {
            self.enqueue(action);
            return Vec::new();
        }
        match action {
            StressAction::SizeUp | StressAction::SizeDown => {
                let up = action == StressAction::SizeUp;
                let ends = self.size_ends();
                if (up && ends.last) || (!up && ends.first) {
                    let size = crate::alloc::sizing::display_bytes(self.size());
                    let end = if up { "largest" } else { "smallest" };
                    self.say_then(
                        format!("already at the {end} preset size ({size}):"),
                        vec![KeyUse::act(StressAction::TypeSize, "types any size")],
                    );
                    return Vec::new();
                }
                self.step_size(up);
            }
            StressAction::TypeSize => {
                self.modal = PanelModal::SizeField(String::new());
                let (done, cancel) = field_keys();
                self.say(format!(
                    "type a size (512, 37MiB, 1.5GiB): {done} sets it, {cancel} cancels"
                ));
            }
            StressAction::SetSize(size) => self.set_size(size),
            StressAction::TypeSettings => {
                self.modal = PanelModal::SettingsField(self.settings.clone());
                let (done, cancel) = field_keys();
                self.say(format!(
                    "allocator settings, e.g. expandable_segments:True,max_split_size_mb:128: \
                     {done} frees every tensor and starts a fresh allocator, {cancel} cancels",
                ));
            }
            StressAction::Reconfigure => {
                let Some(settings) = self.pending_settings.take() else {
                    self.say("no allocator settings to apply");
                    return Vec::new();
                };
                return self.send(StressCommand::Reconfigure { settings });
            }
            StressAction::CountUp | StressAction::CountDown => {
                let up = action == StressAction::CountUp;
                let ends = self.count_ends();
                if (up && ends.last) || (!up && ends.first) {
                    let end = if up { "most" } else { "fewest" };
                    self.say(format!(
                        "already at the {end} tensors per allocation ({})",
                        self.count()
                    ));
                    return Vec::new();
                }
                self.count_index = Self::step(self.count_index, COUNT_PRESETS.len(), up);
            }
            StressAction::TogglePattern => {
                self.pattern = self.pattern.next();
            }
            StressAction::Up => self.selected = self.selected.saturating_sub(1),
            StressAction::Down => {
                self.selected = (self.selected + 1).min(self.tensors.len().saturating_sub(1));
            }
            StressAction::Allocate => return self.allocate(),
            StressAction::FreeSelected => {
                let a = self.tensors.get(self.selected).map(|t| t.address);
                return self.free(a.into_iter().collect());
            }
            StressAction::FreeOldest => {
                let a = self.tensors.first().map(|t| t.address);
                return self.free(a.into_iter().collect());
            }
            StressAction::FreeRandom => {
                if self.tensors.is_empty() {
                    return self.free(Vec::new());
                }
                let (state, draw) = next_random(self.rng);
                self.rng = state;
                let i = (draw % self.tensors.len() as u64) as usize;
                return self.free(vec![self.tensors[i].address]);
            }
            StressAction::FreeEveryOther => {
                if self.tensors.len() == 1 {
                    // Not "no live tensors": there is one, and it stays.
                    self.say("one live tensor: every other frees the 2nd, 4th, …");
                    return Vec::new();
                }
                let a = self.tensors.iter().skip(1).step_by(2).map(|t| t.address);
                return self.free(a.collect());
            }
            StressAction::FreeAll => {
                let a = self.tensors.iter().map(|t| t.address);
                return self.free(a.collect());
            }
            StressAction::EmptyCache => return self.send(StressCommand::EmptyCache),
            StressAction::Verify => {
                if self.tensors.is_empty() {
                    self.say("no live tensors to verify");
                    return Vec::new();
                }
                return self.send(StressCommand::Verify);
            }
            StressAction::MarkCompare => self.mark(),
            StressAction::SaveSnapshot => {
                let commands = self.send(StressCommand::SaveSnapshot);
                self.saving = !commands.is_empty();
                return commands;
            }
            StressAction::OpenScenarios => self.open_scenarios(),
            StressAction::LoadScenario(i) => return self.load_scenario(i),
            StressAction::ScenarioStep => {
                if let Some(run) = &mut self.scenario {
                    run.running = false;
                }
                return self.scenario_step();
            }
            StressAction::ScenarioRun => {
                let Some(run) = &mut self.scenario else {
                    self.say_no_scenario();
                    return Vec::new();
                };
                if run.running {
                    run.running = false;
                    self.say("scenario paused");
                    return Vec::new();
                }
                run.running = true;
                return self.scenario_step();
            }
            StressAction::ScenarioRewind => return self.rewind_scenario(),
            StressAction::UnloadScenario => {
                if self.scenario.is_none() && self.device == PanelDevice::Gpu {
                    self.say_no_scenario();
                    return Vec::new();
                }
                let commands = self.send(StressCommand::UseGpu);
                if !commands.is_empty() {
                    self.scenario = None;
                }
                return commands;
            }
            StressAction::ScenarioNextVariant => {
                if let Some(run) = &mut self.scenario {
                    run.variant = (run.variant + 1) % run.scenario.variants.len();
                }
                return self.rewind_scenario();
            }
            StressAction::ToggleHistogram => {
                self.show_histogram = !self.show_histogram;
                self.say(if self.show_histogram {
                    "compare lists the free-block histogram (A | B | Δ per size bucket)"
                } else {
                    "free-block histogram hidden"
                });
            }
        }
        Vec::new()
    }

    /// Whether the tensor keys (`j`/`k` select, `d` frees the selected
    /// tensor) act now: there are tensors and no field or list takes the
    /// keys. While they do, the panel keeps the selection on screen.
    pub fn selection_acts(&self) -> bool {
        self.modal == PanelModal::Keys && !self.tensors.is_empty()
    }

    /// The OOM advice for the current figures (empty without an OOM).
    pub fn oom_advice(&self) -> Vec<OomAdvice> {
        let advice = match (&self.oom, &self.view) {
            (Some(oom), Some(view)) => oom_advice(
                &view.layout,
                &self.settings,
                &oom.room,
                self.figures.reserved,
            ),
            _ => Vec::new(),
        };
        match &self.scenario {
            Some(run) => advice.into_iter().map(|a| run.advice_here(a)).collect(),
            None => advice,
        }
    }

    /// Counts a transformer step that completed and says which it was; a
    /// refused one is said as refused, with how far it got, and not
    /// counted (the next Allocate tries the same step again).
    ///
    /// `asked` tensors were sent, `first_id` is the id the first of the
    /// ones obtained now got; the tensors an earlier refusal of the same
    /// step obtained count towards it.
    fn say_step(&mut self, asked: usize, completed: bool, partial: Option<usize>, first_id: u64) {
        let number = self.transformer_steps.saturating_add(1);
        let said = self.message.take().unwrap_or_default();
        let before = self.transformer_step_obtained.len();
        let whole = before.saturating_add(asked);
        let text = if completed {
            self.transformer_steps = number;
            self.transformer_step_obtained.clear();
            if before > 0 {
                format!("transformer step #{number} done (the {asked} tensors it lacked): {said}")
            } else {
                format!("transformer step #{number} done: {said}")
            }
        } else if let Some(got) = partial {
            self.transformer_step_obtained
                .extend((0..got as u64).map(|i| first_id.saturating_add(i)));
            let have = self.transformer_step_obtained.len();
            format!(
                "transformer step #{number} refused, not counted ({have} of {whole} tensors \
                 allocated; the next Allocate asks for the other {}): {said}",
                whole.saturating_sub(have)
            )
        } else {
            said
        };
        self.message = Some(text);
    }

    fn add(&mut self, new: &[NewTensor]) {
        for t in new {
            self.tensors.push(Tensor {
                id: self.next_id,
                address: t.address,
                size: t.size,
                requested: t.requested,
            });
            self.next_id += 1;
        }
    }

    /// Takes the worker's answer, then applies queued actions up to the
    /// next one that needs the worker: its commands are returned.
    /// A running scenario then sends its next step.
    pub fn on_result(&mut self, result: StressResult) -> Vec<StressCommand> {
        let first_id = self.next_id;
        let stop = match &result.outcome {
            StressOutcome::OutOfMemory { room, .. } => {
                Some(ScenarioStop::OutOfMemory { tried: room.tried })
            }
            StressOutcome::Failed { .. } | StressOutcome::CapRefused { .. } => {
                Some(ScenarioStop::Failed)
            }
            _ => None,
        };
        let reconfigured = matches!(
            result.outcome,
            StressOutcome::Reconfigured { .. } | StressOutcome::DeviceChanged { .. }
        );
        self.take_result(result);
        self.scenario_answer(first_id, stop, reconfigured);
        while !self.queued.is_empty() {
            let next = self.queued.remove(0);
            self.queued_ran = true;
            let commands = self.apply_now(next);
            if !commands.is_empty() {
                self.say_skipped_keys(false);
                return commands;
            }
        }
        if self.scenario.as_ref().is_some_and(|r| r.running) && !self.busy {
            let commands = self.scenario_step();
            if !commands.is_empty() {
                return commands;
            }
        }
        self.say_skipped_keys(true);
        Vec::new()
    }

    fn take_result(&mut self, result: StressResult) {
        self.saving = false;
        self.answers = self.answers.saturating_add(1);
        let before = self.figures;
        // The id the tensors this answer brings start from.
        let first_id = self.next_id;
        // Tensors a transformer step obtained before a refusal: `None` for
        // a step that completed (or no step).
        let step_partial = match &result.outcome {
            StressOutcome::OutOfMemory { allocated, .. }
            | StressOutcome::CapRefused { allocated, .. }
            | StressOutcome::Failed { allocated, .. } => Some(allocated.len()),
            _ => None,
        };
        let step_completed = matches!(result.outcome, StressOutcome::Allocated(_));
        let step = self.transformer_step_sent.take();
        self.figures = Figures::of(&result.stats, &result.layout, result.driver_used);
        let fmt = crate::alloc::sizing::display_bytes;
        match result.outcome {
            StressOutcome::Started {
                gpu,
                free_at_start,
                total: _,
                real_gpu,
            } => {
                self.gpu = Some(gpu);
                self.real_gpu = real_gpu;
                self.cap = self
                    .cap_setting
                    .or_else(|| default_cap(free_at_start, real_gpu));
                let cap = match (self.cap, self.cap_setting) {
                    (None, _) => "no cap (simulated GPU)".to_string(),
                    (Some(c), Some(_)) => format!("cap {} (--stress-cap)", fmt(c)),
                    (Some(c), None) => format!("cap {}", fmt(c)),
                };
                self.say(format!("stress allocator ready on GPU {gpu}; {cap}"));
            }
            StressOutcome::Allocated(new) => {
                self.oom = None;
                self.add(&new);
                let (now, then) = (self.figures.reserved, before.reserved);
                // A fall says its own cause (the retry path released
                // cached segments), where "no new segment" may be false.
                let why = if now < then {
                    None
                } else {
                    self.allocation_why(&new, now - then)
                };
                let on_gpu = self.device == PanelDevice::Gpu;
                let context = (!self.allocated_once && on_gpu && !self.real_gpu)
                    .then(|| {
                        // The driver's growth past reserved's: on the
                        // simulated GPU exactly the context; on a real
                        // one other processes may move it too.
                        let driver = self.figures.driver_used.saturating_sub(before.driver_used);
                        driver.saturating_sub(now.saturating_sub(then))
                    })
                    .filter(|&bytes| bytes > 0);
                self.allocated_once |= on_gpu;
                self.say(if now < then {
                    // The retry path released cached segments to make room.
                    format!(
                        "allocated {}; reserved fell by {} (cached segments released to make room)",
                        tensors(new.len() as u64),
                        fmt(then - now)
                    )
                } else if now == then {
                    format!(
                        "allocated {}; reserved stays {}",
                        tensors(new.len() as u64),
                        fmt(now)
                    )
                } else {
                    format!(
                        "allocated {}; reserved grew by {}",
                        tensors(new.len() as u64),
                        fmt(now - then)
                    )
                });
                self.why.extend(why);
                self.why
                    .extend(context.map(|bytes| Why::ContextCreated { bytes }));
                if let Some(bytes) = context {
                    self.context_created = Some((self.answers, bytes));
                }
            }
            StressOutcome::OutOfMemory {
                allocated,
                message,
                reserved_but_unallocated,
                room,
            } => {
                self.add(&allocated);
                self.say(if allocated.is_empty() {
                    format!("out of memory: {} could not be obtained", fmt(room.tried))
                } else {
                    format!(
                        "out of memory after {}: {} more could not be obtained",
                        tensors(allocated.len() as u64),
                        fmt(room.tried)
                    )
                });
                self.oom = Some(OomState {
                    message,
                    reserved_but_unallocated,
                    room,
                });
            }
            StressOutcome::Freed(addresses) => {
                // A set: freeing every other of 100,000 tensors must not
                // scan the freed list once per tensor.
                let gone: rustc_hash::FxHashSet<u64> = addresses.iter().copied().collect();
                // One tensor (d) is named, as the selected line named it:
                // "freed 1 tensor" did not say which one went.
                let which = match addresses.as_slice() {
                    [one] => self
                        .tensors
                        .iter()
                        .find(|t| t.address == *one)
                        .map(|t| format!("#{} ({} at {:#x})", t.id, fmt(t.size), t.address)),
                    _ => None,
                }
                .unwrap_or_else(|| tensors(addresses.len() as u64));
                self.tensors.retain(|t| !gone.contains(&t.address));
                let past = self.oom_past();
                self.say(format!(
                    "freed {which}; reserved stays {} until empty_cache{past}",
                    fmt(self.figures.reserved)
                ));
            }
            StressOutcome::Reconfigured { settings, freed } => {
                self.tensors.clear();
                self.oom = None;
                let shown = if settings.is_empty() {
                    "PyTorch's defaults".to_string()
                } else {
                    settings.clone()
                };
                self.settings = settings;
                self.transformer_steps = 0;
                self.transformer_step_obtained.clear();
                let cleared = self.clear_marks();
                self.say(format!(
                    "freed {}, emptied the cache; fresh allocator with {shown}{cleared}",
                    tensors(freed.len() as u64)
                ));
                // The settings are one word with no space to wrap at: kept
                // whole, they take rows of their own (broken after a comma
                // where wider than a row), where cut at the panel's edge
                // they read "…garbage_collection_threshold:0.6…" at 80
                // columns.
                self.message_command = Some(shown);
            }
            StressOutcome::DeviceChanged {
                device,
                settings,
                freed,
            } => {
                self.tensors.clear();
                self.oom = None;
                self.settings = settings;
                self.transformer_steps = 0;
                self.transformer_step_obtained.clear();
                self.device = device;
                let cleared = self.clear_marks();
                match device {
                    PanelDevice::Scenario { capacity, context } => self.say_then(
                        format!(
                            "freed {}; the scenario runs on a simulated {} device ({} of it \
                             context & other), as vramtop scenario runs it{cleared}:",
                            tensors(freed.len() as u64),
                            fmt(capacity),
                            fmt(context)
                        ),
                        vec![KeyUse::act(
                            StressAction::UnloadScenario,
                            "goes back to the GPU",
                        )],
                    ),
                    PanelDevice::Gpu => self.say(format!(
                        "freed {} of the scenario device; back on the GPU{cleared}",
                        tensors(freed.len() as u64)
                    )),
                }
            }
            StressOutcome::Verified { checked, bad: None } => {
                self.say(format!(
                    "verified {}: every byte holds its pattern",
                    tensors(checked)
                ));
            }
            StressOutcome::Verified {
                checked,
                bad: Some(bad),
            } => {
                let id = self
                    .tensors
                    .iter()
                    .find(|t| t.address == bad.address)
                    .map_or_else(|| "?".to_string(), |t| t.id.to_string());
                self.say(format!(
                    "verify: tensor #{id} at {:#x} is corrupt: first bad byte at offset {} \
                     ({} checked before it: intact)",
                    bad.address,
                    bad.offset,
                    tensors(checked)
                ));
            }
            StressOutcome::SnapshotSaved {
                path,
                bytes,
                trace_entries,
            } => {
                // Pasted into a shell as it is shown: a folder with a space
                // or a quote in its name would split the word otherwise.
                let command = format!("vramtop replay {}", crate::quote::shell_path(&path));
                self.say(format!(
                    "wrote {path} ({trace_entries} trace entries, {}): {command}",
                    fmt(bytes)
                ));
                self.message_command = Some(command);
            }
            StressOutcome::CacheEmptied => {
                let released = before.reserved.saturating_sub(self.figures.reserved);
                // Nothing released, nothing the OOM described changed.
                let past = if released > 0 { self.oom_past() } else { "" };
                self.say(format!("empty_cache released {}{past}", fmt(released)));
                self.why.push(Why::empty_cache(&result.layout, released));
            }
            StressOutcome::CapRefused { allocated, message } => {
                self.refused_keys += 1;
                self.add(&allocated);
                self.say(message);
            }
            StressOutcome::Failed { allocated, message } => {
                self.add(&allocated);
                self.say(message);
            }
        }
        if let Some(asked) = step {
            self.say_step(asked, step_completed, step_partial, first_id);
        }
        self.selected = self.selected.min(self.tensors.len().saturating_sub(1));
        self.busy = false;
        self.starting = false;
        if !self.ready() && !self.queued.is_empty() {
            // The worker could not start (its one answer says why): the
            // keys that waited for it have nothing to run on.
            let waited = self.queued.len() as u64;
            self.queued.clear();
            let message = self.message.take().unwrap_or_default();
            self.message = Some(format!(
                "{message}; {} typed while it started dropped",
                keys(waited)
            ));
        }
        let source = match self.device {
            PanelDevice::Gpu => "vramtop stress panel".to_string(),
            PanelDevice::Scenario { capacity, .. } => {
                format!(
                    "stress panel · scenario device {} (simulated)",
                    fmt(capacity)
                )
            }
        };
        // A scenario's device is no process on the GPU.
        let pid = match self.device {
            PanelDevice::Gpu => self.pid,
            PanelDevice::Scenario { .. } => None,
        };
        let view = AllocatorView::new(source, pid, result.stats, result.layout);
        self.view = Some(match self.device {
            PanelDevice::Gpu => view,
            // The scenario's own device: its size and use, not the GPU's.
            PanelDevice::Scenario { capacity, .. } => view.on_device(capacity, result.driver_used),
        });
    }
}

/// "1 key", "5 keys".
fn keys(n: u64) -> String {
    if n == 1 {
        "1 key".to_string()
    } else {
        format!("{n} keys")
    }
}

/// What the panel says of keys dropped behind a full queue.
fn dropped_note(n: u64) -> String {
    format!("{} dropped: the panel is busy", keys(n))
}

/// What the panel says of allocations the cap refused in a burst.
fn refused_note(n: u64) -> String {
    if n == 1 {
        "1 allocation refused by the stress cap".to_string()
    } else {
        format!("{n} allocations refused by the stress cap")
    }
}

/// "1 tensor", "5 tensors": the panel's messages count in words a person
/// reads, not "1 tensor(s)".
pub fn tensors(n: u64) -> String {
    if n == 1 {
        "1 tensor".to_string()
    } else {
        format!("{n} tensors")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_gpus_get_half_the_free_memory_as_cap_and_the_simulation_none() {
        assert_eq!(default_cap(80 * GIB, true), Some(40 * GIB));
        assert_eq!(default_cap(80 * GIB, false), None);
    }

    /// A panel waiting for an answer to its first allocation.
    fn busy_panel() -> StressPanel {
        let mut p = StressPanel {
            gpu: Some(0),
            ..StressPanel::default()
        };
        assert_eq!(p.apply(StressAction::Allocate).len(), 1);
        assert!(p.busy);
        p
    }

    #[test]
    fn free_all_typed_while_busy_cancels_the_allocations_and_frees_waiting_before_it() {
        let mut p = busy_panel();
        p.apply(StressAction::Allocate);
        p.apply(StressAction::MarkCompare);
        p.apply(StressAction::FreeOldest);
        p.apply(StressAction::EmptyCache);
        p.apply(StressAction::FreeAll);
        assert_eq!(
            p.queued,
            vec![
                StressAction::MarkCompare,
                StressAction::EmptyCache,
                StressAction::FreeAll
            ]
        );
        assert_eq!(p.cancelled_keys, 2);
    }

    #[test]
    fn empty_cache_and_free_all_are_never_dropped_and_the_queue_stays_bounded() {
        let mut p = busy_panel();
        for _ in 0..MAX_QUEUED + 10 {
            p.apply(StressAction::CountUp);
        }
        assert_eq!(p.queued.len(), MAX_QUEUED);
        assert_eq!(p.dropped_keys, 10);
        for _ in 0..100 {
            p.apply(StressAction::EmptyCache);
            p.apply(StressAction::FreeAll);
        }
        assert_eq!(p.queued.len(), MAX_QUEUED + 2, "{:?}", p.queued);
        assert_eq!(
            p.queued[MAX_QUEUED..],
            [StressAction::EmptyCache, StressAction::FreeAll]
        );
    }

    #[test]
    fn keys_typed_while_the_worker_starts_wait_and_run_once_it_is_ready() {
        let mut p = StressPanel::default();
        p.worker_spawned();
        assert!(p.apply(StressAction::Allocate).is_empty(), "queued");
        assert!(p.apply(StressAction::MarkCompare).is_empty(), "queued");
        assert_eq!(
            p.queued,
            vec![StressAction::Allocate, StressAction::MarkCompare]
        );
        let started = StressResult {
            outcome: StressOutcome::Started {
                gpu: 0,
                free_at_start: 80 * GIB,
                total: 80 * GIB,
                real_gpu: false,
            },
            stats: Default::default(),
            layout: Vec::new(),
            driver_used: 0,
        };
        let sent = p.on_result(started);
        assert!(
            matches!(&sent[..], [StressCommand::Malloc { sizes, .. }]
                if sizes.len() == p.count() as usize),
            "{sent:?}"
        );
        assert_eq!(p.queued, vec![StressAction::MarkCompare], "after it");
    }

    #[test]
    fn keys_that_waited_for_a_worker_that_failed_to_start_are_dropped_aloud() {
        let mut p = StressPanel::default();
        p.worker_spawned();
        p.apply(StressAction::Allocate);
        let failed = StressResult {
            outcome: StressOutcome::Failed {
                allocated: Vec::new(),
                message: "cannot open CUDA GPU 0: no device".to_string(),
            },
            stats: Default::default(),
            layout: Vec::new(),
            driver_used: 0,
        };
        assert!(p.on_result(failed).is_empty());
        assert!(p.queued.is_empty());
        assert_eq!(
            p.message.as_deref(),
            Some("cannot open CUDA GPU 0: no device; 1 key typed while it started dropped")
        );
    }

    #[test]
    fn one_field_or_list_at_a_time_takes_the_keys() {
        let mut p = StressPanel::default();
        p.apply(StressAction::TypeSize);
        p.type_char('5');
        assert_eq!(p.size_text(), Some("5"));
        p.apply(StressAction::OpenScenarios);
        assert!(p.picking() && !p.editing(), "the list closed the field");
        p.type_char('9');
        assert_eq!(p.size_text(), None, "no field to type into");
        p.pick_cancel();
        assert_eq!(p.modal, PanelModal::Keys);
        p.apply(StressAction::TypeSettings);
        p.cancel_input();
        assert_eq!(p.modal, PanelModal::Keys);
        assert_eq!(p.message.as_deref(), Some("allocator settings unchanged"));
    }
}
