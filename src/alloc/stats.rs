//! `torch.cuda.memory_stats()` counters with PyTorch's names and semantics (spec §2.8, §5).

use std::collections::BTreeMap;

use serde::Serialize;

use super::layout::PoolKind;

/// One counter: `current`, `peak`, and the cumulative `allocated`/`freed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Stat {
    pub current: i64,
    pub peak: i64,
    pub allocated: i64,
    pub freed: i64,
}

impl Stat {
    /// The peak as a figure to show (bytes), where it can be true: not
    /// negative and not below the current value (a source that left the
    /// peak out, whose slot holds 0). Whether the source sent it at all is
    /// the caller's to know.
    pub fn plausible_peak(&self) -> Option<u64> {
        (self.peak >= self.current)
            .then(|| u64::try_from(self.peak).ok())
            .flatten()
    }

    pub fn increase(&mut self, amount: u64) {
        let amount = amount as i64;
        self.current += amount;
        self.peak = self.peak.max(self.current);
        self.allocated += amount;
    }

    pub fn decrease(&mut self, amount: u64) {
        let amount = amount as i64;
        self.current -= amount;
        self.freed += amount;
    }

    fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }

    fn reset_peak(&mut self) {
        self.peak = self.current;
    }
}

/// A counter kept for `all`, `small_pool` and `large_pool`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct StatArray {
    pub all: Stat,
    pub small_pool: Stat,
    pub large_pool: Stat,
}

impl StatArray {
    pub fn increase(&mut self, pool: PoolKind, amount: u64) {
        self.all.increase(amount);
        self.pool_mut(pool).increase(amount);
    }

    pub fn decrease(&mut self, pool: PoolKind, amount: u64) {
        self.all.decrease(amount);
        self.pool_mut(pool).decrease(amount);
    }

    /// Adds a signed change, as `free_block` does for inactive_split.
    pub fn apply_delta(&mut self, pool: PoolKind, delta: i64) {
        if delta > 0 {
            self.increase(pool, delta as u64);
        } else if delta < 0 {
            self.decrease(pool, delta.unsigned_abs());
        }
    }

    pub fn pool(&self, pool: PoolKind) -> &Stat {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }

    fn pool_mut(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    fn each_mut(&mut self) -> [&mut Stat; 3] {
        [&mut self.all, &mut self.small_pool, &mut self.large_pool]
    }

    fn named(&self) -> [(&'static str, &Stat); 3] {
        [
            ("all", &self.all),
            ("small_pool", &self.small_pool),
            ("large_pool", &self.large_pool),
        ]
    }
}

/// Every statistic of one device's allocator (`DeviceStats`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceStats {
    /// Live client allocations.
    pub allocation: StatArray,
    /// cudaMalloc'd segments (expandable segments are not counted).
    pub segment: StatArray,
    /// Allocated plus pending-free blocks.
    pub active: StatArray,
    /// Free blocks inside split segments (not releasable by empty_cache).
    pub inactive_split: StatArray,
    pub allocated_bytes: StatArray,
    pub reserved_bytes: StatArray,
    pub active_bytes: StatArray,
    pub inactive_split_bytes: StatArray,
    /// Sum of the unrounded requests.
    pub requested_bytes: StatArray,
    pub oversize_allocations: Stat,
    pub oversize_segments: Stat,
    pub num_alloc_retries: i64,
    pub num_ooms: i64,
    pub num_sync_all_streams: i64,
    pub num_device_alloc: i64,
    pub num_device_free: i64,
    /// The oversize threshold at construction, -1 when unlimited.
    pub max_split_size: i64,
}

impl DeviceStats {
    fn arrays(&self) -> [(&'static str, &StatArray); 9] {
        [
            ("allocation", &self.allocation),
            ("segment", &self.segment),
            ("active", &self.active),
            ("inactive_split", &self.inactive_split),
            ("allocated_bytes", &self.allocated_bytes),
            ("reserved_bytes", &self.reserved_bytes),
            ("active_bytes", &self.active_bytes),
            ("inactive_split_bytes", &self.inactive_split_bytes),
            ("requested_bytes", &self.requested_bytes),
        ]
    }

    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// The flattened, key-sorted dict `torch.cuda.memory_stats()` returns
    /// (122 keys for the native allocator).
    pub fn memory_stats(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let mut put_stat = |prefix: String, s: &Stat| {
            out.insert(format!("{prefix}.current"), s.current);
            out.insert(format!("{prefix}.peak"), s.peak);
            out.insert(format!("{prefix}.allocated"), s.allocated);
            out.insert(format!("{prefix}.freed"), s.freed);
        };
        for (name, array) in self.arrays() {
            for (pool, stat) in array.named() {
                put_stat(format!("{name}.{pool}"), stat);
            }
        }
        put_stat(
            "oversize_allocations".to_string(),
            &self.oversize_allocations,
        );
        put_stat("oversize_segments".to_string(), &self.oversize_segments);
        out.insert("num_alloc_retries".to_string(), self.num_alloc_retries);
        out.insert("num_ooms".to_string(), self.num_ooms);
        out.insert(
            "num_sync_all_streams".to_string(),
            self.num_sync_all_streams,
        );
        out.insert("num_device_alloc".to_string(), self.num_device_alloc);
        out.insert("num_device_free".to_string(), self.num_device_free);
        out.insert("max_split_size".to_string(), self.max_split_size);
        out
    }

    /// The inverse of [`DeviceStats::memory_stats`]: rebuilds the counters
    /// from PyTorch's flat dotted keys (`"allocated_bytes.all.current"`, …),
    /// as a live probe sends them. Keys this struct does not know (newer
    /// PyTorch versions, other allocators) are ignored; missing keys stay 0.
    /// Returns the stats and how many keys were recognised, so a caller can
    /// tell an empty or foreign dict from a real one.
    pub fn from_memory_stats<'a>(
        entries: impl IntoIterator<Item = (&'a str, i64)>,
    ) -> (Self, usize) {
        let mut out = DeviceStats::default();
        let mut known = 0;
        for (key, value) in entries {
            if let Some(slot) = out.slot_mut(key) {
                *slot = value;
                known += 1;
            }
        }
        (out, known)
    }

    /// The field a `memory_stats()` key names, if any.
    fn slot_mut(&mut self, key: &str) -> Option<&mut i64> {
        fn stat_field<'s>(stat: &'s mut Stat, field: &str) -> Option<&'s mut i64> {
            match field {
                "current" => Some(&mut stat.current),
                "peak" => Some(&mut stat.peak),
                "allocated" => Some(&mut stat.allocated),
                "freed" => Some(&mut stat.freed),
                _ => None,
            }
        }
        match key {
            "num_alloc_retries" => return Some(&mut self.num_alloc_retries),
            "num_ooms" => return Some(&mut self.num_ooms),
            "num_sync_all_streams" => return Some(&mut self.num_sync_all_streams),
            "num_device_alloc" => return Some(&mut self.num_device_alloc),
            "num_device_free" => return Some(&mut self.num_device_free),
            "max_split_size" => return Some(&mut self.max_split_size),
            _ => {}
        }
        let mut parts = key.split('.');
        let name = parts.next()?;
        let second = parts.next()?;
        match name {
            "oversize_allocations" | "oversize_segments" => {
                if parts.next().is_some() {
                    return None;
                }
                let stat = if name == "oversize_allocations" {
                    &mut self.oversize_allocations
                } else {
                    &mut self.oversize_segments
                };
                return stat_field(stat, second);
            }
            _ => {}
        }
        let field = parts.next()?;
        if parts.next().is_some() {
            return None;
        }
        let names = [
            "allocation",
            "segment",
            "active",
            "inactive_split",
            "allocated_bytes",
            "reserved_bytes",
            "active_bytes",
            "inactive_split_bytes",
            "requested_bytes",
        ];
        let i = names.iter().position(|&n| n == name)?;
        let array = self.arrays_mut().into_iter().nth(i)?;
        let stat = match second {
            "all" => &mut array.all,
            "small_pool" => &mut array.small_pool,
            "large_pool" => &mut array.large_pool,
            _ => return None,
        };
        stat_field(stat, field)
    }

    /// `reset_accumulated_memory_stats()`: zero every allocated/freed and the
    /// event counters.
    pub fn reset_accumulated(&mut self) {
        for array in self.arrays_mut() {
            for stat in array.each_mut() {
                stat.reset_accumulated();
            }
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    /// `reset_peak_memory_stats()`: every peak becomes its current value.
    pub fn reset_peak(&mut self) {
        for array in self.arrays_mut() {
            for stat in array.each_mut() {
                stat.reset_peak();
            }
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stats_has_the_122_native_keys() {
        let stats = DeviceStats::default();
        let keys = stats.memory_stats();
        assert_eq!(keys.len(), 122);
        assert!(keys.contains_key("allocated_bytes.all.current"));
        assert!(keys.contains_key("inactive_split_bytes.large_pool.freed"));
        assert!(keys.contains_key("oversize_segments.peak"));
        assert!(keys.contains_key("num_sync_all_streams"));
    }

    #[test]
    fn from_memory_stats_inverts_memory_stats_and_ignores_unknown_keys() {
        let mut d = DeviceStats::default();
        d.allocated_bytes.increase(PoolKind::Large, 1 << 30);
        d.reserved_bytes.increase(PoolKind::Small, 2 << 20);
        d.oversize_segments.increase(3);
        d.num_ooms = 2;
        d.max_split_size = -1;
        let map = d.memory_stats();
        let mut entries: Vec<(&str, i64)> = map.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        entries.push(("some_future_counter.all.current", 99));
        entries.push(("allocated_bytes.all.current.extra", 99));
        let (back, known) = DeviceStats::from_memory_stats(entries);
        assert_eq!(back, d);
        assert_eq!(known, 122);
    }

    #[test]
    fn peak_survives_decrease_until_reset() {
        let mut s = StatArray::default();
        s.increase(PoolKind::Large, 10);
        s.decrease(PoolKind::Large, 4);
        assert_eq!(s.all.peak, 10);
        assert_eq!(s.large_pool.current, 6);
        assert_eq!(s.small_pool.current, 0);
        let mut d = DeviceStats {
            reserved_bytes: s,
            ..Default::default()
        };
        d.reset_peak();
        assert_eq!(d.reserved_bytes.all.peak, 6);
        d.reset_accumulated();
        assert_eq!(d.reserved_bytes.all.allocated, 0);
        assert_eq!(d.reserved_bytes.all.current, 6);
    }
}
