//! The dashboard application: state, keymap, update, and the event loop.

pub mod keymap;
pub mod state;
