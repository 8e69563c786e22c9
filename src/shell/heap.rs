//! The C heap's settings for this process (glibc's malloc).
//!
//! By default glibc serves a request of 128 KiB or more with its own
//! `mmap` and unmaps it when freed, raising that threshold only as such
//! blocks are freed. Reading a snapshot grows its buffers through exactly
//! those sizes (the file's bytes, the parser's node arena and item
//! vectors, the replay's tables), so each growth step was mapped, faulted
//! in page by page (4 KiB each, about 2 µs apiece here), and unmapped
//! again. Up to `MMAP_THRESHOLD_BYTES` they now come from the heap and
//! its freed memory is reused: about a fifth fewer page faults reading a
//! 2–4 MB snapshot, the same peak memory on large files, whose big vectors
//! are still mapped (and grown in place with `mremap`).

/// Requests of this many bytes or more get their own mapping.
const MMAP_THRESHOLD_BYTES: i32 = 4 << 20;

/// Free memory at the heap's top kept for reuse before it is returned to
/// the system, in bytes (glibc's default is 128 KiB once the threshold
/// above is set).
const TRIM_THRESHOLD_BYTES: i32 = 16 << 20;

/// Applies the settings above; call once, first thing in `main`. A no-op
/// where the C library is not glibc.
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use nix::libc;
        // SAFETY: `mallopt` only changes malloc's parameters; it is called
        // before any other thread exists. A refused setting (return 0)
        // leaves glibc's default, which is correct, only slower.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES);
        }
    }
}
