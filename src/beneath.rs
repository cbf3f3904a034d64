//! Opening okstra's own files below a directory without following a symlink
//! at any component (docs/exec.md#never-through-a-symlink): logs, sidecars and
//! state live inside a project a worker may write, and a symlink planted there
//! must be an error, never a redirect of okstra's write to somewhere else.
//!
//! Every path is relative to a directory opened once ([`Beneath::open`]) and
//! is resolved by the kernel relative to that descriptor:
//!
//! - with `openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)` where the kernel
//!   has it (Linux 5.6+): one call, and the kernel refuses any symlink and
//!   any escape;
//! - otherwise (`ENOSYS`, or a seccomp filter answering `EPERM`) by a walk,
//!   one `openat(O_NOFOLLOW | O_DIRECTORY)` per directory, then the file
//!   with `O_NOFOLLOW`.
//!
//! Missing directories are created on the way, the same way (`mkdirat`
//! relative to the parent just opened). A path must be plain: no `..`, not
//! absolute, not empty. Errors name the path, and say "symlink" when that
//! is the reason.

use crate::fsutil::Durability;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, CWD};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

/// How paths below the root are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2` where the kernel has it, else the walk.
    Auto,
    /// Always the component-by-component walk (what `Auto` falls back to).
    Walk,
}

/// How a file written whole takes its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Renamed over whatever is there.
    Replace,
    /// Linked, failing where anything is there.
    New,
}

/// How [`Beneath::open`] opens a file for writing. Each creates the file
/// (mode 0644 before the umask) and its missing directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Append; for line logs.
    Append,
    /// Append, and read (a journal checks its last byte for a torn line).
    ReadAppend,
    /// Truncate to empty; for a file rewritten whole.
    Truncate,
    /// The file must not exist yet (`AlreadyExists` otherwise).
    CreateNew,
}

#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// A symlink at `component` (a prefix of `path`, or `path` itself).
    #[error("cannot open {}: {} is a symlink, and okstra never writes through a symlink", path.display(), component.display())]
    Symlink { path: PathBuf, component: PathBuf },
    /// `..`, an absolute path or an empty one.
    #[error("cannot open {}: not a plain path below {} (no `..`, not absolute, not empty)", path.display(), root.display())]
    NotBeneath { path: PathBuf, root: PathBuf },
    #[error("cannot open {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl BeneathError {
    pub fn is_symlink(&self) -> bool {
        matches!(self, BeneathError::Symlink { .. })
    }

    /// The `io::ErrorKind` a caller would test (`NotFound`, `AlreadyExists`).
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            BeneathError::Symlink { .. } | BeneathError::NotBeneath { .. } => {
                io::ErrorKind::InvalidInput
            }
            BeneathError::Io { source, .. } => source.kind(),
        }
    }
}

impl From<BeneathError> for io::Error {
    fn from(e: BeneathError) -> io::Error {
        io::Error::new(e.kind(), e.to_string())
    }
}

type Result<T> = std::result::Result<T, BeneathError>;

/// Whether the kernel has `openat2`: unknown until first tried.
static OPENAT2: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const MISSING: u8 = 2;

/// A directory (the project root) that okstra writes below.
#[derive(Debug)]
pub struct Beneath {
    root: OwnedFd,
    path: PathBuf,
    resolver: Resolver,
}

/// A directory descriptor: the root itself, or one opened below it.
enum Dir<'a> {
    Root(BorrowedFd<'a>),
    Owned(OwnedFd),
}

impl Dir<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Root(fd) => *fd,
            Dir::Owned(fd) => fd.as_fd(),
        }
    }
}

const FILE_MODE: u32 = 0o644;
const DIR_MODE: u32 = 0o755;

impl Beneath {
    /// Open `root` (which may itself be reached through symlinks: it is the
    /// directory the caller chose) with [`Resolver::Auto`].
    pub fn open(root: &Path) -> Result<Beneath> {
        Beneath::open_with(root, Resolver::Auto)
    }

    pub fn open_with(root: &Path, resolver: Resolver) -> Result<Beneath> {
        let fd = rustix::fs::openat(
            CWD,
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error(root, e))?;
        Ok(Beneath {
            root: fd,
            path: root.to_path_buf(),
            resolver,
        })
    }

    /// The root, as given.
    pub fn root(&self) -> &Path {
        &self.path
    }

    /// Open `rel` for writing, creating it and its missing directories.
    pub fn open_file(&self, rel: &Path, mode: WriteMode) -> Result<File> {
        let (dirs, name) = self.split(rel)?;
        let access = match mode {
            WriteMode::ReadAppend => OFlags::RDWR,
            _ => OFlags::WRONLY,
        };
        let flags = access
            | OFlags::CREATE
            | OFlags::CLOEXEC
            | OFlags::NOFOLLOW
            | match mode {
                WriteMode::Append | WriteMode::ReadAppend => OFlags::APPEND,
                WriteMode::Truncate => OFlags::TRUNC,
                WriteMode::CreateNew => OFlags::EXCL,
            };
        if self.openat2_usable() {
            match self.openat2(rel, flags, Mode::from_raw_mode(FILE_MODE)) {
                Ok(fd) => return Ok(File::from(fd)),
                // A directory on the way is missing (create it below), or the
                // file exists, perhaps as a symlink (the walk says which).
                Err(Errno::NOENT | Errno::EXIST) => {}
                Err(e) => {
                    if let Some(err) = self.openat2_failure(rel, e) {
                        return Err(err);
                    }
                }
            }
        }
        let dir = self.dir(&dirs, true, rel)?;
        match rustix::fs::openat(dir.fd(), name, flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(fd) => Ok(File::from(fd)),
            Err(e) => Err(self.failure(&dir, name, rel, rel, e)),
        }
    }

    /// Create `rel` and every missing directory above it, each below the
    /// root without following a symlink.
    pub fn create_dir_all(&self, rel: &Path) -> Result<()> {
        let (mut dirs, name) = self.split(rel)?;
        dirs.push(name);
        self.dir(&dirs, true, rel).map(drop)
    }

    /// Remove the file `rel`. A symlink there is an error (it is not
    /// removed), a missing file is `NotFound`.
    pub fn remove_file(&self, rel: &Path) -> Result<()> {
        let (dirs, name) = self.split(rel)?;
        let dir = self.dir(&dirs, false, rel)?;
        self.refuse_symlink(&dir, name, rel)?;
        rustix::fs::unlinkat(dir.fd(), name, AtFlags::empty())
            .map_err(|e| io_error(&self.path.join(rel), e))
    }

    /// Create `rel`, which must not exist yet, holding `bytes`, written with
    /// one `write(2)`: a reader sees no file, an empty one or all of it,
    /// never a part, and a writer killed meanwhile leaves it empty or whole.
    /// For the first version of a liveness file; later versions go through
    /// [`Self::write_atomic`]. More than a page (4 KiB) is refused
    /// (`InvalidInput`, nothing created): only a write within one page is
    /// copied whole before the size moves. On a failed write the file is
    /// removed again; `AlreadyExists` means it was there before (a symlink
    /// there is a [`BeneathError::Symlink`]).
    pub fn create_whole(&self, rel: &Path, bytes: &[u8]) -> Result<()> {
        const PAGE: usize = 4096;
        if bytes.len() > PAGE {
            return Err(BeneathError::Io {
                path: self.path.join(rel),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} bytes do not fit in one page", bytes.len()),
                ),
            });
        }
        let mut file = self.open_file(rel, WriteMode::CreateNew)?;
        let written = match file.write(bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(n) => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write: {n} of {} bytes", bytes.len()),
            )),
            Err(e) => Err(e),
        };
        if let Err(source) = written {
            drop(file);
            let _ = self.remove_file(rel);
            return Err(BeneathError::Io {
                path: self.path.join(rel),
                source,
            });
        }
        Ok(())
    }

    /// Replace `rel` whole with `bytes`: a temporary file in the same
    /// directory, renamed over `rel`, both relative to the directory's
    /// descriptor; with [`Durability::Fsync`] the temporary is fsynced
    /// before the rename and the directory after. A reader sees the old
    /// content or the new. A symlink at `rel` is an error (a rename would
    /// replace it, but a planted link means something is wrong).
    pub fn write_atomic(&self, rel: &Path, bytes: &[u8], durability: Durability) -> Result<()> {
        self.write_atomic_with(rel, durability, |out| out.write_all(bytes))
    }

    /// [`Self::write_atomic`], the content streamed by `write` into the
    /// temporary (buffered) instead of handed over whole. If `write` fails,
    /// nothing is renamed and `rel` stays as it was.
    pub fn write_atomic_with<T>(
        &self,
        rel: &Path,
        durability: Durability,
        write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
    ) -> Result<T> {
        self.write_temp_then(rel, durability, Place::Replace, write)
    }

    /// Create `rel`, which must not exist yet, holding `bytes`: as
    /// [`Self::write_atomic`] with [`Durability::Fsync`], but the temporary
    /// is linked to its name, which fails (`AlreadyExists`) rather than
    /// replace a file that appeared meanwhile. A reader, or a crash, sees
    /// no file or all of it.
    pub fn create_atomic(&self, rel: &Path, bytes: &[u8]) -> Result<()> {
        self.write_temp_then(rel, Durability::Fsync, Place::New, |out| {
            out.write_all(bytes)
        })
    }

    /// Write a temporary file beside `rel` with `write`, then put it at
    /// `rel` as `place` says.
    fn write_temp_then<T>(
        &self,
        rel: &Path,
        durability: Durability,
        place: Place,
        write: impl FnOnce(&mut dyn Write) -> io::Result<T>,
    ) -> Result<T> {
        let (dirs, name) = self.split(rel)?;
        let abs = self.path.join(rel);
        let dir = self.dir(&dirs, true, rel)?;
        self.refuse_symlink(&dir, name, rel)?;
        let mut tmp = OsString::from(".");
        tmp.push(name);
        tmp.push(format!(
            ".{}.{}.tmp",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        ));
        let result = (|| -> io::Result<T> {
            crate::fault::point("atomic-write");
            let fd = rustix::fs::openat(
                dir.fd(),
                &tmp,
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(FILE_MODE),
            )?;
            let mut out = io::BufWriter::with_capacity(64 * 1024, File::from(fd));
            let value = write(&mut out)?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            if durability == Durability::Fsync {
                file.sync_all()?;
            }
            drop(file);
            crate::fault::point("atomic-rename");
            match place {
                Place::Replace => rustix::fs::renameat(dir.fd(), &tmp, dir.fd(), name)?,
                // The link is the whole file; the temporary name goes.
                Place::New => {
                    rustix::fs::linkat(dir.fd(), &tmp, dir.fd(), name, AtFlags::empty())?;
                    let _ = rustix::fs::unlinkat(dir.fd(), &tmp, AtFlags::empty());
                }
            }
            Ok(value)
        })();
        let value = match result {
            Ok(value) => value,
            Err(source) => {
                // Best effort: the original error is the one worth reporting.
                let _ = rustix::fs::unlinkat(dir.fd(), &tmp, AtFlags::empty());
                return Err(BeneathError::Io { path: abs, source });
            }
        };
        crate::fault::point("atomic-renamed");
        if durability == Durability::Fsync {
            rustix::fs::fsync(dir.fd()).map_err(|e| io_error(&abs, e))?;
        }
        Ok(value)
    }

    /// `path` (absolute, or relative to the root) as a path below the root,
    /// for the other calls; `NotBeneath` when it is not below it.
    pub fn relative<'p>(&self, path: &'p Path) -> std::result::Result<&'p Path, BeneathError> {
        if path.is_absolute() {
            path.strip_prefix(&self.path)
                .map_err(|_| self.not_beneath(path))
        } else {
            Ok(path)
        }
    }

    /// The directory components and the final name of a plain relative path.
    fn split<'p>(&self, rel: &'p Path) -> Result<(Vec<&'p OsStr>, &'p OsStr)> {
        let mut parts = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => parts.push(n),
                Component::CurDir => {}
                _ => return Err(self.not_beneath(rel)),
            }
        }
        let name = parts.pop().ok_or_else(|| self.not_beneath(rel))?;
        Ok((parts, name))
    }

    fn not_beneath(&self, rel: &Path) -> BeneathError {
        BeneathError::NotBeneath {
            path: rel.to_path_buf(),
            root: self.path.clone(),
        }
    }

    fn openat2_usable(&self) -> bool {
        self.resolver == Resolver::Auto && OPENAT2.load(Ordering::Relaxed) != MISSING
    }

    fn openat2(
        &self,
        rel: &Path,
        flags: OFlags,
        mode: Mode,
    ) -> std::result::Result<OwnedFd, Errno> {
        rustix::fs::openat2(
            &self.root,
            rel,
            flags,
            mode,
            ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH,
        )
    }

    /// What an `openat2` failure means: `None` to fall back to the walk
    /// (no `openat2` here, a seccomp filter refusing it, or a race the
    /// kernel would not judge), else the error.
    fn openat2_failure(&self, rel: &Path, e: Errno) -> Option<BeneathError> {
        match e {
            Errno::NOSYS => {
                OPENAT2.store(MISSING, Ordering::Relaxed);
                None
            }
            Errno::PERM | Errno::AGAIN => None,
            Errno::LOOP => Some(self.symlink_in(rel)),
            Errno::XDEV => Some(self.not_beneath(rel)),
            _ => Some(io_error(&self.path.join(rel), e)),
        }
    }

    /// The directory `dirs` (components below the root), opened; created
    /// where missing when `create`.
    fn dir(&self, dirs: &[&OsStr], create: bool, rel: &Path) -> Result<Dir<'_>> {
        if dirs.is_empty() {
            return Ok(Dir::Root(self.root.as_fd()));
        }
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if self.openat2_usable() {
            let joined: PathBuf = dirs.iter().collect();
            match self.openat2(&joined, flags, Mode::empty()) {
                Ok(fd) => return Ok(Dir::Owned(fd)),
                Err(Errno::NOENT) if create => {}
                Err(e) => {
                    if let Some(err) = self.openat2_failure(rel, e) {
                        return Err(err);
                    }
                }
            }
        }
        let mut at = Dir::Root(self.root.as_fd());
        for (i, name) in dirs.iter().enumerate() {
            let open = |at: &Dir| {
                rustix::fs::openat(at.fd(), *name, flags | OFlags::NOFOLLOW, Mode::empty())
            };
            let opened = match open(&at) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(at.fd(), *name, Mode::from_raw_mode(DIR_MODE)) {
                        Ok(()) | Err(Errno::EXIST) => open(&at),
                        Err(e) => Err(e),
                    }
                }
                other => other,
            };
            match opened {
                Ok(fd) => at = Dir::Owned(fd),
                Err(e) => {
                    let prefix: PathBuf = dirs[..=i].iter().collect();
                    return Err(self.failure(&at, name, rel, &prefix, e));
                }
            }
        }
        Ok(at)
    }

    /// What a failed `openat(dir, name, O_NOFOLLOW ...)` of `component`
    /// (on the way to `rel`) means: a symlink there gives `ELOOP` (a file),
    /// `ENOTDIR` (a directory) or `EEXIST` (`O_EXCL`); ask which.
    fn failure(
        &self,
        dir: &Dir,
        name: &OsStr,
        rel: &Path,
        component: &Path,
        e: Errno,
    ) -> BeneathError {
        if matches!(e, Errno::LOOP | Errno::NOTDIR | Errno::EXIST) && is_symlink(dir, name) {
            return BeneathError::Symlink {
                path: self.path.join(rel),
                component: self.path.join(component),
            };
        }
        io_error(&self.path.join(rel), e)
    }

    fn refuse_symlink(&self, dir: &Dir, name: &OsStr, rel: &Path) -> Result<()> {
        if is_symlink(dir, name) {
            return Err(BeneathError::Symlink {
                path: self.path.join(rel),
                component: self.path.join(rel),
            });
        }
        Ok(())
    }

    /// The symlink `openat2` refused somewhere in `rel`, found by looking at
    /// each prefix without following it (only to say which; the refusal
    /// itself was the kernel's).
    fn symlink_in(&self, rel: &Path) -> BeneathError {
        let mut prefix = PathBuf::new();
        for c in rel.components() {
            prefix.push(c);
            let stat = rustix::fs::statat(&self.root, &prefix, AtFlags::SYMLINK_NOFOLLOW);
            if stat.is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink) {
                break;
            }
        }
        BeneathError::Symlink {
            path: self.path.join(rel),
            component: self.path.join(prefix),
        }
    }
}

/// How often [`remove_tree_at`] looks again at a directory that was not
/// empty when its last entry had gone: something still writing in it (a
/// worker's straggler) loses that race within a few rounds, or the removal
/// gives up and says so.
const REMOVE_ROUNDS: u32 = 16;

/// What [`remove_tree_at`] found at a name.
enum Found {
    Gone,
    /// Not a directory (a file, a symlink, a FIFO...): unlinked as it is.
    NotDir,
    /// A directory, opened for reading, which its owner may now write.
    Dir(OwnedFd),
}

/// A directory [`remove_tree_at`] is emptying.
struct Frame {
    fd: OwnedFd,
    /// Its name in its parent (the frame below it, or the starting `dir`).
    name: OsString,
    /// Where it is below the starting directory, for messages.
    path: PathBuf,
    /// Subdirectories still to empty and remove.
    pending: Vec<OsString>,
    listed: bool,
    rounds: u32,
}

/// Remove `name` from `dir` and, if it is a directory, everything below it,
/// without following a symlink anywhere: a symlink is unlinked as the entry
/// it is, never entered, so nothing outside the tree is touched. A
/// directory its owner may not read, write or search (a worker's `chmod
/// 0`, a read-only subdirectory) is given back `u+rwx` first, through the
/// descriptor opened without following, never by name. Iterative, each
/// directory opened relative to its parent: no depth or path-length limit.
///
/// `Ok(false)` when there was nothing at `name`. An error names the entry
/// that could not be removed (what is left is left).
pub fn remove_tree_at(dir: BorrowedFd, name: &OsStr) -> io::Result<bool> {
    let top = PathBuf::from(name);
    let mut stack = match found_at(dir, name, &top)? {
        Found::Gone => return Ok(false),
        Found::NotDir => return unlink_entry(dir, name, &top),
        Found::Dir(fd) => vec![Frame::new(fd, name.to_os_string(), top)],
    };
    while let Some(frame) = stack.last_mut() {
        if !frame.listed {
            frame.list_and_unlink()?;
        }
        if let Some(sub) = frame.pending.pop() {
            let path = frame.path.join(&sub);
            match found_at(frame.fd.as_fd(), &sub, &path)? {
                Found::Gone => {}
                Found::NotDir => {
                    unlink_entry(frame.fd.as_fd(), &sub, &path)?;
                }
                Found::Dir(fd) => stack.push(Frame::new(fd, sub, path)),
            }
            continue;
        }
        let done = stack.pop().expect("the frame looked at");
        let parent = stack.last().map_or(dir, |f| f.fd.as_fd());
        match rustix::fs::unlinkat(parent, &done.name, AtFlags::REMOVEDIR) {
            Ok(()) | Err(Errno::NOENT) => {}
            // Written to since it was listed: list it again.
            Err(Errno::NOTEMPTY) if done.rounds < REMOVE_ROUNDS => {
                let mut again = done;
                again.listed = false;
                again.rounds += 1;
                stack.push(again);
            }
            Err(Errno::NOTEMPTY) => {
                return Err(io::Error::other(format!(
                "{}: still not empty after {REMOVE_ROUNDS} rounds (something keeps writing in it)",
                done.path.display()
            )))
            }
            Err(e) => return Err(removal_error(&done.path, e)),
        }
    }
    Ok(true)
}

impl Frame {
    fn new(fd: OwnedFd, name: OsString, path: PathBuf) -> Frame {
        Frame {
            fd,
            name,
            path,
            pending: Vec::new(),
            listed: false,
            rounds: 0,
        }
    }

    /// Unlink every entry that is not a directory; note the directories.
    fn list_and_unlink(&mut self) -> io::Result<()> {
        let mut names = Vec::new();
        let mut entries =
            rustix::fs::Dir::read_from(&self.fd).map_err(|e| removal_error(&self.path, e))?;
        while let Some(entry) = entries.read() {
            let entry = entry.map_err(|e| removal_error(&self.path, e))?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                use std::os::unix::ffi::OsStrExt;
                names.push(OsStr::from_bytes(name).to_os_string());
            }
        }
        for name in names {
            // `unlinkat` without `AT_REMOVEDIR` removes anything but a
            // directory (a symlink itself, never its target).
            match rustix::fs::unlinkat(&self.fd, &name, AtFlags::empty()) {
                Ok(()) | Err(Errno::NOENT) => {}
                Err(Errno::ISDIR) => self.pending.push(name),
                Err(e) => return Err(removal_error(&self.path.join(&name), e)),
            }
        }
        self.listed = true;
        Ok(())
    }
}

/// What is at `name` in `dir`, a directory opened (never through a
/// symlink) and made writable by its owner.
fn found_at(dir: BorrowedFd, name: &OsStr, path: &Path) -> io::Result<Found> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(dir, name, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::NOENT) => return Ok(Found::Gone),
        // A symlink (`ELOOP`, or `ENOTDIR` with `O_DIRECTORY`) or a file.
        Err(Errno::LOOP | Errno::NOTDIR) => return Ok(Found::NotDir),
        // Not readable by us: make it so through a descriptor of the
        // directory itself.
        Err(Errno::ACCESS) => match reopen_writable(dir, name) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(Found::Gone),
            Err(Errno::LOOP | Errno::NOTDIR) => return Ok(Found::NotDir),
            Err(e) => return Err(removal_error(path, e)),
        },
        Err(e) => return Err(removal_error(path, e)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| removal_error(path, e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Ok(Found::NotDir);
    }
    let mode = stat.st_mode & 0o7777;
    if mode & 0o700 != 0o700 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode | 0o700))
            .map_err(|e| removal_error(path, e))?;
    }
    Ok(Found::Dir(fd))
}

/// `name` in `dir`, a directory its owner may not read: opened as a path
/// only (no permission needed, no symlink followed), given `u+rwx` through
/// its `/proc/self/fd` link (`fchmod` takes no `O_PATH` descriptor; the
/// link is the inode itself, not a name to resolve), and reopened for
/// reading through the same link.
fn reopen_writable(dir: BorrowedFd, name: &OsStr) -> std::result::Result<OwnedFd, Errno> {
    use std::os::fd::AsRawFd;
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let path_fd = rustix::fs::openat(dir, name, flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&path_fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
        return Err(Errno::NOTDIR);
    }
    let link = format!("/proc/self/fd/{}", path_fd.as_raw_fd());
    rustix::fs::chmod(&link, Mode::from_raw_mode((stat.st_mode & 0o7777) | 0o700))?;
    rustix::fs::open(
        &link,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Unlink `name` (not a directory) from `dir`; whether it was there.
fn unlink_entry(dir: BorrowedFd, name: &OsStr, path: &Path) -> io::Result<bool> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(removal_error(path, e)),
    }
}

fn removal_error(path: &Path, e: Errno) -> io::Error {
    let e = io::Error::from(e);
    io::Error::new(e.kind(), format!("cannot remove {}: {e}", path.display()))
}

fn is_symlink(dir: &Dir, name: &OsStr) -> bool {
    rustix::fs::statat(dir.fd(), name, AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink)
}

fn io_error(path: &Path, e: Errno) -> BeneathError {
    BeneathError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    const BOTH: [Resolver; 2] = [Resolver::Auto, Resolver::Walk];

    /// A root with `inside/` and, outside it, `outside/` holding `victim`.
    struct Fixture {
        _dir: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(root.join("inside")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("victim"), "untouched").unwrap();
        Fixture {
            _dir: dir,
            root,
            outside,
        }
    }

    impl Fixture {
        fn victim(&self) -> String {
            std::fs::read_to_string(self.outside.join("victim")).unwrap()
        }
        fn beneath(&self, r: Resolver) -> Beneath {
            Beneath::open_with(&self.root, r).unwrap()
        }
    }

    fn read(p: &Path) -> String {
        let mut s = String::new();
        File::open(p).unwrap().read_to_string(&mut s).unwrap();
        s
    }

    /// Every write operation on `rel`.
    fn every_op(b: &Beneath, rel: &str) -> Vec<(&'static str, Result<()>)> {
        let rel = Path::new(rel);
        let write = |mode| {
            b.open_file(rel, mode)
                .map(|mut f| f.write_all(b"x").unwrap())
        };
        vec![
            ("append", write(WriteMode::Append)),
            ("truncate", write(WriteMode::Truncate)),
            ("create-new", write(WriteMode::CreateNew)),
            ("atomic", b.write_atomic(rel, b"x", Durability::Fsync)),
            ("remove", b.remove_file(rel)),
        ]
    }

    #[test]
    fn the_kernel_here_has_openat2_and_auto_uses_it() {
        let f = fixture();
        let b = f.beneath(Resolver::Auto);
        b.open_file(Path::new("inside/a.log"), WriteMode::Append)
            .unwrap();
        assert_ne!(
            OPENAT2.load(Ordering::Relaxed),
            MISSING,
            "this kernel answered ENOSYS: only the walk is tested here"
        );
        assert!(b.openat2_usable());
        assert!(!f.beneath(Resolver::Walk).openat2_usable());
    }

    #[test]
    fn a_symlinked_directory_component_is_refused() {
        for r in BOTH {
            let f = fixture();
            symlink(&f.outside, f.root.join("inside/link")).unwrap();
            let b = f.beneath(r);
            for (op, got) in every_op(&b, "inside/link/victim") {
                let err = got.expect_err(op);
                assert!(err.is_symlink(), "{r:?} {op}: {err}");
                assert!(err.to_string().contains("symlink"), "{err}");
                assert!(err.to_string().contains("inside/link"), "{err}");
            }
            // Creating directories below it is refused too.
            let err = b.create_dir_all(Path::new("inside/link/new")).unwrap_err();
            assert!(err.is_symlink(), "{r:?}: {err}");
            assert_eq!(f.victim(), "untouched");
            assert!(!f.outside.join("new").exists());
        }
    }

    #[test]
    fn a_symlinked_final_component_is_refused() {
        for r in BOTH {
            let f = fixture();
            symlink(f.outside.join("victim"), f.root.join("inside/state.json")).unwrap();
            let b = f.beneath(r);
            for (op, got) in every_op(&b, "inside/state.json") {
                let err = got.expect_err(op);
                assert!(err.is_symlink(), "{r:?} {op}: {err}");
            }
            assert_eq!(f.victim(), "untouched");
            // The link itself is left for a person to look at.
            assert!(f
                .root
                .join("inside/state.json")
                .symlink_metadata()
                .unwrap()
                .is_symlink());
        }
    }

    #[test]
    fn a_dangling_symlink_is_refused_and_nothing_is_created_through_it() {
        for r in BOTH {
            let f = fixture();
            symlink(f.outside.join("new-file"), f.root.join("inside/x.log")).unwrap();
            symlink(f.outside.join("new-dir"), f.root.join("inside/d")).unwrap();
            let b = f.beneath(r);
            for (op, got) in every_op(&b, "inside/x.log") {
                let err = got.expect_err(op);
                assert!(err.is_symlink(), "{r:?} {op}: {err}");
            }
            for (op, got) in every_op(&b, "inside/d/x.log") {
                let err = got.expect_err(op);
                assert!(err.is_symlink(), "{r:?} {op}: {err}");
            }
            assert!(!f.outside.join("new-file").exists());
            assert!(!f.outside.join("new-dir").exists());
        }
    }

    #[test]
    fn dotdot_absolute_and_empty_paths_are_refused() {
        for r in BOTH {
            let f = fixture();
            let b = f.beneath(r);
            for rel in [
                "../outside/victim",
                "inside/../../outside/victim",
                "/etc/passwd",
                "",
                ".",
            ] {
                for (op, got) in every_op(&b, rel) {
                    let err = got.expect_err(op);
                    assert!(
                        matches!(err, BeneathError::NotBeneath { .. }),
                        "{r:?} {op} {rel}: {err}"
                    );
                }
            }
            assert_eq!(f.victim(), "untouched");
        }
    }

    #[test]
    fn a_plain_path_works_and_creates_its_directories() {
        for r in BOTH {
            let f = fixture();
            let b = f.beneath(r);
            let log = Path::new("run/logs/a.log");
            let mut file = b.open_file(log, WriteMode::Append).unwrap();
            file.write_all(b"one\n").unwrap();
            let mut file = b.open_file(log, WriteMode::Append).unwrap();
            file.write_all(b"two\n").unwrap();
            assert_eq!(read(&f.root.join(log)), "one\ntwo\n", "{r:?}");

            let mut file = b.open_file(log, WriteMode::Truncate).unwrap();
            file.write_all(b"new\n").unwrap();
            assert_eq!(read(&f.root.join(log)), "new\n");

            let err = b.open_file(log, WriteMode::CreateNew).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{r:?}: {err}");
            b.open_file(Path::new("./fresh/one.json"), WriteMode::CreateNew)
                .unwrap();

            let state = Path::new("run/state/team-state.json");
            b.write_atomic(state, b"{}", Durability::Fsync).unwrap();
            b.write_atomic(state, b"{\"a\":1}", Durability::NoFsync)
                .unwrap();
            assert_eq!(read(&f.root.join(state)), "{\"a\":1}");
            let leftovers: Vec<_> = std::fs::read_dir(f.root.join("run/state"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(leftovers.len(), 1, "{leftovers:?}");

            b.remove_file(log).unwrap();
            assert!(!f.root.join(log).exists());
            let err = b.remove_file(log).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::NotFound, "{r:?}: {err}");

            b.create_dir_all(Path::new("deep/er/dir")).unwrap();
            assert!(f.root.join("deep/er/dir").is_dir());
            b.create_dir_all(Path::new("deep/er/dir")).unwrap();
        }
    }

    #[test]
    fn the_root_itself_may_be_reached_through_a_symlink() {
        // The caller chose the root (the canonical project root); only what
        // lies below it is judged.
        let f = fixture();
        let alias = f.root.parent().unwrap().join("alias");
        symlink(&f.root, &alias).unwrap();
        for r in BOTH {
            let b = Beneath::open_with(&alias, r).unwrap();
            b.write_atomic(Path::new("inside/ok.json"), b"1", Durability::NoFsync)
                .unwrap();
        }
        assert_eq!(read(&f.root.join("inside/ok.json")), "1");
    }

    #[test]
    fn create_whole_makes_a_new_file_only_and_never_through_a_symlink() {
        for r in BOTH {
            let f = fixture();
            let b = f.beneath(r);
            let rel = Path::new("inside/status.json");
            b.create_whole(rel, b"{\"state\":\"running\"}\n").unwrap();
            assert_eq!(read(&f.root.join(rel)), "{\"state\":\"running\"}\n");
            let big = Path::new("inside/big.json");
            let refused = b.create_whole(big, &[b' '; 4097]).unwrap_err();
            assert_eq!(refused.kind(), io::ErrorKind::InvalidInput);
            assert!(!f.root.join(big).exists(), "nothing created");
            let again = b.create_whole(rel, b"other").unwrap_err();
            assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{again}");
            assert_eq!(read(&f.root.join(rel)), "{\"state\":\"running\"}\n");
            symlink(f.outside.join("victim"), f.root.join("inside/link.json")).unwrap();
            let err = b
                .create_whole(Path::new("inside/link.json"), b"x")
                .unwrap_err();
            assert!(err.is_symlink(), "{r:?}: {err}");
            assert_eq!(f.victim(), "untouched");
        }
    }

    #[test]
    fn create_atomic_makes_a_new_file_whole_and_never_replaces_one() {
        for r in BOTH {
            let f = fixture();
            let b = f.beneath(r);
            let rel = Path::new("new/dir/spec.toml");
            b.create_atomic(rel, b"a = 1\n").unwrap();
            assert_eq!(read(&f.root.join(rel)), "a = 1\n");
            let again = b.create_atomic(rel, b"other").unwrap_err();
            assert_eq!(again.kind(), io::ErrorKind::AlreadyExists, "{again}");
            assert_eq!(read(&f.root.join(rel)), "a = 1\n");
            // No temporary is left beside it, after either.
            let names: Vec<_> = std::fs::read_dir(f.root.join("new/dir"))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["spec.toml"], "{r:?}");
            symlink(f.outside.join("victim"), f.root.join("inside/link.toml")).unwrap();
            let err = b
                .create_atomic(Path::new("inside/link.toml"), b"x")
                .unwrap_err();
            assert!(err.is_symlink(), "{r:?}: {err}");
            assert_eq!(f.victim(), "untouched");
        }
    }

    /// A tree a worker could leave: files, nested and deep directories,
    /// a read-only directory, one with no permissions at all, a FIFO, and
    /// symlinks to a file and a directory outside, and a dangling one.
    fn nasty_tree(top: &Path, outside: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
        std::fs::create_dir_all(top.join("a/b/c")).unwrap();
        for i in 0..50 {
            std::fs::write(top.join(format!("a/f{i}")), "x").unwrap();
        }
        std::fs::write(top.join("a/b/c/deep"), "x").unwrap();
        // Deeper than PATH_MAX: made one level at a time.
        let mut at = File::open(top).unwrap();
        for level in 0..200 {
            let name = if level == 0 {
                "d"
            } else {
                "0123456789abcdef0123456789abcdef"
            };
            rustix::fs::mkdirat(&at, name, Mode::RWXU).unwrap();
            let flags = OFlags::RDONLY | OFlags::DIRECTORY;
            at = File::from(rustix::fs::openat(&at, name, flags, Mode::empty()).unwrap());
        }
        rustix::fs::openat(&at, "leaf", OFlags::CREATE | OFlags::WRONLY, Mode::RUSR).unwrap();
        std::fs::create_dir(top.join("ro")).unwrap();
        std::fs::write(top.join("ro/kept"), "x").unwrap();
        mode(&top.join("ro"), 0o500).unwrap();
        std::fs::create_dir_all(top.join("closed/inner")).unwrap();
        std::fs::write(top.join("closed/inner/f"), "x").unwrap();
        mode(&top.join("closed/inner"), 0o000).unwrap();
        mode(&top.join("closed"), 0o000).unwrap();
        rustix::fs::mknodat(CWD, top.join("fifo"), FileType::Fifo, Mode::RUSR, 0).unwrap();
        symlink(outside.join("victim"), top.join("a/to-file")).unwrap();
        symlink(outside, top.join("a/to-dir")).unwrap();
        symlink(outside.join("nothing"), top.join("dangling")).unwrap();
    }

    #[test]
    fn a_tree_is_removed_whole_and_nothing_outside_it_is_touched() {
        use std::os::unix::fs::PermissionsExt;
        let f = fixture();
        let top = f.root.join("inside/tmp");
        std::fs::create_dir(&top).unwrap();
        nasty_tree(&top, &f.outside);
        std::fs::create_dir(f.outside.join("dir")).unwrap();
        std::fs::write(f.outside.join("dir/keep"), "keep").unwrap();
        let outside_mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode();
        let before = (
            outside_mode(&f.outside),
            outside_mode(&f.outside.join("victim")),
        );
        let inside = File::open(f.root.join("inside")).unwrap();
        assert!(remove_tree_at(inside.as_fd(), OsStr::new("tmp")).unwrap());
        assert!(!top.exists());
        assert_eq!(f.victim(), "untouched");
        assert_eq!(read(&f.outside.join("dir/keep")), "keep");
        assert_eq!(
            (
                outside_mode(&f.outside),
                outside_mode(&f.outside.join("victim"))
            ),
            before,
            "no chmod landed outside"
        );
        // Nothing there: false. A symlink at the top is unlinked, not followed.
        assert!(!remove_tree_at(inside.as_fd(), OsStr::new("tmp")).unwrap());
        symlink(&f.outside, f.root.join("inside/tmp")).unwrap();
        assert!(remove_tree_at(inside.as_fd(), OsStr::new("tmp")).unwrap());
        assert!(f.root.join("inside").read_dir().unwrap().next().is_none());
        assert_eq!(f.victim(), "untouched");
        assert!(f.outside.join("dir/keep").exists());
    }

    #[test]
    fn the_removal_needs_no_privilege() {
        // As root (a container, CI) permission bits bind nothing, so the
        // way around a worker's `chmod 0` is tried again as `nobody`.
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let exe = std::env::current_exe().unwrap();
        let test = "beneath::tests::a_tree_is_removed_whole_and_nothing_outside_it_is_touched";
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&exe)
            .args(["--exact", test])
            .env("TMPDIR", "/tmp")
            .output();
        let out = match out {
            Ok(out) if !matches!(out.status.code(), Some(126 | 127)) => out,
            other => {
                eprintln!("skipped: cannot run {} as nobody: {other:?}", exe.display());
                return;
            }
        };
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn a_tree_written_to_while_it_is_removed_still_goes_or_the_removal_says_why() {
        let f = fixture();
        let top = f.root.join("inside/busy");
        std::fs::create_dir_all(top.join("sub")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = {
            let (top, stop) = (top.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Fails once the directory is gone, as a confined worker would.
                    let _ = std::fs::write(top.join(format!("sub/f{i}")), "x");
                    i += 1;
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        let inside = File::open(f.root.join("inside")).unwrap();
        let removed = remove_tree_at(inside.as_fd(), OsStr::new("busy"));
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        match removed {
            Ok(true) => assert!(!top.exists()),
            Ok(false) => panic!("it was there"),
            Err(e) => assert!(e.to_string().contains("keeps writing"), "{e}"),
        }
    }

    #[test]
    fn errors_convert_to_io_errors_with_their_message() {
        let f = fixture();
        symlink(&f.outside, f.root.join("link")).unwrap();
        let err = f
            .beneath(Resolver::Walk)
            .open_file(Path::new("link/x"), WriteMode::Append)
            .unwrap_err();
        let io: io::Error = err.into();
        assert!(io.to_string().contains("symlink"), "{io}");
    }
}
