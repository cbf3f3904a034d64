//! The git worktrees of `worktree = "git"` jobs (docs/worktrees.md#running):
//! made, or adopted and repaired, before their stage's audit baseline;
//! committed to, or kept, as each attempt settles, before its settlement is
//! recorded; removed (where the job asked) only once the stage's records
//! are durable.
//!
//! Every git command goes through [`crate::worktree`], which names the
//! worktree's own git directory and never writes the user's checkout,
//! index or `HEAD`. A branch, kept attempt or worktree change that this
//! plan did not make is never overwritten: the job settles `exec/worktree`.

use super::{Ended, Runner};
use crate::audit::Outcome as AuditOutcome;
use crate::diag::{Code, Diagnostic};
use crate::exec::decide::{Audit, Decision, End, Status};
use crate::exec::event::WorktreeUse;
use crate::exec::settle::StatusReport;
use crate::plan::{GitWorktree, Job};
use crate::state::WorkerStatus;
use crate::vocab::FailureKind;
use crate::worktree::{message_with_trailers, GitError, Repo, Worktree};
use std::collections::HashMap;
use std::path::PathBuf;

/// What to do about a git failure, in the job's reason and the report.
const HELP: &str = "see docs/worktrees.md#crashes-and-resume; `git worktree list` and `git branch --list 'okstra*'` show what okstra made";

/// Why a job's worktree could not be made, committed, kept or removed.
#[derive(Debug, thiserror::Error)]
pub(super) enum TreeError {
    #[error(transparent)]
    Git(#[from] GitError),
    /// The repository could not be found when exec started (why).
    #[error("{0}")]
    NoRepository(String),
    /// Work okstra did not make in this run where it would write.
    #[error("{what}: another run's work, which okstra never overwrites; {fix}, then exec again")]
    Foreign { what: String, fix: String },
    /// okstra's own file beside the worktrees.
    #[error("cannot write {}: {source}", path.display())]
    Own {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The repository and the worktrees this exec made or adopted.
#[derive(Default)]
pub(super) struct Trees {
    /// Found at the first worktree job; why not, where it could not be.
    /// (A message: the error is told once per job it stops.)
    repo: Option<Result<Repo, String>>,
    /// By job index.
    made: HashMap<usize, Worktree>,
    /// How much of the runner's audit exclusions are its own (the rest,
    /// after them, are the worktrees' registrations as last found).
    pub(super) fixed_exclusions: usize,
}

impl Trees {
    /// The repository of a plan with worktree jobs, found once, and what
    /// the audit must leave out of its walks: okstra's own branches, which
    /// exec moves between compares.
    pub(super) fn open(root: &std::path::Path, any: bool) -> (Trees, Vec<PathBuf>) {
        if !any {
            return (Trees::default(), Vec::new());
        }
        let repo = match Repo::find(root) {
            Ok(Some(repo)) => Ok(repo),
            Ok(None) => Err(format!(
                "{} is not in a git repository any more",
                root.display()
            )),
            Err(e) => Err(e.to_string()),
        };
        let exclude = match &repo {
            Ok(r) => ["okstra", "okstra-attempts"]
                .iter()
                .map(|b| r.common_dir().join("refs/heads").join(b))
                .collect(),
            Err(_) => Vec::new(),
        };
        let trees = Trees {
            repo: Some(repo),
            made: HashMap::new(),
            fixed_exclusions: 0,
        };
        (trees, exclude)
    }

    fn repo(&self) -> Result<&Repo, TreeError> {
        match &self.repo {
            Some(Ok(repo)) => Ok(repo),
            Some(Err(why)) => Err(TreeError::NoRepository(why.clone())),
            None => Err(TreeError::NoRepository(
                "the plan has no worktree job".into(),
            )),
        }
    }
}

/// `okstra-attempts/<taskKey>/<state key>`: where the attempts of the job on
/// `branch` (`okstra/<taskKey>/<state key>`) are kept.
fn attempts_prefix(g: &GitWorktree) -> String {
    let rest = g.branch.strip_prefix("okstra/").unwrap_or(&g.branch);
    format!("okstra-attempts/{rest}")
}

/// The branch attempt `n` is kept on.
fn kept_branch(g: &GitWorktree, n: u64) -> String {
    format!("{}/{n}", attempts_prefix(g))
}

/// The `Okstra-Dispatch-Id` of attempt `n`: its dispatch id, or for a job
/// without invocation metadata one made of the plan digest, state key and
/// attempt, unique the same way.
pub(super) fn commit_dispatch_id(job: &Job, n: u64, plan_digest: &str) -> String {
    job.dispatch_id_for(n).unwrap_or_else(|| {
        let digest = plan_digest.strip_prefix("sha256:").unwrap_or(plan_digest);
        format!(
            "{}/{}/attempt-{n}",
            &digest[..digest.len().min(16)],
            job.key
        )
    })
}

/// `Okstra-Usage`: what the attempt spent, as its CLI reported it.
fn usage_text(report: &StatusReport) -> String {
    match &report.usage {
        None => "not reported".into(),
        Some(u) => {
            let mut text = format!(
                "input={} output={} total={}",
                u.input_tokens, u.output_tokens, u.total_tokens
            );
            if let Some(cost) = u.cost_usd {
                text.push_str(&format!(" costUsd={cost:.6}"));
            }
            text
        }
    }
}

impl Runner<'_> {
    /// Leave the registrations of okstra's worktrees
    /// (`<common>/worktrees/<id>` whose `gitdir` lies under
    /// `.okstra/worktrees/`) out of the next audit walk, as they are now:
    /// exec makes and removes them, on resume too, after a stage's
    /// baseline may have been recorded (docs/worktrees.md#running). A
    /// worker's own changes there are caught where they matter: exec
    /// commits only on the worktree's branch, through its own git
    /// directory, and a registration turned to name another directory is
    /// one the walk then sees go.
    pub(super) fn exclude_registrations(&mut self) {
        let Ok(repo) = self.trees.repo() else {
            return;
        };
        let regs = repo.registrations_below(&self.root.join(".okstra/worktrees"));
        self.audit_exclude.truncate(self.trees.fixed_exclusions);
        self.audit_exclude.extend(regs);
    }

    /// Make the worktree of every worktree job of `pending` ready for the
    /// attempt it starts next, and adopt those of `in_flight` (attempts an
    /// earlier exec started): before the stage's baseline, so the checkout
    /// is in it and only the workers' edits differ. A job whose worktree
    /// cannot be made, or holds another run's work, settles `error`
    /// unstarted and leaves `pending`.
    pub(super) fn prepare_worktrees(
        &mut self,
        pending: &mut Vec<(usize, u64)>,
        in_flight: &[usize],
    ) {
        let mut refused = Vec::new();
        let mut any = false;
        for &(i, attempt) in pending.iter() {
            let job = self.job(i);
            let Some(g) = &job.git_worktree else {
                continue;
            };
            any = true;
            let made = if self.histories[i].dispatched() {
                self.fresh_for(&job, g, attempt)
            } else {
                self.first_for(&job, g)
            };
            match made {
                Ok(wt) => {
                    self.trees.made.insert(i, wt);
                }
                Err(why) => refused.push((i, attempt, why)),
            }
        }
        for &i in in_flight {
            let job = self.job(i);
            let Some(g) = &job.git_worktree else {
                continue;
            };
            any = true;
            // A failure here is the settlement's to report: it cannot
            // commit or keep without the worktree either.
            if let Ok(wt) = self.adopt(&job, g) {
                self.trees.made.insert(i, wt);
            }
        }
        if any {
            // The previous stage's last walk does not hold the worktrees.
            self.last_after = None;
        }
        pending.retain(|(i, _)| !refused.iter().any(|(r, _, _)| r == i));
        for (i, attempt, why) in refused {
            // A Ctrl-C reaches the git exec runs too: what it cut short is
            // the interruption's, repaired by the next exec.
            if self.interrupt.load(std::sync::atomic::Ordering::Relaxed) {
                self.interrupted = true;
                self.not_run(i, super::INTERRUPTED_BEFORE_START);
                continue;
            }
            let job = self.job(i);
            let reason = format!("exec/worktree: {why}");
            self.say(format!("{} not started: {reason}", job.label()));
            self.problems.push(
                Diagnostic::new(Code::ExecWorktree, format!("{}: {why}", job.label())).help(HELP),
            );
            self.unstarted_error(i, attempt, &reason);
        }
    }

    fn tree_path(&self, job: &Job) -> PathBuf {
        self.abs(job.worktree_path.as_deref().unwrap_or_default())
    }

    /// The worktree of a job no attempt of this plan has run in: made at
    /// the base, unless its branch, its kept attempts or the worktree there
    /// already hold work, which is an earlier run's and never overwritten.
    fn first_for(&mut self, job: &Job, g: &GitWorktree) -> Result<Worktree, TreeError> {
        self.ignore_worktrees_dir()?;
        let repo = self.trees.repo()?;
        let path = self.tree_path(job);
        if let Some(tip) = repo.branch_tip(&g.branch)? {
            if tip != g.base {
                return Err(TreeError::Foreign {
                    what: format!(
                        "branch {} already points at {}, not at the planned base {}",
                        g.branch,
                        short(&tip),
                        short(&g.base)
                    ),
                    fix: format!(
                        "rename it (git branch -m {} <new name>) or delete it",
                        g.branch
                    ),
                });
            }
        }
        let kept = repo.branches_under(&attempts_prefix(g))?;
        if !kept.is_empty() {
            return Err(TreeError::Foreign {
                what: format!(
                    "{} holds attempts ({})",
                    attempts_prefix(g),
                    kept.join(", ")
                ),
                fix: format!(
                    "delete them (git branch -D {}) or keep them under another name",
                    kept.join(" ")
                ),
            });
        }
        if std::fs::symlink_metadata(&path).is_ok() {
            let wt = repo.prepare_worktree(&path, &g.branch, &g.base, false)?;
            let changes = repo.changes_in(&wt)?;
            if !changes.is_empty() {
                return Err(TreeError::Foreign {
                    what: format!(
                        "the worktree {} holds changes ({})",
                        path.display(),
                        listed(&changes)
                    ),
                    fix: format!(
                        "commit them elsewhere or remove it (git worktree remove --force {})",
                        path.display()
                    ),
                });
            }
        }
        Ok(repo.prepare_worktree(&path, &g.branch, &g.base, true)?)
    }

    /// The worktree for attempt `attempt` of a job an earlier attempt ran
    /// in: what the attempt before it left is kept first (again, where an
    /// exec died before it was recorded: keeping is idempotent), then the
    /// worktree goes back to the base.
    fn fresh_for(
        &mut self,
        job: &Job,
        g: &GitWorktree,
        attempt: u64,
    ) -> Result<Worktree, TreeError> {
        let wt = self.adopt(job, g)?;
        let repo = self.trees.repo()?;
        if attempt > job.first_attempt() {
            let message = self.kept_message(job, attempt - 1);
            repo.keep_attempt(&wt, &g.base, &kept_branch(g, attempt - 1), &message)?;
        }
        Ok(repo.prepare_worktree(wt.path(), &g.branch, &g.base, true)?)
    }

    /// The worktree as an earlier attempt left it (repaired where a killed
    /// git left it half-made or locked).
    fn adopt(&mut self, job: &Job, g: &GitWorktree) -> Result<Worktree, TreeError> {
        self.ignore_worktrees_dir()?;
        let path = self.tree_path(job);
        Ok(self
            .trees
            .repo()?
            .prepare_worktree(&path, &g.branch, &g.base, false)?)
    }

    /// `.okstra/worktrees/.gitignore` ignoring everything: the worktrees
    /// never show in the user's `git status`, nor go into a `git add -A`
    /// of the checkout, whatever the project's own ignore files say.
    fn ignore_worktrees_dir(&mut self) -> Result<(), TreeError> {
        let path = self.abs(".okstra/worktrees/.gitignore");
        if path.is_file() {
            return Ok(());
        }
        self.own
            .relative(&path)
            .and_then(|rel| {
                if let Some(dir) = rel.parent() {
                    self.own.create_dir_all(dir)?;
                }
                self.own
                    .write_atomic(rel, b"*\n", crate::fsutil::Durability::NoFsync)
            })
            .map_err(|e| TreeError::Own {
                path,
                source: e.into(),
            })
    }

    /// The job's worktree for settling attempt `e`: as made, else adopted.
    fn settling_tree(
        &mut self,
        i: usize,
        job: &Job,
        g: &GitWorktree,
    ) -> Result<Worktree, TreeError> {
        if let Some(wt) = self.trees.made.get(&i) {
            return Ok(wt.clone());
        }
        let wt = self.adopt(job, g)?;
        self.trees.made.insert(i, wt.clone());
        Ok(wt)
    }

    /// What becomes of an ended attempt's worktree, before its settlement
    /// is recorded: a `completed` attempt's changes committed to the job's
    /// branch (or the commit an exec that died before recording it made,
    /// found by its dispatch id); another's kept on
    /// `okstra-attempts/.../<N>`, the worktree back at the base for the
    /// attempt that follows. A git failure turns the decision into an
    /// `exec/worktree` error, not retried.
    pub(super) fn settle_worktree(
        &mut self,
        job: &Job,
        e: &Ended,
        d: &mut Decision,
        report: &StatusReport,
    ) -> Option<WorktreeUse> {
        let g = job.git_worktree.as_ref()?;
        let attempt = e.dispatched.head.attempt;
        let mut used = self.worktree_use(job)?;
        let follows =
            d.retry || (d.resumable && !self.interrupted && matches!(e.end, End::Lost(_)));
        crate::fault::point("worktree-settle");
        let done = self.settling_tree(e.job, job, g).and_then(|wt| {
            if d.status == Status::Completed {
                used.commit = self.commit(job, g, &wt, attempt, report)?;
            } else {
                let kept = self.keep(job, g, &wt, attempt)?;
                if kept.is_some() {
                    used.kept_branch = Some(kept_branch(g, attempt));
                    used.kept_commit = kept;
                }
                if follows {
                    let repo = self.trees.repo()?;
                    repo.prepare_worktree(wt.path(), &g.branch, &g.base, true)?;
                }
            }
            Ok(())
        });
        if let Err(why) = done {
            // A Ctrl-C reaches the git exec runs too: the attempt is the
            // interruption's, resumed by the next exec, whose start keeps
            // what it left (docs/worktrees.md#crashes-and-resume).
            if self.interrupt.load(std::sync::atomic::Ordering::Relaxed) {
                self.interrupted = true;
                d.status = Status::Error;
                d.reason = format!("interrupted while settling its worktree: {why}");
                d.failure_kind = Some(FailureKind::Interrupted);
                d.retry = false;
                d.resumable = true;
                return Some(used);
            }
            self.problems.push(
                Diagnostic::new(Code::ExecWorktree, format!("{}: {why}", job.label())).help(HELP),
            );
            d.status = Status::Error;
            d.reason = format!("exec/worktree: {why}");
            d.failure_kind = Some(FailureKind::Worktree);
            d.retry = false;
            d.resumable = false;
            d.log_error = true;
        }
        Some(used)
    }

    /// The commit of a completed attempt: the one already on the branch
    /// with its dispatch id, else a new one of everything it changed; None
    /// where it changed nothing.
    fn commit(
        &self,
        job: &Job,
        g: &GitWorktree,
        wt: &Worktree,
        attempt: u64,
        report: &StatusReport,
    ) -> Result<Option<String>, TreeError> {
        let repo = self.trees.repo()?;
        let id = commit_dispatch_id(job, attempt, &self.plan.digest);
        if let Some(sha) = repo.find_by_trailer(&g.branch, &g.base, &id)? {
            return Ok(Some(sha));
        }
        let model = report
            .served_model
            .clone()
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| match job.model_execution_value.as_str() {
                "" => job.provider.as_str().to_string(),
                m => m.to_string(),
            });
        let usage = usage_text(report);
        let message = message_with_trailers(
            &format!("okstra: {} (attempt {attempt})", job.label()),
            &[
                ("Okstra-Task", &self.plan.run.task_key),
                ("Okstra-Plan-Digest", &self.plan.digest),
                ("Okstra-Dispatch-Id", &id),
                ("Okstra-Model", &model),
                ("Okstra-Usage", &usage),
            ],
        );
        crate::fault::point("worktree-commit");
        Ok(repo.commit_all(wt, &message)?)
    }

    /// Keep what attempt `attempt` left; the kept commit (made now, or by an
    /// exec that died before recording it).
    fn keep(
        &self,
        job: &Job,
        g: &GitWorktree,
        wt: &Worktree,
        attempt: u64,
    ) -> Result<Option<String>, TreeError> {
        let repo = self.trees.repo()?;
        let branch = kept_branch(g, attempt);
        let message = self.kept_message(job, attempt);
        match repo.keep_attempt(wt, &g.base, &branch, &message)? {
            Some(sha) => Ok(Some(sha)),
            None => Ok(repo.branch_tip(&branch)?),
        }
    }

    fn kept_message(&self, job: &Job, attempt: u64) -> String {
        let id = commit_dispatch_id(job, attempt, &self.plan.digest);
        message_with_trailers(
            &format!(
                "okstra: {} attempt {attempt}, kept (did not complete)",
                job.label()
            ),
            &[
                ("Okstra-Task", &self.plan.run.task_key),
                ("Okstra-Plan-Digest", &self.plan.digest),
                ("Okstra-Dispatch-Id", &id),
            ],
        )
    }

    /// The recorded worktree of an attempt about to start.
    pub(super) fn worktree_use(&self, job: &Job) -> Option<WorktreeUse> {
        let g = job.git_worktree.as_ref()?;
        Some(WorktreeUse {
            path: job.worktree_path.clone().unwrap_or_default(),
            branch: g.branch.clone(),
            base: g.base.clone(),
            commit: None,
            kept_branch: None,
            kept_commit: None,
        })
    }

    /// Once the stage's records are durable and every job of it completed:
    /// remove the worktree of each that asked (`worktreeKeep = false`); its
    /// commit is in the events log, and its branch keeps it. A stage that
    /// did not complete keeps them: the exec that runs its other jobs again
    /// judges them against the stage's recorded baseline, which holds the
    /// worktrees' registrations (their removal would be a change no job
    /// made).
    pub(super) fn remove_committed_worktrees(&mut self, indices: &[usize]) {
        let all_completed = indices.iter().all(|&i| {
            self.reports[i]
                .as_ref()
                .is_some_and(|r| r.status == WorkerStatus::Completed)
        });
        if !all_completed {
            return;
        }
        let mut removed = false;
        for &i in indices {
            let job = self.job(i);
            let Some(g) = job.git_worktree.as_ref().filter(|g| !g.keep) else {
                continue;
            };
            let completed = self.reports[i]
                .as_ref()
                .is_some_and(|r| r.status == WorkerStatus::Completed);
            if !completed {
                continue;
            }
            let path = self.tree_path(&job);
            // Its directory may be gone and its registration not (a kill
            // inside `git worktree remove`).
            let left = self.trees.repo().is_ok_and(|r| r.worktree_left_at(&path));
            if !left {
                continue;
            }
            let gone = self
                .trees
                .repo()
                .and_then(|r| Ok(r.remove_worktree_at(&path, &g.branch)?));
            removed = true;
            self.trees.made.remove(&i);
            if let Err(why) = gone {
                self.problems.push(
                    Diagnostic::new(
                        Code::ExecWorktree,
                        format!("{}: cannot remove its worktree: {why}", job.label()),
                    )
                    .help(HELP),
                );
            }
        }
        if removed {
            self.last_after = None;
        }
    }
}

/// A failed attempt's own changes all inside its worktree are not left
/// in the tree: exec keeps them on `okstra-attempts/...` and puts the
/// worktree back at the base before anything follows
/// (`Runner::settle_worktree`), so they do not stand in the way of a
/// retry as a mutation left in the checkout would
/// (docs/worktrees.md#running). Any other verdict stands.
pub(super) fn resolved_in_worktree(job: &Job, audit: Audit) -> Audit {
    let (Some(_), Some(wt)) = (&job.git_worktree, &job.worktree_path) else {
        return audit;
    };
    let inside = |p: &String| p.starts_with(&format!("{wt}/"));
    match audit {
        Audit::Judged {
            status: AuditOutcome::MutationPresentUnresolved,
            violations,
            ..
        } if violations.iter().all(inside) => Audit::Judged {
            status: AuditOutcome::FailedNoMutation,
            violations: Vec::new(),
            retry_allowed: true,
        },
        other => other,
    }
}

/// The first 12 hex digits of a sha.
fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Up to five paths, then how many more.
fn listed(paths: &[String]) -> String {
    let mut text = paths.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if paths.len() > 5 {
        text.push_str(&format!(" and {} more", paths.len() - 5));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(dispatch: bool) -> Job {
        let mut j = json!({
            "key": "w", "identity": {"version": "1", "workerId": "w"}, "provider": "command",
            "backend": "cli-wrapper", "role": "implementer", "dispatchKind": "initial", "round": 1,
            "promptPath": "p.md", "resultPath": "r.md", "workerResultPath": "r.md",
            "completionPaths": ["r.md"], "worktreePath": ".okstra/worktrees/t/w",
            "gitWorktree": {"base": "a".repeat(40), "baseFrom": "head", "branch": "okstra/t/w", "keep": true},
            "command": [], "providerCommand": [], "takesSessionId": false,
            "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
            "writePolicy": {"role": "implementer", "allow": [], "digest": ""},
            "writeEnforcement": {"mutationAudit": "batch"}
        });
        if dispatch {
            j["invocation"] = json!({"invocationId": "inv-1", "audience": "a", "assignmentRef": "x/w", "digests": {}});
        }
        serde_json::from_value(j).unwrap()
    }

    #[test]
    fn the_commit_dispatch_id_is_the_dispatch_id_else_plan_key_and_attempt() {
        assert_eq!(
            commit_dispatch_id(&job(true), 2, "sha256:x"),
            "inv-1:attempt-2"
        );
        let digest = format!("sha256:{}", "0123456789abcdef".repeat(4));
        assert_eq!(
            commit_dispatch_id(&job(false), 2, &digest),
            "0123456789abcdef/w/attempt-2"
        );
    }

    #[test]
    fn usage_is_told_in_tokens_and_dollars_where_reported() {
        let mut report = StatusReport::default();
        assert_eq!(usage_text(&report), "not reported");
        report.usage = Some(crate::provider::Usage {
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            cost_usd: Some(0.25),
            ..Default::default()
        });
        assert_eq!(
            usage_text(&report),
            "input=10 output=5 total=15 costUsd=0.250000"
        );
    }

    #[test]
    fn only_a_failed_attempts_changes_inside_its_own_worktree_are_resolved() {
        let unresolved = |paths: &[&str]| Audit::Judged {
            status: AuditOutcome::MutationPresentUnresolved,
            violations: paths.iter().map(|p| p.to_string()).collect(),
            retry_allowed: false,
        };
        let inside = unresolved(&[
            ".okstra/worktrees/t/w/src/a.rs",
            ".okstra/worktrees/t/w/new",
        ]);
        assert_eq!(
            resolved_in_worktree(&job(false), inside.clone()),
            Audit::Judged {
                status: AuditOutcome::FailedNoMutation,
                violations: vec![],
                retry_allowed: true
            }
        );
        // One change outside it (a sibling worktree named alike, the
        // checkout) and the verdict stands.
        for outside in [".okstra/worktrees/t/w2/a", "src/a.rs"] {
            let mixed = unresolved(&[".okstra/worktrees/t/w/a", outside]);
            assert_eq!(resolved_in_worktree(&job(false), mixed.clone()), mixed);
        }
        let unattributed = Audit::Judged {
            status: AuditOutcome::ContractFailedUnattributed,
            violations: vec![".okstra/worktrees/t/w/a".into()],
            retry_allowed: false,
        };
        assert_eq!(
            resolved_in_worktree(&job(false), unattributed.clone()),
            unattributed
        );
        // A job without a git worktree: as judged.
        let mut plain = job(false);
        plain.git_worktree = None;
        assert_eq!(resolved_in_worktree(&plain, inside.clone()), inside);
    }

    fn g() -> GitWorktree {
        GitWorktree {
            base: "a".repeat(40),
            base_from: "head".into(),
            branch: "okstra/task-1/w".into(),
            keep: true,
        }
    }

    #[test]
    fn attempts_are_kept_beside_the_branch_not_below_it() {
        assert_eq!(kept_branch(&g(), 2), "okstra-attempts/task-1/w/2");
        assert!(crate::worktree::branch_name_ok(&kept_branch(&g(), 2)));
    }

    #[test]
    fn paths_are_listed_five_at_most() {
        let paths: Vec<String> = (0..7).map(|n| format!("f{n}")).collect();
        assert_eq!(listed(&paths[..2]), "f0, f1");
        assert_eq!(listed(&paths), "f0, f1, f2, f3, f4 and 2 more");
    }
}
