//! Exit notices of one round's workers, delivered to the exec loop.
//!
//! A `cli-wrapper` worker is exec's child: its pidfd sits in an epoll set
//! that the loop itself waits on, so the child's exit wakes the loop
//! directly and is reaped there. No thread is started per job; a thread
//! each, handing its notice over a channel, cost a thread's start and end
//! and one more wake-up per job (visible in the executor benchmark).
//!
//! A `pane` worker is not exec's child: its watcher thread (see
//! [`super::backend`]) sends the notice through a [`NoticeSender`], which
//! also rings an eventfd in the same epoll set. On a kernel without pidfds
//! (before Linux 5.3) a child is waited for by a thread of its own in the
//! same way.

use crate::process::{Reaper, Spawned};
use rustix::event::{epoll, eventfd, EventfdFlags, Timespec};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An exit notice: the pid exec watched, and its exit code (128 + signal
/// for a death by signal).
pub type Notice = (u32, i32);

/// The epoll token of the eventfd; pids are never this large.
const WAKE_TOKEN: u64 = u64::MAX;

/// Wakes the loop from another thread: its wait for exits returns, and it
/// looks at everything again.
#[derive(Clone)]
pub struct Waker(Arc<OwnedFd>);

impl Waker {
    pub fn wake(&self) {
        // A full counter (never, at 2^64 - 1) only means the loop is awake
        // already.
        let _ = rustix::io::write(&*self.0, &1u64.to_ne_bytes());
    }
}

/// Sends a notice to the loop from another thread and wakes it.
#[derive(Clone)]
pub struct NoticeSender {
    tx: mpsc::Sender<Notice>,
    wake: Waker,
}

impl NoticeSender {
    pub fn send(&self, pid: u32, code: i32) {
        let _ = self.tx.send((pid, code));
        self.wake.wake();
    }
}

/// The watched workers of one round and the notices not yet taken.
pub struct Notices {
    epoll: OwnedFd,
    wake: Arc<OwnedFd>,
    tx: mpsc::Sender<Notice>,
    rx: mpsc::Receiver<Notice>,
    /// Children watched through their pidfds, by pid.
    children: HashMap<u32, Spawned>,
    /// Notices already taken from their source but not yet handed out.
    stash: VecDeque<Notice>,
}

impl Notices {
    pub fn new() -> io::Result<Notices> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        let (tx, rx) = mpsc::channel();
        let notices = Notices {
            epoll,
            wake: Arc::new(wake),
            tx,
            rx,
            children: HashMap::new(),
            stash: VecDeque::new(),
        };
        notices.register(notices.wake.as_fd(), WAKE_TOKEN)?;
        Ok(notices)
    }

    fn register(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
        epoll::add(
            &self.epoll,
            fd,
            epoll::EventData::new_u64(token),
            epoll::EventFlags::IN,
        )?;
        Ok(())
    }

    /// A sender for a worker that is not our child (a pane's watcher).
    pub fn sender(&self) -> NoticeSender {
        NoticeSender {
            tx: self.tx.clone(),
            wake: self.waker(),
        }
    }

    /// A waker for another thread the loop waits on (the syncer).
    pub fn waker(&self) -> Waker {
        Waker(Arc::clone(&self.wake))
    }

    /// Watch a child until it ends; its notice carries its own pid.
    pub fn watch(&mut self, child: Spawned) {
        let pid = child.pid();
        let watched = child
            .pidfd()
            .is_some_and(|fd| self.register(fd, u64::from(pid)).is_ok());
        if watched {
            self.children.insert(pid, child);
        } else {
            let sender = self.sender();
            std::thread::spawn(move || {
                let mut child = child;
                let code = child.wait().unwrap_or(1);
                sender.send(pid, code);
            });
        }
    }

    /// The next notice, waiting at most `timeout`; `None` when none came.
    pub fn next(&mut self, timeout: Duration) -> Option<Notice> {
        if self.stash.is_empty() {
            self.collect(timeout);
        }
        self.stash.pop_front()
    }

    /// Move every notice that is ready into the stash, first waiting up to
    /// `timeout` for one if none is.
    fn collect(&mut self, timeout: Duration) {
        self.drain_channel();
        let timeout = if self.stash.is_empty() {
            timeout
        } else {
            Duration::ZERO
        };
        // epoll_wait takes whole milliseconds up to i32::MAX (before Linux 5.11).
        let ms = timeout.as_millis().min(i32::MAX as u128) as u64;
        let timeout = Timespec::try_from(Duration::from_millis(ms)).unwrap_or_default();
        let mut events = Vec::with_capacity(16);
        // EINTR (a signal: the caller looks at its interrupt flag) is an
        // early return with nothing.
        let _ = epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut events),
            Some(&timeout),
        );
        for event in events {
            let token = event.data.u64();
            if token == WAKE_TOKEN {
                // The eventfd is non-blocking: an empty counter just fails.
                let _ = rustix::io::read(&*self.wake, &mut [0u8; 8]);
                continue;
            }
            let pid = token as u32;
            let ended = match self.children.get_mut(&pid) {
                Some(child) => child.try_wait().unwrap_or(Some(1)),
                None => None,
            };
            if let Some(code) = ended {
                // Dropping the child closes its pidfd, which takes it out
                // of the epoll set.
                self.children.remove(&pid);
                self.stash.push_back((pid, code));
            }
        }
        self.drain_channel();
    }

    fn drain_channel(&mut self) {
        while let Ok(notice) = self.rx.try_recv() {
            self.stash.push_back(notice);
        }
    }
}

/// exec's workers end through their notices: a stop waits on the same
/// epoll set as the loop, and other workers' notices that arrive meanwhile
/// stay stashed for [`Notices::next`].
impl Reaper for Notices {
    fn reap(&mut self, pids: &[u32], timeout: Duration) -> Vec<(u32, Option<i32>)> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut taken = Vec::new();
            self.stash.retain(|&(pid, code)| {
                let wanted = pids.contains(&pid);
                if wanted {
                    taken.push((pid, Some(code)));
                }
                !wanted
            });
            let left = deadline.saturating_duration_since(Instant::now());
            if !taken.is_empty() || left.is_zero() {
                return taken;
            }
            self.collect(left);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::{spawn, SpawnSpec};
    use std::path::Path;

    fn start(script: &str) -> Spawned {
        let argv: Vec<String> = ["sh", "-c", script].iter().map(|s| s.to_string()).collect();
        spawn(&SpawnSpec {
            argv: &argv,
            cwd: Path::new("/"),
            env: &[],
            log: None,
            stdin: None,
        })
        .unwrap()
    }

    #[test]
    fn a_childs_exit_is_reaped_by_the_loop_with_its_code() {
        let mut notices = Notices::new().unwrap();
        let child = start("exit 3");
        let pid = child.pid();
        notices.watch(child);
        assert_eq!(notices.next(Duration::from_secs(10)), Some((pid, 3)));
        assert!(notices.children.is_empty(), "reaped and forgotten");
        assert_eq!(notices.next(Duration::from_millis(10)), None);
    }

    #[test]
    fn a_signal_death_reads_as_128_plus_the_signal() {
        let mut notices = Notices::new().unwrap();
        let child = start("kill -9 $$");
        let pid = child.pid();
        notices.watch(child);
        assert_eq!(notices.next(Duration::from_secs(10)), Some((pid, 137)));
    }

    #[test]
    fn waiting_for_one_worker_keeps_the_others_notices() {
        let mut notices = Notices::new().unwrap();
        let quick = start("exit 1");
        // The slow one waits on its gate, released only once the quick one
        // has ended, so the quick one's notice arrives while we wait for
        // the slow one.
        let argv: Vec<String> = ["sh", "-c", "head -c 1 >/dev/null; exit 2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (slow, mut gate) = crate::process::spawn_gated(&SpawnSpec {
            argv: &argv,
            cwd: Path::new("/"),
            env: &[],
            log: None,
            stdin: None,
        })
        .unwrap();
        let (quick_pid, slow_pid) = (quick.pid(), slow.pid());
        notices.watch(quick);
        notices.watch(slow);
        let release = std::thread::spawn(move || {
            while crate::process::pid_alive(quick_pid) {
                std::thread::yield_now();
            }
            gate.release().unwrap();
        });
        assert_eq!(
            notices.reap(&[slow_pid], Duration::from_secs(10)),
            [(slow_pid, Some(2))]
        );
        release.join().unwrap();
        assert_eq!(notices.next(Duration::from_secs(10)), Some((quick_pid, 1)));
    }

    #[test]
    fn reaping_gives_up_at_its_timeout() {
        let mut notices = Notices::new().unwrap();
        let mut child = start("sleep 30");
        let pid = child.pid();
        let started = Instant::now();
        assert_eq!(notices.reap(&[pid], Duration::from_millis(50)), []);
        assert!(started.elapsed() >= Duration::from_millis(50));
        child.stop_group(Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn a_stop_through_the_notices_takes_one_grace_period_for_all() {
        let dir = tempfile::tempdir().unwrap();
        let mut notices = Notices::new().unwrap();
        let ready = |i: usize| dir.path().join(format!("ready{i}"));
        let children: Vec<Spawned> = (0..3)
            .map(|i| {
                start(&format!(
                    "trap '' TERM; touch '{}'; sleep 100",
                    ready(i).display()
                ))
            })
            .collect();
        let pids: Vec<u32> = children.iter().map(Spawned::pid).collect();
        let targets: Vec<_> = children.iter().map(Spawned::stop_target).collect();
        for child in children {
            notices.watch(child);
        }
        // The shells have set their trap before the signal comes.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !(0..3).all(|i| ready(i).exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let grace = Duration::from_millis(500);
        let started = Instant::now();
        let codes = crate::process::stop_all(&targets, grace, &mut notices);
        assert!(started.elapsed() < grace * 2, "{:?}", started.elapsed());
        assert_eq!(codes, [Some(137); 3]);
        assert!(notices.children.is_empty());
        assert!(pids.iter().all(|&p| !crate::process::pid_alive(p)));
    }

    #[test]
    fn a_sender_on_another_thread_wakes_the_loop() {
        let mut notices = Notices::new().unwrap();
        let sender = notices.sender();
        let (go, wait) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            wait.recv().unwrap();
            sender.send(4242, 7);
        });
        go.send(()).unwrap();
        // Woken by the eventfd, not by the timeout.
        let started = Instant::now();
        assert_eq!(notices.next(Duration::from_secs(60)), Some((4242, 7)));
        assert!(started.elapsed() < Duration::from_secs(60));
        thread.join().unwrap();
    }
}
