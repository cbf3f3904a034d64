//! What a confined worker may read and run (docs/confinement.md#reads),
//! besides the directories it may write (its write scopes, its private
//! TMPDIR, its CLI's private state), which it may read too.
//!
//! The project root; the system's locations; the directories of its PATH
//! and the installation its program belongs to; the few files of the
//! user's home that common tools read (found by running them confined);
//! and the spec's `readPaths`. Not `$HOME` at large: `~/.ssh`, `~/.aws`,
//! `~/.gnupg`, `~/.netrc` and other projects stay out of reach.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The system's locations every program needs: its libraries,
/// configuration, devices and the kernel's views.
pub const SYSTEM: [&str; 14] = [
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/nix/store",
];

/// Under `$HOME`, what tools read and what holds no secret: git's
/// configuration, and the toolchains that version managers install there
/// (rustup and cargo's, not cargo's credentials; pyenv, pip's user
/// installs; nvm, volta, bun, deno; mise; Go's module cache).
pub const HOME_FILES: [&str; 19] = [
    ".gitconfig",
    ".config/git",
    ".gitignore_global",
    ".rustup",
    ".cargo/bin",
    ".cargo/registry",
    ".cargo/git",
    ".cargo/config.toml",
    ".pyenv",
    ".local/bin",
    ".local/lib",
    ".nvm/versions",
    ".nvm/alias",
    ".volta",
    ".bun/bin",
    ".deno/bin",
    ".local/share/mise/installs",
    "go/pkg/mod",
    "go/bin",
];

/// The scope in a few words, for the review, doctor and a worker's log.
pub const SUMMARY: &str =
    "the project, its write directories, the system, its PATH and installation, named home files";

/// What a confined job with `read_paths` may read, in a few words.
pub fn describe(read_paths: &[String]) -> String {
    if read_paths.iter().any(|p| p == "/") {
        return "every file (readPaths has `/`)".into();
    }
    match read_paths {
        [] => SUMMARY.to_string(),
        paths => format!("{SUMMARY}, and {}", paths.join(", ")),
    }
}

/// What the read scope is made from.
pub struct Inputs<'a> {
    pub root: &'a Path,
    pub home: Option<&'a Path>,
    /// The worker's PATH.
    pub path: Option<&'a OsStr>,
    /// The program the worker runs (`claude`, or a command's `argv[0]`).
    pub program: Option<&'a str>,
    /// The spec's `readPaths`: `~/` is the home, relative is the project's.
    pub read_paths: &'a [String],
}

/// A path of the read scope, opened for its Landlock rule.
#[derive(Debug)]
pub struct Opened {
    pub path: PathBuf,
    pub fd: OwnedFd,
    pub is_dir: bool,
}

/// Each of `paths` that exists, opened: from this process's cache where an
/// earlier attempt opened it (a slot's wrapper confines many attempts with
/// the same scope), else now. One that does not exist is tried again next
/// time, so a directory made later is granted from then on.
pub fn open_all(paths: &[PathBuf]) -> Vec<Arc<Opened>> {
    static OPENED: OnceLock<Mutex<HashMap<PathBuf, Arc<Opened>>>> = OnceLock::new();
    let mut cache = OPENED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut out = Vec::with_capacity(paths.len());
    for path in paths {
        if let Some(opened) = cache.get(path) {
            out.push(Arc::clone(opened));
            continue;
        }
        let Ok(fd) = super::open_path(path) else {
            continue;
        };
        let is_dir = rustix::fs::fstat(&fd)
            .map(|s| rustix::fs::FileType::from_raw_mode(s.st_mode).is_dir())
            .unwrap_or(false);
        let opened = Arc::new(Opened {
            path: path.clone(),
            fd,
            is_dir,
        });
        cache.insert(path.clone(), Arc::clone(&opened));
        out.push(opened);
    }
    out
}

/// [`scope`], worked out once per process for the same inputs: the PATH's
/// real paths and the program's installation take a few dozen system
/// calls, the same for every attempt of a slot's wrapper.
pub fn scope_cached(inputs: &Inputs) -> Option<Vec<PathBuf>> {
    type Key = (
        PathBuf,
        Option<PathBuf>,
        Option<std::ffi::OsString>,
        Option<String>,
        Vec<String>,
    );
    static SCOPES: OnceLock<Mutex<HashMap<Key, Option<Vec<PathBuf>>>>> = OnceLock::new();
    let key: Key = (
        inputs.root.to_path_buf(),
        inputs.home.map(Path::to_path_buf),
        inputs.path.map(OsStr::to_os_string),
        inputs.program.map(str::to_string),
        inputs.read_paths.to_vec(),
    );
    let mut cache = SCOPES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache.entry(key).or_insert_with(|| scope(inputs)).clone()
}

/// The paths a confined worker may read and run, besides those it may
/// write: `None` when reads are not to be confined at all (a `readPaths`
/// entry of `/`). Paths that do not exist here are left in: the ruleset
/// leaves them out as it opens them.
pub fn scope(inputs: &Inputs) -> Option<Vec<PathBuf>> {
    let mut paths: Vec<PathBuf> = vec![inputs.root.to_path_buf()];
    paths.extend(SYSTEM.iter().map(PathBuf::from));
    if let Some(home) = inputs.home {
        paths.extend(HOME_FILES.iter().map(|f| home.join(f)));
    }
    paths.extend(path_dirs(inputs.path, inputs.home));
    if let Some(program) = inputs.program {
        paths.extend(installation(program, inputs.path, inputs.root));
    }
    for p in inputs.read_paths {
        let p = resolve(p, inputs.root, inputs.home)?;
        if p == Path::new("/") {
            return None;
        }
        paths.push(p);
    }
    paths.sort();
    paths.dedup();
    Some(paths)
}

/// A `readPaths` entry as a path: `~/x` under the home, a relative one
/// under the project root. `Some("/")` opens reads again.
fn resolve(p: &str, root: &Path, home: Option<&Path>) -> Option<PathBuf> {
    if p == "~" {
        return home.map(Path::to_path_buf);
    }
    match p.strip_prefix("~/") {
        Some(rest) => home.map(|h| h.join(rest)),
        None => Some(root.join(p)),
    }
}

/// The real paths of the PATH's absolute directories, except those that
/// would open the home at large (`/`, the home or an ancestor of it).
fn path_dirs(path: Option<&OsStr>, home: Option<&Path>) -> Vec<PathBuf> {
    let Some(path) = path else {
        return Vec::new();
    };
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .filter_map(|d| d.canonicalize().ok())
        .filter(|d| !too_wide(d, home))
        .collect()
}

fn too_wide(dir: &Path, home: Option<&Path>) -> bool {
    dir == Path::new("/") || home.is_some_and(|h| h.starts_with(dir))
}

/// Where `program` is installed: for a program inside a `node_modules`
/// tree (an npm install, as the agent CLIs are), the outermost
/// `node_modules`, since its package's dependencies may sit beside it;
/// else the directory its real path is in.
fn installation(program: &str, path: Option<&OsStr>, root: &Path) -> Option<PathBuf> {
    let found = find_program(program, path, root)?.canonicalize().ok()?;
    let outermost = found
        .ancestors()
        .filter(|a| a.file_name() == Some(OsStr::new("node_modules")))
        .last();
    outermost
        .map(Path::to_path_buf)
        .or_else(|| found.parent().map(Path::to_path_buf))
}

/// `program` as the worker's PATH finds it (one with a slash is taken
/// from the project root, or as it is when absolute).
pub fn find_program(program: &str, path: Option<&OsStr>, root: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let p = root.join(program);
        return p.is_file().then_some(p);
    }
    std::env::split_paths(path?)
        .filter(|d| d.is_absolute())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_holds_the_project_system_and_named_home_files_only() {
        let home = Path::new("/home/u");
        let got = scope(&Inputs {
            root: Path::new("/work/p"),
            home: Some(home),
            path: None,
            program: None,
            read_paths: &["~/data".into(), "vendor".into(), "/srv/x".into()],
        })
        .unwrap();
        for wanted in [
            "/work/p",
            "/usr",
            "/etc",
            "/home/u/.gitconfig",
            "/home/u/data",
            "/work/p/vendor",
            "/srv/x",
        ] {
            assert!(got.contains(&PathBuf::from(wanted)), "{wanted}: {got:?}");
        }
        // The provider's state is the attempt's private copy, granted as
        // a directory it writes: never the user's.
        for secret in [
            "/home/u",
            "/home/u/.ssh",
            "/home/u/.aws",
            "/home/u/.cargo",
            "/home/u/.claude.json",
            "/home/u/.claude",
        ] {
            assert!(!got.contains(&PathBuf::from(secret)), "{secret}");
        }
    }

    #[test]
    fn read_paths_of_slash_open_reads_again() {
        let inputs = |read: &[String]| {
            scope(&Inputs {
                root: Path::new("/p"),
                home: None,
                path: None,
                program: None,
                read_paths: read,
            })
        };
        assert!(inputs(&["/".into()]).is_none());
        assert!(inputs(&["/usr/share".into()]).is_some());
    }

    #[test]
    fn a_path_entry_that_would_open_the_home_is_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let bin = home.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let path = std::env::join_paths([home.clone(), bin.clone(), "relative".into(), "/".into()])
            .unwrap();
        let got = path_dirs(Some(&path), Some(&home.canonicalize().unwrap()));
        assert_eq!(got, vec![bin.canonicalize().unwrap()]);
    }

    #[test]
    fn an_npm_program_grants_its_outermost_node_modules() {
        let dir = tempfile::tempdir().unwrap();
        let modules = dir.path().join("cli/node_modules");
        let package = modules.join("@vendor/agent");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(package.join("cli.js"), "").unwrap();
        let bin = modules.join(".bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink("../@vendor/agent/cli.js", bin.join("agent")).unwrap();
        let path = std::env::join_paths([bin]).unwrap();
        let got = installation("agent", Some(&path), dir.path()).unwrap();
        assert_eq!(got, modules.canonicalize().unwrap());
        // A program outside any node_modules: its own directory.
        let sh = installation("sh", Some(OsStr::new("/bin:/usr/bin")), dir.path()).unwrap();
        assert!(sh.ends_with("bin"), "{}", sh.display());
    }
}
