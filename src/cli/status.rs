//! `okstra status`: the run's workers and dispatches, from team-state.

use super::{report, write_out_with, Ended};
use okstra::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use okstra::exec;
use okstra::paths;
use okstra::provider::UsageTotal;
use okstra::render;
use okstra::state::{Rows, WorkerStatus};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

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

/// A row of team-state as a tree, made when it is needed and dropped after:
/// a large run's rows as trees are several times its file.
fn tree(row: &RawValue) -> Value {
    // `read_rows` parsed every row already.
    serde_json::from_str(row.get()).unwrap_or(Value::Null)
}

/// The Slurm job a dispatch row names.
fn slurm_job(row: &Value) -> Option<u64> {
    row.get("slurmJobId").and_then(Value::as_u64)
}

/// `(state, reason)` of running Slurm jobs, by job id.
type SlurmStates = HashMap<u64, (String, String)>;

/// The Slurm jobs of the dispatch rows, gathered row by row.
#[derive(Default)]
struct SlurmJobs {
    any: bool,
    running: Vec<u64>,
}

impl SlurmJobs {
    fn note(&mut self, row: &Value) {
        let Some(id) = slurm_job(row) else {
            return;
        };
        self.any = true;
        if row.get("status").and_then(Value::as_str)
            == Some(okstra::exec::row::DispatchStatus::Running.as_str())
        {
            self.running.push(id);
        }
    }

    /// The state of every running job, asked in one `squeue` call. `None`:
    /// no dispatch ran on Slurm.
    fn states(self) -> Option<Result<SlurmStates, String>> {
        if !self.any {
            return None;
        }
        if self.running.is_empty() {
            return Some(Ok(SlurmStates::new()));
        }
        let asked = match exec::backend::slurm::query(&self.running) {
            Ok(states) => states,
            Err(e) => return Some(Err(e)),
        };
        let states = self.running.iter().map(|&id| {
            let said = match asked.get(&id) {
                Some(s) => (s.state.clone(), s.reason.clone()),
                // Slurm forgets a job some minutes after it ends.
                None => (
                    "GONE".to_string(),
                    "finished, state unknown to Slurm".to_string(),
                ),
            };
            (id, said)
        });
        Some(Ok(states.collect()))
    }
}

/// `row` with its running Slurm job's state as `slurmState` (and
/// `slurmReason` while it pends).
fn with_slurm_state(row: &mut Value, states: &SlurmStates) {
    let Some((state, reason)) = slurm_job(row).and_then(|id| states.get(&id)) else {
        return;
    };
    if let Value::Object(m) = row {
        m.insert("slurmState".into(), json!(state));
        if !matches!(reason.as_str(), "" | "None") {
            m.insert("slurmReason".into(), json!(reason));
        }
    }
}

/// One attempt's usage, from its dispatch row.
fn attempt_usage(row: &Value) -> Option<okstra::provider::Usage> {
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
    /// Count one dispatch row's usage, where it has some.
    fn add(&mut self, row: &Value) {
        let Some(usage) = attempt_usage(row) else {
            return;
        };
        let text = |k: &str| row.get(k).and_then(Value::as_str);
        if let Some(key) = text("workerKey").or(text("workerId")) {
            self.workers.entry(key.to_string()).or_default().add(&usage);
        }
        let stage = text("stage").unwrap_or("(no stage recorded)");
        match self.stages.iter_mut().find(|(s, _)| s == stage) {
            Some((_, total)) => total.add(&usage),
            None => {
                let mut total = UsageTotal::default();
                total.add(&usage);
                self.stages.push((stage.to_string(), total));
            }
        }
        self.run.get_or_insert_with(UsageTotal::default).add(&usage);
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

pub fn status(args: &StatusArgs) -> Ended {
    let mut text = Vec::new();
    let (team, rows) = match team_state_of(args, &mut text) {
        Ok(found) => found,
        Err(d) => return Ok(report(&Diagnostics::from(d), args.format)),
    };
    // One pass over the dispatches: what they spent, and which Slurm jobs
    // still run. Each row is a tree only while it is looked at.
    let mut spent = Spent::default();
    let mut jobs = SlurmJobs::default();
    for raw in &rows.dispatches {
        let row = tree(raw);
        spent.add(&row);
        jobs.note(&row);
    }
    let slurm = jobs.states();
    match args.format {
        Format::Json => {
            let states = match &slurm {
                Some(Ok(states)) => states,
                _ => &SlurmStates::new(),
            };
            let report = JsonReport {
                dispatches: Trees {
                    rows: &rows.dispatches,
                    each: &|row| with_slurm_state(row, states),
                },
                team_state_path: &team,
                usage: spent.to_json(),
                workers: Trees {
                    rows: &rows.workers,
                    each: &|_| {},
                },
            };
            write_out_with(|out| {
                serde_json::to_writer_pretty(&mut *out, &report)?;
                writeln!(out)
            })?
        }
        Format::Text => out!("{}", status_text(&team, &rows, slurm.as_ref(), &spent))?,
    }
    Ok(ExitStatus::Success)
}

/// `okstra status --format json`, written as it is made. Its keys in the
/// order serde_json's objects sort them, as when it was one `Value`.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    dispatches: Trees<'a>,
    #[serde(rename = "teamStatePath")]
    team_state_path: &'a str,
    usage: Value,
    workers: Trees<'a>,
}

/// Rows written as trees, each made as it is written and passed through
/// `each` first.
struct Trees<'a> {
    rows: &'a [&'a RawValue],
    each: &'a dyn Fn(&mut Value),
}

impl serde::Serialize for Trees<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.rows.len()))?;
        for raw in self.rows {
            let mut row = tree(raw);
            (self.each)(&mut row);
            seq.serialize_element(&row)?;
        }
        seq.end()
    }
}

/// The team-state path the manifest names (as written), and the rows
/// there, read into `buf`; why not, as `okstra status` reports it.
fn team_state_of<'a>(
    args: &StatusArgs,
    buf: &'a mut Vec<u8>,
) -> Result<(String, Rows<'a>), Diagnostic> {
    let run = locate(&args.manifest, &args.project_root)?;
    let store = okstra::state::TeamStateStore::open(run.path);
    match store.read_rows(buf) {
        Ok(rows) => Ok((run.team, rows)),
        Err(e) => Err(
            Diagnostic::new(Code::ExecState, format!("cannot read team-state: {e}"))
                .in_file(run.team),
        ),
    }
}

/// A run found from its manifest: what `okstra status` and `okstra watch`
/// read.
pub(super) struct Located {
    /// The project root in use, canonical.
    pub root: PathBuf,
    pub manifest: Value,
    /// The team-state path as the manifest writes it.
    pub team: String,
    pub path: PathBuf,
}

/// The manifest at `manifest` and the team-state it names, which must
/// exist (`input/missing` otherwise, naming the project root in use).
pub(super) fn locate(manifest: &Path, project_root: &Path) -> Result<Located, Diagnostic> {
    let root = paths::canonical_root(project_root);
    let display = paths::display_for(&root, manifest);
    let doc: Value = match std::fs::read(manifest) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let d = Diagnostic::new(
                Code::InputMissing,
                format!("manifest {display} does not exist"),
            )
            .in_file(display)
            .help("check the --manifest path");
            return Err(paths::name_root(d, &root, paths::Base::CurrentDir));
        }
        read => read
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| {
                Diagnostic::new(
                    Code::InputUnreadable,
                    format!("cannot read manifest {display}: {e}"),
                )
                .in_file(display)
            })?,
    };
    let team = okstra::model::str_of(&doc, "teamStatePath").to_string();
    let path = paths::abs_of(&root, &team);
    // No file is no run started yet, told apart from a blank one (a run
    // the lead prepared, which reads as no rows).
    if !team.is_empty() && matches!(path.try_exists(), Ok(false)) {
        let d = Diagnostic::new(
            Code::InputMissing,
            format!(
                "team-state {team} does not exist: no `okstra exec` has run for this manifest yet"
            ),
        )
        .in_file(team)
        .help("run the plan (`okstra exec PLAN`), or check --manifest");
        return Err(paths::name_root(d, &root, paths::Base::Root));
    }
    Ok(Located {
        root,
        manifest: doc,
        team,
        path,
    })
}

/// `okstra status` as text: the workers, their dispatches (with each
/// attempt's Slurm state, where there are Slurm attempts), and what the run
/// spent, where some attempt reported usage.
fn status_text(
    team: &str,
    rows: &Rows<'_>,
    slurm: Option<&Result<SlurmStates, String>>,
    spent: &Spent,
) -> String {
    let any = spent.run.is_some();
    let workers: Vec<Vec<String>> = rows
        .workers
        .iter()
        .map(|w| {
            let w = &tree(w);
            let row = ["workerId", "status", "provider", "endedAt", "reason"]
                .iter()
                .map(|k| cell(w, k))
                .collect();
            with_usage(any, row, spent.workers.get(&cell(w, "workerId")))
        })
        .collect();
    let dispatches: Vec<Vec<String>> = rows
        .dispatches
        .iter()
        .map(|d| {
            let mut d = tree(d);
            if let Some(Ok(states)) = slurm {
                with_slurm_state(&mut d, states);
            }
            dispatch_line(&d, slurm.is_some(), any)
        })
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
    text.push_str(&refused_egress(rows));
    text.push_str(&worktree_branches(rows));
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

/// The table of the destinations the egress proxy refused each attempt
/// (docs/confinement.md#network): who, attempt, `host:port`, how often;
/// "" where it refused none.
fn refused_egress(rows: &Rows<'_>) -> String {
    let mut out = Vec::new();
    for d in &rows.dispatches {
        let d = tree(d);
        let egress: Vec<okstra::egress::Destination> = d
            .get("egress")
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .unwrap_or_default();
        for e in egress.iter().filter(|e| !e.allowed) {
            out.push(vec![
                who(&d),
                cell(&d, "attempt"),
                format!("{}:{}", e.host, e.port),
                e.connections.to_string(),
            ]);
        }
    }
    if out.is_empty() {
        return String::new();
    }
    let heads = ["dispatch", "attempt", "egress refused", "connections"];
    format!("\n{}", render::table(&heads, &out))
}

/// The table of what each attempt of a `worktree = "git"` job left
/// (docs/worktrees.md#running): who, attempt, its branch and the commit it
/// got, or the branch its work was kept on; "" where no job has a worktree.
fn worktree_branches(rows: &Rows<'_>) -> String {
    let short = |sha: String| sha.chars().take(12).collect::<String>();
    let mut out = Vec::new();
    for d in &rows.dispatches {
        let d = tree(d);
        let branch = cell(&d, "worktreeBranch");
        if branch.is_empty() {
            continue;
        }
        let (branch, commit) = match cell(&d, "worktreeKeptBranch") {
            kept if kept.is_empty() => (branch, short(cell(&d, "worktreeCommit"))),
            kept => (kept, short(cell(&d, "worktreeKeptCommit"))),
        };
        out.push(vec![who(&d), cell(&d, "attempt"), branch, commit]);
    }
    if out.is_empty() {
        return String::new();
    }
    let heads = ["dispatch", "attempt", "branch", "commit"];
    format!("\n{}", render::table(&heads, &out))
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

/// Who a dispatch row is for: its execution label (v2), else its worker id.
fn who(d: &Value) -> String {
    if d.get("executionLabel").is_some() {
        cell(d, "executionLabel")
    } else {
        cell(d, "workerId")
    }
}

/// One dispatch row of `okstra status`: who, attempt, status, id, the Slurm
/// job and its state (where the run has Slurm attempts), and why.
fn dispatch_line(d: &Value, slurm: bool, any: bool) -> Vec<String> {
    let mut row = vec![
        who(d),
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
