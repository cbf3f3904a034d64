//! Where `okstra watch` reads a run: the events log tailed from where it
//! last stopped, team-state re-read only when it changed, a running
//! attempt's status sidecar when it changed, and the end of a worker's log
//! for the rows on screen. Nothing is written and no lock is taken: exec
//! never waits on a watcher (docs/cli.md#okstra-watch).

use super::model::{Model, WorkerRow};
use crate::exec::event::Event;
use crate::plan::sidecar;
use crate::state::{StateError, TeamStateStore, WorkerStatus};

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The files of one run.
#[derive(Debug, Clone)]
pub struct RunFiles {
    /// The project root the manifest's paths are relative to.
    pub root: PathBuf,
    pub team_state: PathBuf,
    pub events: PathBuf,
}

impl RunFiles {
    /// `<team-state>.exec.lock`: held by the exec running the run.
    pub fn exec_lock(&self) -> PathBuf {
        TeamStateStore::open(&self.team_state).exec_lock_path()
    }

    /// A project-relative path of the run, absolute.
    pub fn abs(&self, rel: &str) -> PathBuf {
        crate::paths::abs_of(&self.root, rel)
    }

    /// The log of a job whose prompt is `prompt`.
    pub fn log_of(&self, prompt: &str) -> PathBuf {
        sidecar::beside_path(&self.abs(prompt), sidecar::LOG)
    }

    /// The status sidecar of a job whose prompt is `prompt`.
    pub fn status_of(&self, prompt: &str) -> PathBuf {
        sidecar::beside_path(&self.abs(prompt), sidecar::STATUS)
    }
}

/// The events log read so far: complete lines up to `offset`, and the
/// start of a line still being written.
#[derive(Debug, Default)]
struct Tail {
    offset: u64,
    partial: Vec<u8>,
    /// The file's inode: another file in its place is read from its start.
    ino: Option<u64>,
}

/// How much of the events log is read at a time.
const CHUNK: usize = 1 << 20;

/// Identifies a version of a file replaced by rename (team-state).
type Stamp = (u64, u64, Option<std::time::SystemTime>);

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()))
}

/// A run as read so far, and the model made of it.
#[derive(Debug)]
pub struct Source {
    pub files: RunFiles,
    pub model: Model,
    tail: Tail,
    team: Option<Stamp>,
    /// The status sidecars of running attempts, by job key: path, and the
    /// attempt read from it last.
    sidecars: HashMap<String, PathBuf>,
}

impl Source {
    pub fn new(files: RunFiles) -> Source {
        Source {
            files,
            model: Model::default(),
            tail: Tail::default(),
            team: None,
            sidecars: HashMap::new(),
        }
    }

    /// Read whatever changed in the events log and team-state, and the
    /// sidecars of attempts that started running since.
    pub fn refresh(&mut self) -> Result<(), StateError> {
        self.read_events().map_err(|e| StateError::Io {
            path: self.files.events.clone(),
            source: e,
        })?;
        self.read_team_state()
    }

    /// The lines appended to the events log since the last read. A file
    /// that shrank or was replaced (a torn line cut by the next exec) is
    /// read again from its start, into a fresh model.
    fn read_events(&mut self) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let mut file = match std::fs::File::open(&self.files.events) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let meta = file.metadata()?;
        if meta.len() < self.tail.offset || self.tail.ino.is_some_and(|i| i != meta.ino()) {
            self.tail = Tail::default();
            self.model = Model::default();
            self.team = None;
        }
        self.tail.ino = Some(meta.ino());
        if meta.len() == self.tail.offset {
            return Ok(());
        }
        file.seek(SeekFrom::Start(self.tail.offset))?;
        // In chunks: a 10,000-job log is tens of megabytes, never held whole.
        let mut rest = file.take(meta.len() - self.tail.offset);
        let mut bytes = std::mem::take(&mut self.tail.partial);
        loop {
            let start = bytes.len();
            bytes.resize(start + CHUNK, 0);
            let n = rest.read(&mut bytes[start..])?;
            bytes.truncate(start + n);
            if n == 0 {
                break;
            }
            self.tail.offset += n as u64;
            let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            for line in bytes[..complete].split(|&b| b == b'\n') {
                // A line of another writer, or a torn one: not ours to show.
                if let Ok(event) = serde_json::from_slice::<Event>(line) {
                    self.model.apply(&event);
                    self.note_sidecar(&event);
                }
            }
            bytes.drain(..complete);
        }
        self.tail.partial = bytes;
        Ok(())
    }

    fn note_sidecar(&mut self, event: &Event) {
        match event {
            Event::WorkerDispatched(d) => {
                let path = self.files.status_of(&d.prompt_path);
                self.sidecars.insert(d.head.worker_key.clone(), path);
            }
            Event::WorkerFailed(s) | Event::WorkerResultCollected(s) => {
                self.sidecars.remove(&s.head.worker_key);
            }
            _ => {}
        }
    }

    /// Team-state's `workers[]`, where it changed since the last read.
    fn read_team_state(&mut self) -> Result<(), StateError> {
        let now = stamp(&self.files.team_state);
        if now.is_none() || now == self.team {
            return Ok(());
        }
        // Streamed into the few fields shown: a 10,000-job team-state is
        // tens of megabytes, several times that as a tree.
        let path = &self.files.team_state;
        let file = std::fs::File::open(path).map_err(|e| StateError::Io {
            path: path.clone(),
            source: e,
        })?;
        let doc: TeamRows = match serde_json::from_reader(io::BufReader::new(file)) {
            Ok(doc) => doc,
            // A blank file is a run the lead prepared: no rows yet.
            Err(e) if e.is_eof() && blank(path) => TeamRows::default(),
            Err(e) => {
                return Err(StateError::Parse {
                    path: path.clone(),
                    source: e,
                })
            }
        };
        // The stage a job ran in is on its dispatch rows only.
        let stages: HashMap<&str, &str> = doc
            .dispatches
            .iter()
            .filter_map(|r| Some((r.key()?, r.stage.as_deref()?)))
            .collect();
        self.model.adopt_workers(doc.workers.iter().filter_map(|w| {
            let key = w.key()?;
            Some(WorkerRow {
                key,
                label: w.label(),
                stage: stages.get(key).copied(),
                status: w.status?,
                reason: &w.reason,
            })
        }));
        self.team = now;
        Ok(())
    }

    /// Read the status sidecar at `path`, if it is a running attempt's:
    /// what it has spent so far. `false` where the path is no such sidecar.
    pub fn read_sidecar(&mut self, path: &Path) -> bool {
        let Some(key) = self
            .sidecars
            .iter()
            .find(|(_, p)| p.as_path() == path)
            .map(|(k, _)| k.clone())
        else {
            return false;
        };
        self.read_sidecar_of(&key);
        true
    }

    /// Read every running attempt's status sidecar (once, at the start).
    pub fn read_all_sidecars(&mut self) {
        let keys: Vec<String> = self.sidecars.keys().cloned().collect();
        for key in keys {
            self.read_sidecar_of(&key);
        }
    }

    fn read_sidecar_of(&mut self, key: &str) {
        let Some(path) = self.sidecars.get(key) else {
            return;
        };
        if let Some(s) = crate::worker::StatusSidecar::read(path) {
            let exited = s.state == crate::worker::SidecarState::Exited;
            self.model
                .set_live(key, u64::from(s.attempt), s.usage, exited);
        }
    }

    /// The directories whose changes matter: the events log's, team-state's
    /// and those of running attempts' sidecars (and logs).
    pub fn dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = [&self.files.events, &self.files.team_state]
            .into_iter()
            .chain(self.sidecars.values())
            .filter_map(|p| p.parent().map(Path::to_path_buf))
            .collect();
        dirs.sort();
        dirs.dedup();
        dirs
    }

    /// Whether an `okstra exec` holds the run now, as `/proc/locks` says:
    /// looked at, never taken.
    pub fn exec_running(&self) -> bool {
        std::fs::File::open(self.files.exec_lock())
            .ok()
            .and_then(|f| crate::fsutil::lock_holder(&f))
            .is_some()
    }
}

/// Whether the file at `path` holds nothing but whitespace.
fn blank(path: &Path) -> bool {
    std::fs::read(path).is_ok_and(|b| b.iter().all(u8::is_ascii_whitespace))
}

/// The rows of team-state the watch reads.
#[derive(Debug, Default, serde::Deserialize)]
struct TeamRows {
    #[serde(default)]
    workers: Vec<RowFields>,
    #[serde(default, rename = "workerDispatches")]
    dispatches: Vec<RowFields>,
}

/// The fields of a team-state row the watch reads.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct RowFields {
    worker_key: Option<String>,
    worker_id: Option<String>,
    execution_label: Option<String>,
    stage: Option<String>,
    #[serde(default, deserialize_with = "lenient_status")]
    status: Option<WorkerStatus>,
    #[serde(default)]
    reason: String,
}

fn lenient_status<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<WorkerStatus>, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    Ok(v.as_str().and_then(|s| s.parse().ok()))
}

use serde::Deserialize as _;

impl RowFields {
    fn key(&self) -> Option<&str> {
        self.worker_key
            .as_deref()
            .or(self.worker_id.as_deref())
            .or(self.execution_label.as_deref())
    }

    fn label(&self) -> &str {
        self.execution_label
            .as_deref()
            .or(self.worker_id.as_deref())
            .or(self.worker_key.as_deref())
            .unwrap_or("")
    }
}

/// The last `n` lines of the log at `path`, from its last 64 KiB at most,
/// made printable (control characters and escape sequences left out).
pub fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let want = (n as u64 * 512).clamp(4096, 65536).min(len);
    let mut buf = Vec::new();
    if file.seek(SeekFrom::Start(len - want)).is_err()
        || file.take(want).read_to_end(&mut buf).is_err()
    {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(&buf);
    // The first line may be cut: left out unless it starts the file.
    let cut = usize::from(want < len);
    let mut lines: Vec<String> = text
        .split(['\n', '\r'])
        .skip(cut)
        .map(printable)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let skip = lines.len().saturating_sub(n);
    lines.split_off(skip)
}

/// The last line of the log at `path` with something on it.
pub fn last_line(path: &Path) -> String {
    log_tail(path, 1).pop().unwrap_or_default()
}

/// `line` without ANSI escape sequences and control characters, tabs as a
/// space.
pub fn printable(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ params final; other escapes: one more char.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\t' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_leaves_out_escapes_and_controls() {
        assert_eq!(printable("\u{1b}[1;32mok\u{1b}[0m\tdone\u{7}"), "ok done");
    }

    #[test]
    fn the_log_tail_is_its_last_lines_with_text() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.md.log");
        assert_eq!(last_line(&log), "", "no log yet");
        std::fs::write(&log, "one\ntwo\r\n\nthree\n\n").unwrap();
        assert_eq!(log_tail(&log, 2), ["two", "three"]);
        assert_eq!(last_line(&log), "three");
        let long = format!("{}\nend", "x".repeat(100_000));
        std::fs::write(&log, long).unwrap();
        assert_eq!(log_tail(&log, 5), ["end"], "a cut first line is left out");
    }

    #[test]
    fn the_events_log_is_read_from_where_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let files = RunFiles {
            root: dir.path().to_path_buf(),
            team_state: dir.path().join("team-state.json"),
            events: dir.path().join("lead-events.jsonl"),
        };
        let line = |key: &str| {
            format!(
                r#"{{"type":"worker-dispatched","ts":"2026-01-01T00:00:00Z","workerId":"{key}","attempt":1,"workerKey":"{key}","planDigest":"sha256:a","maxAttempts":2,"dispatchMode":"cli-wrapper","pid":1,"promptPath":"p/{key}.md","resultPath":"r"}}"#
            )
        };
        let mut src = Source::new(files.clone());
        src.refresh().unwrap();
        let whole = format!("{}\n{}", line("a"), line("b"));
        let (first, torn) = whole.split_at(line("a").len() + 20);
        std::fs::write(&files.events, first).unwrap();
        src.refresh().unwrap();
        assert_eq!(src.model.jobs().count(), 1, "a torn line waits");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&files.events)
            .unwrap();
        std::io::Write::write_all(&mut f, format!("{torn}\nnot json\n").as_bytes()).unwrap();
        src.refresh().unwrap();
        assert_eq!(src.model.jobs().count(), 2);
        assert_eq!(src.dirs(), [dir.path().to_path_buf(), dir.path().join("p")]);
        // Cut back (a later exec cut a torn line): read afresh.
        std::fs::write(&files.events, format!("{}\n", line("c"))).unwrap();
        src.refresh().unwrap();
        let keys: Vec<String> = src.model.jobs().map(|j| j.key.clone()).collect();
        assert_eq!(keys, ["c"]);
    }
}
