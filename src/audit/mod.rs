//! The mutation audit (docs/audit.md#the-mutation-audit): what did a batch of
//! workers change, and was each change allowed by some job's write policy?
//!
//! A snapshot records, per directory, the `lstat` of every entry (size,
//! mtime and ctime in ns, inode, mode, symlink target). Content is hashed
//! only where a stat cannot be trusted: files touched within the last couple
//! of seconds when the snapshot is taken (file times are coarse, so a rewrite
//! in the same tick keeps them); compare re-reads exactly those. ctime is
//! kept although nobody asked for it because a worker can put mtime back
//! with `touch -d` but cannot set ctime.
//!
//! Symlinks are never followed: a link is an entry with a target, and a
//! write through a symlinked directory inside the tree lands on the real
//! path, which the walk visits in its own right.
//!
//! The audit fails closed: whatever stops the walk from seeing the whole
//! tree is an [`AuditError`], never a pass. Names are bytes end to end
//! ([`name`] escapes them for display), the walk is iterative and opens each
//! directory relative to its parent (`walk`), `.git` internals are
//! walked where git executes or configures anything (`git`), and okstra's
//! own files are left to the executor's own check (`own`).
//!
//! Files: `walk` (the tree walk both sides share), `snapshot` (the recorded
//! tree and its sidecar), `compare` (diffing a listing, the change list),
//! `judge` (attributing changes to policies, the verdicts), `git`, `own`,
//! `name`, `error`.

mod compare;
mod error;
mod git;
mod judge;
pub mod name;
mod own;
mod snapshot;
mod walk;

pub use compare::{ChangeKind, ChangedPath, Changes, Compared};
pub use error::{AuditError, Step};
pub use judge::{attribute, judge, judge_in, out_of_plan_edits, Attributed, AuditResult, Outcome};
pub use own::{file_fingerprint, open_own, Fingerprint, RunningFingerprint};
pub use snapshot::{Entry, Kind, Root, Snapshot, SNAPSHOT_VERSION};

use std::path::{Path, PathBuf};

/// What a snapshot and a compare walk, and what they leave out. The same
/// options must be given to a snapshot and to every compare against it.
pub struct SnapshotOptions<'a> {
    /// The project root, plus every worktree outside it.
    pub roots: &'a [PathBuf],
    pub project_root: &'a Path,
    /// okstra's own files, left out of both walks with the temporary files
    /// written beside them: manifest, team-state and its lock, the exec
    /// lock, events and its lock, the error log, the snapshots directory.
    pub exclude: &'a [PathBuf],
}

/// Walk every root and record the tree.
pub fn snapshot(opts: &SnapshotOptions) -> Result<Snapshot, AuditError> {
    let taken_at_ns = crate::clock::unix_nanos();
    let ctx = walk::Ctx::new(opts)?;
    let walked = walk::walk(&ctx, None, taken_at_ns)?;
    Ok(seal(taken_at_ns, walked.roots, walked.dirs))
}

/// Walk again and report what differs from `before`; the walk itself is
/// returned as a snapshot of the tree now ([`Compared::after`]).
pub fn compare(before: &Snapshot, opts: &SnapshotOptions) -> Result<Compared, AuditError> {
    // A snapshot built in memory skipped the check its sidecar gets.
    before.check().map_err(|why| {
        AuditError::new(
            Step::Snapshot,
            "snapshot",
            std::io::Error::new(std::io::ErrorKind::InvalidData, why),
        )
    })?;
    let taken_at_ns = crate::clock::unix_nanos();
    let ctx = walk::Ctx::new(opts)?;
    let walked = walk::walk(&ctx, Some(before), taken_at_ns)?;
    Ok(Compared {
        changes: Changes::seal(walked.changes, &before.digest),
        after: seal(taken_at_ns, walked.roots, walked.dirs),
    })
}

fn seal(taken_at_ns: i64, roots: Vec<Root>, dirs: Vec<Vec<Entry>>) -> Snapshot {
    let digest = snapshot::tree_digest(&roots, &dirs);
    Snapshot {
        version: SNAPSHOT_VERSION,
        taken_at_ns,
        roots,
        dirs,
        digest,
    }
}

#[cfg(test)]
mod tests;
