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

use crate::process::Spawned;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An exit notice: the pid exec watched, and its exit code (128 + signal
/// for a death by signal).
pub type Notice = (u32, i32);

/// The epoll token of the eventfd; pids are never this large.
const WAKE_TOKEN: u64 = u64::MAX;

/// Sends a notice to the loop from another thread and wakes it.
#[derive(Clone)]
pub struct NoticeSender {
    tx: mpsc::Sender<Notice>,
    wake: Arc<OwnedFd>,
}

impl NoticeSender {
    pub fn send(&self, pid: u32, code: i32) {
        let _ = self.tx.send((pid, code));
        let one: u64 = 1;
        // SAFETY: an 8-byte write from a live local to our eventfd. A full
        // counter (never, at 2^64 - 1) only means the loop is awake already.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
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

fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A descriptor just returned by a successful system call.
fn owned(fd: libc::c_int) -> OwnedFd {
    // SAFETY: `fd` was just created by the kernel for us and nobody else
    // owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

impl Notices {
    pub fn new() -> io::Result<Notices> {
        // SAFETY: plain system calls taking flags; errors are checked.
        let epoll = owned(cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?);
        let wake = owned(cvt(unsafe {
            libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
        })?);
        let (tx, rx) = mpsc::channel();
        let notices = Notices {
            epoll,
            wake: Arc::new(wake),
            tx,
            rx,
            children: HashMap::new(),
            stash: VecDeque::new(),
        };
        notices.register(notices.wake.as_raw_fd(), WAKE_TOKEN)?;
        Ok(notices)
    }

    fn register(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: both descriptors are open and `event` outlives the call.
        cvt(unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut event) })
            .map(drop)
    }

    /// A sender for a worker that is not our child (a pane's watcher).
    pub fn sender(&self) -> NoticeSender {
        NoticeSender {
            tx: self.tx.clone(),
            wake: Arc::clone(&self.wake),
        }
    }

    /// Watch a child until it ends; its notice carries its own pid.
    pub fn watch(&mut self, child: Spawned) {
        let pid = child.pid();
        let watched = child
            .pidfd()
            .is_some_and(|fd| self.register(fd.as_raw_fd(), u64::from(pid)).is_ok());
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

    /// Wait at most `timeout` for `pid`'s notice; notices of other workers
    /// that arrive meanwhile are kept for [`Self::next`].
    pub fn wait_for(&mut self, pid: u32, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(at) = self.stash.iter().position(|&(p, _)| p == pid) {
                return self.stash.remove(at).map(|(_, code)| code);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            self.collect(left);
        }
    }

    /// Move every notice that is ready into the stash, first waiting up to
    /// `timeout` for one if none is.
    fn collect(&mut self, timeout: Duration) {
        self.drain_channel();
        let ms = if self.stash.is_empty() {
            timeout.as_millis().min(i32::MAX as u128) as libc::c_int
        } else {
            0
        };
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: `events` is a live buffer of the length given. EINTR (a
        // signal: the caller looks at its interrupt flag) returns -1.
        let n = unsafe {
            libc::epoll_wait(
                self.epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as libc::c_int,
                ms,
            )
        };
        for event in events.iter().take(n.max(0) as usize) {
            let token = event.u64;
            if token == WAKE_TOKEN {
                let mut count = 0u64;
                // SAFETY: an 8-byte read into a live local; the eventfd is
                // non-blocking, so an empty counter just fails.
                unsafe {
                    libc::read(
                        self.wake.as_raw_fd(),
                        (&mut count as *mut u64).cast(),
                        std::mem::size_of::<u64>(),
                    )
                };
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
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("go");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let mut notices = Notices::new().unwrap();
        let quick = start("exit 1");
        let slow = start(&format!("read _ < '{}'; exit 2", fifo.display()));
        let (quick_pid, slow_pid) = (quick.pid(), slow.pid());
        notices.watch(quick);
        notices.watch(slow);
        // The slow one is let go only once the quick one has ended, so the
        // quick one's notice arrives while we wait for the slow one.
        let release = std::thread::spawn(move || {
            while crate::process::pid_alive(quick_pid) {
                std::thread::yield_now();
            }
            std::fs::write(&fifo, "go\n").unwrap();
        });
        assert_eq!(notices.wait_for(slow_pid, Duration::from_secs(10)), Some(2));
        release.join().unwrap();
        assert_eq!(notices.next(Duration::from_secs(10)), Some((quick_pid, 1)));
    }

    #[test]
    fn wait_for_gives_up_at_its_timeout() {
        let mut notices = Notices::new().unwrap();
        let mut child = start("sleep 30");
        let pid = child.pid();
        let started = Instant::now();
        assert_eq!(notices.wait_for(pid, Duration::from_millis(50)), None);
        assert!(started.elapsed() >= Duration::from_millis(50));
        child.stop_group(Duration::from_secs(1)).unwrap();
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
