//! Run state: the team-state document (docs/exec.md#what-is-written-when),
//! attempt records, the lead event log, and the error log
//! (docs/exec.md#the-error-log).
//!
//! Every file here is written through [`crate::fsutil`]: team-state under its
//! lock and replaced whole, the two line logs by single appends.

pub mod attempts;
pub mod error_log;
pub mod journal;
pub mod ledger;
pub(crate) mod merge;
pub mod syncer;
pub mod team_state;

use std::io;
use std::path::PathBuf;

pub use attempts::{AttemptId, AttemptOutcome, AttemptStatus};
pub use error_log::{append_error, log_tail, ErrorRecord};
pub use ledger::Ledger;
pub use team_state::{Rows, TeamStateStore, WorkerStatus};

/// Why reading or recording run state failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot access {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not valid JSON: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{} does not hold a JSON object", path.display())]
    NotAnObject { path: PathBuf },
    #[error("{}: `{key}` must be an array", path.display())]
    NotAnArray { path: PathBuf, key: String },
    #[error(
        "attempt {attempt} of `{dispatch_id}` ({key}) already finished as {recorded}; \
         refusing to record it again as {attempted}"
    )]
    AttemptDrift {
        dispatch_id: String,
        key: String,
        attempt: u32,
        recorded: String,
        attempted: String,
    },
}

impl StateError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        StateError::Io {
            path: path.into(),
            source,
        }
    }
}
