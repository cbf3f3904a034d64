//! TEMPORARY stub (replaced by the h-schema branch).
use crate::diag::{Code, Diagnostic, Location};
use serde_json::Value;
use std::path::Path;
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}
impl Format {
    pub fn for_path(p: &Path) -> Format {
        if p.extension().is_some_and(|e| e == "json") {
            Format::Json
        } else {
            Format::Toml
        }
    }
}
pub struct SourceFile {
    pub display: String,
    pub text: String,
}
impl SourceFile {
    pub fn load(
        display: &str,
        path: &Path,
        format: Format,
    ) -> Result<(Value, SourceFile), Diagnostic> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Diagnostic::new(Code::InputMissing, e.to_string()).in_file(display))?;
        Self::parse(display, text, format)
    }
    pub fn parse(
        display: &str,
        text: String,
        format: Format,
    ) -> Result<(Value, SourceFile), Diagnostic> {
        let v: Value = match format {
            Format::Json => serde_json::from_str(&text)
                .map_err(|e| Diagnostic::new(Code::InputSyntax, e.to_string()).in_file(display))?,
            Format::Toml => {
                let t: toml::Table = toml::from_str(&text).map_err(|e| {
                    Diagnostic::new(Code::InputSyntax, e.to_string()).in_file(display)
                })?;
                serde_json::to_value(t).unwrap()
            }
        };
        Ok((
            v,
            SourceFile {
                display: display.into(),
                text,
            },
        ))
    }
    pub fn locate(&self, _pointer: &str) -> Location {
        Location {
            file: self.display.clone(),
            ..Default::default()
        }
    }
    pub fn locate_key(&self, pointer: &str) -> Location {
        self.locate(pointer)
    }
}
