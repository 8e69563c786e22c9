//! The shell: the event loops, the worker threads and the terminal around
//! the pure state of `app` and the rendering of `ui` (the dashboard's loop,
//! the snapshot viewer's, and mouse hit-testing, which needs ui's layout).
//! [`dashboard::Dashboard`] holds the dashboard's state and terminal and
//! handles each event; `run.rs` owns the channels, threads and signals.

pub mod click;
pub mod dashboard;
pub mod heap;
pub mod run;
pub mod terminal;
pub mod viewer_run;
