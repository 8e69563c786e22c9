//! The one path from a telemetry sample to the allocator views: take the
//! sample's readings, copy what the probes last sent, map the probes'
//! devices to the readings' GPUs, build the views. The dashboard loop,
//! `--once`, `record` and `serve` all go through [`AllocatorSources::observe`],
//! so that they cannot disagree on which allocator a GPU shows.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::source::{
    HeadlessSample, account_probes_in_simulation, allocator_figures, allocator_views_with_probes,
    headless_sample, probe_views, resolve_probe_devices, simulated_allocators, trainer_view,
};
use super::state::{AllocatorView, AppState};
use crate::device::GpuReading;
use crate::device::host::HostSampler;
use crate::device::sim::SimCluster;
use crate::probe::{ProbeSnapshot, Registry};

/// The allocators vramtop can see beside the telemetry: the simulated
/// training processes (when the simulation is the backend) and the live
/// probes. Dropping it stops the probe threads.
pub struct AllocatorSources {
    sim: Option<SimCluster>,
    probes: Registry,
    /// %CPU and host memory of the probed processes drawn on a simulated
    /// GPU (NVML's backend reads them for its own process list); kept
    /// between samples for %CPU. A lock, as [`Self::observe`] takes `&self`.
    probed_host: Mutex<HostSampler>,
}

impl AllocatorSources {
    /// Starts watching the default probe directories.
    pub fn start(sim: Option<SimCluster>) -> Self {
        Self::with_registry(sim, Registry::start_default())
    }

    /// With a registry started earlier (`--once` discovers probes while the
    /// backend starts).
    pub fn with_registry(sim: Option<SimCluster>, probes: Registry) -> Self {
        AllocatorSources {
            sim,
            probes,
            probed_host: Mutex::new(HostSampler::new()),
        }
    }

    /// The simulation, when it is the backend.
    pub fn sim(&self) -> Option<&SimCluster> {
        self.sim.as_ref()
    }

    /// Waits (at most `timeout`) for the probes found to send their first
    /// figures: for a one-off sample.
    pub fn wait_for_probes(&self, timeout: Duration) {
        self.probes.wait_ready(timeout);
    }

    /// Takes the probes' state beside `readings` and maps their devices to
    /// the readings' GPUs. Build views from the result right away: the
    /// simulated trainers are read when the views are built.
    pub fn observe(&self, readings: Vec<GpuReading>) -> Observation<'_> {
        self.observe_with(readings, self.probes.snapshot())
    }

    /// [`Self::observe`] with the probes' state given.
    fn observe_with(
        &self,
        mut readings: Vec<GpuReading>,
        mut probes: ProbeSnapshot,
    ) -> Observation<'_> {
        resolve_probe_devices(&mut probes, &readings);
        let mut probed_in_sim = BTreeMap::new();
        if let Some(sim) = &self.sim {
            probed_in_sim =
                account_probes_in_simulation(&mut readings, &probes, sim.context_overhead());
            self.add_probed_host_usage(&mut readings, &probes);
        }
        Observation {
            sim: self.sim.as_ref(),
            readings,
            probes,
            probed_in_sim,
        }
    }
}

impl AllocatorSources {
    /// Fills in %CPU and host memory of the probed processes' rows on the
    /// simulated GPUs: they are real processes of this machine, read from
    /// `/proc` as NVML's backend reads its processes. The simulated
    /// processes' pids are made up and never read (one may be a real pid
    /// of someone else's).
    fn add_probed_host_usage(&self, readings: &mut [GpuReading], probes: &ProbeSnapshot) {
        // Only a pid of this machine's namespace: a probe in a container
        // says its own number, which here may be anybody's process.
        let probed: BTreeSet<u32> = probes
            .probes
            .iter()
            .filter(|p| p.status.is_connected() && p.pid_is_this_machines())
            .filter_map(|p| p.pid())
            .collect();
        if probed.is_empty() {
            return;
        }
        let host = match self.probed_host.lock() {
            Ok(mut sampler) => sampler.sample(&probed, Instant::now()),
            Err(poisoned) => poisoned.into_inner().sample(&probed, Instant::now()),
        };
        // Each pid's parent read once, however many GPUs list it.
        let parents: HashMap<u32, Option<u32>> = probed
            .iter()
            .map(|&pid| (pid, crate::device::procfs::parent_pid(pid)))
            .collect();
        fill_probed_usage(readings, &probed, &host, &parents);
    }
}

/// Puts `host`'s figures into the rows of `probed` pids that have none.
fn fill_probed_usage(
    readings: &mut [GpuReading],
    probed: &BTreeSet<u32>,
    host: &HashMap<u32, crate::device::host::HostUsage>,
    parents: &HashMap<u32, Option<u32>>,
) {
    for reading in readings {
        let GpuReading::Ok(sample) = reading else {
            continue;
        };
        for p in sample.processes.iter_mut().flatten() {
            if !probed.contains(&p.pid) {
                continue;
            }
            if let Some(figures) = host.get(&p.pid) {
                p.usage.cpu_percent = p.usage.cpu_percent.or(figures.cpu_percent);
                p.usage.host_memory = p.usage.host_memory.or(figures.host_memory);
            }
            // Its parent, as the NVML backend reads it for its processes
            // (the detail names it; the tree puts a worker under it).
            if p.parent_pid.is_none() {
                p.parent_pid = parents.get(&p.pid).copied().flatten();
            }
        }
    }
}

/// One sample with the probes as they were when it was taken, their
/// devices mapped to its GPUs.
pub struct Observation<'a> {
    sim: Option<&'a SimCluster>,
    pub readings: Vec<GpuReading>,
    pub probes: ProbeSnapshot,
    /// Bytes of probed processes added to each simulated GPU's driver used
    /// (by GPU index): the simulated device the stress panel's worker reads
    /// does not count them. Empty on a real GPU, whose driver counts them.
    probed_in_sim: BTreeMap<u32, u64>,
}

impl Observation<'_> {
    /// One allocator view per GPU (NVML index), as the dashboard shows it:
    /// a probe wins over a simulated trainer; with several probes on a GPU,
    /// the one `picks` names for it, else the first socket's.
    pub fn views(&self, picks: &BTreeMap<u32, u32>) -> BTreeMap<u32, AllocatorView> {
        allocator_views_with_probes(self.sim, &self.probes, picks)
    }

    /// Every allocator with its GPU, as `serve` exports them: each simulated
    /// trainer by GPU then pid, then each probe's devices by pid.
    pub fn every_view(&self) -> Vec<(u32, AllocatorView)> {
        let mut trainers = self.sim.map(SimCluster::trainers).unwrap_or_default();
        // By GPU, then pid: series in a stable, readable order.
        trainers.sort_by_key(|t| (t.gpu, t.pid));
        let mut views: Vec<(u32, AllocatorView)> = trainers
            .into_iter()
            .map(|t| (t.gpu, trainer_view(t)))
            .collect();
        views.extend(probe_views(&self.probes));
        views
    }

    /// Every allocator the dashboard can show, by GPU, in the order `v`
    /// cycles them ([`AppState::allocator_pids_on`]): the probes by pid,
    /// then the simulated training processes by pid (a trainer that is a
    /// probe's pid too is shown once, as the probe).
    pub fn views_by_gpu(&self) -> BTreeMap<u32, Vec<AllocatorView>> {
        let mut out: BTreeMap<u32, Vec<AllocatorView>> = BTreeMap::new();
        for (gpu, view) in probe_views(&self.probes) {
            out.entry(gpu).or_default().push(view);
        }
        let mut trainers = self.sim.map(SimCluster::trainers).unwrap_or_default();
        trainers.sort_by_key(|t| (t.gpu, t.pid));
        for t in trainers {
            let views = out.entry(t.gpu).or_default();
            if !views.iter().any(|v| v.pid == Some(t.pid)) {
                views.push(trainer_view(t));
            }
        }
        out
    }

    /// The sample as `--once --json` and `record` write it.
    pub fn headless(self, backend: &str, banner: Option<&str>) -> HeadlessSample {
        // One look at the trainers for both: `record` samples while the
        // simulation runs on, and the first of each GPU's list is the one
        // the dashboard shows without a `v` pick (a test holds them equal).
        let every = self.views_by_gpu();
        let views: BTreeMap<u32, AllocatorView> = every
            .iter()
            .filter_map(|(&gpu, views)| views.first().map(|v| (gpu, v.clone())))
            .collect();
        let not_started = self.sim.map(SimCluster::not_started).unwrap_or_default();
        headless_sample(backend, banner, self.readings, &views)
            .with_allocators(&every)
            .with_probes(&self.probes)
            .with_not_started(not_started)
    }

    /// Hands the sample to the dashboard's state at `now_ms`: the readings
    /// with the views `v` picked, then the probes' rows and OOMs.
    pub fn apply_to(self, state: &mut AppState, now_ms: u64) {
        let views = self.views(&state.ui.allocator_pick);
        // One look at the trainers for both (the simulation's lock, each
        // one's counters copied).
        let trainers = self.sim.map(SimCluster::trainer_stats).unwrap_or_default();
        state.simulated_allocators = simulated_allocators(&trainers);
        state.allocator_figures = allocator_figures(&trainers, &self.probes);
        state.sim_not_started = self.sim.map(SimCluster::not_started).unwrap_or_default();
        state.apply_sample(now_ms, self.readings, views);
        state.apply_probes(now_ms, &self.probes);
        state.stress.unseen_driver_used = self.probed_in_sim;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Telemetry as _;
    use crate::device::sim::SimConfig;

    fn sources_with_trainers(gpus: usize, trainers: usize) -> (AllocatorSources, Vec<GpuReading>) {
        let cluster = SimCluster::new(SimConfig {
            gpus,
            training_processes: trainers,
            seed: 3,
            ..SimConfig::default()
        });
        cluster.advance(5_000);
        let readings = cluster
            .telemetry()
            .sample()
            .expect("the simulation samples");
        // No probe directory: only the simulated trainers are seen.
        let sources = AllocatorSources::with_registry(Some(cluster), Registry::start(vec![], 0));
        (sources, readings)
    }

    #[test]
    fn a_probed_process_on_a_simulated_gpu_gets_host_figures_and_a_simulated_one_never() {
        let (_, mut readings) = sources_with_trainers(1, 1);
        let GpuReading::Ok(sample) = &mut readings[0] else {
            panic!("the simulation samples GPU 0");
        };
        let simulated = sample.listed_processes()[0].pid;
        let simulated_parent = sample.listed_processes()[0].parent_pid;
        let real = std::process::id();
        sample
            .processes
            .get_or_insert_with(Vec::new)
            .push(crate::device::GpuProcess::new(real, Some(1 << 30)));
        // The host sampler read both pids (a made-up pid may be a real
        // one of this machine): only the probed one is taken.
        let mut sampler = HostSampler::new();
        let mut host = sampler.sample(&BTreeSet::from([real, simulated]), Instant::now());
        host.insert(
            simulated,
            crate::device::host::HostUsage {
                cpu_percent: Some(50.0),
                host_memory: Some(1),
            },
        );
        let parents = HashMap::from([(real, crate::device::procfs::parent_pid(real))]);
        fill_probed_usage(&mut readings, &BTreeSet::from([real]), &host, &parents);
        let GpuReading::Ok(sample) = &readings[0] else {
            panic!("still GPU 0");
        };
        let row = |pid: u32| {
            sample
                .listed_processes()
                .iter()
                .find(|p| p.pid == pid)
                .map(|p| p.usage)
                .expect("listed")
        };
        assert!(
            row(real).host_memory.is_some_and(|b| b > 0),
            "this test process has resident memory"
        );
        let parent = |pid: u32| {
            sample
                .listed_processes()
                .iter()
                .find(|p| p.pid == pid)
                .and_then(|p| p.parent_pid)
        };
        assert_eq!(parent(real), Some(std::os::unix::process::parent_id()));
        assert_eq!(
            parent(simulated),
            simulated_parent,
            "a made-up pid is never read"
        );
        assert_eq!(row(simulated).host_memory, None);
        assert_eq!(row(simulated).cpu_percent, None);
    }

    #[test]
    fn serve_sees_every_trainer_and_the_dashboard_one_per_gpu() {
        let (sources, readings) = sources_with_trainers(2, 4);
        let observed = sources.observe(readings);
        let every = observed.every_view();
        let per_gpu = observed.views(&BTreeMap::new());
        assert_eq!(every.len(), 4);
        assert_eq!(per_gpu.keys().copied().collect::<Vec<_>>(), [0, 1]);
        let order: Vec<(u32, Option<u32>)> = every.iter().map(|(g, v)| (*g, v.pid)).collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "by GPU, then pid");
        for (gpu, view) in &per_gpu {
            assert!(every.iter().any(|(g, v)| g == gpu && v == view));
        }
    }

    #[test]
    fn every_trainers_figures_reach_the_state_not_only_the_shown_ones() {
        use crate::app::state::StatusState;
        let (sources, readings) = sources_with_trainers(2, 3);
        let every = sources.observe(readings.clone()).every_view();
        let mut state = AppState::new(StatusState::default());
        sources.observe(readings).apply_to(&mut state, 0);
        assert_eq!(state.allocator_figures.len(), every.len());
        for (gpu, view) in &every {
            let pid = view.pid.expect("a trainer has a pid");
            assert_eq!(
                state.allocator_figures.get(&(*gpu, pid)),
                Some(&(view.known_allocated(), view.known_reserved())),
                "pid {pid} on GPU {gpu}"
            );
        }
    }

    #[test]
    fn v_cycles_through_the_simulated_trainers_sharing_a_gpu() {
        use crate::app::keymap::Action;
        use crate::app::state::StatusState;
        use crate::app::update::apply;
        // Three trainers on two GPUs: GPU 0 has two.
        let (sources, readings) = sources_with_trainers(2, 3);
        let mut state = AppState::new(StatusState::default());
        sources.observe(readings.clone()).apply_to(&mut state, 0);
        let on_gpu0 = state.allocator_pids_on(0);
        assert_eq!(on_gpu0.len(), 2, "{on_gpu0:?}");
        let shown = |s: &AppState| s.gpus[0].allocator.as_ref().and_then(|a| a.pid);
        assert_eq!(shown(&state), Some(on_gpu0[0]));
        let choice = state.probe_choice(&state.gpus[0]).expect("a choice");
        assert!(choice.simulated);
        apply(
            &mut state,
            &crate::app::keymap::Keymap::default(),
            Action::NextAllocator,
        );
        sources
            .observe(readings.clone())
            .apply_to(&mut state, 1_000);
        assert_eq!(shown(&state), Some(on_gpu0[1]));
        apply(
            &mut state,
            &crate::app::keymap::Keymap::default(),
            Action::NextAllocator,
        );
        sources.observe(readings).apply_to(&mut state, 2_000);
        assert_eq!(shown(&state), Some(on_gpu0[0]), "wraps to the first");
        // GPU 1 has one trainer: nothing to switch to, and it says so.
        state.ui.selected_gpu = 1;
        apply(
            &mut state,
            &crate::app::keymap::Keymap::default(),
            Action::NextAllocator,
        );
        let said = state.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("one process with an allocator"), "{said}");
    }

    /// The stress panel's allocator holding 20 MiB on GPU 0 (its worker
    /// pid 4243), as after `a` with the panel on that GPU.
    fn hold_stress_memory_on_gpu_0(state: &mut AppState) {
        let mut stats = crate::alloc::DeviceStats::default();
        stats.reserved_bytes.all.current = 20 << 20;
        state.stress.gpu = Some(0);
        state.stress.view = Some(AllocatorView::new(
            "stress panel".to_string(),
            Some(4243),
            stats,
            Vec::new(),
        ));
    }

    #[test]
    fn v_beside_the_stress_panels_allocator_says_where_that_one_shows() {
        // One trainer on GPU 0 and, closed, the stress panel holding
        // memory there: two rows with allocator figures, one for `v`.
        use crate::app::keymap::Action;
        use crate::app::update::apply;
        let (sources, readings) = sources_with_trainers(1, 1);
        let mut state = AppState::new(crate::app::state::StatusState::default());
        sources.observe(readings).apply_to(&mut state, 1_000);
        let keymap = crate::app::keymap::Keymap::default();
        hold_stress_memory_on_gpu_0(&mut state);
        assert_eq!(
            state.allocator_pids_on(0).len(),
            1,
            "the panel's is not v's"
        );
        apply(&mut state, &keymap, Action::NextAllocator);
        let said = state.ui.notice.clone().unwrap_or_default();
        assert_eq!(
            said,
            "v: nothing to switch to: the stress panel's allocator shows with the panel (a)"
        );
        assert!(said.chars().count() <= 80, "{said}");
        assert_eq!(
            state.offers().unavailable(Action::NextAllocator),
            Some("stress panel's: shown while open")
        );
        // Open, the panes show the panel's allocator now: no key to open it.
        state.ui.stress_open = true;
        apply(&mut state, &keymap, Action::NextAllocator);
        let said = state.ui.notice.clone().unwrap_or_default();
        assert_eq!(
            said,
            "v: nothing to switch to: the stress panel's allocator is the one shown now"
        );
        assert!(said.chars().count() <= 80, "{said}");
        state.ui.stress_open = false;
        // Its memory freed, the panel is no longer said.
        state.stress.view = None;
        apply(&mut state, &keymap, Action::NextAllocator);
        let said = state.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("one process with an allocator"), "{said}");
        assert_eq!(
            state.offers().unavailable(Action::NextAllocator),
            Some("no 2nd process with an allocator")
        );
    }

    #[test]
    fn v_and_its_help_agree_beside_the_stress_panel_with_no_trainer() {
        // No trainer on GPU 0, the panel holding memory there: the panes
        // show the panel's allocator already; `v` and the help both say
        // there is no other process's, not "shown while open".
        use crate::app::keymap::Action;
        use crate::app::update::apply;
        let (sources, readings) = sources_with_trainers(1, 0);
        let mut state = AppState::new(crate::app::state::StatusState::default());
        sources.observe(readings).apply_to(&mut state, 1_000);
        let keymap = crate::app::keymap::Keymap::default();
        hold_stress_memory_on_gpu_0(&mut state);
        assert!(state.allocator_pids_on(0).is_empty());
        apply(&mut state, &keymap, Action::NextAllocator);
        let said = state.ui.notice.clone().unwrap_or_default();
        assert!(said.contains("has a probe to switch to"), "{said}");
        assert_eq!(
            state.offers().unavailable(Action::NextAllocator),
            Some("no 2nd process with an allocator")
        );
    }

    #[test]
    fn every_allocator_of_a_gpu_is_listed_in_v_order_the_shown_one_first() {
        // Five trainers on two GPUs: GPU 0 has three, GPU 1 two.
        let (sources, readings) = sources_with_trainers(2, 5);
        let observed = sources.observe(readings);
        let by_gpu = observed.views_by_gpu();
        let shown = observed.views(&BTreeMap::new());
        let mut state = AppState::new(crate::app::state::StatusState::default());
        sources
            .observe(observed.readings.clone())
            .apply_to(&mut state, 0);
        assert_eq!(by_gpu.values().map(Vec::len).sum::<usize>(), 5);
        for (gpu, views) in &by_gpu {
            let pids: Vec<u32> = views.iter().filter_map(|v| v.pid).collect();
            assert_eq!(pids, state.allocator_pids_on(*gpu), "GPU {gpu}: v's order");
            assert_eq!(
                views.first(),
                shown.get(gpu),
                "GPU {gpu}: the shown one first"
            );
        }
        let sample = observed.headless("sim", None);
        for gpu in &sample.gpus {
            let index = gpu.reading.sample().expect("a sample").index;
            let listed: Vec<Option<u32>> = gpu.allocators.iter().map(|a| a.pid).collect();
            let want: Vec<Option<u32>> = by_gpu[&index].iter().map(|v| v.pid).collect();
            assert_eq!(listed, want, "GPU {index}");
            assert_eq!(gpu.allocators.first(), gpu.allocator.as_ref());
        }
    }

    #[test]
    fn a_headless_sample_has_the_dashboards_view_of_each_gpu() {
        let (sources, readings) = sources_with_trainers(2, 2);
        let per_gpu = sources.observe(readings.clone()).views(&BTreeMap::new());
        let sample = sources.observe(readings).headless("sim", None);
        assert_eq!(sample.gpus.len(), 2);
        for gpu in &sample.gpus {
            let index = gpu.reading.sample().expect("a sample").index;
            let shown = gpu.allocator.as_ref().and_then(|a| a.pid);
            assert_eq!(shown, per_gpu.get(&index).and_then(|v| v.pid));
            assert!(shown.is_some());
        }
    }

    /// A connected probe, pid 77, on GPU 0 holding `reserved` bytes.
    fn probe_on_gpu0(reserved: i64) -> ProbeSnapshot {
        use crate::alloc::DeviceStats;
        use crate::probe::pid::VisibleDevices;
        use crate::probe::protocol::Hello;
        use crate::probe::registry::DeviceData;
        use crate::probe::{ProbeState, ProbeStatus};
        let mut stats = DeviceStats::default();
        stats.reserved_bytes.all.current = reserved;
        ProbeSnapshot {
            probes: vec![ProbeState {
                socket: "/x/77.sock".into(),
                status: ProbeStatus::Connected,
                problem: None,
                hello: Some(Hello {
                    pid: 77,
                    argv: vec!["train.py".into()],
                    devices: vec![0],
                    ..Hello::default()
                }),
                host_pid: Some(77),
                user: None,
                // Not this machine's pid: no host figures are read for it.
                pid_source: None,
                host_command: None,
                visible_devices: VisibleDevices::All,
                devices: BTreeMap::from([(
                    0,
                    DeviceData {
                        stats: Some(stats),
                        ..DeviceData::default()
                    },
                )]),
                ooms: Vec::new(),
                oom_total: 0,
                oom_by_device: BTreeMap::new(),
                lines: 0,
            }],
            ..ProbeSnapshot::default()
        }
    }

    #[test]
    fn the_stress_compares_driver_used_is_the_gpus_rows_with_a_probe_on_the_simulated_gpu() {
        use crate::alloc::{AllocatorConfig, CachingAllocator};
        use crate::app::state::StatusState;
        use crate::app::stress::StressAction;
        use crate::app::stress_worker::{STRESS_COMMAND, StressExecutor};
        use crate::app::update::{Effect, on_stress_result};

        let (sources, _) = sources_with_trainers(1, 0);
        let sim = sources.sim().expect("the simulation").clone();
        let allocator = CachingAllocator::new(
            sim.new_process(0, STRESS_COMMAND),
            0,
            AllocatorConfig::default(),
        );
        let mut worker = StressExecutor::new(allocator, false);
        let probe = probe_on_gpu0(300 << 20);
        let mut state = AppState::new(StatusState::default());
        // A sample as the dashboard takes it, the probe counted in the
        // simulated GPU's readings.
        let sample = |state: &mut AppState| {
            let readings = sim.telemetry().sample().expect("the simulation samples");
            sources
                .observe_with(readings, probe.clone())
                .apply_to(state, 0);
        };
        let gpus_row = |state: &AppState| {
            state.gpus[0]
                .reading
                .sample()
                .and_then(|s| s.memory_used)
                .expect("the GPUs row's used memory")
        };
        let started = worker.started();
        // A key on the panel, its commands run on the worker.
        let mut press = |state: &mut AppState, action| {
            let mut commands = state.stress.apply(action);
            while !commands.is_empty() {
                let mut next = Vec::new();
                for command in &commands {
                    if let Effect::Stress(more) = on_stress_result(state, worker.execute(command)) {
                        next.extend(more);
                    }
                }
                commands = next;
            }
        };
        on_stress_result(&mut state, started);
        sample(&mut state);
        press(&mut state, StressAction::MarkCompare);
        let row_at_a = gpus_row(&state);
        press(&mut state, StressAction::Allocate);
        sample(&mut state);
        press(&mut state, StressAction::MarkCompare);
        let row_at_b = gpus_row(&state);
        let (a, b) = state.stress.marks.both().expect("A and B marked");
        // The probe's context (500 MiB) and reserved bytes are in the row,
        // not in the worker's device.
        assert_eq!(
            row_at_b - state.stress.figures.driver_used,
            sim.context_overhead() + (300 << 20)
        );
        assert_eq!((a.driver_used, b.driver_used), (row_at_a, row_at_b));
        assert!(b.driver_used > a.driver_used, "the allocation moved it");
    }
}
