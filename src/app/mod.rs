//! The dashboard application's pure part: state, keymap, update, the stress
//! panel and the viewer's state. The event loops are in `crate::shell`.

pub mod capture;
pub mod keymap;
pub mod observe;
pub mod process_detail;
pub mod process_list;
pub mod source;
pub mod state;
pub mod stress;
pub mod stress_worker;
pub mod timeline_range;
pub mod update;
pub mod viewer;
