//! What `okstra doctor` was pointed at: a plan `okstra plan` wrote, or a
//! job spec, told apart by content (and a `.toml` name), never by a
//! guess that could hide a mistake.

use okstra::diag::{Code, Diagnostic, Diagnostics};
use okstra::plan::Plan;
use okstra::source::{Format, SourceFile};
use serde::de::IgnoredAny;
use serde::Deserialize;
use std::path::Path;

/// The kind of file doctor was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Plan,
    Spec,
}

impl Kind {
    pub fn word(self) -> &'static str {
        match self {
            Kind::Plan => "plan",
            Kind::Spec => "spec",
        }
    }
}

/// The top-level keys that tell a plan from a spec, read without keeping
/// the rest (a plan may be tens of megabytes).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Keys {
    format_version: Option<IgnoredAny>,
    digest: Option<IgnoredAny>,
    workers: Option<IgnoredAny>,
    stages: Option<IgnoredAny>,
}

impl Keys {
    fn kind(&self) -> Option<Kind> {
        if self.format_version.is_some() && self.digest.is_some() {
            Some(Kind::Plan)
        } else if self.workers.is_some() || self.stages.is_some() {
            Some(Kind::Spec)
        } else {
            None
        }
    }
}

const NEITHER_HELP: &str = "give doctor a plan written by `okstra plan --out PLAN`, or a job spec (TOML or JSON with `workers` or `stages`)";

/// Whether `path` holds a plan or a job spec.
pub fn classify(path: &Path) -> Result<Kind, Diagnostic> {
    let shown = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(
                Diagnostic::new(Code::InputMissing, format!("`{shown}` does not exist"))
                    .in_file(shown)
                    .help("check the path"),
            )
        }
        Err(e) => {
            return Err(Diagnostic::new(
                Code::InputUnreadable,
                format!("cannot read `{shown}`: {e}"),
            )
            .in_file(shown)
            .help("check that the file is a readable regular file"))
        }
    };
    let neither = |why: &str| {
        Diagnostic::new(
            Code::InputInvalid,
            format!("`{shown}` is neither a plan nor a job spec: {why}"),
        )
        .in_file(shown.clone())
        .help(NEITHER_HELP)
    };
    let named_toml = Format::for_path(path) == Format::Toml
        && path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
    if named_toml {
        return Ok(Kind::Spec);
    }
    let named_json = Format::for_path(path) == Format::Json;
    match serde_json::from_slice::<Keys>(&bytes) {
        Ok(keys) => keys.kind().ok_or_else(|| {
            neither("a JSON object with no `formatVersion` and `digest` (a plan's) and no `workers` or `stages` (a spec's)")
        }),
        Err(_) if named_json => {
            // Where the syntax breaks, as `okstra validate` shows it.
            let text = String::from_utf8_lossy(&bytes).into_owned();
            match SourceFile::parse(&shown, text, Format::Json) {
                Err(d) => Err(d),
                Ok(_) => Err(neither("a JSON document that is not an object")),
            }
        }
        Err(_) => {
            let text = String::from_utf8_lossy(&bytes);
            match text.parse::<toml::Table>() {
                Ok(t) if t.contains_key("workers") || t.contains_key("stages") => Ok(Kind::Spec),
                Ok(_) => Err(neither(
                    "a TOML document with no `workers` or `stages` table",
                )),
                Err(_) => Err(neither("it parses as neither JSON nor TOML")),
            }
        }
    }
}

/// The plan doctor checks: read as exec reads it, or compiled from a spec
/// in memory, as `okstra plan` compiles it, writing nothing.
pub fn plan_of(
    path: &Path,
    kind: Kind,
    manifest: Option<&Path>,
    project_root: &Path,
) -> Result<Plan, Diagnostics> {
    match kind {
        Kind::Plan => okstra::exec::load::load(path)
            .map(|l| l.plan)
            .map_err(Diagnostics::from),
        Kind::Spec => {
            let Some(manifest) = manifest else {
                let shown = path.display().to_string();
                return Err(Diagnostic::new(
                    Code::InputInvalid,
                    format!("`{shown}` is a job spec, and doctor plans a spec against its run manifest: none was given"),
                )
                .in_file(shown.clone())
                .help(format!("pass the run manifest: okstra doctor {shown} --manifest run-manifest.json"))
                .into());
            };
            okstra::compile::compile(&okstra::compile::Request {
                project_root: project_root.to_path_buf(),
                manifest: manifest.to_path_buf(),
                spec: Some(path.to_path_buf()),
                workers: Vec::new(),
                created_at: okstra::clock::plan_created_at(),
                records: &okstra::state::team_state::RUN_RECORDS,
                plan_out: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(name: &str, text: &str) -> Result<Kind, Diagnostic> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        classify(&p)
    }

    #[test]
    fn plans_and_specs_are_told_by_content() {
        assert_eq!(kind_of("a.toml", "garbage ["), Ok(Kind::Spec));
        assert_eq!(
            kind_of(
                "p.json",
                r#"{"formatVersion": 2, "digest": "x", "stages": []}"#
            ),
            Ok(Kind::Plan)
        );
        assert_eq!(kind_of("s.json", r#"{"workers": []}"#), Ok(Kind::Spec));
        assert_eq!(
            kind_of("plan", r#"{"formatVersion": 2, "digest": "x"}"#),
            Ok(Kind::Plan)
        );
        assert_eq!(
            kind_of("spec", "[[stages]]\nname = \"a\"\n"),
            Ok(Kind::Spec)
        );
    }

    #[test]
    fn neither_is_said_with_its_code_and_file() {
        for (name, text) in [
            ("m.json", r#"{"taskKey": "t"}"#),
            ("m.json", "[1]"),
            ("x.txt", "taskKey = 1\n"),
            ("x.txt", "<xml/>"),
        ] {
            let d = kind_of(name, text).unwrap_err();
            assert_eq!(d.code, Code::InputInvalid, "{name}: {}", d.message);
            assert!(
                d.message.contains("neither a plan nor a job spec"),
                "{}",
                d.message
            );
            assert!(d.help.is_some());
        }
        let d = kind_of("broken.json", "{\n  \"workers\": [,]\n}").unwrap_err();
        assert_eq!(d.code, Code::InputSyntax);
        assert_eq!(d.location.as_ref().and_then(|l| l.line()), Some(2));
        let dir = tempfile::tempdir().unwrap();
        let d = classify(&dir.path().join("absent.toml")).unwrap_err();
        assert_eq!(d.code, Code::InputMissing);
    }
}
