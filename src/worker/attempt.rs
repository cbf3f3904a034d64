//! One attempt of the wrapper: its inputs checked, its child's command line
//! and confinement prepared, the child started (the status sidecar first
//! recording that it did, under a gate), supervised, and how it ended judged
//! into the wrapper's exit code and the sidecar's last write.

use super::confined::{self, Ahead, ConfineFailure, Confined};
use super::output::{CatalogError, OutputWatch, ServedCheck, ServedMismatch};
use super::private::AttemptDir;
use super::slot::PidReport;
use super::status::{self, StatusFile, StatusSidecar};
use super::supervise::{supervise, Heartbeat, Limits, Outcome};
use super::{say, Presentation, Timing, WorkerArgs};
use crate::diag::WrapperExit;
use crate::plan::sidecar;
use crate::process::{self, SpawnSpec, Spawned};
use crate::provider::login::Where;
use crate::provider::{self, ArgvRequest, Provider, ProviderOptions, UnknownProvider};
use crate::vocab::FailureKind;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// Absolute paths of one invocation.
pub(super) struct Paths {
    pub root: PathBuf,
    /// `--workdir`: the child's working directory, when not the root.
    pub workdir: Option<PathBuf>,
    pub prompt: PathBuf,
    result: PathBuf,
    worker_result: PathBuf,
    pub status: PathBuf,
    pub log: PathBuf,
    write_dirs: Vec<PathBuf>,
}

impl Paths {
    /// Where the child works: `--workdir`, else the project root.
    pub fn cwd(&self) -> &Path {
        self.workdir.as_deref().unwrap_or(&self.root)
    }

    pub fn resolve(args: &WorkerArgs) -> io::Result<Paths> {
        let root = std::path::absolute(&args.project_root)?;
        let under = |p: &Path| root.join(p);
        let prompt = under(&args.prompt);
        Ok(Paths {
            status: sidecar::beside_path(&prompt, sidecar::STATUS),
            log: sidecar::beside_path(&prompt, sidecar::LOG),
            result: under(&args.result),
            worker_result: under(&args.worker_result),
            write_dirs: args.write_dirs.iter().map(|d| under(d)).collect(),
            workdir: args.workdir.as_deref().map(under),
            prompt,
            root,
        })
    }
}

/// Why an attempt's arguments are unusable: nothing is started
/// ([`WrapperExit::Usage`], failure kind `argument-error`).
#[derive(Debug, thiserror::Error)]
pub(super) enum Refusal {
    #[error("the project root {} is not a directory", .0.display())]
    RootNotADirectory(PathBuf),
    #[error("the working directory {} (--workdir) is not a directory", .0.display())]
    WorkdirNotADirectory(PathBuf),
    #[error(transparent)]
    Provider(#[from] UnknownProvider),
    #[error("the command provider needs an argv after `--`")]
    NoCommand,
    #[error("the prompt {} is not a readable file", .0.display())]
    NoPrompt(PathBuf),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
}

/// The wrapper proper, one attempt, with the stop flag and clocks given so
/// tests can drive them without signals; `ahead`, what was prepared for a
/// confined child beforehand (else it is prepared when needed). `slot` is
/// where a slot reports its worker's pid: its worker then leads a process
/// group of its own, whose leftovers are killed once it ended; a
/// one-attempt wrapper's worker stays in the wrapper's group, which exec
/// stops and clears.
pub(super) fn execute(
    args: &WorkerArgs,
    stop: &AtomicBool,
    timing: Timing,
    ahead: Option<Ahead>,
    slot: Option<&mut PidReport>,
) -> i32 {
    let started = Instant::now();
    let paths = match Paths::resolve(args) {
        Ok(paths) => paths,
        Err(err) => {
            say(format_args!("cannot resolve the project root: {err}"));
            return WrapperExit::Usage.code();
        }
    };
    let who = status::Attempt {
        provider: &args.provider,
        attempt: args.attempt,
        dispatch_id: args.dispatch_id.as_deref(),
        session_id: args.session_id.as_deref(),
    };
    let mut status = StatusFile::new(&paths.status, &paths.root, who, started);
    let mut ready = match prepare(args, &paths, ahead, &mut status) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    if let Some(report) = &slot {
        ready.env.push(report.marker());
    }
    let mut child = match launch(args, &paths, &mut ready, slot, &mut status) {
        Ok(child) => child,
        Err(code) => return code,
    };
    let limits = Limits {
        deadline: args
            .timeout_seconds
            .map(|s| started + Duration::from_secs(s)),
        budget: args.budget(),
    };
    let check = ready.served_check.take();
    let mut watch = OutputWatch::new(ready.provider, &paths.log, ready.log_start, check)
        .with_state(ready.dir.as_ref().and_then(AttemptDir::state_env));
    let mut heartbeat = Heartbeat::new(&mut status, timing.heartbeat);
    let outcome = supervise(
        &mut child,
        stop,
        &limits,
        timing.grace,
        &mut watch,
        &mut heartbeat,
    );
    if child.leads_group() {
        // Reaped: what its group still holds is left over, and must not
        // write into the next attempt's (or stage's) audit.
        process::kill_leftovers(child.pid());
    }
    let verdict = watch.close(&mut status.status);
    let (code, error) = judge(
        args,
        &paths.root,
        (outcome, verdict),
        &watch,
        ready.confined.as_ref(),
        &mut status.status,
    );
    // The private state's writes listed and a refreshed login written
    // back before the sidecar's last write; the directory goes after it.
    status.status.provider_state = ready.dir.as_mut().and_then(AttemptDir::finish);
    let code = status.finish(code, error);
    drop(ready.dir.take());
    if args.presentation == Presentation::Live {
        say(format_args!(
            "{} attempt {}: exited {code} after {:.1} s",
            args.worker_key,
            args.attempt,
            started.elapsed().as_secs_f64()
        ));
    }
    code
}

/// An attempt checked and ready to start: its provider, what its child
/// runs and how it is confined.
struct Ready {
    provider: Provider,
    served_check: Option<ServedCheck>,
    confined: Option<Confined>,
    /// The attempt's private directory (its TMPDIR, its CLI's state).
    dir: Option<AttemptDir>,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// Where this attempt's output starts in the log.
    log_start: u64,
}

/// Check the attempt's inputs, prepare its confinement and its child's
/// command line, and note them on `status`; where it cannot start, the
/// wrapper's exit code (the sidecar finished with why, where it can be).
fn prepare(
    args: &WorkerArgs,
    paths: &Paths,
    ahead: Option<Ahead>,
    status: &mut StatusFile,
) -> Result<Ready, i32> {
    let (provider, served_check) = match check_inputs(args, paths) {
        Ok(checked) => checked,
        Err(problem) => {
            say(format_args!("{problem}"));
            let usage = WrapperExit::Usage;
            if paths.root.is_dir() {
                status.refuse(FailureKind::ArgumentError, usage, problem.to_string());
            }
            return Err(usage.code());
        }
    };
    make_write_dirs(paths);
    // The attempt's private directory lives until the attempt ended, then
    // goes: its CLI's state seeded from the user's
    // (docs/confinement.md#provider-state), confined or not.
    let dir = match private_dir(args, &paths.root, provider) {
        Ok(dir) => dir,
        Err(problem) => return Err(refuse_confinement(args, status, &problem)),
    };
    // Prepared here, before the sidecar says the attempt started: only the
    // restriction itself is left for the start.
    let confined = match confined::prepare(args, &paths.root, provider, ahead, dir.as_ref()) {
        Ok(confined) => confined,
        Err(problem) => return Err(refuse_confinement(args, status, &problem)),
    };
    let (argv, mut env) = child_command(args, paths, provider, confined.as_ref());
    env.extend(dir.as_ref().and_then(AttemptDir::state_env));
    // Output of earlier attempts may already be in the log; look only past it.
    let log_start = fs::metadata(&paths.log).map(|m| m.len()).unwrap_or(0);
    status.status.argv = argv.clone();
    status.status.log_offset = Some(log_start);
    let applied = confined.as_ref().map_or("none", |c| c.rules.applied);
    status.status.confinement = Some(applied.to_string());
    status.status.network = confined.as_ref().map(|c| c.network());
    Ok(Ready {
        provider,
        served_check,
        confined,
        dir,
        argv,
        env,
        log_start,
    })
}

/// Make the directories the child may write (`--write-dir`) that are
/// missing, confined or not (confinement makes them to grant them): claude
/// drops an `--add-dir` that does not exist, so a worktree job's CLI could
/// not write a result whose folder is new.
fn make_write_dirs(paths: &Paths) {
    for d in paths.write_dirs.iter().filter(|d| !d.exists()) {
        if let Err(err) = fs::create_dir_all(d) {
            say(format_args!("cannot make {}: {err}", d.display()));
        }
    }
}

/// The attempt's private directory, its CLI's state seeded: `None` where
/// it needs none (an unconfined `command` job).
fn private_dir(
    args: &WorkerArgs,
    root: &Path,
    provider: Provider,
) -> Result<Option<AttemptDir>, ConfineFailure> {
    let Some(mut dir) = AttemptDir::make_for(args, root, provider).map_err(ConfineFailure::Tmp)?
    else {
        return Ok(None);
    };
    dir.seed(provider).map_err(ConfineFailure::State)?;
    Ok(Some(dir))
}

/// What can be refused before starting anything: the provider, parsed, and
/// the served-model check asked for.
fn check_inputs(
    args: &WorkerArgs,
    paths: &Paths,
) -> Result<(Provider, Option<ServedCheck>), Refusal> {
    if !paths.root.is_dir() {
        return Err(Refusal::RootNotADirectory(paths.root.clone()));
    }
    if let Some(w) = paths.workdir.as_ref().filter(|w| !w.is_dir()) {
        return Err(Refusal::WorkdirNotADirectory(w.clone()));
    }
    let provider = args.provider.parse::<Provider>()?;
    if provider == Provider::Command && args.command.is_empty() {
        return Err(Refusal::NoCommand);
    }
    if !paths.prompt.is_file() {
        return Err(Refusal::NoPrompt(paths.prompt.clone()));
    }
    let check = match (&args.manifest, &args.model_ref) {
        (Some(manifest), Some(model_ref)) => {
            Some(ServedCheck::load(&paths.root, manifest, model_ref)?)
        }
        _ => None,
    };
    Ok((provider, check))
}

/// A confinement that could not be applied: said, and the sidecar finished
/// with it; the wrapper's exit code.
fn refuse_confinement(args: &WorkerArgs, status: &mut StatusFile, problem: &ConfineFailure) -> i32 {
    say(format_args!("not starting {}: {problem}", args.provider));
    let exit = WrapperExit::ConfinementFailed;
    status.refuse(FailureKind::ConfinementFailed, exit, problem.to_string())
}

/// The command line and environment the worker's child runs with: the
/// provider's argv for this attempt, and okstra's variables (with the
/// confinement's, where it is confined).
fn child_command(
    args: &WorkerArgs,
    paths: &Paths,
    provider: Provider,
    confined: Option<&Confined>,
) -> (Vec<String>, Vec<(String, String)>) {
    let mut options = ProviderOptions {
        permission_mode: args.permission_mode.clone(),
        sandbox_mode: args.sandbox_mode.clone(),
        approval_mode: args.approval_mode.clone(),
        extra_args: args.extra_args.clone(),
    };
    if confined.is_some() {
        if let Some(note) = provider.under_confinement(&mut options) {
            say(format_args!("{note}"));
        }
    }
    let argv = provider::build_argv(&ArgvRequest {
        provider,
        model: &args.model,
        project_root: paths.cwd(),
        write_dirs: &paths.write_dirs,
        options: &options,
        command: &args.command,
        session_id: args.session_id.as_deref(),
        project_is_git_repo: paths.cwd().ancestors().any(|d| d.join(".git").exists()),
    });
    let mut env = worker_env(args, paths);
    if let Some(c) = confined {
        env.extend(c.env(provider));
    }
    (argv, env)
}

/// The `OKSTRA_*` environment every worker gets
/// (docs/spec-format.md#the-workers-environment).
fn worker_env(args: &WorkerArgs, paths: &Paths) -> Vec<(String, String)> {
    let path = |p: &Path| p.display().to_string();
    let mut env = vec![
        ("OKSTRA_PROJECT_ROOT".into(), path(&paths.root)),
        ("OKSTRA_PROMPT_PATH".into(), path(&paths.prompt)),
        ("OKSTRA_RESULT_PATH".into(), path(&paths.result)),
        (
            "OKSTRA_WORKER_RESULT_PATH".into(),
            path(&paths.worker_result),
        ),
        ("OKSTRA_ATTEMPT".into(), args.attempt.to_string()),
        ("OKSTRA_WORKER_KEY".into(), args.worker_key.clone()),
    ];
    if let Some(w) = &paths.workdir {
        env.push(("OKSTRA_WORKTREE".into(), path(w)));
    }
    if let Some(id) = &args.dispatch_id {
        env.push(("OKSTRA_DISPATCH_ID".into(), id.clone()));
    }
    if let Some(id) = &args.session_id {
        env.push(("OKSTRA_SESSION_ID".into(), id.clone()));
    }
    env
}

/// Start the worker: leading a process group of its own (a slot's), or in
/// the wrapper's (a one-attempt wrapper's, which exec stops whole).
pub(super) fn spawn_worker(spec: &SpawnSpec, own_group: bool) -> io::Result<Spawned> {
    if own_group {
        process::spawn(spec)
    } else {
        process::spawn_in_caller_group(spec)
    }
}

/// Start the worker's child, confined where `ready` says: the started
/// child, or the wrapper's exit code, the sidecar finished with why. Under
/// a gate the sidecar first records that the attempt started
/// (docs/exec.md#crash-safety-and-resume): it is the evidence, and without it
/// the child does not start.
fn launch(
    args: &WorkerArgs,
    paths: &Paths,
    ready: &mut Ready,
    slot: Option<&mut PidReport>,
    status: &mut StatusFile,
) -> Result<Spawned, i32> {
    let own_group = slot.is_some();
    if args.gated {
        if let Err(err) = status.write() {
            say(format_args!(
                "not starting {}: cannot record that the attempt started: {err}",
                args.provider
            ));
            return Err(WrapperExit::StatusWriteFailed.code());
        }
    }
    let spec = SpawnSpec {
        argv: &ready.argv,
        cwd: paths.cwd(),
        env: &ready.env,
        log: None,
        stdin: Some(&paths.prompt),
    };
    let launched = match ready.confined.as_mut() {
        Some(c) => c.spawn(&spec, own_group),
        None => Ok(spawn_worker(&spec, own_group)),
    };
    let child = match launched {
        Ok(Ok(child)) => child,
        Ok(Err(err)) => {
            let program = spec.argv.first().map(String::as_str).unwrap_or_default();
            let (exit, problem) = launch_failure(program, &err);
            say(format_args!("{problem}"));
            return Err(status.refuse(FailureKind::CliNotFound, exit, problem));
        }
        Err(problem) => {
            status.status.confinement = None;
            return Err(refuse_confinement(args, status, &problem));
        }
    };
    if let Some(report) = slot {
        crate::fault::die_at("slot-before-pid-report");
        report.started(child.pid());
    }
    status.status.pid = Some(child.pid());
    announce(args, status, child.pid());
    Ok(child)
}

/// A pane's watcher reads the wrapper's pid from the sidecar at once; in
/// cli-wrapper mode exec holds the pid itself (and records it), so the
/// first write waits for the first heartbeat: most short jobs write the
/// sidecar once, at their exit (twice when gated).
fn announce(args: &WorkerArgs, status: &mut StatusFile, pid: u32) {
    if args.presentation == Presentation::Live {
        // A failure is said once; the heartbeat tries again.
        let _ = status.write();
        say(format_args!(
            "{} attempt {}: started {} (pid {pid})",
            args.worker_key, args.attempt, args.provider
        ));
    }
}

/// Why the child could not be started: the shell's exit code for it, and
/// the words.
fn launch_failure(program: &str, err: &io::Error) -> (WrapperExit, String) {
    match err.kind() {
        io::ErrorKind::NotFound => (
            WrapperExit::NotFound,
            format!("cannot start `{program}`: command not found (is it installed and on PATH?)"),
        ),
        io::ErrorKind::PermissionDenied => (
            WrapperExit::NotExecutable,
            format!("cannot start `{program}`: permission denied"),
        ),
        _ => (
            WrapperExit::NotFound,
            format!("cannot start `{program}`: {err}"),
        ),
    }
}

/// The wrapper's exit code for how the child ended (and what the CLI said
/// of the model that served), and what went wrong in words; the failure
/// kind and stop flags go on the sidecar's `status`.
fn judge(
    args: &WorkerArgs,
    root: &Path,
    ended: (Outcome, Result<(), ServedMismatch>),
    watch: &OutputWatch,
    confined: Option<&Confined>,
    status: &mut StatusSidecar,
) -> (i32, Option<String>) {
    let provider = watch.provider;
    let mismatch = WrapperExit::ServedModelMismatch.code();
    // A CLI that reports usage only at its end is checked then.
    let late = args.budget().and_then(|b| {
        let spent = status.usage.as_ref()?;
        b.crossed(crate::budget::Spend::from(spent))
    });
    match ended {
        // The served model is judged whatever the CLI's own exit code: a run
        // by the wrong model is never a result.
        (Outcome::Exited(_) | Outcome::Mismatch, Err(verdict)) => {
            let problem = verdict.to_string();
            say(format_args!("{problem}"));
            status.failure_kind = Some(FailureKind::ServedModelMismatch);
            (mismatch, Some(problem))
        }
        (Outcome::Mismatch, Ok(())) => (mismatch, None),
        (Outcome::OverBudget(child_code, crossing), _) => {
            status.child_exit_code = Some(child_code);
            over_budget(args, &crossing, "it was stopped", status)
        }
        (Outcome::Exited(code), _) if late.is_some() => {
            status.child_exit_code = Some(code);
            let crossing = late.unwrap_or_else(|| unreachable!("guarded"));
            over_budget(args, &crossing, "checked at its end", status)
        }
        (Outcome::Exited(code), _) if code != 0 => {
            let output = watch.excerpt();
            if let Some(c) = confined {
                c.explain_refusals(&output);
            }
            let lead = format!("{} exited {code}", args.provider);
            let tell = |at: &Where| provider.failure(code, &output, at);
            (code, record_failure(root, status, &lead, tell))
        }
        (Outcome::Refused(child_code, said), _) => {
            status.child_exit_code = Some(child_code);
            let lead = format!(
                "{} was stopped at its first retry of a request the API refused",
                args.provider
            );
            let tell = |at: &Where| Some(provider.refused(&said, at));
            let code = WrapperExit::Failed.code();
            (code, record_failure(root, status, &lead, tell))
        }
        (Outcome::Exited(code), _) => (code, None),
        (Outcome::Stopped(code), _) => {
            status.stopped = true;
            (code, None)
        }
        (Outcome::TimedOut(child_code), _) => timed_out(args, watch, child_code, status),
        (Outcome::Failed(err), _) => {
            let problem = format!("lost track of the child: {err}");
            say(format_args!("{problem}"));
            (WrapperExit::Failed.code(), Some(problem))
        }
    }
}

/// An attempt whose usage crossed its budget: [`WrapperExit::BudgetExceeded`]
/// and a reason naming the budget and the spend (docs/exec.md#budgets).
fn over_budget(
    args: &WorkerArgs,
    crossing: &crate::budget::Crossing,
    how: &str,
    status: &mut StatusSidecar,
) -> (i32, Option<String>) {
    let budget = args.budget().map(|b| b.describe()).unwrap_or_default();
    let problem = format!(
        "budget exceeded: {} {crossing} (its budget: {budget}); {how}",
        args.provider
    );
    say(format_args!("{problem}"));
    status.failure_kind = Some(FailureKind::BudgetExceeded);
    (WrapperExit::BudgetExceeded.code(), Some(problem))
}

/// A child stopped at the wall-clock limit: [`WrapperExit::Timeout`], and
/// what the CLI was stuck on (codex "waiting for network").
fn timed_out(
    args: &WorkerArgs,
    watch: &OutputWatch,
    child_code: i32,
    status: &mut StatusSidecar,
) -> (i32, Option<String>) {
    status.timed_out = true;
    status.child_exit_code = Some(child_code);
    let secs = args.timeout_seconds.unwrap_or_default();
    let mut problem = format!(
        "wall-clock limit reached: timed out after {secs} s (timeoutSeconds); the child was stopped"
    );
    let provider = watch.provider;
    if let Some(line) = provider.said(&FailureKind::Timeout, &watch.excerpt()) {
        problem.push_str(&format!("; {provider} last said: \"{line}\""));
    }
    say(format_args!("{problem}"));
    status.failure_kind = Some(FailureKind::Timeout);
    (WrapperExit::Timeout.code(), Some(problem))
}

/// A CLI's failure as `tell` tells it, given what the CLI saw (to name the
/// credentials it used): said, its kind put on `status`, and its reason,
/// after `lead`, returned.
fn record_failure(
    root: &Path,
    status: &mut StatusSidecar,
    lead: &str,
    tell: impl FnOnce(&Where) -> Option<provider::Failure>,
) -> Option<String> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let argv = status.argv.clone();
    let at = Where {
        var: &var,
        project_root: root,
        argv: &argv,
    };
    let failure = tell(&at)?;
    // The log names the kind; the recorded reason leaves it to the records'
    // own `failureKind` (settlement puts it in brackets).
    say(format_args!("{lead}: {}: {}", failure.kind, failure.reason));
    status.failure_kind = Some(failure.kind);
    Some(format!("{lead}: {}", failure.reason))
}
