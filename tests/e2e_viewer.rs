//! End to end: `vramtop open FILE` in a real terminal emulator (tmux), the
//! same way as `tests/e2e_tmux.rs` (`tests/common/tmux.rs`: the binary from
//! `VRAMTOP_E2E_BIN` or the test profile's, a private tmux server per
//! session): open a shared
//! snapshot, scrub with keys, select a block and read its frames, quit and
//! find the terminal restored. Skips with a note when tmux or the shared
//! snapshots are missing.

mod common;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use vramtop::app::keymap::Keymap;
use vramtop::app::viewer::ViewerState;
use vramtop::snapshot::read_snapshot_file;

use common::shared_snapshot as shared;
use common::tmux::Session;

const SILMONT: &str = "silmont_mem_snapshot.pickle";

/// Runs `vramtop ARGS` in a detached 120×40 session (its own tmux server).
fn start(tag: &str, args: &str) -> Option<Session> {
    Session::start("vramtop-e2e-viewer", tag, (120, 40), args)
}

/// `start`, reading the file behind the progress screen whatever its size.
fn start_in_background(tag: &str, args: &str) -> Option<Session> {
    Session::start_with_env(
        "vramtop-e2e-viewer",
        tag,
        (120, 40),
        &[("VRAMTOP_DEBUG_BACKGROUND_LOAD", "1")],
        args,
    )
}

/// Waits for vramtop to exit and checks it failed the way bad input must:
/// exit code 2 and one `vramtop:` line naming `file`, on the normal screen.
fn exits_2_with_one_line_naming(s: &Session, file: &str) {
    let screen = s.exited();
    assert!(screen.contains("VRAMTOP_EXITED 2"), "{screen}");
    let errors: Vec<&str> = screen
        .lines()
        .filter(|l| l.starts_with("vramtop:"))
        .collect();
    assert_eq!(errors.len(), 1, "{screen}");
    assert!(errors[0].contains(file), "{screen}");
    assert_eq!(s.display("#{alternate_on}"), "0");
}

/// How many ↓ presses select, at cursor `cursor`, the first allocated
/// block that has a stack: found on the library's own viewer, so the
/// terminal run can be checked against it.
fn downs_to_a_block_with_frames(path: &std::path::Path, cursor: usize) -> (usize, String) {
    let snapshot = read_snapshot_file(path).expect("loads");
    let mut v = ViewerState::new(SILMONT.to_string(), snapshot);
    let keymap = Keymap::default();
    let press = |v: &mut ViewerState, code| {
        v.handle_key(&keymap, KeyEvent::new(code, KeyModifiers::NONE));
    };
    press(&mut v, KeyCode::Home);
    for _ in 0..cursor {
        press(&mut v, KeyCode::Right);
    }
    let mut downs = 0;
    loop {
        if let Some((_, b)) = v.selected_block()
            && b.state.is_active()
            && let Some(f) = b.frames.iter().find(|f| f.filename.ends_with(".py"))
        {
            let file = f.filename.rsplit('/').next().unwrap_or(&f.filename);
            return (downs, format!("{file}:{} {}", f.line, f.name));
        }
        press(&mut v, KeyCode::Down);
        downs += 1;
        assert!(
            downs < 100,
            "no block with Python frames at cursor {cursor}"
        );
    }
}

#[test]
fn viewer_opens_scrubs_shows_a_blocks_frames_and_q_restores_the_terminal() {
    let Some(path) = shared(SILMONT) else {
        return;
    };
    let Some(s) = start("scrub", &format!("open {}", path.display())) else {
        return;
    };
    let screen = s.wait_for("the viewer", |sc| sc.contains("event 97/97"));
    assert!(
        screen.contains("Timeline") && screen.contains("Segments"),
        "{screen}"
    );
    assert_eq!(s.display("#{alternate_on}"), "1", "the alternate screen");
    // Clicks focus panes and select GPUs, as in the dashboard.
    assert_eq!(s.display("#{mouse_any_flag}"), "1", "mouse reporting on");

    s.keys(&["Home"]);
    s.wait_for("the start of the trace", |sc| {
        sc.contains("event 0/97 · before the first event")
    });
    s.keys(&["n", "n", "n"]);
    s.wait_for("the third segment_alloc", |sc| {
        sc.contains("· segment_alloc ")
    });
    s.keys(&["End"]);
    s.wait_for("the end", |sc| sc.contains("event 97/97"));

    // Scrub to event 20 with →, then select a block with a stack.
    s.keys(&["Home"]);
    s.wait_for("the start", |sc| sc.contains("event 0/97"));
    let (downs, frame) = downs_to_a_block_with_frames(&path, 20);
    for _ in 0..20 {
        s.keys(&["Right"]);
    }
    s.wait_for("event 20", |sc| sc.contains("event 20/97"));
    for _ in 0..downs {
        s.keys(&["Down"]);
    }
    s.keys(&["Enter"]);
    let screen = s.wait_for("the block detail with its frames", |sc| {
        sc.contains("innermost first") && sc.contains(&frame)
    });
    assert!(screen.contains("state         allocated"), "{screen}");
    s.keys(&["Escape"]);
    s.wait_for("the detail to close", |sc| !sc.contains("innermost first"));

    s.keys(&["q"]);
    let screen = s.exited();
    assert!(screen.contains("VRAMTOP_EXITED 0"), "{screen}");
    s.assert_restored();
    assert!(!screen.contains("Segments"), "the viewer is gone: {screen}");
}

#[test]
fn a_window_grown_both_ways_leaves_no_rows_of_the_viewer_behind_after_q() {
    let Some(path) = shared(SILMONT) else {
        return;
    };
    let Some(s) = Session::start(
        "vramtop-e2e-viewer",
        "grow",
        (80, 24),
        &format!("open {}", path.display()),
    ) else {
        return;
    };
    s.wait_for("the viewer", |sc| sc.contains("event 97/97"));
    s.grow_then_quit_leaves_nothing_behind((100, 30), |row| row.starts_with("q quit"));
}

#[test]
fn a_click_on_a_gpu_row_selects_that_gpu_and_quitting_turns_the_mouse_off() {
    let Some(path) = shared("albi2_thesis-text-to-SQL_dump_snapshot.pickle") else {
        return;
    };
    let Some(s) = start("click", &format!("open {}", path.display())) else {
        return;
    };
    s.wait_for("the viewer on GPU 0", |sc| sc.contains("▶0 GPU 0"));
    assert_eq!(s.display("#{mouse_any_flag}"), "1", "mouse reporting on");
    // A left press on GPU 1's row (the third screen row, 1-based, under
    // the title and GPU 0's), as the terminal reports it (SGR).
    s.keys(&["-l", "\x1b[<0;5;3M"]);
    s.wait_for("GPU 1 selected", |sc| {
        sc.contains("▶1 GPU 1") && sc.contains("Memory breakdown  GPU 1")
    });
    s.keys(&["q"]);
    let screen = s.exited();
    assert!(screen.contains("VRAMTOP_EXITED 0"), "{screen}");
    s.assert_restored();
}

#[test]
fn a_bad_file_is_one_line_and_exit_2_without_touching_the_screen() {
    let dir = std::env::temp_dir().join(format!("vramtop-e2e-viewer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("not-a-snapshot.pickle");
    std::fs::write(&bad, b"this is not a pickle").expect("write");
    let Some(s) = start("bad", &format!("open {}", bad.display())) else {
        return;
    };
    exits_2_with_one_line_naming(&s, "not-a-snapshot.pickle");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_file_cut_inside_its_trace_stays_open_on_its_final_state_and_says_why() {
    let Some(path) = shared(SILMONT) else {
        return;
    };
    let bytes = std::fs::read(&path).expect("reads");
    let traces = bytes
        .windows(b"device_traces".len())
        .position(|w| w == b"device_traces")
        .expect("a trace key after the segments");
    let dir = std::env::temp_dir().join(format!("vramtop-e2e-viewer-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cut = dir.join("cut.pickle");
    std::fs::write(&cut, &bytes[..traces + (bytes.len() - traces) / 2]).expect("write");
    // Read in the foreground (a small file) and behind the progress screen.
    for (tag, background) in [("cutfg", false), ("cutbg", true)] {
        let args = format!("open {}", cut.display());
        let started = if background {
            start_in_background(tag, &args)
        } else {
            start(tag, &args)
        };
        let Some(s) = started else {
            return;
        };
        s.wait_for("the final state, the trace unreadable", |sc| {
            sc.contains("trace unreadable") && sc.contains("the trace could not be read")
        });
        s.keys(&["P"]);
        s.wait_for("why P cannot jump", |sc| {
            sc.contains("nothing to jump to: the trace could not be read")
        });
        s.keys(&["q"]);
        let screen = s.exited();
        assert!(screen.contains("VRAMTOP_EXITED 0"), "{tag}: {screen}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn background_loading_shows_the_viewer_and_a_bad_file_restores_the_screen_first() {
    let Some(path) = shared(SILMONT) else {
        return;
    };
    let Some(s) = start_in_background("bg", &format!("open {}", path.display())) else {
        return;
    };
    s.wait_for("the viewer after loading", |sc| sc.contains("event 97/97"));
    s.keys(&["q"]);
    let screen = s.exited();
    assert!(screen.contains("VRAMTOP_EXITED 0"), "{screen}");
    drop(s);

    // An error found on the loader thread: the terminal is restored, then
    // the one-line error is printed on the normal screen.
    let dir = std::env::temp_dir().join(format!("vramtop-e2e-viewer-bg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("broken.pickle");
    std::fs::write(&bad, b"\x80\x04not really").expect("write");
    let Some(s) = start_in_background("bgbad", &format!("open {}", bad.display())) else {
        return;
    };
    exits_2_with_one_line_naming(&s, "broken.pickle");
    assert_eq!(s.display("#{cursor_flag}"), "1");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_signal_restores_the_viewers_terminal_and_exits_128_plus_its_number() {
    let Some(path) = shared(SILMONT) else {
        return;
    };
    for (tag, marker, signal, status) in [
        ("quit", "987658", "-QUIT", 131),
        ("usr1", "987659", "-USR1", 138),
        ("term", "987662", "-TERM", 143),
        ("hup", "987663", "-HUP", 129),
    ] {
        // The link's name is only a marker to find this vramtop's pid.
        let link = std::env::temp_dir().join(format!("vramtop-e2e-{marker}.pickle"));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link).expect("a link to the snapshot");
        let Some(s) = start(tag, &format!("open {}", link.display())) else {
            return;
        };
        s.wait_for("the viewer", |sc| sc.contains("event 97/97"));
        let pattern = format!(
            "^{}.*vramtop-e2e-{marker}",
            common::tmux::binary().display()
        );
        let pids = std::process::Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .expect("pgrep runs");
        let pids = String::from_utf8_lossy(&pids.stdout).into_owned();
        assert!(!pids.trim().is_empty(), "vramtop's pid was not found");
        for pid in pids.split_whitespace() {
            let _ = std::process::Command::new("kill")
                .args([signal, pid])
                .status();
        }
        let screen = s.exited();
        let _ = std::fs::remove_file(&link);
        assert!(
            screen.contains(&format!("VRAMTOP_EXITED {status}")),
            "{signal}: {screen}"
        );
        s.assert_restored();
    }
}

/// The viewer's own answer for a file: after `P` and `w`, the top site's
/// label and its first Python frame as the expanded pane lists it.
fn top_site_at_the_peak(path: &std::path::Path, name: &str) -> (String, String) {
    let snapshot = read_snapshot_file(path).expect("loads");
    let mut v = ViewerState::new(name.to_string(), snapshot);
    let keymap = Keymap::default();
    for c in ['P', 'w'] {
        v.handle_key(&keymap, KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    }
    let site = v.selected_site().expect("a site at the peak");
    let frame = site
        .stack
        .iter()
        .find(|f| vramtop::snapshot::sites::is_python(f))
        .map(vramtop::snapshot::sites::frame_label)
        .expect("a Python frame");
    (site.label.clone(), frame)
}

#[test]
fn viewer_jumps_to_the_peak_and_the_sites_pane_expands_the_top_site_to_file_lines() {
    const GRAD: &str = "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl";
    let Some(path) = shared(GRAD) else {
        return;
    };
    let (label, frame) = top_site_at_the_peak(&path, GRAD);
    assert!(frame.contains(".py:"), "{frame}");
    let Some(s) = start("sites", &format!("open {}", path.display())) else {
        return;
    };
    s.wait_for("the viewer", |sc| sc.contains("event 33/33"));
    s.keys(&["P"]);
    s.wait_for("the peak", |sc| sc.contains("peak alloc 4.13 GiB here"));
    s.keys(&["w"]);
    s.wait_for("the sites pane", |sc| {
        sc.contains("Sites") && sc.contains(&label)
    });
    s.keys(&["Enter"]);
    let screen = s.wait_for("the expanded top site", |sc| {
        sc.contains("stack, innermost first") && sc.contains(&frame)
    });
    assert!(screen.contains("blocks ("), "{screen}");
    s.keys(&["Escape", "Escape"]);
    s.wait_for("the pane to close", |sc| {
        !sc.contains("stack, innermost first")
    });
    s.keys(&["q"]);
    let screen = s.exited();
    assert!(screen.contains("VRAMTOP_EXITED 0"), "{screen}");
    s.assert_restored();
}

/// Whether a process whose command line matches `pattern` (pgrep -f) runs.
fn running(pattern: &str) -> Vec<String> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", pattern])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_closed_terminal_ends_the_viewer_and_the_dashboard_instead_of_spinning() {
    // crossterm's reader loops forever on a hung-up terminal; before the
    // viewer polled the terminal itself, a closed SSH window left it at
    // 100 % CPU, deaf to SIGTERM.
    let Some(path) = shared(SILMONT) else {
        return;
    };
    // The link's name and the odd cap are markers to find each pid.
    let link = std::env::temp_dir().join("vramtop-e2e-987660.pickle");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&path, &link).expect("a link to the snapshot");
    for (tag, args, marker) in [
        ("hupviewer", format!("open {}", link.display()), "987660"),
        (
            "hupdash",
            "--backend sim --stress-cap 987661MiB".to_string(),
            "987661MiB",
        ),
    ] {
        let pattern = format!("^{}.*{marker}", common::tmux::binary().display());
        let Some(s) = start(tag, &args) else {
            return;
        };
        s.wait_for("the screen", |sc| sc.contains("q quit"));
        assert!(
            !running(&pattern).is_empty(),
            "{tag}: vramtop's pid was not found"
        );
        // The window closes: tmux hangs up the terminal.
        drop(s);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut left = running(&pattern);
        while !left.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(100));
            left = running(&pattern);
        }
        for pid in &left {
            let _ = std::process::Command::new("kill")
                .args(["-9", pid])
                .status();
        }
        assert!(
            left.is_empty(),
            "{tag}: vramtop still runs after its terminal closed"
        );
    }
    let _ = std::fs::remove_file(&link);
}

#[test]
fn open_at_starts_the_viewer_there_and_a_moment_the_file_lacks_is_one_line() {
    let Some(path) = shared(SILMONT) else {
        return;
    };
    let peak = {
        let snapshot = read_snapshot_file(&path).expect("loads");
        let mut v = ViewerState::new(SILMONT.to_string(), snapshot);
        v.start_at(vramtop::snapshot::peak::At::Peak)
            .expect("a trace");
        v.cursor()
    };
    // Read before the screen switches, and behind the loading screen.
    for background in [false, true] {
        let run = |tag: &str, at: &str| {
            let args = format!("open {} --at {at}", path.display());
            if background {
                start_in_background(tag, &args)
            } else {
                start(tag, &args)
            }
        };
        let tag = if background { "at-bg" } else { "at" };
        let Some(s) = run(tag, "peak") else {
            return;
        };
        let want = format!("event {peak}/97");
        s.wait_for("the cursor at the peak", |sc| sc.contains(&want));
        // Opened at a moment, the viewer answers who holds the memory
        // there, as `O` does at an OOM.
        s.wait_for("the sites pane open", |sc| {
            sc.contains("Sites  by user frame")
        });
        s.keys(&["q"]);
        let screen = s.exited();
        assert!(screen.contains("VRAMTOP_EXITED 0"), "{tag}: {screen}");

        let Some(s) = run(&format!("{tag}-oom"), "oom") else {
            return;
        };
        // The line wraps at 120 columns: a part of one row is looked for.
        exits_2_with_one_line_naming(&s, "has no OOM event");
    }
}

#[test]
fn open_at_oom_reaches_the_failed_requests_stack_from_the_sites_panes_oom_row() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/standin-oom.pickle"
    );
    let Some(s) = start("oom-row", &format!("open {path} --at oom")) else {
        return;
    };
    // At the OOM with the sites open: the row names the request and how
    // to reach its stack; Enter expands the first site.
    let screen = s.wait_for("the OOM row", |sc| {
        sc.contains("OOM 256 MiB asked by standin_train.py:72 step · ↑")
    });
    assert!(screen.contains("Enter expand/fold site"), "{screen}");
    s.keys(&["Up"]);
    s.wait_for("the row selected", |sc| sc.contains("Enter OOM stack"));
    s.keys(&["Enter"]);
    s.wait_for("the failed request's stack", |sc| {
        sc.contains("stack of the failed request") && sc.contains("standin_train.py:101 main")
    });
    // Esc back to the pane, still open; q quits.
    s.keys(&["Escape"]);
    s.wait_for("the sites pane again", |sc| {
        sc.contains(" Sites ") && sc.contains("Enter OOM stack")
    });
    s.keys(&["q"]);
    let screen = s.exited();
    assert!(screen.contains("VRAMTOP_EXITED 0"), "{screen}");
}
