//! The allocator state at the first event of a trace that begins mid-run
//! (PyTorch's ring buffer kept only the last `max_entries` events).
//!
//! The final layout with the trace undone gives the start's segments and
//! live blocks (segments allocated during the trace removed, freed ones
//! restored, blocks allocated during it freed, blocks freed during it made
//! live). Two things the file does not write down are inferred, each within
//! the bounds PyTorch's rules leave, and checked by replaying the whole
//! trace (`docs/allocator.md`, "Mid-run starts"):
//!
//! - the size of a block live before the trace and freed in it (only its
//!   request is recorded): the rounded request, or up to the slack PyTorch
//!   leaves unsplit (1 MiB in the large pool; `max_non_split_rounding_size`
//!   for oversize blocks; none in the small pool and expandable segments).
//!   The size fixes the free block after it, so the trace's placements
//!   decide it: a search replays the trace with the candidates a divergence
//!   points at and keeps the start state that explains the most events;
//! - the address reservation of an expandable segment mapped before the
//!   trace: one per (stream, pool kind) and page grid, its pages 2 MiB
//!   (small pool) or 20 MiB (large), based at the lowest page the file shows
//!   mapped and sized by PyTorch's rule (1⅛ × the device's memory), or just
//!   as far as the trace ever maps when a replay shows the segment ended
//!   there.

use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::rc::Rc;

use super::replay::{DeviceReplay, Event, ReplayStart, SearchReplay, next_call, replay_for_search};
use super::types::Snapshot;
use crate::alloc::{
    AdoptedRange, AdoptedReservation, AllocatorConfig, BlockState, CachingAllocator, DeviceMemory,
    PoolKind, TraceAction,
    analysis::expandable_page_size,
    round_size,
    sizing::{LARGE_BUFFER, MIN_BLOCK_SIZE, SMALL_BUFFER, SMALL_SIZE},
};

/// How many replays the search for a start state may run per device (the
/// shared traces need at most 9; a damaged trace must not cost minutes).
const MAX_REPLAYS: usize = 48;

/// The device memory a start reservation is sized for when the file does
/// not record it: the scripted device's (1 TiB), more than any GPU has, so
/// the reservation holds every page the trace maps.
pub(crate) const ASSUMED_DEVICE_MEMORY: u64 = 1 << 40;

#[derive(Debug, Clone, Copy)]
struct LiveAtStart {
    size: Option<u64>,
    requested: u64,
    state: BlockState,
}

#[derive(Debug, Clone, Copy)]
struct SegmentAtStart {
    size: u64,
    stream: u64,
    kind: PoolKind,
}

/// A contiguous mapped range of an expandable segment at the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MappedAtStart {
    end: u64,
    stream: u64,
    kind: PoolKind,
}

/// The start of a trace as far as the file writes it down.
pub(crate) struct StartState {
    segments: BTreeMap<u64, SegmentAtStart>,
    live: BTreeMap<u64, LiveAtStart>,
    /// Mapped ranges of expandable segments, by address.
    mapped: BTreeMap<u64, MappedAtStart>,
    /// Every `segment_map` of the trace: (address, end, stream).
    trace_maps: Vec<(u64, u64, u64)>,
}

/// Removes `[addr, end)` from the mapped ranges.
fn unmap_range(mapped: &mut BTreeMap<u64, MappedAtStart>, addr: u64, end: u64) {
    let touching: Vec<(u64, MappedAtStart)> = mapped
        .range(..end)
        .rev()
        .take_while(|(_, m)| m.end > addr)
        .map(|(&a, &m)| (a, m))
        .collect();
    for (a, m) in touching {
        mapped.remove(&a);
        if a < addr {
            mapped.insert(a, MappedAtStart { end: addr, ..m });
        }
        if m.end > end {
            mapped.insert(end, m);
        }
    }
}

/// The pool kind of a range the trace unmapped: its neighbours' when one of
/// the same stream touches it, else from the page size it must be whole
/// pages of (large pages are 20 MiB).
fn unmapped_kind(
    mapped: &BTreeMap<u64, MappedAtStart>,
    addr: u64,
    end: u64,
    stream: u64,
) -> PoolKind {
    let before = mapped
        .range(..addr)
        .next_back()
        .filter(|(_, m)| m.end == addr && m.stream == stream)
        .map(|(_, m)| m.kind);
    let after = mapped
        .get(&end)
        .filter(|m| m.stream == stream)
        .map(|m| m.kind);
    before
        .or(after)
        .unwrap_or(if (end - addr).is_multiple_of(LARGE_BUFFER) {
            PoolKind::Large
        } else {
            PoolKind::Small
        })
}

pub(crate) fn undo_trace(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
) -> Result<StartState, String> {
    let mut segments: BTreeMap<u64, SegmentAtStart> = BTreeMap::new();
    // Point lookups only while the trace is undone (one or two per event):
    // a hash map, ordered once at the end.
    let mut live: FxHashMap<u64, LiveAtStart> = FxHashMap::default();
    let mut mapped: BTreeMap<u64, MappedAtStart> = BTreeMap::new();
    let mut trace_maps = Vec::new();
    let end_of = |addr: u64, size: u64| {
        addr.checked_add(size)
            .ok_or_else(|| format!("range at {addr:#x} of {size} bytes overflows"))
    };
    for s in snapshot.segments.iter().filter(|s| s.device == device) {
        // Blocks tile their segment in every layout PyTorch writes; a start
        // built from one that does not would be invented.
        let tiled = s
            .blocks
            .iter()
            .try_fold(0u64, |acc, b| acc.checked_add(b.size));
        if tiled != Some(s.total_size) {
            return Err(format!(
                "the final layout is inconsistent: the blocks of the segment at {:#x} do not \
                 add up to its {} bytes, so no start state can be rebuilt from it",
                s.address, s.total_size
            ));
        }
        if s.is_expandable {
            if s.total_size > 0 {
                let end = end_of(s.address, s.total_size)?;
                mapped.insert(
                    s.address,
                    MappedAtStart {
                        end,
                        stream: s.stream,
                        kind: s.segment_type,
                    },
                );
            }
        } else {
            segments.insert(
                s.address,
                SegmentAtStart {
                    size: s.total_size,
                    stream: s.stream,
                    kind: s.segment_type,
                },
            );
        }
        for b in s.blocks.iter().filter(|b| b.state.is_active()) {
            live.insert(
                b.address,
                LiveAtStart {
                    size: Some(b.size),
                    requested: b.requested_size,
                    state: b.state,
                },
            );
        }
    }
    for e in events.iter().rev() {
        match e.action {
            TraceAction::Alloc => {
                live.remove(&e.addr);
            }
            TraceAction::FreeRequested => {
                live.entry(e.addr)
                    .or_insert(LiveAtStart {
                        size: None,
                        requested: e.size,
                        state: BlockState::ActiveAllocated,
                    })
                    .state = BlockState::ActiveAllocated;
            }
            TraceAction::FreeCompleted => {
                // Completed in the trace: pending (or allocated, if its
                // free_requested is earlier in the trace) at the start.
                live.entry(e.addr).or_insert(LiveAtStart {
                    size: None,
                    requested: e.size,
                    state: BlockState::ActivePendingFree,
                });
            }
            TraceAction::SegmentAlloc => {
                segments.remove(&e.addr);
            }
            TraceAction::SegmentMap => {
                let end = end_of(e.addr, e.size)?;
                trace_maps.push((e.addr, end, e.stream));
                unmap_range(&mut mapped, e.addr, end);
            }
            TraceAction::SegmentUnmap => {
                let end = end_of(e.addr, e.size)?;
                let kind = unmapped_kind(&mapped, e.addr, end, e.stream);
                unmap_range(&mut mapped, e.addr, end);
                mapped.insert(
                    e.addr,
                    MappedAtStart {
                        end,
                        stream: e.stream,
                        kind,
                    },
                );
            }
            TraceAction::SegmentFree => {
                segments.insert(
                    e.addr,
                    SegmentAtStart {
                        size: e.size,
                        stream: e.stream,
                        kind: if e.size == SMALL_BUFFER {
                            PoolKind::Small
                        } else {
                            PoolKind::Large
                        },
                    },
                );
            }
            _ => {}
        }
    }
    // Adjacent ranges of one stream and pool are one mapped range.
    let mut merged: BTreeMap<u64, MappedAtStart> = BTreeMap::new();
    for (a, m) in mapped {
        match merged.iter_mut().next_back() {
            Some((_, last)) if last.end == a && last.stream == m.stream && last.kind == m.kind => {
                last.end = m.end;
            }
            _ => {
                merged.insert(a, m);
            }
        }
    }
    Ok(StartState {
        segments,
        live: live.into_iter().collect(),
        mapped: merged,
        trace_maps,
    })
}

fn starts_empty(start: &StartState) -> bool {
    start.segments.is_empty() && start.live.is_empty() && start.mapped.is_empty()
}

type AdoptedBlocks = Vec<(u64, u64, BlockState)>;

/// One segment (or mapped range) of a rebuilt start state, ready for
/// [`CachingAllocator::adopt_segment`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartSegment {
    pub address: u64,
    pub stream: u64,
    pub kind: PoolKind,
    /// `(size, requested_size, state)` in address order.
    pub blocks: AdoptedBlocks,
}

impl StartSegment {
    /// Bytes the segment (or range) spans.
    pub fn size(&self) -> u64 {
        self.blocks.iter().map(|b| b.0).sum()
    }
}

/// An expandable segment mapped before the trace: its address reservation
/// and its mapped ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartReservation {
    pub base: u64,
    /// Bytes of address space reserved.
    pub size: u64,
    /// Bytes per page (2 MiB small pool, 20 MiB large).
    pub page_size: u64,
    pub stream: u64,
    pub kind: PoolKind,
    /// Mapped ranges in address order.
    pub ranges: Vec<StartSegment>,
}

impl StartReservation {
    /// Bytes mapped at the start.
    pub fn mapped(&self) -> u64 {
        self.ranges.iter().map(StartSegment::size).sum()
    }
}

/// A block whose size had to be inferred, with the sizes PyTorch's rules
/// allow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GuessedBlock {
    address: u64,
    size: u64,
    smallest: u64,
    largest: u64,
    /// Bytes to the next block or the segment's end.
    room: u64,
}

/// The allocator state at the first event of a device's trace: empty for a
/// full history, else rebuilt from the final layout with the trace undone.
/// Shared by `verify`, the what-if replay (`super::whatif`) and the viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartLayout {
    pub start: ReplayStart,
    pub segments: Vec<StartSegment>,
    /// Expandable segments mapped before the trace.
    pub reservations: Vec<StartReservation>,
    /// The first replayed event: events before it belong to a call the
    /// ring buffer cut, and the start is the state right after them.
    pub first_event: usize,
    guessed: Vec<GuessedBlock>,
}

impl StartLayout {
    /// Adopts the start segments into a fresh `model` and checks the result.
    pub fn adopt_into<D: DeviceMemory>(
        &self,
        model: &mut CachingAllocator<D>,
    ) -> Result<(), String> {
        if self.segments.is_empty() && self.reservations.is_empty() {
            return Ok(());
        }
        for s in &self.segments {
            model.adopt_segment(s.address, s.stream, s.kind, &s.blocks);
        }
        for r in &self.reservations {
            let ranges: Vec<AdoptedRange<'_>> = r
                .ranges
                .iter()
                .map(|s| (s.address, s.blocks.as_slice()))
                .collect();
            model
                .adopt_expandable_segment(
                    AdoptedReservation {
                        base: r.base,
                        va_size: r.size,
                        page_size: r.page_size,
                        stream: r.stream,
                        kind: r.kind,
                    },
                    &ranges,
                )
                .map_err(|e| format!("reconstructed start state is inconsistent: {e}"))?;
        }
        model
            .check_invariants()
            .map_err(|e| format!("reconstructed start state is inconsistent: {e}"))
    }

    /// Number of blocks of the start, mapped ranges' included.
    pub fn block_count(&self) -> usize {
        self.segments
            .iter()
            .chain(self.reservations.iter().flat_map(|r| &r.ranges))
            .map(|s| s.blocks.len())
            .sum()
    }

    /// Every block size of the start, by address (for the viewer).
    pub fn block_sizes(&self) -> BTreeMap<u64, u64> {
        let mut out = BTreeMap::new();
        let all = self
            .segments
            .iter()
            .chain(self.reservations.iter().flat_map(|r| &r.ranges));
        for s in all {
            let mut addr = s.address;
            for &(size, _, _) in &s.blocks {
                out.insert(addr, size);
                addr += size;
            }
        }
        out
    }
}

/// What the trace taught about the start beyond what the file writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StartChoices {
    /// Block sizes learnt: address → (bytes, the event that showed it).
    sizes: BTreeMap<u64, (u64, usize)>,
    /// Reservations (by the address of their lowest start range) that end
    /// at `end`: PyTorch could not map further in them.
    ends: BTreeMap<u64, (u64, usize)>,
    /// Reservations whose base lies below their lowest start range.
    bases: BTreeMap<u64, (u64, usize)>,
    /// Reservations with unmapped pages below their lowest start range that
    /// PyTorch never mapped in the trace: it tried to at the event, and
    /// could not (see `candidates`). Based a page lower.
    unmapped_below: BTreeMap<u64, usize>,
}

/// PyTorch's reservation for an expandable segment: enough pages for 1⅛ of
/// the device's memory (`ExpandableSegment`'s `max_handles`).
fn pytorch_reservation(device_memory: u64, page: u64) -> u64 {
    let want = device_memory.saturating_add(device_memory / 8);
    want.div_ceil(page).saturating_mul(page)
}

/// The start's expandable ranges grouped into reservations: one per
/// (stream, pool kind, page grid).
fn reservation_groups(start: &StartState) -> BTreeMap<(u64, u8, u64), Vec<(u64, MappedAtStart)>> {
    let mut groups: BTreeMap<(u64, u8, u64), Vec<(u64, MappedAtStart)>> = BTreeMap::new();
    for (&a, &m) in &start.mapped {
        let page = expandable_page_size(m.kind);
        let kind_key = u8::from(m.kind == PoolKind::Large);
        groups
            .entry((m.stream, kind_key, a % page))
            .or_default()
            .push((a, m));
    }
    groups
}

fn build_reservations(
    start: &StartState,
    config: &AllocatorConfig,
    choices: &StartChoices,
    live: &[(u64, LiveAtStart)],
    guessed: &mut Vec<GuessedBlock>,
) -> Result<Vec<StartReservation>, String> {
    let mut out = Vec::new();
    for ((stream, _, residue), ranges) in reservation_groups(start) {
        let Some(&(lowest, first)) = ranges.first() else {
            continue;
        };
        let kind = first.kind;
        let page = expandable_page_size(kind);
        let base = match choices.bases.get(&lowest) {
            Some(&(base, _)) => base,
            None if choices.unmapped_below.contains_key(&lowest) => {
                lowest.checked_sub(page).unwrap_or(lowest)
            }
            None => lowest,
        };
        // Every page the file shows mapped in this reservation must fit.
        let last_start_end = ranges.iter().map(|(_, m)| m.end).max().unwrap_or(lowest);
        let last_mapped = start
            .trace_maps
            .iter()
            .filter(|&&(a, _, s)| s == stream && a >= base && a % page == residue)
            .map(|&(_, e, _)| e)
            .fold(last_start_end, u64::max);
        let end = match choices.ends.get(&lowest) {
            Some(&(e, _)) => e.max(last_start_end),
            None => base
                .checked_add(pytorch_reservation(ASSUMED_DEVICE_MEMORY, page))
                .unwrap_or(u64::MAX - (u64::MAX % page))
                .max(last_mapped),
        };
        let size = (end - base).div_ceil(page).saturating_mul(page);
        let mut segs = Vec::new();
        for &(address, m) in &ranges {
            let seg = SegmentAtStart {
                size: m.end - address,
                stream,
                kind,
            };
            let (blocks, g) = start_blocks(address, &seg, live, config, choices, true)?;
            guessed.extend(g);
            segs.push(StartSegment {
                address,
                stream,
                kind,
                blocks,
            });
        }
        out.push(StartReservation {
            base,
            size,
            page_size: page,
            stream,
            kind,
            ranges: segs,
        });
    }
    Ok(out)
}

pub(crate) fn start_layout_from(
    start: &StartState,
    config: &AllocatorConfig,
    choices: &StartChoices,
) -> Result<StartLayout, String> {
    LayoutBuilder::new(start, config).layout(choices)
}

/// One start segment laid out without any inference from the trace, and
/// the blocks whose size it guessed.
type LaidOut = Result<(StartSegment, Vec<GuessedBlock>), String>;

/// Builds the start layouts of one start state under different choices.
/// A search builds one per candidate, and a candidate changes the sizes
/// of a block or two: everything that does not depend on the choices (the
/// live blocks in one array, the check that each lies in a segment, every
/// segment without a chosen size) is worked out once.
struct LayoutBuilder<'a> {
    start: &'a StartState,
    config: &'a AllocatorConfig,
    /// The live blocks in address order, in one array: each segment's are
    /// a slice of it, found by binary search.
    live: Vec<(u64, LiveAtStart)>,
    /// Every segment laid out with no choices, in address order.
    plain: Vec<LaidOut>,
    /// Live blocks outside every segment and mapped range.
    outside: usize,
}

impl<'a> LayoutBuilder<'a> {
    fn new(start: &'a StartState, config: &'a AllocatorConfig) -> Self {
        let live: Vec<(u64, LiveAtStart)> = start.live.iter().map(|(&a, &l)| (a, l)).collect();
        let no_choices = StartChoices::default();
        let plain = start
            .segments
            .iter()
            .map(|(&address, seg)| laid_out(address, seg, &live, config, &no_choices))
            .collect();
        let segment_ends: Vec<(u64, u64)> = start
            .segments
            .iter()
            .map(|(&a, seg)| (a, seg.size))
            .collect();
        let mapped_ends: Vec<(u64, u64)> = start.mapped.iter().map(|(&a, m)| (a, m.end)).collect();
        // The range starting last at or below `a`, as `(start, value)`.
        fn last_at_or_below(ranges: &[(u64, u64)], a: u64) -> Option<(u64, u64)> {
            let i = ranges.partition_point(|&(s, _)| s <= a);
            i.checked_sub(1).and_then(|i| ranges.get(i)).copied()
        }
        let inside = |a: u64| {
            last_at_or_below(&segment_ends, a).is_some_and(|(s, size)| a - s < size)
                || last_at_or_below(&mapped_ends, a).is_some_and(|(_, end)| a < end)
        };
        let outside = live.iter().filter(|&&(a, _)| !inside(a)).count();
        LayoutBuilder {
            start,
            config,
            live,
            plain,
            outside,
        }
    }

    /// The start layout under `choices`.
    fn layout(&self, choices: &StartChoices) -> Result<StartLayout, String> {
        let start = self.start;
        if starts_empty(start) {
            return Ok(StartLayout {
                start: ReplayStart::Empty,
                segments: Vec::new(),
                reservations: Vec::new(),
                first_event: 0,
                guessed: Vec::new(),
            });
        }
        let mut guessed = Vec::new();
        let mut segments = Vec::with_capacity(self.plain.len());
        for ((&address, seg), plain) in start.segments.iter().zip(&self.plain) {
            // Only a size chosen inside the segment changes its layout.
            let chosen_inside = address
                .checked_add(seg.size)
                .is_some_and(|end| choices.sizes.range(address..end).next().is_some());
            let (segment, g) = if chosen_inside {
                laid_out(address, seg, &self.live, self.config, choices)?
            } else {
                plain.clone()?
            };
            guessed.extend(g);
            segments.push(segment);
        }
        let reservations =
            build_reservations(start, self.config, choices, &self.live, &mut guessed)?;
        let outside = self.outside;
        if outside > 0 {
            return Err(if outside == 1 {
                "1 block live at the start of the trace lies outside every segment".to_string()
            } else {
                format!("{outside} blocks live at the start of the trace lie outside every segment")
            });
        }
        let inferences = describe_choices(start, choices, &reservations);
        Ok(StartLayout {
            start: ReplayStart::Reconstructed {
                segments: start.segments.len(),
                live_blocks: start.live.len(),
                guessed_block_sizes: guessed.len(),
                corrected_block_sizes: choices.sizes.len(),
                expandable_reservations: reservations.len(),
                inferences,
            },
            segments,
            reservations,
            first_event: 0,
            guessed,
        })
    }
}

/// The start segment at `address` laid out under `choices`.
fn laid_out(
    address: u64,
    seg: &SegmentAtStart,
    live: &[(u64, LiveAtStart)],
    config: &AllocatorConfig,
    choices: &StartChoices,
) -> LaidOut {
    let (blocks, guessed) = start_blocks(address, seg, live, config, choices, false)?;
    Ok((
        StartSegment {
            address,
            stream: seg.stream,
            kind: seg.kind,
            blocks,
        },
        guessed,
    ))
}

fn describe_choices(
    start: &StartState,
    choices: &StartChoices,
    reservations: &[StartReservation],
) -> Vec<String> {
    let mut out = Vec::new();
    for r in reservations {
        let lowest = r.ranges.first().map_or(r.base, |s| s.address);
        let base = match (
            choices.bases.get(&lowest),
            choices.unmapped_below.get(&lowest),
        ) {
            (Some(&(_, event)), _) => {
                format!("below the start's lowest mapped page (event #{event} maps there)")
            }
            (None, Some(&event)) => format!(
                "a page below the start's lowest mapped page (only a failed map below it \
                 explains event #{event})"
            ),
            (None, None) => "at its lowest mapped page".to_string(),
        };
        let size = match choices.ends.get(&lowest) {
            Some(&(_, event)) => {
                format!("ending where event #{event} shows PyTorch could map no further")
            }
            None => {
                "sized by PyTorch's rule (9/8 of the device's memory) assuming a 1 TiB device, as \
                 the file does not record the device's memory"
                    .to_string()
            }
        };
        out.push(format!(
            "expandable segment {:?} pool, stream {:#x}: reservation {:#x}+{} B ({} MiB pages), based {base}, {size}; {} B mapped in {} {}",
            r.kind,
            r.stream,
            r.base,
            r.size,
            r.page_size >> 20,
            r.mapped(),
            r.ranges.len(),
            if r.ranges.len() == 1 { "range" } else { "ranges" }
        ));
    }
    for (&addr, &(size, event)) in &choices.sizes {
        let requested = start.live.get(&addr).map_or(0, |l| l.requested);
        out.push(format!(
            "block at {addr:#x} (request {requested} B) was {size} B: event #{event} places an allocation that only this size explains"
        ));
    }
    out
}

/// Lays out one start segment's blocks; returns them and each block whose
/// size had to be inferred. In an expandable segment a block is always split
/// to its rounded size (PyTorch splits off any remainder of 512 bytes).
fn start_blocks(
    address: u64,
    seg: &SegmentAtStart,
    live: &[(u64, LiveAtStart)],
    config: &AllocatorConfig,
    choices: &StartChoices,
    expandable: bool,
) -> Result<(AdoptedBlocks, Vec<GuessedBlock>), String> {
    let end = address
        .checked_add(seg.size)
        .ok_or_else(|| format!("segment at {address:#x} overflows"))?;
    // `live` is in address order: the blocks in [address, end).
    let first = live.partition_point(|&(a, _)| a < address);
    let last = live.partition_point(|&(a, _)| a < end);
    let inside = live.get(first..last).unwrap_or_default();
    // At most a gap before each live block, the block, and a gap at the end.
    let mut blocks = Vec::with_capacity(2 * inside.len() + 1);
    let mut guessed = Vec::new();
    let mut cursor = address;
    for (i, &(addr, l)) in inside.iter().enumerate() {
        if addr < cursor {
            return Err(format!("live blocks overlap at {addr:#x}"));
        }
        if addr > cursor {
            blocks.push((addr - cursor, 0, BlockState::Inactive));
        }
        let next = inside.get(i + 1).map_or(end, |n| n.0);
        let room = next - addr;
        let size = match l.size {
            Some(s) => s,
            None => {
                let g = guess_block(addr, l.requested, room, seg.kind, expandable, config);
                let size = choices
                    .sizes
                    .get(&addr)
                    .map_or(g.size, |&(s, _)| s.clamp(g.smallest, g.largest));
                guessed.push(GuessedBlock { size, ..g });
                size
            }
        };
        if size > room {
            return Err(format!("block at {addr:#x} runs past its segment"));
        }
        blocks.push((size, l.requested, l.state));
        cursor = addr + size;
    }
    if cursor < end {
        blocks.push((end - cursor, 0, BlockState::Inactive));
    }
    Ok((blocks, guessed))
}

/// The sizes PyTorch's split rule allows a block serving `requested` with
/// `room` bytes before the next block, and the first guess: the rounded
/// request, or the whole room when the remainder could not have been split
/// off.
fn guess_block(
    address: u64,
    requested: u64,
    room: u64,
    kind: PoolKind,
    expandable: bool,
    config: &AllocatorConfig,
) -> GuessedBlock {
    let rounded = round_size(requested, config).min(room);
    let slack = if expandable || kind == PoolKind::Small {
        // Split iff the remainder is at least 512 bytes: none is left.
        0
    } else if rounded >= config.max_split_size_bytes() {
        config.max_non_split_rounding_size.saturating_sub(1)
    } else {
        SMALL_SIZE
    };
    let largest = rounded.saturating_add(slack).min(room);
    let size = if room - rounded <= slack {
        room
    } else {
        rounded
    };
    GuessedBlock {
        address,
        size,
        smallest: rounded,
        largest,
        room,
    }
}

// --------------------------------------------------------------------- the search

/// How far a replay got: the index of its first divergence (past the end
/// when none), then whether it matched in full.
fn progress(r: &DeviceReplay) -> (usize, bool) {
    (
        r.divergence.as_ref().map_or(usize::MAX, |d| d.event_index),
        r.full_match(),
    )
}

/// Start states a divergence points at, each one inference more than
/// `choices`.
fn candidates(
    replay: &SearchReplay,
    layout: &StartLayout,
    choices: &StartChoices,
    start: &StartState,
    config: &AllocatorConfig,
    events: &[Event],
) -> Vec<StartChoices> {
    let Some(d) = replay.report.divergence.as_ref() else {
        return Vec::new();
    };
    let event = d.event_index;
    let mut sized: Vec<(u64, u64)> = Vec::new();
    if let Some(want) = d.expected_event
        && want.action == TraceAction::Alloc
        && let Some(g) = layout
            .guessed
            .iter()
            .filter(|g| g.address <= want.addr && want.addr - g.address <= g.largest.max(g.size))
            .max_by_key(|g| g.address)
    {
        // PyTorch placed the allocation where the model had no free block:
        // the recorded address shows where the guessed block really ended.
        if g.address == want.addr {
            // Reused in place after its free: it was at least as big as the
            // new request.
            let needed = round_size(want.size, config).min(g.largest);
            if needed > g.size {
                sized.push((g.address, needed));
            }
        } else {
            let size = want.addr - g.address;
            if (g.smallest..=g.largest).contains(&size) {
                sized.push((g.address, size));
            }
        }
    }
    let x_based = sized.len();
    if let Some(got) = d.model_event
        && got.action == TraceAction::Alloc
        && let Some(g) = layout
            .guessed
            .iter()
            .find(|g| g.address + g.size == got.addr)
        && g.largest > g.size
    {
        // The model took the free block right after a guessed block, which
        // PyTorch did not have: the block was bigger and left less room.
        // The least growth that leaves that free block too small, then the
        // most the split rule allows. The free block is the one the model
        // took, not the start's gap: blocks freed in the trace before the
        // call may have merged into it.
        let needed = round_size(got.size, config);
        let taken = replay
            .free_block_taken()
            .unwrap_or_else(|| g.room.saturating_sub(g.size));
        let unfit = g
            .size
            .saturating_add(taken)
            .saturating_add(MIN_BLOCK_SIZE)
            .saturating_sub(needed);
        if unfit > g.size && unfit < g.largest {
            sized.push((g.address, unfit));
        }
        sized.push((g.address, g.largest));
    }
    let mut out = Vec::new();
    let mut with_sizes = |sizes: &[(u64, u64)]| {
        let mut c = choices.clone();
        for &(addr, size) in sizes {
            c.sizes.insert(addr, (size, event));
        }
        if c != *choices && !out.contains(&c) {
            out.push(c);
        }
    };
    for one in &sized {
        with_sizes(std::slice::from_ref(one));
    }
    if x_based > 0 && sized.len() > x_based {
        // Both inferences at once: the model's pick was wrong and PyTorch's
        // needed room the model did not have.
        with_sizes(&[sized[0], sized[x_based]]);
    }
    // The recorded map where the replay first differs on one: the
    // divergence itself, or the map of the diverging call when the model
    // emitted something else first. The model, its reservation based at the
    // start's lowest page, either served the call from a block that
    // reservation let it use, with no map at all, or was refused its own map
    // and took the retry path, whose sync and releases it emitted first.
    let map_divergence = match d.expected_event {
        Some(e) if e.action == TraceAction::SegmentMap => {
            let got = d
                .model_event
                .filter(|g| g.action == TraceAction::SegmentMap);
            Some((e, event, got))
        }
        _ => next_call(events, event).and_then(|anchor| {
            (event..anchor)
                .find(|&j| events[j].action == TraceAction::SegmentMap)
                .map(|j| (events[j], j, None))
        }),
    };
    if let Some((want, event, model_map)) = map_divergence {
        for ((stream, _, residue), ranges) in reservation_groups(start) {
            let Some(&(lowest, first)) = ranges.first() else {
                continue;
            };
            let page = expandable_page_size(first.kind);
            let Some(r) = layout
                .reservations
                .iter()
                .find(|r| r.ranges.first().is_some_and(|s| s.address == lowest))
            else {
                continue;
            };
            if want.stream == stream && want.addr % page == residue && want.addr < r.base {
                // PyTorch mapped below every page the start shows.
                let mut c = choices.clone();
                c.bases.insert(lowest, (want.addr, event));
                out.push(c);
            }
            if let Some(got) = model_map
                && got.stream == stream
                && (r.base..r.base.saturating_add(r.size)).contains(&got.addr)
                && !(r.base..r.base.saturating_add(r.size)).contains(&want.addr)
                && !choices.ends.contains_key(&lowest)
            {
                // The model mapped in this reservation where PyTorch had to
                // reserve a new one: the reservation ended before.
                let mut c = choices.clone();
                c.ends.insert(lowest, (got.addr, event));
                out.push(c);
            }
        }
    }
    // PyTorch released a page of a reservation, or ran out of memory, where
    // the model served the call from that reservation: PyTorch meets a
    // reservation's unmapped pages in address order when it looks for room
    // to map, so it had pages below the lowest one the start shows, tried
    // to map there, was refused (the device was full) and released cached
    // blocks to retry, or gave up. Based a page lower, the model makes that
    // attempt too (the device it replays on refuses every map the recording
    // does not show).
    if let (Some(want), Some(got)) = (d.expected_event, d.model_event)
        && matches!(want.action, TraceAction::SegmentUnmap | TraceAction::Oom)
        && matches!(got.action, TraceAction::Alloc | TraceAction::SegmentMap)
    {
        for r in &layout.reservations {
            let Some(lowest) = r.ranges.first().map(|s| s.address) else {
                continue;
            };
            let within = |a: u64| (r.base..r.base.saturating_add(r.size)).contains(&a);
            // An OOM's address is the device's free memory, not a place.
            let released_here = want.action == TraceAction::Oom || within(want.addr);
            if r.stream == got.stream
                && released_here
                && within(got.addr)
                && r.base == lowest
                && !choices.unmapped_below.contains_key(&lowest)
            {
                let mut c = choices.clone();
                c.unmapped_below.insert(lowest, event);
                out.push(c);
            }
        }
    }
    out
}

/// Replays `events` from the start states the trace allows and returns the
/// replay that explains the most events, with the start it used. A start
/// that explains every event is a full match; otherwise the divergence
/// names the first event no start state tried could explain.
///
/// A ring buffer can cut a call in two: the first recorded event is then an
/// allocation whose `segment_alloc` or `segment_map` was dropped, and no
/// state before the cut reproduces it. When the first call cannot be
/// explained, the start is also tried right after it: the file determines
/// that state completely (the final layout with the rest of the trace
/// undone).
pub(crate) fn replay_from_best_start(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
) -> Result<(DeviceReplay, StartLayout, StartChoices), String> {
    let start = undo_trace(snapshot, device, events)?;
    replay_from_best_start_of(snapshot, device, events, config, &start)
}

/// [`replay_from_best_start`] given the start state before `events`
/// (`undo_trace` of them), when the caller has it already.
fn replay_from_best_start_of(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
    start: &StartState,
) -> Result<(DeviceReplay, StartLayout, StartChoices), String> {
    let whole = search(snapshot, device, events, config, start);
    // An allocation, or one that failed: an OOM call's retry path (its
    // sync, its releases) can be cut as an allocation's can.
    let first_call = next_call(events, 0)
        .filter(|&k| matches!(events[k].action, TraceAction::Alloc | TraceAction::Oom));
    let Some(k) = first_call else {
        return whole;
    };
    // Only a call whose device events were lost can have been cut: a
    // segment_alloc before it is that call's own (a call makes at most one),
    // so it was not lost, unless the trace opens with a release: the retry
    // path releases cached segments one by one before its cudaMalloc, and
    // the ring buffer may have dropped the first of them. An event no device
    // could have produced is reported where it stands, never skipped as part
    // of the start.
    let obtained_in_trace = events[..k]
        .iter()
        .any(|e| e.action == TraceAction::SegmentAlloc);
    // Or it opens inside that retry path's sync, which completes every
    // pending free (a run of `free_completed`) before the releases: the ring
    // buffer may have dropped the first completions, and the start then
    // holds their blocks free where the call found them pending.
    let opens_with_release = events[..k]
        .iter()
        .find(|e| e.action != TraceAction::FreeCompleted)
        .is_some_and(super::replay::is_release);
    let cut_possible = (!obtained_in_trace || opens_with_release)
        && super::replay::first_impossible(events, 0..k + 1).is_none();
    if !cut_possible {
        return whole;
    }
    let unexplained = match &whole {
        Ok((r, _, _)) => r.divergence.as_ref().is_some_and(|d| d.event_index <= k),
        Err(_) => true,
    };
    if !unexplained {
        return whole;
    }
    let rest = &events[k + 1..];
    // The state right after the cut call holds the block it allocated: a
    // file whose final layout, with the rest undone, lacks it is not a cut
    // call but an allocation the file contradicts (reported where it is).
    let allocated = events[k];
    let holds_the_call = |start: &StartState| {
        allocated.action == TraceAction::Oom || start.live.contains_key(&allocated.addr)
    };
    let after = undo_trace(snapshot, device, rest)
        .and_then(|start| {
            if holds_the_call(&start) {
                Ok(start)
            } else {
                Err(String::new())
            }
        })
        .and_then(|start| search(snapshot, device, rest, config, &start));
    let Ok((mut r, mut l, c)) = after else {
        return whole;
    };
    let given = k + 1;
    r.events_in_trace = events.len();
    r.events_matched += given;
    r.segment_allocs = events
        .iter()
        .filter(|e| e.action == TraceAction::SegmentAlloc)
        .count();
    if let Some(d) = r.divergence.as_mut() {
        d.event_index += given;
    }
    l.first_event = given;
    if let ReplayStart::Reconstructed { inferences, .. } = &mut l.start {
        inferences.insert(
            0,
            format!(
                "the trace begins inside a call: the first events of the {} at event #{k} \
                 (its segment_alloc or map, or the first completions or releases of its \
                 retry) fell out of the ring buffer, so the start is the state right after it \
                 (events #0-#{k} are that state's, not replayed)",
                if allocated.action == TraceAction::Oom {
                    "allocation that ran out of memory"
                } else {
                    "allocation"
                }
            ),
        );
    }
    r.start = l.start.clone();
    match &whole {
        Ok((w, _, _)) if progress(w) >= progress(&r) => whole,
        _ => Ok((r, l, c)),
    }
}

/// Sideways moves the search makes in a row before it gives up.
const MAX_SIDEWAYS: usize = 3;

/// Whether `next` diverges at the same allocation as `now` but with the
/// model placing it somewhere else: the start state it came from explains
/// the model's first pick as PyTorch's rules require.
fn places_elsewhere(now: &DeviceReplay, next: &DeviceReplay) -> bool {
    let (Some(a), Some(b)) = (now.divergence.as_ref(), next.divergence.as_ref()) else {
        return false;
    };
    let alloc_at = |d: &super::replay::Divergence| {
        d.model_event
            .filter(|e| e.action == TraceAction::Alloc)
            .map(|e| e.addr)
    };
    a.event_index == b.event_index
        && alloc_at(a).is_some()
        && alloc_at(b).is_some()
        && alloc_at(a) != alloc_at(b)
}

fn search(
    snapshot: &Snapshot,
    device: u32,
    events: &[Event],
    config: &AllocatorConfig,
    start: &StartState,
) -> Result<(DeviceReplay, StartLayout, StartChoices), String> {
    // One copy of the events for every replay of the search.
    let script: Rc<[Event]> = events.into();
    let builder = LayoutBuilder::new(start, config);
    let mut choices = StartChoices::default();
    let mut layout = builder.layout(&choices)?;
    let mut replay = replay_for_search(snapshot, device, &script, config, &layout)?;
    let mut replays = 1;
    // Sideways moves in a row (see below).
    let mut sideways = 0;
    while replays < MAX_REPLAYS {
        let mut best: Option<(SearchReplay, StartLayout, StartChoices)> = None;
        let mut aside: Option<(SearchReplay, StartLayout, StartChoices)> = None;
        for c in candidates(&replay, &layout, &choices, start, config, &script) {
            if replays >= MAX_REPLAYS {
                break;
            }
            replays += 1;
            // A candidate that makes the start state impossible is dropped.
            let Ok(l) = builder.layout(&c) else {
                continue;
            };
            let Ok(r) = replay_for_search(snapshot, device, &script, config, &l) else {
                continue;
            };
            let beats = |p: &DeviceReplay| progress(&r.report) > progress(p);
            if beats(&replay.report) && best.as_ref().is_none_or(|(b, _, _)| beats(&b.report)) {
                // A full match is as far as a replay gets: no later
                // candidate can beat it.
                let unbeatable = r.report.full_match();
                best = Some((r, l, c));
                if unbeatable {
                    break;
                }
            } else if aside.is_none() && places_elsewhere(&replay.report, &r.report) {
                aside = Some((r, l, c));
            }
        }
        // Two guessed blocks can each leave a free block PyTorch did not
        // have: growing one only moves the model's pick to the other, at the
        // same event. That candidate explains the first wrong pick, so the
        // search goes on from it (a few times in a row at most: each move
        // grows a block, and `MAX_REPLAYS` bounds the rest).
        let next = match best {
            Some(b) => {
                sideways = 0;
                b
            }
            None if sideways < MAX_SIDEWAYS => match aside {
                Some(a) => {
                    sideways += 1;
                    a
                }
                None => break,
            },
            None => break,
        };
        (replay, layout, choices) = next;
    }
    Ok((replay.finish(snapshot, device), layout, choices))
}

/// The start state of `device`'s trace under the recorded settings `config`,
/// with its inferences checked exactly as `verify` checks them (by replaying
/// the trace against the recording).
pub fn start_layout(
    snapshot: &Snapshot,
    device: u32,
    config: &AllocatorConfig,
) -> Result<StartLayout, String> {
    let events = super::replay::replayable_events(
        snapshot
            .device_traces
            .get(device as usize)
            .map_or(&[][..], Vec::as_slice),
    );
    let start = undo_trace(snapshot, device, &events)?;
    if starts_empty(&start) {
        // A full history: nothing to infer.
        return start_layout_from(&start, config, &StartChoices::default());
    }
    let (_, layout, _) = replay_from_best_start_of(snapshot, device, &events, config, &start)?;
    Ok(layout)
}
