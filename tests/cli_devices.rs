//! The device commands as a user runs them: doctor and check with no driver,
//! with a fake NVML driver, and the binary's link-time independence from CUDA.

mod common;

use std::process::Command;

use common::fake_cuda::{FakeKernels, build_fake_cuda};
use common::fake_nvml::fake_nvml_with;
use common::skip::{Prerequisite, skip};

fn vramtop(args: &[&str], ld_library_path: Option<&std::path::Path>) -> (i32, String, String) {
    common::run_vramtop(args, ld_library_path)
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn doctor_on_the_simulation_lists_every_simulated_gpu_and_exits_0() {
    let (code, out, err) = vramtop(
        &[
            "doctor",
            "--backend",
            "sim",
            "--sim-gpus",
            "3",
            "--sim-memory",
            "24GiB",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    // doctor reports the backend --backend chose, and that it was chosen.
    assert_eq!(v["backend"], "sim", "{out}");
    assert_eq!(v["backend_choice"], "sim", "{out}");
    assert_eq!(v["backend_reason"], "chosen: backend sim", "{out}");
    assert!(v["fallback_reason"].is_null(), "{out}");
    assert!(v["nvml"]["ok"].is_boolean(), "{out}");
    assert_eq!(v["gpus"].as_array().map(Vec::len), Some(3), "{out}");
    assert_eq!(v["gpus"][0]["memory_total"], 24u64 << 30);
    assert!(v["config_file"].is_null(), "no config read: {out}");
}

#[test]
fn doctor_names_the_config_file_it_read_and_what_chose_the_backend() {
    let dir = std::env::temp_dir().join(format!("vramtop-doctor-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("config.toml");
    std::fs::write(&file, "backend = \"sim\"\nsim_gpus = 2\n").expect("write config");
    let path = file.display().to_string();
    let (code, out, err) = vramtop(&["doctor", "--config", &path], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("Config      {path}")), "{out}");
    // The backend came from the file, not from a flag: no "--backend" claim.
    let backend = out
        .lines()
        .find(|l| l.starts_with("Backend"))
        .unwrap_or_default();
    assert_eq!(backend, "Backend     sim (chosen: backend sim)", "{out}");
    let (code, out, _) = vramtop(&["doctor", "--config", &path, "--json"], None);
    assert_eq!(code, 0);
    assert_eq!(json(&out)["config_file"], path.as_str(), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn doctor_reports_the_same_used_memory_as_once_and_says_a_process_is_simulated() {
    let (code, out, err) = vramtop(&["doctor", "--backend", "sim", "--json"], None);
    assert_eq!(code, 0, "{err}");
    let doctor = json(&out);
    let (code, once_out, err) = vramtop(&["--once", "--json", "--backend", "sim"], None);
    assert_eq!(code, 0, "{err}");
    let once = json(&once_out);
    assert!(doctor["gpus"][0]["memory_used"].is_u64(), "{out}");
    assert_eq!(
        doctor["gpus"][0]["memory_used"], once["gpus"][0]["memory_used"],
        "doctor {out}\n--once {once_out}"
    );
    let process = &doctor["processes"][0];
    assert_eq!(process["simulated"], true, "{out}");
    assert!(process["libraries"].is_null(), "{out}");
    let (code, text, err) = vramtop(&["doctor", "--backend", "sim"], None);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("simulated: no real process"), "{text}");
    assert!(!text.contains("no CUDA libraries mapped"), "{text}");
}

#[test]
fn doctor_without_a_driver_explains_what_to_install() {
    let (code, out, err) = vramtop(&["doctor"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("NVML") && out.contains("CUDA") && out.contains("NVRTC"),
        "{out}"
    );
    if out.contains("libnvidia-ml.so.1 not found") {
        assert!(out.contains("install the NVIDIA driver"), "{out}");
    }
    // The CUDA line's explanation is said once: the advice points at it
    // instead of starting a second sentence mid-line.
    let cuda_line = out
        .lines()
        .find(|l| l.starts_with("CUDA"))
        .expect("a CUDA line");
    let explanation = cuda_line.trim_start_matches("CUDA").trim();
    assert_eq!(out.matches(explanation).count(), 1, "{out}");
}

#[test]
fn doctor_with_a_fake_nvml_reports_its_gpus_and_the_libraries_of_each_process() {
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_GPUS", "2")]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let (code, out, err) = vramtop(&["doctor", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["backend"], "nvml", "{out}");
    assert_eq!(v["gpus"].as_array().map(Vec::len), Some(2));
    assert_eq!(v["gpus"][0]["name"], "Fake H200");
    assert!(v["nvml"]["driver"]["driver_version"].is_string(), "{out}");
    // The fake lists the calling process (vramtop itself) on GPU 0: its
    // /proc/PID/maps is readable and shows the (fake) NVML library.
    let procs = v["processes"].as_array().expect("processes");
    let own = procs
        .iter()
        .find(|p| p["libraries"].is_array())
        .unwrap_or_else(|| panic!("a process with readable libraries: {out}"));
    let libs = own["libraries"].as_array().expect("libraries");
    assert!(libs.iter().any(|l| l["kind"] == "Nvml"), "{out}");
}

#[test]
fn once_says_nvmls_free_and_what_the_driver_keeps_for_itself_in_text_and_json() {
    use common::fake_nvml::expect;
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_GPUS", "1")]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let (code, out, err) = vramtop(&["--once", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["gpus"][0]["memory_free"], expect::memory_free(0), "{out}");
    // NVML's v2 figures: total = used + free + the driver's reservation.
    let total = expect::MEMORY_TOTAL;
    assert_ne!(expect::memory_free(0), total - expect::memory_used(0));
    let (code, text, err) = vramtop(&["--once"], Some(dir));
    assert_eq!(code, 0, "{err}");
    // The dashboard's units: 120.5 GiB reads 120 GiB, as in its legend.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(
            "memory 20.0/141.0 GiB (14%), free 120 GiB (512 MiB kept by the driver), util 42%"
        ),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() <= 80), "{text}");
}

#[test]
fn doctor_words_each_process_libraries_and_why_they_are_unreadable() {
    let Some(lib) = fake_nvml_with(&[]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    // The fake lists vramtop itself on GPU 0: its maps show the fake NVML.
    let (code, out, err) = vramtop(&["doctor"], Some(dir));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("loads libnvidia-ml.so.1"), "{out}");
    assert!(!out.contains("nvml 1"), "{out}");
    // Any process whose libraries are unreadable says why in the JSON.
    let (code, out, err) = vramtop(&["doctor", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    for p in v["processes"].as_array().expect("processes") {
        if p["libraries"].is_null() && p["simulated"] == false {
            assert!(p["unreadable"]["reason"].is_string(), "{p}");
        } else {
            assert!(p.get("unreadable").is_none(), "{p}");
        }
    }
}

#[test]
fn doctor_advises_what_the_nvml_failure_calls_for_not_an_install() {
    // 18: NVML_ERROR_LIB_RM_VERSION_MISMATCH, a driver upgraded without a
    // reboot. The NVML line says so; the advice must not say "missing".
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_INIT_ERROR", "18")]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let (code, out, err) = vramtop(&["doctor", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let error = v["nvml"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("versions differ"), "{out}");
    let advice: Vec<&str> = v["advice"]
        .as_array()
        .expect("advice")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert!(advice.iter().any(|a| a.contains("reboot")), "{advice:?}");
    assert!(
        !advice.iter().any(|a| a.contains("is missing")),
        "{advice:?}"
    );
}

#[test]
fn check_without_a_gpu_runs_on_the_simulation_and_passes() {
    let (code, out, err) = vramtop(&["check", "--json", "--budget", "256MiB"], None);
    let v = json(&out);
    if v["backend"] == "sim" {
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(v["steps"].as_array().is_some_and(|s| s.len() >= 10));
        assert!(err.contains("checking the simulated GPU instead"), "{err}");
    }
}

#[test]
fn check_refuses_a_gpu_the_simulation_does_not_have_in_one_line() {
    for device in ["1", "4000000000"] {
        let (code, out, err) = vramtop(&["check", "--backend", "sim", "--device", device], None);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(out.is_empty(), "{out}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("vramtop: error: no simulated GPU {device}: ")),
            "{err}"
        );
    }
    let (code, out, err) = vramtop(
        &[
            "check",
            "--backend",
            "sim",
            "--device",
            "1",
            "--sim-gpus",
            "2",
            "--budget",
            "128MiB",
        ],
        None,
    );
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("simulated GPU 1"), "{out}");
}

#[test]
fn bad_size_argument_is_a_usage_error_that_shows_the_accepted_forms() {
    let (code, _, err) = vramtop(&["doctor", "--sim-memory", "12parsecs"], None);
    assert_eq!(code, 2);
    assert!(err.contains("37MiB"), "{err}");
    let (code, _, err) = vramtop(&["doctor", "--backend", "rocm"], None);
    assert_eq!(code, 2);
    assert!(err.contains("auto") && err.contains("nvml"), "{err}");
}

#[test]
fn binary_links_no_cuda_or_nvml_library() {
    let Ok(out) = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_vramtop"))
        .output()
    else {
        skip(
            "binary_links_no_cuda_or_nvml_library",
            "ldd is not available",
            Prerequisite::ProvidedByCi,
        );
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("libc.so"), "ldd output looks wrong: {text}");
    for lib in ["libcuda", "libnvidia-ml", "libnvrtc", "libcudart"] {
        assert!(!text.contains(lib), "{lib} is linked: {text}");
    }
}

/// The fake CUDA driver without kernels and with no device configured (its
/// cuInit answers CUDA_ERROR_NO_DEVICE): the folder holding `libcuda.so.1`.
fn fake_libcuda_without_devices() -> Option<std::path::PathBuf> {
    fake_libcuda_without_devices_in("cli_fake_cuda")
}

/// [`fake_libcuda_without_devices`] built in `folder`.
fn fake_libcuda_without_devices_in(folder: &str) -> Option<std::path::PathBuf> {
    match build_fake_cuda(folder, FakeKernels::Without) {
        Some(fake) => Some(fake.dir),
        None => {
            skip(
                "a CLI test with a fake libcuda",
                "no C compiler (`cc`), so no fake libcuda",
                Prerequisite::ProvidedByCi,
            );
            None
        }
    }
}

#[test]
fn check_with_backend_nvml_and_no_gpu_is_an_error_not_the_simulation() {
    // A folder of its own: tests run in parallel, and the other user of
    // the fake removes its folder when done.
    let Some(dir) = fake_libcuda_without_devices_in("cli_fake_cuda_nvml") else {
        return;
    };
    let (code, out, err) = vramtop(&["check", "--backend", "nvml"], Some(&dir));
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "nothing checked: {out}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("vramtop: error: no usable CUDA GPU 0 ("),
        "{err}"
    );
    assert!(err.contains("--backend nvml does not fall back"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn driver_without_gpus_is_explained_by_doctor_and_check_falls_back() {
    let Some(dir) = fake_libcuda_without_devices() else {
        return;
    };
    let (code, out, err) = vramtop(&["doctor", "--json"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["cuda"]["driver_library_found"], true, "{out}");
    assert_eq!(v["cuda"]["devices"].as_array().map(Vec::len), Some(0));
    let error = v["cuda"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("NO_DEVICE") || error.contains("no CUDA-capable device"),
        "{out}"
    );
    assert!(
        v["cuda_summary"]
            .as_str()
            .is_some_and(|s| s.contains("no GPU is usable")),
        "{out}"
    );

    let (code, out, err) = vramtop(&["check", "--budget", "128MiB"], Some(&dir));
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(err.contains("checking the simulated GPU instead"), "{err}");
    assert!(out.contains("result: PASS"), "{out}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn check_says_the_bound_it_keeps_to_when_the_budget_is_more_than_the_gpu_has() {
    let (_, out, err) = vramtop(
        &[
            "check",
            "--backend",
            "sim",
            "--sim-memory",
            "1GiB",
            "--sim-training",
            "0",
            "--budget",
            "100GiB",
        ],
        None,
    );
    // The heading, its wrapped lines joined.
    let heading = out.split("[").next().unwrap_or_default();
    let heading = heading.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!heading.contains("at most 100 GiB"), "{out}\n{err}");
    assert!(
        heading.contains(
            "allocating at most 524 MiB (--budget 100 GiB, capped by what the GPU has free: \
             1 GiB, less the check's own 500 MiB CUDA context)"
        ),
        "{out}\n{err}"
    );
    let (_, out, _) = vramtop(
        &[
            "check",
            "--json",
            "--backend",
            "sim",
            "--sim-memory",
            "1GiB",
            "--sim-training",
            "0",
            "--budget",
            "100GiB",
        ],
        None,
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("check's JSON");
    assert_eq!(v["budget_asked"], 100u64 << 30, "{out}");
    assert_eq!(
        v["budget"],
        (1u64 << 30) - vramtop::device::sim::DEFAULT_CONTEXT_OVERHEAD,
        "the GPU's free memory once the check's own CUDA context is paid: {out}"
    );
}

#[test]
fn check_on_a_small_simulated_gpu_fits_it_or_skips_with_exit_77_never_fails() {
    for memory in ["1GiB", "1100MiB", "2GiB", "80GiB"] {
        // No simulated training process: the GPU is the check's alone.
        let (code, out, err) = vramtop(
            &[
                "check",
                "--backend",
                "sim",
                "--sim-memory",
                memory,
                "--sim-training",
                "0",
            ],
            None,
        );
        assert_eq!(code, 0, "{memory}: {out}\n{err}");
        assert!(!out.contains("FAIL"), "{memory}: {out}");
        assert!(out.contains("result: PASS\n"), "{memory}: {out}");
    }
    // Three DataLoader workers' contexts leave the check nothing: every
    // part is skipped with how much it needs, and the result says so.
    let args = [
        "check",
        "--backend",
        "sim",
        "--sim-memory",
        "1GiB",
        "--sim-training",
        "1",
        "--sim-dataloader-workers",
        "3",
    ];
    let (code, out, err) = vramtop(&args, None);
    // Nothing checked is no pass: CI running `check` there must not pass.
    assert_eq!(code, 77, "{out}\n{err}");
    assert!(!out.contains("FAIL"), "{out}");
    assert!(
        out.contains("[skip] allocator model: needs 70 MiB free"),
        "{out}"
    );
    assert!(out.contains("result: SKIP (nothing was checked"), "{out}");
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let (code, out, err) = vramtop(&json_args, None);
    assert_eq!(code, 77, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("check's JSON");
    assert_eq!(v["result"], "skip", "{out}");
    assert!(
        v["steps"]
            .as_array()
            .is_some_and(|s| s.iter().all(|s| s["skipped"] == true)),
        "{out}"
    );
}

#[test]
fn check_leaves_the_simulated_training_processes_their_memory_and_says_what_they_hold() {
    // Four trainers on a 1 GiB GPU: two take their contexts (the first a
    // segment too) and leave 4 MiB, the other two could not start.
    // `--once --json` of the same flags shows that GPU; the check must see
    // the same one, not an empty GPU beside trainers that have not started.
    let sim = [
        "--backend",
        "sim",
        "--sim-memory",
        "1GiB",
        "--sim-training",
        "4",
    ];
    let mut once = vec!["--once", "--json"];
    once.extend(sim);
    let (code, out, err) = vramtop(&once, None);
    assert_eq!(code, 0, "{err}");
    let sample: serde_json::Value = serde_json::from_str(&out).expect("the sample");
    let free = sample["gpus"][0]["memory_free"]
        .as_u64()
        .expect("memory_free");
    assert_eq!(free, 4 << 20, "{out}");

    let mut check = vec!["check"];
    check.extend(sim);
    let (code, out, err) = vramtop(&check, None);
    assert_eq!(code, 77, "nothing can be checked in 4 MiB: {out}\n{err}");
    let text = out.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "allocating at most 0 B (--budget 512 MiB, capped by what the GPU has free: 4 MiB, less \
         the check's own 500 MiB CUDA context)",
        "others: 2 simulated training processes, holding 1020 MiB; 2 simulated training \
         processes could not start: no room for a 500 MiB CUDA context",
        "result: SKIP (nothing was checked",
    ] {
        assert!(text.contains(said), "{said}: {out}");
    }
    assert!(!out.contains("[ ok ]"), "{out}");

    check.push("--json");
    let (code, out, err) = vramtop(&check, None);
    assert_eq!(code, 77, "{out}\n{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("check's JSON");
    assert_eq!(v["result"], "skip", "{out}");
    assert_eq!(v["free"], free, "the free memory --once reports: {out}");
    assert_eq!(v["budget"], 0, "{out}");
    assert!(
        v["others"]
            .as_str()
            .is_some_and(|o| o.starts_with("2 simulated training processes")),
        "{out}"
    );

    // The default trainer is honoured too: on 80 GiB it leaves room, and
    // the check passes beside it, saying what it holds.
    let (code, out, err) = vramtop(&["check", "--backend", "sim"], None);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(
        out.contains("others: 1 simulated training process, holding "),
        "{out}"
    );
    assert!(out.contains("result: PASS\n"), "{out}");
}

#[test]
fn check_refuses_a_budget_below_what_it_allocates_in_one_line() {
    let (code, out, err) = vramtop(&["check", "--backend", "sim", "--budget", "1B"], None);
    assert_eq!(code, 2, "{out}\n{err}");
    assert!(out.is_empty(), "nothing was checked: {out}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("vramtop: error: --budget 1 B is below the 70 MiB the check allocates"),
        "{err}"
    );
    // The tensor the budget sizes is named by its least size: at the least
    // budget it is 10 MiB, no larger than the ones before it.
    assert!(
        err.contains("then one of 10 MiB or more sized by the budget"),
        "{err}"
    );
    let (code, out, err) = vramtop(&["check", "--backend", "sim", "--budget", "70MiB"], None);
    assert_eq!(code, 0, "the least budget is enough: {out}\n{err}");
}

/// The fake CUDA driver built in `folder` (with kernels as `kernels` asks),
/// or `None` with a note when there is no C compiler.
fn fake_libcuda(folder: &str, kernels: FakeKernels) -> Option<common::fake_cuda::FakeCuda> {
    let built = build_fake_cuda(folder, kernels);
    if built.is_none() {
        skip(
            "a check test on the fake libcuda",
            "no C compiler (`cc`), so no fake libcuda",
            Prerequisite::ProvidedByCi,
        );
    }
    built
}

/// vramtop on the fake CUDA driver in `dir`, which then has one GPU of
/// `bytes`.
fn vramtop_on_fake_gpu(args: &[&str], dir: &std::path::Path, bytes: u64) -> (i32, String, String) {
    common::run_vramtop_with_env(
        args,
        Some(dir),
        &[("FAKE_CUDA_DEVICE_BYTES", &bytes.to_string())],
    )
}

#[test]
fn check_on_cuda_exits_1_when_a_step_fails_and_77_when_nothing_was_checked() {
    // A fake whose kernels cannot be launched: the fill kernel fails.
    let Some(fake) = fake_libcuda("cli_fake_cuda_check_fail", FakeKernels::Without) else {
        return;
    };
    // 4 GiB: 5 % of what is free is about 200 MiB, room for every part.
    let (code, out, err) = vramtop_on_fake_gpu(&["check"], &fake.dir, 4 << 30);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("Fake H200 (cuda)"), "on CUDA: {out}\n{err}");
    assert!(!err.contains("simulated GPU"), "{err}");
    assert!(out.contains("  [FAIL] "), "{out}");
    assert!(out.contains("result: FAIL\n"), "{out}");
    // 1 GiB: 5 % of what is free is below the 70 MiB the check needs, so
    // no part runs.
    let (code, out, err) = vramtop_on_fake_gpu(&["check"], &fake.dir, 1 << 30);
    assert_eq!(code, 77, "{out}\n{err}");
    assert!(out.contains("Fake H200 (cuda)"), "on CUDA: {out}\n{err}");
    assert!(out.contains("result: SKIP (nothing was checked"), "{out}");
    let (code, out, err) = vramtop_on_fake_gpu(&["check", "--json"], &fake.dir, 1 << 30);
    assert_eq!(code, 77, "{out}\n{err}");
    assert_eq!(json(&out)["result"], "skip", "{out}");
    let _ = std::fs::remove_dir_all(fake.dir);
}

#[test]
fn check_on_cuda_with_working_kernels_passes_and_exits_0() {
    let Some(fake) = fake_libcuda("cli_fake_cuda_check_pass", FakeKernels::WhenCxxWorks) else {
        return;
    };
    if !fake.kernels {
        skip(
            "check_on_cuda_with_working_kernels_passes_and_exits_0",
            "no C++ compiler (`c++`), so the fake libcuda has no kernels",
            Prerequisite::ProvidedByCi,
        );
        return;
    }
    let (code, out, err) = vramtop_on_fake_gpu(&["check"], &fake.dir, 4 << 30);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("Fake H200 (cuda)"), "on CUDA: {out}\n{err}");
    assert!(!out.contains("[FAIL]") && !out.contains("[skip]"), "{out}");
    assert!(out.contains("result: PASS\n"), "{out}");
    let _ = std::fs::remove_dir_all(fake.dir);
}

#[test]
fn once_json_lists_the_simulated_processes_that_could_not_start_and_only_listed_allocators() {
    // 1 GiB holds two 500 MiB contexts: the third trainer could not start.
    let args = [
        &["--once", "--json"][..],
        &common::SIM_GPU_FULL_AT_TWO_TRAINERS,
    ]
    .concat();
    let (code, out, err) = vramtop(&args, None);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("the sample");
    let listed: Vec<u64> = v["gpus"][0]["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|p| p["pid"].as_u64())
        .collect();
    assert_eq!(listed, [4242, 4243], "{out}");
    let shown = v["gpus"][0]["allocator"]["pid"]
        .as_u64()
        .expect("an allocator");
    assert!(listed.contains(&shown), "{out}");
    assert_eq!(v["not_started"][0]["pid"], 4244, "{out}");
    assert_eq!(v["not_started"][0]["trainer"], true, "{out}");
    assert_eq!(
        v["not_started_note"],
        "1 simulated training process could not start: no room for a 500 MiB CUDA context",
        "{out}"
    );
    // Every process started: neither field.
    let (_, out, _) = vramtop(&["--once", "--json", "--backend", "sim"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("the sample");
    assert!(v.get("not_started").is_none() && v.get("not_started_note").is_none());
}

#[test]
fn doctor_says_which_simulated_processes_could_not_start_in_the_words_of_once() {
    // 1 GiB holds two 500 MiB contexts: the third trainer could not start.
    let sim = common::SIM_GPU_FULL_AT_TWO_TRAINERS;
    let (code, out, err) = vramtop(&[&["--once", "--json"][..], &sim].concat(), None);
    assert_eq!(code, 0, "{err}");
    let once = json(&out);
    let note = once["not_started_note"]
        .as_str()
        .expect("--once says a trainer could not start");
    let (code, out, err) = vramtop(&[&["doctor", "--json"][..], &sim].concat(), None);
    assert_eq!(code, 0, "{err}");
    let doctor = json(&out);
    assert_eq!(doctor["not_started_note"], note, "{out}");
    assert_eq!(doctor["not_started"], once["not_started"], "{out}");
    let (code, text, err) = vramtop(&[&["doctor"][..], &sim].concat(), None);
    assert_eq!(code, 0, "{err}");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains(&format!("Note {note}")), "{text}");
    assert!(flat.contains("(--sim-memory)"), "what to do: {text}");
    // Every process started: no note, no field.
    let (_, out, _) = vramtop(&["doctor", "--json", "--backend", "sim"], None);
    let doctor = json(&out);
    assert!(doctor.get("not_started").is_none() && doctor.get("not_started_note").is_none());
    let (_, text, _) = vramtop(&["doctor", "--backend", "sim"], None);
    assert!(!text.contains("could not start"), "{text}");
}

/// A fake NVML whose `nvmlInit` fails with NVML_ERROR_DRIVER_NOT_LOADED
/// (9): the library is installed, the driver is broken.
fn broken_driver() -> Option<std::path::PathBuf> {
    let lib = fake_nvml_with(&[("FAKE_NVML_INIT_ERROR", "9")])?;
    Some(
        lib.parent()
            .expect("the library has a folder")
            .to_path_buf(),
    )
}

#[test]
fn record_under_auto_refuses_a_broken_driver_instead_of_recording_the_sim() {
    let Some(dir) = broken_driver() else {
        return;
    };
    let (code, out, err) = vramtop(
        &["record", "-", "--duration", "1s", "--interval", "500ms"],
        Some(&dir),
    );
    assert_ne!(code, 0, "{out}{err}");
    assert!(!out.contains("\"backend\":\"sim\""), "{out}");
    assert!(err.contains("kernel driver is not loaded"), "{err}");
    assert!(err.contains("--backend sim"), "{err}");
}

#[test]
fn once_json_under_auto_refuses_a_broken_driver_and_once_text_says_it_is_simulated() {
    let Some(dir) = broken_driver() else {
        return;
    };
    // The JSON is read by a script that sees no banner: refused, as
    // `record` and `serve` refuse, with the way to ask for the simulation.
    let (code, out, err) = vramtop(&["--once", "--json"], Some(&dir));
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty(), "{out}");
    assert!(err.contains("kernel driver is not loaded"), "{err}");
    assert!(err.contains("--backend sim"), "{err}");
    // Asked for, the simulation is exported.
    let (code, out, err) = vramtop(&["--once", "--json", "--backend", "sim"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"backend\": \"sim\""), "{out}");
    // A person reading the text sees the simulated GPU and why.
    let (code, out, err) = vramtop(&["--once"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("kernel driver is not loaded"), "{out}");
}

#[test]
fn serve_under_auto_refuses_a_broken_driver_instead_of_serving_the_sim() {
    let Some(dir) = broken_driver() else {
        return;
    };
    let mut child = common::vramtop_command(&["serve", "--listen", "127.0.0.1:0"])
        .env("LD_LIBRARY_PATH", &dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("vramtop starts");
    // A liveness bound: without the refusal, serve runs until killed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    if status.is_none() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("stderr");
    let err = String::from_utf8_lossy(&out.stderr);
    let status = status.unwrap_or_else(|| panic!("serve kept running: {err}"));
    assert!(!status.success(), "{err}");
    assert!(!err.contains("serving metrics"), "{err}");
    assert!(err.contains("kernel driver is not loaded"), "{err}");
    assert!(err.contains("--backend sim"), "{err}");
}

#[test]
fn once_under_auto_still_shows_a_broken_driver_simulated_and_says_why() {
    let Some(dir) = broken_driver() else {
        return;
    };
    let (code, out, err) = vramtop(&["--once"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("backend: sim; showing 1 simulated GPU: "),
        "{out}"
    );
    // `--once --json` is refused instead (an export: see
    // once_json_under_auto_refuses_a_broken_driver_…); its banner is that
    // of an explicit simulation.
    let (code, out, err) = vramtop(&["--once", "--json", "--backend", "sim"], Some(&dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["backend"], "sim", "{out}");
}

#[test]
fn an_explicit_sim_backend_still_serves_and_records_beside_a_broken_driver() {
    let Some(dir) = broken_driver() else {
        return;
    };
    let (code, out, err) = vramtop(
        &["record", "-", "--backend", "sim", "--duration", "1s"],
        Some(&dir),
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"backend\":\"sim\""), "{out}");
}

#[test]
fn once_says_processes_are_unknown_where_the_driver_cannot_list_them() {
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_UNSUPPORTED", "processes")]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let (code, out, err) = vramtop(&["--once", "--backend", "nvml"], Some(dir));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("  processes: n/a (not supported by the driver)\n"),
        "{out}"
    );
    assert!(!out.contains("no processes"), "unknown, not idle: {out}");
    let (code, out, err) = vramtop(&["--once", "--backend", "nvml", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert!(v["gpus"][0]["processes"].is_null(), "{out}");
    // Without the list, all of "used" would read as held by no process.
    assert!(v["gpus"][0]["unattributed"].is_null(), "{out}");
    assert!(v["gpus"][0]["memory_used"].is_u64(), "{out}");
}

#[test]
fn once_names_mig_devices_by_their_gpu_and_slot_not_as_other_gpus() {
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_GPUS", "2"), ("FAKE_NVML_MIG", "3")]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let (code, out, err) = vramtop(&["--once", "--backend", "nvml"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let titles: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("GPU "))
        .collect();
    assert_eq!(
        titles,
        [
            "GPU 0  Fake H200",
            "  GPU 0 MIG 0  Fake H200 MIG 1g.18gb",
            "  GPU 0 MIG 1  Fake H200 MIG 1g.18gb",
            "  GPU 0 MIG 2  Fake H200 MIG 1g.18gb",
            "GPU 1  Fake H200",
        ],
        "{out}"
    );
    let (code, out, err) = vramtop(&["--once", "--backend", "nvml", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let rows: Vec<(u64, Option<u64>)> = v["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| (g["index"].as_u64().expect("index"), g["mig_index"].as_u64()))
        .collect();
    assert_eq!(
        rows,
        [
            (0, None),
            (0, Some(0)),
            (0, Some(1)),
            (0, Some(2)),
            (1, None)
        ],
        "{out}"
    );
    assert!(v["gpus"][0]["mig_index"].is_null(), "{out}");
}

/// A `sleep` child, killed when dropped (a failed assertion included).
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn once_and_record_give_an_nvml_process_its_sm_cpu_and_host_memory() {
    // A real process on the fake GPU: /proc has its CPU time and memory.
    let sleeper = Sleeper(
        Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("start sleep"),
    );
    let pid = sleeper.0.id();
    let pid_text = pid.to_string();
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_GPUS", "1"), ("FAKE_NVML_OTHER_PID", &pid_text)])
    else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let sleep_of = |sample: &serde_json::Value| {
        sample["gpus"][0]["processes"]
            .as_array()
            .expect("processes listed")
            .iter()
            .find(|p| p["pid"] == pid)
            .cloned()
            .unwrap_or_else(|| panic!("pid {pid} listed: {sample}"))
    };

    let (code, out, err) = vramtop(&["--once", "--backend", "nvml", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let sleep = sleep_of(&json(&out));
    // The fake's other pid uses 5 % of GPU 0's SMs (fake_nvml.c).
    assert_eq!(sleep["sm_percent"], 5, "{sleep}");
    assert!(
        sleep["cpu_percent"].is_null(),
        "one sample, no interval: {sleep}"
    );
    assert!(
        sleep["host_memory"].as_u64().is_some_and(|b| b > 0),
        "{sleep}"
    );

    let (code, out, err) = vramtop(&["--once", "--backend", "nvml"], Some(dir));
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with(&format!("    pid {pid} ")))
        .unwrap_or_else(|| panic!("a line for {pid}: {out}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    assert!(words.windows(3).any(|w| w == ["SM", "5%", "host"]), "{out}");
    assert!(!out.contains("CPU "), "--once has no CPU figure: {out}");

    // From its second sample on, `record` has the CPU share: sleep's is 0.
    let (code, out, err) = vramtop(
        &[
            "record",
            "-",
            "--backend",
            "nvml",
            "--duration",
            "1s",
            "--interval",
            "250ms",
        ],
        Some(dir),
    );
    assert_eq!(code, 0, "{err}");
    let samples: Vec<serde_json::Value> = out.lines().map(json).collect();
    assert!(samples.len() >= 2, "{out}");
    assert!(sleep_of(&samples[0])["cpu_percent"].is_null(), "{out}");
    let last = sleep_of(samples.last().expect("a sample"));
    assert_eq!(last["cpu_percent"], 0.0, "sleep uses no CPU: {last}");
    assert_eq!(last["sm_percent"], 5, "{last}");
}

#[test]
fn once_says_no_access_not_lost_for_a_gpu_this_user_may_not_open() {
    let Some(lib) = fake_nvml_with(&[("FAKE_NVML_NO_HANDLE", "0")]) else {
        return;
    };
    let dir = lib.parent().expect("the library has a folder");
    let (code, out, err) = vramtop(&["--once", "--backend", "nvml"], Some(dir));
    assert_eq!(code, 0, "{err}");
    // "lost" reads as a GPU that fell off the bus; this one is there.
    assert!(
        out.contains("GPU 0  no access: no permission to open this GPU\n"),
        "{out}"
    );
    assert!(!out.contains("lost"), "{out}");
    let (code, out, err) = vramtop(&["--once", "--backend", "nvml", "--json"], Some(dir));
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["gpus"][0]["cause"], "no_access", "{out}");
    let (code, out, err) = vramtop(&["doctor", "--backend", "nvml"], Some(dir));
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("no access: no permission to open this GPU"),
        "{out}"
    );
}
