//! End to end: the dashboard binary in a real terminal emulator (tmux).
//!
//! Uses `VRAMTOP_E2E_BIN` (CI points it at the release build) or else the
//! test profile's binary. Skips with a note when tmux is not installed.

mod common;

use std::process::Command;

use common::tmux::{Session, binary};

/// Starts the dashboard on two simulated GPUs in a detached 100×30 session
/// (its own tmux server), with `extra` arguments.
fn start(tag: &str, extra: &str) -> Option<Session> {
    Session::start(
        "vramtop-e2e",
        tag,
        (100, 30),
        &format!("--backend sim --sim-gpus 2 --interval 200ms {extra}"),
    )
}

fn dashboard_shown(screen: &str) -> bool {
    screen.contains("GPUs") && screen.contains("Timeline") && screen.contains("Processes")
}

fn terminal_restored(s: &Session) {
    terminal_restored_with(s, "VRAMTOP_EXITED 0");
}

fn terminal_restored_with(s: &Session, exit_line: &str) {
    let screen = s.exited();
    assert!(screen.contains(exit_line), "exit status: {screen}");
    s.assert_restored();
    assert!(!dashboard_shown(&screen), "the dashboard is gone: {screen}");
}

#[test]
fn dashboard_appears_keys_move_focus_and_open_help_and_q_restores_the_terminal() {
    let Some(s) = start("keys", "") else {
        return;
    };
    let screen = s.wait_for("the dashboard", dashboard_shown);
    assert!(screen.contains("Memory breakdown"), "{screen}");
    // The first frame can come before the first sample: wait for the GPUs.
    s.wait_for("the simulated GPUs", |sc| sc.contains("Simulated H100"));
    assert_eq!(
        s.display("#{alternate_on}"),
        "1",
        "the dashboard uses the alternate screen"
    );

    // Focus Timeline (GPUs → Breakdown → Timeline): its hints offer zoom.
    s.keys(&["Tab", "Tab"]);
    s.wait_for("the timeline's key hints", |sc| sc.contains("zoom"));
    // The help overlay is generated from the keymap.
    s.keys(&["?"]);
    s.wait_for("the help overlay", |sc| {
        sc.contains("quit") && sc.contains("next pane")
    });
    s.keys(&["Escape"]);
    s.wait_for("the help to close", |sc| !sc.contains("next pane"));

    s.keys(&["q"]);
    terminal_restored(&s);
}

#[test]
fn a_window_grown_both_ways_leaves_no_rows_of_the_dashboard_behind_after_q() {
    let Some(s) = Session::start(
        "vramtop-e2e",
        "grow",
        (80, 24),
        "--backend sim --sim-gpus 2 --interval 200ms",
    ) else {
        return;
    };
    s.wait_for("the dashboard", dashboard_shown);
    s.grow_then_quit_leaves_nothing_behind((200, 60), |row| row.contains("q quit"));
}

/// Starts the dashboard with a unique seed as a marker, sends `signal` to
/// vramtop (not to the shell around it) and checks the terminal comes back
/// and vramtop exits with `status` (128 + the signal's number, as a
/// process the signal killed).
fn signal_restores_the_terminal(tag: &str, marker: &str, signal: &str, status: u8) {
    let Some(s) = start(tag, &format!("--sim-seed {marker}")) else {
        return;
    };
    s.wait_for("the dashboard", dashboard_shown);
    // Anchored on the binary's path: the wrapping shell's command line
    // ("sh -c …") holds the marker too, and must survive to print its own.
    let pattern = format!("^{}.*sim-seed {marker}", binary().display());
    let pids = Command::new("pgrep")
        .args(["-f", &pattern])
        .output()
        .expect("pgrep runs");
    let pids = String::from_utf8_lossy(&pids.stdout).into_owned();
    assert!(!pids.trim().is_empty(), "vramtop's pid was not found");
    for pid in pids.split_whitespace() {
        let _ = Command::new("kill").args([signal, pid]).status();
    }
    terminal_restored_with(&s, &format!("VRAMTOP_EXITED {status}"));
}

#[test]
fn sigterm_restores_the_terminal_and_exits_143() {
    signal_restores_the_terminal("term", "987654", "-TERM", 143);
}

#[test]
fn sighup_restores_the_terminal_and_exits_129() {
    signal_restores_the_terminal("hup", "987655", "-HUP", 129);
}

#[test]
fn sigquit_restores_the_terminal_and_exits_131() {
    signal_restores_the_terminal("quit", "987656", "-QUIT", 131);
}

#[test]
fn sigusr1_restores_the_terminal_and_exits_138() {
    signal_restores_the_terminal("usr1", "987657", "-USR1", 138);
}

#[test]
fn a_panic_restores_the_terminal_and_reports_instead_of_garbling_it() {
    // The test hook is an environment variable: hidden flags would show
    // in the shell completions.
    let Some(s) = Session::start_with_env(
        "vramtop-e2e",
        "panic",
        (100, 30),
        &[("VRAMTOP_DEBUG_PANIC_AFTER", "1500ms")],
        "--backend sim --sim-gpus 2 --interval 200ms",
    ) else {
        return;
    };
    s.wait_for("the dashboard", dashboard_shown);
    // Rust exits with 101 after a panic; the report is printed on the
    // restored screen, not into the alternate one.
    terminal_restored_with(&s, "VRAMTOP_EXITED 101");
    assert!(s.history().contains("deliberate panic"), "{}", s.history());
}

/// The compare row `name` of the stress panel: the part of a screen line
/// from the row's name on (the tensor list is drawn left of it), below the
/// compare view's "figure A B Δ" header.
fn compare_row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    let mut lines = screen.lines();
    let header = lines
        .by_ref()
        .find(|l| l.contains("figure") && l.contains('Δ'))?;
    let column = header.find("figure")?;
    lines.find_map(|line| {
        let row = line.get(column..)?;
        row.starts_with(&format!("{name} ")).then_some(row)
    })
}

#[test]
fn stress_panel_compare_shows_reserved_dropping_by_the_whole_free_segments() {
    let Some(s) = start("stress", "--sim-training 0") else {
        return;
    };
    s.wait_for("the dashboard", dashboard_shown);
    s.keys(&["a"]);
    s.wait_for("the stress worker", |sc| sc.contains("ready on GPU 0"));
    // 10 MiB (`+` from 1 MiB) × 10 (the default count): PyTorch rounds a
    // request of 10 MiB or more to 2 MiB and gives it a segment of its own,
    // so 10 tensors make 10 segments of 10 MiB: reserved 100 MiB.
    s.keys(&["+"]);
    s.wait_for("the 10 MiB size", |sc| sc.contains("size 10.0 MiB"));
    s.keys(&["a"]);
    s.wait_for("the allocation", |sc| sc.contains("allocated 10 tensors"));
    s.keys(&["c"]);
    s.wait_for("mark A", |sc| sc.contains("marked A"));
    // Frees tensors 2, 4, 6, 8, 10: their five segments are entirely free
    // (nothing else lives in them); reserved stays until empty_cache.
    s.keys(&["m"]);
    s.wait_for("the frees", |sc| sc.contains("freed 5 tensors"));
    // empty_cache returns exactly those whole free segments: 5 × 10 MiB.
    s.keys(&["e"]);
    s.wait_for("empty_cache", |sc| {
        sc.contains("empty_cache released 50.0 MiB")
    });
    s.keys(&["c"]);
    let screen = s.wait_for("mark B and the compare view", |sc| {
        sc.contains("marked B") && compare_row(sc, "fragmentation").is_some()
    });
    let fields = |name: &str| -> Vec<String> {
        compare_row(&screen, name)
            .unwrap_or_else(|| panic!("no {name} row:\n{screen}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    // A 100 MiB, B 50 MiB, Δ −50 MiB: minus the five whole free segments.
    assert_eq!(
        fields("reserved"),
        ["reserved", "100", "MiB", "50.0", "MiB", "-50.0", "MiB"],
        "{screen}"
    );
    // The freed tensors were 5 × 10 MiB too.
    assert_eq!(
        fields("allocated"),
        ["allocated", "100", "MiB", "50.0", "MiB", "-50.0", "MiB"],
        "{screen}"
    );
    assert_eq!(
        fields("segments"),
        ["segments", "10", "5", "-5"],
        "{screen}"
    );
    // No hole is left: every remaining segment is wholly in use.
    assert_eq!(
        fields("inactive split"),
        ["inactive", "split", "0", "B", "0", "B", "0"],
        "{screen}"
    );
    s.keys(&["q"]);
    terminal_restored(&s);
}

#[test]
fn stress_cap_from_the_command_line_refuses_a_bigger_request_on_screen() {
    let Some(s) = start("stresscap", "--sim-training 0 --stress-cap 50MiB") else {
        return;
    };
    s.wait_for("the dashboard", dashboard_shown);
    s.keys(&["a"]);
    s.wait_for("the capped stress worker", |sc| {
        sc.contains("cap 50.0 MiB (--stress-cap)")
    });
    // 10 × 10 MiB = 100 MiB asked for, with a 50 MiB cap.
    s.keys(&["+"]);
    s.wait_for("the 10 MiB size", |sc| sc.contains("size 10.0 MiB"));
    s.keys(&["a"]);
    let screen = s.wait_for("the refusal", |sc| {
        sc.contains("exceeds the stress cap of 50.0 MiB")
    });
    assert!(screen.contains("request 100 MiB"), "{screen}");
    assert!(
        screen.contains("live 0 tensors"),
        "nothing allocated: {screen}"
    );
    s.keys(&["q"]);
    terminal_restored(&s);
}

#[test]
fn the_stress_walkthrough_of_docs_stress_md_plays_at_120x40_and_fragmentation_oom_reaches_its_oom()
{
    let Some(s) = Session::start(
        "vramtop-e2e",
        "walk",
        (120, 40),
        "--backend sim --interval 200ms --sim-training 0",
    ) else {
        return;
    };
    s.wait_for("the dashboard", dashboard_shown);
    s.keys(&["a"]);
    s.wait_for("the stress worker", |sc| sc.contains("ready on GPU 0"));
    for row in common::walkthrough::rows() {
        // Keys typed while the worker is busy wait in order behind it.
        let keys: Vec<&str> = row.keys.iter().map(String::as_str).collect();
        s.keys(&keys);
        let screen = s.wait_for(&format!("the figures after {keys:?}"), |sc| {
            common::walkthrough::missing(&row, sc).is_empty()
        });
        assert!(screen.contains(" Segments "), "the map: {screen}");
    }
    // fragmentation_oom: the fifth built-in scenario, run to its end.
    s.keys(&["n"]);
    s.wait_for("the scenario list", |sc| sc.contains("fragmentation_oom"));
    s.keys(&["Down", "Down", "Down", "Down", "Enter"]);
    s.wait_for("the scenario's device", |sc| {
        sc.contains("scenario device: simulated 8.00 GiB")
    });
    s.keys(&["g"]);
    let screen = s.wait_for("the scenario's OOM", |sc| {
        sc.contains("out of memory") && sc.contains("step 4/")
    });
    assert!(
        screen.contains("capacity of 8.00 GiB"),
        "PyTorch's message names the scenario's card: {screen}"
    );
    s.keys(&["q"]);
    terminal_restored(&s);
}

#[test]
fn k_then_y_in_a_real_terminal_sends_sigterm_to_the_process_the_driver_lists() {
    k_then_key_sends("signal", "y", "SIGTERM", 15);
}

#[test]
fn eight_fake_driver_gpus_without_an_allocator_are_all_listed_at_80x24_and_120x40() {
    let Some(lib) = common::fake_nvml::fake_nvml_with(&[("FAKE_NVML_GPUS", "8")]) else {
        return;
    };
    let dir = lib
        .parent()
        .expect("the library has a folder")
        .display()
        .to_string();
    for (tag, size) in [("fold80", (80, 24)), ("fold120", (120, 40))] {
        let Some(s) = Session::start_with_env(
            "vramtop-e2e",
            tag,
            size,
            &[("LD_LIBRARY_PATH", &dir)],
            "--backend nvml --interval 200ms",
        ) else {
            return;
        };
        // No probe, no stress panel: the allocator panes are one row,
        // and the GPU list keeps every GPU.
        let screen = s.wait_for("the folded allocator panes", |sc| {
            dashboard_shown(sc) && sc.contains("no allocator") && sc.contains("7 Fake H200")
        });
        for i in 0..8 {
            assert!(
                screen.contains(&format!("{i} Fake H200")),
                "GPU {i}: {screen}"
            );
        }
        assert!(!screen.contains("scrolls"), "{screen}");
        assert!(!screen.contains("allocator view: n/a"), "{screen}");
        // Free is NVML's (nvidia-smi's, `--once`'s: 120.5 GiB), and the
        // 512 MiB NVML counts in neither used nor free is a part of its own.
        assert!(
            screen.contains("░ free 120 GiB 85%")
                && screen.contains("╱ kept by the driver 512 MiB 0.4%"),
            "{screen}"
        );
        s.keys(&["q"]);
        terminal_restored(&s);
    }
}

#[test]
fn k_then_i_in_a_real_terminal_sends_sigint_to_the_process_the_driver_lists() {
    k_then_key_sends("sigint", "i", "SIGINT", 2);
}

/// `K`, then `key` in the prompt, on a sleeper the fake driver lists:
/// the status line says `name` was sent, and the sleeper ends by `signo`.
fn k_then_key_sends(tag: &str, key: &str, name: &str, signo: i32) {
    use std::os::unix::process::ExitStatusExt as _;
    // A process for the (fake) driver to list beside vramtop itself.
    let mut child = Command::new("sleep").arg("60").spawn().expect("sleep runs");
    let pid = child.id().to_string();
    let Some(lib) = common::fake_nvml::fake_nvml_with(&[
        ("FAKE_NVML_GPUS", "1"),
        ("FAKE_NVML_OTHER_PID", &pid),
    ]) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    let dir = lib
        .parent()
        .expect("the library has a folder")
        .display()
        .to_string();
    let Some(s) = Session::start_with_env(
        "vramtop-e2e",
        tag,
        (80, 24),
        &[("LD_LIBRARY_PATH", &dir)],
        "--backend nvml --interval 200ms",
    ) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    s.wait_for("the sleeper's row", |sc| sc.contains("sleep 60"));
    // Processes (Shift-Tab from GPUs), its last line: vramtop's own is
    // first by memory, the sleeper (no memory figure) after it.
    s.keys(&["BTab", "End", "K"]);
    s.wait_for("the prompt", |sc| {
        sc.contains(&format!("Send SIGTERM to {pid} sleep 60? y/n"))
    });
    assert!(
        child.try_wait().expect("waits").is_none(),
        "nothing sent yet"
    );
    s.keys(&[key]);
    s.wait_for("the outcome", |sc| {
        sc.contains(&format!("sent {name} to {pid} sleep 60"))
    });
    assert_eq!(child.wait().expect("it ends").signal(), Some(signo));
    s.keys(&["q"]);
    terminal_restored(&s);
}
