//! `okstra exec` and `okstra run`.

use super::{plan as plan_cmd, report, RunTarget};
use okstra::compile;
use okstra::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use okstra::exec::{self, Options, Outcomes};
use okstra::provider::UsageTotal;
use okstra::render;
use okstra::state::WorkerStatus;
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// The plan written by `okstra plan`.
    pub plan: PathBuf,
    /// How many jobs of a stage run at once (default: all).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Write a JUnit XML report here once the run ended (one test case per
    /// job, a test suite per stage, retries as reruns), whole or not at all.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Progress on stderr and the summary on stdout as text, or as JSON (progress one JSON object a line on stderr, the summary one document on stdout).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The job spec to plan and run.
    pub spec: PathBuf,
    #[command(flatten)]
    pub target: RunTarget,
    /// How many jobs of a stage run at once (default: all).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Write a JUnit XML report here once the run ended (as `okstra exec --junit`).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// As `okstra exec --format`: text, or JSON lines of progress on stderr and one JSON summary on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

fn options(
    concurrency: Option<usize>,
    format: Format,
    junit: Option<PathBuf>,
    interrupt: Arc<AtomicBool>,
) -> Options {
    Options {
        concurrency,
        format,
        junit,
        interrupt,
        worker: match std::env::current_exe() {
            Ok(okstra) => exec::backend::WorkerExe::beside(&okstra),
            Err(_) => exec::backend::WorkerExe::subcommand(Path::new("okstra")),
        },
        grace: Duration::from_secs(
            std::env::var("OKSTRA_STOP_GRACE_SECONDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(5),
        ),
    }
}

/// Refuse a `--junit` path that cannot be written before anything runs:
/// its directory must exist and be writable, and it must not be one.
fn check_junit(path: Option<&Path>) -> Result<(), Diagnostic> {
    let Some(path) = path else { return Ok(()) };
    let shown = path.display().to_string();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let why = if path.is_dir() {
        Some("it is a directory".to_string())
    } else if !dir.is_dir() {
        Some(format!("its directory {} does not exist", dir.display()))
    } else if rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).is_err() {
        Some(format!("its directory {} is not writable", dir.display()))
    } else {
        None
    };
    match why {
        None => Ok(()),
        Some(why) => Err(Diagnostic::new(
            Code::OutputUnwritable,
            format!("cannot write the JUnit report {shown}: {why}"),
        )
        .in_file(shown)
        .help("choose a file in an existing, writable directory (nothing was run)")),
    }
}

pub fn exec(args: &ExecArgs) -> ExitStatus {
    if let Err(d) = check_junit(args.junit.as_deref()) {
        return report(&Diagnostics::from(d), args.format);
    }
    let verified = match exec::verify(&args.plan) {
        Ok(v) => v,
        Err(diags) => return report(&diags, args.format),
    };
    // Ctrl-C and SIGTERM stop the run from here on, not the process: exec
    // stops every worker and records it (docs/exec.md#running-a-stage).
    let interrupt = match okstra::process::interrupt_flag() {
        Ok(flag) => flag,
        Err(e) => {
            let d = Diagnostic::new(
                Code::ExecState,
                format!("cannot install signal handlers: {e}"),
            );
            return report(&Diagnostics::from(d), args.format);
        }
    };
    let opts = options(args.concurrency, args.format, args.junit.clone(), interrupt);
    match exec::exec(&verified, &opts) {
        Ok(outcomes) => finish(&outcomes, args.format),
        Err(diags) => report(&diags, args.format),
    }
}

pub fn run(args: &RunArgs) -> ExitStatus {
    if let Err(d) = check_junit(args.junit.as_deref()) {
        return report(&Diagnostics::from(d), args.format);
    }
    let plan = match compile::compile(&plan_cmd::request(
        Some(args.spec.clone()),
        &args.target,
        None,
    )) {
        Ok(p) => p,
        Err(d) => return report(&d, args.format),
    };
    let path = match keep_plan(&plan) {
        Ok(path) => path,
        Err(d) => return report(&d, args.format),
    };
    if args.format == Format::Text {
        let _ = writeln!(
            std::io::stderr(),
            "{}",
            render::summary(&plan, &as_typed(&path).display().to_string())
        );
    }
    exec(&ExecArgs {
        plan: path,
        concurrency: args.concurrency,
        junit: args.junit.clone(),
        format: args.format,
    })
}

/// Where `okstra run` keeps the plan it made (docs/cli.md#commands): the run
/// directory (team-state's), `plans/<first 12 hex of the digest>.json`, so that
/// the `okstra exec` line of its review runs it again. Written below the
/// project root without following a symlink, under the run's exec lock: a stage
/// another exec is running would take the new file for a worker's write (that
/// exec refuses this one with `exec/locked` anyway).
fn keep_plan(plan: &okstra::plan::Plan) -> Result<PathBuf, Diagnostics> {
    let root = Path::new(&plan.project_root);
    let team = okstra::paths::abs_of(root, &plan.run.team_state_path);
    let run_dir = team.parent().unwrap_or(root);
    let path = run_dir
        .join("plans")
        .join(format!("{}.json", render::short(&plan.digest)));
    let unwritable = |e: &dyn std::fmt::Display| {
        Diagnostics::from(
            Diagnostic::new(
                Code::OutputUnwritable,
                format!("cannot keep the plan at {}: {e}", path.display()),
            )
            .in_file(path.display().to_string())
            .help("the run directory (where the manifest's teamStatePath lives) must be writable; nothing was run"),
        )
    };
    let own = okstra::beneath::Beneath::open(root).map_err(|e| unwritable(&e))?;
    let _lock = exec::lock_run(
        plan,
        &own,
        &okstra::state::TeamStateStore::open(team.clone()),
    )?;
    own.relative(&path)
        .and_then(|rel| {
            own.write_atomic(
                rel,
                plan_cmd::plan_text(plan).as_bytes(),
                okstra::fsutil::Durability::Fsync,
            )
        })
        .map_err(|e| unwritable(&e))?;
    Ok(path)
}

/// `path` as a person types it here: relative to the current directory
/// where it lies below it, else absolute.
fn as_typed(path: &Path) -> PathBuf {
    std::env::current_dir()
        .and_then(|d| d.canonicalize())
        .ok()
        .and_then(|cwd| path.strip_prefix(cwd).ok().map(Path::to_path_buf))
        .filter(|rel| !rel.as_os_str().is_empty())
        .unwrap_or_else(|| path.to_path_buf())
}

fn finish(o: &Outcomes, format: Format) -> ExitStatus {
    let status = exec::exit_status(o);
    let mut refused = Diagnostics::from(o.refused.clone());
    refused.extend(o.problems.clone());
    match format {
        Format::Text => {
            let _ = std::io::stdout().write_all(summary_table(o).as_bytes());
            if !refused.is_empty() {
                let _ = std::io::stderr().write_all(refused.render_styled(super::stderr_color()).as_bytes());
            }
            if let Some(why) = &o.fatal {
                let _ = writeln!(
                    std::io::stderr(),
                    "okstra: the run stopped: {why}\nhelp: nothing unrecorded was started; once the cause is fixed (free space, permissions), run `okstra exec` again to finish the run"
                );
            }
        }
        // exec keeps SIGPIPE ignored (a closed pipe must not kill a run), so
        // a failed write is ignored rather than panicking.
        Format::Json => drop(writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string_pretty(&json!({
                "ok": status == ExitStatus::Success,
                "interrupted": o.interrupted,
                "stopped": o.fatal,
                "errors": refused.to_json()["errors"],
                "jobs": o.reports.iter().map(|r| {
                    let mut job = json!({
                        "stage": r.stage, "key": r.key, "label": r.label, "status": r.status,
                        "attempts": r.attempts, "reason": r.reason, "durationMs": okstra::clock::millis(r.duration),
                    });
                    if let Some(usage) = &r.usage {
                        job["usage"] = json!(usage);
                    }
                    job
                }).collect::<Vec<_>>(),
                "usage": run_usage(o),
            }))
            .unwrap_or_default()
        )),
    }
    status
}

/// What the run's jobs spent, where their CLIs said.
fn run_usage(o: &Outcomes) -> Option<UsageTotal> {
    let mut total: Option<UsageTotal> = None;
    for u in o.reports.iter().filter_map(|r| r.usage.as_ref()) {
        total.get_or_insert_with(UsageTotal::default).merge(u);
    }
    total
}

fn summary_table(o: &Outcomes) -> String {
    // Tokens and cost only where some job reported usage: a run of
    // `command` jobs reads as before.
    let spent = run_usage(o);
    let rows: Vec<Vec<String>> = o
        .reports
        .iter()
        .map(|r| {
            let mut row = vec![
                r.stage.clone(),
                r.label.clone(),
                r.status.as_str().to_string(),
                r.attempts.to_string(),
                format!("{:.1}s", r.duration.as_secs_f64()),
            ];
            if spent.is_some() {
                row.push(r.usage.as_ref().map_or("-".into(), UsageTotal::tokens_text));
                row.push(r.usage.as_ref().map_or("-".into(), UsageTotal::cost_text));
            }
            row.push(r.reason.clone());
            row
        })
        .collect();
    let headers: &[&str] = if spent.is_some() {
        &[
            "stage", "job", "status", "attempts", "time", "tokens", "cost", "reason",
        ]
    } else {
        &["stage", "job", "status", "attempts", "time", "reason"]
    };
    let mut out = render::table(headers, &rows);
    let done = o
        .reports
        .iter()
        .filter(|r| r.status == WorkerStatus::Completed)
        .count();
    let _ = writeln!(
        out,
        "{done} of {} job{} completed{}",
        o.reports.len(),
        if o.reports.len() == 1 { "" } else { "s" },
        if o.interrupted { " (interrupted)" } else { "" }
    );
    if let Some(u) = spent {
        let _ = writeln!(
            out,
            "spent {} tokens ({}), cost {}",
            u.tokens_text(),
            u.breakdown(),
            u.cost_text()
        );
    }
    out
}
