//! The panel's text fields: the tensor size (`s`) and the allocator
//! settings (`S`), what they accept and how keys edit them.

use super::{PanelModal, StressAction, StressCommand, StressPanel, field_keys};
use crate::alloc::{AllocatorConfig, ConfigError};

/// The largest size `s` accepts (bytes): 1 TiB, more than any GPU holds,
/// so that count × size cannot overflow.
pub const MAX_TYPED_SIZE: u64 = 1 << 40;
/// Characters the size field holds.
pub const MAX_SIZE_INPUT: usize = 24;
/// Characters the allocator-settings field holds.
pub const MAX_SETTINGS_INPUT: usize = 200;

/// Parses the size field's text: a size as `--sim-memory` takes it,
/// from 1 byte to [`MAX_TYPED_SIZE`]; the error says what to write.
pub fn parse_typed_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    match crate::alloc::parse_size(text) {
        Some(0) => Err(format!(
            "{} ({} cancels)",
            crate::alloc::sizing::zero_size_message(&crate::quote::cut(text)),
            field_keys().1
        )),
        None => Err(format!(
            "'{}' is not a size: write e.g. 512, 37MiB, 1.5GiB ({} cancels)",
            crate::quote::cut(text),
            field_keys().1
        )),
        Some(n) if n > MAX_TYPED_SIZE => Err(format!(
            "'{}' is more than the largest size, {}",
            crate::quote::cut(text),
            crate::alloc::sizing::display_bytes(MAX_TYPED_SIZE)
        )),
        Some(n) => Ok(n),
    }
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

    /// Types a character into the open field.
    pub fn type_char(&mut self, c: char) {
        if c.is_control() {
            return;
        }
        if let Some((text, max)) = self.open_field()
            && text.chars().count() < max
        {
            text.push(c);
        }
    }

    /// Deletes the open field's last character.
    pub fn backspace(&mut self) {
        if let Some((text, _)) = self.open_field() {
            text.pop();
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
