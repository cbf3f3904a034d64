//! Exit notices of one round's workers, delivered to the exec loop.
//!
//! A `cli-wrapper` worker is exec's child: its pidfd sits in an epoll set
//! that the loop itself waits on, so the child's exit wakes the loop
//! directly and is reaped there. No thread is started per job; a thread
//! each, handing its notice over a channel, cost a thread's start and end
//! and one more wake-up per job (visible in the executor benchmark).
//!
//! A wrapper *slot* (`cli-wrapper`, attempt after attempt, see
//! `crate::worker`) is exec's child too, but the end of an attempt is its
//! `exit <code>` line on the slot's socket, which sits in the same epoll
//! set; the slot's own end is its socket's end of input, a notice only
//! where an attempt was under way (it died mid-attempt).
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
use std::os::unix::net::UnixStream;
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
    /// Wrapper slots, by pid.
    slots: HashMap<u32, SlotEnd>,
    /// Slots whose process ended, with its exit code, not yet taken.
    gone: Vec<(u32, i32)>,
}

/// What the loop watches of a wrapper slot.
struct SlotEnd {
    child: Spawned,
    socket: UnixStream,
    /// Bytes of an answer read but not yet a line.
    partial: Vec<u8>,
    /// Whether the attempt last sent was answered (or none was sent).
    answered: bool,
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
            slots: HashMap::new(),
            gone: Vec::new(),
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

    /// Watch a wrapper slot: each `exit <code>` line on `socket` is a notice
    /// carrying the slot's pid, and so is its end where an attempt sent
    /// with [`Notices::sent`] was not answered.
    pub fn watch_slot(&mut self, child: Spawned, socket: UnixStream) -> io::Result<()> {
        let pid = child.pid();
        self.register(&socket, u64::from(pid))?;
        self.slots.insert(
            pid,
            SlotEnd {
                child,
                socket,
                partial: Vec::new(),
                answered: true,
            },
        );
        Ok(())
    }

    /// An attempt was sent to slot `pid`: its answer, or the slot's end, is
    /// due.
    pub fn sent(&mut self, pid: u32) {
        if let Some(slot) = self.slots.get_mut(&pid) {
            slot.answered = false;
        }
    }

    /// The slots whose process ended since the last call, with their exit
    /// codes (reaped and forgotten here).
    pub fn take_gone(&mut self) -> Vec<(u32, i32)> {
        std::mem::take(&mut self.gone)
    }

    /// End every slot: tell each there is nothing more (its socket's end),
    /// and wait, at most `limit` in all, for each to exit. An idle slot
    /// exits at once; one still running an attempt (exec stopping on an
    /// error it cannot record) finishes it first, and is not waited for
    /// past `limit`.
    pub fn end_slots(&mut self, limit: Duration) {
        for slot in self.slots.values() {
            let _ = slot.socket.shutdown(std::net::Shutdown::Write);
        }
        let deadline = Instant::now() + limit;
        for (_, mut slot) in self.slots.drain() {
            let left = deadline.saturating_duration_since(Instant::now());
            let _ = slot.child.wait_timeout(left);
        }
    }

    /// Read what slot `pid`'s socket holds: answers become notices; its end
    /// reaps it.
    fn read_slot(&mut self, pid: u32) {
        let Some(slot) = self.slots.get_mut(&pid) else {
            return;
        };
        let mut buf = [0u8; 256];
        let ended = loop {
            match rustix::net::recv(&slot.socket, &mut buf, rustix::net::RecvFlags::DONTWAIT) {
                Ok((0, _)) => break true,
                Ok((n, _)) => slot.partial.extend_from_slice(&buf[..n]),
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => break false,
                Err(_) => break true,
            }
        };
        while let Some(end) = slot.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = slot.partial.drain(..=end).collect();
            let code = std::str::from_utf8(&line)
                .ok()
                .and_then(|l| l.trim_end().strip_prefix("exit "))
                .and_then(|c| c.parse::<i32>().ok());
            // A line that is no answer is the slot's fault: it counts as
            // the attempt's end, failed.
            self.stash.push_back((pid, code.unwrap_or(1)));
            slot.answered = true;
        }
        if ended {
            let mut slot = self.slots.remove(&pid).expect("looked up above");
            // Out of the set by hand: the backend's copy of the socket may
            // still be open, which would keep it there, ready for ever.
            let _ = epoll::delete(&self.epoll, &slot.socket);
            // Its socket ends only as it exits: the wait is short.
            let code = slot.child.wait().unwrap_or(1);
            if !slot.answered {
                self.stash.push_back((pid, code));
            }
            self.gone.push((pid, code));
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
            if self.slots.contains_key(&pid) {
                self.read_slot(pid);
                continue;
            }
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

    /// `sh -c script`.
    fn sh(script: &str) -> Vec<String> {
        ["sh", "-c", script].iter().map(|s| s.to_string()).collect()
    }

    /// `argv` run in `/`, with our environment and output.
    fn in_root(argv: &[String]) -> SpawnSpec<'_> {
        SpawnSpec {
            argv,
            cwd: Path::new("/"),
            env: &[],
            log: None,
            stdin: None,
        }
    }

    fn start(script: &str) -> Spawned {
        spawn(&in_root(&sh(script))).unwrap()
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
        // The slow one waits for a byte, sent only once the quick one
        // has ended, so the quick one's notice arrives while we wait for
        // the slow one.
        let (slow, socket) = slot("head -c 1 >/dev/null; exit 2");
        let (quick_pid, slow_pid) = (quick.pid(), slow.pid());
        notices.watch(quick);
        notices.watch(slow);
        let release = std::thread::spawn(move || {
            use std::io::Write;
            while crate::process::pid_alive(quick_pid) {
                std::thread::yield_now();
            }
            (&socket).write_all(b"x").unwrap();
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

    fn slot(script: &str) -> (Spawned, std::os::unix::net::UnixStream) {
        crate::process::spawn_with_socket(&in_root(&sh(script))).unwrap()
    }

    /// A watched slot running `script`, sent one line (`go`) as an attempt.
    fn slot_sent(script: &str) -> (Notices, u32, std::os::unix::net::UnixStream) {
        let mut notices = Notices::new().unwrap();
        let (child, socket) = slot(script);
        let pid = child.pid();
        notices
            .watch_slot(child, socket.try_clone().unwrap())
            .unwrap();
        notices.sent(pid);
        std::io::Write::write_all(&mut &socket, b"go\n").unwrap();
        (notices, pid, socket)
    }

    #[test]
    fn a_slots_answer_ends_its_attempt_and_its_death_ends_one_unanswered() {
        let (mut notices, pid, socket) = slot_sent("read x; echo 'exit 3' >&0; read x; exit 9");
        assert_eq!(notices.next(Duration::from_secs(10)), Some((pid, 3)));
        assert!(notices.take_gone().is_empty());
        notices.sent(pid);
        std::io::Write::write_all(&mut &socket, b"go\n").unwrap();
        assert_eq!(
            notices.next(Duration::from_secs(10)),
            Some((pid, 9)),
            "died mid-attempt"
        );
        assert_eq!(notices.take_gone(), vec![(pid, 9)]);
        assert_eq!(
            notices.next(Duration::from_millis(50)),
            None,
            "out of the set"
        );
    }

    #[test]
    fn an_idle_slots_end_is_no_attempts_and_a_garbled_answer_is_a_failure() {
        let (mut notices, pid, socket) =
            slot_sent("read x; echo 'done, I think' >&0; read x; exit 0");
        assert_eq!(notices.next(Duration::from_secs(10)), Some((pid, 1)));
        socket.shutdown(std::net::Shutdown::Write).unwrap();
        wait_gone(&mut notices, pid);
        assert_eq!(
            notices.next(Duration::from_millis(50)),
            None,
            "idle: no attempt ended"
        );
    }

    /// Wait for idle slot `pid` to be gone (exit 0), no notice coming.
    fn wait_gone(notices: &mut Notices, pid: u32) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert_eq!(
                notices.next(Duration::from_millis(20)),
                None,
                "an idle slot's end ended no attempt"
            );
            let gone = notices.take_gone();
            if !gone.is_empty() {
                assert_eq!(gone, vec![(pid, 0)]);
                return;
            }
            assert!(Instant::now() < deadline, "the slot's end was never seen");
        }
    }
}
