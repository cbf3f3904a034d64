//! The user's git, as the worktree suites drive it around okstra: away
//! from the user's and the system's config, without optional locks (a
//! read never rewrites the index it looks at), committing as a fixed
//! person.

use std::path::Path;
use std::process::Command;

/// `git ARGS` in `dir`, which must succeed; its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_AUTHOR_NAME", "user")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "user")
        .env("GIT_COMMITTER_EMAIL", "user@example.com")
        .args(args)
        .output()
        .expect("git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `root` made a repository on `main` holding everything in it, in one
/// commit; that commit.
pub fn commit_project(root: &Path) -> String {
    git(root, &["init", "-q", "-b", "main"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "the project"]);
    git(root, &["rev-parse", "HEAD"])
}

/// Everything of the user's checkout a worktree job must not touch: `HEAD`
/// (the file and what it names), the index byte for byte, the config, the
/// status, `main`, and each tracked file.
pub fn checkout(root: &Path) -> Vec<String> {
    let read =
        |rel: &str| String::from_utf8_lossy(&std::fs::read(root.join(rel)).unwrap()).into_owned();
    let index = std::fs::read(root.join(".git/index")).unwrap();
    let mut out = vec![
        read(".git/HEAD"),
        git(root, &["rev-parse", "HEAD"]),
        format!("{index:?}"),
        read(".git/config"),
        git(root, &["status", "--porcelain=v1", "--untracked-files=all"]),
        git(
            root,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/heads/main",
            ],
        ),
    ];
    for f in git(root, &["ls-files"]).lines() {
        out.push(format!("{f}: {}", read(f)));
    }
    out
}

/// The value of trailer `key` in `commit`'s message.
pub fn trailer(root: &Path, commit: &str, key: &str) -> String {
    git(
        root,
        &[
            "show",
            "-s",
            &format!("--format=%(trailers:key={key},valueonly)"),
            commit,
        ],
    )
}
