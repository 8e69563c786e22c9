//! The snapshot-specific part of the document: the per-device trace lists
//! are taken out of the tree and read one entry at a time, so that a long
//! trace never exists as values all at once.

use std::sync::Arc;

use super::document::{Document, Slot, lost};
use super::error::PickleError;
use super::parser::{DictView, Item, NodeKind};
use super::value::Value;

/// Where the trace entries of one device are, when deferred: the items of
/// its list, in order.
pub(crate) struct DeferredTrace(Vec<Item>);

impl DeferredTrace {
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// A field of a flat dict read straight from the arena (see
/// [`Document::flat_entry`]): no value is built and no reference count is
/// touched.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Field<'d> {
    None,
    Bool(bool),
    /// An int that fits `i64`; a wider one is [`Field::Other`] (the general
    /// path reads it exactly): a field is then 16 bytes, not 32, and a
    /// trace entry's fields are copied about a dozen times as it is read.
    Int(i64),
    Str(&'d Arc<str>),
    /// A container that was frozen before (a shared frames list).
    Frozen(&'d Value),
    /// A container not frozen (a traceback met for the first time, or only
    /// ever in the trace), by its node: [`FlatEntry::list_in_place`] reads
    /// it if it is a list.
    Unfrozen(u32),
    /// Anything else (float, bytes, a container frozen past the depth
    /// limit or being frozen).
    Other,
}

/// The items of a list read in place (see [`FlatEntry::list_in_place`]).
#[derive(Clone, Copy)]
pub(crate) struct ListInPlace<'d> {
    document: &'d Document,
    /// The list's node: the same node is the same list wherever it is
    /// referred to.
    node: u32,
    items: &'d [Item],
}

/// One item of a [`ListInPlace`].
pub(crate) enum ListItem<'d> {
    /// A container frozen before: its value.
    Frozen(&'d Value),
    /// A dict of scalars not frozen: read in place as an entry is, known by
    /// its node (the same node is the same dict wherever it is referred to).
    Flat(u32, FlatEntry<'d>),
}

impl std::fmt::Debug for ListInPlace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ListInPlace({} items)", self.items.len())
    }
}

impl<'d> ListInPlace<'d> {
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn node(&self) -> u32 {
        self.node
    }

    /// Whether every item is a frozen container or an unfrozen dict of
    /// scalars, within the depth limit `freeze_entry` would apply (entry,
    /// list, item): then [`ListInPlace::items`] reads them all.
    pub(crate) fn readable(&self) -> bool {
        let document: &'d Document = self.document;
        let limit = document.max_depth.saturating_sub(3);
        self.items.iter().all(|item| {
            let Item::Node(child) = item else {
                return false;
            };
            match document.slots.get(*child as usize) {
                Some(Slot::Done(_, height)) => height.saturating_add(2) <= limit,
                // A dict of scalars is 1 high.
                Some(Slot::Unvisited) => limit >= 3 && document.is_scalar_dict(*child as usize),
                _ => false,
            }
        })
    }

    /// The items, in order, each one frozen or a flat dict (the others are
    /// left out: check [`ListInPlace::readable`] first).
    pub(crate) fn items(self) -> impl Iterator<Item = ListItem<'d>> + Clone + 'd {
        let document: &'d Document = self.document;
        self.items.iter().filter_map(move |item| {
            let Item::Node(id) = item else {
                return None;
            };
            match document.slots.get(*id as usize) {
                Some(Slot::Done(value, _)) => Some(ListItem::Frozen(value)),
                Some(Slot::Unvisited) => document
                    .unvisited_dict(*id as usize)
                    .map(|dict| ListItem::Flat(*id, dict)),
                _ => None,
            }
        })
    }

    /// Each item as a dict read in place: `None` for an item that is not
    /// a dict never frozen (the caller then leaves the list to the general
    /// path).
    pub(crate) fn dict_items(self) -> impl Iterator<Item = Option<FlatEntry<'d>>> + 'd {
        let document: &'d Document = self.document;
        self.items.iter().map(move |item| {
            let Item::Node(id) = item else {
                return None;
            };
            document.unvisited_dict(*id as usize)
        })
    }
}

/// A trace entry that is a dict not frozen yet, read in place.
pub(crate) struct FlatEntry<'d> {
    document: &'d Document,
    pairs: DictView<'d>,
}

impl<'d> FlatEntry<'d> {
    /// Every pair whose key is a string, in order (a repeated key appears
    /// again later, so whoever keeps the last one sees what
    /// `Value::get` returns). One walk instead of one per key.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&'d str, Field<'d>)> + '_ {
        self.pairs
            .pairs()
            .filter_map(|(k, v)| Some((self.key_str(&k)?, self.field(v))))
    }

    /// For an entry stored as a record (see [`DictView`]), its key set:
    /// entries with the same set have the same keys in the same order, so
    /// what a reader makes of the keys can be kept per set.
    pub(crate) fn key_set(&self) -> Option<u32> {
        match self.pairs {
            DictView::Record(set, ..) => Some(set),
            DictView::Pairs(_) => None,
        }
    }

    /// The keys in order, `None` for a key that is not a string.
    pub(crate) fn keys(&self) -> impl Iterator<Item = Option<&'d str>> + '_ {
        self.pairs.pairs().map(|(k, _)| self.key_str(&k))
    }

    /// The values in order, read as [`FlatEntry::fields`] reads them.
    pub(crate) fn values(&self) -> impl Iterator<Item = Field<'d>> + '_ {
        self.pairs.pairs().map(|(_, v)| self.field(v))
    }

    /// The value of the pair at `index`, read as [`FlatEntry::values`]
    /// reads it. Inlined, unlike that iterator: a trace entry's fields are
    /// read in a loop where a call per value, returning a 32-byte field
    /// through memory, stalled on every read-back (perf).
    #[inline]
    pub(crate) fn value(&self, index: usize) -> Option<Field<'d>> {
        self.pairs.pair(index).map(|(_, v)| self.field(v))
    }

    /// The list at `node` (of a [`Field::Unfrozen`]) to read in place, if
    /// it is a list. Whether its items can be read in place is checked by
    /// [`ListInPlace::readable`].
    pub(crate) fn list_in_place(&self, node: u32) -> Option<ListInPlace<'d>> {
        let document: &'d Document = self.document;
        let NodeKind::List(items) = &document.arena.get(node as usize)?.kind else {
            return None;
        };
        Some(ListInPlace {
            document,
            node,
            items,
        })
    }

    /// The two ints of the list or tuple at `node` (of a
    /// [`Field::Unfrozen`]: a pool id), read in place.
    pub(crate) fn int_pair(&self, node: u32) -> Option<(i128, i128)> {
        let document: &'d Document = self.document;
        if !matches!(document.slots.get(node as usize), Some(Slot::Unvisited)) {
            return None;
        }
        let (NodeKind::Tuple(items) | NodeKind::List(items)) =
            &document.arena.get(node as usize)?.kind
        else {
            return None;
        };
        let int = |item: &Item| match document.scalar_field(*item) {
            Field::Int(i) => Some(i128::from(i)),
            _ => None,
        };
        match items.as_slice() {
            [first, second] => Some((int(first)?, int(second)?)),
            _ => None,
        }
    }

    fn key_str(&self, key: &Item) -> Option<&'d str> {
        let document: &'d Document = self.document;
        match key {
            Item::Scalar(id) => match document.scalars.values.get(*id as usize) {
                Some(Value::Str(s)) => Some(s),
                _ => None,
            },
            _ => None,
        }
    }

    /// Inlined: called for every value of every trace entry, and its
    /// 32-byte result read back through memory stalled the caller (perf).
    #[inline]
    fn field(&self, value: Item) -> Field<'d> {
        let document: &'d Document = self.document;
        match value {
            Item::Node(id) => match document.slots.get(id as usize) {
                // Within the depth limit `freeze_entry` would apply.
                Some(Slot::Done(value, height))
                    if height.saturating_add(1) <= document.max_depth.saturating_sub(3) =>
                {
                    Field::Frozen(value)
                }
                Some(Slot::Unvisited) => Field::Unfrozen(id),
                _ => Field::Other,
            },
            scalar => document.scalar_field(scalar),
        }
    }
}

impl Document {
    /// A scalar item as a [`Field`] (a node is [`Field::Other`]).
    #[inline]
    fn scalar_field(&self, item: Item) -> Field<'_> {
        match item {
            Item::None => Field::None,
            Item::Bool(b) => Field::Bool(b),
            Item::SmallInt(i) => Field::Int(i.into()),
            Item::WideInt(id) => self
                .scalars
                .ints
                .get(id as usize)
                .map_or(Field::Other, |&i| Field::Int(i)),
            Item::Scalar(id) => match self.scalars.values.get(id as usize) {
                Some(Value::Int(i)) => i64::try_from(*i).map_or(Field::Other, Field::Int),
                Some(Value::Str(s)) => Field::Str(s),
                _ => Field::Other,
            },
            Item::Node(_) => Field::Other,
        }
    }

    /// Node `id` read in place, if it is a dict never frozen.
    #[inline]
    fn unvisited_dict(&self, id: usize) -> Option<FlatEntry<'_>> {
        if !matches!(self.slots.get(id), Some(Slot::Unvisited)) {
            return None;
        }
        let pairs = DictView::of(&self.arena.get(id)?.kind, &self.scalars)?;
        Some(FlatEntry {
            document: self,
            pairs,
        })
    }

    /// The root dict read in place, with the index of the pair of `key`:
    /// when the root is a dict nothing refers to, never frozen, with `key`
    /// once.
    pub(crate) fn root_in_place(&self, key: &str) -> Option<(FlatEntry<'_>, usize)> {
        let Item::Node(root) = self.root else {
            return None;
        };
        if self.in_degree.get(root as usize) != Some(&0) {
            return None;
        }
        let entry = self.unvisited_dict(root as usize)?;
        let mut found = entry
            .keys()
            .enumerate()
            .filter(|(_, k)| *k == Some(key))
            .map(|(index, _)| index);
        let index = found.next()?;
        let once = found.next().is_none();
        drop(found);
        once.then_some((entry, index))
    }

    /// The root read in place when it is a list nothing refers to, never
    /// frozen (a bare list of segments).
    pub(crate) fn root_list_in_place(&self) -> Option<ListInPlace<'_>> {
        let Item::Node(root) = self.root else {
            return None;
        };
        if self.in_degree.get(root as usize) != Some(&0)
            || !matches!(self.slots.get(root as usize), Some(Slot::Unvisited))
        {
            return None;
        }
        let NodeKind::List(items) = &self.arena.get(root as usize)?.kind else {
            return None;
        };
        Some(ListInPlace {
            document: self,
            node: root,
            items,
        })
    }

    /// Sets the value of the root dict's pair `index` to None, so that
    /// [`Document::freeze_root`] leaves out what the caller read in place.
    pub(crate) fn detach_root_value(&mut self, index: usize) {
        let Item::Node(root) = self.root else {
            return;
        };
        match self.arena.get_mut(root as usize).map(|n| &mut n.kind) {
            Some(NodeKind::Dict(pairs)) => {
                if let Some(pair) = pairs.get_mut(index) {
                    pair.1 = Item::None;
                }
            }
            Some(&mut NodeKind::Record { start, len, .. }) => {
                if let Some(value) = self.scalars.record_mut(start, len).get_mut(index) {
                    *value = Item::None;
                }
            }
            _ => {}
        }
    }

    /// The nesting limit (see [`Limits::max_depth`](super::Limits)).
    pub(crate) fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Whether node `id` is a dict whose keys and values are all scalars.
    fn is_scalar_dict(&self, id: usize) -> bool {
        let Some(node) = self.arena.get(id) else {
            return false;
        };
        DictView::of(&node.kind, &self.scalars).is_some_and(|pairs| {
            pairs
                .pairs()
                .all(|(k, v)| !matches!(k, Item::Node(_)) && !matches!(v, Item::Node(_)))
        })
    }

    /// Takes the items of every per-device trace list out of the tree, so
    /// that [`Document::freeze_root`] sees them empty: when the root is a
    /// dict nothing refers to, whose `device_traces` is a list of lists,
    /// each referred to only there. `None` (nothing taken) for any other
    /// shape: then nothing an entry refers to can contain the entry.
    pub(crate) fn defer_device_traces(&mut self) -> Option<Vec<DeferredTrace>> {
        let pairs = DictView::of(self.node_kind(self.root)?, &self.scalars)?;
        // The last pair with the key wins, as in Python (and `Value::get`).
        let traces = pairs.pairs().rev().find_map(|(key, value)| match key {
            Item::Scalar(id) => match self.scalars.values.get(id as usize) {
                Some(Value::Str(name)) if &**name == "device_traces" => Some(value),
                _ => None,
            },
            _ => None,
        })?;
        let NodeKind::List(devices) = self.node_kind(traces)? else {
            return None;
        };
        // Nothing may refer back to the root either: an entry that did would
        // be a cycle, which only the whole-tree freeze can see.
        let root_unreferenced = match self.root {
            Item::Node(id) => self.in_degree.get(id as usize) == Some(&0),
            _ => false,
        };
        let deferrable = root_unreferenced
            && self.referred_once(traces)
            && devices.iter().all(|&d| {
                self.referred_once(d) && matches!(self.node_kind(d), Some(NodeKind::List(_)))
            });
        if !deferrable {
            return None;
        }
        let ids: Vec<usize> = devices
            .iter()
            .filter_map(|d| match d {
                Item::Node(id) => Some(*id as usize),
                _ => None,
            })
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let items = match self.arena.get_mut(id).map(|n| &mut n.kind) {
                Some(NodeKind::List(items)) => std::mem::take(items),
                _ => Vec::new(),
            };
            out.push(DeferredTrace(items));
        }
        Some(out)
    }

    /// Trace entry `index` of a deferred trace, as a value. Entries sit 4
    /// levels down (root dict, device_traces, the device's list, the
    /// entry), so they get the depth limit less 3.
    pub(crate) fn freeze_entry(
        &mut self,
        trace: &DeferredTrace,
        index: usize,
    ) -> Result<Value, PickleError> {
        let item = trace.0.get(index).copied().ok_or_else(lost)?;
        self.frozen_now.clear();
        let max_depth = self.max_depth.saturating_sub(3);
        self.freeze(item, max_depth)
    }

    /// Trace entry `index` read in place, when it is a dict that was not
    /// frozen yet (nothing else refers to it): the snapshot reader converts
    /// such an entry from its fields, without building its value, and falls
    /// back to [`Document::freeze_entry`] for anything else.
    ///
    /// Inlined with what it calls: its 48-byte result, returned through
    /// memory once per entry, stalled the caller's read of it (perf).
    #[inline]
    pub(crate) fn flat_entry(&self, trace: &DeferredTrace, index: usize) -> Option<FlatEntry<'_>> {
        let Some(&Item::Node(id)) = trace.0.get(index) else {
            return None;
        };
        // Below 2 levels even a flat entry is too deep for `freeze_entry`.
        if self.max_depth.saturating_sub(3) < 2 {
            return None;
        }
        self.unvisited_dict(id as usize)
    }

    /// Drops the values of the nodes the last [`Document::freeze_entry`]
    /// made that nothing else refers to.
    pub(crate) fn release_entry(&mut self) {
        for id in std::mem::take(&mut self.frozen_now) {
            if self.in_degree.get(id).is_some_and(|&d| d <= 1) {
                self.slots.release(id);
            }
        }
    }
}
