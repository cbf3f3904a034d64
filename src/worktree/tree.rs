//! One worker's worktree: made (or adopted, or repaired) at a base commit,
//! committed to, kept as an attempt, removed.
//!
//! A worktree is complete when its `.git` file names a git directory under
//! `<common>/worktrees/`, that directory's `gitdir` names the worktree back,
//! it is not locked "initializing" (git's mark while `git worktree add`
//! runs), and it has a `commondir` and an index (our checkout ran to its
//! end: git writes the index last). Anything less at a worktree path that
//! is okstra's is half-made, removed and made again. Something that is not
//! a worktree of this repository is never removed: it is an error.
//!
//! Worktree commands always name the worktree's own git directory and its
//! path (`--git-dir`, `--work-tree`): a half-made worktree, without its
//! `.git` file, can never let git fall through to the user's repository.

use super::git::Call;
use super::locks::{clear_stale, ensure_idle, locks_in};
use super::{branch_name_ok, GitError, Repo};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// A worktree okstra made for a worker, on its own branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    path: PathBuf,
    branch: String,
    admin: PathBuf,
}

impl Worktree {
    /// Its directory (absolute, canonical parent).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its branch, without `refs/heads/`.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Its own git directory, `<common>/worktrees/<id>`.
    pub fn admin_dir(&self) -> &Path {
        &self.admin
    }

    /// A command run in this worktree, its git directory named.
    fn call(&self) -> Call {
        Call::at(&self.admin, &self.path)
    }
}

/// What lies at a worktree path.
enum Found {
    /// Nothing, and no registration names it.
    Absent,
    /// A complete worktree; `on_branch`: its `HEAD` is the expected branch.
    Complete { admin: PathBuf, on_branch: bool },
    /// Something okstra may remove and make again.
    HalfMade,
}

impl Repo {
    /// Make or adopt the worktree at `path` on `branch` (created or moved
    /// as needed) at the commit `base`, ready for a worker:
    ///
    /// - nothing there: `branch` is set to `base`, the worktree registered
    ///   (`git worktree add --no-checkout`) and checked out (`git reset
    ///   --hard`), so its `HEAD` is `branch` at `base`, its files clean;
    /// - a complete worktree there and `fresh` false (resume): adopted as it
    ///   is, after clearing stale git locks in its own git directory and on
    ///   its branch; its `HEAD` must be on `branch`;
    /// - a complete worktree there and `fresh` true (a new attempt): `HEAD`
    ///   set to `branch`, `branch` forced to `base`, then `git reset --hard`
    ///   and `git clean -ffdx` inside the worktree;
    /// - a half-made one: its directory and registration removed, then made
    ///   as if nothing were there.
    ///
    /// `path` must be absolute and hold neither the checkout nor the git
    /// directory. The user's checkout, index and `HEAD` are never touched.
    pub fn prepare_worktree(
        &self,
        path: &Path,
        branch: &str,
        base: &str,
        fresh: bool,
    ) -> Result<Worktree, GitError> {
        if !branch_name_ok(branch) {
            return Err(GitError::BadName(branch.to_string()));
        }
        let base = self.resolve_commit(base)?;
        let path = self.place(path)?;
        match self.inspect(&path, branch)? {
            Found::Complete { admin, on_branch } => {
                let wt = Worktree {
                    path,
                    branch: branch.to_string(),
                    admin,
                };
                self.clear_locks(&wt)?;
                if fresh {
                    self.reset_to(&wt, &base)?;
                } else if !on_branch || self.branch_tip(branch)?.is_none() {
                    return Err(GitError::NotOurs {
                        path: wt.path,
                        reason: format!("this worktree is no longer on branch {branch}"),
                    });
                }
                Ok(wt)
            }
            Found::HalfMade => {
                self.discard(&path)?;
                self.create(path, branch, &base)
            }
            Found::Absent => self.create(path, branch, &base),
        }
    }

    /// Commit everything changed in `wt` (new, changed and deleted files;
    /// ignored ones left out) to its branch, with `message` (its trailers
    /// included) as given. Hooks never run; the identity is
    /// `Repo::identity`'s. The new commit's sha, or None when nothing
    /// changed (no commit is made).
    pub fn commit_all(&self, wt: &Worktree, message: &str) -> Result<Option<String>, GitError> {
        self.clear_locks(wt)?;
        self.check_on_branch(wt)?;
        let (head, tree, changed) = self.stage_all(wt)?;
        if !changed {
            return Ok(None);
        }
        let commit = self.commit_tree(wt, &tree, &head, message)?;
        // Killed here, the commit is an object no ref names: made again.
        crate::fault::point("worktree-commit-ref");
        wt.call()
            .args(["update-ref", "-m", "okstra: commit"])
            .arg(format!("refs/heads/{}", wt.branch))
            .args([&commit, &head])
            .run()?;
        Ok(Some(commit))
    }

    /// Keep what a failed attempt left in `wt` on the branch `keep_ref`
    /// (e.g. `okstra-attempts/<task>/<key>/<N>`), forced there: a commit of
    /// everything changed, its parent the worktree's `HEAD` (or that `HEAD`
    /// itself when only commits were made). The worktree's branch is never
    /// moved onto it; if the worker moved it past `base`, it goes back to
    /// `base`, and the worktree is reset to `base` (ignored files stay).
    /// The kept sha, or None when the worktree was clean at `base`.
    ///
    /// Kept once: where `keep_ref` already exists (an earlier call, killed
    /// before the worktree was back at `base`: maybe inside `git reset
    /// --hard`, the attempt's files half reset), it stays as it is and only
    /// the branch and the files go back. The caller makes sure no other
    /// run's attempt is kept there (exec refuses to start a job that has
    /// kept attempts it did not make).
    pub fn keep_attempt(
        &self,
        wt: &Worktree,
        base: &str,
        keep_ref: &str,
        message: &str,
    ) -> Result<Option<String>, GitError> {
        if !branch_name_ok(keep_ref) {
            return Err(GitError::BadName(keep_ref.to_string()));
        }
        let base = self.resolve_commit(base)?;
        self.clear_locks(wt)?;
        self.check_on_branch(wt)?;
        self.clear_ref_lock(keep_ref, &wt.path)?;
        let earlier = self.branch_tip(keep_ref)?;
        let (head, tree, changed) = self.stage_all(wt)?;
        if earlier.is_none() && !changed && head == base {
            return Ok(None);
        }
        let kept = match earlier {
            Some(kept) => kept,
            None => {
                let kept = if changed {
                    self.commit_tree(wt, &tree, &head, message)?
                } else {
                    head.clone()
                };
                crate::fault::point("worktree-keep-ref");
                wt.call()
                    .args(["update-ref", "-m", "okstra: attempt kept"])
                    .arg(format!("refs/heads/{keep_ref}"))
                    .arg(&kept)
                    .run()?;
                kept
            }
        };
        // Killed from here on, the attempt is kept and the worktree holds
        // it, or part of it: kept again, it is not kept twice.
        crate::fault::point("worktree-keep-reset");
        if head != base {
            wt.call()
                .args(["update-ref", "-m", "okstra: back to the base"])
                .arg(format!("refs/heads/{}", wt.branch))
                .args([&base, &head])
                .run()?;
        }
        wt.call()
            .args(["reset", "--hard", "-q", "--no-recurse-submodules"])
            .run()?;
        Ok(Some(kept))
    }

    /// The paths changed in `wt` against its `HEAD` (staged, unstaged and
    /// untracked; ignored ones left out), relative to the worktree. Reads
    /// only: optional locks are off, so the index is not refreshed.
    pub fn changes_in(&self, wt: &Worktree) -> Result<Vec<String>, GitError> {
        let out = wt
            .call()
            .args([
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=all",
                "--no-renames",
            ])
            .run()?;
        Ok(out
            .split(|&b| b == 0)
            .filter(|f| f.len() > 3)
            .map(|f| String::from_utf8_lossy(&f[3..]).into_owned())
            .collect())
    }

    /// [`Repo::remove_worktree`] of the worktree okstra made at `path` on
    /// `branch`, whether or not this process made it.
    pub fn remove_worktree_at(&self, path: &Path, branch: &str) -> Result<(), GitError> {
        let path = self.place(path)?;
        if let Found::Complete { .. } = self.inspect(&path, branch)? {
            self.call()
                .args(["worktree", "remove", "--force"])
                .arg(&path)
                .run()?;
        }
        self.discard(&path)?;
        self.clear_junk(&path)
    }

    /// Whether anything of a worktree is left at `path`: its directory, a
    /// registration naming it, or one a killed `git worktree add` or
    /// `remove` left without its `gitdir` (see [`Repo::remove_worktree_at`]).
    pub fn worktree_left_at(&self, path: &Path) -> bool {
        let path = match (path.parent(), path.file_name()) {
            (Some(parent), Some(name)) => fs::canonicalize(parent)
                .map(|p| p.join(name))
                .unwrap_or_else(|_| path.to_path_buf()),
            _ => path.to_path_buf(),
        };
        fs::symlink_metadata(&path).is_ok()
            || !self.registrations_of(&path).is_empty()
            || !self.junk_for(&path).is_empty()
    }

    /// Remove `wt`'s files and registration, keeping its branch (`git
    /// worktree remove --force` when it is complete, then whatever is left
    /// of it, its registration included, by hand: other worktrees'
    /// registrations are left alone). Already gone is fine.
    pub fn remove_worktree(&self, wt: &Worktree) -> Result<(), GitError> {
        self.remove_worktree_at(&wt.path, &wt.branch)
    }

    /// `path` made absolute with a canonical parent (created if missing),
    /// refused if it would hold the checkout or a git directory.
    fn place(&self, path: &Path) -> Result<PathBuf, GitError> {
        let bad = |reason: &str| GitError::BadPath {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        if !path.is_absolute() {
            return Err(bad("a worktree path must be absolute"));
        }
        if path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
        {
            return Err(bad("a worktree path must not hold `.` or `..`"));
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(bad("a worktree path needs a parent directory"));
        };
        fs::create_dir_all(parent).map_err(GitError::io(parent))?;
        let parent = fs::canonicalize(parent).map_err(GitError::io(parent))?;
        let path = parent.join(name);
        let holds = |p: &Path| p.starts_with(&path);
        if holds(&self.top) || holds(&self.git_dir) || holds(&self.common) {
            return Err(bad("a worktree path must not hold the repository"));
        }
        if path.starts_with(&self.git_dir) || path.starts_with(&self.common) {
            return Err(bad("a worktree path must not lie in a git directory"));
        }
        Ok(path)
    }

    /// What lies at `path` (canonical), for `branch`.
    fn inspect(&self, path: &Path, branch: &str) -> Result<Found, GitError> {
        let regs = self.registrations_of(path);
        let meta = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(if regs.is_empty() {
                    Found::Absent
                } else {
                    Found::HalfMade
                });
            }
            Err(e) => return Err(GitError::io(path)(e)),
        };
        if !meta.is_dir() {
            return Err(self.not_ours(path, "not a directory"));
        }
        let Some(admin) = self.admin_named_by(path)? else {
            return Ok(Found::HalfMade);
        };
        let locked = fs::read_to_string(admin.join("locked")).ok();
        let initializing = locked.is_some_and(|l| matches!(l.trim(), "" | "initializing"));
        let complete = regs == [admin.clone()]
            && !initializing
            && admin.join("commondir").is_file()
            && admin.join("index").is_file();
        if !complete {
            return Ok(Found::HalfMade);
        }
        let head = fs::read_to_string(admin.join("HEAD")).unwrap_or_default();
        let on_branch = head.trim() == format!("ref: refs/heads/{branch}");
        Ok(Found::Complete { admin, on_branch })
    }

    /// The git directory `path/.git` names, canonical; None when there is
    /// no usable `.git` file or the directory it names is gone. A `.git`
    /// directory, or a file naming another repository's worktree, is not
    /// okstra's: an error.
    fn admin_named_by(&self, path: &Path) -> Result<Option<PathBuf>, GitError> {
        let dotgit = path.join(".git");
        let meta = match fs::symlink_metadata(&dotgit) {
            Ok(meta) => meta,
            Err(_) => return Ok(None),
        };
        if !meta.is_file() {
            return Err(self.not_ours(path, "it holds a repository of its own"));
        }
        let text = fs::read_to_string(&dotgit).unwrap_or_default();
        let Some(named) = text.trim().strip_prefix("gitdir: ") else {
            // Empty or torn: written by a git that was killed.
            return Ok(None);
        };
        let named = normalize(&path.join(named));
        let Ok(admin) = fs::canonicalize(&named) else {
            return Ok(None);
        };
        if admin.parent() != Some(self.common.join("worktrees").as_path()) {
            return Err(self.not_ours(
                path,
                &format!("its .git names {}, not this repository", named.display()),
            ));
        }
        Ok(Some(admin))
    }

    /// The registrations (`<common>/worktrees/<id>`) of the worktrees
    /// below `dir` (canonical): those whose `gitdir` names a `.git` there,
    /// and those without a `gitdir` (begun, no worktree's yet: what a
    /// killed `git worktree add` leaves). Read from the files, without
    /// running git.
    pub fn registrations_below(&self, dir: &Path) -> Vec<PathBuf> {
        let Ok(entries) = fs::read_dir(self.common.join("worktrees")) else {
            return Vec::new();
        };
        let mut regs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|admin| match fs::read_to_string(admin.join("gitdir")) {
                Ok(text) => normalize(&admin.join(text.trim())).starts_with(dir),
                // Begun by a `git worktree add` that has not written it yet
                // (or was killed first): no worktree of anyone's yet.
                Err(_) => true,
            })
            .collect();
        regs.sort();
        regs
    }

    /// The registrations (`<common>/worktrees/<id>`) whose `gitdir` names
    /// `path/.git`.
    fn registrations_of(&self, path: &Path) -> Vec<PathBuf> {
        let want = path.join(".git");
        let Ok(entries) = fs::read_dir(self.common.join("worktrees")) else {
            return Vec::new();
        };
        let mut regs: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|admin| {
                let Ok(text) = fs::read_to_string(admin.join("gitdir")) else {
                    return false;
                };
                let named = normalize(&admin.join(text.trim()));
                named == want || fs::canonicalize(&named).is_ok_and(|c| c == want)
            })
            .collect();
        regs.sort();
        regs
    }

    /// Remove the worktree at `path` (canonical) by hand: every
    /// registration naming it, the one its `.git` file names if that one's
    /// own worktree is gone, then its directory. Refused while a live git
    /// works there.
    fn discard(&self, path: &Path) -> Result<(), GitError> {
        let exists = fs::symlink_metadata(path).is_ok();
        // Never a directory holding a repository of its own: an error.
        let named = if exists {
            self.admin_named_by(path)?
        } else {
            None
        };
        let mut admins = self.registrations_of(path);
        if let Some(admin) = named.filter(|a| !admins.contains(a) && orphaned(a)) {
            admins.push(admin);
        }
        for admin in admins {
            ensure_idle(&admin, &[path, &admin])?;
            remove_tree(&admin)?;
        }
        if exists {
            ensure_idle(path, &[path])?;
            remove_tree(path)?;
        }
        Ok(())
    }

    /// The registrations `git worktree add` of `path` may have begun and
    /// that name no worktree: `<common>/worktrees/<id>` where `<id>` is
    /// `path`'s name, bare or with the number git appends when the name is
    /// taken, without a `gitdir` file. git writes that file right after
    /// making the directory (and its `locked` "initializing"), and removes
    /// the directory last in `git worktree remove`; one killed in between
    /// leaves a registration `git worktree list` does not show and `git
    /// worktree prune` keeps while it is locked.
    fn junk_for(&self, path: &Path) -> Vec<PathBuf> {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return Vec::new();
        };
        let Ok(entries) = fs::read_dir(self.common.join("worktrees")) else {
            return Vec::new();
        };
        let mut junk: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| {
                e.file_name().to_str().is_some_and(|id| {
                    id.strip_prefix(name)
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
            })
            .map(|e| e.path())
            .filter(|admin| {
                fs::read_to_string(admin.join("gitdir")).map_or(true, |t| t.trim().is_empty())
            })
            .collect();
        junk.sort();
        junk
    }

    /// Remove [`Repo::junk_for`] `path`, unless a live git works in this
    /// repository (a `git worktree add` may be between its two steps):
    /// then it is left for a later run, harmless meanwhile (git names the
    /// next registration of `path` another way).
    fn clear_junk(&self, path: &Path) -> Result<(), GitError> {
        for admin in self.junk_for(path) {
            if ensure_idle(&admin, &[path, &admin, &self.top, &self.common]).is_err() {
                continue;
            }
            remove_tree(&admin)?;
        }
        Ok(())
    }

    /// Make the worktree at `path` (where nothing is): `branch` at `base`,
    /// registered, then checked out.
    fn create(&self, path: PathBuf, branch: &str, base: &str) -> Result<Worktree, GitError> {
        self.clear_junk(&path)?;
        self.clear_packed_refs_lock(&path)?;
        self.clear_ref_lock(branch, &path)?;
        self.call()
            .args(["update-ref", "-m", "okstra: worktree base"])
            .arg(format!("refs/heads/{branch}"))
            .arg(base)
            .run()?;
        crate::fault::point("worktree-add");
        self.call()
            .args(["worktree", "add", "--no-checkout", "--end-of-options"])
            .arg(&path)
            .arg(branch)
            .run()?;
        let admin = self
            .admin_named_by(&path)?
            .ok_or_else(|| GitError::NotOurs {
                path: path.clone(),
                reason: "git worktree add left no usable .git file".into(),
            })?;
        let wt = Worktree {
            path,
            branch: branch.to_string(),
            admin,
        };
        // Killed here, the worktree has no index: half-made, made again.
        crate::fault::point("worktree-checkout");
        wt.call()
            .args(["reset", "--hard", "-q", "--no-recurse-submodules"])
            .run()?;
        Ok(wt)
    }

    /// Put `wt` back at `base` on its branch, its files clean.
    fn reset_to(&self, wt: &Worktree, base: &str) -> Result<(), GitError> {
        // `HEAD` is written only where it left the branch: the audit reads
        // it, and a rewrite of the same text would still be a new file.
        if self.check_on_branch(wt).is_err() {
            wt.call()
                .args(["symbolic-ref", "HEAD"])
                .arg(format!("refs/heads/{}", wt.branch))
                .run()?;
        }
        wt.call()
            .args(["update-ref", "-m", "okstra: fresh attempt"])
            .arg(format!("refs/heads/{}", wt.branch))
            .arg(base)
            .run()?;
        wt.call()
            .args(["reset", "--hard", "-q", "--no-recurse-submodules"])
            .run()?;
        wt.call().args(["clean", "-ffdxq"]).run()?;
        Ok(())
    }

    /// Stage everything in `wt`: its `HEAD`, the staged tree, and whether
    /// that tree differs from `HEAD`'s.
    fn stage_all(&self, wt: &Worktree) -> Result<(String, String, bool), GitError> {
        wt.call().args(["add", "-A"]).run()?;
        let tree = wt.call().arg("write-tree").text()?;
        let head = wt
            .call()
            .args(["rev-parse", "--verify", "HEAD^{commit}"])
            .text()?;
        let head_tree = wt
            .call()
            .args(["rev-parse", "--verify"])
            .arg(format!("{head}^{{tree}}"))
            .text()?;
        let changed = tree != head_tree;
        Ok((head, tree, changed))
    }

    /// A commit of `tree` on `parent` with `message`, as okstra commits.
    fn commit_tree(
        &self,
        wt: &Worktree,
        tree: &str,
        parent: &str,
        message: &str,
    ) -> Result<String, GitError> {
        self.identity(wt.call())?
            .args(["commit-tree", tree, "-p", parent, "-m", message])
            .text()
    }

    /// An error unless `wt`'s `HEAD` is on its branch.
    fn check_on_branch(&self, wt: &Worktree) -> Result<(), GitError> {
        let head = wt.call().args(["symbolic-ref", "-q", "HEAD"]).output()?;
        if String::from_utf8_lossy(&head.stdout).trim() == format!("refs/heads/{}", wt.branch) {
            Ok(())
        } else {
            Err(self.not_ours(
                &wt.path,
                &format!("this worktree is no longer on branch {}", wt.branch),
            ))
        }
    }

    /// Clear the stale locks in `wt`'s own git directory, on its branch,
    /// and on the repository's packed refs.
    fn clear_locks(&self, wt: &Worktree) -> Result<(), GitError> {
        for lock in locks_in(&wt.admin) {
            clear_stale(&lock, &[&wt.path, &wt.admin])?;
        }
        self.clear_packed_refs_lock(&wt.path)?;
        self.clear_ref_lock(&wt.branch, &wt.path)
    }

    /// `git reset --hard` in a worktree deletes its `AUTO_MERGE` ref, and a
    /// ref deletion locks the repository's packed refs: one killed there
    /// leaves `<common>/packed-refs.lock`, and every later ref deletion in
    /// the repository (the user's `git branch -d` too) fails on it, while
    /// `git reset` itself still exits 0. Cleared when no git works in the
    /// repository; one that does may hold it, and it is left alone.
    fn clear_packed_refs_lock(&self, path: &Path) -> Result<(), GitError> {
        let lock = self.common.join("packed-refs.lock");
        match clear_stale(&lock, &[path, &self.top, &self.common]) {
            Err(GitError::LockBusy { .. }) => Ok(()),
            done => done,
        }
    }

    /// Clear a stale lock on `refs/heads/<branch>` (a branch of okstra's):
    /// refused while any git works in this repository.
    fn clear_ref_lock(&self, branch: &str, path: &Path) -> Result<(), GitError> {
        let lock = self.common.join(format!("refs/heads/{branch}.lock"));
        clear_stale(&lock, &[path, &self.top, &self.common])
    }

    fn not_ours(&self, path: &Path, reason: &str) -> GitError {
        GitError::NotOurs {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }
}

/// Whether the worktree registered at `admin` is gone: no `gitdir` file, or
/// one naming a `.git` that does not exist (what `git worktree prune` drops).
fn orphaned(admin: &Path) -> bool {
    match fs::read_to_string(admin.join("gitdir")) {
        Ok(text) if !text.trim().is_empty() => {
            fs::symlink_metadata(normalize(&admin.join(text.trim()))).is_err()
        }
        _ => true,
    }
}

/// `path` without `.` and `..` components, by text.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Remove a directory tree (not following symlinks); gone already is fine.
fn remove_tree(path: &Path) -> Result<(), GitError> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(GitError::io(path)(e)),
        _ => Ok(()),
    }
}
