//! The plan compiler: spec (or roster) + manifest + metadata -> `Plan`.
//! Pure apart from reading its inputs: it never writes anything. Every
//! problem of every input is collected and returned together.

pub mod authority;
pub mod conformance;
pub mod identity;
pub mod paths;
pub mod roster;
pub mod rules;
pub mod translator;

use crate::canonical::sha256_hex;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::{self, Manifest};
use crate::plan::{self, InputRecord, Job, Plan, RetryPolicy, RunInfo, Stage};
use crate::policy;
use crate::provider::{self, ProviderOptions};
use crate::schema::{self, SchemaKind};
use crate::source::{Format, SourceFile};
use paths::{PathProblem, Resolved};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// What `okstra plan` was asked to do.
#[derive(Debug, Clone)]
pub struct Request {
    pub project_root: PathBuf,
    pub manifest: PathBuf,
    pub spec: Option<PathBuf>,
    pub workers: Vec<String>,
    /// The timestamp to stamp on the plan (injected so tests are stable).
    pub created_at: String,
}

/// One worker entry of the spec after `defaults` were applied, with where
/// each of its values came from.
pub struct Entry {
    pub stage: usize,
    pub pointer: String,
    pub values: Map<String, Value>,
    /// Where each key of `values` (in its order) points. Pointers are made
    /// when asked for: a string per key of every entry was once most of a
    /// large spec's memory.
    origin: Vec<Origin>,
    /// Built from a translator reservation (SPEC §3.5), the one way a
    /// translator job may be planned.
    pub reserved: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `pointer/<key>`.
    Own,
    /// `/defaults/<key>`.
    Default,
    /// `pointer` itself (a derived value).
    Entry,
}

impl Entry {
    /// An entry read from somewhere other than a spec (a team-state row, a
    /// reservation): `located` keys point at `pointer/<key>`, the others
    /// (derived values) at `pointer` itself.
    pub fn synthetic(
        pointer: &str,
        values: Map<String, Value>,
        located: &[&str],
        reserved: bool,
    ) -> Entry {
        let origin = values
            .keys()
            .map(|k| {
                if located.contains(&k.as_str()) {
                    Origin::Own
                } else {
                    Origin::Entry
                }
            })
            .collect();
        Entry {
            stage: 0,
            pointer: pointer.to_string(),
            values,
            origin,
            reserved,
        }
    }

    /// The pointer of a key's value (its own or the default's), or of the
    /// entry itself when the key is absent.
    pub fn ptr(&self, key: &str) -> String {
        let origin = self
            .values
            .keys()
            .position(|k| k == key)
            .and_then(|i| self.origin.get(i).copied())
            .unwrap_or(Origin::Entry);
        match origin {
            Origin::Own => format!("{}/{}", self.pointer, escape(key)),
            Origin::Default => format!("/defaults/{}", escape(key)),
            Origin::Entry => self.pointer.clone(),
        }
    }

    pub fn str(&self, key: &str) -> &str {
        model::str_of_map(&self.values, key)
    }

    pub fn strings(&self, key: &str) -> Vec<String> {
        self.values
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    }
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
}

impl Ctx {
    pub fn new(root: PathBuf) -> Self {
        Ctx {
            root,
            diags: Diagnostics::default(),
            inputs: BTreeMap::new(),
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

    pub fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Record an input file's digest (kind, project-relative display path).
    pub fn record_input(&mut self, kind: &str, display: &str, bytes: &[u8]) {
        self.inputs
            .insert((kind.to_string(), display.to_string()), sha256_hex(bytes));
    }

    pub fn take_inputs(&mut self) -> Vec<InputRecord> {
        std::mem::take(&mut self.inputs)
            .into_iter()
            .map(|((kind, path), sha256)| InputRecord { kind, path, sha256 })
            .collect()
    }

    /// Load a JSON/TOML input, recording its digest; problems become
    /// diagnostics.
    pub fn load(
        &mut self,
        kind: &str,
        display: &str,
        path: &Path,
        format: Format,
    ) -> Option<Loaded> {
        match SourceFile::load(display, path, format) {
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
    /// rule of SPEC §2–§3 reports under its own code.
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

    /// Resolve a path an input names, reporting `path/escapes-root`.
    pub fn resolve(
        &mut self,
        src: &SourceFile,
        value: &str,
        pointer: &str,
        allow_outside: bool,
    ) -> Option<Resolved> {
        match paths::resolve(&self.root, value, allow_outside) {
            Ok(r) => Some(r),
            Err(PathProblem::Empty) => None,
            Err(PathProblem::EscapesRoot { resolved }) => {
                let d = self
                    .at(
                        src,
                        Code::PathEscapesRoot,
                        format!(
                            "`{value}` resolves to {}, outside the project root {}",
                            resolved.display(),
                            self.root.display()
                        ),
                        pointer,
                    )
                    .help("paths are relative to the project root (--project-root); keep them inside it");
                self.push(d);
                None
            }
        }
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

/// The code of a spec's schema complaint: the identity rule's own code where
/// one covers the key (an editor flags `attempt = 0` from the schema; okstra
/// calls it `identity/bad-attempt`), else `schema/violation`.
fn rule_code_for(err: &schema::SchemaError) -> Code {
    if err.keyword == "additionalProperties" {
        return Code::SchemaViolation;
    }
    let key = err.pointer.rsplit('/').next().unwrap_or("");
    match key {
        "attempt" => Code::IdentityBadAttempt,
        "schemaVersion" | "executionIdentityVersion" => Code::IdentityUnsupportedVersion,
        "workerId" if err.keyword == "not" => Code::IdentityMixedVersions,
        k if identity::IDENTITY_KEYS.contains(&k) && err.keyword == "minLength" => {
            Code::IdentityMissingField
        }
        _ => Code::SchemaViolation,
    }
}

/// The run facts every mode needs, read from the manifest.
pub struct RunFacts {
    pub manifest: Loaded,
    pub manifest_display: String,
    pub info: RunInfo,
}

fn load_run(ctx: &mut Ctx, req: &Request) -> Option<RunFacts> {
    let display = paths::display_for(&ctx.root, &req.manifest);
    let loaded = ctx.load("manifest", &display, &req.manifest, Format::Json)?;
    ctx.schema_check(SchemaKind::Manifest, &loaded, &|_| false);
    let m = Manifest::new(&loaded.doc);
    let team_state = m.str("teamStatePath").to_string();
    let team = if team_state.is_empty() {
        None
    } else {
        ctx.resolve(&loaded.src, &team_state, "/teamStatePath", false)
    };
    let sibling = |name: &str| -> String {
        team.as_ref()
            .map(|t| {
                let parent = Path::new(&t.display).parent().unwrap_or(Path::new(""));
                paths::to_slash(&parent.join(name))
            })
            .unwrap_or_default()
    };
    let mut optional = |key: &str, default: String| -> String {
        let v = m.str(key);
        if v.is_empty() {
            return default;
        }
        ctx.resolve(&loaded.src, v, &format!("/{key}"), false)
            .map(|r| r.display)
            .unwrap_or_default()
    };
    let lead_events = optional("leadEventsPath", sibling("lead-events.jsonl"));
    let error_log = optional("errorLogPath", sibling("errors.jsonl"));
    let info = RunInfo {
        task_key: m.task_key().to_string(),
        manifest_path: display.clone(),
        team_state_path: team.map(|t| t.display).unwrap_or_default(),
        lead_events_path: lead_events,
        error_log_path: error_log,
        terminal_backend: default_backend(m.terminal_backend()).to_string(),
        workflow_phase: m.workflow_phase().to_string(),
        mode: String::new(),
    };
    Some(RunFacts {
        manifest: loaded,
        manifest_display: display,
        info,
    })
}

/// The backend a job gets when it names none: panes where the manifest's
/// `terminalBackend` asks for them, the CLI wrapper otherwise.
pub fn default_backend(terminal_backend: &str) -> &'static str {
    match terminal_backend {
        "pane" | "tmux-pane" | "cmux-pane" => model::PANE,
        _ => model::CLI_WRAPPER,
    }
}

/// A roster worker left out of the plan before the run, with why (SPEC
/// §3.3). `okstra plan` records these on pristine team-state rows.
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
    let root = paths::canonical_root(&req.project_root);
    let mut ctx = Ctx::new(root.clone());
    let Some(mut run) = load_run(&mut ctx, req) else {
        return Err(ctx.diags);
    };
    let mut skips = Vec::new();
    let stages = match &req.spec {
        Some(spec) => {
            run.info.mode = "spec".into();
            spec_stages(&mut ctx, &run, spec, &req.workers)
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
    if !ctx.diags.is_empty() {
        return Err(ctx.diags);
    }
    let mut plan = Plan {
        format_version: plan::FORMAT_VERSION,
        okstra_version: crate::VERSION.to_string(),
        created_at: req.created_at.clone(),
        project_root: paths::to_slash(&root),
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

fn spec_stages(ctx: &mut Ctx, run: &RunFacts, spec: &Path, only: &[String]) -> Vec<Stage> {
    let display = paths::display_for(&ctx.root, spec);
    let Some(mut loaded) = ctx.load("spec", &display, spec, Format::for_path(spec)) else {
        return Vec::new();
    };
    let (entries, parsed) = check_entries(ctx, &mut loaded);
    let manifest = Manifest::new(&run.manifest.doc);
    let mut stage_jobs: Vec<Vec<Built>> = (0..stage_names(&loaded.doc).len())
        .map(|_| Vec::new())
        .collect();
    // State keys of the entries that parsed, for `--workers`.
    let mut known: Vec<String> = Vec::new();
    for (entry, parsed) in entries.iter().zip(parsed) {
        let Some(parsed) = parsed else {
            // Still check the paths of a refused entry, so one run shows
            // every problem.
            check_entry_paths(ctx, &loaded.src, entry);
            continue;
        };
        known.push(parsed.state_key.clone());
        if !only.is_empty() && !only.contains(&parsed.state_key) {
            continue;
        }
        if let Some(job) = build_job(ctx, run, &manifest, &loaded.src, entry, parsed) {
            stage_jobs[entry.stage].push(Built {
                job,
                entry_pointer: entry.pointer.clone(),
            });
        }
    }
    if !only.is_empty() {
        let unknown: Vec<&String> = only.iter().filter(|w| !known.contains(w)).collect();
        if !unknown.is_empty() {
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
                        unknown
                            .iter()
                            .map(|s| s.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
                .in_file(display.clone())
                .help(format!("the spec's workers are: {}", known.join(", "))),
            );
        }
    }
    let names = stage_names(&loaded.doc);
    rules::check(ctx, &loaded.src, &names, &stage_jobs);
    names
        .into_iter()
        .zip(stage_jobs)
        .filter(|(_, jobs)| !jobs.is_empty())
        .map(|(name, jobs)| Stage {
            name,
            jobs: jobs.into_iter().map(|b| b.job).collect(),
        })
        .collect()
}

/// Identity and schema checks of a spec's entries. Identity goes first: its
/// refusals carry their own codes, and the schema's complaints about the
/// same keys would only repeat them.
fn check_entries(
    ctx: &mut Ctx,
    loaded: &mut Loaded,
) -> (Vec<Entry>, Vec<Option<identity::Parsed>>) {
    // The schema sees the document whole, before the entries take it apart.
    let schema_errors = schema::validate(SchemaKind::Jobs, &loaded.doc);
    let entries = take_entries(&mut loaded.doc);
    let mut parsed = Vec::with_capacity(entries.len());
    let mut covered: HashSet<String> = HashSet::new();
    for entry in &entries {
        match identity::parse(&entry.values) {
            Ok(p) => parsed.push(Some(p)),
            Err(problems) => {
                report_identity(ctx, &loaded.src, entry, problems);
                covered.insert(entry.pointer.clone());
                parsed.push(None);
            }
        }
    }
    ctx.report_schema(SchemaKind::Jobs, &loaded.src, schema_errors, &|err| {
        schema_covered_by_identity(err, &covered)
    });
    (entries, parsed)
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

/// `okstra validate --kind jobs`: the checks a spec passes on its own,
/// without a manifest or the files it names.
/// The document's workers are moved into the entries (see [`take_entries`]).
pub fn check_spec_alone(ctx: &mut Ctx, loaded: &mut Loaded) {
    let (entries, _) = check_entries(ctx, loaded);
    for entry in &entries {
        let kind = entry.str("dispatchKind");
        if let Err(msg) = rules::dispatch_round(kind) {
            let d = ctx
                .at(
                    &loaded.src,
                    Code::RulesReverifyKind,
                    msg,
                    &entry.ptr("dispatchKind"),
                )
                .help("write reverify-r<N> with N >= 1, e.g. reverify-r2");
            ctx.push(with_worker(d, entry));
        }
    }
}

pub fn with_worker(d: Diagnostic, entry: &Entry) -> Diagnostic {
    // Name the worker the way its own identity version does.
    let order = if entry.str("schemaVersion") == "2.0" {
        ["executionLabel", "workerId", "assignmentRef"]
    } else {
        ["workerId", "executionLabel", "assignmentRef"]
    };
    let name = order.iter().map(|k| entry.str(k)).find(|s| !s.is_empty());
    match name {
        Some(n) => d.worker(n),
        None => d,
    }
}

/// Whether an entry the identity rules refused already covers a schema
/// complaint. Looked up by the complaint's pointer prefixes, so a spec with
/// thousands of refused entries and complaints costs a set lookup each.
fn schema_covered_by_identity(
    err: &schema::SchemaError,
    refused_entries: &HashSet<String>,
) -> bool {
    let p = err.pointer.as_str();
    // Whole-entry complaints (required / conditional / not) are what the
    // identity rules already said.
    (refused_entries.contains(p) && err.keyword != "additionalProperties")
        || p.match_indices('/').any(|(i, _)| {
            refused_entries.contains(&p[..i])
                && identity::IDENTITY_KEYS.contains(&p[i + 1..].split('/').next().unwrap_or(""))
        })
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

/// Every worker entry of a spec, `defaults` applied. Each worker's own
/// values are moved out of `doc` (its object is left empty), not copied:
/// a spec is held once, however many workers it has.
pub fn take_entries(doc: &mut Value) -> Vec<Entry> {
    let defaults = doc
        .get("defaults")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    let mut push = |stage: usize, pointer: String, item: &mut Value| {
        let Some(own) = item.as_object_mut() else {
            return;
        };
        let mut values = std::mem::take(own);
        // An entry's own value wins over the default.
        let mut defaulted: Vec<&str> = Vec::new();
        for (k, v) in &defaults {
            if !values.contains_key(k) {
                values.insert(k.clone(), v.clone());
                defaulted.push(k);
            }
        }
        let origin = values
            .keys()
            .map(|k| {
                if defaulted.contains(&k.as_str()) {
                    Origin::Default
                } else {
                    Origin::Own
                }
            })
            .collect();
        out.push(Entry {
            stage,
            pointer,
            values,
            origin,
            reserved: false,
        });
    };
    if let Some(stages) = doc.get_mut("stages").and_then(Value::as_array_mut) {
        for (si, stage) in stages.iter_mut().enumerate() {
            if let Some(workers) = stage.get_mut("workers").and_then(Value::as_array_mut) {
                for (wi, item) in workers.iter_mut().enumerate() {
                    push(si, format!("/stages/{si}/workers/{wi}"), item);
                }
            }
        }
    } else if let Some(workers) = doc.get_mut("workers").and_then(Value::as_array_mut) {
        for (wi, item) in workers.iter_mut().enumerate() {
            push(0, format!("/workers/{wi}"), item);
        }
    }
    out
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn check_entry_paths(ctx: &mut Ctx, src: &SourceFile, entry: &Entry) {
    let prompt = entry.str("promptPath");
    if !prompt.is_empty() {
        if let Some(r) = ctx.resolve(src, prompt, &entry.ptr("promptPath"), false) {
            require_file(ctx, src, entry, &r, "promptPath");
        }
    }
    for key in ["resultPath", "workerResultPath"] {
        let v = entry.str(key);
        if !v.is_empty() {
            ctx.resolve(src, v, &entry.ptr(key), false);
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
        .help("create the file, or fix the path (relative to the project root)");
    ctx.push(with_worker(d, entry));
    false
}

/// Build one job from an entry (a spec entry with defaults applied, a
/// team-state roster row, or a translator reservation): every mode goes
/// through here, so a job means the same thing whatever it was planned from.
pub fn build_job(
    ctx: &mut Ctx,
    run: &RunFacts,
    manifest: &Manifest,
    src: &SourceFile,
    entry: &Entry,
    parsed: identity::Parsed,
) -> Option<Job> {
    let mut ok = true;
    let key = parsed.state_key.clone();
    let provider = match entry.str("provider") {
        "" => match &parsed.identity {
            plan::Identity::V1 { worker_id } => provider::default_for_worker_id(worker_id)
                .unwrap_or("")
                .to_string(),
            plan::Identity::V2(_) => String::new(),
        },
        p => p.to_string(),
    };
    if provider.is_empty() {
        let d = ctx
            .at(
                src,
                Code::IdentityMissingField,
                format!("worker `{key}` needs `provider`: only the worker ids claude, codex and gemini imply one"),
                &entry.pointer,
            )
            .help("add provider = \"claude\" | \"codex\" | \"gemini\" | \"command\"");
        ctx.push(with_worker(d, entry));
        ok = false;
    }
    let prompt = ctx.resolve(
        src,
        entry.str("promptPath"),
        &entry.ptr("promptPath"),
        false,
    );
    let prompt = match prompt {
        Some(p) if require_file(ctx, src, entry, &p, "promptPath") => Some(p),
        _ => {
            ok = false;
            None
        }
    };
    let result_value = entry.str("resultPath");
    if result_value.is_empty() {
        let d = ctx
            .at(
                src,
                Code::SchemaViolation,
                format!("worker `{key}` needs `resultPath`, the file it must write"),
                &entry.pointer,
            )
            .help("add resultPath = \"<file the worker writes>\"");
        ctx.push(with_worker(d, entry));
        ok = false;
    }
    let result = ctx.resolve(src, result_value, &entry.ptr("resultPath"), false);
    let worker_result = match entry.str("workerResultPath") {
        "" => result.clone(),
        v => ctx.resolve(src, v, &entry.ptr("workerResultPath"), false),
    };
    let mut completion = Vec::new();
    if entry.values.contains_key("completionPaths") {
        for (i, v) in entry.strings("completionPaths").iter().enumerate() {
            let ptr = format!("{}/{i}", entry.ptr("completionPaths"));
            match ctx.resolve(src, v, &ptr, false) {
                Some(r) => completion.push(r.display),
                None => ok = false,
            }
        }
    } else {
        for r in [&result, &worker_result].into_iter().flatten() {
            if !completion.contains(&r.display) {
                completion.push(r.display.clone());
            }
        }
    }
    let worktree = match entry.str("worktreePath") {
        "" => None,
        v => ctx.resolve(src, v, &entry.ptr("worktreePath"), true),
    };
    let mut aux = Vec::new();
    for (i, v) in entry.strings("auxiliaryRoots").iter().enumerate() {
        let ptr = format!("{}/{i}", entry.ptr("auxiliaryRoots"));
        if let Some(r) = ctx.resolve(src, v, &ptr, true) {
            aux.push(r.display);
        }
    }
    let mut planned = Vec::new();
    for (i, v) in entry.strings("plannedPaths").iter().enumerate() {
        let ptr = format!("{}/{i}", entry.ptr("plannedPaths"));
        // `dir/*/..` cannot be folded without knowing what `*` matched:
        // folding it lexically would widen the pattern (`src/*/../../x` is
        // not `x` unless `src` has a subdirectory). Refuse it.
        if policy::is_glob(v) && policy::normalise(v).is_none() {
            let d = ctx
                .at(
                    src,
                    Code::PathEscapesRoot,
                    format!("planned path `{v}` climbs out with `..` above the project root or past a glob"),
                    &ptr,
                )
                .help("write the pattern without `..`, e.g. `src/**/*.rs`");
            ctx.push(with_worker(d, entry));
            ok = false;
            continue;
        }
        if let Some(r) = ctx.resolve(src, v, &ptr, false) {
            planned.push(r.display);
        }
    }
    let (Some(prompt), Some(result), Some(worker_result)) = (prompt, result, worker_result) else {
        return None;
    };
    match std::fs::read(&prompt.abs) {
        Ok(bytes) => ctx.record_input("prompt", &prompt.display, &bytes),
        Err(e) => {
            let d = ctx
                .at(
                    src,
                    Code::InputUnreadable,
                    format!("cannot read prompt {}: {e}", prompt.display),
                    &entry.ptr("promptPath"),
                )
                .help("make the prompt readable by the user running okstra");
            ctx.push(with_worker(d, entry));
            return None;
        }
    }
    if !ok {
        return None;
    }

    let meta = authority::load_metadata(ctx, &prompt);
    let mut dispatch_kind = entry.str("dispatchKind").to_string();
    if dispatch_kind.is_empty() {
        dispatch_kind = "initial".into();
    }
    let round = match rules::dispatch_round(&dispatch_kind) {
        Ok(r) => r,
        Err(msg) => {
            let d = ctx
                .at(
                    src,
                    Code::RulesReverifyKind,
                    msg,
                    &entry.ptr("dispatchKind"),
                )
                .help("write reverify-r<N> with N >= 1, e.g. reverify-r2");
            ctx.push(with_worker(d, entry));
            return None;
        }
    };
    let invocation = meta.as_ref().and_then(|m| authority::invocation_of(ctx, m));
    let audience = match entry.str("audience") {
        "" => invocation
            .as_ref()
            .map(|i| i.audience.clone())
            .unwrap_or_default(),
        a => a.to_string(),
    };
    let model_value = match entry.str("modelExecutionValue") {
        "" => meta
            .as_ref()
            .map(|m| authority::metadata_model_value(&m.loaded.doc).to_string())
            .unwrap_or_default(),
        v => v.to_string(),
    };
    let role = entry.str("role").to_string();
    let backend = match entry.str("backend") {
        "" => run.info.terminal_backend.clone(),
        b => b.to_string(),
    };

    let mut job = Job {
        key: key.clone(),
        identity: parsed.identity,
        provider: provider.clone(),
        backend,
        role: role.clone(),
        audience,
        dispatch_kind,
        round,
        prompt_path: prompt.display.clone(),
        metadata_path: meta.as_ref().map(|m| m.display.clone()),
        result_path: result.display.clone(),
        worker_result_path: worker_result.display.clone(),
        completion_paths: completion,
        worktree_path: worktree.as_ref().map(|w| w.display.clone()),
        model_execution_value: model_value,
        dispatch_id: None,
        invocation,
        command: Vec::new(),
        provider_command: Vec::new(),
        takes_session_id: provider::takes_session_id(&provider),
        env: entry
            .values
            .get("env")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                    .collect()
            })
            .unwrap_or_default(),
        idle_timeout_seconds: entry
            .values
            .get("idleTimeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(600),
        timeout_seconds: entry.values.get("timeoutSeconds").and_then(Value::as_u64),
        liveness_mode: "wrapper-status".into(),
        write_policy: plan::WritePolicy {
            role: String::new(),
            allow: Vec::new(),
            digest: String::new(),
        },
        write_enforcement: plan::WriteEnforcement {
            mutation_audit: match entry.str("mutationAudit") {
                "" => "batch".into(),
                m => m.to_string(),
            },
        },
    };
    job.dispatch_id = job.dispatch_id_for(job.first_attempt());

    if let Some(meta) = &meta {
        authority::check_metadata(ctx, manifest, meta, &job);
        if manifest.is_v2() {
            authority::check_v2_job(ctx, manifest, meta, &job, entry, src);
        }
    } else if manifest.is_v2() && job.identity.v2().is_some() {
        let d = ctx
            .at(
                src,
                Code::AuthorityMetadataVersion,
                format!(
                    "v2 worker `{}` has no invocation metadata beside its prompt ({}.meta.json)",
                    job.label(),
                    job.prompt_path
                ),
                &entry.ptr("promptPath"),
            )
            .help("the lead writes <prompt>.meta.json with the v2 identity before planning");
        ctx.push(with_worker(d, entry));
    }
    if manifest.is_v2() && !entry.reserved {
        authority::check_translator(ctx, manifest, &job, entry, src);
    }

    let mut planned_all = planned;
    if role == "implementer" {
        for p in manifest.planned_paths() {
            if !planned_all.contains(&p) {
                planned_all.push(p);
            }
        }
    }
    let artifacts = artifact_paths(&job);
    job.write_policy = policy::build(&policy::PolicyInputs {
        role: &role,
        artifacts: &artifacts,
        worktree: job.worktree_path.as_deref(),
        planned_paths: &planned_all,
        auxiliary_roots: &aux,
    });

    let options = ProviderOptions {
        permission_mode: non_empty(entry.str("permissionMode")),
        sandbox_mode: non_empty(entry.str("sandboxMode")),
        approval_mode: non_empty(entry.str("approvalMode")),
        extra_args: entry.strings("extraArgs"),
    };
    let command = entry.strings("command");
    if provider == "command" && command.is_empty() {
        let d = ctx
            .at(
                src,
                Code::SchemaViolation,
                format!("worker `{key}` has provider = \"command\" but no `command` argv"),
                &entry.ptr("provider"),
            )
            .help("add command = [\"program\", \"arg\", ...]");
        ctx.push(with_worker(d, entry));
        return None;
    }
    let root = ctx.root.clone();
    let dirs = write_dirs(&root, &job, &aux);
    job.provider_command = provider_argv(&root, &job, &options, &command, &dirs);
    job.command = wrapper_command(&root, &job, &options, &command, &dirs);
    if let Some(model_ref) = selected_model_ref(manifest, &job) {
        // The served-model check (SPEC §6): the wrapper reads the catalog
        // entry from the manifest exec verified unchanged before starting.
        let split = job
            .command
            .iter()
            .position(|a| a == "--")
            .unwrap_or(job.command.len());
        job.command.splice(
            split..split,
            [
                "--manifest".to_string(),
                run.info.manifest_path.clone(),
                "--model-ref".to_string(),
                model_ref,
            ],
        );
    }
    Some(job)
}

/// The catalog entry an agent job was bound to, for the wrapper's
/// served-model check: a v2 job's role execution `modelRef`; a v1 job's
/// model execution value where the catalog holds it (as a key or a
/// `modelId`) for the same provider. `command` jobs report no model.
fn selected_model_ref(manifest: &Manifest, job: &Job) -> Option<String> {
    if job.provider == "command" || !provider::is_known(&job.provider) {
        return None;
    }
    if let Some(v2) = job.identity.v2() {
        let re = manifest.role_execution(&v2.role_execution_ref)?;
        let model_ref = model::str_of(re, "modelRef");
        return (!model_ref.is_empty() && manifest.model(model_ref).is_some())
            .then(|| model_ref.to_string());
    }
    let value = job.model_execution_value.as_str();
    if value.is_empty() {
        return None;
    }
    let models = manifest.doc.get("models")?.as_object()?;
    let same_provider = |m: &Value| model::str_of(m, "provider") == job.provider;
    if models.get(value).is_some_and(same_provider) {
        return Some(value.to_string());
    }
    models
        .iter()
        .find(|(_, m)| model::str_of(m, "modelId") == value && same_provider(m))
        .map(|(k, _)| k.clone())
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The files every worker may write: its results and okstra's sidecars.
pub fn artifact_paths(job: &Job) -> Vec<String> {
    let mut out = vec![
        job.result_path.clone(),
        job.worker_result_path.clone(),
        job.audit_sidecar_path(),
        job.status_path(),
        job.log_path(),
        job.error_sidecar_path(),
    ];
    out.extend(job.completion_paths.iter().cloned());
    out.sort();
    out.dedup();
    out
}

/// Directories the provider CLI must be allowed to write besides the root.
fn write_dirs(root: &Path, job: &Job, aux: &[String]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(w) = &job.worktree_path {
        dirs.push(paths::abs_of(root, w));
    }
    for a in aux {
        dirs.push(paths::abs_of(root, a));
    }
    dirs.retain(|d| d != root);
    dirs.dedup();
    dirs
}

fn provider_argv(
    root: &Path,
    job: &Job,
    options: &ProviderOptions,
    command: &[String],
    dirs: &[PathBuf],
) -> Vec<String> {
    provider::build_argv(&provider::ArgvRequest {
        provider: &job.provider,
        model: &job.model_execution_value,
        project_root: root,
        write_dirs: dirs,
        options,
        command,
        session_id: None,
        project_is_git_repo: root.join(".git").exists(),
    })
}

/// `okstra worker ...` for this job, without the per-attempt flags exec adds
/// (`--attempt`, `--dispatch-id`, `--session-id`), which go before `--`.
fn wrapper_command(
    root: &Path,
    job: &Job,
    options: &ProviderOptions,
    command: &[String],
    dirs: &[PathBuf],
) -> Vec<String> {
    let mut argv: Vec<String> = vec![
        "okstra".into(),
        "worker".into(),
        "--project-root".into(),
        paths::to_slash(root),
        "--provider".into(),
        job.provider.clone(),
        "--model".into(),
        job.model_execution_value.clone(),
        "--prompt".into(),
        job.prompt_path.clone(),
        "--result".into(),
        job.result_path.clone(),
        "--worker-result".into(),
        job.worker_result_path.clone(),
        "--worker-key".into(),
        job.key.clone(),
        "--presentation".into(),
        if job.backend == model::PANE {
            "live"
        } else {
            "quiet"
        }
        .into(),
    ];
    if let Some(meta) = &job.metadata_path {
        argv.extend(["--invocation-metadata".into(), meta.clone()]);
    }
    if let Some(t) = job.timeout_seconds {
        argv.extend(["--timeout-seconds".into(), t.to_string()]);
    }
    for d in dirs {
        argv.extend(["--write-dir".into(), paths::to_slash(d)]);
    }
    for (flag, value) in [
        ("--permission-mode", &options.permission_mode),
        ("--sandbox-mode", &options.sandbox_mode),
        ("--approval-mode", &options.approval_mode),
    ] {
        if let Some(v) = value {
            argv.extend([flag.to_string(), v.clone()]);
        }
    }
    for a in &options.extra_args {
        argv.push(format!("--extra-arg={a}"));
    }
    if job.provider == "command" {
        argv.push("--".into());
        argv.extend(command.iter().cloned());
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_point_at_their_own_keys_or_the_defaults() {
        let mut doc = json!({
            "defaults": {"role": "analyst", "idleTimeoutSeconds": 30, "a/b": 1},
            "stages": [{"name": "s", "workers": [
                {"workerId": "w", "role": "verifier", "x~y": 2},
                "not an object",
            ]}]
        });
        let entries = take_entries(&mut doc);
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(e.pointer, "/stages/0/workers/0");
        assert_eq!(e.str("role"), "verifier");
        assert_eq!(e.ptr("role"), "/stages/0/workers/0/role");
        assert_eq!(e.ptr("x~y"), "/stages/0/workers/0/x~0y");
        assert_eq!(e.ptr("idleTimeoutSeconds"), "/defaults/idleTimeoutSeconds");
        assert_eq!(e.ptr("a/b"), "/defaults/a~1b");
        assert_eq!(e.ptr("absent"), "/stages/0/workers/0");
        // The worker was moved out of the document, not copied.
        assert_eq!(doc["stages"][0]["workers"][0], json!({}));
        assert_eq!(doc["stages"][0]["name"], "s");

        let values = json!({"provider": "codex", "derived": 1});
        let e = Entry::synthetic(
            "/workers/3",
            values.as_object().unwrap().clone(),
            &["provider"],
            false,
        );
        assert_eq!(e.ptr("provider"), "/workers/3/provider");
        assert_eq!(e.ptr("derived"), "/workers/3");
    }

    #[test]
    fn schema_complaints_covered_by_refused_entries() {
        let refused: HashSet<String> =
            ["/workers/1".to_string(), "/stages/0/workers/2".to_string()]
                .into_iter()
                .collect();
        let err = |pointer: &str, keyword: &str| schema::SchemaError {
            pointer: pointer.into(),
            message: String::new(),
            keyword: keyword.into(),
        };
        let covered = |p: &str, k: &str| schema_covered_by_identity(&err(p, k), &refused);
        assert!(covered("/workers/1", "required"));
        assert!(!covered("/workers/1", "additionalProperties"));
        assert!(covered("/workers/1/attempt", "minimum"));
        assert!(covered("/workers/1/schemaVersion/x", "type"));
        assert!(covered("/stages/0/workers/2/workerId", "not"));
        assert!(!covered("/workers/12/attempt", "minimum"));
        assert!(!covered("/workers/1/idleTimeoutSeconds", "type"));
        assert!(!covered("/workers/3/attempt", "minimum"));
        assert!(!covered("", "oneOf"));
    }
}
