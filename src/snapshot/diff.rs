//! Comparing two moments: two snapshot files (`vramtop diff BEFORE AFTER`)
//! or two cursors of one trace (the viewer's A/B marks).
//!
//! Segments only before / only after are keyed by (address, total size),
//! as `torch/cuda/_memory_viz.py compare` keys them; live bytes are
//! compared by allocation site ([`super::sites`]). Two files of one program
//! run from two places (two checkouts, machines or environments) name the
//! same code by different paths: a site left unmatched on both sides is
//! paired by its files' portable paths when that pairing is unambiguous.
//! Pure: no I/O.

use std::collections::{BTreeSet, HashMap, HashSet};

use serde::Serialize;
use thiserror::Error;

use super::peak::{Highest, highest_between};
use super::scrub::DeviceScrub;
use super::sites::{
    Grouping, NoStackReason, SiteKey, Sites, short_file, sites_of_snapshot, sites_of_state,
};
use super::types::{Segment, Snapshot};
use crate::alloc::{BlockState, PoolKind, TraceAction};

#[derive(Debug, Error, PartialEq, Eq)]
pub enum DiffError {
    #[error(
        "the snapshots are of different devices (before: {before:?}, after: {after:?}){}",
        devices_hint(before, after)
    )]
    DifferentDevices { before: Vec<u32>, after: Vec<u32> },
    #[error("{side} has no device {device} (its devices: {have:?})")]
    NoSuchDevice {
        side: &'static str,
        device: u32,
        have: Vec<u32>,
    },
}

/// How to compare anyway: `--devices` with the first device of each file.
fn devices_hint(before: &[u32], after: &[u32]) -> String {
    match (before.first(), after.first()) {
        (Some(b), Some(a)) => {
            format!("; --devices {b}:{a} compares GPU {b} of BEFORE with GPU {a} of AFTER")
        }
        _ => String::new(),
    }
}

/// A figure before, after, and the change (after − before).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Change {
    pub before: u64,
    pub after: u64,
    pub change: i64,
}

impl Change {
    pub fn new(before: u64, after: u64) -> Self {
        let change = i128::from(after) - i128::from(before);
        Change {
            before,
            after,
            change: i64::try_from(change).unwrap_or(if change < 0 { i64::MIN } else { i64::MAX }),
        }
    }
}

/// A segment present on one side only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SegmentRef {
    pub device: u32,
    pub address: u64,
    pub total_size: u64,
    pub stream: u64,
    pub segment_type: PoolKind,
    /// Whether it is an expandable segment (`expandable_segments:True`):
    /// one address range whose pages are mapped as it grows, so it can be
    /// at one address on both sides with two sizes.
    pub is_expandable: bool,
    /// Σ sizes of its allocated blocks (bytes).
    pub allocated: u64,
}

/// An address that holds a segment on both sides, of two sizes: in the
/// only-before and the only-after lists alike, since segments match by
/// (address, total size). An expandable segment grows (or shrinks) in
/// place; two runs can also start their first segments at one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ResizedSegment {
    pub address: u64,
    /// BEFORE's total size there (bytes).
    pub before: u64,
    /// AFTER's total size there (bytes).
    pub after: u64,
    /// Both sides' segments there are expandable: likely one segment that
    /// grew or shrank in place; else two segments that began at one
    /// address (two runs, or a segment freed and another obtained there; a
    /// segment never changes its kind).
    pub expandable: bool,
}

/// How a site's live bytes changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SiteChangeKind {
    New,
    Grown,
    Same,
    Shrunk,
    Gone,
}

impl SiteChangeKind {
    pub fn name(self) -> &'static str {
        match self {
            SiteChangeKind::New => "new",
            SiteChangeKind::Grown => "grown",
            SiteChangeKind::Same => "same",
            SiteChangeKind::Shrunk => "shrunk",
            SiteChangeKind::Gone => "gone",
        }
    }
}

/// One site's live bytes before and after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteChange {
    pub key: SiteKey,
    pub label: String,
    pub kind: SiteChangeKind,
    pub bytes: Change,
    pub blocks: Change,
    /// AFTER's key, when it names the site's code by other paths than
    /// BEFORE's `key` (the files come from two checkouts, machines or
    /// environments) and the two were paired by their portable paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_key: Option<SiteKey>,
}

/// What changed between two moments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    pub grouping: Grouping,
    pub reserved: Change,
    pub allocated: Change,
    pub segments: Change,
    /// In BEFORE's order.
    pub only_before: Vec<SegmentRef>,
    /// In AFTER's order.
    pub only_after: Vec<SegmentRef>,
    /// The addresses of `only_before` that `only_after` has too (a
    /// segment there on both sides, of two sizes), in BEFORE's order.
    pub resized: Vec<ResizedSegment>,
    /// Every site of either side, by change (largest growth first, largest
    /// shrink last; ties by label).
    pub sites: Vec<SiteChange>,
    /// Why BEFORE's live blocks have no stack, when none of them has one:
    /// its sites then cannot match AFTER's by code, and only the totals
    /// compare. `None` when some block has a stack, or none is live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_without_stacks: Option<NoStackReason>,
    /// The same for AFTER.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_without_stacks: Option<NoStackReason>,
}

/// Why no live block of `sites` has a stack, when none has one (and some
/// is live).
fn without_stacks(sites: &Sites) -> Option<NoStackReason> {
    let mut reason = None;
    for s in sites.sites.iter().filter(|s| s.bytes > 0) {
        match &s.key {
            // The largest no-stack group names the reason (sites come
            // largest first).
            SiteKey::NoStack(r) => {
                reason.get_or_insert(*r);
            }
            _ => return None,
        }
    }
    reason
}

fn segment_ref(s: &Segment) -> SegmentRef {
    SegmentRef {
        device: s.device,
        address: s.address,
        total_size: s.total_size,
        stream: s.stream,
        segment_type: s.segment_type,
        is_expandable: s.is_expandable,
        allocated: s
            .blocks
            .iter()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size)
            .sum(),
    }
}

/// A file's path as two places one program runs from share it: past the
/// last `site-packages` or `dist-packages` folder (an installed package,
/// wherever its environment lives), else the file's name.
fn portable_path(filename: &str) -> &str {
    ["site-packages", "dist-packages"]
        .iter()
        .filter_map(|folder| {
            let at = filename.rfind(folder)?;
            let rest = filename.get(at + folder.len()..)?;
            rest.strip_prefix(['/', '\\'])
        })
        // The innermost such folder: a virtual environment inside another
        // package's folder is still the package's.
        .min_by_key(|rest| rest.len())
        .unwrap_or_else(|| short_file(filename))
}

/// A site's key with each file as [`portable_path`] gives it: the key's
/// kind, then each frame's (file, line, function).
type PortableKey<'a> = (u8, Vec<(&'a str, u64, &'a str)>);

/// A site's key with each file as [`portable_path`] gives it; `None` for
/// the no-stack groups, which match exactly.
fn portable_key(key: &SiteKey) -> Option<PortableKey<'_>> {
    fn frame(f: &super::types::Frame) -> (&str, u64, &str) {
        (portable_path(&f.filename), f.line, &f.name)
    }
    match key {
        SiteKey::Frame(f) => Some((0, vec![frame(f)])),
        SiteKey::Function { filename, name } => {
            Some((1, vec![(portable_path(filename), 0, &**name)]))
        }
        SiteKey::Stack(frames) => Some((2, frames.iter().map(frame).collect())),
        SiteKey::NoStack(_) => None,
    }
}

/// The sites of both sides matched by key; a site of one side that no
/// site of the other has, paired with the one site left over on the other
/// side whose key names the same code by [`portable_path`]s (never when
/// either side has two such sites: which one is which would be a guess).
pub fn compare_sites(before: &Sites, after: &Sites) -> Vec<SiteChange> {
    let mut rows: Vec<SiteChange> = Vec::new();
    let mut at: HashMap<&SiteKey, usize> = HashMap::new();
    for s in &before.sites {
        at.insert(&s.key, rows.len());
        rows.push(SiteChange {
            key: s.key.clone(),
            label: s.label.clone(),
            kind: SiteChangeKind::Gone,
            bytes: Change::new(s.bytes, 0),
            blocks: Change::new(s.blocks, 0),
            after_key: None,
        });
    }
    // Which of BEFORE's rows a site of AFTER matched.
    let mut matched = vec![false; rows.len()];
    for s in &after.sites {
        match at.get(&s.key) {
            Some(&i) => {
                if let Some(m) = matched.get_mut(i) {
                    *m = true;
                }
                if let Some(r) = rows.get_mut(i) {
                    r.bytes = Change::new(r.bytes.before, s.bytes);
                    r.blocks = Change::new(r.blocks.before, s.blocks);
                }
            }
            None => rows.push(SiteChange {
                key: s.key.clone(),
                label: s.label.clone(),
                kind: SiteChangeKind::New,
                bytes: Change::new(0, s.bytes),
                blocks: Change::new(0, s.blocks),
                after_key: None,
            }),
        }
    }
    pair_by_portable_paths(&mut rows, before.sites.len(), &matched);
    for r in &mut rows {
        r.kind = match (r.bytes.before, r.bytes.after) {
            (0, _) => SiteChangeKind::New,
            (_, 0) => SiteChangeKind::Gone,
            (b, a) if a > b => SiteChangeKind::Grown,
            (b, a) if a < b => SiteChangeKind::Shrunk,
            _ => SiteChangeKind::Same,
        };
    }
    // Largest change first, growth or shrinkage alike, as the text and
    // the viewer list them (so `--json` reads in the same order); growth
    // first between equal changes.
    rows.sort_by(|a, b| {
        b.bytes
            .change
            .unsigned_abs()
            .cmp(&a.bytes.change.unsigned_abs())
            .then_with(|| b.bytes.change.cmp(&a.bytes.change))
            .then_with(|| a.label.cmp(&b.label))
    });
    rows
}

/// Pairs `rows`' unmatched BEFORE rows (the first `before_rows`, those
/// not `matched`) with its AFTER-only rows (the rest) by [`portable_key`],
/// where each portable key is one row's on each side: the AFTER row's
/// figures join the BEFORE row's, which keeps AFTER's key as `after_key`.
fn pair_by_portable_paths(rows: &mut Vec<SiteChange>, before_rows: usize, matched: &[bool]) {
    // Portable key → (BEFORE's sites of it, its unmatched row, AFTER's
    // sites of it, its unmatched row). A site matched exactly counts on
    // both sides: a key another site of either side shares is ambiguous.
    type Seen = (usize, Option<usize>, usize, Option<usize>);
    let mut by_key: HashMap<PortableKey<'_>, Seen> = HashMap::new();
    for (i, r) in rows.iter().enumerate() {
        let Some(key) = portable_key(&r.key) else {
            continue;
        };
        let e = by_key.entry(key).or_insert((0, None, 0, None));
        if i >= before_rows {
            e.2 += 1;
            e.3 = Some(i);
        } else if matched.get(i).copied().unwrap_or(true) {
            e.0 += 1;
            e.2 += 1;
        } else {
            e.0 += 1;
            e.1 = Some(i);
        }
    }
    let pairs: Vec<(usize, usize)> = by_key
        .values()
        .filter_map(|&(b, row_b, a, row_a)| match (b, row_b, a, row_a) {
            (1, Some(rb), 1, Some(ra)) => Some((rb, ra)),
            _ => None,
        })
        .collect();
    if pairs.is_empty() {
        return;
    }
    let mut taken = vec![false; rows.len()];
    for &(b, a) in &pairs {
        let Some(after) = rows.get(a).cloned() else {
            continue;
        };
        if let (Some(r), Some(t)) = (rows.get_mut(b), taken.get_mut(a)) {
            r.bytes = Change::new(r.bytes.before, after.bytes.after);
            r.blocks = Change::new(r.blocks.before, after.blocks.after);
            r.after_key = Some(after.key);
            *t = true;
        }
    }
    let mut i = 0;
    rows.retain(|_| {
        let keep = !taken.get(i).copied().unwrap_or(false);
        i += 1;
        keep
    });
}

/// Compares two sets of segments and their sites.
pub fn diff_segments(
    before: &[Segment],
    after: &[Segment],
    before_sites: &Sites,
    after_sites: &Sites,
) -> Diff {
    let key = |s: &Segment| (s.address, s.total_size);
    let before_keys: HashSet<(u64, u64)> = before.iter().map(key).collect();
    let after_keys: HashSet<(u64, u64)> = after.iter().map(key).collect();
    let total = |segs: &[Segment]| -> (u64, u64) {
        let reserved = segs.iter().map(|s| s.total_size).sum();
        let allocated = segs
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size)
            .sum();
        (reserved, allocated)
    };
    let (rb, ab) = total(before);
    let (ra, aa) = total(after);
    let only_before: Vec<SegmentRef> = before
        .iter()
        .filter(|s| !after_keys.contains(&key(s)))
        .map(segment_ref)
        .collect();
    let only_after: Vec<SegmentRef> = after
        .iter()
        .filter(|s| !before_keys.contains(&key(s)))
        .map(segment_ref)
        .collect();
    Diff {
        grouping: after_sites.grouping,
        reserved: Change::new(rb, ra),
        allocated: Change::new(ab, aa),
        segments: Change::new(before.len() as u64, after.len() as u64),
        resized: resized(&only_before, &only_after),
        only_before,
        only_after,
        sites: compare_sites(before_sites, after_sites),
        before_without_stacks: without_stacks(before_sites),
        after_without_stacks: without_stacks(after_sites),
    }
}

/// The addresses both lists hold, each with its two sizes, in `only_before`'s
/// order. By address alone, as the lists are keyed (`--devices` compares
/// two GPUs' segments).
fn resized(only_before: &[SegmentRef], only_after: &[SegmentRef]) -> Vec<ResizedSegment> {
    let after: HashMap<u64, (u64, bool)> = only_after
        .iter()
        .map(|s| (s.address, (s.total_size, s.is_expandable)))
        .collect();
    only_before
        .iter()
        .filter_map(|s| {
            let &(size, expandable) = after.get(&s.address)?;
            Some(ResizedSegment {
                address: s.address,
                before: s.total_size,
                after: size,
                expandable: expandable && s.is_expandable,
            })
        })
        .collect()
}

/// The devices a snapshot's segments are on, ascending.
pub fn devices_of(snapshot: &Snapshot) -> Vec<u32> {
    let set: BTreeSet<u32> = snapshot.segments.iter().map(|s| s.device).collect();
    set.into_iter().collect()
}

/// Compares two snapshot files' final states (all their devices, which
/// must be the same).
pub fn diff_snapshots(
    before: &Snapshot,
    after: &Snapshot,
    grouping: Grouping,
) -> Result<Diff, DiffError> {
    let (db, da) = (devices_of(before), devices_of(after));
    if !db.is_empty() && !da.is_empty() && db != da {
        return Err(DiffError::DifferentDevices {
            before: db,
            after: da,
        });
    }
    let sb = sites_of_snapshot(before, None, grouping);
    let sa = sites_of_snapshot(after, None, grouping);
    Ok(diff_segments(&before.segments, &after.segments, &sb, &sa))
}

/// Compares device `devices.0` of BEFORE with device `devices.1` of AFTER
/// (two ranks' dumps, or one process that moved to another GPU).
pub fn diff_snapshot_devices(
    before: &Snapshot,
    after: &Snapshot,
    devices: (u32, u32),
    grouping: Grouping,
) -> Result<Diff, DiffError> {
    let (db, da) = devices;
    let side = |snapshot: &Snapshot, side: &'static str, device: u32| {
        let have = devices_of(snapshot);
        if have.contains(&device) {
            let segments: Vec<Segment> = snapshot
                .segments
                .iter()
                .filter(|s| s.device == device)
                .cloned()
                .collect();
            Ok(segments)
        } else {
            Err(DiffError::NoSuchDevice { side, device, have })
        }
    };
    let (segments_before, segments_after) =
        (side(before, "BEFORE", db)?, side(after, "AFTER", da)?);
    let sb = sites_of_snapshot(before, Some(db), grouping);
    let sa = sites_of_snapshot(after, Some(da), grouping);
    Ok(diff_segments(&segments_before, &segments_after, &sb, &sa))
}

/// The live blocks at cursor `b` that were allocated by an event at or
/// after cursor `a` (events `a..b`), by site. A block alive at `b` was
/// allocated by the last `alloc` at its address before `b`; it is in the
/// window when any `alloc` at that address falls in it. Cost: the events
/// of the window plus the live blocks at `b`.
pub fn allocated_between(
    device: &DeviceScrub,
    a: usize,
    b: usize,
    grouping: Grouping,
    reason: NoStackReason,
) -> Sites {
    let (a, b) = (a.min(b), a.max(b).min(device.len()));
    let window: HashSet<u64> = device
        .events()
        .get(a..b)
        .unwrap_or_default()
        .iter()
        .filter(|e| e.action == TraceAction::Alloc)
        .map(|e| e.addr)
        .collect();
    let mut state = device.state_at(b);
    state.blocks.retain(|addr, _| window.contains(addr));
    sites_of_state(&state, grouping, reason)
}

/// Two cursors of one device's trace compared: the viewer's A/B comparison
/// (`c`) and `vramtop diff FILE --at A --at B`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CursorDiff {
    /// The GPU whose trace both cursors are of (its device number).
    pub device: u32,
    /// The earlier cursor (events applied) and the later.
    pub a: usize,
    pub b: usize,
    /// The state at `b` against the state at `a` (`a` is BEFORE).
    pub diff: Diff,
    /// The blocks alive at `b` allocated by the events between `a` and `b`.
    pub between: Sites,
    /// The highest allocated and reserved at the cursors `a..=b`.
    pub highest: Highest,
}

/// Compares the states of `device` at cursors `a` and `b` (in either order:
/// the earlier is BEFORE), with sites by `grouping`, blocks without a stack
/// said to be `no_stack`'s.
pub fn diff_cursors(
    device: &DeviceScrub,
    a: usize,
    b: usize,
    grouping: Grouping,
    no_stack: NoStackReason,
) -> CursorDiff {
    let (a, b) = (a.min(b), a.max(b));
    let (sa, sb) = (device.state_at(a), device.state_at(b));
    let (la, lb) = (device.layout_of(&sa), device.layout_of(&sb));
    let sites_a = sites_of_state(&sa, grouping, no_stack);
    let sites_b = sites_of_state(&sb, grouping, no_stack);
    CursorDiff {
        device: device.device,
        a,
        b,
        diff: diff_segments(&la, &lb, &sites_a, &sites_b),
        between: allocated_between(device, a, b, grouping, no_stack),
        highest: highest_between(device, a, b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::sites::LiveAllocation;
    use crate::snapshot::sites::group;
    use crate::snapshot::types::Frame;
    use crate::snapshot::types::Frames;

    fn stack(file: &str, line: u64) -> Frames {
        vec![Frame {
            filename: file.into(),
            line,
            name: "f".into(),
        }]
        .into()
    }

    #[test]
    fn site_changes_say_new_grown_shrunk_gone_largest_change_first() {
        let (a, b, c, d) = (
            stack("/u/a.py", 1),
            stack("/u/b.py", 2),
            stack("/u/c.py", 3),
            stack("/u/d.py", 4),
        );
        let at = |addr, size, f| LiveAllocation {
            address: addr,
            size,
            requested_size: size,
            frames: f,
            stack_lost: false,
        };
        let r = NoStackReason::BeforeRecording;
        let before = group(
            [at(1, 100, &a), at(2, 100, &b), at(3, 50, &c)],
            Grouping::UserFrame,
            r,
        );
        let after = group(
            [at(1, 300, &a), at(2, 40, &b), at(4, 70, &d)],
            Grouping::UserFrame,
            r,
        );
        let rows = compare_sites(&before, &after);
        let kinds: Vec<SiteChangeKind> = rows.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            vec![
                SiteChangeKind::Grown,
                SiteChangeKind::New,
                SiteChangeKind::Shrunk,
                SiteChangeKind::Gone
            ]
        );
        let total: i64 = rows.iter().map(|r| r.bytes.change).sum();
        assert_eq!(total, 410 - 250);
        assert_eq!(rows[0].bytes, Change::new(100, 300));
    }

    fn live<'f>(address: u64, size: u64, frames: &'f Frames) -> LiveAllocation<'f> {
        LiveAllocation {
            address,
            size,
            requested_size: size,
            frames,
            stack_lost: false,
        }
    }

    #[test]
    fn one_program_from_two_checkouts_pairs_its_sites_by_file_name() {
        let r = NoStackReason::BeforeRecording;
        let (a_here, b_here) = (
            stack("/home/ann/proj/train.py", 10),
            stack("/home/ann/proj/model.py", 5),
        );
        let (a_there, b_there) = (
            stack("/scratch/bob/proj/train.py", 10),
            stack("/scratch/bob/proj/model.py", 5),
        );
        let before = group(
            [live(1, 100, &a_here), live(2, 50, &b_here)],
            Grouping::UserFrame,
            r,
        );
        let after = group(
            [live(1, 300, &a_there), live(2, 50, &b_there)],
            Grouping::UserFrame,
            r,
        );
        let rows = compare_sites(&before, &after);
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[0].kind, SiteChangeKind::Grown);
        assert_eq!(rows[0].bytes, Change::new(100, 300));
        assert_eq!(rows[1].kind, SiteChangeKind::Same);
        let after_file = match &rows[0].after_key {
            Some(SiteKey::Frame(f)) => f.filename.to_string(),
            other => panic!("AFTER's key is kept: {other:?}"),
        };
        assert_eq!(after_file, "/scratch/bob/proj/train.py");
    }

    #[test]
    fn installed_packages_pair_past_their_environments_folder() {
        assert_eq!(
            portable_path("/opt/venv-a/lib/python3.10/site-packages/torch/nn/modules/linear.py"),
            "torch/nn/modules/linear.py"
        );
        assert_eq!(
            portable_path("C:\\envs\\b\\Lib\\site-packages\\torch\\functional.py"),
            "torch\\functional.py"
        );
        assert_eq!(
            portable_path("/usr/lib/python3/dist-packages/einops/einops.py"),
            "einops/einops.py"
        );
        assert_eq!(portable_path("/home/ann/train.py"), "train.py");
        assert_eq!(portable_path("site-packages"), "site-packages");
        // Two packages' files of one name stay apart.
        assert_ne!(
            portable_path("/a/site-packages/torch/functional.py"),
            portable_path("/b/site-packages/einops/functional.py")
        );
    }

    #[test]
    fn sites_of_one_file_name_in_two_folders_stay_unpaired() {
        let r = NoStackReason::BeforeRecording;
        let (x1, x2) = (stack("/a/one/util.py", 3), stack("/a/two/util.py", 3));
        let y = stack("/b/one/util.py", 3);
        let before = group(
            [live(1, 100, &x1), live(2, 50, &x2)],
            Grouping::UserFrame,
            r,
        );
        let after = group([live(1, 300, &y)], Grouping::UserFrame, r);
        let rows = compare_sites(&before, &after);
        // Which of BEFORE's two util.py:3 is AFTER's would be a guess.
        assert_eq!(rows.len(), 3, "{rows:?}");
        assert!(rows.iter().all(|r| r.after_key.is_none()));
        // One of BEFORE's matched AFTER's exactly: the other pair of that
        // file name could still be anyone's.
        let (z1, z2) = (stack("/x/one/util.py", 3), stack("/x/three/util.py", 3));
        let after = group(
            [live(1, 100, &x1), live(2, 70, &z2)],
            Grouping::UserFrame,
            r,
        );
        let before_one = group(
            [live(1, 100, &x1), live(2, 50, &z1)],
            Grouping::UserFrame,
            r,
        );
        let rows = compare_sites(&before_one, &after);
        assert!(rows.iter().all(|r| r.after_key.is_none()), "{rows:?}");
        // Matched exactly, nothing is paired by name.
        let same = compare_sites(&before, &before);
        assert!(
            same.iter()
                .all(|r| r.after_key.is_none() && r.kind == SiteChangeKind::Same)
        );
    }

    #[test]
    fn an_address_in_both_lists_is_resized_with_its_two_sizes() {
        let at = |address, total_size| SegmentRef {
            device: 0,
            address,
            total_size,
            stream: 0,
            segment_type: PoolKind::Large,
            is_expandable: false,
            allocated: 0,
        };
        let before = [at(0x100, 20), at(0x200, 20), at(0x300, 40)];
        let after = [at(0x300, 10), at(0x400, 20), at(0x100, 60)];
        assert_eq!(
            resized(&before, &after),
            vec![
                ResizedSegment {
                    address: 0x100,
                    before: 20,
                    after: 60,
                    expandable: false,
                },
                ResizedSegment {
                    address: 0x300,
                    before: 40,
                    after: 10,
                    expandable: false,
                },
            ]
        );
        assert!(resized(&before, &[at(0x500, 20)]).is_empty());
    }

    #[test]
    fn change_of_huge_figures_saturates() {
        assert_eq!(Change::new(0, u64::MAX).change, i64::MAX);
        assert_eq!(Change::new(u64::MAX, 0).change, i64::MIN);
    }
}
