//! The binding gate (docs/exec.md#before-anything-starts, again at each
//! start): a v2 job starts only while its model binding is still the
//! manifest's; one whose binding moved is refused and reported.

use super::Runner;
use crate::diag::{Code, Diagnostic};
use crate::state::WorkerStatus;
use serde_json::Value;
use std::time::Duration;

/// Each job's binding verdict as of a manifest modification time and length
/// (`None` verdicts: the manifest could not be read).
pub(super) type BindingVerdicts = (
    Option<std::time::SystemTime>,
    u64,
    Option<Vec<Option<String>>>,
);

impl Runner<'_> {
    /// docs/exec.md#before-anything-starts again, at the moment a v2 job
    /// starts: its role execution, participant, label and model binding must
    /// still be the manifest's. The manifest is re-read, and every job's
    /// verdict recomputed in one pass, only when its modification time or
    /// length changed.
    pub(super) fn binding_gate(&mut self, i: usize) -> Option<String> {
        // Kept parsed: the job starts next (or is refused, and reported).
        self.jobs.hold(i).identity.v2()?;
        let path = self.abs(&self.plan.run.manifest_path);
        let meta = std::fs::metadata(&path).ok();
        let stamp = (
            meta.as_ref().and_then(|m| m.modified().ok()),
            meta.as_ref().map(|m| m.len()).unwrap_or(0),
        );
        let fresh = self
            .manifest_cache
            .as_ref()
            .is_some_and(|(t, l, _)| (*t, *l) == stamp && t.is_some());
        if !fresh {
            let verdicts = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .map(|doc| {
                    let manifest = crate::model::Manifest::new(&doc);
                    self.jobs
                        .each()
                        .map(|(_, job)| crate::exec::preflight::binding_change(&manifest, &job))
                        .collect()
                });
            self.manifest_cache = Some((stamp.0, stamp.1, verdicts));
        }
        match self
            .manifest_cache
            .as_ref()
            .and_then(|(_, _, v)| v.as_ref())
        {
            None => Some(format!(
                "the manifest {} can no longer be read",
                self.plan.run.manifest_path
            )),
            Some(verdicts) => verdicts[i].clone(),
        }
    }

    /// Refuse a job whose binding moved: it is not run, its row says why,
    /// and the refusal is reported as `exec/binding-changed`.
    pub(super) fn refuse(&mut self, i: usize, attempt: u64, why: String) {
        let job = self.job(i);
        let reason = format!("exec/binding-changed: {why}");
        self.say(format!("{} refused at start: {why}", job.label()));
        self.rec.refused(&job, &reason);
        self.report(
            i,
            WorkerStatus::NotRun,
            attempt.saturating_sub(job.first_attempt()),
            &reason,
            Duration::ZERO,
        );
        self.refused.push(
            Diagnostic::new(Code::ExecBindingChanged, format!("{}: {why}", job.label()))
                .worker(job.label().to_string())
                .in_file(self.plan.run.manifest_path.clone())
                .help("the model binding changed after planning; the job was not run. Re-plan to run it with the new binding"),
        );
    }
}
