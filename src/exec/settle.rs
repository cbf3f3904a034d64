//! The facts settling an attempt reads from disk
//! (docs/exec.md#settling-an-attempt): whether the audit-sidecar contract
//! holds, and what the wrapper's status sidecar says (which completion
//! artifacts the attempt wrote: [`super::artifacts`]). The decision itself is
//! [`super::decide`].

use super::decide::{End, Sidecar};
use crate::canonical::{is_sha256_hex, sha256_hex_of};
use crate::diag::WrapperExit;
use crate::provider::Usage;
use crate::worker::StatusSidecar;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub fn audit_sidecar_path(worker_result: &Path) -> PathBuf {
    crate::plan::sidecar::beside_path(worker_result, crate::plan::sidecar::AUDIT)
}

/// The first way the worker result's audit sidecar fails its contract:
/// `<workerResultPath>.audit.json` exists, is a JSON object, and its
/// `resultSha256` is the sha256 (64 lowercase hex) of the worker result.
pub fn audit_sidecar_failure(worker_result: &Path) -> Option<String> {
    let sidecar = audit_sidecar_path(worker_result);
    let text = match std::fs::read_to_string(&sidecar) {
        Ok(t) => t,
        Err(_) => return Some(format!("audit sidecar {} is missing", sidecar.display())),
    };
    let doc: Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => {
            return Some(format!(
                "audit sidecar {} is not JSON: {e}",
                sidecar.display()
            ))
        }
    };
    let Some(obj) = doc.as_object() else {
        return Some(format!(
            "audit sidecar {} is not a JSON object",
            sidecar.display()
        ));
    };
    let Some(recorded) = obj.get("resultSha256").and_then(Value::as_str) else {
        return Some("audit sidecar has no string `resultSha256`".into());
    };
    if !is_sha256_hex(recorded) {
        return Some(format!(
            "audit sidecar `resultSha256` `{recorded}` is not 64 lowercase hex digits"
        ));
    }
    // Streamed: a worker result may be large, and only its digest counts.
    let actual = match std::fs::File::open(worker_result).and_then(sha256_hex_of) {
        Ok(digest) => digest,
        Err(e) => {
            return Some(format!(
                "worker result {} cannot be read: {e}",
                worker_result.display()
            ))
        }
    };
    if actual != recorded {
        return Some(format!(
            "audit sidecar `resultSha256` {recorded} is not the worker result's sha256 {actual}"
        ));
    }
    None
}

/// What the wrapper's status sidecar says of an ended attempt, read once:
/// the parts the decision weighs ([`Sidecar`]) and the ones its record
/// carries. Missing or ill-typed fields are simply absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusReport {
    pub sidecar: Sidecar,
    /// The command line the wrapper started.
    pub argv: Vec<String>,
    pub usage: Option<Usage>,
    /// Where this attempt's output starts in its log.
    pub log_offset: Option<u64>,
    pub duration_ms: Option<i64>,
    pub served_model: Option<String>,
    pub cli_session_id: Option<String>,
    /// What confinement the wrapper applied (`landlock-abi<N>`, `none`).
    pub confinement: Option<String>,
    /// The network it confined the child to (`provider`, `none`, `open`).
    pub network: Option<crate::vocab::NetworkMode>,
    /// What the attempt wrote in its CLI's private state.
    pub provider_state: Option<crate::provider::state::Report>,
}

impl StatusReport {
    /// The report of sidecar `doc` (`None`: there was none, or it is not
    /// JSON) of an attempt that ended as `end`. A wall-clock timeout counts
    /// only where both say so: the timeout exit code, and `timedOut`.
    pub fn of(doc: Option<&StatusSidecar>, end: &End) -> StatusReport {
        let Some(doc) = doc else {
            return StatusReport::default();
        };
        let text = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
        StatusReport {
            sidecar: Sidecar {
                failure_kind: (doc.failure_kind.clone()).filter(|k| !k.as_str().is_empty()),
                error: text(&doc.error),
                wall_clock: doc.timed_out
                    && matches!(end, End::Exited(c) if WrapperExit::Timeout.is(*c)),
            },
            argv: doc.argv.clone(),
            usage: doc.usage.clone(),
            log_offset: doc.log_offset,
            duration_ms: doc.duration_ms.and_then(|d| i64::try_from(d).ok()),
            served_model: text(&doc.served_model),
            cli_session_id: text(&doc.cli_session_id),
            confinement: text(&doc.confinement),
            network: doc.network,
            provider_state: doc.provider_state.clone(),
        }
    }
}

/// The last non-empty line of an attempt's output in its log (`from`:
/// where the attempt's output starts), clipped for a reason; only the
/// log's last 4 KiB are read.
pub fn last_log_line(log: &Path, from: Option<u64>) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 4096;
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(TAIL).max(from.unwrap_or(0).min(len));
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut tail = Vec::new();
    file.take(TAIL).read_to_end(&mut tail).ok()?;
    // A tail cut inside a character starts at the next one.
    let whole = tail.iter().position(|b| b & 0xC0 != 0x80).unwrap_or(0);
    let text = String::from_utf8_lossy(&tail[whole..]);
    let line = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    let mut end = line.len().min(300);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    Some(line[..end].to_string())
}

/// Where an attempt a dead executor left in flight stands
/// (docs/exec.md#crash-safety-and-resume).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Left {
    /// It ended: settle it as this.
    Ended(End),
    /// Recorded but never started (no sidecar, nothing runs): start it
    /// again, as the same attempt.
    NeverStarted,
    /// Its wrapper still runs: watch it.
    Running,
}

/// Where such an attempt stands, from its status sidecar (`None`: there is
/// none, or it is not JSON), whether its backend still runs it, and what
/// the backend knows of how it ended (asked only when it ran and runs no
/// more: Slurm signals the worker too when it cancels a job or stops it at
/// its time limit, so it knows better than the sidecar).
pub fn in_flight(
    sidecar: Option<&StatusSidecar>,
    alive: bool,
    backend_end: impl FnOnce() -> Option<End>,
) -> Left {
    if sidecar.is_some() && !alive {
        if let Some(end) = backend_end() {
            return Left::Ended(end);
        }
    }
    match sidecar.and_then(|s| Some((s.exited_with()?, s.stopped))) {
        Some((_, true)) => {
            return Left::Ended(End::Lost(
                "the worker was stopped by an executor that died before recording why".into(),
            ))
        }
        Some((code, false)) => return Left::Ended(End::Exited(code)),
        None => {}
    }
    match (sidecar.is_some(), alive) {
        (_, true) => Left::Running,
        (false, false) => Left::NeverStarted,
        (true, false) => Left::Ended(End::Lost(
            "the worker ended without recording an exit code (its executor died before settling it)"
                .into(),
        )),
    }
}

/// After exec stopped an idle worker: the sidecar says what every other
/// record says, exit code 124 and failure kind `timeout`, keeping the code
/// the stopped child itself ended with.
pub fn mark_idle_timeout(own: &crate::beneath::Beneath, path: &Path) {
    let Some(mut doc) = StatusSidecar::read(path) else {
        return;
    };
    doc.mark_idle_timeout();
    if let Ok(rel) = own.relative(path) {
        let _ = own.write_atomic(rel, &doc.to_bytes(), crate::fsutil::Durability::NoFsync);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::sha256_hex;
    use crate::vocab::FailureKind;

    fn tree() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let result = dir.path().join("r.md");
        std::fs::write(&result, "result").unwrap();
        (dir, result)
    }

    fn write_sidecar(result: &Path, sha: &str) {
        std::fs::write(
            audit_sidecar_path(result),
            format!("{{\"resultSha256\": \"{sha}\"}}"),
        )
        .unwrap();
    }

    /// A sidecar as exec reads it, from its JSON.
    fn sidecar(doc: Value) -> StatusSidecar {
        serde_json::from_value(doc).unwrap()
    }

    #[test]
    fn a_status_report_takes_what_the_sidecar_says_and_leaves_out_the_rest() {
        let timeout = End::Exited(WrapperExit::Timeout.code());
        let doc = sidecar(serde_json::json!({
            "failureKind": "timeout",
            "error": "",
            "timedOut": true,
            "argv": ["claude", "-p"],
            "logOffset": 42,
            "duration_ms": 1500,
            "servedModel": "model-a",
            "cliSessionId": 7,
            "confinement": "landlock-abi7",
            "usage": "not usage",
        }));
        let report = StatusReport::of(Some(&doc), &timeout);
        assert_eq!(report.sidecar.failure_kind, Some(FailureKind::Timeout));
        assert_eq!(report.sidecar.error, None, "an empty text is no text");
        assert!(report.sidecar.wall_clock);
        assert_eq!(report.argv, ["claude", "-p"]);
        assert_eq!(report.log_offset, Some(42));
        assert_eq!(report.duration_ms, Some(1500));
        assert_eq!(report.served_model.as_deref(), Some("model-a"));
        assert_eq!(report.cli_session_id, None, "not a string");
        assert_eq!(report.usage, None, "not a usage object");
        assert_eq!(report.confinement.as_deref(), Some("landlock-abi7"));
        // timedOut alone, or the code alone, is no wall-clock timeout.
        assert!(
            !StatusReport::of(Some(&doc), &End::Exited(1))
                .sidecar
                .wall_clock
        );
        let untimed = sidecar(serde_json::json!({"timedOut": false}));
        assert!(
            !StatusReport::of(Some(&untimed), &timeout)
                .sidecar
                .wall_clock
        );
        assert_eq!(StatusReport::of(None, &timeout), StatusReport::default());
    }

    #[test]
    fn where_an_attempt_left_in_flight_stands() {
        let running = sidecar(serde_json::json!({"state": "running"}));
        let exited = sidecar(serde_json::json!({"state": "exited", "exitCode": 3}));
        let stopped =
            sidecar(serde_json::json!({"state": "exited", "exitCode": 143, "stopped": true}));
        let none = || None;
        assert_eq!(in_flight(None, false, none), Left::NeverStarted);
        assert_eq!(
            in_flight(None, true, none),
            Left::Running,
            "still at its gate"
        );
        assert_eq!(in_flight(Some(&running), true, none), Left::Running);
        assert_eq!(
            in_flight(Some(&exited), false, none),
            Left::Ended(End::Exited(3))
        );
        assert!(matches!(
            in_flight(Some(&stopped), false, none),
            Left::Ended(End::Lost(why)) if why.contains("stopped by an executor")
        ));
        assert!(matches!(
            in_flight(Some(&running), false, none),
            Left::Ended(End::Lost(why)) if why.contains("without recording an exit code")
        ));
        // The backend knows better than the sidecar, once the attempt ran
        // and runs no more; never asked otherwise.
        let cancelled = || Some(End::Cancelled("scancel".into()));
        assert_eq!(
            in_flight(Some(&exited), false, cancelled),
            Left::Ended(End::Cancelled("scancel".into()))
        );
        let never = || -> Option<End> { panic!("asked while it runs or never ran") };
        assert_eq!(in_flight(Some(&running), true, never), Left::Running);
        assert_eq!(in_flight(None, false, never), Left::NeverStarted);
    }

    #[test]
    fn the_audit_sidecar_contract_and_each_way_it_fails() {
        let (_d, r) = tree();
        write_sidecar(&r, &sha256_hex(b"result"));
        assert_eq!(audit_sidecar_failure(&r), None);
        write_sidecar(&r, &"0".repeat(64));
        assert!(audit_sidecar_failure(&r)
            .unwrap()
            .contains("is not the worker result's sha256"));
        write_sidecar(&r, "ABC");
        assert!(audit_sidecar_failure(&r)
            .unwrap()
            .contains("64 lowercase hex"));
        std::fs::write(audit_sidecar_path(&r), "[1]").unwrap();
        assert!(audit_sidecar_failure(&r)
            .unwrap()
            .contains("not a JSON object"));
        std::fs::remove_file(audit_sidecar_path(&r)).unwrap();
        assert!(audit_sidecar_failure(&r).unwrap().contains("missing"));
    }

    #[test]
    fn the_last_line_of_an_attempts_output() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.md.log");
        std::fs::write(&log, "attempt 1 said this\n").unwrap();
        let offset = std::fs::metadata(&log).unwrap().len();
        assert_eq!(
            last_log_line(&log, Some(offset)),
            None,
            "nothing of its own yet"
        );
        std::fs::write(&log, "attempt 1 said this\nwaiting for network\n\n  \n").unwrap();
        assert_eq!(
            last_log_line(&log, Some(offset)).as_deref(),
            Some("waiting for network")
        );
        let long = format!("{}\n", "é".repeat(5000));
        std::fs::write(&log, &long).unwrap();
        let line = last_log_line(&log, None).unwrap();
        assert!(line.len() <= 300 && line.chars().all(|c| c == 'é'));
        assert_eq!(last_log_line(&dir.path().join("none"), None), None);
    }

    #[test]
    fn an_idle_stop_reads_124_on_the_sidecar_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.md.status.json");
        std::fs::write(&path, r#"{"state":"exited","exitCode":143}"#).unwrap();
        let own = crate::beneath::Beneath::open(dir.path()).unwrap();
        mark_idle_timeout(&own, &path);
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["exitCode"], 124);
        assert_eq!(doc["childExitCode"], 143);
        assert_eq!(doc["failureKind"], "timeout");
        // No sidecar: nothing is made up.
        mark_idle_timeout(&own, &dir.path().join("none.json"));
        assert!(!dir.path().join("none.json").exists());
    }
}
