//! The opcode loop: runs a pickle's data opcodes into an arena of mutable
//! containers (see the module documentation of `pickle`).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustc_hash::{FxHashMap, FxHasher};

use super::error::{
    PickleError, internal, sanitize, too_deep, underflow, with_article, wrong_target,
};
use super::opcodes::{op, opcode_name};
use super::value::Value;
use super::{Limits, PROGRESS_STEP, memory_exceeded_detail};

/// Bytes charged per value pushed: its 8-byte slot, doubled for the slack
/// of a growing vector.
pub(super) const ITEM_CHARGE: u64 = 2 * std::mem::size_of::<Item>() as u64;
/// Bytes charged per container, on top of its slot (same slack).
pub(super) const NODE_CHARGE: u64 = 2 * std::mem::size_of::<Node>() as u64;

/// Most keys a [`NodeKind::Record`] has, and most key sets a parse keeps:
/// a snapshot has a handful (trace entries, frames, blocks, segments), a
/// hand-made file with fresh keys in every dict gets plain dicts.
const MAX_RECORD_KEYS: usize = 64;
const MAX_KEY_SETS: usize = 4096;

/// Items CPython's pickler writes per APPENDS or SETITEMS: a container
/// with more is written in several batches.
const PICKLER_BATCH: usize = 1000;

/// An arena index.
pub(super) type NodeId = u32;

/// An index into the scalar table.
pub(super) type ScalarId = u32;

/// A stack, memo or container entry during parsing: a small scalar inline, a
/// larger scalar in the scalar table, or a (possibly still growing)
/// container in the arena. Eight bytes and `Copy`, so the memo fetches that
/// dominate real snapshots copy a handle instead of touching reference
/// counts, and containers are cheap to fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Item {
    None,
    Bool(bool),
    /// Most ints in a snapshot (BININT, BININT1, BININT2) fit.
    SmallInt(i32),
    /// An int that fits `i64` but not `i32` (addresses, timestamps: two
    /// per trace entry), in [`Scalars::ints`].
    WideInt(ScalarId),
    /// Any other scalar, in [`Scalars::values`].
    Scalar(ScalarId),
    Node(NodeId),
}

impl Item {
    /// The item as one word, distinct for distinct items: tag in the high
    /// half, payload in the low half.
    fn word(self) -> u64 {
        let (tag, payload) = match self {
            Item::None => (0u64, 0u32),
            Item::Bool(b) => (1, u32::from(b)),
            Item::SmallInt(i) => (2, i as u32),
            Item::Scalar(id) => (3, id),
            Item::Node(id) => (4, id),
            Item::WideInt(id) => (5, id),
        };
        (tag << 32) | u64::from(payload)
    }
}

/// The hash of a list's items for [`Parser::intern`], which runs for every
/// completed list (millions in a large snapshot). One multiply per item,
/// in two independent lanes so the multiplies overlap (the derived `Hash`
/// with `FxHasher` costs two dependent multiplies per item). Collisions
/// only cost a comparison: interning checks equality before sharing.
fn hash_items(items: &[Item]) -> u64 {
    const K: u64 = 0xf135_7aea_2e62_a9c5;
    let mut lanes = [items.len() as u64, 0x9e37_79b9_7f4a_7c15];
    let mut pairs = items.chunks_exact(2);
    for pair in &mut pairs {
        for (lane, item) in lanes.iter_mut().zip(pair) {
            *lane = (lane.rotate_left(26) ^ item.word()).wrapping_mul(K);
        }
    }
    if let [last] = pairs.remainder() {
        lanes[0] = (lanes[0].rotate_left(26) ^ last.word()).wrapping_mul(K);
    }
    let mut hasher = FxHasher::default();
    lanes.hash(&mut hasher);
    hasher.finish()
}

/// Scalars too big to sit in an [`Item`]. Ints that fit `i64` get their
/// own table (8 bytes each instead of a 32-byte [`Value`]): a snapshot has
/// two per trace entry, tens of millions in a 1 GB file.
#[derive(Debug, Default)]
pub(super) struct Scalars {
    pub(super) values: Vec<Value>,
    pub(super) ints: Vec<i64>,
    /// The keys of [`NodeKind::Record`]s, each set stored once.
    pub(super) key_sets: Vec<Box<[Item]>>,
    /// The values of every [`NodeKind::Record`], one after another: one
    /// vector for the millions of trace entries and frames of a large
    /// snapshot, not one allocation (and one free) each.
    pub(super) record_values: Vec<Item>,
}

impl Scalars {
    /// The values of a record stored at `start`, `len` of them.
    pub(super) fn record(&self, start: u32, len: u32) -> &[Item] {
        let start = start as usize;
        self.record_values
            .get(start..start.saturating_add(len as usize))
            .unwrap_or_default()
    }

    /// [`Scalars::record`], to change in place.
    pub(super) fn record_mut(&mut self, start: u32, len: u32) -> &mut [Item] {
        let start = start as usize;
        self.record_values
            .get_mut(start..start.saturating_add(len as usize))
            .unwrap_or_default()
    }

    /// The value of an [`Item::WideInt`] or [`Item::Scalar`].
    pub(super) fn value(&self, item: Item) -> Option<Value> {
        match item {
            Item::WideInt(id) => self.ints.get(id as usize).map(|&i| Value::Int(i.into())),
            Item::Scalar(id) => self.values.get(id as usize).cloned(),
            _ => None,
        }
    }
}

#[derive(Debug)]
pub(super) enum NodeKind {
    List(Vec<Item>),
    Tuple(Vec<Item>),
    Dict(Vec<(Item, Item)>),
    /// A dict filled by one SETITEMS with keys (no containers) another
    /// such dict had in the same order: the keys are stored once, in
    /// [`Scalars::key_sets`] at `keys`, and its values are `len` items
    /// of [`Scalars::record_values`] from `start`. Every trace entry and
    /// frame of a snapshot is one: half the memory of their pairs.
    Record {
        keys: u32,
        start: u32,
        len: u32,
    },
    /// A completed list whose items equal those of an earlier completed
    /// list: its items were dropped and every reference goes to that one
    /// (see [`Parser::intern`]).
    Alias(NodeId),
}

impl NodeKind {
    pub(super) fn type_name(&self) -> &'static str {
        match self {
            NodeKind::List(_) => "list",
            NodeKind::Tuple(_) => "tuple",
            NodeKind::Dict(_) | NodeKind::Record { .. } => "dict",
            NodeKind::Alias(_) => "list",
        }
    }

    /// Children in order, a dict's as key, value, key, value, … (a
    /// record's values only, from `scalars`: its keys are no containers).
    pub(super) fn child<'s>(&'s self, index: usize, scalars: &'s Scalars) -> Option<&'s Item> {
        match self {
            NodeKind::List(items) | NodeKind::Tuple(items) => items.get(index),
            &NodeKind::Record { start, len, .. } => scalars.record(start, len).get(index),
            NodeKind::Dict(pairs) => pairs
                .get(index / 2)
                .map(|(k, v)| if index.is_multiple_of(2) { k } else { v }),
            NodeKind::Alias(_) => None,
        }
    }
}

#[derive(Debug)]
pub(super) struct Node {
    /// What the node holds. Its height and whether it is a completed list
    /// are in the parser's [`NodeMeta`] table: a node is its 32-byte kind
    /// alone (millions of nodes in a large snapshot).
    pub(super) kind: NodeKind,
}

/// A dict node's pairs, however it stores them.
#[derive(Debug, Clone, Copy)]
pub(super) enum DictView<'k> {
    Pairs(&'k [(Item, Item)]),
    /// A record's key set (its index in [`Scalars::key_sets`]), keys and
    /// values.
    Record(u32, &'k [Item], &'k [Item]),
}

impl<'k> DictView<'k> {
    /// The pairs of `kind`, if it is a dict.
    #[inline]
    pub(super) fn of(kind: &'k NodeKind, scalars: &'k Scalars) -> Option<Self> {
        match kind {
            NodeKind::Dict(pairs) => Some(DictView::Pairs(pairs)),
            &NodeKind::Record { keys, start, len } => {
                let set = scalars.key_sets.get(keys as usize)?;
                Some(DictView::Record(keys, set, scalars.record(start, len)))
            }
            _ => None,
        }
    }

    pub(super) fn len(self) -> usize {
        match self {
            DictView::Pairs(pairs) => pairs.len(),
            DictView::Record(_, keys, values) => keys.len().min(values.len()),
        }
    }

    #[inline]
    pub(super) fn pair(self, index: usize) -> Option<(Item, Item)> {
        match self {
            DictView::Pairs(pairs) => pairs.get(index).copied(),
            DictView::Record(_, keys, values) => Some((*keys.get(index)?, *values.get(index)?)),
        }
    }

    /// The pairs in order.
    pub(super) fn pairs(self) -> impl DoubleEndedIterator<Item = (Item, Item)> + 'k {
        (0..self.len()).filter_map(move |i| self.pair(i))
    }
}

/// Two bytes per arena node: its nesting height as far as parsing can tell
/// (1 + the tallest child when it was added; a child that grows later is
/// not propagated, the freeze measures the exact height), saturated at
/// [`NodeMeta::HEIGHT`] (then in [`Parser::tall_heights`]); whether it is an
/// alias; and whether it is a list not yet interned (an interned one is
/// canonical: other lists may alias it, and mutating it is not allowed
/// while interning).
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeMeta(u16);

impl NodeMeta {
    const HEIGHT: u16 = 0x3fff;
    const ALIAS: u16 = 1 << 14;
    const OPEN_LIST: u16 = 1 << 15;

    fn new(list: bool) -> Self {
        NodeMeta(if list { Self::OPEN_LIST } else { 0 })
    }

    fn height(self) -> u16 {
        self.0 & Self::HEIGHT
    }

    fn set_height(&mut self, height: u32) {
        let height = u16::try_from(height).map_or(Self::HEIGHT, |h| h.min(Self::HEIGHT));
        self.0 = (self.0 & !Self::HEIGHT) | height;
    }

    fn is_open_list(self) -> bool {
        self.0 & Self::OPEN_LIST != 0
    }

    fn make_alias(&mut self) {
        self.0 = (self.0 & !Self::OPEN_LIST) | Self::ALIAS;
    }

    fn close_list(&mut self) {
        self.0 &= !Self::OPEN_LIST;
    }
}

/// CPython's memo: a dict from index to object. Pickles number their memo
/// entries 0, 1, 2, … so those live in a vector; any other index (only a
/// hand-made file would use one) goes to a map, so a huge `LONG_BINPUT`
/// index cannot make us allocate a huge vector. Invariant: every key in
/// `sparse` is greater than `dense.len()`.
#[derive(Debug, Default)]
struct Memo {
    dense: Vec<Item>,
    sparse: HashMap<u64, Item>,
    /// Bumped whenever an entry is replaced (CPython's pickler never does):
    /// what was read through the memo before may then read differently.
    generation: u64,
}

impl Memo {
    fn len(&self) -> usize {
        self.dense.len() + self.sparse.len()
    }

    #[inline]
    fn put(&mut self, index: u64, item: Item) {
        let dense_len = self.dense.len() as u64;
        if index < dense_len {
            if let Some(slot) = usize::try_from(index)
                .ok()
                .and_then(|i| self.dense.get_mut(i))
            {
                *slot = item;
            }
            self.generation += 1;
        } else if index == dense_len {
            self.dense.push(item);
            // Only a hand-made memo has sparse entries; skip hashing otherwise.
            while !self.sparse.is_empty()
                && let Some(next) = self.sparse.remove(&(self.dense.len() as u64))
            {
                self.dense.push(next);
            }
        } else if self.sparse.insert(index, item).is_some() {
            self.generation += 1;
        }
    }

    #[inline]
    fn get(&self, index: u64) -> Option<&Item> {
        match usize::try_from(index).ok().and_then(|i| self.dense.get(i)) {
            Some(item) => Some(item),
            None => self.sparse.get(&index),
        }
    }
}

/// The parse of one input, which may arrive in pieces (see
/// [`Parser::with_data`]): `'a` is the limits' and progress' lifetime, `'d`
/// the current piece's.
pub(super) struct Parser<'a, 'd> {
    /// The current piece of the input, starting at byte `base` of it.
    data: &'d [u8],
    /// Position in `data` (add `base` for the input's byte offset).
    pos: usize,
    base: usize,
    /// The whole input's length, for messages.
    input_len: usize,
    /// More input follows `data`: its end pauses [`Parser::run_piece`]
    /// instead of being a missing STOP.
    pub(super) more_input: bool,
    limits: &'a Limits,
    stack: Vec<Item>,
    /// Stack lengths at each open MARK (CPython's metastack). Operations pop
    /// only from the frame above the innermost mark.
    marks: Vec<usize>,
    memo: Memo,
    pub(super) arena: Vec<Node>,
    /// Scalars that do not fit in an [`Item`].
    pub(super) scalars: Scalars,
    pushed: u64,
    /// Estimated bytes of the values built so far, and the most allowed.
    pub(super) memory_used: u64,
    pub(super) memory_budget: u64,
    /// Where to publish the parse position, and the position that triggers
    /// the next store.
    progress: Option<&'a AtomicU64>,
    next_progress: usize,
    /// The input offset from which the opcode loop next looks at progress
    /// and the stop key: one compare per opcode instead of one per check
    /// (0 while a stop key is set, which is checked at every opcode).
    next_check: usize,
    /// Share completed lists with equal items (see [`Parser::intern`]).
    pub(super) intern: bool,
    /// Canonical completed lists by the hash of their items.
    interned: FxHashMap<u64, NodeId>,
    /// The heights of nodes [`NodeMeta`] cannot hold (only under a depth
    /// limit above 16,382).
    tall_heights: FxHashMap<NodeId, u32>,
    /// Set when the input mutates a completed list: the parse is then
    /// redone without interning.
    pub(super) intern_broken: bool,
    /// Per arena node, what the hot paths ask of it (see [`NodeMeta`]):
    /// `resolve` runs for every memo fetch and the frames of a traceback
    /// are fetched by the million, and two bytes a node stay in cache where
    /// the arena's 40-byte nodes do not.
    meta: Vec<NodeMeta>,
    /// Stop once this string is pushed as the next key of the top-level
    /// dict, the pairs before it set into that dict (see
    /// [`Parser::pushed_top_level_key`]); `stopped` says it happened.
    stop_before_top_level_key: Option<&'static str>,
    pub(super) stopped: bool,
    /// The data is the beginning of a longer input: a FRAME may run past
    /// its end (an opcode that does is still truncated).
    pub(super) input_is_prefix: bool,
    /// The items of [`Parser::append_memo_run`] and the keys of
    /// [`Parser::record_keys`], reused.
    memo_run: Vec<Item>,
    /// Record key sets by the hash of their keys, and the last one used.
    key_set_ids: FxHashMap<u64, u32>,
    last_key_set: Option<u32>,
    /// Tracebacks by their bytes (see [`RunCache`]).
    run_cache: RunCache,
    /// The list the last EMPTY_LIST made, while it may still be reclaimed
    /// (see [`Parser::reclaim_fresh_alias`]).
    newest_empty_list: Option<NewestList>,
}

/// Where the parse stood just after an EMPTY_LIST made list `id`: what
/// [`Parser::reclaim_fresh_alias`] checks to know that the list has no
/// other reference than the stack's top and one memo entry.
#[derive(Debug, Clone, Copy)]
struct NewestList {
    id: NodeId,
    /// The EMPTY_LIST's byte offset in the input.
    offset: usize,
    /// The stack's length with the list on top.
    stack_len: usize,
    memo_len: usize,
    memo_generation: u64,
}

/// The canonical list each `MARK (BINGET|LONG_BINGET)* APPENDS` span of
/// bytes filled, so that the same span again (the same traceback written
/// again: most of a long recording) is an alias without a memo fetch.
/// Valid while the memo is not rewritten (see [`Memo::generation`]).
#[derive(Debug, Default)]
struct RunCache {
    /// By a hash of the span: the span kept.
    by_hash: FxHashMap<u64, KeptSpan>,
    /// By the first [`RunCache::PREFIX_BYTES`] of input where a span began
    /// (its own bytes, and for a short span what followed it): the last
    /// span kept or found there. Found without a walk over the opcodes
    /// to the span's end (see [`RunCache::find`]).
    by_prefix: FxHashMap<u128, KeptSpan>,
    spans: Vec<u8>,
    generation: u64,
}

/// A span of fetches kept in [`RunCache::spans`] and the canonical list it
/// filled.
#[derive(Debug, Clone, Copy)]
struct KeptSpan {
    canonical: NodeId,
    start: u32,
    len: u32,
    /// Its fetches (BINGET or LONG_BINGET opcodes).
    count: u32,
}

impl RunCache {
    /// Bytes of spans, and spans, kept at most: past these, no new span is
    /// kept (a few thousand distinct tracebacks in a real recording).
    const MAX_SPAN_BYTES: usize = 16 << 20;
    const MAX_SPANS: usize = 1 << 18;
    /// Bytes of input that key [`RunCache::by_prefix`]: three to eight
    /// fetches, which tell most tracebacks apart.
    const PREFIX_BYTES: usize = 16;

    fn hash(span: &[u8]) -> u64 {
        let mut hasher = FxHasher::default();
        span.hash(&mut hasher);
        hasher.finish()
    }

    /// The [`RunCache::by_prefix`] key of the input at `pos`.
    fn prefix(data: &[u8], pos: usize) -> Option<u128> {
        let end = pos.checked_add(Self::PREFIX_BYTES)?;
        let bytes: [u8; Self::PREFIX_BYTES] = data.get(pos..end)?.try_into().ok()?;
        Some(u128::from_le_bytes(bytes))
    }

    fn bytes(&self, kept: &KeptSpan) -> Option<&[u8]> {
        let start = kept.start as usize;
        self.spans.get(start..start.checked_add(kept.len as usize)?)
    }

    /// The canonical list `span` filled before, if the memo is unchanged.
    fn get(&self, span: &[u8], hash: u64, generation: u64) -> Option<KeptSpan> {
        if generation != self.generation {
            return None;
        }
        let kept = self.by_hash.get(&hash)?;
        (self.bytes(kept)? == span).then_some(*kept)
    }

    /// A kept span that the input at `pos` repeats, followed by an APPENDS,
    /// if the memo is unchanged: what [`Parser::memo_run_span`] and
    /// [`RunCache::get`] would find there, since the same bytes are the
    /// same opcodes, without walking them one by one (a walk whose every
    /// step waits on the byte before it). `None` says nothing: the caller
    /// then takes that way.
    fn find(&self, data: &[u8], pos: usize, generation: u64) -> Option<(KeptSpan, usize)> {
        if generation != self.generation {
            return None;
        }
        let kept = self.by_prefix.get(&Self::prefix(data, pos)?)?;
        let end = pos.checked_add(kept.len as usize)?;
        (data.get(pos..end)? == self.bytes(kept)? && data.get(end) == Some(&op::APPENDS))
            .then_some((*kept, end))
    }

    /// Makes `kept`, found by its hash, the one found by the input's
    /// prefix at `pos` (two tracebacks that begin alike take turns).
    fn found_at(&mut self, data: &[u8], pos: usize, kept: KeptSpan) {
        let Some(prefix) = Self::prefix(data, pos) else {
            return;
        };
        let room = self.by_prefix.len() < Self::MAX_SPANS;
        match self.by_prefix.entry(prefix) {
            Entry::Occupied(mut slot) => {
                slot.insert(kept);
            }
            Entry::Vacant(slot) if room => {
                slot.insert(kept);
            }
            Entry::Vacant(_) => {}
        }
    }

    /// Keeps the span `data[pos..end]` of `count` fetches, which filled
    /// `canonical`.
    fn insert(
        &mut self,
        data: &[u8],
        (pos, end): (usize, usize),
        (hash, count): (u64, u64),
        generation: u64,
        canonical: NodeId,
    ) {
        if generation != self.generation {
            self.by_hash.clear();
            self.by_prefix.clear();
            self.spans.clear();
            self.generation = generation;
        }
        let Some(span) = data.get(pos..end) else {
            return;
        };
        if self.spans.len() + span.len() > Self::MAX_SPAN_BYTES
            || self.by_hash.len() >= Self::MAX_SPANS
        {
            return;
        }
        let (Ok(start), Ok(len), Ok(count)) = (
            u32::try_from(self.spans.len()),
            u32::try_from(span.len()),
            u32::try_from(count),
        ) else {
            return;
        };
        self.spans.extend_from_slice(span);
        let kept = KeptSpan {
            canonical,
            start,
            len,
            count,
        };
        self.by_hash.entry(hash).or_insert(kept);
        if let Some(prefix) = Self::prefix(data, pos) {
            self.by_prefix.entry(prefix).or_insert(kept);
        }
    }
}

impl<'a, 'd> Parser<'a, 'd> {
    pub(super) fn new(data: &'d [u8], limits: &'a Limits) -> Self {
        Parser {
            data,
            pos: 0,
            base: 0,
            input_len: data.len(),
            more_input: false,
            limits,
            stack: Vec::with_capacity(64),
            marks: Vec::with_capacity(16),
            memo: Memo::default(),
            arena: Vec::new(),
            scalars: Scalars::default(),
            pushed: 0,
            memory_used: 0,
            memory_budget: limits.memory_budget(data.len() as u64),
            progress: None,
            // No progress to publish until one is set.
            next_progress: usize::MAX,
            next_check: usize::MAX,
            intern: false,
            interned: FxHashMap::default(),
            tall_heights: FxHashMap::default(),
            meta: Vec::new(),
            intern_broken: false,
            stop_before_top_level_key: None,
            stopped: false,
            input_is_prefix: false,
            memo_run: Vec::new(),
            key_set_ids: FxHashMap::default(),
            last_key_set: None,
            run_cache: RunCache::default(),
            newest_empty_list: None,
        }
    }

    /// The same parse, going on with `data`, the piece of the input that
    /// starts at byte `base`; the state (stack, memo, arena, limits) carries
    /// over. The previous piece is no longer borrowed.
    pub(super) fn with_data<'e>(self, data: &'e [u8], base: usize) -> Parser<'a, 'e> {
        Parser {
            data,
            pos: 0,
            base,
            input_len: self.input_len,
            more_input: self.more_input,
            limits: self.limits,
            stack: self.stack,
            marks: self.marks,
            memo: self.memo,
            arena: self.arena,
            scalars: self.scalars,
            pushed: self.pushed,
            memory_used: self.memory_used,
            memory_budget: self.memory_budget,
            progress: self.progress,
            next_progress: self.next_progress,
            next_check: self.next_check,
            intern: self.intern,
            interned: self.interned,
            tall_heights: self.tall_heights,
            intern_broken: self.intern_broken,
            meta: self.meta,
            stop_before_top_level_key: self.stop_before_top_level_key,
            stopped: self.stopped,
            input_is_prefix: self.input_is_prefix,
            memo_run: self.memo_run,
            key_set_ids: self.key_set_ids,
            last_key_set: self.last_key_set,
            run_cache: self.run_cache,
            newest_empty_list: self.newest_empty_list,
        }
    }

    /// Publishes the parse position to `progress` as the parse goes.
    pub(super) fn set_progress(&mut self, progress: Option<&'a AtomicU64>) {
        self.progress = progress;
        self.next_progress = if progress.is_some() {
            PROGRESS_STEP
        } else {
            usize::MAX
        };
        self.next_check = self.next_check_offset();
    }

    /// Stops the parse once `key` is pushed as the next key of the
    /// top-level dict (see [`Parser::pushed_top_level_key`]).
    pub(super) fn stop_before_top_level_key(&mut self, key: &'static str) {
        self.stop_before_top_level_key = Some(key);
        self.next_check = self.next_check_offset();
    }

    /// Where the opcode loop next has something to check: every opcode
    /// while a stop key is set, else the next progress store, else never.
    fn next_check_offset(&self) -> usize {
        if self.stop_before_top_level_key.is_some() {
            0
        } else if self.progress.is_some() {
            self.next_progress
        } else {
            usize::MAX
        }
    }

    /// Sets the whole input's length (the first piece's by default), for
    /// messages and the memory budget.
    pub(super) fn set_input_len(&mut self, input_len: usize) {
        self.input_len = input_len;
        self.memory_budget = self.limits.memory_budget(input_len as u64);
    }

    /// The node an item stands for, through an alias.
    #[inline]
    fn resolve(&self, item: Item) -> Item {
        match item {
            Item::Node(id) if self.is_aliased(id) => {
                match self.arena.get(id as usize).map(|n| &n.kind) {
                    Some(NodeKind::Alias(canonical)) => Item::Node(*canonical),
                    _ => item,
                }
            }
            other => other,
        }
    }

    /// Whether node `id` was made an alias (see [`Parser::meta`]).
    #[inline]
    fn is_aliased(&self, id: NodeId) -> bool {
        self.meta
            .get(id as usize)
            .is_some_and(|m| m.0 & NodeMeta::ALIAS != 0)
    }

    fn meta_mut(&mut self, id: NodeId) -> Option<&mut NodeMeta> {
        self.meta.get_mut(id as usize)
    }

    /// Whether node `id` is a completed (interned) list.
    fn is_canonical(&self, id: NodeId) -> bool {
        matches!(
            self.arena.get(id as usize).map(|n| &n.kind),
            Some(NodeKind::List(_))
        ) && self
            .meta
            .get(id as usize)
            .is_some_and(|m| !m.is_open_list())
    }

    /// Node `id`'s height (see [`NodeMeta`]).
    fn node_height(&self, id: NodeId) -> u32 {
        match self.meta.get(id as usize).map(|m| m.height()) {
            Some(height) if height < NodeMeta::HEIGHT => u32::from(height),
            Some(_) => self
                .tall_heights
                .get(&id)
                .copied()
                .unwrap_or(u32::from(NodeMeta::HEIGHT)),
            None => 0,
        }
    }

    /// Raises node `id`'s height to `height` if it is lower.
    fn raise_height(&mut self, id: NodeId, height: u32) {
        // One look at the node's meta where its height fits there (every
        // trace entry's dict and traceback come through here).
        if let Some(meta) = self.meta.get_mut(id as usize)
            && meta.height() < NodeMeta::HEIGHT
            && height < u32::from(NodeMeta::HEIGHT)
        {
            if u32::from(meta.height()) < height {
                meta.set_height(height);
            }
            return;
        }
        if height <= self.node_height(id) {
            return;
        }
        if let Some(meta) = self.meta.get_mut(id as usize) {
            meta.set_height(height);
        }
        if height >= u32::from(NodeMeta::HEIGHT) {
            self.tall_heights.insert(id, height);
        }
    }

    /// Called when the list `id` is moved into a container (APPEND(S),
    /// SETITEM(S)): CPython's pickler has then written all of it and never
    /// touches it again. If an earlier completed list has the same items,
    /// `id` becomes an alias of it and its items are dropped.
    ///
    /// PyTorch builds a new traceback list for every allocation from a few
    /// hundred cached frame objects: millions of lists with a few hundred
    /// distinct contents. Sharing them keeps a large snapshot's parse within
    /// a small multiple of the file size. Observable only through
    /// [`Value::identity`] (equal lists may now share an allocation); if the
    /// input does mutate a completed list (CPython's pickler never does),
    /// the parse is redone without interning, so results stay exact.
    fn intern(&mut self, id: NodeId) -> NodeId {
        let Some(node) = self.arena.get(id as usize) else {
            return id;
        };
        let NodeKind::List(items) = &node.kind else {
            return id;
        };
        if self.is_canonical(id) {
            return id;
        }
        let hash = hash_items(items);
        let same = self.interned.get(&hash).copied().filter(|&c| {
            c != id
                && matches!(self.arena.get(c as usize).map(|n| &n.kind),
                    Some(NodeKind::List(other)) if other == items)
        });
        match same {
            Some(canonical) => {
                if let Some(node) = self.arena.get_mut(id as usize) {
                    node.kind = NodeKind::Alias(canonical);
                }
                if let Some(meta) = self.meta_mut(id) {
                    meta.make_alias();
                }
                canonical
            }
            None => {
                self.interned.entry(hash).or_insert(id);
                if let Some(meta) = self.meta_mut(id) {
                    meta.close_list();
                }
                id
            }
        }
    }

    pub(super) fn run(&mut self) -> Result<Item, PickleError> {
        self.run_piece()?.ok_or(PickleError::MissingStop {
            end: self.input_end(),
        })
    }

    /// Runs the opcodes of the current piece: the root at STOP, `None` at
    /// the end of a piece that more input follows.
    pub(super) fn run_piece(&mut self) -> Result<Option<Item>, PickleError> {
        loop {
            let at = self.pos;
            let offset = self.base + at;
            if offset >= self.next_check {
                if let Some(key) = self.stop_before_top_level_key
                    && self.pushed_top_level_key(key)
                {
                    return self.stop_at_top_level_key(offset).map(Some);
                }
                if offset >= self.next_progress
                    && let Some(progress) = self.progress
                {
                    progress.store(offset as u64, Ordering::Relaxed);
                    self.next_progress = offset + PROGRESS_STEP;
                    self.next_check = self.next_check_offset();
                }
            }
            let Some(&code) = self.data.get(at) else {
                if self.more_input {
                    return Ok(None);
                }
                return Err(PickleError::MissingStop {
                    end: self.input_end(),
                });
            };
            self.pos += 1;
            if code == op::STOP {
                let root = self.pop("STOP", offset)?;
                return Ok(Some(self.resolve(root)));
            }
            // The memo opcodes are most of a snapshot: handled here, before
            // the full dispatch (same semantics as in `step`).
            match (code, self.data.get(self.pos)) {
                (op::BINGET, Some(&index)) => {
                    self.pos += 1;
                    self.push_memo(index.into(), "BINGET", offset)?;
                }
                (op::BINPUT, Some(&index)) => {
                    self.pos += 1;
                    let top = *self.top("BINPUT", offset)?;
                    self.memo.put(index.into(), top);
                }
                (op::LONG_BINGET, Some(_)) => {
                    let index = u32::from_le_bytes(self.take_array::<4>("LONG_BINGET", offset)?);
                    self.push_memo(index.into(), "LONG_BINGET", offset)?;
                }
                (op::MEMOIZE, _) => {
                    let top = *self.top("MEMOIZE", offset)?;
                    let index = self.memo.len() as u64;
                    self.memo.put(index, top);
                }
                (op::MARK, _) => {
                    if !self.append_memo_run() {
                        self.marks.push(self.stack.len());
                    }
                }
                // A trace entry's address and time, 1 to 8 bytes with the 8
                // from the first in this piece: read as `step` would.
                (op::LONG1, Some(&len))
                    if (1..=8).contains(&len) && self.data.len().saturating_sub(self.pos) > 8 =>
                {
                    let (int, end) = self.short_long1(len);
                    self.pos = end;
                    self.push_i64(int)?;
                }
                _ => self.step(code, offset)?,
            }
        }
    }

    /// The int of the LONG1 of `len` bytes (1 to 8) whose length byte is at
    /// `self.pos`, the 8 bytes from its first in this piece (the caller
    /// checked both), and the position after it.
    #[inline]
    fn short_long1(&self, len: u8) -> (i64, usize) {
        let first = self.pos + 1;
        let word = self
            .data
            .get(first..first + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            .map_or(0, u64::from_le_bytes);
        (
            sign_extended(word, usize::from(len)),
            first + usize::from(len),
        )
    }

    /// An int that fits `i64`: in its item when it fits `i32` (most of a
    /// snapshot's), else in the ints table.
    #[inline(always)]
    fn push_i64(&mut self, int: i64) -> Result<(), PickleError> {
        match i32::try_from(int) {
            Ok(small) => self.push(Item::SmallInt(small)),
            Err(_) => {
                let id = self.scalar_id(self.scalars.ints.len())?;
                self.scalars.ints.push(int);
                self.push(Item::WideInt(id))
            }
        }
    }

    /// Runs `MARK (BINGET | LONG_BINGET)* APPENDS` onto a list at the top of
    /// the stack in one go, `self.pos` just after the MARK: the way CPython
    /// writes every traceback of a snapshot (a fresh list of memoised
    /// frames), most of a large file's opcodes. The items go straight into
    /// the list instead of through the stack. Exactly what the opcodes one
    /// by one would do, or nothing (`false`, nothing consumed) when any part
    /// differs from the common case (a missing memo entry, a list item that
    /// would be interned, a limit reached, another opcode): the generic path
    /// then runs the same bytes and reports what it finds. A fresh list
    /// whose bytes filled an earlier list becomes its alias without a fetch
    /// (see [`RunCache`]).
    fn append_memo_run(&mut self) -> bool {
        let mark_offset = (self.base + self.pos).checked_sub(1);
        let done = self.fill_from_memo_run();
        if done && let Some(mark_offset) = mark_offset {
            self.reclaim_fresh_alias(mark_offset);
        }
        done
    }

    /// A fresh list that [`Parser::append_memo_run`] just made an alias is
    /// dropped from the arena, its two references (the stack's top, the
    /// memo entry) pointed at the list it aliases: every fetch resolves an
    /// alias to that list anyway, and a large snapshot has one such
    /// traceback list per trace entry (32 bytes of arena each, a third of
    /// the arena). Done only where the bytes were exactly `EMPTY_LIST
    /// MEMOIZE MARK …` (how CPython writes every traceback), so nothing
    /// else can refer to it: the list is the newest node, the stack is as
    /// the EMPTY_LIST left it, and the memo grew by that one entry only.
    fn reclaim_fresh_alias(&mut self, mark_offset: usize) {
        let Some(newest) = self.newest_empty_list.take() else {
            return;
        };
        let target = newest.id;
        let Some(NodeKind::Alias(canonical)) = self.arena.last().map(|n| &n.kind) else {
            return;
        };
        let canonical = *canonical;
        let only_references = newest.offset.checked_add(2) == Some(mark_offset)
            && target as usize + 1 == self.arena.len()
            && self.stack.len() == newest.stack_len
            && self.stack.last() == Some(&Item::Node(target))
            && self.memo.sparse.is_empty()
            && self.memo.generation == newest.memo_generation
            && self.memo.dense.len() == newest.memo_len + 1
            && self.memo.dense.last() == Some(&Item::Node(target))
            && !self.tall_heights.contains_key(&target);
        if !only_references {
            return;
        }
        if let Some(top) = self.stack.last_mut() {
            *top = Item::Node(canonical);
        }
        if let Some(entry) = self.memo.dense.last_mut() {
            *entry = Item::Node(canonical);
        }
        self.arena.pop();
        self.meta.pop();
    }

    /// [`Parser::append_memo_run`] but for reclaiming the list it aliased.
    fn fill_from_memo_run(&mut self) -> bool {
        let Some(&Item::Node(target)) = self.stack.last() else {
            return false;
        };
        if self.stack.len() <= self.frame_base() {
            return false;
        }
        let open = self
            .meta
            .get(target as usize)
            .is_some_and(|m| m.is_open_list());
        let fresh = match self.arena.get(target as usize).map(|n| &n.kind) {
            Some(NodeKind::List(list)) if open => list.is_empty(),
            _ => return false,
        };
        // A traceback's bytes seen before: the same list (see RunCache).
        let mut cache_key = None;
        if self.intern && fresh {
            if let Some((kept, end)) =
                self.run_cache
                    .find(self.data, self.pos, self.memo.generation)
                && self.alias_cached_run(target, kept.canonical, kept.count.into(), end)
            {
                return true;
            }
            if let Some((end, count)) = self.memo_run_span()
                && count > 0
                && count < PICKLER_BATCH as u64
                && let Some(span) = self.data.get(self.pos..end)
            {
                let hash = RunCache::hash(span);
                if let Some(kept) = self.run_cache.get(span, hash, self.memo.generation)
                    && self.alias_cached_run(target, kept.canonical, count, end)
                {
                    // `alias_cached_run` moved `self.pos` past the span.
                    let at = end - span.len();
                    self.run_cache.found_at(self.data, at, kept);
                    return true;
                }
                cache_key = Some((hash, end, count));
            }
        }
        let start = self.pos;
        let mut run = std::mem::take(&mut self.memo_run);
        run.clear();
        let mut pos = self.pos;
        let mut tallest = 0u32;
        let complete = loop {
            let (index, width) = match self.data.get(pos) {
                Some(&op::BINGET) => match self.data.get(pos + 1) {
                    Some(&index) => (u64::from(index), 2),
                    None => break false,
                },
                Some(&op::LONG_BINGET) => match self.data.get(pos + 1..pos + 5) {
                    Some(raw) => {
                        let mut le = [0u8; 4];
                        le.copy_from_slice(raw);
                        (u64::from(u32::from_le_bytes(le)), 5)
                    }
                    None => break false,
                },
                Some(&op::APPENDS) => break true,
                _ => break false,
            };
            let Some(&item) = self.memo.get(index) else {
                break false;
            };
            let item = self.resolve(item);
            if let Item::Node(id) = item {
                match self.meta.get(id as usize) {
                    Some(&meta)
                        if id != target
                            && !(self.intern && meta.is_open_list())
                            && meta.height() < NodeMeta::HEIGHT =>
                    {
                        tallest = tallest.max(u32::from(meta.height()));
                    }
                    _ => break false,
                }
            }
            run.push(item);
            pos += width;
        };
        let count = run.len() as u64;
        let grown = if run.is_empty() {
            0
        } else {
            tallest.saturating_add(1)
        };
        let within_limits = complete
            && grown as usize <= self.limits.max_depth
            && self.pushed.saturating_add(count) <= self.limits.max_items
            && self
                .memory_used
                .saturating_add(count.saturating_mul(ITEM_CHARGE))
                <= self.memory_budget;
        let done = within_limits && {
            self.raise_height(target, grown);
            match self.arena.get_mut(target as usize) {
                Some(Node {
                    kind: NodeKind::List(list),
                }) => {
                    if fresh && self.intern && run.len() < PICKLER_BATCH {
                        self.intern_fresh(target, &run);
                    } else {
                        list.extend_from_slice(&run);
                    }
                    true
                }
                _ => false,
            }
        };
        if done {
            self.pushed += count;
            self.memory_used += count * ITEM_CHARGE;
            // Past the APPENDS.
            self.pos = pos + 1;
            if let Some((hash, end, count)) = cache_key
                && end == pos
            {
                let canonical = match self.arena.get(target as usize).map(|n| &n.kind) {
                    Some(NodeKind::Alias(canonical)) => Some(*canonical),
                    Some(NodeKind::List(_)) if self.is_canonical(target) => Some(target),
                    _ => None,
                };
                if let Some(canonical) = canonical {
                    self.run_cache.insert(
                        self.data,
                        (start, end),
                        (hash, count),
                        self.memo.generation,
                        canonical,
                    );
                }
            }
        }
        self.memo_run = run;
        done
    }

    /// Where `(BINGET | LONG_BINGET)* APPENDS` from `self.pos` ends (the
    /// APPENDS' position) and how many fetches it has; `None` for anything
    /// else, a piece's end included.
    fn memo_run_span(&self) -> Option<(usize, u64)> {
        let mut pos = self.pos;
        let mut count = 0u64;
        loop {
            match *self.data.get(pos)? {
                op::BINGET => pos = pos.checked_add(2)?,
                op::LONG_BINGET => pos = pos.checked_add(5)?,
                op::APPENDS => return (pos <= self.data.len()).then_some((pos, count)),
                _ => return None,
            }
            count += 1;
        }
    }

    /// The fresh list `target` becomes an alias of `canonical`, which the
    /// same span of fetches filled before, as if the `count` fetches up to
    /// `end` (the APPENDS) had run; `false` (nothing done) where a limit
    /// stops it, for the generic path to report.
    fn alias_cached_run(
        &mut self,
        target: NodeId,
        canonical: NodeId,
        count: u64,
        end: usize,
    ) -> bool {
        // The canonical list's height is its tallest item's when it was
        // filled, plus one: what this run would find.
        let grown = self.node_height(canonical);
        let within_limits = grown as usize <= self.limits.max_depth
            && self.pushed.saturating_add(count) <= self.limits.max_items
            && self
                .memory_used
                .saturating_add(count.saturating_mul(ITEM_CHARGE))
                <= self.memory_budget
            && matches!(
                self.arena.get(canonical as usize).map(|n| &n.kind),
                Some(NodeKind::List(_))
            );
        if !within_limits {
            return false;
        }
        self.raise_height(target, grown);
        let Some(node) = self.arena.get_mut(target as usize) else {
            return false;
        };
        node.kind = NodeKind::Alias(canonical);
        if let Some(meta) = self.meta_mut(target) {
            meta.make_alias();
        }
        self.pushed += count;
        self.memory_used += count * ITEM_CHARGE;
        self.pos = end + 1;
        true
    }

    /// Fills the empty list `id` with `items` and interns it at once (see
    /// [`Parser::intern`]): a list CPython writes with fewer items than its
    /// pickler's batch is complete after its one APPENDS, so a copy of an
    /// earlier list becomes an alias without its items ever being stored.
    /// Should the input append to it again, the parse is redone without
    /// interning, as for any completed list.
    fn intern_fresh(&mut self, id: NodeId, items: &[Item]) {
        let hash = hash_items(items);
        let same = self.interned.get(&hash).copied().filter(|&c| {
            c != id
                && matches!(self.arena.get(c as usize).map(|n| &n.kind),
                    Some(NodeKind::List(other)) if other.as_slice() == items)
        });
        let Some(node) = self.arena.get_mut(id as usize) else {
            return;
        };
        match same {
            Some(canonical) => {
                node.kind = NodeKind::Alias(canonical);
                if let Some(meta) = self.meta.get_mut(id as usize) {
                    meta.make_alias();
                }
            }
            None => {
                node.kind = NodeKind::List(items.to_vec());
                self.interned.entry(hash).or_insert(id);
                if let Some(meta) = self.meta.get_mut(id as usize) {
                    meta.close_list();
                }
            }
        }
    }

    /// Whether the item just pushed is the string `key`, as the next key of
    /// the top-level dict: the root dict at the bottom of the stack, then
    /// (after its MARK, if any) complete key/value pairs and this key. The
    /// pairs before it are then complete: CPython's pickler writes a dict's
    /// values one after the other and never returns to one.
    fn pushed_top_level_key(&self, key: &str) -> bool {
        let base = match self.marks.as_slice() {
            [] => 1,
            [only] => *only,
            _ => return false,
        };
        base == 1
            && self.stack.len() > base
            && !(self.stack.len() - base).is_multiple_of(2)
            && self.stack.last().and_then(|item| self.item_str(item)) == Some(key)
            && matches!(
                self.stack.first(),
                Some(Item::Node(id)) if matches!(
                    self.arena.get(*id as usize).map(|n| &n.kind),
                    Some(NodeKind::Dict(_) | NodeKind::Record { .. })
                )
            )
    }

    /// Ends a parse stopped by [`Parser::stop_before_top_level_key`]: drops
    /// the key, sets the pairs before it into the top-level dict as their
    /// SETITEMS would have, and returns that dict.
    fn stop_at_top_level_key(&mut self, offset: usize) -> Result<Item, PickleError> {
        self.stack.pop();
        if !self.marks.is_empty() {
            let start = self.pop_mark_position("SETITEMS", offset)?;
            self.move_into_target(Some(start), Wanted::Dict, "SETITEMS", offset)?;
        }
        self.stopped = true;
        let root = self.pop("STOP", offset)?;
        Ok(self.resolve(root))
    }

    /// Executes one opcode other than STOP.
    fn step(&mut self, code: u8, offset: usize) -> Result<(), PickleError> {
        match code {
            op::PROTO => {
                let protocol = self.take_array::<1>("PROTO", offset)?[0];
                if protocol > 5 {
                    return Err(PickleError::UnsupportedProtocol { protocol, offset });
                }
            }
            op::FRAME => {
                // Frames only help buffered readers; check that the announced
                // frame is present and read on as if it were not there.
                let len = u64::from_le_bytes(self.take_array::<8>("FRAME", offset)?);
                let remaining = (self.data.len() - self.pos) as u64;
                if len > remaining && !self.input_is_prefix {
                    return Err(self.truncated("FRAME", offset, len - remaining));
                }
            }
            op::MARK => self.marks.push(self.stack.len()),
            op::POP => {
                // CPython: popping an empty frame discards the mark instead.
                if self.stack.len() > self.frame_base() {
                    self.stack.pop();
                } else {
                    self.discard_mark("POP", offset)?;
                }
            }
            op::POP_MARK => {
                self.discard_mark("POP_MARK", offset)?;
            }
            op::DUP => {
                let top = *self.top("DUP", offset)?;
                let top = self.resolve(top);
                self.push(top)?;
            }

            op::NONE => self.push_value(Value::None)?,
            op::NEWTRUE => self.push_value(Value::Bool(true))?,
            op::NEWFALSE => self.push_value(Value::Bool(false))?,
            op::BININT => {
                let v = i32::from_le_bytes(self.take_array::<4>("BININT", offset)?);
                self.push_int(v.into())?;
            }
            op::BININT1 => {
                let v = self.take_array::<1>("BININT1", offset)?[0];
                self.push_int(v.into())?;
            }
            op::BININT2 => {
                let v = u16::from_le_bytes(self.take_array::<2>("BININT2", offset)?);
                self.push_int(v.into())?;
            }
            op::LONG1 => {
                let len = self.take_array::<1>("LONG1", offset)?[0];
                let v = self.read_le_signed("LONG1", offset, len.into())?;
                self.push_int(v)?;
            }
            op::LONG4 => {
                let len = i32::from_le_bytes(self.take_array::<4>("LONG4", offset)?);
                let len = u64::try_from(len).map_err(|_| PickleError::Malformed {
                    opcode: "LONG4",
                    offset,
                    detail: format!("negative length {len}"),
                })?;
                let v = self.read_le_signed("LONG4", offset, len)?;
                self.push_int(v)?;
            }
            op::INT => {
                let line = self.take_line("INT", offset)?;
                let value = match line {
                    // Protocol 0 spells the bools as INT 01 / INT 00.
                    b"01" => Value::Bool(true),
                    b"00" => Value::Bool(false),
                    text => Value::Int(parse_decimal(text, "INT", offset)?),
                };
                self.push_value(value)?;
            }
            op::LONG => {
                let line = self.take_line("LONG", offset)?;
                let digits = line.strip_suffix(b"L").unwrap_or(line);
                let v = parse_decimal(digits, "LONG", offset)?;
                self.push_value(Value::Int(v))?;
            }
            op::BINFLOAT => {
                let v = f64::from_be_bytes(self.take_array::<8>("BINFLOAT", offset)?);
                self.push_value(Value::Float(v))?;
            }
            op::FLOAT => {
                let line = self.take_line("FLOAT", offset)?;
                let v = std::str::from_utf8(line)
                    .ok()
                    .and_then(|text| text.trim().parse::<f64>().ok())
                    .ok_or_else(|| PickleError::Malformed {
                        opcode: "FLOAT",
                        offset,
                        detail: format!("'{}' is not a float", sanitize(line)),
                    })?;
                self.push_value(Value::Float(v))?;
            }

            op::SHORT_BINUNICODE => {
                let len = self.take_array::<1>("SHORT_BINUNICODE", offset)?[0];
                self.push_utf8("SHORT_BINUNICODE", offset, len.into())?;
            }
            op::BINUNICODE => {
                let len = u32::from_le_bytes(self.take_array::<4>("BINUNICODE", offset)?);
                self.push_utf8("BINUNICODE", offset, len.into())?;
            }
            op::BINUNICODE8 => {
                let len = u64::from_le_bytes(self.take_array::<8>("BINUNICODE8", offset)?);
                self.push_utf8("BINUNICODE8", offset, len)?;
            }
            op::UNICODE => {
                let line = self.take_line("UNICODE", offset)?;
                let text =
                    decode_raw_unicode_escape(line).ok_or_else(|| PickleError::Malformed {
                        opcode: "UNICODE",
                        offset,
                        detail: "bad \\u or \\U escape".to_string(),
                    })?;
                self.push_value(Value::Str(text.into()))?;
            }
            op::SHORT_BINBYTES => {
                let len = self.take_array::<1>("SHORT_BINBYTES", offset)?[0];
                self.push_bytes("SHORT_BINBYTES", offset, len.into())?;
            }
            op::BINBYTES => {
                let len = u32::from_le_bytes(self.take_array::<4>("BINBYTES", offset)?);
                self.push_bytes("BINBYTES", offset, len.into())?;
            }
            op::BINBYTES8 => {
                let len = u64::from_le_bytes(self.take_array::<8>("BINBYTES8", offset)?);
                self.push_bytes("BINBYTES8", offset, len)?;
            }
            op::BYTEARRAY8 => {
                let len = u64::from_le_bytes(self.take_array::<8>("BYTEARRAY8", offset)?);
                self.push_bytes("BYTEARRAY8", offset, len)?;
            }

            op::EMPTY_LIST => {
                self.push_node(NodeKind::List(Vec::new()), 1, offset)?;
                self.newest_empty_list = Some(NewestList {
                    id: saturating_u32(self.arena.len().saturating_sub(1)),
                    offset,
                    stack_len: self.stack.len(),
                    memo_len: self.memo.dense.len(),
                    memo_generation: self.memo.generation,
                });
            }
            op::EMPTY_DICT => self.push_node(NodeKind::Dict(Vec::new()), 1, offset)?,
            op::EMPTY_TUPLE => self.push_node(NodeKind::Tuple(Vec::new()), 1, offset)?,
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let (name, count) = match code {
                    op::TUPLE1 => ("TUPLE1", 1),
                    op::TUPLE2 => ("TUPLE2", 2),
                    _ => ("TUPLE3", 3),
                };
                if self.stack.len() < self.frame_base() + count {
                    return Err(underflow(name, offset, count));
                }
                let mut items = self.stack.split_off(self.stack.len() - count);
                for item in &mut items {
                    *item = self.contained(*item);
                }
                self.push_container(NodeKind::Tuple(items), offset)?;
            }
            op::TUPLE => {
                let items = self.pop_mark("TUPLE", offset)?;
                self.push_container(NodeKind::Tuple(items), offset)?;
            }
            op::LIST => {
                let items = self.pop_mark("LIST", offset)?;
                self.push_container(NodeKind::List(items), offset)?;
            }
            op::DICT => {
                let items = self.pop_mark("DICT", offset)?;
                let pairs = self.pair_up(items, "DICT", offset)?;
                self.push_container(NodeKind::Dict(pairs), offset)?;
            }
            op::APPEND => {
                let start = self.stack.len().checked_sub(1);
                self.move_into_target(start, Wanted::List, "APPEND", offset)?;
            }
            op::APPENDS => {
                let start = self.pop_mark_position("APPENDS", offset)?;
                self.move_into_target(Some(start), Wanted::List, "APPENDS", offset)?;
            }
            op::SETITEM => {
                let start = self.stack.len().checked_sub(2);
                self.move_into_target(start, Wanted::Dict, "SETITEM", offset)?;
            }
            op::SETITEMS => {
                let start = self.pop_mark_position("SETITEMS", offset)?;
                if !self.set_known_record(start) {
                    self.move_into_target(Some(start), Wanted::Dict, "SETITEMS", offset)?;
                }
            }

            op::MEMOIZE => {
                let top = *self.top("MEMOIZE", offset)?;
                let index = self.memo.len() as u64;
                self.memo.put(index, top);
            }
            op::PUT => {
                let line = self.take_line("PUT", offset)?;
                let index = parse_memo_index(line, "PUT", offset)?;
                let top = *self.top("PUT", offset)?;
                self.memo.put(index, top);
            }
            op::BINPUT => {
                let index = self.take_array::<1>("BINPUT", offset)?[0];
                let top = *self.top("BINPUT", offset)?;
                self.memo.put(index.into(), top);
            }
            op::LONG_BINPUT => {
                let index = u32::from_le_bytes(self.take_array::<4>("LONG_BINPUT", offset)?);
                let top = *self.top("LONG_BINPUT", offset)?;
                self.memo.put(index.into(), top);
            }
            op::GET => {
                let line = self.take_line("GET", offset)?;
                let index = parse_memo_index(line, "GET", offset)?;
                self.push_memo(index, "GET", offset)?;
            }
            op::BINGET => {
                let index = self.take_array::<1>("BINGET", offset)?[0];
                self.push_memo(index.into(), "BINGET", offset)?;
            }
            op::LONG_BINGET => {
                let index = u32::from_le_bytes(self.take_array::<4>("LONG_BINGET", offset)?);
                self.push_memo(index.into(), "LONG_BINGET", offset)?;
            }

            op::GLOBAL | op::INST => {
                let name = if code == op::GLOBAL { "GLOBAL" } else { "INST" };
                return Err(PickleError::Refused {
                    opcode: name,
                    offset,
                    detail: self.peek_two_lines(),
                });
            }
            op::STACK_GLOBAL => {
                return Err(PickleError::Refused {
                    opcode: "STACK_GLOBAL",
                    offset,
                    detail: self.stack_global_name(),
                });
            }
            op::PERSID => {
                let detail = self
                    .peek_line()
                    .map(|id| format!("persistent id '{}'", sanitize(id)));
                return Err(PickleError::Refused {
                    opcode: "PERSID",
                    offset,
                    detail,
                });
            }
            op::EXT1 | op::EXT2 | op::EXT4 => {
                let (name, width) = match code {
                    op::EXT1 => ("EXT1", 1),
                    op::EXT2 => ("EXT2", 2),
                    _ => ("EXT4", 4),
                };
                let detail = self.data.get(self.pos..self.pos + width).map(|raw| {
                    let mut le = [0u8; 4];
                    le[..width].copy_from_slice(raw);
                    format!("extension code {}", u32::from_le_bytes(le))
                });
                return Err(PickleError::Refused {
                    opcode: name,
                    offset,
                    detail,
                });
            }
            op::REDUCE
            | op::BUILD
            | op::OBJ
            | op::NEWOBJ
            | op::NEWOBJ_EX
            | op::BINPERSID
            | op::NEXT_BUFFER
            | op::READONLY_BUFFER => {
                return Err(PickleError::Refused {
                    opcode: opcode_name(code).unwrap_or("?"),
                    offset,
                    detail: None,
                });
            }
            op::STRING | op::BINSTRING | op::SHORT_BINSTRING => {
                return Err(PickleError::Unsupported {
                    opcode: opcode_name(code).unwrap_or("?"),
                    offset,
                    reason: "Python 2 byte strings never occur in a memory snapshot",
                });
            }
            op::EMPTY_SET | op::ADDITEMS | op::FROZENSET => {
                return Err(PickleError::Unsupported {
                    opcode: opcode_name(code).unwrap_or("?"),
                    offset,
                    reason: "sets never occur in a memory snapshot",
                });
            }
            byte => return Err(PickleError::UnknownOpcode { byte, offset }),
        }
        Ok(())
    }

    // ---- input ----------------------------------------------------------

    fn truncated(&self, opcode: &'static str, offset: usize, needed: u64) -> PickleError {
        PickleError::Truncated {
            opcode,
            offset,
            end: self.input_end(),
            needed,
        }
    }

    /// The input offset of the end of the current piece.
    fn input_end(&self) -> usize {
        self.base + self.data.len()
    }

    /// The input offset of the next byte.
    fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// The next `len` bytes. The length is compared with what is left before
    /// anything is allocated, so a forged length costs nothing.
    fn take(
        &mut self,
        len: u64,
        opcode: &'static str,
        offset: usize,
    ) -> Result<&'d [u8], PickleError> {
        let remaining = self.data.len() - self.pos;
        if len > remaining as u64 {
            return Err(self.truncated(opcode, offset, len - remaining as u64));
        }
        // `len <= remaining`, so it fits in usize and the range is in bounds.
        let end = self.pos + len as usize;
        let bytes = self.data.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(bytes)
    }

    fn take_array<const N: usize>(
        &mut self,
        opcode: &'static str,
        offset: usize,
    ) -> Result<[u8; N], PickleError> {
        let bytes = self.take(N as u64, opcode, offset)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// A text argument up to (not including) the next newline.
    fn take_line(&mut self, opcode: &'static str, offset: usize) -> Result<&'d [u8], PickleError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        let Some(newline) = rest.iter().position(|&b| b == b'\n') else {
            return Err(PickleError::TruncatedLine {
                opcode,
                offset,
                end: self.input_end(),
            });
        };
        let line = rest.get(..newline).unwrap_or_default();
        self.pos += newline + 1;
        Ok(line)
    }

    /// The next line, without consuming it, for error details.
    fn peek_line(&self) -> Option<&'d [u8]> {
        let rest = self.data.get(self.pos..)?;
        let newline = rest.iter().position(|&b| b == b'\n')?;
        rest.get(..newline)
    }

    /// "module.name" from GLOBAL/INST's two text lines, if present.
    fn peek_two_lines(&self) -> Option<String> {
        let rest = self.data.get(self.pos..)?;
        let mut lines = rest.splitn(3, |&b| b == b'\n');
        let module = lines.next()?;
        let name = lines.next()?;
        // A third piece exists only if the name line was terminated.
        lines.next()?;
        Some(format!("{}.{}", sanitize(module), sanitize(name)))
    }

    /// "module.name" from the two strings STACK_GLOBAL would consume.
    fn stack_global_name(&self) -> Option<String> {
        let base = self.frame_base();
        let len = self.stack.len();
        if len < base + 2 {
            return None;
        }
        let module = self.item_str(self.stack.get(len - 2)?)?;
        let name = self.item_str(self.stack.get(len - 1)?)?;
        Some(format!(
            "{}.{}",
            sanitize(module.as_bytes()),
            sanitize(name.as_bytes())
        ))
    }

    /// A little-endian two's-complement integer of `len` bytes (LONG1/4).
    fn read_le_signed(
        &mut self,
        opcode: &'static str,
        offset: usize,
        len: u64,
    ) -> Result<i128, PickleError> {
        if len > 16 {
            return Err(PickleError::IntegerTooLarge {
                opcode,
                offset,
                detail: format!("{len} bytes"),
            });
        }
        let start = self.pos;
        let bytes = self.take(len, opcode, offset)?;
        if bytes.is_empty() {
            return Ok(0);
        }
        // Assembled in a register and sign-extended from the top byte by a
        // shift pair: copying the bytes into a buffer and loading it whole
        // stalled the load on the copy's byte stores (perf: a trace entry's
        // address and time are LONG1 each).
        if bytes.len() <= 8 {
            // The 8 bytes from the int's first, where the input has them
            // (the shift drops those past it); else byte by byte.
            let word = match self
                .data
                .get(start..start + 8)
                .and_then(|w| <[u8; 8]>::try_from(w).ok())
            {
                Some(word) => u64::from_le_bytes(word),
                None => bytes
                    .iter()
                    .rev()
                    .fold(0u64, |word, &byte| word << 8 | u64::from(byte)),
            };
            return Ok(i128::from(sign_extended(word, bytes.len())));
        }
        let mut value = 0u128;
        for (index, &byte) in bytes.iter().enumerate() {
            value |= u128::from(byte) << (8 * index);
        }
        // 9 to 16 bytes: a shift of 0 to 56 bits.
        let unused_bits = 128 - 8 * bytes.len() as u32;
        Ok(((value << unused_bits) as i128) >> unused_bits)
    }

    fn push_utf8(
        &mut self,
        opcode: &'static str,
        offset: usize,
        len: u64,
    ) -> Result<(), PickleError> {
        let bytes = self.take(len, opcode, offset)?;
        let text = std::str::from_utf8(bytes).map_err(|e| PickleError::Malformed {
            opcode,
            offset,
            detail: format!(
                "string is not valid UTF-8 (bad byte {} of {len})",
                e.valid_up_to()
            ),
        })?;
        self.push_value(Value::Str(Arc::from(text)))
    }

    fn push_bytes(
        &mut self,
        opcode: &'static str,
        offset: usize,
        len: u64,
    ) -> Result<(), PickleError> {
        let bytes = self.take(len, opcode, offset)?;
        self.push_value(Value::Bytes(Arc::from(bytes)))
    }

    // ---- stack ----------------------------------------------------------

    fn frame_base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    /// Counts `bytes` more of parsed values against the memory budget.
    /// Inlined: it runs for every value pushed, and the error is built out
    /// of line.
    #[inline]
    fn charge(&mut self, bytes: u64) -> Result<(), PickleError> {
        self.memory_used = self.memory_used.saturating_add(bytes);
        if self.memory_used > self.memory_budget {
            return Err(self.memory_exceeded());
        }
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn memory_exceeded(&self) -> PickleError {
        PickleError::LimitExceeded {
            detail: format!(
                "{} (at byte {})",
                memory_exceeded_detail(self.memory_budget, self.input_len),
                self.offset()
            ),
        }
    }

    #[inline(always)]
    fn push(&mut self, item: Item) -> Result<(), PickleError> {
        self.charge(ITEM_CHARGE)?;
        self.pushed += 1;
        if self.pushed > self.limits.max_items {
            return Err(self.too_many_items());
        }
        self.stack.push(item);
        Ok(())
    }

    #[cold]
    #[inline(never)]
    fn too_many_items(&self) -> PickleError {
        PickleError::LimitExceeded {
            detail: format!(
                "more than {} values at byte {}",
                self.limits.max_items,
                self.offset()
            ),
        }
    }

    /// An int, as [`Parser::push_value`] pushes `Value::Int`: most of a
    /// snapshot's ints fit 32 bits and never become a `Value`.
    #[inline]
    fn push_int(&mut self, int: i128) -> Result<(), PickleError> {
        match i32::try_from(int) {
            Ok(small) => self.push(Item::SmallInt(small)),
            Err(_) => self.push_value(Value::Int(int)),
        }
    }

    fn push_value(&mut self, value: Value) -> Result<(), PickleError> {
        // An int that fits `i64` never becomes a `Value` in the tables.
        if let Value::Int(i) = value
            && let Ok(int) = i64::try_from(i)
        {
            return self.push_i64(int);
        }
        let item = match value {
            Value::None => Item::None,
            Value::Bool(b) => Item::Bool(b),
            other => {
                let id = self.scalar_id(self.scalars.values.len())?;
                let payload = match &other {
                    Value::Str(text) => text.len(),
                    Value::Bytes(bytes) => bytes.len(),
                    _ => 0,
                };
                self.charge(2 * std::mem::size_of::<Value>() as u64 + payload as u64)?;
                self.scalars.values.push(other);
                Item::Scalar(id)
            }
        };
        self.push(item)
    }

    /// The id of the next entry of a scalar table of length `len`.
    fn scalar_id(&self, len: usize) -> Result<ScalarId, PickleError> {
        ScalarId::try_from(len).map_err(|_| PickleError::LimitExceeded {
            detail: format!(
                "more than {} scalars at byte {}",
                ScalarId::MAX,
                self.offset()
            ),
        })
    }

    /// The string a stack item stands for, if it is one.
    fn item_str(&self, item: &Item) -> Option<&str> {
        match item {
            Item::Scalar(id) => self.scalars.values.get(*id as usize)?.as_str(),
            _ => None,
        }
    }

    /// The memo fetches (BINGET) are most of a snapshot's opcodes: inlined,
    /// with the error built out of line.
    #[inline(always)]
    fn push_memo(
        &mut self,
        index: u64,
        opcode: &'static str,
        offset: usize,
    ) -> Result<(), PickleError> {
        let Some(&item) = self.memo.get(index) else {
            return Err(memo_missing(index, opcode, offset));
        };
        let item = self.resolve(item);
        self.push(item)
    }

    fn pop(&mut self, opcode: &'static str, offset: usize) -> Result<Item, PickleError> {
        if self.stack.len() <= self.frame_base() {
            return Err(underflow(opcode, offset, 1));
        }
        self.stack.pop().ok_or_else(|| underflow(opcode, offset, 1))
    }

    #[inline]
    fn top(&self, opcode: &'static str, offset: usize) -> Result<&Item, PickleError> {
        if self.stack.len() <= self.frame_base() {
            return Err(underflow(opcode, offset, 1));
        }
        self.stack
            .last()
            .ok_or_else(|| underflow(opcode, offset, 1))
    }

    /// Removes the innermost MARK and returns the stack length it recorded.
    fn pop_mark_position(
        &mut self,
        opcode: &'static str,
        offset: usize,
    ) -> Result<usize, PickleError> {
        let base = self.marks.pop().ok_or_else(|| PickleError::Malformed {
            opcode,
            offset,
            detail: "no MARK to pop".to_string(),
        })?;
        Ok(base.min(self.stack.len()))
    }

    /// Removes the innermost MARK and returns the items pushed since, to
    /// become a container's (see [`Parser::contained`]).
    fn pop_mark(&mut self, opcode: &'static str, offset: usize) -> Result<Vec<Item>, PickleError> {
        let base = self.pop_mark_position(opcode, offset)?;
        let mut items = self.stack.split_off(base);
        for item in &mut items {
            *item = self.contained(*item);
        }
        Ok(items)
    }

    /// Removes the innermost MARK and what was pushed since.
    fn discard_mark(&mut self, opcode: &'static str, offset: usize) -> Result<(), PickleError> {
        let base = self.pop_mark_position(opcode, offset)?;
        self.stack.truncate(base);
        Ok(())
    }

    /// `item` as an item of a container built whole (TUPLE, LIST, DICT):
    /// through an alias, and a list interned, as when it is moved into a
    /// container by APPEND(S) or SETITEM(S). A list held by a container
    /// must not become an alias later (when it is moved somewhere else):
    /// the container would still refer to the node, which then has no
    /// items of its own. CPython writes a list whole before the container
    /// it is in; an input that appends to it afterwards makes the parse
    /// start again without interning, as for any completed list.
    fn contained(&mut self, item: Item) -> Item {
        match self.resolve(item) {
            Item::Node(id)
                if self.intern && self.meta.get(id as usize).is_some_and(|m| m.is_open_list()) =>
            {
                Item::Node(self.intern(id))
            }
            other => other,
        }
    }

    // ---- containers -----------------------------------------------------

    fn item_height(&self, item: &Item) -> usize {
        match item {
            Item::Node(id) => self.node_height(*id) as usize,
            _ => 0,
        }
    }

    fn check_height(&self, height: usize, offset: usize) -> Result<(), PickleError> {
        if height > self.limits.max_depth {
            return Err(too_deep(self.limits.max_depth, Some(offset)));
        }
        Ok(())
    }

    fn push_node(
        &mut self,
        kind: NodeKind,
        height: usize,
        offset: usize,
    ) -> Result<(), PickleError> {
        self.check_height(height, offset)?;
        self.charge(NODE_CHARGE)?;
        let id = NodeId::try_from(self.arena.len()).map_err(|_| PickleError::LimitExceeded {
            detail: format!("more than {} containers at byte {offset}", NodeId::MAX),
        })?;
        // A new node's height is set, not raised: `raise_height` looked the
        // node up again for each of the two containers of a trace entry.
        let mut meta = NodeMeta::new(matches!(kind, NodeKind::List(_)));
        let height = saturating_u32(height);
        meta.set_height(height);
        if height >= u32::from(NodeMeta::HEIGHT) {
            self.tall_heights.insert(id, height);
        }
        self.meta.push(meta);
        self.arena.push(Node { kind });
        self.push(Item::Node(id))
    }

    /// Pushes a container made from popped items.
    fn push_container(&mut self, kind: NodeKind, offset: usize) -> Result<(), PickleError> {
        let tallest_child = match &kind {
            NodeKind::List(items) | NodeKind::Tuple(items) => {
                items.iter().map(|i| self.item_height(i)).max()
            }
            NodeKind::Dict(pairs) => pairs
                .iter()
                .map(|(k, v)| self.item_height(k).max(self.item_height(v)))
                .max(),
            &NodeKind::Record { start, len, .. } => self
                .scalars
                .record(start, len)
                .iter()
                .map(|v| self.item_height(v))
                .max(),
            NodeKind::Alias(_) => None,
        };
        self.push_node(kind, tallest_child.unwrap_or(0) + 1, offset)
    }

    fn pair_up(
        &self,
        items: Vec<Item>,
        opcode: &'static str,
        offset: usize,
    ) -> Result<Vec<(Item, Item)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(PickleError::Malformed {
                opcode,
                offset,
                detail: format!("odd number of items ({}) for key/value pairs", items.len()),
            });
        }
        let mut pairs = Vec::with_capacity(items.len() / 2);
        let mut iter = items.into_iter();
        while let (Some(key), Some(value)) = (iter.next(), iter.next()) {
            self.check_key(&key, opcode, offset)?;
            pairs.push((key, value));
        }
        Ok(pairs)
    }

    /// Python refuses lists and dicts as dict keys (unhashable); so do we.
    /// The key set of a record for the keys at `start..` of the stack (every
    /// other item), the keys of an empty dict's first SETITEMS: an existing
    /// set, or a new one while there are fewer than [`MAX_KEY_SETS`]. `None`
    /// (the dict stays a dict) for a container key or too many keys.
    fn record_keys(&mut self, start: usize) -> Option<u32> {
        let keys = self.stack.get(start..)?;
        if keys.len() > 2 * MAX_RECORD_KEYS || !keys.len().is_multiple_of(2) {
            return None;
        }
        // Consecutive dicts mostly have the last one's keys (trace entries,
        // frames): compared in place, no hash.
        if let Some(last) = self.last_key_set
            && let Some(set) = self.scalars.key_sets.get(last as usize)
            && set.len() * 2 == keys.len()
            && set.iter().zip(keys.iter().step_by(2)).all(|(a, b)| a == b)
        {
            return Some(last);
        }
        let mut run = std::mem::take(&mut self.memo_run);
        run.clear();
        run.extend(keys.iter().step_by(2).copied());
        let found = if run.iter().any(|k| matches!(k, Item::Node(_))) {
            None
        } else {
            let hash = hash_items(&run);
            match self.key_set_ids.get(&hash) {
                Some(&id) => self
                    .scalars
                    .key_sets
                    .get(id as usize)
                    .is_some_and(|set| **set == *run)
                    .then_some(id),
                None if self.scalars.key_sets.len() < MAX_KEY_SETS => {
                    let id = self.scalars.key_sets.len() as u32;
                    self.scalars.key_sets.push(run.as_slice().into());
                    self.key_set_ids.insert(hash, id);
                    Some(id)
                }
                None => None,
            }
        };
        self.memo_run = run;
        if found.is_some() {
            self.last_key_set = found;
        }
        found
    }

    fn check_key(
        &self,
        key: &Item,
        opcode: &'static str,
        offset: usize,
    ) -> Result<(), PickleError> {
        if let Item::Node(id) = key
            && let Some(node) = self.arena.get(*id as usize)
            && !matches!(node.kind, NodeKind::Tuple(_))
        {
            return Err(PickleError::Malformed {
                opcode,
                offset,
                detail: format!("unhashable dict key of type {}", node.kind.type_name()),
            });
        }
        Ok(())
    }

    /// SETITEMS of `stack[start..]` into the fresh dict just below, when its
    /// keys are the last record's (every trace entry of a snapshot after
    /// the first): what [`Parser::move_into_target`] would do, without its
    /// checks of the keys (a key set holds no container) and its look at
    /// every item. `false`, nothing changed, for anything else (another
    /// target or keys, a list value to intern or resolve, a depth past the
    /// limit), which the generic path then does or reports.
    fn set_known_record(&mut self, start: usize) -> bool {
        let Some(target_index) = start.checked_sub(1) else {
            return false;
        };
        if target_index < self.frame_base() {
            return false;
        }
        let Some(&Item::Node(target)) = self.stack.get(target_index) else {
            return false;
        };
        if !matches!(
            self.arena.get(target as usize).map(|n| &n.kind),
            Some(NodeKind::Dict(pairs)) if pairs.is_empty()
        ) {
            return false;
        }
        let Some(keys) = self.last_key_set else {
            return false;
        };
        let Some(set) = self.scalars.key_sets.get(keys as usize) else {
            return false;
        };
        let Some(items) = self.stack.get(start..) else {
            return false;
        };
        if items.len() != 2 * set.len() {
            return false;
        }
        // One pass over the pairs: each key the set's, each value's height.
        let mut tallest = 0u32;
        for (pair, key) in items.chunks_exact(2).zip(set.iter()) {
            let [k, value] = pair else {
                return false;
            };
            // Keys are strings (scalar ids): compared inline, where the
            // derived comparison was a call per key (2.7 % of a 198 MB parse).
            let same = match (k, key) {
                (Item::Scalar(a), Item::Scalar(b)) => a == b,
                _ => k == key,
            };
            if !same {
                return false;
            }
            if let &Item::Node(id) = value {
                match self.meta.get(id as usize) {
                    Some(&meta)
                        if id != target
                            && meta.0 & (NodeMeta::ALIAS | NodeMeta::OPEN_LIST) == 0
                            && meta.height() < NodeMeta::HEIGHT =>
                    {
                        tallest = tallest.max(u32::from(meta.height()));
                    }
                    _ => return false,
                }
            }
        }
        // Keys are scalars (height 0): the dict is one above its tallest item.
        let grown = if items.is_empty() { 0 } else { tallest + 1 };
        if grown as usize > self.limits.max_depth {
            return false;
        }
        if !self.store_record(target, keys, start) {
            return false;
        }
        self.raise_height(target, grown);
        true
    }

    /// Makes the dict `target` a record of key set `keys` whose values are
    /// those of the key/value pairs on the stack from `start`, and pops the
    /// pairs. `false`, nothing changed, when the records' vector is past
    /// `u32` indexes or `target` is not a node.
    #[inline(always)]
    fn store_record(&mut self, target: NodeId, keys: u32, start: usize) -> bool {
        let pairs = self.stack.get(start..).unwrap_or_default();
        let pool = &mut self.scalars.record_values;
        let (Ok(first), Ok(len)) = (u32::try_from(pool.len()), u32::try_from(pairs.len() / 2))
        else {
            return false;
        };
        let Some(node) = self.arena.get_mut(target as usize) else {
            return false;
        };
        pool.reserve(pairs.len() / 2);
        for pair in pairs.chunks_exact(2) {
            if let [_, value] = pair {
                pool.push(*value);
            }
        }
        node.kind = NodeKind::Record {
            keys,
            start: first,
            len,
        };
        self.stack.truncate(start);
        true
    }

    /// Moves `stack[start..]` into the container just below it (APPEND(S),
    /// SETITEM(S)): CPython mutates that container in place. Draining the
    /// stack straight into the node avoids a temporary vector per opcode.
    fn move_into_target(
        &mut self,
        start: Option<usize>,
        wanted: Wanted,
        opcode: &'static str,
        offset: usize,
    ) -> Result<(), PickleError> {
        // The target and the moved items must all lie in the current frame.
        let target_index = start
            .and_then(|s| s.checked_sub(1))
            .filter(|&t| t >= self.frame_base() && t < self.stack.len())
            .ok_or_else(|| underflow(opcode, offset, wanted.min_items()))?;
        let start = target_index + 1;
        let target = match self.stack.get(target_index) {
            Some(Item::Node(id)) => *id,
            Some(scalar) => {
                let type_name = match scalar {
                    Item::None => "None",
                    Item::Bool(_) => "bool",
                    Item::SmallInt(_) | Item::WideInt(_) => "int",
                    Item::Scalar(id) => self
                        .scalars
                        .values
                        .get(*id as usize)
                        .map_or("?", Value::type_name),
                    Item::Node(_) => "container",
                };
                return Err(PickleError::Malformed {
                    opcode,
                    offset,
                    detail: format!("target is {}, not a container", with_article(type_name)),
                });
            }
            None => return Err(internal(opcode, offset)),
        };
        let moved = self.stack.get(start..).unwrap_or_default();
        if wanted == Wanted::Dict {
            if !moved.len().is_multiple_of(2) {
                return Err(PickleError::Malformed {
                    opcode,
                    offset,
                    detail: format!("odd number of items ({}) for key/value pairs", moved.len()),
                });
            }
            for key in moved.iter().step_by(2) {
                self.check_key(key, opcode, offset)?;
            }
        }
        let grown = moved
            .iter()
            .map(|i| self.item_height(i) + 1)
            .max()
            .unwrap_or(0);
        self.check_height(grown, offset)?;

        if self.intern {
            let completed = self
                .arena
                .get(target as usize)
                .is_some_and(|n| matches!(n.kind, NodeKind::Alias(_)))
                || self.is_canonical(target);
            if completed {
                self.intern_broken = true;
                return Err(PickleError::Malformed {
                    opcode,
                    offset,
                    detail: "a completed list is mutated (retried without interning)".to_string(),
                });
            }
            for index in start..self.stack.len() {
                let Some(&Item::Node(id)) = self.stack.get(index) else {
                    continue;
                };
                // One look at the node: aliases resolve, lists intern, the
                // rest (dicts, tuples, scalars: most items) stays as it is,
                // and is not written back: an item stored field by field
                // and read whole right after stalled the read (perf).
                if id == target
                    || self
                        .meta
                        .get(id as usize)
                        .is_some_and(|m| m.0 & (NodeMeta::ALIAS | NodeMeta::OPEN_LIST) == 0)
                {
                    continue;
                }
                let replaced = match self.arena.get(id as usize).map(|n| &n.kind) {
                    Some(NodeKind::Alias(canonical)) => *canonical,
                    Some(NodeKind::List(_)) => self.intern(id),
                    _ => continue,
                };
                if let Some(slot) = self.stack.get_mut(index) {
                    *slot = Item::Node(replaced);
                }
            }
        }

        let record_keys = match self.arena.get(target as usize).map(|n| &n.kind) {
            Some(NodeKind::Dict(pairs)) if wanted == Wanted::Dict && pairs.is_empty() => {
                self.record_keys(start)
            }
            _ => None,
        };
        self.raise_height(target, saturating_u32(grown));
        if self.arena.get(target as usize).is_none() {
            return Err(internal(opcode, offset));
        }
        if let Some(keys) = record_keys {
            // The pairs' count is even (checked above); the records' vector
            // is at most the items pushed, bounded by `max_items` (below
            // 2^32).
            if !self.store_record(target, keys, start) {
                return Err(self.too_many_items());
            }
            return Ok(());
        }
        let Some(node) = self.arena.get_mut(target as usize) else {
            return Err(internal(opcode, offset));
        };
        if let &NodeKind::Record { keys, start, len } = &node.kind {
            // Set into again: a dict like any other from now on (its values
            // stay behind in the records' vector, unused).
            let keys = self
                .scalars
                .key_sets
                .get(keys as usize)
                .ok_or_else(|| internal(opcode, offset))?;
            let values = self.scalars.record(start, len);
            let pairs = keys.iter().copied().zip(values.iter().copied()).collect();
            node.kind = NodeKind::Dict(pairs);
        }
        let mut drained = self.stack.drain(start..);
        match (&mut node.kind, wanted) {
            (NodeKind::List(list), Wanted::List) => list.extend(drained),
            (NodeKind::Dict(dict), Wanted::Dict) => {
                dict.reserve(drained.len() / 2);
                while let (Some(key), Some(value)) = (drained.next(), drained.next()) {
                    dict.push((key, value));
                }
            }
            (other, _) => {
                return Err(wrong_target(
                    opcode,
                    offset,
                    wanted.name(),
                    other.type_name(),
                ));
            }
        }
        Ok(())
    }
}

/// The little-endian int of the first `len` bytes of `word` (1 to 8; a
/// length out of that range is taken as the nearest), sign-extended from
/// its top byte by a shift pair of 0 to 56 bits.
#[inline]
fn sign_extended(word: u64, len: usize) -> i64 {
    let unused_bits = 64 - 8 * len.clamp(1, 8) as u32;
    ((word << unused_bits) as i64) >> unused_bits
}

#[cold]
#[inline(never)]
fn memo_missing(index: u64, opcode: &'static str, offset: usize) -> PickleError {
    PickleError::Malformed {
        opcode,
        offset,
        detail: format!("memo index {index} was never stored"),
    }
}

fn saturating_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The container kind a mutating opcode expects as its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wanted {
    List,
    Dict,
}

impl Wanted {
    fn name(self) -> &'static str {
        match self {
            Wanted::List => "list",
            Wanted::Dict => "dict",
        }
    }

    /// Stack items the single-item form (APPEND / SETITEM) consumes.
    fn min_items(self) -> usize {
        match self {
            Wanted::List => 2,
            Wanted::Dict => 3,
        }
    }
}

/// Decimal integer text as protocol 0 writes it (optional sign).
fn parse_decimal(text: &[u8], opcode: &'static str, offset: usize) -> Result<i128, PickleError> {
    let str_text = std::str::from_utf8(text).ok().map(str::trim);
    let digits = str_text.map(|t| t.trim_start_matches(['+', '-']));
    match (str_text, digits) {
        (Some(t), Some(d)) if !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) => {
            t.parse::<i128>().map_err(|_| PickleError::IntegerTooLarge {
                opcode,
                offset,
                detail: format!("{} decimal digits", d.len()),
            })
        }
        _ => Err(PickleError::Malformed {
            opcode,
            offset,
            detail: format!("'{}' is not an integer", sanitize(text)),
        }),
    }
}

fn parse_memo_index(text: &[u8], opcode: &'static str, offset: usize) -> Result<u64, PickleError> {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .ok_or_else(|| PickleError::Malformed {
            opcode,
            offset,
            detail: format!("'{}' is not a memo index", sanitize(text)),
        })
}

/// Python's `raw-unicode-escape`: bytes are Latin-1 characters, except
/// `\uXXXX` and `\UXXXXXXXX`. `None` for a bad escape.
pub(super) fn decode_raw_unicode_escape(bytes: &[u8]) -> Option<String> {
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let width = match (b, bytes.get(i + 1)) {
            (b'\\', Some(b'u')) => 4,
            (b'\\', Some(b'U')) => 8,
            _ => {
                out.push(char::from(b));
                i += 1;
                continue;
            }
        };
        let hex = bytes.get(i + 2..i + 2 + width)?;
        let code = u32::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
        out.push(char::from_u32(code)?);
        i += 2 + width;
    }
    Some(out)
}
