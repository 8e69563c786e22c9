//! `vramtop record` files read back whatever they hold: any bytes, lines
//! of other versions, fields of the wrong type, GPUs that come and go,
//! time that runs backwards, a last line cut anywhere. Every input ends
//! in a summary or one line of error, never a panic, and the text fits
//! 80 columns.

use proptest::prelude::*;
use serde_json::{Value, json};
use vramtop::cli::recording::{no_samples, render};
use vramtop::cli::text::cells;
use vramtop::device::recording::{
    CounterKind, MAX_EVENTS_PER_KIND, RecordingSummary, Route, read_recording, route,
};

fn read(bytes: &[u8]) -> RecordingSummary {
    read_recording(bytes).expect("reading from memory cannot fail")
}

/// What every summary must hold, whatever the input; `fits`: its text
/// fits 80 columns (texts of ASCII and CJK: the wrapping measures a
/// word by its characters, which some sequences of others outgrow).
fn check_summary(s: &RecordingSummary, fits: bool) -> Result<(), TestCaseError> {
    prop_assert!(
        s.samples.saturating_add(s.skipped.lines())
            <= s.lines.saturating_add(s.skipped.cut_then_appended)
    );
    match no_samples(s) {
        Some(why) => {
            prop_assert_eq!(s.samples, 0);
            prop_assert!(!why.contains('\n'), "{}", why);
        }
        None => {
            let text = render("rec.jsonl", s, 10);
            for line in text.lines().filter(|_| fits) {
                prop_assert!(cells(line) <= 80, "{} cells: {}", cells(line), line);
            }
            prop_assert!(serde_json::to_string(s).is_ok());
        }
    }
    for g in &s.gpus {
        if let Some(m) = &g.memory_used {
            prop_assert!(m.min.bytes <= m.peak.bytes);
            prop_assert!(m.min.bytes <= m.median && m.median <= m.peak.bytes);
        }
        prop_assert!(g.first_unix_ms <= g.last_unix_ms);
        let ooms = g
            .events
            .iter()
            .filter(|e| e.kind == CounterKind::Oom)
            .count();
        prop_assert!(ooms <= MAX_EVENTS_PER_KIND);
        for e in &g.events {
            match e.kind {
                CounterKind::Oom | CounterKind::AllocRetry => prop_assert!(e.from < e.to),
                CounterKind::OomsFell | CounterKind::AllocRetriesFell => {
                    prop_assert!(e.from > e.to && e.restart > 0)
                }
            }
        }
    }
    Ok(())
}

/// A text from the file: short, long, or of characters a column would
/// trip on; `wild`: any characters at all.
fn any_text(wild: bool) -> BoxedStrategy<String> {
    if wild {
        return ".{0,200}".boxed();
    }
    prop_oneof![
        "[a-z ./-]{0,12}",
        "[ -~]{0,200}",
        Just("训练步骤_前向传播".repeat(8)),
        Just("x".repeat(300)),
    ]
    .boxed()
}

fn any_allocator(wild: bool) -> impl Strategy<Value = Value> {
    (
        prop::option::of(0u32..6),
        any_text(wild),
        any::<u64>(),
        any::<u64>(),
        prop::option::of(-2i64..6),
        prop::option::of(-2i64..6),
        prop_oneof![
            Just(json!(0.5)),
            Just(json!(-1.0)),
            Just(json!(2.0)),
            Just(json!("x")),
            (0.0f64..=1.0).prop_map(|f| json!(f))
        ],
        any::<bool>(),
    )
        .prop_map(
            |(pid, source, allocated, reserved, ooms, retries, frag, received)| {
                json!({
                    "source": source, "pid": pid, "allocated": allocated, "reserved": reserved,
                    "num_ooms": ooms, "num_alloc_retries": retries,
                    "fragmentation": {"fragmentation": frag, "external_free": reserved / 3,
                                      "largest_free_block": reserved / 7},
                    "segments_received": received,
                })
            },
        )
}

fn any_gpu(wild: bool) -> impl Strategy<Value = Value> {
    (
        0u32..4,
        prop::option::of(0u32..2),
        prop::option::of(prop_oneof![Just("GPU-a".to_string()), Just("GPU-b".to_string()), any_text(wild)]),
        any_text(wild),
        prop::option::of(any::<u64>()),
        prop::option::of(any::<u64>()),
        prop::option::of(prop::collection::vec((any::<u32>(), any_text(wild), prop::option::of(any::<u64>())), 0..40)),
        prop::collection::vec(any_allocator(wild), 0..3),
        0u8..8,
    )
        .prop_map(|(index, mig, uuid, name, used, total, procs, allocators, shape)| {
            let processes = procs.map(|list| {
                list.into_iter()
                    .map(|(pid, command, used)| json!({"pid": pid, "command": command, "used_memory": used}))
                    .collect::<Vec<_>>()
            });
            match shape {
                // Lost, as record writes a GPU that stopped answering.
                0 => json!({"status": "lost", "index": index, "reason": name}),
                // An older line: no status, the shown allocator alone.
                1 => json!({"index": index, "name": name, "memory_used": used,
                            "allocator": allocators.first()}),
                // Fields of another type, and one unknown.
                2 => json!({"index": index, "name": 3, "memory_used": "lots",
                            "processes": {"pid": 1}, "allocators": "none", "future": [1, 2]}),
                _ => json!({"status": "ok", "index": index, "mig_index": mig, "uuid": uuid,
                            "name": name, "memory_total": total, "memory_used": used,
                            "processes": processes, "allocators": allocators}),
            }
        })
}

fn any_sample(wild: bool) -> impl Strategy<Value = Vec<u8>> {
    (
        prop_oneof![0u64..10_000, any::<u64>()],
        prop::collection::vec(any_gpu(wild), 0..4),
    )
        .prop_map(|(t, gpus)| {
            serde_json::to_vec(&json!({"time_unix_ms": t, "backend": "sim", "gpus": gpus}))
                .expect("encodes")
        })
}

fn any_line(wild: bool) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => any_sample(wild),
        1 => any_sample(wild).prop_flat_map(|line| {
            let len = line.len();
            (Just(line), 0..=len).prop_map(|(line, cut)| line[..cut].to_vec())
        }),
        1 => prop::collection::vec(any::<u8>(), 0..200),
        1 => Just(b"{\"time_unix_ms\":\"x\",\"gpus\":7}".to_vec()),
        1 => Just(b"[]".to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn recordings_of_any_bytes_are_summed_up_or_refused_in_one_line(
        bytes in prop::collection::vec(any::<u8>(), 0..4096)
    ) {
        check_summary(&read(&bytes), true)?;
    }

    #[test]
    fn recordings_of_any_lines_are_summed_up_within_80_columns(
        lines in prop::collection::vec(any_line(false), 0..30),
        last_newline in any::<bool>(),
    ) {
        let mut bytes = lines.join(&b'\n');
        if last_newline {
            bytes.push(b'\n');
        }
        check_summary(&read(&bytes), true)?;
    }

    #[test]
    fn recordings_with_texts_of_any_characters_are_summed_up(
        lines in prop::collection::vec(any_line(true), 0..30),
    ) {
        check_summary(&read(&lines.join(&b'\n')), false)?;
    }
}

/// JSON of any shape but a sample's: scalars, arrays, objects whose keys
/// are not a sample's pair (`time_unix_ms` with an array `gpus`).
fn any_json_but_a_sample() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        "[ -~]{0,20}".prop_map(Value::from),
    ];
    let tree = leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    // A top level as a JSON file has one: an array or an object.
    prop_oneof![
        prop::collection::vec(tree.clone(), 0..6).prop_map(Value::Array),
        prop::collection::btree_map("[a-z_]{1,12}", tree, 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
    ]
    .prop_filter("a sample's fields", |v| {
        !(v.get("time_unix_ms").is_some() && v.get("gpus").is_some_and(Value::is_array))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_routed_without_a_panic_and_only_no_bytes_are_empty(
        bytes in prop::collection::vec(any::<u8>(), 0..2048)
    ) {
        let r = route(&bytes);
        prop_assert_eq!(r == Route::Empty, bytes.is_empty());
        if bytes.first() == Some(&0x80) {
            prop_assert_eq!(r, Route::Snapshot);
        }
    }

    #[test]
    fn json_of_any_shape_but_a_samples_is_read_as_a_recording_and_refused_as_neither(
        value in any_json_but_a_sample(),
        pretty in any::<bool>(),
        newline in any::<bool>(),
    ) {
        let mut bytes = if pretty {
            serde_json::to_vec_pretty(&value)
        } else {
            serde_json::to_vec(&value)
        }
        .expect("encodes");
        if newline {
            bytes.push(b'\n');
        }
        // `[1,2]` went to the snapshot reader and `{"a":1}` to the
        // recording reader, which the viewer's refusal then called a
        // recording: both are read as one, and have no sample.
        prop_assert_eq!(route(&bytes), Route::Recording);
        let s = read(&bytes);
        prop_assert_eq!(s.samples, 0);
        let why = no_samples(&s).expect("no sample");
        prop_assert!(
            why.starts_with("neither a `vramtop record` file nor a memory snapshot"),
            "{}",
            why
        );
        prop_assert!(!why.contains('\n'), "{}", why);
    }
}

/// Three samples of two GPUs, one rise of num_ooms.
fn three_samples() -> Vec<u8> {
    (0..3u64)
        .map(|i| {
            let line = json!({"time_unix_ms": 1_000 * i, "gpus": [
                {"status": "ok", "index": 0, "uuid": "GPU-a", "memory_used": i,
                 "allocators": [{"source": "pid 1", "pid": 1, "allocated": 1, "reserved": 2,
                                 "num_ooms": i, "num_alloc_retries": 0}]},
                {"status": "ok", "index": 1, "uuid": "GPU-b", "memory_used": 5},
            ]});
            let mut bytes = serde_json::to_vec(&line).expect("encodes");
            bytes.push(b'\n');
            bytes
        })
        .collect::<Vec<_>>()
        .concat()
}

#[test]
fn a_recording_cut_at_any_byte_keeps_every_whole_sample_before_the_cut() {
    let file = three_samples();
    let ends: Vec<usize> = file
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(at, _)| at)
        .collect();
    for cut in 0..=file.len() {
        let s = read(&file[..cut]);
        // A line is whole once its last byte (before the newline) is in.
        let whole = ends.iter().filter(|&&end| end <= cut).count() as u64;
        assert_eq!(s.samples, whole, "cut at {cut}");
        let mid_line = cut > 0 && !ends.iter().any(|&end| end == cut || end + 1 == cut);
        assert_eq!(s.skipped.cut_last_line, mid_line, "cut at {cut}");
        assert_eq!(s.skipped.not_json, 0, "cut at {cut}");
    }
}
