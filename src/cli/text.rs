//! Word wrap for the reports the commands print, so that every line reads
//! whole on an 80-column terminal whatever a file gave them (a scenario's
//! title, a step's label, a long note).

/// Greedy word wrap: every line at most `width` characters, runs of
/// whitespace folded. A word longer than that (a Python call in a step's
/// label: `optimizer.zero_grad(set_to_none=True)`) is broken where it
/// reads best ([`break_long_word`]), each piece after the first on a line
/// of its own, not left to run past.
pub fn wrap(text: &str, width: usize) -> String {
    wrap_hanging(text, width, 0)
}

/// [`wrap`] with every line after the first indented by `indent` spaces
/// (within `width`): a heading or a `note: ` that runs over reads as one
/// block hanging from its first line.
pub fn wrap_hanging(text: &str, width: usize, indent: usize) -> String {
    wrap_words(text.split_whitespace(), width, indent)
}

/// `words` joined by single spaces in lines of at most `width`
/// characters, every line after the first indented by `indent` spaces. A
/// "word" may be a phrase with spaces of its own ("peak allocated
/// 1.50 GiB,"): it is kept on one line when it fits one, so a figure is
/// not parted from its unit.
pub fn wrap_words<'a>(
    words: impl IntoIterator<Item = &'a str>,
    width: usize,
    indent: usize,
) -> String {
    let width = width.max(1);
    // An indent as wide as the line would leave no room for a word.
    let indent = indent.min(width - 1);
    // Pieces of a broken word fit an indented line, so they fit any line.
    let room = width - indent;
    let margin = " ".repeat(indent);
    let mut out = String::new();
    // Characters on the current line, its indent included.
    let mut used = 0;
    let mut line_has_words = false;
    for word in words {
        for (k, piece) in break_long_word(word, room).iter().enumerate() {
            let len = piece.chars().count();
            // A broken word's later pieces always start a line.
            if line_has_words && (k > 0 || used + 1 + len > width) {
                out.push('\n');
                out.push_str(&margin);
                used = indent;
                line_has_words = false;
            }
            if line_has_words {
                out.push(' ');
                used += 1;
            }
            out.push_str(piece);
            used += len;
            line_has_words = true;
        }
    }
    out
}

/// Characters a long word is best broken after, most readable first: a
/// call's opening parenthesis or an argument's comma, a path's slash, a
/// dotted name's dot; then the joints inside a name.
const WORD_BREAKS: [&[char]; 2] = [&['(', ',', '/', '.'], &['_', '=', '-', ':']];

/// `word` in pieces of at most `width` characters (`width` ≥ 1): each
/// piece ends after the last character of the most readable kind of
/// [`WORD_BREAKS`] that leaves it at least half the width, else at
/// `width` characters.
fn break_long_word(word: &str, width: usize) -> Vec<&str> {
    let width = width.max(1);
    let mut pieces = Vec::new();
    let mut rest = word;
    while rest.chars().count() > width {
        // Byte offsets just past each of the first `width` characters.
        let ends: Vec<(usize, char)> = rest
            .char_indices()
            .take(width)
            .map(|(at, c)| (at + c.len_utf8(), c))
            .collect();
        let hard = ends.last().map_or(rest.len(), |&(end, _)| end);
        let half = width.div_ceil(2);
        let soft = WORD_BREAKS.iter().find_map(|breaks| {
            ends.iter()
                .enumerate()
                .rev()
                .take_while(|&(chars, _)| chars + 1 >= half)
                .find(|(_, (_, c))| breaks.contains(c))
                .map(|(_, &(end, _))| end)
        });
        let (piece, after) = rest.split_at(soft.unwrap_or(hard));
        pieces.push(piece);
        rest = after;
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(rest);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_word_longer_than_its_column_breaks_after_punctuation_else_at_the_width() {
        assert_eq!(
            break_long_word("optimizer.zero_grad(set_to_none=True)", 33),
            ["optimizer.zero_grad(", "set_to_none=True)"]
        );
        // No place that reads well: at the width, whole characters.
        assert_eq!(break_long_word("ab×cd×ef", 3), ["ab×", "cd×", "ef"]);
        assert_eq!(break_long_word("short", 33), ["short"]);
        assert_eq!(
            wrap("a optimizer.zero_grad(set_to_none=True) b", 20),
            "a\noptimizer.zero_grad(\nset_to_none=True) b"
        );
    }

    #[test]
    fn continuation_lines_hang_under_the_first_and_stay_within_the_width() {
        assert_eq!(
            wrap_hanging("note: one two three four five", 16, 6),
            "note: one two\n      three four\n      five"
        );
        // A word too long for an indented line breaks to fit one.
        let wrapped = wrap_hanging(&format!("== {}", "x".repeat(30)), 12, 3);
        for line in wrapped.lines() {
            assert!(line.chars().count() <= 12, "{wrapped}");
        }
        assert_eq!(wrapped.lines().nth(1), Some("   xxxxxxxxx"));
        // An indent as wide as the line still leaves a character of room.
        assert_eq!(wrap_hanging("a b", 2, 5), "a\n b");
        assert_eq!(wrap_hanging("", 10, 2), "");
    }

    #[test]
    fn a_phrase_stays_on_one_line_when_it_fits_one() {
        let phrases = ["peak allocated 74.51 GiB,", "peak reserved 75.50 GiB,"];
        assert_eq!(
            wrap_words(phrases, 30, 2),
            "peak allocated 74.51 GiB,\n  peak reserved 75.50 GiB,"
        );
    }
}
