//! `open --summary` against the shared real snapshots, cross-checked with
//! the independent Python inspector (`../shared/tools/inspect_snapshot.py`)
//! and with sums computed here from the typed snapshot.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use vramtop::alloc::BlockState;
use vramtop::snapshot::read_snapshot_file;
use vramtop::snapshot::summary::{SnapshotSummary, summarize};

const MIB: f64 = (1u64 << 20) as f64;

fn shared_dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(sub)
}

/// The snapshot files (`.pickle` / `.pkl`) of ../shared/snapshots, sorted.
fn snapshot_files() -> Option<Vec<PathBuf>> {
    let dir = common::shared_snapshots_dir()?;
    Some(
        common::snapshot_files_in(&dir)
            .into_iter()
            .map(|(_, path)| path)
            .collect(),
    )
}

/// What the inspector prints for one file.
struct Inspected {
    segments: u64,
    states: HashMap<String, u64>,
    /// (MiB, count), at most 12, most frequent first.
    top_sizes: Vec<(f64, u64)>,
}

fn after<'a>(out: &'a str, label: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.trim_start().strip_prefix(label))
        .unwrap_or_else(|| panic!("no '{label}' line in:\n{out}"))
        .trim()
}

/// Parses `{'inactive': 14, 'active_allocated': 40}`.
fn parse_states(text: &str) -> HashMap<String, u64> {
    let inner = text.trim_start_matches('{').trim_end_matches('}').trim();
    if inner.is_empty() {
        return HashMap::new();
    }
    inner
        .split(',')
        .map(|pair| {
            let (k, v) = pair.split_once(':').expect("key: value");
            (
                k.trim().trim_matches('\'').to_string(),
                v.trim().parse().expect("count"),
            )
        })
        .collect()
}

/// Parses `[(20.0, 6), (2.0, 4)]`.
fn parse_sizes(text: &str) -> Vec<(f64, u64)> {
    let inner = text.trim_start_matches('[').trim_end_matches(']').trim();
    if inner.is_empty() {
        return Vec::new();
    }
    inner
        .split("),")
        .map(|t| {
            let t = t.trim().trim_start_matches('(').trim_end_matches(')');
            let (mib, count) = t.split_once(',').expect("(MiB, count)");
            (
                mib.trim().parse().expect("MiB"),
                count.trim().parse().expect("count"),
            )
        })
        .collect()
}

/// Runs the inspector; `None` (with a note) when python3 is missing.
fn inspect(file: &Path) -> Option<Inspected> {
    let tool = shared_dir("tools/inspect_snapshot.py");
    let out = match Command::new("python3").arg(&tool).arg(file).output() {
        Ok(out) => out,
        Err(e) => {
            common::skip::skip(
                "the inspector cross-check",
                &format!("python3 not runnable ({e})"),
                common::skip::Prerequisite::ProvidedByCi,
            );
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !text.contains(" ERROR "),
        "inspector failed on {}:\n{text}{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(Inspected {
        segments: after(&text, "segments:").parse().expect("segment count"),
        states: parse_states(after(&text, "block states:")),
        top_sizes: parse_sizes(after(&text, "segment sizes (MiB, count) top:")),
    })
}

fn check_against_inspector(name: &str, summary: &SnapshotSummary, inspected: &Inspected) {
    let t = &summary.total;
    assert_eq!(t.segments, inspected.segments, "{name}: segments");
    let ours: HashMap<String, u64> = [
        ("active_allocated", t.blocks.active_allocated),
        ("active_pending_free", t.blocks.active_pending_free),
        ("inactive", t.blocks.inactive),
    ]
    .into_iter()
    .filter(|&(_, n)| n > 0)
    .map(|(k, n)| (k.to_string(), n))
    .collect();
    assert_eq!(ours, inspected.states, "{name}: block states");
    // The inspector counts the sizes of non-expandable segments together.
    let mut sizes: BTreeMap<u64, u64> = BTreeMap::new();
    for e in t.segment_sizes.small.iter().chain(&t.segment_sizes.large) {
        *sizes.entry(e.size).or_default() += e.count;
    }
    assert_eq!(
        inspected.top_sizes.len(),
        sizes.len().min(12),
        "{name}: number of distinct segment sizes"
    );
    for &(mib, count) in &inspected.top_sizes {
        let ours = sizes
            .iter()
            .find(|&(&size, _)| size as f64 / MIB == mib)
            .map(|(_, &c)| c);
        assert_eq!(ours, Some(count), "{name}: segments of {mib} MiB");
    }
    // The ones it printed are the most frequent.
    if let Some(least) = inspected.top_sizes.iter().map(|&(_, c)| c).min() {
        let printed = |size: u64| {
            inspected
                .top_sizes
                .iter()
                .any(|&(mib, _)| size as f64 / MIB == mib)
        };
        for (&size, &count) in &sizes {
            assert!(
                printed(size) || count <= least,
                "{name}: {size} B x{count} should be in the top 12"
            );
        }
    }
}

#[test]
fn summaries_of_every_shared_snapshot_agree_with_the_inspector_and_the_blocks() {
    let Some(files) = snapshot_files() else {
        return;
    };
    assert!(
        !files.is_empty(),
        "no snapshot files in ../shared/snapshots"
    );
    for file in &files {
        let name = file.display().to_string();
        let snapshot = read_snapshot_file(file).expect("shared snapshot loads");
        let summary = summarize(&snapshot);

        // Independent sums, per device and in total.
        let mut per_device: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for seg in &snapshot.segments {
            let entry = per_device.entry(seg.device).or_default();
            entry.0 += seg.total_size;
            for b in &seg.blocks {
                if b.state == BlockState::ActiveAllocated {
                    entry.1 += b.size;
                }
            }
        }
        let devices: Vec<(u32, (u64, u64))> = summary
            .devices
            .iter()
            .map(|d| (d.device, (d.figures.reserved, d.figures.allocated)))
            .collect();
        assert_eq!(
            devices,
            per_device.clone().into_iter().collect::<Vec<_>>(),
            "{name}: per-device reserved/allocated"
        );
        let reserved: u64 = per_device.values().map(|v| v.0).sum();
        let allocated: u64 = per_device.values().map(|v| v.1).sum();
        assert_eq!(
            (summary.total.reserved, summary.total.allocated),
            (reserved, allocated),
            "{name}: total reserved/allocated"
        );
        let g = &summary.total.segsum;
        assert_eq!(g.total_reserved, reserved, "{name}");
        // _memory_viz.py asserts the parts cover each segment; a hand-made
        // file that breaks this shows the rest as `unaccounted`.
        let covered: u64 = snapshot
            .segments
            .iter()
            .flat_map(|s| &s.blocks)
            .map(|b| b.size)
            .sum();
        assert_eq!(
            g.total_allocated + g.total_free,
            covered,
            "{name}: segsum parts add up to the block sizes"
        );
        assert_eq!(
            g.unaccounted,
            reserved as i64 - covered as i64,
            "{name}: unaccounted"
        );

        if let Some(inspected) = inspect(file) {
            check_against_inspector(&name, &summary, &inspected);
        }
    }
}

fn vramtop(args: &[&str]) -> (i32, String, String) {
    common::run_vramtop(args, None)
}

#[test]
fn a_moment_at_cursor_0_is_before_the_first_event_with_no_time_as_the_viewer_says() {
    // Cursor 0 is before any event: the first event's time is not its
    // time. The viewer says "event 0/97 · before the first event".
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--at", "0"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("at event 0/97, before the first event: 0 B allocated"),
        "{out}"
    );
    assert!(!out.contains("event 0/97, t+"), "{out}");
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--at", "0", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the summary's JSON");
    let at = &v["sites"][0]["at_cursor"];
    assert_eq!(at["cursor"], 0, "{out}");
    assert!(
        at["time_us"].is_null(),
        "no time before the first event: {at}"
    );

    // A peak at cursor 0 (the reserved peak of a trace that begins
    // mid-run, freeing what it started with) likewise.
    let Some(path) = common::shared_snapshot("bolongcheng_xl_fwd_cl128_float32_expandable.pickle")
    else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("peak reserved 12.81 GiB at event 0/5112, before the first event\n"),
        "{out}"
    );
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the summary's JSON");
    let reserved = &v["sites"][0]["peaks"]["reserved"];
    assert_eq!(reserved["cursor"], 0, "{out}");
    assert!(reserved["time_us"].is_null(), "{reserved}");
    // A peak after the first event keeps its time.
    assert!(
        v["sites"][0]["peaks"]["allocated"]["time_us"].is_i64(),
        "{out}"
    );
}

#[test]
fn a_bare_segment_list_is_said_to_have_no_settings_for_its_shape_not_its_torch() {
    let Some(path) = common::shared_snapshot("muduard_memory_snapshot.pkl") else {
        return;
    };
    let (code, out, err) = vramtop(&["open", &path.display().to_string(), "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("allocator_settings: not in the file (a bare segment list"),
        "{out}"
    );
    assert!(!out.contains("torch < 2.3"), "{out}");
}

#[test]
fn summary_text_gives_fragmentation_as_a_percentage_like_its_other_shares() {
    let Some(path) = common::shared_snapshot("volcengine_verl_mem.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with("fragmentation"))
        .unwrap_or_else(|| panic!("a fragmentation line: {out}"));
    // 1 − 260 MiB largest / 644.51 MiB free.
    assert!(line.contains(" 59.7%: "), "{line}");
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let fraction = v["total"]["fragmentation"]["fragmentation"]
        .as_f64()
        .expect("the JSON keeps the fraction");
    assert!((fraction - 0.5966).abs() < 1e-3, "{fraction}");
}

#[test]
fn summary_counts_the_segments_of_each_memory_pool_when_a_file_has_private_pools() {
    // volcengine's 127 segments: 59 in the default pool, 44 in (0, 1) and
    // 24 in (0, 2).
    let Some(path) = common::shared_snapshot("volcengine_verl_mem.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    for (pool, segments) in [
        ("pool (0,0) default", 59),
        ("pool (0,1) private", 44),
        ("pool (0,2) private", 24),
    ] {
        assert!(
            out.lines()
                .any(|l| l.contains(&format!("GPU 0 {pool}: {segments} segments, "))),
            "{pool}\n{out}"
        );
    }
    let (code, json, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    let in_pool_1 = v["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .filter(|s| s["segment_pool_id"] == serde_json::json!([0, 1]))
        .count();
    assert_eq!(in_pool_1, 44);
    assert_eq!(v["pools"].as_array().map(Vec::len), Some(3));
    // A file of the default pool only has no pools lines.
    let Some(one_pool) = common::shared_snapshot("muduard_dump_snapshot_a.pickle") else {
        return;
    };
    let (code, out, err) = vramtop(&["open", &one_pool.display().to_string(), "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("memory pools"), "{out}");
}

#[test]
fn summary_says_the_biggest_allocation_is_the_traces_not_the_files() {
    // Hyperion's trace starts mid-run: its live 48.8 MiB blocks were
    // allocated before it, its biggest alloc event is 24.41 MiB.
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let (code, out, err) = vramtop(&["open", &path.display().to_string(), "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  biggest allocation in the trace 24.41 MiB (requested) at event "),
        "{out}"
    );
}

#[test]
fn summary_of_a_file_without_a_trace_says_what_would_have_given_one() {
    for (name, says) in [
        (
            "muduard_memory_snapshot.pkl",
            "(torch.cuda.memory_snapshot() gives the final state only: \
             torch.cuda.memory._dump_snapshot(FILE) saves the trace with it)",
        ),
        (
            "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle",
            "(torch 2.0 keeps a trace only with \
             _record_memory_history(True, trace_alloc_max_entries=N); from torch 2.1 \
             _record_memory_history() keeps one)",
        ),
    ] {
        let Some(path) = common::shared_snapshot(name) else {
            return;
        };
        let (code, out, err) = vramtop(&["open", &path.display().to_string(), "--summary"]);
        assert_eq!(code, 0, "{err}");
        let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(flat.contains(says), "{name}\n{out}");
    }
}

#[test]
fn file_line_sites_are_the_python_lines_not_the_interpreters_c_frame() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let args = [
        "open",
        &path,
        "--summary",
        "--group",
        "file-line",
        "--top",
        "30",
    ];
    let (code, out, err) = vramtop(&args);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("method_vectorcall"), "{out}");
    assert!(!out.contains("descrobject.c"), "{out}");
    assert!(
        out.contains("trace_peak_memory.py:6 custom_softmax"),
        "{out}"
    );
}

#[test]
fn the_sites_left_out_are_worded_alike_whether_some_are_listed_or_none() {
    // Hyperion: "… more 11 sites" by default, "… in 7 sites" with --top 0.
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let path = path.display().to_string();
    for top in ["10", "0"] {
        let (code, out, err) = vramtop(&["open", &path, "--summary", "--top", top]);
        assert_eq!(code, 0, "{err}");
        // The sites' rest row, not the segment list's "… 624 more".
        let rest: Vec<&str> = out
            .lines()
            .filter(|l| l.contains("  … ") && l.contains('%'))
            .collect();
        assert!(!rest.is_empty(), "--top {top}: {out}");
        for row in rest {
            assert!(row.ends_with(" sites not listed"), "--top {top}: {row}");
        }
    }
}

#[test]
fn segsum_internal_share_never_reads_as_none_for_bytes_that_are_there() {
    let Some(path) = common::shared_snapshot("albi2_thesis-text-to-SQL_dump_snapshot.pickle")
    else {
        return;
    };
    let path = path.display().to_string();
    let (code, json, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
    // 832 B internal of 65.74 MiB free: 0.0012 %.
    let internal = v["total"]["segsum"]["internal_free"].as_u64();
    assert_eq!(internal, Some(832));
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("(<0.1% internal)"), "{out}");
    assert!(!flat.contains("(0.00% internal)"), "{out}");
}

#[test]
fn summary_sites_say_one_block_and_one_more_site_in_the_singular() {
    let Some(path) = common::shared_snapshot("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--top", "30"]);
    assert_eq!(code, 0, "{err}");
    let site_rows: Vec<&str> = out
        .lines()
        .filter(|l| l.contains('%') && (l.contains(" block  ") || l.contains(" blocks  ")))
        .collect();
    assert!(
        site_rows.iter().any(|l| l.contains("      1 block   ")),
        "a one-block site, its name in the same column: {out}"
    );
    assert!(!out.contains(" 1 blocks"), "{out}");
    assert!(!out.contains(" 1 more sites"), "{out}");
    // The site names stay in one column whatever the word.
    let columns: std::collections::BTreeSet<usize> = site_rows
        .iter()
        .filter_map(|l| l.find(" block").map(|i| i + " blocks  ".len()))
        .collect();
    assert_eq!(columns.len(), 1, "{site_rows:#?}");
}

#[test]
fn open_summary_json_has_the_documented_keys() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    for key in ["devices", "total", "segments"] {
        assert!(v.get(key).is_some(), "no '{key}' in {out}");
    }
    let total = &v["total"];
    for key in [
        "segments",
        "reserved",
        "allocated",
        "active",
        "requested",
        "blocks",
        "segment_sizes",
        "segsum",
        "fragmentation",
    ] {
        assert!(total.get(key).is_some(), "no total.{key}");
    }
    for key in ["small", "large", "expandable"] {
        assert!(total["segment_sizes"].get(key).is_some(), "no {key} sizes");
    }
    for key in [
        "total_reserved",
        "total_allocated",
        "total_free",
        "internal_percent",
    ] {
        assert!(total["segsum"].get(key).is_some(), "no segsum.{key}");
    }
    assert_eq!(total["segments"], 9);
    assert_eq!(v["devices"][0]["device"], 0);
    assert!(v["devices"][0].get("reserved").is_some());

    let (code, text, _) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0);
    assert!(text.contains("total_reserved"), "{text}");
}

/// `{'segments': []}`, protocol 2: a snapshot of nothing, which the viewer
/// would open.
const EMPTY_SNAPSHOT: &[u8] = b"\x80\x02}q\x00X\x08\x00\x00\x00segmentsq\x01]q\x02s.";

#[test]
fn open_of_a_bad_file_or_without_summary_exits_2_with_one_line() {
    let dir = std::env::temp_dir().join(format!("vramtop-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("not-a-snapshot.pickle");
    std::fs::write(&bad, b"this is not a pickle").expect("write");
    let bad = bad.display().to_string();
    let (code, out, err) = vramtop(&["open", &bad, "--summary", "--json"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("not-a-snapshot.pickle"), "{err}");

    let (code, _, err) = vramtop(&[
        "open",
        &dir.join("missing").display().to_string(),
        "--summary",
    ]);
    assert_eq!(code, 2, "{err}");

    // Without --summary the viewer needs a terminal; a test's stdout is
    // not one. A file that is no pickle is said so first, as --summary
    // says it: the --summary hint would only lead to that error.
    let (code, _, summary_err) = vramtop(&["open", &bad, "--summary"]);
    assert_eq!(code, 2);
    let (code, _, err) = vramtop(&["open", &bad]);
    assert_eq!(code, 2);
    assert_eq!(err, summary_err);
    assert!(err.contains("not a pickle: looks like text"), "{err}");
    assert!(!err.contains("needs a terminal"), "{err}");
    // A pickle that is no snapshot is said as --summary says it too.
    let int = dir.join("int.pickle");
    std::fs::write(&int, b"\x80\x04K\x01.").expect("write");
    let int = int.display().to_string();
    let (code, _, summary_err) = vramtop(&["open", &int, "--summary"]);
    assert_eq!(code, 2);
    let (code, _, err) = vramtop(&["open", &int]);
    assert_eq!(code, 2);
    assert_eq!(err, summary_err);
    assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    // A snapshot gets the --summary hint.
    let pickle = dir.join("a.pickle");
    std::fs::write(&pickle, EMPTY_SNAPSHOT).expect("write");
    let (code, _, err) = vramtop(&["open", &pickle.display().to_string()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("needs a terminal") && err.contains("--summary"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_quotes_the_path_of_its_summary_hint_for_a_shell() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("my runs");
    std::fs::create_dir_all(&dir).expect("folder");
    let pickle = dir.join("a b$HOME.pickle");
    std::fs::write(&pickle, EMPTY_SNAPSHOT).expect("write");
    let path = pickle.display().to_string();
    let (code, _, err) = vramtop(&["open", &path]);
    assert_eq!(code, 2, "{err}");
    // Pasted, the hint opens the same file: one word, nothing expanded.
    assert!(
        err.contains(&format!("`vramtop open '{path}' --summary [--json]`")),
        "{err}"
    );
    // A relative name starting with `-` is written from the current
    // folder, or the pasted command would read it as an option.
    std::fs::write(dir.join("-x.pickle"), EMPTY_SNAPSHOT).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_vramtop"))
        .env(common::PROBE_DIR_ENV, common::no_probes_dir())
        .args(["open", "--", "-x.pickle"])
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("vramtop runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("`vramtop open ./-x.pickle --summary [--json]`"),
        "{err}"
    );
}

#[test]
fn open_of_a_file_cut_inside_its_first_frame_says_it_ends_early_not_the_hint() {
    let tmp = tempfile::tempdir().expect("temp dir");
    // PROTO 4, a FRAME of 100 bytes, 10 of them there; then a frame of
    // 64 KiB cut past the first bytes read (4 KiB); then a frame's
    // length cut.
    let mut short = b"\x80\x04\x95".to_vec();
    short.extend(100u64.to_le_bytes());
    short.extend([b'N'; 10]);
    let mut long = b"\x80\x04\x95".to_vec();
    long.extend(65_536u64.to_le_bytes());
    long.extend([b'N'; 10_000]);
    for (name, bytes, said) in [
        (
            "short.pkl",
            short,
            "21 bytes, cut inside its first 100 B frame",
        ),
        (
            "long.pkl",
            long,
            "10011 bytes, cut inside its first 64 KiB frame",
        ),
        (
            "header.pkl",
            b"\x80\x04\x95\x00\x01".to_vec(),
            "5 bytes, cut inside a frame's header",
        ),
    ] {
        let file = tmp.path().join(name);
        std::fs::write(&file, bytes).expect("write");
        let (code, out, err) = vramtop(&["open", &file.display().to_string()]);
        assert_eq!(code, 2, "{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(!err.contains("needs a terminal"), "{name}: {err}");
        assert!(
            err.contains(&format!("the file ends early: {said}")),
            "{name}: {err}"
        );
    }
    // A real snapshot cut in its first frame: what --summary says.
    let Some(real) = snapshot_files()
        .into_iter()
        .flatten()
        .find(|p| p.ends_with("silmont_mem_snapshot.pickle"))
    else {
        return;
    };
    let bytes = std::fs::read(real).expect("read");
    for len in [1000, 10_000] {
        let cut = tmp.path().join(format!("head{len}.pkl"));
        std::fs::write(&cut, &bytes[..len]).expect("write");
        let cut = cut.display().to_string();
        let (code, _, summary_err) = vramtop(&["open", &cut, "--summary"]);
        assert_eq!(code, 2, "{summary_err}");
        let (code, _, err) = vramtop(&["open", &cut]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err, summary_err);
        assert!(
            err.contains("cut inside its first 64.00 KiB frame"),
            "{err}"
        );
    }
}

#[test]
fn open_names_an_unreadable_file_before_asking_for_a_terminal() {
    // A test's stdout is no terminal: a readable file gets the --summary
    // hint, a missing file or a folder its own error.
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().to_path_buf();
    for unreadable in [dir.join("missing"), dir.clone()] {
        let path = unreadable.display().to_string();
        let (code, _, err) = vramtop(&["open", &path]);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("vramtop: error: cannot read {path}: ")),
            "{err}"
        );
    }
}

#[test]
fn no_trace_summary_has_the_full_reads_figures_on_every_shared_file() {
    use vramtop::snapshot::read_snapshot_file_final_state;
    use vramtop::snapshot::sites::Grouping;
    use vramtop::snapshot::summary::sites_report;
    let Some(files) = snapshot_files() else {
        return;
    };
    assert!(!files.is_empty());
    let mut up_to_the_trace = 0;
    for path in &files {
        let full = read_snapshot_file(path).expect("a shared file reads");
        let state = read_snapshot_file_final_state(path).expect("its final state reads");
        let name = path.display();
        assert_eq!(summarize(&state), summarize(&full), "{name}");
        if !state.trace_not_read {
            assert_eq!(state, full, "{name}");
            continue;
        }
        up_to_the_trace += 1;
        assert!(state.device_traces.iter().all(Vec::is_empty), "{name}");
        assert_eq!(state.segments, full.segments, "{name}");
        // The sites at the end come from the segments alone.
        let (state, full) = (std::sync::Arc::new(state), std::sync::Arc::new(full));
        let ends = |s| {
            sites_report(s, Grouping::default(), 5)
                .sites
                .into_iter()
                .filter(|d| !d.at_end.sites.is_empty())
                .map(|d| (d.device, d.at_end.allocated, d.at_end.sites.len()))
                .collect::<Vec<_>>()
        };
        assert_eq!(ends(&state), ends(&full), "{name}");
    }
    // PyTorch writes the segments first: most shared files stop early.
    assert!(
        up_to_the_trace * 2 > files.len(),
        "{up_to_the_trace} of {}",
        files.len()
    );
}

/// Whether the full summary's text carries `--no-trace`'s note.
fn full_text_mentions_no_trace(path: &str) -> bool {
    let (code, text, err) = vramtop(&["open", path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    text.contains("--no-trace read the file only")
}

#[test]
fn open_summary_no_trace_on_a_file_cut_in_its_trace_says_the_rest_was_not_checked() {
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let bytes = std::fs::read(&path).expect("the shared file reads");
    // A folder with a space: the commands offered must paste as they are.
    let dir = std::env::temp_dir().join(format!("vramtop no-trace cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cut = dir.join("cut.pickle");
    // Well past the segments, well before the end.
    std::fs::write(&cut, &bytes[..bytes.len() * 5 / 8]).expect("write the cut file");
    let cut = cut.display().to_string();
    let (code, text, err) = vramtop(&["open", &cut, "--summary", "--no-trace"]);
    assert_eq!(code, 0, "{err}");
    // The note wraps within 80 columns: read it with its breaks folded.
    let unwrapped = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped.contains("so a file cut or damaged there"),
        "{text}"
    );
    let (code, _, err) = vramtop(&["open", &cut, "--summary"]);
    assert_eq!(code, 2, "the whole read finds the cut: {err}");
    assert!(err.contains("truncated"), "{err}");
    // Every command that reads the file whole says how to read what it
    // can, in the one line of the error.
    let whole = path.display().to_string();
    for args in [
        vec!["open", cut.as_str(), "--summary"],
        vec!["replay", cut.as_str()],
        vec!["diff", whole.as_str(), cut.as_str()],
    ] {
        let (code, _, err) = vramtop(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains(&format!("`vramtop open '{cut}' --summary --no-trace`")),
            "{args:?}: {err}"
        );
        assert!(err.contains("the viewer"), "{args:?}: {err}");
    }
    // Cut inside the final state: nothing before the damage to offer.
    let early = dir.join("early.pickle");
    std::fs::write(&early, &bytes[..bytes.len() / 50]).expect("write the early cut");
    let (code, _, err) = vramtop(&["replay", &early.display().to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("truncated"), "{err}");
    assert!(!err.contains("--no-trace"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn open_summary_no_trace_says_what_it_did_not_read() {
    let Some(path) = common::shared_snapshot("silmont_fwd_fp32_128.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--no-trace", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["trace_read"], false, "{out}");
    let device = &v["sites"][0];
    assert!(device["peaks"].is_null() && device["at_peak_allocated"].is_null());
    assert!(
        !device["at_end"]["sites"]
            .as_array()
            .expect("sites")
            .is_empty()
    );
    let (code, full, _) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0);
    let full: serde_json::Value = serde_json::from_str(&full).expect("valid JSON");
    assert_eq!(full["trace_read"], true);
    assert_eq!(v["total"], full["total"]);

    let (code, text, err) = vramtop(&["open", &path, "--summary", "--no-trace"]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("peaks: not read (--no-trace)"), "{text}");
    assert!(text.contains("allocator_settings: not read"), "{text}");
    // The note wraps within 80 columns: read it with its breaks folded.
    let unwrapped = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        unwrapped.contains("the rest (the trace, the settings after it) was not read"),
        "{text}"
    );
    assert!(
        !full_text_mentions_no_trace(&path),
        "the note is --no-trace's"
    );
    // Its blocks carry no stack and the trace is not read: it cannot say
    // whether they predate the recording. (The site's row cuts the name
    // at its end to fit 80 columns; `--json` has it whole.)
    assert!(
        text.contains("no stack in the final state (trace not"),
        "{text}"
    );
    assert!(
        serde_json::to_string(&v)
            .is_ok_and(|j| j.contains("no stack in the final state (trace not read)")),
        "{v}"
    );
}

#[test]
fn a_site_reached_three_ways_is_called_from_the_path_with_most_bytes_and_says_its_share() {
    // Yiyi's one site: 7.00 GiB through flex_opt.py:507, 3.63 GiB through
    // :319, 0.40 GiB (its two largest blocks) through :171.
    let Some(path) = common::shared_snapshot("Yiyi-philosophy_LLM-inference_oom_snapshot.pickle")
    else {
        return;
    };
    let file = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &file, "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("< flex_opt.py:507 init_weight"), "{out}");
    assert!(!out.contains("flex_opt.py:171"), "{out}");
    assert!(
        out.contains("(63.5% of it this way; 3 caller paths)"),
        "{out}"
    );
    let (code, json, err) = vramtop(&["open", &file, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let site = &json["sites"][0]["at_end"]["sites"][0];
    assert_eq!(site["caller_paths"], 3, "{site}");
    assert_eq!(
        site["called_from"][1], "flex_opt.py:507 init_weight",
        "{site}"
    );
    let share =
        site["called_from_bytes"].as_f64().unwrap_or(0.0) / site["bytes"].as_f64().unwrap_or(1.0);
    assert!((share - 0.635).abs() < 0.001, "{share}");
}

#[test]
fn summary_with_ascii_prints_the_same_layout_in_ascii_punctuation() {
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let file = path.display().to_string();
    // One cell for one cell: every line as wide as without --ascii, the
    // same exit code.
    let plain = common::assert_ascii_twin(&["open", &file, "--summary"]);
    assert!(plain.contains('…'), "the summary cuts a list: {plain}");
    let (code, _, err) = vramtop(&["open", &file, "--summary"]);
    assert_eq!(code, 0, "a consistent file's summary succeeds: {err}");
}

/// The summary and `diff` read only the stacks of allocations and
/// segments: what they report must be what a full read reports, for every
/// shared file, every grouping and the moments `--at` names.
#[test]
fn reading_only_the_allocations_stacks_reports_what_a_full_read_reports() {
    use std::sync::Arc;
    use vramtop::alloc::TraceAction;
    use vramtop::snapshot::peak::At;
    use vramtop::snapshot::sites::Grouping;
    use vramtop::snapshot::summary::{sites_report, sites_report_at};
    use vramtop::snapshot::{Stacks, read_snapshot_file_with};
    let Some(dir) = common::shared_snapshots_dir() else {
        return;
    };
    let mut frees_with_stacks = 0;
    for (name, path) in common::snapshot_files_in(&dir) {
        let full = Arc::new(read_snapshot_file(&path).expect("shared snapshot loads"));
        let partial = Arc::new(
            read_snapshot_file_with(&path, Stacks::OfAllocations).expect("loads, fewer stacks"),
        );
        let is_free = |a: TraceAction| {
            matches!(
                a,
                TraceAction::FreeRequested
                    | TraceAction::FreeCompleted
                    | TraceAction::SegmentFree
                    | TraceAction::SegmentUnmap
            )
        };
        // Only the frees' stacks are left out.
        for (f, p) in full
            .device_traces
            .iter()
            .flatten()
            .zip(partial.device_traces.iter().flatten())
        {
            if is_free(f.action) {
                frees_with_stacks += usize::from(!f.frames.is_empty());
                assert!(p.frames.is_empty(), "{name}: a free's stack was read");
            } else {
                assert_eq!(f.frames, p.frames, "{name}: {:?}", f.action);
            }
        }
        assert_eq!(full.segments, partial.segments, "{name}");
        assert_eq!(summarize(&full), summarize(&partial), "{name}");
        for grouping in [Grouping::UserFrame, Grouping::PythonFrame] {
            assert_eq!(
                sites_report(&full, grouping, 10),
                sites_report(&partial, grouping, 10),
                "{name}: {grouping:?}"
            );
            for at in [At::Start, At::Peak, At::End, At::Oom, At::Event(3)] {
                assert_eq!(
                    sites_report_at(&full, grouping, 10, at).ok(),
                    sites_report_at(&partial, grouping, 10, at).ok(),
                    "{name}: {grouping:?} at {at:?}"
                );
            }
        }
    }
    assert!(
        frees_with_stacks > 100,
        "the shared files' frees carry stacks to leave out"
    );
}

#[test]
fn the_no_stack_groups_are_explained_once_under_the_sites_in_text_and_json() {
    let Some(path) = common::shared_snapshot("Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle")
    else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    // Both groups are listed (at the end and at the peak); each is
    // explained once, on one line within 80 columns.
    for (row, legend) in [
        (
            "no stack: allocated while history was off",
            "  no stack, history was off: allocated before recording began, or while paused",
        ),
        (
            "no stack: allocated before the trace began",
            "  no stack, before the trace began: allocated in events the file does not hold",
        ),
    ] {
        assert!(out.contains(row), "{out}");
        let lines: Vec<&str> = out.lines().filter(|l| l.contains(legend)).collect();
        assert_eq!(lines, [legend], "{out}");
        assert!(legend.chars().count() <= 80);
    }
    // Under the lists: after the first list's rows, before the next moment.
    let legend = out.find("  no stack, history was off").expect("legend");
    assert!(out.find("no stack: allocated while history was off") < Some(legend));
    assert!(Some(legend) < out.find("  at the peak of allocated"));

    let (code, json, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    let d = &v["sites"][0];
    let reasons = |at: &serde_json::Value| -> Vec<String> {
        at["no_stack_legend"]
            .as_array()
            .map(|l| {
                l.iter()
                    .map(|e| e["reason"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        reasons(&d["at_end"]),
        ["before_recording"],
        "{}",
        d["at_end"]
    );
    assert_eq!(
        reasons(&d["at_peak_allocated"]),
        ["before_recording", "before_trace"]
    );
    assert_eq!(
        d["at_end"]["no_stack_legend"][0]["meaning"],
        "allocated before recording began, or while paused"
    );
}

#[test]
fn fragmentation_line_says_how_much_free_memory_is_in_wholly_free_segments() {
    // Six of silmont's nine segments are wholly free 512 MiB ones: the
    // 85.7 % is mostly memory empty_cache() returns, never an OOM's cause.
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "fragmentation 85.7%: 3.49 GiB external free in 10 inactive blocks, largest \
             512 MiB, 503.75 MiB non-releasable, 508 B internal free; 3 GiB of the free bytes \
             in 6 wholly \
             free segments, which empty_cache() returns and PyTorch frees before it \
             reports out of memory"
        ),
        "{out}"
    );
    let (code, out, err) = vramtop(&["open", &path, "--summary", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let f = &v["total"]["fragmentation"];
    assert_eq!(f["free_in_whole_segments"].as_u64(), Some(6 * (512 << 20)));
    assert_eq!(f["whole_free_segments"].as_u64(), Some(6));
    // The text never speaks of an OOM in a file that has none.
    assert!(!flat.contains("OOM"), "{out}");
}

#[test]
fn segsum_line_says_the_pending_free_bytes_its_total_free_counts() {
    // total_free 1.21 GiB against the fragmentation's 644.51 MiB free:
    // _memory_viz counts the pending-free blocks free, the dashboard not.
    let Some(path) = common::shared_snapshot("volcengine_verl_mem.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) = vramtop(&["open", &path, "--summary"]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains("total_free 1.21 GiB (2.2% internal, 569.70 MiB pending free)"),
        "{out}"
    );
    // A file without pending-free blocks says nothing of them.
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let (code, out, err) = vramtop(&["open", &path.display().to_string(), "--summary"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 active_pending_free"), "{out}");
    // The segsum line's note ("(2.2% internal, 569.70 MiB pending free)").
    assert!(!out.contains("% internal, "), "{out}");
}

/// The segment lines' third figure is `_memory_viz`'s external free, which
/// counts pending-free blocks too: the header names both of the help's
/// terms, so that it never reads as the fragmentation line's external free
/// (free blocks alone) beside it.
#[test]
fn segment_lines_name_their_free_figure_external_free_plus_pending_free() {
    let (code, out, err) = vramtop(&[
        "open",
        "tests/fixtures/fuzz-nan-in-unknown-setting.pickle",
        "--summary",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "segments (segsum: requested / internal free / external free + pending free):"
        ),
        "{out}"
    );
    assert!(!out.contains("/ external free):"), "{out}");
}
