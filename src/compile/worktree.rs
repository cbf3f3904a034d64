//! Planning `worktree = "git"` (docs/worktrees.md#planning): where a job's
//! worktree and branch are, the base commit it starts from, and the one
//! dirty-tree check of a run.
//!
//! Git is asked once per run, never once per job: the repository when the
//! first job asks for a worktree, each distinct `worktreeBase` once, and
//! the checkout's changes once after every job is built. A run without
//! such a job runs no git at all.

use super::{with_worker, Ctx, Entry, RunFacts};
use crate::diag::{Code, Diagnostic};
use crate::paths;
use crate::plan::{GitWorktree, Job, Stage};
use crate::source::SourceFile;
use crate::worktree::{branch_name_ok, ref_component, Repo};
use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// `worktreeBase` when the entry names none.
pub const HEAD: &str = "head";
/// `worktreeBase = "index"`: what is staged, as a commit on `HEAD`.
pub const INDEX: &str = "index";

/// How many dirty paths `plan/dirty-tree` names before "and N more".
const SHOWN_DIRTY: usize = 10;

/// What git said once for the whole run (held by [`RunFacts`]).
#[derive(Default)]
pub struct GitFacts {
    /// The project's repository, or why there is none.
    repo: OnceCell<Result<Repo, Why>>,
    /// Each distinct `worktreeBase`, resolved to a full sha or refused.
    bases: RefCell<HashMap<String, Result<String, Why>>>,
    /// The causes reported so far: each is reported once.
    reported: RefCell<HashSet<String>>,
    /// Where `plan/dirty-tree` points: the first job based on `HEAD`.
    first_head: RefCell<Option<Box<Diagnostic>>>,
}

/// A refusal: its message and help.
#[derive(Clone)]
struct Why {
    message: String,
    help: &'static str,
}

/// The worktree of job `key` of run `task_key`, project-relative.
pub fn worktree_path(task_key: &str, key: &str) -> String {
    format!(
        "{}/worktrees/{}/{}",
        crate::policy::LEADER_ROOT,
        ref_component(task_key),
        ref_component(key)
    )
}

/// The branch of job `key` of run `task_key`.
pub fn branch(task_key: &str, key: &str) -> String {
    format!("okstra/{}/{}", ref_component(task_key), ref_component(key))
}

/// The planned paths a job's write policy is given: for a git-worktree job
/// none inside the project (they would grant writes to the user's
/// checkout; its worktree is granted instead), else all of them.
pub fn granted_planned(git_worktree: bool, planned: Vec<String>) -> Vec<String> {
    if !git_worktree {
        return planned;
    }
    planned
        .into_iter()
        .filter(|p| Path::new(p).is_absolute())
        .collect()
}

/// `schema/violation` for the worktree keys an entry may not combine:
/// `worktree = "git"` with `worktreePath`, or `worktreeBase` /
/// `worktreeKeep` without `worktree = "git"`. `false` when refused.
pub fn check_keys(ctx: &mut Ctx, src: &SourceFile, entry: &Entry) -> bool {
    let f = &entry.fields;
    let mut ok = true;
    if f.git_worktree() && f.worktree_path.is_some() {
        let d = ctx
            .at(
                src,
                Code::SchemaViolation,
                "`worktreePath` names a worktree of your own, and `worktree = \"git\"` asks okstra to make one: a worker has one or the other",
                &entry.ptr("worktreePath"),
            )
            .help("drop `worktreePath` (okstra makes .okstra/worktrees/<taskKey>/<state key>), or drop `worktree = \"git\"`");
        ctx.push(with_worker(d, entry));
        ok = false;
    }
    // A `worktree` of another word is the schema's to report.
    if f.worktree.is_none() {
        for (key, present) in [
            ("worktreeBase", f.worktree_base.is_some()),
            ("worktreeKeep", f.worktree_keep.is_some()),
        ] {
            if present {
                let d = ctx
                    .at(
                        src,
                        Code::SchemaViolation,
                        format!("`{key}` is about the git worktree okstra makes for a worker, and this worker has none (no `worktree = \"git\"`)"),
                        &entry.ptr(key),
                    )
                    .help("add worktree = \"git\", or drop the key");
                ctx.push(with_worker(d, entry));
                ok = false;
            }
        }
    }
    ok
}

/// The git worktree of the job `key` an entry asking for one makes: its
/// path (project-relative) and record. `None` when refused (reported at
/// the entry's `worktree`, or its `worktreeBase`).
fn plan_job(
    ctx: &mut Ctx,
    run: &RunFacts,
    src: &SourceFile,
    entry: &Entry,
    key: &str,
) -> Option<(String, GitWorktree)> {
    let f = &entry.fields;
    let facts = &run.git;
    let base_from = f.worktree_base.clone().unwrap_or_else(|| HEAD.to_string());
    let repo = match facts.repo.get_or_init(|| find_repo(&ctx.root)) {
        Ok(repo) => repo,
        Err(why) => {
            report(ctx, facts, src, entry, "repository", why, "worktree");
            return None;
        }
    };
    let base = facts
        .bases
        .borrow_mut()
        .entry(base_from.clone())
        .or_insert_with(|| resolve_base(repo, &base_from))
        .clone();
    let base = match base {
        Ok(sha) => sha,
        Err(why) => {
            let at = if f.worktree_base.is_some() {
                "worktreeBase"
            } else {
                "worktree"
            };
            report(
                ctx,
                facts,
                src,
                entry,
                &format!("base {base_from}"),
                &why,
                at,
            );
            return None;
        }
    };
    let task_key = &run.info.task_key;
    let branch = branch(task_key, key);
    if !branch_name_ok(&branch) {
        let why = Why {
            message: format!(
                "the branch `{branch}` made of the task key and state key is not one git accepts"
            ),
            help: "rename the task key or the worker's state key",
        };
        report(ctx, facts, src, entry, &branch, &why, "worktree");
        return None;
    }
    if base_from == HEAD {
        let mut first = facts.first_head.borrow_mut();
        if first.is_none() {
            let d = ctx.at(src, Code::PlanDirtyTree, "", &entry.ptr("worktree"));
            *first = Some(Box::new(with_worker(d, entry)));
        }
    }
    let record = GitWorktree {
        base,
        base_from,
        branch,
        keep: f.worktree_keep.unwrap_or(true),
    };
    Some((worktree_path(task_key, key), record))
}

/// Step 2 of `build_job` for `worktree = "git"`: the keys that may go
/// with it, and the worktree's path and record (`Some(None)`: the entry
/// asks for none; `None`: refused, reported).
pub fn plan_entry(
    ctx: &mut Ctx,
    run: &RunFacts,
    src: &SourceFile,
    entry: &Entry,
    key: &str,
) -> Option<Option<(String, GitWorktree)>> {
    if !check_keys(ctx, src, entry) {
        return None;
    }
    if !entry.fields.git_worktree() {
        return Some(None);
    }
    plan_job(ctx, run, src, entry, key).map(Some)
}

/// The directories a git-worktree job's CLI must be allowed to write, its
/// working directory being its worktree: the worktree, the directories of
/// its result, worker result and completion files (in the project), and
/// its auxiliary roots.
pub fn write_dirs(root: &Path, job: &Job, aux: &[String]) -> Vec<PathBuf> {
    let worktree = job.worktree_path.as_deref().map(|w| paths::abs_of(root, w));
    let files = [&job.result_path, &job.worker_result_path]
        .into_iter()
        .chain(&job.completion_paths);
    let parents = files.filter_map(|f| paths::abs_of(root, f).parent().map(Path::to_path_buf));
    let mut dirs: Vec<PathBuf> = Vec::new();
    let aux = aux.iter().map(|a| paths::abs_of(root, a));
    for d in worktree.into_iter().chain(parents).chain(aux) {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// `plan/worktree-base` at the entry's `key`, once per `cause`.
fn report(
    ctx: &mut Ctx,
    facts: &GitFacts,
    src: &SourceFile,
    entry: &Entry,
    cause: &str,
    why: &Why,
    key: &str,
) {
    if !facts.reported.borrow_mut().insert(cause.to_string()) {
        return;
    }
    let d = ctx
        .at(
            src,
            Code::PlanWorktreeBase,
            why.message.clone(),
            &entry.ptr(key),
        )
        .help(why.help);
    ctx.push(with_worker(d, entry));
}

fn find_repo(root: &Path) -> Result<Repo, Why> {
    match Repo::find(root) {
        Ok(Some(repo)) => Ok(repo),
        Ok(None) => Err(Why {
            message: format!(
                "`worktree = \"git\"` needs a git repository, and the project root {} is in none",
                root.display()
            ),
            help: "run okstra in a git repository (`git init`, then commit), or drop `worktree = \"git\"`",
        }),
        Err(e) => Err(Why {
            message: format!("`worktree = \"git\"` needs git: {e}"),
            help: "install git (2.36 or later; `okstra doctor` checks it), or drop `worktree = \"git\"`",
        }),
    }
}

/// The full sha `worktreeBase = value` names.
fn resolve_base(repo: &Repo, value: &str) -> Result<String, Why> {
    let top = repo.top().display();
    match value {
        HEAD => repo.head().map_err(|e| Why {
            message: format!("`HEAD` of the repository {top} names no commit ({e})"),
            help: "commit something first, or set worktreeBase to a commit",
        }),
        INDEX => repo.index_commit().map_err(|e| Why {
            message: format!("cannot make a commit of the index of the repository {top} ({e})"),
            help: "commit something first (the index commit's parent is `HEAD`), or set worktreeBase = \"head\" or a commit",
        }),
        rev => repo.resolve_commit(rev).map_err(|_| Why {
            message: format!("`worktreeBase = \"{rev}\"` names no commit of the repository {top}"),
            help: "name a branch, tag or sha of the repository (`git log --oneline`), or \"head\" or \"index\"",
        }),
    }
}

/// `plan/dirty-tree`: once every job is built, where one is based on
/// `HEAD`, the checkout's changes `HEAD` does not hold (one `git status`),
/// less okstra's own files: `.okstra/`, the plan being written (`plan_out`),
/// the plan's inputs, the run's records (and the plans `okstra run` keeps
/// beside them) and every job's results and sidecars.
pub fn check_dirty(ctx: &mut Ctx, run: &RunFacts, stages: &[Stage], plan_out: Option<&Path>) {
    let Some(anchor) = run.git.first_head.borrow_mut().take() else {
        return;
    };
    let Some(Ok(repo)) = run.git.repo.get() else {
        return;
    };
    let root = ctx.root.clone();
    let Some(within) = Within::new(repo, &root) else {
        return;
    };
    let mut dirs = vec![within.project(crate::policy::LEADER_ROOT)];
    let mut files: HashSet<String> = HashSet::new();
    let info = &run.info;
    for p in [
        &info.manifest_path,
        &info.team_state_path,
        &info.lead_events_path,
        &info.error_log_path,
    ] {
        files.extend(within.display(p));
    }
    if let Some(parent) = Path::new(&info.team_state_path)
        .parent()
        .filter(|_| !info.team_state_path.is_empty())
    {
        dirs.extend(within.display(&paths::path_text(&parent.join("plans"))));
    }
    files.extend(ctx.inputs.keys().filter_map(|(_, p)| within.display(p)));
    if let Some(out) = plan_out {
        files.extend(within.abs(out));
    }
    for job in stages.iter().flat_map(|s| &s.jobs) {
        files.extend(job_files(job).filter_map(|p| within.display(&p)));
    }
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    let found = match repo.dirty_paths(&dirs) {
        Ok(found) => found,
        Err(e) => {
            let mut d = *anchor;
            d.message =
                format!("cannot tell whether the checkout holds changes `HEAD` lacks: {e}").into();
            ctx.push(d.help("`git status` must work in the repository; or set worktreeBase = \"index\" or a commit"));
            return;
        }
    };
    let dirty: Vec<String> = found.into_iter().filter(|p| !files.contains(p)).collect();
    if dirty.is_empty() {
        return;
    }
    let mut d = *anchor;
    d.message = dirty_message(&repo.top().display().to_string(), &dirty).into();
    ctx.push(d.help(
        "commit or stash them, or set worktreeBase = \"index\" (what is staged) or a commit",
    ));
}

/// The files a job writes besides its worktree: its artifacts.
fn job_files(job: &Job) -> impl Iterator<Item = String> {
    super::artifact_paths(job).into_iter()
}

/// `plan/dirty-tree`'s message: up to [`SHOWN_DIRTY`] paths, then how many
/// more.
fn dirty_message(top: &str, dirty: &[String]) -> String {
    let shown: BTreeSet<&str> = dirty.iter().take(SHOWN_DIRTY).map(String::as_str).collect();
    let mut list: Vec<String> = shown.iter().map(|p| p.to_string()).collect();
    if dirty.len() > SHOWN_DIRTY {
        list.push(format!("and {} more", dirty.len() - SHOWN_DIRTY));
    }
    format!(
        "a `worktree = \"git\"` worker based on `HEAD` would not see {} of the checkout {top} that `HEAD` does not hold: {}",
        if dirty.len() == 1 { "a change" } else { "changes" },
        list.join(", ")
    )
}

/// Paths as `git status` names them: relative to the repository's top.
struct Within<'a> {
    top: &'a Path,
    /// The project root relative to the top, `""` or ending in `/`.
    prefix: String,
}

impl<'a> Within<'a> {
    fn new(repo: &'a Repo, root: &'a Path) -> Option<Within<'a>> {
        let rel = root.strip_prefix(repo.top()).ok()?;
        Some(Within {
            top: repo.top(),
            prefix: if rel.as_os_str().is_empty() {
                String::new()
            } else {
                format!("{}/", paths::path_text(rel))
            },
        })
    }

    /// A project-relative path.
    fn project(&self, rel: &str) -> String {
        format!("{}{rel}", self.prefix)
    }

    /// A path as the plan records it (project-relative, or absolute).
    fn display(&self, p: &str) -> Option<String> {
        if p.is_empty() {
            return None;
        }
        if Path::new(p).is_absolute() {
            return self.abs(Path::new(p));
        }
        Some(self.project(p))
    }

    /// An absolute path (or one relative to the working directory), where
    /// it lies in the repository: its directory's real path.
    fn abs(&self, p: &Path) -> Option<String> {
        let p = std::path::absolute(p).ok()?;
        let real = match (p.parent(), p.file_name()) {
            (Some(dir), Some(name)) => std::fs::canonicalize(dir).ok()?.join(name),
            _ => p,
        };
        real.strip_prefix(self.top).ok().map(paths::path_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_ref_components_of_the_task_and_state_keys() {
        assert_eq!(worktree_path("t-1", "impl"), ".okstra/worktrees/t-1/impl");
        assert_eq!(branch("t-1", "a/b"), "okstra/t-1/a%2Fb");
        assert!(branch_name_ok(&branch("..", ".lock")));
    }

    #[test]
    fn a_git_worktree_job_is_granted_no_planned_path_of_the_checkout() {
        let planned = vec!["src/**".to_string(), "/data/out/**".to_string()];
        assert_eq!(granted_planned(false, planned.clone()), planned);
        assert_eq!(granted_planned(true, planned), ["/data/out/**"]);
    }

    #[test]
    fn two_worktree_implementers_planning_the_same_file_do_not_conflict() {
        use crate::policy::{build, PolicyInputs};
        use crate::vocab::Role;
        let policy = |key: &str, git: bool| {
            let wt = worktree_path("t", key);
            let planned = granted_planned(git, vec!["src/lib.rs".to_string()]);
            build(&PolicyInputs {
                role: &Role::Implementer,
                artifacts: &[format!("results/{key}.md")],
                worktree: git.then_some(wt.as_str()),
                planned_paths: &planned,
                auxiliary_roots: &[],
            })
        };
        let (a, b) = (policy("a", true), policy("b", true));
        assert_eq!(a.allow, [".okstra/worktrees/t/a/**", "results/a.md"]);
        assert!(crate::policy::overlap(&a, &b).is_none());
        // Near miss: the same two in the checkout do conflict.
        let (a, b) = (policy("a", false), policy("b", false));
        assert!(crate::policy::overlap(&a, &b).is_some());
    }

    #[test]
    fn the_dirty_message_names_ten_paths_then_how_many_more() {
        let few = vec!["a".to_string()];
        assert!(dirty_message("/r", &few).ends_with("/r that `HEAD` does not hold: a"));
        let many: Vec<String> = (0..13).map(|i| format!("f{i:02}")).collect();
        let m = dirty_message("/r", &many);
        assert!(m.contains("f09, and 3 more"), "{m}");
        assert!(!m.contains("f10"));
    }
}
