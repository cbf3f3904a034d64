//! The mutation audit (SPEC §5.5): what did a batch of workers change, and
//! was each change allowed by some job's write policy?
//!
//! A snapshot records, per directory, the `lstat` of every entry (size,
//! mtime and ctime in ns, inode, mode, symlink target). Content is hashed
//! only where a stat cannot be trusted: files touched within the last couple
//! of seconds when the snapshot is taken (file times are coarse, so a rewrite
//! in the same tick keeps them), and, at compare time, files whose stat moved
//! but whose size did not. ctime is kept although nobody asked for it because
//! a worker can put mtime back with `touch -d` but cannot set ctime.
//!
//! Symlinks are never followed: a link is an entry with a target, and a
//! write through a symlinked directory inside the tree lands on the real
//! path, which the walk visits in its own right.
//!
//! `.git` directories are summarised rather than walked: HEAD, config,
//! packed-refs and every file under refs/, hooks/, info/ and worktrees/*/HEAD
//! are hashed (a handful of small files). The index is left out on purpose:
//! read-only commands such as `git status` rewrite it to refresh stat data,
//! and any content a worker stages came from a work-tree file the walk sees.

use crate::canonical;
use crate::plan::{sidecar, WritePolicy};
use crate::policy::{self, Matcher};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

pub const SNAPSHOT_VERSION: u32 = 1;

/// Files whose mtime or ctime is this close to the snapshot (or later) are
/// hashed when the snapshot is taken: their stat may not change on rewrite.
const RACY_WINDOW_NS: i64 = 2_000_000_000;

/// What one directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    #[serde(rename = "f")]
    File,
    #[serde(rename = "d")]
    Dir,
    #[serde(rename = "l")]
    Symlink,
    #[serde(rename = "o")]
    Other,
}

/// One `lstat`ed directory entry. Short wire names: a snapshot of a large
/// tree holds one of these per file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    #[serde(rename = "n")]
    pub name: String,
    #[serde(rename = "k")]
    pub kind: Kind,
    #[serde(rename = "s")]
    pub size: u64,
    #[serde(rename = "m")]
    pub mtime_ns: i64,
    #[serde(rename = "c")]
    pub ctime_ns: i64,
    #[serde(rename = "i")]
    pub ino: u64,
    #[serde(rename = "p")]
    pub mode: u32,
    /// sha256 of the content, where it was taken.
    #[serde(rename = "h", default, skip_serializing_if = "Option::is_none")]
    pub hash: Option<String>,
    /// Symlink target, as stored in the link.
    #[serde(rename = "t", default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// The state of the tree before a batch. Stored beside each job as JSON so a
/// resumed exec can still compare against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub version: u32,
    pub taken_at_ns: i64,
    /// Display path of every walked root: `""` for the project root,
    /// project-relative or absolute for the others.
    pub roots: Vec<String>,
    /// Directory display path -> its entries, sorted by name.
    pub dirs: BTreeMap<String, Vec<Entry>>,
    /// `<repo>/.git/<file>` -> sha256 of the file, for the summarised files.
    pub git: BTreeMap<String, String>,
    pub digest: String,
}

pub struct SnapshotOptions<'a> {
    /// The project root, plus a worktree outside it.
    pub roots: &'a [PathBuf],
    pub project_root: &'a Path,
    /// Orchestrator files left out of both walks: manifest, team-state and
    /// its lock, events and its lock, snapshot sidecars.
    pub exclude: &'a [PathBuf],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// Permission bits changed, content did not (as far as can be told).
    Mode,
    /// The entry became something else: file -> symlink, dir -> file, ...
    Type,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Mode => "mode",
            ChangeKind::Type => "type",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedPath {
    /// Project-relative with `/` separators, or absolute outside the root.
    pub path: String,
    pub kind: ChangeKind,
    /// Where the path points now, when it is a symlink: the link's text...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// ...and that target resolved lexically against the link's directory,
    /// in the same form as `path`. A link is only as allowed as its target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// The path is (or was) a directory.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_dir: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    pub changed: Vec<ChangedPath>,
    pub before_digest: String,
    /// Equal to `before_digest` when nothing changed; otherwise the digest
    /// of the before digest and the sorted changes.
    pub after_digest: String,
}

/// Walk every root and record the tree.
pub fn snapshot(opts: &SnapshotOptions) -> io::Result<Snapshot> {
    let taken_at_ns = now_ns();
    let ctx = Ctx::new(opts)?;
    let mut walked = ctx.walk_all()?;
    // Hash the racily clean files now, while we still can.
    let racy_from = taken_at_ns - RACY_WINDOW_NS;
    walked.dirs.par_iter_mut().try_for_each(|(dir, entries)| {
        for e in entries.iter_mut() {
            if e.kind == Kind::File && (e.mtime_ns >= racy_from || e.ctime_ns >= racy_from) {
                e.hash = Some(hash_file(&ctx.abs(&join(dir, &e.name)))?);
            }
        }
        Ok::<(), io::Error>(())
    })?;
    let dirs: BTreeMap<String, Vec<Entry>> = walked.dirs.into_iter().collect();
    let git: BTreeMap<String, String> = walked.git.into_iter().collect();
    let digest = tree_digest(&dirs, &git);
    Ok(Snapshot {
        version: SNAPSHOT_VERSION,
        taken_at_ns,
        roots: ctx.roots.iter().map(|(_, d)| d.clone()).collect(),
        dirs,
        git,
        digest,
    })
}

/// Walk again and report what differs from `before`.
pub fn compare(before: &Snapshot, opts: &SnapshotOptions) -> io::Result<Changes> {
    let ctx = Ctx::new(opts)?;
    let walked = ctx.walk_all()?;
    let after_dirs: HashSet<&str> = walked.dirs.iter().map(|(d, _)| d.as_str()).collect();

    let per_dir: Vec<Vec<ChangedPath>> = walked
        .dirs
        .par_iter()
        .map(|(dir, entries)| diff_dir(&ctx, before, dir, entries))
        .collect::<io::Result<_>>()?;
    let mut changed: Vec<ChangedPath> = per_dir.into_iter().flatten().collect();

    // A walked root that vanished, or a directory the after walk never
    // reached for another reason than its parent (already reported).
    for (dir, entries) in &before.dirs {
        if !after_dirs.contains(dir.as_str()) && before.roots.contains(dir) {
            for e in entries {
                deleted(before, &join(dir, &e.name), e, &mut changed);
            }
        }
    }

    let after_git: BTreeMap<String, String> = walked.git.into_iter().collect();
    for (path, h) in &after_git {
        match before.git.get(path) {
            None => changed.push(change(path, ChangeKind::Added, None)),
            Some(old) if old != h => changed.push(change(path, ChangeKind::Modified, None)),
            _ => {}
        }
    }
    for path in before.git.keys() {
        if !after_git.contains_key(path) {
            changed.push(change(path, ChangeKind::Deleted, None));
        }
    }

    changed.sort_by(|a, b| a.path.cmp(&b.path));
    changed.dedup_by(|a, b| a.path == b.path);
    let after_digest = if changed.is_empty() {
        before.digest.clone()
    } else {
        canonical::digest(&json!({"before": before.digest, "changes": changed}))
    };
    Ok(Changes {
        changed,
        before_digest: before.digest.clone(),
        after_digest,
    })
}

fn change(path: &str, kind: ChangeKind, target: Option<String>) -> ChangedPath {
    ChangedPath {
        path: path.to_string(),
        kind,
        target,
        resolved: None,
        is_dir: false,
    }
}

/// A change to a symlink, with its target resolved.
fn link_change(ctx: &Ctx, path: &str, kind: ChangeKind, target: Option<String>) -> ChangedPath {
    let resolved = target.as_ref().map(|t| {
        let link = ctx.abs(path);
        let dir = link.parent().unwrap_or(Path::new("/"));
        let joined = dir.join(t).to_string_lossy().into_owned();
        // Climbing above `/` stays at `/`, as the kernel does.
        let clean = policy::normalise(&joined).unwrap_or_else(|| "/".to_string());
        ctx.display(Path::new(&clean))
    });
    ChangedPath {
        path: path.to_string(),
        kind,
        target,
        resolved,
        is_dir: false,
    }
}

/// Report `path` deleted and, for a directory, everything the snapshot held
/// below it.
fn deleted(before: &Snapshot, path: &str, e: &Entry, out: &mut Vec<ChangedPath>) {
    let mut c = change(path, ChangeKind::Deleted, None);
    c.is_dir = e.kind == Kind::Dir;
    out.push(c);
    if e.kind == Kind::Dir {
        deleted_below(before, path, out);
    }
}

fn deleted_below(before: &Snapshot, dir: &str, out: &mut Vec<ChangedPath>) {
    // Keys sharing the prefix `dir/` are contiguous in byte order.
    let prefix = format!("{dir}/");
    let below = std::iter::once((dir, before.dirs.get(dir)))
        .filter_map(|(d, es)| es.map(|es| (d.to_string(), es)))
        .chain(
            before
                .dirs
                .range(prefix.clone()..)
                .take_while(|(k, _)| k.starts_with(&prefix))
                .map(|(k, es)| (k.clone(), es)),
        );
    for (d, es) in below {
        for e in es {
            let mut c = change(&join(&d, &e.name), ChangeKind::Deleted, None);
            c.is_dir = e.kind == Kind::Dir;
            out.push(c);
        }
    }
    let git_prefix = format!("{dir}/.git/");
    for k in before
        .git
        .range(git_prefix.clone()..)
        .take_while(|(k, _)| k.starts_with(&git_prefix))
        .map(|(k, _)| k)
    {
        out.push(change(k, ChangeKind::Deleted, None));
    }
}

/// Compare one directory's entries now with the snapshot's, both sorted.
fn diff_dir(
    ctx: &Ctx,
    before: &Snapshot,
    dir: &str,
    after: &[Entry],
) -> io::Result<Vec<ChangedPath>> {
    let mut out = Vec::new();
    let empty: Vec<Entry> = Vec::new();
    let old = before.dirs.get(dir).unwrap_or(&empty);
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < after.len() {
        let ord = match (old.get(i), after.get(j)) {
            (Some(b), Some(a)) => b.name.cmp(&a.name),
            (Some(_), None) => std::cmp::Ordering::Less,
            _ => std::cmp::Ordering::Greater,
        };
        match ord {
            std::cmp::Ordering::Less => {
                let b = &old[i];
                deleted(before, &join(dir, &b.name), b, &mut out);
                i += 1;
            }
            std::cmp::Ordering::Greater => {
                let a = &after[j];
                let path = join(dir, &a.name);
                let mut c = link_change(ctx, &path, ChangeKind::Added, a.target.clone());
                c.is_dir = a.kind == Kind::Dir;
                out.push(c);
                j += 1;
            }
            std::cmp::Ordering::Equal => {
                let (b, a) = (&old[i], &after[j]);
                // The path is built only for a change: most entries have none.
                if let Some(kind) = entry_change(ctx, dir, b, a)? {
                    let path = join(dir, &a.name);
                    let mut c = link_change(ctx, &path, kind, a.target.clone());
                    c.is_dir = a.kind == Kind::Dir || b.kind == Kind::Dir;
                    out.push(c);
                    if b.kind == Kind::Dir && a.kind != Kind::Dir {
                        deleted_below(before, &path, &mut out);
                    }
                }
                i += 1;
                j += 1;
            }
        }
    }
    Ok(out)
}

fn entry_change(ctx: &Ctx, dir: &str, b: &Entry, a: &Entry) -> io::Result<Option<ChangeKind>> {
    if b.kind != a.kind {
        return Ok(Some(ChangeKind::Type));
    }
    let perms_changed = b.mode & 0o7777 != a.mode & 0o7777;
    match a.kind {
        Kind::Symlink => Ok((b.target != a.target).then_some(ChangeKind::Modified)),
        Kind::Dir | Kind::Other => Ok(perms_changed.then_some(ChangeKind::Mode)),
        Kind::File => {
            let stat_same = b.size == a.size
                && b.mtime_ns == a.mtime_ns
                && b.ctime_ns == a.ctime_ns
                && b.ino == a.ino;
            if b.size != a.size {
                return Ok(Some(ChangeKind::Modified));
            }
            if let Some(h) = &b.hash {
                // Racily clean at snapshot time (its stat proves nothing), or
                // stat moved with the size unchanged: content decides.
                let now = hash_file(&ctx.abs(&join(dir, &a.name))).unwrap_or_default();
                return Ok(if &now != h {
                    Some(ChangeKind::Modified)
                } else {
                    perms_changed.then_some(ChangeKind::Mode)
                });
            }
            if stat_same {
                return Ok(perms_changed.then_some(ChangeKind::Mode));
            }
            // chmod moves only ctime; anything else with no hash to check
            // against cannot be shown unchanged.
            if perms_changed && b.mtime_ns == a.mtime_ns && b.ino == a.ino {
                return Ok(Some(ChangeKind::Mode));
            }
            Ok(Some(ChangeKind::Modified))
        }
    }
}

/// The walk shared by snapshot and compare.
struct Ctx {
    project_root: PathBuf,
    /// (absolute canonical path, display path)
    roots: Vec<(PathBuf, String)>,
    /// Directory display path -> names left out of it.
    exclude: HashMap<String, HashSet<String>>,
}

#[derive(Default)]
struct Walked {
    dirs: Vec<(String, Vec<Entry>)>,
    git: Vec<(String, String)>,
}

impl Ctx {
    fn new(opts: &SnapshotOptions) -> io::Result<Ctx> {
        let project_root = fs::canonicalize(opts.project_root)?;
        let mut ctx = Ctx {
            project_root,
            roots: Vec::new(),
            exclude: HashMap::new(),
        };
        let mut roots: Vec<(PathBuf, String)> = Vec::new();
        for r in opts.roots {
            let abs = if r.is_absolute() {
                r.clone()
            } else {
                opts.project_root.join(r)
            };
            let canon = fs::canonicalize(&abs).unwrap_or(abs);
            let disp = ctx.display(&canon);
            roots.push((canon, disp));
        }
        roots.sort_by(|a, b| a.0.cmp(&b.0));
        roots.dedup_by(|a, b| a.0 == b.0);
        // A root inside another root is covered by the outer walk.
        let all = roots.clone();
        roots.retain(|(p, _)| !all.iter().any(|(q, _)| q != p && p.starts_with(q)));
        ctx.roots = roots;
        for x in opts.exclude {
            let abs = if x.is_absolute() {
                x.clone()
            } else {
                opts.project_root.join(x)
            };
            // The file may not exist yet (a lock): resolve its directory.
            let canon = match (abs.parent(), abs.file_name()) {
                (Some(dir), Some(name)) => fs::canonicalize(dir)
                    .map(|d| d.join(name))
                    .unwrap_or(abs.clone()),
                _ => abs.clone(),
            };
            for p in [ctx.display(&canon), ctx.display(&abs)] {
                let (dir, name) = match p.rsplit_once('/') {
                    Some(("", name)) if p.starts_with('/') => ("/".to_string(), name),
                    Some((dir, name)) => (dir.to_string(), name),
                    None => (String::new(), p.as_str()),
                };
                ctx.exclude.entry(dir).or_default().insert(name.to_string());
            }
        }
        Ok(ctx)
    }

    /// Project-relative with `/`, or absolute outside the project root.
    fn display(&self, p: &Path) -> String {
        match p.strip_prefix(&self.project_root) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => p.to_string_lossy().into_owned(),
        }
    }

    fn abs(&self, disp: &str) -> PathBuf {
        if disp.starts_with('/') {
            PathBuf::from(disp)
        } else {
            self.project_root.join(disp)
        }
    }

    fn walk_all(&self) -> io::Result<Walked> {
        let parts: Vec<Walked> = self
            .roots
            .par_iter()
            .map(|(abs, disp)| match fs::symlink_metadata(abs) {
                Ok(m) if m.is_dir() => self.walk(abs, disp),
                // A root that is gone (or no longer a directory) has nothing
                // in it; compare reports its old contents deleted.
                _ => Ok(Walked::default()),
            })
            .collect::<io::Result<_>>()?;
        let mut all = Walked::default();
        for mut p in parts {
            all.dirs.append(&mut p.dirs);
            all.git.append(&mut p.git);
        }
        Ok(all)
    }

    /// Read one directory and, in parallel, everything below it. Raw
    /// `openat`/`getdents`/`fstatat` relative to the directory's fd: no path
    /// resolution per entry, no per-entry heap work beyond the name, and a
    /// directory swapped for a symlink mid-walk is refused (`O_NOFOLLOW`),
    /// never followed.
    // stat64's field types differ between targets: the casts are not no-ops
    // everywhere.
    #[allow(clippy::unnecessary_cast)]
    fn walk(&self, abs: &Path, disp: &str) -> io::Result<Walked> {
        let dir = match RawDir::open(abs) {
            Ok(d) => d,
            // Gone between its parent's listing and now: the parent's entry
            // already records what was there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Walked::default()),
            Err(e) => return Err(with_path(e, abs)),
        };
        let excluded = self.exclude.get(disp);
        let mut entries = Vec::new();
        let mut subdirs: Vec<String> = Vec::new();
        let mut git = Vec::new();
        let mut link_buf = Vec::new();
        while let Some(name) = dir.next_name() {
            let name_bytes = name.to_bytes();
            if name_bytes == b"." || name_bytes == b".." {
                continue;
            }
            let name_str = String::from_utf8_lossy(name_bytes).into_owned();
            if excluded.is_some_and(|x| x.contains(&name_str)) {
                continue;
            }
            let st = match dir.lstat(name) {
                Ok(st) => st,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(with_path(e, &abs.join(&name_str))),
            };
            let fmt = st.st_mode & libc::S_IFMT;
            let kind = match fmt {
                libc::S_IFLNK => Kind::Symlink,
                libc::S_IFDIR => Kind::Dir,
                libc::S_IFREG => Kind::File,
                _ => Kind::Other,
            };
            let target = if kind == Kind::Symlink {
                dir.read_link(name, &mut link_buf)
            } else {
                None
            };
            if kind == Kind::Dir {
                if name_str == ".git" {
                    git = summarise_git(&abs.join(".git"), &join(disp, ".git"));
                } else {
                    subdirs.push(name_str.clone());
                }
            }
            entries.push(Entry {
                name: name_str,
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
            });
        }
        drop(dir);
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        let walk_sub = |name: &String| self.walk(&abs.join(name), &join(disp, name));
        let nested: Vec<Walked> = if subdirs.len() > 1 {
            subdirs
                .par_iter()
                .map(walk_sub)
                .collect::<io::Result<_>>()?
        } else {
            subdirs.iter().map(walk_sub).collect::<io::Result<_>>()?
        };
        let mut out = Walked {
            dirs: Vec::with_capacity(1 + nested.len()),
            git,
        };
        out.dirs.push((disp.to_string(), entries));
        for mut n in nested {
            out.dirs.append(&mut n.dirs);
            out.git.append(&mut n.git);
        }
        Ok(out)
    }
}

/// An open directory stream, read with libc.
struct RawDir {
    dir: *mut libc::DIR,
    fd: libc::c_int,
}

impl RawDir {
    fn open(p: &Path) -> io::Result<RawDir> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
        // SAFETY: a valid NUL-terminated path; the fd is owned by the DIR
        // from fdopendir on, and closed by closedir in Drop.
        unsafe {
            let fd = libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            );
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            let dir = libc::fdopendir(fd);
            if dir.is_null() {
                let e = io::Error::last_os_error();
                libc::close(fd);
                return Err(e);
            }
            Ok(RawDir { dir, fd })
        }
    }

    /// The next entry's name; valid until the next call.
    fn next_name(&self) -> Option<&std::ffi::CStr> {
        // SAFETY: `dir` is a live stream owned by self; readdir64's result
        // points into it and stays valid until the next readdir64 on it,
        // which needs `&self` again after this borrow ends in practice: the
        // caller copies the name before asking for the next one.
        unsafe {
            let ent = libc::readdir64(self.dir);
            if ent.is_null() {
                return None;
            }
            Some(std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()))
        }
    }

    fn lstat(&self, name: &std::ffi::CStr) -> io::Result<libc::stat64> {
        // SAFETY: fstatat64 writes a whole stat64 into `st` on success.
        unsafe {
            let mut st: libc::stat64 = std::mem::zeroed();
            if libc::fstatat64(self.fd, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(st)
        }
    }

    fn read_link(&self, name: &std::ffi::CStr, buf: &mut Vec<u8>) -> Option<String> {
        buf.resize(libc::PATH_MAX as usize + 1, 0);
        // SAFETY: readlinkat writes at most buf.len() bytes into buf.
        let n = unsafe {
            libc::readlinkat(
                self.fd,
                name.as_ptr(),
                buf.as_mut_ptr() as *mut libc::c_char,
                buf.len(),
            )
        };
        (n >= 0).then(|| String::from_utf8_lossy(&buf[..n as usize]).into_owned())
    }
}

impl Drop for RawDir {
    fn drop(&mut self) {
        // SAFETY: `dir` came from fdopendir and is closed exactly once.
        unsafe { libc::closedir(self.dir) };
    }
}

/// Hash the few `.git` files that say what the repository is: which commit
/// each ref names, its configuration and hooks.
fn summarise_git(gitdir: &Path, disp: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for name in ["HEAD", "config", "packed-refs"] {
        if let Ok(h) = hash_file(&gitdir.join(name)) {
            out.push((format!("{disp}/{name}"), h));
        }
    }
    for sub in ["refs", "hooks", "info"] {
        summarise_below(&gitdir.join(sub), &format!("{disp}/{sub}"), &mut out);
    }
    if let Ok(rd) = fs::read_dir(gitdir.join("worktrees")) {
        for de in rd.flatten() {
            let name = de.file_name().to_string_lossy().into_owned();
            if let Ok(h) = hash_file(&de.path().join("HEAD")) {
                out.push((format!("{disp}/worktrees/{name}/HEAD"), h));
            }
        }
    }
    out
}

fn summarise_below(dir: &Path, disp: &str, out: &mut Vec<(String, String)>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for de in rd.flatten() {
        let name = de.file_name().to_string_lossy().into_owned();
        let path = format!("{disp}/{name}");
        match de.file_type() {
            Ok(t) if t.is_dir() => summarise_below(&de.path(), &path, out),
            Ok(t) if t.is_symlink() => {
                let target = fs::read_link(de.path()).unwrap_or_default();
                let text = format!("symlink:{}", target.to_string_lossy());
                out.push((path, canonical::sha256_hex(text.as_bytes())));
            }
            Ok(_) => {
                if let Ok(h) = hash_file(&de.path()) {
                    out.push((path, h));
                }
            }
            Err(_) => {}
        }
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

fn with_path(e: io::Error, p: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", p.display()))
}

fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// sha256 of a file's content, never following a final symlink.
fn hash_file(p: &Path) -> io::Result<String> {
    let md = fs::symlink_metadata(p)?;
    if !md.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file"));
    }
    let mut f = fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(canonical::sha256_hex(&h.finalize()))
}

/// sha256 over every entry, in key order: one hash per directory (in
/// parallel), then one over those.
fn tree_digest(dirs: &BTreeMap<String, Vec<Entry>>, git: &BTreeMap<String, String>) -> String {
    let per_dir: Vec<[u8; 32]> = dirs
        .par_iter()
        .map(|(dir, entries)| {
            let mut h = Sha256::new();
            h.update(b"D\0");
            h.update(dir.as_bytes());
            for e in entries {
                h.update(b"\0");
                h.update(e.name.as_bytes());
                h.update([0, e.kind as u8]);
                h.update(e.size.to_le_bytes());
                h.update(e.mtime_ns.to_le_bytes());
                h.update(e.ctime_ns.to_le_bytes());
                h.update(e.ino.to_le_bytes());
                h.update(e.mode.to_le_bytes());
                h.update(e.hash.as_deref().unwrap_or("").as_bytes());
                h.update(b"\0");
                h.update(e.target.as_deref().unwrap_or("").as_bytes());
            }
            h.finalize().into()
        })
        .collect();
    let mut h = Sha256::new();
    for d in &per_dir {
        h.update(d);
    }
    for (k, v) in git {
        h.update(b"G\0");
        h.update(k.as_bytes());
        h.update(b"\0");
        h.update(v.as_bytes());
    }
    format!("sha256:{}", canonical::sha256_hex(&h.finalize()))
}

/// The audit's verdict on one job's attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditResult {
    /// ok | failed-no-mutation | contract-failed-unattributed |
    /// mutation-present-unresolved
    pub status: String,
    pub changed_paths: Vec<String>,
    /// Who the changes belong to: `none`, or `+`-joined parts of `own`,
    /// `batch` (another job of the batch), `out-of-plan` (declared by an
    /// implementer), `unattributed`.
    pub attribution: String,
    pub retry_allowed: bool,
    /// The paths that make the status what it is: changes outside every
    /// policy, or a failed attempt's own changes.
    pub violations: Vec<String>,
    /// Changed paths allowed only because an implementer declared them.
    pub out_of_plan_edits: Vec<String>,
    pub before_digest: String,
    pub after_digest: String,
}

pub const STATUS_OK: &str = "ok";
pub const STATUS_FAILED_NO_MUTATION: &str = "failed-no-mutation";
pub const STATUS_UNATTRIBUTED: &str = "contract-failed-unattributed";
pub const STATUS_UNRESOLVED: &str = "mutation-present-unresolved";

impl AuditResult {
    /// The change summary for the event and the attempt record.
    pub fn change_summary(&self) -> Value {
        json!({
            "mutationStatus": self.status,
            "changedPaths": self.changed_paths,
            "attribution": self.attribution,
            "retryAllowed": self.retry_allowed,
            "violations": self.violations,
            "outOfPlanEdits": self.out_of_plan_edits,
            "beforeDigest": self.before_digest,
            "afterDigest": self.after_digest,
        })
    }
}

/// Judge one job's attempt against the batch's policies (`batch` may or may
/// not include `own`). `out_of_plan_edits` are the edits declared by the
/// batch's implementers (read with [`out_of_plan_edits`]); they count only
/// when an implementer is in the batch, and never for a path that escapes.
/// For a whole batch, [`attribute`] once and [`judge_in`] per job instead.
pub fn judge(
    changes: &Changes,
    own: &WritePolicy,
    batch: &[WritePolicy],
    out_of_plan_edits: &[String],
    attempt_succeeded: bool,
    result_present: bool,
) -> AuditResult {
    let mut policies: Vec<WritePolicy> = vec![own.clone()];
    policies.extend(batch.iter().filter(|p| *p != own).cloned());
    // Declarations count for the batch's implementers; attribute them to the
    // first implementer so the own job gets them when it is one.
    let declarer = policies.iter().position(|p| p.role == "implementer");
    let declared: Vec<(usize, Vec<String>)> = declarer
        .map(|i| vec![(i, out_of_plan_edits.to_vec())])
        .unwrap_or_default();
    let view = attribute(changes, &policies, &declared);
    judge_in(&view, 0, attempt_succeeded, result_present)
}

/// The changes of one settle round, each attributed once to the policies of
/// the batch that may have made it. Built in one pass over the changes
/// (literal allow-list entries are looked up, only glob policies are tried
/// one by one), so judging every job of a large batch stays linear.
pub struct Attributed<'a> {
    changes: &'a Changes,
    batch: &'a [WritePolicy],
    /// For each change, the indices of the policies covering it.
    owners: Vec<Vec<usize>>,
    /// For each policy, the changes it covers.
    by_policy: Vec<Vec<usize>>,
    /// For each change no policy covers, the implementers that declared it
    /// an out-of-plan edit (empty: unattributed).
    declared_by: HashMap<usize, Vec<usize>>,
    /// Per policy, the out-of-plan changes it declared.
    declared_of: Vec<Vec<usize>>,
    unattributed: Vec<usize>,
    covered: usize,
}

/// Attribute `changes` to `batch`. `declared` lists, per implementer policy
/// index, the out-of-plan edits its result declares.
pub fn attribute<'a>(
    changes: &'a Changes,
    batch: &'a [WritePolicy],
    declared: &[(usize, Vec<String>)],
) -> Attributed<'a> {
    // A policy that does not compile allows nothing: its changes show up.
    let matchers: Vec<Option<Matcher>> = batch.iter().map(|p| Matcher::new(p).ok()).collect();
    let mut literal: HashMap<String, Vec<usize>> = HashMap::new();
    let mut ancestors: HashMap<String, Vec<usize>> = HashMap::new();
    let mut globbed: Vec<usize> = Vec::new();
    for (i, p) in batch.iter().enumerate() {
        let mut has_glob = false;
        for entry in &p.allow {
            if policy::is_glob(entry) {
                has_glob = true;
            } else if let Some(n) = policy::normalise(entry) {
                literal.entry(n).or_default().push(i);
            }
            // `out/result.md` (or `out/**`) may create `out/`.
            let mut dir = entry.as_str();
            while let Some(cut) = dir.rfind('/') {
                dir = &dir[..cut];
                let list = ancestors.entry(dir.to_string()).or_default();
                if list.last() != Some(&i) {
                    list.push(i);
                }
            }
        }
        if has_glob {
            globbed.push(i);
        }
    }
    let implementer_present = batch.iter().any(|p| p.role == "implementer");
    let mut declarations: HashMap<String, Vec<usize>> = HashMap::new();
    if implementer_present {
        for (i, paths) in declared {
            for p in paths
                .iter()
                .filter_map(|p| policy::normalise(p))
                .filter(|p| !p.is_empty())
            {
                declarations.entry(p).or_default().push(*i);
            }
        }
    }
    let mut view = Attributed {
        changes,
        batch,
        owners: Vec::with_capacity(changes.changed.len()),
        by_policy: vec![Vec::new(); batch.len()],
        declared_by: HashMap::new(),
        declared_of: vec![Vec::new(); batch.len()],
        unattributed: Vec::new(),
        covered: 0,
    };
    for (ci, c) in changes.changed.iter().enumerate() {
        let p = c.path.as_str();
        let key = policy::normalise(p).unwrap_or_default();
        let mut candidates: Vec<usize> = literal.get(&key).cloned().unwrap_or_default();
        candidates.extend(globbed.iter().copied());
        if c.is_dir {
            candidates.extend(ancestors.get(p).into_iter().flatten().copied());
        }
        candidates.sort_unstable();
        candidates.dedup();
        // A symlink is allowed where both it and what it points at are; a
        // directory where something below it may be written.
        let probe = format!("{p}/_");
        let owners: Vec<usize> = candidates
            .into_iter()
            .filter(|&i| {
                let Some(m) = &matchers[i] else { return false };
                let here = m.allows(p)
                    || (c.is_dir
                        && (m.allows(&probe) || ancestors.get(p).is_some_and(|l| l.contains(&i))));
                here && c.resolved.as_deref().is_none_or(|t| m.allows(t))
            })
            .collect();
        if owners.is_empty() {
            match declarations.get(&key).filter(|_| c.resolved.is_none()) {
                Some(by) => {
                    for &i in by {
                        view.declared_of[i].push(ci);
                    }
                    view.declared_by.insert(ci, by.clone());
                }
                None => view.unattributed.push(ci),
            }
        } else {
            view.covered += 1;
            for &i in &owners {
                view.by_policy[i].push(ci);
            }
        }
        view.owners.push(owners);
    }
    view
}

/// Judge the attempt of the job whose policy is `batch[own]`, in time
/// proportional to its own changes and the batch's unattributed ones. Its
/// summary lists those changes, not the whole batch's.
pub fn judge_in(
    view: &Attributed,
    own: usize,
    attempt_succeeded: bool,
    result_present: bool,
) -> AuditResult {
    let policy = &view.batch[own];
    // The wrapper writes the log and status sidecar of every attempt, failed
    // or not: they are no sign the worker did anything.
    let bookkeeping: HashSet<&str> = policy
        .allow
        .iter()
        .filter(|p| p.ends_with(sidecar::LOG) || p.ends_with(sidecar::STATUS))
        .map(String::as_str)
        .collect();
    let changed = &view.changes.changed;
    let mut parts: BTreeSet<&str> = BTreeSet::new();
    let mut own_mutations = Vec::new();
    let mut mine: Vec<usize> = Vec::new();
    for &ci in &view.by_policy[own] {
        let c = &changed[ci];
        parts.insert("own");
        mine.push(ci);
        // A directory that appeared holds no content of its own: making the
        // ancestors of an allowed path (`mkdir -p out`) is no sign a failed
        // attempt left work behind. Files below it are reported in their own
        // right, and a directory outside every policy is still a violation.
        let bare_dir = c.is_dir && c.kind == ChangeKind::Added;
        if !bookkeeping.contains(c.path.as_str()) && !bare_dir {
            own_mutations.push(c.path.clone());
        }
    }
    if view.covered > view.by_policy[own].len()
        || view.by_policy[own]
            .iter()
            .any(|&ci| view.owners[ci].len() > 1)
    {
        parts.insert("batch");
    }
    let mut out_of_plan = Vec::new();
    if !view.declared_by.is_empty() {
        parts.insert("out-of-plan");
    }
    for &ci in &view.declared_of[own] {
        out_of_plan.push(changed[ci].path.clone());
        mine.push(ci);
        if policy.role == "implementer" {
            own_mutations.push(changed[ci].path.clone());
        }
    }
    let mut violations: Vec<String> = view
        .unattributed
        .iter()
        .map(|&ci| changed[ci].path.clone())
        .collect();
    if !violations.is_empty() {
        parts.insert("unattributed");
        mine.extend(view.unattributed.iter().copied());
    }
    mine.sort_unstable();
    mine.dedup();
    let failed = !attempt_succeeded || !result_present;
    let status = if !violations.is_empty() {
        STATUS_UNATTRIBUTED
    } else if failed && !own_mutations.is_empty() {
        violations = own_mutations;
        STATUS_UNRESOLVED
    } else if failed {
        STATUS_FAILED_NO_MUTATION
    } else {
        STATUS_OK
    };
    let attribution = if parts.is_empty() {
        "none".to_string()
    } else {
        parts.into_iter().collect::<Vec<_>>().join("+")
    };
    AuditResult {
        status: status.to_string(),
        changed_paths: mine.iter().map(|&ci| changed[ci].path.clone()).collect(),
        attribution,
        retry_allowed: status == STATUS_FAILED_NO_MUTATION,
        violations,
        out_of_plan_edits: out_of_plan,
        before_digest: view.changes.before_digest.clone(),
        after_digest: view.changes.after_digest.clone(),
    }
}

/// `implementation.outOfPlanEdits[].file` of an implementer's JSON result;
/// empty for anything else.
pub fn out_of_plan_edits(result_file: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(result_file) else {
        return Vec::new();
    };
    let Ok(doc) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    doc.pointer("/implementation/outOfPlanEdits")
        .and_then(Value::as_array)
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r.get("file").and_then(Value::as_str))
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
    use std::process::Command;

    struct Tree {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        roots: Vec<PathBuf>,
        exclude: Vec<PathBuf>,
    }

    impl Tree {
        fn new(files: &[&str]) -> Tree {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("proj");
            fs::create_dir(&root).unwrap();
            for f in files {
                write(&root.join(f), "content\n");
            }
            Tree {
                roots: vec![root.clone()],
                root,
                exclude: Vec::new(),
                _tmp: tmp,
            }
        }

        fn opts(&self) -> SnapshotOptions<'_> {
            SnapshotOptions {
                roots: &self.roots,
                project_root: &self.root,
                exclude: &self.exclude,
            }
        }

        fn snap(&self) -> Snapshot {
            snapshot(&self.opts()).unwrap()
        }

        fn compare(&self, before: &Snapshot) -> Changes {
            compare(before, &self.opts()).unwrap()
        }

        fn p(&self, rel: &str) -> PathBuf {
            self.root.join(rel)
        }
    }

    fn write(p: &Path, text: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    /// The same snapshot as if every file were old: no hashes, so compare
    /// must rely on stat alone.
    fn aged(mut s: Snapshot) -> Snapshot {
        for es in s.dirs.values_mut() {
            for e in es {
                e.hash = None;
            }
        }
        s
    }

    fn kinds(c: &Changes) -> Vec<(String, &'static str)> {
        c.changed
            .iter()
            .map(|c| (c.path.clone(), c.kind.as_str()))
            .collect()
    }

    fn pol(role: &str, allow: &[&str]) -> WritePolicy {
        let mut p = WritePolicy {
            role: role.into(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
            digest: String::new(),
        };
        p.digest = policy::digest_of(&p);
        p
    }

    fn judge_ok(c: &Changes, own: &WritePolicy) -> AuditResult {
        judge(c, own, std::slice::from_ref(own), &[], true, true)
    }

    #[test]
    fn no_change_means_no_changes_and_equal_digests() {
        let t = Tree::new(&["a.txt", "src/b.rs"]);
        for before in [t.snap(), aged(t.snap())] {
            let c = t.compare(&before);
            assert!(c.changed.is_empty(), "{:?}", c.changed);
            assert_eq!(c.before_digest, c.after_digest);
            let r = judge_ok(&c, &pol("analyst", &["out.md"]));
            assert_eq!(r.status, "ok");
            assert_eq!(r.attribution, "none");
        }
    }

    #[test]
    fn snapshot_round_trips_through_json() {
        let t = Tree::new(&["a.txt", "d/e/f.txt"]);
        symlink("a.txt", t.p("ln")).unwrap();
        let s = t.snap();
        let text = serde_json::to_string(&s).unwrap();
        let back: Snapshot = serde_json::from_str(&text).unwrap();
        assert_eq!(back, s);
        assert!(t.compare(&back).changed.is_empty());
    }

    #[test]
    fn file_replaced_by_symlink_to_outside_is_a_type_change_and_a_violation() {
        let t = Tree::new(&["src/a.rs", "secret.txt"]);
        let before = t.snap();
        fs::remove_file(t.p("src/a.rs")).unwrap();
        symlink("../secret.txt", t.p("src/a.rs")).unwrap();
        let c = t.compare(&before);
        assert_eq!(kinds(&c), vec![("src/a.rs".to_string(), "type")]);
        assert_eq!(c.changed[0].target.as_deref(), Some("../secret.txt"));
        assert_eq!(c.changed[0].resolved.as_deref(), Some("secret.txt"));
        // The link's own path is allowed; where it points is not.
        let r = judge_ok(&c, &pol("implementer", &["src/**"]));
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["src/a.rs"]);
        assert!(!r.retry_allowed);
        // An absolute target outside the tree is caught the same way.
        fs::remove_file(t.p("src/a.rs")).unwrap();
        symlink("/etc/passwd", t.p("src/a.rs")).unwrap();
        let c = t.compare(&before);
        assert_eq!(c.changed[0].resolved.as_deref(), Some("/etc/passwd"));
        let r = judge_ok(&c, &pol("implementer", &["src/**"]));
        assert_eq!(r.violations, vec!["src/a.rs"]);
        // A link inside the allowed area to the allowed area is fine.
        fs::remove_file(t.p("src/a.rs")).unwrap();
        symlink("b.rs", t.p("src/a.rs")).unwrap();
        let r = judge_ok(&t.compare(&before), &pol("implementer", &["src/**"]));
        assert_eq!(r.status, "ok");
    }

    #[test]
    fn write_through_symlinked_directory_is_seen_at_the_real_path() {
        let t = Tree::new(&["real/keep.txt", "allowed/x.txt"]);
        symlink("../real", t.p("allowed/link")).unwrap();
        let before = t.snap();
        write(&t.p("allowed/link/new.txt"), "sneaky");
        write(&t.p("allowed/link/keep.txt"), "changed content");
        let c = t.compare(&before);
        assert_eq!(
            kinds(&c),
            vec![
                ("real/keep.txt".to_string(), "modified"),
                ("real/new.txt".to_string(), "added")
            ]
        );
        let r = judge_ok(&c, &pol("implementer", &["allowed/**"]));
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["real/keep.txt", "real/new.txt"]);
    }

    #[test]
    fn new_symlinked_directory_pointing_outside_is_caught() {
        let t = Tree::new(&["allowed/x.txt"]);
        let before = t.snap();
        let outside = t._tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        symlink(&outside, t.p("allowed/escape")).unwrap();
        write(&t.p("allowed/escape/f"), "x");
        let c = t.compare(&before);
        assert_eq!(kinds(&c), vec![("allowed/escape".to_string(), "added")]);
        let r = judge_ok(&c, &pol("implementer", &["allowed/**"]));
        assert_eq!(r.violations, vec!["allowed/escape"]);
    }

    #[test]
    fn dot_dot_in_policy_or_declaration_does_not_widen() {
        let t = Tree::new(&["allowed/a.txt", "etc/passwd"]);
        let before = t.snap();
        write(&t.p("etc/passwd"), "owned");
        let c = t.compare(&before);
        let own = pol(
            "implementer",
            &["allowed/**", "allowed/*/../../etc/**", "../**"],
        );
        let declared = vec![
            "allowed/../../etc/passwd".to_string(),
            "../proj/etc/passwd".to_string(),
        ];
        let r = judge(&c, &own, std::slice::from_ref(&own), &declared, true, true);
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["etc/passwd"]);
        assert!(r.out_of_plan_edits.is_empty());
    }

    #[test]
    fn new_file_in_new_directory() {
        let t = Tree::new(&["a.txt"]);
        let before = t.snap();
        write(&t.p("new/deep/f.txt"), "x");
        let c = t.compare(&before);
        assert_eq!(
            kinds(&c),
            vec![
                ("new".to_string(), "added"),
                ("new/deep".to_string(), "added"),
                ("new/deep/f.txt".to_string(), "added"),
            ]
        );
        let r = judge_ok(&c, &pol("analyst", &["out.md"]));
        assert_eq!(r.violations.len(), 3);
        let r = judge_ok(&c, &pol("verifier", &["new/**"]));
        assert_eq!(r.status, "ok", "{r:?} {:?}", c.changed);
    }

    #[test]
    fn deleted_file_and_deleted_directory() {
        let t = Tree::new(&["a.txt", "d/x/y.txt", "d/z.txt"]);
        let before = t.snap();
        fs::remove_file(t.p("a.txt")).unwrap();
        fs::remove_dir_all(t.p("d")).unwrap();
        let c = t.compare(&before);
        assert_eq!(
            kinds(&c),
            vec![
                ("a.txt".to_string(), "deleted"),
                ("d".to_string(), "deleted"),
                ("d/x".to_string(), "deleted"),
                ("d/x/y.txt".to_string(), "deleted"),
                ("d/z.txt".to_string(), "deleted"),
            ]
        );
        // `d/**` covers removing `d` itself.
        let r = judge_ok(&c, &pol("analyst", &["d/**"]));
        assert_eq!(r.violations, vec!["a.txt"]);
    }

    #[test]
    fn made_executable_is_a_mode_change() {
        let t = Tree::new(&["run.sh"]);
        for before in [t.snap(), aged(t.snap())] {
            let mut perm = fs::metadata(t.p("run.sh")).unwrap().permissions();
            perm.set_mode(perm.mode() ^ 0o111);
            fs::set_permissions(t.p("run.sh"), perm).unwrap();
            let c = t.compare(&before);
            assert_eq!(kinds(&c), vec![("run.sh".to_string(), "mode")]);
            let r = judge_ok(&c, &pol("analyst", &["out.md"]));
            assert_eq!(r.violations, vec!["run.sh"]);
            // Put it back for the next round.
            let mut perm = fs::metadata(t.p("run.sh")).unwrap().permissions();
            perm.set_mode(perm.mode() ^ 0o111);
            fs::set_permissions(t.p("run.sh"), perm).unwrap();
        }
    }

    #[test]
    fn rename_out_of_an_allowed_path_is_a_violation() {
        let t = Tree::new(&["allowed/a.txt"]);
        let before = t.snap();
        fs::create_dir(t.p("elsewhere")).unwrap();
        fs::rename(t.p("allowed/a.txt"), t.p("elsewhere/a.txt")).unwrap();
        let c = t.compare(&before);
        assert_eq!(
            kinds(&c),
            vec![
                ("allowed/a.txt".to_string(), "deleted"),
                ("elsewhere".to_string(), "added"),
                ("elsewhere/a.txt".to_string(), "added"),
            ]
        );
        let r = judge_ok(&c, &pol("implementer", &["allowed/**"]));
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["elsewhere", "elsewhere/a.txt"]);
        assert_eq!(r.attribution, "own+unattributed");
    }

    #[test]
    fn same_size_rewrite_with_mtime_put_back_is_caught() {
        let t = Tree::new(&["a.txt"]);
        let md = fs::metadata(t.p("a.txt")).unwrap();
        for before in [t.snap(), aged(t.snap())] {
            write(&t.p("a.txt"), "CONTENT\n");
            set_mtime(&t.p("a.txt"), md.mtime(), md.mtime_nsec());
            let c = t.compare(&before);
            assert_eq!(kinds(&c), vec![("a.txt".to_string(), "modified")]);
            write(&t.p("a.txt"), "content\n");
        }
    }

    #[test]
    fn touched_but_unchanged_file_is_not_a_change_when_hashed() {
        let t = Tree::new(&["a.txt"]);
        let before = t.snap();
        assert!(before.dirs[""][0].hash.is_some(), "fresh files are hashed");
        set_mtime(&t.p("a.txt"), 1_000_000, 0);
        assert!(t.compare(&before).changed.is_empty());
        // Without a hash, a moved stat cannot be shown harmless.
        let c = t.compare(&aged(before));
        assert_eq!(kinds(&c), vec![("a.txt".to_string(), "modified")]);
    }

    fn set_mtime(p: &Path, sec: i64, nsec: i64) {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        let times = [
            libc::timespec {
                tv_sec: 0,
                tv_nsec: libc::UTIME_OMIT,
            },
            libc::timespec {
                tv_sec: sec as libc::time_t,
                tv_nsec: nsec as _,
            },
        ];
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
        assert_eq!(rc, 0);
    }

    #[test]
    fn excluded_orchestrator_files_are_invisible() {
        let mut t = Tree::new(&["state/team-state.json"]);
        t.exclude = vec![
            t.p("state/team-state.json"),
            PathBuf::from("state/team-state.json.lock"),
        ];
        let before = t.snap();
        write(&t.p("state/team-state.json"), "{\"changed\":true}");
        write(&t.p("state/team-state.json.lock"), "");
        assert!(t.compare(&before).changed.is_empty());
    }

    #[test]
    fn worktree_outside_the_root_is_walked_with_absolute_paths() {
        let mut t = Tree::new(&["a.txt"]);
        let wt = t._tmp.path().join("wt");
        write(&wt.join("src/lib.rs"), "fn main() {}");
        let wt = fs::canonicalize(wt).unwrap();
        t.roots.push(wt.clone());
        let before = t.snap();
        write(&wt.join("src/lib.rs"), "fn main() { evil() }");
        let c = t.compare(&before);
        let path = format!("{}/src/lib.rs", wt.display());
        assert_eq!(kinds(&c), vec![(path.clone(), "modified")]);
        let own = pol("implementer", &[&format!("{}/**", wt.display())]);
        assert_eq!(judge_ok(&c, &own).status, "ok");
        assert_eq!(
            judge_ok(&c, &pol("verifier", &["a.txt"])).violations,
            vec![path]
        );
    }

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn git_internals_are_summarised_and_a_commit_shows() {
        let t = Tree::new(&["a.txt"]);
        git(&t.root, &["init", "-q", "-b", "main"]);
        git(&t.root, &["add", "."]);
        git(&t.root, &["commit", "-qm", "one"]);
        let before = t.snap();
        assert!(before.git.contains_key(".git/HEAD"));
        assert!(before.git.contains_key(".git/refs/heads/main"));
        assert!(
            !before.dirs.contains_key(".git"),
            "internals are not walked"
        );
        // git status refreshes the index: not a change.
        git(&t.root, &["status", "--porcelain"]);
        assert!(t.compare(&before).changed.is_empty());
        // Tracked content: seen in the work tree. A commit: seen in refs.
        write(&t.p("a.txt"), "new content\n");
        git(&t.root, &["commit", "-qam", "two"]);
        let c = t.compare(&before);
        assert_eq!(
            kinds(&c),
            vec![
                (".git/refs/heads/main".to_string(), "modified"),
                ("a.txt".to_string(), "modified"),
            ]
        );
    }

    // ---- outcomes --------------------------------------------------------

    fn changes_of(paths: &[&str]) -> Changes {
        Changes {
            changed: paths
                .iter()
                .map(|p| change(p, ChangeKind::Modified, None))
                .collect(),
            before_digest: "sha256:b".into(),
            after_digest: "sha256:a".into(),
        }
    }

    fn worker() -> WritePolicy {
        pol(
            "analyst",
            &["p/w1.md.log", "p/w1.md.status.json", "r/w1.json"],
        )
    }

    #[test]
    fn one_attribution_serves_every_job_of_the_batch() {
        let policies: Vec<WritePolicy> = (0..50)
            .map(|i| {
                pol(
                    "analyst",
                    &[&format!("r/w{i}.json"), &format!("p/w{i}.md.log")],
                )
            })
            .chain([pol("implementer", &["src/**"])])
            .collect();
        let mut paths: Vec<String> = (0..50).map(|i| format!("r/w{i}.json")).collect();
        paths.extend([
            "src/a.rs".to_string(),
            "notes.txt".to_string(),
            "docs/x.md".to_string(),
        ]);
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let c = changes_of(&refs);
        let declared = vec![(50, vec!["docs/x.md".to_string()])];
        let view = attribute(&c, &policies, &declared);
        let r = judge_in(&view, 7, true, true);
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, ["notes.txt"]);
        assert_eq!(r.changed_paths, ["r/w7.json", "notes.txt"]);
        let imp = judge_in(&view, 50, true, true);
        assert_eq!(imp.out_of_plan_edits, ["docs/x.md"]);
        assert!(imp.changed_paths.contains(&"src/a.rs".to_string()));
        assert!(
            imp.attribution.contains("out-of-plan"),
            "{}",
            imp.attribution
        );
    }

    #[test]
    fn outcome_ok_with_batch_attribution() {
        let other = pol("analyst", &["r/w2.json"]);
        let c = changes_of(&["r/w1.json", "r/w2.json"]);
        let r = judge(&c, &worker(), &[worker(), other], &[], true, true);
        assert_eq!(r.status, "ok");
        assert_eq!(r.attribution, "batch+own");
        assert!(!r.retry_allowed);
        let s = r.change_summary();
        assert_eq!(s["mutationStatus"], "ok");
        // A job's summary lists its own changes (and any unattributed ones),
        // not the whole batch's: a batch of N jobs logs N summaries.
        assert_eq!(s["changedPaths"], json!(["r/w1.json"]));
        assert_eq!(s["beforeDigest"], "sha256:b");
        assert_eq!(s["afterDigest"], "sha256:a");
        for k in ["attribution", "retryAllowed", "violations"] {
            assert!(s.get(k).is_some(), "{k}");
        }
    }

    #[test]
    fn outcome_failed_no_mutation_allows_retry() {
        // Only the wrapper's own log and status changed.
        let c = changes_of(&["p/w1.md.log", "p/w1.md.status.json"]);
        let r = judge(&c, &worker(), &[worker()], &[], true, false);
        assert_eq!(r.status, "failed-no-mutation");
        assert!(r.retry_allowed);
        let r = judge(&changes_of(&[]), &worker(), &[worker()], &[], false, true);
        assert_eq!(r.status, "failed-no-mutation");
    }

    #[test]
    fn outcome_mutation_present_unresolved() {
        let c = changes_of(&["p/w1.md.log", "r/w1.json"]);
        let r = judge(&c, &worker(), &[worker()], &[], true, false);
        assert_eq!(r.status, "mutation-present-unresolved");
        assert_eq!(r.violations, vec!["r/w1.json"]);
        assert!(!r.retry_allowed);
        // Another job's writes are not this failed attempt's mutation.
        let other = pol("analyst", &["r/w2.json"]);
        let c = changes_of(&["r/w2.json"]);
        let r = judge(&c, &worker(), &[worker(), other], &[], false, true);
        assert_eq!(r.status, "failed-no-mutation");
    }

    #[test]
    fn a_failed_attempt_that_only_made_directories_left_nothing() {
        let mut c = changes_of(&[]);
        for d in ["r", "r/sub"] {
            let mut x = change(d, ChangeKind::Added, None);
            x.is_dir = true;
            c.changed.push(x);
        }
        let own = pol("analyst", &["r/sub/w1.json"]);
        let r = judge(&c, &own, std::slice::from_ref(&own), &[], true, false);
        assert_eq!(r.status, "failed-no-mutation");
        assert!(r.retry_allowed);
        // Outside every policy a new directory is still a violation.
        let other = pol("analyst", &["elsewhere.json"]);
        let r = judge(&c, &other, std::slice::from_ref(&other), &[], true, false);
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["r", "r/sub"]);
    }

    #[test]
    fn outcome_unattributed_wins_over_failure() {
        let c = changes_of(&["r/w1.json", "README.md"]);
        let r = judge(&c, &worker(), &[worker()], &[], false, false);
        assert_eq!(r.status, "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["README.md"]);
        assert!(!r.retry_allowed);
    }

    #[test]
    fn declared_out_of_plan_edits_are_allowed_and_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let result = tmp.path().join("r.json");
        fs::write(
            &result,
            r#"{"implementation":{"outOfPlanEdits":[{"file":"docs/x.md","why":"typo"},{"file":""},{"nofile":1}]}}"#,
        )
        .unwrap();
        let declared = out_of_plan_edits(&result);
        assert_eq!(declared, vec!["docs/x.md"]);
        let own = pol("implementer", &["src/**"]);
        let c = changes_of(&["docs/x.md", "src/a.rs"]);
        let r = judge(&c, &own, std::slice::from_ref(&own), &declared, true, true);
        assert_eq!(r.status, "ok");
        assert_eq!(r.attribution, "out-of-plan+own");
        assert_eq!(r.out_of_plan_edits, vec!["docs/x.md"]);
        assert_eq!(r.change_summary()["outOfPlanEdits"], json!(["docs/x.md"]));
        // Declarations count only where an implementer is in the batch.
        let v = pol("verifier", &["src/**"]);
        let r = judge(&c, &v, std::slice::from_ref(&v), &declared, true, true);
        assert_eq!(r.violations, vec!["docs/x.md"]);
        // Unparsable or non-JSON results declare nothing.
        fs::write(&result, "not json").unwrap();
        assert!(out_of_plan_edits(&result).is_empty());
        assert!(out_of_plan_edits(&tmp.path().join("missing.json")).is_empty());
    }
}
