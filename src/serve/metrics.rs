//! vramtop's metric families and the rendering of one sample into them.
//!
//! Units follow the Prometheus conventions: bytes, seconds, celsius, watts,
//! hertz and ratios in 0–1; counters end in `_total`. A figure the GPU does
//! not report (`None` in [`GpuSample`]) gives no series at all.

use std::collections::{BTreeMap, BTreeSet};

use super::exposition::{Family, Labels, MetricType, Sample, TextWriter};
use crate::alloc::{DeviceStats, Fragmentation, Stat};
use crate::device::{GpuProcess, GpuReading, GpuSample};

const fn gauge(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: MetricType::Gauge,
    }
}

const fn counter(name: &'static str, help: &'static str) -> Family {
    Family {
        name,
        help,
        kind: MetricType::Counter,
    }
}

pub const BUILD_INFO: Family = gauge(
    "vramtop_build_info",
    "Always 1; the labels say the vramtop version and the telemetry backend (nvml or sim).",
);
pub const SAMPLES: Family = counter(
    "vramtop_samples_total",
    "Telemetry samples taken successfully since vramtop started.",
);
pub const SCRAPE_ERRORS: Family = counter(
    "vramtop_scrape_errors_total",
    "Telemetry samples that failed as a whole (the backend did not answer); the GPU series are absent until a sample succeeds again.",
);
pub const LAST_SAMPLE: Family = gauge(
    "vramtop_last_sample_timestamp_seconds",
    "Unix time of the sample the metrics come from (seconds).",
);
pub const GPU_UP: Family = gauge(
    "vramtop_gpu_up",
    "1 when the GPU answered the last sample, 0 when it did not (lost, no access, a driver error).",
);
pub const MEMORY_TOTAL: Family = gauge(
    "vramtop_gpu_memory_total_bytes",
    "Memory of the GPU (bytes), as the driver reports it.",
);
pub const MEMORY_USED: Family = gauge(
    "vramtop_gpu_memory_used_bytes",
    "Memory the driver counts as used (bytes): CUDA contexts, every allocator's reserved memory, other allocations.",
);
pub const MEMORY_FREE: Family = gauge(
    "vramtop_gpu_memory_free_bytes",
    "Memory the driver counts as free (bytes).",
);
pub const UTILIZATION: Family = gauge(
    "vramtop_gpu_utilization_ratio",
    "Fraction of the driver's last sample period in which a kernel ran (0-1).",
);
pub const MEMORY_UTILIZATION: Family = gauge(
    "vramtop_gpu_memory_utilization_ratio",
    "Fraction of the driver's last sample period in which device memory was read or written (0-1).",
);
pub const TEMPERATURE: Family = gauge(
    "vramtop_gpu_temperature_celsius",
    "GPU core temperature (degrees Celsius).",
);
pub const POWER: Family = gauge(
    "vramtop_gpu_power_watts",
    "Power draw of the board (watts).",
);
pub const POWER_LIMIT: Family = gauge(
    "vramtop_gpu_power_limit_watts",
    "Power limit of the board (watts).",
);
pub const CLOCK_SM: Family = gauge("vramtop_gpu_clock_sm_hertz", "Current SM clock (hertz).");
pub const CLOCK_MEMORY: Family = gauge(
    "vramtop_gpu_clock_memory_hertz",
    "Current memory clock (hertz).",
);
pub const FAN: Family = gauge(
    "vramtop_gpu_fan_speed_ratio",
    "Fan speed as a fraction of its maximum (0-1); absent on boards without a fan.",
);
pub const PROCESS_MEMORY: Family = gauge(
    "vramtop_gpu_process_memory_used_bytes",
    "GPU memory the driver attributes to a process (bytes); name is the executable's file name.",
);
pub const PROCESS_SM: Family = gauge(
    "vramtop_gpu_process_sm_utilization_ratio",
    "Fraction of the GPU's SM time the process used over the driver's last sample period (0-1; NVML process utilization).",
);
pub const PROCESS_OWN_CONTEXT: Family = gauge(
    "vramtop_gpu_process_own_context_info",
    "Always 1, only for a child of another GPU process that holds a CUDA context of its own on this GPU (e.g. a DataLoader worker that touched CUDA); parent_pid is that GPU process.",
);
pub const PROCESS_CPU: Family = gauge(
    "vramtop_process_cpu_utilization_ratio",
    "CPU time (user + system) of a GPU process over wall time between the last two samples, in CPUs: above 1 when several threads are busy, as top's percent over 100. One series per process, whatever GPUs it uses.",
);
pub const PROCESS_HOST_MEMORY: Family = gauge(
    "vramtop_process_host_memory_bytes",
    "Host memory resident (RSS) of a GPU process (bytes). One series per process, whatever GPUs it uses.",
);
pub const ALLOCATED: Family = gauge(
    "vramtop_allocator_allocated_bytes",
    "Bytes handed out to tensors by a process's caching allocator (torch.cuda.memory_allocated()).",
);
pub const RESERVED: Family = gauge(
    "vramtop_allocator_reserved_bytes",
    "Bytes the caching allocator holds from the driver (torch.cuda.memory_reserved()).",
);
pub const ACTIVE: Family = gauge(
    "vramtop_allocator_active_bytes",
    "Bytes in active blocks: allocated plus freed but still in use by a stream (active_bytes).",
);
pub const INACTIVE_SPLIT: Family = gauge(
    "vramtop_allocator_inactive_split_bytes",
    "Free bytes inside split segments, which empty_cache() cannot release (inactive_split_bytes).",
);
pub const SEGMENTS: Family = gauge(
    "vramtop_allocator_segments",
    "Segments (cudaMalloc'd blocks) the caching allocator holds.",
);
pub const ALLOC_RETRIES: Family = counter(
    "vramtop_allocator_alloc_retries_total",
    "Allocations that failed at first and succeeded after freeing the cache (num_alloc_retries).",
);
pub const OOMS: Family = counter(
    "vramtop_allocator_ooms_total",
    "Out-of-memory errors the caching allocator raised (num_ooms, or the OOM events its probe reported when more).",
);
pub const PEAK_ALLOCATED: Family = gauge(
    "vramtop_allocator_peak_allocated_bytes",
    "Highest allocated bytes since the process started or last reset its peak stats (max_memory_allocated()).",
);
pub const PEAK_RESERVED: Family = gauge(
    "vramtop_allocator_peak_reserved_bytes",
    "Highest reserved bytes since the process started or last reset its peak stats (max_memory_reserved()).",
);
pub const LARGEST_FREE_BLOCK: Family = gauge(
    "vramtop_allocator_largest_free_block_bytes",
    "The largest free block in the caching allocator's segments (bytes): the largest request served without a new cudaMalloc.",
);
pub const FRAGMENTATION: Family = gauge(
    "vramtop_allocator_fragmentation_ratio",
    "1 - largest free block / external free (free bytes in segments) (0-1): 0 when the external free memory is one block or there is none, near 1 when it is scattered in small pieces.",
);

/// Every family vramtop can emit, in the order it emits them.
pub const FAMILIES: &[Family] = &[
    BUILD_INFO,
    SAMPLES,
    SCRAPE_ERRORS,
    LAST_SAMPLE,
    GPU_UP,
    MEMORY_TOTAL,
    MEMORY_USED,
    MEMORY_FREE,
    UTILIZATION,
    MEMORY_UTILIZATION,
    TEMPERATURE,
    POWER,
    POWER_LIMIT,
    CLOCK_SM,
    CLOCK_MEMORY,
    FAN,
    PROCESS_MEMORY,
    PROCESS_SM,
    PROCESS_OWN_CONTEXT,
    PROCESS_CPU,
    PROCESS_HOST_MEMORY,
    ALLOCATED,
    RESERVED,
    ACTIVE,
    INACTIVE_SPLIT,
    SEGMENTS,
    ALLOC_RETRIES,
    OOMS,
    PEAK_ALLOCATED,
    PEAK_RESERVED,
    LARGEST_FREE_BLOCK,
    FRAGMENTATION,
];

/// One process's caching allocator, as `/metrics` shows it: the figures
/// that the dashboard's allocator view holds, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct AllocatorFigures<'a> {
    /// The index of the (physical) GPU the allocator is on.
    pub gpu: u32,
    /// The process, when known (the `pid` label is left out otherwise).
    pub pid: Option<u32>,
    pub stats: &'a DeviceStats,
    pub fragmentation: &'a Fragmentation,
    /// `memory_stats()` keys the source could not give (a probe's `null`s):
    /// their samples are left out, never exported as 0.
    pub unknown: &'a [String],
    /// OOM events the process's probe reported on this GPU (`None`: not a
    /// probe, or none seen).
    pub ooms_seen: Option<u64>,
}

impl AllocatorFigures<'_> {
    /// `value`, unless the figure under `memory_stats()` key `key` is unknown.
    fn known(&self, key: &str, value: f64) -> Option<f64> {
        (!self.unknown.iter().any(|u| u == key)).then_some(value)
    }

    /// `memory_allocated()` (bytes; a negative counter reads as 0).
    fn allocated(&self) -> Option<f64> {
        self.known(
            "allocated_bytes.all.current",
            self.stats.allocated_bytes.all.current.max(0) as f64,
        )
    }

    /// `memory_reserved()` (bytes; a negative counter reads as 0).
    fn reserved(&self) -> Option<f64> {
        self.known(
            "reserved_bytes.all.current",
            self.stats.reserved_bytes.all.current.max(0) as f64,
        )
    }

    /// PyTorch's own peak under key `key` (bytes), known as the dashboard
    /// knows it: sent, and not below the current figure, which a peak
    /// cannot be (a probe that left the key out, whose slot holds 0).
    fn own_peak(&self, key: &str, stat: &Stat) -> Option<f64> {
        stat.plausible_peak()
            .and_then(|peak| self.known(key, peak as f64))
    }
}

/// What a physical GPU was while it answered: its labels, which a lost
/// GPU's `vramtop_gpu_up 0` keeps, so it is the series that read 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuIdentity {
    pub uuid: Option<String>,
    pub name: String,
}

impl GpuIdentity {
    /// The identity of every answering physical GPU of `readings`, by
    /// index, over what `known` held (a GPU replaced in its slot takes
    /// the slot's labels).
    pub fn remember(known: &mut BTreeMap<u32, GpuIdentity>, readings: &[GpuReading]) {
        for s in readings.iter().filter_map(GpuReading::sample) {
            if s.mig.is_none() {
                known.insert(
                    s.index,
                    GpuIdentity {
                        uuid: s.uuid.clone(),
                        name: s.name.clone(),
                    },
                );
            }
        }
    }
}

/// What one rendering of `/metrics` is made of.
#[derive(Debug, Clone)]
pub struct MetricsInput<'a> {
    /// vramtop's version (`CARGO_PKG_VERSION`).
    pub version: &'a str,
    /// "nvml" or "sim".
    pub backend: &'a str,
    /// The latest sample; empty before the first or after a failed one.
    pub readings: &'a [GpuReading],
    /// Every visible process allocator.
    pub allocators: &'a [AllocatorFigures<'a>],
    pub samples_total: u64,
    pub scrape_errors_total: u64,
    /// Unix time of the latest sample (seconds), if there was one.
    pub last_sample_unix_s: Option<f64>,
    /// Every physical GPU seen answering since vramtop started, by index
    /// ([`GpuIdentity::remember`]): a lost one keeps its labels.
    pub last_seen: &'a BTreeMap<u32, GpuIdentity>,
}

/// The labels that identify a GPU row: `gpu` (the physical index), `uuid`
/// when known, `name`, and for a MIG instance `mig_instance` (its slot on
/// the parent GPU, as in nvidia-smi).
fn gpu_labels(s: &GpuSample) -> Labels {
    let (gpu, mig) = match &s.mig {
        Some(mig) => (mig.parent_index, Some(s.index.to_string())),
        None => (s.index, None),
    };
    identity_labels(gpu, mig.as_deref(), s.uuid.as_deref(), Some(&s.name))
}

/// `gpu`, then `mig_instance`, `uuid` and `name` where known, in the
/// order every GPU family gives them.
fn identity_labels(gpu: u32, mig: Option<&str>, uuid: Option<&str>, name: Option<&str>) -> Labels {
    let gpu = gpu.to_string();
    let mut pairs: Vec<(&str, &str)> = vec![("gpu", &gpu)];
    if let Some(slot) = mig {
        pairs.push(("mig_instance", slot));
    }
    if let Some(uuid) = uuid {
        pairs.push(("uuid", uuid));
    }
    if let Some(name) = name {
        pairs.push(("name", name));
    }
    Labels::new(&pairs)
}

/// The executable's file name from a command line: `/usr/bin/python3 x.py`
/// → `python3`. A short, stable label instead of a whole command line.
pub fn process_name(command: &str) -> Option<&str> {
    let first = command.split_whitespace().next()?;
    first.rsplit('/').next().filter(|n| !n.is_empty())
}

/// One GPU family over every answering GPU row; rows where `value` is `None`
/// give no sample.
fn per_gpu(
    w: &mut TextWriter,
    family: &Family,
    gpus: &[(&GpuSample, Labels)],
    value: impl Fn(&GpuSample) -> Option<f64>,
) {
    w.family(
        family,
        gpus.iter()
            .filter_map(|(s, labels)| value(s).map(|value| Sample { labels, value })),
    );
}

/// The labels of a process: `gpu` (for a figure of one GPU), `pid`, `name`
/// (the executable's file name) where known, and `parent_pid` when given.
fn process_labels(gpu: Option<u32>, p: &GpuProcess, parent_pid: Option<u32>) -> Labels {
    let gpu = gpu.map(|g| g.to_string());
    let pid = p.pid.to_string();
    let parent = parent_pid.map(|pp| pp.to_string());
    let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(4);
    if let Some(gpu) = &gpu {
        pairs.push(("gpu", gpu));
    }
    pairs.push(("pid", &pid));
    if let Some(name) = p.command.as_deref().and_then(process_name) {
        pairs.push(("name", name));
    }
    if let Some(parent) = &parent {
        pairs.push(("parent_pid", parent));
    }
    Labels::new(&pairs)
}

/// One per-process family over process lines; lines where `value` is
/// `None` give no sample.
fn per_process(
    w: &mut TextWriter,
    family: &Family,
    lines: &[(Labels, &GpuProcess)],
    value: impl Fn(&GpuProcess) -> Option<f64>,
) {
    w.family(
        family,
        lines
            .iter()
            .filter_map(|(labels, p)| value(p).map(|value| Sample { labels, value })),
    );
}

/// One allocator family over every allocator view.
fn per_allocator<'a>(
    w: &mut TextWriter,
    family: &Family,
    allocators: &[(Labels, &AllocatorFigures<'a>)],
    value: impl Fn(&AllocatorFigures<'a>) -> Option<f64>,
) {
    w.family(
        family,
        allocators.iter().filter_map(|(labels, a)| {
            Some(Sample {
                labels,
                value: value(a)?,
            })
        }),
    );
}

fn percent(p: Option<u32>) -> Option<f64> {
    p.map(|p| f64::from(p) / 100.0)
}

fn milliwatts(mw: Option<u32>) -> Option<f64> {
    mw.map(|mw| f64::from(mw) / 1_000.0)
}

fn megahertz(mhz: Option<u32>) -> Option<f64> {
    mhz.map(|mhz| f64::from(mhz) * 1e6)
}

/// Percent of one CPU → CPUs (1 is one CPU busy all the time); a figure
/// that cannot be a share of time (NaN, negative) is no figure.
fn cpus(percent: Option<f64>) -> Option<f64> {
    percent
        .filter(|p| p.is_finite() && *p >= 0.0)
        .map(|p| p / 100.0)
}

/// What one process uses of the host, labelled `pid` and `name`.
struct HostFigures {
    labels: Labels,
    /// CPUs busy ([`cpus`]).
    cpu: Option<f64>,
    /// Resident bytes.
    memory: Option<f64>,
}

fn bytes(b: Option<u64>) -> Option<f64> {
    b.map(|b| b as f64)
}

/// Renders the whole `/metrics` body.
pub fn render(input: &MetricsInput<'_>) -> String {
    let mut w = TextWriter::new();
    let none = Labels::default();
    let build = Labels::new(&[("version", input.version), ("backend", input.backend)]);
    w.family(
        &BUILD_INFO,
        [Sample {
            labels: &build,
            value: 1.0,
        }],
    );
    w.family(
        &SAMPLES,
        [Sample {
            labels: &none,
            value: input.samples_total as f64,
        }],
    );
    w.family(
        &SCRAPE_ERRORS,
        [Sample {
            labels: &none,
            value: input.scrape_errors_total as f64,
        }],
    );
    w.family(
        &LAST_SAMPLE,
        input.last_sample_unix_s.map(|value| Sample {
            labels: &none,
            value,
        }),
    );

    // Up/down per physical GPU, labelled as every GPU family is; a lost
    // GPU as it was last seen answering (only its index if never).
    let up: Vec<(Labels, f64)> = input
        .readings
        .iter()
        .filter_map(|r| match r {
            GpuReading::Ok(s) if s.mig.is_none() => Some((gpu_labels(s), 1.0)),
            GpuReading::Ok(_) => None,
            GpuReading::Lost { index, .. } => {
                let seen = input.last_seen.get(index);
                let labels = identity_labels(
                    *index,
                    None,
                    seen.and_then(|s| s.uuid.as_deref()),
                    seen.map(|s| s.name.as_str()),
                );
                Some((labels, 0.0))
            }
        })
        .collect();
    w.family(
        &GPU_UP,
        up.iter().map(|(labels, value)| Sample {
            labels,
            value: *value,
        }),
    );

    let gpus: Vec<(&GpuSample, Labels)> = input
        .readings
        .iter()
        .filter_map(GpuReading::sample)
        .map(|s| (s, gpu_labels(s)))
        .collect();
    per_gpu(&mut w, &MEMORY_TOTAL, &gpus, |s| bytes(s.memory_total));
    per_gpu(&mut w, &MEMORY_USED, &gpus, |s| bytes(s.memory_used));
    per_gpu(&mut w, &MEMORY_FREE, &gpus, |s| bytes(s.memory_free));
    per_gpu(&mut w, &UTILIZATION, &gpus, |s| percent(s.gpu_utilization));
    per_gpu(&mut w, &MEMORY_UTILIZATION, &gpus, |s| {
        percent(s.memory_utilization)
    });
    per_gpu(&mut w, &TEMPERATURE, &gpus, |s| {
        s.temperature_c.map(f64::from)
    });
    per_gpu(&mut w, &POWER, &gpus, |s| milliwatts(s.power_draw_mw));
    per_gpu(&mut w, &POWER_LIMIT, &gpus, |s| {
        milliwatts(s.power_limit_mw)
    });
    per_gpu(&mut w, &CLOCK_SM, &gpus, |s| megahertz(s.sm_clock_mhz));
    per_gpu(&mut w, &CLOCK_MEMORY, &gpus, |s| {
        megahertz(s.memory_clock_mhz)
    });
    per_gpu(&mut w, &FAN, &gpus, |s| percent(s.fan_percent));

    // Processes from the physical GPUs only: a MIG row repeats a subset of
    // its parent's processes, which would count them twice. The series are
    // as many as the driver lists processes, as nvidia-smi shows them.
    let listed: Vec<(u32, &GpuProcess)> = gpus
        .iter()
        .filter(|(s, _)| s.mig.is_none())
        .flat_map(|(s, _)| s.listed_processes().iter().map(move |p| (s.index, p)))
        .collect();
    let lines: Vec<(Labels, &GpuProcess)> = listed
        .iter()
        .map(|&(gpu, p)| (process_labels(Some(gpu), p, None), p))
        .collect();
    per_process(&mut w, &PROCESS_MEMORY, &lines, |p| bytes(p.used_memory));
    per_process(&mut w, &PROCESS_SM, &lines, |p| percent(p.usage.sm_percent));

    let gpu_pids: BTreeSet<u32> = listed.iter().map(|(_, p)| p.pid).collect();
    let children: Vec<(Labels, &GpuProcess)> = listed
        .iter()
        .filter(|(_, p)| p.own_context_in_child(&gpu_pids))
        .map(|&(gpu, p)| (process_labels(Some(gpu), p, p.parent_pid), p))
        .collect();
    per_process(&mut w, &PROCESS_OWN_CONTEXT, &children, |_| Some(1.0));

    // CPU and host memory belong to the process, not to one of its GPUs:
    // one series per pid, from its first line that knows the figure.
    let mut hosts: BTreeMap<u32, HostFigures> = BTreeMap::new();
    for &(_, p) in &listed {
        let h = hosts.entry(p.pid).or_insert_with(|| HostFigures {
            labels: process_labels(None, p, None),
            cpu: None,
            memory: None,
        });
        h.cpu = h.cpu.or_else(|| cpus(p.usage.cpu_percent));
        h.memory = h.memory.or_else(|| bytes(p.usage.host_memory));
    }
    w.family(
        &PROCESS_CPU,
        hosts.values().filter_map(|h| {
            h.cpu.map(|value| Sample {
                labels: &h.labels,
                value,
            })
        }),
    );
    w.family(
        &PROCESS_HOST_MEMORY,
        hosts.values().filter_map(|h| {
            h.memory.map(|value| Sample {
                labels: &h.labels,
                value,
            })
        }),
    );

    let allocators: Vec<(Labels, &AllocatorFigures<'_>)> = input
        .allocators
        .iter()
        .map(|a| {
            let gpu = a.gpu.to_string();
            let pid = a.pid.map(|p| p.to_string());
            let mut pairs: Vec<(&str, &str)> = vec![("gpu", &gpu)];
            if let Some(pid) = &pid {
                pairs.push(("pid", pid));
            }
            (Labels::new(&pairs), a)
        })
        .collect();
    per_allocator(&mut w, &ALLOCATED, &allocators, AllocatorFigures::allocated);
    per_allocator(&mut w, &RESERVED, &allocators, AllocatorFigures::reserved);
    per_allocator(&mut w, &ACTIVE, &allocators, |a| {
        a.known(
            "active_bytes.all.current",
            a.stats.active_bytes.all.current as f64,
        )
    });
    per_allocator(&mut w, &INACTIVE_SPLIT, &allocators, |a| {
        a.known(
            "inactive_split_bytes.all.current",
            a.stats.inactive_split_bytes.all.current as f64,
        )
    });
    per_allocator(&mut w, &SEGMENTS, &allocators, |a| {
        a.known("segment.all.current", a.stats.segment.all.current as f64)
    });
    per_allocator(&mut w, &ALLOC_RETRIES, &allocators, |a| {
        a.known("num_alloc_retries", a.stats.num_alloc_retries as f64)
    });
    // num_ooms comes with the stats (every stats interval); a probe's OOM
    // events come at once, and count when num_ooms is unknown.
    per_allocator(&mut w, &OOMS, &allocators, |a| {
        let counted = a.known("num_ooms", a.stats.num_ooms.max(0) as f64);
        let seen = a.ooms_seen.map(|n| n as f64);
        match (counted, seen) {
            (Some(c), Some(s)) => Some(c.max(s)),
            (c, s) => c.or(s),
        }
    });
    per_allocator(&mut w, &PEAK_ALLOCATED, &allocators, |a| {
        a.own_peak("allocated_bytes.all.peak", &a.stats.allocated_bytes.all)
    });
    per_allocator(&mut w, &PEAK_RESERVED, &allocators, |a| {
        a.own_peak("reserved_bytes.all.peak", &a.stats.reserved_bytes.all)
    });
    // The free-block figures come from the segment layout, which a probe
    // always sends whole.
    per_allocator(&mut w, &LARGEST_FREE_BLOCK, &allocators, |a| {
        Some(a.fragmentation.largest_free_block as f64)
    });
    per_allocator(&mut w, &FRAGMENTATION, &allocators, |a| {
        Some(a.fragmentation.fragmentation)
    });
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::fragmentation;
    use crate::device::{MigInfo, ProcessUsage};

    fn full_gpu(index: u32) -> GpuSample {
        GpuSample {
            uuid: Some(format!("GPU-{index}")),
            memory_total: Some(80 << 30),
            memory_used: Some(10 << 30),
            memory_free: Some(70 << 30),
            gpu_utilization: Some(87),
            memory_utilization: Some(40),
            temperature_c: Some(61),
            power_draw_mw: Some(350_500),
            power_limit_mw: Some(700_000),
            sm_clock_mhz: Some(1_980),
            memory_clock_mhz: Some(2_619),
            fan_percent: None,
            processes: Some(vec![GpuProcess {
                command: Some("/usr/bin/python3 train.py --lr 0.1".to_string()),
                ..GpuProcess::new(4242, Some(9 << 30))
            }]),
            ..GpuSample::unknown(index, "NVIDIA H100 80GB HBM3")
        }
    }

    fn input<'a>(
        readings: &'a [GpuReading],
        allocators: &'a [AllocatorFigures<'a>],
    ) -> MetricsInput<'a> {
        MetricsInput {
            version: "0.1.0",
            backend: "nvml",
            readings,
            allocators,
            samples_total: 7,
            scrape_errors_total: 1,
            last_sample_unix_s: Some(1_700_000_000.5),
            last_seen: &NOTHING_SEEN,
        }
    }

    static NOTHING_SEEN: BTreeMap<u32, GpuIdentity> = BTreeMap::new();

    /// The sample lines (no comments) of family `name`.
    fn lines_of<'t>(text: &'t str, name: &str) -> Vec<&'t str> {
        text.lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .collect()
    }

    #[test]
    fn gpu_figures_are_converted_to_base_units() {
        let readings = [GpuReading::Ok(full_gpu(0))];
        let text = render(&input(&readings, &[]));
        let labels = "{gpu=\"0\",uuid=\"GPU-0\",name=\"NVIDIA H100 80GB HBM3\"}";
        for expected in [
            format!("vramtop_gpu_memory_total_bytes{labels} 85899345920"),
            format!("vramtop_gpu_utilization_ratio{labels} 0.87"),
            format!("vramtop_gpu_memory_utilization_ratio{labels} 0.4"),
            format!("vramtop_gpu_temperature_celsius{labels} 61"),
            format!("vramtop_gpu_power_watts{labels} 350.5"),
            format!("vramtop_gpu_power_limit_watts{labels} 700"),
            format!("vramtop_gpu_clock_sm_hertz{labels} 1980000000"),
            format!("vramtop_gpu_clock_memory_hertz{labels} 2619000000"),
            "vramtop_gpu_process_memory_used_bytes{gpu=\"0\",pid=\"4242\",name=\"python3\"} 9663676416"
                .to_string(),
            "vramtop_build_info{version=\"0.1.0\",backend=\"nvml\"} 1".to_string(),
            "vramtop_scrape_errors_total 1".to_string(),
            "vramtop_samples_total 7".to_string(),
            format!("vramtop_gpu_up{labels} 1"),
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected}\n{text}");
        }
    }

    #[test]
    fn unsupported_figures_give_no_series_not_zero() {
        let mut g = GpuSample::unknown(3, "Mystery GPU");
        g.memory_total = Some(1 << 30);
        let readings = [GpuReading::Ok(g)];
        let text = render(&input(&readings, &[]));
        assert_eq!(lines_of(&text, "vramtop_gpu_memory_total_bytes").len(), 1);
        for absent in [
            "vramtop_gpu_memory_used_bytes",
            "vramtop_gpu_utilization_ratio",
            "vramtop_gpu_temperature_celsius",
            "vramtop_gpu_power_watts",
            "vramtop_gpu_clock_sm_hertz",
            "vramtop_gpu_fan_speed_ratio",
        ] {
            assert!(
                !text.contains(absent),
                "{absent} should be omitted:\n{text}"
            );
        }
        // Without a uuid the label is left out rather than set to "".
        assert!(
            text.contains(
                "vramtop_gpu_memory_total_bytes{gpu=\"3\",name=\"Mystery GPU\"} 1073741824"
            ),
            "{text}"
        );
    }

    #[test]
    fn lost_gpu_is_down_and_has_no_figures() {
        let readings = [
            GpuReading::Ok(full_gpu(0)),
            GpuReading::Lost {
                index: 1,
                reason: "fell off the bus".to_string(),
                cause: crate::device::Unanswered::Lost,
            },
        ];
        let text = render(&input(&readings, &[]));
        assert!(text.contains("vramtop_gpu_up{gpu=\"1\"} 0\n"), "{text}");
        assert_eq!(lines_of(&text, "vramtop_gpu_memory_total_bytes").len(), 1);
    }

    #[test]
    fn gpu_up_carries_uuid_and_name_and_a_lost_gpu_keeps_those_it_answered_with() {
        let answering = [GpuReading::Ok(full_gpu(0)), GpuReading::Ok(full_gpu(1))];
        let mut seen = BTreeMap::new();
        GpuIdentity::remember(&mut seen, &answering);
        let text = render(&MetricsInput {
            last_seen: &seen,
            ..input(&answering, &[])
        });
        let up = "vramtop_gpu_up{gpu=\"1\",uuid=\"GPU-1\",name=\"NVIDIA H100 80GB HBM3\"}";
        assert!(text.contains(&format!("{up} 1\n")), "{text}");
        // Lost, it is the same series reading 0.
        let lost = [
            GpuReading::Ok(full_gpu(0)),
            GpuReading::Lost {
                index: 1,
                reason: "fell off the bus".to_string(),
                cause: crate::device::Unanswered::Lost,
            },
        ];
        GpuIdentity::remember(&mut seen, &lost);
        let text = render(&MetricsInput {
            last_seen: &seen,
            ..input(&lost, &[])
        });
        assert!(text.contains(&format!("{up} 0\n")), "{text}");
        // Every vramtop_gpu_up line has the labels the memory figures do.
        for line in lines_of(&text, "vramtop_gpu_up") {
            assert!(line.contains(",uuid=") && line.contains(",name="), "{line}");
        }
    }

    #[test]
    fn mig_rows_carry_parent_and_instance_and_do_not_repeat_processes() {
        let parent = full_gpu(0);
        let mut mig = GpuSample::unknown(2, "MIG 1g.10gb");
        mig.memory_total = Some(10 << 30);
        mig.processes = parent.processes.clone();
        mig.mig = Some(MigInfo {
            parent_index: 0,
            gpu_instance_id: Some(7),
            compute_instance_id: Some(0),
        });
        let readings = [GpuReading::Ok(parent), GpuReading::Ok(mig)];
        let text = render(&input(&readings, &[]));
        assert!(
            text.contains(
                "vramtop_gpu_memory_total_bytes{gpu=\"0\",mig_instance=\"2\",name=\"MIG 1g.10gb\"} 10737418240"
            ),
            "{text}"
        );
        assert_eq!(
            lines_of(&text, "vramtop_gpu_process_memory_used_bytes").len(),
            1
        );
        assert_eq!(lines_of(&text, "vramtop_gpu_up").len(), 1);
    }

    #[test]
    fn allocator_figures_per_process() {
        let mut stats = DeviceStats::default();
        stats.allocated_bytes.all.current = 3 << 20;
        stats.allocated_bytes.all.peak = 5 << 20;
        stats.reserved_bytes.all.current = 4 << 20;
        stats.segment.all.current = 2;
        stats.num_ooms = 3;
        stats.num_alloc_retries = 1;
        let free = fragmentation(&[]);
        let allocators = [AllocatorFigures {
            gpu: 1,
            pid: Some(9),
            stats: &stats,
            fragmentation: &free,
            unknown: &[],
            ooms_seen: None,
        }];
        let text = render(&input(&[], &allocators));
        let labels = "{gpu=\"1\",pid=\"9\"}";
        for expected in [
            format!("vramtop_allocator_allocated_bytes{labels} 3145728"),
            format!("vramtop_allocator_reserved_bytes{labels} 4194304"),
            format!("vramtop_allocator_peak_allocated_bytes{labels} 5242880"),
            format!("vramtop_allocator_segments{labels} 2"),
            format!("vramtop_allocator_ooms_total{labels} 3"),
            format!("vramtop_allocator_alloc_retries_total{labels} 1"),
            format!("vramtop_allocator_fragmentation_ratio{labels} 0"),
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected}\n{text}");
        }
        assert!(text.contains("# TYPE vramtop_allocator_ooms_total counter\n"));
    }

    #[test]
    fn unknown_allocator_figures_are_left_out_not_exported_as_zero() {
        let mut stats = DeviceStats::default();
        stats.reserved_bytes.all.current = 4 << 20;
        let free = fragmentation(&[]);
        let unknown = [
            "allocated_bytes.all.current".to_string(),
            "num_ooms".to_string(),
        ];
        let allocators = [AllocatorFigures {
            gpu: 0,
            pid: Some(7),
            stats: &stats,
            fragmentation: &free,
            unknown: &unknown,
            ooms_seen: None,
        }];
        let text = render(&input(&[], &allocators));
        assert!(
            !text.contains("vramtop_allocator_allocated_bytes"),
            "{text}"
        );
        assert!(!text.contains("vramtop_allocator_ooms_total"), "{text}");
        assert!(
            text.lines()
                .any(|l| l == "vramtop_allocator_reserved_bytes{gpu=\"0\",pid=\"7\"} 4194304"),
            "{text}"
        );
    }

    #[test]
    fn a_probes_oom_events_count_when_num_ooms_is_unknown_or_behind() {
        let stats = DeviceStats {
            num_ooms: 1,
            ..DeviceStats::default()
        };
        let free = fragmentation(&[]);
        let unknown = ["num_ooms".to_string()];
        let line = "vramtop_allocator_ooms_total{gpu=\"0\",pid=\"7\"}";
        for (num_ooms_unknown, seen, want) in [
            (true, Some(2), Some("2")),
            (false, Some(3), Some("3")),
            (false, Some(0), Some("1")),
            (true, None, None),
        ] {
            let allocator = AllocatorFigures {
                gpu: 0,
                pid: Some(7),
                stats: &stats,
                fragmentation: &free,
                unknown: if num_ooms_unknown { &unknown } else { &[] },
                ooms_seen: seen,
            };
            let text = render(&input(&[], &[allocator]));
            let got = text
                .lines()
                .find_map(|l| l.strip_prefix(line))
                .map(str::trim);
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn every_emitted_family_is_declared_and_counters_end_in_total() {
        let mut stats = DeviceStats::default();
        stats.reserved_bytes.all.current = 1;
        stats.reserved_bytes.all.peak = 1;
        let free = fragmentation(&[]);
        let allocators = [AllocatorFigures {
            gpu: 0,
            pid: Some(1),
            stats: &stats,
            fragmentation: &free,
            unknown: &[],
            ooms_seen: None,
        }];
        let mut gpu = full_gpu(0);
        if let Some(ps) = gpu.processes.as_mut() {
            ps[0].usage = ProcessUsage {
                sm_percent: Some(30),
                cpu_percent: Some(99.5),
                host_memory: Some(1 << 30),
            };
            ps.push(GpuProcess {
                parent_pid: Some(4242),
                ..GpuProcess::new(4243, Some(500 << 20))
            });
        }
        let readings = [GpuReading::Ok(gpu)];
        let text = render(&input(&readings, &allocators));
        let mut typed = Vec::new();
        for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
            let mut parts = line.split(' ').skip(2);
            let (Some(name), Some(kind)) = (parts.next(), parts.next()) else {
                panic!("malformed TYPE line {line}");
            };
            let family = FAMILIES
                .iter()
                .find(|f| f.name == name)
                .unwrap_or_else(|| panic!("{name} is not in FAMILIES"));
            assert_eq!(family.kind.as_str(), kind);
            typed.push(name);
        }
        // Everything but the fan (n/a on this GPU) is emitted.
        assert_eq!(typed.len(), FAMILIES.len() - 1, "{text}");
        for f in FAMILIES {
            assert_eq!(
                f.kind == MetricType::Counter,
                f.name.ends_with("_total"),
                "{}",
                f.name
            );
            assert!(f.name.starts_with("vramtop_"), "{}", f.name);
        }
    }

    /// A trainer (pid 100) on GPUs 0 and 1 and its DataLoader worker
    /// (pid 101) with a context of its own on GPU 0, every usage figure
    /// known.
    fn trainer_and_worker() -> [GpuReading; 2] {
        let usage = |sm| ProcessUsage {
            sm_percent: Some(sm),
            cpu_percent: Some(250.0),
            host_memory: Some(3 << 30),
        };
        let trainer = |gpu: u32| GpuProcess {
            command: Some("/opt/venv/bin/python train.py".to_string()),
            parent_pid: Some(1),
            usage: usage(30 + gpu),
            ..GpuProcess::new(100, Some(8 << 30))
        };
        let worker = GpuProcess {
            command: Some("/opt/venv/bin/python train.py".to_string()),
            parent_pid: Some(100),
            usage: ProcessUsage {
                sm_percent: Some(0),
                cpu_percent: Some(12.5),
                host_memory: Some(700 << 20),
            },
            ..GpuProcess::new(101, Some(500 << 20))
        };
        let mut g0 = full_gpu(0);
        g0.processes = Some(vec![trainer(0), worker]);
        let mut g1 = full_gpu(1);
        g1.processes = Some(vec![trainer(1)]);
        [GpuReading::Ok(g0), GpuReading::Ok(g1)]
    }

    #[test]
    fn process_sm_utilization_is_a_ratio_per_gpu_and_pid() {
        let readings = trainer_and_worker();
        let text = render(&input(&readings, &[]));
        let family = "vramtop_gpu_process_sm_utilization_ratio";
        assert_eq!(
            lines_of(&text, family),
            [
                format!("{family}{{gpu=\"0\",pid=\"100\",name=\"python\"}} 0.3"),
                format!("{family}{{gpu=\"0\",pid=\"101\",name=\"python\"}} 0"),
                format!("{family}{{gpu=\"1\",pid=\"100\",name=\"python\"}} 0.31"),
            ],
            "{text}"
        );
    }

    #[test]
    fn cpu_and_host_memory_are_one_series_per_process_whatever_its_gpus() {
        let readings = trainer_and_worker();
        let text = render(&input(&readings, &[]));
        // 250 % of one CPU is 2.5 CPUs: above 1 with several busy threads.
        assert_eq!(
            lines_of(&text, "vramtop_process_cpu_utilization_ratio"),
            [
                "vramtop_process_cpu_utilization_ratio{pid=\"100\",name=\"python\"} 2.5",
                "vramtop_process_cpu_utilization_ratio{pid=\"101\",name=\"python\"} 0.125",
            ],
            "{text}"
        );
        assert_eq!(
            lines_of(&text, "vramtop_process_host_memory_bytes"),
            [
                "vramtop_process_host_memory_bytes{pid=\"100\",name=\"python\"} 3221225472",
                "vramtop_process_host_memory_bytes{pid=\"101\",name=\"python\"} 734003200",
            ],
            "{text}"
        );
    }

    #[test]
    fn unknown_process_usage_gives_no_series_not_zero() {
        // full_gpu's process has no usage figure (the first sample, a
        // driver without process utilisation, a pid /proc does not show).
        let readings = [GpuReading::Ok(full_gpu(0))];
        let text = render(&input(&readings, &[]));
        for absent in [
            "vramtop_gpu_process_sm_utilization_ratio",
            "vramtop_process_cpu_utilization_ratio",
            "vramtop_process_host_memory_bytes",
            "vramtop_gpu_process_own_context_info",
        ] {
            assert!(!text.contains(absent), "{absent}:\n{text}");
        }
        // One figure known, the others still absent; a CPU figure that is
        // no share of time is no figure either.
        let mut gpu = full_gpu(0);
        if let Some(ps) = gpu.processes.as_mut() {
            ps[0].usage.host_memory = Some(1 << 20);
            ps[0].usage.cpu_percent = Some(f64::NAN);
        }
        let readings = [GpuReading::Ok(gpu)];
        let text = render(&input(&readings, &[]));
        assert_eq!(
            lines_of(&text, "vramtop_process_host_memory_bytes").len(),
            1
        );
        assert!(
            !text.contains("vramtop_process_cpu_utilization_ratio"),
            "{text}"
        );
        assert!(
            !text.contains("vramtop_gpu_process_sm_utilization_ratio"),
            "{text}"
        );
    }

    #[test]
    fn own_context_info_marks_only_children_of_gpu_processes() {
        let readings = trainer_and_worker();
        let text = render(&input(&readings, &[]));
        assert_eq!(
            lines_of(&text, "vramtop_gpu_process_own_context_info"),
            [
                "vramtop_gpu_process_own_context_info{gpu=\"0\",pid=\"101\",name=\"python\",parent_pid=\"100\"} 1"
            ],
            "{text}"
        );
        // A parent that is no GPU process, or unknown, marks nothing.
        let mut gpu = full_gpu(0);
        if let Some(ps) = gpu.processes.as_mut() {
            ps[0].parent_pid = Some(1);
            ps.push(GpuProcess::new(77, Some(1 << 20)));
            ps.push(GpuProcess {
                parent_pid: Some(78),
                ..GpuProcess::new(78, Some(1 << 20))
            });
        }
        let readings = [GpuReading::Ok(gpu)];
        let text = render(&input(&readings, &[]));
        assert!(
            !text.contains("vramtop_gpu_process_own_context_info"),
            "{text}"
        );
    }

    #[test]
    fn a_child_on_a_mig_instance_is_marked_once_from_its_parent_gpu() {
        let [parent, _] = trainer_and_worker();
        let GpuReading::Ok(parent) = parent else {
            panic!("an answering GPU");
        };
        let mut mig = GpuSample::unknown(2, "MIG 1g.10gb");
        mig.processes = parent.processes.clone();
        mig.mig = Some(MigInfo {
            parent_index: 0,
            gpu_instance_id: Some(7),
            compute_instance_id: Some(0),
        });
        let readings = [GpuReading::Ok(parent), GpuReading::Ok(mig)];
        let text = render(&input(&readings, &[]));
        assert_eq!(
            lines_of(&text, "vramtop_gpu_process_own_context_info").len(),
            1
        );
        assert_eq!(
            lines_of(&text, "vramtop_gpu_process_sm_utilization_ratio").len(),
            2
        );
    }

    #[test]
    fn pytorchs_own_peaks_are_exported_where_sent_and_not_below_current() {
        let mut stats = DeviceStats::default();
        stats.allocated_bytes.all.current = 3 << 20;
        stats.allocated_bytes.all.peak = 5 << 20;
        stats.reserved_bytes.all.current = 4 << 20;
        stats.reserved_bytes.all.peak = 6 << 20;
        let free = fragmentation(&[]);
        fn figures<'a>(
            stats: &'a DeviceStats,
            fragmentation: &'a Fragmentation,
            unknown: &'a [String],
        ) -> AllocatorFigures<'a> {
            AllocatorFigures {
                gpu: 0,
                pid: Some(7),
                stats,
                fragmentation,
                unknown,
                ooms_seen: None,
            }
        }
        let text = render(&input(&[], &[figures(&stats, &free, &[])]));
        for expected in [
            "vramtop_allocator_peak_allocated_bytes{gpu=\"0\",pid=\"7\"} 5242880",
            "vramtop_allocator_peak_reserved_bytes{gpu=\"0\",pid=\"7\"} 6291456",
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected}\n{text}");
        }
        // Sent as null: unknown.
        let unknown = ["reserved_bytes.all.peak".to_string()];
        let text = render(&input(&[], &[figures(&stats, &free, &unknown)]));
        assert!(
            !text.contains("vramtop_allocator_peak_reserved_bytes"),
            "{text}"
        );
        assert!(
            text.contains("vramtop_allocator_peak_allocated_bytes"),
            "{text}"
        );
        // Left out (its slot 0, below the current figure): no peak either.
        let mut older = stats.clone();
        older.reserved_bytes.all.peak = 0;
        older.allocated_bytes.all.peak = 0;
        let text = render(&input(&[], &[figures(&older, &free, &[])]));
        assert!(!text.contains("vramtop_allocator_peak_"), "{text}");
    }

    #[test]
    fn the_exposition_with_every_process_figure_parses() {
        let readings = trainer_and_worker();
        let mut stats = DeviceStats::default();
        stats.reserved_bytes.all.current = 1;
        stats.reserved_bytes.all.peak = 2;
        let free = fragmentation(&[]);
        let allocators = [AllocatorFigures {
            gpu: 0,
            pid: Some(100),
            stats: &stats,
            fragmentation: &free,
            unknown: &[],
            ooms_seen: None,
        }];
        let text = render(&input(&readings, &allocators));
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("the exposition parses");
        let of = |name: &str| {
            scrape
                .samples
                .iter()
                .filter(|s| s.metric == name)
                .collect::<Vec<_>>()
        };
        let cpu = of("vramtop_process_cpu_utilization_ratio");
        assert_eq!(cpu.len(), 2);
        assert_eq!(cpu[0].labels.get("pid"), Some("100"));
        assert!(matches!(cpu[0].value, prometheus_parse::Value::Gauge(v) if v == 2.5));
        let child = of("vramtop_gpu_process_own_context_info");
        assert_eq!(child.len(), 1);
        assert_eq!(child[0].labels.get("parent_pid"), Some("100"));
        assert_eq!(of("vramtop_gpu_process_sm_utilization_ratio").len(), 3);
        assert_eq!(of("vramtop_process_host_memory_bytes").len(), 2);
        assert_eq!(of("vramtop_allocator_peak_reserved_bytes").len(), 1);
        for name in [
            "vramtop_gpu_process_sm_utilization_ratio",
            "vramtop_process_cpu_utilization_ratio",
            "vramtop_process_host_memory_bytes",
            "vramtop_gpu_process_own_context_info",
            "vramtop_allocator_peak_reserved_bytes",
        ] {
            assert!(scrape.docs.contains_key(name), "{name} has HELP");
        }
    }

    #[test]
    fn process_name_is_the_executable_file_name() {
        assert_eq!(process_name("/usr/bin/python3 train.py"), Some("python3"));
        assert_eq!(process_name("python train.py"), Some("python"));
        assert_eq!(process_name("   "), None);
        assert_eq!(process_name("/"), None);
    }
}
