//! `okstra doctor`: check what a run needs before planning or executing it,
//! and say how to fix each miss. Reads only; never writes, but for the file
//! a Slurm probe job writes under the project root, which it removes.

use crate::compile::paths;
use crate::diag::{ExitStatus, Format};
use crate::fsutil::FileLock;
use crate::model::{str_of, Manifest};
use crate::provider::Provider;
use crate::schema::{self, SchemaKind};
use crate::state::team_state::TeamStateStore;
use serde::Serialize;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// A plan (`okstra plan --out`): check exactly what it uses, its
    /// providers and, for Slurm jobs, the cluster (sbatch, partitions, and
    /// a probe job that must see the project root).
    #[arg(value_name = "PLAN")]
    pub plan: Option<PathBuf>,
    /// The run manifest to check (with its team-state, lock and run
    /// directory); with a plan, the plan's manifest by default.
    #[arg(long, value_name = "M")]
    pub manifest: Option<PathBuf>,
    /// The project root the manifest's paths are relative to.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// How long `<cli> --version` may take: some CLIs start a runtime first.
const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// Worth knowing, not a reason to fail (a CLI no job of the run uses).
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Level,
    pub detail: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

fn check(name: impl Into<String>, status: Level, detail: impl Into<String>, fix: &str) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: fix.to_string(),
    }
}

/// The first executable named `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    crate::process::find_program(name, &std::env::var_os("PATH")?).ok()
}

/// `<program> --version`, first line of its output, within `timeout`.
pub fn version_of(program: &Path, timeout: Duration) -> Result<String, String> {
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`--version` did not answer within {}s",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = if out.stdout.iter().any(|b| !b.is_ascii_whitespace()) {
        out.stdout
    } else {
        out.stderr
    };
    let line = String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string();
    if !out.status.success() {
        return Err(format!("`--version` exited {}: {line}", out.status));
    }
    Ok(if line.is_empty() {
        "(no version printed)".into()
    } else {
        line
    })
}

/// The agent providers a run's jobs may use: its roster rows (or the
/// providers their worker ids imply), role executions and translator.
fn providers_of_run(manifest: &Value, team_state: Option<&Value>) -> Vec<Provider> {
    let m = Manifest::new(manifest);
    let mut out: Vec<Provider> = Vec::new();
    let mut add = |p: Option<Provider>| {
        if let Some(p) = p.filter(|p| p.is_agent() && !out.contains(p)) {
            out.push(p);
        }
    };
    for w in m.recommended_workers() {
        let row = team_state
            .and_then(|t| t.get("workers"))
            .and_then(Value::as_array)
            .and_then(|rows| rows.iter().find(|r| str_of(r, "workerId") == w));
        match row.map(|r| str_of(r, "provider")).filter(|p| !p.is_empty()) {
            Some(p) => add(p.parse().ok()),
            None => add(Provider::for_worker_id(&w)),
        }
    }
    for re in m.rows("roleExecutions") {
        add(str_of(re, "provider").parse().ok());
    }
    if let Some(t) = manifest
        .get("invocationAssignments")
        .and_then(|a| a.get("translator"))
    {
        add(str_of(t, "provider").parse().ok());
    }
    out
}

fn provider_checks(needed: Option<&[Provider]>) -> Vec<Check> {
    Provider::ALL
        .into_iter()
        .filter_map(|p| Some((p, p.program()?)))
        .map(|(provider, program)| {
            let cli = program.name;
            let name = format!("provider {cli}");
            let required = needed.is_none_or(|n| n.contains(&provider));
            let miss = if needed.is_some() && required {
                Level::Fail
            } else {
                Level::Warn
            };
            let install = program.install;
            let Some(path) = which(cli) else {
                let detail = if needed.is_some() && !required {
                    format!("`{cli}` is not on PATH (no job of this run uses it)")
                } else {
                    format!("`{cli}` is not on PATH")
                };
                return check(name, miss, detail, install);
            };
            match version_of(&path, VERSION_TIMEOUT) {
                Ok(v) => check(name, Level::Ok, format!("{} ({v})", path.display()), ""),
                Err(e) => check(
                    name,
                    miss,
                    format!("{}: {e}", path.display()),
                    "run it by hand with --version to see what is wrong; reinstall it if it does not start",
                ),
            }
        })
        .collect()
}

/// What kernel confinement this machine offers (SPEC §9): the Landlock
/// ABI, or why there is none; a warning, since `auto` then runs workers
/// unconfined and only `required` jobs are refused.
fn confinement_check() -> Check {
    match crate::confine::offer() {
        offer @ crate::confine::Offer::Landlock { .. } => check(
            "confinement",
            Level::Ok,
            format!("{} ({})", offer.describe(), offer.applied()),
            "",
        ),
        offer => check(
            "confinement",
            Level::Warn,
            format!("{}; jobs with confinement auto run unconfined, required ones are refused", offer.describe()),
            "use a kernel with Landlock ABI 6 or newer (Linux 6.12+) with `landlock` in its `lsm=` list",
        ),
    }
}

fn schema_checks() -> Check {
    let broken: Vec<&str> = SchemaKind::ALL
        .iter()
        .filter(|k| serde_json::from_str::<Value>(k.text()).is_err())
        .map(|k| k.file_name())
        .collect();
    if broken.is_empty() {
        check(
            "schemas",
            Level::Ok,
            format!("{} schemas embedded", SchemaKind::ALL.len()),
            "",
        )
    } else {
        check(
            "schemas",
            Level::Fail,
            format!("embedded schemas do not parse: {}", broken.join(", ")),
            "this okstra build is broken; rebuild or reinstall it",
        )
    }
}

fn schema_problems(kind: SchemaKind, doc: &Value) -> Option<String> {
    let errors = schema::validate(kind, doc);
    (!errors.is_empty()).then(|| {
        errors
            .iter()
            .take(3)
            .map(|e| {
                format!(
                    "{}: {}",
                    if e.pointer.is_empty() {
                        "/"
                    } else {
                        &e.pointer
                    },
                    e.message
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
            + if errors.len() > 3 { "; ..." } else { "" }
    })
}

/// Whether `dir` (or, if it does not exist yet, its nearest existing
/// ancestor, where exec would create it) is writable by us.
fn writable_dir(dir: &Path) -> Result<PathBuf, PathBuf> {
    let mut probe = dir.to_path_buf();
    while !probe.exists() {
        match probe.parent() {
            Some(p) if p != probe => probe = p.to_path_buf(),
            _ => break,
        }
    }
    let ok = rustix::fs::access(&probe, rustix::fs::Access::WRITE_OK).is_ok();
    if ok {
        Ok(probe)
    } else {
        Err(probe)
    }
}

fn run_checks(root: &Path, manifest_path: &Path) -> (Vec<Check>, Option<Vec<Provider>>) {
    let mut out = Vec::new();
    let display = paths::display_for(root, manifest_path);
    let name = format!("manifest {display}");
    let doc = match std::fs::read(manifest_path) {
        Err(e) => {
            out.push(check(
                name,
                Level::Fail,
                format!("cannot read it: {e}"),
                "check the --manifest path (the lead writes run-manifest.json before planning)",
            ));
            return (out, None);
        }
        Ok(bytes) => match serde_json::from_slice::<Value>(&bytes) {
            Err(e) => {
                out.push(check(
                    name,
                    Level::Fail,
                    format!("not JSON: {e}"),
                    "fix the syntax; `okstra validate --kind manifest FILE` shows where",
                ));
                return (out, None);
            }
            Ok(doc) => doc,
        },
    };
    match schema_problems(SchemaKind::Manifest, &doc) {
        None => out.push(check(name, Level::Ok, "readable and schema-valid", "")),
        Some(p) => out.push(check(
            name,
            Level::Fail,
            format!("schema violations: {p}"),
            "run `okstra validate --kind manifest FILE` for every problem with its line",
        )),
    }
    let team = str_of(&doc, "teamStatePath");
    let mut team_doc = None;
    if team.is_empty() {
        out.push(check(
            "team-state",
            Level::Fail,
            "the manifest has no teamStatePath",
            "add teamStatePath (e.g. \"run/team-state.json\") to the manifest",
        ));
    } else {
        let team_abs = paths::abs_of(root, team);
        let store = TeamStateStore::open(team_abs.clone());
        let name = format!("team-state {team}");
        if !team_abs.exists() {
            out.push(check(
                name,
                Level::Ok,
                "not written yet; exec creates it",
                "",
            ));
        } else {
            match store.read() {
                Err(e) => out.push(check(
                    name,
                    Level::Fail,
                    e.to_string(),
                    "repair the file, or move it away to start the run's state afresh",
                )),
                Ok(t) => {
                    match schema_problems(SchemaKind::TeamState, &t) {
                        None => out.push(check(name, Level::Ok, "readable and schema-valid", "")),
                        Some(p) => out.push(check(name, Level::Fail, format!("schema violations: {p}"), "run `okstra validate --kind team-state FILE` for every problem with its line")),
                    }
                    team_doc = Some(t);
                }
            }
        }
        let lock = crate::state::TeamStateStore::open(team_abs.clone()).exec_lock_path();
        let lock_name = "exec lock";
        if !lock.exists() {
            out.push(check(lock_name, Level::Ok, "free", ""));
        } else {
            match FileLock::try_acquire(&lock) {
                Ok(Some(_held)) => out.push(check(lock_name, Level::Ok, "free", "")),
                Ok(None) => out.push(check(
                    lock_name,
                    Level::Fail,
                    format!("another `okstra exec` holds {}", lock.display()),
                    "wait for that exec to finish (`okstra status --manifest M` shows its progress); a dead executor releases the lock by itself",
                )),
                Err(e) => out.push(check(lock_name, Level::Fail, format!("cannot open {}: {e}", lock.display()), "give the user running okstra access to the team-state directory")),
            }
        }
        let dir = team_abs.parent().map(Path::to_path_buf).unwrap_or_default();
        match writable_dir(&dir) {
            Ok(p) if p == dir => out.push(check("run directory", Level::Ok, format!("{} is writable", dir.display()), "")),
            Ok(p) => out.push(check("run directory", Level::Ok, format!("{} does not exist yet; {} is writable, so exec can create it", dir.display(), p.display()), "")),
            Err(p) => out.push(check("run directory", Level::Fail, format!("{} is not writable", p.display()), "exec writes team-state, events, the error log and the lock there: give the user running okstra write access, or move teamStatePath")),
        }
    }
    let needed = providers_of_run(&doc, team_doc.as_ref());
    (out, Some(needed))
}

pub fn doctor(args: &DoctorArgs) -> ExitStatus {
    let mut root = paths::canonical_root(&args.project_root);
    let mut checks = vec![schema_checks(), confinement_check()];
    let mut needed = None;
    let mut plan = None;
    let mut manifest = args.manifest.as_ref().map(|m| {
        if m.is_absolute() {
            m.clone()
        } else {
            std::env::current_dir().unwrap_or_default().join(m)
        }
    });
    if let Some(path) = &args.plan {
        match crate::exec::load::load(path) {
            Ok(loaded) => {
                let p = loaded.plan;
                root = PathBuf::from(&p.project_root);
                manifest.get_or_insert_with(|| paths::abs_of(&root, &p.run.manifest_path));
                checks.push(check(
                    format!("plan {}", path.display()),
                    Level::Ok,
                    format!(
                        "format {}, digest intact, {} jobs",
                        p.format_version,
                        p.jobs().count()
                    ),
                    "",
                ));
                plan = Some(p);
            }
            Err(d) => checks.push(check(
                format!("plan {}", path.display()),
                Level::Fail,
                format!("[{}] {}", d.code.as_str(), d.message),
                "doctor reads a plan `okstra plan` wrote: make it (again) with `okstra plan SPEC --manifest M --out PLAN`",
            )),
        }
    }
    if let Some(path) = &manifest {
        let (c, n) = run_checks(&root, path);
        checks.extend(c);
        needed = n;
    }
    if let Some(p) = &plan {
        // Exactly the providers the plan's jobs use.
        let mut used: Vec<Provider> = Vec::new();
        for job in p.jobs() {
            if job.provider.is_agent() && !used.contains(&job.provider) {
                used.push(job.provider);
            }
        }
        needed = Some(used);
        checks.extend(slurm_checks(p, &root));
    }
    checks.extend(provider_checks(needed.as_deref()));
    let failed = checks.iter().filter(|c| c.status == Level::Fail).count();
    match args.format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&json!({"ok": failed == 0, "checks": checks}))
                .unwrap_or_default()
        ),
        Format::Text => {
            for c in &checks {
                let tag = match c.status {
                    Level::Ok => "ok  ",
                    Level::Warn => "warn",
                    Level::Fail => "FAIL",
                };
                outln!("{tag}  {}: {}", c.name, c.detail);
                if c.status != Level::Ok && !c.fix.is_empty() {
                    outln!("      fix: {}", c.fix);
                }
            }
            if args.manifest.is_none() && args.plan.is_none() {
                outln!("      (pass a PLAN, or --manifest M, to check what a run needs: its manifest, team-state, lock, run directory and backends)");
            }
            if failed == 0 {
                outln!("all is well");
            } else {
                outln!(
                    "{failed} problem{} found",
                    if failed == 1 { "" } else { "s" }
                );
            }
        }
    }
    if failed == 0 {
        ExitStatus::Success
    } else {
        ExitStatus::InvalidInput
    }
}

/// How long a probe job may take to run and end (it may have to wait for
/// a node), unless `OKSTRA_DOCTOR_PROBE_SECONDS` says otherwise.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// A plan's Slurm jobs need (SPEC §10): Slurm's client commands, a
/// controller that answers, every partition they name, and nodes that see
/// the project root where exec does (a probe job per partition writes a
/// file under it) and can run the wrapper.
fn slurm_checks(plan: &crate::plan::Plan, root: &Path) -> Vec<Check> {
    use crate::exec::backend::slurm;
    let jobs: Vec<(String, &crate::plan::Job)> = plan
        .stages
        .iter()
        .enumerate()
        .flat_map(|(si, s)| {
            s.jobs
                .iter()
                .enumerate()
                .map(move |(ji, j)| (format!("/stages/{si}/jobs/{ji}"), j))
        })
        .filter(|(_, j)| j.backend == crate::vocab::Backend::Slurm)
        .collect();
    if jobs.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let Some(sbatch) = which("sbatch") else {
        out.push(check(
            "slurm sbatch",
            Level::Fail,
            format!("`sbatch` is not on PATH, and {} job(s) of the plan run on Slurm", jobs.len()),
            "run okstra on a Slurm login node, or install Slurm's client commands (Debian: slurm-client)",
        ));
        return out;
    };
    match version_of(&sbatch, VERSION_TIMEOUT) {
        Ok(v) => out.push(check(
            "slurm sbatch",
            Level::Ok,
            format!("{} ({v})", sbatch.display()),
            "",
        )),
        Err(e) => {
            out.push(check(
                "slurm sbatch",
                Level::Fail,
                format!("{}: {e}", sbatch.display()),
                "check the Slurm client installation (SLURM_CONF, munge)",
            ));
            return out;
        }
    }
    let known = match slurm::partitions() {
        Ok(p) => p,
        Err(e) => {
            out.push(check(
                "slurm controller",
                Level::Fail,
                format!("the cluster does not answer: {e}"),
                "check that slurmctld runs and SLURM_CONF names its configuration (`scontrol ping`)",
            ));
            return out;
        }
    };
    let listing = known
        .iter()
        .map(|(n, d)| {
            if *d {
                format!("{n} (default)")
            } else {
                n.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let default = known.iter().find(|(_, d)| *d).map(|(n, _)| n.clone());
    // Each distinct set of submission options is probed once.
    let mut probes: Vec<(String, crate::plan::SlurmOptions)> = Vec::new();
    let mut named: Vec<(String, Vec<String>)> = Vec::new();
    for (pointer, job) in &jobs {
        let options = job.slurm.clone().unwrap_or_default();
        let (partition, at) = match &options.partition {
            Some(p) => (Some(p.clone()), format!("{pointer}/slurm/partition")),
            None => (default.clone(), pointer.clone()),
        };
        let Some(partition) = partition else {
            out.push(check(
                "slurm partition",
                Level::Fail,
                format!("{} names no partition ({at}) and the cluster has no default one (partitions: {listing})", job.label()),
                "set slurm.partition in the spec, then plan again",
            ));
            continue;
        };
        let who = format!("{} ({at})", job.label());
        match named.iter_mut().find(|(p, _)| *p == partition) {
            Some((_, w)) => w.push(who),
            None => named.push((partition.clone(), vec![who])),
        }
        if known.iter().any(|(n, _)| *n == partition) {
            let probe_options = crate::plan::SlurmOptions {
                partition: Some(partition.clone()),
                account: options.account.clone(),
                ..Default::default()
            };
            if !probes.iter().any(|(_, o)| *o == probe_options) {
                probes.push((partition, probe_options));
            }
        }
    }
    for (partition, workers) in &named {
        let name = format!("slurm partition {partition}");
        if known.iter().any(|(n, _)| n == partition) {
            out.push(check(
                name,
                Level::Ok,
                format!("exists; used by {}", workers.join(", ")),
                "",
            ));
        } else {
            out.push(check(
                name,
                Level::Fail,
                format!("partition `{partition}` does not exist on this cluster (partitions: {listing}); named by {}", workers.join(", ")),
                "set slurm.partition in the spec to one of the cluster's partitions (`sinfo`), then plan again",
            ));
        }
    }
    let wrapper = match std::env::current_exe() {
        Ok(okstra) => crate::exec::backend::WorkerExe::beside(&okstra),
        Err(_) => crate::exec::backend::WorkerExe::subcommand(Path::new("okstra")),
    };
    let wrapper = PathBuf::from(
        wrapper
            .argv(&["okstra".into(), "worker".into()])
            .into_iter()
            .next()
            .unwrap_or_default(),
    );
    let timeout = std::env::var("OKSTRA_DOCTOR_PROBE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(PROBE_TIMEOUT, Duration::from_secs);
    for (partition, options) in &probes {
        let name = format!("slurm node sees the project ({partition})");
        out.push(match slurm::probe(root, &wrapper, options, timeout) {
            Ok(slurm::Probe::Shared { job, wrapper: true, took }) => check(
                name,
                Level::Ok,
                format!("probe job {job} wrote under {} and read back here in {:.1} s; the node can run {}", root.display(), took.as_secs_f64(), wrapper.display()),
                "",
            ),
            Ok(slurm::Probe::Shared { job, wrapper: false, .. }) => check(
                name,
                Level::Fail,
                format!("probe job {job} sees the project root, but not an executable {} on its node", wrapper.display()),
                "install okstra at the same path on every node (or on the shared filesystem)",
            ),
            Ok(slurm::Probe::NotShared { job, state }) => check(
                name,
                Level::Fail,
                format!("probe job {job} ended {state}, but the file it writes under {} never appeared here: the nodes do not share the project root", root.display()),
                "put the project on a filesystem every node mounts at the same path (NFS, Lustre, ...)",
            ),
            Ok(slurm::Probe::Unfinished { job, state }) => check(
                name,
                Level::Warn,
                format!("probe job {job} did not finish within {} s ({state}); cancelled, so whether nodes see the project is unknown", timeout.as_secs()),
                "run doctor again when the partition has room (OKSTRA_DOCTOR_PROBE_SECONDS waits longer)",
            ),
            Err(e) => check(name, Level::Fail, format!("cannot submit a probe job: {e}"), "run the same sbatch by hand to see what the cluster refuses"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_come_from_rows_ids_executions_and_translator() {
        let manifest = json!({
            "recommendedWorkers": ["claude", "w1", "w2"],
            "roleExecutions": [{"provider": "command"}, {"provider": "gemini"}],
            "invocationAssignments": {"translator": {"provider": "codex"}}
        });
        let team = json!({"workers": [{"workerId": "w1", "provider": "command"}, {"workerId": "w2", "provider": "aider"}]});
        assert_eq!(
            providers_of_run(&manifest, Some(&team)),
            [Provider::Claude, Provider::Gemini, Provider::Codex]
        );
    }

    #[test]
    fn version_times_out_and_reads_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let good = write("good", "echo 'tool 1.2.3'; echo more");
        assert_eq!(
            version_of(&good, Duration::from_secs(5)).unwrap(),
            "tool 1.2.3"
        );
        let slow = write("slow", "exec sleep 30");
        assert!(version_of(&slow, Duration::from_millis(200))
            .unwrap_err()
            .contains("did not answer"));
        let bad = write("bad", "echo broken >&2; exit 3");
        assert!(version_of(&bad, Duration::from_secs(5))
            .unwrap_err()
            .contains("broken"));
    }
}
