//! Whether an attempt wrote its completion paths
//! (docs/exec.md#settling-an-attempt): a path counts only if **this attempt**
//! wrote it. Before the attempt is launched, exec records what each completion
//! path was ([`before`]): absent, or its device, inode, size, mtime and sha256;
//! the record goes into the write-ahead `worker-dispatched` event, so a resumed
//! exec judges with the same facts. After the attempt, a path still in that
//! state was left by someone else (an earlier run, an earlier attempt) and is
//! missing ([`judge`]).
//!
//! Rewriting a file with identical bytes counts (its mtime or inode moves);
//! restoring the old mtime over unchanged bytes (`touch -r`) does not, since
//! nothing the attempt did can be told from what was there before.

use crate::paths;
use serde::{Deserialize, Serialize};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// What one completion path was before an attempt: `file` absent means the
/// path was not a file then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PathBefore {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileState>,
}

/// A regular file as the judgement compares it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileState {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// Modification time: seconds since the epoch, and nanoseconds.
    pub mtime: i64,
    pub mtime_nsec: i64,
    /// Lowercase hex sha256 of the contents.
    pub sha256: String,
}

/// A completion path that does not count for the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing {
    pub path: String,
    pub why: Why,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Not a file after the attempt.
    Absent,
    /// A file, exactly as it was before attempt `attempt` started. `earlier_run`:
    /// that attempt was the job's first of this plan, so nothing of this run
    /// could have left it.
    Unchanged { attempt: u64, earlier_run: bool },
}

impl Missing {
    pub fn absent(path: impl Into<String>) -> Missing {
        Missing {
            path: path.into(),
            why: Why::Absent,
        }
    }
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.why {
            Why::Absent => f.write_str(&self.path),
            Why::Unchanged {
                attempt,
                earlier_run,
            } => {
                let by = if earlier_run {
                    "an earlier run"
                } else {
                    "an earlier attempt or run"
                };
                write!(
                    f,
                    "{}: unchanged since before attempt {attempt} (left by {by})",
                    self.path
                )
            }
        }
    }
}

/// The state of each completion path before an attempt. A path that cannot
/// be looked at (other than being absent) fails the launch: an attempt
/// whose result could not be judged must not start (fail closed).
pub fn before(root: &Path, completion: &[String]) -> io::Result<Vec<PathBefore>> {
    completion
        .iter()
        .map(|p| {
            let file = state_of(&paths::abs_of(root, p), None).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot record what completion path {p} is before the attempt: {e}"),
                )
            })?;
            Ok(PathBefore {
                path: p.clone(),
                file,
            })
        })
        .collect()
}

/// The completion paths of an ended attempt that do not count: those that
/// are not files, and those unchanged since `recorded` (the attempt's
/// dispatch record; empty where an older okstra recorded none: then only
/// presence counts). `first` is the job's first attempt in this plan.
pub fn judge(
    root: &Path,
    completion: &[String],
    recorded: &[PathBefore],
    attempt: u64,
    first: u64,
) -> Vec<Missing> {
    completion
        .iter()
        .filter_map(|p| {
            let abs = paths::abs_of(root, p);
            if !abs.is_file() {
                return Some(Missing::absent(p.clone()));
            }
            let was = recorded.iter().find(|b| &b.path == p)?.file.as_ref()?;
            // A file that cannot be read now cannot be shown to be this
            // attempt's: it does not count.
            let now = state_of(&abs, Some(was)).ok().flatten();
            (now.as_ref() == Some(was) || now.is_none()).then(|| Missing {
                path: p.clone(),
                why: Why::Unchanged {
                    attempt,
                    earlier_run: attempt == first,
                },
            })
        })
        .collect()
}

/// What `path` is now: `None` where it is no regular file. Given the state
/// it is compared with, the contents are hashed only when everything else
/// matches (any other difference already tells them apart).
fn state_of(path: &Path, compared_with: Option<&FileState>) -> io::Result<Option<FileState>> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !meta.is_file() {
        return Ok(None);
    }
    let mut state = FileState {
        dev: meta.dev(),
        ino: meta.ino(),
        size: meta.size(),
        mtime: meta.mtime(),
        mtime_nsec: meta.mtime_nsec(),
        sha256: String::new(),
    };
    let same_but_contents = compared_with.is_none_or(|was| {
        FileState {
            sha256: String::new(),
            ..was.clone()
        } == state
    });
    if same_but_contents {
        state.sha256 = crate::canonical::sha256_hex_of(std::fs::File::open(path)?)?;
    }
    Ok(Some(state))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn tree() -> (tempfile::TempDir, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        (dir, vec!["out/r.md".to_string()])
    }

    fn judged(dir: &Path, paths: &[String], before: &[PathBefore]) -> Vec<Missing> {
        judge(dir, paths, before, 1, 1)
    }

    #[test]
    fn an_absent_path_is_recorded_absent_and_counts_once_written() {
        let (dir, paths) = tree();
        let before = before(dir.path(), &paths).unwrap();
        assert_eq!(before[0].file, None);
        assert_eq!(
            judged(dir.path(), &paths, &before),
            [Missing::absent("out/r.md")]
        );
        std::fs::write(dir.path().join("out/r.md"), "done").unwrap();
        assert_eq!(judged(dir.path(), &paths, &before), []);
    }

    #[test]
    fn a_leftover_file_untouched_is_missing_and_says_why() {
        let (dir, paths) = tree();
        std::fs::write(dir.path().join("out/r.md"), "old").unwrap();
        let before = before(dir.path(), &paths).unwrap();
        let file = before[0].file.as_ref().unwrap();
        assert_eq!(file.size, 3);
        assert_eq!(file.sha256, crate::canonical::sha256_hex(b"old"));
        let missing = judged(dir.path(), &paths, &before);
        assert_eq!(
            missing[0].to_string(),
            "out/r.md: unchanged since before attempt 1 (left by an earlier run)"
        );
        let later = judge(dir.path(), &paths, &before, 2, 1);
        assert_eq!(
            later[0].to_string(),
            "out/r.md: unchanged since before attempt 2 (left by an earlier attempt or run)"
        );
    }

    #[test]
    fn unchanged_bytes_under_the_old_mtime_do_not_count() {
        let (dir, paths) = tree();
        let r = dir.path().join("out/r.md");
        std::fs::write(&r, "same").unwrap();
        let old = std::fs::metadata(&r).unwrap().modified().unwrap();
        let before = before(dir.path(), &paths).unwrap();
        // Rewritten in place with the same bytes, then `touch -r`-ed back.
        std::fs::write(&r, "same").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&r)
            .unwrap()
            .set_modified(old)
            .unwrap();
        assert_eq!(judged(dir.path(), &paths, &before).len(), 1);
    }

    #[test]
    fn an_identical_rewrite_or_a_rename_over_it_counts() {
        let (dir, paths) = tree();
        let r = dir.path().join("out/r.md");
        std::fs::write(&r, "same").unwrap();
        let past = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&r)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let before = before(dir.path(), &paths).unwrap();
        std::fs::write(&r, "same").unwrap();
        assert_eq!(judged(dir.path(), &paths, &before), [], "its mtime moved");

        let before = super::before(dir.path(), &paths).unwrap();
        let tmp = dir.path().join("out/r.md.tmp");
        std::fs::write(&tmp, "same").unwrap();
        let mtime = std::fs::metadata(&r).unwrap().modified().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        std::fs::rename(&tmp, &r).unwrap();
        assert_eq!(judged(dir.path(), &paths, &before), [], "a new inode");
    }

    #[test]
    fn a_changed_file_of_the_same_size_and_mtime_counts() {
        let (dir, paths) = tree();
        let r = dir.path().join("out/r.md");
        std::fs::write(&r, "aaaa").unwrap();
        let mtime = std::fs::metadata(&r).unwrap().modified().unwrap();
        let before = before(dir.path(), &paths).unwrap();
        std::fs::write(&r, "bbbb").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&r)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(
            judged(dir.path(), &paths, &before),
            [],
            "its contents moved"
        );
    }

    #[test]
    fn without_a_record_only_presence_counts() {
        let (dir, paths) = tree();
        std::fs::write(dir.path().join("out/r.md"), "old").unwrap();
        assert_eq!(judged(dir.path(), &paths, &[]), []);
    }

    #[test]
    fn the_record_reads_back_as_written() {
        let (dir, paths) = tree();
        std::fs::write(dir.path().join("out/r.md"), "x").unwrap();
        let mut before = before(dir.path(), &[paths[0].clone(), "out/none".into()]).unwrap();
        let text = serde_json::to_string(&before).unwrap();
        assert!(text.contains(r#"{"path":"out/none"}"#), "{text}");
        assert!(text.contains(r#""mtimeNsec":"#), "{text}");
        let back: Vec<PathBefore> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, before);
        before.pop();
        assert_eq!(before.len(), 1);
    }

    #[test]
    fn a_path_that_cannot_be_looked_at_fails_the_record() {
        let (dir, _) = tree();
        std::fs::write(dir.path().join("out/file"), "x").unwrap();
        // A path through a file: ENOTDIR, not absent.
        let err = before(dir.path(), &["out/file/r.md".into()]).unwrap_err();
        assert!(err.to_string().contains("out/file/r.md"), "{err}");
    }
}
