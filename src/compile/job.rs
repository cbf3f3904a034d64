//! One job from one entry (a spec entry with defaults applied, a team-state
//! roster row, or a translator reservation): every mode goes through
//! [`build_job`], so a job means the same thing whatever it was planned
//! from. The steps run in a fixed order, because the diagnostics of one
//! entry come out in the order the steps find them:
//!
//! 1. provider (named, or implied by a v1 worker id),
//! 2. paths (prompt, results, completion, worktree, auxiliary roots,
//!    planned paths) and the prompt's digest,
//! 3. invocation metadata and dispatch kind,
//! 4. what the job claims (audience, model, role, ...), checked against
//!    the metadata and the manifest,
//! 5. the job: write policy, provider argv, wrapper command (the last two
//!    only while the plan may still be made).

use super::authority::{self, Claim, Meta};
use super::raw::Reported;
use super::rules::Facts;
use super::{identity, require_file, with_worker, worktree, Ctx, Entry, RunFacts};
use crate::diag::Code;
use crate::model::{self, Manifest};
use crate::paths::{self, Field, Resolved};
use crate::plan::{self, Identity, Invocation, Job};
use crate::policy;
use crate::provider::{self, Provider, ProviderOptions};
use crate::source::SourceFile;
use crate::vocab::{
    Audience, Backend, Confinement, DispatchKind, MutationAudit, NetworkMode, Role,
};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The idle timeout of a job that names none (docs/spec-format.md#worker-keys).
pub(crate) const DEFAULT_IDLE_TIMEOUT_SECONDS: u64 = 600;

/// How a job's liveness is judged: the wrapper's status sidecar.
const LIVENESS_MODE: &str = "wrapper-status";

/// Build one job, reporting every problem of its entry on the way.
pub fn build_job(
    ctx: &mut Ctx,
    run: &RunFacts,
    manifest: &Manifest,
    src: &SourceFile,
    entry: &Entry,
    parsed: identity::Parsed,
) -> Option<Job> {
    let provider = resolve_provider(ctx, src, entry, &parsed);
    let paths = resolve_paths(ctx, src, entry, &parsed.state_key, Prompt::Read);
    let git = worktree::plan_entry(ctx, run, src, entry, &parsed.state_key);
    let (provider, mut paths, git) = (provider?, paths?, git?);
    if let Some((path, _)) = &git {
        paths.worktree = Some(Resolved {
            abs: ctx.root.join(path),
            display: path.clone(),
        });
    }
    let meta = authority::load_metadata(ctx, &paths.prompt);
    let dispatch_kind = resolve_dispatch_kind(ctx, src, entry)?;
    let described = Described::of(entry, meta.as_ref(), dispatch_kind);
    let claim = described.claim(&parsed.identity, provider.text(), &paths.prompt.display);
    check_claim(ctx, manifest, src, entry, meta.as_ref(), &claim);
    // A provider okstra has no adapter for was reported where it was read.
    let NamedProvider::Known(provider) = provider else {
        return None;
    };
    let meta_path = meta.map(|m| m.display);
    let mut job = assemble(run, entry, parsed, provider, &paths, meta_path, described);
    job.git_worktree = git.map(|(_, record)| record);
    let planned = planned_paths(&job.role, paths.planned.clone(), &run.planned_paths);
    let planned = worktree::granted_planned(job.git_worktree.is_some(), planned);
    job.write_policy = write_policy(&job, &planned, &paths.aux);
    let command = command_argv(ctx, src, entry, job.provider, &job.key)?;
    // A refused plan is never written, and the batch rules read no
    // command: a spec refused for thousands of entries once worked out
    // every job's argv only to drop it.
    if !ctx.refused() {
        let root = ctx.root.clone();
        set_commands(&mut job, &root, run, manifest, entry, &command, &paths.aux);
    }
    Some(job)
}

/// The steps of [`build_job`] that need nothing but the spec: the
/// provider, a result path, a `command` worker's argv and the dispatch
/// kind. `okstra plan` and `okstra validate` run them on every entry whose
/// identity parsed, before the schema check, and note what they reported
/// in `reported`: the schema carries the same rules for editors, and its
/// complaint says less than the rule's (`build_job` finds these again
/// later; the second report of the same diagnostic is dropped).
pub fn check_alone(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    parsed: &identity::Parsed,
    reported: &mut Reported,
) {
    let provider = resolve_provider(ctx, src, entry, parsed);
    if provider.is_none() {
        reported.missing(&entry.pointer, "provider");
    }
    if entry.fields.result_path.is_none() {
        report_missing_result(ctx, src, entry, &parsed.state_key);
        reported.missing(&entry.pointer, "resultPath");
    }
    if let Some(NamedProvider::Known(p)) = provider {
        if command_argv(ctx, src, entry, p, &parsed.state_key).is_none() {
            reported.missing(&entry.pointer, "command");
        }
    }
    if resolve_dispatch_kind(ctx, src, entry).is_none() {
        reported.value(&entry.ptr("dispatchKind"));
    }
    check_network(ctx, src, entry);
    worktree::check_keys(ctx, src, entry);
}

/// Each `network.allow` entry must be a rule the egress proxy can apply
/// (docs/confinement.md#network).
fn check_network(ctx: &mut Ctx, src: &SourceFile, entry: &Entry) {
    let Some(network) = &entry.fields.network else {
        return;
    };
    for (k, item) in network.allow().iter().enumerate() {
        if let Err(e) = crate::egress::Allow::parse(std::slice::from_ref(item)) {
            let d = ctx
                .at(
                    src,
                    Code::NetworkBadRule,
                    format!("`network.allow` entry `{item}` is not a rule: {e}"),
                    &format!("{}/allow/{k}", entry.ptr("network")),
                )
                .help("write a host (`api.example.com`), its subdomains (`*.example.com`), a `host:port`, or an IP address; a host without a port allows 443 and 80");
            ctx.push(with_worker(d, entry));
        }
    }
}

/// A job as the spec alone describes it, for the batch rules `okstra
/// validate` runs: [`check_alone`]'s steps and the paths, as `build_job`
/// takes them but without reading the prompt (so where they land), its
/// audience as the entry gives it (plan may take one from the metadata),
/// its write policy without the manifest's planned paths, and no dispatch
/// id (that comes from the metadata's invocation id). `None` where plan
/// would refuse the entry from the spec alone (every problem reported).
pub fn sketch(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    parsed: &identity::Parsed,
) -> Option<Facts> {
    let provider = resolve_provider(ctx, src, entry, parsed);
    let paths = resolve_paths(ctx, src, entry, &parsed.state_key, Prompt::Unread);
    let dispatch_kind = resolve_dispatch_kind(ctx, src, entry);
    let (NamedProvider::Known(provider), paths, _) = (provider?, paths?, dispatch_kind?) else {
        return None;
    };
    command_argv(ctx, src, entry, provider, &parsed.state_key)?;
    if !worktree::check_keys(ctx, src, entry) {
        return None;
    }
    let f = &entry.fields;
    let role = Role::from(f.role.clone().unwrap_or_default());
    // The task key is the manifest's: without one, the worktree of each
    // job is still its own, which is all the batch rules ask.
    let git = f
        .git_worktree()
        .then(|| worktree::worktree_path("", &parsed.state_key));
    let worktree = git
        .as_deref()
        .or(paths.worktree.as_ref().map(|w| w.display.as_str()));
    let planned = worktree::granted_planned(git.is_some(), paths.planned);
    let artifacts = artifacts(
        &paths.prompt.display,
        &paths.result.display,
        &paths.worker_result.display,
        &paths.completion,
    );
    let write_policy = policy::build(&policy::PolicyInputs {
        role: &role,
        artifacts: &artifacts,
        worktree,
        planned_paths: &planned,
        auxiliary_roots: &paths.aux,
    });
    Some(Facts {
        key: parsed.state_key.as_str().into(),
        label: parsed.identity.label().into(),
        role,
        audience: choose_audience(f.audience.as_deref(), None),
        dispatch_id: None,
        allow: write_policy.allow.into_iter().map(Into::into).collect(),
        entry_pointer: entry.pointer.as_str().into(),
    })
}

/// The provider an entry names, as written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum NamedProvider {
    Known(Provider),
    /// A name okstra has no adapter for: the schema (spec mode) or the
    /// roster and translator checks reported it already.
    Unknown(String),
}

impl NamedProvider {
    fn text(&self) -> &str {
        match self {
            NamedProvider::Known(p) => p.as_str(),
            NamedProvider::Unknown(name) => name,
        }
    }
}

/// The entry's `provider`, else the one a v1 worker id implies
/// (docs/spec-format.md#execution-identity); `None` when there is neither.
fn provider_of(named: Option<&str>, identity: &Identity) -> Option<NamedProvider> {
    match named {
        Some(name) => Some(match name.parse() {
            Ok(p) => NamedProvider::Known(p),
            Err(_) => NamedProvider::Unknown(name.to_string()),
        }),
        None => match identity {
            Identity::V1 { worker_id } => {
                Provider::for_worker_id(worker_id).map(NamedProvider::Known)
            }
            Identity::V2(_) => None,
        },
    }
}

/// Step 1: the provider, or `identity/missing-field` when there is none.
fn resolve_provider(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    parsed: &identity::Parsed,
) -> Option<NamedProvider> {
    let provider = provider_of(entry.fields.provider.as_deref(), &parsed.identity);
    if provider.is_none() {
        let d = ctx
            .at(
                src,
                Code::IdentityMissingField,
                format!("worker `{}` needs `provider`: only the worker ids claude, codex and gemini imply one", parsed.state_key),
                &entry.pointer,
            )
            .help("add provider = \"claude\" | \"codex\" | \"gemini\" | \"command\"");
        ctx.push(with_worker(d, entry));
    }
    provider
}

/// Every path of a job, resolved.
struct JobPaths {
    prompt: Resolved,
    result: Resolved,
    worker_result: Resolved,
    completion: Vec<String>,
    worktree: Option<Resolved>,
    aux: Vec<String>,
    planned: Vec<String>,
}

/// Whether resolving a job's paths reads its prompt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Prompt {
    /// Planning: the prompt must exist, and its digest is recorded.
    Read,
    /// `okstra validate`: where the prompt lands is judged, not the file.
    Unread,
}

/// Step 2: resolve every path the entry names and record the prompt's
/// digest. `None` when a path the job cannot do without is missing or
/// refused; every problem is reported either way.
fn resolve_paths(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    key: &str,
    read: Prompt,
) -> Option<JobPaths> {
    let mut ok = true;
    let f = &entry.fields;
    let prompt = f
        .prompt_path
        .as_deref()
        .and_then(|v| ctx.resolve(src, v, &entry.ptr("promptPath"), Field::File))
        .filter(|p| read == Prompt::Unread || require_file(ctx, src, entry, p, "promptPath"));
    ok &= prompt.is_some();
    if f.result_path.is_none() {
        report_missing_result(ctx, src, entry, key);
        ok = false;
    }
    let result = f
        .result_path
        .as_deref()
        .and_then(|v| resolve_output(ctx, src, entry, "resultPath", v));
    let worker_result = match f.worker_result_path.as_deref() {
        None => result.clone(),
        Some(v) => resolve_output(ctx, src, entry, "workerResultPath", v),
    };
    ok &= f.worker_result_path.is_none() || worker_result.is_some();
    let completion = match &f.completion_paths {
        Some(listed) => {
            let base = entry.ptr("completionPaths");
            let resolved: Vec<String> = listed
                .iter()
                .enumerate()
                .filter_map(|(i, v)| resolve_output(ctx, src, entry, &format!("{base}/{i}"), v))
                .map(|r| r.display)
                .collect();
            ok &= resolved.len() == listed.len();
            resolved
        }
        None => default_completion(result.as_ref(), worker_result.as_ref()),
    };
    let worktree = f
        .worktree_path
        .as_deref()
        .and_then(|v| ctx.resolve(src, v, &entry.ptr("worktreePath"), Field::Scope));
    ok &= f.worktree_path.is_none() || worktree.is_some();
    let aux = resolve_list(
        ctx,
        src,
        entry,
        "auxiliaryRoots",
        &f.auxiliary_roots,
        &mut ok,
    );
    let planned = resolve_planned(ctx, src, entry, &mut ok);
    let (Some(prompt), Some(result), Some(worker_result)) = (prompt, result, worker_result) else {
        return None;
    };
    if (read == Prompt::Read && !record_prompt(ctx, src, entry, &prompt)) || !ok {
        return None;
    }
    Some(JobPaths {
        prompt,
        result,
        worker_result,
        completion,
        worktree,
        aux,
        planned,
    })
}

/// `schema/violation`: the entry names no result path (its own or the
/// default's).
fn report_missing_result(ctx: &mut Ctx, src: &SourceFile, entry: &Entry, key: &str) {
    let d = ctx
        .at(
            src,
            Code::SchemaViolation,
            format!("worker `{key}` needs `resultPath`, the file it must write"),
            &entry.pointer,
        )
        .help("add resultPath = \"<file the worker writes>\"");
    ctx.push(with_worker(d, entry));
}

/// A file the worker writes (`key` is the key, or the pointer of a list
/// item): resolved, and not an existing directory, which would count as
/// written before the worker ran.
fn resolve_output(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    key: &str,
    value: &str,
) -> Option<Resolved> {
    let pointer = if key.starts_with('/') {
        key.to_string()
    } else {
        entry.ptr(key)
    };
    let r = ctx.resolve(src, value, &pointer, Field::File)?;
    if r.abs.is_dir() {
        let d = super::raw::invalid_path(
            ctx,
            src,
            value,
            &pointer,
            &format!(
                "names the directory {}, where a file is expected",
                r.display
            ),
        );
        ctx.push(with_worker(d, entry));
        return None;
    }
    Some(r)
}

/// The resolved displays of a list of write scopes; those refused are
/// reported and left out, and the job with them.
fn resolve_list(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    key: &str,
    values: &[String],
    ok: &mut bool,
) -> Vec<String> {
    let base = entry.ptr(key);
    let out: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| ctx.resolve(src, v, &format!("{base}/{i}"), Field::Scope))
        .map(|r| r.display)
        .collect();
    *ok &= out.len() == values.len();
    out
}

/// The completion paths of an entry that lists none: the distinct result
/// and worker result.
fn default_completion(result: Option<&Resolved>, worker_result: Option<&Resolved>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in [result, worker_result].into_iter().flatten() {
        if !out.contains(&r.display) {
            out.push(r.display.clone());
        }
    }
    out
}

/// Planned paths, resolved; a glob that climbs with `..` is refused.
fn resolve_planned(ctx: &mut Ctx, src: &SourceFile, entry: &Entry, ok: &mut bool) -> Vec<String> {
    let base = entry.ptr("plannedPaths");
    let values = &entry.fields.planned_paths;
    let planned: Vec<String> = values
        .iter()
        .enumerate()
        .filter_map(|(i, v)| ctx.resolve_pattern(src, v, &format!("{base}/{i}")))
        .map(|r| r.display)
        .collect();
    *ok &= planned.len() == values.len();
    planned
}

/// Record the prompt as a plan input, digested as it is read (a prompt of
/// any size costs the same memory); `false` (reported) when it cannot be
/// read.
fn record_prompt(ctx: &mut Ctx, src: &SourceFile, entry: &Entry, prompt: &Resolved) -> bool {
    match std::fs::File::open(&prompt.abs).and_then(crate::canonical::sha256_hex_of) {
        Ok(sha256) => {
            ctx.record_input_digest("prompt", &prompt.display, sha256);
            true
        }
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
            false
        }
    }
}

/// Step 3: the dispatch kind (default `initial`), or `rules/reverify-kind`.
fn resolve_dispatch_kind(ctx: &mut Ctx, src: &SourceFile, entry: &Entry) -> Option<DispatchKind> {
    let Some(text) = entry.fields.dispatch_kind.as_deref() else {
        return Some(DispatchKind::initial());
    };
    match DispatchKind::parse(text) {
        Ok(kind) => Some(kind),
        Err(msg) => {
            report_reverify_kind(ctx, src, entry, msg.to_string());
            None
        }
    }
}

/// `rules/reverify-kind` at the entry's `dispatchKind`.
pub fn report_reverify_kind(ctx: &mut Ctx, src: &SourceFile, entry: &Entry, msg: String) {
    let d = ctx
        .at(
            src,
            Code::RulesReverifyKind,
            msg,
            &entry.ptr("dispatchKind"),
        )
        .help("write reverify-r<N> with N >= 1, e.g. reverify-r2");
    ctx.push(with_worker(d, entry));
}

/// The entry's model execution value, else the metadata's.
fn choose_model(named: Option<&str>, meta: Option<&Meta>) -> String {
    match named {
        Some(v) => v.to_string(),
        None => meta
            .map(|m| authority::metadata_model_value(&m.loaded.doc).to_string())
            .unwrap_or_default(),
    }
}

/// The entry's audience, else the invocation's; none when neither says.
fn choose_audience(named: Option<&str>, invocation: Option<&Invocation>) -> Option<Audience> {
    named
        .or(invocation.map(|i| i.audience.as_str()))
        .filter(|a| !a.is_empty())
        .map(Audience::from)
}

/// What the entry and its metadata say the job is (step 4).
struct Described {
    role: Role,
    audience: Option<Audience>,
    model_execution_value: String,
    dispatch_kind: DispatchKind,
    invocation: Option<Invocation>,
}

impl Described {
    fn of(entry: &Entry, meta: Option<&Meta>, dispatch_kind: DispatchKind) -> Described {
        let f = &entry.fields;
        let invocation = meta.and_then(authority::invocation_of);
        Described {
            role: Role::from(f.role.clone().unwrap_or_default()),
            audience: choose_audience(f.audience.as_deref(), invocation.as_ref()),
            model_execution_value: choose_model(f.model_execution_value.as_deref(), meta),
            dispatch_kind,
            invocation,
        }
    }

    fn claim<'a>(
        &'a self,
        identity: &'a Identity,
        provider: &'a str,
        prompt: &'a str,
    ) -> Claim<'a> {
        Claim {
            identity,
            provider,
            role: &self.role,
            prompt_path: prompt,
            model_execution_value: &self.model_execution_value,
            dispatch_kind: &self.dispatch_kind,
        }
    }
}

/// Step 4: the claim against the metadata beside the prompt and, under a
/// v2 manifest, against the manifest
/// (docs/manifest.md#invocation-metadata-and-authority).
fn check_claim(
    ctx: &mut Ctx,
    manifest: &Manifest,
    src: &SourceFile,
    entry: &Entry,
    meta: Option<&Meta>,
    claim: &Claim,
) {
    if let Some(meta) = meta {
        authority::check_metadata(ctx, manifest, meta, claim);
        if manifest.is_v2() {
            authority::check_v2_job(ctx, manifest, meta, claim, entry, src);
        }
    } else if manifest.is_v2() && claim.identity.v2().is_some() {
        let d = ctx
            .at(
                src,
                Code::AuthorityMetadataVersion,
                format!(
                    "v2 worker `{}` has no invocation metadata beside its prompt ({}.meta.json)",
                    claim.identity.label(),
                    claim.prompt_path
                ),
                &entry.ptr("promptPath"),
            )
            .help("the lead writes <prompt>.meta.json with the v2 identity before planning");
        ctx.push(with_worker(d, entry));
    }
    if manifest.is_v2() && !entry.reserved {
        authority::check_translator(ctx, manifest, claim, entry, src);
    }
}

/// Step 5: the job, from what the steps before decided; its write policy
/// and commands are filled in after.
fn assemble(
    run: &RunFacts,
    entry: &Entry,
    parsed: identity::Parsed,
    provider: Provider,
    paths: &JobPaths,
    metadata_path: Option<String>,
    d: Described,
) -> Job {
    let f = &entry.fields;
    let backend = f.backend.unwrap_or(run.info.terminal_backend);
    let mut job = Job {
        key: parsed.state_key,
        identity: parsed.identity,
        provider,
        backend,
        role: d.role,
        audience: d.audience,
        round: d.dispatch_kind.round(),
        dispatch_kind: d.dispatch_kind,
        prompt_path: paths.prompt.display.clone(),
        metadata_path,
        result_path: paths.result.display.clone(),
        worker_result_path: paths.worker_result.display.clone(),
        completion_paths: paths.completion.clone(),
        worktree_path: paths.worktree.as_ref().map(|w| w.display.clone()),
        git_worktree: None,
        model_execution_value: d.model_execution_value,
        dispatch_id: None,
        invocation: d.invocation,
        command: Vec::new(),
        provider_command: Vec::new(),
        takes_session_id: provider.takes_session_id(),
        env: f.env.clone(),
        idle_timeout_seconds: f
            .idle_timeout_seconds
            .unwrap_or(DEFAULT_IDLE_TIMEOUT_SECONDS),
        timeout_seconds: f.timeout_seconds,
        budget: f.budget.clone(),
        liveness_mode: LIVENESS_MODE.into(),
        write_policy: plan::WritePolicy {
            role: String::new(),
            allow: Vec::new(),
            digest: String::new(),
        },
        write_enforcement: plan::WriteEnforcement {
            mutation_audit: f.mutation_audit.unwrap_or(MutationAudit::Batch),
            confinement: f.confinement.unwrap_or_default(),
        },
        network: match f.confinement.unwrap_or_default() {
            Confinement::None => None,
            _ => Some(
                f.network
                    .clone()
                    .unwrap_or(plan::Network::Mode(NetworkMode::Provider)),
            ),
        },
        read_paths: f.read_paths.clone(),
        // Only a Slurm job is submitted: a `[slurm]` table in `defaults`
        // leaves the run's local jobs as they are.
        slurm: (backend == Backend::Slurm).then(|| f.slurm.clone().unwrap_or_default()),
        pricing: None,
    };
    job.dispatch_id = job.dispatch_id_for(job.first_attempt());
    job
}

/// The planned paths of a job's policy: its own, and for an implementer
/// the run's (`plannedPaths` of the manifest, resolved) too.
fn planned_paths(role: &Role, mut own: Vec<String>, run: &[String]) -> Vec<String> {
    if *role == Role::Implementer {
        for p in run {
            if !own.contains(p) {
                own.push(p.clone());
            }
        }
    }
    own
}

/// Step 5: the job's write policy (docs/audit.md#write-policies).
fn write_policy(job: &Job, planned: &[String], aux: &[String]) -> plan::WritePolicy {
    policy::build(&policy::PolicyInputs {
        role: &job.role,
        artifacts: &artifact_paths(job),
        worktree: job.worktree_path.as_deref(),
        planned_paths: planned,
        auxiliary_roots: aux,
    })
}

/// The files every worker may write: its results and okstra's sidecars.
pub fn artifact_paths(job: &Job) -> Vec<String> {
    artifacts(
        &job.prompt_path,
        &job.result_path,
        &job.worker_result_path,
        &job.completion_paths,
    )
}

/// [`artifact_paths`] of a job's paths, before there is a job.
fn artifacts(
    prompt: &str,
    result: &str,
    worker_result: &str,
    completion: &[String],
) -> Vec<String> {
    use plan::sidecar::{beside, AUDIT, ERRORS, LOG, STATUS};
    let mut out = vec![
        result.to_string(),
        worker_result.to_string(),
        beside(worker_result, AUDIT),
        beside(prompt, STATUS),
        beside(prompt, LOG),
        beside(worker_result, ERRORS),
    ];
    out.extend(completion.iter().cloned());
    out.sort();
    out.dedup();
    out
}

/// A `command` job's argv, which it cannot do without.
fn command_argv(
    ctx: &mut Ctx,
    src: &SourceFile,
    entry: &Entry,
    provider: Provider,
    key: &str,
) -> Option<Vec<String>> {
    let command = entry.fields.command.clone();
    if provider == Provider::Command && command.is_empty() {
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
    Some(command)
}

fn provider_options(entry: &Entry) -> ProviderOptions {
    let f = &entry.fields;
    ProviderOptions {
        permission_mode: f.permission_mode.clone(),
        sandbox_mode: f.sandbox_mode.clone(),
        approval_mode: f.approval_mode.clone(),
        extra_args: f.extra_args.clone(),
    }
}

/// The provider argv the plan shows and the wrapper command exec runs.
fn set_commands(
    job: &mut Job,
    root: &Path,
    run: &RunFacts,
    manifest: &Manifest,
    entry: &Entry,
    command: &[String],
    aux: &[String],
) {
    let options = provider_options(entry);
    // A git-worktree job's CLI works in its worktree; its result files are
    // still the project's (docs/worktrees.md#running).
    let workdir = job
        .worktree_path
        .as_deref()
        .filter(|_| job.git_worktree.is_some());
    let (cwd, dirs) = match workdir {
        Some(w) => (paths::abs_of(root, w), worktree::write_dirs(root, job, aux)),
        None => (
            root.to_path_buf(),
            write_dirs(root, job.worktree_path.as_deref(), aux),
        ),
    };
    job.provider_command = provider_argv(&cwd, job, &options, command, &dirs);
    let model_ref = selected_model_ref(manifest, job);
    job.pricing = model_ref
        .as_deref()
        .and_then(|r| crate::provider::Pricing::of(manifest.model(r)?));
    job.command = wrapper_command(&WrapperCommand {
        root,
        workdir,
        job,
        options: &options,
        command,
        dirs: &dirs,
        catalog: model_ref
            .as_deref()
            .map(|r| (run.info.manifest_path.as_str(), r)),
    });
}

/// Directories the provider CLI must be allowed to write besides the root.
fn write_dirs(root: &Path, worktree: Option<&str>, aux: &[String]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(w) = worktree {
        dirs.push(paths::abs_of(root, w));
    }
    for a in aux {
        dirs.push(paths::abs_of(root, a));
    }
    dirs.retain(|d| d != root);
    dirs.dedup();
    dirs
}

/// What the wrapper runs, as the plan shows it: no session id.
fn provider_argv(
    root: &Path,
    job: &Job,
    options: &ProviderOptions,
    command: &[String],
    dirs: &[PathBuf],
) -> Vec<String> {
    provider::build_argv(&provider::ArgvRequest {
        provider: job.provider,
        model: &job.model_execution_value,
        project_root: root,
        write_dirs: dirs,
        options,
        command,
        session_id: None,
        // As the wrapper decides it, so the plan shows what it will run;
        // only codex asks.
        project_is_git_repo: job.provider == Provider::Codex
            && root.ancestors().any(|d| d.join(".git").exists()),
    })
}

/// The catalog entry an agent job was bound to, for the wrapper's
/// served-model check: a v2 job's role execution `modelRef`; a v1 job's
/// model execution value where the catalog holds it (as a key or a
/// `modelId`) for the same provider. `command` jobs report no model.
fn selected_model_ref(manifest: &Manifest, job: &Job) -> Option<String> {
    if !job.provider.is_agent() {
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
    let same_provider = |m: &Value| model::str_of(m, "provider") == job.provider.as_str();
    if models.get(value).is_some_and(same_provider) {
        return Some(value.to_string());
    }
    models
        .iter()
        .find(|(_, m)| model::str_of(m, "modelId") == value && same_provider(m))
        .map(|(k, _)| k.clone())
}

/// Everything `okstra worker ...` is built from.
struct WrapperCommand<'a> {
    root: &'a Path,
    /// The worker's working directory where it is not the root (a
    /// git-worktree job's worktree), as the plan names it.
    workdir: Option<&'a str>,
    job: &'a Job,
    options: &'a ProviderOptions,
    command: &'a [String],
    dirs: &'a [PathBuf],
    /// The manifest holding the model catalog and the selected entry, for
    /// the served-model check (docs/providers.md#the-served-model).
    catalog: Option<(&'a str, &'a str)>,
}

/// `okstra worker ...` for a job, without the per-attempt flags exec adds
/// (`--attempt`, `--dispatch-id`, `--session-id`), which go before `--`.
fn wrapper_command(w: &WrapperCommand) -> Vec<String> {
    let job = w.job;
    let presentation = match job.backend {
        Backend::Pane => "live",
        Backend::CliWrapper | Backend::Slurm => "quiet",
    };
    let mut argv: Vec<String> = vec![
        "okstra".into(),
        "worker".into(),
        "--project-root".into(),
        paths::path_text(w.root),
    ];
    if let Some(workdir) = w.workdir {
        argv.extend(["--workdir".into(), workdir.into()]);
    }
    argv.extend([
        "--provider".into(),
        job.provider.as_str().into(),
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
        presentation.into(),
    ]);
    if let Some(meta) = &job.metadata_path {
        argv.extend(["--invocation-metadata".into(), meta.clone()]);
    }
    if let Some(t) = job.timeout_seconds {
        argv.extend(["--timeout-seconds".into(), t.to_string()]);
    }
    if let Some(b) = &job.budget {
        if let Some(usd) = b.max_cost_usd {
            argv.extend(["--max-cost-usd".into(), usd.to_string()]);
        }
        if let Some(n) = b.max_tokens {
            argv.extend(["--max-tokens".into(), n.to_string()]);
        }
    }
    for d in w.dirs {
        argv.extend(["--write-dir".into(), paths::path_text(d)]);
    }
    for (flag, value) in [
        ("--permission-mode", &w.options.permission_mode),
        ("--sandbox-mode", &w.options.sandbox_mode),
        ("--approval-mode", &w.options.approval_mode),
    ] {
        if let Some(v) = value {
            argv.extend([flag.to_string(), v.clone()]);
        }
    }
    for a in &w.options.extra_args {
        argv.push(format!("--extra-arg={a}"));
    }
    if let Some((manifest, model_ref)) = w.catalog {
        argv.extend([
            "--manifest".into(),
            manifest.into(),
            "--model-ref".into(),
            model_ref.into(),
        ]);
    }
    argv.extend(confinement_flags(job));
    if job.provider == Provider::Command {
        argv.push("--".into());
        argv.extend(w.command.iter().cloned());
    }
    argv
}

/// `--confinement MODE` and a `--confine-dir` per directory the job may
/// write (docs/confinement.md#kernel-confinement); nothing for `none`. The log
/// and status sidecar are left out: the wrapper writes them, not the worker.
fn confinement_flags(job: &Job) -> Vec<String> {
    let mode = job.write_enforcement.confinement;
    if mode == Confinement::None {
        return Vec::new();
    }
    let mut flags = vec!["--confinement".to_string(), mode.as_str().to_string()];
    let wrapper_writes = [job.log_path(), job.status_path()];
    for dir in crate::confine::policy_dirs(&job.write_policy.allow, &wrapper_writes) {
        let dir = if dir.is_empty() { ".".to_string() } else { dir };
        flags.extend(["--confine-dir".to_string(), dir]);
    }
    // Reads (docs/confinement.md#reads): `/` among the read paths leaves
    // them open.
    if !job.read_paths.iter().any(|p| p == "/") {
        flags.push("--confine-reads".into());
        for p in &job.read_paths {
            flags.extend(["--read-path".to_string(), p.clone()]);
        }
    }
    let network = job.network.as_ref().map_or(NetworkMode::Open, |n| n.mode());
    flags.extend(["--network".to_string(), network.as_str().to_string()]);
    flags
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::V2Identity;
    use serde_json::json;

    fn v1(worker_id: &str) -> Identity {
        Identity::V1 {
            worker_id: worker_id.into(),
        }
    }

    fn resolved(display: &str) -> Resolved {
        Resolved {
            display: display.into(),
            abs: PathBuf::from("/p").join(display),
        }
    }

    /// A plain job of `provider`, as `build_job` would assemble it.
    fn job(provider: Provider, backend: Backend) -> Job {
        serde_json::from_value(json!({
            "key": "w", "identity": {"version": "1", "workerId": "w"},
            "provider": provider, "backend": backend, "role": "analyst",
            "dispatchKind": "initial", "round": 1, "promptPath": "p.md",
            "resultPath": "r.md", "workerResultPath": "r.md", "completionPaths": ["r.md"],
            "modelExecutionValue": "m-1", "command": [], "providerCommand": [],
            "takesSessionId": false, "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
            "writePolicy": {"role": "analyst", "allow": [], "digest": ""},
            "writeEnforcement": {"mutationAudit": "batch"}
        }))
        .unwrap()
    }

    #[test]
    fn a_named_provider_wins_and_v1_worker_ids_imply_theirs() {
        use NamedProvider::*;
        assert_eq!(
            provider_of(Some("gemini"), &v1("claude")),
            Some(Known(Provider::Gemini))
        );
        assert_eq!(
            provider_of(None, &v1("codex")),
            Some(Known(Provider::Codex))
        );
        assert_eq!(provider_of(None, &v1("reviewer")), None);
        assert_eq!(provider_of(None, &v1("command")), None);
        let v2 = Identity::V2(V2Identity {
            participant_ref: "p".into(),
            role_execution_ref: "re".into(),
            execution_label: "claude".into(),
            duty_id: "d".into(),
            invocation_ref: "i".into(),
            assignment_ref: "a/claude".into(),
            attempt: 1,
        });
        assert_eq!(provider_of(None, &v2), None);
        let unknown = provider_of(Some("aider"), &v1("claude")).unwrap();
        assert_eq!(unknown, Unknown("aider".into()));
        assert_eq!(unknown.text(), "aider");
    }

    #[test]
    fn completion_defaults_to_the_distinct_results() {
        let r = resolved("out/r.md");
        let w = resolved("out/w.md");
        assert_eq!(
            default_completion(Some(&r), Some(&w)),
            ["out/r.md", "out/w.md"]
        );
        assert_eq!(default_completion(Some(&r), Some(&r)), ["out/r.md"]);
        assert_eq!(default_completion(None, Some(&w)), ["out/w.md"]);
    }

    #[test]
    fn audience_and_model_come_from_the_entry_before_the_metadata() {
        let inv = Invocation {
            invocation_id: "i".into(),
            audience: "implementation-verifier".into(),
            assignment_ref: "a".into(),
            digests: Default::default(),
            host_model_value: None,
        };
        assert_eq!(
            choose_audience(Some("analysis"), Some(&inv)),
            Some(Audience::Other("analysis".into()))
        );
        assert_eq!(
            choose_audience(None, Some(&inv)),
            Some(Audience::ImplementationVerifier)
        );
        assert_eq!(choose_audience(None, None), None);
        let blank = Invocation {
            audience: String::new(),
            ..inv
        };
        assert_eq!(choose_audience(None, Some(&blank)), None);
        assert_eq!(choose_model(Some("sonnet"), None), "sonnet");
        assert_eq!(choose_model(None, None), "");
    }

    #[test]
    fn only_an_implementer_takes_the_runs_planned_paths() {
        let own = vec!["src/**".to_string()];
        let run = ["docs/**".to_string(), "src/**".to_string()];
        assert_eq!(
            planned_paths(&Role::Implementer, own.clone(), &run),
            ["src/**", "docs/**"]
        );
        assert_eq!(planned_paths(&Role::Verifier, own, &run), ["src/**"]);
    }

    #[test]
    fn write_dirs_leave_out_the_root_and_repeats() {
        let root = Path::new("/p");
        let aux = vec!["aux".to_string(), "/p".to_string()];
        assert_eq!(
            write_dirs(root, Some("wt"), &aux),
            [PathBuf::from("/p/wt"), PathBuf::from("/p/aux")]
        );
        assert!(write_dirs(root, None, &[]).is_empty());
    }

    #[test]
    fn the_wrapper_command_of_an_agent_and_of_a_command() {
        let root = Path::new("/p");
        let options = ProviderOptions {
            permission_mode: Some("plan".into()),
            extra_args: vec!["--max-turns".into()],
            ..Default::default()
        };
        let agent = job(Provider::Claude, Backend::Pane);
        let argv = wrapper_command(&WrapperCommand {
            root,
            workdir: None,
            job: &agent,
            options: &options,
            command: &[],
            dirs: &[PathBuf::from("/wt")],
            catalog: Some(("run/m.json", "sonnet")),
        });
        let shown = argv.join(" ");
        assert!(shown.starts_with("okstra worker --project-root /p --provider claude --model m-1"));
        assert!(shown.contains("--presentation live --write-dir /wt --permission-mode plan"));
        assert!(shown.ends_with("--extra-arg=--max-turns --manifest run/m.json --model-ref sonnet"));

        let cmd = job(Provider::Command, Backend::CliWrapper);
        let argv = wrapper_command(&WrapperCommand {
            root,
            workdir: None,
            job: &cmd,
            options: &ProviderOptions::default(),
            command: &["sh".into(), "-c".into(), "x".into()],
            dirs: &[],
            catalog: None,
        });
        assert!(argv.join(" ").contains("--presentation quiet"));
        assert_eq!(argv[argv.len() - 4..], ["--", "sh", "-c", "x"]);
        assert!(
            !shown.contains("--confinement"),
            "the fixture job is `none`"
        );
    }

    #[test]
    fn a_confined_job_names_its_write_directories_but_not_the_wrappers_files() {
        let mut j = job(Provider::Command, Backend::CliWrapper);
        j.write_enforcement.confinement = Confinement::Auto;
        j.network = Some(plan::Network::Mode(NetworkMode::Provider));
        j.write_policy.allow = vec![
            "out/r.md".into(),
            "out/r.md.audit.json".into(),
            "p.md.log".into(),
            "p.md.status.json".into(),
            "src/**".into(),
        ];
        assert_eq!(
            confinement_flags(&j),
            [
                "--confinement",
                "auto",
                "--confine-dir",
                "out",
                "--confine-dir",
                "src",
                "--confine-reads",
                "--network",
                "provider"
            ]
        );
        // A result at the top grants the project root, written `.`.
        j.write_policy.allow.push("r.md".into());
        j.write_enforcement.confinement = Confinement::Required;
        j.network = Some(plan::Network::Allow {
            allow: vec!["pypi.org".into()],
        });
        j.read_paths = vec!["~/data".into()];
        assert_eq!(
            confinement_flags(&j),
            [
                "--confinement",
                "required",
                "--confine-dir",
                ".",
                "--confine-reads",
                "--read-path",
                "~/data",
                "--network",
                "provider"
            ]
        );
        // `/` among the read paths leaves reads open.
        j.read_paths.push("/".into());
        assert!(!confinement_flags(&j).contains(&"--confine-reads".to_string()));
        j.write_enforcement.confinement = Confinement::None;
        assert!(confinement_flags(&j).is_empty());
    }

    #[test]
    fn the_selected_model_is_the_catalog_entry_of_the_same_provider() {
        let doc = json!({"models": {
            "sonnet": {"provider": "claude", "modelId": "claude-sonnet-4-5"},
            "gpt": {"provider": "codex", "modelId": "m-1"}
        }});
        let manifest = Manifest::new(&doc);
        let mut claude = job(Provider::Claude, Backend::CliWrapper);
        claude.model_execution_value = "sonnet".into();
        assert_eq!(
            selected_model_ref(&manifest, &claude).as_deref(),
            Some("sonnet")
        );
        claude.model_execution_value = "claude-sonnet-4-5".into();
        assert_eq!(
            selected_model_ref(&manifest, &claude).as_deref(),
            Some("sonnet")
        );
        // A model id of another provider's entry is not this job's.
        claude.model_execution_value = "m-1".into();
        assert_eq!(selected_model_ref(&manifest, &claude), None);
        let codex = job(Provider::Codex, Backend::CliWrapper);
        assert_eq!(
            selected_model_ref(&manifest, &codex).as_deref(),
            Some("gpt")
        );
        let mut cmd = job(Provider::Command, Backend::CliWrapper);
        cmd.model_execution_value = "sonnet".into();
        assert_eq!(selected_model_ref(&manifest, &cmd), None);
    }
}
