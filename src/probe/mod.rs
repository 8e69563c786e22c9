//! Live attach (issue #7): vramtop reads the allocator of running PyTorch
//! processes through `vramtop_probe`, which serves newline-delimited JSON on
//! a Unix socket (protocol v1 and v2, `docs/probe-protocol.md`; user guide
//! in `docs/attach.md`).
//!
//! - [`protocol`]: the line reader and the typed messages;
//! - [`client`]: asking a probe for a snapshot (v2);
//! - [`discovery`]: where sockets are and which are trusted;
//! - [`pid`]: host pid (SO_PEERCRED, NSpid) and CUDA ordinal → GPU index;
//! - [`registry`]: the scanner and reader threads, and the latest figures;
//! - [`snapshot_file`]: which snapshot files a probe names are opened.

pub mod client;
pub mod discovery;
pub mod pid;
pub mod protocol;
pub mod registry;
pub mod snapshot_file;

pub use registry::{ProbeSnapshot, ProbeState, ProbeStatus, Registry};
