//! The dashboard application: state, keymap, update, and the event loop.

pub mod keymap;
pub mod source;
pub mod state;
pub mod update;
