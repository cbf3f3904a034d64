//! The private directory of an attempt run here
//! (docs/confinement.md#its-private-tmpdir): its confined worker's TMPDIR,
//! its agent CLI's private state (docs/confinement.md#provider-state);
//! named and cleared before the attempt starts, removed when it ended,
//! whoever ended it.

use super::Runner;
use crate::diag::{Code, Diagnostic};
use crate::exec::event::Dispatched;
use crate::plan::Job;
use crate::provider::state::{finish_recorded, Report};
use crate::tmpdir;
use crate::vocab::Backend;
use std::path::{Path, PathBuf};

impl Runner<'_> {
    /// The private directory exec names for an attempt whose worker will
    /// be confined here or runs an agent CLI ([`crate::tmpdir`]), cleared
    /// of whatever an earlier start of the same attempt left there. `None`
    /// for an unconfined `command` job, or on another machine (a Slurm
    /// node's temp directory is not exec's to reach: there the wrapper
    /// names and removes its own).
    pub(super) fn private_dir(
        &mut self,
        job: &Job,
        attempt: u64,
    ) -> std::io::Result<Option<PathBuf>> {
        let offer = self.offer.get_or_init(crate::confine::offer);
        let confined = crate::confine::decide(job.write_enforcement.confinement, offer);
        if job.backend == Backend::Slurm || (confined != Ok(true) && !job.provider.is_agent()) {
            return Ok(None);
        }
        if self.tmp_root.is_none() {
            self.tmp_root = Some(tmpdir::Root::system(&self.root)?);
        }
        let root = self.tmp_root.as_ref().expect("opened above");
        let name = self.tmp_name(job, attempt);
        root.remove(&name)?;
        Ok(Some(root.path().join(name)))
    }

    pub(super) fn tmp_name(&self, job: &Job, attempt: u64) -> String {
        tmpdir::attempt_name(&self.root, self.rec.store().path(), &job.key, attempt)
    }

    /// Remove an ended attempt's private directory, whoever ended it: the
    /// wrapper removes it itself, but one killed first (the SIGKILL that
    /// ends a stop, `kill -9`) cannot. Its CLI's private state is finished
    /// first, as the wrapper would have: its writes listed (returned) and a
    /// refreshed login written back. Done before the settlement is
    /// recorded, so an exec that dies in between leaves it to the next,
    /// which settles the attempt again. A directory that cannot be removed,
    /// or state that cannot be finished (then kept, the login in it), is
    /// reported (`exec/cleanup-incomplete`, exit 1), never passed over.
    pub(super) fn remove_private_dir(&mut self, job: &Job, d: &Dispatched) -> Option<Report> {
        let recorded = Path::new(d.tmp_dir.as_ref()?);
        let expected = self.tmp_name(job, d.head.attempt);
        // Only a directory named as expected (the record is not trusted to
        // point at what the wrapper made), and only an agent's has state.
        let ours = recorded.file_name() == Some(expected.as_ref());
        let state = match ours && job.provider.is_agent() {
            true => finish_recorded(recorded),
            false => Ok(None),
        };
        let state = match state {
            Ok(Some(report)) if report.credentials.as_ref().is_some_and(|c| c.failed()) => {
                self.cleanup_incomplete(
                    job,
                    d,
                    "its CLI's refreshed login could not be written back, and is kept in its private state".into(),
                    "copy the credentials file from the kept directory's state/ over your own by hand (the row's providerState says why it failed), then remove the directory",
                );
                return Some(report);
            }
            Ok(state) => state,
            Err(e) => {
                self.cleanup_incomplete(
                    job,
                    d,
                    format!("its CLI's private state was not finished, and is kept: {e}"),
                    "a login the CLI refreshed may be in its state directory: copy it back by hand if the CLI asks you to log in again, then remove the directory",
                );
                return None;
            }
        };
        // Through the root this exec opened, where the record lies in it:
        // no path walk and no check again per attempt.
        let removed = match &self.tmp_root {
            Some(root) => root.remove_recorded(recorded, &expected),
            None => tmpdir::remove_recorded(recorded, &expected),
        };
        if let Err(e) = removed {
            self.cleanup_incomplete(
                job,
                d,
                format!("its private directory was not removed: {e}"),
                "remove it by hand once nothing of the worker runs any more (`chmod -R u+rwx` first if it holds read-only directories)",
            );
        }
        state
    }

    /// `exec/cleanup-incomplete` for attempt `d` of `job`: said, and a
    /// problem of the run.
    fn cleanup_incomplete(&mut self, job: &Job, d: &Dispatched, what: String, help: &'static str) {
        let text = format!("{} (attempt {}): {what}", job.label(), d.head.attempt);
        self.say(text.clone());
        self.problems.push(
            Diagnostic::new(Code::ExecCleanupIncomplete, text)
                .worker(job.label().to_string())
                .help(help),
        );
    }
}
