//! vramtop in a real terminal emulator: a detached tmux session per test,
//! each on its own tmux server (`-L`, named like the session), so that
//! nothing else using tmux on the machine (or another test) can disturb it.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The binary under test: `VRAMTOP_E2E_BIN` (CI points it at the release
/// build) or else the test profile's.
pub fn binary() -> PathBuf {
    std::env::var_os("VRAMTOP_E2E_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_vramtop")))
}

/// Runs tmux on the server `socket` (`-L`); its stdout when it succeeded.
pub fn tmux_on(socket: &str, args: &[&str]) -> Option<String> {
    let out = Command::new("tmux")
        .arg("-L")
        .arg(socket)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub struct Session {
    name: String,
}

impl Session {
    /// Runs `vramtop --log-file LOG ARGS` in a detached `width`×`height`
    /// session named `{prefix}-{tag}-{pid}` (also its server's name). The
    /// shell prints a marker when vramtop has exited, then stays so the
    /// screen can be read. None, with a note, when tmux is not installed.
    pub fn start(prefix: &str, tag: &str, size: (u16, u16), args: &str) -> Option<Session> {
        Session::start_with_env(prefix, tag, size, &[], args)
    }

    /// `start`, with `env` (name, value) set for vramtop only (the values
    /// are quoted for the shell).
    pub fn start_with_env(
        prefix: &str,
        tag: &str,
        (width, height): (u16, u16),
        env: &[(&str, &str)],
        args: &str,
    ) -> Option<Session> {
        if tmux_on("vramtop-e2e-probe", &["-V"]).is_none() {
            super::skip::skip(
                &format!("the end-to-end test {prefix}-{tag}"),
                "tmux is not installed",
                super::skip::Prerequisite::ProvidedByCi,
            );
            return None;
        }
        let name = format!("{prefix}-{tag}-{}", std::process::id());
        // No probe of the machine's (one of this user's running in the
        // default folders) shows on the screen; a test's own value wins.
        let no_probes = super::no_probes_dir();
        let no_probes = no_probes.to_string_lossy();
        // Nor does it write snapshots into the user's state folder.
        let snapshots = super::test_snapshots_dir();
        let snapshots = snapshots.to_string_lossy();
        let isolation = [
            (super::PROBE_DIR_ENV, no_probes.as_ref()),
            (super::SNAPSHOT_DIR_ENV, snapshots.as_ref()),
        ];
        let given = |name: &str| env.iter().any(|(k, _)| *k == name);
        let env_prefix: String = isolation
            .iter()
            .filter(|(k, _)| !given(k))
            .chain(env.iter())
            .map(|(k, v)| format!("{k}='{}' ", v.replace('\'', "'\\''")))
            .collect();
        let env_prefix = if env_prefix.is_empty() {
            env_prefix
        } else {
            format!("env {env_prefix}")
        };
        let log = std::env::temp_dir().join(format!("{name}.log"));
        let command = format!(
            // `--log-file` is global: after a subcommand it is that
            // command's, before one it is refused (the dashboard's options
            // stand alone).
            "{env_prefix}{} {args} --log-file {}; echo VRAMTOP_EXITED $?; sleep 60",
            binary().display(),
            log.display()
        );
        let (width, height) = (width.to_string(), height.to_string());
        tmux_on(
            &name,
            &[
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                &width,
                "-y",
                &height,
                &command,
            ],
        )?;
        Some(Session { name })
    }

    pub fn screen(&self) -> String {
        tmux_on(&self.name, &["capture-pane", "-p", "-t", &self.name]).unwrap_or_default()
    }

    /// The screen and up to 500 lines of scrollback.
    pub fn history(&self) -> String {
        tmux_on(
            &self.name,
            &["capture-pane", "-p", "-S", "-500", "-t", &self.name],
        )
        .unwrap_or_default()
    }

    /// A tmux format (`#{alternate_on}`, `#{cursor_flag}`) of the pane.
    pub fn display(&self, format: &str) -> String {
        tmux_on(
            &self.name,
            &["display-message", "-p", "-t", &self.name, format],
        )
        .unwrap_or_default()
        .trim()
        .to_string()
    }

    /// Resizes the window to `width`×`height`, as a user resizes the
    /// terminal's window.
    pub fn resize(&self, (width, height): (u16, u16)) {
        let (width, height) = (width.to_string(), height.to_string());
        tmux_on(
            &self.name,
            &[
                "resize-window",
                "-t",
                &self.name,
                "-x",
                &width,
                "-y",
                &height,
            ],
        );
    }

    /// Grows the window from the size it was started at to `size` while
    /// vramtop runs, waits until `drawn` holds of the screen at that size
    /// (the status line on its last row), quits with `q`, and asserts that
    /// nothing vramtop drew is left on the restored screen nor in its
    /// scrollback: only the exit marker. tmux rewraps the alternate
    /// screen to the size it was entered at on the way out; grown both
    /// ways, rows of panes came back above the prompt.
    pub fn grow_then_quit_leaves_nothing_behind(
        &self,
        (width, height): (u16, u16),
        drawn: impl Fn(&str) -> bool,
    ) {
        self.resize((width, height));
        self.wait_for("a frame at the new size", |sc| {
            sc.lines().nth(usize::from(height) - 1).is_some_and(&drawn)
        });
        self.keys(&["q"]);
        let screen = self.exited();
        assert!(screen.contains("VRAMTOP_EXITED 0"), "{screen}");
        self.assert_restored();
        let left: Vec<&str> = screen
            .lines()
            .take_while(|l| !l.contains("VRAMTOP_EXITED"))
            .filter(|l| !l.trim().is_empty())
            .collect();
        assert!(left.is_empty(), "rows left above the exit: {left:#?}");
        let history = self.history();
        let drawn_rows: Vec<&str> = history
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.contains("VRAMTOP_EXITED"))
            .collect();
        assert!(
            drawn_rows.is_empty(),
            "rows left in the scrollback: {drawn_rows:#?}"
        );
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.name];
        args.extend_from_slice(keys);
        tmux_on(&self.name, &args);
    }

    /// Polls the screen until `pred` holds (a deadline, not a fixed sleep).
    pub fn wait_for(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        // Generous: CI machines are busy; the poll returns as soon as it holds.
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let screen = self.screen();
            if pred(&screen) {
                return screen;
            }
            if Instant::now() > deadline {
                panic!("timed out waiting for {what}; screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the shell's marker: the screen once vramtop has exited.
    pub fn exited(&self) -> String {
        self.wait_for("vramtop to exit", |sc| sc.contains("VRAMTOP_EXITED"))
    }

    /// Asserts the terminal is back to normal: the alternate screen left
    /// and the cursor shown.
    pub fn assert_restored(&self) {
        assert_eq!(
            self.display("#{alternate_on}"),
            "0",
            "the alternate screen was left"
        );
        assert_eq!(
            self.display("#{cursor_flag}"),
            "1",
            "the cursor is shown again"
        );
        assert_eq!(
            self.display("#{mouse_any_flag}"),
            "0",
            "mouse reporting is off again"
        );
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // tmux 3.3 leaves its socket file behind after kill-server: one
        // per test and run piled up in the user's tmux folder.
        let socket = tmux_on(&self.name, &["display-message", "-p", "#{socket_path}"])
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        tmux_on(&self.name, &["kill-server"]);
        if let Some(path) = socket {
            let _ = std::fs::remove_file(path);
        }
    }
}
