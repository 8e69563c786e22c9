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
    Int(i128),
    Str(&'d Arc<str>),
    /// A container that was frozen before (a shared frames list).
    Frozen(&'d Value),
    /// Anything else (bool, float, bytes, a container not frozen yet).
    Other,
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

    fn field(&self, value: Item) -> Field<'d> {
        let document: &'d Document = self.document;
        match value {
            Item::None => Field::None,
            Item::SmallInt(i) => Field::Int(i.into()),
            Item::WideInt(id) => document
                .scalars
                .ints
                .get(id as usize)
                .map_or(Field::Other, |&i| Field::Int(i.into())),
            Item::Scalar(id) => match document.scalars.values.get(id as usize) {
                Some(Value::Int(i)) => Field::Int(*i),
                Some(Value::Str(s)) => Field::Str(s),
                _ => Field::Other,
            },
            Item::Node(id) => match document.slots.get(id as usize) {
                // Within the depth limit `freeze_entry` would apply.
                Some(Slot::Done(value, height))
                    if height.saturating_add(1) <= document.max_depth.saturating_sub(3) =>
                {
                    Field::Frozen(value)
                }
                _ => Field::Other,
            },
            Item::Bool(_) => Field::Other,
        }
    }
}

impl Document {
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
    pub(crate) fn flat_entry(&self, trace: &DeferredTrace, index: usize) -> Option<FlatEntry<'_>> {
        let Some(&Item::Node(id)) = trace.0.get(index) else {
            return None;
        };
        let id = id as usize;
        // Below 2 levels even a flat entry is too deep for `freeze_entry`.
        if self.max_depth.saturating_sub(3) < 2
            || !matches!(self.slots.get(id), Some(Slot::Unvisited))
        {
            return None;
        }
        let pairs = DictView::of(&self.arena.get(id)?.kind, &self.scalars)?;
        Some(FlatEntry {
            document: self,
            pairs,
        })
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
