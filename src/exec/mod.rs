//! `okstra exec` as a library: verify a frozen plan, then run its stages
//! crash-safely (docs/exec.md#okstra-exec).
//!
//! ```text
//! load (format, digest) ─ verify (inputs, bindings) ─ lock ─ run
//!   run: replay the events log ─ per stage: launch held ─ record ─ release
//!        ─ watch ─ audit ─ decide ─ record ─ (retry)      ─► Outcomes
//! ```
//!
//! [`verify`] then [`exec`] is what the command line calls; [`run`] takes a
//! plan already verified and the [`report::Reporter`]s to tell, for use from
//! Rust. Neither installs a signal handler: the caller's flag
//! ([`Options::interrupt`]) stops a run.

pub mod artifacts;
pub mod backend;
pub mod baseline;
pub mod decide;
pub mod event;
pub mod jobs;
pub mod load;
pub mod notices;
pub mod preflight;
pub mod record;
pub mod replay;
pub mod report;
pub mod row;
mod run;
pub mod settle;

pub use report::JobReport;

use crate::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use crate::fsutil::FileLock;
use crate::paths;
use crate::plan::Plan;
use crate::state::WorkerStatus;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

pub struct Options {
    pub concurrency: Option<usize>,
    pub format: Format,
    /// The executable that plays `okstra worker`.
    pub worker: backend::WorkerExe,
    /// How long stopped workers get between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Where to write the JUnit XML report, once the run ended.
    pub junit: Option<PathBuf>,
    /// Set by the caller to stop the run (docs/exec.md#running-a-stage):
    /// every worker is stopped, its attempt settled `interrupted`, and the
    /// run ends with [`Outcomes::interrupted`]. The command line sets it
    /// from SIGINT and SIGTERM (`crate::process::interrupt_flag`); the
    /// library installs no signal handler of its own.
    pub interrupt: Arc<AtomicBool>,
}

pub struct Outcomes {
    /// Every job of the plan, in plan order.
    pub reports: Vec<JobReport>,
    pub interrupted: bool,
    /// Jobs refused at their start because their model binding moved
    /// (`exec/binding-changed`); they were not run.
    pub refused: Vec<Diagnostic>,
    /// What else went wrong, said once for the run (`audit/incomplete`,
    /// `exec/cleanup-incomplete`): any of them fails the run.
    pub problems: Vec<Diagnostic>,
    /// A record that could not be written stopped the run: why.
    pub fatal: Option<String>,
}

/// A plan read by [`load`], whose inputs and bindings were checked against
/// the world as it is now (docs/exec.md#before-anything-starts).
pub struct Verified {
    /// The plan without its jobs (its stages keep their names).
    pub plan: Plan,
    pub jobs: jobs::Jobs,
    pub root: PathBuf,
    /// The manifest's modification time and length when every binding was
    /// found intact.
    pub manifest_stamp: Option<(std::time::SystemTime, u64)>,
}

/// Read and verify the plan at `path`: refused with every reason, nothing
/// started and nothing written.
pub fn verify(path: &Path) -> Result<Verified, Diagnostics> {
    let load::Lean { plan, jobs } = load::load_lean(path)?;
    let root = PathBuf::from(&plan.project_root);
    let manifest_stamp = preflight::verify(&plan, &jobs, &root)?;
    Ok(Verified {
        plan,
        jobs,
        root,
        manifest_stamp,
    })
}

/// `okstra exec PLAN` once [`verify`] passed it: run with the reporters for
/// `opts.format` (and the JUnit report, written once the run ended,
/// interrupted too).
pub fn exec(verified: &Verified, opts: &Options) -> Result<Outcomes, Diagnostics> {
    let mut reporters = report::for_format(opts.format);
    let junit = opts.junit.clone().map(|out| {
        let order = verified
            .plan
            .stages
            .iter()
            .enumerate()
            .map(|(si, stage)| {
                let keys = (0..verified.jobs.len())
                    .filter(|&i| verified.jobs.stage_of(i) == si)
                    .map(|i| verified.jobs.key(i).to_string())
                    .collect();
                (stage.name.clone(), keys)
            })
            .collect();
        let (collector, writer) = report::junit::junit(&verified.plan, order, out);
        reporters.push(Box::new(collector));
        writer
    });
    let mut outcomes = run(verified, opts, reporters)?;
    if let Some(Err(d)) = junit.map(|j| j.write()) {
        outcomes.problems.push(d);
    }
    Ok(outcomes)
}

/// Run a verified plan: lock the run, resume what its records say, run what
/// is left. Refusals (a locked run, unreadable state) start nothing.
pub fn run(
    verified: &Verified,
    opts: &Options,
    reporters: Vec<Box<dyn report::Reporter>>,
) -> Result<Outcomes, Diagnostics> {
    let Verified { plan, root, .. } = verified;
    crate::fault::arm();
    let team_state = paths::abs_of(root, &plan.run.team_state_path);
    let store = crate::state::TeamStateStore::open(team_state.clone());
    // Unreadable state refuses the run before anything is created.
    if let Err(e) = store.check() {
        return Err(state_refusal(plan, e.to_string()).into());
    }
    let own = crate::beneath::Beneath::open(root)
        .map(std::sync::Arc::new)
        .map_err(|e| Diagnostics::from(state_refusal(plan, e.to_string())))?;
    let lock = lock_run(plan, &own, &store)?;
    let rec = record::Recorder::open(root, plan, std::sync::Arc::clone(&own))
        .map_err(|e| Diagnostics::from(state_refusal(plan, e.to_string())))?;
    let interrupt = Arc::clone(&opts.interrupt);
    let outcomes = run::Runner::new(verified, opts, rec, own, reporters, interrupt).run();
    drop(lock);
    Ok(outcomes)
}

/// Take the run's exclusive exec lock (docs/exec.md#before-anything-starts), or
/// say who holds it (`exec/locked`). Also held by `okstra run` while it writes
/// its plan into the run directory, so that no running stage sees that write.
pub fn lock_run(
    plan: &Plan,
    own: &crate::beneath::Beneath,
    store: &crate::state::TeamStateStore,
) -> Result<FileLock, Diagnostics> {
    let lock_path = store.exec_lock_path();
    let lock_file = own
        .relative(&lock_path)
        .and_then(|rel| own.open_file(rel, crate::beneath::WriteMode::Append))
        .map_err(|e| Diagnostics::from(state_refusal(plan, e.to_string())))?;
    match FileLock::try_file(lock_file, &lock_path) {
        Ok(Ok(lock)) => Ok(lock),
        Ok(Err(file)) => {
            let holder = crate::fsutil::lock_holder(&file)
                .map(|h| format!(", {h}"))
                .unwrap_or_default();
            Err(Diagnostic::new(
                Code::ExecLocked,
                format!(
                    "another `okstra exec` holds this run ({}{holder})",
                    lock_path.display()
                ),
            )
            .help("wait for it to finish, or check `okstra status --manifest M`; a dead executor releases the lock by itself")
            .into())
        }
        Err(e) => {
            Err(state_refusal(plan, format!("cannot lock {}: {e}", lock_path.display())).into())
        }
    }
}

fn state_refusal(plan: &Plan, message: String) -> Diagnostic {
    Diagnostic::new(Code::ExecState, message)
        .in_file(plan.run.team_state_path.clone())
        .help("okstra never overwrites run state it cannot read: repair or move the file, then run exec again")
}

/// The exit status of a finished exec.
pub fn exit_status(o: &Outcomes) -> ExitStatus {
    if o.interrupted {
        ExitStatus::Interrupted
    } else if !o.refused.is_empty() {
        ExitStatus::PlanRefused
    } else if o.fatal.is_none()
        && o.reports
            .iter()
            .all(|r| r.status == WorkerStatus::Completed)
    {
        // Every job did its work, but an asked-for report was not written,
        // or something exec owes the run (a cleanup) did not complete.
        if o.problems.iter().any(|d| d.code == Code::OutputUnwritable) {
            ExitStatus::InvalidInput
        } else if o.problems.is_empty() {
            ExitStatus::Success
        } else {
            ExitStatus::JobsFailed
        }
    } else {
        ExitStatus::JobsFailed
    }
}
