//! The parsed arena of a pickle, and its "freeze" into a [`Value`] tree.

use super::error::{PickleError, too_deep};
use super::parser::{Item, Node, NodeKind, Scalars};
use super::value::Value;

/// Freeze state of one arena node, as [`Slots::get`] reads it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Slot<'a> {
    Unvisited,
    /// On the current DFS path: meeting it again means a cycle.
    InProgress,
    /// Frozen value and its exact nesting height.
    Done(&'a Value, usize),
    /// Frozen, used once and dropped: nothing else refers to it.
    Released,
}

/// The freeze state of every arena node in four bytes a node: a snapshot
/// has millions of nodes (two per trace entry) and freezes few of them (the
/// reader converts trace entries in place), so the values live in a
/// separate table that only the frozen nodes fill. The states start as
/// zeroed memory the allocator maps lazily.
#[derive(Debug, Default)]
pub(super) struct Slots {
    /// Per node: [`Slots::UNVISITED`], [`Slots::IN_PROGRESS`],
    /// [`Slots::RELEASED`], or [`Slots::FROZEN`] plus an index into `frozen`.
    states: Vec<u32>,
    /// Frozen values and their heights.
    frozen: Vec<(Value, usize)>,
    /// Indices of `frozen` whose value was released, reused first.
    free: Vec<u32>,
}

impl Slots {
    const UNVISITED: u32 = 0;
    const IN_PROGRESS: u32 = 1;
    const RELEASED: u32 = 2;
    const FROZEN: u32 = 3;

    fn new(nodes: usize) -> Self {
        Slots {
            states: vec![Self::UNVISITED; nodes],
            ..Slots::default()
        }
    }

    pub(super) fn get(&self, id: usize) -> Option<Slot<'_>> {
        Some(match *self.states.get(id)? {
            Self::UNVISITED => Slot::Unvisited,
            Self::IN_PROGRESS => Slot::InProgress,
            Self::RELEASED => Slot::Released,
            frozen => {
                let index = (frozen - Self::FROZEN) as usize;
                let (value, height) = self.frozen.get(index)?;
                Slot::Done(value, *height)
            }
        })
    }

    fn state_mut(&mut self, id: usize) -> Result<&mut u32, PickleError> {
        self.states.get_mut(id).ok_or_else(lost)
    }

    fn set_in_progress(&mut self, id: usize) -> Result<(), PickleError> {
        *self.state_mut(id)? = Self::IN_PROGRESS;
        Ok(())
    }

    fn set_done(&mut self, id: usize, value: Value, height: usize) -> Result<(), PickleError> {
        let index = match self.free.pop() {
            Some(index) => {
                let slot = self.frozen.get_mut(index as usize).ok_or_else(lost)?;
                *slot = (value, height);
                index
            }
            None => {
                // At most one frozen value per node, and nodes are indexed
                // by u32: the index fits unless the states do not.
                let index = u32::try_from(self.frozen.len())
                    .ok()
                    .filter(|i| i.checked_add(Self::FROZEN).is_some())
                    .ok_or_else(lost)?;
                self.frozen.push((value, height));
                index
            }
        };
        *self.state_mut(id)? = index + Self::FROZEN;
        Ok(())
    }

    /// Drops node `id`'s frozen value, if it has one.
    pub(super) fn release(&mut self, id: usize) {
        let Some(state) = self.states.get_mut(id) else {
            return;
        };
        if let Some(index) = state.checked_sub(Self::FROZEN) {
            if let Some(slot) = self.frozen.get_mut(index as usize) {
                *slot = (Value::None, 0);
                self.free.push(index);
            }
            *state = Self::RELEASED;
        }
    }
}

pub(super) fn lost() -> PickleError {
    PickleError::Malformed {
        opcode: "STOP",
        offset: 0,
        detail: "internal reader error (dangling reference)".to_string(),
    }
}

/// A parsed pickle before (or while) it becomes a [`Value`] tree: the
/// parser's arena, frozen on demand.
///
/// The snapshot reader freezes everything but the per-device trace lists,
/// then freezes, converts and releases one trace entry at a time
/// ([`Document::defer_device_traces`], [`Document::freeze_entry`],
/// [`Document::release_entry`]), so that a long trace never exists as
/// values all at once.
pub(crate) struct Document {
    /// Estimated bytes of the parsed values, the most reading the input may
    /// take (see [`Limits::memory_budget`]) and the input's length: what is
    /// built from the document is charged to the same budget.
    pub(crate) memory_used: u64,
    pub(crate) memory_budget: u64,
    pub(crate) input_len: usize,
    pub(super) arena: Vec<Node>,
    pub(super) scalars: Scalars,
    pub(super) slots: Slots,
    pub(super) root: Item,
    pub(super) max_depth: usize,
    /// How many container slots refer to each node (saturating): a node
    /// referred to at most once can be released after its one use.
    pub(super) in_degree: Vec<u8>,
    /// Nodes frozen by the last [`Document::freeze_entry`].
    pub(super) frozen_now: Vec<usize>,
    /// The depth-first path of [`Document::freeze`], kept between calls
    /// (one allocation for millions of trace entries).
    path: Vec<(usize, usize)>,
}

impl Document {
    pub(super) fn new(arena: Vec<Node>, scalars: Scalars, root: Item, max_depth: usize) -> Self {
        let mut in_degree = vec![0u8; arena.len()];
        for node in &arena {
            let mut count = |item: &Item| {
                if let Item::Node(id) = item
                    && let Some(d) = in_degree.get_mut(*id as usize)
                {
                    *d = d.saturating_add(1);
                }
            };
            match &node.kind {
                NodeKind::List(items) | NodeKind::Tuple(items) => items.iter().for_each(&mut count),
                &NodeKind::Record { start, len, .. } => {
                    scalars.record(start, len).iter().for_each(&mut count);
                }
                NodeKind::Dict(pairs) => pairs.iter().for_each(|(k, v)| {
                    count(k);
                    count(v);
                }),
                NodeKind::Alias(_) => {}
            }
        }
        let slots = Slots::new(arena.len());
        Document {
            memory_used: 0,
            memory_budget: u64::MAX,
            input_len: 0,
            arena,
            scalars,
            slots,
            root,
            max_depth,
            in_degree,
            frozen_now: Vec::new(),
            path: Vec::new(),
        }
    }

    pub(super) fn node_kind(&self, item: Item) -> Option<&NodeKind> {
        match item {
            Item::Node(id) => self.arena.get(id as usize).map(|n| &n.kind),
            _ => None,
        }
    }

    pub(super) fn referred_once(&self, item: Item) -> bool {
        matches!(item, Item::Node(id) if self.in_degree.get(id as usize) == Some(&1))
    }

    /// The whole (remaining) tree as a value.
    pub(crate) fn freeze_root(&mut self) -> Result<Value, PickleError> {
        let root = self.root;
        let max_depth = self.max_depth;
        self.freeze(root, max_depth)
    }

    fn scalar(&self, item: Item) -> Option<Value> {
        match item {
            Item::None => Some(Value::None),
            Item::Bool(b) => Some(Value::Bool(b)),
            Item::SmallInt(i) => Some(Value::Int(i.into())),
            Item::WideInt(_) | Item::Scalar(_) => self.scalars.value(item),
            Item::Node(_) => None,
        }
    }

    /// Freezes `item`. Iterative depth-first: the explicit path never grows
    /// past `max_depth`, so neither hostile depth nor hostile cycles can
    /// overflow the stack. Frozen nodes keep their value (shared nodes stay
    /// shared) until released.
    pub(super) fn freeze(&mut self, item: Item, max_depth: usize) -> Result<Value, PickleError> {
        let root_id = match item {
            Item::Node(id) => id as usize,
            other => return self.scalar(other).ok_or_else(lost),
        };
        match self.slots.get(root_id).ok_or_else(lost)? {
            Slot::Done(value, _) => return Ok(value.clone()),
            Slot::Unvisited => {}
            Slot::InProgress | Slot::Released => return Err(lost()),
        }
        if max_depth == 0 {
            return Err(too_deep(max_depth, None));
        }
        self.slots.set_in_progress(root_id)?;
        // (node, index of the next child to look at)
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        path.push((root_id, 0));
        let result = self.freeze_path(&mut path, max_depth);
        self.path = path;
        result?;
        match self.slots.get(root_id) {
            Some(Slot::Done(value, _)) => Ok(value.clone()),
            _ => Err(lost()),
        }
    }

    /// The depth-first loop of [`Document::freeze`].
    fn freeze_path(
        &mut self,
        path: &mut Vec<(usize, usize)>,
        max_depth: usize,
    ) -> Result<(), PickleError> {
        while let Some(&mut (id, ref mut next_child)) = path.last_mut() {
            let node = self.arena.get(id).ok_or_else(lost)?;
            let mut descend_into = None;
            while let Some(child) = node.kind.child(*next_child, &self.scalars) {
                if let Item::Node(child_id) = child {
                    let child_id = *child_id as usize;
                    match self.slots.get(child_id).ok_or_else(lost)? {
                        Slot::Done(..) => {}
                        Slot::InProgress => {
                            let container = self
                                .arena
                                .get(child_id)
                                .map_or("container", |n| n.kind.type_name());
                            return Err(PickleError::Cycle { container });
                        }
                        Slot::Unvisited => {
                            descend_into = Some(child_id);
                            break;
                        }
                        Slot::Released => return Err(lost()),
                    }
                }
                *next_child += 1;
            }
            if let Some(child_id) = descend_into {
                if path.len() >= max_depth {
                    return Err(too_deep(max_depth, None));
                }
                self.slots.set_in_progress(child_id)?;
                path.push((child_id, 0));
                continue;
            }

            // Every child is frozen: build this node. Its children vector is
            // no longer needed, so take it (scalars are moved, not cloned).
            let kind = std::mem::replace(
                &mut self.arena.get_mut(id).ok_or_else(lost)?.kind,
                NodeKind::Tuple(Vec::new()),
            );
            let mut height = 0;
            let mut dangling = false;
            let slots = &self.slots;
            let scalars = &self.scalars;
            // Infallible so that `collect` can build each `Arc<[_]>` in one
            // allocation straight from the node's vector.
            let mut resolve = |item: Item| -> Value {
                match item {
                    Item::Node(child_id) => match slots.get(child_id as usize) {
                        Some(Slot::Done(value, child_height)) => {
                            height = height.max(child_height);
                            value.clone()
                        }
                        // Unreachable: the loop above froze every child first.
                        _ => {
                            dangling = true;
                            Value::None
                        }
                    },
                    Item::None => Value::None,
                    Item::Bool(b) => Value::Bool(b),
                    Item::SmallInt(i) => Value::Int(i.into()),
                    Item::WideInt(_) | Item::Scalar(_) => {
                        scalars.value(item).unwrap_or_else(|| {
                            dangling = true;
                            Value::None
                        })
                    }
                }
            };
            let value = match kind {
                NodeKind::List(items) => Value::List(items.into_iter().map(&mut resolve).collect()),
                NodeKind::Tuple(items) => {
                    Value::Tuple(items.into_iter().map(&mut resolve).collect())
                }
                NodeKind::Dict(pairs) => Value::Dict(
                    pairs
                        .into_iter()
                        .map(|(key, value)| (resolve(key), resolve(value)))
                        .collect(),
                ),
                NodeKind::Record { keys, start, len } => {
                    let Some(keys) = scalars.key_sets.get(keys as usize) else {
                        return Err(lost());
                    };
                    Value::Dict(
                        keys.iter()
                            .zip(scalars.record(start, len))
                            .map(|(&key, &value)| (resolve(key), resolve(value)))
                            .collect(),
                    )
                }
                // Every reference was redirected to the canonical list.
                NodeKind::Alias(_) => return Err(lost()),
            };
            if dangling {
                return Err(lost());
            }
            let height = height + 1;
            if height > max_depth {
                return Err(too_deep(max_depth, None));
            }
            self.slots.set_done(id, value, height)?;
            self.frozen_now.push(id);
            path.pop();
        }
        Ok(())
    }
}
