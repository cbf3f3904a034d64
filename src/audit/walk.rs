//! The walk shared by snapshot and compare.
//!
//! Every directory is opened relative to its parent's descriptor
//! (`openat(O_DIRECTORY | O_NOFOLLOW)`), listed with `getdents64`, and its
//! entries `lstat`ed relative to it (`fstatat(AT_SYMLINK_NOFOLLOW)`), so no
//! path is ever resolved from the root: depth and path length are bounded
//! by nothing but memory, and a directory swapped for a symlink is refused,
//! never followed. Display paths are built only to report a change or an
//! error.
//!
//! The walk is iterative: each directory is one job on rayon's queue, and a
//! job queues its subdirectories and returns, so a deep tree costs heap,
//! never stack. Jobs run on every core; the listings they produce are
//! numbered as they come and put in preorder at the end.
//!
//! It fails closed: an entry that cannot be opened, listed, `lstat`ed or
//! read, that vanished between its listing and a look at it, or that was
//! swapped for another, ends the walk with an [`AuditError`] naming it.

use super::compare::{self, ChangedPath, Reporter};
use super::error::{AuditError, Step};
use super::git::Area;
use super::name;
use super::own::{Excluded, Leave};
use super::snapshot::{self, Entry, Kind, Root, Snapshot};
use super::SnapshotOptions;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, RawDir, CWD};
use sha2::{Digest, Sha256};
use std::ffi::CStr;
use std::fs;
use std::io::{self, Read};
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Files whose mtime or ctime is this close to the walk's start (or later)
/// are hashed: file times are coarse, so a rewrite within the same tick
/// keeps them, and only content can tell.
const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// The `getdents64` buffer of one directory read.
const LIST_BUF: usize = 32 * 1024;

/// What to walk, resolved once per snapshot or compare.
pub(crate) struct Ctx {
    /// The escaped canonical project root, to resolve link targets.
    project: String,
    roots: Vec<RootSpec>,
}

struct RootSpec {
    abs: PathBuf,
    /// Display path bytes: empty for the project root, absolute otherwise.
    disp: Vec<u8>,
    excluded: Excluded,
}

impl Ctx {
    pub(crate) fn new(opts: &SnapshotOptions) -> Result<Ctx, AuditError> {
        let shown = |p: &Path| name::escape(p.as_os_str().as_bytes()).into_owned();
        let project_root = fs::canonicalize(opts.project_root)
            .map_err(|e| AuditError::new(Step::OpenRoot, shown(opts.project_root), e))?;
        let abs_of = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                opts.project_root.join(p)
            }
        };
        let mut roots: Vec<PathBuf> = Vec::new();
        for r in opts.roots {
            let abs = abs_of(r);
            roots.push(match fs::canonicalize(&abs) {
                Ok(c) => c,
                // Not there (yet): compare reports what it held deleted, or
                // everything in it added.
                Err(e) if e.kind() == io::ErrorKind::NotFound => abs,
                Err(e) => return Err(AuditError::new(Step::OpenRoot, shown(&abs), e)),
            });
        }
        roots.sort();
        roots.dedup();
        // A root inside another root is covered by the outer walk.
        let all = roots.clone();
        roots.retain(|p| !all.iter().any(|q| q != p && p.starts_with(q)));
        let mut specs: Vec<RootSpec> = roots
            .into_iter()
            .map(|abs| {
                let disp = match abs.strip_prefix(&project_root) {
                    Ok(rel) => rel.as_os_str().as_bytes().to_vec(),
                    Err(_) => abs.as_os_str().as_bytes().to_vec(),
                };
                RootSpec {
                    abs,
                    disp,
                    excluded: Excluded::default(),
                }
            })
            .collect();
        for x in opts.exclude {
            let abs = abs_of(x);
            // The file may not exist yet (a lock): resolve its directory.
            let canon = match (abs.parent(), abs.file_name()) {
                (Some(dir), Some(name)) => fs::canonicalize(dir)
                    .map(|d| d.join(name))
                    .unwrap_or_else(|_| abs.clone()),
                _ => abs.clone(),
            };
            for p in [&canon, &abs] {
                for spec in &mut specs {
                    if let Ok(rel) = p.strip_prefix(&spec.abs) {
                        let parts: Vec<&[u8]> = rel.iter().map(|c| c.as_bytes()).collect();
                        if !parts.iter().any(|c| *c == b"..") {
                            spec.excluded.insert(&parts);
                        }
                    }
                }
            }
        }
        Ok(Ctx {
            project: name::escape(project_root.as_os_str().as_bytes()).into_owned(),
            roots: specs,
        })
    }
}

/// The result of one walk: the tree in preorder, and for a compare the
/// changes against the old tree.
pub(crate) struct Walked {
    pub roots: Vec<Root>,
    pub dirs: Vec<Vec<Entry>>,
    pub changes: Vec<ChangedPath>,
}

/// Walk every root. With `before`, diff against it on the way.
pub(crate) fn walk(
    ctx: &Ctx,
    before: Option<&Snapshot>,
    taken_at_ns: i64,
) -> Result<Walked, AuditError> {
    let w = Walker::new(ctx, before, taken_at_ns);
    // Roots gone since the snapshot: everything they held is deleted.
    let mut gone = Reporter {
        dir: "",
        project: &ctx.project,
        out: Vec::new(),
        spent: &w.reported,
    };
    let (mut roots, jobs) = w.open_roots(&mut gone)?;
    w.report_dropped_roots(&mut gone)?;
    let w = &w;
    rayon::scope(|s| {
        for job in jobs {
            s.spawn(move |s| w.visit(s, job));
        }
    });
    let dirs = w.preorder(&mut roots)?;
    let mut changes = gone.out;
    changes.append(&mut w.changes.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(Walked {
        roots,
        dirs,
        changes,
    })
}

/// Display path of a directory, as a chain up to its root: a deep tree
/// holds each name once rather than each prefix once per level.
struct PathNode {
    parent: Option<Arc<PathNode>>,
    /// The directory's name; for a root, its display path.
    name: Vec<u8>,
}

impl PathNode {
    fn display(&self) -> String {
        let mut chain: Vec<&[u8]> = vec![&self.name];
        let mut node = self;
        while let Some(p) = &node.parent {
            chain.push(&p.name);
            node = p;
        }
        let mut out = String::new();
        for (i, part) in chain.iter().rev().enumerate() {
            if i > 0 && !out.is_empty() && !out.ends_with('/') {
                out.push('/');
            }
            name::escape_into(&mut out, part);
        }
        out
    }

    /// The display path, `.` for the project root (an error names it).
    fn shown(&self) -> String {
        let d = self.display();
        if d.is_empty() {
            ".".to_string()
        } else {
            d
        }
    }

    fn child_display(&self, name: &[u8]) -> String {
        compare::join(&self.display(), name)
    }
}

impl Drop for PathNode {
    /// Unlink the chain one node at a time: the derived drop would recurse
    /// once per level of a deep tree, on a worker thread's stack.
    fn drop(&mut self) {
        let mut up = self.parent.take();
        while let Some(node) = up {
            up = match Arc::try_unwrap(node) {
                Ok(mut n) => n.parent.take(),
                // Another directory below it still holds it.
                Err(_) => None,
            };
        }
    }
}

/// How a job reaches its directory.
enum At {
    /// Already open (a root).
    Open(OwnedFd),
    /// By name (`PathNode::name`) under the parent's descriptor; `ino` is
    /// what the parent's listing saw there. The inode number alone tells a
    /// swapped-in directory apart: it got there by rename, and a rename
    /// cannot cross file systems.
    Under { parent: Arc<OwnedFd>, ino: u64 },
}

impl At {
    /// The directory `path` open, refused where another directory took the
    /// place of the one its parent's listing saw.
    fn open(self, path: &PathNode) -> Result<OwnedFd, AuditError> {
        let (parent, ino) = match self {
            At::Open(fd) => return Ok(fd),
            At::Under { parent, ino } => (parent, ino),
        };
        seam::hit(seam::Point::BeforeOpen, &path.name);
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = rfs::openat(&*parent, path.name.as_slice(), flags, Mode::empty())
            .map_err(|e| AuditError::new(Step::OpenDir, path.shown(), e.into()))?;
        drop(parent);
        let st =
            rfs::fstat(&fd).map_err(|e| AuditError::new(Step::OpenDir, path.shown(), e.into()))?;
        if st.st_ino as u64 != ino {
            return Err(AuditError::new(
                Step::Changed,
                path.shown(),
                io::Error::other("another directory took its place"),
            ));
        }
        Ok(fd)
    }
}

struct Job<'a> {
    at: At,
    path: Arc<PathNode>,
    /// This directory's listing number in the new walk.
    index: u32,
    /// Its listing in the snapshot compared against.
    before: Option<u32>,
    area: Area,
    excluded: Option<&'a Excluded>,
}

struct Walker<'a> {
    ctx: &'a Ctx,
    before: Option<&'a Snapshot>,
    racy_from: i64,
    next: AtomicU32,
    listings: Mutex<Vec<(u32, Vec<Entry>)>>,
    changes: Mutex<Vec<ChangedPath>>,
    reported: AtomicUsize,
    failure: Mutex<Option<AuditError>>,
    failed: AtomicBool,
}

impl<'a> Walker<'a> {
    /// A walker of `ctx` that has numbered no directory yet; files changed
    /// within [`RACY_WINDOW_NS`] of `taken_at_ns` count as racily clean.
    fn new(ctx: &'a Ctx, before: Option<&'a Snapshot>, taken_at_ns: i64) -> Self {
        Walker {
            ctx,
            before,
            racy_from: taken_at_ns - RACY_WINDOW_NS,
            next: AtomicU32::new(0),
            listings: Mutex::new(Vec::new()),
            changes: Mutex::new(Vec::new()),
            reported: AtomicUsize::new(0),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
        }
    }

    /// Open every root: a numbered root and a job for each that is there; a
    /// root without a listing for each that is gone (or was never made),
    /// what the snapshot saw in it reported deleted to `gone`.
    fn open_roots(&self, gone: &mut Reporter) -> Result<(Vec<Root>, Vec<Job<'a>>), AuditError> {
        let ctx: &'a Ctx = self.ctx;
        let mut roots = Vec::with_capacity(ctx.roots.len());
        let mut jobs = Vec::with_capacity(ctx.roots.len());
        for spec in &ctx.roots {
            let old = self
                .before
                .and_then(|b| b.roots.iter().find(|r| r.path == spec.disp))
                .and_then(|r| r.dir);
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rfs::openat(CWD, &spec.abs, flags, Mode::empty()) {
                Ok(fd) => {
                    let index = self.index()?;
                    roots.push(Root {
                        path: spec.disp.clone(),
                        dir: Some(index),
                    });
                    jobs.push(Job {
                        at: At::Open(fd),
                        path: Arc::new(PathNode {
                            parent: None,
                            name: spec.disp.clone(),
                        }),
                        index,
                        before: old,
                        area: Area::Tree,
                        excluded: Some(&spec.excluded),
                    });
                }
                // Gone (or never made): what it held is reported deleted.
                Err(rustix::io::Errno::NOENT) => {
                    roots.push(Root {
                        path: spec.disp.clone(),
                        dir: None,
                    });
                    if let (Some(b), Some(d)) = (self.before, old) {
                        gone.deleted_below(b, d, name::escape(&spec.disp).into_owned())?;
                    }
                }
                Err(e) => {
                    let at = name::escape(spec.abs.as_os_str().as_bytes()).into_owned();
                    return Err(AuditError::new(Step::OpenRoot, at, e.into()));
                }
            }
        }
        Ok((roots, jobs))
    }

    /// Report to `gone` everything under a root the snapshot walked and
    /// this walk does not: all of it is deleted.
    fn report_dropped_roots(&self, gone: &mut Reporter) -> Result<(), AuditError> {
        let Some(b) = self.before else {
            return Ok(());
        };
        for r in &b.roots {
            if let Some(d) = r
                .dir
                .filter(|_| !self.ctx.roots.iter().any(|s| s.disp == r.path))
            {
                gone.deleted_below(b, d, name::escape(&r.path).into_owned())?;
            }
        }
        Ok(())
    }

    /// Once every job has run: the first failure, or the listings, numbered
    /// as they came, put in preorder under `roots`.
    fn preorder(&self, roots: &mut [Root]) -> Result<Vec<Vec<Entry>>, AuditError> {
        if let Some(e) = self
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            return Err(e);
        }
        let listings =
            std::mem::take(&mut *self.listings.lock().unwrap_or_else(|p| p.into_inner()));
        let mut numbered: Vec<Option<Vec<Entry>>> = Vec::new();
        numbered.resize_with(self.next.load(Ordering::Relaxed) as usize, || None);
        for (i, entries) in listings {
            numbered[i as usize] = Some(entries);
        }
        Ok(snapshot::into_preorder(roots, numbered))
    }

    fn index(&self) -> Result<u32, AuditError> {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i == u32::MAX {
            return Err(AuditError::new(
                Step::Report,
                ".",
                io::Error::other("more than 4 billion directories"),
            ));
        }
        Ok(i)
    }

    fn visit<'s>(&'s self, s: &rayon::Scope<'s>, job: Job<'s>)
    where
        'a: 's,
    {
        if self.failed.load(Ordering::Relaxed) {
            return;
        }
        match self.visit_dir(job) {
            Ok(children) => {
                for c in children {
                    s.spawn(move |s| self.visit(s, c));
                }
            }
            Err(e) => {
                let mut first = self.failure.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert(e);
                self.failed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Open, list and `lstat` one directory, diff it for a compare, record
    /// its listing, and return a job per subdirectory to walk.
    fn visit_dir<'s>(&self, job: Job<'s>) -> Result<Vec<Job<'s>>, AuditError> {
        let Job {
            at,
            path,
            index,
            before: old,
            area,
            excluded,
        } = job;
        let fd = at.open(&path)?;
        seam::hit(seam::Point::Opened, &path.name);
        let mut entries = self.list(fd.as_fd(), &path, area, excluded)?;
        let area = area.settle(|name| {
            let i = entries.binary_search_by(|e| e.name.as_slice().cmp(name));
            i.ok().map(|i| entries[i].kind)
        });
        if area == Area::GitDir {
            entries.retain(|e| area.keeps(&e.name));
        }
        let old_dirs = self.diff(fd.as_fd(), &path, old, &mut entries)?;
        self.hash_racy(fd.as_fd(), &path, &mut entries)?;
        let mut children = Vec::new();
        let parent = Arc::new(fd);
        for (k, e) in entries.iter_mut().enumerate() {
            if e.kind != Kind::Dir {
                continue;
            }
            let child_index = self.index()?;
            e.dir = Some(child_index);
            children.push(Job {
                at: At::Under {
                    parent: Arc::clone(&parent),
                    ino: e.ino,
                },
                path: Arc::new(PathNode {
                    parent: Some(Arc::clone(&path)),
                    name: e.name.clone(),
                }),
                index: child_index,
                before: old_dirs[k],
                area: area.child(&e.name),
                excluded: excluded.and_then(|x| x.child(&e.name)),
            });
        }
        self.listings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((index, entries));
        Ok(children)
    }

    /// For a compare, report what changed in the directory `path` (open as
    /// `fd`) since the snapshot's listing of it (`old`), and return, per
    /// entry, the snapshot's listing of the directory of that name. A
    /// listing exactly as before reports nothing and builds no path.
    fn diff(
        &self,
        fd: BorrowedFd,
        path: &PathNode,
        old: Option<u32>,
        entries: &mut [Entry],
    ) -> Result<Vec<Option<u32>>, AuditError> {
        let Some(before) = self.before else {
            return Ok(vec![None; entries.len()]);
        };
        let old_entries: &[Entry] = old.map_or(&[], |d| &before.dirs[d as usize]);
        if same_listing(old_entries, entries) {
            return Ok(old_entries.iter().map(|e| e.dir).collect());
        }
        let dir = path.display();
        let mut rep = Reporter {
            dir: &dir,
            project: &self.ctx.project,
            out: Vec::new(),
            spent: &self.reported,
        };
        let old_dirs = compare::diff_listing(before, old_entries, entries, &mut rep, |e| {
            hash_entry(fd, path, e)
        })?;
        if !rep.out.is_empty() {
            self.changes
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&mut rep.out);
        }
        Ok(old_dirs)
    }

    /// The new listing is a snapshot too: racily clean files get their
    /// hash, and only they (a hash makes the next compare read the file).
    fn hash_racy(
        &self,
        fd: BorrowedFd,
        path: &PathNode,
        entries: &mut [Entry],
    ) -> Result<(), AuditError> {
        for e in entries.iter_mut() {
            if e.kind == Kind::File
                && (e.mtime_ns >= self.racy_from || e.ctime_ns >= self.racy_from)
            {
                if e.hash.is_none() {
                    e.hash = Some(hash_entry(fd, path, e)?);
                }
            } else {
                e.hash = None;
            }
        }
        Ok(())
    }

    /// The audited entries of one directory, sorted by name.
    #[allow(clippy::unnecessary_cast)] // stat field types differ by target
    fn list(
        &self,
        fd: BorrowedFd,
        path: &PathNode,
        area: Area,
        excluded: Option<&Excluded>,
    ) -> Result<Vec<Entry>, AuditError> {
        let mut entries: Vec<Entry> = Vec::new();
        let mut buf: Vec<u8> = Vec::with_capacity(LIST_BUF);
        let spare: &mut [MaybeUninit<u8>] = buf.spare_capacity_mut();
        let mut dir = RawDir::new(fd, spare);
        let mut link = Vec::new();
        while let Some(item) = dir.next() {
            let de = item.map_err(|e| AuditError::new(Step::ReadDir, path.shown(), e.into()))?;
            let name: &CStr = de.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." || !area.keeps(bytes) {
                continue;
            }
            let leave = excluded.map_or(Leave::In, |x| x.leaves_out(bytes));
            if leave == Leave::Out {
                continue;
            }
            seam::hit(seam::Point::BeforeStat, bytes);
            let st = rfs::statat(fd, name, AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| AuditError::new(Step::Stat, path.child_display(bytes), e.into()))?;
            let kind = match FileType::from_raw_mode(st.st_mode as _) {
                FileType::RegularFile => Kind::File,
                FileType::Directory => Kind::Dir,
                FileType::Symlink => Kind::Symlink,
                _ => Kind::Other,
            };
            if leave == Leave::OutIfFile && kind == Kind::File {
                continue;
            }
            let target = if kind == Kind::Symlink {
                link.clear();
                let t = rfs::readlinkat(fd, name, std::mem::take(&mut link)).map_err(|e| {
                    AuditError::new(Step::ReadLink, path.child_display(bytes), e.into())
                })?;
                Some(t.into_bytes())
            } else {
                None
            };
            entries.push(Entry {
                name: bytes.to_vec(),
                kind,
                size: if kind == Kind::Dir {
                    0
                } else {
                    st.st_size as u64
                },
                mtime_ns: st.st_mtime as i64 * 1_000_000_000 + st.st_mtime_nsec as i64,
                ctime_ns: st.st_ctime as i64 * 1_000_000_000 + st.st_ctime_nsec as i64,
                ino: st.st_ino as u64,
                mode: st.st_mode as u32,
                hash: None,
                target,
                dir: None,
            });
        }
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(entries)
    }
}

/// Whether a directory's listing is exactly as before, so the diff and
/// the paths it would build can be skipped: same names, kinds and stat,
/// and nothing whose content must be re-read.
fn same_listing(old: &[Entry], now: &[Entry]) -> bool {
    old.len() == now.len()
        && old.iter().zip(now).all(|(b, a)| {
            b.hash.is_none()
                && b.name == a.name
                && b.kind == a.kind
                && b.size == a.size
                && b.mtime_ns == a.mtime_ns
                && b.ctime_ns == a.ctime_ns
                && b.ino == a.ino
                && b.mode == a.mode
                && b.target == a.target
        })
}

/// sha256 of the regular file `e` in the directory `path` (open as `fd`),
/// an error naming it.
fn hash_entry(fd: BorrowedFd, path: &PathNode, e: &Entry) -> Result<[u8; 32], AuditError> {
    hash_at(fd, &e.name, e.ino)
        .map_err(|(step, err)| AuditError::new(step, path.child_display(&e.name), err))
}

/// sha256 of the regular file `name` in `dir`, which must still be the file
/// the listing saw (`ino`).
fn hash_at(dir: BorrowedFd, name: &[u8], ino: u64) -> Result<[u8; 32], (Step, io::Error)> {
    // NONBLOCK: a FIFO swapped in after the listing must not hang the walk.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rfs::openat(dir, name, flags, Mode::empty()).map_err(|e| (Step::Hash, e.into()))?;
    let st = rfs::fstat(&fd).map_err(|e| (Step::Hash, e.into()))?;
    #[allow(clippy::unnecessary_cast)]
    if FileType::from_raw_mode(st.st_mode as _) != FileType::RegularFile || st.st_ino as u64 != ino
    {
        return Err((
            Step::Changed,
            io::Error::other("another file took its place"),
        ));
    }
    let mut f = fs::File::from(fd);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err((Step::Hash, e)),
        }
    }
    Ok(h.finalize().into())
}

/// A test seam: lets a unit test change the tree at a precise point of the
/// walk (a file vanishing between its listing and its `lstat`), which no
/// outside process can time. Compiled out of non-test builds.
pub(crate) mod seam {
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Point {
        /// Before `lstat` of the entry named.
        BeforeStat,
        /// Before opening the directory named.
        BeforeOpen,
        /// After opening the directory named, before listing it.
        Opened,
    }

    #[cfg(test)]
    pub(crate) type Hook = Box<dyn Fn(Point, &[u8]) + Send + Sync>;

    /// Hooks run at every point of every walk in the test process; each
    /// test's hook acts only on names unique to it.
    #[cfg(test)]
    pub(crate) static HOOKS: std::sync::Mutex<Vec<Hook>> = std::sync::Mutex::new(Vec::new());

    #[cfg(test)]
    pub(crate) fn hit(point: Point, name: &[u8]) {
        let hooks = HOOKS.lock().unwrap_or_else(|p| p.into_inner());
        for h in hooks.iter() {
            h(point, name);
        }
    }

    #[cfg(not(test))]
    #[inline(always)]
    pub(crate) fn hit(_: Point, _: &[u8]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deep_path_chain_is_displayed_and_dropped_without_recursion() {
        // A small stack: a recursive drop of a million links would overflow it.
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(|| {
                let mut node = Arc::new(PathNode {
                    parent: None,
                    name: b"".to_vec(),
                });
                for _ in 0..1_000_000 {
                    node = Arc::new(PathNode {
                        parent: Some(node),
                        name: b"d".to_vec(),
                    });
                }
                assert_eq!(node.display().len(), 2 * 1_000_000 - 1);
                drop(node);
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
