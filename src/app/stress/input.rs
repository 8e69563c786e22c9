//! The panel's text fields: the tensor size (`s`) and the allocator
//! settings (`S`), what they accept and how keys edit them.

use super::{PanelModal, StressAction, StressCommand, StressPanel, field_keys};
use crate::alloc::{AllocatorConfig, ConfigError};
use crate::app::keymap::{TypingKey, TypingMode};

/// The largest size `s` accepts (bytes): 1 TiB, more than any GPU holds,
/// so that count × size cannot overflow.
pub const MAX_TYPED_SIZE: u64 = 1 << 40;
/// Characters the size field holds.
pub const MAX_SIZE_INPUT: usize = 24;
/// Characters the allocator-settings field holds.
pub const MAX_SETTINGS_INPUT: usize = 200;

/// Parses the size field's text: a size as `--sim-memory` takes it (a
/// bare number is bytes), from 1 byte to [`MAX_TYPED_SIZE`]; the error
/// says what to write, in the command line's words.
pub fn parse_typed_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    crate::alloc::sizing::typed_size(text, MAX_TYPED_SIZE).map_err(|why| {
        format!(
            "{} ({} cancels)",
            why.message(
                &crate::quote::cut(text),
                &crate::alloc::sizing::display_bytes(MAX_TYPED_SIZE)
            ),
            field_keys().1
        )
    })
}

/// What a full field says of a character it did not take: the settings
/// field (`settings`) or the size field, and the `max` characters it holds.
pub fn full_field_message(settings: bool, max: usize) -> String {
    let field = if settings { "settings" } else { "size" };
    let delete = TypingMode::StressField
        .key_name(TypingKey::Delete)
        .unwrap_or_default();
    format!("the {field} field holds {max} characters: the rest is not typed ({delete} deletes)")
}

/// Validates a `PYTORCH_CUDA_ALLOC_CONF` string as PyTorch would, and as
/// one the model can run ([`AllocatorConfig::parse_modelled`]): the
/// trimmed string, or PyTorch-style validation text.
pub fn parse_settings(text: &str) -> Result<String, String> {
    let text = text.trim();
    let cancel = field_keys().1;
    match AllocatorConfig::parse_modelled(text) {
        Ok(_) => Ok(text.to_string()),
        Err(ConfigError::NotModelled(why)) => Err(format!("{why} ({cancel} cancels)")),
        Err(e) => Err(format!(
            "invalid PYTORCH_CUDA_ALLOC_CONF: {e} ({cancel} cancels)"
        )),
    }
}

impl StressPanel {
    /// The size field's text while it is open (`s`).
    pub fn size_text(&self) -> Option<&str> {
        match &self.modal {
            PanelModal::SizeField(text) => Some(text),
            _ => None,
        }
    }

    /// The allocator-settings field's text while it is open (`S`).
    pub fn settings_text(&self) -> Option<&str> {
        match &self.modal {
            PanelModal::SettingsField(text) => Some(text),
            _ => None,
        }
    }

    /// Whether the size field is open (keys then type into it).
    pub fn editing_size(&self) -> bool {
        matches!(self.modal, PanelModal::SizeField(_))
    }

    /// Whether the allocator-settings field is open.
    pub fn editing_settings(&self) -> bool {
        matches!(self.modal, PanelModal::SettingsField(_))
    }

    /// Whether a text field (size or settings) takes the keys.
    pub fn editing(&self) -> bool {
        self.editing_size() || self.editing_settings()
    }

    /// The open field's text and how many characters it holds.
    fn open_field(&mut self) -> Option<(&mut String, usize)> {
        match &mut self.modal {
            PanelModal::SizeField(text) => Some((text, MAX_SIZE_INPUT)),
            PanelModal::SettingsField(text) => Some((text, MAX_SETTINGS_INPUT)),
            PanelModal::Keys | PanelModal::ScenarioList(_) => None,
        }
    }

    /// Types a character into the open field. A full field refuses it
    /// aloud ([`full_field_message`]): dropped silently, the rest of a
    /// long size or settings string went missing unseen.
    pub fn type_char(&mut self, c: char) {
        if c.is_control() {
            return;
        }
        let settings = self.editing_settings();
        let Some((text, max)) = self.open_field() else {
            return;
        };
        if text.chars().count() < max {
            text.push(c);
        } else {
            self.say(full_field_message(settings, max));
        }
    }

    /// Deletes the open field's last character; the notice that the field
    /// is full goes with it.
    pub fn backspace(&mut self) {
        let settings = self.editing_settings();
        if let Some((text, max)) = self.open_field() {
            text.pop();
            if self.message.as_deref() == Some(full_field_message(settings, max).as_str()) {
                self.message = None;
            }
        }
    }

    /// Deletes everything typed into the open field (readline's Ctrl-U),
    /// and the notice that it was full with it.
    pub fn clear_field(&mut self) {
        let settings = self.editing_settings();
        if let Some((text, max)) = self.open_field() {
            text.clear();
            if self.message.as_deref() == Some(full_field_message(settings, max).as_str()) {
                self.message = None;
            }
        }
    }

    /// Closes whichever field is open without changing anything.
    pub fn cancel_input(&mut self) {
        if self.editing_settings() {
            self.modal = PanelModal::Keys;
            self.say("allocator settings unchanged");
        } else {
            self.cancel_size_input();
        }
    }

    /// Enter in whichever field is open.
    pub fn submit_input(&mut self) -> Vec<StressCommand> {
        if self.editing_settings() {
            self.submit_settings()
        } else {
            self.submit_size()
        }
    }

    /// Enter in the settings field: text `AllocatorConfig::parse` accepts
    /// closes it and replaces the allocator (after the device's answer when
    /// keys are queued); anything else keeps it open with PyTorch's
    /// validation message.
    pub fn submit_settings(&mut self) -> Vec<StressCommand> {
        let Some(text) = self.settings_text() else {
            return Vec::new();
        };
        match parse_settings(text) {
            Ok(settings) => {
                self.modal = PanelModal::Keys;
                self.pending_settings = Some(settings);
                self.apply(StressAction::Reconfigure)
            }
            Err(why) => {
                self.say(why);
                Vec::new()
            }
        }
    }

    /// Closes the size field without changing the size.
    pub fn cancel_size_input(&mut self) {
        if self.editing_size() {
            self.modal = PanelModal::Keys;
            self.say("size unchanged");
        }
    }

    /// Enter in the size field: a valid size closes it and is set (after
    /// the device's answer when keys are queued); invalid text keeps it
    /// open with a message saying why.
    pub fn submit_size(&mut self) -> Vec<StressCommand> {
        let Some(text) = self.size_text() else {
            return Vec::new();
        };
        match parse_typed_size(text) {
            Ok(size) => {
                self.modal = PanelModal::Keys;
                self.apply(StressAction::SetSize(size))
            }
            Err(why) => {
                self.say(why);
                Vec::new()
            }
        }
    }
}
