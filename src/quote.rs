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
/// someone else's (a parser's) that may quote input whole.
pub fn cut_to(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        None => text.to_string(),
        Some((end, _)) => format!("{}… ({} bytes)", &text[..end], text.len()),
    }
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
}
