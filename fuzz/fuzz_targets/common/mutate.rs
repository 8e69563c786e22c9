//! Structure-aware inputs for the replay, what-if, scrub and summary
//! targets: the fuzz bytes pick one of the shared snapshots (read once from
//! `$VRAMTOP_FUZZ_SNAPSHOTS`, default `../shared/snapshots`) and a few edits
//! of its trace and layout — an event's action changed, events dropped,
//! duplicated or swapped, extreme sizes and addresses, segment events of the
//! other allocator kind, expandable segments switched on or off.

use std::path::PathBuf;
use std::sync::OnceLock;

use vramtop::alloc::TraceAction;
use vramtop::snapshot::{AllocatorSettings, Snapshot, read_snapshot_file};

/// The shared snapshots with a trace, in name order (empty when absent: the
/// targets then fuzz a snapshot with an empty trace).
pub fn bases() -> &'static [Snapshot] {
    static BASES: OnceLock<Vec<Snapshot>> = OnceLock::new();
    BASES.get_or_init(|| {
        let dir = std::env::var_os("VRAMTOP_FUZZ_SNAPSHOTS")
            .map_or_else(|| PathBuf::from("../shared/snapshots"), PathBuf::from);
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        paths.sort();
        let bases: Vec<Snapshot> = paths
            .iter()
            .filter(|p| p.extension().is_some_and(|x| x == "pickle" || x == "pkl"))
            .filter_map(|p| read_snapshot_file(p).ok())
            .filter(|s| s.device_traces.iter().any(|t| !t.is_empty()))
            .collect();
        if bases.is_empty() {
            // Said once: run from fuzz/ the default path finds nothing, and the
            // run would quietly fuzz an empty trace at a fraction of the coverage.
            eprintln!(
                "fuzz: no snapshot with a trace in {} (run from the repository root or set \
                 VRAMTOP_FUZZ_SNAPSHOTS); fuzzing an empty trace only",
                dir.display()
            );
        }
        bases
    })
}

const ACTIONS: [TraceAction; 9] = [
    TraceAction::Alloc,
    TraceAction::FreeRequested,
    TraceAction::FreeCompleted,
    TraceAction::SegmentAlloc,
    TraceAction::SegmentFree,
    TraceAction::SegmentMap,
    TraceAction::SegmentUnmap,
    TraceAction::Oom,
    TraceAction::Snapshot,
];

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn u64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for _ in 0..8 {
            v = (v << 8) | u64::from(self.u8()?);
        }
        Some(v)
    }
}

fn extreme(pick: u8, raw: u64, old: u64) -> u64 {
    match pick % 8 {
        0 => 0,
        1 => u64::MAX,
        2 => 1 << 63,
        3 => 1 << 48,
        4 => raw,
        5 => raw % (1 << 30),
        6 => old.wrapping_add(raw % 4096).wrapping_sub(2048),
        _ => (raw % 4096) << 21,
    }
}

/// The other allocator kind's segment event.
fn other_kind(action: TraceAction) -> TraceAction {
    match action {
        TraceAction::SegmentAlloc => TraceAction::SegmentMap,
        TraceAction::SegmentMap => TraceAction::SegmentAlloc,
        TraceAction::SegmentFree => TraceAction::SegmentUnmap,
        TraceAction::SegmentUnmap => TraceAction::SegmentFree,
        other => other,
    }
}

/// A shared snapshot with the edits `data` describes, and the bytes left.
pub fn mutated(data: &[u8]) -> Option<(Snapshot, &[u8])> {
    let bases = bases();
    let mut bytes = Bytes(data);
    let mut s = if bases.is_empty() {
        Snapshot {
            device_traces: vec![Vec::new()],
            ..Snapshot::of_segments(vramtop::snapshot::SnapshotFormat::DumpSnapshot, Vec::new())
        }
    } else {
        bases[usize::from(bytes.u8()?) % bases.len()].clone()
    };
    let edits = bytes.u8()? % 8 + 1;
    for _ in 0..edits {
        let op = bytes.u8()?;
        let at = bytes.u64()?;
        let value = bytes.u64()?;
        let device = s
            .device_traces
            .iter()
            .position(|t| !t.is_empty())
            .unwrap_or(0);
        let Some(trace) = s.device_traces.get_mut(device) else {
            break;
        };
        let len = trace.len();
        let i = if len == 0 { 0 } else { (at % len as u64) as usize };
        match op % 10 {
            0 if len > 0 => trace[i].action = ACTIONS[(value % ACTIONS.len() as u64) as usize],
            1 if len > 0 => {
                trace.remove(i);
            }
            2 if len > 0 => {
                let e = trace[i].clone();
                trace.insert(i, e);
            }
            3 if len > 1 => {
                let j = (i + 1 + (value % 4) as usize).min(len - 1);
                trace.swap(i, j);
            }
            4 if len > 0 => trace[i].size = extreme(op / 10, value, trace[i].size),
            5 if len > 0 => trace[i].addr = extreme(op / 10, value, trace[i].addr),
            6 if len > 0 => trace[i].action = other_kind(trace[i].action),
            7 => {
                let settings = s.allocator_settings.get_or_insert_with(default_settings);
                settings.expandable_segments = !settings.expandable_segments;
            }
            8 if !s.segments.is_empty() => {
                let k = (at % s.segments.len() as u64) as usize;
                let seg = &mut s.segments[k];
                if seg.blocks.is_empty() {
                    seg.total_size = extreme(op / 10, value, seg.total_size);
                } else {
                    let b = (value % seg.blocks.len() as u64) as usize;
                    seg.blocks[b].size = extreme(op / 10, value >> 8, seg.blocks[b].size);
                }
            }
            9 if !s.segments.is_empty() => {
                let k = (at % s.segments.len() as u64) as usize;
                s.segments[k].is_expandable = !s.segments[k].is_expandable;
            }
            _ => {}
        }
    }
    Some((s, bytes.0))
}

fn default_settings() -> AllocatorSettings {
    vramtop::snapshot::capture::settings_of(&vramtop::alloc::AllocatorConfig::default())
}
