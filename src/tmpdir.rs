//! An attempt's private directory, which holds a confined worker's
//! `TMPDIR` (docs/confinement.md#its-private-tmpdir) and an agent CLI's
//! private state (docs/confinement.md#provider-state): where it lives, who
//! makes it, and how it goes, however the attempt ended. (Called the
//! TMPDIR below, as it was first.)
//!
//! Every one lives in `<system temp>/okstra-<uid>` ([`Root`]), a directory
//! of this user's alone (mode 0700, reached without a symlink: `/tmp` is
//! shared, and another user may plant the name first). exec names each
//! attempt's TMPDIR after the run and the attempt ([`attempt_name`]),
//! hands it to the wrapper (`--tmp-dir`), records it on the dispatch, and
//! removes it once it has settled the attempt. That covers a wrapper that
//! cleaned up nothing: one killed by the SIGKILL that ends exec's stop of a
//! worker ignoring SIGTERM, or by `kill -9`. The wrapper makes the
//! directory when it confines its worker or runs an agent CLI, and removes it as soon as the
//! worker ended, so a finished attempt holds no disk until its batch
//! settles; a wrapper run by hand names its own ([`own_name`]) and is its
//! only remover.
//!
//! Removal never follows a symlink out of the directory
//! ([`crate::beneath::remove_tree_at`]), and exec removes only a directory
//! named as it expects, in a root that is this user's: a record naming any
//! other directory is refused, never acted on.

use crate::beneath::remove_tree_at;
use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The directory holding this user's private TMPDIRs, opened and checked.
#[derive(Debug)]
pub struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

/// The root's name: `okstra-<uid>`.
pub fn root_name() -> String {
    format!("okstra-{}", rustix::process::geteuid().as_raw())
}

impl Root {
    /// The root under the system temp directory (`$TMPDIR`, else `/tmp`),
    /// made when missing; never inside `project` (a TMPDIR there would let
    /// the worker write in the project).
    pub fn system(project: &Path) -> io::Result<Root> {
        Root::made_in(&system_base(project))
    }

    /// `<base>/okstra-<uid>`, made (mode 0700) when missing, then checked.
    pub fn made_in(base: &Path) -> io::Result<Root> {
        let path = base.join(root_name());
        // Nearly always there already (every wrapper of a run opens it):
        // made only when missing.
        if let Some(root) = Root::existing(&path)? {
            return Ok(root);
        }
        // mkdir never follows a symlink at its last component: one planted
        // there since is `EEXIST`, and the check below refuses it.
        match rustix::fs::mkdir(&path, Mode::RWXU) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(error(&path, "cannot make", e.into())),
        }
        Root::existing(&path)?.ok_or_else(|| {
            error(
                &path,
                "cannot open",
                io::Error::from(io::ErrorKind::NotFound),
            )
        })
    }

    /// The root at `path` as it is, checked: `None` when there is none.
    /// It must be a directory reached without a symlink at its last
    /// component, owned by this user; one others may enter is closed to
    /// them (it is ours: the entries in it are checked one by one anyway).
    pub fn existing(path: &Path) -> io::Result<Option<Root>> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = match rustix::fs::open(path, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(Errno::LOOP | Errno::NOTDIR) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} is a symlink or not a directory: okstra's temp root must be a directory of this user's",
                        path.display()
                    ),
                ))
            }
            Err(e) => return Err(error(path, "cannot open", e.into())),
        };
        let stat = rustix::fs::fstat(&fd).map_err(|e| error(path, "cannot stat", e.into()))?;
        let me = rustix::process::geteuid().as_raw();
        if stat.st_uid != me {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "{} belongs to uid {}, not to this user (uid {me}): okstra's temp root must be this user's",
                    path.display(),
                    stat.st_uid
                ),
            ));
        }
        if stat.st_mode & 0o077 != 0 {
            rustix::fs::fchmod(&fd, Mode::RWXU)
                .map_err(|e| error(path, "cannot close to others", e.into()))?;
        }
        Ok(Some(Root {
            fd,
            path: path.to_path_buf(),
        }))
    }

    /// The root of the private TMPDIR `dir` (`<base>/okstra-<uid>/<name>`),
    /// made when missing, and the name: `InvalidInput` for a path of any
    /// other shape.
    pub fn of(dir: &Path) -> io::Result<(Root, String)> {
        let (base, name) = split(dir)?;
        Ok((Root::made_in(base)?, name))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make the private TMPDIR `name` (mode 0700); `AlreadyExists` when
    /// something is there already.
    pub fn create(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.path.join(plain(name)?);
        rustix::fs::mkdirat(&self.fd, name, Mode::RWXU)
            .map_err(|e| error(&path, "cannot make", e.into()))?;
        Ok(path)
    }

    /// Remove the private TMPDIR `name` and everything in it, never
    /// following a symlink; whether anything was there.
    pub fn remove(&self, name: &str) -> io::Result<bool> {
        let name = plain(name)?;
        // Nearly always it is empty (a trivial job's) or gone already (the
        // wrapper removed it before exec looks): one rmdir, which follows
        // no symlink and removes only an empty directory, says so. The walk
        // is for a directory with something left in it, or anything else
        // at the name.
        match rustix::fs::unlinkat(&self.fd, name, AtFlags::REMOVEDIR) {
            Ok(()) => return Ok(true),
            Err(Errno::NOENT) => return Ok(false),
            Err(_) => {}
        }
        remove_tree_at(self.fd.as_fd(), OsStr::new(name))
            .map_err(|e| io::Error::new(e.kind(), format!("in {}: {e}", self.path.display())))
    }

    /// [`remove_recorded`] through this root, already opened and checked,
    /// when `recorded` lies in it (exec's own runs); else as
    /// [`remove_recorded`] does, from the path.
    pub fn remove_recorded(&self, recorded: &Path, expected: &str) -> io::Result<bool> {
        if recorded.parent() != Some(self.path.as_path()) {
            return remove_recorded(recorded, expected);
        }
        if recorded.file_name() != Some(OsStr::new(expected)) {
            return Err(not_this_attempts(recorded, expected));
        }
        self.remove(expected)
    }
}

/// Remove the private TMPDIR `recorded` on an attempt's dispatch, which
/// exec expects to be named `expected`: a record naming anything else is
/// refused, and nothing is removed. Whether anything was there.
pub fn remove_recorded(recorded: &Path, expected: &str) -> io::Result<bool> {
    let (base, name) = split(recorded)?;
    if name != expected {
        return Err(not_this_attempts(recorded, expected));
    }
    match Root::existing(&base.join(root_name()))? {
        Some(root) => root.remove(&name),
        None => Ok(false),
    }
}

fn not_this_attempts(recorded: &Path, expected: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is not this attempt's TMPDIR (expected one named {expected}): not removed",
            recorded.display()
        ),
    )
}

/// The name of an attempt's private TMPDIR, from what exec knows of it:
/// the run (its project root and team-state) and the job's state key and
/// attempt. Readable (the key cut to plain characters) and unique to the
/// attempt (a digest of all of them).
pub fn attempt_name(project: &Path, team_state: &Path, worker_key: &str, attempt: u64) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut input = Vec::new();
    for part in [
        project.as_os_str().as_bytes(),
        team_state.as_os_str().as_bytes(),
        worker_key.as_bytes(),
    ] {
        input.extend_from_slice(part);
        input.push(0);
    }
    let digest = crate::canonical::sha256_hex(&input);
    let slug: String = worker_key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{slug}-{}-a{attempt}", &digest[..16])
}

/// A fresh name for the TMPDIR of a wrapper run by hand (no exec names it).
pub fn own_name() -> String {
    format!("by-hand-{}", uuid::Uuid::new_v4().simple())
}

/// The system temp directory, made canonical, unless it lies inside
/// `project`: then `/tmp`.
fn system_base(project: &Path) -> PathBuf {
    let project = project
        .canonicalize()
        .unwrap_or_else(|_| project.to_path_buf());
    match std::env::temp_dir().canonicalize() {
        Ok(real) if !real.starts_with(&project) => real,
        _ => PathBuf::from("/tmp"),
    }
}

/// `<base>/okstra-<uid>/<name>` into base and name.
fn split(dir: &Path) -> io::Result<(&Path, String)> {
    let shape = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a private TMPDIR of okstra's (`<temp>/{}/<name>`)",
                dir.display(),
                root_name()
            ),
        )
    };
    let name = dir.file_name().and_then(OsStr::to_str).ok_or_else(shape)?;
    let root = dir.parent().ok_or_else(shape)?;
    let base = root.parent().ok_or_else(shape)?;
    if !dir.is_absolute() || root.file_name() != Some(OsStr::new(&root_name())) {
        return Err(shape());
    }
    Ok((base, plain(name).map_err(|_| shape())?.to_string()))
}

/// `name` when it is one plain component: letters, digits, `-`, `_`, `.`,
/// not starting with a dot.
fn plain(name: &str) -> io::Result<&str> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(name)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("`{name}` is not a plain TMPDIR name"),
        ))
    }
}

fn error(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    fn base() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn the_root_is_made_private_and_reused() {
        let b = base();
        let root = Root::made_in(b.path()).unwrap();
        assert_eq!(root.path(), b.path().join(root_name()));
        let mode = std::fs::metadata(root.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "{mode:o}");
        // Opened up by someone (a worker may chmod what it can reach): closed again.
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let again = Root::made_in(b.path()).unwrap();
        let mode = std::fs::metadata(again.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "{mode:o}");
    }

    #[test]
    fn a_planted_root_symlink_is_refused_and_nothing_lands_behind_it() {
        let b = base();
        let elsewhere = b.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        symlink(&elsewhere, b.path().join(root_name())).unwrap();
        let err = Root::made_in(b.path()).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        let err = remove_recorded(&b.path().join(root_name()).join("x-a1"), "x-a1").unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    #[test]
    fn an_attempts_tmpdir_is_made_once_and_removed_whole() {
        let b = base();
        let root = Root::made_in(b.path()).unwrap();
        let name = attempt_name(Path::new("/p"), Path::new("/p/run/t.json"), "w/1 x", 2);
        assert!(
            name.starts_with("w_1_x-") && name.ends_with("-a2"),
            "{name}"
        );
        let dir = root.create(&name).unwrap();
        let err = root.create(&name).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), "x").unwrap();
        assert!(remove_recorded(&dir, &name).unwrap());
        assert!(!dir.exists());
        assert!(!remove_recorded(&dir, &name).unwrap(), "nothing left");
    }

    #[test]
    fn removal_takes_an_empty_a_full_or_a_missing_tmpdir_and_only_unlinks_a_symlink() {
        let b = base();
        let root = Root::made_in(b.path()).unwrap();
        root.create("empty-a1").unwrap();
        assert!(root.remove("empty-a1").unwrap());
        assert!(!root.remove("empty-a1").unwrap(), "nothing left");
        let full = root.create("full-a1").unwrap();
        std::fs::create_dir_all(full.join("a/b")).unwrap();
        std::fs::write(full.join("a/b/f"), "x").unwrap();
        assert!(root.remove("full-a1").unwrap());
        assert!(!full.exists());
        // Something else at the name: a symlink goes, never what it names.
        let elsewhere = b.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("keep"), "x").unwrap();
        symlink(&elsewhere, root.path().join("link-a1")).unwrap();
        assert!(root.remove("link-a1").unwrap());
        assert!(!root.path().join("link-a1").exists());
        assert!(elsewhere.join("keep").is_file());
    }

    #[test]
    fn an_opened_root_removes_its_own_record_and_refuses_another() {
        let b = base();
        let root = Root::made_in(b.path()).unwrap();
        let dir = root.create("mine-a1").unwrap();
        let err = root.remove_recorded(&dir, "mine-a2").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        let err = root
            .remove_recorded(&root.path().join(".."), "..")
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        assert!(dir.is_dir());
        assert!(root.remove_recorded(&dir, "mine-a1").unwrap());
        assert!(!dir.exists());
        // A record in another root is judged from its path, as without one.
        let other = base();
        let theirs = Root::made_in(other.path()).unwrap().create("x-a1").unwrap();
        assert!(root.remove_recorded(&theirs, "x-a1").unwrap());
        let err = root
            .remove_recorded(&other.path().join("home"), "home")
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
    }

    #[test]
    fn a_record_naming_another_directory_is_refused() {
        let b = base();
        let root = Root::made_in(b.path()).unwrap();
        let victim = root.create("other-a1").unwrap();
        let home = b.path().join("home");
        std::fs::create_dir(&home).unwrap();
        for (recorded, expected) in [
            (victim.clone(), "mine-a1"),
            (home.clone(), "home"),
            (b.path().join(root_name()).join("../home"), "home"),
            (PathBuf::from("okstra-0/x-a1"), "x-a1"),
            (b.path().join(root_name()).join(".hidden"), ".hidden"),
        ] {
            let err = remove_recorded(&recorded, expected).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{err}");
        }
        assert!(victim.is_dir() && home.is_dir());
    }

    #[test]
    fn names_are_stable_and_tell_attempts_and_runs_apart() {
        let n = |t: &str, k: &str, a| attempt_name(Path::new("/p"), Path::new(t), k, a);
        assert_eq!(n("/p/t", "k", 1), n("/p/t", "k", 1));
        assert_ne!(n("/p/t", "k", 1), n("/p/t", "k", 2));
        assert_ne!(n("/p/t", "k", 1), n("/p/u", "k", 1));
        assert_ne!(n("/p/t", "k", 1), n("/p/t", "j", 1));
        assert!(plain(&own_name()).is_ok());
    }
}
