//! The dashboard application: state, keymap, update, and the event loop.

pub mod capture;
pub mod click;
pub mod keymap;
pub mod observe;
pub mod run;
pub mod source;
pub mod state;
pub mod stress;
pub mod stress_worker;
pub mod update;
pub mod viewer;
pub mod viewer_run;
