//! What differs between a snapshot and the tree now.
//!
//! Compare walks the tree again (the same walk as a snapshot) and diffs each
//! directory's listing against the old one as it goes: the old listing is
//! found by index, carried down from the parent, so no path is built for a
//! directory where nothing changed. The new walk is itself a complete
//! snapshot ([`Compared::after`]), which the executor may keep as the next
//! stage's baseline when nothing runs in between.

use super::error::{AuditError, Step};
use super::name;
use super::snapshot::{Entry, Kind, Snapshot};
use crate::canonical;
use crate::policy;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    /// Project-relative with `/` separators, or absolute outside the root;
    /// names escaped (see `audit::name`).
    pub path: String,
    pub kind: ChangeKind,
    /// Where the path points now, when it is a symlink: the link's text
    /// (escaped)...
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

/// The outcome of a compare: the changes, and the tree as the compare found
/// it, a snapshot in its own right.
#[derive(Debug, Clone)]
pub struct Compared {
    pub changes: Changes,
    pub after: Snapshot,
}

impl Changes {
    /// Sort, drop duplicates, and seal with the after digest.
    pub(crate) fn seal(mut changed: Vec<ChangedPath>, before_digest: &str) -> Changes {
        changed.sort_by(|a, b| a.path.cmp(&b.path));
        changed.dedup_by(|a, b| a.path == b.path);
        let after_digest = if changed.is_empty() {
            before_digest.to_string()
        } else {
            canonical::digest(&json!({"before": before_digest, "changes": changed}))
        };
        Changes {
            changed,
            before_digest: before_digest.to_string(),
            after_digest,
        }
    }
}

pub(crate) fn change(path: String, kind: ChangeKind) -> ChangedPath {
    ChangedPath {
        path,
        kind,
        target: None,
        resolved: None,
        is_dir: false,
    }
}

/// `dir/name` in display form; `dir` is already escaped.
pub(crate) fn join(dir: &str, name: &[u8]) -> String {
    let mut out = String::with_capacity(dir.len() + name.len() + 1);
    out.push_str(dir);
    if !dir.is_empty() && !dir.ends_with('/') {
        out.push('/');
    }
    name::escape_into(&mut out, name);
    out
}

/// At most this many bytes of changed paths are reported by one compare.
/// Past it the compare fails closed rather than holding an unbounded list:
/// a worker can make a tree whose paths, spelled out one by one, exhaust
/// memory (thousands of levels of 255-byte names).
pub(crate) const MAX_REPORT_BYTES: usize = 64 << 20;

/// Where the changes of one directory are written, within the compare's
/// budget, and how a link's target is resolved for display.
pub(crate) struct Reporter<'a> {
    /// The escaped display path of the directory.
    pub dir: &'a str,
    /// The escaped absolute path of the project root.
    pub project: &'a str,
    pub out: Vec<ChangedPath>,
    /// Bytes of changed paths reported so far by the whole compare.
    pub spent: &'a AtomicUsize,
}

impl Reporter<'_> {
    fn push(&mut self, c: ChangedPath) -> Result<(), AuditError> {
        let n = c.path.len();
        if self.spent.fetch_add(n, Ordering::Relaxed) + n > MAX_REPORT_BYTES {
            let shown = if self.dir.is_empty() { "." } else { self.dir };
            return Err(AuditError::new(
                Step::Report,
                shown,
                io::Error::other(format!(
                    "the changed paths exceed {} MiB",
                    MAX_REPORT_BYTES >> 20
                )),
            ));
        }
        self.out.push(c);
        Ok(())
    }

    /// A change to the entry `e` as it is now.
    fn now(&mut self, e: &Entry, kind: ChangeKind, was_dir: bool) -> Result<(), AuditError> {
        let path = join(self.dir, &e.name);
        let target = e.target.as_deref().map(|t| name::escape(t).into_owned());
        let resolved = target.as_deref().map(|t| self.resolve(t));
        self.push(ChangedPath {
            path,
            kind,
            target,
            resolved,
            is_dir: was_dir || e.kind == Kind::Dir,
        })
    }

    /// A link target resolved lexically against the link's directory, in
    /// the form of a display path. Climbing above `/` stays at `/`, as the
    /// kernel does.
    fn resolve(&self, target: &str) -> String {
        let joined = if target.starts_with('/') {
            target.to_string()
        } else if self.dir.starts_with('/') {
            format!("{}/{target}", self.dir)
        } else if self.dir.is_empty() {
            format!("{}/{target}", self.project)
        } else {
            format!("{}/{}/{target}", self.project, self.dir)
        };
        let clean = policy::normalise(&joined).unwrap_or_else(|| "/".to_string());
        match clean.strip_prefix(self.project) {
            Some("") => String::new(),
            Some(rest) if rest.starts_with('/') => rest[1..].to_string(),
            _ => clean,
        }
    }

    /// Report `e` (an entry of the snapshot) deleted and, for a directory,
    /// everything the snapshot held below it.
    fn deleted(&mut self, before: &Snapshot, e: &Entry) -> Result<(), AuditError> {
        let path = join(self.dir, &e.name);
        let mut c = change(path.clone(), ChangeKind::Deleted);
        c.is_dir = e.kind == Kind::Dir;
        self.push(c)?;
        match e.dir {
            Some(d) => self.deleted_below(before, d, path),
            None => Ok(()),
        }
    }

    /// Report everything the snapshot's listing `d` (at display path
    /// `path`) held deleted. Iterative: a deleted tree may be deep.
    pub(crate) fn deleted_below(
        &mut self,
        before: &Snapshot,
        d: u32,
        path: String,
    ) -> Result<(), AuditError> {
        let mut stack = vec![(d, path)];
        while let Some((d, dir)) = stack.pop() {
            for e in &before.dirs[d as usize] {
                let path = join(&dir, &e.name);
                let mut c = change(path.clone(), ChangeKind::Deleted);
                c.is_dir = e.kind == Kind::Dir;
                self.push(c)?;
                if let Some(sub) = e.dir {
                    stack.push((sub, path));
                }
            }
        }
        Ok(())
    }
}

/// Diff one directory's listing now (`after`, sorted) against its listing
/// in the snapshot (`old`, sorted). `hash` gives the content hash of an
/// entry of `after` when content must decide. Returns, per entry of
/// `after`, the listing in `before` of the same directory (for the walk to
/// carry down).
pub(crate) fn diff_listing(
    before: &Snapshot,
    old: &[Entry],
    after: &mut [Entry],
    rep: &mut Reporter,
    mut hash: impl FnMut(&Entry) -> Result<[u8; 32], AuditError>,
) -> Result<Vec<Option<u32>>, AuditError> {
    use std::cmp::Ordering;
    let mut old_dirs = vec![None; after.len()];
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < after.len() {
        let ord = match (old.get(i), after.get(j)) {
            (Some(b), Some(a)) => b.name.cmp(&a.name),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match ord {
            Ordering::Less => {
                rep.deleted(before, &old[i])?;
                i += 1;
            }
            Ordering::Greater => {
                rep.now(&after[j], ChangeKind::Added, false)?;
                j += 1;
            }
            Ordering::Equal => {
                let b = &old[i];
                if b.kind == Kind::File
                    && after[j].kind == Kind::File
                    && b.hash.is_some()
                    && b.size == after[j].size
                {
                    // Racily clean at snapshot time (its stat proves
                    // nothing), so content decides.
                    after[j].hash = Some(hash(&after[j])?);
                }
                let a = &after[j];
                if let Some(kind) = entry_change(b, a) {
                    rep.now(a, kind, b.kind == Kind::Dir)?;
                    if a.kind != Kind::Dir {
                        if let Some(d) = b.dir {
                            let path = join(rep.dir, &b.name);
                            rep.deleted_below(before, d, path)?;
                        }
                    }
                }
                if a.kind == Kind::Dir {
                    old_dirs[j] = b.dir;
                }
                i += 1;
                j += 1;
            }
        }
    }
    Ok(old_dirs)
}

/// How an entry present before and after changed, if it did. Where the
/// snapshot had a hash, the caller has put the current one on `a`.
fn entry_change(b: &Entry, a: &Entry) -> Option<ChangeKind> {
    if b.kind != a.kind {
        return Some(ChangeKind::Type);
    }
    let perms_changed = b.mode & 0o7777 != a.mode & 0o7777;
    match a.kind {
        Kind::Symlink => (b.target != a.target).then_some(ChangeKind::Modified),
        Kind::Dir | Kind::Other => perms_changed.then_some(ChangeKind::Mode),
        Kind::File => {
            if b.size != a.size {
                return Some(ChangeKind::Modified);
            }
            if let Some(h) = &b.hash {
                return if a.hash.as_ref() != Some(h) {
                    Some(ChangeKind::Modified)
                } else {
                    perms_changed.then_some(ChangeKind::Mode)
                };
            }
            let stat_same = b.mtime_ns == a.mtime_ns && b.ctime_ns == a.ctime_ns && b.ino == a.ino;
            if stat_same {
                return perms_changed.then_some(ChangeKind::Mode);
            }
            // chmod moves only ctime; anything else with no hash to check
            // against cannot be shown unchanged.
            if perms_changed && b.mtime_ns == a.mtime_ns && b.ino == a.ino {
                return Some(ChangeKind::Mode);
            }
            Some(ChangeKind::Modified)
        }
    }
}
