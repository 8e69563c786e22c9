//! The NVML backend end to end, against the fake `libnvidia-ml.so.1` built
//! from `tests/fixtures/fake_nvml.c` (see `tests/common/fake_nvml.rs`).
//! Every test gets its own copy of the library and configuration, so they run
//! in parallel. Without a C compiler they print a note and pass.

mod common;

use std::path::Path;
use std::time::Instant;

use common::fake_nvml::{Variant, build_fake_nvml, expect, fake_nvml_variant_with, fake_nvml_with};
use vramtop::device::nvml::NvmlTelemetry;
use vramtop::device::procfs::{self, LibraryKind};
use vramtop::device::{
    GpuReading, GpuSample, MigInfo, Telemetry, TelemetryError, Unanswered, Unavailability,
};

/// An NVML backend over a fake configured by `settings`; `None` without cc.
fn fake(settings: &[(&str, &str)]) -> Option<NvmlTelemetry> {
    let lib = fake_nvml_with(settings)?;
    Some(NvmlTelemetry::init_with_library(&lib).expect("the fake NVML initialises"))
}

fn sample(t: &mut NvmlTelemetry) -> Vec<GpuReading> {
    t.sample().expect("the NVML backend samples")
}

fn ok(reading: &GpuReading) -> &GpuSample {
    reading
        .sample()
        .unwrap_or_else(|| panic!("expected a sample, got {reading:?}"))
}

/// The reason of an `Unavailable` init, failing on anything else.
fn unavailable_reason(result: Result<NvmlTelemetry, TelemetryError>) -> String {
    match result {
        Err(TelemetryError::Unavailable {
            backend, reason, ..
        }) => {
            assert_eq!(backend, "nvml");
            assert!(!reason.is_empty());
            assert!(!reason.contains('\n'), "one line: {reason:?}");
            reason
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[test]
fn every_gpu_field_is_mapped_exactly_from_nvml() {
    let Some(mut t) = fake(&[]) else { return };
    assert_eq!(t.backend_name(), "nvml");
    assert_eq!(t.gpu_count(), 2);
    let readings = sample(&mut t);
    assert_eq!(readings.len(), 2, "two GPUs, no MIG rows: {readings:?}");
    for (i, reading) in readings.iter().enumerate() {
        let gpu = i as u32;
        let s = ok(reading);
        assert_eq!(s.index, gpu);
        assert_eq!(s.name, expect::NAME);
        assert_eq!(s.uuid, Some(expect::uuid(gpu)));
        assert_eq!(s.memory_total, Some(expect::MEMORY_TOTAL));
        assert_eq!(s.memory_used, Some(expect::memory_used(gpu)));
        assert_eq!(s.memory_free, Some(expect::memory_free(gpu)));
        assert_eq!(s.gpu_utilization, Some(expect::gpu_utilization(gpu)));
        assert_eq!(s.memory_utilization, Some(expect::memory_utilization(gpu)));
        assert_eq!(s.temperature_c, Some(expect::temperature_c(gpu)));
        assert_eq!(s.power_draw_mw, Some(expect::power_draw_mw(gpu)));
        assert_eq!(s.power_limit_mw, Some(expect::POWER_LIMIT_MW));
        assert_eq!(s.sm_clock_mhz, Some(expect::SM_CLOCK_MHZ));
        assert_eq!(s.memory_clock_mhz, Some(expect::MEMORY_CLOCK_MHZ));
        assert_eq!(s.fan_percent, Some(expect::fan_percent(gpu)));
        assert_eq!(s.mig, None);
        assert_eq!(s.listed_processes().len(), 2);
    }
}

#[test]
fn processes_carry_used_memory_and_our_user_and_command_from_proc() {
    let Some(mut t) = fake(&[]) else { return };
    let own_pid = std::process::id();
    let me = procfs::process_info(own_pid);
    for (i, reading) in sample(&mut t).iter().enumerate() {
        let gpu = i as u32;
        let s = ok(reading);
        let own = s
            .listed_processes()
            .iter()
            .find(|p| p.pid == own_pid)
            .expect("this test process is listed");
        assert_eq!(own.used_memory, Some(expect::own_process_memory(gpu)));
        assert_eq!(own.user, me.user);
        assert!(own.user.is_some());
        assert_eq!(own.command, me.command);
        let command = own
            .command
            .as_deref()
            .expect("our command line is readable");
        assert!(command.contains("nvml_backend"), "{command}");
        assert_eq!(own.parent_pid, me.parent_pid);
        assert_eq!((own.gpu_instance_id, own.compute_instance_id), (None, None));

        let init = s
            .listed_processes()
            .iter()
            .find(|p| p.pid == 1)
            .expect("pid 1 is listed");
        assert_eq!(
            init.used_memory, None,
            "NVML_VALUE_NOT_AVAILABLE is None, not a number"
        );
        assert_eq!(init.parent_pid, None, "pid 1 has no parent");
    }
}

/// Resident bytes of `pid` as /proc/PID/statm says (pages × page size).
fn resident_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).expect("statm readable");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has resident pages");
    pages * rustix::param::page_size() as u64
}

/// Waits (5 s at most) until `pid` sleeps: a `sleep` just started is
/// still loading its libraries, its resident memory growing.
fn wait_asleep(pid: u32) {
    let deadline = Instant::now() + std::time::Duration::from_secs(5);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next());
        if state == Some("S") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[test]
fn processes_carry_sm_from_nvml_and_cpu_and_host_memory_from_proc() {
    // A real process of ours as the fake's other pid: its /proc is
    // readable, it stays asleep (0 % CPU) and its resident memory holds.
    let mut sleeper = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .expect("start sleep");
    let other = sleeper.id();
    wait_asleep(other);
    let other_text = other.to_string();
    let Some(mut t) = fake(&[("FAKE_NVML_OTHER_PID", other_text.as_str())]) else {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        return;
    };
    let own_pid = std::process::id();
    let first = sample(&mut t);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let second = sample(&mut t);
    let resident = resident_bytes(other);
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    for (i, (a, b)) in first.iter().zip(&second).enumerate() {
        let gpu = i as u32;
        let find = |s: &GpuSample, pid| {
            s.listed_processes()
                .iter()
                .find(|p| p.pid == pid)
                .cloned()
                .unwrap_or_else(|| panic!("pid {pid} listed on GPU {gpu}"))
        };
        let (own, sleep) = (find(ok(a), own_pid), find(ok(a), other));
        assert_eq!(own.usage.sm_percent, Some(expect::own_process_sm(gpu)));
        assert_eq!(sleep.usage.sm_percent, Some(expect::other_process_sm(gpu)));
        assert_eq!(
            (own.usage.cpu_percent, sleep.usage.cpu_percent),
            (None, None),
            "one sample has no interval to divide CPU time by"
        );
        assert_eq!(sleep.usage.host_memory, Some(resident));
        assert!(own.usage.host_memory.is_some_and(|b| b > 0));

        let (own, sleep) = (find(ok(b), own_pid), find(ok(b), other));
        assert_eq!(sleep.usage.cpu_percent, Some(0.0), "sleep uses no CPU");
        assert!(own.usage.cpu_percent.is_some_and(|c| c >= 0.0), "{own:?}");
        assert_eq!(sleep.usage.sm_percent, Some(expect::other_process_sm(gpu)));
    }
    // A pid on both GPUs is read once: the same figures on each.
    let own_on = |gpu: usize| {
        ok(&second[gpu])
            .listed_processes()
            .iter()
            .find(|p| p.pid == own_pid)
            .map(|p| (p.usage.cpu_percent, p.usage.host_memory))
    };
    assert_eq!(own_on(0), own_on(1));
}

#[test]
fn unsupported_process_utilization_leaves_sm_unknown_and_host_figures_known() {
    let Some(mut t) = fake(&[("FAKE_NVML_UNSUPPORTED", "process_utilization")]) else {
        return;
    };
    let own_pid = std::process::id();
    for reading in sample(&mut t) {
        let s = ok(&reading);
        assert!(
            s.listed_processes()
                .iter()
                .all(|p| p.usage.sm_percent.is_none())
        );
        let own = s
            .listed_processes()
            .iter()
            .find(|p| p.pid == own_pid)
            .expect("this test process is listed");
        assert!(own.usage.host_memory.is_some(), "{own:?}");
        assert!(s.gpu_utilization.is_some(), "the GPU's own figures remain");
    }
}

#[test]
fn a_mig_enabled_gpu_has_no_process_sm_and_the_other_gpu_has() {
    let Some(mut t) = fake(&[("FAKE_NVML_MIG", "2")]) else {
        return;
    };
    let readings = sample(&mut t);
    let rows: Vec<&GpuSample> = readings.iter().map(ok).collect();
    assert_eq!(rows.len(), 4, "GPU 0, its two MIG devices, GPU 1: {rows:?}");
    for row in &rows[..3] {
        assert!(
            row.listed_processes()
                .iter()
                .all(|p| p.usage.sm_percent.is_none()),
            "{row:?}"
        );
    }
    let own = rows[3]
        .listed_processes()
        .iter()
        .find(|p| p.pid == std::process::id())
        .expect("this test process is listed on GPU 1");
    assert_eq!(own.usage.sm_percent, Some(expect::own_process_sm(1)));
}

#[test]
fn unsupported_power_is_none_not_zero_and_other_metrics_remain() {
    let Some(mut t) = fake(&[("FAKE_NVML_NO_POWER", "1")]) else {
        return;
    };
    for reading in sample(&mut t) {
        let s = ok(&reading);
        assert_eq!(s.power_draw_mw, None);
        assert_eq!(s.power_limit_mw, None);
        assert!(s.memory_total.is_some() && s.temperature_c.is_some() && s.fan_percent.is_some());
    }
}

#[test]
fn every_unsupported_metric_is_none_and_the_gpu_still_answers() {
    let all = "memory,utilization,temperature,power,clocks,fan,processes,uuid,process_utilization";
    let Some(mut t) = fake(&[("FAKE_NVML_UNSUPPORTED", all)]) else {
        return;
    };
    let readings = sample(&mut t);
    assert_eq!(readings.len(), 2);
    for (i, reading) in readings.iter().enumerate() {
        let bare = GpuSample::unknown(i as u32, expect::NAME);
        assert_eq!(ok(reading), &bare, "only the identity is known");
    }
}

#[test]
fn lost_gpu_is_reported_lost_while_the_other_gpu_is_sampled() {
    let Some(mut t) = fake(&[("FAKE_NVML_LOST", "1")]) else {
        return;
    };
    let readings = sample(&mut t);
    assert_eq!(readings.len(), 2);
    assert_eq!(ok(&readings[0]).memory_used, Some(expect::memory_used(0)));
    match &readings[1] {
        GpuReading::Lost {
            index,
            reason,
            cause,
        } => {
            assert_eq!(*index, 1);
            assert!(reason.contains("fell off the bus"), "{reason}");
            assert_eq!(*cause, Unanswered::Lost);
        }
        other => panic!("GPU 1 should be lost: {other:?}"),
    }
}

#[test]
fn gpu_lost_after_init_turns_lost_on_the_next_sample_and_stays_lost() {
    // GPU 0 answers two handle lookups (init and the first sample).
    let Some(mut t) = fake(&[("FAKE_NVML_LOST", "0"), ("FAKE_NVML_LOST_AFTER", "2")]) else {
        return;
    };
    let first = sample(&mut t);
    assert_eq!(ok(&first[0]).name, expect::NAME);
    for _ in 0..2 {
        let later = sample(&mut t);
        assert_eq!(later.len(), 2);
        assert!(
            matches!(later[0], GpuReading::Lost { index: 0, .. }),
            "{later:?}"
        );
        assert_eq!(ok(&later[1]).index, 1);
    }
}

#[test]
fn gpu_without_permission_is_no_access_not_lost_and_does_not_stop_the_others() {
    let Some(mut t) = fake(&[("FAKE_NVML_NO_HANDLE", "0")]) else {
        return;
    };
    let readings = sample(&mut t);
    match &readings[0] {
        GpuReading::Lost {
            index: 0,
            reason,
            cause,
        } => {
            assert!(reason.contains("permission"), "{reason}");
            // A GPU this user may not open is there: not "lost".
            assert_eq!(*cause, Unanswered::NoAccess);
            assert_eq!(cause.label(), "no access");
        }
        other => panic!("GPU 0 should be lost: {other:?}"),
    }
    assert_eq!(ok(&readings[1]).uuid, Some(expect::uuid(1)));
}

#[test]
fn driver_info_reports_driver_nvml_and_cuda_versions() {
    let Some(t) = fake(&[]) else { return };
    let info = t.driver_info();
    assert_eq!(info.driver_version.as_deref(), Some(expect::DRIVER_VERSION));
    assert_eq!(info.nvml_version.as_deref(), Some(expect::NVML_VERSION));
    assert_eq!(info.cuda_driver_version, Some(expect::CUDA_DRIVER_VERSION));
}

#[test]
fn mig_enabled_gpu_gets_one_row_per_mig_device_with_its_processes() {
    let Some(mut t) = fake(&[("FAKE_NVML_MIG", "2")]) else {
        return;
    };
    let readings = sample(&mut t);
    let rows: Vec<&GpuSample> = readings.iter().map(ok).collect();
    assert_eq!(rows.len(), 4, "GPU 0, its two MIG devices, GPU 1: {rows:?}");
    assert_eq!((rows[0].index, rows[0].mig.as_ref()), (0, None));
    assert_eq!((rows[3].index, rows[3].mig.as_ref()), (1, None));
    assert_eq!(
        rows[0].listed_processes().len(),
        2,
        "the parent lists every process"
    );

    let own_pid = std::process::id();
    for (slot, row) in rows[1..3].iter().enumerate() {
        let slot = slot as u32;
        assert_eq!(row.index, slot);
        assert_eq!(row.name, expect::MIG_NAME);
        assert_eq!(row.uuid, Some(expect::mig_uuid(slot)));
        assert_eq!(
            row.mig,
            Some(MigInfo {
                parent_index: 0,
                gpu_instance_id: Some(expect::mig_gpu_instance(slot)),
                compute_instance_id: Some(0),
            })
        );
        assert_eq!(row.memory_total, Some(expect::MIG_MEMORY_TOTAL));
        assert_eq!(row.memory_used, Some(expect::mig_memory_used(slot)));
        assert_eq!(
            row.memory_free,
            Some(expect::MIG_MEMORY_TOTAL - expect::mig_memory_used(slot))
        );
        // Whole-GPU figures belong to the parent row only.
        assert_eq!(row.gpu_utilization, None);
        assert_eq!(row.power_draw_mw, None);
        let pids: Vec<u32> = row.listed_processes().iter().map(|p| p.pid).collect();
        let expected_pid = if slot == 0 { own_pid } else { 1 };
        assert_eq!(pids, vec![expected_pid], "MIG device {slot}");
        assert_eq!(
            row.listed_processes()[0].gpu_instance_id,
            Some(expect::mig_gpu_instance(slot))
        );
    }
}

#[test]
fn missing_mig_entry_points_give_no_mig_rows() {
    let Some(lib) = fake_nvml_variant_with(Variant::NoMigHandles, &[("FAKE_NVML_MIG", "2")]) else {
        return;
    };
    let mut t = NvmlTelemetry::init_with_library(&lib).expect("the fake NVML initialises");
    let readings = sample(&mut t);
    assert_eq!(readings.len(), 2, "{readings:?}");
    assert!(readings.iter().all(|r| ok(r).mig.is_none()));
    assert_eq!(ok(&readings[0]).listed_processes().len(), 2);
}

#[test]
fn init_with_a_library_path_that_does_not_exist_is_unavailable() {
    let path = Path::new("/nonexistent/vramtop-test/libnvidia-ml.so.1");
    let reason = unavailable_reason(NvmlTelemetry::init_with_library(path));
    assert_eq!(reason, format!("{} not found", path.display()));
}

#[test]
fn init_on_a_file_that_is_not_a_library_is_unavailable() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let reason = unavailable_reason(NvmlTelemetry::init_with_library(&path));
    assert!(reason.starts_with("could not load"), "{reason}");
}

#[test]
fn default_init_without_a_driver_is_unavailable_and_does_not_panic() {
    match NvmlTelemetry::init() {
        // A machine with a driver: nothing to check here.
        Ok(t) => assert!(t.gpu_count() > 0),
        Err(e) => {
            let reason = unavailable_reason(Err(e.clone()));
            if !Path::new("/proc/driver/nvidia").exists() && !nvml_on_search_path() {
                assert_eq!(
                    reason,
                    "no NVIDIA driver is installed (libnvidia-ml.so.1 not found)"
                );
                assert_eq!(
                    e.to_string(),
                    "nvml is not available: no NVIDIA driver is installed \
                     (libnvidia-ml.so.1 not found)"
                );
            }
        }
    }
}

/// Whether a `libnvidia-ml.so.1` is where the dynamic linker usually looks.
fn nvml_on_search_path() -> bool {
    [
        "/usr/lib",
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
    ]
    .iter()
    .any(|dir| Path::new(dir).join("libnvidia-ml.so.1").exists())
}

#[test]
fn driver_problems_at_init_are_unavailable_with_a_reason_a_user_understands() {
    let cases = [
        ("9", "nvidia module is not running"),
        ("4", "no permission to talk to the NVIDIA driver"),
        ("18", "versions differ"),
        ("999", "NVML failed to initialise"),
    ];
    for (code, phrase) in cases {
        let Some(lib) = fake_nvml_with(&[("FAKE_NVML_INIT_ERROR", code)]) else {
            return;
        };
        let reason = unavailable_reason(NvmlTelemetry::init_with_library(&lib));
        assert!(reason.contains(phrase), "code {code}: {reason}");
    }
}

#[test]
fn driver_problems_at_init_are_told_apart_by_kind() {
    let cases = [
        ("9", Unavailability::DriverNotLoaded),
        ("4", Unavailability::NoPermission),
        ("18", Unavailability::VersionMismatch),
        ("999", Unavailability::Other),
    ];
    for (code, kind) in cases {
        let Some(lib) = fake_nvml_with(&[("FAKE_NVML_INIT_ERROR", code)]) else {
            return;
        };
        match NvmlTelemetry::init_with_library(&lib) {
            Err(TelemetryError::Unavailable { cause, .. }) => {
                assert_eq!(cause, kind, "code {code}");
            }
            other => panic!("code {code}: expected Unavailable, got {other:?}"),
        }
    }
    let missing = NvmlTelemetry::init_with_library(Path::new("/nonexistent/libnvidia-ml.so.1"));
    assert!(
        matches!(
            missing,
            Err(TelemetryError::Unavailable {
                cause: Unavailability::LibraryMissing,
                ..
            })
        ),
        "{missing:?}"
    );
}

#[test]
fn a_driver_with_no_gpus_is_unavailable() {
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_GPUS", "0")]) else {
        return;
    };
    let result = NvmlTelemetry::init_with_library(&lib);
    assert!(
        matches!(
            result,
            Err(TelemetryError::Unavailable {
                cause: Unavailability::NoDevices,
                ..
            })
        ),
        "{result:?}"
    );
    let reason = unavailable_reason(result);
    assert_eq!(reason, "the NVIDIA driver reports no GPUs");
}

#[test]
fn two_backends_on_one_library_both_sample_and_shut_down_cleanly() {
    let Some(lib) = fake_nvml_with(&[]) else {
        return;
    };
    let mut a = NvmlTelemetry::init_with_library(&lib).expect("first init");
    let mut b = NvmlTelemetry::init_with_library(&lib).expect("second init");
    // The processes' host figures are this busy test process's, read at
    // two moments: only the driver's figures must agree.
    let driver_view = |mut readings: Vec<GpuReading>| {
        for r in &mut readings {
            if let GpuReading::Ok(s) = r {
                for p in s.processes.iter_mut().flatten() {
                    p.usage.cpu_percent = None;
                    p.usage.host_memory = None;
                }
            }
        }
        readings
    };
    assert_eq!(driver_view(sample(&mut a)), driver_view(sample(&mut b)));
    drop(a);
    // NVML counts inits: b stays initialised after a shuts down.
    assert_eq!(sample(&mut b).len(), 2);
    assert!(sample(&mut b).iter().all(|r| r.sample().is_some()));
}

#[test]
fn the_loaded_fake_shows_up_as_nvml_in_our_own_maps() {
    let Some(lib) = fake_nvml_with(&[]) else {
        return;
    };
    let _t = NvmlTelemetry::init_with_library(&lib).expect("the fake NVML initialises");
    let libs = procfs::gpu_libraries(std::process::id()).expect("our maps are readable");
    let path = lib.to_str().expect("a UTF-8 temp path");
    let nvml = libs
        .iter()
        .find(|l| l.path == path)
        .unwrap_or_else(|| panic!("{path} not in {libs:?}"));
    assert_eq!(nvml.kind, LibraryKind::Nvml);
    assert_eq!(nvml.version.as_deref(), Some("1"));
}

/// Run by `environment_variables_configure_the_fake_without_a_conf_file` in
/// a child process with `FAKE_NVML_GPUS=3`; not meant to run on its own.
#[test]
#[ignore = "helper: run in a child process with FAKE_NVML_* set"]
fn child_env_configured_fake_has_three_gpus_without_power() {
    // `cargo test -- --ignored` runs this in the parent too: nothing to do.
    if std::env::var("FAKE_NVML_GPUS").as_deref() != Ok("3") {
        return;
    }
    let Some(lib) = build_fake_nvml() else { return };
    let mut t = NvmlTelemetry::init_with_library(&lib).expect("the fake NVML initialises");
    let readings = sample(&mut t);
    assert_eq!(readings.len(), 3);
    assert!(readings.iter().all(|r| ok(r).power_draw_mw.is_none()));
}

#[test]
fn environment_variables_configure_the_fake_without_a_conf_file() {
    // The environment is shared by every test thread, so set it only in a
    // child process: this test binary, running just the helper above.
    if build_fake_nvml().is_none() {
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(exe)
        .args([
            "--exact",
            "child_env_configured_fake_has_three_gpus_without_power",
            "--ignored",
            "--test-threads=1",
        ])
        .env("FAKE_NVML_GPUS", "3")
        .env("FAKE_NVML_NO_POWER", "1")
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Debug-build cost of one `sample()` (2 GPUs, 2 processes each, /proc
/// lookups included). Run with
/// `cargo test --test nvml_backend -- --ignored --nocapture sample_cost`.
#[test]
#[ignore = "timing, not a check"]
fn sample_cost_with_two_gpus_and_two_processes() {
    let Some(mut t) = fake(&[]) else { return };
    for _ in 0..20 {
        sample(&mut t);
    }
    let rounds = 2000u32;
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(sample(&mut t));
    }
    let each = start.elapsed() / rounds;
    println!("one NVML sample (fake, 2 GPUs, 2 processes each, debug build): {each:?}");
}
