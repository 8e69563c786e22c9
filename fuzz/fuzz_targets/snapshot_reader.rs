//! Feeds arbitrary bytes to the snapshot reader: it must return `Ok` or a
//! `SnapshotError`, never panic, overflow the stack or allocate without
//! bound. Whatever it accepts must survive the invariant checks and must
//! read back equal after going through the writer. Reading the parsed
//! document in place (segments, blocks, trace entries) must give what
//! converting the whole value tree gives.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vramtop::snapshot::{
    Limits, check_invariants, pickle, read_snapshot, snapshot_from_value,
    snapshot_to_bytes,
};

fuzz_target!(|data: &[u8]| {
    let read = read_snapshot(data);
    if let Ok(tree) = pickle::parse(data, &Limits::default()) {
        match (&read, snapshot_from_value(&tree)) {
            (Ok(a), Ok(b)) => assert!(
                *a == b || format!("{a:?}") == format!("{b:?}"),
                "read in place differs from the value tree:\n{a:?}\n{b:?}"
            ),
            // Not compared: with two bad fields the reader, which converts
            // the trace last, may name another one first.
            (Err(_), Err(_)) => {}
            // Only the memory budget (which the tree's conversion does not
            // apply) may refuse what the tree accepts.
            (Err(e), Ok(_)) if e.to_string().contains("memory") => {}
            (a, b) => panic!("read in place {a:?}, value tree {b:?}"),
        }
    }
    if let Ok(snapshot) = read {
        let _ = check_invariants(&snapshot);
        let mut accepted = snapshot;
        // Unknown trace actions are dropped on reading; the writer cannot
        // bring them back.
        accepted.skipped_trace_entries = 0;
        accepted.skipped_trace_actions = Default::default();
        let written = snapshot_to_bytes(&accepted);
        // NaN never equals itself: compare such settings by their bits.
        let nan = accepted
            .allocator_settings
            .as_ref()
            .is_some_and(|s| s.garbage_collection_threshold.is_nan());
        match read_snapshot(&written) {
            Ok(again) if nan => assert_eq!(again.segments, accepted.segments),
            // A NaN elsewhere (an unknown setting's value) prints alike:
            // equal up to NaN is equal in Debug.
            Ok(again) => assert!(
                again == accepted || format!("{again:?}") == format!("{accepted:?}"),
                "written snapshot reads back different:\n{again:?}\n{accepted:?}"
            ),
            Err(e) => panic!("written snapshot does not read back: {e}"),
        }
    }
});
