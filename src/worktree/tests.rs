//! The git layer on real repositories in temporary directories, with the
//! user's `HEAD`, index and files checked byte for byte around each step.

use super::git::{hermetic_env, Call};
use super::*;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const BRANCH: &str = "okstra/t/k";

struct Project {
    _dir: tempfile::TempDir,
    top: PathBuf,
    /// Written by any hook that runs: none may.
    hook_marker: PathBuf,
    repo: Repo,
    base: String,
}

/// A user's git command in `dir` (the user's identity, our hermetic env).
fn user_git(dir: &Path, args: &[&str]) -> String {
    Call::discover(dir)
        .args(["-c", "user.name=User", "-c", "user.email=user@example.com"])
        .args(args)
        .text()
        .unwrap()
}

fn project() -> Project {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("proj");
    fs::create_dir_all(top.join("src")).unwrap();
    user_git(&top, &["init", "-q", "-b", "main"]);
    fs::write(top.join("a.txt"), "alpha\n").unwrap();
    fs::write(top.join("src/b.rs"), "fn b() {}\n").unwrap();
    fs::write(top.join(".gitignore"), "target/\n").unwrap();
    user_git(&top, &["add", "-A"]);
    user_git(&top, &["commit", "-q", "-m", "init"]);
    let hook_marker = dir.path().join("hooks-ran");
    let hooks = top.join(".git/hooks");
    fs::create_dir_all(&hooks).unwrap();
    for name in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "post-checkout",
        "reference-transaction",
    ] {
        let script = format!(
            "#!/bin/sh\necho {name} >> '{}'\nexit 1\n",
            hook_marker.display()
        );
        fs::write(hooks.join(name), script).unwrap();
        fs::set_permissions(hooks.join(name), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let repo = Repo::find(&top).unwrap().unwrap();
    let base = repo.head().unwrap();
    Project {
        top: fs::canonicalize(&top).unwrap(),
        _dir: dir,
        hook_marker,
        repo,
        base,
    }
}

impl Project {
    fn wt_path(&self, task: &str, key: &str) -> PathBuf {
        self.top.join(".okstra/worktrees").join(task).join(key)
    }

    /// The user's `HEAD`, index, branch and every checked-out file (not
    /// `.git`, not `.okstra`), byte for byte.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut files = BTreeMap::new();
        for name in ["HEAD", "index", "refs/heads/main"] {
            let p = self.top.join(".git").join(name);
            files.insert(p.clone(), fs::read(&p).unwrap());
        }
        fn walk(dir: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for e in fs::read_dir(dir).unwrap() {
                let p = e.unwrap().path();
                let name = p.file_name().unwrap();
                if name == ".git" || name == ".okstra" {
                    continue;
                }
                if p.is_dir() {
                    walk(&p, files);
                } else {
                    files.insert(p.clone(), fs::read(&p).unwrap());
                }
            }
        }
        walk(&self.top, &mut files);
        files
    }

    /// The worktree of task `t`, key `k`, made at `HEAD` on [`BRANCH`].
    fn worktree(&self) -> (PathBuf, Worktree) {
        let path = self.wt_path("t", "k");
        let wt = self
            .repo
            .prepare_worktree(&path, BRANCH, "HEAD", false)
            .unwrap();
        (path, wt)
    }

    /// The user's checkout as it was `before`, and no hook of theirs ran.
    #[track_caller]
    fn assert_untouched(&self, before: &BTreeMap<PathBuf, Vec<u8>>) {
        assert_eq!(&self.snapshot(), before);
        self.no_hook_ran();
    }

    fn no_hook_ran(&self) {
        assert!(
            !self.hook_marker.exists(),
            "hooks ran: {}",
            fs::read_to_string(&self.hook_marker).unwrap()
        );
    }

    /// `git` in a worktree, its git directory named.
    fn in_wt(&self, wt: &Worktree, args: &[&str]) -> String {
        Call::at(wt.admin_dir(), wt.path())
            .args(args)
            .text()
            .unwrap()
    }

    /// `wt` is complete and clean at `sha` on `BRANCH`, the only
    /// registration of its path.
    fn assert_ready(&self, wt: &Worktree, sha: &str) {
        assert_eq!(
            self.in_wt(wt, &["symbolic-ref", "HEAD"]),
            format!("refs/heads/{BRANCH}")
        );
        assert_eq!(self.in_wt(wt, &["rev-parse", "HEAD"]), sha);
        assert_eq!(self.in_wt(wt, &["status", "--porcelain", "--ignored"]), "");
        assert_eq!(
            fs::read_to_string(wt.path().join("a.txt")).unwrap(),
            "alpha\n"
        );
        assert_eq!(
            self.repo
                .worktrees_under(&self.top.join(".okstra"))
                .unwrap(),
            vec![wt.path().to_path_buf()]
        );
        let admins: Vec<_> = fs::read_dir(self.top.join(".git/worktrees"))
            .unwrap()
            .collect();
        assert_eq!(admins.len(), 1);
    }
}

#[test]
fn prepare_makes_a_worktree_then_adopts_it() {
    let p = project();
    let before = p.snapshot();
    let (path, wt) = p.worktree();
    assert_eq!(wt.path(), path);
    assert_eq!(wt.branch(), BRANCH);
    p.assert_ready(&wt, &p.base);
    assert_eq!(
        p.repo.branch_tip(BRANCH).unwrap().as_deref(),
        Some(&*p.base)
    );

    // A worker's edit survives a resume.
    fs::write(path.join("a.txt"), "edited\n").unwrap();
    let again = p
        .repo
        .prepare_worktree(&path, BRANCH, &p.base, false)
        .unwrap();
    assert_eq!(again, wt);
    assert_eq!(fs::read_to_string(path.join("a.txt")).unwrap(), "edited\n");

    p.assert_untouched(&before);
}

#[test]
fn fresh_resets_tree_and_branch_to_the_base() {
    let p = project();
    let before = p.snapshot();
    let (path, wt) = p.worktree();
    fs::write(path.join("a.txt"), "committed\n").unwrap();
    p.repo.commit_all(&wt, "work\n").unwrap().unwrap();
    fs::write(path.join("a.txt"), "dirty\n").unwrap();
    fs::write(path.join("untracked.txt"), "u\n").unwrap();
    fs::create_dir_all(path.join("target")).unwrap();
    fs::write(path.join("target/ignored"), "i\n").unwrap();

    let wt2 = p
        .repo
        .prepare_worktree(&path, BRANCH, &p.base, true)
        .unwrap();
    assert_eq!(wt2, wt);
    p.assert_ready(&wt, &p.base);
    assert!(!path.join("untracked.txt").exists());
    assert!(!path.join("target").exists());
    assert_eq!(
        p.repo.branch_tip(BRANCH).unwrap().as_deref(),
        Some(&*p.base)
    );
    p.assert_untouched(&before);
}

/// Each way a killed git can leave a worktree: prepare repairs it, and the
/// user's repository is untouched, its own lock files included.
#[test]
fn half_made_worktrees_are_repaired() {
    type Damage = fn(&Project, &Worktree);
    let cases: &[(&str, Damage)] = &[
        ("no .git file", |_, wt| {
            fs::remove_file(wt.path().join(".git")).unwrap()
        }),
        ("empty .git file", |_, wt| {
            fs::write(wt.path().join(".git"), "").unwrap()
        }),
        ("locked initializing", |_, wt| {
            fs::write(wt.admin_dir().join("locked"), "initializing").unwrap()
        }),
        ("never checked out", |_, wt| {
            fs::remove_file(wt.admin_dir().join("index")).unwrap()
        }),
        ("registration gone", |_, wt| {
            fs::remove_dir_all(wt.admin_dir()).unwrap()
        }),
        ("registration names another path", |_, wt| {
            fs::write(wt.admin_dir().join("gitdir"), "/elsewhere/.git\n").unwrap()
        }),
        ("directory gone", |_, wt| {
            fs::remove_dir_all(wt.path()).unwrap()
        }),
        // `git worktree add` killed right after making its registration
        // (before its `gitdir`): one git neither lists nor prunes.
        ("registration begun", |_, wt| {
            fs::remove_dir_all(wt.path()).unwrap();
            fs::remove_file(wt.admin_dir().join("gitdir")).unwrap();
            fs::write(wt.admin_dir().join("locked"), "initializing").unwrap()
        }),
        ("registration begun, then begun again", |p, wt| {
            fs::remove_dir_all(wt.path()).unwrap();
            fs::remove_file(wt.admin_dir().join("gitdir")).unwrap();
            fs::write(wt.admin_dir().join("locked"), "initializing").unwrap();
            let again = p.top.join(".git/worktrees/k1");
            fs::create_dir(&again).unwrap();
            fs::write(again.join("locked"), "initializing").unwrap()
        }),
        ("stale index.lock", |_, wt| {
            fs::write(wt.admin_dir().join("index.lock"), "").unwrap()
        }),
        ("stale HEAD.lock", |_, wt| {
            fs::write(wt.admin_dir().join("HEAD.lock"), "").unwrap()
        }),
        ("stale branch lock", |p, _| {
            fs::write(p.top.join(format!(".git/refs/heads/{BRANCH}.lock")), "").unwrap()
        }),
        // `git reset --hard` killed while it deleted `AUTO_MERGE`.
        ("stale packed-refs lock", |p, _| {
            fs::write(p.top.join(".git/packed-refs.lock"), "").unwrap()
        }),
        ("stale packed-refs lock, never checked out", |p, wt| {
            fs::write(p.top.join(".git/packed-refs.lock"), "").unwrap();
            fs::remove_file(wt.admin_dir().join("index")).unwrap()
        }),
    ];
    for (what, damage) in cases {
        let p = project();
        // The user's own git is mid-command: its locks stay.
        fs::write(p.top.join(".git/index.lock"), "user").unwrap();
        fs::write(p.top.join(".git/HEAD.lock"), "user").unwrap();
        let before = p.snapshot();
        let path = p.wt_path("t", "k");
        let wt = p
            .repo
            .prepare_worktree(&path, BRANCH, "HEAD", false)
            .unwrap();
        fs::write(path.join("a.txt"), "half-written\n").unwrap();
        damage(&p, &wt);

        let wt = p
            .repo
            .prepare_worktree(&path, BRANCH, &p.base, false)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let repaired = fs::read_to_string(path.join("a.txt")).unwrap();
        if repaired != "alpha\n" {
            // Only lock cases keep the worktree (and the worker's edit).
            assert!(what.starts_with("stale"), "{what}: {repaired}");
            fs::write(path.join("a.txt"), "alpha\n").unwrap();
        }
        p.assert_ready(&wt, &p.base);
        assert!(!p.top.join(".git/packed-refs.lock").exists(), "{what}");
        assert!(p.repo.commit_all(&wt, "after repair\n").is_ok(), "{what}");
        assert_eq!(p.snapshot(), before, "{what}");
        assert_eq!(fs::read(p.top.join(".git/index.lock")).unwrap(), b"user");
        assert_eq!(fs::read(p.top.join(".git/HEAD.lock")).unwrap(), b"user");
        p.no_hook_ran();
    }
}

/// A directory with files and no `.git` (killed before git wrote it).
#[test]
fn a_bare_directory_at_the_path_is_replaced() {
    let p = project();
    let before = p.snapshot();
    let path = p.wt_path("t", "k");
    fs::create_dir_all(path.join("sub")).unwrap();
    fs::write(path.join("sub/stray"), "x").unwrap();
    let wt = p
        .repo
        .prepare_worktree(&path, BRANCH, "HEAD", false)
        .unwrap();
    p.assert_ready(&wt, &p.base);
    assert!(!path.join("sub").exists());
    assert_eq!(p.snapshot(), before);
}

#[test]
fn what_is_not_ours_is_left_alone() {
    let p = project();
    let path = p.wt_path("t", "k");
    fs::create_dir_all(&path).unwrap();
    user_git(&path, &["init", "-q"]);
    fs::write(path.join("precious"), "x").unwrap();
    let err = p
        .repo
        .prepare_worktree(&path, BRANCH, "HEAD", false)
        .unwrap_err();
    assert!(matches!(err, GitError::NotOurs { .. }), "{err}");
    assert!(path.join("precious").exists());

    // Nor may a worktree path hold the repository itself.
    let err = p
        .repo
        .prepare_worktree(&p.top, BRANCH, "HEAD", true)
        .unwrap_err();
    assert!(matches!(err, GitError::BadPath { .. }), "{err}");
    let err = p
        .repo
        .prepare_worktree(Path::new("rel/path"), BRANCH, "HEAD", true)
        .unwrap_err();
    assert!(matches!(err, GitError::BadPath { .. }), "{err}");
    let err = p
        .repo
        .prepare_worktree(&p.wt_path("t", "j"), "bad..name", "HEAD", true)
        .unwrap_err();
    assert!(matches!(err, GitError::BadName(_)), "{err}");
}

#[test]
fn commit_all_commits_everything_with_trailers_and_no_hooks() {
    let p = project();
    let before = p.snapshot();
    let (path, wt) = p.worktree();
    assert_eq!(p.repo.commit_all(&wt, "nothing\n").unwrap(), None);

    fs::write(path.join("a.txt"), "changed\n").unwrap();
    fs::remove_file(path.join("src/b.rs")).unwrap();
    fs::write(path.join("new.txt"), "new\n").unwrap();
    fs::create_dir_all(path.join("target")).unwrap();
    fs::write(path.join("target/out"), "ignored\n").unwrap();
    let message = message_with_trailers(
        "okstra: t done\nsecond line dropped",
        &[("Okstra-Task", "t"), ("Okstra-Dispatch-Id", "d-1")],
    );
    let sha = p.repo.commit_all(&wt, &message).unwrap().unwrap();
    assert_eq!(p.repo.branch_tip(BRANCH).unwrap(), Some(sha.clone()));
    assert_eq!(p.in_wt(&wt, &["rev-parse", "HEAD"]), sha);
    assert_eq!(p.in_wt(&wt, &["status", "--porcelain"]), "");
    let log = |fmt: &str| p.repo.call().args(["log", "-1", fmt, &sha]).text().unwrap();
    assert_eq!(
        log("--format=%an <%ae>|%cn <%ce>|%P"),
        format!(
            "okstra <okstra@localhost>|okstra <okstra@localhost>|{}",
            p.base
        )
    );
    assert_eq!(log("--format=%B"), message.trim_end());
    assert_eq!(
        log("--format=%(trailers:key=Okstra-Dispatch-Id,valueonly)"),
        "d-1"
    );
    let files = p
        .repo
        .call()
        .args([
            "diff-tree",
            "--no-commit-id",
            "--name-status",
            "-r",
            &p.base,
            &sha,
        ])
        .text()
        .unwrap();
    assert_eq!(files, "M\ta.txt\nA\tnew.txt\nD\tsrc/b.rs");
    assert_eq!(p.repo.commit_all(&wt, &message).unwrap(), None);

    // The repository's own identity wins over okstra's.
    user_git(&p.top, &["config", "user.name", "Alice"]);
    fs::write(path.join("new.txt"), "newer\n").unwrap();
    let sha2 = p.repo.commit_all(&wt, "second\n").unwrap().unwrap();
    let who = p
        .repo
        .call()
        .args(["log", "-1", "--format=%an <%ae>", &sha2])
        .text()
        .unwrap();
    assert_eq!(who, "Alice <okstra@localhost>");

    assert_eq!(
        p.repo.find_by_trailer(BRANCH, &p.base, "d-1").unwrap(),
        Some(sha.clone())
    );
    assert_eq!(
        p.repo.find_by_trailer(BRANCH, &p.base, "d-2").unwrap(),
        None
    );
    assert_eq!(p.repo.find_by_trailer(BRANCH, &sha, "d-1").unwrap(), None);
    assert_eq!(
        p.repo
            .find_by_trailer("okstra/none", &p.base, "d-1")
            .unwrap(),
        None
    );

    p.assert_untouched(&before);

    // Control: the hooks are live for a git without okstra's settings.
    let plain = std::process::Command::new("git")
        .args(["update-ref", "refs/heads/probe", "HEAD"])
        .current_dir(&p.top)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(!plain.status.success());
    assert!(p.hook_marker.exists());
}

#[test]
fn keep_attempt_keeps_changes_off_the_branch() {
    let p = project();
    let before = p.snapshot();
    let (path, wt) = p.worktree();
    let keep = "okstra-attempts/t/k/1";
    assert_eq!(
        p.repo.keep_attempt(&wt, &p.base, keep, "kept\n").unwrap(),
        None
    );
    assert_eq!(p.repo.branch_tip(keep).unwrap(), None);

    fs::write(path.join("a.txt"), "failed work\n").unwrap();
    fs::write(path.join("extra.txt"), "x\n").unwrap();
    let sha = p
        .repo
        .keep_attempt(&wt, &p.base, keep, "kept\n")
        .unwrap()
        .unwrap();
    assert_eq!(p.repo.branch_tip(keep).unwrap(), Some(sha.clone()));
    assert_eq!(p.repo.branch_tip(BRANCH).unwrap(), Some(p.base.clone()));
    p.assert_ready(&wt, &p.base);
    assert!(!path.join("extra.txt").exists());

    // A worker that committed on the branch itself: the branch goes back.
    fs::write(path.join("a.txt"), "worker commit\n").unwrap();
    p.in_wt(
        &wt,
        &[
            "-c",
            "user.name=w",
            "-c",
            "user.email=w@w",
            "commit",
            "-qam",
            "w",
        ],
    );
    let keep2 = "okstra-attempts/t/k/2";
    let sha2 = p
        .repo
        .keep_attempt(&wt, &p.base, keep2, "kept\n")
        .unwrap()
        .unwrap();
    assert_eq!(p.repo.branch_tip(keep2).unwrap(), Some(sha2));
    assert_eq!(p.repo.branch_tip(BRANCH).unwrap(), Some(p.base.clone()));
    p.assert_ready(&wt, &p.base);

    p.assert_untouched(&before);
}

/// Killed inside the `git reset --hard` that follows the keep, an attempt's
/// files are half back at the base; kept again (the resume), the first
/// keep stands: what it holds is not overwritten by the half.
#[test]
fn an_attempt_is_kept_once_however_often_its_keep_is_killed() {
    let p = project();
    let before = p.snapshot();
    let (path, wt) = p.worktree();
    let keep = "okstra-attempts/t/k/1";
    fs::write(path.join("a.txt"), "failed work\n").unwrap();
    fs::write(path.join("extra.txt"), "x\n").unwrap();
    let sha = p
        .repo
        .keep_attempt(&wt, &p.base, keep, "kept\n")
        .unwrap()
        .unwrap();
    // As a reset killed between its two files leaves it.
    fs::write(path.join("extra.txt"), "x\n").unwrap();
    assert_eq!(
        p.repo.keep_attempt(&wt, &p.base, keep, "kept\n").unwrap(),
        Some(sha.clone())
    );
    assert_eq!(p.repo.branch_tip(keep).unwrap(), Some(sha.clone()));
    assert_eq!(
        user_git(&p.top, &["show", &format!("{sha}:a.txt")]),
        "failed work"
    );
    p.assert_ready(&wt, &p.base);
    // And once the worktree is back: nothing more.
    assert_eq!(
        p.repo.keep_attempt(&wt, &p.base, keep, "kept\n").unwrap(),
        Some(sha.clone())
    );
    assert_eq!(p.repo.branch_tip(keep).unwrap(), Some(sha));
    p.assert_ready(&wt, &p.base);
    p.assert_untouched(&before);
}

#[test]
fn remove_keeps_the_branch_and_leaves_no_registration() {
    let p = project();
    let before = p.snapshot();
    let (path, wt) = p.worktree();
    fs::write(path.join("a.txt"), "uncommitted\n").unwrap();
    p.repo.remove_worktree(&wt).unwrap();
    assert!(!path.exists());
    assert!(!wt.admin_dir().exists());
    assert_eq!(p.repo.branch_tip(BRANCH).unwrap(), Some(p.base.clone()));
    assert!(p
        .repo
        .worktrees_under(&p.top.join(".okstra"))
        .unwrap()
        .is_empty());
    // Gone already, or half-made: fine.
    p.repo.remove_worktree(&wt).unwrap();
    let wt = p
        .repo
        .prepare_worktree(&path, BRANCH, "HEAD", false)
        .unwrap();
    fs::write(wt.admin_dir().join("locked"), "initializing").unwrap();
    p.repo.remove_worktree(&wt).unwrap();
    assert!(!path.exists() && !wt.admin_dir().exists());
    p.repo.prune().unwrap();
    let admins = fs::read_dir(p.top.join(".git/worktrees")).map_or(0, |d| d.count());
    assert_eq!(admins, 0);
    assert!(!p.repo.worktree_left_at(&path));

    // `git worktree remove` killed after the directory went, inside the
    // registration's removal (its `gitdir` gone): found, and removed.
    let wt = p
        .repo
        .prepare_worktree(&path, BRANCH, "HEAD", false)
        .unwrap();
    fs::remove_dir_all(&path).unwrap();
    fs::remove_file(wt.admin_dir().join("gitdir")).unwrap();
    assert!(p.repo.worktree_left_at(&path));
    p.repo.remove_worktree_at(&path, BRANCH).unwrap();
    assert!(!wt.admin_dir().exists());
    assert!(!p.repo.worktree_left_at(&path));
    // Another worktree's registration, and one whose name only begins
    // like it, stay.
    let other = p.wt_path("t", "k2x");
    let kept = p
        .repo
        .prepare_worktree(&other, "okstra/t/k2x", "HEAD", false)
        .unwrap();
    p.repo.remove_worktree_at(&path, BRANCH).unwrap();
    assert!(kept.admin_dir().join("gitdir").is_file());
    p.repo.remove_worktree(&kept).unwrap();
    p.assert_untouched(&before);
}

#[test]
fn dirty_paths_lists_changes_but_not_okstra_or_ignored() {
    let p = project();
    assert_eq!(
        p.repo.dirty_paths(&[".okstra/"]).unwrap(),
        Vec::<String>::new()
    );
    let path = p.wt_path("t", "k");
    p.repo
        .prepare_worktree(&path, BRANCH, "HEAD", false)
        .unwrap();
    fs::write(p.top.join(".okstra/run.json"), "{}").unwrap();
    fs::write(p.top.join("a.txt"), "unstaged\n").unwrap();
    fs::write(p.top.join("staged.txt"), "s\n").unwrap();
    user_git(&p.top, &["add", "staged.txt"]);
    fs::remove_file(p.top.join("src/b.rs")).unwrap();
    fs::create_dir_all(p.top.join("new dir")).unwrap();
    fs::write(p.top.join("new dir/untracked é.txt"), "u\n").unwrap();
    fs::create_dir_all(p.top.join("target")).unwrap();
    fs::write(p.top.join("target/ignored"), "i\n").unwrap();
    let index = fs::read(p.top.join(".git/index")).unwrap();
    assert_eq!(
        p.repo.dirty_paths(&[".okstra/"]).unwrap(),
        ["a.txt", "new dir/untracked é.txt", "src/b.rs", "staged.txt"]
    );
    assert!(p
        .repo
        .dirty_paths(&[])
        .unwrap()
        .iter()
        .any(|p| p.starts_with(".okstra/")));
    assert_eq!(fs::read(p.top.join(".git/index")).unwrap(), index);
}

#[test]
fn index_commit_holds_the_index_and_writes_no_ref() {
    let p = project();
    fs::write(p.top.join("a.txt"), "staged\n").unwrap();
    user_git(&p.top, &["add", "a.txt"]);
    fs::write(p.top.join("a.txt"), "unstaged on top\n").unwrap();
    let before = p.snapshot();
    let sha = p.repo.index_commit().unwrap();
    assert!(p.repo.commit_exists(&sha));
    assert_eq!(p.repo.resolve_commit(&format!("{sha}^")).unwrap(), p.base);
    let blob = p
        .repo
        .call()
        .args(["show", &format!("{sha}:a.txt")])
        .text()
        .unwrap();
    assert_eq!(blob, "staged");
    assert_eq!(p.repo.head().unwrap(), p.base);
    assert_eq!(p.snapshot(), before);
    // Same index, same HEAD: same commit.
    assert_eq!(p.repo.index_commit().unwrap(), sha);
    p.no_hook_ran();
}

#[test]
fn lookups() {
    let p = project();
    assert_eq!(p.repo.top(), p.top);
    assert_eq!(p.repo.common_dir(), p.top.join(".git"));
    assert_eq!(p.repo.resolve_commit("main").unwrap(), p.base);
    assert!(p.repo.resolve_commit("no-such-rev").is_err());
    assert!(p.repo.commit_exists(&p.base));
    assert!(!p.repo.commit_exists(&"0".repeat(40)));
    assert!(!p.repo.commit_exists("--all"));
    assert_eq!(p.repo.branch_tip("main").unwrap(), Some(p.base.clone()));
    assert_eq!(p.repo.branch_tip("nope").unwrap(), None);
    // From a subdirectory, the same repository.
    assert_eq!(
        Repo::find(&p.top.join("src")).unwrap(),
        Some(p.repo.clone())
    );
    let outside = tempfile::tempdir().unwrap();
    assert_eq!(Repo::find(outside.path()).unwrap(), None);
    assert!(git_version().unwrap().starts_with("2."));
}

#[test]
fn env_loses_the_callers_git_variables() {
    let env = hermetic_env([
        ("GIT_DIR".into(), "/elsewhere".into()),
        ("GIT_INDEX_FILE".into(), "/x".into()),
        ("GIT_CONFIG_COUNT".into(), "1".into()),
        ("LC_ALL".into(), "fr_FR.UTF-8".into()),
        ("HOME".into(), "/home/u".into()),
    ]);
    let get = |k: &str| {
        env.iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    assert!(get("GIT_DIR").is_empty() && get("GIT_INDEX_FILE").is_empty());
    assert!(get("GIT_CONFIG_COUNT").is_empty());
    assert_eq!(get("LC_ALL"), ["C"]);
    assert_eq!(get("GIT_TERMINAL_PROMPT"), ["0"]);
    assert_eq!(get("HOME"), ["/home/u"]);
}

/// The pure name rules agree with `git check-ref-format --branch`.
#[test]
fn names_git_accepts() {
    let check = |name: &str| {
        Call::discover(&std::env::temp_dir())
            .args(["check-ref-format", "--branch", name])
            .run()
            .is_ok()
    };
    for name in [
        "okstra/t/k",
        "a",
        "a.b",
        "-a",
        "a..b",
        "a/.b",
        "a.lock",
        "a/b.lock/c",
        "a.",
        "a/",
        "/a",
        "a//b",
        "a b",
        "a~b",
        "a^b",
        "a:b",
        "a?b",
        "a*b",
        "a[b",
        "a\\b",
        "a@{b",
        "a\tb",
        "a%b",
        "é",
        "okstra-attempts/t/k/1",
    ] {
        assert_eq!(branch_name_ok(name), check(name), "{name:?}");
    }
    // `--branch` reads `@` as the current branch; a name of ours never is.
    assert!(!branch_name_ok("@") && !branch_name_ok("HEAD"));
    let keys = [
        "",
        ".",
        "..",
        "...",
        "-x",
        "a/b",
        "a%2Fb",
        "x.lock",
        "x.",
        ".x",
        "a b",
        "é:ü",
        "@{u}",
        "@",
        "a..b",
        "plain_key-1.2",
        &"long/".repeat(60),
        &"k".repeat(200),
    ];
    let mut seen = std::collections::HashSet::new();
    for key in keys {
        let c = ref_component(key);
        assert!(!c.contains('/') && c.len() <= 120, "{key:?} -> {c}");
        let branch = format!("okstra/{c}/{c}");
        assert!(
            branch_name_ok(&branch) && check(&branch),
            "{key:?} -> {branch}"
        );
        assert!(seen.insert(c.clone()), "{key:?} -> {c} twice");
        assert_eq!(ref_component(key), c);
    }
    assert_eq!(ref_component("plain_key-1.2"), "plain_key-1.2");
    assert_eq!(ref_component("a/b"), "a%2Fb");
}

#[test]
fn trailer_blocks() {
    assert_eq!(
        trailers(&[("Okstra-Task", "t"), ("Bad Key:", "two\nlines ")]),
        "Okstra-Task: t\nBad-Key-: two lines\n"
    );
    assert_eq!(message_with_trailers("", &[("K", "v")]), "okstra\n\nK: v\n");
}

/// A lock some running git may hold is refused, not removed.
#[test]
fn a_lock_near_a_live_git_is_refused() {
    let p = project();
    let (path, wt) = p.worktree();
    let lock = wt.admin_dir().join("index.lock");
    fs::write(&lock, "").unwrap();
    // A git that waits on its stdin, working in the worktree.
    let mut live = std::process::Command::new("git")
        .args(["cat-file", "--batch"])
        .current_dir(&path)
        .env("GIT_DIR", wt.admin_dir())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let err = p.repo.prepare_worktree(&path, BRANCH, "HEAD", false);
    drop(live.stdin.take());
    live.wait().unwrap();
    assert!(matches!(err, Err(GitError::LockBusy { .. })), "{err:?}");
    assert!(lock.exists());
    // Once it has gone, the lock is stale.
    p.repo
        .prepare_worktree(&path, BRANCH, "HEAD", false)
        .unwrap();
    assert!(!lock.exists());

    // A git about to finish (one an exec killed alone left running, found
    // by the next exec): waited for, not refused.
    fs::write(&lock, "").unwrap();
    let mut short = std::process::Command::new("git")
        .args(["-c", "alias.nap=!sleep 0.5", "nap"])
        .current_dir(&path)
        .env("GIT_DIR", wt.admin_dir())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let waited = p.repo.prepare_worktree(&path, BRANCH, "HEAD", false);
    short.wait().unwrap();
    waited.unwrap();
    assert!(!lock.exists());
}
