//! The stress panel's walk-through table in `docs/stress.md`, read as the
//! tests play it: each row's keys and the figures the screen must show.

/// One row: the keys in order (`a`, `Enter`, …) and the figures, each a
/// run of words that must appear on one screen line (spaces collapsed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub keys: Vec<String>,
    pub figures: Vec<String>,
}

/// The text between backticks in `cell`, in order.
fn backticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// The rows of the table between `<!-- walk-through` and
/// `<!-- end of walk-through -->` in `docs/stress.md`.
pub fn rows() -> Vec<Row> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/stress.md"))
        .expect("docs/stress.md");
    let start = doc
        .find("<!-- walk-through")
        .expect("the walk-through table");
    let end = doc[start..]
        .find("<!-- end of walk-through -->")
        .map_or(doc.len(), |e| start + e);
    doc[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').collect();
            Row {
                keys: backticked(cells.get(1).copied().unwrap_or_default()),
                figures: backticked(cells.get(3).copied().unwrap_or_default()),
            }
        })
        .collect()
}

/// `text` with every run of spaces made one space.
pub fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The figures of `row` that no line of `screen` shows (spaces collapsed).
pub fn missing<'a>(row: &'a Row, screen: &str) -> Vec<&'a str> {
    let lines: Vec<String> = screen.lines().map(collapse).collect();
    row.figures
        .iter()
        .filter(|f| !lines.iter().any(|l| l.contains(&collapse(f))))
        .map(String::as_str)
        .collect()
}
