//! `okstra status`: the run's workers and dispatches, from team-state.

use super::report;
use crate::compile::paths;
use crate::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use crate::exec;
use crate::provider::UsageTotal;
use crate::render;
use crate::state::WorkerStatus;
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::PathBuf;

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
    let (team, mut doc) = match team_state_of(args) {
        Ok(found) => found,
        Err(d) => return report(&Diagnostics::from(d), args.format),
    };
    // Taken out of the document, not copied: a large run's rows are most
    // of what status holds.
    let mut rows = |k: &str| match doc.get_mut(k).map(Value::take) {
        Some(Value::Array(rows)) => rows,
        _ => Vec::new(),
    };
    let workers = rows("workers");
    let mut dispatches = rows("workerDispatches");
    let slurm = slurm_states(&mut dispatches);
    let spent = Spent::of(&dispatches);
    match args.format {
        Format::Json => {
            // Built by moving the rows in: `json!` would copy them.
            let report = Value::Object(serde_json::Map::from_iter([
                ("teamStatePath".to_string(), Value::String(team)),
                ("workers".to_string(), Value::Array(workers)),
                ("dispatches".to_string(), Value::Array(dispatches)),
                ("usage".to_string(), spent.to_json()),
            ]));
            outln!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            )
        }
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
