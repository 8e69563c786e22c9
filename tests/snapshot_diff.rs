//! `vramtop diff` on pairs of shared snapshots, against an independent
//! computation of `_memory_viz.py compare`'s only-before / only-after
//! segments (keyed by address and total size) and of the allocated bytes.

mod common;

use std::collections::HashSet;

use vramtop::cli::diff::{DEFAULT_LINES, render_diff};
use vramtop::cli::text::cells;
use vramtop::snapshot::diff::{DiffError, SiteChangeKind, diff_snapshot_devices, diff_snapshots};
use vramtop::snapshot::sites::Grouping;
use vramtop::snapshot::{Snapshot, read_snapshot_file};

fn shared(name: &str) -> Option<(String, Snapshot)> {
    let p = common::shared_snapshot(name)?;
    let s = read_snapshot_file(&p).expect("shared snapshot loads");
    Some((p.display().to_string(), s))
}

const PAIRS: [(&str, &str); 3] = [
    (
        "muduard_dump_snapshot_a.pickle",
        "muduard_dump_snapshot_c.pickle",
    ),
    (
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_no_grad.pkl",
        "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl",
    ),
    ("silmont_mem_snapshot.pickle", "silmont_fwd_fp32_128.pickle"),
];

/// `text` with its line breaks and indents folded to single spaces: a
/// wrapped note reads as one sentence again.
fn unwrapped(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn allocated(s: &Snapshot) -> u64 {
    common::allocated_in(&s.segments)
}

#[test]
fn diff_of_shared_pairs_agrees_with_memory_viz_compare_definition() {
    for (before_name, after_name) in PAIRS {
        let (Some((_, before)), Some((_, after))) = (shared(before_name), shared(after_name))
        else {
            continue;
        };
        let diff = diff_snapshots(&before, &after, Grouping::UserFrame).expect("same devices");
        let keys = |s: &Snapshot| -> HashSet<(u64, u64)> {
            s.segments
                .iter()
                .map(|s| (s.address, s.total_size))
                .collect()
        };
        let (kb, ka) = (keys(&before), keys(&after));
        let only_before: HashSet<(u64, u64)> = kb.difference(&ka).copied().collect();
        let only_after: HashSet<(u64, u64)> = ka.difference(&kb).copied().collect();
        let got_before: HashSet<(u64, u64)> = diff
            .only_before
            .iter()
            .map(|s| (s.address, s.total_size))
            .collect();
        let got_after: HashSet<(u64, u64)> = diff
            .only_after
            .iter()
            .map(|s| (s.address, s.total_size))
            .collect();
        assert_eq!(got_before, only_before, "{before_name}");
        assert_eq!(got_after, only_after, "{after_name}");
        let reserved = |s: &Snapshot| s.segments.iter().map(|s| s.total_size).sum::<u64>();
        assert_eq!(
            (diff.reserved.before, diff.reserved.after),
            (reserved(&before), reserved(&after))
        );
        assert_eq!(
            (diff.allocated.before, diff.allocated.after),
            (allocated(&before), allocated(&after))
        );
        let site_before: u64 = diff.sites.iter().map(|s| s.bytes.before).sum();
        let site_after: u64 = diff.sites.iter().map(|s| s.bytes.after).sum();
        assert_eq!(
            site_before,
            allocated(&before),
            "{before_name}: Σ sites before"
        );
        assert_eq!(site_after, allocated(&after), "{after_name}: Σ sites after");
        for w in diff.sites.windows(2) {
            assert!(
                w[0].bytes.change.unsigned_abs() >= w[1].bytes.change.unsigned_abs(),
                "largest change first"
            );
        }
        for s in &diff.sites {
            let kind = match (s.bytes.before, s.bytes.after) {
                (0, _) => SiteChangeKind::New,
                (_, 0) => SiteChangeKind::Gone,
                (b, a) if a > b => SiteChangeKind::Grown,
                (b, a) if a < b => SiteChangeKind::Shrunk,
                _ => SiteChangeKind::Same,
            };
            assert_eq!(s.kind, kind, "{}", s.label);
        }
    }
}

#[test]
fn diff_of_a_snapshot_with_itself_changes_nothing() {
    let Some((path, s)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let diff = diff_snapshots(&s, &s, Grouping::Stack).expect("same devices");
    assert!(diff.only_before.is_empty() && diff.only_after.is_empty());
    assert_eq!(diff.allocated.change, 0);
    assert!(diff.sites.iter().all(|s| s.kind == SiteChangeKind::Same));
    // The text says so instead of an empty table.
    let (code, out, err) = common::run_vramtop(&["diff", &path, &path], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 changed"), "{out}");
    assert!(
        out.trim_end().ends_with("no site's live bytes changed"),
        "{out}"
    );
    assert!(!out.contains("change          site"), "{out}");
}

#[test]
fn diff_of_files_of_different_devices_is_refused() {
    let (Some((a_path, a)), Some((b_path, b))) = (
        shared("muduard_dump_snapshot_a.pickle"),
        shared("muduard_dump_snapshot_b.pickle"),
    ) else {
        return;
    };
    assert!(matches!(
        diff_snapshots(&a, &b, Grouping::UserFrame),
        Err(DiffError::DifferentDevices { .. })
    ));
    let (code, out, err) = common::run_vramtop(&["diff", &a_path, &b_path], None);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("different devices"), "{err}");
    assert!(
        err.contains("--devices 0:1"),
        "says how to compare anyway: {err}"
    );
    assert!(err.starts_with("vramtop: error: "), "the one prefix: {err}");
}

#[test]
fn diff_with_devices_compares_one_gpu_of_each_file() {
    let (Some((a_path, a)), Some((b_path, b))) = (
        shared("muduard_dump_snapshot_a.pickle"),
        shared("muduard_dump_snapshot_b.pickle"),
    ) else {
        return;
    };
    let diff = diff_snapshot_devices(&a, &b, (0, 1), Grouping::UserFrame).expect("0 and 1 exist");
    assert_eq!(diff.allocated.before, allocated(&a));
    assert_eq!(diff.allocated.after, allocated(&b));
    assert_eq!(diff.segments.before as usize, a.segments.len());
    assert_eq!(diff.segments.after as usize, b.segments.len());
    let site_bytes = |after: bool| -> u64 {
        diff.sites
            .iter()
            .map(|s| if after { s.bytes.after } else { s.bytes.before })
            .sum()
    };
    assert_eq!(
        site_bytes(false),
        allocated(&a),
        "every live byte has a site"
    );
    assert_eq!(site_bytes(true), allocated(&b));
    assert_eq!(
        diff_snapshot_devices(&a, &b, (0, 2), Grouping::UserFrame),
        Err(DiffError::NoSuchDevice {
            side: "AFTER",
            device: 2,
            have: vec![1]
        })
    );
    let (code, out, err) =
        common::run_vramtop(&["diff", &a_path, &b_path, "--devices", "0:1"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(GPU 0)") && out.contains("(GPU 1)"), "{out}");
    assert!(
        out.contains("note: no segment is at the same address on both sides"),
        "{out}"
    );
    // A file against itself shares every segment: no such note.
    let (_, same, _) = common::run_vramtop(&["diff", &a_path, &a_path], None);
    assert!(
        !same.contains("no segment is at the same address"),
        "{same}"
    );
    let (code, _, err) = common::run_vramtop(&["diff", &a_path, &b_path, "--devices", "0-1"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("is not GPU:GPU"), "{err}");
}

#[test]
fn diff_of_an_unreadable_file_exits_2_with_one_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.pickle");
    std::fs::write(&bad, b"not a pickle").expect("write");
    let bad = bad.display().to_string();
    let missing = dir.path().join("missing.pickle").display().to_string();
    for args in [["diff", &bad, &missing], ["diff", &missing, &bad]] {
        let (code, out, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 2, "{out}{err}");
        assert!(out.is_empty());
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("vramtop: error: "), "the one prefix: {err}");
    }
}

#[test]
fn diff_names_an_unreadable_file_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty.pickle");
    std::fs::write(&empty, b"").expect("write");
    let empty = empty.display().to_string();
    let missing = dir.path().join("missing.pickle").display().to_string();
    for (args, named) in [
        (["diff", &empty, &missing], &empty),
        (["diff", &missing, &empty], &missing),
    ] {
        let (code, _, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 2, "{err}");
        assert_eq!(err.matches(named.as_str()).count(), 1, "{err}");
    }
}

#[test]
fn diff_text_cut_by_top_keeps_the_sites_that_lost_the_most() {
    // no_grad → grad: three sites gone (1.86 GiB the largest), three new.
    let names = PAIRS[1];
    let (Some((bp, before)), Some((ap, after))) = (shared(names.0), shared(names.1)) else {
        return;
    };
    let diff = diff_snapshots(&before, &after, Grouping::UserFrame).expect("same devices");
    let text = render_diff(&bp, &ap, &diff, 2);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("live bytes by site"))
        .skip(2)
        .take(2)
        .collect();
    assert!(
        rows[0].contains("+1.86 GiB") && rows[0].contains("new"),
        "{text}"
    );
    assert!(
        rows[1].contains("-1.86 GiB") && rows[1].contains("gone"),
        "{text}"
    );
}

#[test]
fn diff_text_and_json_of_a_shared_pair() {
    let names = PAIRS[1];
    let (Some((bp, before)), Some((ap, after))) = (shared(names.0), shared(names.1)) else {
        return;
    };
    let diff = diff_snapshots(&before, &after, Grouping::UserFrame).expect("same devices");
    insta::assert_snapshot!(
        "diff_shreyansh_no_grad_vs_grad",
        render_diff(names.0, names.1, &diff, 5)
    );
    let (code, out, err) = common::run_vramtop(&["diff", &bp, &ap, "--json"], None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    for key in [
        "reserved",
        "allocated",
        "segments",
        "only_before",
        "only_after",
        "sites",
    ] {
        assert!(v.get(key).is_some(), "no {key}");
    }
    assert_eq!(
        v["only_before"].as_array().map(Vec::len),
        Some(diff.only_before.len())
    );
}

#[test]
fn a_side_without_stacks_is_said_and_only_the_totals_and_its_groups_compare() {
    use vramtop::snapshot::sites::NoStackReason;
    let Some((_, with)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    // The same memory recorded without stacks.
    let mut without = with.clone();
    for s in &mut without.segments {
        s.frames = Vec::new().into();
        for b in &mut s.blocks {
            b.frames = Vec::new().into();
        }
    }
    without.device_traces.iter_mut().for_each(Vec::clear);
    let diff = diff_snapshots(&without, &with, Grouping::UserFrame).expect("same devices");
    assert_eq!(
        diff.before_without_stacks,
        Some(NoStackReason::WithoutStacks)
    );
    assert_eq!(diff.after_without_stacks, None);
    let text = render_diff("a", "b", &diff, 10);
    assert!(
        unwrapped(&text).contains(
            "note: no live block of BEFORE has a stack (recorded without stacks): AFTER's sites \
             with a stack all read new"
        ),
        "{text}"
    );
    let back = diff_snapshots(&with, &without, Grouping::UserFrame).expect("same devices");
    assert_eq!(
        back.after_without_stacks,
        Some(NoStackReason::WithoutStacks)
    );
    assert!(
        render_diff("a", "b", &back, 10).contains("note: no live block of AFTER has a stack"),
        "{}",
        render_diff("a", "b", &back, 10)
    );
    // Stacks on both sides: no such note.
    let same = diff_snapshots(&with, &with, Grouping::UserFrame).expect("same devices");
    assert_eq!(
        (same.before_without_stacks, same.after_without_stacks),
        (None, None)
    );
    assert!(!render_diff("a", "b", &same, 10).contains("has a stack"));
}

#[test]
fn diff_notes_wrap_within_80_columns_hanging_under_their_text() {
    // Two dumps of one run on two GPUs, BEFORE recorded without stacks:
    // no segment is shared and BEFORE has no stack, so both notes show.
    let (Some((_, before)), Some((_, after))) = (
        shared("muduard_dump_snapshot_a.pickle"),
        shared("muduard_dump_snapshot_b.pickle"),
    ) else {
        return;
    };
    let diff =
        diff_snapshot_devices(&before, &after, (0, 1), Grouping::UserFrame).expect("GPUs 0 and 1");
    let text = render_diff(
        "muduard_dump_snapshot_a.pickle (GPU 0)",
        "muduard_dump_snapshot_b.pickle (GPU 1)",
        &diff,
        DEFAULT_LINES,
    );
    // Every line fits 80 terminal cells, the rows of segments and of
    // sites included.
    for line in text.lines() {
        assert!(
            cells(line) <= 80,
            "{} columns: {line:?}\n{text}",
            cells(line)
        );
    }
    // Each note keeps its text, its later lines under the text after
    // "note: ".
    let lines: Vec<&str> = text.lines().collect();
    let first = lines
        .iter()
        .position(|l| l.starts_with("note: "))
        .expect("a note");
    let notes: Vec<&str> = lines[first..]
        .iter()
        .take_while(|l| l.starts_with("note: ") || l.starts_with("      "))
        .copied()
        .collect();
    assert_eq!(
        notes.iter().filter(|l| l.starts_with("note: ")).count(),
        2,
        "{text}"
    );
    assert!(notes.len() > 2, "the notes wrap: {text}");
    for line in &notes {
        let text_starts = line.strip_prefix("note: ").or(line.strip_prefix("      "));
        assert!(
            text_starts.is_some_and(|t| !t.starts_with(' ')),
            "{line:?}\n{text}"
        );
    }
    let notes = unwrapped(&notes.join("\n"));
    for said in [
        "note: no segment is at the same address on both sides (two processes, two GPUs or a \
         restart): the lists below are all of each side; the totals compare",
        "note: no live block of BEFORE has a stack (recorded without stacks): AFTER's sites \
         with a stack all read new against it; the totals and the no-stack groups compare",
    ] {
        assert!(notes.contains(said), "{said}\n{text}");
    }
}

#[test]
fn diff_ascii_prints_the_comparison_in_ascii_one_character_for_one() {
    let (Some((a_path, _)), Some((c_path, _))) = (
        shared("muduard_dump_snapshot_a.pickle"),
        shared("muduard_dump_snapshot_c.pickle"),
    ) else {
        return;
    };
    let plain = common::assert_ascii_twin(&["diff", &a_path, &c_path]);
    assert!(plain.contains("… 652 more"), "{plain}");
}

/// The shared snapshots with a trace, whose moments `--at` compares.
const TRACED: [&str; 2] = [
    "silmont_mem_snapshot.pickle",
    "Hyperion-shuo_large_cl128_fw_with_grad_bf16.pickle",
];

/// The `--group` value of `grouping`, as the command line names it.
fn group_arg(grouping: Grouping) -> String {
    use clap::ValueEnum as _;
    let arg = vramtop::cli::GroupArg::value_variants()
        .iter()
        .find(|g| g.grouping() == grouping)
        .expect("every grouping has a value");
    arg.to_possible_value()
        .expect("not hidden")
        .get_name()
        .to_string()
}

/// `value` as its JSON text reads back: a fraction parses as the
/// command's printed one does (serde_json's reader may differ from the
/// float printed in its last digit).
fn as_read(value: &impl serde::Serialize) -> serde_json::Value {
    let text = serde_json::to_string(value).expect("serializes");
    serde_json::from_str(&text).expect("reads back")
}

#[test]
fn diff_of_two_moments_agrees_with_the_viewer_s_ab_comparison() {
    use vramtop::app::viewer::ViewerAction;
    for name in TRACED {
        let Some(path) = common::shared_snapshot(name) else {
            return;
        };
        let Some(mut v) = common::shared_viewer(name) else {
            return;
        };
        let path = path.display().to_string();
        let device = v.device_index();
        let n = v.device().expect("a traced GPU").len();
        let peak = v.device_peaks().expect("peaks").allocated.cursor;
        // (A as asked, its cursor; B likewise): B before A is compared
        // earlier first, as the viewer swaps its marks.
        let at = |asked: &str, cursor: usize| (asked.to_string(), cursor);
        let moments = [
            (at("start", 0), at("peak", peak)),
            (at(&(n / 3).to_string(), n / 3), at("end", n)),
            (at("peak", peak), at(&(n / 5).to_string(), n / 5)),
        ];
        let keymap = vramtop::app::keymap::Keymap::default();
        let pairs = Grouping::ALL.into_iter().zip(moments.iter().cycle());
        for (grouping, ((a_arg, a), (b_arg, b))) in pairs {
            v.grouping = grouping;
            v.cursors[device] = *a;
            v.refresh();
            v.act(&keymap, ViewerAction::MarkA);
            v.cursors[device] = *b;
            v.refresh();
            v.act(&keymap, ViewerAction::MarkB);
            v.act(&keymap, ViewerAction::Compare);
            let c = v.compare.clone().expect("both marks on this GPU");
            v.compare = None;
            let group = group_arg(grouping);
            let args = [
                "diff", &path, "--at", a_arg, "--at", b_arg, "--json", "--group", &group,
            ];
            let (code, out, err) = common::run_vramtop(&args, None);
            assert_eq!(code, 0, "{args:?}: {err}");
            let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
            let what = format!("{name} {args:?}");
            assert_eq!((c.a, c.b), ((*a).min(*b), (*a).max(*b)), "{what}");
            assert_eq!(json["before_at"]["cursor"], c.a, "{what}");
            assert_eq!(json["after_at"]["cursor"], c.b, "{what}");
            assert_eq!(json["moments_swapped"], *a > *b, "{what}");
            assert_eq!(json["events"], n, "{what}");
            let diff = as_read(&c.diff);
            let diff = diff.as_object().expect("an object");
            assert!(diff.contains_key("sites") && diff.contains_key("only_after"));
            for (key, value) in diff {
                assert_eq!(&json[key], value, "{what}: {key}");
            }
            assert_eq!(json["allocated_between"], as_read(&c.between), "{what}");
            assert_eq!(json["highest_between"], as_read(&c.highest), "{what}");
            assert_eq!(
                json["grouping"],
                serde_json::to_value(grouping).expect("serializes")
            );
        }
    }
}

#[test]
fn moments_asked_later_first_are_compared_earlier_first_and_it_is_said() {
    let Some(path) = common::shared_snapshot("silmont_mem_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let note = "note: the first --at (peak) is later in the trace than the second (start)";
    let (code, swapped, err) =
        common::run_vramtop(&["diff", &path, "--at", "peak", "--at", "start"], None);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = swapped.lines().collect();
    assert!(lines[1].starts_with("before: event 0/"), "{swapped}");
    assert!(lines[1].ends_with("(--at start)"), "{swapped}");
    assert!(lines[2].ends_with("(--at peak)"), "{swapped}");
    assert!(lines[3].starts_with(note), "{swapped}");
    let (code, in_order, err) =
        common::run_vramtop(&["diff", &path, "--at", "start", "--at", "peak"], None);
    assert_eq!(code, 0, "{err}");
    assert!(!in_order.contains("note: the first --at"), "{in_order}");
    // Apart from the note, the same comparison.
    let without_note: String = swapped
        .lines()
        .filter(|l| !l.starts_with(note) && !l.starts_with("      compared earlier"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(without_note, in_order);
}

#[test]
fn the_highest_between_two_moments_is_the_timeline_s_first_maximum_there() {
    use std::sync::Arc;
    use vramtop::snapshot::diff::diff_cursors;
    use vramtop::snapshot::scrub::Scrub;
    use vramtop::snapshot::sites::NoStackReason;
    let Some((_, s)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let scrub = Scrub::new(Arc::new(s));
    let d = &scrub.devices[0];
    let n = d.len();
    for (a, b) in [(0, n), (10, 40), (40, 10), (53, 53), (54, n), (n, n + 7)] {
        let c = diff_cursors(d, a, b, Grouping::UserFrame, NoStackReason::BeforeRecording);
        let (lo, hi) = (a.min(b).min(n), a.max(b).min(n));
        let walked: Vec<(usize, u64, u64)> = (lo..=hi)
            .map(|k| {
                let st = d.state_at(k);
                (k, st.allocated, st.reserved)
            })
            .collect();
        let top = walked.iter().map(|w| w.1).max().expect("a cursor");
        let first = walked.iter().find(|w| w.1 == top).expect("reached");
        assert_eq!(
            (c.highest.allocated.cursor, c.highest.allocated.bytes),
            (first.0, top),
            "{a}..{b}"
        );
        let top = walked.iter().map(|w| w.2).max().expect("a cursor");
        let first = walked.iter().find(|w| w.2 == top).expect("reached");
        assert_eq!(
            (c.highest.reserved.cursor, c.highest.reserved.bytes),
            (first.0, top),
            "{a}..{b}"
        );
        // Never below either end.
        assert!(c.highest.allocated.bytes >= c.diff.allocated.before.max(c.diff.allocated.after));
    }
}

#[test]
fn diff_at_names_a_moment_past_the_end_a_missing_oom_or_trace_in_one_line() {
    let Some((path, _)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let Some((no_trace, _)) = shared("albi2_thesis-text-to-SQL_dump_snapshot.pickle") else {
        return;
    };
    for (args, said) in [
        (
            vec!["diff", &path, "--at", "98", "--at", "1"],
            "event 98 is past the end of GPU 0's trace: it has 97 events",
        ),
        (
            vec!["diff", &path, "--at", "oom", "--at", "1"],
            "GPU 0's trace has no OOM event",
        ),
        (
            vec!["diff", &path, "--at", "1", "--at", "2", "--device", "3"],
            "GPU 3 has no trace of memory events (GPUs with one: 0)",
        ),
        (
            vec!["diff", &no_trace, "--at", "end", "--at", "1"],
            "no trace of memory events in the file: --at 1 names a moment of the trace",
        ),
        (
            vec!["open", &path, "--summary", "--at", "18446744073709551615"],
            "past the end of GPU 0's trace",
        ),
        (
            vec!["open", &no_trace, "--summary", "--at", "start"],
            "no trace of memory events in the file: --at start names a moment of the trace",
        ),
        (
            vec!["open", &no_trace, "--summary", "--at", "peak"],
            "file holds its final state only, which --at end names (",
        ),
        (
            vec!["open", &path, "--summary", "--no-trace", "--at", "oom"],
            "the trace was not read (--no-trace): --at oom names a moment of it",
        ),
    ] {
        let (code, out, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

#[test]
fn diff_of_two_moments_reads_as_the_two_file_report_with_the_moments_and_fits_80() {
    let Some((path, _)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let text =
        common::assert_ascii_twin(&["diff", &path, "--at", "peak", "--at", "40", "--top", "3"]);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("file:   ") && lines[0].ends_with(" (GPU 0)"),
        "{text}"
    );
    assert!(lines[1].starts_with("before: event 40/97, t+"), "{text}");
    assert!(
        lines[2].starts_with("after:  event 53/97, t+") && lines[2].ends_with("(--at peak)"),
        "{text}"
    );
    assert!(
        unwrapped(&text).contains("highest between: 3.03 GiB allocated at event 53/97"),
        "{text}"
    );
    assert!(
        text.contains("live bytes by site (by user frame)"),
        "{text}"
    );
    assert!(
        text.contains("allocated between BEFORE and AFTER and still alive at AFTER: 2.50 GiB in 2"),
        "{text}"
    );
    for line in text.lines() {
        assert!(cells(line) <= 80, "{line:?}\n{text}");
    }
    // The grouping the sites were asked by heads them.
    let (code, out, err) = common::run_vramtop(
        &[
            "diff",
            &path,
            "--at",
            "0",
            "--at",
            "end",
            "--group",
            "file:line",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("live bytes by site (by file:line)"), "{out}");
}

#[test]
fn diff_of_one_file_with_itself_says_so_first_and_keeps_the_report() {
    let (Some((a_path, _)), Some((b_path, _))) = (
        shared("muduard_dump_snapshot_a.pickle"),
        shared("muduard_dump_snapshot_c.pickle"),
    ) else {
        return;
    };
    let (code, out, err) = common::run_vramtop(&["diff", &a_path, &a_path], None);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().next(),
        Some("note: BEFORE and AFTER are one file (the same path): nothing can differ"),
        "{out}"
    );
    assert!(
        out.contains("before: ") && out.contains("unchanged"),
        "{out}"
    );
    // A copy under another name: the same bytes.
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("copy.pickle");
    std::fs::copy(&a_path, &copy).expect("copy");
    let copy = copy.display().to_string();
    let (code, out, _) = common::run_vramtop(&["diff", &a_path, &copy], None);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().next(),
        Some("note: BEFORE and AFTER hold the same bytes (a copy): nothing can differ"),
        "{out}"
    );
    let (_, out, _) = common::run_vramtop(&["diff", &a_path, &b_path], None);
    assert!(!out.contains("are the same"), "{out}");
}

#[test]
fn diff_of_standard_input_with_a_file_of_the_same_bytes_says_so_first() {
    use vramtop::snapshot::capture::{recording_model, snapshot_of};
    let dir = tempfile::tempdir().expect("temp dir");
    let mut model = recording_model("", 8 << 30).expect("defaults");
    model.malloc(512, 0).expect("fits");
    let a = dir.path().join("a.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot_of(&model, 0), &a).expect("written");
    model.malloc(4 << 20, 0).expect("fits");
    let b = dir.path().join("b.pickle");
    vramtop::snapshot::write_snapshot_file(&snapshot_of(&model, 0), &b).expect("written");
    let bytes = std::fs::read(&a).expect("read");
    let (a, b) = (a.display().to_string(), b.display().to_string());
    let note = "note: BEFORE and AFTER hold the same bytes (a copy): nothing can differ";
    // Either side standard input, as `cat A | vramtop diff - A` gives it.
    for args in [["diff", "-", &a], ["diff", &a, "-"]] {
        let (code, out, err) = common::run_vramtop_with_stdin(&args, &bytes);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert_eq!(out.lines().next(), Some(note), "{args:?}: {out}");
        assert!(out.contains("standard input"), "{args:?}: {out}");
    }
    // Other bytes on standard input: no note.
    let (code, out, err) = common::run_vramtop_with_stdin(&["diff", "-", &b], &bytes);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("before: standard input"), "{out}");
    assert!(!out.contains("same bytes"), "{out}");
    // The JSON has no note either way.
    let (code, out, err) = common::run_vramtop_with_stdin(&["diff", "-", &a, "--json"], &bytes);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with('{'), "{out}");
}

#[test]
fn at_end_answers_for_a_file_without_a_trace_or_read_with_no_trace() {
    let Some((path, _)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let Some((no_trace, _)) = shared("albi2_thesis-text-to-SQL_dump_snapshot.pickle") else {
        return;
    };
    for args in [
        vec!["open", &no_trace, "--summary", "--at", "end"],
        vec!["open", &path, "--summary", "--no-trace", "--at", "end"],
    ] {
        let (code, out, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(
            out.contains("at the end (the file's own state) (--at end): "),
            "{args:?}: {out}"
        );
        let mut json_args = args.clone();
        json_args.push("--json");
        let (code, out, err) = common::run_vramtop(&json_args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        let device = &v["sites"][0];
        assert_eq!(device["at_cursor"]["asked"], "end", "{out}");
        // The end's sites, as the summary's own "at the end".
        assert_eq!(
            device["at_cursor"]["allocated"], device["at_end"]["allocated"],
            "{out}"
        );
    }
    // Two files' final states compared: the end with the end, nothing moved.
    let (code, out, err) = common::run_vramtop(
        &[
            "diff", &no_trace, "--at", "end", "--at", "end", "--device", "0",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("before: the end (the file's own state) (--at end)"),
        "{out}"
    );
}

/// A file with no segment and no trace, as `pickle.dump({'segments': [],
/// 'device_traces': []}, f, protocol=2)` writes it.
const EMPTY_PICKLE: &[u8] = b"\x80\x02}q\x00(X\x08\x00\x00\x00segmentsq\x01]q\x02X\r\x00\x00\x00\
device_tracesq\x03]q\x04u.";

#[test]
fn at_end_of_a_file_with_no_gpu_answers_with_nothing_allocated() {
    let dir = tempfile::tempdir().expect("temp dir");
    let empty = dir.path().join("empty.pickle");
    std::fs::write(&empty, EMPTY_PICKLE).expect("write");
    let empty = empty.display().to_string();
    for args in [
        vec!["open", &empty, "--summary", "--at", "end"],
        vec!["open", &empty, "--summary", "--no-trace", "--at", "end"],
    ] {
        let (code, out, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
        assert!(
            unwrapped(&out).contains(
                "at the end (the file's own state) (--at end): nothing allocated, the file has \
                 no GPU"
            ),
            "{args:?}: {out}"
        );
        let mut json_args = args.clone();
        json_args.push("--json");
        let (code, out, err) = common::run_vramtop(&json_args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["sites"], serde_json::json!([]), "{out}");
    }
    // A moment of the trace is still refused, and never by suggesting
    // the very option given.
    let (code, _, err) = common::run_vramtop(&["open", &empty, "--summary", "--at", "3"], None);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--at 3 names a moment of the trace"), "{err}");
    // Two moments of no GPU: said, not "the file has GPUs : --device N".
    for args in [
        vec!["diff", &empty, "--at", "end", "--at", "end"],
        vec![
            "diff", &empty, "--at", "end", "--at", "end", "--device", "0",
        ],
    ] {
        let (code, out, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.contains("the file has no GPU (no segment, no trace)"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("--device N"), "{args:?}: {err}");
    }
}

#[test]
fn at_a_moment_of_a_file_without_a_trace_gives_the_summarys_advice_for_it() {
    for (name, advice) in [
        (
            "Yiyi-philosophy_LLM-inference_oom_snapshot.pickle",
            "_record_memory_history(True, trace_alloc_max_entries=N)",
        ),
        ("muduard_memory_snapshot.pkl", "_dump_snapshot(FILE)"),
    ] {
        let Some((path, _)) = shared(name) else {
            continue;
        };
        let (_, summary, _) = common::run_vramtop(&["open", &path, "--summary"], None);
        assert!(unwrapped(&summary).contains(advice), "{name}: {summary}");
        for args in [
            vec!["open", &path, "--summary", "--at", "5"],
            vec!["diff", &path, "--at", "start", "--at", "end"],
        ] {
            let (code, _, err) = common::run_vramtop(&args, None);
            assert_eq!(code, 2, "{args:?}: {err}");
            assert!(err.contains(advice), "{args:?}: {err}");
            assert!(!err.contains("is recording has a trace"), "{args:?}: {err}");
        }
    }
}

#[test]
fn at_end_of_a_file_without_a_trace_says_it_is_the_state_listed_not_lists_it_again() {
    let cases = [
        ("muduard_memory_snapshot.pkl", false),
        ("silmont_mem_snapshot.pickle", true),
    ];
    for (name, no_trace) in cases {
        let Some((path, _)) = shared(name) else {
            continue;
        };
        let mut args = vec!["open", path.as_str(), "--summary", "--at", "end"];
        if no_trace {
            args.push("--no-trace");
        }
        let (code, out, err) = common::run_vramtop(&args, None);
        assert_eq!(code, 0, "{args:?}: {err}");
        let plain_args: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| *a != "--at" && *a != "end")
            .collect();
        let (_, plain, _) = common::run_vramtop(&plain_args, None);
        // Every site line of the summary's "at the end", no more.
        let site_lines = |text: &str| {
            text.lines()
                .filter(|l| l.contains('%') && l.contains("block"))
                .count()
        };
        assert!(site_lines(&plain) > 0, "{plain}");
        assert_eq!(site_lines(&out), site_lines(&plain), "{args:?}: {out}");
        assert!(
            unwrapped(&out).contains("(--at end): ")
                && unwrapped(&out).contains("reserved, the state listed above"),
            "{args:?}: {out}"
        );
    }
}

#[test]
fn no_site_changed_says_when_sites_freed_and_allocated_the_same_again() {
    // Between two iterations' ends the same 4 sites free and allocate
    // again: "no site's live bytes changed" and "allocated between …
    // 2 KiB in 4 sites" are both true, and the first line says how.
    let Some(path) = common::shared_snapshot("JasperSolt_EoR_NN_snapshot.pickle") else {
        return;
    };
    let path = path.display().to_string();
    let (code, out, err) =
        common::run_vramtop(&["diff", &path, "--at", "mark:1", "--at", "mark:2"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "\n  no site's live bytes changed (4 sites freed and allocated the same again)\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "allocated between BEFORE and AFTER and still alive at AFTER: 2 KiB in 4 sites"
        ),
        "{out}"
    );
}

/// `s` as the same program would record it run from another folder: every
/// absolute path of its stacks under `/moved`.
fn run_from_elsewhere(s: &Snapshot) -> Snapshot {
    use vramtop::snapshot::{Frame, Frames};
    let moved = |frames: &Frames| -> Frames {
        frames
            .iter()
            .map(|f| Frame {
                filename: if f.filename.starts_with('/') {
                    format!("/moved{}", f.filename).into()
                } else {
                    f.filename.clone()
                },
                ..f.clone()
            })
            .collect::<Vec<_>>()
            .into()
    };
    let mut out = s.clone();
    for segment in &mut out.segments {
        for block in &mut segment.blocks {
            block.frames = moved(&block.frames);
        }
    }
    out
}

#[test]
fn diff_of_one_program_run_from_two_folders_matches_its_sites_and_says_so() {
    let Some((path, s)) = shared("silmont_mem_snapshot.pickle") else {
        return;
    };
    let elsewhere = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("silmont-moved.pickle");
    vramtop::snapshot::write_snapshot_file(&run_from_elsewhere(&s), &elsewhere)
        .expect("writes the moved copy");
    let elsewhere = elsewhere.display().to_string();
    for grouping in [
        "user-frame",
        "python-frame",
        "file-line",
        "function",
        "whole-stack",
    ] {
        let (code, out, err) =
            common::run_vramtop(&["diff", &path, &elsewhere, "--group", grouping], None);
        assert_eq!(code, 0, "{err}");
        let text = unwrapped(&out);
        assert!(
            text.contains("0 changed") && text.contains("no site's live bytes changed"),
            "{grouping}: every site is the same code run from elsewhere: {out}"
        );
        assert!(
            text.contains("matched by file name, not path") && text.contains("/moved/"),
            "{grouping}: the pairing is said with an example: {out}"
        );
        let (code, json, err) = common::run_vramtop(
            &["diff", &path, &elsewhere, "--group", grouping, "--json"],
            None,
        );
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
        let sites = v["sites"].as_array().expect("sites");
        assert!(
            sites.iter().any(|s| s.get("after_key").is_some()),
            "{grouping}: AFTER's own key is kept: {json}"
        );
        assert!(
            sites.iter().all(|s| s["kind"] == "same"),
            "{grouping}: {json}"
        );
    }
    // A file compared with itself pairs nothing by name.
    let (_, out, _) = common::run_vramtop(&["diff", &path, &path], None);
    assert!(!unwrapped(&out).contains("matched by file name"), "{out}");
}

/// The fragmentation scenario's default and expandable-segments runs, as
/// `--save-snapshot` writes them: the first 200 MiB segment of one and the
/// one expandable segment of the other start at the same address.
fn fragmentation_pair(dir: &std::path::Path) -> (String, String) {
    let saved = dir.join("frag.pickle");
    let (code, out, err) = common::run_vramtop(
        &[
            "scenario",
            "fragmentation_oom",
            "--save-snapshot",
            &saved.display().to_string(),
        ],
        None,
    );
    assert_eq!(code, 0, "{out}{err}");
    let file = |variant: &str| {
        dir.join(format!("frag-{variant}.pickle"))
            .display()
            .to_string()
    };
    (file("default"), file("expandable_segments"))
}

#[test]
fn a_segment_at_one_address_with_two_sizes_is_said_resized_not_at_no_shared_address() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (before, after) = fragmentation_pair(dir.path());
    let (code, out, err) = common::run_vramtop(&["diff", &before, &after], None);
    assert_eq!(code, 0, "{out}{err}");
    let text = unwrapped(&out);
    assert!(
        !text.contains("no segment is at the same address"),
        "0x7f0000000000 is on both sides: {out}"
    );
    assert!(
        text.contains(
            "note: no segment is the same (address and size) on both sides: the lists below are \
             all of each side; 0x7f0000000000 holds a segment of 200 MiB in BEFORE and one of \
             6.41 GiB in AFTER; the totals and the sites compare"
        ),
        "{out}"
    );
    let (code, json, err) = common::run_vramtop(&["diff", &before, &after, "--json"], None);
    assert_eq!(code, 0, "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let resized = v["resized"].as_array().expect("resized");
    assert_eq!(resized.len(), 1, "{json}");
    assert_eq!(resized[0]["address"], 0x7f00_0000_0000_u64);
    assert_eq!(resized[0]["before"], 200_u64 << 20);
}

#[test]
fn diff_names_expandable_segments_in_text_and_json_as_the_summary_does() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (before, after) = fragmentation_pair(dir.path());
    let (code, out, err) = common::run_vramtop(&["diff", &before, &after], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("  0x7f0000000000 dev 0 stream 0 large expandable 6.41 GiB (6.39 GiB"),
        "{out}"
    );
    assert!(
        out.contains("  0x7f0000000000 dev 0 stream 0 large 200 MiB (150 MiB allocated)\n"),
        "{out}"
    );
    let (_, summary, _) = common::run_vramtop(&["open", &after, "--summary"], None);
    assert!(summary.contains("large expandable 6.41 GiB"), "{summary}");
    let (code, json, err) = common::run_vramtop(&["diff", &before, &after, "--json"], None);
    assert_eq!(code, 0, "{json}{err}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    let expandable = |side: &str| -> Vec<bool> {
        v[side]
            .as_array()
            .expect("a list")
            .iter()
            .map(|s| s["is_expandable"].as_bool().expect("is_expandable"))
            .collect()
    };
    assert_eq!(expandable("only_after"), vec![true], "{json}");
    assert!(expandable("only_before").iter().all(|e| !e), "{json}");
}
