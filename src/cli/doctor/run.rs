//! What a run needs from its manifest: a readable, schema-valid manifest
//! and team-state, a free exec lock, a writable run directory; and which
//! agent providers its roster, role executions, translator and records
//! name.

use super::{check, Check, Level};
use okstra::fsutil::FileLock;
use okstra::model::{str_of, Manifest};
use okstra::paths;
use okstra::provider::Provider;
use okstra::schema::{self, SchemaKind};
use okstra::state::team_state::TeamStateStore;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The agent providers a run's jobs may use: its roster rows (or the
/// providers their worker ids imply), role executions and translator, and
/// every worker and dispatch row team-state holds (a spec-mode run's jobs
/// are named nowhere else).
fn providers_of_run(manifest: &Value, team_state: Option<&Value>) -> Vec<Provider> {
    let m = Manifest::new(manifest);
    let mut out: Vec<Provider> = Vec::new();
    let mut add = |p: Option<Provider>| {
        if let Some(p) = p.filter(|p| p.is_agent() && !out.contains(p)) {
            out.push(p);
        }
    };
    let rows = |key: &str| {
        team_state
            .and_then(|t| t.get(key))
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
    };
    for w in m.recommended_workers() {
        let row = rows("workers").iter().find(|r| str_of(r, "workerId") == w);
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
    for row in rows("workers").iter().chain(rows("workerDispatches")) {
        add(str_of(row, "provider").parse().ok());
    }
    out
}

pub(super) fn schema_problems(kind: SchemaKind, doc: &Value) -> Option<String> {
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

/// What a run needs from its manifest: the manifest itself, then (where it
/// names one) its team-state, the exec lock beside it and the run
/// directory it lives in; and the agent providers the run's jobs may use,
/// unless the manifest cannot be read as JSON at all.
pub fn checks(root: &Path, manifest_path: &Path) -> (Vec<Check>, Option<Vec<Provider>>) {
    let name = format!("manifest {}", paths::display_for(root, manifest_path));
    let doc = match read_manifest(&name, manifest_path) {
        Ok(doc) => doc,
        Err(unread) => return (vec![unread], None),
    };
    let mut out = vec![schema_check(&name, SchemaKind::Manifest, &doc)];
    let team = str_of(&doc, "teamStatePath");
    let team_doc = if team.is_empty() {
        out.push(check(
            "team-state",
            Level::Fail,
            "the manifest has no teamStatePath",
            "add teamStatePath (e.g. \"run/team-state.json\") to the manifest",
        ));
        None
    } else {
        let team_abs = paths::abs_of(root, team);
        let (team_check, team_doc) = team_state(team, &team_abs);
        out.push(team_check);
        out.push(exec_lock(
            &TeamStateStore::open(team_abs.clone()).exec_lock_path(),
        ));
        let dir = team_abs.parent().map(Path::to_path_buf).unwrap_or_default();
        out.push(run_directory(&dir, writable_dir(&dir)));
        team_doc
    };
    let needed = providers_of_run(&doc, team_doc.as_ref());
    (out, Some(needed))
}

/// The manifest as JSON; or the failed check `name` saying why it is not.
fn read_manifest(name: &str, manifest_path: &Path) -> Result<Value, Check> {
    let bytes = std::fs::read(manifest_path).map_err(|e| {
        check(
            name,
            Level::Fail,
            format!("cannot read it: {e}"),
            "check the --manifest path (the lead writes run-manifest.json before planning)",
        )
    })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        check(
            name,
            Level::Fail,
            format!("not JSON: {e}"),
            "fix the syntax; `okstra validate --kind manifest FILE` shows where",
        )
    })
}

/// Whether `doc` is valid against its schema, as `okstra validate` would
/// say.
fn schema_check(name: &str, kind: SchemaKind, doc: &Value) -> Check {
    match schema_problems(kind, doc) {
        None => check(name, Level::Ok, "readable and schema-valid", ""),
        Some(p) => check(
            name,
            Level::Fail,
            format!("schema violations: {p}"),
            &format!(
                "run `okstra validate --kind {} FILE` for every problem with its line",
                kind.name()
            ),
        ),
    }
}

/// The run's team-state, `team` as the manifest names it: not there yet
/// (exec creates it), or readable and schema-valid; with the document
/// where it could be read.
fn team_state(team: &str, team_abs: &Path) -> (Check, Option<Value>) {
    let name = format!("team-state {team}");
    // A file that cannot even be looked at is no file not written yet.
    match team_abs.try_exists() {
        Ok(true) => {}
        Ok(false) => {
            return (
                check(name, Level::Ok, "not written yet; exec creates it", ""),
                None,
            )
        }
        Err(e) => {
            return (
                check(
                    name,
                    Level::Fail,
                    format!("cannot look at {}: {e}", team_abs.display()),
                    "give the user running okstra access to the team-state directory",
                ),
                None,
            )
        }
    }
    match TeamStateStore::open(team_abs.to_path_buf()).read() {
        Err(e) => (
            check(
                name,
                Level::Fail,
                e.to_string(),
                "repair the file, or move it away to start the run's state afresh",
            ),
            None,
        ),
        Ok(t) => (schema_check(&name, SchemaKind::TeamState, &t), Some(t)),
    }
}

/// Whether the exec lock is free: no lock file, or one we can take (and let
/// go again at once).
fn exec_lock(lock: &Path) -> Check {
    let name = "exec lock";
    let hint = "give the user running okstra access to the team-state directory";
    match lock.try_exists() {
        Ok(true) => {}
        Ok(false) => return check(name, Level::Ok, "free", ""),
        Err(e) => {
            return check(
                name,
                Level::Fail,
                format!("cannot look at {}: {e}", lock.display()),
                hint,
            )
        }
    }
    match FileLock::try_acquire(lock) {
        Ok(Some(_held)) => check(name, Level::Ok, "free", ""),
        Ok(None) => check(
            name,
            Level::Fail,
            format!("another `okstra exec` holds {}", lock.display()),
            "wait for that exec to finish (`okstra status --manifest M` shows its progress); a dead executor releases the lock by itself",
        ),
        Err(e) => check(name, Level::Fail, format!("cannot open {}: {e}", lock.display()), hint),
    }
}

/// What `writable_dir` found of the run directory `dir`, as a check.
fn run_directory(dir: &Path, writable: Result<PathBuf, PathBuf>) -> Check {
    let name = "run directory";
    match writable {
        Ok(p) if p == dir => check(name, Level::Ok, format!("{} is writable", dir.display()), ""),
        Ok(p) => check(name, Level::Ok, format!("{} does not exist yet; {} is writable, so exec can create it", dir.display(), p.display()), ""),
        Err(p) => check(name, Level::Fail, format!("{} is not writable", p.display()), "exec writes team-state, events, the error log and the lock there: give the user running okstra write access, or move teamStatePath"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
    fn the_run_directory_fails_only_where_nothing_on_its_way_is_writable() {
        let dir = Path::new("/r/run");
        let here = run_directory(dir, Ok(dir.to_path_buf()));
        assert_eq!(
            (here.status, here.detail.as_str()),
            (Level::Ok, "/r/run is writable")
        );
        let above = run_directory(dir, Ok(PathBuf::from("/r")));
        assert_eq!(above.status, Level::Ok);
        assert_eq!(
            above.detail,
            "/r/run does not exist yet; /r is writable, so exec can create it"
        );
        let no = run_directory(dir, Err(PathBuf::from("/r")));
        assert_eq!(
            (no.status, no.detail.as_str()),
            (Level::Fail, "/r is not writable")
        );
    }

    #[test]
    fn a_team_state_or_lock_that_cannot_be_looked_at_fails() {
        // Below a regular file, a path is neither there nor missing
        // (ENOTDIR): the check could not complete, so it fails.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run");
        std::fs::write(&file, "").unwrap();
        let (team, doc) = team_state("run/team-state.json", &file.join("team-state.json"));
        assert_eq!(team.status, Level::Fail, "{}", team.detail);
        assert!(team.detail.starts_with("cannot look at"), "{}", team.detail);
        assert!(doc.is_none());
        let lock = exec_lock(&file.join("team-state.json.exec.lock"));
        assert_eq!(lock.status, Level::Fail, "{}", lock.detail);
        assert!(lock.detail.starts_with("cannot look at"), "{}", lock.detail);
        // Near miss: in a directory, missing is missing.
        let (team, _) = team_state("t", &dir.path().join("team-state.json"));
        assert_eq!(
            (team.status, team.detail.as_str()),
            (Level::Ok, "not written yet; exec creates it")
        );
    }

    #[test]
    fn the_exec_lock_is_free_unless_another_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("team-state.json.exec.lock");
        assert_eq!(exec_lock(&lock).status, Level::Ok, "no lock file yet");
        let held = FileLock::acquire(&lock).unwrap();
        let busy = exec_lock(&lock);
        assert_eq!(busy.status, Level::Fail);
        assert!(
            busy.detail.starts_with("another `okstra exec` holds"),
            "{}",
            busy.detail
        );
        drop(held);
        assert_eq!(
            exec_lock(&lock).status,
            Level::Ok,
            "the file stays, the lock is gone"
        );
        // Checking took the lock only for a moment.
        assert!(FileLock::try_acquire(&lock).unwrap().is_some());
    }

    #[test]
    fn a_schema_violation_names_the_validate_kind_that_shows_it() {
        let bad = schema_check(
            "team-state t",
            SchemaKind::TeamState,
            &json!({"workers": 5}),
        );
        assert_eq!(bad.status, Level::Fail);
        assert!(
            bad.fix.contains("okstra validate --kind team-state FILE"),
            "{}",
            bad.fix
        );
        let good = schema_check(
            "manifest m",
            SchemaKind::Manifest,
            &json!({"taskKey": "t", "teamStatePath": "ts"}),
        );
        assert_eq!(
            (good.status, good.detail.as_str()),
            (Level::Ok, "readable and schema-valid")
        );
    }

    #[test]
    fn a_spec_mode_run_names_its_providers_in_its_rows() {
        // No roster: the jobs of a spec are known from team-state alone.
        let manifest = json!({"taskKey": "t"});
        assert_eq!(providers_of_run(&manifest, None), []);
        let team = json!({
            "workers": [{"workerId": "a", "provider": "codex"}],
            "workerDispatches": [{"workerId": "b", "provider": "gemini"}, {"workerId": "c", "provider": "command"}]
        });
        assert_eq!(
            providers_of_run(&manifest, Some(&team)),
            [Provider::Codex, Provider::Gemini]
        );
    }
}
