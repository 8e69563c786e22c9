//! `vramtop --once` without `--json`: the sample as text. It says the
//! figures the JSON of the same simulated sample has, in the dashboard's
//! units (`ui::format`), in 80 terminal cells a line, and `--ascii`
//! prints it in pure ASCII.

mod common;

use clap::Parser as _;
use serde_json::Value;
use vramtop::cli::Cli;
use vramtop::cli::dashboard::once_sample_in;
use vramtop::cli::sample_text::render;
use vramtop::cli::text::cells;
use vramtop::ui::format;

/// One simulated sample that `args` (the dashboard's options) describe,
/// as `--once --json` prints it and as `--once` prints it: the same
/// sample rendered both ways (two runs of the simulation need not sample
/// the same moment on a loaded machine).
fn both(args: &[&str]) -> (Value, String) {
    let cli = Cli::try_parse_from(std::iter::once("vramtop").chain(args.iter().copied()))
        .expect("the options parse");
    // In this process: no probe of the machine's, as the binary is run.
    let sample = once_sample_in(&cli.dashboard.device, vec![common::no_probes_dir()].into())
        .expect("a simulated sample");
    let json = serde_json::to_value(&sample).expect("the sample encodes");
    (json, render(&sample))
}

fn opt_u64(v: &Value) -> Option<u64> {
    v.as_u64()
}

fn opt_u32(v: &Value) -> Option<u32> {
    v.as_u64().and_then(|n| u32::try_from(n).ok())
}

/// `text` with every run of whitespace one space, so a figure wrapped
/// onto the next line still reads as one phrase.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Checks that `text` says every figure of the JSON sample `json`.
fn assert_text_says_the_json(json: &Value, text: &str) {
    let flat_text = flat(text);
    assert!(
        text.starts_with(&format!(
            "backend: {}",
            json["backend"].as_str().expect("backend")
        )),
        "{text}"
    );
    if let Some(banner) = json["banner"].as_str() {
        assert!(flat_text.contains(&flat(banner)), "banner {banner}: {text}");
    }
    let gpus = json["gpus"].as_array().expect("gpus");
    assert!(!gpus.is_empty());
    for g in gpus {
        let index = g["index"].as_u64().expect("index");
        let name = g["name"].as_str().expect("name");
        assert!(
            text.lines().any(|l| l == format!("GPU {index}  {name}")),
            "GPU {index} {name}: {text}"
        );
        let (used, total) = (opt_u64(&g["memory_used"]), opt_u64(&g["memory_total"]));
        let memory = format!(
            "memory {} ({})",
            format::bytes_of(used, total),
            format::percent_of(used.expect("used"), total.expect("total"))
        );
        assert!(flat_text.contains(&memory), "{memory}: {text}");
        for figure in [
            format!(
                "util {}",
                format::opt_unit(opt_u32(&g["gpu_utilization"]), "%")
            ),
            format!(
                "temp {}",
                format::opt_unit(opt_u32(&g["temperature_c"]), "°C")
            ),
            format!(
                "power {}",
                format::pair(
                    format::watts(opt_u32(&g["power_draw_mw"])),
                    format::watts(opt_u32(&g["power_limit_mw"])),
                    " W"
                )
            ),
        ] {
            assert!(flat_text.contains(&figure), "{figure}: {text}");
        }
        for p in g["processes"].as_array().expect("processes") {
            let pid = p["pid"].as_u64().expect("pid");
            let memory = format::opt_bytes(opt_u64(&p["used_memory"]));
            assert!(
                text.lines()
                    .any(|l| l.trim_start().starts_with(&format!("pid {pid} "))
                        && l.ends_with(&format!("  {memory}"))),
                "pid {pid} {memory}: {text}"
            );
        }
        // Every allocator the dashboard can show, the shown one first,
        // each with its figures and its OOM count.
        let allocators = g["allocators"].as_array().expect("allocators");
        assert_eq!(
            allocators.first(),
            g["allocator"].is_object().then_some(&g["allocator"]),
            "the shown one first: {json}"
        );
        for a in allocators {
            let ooms = match a["num_ooms"].as_u64() {
                Some(n) => format::count(n, "OOM", "OOMs"),
                None => "OOMs n/a".to_string(),
            };
            let whose = a["source"].as_str().expect("source");
            let figures = format!(
                "{whose}: allocated {}, reserved {}, fragmentation {} (largest free block {}), {ooms}",
                format::bytes(a["allocated"].as_u64().expect("allocated")),
                format::bytes(a["reserved"].as_u64().expect("reserved")),
                format::percent(
                    a["fragmentation"]["fragmentation"]
                        .as_f64()
                        .expect("fragmentation")
                ),
                format::bytes(
                    a["fragmentation"]["largest_free_block"]
                        .as_u64()
                        .expect("largest free block")
                ),
            );
            assert!(flat_text.contains(&figures), "{figures}: {text}");
        }
        if allocators.len() == 1 {
            let whose = allocators[0]["source"].as_str().expect("source");
            assert!(
                flat_text.contains(&format!("allocator: {whose}: allocated ")),
                "{whose}: {text}"
            );
        }
    }
}

#[test]
fn once_text_says_the_figures_of_the_json_sample() {
    let (json, text) = both(&["--backend", "sim", "--sim-seed", "7"]);
    assert_text_says_the_json(&json, &text);
    // The simulated training process's allocator is there.
    assert!(
        json["gpus"][0]["allocator"].is_object(),
        "the simulation has an allocator: {json}"
    );
}

#[test]
fn once_without_json_prints_text_and_with_json_prints_json() {
    let (code, text, err) = common::run_vramtop(&["--backend", "sim", "--once"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        serde_json::from_str::<Value>(&text).is_err(),
        "text, not JSON: {text}"
    );
    assert!(
        text.starts_with("backend: sim\nGPU 0  Simulated H100 80GB\n"),
        "{text}"
    );
    // The user between the pid and the command: whose process it is.
    assert!(
        text.contains("\n    pid 4242  sim  python train.py"),
        "{text}"
    );
    assert!(text.contains("\n  allocator: pid 4242 "), "{text}");
    let args = ["--backend", "sim", "--once", "--json"];
    let (code, json, err) = common::run_vramtop(&args, None);
    assert_eq!(code, 0, "{args:?}: {err}");
    let json: Value = serde_json::from_str(&json).expect("--once --json prints JSON");
    assert_eq!(json["backend"], "sim", "{args:?}: {json}");
    // --ascii is for text: with --json it is refused, as open, replay and
    // diff refuse it, in one line.
    let (code, out, err) =
        common::run_vramtop(&["--backend", "sim", "--once", "--json", "--ascii"], None);
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("'--json' cannot be used with '--ascii'"),
        "{err}"
    );
}

#[test]
fn once_text_of_three_gpus_and_two_trainers_agrees_with_the_json() {
    let (json, text) = both(&[
        "--backend",
        "sim",
        "--sim-gpus",
        "3",
        "--sim-training",
        "2",
        "--sim-seed",
        "3",
    ]);
    assert_eq!(json["gpus"].as_array().map(Vec::len), Some(3), "{json}");
    assert_text_says_the_json(&json, &text);
    for k in 0..3 {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("GPU {k}  "))),
            "{text}"
        );
    }
}

#[test]
fn once_text_fits_80_cells_and_ascii_is_pure_ascii() {
    for args in [
        &["--backend", "sim", "--once"][..],
        &[
            "--backend",
            "sim",
            "--sim-gpus",
            "3",
            "--sim-training",
            "2",
            "--once",
        ],
        &[
            "--backend",
            "sim",
            "--sim-dataloader-workers",
            "4",
            "--once",
        ],
    ] {
        let text = common::assert_ascii_twin(args);
        for l in text.lines() {
            assert!(cells(l) <= 80, "{args:?}: {} cells: {l}", cells(l));
        }
    }
}

#[test]
fn once_lists_every_allocator_the_dashboards_v_cycles_with_its_ooms() {
    // 1 GiB holds two 500 MiB contexts: two trainers share GPU 0 (the
    // third could not start), and the tensors find no room: OOMs.
    let (json, text) = both(&common::SIM_GPU_FULL_AT_TWO_TRAINERS);
    let pids: Vec<u64> = json["gpus"][0]["allocators"]
        .as_array()
        .expect("allocators")
        .iter()
        .filter_map(|a| a["pid"].as_u64())
        .collect();
    assert_eq!(pids, [4242, 4243], "both trainers, in v's order: {json}");
    assert!(
        json["gpus"][0]["allocators"]
            .as_array()
            .expect("allocators")
            .iter()
            .all(|a| a["num_ooms"].as_u64().is_some_and(|n| n > 0)),
        "no room for their tensors: {json}"
    );
    assert_text_says_the_json(&json, &text);
    assert!(
        text.contains("\n  2 allocators (the dashboard's v switches):\n  - pid 4242 "),
        "{text}"
    );
    assert!(
        text.contains("\n  - pid 4243 (simulated training"),
        "{text}"
    );
    for l in text.lines() {
        assert!(cells(l) <= 80, "{} cells: {l}", cells(l));
    }
}

#[test]
fn once_text_says_which_simulated_processes_could_not_start_as_the_json_does() {
    let (json, text) = both(&common::SIM_GPU_FULL_AT_TWO_TRAINERS);
    let note = json["not_started_note"]
        .as_str()
        .expect("a trainer finds no room on 1 GiB");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&format!("note: {note}")), "{text}");
}
