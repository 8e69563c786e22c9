//! The names a missing snapshot file was likely meant as: `scenario …
//! --save-snapshot frag.pickle` writes `frag-default.pickle`,
//! `frag-expandable_segments.pickle`, …, and `open frag.pickle` then finds
//! no file. The folder is read once, at most [`MAX_SCANNED`] entries of it,
//! so a missing name in a huge folder costs a bounded look.

use std::ffi::OsStr;
use std::path::Path;

/// Folder entries looked at, at the most: a folder of millions of files
/// is not listed whole for a hint.
pub const MAX_SCANNED: usize = 10_000;

/// Names a hint lists, at the most; it says how many more there are.
pub const MAX_NAMED: usize = 3;

/// Names longer than this (bytes) are never compared letter by letter: no
/// file system keeps longer ones, and the comparison's cost stays bounded.
const MAX_NAME_BYTES: usize = 255;

/// What a hint names: the files to suggest (as paths written like the
/// missing one, its folder included), and how many more matched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Near {
    pub names: Vec<String>,
    pub more: usize,
}

impl Near {
    /// "; did you mean frag-default.pickle?", "; did you mean a, b or c
    /// (2 more like them)?", or nothing.
    pub fn hint(&self) -> String {
        let Some((last, rest)) = self.names.split_last() else {
            return String::new();
        };
        let listed = if rest.is_empty() {
            last.clone()
        } else {
            format!("{} or {last}", rest.join(", "))
        };
        match self.more {
            0 => format!("; did you mean {listed}?"),
            n => format!("; did you mean {listed} ({n} more like them)?"),
        }
    }
}

/// The files near `path`, which does not exist: in its folder, the files
/// named `STEM-*.EXT` (what `--save-snapshot STEM.EXT` writes, one per
/// setting), else the one name a letter or two from its own. Nothing when
/// the folder cannot be read or has no such name.
pub fn near_names(path: &Path) -> Near {
    let Some(missing) = path.file_name() else {
        return Near::default();
    };
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Near::default();
    };
    let names = entries
        .take(MAX_SCANNED)
        .filter_map(Result::ok)
        // A folder is no snapshot (file_type needs no stat on most
        // systems; a link is kept: it may name a file).
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok());
    let near = pick(missing, names);
    // Written as the missing path was: in its folder, as typed.
    let shown = |name: String| match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(name).display().to_string(),
        _ => name,
    };
    Near {
        names: near.names.into_iter().map(shown).collect(),
        more: near.more,
    }
}

/// [`near_names`] over `names`, the folder's (file names only).
fn pick(missing: &OsStr, names: impl Iterator<Item = String>) -> Near {
    let Some(missing) = missing.to_str() else {
        return Near::default();
    };
    let (stem, ext) = match missing.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() => (stem, Some(ext)),
        _ => (missing, None),
    };
    let prefix = format!("{stem}-");
    let suffix = ext.map(|e| format!(".{e}"));
    // Edits allowed for a close name: one for a short name, where two
    // reach most other short names.
    let most_edits = if missing.chars().count() <= 6 { 1 } else { 2 };
    let mut variants = Vec::new();
    let mut close: Vec<(usize, String)> = Vec::new();
    for name in names {
        let is_variant = name.len() > prefix.len()
            && name.starts_with(&prefix)
            && suffix
                .as_deref()
                .is_none_or(|s| name.ends_with(s) && name.len() > prefix.len() + s.len());
        if is_variant {
            variants.push(name);
        } else if let Some(d) = edits_within(missing, &name, most_edits) {
            close.push((d, name));
        }
    }
    if !variants.is_empty() {
        variants.sort();
        let more = variants.len().saturating_sub(MAX_NAMED);
        variants.truncate(MAX_NAMED);
        return Near {
            names: variants,
            more,
        };
    }
    // One close name is a hint; several as close are a guess.
    close.sort();
    match close.as_slice() {
        [(d, name), rest @ ..] if rest.first().is_none_or(|(next, _)| d < next) => Near {
            names: vec![name.clone()],
            more: 0,
        },
        _ => Near::default(),
    }
}

/// The edit distance (insertions, deletions, substitutions, by character)
/// between `a` and `b` when it is at most `most` (and not 0: the same name
/// is no hint); `None` past it. Only the band of `2 * most + 1` cells
/// around the diagonal is computed: bounded work for any name.
fn edits_within(a: &str, b: &str, most: usize) -> Option<usize> {
    if a.len() > MAX_NAME_BYTES || b.len() > MAX_NAME_BYTES {
        return None;
    }
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > most {
        return None;
    }
    // Past `most`: a cell outside the band or too far.
    let far = most.saturating_add(1);
    let mut row: Vec<usize> = (0..=b.len()).map(|j| j.min(far)).collect();
    for (i, ca) in a.iter().enumerate() {
        let i = i.saturating_add(1);
        let mut diagonal = row[0];
        row[0] = i.min(far);
        let (from, to) = (i.saturating_sub(most), i.saturating_add(most).min(b.len()));
        for j in 1..=b.len() {
            let above = row[j];
            row[j] = if j < from || j > to {
                far
            } else {
                let substitute = diagonal.saturating_add(usize::from(*ca != b[j - 1]));
                let delete = above.saturating_add(1);
                let insert = row[j - 1].saturating_add(1);
                substitute.min(delete).min(insert).min(far)
            };
            diagonal = above;
        }
    }
    let d = row[b.len()];
    (d > 0 && d <= most).then_some(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> impl Iterator<Item = String> {
        list.iter()
            .map(|s| (*s).to_string())
            .collect::<Vec<_>>()
            .into_iter()
    }

    #[test]
    fn a_saved_scenarios_files_are_named_for_its_stem() {
        let near = pick(
            OsStr::new("frag.pickle"),
            names(&[
                "frag-expandable_segments.pickle",
                "frag-default.pickle",
                "frag-notes.txt",
                "other.pickle",
            ]),
        );
        assert_eq!(
            near.hint(),
            "; did you mean frag-default.pickle or frag-expandable_segments.pickle?"
        );
    }

    #[test]
    fn more_than_three_variants_name_three_and_count_the_rest() {
        let near = pick(
            OsStr::new("f.pickle"),
            names(&[
                "f-a.pickle",
                "f-b.pickle",
                "f-c.pickle",
                "f-d.pickle",
                "f-e.pickle",
            ]),
        );
        assert_eq!(
            near.hint(),
            "; did you mean f-a.pickle, f-b.pickle or f-c.pickle (2 more like them)?"
        );
    }

    #[test]
    fn one_close_name_is_named_and_a_tie_or_a_far_one_is_not() {
        let one = pick(
            OsStr::new("snapshot.pickle"),
            names(&["snapshot.pikle", "other.pickle"]),
        );
        assert_eq!(one.hint(), "; did you mean snapshot.pikle?");
        let tie = pick(
            OsStr::new("snapshot.pickle"),
            names(&["snapshot.pikle", "snapshot.pickl"]),
        );
        assert_eq!(tie, Near::default());
        let far = pick(OsStr::new("snapshot.pickle"), names(&["mem.pickle"]));
        assert_eq!(far.hint(), "");
    }

    #[test]
    fn edits_are_counted_by_character_within_the_band_only() {
        assert_eq!(edits_within("kitten", "sitten", 2), Some(1));
        assert_eq!(edits_within("kitten", "sitting", 2), None);
        assert_eq!(edits_within("kitten", "sittin", 2), Some(2));
        assert_eq!(edits_within("same", "same", 2), None);
        assert_eq!(edits_within("ä.pickle", "a.pickle", 1), Some(1));
        let long = "x".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(edits_within(&long, &long[1..], 2), None);
    }

    #[test]
    fn the_missing_files_folder_is_read_and_named_in_the_hint() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("frag-default.pickle"), b"x").expect("write");
        std::fs::create_dir(dir.path().join("frag-dir.pickle")).expect("a folder");
        let near = near_names(&dir.path().join("frag.pickle"));
        let want = dir.path().join("frag-default.pickle").display().to_string();
        assert_eq!(near.names, vec![want]);
        assert_eq!(near.more, 0);
        // A folder that is not there: no hint, no error.
        let gone = near_names(&dir.path().join("nowhere/frag.pickle"));
        assert_eq!(gone, Near::default());
    }
}
