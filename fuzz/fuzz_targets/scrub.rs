//! The viewer's states (`vramtop open`) of a shared snapshot with
//! structure-aware edits (see `common/mutate.rs`): rebuilding them, seeking
//! to cursors the input picks and laying out each state must finish
//! without a panic.
#![no_main]

#[path = "common/mutate.rs"]
mod mutate;

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use vramtop::snapshot::scrub::Scrub;

fuzz_target!(|data: &[u8]| {
    let Some((snapshot, rest)) = mutate::mutated(data) else {
        return;
    };
    let scrub = Scrub::new(Arc::new(snapshot));
    for device in &scrub.devices {
        let len = device.len();
        let cursors = rest
            .iter()
            .take(16)
            .map(|&b| len * usize::from(b) / 255)
            .chain([0, len]);
        for cursor in cursors {
            let state = device.state_at(cursor);
            let _ = device.layout_of(&state);
            let _ = state.recomputed_totals();
        }
        let _ = device.peaks();
    }
});
