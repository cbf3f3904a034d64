//! Settling an attempt (docs/exec.md#settling-an-attempt, docs/exec.md#retries,
//! docs/audit.md#the-mutation-audit, docs/exec.md#crash-safety-and-resume) as a
//! pure decision over the facts gathered about it: no file is read here, so
//! every rule has a unit test with the facts written out.

pub use super::artifacts::Missing;
use crate::audit::Outcome as AuditOutcome;
use crate::diag::WrapperExit;
use crate::vocab::FailureKind;

pub use crate::state::attempts::AttemptStatus as Status;

/// How an attempt's process ended, as exec saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The wrapper exited with this code.
    Exited(i32),
    /// exec stopped it: its log had not grown for `idleTimeoutSeconds`.
    Idle,
    /// exec stopped it because exec itself was interrupted (Ctrl-C, SIGTERM).
    Interrupted,
    /// exec or the wrapper died without an exit code being recorded (found
    /// by a later exec).
    Lost(String),
    /// exec stopped it because a launch of its batch failed: like an
    /// interruption, no fault of its own.
    LaunchFailed(String),
    /// Someone other than exec ended it before the wrapper could record an
    /// exit (an operator's `scancel` of its Slurm job): no fault of its own,
    /// so resumable, but by the next exec, not behind the operator's back.
    Cancelled(String),
    /// The backend's own time limit stopped it (a Slurm `--time`): a
    /// wall-clock timeout like `timeoutSeconds`.
    TimeLimit(String),
    /// exec stopped it because the run's budget was spent and the run says
    /// `onBudget = "stop"` (docs/exec.md#budgets): why.
    OverBudget(String),
}

/// What the wrapper's status sidecar says, where it says it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sidecar {
    pub failure_kind: Option<FailureKind>,
    pub error: Option<String>,
    /// The wrapper's own wall-clock limit (`timeoutSeconds`) stopped it.
    pub wall_clock: bool,
}

/// The mutation audit's verdict on this attempt, where it was audited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Audit {
    /// Not audited (`mutationAudit = "none"`).
    None,
    /// Audited: what it found.
    Judged {
        status: AuditOutcome,
        violations: Vec<String>,
        retry_allowed: bool,
    },
    /// The audit could not complete (docs/audit.md#the-audit-fails-closed:
    /// fails closed).
    Incomplete(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub end: End,
    pub sidecar: Sidecar,
    /// Completion paths this attempt did not write: not files, or files
    /// left as they were before it started (docs/exec.md#settling-an-attempt).
    pub missing: Vec<Missing>,
    /// The audit-sidecar contract's verdict (`None`: passed), asked only
    /// where [`needs_audit_sidecar`] says so.
    pub audit_sidecar: Option<Option<String>>,
    pub audit: Audit,
    /// The job's write policy still digests to what the plan recorded.
    pub policy_intact: bool,
    pub attempt: u64,
    /// The last attempt the retry rule allows.
    pub last_allowed: u64,
    /// The last line the worker wrote to its log, where exec stopped it
    /// idle (the wrapper quotes the CLI itself in every other case).
    pub last_words: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub status: Status,
    /// Why it did not complete cleanly, or the note of a rescued completion;
    /// "" for a clean completion.
    pub reason: String,
    /// Set for every attempt that did not complete.
    pub failure_kind: Option<FailureKind>,
    /// The exit code recorded on every record of the attempt (124 for a
    /// timeout of either kind).
    pub exit_code: Option<i32>,
    /// Goes to the error log (every attempt that did not exit 0 cleanly).
    pub log_error: bool,
    /// Another attempt follows under docs/exec.md#retries.
    pub retry: bool,
    /// The attempt ended through no fault of its own: the next exec starts a
    /// new attempt, outside the retry limit
    /// (docs/exec.md#crash-safety-and-resume).
    pub resumable: bool,
}

/// Whether settling needs the audit-sidecar contract checked: a non-zero
/// exit that left every completion artifact, not the served-model mismatch.
pub fn needs_audit_sidecar(end: &End, missing: &[Missing]) -> bool {
    matches!(end, End::Exited(code) if *code != 0 && !never_rescued(*code)) && missing.is_empty()
}

/// The wrapper's exits that are never a result, whatever the artifacts:
/// the wrong model served, a budget crossed (docs/exec.md#budgets).
fn never_rescued(code: i32) -> bool {
    WrapperExit::ServedModelMismatch.is(code) || WrapperExit::BudgetExceeded.is(code)
}

pub fn decide(f: &Facts) -> Decision {
    let mut d = base(f);
    if !f.policy_intact {
        d.status = Status::Error;
        d.retry = false;
        d.reason = "the job's write policy no longer matches its recorded digest".into();
        d.failure_kind = Some(FailureKind::WritePolicy);
    }
    match &f.audit {
        Audit::None => {}
        Audit::Incomplete(why) => {
            d.status = Status::Error;
            d.retry = false;
            d.resumable = false;
            d.reason = join(&d.reason, &format!("audit/incomplete: {why}"));
            d.failure_kind = Some(FailureKind::AuditIncomplete);
        }
        Audit::Judged {
            status,
            violations,
            retry_allowed,
        } => {
            if status.blocks() {
                let audit = format!("mutation audit {status}: {}", violations.join(", "));
                // A failed attempt keeps its own reason and kind first; a
                // completion (rescued or not) is overruled by the audit.
                if d.status == Status::Completed {
                    d.reason = audit;
                    d.failure_kind = Some(FailureKind::WritePolicy);
                } else {
                    d.reason = join(&d.reason, &audit);
                    d.failure_kind.get_or_insert(FailureKind::WritePolicy);
                }
                d.status = Status::Error;
                d.retry = false;
                d.resumable = false;
            } else {
                d.retry &= *retry_allowed || *status == AuditOutcome::Ok;
            }
        }
    }
    d.retry &= f.attempt < f.last_allowed;
    if d.status != Status::Completed {
        d.log_error = true;
    }
    d
}

/// The decision before the audit and the policy digest have their say.
fn base(f: &Facts) -> Decision {
    let mut d = match &f.end {
        End::Interrupted => Decision::no_fault("interrupted".into(), FailureKind::Interrupted),
        End::Lost(why) => Decision::no_fault(why.clone(), FailureKind::Lost),
        End::LaunchFailed(why) => Decision::no_fault(why.clone(), FailureKind::LaunchFailed),
        End::Cancelled(why) => Decision::no_fault(why.clone(), FailureKind::Cancelled),
        End::TimeLimit(why) => Decision::timed_out(why.clone()),
        End::OverBudget(why) => Decision::settled(
            Status::Error,
            why.clone(),
            Some(FailureKind::BudgetExceeded),
        ),
        End::Idle => Decision::timed_out(idle_reason(f.last_words.as_deref())),
        End::Exited(_) if f.sidecar.wall_clock => Decision::timed_out(
            f.sidecar
                .error
                .clone()
                .unwrap_or_else(|| "wall-clock limit reached".into()),
        ),
        End::Exited(code) => exited(f, *code),
    };
    lead_with_wrappers_word(f, &mut d);
    d
}

impl Decision {
    /// An attempt settled as `status` for `reason`: it goes to the error log,
    /// with no retry and no resume, unless the caller's rule says otherwise.
    fn settled(status: Status, reason: String, kind: Option<FailureKind>) -> Self {
        Decision {
            status,
            reason,
            failure_kind: kind,
            exit_code: None,
            log_error: true,
            retry: false,
            resumable: false,
        }
    }

    /// Ended by exec, the machine or an operator, not by its own doing: the
    /// next exec starts it again outside the retry limit
    /// (docs/exec.md#crash-safety-and-resume).
    fn no_fault(reason: String, kind: FailureKind) -> Self {
        Decision {
            resumable: true,
            ..Decision::settled(Status::Error, reason, Some(kind))
        }
    }

    /// Stopped by a time limit (the wrapper's wall clock, exec's idle stop,
    /// the backend's own limit): a `timeout` with the timeout exit code.
    fn timed_out(reason: String) -> Self {
        Decision {
            exit_code: Some(WrapperExit::Timeout.code()),
            ..Decision::settled(Status::Timeout, reason, Some(FailureKind::Timeout))
        }
    }
}

/// Why exec stopped an idle worker, quoting its last line where it left one.
fn idle_reason(last_words: Option<&str>) -> String {
    let mut reason = String::from("worker went idle (its log stopped growing) and was stopped");
    if let Some(line) = last_words {
        reason.push_str(&format!("; its last line: \"{line}\""));
    }
    reason
}

/// A wrapper that exited of itself with `code`: completed only where every
/// completion path was written (docs/exec.md#settling-an-attempt); a
/// missing path after exit 0 is the one failure that retries
/// (docs/exec.md#retries).
fn exited(f: &Facts, code: i32) -> Decision {
    let mut d = if code == 0 && f.missing.is_empty() {
        Decision {
            log_error: false,
            ..Decision::settled(Status::Completed, String::new(), None)
        }
    } else if code == 0 {
        let reason = format!(
            "required worker artifact was not produced: {}",
            listed(&f.missing)
        );
        Decision {
            retry: true,
            ..Decision::settled(Status::Error, reason, Some(FailureKind::MissingArtifact))
        }
    } else if WrapperExit::ServedModelMismatch.is(code) {
        let reason =
            format!("the provider served a different model than the one selected (exit {code})");
        Decision::settled(
            Status::Error,
            reason,
            Some(FailureKind::ServedModelMismatch),
        )
    } else if WrapperExit::BudgetExceeded.is(code) {
        let reason = format!("the attempt's spend crossed its budget (exit {code})");
        Decision::settled(Status::Error, reason, Some(FailureKind::BudgetExceeded))
    } else {
        exited_non_zero(f, code)
    };
    d.exit_code = Some(code);
    d
}

/// A non-zero exit (not the served-model mismatch): rescued as a completion
/// with a note where every completion path was written and the
/// audit-sidecar contract holds (docs/exec.md#settling-an-attempt).
fn exited_non_zero(f: &Facts, code: i32) -> Decision {
    match (&f.audit_sidecar, f.missing.is_empty()) {
        (Some(None), true) => Decision::settled(
            Status::Completed,
            format!("worker wrapper exited {code}, but every completion artifact was written and passed the audit-sidecar contract"),
            None,
        ),
        (Some(Some(why)), true) => Decision::settled(
            Status::Error,
            format!("worker wrapper exited {code}; the artifacts failed the audit-sidecar contract: {why}"),
            Some(FailureKind::AuditSidecar),
        ),
        _ => {
            let prefix = format!("worker wrapper exited {code}");
            let reason = if f.missing.is_empty() {
                prefix
            } else {
                format!("{prefix}; missing {}", listed(&f.missing))
            };
            Decision::settled(Status::Error, reason, Some(FailureKind::Exit))
        }
    }
}

/// The wrapper's own word on why its CLI failed leads the reason (and names
/// the kind), but only where the CLI ended of itself: when exec or the
/// scheduler ended it (an interrupt, an idle stop, a cancel, the wall
/// clock), the CLI's last words are the stop's echo (Slurm's "CANCELLED"
/// line), not why it failed.
fn lead_with_wrappers_word(f: &Facts, d: &mut Decision) {
    if d.status == Status::Completed || f.sidecar.wall_clock || !matches!(f.end, End::Exited(_)) {
        return;
    }
    if let Some(kind) = &f.sidecar.failure_kind {
        d.reason = match f.sidecar.error.as_deref().filter(|e| !e.is_empty()) {
            Some(detail) => format!("{} [{kind}]: {detail}", d.reason),
            None => format!("{} [{kind}]", d.reason),
        };
        d.failure_kind = Some(kind.clone());
    }
}

/// The missing paths as a reason lists them, each with why it does not count.
fn listed(missing: &[Missing]) -> String {
    missing
        .iter()
        .map(Missing::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn join(first: &str, then: &str) -> String {
    if first.is_empty() {
        then.to_string()
    } else {
        format!("{first}; {then}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(end: End) -> Facts {
        Facts {
            end,
            sidecar: Sidecar::default(),
            missing: vec![],
            audit_sidecar: None,
            audit: Audit::None,
            policy_intact: true,
            attempt: 1,
            last_allowed: 2,
            last_words: None,
        }
    }

    fn judged(status: &str, retry_allowed: bool) -> Audit {
        Audit::Judged {
            status: serde_json::from_value(serde_json::json!(status)).unwrap(),
            violations: vec!["src/evil.rs".into()],
            retry_allowed,
        }
    }

    #[test]
    fn a_job_cancelled_from_outside_is_resumable_and_a_time_limit_is_a_timeout() {
        let d = decide(&facts(End::Cancelled("Slurm job 7 was cancelled".into())));
        assert_eq!(d.status, Status::Error);
        assert!(d.resumable && !d.retry && d.log_error);
        assert_eq!(d.failure_kind, Some(FailureKind::Cancelled));
        assert_eq!(d.reason, "Slurm job 7 was cancelled");
        let d = decide(&facts(End::TimeLimit("Slurm's time limit".into())));
        assert_eq!(d.status, Status::Timeout);
        assert_eq!(d.exit_code, Some(WrapperExit::Timeout.code()));
        assert!(!d.resumable && !d.retry);
        assert_eq!(d.failure_kind, Some(FailureKind::Timeout));
    }

    #[test]
    fn a_clean_exit_with_its_artifacts_completes() {
        let d = decide(&facts(End::Exited(0)));
        assert_eq!(d.status, Status::Completed);
        assert_eq!(
            (d.reason.as_str(), d.log_error, d.retry),
            ("", false, false)
        );
        assert_eq!(d.failure_kind, None);
        assert_eq!(d.exit_code, Some(0));
    }

    #[test]
    fn a_clean_exit_missing_an_artifact_retries_while_attempts_are_left() {
        let mut f = facts(End::Exited(0));
        f.missing = vec![Missing::absent("out/r.md")];
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert!(d.retry && d.log_error);
        assert!(d.reason.contains("out/r.md"));
        assert_eq!(d.failure_kind, Some(FailureKind::MissingArtifact));
        f.attempt = 2;
        assert!(!decide(&f).retry, "the last attempt");
        // The audit may forbid it.
        f.attempt = 1;
        f.audit = judged("failed-no-mutation", true);
        assert!(decide(&f).retry);
        f.audit = judged("ok", false);
        assert!(decide(&f).retry);
        f.audit = judged("mutation-present-unresolved", false);
        let d = decide(&f);
        assert!(!d.retry);
        assert!(d.reason.starts_with("required worker artifact"));
        assert!(d
            .reason
            .contains("mutation audit mutation-present-unresolved: src/evil.rs"));
    }

    #[test]
    fn a_file_left_from_before_the_attempt_is_missing_and_retried_like_one() {
        use super::super::artifacts::Why;
        let mut f = facts(End::Exited(0));
        f.missing = vec![Missing {
            path: "out/r.md".into(),
            why: Why::Unchanged {
                attempt: 1,
                earlier_run: true,
            },
        }];
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert!(d.retry && d.log_error);
        assert_eq!(d.failure_kind, Some(FailureKind::MissingArtifact));
        assert_eq!(
            d.reason,
            "required worker artifact was not produced: out/r.md: unchanged since before attempt 1 (left by an earlier run)"
        );
        // A non-zero exit beside it is not rescued by an audit sidecar.
        f.end = End::Exited(3);
        assert!(!needs_audit_sidecar(&f.end, &f.missing));
        assert_eq!(decide(&f).status, Status::Error);
    }

    #[test]
    fn a_nonzero_exit_is_rescued_only_by_the_audit_sidecar() {
        let mut f = facts(End::Exited(3));
        assert!(needs_audit_sidecar(&f.end, &f.missing));
        f.audit_sidecar = Some(None);
        let d = decide(&f);
        assert_eq!(d.status, Status::Completed);
        assert!(d.log_error, "a rescued exit still goes to the error log");
        assert!(d.reason.contains("passed the audit-sidecar contract"));
        f.audit_sidecar = Some(Some("audit sidecar x is missing".into()));
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert!(d.reason.contains("is missing"));
        assert!(!d.retry);
        // Missing artifacts: not asked, not rescued, not retried.
        f.missing = vec![Missing::absent("r.md")];
        assert!(!needs_audit_sidecar(&f.end, &f.missing));
        let d = decide(&f);
        assert_eq!(d.reason, "worker wrapper exited 3; missing r.md");
        assert!(!d.retry);
        assert_eq!(d.failure_kind, Some(FailureKind::Exit));
    }

    #[test]
    fn the_served_model_mismatch_is_never_promoted() {
        let f = facts(End::Exited(WrapperExit::ServedModelMismatch.code()));
        assert!(!needs_audit_sidecar(&f.end, &f.missing));
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert!(!d.retry);
        assert_eq!(d.failure_kind, Some(FailureKind::ServedModelMismatch));
    }

    #[test]
    fn timeouts_of_both_kinds_record_124_and_do_not_retry() {
        let d = decide(&facts(End::Idle));
        assert_eq!((d.status, d.exit_code), (Status::Timeout, Some(124)));
        assert_eq!(d.failure_kind, Some(FailureKind::Timeout));
        assert!(!d.retry);
        let mut f = facts(End::Idle);
        f.last_words = Some("waiting for network".into());
        assert_eq!(
            decide(&f).reason,
            "worker went idle (its log stopped growing) and was stopped; its last line: \"waiting for network\""
        );
        let mut f = facts(End::Exited(124));
        f.sidecar = Sidecar {
            failure_kind: Some(FailureKind::Timeout),
            error: Some("timed out after 5 s".into()),
            wall_clock: true,
        };
        let d = decide(&f);
        assert_eq!((d.status, d.exit_code), (Status::Timeout, Some(124)));
        assert_eq!(d.reason, "timed out after 5 s");
    }

    #[test]
    fn a_budget_crossed_is_never_rescued_retried_or_resumed() {
        let code = WrapperExit::BudgetExceeded.code();
        assert!(!needs_audit_sidecar(&End::Exited(code), &[]));
        let mut f = facts(End::Exited(code));
        f.sidecar.failure_kind = Some(FailureKind::BudgetExceeded);
        f.sidecar.error = Some("budget exceeded: claude spent 12 tokens".into());
        let d = decide(&f);
        assert_eq!((d.status, d.exit_code), (Status::Error, Some(87)));
        assert!(!d.retry && !d.resumable && d.log_error);
        assert_eq!(d.failure_kind, Some(FailureKind::BudgetExceeded));
        assert!(d.reason.contains("budget exceeded: claude"), "{}", d.reason);
        let d = decide(&facts(End::OverBudget("run budget spent".into())));
        assert_eq!(d.status, Status::Error);
        assert!(!d.retry && !d.resumable);
        assert_eq!(d.failure_kind, Some(FailureKind::BudgetExceeded));
    }

    #[test]
    fn interrupted_and_lost_attempts_are_resumable_not_retried() {
        for end in [End::Interrupted, End::Lost("exec died".into())] {
            let d = decide(&facts(end.clone()));
            assert_eq!(d.status, Status::Error, "{end:?}");
            assert!(d.resumable && !d.retry && d.log_error, "{end:?}");
        }
        assert_eq!(decide(&facts(End::Interrupted)).reason, "interrupted");
        // A CLI that saw the stop first (a Slurm cancel signals it before
        // its wrapper) leaves an exit told as a failure on the sidecar:
        // exec's word stands.
        for end in [
            End::Interrupted,
            End::Idle,
            End::Cancelled("Slurm job 7 was cancelled".into()),
        ] {
            let mut f = facts(end.clone());
            f.sidecar.failure_kind = Some(FailureKind::Exit);
            f.sidecar.error = Some("command said: \"*** JOB 6 CANCELLED ***\"".into());
            let d = decide(&f);
            assert!(!d.reason.contains("CANCELLED ***"), "{end:?}: {}", d.reason);
            assert_ne!(d.failure_kind, Some(FailureKind::Exit), "{end:?}");
        }
        let d = decide(&facts(End::LaunchFailed("launch failed for b".into())));
        assert!(d.resumable && !d.retry);
        assert_eq!(d.failure_kind, Some(FailureKind::LaunchFailed));
    }

    #[test]
    fn the_wrappers_failure_kind_leads_the_reason() {
        let mut f = facts(End::Exited(1));
        f.sidecar.failure_kind = Some(FailureKind::NotLoggedIn);
        f.sidecar.error = Some("claude is not logged in".into());
        let d = decide(&f);
        assert_eq!(
            d.reason,
            "worker wrapper exited 1 [not-logged-in]: claude is not logged in"
        );
        assert_eq!(d.failure_kind, Some(FailureKind::NotLoggedIn));
    }

    #[test]
    fn the_audit_overrules_a_completion_and_fails_closed() {
        let mut f = facts(End::Exited(0));
        f.audit = judged("contract-failed-unattributed", false);
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert_eq!(
            d.reason,
            "mutation audit contract-failed-unattributed: src/evil.rs"
        );
        assert!(d.log_error && !d.retry);
        f.audit = Audit::Incomplete("cannot read src/deep: Permission denied".into());
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert!(d
            .reason
            .starts_with("audit/incomplete: cannot read src/deep"));
        assert_eq!(d.failure_kind, Some(FailureKind::AuditIncomplete));
        // Not even an interrupted attempt is resumable once the audit could
        // not vouch for the tree.
        let mut f = facts(End::Interrupted);
        f.audit = Audit::Incomplete("x".into());
        assert!(!decide(&f).resumable);
    }

    #[test]
    fn a_moved_write_policy_is_an_error() {
        let mut f = facts(End::Exited(0));
        f.policy_intact = false;
        let d = decide(&f);
        assert_eq!(d.status, Status::Error);
        assert!(d.reason.contains("no longer matches its recorded digest"));
    }
}
