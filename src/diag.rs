//! Diagnostics: one user-facing problem each, with a stable code from SPEC.md,
//! a place in a file where there is one, and a hint. Rendered like rustc in
//! text, or as the `{"ok": false, "errors": [...]}` document in JSON.

use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Declares [`Code`] from one table: each code once, with its wire name, the
/// exit status it ends a command with, and the one line the README's
/// error-code table shows. Nothing else lists the codes.
macro_rules! codes {
    ($($variant:ident = $wire:literal, $exit:ident, $summary:literal;)*) => {
        /// Every stable error code okstra emits.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Code {
            $($variant,)*
        }

        impl Code {
            pub const ALL: &'static [Code] = &[$(Code::$variant,)*];

            /// The wire name (`identity/bad-attempt`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Code::$variant => $wire,)*
                }
            }

            /// One line for the README's error-code table and for `--help` texts.
            pub fn summary(self) -> &'static str {
                match self {
                    $(Code::$variant => $summary,)*
                }
            }

            pub fn exit_status(self) -> ExitStatus {
                match self {
                    $(Code::$variant => ExitStatus::$exit,)*
                }
            }

            /// The code with this wire name.
            pub fn from_wire(name: &str) -> Option<Code> {
                match name {
                    $($wire => Some(Code::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

codes! {
    IdentityMixedVersions = "identity/mixed-versions", InvalidInput,
        "a worker entry or its metadata mixes v1 and v2 identity fields";
    IdentityUnsupportedVersion = "identity/unsupported-version", InvalidInput,
        "a schemaVersion / executionIdentityVersion pair okstra does not know";
    IdentityBadAttempt = "identity/bad-attempt", InvalidInput,
        "a v2 `attempt` that is missing, not an integer, a boolean, or below 1";
    IdentityMissingField = "identity/missing-field", InvalidInput,
        "a required identity field is missing or empty";
    IdentityNoStateKey = "identity/no-state-key", InvalidInput,
        "a v2 `assignmentRef` whose last `/` segment is empty";
    IdentityDuplicate = "identity/duplicate", InvalidInput,
        "two jobs share a state key in one stage, or a dispatch id anywhere";
    MetadataIncomplete = "metadata/incomplete", InvalidInput,
        "invocation metadata without `digests` or `modelAssignment`";
    MetadataInvalid = "metadata/invalid", InvalidInput,
        "invocation metadata with a malformed field (e.g. `hostModelValue`)";
    AuthorityMetadataVersion = "authority/metadata-version", InvalidInput,
        "a v2 job whose metadata is v1 or absent";
    AuthorityInvocationMismatch = "authority/invocation-mismatch", InvalidInput,
        "the job's `invocationRef` differs from its metadata";
    AuthorityIdentityMismatch = "authority/identity-mismatch", InvalidInput,
        "participant, role execution, label, duty or attempt differs from the metadata";
    AuthorityPromptMismatch = "authority/prompt-mismatch", InvalidInput,
        "`promptPath` and the metadata's `prompt.path` name different files";
    AuthorityRoleExecution = "authority/role-execution", InvalidInput,
        "the role execution or participant is missing or disagrees with the job or its duty";
    AuthorityAssignment = "authority/assignment", InvalidInput,
        "model execution value or dispatch kind differs from the metadata";
    AuthorityBinding = "authority/binding", InvalidInput,
        "the role execution's model binding is missing or does not match the catalog";
    RulesTranslatorNeedsReservation = "rules/translator-needs-reservation", InvalidInput,
        "a translator given as a job; translators come only from reservations";
    RulesPhaseOrder = "rules/phase-order", InvalidInput,
        "an implementation executor and a verifier in one batch, or verifiers before their executor";
    RulesReportWriterIsolation = "rules/report-writer-isolation", InvalidInput,
        "report-writer shares its batch, or is not in the last stage";
    RulesWriteConflict = "rules/write-conflict", InvalidInput,
        "two jobs of one batch may write the same path";
    RulesReverifyKind = "rules/reverify-kind", InvalidInput,
        "a `reverify-r...` dispatch kind without a round number >= 1";
    RosterEmpty = "roster/empty", InvalidInput,
        "the manifest's `recommendedWorkers` is empty";
    RosterUnknownWorker = "roster/unknown-worker", InvalidInput,
        "a `--workers` name that is not in the roster";
    TranslatorNoCanonicalExecution = "translator/no-canonical-execution", InvalidInput,
        "no single translator role execution matches the translator assignment";
    TranslatorReservationCount = "translator/reservation-count", InvalidInput,
        "not exactly one candidate translator reservation";
    TranslatorMetadataPath = "translator/metadata-path", InvalidInput,
        "a reservation whose `metadataPath` is not `<promptPath>.meta.json`";
    TranslatorReservationMismatch = "translator/reservation-mismatch", InvalidInput,
        "a reservation that disagrees with its invocation metadata";
    TranslatorPromptHeaders = "translator/prompt-headers", InvalidInput,
        "a translator prompt without exactly one distinct Result / Worker Result header each";
    PlanStagesMalformedConformance = "plan-stages/malformed-conformance", InvalidInput,
        "a stage's `conformanceTests` declaration does not parse";
    PathEscapesRoot = "path/escapes-root", InvalidInput,
        "a path that resolves outside the project root";
    PathInvalid = "path/invalid", InvalidInput,
        "a path holding `\\`, a NUL byte or an empty segment";
    PathTooBroad = "path/too-broad", InvalidInput,
        "a worktree or auxiliary root that is `/`, an ancestor of the project root, or under /proc, /sys or /dev";
    SchemaViolation = "schema/violation", InvalidInput,
        "a value the JSON Schema refuses (unknown key, wrong type, ...)";
    InputSyntax = "input/syntax", InvalidInput,
        "a TOML or JSON syntax error";
    InputMissing = "input/missing", InvalidInput,
        "a file the input names does not exist";
    InputUnreadable = "input/unreadable", InvalidInput,
        "a file exists but cannot be read";
    InputInvalid = "input/invalid", InvalidInput,
        "an input whose content is unusable for a reason no more specific code covers";
    PlanVersion = "plan/version", PlanRefused,
        "a plan whose `formatVersion` this okstra does not support";
    PlanDigestMismatch = "plan/digest-mismatch", PlanRefused,
        "a plan edited after `okstra plan` wrote it";
    PlanStale = "plan/stale", PlanRefused,
        "an input changed or vanished since the plan was made";
    PlanUnreadable = "plan/unreadable", PlanRefused,
        "a plan file that cannot be read or parsed";
    ExecBindingChanged = "exec/binding-changed", PlanRefused,
        "a v2 job's role execution or model binding changed since planning";
    ExecLocked = "exec/locked", Locked,
        "another `okstra exec` holds this run";
    ExecState = "exec/state", InvalidInput,
        "a run state file that cannot be read, parsed or written";
    ExecConfinementUnavailable = "exec/confinement-unavailable", PlanRefused,
        "a job requires kernel confinement (`confinement = \"required\"`) that this machine cannot apply";
    AuditIncomplete = "audit/incomplete", JobsFailed,
        "the mutation audit could not walk or compare the tree; the jobs it covers settle `error`";
}

/// How a command ends. Mapped to a process exit code in exactly one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    Success,
    JobsFailed,
    InvalidInput,
    PlanRefused,
    Locked,
    Interrupted,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::JobsFailed => 1,
            ExitStatus::InvalidInput => 2,
            ExitStatus::PlanRefused => 3,
            ExitStatus::Locked => 4,
            ExitStatus::Interrupted => 130,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status.code())
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where in a file a diagnostic points. Line and column are 1-based.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    pub file: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The text of the line, for the caret display.
    pub source_line: Option<String>,
    /// How many characters the caret underlines (at least 1).
    pub width: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: String,
    pub location: Option<Location>,
    pub pointer: Option<String>,
    pub worker: Option<String>,
    pub help: Option<String>,
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: message.into(),
            location: None,
            pointer: None,
            worker: None,
            help: None,
        }
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(worker.into());
        self
    }

    pub fn pointer(mut self, pointer: impl Into<String>) -> Self {
        self.pointer = Some(pointer.into());
        self
    }

    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    /// A diagnostic about a whole file, with no line to point at.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.location = Some(Location {
            file: file.into(),
            ..Location::default()
        });
        self
    }

    /// The rustc-like text block.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "error[{}]: {}", self.code, self.message);
        let gutter = self
            .location
            .as_ref()
            .and_then(|l| l.line)
            .map(|n| n.to_string().len())
            .unwrap_or(1);
        let pad = " ".repeat(gutter);
        if let Some(loc) = &self.location {
            match (loc.line, loc.column) {
                (Some(line), Some(col)) => {
                    let _ = writeln!(out, "{pad}--> {}:{line}:{col}", loc.file);
                }
                (Some(line), None) => {
                    let _ = writeln!(out, "{pad}--> {}:{line}", loc.file);
                }
                _ => {
                    let _ = writeln!(out, "{pad}--> {}", loc.file);
                }
            }
            if let (Some(line), Some(text)) = (loc.line, &loc.source_line) {
                let col = loc.column.unwrap_or(1);
                let shown = text.trim_end();
                let _ = writeln!(out, "{pad} |");
                let _ = writeln!(out, "{line} | {shown}");
                let lead: String = shown
                    .chars()
                    .take(col.saturating_sub(1))
                    .map(|c| if c == '\t' { '\t' } else { ' ' })
                    .collect();
                let _ = writeln!(out, "{pad} | {lead}{}", "^".repeat(loc.width.max(1)));
            }
        }
        if let Some(worker) = &self.worker {
            let _ = writeln!(out, "{pad} = worker: {worker}");
        }
        if let Some(help) = &self.help {
            let _ = writeln!(out, "{pad} = help: {help}");
        }
        out
    }

    pub fn to_json(&self) -> Value {
        let mut obj = serde_json::Map::new();
        obj.insert("code".into(), json!(self.code.as_str()));
        obj.insert("message".into(), json!(self.message));
        if let Some(loc) = &self.location {
            obj.insert("file".into(), json!(loc.file));
            if let Some(line) = loc.line {
                obj.insert("line".into(), json!(line));
            }
            if let Some(col) = loc.column {
                obj.insert("column".into(), json!(col));
            }
        }
        if let Some(p) = &self.pointer {
            obj.insert("pointer".into(), json!(p));
        }
        if let Some(w) = &self.worker {
            obj.insert("worker".into(), json!(w));
        }
        if let Some(h) = &self.help {
            obj.insert("help".into(), json!(h));
        }
        Value::Object(obj)
    }
}

/// Everything that went wrong, in the order found. Exit status is that of the
/// most severe code (a refused plan outranks invalid input).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(d);
    }
    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        self.0.extend(ds);
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter()
    }

    pub fn exit_status(&self) -> ExitStatus {
        let rank = |s: ExitStatus| match s {
            ExitStatus::Locked => 3,
            ExitStatus::PlanRefused => 2,
            ExitStatus::InvalidInput => 1,
            _ => 0,
        };
        self.0
            .iter()
            .map(|d| d.code.exit_status())
            .max_by_key(|s| rank(*s))
            .unwrap_or(ExitStatus::InvalidInput)
    }

    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for d in &self.0 {
            out.push_str(&d.render_text());
            out.push('\n');
        }
        let n = self.0.len();
        let _ = writeln!(
            out,
            "error: {n} problem{} found",
            if n == 1 { "" } else { "s" }
        );
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "ok": false,
            "errors": self.0.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
        })
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

impl From<Vec<Diagnostic>> for Diagnostics {
    fn from(ds: Vec<Diagnostic>) -> Self {
        Diagnostics(ds)
    }
}

/// Output format shared by every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    #[default]
    Text,
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_wire_name_with_a_family() {
        let mut seen = std::collections::HashSet::new();
        for code in Code::ALL {
            let name = code.as_str();
            assert!(name.contains('/'), "{name} has no family");
            assert!(seen.insert(name), "{name} twice");
            assert!(!code.summary().is_empty());
        }
    }

    /// The README's error-code table, as (code, exit, meaning) rows.
    fn readme_code_rows() -> Vec<(String, String, String)> {
        let readme = include_str!("../README.md");
        let mut lines = readme
            .lines()
            .skip_while(|l| l.trim() != "| code | exit | meaning |");
        assert!(lines.next().is_some(), "README has no error-code table");
        assert!(lines.next().is_some_and(|l| l.starts_with("| ---")));
        lines
            .take_while(|l| l.starts_with('|'))
            .map(|row| {
                let inner = row
                    .strip_prefix("| `")
                    .and_then(|r| r.strip_suffix(" |"))
                    .unwrap_or_else(|| panic!("malformed README row: {row}"));
                let (code, rest) = inner
                    .split_once("` | ")
                    .unwrap_or_else(|| panic!("malformed README row: {row}"));
                let (exit, meaning) = rest
                    .split_once(" | ")
                    .unwrap_or_else(|| panic!("malformed README row: {row}"));
                (code.to_string(), exit.to_string(), meaning.to_string())
            })
            .collect()
    }

    #[test]
    fn the_readme_table_is_exactly_the_codes() {
        let rows = readme_code_rows();
        let mut seen = std::collections::HashSet::new();
        for (name, exit, meaning) in &rows {
            let code = Code::from_wire(name)
                .unwrap_or_else(|| panic!("README names `{name}`, which is not a code"));
            assert!(seen.insert(code), "README lists `{name}` twice");
            assert_eq!(
                exit,
                &code.exit_status().code().to_string(),
                "exit code of `{name}`"
            );
            assert_eq!(
                meaning,
                &code.summary().replace('|', "\\|"),
                "meaning of `{name}`"
            );
        }
        let missing: Vec<&str> = Code::ALL
            .iter()
            .filter(|c| !seen.contains(*c))
            .map(|c| c.as_str())
            .collect();
        assert!(missing.is_empty(), "README lacks rows for {missing:?}");
        assert_eq!(rows.len(), Code::ALL.len());
    }

    #[test]
    fn wire_names_round_trip() {
        for &code in Code::ALL {
            assert_eq!(Code::from_wire(code.as_str()), Some(code));
        }
        assert_eq!(Code::from_wire("identity/nope"), None);
    }

    #[test]
    fn exit_status_prefers_refusal_over_invalid_input() {
        let ds = Diagnostics(vec![
            Diagnostic::new(Code::SchemaViolation, "x"),
            Diagnostic::new(Code::PlanStale, "y"),
        ]);
        assert_eq!(ds.exit_status(), ExitStatus::PlanRefused);
    }

    #[test]
    fn text_rendering_points_at_the_column() {
        let d = Diagnostic::new(Code::IdentityBadAttempt, "attempt must be >= 1")
            .at(Location {
                file: "spec.toml".into(),
                line: Some(3),
                column: Some(11),
                source_line: Some("attempt = 0".into()),
                width: 1,
            })
            .help("use 1 for a first attempt");
        let text = d.render_text();
        assert!(text.contains("error[identity/bad-attempt]: attempt must be >= 1"));
        assert!(text.contains(" --> spec.toml:3:11"));
        assert!(text.contains("3 | attempt = 0"));
        assert!(text.contains("  |           ^"));
    }
}
