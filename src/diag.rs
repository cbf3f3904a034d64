//! Diagnostics: one user-facing problem each, with a stable code (listed in
//! docs/errors.md#error-codes), a place in a file where there is one, and a
//! hint. Rendered like rustc in text (through `annotate-snippets`, see
//! `render`), or as the `{"ok": false, "errors": [...]}` document in JSON.

mod location;
mod render;

pub use location::{Location, SourceText};
pub use render::WINDOW;

use serde::Serialize;
use serde_json::{json, Value};
use std::borrow::Cow;
use std::process::ExitCode;

/// Declares [`Code`] from one table: each code once, with its wire name, the
/// exit status it ends a command with, and the one line the error-code
/// table of docs/errors.md shows. Nothing else lists the codes.
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

            /// One line for the error-code table (docs/errors.md) and for `--help` texts.
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
    NetworkBadRule = "network/bad-rule", InvalidInput,
        "a `network.allow` entry that is not a host, `*.domain`, `host:port` or an IP address";
    SchemaViolation = "schema/violation", InvalidInput,
        "a value the JSON Schema refuses (unknown key, wrong type, ...)";
    InputSyntax = "input/syntax", InvalidInput,
        "a TOML or JSON syntax error";
    InputMissing = "input/missing", InvalidInput,
        "a file the input names does not exist";
    InputUnreadable = "input/unreadable", InvalidInput,
        "a file exists but cannot be read";
    InputExists = "input/exists", InvalidInput,
        "a file `okstra init` would write exists already; nothing was written";
    InputInvalid = "input/invalid", InvalidInput,
        "an input whose content is unusable for a reason no more specific code covers";
    OutputUnwritable = "output/unwritable", InvalidInput,
        "an output okstra was told to write (`--out`, `--junit`) that cannot be written";
    PlanVersion = "plan/version", PlanRefused,
        "a plan whose `formatVersion` this okstra does not support";
    PlanDigestMismatch = "plan/digest-mismatch", PlanRefused,
        "a plan edited after `okstra plan` wrote it";
    PlanStale = "plan/stale", PlanRefused,
        "an input changed or vanished since the plan was made";
    PlanUnreadable = "plan/unreadable", PlanRefused,
        "a plan file that cannot be read or parsed";
    PlanDirtyTree = "plan/dirty-tree", PlanRefused,
        "a `worktree = \"git\"` job based on `HEAD` while the checkout has changes `HEAD` does not hold";
    PlanWorktreeBase = "plan/worktree-base", PlanRefused,
        "a `worktree = \"git\"` job without a base: no git, no repository or commit, or a `worktreeBase` naming no commit";
    ExecBindingChanged = "exec/binding-changed", PlanRefused,
        "a v2 job's role execution or model binding changed since planning";
    ExecLocked = "exec/locked", Locked,
        "another `okstra exec` holds this run";
    ExecState = "exec/state", InvalidInput,
        "a run state file that cannot be read, parsed or written";
    ExecConfinementUnavailable = "exec/confinement-unavailable", PlanRefused,
        "a job requires kernel confinement (`confinement = \"required\"`) that this machine cannot apply";
    AuditIncomplete = "audit/incomplete", JobsFailed,
        "the mutation audit could not walk or compare the tree, or a stage's recorded baseline is missing or changed; the jobs it covers settle `error`";
    ExecCleanupIncomplete = "exec/cleanup-incomplete", JobsFailed,
        "an attempt's private directory could not be removed once it settled, or its CLI's private state could not be finished (kept)";
    ExecWorktree = "exec/worktree", JobsFailed,
        "a job's git worktree could not be made, committed, kept or removed, or holds work of another run; the job settles `error`";
    ExecBudget = "exec/budget", JobsFailed,
        "the run's spend crossed its `[budget]`: no new attempt was started; running ones finished, or were stopped with `onBudget = \"stop\"`";
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
    pub const ALL: [ExitStatus; 6] = [
        ExitStatus::Success,
        ExitStatus::JobsFailed,
        ExitStatus::InvalidInput,
        ExitStatus::PlanRefused,
        ExitStatus::Locked,
        ExitStatus::Interrupted,
    ];

    /// What the exit code says, for the man pages' EXIT STATUS
    /// (docs/cli.md#commands).
    pub fn meaning(self) -> &'static str {
        match self {
            ExitStatus::Success => "success: the command did what it was asked; exec and run: every job completed",
            ExitStatus::JobsFailed => "exec (or run) ran, and some job did not complete (see the summary, `okstra status`, and the error log); the audit could not finish",
            ExitStatus::InvalidInput => "invalid input or usage: nothing was planned or run (every `identity/`, `authority/`, `metadata/`, `rules/`, `roster/`, `translator/`, `path/`, `schema/`, `input/` and `output/` code, and `exec/state`)",
            ExitStatus::PlanRefused => "the plan was refused: edited, stale, of another format, or its bindings changed (`plan/...`, `exec/binding-changed`, `exec/confinement-unavailable`); nothing was run",
            ExitStatus::Locked => "another `okstra exec` holds the run (`exec/locked`); nothing was run",
            ExitStatus::Interrupted => "interrupted (Ctrl-C or SIGTERM): every worker was stopped and its attempt recorded; the same `okstra exec` continues the run",
        }
    }

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

/// The worker wrapper's own exit codes (docs/providers.md#the-worker-wrapper),
/// beside its child's, which it passes through: a 1 or a 2 may be the
/// child's. They are recorded as dispatch exit codes, so each value is wire.
/// What a process killed by a signal exits with is the shell's 128 + signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrapperExit {
    /// 1: the wrapper stopped its CLI at the first retry of a request the
    /// API refused for its credentials (the code claude and codex exit with
    /// when they give up on such a request themselves), or lost track of
    /// its child.
    Failed,
    /// 2, as clap's: unusable arguments; nothing was started.
    Usage,
    /// 71 (sysexits' EX_OSERR): the confinement asked for could not be
    /// applied; the child was not started.
    ConfinementFailed,
    /// 74 (sysexits' EX_IOERR): the child succeeded but the status sidecar
    /// could not record it, or `running` could not be recorded before the
    /// child started.
    StatusWriteFailed,
    /// 75 (sysexits' EX_TEMPFAIL): a gated wrapper read end-of-file where
    /// exec's go should have been; it ran nothing and wrote nothing, and
    /// the attempt may be started again.
    NeverReleased,
    /// 86: the provider served a model other than the one selected
    /// (docs/providers.md#the-served-model); never settled `completed`. 86 is
    /// outside everything else a worker may exit with: the agent CLIs' own
    /// codes (1, 2, gemini's 41–53), the shell's 124–127 and 128 + signal.
    ServedModelMismatch,
    /// 87: the attempt's usage crossed its budget (`--max-cost-usd`,
    /// `--max-tokens`; docs/exec.md#budgets): the child was stopped, or had
    /// ended over it where its CLI reports usage only at its end; never
    /// settled `completed`, never retried. Beside 86, outside the same codes.
    BudgetExceeded,
    /// 124, as GNU `timeout`: stopped at its time limit.
    Timeout,
    /// 126, the shell's: the program could not be executed.
    NotExecutable,
    /// 127, the shell's: the program was not found.
    NotFound,
    /// 128 + the signal that ended it, the shell's convention.
    Signal(i32),
}

impl WrapperExit {
    /// Ended by SIGKILL: 137.
    pub const KILLED: WrapperExit = WrapperExit::Signal(9);
    /// Ended by SIGTERM: 143 (a wrapper stopped at its gate, say).
    pub const TERMINATED: WrapperExit = WrapperExit::Signal(15);

    pub const fn code(self) -> i32 {
        match self {
            WrapperExit::Failed => 1,
            WrapperExit::Usage => 2,
            WrapperExit::ConfinementFailed => 71,
            WrapperExit::StatusWriteFailed => 74,
            WrapperExit::NeverReleased => 75,
            WrapperExit::ServedModelMismatch => 86,
            WrapperExit::BudgetExceeded => 87,
            WrapperExit::Timeout => 124,
            WrapperExit::NotExecutable => 126,
            WrapperExit::NotFound => 127,
            WrapperExit::Signal(signal) => 128 + signal,
        }
    }

    /// What `code` means by this protocol, were it the wrapper's own;
    /// `None` for a code it never exits with of its own (a child's).
    pub const fn from_code(code: i32) -> Option<WrapperExit> {
        Some(match code {
            1 => WrapperExit::Failed,
            2 => WrapperExit::Usage,
            71 => WrapperExit::ConfinementFailed,
            74 => WrapperExit::StatusWriteFailed,
            75 => WrapperExit::NeverReleased,
            86 => WrapperExit::ServedModelMismatch,
            87 => WrapperExit::BudgetExceeded,
            124 => WrapperExit::Timeout,
            126 => WrapperExit::NotExecutable,
            127 => WrapperExit::NotFound,
            129..=192 => WrapperExit::Signal(code - 128),
            _ => return None,
        })
    }

    /// Whether `code` is this exit (`code == self.code()`).
    pub const fn is(self, code: i32) -> bool {
        code == self.code()
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A secondary place a diagnostic involves, drawn with `-` under it and
/// its text beside (the other job of a write conflict, say).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    pub location: Location,
    pub text: Box<str>,
}

/// A text held as long as its diagnostic: a copy of exactly its length.
/// A formatted `String` carries up to its length again in spare room, and
/// shrinking it in place is not always done (mimalloc keeps a block that
/// would shrink by less than half).
fn exact(text: String) -> Box<str> {
    if text.len() == text.capacity() {
        text.into_boxed_str()
    } else {
        Box::from(text.as_str())
    }
}

/// Texts are boxed `str`s of their exact length, not `String`s, and places
/// are spans of shared text (see [`Location`]): a refused plan may hold a
/// hundred thousand diagnostics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub code: Code,
    pub message: Box<str>,
    /// The primary place, drawn with `^`.
    pub location: Option<Location>,
    pub pointer: Option<Box<str>>,
    pub worker: Option<Box<str>>,
    /// Mostly a fixed sentence: borrowed, not copied into every diagnostic.
    pub help: Option<Cow<'static, str>>,
    /// Other places, in the text form only.
    pub labels: Box<[Label]>,
}

impl Diagnostic {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Diagnostic {
            code,
            message: exact(message.into()),
            location: None,
            pointer: None,
            worker: None,
            help: None,
            labels: Box::default(),
        }
    }

    pub fn help(mut self, help: impl Into<Cow<'static, str>>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn worker(mut self, worker: impl Into<String>) -> Self {
        self.worker = Some(exact(worker.into()));
        self
    }

    pub fn pointer(mut self, pointer: impl Into<String>) -> Self {
        self.pointer = Some(exact(pointer.into()));
        self
    }

    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    /// A diagnostic about a whole file, with no line to point at.
    pub fn in_file(mut self, file: impl Into<String>) -> Self {
        self.location = Some(Location::file(file));
        self
    }

    /// Adds a secondary place, in this file or another.
    pub fn label(mut self, location: Location, text: impl Into<String>) -> Self {
        let mut labels = std::mem::take(&mut self.labels).into_vec();
        labels.push(Label {
            location,
            text: exact(text.into()),
        });
        self.labels = labels.into();
        self
    }

    /// The rustc-like text block, without colour.
    pub fn render_text(&self) -> String {
        render::render(self, false)
    }

    /// The text block, with ANSI colour when `color`.
    pub fn render_styled(&self, color: bool) -> String {
        render::render(self, color)
    }

    pub fn to_json(&self) -> Value {
        let mut obj = serde_json::Map::new();
        obj.insert("code".into(), json!(self.code.as_str()));
        obj.insert("message".into(), json!(self.message));
        if let Some(loc) = &self.location {
            obj.insert("file".into(), json!(loc.file_name()));
            if let Some(line) = loc.line() {
                obj.insert("line".into(), json!(line));
            }
            if let Some(col) = loc.column() {
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
///
/// Each problem is boxed, so the list grows by pointers: a list of a
/// hundred thousand problems once spent a third of a refused plan's peak
/// memory on the moment its vector doubled, old and new copies together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[expect(clippy::vec_box, reason = "boxed on purpose, see above")]
pub struct Diagnostics(Vec<Box<Diagnostic>>);

impl Diagnostics {
    pub fn push(&mut self, d: Diagnostic) {
        self.0.push(Box::new(d));
    }
    /// [`Self::push`] of a problem boxed already (held, then reported).
    pub(crate) fn push_boxed(&mut self, d: Box<Diagnostic>) {
        self.0.push(d);
    }
    pub fn extend(&mut self, ds: impl IntoIterator<Item = Diagnostic>) {
        self.0.extend(ds.into_iter().map(Box::new));
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn get(&self, i: usize) -> Option<&Diagnostic> {
        self.0.get(i).map(|d| &**d)
    }
    pub fn iter(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().map(|d| &**d)
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
        self.render_styled(false)
    }

    /// Every block, then the count, with ANSI colour when `color`.
    pub fn render_styled(&self, color: bool) -> String {
        let mut out = Vec::new();
        let _ = self.write_text(&mut out, color);
        String::from_utf8(out).unwrap_or_default()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "ok": false,
            "errors": self.iter().map(Diagnostic::to_json).collect::<Vec<_>>(),
        })
    }

    /// [`Self::render_styled`], written block by block: a report of many
    /// thousand problems is never held whole in memory.
    pub fn write_text(&self, out: &mut impl std::io::Write, color: bool) -> std::io::Result<()> {
        for d in &self.0 {
            out.write_all(d.render_styled(color).as_bytes())?;
            out.write_all(b"\n")?;
        }
        let n = self.0.len();
        out.write_all(
            render::render_summary(
                &format!("{n} problem{} found", if n == 1 { "" } else { "s" }),
                color,
            )
            .as_bytes(),
        )
    }

    /// [`Self::to_json`] pretty-printed, with a newline, written error by
    /// error (the same bytes as `to_string_pretty` of the whole document).
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        out.write_all(b"{\n  \"errors\": [")?;
        for (i, d) in self.0.iter().enumerate() {
            out.write_all(if i == 0 { b"\n" } else { b",\n" })?;
            let one = serde_json::to_string_pretty(&d.to_json()).unwrap_or_default();
            for (j, line) in one.lines().enumerate() {
                if j > 0 {
                    out.write_all(b"\n")?;
                }
                out.write_all(b"    ")?;
                out.write_all(line.as_bytes())?;
            }
        }
        out.write_all(if self.0.is_empty() { b"]" } else { b"\n  ]" })?;
        out.write_all(b",\n  \"ok\": false\n}\n")
    }
}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![Box::new(d)])
    }
}

impl From<Vec<Diagnostic>> for Diagnostics {
    fn from(ds: Vec<Diagnostic>) -> Self {
        Diagnostics(ds.into_iter().map(Box::new).collect())
    }
}

impl IntoIterator for Diagnostics {
    type Item = Diagnostic;
    type IntoIter =
        std::iter::Map<std::vec::IntoIter<Box<Diagnostic>>, fn(Box<Diagnostic>) -> Diagnostic>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter().map(|d| *d)
    }
}

/// Output format shared by every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// For people: tables, summaries, rustc-like errors on stderr.
    #[default]
    Text,
    /// For programs: one JSON document on stdout (errors as `{"ok": false, "errors": [...]}`).
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refused plan may hold a hundred thousand of them.
    #[test]
    fn a_diagnostic_is_small() {
        assert!(std::mem::size_of::<Diagnostic>() <= 120);
        assert!(std::mem::size_of::<Location>() <= 24);
    }

    /// The wrapper's codes are recorded on every dispatch: each value is
    /// the one earlier okstras wrote, and reads back as itself.
    #[test]
    fn the_wrapper_exit_protocol_keeps_its_numbers() {
        use WrapperExit::*;
        let table = [
            (Failed, 1),
            (Usage, 2),
            (ConfinementFailed, 71),
            (StatusWriteFailed, 74),
            (NeverReleased, 75),
            (ServedModelMismatch, 86),
            (BudgetExceeded, 87),
            (Timeout, 124),
            (NotExecutable, 126),
            (NotFound, 127),
            (WrapperExit::KILLED, 137),
            (WrapperExit::TERMINATED, 143),
        ];
        for (exit, code) in table {
            assert_eq!(exit.code(), code, "{exit:?}");
            assert_eq!(WrapperExit::from_code(code), Some(exit));
            assert!(exit.is(code) && !exit.is(code + 1000));
        }
        assert_eq!(Signal(64).code(), 192);
        for childs_own in [0, 3, 42, 128, 193, -1] {
            assert_eq!(WrapperExit::from_code(childs_own), None, "{childs_own}");
        }
    }

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

    /// The error-code table of docs/errors.md, as (code, exit, meaning) rows.
    fn documented_code_rows() -> Vec<(String, String, String)> {
        let doc = include_str!("../docs/errors.md");
        let mut lines = doc
            .lines()
            .skip_while(|l| l.trim() != "| code | exit | meaning |");
        assert!(
            lines.next().is_some(),
            "docs/errors.md has no error-code table"
        );
        assert!(lines.next().is_some_and(|l| l.starts_with("| ---")));
        lines
            .take_while(|l| l.starts_with('|'))
            .map(|row| {
                let inner = row
                    .strip_prefix("| `")
                    .and_then(|r| r.strip_suffix(" |"))
                    .unwrap_or_else(|| panic!("malformed docs/errors.md row: {row}"));
                let (code, rest) = inner
                    .split_once("` | ")
                    .unwrap_or_else(|| panic!("malformed docs/errors.md row: {row}"));
                let (exit, meaning) = rest
                    .split_once(" | ")
                    .unwrap_or_else(|| panic!("malformed docs/errors.md row: {row}"));
                (code.to_string(), exit.to_string(), meaning.to_string())
            })
            .collect()
    }

    #[test]
    fn the_documented_table_is_exactly_the_codes() {
        let rows = documented_code_rows();
        let mut seen = std::collections::HashSet::new();
        for (name, exit, meaning) in &rows {
            let code = Code::from_wire(name)
                .unwrap_or_else(|| panic!("docs/errors.md names `{name}`, which is not a code"));
            assert!(seen.insert(code), "docs/errors.md lists `{name}` twice");
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
        assert!(
            missing.is_empty(),
            "docs/errors.md lacks rows for {missing:?}"
        );
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
    fn streamed_json_is_the_pretty_document() {
        let src = source("s.toml", "a = 1\nb = [\"x\"]\n");
        for ds in [
            Diagnostics::default(),
            Diagnostics::from(Diagnostic::new(Code::PlanStale, "y \"q\"\n").in_file("p")),
            Diagnostics::from(vec![
                Diagnostic::new(Code::SchemaViolation, "x")
                    .at(span_of(&src, "\"x\""))
                    .pointer("/b/0")
                    .worker("w")
                    .help("h"),
                Diagnostic::new(Code::ExecLocked, "z"),
            ]),
        ] {
            let mut out = Vec::new();
            ds.write_json(&mut out).unwrap();
            let want = serde_json::to_string_pretty(&ds.to_json()).unwrap() + "\n";
            assert_eq!(String::from_utf8(out).unwrap(), want);
        }
    }

    #[test]
    fn exit_status_prefers_refusal_over_invalid_input() {
        let ds = Diagnostics::from(vec![
            Diagnostic::new(Code::SchemaViolation, "x"),
            Diagnostic::new(Code::PlanStale, "y"),
        ]);
        assert_eq!(ds.exit_status(), ExitStatus::PlanRefused);
    }

    fn source(name: &str, text: &str) -> std::sync::Arc<SourceText> {
        SourceText::new(name, text.to_string())
    }

    fn span_of(src: &std::sync::Arc<SourceText>, needle: &str) -> Location {
        let at = src.text().find(needle).unwrap();
        Location::span(src, at..at + needle.len())
    }

    #[test]
    fn text_rendering_points_at_the_column() {
        let src = source("spec.toml", "[[workers]]\nworkerId = \"a\"\nattempt = 0\n");
        let d = Diagnostic::new(Code::IdentityBadAttempt, "attempt must be >= 1")
            .at(span_of(&src, "0"))
            .worker("a")
            .help("use 1 for a first attempt");
        assert_eq!(
            d.render_text(),
            "error[identity/bad-attempt]: attempt must be >= 1\n \
             --> spec.toml:3:11\n  \
             |\n\
             3 | attempt = 0\n  \
             |           ^\n  \
             = worker: a\n  \
             = help: use 1 for a first attempt\n"
        );
        let json = d.to_json();
        assert_eq!(json["line"], 3);
        assert_eq!(json["column"], 11);
        assert_eq!(json["file"], "spec.toml");
    }

    #[test]
    fn file_only_and_unlocated_diagnostics() {
        let d = Diagnostic::new(Code::PlanStale, "changed")
            .in_file("p.md")
            .help("replan");
        assert_eq!(
            d.render_text(),
            "error[plan/stale]: changed\n--> p.md\n = help: replan\n"
        );
        let j = d.to_json();
        assert_eq!(j["file"], "p.md");
        assert!(j.get("line").is_none() && j.get("column").is_none());
        let d = Diagnostic::new(Code::ExecLocked, "held").help("wait");
        assert_eq!(d.render_text(), "error[exec/locked]: held\n = help: wait\n");
        assert!(d.to_json().get("file").is_none());
        let all = Diagnostics::from(vec![d.clone(), d]).render_text();
        assert!(all.ends_with("\n\nerror: 2 problems found\n"), "{all}");
    }

    /// Carets sit under the span as a terminal draws the line: a CJK
    /// character or an emoji takes two columns.
    #[test]
    fn carets_align_under_wide_characters() {
        let src = source("s.toml", "名前 = \"値\" # 🎉 x\nrole = \"é\"\n");
        let text = Diagnostic::new(Code::SchemaViolation, "x")
            .at(span_of(&src, "x"))
            .render_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], " --> s.toml:1:14", "{text}");
        assert_eq!(lines[3], "1 | 名前 = \"値\" # 🎉 x");
        // 名前 (4) + ` = "` (4) + 値 (2) + `" # ` (4) + 🎉 (2) + ` ` (1) = 17.
        assert_eq!(lines[4], format!("  | {}^", " ".repeat(17)));
        let text = Diagnostic::new(Code::SchemaViolation, "x")
            .at(span_of(&src, "値"))
            .render_text();
        assert!(text.contains("\n  |         ^^\n"), "{text}");
    }

    #[test]
    fn a_long_line_is_shown_as_a_window_around_the_span() {
        let mut line = String::from("[");
        for i in 0..2000 {
            line.push_str(&format!("{{\"workerId\":\"w{i}\"}},"));
        }
        line.push_str("{\"workerId\":\"BAD\"}]");
        let src = source("big.json", &line);
        let loc = span_of(&src, "\"BAD\"");
        let column = loc.column().unwrap();
        let text = Diagnostic::new(Code::IdentityDuplicate, "twice")
            .at(loc)
            .render_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], format!(" --> big.json:1:{column}"), "{text}");
        let shown = lines[3].strip_prefix("1 | ").unwrap();
        assert!(
            shown.starts_with("...") && !shown.ends_with("..."),
            "{shown}"
        );
        assert!(shown.chars().count() <= WINDOW, "{shown}");
        let caret = lines[4].find('^').unwrap() - 4;
        assert_eq!(&shown[caret..caret + 5], "\"BAD\"", "{text}");
        assert_eq!(lines[4].matches('^').count(), 5);

        // Near the start of the line: cut on the right only.
        let loc = span_of(&src, "\"w1\"");
        let text = Diagnostic::new(Code::IdentityDuplicate, "x")
            .at(loc)
            .render_text();
        let shown = text.lines().nth(3).unwrap().strip_prefix("1 | ").unwrap();
        assert!(
            !shown.starts_with("...") && shown.ends_with("..."),
            "{shown}"
        );
        assert!(text.contains(" --> big.json:1:32\n"), "{text}");

        // A span longer than the window is cut with it.
        let text = Diagnostic::new(Code::SchemaViolation, "x")
            .at(Location::span(&src, 0..line.len()))
            .render_text();
        assert!(
            text.lines().all(|l| l.chars().count() <= WINDOW + 8),
            "{text}"
        );
    }

    /// Zero-width characters count toward the window: a line of combining
    /// marks is cut like any other.
    #[test]
    fn a_window_of_zero_width_characters_is_bounded() {
        let line = format!("x = \"{}\" y", "e\u{301}".repeat(50_000));
        let src = source("s.toml", &line);
        let text = Diagnostic::new(Code::SchemaViolation, "x")
            .at(span_of(&src, "y"))
            .render_text();
        let shown = text.lines().nth(3).unwrap();
        assert!(shown.chars().count() <= WINDOW + 8, "{}", shown.len());
        assert!(text.contains(&format!(":1:{}\n", 100_008)), "{text}");
    }

    #[test]
    fn secondary_labels_point_at_other_places() {
        let src = source(
            "spec.toml",
            "[[workers]]\nworkerId = \"a\"\nresultPath = \"r.md\"\n\n[[workers]]\nworkerId = \"b\"\nresultPath = \"r.md\"\n",
        );
        let second = src.text().rfind("\"r.md\"").unwrap();
        let d = Diagnostic::new(Code::RulesWriteConflict, "both write r.md")
            .at(Location::span(&src, second..second + 6))
            .label(span_of(&src, "\"r.md\""), "`a` writes it too")
            .worker("b");
        let text = d.render_text();
        assert_eq!(
            text,
            "error[rules/write-conflict]: both write r.md\n \
             --> spec.toml:7:14\n  \
             |\n\
             7 | resultPath = \"r.md\"\n  \
             |              ^^^^^^\n  \
             |\n \
             ::: spec.toml:3:14\n  \
             |\n\
             3 | resultPath = \"r.md\"\n  \
             |              ------ `a` writes it too\n  \
             = worker: b\n"
        );
        // Labels stay out of the JSON form.
        assert_eq!(d.to_json().as_object().unwrap().len(), 6);

        // Another file, and a label on the primary's own short line.
        let other = source("other.json", "{\"resultPath\": \"r.md\"}");
        let line = source("s.json", "[{\"r\":\"x\"},{\"r\":\"x\"}]");
        let d = Diagnostic::new(Code::RulesWriteConflict, "m")
            .at(Location::span(&line, 16..19))
            .label(Location::span(&line, 6..9), "first")
            .label(span_of(&other, "\"r.md\""), "there");
        let text = d.render_text();
        assert!(
            text.contains("1 | [{\"r\":\"x\"},{\"r\":\"x\"}]\n  |       --- first ^^^\n"),
            "{text}"
        );
        assert!(text.contains("::: other.json:1:16\n"), "{text}");
    }

    #[test]
    fn colour_only_when_asked() {
        let src = source("s.toml", "a = 1\n");
        let ds = Diagnostics::from(
            Diagnostic::new(Code::SchemaViolation, "x")
                .at(span_of(&src, "1"))
                .help("h"),
        );
        assert!(!ds.render_text().contains('\x1b'));
        let styled = ds.render_styled(true);
        assert!(styled.contains("\x1b["), "{styled}");
        // The same text once the escapes are gone.
        let plain: String = strip_ansi(&styled);
        assert_eq!(plain, ds.render_text());
    }

    fn strip_ansi(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            if c == '\x1b' {
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn user_text_cannot_drive_the_terminal() {
        let src = source("s\x1b[2J.toml", "a = \"\x1b[31mred\u{202e}\"\n");
        let text = Diagnostic::new(Code::SchemaViolation, "bad \x1b[1m")
            .at(span_of(&src, "red"))
            .worker("w\x1b]0;title\x07")
            .help("two\nlines")
            .render_text();
        assert!(!text.contains('\x1b'), "{text:?}");
        assert!(!text.contains('\u{202e}'), "{text:?}");
        assert!(text.contains(" = help: two\n          lines\n"), "{text}");
    }
}
