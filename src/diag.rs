//! Diagnostics: one user-facing problem each, with a stable code from SPEC.md,
//! a place in a file where there is one, and a hint. Rendered like rustc in
//! text, or as the `{"ok": false, "errors": [...]}` document in JSON.

use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::process::ExitCode;

/// Every stable error code okstra emits. The string form is the wire name; the
/// exit status and the one-line description live here too, so the README table,
/// the exit code and the code itself cannot drift apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    IdentityMixedVersions,
    IdentityUnsupportedVersion,
    IdentityBadAttempt,
    IdentityMissingField,
    IdentityNoStateKey,
    IdentityDuplicate,
    MetadataIncomplete,
    MetadataInvalid,
    AuthorityMetadataVersion,
    AuthorityInvocationMismatch,
    AuthorityIdentityMismatch,
    AuthorityPromptMismatch,
    AuthorityRoleExecution,
    AuthorityAssignment,
    AuthorityBinding,
    RulesTranslatorNeedsReservation,
    RulesPhaseOrder,
    RulesReportWriterIsolation,
    RulesWriteConflict,
    RulesReverifyKind,
    RosterEmpty,
    RosterUnknownWorker,
    TranslatorNoCanonicalExecution,
    TranslatorReservationCount,
    TranslatorMetadataPath,
    TranslatorReservationMismatch,
    TranslatorPromptHeaders,
    PlanStagesMalformedConformance,
    PathEscapesRoot,
    PathInvalid,
    PathTooBroad,
    SchemaViolation,
    InputSyntax,
    InputMissing,
    InputUnreadable,
    InputInvalid,
    PlanVersion,
    PlanDigestMismatch,
    PlanStale,
    PlanUnreadable,
    ExecBindingChanged,
    ExecLocked,
    ExecState,
    ExecConfinementUnavailable,
    AuditIncomplete,
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

impl Code {
    pub const ALL: &'static [Code] = &[
        Code::IdentityMixedVersions,
        Code::IdentityUnsupportedVersion,
        Code::IdentityBadAttempt,
        Code::IdentityMissingField,
        Code::IdentityNoStateKey,
        Code::IdentityDuplicate,
        Code::MetadataIncomplete,
        Code::MetadataInvalid,
        Code::AuthorityMetadataVersion,
        Code::AuthorityInvocationMismatch,
        Code::AuthorityIdentityMismatch,
        Code::AuthorityPromptMismatch,
        Code::AuthorityRoleExecution,
        Code::AuthorityAssignment,
        Code::AuthorityBinding,
        Code::RulesTranslatorNeedsReservation,
        Code::RulesPhaseOrder,
        Code::RulesReportWriterIsolation,
        Code::RulesWriteConflict,
        Code::RulesReverifyKind,
        Code::RosterEmpty,
        Code::RosterUnknownWorker,
        Code::TranslatorNoCanonicalExecution,
        Code::TranslatorReservationCount,
        Code::TranslatorMetadataPath,
        Code::TranslatorReservationMismatch,
        Code::TranslatorPromptHeaders,
        Code::PlanStagesMalformedConformance,
        Code::PathEscapesRoot,
        Code::PathInvalid,
        Code::PathTooBroad,
        Code::SchemaViolation,
        Code::InputSyntax,
        Code::InputMissing,
        Code::InputUnreadable,
        Code::InputInvalid,
        Code::PlanVersion,
        Code::PlanDigestMismatch,
        Code::PlanStale,
        Code::PlanUnreadable,
        Code::ExecBindingChanged,
        Code::ExecLocked,
        Code::ExecState,
        Code::ExecConfinementUnavailable,
        Code::AuditIncomplete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::IdentityMixedVersions => "identity/mixed-versions",
            Code::IdentityUnsupportedVersion => "identity/unsupported-version",
            Code::IdentityBadAttempt => "identity/bad-attempt",
            Code::IdentityMissingField => "identity/missing-field",
            Code::IdentityNoStateKey => "identity/no-state-key",
            Code::IdentityDuplicate => "identity/duplicate",
            Code::MetadataIncomplete => "metadata/incomplete",
            Code::MetadataInvalid => "metadata/invalid",
            Code::AuthorityMetadataVersion => "authority/metadata-version",
            Code::AuthorityInvocationMismatch => "authority/invocation-mismatch",
            Code::AuthorityIdentityMismatch => "authority/identity-mismatch",
            Code::AuthorityPromptMismatch => "authority/prompt-mismatch",
            Code::AuthorityRoleExecution => "authority/role-execution",
            Code::AuthorityAssignment => "authority/assignment",
            Code::AuthorityBinding => "authority/binding",
            Code::RulesTranslatorNeedsReservation => "rules/translator-needs-reservation",
            Code::RulesPhaseOrder => "rules/phase-order",
            Code::RulesReportWriterIsolation => "rules/report-writer-isolation",
            Code::RulesWriteConflict => "rules/write-conflict",
            Code::RulesReverifyKind => "rules/reverify-kind",
            Code::RosterEmpty => "roster/empty",
            Code::RosterUnknownWorker => "roster/unknown-worker",
            Code::TranslatorNoCanonicalExecution => "translator/no-canonical-execution",
            Code::TranslatorReservationCount => "translator/reservation-count",
            Code::TranslatorMetadataPath => "translator/metadata-path",
            Code::TranslatorReservationMismatch => "translator/reservation-mismatch",
            Code::TranslatorPromptHeaders => "translator/prompt-headers",
            Code::PlanStagesMalformedConformance => "plan-stages/malformed-conformance",
            Code::PathEscapesRoot => "path/escapes-root",
            Code::PathInvalid => "path/invalid",
            Code::PathTooBroad => "path/too-broad",
            Code::SchemaViolation => "schema/violation",
            Code::InputSyntax => "input/syntax",
            Code::InputMissing => "input/missing",
            Code::InputUnreadable => "input/unreadable",
            Code::InputInvalid => "input/invalid",
            Code::PlanVersion => "plan/version",
            Code::PlanDigestMismatch => "plan/digest-mismatch",
            Code::PlanStale => "plan/stale",
            Code::PlanUnreadable => "plan/unreadable",
            Code::ExecBindingChanged => "exec/binding-changed",
            Code::ExecLocked => "exec/locked",
            Code::ExecState => "exec/state",
            Code::ExecConfinementUnavailable => "exec/confinement-unavailable",
            Code::AuditIncomplete => "audit/incomplete",
        }
    }

    /// One line for the README's error-code table and for `--help` texts.
    pub fn summary(self) -> &'static str {
        match self {
            Code::IdentityMixedVersions => "a worker entry or its metadata mixes v1 and v2 identity fields",
            Code::IdentityUnsupportedVersion => "a schemaVersion / executionIdentityVersion pair okstra does not know",
            Code::IdentityBadAttempt => "a v2 `attempt` that is missing, not an integer, a boolean, or below 1",
            Code::IdentityMissingField => "a required identity field is missing or empty",
            Code::IdentityNoStateKey => "a v2 `assignmentRef` whose last `/` segment is empty",
            Code::IdentityDuplicate => "two jobs share a state key in one stage, or a dispatch id anywhere",
            Code::MetadataIncomplete => "invocation metadata without `digests` or `modelAssignment`",
            Code::MetadataInvalid => "invocation metadata with a malformed field (e.g. `hostModelValue`)",
            Code::AuthorityMetadataVersion => "a v2 job whose metadata is v1 or absent",
            Code::AuthorityInvocationMismatch => "the job's `invocationRef` differs from its metadata",
            Code::AuthorityIdentityMismatch => "participant, role execution, label, duty or attempt differs from the metadata",
            Code::AuthorityPromptMismatch => "`promptPath` and the metadata's `prompt.path` name different files",
            Code::AuthorityRoleExecution => "the role execution or participant is missing or disagrees with the job or its duty",
            Code::AuthorityAssignment => "model execution value or dispatch kind differs from the metadata",
            Code::AuthorityBinding => "the role execution's model binding is missing or does not match the catalog",
            Code::RulesTranslatorNeedsReservation => "a translator given as a job; translators come only from reservations",
            Code::RulesPhaseOrder => "an implementation executor and a verifier in one batch, or verifiers before their executor",
            Code::RulesReportWriterIsolation => "report-writer shares its batch, or is not in the last stage",
            Code::RulesWriteConflict => "two jobs of one batch may write the same path",
            Code::RulesReverifyKind => "a `reverify-r...` dispatch kind without a round number >= 1",
            Code::RosterEmpty => "the manifest's `recommendedWorkers` is empty",
            Code::RosterUnknownWorker => "a `--workers` name that is not in the roster",
            Code::TranslatorNoCanonicalExecution => "no single translator role execution matches the translator assignment",
            Code::TranslatorReservationCount => "not exactly one candidate translator reservation",
            Code::TranslatorMetadataPath => "a reservation whose `metadataPath` is not `<promptPath>.meta.json`",
            Code::TranslatorReservationMismatch => "a reservation that disagrees with its invocation metadata",
            Code::TranslatorPromptHeaders => "a translator prompt without exactly one distinct Result / Worker Result header each",
            Code::PlanStagesMalformedConformance => "a stage's `conformanceTests` declaration does not parse",
            Code::PathEscapesRoot => "a path that resolves outside the project root",
            Code::PathInvalid => "a path holding `\\`, a NUL byte or an empty segment",
            Code::PathTooBroad => "a worktree or auxiliary root that is `/`, an ancestor of the project root, or under /proc, /sys or /dev",
            Code::SchemaViolation => "a value the JSON Schema refuses (unknown key, wrong type, ...)",
            Code::InputSyntax => "a TOML or JSON syntax error",
            Code::InputMissing => "a file the input names does not exist",
            Code::InputUnreadable => "a file exists but cannot be read",
            Code::InputInvalid => "an input whose content is unusable for a reason no more specific code covers",
            Code::PlanVersion => "a plan whose `formatVersion` this okstra does not support",
            Code::PlanDigestMismatch => "a plan edited after `okstra plan` wrote it",
            Code::PlanStale => "an input changed or vanished since the plan was made",
            Code::PlanUnreadable => "a plan file that cannot be read or parsed",
            Code::ExecBindingChanged => "a v2 job's role execution or model binding changed since planning",
            Code::ExecLocked => "another `okstra exec` holds this run",
            Code::ExecState => "a run state file that cannot be read, parsed or written",
            Code::ExecConfinementUnavailable => "a job requires kernel confinement (`confinement = \"required\"`) that this machine cannot apply",
            Code::AuditIncomplete => "the mutation audit could not walk or compare the tree; the jobs it covers settle `error`",
        }
    }

    pub fn exit_status(self) -> ExitStatus {
        match self {
            Code::PlanVersion
            | Code::PlanDigestMismatch
            | Code::PlanStale
            | Code::PlanUnreadable
            | Code::ExecBindingChanged
            | Code::ExecConfinementUnavailable => ExitStatus::PlanRefused,
            Code::ExecLocked => ExitStatus::Locked,
            Code::AuditIncomplete => ExitStatus::JobsFailed,
            Code::ExecState => ExitStatus::InvalidInput,
            _ => ExitStatus::InvalidInput,
        }
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

    #[test]
    fn the_readme_documents_every_code() {
        let readme = include_str!("../README.md");
        for code in Code::ALL {
            let row = format!(
                "| `{}` | {} | {} |",
                code.as_str(),
                code.exit_status().code(),
                code.summary().replace('|', "\\|")
            );
            assert!(readme.contains(&row), "README lacks the row: {row}");
        }
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
