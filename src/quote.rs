//! Quoting input in messages: what a user or a probe sent is shown cut to a
//! readable length, so a 50 MB value does not make a 50 MB error line.

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
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    if rest {
        out.push_str(&format!("… ({} bytes)", text.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let long = "\n".repeat(100);
        let shown = cut(&long);
        assert!(!shown.contains('\n'), "{shown}");
        assert!(shown.ends_with("… (100 bytes)"), "{shown}");
    }
}
