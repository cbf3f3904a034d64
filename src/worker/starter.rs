//! The thread that restricts itself and starts a confined worker
//! (docs/confinement.md#kernel-confinement).
//!
//! Landlock binds the thread that restricts itself, and a process inherits
//! the domain of the thread that made it. So a confined child is started by
//! a thread of the wrapper's own, restricted for that one start: the child
//! is confined before its first instruction, while the wrapper's main
//! thread, which writes the status sidecar, stops the child and removes the
//! TMPDIR, stays outside the domain (and the child, whose parent is the
//! wrapper's process, cannot signal it). Not a pre-exec hook: that needs
//! `unsafe` (code between fork and exec), and makes std fork where it now
//! uses posix_spawn.
//!
//! The thread is the dearest part of confining a job: it is the wrapper's
//! first, so the kernel sets the process up for threads (its futex hash),
//! glibc maps it a stack and a malloc arena, std a signal stack, and it
//! exits again; on the benchmark VM that is about 0.2 ms of CPU, more than
//! the Landlock calls, the opens and the TMPDIR together (benches/README.md,
//! "Confinement"). So [`run`](super::run) makes it before a gated wrapper
//! waits for exec's go, which comes only once exec has recorded and synced
//! the dispatch: the thread starts up in that wait, not after the go. It
//! then waits for its one order (the ruleset and what to start), answers
//! with the started child, and ends; it ends as well when no order comes.

use super::confined::ConfineFailure;
use crate::confine::Restriction;
use crate::process::{SpawnSpec, Spawned};
use std::io;
use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, SyncSender};

/// A child started by the thread, or why it was not: `Err` when the
/// confinement could not be applied (nothing was started), else what the
/// start gave.
pub(super) type Started = Result<io::Result<Spawned>, ConfineFailure>;

/// What the thread is to start, and under which ruleset.
pub(super) struct Order {
    pub restriction: Restriction,
    pub argv: Vec<String>,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub stdin: Option<PathBuf>,
    /// Whether the child leads a process group of its own (a slot's
    /// worker), rather than staying in the wrapper's.
    pub own_group: bool,
}

/// The waiting thread's end in the wrapper's main thread.
pub(super) struct Starter {
    orders: SyncSender<Order>,
    started: Receiver<Started>,
}

impl Starter {
    /// Make the thread; it waits for [`Starter::start`], and ends without
    /// doing anything once the starter is dropped.
    pub fn new() -> io::Result<Starter> {
        let (orders, order) = mpsc::sync_channel::<Order>(1);
        let (answer, started) = mpsc::sync_channel::<Started>(1);
        // Not joined: the wrapper goes on as soon as the child started,
        // while the thread winds down beside it.
        std::thread::Builder::new()
            .name("confined-start".into())
            .spawn(move || {
                if let Ok(order) = order.recv() {
                    let _ = answer.send(order.carry_out());
                }
            })?;
        Ok(Starter { orders, started })
    }

    /// Have the thread restrict itself and start `order`'s child.
    pub fn start(self, order: Order) -> Started {
        let lost = ConfineFailure::ThreadLost;
        self.orders
            .send(order)
            .map_err(|_| ConfineFailure::ThreadLost)?;
        self.started.recv().unwrap_or(Err(lost))
    }
}

impl Order {
    /// On the thread: restrict it, then start the child from it.
    fn carry_out(self) -> Started {
        self.restriction
            .restrict_this_thread()
            .map_err(ConfineFailure::Restrict)?;
        let spec = SpawnSpec {
            argv: &self.argv,
            cwd: &self.cwd,
            env: &self.env,
            log: None,
            stdin: self.stdin.as_deref(),
        };
        Ok(super::attempt::spawn_worker(&spec, self.own_group))
    }
}
