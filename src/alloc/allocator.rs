//! `DeviceCachingAllocator`: one device's caching allocator (spec §2–§4).
//!
//! Blocks live in an arena and link to their neighbours by index; free blocks
//! sit in ordered maps keyed by (stream, size, address) exactly like
//! PyTorch's `BlockComparatorSize`, which decides best fit and ties.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap;
use serde::Serialize;
use thiserror::Error;

use super::config::{AllocatorConfig, ConfigError};
use super::device::{DeviceError, DeviceMemory};
use super::layout::{BlockInfo, BlockState, PoolKind, SegmentInfo};
use super::oom::OutOfMemory;
use super::sizing::{
    LARGE_BUFFER, MAX_DEVICE_BYTES, MIN_BLOCK_SIZE, ONE_EXABYTE, SMALL_BUFFER, SMALL_SIZE,
    allocation_size, round_size,
};
use super::stats::DeviceStats;
use super::trace::{TraceAction, TraceEntry};

/// A CUDA stream handle (`cudaStream_t` as an integer; 0 = default stream).
pub type StreamId = u64;
/// A private memory pool id (CUDA graphs, `MemPool`); (0, 0) is the default pool.
pub type MempoolId = (i64, i64);

type BlockId = u32;

/// Why a call into the allocator failed.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum AllocError {
    /// The malloc retry chain gave up; the report renders PyTorch's text.
    #[error("{}", .0.message())]
    OutOfMemory(Box<OutOfMemory>),
    #[error("CUDA out of memory. Tried to allocate more than 1EB memory.")]
    MoreThanOneExabyte,
    #[error("invalid device pointer: {0:#x}")]
    InvalidPointer(u64),
    #[error("invalid fraction value {0}: it must be within [0.0, 1.0]")]
    InvalidFraction(f64),
    #[error("no private memory pool {0:?}")]
    UnknownPool(MempoolId),
    #[error("private memory pool {0:?} is already capturing")]
    PoolAlreadyCapturing(MempoolId),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("device error: {0}")]
    Device(String),
}

impl AllocError {
    /// The OOM report, when this is an out-of-memory error.
    pub fn as_oom(&self) -> Option<&OutOfMemory> {
        match self {
            AllocError::OutOfMemory(o) => Some(o),
            _ => None,
        }
    }

    /// Whether PyTorch raises this as `torch.OutOfMemoryError`: the retry
    /// chain's report, and the "more than 1EB" refusal (`TORCH_CHECK_WITH(
    /// OutOfMemoryError, …)`), which has no report.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            AllocError::OutOfMemory(_) | AllocError::MoreThanOneExabyte
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PoolRef {
    /// Index into `CachingAllocator::pools` (0 = the default pools).
    owner: u32,
    kind: PoolKind,
}

#[derive(Debug, Clone)]
struct Block {
    ptr: u64,
    size: u64,
    requested_size: u64,
    stream: StreamId,
    pool: PoolRef,
    allocated: bool,
    mapped: bool,
    alive: bool,
    prev: Option<BlockId>,
    next: Option<BlockId>,
    /// Outstanding stream events (record_stream uses after free).
    event_count: u32,
    /// Streams recorded with `record_stream` while allocated.
    stream_uses: Vec<StreamId>,
    /// Index into `CachingAllocator::expandable` for expandable segments.
    expandable: Option<u32>,
    /// The pool's get_free_block counter when the block entered the pool (GC age).
    gc_count_base: u64,
}

#[derive(Debug, Clone, Default)]
struct BlockPool {
    /// Free mapped blocks by (stream, size, address).
    blocks: BTreeMap<(StreamId, u64, u64), BlockId>,
    /// Unmapped address space of expandable segments by (stream, address).
    unmapped: BTreeMap<(StreamId, u64), BlockId>,
    get_free_blocks_call_count: u64,
}

#[derive(Debug, Clone)]
struct PoolPair {
    id: MempoolId,
    small: BlockPool,
    large: BlockPool,
    /// Live graphs / MemPools using this private pool.
    use_count: u32,
    /// Segments (or mapped ranges) not yet returned to the device.
    cuda_malloc_count: u32,
}

#[derive(Debug, Clone, Copy)]
struct ExpandableSegment {
    base: u64,
    va_size: u64,
    page_size: u64,
}

#[derive(Debug, Clone, Copy)]
struct PendingEvent {
    block: BlockId,
    done: bool,
}

#[derive(Debug, Clone)]
struct Capture {
    pool_owner: u32,
    /// Streams whose allocations go to the private pool; `None` = all.
    streams: Option<Vec<StreamId>>,
}

/// A ring buffer of trace entries like PyTorch's `alloc_trace`.
#[derive(Debug, Clone)]
struct TraceBuffer {
    entries: VecDeque<TraceEntry>,
    max_entries: usize,
}

/// A block to adopt: `(size, requested_size, state)`.
pub type AdoptedBlock = (u64, u64, BlockState);

/// A mapped range to adopt: its address and its blocks in address order.
pub type AdoptedRange<'a> = (u64, &'a [AdoptedBlock]);

/// A mapped piece's requested size and state.
type AdoptedMapped = (u64, BlockState);

/// An expandable segment's address reservation, for
/// [`CachingAllocator::adopt_expandable_segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdoptedReservation {
    pub base: u64,
    /// Bytes of address space reserved (whole pages).
    pub va_size: u64,
    /// Bytes per page: 2 MiB (small pool) or 20 MiB (large).
    pub page_size: u64,
    pub stream: StreamId,
    pub kind: PoolKind,
}

/// One live allocation, for listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LiveAllocation {
    pub address: u64,
    pub size: u64,
    pub requested_size: u64,
    pub stream: StreamId,
    pub pool: PoolKind,
}

/// The model of one device's PyTorch caching allocator over a device `D`.
#[derive(Debug, Clone)]
pub struct CachingAllocator<D: DeviceMemory> {
    device: D,
    device_index: u32,
    config: AllocatorConfig,
    blocks: Vec<Block>,
    free_slots: Vec<BlockId>,
    pools: Vec<Option<PoolPair>>,
    /// Allocated blocks by address.
    active: FxHashMap<u64, BlockId>,
    /// Freed blocks waiting for stream events, by address.
    pending_free: FxHashMap<u64, BlockId>,
    events: BTreeMap<StreamId, VecDeque<PendingEvent>>,
    /// Blocks freed during a capture whose events are inserted afterwards.
    deferred_events: Vec<BlockId>,
    expandable: Vec<Option<ExpandableSegment>>,
    captures: Vec<Capture>,
    stats: DeviceStats,
    /// Bytes of all segments and mapped pages (`total_allocated_memory`).
    reserved_total: u64,
    /// `allowed_memory_maximum` once a memory fraction is set.
    allowed_max: Option<u64>,
    trace: Option<TraceBuffer>,
    now_us: u64,
    /// Stream handles handed out by [`Self::fresh_synthetic_stream`].
    synthetic_streams: u64,
}

impl<D: DeviceMemory> CachingAllocator<D> {
    /// A fresh allocator for device `device_index`. A
    /// `per_process_memory_fraction` in the config is applied at once.
    pub fn new(device: D, device_index: u32, config: AllocatorConfig) -> Self {
        let stats = DeviceStats {
            max_split_size: config.max_split_size_stat(),
            ..DeviceStats::default()
        };
        let fraction = config.per_process_memory_fraction;
        let mut allocator = CachingAllocator {
            device,
            device_index,
            config,
            blocks: Vec::new(),
            free_slots: Vec::new(),
            pools: vec![Some(PoolPair {
                id: (0, 0),
                small: BlockPool::default(),
                large: BlockPool::default(),
                use_count: 1,
                cuda_malloc_count: 0,
            })],
            active: FxHashMap::default(),
            pending_free: FxHashMap::default(),
            events: BTreeMap::new(),
            deferred_events: Vec::new(),
            expandable: Vec::new(),
            captures: Vec::new(),
            stats,
            reserved_total: 0,
            allowed_max: None,
            trace: None,
            now_us: 0,
            synthetic_streams: 0,
        };
        if let Some(f) = fraction {
            allocator.set_memory_fraction(f).ok();
        }
        allocator
    }

    // ----------------------------------------------------------------- accessors

    pub fn device(&self) -> &D {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    pub fn device_index(&self) -> u32 {
        self.device_index
    }

    pub fn config(&self) -> &AllocatorConfig {
        &self.config
    }

    pub fn stats(&self) -> &DeviceStats {
        &self.stats
    }

    /// `torch.cuda.memory_allocated()`.
    pub fn memory_allocated(&self) -> u64 {
        self.stats.allocated_bytes.all.current as u64
    }

    /// `torch.cuda.memory_reserved()`.
    pub fn memory_reserved(&self) -> u64 {
        self.stats.reserved_bytes.all.current as u64
    }

    /// The limit set by a memory fraction, if any (bytes).
    pub fn allowed_memory_maximum(&self) -> Option<u64> {
        self.allowed_max
    }

    /// `torch.cuda.get_per_process_memory_fraction()`.
    pub fn memory_fraction(&self) -> f64 {
        match self.allowed_max {
            Some(a) => {
                let total = self.device.mem_get_info().total;
                if total == 0 {
                    1.0
                } else {
                    a as f64 / total as f64
                }
            }
            None => 1.0,
        }
    }

    /// Sets the clock stamped on trace entries (microseconds).
    pub fn set_time_us(&mut self, now_us: u64) {
        self.now_us = now_us;
    }

    /// `_record_memory_history`: `Some(max_entries)` turns the trace on
    /// (a ring buffer), `None` turns it off and clears it.
    pub fn record_history(&mut self, max_entries: Option<usize>) {
        self.trace = max_entries.map(|max| TraceBuffer {
            entries: VecDeque::new(),
            max_entries: max.max(1),
        });
    }

    /// Makes room for `blocks` more blocks and `trace_entries` more trace
    /// entries, so that a model set up from a known layout (a replay's
    /// start) grows its tables once instead of by doubling. Changes nothing
    /// the model does.
    pub fn reserve(&mut self, blocks: usize, trace_entries: usize) {
        self.blocks.reserve(blocks);
        self.active.reserve(blocks);
        if let Some(t) = self.trace.as_mut() {
            let room = t.max_entries.saturating_sub(t.entries.len());
            t.entries.reserve(trace_entries.min(room));
        }
    }

    /// The trace, oldest first.
    pub fn trace(&self) -> impl Iterator<Item = &TraceEntry> {
        self.trace.iter().flat_map(|t| t.entries.iter())
    }

    /// Number of trace entries kept.
    pub fn trace_len(&self) -> usize {
        self.trace.as_ref().map_or(0, |t| t.entries.len())
    }

    /// Live allocations, by address.
    pub fn live_allocations(&self) -> Vec<LiveAllocation> {
        let mut out: Vec<LiveAllocation> = self
            .active
            .values()
            .map(|&id| {
                let b = &self.blocks[id as usize];
                LiveAllocation {
                    address: b.ptr,
                    size: b.size,
                    requested_size: b.requested_size,
                    stream: b.stream,
                    pool: b.pool.kind,
                }
            })
            .collect();
        out.sort_by_key(|a| a.address);
        out
    }

    /// Bytes from the allocation at `ptr` to the end of the free cached
    /// block right after it (just its own size when the next block is in
    /// use, pending or unmapped, or it ends its segment): right after the
    /// `malloc` that returned `ptr`, the size of the free block it was
    /// served from. `None` when nothing is allocated at `ptr`.
    pub fn allocation_with_free_after(&self, ptr: u64) -> Option<u64> {
        let b = self.b(*self.active.get(&ptr)?);
        let free_after = b
            .next
            .map(|n| self.b(n))
            .filter(|n| {
                n.alive
                    && n.mapped
                    && !n.allocated
                    && n.event_count == 0
                    && n.stream_uses.is_empty()
            })
            .map_or(0, |n| n.size);
        b.size.checked_add(free_after)
    }

    /// `cacheInfo`: the largest free cached block (bytes).
    pub fn largest_free_block(&self) -> u64 {
        self.pools
            .iter()
            .flatten()
            .flat_map(|p| [&p.small, &p.large])
            .flat_map(|bp| bp.blocks.keys())
            .map(|&(_, size, _)| size)
            .max()
            .unwrap_or(0)
    }

    // ----------------------------------------------------------------- settings

    /// `_set_allocator_settings`: applies a settings string (see
    /// [`AllocatorConfig::apply`]). `memory_stats()["max_split_size"]` keeps
    /// its construction-time value, as in PyTorch.
    pub fn set_settings(&mut self, settings: &str) -> Result<(), AllocError> {
        self.config.apply(settings)?;
        Ok(())
    }

    /// `set_per_process_memory_fraction(fraction)`.
    pub fn set_memory_fraction(&mut self, fraction: f64) -> Result<(), AllocError> {
        if !(0.0..=1.0).contains(&fraction) || fraction.is_nan() {
            return Err(AllocError::InvalidFraction(fraction));
        }
        let total = self.device.mem_get_info().total;
        self.allowed_max = Some((fraction * total as f64) as u64);
        Ok(())
    }

    /// `reset_peak_memory_stats()`.
    pub fn reset_peak_stats(&mut self) {
        self.stats.reset_peak();
    }

    /// `reset_accumulated_memory_stats()`.
    pub fn reset_accumulated_stats(&mut self) {
        self.stats.reset_accumulated();
    }

    // ----------------------------------------------------------------- block arena

    fn new_block(&mut self, ptr: u64, size: u64, stream: StreamId, pool: PoolRef) -> BlockId {
        let block = Block {
            ptr,
            size,
            requested_size: 0,
            stream,
            pool,
            allocated: false,
            mapped: true,
            alive: true,
            prev: None,
            next: None,
            event_count: 0,
            stream_uses: Vec::new(),
            expandable: None,
            gc_count_base: 0,
        };
        if let Some(id) = self.free_slots.pop() {
            self.blocks[id as usize] = block;
            id
        } else {
            self.blocks.push(block);
            (self.blocks.len() - 1) as BlockId
        }
    }

    fn delete_block(&mut self, id: BlockId) {
        let b = &mut self.blocks[id as usize];
        b.alive = false;
        b.stream_uses = Vec::new();
        self.free_slots.push(id);
    }

    fn b(&self, id: BlockId) -> &Block {
        &self.blocks[id as usize]
    }

    fn bm(&mut self, id: BlockId) -> &mut Block {
        &mut self.blocks[id as usize]
    }

    fn is_split(&self, id: BlockId) -> bool {
        let b = self.b(id);
        b.prev.is_some() || b.next.is_some()
    }

    fn pool_mut(&mut self, pool: PoolRef) -> &mut BlockPool {
        let pair = self.pools[pool.owner as usize]
            .as_mut()
            .expect("a block's pool outlives the block");
        match pool.kind {
            PoolKind::Small => &mut pair.small,
            PoolKind::Large => &mut pair.large,
        }
    }

    fn pool_ref(&self, pool: PoolRef) -> &BlockPool {
        let pair = self.pools[pool.owner as usize]
            .as_ref()
            .expect("a block's pool outlives the block");
        match pool.kind {
            PoolKind::Small => &pair.small,
            PoolKind::Large => &pair.large,
        }
    }

    fn insert_into_pool(&mut self, id: BlockId) {
        let (pool, key) = {
            let b = self.b(id);
            (b.pool, (b.stream, b.size, b.ptr))
        };
        let bp = self.pool_mut(pool);
        let base = bp.get_free_blocks_call_count;
        bp.blocks.insert(key, id);
        self.bm(id).gc_count_base = base;
    }

    fn remove_from_pool(&mut self, id: BlockId) {
        let (pool, key) = {
            let b = self.b(id);
            (b.pool, (b.stream, b.size, b.ptr))
        };
        self.pool_mut(pool).blocks.remove(&key);
    }

    fn record_trace(&mut self, action: TraceAction, addr: u64, size: u64, stream: StreamId) {
        if let Some(t) = self.trace.as_mut() {
            if t.entries.len() >= t.max_entries {
                t.entries.pop_front();
            }
            t.entries.push_back(TraceEntry {
                action,
                addr,
                size,
                stream,
                time_us: self.now_us,
            });
        }
    }

    fn max_split(&self) -> u64 {
        self.config.max_split_size_bytes()
    }

    // ----------------------------------------------------------------- malloc

    /// `malloc(size)` on `stream`: the address of a block of at least
    /// `round_size(size)` bytes. A zero-byte request returns address 0 and
    /// touches nothing, as in PyTorch.
    pub fn malloc(&mut self, size: u64, stream: StreamId) -> Result<u64, AllocError> {
        if size >= ONE_EXABYTE {
            return Err(AllocError::MoreThanOneExabyte);
        }
        if size == 0 {
            return Ok(0);
        }
        if self.captures.is_empty() {
            self.process_events();
        }
        let rounded = round_size(size, &self.config);
        let pool = self.get_pool(rounded, stream);
        let alloc_size = allocation_size(rounded);

        let mut found = self.get_free_block(pool, stream, rounded);
        if found.is_none() {
            if self.allowed_max.is_some() && self.config.garbage_collection_threshold > 0.0 {
                self.garbage_collect_cached_blocks();
            }
            found = self.alloc_block(pool, stream, rounded, alloc_size, false)?;
            if found.is_none() && self.release_available_cached_blocks(pool, stream, rounded) {
                found = self.alloc_block(pool, stream, rounded, alloc_size, false)?;
            }
            if found.is_none() && self.captures.is_empty() {
                self.release_cached_blocks();
                found = self.alloc_block(pool, stream, rounded, alloc_size, true)?;
            }
        }
        let Some(block) = found else {
            return Err(self.out_of_memory(size, rounded, alloc_size, stream));
        };
        let split = self.should_split(block, rounded);
        Ok(self.alloc_found_block(block, stream, rounded, size, split))
    }

    fn get_pool(&self, size: u64, stream: StreamId) -> PoolRef {
        let kind = if size <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        };
        for capture in &self.captures {
            let accepts = capture
                .streams
                .as_ref()
                .is_none_or(|streams| streams.contains(&stream));
            if accepts {
                return PoolRef {
                    owner: capture.pool_owner,
                    kind,
                };
            }
        }
        PoolRef { owner: 0, kind }
    }

    fn expandable_size(&self, id: BlockId) -> u64 {
        let b = self.b(id);
        let tail = match b.next {
            Some(n) if !self.b(n).mapped => self.b(n).size,
            _ => 0,
        };
        b.size + tail
    }

    fn get_free_block(&mut self, pool: PoolRef, stream: StreamId, size: u64) -> Option<BlockId> {
        let gc_enabled =
            self.allowed_max.is_some() && self.config.garbage_collection_threshold > 0.0;
        if gc_enabled {
            self.pool_mut(pool).get_free_blocks_call_count += 1;
        }
        let chosen = self.find_free_block(pool, stream, size)?;
        self.remove_from_pool(chosen);
        Some(chosen)
    }

    /// The search of `get_free_block` without its effects.
    fn find_free_block(&self, pool: PoolRef, stream: StreamId, size: u64) -> Option<BlockId> {
        let bp = self.pool_ref(pool);
        let mut iter = bp
            .blocks
            .range((stream, size, 0)..)
            .take_while(|(key, _)| key.0 == stream)
            .map(|(_, &id)| id);
        let mut chosen = iter.next()?;
        if self.b(chosen).expandable.is_some() {
            if self.config.expandable_segments {
                // Best fit by the size the block could expand to.
                for next in iter {
                    if self.b(chosen).expandable.is_none()
                        || self.expandable_size(next) >= self.expandable_size(chosen)
                    {
                        break;
                    }
                    chosen = next;
                }
            } else {
                // Expandable segments were turned off: only plain blocks.
                chosen = iter.find(|&id| self.b(id).expandable.is_none())?;
            }
        }
        let block_size = self.b(chosen).size;
        let max_split = self.max_split();
        if size < max_split && block_size >= max_split {
            return None;
        }
        if size >= max_split
            && block_size >= size.saturating_add(self.config.max_non_split_rounding_size)
        {
            return None;
        }
        Some(chosen)
    }

    /// Whether `malloc(size)` on `stream` would be served from the cache as
    /// things stand (no segment obtained, nothing released).
    pub fn would_reuse_cached_block(&self, size: u64, stream: StreamId) -> bool {
        if size == 0 || size >= ONE_EXABYTE {
            return false;
        }
        let rounded = round_size(size, &self.config);
        let pool = self.get_pool(rounded, stream);
        self.find_free_block(pool, stream, rounded).is_some()
    }

    /// The most `malloc(size)` on `stream` could add to
    /// `memory_reserved()` as things stand (bytes): 0 when a cached block
    /// serves it; else the segment it would obtain, or with expandable
    /// segments the request in whole pages (it maps no more: a free mapped
    /// tail it extends makes it map less). Freeing cached blocks to make
    /// room (the retry after a failed segment) only lowers what it ends
    /// with, so `memory_reserved()` plus this bounds reserved after the
    /// call.
    pub fn reserved_growth_bound(&self, size: u64, stream: StreamId) -> u64 {
        if size == 0 || self.would_reuse_cached_block(size, stream) {
            return 0;
        }
        let rounded = round_size(size, &self.config);
        if self.config.expandable_segments {
            let page = match self.get_pool(rounded, stream).kind {
                PoolKind::Small => SMALL_BUFFER,
                PoolKind::Large => LARGE_BUFFER,
            };
            rounded.div_ceil(page).saturating_mul(page)
        } else {
            allocation_size(rounded)
        }
    }

    fn should_split(&self, id: BlockId, size: u64) -> bool {
        let b = self.b(id);
        let remaining = b.size - size;
        if b.pool.kind == PoolKind::Small || self.config.expandable_segments {
            remaining >= MIN_BLOCK_SIZE
        } else {
            size < self.max_split() && remaining > SMALL_SIZE
        }
    }

    fn alloc_found_block(
        &mut self,
        found: BlockId,
        stream: StreamId,
        size: u64,
        requested: u64,
        split: bool,
    ) -> u64 {
        let already_split = self.is_split(found);
        let expandable = self.b(found).expandable;
        let kind = self.b(found).pool.kind;
        let mut block = found;
        if split {
            let remaining = found;
            let (ptr, pool, prev) = {
                let r = self.b(remaining);
                (r.ptr, r.pool, r.prev)
            };
            block = self.new_block(ptr, size, stream, pool);
            {
                let nb = self.bm(block);
                nb.expandable = expandable;
                nb.prev = prev;
                nb.next = Some(remaining);
            }
            if let Some(p) = prev {
                self.bm(p).next = Some(block);
            }
            {
                let r = self.bm(remaining);
                r.prev = Some(block);
                r.ptr += size;
                r.size -= size;
            }
            self.insert_into_pool(remaining);
            if expandable.is_none() {
                if already_split {
                    self.stats.inactive_split_bytes.decrease(kind, size);
                } else {
                    let rest = self.b(remaining).size;
                    self.stats.inactive_split_bytes.increase(kind, rest);
                    self.stats.inactive_split.increase(kind, 1);
                }
            }
        } else if already_split && expandable.is_none() {
            let whole = self.b(block).size;
            self.stats.inactive_split_bytes.decrease(kind, whole);
            self.stats.inactive_split.decrease(kind, 1);
        }

        let (ptr, block_size, block_stream) = {
            let b = self.bm(block);
            b.allocated = true;
            b.requested_size = requested;
            (b.ptr, b.size, b.stream)
        };
        self.record_trace(TraceAction::Alloc, ptr, requested, block_stream);
        self.active.insert(ptr, block);
        self.stats.allocation.increase(kind, 1);
        self.stats.allocated_bytes.increase(kind, block_size);
        self.stats.active.increase(kind, 1);
        self.stats.active_bytes.increase(kind, block_size);
        self.stats.requested_bytes.increase(kind, requested);
        if block_size >= self.max_split() {
            self.stats.oversize_allocations.increase(1);
        }
        ptr
    }

    fn alloc_block(
        &mut self,
        pool: PoolRef,
        stream: StreamId,
        rounded: u64,
        alloc_size: u64,
        is_retry: bool,
    ) -> Result<Option<BlockId>, AllocError> {
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if let Some(max) = self.allowed_max
            && self.reserved_total.saturating_add(alloc_size) > max
        {
            return Ok(None);
        }
        if self.config.expandable_segments {
            let block = self.try_allocate_expandable_block(pool, stream, rounded)?;
            if block.is_some()
                && pool.owner != 0
                && let Some(pair) = self.pools[pool.owner as usize].as_mut()
            {
                pair.cuda_malloc_count += 1;
            }
            return Ok(block);
        }
        let ptr = match self.device.malloc(alloc_size) {
            Ok(ptr) => ptr,
            Err(DeviceError::OutOfMemory) => return Ok(None),
            Err(DeviceError::Other(e)) => return Err(AllocError::Device(e)),
        };
        if pool.owner != 0
            && let Some(pair) = self.pools[pool.owner as usize].as_mut()
        {
            pair.cuda_malloc_count += 1;
        }
        self.reserved_total += alloc_size;
        let id = self.new_block(ptr, alloc_size, stream, pool);
        self.stats.segment.increase(pool.kind, 1);
        self.stats.reserved_bytes.increase(pool.kind, alloc_size);
        if alloc_size >= self.max_split() {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        self.record_trace(TraceAction::SegmentAlloc, ptr, alloc_size, stream);
        Ok(Some(id))
    }

    fn out_of_memory(
        &mut self,
        requested: u64,
        rounded: u64,
        alloc_size: u64,
        stream: StreamId,
    ) -> AllocError {
        let info = self.device.mem_get_info();
        self.record_trace(TraceAction::Oom, info.free, rounded, stream);
        self.stats.num_ooms += 1;
        let private_pool_cached = self
            .pools
            .iter()
            .skip(1)
            .flatten()
            .flat_map(|p| [&p.small, &p.large])
            .flat_map(|bp| bp.blocks.keys())
            .map(|&(_, size, _)| size)
            .sum();
        AllocError::OutOfMemory(Box::new(OutOfMemory {
            device: self.device_index,
            requested,
            rounded,
            alloc_size,
            device_total: info.total,
            device_free: info.free,
            allowed: self.allowed_max,
            allocated: self.stats.allocated_bytes.all.current as u64,
            reserved: self.stats.reserved_bytes.all.current as u64,
            private_pool_cached,
            process_info: super::oom::process_info(&self.device.processes()),
        }))
    }

    // ----------------------------------------------------------------- free

    /// `free(ptr)`: address 0 is a no-op; an unknown address is an error.
    /// With recorded streams the block waits for their events
    /// (`active_pending_free`) before it returns to the pool.
    pub fn free(&mut self, ptr: u64) -> Result<(), AllocError> {
        if ptr == 0 {
            return Ok(());
        }
        let id = self
            .active
            .remove(&ptr)
            .ok_or(AllocError::InvalidPointer(ptr))?;
        let (kind, size, requested, stream, has_uses) = {
            let b = self.bm(id);
            b.allocated = false;
            (
                b.pool.kind,
                b.size,
                b.requested_size,
                b.stream,
                !b.stream_uses.is_empty(),
            )
        };
        self.stats.allocation.decrease(kind, 1);
        self.stats.allocated_bytes.decrease(kind, size);
        self.record_trace(TraceAction::FreeRequested, ptr, requested, stream);
        if size >= self.max_split() {
            self.stats.oversize_allocations.decrease(1);
        }
        if has_uses {
            self.pending_free.insert(ptr, id);
            if self.captures.is_empty() {
                self.insert_events(id);
            } else {
                self.deferred_events.push(id);
            }
        } else {
            self.free_block(id);
        }
        Ok(())
    }

    /// `record_stream(ptr, stream)`: the block is used on another stream, so
    /// its free waits for that stream's work. The allocation stream itself is
    /// ignored.
    pub fn record_stream(&mut self, ptr: u64, stream: StreamId) -> Result<(), AllocError> {
        let id = *self
            .active
            .get(&ptr)
            .ok_or(AllocError::InvalidPointer(ptr))?;
        let b = self.bm(id);
        if b.stream != stream && !b.stream_uses.contains(&stream) {
            b.stream_uses.push(stream);
        }
        Ok(())
    }

    fn insert_events(&mut self, id: BlockId) {
        let streams = std::mem::take(&mut self.bm(id).stream_uses);
        for stream in streams {
            self.bm(id).event_count += 1;
            self.events
                .entry(stream)
                .or_default()
                .push_back(PendingEvent {
                    block: id,
                    done: false,
                });
        }
    }

    /// The work queued so far on `stream` has finished: its events complete
    /// (the blocks they hold are freed at the next malloc or empty_cache).
    /// Event completion is an explicit input of the model.
    pub fn complete_stream_work(&mut self, stream: StreamId) {
        if let Some(queue) = self.events.get_mut(&stream) {
            for e in queue.iter_mut() {
                e.done = true;
            }
        }
    }

    /// Completes every event that holds the pending-free block at `ptr` (and,
    /// streams being in-order queues, every earlier event on those streams).
    /// Returns false if no pending free has that address.
    pub fn complete_pending_free(&mut self, ptr: u64) -> bool {
        let Some(&id) = self.pending_free.get(&ptr) else {
            return false;
        };
        for queue in self.events.values_mut() {
            if let Some(last) = queue.iter().rposition(|e| e.block == id) {
                for e in queue.iter_mut().take(last + 1) {
                    e.done = true;
                }
            }
        }
        true
    }

    /// A stream handle no program uses (counting down from `u64::MAX`): lets a
    /// replay hold a free back until the recording says it completed.
    pub fn fresh_synthetic_stream(&mut self) -> StreamId {
        self.synthetic_streams += 1;
        u64::MAX - self.synthetic_streams
    }

    /// Addresses of blocks freed but waiting for stream events.
    pub fn pending_frees(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.pending_free.keys().copied().collect();
        v.sort_unstable();
        v
    }

    fn insert_deferred_events(&mut self) {
        for id in std::mem::take(&mut self.deferred_events) {
            self.insert_events(id);
            if self.b(id).event_count == 0 {
                self.finish_pending(id);
            }
        }
    }

    fn finish_pending(&mut self, id: BlockId) {
        let ptr = self.b(id).ptr;
        self.pending_free.remove(&ptr);
        self.free_block(id);
    }

    /// Frees the pending blocks whose stream events have completed, as
    /// PyTorch does at the start of every malloc (`process_events`).
    pub fn process_events(&mut self) {
        self.insert_deferred_events();
        if self.events.is_empty() {
            return;
        }
        let streams: Vec<StreamId> = self.events.keys().copied().collect();
        for stream in streams {
            loop {
                let front = self.events.get(&stream).and_then(|q| q.front()).copied();
                let Some(event) = front.filter(|e| e.done) else {
                    break;
                };
                if let Some(q) = self.events.get_mut(&stream) {
                    q.pop_front();
                }
                let b = self.bm(event.block);
                b.event_count -= 1;
                if b.event_count == 0 {
                    self.finish_pending(event.block);
                }
            }
            if self.events.get(&stream).is_some_and(|q| q.is_empty()) {
                self.events.remove(&stream);
            }
        }
    }

    fn synchronize_and_free_events(&mut self) {
        self.stats.num_sync_all_streams += 1;
        self.insert_deferred_events();
        let events = std::mem::take(&mut self.events);
        for (_, queue) in events {
            for event in queue {
                let b = self.bm(event.block);
                b.event_count -= 1;
                if b.event_count == 0 {
                    self.finish_pending(event.block);
                }
            }
        }
    }

    fn free_block(&mut self, id: BlockId) {
        let (ptr, requested, stream, original_size, kind, expandable, prev, next) = {
            let b = self.b(id);
            (
                b.ptr,
                b.requested_size,
                b.stream,
                b.size,
                b.pool.kind,
                b.expandable,
                b.prev,
                b.next,
            )
        };
        self.record_trace(TraceAction::FreeCompleted, ptr, requested, stream);
        let mut net_blocks: i64 = 0;
        let mut net_bytes: i64 = 0;
        for candidate in [prev, next] {
            let subsumed = self.try_merge_blocks(id, candidate);
            if subsumed > 0 {
                net_blocks -= 1;
                net_bytes -= subsumed as i64;
            }
        }
        self.insert_into_pool(id);
        if self.is_split(id) {
            net_blocks += 1;
            net_bytes += self.b(id).size as i64;
        }
        if expandable.is_none() {
            self.stats.inactive_split.apply_delta(kind, net_blocks);
            self.stats.inactive_split_bytes.apply_delta(kind, net_bytes);
        }
        self.stats.active.decrease(kind, 1);
        self.stats.active_bytes.decrease(kind, original_size);
        self.stats.requested_bytes.decrease(kind, requested);
    }

    /// Merges `src` into `dst` if it is free, idle and equally mapped;
    /// returns the bytes absorbed (0 if no merge).
    fn try_merge_blocks(&mut self, dst: BlockId, src: Option<BlockId>) -> u64 {
        let Some(src) = src else { return 0 };
        let (mergeable, src_mapped) = {
            let s = self.b(src);
            let d = self.b(dst);
            (
                !s.allocated
                    && s.event_count == 0
                    && s.stream_uses.is_empty()
                    && s.mapped == d.mapped,
                s.mapped,
            )
        };
        if !mergeable {
            return 0;
        }
        let (src_ptr, src_size, src_prev, src_next, src_stream, src_pool) = {
            let s = self.b(src);
            (s.ptr, s.size, s.prev, s.next, s.stream, s.pool)
        };
        if self.b(dst).prev == Some(src) {
            self.bm(dst).ptr = src_ptr;
            self.bm(dst).prev = src_prev;
            if let Some(p) = src_prev {
                self.bm(p).next = Some(dst);
            }
        } else {
            self.bm(dst).next = src_next;
            if let Some(n) = src_next {
                self.bm(n).prev = Some(dst);
            }
        }
        self.bm(dst).size += src_size;
        let bp = self.pool_mut(src_pool);
        if src_mapped {
            bp.blocks.remove(&(src_stream, src_size, src_ptr));
        } else {
            bp.unmapped.remove(&(src_stream, src_ptr));
        }
        self.delete_block(src);
        src_size
    }

    // ----------------------------------------------------------------- releasing

    /// `empty_cache()`: synchronise all stream events, then return every
    /// whole free segment (and every free page of expandable segments) to
    /// the device.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    fn release_cached_blocks(&mut self) -> bool {
        self.synchronize_and_free_events();
        self.release_blocks(PoolRef {
            owner: 0,
            kind: PoolKind::Large,
        });
        self.release_blocks(PoolRef {
            owner: 0,
            kind: PoolKind::Small,
        });
        for owner in 1..self.pools.len() {
            let freeable = self.pools[owner].as_ref().is_some_and(|p| p.use_count == 0);
            if !freeable {
                continue;
            }
            let owner = owner as u32;
            self.release_blocks(PoolRef {
                owner,
                kind: PoolKind::Small,
            });
            self.release_blocks(PoolRef {
                owner,
                kind: PoolKind::Large,
            });
            if self.pools[owner as usize]
                .as_ref()
                .is_some_and(|p| p.cuda_malloc_count == 0)
            {
                self.pools[owner as usize] = None;
            }
        }
        true
    }

    fn release_blocks(&mut self, pool: PoolRef) {
        let ids: Vec<BlockId> = self.pool_ref(pool).blocks.values().copied().collect();
        let mut to_unmap = Vec::new();
        for id in ids {
            if self.b(id).expandable.is_some() {
                to_unmap.push(id);
            } else if !self.is_split(id) {
                self.release_block(id);
            }
        }
        for id in to_unmap {
            self.unmap_block(id);
            if !self.is_split(id) {
                self.release_expandable_segment(id);
            }
        }
    }

    fn release_block(&mut self, id: BlockId) {
        let (ptr, size, stream, pool) = {
            let b = self.b(id);
            (b.ptr, b.size, b.stream, b.pool)
        };
        self.stats.num_device_free += 1;
        self.record_trace(TraceAction::SegmentFree, ptr, size, stream);
        self.device.free(ptr, size);
        self.reserved_total -= size;
        if pool.owner != 0
            && let Some(pair) = self.pools[pool.owner as usize].as_mut()
        {
            pair.cuda_malloc_count = pair.cuda_malloc_count.saturating_sub(1);
        }
        self.stats.segment.decrease(pool.kind, 1);
        self.stats.reserved_bytes.decrease(pool.kind, size);
        if size >= self.max_split() {
            self.stats.oversize_segments.decrease(1);
        }
        self.remove_from_pool(id);
        self.delete_block(id);
    }

    /// Frees oversize cached blocks of the request's pool and stream when
    /// `max_split_size` is set: the smallest one that is big enough, else the
    /// largest ones until enough is freed.
    fn release_available_cached_blocks(
        &mut self,
        pool: PoolRef,
        stream: StreamId,
        size: u64,
    ) -> bool {
        if self.config.max_split_size.is_none() {
            return false;
        }
        let max_split = self.max_split();
        let key_size = size.max(max_split);
        // Only a whole cudaMalloc'd segment can be cudaFree'd. Under one
        // setting an oversize cached block is never split, but a start
        // state recorded under other settings can hold split ones: freeing
        // one would leave its neighbours linked to a dead block.
        let releasable = |a: &Self, id: BlockId| a.b(id).expandable.is_none() && !a.is_split(id);
        let single = self
            .pool_ref(pool)
            .blocks
            .range((stream, key_size, 0)..)
            .next()
            .filter(|(key, _)| key.0 == stream)
            .map(|(_, &id)| id);
        match single {
            Some(id) if releasable(self, id) => {
                self.release_block(id);
                true
            }
            Some(_) => false,
            None => {
                let candidates: Vec<BlockId> = self
                    .pool_ref(pool)
                    .blocks
                    .range(..(stream, key_size, 0))
                    .rev()
                    .take_while(|(key, _)| key.0 == stream && key.1 >= max_split)
                    .map(|(_, &id)| id)
                    .filter(|&id| releasable(self, id))
                    .collect();
                let mut released = 0u64;
                for id in candidates {
                    if released >= key_size {
                        break;
                    }
                    released += self.b(id).size;
                    self.release_block(id);
                }
                released >= key_size
            }
        }
    }

    fn garbage_collect_cached_blocks(&mut self) {
        let Some(allowed) = self.allowed_max else {
            return;
        };
        let threshold = (self.config.garbage_collection_threshold * allowed as f64) as u64;
        if self.reserved_total <= threshold {
            return;
        }
        let target = self.reserved_total - threshold;
        let large = PoolRef {
            owner: 0,
            kind: PoolKind::Large,
        };
        let counter = self.pool_ref(large).get_free_blocks_call_count;
        let age = |a: &Self, id: BlockId| counter.saturating_sub(a.b(id).gc_count_base);
        let freeable = |a: &Self, id: BlockId| !a.is_split(id) && a.b(id).expandable.is_none();
        let mut total_age: u64 = 0;
        let mut count: u64 = 0;
        for &id in self.pool_ref(large).blocks.values() {
            if freeable(self, id) {
                total_age += age(self, id);
                count += 1;
            }
        }
        let mut reclaimed = 0u64;
        let mut freed_any = true;
        while reclaimed < target && freed_any && count > 0 {
            let age_threshold = total_age as f64 / count as f64;
            freed_any = false;
            let ids: Vec<BlockId> = self.pool_ref(large).blocks.values().copied().collect();
            for id in ids {
                if freeable(self, id) && age(self, id) as f64 >= age_threshold {
                    freed_any = true;
                    reclaimed += self.b(id).size;
                    total_age -= age(self, id);
                    count -= 1;
                    self.release_block(id);
                }
            }
        }
    }

    // ----------------------------------------------------------------- expandable segments

    fn allocatable(&self, id: Option<BlockId>) -> bool {
        id.is_some_and(|id| {
            let b = self.b(id);
            !b.allocated && b.event_count == 0 && b.stream_uses.is_empty()
        })
    }

    fn has_available_address_space(&self, start: BlockId, size: u64) -> bool {
        let mut bytes = 0u64;
        let mut cursor = Some(start);
        while bytes < size && self.allocatable(cursor) {
            let Some(id) = cursor else { break };
            bytes += self.b(id).size;
            cursor = self.b(id).next;
        }
        bytes >= size
    }

    fn find_expandable_block(
        &mut self,
        pool: PoolRef,
        stream: StreamId,
        size: u64,
    ) -> Result<Option<BlockId>, AllocError> {
        let unmapped: Vec<BlockId> = self
            .pool_ref(pool)
            .unmapped
            .range((stream, 0)..)
            .take_while(|(key, _)| key.0 == stream)
            .map(|(_, &id)| id)
            .collect();
        for id in unmapped {
            let mut candidate = id;
            let prev = self.b(id).prev;
            if self.allocatable(prev)
                && let Some(p) = prev
            {
                candidate = p;
            }
            if self.has_available_address_space(candidate, size) {
                return Ok(Some(candidate));
            }
        }
        let page_size = match pool.kind {
            PoolKind::Small => SMALL_BUFFER,
            PoolKind::Large => LARGE_BUFFER,
        };
        let total = self.device.mem_get_info().total;
        // A device reporting an absurd total (a what-if capacity of 2^64 − 1
        // bytes) gets a reservation no larger than any device, so that
        // addresses inside it cannot overflow.
        let most_pages = (MAX_DEVICE_BYTES / page_size).max(1);
        let va_size = total
            .saturating_add(total / 8)
            .div_ceil(page_size)
            .clamp(1, most_pages)
            * page_size;
        let base = match self.device.reserve_address_range(va_size) {
            Ok(base) => base,
            Err(DeviceError::OutOfMemory) => return Ok(None),
            Err(DeviceError::Other(e)) => return Err(AllocError::Device(e)),
        };
        let segment_index = self.expandable.len() as u32;
        self.expandable.push(Some(ExpandableSegment {
            base,
            va_size,
            page_size,
        }));
        let id = self.new_block(base, va_size, stream, pool);
        {
            let b = self.bm(id);
            b.mapped = false;
            b.expandable = Some(segment_index);
        }
        self.pool_mut(pool).unmapped.insert((stream, base), id);
        Ok(Some(id))
    }

    fn segment_of(&self, id: BlockId) -> ExpandableSegment {
        self.b(id)
            .expandable
            .and_then(|i| self.expandable[i as usize])
            .expect("expandable block has a live segment")
    }

    fn map_block(&mut self, id: BlockId, size: u64) -> Result<bool, AllocError> {
        let es = self.segment_of(id);
        let (ptr, block_size, stream, pool, next) = {
            let b = self.b(id);
            (b.ptr, b.size, b.stream, b.pool, b.next)
        };
        let begin = (ptr - es.base) / es.page_size;
        let end = (ptr + size - es.base).div_ceil(es.page_size);
        if begin == end {
            return Ok(false);
        }
        let mapped_ptr = es.base + begin * es.page_size;
        let mapped_size = (end - begin) * es.page_size;
        match self.device.map(mapped_ptr, mapped_size) {
            Ok(()) => {}
            Err(DeviceError::OutOfMemory) => return Ok(false),
            Err(DeviceError::Other(e)) => return Err(AllocError::Device(e)),
        }
        self.pool_mut(pool).unmapped.remove(&(stream, ptr));
        self.bm(id).mapped = true;
        if mapped_size < block_size {
            let rest = self.new_block(ptr + mapped_size, block_size - mapped_size, stream, pool);
            let expandable = self.b(id).expandable;
            {
                let r = self.bm(rest);
                r.mapped = false;
                r.expandable = expandable;
                r.prev = Some(id);
                r.next = next;
            }
            if let Some(n) = next {
                self.bm(n).prev = Some(rest);
            }
            self.bm(id).next = Some(rest);
            self.pool_mut(pool)
                .unmapped
                .insert((stream, ptr + mapped_size), rest);
            self.bm(id).size = mapped_size;
        }
        let prev = self.b(id).prev;
        self.try_merge_blocks(id, prev);
        let next = self.b(id).next;
        self.try_merge_blocks(id, next);
        self.insert_into_pool(id);

        self.reserved_total += mapped_size;
        self.stats.reserved_bytes.increase(pool.kind, mapped_size);
        self.stats.num_device_alloc += 1;
        self.record_trace(TraceAction::SegmentMap, mapped_ptr, mapped_size, stream);
        Ok(true)
    }

    fn try_allocate_expandable_block(
        &mut self,
        pool: PoolRef,
        stream: StreamId,
        size: u64,
    ) -> Result<Option<BlockId>, AllocError> {
        let Some(mut candidate) = self.find_expandable_block(pool, stream, size)? else {
            return Ok(None);
        };
        if !self.b(candidate).mapped {
            let want = self.b(candidate).size.min(size);
            if !self.map_block(candidate, want)? {
                return Ok(None);
            }
        }
        while self.b(candidate).size < size {
            let remaining = size - self.b(candidate).size;
            let Some(next) = self.b(candidate).next else {
                return Ok(None);
            };
            let want = remaining.min(self.b(next).size);
            if !self.map_block(next, want)? {
                return Ok(None);
            }
            candidate = next;
        }
        self.remove_from_pool(candidate);
        Ok(Some(candidate))
    }

    fn unmap_block(&mut self, id: BlockId) {
        let es = self.segment_of(id);
        let (ptr, size, stream, pool, prev, next) = {
            let b = self.b(id);
            (b.ptr, b.size, b.stream, b.pool, b.prev, b.next)
        };
        // Only whole pages strictly inside the free block can go.
        let begin = (ptr - es.base).div_ceil(es.page_size);
        let end = (ptr + size - es.base) / es.page_size;
        if begin >= end {
            return;
        }
        let unmapped_ptr = es.base + begin * es.page_size;
        let unmapped_size = (end - begin) * es.page_size;
        self.device.unmap(unmapped_ptr, unmapped_size);
        self.remove_from_pool(id);
        let expandable = self.b(id).expandable;

        let before = unmapped_ptr - ptr;
        if before > 0 {
            let nb = self.new_block(ptr, before, stream, pool);
            {
                let b = self.bm(nb);
                b.expandable = expandable;
                b.prev = prev;
                b.next = Some(id);
            }
            if let Some(p) = prev {
                self.bm(p).next = Some(nb);
            }
            self.bm(id).prev = Some(nb);
            self.insert_into_pool(nb);
        }
        let after = size - before - unmapped_size;
        if after > 0 {
            let na = self.new_block(unmapped_ptr + unmapped_size, after, stream, pool);
            {
                let b = self.bm(na);
                b.expandable = expandable;
                b.prev = Some(id);
                b.next = next;
            }
            if let Some(n) = next {
                self.bm(n).prev = Some(na);
            }
            self.bm(id).next = Some(na);
            self.insert_into_pool(na);
        }
        {
            let b = self.bm(id);
            b.ptr = unmapped_ptr;
            b.size = unmapped_size;
            b.mapped = false;
        }
        let prev = self.b(id).prev;
        self.try_merge_blocks(id, prev);
        let next = self.b(id).next;
        self.try_merge_blocks(id, next);
        let merged_ptr = self.b(id).ptr;
        self.pool_mut(pool)
            .unmapped
            .insert((stream, merged_ptr), id);

        self.reserved_total -= unmapped_size;
        self.stats.reserved_bytes.decrease(pool.kind, unmapped_size);
        if pool.owner != 0
            && let Some(pair) = self.pools[pool.owner as usize].as_mut()
        {
            pair.cuda_malloc_count = pair.cuda_malloc_count.saturating_sub(1);
        }
        self.stats.num_device_free += 1;
        self.record_trace(
            TraceAction::SegmentUnmap,
            unmapped_ptr,
            unmapped_size,
            stream,
        );
    }

    fn release_expandable_segment(&mut self, id: BlockId) {
        let es = self.segment_of(id);
        let (stream, pool, ptr) = {
            let b = self.b(id);
            (b.stream, b.pool, b.ptr)
        };
        self.device.release_address_range(es.base, es.va_size);
        self.pool_mut(pool).unmapped.remove(&(stream, ptr));
        if let Some(index) = self.b(id).expandable {
            self.expandable[index as usize] = None;
        }
        self.delete_block(id);
    }

    // ----------------------------------------------------------------- private pools

    /// `beginAllocateToPool`: allocations on `streams` (all when `None`) go to
    /// the private pool `id`, created on first use.
    pub fn begin_allocate_to_pool(
        &mut self,
        id: MempoolId,
        streams: Option<Vec<StreamId>>,
    ) -> Result<(), AllocError> {
        let owner = match self.pool_owner(id) {
            Some(owner) => {
                if self.captures.iter().any(|c| c.pool_owner == owner) {
                    return Err(AllocError::PoolAlreadyCapturing(id));
                }
                if let Some(p) = self.pools[owner as usize].as_mut() {
                    p.use_count += 1;
                }
                owner
            }
            None => {
                self.pools.push(Some(PoolPair {
                    id,
                    small: BlockPool::default(),
                    large: BlockPool::default(),
                    use_count: 1,
                    cuda_malloc_count: 0,
                }));
                (self.pools.len() - 1) as u32
            }
        };
        self.captures.push(Capture {
            pool_owner: owner,
            streams,
        });
        Ok(())
    }

    /// `endAllocateToPool`.
    pub fn end_allocate_to_pool(&mut self, id: MempoolId) -> Result<(), AllocError> {
        let owner = self.pool_owner(id).ok_or(AllocError::UnknownPool(id))?;
        let before = self.captures.len();
        self.captures.retain(|c| c.pool_owner != owner);
        if self.captures.len() == before {
            return Err(AllocError::UnknownPool(id));
        }
        Ok(())
    }

    /// `releasePool`: the graph using pool `id` is gone; once no graph uses
    /// it, empty_cache may return its free segments.
    pub fn release_pool(&mut self, id: MempoolId) -> Result<(), AllocError> {
        let owner = self.pool_owner(id).ok_or(AllocError::UnknownPool(id))?;
        if let Some(p) = self.pools[owner as usize].as_mut() {
            p.use_count = p.use_count.saturating_sub(1);
        }
        Ok(())
    }

    fn pool_owner(&self, id: MempoolId) -> Option<u32> {
        self.pools
            .iter()
            .enumerate()
            .skip(1)
            .find(|(_, p)| p.as_ref().is_some_and(|p| p.id == id))
            .map(|(i, _)| i as u32)
    }

    // ----------------------------------------------------------------- snapshots

    /// The segment/block layout `memory_snapshot()` would report, sorted by
    /// address; expandable segments give one entry per contiguous mapped
    /// range. Pure: records nothing. A broken block chain ends its segment
    /// early (see [`Self::layout_checked`]).
    pub fn layout(&self) -> Vec<SegmentInfo> {
        self.layout_checked().0
    }

    /// The block after `id` in its segment, or why the link is broken: the
    /// next block is dead, does not link back, or does not start where `id`
    /// ends. Addresses then only grow along a chain, so a walk that follows
    /// this ends at the segment's end.
    fn next_in_chain(&self, id: BlockId) -> Result<Option<BlockId>, String> {
        let b = self.b(id);
        let Some(next) = b.next else {
            return Ok(None);
        };
        let n = self.b(next);
        if n.alive && n.prev == Some(id) && b.ptr.checked_add(b.size) == Some(n.ptr) {
            Ok(Some(next))
        } else {
            Err(format!(
                "block {:#x} ({} bytes) links to a block at {:#x} that does not follow it",
                b.ptr, b.size, n.ptr
            ))
        }
    }

    /// [`Self::layout`], and the first broken block chain met, if any: the
    /// walk of a segment stops at a broken link or after as many blocks as
    /// the model holds, so it always ends.
    pub fn layout_checked(&self) -> (Vec<SegmentInfo>, Option<String>) {
        let mut broken = None;
        let mut out = Vec::new();
        for (index, head) in self.blocks.iter().enumerate() {
            if !head.alive || !head.mapped {
                continue;
            }
            if head.prev.is_some_and(|p| self.b(p).mapped) {
                continue;
            }
            let pool_id = self.pools[head.pool.owner as usize]
                .as_ref()
                .map_or((0, 0), |p| p.id);
            let mut seg = SegmentInfo {
                device: self.device_index,
                address: head.ptr,
                total_size: 0,
                allocated_size: 0,
                active_size: 0,
                requested_size: 0,
                stream: head.stream,
                segment_type: head.pool.kind,
                segment_pool_id: pool_id,
                is_expandable: head.expandable.is_some(),
                blocks: Vec::new(),
            };
            let mut cursor = Some(index as BlockId);
            while let Some(id) = cursor {
                let b = self.b(id);
                if !b.mapped {
                    break;
                }
                if seg.blocks.len() >= self.blocks.len() {
                    broken.get_or_insert_with(|| {
                        format!(
                            "the segment at {:#x} has more blocks than the model",
                            head.ptr
                        )
                    });
                    break;
                }
                let state = if b.allocated {
                    BlockState::ActiveAllocated
                } else if b.event_count > 0 || !b.stream_uses.is_empty() {
                    BlockState::ActivePendingFree
                } else {
                    BlockState::Inactive
                };
                seg.total_size += b.size;
                if state == BlockState::ActiveAllocated {
                    seg.allocated_size += b.size;
                }
                if state.is_active() {
                    seg.active_size += b.size;
                    seg.requested_size += b.requested_size;
                }
                seg.blocks.push(BlockInfo {
                    address: b.ptr,
                    size: b.size,
                    requested_size: b.requested_size,
                    state,
                });
                cursor = match self.next_in_chain(id) {
                    Ok(next) => next,
                    Err(why) => {
                        broken.get_or_insert(why);
                        None
                    }
                };
            }
            out.push(seg);
        }
        out.sort_by_key(|s| s.address);
        (out, broken)
    }

    /// `torch.cuda.memory._snapshot()`'s segments: the layout, plus the
    /// `snapshot` trace entry PyTorch records when one is taken.
    pub fn snapshot(&mut self) -> Vec<SegmentInfo> {
        let layout = self.layout();
        let total_active = layout.iter().map(|s| s.active_size).sum();
        self.record_trace(TraceAction::Snapshot, 0, total_active, 0);
        layout
    }

    /// Records an `annotate` trace entry (no address, no size): a mark a
    /// program puts in its trace, which the viewer's `i`/`I` step to. The
    /// model's state does not change; with history off nothing is kept.
    pub fn annotate(&mut self) {
        self.record_trace(TraceAction::Annotate, 0, 0, 0);
    }

    /// Adopts a segment that already exists on the device, with its blocks
    /// in address order as `(size, requested_size, state)`: used to start a
    /// replay from the state a snapshot recorded. Counters are raised as if
    /// the blocks had been allocated here. Pending-free blocks wait on an
    /// event of a synthetic stream of their own (see
    /// [`Self::complete_pending_free`]).
    pub fn adopt_segment(
        &mut self,
        address: u64,
        stream: StreamId,
        kind: PoolKind,
        blocks: &[(u64, u64, BlockState)],
    ) {
        let pool = PoolRef { owner: 0, kind };
        let total: u64 = blocks.iter().map(|b| b.0).sum();
        self.reserved_total += total;
        self.stats.segment.increase(kind, 1);
        self.stats.reserved_bytes.increase(kind, total);
        if total >= self.max_split() {
            self.stats.oversize_segments.increase(1);
        }
        let split = blocks.len() > 1;
        let mut ptr = address;
        let mut prev: Option<BlockId> = None;
        for &(size, requested, _) in blocks {
            let id = self.new_block(ptr, size, stream, pool);
            self.bm(id).prev = prev;
            self.bm(id).requested_size = requested;
            if let Some(p) = prev {
                self.bm(p).next = Some(id);
            }
            prev = Some(id);
            ptr += size;
        }
        // Second pass, once the links exist: place each block.
        let mut cursor = prev.map(|last| {
            let mut first = last;
            while let Some(p) = self.b(first).prev {
                first = p;
            }
            first
        });
        for &(size, requested, state) in blocks {
            let Some(id) = cursor else { break };
            cursor = self.b(id).next;
            match state {
                BlockState::Inactive => {
                    self.insert_into_pool(id);
                    if split {
                        self.stats.inactive_split.increase(kind, 1);
                        self.stats.inactive_split_bytes.increase(kind, size);
                    }
                }
                BlockState::ActiveAllocated | BlockState::ActivePendingFree => {
                    self.stats.active.increase(kind, 1);
                    self.stats.active_bytes.increase(kind, size);
                    self.stats.requested_bytes.increase(kind, requested);
                    let b_ptr = self.b(id).ptr;
                    if state == BlockState::ActiveAllocated {
                        self.bm(id).allocated = true;
                        self.active.insert(b_ptr, id);
                        self.stats.allocation.increase(kind, 1);
                        self.stats.allocated_bytes.increase(kind, size);
                        if size >= self.max_split() {
                            self.stats.oversize_allocations.increase(1);
                        }
                    } else {
                        let stream = self.fresh_synthetic_stream();
                        self.bm(id).stream_uses.push(stream);
                        self.pending_free.insert(b_ptr, id);
                        self.insert_events(id);
                    }
                }
            }
        }
    }

    /// Adopts an expandable segment that already exists on the device: its
    /// address reservation `[base, base + va_size)` cut into `page_size`
    /// pages, and its mapped ranges as `(address, blocks)` in address order,
    /// blocks as for [`Self::adopt_segment`]. The space between mapped ranges
    /// is unmapped. Counters are raised as if the pages had been mapped and
    /// the blocks allocated here (the segment count stays, as in PyTorch).
    pub fn adopt_expandable_segment(
        &mut self,
        reservation: AdoptedReservation,
        ranges: &[AdoptedRange<'_>],
    ) -> Result<(), String> {
        let AdoptedReservation {
            base,
            va_size,
            page_size,
            stream,
            kind,
        } = reservation;
        let end = base
            .checked_add(va_size)
            .ok_or_else(|| format!("reservation at {base:#x} runs past the address space"))?;
        if page_size == 0 || !va_size.is_multiple_of(page_size) {
            return Err(format!("reservation at {base:#x} is not whole pages"));
        }
        // Where each piece goes: (address, size, Some(state) = mapped).
        let mut pieces: Vec<(u64, u64, Option<AdoptedMapped>)> = Vec::new();
        let mut cursor = base;
        for &(address, blocks) in ranges {
            let size = blocks
                .iter()
                .try_fold(0u64, |acc, b| acc.checked_add(b.0))
                .ok_or_else(|| format!("mapped range at {address:#x} overflows"))?;
            let range_end = address
                .checked_add(size)
                .filter(|&e| e <= end)
                .ok_or_else(|| format!("mapped range at {address:#x} runs past its reservation"))?;
            if address < cursor
                || size == 0
                || !(address - base).is_multiple_of(page_size)
                || !size.is_multiple_of(page_size)
            {
                return Err(format!(
                    "mapped range at {address:#x} ({size} bytes) is not whole pages of the \
                     reservation at {base:#x}"
                ));
            }
            if address > cursor {
                pieces.push((cursor, address - cursor, None));
            }
            let mut at = address;
            for &(block_size, requested, state) in blocks {
                pieces.push((at, block_size, Some((requested, state))));
                at += block_size;
            }
            cursor = range_end;
        }
        if cursor < end {
            pieces.push((cursor, end - cursor, None));
        }
        let pool = PoolRef { owner: 0, kind };
        let segment_index = u32::try_from(self.expandable.len())
            .map_err(|_| "too many expandable segments".to_string())?;
        self.expandable.push(Some(ExpandableSegment {
            base,
            va_size,
            page_size,
        }));
        let mut prev: Option<BlockId> = None;
        let mut ids = Vec::with_capacity(pieces.len());
        for &(ptr, size, mapped) in &pieces {
            let id = self.new_block(ptr, size, stream, pool);
            {
                let b = self.bm(id);
                b.prev = prev;
                b.expandable = Some(segment_index);
                b.mapped = mapped.is_some();
                b.requested_size = mapped.map_or(0, |m| m.0);
            }
            if let Some(p) = prev {
                self.bm(p).next = Some(id);
            }
            prev = Some(id);
            ids.push(id);
        }
        for (&id, &(ptr, size, mapped)) in ids.iter().zip(&pieces) {
            let Some((requested, state)) = mapped else {
                self.pool_mut(pool).unmapped.insert((stream, ptr), id);
                continue;
            };
            self.reserved_total += size;
            self.stats.reserved_bytes.increase(kind, size);
            match state {
                BlockState::Inactive => self.insert_into_pool(id),
                BlockState::ActiveAllocated | BlockState::ActivePendingFree => {
                    self.stats.active.increase(kind, 1);
                    self.stats.active_bytes.increase(kind, size);
                    self.stats.requested_bytes.increase(kind, requested);
                    if state == BlockState::ActiveAllocated {
                        self.bm(id).allocated = true;
                        self.active.insert(ptr, id);
                        self.stats.allocation.increase(kind, 1);
                        self.stats.allocated_bytes.increase(kind, size);
                        if size >= self.max_split() {
                            self.stats.oversize_allocations.increase(1);
                        }
                    } else {
                        let synthetic = self.fresh_synthetic_stream();
                        self.bm(id).stream_uses.push(synthetic);
                        self.pending_free.insert(ptr, id);
                        self.insert_events(id);
                    }
                }
            }
        }
        Ok(())
    }

    // ----------------------------------------------------------------- self-check

    /// Checks the layout against every counter and structural invariant:
    /// blocks tile their segments, no two adjacent free mapped blocks, pools
    /// hold exactly the free mapped blocks, and every current statistic
    /// equals a recomputation from the layout. Used by tests and replays.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = [0u64; 2];
        let mut active = [0u64; 2];
        let mut active_bytes = [0u64; 2];
        let mut requested = [0u64; 2];
        let mut allocation = [0u64; 2];
        let mut segments = [0u64; 2];
        let mut reserved = [0u64; 2];
        let mut inactive_split = [0u64; 2];
        let mut inactive_split_bytes = [0u64; 2];
        let mut free_blocks_seen = 0usize;
        // Sizes of an adopted layout come from a file: a sum past u64 is a
        // broken layout, said as such, not an overflow.
        let add = |a: u64, b: u64| {
            a.checked_add(b)
                .ok_or_else(|| format!("byte totals overflow at {a} + {b}"))
        };
        let idx = |k: PoolKind| match k {
            PoolKind::Small => 0,
            PoolKind::Large => 1,
        };
        for (i, b) in self.blocks.iter().enumerate() {
            if !b.alive {
                continue;
            }
            let id = i as BlockId;
            let k = idx(b.pool.kind);
            if b.size % MIN_BLOCK_SIZE != 0 && b.mapped {
                return Err(format!(
                    "block {:#x} size {} not a multiple of 512",
                    b.ptr, b.size
                ));
            }
            if let Some(n) = b.next {
                let nb = self.b(n);
                if nb.prev != Some(id) || b.ptr.checked_add(b.size) != Some(nb.ptr) {
                    return Err(format!("block {:#x} and its next do not tile", b.ptr));
                }
                let free =
                    |x: &Block| !x.allocated && x.event_count == 0 && x.stream_uses.is_empty();
                if free(b) && free(nb) && b.mapped == nb.mapped {
                    return Err(format!(
                        "adjacent free blocks at {:#x} and {:#x}",
                        b.ptr, nb.ptr
                    ));
                }
            }
            if !b.mapped {
                continue;
            }
            if b.expandable.is_some() {
                reserved[k] = add(reserved[k], b.size)?;
            } else if b.prev.is_none() {
                segments[k] += 1;
                let mut total = 0u64;
                let mut c = Some(id);
                let mut steps = 0usize;
                while let Some(x) = c {
                    steps += 1;
                    if steps > self.blocks.len() {
                        return Err(format!("the segment at {:#x} never ends", b.ptr));
                    }
                    total = total.saturating_add(self.b(x).size);
                    c = self.next_in_chain(x)?;
                }
                reserved[k] = add(reserved[k], total)?;
            }
            if b.allocated {
                allocation[k] += 1;
                allocated[k] = add(allocated[k], b.size)?;
            }
            let is_active = b.allocated || b.event_count > 0 || !b.stream_uses.is_empty();
            if is_active {
                active[k] += 1;
                active_bytes[k] = add(active_bytes[k], b.size)?;
                requested[k] = add(requested[k], b.requested_size)?;
            } else {
                free_blocks_seen += 1;
                let key = (b.stream, b.size, b.ptr);
                if self.pool_ref(b.pool).blocks.get(&key) != Some(&id) {
                    return Err(format!("free block {:#x} missing from its pool", b.ptr));
                }
                if b.expandable.is_none() && (b.prev.is_some() || b.next.is_some()) {
                    inactive_split[k] += 1;
                    inactive_split_bytes[k] = add(inactive_split_bytes[k], b.size)?;
                }
            }
        }
        let pooled: usize = self
            .pools
            .iter()
            .flatten()
            .map(|p| p.small.blocks.len() + p.large.blocks.len())
            .sum();
        if pooled != free_blocks_seen {
            return Err(format!(
                "pools hold {pooled} blocks but {free_blocks_seen} are free"
            ));
        }
        let s = &self.stats;
        let checks: [(&str, &super::stats::StatArray, [u64; 2]); 8] = [
            ("allocation", &s.allocation, allocation),
            ("allocated_bytes", &s.allocated_bytes, allocated),
            ("active", &s.active, active),
            ("active_bytes", &s.active_bytes, active_bytes),
            ("requested_bytes", &s.requested_bytes, requested),
            ("segment", &s.segment, segments),
            ("reserved_bytes", &s.reserved_bytes, reserved),
            (
                "inactive_split_bytes",
                &s.inactive_split_bytes,
                inactive_split_bytes,
            ),
        ];
        for (name, array, want) in checks {
            let got = [
                array.small_pool.current,
                array.large_pool.current,
                array.all.current,
            ];
            let want = [
                want[0] as i64,
                want[1] as i64,
                add(want[0], want[1])? as i64,
            ];
            if got != want {
                return Err(format!(
                    "{name}: counters {got:?} but layout gives {want:?}"
                ));
            }
        }
        let got = [
            s.inactive_split.small_pool.current,
            s.inactive_split.large_pool.current,
        ];
        if got != [inactive_split[0] as i64, inactive_split[1] as i64] {
            return Err(format!(
                "inactive_split: counters {got:?} but layout gives {inactive_split:?}"
            ));
        }
        if self.reserved_total != add(reserved[0], reserved[1])? {
            return Err("reserved_total disagrees with the layout".to_string());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::InMemoryDevice;

    const MIB: u64 = 1 << 20;
    /// Far from the simulated device's own addresses.
    const ADOPTED_AT: u64 = 1 << 40;

    fn model(settings: &str, capacity: u64) -> CachingAllocator<InMemoryDevice> {
        let config = AllocatorConfig::parse(settings).expect("valid settings");
        CachingAllocator::new(InMemoryDevice::new(capacity), 0, config)
    }

    #[test]
    fn max_split_retry_keeps_a_split_oversize_block_in_its_segment() {
        // A start state recorded without max_split_size: a 200 MiB free
        // remainder split from a plain segment, next to a live block.
        let mut m = model("max_split_size_mb:64", 64 * MIB);
        m.adopt_segment(
            ADOPTED_AT,
            0,
            PoolKind::Large,
            &[
                (200 * MIB, 0, BlockState::Inactive),
                (20 * MIB, 20 * MIB, BlockState::ActiveAllocated),
            ],
        );
        m.check_invariants()
            .expect("the adopted segment is consistent");
        let refused = m.malloc(100 * MIB, 0);
        assert!(refused.is_err(), "nothing whole to release: {refused:?}");
        m.check_invariants()
            .expect("invariants hold after the retry");
        let layout = m.layout();
        assert_eq!(layout.len(), 1);
        assert_eq!(layout[0].blocks.len(), 2);
        assert_eq!(layout[0].total_size, 220 * MIB);
    }

    #[test]
    fn layout_stops_at_a_block_linked_back_to_its_segment_start() {
        let mut m = model("", 1 << 30);
        let blocks = [
            (2 * MIB, 2 * MIB, BlockState::ActiveAllocated),
            (4 * MIB, 0, BlockState::Inactive),
            (2 * MIB, 2 * MIB, BlockState::ActiveAllocated),
        ];
        m.adopt_segment(ADOPTED_AT, 0, PoolKind::Large, &blocks);
        let first = m.active[&ADOPTED_AT];
        let last = m.active[&(ADOPTED_AT + 6 * MIB)];
        m.bm(last).next = Some(first);
        let (layout, broken) = m.layout_checked();
        assert_eq!(layout.len(), 1);
        assert_eq!(layout[0].blocks.len(), blocks.len());
        assert!(
            broken
                .as_deref()
                .is_some_and(|why| why.contains("does not follow")),
            "{broken:?}"
        );
        assert!(m.check_invariants().is_err());
    }

    #[test]
    fn allocation_with_free_after_is_the_free_block_a_malloc_was_served_from() {
        let mut m = model("", 1 << 30);
        // 6 MiB free between two live blocks.
        m.adopt_segment(
            ADOPTED_AT,
            0,
            PoolKind::Large,
            &[
                (2 * MIB, 2 * MIB, BlockState::ActiveAllocated),
                (6 * MIB, 0, BlockState::Inactive),
                (2 * MIB, 2 * MIB, BlockState::ActiveAllocated),
            ],
        );
        let p = m.malloc(4 * MIB, 0).expect("cached");
        assert_eq!(p, ADOPTED_AT + 2 * MIB);
        // Split: 4 MiB allocated, 2 MiB free after it.
        assert_eq!(m.allocation_with_free_after(p), Some(6 * MIB));
        // The next block in use: the allocation's own size.
        assert_eq!(m.allocation_with_free_after(ADOPTED_AT), Some(2 * MIB));
        assert_eq!(m.allocation_with_free_after(ADOPTED_AT + 6 * MIB), None);
        // A freed block is no allocation.
        m.free(p).expect("live");
        assert_eq!(m.allocation_with_free_after(p), None);
    }
}
