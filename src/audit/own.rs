//! okstra's own files in the audited tree.
//!
//! The orchestrator's files (team-state and its lock, the exec lock, the
//! events log and its lock, the error log, the snapshot sidecars) change
//! while a stage runs because exec writes them, so no write policy can judge
//! them: the walk leaves them out ([`Excluded`]), and the executor checks
//! them against what it wrote itself ([`file_fingerprint`],
//! docs/audit.md#okstras-own-files).
//!
//! Left out with each of them: the temporary files [`crate::fsutil::write_atomic`]
//! makes beside it, `.<name>.<pid>.<hex>.tmp`. A write is a temporary file
//! renamed over the real one; an exec killed in between leaves the
//! temporary behind, and that must not fail the next stage as a change
//! nobody made.

use super::error::{AuditError, Step};
use super::name;
use rustix::fd::OwnedFd;
use rustix::fs::{self as rfs, FileType, Mode, OFlags, CWD};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// The excluded names of one directory and, by name, of the directories
/// below it: the walk carries its node down as it descends, so exclusion
/// costs one lookup per directory, not one per entry against a list.
#[derive(Debug, Default)]
pub(crate) struct Excluded {
    names: HashSet<Vec<u8>>,
    below: HashMap<Vec<u8>, Excluded>,
}

impl Excluded {
    /// Leave out the entry at `components` (relative to the walked root,
    /// the last one its name).
    pub(crate) fn insert(&mut self, components: &[&[u8]]) {
        let Some((name, dirs)) = components.split_last() else {
            return;
        };
        let mut node = self;
        for d in dirs {
            node = node.below.entry(d.to_vec()).or_default();
        }
        node.names.insert(name.to_vec());
    }

    /// The node for the subdirectory `name`, if anything below it is left
    /// out.
    pub(crate) fn child(&self, name: &[u8]) -> Option<&Excluded> {
        self.below.get(name)
    }

    /// Whether the entry `name` of this directory is left out.
    pub(crate) fn leaves_out(&self, name: &[u8]) -> Leave {
        if self.names.is_empty() {
            Leave::In
        } else if self.names.contains(name) {
            Leave::Out
        } else if own_temp_of(name).is_some_and(|n| self.names.contains(n)) {
            // Only what `write_atomic` makes: a directory of that name
            // could hide anything below it.
            Leave::OutIfFile
        } else {
            Leave::In
        }
    }
}

/// What the walk does with one entry of a directory holding own files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leave {
    In,
    Out,
    /// Out if it is a regular file: an own file's temporary.
    OutIfFile,
}

/// `name` of `.<name>.<pid>.<hex>.tmp`, the temporary file
/// `fsutil::write_atomic` writes before renaming it over `name`.
pub(crate) fn own_temp_of(file: &[u8]) -> Option<&[u8]> {
    let inner = file.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    let dot = inner.iter().rposition(|&b| b == b'.')?;
    let (rest, hex) = (&inner[..dot], &inner[dot + 1..]);
    if hex.is_empty() || !hex.iter().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let dot = rest.iter().rposition(|&b| b == b'.')?;
    let (name, pid) = (&rest[..dot], &rest[dot + 1..]);
    if name.is_empty() || pid.is_empty() || !pid.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(name)
}

/// What a file holds, as the executor compares it with what it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint {
    pub len: u64,
    pub sha256: [u8; 32],
}

impl Fingerprint {
    /// The fingerprint of bytes the executor wrote.
    pub fn of(bytes: &[u8]) -> Fingerprint {
        Fingerprint {
            len: bytes.len() as u64,
            sha256: Sha256::digest(bytes).into(),
        }
    }
}

/// The fingerprint of a file exec only appends to (the events log, the
/// error log), kept up to date line by line so that checking it never
/// means trusting the file's current content.
#[derive(Debug, Clone, Default)]
pub struct RunningFingerprint {
    len: u64,
    hasher: Sha256,
}

impl RunningFingerprint {
    pub fn update(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        self.hasher.update(bytes);
    }

    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint {
            len: self.len,
            sha256: self.hasher.clone().finalize().into(),
        }
    }
}

/// The fingerprint of the file at `path` now. The path is opened one
/// component at a time, none followed if it is a symlink
/// (docs/exec.md#never-through-a-symlink: a symlink among okstra's own paths is
/// an error, never a redirect), and the file must be a regular file. `..` is
/// refused: the executor passes the paths it resolved itself.
pub fn file_fingerprint(path: &Path) -> Result<Fingerprint, AuditError> {
    let shown = || name::escape(path.as_os_str().as_bytes()).into_owned();
    let fail = |e: io::Error| AuditError::new(Step::Hash, shown(), e);
    let mut f = open_own(path).map_err(fail)?;
    let mut h = Sha256::new();
    let mut len = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(e)),
        };
        h.update(&buf[..n]);
        len += n as u64;
    }
    Ok(Fingerprint {
        len,
        sha256: h.finalize().into(),
    })
}

/// Open one of okstra's own files to read it: as [`file_fingerprint`]
/// does, no symlink followed on the way and only a regular file.
pub fn open_own(path: &Path) -> io::Result<std::fs::File> {
    let file = open_no_symlinks(path)?;
    let st = rfs::fstat(&file)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(std::fs::File::from(file))
}

fn open_no_symlinks(path: &Path) -> io::Result<OwnedFd> {
    let mut comps = path.components().peekable();
    let mut dir: Option<OwnedFd> = None;
    let walk = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    while let Some(c) = comps.next() {
        let name: &[u8] = match c {
            Component::RootDir => {
                dir = Some(rfs::open("/", walk, Mode::empty())?);
                continue;
            }
            Component::CurDir => continue,
            Component::Normal(n) => n.as_bytes(),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a path with `..` is refused",
                ))
            }
        };
        let last = comps.peek().is_none();
        let flags = if last {
            // NONBLOCK: a FIFO put in the file's place must not hang exec.
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC
        } else {
            walk
        };
        let next = match &dir {
            Some(d) => rfs::openat(d, name, flags, Mode::empty())?,
            None => rfs::openat(CWD, name, flags, Mode::empty())?,
        };
        if last {
            return Ok(next);
        }
        dir = Some(next);
    }
    Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn own_temp_names() {
        assert_eq!(
            own_temp_of(b".team-state.json.123.abc.tmp"),
            Some(&b"team-state.json"[..])
        );
        assert_eq!(
            own_temp_of(b".team-state.json.4242.0123456789abcdef0123456789abcdef.tmp"),
            Some(&b"team-state.json"[..])
        );
        for near in [
            &b"team-state.json.123.abc.tmp"[..],
            b".team-state.json.123.tmp",
            b".team-state.json.x1.abc.tmp",
            b".team-state.json.123.xyz.tmp",
            b".team-state.json.123.abc.tmp.sh",
            b"..123.abc.tmp",
        ] {
            assert_eq!(own_temp_of(near), None, "{}", String::from_utf8_lossy(near));
        }
    }

    #[test]
    fn excluded_names_and_their_temporaries() {
        let mut x = Excluded::default();
        x.insert(&[b"run", b"team-state.json"]);
        x.insert(&[b"run", b"snapshots"]);
        assert_eq!(x.leaves_out(b"run"), Leave::In);
        let run = x.child(b"run").unwrap();
        assert_eq!(run.leaves_out(b"team-state.json"), Leave::Out);
        assert_eq!(
            run.leaves_out(b".team-state.json.123.abc.tmp"),
            Leave::OutIfFile
        );
        assert_eq!(run.leaves_out(b"snapshots"), Leave::Out);
        // Only beside an own file.
        assert_eq!(run.leaves_out(b".notes.md.123.abc.tmp"), Leave::In);
        assert_eq!(run.leaves_out(b"team-state.json.bak"), Leave::In);
        assert!(x.child(b"src").is_none());
    }

    #[test]
    fn a_running_fingerprint_is_the_fingerprint_of_everything_appended() {
        let mut r = RunningFingerprint::default();
        assert_eq!(r.fingerprint(), Fingerprint::of(b""));
        r.update(b"{\"type\":\"a\"}\n");
        r.update(b"{\"type\":\"b\"}\n");
        assert_eq!(
            r.fingerprint(),
            Fingerprint::of(b"{\"type\":\"a\"}\n{\"type\":\"b\"}\n")
        );
    }

    #[test]
    fn fingerprint_reads_regular_files_and_refuses_symlinks() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("state.json"), b"{}").unwrap();
        let fp = file_fingerprint(&real.join("state.json")).unwrap();
        assert_eq!(fp, Fingerprint::of(b"{}"));
        assert_eq!(fp.len, 2);
        // A symlink as the file or as any directory on the way is refused.
        symlink("state.json", real.join("link.json")).unwrap();
        symlink(&real, tmp.path().join("via")).unwrap();
        for p in [real.join("link.json"), tmp.path().join("via/state.json")] {
            let e = file_fingerprint(&p).unwrap_err();
            assert!(
                e.path.ends_with(p.file_name().unwrap().to_str().unwrap()),
                "{e}"
            );
        }
        // Not a file; not there; `..`.
        assert!(file_fingerprint(&real).is_err());
        assert!(file_fingerprint(&real.join("missing"))
            .unwrap_err()
            .is_not_found());
        assert!(file_fingerprint(&real.join("../real/state.json")).is_err());
    }
}
