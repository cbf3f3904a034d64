//! The `slurm` backend (docs/slurm.md#running-on-slurm): each attempt's wrapper
//! is a Slurm batch job on a compute node, the project root on a filesystem the
//! nodes share. Like every backend it only starts, watches and stops; the
//! runner keeps every state rule, and settles from the status sidecar the
//! wrapper writes on the node.
//!
//! - Held start (docs/exec.md#crash-safety-and-resume):
//!   `sbatch --parsable --hold` submits the job held, so the runner records its
//!   id before anything of it can run; `scontrol release` lets it go. The
//!   releases the runner made since the backend's last call go in one call, in
//!   the background, at its next call. The wrapper on the node keeps its
//!   `--gated` start: the batch script hands it its go byte, so it writes
//!   `state: running` to the sidecar before the worker starts, exactly as
//!   locally, and a later exec tells an attempt that started from one that
//!   never did by that sidecar alone.
//! - Watching: every job of the run in one `squeue` call per poll (at most
//!   every `POLL`). Time a job spends queued is not idleness: the runner
//!   asks [`Dispatch::queued`] and starts the idle clock when the job does.
//! - Ending: the wrapper's sidecar speaks first. A job Slurm ended without
//!   it is resumable ([`End::Lost`] for a node failure or preemption, which
//!   this exec resumes at once; [`End::Cancelled`] for someone's `scancel`,
//!   which only the next exec resumes); Slurm's time limit is a timeout; a
//!   job Slurm no longer knows (older than `MinJobAge`) is finished, its
//!   state unknown, and settles from the sidecar alone.
//! - Stopping: `scancel --full --signal=TERM` to every running job at once,
//!   one grace period, then `scancel --batch --signal=KILL` (and a plain
//!   `scancel` for what still runs); a job still queued is simply
//!   cancelled. `scancel` succeeds silently for ids
//!   it does not know, so the end is always confirmed by `squeue`.
//! - Resume: a recorded job id is looked up again ([`Dispatch::find`]); a
//!   job still held (its exec died between recording and releasing it) is
//!   released, since its dispatch is on record. A held job of this plan
//!   that no record names (its exec died between `sbatch` and recording) is
//!   cancelled before this exec submits anything.
//!
//! `--no-requeue` keeps Slurm from running an attempt twice under one id
//! after a node failure: a new attempt is okstra's decision, with a new
//! dispatch id.

use super::{Dispatch, Found, Launch, Started, WorkerExe};
use crate::diag::WrapperExit;
use crate::exec::decide::End;
use crate::exec::event::{Dispatched, Handle};
use crate::plan::{Plan, SlurmOptions};
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod client;
pub use client::{client, Output};

/// How often the run's jobs are polled. Slurm's own clients poll far less
/// often (`sbatch --wait`: every 2 s and slower); a quarter second keeps a
/// short job's end prompt at one cheap `squeue` call.
const POLL: Duration = Duration::from_millis(250);
/// How often the jobs being stopped are polled within the grace period.
const STOP_POLL: Duration = Duration::from_millis(100);
/// How long a job may take to end after SIGKILL to its batch step before it
/// is cancelled outright (its steps may outlive the batch step).
const KILL_SETTLE: Duration = Duration::from_secs(2);
/// How long a cancelled job may take to leave Slurm's running states (the
/// cluster's KillWait, 30 s by default, among it) before it is given up
/// on (exit 137).
const KILL_WAIT: Duration = Duration::from_secs(45);
/// The go byte the batch script hands the gated wrapper.
const GATE_WORD: &str = "OKSTRA_GATE";

/// What `squeue` says of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    /// `%T`: `PENDING`, `RUNNING`, `COMPLETED`, ...
    pub state: String,
    /// `%r`: why it pends (`JobHeldUser`, `Resources`, ...), or `None`.
    pub reason: String,
    /// Its exit code as a shell reports it (128 + signal for a signal),
    /// where Slurm knows one.
    pub exit_code: Option<i32>,
}

/// Where a job is in its life, as far as okstra cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Submitted held: nothing of it runs until released.
    Held,
    /// Released, waiting for the scheduler.
    Queued,
    /// Started (or suspended, or completing): it may still write.
    Running,
    /// Over: Slurm will not run anything of it any more.
    Ended,
}

impl JobState {
    pub fn phase(&self) -> Phase {
        match self.state.as_str() {
            "PENDING" if self.reason.starts_with("JobHeld") => Phase::Held,
            "PENDING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {
                Phase::Queued
            }
            "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "PREEMPTED"
            | "BOOT_FAIL" | "DEADLINE" | "OUT_OF_MEMORY" | "REVOKED" | "SPECIAL_EXIT" => {
                Phase::Ended
            }
            // RUNNING, CONFIGURING, COMPLETING (whose final state is not
            // known yet), SUSPENDED, STOPPED, SIGNALING, STAGE_OUT,
            // RESIZING, and any state a later Slurm adds: it may still run.
            _ => Phase::Running,
        }
    }

    /// `RUNNING`, or `PENDING (Resources)`: for people.
    pub fn describe(&self) -> String {
        match self.reason.as_str() {
            "" | "None" => self.state.clone(),
            r => format!("{} ({r})", self.state),
        }
    }
}

/// The shell's exit code from what Slurm reports: `squeue`'s raw wait
/// status (768 is exit 3, 9 is SIGKILL), or `scontrol`'s `exit:signal`.
pub fn exit_code_of(text: &str) -> Option<i32> {
    let text = text.trim();
    if let Some((code, signal)) = text.split_once(':') {
        let (code, signal) = (code.parse::<i32>().ok()?, signal.parse::<i32>().ok()?);
        return Some(if signal > 0 {
            WrapperExit::Signal(signal).code()
        } else {
            code
        });
    }
    let raw = text.parse::<i64>().ok()?;
    let signal = raw & 0x7f;
    Some(if signal != 0 {
        WrapperExit::Signal(signal as i32).code()
    } else {
        ((raw >> 8) & 0xff) as i32
    })
}

/// `squeue -O` fields, each ended by `|` (no field holds one).
const SQUEUE_FORMAT: &str = "JobID:|,State:|,Reason:|,exit_code:|";

/// Parse `squeue -h -O JobID:|,State:|,Reason:|,exit_code:|` output.
pub fn parse_squeue(text: &str) -> HashMap<u64, JobState> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split('|').map(str::trim);
            let id = f.next()?.parse::<u64>().ok()?;
            let state = f.next()?.to_string();
            let reason = f.next().unwrap_or("").to_string();
            let exit_code = f.next().and_then(exit_code_of);
            Some((
                id,
                JobState {
                    state,
                    reason,
                    exit_code,
                },
            ))
        })
        .collect()
}

/// The state of each of `ids` that Slurm still knows, in one `squeue` call;
/// an id missing from the answer is finished, its state unknown (older than
/// `MinJobAge`, or never known). `Err`: Slurm could not be asked.
pub fn query(ids: &[u64]) -> Result<HashMap<u64, JobState>, String> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let out = client(
        "squeue",
        &["-h", "-t", "all", "-j", &list, "-O", SQUEUE_FORMAT],
        None,
    )?;
    if out.ok {
        return Ok(parse_squeue(&out.stdout));
    }
    // For a single id Slurm no longer knows, squeue fails rather than
    // printing nothing (for several, it prints the ones it knows).
    if out.stderr.contains("Invalid job id") {
        return Ok(HashMap::new());
    }
    Err(out.failure("squeue"))
}

/// The cluster's partitions, the default one first-marked: `sinfo` says
/// `debug*` for the default.
pub fn partitions() -> Result<Vec<(String, bool)>, String> {
    let out = client("sinfo", &["-h", "-o", "%P"], None)?;
    if !out.ok {
        return Err(out.failure("sinfo"));
    }
    let mut names: Vec<(String, bool)> = Vec::new();
    for line in out.stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, default) = match line.strip_suffix('*') {
            Some(n) => (n.to_string(), true),
            None => (line.to_string(), false),
        };
        if !names.iter().any(|(n, _)| *n == name) {
            names.push((name, default));
        }
    }
    Ok(names)
}

/// What a probe job found on its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// It wrote its file under the project root, which okstra then read:
    /// the root is shared. `wrapper`: the node can run the wrapper.
    Shared {
        job: u64,
        wrapper: bool,
        took: Duration,
    },
    /// It ended, but its file never appeared here.
    NotShared { job: u64, state: String },
    /// It did not end in time (cancelled), its last state.
    Unfinished { job: u64, state: String },
}

/// Submit a job that writes a file under `root` (saying whether `wrapper`
/// is executable on its node) and exits; wait for it at most `timeout`,
/// read the file here, and remove it.
pub fn probe(
    root: &Path,
    wrapper: &Path,
    options: &SlurmOptions,
    timeout: Duration,
) -> Result<Probe, String> {
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let file = root.join(format!(".okstra-doctor-probe-{nonce}"));
    let script = format!(
        "#!/bin/sh\nif [ -x {w} ]; then w=yes; else w=no; fi\nprintf '%s %s\\n' {n} \"$w\" > {f}\n",
        w = quote(&wrapper.display().to_string()),
        n = quote(&nonce),
        f = quote(&file.display().to_string()),
    );
    let mut args = vec![
        "--parsable".to_string(),
        "--no-requeue".into(),
        "--job-name=okstra-doctor-probe".into(),
        format!("--chdir={}", root.display()),
        "--output=/dev/null".into(),
    ];
    let mut opts = options.clone();
    // A probe needs a minute at most, whatever the job's own limit.
    opts.time_limit = Some("1".into());
    args.extend(option_args(&opts));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let out = client("sbatch", &refs, Some(script.as_bytes()))?;
    if !out.ok {
        return Err(out.failure("sbatch"));
    }
    let job = parse_job_id(&out.stdout)
        .ok_or_else(|| format!("sbatch printed no job id: {}", out.stdout.trim()))?;
    let deadline = started + timeout;
    let mut last = String::from("PENDING");
    let finished = loop {
        if let Ok(states) = query(&[job]) {
            match states.get(&job) {
                None => break true,
                Some(s) if s.phase() == Phase::Ended => {
                    last = s.state.clone();
                    break true;
                }
                Some(s) => last = s.describe(),
            }
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !finished {
        scancel(&[], &[job]);
        return Ok(Probe::Unfinished { job, state: last });
    }
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    let mut words = text.split_whitespace();
    Ok(match (words.next(), words.next()) {
        (Some(n), w) if n == nonce => Probe::Shared {
            job,
            wrapper: w == Some("yes"),
            took: started.elapsed(),
        },
        _ => Probe::NotShared { job, state: last },
    })
}

/// A word as one single-quoted shell word.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The batch script: the wrapper, with the job's environment, handed its
/// go byte on stdin (it was released when Slurm ran the script). `exec`
/// makes the wrapper the batch step's process, so Slurm's signals and exit
/// code are the wrapper's own.
pub fn batch_script(title: &str, argv: &[String], env: &[(String, String)]) -> String {
    let mut words: Vec<String> = Vec::new();
    if !env.is_empty() {
        // `env` takes any variable name, where `export` takes only shell
        // identifiers; it execs the wrapper in turn.
        words.push("env".into());
        words.extend(env.iter().map(|(k, v)| quote(&format!("{k}={v}"))));
    }
    words.extend(argv.iter().map(|a| quote(a)));
    format!(
        "#!/bin/sh\n# okstra: {}\nexec {} <<'{GATE_WORD}'\ngo\n{GATE_WORD}\n",
        title.replace('\n', " "),
        words.join(" ")
    )
}

/// A path as `sbatch --output` reads it: `%` starts a pattern there.
fn slurm_path(path: &Path) -> String {
    path.display().to_string().replace('%', "%%")
}

/// A job name okstra can tell again: its plan's tag, the job and attempt.
fn job_name(tag: &str, key: &str, attempt: &str) -> String {
    let clean: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{tag}-{clean}-{attempt}")
}

/// The `sbatch` arguments of a job's options (what the plan froze).
pub fn option_args(s: &SlurmOptions) -> Vec<String> {
    let mut out = Vec::new();
    let mut add = |flag: &str, v: &Option<String>| {
        if let Some(v) = v {
            out.push(format!("--{flag}={v}"));
        }
    };
    add("partition", &s.partition);
    add("account", &s.account);
    add("time", &s.time_limit);
    add("mem", &s.memory);
    if let Some(c) = s.cpus {
        out.push(format!("--cpus-per-task={c}"));
    }
    out.extend(s.extra_args.iter().cloned());
    out
}

/// The full `sbatch` argv of an attempt.
fn sbatch_args(name: &str, cwd: &Path, log: &Path, options: &SlurmOptions) -> Vec<String> {
    let mut args = vec![
        "--parsable".to_string(),
        "--hold".into(),
        "--no-requeue".into(),
        format!("--job-name={name}"),
        format!("--chdir={}", cwd.display()),
        format!("--output={}", slurm_path(log)),
        format!("--error={}", slurm_path(log)),
        "--open-mode=append".into(),
    ];
    args.extend(option_args(options));
    args
}

/// `sbatch --parsable` prints `<id>` or `<id>;<cluster>`.
fn parse_job_id(stdout: &str) -> Option<u64> {
    stdout.trim().split(';').next()?.trim().parse().ok()
}

/// What the wrapper's status sidecar says of the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SidecarEnd {
    /// No sidecar, or one without an exit: the wrapper never recorded one.
    Unrecorded,
    /// The wrapper recorded its exit; `stopped`: by a signal it got.
    Exited { code: i32, stopped: bool },
}

fn sidecar_end(status: &Path) -> SidecarEnd {
    let Some(doc) = crate::worker::StatusSidecar::read(status) else {
        return SidecarEnd::Unrecorded;
    };
    match doc.exited_with() {
        Some(code) => SidecarEnd::Exited {
            code,
            stopped: doc.stopped,
        },
        None => SidecarEnd::Unrecorded,
    }
}

/// How a job okstra did not stop ended: the exit code to report and, where
/// the code does not say it all, the end itself. `state`: Slurm's last word
/// (`None`: Slurm no longer knows the job).
pub fn conclude(id: u64, state: Option<&JobState>, sidecar: SidecarEnd) -> (i32, Option<End>) {
    let recorded = match sidecar {
        SidecarEnd::Exited { code, .. } => Some(code),
        SidecarEnd::Unrecorded => None,
    };
    let clean = |code| SidecarEnd::Exited {
        code,
        stopped: false,
    };
    let Some(state) = state else {
        // Finished, its state unknown: the sidecar alone says how.
        return match recorded {
            Some(code) if sidecar == clean(code) => (code, None),
            _ => (
                recorded.unwrap_or(1),
                Some(End::Lost(format!(
                    "Slurm job {id} ended while unwatched and Slurm no longer knows how (older than MinJobAge); the wrapper recorded no exit of its own"
                ))),
            ),
        };
    };
    let code = recorded.or(state.exit_code).unwrap_or(1);
    let slurm_ended = match state.state.as_str() {
        // The batch script (the wrapper) ended by itself: its exit code
        // says how, as locally (74 and 75 included).
        "COMPLETED" | "FAILED" | "OUT_OF_MEMORY" => return (code, None),
        "CANCELLED" => End::Cancelled(format!(
            "Slurm job {id} was cancelled by someone other than this exec (an operator's scancel?) before the worker finished; the next `okstra exec` starts a new attempt"
        )),
        "TIMEOUT" | "DEADLINE" => End::TimeLimit(format!(
            "Slurm job {id} reached its time limit (slurm.timeLimit) and Slurm stopped it"
        )),
        other => End::Lost(format!(
            "Slurm job {id} ended {other} before the worker finished (its node failed, or it was preempted)"
        )),
    };
    // Slurm signals every process of a job it ends, the worker too, which
    // may then exit by itself: only a clean exit recorded before that is
    // the worker's own doing.
    if sidecar == clean(0) {
        return (0, None);
    }
    let code = match slurm_ended {
        End::TimeLimit(_) => WrapperExit::Timeout.code(),
        _ => code,
    };
    (code, Some(slurm_ended))
}

/// A job this exec watches.
struct Tracked {
    status: PathBuf,
    /// Handed to `scontrol release` (or found released).
    released: bool,
    /// A poll has seen it released: a hold seen after that is an
    /// operator's, and is left alone.
    release_seen: bool,
    /// Not started yet, as of the last poll.
    queued: bool,
}

/// The `slurm` backend of one exec.
pub struct Slurm {
    worker: WorkerExe,
    /// The project root, where the sidecars of recorded attempts are.
    root: PathBuf,
    /// The job-name prefix of this plan's jobs: `okstra-<digest prefix>`.
    tag: String,
    jobs: HashMap<u64, Tracked>,
    /// Let go by the runner, not yet released.
    unreleased: Vec<u64>,
    /// Ends the exit code does not say, for [`Dispatch::ended`].
    verdicts: HashMap<u64, End>,
    /// Jobs a previous exec recorded that [`Dispatch::find`] saw, and how.
    seen: HashMap<u64, JobState>,
    /// Held jobs of this plan no record names are cancelled before the
    /// first submission.
    swept: bool,
    last_poll: Option<Instant>,
    /// The last polling failure said, so it is said once.
    warned: Option<String>,
    /// Warnings not yet handed to the runner.
    to_say: Vec<String>,
}

impl Slurm {
    pub fn new(worker: WorkerExe, plan: &Plan) -> Slurm {
        let digest = plan.digest.trim_start_matches("sha256:");
        Slurm {
            worker,
            root: PathBuf::from(&plan.project_root),
            tag: format!("okstra-{}", &digest[..digest.len().min(12)]),
            jobs: HashMap::new(),
            unreleased: Vec::new(),
            verdicts: HashMap::new(),
            seen: HashMap::new(),
            swept: false,
            last_poll: None,
            warned: None,
            to_say: Vec::new(),
        }
    }

    fn id_of(handle: Handle) -> Option<u64> {
        match handle {
            Handle::Slurm { slurm_job_id } => Some(slurm_job_id),
            Handle::Pid { .. } => None,
        }
    }

    /// Say `what` once (until something else is said): through the
    /// runner's reporters, at its next look ([`Dispatch::said`]).
    fn warn(&mut self, what: String) {
        if self.warned.as_deref() != Some(what.as_str()) {
            self.to_say.push(format!("slurm: {what}"));
            self.warned = Some(what);
        }
    }

    /// Cancel the held jobs of this plan that no record names: an earlier
    /// exec submitted them and died before recording them, so nothing
    /// will ever release them.
    fn sweep(&mut self) {
        self.swept = true;
        let Ok(out) = client(
            "squeue",
            &[
                "--me",
                "-h",
                "-t",
                "PENDING",
                "-O",
                "JobID:|,Name:|,Reason:|",
            ],
            None,
        ) else {
            return;
        };
        let orphans: Vec<String> = out
            .stdout
            .lines()
            .filter_map(|line| {
                let mut f = line.split('|').map(str::trim);
                let id = f.next()?.parse::<u64>().ok()?;
                let name = f.next()?;
                let reason = f.next()?;
                let ours = name.starts_with(&format!("{}-", self.tag));
                let known = self.seen.contains_key(&id) || self.jobs.contains_key(&id);
                (ours && reason.starts_with("JobHeld") && !known).then(|| id.to_string())
            })
            .collect();
        if !orphans.is_empty() {
            let mut args = vec!["--quiet"];
            args.extend(orphans.iter().map(String::as_str));
            let _ = client("scancel", &args, None);
        }
    }

    /// Release what the runner let go, in one call.
    fn flush_releases(&mut self) {
        if self.unreleased.is_empty() {
            return;
        }
        let ids: Vec<u64> = std::mem::take(&mut self.unreleased);
        let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        // In the background, so the next submissions need not wait for it.
        // A failure is seen at a later poll (the job still held) and the
        // release tried again there.
        std::thread::spawn(move || {
            let _ = client("scontrol", &["release", &list], None);
        });
        for id in ids {
            if let Some(t) = self.jobs.get_mut(&id) {
                t.released = true;
            }
        }
    }

    /// One poll of every watched job; the ones that ended.
    fn poll(&mut self) -> Vec<(Handle, i32)> {
        self.last_poll = Some(Instant::now());
        let ids: Vec<u64> = self.jobs.keys().copied().collect();
        let states = match query(&ids) {
            Ok(s) => {
                self.warned = None;
                s
            }
            Err(e) => {
                self.warn(format!("cannot poll the run's jobs ({e}); trying again"));
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for id in ids {
            let state = states.get(&id);
            let phase = state.map_or(Phase::Ended, JobState::phase);
            let Some(t) = self.jobs.get_mut(&id) else {
                continue;
            };
            match phase {
                Phase::Held if t.released && !t.release_seen => self.unreleased.push(id),
                Phase::Held | Phase::Queued => {
                    t.release_seen |= phase == Phase::Queued;
                    t.queued = true;
                }
                Phase::Running => {
                    t.release_seen = true;
                    t.queued = false;
                }
                Phase::Ended => {
                    let (code, end) = conclude(id, state, sidecar_end(&t.status));
                    if let Some(end) = end {
                        self.verdicts.insert(id, end);
                    }
                    self.jobs.remove(&id);
                    out.push((Handle::Slurm { slurm_job_id: id }, code));
                }
            }
        }
        out
    }

    /// Poll `ids` until none is running any more or `until` passes; the
    /// last states seen of the ones that ended.
    fn wait_ended(
        &mut self,
        ids: &[u64],
        until: Instant,
        last: &mut HashMap<u64, Option<JobState>>,
    ) -> Vec<u64> {
        let mut left: Vec<u64> = ids.to_vec();
        loop {
            if let Ok(states) = query(&left) {
                left.retain(|id| {
                    let state = states.get(id);
                    let over = state.is_none_or(|s| s.phase() == Phase::Ended);
                    if over {
                        last.insert(*id, state.cloned());
                    }
                    !over
                });
            }
            if left.is_empty() || Instant::now() >= until {
                return left;
            }
            std::thread::sleep(STOP_POLL);
        }
    }
}

/// `scancel` with these arguments for these jobs (its status says nothing:
/// it succeeds for ids it does not know).
fn scancel(args: &[&str], ids: &[u64]) {
    if ids.is_empty() {
        return;
    }
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    let mut argv: Vec<&str> = vec!["--quiet"];
    argv.extend_from_slice(args);
    argv.extend(ids.iter().map(String::as_str));
    let _ = client("scancel", &argv, None);
}

impl Dispatch for Slurm {
    fn start(&mut self, launch: &Launch) -> io::Result<Started> {
        if !self.swept {
            self.sweep();
        }
        // What the runner let go since (an earlier slice of this batch)
        // goes before this submission.
        self.flush_releases();
        let argv = self.worker.argv(launch.argv);
        let attempt = launch
            .argv
            .iter()
            .position(|a| a == "--attempt")
            .and_then(|i| launch.argv.get(i + 1))
            .map_or("1", String::as_str);
        let name = job_name(&self.tag, &launch.job.key, attempt);
        let options = launch.job.slurm.clone().unwrap_or_default();
        // The runner has opened the log below the project root, refusing a
        // symlink at any component (`launch.log_file`); slurmstepd appends
        // to it on the node by its path.
        let args = sbatch_args(&name, launch.cwd, launch.log, &options);
        let script = batch_script(launch.title, &argv, launch.env);
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = client("sbatch", &arg_refs, Some(script.as_bytes())).map_err(io::Error::other)?;
        if !out.ok {
            return Err(io::Error::other(out.failure("sbatch")));
        }
        let id = parse_job_id(&out.stdout).ok_or_else(|| {
            io::Error::other(format!("sbatch printed no job id: {}", out.stdout.trim()))
        })?;
        self.jobs.insert(
            id,
            Tracked {
                status: launch.status.to_path_buf(),
                released: false,
                release_seen: false,
                queued: true,
            },
        );
        Ok(Started {
            handle: Handle::Slurm { slurm_job_id: id },
            pid_start: None,
            argv,
        })
    }

    fn release(&mut self, handle: Handle) -> io::Result<()> {
        if let Some(id) = Self::id_of(handle) {
            self.unreleased.push(id);
        }
        Ok(())
    }

    fn abandon(&mut self, handle: Handle) {
        let Some(id) = Self::id_of(handle) else {
            return;
        };
        self.jobs.remove(&id);
        self.unreleased.retain(|u| *u != id);
        // Held, it never ran; if this cancel is lost, the next exec's sweep
        // finds it.
        scancel(&[], &[id]);
    }

    fn find(&mut self, d: &Dispatched) -> Found {
        let Some(id) = Self::id_of(d.handle) else {
            return Found::Gone;
        };
        match query(&[id]) {
            Ok(states) => match states.get(&id) {
                Some(s) if s.phase() != Phase::Ended => {
                    self.seen.insert(id, s.clone());
                    Found::Running
                }
                Some(s) => {
                    self.seen.insert(id, s.clone());
                    // How Slurm ended it, for the runner's `ended`: found by
                    // a later exec, a cancelled attempt resumes now.
                    let status = crate::paths::abs_of(
                        &self.root,
                        &crate::plan::sidecar::beside(&d.prompt_path, crate::plan::sidecar::STATUS),
                    );
                    match conclude(id, Some(s), sidecar_end(&status)).1 {
                        Some(End::Cancelled(_)) => {
                            self.verdicts.insert(id, End::Lost(format!(
                                "Slurm job {id} was cancelled by someone other than okstra while no exec watched it"
                            )));
                        }
                        Some(end) => {
                            self.verdicts.insert(id, end);
                        }
                        None => {}
                    }
                    Found::Gone
                }
                None => Found::Gone,
            },
            // Slurm cannot say: the job may well run. Watching it is safe;
            // starting the attempt again might run it twice.
            Err(e) => {
                self.warn(format!(
                    "cannot look up Slurm job {id} ({e}); watching it as if it ran"
                ));
                Found::Running
            }
        }
    }

    fn adopt(&mut self, d: &Dispatched, status: &Path) {
        let Some(id) = Self::id_of(d.handle) else {
            return;
        };
        let held = self.seen.get(&id).map(JobState::phase) == Some(Phase::Held);
        self.jobs.insert(
            id,
            Tracked {
                status: status.to_path_buf(),
                released: !held,
                release_seen: !held,
                queued: held,
            },
        );
        if held {
            // Its exec recorded it and died before releasing it: the record
            // is there, so it may go now.
            self.unreleased.push(id);
        }
    }

    fn exits(&mut self, _timeout: Duration) -> Vec<(Handle, i32)> {
        self.flush_releases();
        if self.jobs.is_empty() || self.last_poll.is_some_and(|t| t.elapsed() < POLL) {
            return Vec::new();
        }
        self.poll()
    }

    fn stop(&mut self, handles: &[Handle], grace: Duration) -> Vec<(Handle, i32)> {
        let ids: Vec<u64> = handles.iter().filter_map(|h| Self::id_of(*h)).collect();
        if ids.is_empty() {
            return Vec::new();
        }
        // Never released: cancelled while still held, nothing of it ran.
        let never: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| self.unreleased.contains(id))
            .collect();
        self.unreleased.retain(|id| !never.contains(id));
        scancel(&[], &never);
        let live: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| !never.contains(id))
            .collect();
        let states = query(&live).unwrap_or_default();
        let (queued, running): (Vec<u64>, Vec<u64>) = live.iter().partition(|id| {
            states
                .get(id)
                .is_some_and(|s| matches!(s.phase(), Phase::Held | Phase::Queued))
        });
        // One signal to every running job at once, one grace for all.
        scancel(&[], &queued);
        scancel(&["--full", "--signal=TERM"], &running);
        let mut last: HashMap<u64, Option<JobState>> = HashMap::new();
        let left = self.wait_ended(&live, Instant::now() + grace, &mut last);
        if !left.is_empty() {
            // `--batch`: a SIGKILL with `--full` is a plain cancel, which
            // waits the cluster's KillWait before killing anything.
            scancel(&["--batch", "--signal=KILL"], &left);
            let left = self.wait_ended(&left, Instant::now() + KILL_SETTLE, &mut last);
            scancel(&[], &left);
            let stuck = self.wait_ended(&left, Instant::now() + KILL_WAIT, &mut last);
            if !stuck.is_empty() {
                self.warn(format!(
                    "Slurm jobs {stuck:?} did not end within {} s of SIGKILL and scancel; given up on",
                    KILL_WAIT.as_secs()
                ));
            }
        }
        for id in &ids {
            self.jobs.remove(id);
            self.verdicts.remove(id);
        }
        ids.iter()
            .map(|id| {
                let code = match last.get(id) {
                    Some(Some(s)) => s.exit_code.unwrap_or(WrapperExit::TERMINATED.code()),
                    Some(None) => WrapperExit::TERMINATED.code(),
                    None if never.contains(id) => WrapperExit::TERMINATED.code(),
                    None => WrapperExit::KILLED.code(),
                };
                (Handle::Slurm { slurm_job_id: *id }, code)
            })
            .collect()
    }

    fn ended(&mut self, handle: Handle) -> Option<End> {
        self.verdicts.remove(&Self::id_of(handle)?)
    }

    fn queued(&mut self, handle: Handle) -> bool {
        Self::id_of(handle)
            .and_then(|id| self.jobs.get(&id))
            .is_some_and(|t| t.queued)
    }

    fn said(&mut self) -> Vec<String> {
        std::mem::take(&mut self.to_say)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A warning goes to the runner, once until something else is said,
    /// and never to stderr of its own (the reporters say it).
    #[test]
    fn a_warning_is_handed_to_the_runner_once() {
        let plan: Plan = serde_json::from_str(include_str!(
            "../../../tests/it/fixtures/plans/v2-pipeline.json"
        ))
        .unwrap();
        let mut slurm = Slurm::new(WorkerExe::beside(Path::new("/bin/okstra")), &plan);
        assert!(slurm.said().is_empty());
        slurm.warn("squeue failed: timed out".into());
        slurm.warn("squeue failed: timed out".into());
        assert_eq!(slurm.said(), ["slurm: squeue failed: timed out"]);
        assert!(slurm.said().is_empty(), "handed over once");
        slurm.warn("squeue failed: timed out".into());
        assert!(
            slurm.said().is_empty(),
            "the same failure again is not news"
        );
        slurm.warn("sinfo failed".into());
        assert_eq!(slurm.said(), ["slurm: sinfo failed"]);
    }

    fn state(state: &str, reason: &str, exit_code: Option<i32>) -> JobState {
        JobState {
            state: state.into(),
            reason: reason.into(),
            exit_code,
        }
    }

    #[test]
    fn exit_codes_read_in_both_of_slurms_forms() {
        assert_eq!(exit_code_of("0"), Some(0));
        assert_eq!(exit_code_of("768"), Some(3));
        assert_eq!(exit_code_of("9"), Some(137));
        assert_eq!(exit_code_of("36608"), Some(143));
        assert_eq!(exit_code_of("3:0"), Some(3));
        assert_eq!(exit_code_of("0:15"), Some(143));
        assert_eq!(exit_code_of("N/A"), None);
        assert_eq!(exit_code_of(""), None);
    }

    #[test]
    fn squeue_lines_parse_and_junk_is_skipped() {
        let text = "1560|CANCELLED|None|36608|\n1558|FAILED|NonZeroExitCode|768|\nsqueue: warning\n1|PENDING|JobHeldUser|0|\n";
        let got = parse_squeue(text);
        assert_eq!(got.len(), 3);
        assert_eq!(got[&1558], state("FAILED", "NonZeroExitCode", Some(3)));
        assert_eq!(got[&1].phase(), Phase::Held);
        assert_eq!(got[&1560].phase(), Phase::Ended);
    }

    #[test]
    fn a_failure_reads_on_one_line() {
        let out = Output {
            ok: false,
            code: Some(1),
            stdout: String::new(),
            stderr: "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified\n".into(),
        };
        assert_eq!(
            out.failure("sbatch"),
            "sbatch exited 1: invalid partition specified: nope; Batch job submission failed: Invalid partition name specified"
        );
    }

    #[test]
    fn phases() {
        assert_eq!(state("PENDING", "Resources", None).phase(), Phase::Queued);
        assert_eq!(state("PENDING", "JobHeldAdmin", None).phase(), Phase::Held);
        for s in [
            "RUNNING",
            "COMPLETING",
            "SUSPENDED",
            "CONFIGURING",
            "SOMETHING_NEW",
        ] {
            assert_eq!(state(s, "None", None).phase(), Phase::Running, "{s}");
        }
        for s in [
            "COMPLETED",
            "FAILED",
            "CANCELLED",
            "TIMEOUT",
            "NODE_FAIL",
            "PREEMPTED",
            "BOOT_FAIL",
            "OUT_OF_MEMORY",
        ] {
            assert_eq!(state(s, "None", None).phase(), Phase::Ended, "{s}");
        }
        assert_eq!(
            state("PENDING", "Priority", None).describe(),
            "PENDING (Priority)"
        );
        assert_eq!(state("RUNNING", "None", None).describe(), "RUNNING");
    }

    #[test]
    fn the_wrappers_own_exit_speaks_first_unless_slurm_ended_the_job() {
        let exited = |code| SidecarEnd::Exited {
            code,
            stopped: false,
        };
        for s in ["COMPLETED", "FAILED", "OUT_OF_MEMORY"] {
            assert_eq!(
                conclude(1, Some(&state(s, "None", Some(9))), exited(3)),
                (3, None)
            );
        }
        assert_eq!(conclude(1, None, exited(3)), (3, None));
        // A worker that finished cleanly before Slurm ended the job did its
        // work; one that died of Slurm's signal (exit 143, not `stopped`:
        // Slurm signals the worker itself too) did not.
        for s in ["CANCELLED", "TIMEOUT", "NODE_FAIL"] {
            assert_eq!(
                conclude(1, Some(&state(s, "None", Some(0))), exited(0)),
                (0, None)
            );
            let (_, end) = conclude(1, Some(&state(s, "None", Some(143))), exited(143));
            assert!(end.is_some(), "{s}");
        }
    }

    #[test]
    fn a_job_that_ended_by_itself_reports_its_exit_code() {
        let none = SidecarEnd::Unrecorded;
        assert_eq!(
            conclude(
                1,
                Some(&state("FAILED", "NonZeroExitCode", Some(127))),
                none
            ),
            (127, None)
        );
        assert_eq!(
            conclude(1, Some(&state("COMPLETED", "None", Some(74))), none),
            (74, None)
        );
        assert_eq!(
            conclude(1, Some(&state("OUT_OF_MEMORY", "None", Some(137))), none),
            (137, None)
        );
    }

    #[test]
    fn what_slurm_ended_without_the_wrappers_word() {
        let stopped = SidecarEnd::Exited {
            code: 143,
            stopped: true,
        };
        let none = SidecarEnd::Unrecorded;
        let (_, end) = conclude(7, Some(&state("CANCELLED", "None", Some(143))), stopped);
        assert!(
            matches!(end, Some(End::Cancelled(ref w)) if w.contains("Slurm job 7")),
            "{end:?}"
        );
        let (code, end) = conclude(7, Some(&state("TIMEOUT", "TimeLimit", Some(143))), stopped);
        assert_eq!(code, WrapperExit::Timeout.code());
        assert!(matches!(end, Some(End::TimeLimit(_))));
        for s in ["NODE_FAIL", "PREEMPTED", "BOOT_FAIL"] {
            let (_, end) = conclude(7, Some(&state(s, "None", None)), none);
            assert!(
                matches!(end, Some(End::Lost(ref w)) if w.contains(s)),
                "{end:?}"
            );
        }
        // Gone from Slurm, no exit recorded: finished, state unknown.
        let (_, end) = conclude(7, None, none);
        assert!(matches!(end, Some(End::Lost(ref w)) if w.contains("MinJobAge")));
    }

    #[test]
    fn the_batch_script_hands_the_gated_wrapper_its_byte() {
        let script = batch_script(
            "it's me",
            &[
                "/opt/okstra-worker".into(),
                "--gated".into(),
                "a b".into(),
                "it's".into(),
            ],
            &[
                ("A".into(), "1 2".into()),
                ("weird-name".into(), "x".into()),
            ],
        );
        assert_eq!(
            script,
            "#!/bin/sh\n# okstra: it's me\nexec env 'A=1 2' 'weird-name=x' '/opt/okstra-worker' '--gated' 'a b' 'it'\\''s' <<'OKSTRA_GATE'\ngo\nOKSTRA_GATE\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = batch_script(
            "t",
            &[
                "sh".into(),
                "-c".into(),
                format!("printf '%s|' \"$A\" \"$(head -c 2)\" > {}", out.display()),
            ],
            &[("A".into(), "x y".into())],
        );
        let status = Command::new("sh").arg("-c").arg(&script).status().unwrap();
        assert!(status.success());
        assert_eq!(std::fs::read_to_string(out).unwrap(), "x y|go|");
    }

    #[test]
    fn sbatch_arguments_hold_the_job_and_keep_the_log() {
        let options = SlurmOptions {
            partition: Some("debug".into()),
            account: None,
            time_limit: Some("10:00".into()),
            cpus: Some(2),
            memory: Some("1G".into()),
            extra_args: vec!["--qos=short".into()],
        };
        let args = sbatch_args(
            "okstra-abc-w_1-2",
            Path::new("/p"),
            Path::new("/p/100%/x.log"),
            &options,
        );
        assert_eq!(
            args,
            [
                "--parsable",
                "--hold",
                "--no-requeue",
                "--job-name=okstra-abc-w_1-2",
                "--chdir=/p",
                "--output=/p/100%%/x.log",
                "--error=/p/100%%/x.log",
                "--open-mode=append",
                "--partition=debug",
                "--time=10:00",
                "--mem=1G",
                "--cpus-per-task=2",
                "--qos=short"
            ]
        );
        assert_eq!(job_name("okstra-abc", "w 1/x", "2"), "okstra-abc-w_1_x-2");
        assert_eq!(parse_job_id("42\n"), Some(42));
        assert_eq!(parse_job_id("42;cluster\n"), Some(42));
        assert_eq!(parse_job_id("oops"), None);
    }
}
