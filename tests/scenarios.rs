//! The built-in scenarios: they parse, run deterministically, and their key
//! numbers are pinned (each one is explained in docs/scenarios.md). Parser
//! errors name what is wrong.

mod common;

use vramtop::cli::text::cells;
use vramtop::scenario::{self, ScenarioError, ScenarioResult, Summary};

const MIB: u64 = 1 << 20;

fn run_builtin(name: &str) -> ScenarioResult {
    let parsed = scenario::builtin(name).expect("a built-in scenario");
    let s = parsed.unwrap_or_else(|e| panic!("{name} does not parse: {e}"));
    scenario::run(&s).unwrap_or_else(|e| panic!("{name} does not run: {e}"))
}

fn summary<'a>(r: &'a ScenarioResult, variant: &str) -> &'a Summary {
    &r.variant(variant)
        .unwrap_or_else(|| panic!("{} has no variant {variant}", r.name))
        .summary
}

fn parse_err(text: &str) -> String {
    match scenario::parse(text) {
        Ok(_) => panic!("parsed, but should not have:\n{text}"),
        Err(e) => e.to_string(),
    }
}

const HEADER: &str = r#"
name = "t"
title = "test"
explanation = "a test"
device_memory = "1GiB"
context = "100MiB"
"#;

// ------------------------------------------------------------ all of them

#[test]
fn every_builtin_scenario_parses_and_runs_with_invariants_checked_after_each_step() {
    assert_eq!(scenario::builtin_names().len(), 7);
    for (name, text) in scenario::BUILTIN {
        let s = scenario::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(s.name, name);
        assert!(!s.title.is_empty() && s.explanation.len() > 100, "{name}");
        assert!(s.steps.len() < 200, "{name} has {} steps", s.steps.len());
        let r = scenario::run(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
        for v in &r.variants {
            assert!(!v.steps.is_empty(), "{name}/{}", v.variant);
        }
    }
}

#[test]
fn every_builtin_scenario_gives_the_same_result_twice() {
    for name in scenario::builtin_names() {
        assert_eq!(run_builtin(name), run_builtin(name), "{name}");
    }
}

#[test]
fn driver_used_is_reserved_plus_context_at_every_step() {
    for name in scenario::builtin_names() {
        let r = run_builtin(name);
        for v in &r.variants {
            // The main process's context and one per worker that has one.
            let contexts = r.context * (1 + u64::from(v.worker_contexts));
            for s in &v.steps {
                assert_eq!(
                    s.driver_used,
                    s.reserved + contexts,
                    "{name} step {}",
                    s.step
                );
                assert!(s.allocated <= s.reserved);
                assert!((0.0..=1.0).contains(&s.fragmentation));
            }
        }
    }
}

// ------------------------------------------------------- pinned numbers

#[test]
fn no_grad_inference_keeps_two_activations_instead_of_thirteen() {
    let r = run_builtin("no_grad_inference");
    let with = summary(&r, "with_grad");
    let without = summary(&r, "no_grad");
    // 12 × 48 MiB weights + 13 × 96 MiB activations (input + 12 layers).
    assert_eq!(with.peak_reserved, (576 + 13 * 96) * MIB);
    assert_eq!(with.peak_allocated, 1824 * MIB);
    // Weights + the input and output of one layer.
    assert_eq!(without.peak_reserved, (576 + 2 * 96) * MIB);
    assert_eq!(without.peak_allocated, 768 * MIB);
    assert!(!with.oom && !without.oom);
    assert_eq!(with.empty_cache_released + without.empty_cache_released, 0);
}

#[test]
fn mixed_precision_halves_activations_and_gradients() {
    let r = run_builtin("mixed_precision");
    let fp32 = summary(&r, "fp32");
    let bf16 = summary(&r, "bf16");
    // Weights 768 + activations 12 × 256 + the first 64 MiB gradient; later
    // gradients are carved out of freed activation blocks.
    assert_eq!(fp32.peak_reserved, (768 + 3072 + 64) * MIB);
    assert_eq!(bf16.peak_reserved, (768 + 1536 + 32) * MIB);
    assert_eq!(fp32.peak_allocated, fp32.peak_reserved);
    assert_eq!(bf16.peak_allocated, bf16.peak_reserved);
    assert!(!fp32.oom && !bf16.oom);
    let last = r
        .variant("bf16")
        .and_then(|v| v.steps.last())
        .expect("steps");
    assert_eq!(last.allocated, 768 * MIB, "only the weights stay allocated");
    assert_eq!(last.reserved, 2336 * MIB, "reserved stays at its peak");
}

#[test]
fn mixed_precision_backward_runs_last_layer_first_and_states_the_saving_it_shows() {
    let r = run_builtin("mixed_precision");
    for variant in ["fp32", "bf16"] {
        let layers: Vec<&str> = r
            .variant(variant)
            .expect("variant")
            .steps
            .iter()
            .filter(|s| s.label.ends_with(" grad"))
            .map(|s| s.label.as_str())
            .collect();
        assert_eq!(layers.len(), 12, "{layers:?}");
        assert!(layers[0].contains("layer 11 "), "{layers:?}");
        assert!(layers[11].contains("layer 0 "), "{layers:?}");
    }
    // 3.81 GiB to 2.28 GiB is 40 % less: "most of it" overstated it.
    let (fp32, bf16) = (summary(&r, "fp32"), summary(&r, "bf16"));
    let saved = 100 * (fp32.peak_reserved - bf16.peak_reserved) / fp32.peak_reserved;
    assert_eq!(saved, 40);
    assert!(!r.explanation.contains("most of"), "{}", r.explanation);
    assert!(
        r.explanation.contains("cuts it by 40% (3.81 to 2.28 GiB)"),
        "{}",
        r.explanation
    );
}

#[test]
fn gradient_accumulation_numbers_its_micro_batches_1_to_4_alike() {
    let r = run_builtin("gradient_accumulation");
    let v = r.variant("micro_batches").expect("variant");
    let forwards: Vec<&str> = v
        .steps
        .iter()
        .filter(|s| s.label.starts_with("forward"))
        .map(|s| s.label.as_str())
        .collect();
    assert_eq!(
        forwards,
        (1..=4)
            .map(|k| format!("forward, micro-batch {k} of 4"))
            .collect::<Vec<_>>()
    );
    assert!(v.steps.iter().all(|s| !s.label.contains("of 3")));
}

#[test]
fn gradient_accumulation_in_four_micro_batches_halves_the_peak() {
    let r = run_builtin("gradient_accumulation");
    let big = summary(&r, "big_batch");
    let micro = summary(&r, "micro_batches");
    // Weights 1 GiB + activations 4 GiB + gradients 1 GiB.
    assert_eq!(big.peak_reserved, 6144 * MIB);
    // Weights 1 GiB + a quarter of the activations + gradients 1 GiB.
    assert_eq!(micro.peak_reserved, 3072 * MIB);
    assert!(!big.oom && !micro.oom);
    // Micro-batches 2-4 reuse the cached blocks of the first: no new segment.
    let v = r.variant("micro_batches").expect("variant");
    assert!(v.steps.iter().all(|s| s.reserved <= 3072 * MIB));
    assert_eq!(v.steps.last().map(|s| s.segments), Some(48));
}

#[test]
fn empty_cache_releases_only_segments_without_a_live_block() {
    let r = run_builtin("empty_cache_live_block");
    let v = r.variant("default").expect("variant");
    let released: Vec<u64> = v
        .steps
        .iter()
        .filter(|s| s.label.starts_with("empty_cache"))
        .map(|s| s.released)
        .collect();
    assert_eq!(released, vec![512 * MIB, 20 * MIB, 2 * MIB]);
    let first = v.steps.iter().find(|s| s.released > 0).expect("a release");
    // t1 (6 MiB) pins the 20 MiB segment, the loss (4 KiB) the 2 MiB one.
    assert_eq!(first.reserved, 22 * MIB);
    assert_eq!(first.allocated, 6 * MIB + 4096);
    assert_eq!(first.segments, 2);
    let s = &v.summary;
    assert_eq!(s.peak_reserved, 534 * MIB);
    assert_eq!(s.empty_cache_released, 534 * MIB);
    assert!(!s.oom);
    assert_eq!(v.steps.last().map(|s| s.reserved), Some(0));
}

#[test]
fn fragmentation_ooms_by_default_and_not_with_expandable_segments_or_max_split() {
    let r = run_builtin("fragmentation_oom");
    let plain = summary(&r, "default");
    assert!(plain.oom);
    assert_eq!(plain.oom_step, Some(4));
    assert_eq!(plain.peak_reserved, 6000 * MIB);
    let v = r.variant("default").expect("variant");
    let msg = v.steps[3].oom.as_deref().expect("an OOM message");
    // Free on the device: 8 GiB less the 6,000 MiB reserved and the
    // simulated context, in PyTorch's two decimals of GiB.
    let free = (8 << 30) - 6000 * MIB - vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD;
    let free = format!("{:.2} GiB is free", free as f64 / (1u64 << 30) as f64);
    assert!(
        msg.contains("Tried to allocate 2.00 GiB")
            && msg.contains(&free)
            && msg.contains("1.46 GiB is reserved by PyTorch but unallocated"),
        "{msg}"
    );

    let exp = summary(&r, "expandable_segments");
    assert!(!exp.oom);
    // 6000 MiB mapped, then 28 more 20 MiB pages for the 548 MiB missing.
    assert_eq!(exp.peak_reserved, (6000 + 560) * MIB);
    assert_eq!(exp.peak_allocated, (4500 + 2048) * MIB);

    let split = summary(&r, "max_split_size");
    assert!(!split.oom);
    // 6000 MiB of 200 MiB segments + 11 new 150 MiB segments before the
    // first cudaMalloc failure releases an oversize cached block.
    assert_eq!(split.peak_reserved, (6000 + 11 * 150) * MIB);
    let last = r
        .variant("max_split_size")
        .and_then(|v| v.steps.last())
        .expect("steps");
    // 30 × 150 + 2048 + the 4 cached 200 MiB blocks not released.
    assert_eq!(last.reserved, (4500 + 2048 + 4 * 200) * MIB);
}

#[test]
fn batch_growth_runs_out_of_memory_at_batch_64() {
    let r = run_builtin("batch_growth_oom");
    let v = r.variant("default").expect("variant");
    let s = &v.summary;
    assert!(s.oom);
    assert_eq!(s.oom_step, Some(18));
    assert_eq!(v.steps[17].label, "batch 64: forward");
    // Everything but 12 MiB of the 15,884 MiB left by the context.
    assert_eq!(s.peak_reserved, 15872 * MIB);
    assert_eq!(s.peak_allocated, 15872 * MIB);
    let msg = v.steps[17].oom.as_deref().expect("an OOM message");
    assert!(
        msg.contains("Tried to allocate 256.00 MiB")
            && msg.contains("0 bytes is reserved by PyTorch but unallocated"),
        "{msg}"
    );
    // Batch 56 still fits: 8 GiB of state + 7 GiB of activations.
    let b56 = v.steps.iter().find(|s| s.label == "batch 56: forward");
    assert_eq!(b56.map(|s| s.allocated), Some(15 * 1024 * MIB));
}

// ------------------------------------------------------------ the format

#[test]
fn unknown_keys_are_errors_that_name_the_key() {
    let e = parse_err(&format!("{HEADER}colour = \"red\"\n"));
    assert!(e.contains("colour"), "{e}");
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"1MiB\", cuont = 2 }}\n"
    ));
    assert!(e.contains("cuont"), "{e}");
}

#[test]
fn a_value_of_the_wrong_type_says_what_the_key_expects_in_the_files_words() {
    let e = parse_err(&format!("{HEADER}[[step]]\nalloc = \"1GiB\"\n"));
    assert_eq!(
        e,
        "not a valid scenario file: line 8, column 9: alloc expects a table: \
         alloc = { name = \"a\", size = \"1GiB\" } (found string \"1GiB\")"
    );
    let e = parse_err(&format!("{HEADER}[[step]]\nrepeat = 3\n"));
    assert!(
        e.ends_with("repeat expects a table: repeat = { times = 2, steps = [{ alloc = … }, { free = \"a\" }] } (found integer `3`)"),
        "{e}"
    );
    let e = parse_err(&format!("{HEADER}step = 3\n"));
    assert!(
        e.ends_with("step expects [[step]] tables (an array of tables) (found integer `3`)"),
        "{e}"
    );
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nempty_cache = true\nonly = \"a\"\n"
    ));
    assert!(
        e.ends_with("only expects an array (found string \"a\")"),
        "{e}"
    );
    let e = parse_err(&format!("{HEADER}[[step]]\nalloc = {{ name = \"a\" }}\n"));
    assert!(e.ends_with("line 8, column 9: alloc needs `size`"), "{e}");
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nrepeat = {{ times = 2, steps = [3] }}\n"
    ));
    assert!(
        e.ends_with("steps expects a step: a table with one of alloc, free, empty_cache or repeat (found integer `3`)"),
        "{e}"
    );
}

#[test]
fn bad_sizes_are_errors_that_quote_the_text() {
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"12 parsecs\" }}\n"
    ));
    assert!(
        e.contains("'12 parsecs' is not a size") && e.contains("'a'"),
        "{e}"
    );
    let e = parse_err(&HEADER.replace("\"1GiB\"", "\"lots\""));
    assert!(e.contains("device_memory") && e.contains("'lots'"), "{e}");
}

#[test]
fn sizes_are_read_as_the_command_line_reads_them_a_fraction_of_a_byte_refused() {
    // A fraction of a larger unit is its whole bytes, as `--capacity
    // 1.1GiB` is: 1181116006.4 B is 1181116006 B.
    let text = format!("{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"1.1MiB\" }}\n")
        .replace("\"1GiB\"", "\"1.1GiB\"");
    let parsed = scenario::parse(&text).expect("parses");
    assert_eq!(parsed.device_memory, 1_181_116_006);
    assert_eq!(
        vramtop::alloc::sizing::typed_size("1.1GiB", u64::MAX),
        Ok(parsed.device_memory),
        "the command line's reading"
    );
    // 1.1 MiB is 1153433.6 B: its whole bytes, not rounded up.
    let size = parsed.steps.first().map(|s| s.action.clone());
    assert_eq!(
        size,
        Some(scenario::Action::Alloc {
            names: vec!["a".into()],
            size: 1_153_433
        })
    );
    // A fraction of a byte, written in bytes or less than one in any unit,
    // is no size: refused, naming the entry, not rounded to 1 B or 0.
    for written in ["0.5B", "0.0001KiB"] {
        let e = parse_err(&format!(
            "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"{written}\" }}\n"
        ));
        assert_eq!(
            e,
            format!("step 1: alloc 'a': '{written}' is not a whole number of bytes"),
        );
    }
    let e = parse_err(&HEADER.replace("\"100MiB\"", "\"0.5B\""));
    assert_eq!(e, "context: '0.5B' is not a whole number of bytes");
    // A context of none stays allowed; a size of 0 B is refused as before.
    assert!(
        scenario::parse(&format!(
            "{}[[step]]\nalloc = {{ name = \"a\", size = \"1MiB\" }}\n",
            HEADER.replace("\"100MiB\"", "\"0B\"")
        ))
        .is_ok()
    );
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"0B\" }}\n"
    ));
    assert!(e.contains("has size 0"), "{e}");
}

#[test]
fn a_size_without_a_unit_is_refused_in_the_command_lines_words() {
    // `"8"` could be bytes or GiB: it ran an 8-byte GPU unsaid.
    let e = parse_err(&HEADER.replace("\"1GiB\"", "\"8\""));
    assert_eq!(
        e,
        "device_memory: '8' has no unit: 8 what? write e.g. 8GiB, 8MiB or 8B"
    );
    let e = parse_err(&HEADER.replace("\"100MiB\"", "\"512\""));
    assert_eq!(
        e,
        "context: '512' has no unit: 512 what? write e.g. 512GiB, 512MiB or 512B"
    );
    // Only the units that take the number are suggested, as `--capacity
    // 1.5` is told (1.5B is not a whole number of bytes).
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"1.5\" }}\n"
    ));
    assert_eq!(
        e,
        "step 1: alloc 'a': '1.5' has no unit: 1.5 what? write e.g. 1.5GiB or 1.5MiB"
    );
    // The same words as the command line's, after the entry's name.
    let (code, _, cli) = vramtop(&["replay", "x.json", "--capacity", "1.5"]);
    assert_eq!(code, 2);
    assert!(
        cli.contains("'1.5' has no unit: 1.5 what? write e.g. 1.5GiB or 1.5MiB"),
        "{cli}"
    );
    // A number of bytes is told it is bytes, and what size that is, not
    // 8589934592GiB (8 EiB): no unit is suggested that makes more than 1
    // TiB, more than any GPU's memory. The command line's words again.
    let e = parse_err(&HEADER.replace("\"1GiB\"", "\"8589934592\""));
    let said = "'8589934592' has no unit: as bytes, write 8589934592B (8GiB)";
    assert_eq!(e, format!("device_memory: {said}"));
    let (code, _, cli) = vramtop(&["replay", "x.json", "--capacity", "8589934592"]);
    assert_eq!(code, 2);
    assert!(cli.contains(said), "{cli}");
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"2048\" }}\n"
    ));
    assert_eq!(
        e,
        "step 1: alloc 'a': '2048' has no unit: 2048 what? write e.g. 2048MiB (2GiB) or 2048B (2KiB)"
    );
    // A bare TOML number of bytes, where it stands.
    let e = parse_err(&HEADER.replace("\"1GiB\"", "1000000000"));
    assert!(
        e.ends_with(
            "1000000000 what? a size is a string with its unit: as bytes, write \"1000000000B\" \
             (about 953.67MiB)"
        ),
        "{e}"
    );
    // A number no unit takes is told its limit, as on the command line.
    let e = parse_err(&HEADER.replace("\"1GiB\"", "\"99999999999999999999\""));
    assert!(
        e.starts_with("device_memory: '99999999999999999999' is more than the largest size"),
        "{e}"
    );
}

#[test]
fn a_date_where_a_value_belongs_is_said_to_be_a_date_not_a_table() {
    let e = parse_err(&HEADER.replace("\"1GiB\"", "1979-05-27"));
    assert!(
        e.ends_with("device_memory expects a size string such as \"24GiB\" (found a date)"),
        "{e}"
    );
    // TOML hands serde a date as a table of one private key: a table of
    // the format named that key as unknown.
    let e = parse_err(&format!("{HEADER}[[step]]\nalloc = 1979-05-27T07:32:00Z\n"));
    assert!(
        e.ends_with(
            "alloc expects a table: alloc = { name = \"a\", size = \"1GiB\" } (found a date and \
             time)"
        ),
        "{e}"
    );
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"1MiB\", count = 07:32:00 }}\n"
    ));
    assert_eq!(
        e,
        "step 1: alloc 'a': 'count' expects an integer 1–10000, found a time of day"
    );
}

#[test]
fn a_scenario_file_with_a_size_without_a_unit_exits_2_instead_of_running() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("bare.toml");
    let text = HEADER.replace("\"1GiB\"", "\"8\"")
        + "[[step]]\nalloc = { name = \"w\", size = \"64MiB\" }\n";
    std::fs::write(&path, text).expect("write");
    let p = path.display().to_string();
    let (code, out, err) = vramtop(&["scenario", &p]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "{out}");
    assert_eq!(
        err,
        format!(
            "vramtop: error: {p}: device_memory: '8' has no unit: 8 what? write e.g. 8GiB, 8MiB or 8B\n"
        )
    );
}

#[test]
fn a_scenario_file_with_a_fraction_of_a_byte_exits_2_naming_the_file_and_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("half.toml");
    let text = format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"w\", size = \"64MiB\" }}\n\
         [[step]]\nalloc = {{ name = \"x\", size = \"0.5B\" }}\n"
    );
    std::fs::write(&path, text).expect("write");
    let p = path.display().to_string();
    let (code, out, err) = vramtop(&["scenario", &p]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        err,
        format!("vramtop: error: {p}: step 2: alloc 'x': '0.5B' is not a whole number of bytes\n")
    );
}

#[test]
fn freeing_a_name_not_held_is_an_error_naming_it() {
    let text = format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"1MiB\" }}\n[[step]]\nfree = \"b\"\n"
    );
    let e = scenario::parse(&text).expect_err("b is not held");
    assert!(matches!(e, ScenarioError::Names { .. }), "{e:?}");
    assert!(e.to_string().contains("'b'"), "{e}");
    let twice = format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"1MiB\" }}\n\
         [[step]]\nfree = \"a\"\n[[step]]\nfree = \"a*\"\n"
    );
    assert!(parse_err(&twice).contains("'a*'"));
}

#[test]
fn a_step_needs_exactly_one_action() {
    let e = parse_err(&format!(
        "{HEADER}[[step]]\nempty_cache = true\nfree = \"a\"\n"
    ));
    assert!(e.contains("exactly one"), "{e}");
}

#[test]
fn only_must_name_a_defined_variant() {
    let e = parse_err(&format!(
        "{HEADER}[[variant]]\nname = \"x\"\n[[step]]\nonly = [\"y\"]\nempty_cache = true\n"
    ));
    assert!(e.contains("'y'") && e.contains("x"), "{e}");
}

#[test]
fn invalid_alloc_conf_is_an_error() {
    let e = parse_err(&format!(
        "{HEADER}alloc_conf = \"max_split_size_mb:nope\"\n[[step]]\nempty_cache = true\n"
    ));
    assert!(
        e.contains("alloc_conf") && e.contains("max_split_size_mb:nope"),
        "{e}"
    );
}

#[test]
fn repeat_count_and_prefix_free_unroll_as_documented() {
    let text = format!(
        "{HEADER}[[step]]\nlabel = \"iter\"\nrepeat = {{ times = 3, steps = [\n\
         {{ alloc = {{ name = \"x{{i}}_\", size = \"3MiB\", count = 2 }} }},\n\
         {{ label = \"drop {{n}}\", free = \"x{{i}}_*\" }},\n] }}\n"
    );
    let s = scenario::parse(&text).expect("parses");
    assert_eq!(s.steps.len(), 6);
    assert_eq!(s.steps[3].label, "iter: drop 2");
    let r = scenario::run(&s).expect("runs");
    let v = &r.variants[0];
    assert_eq!(v.variant, "default");
    // 2 × 3 MiB share one 20 MiB segment, reused by every iteration.
    assert!(v.steps.iter().all(|s| s.reserved == 20 * MIB));
    assert_eq!(v.steps.last().map(|s| s.allocated), Some(0));
}

#[test]
fn a_run_stops_at_the_first_out_of_memory_step() {
    let text = format!(
        "{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"2GiB\" }}\n[[step]]\nempty_cache = true\n"
    );
    let r = scenario::run(&scenario::parse(&text).expect("parses")).expect("runs");
    let v = &r.variants[0];
    assert_eq!(v.steps.len(), 1);
    assert_eq!(v.summary.oom_step, Some(1));
    let msg = v.steps[0].oom.as_deref().expect("an OOM message");
    assert!(
        msg.starts_with("CUDA out of memory. Tried to allocate 2.00 GiB"),
        "{msg}"
    );
}

// ------------------------------------------------------------ the command

fn vramtop(args: &[&str]) -> (i32, String, String) {
    common::run_vramtop(args, None)
}

#[test]
fn scenario_list_names_every_builtin_with_its_title() {
    let (code, out, _) = vramtop(&["scenario", "--list"]);
    assert_eq!(code, 0);
    for name in scenario::builtin_names() {
        assert!(out.contains(name), "{out}");
    }
    assert!(out.contains("empty_cache() releases only whole free segments"));
}

#[test]
fn scenario_text_says_its_device_and_context_are_the_scenarios_own() {
    // A scenario file sets its own context; the text says whose figure it
    // is. The built-ins set the one the demo and the simulated GPU assume.
    let assumed = vramtop::alloc::human_bytes(vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD);
    let (code, out, err) = vramtop(&["scenario", "fragmentation_oom"]);
    assert_eq!(code, 0, "{err}");
    let said = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains(&format!(
            "the scenario's device 8 GiB, CUDA context {assumed} (driver used = reserved + context)"
        )),
        "{out}"
    );
    let (code, demo, err) = vramtop(&["demo"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        demo.contains(&format!(
            "({assumed} CUDA context, as every simulated GPU assumes)"
        )),
        "{demo}"
    );
}

/// Every built-in scenario's CUDA context is the one the simulated GPU,
/// the demo and the docs assume: one figure for one simulated context.
#[test]
fn every_builtin_scenario_sets_the_simulated_gpus_context() {
    for name in scenario::builtin_names() {
        let s = scenario::builtin(name).expect("built in").expect("parses");
        assert_eq!(
            s.context,
            vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD,
            "{name}"
        );
    }
}

#[test]
fn scenario_prints_a_table_and_the_oom_outcome() {
    let (code, out, _) = vramtop(&["scenario", "fragmentation_oom"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("== expandable_segments") && out.contains("frag%"),
        "{out}"
    );
    assert!(out.contains("out of memory at step 4"), "{out}");
    assert!(
        out.contains("CUDA out of memory. Tried to allocate 2.00 GiB"),
        "{out}"
    );
}

#[test]
fn scenario_json_matches_the_library_run() {
    let (code, out, _) = vramtop(&["scenario", "empty_cache_live_block", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        v["variants"][0]["summary"]["empty_cache_released"],
        serde_json::json!(534 * MIB)
    );
    assert_eq!(
        v["variants"][0]["steps"][5]["released"],
        serde_json::json!(512 * MIB)
    );
}

#[test]
fn unknown_scenario_exits_2_and_lists_the_names() {
    let (code, _, err) = vramtop(&["scenario", "no_such_scenario"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no_such_scenario") && err.contains("batch_growth_oom"),
        "{err}"
    );
}

#[test]
fn scenario_accepts_a_toml_file_path() {
    let dir = std::env::temp_dir().join(format!("vramtop-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("mine.toml");
    let text = format!("{HEADER}[[step]]\nalloc = {{ name = \"a\", size = \"64MiB\" }}\n");
    std::fs::write(&path, text).expect("write");
    let p = path.display().to_string();
    let (code, out, err) = vramtop(&["scenario", &p, "--json"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        v["variants"][0]["summary"]["peak_reserved"],
        serde_json::json!(64 * MIB)
    );
}

#[test]
fn a_broken_scenario_file_exits_2_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("vramtop-scenario-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("bad.toml");
    std::fs::write(&path, format!("{HEADER}[[step]]\nfree = \"ghost\"\n")).expect("write");
    let p = path.display().to_string();
    let (code, _, err) = vramtop(&["scenario", &p]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 2);
    assert!(err.contains("'ghost'"), "{err}");
}

#[test]
fn dataloader_workers_that_touch_cuda_run_out_of_memory_where_cpu_workers_fit() {
    let s = vramtop::scenario::builtin("dataloader_workers")
        .expect("built in")
        .expect("parses");
    let r = vramtop::scenario::run(&s).expect("runs");
    let cuda = r.variant("workers_touch_cuda").expect("variant");
    let cpu = r.variant("cpu_workers_pin_memory").expect("variant");
    assert_eq!(cuda.worker_contexts, 8);
    // Nine contexts before the first tensor: driver used = reserved + 9 × 500 MiB.
    let first = &cuda.steps[0];
    assert_eq!(first.driver_used - first.reserved, 9 * 500 * (1 << 20));
    assert_eq!(cuda.summary.oom_step, Some(4), "the activations do not fit");
    assert!(!cpu.summary.oom, "one context: everything fits");
    assert_eq!(
        cpu.steps[0].driver_used - cpu.steps[0].reserved,
        500 * (1 << 20)
    );
}

#[test]
fn the_oom_message_names_every_process_on_the_device_as_pytorch_does() {
    let s = vramtop::scenario::builtin("dataloader_workers")
        .expect("built in")
        .expect("parses");
    let r = vramtop::scenario::run(&s).expect("runs");
    let cuda = r.variant("workers_touch_cuda").expect("variant");
    let oom = cuda
        .steps
        .last()
        .and_then(|s| s.oom.as_deref())
        .expect("an OOM");
    // NVML's list between the capacity and the allocated sentences: the
    // main process (its context and 11 GiB of segments) in PyTorch's
    // words for its own, then the eight workers' contexts by pid.
    let mut lines = String::from(
        "of which 620.00 MiB is free. Including non-PyTorch memory, this process has \
         11.49 GiB memory in use. ",
    );
    for pid in 4243..=4250 {
        lines.push_str(&format!("Process {pid} has 500.00 MiB memory in use. "));
    }
    lines.push_str("Of the allocated memory 11.00 GiB");
    assert!(oom.contains(&lines), "{oom}");
    // Every scenario's process is the main one alone without workers.
    let f = vramtop::scenario::builtin("fragmentation_oom")
        .expect("built in")
        .expect("parses");
    let r = vramtop::scenario::run(&f).expect("runs");
    let oom = r.variants[0]
        .steps
        .last()
        .and_then(|s| s.oom.as_deref())
        .expect("an OOM by default");
    assert_eq!(oom.matches(" memory in use. ").count(), 1, "{oom}");
    assert!(
        oom.contains("Including non-PyTorch memory, this process has"),
        "{oom}"
    );
}

/// Asserts every line of `report` fits 80 columns: terminal cells, a CJK
/// character two.
fn assert_fits_80_columns(name: &str, report: &str) {
    for line in report.lines() {
        assert!(
            cells(line) <= 80,
            "{name}: {} columns: {line:?}",
            cells(line)
        );
    }
}

#[test]
fn every_scenario_tables_figures_stay_in_their_columns_under_the_header() {
    for name in scenario::builtin_names() {
        let (code, out, _) = vramtop(&["scenario", name]);
        assert_eq!(code, 0, "{name}");
        let mut label_at = None;
        let mut tables = 0;
        for line in out.lines() {
            if line.starts_with("step ") {
                label_at = line.find("label");
                tables += 1;
                continue;
            }
            // The table ends at its peaks; the OOM message after it can
            // wrap to a line that starts with a pid ("4249 has …").
            if line.starts_with("peak ") {
                label_at = None;
            }
            let Some(at) = label_at else { continue };
            let is_row = line
                .get(..4)
                .is_some_and(|n| n.trim().parse::<u32>().is_ok());
            if !is_row {
                continue;
            }
            // The figures end two spaces before the label column, where
            // the label starts: "530.00 MiB" ran one cell into it.
            let (figures, label) = line.split_at(at);
            assert!(
                figures.ends_with("  ") && !label.starts_with(' '),
                "{name}: {line:?}"
            );
        }
        assert!(tables > 0, "{name}: a table: {out}");
    }
    let (_, out, _) = vramtop(&["scenario", "empty_cache_live_block"]);
    let row3 = out
        .lines()
        .find(|l| l.starts_with("   3 "))
        .expect("step 3");
    assert!(row3.starts_with("   3   530 MiB   534 MiB"), "{row3:?}");
}

#[test]
fn every_scenario_report_fits_80_columns_long_label_words_included() {
    for name in scenario::builtin_names() {
        let (code, out, _) = vramtop(&["scenario", name]);
        assert_eq!(code, 0, "{name}");
        let rows = out.lines().filter(|l| l.starts_with("step ")).count();
        assert!(rows > 0, "{name}: a table: {out}");
        // mixed_precision's `optimizer.zero_grad(set_to_none=True)` is
        // longer than the label column.
        assert_fits_80_columns(name, &out);
        // Every placeholder is filled in (gradient_accumulation printed a
        // literal "micro-batch {n}+1").
        assert!(
            !out.contains("{n}") && !out.contains("{i}") && !out.contains("{r}"),
            "{name}: {out}"
        );
    }
    // Words longer than their column, with and without a place that
    // reads well to break them at, in a label and in the prose.
    let dir = std::env::temp_dir().join(format!("vramtop-scenario-words-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("words.toml");
    let unbroken = "x".repeat(45);
    let text = format!(
        "name = \"t\"\ntitle = \"test\"\nexplanation = \"see {path}\"\n\
         device_memory = \"1GiB\"\ncontext = \"100MiB\"\n\
         [[step]]\nlabel = \"optimizer.zero_grad(set_to_none=True)\"\n\
         alloc = {{ name = \"a\", size = \"64MiB\" }}\n\
         [[step]]\nlabel = \"{unbroken}\"\nfree = \"a\"\n",
        path =
            "/a/very/long/path/to/somewhere/deep/in/a/tree/of/folders/with/no/spaces/at/all/x.py"
    );
    std::fs::write(&path, text).expect("write");
    let p = path.display().to_string();
    let (code, out, err) = vramtop(&["scenario", &p]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_columns("words.toml", &out);
    // Broken after the call's parenthesis, the rest under it.
    assert!(out.contains("  optimizer.zero_grad(\n"), "{out}");
    assert!(
        out.contains(&format!("\n{}set_to_none=True)\n", " ".repeat(52))),
        "{out}"
    );
    // The label column: 80 − 52 columns of figures.
    assert!(out.contains(&format!("{}\n", "x".repeat(28))), "{out}");
    assert!(out.contains("/a/very/long/path/to/"), "{out}");

    // A user's file with a long title, a long variant header, long labels
    // and figures wide enough to push the summary past 80: every line
    // fits, and every label is shown whole, as `--json` gives it.
    let title = "A scenario of my own whose title says at some length what it shows, \
                 which runs well past the eightieth column of a terminal";
    let words_label = "forward pass of the model computing layer twenty three attention \
                       projection weight gradient accumulation";
    let unbroken_label = "x".repeat(83);
    let variant = "a_variant_name_that_says_what_it_tries";
    let alloc_conf = "max_split_size_mb:64,garbage_collection_threshold:0.8";
    let text = format!(
        "name = \"mine\"\ntitle = \"{title}\"\nexplanation = \"a test\"\n\
         device_memory = \"1000.5GiB\"\ncontext = \"100MiB\"\n\
         [[variant]]\nname = \"{variant}\"\nalloc_conf = \"{alloc_conf}\"\n\
         worker_contexts = 2\n\
         [[step]]\nlabel = \"{words_label}\"\n\
         alloc = {{ name = \"big\", size = \"900.5GiB\" }}\n\
         [[step]]\nlabel = \"{unbroken_label}\"\nfree = \"big\"\n\
         [[step]]\nempty_cache = true\n\
         [[step]]\nlabel = \"\"\nalloc = {{ name = \"b\", size = \"1GiB\" }}\n"
    );
    let header = format!(
        "== {variant} (PYTORCH_CUDA_ALLOC_CONF={alloc_conf}; 2 workers with a CUDA context each: \
         driver used = reserved + 3 contexts)"
    );
    let dir = std::env::temp_dir().join(format!("vramtop-scenario-mine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("mine.toml");
    std::fs::write(&path, text).expect("write");
    let p = path.display().to_string();
    let (code, out, err) = vramtop(&["scenario", &p]);
    let (json_code, json, _) = vramtop(&["scenario", &p, "--json"]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_columns("mine.toml", &out);
    // Wrapped, not cut: the text without its line breaks and indents
    // holds each whole (and no "…" of a cut).
    let unwrapped: String = out.chars().filter(|c| !c.is_whitespace()).collect();
    for whole in [title, words_label, &unbroken_label, &header] {
        let whole: String = whole.chars().filter(|c| !c.is_whitespace()).collect();
        assert!(
            unwrapped.contains(&whole),
            "{whole} is not whole in:\n{out}"
        );
    }
    assert!(!out.contains('…'), "{out}");
    // The table's three significant digits (900.5 rounds to the even 900).
    assert!(out.contains("peak allocated 900 GiB,"), "{out}");
    // One row a step, the figures on its first line: an empty label's too.
    let rows = out
        .lines()
        .filter(|l| l.trim_start().starts_with(['1', '2', '3', '4']));
    assert_eq!(rows.count(), 4, "{out}");
    assert_eq!(json_code, 0);
    assert!(json.contains(&format!("\"{words_label}\"")), "{json}");
}

#[test]
fn a_scenario_with_cjk_labels_fits_80_terminal_cells_not_characters() {
    // Each CJK character takes two cells: a label of them measured in
    // characters fits its column on paper and runs past it on screen.
    let step = "训练步骤_前向传播";
    let label = [step; 4].join(" ");
    let title = step.repeat(6);
    let text = format!(
        "name = \"cjk\"\ntitle = \"{title}\"\nexplanation = \"{label}\"\n\
         device_memory = \"1GiB\"\ncontext = \"100MiB\"\n\
         [[step]]\nlabel = \"{label}\"\nalloc = {{ name = \"a\", size = \"64MiB\" }}\n\
         [[step]]\nlabel = \"{}\"\nfree = \"a\"\n",
        step.repeat(5)
    );
    let dir = std::env::temp_dir().join(format!("vramtop-scenario-cjk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("cjk.toml");
    std::fs::write(&path, text).expect("write");
    let (code, out, err) = vramtop(&["scenario", &path.display().to_string()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_columns("cjk.toml", &out);
    // Wrapped, not cut.
    let unwrapped: String = out.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(unwrapped.contains(&step.repeat(5)), "{out}");
}

#[test]
fn docs_scenarios_counts_the_built_in_ones() {
    let words = [
        "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    ];
    let n = scenario::builtin_names().len();
    let word = words.get(n).expect("a count written as a word");
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/scenarios.md"),
    )
    .expect("docs/scenarios.md exists");
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        doc.contains(&format!("The {word} built-in ones")),
        "docs/scenarios.md should count {n} built-in scenarios"
    );
}

#[test]
fn scenario_table_says_beside_frag_how_many_segments_are_wholly_free() {
    // Step 2 of fragmentation_oom frees everything: frag% 96.7 of 30
    // cached segments that empty_cache() returns, not an alarm.
    let r = run_builtin("fragmentation_oom");
    let v = r.variant("default").expect("variant");
    let freed = &v.steps[1];
    assert_eq!(freed.allocated, 0);
    assert_eq!(freed.whole_free_segments, 30);
    assert_eq!(freed.free_in_whole_segments, 6000 * MIB);
    // The 150 MiB tensors split every segment: none wholly free.
    assert_eq!(v.steps[2].whole_free_segments, 0);
    let (code, out, _) = vramtop(&["scenario", "fragmentation_oom"]);
    assert_eq!(code, 0);
    // "free segs" on two rows, each word over the column.
    assert!(out.contains(" segs free frag%  label\n"), "{out}");
    assert!(out.contains("  used      segs\n"), "{out}");
    // Driver used: the 6,000 MiB reserved and the simulated context.
    let used =
        vramtop::alloc::human_bytes(6000 * MIB + vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD);
    assert!(
        out.contains(&format!(
            "\n   2       0 B  5.86 GiB  {used}   30   30  96.7  free the long"
        )),
        "{out}"
    );
    let said = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        said.contains(
            "free segs: how many of the segs hold no live block; empty_cache() returns \
             those, and PyTorch frees them before it reports out of memory"
        ),
        "{out}"
    );
}

#[test]
fn a_scenarios_summary_writes_its_bytes_as_its_table_does() {
    // dataloader_workers' table reads 11.0 and 12.5 GiB; its summaries
    // read "11 GiB" and "12.50 GiB", two more precisions of one figure.
    let (code, out, err) = vramtop(&["scenario", "dataloader_workers"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("peak allocated 11.0 GiB, peak reserved 11.0 GiB, empty_cache released 0 B"),
        "{out}"
    );
    assert!(
        out.contains("peak allocated 12.5 GiB, peak reserved 12.5 GiB,"),
        "{out}"
    );
    assert!(out.contains("  11.0 GiB  12.5 GiB  13.0 GiB"), "{out}");
    // A step's released bytes too, and a peak of 530 MiB + 4 KiB reads as
    // its row does (it read "530.00 MiB" under a row's "530 MiB").
    let (code, out, err) = vramtop(&["scenario", "empty_cache_live_block"]);
    assert_eq!(code, 0, "{err}");
    let said = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(said.contains("segment goes · released 20.0 MiB"), "{out}");
    assert!(
        said.contains(
            "peak allocated 530 MiB, peak reserved 534 MiB, empty_cache released 534 MiB"
        ),
        "{out}"
    );
}

#[test]
fn the_driver_used_formula_counts_a_context_for_every_worker_that_has_one() {
    // workers_touch_cuda: 4 GiB reserved, 8.39 GiB driver used after step
    // 1, the nine contexts the header must account for.
    let (code, out, err) = vramtop(&["scenario", "dataloader_workers"]);
    assert_eq!(code, 0, "{err}");
    assert_fits_80_columns("dataloader_workers", &out);
    let said = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        !said.contains("(driver used = reserved + context)"),
        "one context is not the workers' variant's: {out}"
    );
    assert!(
        said.contains("(driver used = reserved + a context per process)"),
        "{out}"
    );
    assert!(
        said.contains(
            "== workers_touch_cuda (PyTorch defaults; 8 workers with a CUDA context each: \
             driver used = reserved + 9 contexts)"
        ),
        "{out}"
    );
    assert!(
        said.contains("== cpu_workers_pin_memory (PyTorch defaults)"),
        "{out}"
    );
}
