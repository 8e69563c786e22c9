//! The what-if replay (`replay --alloc-conf … --capacity …`) on a shared
//! snapshot with structure-aware edits (see `common/mutate.rs`): under the
//! recorded settings, other settings and a capacity taken from the input,
//! it must finish with a report or a typed error.
#![no_main]

#[path = "common/mutate.rs"]
mod mutate;

use libfuzzer_sys::fuzz_target;
use vramtop::alloc::AllocatorConfig;
use vramtop::snapshot::whatif::{WhatIfSetting, whatif};

const CONFS: [&str; 4] = [
    "expandable_segments:True",
    "max_split_size_mb:64",
    "roundup_power2_divisions:4,garbage_collection_threshold:0.6",
    "expandable_segments:False",
];

fuzz_target!(|data: &[u8]| {
    let Some((snapshot, rest)) = mutate::mutated(data) else {
        return;
    };
    let pick = rest.first().copied().unwrap_or(0);
    let settings: Vec<WhatIfSetting> = CONFS
        .iter()
        .enumerate()
        .filter(|(i, _)| pick & (1 << i) != 0)
        .filter_map(|(_, conf)| {
            Some(WhatIfSetting {
                conf: conf.to_string(),
                config: AllocatorConfig::parse(conf).ok()?,
            })
        })
        .collect();
    let capacity = match pick >> 4 {
        0 => None,
        1 => Some(0),
        2 => Some(u64::MAX),
        n => Some(u64::from(n) << 28),
    };
    let _ = whatif(&snapshot, &settings, capacity);
});
