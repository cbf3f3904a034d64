//! File changes as they happen (inotify, through the `notify` crate): the
//! directories of the events log, team-state and the running attempts'
//! sidecars and logs are watched, never polled.

use notify::{RecursiveMode, Watcher};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Watches directories and hands each changed path to a callback (on the
/// watcher's own thread).
pub struct Changes {
    watcher: notify::RecommendedWatcher,
    dirs: HashSet<PathBuf>,
}

impl Changes {
    /// Start watching nothing yet; `changed` gets the paths of each event.
    pub fn start(
        mut changed: impl FnMut(Vec<PathBuf>) + Send + 'static,
    ) -> notify::Result<Changes> {
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            if let Ok(event) = res {
                // Opening or reading a file (ours too) changes nothing.
                if !matches!(
                    event.kind,
                    notify::EventKind::Access(
                        notify::event::AccessKind::Open(_) | notify::event::AccessKind::Read
                    )
                ) {
                    changed(event.paths);
                }
            }
        })?;
        Ok(Changes {
            watcher,
            dirs: HashSet::new(),
        })
    }

    /// Watch `dirs` too (those already watched are left as they are; one
    /// that does not exist yet is tried again next time).
    pub fn watch<'a>(&mut self, dirs: impl IntoIterator<Item = &'a Path>) {
        for dir in dirs {
            if self.dirs.contains(dir) {
                continue;
            }
            if self.watcher.watch(dir, RecursiveMode::NonRecursive).is_ok() {
                self.dirs.insert(dir.to_path_buf());
            }
        }
    }
}
