//! `replay --verify` on a shared snapshot with structure-aware edits (see
//! `common/mutate.rs`): it must finish with a verdict, never panic or hang.
#![no_main]

#[path = "common/mutate.rs"]
mod mutate;

use libfuzzer_sys::fuzz_target;
use vramtop::snapshot::replay::verify;

fuzz_target!(|data: &[u8]| {
    if let Some((snapshot, _)) = mutate::mutated(data) {
        let report = verify(&snapshot);
        let _ = report.full_match();
    }
});
