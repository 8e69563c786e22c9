//! vramtop: GPU memory made understandable.
//!
//! The crate is organised as in `docs/architecture.md`:
//! - [`alloc`]: a pure model of PyTorch's CUDA caching allocator;
//! - [`snapshot`]: a safe reader for `torch.cuda.memory._dump_snapshot` pickles
//!   and replay/verification of their traces through the model.

pub mod alloc;
pub mod app;
pub mod cli;
pub mod device;
pub mod probe;
pub mod quote;
pub mod scenario;
pub mod serve;
pub mod shell;
pub mod snapshot;
pub mod ui;
