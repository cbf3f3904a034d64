//! Settling an attempt (SPEC §5.3, §5.4): judge it by the artifacts it left,
//! not by the wrapper's exit code alone, and decide whether it may retry.

use crate::canonical::{is_sha256_hex, sha256_hex};
use crate::provider::{SERVED_MODEL_MISMATCH_EXIT_CODE, TIMEOUT_EXIT_CODE};
use crate::state::attempts::AttemptStatus;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// How an attempt's process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The wrapper's exit code (124 for a timeout).
    pub exit_code: i32,
    pub timed_out: bool,
    /// Set when the attempt never ran to an exit (interrupted, launch failure,
    /// a dead executor's orphan).
    pub cut_short: Option<String>,
}

impl Outcome {
    pub fn exited(code: i32) -> Self {
        Outcome {
            exit_code: code,
            timed_out: false,
            cut_short: None,
        }
    }
    pub fn timeout() -> Self {
        Outcome {
            exit_code: TIMEOUT_EXIT_CODE,
            timed_out: true,
            cut_short: None,
        }
    }
    pub fn cut(reason: impl Into<String>) -> Self {
        Outcome {
            exit_code: 1,
            timed_out: false,
            cut_short: Some(reason.into()),
        }
    }
    pub fn clean(&self) -> bool {
        self.exit_code == 0 && !self.timed_out && self.cut_short.is_none()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub status: AttemptStatus,
    /// Why it did not complete cleanly; "" for a clean completion.
    pub reason: String,
    /// Set when a non-zero exit was rescued by the audit-sidecar contract.
    pub note: String,
    pub missing: Vec<String>,
    /// Whether this attempt goes to the error log (every non-clean exit).
    pub log_error: bool,
    /// Exit 0 with a completion path missing: the one case §5.4 retries.
    pub retryable: bool,
}

/// Completion paths that are not files.
pub fn missing_paths(root: &Path, completion: &[String]) -> Vec<String> {
    completion
        .iter()
        .filter(|p| !crate::compile::paths::abs_of(root, p).is_file())
        .cloned()
        .collect()
}

pub fn settle(outcome: &Outcome, missing: Vec<String>, worker_result: &Path) -> Settlement {
    if outcome.clean() && missing.is_empty() {
        return Settlement {
            status: AttemptStatus::Completed,
            reason: String::new(),
            note: String::new(),
            missing,
            log_error: false,
            retryable: false,
        };
    }
    let base = failure_reason(outcome, &missing);
    let retryable = outcome.clean() && !missing.is_empty();
    if outcome.timed_out {
        return Settlement {
            status: AttemptStatus::Timeout,
            reason: base,
            note: String::new(),
            missing,
            log_error: true,
            retryable: false,
        };
    }
    let rescuable = outcome.cut_short.is_none()
        && outcome.exit_code != 0
        && missing.is_empty()
        && outcome.exit_code != SERVED_MODEL_MISMATCH_EXIT_CODE;
    if rescuable {
        return match audit_sidecar_failure(worker_result) {
            None => Settlement {
                status: AttemptStatus::Completed,
                reason: String::new(),
                note: format!("{base}, but every completion artifact was written and passed the audit-sidecar contract"),
                missing,
                log_error: true,
                retryable: false,
            },
            Some(why) => Settlement {
                status: AttemptStatus::Error,
                reason: format!("{base}; the artifacts failed the audit-sidecar contract: {why}"),
                note: String::new(),
                missing,
                log_error: true,
                retryable: false,
            },
        };
    }
    Settlement {
        status: AttemptStatus::Error,
        reason: base,
        note: String::new(),
        missing,
        // A clean exit that merely left an artifact out is a retry, not a
        // wrapper failure; it is still logged so a completed retry leaves a
        // trace of the first attempt.
        log_error: true,
        retryable,
    }
}

fn failure_reason(outcome: &Outcome, missing: &[String]) -> String {
    if let Some(why) = &outcome.cut_short {
        return why.clone();
    }
    if outcome.timed_out {
        return "worker went idle (its log stopped growing) and was stopped".into();
    }
    if outcome.exit_code == SERVED_MODEL_MISMATCH_EXIT_CODE {
        return format!(
            "the provider served a different model than the one selected (exit {SERVED_MODEL_MISMATCH_EXIT_CODE})"
        );
    }
    if outcome.exit_code != 0 {
        let mut r = format!("worker wrapper exited {}", outcome.exit_code);
        if !missing.is_empty() {
            r.push_str(&format!("; missing {}", missing.join(", ")));
        }
        return r;
    }
    format!(
        "required worker artifact was not produced: {}",
        missing.join(", ")
    )
}

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
    let bytes = match std::fs::read(worker_result) {
        Ok(b) => b,
        Err(e) => {
            return Some(format!(
                "worker result {} cannot be read: {e}",
                worker_result.display()
            ))
        }
    };
    let actual = sha256_hex(&bytes);
    if actual != recorded {
        return Some(format!(
            "audit sidecar `resultSha256` {recorded} is not the worker result's sha256 {actual}"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn clean_exit_with_artifacts_completes() {
        let (_d, r) = tree();
        let s = settle(&Outcome::exited(0), vec![], &r);
        assert_eq!(s.status, AttemptStatus::Completed);
        assert!(!s.log_error);
    }

    #[test]
    fn clean_exit_missing_artifact_is_retryable_error() {
        let (_d, r) = tree();
        let s = settle(&Outcome::exited(0), vec!["x.md".into()], &r);
        assert_eq!(s.status, AttemptStatus::Error);
        assert!(s.retryable);
        assert!(s.reason.contains("x.md"));
    }

    #[test]
    fn nonzero_exit_rescued_by_valid_sidecar() {
        let (_d, r) = tree();
        write_sidecar(&r, &sha256_hex(b"result"));
        let s = settle(&Outcome::exited(3), vec![], &r);
        assert_eq!(s.status, AttemptStatus::Completed);
        assert!(s.note.contains("passed the audit-sidecar contract"));
        assert!(s.log_error);
    }

    #[test]
    fn nonzero_exit_with_bad_sidecar_is_error_naming_the_failure() {
        let (_d, r) = tree();
        write_sidecar(&r, &"0".repeat(64));
        let s = settle(&Outcome::exited(3), vec![], &r);
        assert_eq!(s.status, AttemptStatus::Error);
        assert!(s.reason.contains("is not the worker result's sha256"));
        write_sidecar(&r, "ABC");
        assert!(settle(&Outcome::exited(3), vec![], &r)
            .reason
            .contains("64 lowercase hex"));
        std::fs::remove_file(audit_sidecar_path(&r)).unwrap();
        assert!(settle(&Outcome::exited(3), vec![], &r)
            .reason
            .contains("missing"));
    }

    #[test]
    fn served_model_mismatch_is_never_promoted() {
        let (_d, r) = tree();
        write_sidecar(&r, &sha256_hex(b"result"));
        let s = settle(
            &Outcome::exited(SERVED_MODEL_MISMATCH_EXIT_CODE),
            vec![],
            &r,
        );
        assert_eq!(s.status, AttemptStatus::Error);
        assert!(!s.retryable);
    }

    #[test]
    fn timeout_settles_timeout_without_retry() {
        let (_d, r) = tree();
        let s = settle(&Outcome::timeout(), vec![], &r);
        assert_eq!(s.status, AttemptStatus::Timeout);
        assert!(!s.retryable);
    }

    #[test]
    fn nonzero_exit_with_missing_artifacts_is_not_retried() {
        let (_d, r) = tree();
        let s = settle(&Outcome::exited(1), vec!["x".into()], &r);
        assert_eq!(s.status, AttemptStatus::Error);
        assert!(!s.retryable);
    }
}
