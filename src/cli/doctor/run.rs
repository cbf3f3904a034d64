//! What a run needs from its manifest: a readable, schema-valid manifest
//! and team-state, a free exec lock, a writable run directory; and which
//! agent providers its roster, role executions, translator and records
//! name.

use super::{check, Check, Level};
use crate::compile::paths;
use crate::fsutil::FileLock;
use crate::model::{str_of, Manifest};
use crate::provider::Provider;
use crate::schema::{self, SchemaKind};
use crate::state::team_state::TeamStateStore;
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

pub fn checks(root: &Path, manifest_path: &Path) -> (Vec<Check>, Option<Vec<Provider>>) {
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
