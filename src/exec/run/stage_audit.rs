//! The mutation audit of a stage (docs/audit.md#the-mutation-audit): its
//! baseline taken and recorded (or read back, as its record vouches) before
//! the first round, what every walk covers, and the verdict on each attempt
//! after its round's compare.

use super::Runner;
use crate::audit;
use crate::exec::baseline::{self, Choice, OnDisk};
use crate::exec::decide;
use crate::exec::decide::{Audit, Facts, Status};
use crate::exec::event::{Event, StageSnapshot};
use crate::exec::jobs::Jobs;
use crate::exec::record::Recorder;
use crate::exec::report::Notice;
use crate::paths;
use crate::plan::Plan;
use crate::state::journal::Sync;
use crate::vocab::MutationAudit;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// How one attempt is audited.
pub(super) enum Judge<'v> {
    Off,
    Incomplete(String),
    /// Its verdict comes from the round's attribution, as job `k` of it.
    In(&'v audit::Attributed<'v>, usize),
}

/// A stage's audit baseline.
pub(super) enum Baseline {
    /// No job of the stage is audited.
    Off,
    Taken(audit::Snapshot),
    /// It could not be taken or read back: why.
    Broken(String),
}

/// What a round's audit found, for each attempt it settles.
pub(super) enum RoundAudit {
    /// No batch audit in this stage.
    Off,
    Compared(audit::Changes),
    Incomplete(String),
}

impl Runner<'_> {
    /// Stage `si`'s baseline where it has attempts to start or settle
    /// (`busy`); one with none needs none, and its file, if any, is only
    /// watched as okstra's own. Where the audit cannot vouch for the tree,
    /// nothing new starts in it: each attempt of `pending` settles `error`
    /// unstarted.
    pub(super) fn stage_baseline(
        &mut self,
        si: usize,
        indices: &[usize],
        busy: bool,
        pending: &mut Vec<(usize, u64)>,
    ) -> Baseline {
        if !busy {
            let path = self.abs(&baseline::path_of(self.plan, si));
            self.rec.keep_snapshot(&path);
            return Baseline::Off;
        }
        match self.stage_snapshot(si, indices) {
            Ok(None) => Baseline::Off,
            Ok(Some(s)) => Baseline::Taken(s),
            Err(why) => {
                for (i, attempt) in pending.drain(..) {
                    self.unstarted_error(i, attempt, &format!("audit/incomplete: {why}"));
                }
                Baseline::Broken(why)
            }
        }
    }

    /// The stage's baseline for the mutation audit: taken before its first
    /// round, or read back when an earlier exec took it, as
    /// [`baseline::choose`] says. `Ok(None)`: no job of the stage is
    /// audited. `Err`: the audit cannot vouch for the tree.
    fn stage_snapshot(
        &mut self,
        si: usize,
        indices: &[usize],
    ) -> Result<Option<audit::Snapshot>, String> {
        if !indices
            .iter()
            .any(|&i| self.job(i).write_enforcement.mutation_audit == MutationAudit::Batch)
        {
            return Ok(None);
        }
        let rel = baseline::path_of(self.plan, si);
        let path = self.abs(&rel);
        let recorded = self.baselines[si].as_ref().map(|r| r.sha256.as_str());
        let dispatched_before = indices.iter().any(|&i| self.histories[i].dispatched());
        match baseline::choose(recorded, || read_back(&path), dispatched_before) {
            Choice::Use(s) => {
                self.rec.keep_snapshot(&path);
                Ok(Some(s))
            }
            Choice::Fresh => self.take_baseline(si, rel, &path).map(Some),
            Choice::Incomplete(why) => {
                let e = audit::AuditError::new(
                    audit::Step::Snapshot,
                    rel,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, why),
                );
                Err(self.incomplete(&e))
            }
        }
    }

    /// Walk the tree for stage `si`'s baseline (or take the previous
    /// stage's last walk), store it at `rel` and record it: the file is
    /// synced before its record is written, and the record is durable
    /// before anything of the stage runs.
    fn take_baseline(
        &mut self,
        si: usize,
        rel: String,
        path: &Path,
    ) -> Result<audit::Snapshot, String> {
        // The previous stage's last compare walked the tree as it was when
        // that stage ended: nothing ran since, so it is this stage's
        // baseline (and anything written in between is caught here).
        let taken = match self.last_after.take() {
            Some(after) => after,
            None => {
                self.exclude_registrations();
                audit::snapshot(&self.audit_options()).map_err(|e| self.incomplete(&e))?
            }
        };
        let text = taken.to_json();
        crate::fault::point("snapshot-write");
        self.own
            .relative(path)
            .and_then(|rel| {
                self.own
                    .write_atomic(rel, &text, crate::fsutil::Durability::Fsync)
            })
            .map_err(|e| format!("cannot store the audit snapshot {}: {e}", path.display()))?;
        self.rec.keep_snapshot(path);
        // Killed here, the file has no record: the next exec never reads
        // it, and walks afresh only if nothing of the stage was dispatched.
        crate::fault::point("snapshot-record");
        let event = Event::StageSnapshotWritten(StageSnapshot {
            ts: crate::clock::now(),
            plan_digest: self.plan.digest.clone(),
            stage: self.plan.stages[si].name.clone(),
            stage_number: si + 1,
            path: rel,
            sha256: crate::canonical::sha256_hex(&text),
        });
        // Written ahead of the stage's first dispatch record, in the same
        // file: the sync that makes the dispatch durable, before any worker
        // of the stage starts, makes this durable too.
        self.rec.note(&event);
        self.rec
            .commit(Sync::None)
            .map_err(|e| format!("cannot record the audit snapshot {}: {e}", path.display()))?;
        self.tell(Notice::Recorded { event: &event });
        Ok(taken)
    }

    /// The audit could not vouch for the tree: said once as `audit/incomplete`
    /// (docs/audit.md#the-mutation-audit); what the jobs it covers settle with.
    pub(super) fn incomplete(&mut self, e: &audit::AuditError) -> String {
        self.problems.push(e.diagnostic());
        e.to_string()
    }

    pub(super) fn audit_options(&self) -> audit::SnapshotOptions<'_> {
        audit::SnapshotOptions {
            roots: &self.audit_roots,
            project_root: &self.root,
            exclude: &self.audit_exclude,
        }
    }
}

/// What is at `path`, where a stage's baseline is kept, read once: its
/// bytes' digest and the snapshot they hold. Opened as okstra's own files
/// are: a symlink or a FIFO put there is unreadable, not followed.
fn read_back(path: &Path) -> OnDisk<audit::Snapshot> {
    let file = match audit::open_own(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return OnDisk::Missing,
        Err(e) => return OnDisk::Unreadable(e.to_string()),
    };
    match audit::Snapshot::read_digested(file) {
        Ok((sha256, Ok(snapshot))) => OnDisk::Read { sha256, snapshot },
        Ok((sha256, Err(e))) => OnDisk::Unparsable {
            sha256,
            why: e.source.to_string(),
        },
        Err(e) => OnDisk::Unreadable(e.to_string()),
    }
}

/// The audit's verdict on an attempt (docs/audit.md#the-mutation-audit), and
/// the summary of its changes for the record, as `judge` says it is judged. It
/// judges after docs/exec.md#settling-an-attempt: a non-zero exit rescued by
/// the audit-sidecar contract is a success whose writes are its own. okstra's
/// own files changed by someone else (`own`) fail every attempt the audit could
/// judge.
pub(super) fn audit_of(facts: &Facts, judge: Judge, own: &[String]) -> (Audit, Option<Value>) {
    let (audit, summary) = match judge {
        Judge::Off => (Audit::None, None),
        Judge::Incomplete(why) => (Audit::Incomplete(why), None),
        Judge::In(view, k) => {
            // An attempt cut short through no fault of its own (exec
            // interrupted or died) answers for writes outside its policy
            // only: its partial work is its own, and the next attempt
            // takes it over.
            let before = decide::decide(facts);
            let succeeded = before.status == Status::Completed || before.resumable;
            let verdict = audit::judge_in(view, k, succeeded, facts.missing.is_empty());
            let audit = Audit::Judged {
                status: verdict.status,
                violations: verdict.violations.clone(),
                retry_allowed: verdict.retry_allowed,
            };
            (audit, Some(verdict.change_summary()))
        }
    };
    if own.is_empty() || matches!(audit, Audit::Incomplete(_)) {
        return (audit, summary);
    }
    let failed = Audit::Judged {
        status: audit::Outcome::ContractFailedUnattributed,
        violations: own.to_vec(),
        retry_allowed: false,
    };
    (failed, summary)
}

/// What every audit walk of the run covers and leaves out: the project root
/// and every worktree outside it, minus okstra's own files (which are
/// checked against what exec wrote instead); and whether any job runs in a
/// git worktree of its own (found on the same pass over the jobs).
pub(super) fn audit_walk(
    root: &Path,
    plan: &Plan,
    jobs: &Jobs,
    rec: &Recorder,
) -> (Vec<PathBuf>, Vec<PathBuf>, bool) {
    let abs = |p: &str| paths::abs_of(root, p);
    let mut git_worktrees = false;
    // Each implementer may have a worktree of its own outside the project:
    // a set keeps the check linear in the number of jobs.
    let mut roots = vec![root.to_path_buf()];
    let mut outside = HashSet::new();
    for (_, job) in jobs.each() {
        git_worktrees |= job.git_worktree.is_some();
        if let Some(w) = &job.worktree_path {
            let w = abs(w);
            if !w.starts_with(root) && outside.insert(w.clone()) {
                roots.push(w);
            }
        }
    }
    let store = rec.store();
    let team = store.path().to_path_buf();
    let events = abs(&plan.run.lead_events_path);
    let mut exclude = vec![
        abs(&plan.run.manifest_path),
        store.lock_path(),
        store.exec_lock_path(),
        events.clone(),
        abs(&plan.run.error_log_path),
        team.parent()
            .map(Path::to_path_buf)
            .unwrap_or_default()
            .join("snapshots"),
        team,
    ];
    if let (Some(dir), Some(name)) = (events.parent(), events.file_name()) {
        exclude.push(dir.join(format!(".{}.lock", name.to_string_lossy())));
    }
    (roots, exclude, git_worktrees)
}
