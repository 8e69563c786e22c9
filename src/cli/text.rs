//! Word wrap and elision for the reports the commands print, so that every
//! line reads whole on an 80-column terminal whatever a file gave them (a
//! scenario's title, a step's label, a long note, a site's frame name, a
//! path). Widths are terminal cells, not characters: a CJK character or an
//! emoji takes two, a combining mark none.

use crate::ui::format::unit_words;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

pub use crate::ui::format::{elide_middle, elide_path};

/// Columns every line of a text report fits: an 80-column terminal.
pub const REPORT_WIDTH: usize = 80;

thread_local! {
    /// Whether a report prints its file's path whole: when its stdout is
    /// not a terminal (a pipe, a file), where a `…` in place of folders
    /// would keep `grep` and the reader from the path. Set by the command
    /// ([`print_paths_whole`]); a terminal's 80-column elision otherwise.
    static PATHS_WHOLE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Reports rendered on this thread from now on print their file's path
/// whole (`true`: stdout is not a terminal) or elide its folders to fit
/// 80 columns (`false`, the default).
pub fn print_paths_whole(whole: bool) {
    PATHS_WHOLE.with(|w| w.set(whole));
}

/// See [`print_paths_whole`].
pub fn paths_whole() -> bool {
    PATHS_WHOLE.with(std::cell::Cell::get)
}

/// The terminal cells `text` takes.
pub fn cells(text: &str) -> usize {
    text.width()
}

/// The terminal cells `c` takes (none for a control character).
fn char_cells(c: char) -> usize {
    c.width().unwrap_or(0)
}

/// `text` in at most `width` cells: whole when it fits, else its start
/// followed by `…` (a site's label: its file and line come first and
/// say which site it is).
pub fn elide_end(text: &str, width: usize) -> String {
    if cells(text) <= width {
        return text.to_string();
    }
    let Some(room) = width.checked_sub(1) else {
        return String::new();
    };
    let mut out = String::new();
    for c in text.chars() {
        out.push(c);
        // The string's cells, not the sum of its characters': a sign
        // that joins the character before it can widen the pair.
        if cells(&out) > room {
            out.pop();
            break;
        }
    }
    out.push('…');
    out
}

/// `path` in at most `width` cells for a report's header, its file name
/// whole: the path itself where it fits, else `…` and as many of its last
/// folders as fit in front of the name, each whole
/// (`…/runs/2026-12-06/s.pickle`), so that two paths shortened one above
/// the other read alike whatever each starts with. A name too wide for
/// `…/` beside it is [`elide_path`]'s.
pub fn elide_folders(path: &str, width: usize) -> String {
    if cells(path) <= width {
        return path.to_string();
    }
    let Some(name_at) = path.rfind('/') else {
        return elide_path(path, width);
    };
    let fits = |from: usize| cells("…") + cells(&path[from..]) <= width;
    if !fits(name_at) {
        return elide_path(path, width);
    }
    // Back over whole folders while they fit (a folder's `/` leads it).
    let mut from = name_at;
    while let Some(folder_at) = path[..from].rfind('/') {
        if !fits(folder_at) {
            break;
        }
        from = folder_at;
    }
    format!("…{}", &path[from..])
}

/// Cells a lead leaves for the text after it, at the least; a wider lead
/// hangs the text 4 cells in instead.
const MIN_ROOM: usize = 20;

/// `lead` (kept as it is, spaces and all: `"  segsum               "`)
/// then `text` wrapped in the `width` cells left after it, each later
/// line under the text's start. The text breaks after a `, ` or a `; `
/// where it can, so that a figure stays with its unit (`total_free
/// 1.50 GiB,`); a clause too long for a line breaks between its words,
/// never between a figure and its unit ([`unit_words`]). A lead too wide
/// to leave 20 cells hangs the text 4 cells in instead.
pub fn wrap_under(lead: &str, text: &str, width: usize) -> String {
    wrap_phrases_under(lead, clauses(text), width)
}

/// [`wrap_under`] with the text given in phrases: each is kept on one line
/// where it fits one (a site's label, a frame of a `called from` list),
/// else broken between its words as a clause is.
pub fn wrap_phrases_under<'a>(
    lead: &str,
    phrases: impl IntoIterator<Item = &'a str>,
    width: usize,
) -> String {
    let lead_cells = cells(lead);
    let hanging = lead_cells + MIN_ROOM > width;
    let room = if hanging {
        width.saturating_sub(4).max(1)
    } else {
        width - lead_cells
    };
    let pieces = phrases.into_iter().flat_map(|phrase| {
        if cells(phrase) <= room {
            vec![phrase]
        } else {
            unit_words(phrase)
        }
    });
    if hanging {
        return wrap_words(lead.split_whitespace().chain(pieces), width, 4);
    }
    let margin = " ".repeat(lead_cells);
    let mut out = String::new();
    for (k, line) in wrap_words(pieces, room, 0).split('\n').enumerate() {
        if k > 0 {
            out.push('\n');
        }
        out.push_str(if k == 0 { lead } else { &margin });
        out.push_str(line);
    }
    out
}

/// `path: rest` for a report's first line: on one line when `rest` fits
/// whole beside the path; else the path on a line of its own (the folders that do not fit left
/// out for a `…`, [`elide_folders`], its file name whole, so that it can
/// be copied) and
/// `rest` under it, 2 cells in. Only a file name wider than the line by
/// itself is broken, onto the lines after.
pub fn path_heading(path: &str, rest: &str, width: usize) -> String {
    let lead = format!("{path}: ");
    // Wrapped under a path that left room for each clause, the figures
    // hung at whatever column the path's length put them (49 for one
    // file, under the path for the next): the same report read two ways.
    if cells(&lead) + cells(rest) <= width {
        return format!("{lead}{rest}");
    }
    // Piped: the path on its line whole, however wide, to be grepped.
    if paths_whole() {
        return format!("{path}:\n{}", wrap_under("  ", rest, width));
    }
    let name = &path[path.rfind('/').map_or(0, |at| at + 1)..];
    // `…`, a cell of the folders and the `:` beside the name.
    let shown = if cells(name) + 3 <= width {
        elide_folders(path, width - 1)
    } else {
        name.to_string()
    };
    let head = format!("{shown}:");
    format!(
        "{}\n{}",
        wrap_words([head.as_str()], width, 0),
        wrap_under("  ", rest, width)
    )
}

/// `text` in clauses: each ends after a `,` or `;` that a space follows
/// (`a,b` stays whole), whitespace around them trimmed.
fn clauses(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let rest_now = rest.trim_start();
        if rest_now.is_empty() {
            return None;
        }
        let end = rest_now
            .match_indices([',', ';'])
            .map(|(at, _)| at + 1)
            .find(|&end| rest_now[end..].starts_with(char::is_whitespace))
            .unwrap_or(rest_now.len());
        let (clause, after) = rest_now.split_at(end);
        rest = after;
        Some(clause.trim_end())
    })
}

/// Greedy word wrap: every line at most `width` cells, runs of
/// whitespace folded. A word longer than that (a Python call in a step's
/// label: `optimizer.zero_grad(set_to_none=True)`) is broken where it
/// reads best ([`break_long_word`]), each piece after the first on a line
/// of its own, not left to run past.
pub fn wrap(text: &str, width: usize) -> String {
    wrap_hanging(text, width, 0)
}

/// [`wrap`] with every line after the first indented by `indent` spaces
/// (within `width`): a heading or a `note: ` that runs over reads as one
/// block hanging from its first line. A figure keeps its unit
/// ([`unit_words`]).
pub fn wrap_hanging(text: &str, width: usize, indent: usize) -> String {
    wrap_words(unit_words(text), width, indent)
}

/// `words` joined by single spaces in lines of at most `width` cells, every line after the first indented by `indent` spaces. A
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
    // Cells of the current line, its indent included.
    let mut used = 0;
    let mut line_has_words = false;
    for word in words {
        for (k, piece) in break_long_word(word, room).iter().enumerate() {
            let len = cells(piece);
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
/// path's slash (a file name is not broken where its folders can be);
/// a call's opening parenthesis or an argument's comma, a dotted name's
/// dot, a template's `<`; a C++ scope's `::` (a qualified name parts
/// between its names, not inside one); then the joints inside a name.
const WORD_BREAKS: [&[char]; 4] = [&['/'], &['(', ',', '.', '<'], &[':'], &['_', '=', '-']];

/// `word` in pieces of at most `width` cells (`width` ≥ 1; a character
/// wider than that is a piece of its own): each piece ends after the last
/// `/` in the width (a path's folders, however short the piece, so that
/// its file name stays whole), else after the last character of the most
/// readable kind of [`WORD_BREAKS`] that leaves it at least half the
/// width, else at `width` cells.
fn break_long_word(word: &str, width: usize) -> Vec<&str> {
    let width = width.max(1);
    let half = width.div_ceil(2);
    let third = width.div_ceil(3);
    let mut pieces = Vec::new();
    let mut rest = word;
    while cells(rest) > width {
        // Byte offset just past each character that ends within `width`
        // cells (the first always), with the cells up to it.
        let mut ends: Vec<(usize, char, usize)> = Vec::new();
        let mut used = 0;
        for (at, c) in rest.char_indices() {
            used += char_cells(c);
            if used > width && !ends.is_empty() {
                break;
            }
            ends.push((at + c.len_utf8(), c, used));
        }
        let hard = ends.last().map_or(rest.len(), |&(end, _, _)| end);
        let soft = WORD_BREAKS.iter().enumerate().find_map(|(kind, breaks)| {
            // A scope's `::` may leave a shorter piece than the joints
            // inside a name may: "at::native::" reads better alone than a
            // name cut at its underscore.
            let least = match kind {
                0 => 0,
                2 => third,
                _ => half,
            };
            ends.iter()
                .rev()
                .take_while(|&&(_, _, used)| used >= least)
                .find(|&&(end, c, _)| {
                    let next = rest[end..].chars().next();
                    if kind == 2 {
                        // After a scope's `::`, or just before one that
                        // would not fit whole: never between its colons.
                        (c == ':' && next != Some(':'))
                            || (c != ':' && rest[end..].starts_with("::"))
                    } else {
                        breaks.contains(&c)
                    }
                })
                .map(|&(end, _, _)| end)
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
    fn elide_end_fits_a_text_whose_signs_widen_the_character_before() {
        // "☺" takes 1 cell, with the emoji selector after it 2.
        let text = "☺\u{fe0f}".repeat(10);
        let cut = elide_end(&text, 5);
        assert!(cells(&cut) <= 5, "{cut:?}: {} cells", cells(&cut));
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn a_word_longer_than_its_column_breaks_after_punctuation_else_at_the_width() {
        assert_eq!(
            break_long_word("optimizer.zero_grad(set_to_none=True)", 33),
            ["optimizer.zero_grad(", "set_to_none=True)"]
        );
        // No place that reads well: at the width, whole characters.
        assert_eq!(break_long_word("ab×cd×ef", 3), ["ab×", "cd×", "ef"]);
        assert_eq!(break_long_word("short", 33), ["short"]);
        // A qualified C++ name parts after a scope's `::`, not inside a
        // name at its last underscore.
        assert_eq!(
            break_long_word(
                "namespace)::structured_bmm_out_cuda_functional::set_output_raw_strided(long,",
                60
            ),
            [
                "namespace)::structured_bmm_out_cuda_functional::",
                "set_output_raw_strided(long,"
            ]
        );
        // A scope's `::` that reaches past the width goes whole to the
        // next piece: never one colon on each line.
        assert_eq!(
            break_long_word("MaxPool2DWithIndicesBackward0::apply", 30),
            ["MaxPool2DWithIndicesBackward0", "::apply"]
        );
        // A template name in a narrow column: after its scopes and its `<`,
        // not at an underscore inside the name.
        assert_eq!(
            break_long_word(
                "at::native::_empty_strided_generic<c10::ArrayRef<long>>",
                30
            ),
            [
                "at::native::",
                "_empty_strided_generic<",
                "c10::ArrayRef<long>>"
            ]
        );
        // A path breaks at a folder, not at a dot in its file name, even
        // where that leaves a short piece.
        assert_eq!(
            break_long_word("/etc/vramtop/node.h100.config.toml", 24),
            ["/etc/vramtop/", "node.h100.config.toml"]
        );
        assert_eq!(
            break_long_word("/etc/vramtop-config-for-the-h100-nodes.toml", 40),
            ["/etc/", "vramtop-config-for-the-h100-nodes.toml"]
        );
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
            assert!(cells(line) <= 12, "{wrapped}");
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

    #[test]
    fn wide_characters_count_two_cells_when_wrapping_and_breaking() {
        // Eight CJK characters and a `_`: 17 cells, though 9 characters.
        let step = "训练步骤_前向传播";
        assert_eq!(cells(step), 17);
        let wrapped = wrap(&[step; 6].join(" "), 40);
        for line in wrapped.lines() {
            assert!(cells(line) <= 40, "{} cells: {line}", cells(line));
        }
        assert_eq!(wrapped.lines().count(), 3, "{wrapped}");
        // One long word of them breaks after its `_` or at the width.
        let word = step.repeat(5);
        for piece in break_long_word(&word, 16) {
            assert!(cells(piece) <= 16, "{piece}");
        }
        assert_eq!(
            break_long_word(&word, 16)[..2],
            ["训练步骤_", "前向传播训练步骤"]
        );
        // A character wider than the width is a piece of its own.
        assert_eq!(break_long_word("训练", 1), ["训", "练"]);
    }

    #[test]
    fn a_long_path_keeps_its_file_name_and_loses_the_middle_of_its_folders() {
        let path = "/work/shared/a/very/deep/folder/of/copies/muduard_dump_snapshot_a.pickle";
        assert_eq!(elide_path(path, 200), path);
        let short = elide_path(path, 50);
        assert_eq!(cells(&short), 50, "{short}");
        assert_eq!(short, "/work/shar…f/copies/muduard_dump_snapshot_a.pickle");
        // A name too long for the width keeps its start and extension.
        let name = elide_path(path, 20);
        assert_eq!(name, "/work/shar…_a.pickle");
        // Wide characters: cells, not characters, fit the width.
        let wide = format!("/数据/{}/快照.pickle", "目录".repeat(20));
        let cut = elide_path(&wide, 30);
        assert!(cells(&cut) <= 30 && cut.ends_with("/快照.pickle"), "{cut}");
        assert_eq!(elide_path(path, 0), "");
        // Two cells beside the name: its `/` is kept, not the folders' first.
        assert_eq!(elide_path(path, 32), "…/muduard_dump_snapshot_a.pickle");
    }

    #[test]
    fn an_elided_label_keeps_its_start_within_the_cells_given() {
        assert_eq!(elide_end("model.py:12 forward", 30), "model.py:12 forward");
        assert_eq!(elide_end("model.py:12 forward", 12), "model.py:12…");
        assert_eq!(elide_end("训练步骤", 5), "训练…");
        assert_eq!(elide_end("abc", 0), "");
        assert_eq!(elide_middle("abcdefghij", 5), "ab…ij");
    }

    #[test]
    fn text_after_a_lead_wraps_under_its_start() {
        let lead = "  segsum   ";
        let text = wrap_under(lead, "total_reserved 1 GiB, total_allocated 2 GiB", 36);
        assert_eq!(
            text,
            "  segsum   total_reserved 1 GiB,\n           total_allocated 2 GiB"
        );
        // Clauses stay whole when they fit: a figure keeps its unit.
        assert_eq!(
            wrap_under("  at ", "peak 1.50 GiB, conf a,b; reserved 2 GiB", 26),
            "  at peak 1.50 GiB,\n     conf a,b;\n     reserved 2 GiB"
        );
        // A lead that leaves no room hangs the text 4 cells in.
        let wide = wrap_under(&"x".repeat(70), "one two three", 80);
        for line in wide.lines() {
            assert!(cells(line) <= 80, "{wide}");
        }
    }

    #[test]
    fn a_figure_is_never_parted_from_its_unit() {
        assert_eq!(
            unit_words("reserved 3.01 GiB (3232 B), 5%  left, block B"),
            [
                "reserved",
                "3.01 GiB",
                "(3232 B),",
                "5%",
                "left,",
                "block",
                "B"
            ]
        );
        // A clause too long for its line breaks between words, not
        // between `3.01` and `GiB`.
        let text = "reserved and then some more 3.01 GiB (3232323232 B)";
        let wrapped = wrap_under("x: ", text, 32);
        assert_eq!(
            wrapped,
            "x: reserved and then some more\n   3.01 GiB (3232323232 B)"
        );
        assert_eq!(wrap("abc 3.01 GiB", 10), "abc\n3.01 GiB");
        // A lead too wide hangs the text, and still keeps units.
        let hung = wrap_hanging("a b c reserved 3.01 GiB", 16, 4);
        assert_eq!(hung, "a b c reserved\n    3.01 GiB");
    }

    #[test]
    fn phrases_stay_whole_where_they_fit_and_break_between_words_else() {
        let frames = ["model.py:397 forward", "model.py:384 forward"];
        assert_eq!(
            wrap_phrases_under("  called from ", frames, 40),
            "  called from model.py:397 forward\n              model.py:384 forward"
        );
        let label = ["attention_processor.py:1262 _chunked_feed_forward"];
        assert_eq!(
            wrap_phrases_under("  1 GiB  ", label, 40),
            "  1 GiB  attention_processor.py:1262\n         _chunked_feed_forward"
        );
    }

    #[test]
    fn a_heading_puts_a_path_too_long_to_share_its_line_on_its_own_with_the_name_whole() {
        // Room beside it: one line.
        assert_eq!(
            path_heading("a.pkl", "7 segments on 1 device", 80),
            "a.pkl: 7 segments on 1 device"
        );
        // A file in the current folder: its name whole on its own line.
        let name = "shreyansh26_MLSys-Experiments_model_memory_usage_profile_grad.pkl";
        assert_eq!(
            path_heading(name, "7 segments on 1 device", 80),
            format!("{name}:\n  7 segments on 1 device")
        );
        // A deep path loses its first folders, never its name.
        let deep = format!("/work/{}{name}", "folder/".repeat(10));
        let heading = path_heading(&deep, "7 segments on 1 device", 80);
        let first = heading.lines().next().unwrap_or_default();
        assert!(first.contains('…'), "{heading}");
        assert!(first.ends_with(&format!("/{name}:")), "{heading}");
        assert!(cells(first) <= 80, "{heading}");
        // Wide characters count two cells: the path's 73 cells leave no
        // room beside it.
        let cjk = format!("/数据/{}.pickle", "训练".repeat(15));
        assert_eq!(cells(&cjk), 73);
        let heading = path_heading(&cjk, "1 segment on 1 device", 80);
        assert_eq!(heading, format!("{cjk}:\n  1 segment on 1 device"));
        // Only a name wider than the line by itself breaks, whole.
        let long = "n".repeat(100);
        let heading = path_heading(&format!("/d/{long}.pkl"), "1 segment", 80);
        for line in heading.lines() {
            assert!(cells(line) <= 80, "{heading}");
        }
        let joined: String = heading.lines().take(2).collect();
        assert_eq!(joined, format!("{long}.pkl:"));
    }

    #[test]
    fn a_heading_too_long_for_one_line_puts_the_path_on_its_own_whatever_its_length() {
        let rest = "5 segments, 17 blocks, reserved 250 MiB (262144000 B), allocated 8.50 KiB \
                    (8704 B), 1040 trace entries";
        // A path that leaves room for each clause beside it: no hanging
        // indent at the column its length gives.
        for path in [
            "/work/shared/snapshots/snapviewer_memory.pickle",
            "/work/shared/snapshots/silmont_mem_snapshot.pickle",
            "a.pkl",
        ] {
            let heading = path_heading(path, rest, 80);
            let mut lines = heading.lines();
            assert_eq!(lines.next(), Some(format!("{path}:").as_str()), "{heading}");
            for line in lines {
                assert!(
                    line.starts_with("  ") && !line.starts_with("   "),
                    "{heading}"
                );
                assert!(cells(line) <= 80, "{heading}");
            }
        }
    }

    #[test]
    fn a_heading_for_a_pipe_prints_the_path_whole_on_its_own_line() {
        let deep = format!("/work/{}model.pkl", "folder/".repeat(20));
        print_paths_whole(true);
        let heading = path_heading(&deep, "7 segments on 1 device", 80);
        print_paths_whole(false);
        assert_eq!(heading, format!("{deep}:\n  7 segments on 1 device"));
        // A path with room beside it keeps its one line.
        print_paths_whole(true);
        let short = path_heading("a.pkl", "7 segments on 1 device", 80);
        print_paths_whole(false);
        assert_eq!(short, "a.pkl: 7 segments on 1 device");
        assert!(path_heading(&deep, "7 segments", 80).starts_with('…'));
    }
}
