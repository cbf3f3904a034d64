//! Why an audit could not be completed. The audit fails closed
//! (docs/audit.md#the-audit-fails-closed): anything that stops a snapshot or a
//! compare from seeing the whole tree is one of these, and the executor settles
//! every job the audit covers `error` with code `audit/incomplete` naming the
//! path. Nothing here is ever skipped or taken as "no change".

use crate::diag::{Code, Diagnostic};
use std::io;

/// What the audit was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Opening a walked root (the project, a worktree outside it).
    OpenRoot,
    /// Opening a directory relative to its parent.
    OpenDir,
    /// Reading a directory's entries.
    ReadDir,
    /// `lstat` of an entry its directory listed.
    Stat,
    ReadLink,
    /// Reading a file to hash it.
    Hash,
    /// An entry was swapped for another between two looks at it (its
    /// listing and its opening): the tree changed under the walk.
    Changed,
    /// The stored snapshot cannot be used (wrong version, inconsistent).
    Snapshot,
    /// More changes than the audit reports at once (see `compare`).
    Report,
}

impl Step {
    fn what(self) -> &'static str {
        match self {
            Step::OpenRoot => "cannot open the audited root",
            Step::OpenDir => "cannot open the directory",
            Step::ReadDir => "cannot list the directory",
            Step::Stat => "cannot stat",
            Step::ReadLink => "cannot read the symlink",
            Step::Hash => "cannot read the file",
            Step::Changed => "changed while the audit read it:",
            Step::Snapshot => "cannot use the stored snapshot",
            Step::Report => "too many changes to report under",
        }
    }
}

/// The audit could not be completed at `path`.
#[derive(Debug, thiserror::Error)]
#[error("{} `{}`: {}", .step.what(), .path, cause(*.step, .source))]
pub struct AuditError {
    /// Where: project-relative with `/`, or absolute outside the project,
    /// names escaped as in `changedPaths`.
    pub path: String,
    pub step: Step,
    #[source]
    pub source: io::Error,
}

impl AuditError {
    pub fn new(step: Step, path: impl Into<String>, source: io::Error) -> Self {
        AuditError {
            path: path.into(),
            step,
            source,
        }
    }

    /// The reason a job the audit covered settles with.
    pub fn reason(&self) -> String {
        format!("mutation audit incomplete: {self}")
    }

    /// The `audit/incomplete` diagnostic for exec's output.
    pub fn diagnostic(&self) -> Diagnostic {
        Diagnostic::new(Code::AuditIncomplete, self.reason()).help(
            "the jobs this audit covers were settled `error`, not judged; make the path \
             readable (or stop whatever changes the tree while exec runs), then run \
             `okstra exec` again",
        )
    }

    /// Whether the path was not there (vanished between two looks, or never
    /// existed).
    pub fn is_not_found(&self) -> bool {
        self.source.kind() == io::ErrorKind::NotFound
    }
}

fn cause(step: Step, source: &io::Error) -> String {
    if source.kind() == io::ErrorKind::NotFound
        && matches!(
            step,
            Step::Stat | Step::OpenDir | Step::Hash | Step::ReadLink
        )
    {
        // Listed by its directory, gone when looked at.
        "it vanished during the walk".to_string()
    } else {
        source.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_path_and_the_cause() {
        let e = AuditError::new(
            Step::OpenDir,
            "src/locked",
            io::Error::from(rustix::io::Errno::ACCESS),
        );
        let text = e.to_string();
        assert!(
            text.starts_with("cannot open the directory `src/locked`: "),
            "{text}"
        );
        assert!(text.contains("Permission denied"), "{text}");
        assert_eq!(e.reason(), format!("mutation audit incomplete: {text}"));
        let d = e.diagnostic();
        assert_eq!(d.code, Code::AuditIncomplete);
        assert!(d.message.contains("src/locked"));
        let gone = AuditError::new(
            Step::Stat,
            "a/b.txt",
            io::Error::from(io::ErrorKind::NotFound),
        );
        assert_eq!(
            gone.to_string(),
            "cannot stat `a/b.txt`: it vanished during the walk"
        );
        assert!(gone.is_not_found());
    }
}
