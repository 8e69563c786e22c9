//! The stress panel: the pure state machine with hand-made device answers
//! (no threads), the worker on a simulated GPU end to end, the keys, and a
//! render snapshot of the open panel.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::style::Modifier;
use vramtop::alloc::{AllocatorConfig, CachingAllocator, DeviceMemory, DeviceStats, SegmentInfo};
use vramtop::app::keymap::{Keymap, PanelKey};
use vramtop::app::state::{AppState, StatusState};
use vramtop::app::stress::{
    COUNT_PRESETS, CompareMarks, Figures, HistogramRow, MAX_SETTINGS_INPUT, MAX_SIZE_INPUT,
    MAX_TYPED_SIZE, NewTensor, OomRoom, OtherProcesses, PanelDevice, PanelModal, Pattern,
    RANDOM_MIN_BYTES, SIZE_PRESETS, StressAction, StressCommand, StressOutcome, StressPanel,
    StressResult, full_field_message, histogram_rows, parse_typed_size,
};
use vramtop::app::stress_worker::{PanelExecutor, STRESS_COMMAND, StressExecutor, StressWorker};
use vramtop::app::update::{Effect, handle_key, on_stress_result};
use vramtop::device::Telemetry;
use vramtop::device::sim::{SimCluster, SimConfig, SimMemory, SimTelemetry};
use vramtop::ui::{self, Theme};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

// ------------------------------------------------------------ pure machine

/// A device answer with `reserved` bytes reserved (the rest zero).
fn answer(outcome: StressOutcome, reserved: u64) -> StressResult {
    let mut stats = DeviceStats::default();
    stats.reserved_bytes.all.current = reserved as i64;
    StressResult {
        outcome,
        stats,
        layout: Vec::<SegmentInfo>::new(),
        driver_used: reserved,
    }
}

fn started(real_gpu: bool, free: u64) -> StressPanel {
    let mut p = StressPanel::default();
    p.on_result(answer(
        StressOutcome::Started {
            gpu: 0,
            free_at_start: free,
            total: 80 * GIB,
            real_gpu,
        },
        0,
    ));
    p
}

fn tensor(i: u64) -> NewTensor {
    NewTensor {
        address: 0x7f00_0000_0000 + i * 2 * MIB,
        size: 2 * MIB,
        requested: 2 * MIB - 100,
    }
}

/// A ready panel holding `n` tensors.
fn with_tensors(n: u64) -> StressPanel {
    let mut p = started(false, 80 * GIB);
    p.on_result(answer(
        StressOutcome::Allocated((0..n).map(tensor).collect()),
        n * 2 * MIB,
    ));
    p
}

fn freed(cmds: &[StressCommand]) -> Vec<u64> {
    match cmds {
        [StressCommand::Free { addresses }] => addresses.clone(),
        other => panic!("expected one Free, got {other:?}"),
    }
}

#[test]
fn a_request_that_would_push_reserved_over_the_cap_is_refused_with_the_figures() {
    let mut p = started(true, 10 * GIB);
    assert_eq!(p.cap, Some(5 * GIB), "half the memory free at start");
    p.size_index = SIZE_PRESETS.len() - 1; // 1 GiB
    p.count_index = COUNT_PRESETS.iter().position(|&c| c == 10).unwrap();
    assert!(p.apply(StressAction::Allocate).is_empty());
    let why = p.message.clone().unwrap_or_default();
    assert!(why.contains("exceeds the stress cap"), "{why}");
    assert!(why.contains("5.00 GiB"), "{why}");
    assert!(!p.busy, "a refusal sends nothing, so nothing is awaited");
    p.count_index = COUNT_PRESETS.iter().position(|&c| c == 2).unwrap();
    assert_eq!(
        p.apply(StressAction::Allocate),
        vec![StressCommand::Malloc {
            sizes: vec![GIB, GIB],
            cap: Some(5 * GIB),
        }]
    );
}

#[test]
fn stress_cap_from_the_command_line_replaces_the_default_and_the_refusal_names_it() {
    use clap::Parser as _;
    use vramtop::cli::Cli;
    let cli = Cli::try_parse_from(["vramtop", "--stress-cap", "2GiB"]).expect("parses");
    assert_eq!(cli.dashboard.stress_cap, Some(2 * GIB));
    assert_eq!(
        Cli::try_parse_from(["vramtop"])
            .unwrap()
            .dashboard
            .stress_cap,
        None
    );
    assert!(Cli::try_parse_from(["vramtop", "--stress-cap", "lots"]).is_err());
    assert!(Cli::try_parse_from(["vramtop", "--stress-cap", "0"]).is_err());

    // The simulated GPU, which has no cap by default, gets it.
    let mut p = StressPanel::with_cap(cli.dashboard.stress_cap);
    p.on_result(answer(
        StressOutcome::Started {
            gpu: 0,
            free_at_start: 80 * GIB,
            total: 80 * GIB,
            real_gpu: false,
        },
        0,
    ));
    assert_eq!(p.cap, Some(2 * GIB));
    let ready = p.message.clone().unwrap_or_default();
    assert!(ready.contains("cap 2.00 GiB (--stress-cap)"), "{ready}");
    p.size_index = SIZE_PRESETS.len() - 1; // 1 GiB
    p.count_index = COUNT_PRESETS.iter().position(|&c| c == 5).unwrap();
    assert!(p.apply(StressAction::Allocate).is_empty());
    let why = p.message.clone().unwrap_or_default();
    assert!(
        why.contains("request 5.00 GiB") && why.contains("exceeds the stress cap of 2.00 GiB"),
        "{why}"
    );
    assert!(!p.busy);
    p.count_index = COUNT_PRESETS.iter().position(|&c| c == 2).unwrap();
    assert_eq!(
        p.apply(StressAction::Allocate),
        vec![StressCommand::Malloc {
            sizes: vec![GIB, GIB],
            cap: Some(2 * GIB),
        }],
        "exactly the cap is allowed"
    );

    // On a real GPU it replaces the 50 % default.
    let mut real = StressPanel::with_cap(Some(GIB));
    real.on_result(answer(
        StressOutcome::Started {
            gpu: 0,
            free_at_start: 80 * GIB,
            total: 80 * GIB,
            real_gpu: true,
        },
        0,
    ));
    assert_eq!(real.cap, Some(GIB));
}

#[test]
fn the_simulation_has_no_cap_so_out_of_memory_can_be_reached() {
    let mut p = started(false, 80 * GIB);
    assert_eq!(p.cap, None);
    p.size_index = SIZE_PRESETS.len() - 1;
    p.count_index = COUNT_PRESETS.len() - 1;
    let cmds = p.apply(StressAction::Allocate);
    assert!(matches!(&cmds[..], [StressCommand::Malloc { sizes, .. }] if sizes.len() == 100));
}

#[test]
fn nothing_is_sent_before_the_worker_starts() {
    let mut p = StressPanel::default();
    assert!(p.apply(StressAction::Allocate).is_empty());
    assert!(p.message.as_deref().unwrap_or("").contains("not started"));
}

#[test]
fn keys_typed_while_busy_wait_and_run_in_order_after_the_answer() {
    let mut p = with_tensors(4);
    let first = p.apply(StressAction::FreeEveryOther);
    assert_eq!(freed(&first).len(), 2);
    assert!(
        p.apply(StressAction::EmptyCache).is_empty(),
        "queued, not sent"
    );
    assert!(p.apply(StressAction::MarkCompare).is_empty());
    assert_eq!(p.queued.len(), 2);
    let next = p.on_result(answer(StressOutcome::Freed(freed(&first)), 8 * MIB));
    assert_eq!(
        next,
        vec![StressCommand::EmptyCache],
        "the next one goes out"
    );
    assert_eq!(p.marks.a(), None, "the mark waits for empty_cache's answer");
    assert!(
        p.on_result(answer(StressOutcome::CacheEmptied, 4 * MIB))
            .is_empty()
    );
    assert_eq!(p.marks.a().map(|f| f.reserved), Some(4 * MIB));
    assert!(p.queued.is_empty() && !p.busy);
}

#[test]
fn free_selected_frees_the_row_under_the_cursor() {
    let mut p = with_tensors(5);
    p.apply(StressAction::Down);
    p.apply(StressAction::Down);
    assert_eq!(
        freed(&p.apply(StressAction::FreeSelected)),
        vec![tensor(2).address]
    );
}

#[test]
fn free_oldest_frees_the_first_allocated() {
    let mut p = with_tensors(5);
    assert_eq!(
        freed(&p.apply(StressAction::FreeOldest)),
        vec![tensor(0).address]
    );
}

#[test]
fn free_every_other_frees_the_second_fourth_and_so_on_leaving_holes() {
    let mut p = with_tensors(5);
    let addresses = freed(&p.apply(StressAction::FreeEveryOther));
    assert_eq!(addresses, vec![tensor(1).address, tensor(3).address]);
    p.on_result(answer(StressOutcome::Freed(addresses), 10 * MIB));
    let left: Vec<u64> = p.tensors.iter().map(|t| t.address).collect();
    assert_eq!(
        left,
        vec![tensor(0).address, tensor(2).address, tensor(4).address]
    );
}

#[test]
fn free_every_other_with_one_tensor_keeps_it_and_says_so_not_that_none_is_live() {
    let mut p = with_tensors(1);
    assert!(p.apply(StressAction::FreeEveryOther).is_empty());
    assert_eq!(
        p.message.as_deref(),
        Some("one live tensor: every other frees the 2nd, 4th, …")
    );
    assert_eq!(p.tensors.len(), 1);
}

#[test]
fn free_all_frees_every_tensor_and_free_random_one_live_tensor() {
    let mut p = with_tensors(4);
    assert_eq!(freed(&p.apply(StressAction::FreeAll)).len(), 4);
    let mut p = with_tensors(4);
    let one = freed(&p.apply(StressAction::FreeRandom));
    assert_eq!(one.len(), 1);
    assert!(p.tensors.iter().any(|t| t.address == one[0]));
}

#[test]
fn freeing_with_no_tensors_says_so_and_sends_nothing() {
    let mut p = started(false, GIB);
    assert!(p.apply(StressAction::FreeAll).is_empty());
    assert!(
        p.message
            .as_deref()
            .unwrap_or("")
            .contains("no live tensors")
    );
}

#[test]
fn random_sizes_are_log_uniform_within_bounds_and_reproducible() {
    let draw = || {
        let mut p = started(false, 80 * GIB);
        p.apply(StressAction::TogglePattern);
        assert_eq!(p.pattern, Pattern::RandomLogUniform);
        p.count_index = COUNT_PRESETS.len() - 1;
        match &p.apply(StressAction::Allocate)[..] {
            [StressCommand::Malloc { sizes, .. }] => sizes.clone(),
            other => panic!("{other:?}"),
        }
    };
    let sizes = draw();
    assert_eq!(sizes, draw(), "same seed, same sizes");
    assert!(sizes.iter().all(|s| (RANDOM_MIN_BYTES..=MIB).contains(s)));
    assert!(
        sizes.iter().any(|&s| s < 32 * 1024),
        "small sizes are as likely"
    );
}

#[test]
fn docs_stress_says_which_press_of_r_selects_the_transformer_step() {
    let mut p = started(false, 80 * GIB);
    assert_eq!(p.pattern, Pattern::Fixed);
    let mut presses = 0;
    while p.pattern != Pattern::TransformerStep {
        p.apply(StressAction::TogglePattern);
        presses += 1;
        assert!(presses < 10, "r never selects the transformer step");
    }
    let ordinal = ["first", "second", "third", "fourth"][presses - 1];
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/stress.md"),
    )
    .expect("docs/stress.md exists");
    assert!(
        doc.contains(&format!("`r` ({ordinal} press")),
        "docs/stress.md should say the {ordinal} press of `r` selects it"
    );
}

#[test]
fn compare_marks_a_then_b_and_reports_b_minus_a() {
    let mut p = with_tensors(4);
    p.apply(StressAction::MarkCompare);
    assert!(p.compare().is_none(), "only A so far");
    p.on_result(answer(StressOutcome::CacheEmptied, 2 * MIB));
    p.apply(StressAction::MarkCompare);
    let rows = p.compare().expect("A and B");
    let reserved = rows.iter().find(|r| r.name == "reserved").unwrap();
    assert_eq!(reserved.a, 8 * MIB);
    assert_eq!(reserved.b, 2 * MIB);
    assert_eq!(reserved.delta(), -6 * MIB as i128);
    p.apply(StressAction::MarkCompare);
    assert!(p.compare().is_none(), "a third press starts over");
    assert_eq!(p.marks, CompareMarks::A(p.figures));
}

#[test]
fn the_compare_table_says_how_many_actions_ago_b_was_marked() {
    // A table marked long before stayed as it was until `S`, read as the
    // figures now; its header says when B is not the figures now.
    let mut p = with_tensors(4);
    p.apply(StressAction::MarkCompare);
    p.on_result(answer(StressOutcome::CacheEmptied, 2 * MIB));
    p.apply(StressAction::MarkCompare);
    assert_eq!(p.answers_since_b(), Some(0), "B is now");
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = p.clone();
    assert!(!screen_text(&state, 120, 40).contains("ago"));
    p.on_result(answer(StressOutcome::CacheEmptied, 2 * MIB));
    p.on_result(answer(StressOutcome::CacheEmptied, 2 * MIB));
    assert_eq!(p.answers_since_b(), Some(2));
    state.stress = p.clone();
    let wide = screen_text(&state, 120, 40);
    assert!(wide.contains("B: 2 actions ago"), "{wide}");
    let narrow = screen_text(&state, 80, 24);
    assert!(narrow.contains("B: 2 ago"), "{narrow}");
    p.apply(StressAction::MarkCompare);
    assert_eq!(p.answers_since_b(), None, "a new A: no table");
}

#[test]
fn out_of_memory_is_kept_as_state_with_the_tensors_made_before_it() {
    let mut p = started(false, GIB);
    oom_after_two_tensors(&mut p, 3 * MIB);
    assert_eq!(p.tensors.len(), 2);
    let said = p.message.clone().unwrap_or_default();
    assert_eq!(
        said,
        "out of memory after 2 tensors: 2.00 MiB more could not be obtained"
    );
    let oom = p.oom.clone().expect("OOM kept");
    assert_eq!(oom.reserved_but_unallocated, 3 * MIB);
    assert!(!p.busy);
    p.on_result(answer(StressOutcome::Allocated(vec![tensor(2)]), 6 * MIB));
    assert!(p.oom.is_none(), "a successful allocation clears it");
}

/// A panel after an OOM that left two tensors live (4 MiB reserved).
fn after_an_oom() -> StressPanel {
    let mut p = started(false, GIB);
    oom_after_two_tensors(&mut p, 0);
    assert!(p.oom.is_some());
    p
}

/// `p` answered with an OOM that left two tensors live (4 MiB reserved,
/// `reserved_but_unallocated` of it free in the cache).
fn oom_after_two_tensors(p: &mut StressPanel, reserved_but_unallocated: u64) {
    p.on_result(answer(
        StressOutcome::OutOfMemory {
            allocated: vec![tensor(0), tensor(1)],
            message: "CUDA out of memory. Tried to allocate 2.00 MiB.".into(),
            reserved_but_unallocated,
            room: OomRoom {
                tried: 2 * MIB,
                request: MIB,
                device_free: 0,
                reserved: 4 * MIB,
                others: OtherProcesses::default(),
            },
        },
        4 * MIB,
    ));
}

#[test]
fn the_oom_message_goes_once_memory_is_freed_since_and_the_message_says_so() {
    // s 80GB Enter, a (OOM after 1 tensor), D, e: "empty_cache released
    // 74.5 GiB" under "CUDA out of memory. Tried to allocate 74.51 GiB",
    // which no longer applied.
    let mut p = after_an_oom();
    let addresses: Vec<u64> = p.tensors.iter().map(|t| t.address).collect();
    p.on_result(answer(StressOutcome::Freed(addresses), 4 * MIB));
    assert!(p.oom.is_none(), "a free clears it");
    let said = p.message.clone().unwrap_or_default();
    assert!(
        said.ends_with("; the OOM's message went (memory was freed since)"),
        "{said}"
    );
    p.on_result(answer(StressOutcome::CacheEmptied, 0));
    let said = p.message.clone().unwrap_or_default();
    assert!(!said.contains("OOM"), "said once: {said}");
    // An empty_cache that releases memory clears it too; one that
    // releases nothing changes nothing the OOM described.
    let mut p = after_an_oom();
    p.on_result(answer(StressOutcome::CacheEmptied, 4 * MIB));
    assert!(p.oom.is_some(), "nothing released: {:?}", p.message);
    p.on_result(answer(StressOutcome::CacheEmptied, 2 * MIB));
    assert!(p.oom.is_none());
    assert!(
        p.message
            .as_deref()
            .unwrap_or_default()
            .contains("memory was freed since")
    );
}

// ------------------------------------------------------------ typed sizes

fn type_text(p: &mut StressPanel, text: &str) {
    for c in text.chars() {
        p.type_char(c);
    }
}

#[test]
fn a_typed_size_replaces_the_preset_and_allocations_use_it() {
    let mut p = started(false, 80 * GIB);
    assert!(p.apply(StressAction::TypeSize).is_empty());
    assert!(p.editing_size());
    type_text(&mut p, "37MiX");
    p.backspace();
    type_text(&mut p, "B");
    assert_eq!(p.size_text(), Some("37MiB"));
    assert!(p.submit_size().is_empty(), "setting a size sends nothing");
    assert!(!p.editing_size());
    assert_eq!(p.size(), 37 * MIB);
    assert_eq!(p.custom_size, Some(37 * MIB));
    assert!(p.message.as_deref().unwrap_or("").contains("37.0 MiB"));
    p.count_index = COUNT_PRESETS.iter().position(|&c| c == 2).unwrap();
    assert_eq!(
        p.apply(StressAction::Allocate),
        vec![StressCommand::Malloc {
            sizes: vec![37 * MIB, 37 * MIB],
            cap: None,
        }]
    );
}

#[test]
fn escape_cancels_the_size_field_and_invalid_text_says_why_and_keeps_it_open() {
    let mut p = started(false, 80 * GIB);
    p.apply(StressAction::TypeSize);
    type_text(&mut p, "99MiB");
    p.cancel_size_input();
    assert!(!p.editing_size());
    assert_eq!(p.size(), SIZE_PRESETS[1], "unchanged");

    for bad in ["abc", "0", "", "12 parsecs", "2TiB"] {
        p.apply(StressAction::TypeSize);
        type_text(&mut p, bad);
        assert!(p.submit_size().is_empty());
        assert!(p.editing_size(), "{bad:?}: the field stays open to fix");
        let why = p.message.clone().unwrap_or_default();
        assert!(why.contains(&format!("'{bad}'")), "{why}");
        assert_eq!(p.size(), SIZE_PRESETS[1], "{bad:?}: size unchanged");
        p.cancel_size_input();
    }
    assert!(parse_typed_size("abc").unwrap_err().contains("37MiB"));
    // Zero is a size, too small: said as the command line and config say it.
    for zero in ["0", "0MiB", " 0 "] {
        let why = parse_typed_size(zero).unwrap_err();
        assert!(
            why.starts_with(&format!("'{}' is zero: a size is at least 1B", zero.trim())),
            "{why}"
        );
    }
    assert_eq!(
        vramtop::cli::size_arg("0MiB").unwrap_err(),
        "'0MiB' is zero: a size is at least 1B"
    );
    assert_eq!(parse_typed_size(" 1.5GiB "), Ok(3 * GIB / 2));
    // A bare number is bytes, and a fraction of a byte is refused as the
    // command line refuses it, not rounded.
    assert_eq!(parse_typed_size("2"), Ok(2));
    assert_eq!(parse_typed_size("1.5KiB"), Ok(1536));
    for fraction in ["0.5B", "1.5", "0.3B"] {
        let why = parse_typed_size(fraction).unwrap_err();
        assert!(
            why.starts_with(&format!("'{fraction}' is not a whole number of bytes (")),
            "{why}"
        );
    }
    assert_eq!(
        vramtop::cli::size_arg("0.5B").unwrap_err(),
        "'0.5B' is not a whole number of bytes"
    );
    assert_eq!(parse_typed_size("1TiB"), Ok(MAX_TYPED_SIZE));
    assert!(parse_typed_size("1.1TiB").is_err());
}

#[test]
fn the_size_field_refuses_a_size_in_the_command_lines_words() {
    let cli = |t: &str| vramtop::cli::size_arg(t).expect_err("refused");
    let panel = |t: &str| parse_typed_size(t).expect_err("refused");
    // Digits too many for any integer are too large, as on the command
    // line: the field said "is not a size" of both.
    for big in ["99999999999999999999999T", "20000000000000000000B"] {
        assert_eq!(
            panel(big),
            format!("'{big}' is more than the largest size, 1.00 TiB (Esc cancels)")
        );
        assert!(
            cli(big).starts_with(&format!("'{big}' is more than the largest size, 16 EiB")),
            "{}",
            cli(big)
        );
    }
    // Past the panel's own largest: the same words, its own limit.
    assert_eq!(
        panel("2TiB"),
        "'2TiB' is more than the largest size, 1.00 TiB (Esc cancels)"
    );
    // Not a size, negative, zero: the command line's message, then what
    // closes the field.
    for bad in ["abc", "12 parsecs", "-1GiB", "0MiB", "1.5.5GiB"] {
        assert_eq!(panel(bad), format!("{} (Esc cancels)", cli(bad)), "{bad}");
    }
}

#[test]
fn a_full_field_says_it_refused_a_key_and_bksp_takes_the_notice_away() {
    let mut p = started(false, 80 * GIB);
    p.apply(StressAction::TypeSize);
    type_text(&mut p, "abcdefghij0123456789ABCDEFGHIJ");
    assert_eq!(p.size_text(), Some("abcdefghij0123456789ABCD"));
    // Said, not dropped in silence: the field's notice names its length
    // and the key that makes room.
    let said = p.message.clone().unwrap_or_default();
    assert_eq!(said, full_field_message(false, MAX_SIZE_INPUT));
    assert_eq!(
        said,
        "the size field holds 24 characters: the rest is not typed (Bksp deletes)"
    );
    let text = flat(&panel_text(&p, 80, 12));
    assert!(text.contains(&said), "{text}");
    // Room made, the notice goes; a key that fits says nothing.
    p.backspace();
    assert_eq!(p.message, None);
    p.type_char('x');
    assert_eq!(p.message, None);
    assert_eq!(p.size_text(), Some("abcdefghij0123456789ABCx"));
    p.cancel_input();
    // The settings field likewise, at its own length.
    p.apply(StressAction::TypeSettings);
    type_text(&mut p, &"x".repeat(MAX_SETTINGS_INPUT + 1));
    assert_eq!(
        p.settings_text().map(|t| t.chars().count()),
        Some(MAX_SETTINGS_INPUT)
    );
    let said = p.message.clone().unwrap_or_default();
    assert!(
        said.starts_with("the settings field holds 200 characters"),
        "{said}"
    );
}

#[test]
fn plus_and_minus_from_a_typed_size_go_to_the_nearest_preset_and_a_preset_is_a_preset() {
    let mut p = started(false, 80 * GIB);
    p.apply(StressAction::SetSize(37 * MIB));
    p.apply(StressAction::SizeUp);
    assert_eq!((p.size(), p.custom_size), (100 * MIB, None));
    p.apply(StressAction::SetSize(37 * MIB));
    p.apply(StressAction::SizeDown);
    assert_eq!(p.size(), 10 * MIB);
    p.apply(StressAction::SetSize(2 * GIB));
    p.apply(StressAction::SizeUp);
    assert_eq!(p.size(), GIB, "above every preset: the largest");
    p.apply(StressAction::SetSize(100));
    p.apply(StressAction::SizeDown);
    assert_eq!(p.size(), 512, "below every preset: the smallest");
    p.apply(StressAction::SetSize(10 * MIB));
    assert_eq!(p.custom_size, None, "a typed preset selects it");
    assert_eq!(p.size(), 10 * MIB);
}

#[test]
fn a_size_typed_while_busy_opens_at_once_and_is_set_in_key_order() {
    let mut p = with_tensors(2);
    let first = p.apply(StressAction::FreeOldest);
    assert_eq!(first.len(), 1);
    p.apply(StressAction::Allocate); // queued, at the old size
    p.apply(StressAction::TypeSize);
    assert!(p.editing_size(), "the field opens while busy");
    type_text(&mut p, "3MiB");
    assert!(p.submit_size().is_empty());
    p.apply(StressAction::Allocate); // queued, at the new size
    assert_eq!(p.size(), MIB, "not set before the queued allocation");
    let next = p.on_result(answer(StressOutcome::Freed(vec![tensor(0).address]), 0));
    assert!(matches!(&next[..], [StressCommand::Malloc { sizes, .. }] if sizes[0] == MIB));
    assert_eq!(p.size(), MIB);
    let after = p.on_result(answer(StressOutcome::Allocated(Vec::new()), 0));
    assert!(matches!(&after[..], [StressCommand::Malloc { sizes, .. }] if sizes[0] == 3 * MIB));
}

// ------------------------------------------------------------ the worker

fn sim() -> SimCluster {
    SimCluster::new(SimConfig {
        seed: 3,
        ..SimConfig::default()
    })
}

struct Driven {
    worker: StressWorker,
    results: mpsc::Receiver<StressResult>,
    panel: StressPanel,
}

impl Driven {
    fn start(cluster: &SimCluster) -> Driven {
        Self::start_with(cluster, StressPanel::default())
    }

    fn start_with(cluster: &SimCluster, panel: StressPanel) -> Driven {
        let (tx, results) = mpsc::channel();
        let worker = StressWorker::spawn_sim(cluster, 0, None, move |r| {
            let _ = tx.send(r);
        })
        .expect("thread starts");
        let mut d = Driven {
            worker,
            results,
            panel,
        };
        d.receive();
        d
    }

    fn receive(&mut self) {
        let r = self
            .results
            .recv_timeout(Duration::from_secs(10))
            .expect("the worker answers");
        self.panel.on_result(r);
    }

    fn act(&mut self, action: StressAction) {
        let cmds = self.panel.apply(action);
        if !cmds.is_empty() {
            assert!(self.worker.send(cmds));
            self.receive();
        }
    }

    /// Bytes of segments with no live block: what empty_cache may return.
    fn fully_free_segment_bytes(&self) -> u64 {
        let view = self.panel.view.as_ref().expect("a view");
        view.layout
            .iter()
            .filter(|s| s.blocks.iter().all(|b| !b.state.is_active()))
            .map(|s| s.total_size)
            .sum()
    }
}

fn free_bytes(cluster: &SimCluster) -> u64 {
    // A process that never allocates pays no context: a pure probe.
    let probe: SimMemory = cluster.new_process(0, "probe");
    let free = probe.mem_get_info().free;
    cluster.end_process(0, probe.pid());
    free
}

#[test]
fn the_simulated_stress_process_is_listed_as_simulated_like_the_simulations_others() {
    let cluster = sim();
    let mut d = Driven::start(&cluster);
    d.act(StressAction::Allocate);
    let sample = cluster.telemetry().sample().expect("sim");
    let commands: Vec<String> = sample
        .iter()
        .filter_map(|r| r.sample())
        .flat_map(|s| s.listed_processes().iter())
        .filter_map(|p| p.command.clone())
        .collect();
    assert!(
        !commands.is_empty(),
        "the panel's process holds its context"
    );
    // Every process the simulation lists says it is simulated: none reads
    // as a real one (vramtop itself) holding memory.
    for c in &commands {
        assert!(c.contains("simulated"), "{c}: {commands:?}");
    }
    assert!(
        commands
            .iter()
            .any(|c| c == "vramtop stress panel (simulated)"),
        "{commands:?}"
    );
}

#[test]
fn worker_on_the_simulation_releases_only_whole_free_segments_and_everything_on_drop() {
    let cluster = sim();
    let free_before = free_bytes(&cluster);
    let mut d = Driven::start(&cluster);
    assert_eq!(d.panel.gpu, Some(0));
    assert_eq!(d.panel.cap, None);

    // 5 × 10 MiB: large-pool tensors, one segment each; then 10 × 1 MiB:
    // small-pool tensors, two per 2 MiB segment.
    d.panel.size_index = SIZE_PRESETS.iter().position(|&s| s == 10 * MIB).unwrap();
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 5).unwrap();
    d.act(StressAction::Allocate);
    d.panel.size_index = SIZE_PRESETS.iter().position(|&s| s == MIB).unwrap();
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 10).unwrap();
    d.act(StressAction::Allocate);
    assert_eq!(d.panel.tensors.len(), 15);
    assert_eq!(d.panel.figures.allocated, 60 * MIB);
    assert_eq!(d.panel.figures.reserved, 60 * MIB);
    assert!(
        d.panel.figures.driver_used >= 60 * MIB + 500 * MIB,
        "the worker's own CUDA context is in driver used"
    );

    // Frees tensors 2, 4, …: two 10 MiB segments become entirely free,
    // every small segment keeps one live tensor (a hole).
    d.act(StressAction::FreeEveryOther);
    assert_eq!(d.panel.tensors.len(), 8);
    assert_eq!(
        d.panel.figures.reserved,
        60 * MIB,
        "freeing keeps the cache"
    );
    let releasable = d.fully_free_segment_bytes();
    assert_eq!(releasable, 20 * MIB);

    d.act(StressAction::MarkCompare);
    d.act(StressAction::EmptyCache);
    d.act(StressAction::MarkCompare);
    let rows = d.panel.compare().expect("A and B");
    let row = |name: &str| *rows.iter().find(|r| r.name == name).unwrap();
    assert_eq!(
        row("reserved").delta(),
        -(releasable as i128),
        "reserved drops by the whole free segments only"
    );
    assert_eq!(row("segments").delta(), -2);
    assert_eq!(row("allocated").delta(), 0);
    assert_eq!(row("driver used (GPU)").delta(), -(releasable as i128));
    assert!(
        row("inactive split").b > 0,
        "the holes in the small segments stay"
    );

    drop(d);
    assert_eq!(
        free_bytes(&cluster),
        free_before,
        "dropping the worker frees every tensor, segment and its context"
    );
}

#[test]
fn the_panel_says_why_in_the_models_words_as_the_demo_does() {
    use vramtop::alloc::explain::Why;
    let cluster = sim();
    let mut d = Driven::start(&cluster);
    d.panel.count_index = 0;
    d.act(StressAction::MarkCompare);
    // 7 MiB: no cached block, a 20 MiB segment (spec §1.4), and the
    // simulated process's CUDA context, made by its first allocation.
    d.panel.custom_size = Some(7 * MIB);
    d.act(StressAction::Allocate);
    assert_eq!(
        d.panel.message.as_deref(),
        Some("allocated 1 tensor; reserved grew by 20.0 MiB")
    );
    assert_eq!(
        d.panel.why,
        vec![
            Why::NewSegment {
                request: 7 * MIB,
                segment: 20 * MIB,
                several: false
            },
            Why::ContextCreated { bytes: 500 * MIB }
        ]
    );
    // Marking B says the driver-used row's +500 MiB past reserved is that
    // context.
    d.act(StressAction::MarkCompare);
    assert_eq!(
        d.panel.why,
        vec![Why::DriverPastReserved {
            bytes: 500 * MIB as i64,
            context: Some(500 * MIB)
        }]
    );
    // A second 7 MiB fits the 13 MiB left of that segment.
    d.act(StressAction::Allocate);
    assert_eq!(
        d.panel.message.as_deref(),
        Some("allocated 1 tensor; reserved stays 20.0 MiB")
    );
    assert_eq!(d.panel.why, vec![Why::ServedFromCache]);
    // Freeing one leaves a hole beside the other: nothing to release.
    d.act(StressAction::FreeOldest);
    d.act(StressAction::EmptyCache);
    assert_eq!(d.panel.message.as_deref(), Some("empty_cache released 0 B"));
    assert_eq!(d.panel.why, vec![Why::EverySegmentHoldsALiveBlock]);
    // The same words as the demo's step.
    assert!(
        vramtop::cli::demo::steps(80 << 30)
            .expect("the demo runs")
            .iter()
            .any(|s| s.lesson == Why::EverySegmentHoldsALiveBlock.short())
    );
    // At 80 columns the reason keeps to one row where rows are short.
    let shortest = ui::why_wordings(&d.panel.why);
    assert!(shortest.last().expect("a wording").chars().count() <= 80);
}

#[test]
fn a_capped_worker_on_the_simulation_allocates_up_to_the_cap_and_no_further() {
    let cluster = sim();
    let mut d = Driven::start_with(&cluster, StressPanel::with_cap(Some(50 * MIB)));
    assert_eq!(d.panel.cap, Some(50 * MIB));
    d.panel.size_index = SIZE_PRESETS.iter().position(|&s| s == 10 * MIB).unwrap();
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 10).unwrap();
    d.act(StressAction::Allocate);
    assert!(d.panel.tensors.is_empty(), "100 MiB > 50 MiB: nothing sent");
    let why = d.panel.message.clone().unwrap_or_default();
    assert!(why.contains("exceeds the stress cap of 50.0 MiB"), "{why}");
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 5).unwrap();
    d.act(StressAction::Allocate);
    assert_eq!(d.panel.tensors.len(), 5);
    assert_eq!(d.panel.figures.reserved, 50 * MIB);
    d.panel.count_index = 0;
    d.act(StressAction::Allocate);
    assert_eq!(d.panel.tensors.len(), 5, "one more would pass the cap");
    assert!(
        d.panel.oom.is_none(),
        "refused before the device, not an OOM"
    );
}

#[test]
fn worker_reports_out_of_memory_with_pytorchs_message() {
    let cluster = SimCluster::new(SimConfig {
        memory_per_gpu: 4 * GIB,
        seed: 3,
        ..SimConfig::default()
    });
    let mut d = Driven::start(&cluster);
    d.panel.size_index = SIZE_PRESETS.len() - 1;
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 5).unwrap();
    d.act(StressAction::Allocate);
    let oom = d.panel.oom.clone().expect("4 GiB cannot hold 5 GiB");
    // PyTorch's format_size prints exactly 1 GiB as "1024.00 MiB".
    assert!(
        oom.message
            .starts_with("CUDA out of memory. Tried to allocate 1024.00 MiB.")
    );
    assert!(
        oom.message
            .contains("is reserved by PyTorch but unallocated")
    );
    assert_eq!(d.panel.tensors.len(), 3, "the three that fit stay live");
}

// ------------------------------------------------------------ keys and drawing

fn press(state: &mut AppState, code: KeyCode) -> Effect {
    handle_key(
        state,
        &Keymap::default(),
        KeyEvent::new(code, KeyModifiers::NONE),
    )
}

#[test]
fn s_opens_the_size_field_which_takes_every_key_until_enter_or_escape() {
    let mut state = AppState::new(StatusState::default());
    press(&mut state, KeyCode::F(2));
    press(&mut state, KeyCode::Char('s'));
    assert!(state.stress.editing_size());
    for c in "q37MiB".chars() {
        assert_eq!(press(&mut state, KeyCode::Char(c)), Effect::Redraw, "{c}");
    }
    press(&mut state, KeyCode::Backspace);
    press(&mut state, KeyCode::Backspace);
    press(&mut state, KeyCode::Backspace);
    assert_eq!(state.stress.size_text(), Some("q37"));
    press(&mut state, KeyCode::Enter);
    assert!(state.stress.editing_size(), "'q37' is no size");
    press(&mut state, KeyCode::Esc);
    assert!(!state.stress.editing_size());
    assert!(state.ui.stress_open, "Esc closed the field, not the panel");

    press(&mut state, KeyCode::Char('s'));
    for c in "37MiB".chars() {
        press(&mut state, KeyCode::Char(c));
    }
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, &state, &Keymap::default(), &Theme::colored()))
        .expect("test backend");
    let screen: String = terminal
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect();
    assert!(screen.contains("set size: 37MiB"), "the field is drawn");
    assert_eq!(
        press(&mut state, KeyCode::Enter),
        Effect::Redraw,
        "Enter sets the size; it does not allocate"
    );
    assert_eq!(state.stress.size(), 37 * MIB);
    assert!(!state.stress.editing_size());
}

#[test]
fn every_key_the_panel_answers_is_in_its_help_and_in_docs_keys() {
    let keymap = Keymap::default();
    let documented: Vec<_> = keymap.stress.iter().map(|b| b.key).collect();
    for c in "a+-][rdoxmDecksj".chars() {
        let k = keymap
            .stress_key_for(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
            .unwrap_or_else(|| panic!("{c} is bound"));
        assert!(documented.contains(&k), "{k:?} is not in the panel's help");
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/keys.md"))
        .expect("docs/keys.md");
    for b in &keymap.stress {
        assert!(
            doc.contains(&format!("`{}`", b.keys)),
            "`{}` missing",
            b.keys
        );
    }
}

/// The help overlay as text, on a `(width, height)` screen, with or
/// without the stress panel open.
fn help_screen(
    keymap: &Keymap,
    theme: &Theme,
    (width, height): (u16, u16),
    stress: bool,
) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("test backend");
    terminal
        .draw(|f| {
            f.render_widget(
                ui::HelpOverlay::new(keymap, theme).with_stress(stress),
                f.area(),
            )
        })
        .expect("test backend");
    common::screen::text(terminal.backend().buffer())
}

/// The help's words at 80 columns (tall enough for all of it), with the
/// stress panel open or not, wrapped lines joined and frames left out.
fn help_words_at_80(stress: bool) -> String {
    let screen = help_screen(&Keymap::default(), &Theme::colored(), (80, 200), stress);
    screen
        .split_whitespace()
        .filter(|w| !w.chars().all(|c| "│─┌┐└┘".contains(c)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn help_with_the_stress_panel_open_defines_the_cap_its_title_names() {
    // The panel's title says "cap 40.0 GiB" and a request past it is
    // refused whole: the panel's help says what the cap is and where it
    // comes from, at 80 columns.
    let unwrapped = help_words_at_80;
    let open = unwrapped(true);
    assert!(
        open.contains(&format!(
            "cap: the most the stress panel may hold (--stress-cap; on a real GPU {}% of the \
             memory free when the panel started, none on the simulated one): a request that \
             would pass it is refused before it is sent; one whose blocks pass it stops there, \
             the tensors before it kept.",
            vramtop::app::stress::REAL_GPU_CAP_PERCENT
        )),
        "{open}"
    );
    assert!(
        !unwrapped(false).contains("the most the stress panel may hold"),
        "the panel's word only"
    );
}

#[test]
fn help_with_the_stress_panel_open_says_what_b_is_in_the_compare_tables_b_n_ago() {
    // The compare table's first header cell reads "B: 4 ago" once actions
    // follow the marks; the panel's help at 80 columns says what that is.
    let unwrapped = help_words_at_80;
    let open = unwrapped(true);
    assert!(
        open.contains(
            "B: N ago: the panel's compare table: A and B are the figures when c marked \
             them (Δ = B − A); B was marked N of the panel's actions ago, so it is not the \
             figures now."
        ),
        "{open}"
    );
    assert!(
        !unwrapped(false).contains("B: N ago"),
        "the panel's word only"
    );
}

#[test]
fn help_with_the_stress_panel_open_promises_no_dashboard_key_the_panel_takes() {
    let keymap = Keymap::default();
    let theme = Theme::colored();
    let help = |stress: bool| help_screen(&keymap, &theme, (120, 90), stress);
    let open = help(true);
    // The panel's own rows are there; the dashboard's for c, o, v, + and
    // - (compare, free oldest, verify, size up and down in the panel) are
    // not, and the keys that still act are.
    for gone in [
        "snapshot of the allocator shown",
        "open the last snapshot",
        "allocator: next process on GPU",
        "zoom the timeline in",
        "zoom the timeline out",
        "move up (GPU, block, process)",
    ] {
        assert!(!open.contains(gone), "{gone}: {open}");
        assert!(help(false).contains(gone), "{gone} is the dashboard's");
    }
    for kept in [
        "compare: mark A, then B",
        "free the oldest tensor",
        "pause / resume the timeline",
        "open the OOM snapshot at its OOM",
        "close help/detail/filter/OOM line",
        "process tree / flat list",
    ] {
        assert!(open.contains(kept), "{kept}: {open}");
    }
    for (keys, what, _) in keymap.help_rows_beside_stress() {
        assert!(
            keys == "Esc" || !keymap.stress_takes(keys),
            "{keys} {what} is the panel's key"
        );
    }
}

#[test]
fn help_at_80_columns_wraps_long_key_descriptions_instead_of_cutting_them() {
    let keymap = Keymap::default();
    let theme = Theme::colored();
    for stress in [false, true] {
        let screen = help_screen(&keymap, &theme, (80, 120), stress);
        for row in screen.lines() {
            assert!(!row.trim_end().ends_with("…│"), "cut: {row}\n{screen}");
        }
        if stress {
            let words = screen
                .split_whitespace()
                .filter(|w| *w != "│")
                .collect::<Vec<_>>()
                .join(" ");
            assert!(
                words.contains("in the snapshot folder"),
                "the W row is whole, and says where W writes: {screen}"
            );
        }
    }
}

/// A dashboard on `cluster` after its first sample, with the stress panel
/// open on GPU 0; the executor that answers the panel's commands
/// synchronously (without its thread), and the telemetry for later
/// samples.
fn panel_opened_on(cluster: &SimCluster) -> (AppState, StressExecutor<SimMemory>, SimTelemetry) {
    let mut telemetry = cluster.telemetry();
    let mut state = AppState::new(StatusState {
        backend: "sim".into(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    );
    next_sim_sample(&mut state, cluster, &mut telemetry);
    assert_eq!(press(&mut state, KeyCode::F(2)), Effect::Redraw);
    on_stress_result(&mut state, exec.started());
    (state, exec, telemetry)
}

/// Presses `codes` in turn, each command they give run on `exec` at once
/// and its answer handed back to the panel.
fn press_running(state: &mut AppState, exec: &mut StressExecutor<SimMemory>, codes: &[KeyCode]) {
    for &code in codes {
        if let Effect::Stress(cmds) = press(state, code) {
            for c in &cmds {
                on_stress_result(state, exec.execute(c));
            }
        }
    }
}

/// A dashboard on a simulated GPU with the stress panel driven
/// synchronously (the executor without its thread): 10 × 1 MiB, mark A,
/// free every other, empty_cache, mark B, then 100 × 1 GiB to OOM.
/// One second on `cluster`, then its sample given to the dashboard.
fn next_sim_sample(state: &mut AppState, cluster: &SimCluster, telemetry: &mut SimTelemetry) {
    cluster.advance(1000);
    state.apply_sample(
        cluster.now_ms(),
        telemetry.sample().expect("sim"),
        Default::default(),
    );
}

fn stress_screen() -> AppState {
    stress_screen_on(sim())
}

/// [`stress_screen`] on `cluster`.
fn stress_screen_on(cluster: SimCluster) -> AppState {
    let (mut state, mut exec, mut telemetry) = panel_opened_on(&cluster);
    press_running(
        &mut state,
        &mut exec,
        &[
            KeyCode::Enter,
            KeyCode::Char('c'),
            KeyCode::Char('m'),
            KeyCode::Char('e'),
            KeyCode::Char('c'),
        ],
    );
    state.stress.size_index = SIZE_PRESETS.len() - 1;
    state.stress.count_index = COUNT_PRESETS.len() - 1;
    press_running(&mut state, &mut exec, &[KeyCode::Char('a'), KeyCode::Down]);
    next_sim_sample(&mut state, &cluster, &mut telemetry);
    state
}

#[test]
fn the_open_panel_shows_tensors_oom_and_compare_over_the_dashboard() {
    let state = stress_screen();
    assert!(state.stress.oom.is_some());
    assert!(state.stress.compare().is_some());
    let view = state.gpus[0].allocator.as_ref().expect("the stress view");
    assert_eq!(view.source, "vramtop stress panel");
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, &state, &Keymap::default(), &Theme::colored()))
        .expect("test backend");
    insta::assert_snapshot!("stress_panel_120x40", terminal.backend());
}

/// The dashboard on [`sim`] with the panel open and `keys` pressed, each
/// command run synchronously (the executor without its thread).
fn panel_after(keys: &str) -> AppState {
    let (mut state, mut exec, _) = panel_opened_on(&sim());
    let codes: Vec<KeyCode> = keys.chars().map(KeyCode::Char).collect();
    press_running(&mut state, &mut exec, &codes);
    state
}

#[test]
fn a_compare_histogram_cut_at_80x24_says_how_many_rows_are_hidden() {
    // Free blocks in three buckets after every other is freed; at 80×24
    // the panel has rows for the figures and two more: not the
    // histogram's heading over no row of it, but how many are not shown.
    let state = panel_after("aa+acmocH");
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let text = common::screen::text(terminal.backend().buffer());
    assert!(
        text.contains("… 3 more histogram rows: a taller terminal shows them"),
        "{text}"
    );
    assert!(!text.contains("free ≤"), "a heading over no row: {text}");
    insta::assert_snapshot!("stress_histogram_cut_80x24", terminal.backend());
    // Taller, every row is shown and none is said to be hidden.
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 30);
    let text = common::screen::text(terminal.backend().buffer());
    assert!(
        text.contains("2.00 MiB") && text.contains("16.0 MiB") && !text.contains("more histogram"),
        "{text}"
    );
}

#[test]
fn breakdown_keeps_context_and_free_when_the_stress_panel_leaves_it_one_row() {
    let mut state = stress_screen();
    // The fallback banner takes the status line's second row, as on a
    // machine without NVML: the breakdown is left one legend row.
    state.status.banner = Some("nvml is not available: showing 1 simulated GPU".into());
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let screen = common::screen::text(terminal.backend().buffer());
    let legend: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.contains(" Memory breakdown "))
        .skip(2)
        .take_while(|l| !l.contains(" Timeline "))
        .collect();
    let legend = legend.join("\n");
    // "context & other", the dashboard's and the help's term, not a
    // shorter "context" of its own.
    for part in ["█ allocated", "▓ unalloc", "▒ context & other", "░ free"] {
        assert!(legend.contains(part), "{part}: {legend}\n{screen}");
    }
}

#[test]
fn stress_title_keeps_the_active_settings_whole_at_80_columns() {
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = with_tensors(2);
    state.stress.settings = "expandable_segments:True".into();
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let screen = common::screen::text(terminal.backend().buffer());
    let title = screen
        .lines()
        .find(|l| l.contains(" Stress panel "))
        .unwrap_or_default();
    assert!(title.contains("expandable_segments:True"), "{title}");
    let wide = common::screen::draw(&state, &Theme::colored(), 160, 40);
    let screen = common::screen::text(wide.backend().buffer());
    assert!(screen.contains("F2/Esc closes"), "{screen}");
}

#[test]
fn ascii_mode_draws_the_stress_panel_in_ascii_only() {
    let mut state = stress_screen();
    let theme = Theme::colored().with_ascii(true);
    let mut shown = Vec::new();
    for step in ["tensors, OOM and compare", "help over it", "size field"] {
        match step {
            "help over it" => state.ui.overlay = vramtop::app::state::Overlay::Help,
            "size field" => {
                state.ui.overlay = vramtop::app::state::Overlay::None;
                press(&mut state, KeyCode::Char('s'));
            }
            _ => {}
        }
        for (w, h) in [(80, 24), (120, 40)] {
            let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
            terminal
                .draw(|f| ui::draw(f, &state, &Keymap::default(), &theme))
                .expect("test backend");
            let buf = terminal.backend().buffer();
            let bad = common::screen::non_ascii(buf);
            assert!(bad.is_empty(), "{step} at {w}×{h}: {bad:?}");
            shown.push(common::screen::text(buf));
        }
    }
    assert!(shown[1].contains("Stress panel"), "{}", shown[1]);
}

fn screen_text(state: &AppState, w: u16, h: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, state, &Keymap::default(), &Theme::colored()))
        .expect("test backend");
    terminal.backend().to_string()
}

#[test]
fn at_80x24_with_processes_focused_the_breakdown_keeps_its_figures_over_the_segment_map() {
    let mut state = stress_screen();
    state.ui.focus = vramtop::app::state::Pane::Processes;
    let screen = screen_text(&state, 80, 24);
    let rows: Vec<&str> = screen.lines().collect();
    let breakdown = rows
        .iter()
        .position(|l| l.contains("Memory breakdown"))
        .expect("the breakdown");
    // Under its bar, a row of figures: before, an unfocused one-strip
    // segment map took that row and left a bar with no numbers.
    let figures = rows.get(breakdown + 2).copied().unwrap_or_default();
    assert!(
        figures.contains("allocated") && figures.contains("free"),
        "{figures}\n{screen}"
    );
    assert!(screen.contains(" Processes "), "{screen}");
    // Focused, the segment map keeps its place as before.
    state.ui.focus = vramtop::app::state::Pane::Segments;
    let screen = screen_text(&state, 80, 24);
    assert!(screen.contains(" Segments "), "{screen}");
}

#[test]
fn a_focused_process_list_shows_every_process_beside_the_panel_and_keeps_the_figures() {
    // A simulated training process beside the panel's own, as on
    // `vramtop --backend sim`.
    let mut state = stress_screen_on(SimCluster::new(SimConfig {
        seed: 3,
        training_processes: 1,
        ..SimConfig::default()
    }));
    state.ui.focus = vramtop::app::state::Pane::Processes;
    let pids: Vec<String> = state
        .process_lines()
        .iter()
        .filter_map(|l| match l {
            vramtop::app::state::ProcessLine::Process(r) => Some(r.process.pid.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(pids.len(), 2, "{pids:?}");
    for (w, h) in [(80, 24), (120, 40)] {
        let screen = screen_text(&state, w, h);
        let rows: Vec<&str> = screen.lines().collect();
        let at = |title: &str| rows.iter().position(|l| l.contains(title));
        let (Some(list), Some(panel)) = (at(" Processes "), at(" Stress panel ")) else {
            panic!("{w}x{h}: no Processes or no panel\n{screen}");
        };
        // Capped at 3 rows, title and header included, the list showed
        // one of the two ("rows 1–1 of 2").
        let shown = rows[list..panel].join("\n");
        for pid in &pids {
            let listed = shown.lines().any(|l| l.contains(&format!(" {pid} sim ")));
            assert!(listed, "{w}x{h}: pid {pid}\n{screen}");
        }
        assert!(!shown.contains("rows 1–"), "{w}x{h}: {shown}");
        // The other panes keep their figures: the GPU's row, the
        // breakdown's legend under its bar.
        assert!(screen.contains("Simulated"), "{w}x{h}\n{screen}");
        let breakdown = at("Memory breakdown").expect("the breakdown");
        // Its legend's rows, up to the next pane's title.
        let figures = rows[breakdown + 2..]
            .iter()
            .take_while(|l| !l.contains('─'))
            .copied()
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            figures.contains("allocated") && figures.contains("░ free"),
            "{w}x{h}: {figures}\n{screen}"
        );
    }
}

#[test]
fn the_panel_shares_the_screen_with_the_segment_map_from_120x40() {
    let state = stress_screen();
    for (w, h) in [(120, 40), (200, 60), (200, 100)] {
        let screen = screen_text(&state, w, h);
        assert!(screen.contains(" Stress panel "), "{w}×{h}: {screen}");
        assert!(screen.contains(" Segments "), "{w}×{h}: the map: {screen}");
        assert!(screen.contains(" Memory breakdown "), "{w}×{h}: {screen}");
        assert!(screen.contains(" Fragmentation "), "{w}×{h}: {screen}");
    }
    insta::assert_snapshot!("stress_beside_map_200x60", screen_text(&state, 200, 60));
}

#[test]
fn at_120x40_shift_m_says_the_map_is_already_beside_and_its_hint_is_gone() {
    let mut state = stress_screen();
    let screen = screen_text(&state, 120, 40);
    assert!(
        !screen.contains("M map"),
        "no M hint beside the map: {screen}"
    );
    assert_eq!(press(&mut state, KeyCode::Char('M')), Effect::Redraw);
    assert!(!state.ui.stress_map, "nothing to toggle at this size");
    let message = state.stress.message.clone().unwrap_or_default();
    assert!(
        message.contains("beside the panel at this size"),
        "{message}"
    );
    let screen = screen_text(&state, 120, 40);
    assert!(screen.contains(" Stress panel ") && screen.contains(" Segments "));
    // Smaller, M toggles again.
    screen_text(&state, 80, 24);
    press(&mut state, KeyCode::Char('M'));
    assert!(state.ui.stress_map);
}

#[test]
fn below_120x40_shift_m_shows_the_segment_map_in_place_of_the_panel() {
    let mut state = stress_screen();
    let panel = screen_text(&state, 80, 24);
    assert!(panel.contains(" Stress panel "), "{panel}");
    assert!(!panel.contains(" Segments "), "{panel}");
    insta::assert_snapshot!("stress_panel_80x24", panel);
    assert_eq!(press(&mut state, KeyCode::Char('M')), Effect::Redraw);
    let map = screen_text(&state, 80, 24);
    assert!(!map.contains(" Stress panel "), "{map}");
    assert!(map.contains(" Segments "), "{map}");
    insta::assert_snapshot!("stress_map_80x24", map);
    // The panel's keys still act behind the map.
    let before = state.stress.count();
    press(&mut state, KeyCode::Char('['));
    assert!(state.stress.count() < before);
    press(&mut state, KeyCode::Char('M'));
    assert!(screen_text(&state, 80, 24).contains(" Stress panel "));
}

#[test]
fn behind_the_segment_map_j_k_and_d_do_not_act_and_the_status_line_says_m_returns() {
    // 80×24 and a terminal wide enough for every hint, both below 120×40.
    for (w, h) in [(80, 24), (200, 30)] {
        let mut state = stress_screen();
        let panel = screen_text(&state, w, h);
        assert!(
            panel.contains("d frees it") || panel.contains("d free"),
            "{panel}"
        );
        press(&mut state, KeyCode::Char('M'));
        let map = screen_text(&state, w, h);
        assert!(!map.contains(" Stress panel ") && map.contains(" Segments "));
        let selected = state.stress.selected;
        let live = state.stress.tensors.len();
        for (code, name) in [
            (KeyCode::Char('j'), "j"),
            (KeyCode::Char('k'), "k"),
            (KeyCode::Down, "↓"),
            (KeyCode::Up, "↑"),
            (KeyCode::Char('d'), "d"),
            (KeyCode::Delete, "Del"),
        ] {
            let effect = press(&mut state, code);
            assert!(
                !matches!(effect, Effect::Stress(_)),
                "{w}×{h}: {name} sent {effect:?}"
            );
            assert_eq!(state.stress.selected, selected, "{w}×{h}: {name} moved it");
            assert_eq!(state.stress.tensors.len(), live, "{w}×{h}: {name} freed");
            let screen = screen_text(&state, w, h);
            let says = format!("{name} acts on the tensor list: M returns to it");
            assert!(screen.contains(&says), "{w}×{h}: {says}\n{screen}");
        }
        // The hints say what the keys do here: M brings the panel back,
        // and no key the map view ignores is offered.
        let hints = screen_text(&state, w, h);
        let status = hints
            .lines()
            .rev()
            .find(|l| l.contains("quit"))
            .unwrap_or_default();
        assert!(status.contains("M panel"), "{w}×{h}: {status}");
        assert!(!status.contains("d free"), "{w}×{h}: {status}");
        // The other panel keys still act behind the map.
        let before = state.stress.count();
        press(&mut state, KeyCode::Char('['));
        assert!(state.stress.count() < before, "{w}×{h}");
        // Back on the panel, j and d act on the list it shows.
        press(&mut state, KeyCode::Char('M'));
        screen_text(&state, w, h);
        press(&mut state, KeyCode::Char('j'));
        assert_ne!(state.stress.selected, selected, "{w}×{h}");
        let shown = state.stress.tensors[state.stress.selected].address;
        let Effect::Stress(cmds) = press(&mut state, KeyCode::Char('d')) else {
            panic!("{w}×{h}: d frees on the panel");
        };
        assert_eq!(freed(&cmds), vec![shown], "{w}×{h}");
    }
}

/// The text of the stress panel's rows at `w`×`h` on the dashboard, flat
/// (the segment map beside it left out).
fn panel_on_screen(state: &AppState, w: u16, h: u16) -> String {
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, state, &Keymap::default(), &theme))
        .expect("test backend");
    let area = ratatui::layout::Rect::new(0, 0, w, h);
    let Some(panel) = ui::layout(area, state, &Keymap::default(), &theme).stress else {
        return String::new();
    };
    let buf = terminal.backend().buffer();
    let rows: Vec<String> = (panel.y..panel.bottom())
        .map(|y| {
            (panel.x..panel.right())
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect()
        })
        .collect();
    flat(&rows.join(" "))
}

#[test]
fn what_m_says_is_on_screen_at_80x24_behind_the_map_and_at_120x40_beside_it() {
    // 80×24, after an OOM: the map takes the panel's place, and its message
    // the status line's second row.
    let mut state = stress_screen();
    screen_text(&state, 80, 24);
    press(&mut state, KeyCode::Char('M'));
    let map = screen_text(&state, 80, 24);
    assert!(!map.contains(" Stress panel ") && map.contains(" Segments "));
    let said = "segment map in place of the panel (tensor list keys wait): M shows the panel";
    let status: Vec<&str> = map.lines().rev().take(2).collect();
    assert!(status.iter().any(|l| l.contains(said)), "{said}\n{map}");
    // So is what the panel's other keys say behind the map.
    press(&mut state, KeyCode::Char('H'));
    let map = screen_text(&state, 80, 24);
    assert!(
        map.contains("compare lists the free-block histogram"),
        "{map}"
    );
    // Back on the panel, the panel says it, and the status line is one row.
    press(&mut state, KeyCode::Char('M'));
    let panel = panel_on_screen(&state, 80, 24);
    assert!(
        panel.contains("panel shown: M shows the segment map (side by side from 120×40)"),
        "{panel}"
    );
    assert!(!screen_text(&state, 80, 24).contains("compare lists the"));
    // 120×40: the map is beside the panel, which says M has nothing to
    // switch.
    let mut state = stress_screen();
    screen_text(&state, 120, 40);
    press(&mut state, KeyCode::Char('M'));
    let panel = panel_on_screen(&state, 120, 40);
    let said = "the segment map is beside the panel at this size: M switches between them \
                below 120×40";
    assert!(panel.contains(said), "{said}\n{panel}");
}

#[test]
fn the_help_behind_the_segment_map_says_the_tensor_list_keys_wait_for_m() {
    let keymap = Keymap::default();
    let theme = Theme::colored();
    let mut state = stress_screen();
    screen_text(&state, 120, 30);
    press(&mut state, KeyCode::Char('M'));
    press(&mut state, KeyCode::Char('?'));
    let help = flat(&screen_text(&state, 120, 30));
    for what in [
        "select the previous tensor (not behind the map: M shows the list)",
        "free the selected tensor (not behind the map: M shows the list)",
    ] {
        assert!(help.contains(what), "{what}: {help}");
    }
    // On the panel the rows are as ever.
    let panel = flat(&help_screen(&keymap, &theme, (120, 90), true));
    assert!(panel.contains("free the selected tensor"), "{panel}");
    assert!(!panel.contains("not behind the map"), "{panel}");
}

#[test]
fn the_highlighted_words_are_exactly_the_reserved_but_unallocated_phrase() {
    let theme = Theme::colored();
    let lines = ui::highlighted_wrap(
        "a b 2.00 MiB is reserved by PyTorch but unallocated. c",
        "2.00 MiB is reserved by PyTorch but unallocated",
        12,
        theme.critical,
        theme.warning,
    );
    let marked: Vec<String> = lines
        .iter()
        .flat_map(|l| l.spans.iter())
        .filter(|s| s.style == theme.warning)
        .map(|s| s.content.to_string())
        .collect();
    assert_eq!(
        marked.join(" "),
        "2.00 MiB is reserved by PyTorch but unallocated."
    );
    assert!(lines.iter().all(|l| l.width() <= 12 || l.spans.len() == 1));
}

#[test]
fn figures_count_only_what_the_allocator_reports() {
    let f = Figures::of(&DeviceStats::default(), &[], 7);
    assert_eq!(f.driver_used, 7);
    assert_eq!(f.reserved, 0);
}

// ------------------------------------------------------ allocator settings

#[test]
fn shift_s_opens_the_settings_field_prefilled_with_the_active_settings() {
    let mut p = started(false, 80 * GIB);
    assert!(p.apply(StressAction::TypeSettings).is_empty());
    assert!(p.editing_settings() && p.editing() && !p.editing_size());
    assert_eq!(p.settings_text(), Some(""));
    type_text(&mut p, "expandable_segments:Tru");
    p.backspace();
    type_text(&mut p, "ue");
    assert_eq!(p.settings_text(), Some("expandable_segments:True"));
    p.cancel_input();
    assert!(!p.editing());
    assert_eq!(p.settings, "", "Esc changes nothing");
}

#[test]
fn invalid_settings_show_pytorchs_validation_text_and_keep_the_field_open() {
    let mut p = started(false, 80 * GIB);
    p.apply(StressAction::TypeSettings);
    type_text(&mut p, "max_split_size_mb:10");
    assert!(p.submit_input().is_empty());
    assert!(p.editing_settings(), "the field stays open");
    let why = p.message.clone().unwrap_or_default();
    assert!(
        why.contains("max_split_size_mb too small: 10 MiB, it must be at least 20 MiB"),
        "{why}"
    );
    p.modal = PanelModal::SettingsField("garbage:1".into());
    assert!(p.submit_input().is_empty());
    let why = p.message.clone().unwrap_or_default();
    assert!(
        why.contains("unrecognized allocator option 'garbage'"),
        "{why}"
    );
    assert!(!p.busy && p.pending_settings.is_none());
}

#[test]
fn stress_message_wraps_instead_of_being_cut_at_80_columns() {
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = with_tensors(2);
    state.stress.apply(StressAction::TypeSettings);
    type_text(&mut state.stress, "max_split_size_mb:10");
    assert!(state.stress.submit_input().is_empty());
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let screen = common::screen::text(terminal.backend().buffer());
    // The rule is the part to read: it ends the message, past 80 columns.
    let flat = screen.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("it must be at least 20 MiB"), "{screen}");
}

#[test]
fn the_settings_fields_hint_shortens_to_fit_80_columns_and_is_whole_where_it_fits() {
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = with_tensors(2);
    state.stress.apply(StressAction::TypeSettings);
    type_text(&mut state.stress, "expandable_segments:True");
    let field = |state: &AppState, w: u16, h: u16| {
        let terminal = common::screen::draw(state, &Theme::colored(), w, h);
        let screen = common::screen::text(terminal.backend().buffer());
        let line = screen
            .lines()
            .find(|l| l.contains("PYTORCH_CUDA_ALLOC_CONF="));
        let line = line.unwrap_or_default();
        // At 120×40 the panel sits left of the segment map.
        let line = line.split('│').next().unwrap_or_default();
        line.trim_end().to_string()
    };
    // A panel as wide as the terminal (below 120×40 it is not beside the map).
    let wide = field(&state, 119, 40);
    assert!(
        wide.ends_with("  Enter frees all, new allocator · Esc cancels"),
        "{wide}"
    );
    // At 80 columns a shorter hint, whole: not cut to "new allocator…".
    let narrow = field(&state, 80, 24);
    assert!(
        narrow.ends_with("  Enter frees all · Esc cancels"),
        "{narrow}"
    );
    // Beside the map at 120×40, shorter still, never cut.
    let beside = field(&state, 120, 40);
    assert!(beside.ends_with("  Enter applies"), "{beside}");
    // A longer text at 80 columns: a shorter hint, its key pairs whole
    // (it read "Enter applies · Esc", the pair cut at the edge).
    for _ in "True".chars() {
        state.stress.backspace();
    }
    type_text(&mut state.stress, "Maybe");
    let maybe = field(&state, 80, 24);
    assert!(
        maybe.contains("expandable_segments:Maybe▏  Enter")
            && (maybe.ends_with(" cancels") || maybe.ends_with("Enter applies")),
        "{maybe}"
    );
    // A text too long for any hint keeps the whole line for itself.
    type_text(&mut state.stress, ",max_split_size_mb:128");
    let long = field(&state, 80, 24);
    assert!(
        long.ends_with("max_split_size_mb:128▏") && !long.contains('…'),
        "{long}"
    );
}

#[test]
fn the_size_fields_hint_is_whole_or_shorter_never_cut_at_the_edge() {
    let mut p = started(false, 80 * GIB);
    assert!(p.apply(StressAction::TypeSize).is_empty());
    type_text(&mut p, "123456789012345678901234");
    let row = |w| {
        panel_text(&p, w, 12)
            .lines()
            .find(|l| l.contains("set size: "))
            .unwrap_or_default()
            .trim_end()
            .to_string()
    };
    let wide = row(70);
    assert!(wide.ends_with("  Enter sets · Esc cancels"), "{wide}");
    // 50 columns: "Enter sets · Esc c" at the edge before.
    let narrow = row(50);
    assert!(narrow.ends_with("1234▏  Enter sets"), "{narrow}");
    let narrower = row(40);
    assert!(narrower.ends_with("1234▏"), "{narrower}");
}

/// The settings of the newcomer's try: wider than an 80-column row.
const LONG_SETTINGS: &str = "expandable_segments:True,max_split_size_mb:128,\
garbage_collection_threshold:0.6,roundup_power2_divisions:4";

#[test]
fn a_field_wider_than_its_row_keeps_the_cursors_end_in_view() {
    let mut p = started(false, 80 * GIB);
    p.apply(StressAction::TypeSettings);
    type_text(&mut p, LONG_SETTINGS);
    for w in [40, 80, 120] {
        let row = panel_text(&p, w, 12)
            .lines()
            .find(|l| l.starts_with("PYTORCH_CUDA_ALLOC_CONF="))
            .unwrap_or_default()
            .trim_end()
            .to_string();
        // The start gives way ("…"), what is typed last stays, up to the
        // cursor: cut at the edge the row read "…max_split_size_mb:128,
        // garbage_…" at 80 columns.
        let shown = row
            .strip_prefix("PYTORCH_CUDA_ALLOC_CONF=…")
            .and_then(|r| r.strip_suffix('▏'))
            .unwrap_or_default();
        assert!(
            shown.len() > 10
                && LONG_SETTINGS.ends_with(shown)
                && row.chars().count() == usize::from(w),
            "{w}: {row}"
        );
    }
    p.cancel_input();
    // The size field too, where its 24 characters do not fit.
    p.apply(StressAction::TypeSize);
    type_text(&mut p, "123456789012345678901234");
    let row = panel_text(&p, 30, 12)
        .lines()
        .find(|l| l.starts_with("set size: "))
        .unwrap_or_default()
        .trim_end()
        .to_string();
    assert_eq!(row, "set size: …789012345678901234▏");
}

#[test]
fn the_notice_of_applied_settings_reads_them_whole_at_80_columns() {
    for (w, h) in [(80, 24), (120, 40)] {
        let mut state = AppState::new(StatusState::default());
        state.ui.stress_open = true;
        state.stress = with_tensors(2);
        state.stress.apply(StressAction::TypeSettings);
        type_text(&mut state.stress, LONG_SETTINGS);
        assert!(!state.stress.submit_input().is_empty());
        let freed = state.stress.tensors.iter().map(|t| t.address).collect();
        state.stress.on_result(answer(
            StressOutcome::Reconfigured {
                settings: LONG_SETTINGS.into(),
                freed,
            },
            0,
        ));
        let terminal = common::screen::draw(&state, &Theme::colored(), w, h);
        let screen = common::screen::text(terminal.backend().buffer());
        // The message's rows, the panel's left column (at 120×40 the
        // segment map is right of it), run together: the settings are
        // broken after a comma where they are, never cut with "…".
        let rows: Vec<&str> = screen
            .lines()
            .skip_while(|l| !l.starts_with("freed 2 tensors"))
            .take(3)
            .map(|l| l.split('│').next().unwrap_or_default().trim_end())
            .collect();
        let joined = rows.concat();
        assert!(
            joined.contains(&format!("fresh allocator with{LONG_SETTINGS}")),
            "{w}x{h}:\n{screen}"
        );
        assert!(!rows.iter().any(|r| r.contains('…')), "{w}x{h}:\n{screen}");
    }
}

#[test]
fn valid_settings_send_a_reconfigure_and_the_answer_clears_the_tensors() {
    let mut p = with_tensors(4);
    p.apply(StressAction::TypeSettings);
    type_text(&mut p, " expandable_segments:True,max_split_size_mb:128 ");
    let cmds = p.submit_input();
    assert_eq!(
        cmds,
        vec![StressCommand::Reconfigure {
            settings: "expandable_segments:True,max_split_size_mb:128".into()
        }]
    );
    assert!(!p.editing() && p.busy);
    let freed = p.tensors.iter().map(|t| t.address).collect();
    p.on_result(answer(
        StressOutcome::Reconfigured {
            settings: "expandable_segments:True,max_split_size_mb:128".into(),
            freed,
        },
        0,
    ));
    assert!(p.tensors.is_empty());
    assert_eq!(p.settings, "expandable_segments:True,max_split_size_mb:128");
    let said = p.message.clone().unwrap_or_default();
    assert!(said.contains("freed 4 tensors"), "{said}");
}

#[test]
fn settings_submitted_while_busy_wait_behind_the_earlier_keys() {
    let mut p = with_tensors(2);
    let cmds = p.apply(StressAction::FreeAll);
    assert_eq!(freed(&cmds).len(), 2);
    p.apply(StressAction::TypeSettings);
    assert!(p.editing_settings(), "the field opens at once while busy");
    type_text(&mut p, "expandable_segments:True");
    assert!(p.submit_input().is_empty(), "queued behind the free");
    let next = p.on_result(answer(StressOutcome::Freed(cmds_addresses(&cmds)), 0));
    assert_eq!(
        next,
        vec![StressCommand::Reconfigure {
            settings: "expandable_segments:True".into()
        }]
    );
}

#[test]
fn stress_message_says_one_tensor_not_tensors() {
    let mut p = with_tensors(1);
    let said = p.message.clone().unwrap_or_default();
    assert!(said.starts_with("allocated 1 tensor;"), "{said}");
    let only = p.tensors.first().cloned().expect("a tensor");
    let cmds = p.apply(StressAction::FreeAll);
    p.on_result(answer(StressOutcome::Freed(freed(&cmds)), 2 * MIB));
    let said = p.message.clone().unwrap_or_default();
    // One tensor freed is named: which one went, its size and address.
    assert!(
        said.starts_with(&format!("freed #{} (", only.id))
            && said.contains(&format!(" at {:#x});", only.address)),
        "{said}"
    );
    let mut p = with_tensors(3);
    let said = p.message.clone().unwrap_or_default();
    assert!(said.starts_with("allocated 3 tensors;"), "{said}");
    p.on_result(answer(
        StressOutcome::OutOfMemory {
            allocated: Vec::new(),
            message: "CUDA out of memory.".into(),
            reserved_but_unallocated: 0,
            room: OomRoom {
                tried: 20 * MIB,
                ..OomRoom::default()
            },
        },
        6 * MIB,
    ));
    let said = p.message.clone().unwrap_or_default();
    assert_eq!(said, "out of memory: 20.0 MiB could not be obtained");
    for (n, words) in [(1, "live 1 tensor, "), (2, "live 2 tensors, ")] {
        let mut state = AppState::new(StatusState::default());
        state.ui.stress_open = true;
        state.stress = with_tensors(n);
        let screen = screen_text(&state, 120, 40);
        assert!(screen.contains(words), "{words}: {screen}");
        assert!(!screen.contains("tensor(s)"), "{screen}");
    }
}

fn cmds_addresses(cmds: &[StressCommand]) -> Vec<u64> {
    freed(cmds)
}

/// Three 30 MiB tensors, one key press each; the panel's figures after.
fn allocate_three_30_mib(d: &mut Driven) {
    d.act(StressAction::SetSize(30 * MIB));
    d.panel.count_index = 0; // one tensor per press
    for _ in 0..3 {
        d.act(StressAction::Allocate);
    }
    assert_eq!(d.panel.tensors.len(), 3);
}

#[test]
fn expandable_segments_put_three_30_mib_tensors_in_one_mapped_range_of_20_mib_pages() {
    let cluster = sim();
    let mut d = Driven::start(&cluster);
    // Default settings: one 30 MiB segment per tensor (this also pays the
    // process's CUDA context, so driver-used deltas below are the
    // allocator's alone).
    allocate_three_30_mib(&mut d);
    assert_eq!(d.panel.figures.segments, 3);
    assert_eq!(d.panel.figures.reserved, 90 * MIB);

    d.act(StressAction::TypeSettings);
    type_text(&mut d.panel, "expandable_segments:True");
    let cmds = d.panel.submit_input();
    assert!(d.worker.send(cmds));
    d.receive();
    assert!(d.panel.tensors.is_empty(), "every tensor was freed");
    assert_eq!(d.panel.settings, "expandable_segments:True");
    assert_eq!(
        d.panel.figures.reserved, 0,
        "the old allocator held nothing"
    );
    let before = d.panel.figures.driver_used;

    // Expandable: one reserved range grows by 20 MiB pages. 30 MiB maps
    // 2 pages (40 MiB, 10 free at the end); the next 30 MiB uses those 10
    // and maps 1 page (60); the third maps 2 more (100 MiB, 10 free).
    allocate_three_30_mib(&mut d);
    assert_eq!(d.panel.figures.segments, 1, "one mapped range");
    let view = d.panel.view.as_ref().expect("a view");
    assert_eq!(view.layout.len(), 1);
    assert_eq!(d.panel.figures.reserved, 100 * MIB);
    assert_eq!(d.panel.figures.driver_used - before, 100 * MIB);
    assert_eq!(d.panel.figures.allocated, 90 * MIB);
}

#[test]
fn reconfiguring_frees_everything_so_nothing_is_left_when_the_worker_ends() {
    let cluster = sim();
    let free_before = free_bytes(&cluster);
    let mut d = Driven::start(&cluster);
    d.act(StressAction::Allocate);
    d.panel.pending_settings = Some("max_split_size_mb:128".into());
    d.act(StressAction::Reconfigure);
    assert_eq!(d.panel.settings, "max_split_size_mb:128");
    d.act(StressAction::Allocate);
    assert_eq!(
        d.panel.tensors.len(),
        COUNT_PRESETS[d.panel.count_index] as usize
    );
    drop(d);
    assert_eq!(free_bytes(&cluster), free_before);
}

#[test]
fn an_executor_without_a_reopen_refuses_to_reconfigure_and_keeps_its_tensors() {
    let cluster = sim();
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    );
    exec.execute(&StressCommand::Malloc {
        sizes: vec![MIB],
        cap: None,
    });
    let r = exec.execute(&StressCommand::Reconfigure {
        settings: "expandable_segments:True".into(),
    });
    assert!(matches!(r.outcome, StressOutcome::Failed { .. }));
    assert_eq!(exec.allocator().live_allocations().len(), 1);
}

#[test]
fn the_title_names_non_default_settings() {
    let mut p = started(false, 80 * GIB);
    p.settings = "expandable_segments:True".into();
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(100, 14)).expect("test backend");
    terminal
        .draw(|f| {
            f.render_widget(
                ui::StressPane::new(&p, &Keymap::default(), &theme),
                f.area(),
            )
        })
        .expect("draw");
    let top: String = (0..100)
        .map(|x| terminal.backend().buffer()[(x, 0)].symbol().to_string())
        .collect();
    assert!(top.contains("expandable_segments:True"), "{top}");
}

#[test]
fn the_settings_field_and_a_validation_error_render() {
    let mut p = with_tensors(2);
    p.settings = "expandable_segments:True".into();
    p.apply(StressAction::TypeSettings);
    type_text(&mut p, ",max_split_size_mb:10");
    assert!(p.submit_input().is_empty());
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(110, 12)).expect("test backend");
    terminal
        .draw(|f| {
            f.render_widget(
                ui::StressPane::new(&p, &Keymap::default(), &theme),
                f.area(),
            )
        })
        .expect("draw");
    insta::assert_snapshot!("stress_settings_field_110x12", terminal.backend());
}

// ------------------------------------------------------ transformer step

const KIB: u64 = 1 << 10;

fn malloc_sizes(cmds: &[StressCommand]) -> Vec<u64> {
    match cmds {
        [StressCommand::Malloc { sizes, .. }] => sizes.clone(),
        other => panic!("expected one Malloc, got {other:?}"),
    }
}

#[test]
fn r_cycles_through_three_patterns() {
    let mut p = started(false, 80 * GIB);
    let mut seen = vec![p.pattern];
    for _ in 0..3 {
        p.apply(StressAction::TogglePattern);
        seen.push(p.pattern);
    }
    assert_eq!(
        seen,
        [
            Pattern::Fixed,
            Pattern::RandomLogUniform,
            Pattern::TransformerStep,
            Pattern::Fixed
        ]
    );
}

#[test]
fn the_transformer_step_allocates_weights_once_then_each_layers_activations() {
    let mut p = started(false, 80 * GIB);
    p.pattern = Pattern::TransformerStep;
    let first = malloc_sizes(&p.apply(StressAction::Allocate));
    let layer_weights = [8 * KIB, 12 * MIB, 4 * MIB, 8 * KIB, 16 * MIB, 16 * MIB];
    let mut weights = vec![32 * MIB];
    for _ in 0..4 {
        weights.extend(layer_weights);
    }
    weights.push(8 * KIB);
    let layer_acts = [24 * MIB, 32 * MIB, 8 * MIB, 32 * MIB, 8 * MIB];
    let mut acts = vec![8 * MIB];
    for _ in 0..4 {
        acts.extend(layer_acts);
    }
    acts.extend([64 * MIB, 4]);
    assert_eq!(first[..weights.len()], weights[..]);
    assert_eq!(first[weights.len()..], acts[..]);
    assert_eq!(weights.iter().sum::<u64>(), 224 * MIB + 72 * KIB);
    assert_eq!(acts.iter().sum::<u64>(), 488 * MIB + 4);
    assert_eq!(p.transformer_steps, 0, "counted when it completes");

    let again = p.on_result(answer(StressOutcome::Allocated(Vec::new()), 0));
    assert!(again.is_empty());
    assert_eq!(p.transformer_steps, 1);
    let second = malloc_sizes(&p.apply(StressAction::Allocate));
    assert_eq!(second, acts, "the weights are allocated once");
    p.on_result(answer(StressOutcome::Allocated(Vec::new()), 0));
    assert_eq!(p.transformer_steps, 2);

    // A fresh allocator has no weights: the next step allocates them again.
    p.on_result(answer(
        StressOutcome::Reconfigured {
            settings: String::new(),
            freed: Vec::new(),
        },
        0,
    ));
    assert_eq!(p.transformer_steps, 0);
    assert_eq!(malloc_sizes(&p.apply(StressAction::Allocate)), first);
}

#[test]
fn a_refused_transformer_step_does_not_count() {
    let mut p = started(true, 400 * MIB); // cap 200 MiB: less than one step
    p.pattern = Pattern::TransformerStep;
    assert!(p.apply(StressAction::Allocate).is_empty());
    assert_eq!(p.transformer_steps, 0);
}

#[test]
fn a_transformer_step_refused_partway_is_said_refused_and_not_counted() {
    let mut p = started(false, 80 * GIB);
    p.pattern = Pattern::TransformerStep;
    let first = malloc_sizes(&p.apply(StressAction::Allocate));
    p.on_result(answer(StressOutcome::Allocated(Vec::new()), 0));
    assert_eq!(p.transformer_steps, 1);
    let step = malloc_sizes(&p.apply(StressAction::Allocate));
    let asked = step.len();
    // The worker's allocator ran out after 5 of the step's tensors.
    p.on_result(answer(
        StressOutcome::OutOfMemory {
            allocated: (0..5).map(tensor).collect(),
            message: "CUDA out of memory.".to_string(),
            reserved_but_unallocated: 0,
            room: OomRoom {
                tried: 32 * MIB,
                request: 32 * MIB,
                device_free: MIB,
                reserved: 0,
                others: OtherProcesses::default(),
            },
        },
        0,
    ));
    assert_eq!(p.transformer_steps, 1, "the refused step is not counted");
    let said = p.message.clone().unwrap_or_default();
    assert!(
        said.starts_with(&format!(
            "transformer step #2 refused, not counted (5 of {asked} tensors allocated; the \
             next Allocate asks for the other {}): out of memory after 5 tensors: 32.0 MiB \
             more could not be obtained",
            asked - 5
        )),
        "{said}"
    );
    // The next Allocate resumes the step: only the tensors it lacks.
    let rest = malloc_sizes(&p.apply(StressAction::Allocate));
    assert_eq!(rest, step[5..], "the 5 obtained are not asked for again");
    // The cap's refusal likewise; the settings line still names step #2.
    p.on_result(answer(
        StressOutcome::CapRefused {
            allocated: Vec::new(),
            message: "cap 200 MiB refused 32 MiB".to_string(),
        },
        0,
    ));
    assert_eq!(p.transformer_steps, 1);
    let said = p.message.clone().unwrap_or_default();
    assert!(
        said.contains(&format!("refused, not counted (5 of {asked} ")),
        "{said}"
    );
    assert!(said.ends_with("cap 200 MiB refused 32 MiB"), "{said}");
    assert!(panel_row(&p, 110, 1).contains("pattern transformer step #2"));
    // A step that completes is said as done and counted.
    assert_eq!(malloc_sizes(&p.apply(StressAction::Allocate)), step[5..]);
    p.on_result(answer(StressOutcome::Allocated(Vec::new()), 0));
    assert_eq!(p.transformer_steps, 2);
    let said = p.message.clone().unwrap_or_default();
    assert!(
        said.starts_with(&format!(
            "transformer step #2 done (the {} tensors it lacked): allocated",
            asked - 5
        )),
        "{said}"
    );
    // The step after it is whole again.
    assert_eq!(malloc_sizes(&p.apply(StressAction::Allocate)), step);
    assert!(first.len() > asked, "the first step carried the weights");
}

#[test]
fn a_refused_transformer_step_starts_over_once_what_it_obtained_is_freed() {
    let mut p = started(false, 80 * GIB);
    p.pattern = Pattern::TransformerStep;
    let first = malloc_sizes(&p.apply(StressAction::Allocate));
    p.on_result(answer(
        StressOutcome::CapRefused {
            allocated: (0..3).map(tensor).collect(),
            message: "cap refused".to_string(),
        },
        0,
    ));
    assert_eq!(malloc_sizes(&p.apply(StressAction::Allocate)), first[3..]);
    p.on_result(answer(
        StressOutcome::CapRefused {
            allocated: Vec::new(),
            message: "cap refused".to_string(),
        },
        0,
    ));
    // Freeing the step's first tensor leaves no step to resume.
    let freed = p.tensors[0].address;
    p.apply(StressAction::FreeOldest);
    p.on_result(answer(StressOutcome::Freed(vec![freed]), 0));
    assert_eq!(p.tensors.len(), 2);
    assert_eq!(malloc_sizes(&p.apply(StressAction::Allocate)), first);
}

#[test]
fn repeated_transformer_steps_grow_the_cache_on_the_simulation() {
    let cluster = sim();
    let mut d = Driven::start(&cluster);
    d.act(StressAction::TogglePattern);
    d.act(StressAction::TogglePattern);
    assert_eq!(d.panel.pattern, Pattern::TransformerStep);
    let mut reserved = Vec::new();
    for _ in 0..3 {
        d.act(StressAction::Allocate);
        reserved.push(d.panel.figures.reserved);
    }
    assert_eq!(d.panel.tensors.len(), 26 + 3 * 23);
    assert!(reserved.windows(2).all(|w| w[1] > w[0]), "{reserved:?}");
    // Drop the activations of the first two steps (as backward would):
    // the cache keeps them reserved as free blocks for the next step.
    let acts: Vec<u64> = d.panel.tensors[26..26 + 2 * 23]
        .iter()
        .map(|t| t.address)
        .collect();
    assert!(d.worker.send(vec![StressCommand::Free { addresses: acts }]));
    d.panel.busy = true;
    d.receive();
    assert_eq!(d.panel.figures.reserved, reserved[2], "freed, still cached");
    assert!(d.panel.figures.inactive_split_bytes > 0 || d.fully_free_segment_bytes() > 0);
}

/// The text of row `y` of a rendered panel.
fn panel_row(p: &StressPanel, width: u16, y: u16) -> String {
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(width, 12)).expect("test backend");
    terminal
        .draw(|f| f.render_widget(ui::StressPane::new(p, &Keymap::default(), &theme), f.area()))
        .expect("draw");
    (0..width)
        .map(|x| terminal.backend().buffer()[(x, y)].symbol().to_string())
        .collect()
}

#[test]
fn the_settings_line_names_the_transformer_step_to_come() {
    let mut p = started(false, 80 * GIB);
    p.pattern = Pattern::TransformerStep;
    p.transformer_steps = 1;
    let line = panel_row(&p, 110, 1);
    assert!(line.contains("pattern transformer step #2"), "{line}");
}

// ------------------------------------------------ histogram in compare

fn with_buckets(buckets: &[(usize, u64, u64)]) -> Figures {
    let mut f = Figures::default();
    for &(i, count, bytes) in buckets {
        f.free_histogram[i] = (count, bytes);
    }
    f
}

#[test]
fn histogram_rows_list_only_buckets_where_a_or_b_has_free_blocks() {
    // Bucket 0: ≤ 512 B; 11: ≤ 1 MiB; 21: ≥ 1 GiB.
    let a = with_buckets(&[(0, 3, 1536), (11, 1, MIB)]);
    let b = with_buckets(&[(11, 5, 5 * MIB), (21, 1, 2 * GIB)]);
    let rows = histogram_rows(&a, &b);
    assert_eq!(
        rows,
        vec![
            HistogramRow {
                bound: 512,
                open_ended: false,
                a_count: 3,
                a_bytes: 1536,
                b_count: 0,
                b_bytes: 0,
            },
            HistogramRow {
                bound: MIB,
                open_ended: false,
                a_count: 1,
                a_bytes: MIB,
                b_count: 5,
                b_bytes: 5 * MIB,
            },
            HistogramRow {
                bound: GIB,
                open_ended: true,
                a_count: 0,
                a_bytes: 0,
                b_count: 1,
                b_bytes: 2 * GIB,
            },
        ]
    );
    assert_eq!((rows[0].count_delta(), rows[0].bytes_delta()), (-3, -1536));
    assert_eq!(
        (rows[1].count_delta(), rows[1].bytes_delta()),
        (4, 4 * i128::from(MIB))
    );
    assert!(histogram_rows(&Figures::default(), &Figures::default()).is_empty());
}

#[test]
fn figures_take_the_histogram_of_the_layout() {
    let cluster = sim();
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    );
    let r = exec.execute(&StressCommand::Malloc {
        sizes: vec![MIB, MIB],
        cap: None,
    });
    let first = match &r.outcome {
        StressOutcome::Allocated(t) => t[0].address,
        other => panic!("{other:?}"),
    };
    let r = exec.execute(&StressCommand::Free {
        addresses: vec![first],
    });
    let f = Figures::of(&r.stats, &r.layout, r.driver_used);
    assert_eq!(f.free_histogram[11], (1, MIB), "one free 1 MiB block");
    assert_eq!(
        f.free_histogram.iter().map(|b| b.0).sum::<u64>(),
        1,
        "and nothing else"
    );
}

#[test]
fn shift_h_toggles_the_histogram_even_while_busy() {
    let mut p = with_tensors(2);
    p.apply(StressAction::MarkCompare);
    p.apply(StressAction::MarkCompare);
    assert!(p.histogram_compare().is_none(), "off by default");
    p.apply(StressAction::FreeAll);
    assert!(p.busy);
    p.apply(StressAction::ToggleHistogram);
    assert!(p.queued.is_empty(), "a display toggle does not wait");
    assert_eq!(p.histogram_compare(), Some(Vec::new()));
}

#[test]
fn the_compare_view_lists_the_free_block_histogram_difference() {
    let cluster = sim();
    let mut d = Driven::start(&cluster);
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 10).unwrap();
    d.act(StressAction::Allocate); // ten 1 MiB tensors, two per 2 MiB segment
    d.act(StressAction::MarkCompare);
    d.act(StressAction::FreeEveryOther);
    d.act(StressAction::EmptyCache);
    d.act(StressAction::MarkCompare);
    d.act(StressAction::ToggleHistogram);
    let rows = d.panel.histogram_compare().expect("both marks");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].bound,
            rows[0].a_count,
            rows[0].b_count,
            rows[0].b_bytes
        ),
        (MIB, 0, 5, 5 * MIB)
    );
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(120, 16)).expect("test backend");
    terminal
        .draw(|f| {
            f.render_widget(
                ui::StressPane::new(&d.panel, &Keymap::default(), &theme),
                f.area(),
            )
        })
        .expect("draw");
    insta::assert_snapshot!("stress_compare_histogram_120x16", terminal.backend());
}

// ------------------------------------------------------------ verify

#[test]
fn verify_needs_tensors_and_reports_intact_or_the_first_bad_offset() {
    let mut p = started(false, 80 * GIB);
    assert!(p.apply(StressAction::Verify).is_empty());
    assert_eq!(p.message.as_deref(), Some("no live tensors to verify"));
    let mut p = with_tensors(3);
    assert_eq!(p.apply(StressAction::Verify), vec![StressCommand::Verify]);
    p.on_result(answer(
        StressOutcome::Verified {
            checked: 3,
            bad: None,
        },
        6 * MIB,
    ));
    let said = p.message.clone().unwrap_or_default();
    assert!(said.contains("verified 3 tensors"), "{said}");
    p.apply(StressAction::Verify);
    p.on_result(answer(
        StressOutcome::Verified {
            checked: 1,
            bad: Some(vramtop::app::stress::BadTensor {
                address: tensor(1).address,
                offset: 4096,
            }),
        },
        6 * MIB,
    ));
    let said = p.message.clone().unwrap_or_default();
    assert!(said.contains("tensor #2"), "{said}");
    assert!(said.contains("offset 4096"), "{said}");
}

#[test]
fn an_oom_on_the_simulated_gpu_names_its_processes_as_pytorch_does() {
    let cluster = sim();
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let me = memory.pid();
    let mut exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    );
    // Another process with a context and 1 GiB of segments.
    let mut other: SimMemory = cluster.new_process(0, "python other.py");
    let other_pid = other.pid();
    vramtop::alloc::DeviceMemory::malloc(&mut other, 1 << 30).expect("fits");
    let r = exec.execute(&StressCommand::Malloc {
        sizes: vec![MIB, 1 << 40],
        cap: None,
    });
    let StressOutcome::OutOfMemory { message, .. } = r.outcome else {
        panic!("{:?}", r.outcome)
    };
    // Each process once, by pid in NVML's (the sampler's) order: this
    // one in PyTorch's words for its own, with its context and segment.
    assert!(me < other_pid);
    assert!(
        message.contains(&format!(
            "Including non-PyTorch memory, this process has 502.00 MiB memory in use. \
             Process {other_pid} has 1.49 GiB memory in use. Of the allocated memory"
        )),
        "{message}"
    );
}

#[test]
fn the_simulated_worker_fills_each_tensor_with_its_id_and_verify_finds_a_foreign_write() {
    let cluster = sim();
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    )
    .with_kernels();
    let r = exec.execute(&StressCommand::Malloc {
        sizes: vec![MIB, 3 * MIB, 5000],
        cap: None,
    });
    let StressOutcome::Allocated(new) = r.outcome else {
        panic!("{:?}", r.outcome)
    };
    let r = exec.execute(&StressCommand::Verify);
    assert_eq!(
        r.outcome,
        StressOutcome::Verified {
            checked: 3,
            bad: None
        }
    );
    // Another process overwrites tensor #2 with seed 99.
    let mut other: SimMemory = cluster.new_process(0, "intruder");
    vramtop::device::Kernels::fill(&mut other, new[1].address, 3 * MIB, 99).expect("fills");
    let r = exec.execute(&StressCommand::Verify);
    let StressOutcome::Verified {
        checked: 1,
        bad: Some(bad),
    } = r.outcome
    else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!(bad.address, new[1].address);
    let expected = (0..3 * MIB)
        .find(|&o| vramtop::device::pattern_byte(o, 2) != vramtop::device::pattern_byte(o, 99));
    assert_eq!(Some(bad.offset), expected);
    cluster.end_process(0, other.pid());
}

#[test]
fn an_executor_without_kernels_refuses_verify() {
    let cluster = sim();
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let mut exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    );
    let r = exec.execute(&StressCommand::Verify);
    assert!(matches!(r.outcome, StressOutcome::Failed { .. }));
}

#[test]
fn v_on_the_simulation_worker_verifies_the_live_tensors() {
    let cluster = sim();
    let mut d = Driven::start(&cluster);
    d.act(StressAction::Allocate);
    d.act(StressAction::FreeOldest);
    d.act(StressAction::Verify);
    let said = d.panel.message.clone().unwrap_or_default();
    assert!(said.contains("verified 9 tensors"), "{said}");
}

// ------------------------------------------------------------- scenarios

/// A panel and an executor (with reopen) on a simulated GPU, driven
/// synchronously: every command is answered before the next key.
/// The explanation of the scenario loaded into `p`.
fn loaded_explanation(p: &StressPanel) -> String {
    p.scenario
        .as_ref()
        .expect("loaded")
        .scenario
        .explanation
        .clone()
}

fn scenario_rig() -> (StressPanel, PanelExecutor<SimMemory>, SimCluster) {
    let cluster = sim();
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let handle = memory.clone();
    let exec = StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        false,
    )
    .with_reopen(move || Ok(handle.clone()));
    let exec = PanelExecutor::new(exec);
    let mut panel = StressPanel::default();
    panel.on_result(exec.started());
    (panel, exec, cluster)
}

#[test]
fn every_builtin_scenario_reaches_vramtop_scenarios_figures_step_by_step_in_the_panel() {
    for (i, name) in vramtop::scenario::builtin_names().into_iter().enumerate() {
        let scenario = vramtop::scenario::builtin(name)
            .expect("exists")
            .expect("parses");
        let expected = vramtop::scenario::run(&scenario).expect("runs");
        let (mut p, mut exec, _cluster) = scenario_rig();
        drive(&mut p, &mut exec, StressAction::LoadScenario(i));
        assert_eq!(
            p.device,
            PanelDevice::Scenario {
                capacity: scenario.device_memory,
                context: scenario.variants[0].external_use(scenario.context)
            },
            "{name}: the scenario's own device"
        );
        for (v, want) in expected.variants.iter().enumerate() {
            if v > 0 {
                drive(&mut p, &mut exec, StressAction::ScenarioNextVariant);
            }
            assert_eq!(p.settings, want.alloc_conf, "{name}/{}", want.variant);
            assert_eq!(p.figures.reserved, 0, "{name}/{}: rewound", want.variant);
            for step in &want.steps {
                drive(&mut p, &mut exec, StressAction::ScenarioStep);
                let at = format!(
                    "{name}/{} step {} ({})",
                    want.variant, step.step, step.label
                );
                assert_eq!(p.figures.allocated, step.allocated, "{at}: allocated");
                assert_eq!(p.figures.reserved, step.reserved, "{at}: reserved");
                assert_eq!(p.figures.driver_used, step.driver_used, "{at}: driver used");
                assert_eq!(p.figures.segments, step.segments as u64, "{at}: segments");
                assert_eq!(
                    p.figures.largest_free_block, step.largest_free_block,
                    "{at}: largest free block"
                );
                assert_eq!(p.oom.is_some(), step.oom.is_some(), "{at}: OOM");
                // PyTorch's message itself, its process lines included.
                if let (Some(oom), Some(want)) = (&p.oom, &step.oom) {
                    assert_eq!(&oom.message, want, "{at}: the OOM message");
                }
            }
            assert_eq!(
                p.oom.is_some(),
                want.summary.oom,
                "{name}/{}: the same outcome",
                want.variant
            );
        }
    }
}

#[test]
fn fragmentation_oom_runs_out_of_memory_in_the_panel_at_step_4_and_u_goes_back_to_the_gpu() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    let run = p.scenario.as_ref().expect("loaded");
    assert_eq!(run.done, 4, "stopped at the OOM step");
    assert!(!run.running);
    let oom = p.oom.as_ref().expect("out of memory");
    assert!(
        oom.message
            .contains("GPU 0 has a total capacity of 8.00 GiB"),
        "{}",
        oom.message
    );
    let row = panel_row(&p, 120, 0);
    assert!(row.contains("scenario device: simulated 8.00 GiB"), "{row}");
    // The panes split the scenario's 8 GiB device, not the 80 GiB GPU.
    let view = p.view.as_ref().expect("a view");
    let mut gpu = vramtop::device::GpuSample::unknown(0, "Simulated H100 80GB");
    gpu.memory_total = Some(80 * GIB);
    gpu.memory_used = Some(GIB / 2);
    let split = vramtop::app::state::breakdown(&gpu, Some(view)).expect("known");
    assert_eq!(split.total, 8 * GIB);
    assert_eq!(split.reserved_over_used, None, "consistent");
    assert_eq!(
        split.allocated + split.cached_free + split.context_and_other,
        p.figures.driver_used
    );
    drive(&mut p, &mut exec, StressAction::UnloadScenario);
    assert_eq!(p.device, PanelDevice::Gpu);
    assert!(p.scenario.is_none() && p.tensors.is_empty() && p.oom.is_none());
    assert!(panel_row(&p, 120, 0).contains("GPU 0 · no cap (simulated)"));
}

#[test]
fn stress_panel_keeps_scenario_line_after_oom_at_80x24() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    assert!(p.oom.is_some() && !p.oom_advice().is_empty());
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = p;
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let screen = common::screen::text(terminal.backend().buffer());
    // The OOM message and its advice share the panel with the scenario
    // line, which says where the run stopped, and the selected tensor: the
    // message is its one-row summary, which keeps its figures.
    // 8 GiB less the 6,000 MiB reserved and the simulated context.
    let free = 8 * GIB - 6000 * MIB - vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD;
    let free_said = format!("{:.2} GiB was free", free as f64 / GIB as f64);
    for part in [
        "scenario fragmentation_oom",
        "step 4/4",
        "CUDA OOM: tried 2.00 GiB",
        free_said.as_str(),
        "1.46 GiB reserved but unallocated",
        "empty_cache() could release",
    ] {
        assert!(screen.contains(part), "{part}:\n{screen}");
    }
}

/// The dashboard on [`sim`] after the panel ran dataloader_workers' first
/// variant to its OOM (eight worker contexts of 500 MiB beside the main
/// process on a 16 GiB device), each command answered at once, then a
/// sample taken: what the screen shows after `n`, Enter and `g`.
fn dataloader_workers_oom() -> AppState {
    let cluster = sim();
    let mut telemetry = cluster.telemetry();
    let mut state = AppState::new(StatusState {
        backend: "sim".into(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    // The panel's executor, which moves to a scenario's device on load.
    let memory = cluster.new_process(0, STRESS_COMMAND);
    let handle = memory.clone();
    let mut exec = PanelExecutor::new(
        StressExecutor::new(
            CachingAllocator::new(memory, 0, AllocatorConfig::default()),
            false,
        )
        .with_reopen(move || Ok(handle.clone())),
    );
    next_sim_sample(&mut state, &cluster, &mut telemetry);
    assert_eq!(press(&mut state, KeyCode::F(2)), Effect::Redraw);
    on_stress_result(&mut state, exec.started());
    for action in [
        StressAction::LoadScenario(builtin_index("dataloader_workers")),
        StressAction::ScenarioRun,
    ] {
        let mut cmds = state.stress.apply(action);
        // A running scenario sends its next step on each answer.
        while let [cmd] = &cmds[..] {
            cmds = match on_stress_result(&mut state, exec.execute(cmd)) {
                Effect::Stress(next) => next,
                _ => Vec::new(),
            };
        }
    }
    next_sim_sample(&mut state, &cluster, &mut telemetry);
    state
}

#[test]
fn the_oom_summary_names_the_devices_other_processes_and_their_bytes() {
    let state = dataloader_workers_oom();
    let oom = state
        .stress
        .oom
        .as_ref()
        .expect("workers_touch_cuda runs out of memory");
    assert_eq!(
        oom.room.others,
        OtherProcesses {
            count: 8,
            bytes: 8 * 500 * MIB
        },
        "the eight worker contexts, not the main process"
    );
    // Wide, PyTorch's words and the processes in full; narrower, the
    // short forms keep the processes on the row.
    let (wide, _) = vramtop::ui::oom_summary(oom, 200, 1);
    let wide = wide.join("\n");
    assert!(wide.starts_with("CUDA out of memory: tried "), "{wide}");
    assert!(
        wide.ends_with("reserved but unallocated · 8 other processes 3.91 GiB"),
        "{wide}"
    );
    // At 80×24 one row, in the short forms; at 120×40, beside the segment
    // map, two rows broken between figures, in full.
    for (w, h, rows) in [
        (
            80,
            24,
            &["CUDA OOM: tried 1.50 GiB · 620 MiB free · 0 B unalloc · 8 others 3.91 GiB"][..],
        ),
        (
            120,
            40,
            &[
                "CUDA out of memory: tried 1.50 GiB · 620 MiB was free",
                "0 B reserved but unallocated · 8 other processes 3.91 GiB",
            ],
        ),
    ] {
        let terminal = common::screen::draw(&state, &Theme::colored(), w, h);
        let screen = common::screen::text(terminal.backend().buffer());
        let lines: Vec<&str> = screen.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("CUDA "))
            .unwrap_or_else(|| panic!("{w}×{h}: no summary:\n{screen}"));
        for (i, row) in rows.iter().enumerate() {
            let shown = lines.get(at + i).copied().unwrap_or_default();
            assert!(shown.starts_with(row), "{w}×{h} row {i}: {shown}\n{screen}");
        }
    }
    // Narrower than its shortest wording, the one row is cut at its end
    // with the mark, as the OOM message's rows are, between figures: not
    // "· 8 …", a count without what it counts.
    let narrow = panel_text(&state.stress, 60, 10);
    let row = narrow
        .lines()
        .find(|l| l.starts_with("CUDA OOM"))
        .unwrap_or_default()
        .trim_end();
    assert!(
        row == "CUDA OOM: tried 1.50 GiB · 620 MiB free · 0 B unalloc …",
        "{row}\n{narrow}"
    );
    insta::assert_snapshot!("stress_dataloader_oom_80x24", screen_text(&state, 80, 24));
    insta::assert_snapshot!("stress_dataloader_oom_120x40", screen_text(&state, 120, 40));
}

#[test]
fn the_oom_summary_says_nothing_of_other_processes_where_there_are_none() {
    // fragmentation_oom's device has its main process alone.
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    let oom = p
        .oom
        .as_ref()
        .expect("fragmentation_oom runs out of memory");
    assert_eq!(oom.room.others, OtherProcesses::default());
    for width in [60, 80, 200] {
        let (summary, _) = vramtop::ui::oom_summary(oom, width, 1);
        let summary = summary.join("\n");
        assert!(!summary.contains("other"), "{width}: {summary}");
        assert!(
            summary.contains("reserved but unallocated"),
            "{width}: {summary}"
        );
    }
    // The simulated GPU with the panel's process alone on GPU 0: the same.
    let state = stress_screen();
    let oom = state.stress.oom.as_ref().expect("oom");
    assert_eq!(oom.room.others, OtherProcesses::default());
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let screen = common::screen::text(terminal.backend().buffer());
    let row = screen
        .lines()
        .find(|l| l.starts_with("CUDA OOM"))
        .unwrap_or_default();
    assert_eq!(
        row.trim_end(),
        "CUDA OOM: tried 1.00 GiB · 514 MiB was free · 5.00 MiB reserved but unallocated"
    );
}

#[test]
fn stress_status_line_names_the_step_and_run_keys_while_a_scenario_is_loaded_at_80x24() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = p.clone();
    let status = |state: &AppState| {
        let terminal = common::screen::draw(state, &Theme::colored(), 80, 24);
        let screen = common::screen::text(terminal.backend().buffer());
        let hints = screen.lines().find(|l| l.contains("q quit"));
        hints.unwrap_or_default().to_string()
    };
    let before = status(&state);
    assert!(!before.contains(". step"), "no scenario to step: {before}");
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    state.stress = p;
    let loaded = status(&state);
    assert!(
        loaded.contains(". step") && loaded.contains("g run"),
        "{loaded}"
    );
}

#[test]
fn stress_scenario_line_says_what_the_next_step_does_and_that_the_run_finished() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    let screen = |p: &StressPanel| {
        let mut state = AppState::new(StatusState::default());
        state.ui.stress_open = true;
        state.stress = p.clone();
        let terminal = common::screen::draw(&state, &Theme::colored(), 120, 40);
        common::screen::text(terminal.backend().buffer())
    };
    drive(&mut p, &mut exec, StressAction::ScenarioStep);
    let after_one = screen(&p);
    // The step frees the long sequences' tensors: "next batch done" read
    // as if the next batch had already run.
    assert!(
        after_one.contains("next free the long batch (its 200 MiB blocks stay cached)"),
        "{after_one}"
    );
    assert!(!after_one.contains("batch done"), "{after_one}");
    // The expandable_segments variant runs every step without an OOM.
    drive(&mut p, &mut exec, StressAction::ScenarioNextVariant);
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    let done = screen(&p);
    let lines: Vec<&str> = done.lines().collect();
    let at = lines.iter().position(|l| l.contains("step 4/4"));
    let progress = at.map(|i| lines[i..(i + 2).min(lines.len())].join("\n"));
    let progress = progress.unwrap_or_default();
    assert!(progress.contains("finished"), "{done}");
    assert!(
        !progress.contains("paused") && !done.contains("next finished"),
        "{done}"
    );
}

#[test]
fn stress_scenario_line_says_a_last_step_that_ran_out_of_memory_failed_not_finished() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    // The default variant's fourth and last step (a 2 GiB tensor) runs
    // out of memory.
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    for (w, h) in [(80, 24), (120, 40)] {
        let mut state = AppState::new(StatusState::default());
        state.ui.stress_open = true;
        state.stress = p.clone();
        let terminal = common::screen::draw(&state, &Theme::colored(), w, h);
        let screen = common::screen::text(terminal.backend().buffer());
        let lines: Vec<&str> = screen.lines().collect();
        let at = lines.iter().position(|l| l.contains("step 4/4"));
        let progress = at.map(|i| lines[i..(i + 2).min(lines.len())].join(" "));
        let progress = progress.unwrap_or_default();
        assert!(
            progress.contains("failed: out of memory (2.00 GiB asked)"),
            "{w}x{h}:\n{screen}"
        );
        assert!(!progress.contains("finished"), "{w}x{h}:\n{screen}");
    }
    // Stepping past the end says where the run stopped, not that it finished.
    assert!(p.apply(StressAction::ScenarioStep).is_empty());
    let message = p.message.clone().unwrap_or_default();
    assert!(
        message.contains("stopped at step 4/4 (out of memory)"),
        "{message}"
    );
    assert!(!message.contains("finished"), "{message}");
    // A rewind forgets the failure.
    drive(&mut p, &mut exec, StressAction::ScenarioRewind);
    assert_eq!(p.scenario.as_ref().and_then(|r| r.stopped.clone()), None);
}

#[test]
fn stress_panel_calls_the_scenarios_context_context_and_other_as_the_breakdown_does() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    let message = p.message.clone().unwrap_or_default();
    let context = vramtop::alloc::human_bytes(vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD);
    assert!(
        message.contains(&format!("({context} of it context & other)")),
        "{message}"
    );
}

#[test]
fn compact_breakdown_legend_keeps_context_and_other_and_free_on_one_80_column_row() {
    let mut state = stress_screen();
    state.status.banner = Some("nvml is not available: showing 1 simulated GPU".into());
    // Every figure as wide as format::bytes writes one: allocated
    // 79.0 GiB, cached 5.00 MiB, then 1.04 GiB and 1.46 GiB.
    let gpu = state.gpus.first_mut().expect("one GPU");
    let reserved = gpu.allocator.as_ref().expect("the stress view").reserved();
    if let vramtop::device::GpuReading::Ok(s) = &mut gpu.reading {
        s.memory_used = Some(reserved + 1040 * MIB);
        s.memory_total = Some(reserved + 1040 * MIB + 1460 * MIB);
        // The simulated driver keeps nothing for itself.
        s.memory_free = Some(1460 * MIB);
    }
    let terminal = common::screen::draw(&state, &Theme::colored(), 80, 24);
    let screen = common::screen::text(terminal.backend().buffer());
    let legend = screen
        .lines()
        .skip_while(|l| !l.contains(" Memory breakdown "))
        .nth(2)
        .unwrap_or_default();
    for part in ["allocated", "unalloc", "context & other", "free"] {
        assert!(legend.contains(part), "{part}: {legend}\n{screen}");
    }
}

/// Loads the built-in scenario `name` into the panel.
fn load_builtin(p: &mut StressPanel, exec: &mut PanelExecutor<SimMemory>, name: &str) {
    drive(p, exec, StressAction::LoadScenario(builtin_index(name)));
}

/// Applies `action` and answers every command it leads to (a running
/// scenario sends one per answer); the reserved figure after each answer.
fn drive(
    p: &mut StressPanel,
    exec: &mut PanelExecutor<SimMemory>,
    action: StressAction,
) -> Vec<u64> {
    let mut reserved = Vec::new();
    let mut cmds = p.apply(action);
    while let [cmd] = &cmds[..] {
        let r = exec.execute(cmd);
        cmds = p.on_result(r);
        reserved.push(p.figures.reserved);
    }
    reserved
}

fn builtin_index(name: &str) -> usize {
    vramtop::scenario::builtin_names()
        .iter()
        .position(|n| *n == name)
        .expect("built-in")
}

#[test]
fn stepping_a_scenario_reaches_the_engines_reserved_figures_and_rewind_returns_to_zero() {
    let name = "empty_cache_live_block";
    let expected = vramtop::scenario::run(
        &vramtop::scenario::builtin(name)
            .expect("exists")
            .expect("parses"),
    )
    .expect("runs");
    let expected = &expected.variants[0].steps;
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, name);
    assert_eq!(p.figures.reserved, 0);
    let run = p.scenario.as_ref().expect("loaded");
    assert_eq!(run.total(), expected.len());
    for want in expected {
        let got = drive(&mut p, &mut exec, StressAction::ScenarioStep);
        assert_eq!(
            got,
            vec![want.reserved],
            "step {} ({})",
            want.step,
            want.label
        );
        assert_eq!(p.figures.allocated, want.allocated, "step {}", want.step);
    }
    // Past the end: nothing is sent.
    assert!(p.apply(StressAction::ScenarioStep).is_empty());
    assert!(p.message.as_deref().unwrap_or("").contains("finished"));

    // Rewind to step 0 with nothing reserved, then run it all: one step per
    // answer, the same figures in order.
    drive(&mut p, &mut exec, StressAction::ScenarioRewind);
    assert_eq!(p.figures.reserved, 0);
    assert!(p.tensors.is_empty());
    assert_eq!(p.scenario.as_ref().map(|r| r.done), Some(0));
    let all = drive(&mut p, &mut exec, StressAction::ScenarioRun);
    let want: Vec<u64> = expected.iter().map(|s| s.reserved).collect();
    assert_eq!(all, want);
    assert!(!p.scenario.as_ref().expect("loaded").running);
    drive(&mut p, &mut exec, StressAction::ScenarioRewind);
    assert_eq!(p.figures.reserved, 0);
}

#[test]
fn next_variant_applies_its_alloc_conf_through_reconfigure() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    let scenarios: Vec<_> = vramtop::scenario::builtin_names()
        .into_iter()
        .map(|n| {
            vramtop::scenario::builtin(n)
                .expect("exists")
                .expect("parses")
        })
        .collect();
    let (i, s) = scenarios
        .iter()
        .enumerate()
        .find(|(_, s)| s.variants.len() > 1)
        .expect("a built-in with variants");
    drive(&mut p, &mut exec, StressAction::LoadScenario(i));
    assert_eq!(p.settings, s.variants[0].alloc_conf);
    let cmds = p.apply(StressAction::ScenarioNextVariant);
    assert_eq!(
        cmds,
        vec![StressCommand::UseScenarioDevice {
            capacity: s.device_memory,
            processes: s.variants[1].processes(s.context),
            settings: s.variants[1].alloc_conf.clone()
        }]
    );
    p.on_result(exec.execute(&cmds[0]));
    assert_eq!(p.settings, s.variants[1].alloc_conf);
    assert_eq!(p.scenario.as_ref().map(|r| r.variant), Some(1));
}

#[test]
fn a_scenario_step_that_runs_out_of_memory_stops_the_run_with_pytorchs_message() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "empty_cache_live_block");
    // A step's OOM answer (hand-made: the simulated GPU is large).
    assert!(!p.apply(StressAction::ScenarioRun).is_empty());
    let more = p.on_result(answer(
        StressOutcome::OutOfMemory {
            allocated: Vec::new(),
            message: "CUDA out of memory. Tried to allocate 512.00 MiB.".into(),
            reserved_but_unallocated: 0,
            room: OomRoom::default(),
        },
        0,
    ));
    assert!(more.is_empty(), "the run stops: {more:?}");
    assert!(!p.scenario.as_ref().expect("loaded").running);
    assert!(p.oom.as_ref().expect("oom").message.contains("512.00 MiB"));
}

#[test]
fn n_opens_the_scenario_list_and_enter_loads_the_selected_one() {
    let mut state = AppState::new(StatusState::default());
    press(&mut state, KeyCode::F(2));
    on_stress_result(
        &mut state,
        answer(
            StressOutcome::Started {
                gpu: 0,
                free_at_start: 80 * GIB,
                total: 80 * GIB,
                real_gpu: false,
            },
            0,
        ),
    );
    assert_eq!(press(&mut state, KeyCode::Char('n')), Effect::Redraw);
    let picker = state.stress.scenario_picker().expect("open");
    assert_eq!(picker.entries.len(), vramtop::scenario::BUILTIN.len());
    press(&mut state, KeyCode::Down);
    press(&mut state, KeyCode::Down);
    press(&mut state, KeyCode::Up);
    let Effect::Stress(cmds) = press(&mut state, KeyCode::Enter) else {
        panic!("Enter loads and rewinds");
    };
    assert!(
        matches!(cmds[..], [StressCommand::UseScenarioDevice { .. }]),
        "the scenario's own device: {cmds:?}"
    );
    assert!(!state.stress.picking());
    assert_eq!(state.stress.scenario.as_ref().map(|r| r.builtin), Some(1));
    assert!(state.stress.tensors.is_empty());
    // Esc closes the list without loading.
    press(&mut state, KeyCode::Char('n'));
    press(&mut state, KeyCode::Esc);
    assert!(!state.stress.picking());
    assert!(state.ui.stress_open, "Esc closed the list, not the panel");
}

#[test]
fn a_loaded_scenario_renders_its_name_step_and_explanation() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "empty_cache_live_block");
    drive(&mut p, &mut exec, StressAction::ScenarioStep);
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(110, 14)).expect("test backend");
    terminal
        .draw(|f| {
            f.render_widget(
                ui::StressPane::new(&p, &Keymap::default(), &theme),
                f.area(),
            );
        })
        .expect("test backend");
    insta::assert_snapshot!("stress_scenario_110x14", terminal.backend());
}

// ------------------------------------------------------------- OOM advice

/// A block of a layout: requested in full unless free.
fn block(address: u64, size: u64, state: vramtop::alloc::BlockState) -> vramtop::alloc::BlockInfo {
    let requested_size = if state == vramtop::alloc::BlockState::Inactive {
        0
    } else {
        size
    };
    vramtop::alloc::BlockInfo {
        address,
        size,
        requested_size,
        state,
    }
}

/// A segment of `total` bytes: one live block of `allocated` bytes at its
/// start (when not 0), the rest one free block.
fn segment(total: u64, allocated: u64) -> SegmentInfo {
    use vramtop::alloc::BlockState;
    let mut blocks = Vec::new();
    if allocated > 0 {
        blocks.push(block(0, allocated, BlockState::ActiveAllocated));
    }
    if total > allocated {
        blocks.push(block(allocated, total - allocated, BlockState::Inactive));
    }
    SegmentInfo {
        device: 0,
        address: 0,
        total_size: total,
        allocated_size: allocated,
        active_size: allocated,
        requested_size: allocated,
        stream: 0,
        segment_type: vramtop::alloc::PoolKind::Large,
        segment_pool_id: (0, 0),
        is_expandable: false,
        blocks,
    }
}

/// An OOM of `tried` bytes (the request too) with nothing free on the
/// device and `reserved` bytes reserved, as now.
fn oom_of(tried: u64, layout: &[SegmentInfo]) -> (OomRoom, u64) {
    let reserved = layout.iter().map(|s| s.total_size).sum();
    (
        OomRoom {
            tried,
            request: tried,
            device_free: 0,
            reserved,
            others: OtherProcesses::default(),
        },
        reserved,
    )
}

fn advice(layout: &[SegmentInfo], settings: &str, tried: u64) -> Vec<String> {
    let (room, reserved) = oom_of(tried, layout);
    words(vramtop::app::stress::oom_advice(
        layout, settings, &room, reserved,
    ))
}

/// OOM advice as the panel words it with the default keymap.
fn words(advice: Vec<vramtop::app::stress::OomAdvice>) -> Vec<String> {
    let keymap = Keymap::default();
    advice
        .into_iter()
        .map(|a| ui::oom_advice_text(a, &keymap))
        .collect()
}

#[test]
fn oom_advice_has_single_spaces_between_its_words() {
    let layout = [segment(20 * MIB, 0), segment(512 * MIB, 100 * MIB)];
    for settings in ["", "expandable_segments:True"] {
        for tried in [MIB, 300 * MIB, 420 * MIB, 2 * GIB] {
            for line in advice(&layout, settings, tried) {
                assert!(!line.contains("  "), "a run of spaces: {line:?}");
            }
        }
    }
}

#[test]
fn oom_advice_splits_cached_memory_into_releasable_and_stranded() {
    use vramtop::app::stress::{Reclaim, reclaim};
    let layout = [
        segment(20 * MIB, 0),
        segment(512 * MIB, 100 * MIB),
        segment(2 * MIB, MIB),
    ];
    assert_eq!(
        reclaim(&layout),
        Reclaim {
            releasable: 20 * MIB,
            non_releasable: 413 * MIB,
            stranded_large_pool: 413 * MIB,
            stranded_expandable: 0,
        }
    );
    // 420 MiB: more than the 412 MiB hole, less than the free segment and
    // the hole's 400 MiB of whole pages together.
    let lines = advice(&layout, "", 420 * MIB);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("could release 20.0 MiB"), "{}", lines[0]);
    assert!(
        lines[0].contains("413 MiB is non-releasable"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].contains(
            "expandable_segments:True would remap 400 MiB of it in whole free 20 MiB pages"
        ),
        "{lines:?}"
    );
    assert!(lines[1].contains("press S"));
    let on = advice(&layout, "expandable_segments:True", 420 * MIB);
    assert!(on[1].starts_with("expandable segments are on"), "{on:?}");
    assert!(!on[1].contains("max_split_size_mb"), "{on:?}");
    // A request the free segment holds: freed since, it fits now.
    let small = [segment(20 * MIB, 0), segment(2 * MIB, MIB)];
    let lines = advice(&small, "", 10 * MIB);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains("the same request fits"), "{lines:?}");
    assert!(advice(&small, "", 300 * MIB)[1].contains("too small"));
    // Nothing cached to speak of: one line, the GPU too small for the
    // request, or the panel's own tensors filling it.
    let lines = advice(&[], "", 300 * MIB);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("too small"), "{lines:?}");
    let lines = advice(&[segment(GIB, GIB - MIB)], "", 300 * MIB);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0]
            .starts_with("free some of the panel's live tensors (d, o, x, D): they hold 1023 MiB"),
        "{lines:?}"
    );
    assert!(!lines[0].contains("too small"), "{lines:?}");
}

#[test]
fn oom_advice_suggests_no_setting_for_a_request_no_cache_could_hold() {
    // 433 MiB cached in all, 1 GiB asked, nothing free on the device.
    let layout = [segment(20 * MIB, 0), segment(512 * MIB, 100 * MIB)];
    let lines = advice(&layout, "", GIB);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains("too small"), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("press S")), "{lines:?}");
    // Memory given back since the OOM counts as free.
    let (mut room, _) = oom_of(GIB, &layout);
    room.reserved += GIB;
    let lines = words(vramtop::app::stress::oom_advice(
        &layout,
        "",
        &room,
        532 * MIB,
    ));
    assert!(lines.iter().any(|l| l.contains("press S")), "{lines:?}");
}

#[test]
fn oom_advice_suggests_no_setting_for_holes_smaller_than_a_page() {
    use vramtop::alloc::BlockState;
    // 20 segments of 20 MiB, each two 5 MiB tensors with a 5 MiB hole after
    // each: 200 MiB stranded, not one whole 20 MiB page of it.
    let holes: Vec<SegmentInfo> = (0..20u64)
        .map(|i| {
            let base = i * 20 * MIB;
            SegmentInfo {
                address: base,
                blocks: (0..4u64)
                    .map(|k| {
                        let state = if k % 2 == 0 {
                            BlockState::ActiveAllocated
                        } else {
                            BlockState::Inactive
                        };
                        block(base + k * 5 * MIB, 5 * MIB, state)
                    })
                    .collect(),
                ..segment(20 * MIB, 10 * MIB)
            }
        })
        .collect();
    let lines = advice(&holes, "", 100 * MIB);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].starts_with("no setting makes room"), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("press S")), "{lines:?}");
}

#[test]
fn oom_advice_says_the_small_pool_cannot_serve_a_large_request() {
    use vramtop::alloc::PoolKind;
    // 100 holes of 1 MiB in 2 MiB small-pool segments, 80 MiB asked.
    let holes: Vec<SegmentInfo> = (0..100)
        .map(|_| SegmentInfo {
            segment_type: PoolKind::Small,
            ..segment(2 * MIB, MIB)
        })
        .collect();
    let lines = advice(&holes, "", 80 * MIB);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[1].contains("small pool's 100 MiB"), "{lines:?}");
    assert!(!lines.iter().any(|l| l.contains("press S")), "{lines:?}");
    // A request of 1 MiB or less fits a hole: it is told so, not that the
    // small pool cannot serve it.
    let lines = advice(&holes, "", MIB / 2);
    assert!(lines[1].contains("small pool now"), "{lines:?}");
}

#[test]
fn the_panel_gives_advice_only_while_an_oom_is_shown() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    p.custom_size = Some(300 * MIB);
    p.count_index = COUNT_PRESETS.iter().position(|&c| c == 2).expect("2");
    drive(&mut p, &mut exec, StressAction::Allocate);
    drive(&mut p, &mut exec, StressAction::FreeOldest);
    assert!(p.oom_advice().is_empty(), "no OOM, no advice");
    p.on_result(answer(
        StressOutcome::OutOfMemory {
            allocated: Vec::new(),
            message: "CUDA out of memory.".into(),
            reserved_but_unallocated: 300 * MIB,
            room: OomRoom::default(),
        },
        600 * MIB,
    ));
    // The hand-made answer has no layout: nothing to say.
    assert!(p.oom_advice().is_empty());
    let r = exec.execute(&StressCommand::Verify);
    p.oom = Some(vramtop::app::stress::OomState {
        message: "CUDA out of memory.".into(),
        reserved_but_unallocated: 300 * MIB,
        room: OomRoom::default(),
    });
    p.busy = true;
    p.on_result(r);
    let advice = words(p.oom_advice());
    assert!(advice[0].contains("could release 300 MiB"), "{advice:?}");
}

#[test]
fn new_settings_or_a_loaded_scenario_clear_the_compare_marks_of_the_old_allocator() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    drive(&mut p, &mut exec, StressAction::Allocate);
    drive(&mut p, &mut exec, StressAction::MarkCompare);
    drive(&mut p, &mut exec, StressAction::FreeEveryOther);
    drive(&mut p, &mut exec, StressAction::MarkCompare);
    assert!(p.compare().is_some());
    p.pending_settings = Some("expandable_segments:True".into());
    drive(&mut p, &mut exec, StressAction::Reconfigure);
    assert!(p.compare().is_none(), "S: a new allocator, no old figures");
    assert_eq!(p.marks, CompareMarks::None);
    let said = p.message.clone().unwrap_or_default();
    assert!(said.contains("compare cleared"), "{said}");

    drive(&mut p, &mut exec, StressAction::MarkCompare);
    drive(&mut p, &mut exec, StressAction::Allocate);
    drive(&mut p, &mut exec, StressAction::MarkCompare);
    assert!(p.compare().is_some());
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    assert!(p.compare().is_none(), "a loaded scenario: cleared too");
    let screen = panel_row(&p, 120, 2);
    assert!(!screen.contains("figure"), "{screen}");
}

/// A dashboard on a fresh simulated GPU (no training process) with the
/// panel open and its worker answered synchronously.
struct Demo {
    state: AppState,
    exec: PanelExecutor<SimMemory>,
    cluster: SimCluster,
    telemetry: vramtop::device::sim::SimTelemetry,
}

impl Demo {
    fn open() -> Demo {
        let cluster = SimCluster::new(SimConfig {
            seed: 3,
            training_processes: 0,
            ..SimConfig::default()
        });
        let mut telemetry = cluster.telemetry();
        let mut state = AppState::new(StatusState {
            backend: "sim".into(),
            sample_interval_ms: 1000,
            ..StatusState::default()
        });
        cluster.advance(1000);
        state.apply_sample(
            cluster.now_ms(),
            telemetry.sample().expect("sim"),
            Default::default(),
        );
        let memory = cluster.new_process(0, STRESS_COMMAND);
        let handle = memory.clone();
        let exec = PanelExecutor::new(
            StressExecutor::new(
                CachingAllocator::new(memory, 0, AllocatorConfig::default()),
                false,
            )
            .with_reopen(move || Ok(handle.clone())),
        );
        press(&mut state, KeyCode::Char('a'));
        on_stress_result(&mut state, exec.started());
        Demo {
            state,
            exec,
            cluster,
            telemetry,
        }
    }

    /// Presses `key` ("a", "Enter", …) and answers what it sends.
    fn key(&mut self, key: &str) {
        let code = match key {
            "Enter" => KeyCode::Enter,
            "Esc" => KeyCode::Esc,
            k if k.chars().count() == 1 => KeyCode::Char(k.chars().next().unwrap_or(' ')),
            other => panic!("no such key in the walk-through: {other}"),
        };
        let mut effect = press(&mut self.state, code);
        while let Effect::Stress(cmds) = effect {
            effect = Effect::None;
            for c in &cmds {
                if let Effect::Stress(more) =
                    on_stress_result(&mut self.state, self.exec.execute(c))
                {
                    effect = Effect::Stress(more);
                }
            }
        }
    }

    fn sample(&mut self) {
        self.cluster.advance(1000);
        let readings = self.telemetry.sample().expect("sim");
        self.state
            .apply_sample(self.cluster.now_ms(), readings, Default::default());
    }
}

#[test]
fn the_walkthrough_in_docs_stress_md_reproduces_as_written() {
    let rows = common::walkthrough::rows();
    assert!(rows.len() >= 4, "the table is there: {rows:?}");
    let mut demo = Demo::open();
    for row in &rows {
        for key in &row.keys {
            demo.key(key);
        }
        demo.sample();
        let screen = screen_text(&demo.state, 120, 40);
        let missing = common::walkthrough::missing(row, &screen);
        assert!(
            missing.is_empty(),
            "after {:?} the screen lacks {missing:?}:\n{screen}",
            row.keys
        );
        assert!(screen.contains(" Segments "), "the map is on screen");
    }
    insta::assert_snapshot!(
        "stress_walkthrough_120x40",
        screen_text(&demo.state, 120, 40)
    );
}

#[test]
fn the_compare_row_of_driver_used_has_its_name_from_every_screen_and_says_gpu_where_it_fits() {
    // The row counts every process on the GPU and the panel's own CUDA
    // context: named "GPU used" beside the allocator's rows, a 10 MiB
    // allocation read as +810 MiB of the panel's. "driver used" is its
    // name in the demo, the scenarios and the timeline; "(GPU)" says it
    // is the whole GPU's where the row has the room.
    let state = stress_screen();
    for (width, height, label) in [(120, 40, "driver used (GPU) "), (80, 24, "driver used ")] {
        let screen = screen_text(&state, width, height);
        let row = screen
            .lines()
            .find(|l| l.contains(label))
            .unwrap_or_else(|| panic!("{width}x{height}: no {label:?} row: {screen}"));
        assert!(row.contains("MiB"), "{width}x{height}: {row}");
        assert!(!screen.contains("GPU used "), "{width}x{height}: {screen}");
    }
}

#[test]
fn at_80x24_the_compare_view_shows_all_seven_figures_and_the_oom_verdict() {
    let state = stress_screen();
    let screen = screen_text(&state, 80, 24);
    // Every figure is on a row of the compare view, under its header.
    let lines: Vec<&str> = screen.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.contains("figure") && l.contains('Δ'))
        .expect("the compare header");
    let table = lines[header + 1..].join("\n");
    for label in [
        "allocated",
        "reserved",
        "driver used",
        "segments",
        "inact split",
        "largest",
        "frag",
    ] {
        assert!(table.contains(label), "{label}: {screen}");
    }
    assert!(
        screen.contains("+80.0 pt"),
        "fragmentation's delta: {screen}"
    );
    assert!(
        screen.contains("+1.00 MiB"),
        "largest free block's delta: {screen}"
    );
    // The advice's verdict outlasts PyTorch's wording: with the GPU full
    // of the panel's own tensors, what to do comes first.
    assert!(
        screen.contains("free some of the panel's live tensors (d, o, x, D)"),
        "the advice's verdict: {screen}"
    );
    // The OOM message is its one-row summary, which keeps its figures
    // (PyTorch's first two rows held the request and the free memory, not
    // what is reserved but unallocated), and leaves a row to the tensors.
    assert!(
        screen.contains(
            "CUDA OOM: tried 1.00 GiB · 514 MiB was free · 5.00 MiB reserved but unallocated"
        ),
        "the OOM message's summary: {screen}"
    );
    // 120×40 keeps the full one-figure-a-row table beside the tensors.
    let wide = screen_text(&state, 120, 40);
    assert!(wide.contains("largest free block"), "{wide}");
    assert!(wide.contains("inactive split"), "{wide}");
}

/// The dashboard of `stress_panel_keeps_scenario_line_after_oom_at_80x24`:
/// `fragmentation_oom` run to its OOM in the open panel, 30 tensors live.
fn scenario_oom_screen() -> AppState {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = p;
    state
}

/// The addresses drawn in the selection's style at `w`×`h`: where the
/// screen shows the tensor `j`/`k` select and `d` frees.
fn selected_addresses_shown(state: &AppState, w: u16, h: u16) -> Vec<u64> {
    let terminal = common::screen::draw(state, &Theme::colored(), w, h);
    let buf = terminal.backend().buffer();
    let mut shown = Vec::new();
    for y in buf.area.top()..buf.area.bottom() {
        let marked: String = (buf.area.left()..buf.area.right())
            .filter_map(|x| buf.cell((x, y)))
            .filter(|c| c.modifier.contains(Modifier::REVERSED))
            .map(|c| c.symbol())
            .collect();
        shown.extend(
            marked
                .split_whitespace()
                .filter_map(|w| w.strip_prefix("0x"))
                .filter_map(|hex| u64::from_str_radix(hex, 16).ok()),
        );
    }
    shown
}

#[test]
fn after_an_oom_the_selected_tensor_stays_on_screen_and_j_k_move_it_at_80x24_and_120x40() {
    for (name, make) in [
        ("compare", stress_screen as fn() -> AppState),
        ("scenario", scenario_oom_screen),
    ] {
        for (w, h) in [(80, 24), (120, 40)] {
            let mut state = make();
            assert!(state.stress.oom.is_some(), "{name}: after an OOM");
            let selected = |state: &AppState| state.stress.tensors[state.stress.selected].address;
            let shown = |state: &AppState| {
                let shown = selected_addresses_shown(state, w, h);
                assert_eq!(
                    shown,
                    vec![selected(state)],
                    "{name} at {w}×{h}: the selected tensor, once:\n{}",
                    screen_text(state, w, h)
                );
                shown[0]
            };
            let first = shown(&state);
            press(&mut state, KeyCode::Char('j'));
            let below = shown(&state);
            assert_ne!(below, first, "{name} at {w}×{h}: j moved the selection");
            press(&mut state, KeyCode::Char('k'));
            let back = shown(&state);
            assert_eq!(back, first, "{name} at {w}×{h}: k moved it back");
            // d frees the tensor the screen shows selected.
            let Effect::Stress(cmds) = press(&mut state, KeyCode::Char('d')) else {
                panic!("{name}: d sends a free");
            };
            assert_eq!(freed(&cmds), vec![back], "{name} at {w}×{h}");
        }
    }
}

/// The words drawn in the selection's style at `w`×`h`, row by row.
fn selected_words_shown(state: &AppState, w: u16, h: u16) -> Vec<String> {
    let terminal = common::screen::draw(state, &Theme::colored(), w, h);
    let buf = terminal.backend().buffer();
    let mut shown = Vec::new();
    for y in buf.area.top()..buf.area.bottom() {
        let marked: String = (buf.area.left()..buf.area.right())
            .filter_map(|x| buf.cell((x, y)))
            .filter(|c| c.modifier.contains(Modifier::REVERSED))
            .map(|c| c.symbol())
            .collect();
        shown.extend(marked.split_whitespace().map(str::to_string));
    }
    shown
}

#[test]
fn the_scenario_list_keeps_the_selected_scenario_on_screen_after_an_oom_and_enter_loads_it() {
    let names = vramtop::scenario::builtin_names();
    let n = names.len();
    for (w, h) in [(80, 24), (120, 40)] {
        for target in 0..n {
            let mut state = stress_screen();
            assert!(state.stress.oom.is_some() && state.stress.compare().is_some());
            press(&mut state, KeyCode::Char('n'));
            // Down to the target and back up to it from the last: the
            // selection is the one scenario drawn selected at every step.
            let moves = std::iter::repeat_n(KeyCode::Down, n - 1)
                .chain(std::iter::repeat_n(KeyCode::Char('k'), n - 1 - target));
            for code in std::iter::once(KeyCode::Null).chain(moves) {
                press(&mut state, code);
                let picker = state.stress.scenario_picker().expect("the list is open");
                let screen = screen_text(&state, w, h);
                let shown: Vec<String> = selected_words_shown(&state, w, h)
                    .into_iter()
                    .filter(|word| names.contains(&word.as_str()))
                    .collect();
                assert_eq!(
                    shown,
                    vec![names[picker.selected].to_string()],
                    "{w}×{h}, {} selected: the selected scenario, once:\n{screen}",
                    names[picker.selected]
                );
                // No other row claims a key the list takes.
                assert!(!screen.contains("frees it"), "{w}×{h}:\n{screen}");
                // A list cut to its rows says which entries it shows.
                let listed: Vec<usize> = (0..n)
                    .filter(|&i| screen.contains(&format!("  {} ", names[i])))
                    .collect();
                if listed.len() < n {
                    let (first, last) = (listed[0] + 1, listed[listed.len() - 1] + 1);
                    assert!(
                        screen.contains(&format!("scenarios {first}–{last} of {n}")),
                        "{w}×{h}: the list shows {listed:?}:\n{screen}"
                    );
                }
            }
            assert_eq!(
                state.stress.scenario_picker().map(|p| p.selected),
                Some(target)
            );
            let Effect::Stress(_) = press(&mut state, KeyCode::Enter) else {
                panic!("Enter loads the scenario");
            };
            assert_eq!(
                state.stress.scenario.as_ref().map(|r| r.builtin),
                Some(target),
                "{w}×{h}: Enter loads the scenario drawn selected"
            );
        }
    }
}

#[test]
fn the_selected_tensors_line_names_the_free_key_as_the_keymap_table_does() {
    let state = stress_screen();
    let mut keymap = Keymap::default();
    for b in &mut keymap.stress {
        if b.key == PanelKey::Act(StressAction::FreeSelected) {
            b.keys = "Del d";
        }
    }
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, &state, &keymap, &Theme::colored()))
        .expect("test backend");
    let screen = common::screen::text(terminal.backend().buffer());
    assert!(screen.contains("· Del frees it"), "{screen}");
    assert!(screen_text(&state, 80, 24).contains("· d frees it"));
}

/// The default keymap with every stress panel binding moved to a key of
/// its own that no word of the panel is spelled like (F20, F21, …): the
/// panel dispatches from its table, so these are the keys that act.
fn keymap_on_f_keys() -> Keymap {
    let mut keymap = Keymap::default();
    for (i, b) in keymap.stress.iter_mut().enumerate() {
        b.keys = Box::leak(format!("F{}", 20 + i).into_boxed_str());
    }
    keymap
}

#[test]
fn the_oom_advices_free_figure_says_it_was_measured_at_the_oom() {
    // The breakdown above shows the GPU's free memory now; the advice's
    // room is what was free at the OOM (other processes move since), so
    // each wording that names it says when.
    use vramtop::app::stress::OomAdvice;
    let keymap = Keymap::default();
    for advice in [
        OomAdvice::FreeLiveTensors {
            live: GIB,
            tried: GIB,
            room: 588 * MIB,
        },
        OomAdvice::GpuTooSmall {
            tried: GIB,
            room: 588 * MIB,
        },
    ] {
        let wordings = ui::oom_advice_wordings(advice, &keymap);
        let naming: Vec<&String> = wordings.iter().filter(|w| w.contains("588 MiB")).collect();
        assert!(!naming.is_empty(), "{wordings:?}");
        for w in naming {
            assert!(w.contains("at the OOM"), "{w}");
        }
    }
}

#[test]
fn the_oom_advice_names_the_keys_the_keymap_binds_to_what_it_suggests() {
    use vramtop::alloc::PoolKind;
    use vramtop::app::stress::{OomAdvice, Stranded};
    let every = [
        OomAdvice::Reclaim {
            releasable: MIB,
            non_releasable: 100 * MIB,
            stranded: Stranded::Both,
        },
        OomAdvice::FreedSince {
            largest: GIB,
            pool: PoolKind::Large,
        },
        OomAdvice::FreeLiveTensors {
            live: GIB,
            tried: GIB,
            room: MIB,
        },
        OomAdvice::GpuTooSmall {
            tried: GIB,
            room: MIB,
        },
        OomAdvice::ExpandableOn {
            non_releasable: 100 * MIB,
        },
        OomAdvice::TrySettings {
            reusable: 400 * MIB,
            max_split_mb: Some(128),
        },
        OomAdvice::HolesTooSmall {
            stranded: 200 * MIB,
            request: 100 * MIB,
        },
        OomAdvice::SmallPoolOnly {
            stranded: 100 * MIB,
        },
        OomAdvice::TryVariant {
            reusable: 400 * MIB,
            max_split_mb: Some(128),
            presses: 1,
        },
        OomAdvice::TryVariant {
            reusable: 400 * MIB,
            max_split_mb: Some(128),
            presses: 2,
        },
        OomAdvice::NoVariantSets {
            reusable: 400 * MIB,
            max_split_mb: Some(128),
        },
    ];
    let moved = keymap_on_f_keys();
    for advice in every {
        let text = ui::oom_advice_text(advice, &moved);
        // Each action the line suggests is named by the key bound to it…
        for &action in advice.actions() {
            let key = moved.stress_key_name(PanelKey::Act(action)).expect("bound");
            assert!(text.contains(key), "{action:?} is {key}: {text}");
        }
        // … and every key it names does what it suggests.
        let named = text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter_map(|w| w.strip_prefix('F')?.parse::<u8>().ok());
        for n in named {
            let does = moved.stress_key_for(KeyEvent::new(KeyCode::F(n), KeyModifiers::NONE));
            assert!(
                does.is_some_and(|k| advice.actions().iter().any(|&a| k == PanelKey::Act(a))),
                "F{n} does {does:?}, not what the line suggests: {text}"
            );
        }
    }
    // With the default keymap the words are as ever.
    let keymap = Keymap::default();
    let text = |a| ui::oom_advice_text(a, &keymap);
    assert!(text(every[2]).starts_with("free some of the panel's live tensors (d, o, x, D): "));
    assert!(text(every[5]).ends_with(
        "; max_split_size_mb:128 would never split blocks ≥ 128 MiB: the OOM path frees cached \
         ones whole (press S to try)"
    ));
    // On screen, after the panel's OOM at 80×24.
    let state = stress_screen();
    let mut terminal = Terminal::new(TestBackend::new(80, 24)).expect("test backend");
    terminal
        .draw(|f| ui::draw(f, &state, &moved, &Theme::colored()))
        .expect("test backend");
    let screen = common::screen::text(terminal.backend().buffer());
    let keys: Vec<&str> = every[2]
        .actions()
        .iter()
        .filter_map(|&a| moved.stress_key_name(PanelKey::Act(a)))
        .collect();
    let says = format!("live tensors ({}):", keys.join(", "));
    assert!(screen.contains(&says), "{says}\n{screen}");
    assert!(!screen.contains("(d, o, x, D)"), "{screen}");
}

#[test]
fn the_panels_messages_and_lines_name_the_keys_the_keymap_binds() {
    use StressAction as S;
    let moved = keymap_on_f_keys();
    let key = |k: PanelKey| moved.stress_key_name(k).expect("bound");
    let act = |a: S| key(PanelKey::Act(a));
    let says = |p: &StressPanel| ui::stress_message(p, &moved).unwrap_or_default();
    let (mut p, mut exec, _cluster) = scenario_rig();
    drive(&mut p, &mut exec, S::MarkCompare);
    let c = act(S::MarkCompare);
    assert_eq!(says(&p), format!("marked A: act, then {c} marks B"));
    drive(&mut p, &mut exec, S::MarkCompare);
    assert_eq!(
        says(&p),
        format!("marked B: A | B | Δ below; {c} starts over")
    );
    // As ever with the default keymap.
    let default = ui::stress_message(&p, &Keymap::default());
    assert_eq!(
        default.as_deref(),
        Some("marked B: A | B | Δ below; c starts over")
    );
    for scenario_key in [
        S::ScenarioStep,
        S::ScenarioRun,
        S::ScenarioRewind,
        S::UnloadScenario,
    ] {
        p.apply(scenario_key);
        let n = act(S::OpenScenarios);
        assert_eq!(says(&p), format!("no scenario loaded: {n} lists them"));
    }
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    let loaded = says(&p);
    let u = act(S::UnloadScenario);
    assert!(
        loaded.ends_with(&format!(": {u} goes back to the GPU")),
        "{loaded}"
    );
    drive(&mut p, &mut exec, S::ScenarioRun);
    p.apply(S::ScenarioStep);
    let (w, next) = (act(S::ScenarioRewind), act(S::ScenarioNextVariant));
    let stopped = says(&p);
    assert!(
        stopped.ends_with(&format!(": {w} rewinds, {next} tries the next variant")),
        "{stopped}"
    );
    // M, beside the map and in its place.
    let m = key(PanelKey::ToggleMap);
    let mut state = stress_screen();
    let toggle = KeyEvent::new(f_key_code(m).expect("an F-key"), KeyModifiers::NONE);
    for ((w, h), expected) in [
        ((120, 40), format!("{m} switches between them below 120×40")),
        ((80, 24), format!("{m} shows the panel")),
    ] {
        let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
        terminal
            .draw(|f| ui::draw(f, &state, &moved, &Theme::colored()))
            .expect("test backend");
        handle_key(&mut state, &moved, toggle);
        let said = ui::stress_message(&state.stress, &moved).unwrap_or_default();
        assert!(said.ends_with(&expected), "{w}×{h}: {said}");
    }
    // The panel's own lines: the empty tensor list and the title.
    let (empty, _exec, _cluster) = scenario_rig();
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(80, 12)).expect("test backend");
    terminal
        .draw(|f| f.render_widget(ui::StressPane::new(&empty, &moved, &theme), f.area()))
        .expect("test backend");
    let text = common::screen::text(terminal.backend().buffer());
    let alloc = act(S::Allocate);
    assert!(
        text.contains(&format!("no live tensors: {alloc} allocates")),
        "{text}"
    );
    let close = key(PanelKey::Close);
    assert!(text.contains(&format!(" {close} closes ")), "{text}");
    let default = panel_text(&empty, 80, 12);
    assert!(
        default.contains("no live tensors: a or Enter allocates"),
        "{default}"
    );
    assert!(default.contains(" F2/Esc closes "), "{default}");
}

/// The key code of an F-key label ("F22").
fn f_key_code(label: &str) -> Option<KeyCode> {
    label.strip_prefix('F')?.parse().ok().map(KeyCode::F)
}

/// The panel's text at `w`×`h` drawn alone, rows joined by newlines.
fn panel_text(p: &StressPanel, w: u16, h: u16) -> String {
    let theme = Theme::colored();
    let mut terminal = Terminal::new(TestBackend::new(w, h)).expect("test backend");
    terminal
        .draw(|f| f.render_widget(ui::StressPane::new(p, &Keymap::default(), &theme), f.area()))
        .expect("test backend");
    common::screen::text(terminal.backend().buffer())
}

/// Text with its line breaks and runs of spaces made single spaces.
fn flat(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_scenario_list_gives_its_keys_once_and_its_message_says_what_a_scenario_is() {
    let (mut p, _exec, _cluster) = scenario_rig();
    p.apply(StressAction::OpenScenarios);
    let text = flat(&panel_text(&p, 120, 20));
    assert_eq!(text.matches("Enter loads").count(), 1, "{text}");
    let count = vramtop::scenario::builtin_names().len();
    assert!(
        text.contains(&format!("{count} built-in scenarios")),
        "{text}"
    );
}

#[test]
fn at_80_columns_scenario_titles_and_the_next_step_wrap_instead_of_being_cut() {
    let (mut p, _exec, _cluster) = scenario_rig();
    p.apply(StressAction::OpenScenarios);
    // The panel at 80×24 has 12 rows (its title and 11 inside).
    let list = flat(&panel_text(&p, 80, 12));
    for name in vramtop::scenario::builtin_names() {
        let s = vramtop::scenario::builtin(name)
            .expect("exists")
            .expect("parses");
        assert!(list.contains(&s.title), "{}: {list}", s.title);
    }
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "empty_cache_live_block");
    drive(&mut p, &mut exec, StressAction::ScenarioStep);
    let run = p.scenario.as_ref().expect("loaded");
    let next = run.scenario.steps[run.next_index().expect("a next step")]
        .label
        .clone();
    let loaded = flat(&panel_text(&p, 80, 12));
    assert!(loaded.contains(&format!("next {next}")), "{next}: {loaded}");
    assert!(loaded.contains("step 1/10"), "{loaded}");
}

#[test]
fn a_scenario_explanation_cut_to_its_rows_ends_in_an_ellipsis_and_names_the_help() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    let explanation = loaded_explanation(&p);
    let text = panel_text(&p, 80, 12);
    let words = flat(&text);
    assert!(
        !words.contains(&flat(&explanation)),
        "the explanation is longer than its rows at 80 columns: {words}"
    );
    // Its last row ends in "…" and says where the rest is.
    let last = text
        .lines()
        .rfind(|l| {
            flat(l)
                .strip_suffix("… ? shows it all")
                .is_some_and(|cut| !cut.is_empty() && explanation.contains(cut.trim_end()))
        })
        .expect("the explanation's last row, cut");
    let after = text.split(last).nth(1).unwrap_or_default();
    assert!(
        after
            .lines()
            .all(|l| flat(l).is_empty() || !explanation.contains(flat(l).as_str())),
        "the last of its rows: {last:?}\n{text}"
    );
}

#[test]
fn the_help_opened_over_a_loaded_scenario_begins_with_its_whole_explanation() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "empty_cache_live_block");
    let explanation = loaded_explanation(&p);
    let mut state = AppState::new(StatusState::default());
    state.ui.stress_open = true;
    state.stress = p;
    state.ui.overlay = vramtop::app::state::Overlay::Help;
    let help = |state: &AppState, w, h| {
        screen_text(state, w, h)
            .lines()
            .map(|l| l.trim_matches(|c: char| c == '"' || c == '│' || c.is_whitespace()))
            .collect::<Vec<_>>()
            .join(" ")
    };
    // In one column (80×24) and beside the keys (120×40, 200×60): the
    // first rows, the whole text where the screen is tall enough.
    for (w, h) in [(80, 24), (120, 40), (200, 60)] {
        let first = flat(&help(&state, w, h));
        assert!(
            first.contains("Scenario empty_cache_live_block torch.cuda.empty_cache() returns"),
            "{w}×{h}: {first}"
        );
        let whole = flat(&help(&state, w, 200));
        assert!(whole.contains(&flat(&explanation)), "{w}×200: {whole}");
    }
    // Closed, the panel's scenario is not the help's.
    state.ui.stress_open = false;
    assert!(!help(&state, 120, 40).contains("Scenario empty_cache_live_block"));
}

#[test]
fn a_pytorch_oom_message_cut_to_its_rows_ends_in_an_ellipsis() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    assert!(p.oom.is_some(), "out of memory");
    // A panel two rows taller than 80x24 leaves it under the dashboard:
    // the message is cut to the four rows that hold its highlighted words
    // (its process line makes them four; on 13 its summary takes its
    // place).
    let text = panel_text(&p, 80, 14);
    assert!(
        !flat(&text).contains("environment-variables"),
        "the message is longer than its rows: {text}"
    );
    let rows: Vec<&str> = text.lines().collect();
    let first = rows
        .iter()
        .position(|l| l.contains("CUDA out of memory"))
        .expect("the message's first row");
    let cut = rows
        .iter()
        .position(|l| l.trim_end().ends_with('…'))
        .expect("a row that says it was cut");
    assert!(cut >= first, "the cut row is the message's: {text}");
}

#[test]
fn a_short_panel_keeps_the_oom_messages_highlighted_words_whole_or_its_one_row_of_figures() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    p.selected = 1;
    let address = format!("{:#x}", p.tensors[1].address);
    // 72 columns: the panel beside the segment map at 120×40, where the
    // words take four rows (at 80, three).
    for w in [72, 80] {
        for h in 10..=20 {
            let text = flat(&panel_text(&p, w, h));
            let whole = text.contains("1.46 GiB is reserved by PyTorch but unallocated");
            let figures = text.contains("tried 2.00 GiB") && text.contains("1.46 GiB reserved but");
            assert!(whole || figures, "{w}×{h}: {text}");
            assert!(
                text.contains(&address),
                "{w}×{h}: the selected tensor: {text}"
            );
        }
    }
}

#[test]
fn at_80_columns_the_title_keeps_the_settings_of_a_scenario_device() {
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    p.settings = "expandable_segments:True".into();
    let narrow = panel_text(&p, 80, 24);
    let title = narrow.lines().next().unwrap_or_default();
    assert!(title.contains("expandable_segments:True"), "{title}");
    assert!(title.contains("scenario device: simulated"), "{title}");
    let wide = panel_text(&p, 120, 24);
    let title = wide.lines().next().unwrap_or_default();
    assert!(title.contains("as in vramtop scenario"), "{title}");
    assert!(title.contains("expandable_segments:True"), "{title}");
}

#[test]
fn in_a_scenario_the_oom_advice_tries_settings_with_the_variant_that_sets_them() {
    use vramtop::app::stress::OomAdvice;
    let (mut p, mut exec, _cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    for _ in 0..4 {
        drive(&mut p, &mut exec, StressAction::ScenarioStep);
    }
    assert!(p.oom.is_some(), "the 2 GiB tensor runs out of memory");
    let said = words(p.oom_advice()).join("\n");
    // The settings field would replace the allocator the steps run on.
    assert!(!said.contains("press S"), "{said}");
    assert!(
        said.contains("(press N: the next variant sets them)"),
        "{said}"
    );
    // And N does run a variant with those settings.
    drive(&mut p, &mut exec, StressAction::ScenarioNextVariant);
    assert!(
        p.settings.contains("expandable_segments:True"),
        "{}",
        p.settings
    );

    // Variants further on take as many presses; none at all says what
    // to do instead.
    let mut run = p.scenario.clone().expect("a scenario");
    let reusable = 400 * MIB;
    let max_split_mb = Some(128);
    let try_settings = OomAdvice::TrySettings {
        reusable,
        max_split_mb,
    };
    run.variant = 2;
    assert_eq!(
        run.advice_here(try_settings),
        OomAdvice::TryVariant {
            reusable,
            max_split_mb,
            presses: 2
        },
        "from max_split_size the next one that sets other settings is two away"
    );
    for v in &mut run.scenario.variants {
        v.alloc_conf.clear();
    }
    let none = run.advice_here(try_settings);
    assert_eq!(
        none,
        OomAdvice::NoVariantSets {
            reusable,
            max_split_mb
        }
    );
    let said = words(vec![none]).join("");
    assert!(
        said.ends_with("(u leaves the scenario, then S sets them)"),
        "{said}"
    );
}

#[test]
fn every_short_name_of_the_narrow_compare_table_is_defined_in_the_help() {
    use vramtop::app::state::Overlay;
    use vramtop::app::stress::COMPARE_NAMES;
    let mut state = stress_screen();
    let screen = screen_text(&state, 80, 24);
    let lines: Vec<&str> = screen.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.contains("figure") && l.contains('Δ'))
        .expect("the compare header");
    let table = lines[header + 1..].join("\n");
    let shortened: Vec<_> = COMPARE_NAMES.iter().filter(|n| n.short != n.full).collect();
    for n in &shortened {
        assert!(table.contains(n.short), "{} is shown: {screen}", n.short);
        assert!(!table.contains(n.full), "{} is shortened: {screen}", n.full);
    }
    // One column (below 70) and tall enough for every row: the help's
    // text read as one paragraph.
    state.ui.overlay = Overlay::Help;
    let help = screen_text(&state, 60, 200)
        .lines()
        .map(|l| l.trim_matches(|c: char| c == '"' || c == '│' || c.is_whitespace()))
        .collect::<Vec<_>>()
        .join(" ");
    for n in shortened {
        let defined = format!("{} for {}", n.short, n.full);
        assert!(help.contains(&defined), "{defined}: {help}");
    }
}

#[test]
fn the_fields_and_the_scenario_list_name_their_keys_from_one_table_the_help_lists() {
    use StressAction as S;
    use vramtop::app::keymap::{TypingKey, TypingMode};
    let field = |k| TypingMode::StressField.key_name(k).expect("a field key");
    let list = |k| TypingMode::ScenarioList.key_name(k).expect("a list key");
    // The keys the texts name are those the fields and the list act on.
    for (mode, key) in [
        (TypingMode::StressField, TypingKey::Done),
        (TypingMode::StressField, TypingKey::Cancel),
        (TypingMode::ScenarioList, TypingKey::Done),
        (TypingMode::ScenarioList, TypingKey::Cancel),
        (TypingMode::ScenarioList, TypingKey::Up),
        (TypingMode::ScenarioList, TypingKey::Down),
    ] {
        let name = mode.key_name(key).expect("named");
        let code = match name {
            "Enter" => KeyCode::Enter,
            "Esc" => KeyCode::Esc,
            "↑" => KeyCode::Up,
            "↓" => KeyCode::Down,
            other => panic!("{other} is not a key this test knows"),
        };
        let event = KeyEvent::new(code, KeyModifiers::NONE);
        assert_eq!(mode.key_for(event), Some(key), "{mode:?} {name}");
    }
    let (done, cancel) = (field(TypingKey::Done), field(TypingKey::Cancel));
    // The size field: its message, its line and its error.
    let (mut p, _exec, _cluster) = scenario_rig();
    p.apply(S::TypeSize);
    assert_eq!(
        p.message.as_deref(),
        Some(
            format!("type a size (512, 37MiB, 1.5GiB): {done} sets it, {cancel} cancels").as_str()
        )
    );
    let text = flat(&panel_text(&p, 120, 20));
    assert!(
        text.contains(&format!("{done} sets · {cancel} cancels")),
        "{text}"
    );
    let bad = vramtop::app::stress::parse_typed_size("lots").expect_err("not a size");
    assert!(bad.ends_with(&format!("({cancel} cancels)")), "{bad}");
    p.cancel_input();
    // The settings field: its message and its line.
    p.apply(S::TypeSettings);
    let said = p.message.clone().unwrap_or_default();
    assert!(said.ends_with(&format!(", {cancel} cancels")), "{said}");
    let text = flat(&panel_text(&p, 120, 20));
    assert!(
        text.contains(&format!(
            "{done} frees all, new allocator · {cancel} cancels"
        )),
        "{text}"
    );
    p.cancel_input();
    // The scenario list's header.
    p.apply(S::OpenScenarios);
    let text = flat(&panel_text(&p, 120, 20));
    let (up, down) = (list(TypingKey::Up), list(TypingKey::Down));
    let (load, close) = (list(TypingKey::Done), list(TypingKey::Cancel));
    assert!(
        text.contains(&format!(
            "{up}/{down} choose · {load} loads (frees all) · {close} closes"
        )),
        "{text}"
    );
    // The help lists both tables under the panel keys that open them, as
    // the keymap binds those: moved, the headings name the new keys.
    let theme = Theme::colored();
    let moved = keymap_on_f_keys();
    let key = |a| moved.stress_key_name(PanelKey::Act(a)).expect("bound");
    let help = flat(&help_screen(&moved, &theme, (120, 120), true));
    let fields = format!(
        "In the size and settings fields ({}, {})",
        key(S::TypeSize),
        key(S::TypeSettings)
    );
    let scenarios = format!("In the scenario list ({})", key(S::OpenScenarios));
    assert!(help.contains(&fields), "{help}");
    assert!(help.contains(&scenarios), "{help}");
    let default = flat(&help_screen(&Keymap::default(), &theme, (120, 120), true));
    assert!(
        default.contains("In the size and settings fields (s, S)"),
        "{default}"
    );
    assert!(default.contains("In the scenario list (n)"), "{default}");
    for (mode, _) in [(TypingMode::StressField, 0), (TypingMode::ScenarioList, 1)] {
        for (keys, what) in mode.help_rows() {
            assert!(
                default.contains(&format!("{keys} {what}")),
                "{keys} {what}: {default}"
            );
        }
    }
    assert!(
        !help.contains("(s, S)") && !help.contains("list (n)"),
        "{help}"
    );
}

// ------------------------------------------------------------ the cap

/// The repro of a cap of 50 MiB: five 10 MiB tensors, then 3 MiB ones.
fn capped_at_50_mib_with_five_10_mib_tensors(cluster: &SimCluster) -> Driven {
    let mut d = Driven::start_with(cluster, StressPanel::with_cap(Some(50 * MIB)));
    d.panel.size_index = SIZE_PRESETS.iter().position(|&s| s == 10 * MIB).unwrap();
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 5).unwrap();
    d.act(StressAction::Allocate);
    assert_eq!(d.panel.figures.reserved, 50 * MIB);
    d.act(StressAction::SetSize(3 * MIB));
    d.panel.count_index = 0;
    d
}

#[test]
fn a_request_a_cached_block_serves_is_not_refused_at_the_cap() {
    let cluster = sim();
    let mut d = capped_at_50_mib_with_five_10_mib_tensors(&cluster);
    d.act(StressAction::FreeOldest);
    // The freed 10 MiB block holds 3 MiB: reserved does not grow.
    d.act(StressAction::Allocate);
    let message = d.panel.message.clone().unwrap_or_default();
    assert_eq!(d.panel.tensors.len(), 5, "{message}");
    assert_eq!(d.panel.figures.reserved, 50 * MIB);
}

#[test]
fn a_request_whose_new_segment_would_pass_the_cap_is_refused_with_its_segment() {
    let cluster = sim();
    let mut d = capped_at_50_mib_with_five_10_mib_tensors(&cluster);
    d.act(StressAction::FreeOldest);
    d.act(StressAction::EmptyCache);
    assert_eq!(d.panel.figures.reserved, 40 * MIB);
    // 40 + 3 is under the cap, but 3 MiB gets a 20 MiB segment: 60 MiB.
    d.act(StressAction::Allocate);
    assert_eq!(d.panel.figures.reserved, 40 * MIB, "the cap held");
    assert_eq!(d.panel.tensors.len(), 4);
    let why = d.panel.message.clone().unwrap_or_default();
    assert!(
        why.contains("20.0 MiB segment") && why.contains("exceeds the stress cap of 50.0 MiB"),
        "{why}"
    );
    assert!(d.panel.oom.is_none(), "a refusal, not an OOM");
}

/// A key of the capped-panel property, as data proptest can draw.
fn capped_panel_action() -> impl proptest::strategy::Strategy<Value = StressAction> {
    use proptest::prelude::*;
    prop_oneof![
        4 => Just(StressAction::Allocate),
        1 => Just(StressAction::SizeUp),
        1 => Just(StressAction::SizeDown),
        1 => Just(StressAction::CountUp),
        1 => Just(StressAction::CountDown),
        1 => Just(StressAction::TogglePattern),
        1 => Just(StressAction::FreeOldest),
        1 => Just(StressAction::FreeRandom),
        1 => Just(StressAction::FreeEveryOther),
        1 => Just(StressAction::FreeAll),
        2 => Just(StressAction::EmptyCache),
        1 => (512u64..64 * MIB).prop_map(StressAction::SetSize),
        1 => Just(StressAction::Reconfigure),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever keys are pressed, the panel never holds more reserved
    /// than its cap, under PyTorch's defaults and expandable segments.
    #[test]
    fn the_stress_cap_bounds_reserved_after_every_key(
        cap_mib in 1u64..300,
        expandable in proptest::bool::ANY,
        actions in proptest::collection::vec(capped_panel_action(), 1..60),
    ) {
        let cap = cap_mib * MIB;
        let device = vramtop::alloc::InMemoryDevice::new(80 * GIB);
        let allocator = CachingAllocator::new(device, 0, AllocatorConfig::default());
        let mut exec = PanelExecutor::new(
            StressExecutor::new(allocator, false)
                .with_reopen(|| Ok(vramtop::alloc::InMemoryDevice::new(80 * GIB))),
        );
        let mut p = StressPanel::with_cap(Some(cap));
        p.on_result(exec.started());
        let settings = if expandable { "expandable_segments:True" } else { "" };
        for action in actions {
            if action == StressAction::Reconfigure {
                p.pending_settings = Some(settings.to_string());
            }
            let mut commands = p.apply(action);
            while let Some(command) = commands.pop() {
                let result = exec.execute(&command);
                proptest::prop_assert!(
                    result.stats.reserved_bytes.all.current as u64 <= cap,
                    "reserved {} over the cap {cap} after {action:?}: {:?}",
                    result.stats.reserved_bytes.all.current,
                    result.outcome
                );
                commands = p.on_result(result);
            }
            proptest::prop_assert!(p.figures.reserved <= cap);
        }
    }
}

#[test]
fn the_empty_tensor_list_says_what_enter_does_while_a_field_is_open() {
    let mut p = started(false, GIB);
    p.apply(StressAction::TypeSize);
    let size = flat(&panel_text(&p, 100, 16));
    assert!(
        size.contains("no live tensors: Enter sets the size, then a or Enter allocates"),
        "{size}"
    );
    assert!(
        !size.contains("no live tensors: a or Enter allocates"),
        "{size}"
    );
    let mut p = started(false, GIB);
    p.apply(StressAction::TypeSettings);
    let settings = flat(&panel_text(&p, 100, 16));
    assert!(
        settings
            .contains("no live tensors: Enter starts a fresh allocator, then a or Enter allocates"),
        "{settings}"
    );
}

#[test]
fn a_burst_says_how_many_allocations_the_cap_refused_with_the_dropped_keys() {
    let cluster = sim();
    let mut d = Driven::start_with(&cluster, StressPanel::with_cap(Some(50 * MIB)));
    d.act(StressAction::Allocate);
    let before = d.panel.tensors.len();
    // `a`, then 60 more and `e` typed before the first answer.
    let mut cmds = d.panel.apply(StressAction::Allocate);
    for _ in 0..60 {
        assert!(d.panel.apply(StressAction::Allocate).is_empty());
    }
    d.panel.apply(StressAction::EmptyCache);
    let dropped = d.panel.dropped_keys;
    assert!(dropped > 0, "the burst overflows the queue");
    let ran = 61 - dropped;
    let mut answers = 0;
    while !cmds.is_empty() {
        assert!(d.worker.send(cmds));
        let r = d
            .results
            .recv_timeout(Duration::from_secs(10))
            .expect("the worker answers");
        cmds = d.panel.on_result(r);
        answers += 1;
        if !cmds.is_empty() {
            // Mid-burst answers keep the count in view.
            let said = d.panel.message.clone().unwrap_or_default();
            assert!(said.contains(&format!("{dropped} keys dropped")), "{said}");
        }
    }
    assert!(answers > 1);
    // Each key that ran whole made `count` tensors.
    let made = (d.panel.tensors.len() - before) / d.panel.count() as usize;
    let refused = ran - made as u64;
    assert!(refused > 0, "the cap refused some: {made} made");
    let said = d.panel.message.clone().unwrap_or_default();
    assert!(said.starts_with("empty_cache released"), "{said}");
    assert!(
        said.contains(&format!("{refused} allocations refused by the stress cap")),
        "{said}"
    );
    assert!(said.contains(&format!("{dropped} keys dropped")), "{said}");
    // The next key starts counting afresh.
    d.act(StressAction::EmptyCache);
    let said = d.panel.message.clone().unwrap_or_default();
    assert!(
        !said.contains("refused") && !said.contains("dropped"),
        "{said}"
    );
}

#[test]
fn a_single_refusal_is_not_counted_again_by_the_next_answer() {
    let cluster = sim();
    let mut d = Driven::start_with(&cluster, StressPanel::with_cap(Some(50 * MIB)));
    d.panel.size_index = SIZE_PRESETS.iter().position(|&s| s == 10 * MIB).unwrap();
    d.panel.count_index = COUNT_PRESETS.iter().position(|&c| c == 10).unwrap();
    d.act(StressAction::Allocate);
    let why = d.panel.message.clone().unwrap_or_default();
    assert!(why.starts_with("refused"), "{why}");
    d.act(StressAction::EmptyCache);
    let said = d.panel.message.clone().unwrap_or_default();
    assert!(!said.contains("refused by the stress cap"), "{said}");
}

/// The OOM advice's rows on `screen`: the panel's rows (left of the
/// segment map beside it) from the first advice line to the scenario
/// line, trimmed.
fn advice_rows(screen: &str) -> Vec<String> {
    screen
        .lines()
        .map(|l| {
            let l = l.trim_matches('"');
            l.split('│').next().unwrap_or(l).trim_end().to_string()
        })
        .skip_while(|l| !l.starts_with("empty_cache()"))
        .take_while(|l| !l.starts_with("scenario "))
        .collect()
}

#[test]
fn at_80x24_the_oom_advice_is_shortened_to_its_rows_not_cut() {
    // fragmentation_oom's OOM: what empty_cache() could release and
    // what is non-releasable, then the variant that sets the settings.
    let state = scenario_oom_screen();
    let screen = screen_text(&state, 80, 24);
    let rows = advice_rows(&screen);
    assert!(!rows.is_empty(), "the advice is on screen:\n{screen}");
    for row in &rows {
        assert!(
            !row.ends_with('…'),
            "a row of advice cut: {row:?}\n{screen}"
        );
    }
    let advice = rows.join(" ");
    for part in [
        "empty_cache()",
        "0 B",
        "1.46 GiB",
        "non-releasable",
        "beside live tensors",
        "expandable_segments:True",
        "max_split_size_mb",
        "(press N",
    ] {
        assert!(advice.contains(part), "{part}: {advice}\n{screen}");
    }
    // With the rows for it, each line is said whole.
    let wide = screen_text(&state, 120, 40);
    let shown = advice_rows(&wide).join(" ");
    for a in state.stress.oom_advice() {
        let whole = ui::oom_advice_text(a, &Keymap::default());
        assert!(shown.contains(&whole), "{whole}\n{wide}");
    }
}

#[test]
fn every_oom_advice_has_a_one_row_wording_at_80_columns_that_names_its_keys() {
    use vramtop::alloc::PoolKind;
    use vramtop::app::stress::{OomAdvice, Stranded};
    // Figures as wide as they get: "1023 MiB", eight cells.
    let wide = 1024 * MIB - 100 * 1024;
    let mut every = vec![
        OomAdvice::FreedSince {
            largest: wide,
            pool: PoolKind::Large,
        },
        OomAdvice::FreeLiveTensors {
            live: wide,
            tried: wide,
            room: wide,
        },
        OomAdvice::GpuTooSmall {
            tried: wide,
            room: wide,
        },
        OomAdvice::ExpandableOn {
            non_releasable: wide,
        },
        OomAdvice::TrySettings {
            reusable: wide,
            max_split_mb: Some(wide >> 20),
        },
        OomAdvice::HolesTooSmall {
            stranded: wide,
            request: wide,
        },
        OomAdvice::SmallPoolOnly { stranded: wide },
        OomAdvice::TryVariant {
            reusable: wide,
            max_split_mb: Some(wide >> 20),
            presses: 1,
        },
        OomAdvice::TryVariant {
            reusable: wide,
            max_split_mb: Some(wide >> 20),
            presses: 2,
        },
        OomAdvice::NoVariantSets {
            reusable: wide,
            max_split_mb: Some(wide >> 20),
        },
    ];
    for stranded in [Stranded::BesideTensors, Stranded::InPages, Stranded::Both] {
        every.push(OomAdvice::Reclaim {
            releasable: wide,
            non_releasable: wide,
            stranded,
        });
    }
    let keymap = Keymap::default();
    for advice in every {
        let wordings = ui::oom_advice_wordings(advice, &keymap);
        assert_eq!(wordings[0], ui::oom_advice_text(advice, &keymap));
        let shortest = wordings.last().expect("a wording");
        assert!(
            shortest.chars().count() <= 80,
            "{advice:?}: {shortest:?} is {} wide",
            shortest.chars().count()
        );
        for &action in advice.actions() {
            let key = keymap
                .stress_key_name(PanelKey::Act(action))
                .expect("bound");
            assert!(shortest.contains(key), "{action:?} is {key}: {shortest}");
        }
        assert!(
            wordings.windows(2).all(|w| w[0].len() > w[1].len()),
            "longest first: {wordings:#?}"
        );
    }
}

#[test]
fn size_and_count_keys_at_their_last_preset_say_so_and_leave_the_hints() {
    let keymap = Keymap::default();
    let hints = |p: &StressPanel| {
        let mut state = AppState::new(StatusState::default());
        state.stress = p.clone();
        keymap.stress_hints(state.offers().panel, state.ui.stress_view())
    };
    let mut p = started(false, 80 * GIB);
    for _ in 0..10 {
        p.apply(StressAction::SizeUp);
        p.apply(StressAction::CountUp);
    }
    assert_eq!((p.size(), p.count()), (GIB, 100));
    assert!(
        !hints(&p).iter().any(|h| h.0 == "+" || h.0 == "]"),
        "{:?}",
        hints(&p)
    );
    // Pressed there, each says why: it did nothing silently.
    p.apply(StressAction::SizeUp);
    assert_eq!(
        p.message.as_deref(),
        Some("already at the largest preset size (1.00 GiB):")
    );
    assert_eq!(
        p.message_keys.first().map(|k| k.key),
        Some(PanelKey::Act(StressAction::TypeSize))
    );
    p.apply(StressAction::CountUp);
    assert_eq!(
        p.message.as_deref(),
        Some("already at the most tensors per allocation (100)")
    );
    assert_eq!((p.size(), p.count()), (GIB, 100));
    for _ in 0..10 {
        p.apply(StressAction::SizeDown);
        p.apply(StressAction::CountDown);
    }
    assert_eq!((p.size(), p.count()), (512, 1));
    assert!(hints(&p).contains(&("+", "size")), "{:?}", hints(&p));
    p.apply(StressAction::SizeDown);
    assert_eq!(
        p.message.as_deref(),
        Some("already at the smallest preset size (512 B):")
    );
    p.apply(StressAction::CountDown);
    assert_eq!(
        p.message.as_deref(),
        Some("already at the fewest tensors per allocation (1)")
    );
    // A typed size is at no end: `+` and `-` go to a preset from it.
    p.apply(StressAction::SetSize(3 * GIB));
    assert!(hints(&p).contains(&("+", "size")), "{:?}", hints(&p));
}

#[test]
fn a_long_settings_title_ends_between_two_settings_not_inside_one() {
    let mut p = started(false, 80 * GIB);
    p.settings = LONG_SETTINGS.into();
    for w in [80u16, 120] {
        let title = panel_text(&p, w, 12)
            .lines()
            .next()
            .unwrap_or_default()
            // The border's line, then "F2/Esc closes" where it fits.
            .split(" ─")
            .next()
            .unwrap_or_default()
            .trim_end_matches(['─', ' '])
            .to_string();
        // Cut at the edge it read "…True,max_split_s…" at 80 columns.
        let settings = title
            .split_once("(simulated)  ")
            .map(|(_, s)| s)
            .unwrap_or_default();
        let kept = settings.strip_suffix(" …").unwrap_or(settings);
        assert!(
            !kept.is_empty()
                && LONG_SETTINGS.starts_with(kept)
                && (kept == LONG_SETTINGS || LONG_SETTINGS[kept.len()..].starts_with(',')),
            "{w}: {title}"
        );
        assert!(title.chars().count() <= usize::from(w), "{w}: {title}");
    }
}

#[test]
fn at_80x24_the_breakdown_warning_cut_at_the_panes_last_row_ends_in_an_ellipsis() {
    // fragmentation_oom run to its OOM, with the GPU sampled: the
    // breakdown shows the panel's allocator and warns of 1.46 GiB cached.
    let (mut p, mut exec, cluster) = scenario_rig();
    load_builtin(&mut p, &mut exec, "fragmentation_oom");
    drive(&mut p, &mut exec, StressAction::ScenarioRun);
    let mut telemetry = cluster.telemetry();
    let mut state = AppState::new(StatusState {
        backend: "sim".into(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    state.ui.stress_open = true;
    state.stress = p;
    next_sim_sample(&mut state, &cluster, &mut telemetry);
    let warning = |w: u16, h: u16| {
        let screen = screen_text(&state, w, h);
        // The test backend quotes each row.
        let line = screen
            .lines()
            .map(|l| l.trim_matches('"').trim_end())
            .find(|l| l.starts_with("warning: 1.46 GiB reserved but unallocated"))
            .unwrap_or_else(|| panic!("{w}x{h}: the warning: {screen}"))
            .to_string();
        (line, screen)
    };
    // One row for a warning of two: cut, and it says so.
    let (line, screen) = warning(80, 24);
    assert!(!screen.contains("expandable_segments:True\n"), "{screen}");
    assert!(line.ends_with('…'), "{line:?}");
    // Whole where it fits: no mark.
    let (line, screen) = warning(120, 40);
    assert!(!line.ends_with('…'), "{line:?}: {screen}");
}

#[test]
fn the_scenario_line_names_the_default_variant_once() {
    // Its name says the settings: "variant default (defaults)" said it twice.
    let screen = screen_text(&scenario_oom_screen(), 80, 24);
    assert!(screen.contains("variant default 1/3"), "{screen}");
    assert!(!screen.contains("(defaults)"), "{screen}");
}
