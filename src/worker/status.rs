//! The wrapper's status sidecar, `<prompt>.status.json`
//! (docs/exec.md#what-is-written-when): one type, written by the wrapper,
//! read by exec's settlement and resume and by the pane and Slurm backends,
//! and rewritten by exec after an idle stop.
//!
//! Reading is lenient, field by field: a field missing (a sidecar an older
//! okstra wrote) or of another type reads as its default, and the others
//! still read; keys this okstra does not know are kept for a rewrite.

use super::say;
use crate::beneath::{Beneath, BeneathError};
use crate::diag::WrapperExit;
use crate::provider::Usage;
use crate::vocab::FailureKind;
use serde::de::{DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Whether the attempt's wrapper recorded its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SidecarState {
    /// Started, or about to: no end recorded. A sidecar that names no
    /// state, or one this okstra does not know, reads so.
    #[default]
    Running,
    /// The wrapper recorded how the attempt ended.
    Exited,
}

/// The status sidecar's document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StatusSidecar {
    #[serde(deserialize_with = "lenient")]
    pub state: SidecarState,
    /// The provider CLI's pid; null until it started.
    #[serde(deserialize_with = "lenient")]
    pub pid: Option<u32>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub wrapper_pid: Option<u32>,
    #[serde(deserialize_with = "lenient")]
    pub started_at: String,
    #[serde(deserialize_with = "lenient")]
    pub heartbeat_at: String,
    /// The wrapper's exit code ([`WrapperExit`], or the child's own).
    #[serde(deserialize_with = "lenient")]
    pub exit_code: Option<i32>,
    #[serde(rename = "duration_ms", deserialize_with = "lenient")]
    pub duration_ms: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub provider: String,
    #[serde(deserialize_with = "lenient")]
    pub attempt: u32,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub dispatch_id: Option<String>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub served_model: Option<String>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub cli_session_id: Option<String>,
    /// The exact argv the wrapper started (the provider CLI's, or a
    /// `command` job's own).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    /// Where this attempt's output starts in the log (earlier attempts'
    /// output comes before it), in bytes.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub log_offset: Option<u64>,
    /// What the attempt spent, where its CLI says.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// exec stopped the worker for its silence, and rewrote the sidecar
    /// to say so ([`StatusSidecar::mark_idle_timeout`]).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "is_false")]
    pub idle_timed_out: bool,
    /// Ended because the wrapper was told to stop (SIGTERM / SIGINT from
    /// exec): the exit code says how the child took it, not how it did.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "is_false")]
    pub stopped: bool,
    /// On a timeout, or a stop at a retry of refused credentials, the code
    /// the stopped child itself ended with.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub child_exit_code: Option<i32>,
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kernel confinement the child ran under
    /// (docs/confinement.md#kernel-confinement): `landlock-abi<N>`, or
    /// `none`. Absent when it never started.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub confinement: Option<String>,
    /// The network the confined child had (docs/confinement.md#network):
    /// `provider` (through its door in exec's egress proxy), `none`, or
    /// `open`. Absent when unconfined, or when it never started.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::vocab::NetworkMode>,
    /// What the attempt wrote in its CLI's private state, and what became
    /// of a login it refreshed (docs/confinement.md#provider-state).
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub provider_state: Option<crate::provider::state::Report>,
    /// What kind of failure a non-zero exit was, where it can be told.
    #[serde(deserialize_with = "lenient", skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<FailureKind>,
    /// Keys another okstra wrote that this one does not know: kept, so a
    /// rewrite loses nothing.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

fn is_false(b: &bool) -> bool {
    !b
}

/// A field as its type where it is one, else its default: one odd field
/// does not make the whole sidecar unreadable.
fn lenient<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    let value = Value::deserialize(d)?;
    Ok(T::deserialize(value).unwrap_or_default())
}

impl StatusSidecar {
    /// The sidecar at `path`, when it holds a JSON document (one that is
    /// not an object says nothing, but is there).
    pub fn read(path: &Path) -> Option<StatusSidecar> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice(&bytes).ok().or_else(|| {
            serde_json::from_slice::<serde::de::IgnoredAny>(&bytes)
                .ok()
                .map(|_| StatusSidecar::default())
        })
    }

    /// Once the wrapper recorded its end, its exit code: 1 where it
    /// recorded none, or none an `i32` holds.
    pub fn exited_with(&self) -> Option<i32> {
        (self.state == SidecarState::Exited).then(|| self.exit_code.unwrap_or(1))
    }

    /// The sidecar as exec leaves it after stopping an idle worker: what
    /// every other record says, exit code 124 and failure kind `timeout`,
    /// keeping the code the stopped child itself ended with.
    pub fn mark_idle_timeout(&mut self) {
        if let Some(code) = self.exit_code {
            self.child_exit_code = Some(code);
        }
        self.exit_code = Some(WrapperExit::Timeout.code());
        self.failure_kind = Some(FailureKind::Timeout);
        self.idle_timed_out = true;
    }

    /// The document as written: pretty, one line ending it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).unwrap_or_default();
        bytes.push(b'\n');
        bytes
    }
}

/// Owns the status sidecar of the wrapper's attempt: every write goes
/// through here.
pub(super) struct StatusFile {
    path: PathBuf,
    /// The project root, which the sidecar is written below without
    /// following a symlink (docs/exec.md#never-through-a-symlink); why not,
    /// when it cannot be opened.
    own: Result<Beneath, BeneathError>,
    pub status: StatusSidecar,
    started: Instant,
    warned: bool,
    /// Whether the sidecar was written by this wrapper yet.
    written: bool,
}

/// Who the sidecar's attempt is, as its arguments say.
pub(super) struct Attempt<'a> {
    pub provider: &'a str,
    pub attempt: u32,
    pub dispatch_id: Option<&'a str>,
    pub session_id: Option<&'a str>,
}

impl StatusFile {
    /// The sidecar at `path`, below `root`, of an attempt about to start:
    /// `running`, nothing known of the child yet.
    pub fn new(path: &Path, root: &Path, who: Attempt, started: Instant) -> StatusFile {
        StatusFile {
            path: path.to_path_buf(),
            own: Beneath::open(root),
            status: StatusSidecar {
                state: SidecarState::Running,
                wrapper_pid: Some(std::process::id()),
                started_at: crate::clock::now_millis(),
                provider: who.provider.to_string(),
                attempt: who.attempt,
                dispatch_id: who.dispatch_id.map(str::to_string),
                session_id: who.session_id.map(str::to_string),
                log_offset: Some(0),
                ..StatusSidecar::default()
            },
            started,
            warned: false,
            written: false,
        }
    }

    /// Write the sidecar. A failure is said on stderr the first time, and
    /// returned: a heartbeat may fail and the run go on without liveness,
    /// but the first and the last write are what exec relies on.
    pub fn write(&mut self) -> io::Result<()> {
        self.status.heartbeat_at = crate::clock::now_millis();
        let written = self.put(&self.status.to_bytes());
        self.written |= written.is_ok();
        if let Err(err) = &written {
            if !self.warned {
                say(format_args!(
                    "cannot write the status file {}: {err}",
                    self.path.display()
                ));
                self.warned = true;
            }
        }
        written
    }

    /// Write `bytes` as the sidecar, below the project root, never through
    /// a symlink: one planted at the sidecar, or at a directory above it,
    /// is refused (the write fails), so the wrapper never writes outside.
    /// Liveness, rewritten every heartbeat: atomic, not fsynced (see
    /// `Durability::NoFsync`). exec removes the sidecar before it starts
    /// the wrapper, so the first write, often the only one, makes the file
    /// with one write rather than a temporary and a rename.
    fn put(&self, bytes: &[u8]) -> io::Result<()> {
        let own = self
            .own
            .as_ref()
            .map_err(|e| io::Error::other(e.to_string()))?;
        let rel = own.relative(&self.path)?;
        if !self.written {
            match own.create_whole(rel, bytes) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_symlink() => return Err(e.into()),
                // There already (a run by hand), or more than a page.
                Err(_) => {}
            }
        }
        let durability = crate::fsutil::Durability::NoFsync;
        Ok(own.write_atomic(rel, bytes, durability)?)
    }

    /// Record the exit; `exit_code` is what the wrapper exits with, unless
    /// this write fails after a success: then the attempt is not known to
    /// have ended well, and the wrapper says so and exits
    /// [`WrapperExit::StatusWriteFailed`].
    pub fn finish(&mut self, exit_code: i32, error: Option<String>) -> i32 {
        self.status.state = SidecarState::Exited;
        self.status.exit_code = Some(exit_code);
        self.status.duration_ms = Some(crate::clock::millis(self.started.elapsed()));
        self.status.error = error;
        match self.write() {
            Err(err) if exit_code == 0 => {
                say(format_args!(
                    "the child exited 0, but its exit could not be recorded in {}: {err}",
                    self.path.display()
                ));
                WrapperExit::StatusWriteFailed.code()
            }
            _ => exit_code,
        }
    }

    /// [`StatusFile::finish`] for an attempt that failed as `kind` before
    /// its child ran (or while it was started).
    pub fn refuse(&mut self, kind: FailureKind, exit: WrapperExit, problem: String) -> i32 {
        self.status.failure_kind = Some(kind);
        self.finish(exit.code(), Some(problem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sidecars as earlier okstras wrote them (tests/it/fixtures/records/).
    fn recorded(name: &str) -> (Value, StatusSidecar) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/it/fixtures/records/status")
            .join(name);
        let doc = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        (doc, StatusSidecar::read(&path).unwrap())
    }

    #[test]
    fn sidecars_earlier_okstras_wrote_read_whole() {
        let (_, s) = recorded("exited.json");
        assert_eq!(s.state, SidecarState::Exited);
        assert_eq!(s.exited_with(), Some(3));
        assert_eq!(
            (s.pid, s.wrapper_pid, s.attempt),
            (Some(5760), Some(5758), 2)
        );
        assert_eq!(s.dispatch_id.as_deref(), Some("inv-1:attempt-2"));
        assert_eq!(s.argv, ["sh", "-c", "exit 3"]);
        assert_eq!(
            (s.log_offset, s.confinement.as_deref()),
            (Some(0), Some("none"))
        );

        let (_, s) = recorded("running.json");
        assert_eq!((s.state, s.exited_with()), (SidecarState::Running, None));
        assert_eq!((s.exit_code, s.duration_ms), (None, None));

        let (_, s) = recorded("timed-out.json");
        assert_eq!(s.exited_with(), Some(124));
        assert!(s.timed_out && !s.stopped);
        assert_eq!(
            (s.child_exit_code, s.failure_kind),
            (Some(143), Some(FailureKind::Timeout))
        );

        let (_, s) = recorded("stopped.json");
        assert!(s.stopped && !s.timed_out);
        assert_eq!(s.exited_with(), Some(42));

        let (_, s) = recorded("cli-not-found.json");
        assert_eq!((s.pid, s.exited_with()), (None, Some(127)));
        assert_eq!(s.failure_kind, Some(FailureKind::CliNotFound));
        assert!(s.error.unwrap().contains("okstra-no-such-binary"));

        let (_, s) = recorded("claude-usage-confined.json");
        assert_eq!(
            s.served_model.as_deref(),
            Some("claude-sonnet-4-5-20250929")
        );
        assert_eq!(s.cli_session_id.as_deref(), Some("s-1"));
        assert_eq!(s.confinement.as_deref(), Some("landlock-abi7"));
        let usage = s.usage.unwrap();
        assert_eq!((usage.total_tokens, usage.cost_usd), (314, Some(0.000978)));

        let (_, s) = recorded("idle-timeout.json");
        assert!(s.idle_timed_out);
        assert_eq!((s.exited_with(), s.child_exit_code), (Some(124), Some(143)));
    }

    #[test]
    fn the_first_wrappers_sidecar_reads_with_what_it_lacked_absent() {
        let (_, s) = recorded("first-format-timed-out.json");
        assert_eq!(s.exited_with(), Some(124));
        assert!(s.timed_out);
        assert_eq!(s.child_exit_code, Some(143));
        assert_eq!(s.dispatch_id.as_deref(), Some("inv-1:attempt-1"));
        assert!(s.argv.is_empty());
        assert_eq!(
            (s.log_offset, s.usage, s.confinement, s.failure_kind),
            (None, None, None, None)
        );
        assert!(!s.stopped && !s.idle_timed_out && s.other.is_empty());
    }

    /// What the wrapper writes today is what it wrote before the type was
    /// shared: every recorded sidecar written back is the same document.
    #[test]
    fn a_recorded_sidecar_writes_back_as_it_was() {
        for name in [
            "exited.json",
            "running.json",
            "timed-out.json",
            "stopped.json",
            "cli-not-found.json",
            "claude-usage-confined.json",
            "idle-timeout.json",
            "first-format-timed-out.json",
        ] {
            let (doc, s) = recorded(name);
            let back: Value = serde_json::from_slice(&s.to_bytes()).unwrap();
            assert_eq!(back, doc, "{name}");
        }
    }

    #[test]
    fn an_odd_field_reads_as_absent_and_the_rest_still_reads() {
        let doc = br#"{"state": "gone", "exitCode": 4294967296, "cliSessionId": 7,
                       "usage": "not usage", "argv": ["a"], "somethingNew": [1]}"#;
        let s: StatusSidecar = serde_json::from_slice(doc).unwrap();
        assert_eq!(
            s.state,
            SidecarState::Running,
            "an unknown state ended nothing"
        );
        assert_eq!(s.exit_code, None, "2^32 is no i32: not wrapped to 0");
        assert_eq!((s.cli_session_id, s.usage), (None, None));
        assert_eq!(s.argv, ["a"]);
        assert_eq!(s.other["somethingNew"], serde_json::json!([1]));
        let exited: StatusSidecar =
            serde_json::from_slice(br#"{"state": "exited", "exitCode": 4294967296}"#).unwrap();
        assert_eq!(exited.exited_with(), Some(1));

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.md.status.json");
        std::fs::write(&path, "[1]").unwrap();
        assert_eq!(
            StatusSidecar::read(&path),
            Some(StatusSidecar::default()),
            "there, saying nothing"
        );
        std::fs::write(&path, "{\"state\": \"exi").unwrap();
        assert_eq!(StatusSidecar::read(&path), None, "not JSON");
    }
}
