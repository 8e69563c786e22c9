//! The snapshot writer: every real snapshot in `../shared/snapshots` reads
//! back equal after writing, Python's own unpickler (restricted: no globals)
//! loads what we write with PyTorch's keys and types, and
//! `shared/tools/inspect_snapshot.py` reports the same figures for a written
//! file as for its original.

use common::skip::{Prerequisite, skip};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use vramtop::snapshot::{
    Snapshot, WriteOptions, read_snapshot, snapshot_to_bytes, write_snapshot_file,
    write_snapshot_with,
};

fn shared_snapshots(dir: &Path) -> Vec<(String, PathBuf)> {
    let files = common::snapshot_files_in(dir);
    assert!(files.len() >= 10, "expected the shared snapshots");
    files
}

fn read(path: &Path) -> Snapshot {
    let bytes = std::fs::read(path).unwrap();
    read_snapshot(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `snapshot` written with a fresh frame list per entry (PyTorch's layout)
/// instead of memoised shared ones.
fn with_fresh_frame_lists(snapshot: &Snapshot) -> Vec<u8> {
    let mut out = Vec::new();
    write_snapshot_with(
        snapshot,
        &mut out,
        &WriteOptions {
            fresh_frame_lists: true,
        },
    )
    .unwrap();
    out
}

/// A scratch directory of this test binary, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vramtop-writer-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn every_shared_snapshot_reads_back_equal_after_writing() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    for (name, path) in shared_snapshots(&dir) {
        // The writer writes today's form (`frames`, `requested_size`), not
        // torch 2.0's per-block `history`: the copies are of that form,
        // whatever form the original was recorded in.
        let original = vramtop::snapshot::Snapshot {
            block_history: false,
            ..read(&path)
        };
        let written = snapshot_to_bytes(&original);
        let again = read_snapshot(&written).unwrap_or_else(|e| panic!("{name} written: {e}"));
        assert_eq!(again, original, "{name}");
        // Writing reaches a fixed point: equal frames become one memoised
        // object, so a copy may share more than its original (and the copy
        // of that copy more again, as the reader interns lists by their
        // frame objects), but never less, and soon nothing changes.
        let mut previous = written.clone();
        let mut copy = again.clone();
        let mut passes = 0;
        loop {
            let bytes = snapshot_to_bytes(&copy);
            assert!(bytes.len() <= previous.len(), "{name}");
            if bytes == previous {
                break;
            }
            passes += 1;
            assert!(passes < 4, "{name}: no fixed point after {passes} passes");
            copy = read_snapshot(&bytes).unwrap();
            assert_eq!(copy, original, "{name}");
            previous = bytes;
        }
        // Fresh frame lists (PyTorch's layout) read back equal too.
        let fresh = with_fresh_frame_lists(&original);
        assert_eq!(
            read_snapshot(&fresh).unwrap(),
            original,
            "{name} (fresh lists)"
        );
    }
}

#[test]
fn shared_frame_lists_are_written_once_and_read_back_shared() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let original = read(&dir.join("silmont_fwd_fp32_128.pickle"));
    let trace = &original.device_traces[0];
    let written = snapshot_to_bytes(&original);
    let again = read_snapshot(&written).unwrap();
    let again_trace = &again.device_traces[0];
    // Wherever the original shared one frames allocation, so does the copy.
    let mut pairs = 0;
    for i in 1..trace.len() {
        if Arc::ptr_eq(&trace[i].frames, &trace[i - 1].frames) && !trace[i].frames.is_empty() {
            pairs += 1;
            assert!(Arc::ptr_eq(
                &again_trace[i].frames,
                &again_trace[i - 1].frames
            ));
        }
    }
    assert!(pairs > 0, "the file has shared tracebacks");
    let fresh = with_fresh_frame_lists(&original);
    assert!(
        written.len() < fresh.len(),
        "memoised lists make a smaller file: {} vs {}",
        written.len(),
        fresh.len()
    );
}

#[test]
fn written_file_is_renamed_into_place_and_reads_back() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let original = read(&dir.join("silmont_mem_snapshot.pickle"));
    let out = scratch("file").join("copy.pickle");
    let len = write_snapshot_file(&original, &out).unwrap();
    assert_eq!(len, std::fs::metadata(&out).unwrap().len());
    assert!(!out.with_extension("pickle.partial").exists());
    assert_eq!(read(&out), original);
    let err = write_snapshot_file(&original, Path::new("/definitely/not/here/x.pickle"))
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("cannot write /definitely/not/here/x.pickle"),
        "{err}"
    );
}

/// `python3`, or `None` (with a printed reason) when it is absent; under CI
/// (`CI` set) its absence is a failure.
fn python3() -> Option<&'static str> {
    match Command::new("python3").arg("--version").output() {
        Ok(out) if out.status.success() => Some("python3"),
        _ => {
            skip(
                "the Python unpickler check",
                "python3 is absent",
                Prerequisite::ProvidedByCi,
            );
            None
        }
    }
}

/// Loads a pickle with a restricted `pickle.Unpickler` (any global is
/// refused, so nothing in the file can run) and checks every key and type
/// against what `torch.cuda.memory._snapshot()` produces.
const PY_CHECK: &str = r#"
import pickle, sys

class Restricted(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} refused")

def check(cond, what):
    if not cond:
        print("FAIL", what); sys.exit(1)

with open(sys.argv[1], 'rb') as f:
    data = f.read()
check(data[:2] == b'\x80\x04', "protocol 4 header")
d = Restricted(__import__('io').BytesIO(data)).load()
if isinstance(d, list):
    d = {'segments': d, 'device_traces': []}
check(isinstance(d, dict), "top level dict")
check(list(d)[:2] == ['segments', 'device_traces'], f"top keys {list(d)}")
SEG = ['device', 'address', 'total_size', 'allocated_size', 'active_size', 'requested_size',
       'stream', 'segment_type', 'segment_pool_id', 'is_expandable', 'frames', 'blocks']
BLK = ['address', 'size', 'requested_size', 'state', 'frames']
def frames_ok(fr, where):
    check(isinstance(fr, list), f"{where} frames list")
    for x in fr:
        check(list(x) == ['name', 'filename', 'line'], f"{where} frame keys {list(x)}")
        check(isinstance(x['name'], str) and isinstance(x['filename'], str)
              and type(x['line']) is int, f"{where} frame types")
blocks = 0
for s in d['segments']:
    check([k for k in SEG if k in s] == list(s) and set(SEG) - set(s) <= {'allocated_size', 'active_size', 'requested_size'}, f"segment keys {list(s)}")
    for k in ('device', 'address', 'total_size', 'stream'):
        check(type(s[k]) is int, f"segment {k} int")
    check(s['segment_type'] in ('small', 'large'), "segment_type")
    check(type(s['segment_pool_id']) is tuple and len(s['segment_pool_id']) == 2, "pool id tuple")
    check(type(s['is_expandable']) is bool, "is_expandable bool")
    frames_ok(s['frames'], "segment")
    for b in s['blocks']:
        blocks += 1
        check(list(b) == BLK, f"block keys {list(b)}")
        check(all(type(b[k]) is int for k in ('address', 'size', 'requested_size')), "block ints")
        check(b['state'] in ('active_allocated', 'active_pending_free', 'inactive'), "state")
        frames_ok(b['frames'], "block")
entries = 0
for trace in d['device_traces']:
    check(isinstance(trace, list), "device trace list")
    for e in trace:
        entries += 1
        keys = list(e)
        addr = 'device_free' if e['action'] == 'oom' else 'addr'
        check(keys[:4] == ['action', addr, 'size', 'stream'], f"entry keys {keys}")
        check(set(keys[4:]) <= {'time_us', 'frames', 'compile_context', 'user_metadata'}, f"entry extra {keys}")
        check('frames' in e, "entry frames")
        check(all(type(e[k]) is int for k in (addr, 'size', 'stream')), "entry ints")
        if 'time_us' in e: check(type(e['time_us']) is int, "time_us int")
        frames_ok(e['frames'], "entry")
if 'allocator_settings' in d:
    a = d['allocator_settings']
    check(type(a['PYTORCH_CUDA_ALLOC_CONF']) is str and type(a['max_split_size']) is int
          and type(a['garbage_collection_threshold']) is float
          and type(a['expandable_segments']) is bool, "allocator_settings types")
    check(all(type(k) is str and type(v) is int for k, v in a['roundup_power2_divisions'].items()), "divisions")
print("OK", len(d['segments']), blocks, entries)
"#;

#[test]
fn python_restricted_unpickler_loads_written_files_with_pytorch_keys_and_types() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let Some(python) = python3() else { return };
    let out_dir = scratch("python");
    for (name, path) in shared_snapshots(&dir) {
        let original = read(&path);
        let out = out_dir.join(&name);
        write_snapshot_file(&original, &out).unwrap();
        let run = Command::new(python)
            .args(["-c", PY_CHECK])
            .arg(&out)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&run.stdout);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(run.status.success(), "{name}: {stdout}{stderr}");
        let blocks: usize = original.segments.iter().map(|s| s.blocks.len()).sum();
        let entries: usize = original.device_traces.iter().map(Vec::len).sum();
        assert_eq!(
            stdout.trim(),
            format!("OK {} {blocks} {entries}", original.segments.len()),
            "{name}"
        );
    }
}

/// The figures `inspect_snapshot.py` prints, without the lines that list
/// which keys the file used (a written file always has PyTorch's full,
/// current key set, so those legitimately differ for older files).
fn inspect_figures(python: &str, path: &Path) -> Vec<String> {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/tools/inspect_snapshot.py");
    let run = Command::new(python).arg(&tool).arg(path).output().unwrap();
    assert!(run.status.success());
    String::from_utf8_lossy(&run.stdout)
        .lines()
        .filter(|l| !l.starts_with("=="))
        .filter(|l| !l.contains(" keys"))
        .filter(|l| !l.trim_start().starts_with("first entry:"))
        // Current PyTorch always writes the list, also when it is empty.
        .filter(|l| !l.contains("extra key external_annotations: type list len 0"))
        // torch 2.0 files have no is_expandable: PyTorch's reading is False.
        .map(|l| l.replace(", None)", ", False)"))
        .collect()
}

#[test]
fn inspect_snapshot_reports_the_same_figures_for_a_written_file() {
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let Some(python) = python3() else { return };
    let out_dir = scratch("inspect");
    for (name, path) in shared_snapshots(&dir) {
        let out = out_dir.join(&name);
        write_snapshot_file(&read(&path), &out).unwrap();
        let original = inspect_figures(python, &path);
        assert!(
            original.iter().any(|l| l.contains("segments:")),
            "{name}: {original:?}"
        );
        assert!(!original.iter().any(|l| l.contains("ERROR")), "{name}");
        assert_eq!(inspect_figures(python, &out), original, "{name}");
    }
}

// ---- exports from vramtop sessions ------------------------------------------

mod common;

use vramtop::alloc::{AllocatorConfig, CachingAllocator, InMemoryDevice};
use vramtop::app::stress::{StressAction, StressCommand, StressOutcome, StressPanel};
use vramtop::app::stress_worker::StressExecutor;
use vramtop::snapshot::replay::verify;

const MIB: u64 = 1 << 20;

#[test]
fn stress_session_snapshot_replays_as_a_full_match_with_named_frames() {
    let device = InMemoryDevice::new(256 * MIB);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(device, 0, AllocatorConfig::default()),
        false,
    );
    let mut addresses = Vec::new();
    for command in [
        StressCommand::Malloc {
            sizes: vec![MIB, MIB, 3 * MIB, 30 * MIB, 512],
            cap: None,
        },
        StressCommand::EmptyCache,
        StressCommand::Malloc {
            sizes: vec![100 * MIB, 100 * MIB, 100 * MIB],
            cap: None,
        },
    ] {
        let result = exec.execute(&command);
        match result.outcome {
            StressOutcome::Allocated(new) | StressOutcome::OutOfMemory { allocated: new, .. } => {
                addresses.extend(new.iter().map(|t| t.address));
            }
            other => assert!(matches!(other, StressOutcome::CacheEmptied), "{other:?}"),
        }
    }
    let every_other: Vec<u64> = addresses.iter().copied().step_by(2).collect();
    exec.execute(&StressCommand::Free {
        addresses: every_other,
    });
    let snapshot = exec.snapshot();
    let trace = &snapshot.device_traces[0];
    assert!(
        trace
            .iter()
            .any(|e| e.action == vramtop::alloc::TraceAction::Oom),
        "the third command ran out of memory"
    );
    let named: Vec<&str> = trace.iter().map(|e| &*e.frames[0].name).collect();
    assert_eq!(named[0], "allocate 5 tensors");
    // The empty_cache() is marked with an annotate entry of its name, even
    // where it releases nothing (every segment here holds a live block).
    let marks: Vec<&str> = trace
        .iter()
        .filter(|e| e.action == vramtop::alloc::TraceAction::Annotate)
        .map(|e| &*e.frames[0].name)
        .collect();
    assert_eq!(marks, ["empty_cache()"]);
    assert!(named.contains(&"allocate 3 × 100 MiB"), "{named:?}");
    // 5 + 2 allocated (the third 100 MiB ran out of memory): 4 freed.
    assert_eq!(named.last(), Some(&"free 4 tensors"));
    let written = snapshot_to_bytes(&snapshot);
    let again = read_snapshot(&written).unwrap();
    assert_eq!(again, snapshot);
    let report = verify(&again);
    assert!(report.full_match(), "{report:?}");
    // Live blocks carry the traceback of the command that allocated them.
    let live: Vec<_> = again
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state.is_active())
        .collect();
    assert!(!live.is_empty());
    assert!(
        live.iter()
            .all(|b| b.frames[0].name.starts_with("allocate"))
    );
}

#[test]
fn stress_save_command_writes_a_replayable_file_and_the_panel_shows_its_path() {
    let device = InMemoryDevice::new(256 * MIB);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(device, 0, AllocatorConfig::default()),
        false,
    );
    let mut panel = StressPanel::default();
    panel.on_result(exec.started());
    for command in panel.apply(StressAction::Allocate) {
        panel.on_result(exec.execute(&command));
    }
    let commands = panel.apply(StressAction::SaveSnapshot);
    assert_eq!(commands, vec![StressCommand::SaveSnapshot]);
    let result = exec.execute(&commands[0]);
    let StressOutcome::SnapshotSaved { path, bytes, .. } = result.outcome.clone() else {
        panic!("{:?}", result.outcome)
    };
    // Written in the current directory (the crate root under cargo test).
    let file = PathBuf::from(&path);
    let cleanup = scopeguard(&file);
    assert!(
        path.starts_with("vramtop-stress-") && path.ends_with(".pickle"),
        "{path}"
    );
    assert_eq!(std::fs::metadata(&file).unwrap().len(), bytes);
    panel.on_result(result);
    let message = panel.message.clone().unwrap_or_default();
    assert!(message.contains(&path), "{message}");
    let (out, _) = vramtop_ok(&["replay", &path]);
    assert!(out.contains("FULL MATCH"), "{out}");
    drop(cleanup);
    assert!(!file.exists());
}

/// Runs `vramtop ARGS` and asserts it succeeded; returns (stdout, stderr).
fn vramtop_ok(args: &[&str]) -> (String, String) {
    let (code, out, err) = common::run_vramtop(args, None);
    assert_eq!(code, 0, "{out}{err}");
    (out, err)
}

/// Removes `path` when dropped (also when the test fails).
fn scopeguard(path: &Path) -> impl Drop + '_ {
    struct Remove<'a>(&'a Path);
    impl Drop for Remove<'_> {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(self.0);
        }
    }
    Remove(path)
}

#[test]
fn every_empty_cache_call_of_an_export_is_an_annotate_entry_even_one_freeing_nothing() {
    use vramtop::alloc::TraceAction;
    let dir = scratch("annotate");
    let demo = dir.join("demo.pickle");
    vramtop_ok(&["demo", "--save-snapshot", &demo.display().to_string()]);
    let snapshot = read(&demo);
    let trace = &snapshot.device_traces[0];
    let marks: Vec<usize> = (0..trace.len())
        .filter(|&i| trace[i].action == TraceAction::Annotate)
        .collect();
    // The demo calls empty_cache() three times; only two release memory.
    assert_eq!(marks.len(), 3, "{trace:?}");
    for &i in &marks {
        assert_eq!(&*trace[i].frames[0].name, "empty_cache()");
    }
    // The first call released nothing: no segment_free before the next
    // call's mark.
    assert!(
        trace[marks[0]..marks[1]]
            .iter()
            .all(|e| e.action != TraceAction::SegmentFree),
        "{trace:?}"
    );
    let (stdout, _) = vramtop_ok(&["replay", &demo.display().to_string()]);
    assert!(stdout.contains("FULL MATCH"), "{stdout}");
    // A scenario's empty_cache steps are marked too: three in this one.
    let one = dir.join("live.pickle");
    vramtop_ok(&[
        "scenario",
        "empty_cache_live_block",
        "--save-snapshot",
        &one.display().to_string(),
    ]);
    let snapshot = read(&one);
    let names: Vec<&str> = snapshot.device_traces[0]
        .iter()
        .filter(|e| e.action == TraceAction::Annotate)
        .map(|e| &*e.frames[0].name)
        .collect();
    assert_eq!(names, ["empty_cache()"; 3]);
    let (stdout, _) = vramtop_ok(&["replay", &one.display().to_string()]);
    assert!(stdout.contains("FULL MATCH"), "{stdout}");
}

#[test]
fn scenario_and_demo_exports_open_and_replay_as_full_matches() {
    let dir = scratch("cli");
    let out = dir.join("frag.pickle");
    let (_, err) = vramtop_ok(&[
        "scenario",
        "fragmentation_oom",
        "--save-snapshot",
        &out.display().to_string(),
    ]);
    let variants = ["default", "expandable_segments", "max_split_size"];
    for variant in variants {
        let file = dir.join(format!("frag-{variant}.pickle"));
        assert!(err.contains(&file.display().to_string()), "{err}");
        let path = file.display().to_string();
        let (code, stdout, stderr) = common::run_vramtop(&["replay", &path], None);
        assert_eq!(code, 0, "{variant}: {stdout}{stderr}");
        assert!(stdout.contains("FULL MATCH"), "{stdout}");
        vramtop_ok(&["open", &path, "--summary"]);
        let snapshot = read(&file);
        let trace = &snapshot.device_traces[0];
        // Every entry names its scenario step.
        assert!(trace.iter().all(|e| {
            e.frames.len() == 1 && &*e.frames[0].filename == "<vramtop scenario fragmentation_oom>"
        }));
        assert!(
            snapshot.allocator_settings.is_some(),
            "the variant's settings are exported"
        );
    }
    let one = dir.join("single.pickle");
    vramtop_ok(&[
        "scenario",
        "empty_cache_live_block",
        "--save-snapshot",
        &one.display().to_string(),
    ]);
    assert!(one.exists(), "a one-variant scenario writes FILE itself");
    let demo = dir.join("demo.pickle");
    vramtop_ok(&["demo", "--save-snapshot", &demo.display().to_string()]);
    let (stdout, _) = vramtop_ok(&["replay", &demo.display().to_string()]);
    assert!(stdout.contains("FULL MATCH"));
    let names: Vec<String> = read(&demo).device_traces[0]
        .iter()
        .map(|e| e.frames[0].name.to_string())
        .collect();
    assert_eq!(names[0], "a, b, c = 3 × 6 MiB");
    let (code, _, err) = common::run_vramtop(
        &[
            "demo",
            "--save-snapshot",
            "/definitely/not/here/demo.pickle",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("cannot write /definitely/not/here/demo.pickle"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
