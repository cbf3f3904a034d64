//! The project's repository: found once from the project root, then always
//! named explicitly. Commands here read it, or write objects and okstra's
//! own refs; none writes the user's index, `HEAD` or files.

use super::git::Call;
use super::{branch_name_ok, GitError};
use std::path::{Path, PathBuf};

/// okstra's identity on its commits, unless the repository's own config
/// (`git config --local`) sets `user.name` / `user.email`.
pub const IDENTITY_NAME: &str = "okstra";
pub const IDENTITY_EMAIL: &str = "okstra@localhost";

/// The subject of [`Repo::index_commit`]'s commit.
const INDEX_SUBJECT: &str = "okstra: the index at plan time";

/// A git repository with a work tree: its top-level directory, its git
/// directory and the common git directory its worktrees share (the same
/// unless the project is itself a linked worktree). All absolute and
/// canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repo {
    pub(super) top: PathBuf,
    pub(super) git_dir: PathBuf,
    pub(super) common: PathBuf,
}

impl Repo {
    /// The repository whose work tree holds `root` (`git rev-parse
    /// --show-toplevel --absolute-git-dir --git-common-dir`); None when
    /// `root` is in none (or only in a bare repository or a `.git`
    /// directory). An error means git itself is missing or broken, which
    /// `okstra doctor` reports.
    pub fn find(root: &Path) -> Result<Option<Repo>, GitError> {
        let call = Call::discover(root).args([
            "rev-parse",
            "--path-format=absolute",
            "--show-toplevel",
            "--absolute-git-dir",
            "--git-common-dir",
        ]);
        let out = call.output()?;
        if out.code != Some(0) {
            let not_here = out.stderr.contains("not a git repository")
                || out.stderr.contains("must be run in a work tree");
            return if not_here {
                Ok(None)
            } else {
                Err(call.failed(out))
            };
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        let [top, git_dir, common] = lines[..] else {
            return Err(call.unexpected(format!("expected three lines, got {text:?}")));
        };
        let canon = |p: &str| std::fs::canonicalize(p).map_err(GitError::io(p));
        Ok(Some(Repo {
            top: canon(top)?,
            git_dir: canon(git_dir)?,
            common: canon(common)?,
        }))
    }

    /// The top-level directory of the user's checkout.
    pub fn top(&self) -> &Path {
        &self.top
    }

    /// The common git directory (where refs, objects and `worktrees/` live).
    pub fn common_dir(&self) -> &Path {
        &self.common
    }

    /// A command on this repository (its git directory and work tree named).
    pub(super) fn call(&self) -> Call {
        Call::at(&self.git_dir, &self.top)
    }

    /// The full sha of the commit `HEAD` names.
    pub fn head(&self) -> Result<String, GitError> {
        self.resolve_commit("HEAD")
    }

    /// The full sha of the commit `rev` names (`git rev-parse --verify
    /// <rev>^{commit}`); an error when it names none.
    pub fn resolve_commit(&self, rev: &str) -> Result<String, GitError> {
        self.call()
            .args(["rev-parse", "--verify", "--end-of-options"])
            .arg(format!("{rev}^{{commit}}"))
            .text()
    }

    /// Whether `sha` (hex, full or abbreviated) names a commit here.
    pub fn commit_exists(&self, sha: &str) -> bool {
        if sha.len() < 4 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        self.call()
            .args(["cat-file", "-e", "--end-of-options"])
            .arg(format!("{sha}^{{commit}}"))
            .run()
            .is_ok()
    }

    /// The commit `refs/heads/<branch>` points at; None when there is no
    /// such branch.
    pub fn branch_tip(&self, branch: &str) -> Result<Option<String>, GitError> {
        if !branch_name_ok(branch) {
            return Err(GitError::BadName(branch.to_string()));
        }
        let call = self
            .call()
            .args(["rev-parse", "--verify", "--quiet", "--end-of-options"])
            .arg(format!("refs/heads/{branch}^{{commit}}"));
        let out = call.output()?;
        match out.code {
            Some(0) => Ok(Some(
                String::from_utf8_lossy(&out.stdout).trim().to_string(),
            )),
            Some(1) if out.stdout.is_empty() => Ok(None),
            _ => Err(call.failed(out)),
        }
    }

    /// The paths (relative to the top level, `/`-separated) that differ
    /// from `HEAD`: staged, unstaged and untracked files (ignored ones
    /// left out), less those under any of `exclude` (e.g. `.okstra/`).
    /// `git status --porcelain=v1 -z --untracked-files=all --no-renames`,
    /// which with optional locks off never rewrites the index.
    pub fn dirty_paths(&self, exclude: &[&str]) -> Result<Vec<String>, GitError> {
        let call = self.call().args([
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
        ]);
        let out = call.run()?;
        let mut paths = Vec::new();
        let mut fields = out.split(|&b| b == 0).filter(|f| !f.is_empty());
        while let Some(field) = fields.next() {
            if field.len() < 4 || field[2] != b' ' {
                return Err(
                    call.unexpected(format!("status entry {:?}", String::from_utf8_lossy(field)))
                );
            }
            paths.push(String::from_utf8_lossy(&field[3..]).into_owned());
            // A rename or copy (status.renames forced on) names its source
            // next; that path differs from HEAD too.
            if matches!(field[0], b'R' | b'C') {
                if let Some(from) = fields.next() {
                    paths.push(String::from_utf8_lossy(from).into_owned());
                }
            }
        }
        paths.retain(|p| !exclude.iter().any(|e| under_prefix(p, e)));
        paths.sort();
        paths.dedup();
        Ok(paths)
    }

    /// A commit holding the index as it is now, its parent `HEAD` (for
    /// `worktreeBase = "index"`). Writes objects only: `git write-tree` runs
    /// on a copy of the index (write-tree may rewrite the index it reads),
    /// and no ref moves. The same index on the same `HEAD` gives the same
    /// commit: the message is fixed and its dates are `HEAD`'s commit date.
    pub fn index_commit(&self) -> Result<String, GitError> {
        let head = self.head()?;
        let scratch = tempfile::tempdir().map_err(GitError::io(std::env::temp_dir()))?;
        let copy = scratch.path().join("index");
        let index = self.git_dir.join("index");
        match std::fs::copy(&index, &copy) {
            Ok(_) => {}
            // No index yet: write-tree starts from an empty one.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(GitError::io(index)(e)),
        }
        let tree = self
            .call()
            .args(["-c", "core.splitIndex=false", "write-tree"])
            .env("GIT_INDEX_FILE", &copy)
            .text()?;
        let date = self
            .call()
            .args(["show", "-s", "--format=%ct", &head])
            .text()?;
        let date = format!("{date} +0000");
        self.identity(self.call())?
            .env("GIT_AUTHOR_DATE", &date)
            .env("GIT_COMMITTER_DATE", &date)
            .args(["commit-tree", &tree, "-p", &head, "-m", INDEX_SUBJECT])
            .text()
    }

    /// The newest commit in `base..<branch>` whose message carries the
    /// trailer `Okstra-Dispatch-Id: <dispatch_id>`; None when there is none
    /// or no such branch. Resume uses it so as never to commit twice.
    pub fn find_by_trailer(
        &self,
        branch: &str,
        base: &str,
        dispatch_id: &str,
    ) -> Result<Option<String>, GitError> {
        if self.branch_tip(branch)?.is_none() {
            return Ok(None);
        }
        let base = self.resolve_commit(base)?;
        let format =
            "--format=%H%x1f%(trailers:key=Okstra-Dispatch-Id,valueonly,unfold,separator=%x1f)%x1e";
        let out = self
            .call()
            .args(["log", format, "--end-of-options"])
            .arg(format!("{base}..refs/heads/{branch}"))
            .run()?;
        let text = String::from_utf8_lossy(&out);
        for record in text.split('\x1e') {
            let mut fields = record.trim_start_matches('\n').split('\x1f');
            let Some(sha) = fields.next().filter(|s| !s.is_empty()) else {
                continue;
            };
            if fields.any(|v| v.trim() == dispatch_id) {
                return Ok(Some(sha.to_string()));
            }
        }
        Ok(None)
    }

    /// The branches under `refs/heads/<prefix>/` (names without
    /// `refs/heads/`), sorted.
    pub fn branches_under(&self, prefix: &str) -> Result<Vec<String>, GitError> {
        let prefix = prefix.trim_end_matches('/');
        if !branch_name_ok(prefix) {
            return Err(GitError::BadName(prefix.to_string()));
        }
        let text = self
            .call()
            .args(["for-each-ref", "--format=%(refname)"])
            .arg(format!("refs/heads/{prefix}/"))
            .text()?;
        let mut out: Vec<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("refs/heads/"))
            .map(str::to_string)
            .collect();
        out.sort();
        Ok(out)
    }

    /// `git worktree prune`: drops the registrations of worktrees whose
    /// directory is gone (the user's as well as okstra's).
    pub fn prune(&self) -> Result<(), GitError> {
        self.call().args(["worktree", "prune"]).run().map(drop)
    }

    /// The registered worktrees whose path lies under `under` (`git
    /// worktree list --porcelain -z`), for `okstra doctor` and tests.
    pub fn worktrees_under(&self, under: &Path) -> Result<Vec<PathBuf>, GitError> {
        let under = std::fs::canonicalize(under).unwrap_or_else(|_| under.to_path_buf());
        let out = self
            .call()
            .args(["worktree", "list", "--porcelain", "-z"])
            .run()?;
        Ok(out
            .split(|&b| b == 0)
            .filter_map(|f| f.strip_prefix(b"worktree "))
            .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
            .filter(|p| p.starts_with(&under))
            .collect())
    }

    /// `call` with the author and committer okstra commits as: the
    /// repository's own `user.name` / `user.email` where its config sets
    /// them, okstra's otherwise (each on its own).
    pub(super) fn identity(&self, call: Call) -> Result<Call, GitError> {
        let name = self.local_config("user.name")?;
        let email = self.local_config("user.email")?;
        let name = name.as_deref().unwrap_or(IDENTITY_NAME);
        let email = email.as_deref().unwrap_or(IDENTITY_EMAIL);
        Ok(call
            .env("GIT_AUTHOR_NAME", name)
            .env("GIT_AUTHOR_EMAIL", email)
            .env("GIT_COMMITTER_NAME", name)
            .env("GIT_COMMITTER_EMAIL", email))
    }

    /// `key` as the repository's own config file sets it (with its
    /// includes), not the user's or the system's.
    fn local_config(&self, key: &str) -> Result<Option<String>, GitError> {
        let call = self
            .call()
            .args(["config", "--local", "--includes", "--get", key]);
        let out = call.output()?;
        match out.code {
            Some(0) => Ok(
                Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
                    .filter(|v| !v.is_empty()),
            ),
            Some(1) => Ok(None),
            _ => Err(call.failed(out)),
        }
    }
}

/// Whether `path` is `prefix` or lies under it (`prefix` a directory, with
/// or without its trailing `/`).
fn under_prefix(path: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    !prefix.is_empty()
        && path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}
