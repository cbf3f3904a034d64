//! The worker wrapper around one provider CLI run
//! (docs/providers.md#the-worker-wrapper): the program `okstra-worker`
//! (src/bin/okstra-worker.rs), and the same code as `okstra worker`. exec runs
//! `cli-wrapper` attempts through a few of them started as slots
//! (`okstra-worker --serve`, see `slot`), each running attempt after attempt; a
//! pane, a Slurm job or a person starts one per attempt.
//!
//! It runs the provider's argv with the prompt on stdin (eager include), in
//! the project root, with the `OKSTRA_*` environment; keeps
//! `<prompt>.status.json` current (a heartbeat every two seconds while the
//! child runs, the exit code and duration once it ended); enforces the
//! wall-clock timeout; stops a CLI at its first report that it retries a
//! request the API refused for its credentials
//! (docs/providers.md#the-worker-wrapper: claude would retry for minutes); and
//! exits with the child's code.
//!
//! The wrapper does not redirect the child's output: exec already points the
//! wrapper's stdout and stderr at `<prompt>.log`, and by hand the terminal is
//! the right place. The child stays in the wrapper's process group, so exec
//! stopping the wrapper's group stops the agent with it.
//!
//! With `--gated` the wrapper first waits for exec's go (one byte on stdin,
//! docs/exec.md#crash-safety-and-resume), and once released records
//! `state: "running"` before it starts the child. It never panics on a failed
//! write: its stderr is the job's log, which may sit on a full disk.

mod args;
mod slot;
mod starter;

pub use args::{Presentation, WorkerArgs};
pub use slot::{SERVE_FLAG, SLOT_VAR};

use crate::beneath::Beneath;
use crate::confine;
use crate::plan::sidecar;
use crate::process::{self, SpawnSpec, Spawned};
use crate::provider::login::Where;
use crate::provider::{
    self, ArgvRequest, Provider, ProviderOptions, SERVED_MODEL_MISMATCH_EXIT_CODE,
    TIMEOUT_EXIT_CODE,
};
use crate::tmpdir;
use crate::vocab::Confinement;
use crate::vocab::FailureKind;
use serde::Serialize;
use serde_json::Value;
use starter::{Order, Starter};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// How often the status sidecar's `heartbeatAt` is refreshed.
const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// Between SIGTERM and SIGKILL when the wrapper stops its child.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// How often the wrapper looks at the clock and its signals while the child
/// runs (the child's exit wakes it at once).
const POLL: Duration = Duration::from_millis(50);
/// Exit code for a wrapper invoked with unusable arguments, as clap's.
const USAGE_EXIT_CODE: i32 = 2;
/// Exit code of a gated wrapper that read end-of-file (or an error) where
/// exec's go should have been: exec died before recording the dispatch, so
/// the wrapper ran nothing and wrote nothing (sysexits' EX_TEMPFAIL: the
/// attempt may be started again).
pub const NEVER_RELEASED_EXIT_CODE: i32 = 75;
/// Exit code of a wrapper whose child succeeded but whose status sidecar
/// could not be written (a full disk, say), or which could not record
/// `running` before starting the child (sysexits' EX_IOERR).
pub const STATUS_WRITE_FAILED_EXIT_CODE: i32 = 74;
/// Exit code of a wrapper that did not start its child because the
/// confinement asked for could not be applied (sysexits' EX_OSERR).
pub const CONFINEMENT_FAILED_EXIT_CODE: i32 = 71;
/// What `okstra worker --help` and `okstra-worker --help` say it is.
pub const ABOUT: &str = "The built-in worker wrapper (started by `okstra exec`)";
/// The shell's codes for a program that could not be executed / found.
const NOT_EXECUTABLE_EXIT_CODE: i32 = 126;
const NOT_FOUND_EXIT_CODE: i32 = 127;
/// How much of the log's new output one look reads: a burst of output is
/// taken in pieces, so the supervising loop stays responsive.
const OUTPUT_CHUNK: u64 = 1 << 20;
/// A line longer than this is no event okstra reads (the CLIs' events are
/// far shorter); it is dropped rather than held.
const LONGEST_EVENT_LINE: usize = 16 << 20;
/// How much of a failed attempt's output (its start, and its end) is read to
/// tell its failure kind and quote what the CLI refused.
const EXCERPT: u64 = 64 * 1024;
/// Exit code of a wrapper that stopped its CLI at the first retry of a
/// request the API refused for its credentials: the code claude and codex
/// exit with when they give up on such a request themselves.
const REFUSED_EXIT_CODE: i32 = 1;

/// The wrapper as a program of its own, named `bin_name`: the process's
/// arguments read by clap (its help and errors on a bad one), then [`run`].
pub fn main(bin_name: &'static str) -> std::process::ExitCode {
    use clap::{Args, FromArgMatches};
    let mut raw = std::env::args_os().skip(1);
    if let (Some(flag), None) = (raw.next(), raw.next()) {
        if flag == SERVE_FLAG {
            return exit_code(serve(bin_name));
        }
    }
    let command = WorkerArgs::augment_args(clap::Command::new(bin_name))
        .version(crate::VERSION)
        .about(ABOUT);
    let args = match command
        .try_get_matches()
        .and_then(|m| WorkerArgs::from_arg_matches(&m))
    {
        Ok(args) => args,
        Err(e) => e.exit(),
    };
    exit_code(run(&args))
}

fn exit_code(code: i32) -> std::process::ExitCode {
    u8::try_from(code).map_or(
        std::process::ExitCode::FAILURE,
        std::process::ExitCode::from,
    )
}

/// Run as a slot (see `slot`): attempt after attempt, as exec sends them.
pub fn serve(bin_name: &'static str) -> i32 {
    slot::serve(bin_name, Timing::REAL)
}

/// Run the wrapper; its exit code. SIGTERM or SIGINT to the wrapper stops the
/// child (SIGTERM, grace, SIGKILL) and the wrapper exits with the child's code.
pub fn run(args: &WorkerArgs) -> i32 {
    // What confining the child needs and makes nothing, done while a gated
    // wrapper waits (see `Ahead`).
    let ahead = Ahead::make(args);
    // Before anything else, even the signal handlers: a gated wrapper that
    // exec stops while it waits just dies, having done nothing.
    if args.gated && !released(&mut io::stdin()) {
        return NEVER_RELEASED_EXIT_CODE;
    }
    let (stop, _signals) = match SignalGuard::stop_flag() {
        Ok(installed) => installed,
        Err(code) => return code,
    };
    execute(args, &stop, Timing::REAL, ahead, None)
}

/// What confining the child needs and makes nothing on disk, done before a
/// gated wrapper waits for its go, while exec records and syncs the
/// dispatch: the thread that will start the child (see `starter`), and the
/// ruleset's files. The TMPDIR and the write directories, which may have
/// to be made, wait for the go.
struct Ahead {
    starter: io::Result<Starter>,
    rules: Result<confine::Begun, String>,
}

impl Ahead {
    /// `None` when `args` ask for no confinement this kernel offers (which
    /// [`prepare_confinement`] then decides again, and says).
    fn make(args: &WorkerArgs) -> Option<Ahead> {
        if args.confinement == Confinement::None {
            return None;
        }
        match confine::offer() {
            confine::Offer::Landlock { abi } => Some(Ahead {
                starter: Starter::new(),
                rules: confine::Begun::new(abi),
            }),
            confine::Offer::Unavailable(_) => None,
        }
    }
}

/// Whether exec let this attempt go: one byte read from `gate` (stdin).
/// End of input, or an error reading it, means exec closed the pipe (or
/// died) without releasing it.
fn released(gate: &mut impl Read) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match gate.read(&mut byte) {
            Ok(n) => return n == 1,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// A line on stderr, prefixed as the wrapper's. stderr is usually the job's
/// log: a failed write there (a full disk) is let go, never a panic.
fn say(message: std::fmt::Arguments) {
    let _ = writeln!(io::stderr(), "okstra worker: {message}");
}

/// The wrapper's clocks, given to `execute` so tests can shorten them.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// Between SIGTERM and SIGKILL.
    grace: Duration,
    /// Between heartbeats.
    heartbeat: Duration,
}

impl Timing {
    const REAL: Timing = Timing {
        grace: STOP_GRACE,
        heartbeat: HEARTBEAT_INTERVAL,
    };
}

/// Signal handlers that set a flag, removed again when dropped.
struct SignalGuard(Vec<signal_hook::SigId>);

impl SignalGuard {
    /// A flag SIGTERM and SIGINT set, with its handlers; where they cannot
    /// be installed, the wrapper says so and exits with the code given.
    fn stop_flag() -> Result<(Arc<AtomicBool>, SignalGuard), i32> {
        let stop = Arc::new(AtomicBool::new(false));
        match SignalGuard::install(&stop) {
            Ok(guard) => Ok((stop, guard)),
            Err(err) => {
                say(format_args!("cannot install signal handlers: {err}"));
                Err(USAGE_EXIT_CODE)
            }
        }
    }

    fn install(flag: &Arc<AtomicBool>) -> io::Result<SignalGuard> {
        let mut ids = Vec::new();
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            ids.push(signal_hook::flag::register(sig, Arc::clone(flag))?);
        }
        Ok(SignalGuard(ids))
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// Absolute paths of one invocation.
struct Paths {
    root: PathBuf,
    prompt: PathBuf,
    result: PathBuf,
    worker_result: PathBuf,
    status: PathBuf,
    log: PathBuf,
    write_dirs: Vec<PathBuf>,
}

impl Paths {
    fn resolve(args: &WorkerArgs) -> io::Result<Paths> {
        let root = std::path::absolute(&args.project_root)?;
        let under = |p: &Path| root.join(p);
        let prompt = under(&args.prompt);
        Ok(Paths {
            status: sidecar::beside_path(&prompt, sidecar::STATUS),
            log: sidecar::beside_path(&prompt, sidecar::LOG),
            result: under(&args.result),
            worker_result: under(&args.worker_result),
            write_dirs: args.write_dirs.iter().map(|d| under(d)).collect(),
            prompt,
            root,
        })
    }
}

/// `<path><suffix>`: the sidecar naming of docs/exec.md#what-is-written-when.
/// The status sidecar, `<prompt>.status.json`.
#[derive(Serialize, Debug, Clone)]
#[serde(rename_all = "camelCase")]
struct Status {
    state: &'static str,
    /// The provider CLI's pid; null until it started.
    pid: Option<u32>,
    wrapper_pid: u32,
    started_at: String,
    heartbeat_at: String,
    exit_code: Option<i32>,
    #[serde(rename = "duration_ms")]
    duration_ms: Option<u64>,
    provider: String,
    attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    dispatch_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    served_model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cli_session_id: Option<String>,
    /// The exact argv the wrapper started (the provider CLI's, or a
    /// `command` job's own).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    argv: Vec<String>,
    /// Where this attempt's output starts in the log (earlier attempts'
    /// output comes before it), in bytes.
    log_offset: u64,
    /// What the attempt spent, where its CLI says (`okstra::provider::Usage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<provider::Usage>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    timed_out: bool,
    /// Ended because the wrapper was told to stop (SIGTERM / SIGINT from
    /// exec): the exit code says how the child took it, not how it did.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    stopped: bool,
    /// On a timeout, or a stop at a retry of refused credentials, the code
    /// the stopped child itself ended with.
    #[serde(skip_serializing_if = "Option::is_none")]
    child_exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// What kernel confinement the child ran under
    /// (docs/confinement.md#kernel-confinement): `landlock-abi<N>`, or `none`.
    /// Absent when it never started.
    #[serde(skip_serializing_if = "Option::is_none")]
    confinement: Option<&'static str>,
    /// What kind of failure a non-zero exit was, where it can be told:
    /// `argument-error`, `not-logged-in`, `credentials-refused`,
    /// `api-error`, `cli-error`, `cli-not-found`, `served-model-mismatch`,
    /// `timeout`.
    #[serde(skip_serializing_if = "Option::is_none")]
    failure_kind: Option<FailureKind>,
}

/// Owns the status sidecar: every write goes through here.
struct StatusFile {
    path: PathBuf,
    /// The project root, which the sidecar is written below without
    /// following a symlink (docs/exec.md#never-through-a-symlink); why not,
    /// when it cannot be opened.
    own: Result<Beneath, String>,
    status: Status,
    started: Instant,
    warned: bool,
    /// Whether the sidecar was written by this wrapper yet.
    written: bool,
}

impl StatusFile {
    /// The sidecar of an attempt about to start: `running`, nothing known
    /// of the child yet.
    fn new(args: &WorkerArgs, paths: &Paths, started: Instant) -> StatusFile {
        StatusFile {
            path: paths.status.clone(),
            own: Beneath::open(&paths.root).map_err(|e| e.to_string()),
            status: Status {
                state: "running",
                pid: None,
                wrapper_pid: std::process::id(),
                started_at: now_rfc3339(),
                heartbeat_at: String::new(),
                exit_code: None,
                duration_ms: None,
                provider: args.provider.clone(),
                attempt: args.attempt,
                dispatch_id: args.dispatch_id.clone(),
                session_id: args.session_id.clone(),
                served_model: None,
                cli_session_id: None,
                argv: Vec::new(),
                log_offset: 0,
                usage: None,
                timed_out: false,
                stopped: false,
                child_exit_code: None,
                error: None,
                confinement: None,
                failure_kind: None,
            },
            started,
            warned: false,
            written: false,
        }
    }
    /// Write the sidecar. A failure is said on stderr the first time, and
    /// returned: a heartbeat may fail and the run go on without liveness,
    /// but the first and the last write are what exec relies on.
    fn write(&mut self) -> io::Result<()> {
        self.status.heartbeat_at = now_rfc3339();
        let mut bytes = serde_json::to_vec_pretty(&self.status).unwrap_or_default();
        bytes.push(b'\n');
        let written = self.put(&bytes);
        self.written |= written.is_ok();
        if let Err(err) = &written {
            if !self.warned {
                say(format_args!(
                    "cannot write the status file {}: {err}",
                    self.path.display()
                ));
                self.warned = true;
            }
        }
        written
    }

    /// Write `bytes` as the sidecar, below the project root, never through
    /// a symlink: one planted at the sidecar, or at a directory above it,
    /// is refused (the write fails), so the wrapper never writes outside.
    /// Liveness, rewritten every heartbeat: atomic, not fsynced (see
    /// `Durability::NoFsync`). exec removes the sidecar before it starts
    /// the wrapper, so the first write, often the only one, makes the file
    /// with one write rather than a temporary and a rename.
    fn put(&self, bytes: &[u8]) -> io::Result<()> {
        let own = self.own.as_ref().map_err(|e| io::Error::other(e.clone()))?;
        let rel = own.relative(&self.path)?;
        if !self.written {
            match own.create_whole(rel, bytes) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_symlink() => return Err(e.into()),
                // There already (a run by hand), or more than a page.
                Err(_) => {}
            }
        }
        let durability = crate::fsutil::Durability::NoFsync;
        Ok(own.write_atomic(rel, bytes, durability)?)
    }

    /// Record the exit; `exit_code` is what the wrapper exits with, unless
    /// this write fails after a success: then the attempt is not known to
    /// have ended well, and the wrapper says so and exits
    /// [`STATUS_WRITE_FAILED_EXIT_CODE`].
    fn finish(&mut self, exit_code: i32, error: Option<String>) -> i32 {
        self.status.state = "exited";
        self.status.exit_code = Some(exit_code);
        self.status.duration_ms = Some(self.started.elapsed().as_millis() as u64);
        self.status.error = error;
        match self.write() {
            Err(err) if exit_code == 0 => {
                say(format_args!(
                    "the child exited 0, but its exit could not be recorded in {}: {err}",
                    self.path.display()
                ));
                STATUS_WRITE_FAILED_EXIT_CODE
            }
            _ => exit_code,
        }
    }
}

fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// The wrapper proper, one attempt, with the stop flag and clocks given so
/// tests can drive them without signals; `ahead`, what was prepared for a
/// confined child beforehand (else it is prepared when needed). `slot` is
/// where a slot reports its worker's pid: its worker then leads a process
/// group of its own, whose leftovers are killed once it ended; a
/// one-attempt wrapper's worker stays in the wrapper's group, which exec
/// stops and clears.
fn execute(
    args: &WorkerArgs,
    stop: &AtomicBool,
    timing: Timing,
    ahead: Option<Ahead>,
    slot: Option<&mut slot::PidReport>,
) -> i32 {
    let started = Instant::now();
    let paths = match Paths::resolve(args) {
        Ok(paths) => paths,
        Err(err) => {
            say(format_args!("cannot resolve the project root: {err}"));
            return USAGE_EXIT_CODE;
        }
    };
    let mut status = StatusFile::new(args, &paths, started);

    let mut ready = match prepare(args, &paths, ahead, &mut status) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    if let Some(report) = &slot {
        ready.env.push(report.marker());
    }
    let (starter, confined) = (ready.starter.take(), ready.confined.as_ref());
    let launched = launch(
        args,
        &ready.spec(&paths),
        confined,
        starter,
        slot,
        &mut status,
    );
    let mut child = match launched {
        Ok(child) => child,
        Err(code) => return code,
    };
    let deadline = args
        .timeout_seconds
        .map(|s| started + Duration::from_secs(s));
    let mut watch = OutputWatch::new(
        ready.provider,
        &paths.log,
        ready.log_start,
        ready.served_check,
    );
    let mut heartbeat = Heartbeat {
        status: &mut status,
        every: timing.heartbeat,
        last: Instant::now(),
    };
    let outcome = supervise(
        &mut child,
        stop,
        deadline,
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
        outcome,
        verdict,
        &watch,
        confined,
        &mut status.status,
    );
    let code = status.finish(code, error);
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
        project_root: &paths.root,
        write_dirs: &paths.write_dirs,
        options: &options,
        command: &args.command,
        session_id: args.session_id.as_deref(),
        project_is_git_repo: paths.root.ancestors().any(|d| d.join(".git").exists()),
    });
    let mut env = worker_env(args, paths);
    if let Some(c) = confined {
        env.extend(c.env(provider));
    }
    (argv, env)
}

/// An attempt checked and ready to start: its provider, what its child
/// runs and how it is confined.
struct Ready {
    provider: Provider,
    served_check: Option<ServedCheck>,
    confined: Option<Confined>,
    starter: Option<io::Result<Starter>>,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    /// Where this attempt's output starts in the log.
    log_start: u64,
}

impl Ready {
    /// How the child is started: in the project root, the prompt on stdin,
    /// its output the wrapper's (the log).
    fn spec<'a>(&'a self, paths: &'a Paths) -> SpawnSpec<'a> {
        SpawnSpec {
            argv: &self.argv,
            cwd: &paths.root,
            env: &self.env,
            log: None,
            stdin: Some(&paths.prompt),
        }
    }
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
    let checked =
        check_inputs(args, paths).and_then(|provider| Ok((provider, served_check(args, paths)?)));
    let (provider, served_check) = match checked {
        Ok(checked) => checked,
        Err(problem) => {
            say(format_args!("{problem}"));
            if paths.root.is_dir() {
                status.status.failure_kind = Some(FailureKind::ArgumentError);
                status.finish(USAGE_EXIT_CODE, Some(problem));
            }
            return Err(USAGE_EXIT_CODE);
        }
    };

    // Prepared here, before the sidecar says the attempt started: only the
    // restriction itself is left for the start. The private TMPDIR lives
    // until the attempt ended, then goes.
    let (starter, begun) = ahead.map(|a| (a.starter, a.rules)).unzip();
    let confined = match prepare_confinement(args, paths, provider, begun) {
        Ok(confined) => confined,
        Err(problem) => {
            say(format_args!("not starting {}: {problem}", args.provider));
            status.status.failure_kind = Some(FailureKind::ConfinementFailed);
            return Err(status.finish(CONFINEMENT_FAILED_EXIT_CODE, Some(problem)));
        }
    };
    let (argv, env) = child_command(args, paths, provider, confined.as_ref());
    // Output of earlier attempts may already be in the log; look only past it.
    let log_start = fs::metadata(&paths.log).map(|m| m.len()).unwrap_or(0);
    status.status.argv = argv.clone();
    status.status.log_offset = log_start;
    status.status.confinement = Some(confined.as_ref().map_or("none", |c| c.rules.applied));
    Ok(Ready {
        provider,
        served_check,
        confined,
        starter,
        argv,
        env,
        log_start,
    })
}

/// Start the worker: leading a process group of its own (a slot's), or in
/// the wrapper's (a one-attempt wrapper's, which exec stops whole).
fn spawn_worker(spec: &SpawnSpec, own_group: bool) -> io::Result<Spawned> {
    if own_group {
        process::spawn(spec)
    } else {
        process::spawn_in_caller_group(spec)
    }
}

/// Start the worker's child, confined where `confined` says: the started
/// child, or the wrapper's exit code, the sidecar finished with why. Under
/// a gate the sidecar first records that the attempt started
/// (docs/exec.md#crash-safety-and-resume): it is the evidence, and without it
/// the child does not start.
fn launch(
    args: &WorkerArgs,
    spec: &SpawnSpec,
    confined: Option<&Confined>,
    starter: Option<io::Result<Starter>>,
    slot: Option<&mut slot::PidReport>,
    status: &mut StatusFile,
) -> Result<Spawned, i32> {
    let own_group = slot.is_some();
    if args.gated {
        if let Err(err) = status.write() {
            say(format_args!(
                "not starting {}: cannot record that the attempt started: {err}",
                args.provider
            ));
            return Err(STATUS_WRITE_FAILED_EXIT_CODE);
        }
    }
    let launched = match confined {
        Some(c) => c.spawn(spec, starter, own_group),
        None => Ok(spawn_worker(spec, own_group)),
    };
    let child = match launched {
        Ok(Ok(child)) => child,
        Ok(Err(err)) => {
            let program = spec.argv.first().map(String::as_str).unwrap_or_default();
            let (code, problem) = launch_failure(program, &err);
            say(format_args!("{problem}"));
            status.status.failure_kind = Some(FailureKind::CliNotFound);
            return Err(status.finish(code, Some(problem)));
        }
        Err(problem) => {
            say(format_args!("not starting {}: {problem}", args.provider));
            status.status.confinement = None;
            status.status.failure_kind = Some(FailureKind::ConfinementFailed);
            return Err(status.finish(CONFINEMENT_FAILED_EXIT_CODE, Some(problem)));
        }
    };
    if let Some(report) = slot {
        crate::fault::die_at("slot-before-pid-report");
        report.started(child.pid());
    }
    status.status.pid = Some(child.pid());
    // A pane's watcher reads the wrapper's pid from the sidecar at once; in
    // cli-wrapper mode exec holds the pid itself (and records it), so the
    // first write waits for the first heartbeat: most short jobs write the
    // sidecar once, at their exit (twice when gated).
    if args.presentation == Presentation::Live {
        // A failure is said once; the heartbeat tries again.
        let _ = status.write();
        say(format_args!(
            "{} attempt {}: started {} (pid {})",
            args.worker_key,
            args.attempt,
            args.provider,
            child.pid()
        ));
    }
    Ok(child)
}

/// The wrapper's exit code for how the child ended, and what went wrong in
/// words; the failure kind and stop flags go on the sidecar's `status`.
fn judge(
    args: &WorkerArgs,
    root: &Path,
    outcome: Outcome,
    verdict: Result<(), String>,
    watch: &OutputWatch,
    confined: Option<&Confined>,
    status: &mut Status,
) -> (i32, Option<String>) {
    let provider = watch.provider;
    match outcome {
        // The served model is judged whatever the CLI's own exit code: a run
        // by the wrong model is never a result.
        Outcome::Exited(_) | Outcome::Mismatch if verdict.is_err() => {
            let problem = verdict.err().unwrap_or_default();
            say(format_args!("{problem}"));
            status.failure_kind = Some(FailureKind::ServedModelMismatch);
            (SERVED_MODEL_MISMATCH_EXIT_CODE, Some(problem))
        }
        Outcome::Mismatch => (SERVED_MODEL_MISMATCH_EXIT_CODE, None),
        Outcome::Exited(code) if code != 0 => {
            let output = watch.excerpt();
            if let Some(c) = confined {
                c.explain_refusals(&output);
            }
            let lead = format!("{} exited {code}", args.provider);
            let tell = |at: &Where| provider.failure(code, &output, at);
            (code, record_failure(root, status, &lead, tell))
        }
        Outcome::Refused(child_code, said) => {
            status.child_exit_code = Some(child_code);
            let lead = format!(
                "{} was stopped at its first retry of a request the API refused",
                args.provider
            );
            let tell = |at: &Where| Some(provider.refused(&said, at));
            (REFUSED_EXIT_CODE, record_failure(root, status, &lead, tell))
        }
        Outcome::Exited(code) => (code, None),
        Outcome::Stopped(code) => {
            status.stopped = true;
            (code, None)
        }
        Outcome::TimedOut(child_code) => {
            status.timed_out = true;
            status.child_exit_code = Some(child_code);
            let secs = args.timeout_seconds.unwrap_or_default();
            let mut problem = format!(
                "wall-clock limit reached: timed out after {secs} s (timeoutSeconds); the child was stopped"
            );
            // What the CLI was stuck on (codex "waiting for network").
            if let Some(line) = provider.said(&FailureKind::Timeout, &watch.excerpt()) {
                problem.push_str(&format!("; {provider} last said: \"{line}\""));
            }
            say(format_args!("{problem}"));
            status.failure_kind = Some(FailureKind::Timeout);
            (TIMEOUT_EXIT_CODE, Some(problem))
        }
        Outcome::Failed(err) => {
            let problem = format!("lost track of the child: {err}");
            say(format_args!("{problem}"));
            (1, Some(problem))
        }
    }
}

/// A CLI's failure as `tell` tells it, given what the CLI saw (to name the
/// credentials it used): said, its kind put on `status`, and its reason,
/// after `lead`, returned.
fn record_failure(
    root: &Path,
    status: &mut Status,
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

/// A worker's confinement, prepared in the wrapper
/// (docs/confinement.md#kernel-confinement).
struct Confined {
    rules: confine::Prepared,
    /// The private TMPDIR, removed when the attempt is over.
    tmp: PrivateTmp,
}

/// The confined worker's private TMPDIR (see [`crate::tmpdir`]): the one
/// exec named (`--tmp-dir`), or one named here; removed when dropped, once
/// the worker ended. exec removes one it named again once it settled the
/// attempt, so a wrapper killed before this ran leaves nothing behind.
struct PrivateTmp {
    root: tmpdir::Root,
    name: String,
    path: PathBuf,
}

impl PrivateTmp {
    fn make(args: &WorkerArgs, project: &Path) -> io::Result<PrivateTmp> {
        let (root, name) = match &args.tmp_dir {
            Some(dir) => tmpdir::Root::of(dir)?,
            None => (tmpdir::Root::system(project)?, tmpdir::own_name()),
        };
        // A TMPDIR in the project would let the worker write there.
        if root
            .path()
            .canonicalize()?
            .starts_with(project.canonicalize()?)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is inside the project", root.path().display()),
            ));
        }
        let path = root.create(&name)?;
        Ok(PrivateTmp { root, name, path })
    }
}

impl Drop for PrivateTmp {
    fn drop(&mut self) {
        if let Err(err) = self.root.remove(&self.name) {
            say(format_args!(
                "cannot remove the worker's private TMPDIR {}: {err}",
                self.path.display()
            ));
        }
    }
}

impl Confined {
    /// Start the child confined, from a thread of its own that restricts
    /// itself (see `starter`): the one made ahead, or one made now. `Err`
    /// when the confinement could not be applied (the child was not
    /// started), else what the start gave.
    fn spawn(
        &self,
        spec: &SpawnSpec,
        ahead: Option<io::Result<Starter>>,
        own_group: bool,
    ) -> Result<io::Result<Spawned>, String> {
        // The wrapper hands its child no log of its own (exec points the
        // wrapper's stdout and stderr at it), so none is carried over.
        debug_assert!(spec.log.is_none(), "a confined start carries no log");
        let starter = ahead
            .unwrap_or_else(Starter::new)
            .map_err(|e| format!("cannot start the thread that confines the worker: {e}"))?;
        let restriction = self
            .rules
            .restriction()
            .map_err(|e| format!("cannot confine the worker: {e}"))?;
        starter.start(Order {
            restriction,
            argv: spec.argv.to_vec(),
            cwd: spec.cwd.to_path_buf(),
            env: spec.env.to_vec(),
            stdin: spec.stdin.map(Path::to_path_buf),
            own_group,
        })
    }

    /// What the child's environment gains: its TMPDIR, and for claude
    /// `IS_SANDBOX=1`, since it now is in one (so `bypassPermissions` runs
    /// as root).
    fn env(&self, provider: Provider) -> Vec<(String, String)> {
        let mut env = vec![("TMPDIR".into(), self.tmp.path.display().to_string())];
        if provider == Provider::Claude {
            env.push(("IS_SANDBOX".into(), "1".into()));
        }
        env
    }

    /// A failed child whose output says a write was refused: say where it
    /// may write, so the log explains its own EACCES.
    fn explain_refusals(&self, output: &str) {
        if output.contains("Permission denied") || output.contains("EACCES") {
            let dirs: Vec<String> = self
                .rules
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            say(format_args!(
                "the worker is confined ({}): it may write only under {} and /dev/null-like devices; a write elsewhere fails with EACCES (Permission denied)",
                self.rules.applied,
                dirs.join(", ")
            ));
        }
    }
}

/// The confinement `args` ask for, prepared (from the ruleset `begun`
/// ahead, where it was): `None` when the child runs unconfined (`none`, or
/// `auto` on a kernel without Landlock); `Err` when it must not start
/// (`required` where the kernel cannot, or a directory that cannot be made
/// or is reached through a symlink).
fn prepare_confinement(
    args: &WorkerArgs,
    paths: &Paths,
    provider: Provider,
    begun: Option<Result<confine::Begun, String>>,
) -> Result<Option<Confined>, String> {
    let begun = match begun {
        Some(begun) => begun?,
        None => {
            if args.confinement == Confinement::None {
                return Ok(None);
            }
            let offer = confine::offer();
            match (confine::decide(args.confinement, &offer), &offer) {
                (Ok(true), confine::Offer::Landlock { abi }) => confine::Begun::new(*abi)?,
                (Err(why), _) => return Err(format!("confinement is required, but {why}")),
                _ => return Ok(None),
            }
        }
    };
    let tmp = PrivateTmp::make(args, &paths.root)
        .map_err(|e| format!("cannot make a private TMPDIR: {e}"))?;
    let mut outside = vec![tmp.path.clone()];
    outside.extend(provider.state_dirs());
    outside.extend(confine::test_also_writable());
    let rules = begun.finish(&confine::Grants {
        root: &paths.root,
        confine_dirs: &args.confine_dirs,
        outside: &outside,
    })?;
    Ok(Some(Confined { rules, tmp }))
}

/// What can be refused before starting anything; the provider, parsed.
fn check_inputs(args: &WorkerArgs, paths: &Paths) -> Result<Provider, String> {
    if !paths.root.is_dir() {
        return Err(format!(
            "the project root {} is not a directory",
            paths.root.display()
        ));
    }
    let provider = args
        .provider
        .parse::<Provider>()
        .map_err(|e| e.to_string())?;
    if provider == Provider::Command && args.command.is_empty() {
        return Err("the command provider needs an argv after `--`".into());
    }
    if !paths.prompt.is_file() {
        return Err(format!(
            "the prompt {} is not a readable file",
            paths.prompt.display()
        ));
    }
    Ok(provider)
}

fn launch_failure(program: &str, err: &io::Error) -> (i32, String) {
    match err.kind() {
        io::ErrorKind::NotFound => (
            NOT_FOUND_EXIT_CODE,
            format!("cannot start `{program}`: command not found (is it installed and on PATH?)"),
        ),
        io::ErrorKind::PermissionDenied => (
            NOT_EXECUTABLE_EXIT_CODE,
            format!("cannot start `{program}`: permission denied"),
        ),
        _ => (
            NOT_FOUND_EXIT_CODE,
            format!("cannot start `{program}`: {err}"),
        ),
    }
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
    if let Some(id) = &args.dispatch_id {
        env.push(("OKSTRA_DISPATCH_ID".into(), id.clone()));
    }
    if let Some(id) = &args.session_id {
        env.push(("OKSTRA_SESSION_ID".into(), id.clone()));
    }
    env
}

/// The sidecar's heartbeat, refreshed from the supervising loop (which
/// wakes at least every `POLL`) rather than from a thread of its own.
struct Heartbeat<'a> {
    status: &'a mut StatusFile,
    every: Duration,
    last: Instant,
}

impl Heartbeat<'_> {
    fn tick(&mut self) {
        if self.last.elapsed() >= self.every {
            // A missed heartbeat is said once; the run goes on.
            let _ = self.status.write();
            self.last = Instant::now();
        }
    }
}

enum Outcome {
    Exited(i32),
    /// Stopped because the CLI reported serving a model other than the one
    /// selected.
    Mismatch,
    /// Stopped at the CLI's first retry of a request the API refused for
    /// its credentials (a retry cannot help); the child's code and the
    /// CLI's words.
    Refused(i32, String),
    /// Stopped because the wrapper was asked to stop; the child's code.
    Stopped(i32),
    /// Stopped at the deadline; the child's code.
    TimedOut(i32),
    Failed(io::Error),
}

/// Wait for the child, stopping it on a signal to the wrapper or at the deadline.
fn supervise(
    child: &mut Spawned,
    stop: &AtomicBool,
    deadline: Option<Instant>,
    grace: Duration,
    watch: &mut OutputWatch,
    heartbeat: &mut Heartbeat,
) -> Outcome {
    loop {
        heartbeat.tick();
        match child.try_wait() {
            Ok(Some(code)) => return Outcome::Exited(code),
            Ok(None) => {}
            Err(err) => return Outcome::Failed(err),
        }
        if stop.load(Ordering::Relaxed) {
            return match child.stop_group(grace) {
                Ok(code) => Outcome::Stopped(code),
                Err(err) => Outcome::Failed(err),
            };
        }
        watch.scan();
        if watch.verdict().is_err() {
            let _ = child.stop_group(grace);
            return Outcome::Mismatch;
        }
        if let Some(said) = watch.facts.refused.clone() {
            return match child.stop_group(grace) {
                Ok(code) => Outcome::Refused(code, said),
                Err(err) => Outcome::Failed(err),
            };
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return match child.stop_group(grace) {
                Ok(code) => Outcome::TimedOut(code),
                Err(err) => Outcome::Failed(err),
            };
        }
        // Wakes at once when the child exits (or a signal arrives); a short
        // job is not held up for a whole poll interval.
        if let Err(err) = child.wait_timeout(POLL.min(heartbeat.every)) {
            return Outcome::Failed(err);
        }
    }
}

#[derive(Debug, Default, PartialEq)]
struct OutputFacts {
    /// The model the CLI last said served (claude names one per answer).
    served_model: Option<String>,
    cli_session_id: Option<String>,
    /// The CLI's last usage event: each covers the attempt up to it.
    usage: Option<provider::Usage>,
    /// The CLI's words where it reported retrying a request the API
    /// refused for its credentials.
    refused: Option<String>,
}

/// What the wrapper needs to check the served model: the selected catalog
/// entry's key and the manifest holding the catalog.
#[derive(Debug, Clone)]
struct ServedCheck {
    model_ref: String,
    manifest: Value,
}

/// Load the catalog entry named by `--model-ref` from `--manifest`.
fn served_check(args: &WorkerArgs, paths: &Paths) -> Result<Option<ServedCheck>, String> {
    let (Some(manifest), Some(model_ref)) = (&args.manifest, &args.model_ref) else {
        return Ok(None);
    };
    let path = paths.root.join(manifest);
    let doc: Value = fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| format!("cannot read the model catalog in {}: {e}", path.display()))?;
    if doc.get("models").and_then(|m| m.get(model_ref)).is_none() {
        return Err(format!(
            "model `{model_ref}` is not in the catalog `models{{}}` of {}",
            path.display()
        ));
    }
    Ok(Some(ServedCheck {
        model_ref: model_ref.clone(),
        manifest: doc,
    }))
}

/// Reads this attempt's part of the log as it grows: the served model (as
/// each answer names it), the CLI's session id and its usage events, the
/// served model judged against the catalog as soon as it is known.
struct OutputWatch {
    provider: Provider,
    log: PathBuf,
    start: u64,
    offset: u64,
    partial: Vec<u8>,
    /// The line held in `partial` was too long to be an event: skip to its end.
    skipping: bool,
    facts: OutputFacts,
    check: Option<ServedCheck>,
}

impl OutputWatch {
    fn new(provider: Provider, log: &Path, start: u64, check: Option<ServedCheck>) -> Self {
        OutputWatch {
            provider,
            log: log.to_path_buf(),
            start,
            offset: start,
            partial: Vec::new(),
            skipping: false,
            facts: OutputFacts::default(),
            check,
        }
    }

    /// Read what was appended since the last call (up to [`OUTPUT_CHUNK`]);
    /// whether anything was.
    fn scan(&mut self) -> bool {
        if self.provider == Provider::Command {
            return false;
        }
        let Ok(mut file) = File::open(&self.log) else {
            return false;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return false;
        }
        let mut chunk = Vec::new();
        if file.take(OUTPUT_CHUNK).read_to_end(&mut chunk).is_err() || chunk.is_empty() {
            return false;
        }
        self.offset += chunk.len() as u64;
        self.partial.extend_from_slice(&chunk);
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            self.line(&String::from_utf8_lossy(&line));
        }
        if self.partial.len() > LONGEST_EVENT_LINE {
            self.partial.clear();
            self.skipping = true;
        }
        true
    }

    /// Read the rest of the output, once the CLI has ended, its last line
    /// too (a CLI killed mid-line leaves no newline).
    fn finish(&mut self) {
        while self.scan() {}
        if !self.partial.is_empty() && !self.skipping {
            let rest = std::mem::take(&mut self.partial);
            self.line(&String::from_utf8_lossy(&rest));
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(model) = self.provider.served_model_from_line(line) {
            self.facts.served_model = Some(model);
        }
        if self.facts.cli_session_id.is_none() {
            self.facts.cli_session_id = self.provider.cli_session_id_from_line(line);
        }
        if let Some(usage) = self.provider.usage_from_line(line) {
            self.facts.usage = Some(usage);
        }
        if self.facts.refused.is_none() {
            self.facts.refused = self.provider.refused_retry_from_line(line);
        }
    }

    /// Read the rest of the attempt's output and put what it said on
    /// `status`: the served model, the CLI's session, the usage. Returns
    /// the served-model verdict.
    fn close(&mut self, status: &mut Status) -> Result<(), String> {
        self.finish();
        status.served_model = self.facts.served_model.clone();
        status.cli_session_id = self.facts.cli_session_id.clone();
        status.usage = self.usage();
        self.verdict()
    }

    /// `Err` once the CLI reported a served model the catalog refuses.
    fn verdict(&self) -> Result<(), String> {
        match (&self.check, &self.facts.served_model) {
            (Some(check), Some(observed)) => {
                let manifest = crate::model::Manifest::new(&check.manifest);
                crate::served_model::check_observed(&manifest, &check.model_ref, observed).map_err(
                    |why| {
                        format!(
                            "served-model check failed for catalog model `{}`: {why}",
                            check.model_ref
                        )
                    },
                )
            }
            _ => Ok(()),
        }
    }

    /// The attempt's usage: the CLI's last usage event, or where it was
    /// stopped before printing one, what its session file holds (found
    /// through this process's `HOME`, which the CLI inherited); the model
    /// that served filled in where the event does not name it; priced by
    /// the catalog's `pricing` for the job's model, where it has one.
    fn usage(&self) -> Option<provider::Usage> {
        let usage = self.facts.usage.clone().or_else(|| {
            let id = self.facts.cli_session_id.as_deref()?;
            let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
            let var = |name: &str| std::env::var_os(name);
            self.provider.usage_from_session(&provider::Session {
                home: Path::new(&home),
                var: &var,
                cli_session_id: id,
            })
        })?;
        let usage = provider::Usage {
            model: usage.model.or_else(|| self.facts.served_model.clone()),
            ..usage
        };
        let pricing = self
            .check
            .as_ref()
            .and_then(|c| provider::Pricing::of(c.manifest.get("models")?.get(&c.model_ref)?));
        Some(usage.priced(pricing.as_ref()))
    }

    /// This attempt's output for telling failure kinds apart: its start
    /// (where an argument error is named, before any usage text) and its
    /// end (where the CLI's last word is), [`EXCERPT`] bytes of each.
    fn excerpt(&self) -> String {
        let Ok(mut file) = File::open(&self.log) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut read = |from: u64, n: u64| {
            let mut bytes = Vec::new();
            if file.seek(SeekFrom::Start(from)).is_ok() {
                let _ = (&mut file).take(n).read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let size = len.saturating_sub(self.start);
        if size <= 2 * EXCERPT {
            return read(self.start, size);
        }
        let head = read(self.start, EXCERPT);
        let tail = read(len - EXCERPT, EXCERPT);
        format!("{head}\n{tail}")
    }
}

/// What an agent's structured output says about the run.
#[cfg(test)]
fn output_facts(provider: &str, log: &Path, from: u64) -> OutputFacts {
    let provider = provider.parse().expect("a provider name");
    let mut watch = OutputWatch::new(provider, log, from, None);
    watch.finish();
    watch.facts
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use serde_json::Value;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        worker: WorkerArgs,
    }

    fn args(root: &Path, script: &str) -> WorkerArgs {
        fs::write(root.join("prompt.md"), "the prompt\n").unwrap();
        Cli::parse_from([
            "okstra-worker",
            "--project-root",
            root.to_str().unwrap(),
            "--provider",
            "command",
            "--prompt",
            "prompt.md",
            "--result",
            "out/result.json",
            "--worker-result",
            "out/worker.json",
            "--worker-key",
            "codex",
            "--attempt",
            "2",
            "--",
            "sh",
            "-c",
            script,
        ])
        .worker
    }

    fn status(root: &Path) -> Value {
        let text = fs::read_to_string(root.join("prompt.md.status.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn env_cwd_stdin_and_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut a = args(
            &root,
            "cat > stdin.txt; pwd > pwd.txt; env | grep '^OKSTRA_' | sort > env.txt; exit 3",
        );
        a.dispatch_id = Some("inv-1:attempt-2".into());
        a.session_id = Some("0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11".into());
        assert_eq!(run(&a), 3);

        assert_eq!(
            fs::read_to_string(root.join("stdin.txt")).unwrap(),
            "the prompt\n"
        );
        assert_eq!(
            fs::read_to_string(root.join("pwd.txt")).unwrap().trim(),
            root.display().to_string()
        );
        let r = root.display();
        let expected = format!(
            "OKSTRA_ATTEMPT=2\n\
             OKSTRA_DISPATCH_ID=inv-1:attempt-2\n\
             OKSTRA_PROJECT_ROOT={r}\n\
             OKSTRA_PROMPT_PATH={r}/prompt.md\n\
             OKSTRA_RESULT_PATH={r}/out/result.json\n\
             OKSTRA_SESSION_ID=0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11\n\
             OKSTRA_WORKER_KEY=codex\n\
             OKSTRA_WORKER_RESULT_PATH={r}/out/worker.json\n"
        );
        assert_eq!(fs::read_to_string(root.join("env.txt")).unwrap(), expected);

        let s = status(&root);
        assert_eq!(s["state"], "exited");
        assert_eq!(s["exitCode"], 3);
        assert!(s["duration_ms"].is_u64(), "{s}");
        assert!(s["pid"].is_u64());
        assert_eq!(s["provider"], "command");
        assert_eq!(s["attempt"], 2);
        assert_eq!(s["dispatchId"], "inv-1:attempt-2");
        assert_eq!(s["sessionId"], "0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11");
        assert!(s["startedAt"].as_str().unwrap().ends_with('Z'));
        assert!(s["heartbeatAt"].is_string());
        assert!(s.get("timedOut").is_none());
    }

    #[test]
    fn optional_env_absent_when_not_given() {
        let dir = tempfile::tempdir().unwrap();
        let a = args(dir.path(), "env > env.txt");
        assert_eq!(run(&a), 0);
        let env = fs::read_to_string(dir.path().join("env.txt")).unwrap();
        assert!(!env.contains("OKSTRA_DISPATCH_ID="));
        assert!(!env.contains("OKSTRA_SESSION_ID="));
        let s = status(dir.path());
        assert_eq!(s["exitCode"], 0);
        assert!(s.get("dispatchId").is_none());
        assert!(s.get("sessionId").is_none());
    }

    #[test]
    fn a_gate_releases_on_one_byte_only() {
        assert!(released(&mut &b"\n"[..]));
        assert!(released(&mut &b"xy"[..]), "the first byte is enough");
        assert!(!released(&mut &b""[..]), "end of input");
        struct Broken;
        impl Read for Broken {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                Err(io::Error::other("gone"))
            }
        }
        assert!(!released(&mut Broken));
    }

    #[test]
    fn relative_project_root_is_made_absolute() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::resolve(&WorkerArgs {
            project_root: PathBuf::from("some/root"),
            ..args(dir.path(), "true")
        })
        .unwrap();
        assert!(paths.root.is_absolute());
        assert!(paths.prompt.ends_with("some/root/prompt.md"));
        assert!(paths.status.ends_with("some/root/prompt.md.status.json"));
        assert!(paths.log.ends_with("some/root/prompt.md.log"));
    }

    #[test]
    fn timeout_stops_the_child_and_exits_124() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(dir.path(), "echo $$ > pid.txt; exec sleep 30");
        a.timeout_seconds = Some(1);
        let started = Instant::now();
        assert_eq!(run(&a), TIMEOUT_EXIT_CODE);
        assert!(started.elapsed() < Duration::from_secs(20));
        let pid: u32 = fs::read_to_string(dir.path().join("pid.txt"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!process::pid_alive(pid));
        let s = status(dir.path());
        assert_eq!(s["state"], "exited");
        assert_eq!(s["exitCode"], 124);
        assert_eq!(s["timedOut"], true);
        assert_eq!(
            s["childExitCode"],
            128 + rustix::process::Signal::TERM.as_raw()
        );
        assert!(s["duration_ms"].as_u64().unwrap() >= 1000);
    }

    #[test]
    fn stop_request_is_forwarded_and_the_childs_code_returned() {
        let dir = tempfile::tempdir().unwrap();
        let a = args(
            dir.path(),
            "trap 'exit 42' TERM; touch ready; while :; do sleep 0.05; done",
        );
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let ready = dir.path().join("ready");
        let trigger = std::thread::spawn(move || {
            let give_up = Instant::now() + Duration::from_secs(10);
            while !ready.exists() && Instant::now() < give_up {
                std::thread::sleep(Duration::from_millis(10));
            }
            flag.store(true, Ordering::Relaxed);
        });
        assert_eq!(execute(&a, &stop, fast(), None, None), 42);
        trigger.join().unwrap();
        assert_eq!(status(dir.path())["exitCode"], 42);
    }

    #[test]
    fn a_confined_child_is_bound_and_the_wrapper_is_not() {
        if let confine::Offer::Unavailable(why) = confine::offer() {
            eprintln!("skipped: {why}");
            return;
        }
        // What the child needs prepared when needed, and prepared ahead
        // (as `run` prepares it before a gated wrapper's wait).
        for made_ahead in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let script = r#"
                echo in > out/in.txt
                if echo x 2>/dev/null > outside.txt; then echo allowed; else echo refused; fi > out/write
                if kill -0 $PPID 2>/dev/null; then echo allowed; else echo refused; fi > out/signal
                echo "$TMPDIR" > out/tmpdir; echo t > "$TMPDIR/t"
            "#;
            let mut a = args(&root, script);
            a.confinement = Confinement::Required;
            a.confine_dirs = vec!["out".into()];
            let ahead = if made_ahead { Ahead::make(&a) } else { None };
            assert_eq!(ahead.is_some(), made_ahead);
            let stop = AtomicBool::new(false);
            assert_eq!(execute(&a, &stop, fast(), ahead, None), 0);
            let read = |p: &str| fs::read_to_string(root.join(p)).unwrap();
            assert_eq!(read("out/in.txt"), "in\n");
            assert_eq!(read("out/write"), "refused\n");
            assert!(!root.join("outside.txt").exists());
            assert_eq!(read("out/signal"), "refused\n", "the wrapper is outside");
            // The wrapper's thread wrote the sidecar outside the child's
            // directories, and removed the TMPDIR; this thread writes anywhere.
            let s = status(&root);
            assert_eq!(s["state"], "exited");
            assert!(s["confinement"]
                .as_str()
                .unwrap()
                .starts_with("landlock-abi"));
            assert!(!Path::new(read("out/tmpdir").trim()).exists());
            fs::write(root.join("after.txt"), "unbound\n").unwrap();
        }
    }

    #[test]
    fn a_confinement_prepared_ahead_that_cannot_be_finished_starts_nothing() {
        if let confine::Offer::Unavailable(why) = confine::offer() {
            eprintln!("skipped: {why}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut a = args(&root, "echo ran > ran.txt");
        a.confinement = Confinement::Required;
        // Not a TMPDIR of okstra's shape: refused after the thread was made.
        a.tmp_dir = Some(root.join("tmp"));
        let ahead = Ahead::make(&a);
        assert!(ahead.is_some());
        let stop = AtomicBool::new(false);
        assert_eq!(
            execute(&a, &stop, fast(), ahead, None),
            CONFINEMENT_FAILED_EXIT_CODE
        );
        assert!(!root.join("ran.txt").exists());
        assert_eq!(status(&root)["failureKind"], "confinement-failed");
        // The thread that was to restrict itself never did: this one writes.
        fs::write(root.join("after.txt"), "unbound\n").unwrap();
    }

    fn fast() -> Timing {
        Timing {
            grace: Duration::from_secs(5),
            heartbeat: Duration::from_millis(50),
        }
    }

    #[test]
    fn status_says_running_and_the_heartbeat_moves() {
        let dir = tempfile::tempdir().unwrap();
        let script = r#"
            s=prompt.md.status.json; i=0
            while [ ! -s $s ]; do i=$((i+1)); [ $i -gt 500 ] && exit 7; sleep 0.01; done
            grep -q '"state": "running"' $s || exit 8
            first=$(grep heartbeatAt $s)
            while [ "$(grep heartbeatAt $s)" = "$first" ]; do
                i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.01
            done
        "#;
        let a = args(dir.path(), script);
        let stop = AtomicBool::new(false);
        assert_eq!(execute(&a, &stop, fast(), None, None), 0);
        let s = status(dir.path());
        assert_eq!(s["state"], "exited");
        assert_eq!(s["exitCode"], 0);
    }

    #[test]
    fn missing_binary_exits_127() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(dir.path(), "unused");
        a.command = vec!["okstra-no-such-binary-xyz".into(), "--flag".into()];
        assert_eq!(run(&a), 127);
        let s = status(dir.path());
        assert_eq!(s["state"], "exited");
        assert_eq!(s["exitCode"], 127);
        assert!(s["pid"].is_null());
        assert!(s["error"]
            .as_str()
            .unwrap()
            .contains("okstra-no-such-binary-xyz"));
    }

    #[test]
    fn unusable_arguments_exit_2_without_starting() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = args(dir.path(), "touch started");
        a.provider = "copilot".into();
        assert_eq!(run(&a), 2);
        assert!(status(dir.path())["error"]
            .as_str()
            .unwrap()
            .contains("unknown provider"));

        let mut a = args(dir.path(), "touch started");
        a.command.clear();
        assert_eq!(run(&a), 2);

        let mut a = args(dir.path(), "touch started");
        a.prompt = PathBuf::from("missing.md");
        assert_eq!(run(&a), 2);
        assert!(!dir.path().join("started").exists());
    }

    #[test]
    fn cli_rejects_bad_session_id_and_attempt_zero() {
        let base = [
            "w",
            "--project-root",
            ".",
            "--provider",
            "claude",
            "--prompt",
            "p",
            "--result",
            "r",
            "--worker-result",
            "r",
            "--worker-key",
            "k",
        ];
        let with = |extra: &[&str]| {
            Cli::try_parse_from(base.iter().chain(extra.iter()).copied()).map(|c| c.worker)
        };
        assert!(with(&["--session-id", "not-a-uuid"]).is_err());
        assert!(with(&["--attempt", "0"]).is_err());
        let ok = with(&[
            "--extra-arg",
            "--max-turns",
            "--extra-arg=3",
            "--write-dir",
            "wt",
            "--presentation",
            "live",
        ])
        .unwrap();
        assert_eq!(ok.extra_args, vec!["--max-turns", "3"]);
        assert_eq!(ok.presentation, Presentation::Live);
        assert_eq!(ok.model, "");
        assert_eq!(ok.attempt, 1);
    }

    #[test]
    fn output_facts_read_this_attempts_part_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let old = "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"old\",\"model\":\"old-model\"}\n";
        let new = "noise\n{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-2\",\"model\":\"claude-x\"}\n";
        fs::write(&log, format!("{old}{new}")).unwrap();
        let facts = output_facts("claude", &log, old.len() as u64);
        assert_eq!(
            facts,
            OutputFacts {
                served_model: Some("claude-x".into()),
                cli_session_id: Some("s-2".into()),
                usage: None,
                refused: None,
            }
        );
        assert_eq!(output_facts("command", &log, 0), OutputFacts::default());
        assert_eq!(
            output_facts("claude", &dir.path().join("none.log"), 0),
            OutputFacts::default()
        );
    }

    /// claude's stream as 2.1.197 printed it against a loopback API: the
    /// init event, two answers by the model that served, the result.
    const CLAUDE_STREAM: &str = concat!(
        r#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-served-1","usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"s-1"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"msg_9","model":"claude-haiku-sub","usage":{"input_tokens":5,"output_tokens":1}},"parent_tool_use_id":"toolu_1","session_id":"s-1"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"msg_2","model":"claude-served-2","usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"s-1"}"#,
        "\n",
        r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s-1","total_cost_usd":0.000978,"usage":{"input_tokens":200,"cache_creation_input_tokens":40,"cache_read_input_tokens":60,"output_tokens":14},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":200,"outputTokens":14,"cacheReadInputTokens":60,"cacheCreationInputTokens":40,"costUSD":0.000978}}}"#,
    );

    #[test]
    fn the_served_model_follows_the_answers_and_usage_is_the_last_event() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        // The result line has no newline: a CLI may end without one.
        fs::write(&log, CLAUDE_STREAM).unwrap();
        let facts = output_facts("claude", &log, 0);
        assert_eq!(
            facts.served_model.as_deref(),
            Some("claude-served-2"),
            "the main loop's last answer; not the sub-agent's"
        );
        assert_eq!(facts.cli_session_id.as_deref(), Some("s-1"));
        let usage = facts.usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            (300, 14, 314),
            "modelUsage, not the answers' snapshots summed"
        );
        assert_eq!(usage.cost_usd, Some(0.000978));
    }

    #[test]
    fn codex_totals_are_cumulative_so_the_last_turn_is_the_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        fs::write(
            &log,
            concat!(
                r#"{"type":"thread.started","thread_id":"th-1"}"#,
                "\n",
                r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"output_tokens":20,"reasoning_output_tokens":5}}"#,
                "\n",
                r#"{"type":"turn.completed","usage":{"input_tokens":260,"cached_input_tokens":90,"output_tokens":45,"reasoning_output_tokens":12}}"#,
                "\n"
            ),
        )
        .unwrap();
        let usage = output_facts("codex", &log, 0).usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (260, 45),
            "not 360 / 65"
        );
    }

    #[test]
    fn usage_is_priced_by_the_catalog_and_names_the_served_model() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        fs::write(&log, CLAUDE_STREAM).unwrap();
        let manifest = serde_json::json!({"models": {
            "sonnet": {"provider": "claude", "modelId": "claude-sonnet-4-5", "versionKind": "channel",
                       "channelFamily": "claude-served", "pricing": {"input": 3, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15}},
            "bare": {"provider": "claude", "modelId": "x", "versionKind": "channel", "channelFamily": "claude-served"}
        }});
        let check = |model_ref: &str| ServedCheck {
            model_ref: model_ref.into(),
            manifest: manifest.clone(),
        };
        let mut watch = OutputWatch::new(Provider::Claude, &log, 0, Some(check("sonnet")));
        watch.finish();
        let usage = watch.usage().unwrap();
        assert_eq!(usage.model.as_deref(), Some("claude-served-2"));
        assert_eq!(
            usage.cost_source,
            Some(provider::usage::CostSource::PriceTable)
        );
        // 200 fresh at 3, 60 cached at 0.3, 40 written at 3.75, 14 out at 15.
        assert_eq!(usage.cost_usd, Some(0.000978));
        let mut watch = OutputWatch::new(Provider::Claude, &log, 0, Some(check("bare")));
        watch.finish();
        let usage = watch.usage().unwrap();
        assert_eq!(
            usage.cost_source,
            Some(provider::usage::CostSource::CliEstimate),
            "no pricing in the catalog: claude's own estimate"
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_excerpt_keeps_both_ends() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let huge = "x".repeat(LONGEST_EVENT_LINE + 10);
        let init = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;
        fs::write(&log, format!("{{\"type\":\"system\",{huge}\n{init}\n")).unwrap();
        assert_eq!(
            output_facts("claude", &log, 0).cli_session_id.as_deref(),
            Some("s-1")
        );

        let usage_text = "usage: ".repeat(30_000);
        fs::write(
            &log,
            format!(
                "earlier attempt\nUnknown arguments: bogus\n{usage_text}\nokstra worker: the end\n"
            ),
        )
        .unwrap();
        let watch = OutputWatch::new(
            Provider::Gemini,
            &log,
            "earlier attempt\n".len() as u64,
            None,
        );
        let excerpt = watch.excerpt();
        assert!(
            excerpt.starts_with("Unknown arguments: bogus"),
            "{}",
            &excerpt[..40]
        );
        assert!(excerpt.trim_end().ends_with("okstra worker: the end"));
        assert!(excerpt.len() as u64 <= 2 * EXCERPT + 1);
        assert_eq!(
            Provider::Gemini
                .said(&FailureKind::ArgumentError, &excerpt)
                .as_deref(),
            Some("Unknown arguments: bogus")
        );
    }
}
