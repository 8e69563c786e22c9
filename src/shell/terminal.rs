//! Leaving the terminal as vramtop found it: the one way out of the
//! alternate screen that the dashboard, the viewer and their panic hooks
//! share.
//!
//! The alternate screen is cleared before it is left. A terminal that
//! reflows its screens on a resize (tmux) brings the alternate screen
//! back to the size it was entered at before restoring the normal one;
//! grown in both directions while vramtop ran, its full-width rows were
//! rewrapped into the normal screen's history and pulled back into view
//! above the shell's prompt (6 rows of panes after 80×24 → 100×30).
//! Blank rows have nothing to rewrap.

use std::io::Write;

use crossterm::event::DisableMouseCapture;
use crossterm::terminal::{Clear, ClearType};

/// Writes what goes before leaving the alternate screen: mouse reporting
/// off (ratatui's restore leaves it on), then the screen cleared.
pub fn before_leaving(out: &mut impl Write) -> std::io::Result<()> {
    crossterm::execute!(out, DisableMouseCapture, Clear(ClearType::All))
}

/// Restores the terminal: [`before_leaving`], then ratatui's restore
/// (raw mode off, the alternate screen left, the cursor shown). Errors
/// are ignored: there is nothing better to do with the terminal on the
/// way out.
pub fn restore() {
    let _ = before_leaving(&mut std::io::stdout());
    ratatui::restore();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alternate_screen_is_cleared_and_the_mouse_released_before_leaving() {
        let mut out = Vec::new();
        before_leaving(&mut out).expect("writes to a Vec");
        let text = String::from_utf8_lossy(&out);
        // Erase in display, all (ED 2): blank rows cannot be rewrapped
        // into the normal screen.
        assert!(text.contains("\x1b[2J"), "{text:?}");
        // SGR mouse reporting off.
        assert!(text.contains("\x1b[?1006l"), "{text:?}");
        // The alternate screen itself is left by ratatui's restore, after
        // this: nothing here leaves it early.
        assert!(!text.contains("\x1b[?1049l"), "{text:?}");
    }
}
