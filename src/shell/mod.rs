//! The shell: the event loops, the worker threads and the terminal around
//! the pure state of `app` and the rendering of `ui` (the dashboard's loop,
//! the snapshot viewer's, and mouse hit-testing, which needs ui's layout).

pub mod click;
pub mod run;
pub mod viewer_run;
