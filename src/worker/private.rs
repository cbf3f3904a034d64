//! An attempt's private directory (docs/confinement.md#its-private-tmpdir,
//! [`crate::tmpdir`]): outside the project, this user's alone, holding the
//! confined worker's TMPDIR (`tmp/`) and the agent CLI's private state
//! (`state/`, docs/confinement.md#provider-state). The wrapper makes it
//! before the attempt and removes it once the worker ended; exec removes
//! one it named again when it settles the attempt.

use super::say;
use super::WorkerArgs;
use crate::provider::state::{self, Private, Report};
use crate::provider::Provider;
use crate::tmpdir;
use std::io;
use std::path::{Path, PathBuf};

/// The private TMPDIR's name in the attempt's directory.
pub const TMP: &str = "tmp";

/// The attempt's private directory: the one exec named (`--tmp-dir`), or
/// one named here; removed when dropped.
pub(super) struct AttemptDir {
    root: tmpdir::Root,
    name: String,
    pub path: PathBuf,
    /// The agent CLI's private state, once seeded.
    pub state: Option<Private>,
    /// Left in place when dropped: it holds a refreshed login not yet
    /// written back, which exec tries again.
    keep: bool,
}

impl AttemptDir {
    /// Make the directory, where the attempt needs one: for an agent CLI
    /// (its private state), or a worker that may be confined (its TMPDIR).
    pub fn make_for(
        args: &WorkerArgs,
        project: &Path,
        provider: Provider,
    ) -> io::Result<Option<AttemptDir>> {
        let confining = args.confinement != crate::vocab::Confinement::None;
        if !provider.is_agent() && !confining {
            return Ok(None);
        }
        let (root, name) = match &args.tmp_dir {
            Some(dir) => tmpdir::Root::of(dir)?,
            None => (tmpdir::Root::system(project)?, tmpdir::own_name()),
        };
        // Inside the project, the worker could write there.
        if root
            .path()
            .canonicalize()?
            .starts_with(project.canonicalize()?)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is inside the project", root.path().display()),
            ));
        }
        let path = root.create(&name)?;
        Ok(Some(AttemptDir {
            root,
            name,
            path,
            state: None,
            keep: false,
        }))
    }

    /// Seed the agent CLI's private state from the user's, where it has
    /// any (`command` has none).
    pub fn seed(&mut self, provider: Provider) -> io::Result<()> {
        if let Some(layout) = provider.private_state() {
            self.state = Some(Private::seed(&self.path, provider, &layout)?);
        }
        Ok(())
    }

    /// The confined worker's TMPDIR, made.
    pub fn make_tmp(&self) -> io::Result<PathBuf> {
        let tmp = self.path.join(TMP);
        std::fs::create_dir(&tmp)?;
        Ok(tmp)
    }

    /// The variable that points the CLI at its private state, and its value.
    pub fn state_env(&self) -> Option<(String, String)> {
        self.state.as_ref().map(Private::env)
    }

    /// The private state's directory, which a confined worker may write.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state.as_ref().map(Private::dir)
    }

    /// What the attempt wrote in its private state, a refreshed login
    /// written back: done once the worker ended, before the directory goes.
    /// A write-back that could not be done keeps the directory for exec's
    /// try (docs/confinement.md#provider-state).
    pub fn finish(&mut self) -> Option<Report> {
        let report = self.state.as_ref()?.finish();
        match &report.credentials {
            Some(state::WriteBack::Refused { file, reason }) => say(format_args!(
                "the CLI's refreshed login was not written back to {}: {reason}",
                file.display()
            )),
            Some(state::WriteBack::Failed { file, reason }) => {
                say(format_args!(
                    "the CLI's refreshed login could not be written back to {} ({reason}): {} is kept for exec to try again",
                    file.display(),
                    self.path.display()
                ));
                self.keep = true;
            }
            _ => {}
        }
        Some(report)
    }
}

impl Drop for AttemptDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        // Most often a trivial job's: an empty TMPDIR and no state, gone
        // with two rmdirs and no walk.
        if self.state.is_none() {
            let _ = std::fs::remove_dir(self.path.join(TMP));
        }
        if let Err(err) = self.root.remove(&self.name) {
            say(format_args!(
                "cannot remove the attempt's private directory {}: {err}",
                self.path.display()
            ));
        }
    }
}
