//! Which known name a misspelt one most likely meant: the config file's
//! keys and the allocator settings' options (`--alloc-conf`, a scenario's
//! `alloc_conf`, the stress panel's settings field) suggest the same way.
//! Here, the lowest layer, so that both can use it.

/// The name of `known` that `word` is most likely a misspelling of: one at
/// most two edits away (a letter added, left out, changed or two swapped),
/// and fewer edits than `word` has letters; case is ignored. The first of
/// the nearest where several are as near.
pub fn nearest<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let word = word.to_lowercase();
    let letters = word.chars().count();
    known
        .into_iter()
        // More than two letters longer or shorter is more than two edits:
        // no table for a word of any length (a file's, a pasted one).
        .filter(|k| letters.abs_diff(k.chars().count()) <= 2)
        .map(|k| (edit_distance(&word, k), k))
        .filter(|&(distance, _)| distance <= 2 && distance < word.chars().count())
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, k)| k)
}

/// The optimal string alignment distance between `a` and `b`, in
/// characters: insertions, deletions, substitutions and swaps of two
/// neighbours. The table is `(|a| + 1) × (|b| + 1)`: [`nearest`] builds
/// it only for names of about the same length.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let width = b.len() + 1;
    let mut table = vec![0usize; (a.len() + 1) * width];
    let at = |i: usize, j: usize| i * width + j;
    for i in 0..=a.len() {
        table[at(i, 0)] = i;
    }
    for j in 0..=b.len() {
        table[at(0, j)] = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (table[at(i - 1, j)] + 1)
                .min(table[at(i, j - 1)] + 1)
                .min(table[at(i - 1, j - 1)] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(table[at(i - 2, j - 2)] + 1);
            }
            table[at(i, j)] = best;
        }
    }
    table[at(a.len(), b.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_of_two_neighbours_is_one_edit() {
        assert_eq!(edit_distance("sim_gpsu", "sim_gpus"), 1);
        assert_eq!(
            edit_distance("expandable_segment", "expandable_segments"),
            1
        );
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn the_nearest_name_is_at_most_two_edits_away_and_not_a_rewrite() {
        let known = ["interval", "backend", "ascii"];
        assert_eq!(nearest("Intervall", known), Some("interval"));
        assert_eq!(nearest("backnd", known), Some("backend"));
        assert_eq!(nearest("theme", known), None);
        // One letter two edits from "ascii" is not a misspelling of it.
        assert_eq!(nearest("a", known), None);
    }
}
