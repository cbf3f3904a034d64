//! Group commit off the executor's thread
//! (docs/exec.md#crash-safety-and-resume).
//!
//! A dispatch record must reach the disk before its attempt may start. exec
//! appends a batch of them and hands the file to a [`Syncer`], whose thread
//! makes them durable with `fdatasync` while exec goes on watching the
//! workers that already run; an attempt is let through its gate only once
//! the [`Ticket`] of the commit that names it is durable. Requests that
//! queue up while a sync runs are covered by one more sync, not one each.
//!
//! The thread rings the executor's waker after every sync, so a free slot
//! waits for the disk, never for the next tick of the loop.

use super::StateError;
use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Which commit a record went out with: durable once the syncer reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

impl Ticket {
    /// A commit already made durable on the caller's own thread.
    pub const DURABLE: Ticket = Ticket(0);

    /// The ticket of the `n`-th commit, for a test's stand-in syncer.
    #[cfg(test)]
    pub(crate) const fn nth(n: u64) -> Ticket {
        Ticket(n)
    }
}

/// Why records exec wrote could not be made durable, or written: what
/// they announce must not happen, and the run stops
/// (docs/exec.md#crash-safety-and-resume). Cheap to clone, since one failed
/// sync answers for every ticket after it: the sources are shared.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RecordError {
    /// The sync thread's `fdatasync` of the events log failed.
    #[error("cannot make {} durable: {source}", path.display())]
    Sync {
        path: PathBuf,
        source: Arc<io::Error>,
    },
    /// The sync thread is gone (only after a failure it recorded).
    #[error("the sync thread ended")]
    SyncThreadEnded,
    /// The events log could not be appended to or synced on this thread.
    #[error(transparent)]
    Events(Arc<io::Error>),
    /// Team-state could not be written.
    #[error("team-state: {0}")]
    TeamState(Arc<StateError>),
}

/// Called by the thread after each sync (and on its failure).
pub type Wake = Box<dyn Fn() + Send>;

struct Shared {
    /// The last ticket made durable.
    done: AtomicU64,
    /// Why a sync failed: no ticket from then on becomes durable.
    failed: Mutex<Option<RecordError>>,
}

impl Shared {
    /// Why a sync failed, if one did (a panic elsewhere poisons nothing
    /// here: the reason is plain data).
    fn failed(&self) -> std::sync::MutexGuard<'_, Option<RecordError>> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Syncer {
    tx: mpsc::Sender<(u64, File)>,
    issued: u64,
    shared: Arc<Shared>,
}

impl Syncer {
    /// Start the thread that syncs `path`'s journal, ringing `wake` after
    /// each sync.
    pub fn start(path: PathBuf, wake: Wake) -> io::Result<Syncer> {
        let (tx, rx) = mpsc::channel();
        let shared = Arc::new(Shared {
            done: AtomicU64::new(0),
            failed: Mutex::new(None),
        });
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("okstra-sync".into())
            .spawn(move || serve(&rx, &theirs, &path, &wake))?;
        Ok(Syncer {
            tx,
            issued: 0,
            shared,
        })
    }

    /// Make everything written to `file` so far durable; the ticket tells
    /// when it is.
    pub fn request(&mut self, file: File) -> Ticket {
        self.issued += 1;
        if self.tx.send((self.issued, file)).is_err() {
            // The thread is gone: only after a failure it recorded.
            self.shared
                .failed()
                .get_or_insert(RecordError::SyncThreadEnded);
        }
        Ticket(self.issued)
    }

    /// Whether the commit of `ticket` is durable; why it never will be.
    pub fn durable(&self, ticket: Ticket) -> Result<bool, RecordError> {
        if ticket.0 <= self.shared.done.load(Ordering::Acquire) {
            return Ok(true);
        }
        match &*self.shared.failed() {
            Some(why) => Err(why.clone()),
            None => Ok(false),
        }
    }
}

fn serve(rx: &mpsc::Receiver<(u64, File)>, shared: &Shared, path: &std::path::Path, wake: &Wake) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        batch.extend(rx.try_iter());
        let last = batch.last().map_or(0, |(ticket, _)| *ticket);
        match sync_each(&batch) {
            Ok(()) => shared.done.store(last, Ordering::Release),
            Err(e) => {
                *shared.failed() = Some(RecordError::Sync {
                    path: path.to_path_buf(),
                    source: Arc::new(e),
                });
                wake();
                return;
            }
        }
        wake();
    }
}

/// Sync each distinct file of the batch once (a journal that followed its
/// path to a new file has two).
fn sync_each(batch: &[(u64, File)]) -> io::Result<()> {
    let mut synced: Vec<(u64, u64)> = Vec::with_capacity(1);
    for (_, file) in batch.iter().rev() {
        let meta = file.metadata()?;
        let id = (meta.dev(), meta.ino());
        if synced.contains(&id) {
            continue;
        }
        super::journal::sync_data(file)?;
        synced.push(id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_for(syncer: &Syncer, ticket: Ticket) -> Result<bool, RecordError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match syncer.durable(ticket) {
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                other => return other,
            }
        }
    }

    #[test]
    fn tickets_become_durable_in_order_and_each_sync_wakes_the_loop() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let file = File::create(&path).unwrap();
        let (tx, rx) = mpsc::channel();
        let mut syncer =
            Syncer::start(path, Box::new(move || tx.send(()).unwrap_or_default())).unwrap();
        assert!(syncer.durable(Ticket::DURABLE).unwrap());
        let first = syncer.request(file.try_clone().unwrap());
        let second = syncer.request(file.try_clone().unwrap());
        assert!(first < second);
        assert!(wait_for(&syncer, second).unwrap());
        assert!(syncer.durable(first).unwrap(), "an earlier ticket too");
        rx.recv_timeout(Duration::from_secs(10))
            .expect("woken after a sync");
    }

    #[test]
    fn a_failed_sync_is_reported_and_nothing_after_it_becomes_durable() {
        let dir = tempfile::tempdir().unwrap();
        let good = File::create(dir.path().join("log")).unwrap();
        // /dev/null cannot be synced (EINVAL), as a failing disk cannot.
        let bad = File::open("/dev/null").unwrap();
        let mut syncer = Syncer::start(dir.path().join("log"), Box::new(|| ())).unwrap();
        let ok = syncer.request(good.try_clone().unwrap());
        assert!(wait_for(&syncer, ok).unwrap());
        let failing = syncer.request(bad);
        let why = wait_for(&syncer, failing).unwrap_err();
        assert!(matches!(why, RecordError::Sync { .. }), "{why:?}");
        let why = why.to_string();
        assert!(why.contains("cannot make") && why.contains("log"), "{why}");
        let later = syncer.request(good);
        assert_eq!(
            syncer.durable(later).unwrap_err().to_string(),
            why,
            "never durable after"
        );
        assert!(syncer.durable(ok).unwrap(), "what was durable stays so");
    }

    #[test]
    fn a_record_error_reads_as_it_always_did() {
        let einval = || Arc::new(io::Error::from_raw_os_error(22));
        let said = [
            RecordError::Sync {
                path: "/p/events.jsonl".into(),
                source: einval(),
            },
            RecordError::SyncThreadEnded,
            RecordError::Events(einval()),
            RecordError::TeamState(Arc::new(StateError::NotAnObject {
                path: "/p/team-state.json".into(),
            })),
        ]
        .map(|e| e.to_string());
        assert_eq!(
            said,
            [
                "cannot make /p/events.jsonl durable: Invalid argument (os error 22)",
                "the sync thread ended",
                "Invalid argument (os error 22)",
                "team-state: /p/team-state.json does not hold a JSON object",
            ]
        );
    }
}
