//! `okstra exec`, `okstra run` and `okstra status`.

use super::{plan as plan_cmd, report, RunTarget};
use crate::compile::{self, paths};
use crate::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use crate::exec::{self, Options, Outcomes};
use crate::provider::UsageTotal;
use crate::render;
use crate::state::WorkerStatus;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
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

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// The run manifest.
    #[arg(long, value_name = "M")]
    pub manifest: PathBuf,
    /// The project root the manifest's paths are relative to.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
    /// Print the workers and dispatches as tables, or as one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

fn options(concurrency: Option<usize>, format: Format, junit: Option<PathBuf>) -> Options {
    Options {
        concurrency,
        format,
        junit,
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
    let opts = options(args.concurrency, args.format, args.junit.clone());
    match exec::exec(&args.plan, &opts) {
        Ok(outcomes) => finish(&outcomes, args.format),
        Err(diags) => report(&diags, args.format),
    }
}

pub fn run(args: &RunArgs) -> ExitStatus {
    if let Err(d) = check_junit(args.junit.as_deref()) {
        return report(&Diagnostics::from(d), args.format);
    }
    let plan = match compile::compile(&plan_cmd::request(Some(args.spec.clone()), &args.target)) {
        Ok(p) => p,
        Err(d) => return report(&d, args.format),
    };
    // A private directory (mode 0700, an unpredictable name): nobody else
    // can plant or swap the plan between writing and running it.
    let dir = match tempfile::Builder::new().prefix("okstra-run-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            let d = Diagnostic::new(
                Code::InputUnreadable,
                format!("cannot create a temporary directory for the plan: {e}"),
            )
            .help("set TMPDIR to a writable directory");
            return report(&Diagnostics::from(d), args.format);
        }
    };
    let path = dir.path().join("plan.json");
    if let Err(d) = plan_cmd::write_plan(&plan, &path) {
        return report(&Diagnostics::from(d), args.format);
    }
    if args.format == Format::Text {
        let _ = writeln!(
            std::io::stderr(),
            "{}",
            render::summary(&plan, &path.display().to_string())
        );
    }
    let status = exec(&ExecArgs {
        plan: path.clone(),
        concurrency: args.concurrency,
        junit: args.junit.clone(),
        format: args.format,
    });
    drop(dir);
    status
}

/// The Slurm state of every running attempt with a Slurm job, asked in one
/// `squeue` call and put on its row as `slurmState` (and `slurmReason`
/// while it pends). `None`: no dispatch ran on Slurm.
fn slurm_states(rows: &mut [Value]) -> Option<Result<(), String>> {
    let job = |r: &Value| r.get("slurmJobId").and_then(Value::as_u64);
    if !rows.iter().any(|r| job(r).is_some()) {
        return None;
    }
    let running: Vec<u64> = rows
        .iter()
        .filter(|r| r.get("status").and_then(Value::as_str) == Some("running"))
        .filter_map(job)
        .collect();
    if running.is_empty() {
        return Some(Ok(()));
    }
    let states = match exec::backend::slurm::query(&running) {
        Ok(states) => states,
        Err(e) => return Some(Err(e)),
    };
    for row in rows.iter_mut() {
        let Some(id) = job(row).filter(|id| running.contains(id)) else {
            continue;
        };
        let (state, reason) = match states.get(&id) {
            Some(s) => (s.state.clone(), s.reason.clone()),
            // Slurm forgets a job some minutes after it ends.
            None => (
                "GONE".to_string(),
                "finished, state unknown to Slurm".to_string(),
            ),
        };
        if let Value::Object(m) = row {
            m.insert("slurmState".into(), json!(state));
            if !matches!(reason.as_str(), "" | "None") {
                m.insert("slurmReason".into(), json!(reason));
            }
        }
    }
    Some(Ok(()))
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
                        "attempts": r.attempts, "reason": r.reason, "durationMs": r.duration.as_millis() as u64,
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

/// One attempt's usage, from its dispatch row.
fn attempt_usage(row: &Value) -> Option<crate::provider::Usage> {
    serde_json::from_value(row.get("usage")?.clone()).ok()
}

/// What the dispatch rows of team-state say the run spent: per worker (its
/// state key), per stage (in the order stages first appear) and in all.
#[derive(Default)]
struct Spent {
    workers: std::collections::BTreeMap<String, UsageTotal>,
    stages: Vec<(String, UsageTotal)>,
    run: Option<UsageTotal>,
}

impl Spent {
    fn of(rows: &[Value]) -> Spent {
        let mut spent = Spent::default();
        for row in rows {
            let Some(usage) = attempt_usage(row) else {
                continue;
            };
            let text = |k: &str| row.get(k).and_then(Value::as_str);
            if let Some(key) = text("workerKey").or(text("workerId")) {
                spent
                    .workers
                    .entry(key.to_string())
                    .or_default()
                    .add(&usage);
            }
            let stage = text("stage").unwrap_or("(no stage recorded)");
            match spent.stages.iter_mut().find(|(s, _)| s == stage) {
                Some((_, total)) => total.add(&usage),
                None => {
                    let mut total = UsageTotal::default();
                    total.add(&usage);
                    spent.stages.push((stage.to_string(), total));
                }
            }
            spent
                .run
                .get_or_insert_with(UsageTotal::default)
                .add(&usage);
        }
        spent
    }

    fn to_json(&self) -> Value {
        json!({
            "workers": self.workers,
            "stages": self.stages.iter().map(|(stage, total)| {
                let mut v = json!(total);
                v["stage"] = json!(stage);
                v
            }).collect::<Vec<_>>(),
            "run": self.run,
        })
    }
}

/// A row of the usage table of `okstra status`.
fn usage_line(stage: &str, t: &UsageTotal) -> Vec<String> {
    vec![
        stage.to_string(),
        t.attempts.to_string(),
        t.tokens_text(),
        t.input_text(),
        t.output_text(),
        t.cost_text(),
    ]
}

pub fn status(args: &StatusArgs) -> ExitStatus {
    let (team, doc) = match team_state_of(args) {
        Ok(found) => found,
        Err(d) => return report(&Diagnostics::from(d), args.format),
    };
    let rows = |k: &str| {
        doc.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let workers = rows("workers");
    let mut dispatches = rows("workerDispatches");
    let slurm = slurm_states(&mut dispatches);
    let spent = Spent::of(&dispatches);
    match args.format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"teamStatePath": team, "workers": workers, "dispatches": dispatches, "usage": spent.to_json()})).unwrap_or_default()
        ),
        Format::Text => out!(
            "{}",
            status_text(&team, &workers, &dispatches, slurm.as_ref(), &spent)
        ),
    }
    ExitStatus::Success
}

/// The team-state path the manifest names (as written), and the document
/// there; why not, as `okstra status` reports it.
fn team_state_of(args: &StatusArgs) -> Result<(String, Value), Diagnostic> {
    let root = paths::canonical_root(&args.project_root);
    let display = paths::display_for(&root, &args.manifest);
    let manifest: Value = std::fs::read(&args.manifest)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| {
            Diagnostic::new(
                Code::InputUnreadable,
                format!("cannot read manifest {display}: {e}"),
            )
            .in_file(display)
        })?;
    let team = crate::model::str_of(&manifest, "teamStatePath").to_string();
    let store = crate::state::team_state::TeamStateStore::open(paths::abs_of(&root, &team));
    match store.read() {
        Ok(doc) => Ok((team, doc)),
        Err(e) => Err(
            Diagnostic::new(Code::ExecState, format!("cannot read team-state: {e}")).in_file(team),
        ),
    }
}

/// `okstra status` as text: the workers, their dispatches (with each
/// attempt's Slurm state, where there are Slurm attempts), and what the run
/// spent, where some attempt reported usage.
fn status_text(
    team: &str,
    workers: &[Value],
    dispatches: &[Value],
    slurm: Option<&Result<(), String>>,
    spent: &Spent,
) -> String {
    let any = spent.run.is_some();
    let workers: Vec<Vec<String>> = workers
        .iter()
        .map(|w| {
            let row = ["workerId", "status", "provider", "endedAt", "reason"]
                .iter()
                .map(|k| cell(w, k))
                .collect();
            with_usage(any, row, spent.workers.get(&cell(w, "workerId")))
        })
        .collect();
    let dispatches: Vec<Vec<String>> = dispatches
        .iter()
        .map(|d| dispatch_line(d, slurm.is_some(), any))
        .collect();
    let mut heads = vec!["dispatch", "attempt", "status", "id"];
    if slurm.is_some() {
        heads.push("slurm");
    }
    heads.push("reason");
    let completed = |status: &str| status.parse() == Ok(WorkerStatus::Completed);
    let done = workers.iter().filter(|w| completed(&w[1])).count();
    let headers = |names: &[&'static str]| -> Vec<&'static str> {
        let mut h = names.to_vec();
        if any {
            h.splice(h.len() - 2..h.len() - 2, ["tokens", "cost"]);
        }
        h
    };
    let mut text = format!(
        "team-state {team}: {done} of {} worker{} completed\n\n{}\n{}",
        workers.len(),
        if workers.len() == 1 { "" } else { "s" },
        render::table(
            &headers(&["worker", "status", "provider", "ended", "reason"]),
            &workers
        ),
        render::table(&headers(&heads), &dispatches),
    );
    if let Some(Err(e)) = slurm {
        let _ = writeln!(
            text,
            "(the Slurm state of running attempts is unknown: {e})"
        );
    }
    if let Some(run) = &spent.run {
        let mut lines: Vec<Vec<String>> = spent
            .stages
            .iter()
            .map(|(stage, t)| usage_line(stage, t))
            .collect();
        lines.push(usage_line("(run)", run));
        let _ = write!(
            text,
            "\n{}",
            render::table(
                &["stage", "attempts", "tokens", "input", "output", "cost"],
                &lines
            )
        );
    }
    text
}

/// A row's field `k` as a table cell: a string as it is, anything else as
/// JSON, nothing when it is missing.
fn cell(v: &Value, k: &str) -> String {
    v.get(k)
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| x.to_string())
        })
        .unwrap_or_default()
}

/// `row` with tokens and cost columns before its last two, where some
/// attempt of the run reported usage (`any`).
fn with_usage(any: bool, mut row: Vec<String>, total: Option<&UsageTotal>) -> Vec<String> {
    if any {
        let at = row.len() - 2;
        row.insert(at, total.map_or("-".into(), UsageTotal::tokens_text));
        row.insert(at + 1, total.map_or("-".into(), UsageTotal::cost_text));
    }
    row
}

/// One dispatch row of `okstra status`: who, attempt, status, id, the Slurm
/// job and its state (where the run has Slurm attempts), and why.
fn dispatch_line(d: &Value, slurm: bool, any: bool) -> Vec<String> {
    let who = if d.get("executionLabel").is_some() {
        cell(d, "executionLabel")
    } else {
        cell(d, "workerId")
    };
    let mut row = vec![
        who,
        cell(d, "attempt"),
        cell(d, "status"),
        cell(d, "dispatchId"),
    ];
    if slurm {
        let id = d
            .get("slurmJobId")
            .map(Value::to_string)
            .unwrap_or_default();
        row.push(match (cell(d, "slurmState"), cell(d, "slurmReason")) {
            (state, _) if state.is_empty() => id,
            (state, reason) if reason.is_empty() => format!("{id} {state}"),
            (state, reason) => format!("{id} {state} ({reason})"),
        });
    }
    row.push(cell(d, "reason"));
    with_usage(
        any,
        row,
        attempt_usage(d).and_then(|u| UsageTotal::of([&u])).as_ref(),
    )
}
