//! The reader on pickles written by CPython's own pickler, not by us.
//!
//! `tests/fixtures/cpython_snapshots.py` writes random snapshot-shaped
//! files the way PyTorch does (`pickle.dumps`, protocols 2-5, some through
//! `pickletools.optimize`) with what a real recording varies: frame lists
//! shared or copied, one dict object twice in a trace, key orders, optional
//! keys, numbers at every int opcode width, traces across the pickler's
//! 1000-item APPENDS batches. Every read path must agree on each file (the
//! entry-by-entry fast path, the whole value tree, the file reader, the
//! final-state reader) and with the counts Python computed from its objects,
//! then go through what a user runs next: the summary, `replay`, `whatif`
//! and the viewer.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::skip::{Prerequisite, skip};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use vramtop::alloc::{AllocatorConfig, TraceAction};
use vramtop::app::keymap::Keymap;
use vramtop::app::viewer::ViewerState;
use vramtop::snapshot::pickle::{Limits, parse};
use vramtop::snapshot::replay::verify;
use vramtop::snapshot::sites::Grouping;
use vramtop::snapshot::summary::{sites_report, summarize};
use vramtop::snapshot::whatif::{WhatIfError, WhatIfSetting, whatif};
use vramtop::snapshot::{
    Snapshot, SnapshotFormat, read_snapshot, read_snapshot_file, read_snapshot_file_final_state,
    snapshot_from_value,
};
use vramtop::ui::{Theme, render_viewer};

/// Files per run: enough for every protocol, sharing mode and optional key
/// to turn up many times (about 2 s of Python).
const FILES: usize = 60;

/// Writes the files for `seed` into a fresh folder; `None` (with a skip
/// note) when python3 cannot run.
fn generate(seed: u64) -> Option<PathBuf> {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cpython-snapshots-{seed}"));
    let _ = std::fs::remove_dir_all(&out);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cpython_snapshots.py");
    let run = Command::new("python3")
        .arg(&script)
        .arg(&out)
        .arg(FILES.to_string())
        .arg(seed.to_string())
        .output();
    match run {
        Ok(o) if o.status.success() => Some(out),
        Ok(o) => panic!(
            "the generator failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => {
            skip(
                "the reader's checks on CPython-written pickles",
                &format!("python3 not runnable ({e})"),
                Prerequisite::ProvidedByCi,
            );
            None
        }
    }
}

fn pickles(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("the generator's folder lists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "pickle"))
        .collect();
    files.sort();
    files
}

/// The counts Python wrote beside `pickle`, checked against `snapshot`.
fn check_against_python(pickle: &Path, snapshot: &Snapshot) {
    let name = pickle.display();
    let text = std::fs::read_to_string(pickle.with_extension("json")).expect("the sidecar reads");
    let want: serde_json::Value = serde_json::from_str(&text).expect("the sidecar parses");
    let number = |key: &str| {
        want[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}: {key}"))
    };
    let format = match want["format"].as_str() {
        Some("segment_list") => SnapshotFormat::SegmentList,
        _ => SnapshotFormat::DumpSnapshot,
    };
    assert_eq!(snapshot.format, format, "{name}");
    assert_eq!(snapshot.segments.len() as u64, number("segments"), "{name}");
    let blocks = snapshot
        .segments
        .iter()
        .map(|s| s.blocks.len() as u64)
        .sum::<u64>();
    assert_eq!(blocks, number("blocks"), "{name}");
    let block_frames: u64 = snapshot
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .map(|b| b.frames.len() as u64)
        .sum();
    assert_eq!(block_frames, number("block_frames"), "{name}");
    let lengths: Vec<u64> = snapshot
        .device_traces
        .iter()
        .map(|t| t.len() as u64)
        .collect();
    let want_lengths: Vec<u64> = want["trace_lengths"]
        .as_array()
        .expect("trace_lengths is a list")
        .iter()
        .filter_map(serde_json::Value::as_u64)
        .collect();
    assert_eq!(lengths, want_lengths, "{name}");
    let entries = || snapshot.device_traces.iter().flatten();
    let trace_frames: u64 = entries().map(|e| e.frames.len() as u64).sum();
    assert_eq!(trace_frames, number("trace_frames"), "{name}");
    let trace_bytes: u64 = entries().map(|e| e.size).sum();
    assert_eq!(trace_bytes, number("trace_bytes"), "{name}");
}

fn check_files(seed: u64) {
    let Some(dir) = generate(seed) else { return };
    let files = pickles(&dir);
    assert_eq!(files.len(), FILES, "the generator wrote every file");
    for path in &files {
        let name = path.display();
        let bytes = std::fs::read(path).expect("a generated file reads");
        let tree = parse(&bytes, &Limits::default())
            .map_err(|e| e.to_string())
            .and_then(|v| snapshot_from_value(&v).map_err(|e| e.to_string()));
        let tree = tree.unwrap_or_else(|e| panic!("{name}: the value tree fails: {e}"));
        let in_place = read_snapshot(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(in_place, tree, "{name}: entry by entry against the tree");
        let from_file = read_snapshot_file(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(from_file, tree, "{name}: the file reader against the tree");
        let final_state =
            read_snapshot_file_final_state(path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(
            final_state.segments, tree.segments,
            "{name}: final state only"
        );
        check_against_python(path, &tree);
        // What a user runs on the file next: the summary with its sites at
        // the peak (the start-state search's replays) and the replay
        // check, on traces no program made. They must end, whatever the
        // findings.
        let tree = Arc::new(tree);
        let summary = summarize(&tree);
        assert_eq!(summary.total.segments, tree.segments.len() as u64, "{name}");
        let sites = sites_report(&tree, Grouping::default(), 5);
        assert!(
            sites.sites.iter().all(|d| d.at_end.sites.len() <= 5),
            "{name}"
        );
        let report = verify(&tree);
        let entries: usize = tree.device_traces.iter().map(Vec::len).sum();
        assert_eq!(
            (report.segments, report.trace_entries),
            (tree.segments.len(), entries),
            "{name}"
        );
        // `whatif` under the recorded settings and a small capacity, and
        // the viewer opened and drawn at both sizes the guide tries.
        let expandable = WhatIfSetting {
            conf: "expandable_segments:True".to_string(),
            config: AllocatorConfig::parse("expandable_segments:True").expect("valid"),
        };
        match whatif(&tree, &[expandable], Some(1 << 30)) {
            // The original, then the one setting, for every device replayed
            // (the setting's run refused when the start does not fit 1 GiB).
            Ok(w) => assert!(
                w.devices
                    .iter()
                    .all(|d| d.runs.len() + d.not_replayed.len() == 2),
                "{name}"
            ),
            // Refused only for a trace without a program call in it.
            Err(WhatIfError::NoTrace) => assert!(
                tree.device_traces
                    .iter()
                    .flatten()
                    .all(|e| !matches!(e.action, TraceAction::Alloc | TraceAction::FreeRequested)),
                "{name}"
            ),
            Err(e) => panic!("{name}: {e}"),
        }
        let viewer = ViewerState::new(name.to_string(), (*tree).clone());
        for (width, height) in [(80, 24), (120, 40)] {
            let area = Rect::new(0, 0, width, height);
            let mut buf = Buffer::empty(area);
            render_viewer(
                area,
                &mut buf,
                &viewer,
                &Keymap::default(),
                &Theme::colored(),
            );
            let screen: String = buf.content().iter().map(|c| c.symbol()).collect();
            assert!(screen.contains("GPU"), "{name} at {width}x{height}");
        }
    }
}

#[test]
fn cpython_written_snapshots_read_alike_on_every_path_and_as_python_counts() {
    check_files(1);
}

#[test]
fn cpython_written_snapshots_of_another_seed_read_alike_too() {
    check_files(2);
}
