//! `-h`, `--help` and `vramtop help COMMAND`, wrapped to the terminal.
//!
//! clap wraps its help only with its `wrap_help` feature, which needs the
//! `terminal_size` crate; without it every paragraph is one line, which an
//! 80-column terminal breaks at column 0 in the middle of a word. So the
//! help clap renders is wrapped here, as `wrap_help` would wrap it: lines
//! broken between words, each continuation hanging under its line's
//! description column (a command's or an option's), never wider than the
//! width ([`help_width`]) unless one word alone is.

use std::ffi::{OsStr, OsString};

use unicode_width::UnicodeWidthChar as _;

/// The width the help is wrapped to where no terminal says one (stdout
/// is a pipe or a file, `COLUMNS` is not set and the user's terminal
/// cannot be asked): clap's own fallback, wide enough that `-h`'s two
/// columns rarely fold, narrow enough to read in a pager or an editor.
pub const DEFAULT_HELP_WIDTH: usize = 100;

/// The environment variable whose columns the help is wrapped to where
/// stdout is not a terminal (`COLUMNS=80 vramtop --help | less`), as
/// clap's `wrap_help` reads it: an explicit width, before the user's
/// terminal is asked. On a terminal the terminal's own width wins: a
/// shell's `COLUMNS` is stale once the window is resized.
pub const COLUMNS_ENV: &str = "COLUMNS";

/// The fewest cells a description is given beside its command or option
/// before its continuation lines hang nearer the margin instead: under
/// that the description would be a column of one or two words a line.
const MIN_DESCRIPTION_CELLS: usize = 24;

/// How much deeper than the line's own indent a continuation hangs where
/// the description column is too far right ([`MIN_DESCRIPTION_CELLS`]):
/// the depth of clap's descriptions under their option in `--help`.
const NARROW_HANG_DEPTH: usize = 4;

/// The columns to wrap the help to: stdout's terminal's (`stdout_columns`,
/// when stdout is one and says its size), else `COLUMNS` (`columns_env`)
/// when it is a whole number above 0, else the terminal the user is on
/// (`user_terminal_columns`: stderr's, or the controlling terminal's;
/// `vramtop open --help | less` in a shell that does not export
/// `COLUMNS`, as bash does not), else [`DEFAULT_HELP_WIDTH`].
pub fn help_width(
    stdout_columns: Option<u16>,
    columns_env: Option<&OsStr>,
    user_terminal_columns: Option<u16>,
) -> usize {
    let terminal = |columns: Option<u16>| columns.filter(|&w| w > 0).map(usize::from);
    terminal(stdout_columns)
        .or_else(|| {
            columns_env
                .and_then(OsStr::to_str)
                .and_then(|c| c.trim().parse::<usize>().ok())
                .filter(|&w| w > 0)
        })
        .or_else(|| terminal(user_terminal_columns))
        .unwrap_or(DEFAULT_HELP_WIDTH)
}

/// [`help_width`] for this process: stdout's terminal, else `COLUMNS`,
/// else stderr's terminal or the controlling terminal (`/dev/tty`), else
/// [`DEFAULT_HELP_WIDTH`].
pub fn stdout_help_width() -> usize {
    use std::io::IsTerminal as _;
    let stdout_columns = std::io::stdout()
        .is_terminal()
        .then(|| crossterm::terminal::size().ok())
        .flatten()
        .map(|(columns, _rows)| columns);
    // Asked only where stdout is no terminal.
    let user_terminal_columns = stdout_columns
        .is_none()
        .then(user_terminal_columns)
        .flatten();
    help_width(
        stdout_columns,
        std::env::var_os(COLUMNS_ENV).as_deref(),
        user_terminal_columns,
    )
}

/// The columns of the terminal the user is on, where stdout is not one:
/// stderr's when it is a terminal, else the controlling terminal's.
fn user_terminal_columns() -> Option<u16> {
    use std::io::IsTerminal as _;
    let stderr = std::io::stderr();
    stderr
        .is_terminal()
        .then(|| rustix::termios::tcgetwinsize(&stderr).ok())
        .flatten()
        .map(|size| size.ws_col)
        .filter(|&w| w > 0)
        // crossterm asks /dev/tty, the controlling terminal (then stdout,
        // here no terminal); not its `size()`, whose last resort `tput
        // cols` answers 80 from terminfo with no terminal at all.
        .or_else(|| {
            crossterm::terminal::window_size()
                .ok()
                .map(|size| size.columns)
        })
}

/// The clap definition as the binary parses with it: told the width its
/// help is wrapped to ([`stdout_help_width`]), so that clap's own layout
/// (an option's description beside it or under it) is chosen for that
/// width, as with `wrap_help`.
pub fn command() -> clap::Command {
    use clap::CommandFactory as _;
    super::Cli::command().term_width(stdout_help_width())
}

/// `args` (the program, then its arguments) with what `help` reads of
/// its own taken out before clap parses them: `--no-color` before `help`
/// or among its words (`vramtop --no-color help open`, `vramtop help
/// --no-color open`), which [`print_and_exit`] honours where clap would
/// refuse it (the dashboard's option, conflicting with every command),
/// and `--log-file FILE` before it (the help writes no log). `-h` or
/// `--help` among its words asks for the help of `help` itself, as `git
/// help --help` and `cargo help --help` do: clap's `help help`, where
/// clap would take it for a command's name. Any other command line is
/// left as it is.
pub fn help_command_args(args: Vec<OsString>) -> Vec<OsString> {
    let mut k = 1;
    while let Some(arg) = args.get(k) {
        if arg == "--no-color" || arg.to_str().is_some_and(|a| a.starts_with("--log-file=")) {
            k += 1;
        } else if arg == "--log-file" {
            k += 2;
        } else {
            break;
        }
    }
    if args.get(k).is_none_or(|arg| arg != "help") {
        return args;
    }
    let words = args[k + 1..].iter().filter(|w| *w != "--no-color");
    let asks_help_of_help = words.clone().any(|w| w == "-h" || w == "--help");
    let program = args.first().cloned().unwrap_or_else(|| "vramtop".into());
    let mut out = vec![program, "help".into()];
    if asks_help_of_help {
        out.push("help".into());
    } else {
        out.extend(words.cloned());
    }
    out
}

/// Prints the help that clap's "error" `e` carries (`-h`, `--help`,
/// `vramtop help COMMAND`) wrapped to [`stdout_help_width`], on the
/// stream clap would print it on, styled as clap would style it there
/// (bold headings on a terminal; plain into a pipe, or with `NO_COLOR`),
/// then exits with clap's exit code for it (0).
pub fn print_and_exit(e: &clap::Error) -> ! {
    use std::io::Write as _;
    // `--no-color` anywhere on the line (the parse stopped at the help, so
    // the option was not read): no styles, as with NO_COLOR.
    let plain = std::env::args_os().any(|a| a == "--no-color");
    let rendered = if plain {
        e.render().to_string()
    } else {
        e.render().ansi().to_string()
    };
    let text = wrap_help(&rendered, stdout_help_width());
    // A closed stdout (`vramtop --help | head -1`) is no failure, as with
    // clap's own printing.
    let _ = if e.use_stderr() {
        let mut out = anstream::AutoStream::auto(std::io::stderr().lock());
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    } else {
        let mut out = anstream::AutoStream::auto(std::io::stdout().lock());
        out.write_all(text.as_bytes()).and_then(|()| out.flush())
    };
    std::process::exit(e.exit_code())
}

/// `help` (clap's rendering, with or without ANSI styles) with every line
/// wider than `width` cells broken between words, each continuation
/// hanging under the line's description ([`hang`]). A line that fits is
/// left as it is (less its trailing spaces); a word wider than the room
/// under the hang is put on a line of its own, never split. A style open
/// at a break is closed before it and opened again after the indent, so
/// that no indent is underlined.
pub fn wrap_help(help: &str, width: usize) -> String {
    let width = width.max(1);
    let mut out = String::with_capacity(help.len() + help.len() / 16);
    for (k, line) in help.split('\n').enumerate() {
        if k > 0 {
            out.push('\n');
        }
        let line = line.trim_end_matches(' ');
        if cells(line) <= width {
            out.push_str(line);
        } else {
            wrap_line(line, width, &mut out);
        }
    }
    out
}

/// One line of [`wrap_help`] wider than `width`: kept as it is up to its
/// first word at or past the hang column (the indent, an option and the
/// gap to its description), then broken greedily between words.
fn wrap_line(line: &str, width: usize, out: &mut String) {
    let atoms = atoms(line);
    let hang = hang(&atoms, width);
    // The styles in effect (escape sequences since the last reset).
    let mut styles: Vec<&str> = Vec::new();
    // Cells of the line being written.
    let mut used = 0;
    // Whether the description's first word is written: the line may
    // break only after it (before, the indent, the option and the gap to
    // the description column are kept as they are).
    let mut may_break = false;
    let mut k = 0;
    while k < atoms.len() {
        // The gap before the next word, and the word (text and styles up
        // to the next spaces).
        let gap = match atoms[k] {
            Atom::Spaces(n) => n,
            _ => 0,
        };
        let word_start = if gap > 0 { k + 1 } else { k };
        let mut word_end = word_end(&atoms, word_start);
        // "[default: 20]" is one word: a value is not parted from its label.
        if is_label(&atoms[word_start..word_end]) && word_end + 1 < atoms.len() {
            word_end = self::word_end(&atoms, word_end + 1);
        }
        let word = &atoms[word_start..word_end];
        let word_cells: usize = word.iter().map(Atom::cells).sum();
        if !may_break || used + gap + word_cells <= width {
            out.extend(std::iter::repeat_n(' ', gap));
            used += gap;
            // A word at or past the hang column is the description's first.
            if used >= hang && !word.is_empty() {
                may_break = true;
            }
        } else {
            // Break: the open styles closed, the indent, them opened again.
            if !styles.is_empty() {
                out.push_str(RESET);
            }
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', hang));
            for seq in &styles {
                out.push_str(seq);
            }
            used = hang;
        }
        emit(word, &mut styles, out);
        used += word_cells;
        k = word_end;
    }
}

/// Where the word that starts at `start` in `atoms` ends: at the next
/// spaces, or the line's end.
fn word_end(atoms: &[Atom<'_>], start: usize) -> usize {
    atoms[start..]
        .iter()
        .position(|a| matches!(a, Atom::Spaces(_)))
        .map_or(atoms.len(), |p| start + p)
}

/// Whether `word` opens one of clap's bracketed labels, `[default:` (or
/// `[env:`, `[aliases:`): its value follows after a space.
fn is_label(word: &[Atom<'_>]) -> bool {
    let text: String = word
        .iter()
        .filter_map(|a| match *a {
            Atom::Text(t, _) => Some(t),
            _ => None,
        })
        .collect();
    text.starts_with('[') && text.ends_with(':')
}

/// Writes `atoms` to `out`, keeping `styles` (those in effect) up to date.
fn emit<'a>(atoms: &[Atom<'a>], styles: &mut Vec<&'a str>, out: &mut String) {
    for atom in atoms {
        match *atom {
            Atom::Spaces(n) => out.extend(std::iter::repeat_n(' ', n)),
            Atom::Text(text, _) => out.push_str(text),
            Atom::Style(seq) => {
                if is_reset(seq) {
                    styles.clear();
                } else {
                    styles.push(seq);
                }
                out.push_str(seq);
            }
        }
    }
}

/// The escape sequence that ends every style.
const RESET: &str = "\x1b[0m";

/// Whether the escape sequence `seq` ends every style (`ESC[0m`, `ESC[m`).
fn is_reset(seq: &str) -> bool {
    seq == RESET || seq == "\x1b[m"
}

/// A piece of a help line: a run of spaces, a run of other text with its
/// cells, or an escape sequence (no cells).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Atom<'a> {
    Spaces(usize),
    Text(&'a str, usize),
    Style(&'a str),
}

impl Atom<'_> {
    fn cells(&self) -> usize {
        match *self {
            Atom::Spaces(n) => n,
            Atom::Text(_, c) => c,
            Atom::Style(_) => 0,
        }
    }
}

/// `line` as [`Atom`]s.
fn atoms(line: &str) -> Vec<Atom<'_>> {
    let mut atoms = Vec::new();
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        let end = if c == ' ' {
            let n = rest.len() - rest.trim_start_matches(' ').len();
            atoms.push(Atom::Spaces(n));
            n
        } else if c == '\x1b' {
            let n = escape_len(rest);
            atoms.push(Atom::Style(&rest[..n]));
            n
        } else {
            let n = rest.find([' ', '\x1b']).unwrap_or(rest.len());
            let text = &rest[..n];
            atoms.push(Atom::Text(text, text_cells(text)));
            n
        };
        rest = &rest[end..];
    }
    atoms
}

/// The bytes of the escape sequence `text` starts with: a CSI sequence
/// (`ESC [` … a final byte from `@` to `~`), else the escape alone.
fn escape_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    if bytes.get(1) != Some(&b'[') {
        return 1;
    }
    bytes[2..]
        .iter()
        .position(|b| (0x40..=0x7e).contains(b))
        .map_or(bytes.len(), |p| p + 3)
}

/// The cells of text without escape sequences or spaces.
fn text_cells(text: &str) -> usize {
    text.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// The terminal cells `line` takes, its escape sequences none.
pub fn cells(line: &str) -> usize {
    atoms(line).iter().map(Atom::cells).sum()
}

/// The column a line's continuations hang at: its description column (the
/// text after the first gap of two spaces or more past the line's indent:
/// `  diff   Compare…`, `      --top <N>  Sites…`; after `- NAME: ` in a
/// list of possible values; after `Usage: `), else its own indent (a
/// paragraph, a description under its option in `--help`). Where the
/// description column leaves fewer than [`MIN_DESCRIPTION_CELLS`] in
/// `width`, [`NARROW_HANG_DEPTH`] deeper than the indent instead.
fn hang(atoms: &[Atom<'_>], width: usize) -> usize {
    let visible: String = atoms
        .iter()
        .map(|a| match *a {
            Atom::Spaces(n) => " ".repeat(n),
            Atom::Text(t, _) => t.to_string(),
            Atom::Style(_) => String::new(),
        })
        .collect();
    let indent = visible.len() - visible.trim_start_matches(' ').len();
    let body = &visible[indent..];
    let column = if body.starts_with("Usage: ") {
        Some(indent + "Usage: ".len())
    } else if let Some(value) = body.strip_prefix("- ")
        && let Some((name, rest)) = value.split_once(": ")
        && !name.contains(' ')
    {
        let gap = rest.len() - rest.trim_start_matches(' ').len();
        Some(indent + 2 + text_cells(name) + 2 + gap)
    } else {
        body.find("  ").map(|at| {
            let gap = body[at..].len() - body[at..].trim_start_matches(' ').len();
            indent + text_cells(&body[..at]) + gap
        })
    };
    match column {
        Some(c) if width.saturating_sub(c) >= MIN_DESCRIPTION_CELLS => c,
        Some(_) => (indent + NARROW_HANG_DEPTH).min(width / 2),
        None => indent.min(width / 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdouts_terminal_wins_then_columns_then_the_users_terminal_then_100() {
        let columns = Some(OsStr::new("80"));
        assert_eq!(help_width(Some(132), columns, Some(60)), 132);
        assert_eq!(help_width(None, columns, Some(60)), 80);
        assert_eq!(help_width(None, None, Some(60)), 60);
        assert_eq!(help_width(None, None, None), DEFAULT_HELP_WIDTH);
        // A terminal that says 0 columns, a COLUMNS that is no width.
        assert_eq!(help_width(Some(0), columns, Some(60)), 80);
        assert_eq!(help_width(None, None, Some(0)), DEFAULT_HELP_WIDTH);
        for junk in ["", "0", "-80", "80x24", "wide"] {
            let junk = Some(OsStr::new(junk));
            assert_eq!(help_width(None, junk, None), 100, "{junk:?}");
            assert_eq!(help_width(None, junk, Some(60)), 60, "{junk:?}");
        }
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn no_color_and_log_file_are_taken_out_of_a_help_command_line() {
        for (given, parsed) in [
            (
                &["vramtop", "--no-color", "help", "open"][..],
                &["vramtop", "help", "open"][..],
            ),
            (
                &["vramtop", "help", "--no-color", "open"],
                &["vramtop", "help", "open"],
            ),
            (
                &["vramtop", "help", "open", "--no-color"],
                &["vramtop", "help", "open"],
            ),
            (
                &["vramtop", "--log-file", "x.log", "--no-color", "help"],
                &["vramtop", "help"],
            ),
            (
                &["vramtop", "--log-file=x.log", "help", "diff"],
                &["vramtop", "help", "diff"],
            ),
            (&["vramtop", "help", "--help"], &["vramtop", "help", "help"]),
            (
                &["vramtop", "--no-color", "help", "open", "-h"],
                &["vramtop", "help", "help"],
            ),
        ] {
            assert_eq!(help_command_args(os(given)), os(parsed), "{given:?}");
        }
    }

    #[test]
    fn a_command_line_without_the_help_command_is_left_as_it_is() {
        for given in [
            &["vramtop", "--no-color", "open", "help"][..],
            &["vramtop", "--ascii", "help", "open"],
            &["vramtop", "--log-file", "help"],
            &["vramtop", "open", "--no-color", "--help"],
            &["vramtop"],
            &[],
        ] {
            assert_eq!(help_command_args(os(given)), os(given), "{given:?}");
        }
    }

    #[test]
    fn a_line_that_fits_is_left_as_it_is() {
        let help = "Usage: vramtop [OPTIONS]\n\n  diff  Compare two snapshots\n";
        assert_eq!(wrap_help(help, 80), help);
        // Less its trailing spaces (clap's blank line before a default).
        assert_eq!(
            wrap_help("  --top <N>\n          \n", 80),
            "  --top <N>\n\n"
        );
    }

    #[test]
    fn a_commands_description_hangs_under_its_column() {
        let help = "  doctor   Explain what was found, which backend was chosen and why";
        assert_eq!(
            wrap_help(help, 40),
            "  doctor   Explain what was found, which\n           backend was chosen and why"
        );
    }

    #[test]
    fn an_options_description_hangs_under_its_column_and_a_paragraph_at_its_indent() {
        let help = "      --top <N>  Sites and segments listed per section [default: 20]\n\
                    \n          Sites and segments listed in the text output per section";
        assert_eq!(
            wrap_help(help, 50),
            "      --top <N>  Sites and segments listed per\n\
             \x20                section [default: 20]\n\
             \n          Sites and segments listed in the text\n\
             \x20         output per section"
        );
    }

    #[test]
    fn a_default_is_not_parted_from_its_label() {
        let help = "      --interval <DURATION>  Sampling interval (e.g. 1s, 500ms) [default: 1s]";
        assert_eq!(
            wrap_help(help, 72),
            "      --interval <DURATION>  Sampling interval (e.g. 1s, 500ms)\n\
             \x20                            [default: 1s]"
        );
    }

    #[test]
    fn a_possible_value_hangs_under_its_description() {
        let help = "          - user-frame:   The innermost Python frame outside torch";
        assert_eq!(
            wrap_help(help, 50),
            "          - user-frame:   The innermost Python\n\
             \x20                         frame outside torch"
        );
    }

    #[test]
    fn a_word_longer_than_the_room_is_put_on_its_own_line_whole() {
        let path = "~/.local/share/bash-completion/completions/vramtop";
        let help = format!("For example: `vramtop completions bash > {path}`.");
        let wrapped = wrap_help(&help, 30);
        assert_eq!(
            wrapped,
            format!("For example: `vramtop\ncompletions bash >\n{path}`.")
        );
        // At the very narrowest, one word a line, none cut.
        let one_column = wrap_help("a bb ccc", 1);
        assert_eq!(one_column, "a\nbb\nccc");
    }

    #[test]
    fn a_style_open_at_a_break_is_closed_before_it_and_opened_after_the_indent() {
        let bold = "\x1b[1m";
        let help = format!("Usage: {bold}vramtop open [OPTIONS] <FILE> [MORE] [ARGS]{RESET}");
        let wrapped = wrap_help(&help, 40);
        assert_eq!(
            wrapped,
            format!(
                "Usage: {bold}vramtop open [OPTIONS] <FILE>{RESET}\n       {bold}[MORE] [ARGS]{RESET}"
            )
        );
        for line in wrapped.lines() {
            assert!(cells(line) <= 40, "{line:?}");
        }
    }

    #[test]
    fn escape_sequences_take_no_cells() {
        assert_eq!(cells("\x1b[1m\x1b[4mOptions:\x1b[0m"), 8);
        assert_eq!(cells("训练 −"), 6);
    }
}
