//! The one place okstra writes and locks files.
//!
//! Everything `exec` records must survive being killed at any instant: whole
//! files are replaced by rename (never rewritten in place), line logs grow by a
//! single `write(2)` on an `O_APPEND` descriptor, and every read-modify-write
//! of shared state happens under an advisory `flock`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// The directory a file lives in; a bare file name lives in `.`.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Create the directory that will hold `path`, if it does not exist yet.
/// State files usually land in a run directory nobody has made yet.
fn ensure_parent(path: &Path) -> io::Result<()> {
    fs::create_dir_all(parent_dir(path))
}

/// How far [`write_atomic`] goes to make the new content survive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the temporary before the rename and the directory after it: once
    /// the call returned, the new content survives a power cut. For records
    /// (team-state, plans, snapshots).
    Fsync,
    /// Rename only, no fsync: readers and a killed writer still see the old
    /// content or the new, never a torn mix, but a power cut may lose the
    /// update. For liveness files rewritten every few seconds (the worker's
    /// status sidecar), whose readers tolerate an old or unreadable file and
    /// whose facts are also on the event log.
    NoFsync,
}

/// Write `bytes` as the whole content of `path`.
///
/// The bytes go to a temporary file in the same directory and the temporary
/// is renamed over `path`; with [`Durability::Fsync`] the temporary is
/// fsynced first and the directory after, so the rename itself is durable. A
/// reader sees the old content or the new, never a torn mix. On any failure
/// the temporary is removed and `path` is left as it was. Missing parent
/// directories are created.
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    write_atomic_with(path, durability, |out| out.write_all(bytes))
}

/// [`write_atomic`] with the file's permission bits `mode` from the start
/// (a secret's 0600: the temporary is never readable by others either),
/// durable ([`Durability::Fsync`]).
pub fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomic_in(path, Durability::Fsync, mode, |out| out.write_all(bytes))
}

/// Remove the temporaries a killed [`write_atomic`] of `path` left beside
/// it (`.<name>.<pid>.<32 hex>.tmp`), never another file. Only for a caller
/// holding the lock every writer of `path` takes: a live writer's
/// temporary would go too.
pub fn remove_stale_temporaries(path: &Path) -> io::Result<()> {
    let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    let prefix = format!(".{name}.");
    let ours = |entry: &str| {
        let Some(rest) = entry
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".tmp"))
        else {
            return false;
        };
        let Some((pid, id)) = rest.split_once('.') else {
            return false;
        };
        !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && id.len() == 32
            && id.bytes().all(|b| b.is_ascii_hexdigit())
    };
    for entry in fs::read_dir(parent_dir(path))? {
        let entry = entry?;
        if ours(&entry.file_name().to_string_lossy()) {
            fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// [`write_atomic`], the content streamed by `write` into the temporary
/// (buffered) instead of handed over whole: for a large document made as it
/// is written. If `write` fails, nothing is renamed and `path` stays as it
/// was.
pub fn write_atomic_with<T>(
    path: &Path,
    durability: Durability,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> io::Result<T> {
    write_atomic_in(path, durability, 0o644, write)
}

/// The one atomic write: [`write_atomic_with`], the new file made with
/// permission bits `mode`.
fn write_atomic_in<T>(
    path: &Path,
    durability: Durability,
    mode: u32,
    write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
) -> io::Result<T> {
    ensure_parent(path)?;
    let dir = parent_dir(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));

    let result = (|| {
        crate::fault::point("atomic-write");
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        let mut out = io::BufWriter::with_capacity(64 * 1024, file);
        let value = write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        if durability == Durability::Fsync {
            file.sync_all()?;
        }
        drop(file);
        crate::fault::point("atomic-rename");
        fs::rename(&tmp, path)?;
        Ok(value)
    })();
    let value = match result {
        Ok(value) => value,
        Err(err) => {
            // Best effort: the original error is the one worth reporting.
            let _ = fs::remove_file(&tmp);
            return Err(err);
        }
    };
    crate::fault::point("atomic-renamed");
    match durability {
        Durability::Fsync => sync_dir(dir)?,
        Durability::NoFsync => {}
    }
    Ok(value)
}

/// fsync a directory so that a rename inside it survives a power cut.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// An exclusive advisory lock on a lock file, held until dropped: std's
/// `File::lock`, which is `flock(LOCK_EX)` on Linux.
///
/// `flock` locks belong to the open file description, so two `FileLock`s on
/// the same path exclude each other across processes and across threads of
/// one process alike.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

impl FileLock {
    /// Wait at most `timeout` for the lock on `path` (the lock file and its
    /// parent directories made if missing, its content never touched). Out
    /// of time: `TimedOut`, the message naming the holder where the kernel
    /// says who it is.
    pub fn acquire_within(path: &Path, timeout: Duration) -> io::Result<FileLock> {
        FileLock::file_within(open_lock_file(path)?, path, timeout)
    }

    /// [`Self::acquire_within`] on a lock file the caller opened.
    pub fn file_within(file: File, path: &Path, timeout: Duration) -> io::Result<FileLock> {
        let deadline = std::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        let mut file = file;
        loop {
            match FileLock::try_file(file, path)? {
                Ok(lock) => return Ok(lock),
                Err(back) => file = back,
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "{} is held by {} and was not released within {} s",
                        path.display(),
                        lock_holder(&file).unwrap_or_else(|| "another process".into()),
                        timeout.as_secs()
                    ),
                ));
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Take the lock on a lock file the caller opened if nobody holds it;
    /// the file back if someone does.
    pub fn try_file(file: File, path: &Path) -> io::Result<Result<FileLock, File>> {
        loop {
            match file.try_lock() {
                Ok(()) => {
                    return Ok(Ok(FileLock {
                        file,
                        path: path.to_path_buf(),
                    }))
                }
                Err(fs::TryLockError::WouldBlock) => return Ok(Err(file)),
                Err(fs::TryLockError::Error(err)) if err.kind() == io::ErrorKind::Interrupted => {
                    continue
                }
                Err(fs::TryLockError::Error(err)) => return Err(err),
            }
        }
    }

    /// Block until the lock on `path` is ours. The lock file (and its parent
    /// directories) are created if missing; its content is never touched.
    pub fn acquire(path: &Path) -> io::Result<FileLock> {
        let file = open_lock_file(path)?;
        loop {
            match file.lock() {
                Ok(()) => {
                    return Ok(FileLock {
                        file,
                        path: path.to_path_buf(),
                    })
                }
                // A signal interrupted the wait: wait again.
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// Take the lock on `path` if nobody holds it; `Ok(None)` if someone does.
    pub fn try_acquire(path: &Path) -> io::Result<Option<FileLock>> {
        let file = open_lock_file(path)?;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    return Ok(Some(FileLock {
                        file,
                        path: path.to_path_buf(),
                    }))
                }
                Err(fs::TryLockError::WouldBlock) => return Ok(None),
                Err(fs::TryLockError::Error(err)) if err.kind() == io::ErrorKind::Interrupted => {
                    continue
                }
                Err(fs::TryLockError::Error(err)) => return Err(err),
            }
        }
    }

    /// The lock file this lock is held on.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the descriptor releases the lock too; unlocking first makes
        // the release independent of any descriptor that might have been
        // duplicated meanwhile.
        let _ = self.file.unlock();
    }
}

/// Who holds a `flock` on `file`, as far as `/proc/locks` tells: its pid and
/// command line.
pub fn lock_holder(file: &File) -> Option<String> {
    let meta = file.metadata().ok()?;
    let (major, minor) = (rustix::fs::major(meta.dev()), rustix::fs::minor(meta.dev()));
    let wanted = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&wanted.as_str()))
            .then(|| f.get(4).map(|p| p.to_string()))
            .flatten()
    })?;
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    Some(if cmd.is_empty() {
        format!("pid {pid}")
    } else {
        format!("pid {pid} (`{cmd}`)")
    })
}

fn open_lock_file(path: &Path) -> io::Result<File> {
    ensure_parent(path)?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .open(path)
}

/// Append `line` plus a newline to `path` with exactly one `write(2)` on an
/// `O_APPEND` descriptor, creating the file and its parent directories if
/// needed.
///
/// Concurrent appenders never interleave inside a line. If a previous writer
/// died mid-line (the file does not end in a newline), a newline is put in
/// front of ours, in the same write, so the torn fragment cannot swallow this
/// record; readers skip the fragment.
///
/// The tail check can race with another process's append still in flight and
/// add a needless newline: that costs an empty line, never a record, and
/// readers skip empty lines. Within this process appends are serialised so
/// the check is exact.
pub fn append_line(path: &Path, line: &str) -> io::Result<()> {
    let _serial = IN_PROCESS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    ensure_parent(path)?;
    // Readable too, so the last byte can be checked for a torn tail.
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o644)
        .open(path)?;
    let len = file.metadata()?.len();
    write_line(&file, len, line, path)
}

/// Appends within this process are serialised, so the torn-tail check of one
/// never races another's write.
static IN_PROCESS: Mutex<()> = Mutex::new(());

/// One write of `line` and a newline to `file` (`len` bytes long now),
/// behind a newline if the file ends torn.
fn write_line(mut file: &File, len: u64, line: &str, path: &Path) -> io::Result<()> {
    let mut buf = Vec::with_capacity(line.len() + 2);
    if ends_torn(file, len)? {
        buf.push(b'\n');
    }
    buf.extend_from_slice(line.as_bytes());
    buf.push(b'\n');
    let written = loop {
        match file.write(&buf) {
            Ok(n) => break n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        }
    };
    if written != buf.len() {
        // A second write could land after another appender's line, splitting
        // ours in two; report the short write instead.
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!(
                "short append to {}: {written} of {} bytes",
                path.display(),
                buf.len()
            ),
        ));
    }
    Ok(())
}

/// Whether the file (`len` bytes) is non-empty and its last byte is not a
/// newline.
fn ends_torn(file: &File, len: u64) -> io::Result<bool> {
    if len == 0 {
        return Ok(false);
    }
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1)?;
    Ok(last[0] != b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn a_secret_is_written_with_its_mode_and_only_our_temporaries_are_cleared() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("creds.json");
        write_atomic_mode(&path, b"secret", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"secret");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let left = dir
            .path()
            .join(".creds.json.4242.0123456789abcdef0123456789abcdef.tmp");
        let theirs = [
            ".creds.json.tmp.4242",
            ".creds.json.x.0123456789abcdef0123456789abcdef.tmp",
            ".other.json.4242.0123456789abcdef0123456789abcdef.tmp",
            "creds.json.bak",
        ];
        fs::write(&left, "torn").unwrap();
        for t in theirs {
            fs::write(dir.path().join(t), "keep").unwrap();
        }
        remove_stale_temporaries(&path).unwrap();
        assert!(!left.exists());
        for t in theirs {
            assert!(dir.path().join(t).exists(), "{t}");
        }
        assert_eq!(fs::read(&path).unwrap(), b"secret");
    }

    #[test]
    fn write_atomic_creates_parents_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/a/state.json");
        write_atomic(&path, b"one", Durability::Fsync).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        write_atomic(&path, b"two, longer", Durability::Fsync).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two, longer");
        // Nothing but the target is left in the directory.
        let names: Vec<_> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn write_atomic_failure_leaves_no_temp_and_no_change() {
        let dir = tempfile::tempdir().unwrap();
        // A non-empty directory where the file should go: the rename fails
        // after the temporary was fully written.
        let target = dir.path().join("state.json");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep"), b"x").unwrap();

        assert!(write_atomic(&target, b"new content", Durability::Fsync).is_err());
        let mut names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, vec!["state.json".to_string()]);
        assert_eq!(fs::read(target.join("keep")).unwrap(), b"x");
    }

    #[test]
    fn try_acquire_sees_a_held_lock_and_its_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/x.lock");
        let held = FileLock::acquire(&path).unwrap();
        assert_eq!(held.path(), path);
        assert!(FileLock::try_acquire(&path).unwrap().is_none());
        drop(held);
        let again = FileLock::try_acquire(&path).unwrap();
        assert!(again.is_some());
    }

    #[test]
    fn lock_excludes_other_threads() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("counter.lock");
        let counter = dir.path().join("counter");
        fs::write(&counter, b"0").unwrap();
        let threads = 8;
        let barrier = Arc::new(Barrier::new(threads));
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (lock, counter, barrier) = (lock.clone(), counter.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    for _ in 0..25 {
                        let _guard = FileLock::acquire(&lock).unwrap();
                        let n: u64 = fs::read_to_string(&counter).unwrap().parse().unwrap();
                        write_atomic(&counter, (n + 1).to_string().as_bytes(), Durability::Fsync)
                            .unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(fs::read_to_string(&counter).unwrap(), "200");
    }

    #[test]
    fn append_line_creates_file_and_adds_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/events.jsonl");
        append_line(&path, "a").unwrap();
        append_line(&path, "b").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "a\nb\n");
    }

    #[test]
    fn append_line_fences_off_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        fs::write(&path, "whole\n{\"type\":\"to").unwrap();
        append_line(&path, "next").unwrap();
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "whole\n{\"type\":\"to\nnext\n"
        );
    }

    #[test]
    fn concurrent_appends_keep_lines_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let line = format!("{t}-{i}-{}", "x".repeat(300));
                        append_line(&path, &line).unwrap();
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 400);
        assert!(lines.iter().all(|l| l.ends_with(&"x".repeat(300))));
    }
}
