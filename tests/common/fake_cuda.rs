//! The fake CUDA driver (tests/fixtures/fake_cuda.c) built as `libcuda.so.1`
//! in a folder of its own: with the real kernels (assets/kernels/vramtop.cu,
//! compiled as host C++ by tests/fixtures/fake_cuda_kernels.cpp) when a C++
//! compiler works, so that the backend can launch them on a machine with no
//! GPU. `CC` and `CXX` name the compilers (default `cc` and `c++`).

use std::ffi::c_int;
use std::path::{Path, PathBuf};
use std::process::Command;

use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};

/// Whether the fake gets the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FakeKernels {
    /// Never: a driver for probing and memory bookkeeping only.
    Without,
    /// When a C++ compiler works (the fake then reports it has kernels).
    WhenCxxWorks,
}

/// A built fake driver.
#[derive(Debug)]
pub struct FakeCuda {
    /// The folder holding it: what `LD_LIBRARY_PATH` names for a child.
    pub dir: PathBuf,
    /// `dir/libcuda.so.1`.
    pub lib: PathBuf,
    /// Whether the real kernels are linked in.
    pub kernels: bool,
}

fn tool_runs(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs a compiler step; one that fails is a broken fixture, not a skip.
fn must(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{cmd:?} does not run: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles the fake into `CARGO_TARGET_TMPDIR/<folder>_<pid>/libcuda.so.1`;
/// `None` without a working C compiler (the caller skips).
pub fn build_fake_cuda(folder: &str, kernels: FakeKernels) -> Option<FakeCuda> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    if !tool_runs(&cc) {
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{folder}_{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the fake's build folder");
    let with_kernels = kernels == FakeKernels::WhenCxxWorks && tool_runs(&cxx);
    let c_obj = dir.join("fake_cuda.o");
    let mut c = Command::new(&cc);
    c.args(["-c", "-fPIC", "-O2", "-fvisibility=hidden"]);
    if !with_kernels {
        c.arg("-DFAKE_CUDA_NO_KERNELS");
    }
    must(
        c.arg(root.join("tests/fixtures/fake_cuda.c"))
            .arg("-o")
            .arg(&c_obj),
    );
    let lib = dir.join("libcuda.so.1");
    let mut link = Command::new(if with_kernels { &cxx } else { &cc });
    link.args(["-shared", "-Wl,-soname,libcuda.so.1", "-o"])
        .arg(&lib)
        .arg(&c_obj);
    if with_kernels {
        let k_obj = dir.join("fake_cuda_kernels.o");
        must(
            Command::new(&cxx)
                .args(["-c", "-fPIC", "-O2", "-fvisibility=hidden", "-I"])
                .arg(root.join("assets/kernels"))
                .arg(root.join("tests/fixtures/fake_cuda_kernels.cpp"))
                .arg("-o")
                .arg(&k_obj),
        );
        link.arg(&k_obj);
    }
    must(&mut link);
    Some(FakeCuda {
        dir,
        lib,
        kernels: with_kernels,
    })
}

/// Builds the fake (with kernels when C++ works) and loads it into this
/// process, so that cudarc's `dlopen("libcuda.so.1")` finds it; its build
/// folder is removed (a loaded library stays mapped). Returns the library
/// and whether it runs kernels; `None` without a C compiler.
pub fn load_fake_cuda(folder: &str) -> Option<(Library, bool)> {
    let built = build_fake_cuda(folder, FakeKernels::WhenCxxWorks)?;
    // SAFETY: the fake has no initialisers; RTLD_GLOBAL makes its soname
    // libcuda.so.1 what cudarc's dlopen("libcuda.so.1") finds.
    let lib = unsafe { Library::open(Some(&built.lib), RTLD_NOW | RTLD_GLOBAL) }
        .expect("the fake driver loads");
    let _ = std::fs::remove_dir_all(&built.dir);
    // SAFETY: fake_cuda.c defines `int fake_cuda_has_kernels(void)`.
    let has_kernels = unsafe {
        let has: unsafe extern "C" fn() -> c_int =
            *lib.get(b"fake_cuda_has_kernels").expect("symbol");
        has() != 0
    };
    assert_eq!(has_kernels, built.kernels, "the fake says what was linked");
    Some((lib, has_kernels))
}
