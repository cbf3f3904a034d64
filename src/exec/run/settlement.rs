//! Settling an ended attempt (docs/exec.md#settling-an-attempt): the
//! facts gathered from disk, decided by [`crate::exec::decide`], recorded
//! before anything follows from them, reported.

use super::resume::status_exists;
use super::stage_audit::{audit_of, Baseline, Judge, RoundAudit};
use super::{Ended, Runner};
use crate::audit;
use crate::diag::WrapperExit;
use crate::exec::decide;
use crate::exec::decide::{Audit, Decision, End, Facts, Status};
use crate::exec::event::{Dispatched, EgressRefused, Event, Head, RetryScheduled, Settled};
use crate::exec::record::Then;
use crate::exec::report::Notice;
use crate::exec::settle::StatusReport;
use crate::plan::Job;
use crate::state::journal::Sync;
use crate::vocab::{MutationAudit, Role};
use serde_json::Value;
use std::path::Path;

impl Runner<'_> {
    /// Settle every ended attempt of a round, after the round's audit
    /// compare; the attempts to start next.
    pub(super) fn settle_round(
        &mut self,
        si: usize,
        ended: Vec<Ended>,
        baseline: &Baseline,
        indices: &[usize],
    ) -> Vec<(usize, u64)> {
        if ended.is_empty() {
            return Vec::new();
        }
        self.exclude_registrations();
        let round = match baseline {
            Baseline::Off => RoundAudit::Off,
            Baseline::Broken(why) => RoundAudit::Incomplete(why.clone()),
            Baseline::Taken(s) => match audit::compare(s, &self.audit_options()) {
                Ok(c) => {
                    self.last_after = Some(c.after);
                    RoundAudit::Compared(c.changes)
                }
                Err(e) => RoundAudit::Incomplete(self.incomplete(&e)),
            },
        };
        let mut own = self.rec.own_file_changes();
        own.extend(self.forged.remove(&si).unwrap_or_default());
        let batch: Vec<crate::plan::WritePolicy> = indices
            .iter()
            .map(|&i| self.job(i).write_policy.clone())
            .collect();
        let declared: Vec<(usize, Vec<String>)> = indices
            .iter()
            .enumerate()
            .filter(|(_, &i)| self.job(i).role == Role::Implementer)
            .map(|(k, &i)| {
                (
                    k,
                    audit::out_of_plan_edits(&self.abs(&self.job(i).worker_result_path)),
                )
            })
            .collect();
        let view = match &round {
            RoundAudit::Compared(changes) => Some(audit::attribute(changes, &batch, &declared)),
            _ => None,
        };
        let mut retries = Vec::new();
        for e in ended {
            let audited = self.job(e.job).write_enforcement.mutation_audit == MutationAudit::Batch;
            let judge = match (&round, &view) {
                (_, _) if !audited => Judge::Off,
                (RoundAudit::Incomplete(why), _) => Judge::Incomplete(why.clone()),
                (_, Some(view)) => match indices.iter().position(|&i| i == e.job) {
                    Some(k) => Judge::In(view, k),
                    None => Judge::Off,
                },
                _ => Judge::Off,
            };
            retries.extend(self.settle_with(e, judge, &own));
        }
        if let Err(e) = self.rec.maybe_flush() {
            self.fatal.get_or_insert(e.to_string());
        }
        retries
    }

    /// Settle an attempt of a stage without a batch audit, as soon as it
    /// ended; okstra's own files are checked on the spot.
    pub(super) fn settle_one(&mut self, si: usize, e: Ended) -> Option<(usize, u64)> {
        let mut own = self.rec.own_file_changes();
        own.extend(self.forged.remove(&si).unwrap_or_default());
        let next = self.settle_with(e, Judge::Off, &own);
        if let Err(e) = self.rec.maybe_flush() {
            self.fatal.get_or_insert(e.to_string());
        }
        next
    }

    /// Gather the facts of an ended attempt, decide, record, report; the
    /// attempt that follows, if one does.
    pub(super) fn settle_with(
        &mut self,
        e: Ended,
        judge: Judge,
        own: &[String],
    ) -> Option<(usize, u64)> {
        let i = e.job;
        let job = self.job(i);
        let attempt = e.dispatched.head.attempt;
        let first = job.first_attempt();
        let state = self.remove_private_dir(&job, &e.dispatched);
        let egress = self.close_door(i, attempt).unwrap_or_default();
        let (mut facts, report) = self.facts_of(&job, &e);
        let summary;
        (facts.audit, summary) = audit_of(&facts, judge, own);
        facts.audit = super::worktrees::resolved_in_worktree(&job, facts.audit);
        let mut d = decide::decide(&facts);
        let worktree = self.settle_worktree(&job, &e, &mut d, &report);
        let mut settled = self.settled(&job, &e, &facts, &d, report, summary);
        settled.worktree = worktree;
        self.note_refusals(&e.dispatched, &egress);
        settled.egress = egress.destinations;
        // exec's account of the private state, where it finished it (a
        // killed wrapper's, or one whose write-back failed), else the
        // wrapper's.
        settled.provider_state = state.or(settled.provider_state.take());
        self.usages[i].extend(settled.usage.clone());
        // A lost attempt found by this exec resumes at once; an interrupted
        // one is for the next exec.
        let resume_now = d.resumable && !self.interrupted && matches!(e.end, End::Lost(_));
        let next = (d.retry || resume_now).then_some(attempt + 1);
        if !self.record_settlement(&job, &e, &facts, &d, settled, next.is_some()) {
            return None;
        }
        if next.is_none() {
            let attempts = attempt + 1 - first;
            self.report(i, d.status.into(), attempts, &d.reason, e.started.elapsed());
        }
        next.map(|a| (i, a))
    }

    /// The settlement record of attempt `e` as `d` decided it, with what
    /// its status sidecar `report`ed and its audit `summary`. An attempt
    /// that goes to the error log is appended there first, and the record
    /// says where.
    fn settled(
        &mut self,
        job: &Job,
        e: &Ended,
        facts: &Facts,
        d: &Decision,
        report: StatusReport,
        summary: Option<Value>,
    ) -> Settled {
        let wrapper_code = match e.end {
            End::Exited(c) => Some(c),
            _ => None,
        };
        let error_log_append = d.log_error.then(|| {
            let code = d.exit_code.or(wrapper_code).unwrap_or(1);
            let log = self.abs(&job.log_path());
            self.rec.error_log(
                job,
                e.dispatched.head.attempt,
                i64::from(code),
                report.duration_ms,
                &d.reason,
                (&log, report.log_offset),
            )
        });
        Settled {
            head: self.head_from(&e.dispatched),
            status: d.status,
            reason: d.reason.clone(),
            exit_code: d.exit_code.or(wrapper_code),
            wrapper_exit_code: wrapper_code,
            missing_completion_paths: facts.missing.iter().map(|m| m.path.clone()).collect(),
            served_model: report.served_model,
            cli_session_id: report.cli_session_id,
            failure_kind: d.failure_kind.clone(),
            cli_argv: report.argv,
            usage: report.usage,
            confinement: report.confinement,
            network: report.network,
            egress: Vec::new(),
            provider_state: report.provider_state,
            resumable: d.resumable,
            mutation_audit: summary,
            error_log_append,
            worktree: None,
        }
    }

    /// Each connection the egress proxy refused the attempt, as an event
    /// ahead of its settlement (docs/confinement.md#network); past the
    /// ones the door kept, one event counting the rest.
    fn note_refusals(&mut self, d: &Dispatched, egress: &crate::egress::Egress) {
        let mut refusals: Vec<(String, u16, String)> = egress
            .refusals
            .iter()
            .map(|r| (r.host.clone(), r.port, r.reason.clone()))
            .collect();
        if egress.refusals_dropped > 0 {
            let reason = format!(
                "{} more refusals, not recorded one by one (the first {} are)",
                egress.refusals_dropped,
                crate::egress::Egress::REFUSALS_KEPT
            );
            refusals.push(("*".into(), 0, reason));
        }
        for (host, port, reason) in refusals {
            let event = Event::EgressRefused(EgressRefused {
                head: self.head_from(d),
                host,
                port,
                reason,
            });
            self.rec.note(&event);
            self.tell(Notice::Recorded { event: &event });
        }
    }

    /// Record the settlement (to be followed by another attempt where
    /// `follows`) and the retry `d` schedules, and make them durable before
    /// anything follows from them (docs/exec.md#crash-safety-and-resume);
    /// false where they could not be, which ends the run.
    fn record_settlement(
        &mut self,
        job: &Job,
        e: &Ended,
        facts: &Facts,
        d: &Decision,
        settled: Settled,
        follows: bool,
    ) -> bool {
        let event = if d.status == Status::Completed {
            Event::WorkerResultCollected(settled)
        } else {
            Event::WorkerFailed(settled)
        };
        let then = if follows { Then::Retry } else { Then::End };
        self.rec.record_settled(job, &e.dispatched, &event, then);
        self.tell(Notice::Recorded { event: &event });
        if d.retry {
            let retry = Event::WorkerRetryScheduled(RetryScheduled {
                head: self.head_from(&e.dispatched),
                missing_completion_paths: facts.missing.iter().map(|m| m.path.clone()).collect(),
                reason: d.reason.clone(),
                next_attempt: e.dispatched.head.attempt + 1,
            });
            self.rec.record(job, &retry, Then::Retry);
            self.tell(Notice::Recorded { event: &retry });
        }
        if d.resumable {
            self.histories[e.job].note_resumable();
        }
        crate::fault::point("settle-commit");
        if let Err(err) = self.rec.commit(Sync::None) {
            self.fatal
                .get_or_insert(format!("cannot record a settlement: {err}"));
            return false;
        }
        true
    }

    /// What an ended attempt's settlement weighs
    /// (docs/exec.md#settling-an-attempt), read from disk, its audit not yet
    /// judged; and what its status sidecar says.
    pub(super) fn facts_of(&self, job: &Job, e: &Ended) -> (Facts, StatusReport) {
        let status_doc = crate::worker::StatusSidecar::read(&self.abs(&job.status_path()));
        let report = StatusReport::of(status_doc.as_ref(), &e.end);
        let missing = crate::exec::artifacts::judge(
            &self.root,
            &job.completion_paths,
            &e.dispatched.completion_paths_before,
            e.dispatched.head.attempt,
            job.first_attempt(),
        );
        let worker_result = self.abs(&job.worker_result_path);
        let audit_sidecar = decide::needs_audit_sidecar(&e.end, &missing)
            .then(|| crate::exec::settle::audit_sidecar_failure(&worker_result));
        let facts = Facts {
            end: e.end.clone(),
            sidecar: report.sidecar.clone(),
            missing,
            audit_sidecar,
            audit: Audit::None,
            policy_intact: crate::policy::digest_of(&job.write_policy) == job.write_policy.digest,
            attempt: e.dispatched.head.attempt,
            last_allowed: self.histories[e.job].last_allowed(job.first_attempt()),
            last_words: (e.end == End::Idle)
                .then(|| {
                    crate::exec::settle::last_log_line(
                        &self.abs(&job.log_path()),
                        report.log_offset,
                    )
                })
                .flatten(),
        };
        (facts, report)
    }

    pub(super) fn head_from(&self, d: &Dispatched) -> Head {
        Head {
            ts: crate::clock::now(),
            ..d.head.clone()
        }
    }
}

/// How a wrapper's exit code reads. 75: its gate closed unreleased, and 74
/// with no status sidecar: it could not record its start; either way nothing
/// of the worker ran. 74 with a sidecar: the worker ran, but its end could
/// not be recorded. All three are no fault of the worker: resumable.
pub(super) fn wrapper_end(code: i32, status: &Path) -> End {
    match WrapperExit::from_code(code) {
        Some(WrapperExit::NeverReleased) => End::Lost(format!(
            "the worker wrapper exited {code} at its gate: nothing ran"
        )),
        Some(WrapperExit::StatusWriteFailed) if !status_exists(status) => End::Lost(format!(
            "the worker wrapper exited {code}: it could not record its start, so nothing ran"
        )),
        Some(WrapperExit::StatusWriteFailed) => End::Lost(format!(
            "the worker wrapper exited {code}: it could not record how the worker ended"
        )),
        _ => End::Exited(code),
    }
}
