//! `open --summary` of a shared snapshot with structure-aware edits of its
//! layout and trace (see `common/mutate.rs`), and of whatever the reader
//! accepts from the remaining bytes: it must finish without a panic.
#![no_main]

#[path = "common/mutate.rs"]
mod mutate;

use libfuzzer_sys::fuzz_target;
use vramtop::snapshot::check_invariants;
use vramtop::snapshot::read_snapshot;
use vramtop::snapshot::summary::summarize;

fuzz_target!(|data: &[u8]| {
    if let Some((snapshot, rest)) = mutate::mutated(data) {
        let _ = summarize(&snapshot);
        let _ = check_invariants(&snapshot);
        if let Ok(read) = read_snapshot(rest) {
            let _ = summarize(&read);
        }
    }
});
