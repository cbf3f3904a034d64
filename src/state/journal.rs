//! An append-only JSON-lines file that okstra alone writes while it holds the
//! run: the events log (docs/exec.md#crash-safety-and-resume: the executor's
//! write-ahead record) and the error log.
//!
//! - Opening cuts a torn last line (a writer killed mid-append left bytes
//!   after the last newline), so the next append starts on a fresh line and
//!   the fragment is gone rather than fenced off in the middle of the file.
//! - Lines are collected with [`Journal::push`] and written by
//!   [`Journal::commit`] in one `write(2)`; with [`Sync::Data`] the file's
//!   data is on disk before `commit` returns (`fdatasync`), so a group of
//!   records costs one sync, not one each.
//! - A write that fails part-way (a full disk) is undone by truncating the
//!   file back to its length before the write: the file never keeps a torn
//!   line, and the caller knows none of the group was recorded.
//! - After every commit the journal notes the file's identity (inode, length,
//!   modification and change times). [`Journal::tampered`] compares the file
//!   at its path with that note: any other writer's change shows.

use std::fs::{File, OpenOptions};
use std::io::{self, Write as _};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Whether [`Journal::commit`] waits for the data to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// `fdatasync` after the write: for records that must survive a power
    /// cut before what they announce happens (a dispatch before its launch).
    Data,
    /// The write alone: it survives the process being killed, since the
    /// kernel holds it, but not necessarily a power cut.
    None,
}

/// `fdatasync` of a journal's file, on whatever thread makes it durable
/// (the journal's own commit, or a [`super::syncer::Syncer`]): the one
/// place a test stops or fails it (fault point `journal-sync`).
pub fn sync_data(file: &File) -> io::Result<()> {
    crate::fault::point("journal-sync");
    crate::fault::fails("journal-sync")?;
    file.sync_data()
}

/// What identifies one version of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Stamp {
    pub fn of(meta: &std::fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }

    /// The stamp of the file at `path`, not following a final symlink;
    /// `None` when there is no file there.
    pub fn at(path: &Path) -> io::Result<Option<Stamp>> {
        match std::fs::symlink_metadata(path) {
            Ok(meta) => Ok(Some(Stamp::of(&meta))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// How a journal opens its file: below the project root with no symlink
/// followed at any component (exec's own files,
/// docs/exec.md#never-through-a-symlink), or by its path with no symlink
/// followed at the last one.
#[derive(Debug, Clone)]
pub enum Opener {
    Path,
    Beneath(std::sync::Arc<crate::beneath::Beneath>),
}

#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    opener: Opener,
    file: File,
    /// The file's length as this journal last left it.
    len: u64,
    pending: Vec<u8>,
    /// The file as this journal last left it.
    stamp: Stamp,
    /// Lines cut off as torn when the journal was opened.
    cut: u64,
}

impl Journal {
    /// Open (creating it and its directory if need be) the journal at `path`
    /// and cut a torn last line.
    pub fn open(path: &Path) -> io::Result<Journal> {
        Journal::open_with(path, Opener::Path)
    }

    /// [`Self::open`] with the file opened as `opener` says; `path` is
    /// absolute (below the opener's root) or as given.
    pub fn open_with(path: &Path, opener: Opener) -> io::Result<Journal> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let existed = Stamp::at(path)?.is_some();
        let file = match &opener {
            Opener::Path => {
                std::fs::create_dir_all(&dir)?;
                OpenOptions::new()
                    .read(true)
                    .append(true)
                    .create(true)
                    .mode(0o644)
                    .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                    .open(path)?
            }
            Opener::Beneath(root) => {
                let rel = root.relative(path)?;
                root.open_file(rel, crate::beneath::WriteMode::ReadAppend)?
            }
        };
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        if !existed {
            // The new name must survive a power cut too.
            File::open(&dir)?.sync_all()?;
        }
        let mut journal = Journal {
            path: path.to_path_buf(),
            opener,
            len: file.metadata()?.len(),
            stamp: Stamp::of(&file.metadata()?),
            file,
            pending: Vec::new(),
            cut: 0,
        };
        journal.cut_torn_tail()?;
        Ok(journal)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many bytes of a torn last line opening cut off.
    pub fn cut_bytes(&self) -> u64 {
        self.cut
    }

    /// Truncate the file after its last newline.
    fn cut_torn_tail(&mut self) -> io::Result<()> {
        let keep = last_line_end(&self.file, self.len)?;
        if keep < self.len {
            crate::fault::point("journal-cut");
            self.file.set_len(keep)?;
            self.file.sync_data()?;
            self.cut = self.len - keep;
            self.len = keep;
        }
        self.stamp = Stamp::of(&self.file.metadata()?);
        Ok(())
    }

    /// Queue one line (without its newline) for the next commit.
    pub fn push(&mut self, line: &str) {
        debug_assert!(!line.contains('\n'), "one record per line");
        self.pending.extend_from_slice(line.as_bytes());
        self.pending.push(b'\n');
    }

    /// Whether lines wait for a commit.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Write every queued line in one go. On failure nothing of them is left
    /// in the file (it is cut back to its length before the write), they are
    /// dropped from the queue, and the error says why.
    pub fn commit(&mut self, sync: Sync) -> io::Result<()> {
        self.append(sync, false).map(drop)
    }

    /// Write every queued line in one go without waiting for the disk, and
    /// hand back a second descriptor of the file they went to, for a
    /// [`super::syncer::Syncer`] to make them durable (`None`: nothing was
    /// queued). Fails as [`Self::commit`] does.
    pub fn commit_for_sync(&mut self) -> io::Result<Option<File>> {
        self.append(Sync::None, true)
    }

    fn append(&mut self, sync: Sync, handle: bool) -> io::Result<Option<File>> {
        if self.pending.is_empty() {
            return Ok(None);
        }
        let bytes = std::mem::take(&mut self.pending);
        let before = self.len;
        crate::fault::point("journal-write");
        let written: io::Result<Option<File>> = (|| {
            self.follow_path()?;
            // Taken before the write: no record goes out without it.
            let handle = handle.then(|| self.file.try_clone()).transpose()?;
            (&self.file).write_all(&bytes)?;
            if sync == Sync::Data {
                sync_data(&self.file)?;
            }
            Ok(handle)
        })();
        match written {
            Ok(handle) => {
                self.len = before + bytes.len() as u64;
                self.stamp = Stamp::of(&self.file.metadata()?);
                crate::fault::point("journal-committed");
                Ok(handle)
            }
            Err(e) => {
                // Undo a partial write. Shrinking a file needs no space.
                if self.file.metadata().map(|m| m.len()).unwrap_or(before) != before {
                    let _ = self.file.set_len(before);
                    let _ = self.file.sync_data();
                }
                if let Ok(meta) = self.file.metadata() {
                    self.stamp = Stamp::of(&meta);
                }
                Err(io::Error::new(
                    e.kind(),
                    format!("cannot append to {}: {e}", self.path.display()),
                ))
            }
        }
    }

    /// Make sure the descriptor is the file at the path: one removed or
    /// replaced meanwhile would swallow records nobody reads, so the path
    /// is opened again (what happened to the file is for [`Self::tampered`]
    /// to tell).
    fn follow_path(&mut self) -> io::Result<()> {
        let ours = Stamp::of(&self.file.metadata()?);
        let there = Stamp::at(&self.path)?;
        if there.is_some_and(|s| (s.dev, s.ino) == (ours.dev, ours.ino)) {
            return Ok(());
        }
        let reopened = Journal::open_with(&self.path, self.opener.clone())?;
        self.file = reopened.file;
        self.len = reopened.len;
        Ok(())
    }

    /// Take the file as it is now as the journal's own: after a change by
    /// someone else was noticed and reported, so that later appends are
    /// judged against what this journal writes from here on.
    pub fn adopt_current(&mut self) -> io::Result<()> {
        self.follow_path()?;
        let meta = self.file.metadata()?;
        self.len = meta.len();
        self.stamp = Stamp::of(&meta);
        Ok(())
    }

    /// Why the file at the journal's path is not the file as the journal
    /// last left it, if it is not: someone else wrote, truncated, replaced
    /// or removed it.
    pub fn tampered(&self) -> io::Result<Option<String>> {
        let now = Stamp::at(&self.path)?;
        let why = match now {
            None => Some("was removed".to_string()),
            Some(s) if (s.dev, s.ino) != (self.stamp.dev, self.stamp.ino) => {
                Some("was replaced by another file".to_string())
            }
            Some(s) if s.len != self.stamp.len => Some(format!(
                "changed length from {} to {} bytes",
                self.stamp.len, s.len
            )),
            Some(s) if s != self.stamp => Some("was modified".to_string()),
            Some(_) => None,
        };
        Ok(why.map(|w| format!("{} {w} outside okstra", self.path.display())))
    }

    /// The file as the journal last left it.
    pub fn stamp(&self) -> Stamp {
        self.stamp
    }
}

/// The offset just after the last newline in the first `len` bytes of
/// `file` (0 when there is none).
fn last_line_end(file: &File, len: u64) -> io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = len;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > 0 {
        let start = end.saturating_sub(CHUNK);
        let part = &mut buf[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(at) = part.iter().rposition(|&b| b == b'\n') {
            return Ok(start + at as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

/// Every line of the file at `path` that parses as a JSON object, in order,
/// as the given type. A missing file holds none. Lines that are not whole
/// JSON objects are passed over: a torn fragment left by a killed writer,
/// or a line of another tool.
pub fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> io::Result<Vec<T>> {
    let mut lines = Lines::open(path)?;
    let out = lines.by_ref().collect();
    lines.finish().map(|()| out)
}

/// [`read_lines`] one line at a time, for a reader that keeps less than
/// every line (exec replaying a long events log). Iterate it by reference,
/// then [`Lines::finish`]: a read that failed ends the lines early, and is
/// the error `finish` returns.
pub struct Lines<T> {
    split: Option<io::Split<io::BufReader<File>>>,
    error: Option<io::Error>,
    of: std::marker::PhantomData<T>,
}

impl<T> Lines<T> {
    pub fn open(path: &Path) -> io::Result<Lines<T>> {
        use std::io::BufRead as _;
        let split = match File::open(path) {
            Ok(f) => Some(io::BufReader::new(f).split(b'\n')),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(Lines {
            split,
            error: None,
            of: std::marker::PhantomData,
        })
    }

    /// Whether every line was read (a line that does not parse was read).
    pub fn finish(self) -> io::Result<()> {
        self.error.map_or(Ok(()), Err)
    }
}

impl<T: serde::de::DeserializeOwned> Iterator for Lines<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        loop {
            let line = match self.split.as_mut()?.next()? {
                Ok(line) => line,
                Err(e) => {
                    self.error = Some(e);
                    self.split = None;
                    return None;
                }
            };
            if line.first() != Some(&b'{') {
                continue;
            }
            if let Ok(v) = serde_json::from_slice::<T>(&line) {
                return Some(v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_group_is_one_write_and_survives_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/events.jsonl");
        let mut j = Journal::open(&path).unwrap();
        j.push("{\"a\":1}");
        j.push("{\"b\":2}");
        assert!(j.has_pending());
        j.commit(Sync::Data).unwrap();
        assert!(!j.has_pending());
        j.commit(Sync::Data).unwrap(); // nothing queued: nothing written
        drop(j);
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.cut_bytes(), 0);
        j.push("{\"c\":3}");
        j.commit(Sync::None).unwrap();
        assert_eq!(lines(&path), ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }

    #[test]
    fn opening_cuts_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "{\"a\":1}\n{\"type\":\"wor").unwrap();
        let mut j = Journal::open(&path).unwrap();
        assert_eq!(j.cut_bytes(), 12);
        j.push("{\"b\":2}");
        j.commit(Sync::Data).unwrap();
        assert_eq!(lines(&path), ["{\"a\":1}", "{\"b\":2}"]);

        // A file that is one torn line, longer than the scan's chunk.
        let long = dir.path().join("long.jsonl");
        std::fs::write(&long, "x".repeat(200_000)).unwrap();
        let j = Journal::open(&long).unwrap();
        assert_eq!(j.cut_bytes(), 200_000);
        assert_eq!(std::fs::read(&long).unwrap().len(), 0);
    }

    #[test]
    fn another_writer_is_noticed_and_records_still_land_in_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut j = Journal::open(&path).unwrap();
        j.push("{\"a\":1}");
        j.commit(Sync::None).unwrap();
        assert_eq!(j.tampered().unwrap(), None);
        // Someone appends a line of their own.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"forged\":true}\n")
            .unwrap();
        let why = j.tampered().unwrap().unwrap();
        assert!(
            why.contains("changed length") && why.contains("outside okstra"),
            "{why}"
        );
        j.adopt_current().unwrap();
        assert_eq!(j.tampered().unwrap(), None);
        j.push("{\"b\":2}");
        j.commit(Sync::None).unwrap();
        // Replaced by rename: noticed, and the next record goes to the file
        // at the path, not to the unlinked one.
        let other = dir.path().join("other");
        std::fs::write(&other, "{\"new\":1}\n").unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(j.tampered().unwrap().unwrap().contains("replaced"));
        j.push("{\"c\":3}");
        j.commit(Sync::None).unwrap();
        assert_eq!(lines(&path), ["{\"new\":1}", "{\"c\":3}"]);
        std::fs::remove_file(&path).unwrap();
        assert!(j.tampered().unwrap().unwrap().contains("removed"));
        j.push("{\"d\":4}");
        j.commit(Sync::None).unwrap();
        assert_eq!(lines(&path), ["{\"d\":4}"]);
    }

    #[test]
    fn a_symlink_in_its_place_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "keep\n").unwrap();
        let path = dir.path().join("events.jsonl");
        std::os::unix::fs::symlink(&outside, &path).unwrap();
        assert!(Journal::open(&path).is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep\n");
    }

    #[test]
    fn read_lines_passes_over_fragments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        assert!(read_lines::<serde_json::Value>(&path).unwrap().is_empty());
        std::fs::write(&path, "{\"a\":1}\n\nnot json\n{\"b\"\n{\"c\":3}\n").unwrap();
        let got: Vec<serde_json::Value> = read_lines(&path).unwrap();
        assert_eq!(
            got,
            [serde_json::json!({"a":1}), serde_json::json!({"c":3})]
        );
    }

    #[test]
    fn lines_one_at_a_time_are_read_lines_and_a_failed_read_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        std::fs::write(&path, "{\"a\":1}\nnot json\n{\"c\":3}\n{\"d\"").unwrap();
        let mut lines = Lines::<serde_json::Value>::open(&path).unwrap();
        let first = lines.next();
        assert_eq!(first, Some(serde_json::json!({"a":1})));
        let rest: Vec<_> = lines.by_ref().collect();
        assert_eq!(rest, [serde_json::json!({"c":3})]);
        lines.finish().unwrap();
        // A directory opens, and fails at the first read: no line, and the
        // error is what `finish` returns (so exec cannot take it for an
        // empty log).
        let mut lines = Lines::<serde_json::Value>::open(dir.path()).unwrap();
        assert_eq!(lines.next(), None);
        assert!(lines.finish().is_err());
        assert!(read_lines::<serde_json::Value>(dir.path()).is_err());
    }
}
