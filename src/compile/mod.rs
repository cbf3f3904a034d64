//! The plan compiler: spec (or roster) + manifest + metadata -> `Plan`.
//! Pure apart from reading its inputs: it never writes anything. Every
//! problem of every input is collected and returned together.

pub mod authority;
pub mod conformance;
pub mod entry;
pub mod identity;
mod job;
pub mod raw;
pub mod roster;
pub mod rules;
mod seen;
pub mod spec;
pub mod translator;
pub mod worktree;

pub use entry::{Defaults, Entry};
#[cfg(test)]
pub(crate) use job::DEFAULT_IDLE_TIMEOUT_SECONDS;
pub use job::{artifact_paths, build_job};

use crate::canonical::sha256_hex;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::Manifest;
use crate::paths::{self, Field, PathProblem, Resolved};
use crate::plan::{self, InputRecord, Job, Plan, RetryPolicy, RunInfo, Stage};
use crate::schema::{self, SchemaKind};
use crate::source::{Format, SourceFile};
use crate::vocab::Backend;
use seen::Seen;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What `okstra plan` was asked to do.
#[derive(Clone)]
pub struct Request {
    pub project_root: PathBuf,
    pub manifest: PathBuf,
    pub spec: Option<PathBuf>,
    pub workers: Vec<String>,
    /// The timestamp to stamp on the plan (injected so tests are stable).
    pub created_at: String,
    /// Where the run's records are read from (a translator's reservation
    /// needs team-state's dispatch ids).
    pub records: &'static dyn crate::model::Records,
    /// Where the plan will be written, where that is known: a plan left
    /// there by an earlier run is not a change of the checkout
    /// (docs/worktrees.md#planning).
    pub plan_out: Option<PathBuf>,
}

/// A loaded input file with its parsed document.
pub struct Loaded {
    pub doc: Value,
    pub src: SourceFile,
}

/// Collects diagnostics and input records while compiling.
pub struct Ctx {
    pub root: PathBuf,
    pub diags: Diagnostics,
    inputs: BTreeMap<(String, String), String>,
    /// What was reported, so one problem found twice (a value in `defaults`
    /// read by every entry; a path judged as written and again when
    /// resolved) is reported once.
    seen: Seen,
    /// Where [`Ctx::push`] puts what it is given while [`Ctx::holding`].
    #[expect(clippy::vec_box, reason = "held as `Diagnostics` holds them")]
    held: Option<Vec<Box<Diagnostic>>>,
    /// Whether a problem was found, reported or held: the plan is refused.
    refused: bool,
}

impl Ctx {
    pub fn new(root: PathBuf) -> Self {
        Ctx {
            root,
            diags: Diagnostics::default(),
            inputs: BTreeMap::new(),
            seen: Seen::default(),
            held: None,
            refused: false,
        }
    }

    /// A diagnostic pointing at the value under `pointer` in `src`.
    pub fn at(
        &self,
        src: &SourceFile,
        code: Code,
        message: impl Into<String>,
        pointer: &str,
    ) -> Diagnostic {
        Diagnostic::new(code, message)
            .at(src.locate(pointer))
            .pointer(pointer)
    }

    /// A diagnostic pointing at the key `pointer` names.
    pub fn at_key(
        &self,
        src: &SourceFile,
        code: Code,
        message: impl Into<String>,
        pointer: &str,
    ) -> Diagnostic {
        Diagnostic::new(code, message)
            .at(src.locate_key(pointer))
            .pointer(pointer)
    }

    /// Report `d`, unless the same problem at the same place was reported
    /// already (the worker and help it names do not make it another).
    pub fn push(&mut self, d: Diagnostic) {
        self.push_boxed(Box::new(d));
    }

    fn push_boxed(&mut self, d: Box<Diagnostic>) {
        self.refused = true;
        if let Some(held) = &mut self.held {
            held.push(d);
        } else if self.seen.first_time(&self.diags, &d) {
            self.diags.push_boxed(d);
        }
    }

    /// Run `f` with what it reports added to `held`, in the order found,
    /// instead of reported: problems found ahead of their turn, which the
    /// caller pushes once the problems due before them are reported (a
    /// problem found twice is dropped then).
    pub fn holding<T>(
        &mut self,
        held: &mut Vec<Box<Diagnostic>>,
        f: impl FnOnce(&mut Ctx) -> T,
    ) -> T {
        let outer = self.held.replace(std::mem::take(held));
        let out = f(self);
        *held = std::mem::replace(&mut self.held, outer).unwrap_or_default();
        out
    }

    /// Whether a problem was found so far, reported or held: the plan will
    /// be refused whatever else is found.
    pub fn refused(&self) -> bool {
        self.refused || !self.diags.is_empty()
    }

    /// Record an input file's digest (kind, project-relative display path).
    pub fn record_input(&mut self, kind: &str, display: &str, bytes: &[u8]) {
        self.record_input_digest(kind, display, sha256_hex(bytes));
    }

    /// [`Ctx::record_input`] of an input digested already (streamed).
    pub fn record_input_digest(&mut self, kind: &str, display: &str, sha256: String) {
        self.inputs
            .insert((kind.to_string(), display.to_string()), sha256);
    }

    pub fn take_inputs(&mut self) -> Vec<InputRecord> {
        std::mem::take(&mut self.inputs)
            .into_iter()
            .map(|((kind, path), sha256)| InputRecord { kind, path, sha256 })
            .collect()
    }

    /// Load a JSON/TOML input, recording its digest; problems become
    /// diagnostics. A relative `path` was taken from `base`, which a missing
    /// file's help says.
    pub fn load(
        &mut self,
        kind: &str,
        display: &str,
        path: &Path,
        base: paths::Base,
        format: Format,
    ) -> Option<Loaded> {
        match SourceFile::load(display, path, format) {
            Ok((doc, src)) => {
                self.record_input(kind, display, src.text().as_bytes());
                Some(Loaded { doc, src })
            }
            Err(d) => {
                self.push(paths::name_root(d, &self.root, base));
                None
            }
        }
    }

    /// [`Self::load`], of bytes already read (`okstra validate -`).
    pub fn load_bytes(
        &mut self,
        kind: &str,
        display: &str,
        bytes: Vec<u8>,
        format: Format,
    ) -> Option<Loaded> {
        match SourceFile::from_bytes(display, bytes, format) {
            Ok((doc, src)) => {
                self.record_input(kind, display, src.text().as_bytes());
                Some(Loaded { doc, src })
            }
            Err(d) => {
                self.push(d);
                None
            }
        }
    }

    /// Schema-check a document; `covered` lets a caller drop complaints a
    /// rule of docs/errors.md#error-codes reports under its own code.
    pub fn schema_check(
        &mut self,
        kind: SchemaKind,
        loaded: &Loaded,
        covered: &dyn Fn(&schema::SchemaError) -> bool,
    ) {
        let errors = schema::validate(kind, &loaded.doc);
        self.report_schema(kind, &loaded.src, errors, covered);
    }

    /// Schema complaints found earlier (the document may have been taken
    /// apart since), as diagnostics pointing into `src`.
    pub fn report_schema(
        &mut self,
        kind: SchemaKind,
        src: &SourceFile,
        errors: Vec<schema::SchemaError>,
        covered: &dyn Fn(&schema::SchemaError) -> bool,
    ) {
        for err in errors {
            if covered(&err) {
                continue;
            }
            let code = if kind == SchemaKind::Jobs {
                rule_code_for(&err)
            } else {
                Code::SchemaViolation
            };
            let d = if err.keyword == "additionalProperties" {
                self.at_key(src, code, err.message, &err.pointer)
            } else {
                self.at(src, code, err.message, &err.pointer)
            };
            self.push(d.help(schema_help(kind)));
        }
    }

    /// Resolve a path of `field` an input names at `pointer` in `src`,
    /// reporting `path/invalid`, `path/escapes-root` or `path/too-broad`.
    pub fn resolve(
        &mut self,
        src: &SourceFile,
        value: &str,
        pointer: &str,
        field: Field,
    ) -> Option<Resolved> {
        let problem = match paths::resolve(&self.root, value, field) {
            Ok(r) => return Some(r),
            Err(p) => p,
        };
        let d = match problem {
            PathProblem::Invalid(why) => raw::invalid_path(self, src, value, pointer, &why),
            PathProblem::EscapesRoot { resolved } => self
                .at(
                    src,
                    Code::PathEscapesRoot,
                    format!(
                        "`{}` resolves to {}, outside the project root {}",
                        raw::shown(value),
                        resolved.display(),
                        self.root.display()
                    ),
                    pointer,
                )
                .help("paths are relative to the project root (--project-root); keep them inside it"),
            PathProblem::TooBroad(why) => self
                .at(
                    src,
                    Code::PathTooBroad,
                    format!("write scope `{}` {why}", raw::shown(value)),
                    pointer,
                )
                .help("name the worktree or directory the worker needs, not `/`, a parent of the project or a kernel interface"),
        };
        self.push(d);
        None
    }

    /// Resolve a planned-path glob: as [`Ctx::resolve`], and a glob that
    /// climbs with `..` past a wildcard (or above the root) is refused.
    pub fn resolve_pattern(
        &mut self,
        src: &SourceFile,
        value: &str,
        pointer: &str,
    ) -> Option<Resolved> {
        // `dir/*/..` cannot be folded without knowing what `*` matched:
        // folding it lexically would widen the pattern (`src/*/../../x` is
        // not `x` unless `src` has a subdirectory). Refuse it.
        if paths::syntax_problem(value, Field::File).is_none()
            && crate::policy::is_glob(value)
            && crate::policy::normalise(value).is_none()
        {
            let d = self
                .at(
                    src,
                    Code::PathEscapesRoot,
                    format!("planned path `{value}` climbs out with `..` above the project root or past a glob"),
                    pointer,
                )
                .help("write the pattern without `..`, e.g. `src/**/*.rs`");
            self.push(d);
            return None;
        }
        self.resolve(src, value, pointer, Field::File)
    }
}

/// The hint of every schema complaint about a `kind` document.
fn schema_help(kind: SchemaKind) -> &'static str {
    match kind {
        SchemaKind::Jobs => "`okstra schema jobs` prints the schema; editors apply it through `#:schema` / `$schema`",
        SchemaKind::Manifest => "`okstra schema manifest` prints the schema; editors apply it through `#:schema` / `$schema`",
        SchemaKind::Metadata => "`okstra schema metadata` prints the schema; editors apply it through `#:schema` / `$schema`",
        SchemaKind::Plan => "`okstra schema plan` prints the schema; editors apply it through `#:schema` / `$schema`",
        SchemaKind::TeamState => "`okstra schema team-state` prints the schema; editors apply it through `#:schema` / `$schema`",
    }
}

/// The code of a spec's schema complaint: the rule's own code where one
/// covers it (an editor flags `attempt = 0` from the schema; okstra calls it
/// `identity/bad-attempt`), else `schema/violation`.
fn rule_code_for(err: &schema::SchemaError) -> Code {
    if err.keyword == "additionalProperties" {
        return Code::SchemaViolation;
    }
    if let Some(key) = &err.missing {
        return match key.as_str() {
            "attempt" => Code::IdentityBadAttempt,
            // `schemaVersion = "2.0"` without it is not a v2 pair.
            "executionIdentityVersion" => Code::IdentityUnsupportedVersion,
            // Only asked for when `defaults` gives a v2-only key.
            "schemaVersion" => Code::IdentityMixedVersions,
            k if identity::IDENTITY_KEYS.contains(&k) => Code::IdentityMissingField,
            _ => Code::SchemaViolation,
        };
    }
    let key = err.pointer.rsplit('/').next().unwrap_or("");
    match (key, err.keyword.as_str()) {
        // A key the other identity version carries.
        ("workerId", "not") => Code::IdentityMixedVersions,
        (k, "not") if identity::V2_ONLY_KEYS.contains(&k) => Code::IdentityMixedVersions,
        ("attempt", _) => Code::IdentityBadAttempt,
        ("schemaVersion" | "executionIdentityVersion", _) => Code::IdentityUnsupportedVersion,
        ("assignmentRef", "pattern") => Code::IdentityNoStateKey,
        ("dispatchKind", "pattern") => Code::RulesReverifyKind,
        (k, "minLength") if identity::IDENTITY_KEYS.contains(&k) => Code::IdentityMissingField,
        _ => Code::SchemaViolation,
    }
}

/// The run facts every mode needs, read from the manifest.
pub struct RunFacts {
    pub manifest: Loaded,
    pub manifest_display: String,
    pub info: RunInfo,
    /// `agentContract.invocationReservationRootPath`, resolved (translators).
    pub reservation_root: Option<Resolved>,
    /// The manifest's `plannedPaths`, resolved (every implementer's).
    pub planned_paths: Vec<String>,
    /// Where the run's records are read from.
    pub records: &'static dyn crate::model::Records,
    /// What git said, asked once for the run (`worktree = "git"` jobs).
    pub git: worktree::GitFacts,
}

/// A file named on the command line, as the plan names it; reported when
/// its name is not UTF-8.
fn command_line_display(ctx: &mut Ctx, what: &str, path: &Path) -> Option<String> {
    let shown = paths::checked_display_for(&ctx.root, path);
    if shown.is_none() {
        ctx.push(
            Diagnostic::new(
                Code::InputInvalid,
                format!(
                    "the {what} {} is not named in valid UTF-8; a plan names its inputs in JSON, and a lossy name would be another file",
                    path.display()
                ),
            )
            .help(format!("rename the {what} (or a directory above it) to a UTF-8 name")),
        );
    }
    shown
}

/// A manifest string field, if it is present and not empty.
fn manifest_str<'a>(doc: &'a Value, pointer: &str) -> Option<&'a str> {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn load_run(ctx: &mut Ctx, req: &Request) -> Option<RunFacts> {
    let display = command_line_display(ctx, "manifest", &req.manifest)?;
    let loaded = ctx.load(
        "manifest",
        &display,
        &req.manifest,
        paths::Base::CurrentDir,
        Format::Json,
    )?;
    ctx.schema_check(SchemaKind::Manifest, &loaded, &|_| false);
    let m = Manifest::new(&loaded.doc);
    let src = &loaded.src;
    let file = |ctx: &mut Ctx, pointer: &str| {
        manifest_str(&loaded.doc, pointer).and_then(|v| ctx.resolve(src, v, pointer, Field::File))
    };
    let team = file(ctx, "/teamStatePath");
    let lead_events = file(ctx, "/leadEventsPath");
    let error_log = file(ctx, "/errorLogPath");
    // Not read by okstra, but a path of the run all the same.
    file(ctx, "/activeRunContextPath");
    let reservation_root = manifest_str(&loaded.doc, RESERVATION_ROOT)
        .and_then(|v| ctx.resolve(src, v, RESERVATION_ROOT, Field::Dir));
    let planned_paths = m
        .planned_paths()
        .into_iter()
        .enumerate()
        .filter_map(|(i, v)| run_planned_path(ctx, src, v, &format!("/plannedPaths/{i}")))
        .collect();
    let sibling = |name: &str| -> String {
        team.as_ref()
            .map(|t| {
                let parent = Path::new(&t.display).parent().unwrap_or(Path::new(""));
                paths::path_text(&parent.join(name))
            })
            .unwrap_or_default()
    };
    let or_sibling = |r: Option<Resolved>, key: &str, name: &str| match r {
        Some(r) => r.display,
        None if manifest_str(&loaded.doc, key).is_none() => sibling(name),
        None => String::new(),
    };
    let lead_events = or_sibling(lead_events, "/leadEventsPath", "lead-events.jsonl");
    let error_log = or_sibling(error_log, "/errorLogPath", "errors.jsonl");
    let info = RunInfo {
        task_key: m.task_key().to_string(),
        manifest_path: display.clone(),
        team_state_path: team.map(|t| t.display).unwrap_or_default(),
        lead_events_path: lead_events,
        error_log_path: error_log,
        terminal_backend: Backend::for_terminal(m.terminal_backend()),
        workflow_phase: m.workflow_phase().to_string(),
        mode: String::new(),
        budget: None,
    };
    Some(RunFacts {
        manifest: loaded,
        manifest_display: display,
        info,
        reservation_root,
        planned_paths,
        records: req.records,
        git: worktree::GitFacts::default(),
    })
}

/// One of the manifest's `plannedPaths`. A pattern that climbs above its
/// start (`../x`, `src/*/../x`) is kept as written: the policy refuses it
/// when matching, so it allows nothing, and the lead's manifest plans as
/// before. Anything else is resolved like a spec's planned path, so a
/// symlinked directory neither aliases nor escapes.
fn run_planned_path(
    ctx: &mut Ctx,
    src: &SourceFile,
    value: String,
    pointer: &str,
) -> Option<String> {
    if paths::syntax_problem(&value, Field::File).is_none()
        && crate::policy::normalise(&value).is_none()
    {
        return Some(value);
    }
    ctx.resolve(src, &value, pointer, Field::File)
        .map(|r| r.display)
}

/// Where the manifest names the translators' reservation directory.
pub const RESERVATION_ROOT: &str = "/agentContract/invocationReservationRootPath";

/// A roster worker left out of the plan before the run, with why
/// (docs/manifest.md#roster-mode). `okstra plan` records these on pristine
/// team-state rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub worker: String,
    pub reason: String,
}

/// A compiled plan and the pre-run skips its selection implies.
pub struct Compiled {
    pub plan: Plan,
    pub skips: Vec<Skip>,
}

/// Compile a plan. On success the plan is sealed (digest set).
pub fn compile(req: &Request) -> Result<Plan, Diagnostics> {
    compile_full(req).map(|c| c.plan)
}

/// Compile a plan, with the roster skips (empty outside roster mode).
/// Pure: recording the skips is the caller's business.
pub fn compile_full(req: &Request) -> Result<Compiled, Diagnostics> {
    paths::with_cache(|| compile_uncached(req))
}

fn compile_uncached(req: &Request) -> Result<Compiled, Diagnostics> {
    let root = match paths::checked_root(&req.project_root) {
        Ok(root) => root,
        Err(why) => {
            return Err(Diagnostics::from(
                Diagnostic::new(Code::InputInvalid, why)
                    .help("rename the project directory (or a directory above it) to a UTF-8 name, or pass another --project-root"),
            ))
        }
    };
    let mut ctx = Ctx::new(root.clone());
    let Some(mut run) = load_run(&mut ctx, req) else {
        return Err(ctx.diags);
    };
    let mut skips = Vec::new();
    let stages = match &req.spec {
        Some(spec) => {
            run.info.mode = "spec".into();
            spec_stages(&mut ctx, &mut run, spec, &req.workers)
        }
        None if translator::requested(&req.workers) => {
            run.info.mode = "translator".into();
            translator::stages(&mut ctx, &run)
        }
        None => {
            run.info.mode = "roster".into();
            let (stages, s) = roster::stages(&mut ctx, &run, &req.workers);
            skips = s;
            stages
        }
    };
    // Once every job is built, whatever chose them.
    worktree::check_dirty(&mut ctx, &run, &stages, req.plan_out.as_deref());
    if !ctx.diags.is_empty() {
        return Err(ctx.diags);
    }
    let mut plan = Plan {
        format_version: plan::FORMAT_VERSION,
        okstra_version: crate::VERSION.to_string(),
        created_at: req.created_at.clone(),
        project_root: paths::path_text(&root),
        run: run.info,
        inputs: ctx.take_inputs(),
        policy: RetryPolicy {
            max_attempts: plan::MAX_ATTEMPTS,
        },
        stages,
        digest: String::new(),
    };
    plan.seal();
    Ok(Compiled { plan, skips })
}

/// A job under construction, with what the rules need to point back at it.
pub struct Built {
    pub job: Job,
    pub entry_pointer: String,
}

/// A spec's jobs by stage while its entries are read: whole while the plan
/// may still be made, only what the batch rules read of each once the
/// plan is refused (a refused spec of many thousand entries once held
/// every job whole).
enum Kept {
    Whole(Vec<Vec<Built>>),
    /// Boxed: a stage's vector of them grows by pointers.
    #[expect(clippy::vec_box, reason = "see above")]
    Facts(Vec<Vec<Box<rules::Facts>>>),
}

impl Kept {
    fn new(stages: usize) -> Kept {
        Kept::Whole((0..stages).map(|_| Vec::new()).collect())
    }

    /// Add a job of stage `stage`; `refused`: whether the plan is.
    fn push(&mut self, stage: usize, built: Built, refused: bool) {
        let facts = |b| Box::new(rules::Facts::of(b));
        if let (Kept::Whole(stages), true) = (&mut *self, refused) {
            let stages = std::mem::take(stages);
            *self = Kept::Facts(
                stages
                    .into_iter()
                    .map(|jobs| jobs.into_iter().map(facts).collect())
                    .collect(),
            );
        }
        match self {
            Kept::Whole(stages) => stages[stage].push(built),
            Kept::Facts(stages) => stages[stage].push(facts(built)),
        }
    }

    fn members(&self) -> Vec<Vec<rules::Member<'_>>> {
        match self {
            Kept::Whole(stages) => stages
                .iter()
                .map(|jobs| jobs.iter().map(rules::Member::of).collect())
                .collect(),
            Kept::Facts(stages) => stages
                .iter()
                .map(|jobs| jobs.iter().map(|f| f.member()).collect())
                .collect(),
        }
    }
}

fn spec_stages(ctx: &mut Ctx, run: &mut RunFacts, spec: &Path, only: &[String]) -> Vec<Stage> {
    let Some(display) = command_line_display(ctx, "spec", spec) else {
        return Vec::new();
    };
    let Some((mut doc, src)) = spec::load(ctx, &display, spec) else {
        return Vec::new();
    };
    // The run's `[budget]` (docs/exec.md#budgets); the schema reports one
    // that sets no usable limit.
    run.info.budget = doc
        .rest
        .get("budget")
        .and_then(crate::budget::RunBudget::from_value);
    let run = &*run;
    let manifest = Manifest::new(&run.manifest.doc);
    let names = stage_names(&doc.rest);
    let mut kept = Kept::new(names.len());
    // State keys of the entries that parsed, for `--workers`.
    let mut known: Vec<String> = Vec::new();
    walk_entries(ctx, &src, &mut doc, |ctx, entry, parsed| {
        let Some(parsed) = parsed else {
            // Still check the paths of a refused entry, so one run shows
            // every problem.
            check_entry_paths(ctx, &src, entry, true);
            return;
        };
        if !only.is_empty() {
            known.push(parsed.state_key.clone());
            if !only.contains(&parsed.state_key) {
                return;
            }
        }
        if let Some(job) = build_job(ctx, run, &manifest, &src, entry, parsed) {
            let built = Built {
                job,
                entry_pointer: entry.pointer.clone(),
            };
            kept.push(entry.stage, built, ctx.refused());
        }
    });
    check_requested(ctx, &display, only, &known);
    rules::check(ctx, &src, &names, &kept.members());
    let Kept::Whole(stages) = kept else {
        return Vec::new();
    };
    if ctx.refused() {
        return Vec::new();
    }
    names
        .into_iter()
        .zip(stages)
        .filter(|(_, jobs)| !jobs.is_empty())
        .map(|(name, jobs)| Stage {
            name,
            jobs: jobs.into_iter().map(|b| b.job).collect(),
        })
        .collect()
}

/// `roster/unknown-worker` for `--workers` names the spec does not hold.
fn check_requested(ctx: &mut Ctx, display: &str, only: &[String], known: &[String]) {
    let unknown: Vec<&str> = only
        .iter()
        .filter(|w| !known.contains(w))
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        return;
    }
    ctx.push(
        Diagnostic::new(
            Code::RosterUnknownWorker,
            format!(
                "--workers names {} not in this spec: {}",
                if unknown.len() == 1 {
                    "a worker"
                } else {
                    "workers"
                },
                unknown.join(", ")
            ),
        )
        .in_file(display.to_string())
        .help(format!("the spec's workers are: {}", known.join(", "))),
    );
}

/// Walk a spec's entries in the order their problems are reported:
///
/// 1. every path and `env` table as written (`raw`): `defaults`, then each
///    entry;
/// 2. each entry's identity, and the rules of an entry that need nothing
///    but the spec (`job::check_alone`);
/// 3. the schema's complaints that no rule above answered, by pointer
///    (docs/spec-format.md#execution-identity: where the schema and a rule
///    refuse the same thing, the rule's code; a refused identity covers its
///    keys);
/// 4. `then` on each entry, with its identity where it parsed: the job or
///    sketch it makes, and their problems.
///
/// Steps 2 to 4 take one entry at a time, moved out of `spec` and dropped
/// once `then` is done with it; what steps 3 and 4 find is held and
/// reported after everything of step 2. Real paths are memoised for the
/// walk alone: what comes after it compares paths as text.
fn walk_entries(
    ctx: &mut Ctx,
    src: &SourceFile,
    spec: &mut spec::Spec,
    then: impl FnMut(&mut Ctx, &Entry, Option<identity::Parsed>),
) {
    paths::with_cache(|| walk_entries_cached(ctx, src, spec, then));
}

fn walk_entries_cached(
    ctx: &mut Ctx,
    src: &SourceFile,
    spec: &mut spec::Spec,
    mut then: impl FnMut(&mut Ctx, &Entry, Option<identity::Parsed>),
) {
    let text = src.text();
    let mut reported = raw::Reported::default();
    if let Some(d) = spec.rest.get("defaults").and_then(Value::as_object) {
        raw::check_object(ctx, src, "/defaults", d, &mut reported);
    }
    for item in spec.items() {
        if let Some(object) = item.value(text).as_object() {
            raw::check_object(ctx, src, &spec.pointer(item), object, &mut reported);
        }
    }
    let defaults = Defaults::of(&spec.rest);
    let rest_errors = spec.schema_errors();
    let mut schema_held = Vec::new();
    let mut later = Vec::new();
    spec.take_each(text, |stage, pointer, value, errors| {
        let entry = defaults.entry(stage, pointer, value);
        let parsed = entry
            .as_ref()
            .and_then(|entry| match identity::parse(&entry.fields) {
                Ok(p) => {
                    job::check_alone(ctx, src, entry, &p, &mut reported);
                    Some(p)
                }
                Err(problems) => {
                    report_identity(ctx, src, entry, problems);
                    None
                }
            });
        let refused_entry = entry.as_ref().filter(|_| parsed.is_none());
        ctx.holding(&mut schema_held, |ctx| {
            ctx.report_schema(SchemaKind::Jobs, src, errors, &|err| {
                refused_entry.is_some_and(|e| covered_by_refusal(err, &e.pointer))
                    || reported.covers(err)
            })
        });
        if let Some(entry) = entry {
            ctx.holding(&mut later, |ctx| then(ctx, &entry, parsed));
        }
    });
    ctx.holding(&mut schema_held, |ctx| {
        ctx.report_schema(SchemaKind::Jobs, src, rest_errors, &|err| {
            reported.covers(err)
        })
    });
    // The order of the whole document's complaints (each part's come
    // sorted, and a pointer belongs to one part).
    schema_held.sort_by(|a, b| a.pointer.cmp(&b.pointer));
    for d in schema_held.into_iter().chain(later) {
        ctx.push_boxed(d);
    }
}

/// Identity refusals of one entry as diagnostics, each at the key it is about.
pub fn report_identity(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    problems: Vec<identity::Problem>,
) {
    for p in problems {
        let ptr = p
            .key
            .map(|k| entry.ptr(k))
            .unwrap_or_else(|| entry.pointer.clone());
        let d = ctx.at(src, p.code, p.message, &ptr).help(p.help);
        ctx.push(with_worker(d, entry));
    }
}

/// `okstra validate --kind jobs`: every rule `okstra plan` runs on a spec
/// that needs no manifest, no metadata and no prompt file: identity, the
/// schema, each entry's provider, result, argv and dispatch kind, its
/// paths as they land under the project root, and the batch rules over
/// what the spec says of each job. Plan may still refuse such a spec, but
/// only for what those inputs say (docs/schemas.md#what-the-schemas-check).
/// The document's workers are moved out of `loaded.doc` (see [`spec::Spec`]).
pub fn check_spec_alone(ctx: &mut Ctx, loaded: &mut Loaded) {
    paths::with_cache(|| {
        let mut spec = spec::Spec::of_value(std::mem::take(&mut loaded.doc));
        let src = &loaded.src;
        let names = stage_names(&spec.rest);
        let mut sketches: Vec<Vec<rules::Facts>> = names.iter().map(|_| Vec::new()).collect();
        walk_entries(ctx, src, &mut spec, |ctx, entry, parsed| {
            let Some(parsed) = parsed else {
                check_entry_paths(ctx, src, entry, false);
                return;
            };
            if let Some(s) = job::sketch(ctx, src, entry, &parsed) {
                sketches[entry.stage].push(s);
            }
        });
        let stages: Vec<Vec<rules::Member>> = sketches
            .iter()
            .map(|s| s.iter().map(rules::Facts::member).collect())
            .collect();
        rules::check(ctx, src, &names, &stages);
        loaded.doc = spec.rest;
    });
}

/// The diagnostic, naming the entry's worker where it names one.
pub fn with_worker(d: Diagnostic, entry: &Entry) -> Diagnostic {
    match entry.fields.worker_name() {
        Some(n) => d.worker(n),
        None => d,
    }
}

/// Whether the refusal of the entry at `entry` by the identity rules
/// already covers a schema complaint about it: whole-entry complaints
/// (required / conditional / not), and any about its identity keys.
fn covered_by_refusal(err: &schema::SchemaError, entry: &str) -> bool {
    match err.pointer.strip_prefix(entry) {
        Some("") => err.keyword != "additionalProperties",
        Some(below) => below.strip_prefix('/').is_some_and(|below| {
            identity::IDENTITY_KEYS.contains(&below.split('/').next().unwrap_or(""))
        }),
        None => false,
    }
}

fn stage_names(doc: &Value) -> Vec<String> {
    match doc.get("stages").and_then(Value::as_array) {
        Some(stages) => stages
            .iter()
            .enumerate()
            .map(|(i, s)| {
                s.get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("stage-{}", i + 1))
            })
            .collect(),
        None => vec!["main".to_string()],
    }
}

/// The path checks of an entry whose identity was refused, so one run
/// shows every problem; `read_prompt`: whether the prompt must exist
/// (planning) or only land inside the project (validate).
fn check_entry_paths(ctx: &mut Ctx, src: &SourceFile, entry: &Entry, read_prompt: bool) {
    if let Some(prompt) = &entry.fields.prompt_path {
        if let Some(r) = ctx.resolve(src, prompt, &entry.ptr("promptPath"), Field::File) {
            if read_prompt {
                require_file(ctx, src, entry, &r, "promptPath");
            }
        }
    }
    for (key, value) in [
        ("resultPath", &entry.fields.result_path),
        ("workerResultPath", &entry.fields.worker_result_path),
    ] {
        if let Some(v) = value {
            ctx.resolve(src, v, &entry.ptr(key), Field::File);
        }
    }
}

pub fn require_file(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    r: &Resolved,
    key: &str,
) -> bool {
    if r.abs.is_file() {
        return true;
    }
    let d = ctx
        .at(
            src,
            Code::InputMissing,
            format!("`{key}` names {}, which does not exist", r.display),
            &entry.ptr(key),
        )
        .help(paths::not_found_help(
            "create the file, or fix the path",
            &ctx.root,
            paths::Base::Root,
        ));
    ctx.push(with_worker(d, entry));
    false
}
