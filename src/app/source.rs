//! Where the dashboard's data comes from: the chosen telemetry backend plus
//! the allocators vramtop can see (the simulated training processes now; the
//! stress panel and live probes later).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::state::{AllocatorView, Breakdown, breakdown, unattributed};
use crate::alloc::Fragmentation;
use crate::device::GpuReading;
use crate::device::sim::SimCluster;

/// Allocator views by GPU index (one per GPU: the first visible process).
pub fn allocator_views(sim: Option<&SimCluster>) -> BTreeMap<u32, AllocatorView> {
    let mut out = BTreeMap::new();
    if let Some(cluster) = sim {
        for t in cluster.trainers() {
            out.entry(t.gpu).or_insert_with(|| {
                AllocatorView::new(
                    format!("pid {} (simulated training, step {})", t.pid, t.step),
                    Some(t.pid),
                    t.stats,
                    t.layout,
                )
            });
        }
    }
    out
}

/// The allocator figures in a headless sample (bytes).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocatorSummary {
    pub source: String,
    pub pid: Option<u32>,
    pub allocated: u64,
    pub reserved: u64,
    pub active: i64,
    pub inactive_split_bytes: i64,
    pub segments: i64,
    pub num_alloc_retries: i64,
    pub num_ooms: i64,
    pub fragmentation: Fragmentation,
}

impl From<&AllocatorView> for AllocatorSummary {
    fn from(a: &AllocatorView) -> Self {
        AllocatorSummary {
            source: a.source.clone(),
            pid: a.pid,
            allocated: a.allocated(),
            reserved: a.reserved(),
            active: a.stats.active_bytes.all.current,
            inactive_split_bytes: a.stats.inactive_split_bytes.all.current,
            segments: a.stats.segment.all.current,
            num_alloc_retries: a.stats.num_alloc_retries,
            num_ooms: a.stats.num_ooms,
            fragmentation: a.fragmentation.clone(),
        }
    }
}

/// One GPU in a headless sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessGpu {
    #[serde(flatten)]
    pub reading: GpuReading,
    pub allocator: Option<AllocatorSummary>,
    pub breakdown: Option<Breakdown>,
    /// Driver-used bytes no listed process accounts for.
    pub unattributed: Option<u64>,
}

/// One line of `--once --json` / `vramtop record`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadlessSample {
    /// Wall-clock time of the sample (ms since the Unix epoch).
    pub time_unix_ms: u64,
    pub backend: String,
    /// Why the backend is a fallback, if it is.
    pub banner: Option<String>,
    pub gpus: Vec<HeadlessGpu>,
}

/// Builds a headless sample from readings and allocator views.
pub fn headless_sample(
    backend: &str,
    banner: Option<&str>,
    readings: Vec<GpuReading>,
    allocators: &BTreeMap<u32, AllocatorView>,
) -> HeadlessSample {
    let gpus = readings
        .into_iter()
        .map(|reading| {
            let (allocator, bd, un) = match reading.sample() {
                Some(s) if s.mig.is_none() => {
                    let a = allocators.get(&s.index);
                    (
                        a.map(AllocatorSummary::from),
                        breakdown(s, a),
                        unattributed(s),
                    )
                }
                Some(s) => (None, None, unattributed(s)),
                None => (None, None, None),
            };
            HeadlessGpu {
                reading,
                allocator,
                breakdown: bd,
                unattributed: un,
            }
        })
        .collect();
    HeadlessSample {
        time_unix_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        backend: backend.to_string(),
        banner: banner.map(str::to_string),
        gpus,
    }
}
