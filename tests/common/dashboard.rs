//! The live dashboard's own handlers (`shell::dashboard::Dashboard`) on a
//! test backend, fed by the simulation: what the app-flow and key-sequence
//! tests drive.

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use tokio::sync::mpsc;
use vramtop::app::capture::CaptureMsg;
use vramtop::app::observe::AllocatorSources;
use vramtop::app::state::{AppState, StatusState};
use vramtop::app::stress::StressResult;
use vramtop::device::sim::{SimCluster, SimConfig};
use vramtop::probe::Registry;
use vramtop::shell::dashboard::{Dashboard, Replies};
use vramtop::ui::Theme;

/// A dashboard on `gpus` simulated GPUs with `trainers` simulated training
/// processes, drawing on a `width`×`height` test backend, with the
/// receivers of what its threads send back to the loop.
pub struct SimDashboard {
    pub cluster: SimCluster,
    pub dash: Dashboard<TestBackend>,
    pub stress_results: mpsc::UnboundedReceiver<StressResult>,
    pub captures: mpsc::UnboundedReceiver<CaptureMsg>,
}

pub fn sim_dashboard(gpus: usize, trainers: usize, seed: u64, size: (u16, u16)) -> SimDashboard {
    // No probe directory: the simulated trainers are the only allocators.
    sim_dashboard_with_probes(gpus, trainers, seed, size, Registry::start(vec![], 0))
}

/// [`sim_dashboard`] with the probes `registry` finds as allocators too.
pub fn sim_dashboard_with_probes(
    gpus: usize,
    trainers: usize,
    seed: u64,
    (width, height): (u16, u16),
    registry: Registry,
) -> SimDashboard {
    let config = SimConfig {
        gpus,
        training_processes: trainers,
        seed,
        ..SimConfig::default()
    };
    sim_dashboard_of(config, (width, height), registry)
}

/// A dashboard on the simulation `config` describes (data loader workers,
/// memory), with the probes `registry` finds.
pub fn sim_dashboard_of(
    config: SimConfig,
    (width, height): (u16, u16),
    registry: Registry,
) -> SimDashboard {
    let cluster = SimCluster::new(config);
    let sources = AllocatorSources::with_registry(Some(cluster.clone()), registry);
    let state = AppState::new(StatusState {
        backend: "sim".into(),
        sample_interval_ms: 1000,
        ..StatusState::default()
    });
    let terminal = Terminal::new(TestBackend::new(width, height)).expect("test terminal");
    let (stress, stress_results) = mpsc::unbounded_channel();
    let (capture, captures) = mpsc::unbounded_channel();
    let mut dash = Dashboard::new(
        terminal,
        state,
        sources,
        Theme::colored(),
        Replies { stress, capture },
    );
    // Sessions that press `W` (stress) or `c` (a simulated process) save
    // snapshots: never into the checkout (the current directory of
    // `cargo test`).
    dash.save_snapshots_in(stress_save_dir());
    SimDashboard {
        cluster,
        dash,
        stress_results,
        captures,
    }
}

/// A folder of this test process for the stress panel's saved snapshots,
/// under the system's temporary directory.
pub fn stress_save_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("vramtop-stress-saves-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}
