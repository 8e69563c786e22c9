//! Quoting input in messages: what a user or a probe sent is shown cut to a
//! readable length, so a 50 MB value does not make a 50 MB error line.

use std::fmt::Write as _;

/// The most characters of input a message quotes.
pub const MAX_QUOTED_CHARS: usize = 60;

/// `text` whole when it is short, else its first [`MAX_QUOTED_CHARS`]
/// characters, "…" and its length: "xxxx… (52428800 bytes)".
pub fn cut(text: &str) -> String {
    cut_to(text, MAX_QUOTED_CHARS)
}

/// `text` cut to `max_chars` characters the same way: for a message of
/// someone else's (a parser's) that may quote input whole. Control
/// characters are written as escapes (`\n`, `\u{1b}`), so a quote stays
/// on one line and cannot move the terminal's cursor.
pub fn cut_to(text: &str, max_chars: usize) -> String {
    let (shown, rest) = match text.char_indices().nth(max_chars) {
        None => (text, false),
        Some((end, _)) => (&text[..end], true),
    };
    let mut out = escape_controls(shown);
    if rest {
        // Writing to a String cannot fail.
        let _ = write!(out, "… ({} bytes)", text.len());
    }
    out
}

/// Whether `text` is a whole number written in digits only (no sign, no
/// point): what every count, index and event number is written as.
pub fn is_digits(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
}

/// The error for a whole number outside `min..=max`, digits past what the
/// value's type holds included: "'99999999999999999999' is not in
/// 0..=64". A number is never "not a count" or "not a moment" for being
/// too large, and never the standard library's "number too large to fit
/// in target type", which names no range.
pub fn not_in_range(text: &str, min: u64, max: u64) -> String {
    format!("'{}' is not in {min}..={max}", cut(text))
}

/// An I/O error as a one-line reason for people: "Is a directory", not
/// "Is a directory (os error 21)". The error number is the system's, and
/// says nothing the words do not.
pub fn io_reason(e: &std::io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

/// `text` with its control characters written as escapes (`\n`, `\t`,
/// `\u{1b}`, `\u{7}`: as `escape_debug` writes them) and every other
/// character kept: a terminal escape sequence in input shows as what
/// was typed, and never reaches the terminal to act.
pub fn escape_controls(text: &str) -> String {
    escape_where(text, char::is_control)
}

/// `text` with the characters `escaped` picks written as `escape_debug`
/// writes them, the others kept.
fn escape_where(text: &str, escaped: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if escaped(c) {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` with every control character replaced by a visible stand-in of
/// the same width it is drawn with: `^[` for ESC, `^G` for BEL, `^?` for
/// DEL (caret notation, as `cat -v` writes them) and `?` for the C1
/// controls (U+0080–U+009F). For strings a probe sends (its argv, host,
/// messages): they are drawn in cells, where a dropped control character
/// would still be counted in the width, and an escape sequence must never
/// reach the terminal. Borrowed when there is none.
pub fn visible_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match u32::from(c) {
            n @ 0..=0x1f => {
                out.push('^');
                // 0x40..=0x5f: '@', 'A'..='Z', '[', '\\', ']', '^', '_'.
                out.push(char::from_u32(n + 0x40).unwrap_or('?'));
            }
            0x7f => out.push_str("^?"),
            _ if c.is_control() => out.push('?'),
            _ => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `text` for a terminal, its lines and tabs kept: every other control
/// character written as [`escape_controls`] writes it. What vramtop prints
/// carries names from files and processes (a snapshot's frame names, a
/// probe's command line): an escape sequence there would recolour, clear
/// or retitle the user's terminal. Borrowed when there is none (the usual
/// case: one pass over the text, no copy).
pub fn for_terminal(text: &str) -> std::borrow::Cow<'_, str> {
    let acts = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.contains(acts) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(escape_where(text, acts))
}

/// `text` as one word for a POSIX shell (sh, bash, zsh), for a command
/// vramtop shows to be pasted ("vramtop replay FILE"): unchanged when every
/// character is one no shell reads specially (letters and digits, also
/// non-ASCII ones, and `_ - . / , : @ % + =`, the set of Python's
/// `shlex.quote` with letters of every script; `=` not first, which zsh
/// expands to a command's path), else in single quotes, each
/// `'` inside written `'\''` (close, an escaped quote, reopen). Empty text
/// is `''`, an empty argument.
pub fn shell_word(text: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_alphanumeric() || "_-./,:@%+=".contains(c);
    if !text.is_empty() && !text.starts_with('=') && text.chars().all(plain) {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(format!("'{}'", text.replace('\'', "'\\''")))
}

/// A file's path as [`shell_word`] writes it, for a command's argument:
/// a relative path starting with `-` gets `./` first, or the command
/// would read it as an option.
pub fn shell_path(path: &str) -> String {
    if path.starts_with('-') {
        shell_word(&format!("./{path}")).into_owned()
    } else {
        shell_word(path).into_owned()
    }
}

/// A parser's complaint about `text` as one line: "line 3, column 7: …",
/// the message's runs of whitespace (toml's echo of the source line, its
/// caret lines) folded to single spaces and the whole cut to `max_chars`.
/// `offset` is the byte where the parser stopped, when it says; line and
/// column count from 1, the column in characters.
pub fn parser_complaint(
    text: &str,
    offset: Option<usize>,
    message: &str,
    max_chars: usize,
) -> String {
    let place = offset
        .and_then(|offset| text.get(..offset))
        .map(|before| {
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: ")
        })
        .unwrap_or_default();
    let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{place}{}", cut_to(&message, max_chars))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_starting_with_a_dash_is_written_from_the_current_folder() {
        assert_eq!(shell_path("-x.pickle"), "./-x.pickle");
        assert_eq!(shell_path("-my run.pickle"), "'./-my run.pickle'");
        assert_eq!(shell_path("/tmp/-x.pickle"), "/tmp/-x.pickle");
        assert_eq!(shell_path("my run.pickle"), "'my run.pickle'");
    }

    #[test]
    fn shell_word_quotes_only_what_a_shell_would_read_specially() {
        for plain in [
            "vramtop-stress-1765000000.pickle",
            "/tmp/a_b/c,d:e@f%g+h=i",
            "é/日本.pickle",
        ] {
            assert!(
                matches!(shell_word(plain), std::borrow::Cow::Borrowed(p) if p == plain),
                "{plain}"
            );
        }
        assert_eq!(
            shell_word("/tmp/my runs/a.pickle"),
            "'/tmp/my runs/a.pickle'"
        );
        assert_eq!(shell_word("it's.pickle"), r"'it'\''s.pickle'");
        assert_eq!(shell_word(""), "''");
        for special in [
            "$HOME", "a;b", "*.pickle", "~/x", "a\\b", "(x)", "a\"b", "a\tb", "!x", "#x", "=x",
        ] {
            assert_eq!(shell_word(special), format!("'{special}'"), "{special}");
        }
        // A no-break space is no letter: quoted, as a space is.
        assert_eq!(shell_word("a\u{a0}b"), "'a\u{a0}b'");
    }

    /// What `sh` makes of a quoted word is the text: each one given to
    /// `printf %s` comes back byte for byte.
    #[cfg(unix)]
    #[test]
    fn a_shell_reads_each_quoted_word_back_as_the_text() {
        for text in [
            "plain.pickle",
            "/tmp/my runs/it's a \"test\".pickle",
            "''",
            "$(touch /nonexistent/x) `id` $HOME ~ * ? [a] {a,b} ; & | < > \\ !",
            "é 日本",
            "",
        ] {
            let script = format!("printf %s {}", shell_word(text));
            let out = std::process::Command::new("sh")
                .arg("-c")
                .arg(&script)
                .output()
                .expect("sh runs");
            assert!(out.status.success(), "{script}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), text, "{script}");
        }
    }

    #[test]
    fn visible_controls_writes_each_control_as_carets_of_the_width_drawn() {
        assert_eq!(
            visible_controls("\x1b]0;PWNED\x07train\x1b[2J.py"),
            "^[]0;PWNED^Gtrain^[[2J.py"
        );
        assert_eq!(visible_controls("a\nb\tc\x7fd\u{9b}e"), "a^Jb^Ic^?d?e");
        assert!(matches!(
            visible_controls("train.py é 日本"),
            std::borrow::Cow::Borrowed("train.py é 日本")
        ));
    }

    #[test]
    fn text_for_a_terminal_keeps_lines_and_tabs_and_escapes_the_rest() {
        let plain = "a\tb\nc é";
        assert!(matches!(for_terminal(plain), std::borrow::Cow::Borrowed(_)));
        assert_eq!(for_terminal(plain), plain);
        assert_eq!(
            for_terminal("\u{1b}[31mevil\u{1b}]0;T\u{7}.py:7\r\n"),
            "\\u{1b}[31mevil\\u{1b}]0;T\\u{7}.py:7\\r\n"
        );
    }

    #[test]
    fn short_text_is_whole_and_long_text_is_cut_with_its_length() {
        assert_eq!(cut("2s"), "2s");
        let exact = "a".repeat(MAX_QUOTED_CHARS);
        assert_eq!(cut(&exact), exact);
        let long = "é".repeat(1000);
        let shown = cut(&long);
        assert!(shown.starts_with(&"é".repeat(MAX_QUOTED_CHARS)));
        assert!(shown.ends_with("… (2000 bytes)"), "{shown}");
    }

    #[test]
    fn control_characters_are_quoted_as_escapes_on_one_line() {
        assert_eq!(cut("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(cut("\u{1b}[2J"), "\\u{1b}[2J");
        assert_eq!(
            escape_controls("a\u{1b}]0;T\u{7}é\u{9b}"),
            "a\\u{1b}]0;T\\u{7}é\\u{9b}"
        );
        let long = "\n".repeat(100);
        let shown = cut(&long);
        assert!(!shown.contains('\n'), "{shown}");
        assert!(shown.ends_with("… (100 bytes)"), "{shown}");
    }

    #[test]
    fn parser_complaint_names_line_and_column_and_stays_on_one_line() {
        let text = "a = 1\nb = \"é x\n";
        let offset = text.find('x');
        let shown = parser_complaint(text, offset, "bad\n  | b = ...\n  ^\n", 200);
        assert_eq!(shown, "line 2, column 8: bad | b = ... ^");
        // At the very start of a line, the line is that one, not the one before.
        let at_start = parser_complaint("a\nb\n", Some(4), "end", 200);
        assert_eq!(at_start, "line 3, column 1: end");
        assert_eq!(parser_complaint("x", None, "no place", 200), "no place");
        // An offset off the text or inside a character gives no place.
        assert_eq!(parser_complaint("é", Some(1), "m", 200), "m");
        assert_eq!(parser_complaint("ab", Some(9), "m", 200), "m");
        assert!(parser_complaint("", None, &"w ".repeat(500), 10).ends_with("bytes)"));
    }
}
