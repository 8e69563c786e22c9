//! The stress panel's CUDA worker over the fake CUDA driver
//! (tests/fixtures/fake_cuda.c, with the real kernels compiled as host C++
//! when `c++` exists), preloaded as libcuda.so.1: allocate, fill, verify,
//! reconfigure, free all, and nothing left in the driver afterwards.
//!
//! Its own test binary because cudarc caches the loaded libcuda for the
//! process; the fake's state is global, so the tests take turns (TURN).

mod common;

use common::fake_cuda::load_fake_cuda;
use common::skip::{Prerequisite, skip};
use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard, OnceLock, mpsc};
use std::time::Duration;

use libloading::os::unix::Library;
use vramtop::alloc::{AllocatorConfig, CachingAllocator};
use vramtop::app::stress::{StressAction, StressCommand, StressOutcome, StressPanel, StressResult};
use vramtop::app::stress_worker::{StressExecutor, StressWorker};
use vramtop::device::cuda::CudaMemory;
use vramtop::device::pattern_byte;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The fake driver's controls and counters (C functions of fake_cuda.c).
struct Driver {
    _lib: Library,
    kernels: bool,
    reset: unsafe extern "C" fn(c_int, u64),
    counters: [unsafe extern "C" fn() -> c_int; 6],
}

/// Counter symbols, in the order [`Driver::live`] reports them.
const COUNTERS: [&[u8]; 6] = [
    b"fake_cuda_live_allocations",
    b"fake_cuda_live_handles",
    b"fake_cuda_live_reservations",
    b"fake_cuda_live_mappings",
    b"fake_cuda_context_refs",
    b"fake_cuda_modules_loaded",
];

impl Driver {
    /// Live allocations, handles, reservations, mappings, context
    /// references and modules.
    fn live(&self) -> [c_int; 6] {
        // SAFETY: plain C functions of the fake without arguments.
        self.counters.map(|f| unsafe { f() })
    }
}

static TURN: Mutex<()> = Mutex::new(());

/// The fake with one GPU of 1 GiB and nothing live, held for one test.
fn driver() -> Option<(MutexGuard<'static, ()>, &'static Driver)> {
    static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();
    let turn = TURN.lock().unwrap_or_else(|p| p.into_inner());
    let driver = DRIVER.get_or_init(|| {
        let (lib, kernels) = load_fake_cuda("stress_fake_cuda")?;
        // SAFETY: these symbols have these C signatures in fake_cuda.c.
        unsafe {
            let reset = *lib.get(b"fake_cuda_reset").expect("symbol");
            let counters = COUNTERS.map(|name| *lib.get(name).expect("symbol"));
            Some(Driver {
                _lib: lib,
                kernels,
                reset,
                counters,
            })
        }
    });
    let Some(driver) = driver.as_ref() else {
        skip(
            "a stress test on the fake CUDA driver",
            "no C compiler, so no fake CUDA driver",
            Prerequisite::ProvidedByCi,
        );
        return None;
    };
    // SAFETY: plain C function of the fake.
    unsafe { (driver.reset)(1, GIB) };
    Some((turn, driver))
}

fn executor() -> StressExecutor<CudaMemory> {
    let memory = CudaMemory::open(0).expect("the fake GPU opens");
    StressExecutor::new(
        CachingAllocator::new(memory, 0, AllocatorConfig::default()),
        true,
    )
    .with_kernels()
    .with_reopen(|| CudaMemory::open(0).map_err(|e| e.reason()))
}

fn allocated(r: &StressResult) -> Vec<(u64, u64)> {
    match &r.outcome {
        StressOutcome::Allocated(t) => t.iter().map(|t| (t.address, t.requested)).collect(),
        other => panic!("expected Allocated, got {other:?}"),
    }
}

#[test]
fn the_executor_fills_verifies_reconfigures_and_leaves_nothing_in_the_driver() {
    let Some((_turn, driver)) = driver() else {
        return;
    };
    if !driver.kernels {
        skip(
            "a stress kernel test on the fake CUDA driver",
            "no C++ compiler, so the fake runs no kernels",
            Prerequisite::ProvidedByCi,
        );
        return;
    }
    let mut exec = executor();
    let mut panel = StressPanel::default();
    let started = exec.started();
    let StressOutcome::Started {
        free_at_start,
        real_gpu,
        ..
    } = started.outcome
    else {
        panic!("{:?}", started.outcome)
    };
    assert!(real_gpu);
    panel.on_result(started);
    assert_eq!(
        panel.cap,
        Some(free_at_start / 2),
        "50 % of the free memory"
    );

    let r = exec.execute(&StressCommand::Malloc {
        sizes: vec![MIB, 6 * MIB, 5000],
        cap: None,
    });
    let tensors = allocated(&r);
    // Each tensor holds the pattern of its id (1, 2, 3) over its bytes.
    for (id, &(address, len)) in (1u32..).zip(&tensors) {
        // SAFETY: the fake's device memory is host memory, and the tensor
        // is live.
        let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, len as usize) };
        let wrong = (0..len).find(|&o| bytes[o as usize] != pattern_byte(o, id));
        assert_eq!(wrong, None, "tensor #{id}");
    }
    let r = exec.execute(&StressCommand::Verify);
    assert_eq!(
        r.outcome,
        StressOutcome::Verified {
            checked: 3,
            bad: None
        }
    );

    // One flipped byte in tensor #2 is found at its offset.
    let (second, _) = tensors[1];
    // SAFETY: inside tensor #2, host memory of the fake.
    unsafe {
        let p = (second + 12_345) as *mut u8;
        p.write(!p.read());
    }
    let r = exec.execute(&StressCommand::Verify);
    let StressOutcome::Verified {
        checked: 1,
        bad: Some(bad),
    } = r.outcome
    else {
        panic!("{:?}", r.outcome)
    };
    assert_eq!((bad.address, bad.offset), (second, 12_345));

    // A new allocator under expandable segments: the old one gave back
    // every segment first.
    let r = exec.execute(&StressCommand::Reconfigure {
        settings: "expandable_segments:True".into(),
    });
    assert!(
        matches!(&r.outcome, StressOutcome::Reconfigured { freed, .. } if freed.len() == 3),
        "{:?}",
        r.outcome
    );
    assert_eq!(driver.live()[0], 0, "no cuMemAlloc segment is left");
    let r = exec.execute(&StressCommand::Malloc {
        sizes: vec![30 * MIB, 30 * MIB],
        cap: None,
    });
    assert_eq!(allocated(&r).len(), 2);
    assert!(driver.live()[3] > 0, "expandable pages are mapped");
    let r = exec.execute(&StressCommand::Verify);
    assert_eq!(
        r.outcome,
        StressOutcome::Verified {
            checked: 2,
            bad: None
        }
    );
    exec.release_all();
    assert_eq!(exec.allocator().memory_reserved(), 0);
    drop(exec);
    assert_eq!(driver.live(), [0; 6], "nothing is left in the driver");
}

#[test]
fn the_cuda_worker_runs_on_its_thread_and_gives_everything_back_when_dropped() {
    let Some((_turn, driver)) = driver() else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let worker = StressWorker::spawn_cuda(0, None, move |r| {
        let _ = tx.send(r);
    })
    .expect("the thread starts");
    let next = || {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the worker answers")
    };
    let mut panel = StressPanel::default();
    panel.on_result(next());
    assert_eq!(panel.gpu, Some(0));
    assert!(panel.cap.is_some(), "a real GPU gets a cap");
    let cmds = panel.apply(StressAction::Allocate);
    assert!(worker.send(cmds));
    panel.on_result(next());
    assert_eq!(panel.tensors.len(), 10);
    if driver.kernels {
        let cmds = panel.apply(StressAction::Verify);
        assert!(worker.send(cmds));
        panel.on_result(next());
        let said = panel.message.clone().unwrap_or_default();
        assert!(said.contains("verified 10 tensors"), "{said}");
    }
    assert!(driver.live()[0] > 0);
    drop(worker);
    assert_eq!(driver.live(), [0; 6], "nothing is left in the driver");
}

#[test]
fn a_missing_gpu_is_one_failed_answer_not_a_hang() {
    let Some((_turn, _driver)) = driver() else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let worker = StressWorker::spawn_cuda(7, None, move |r| {
        let _ = tx.send(r);
    })
    .expect("the thread starts");
    let r = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the worker answers");
    let StressOutcome::Failed { message, .. } = r.outcome else {
        panic!("{:?}", r.outcome)
    };
    assert!(message.contains("cannot open CUDA GPU 7"), "{message}");
    drop(worker);
}
