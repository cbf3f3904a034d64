//! The proxy's one accept thread (docs/confinement.md#network).
//!
//! Every open door's listener is in one epoll set, keyed by the door's
//! number; the thread takes each new connection and hands it to
//! [`super::proxy::admit`]. Opening a door adds its listener; closing it
//! drops the listener (which takes it out of the set: its one descriptor is
//! closed), so no thread starts or ends per door. Dropping the acceptor
//! wakes the thread through an eventfd and joins it.

use super::proxy::{admit, lock, Shared};
use rustix::event::{epoll, eventfd, EventfdFlags};
use rustix::io::Errno;
use std::collections::HashMap;
use std::io;
use std::net::TcpListener;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// The epoll key of the wake-up eventfd (door numbers start at 1).
const WAKE: u64 = 0;

/// The stack of the accept thread.
const STACK: usize = 64 * 1024;

/// The open doors, by number.
pub(super) type Registry = Mutex<HashMap<u64, Arc<Shared>>>;

/// What the accept thread and the proxy share.
struct Common {
    epoll: OwnedFd,
    wake: OwnedFd,
    stop: AtomicBool,
    doors: Arc<Registry>,
}

/// The accept thread, and where doors are registered with it.
pub(super) struct Acceptor {
    common: Arc<Common>,
    next: AtomicU64,
    thread: Option<JoinHandle<()>>,
}

impl Acceptor {
    pub fn start() -> io::Result<Acceptor> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        epoll::add(
            &epoll,
            &wake,
            epoll::EventData::new_u64(WAKE),
            epoll::EventFlags::IN,
        )?;
        let common = Arc::new(Common {
            epoll,
            wake,
            stop: AtomicBool::new(false),
            doors: Arc::new(Mutex::new(HashMap::new())),
        });
        let for_thread = Arc::clone(&common);
        let thread = thread::Builder::new()
            .name("egress-accept".into())
            .stack_size(STACK)
            .spawn(move || accept_loop(&for_thread))?;
        Ok(Acceptor {
            common,
            next: AtomicU64::new(WAKE + 1),
            thread: Some(thread),
        })
    }

    /// The registry a door takes itself out of when it closes.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.common.doors
    }

    /// A number for a new door.
    pub fn number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Serve `listener` (non-blocking) as door `number`, from now on.
    pub fn add(&self, number: u64, shared: &Arc<Shared>, listener: &TcpListener) -> io::Result<()> {
        lock(&self.common.doors).insert(number, Arc::clone(shared));
        let added = epoll::add(
            &self.common.epoll,
            listener,
            epoll::EventData::new_u64(number),
            epoll::EventFlags::IN,
        );
        if added.is_err() {
            lock(&self.common.doors).remove(&number);
        }
        Ok(added?)
    }

    /// Every door still registered.
    pub fn open_doors(&self) -> Vec<Arc<Shared>> {
        lock(&self.common.doors).values().cloned().collect()
    }
}

impl Drop for Acceptor {
    fn drop(&mut self) {
        self.common.stop.store(true, Ordering::SeqCst);
        let _ = rustix::io::write(&self.common.wake, &1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Until the acceptor is dropped: wait for connections on every door, and
/// admit each.
fn accept_loop(common: &Common) {
    let mut events = Vec::with_capacity(32);
    loop {
        events.clear();
        match epoll::wait(
            &common.epoll,
            rustix::buffer::spare_capacity(&mut events),
            None,
        ) {
            Ok(_) | Err(Errno::INTR) => {}
            // Nothing else is expected of a valid epoll set; do not spin.
            Err(_) => thread::sleep(Duration::from_millis(100)),
        }
        if common.stop.load(Ordering::SeqCst) {
            return;
        }
        for event in &events {
            let number = event.data.u64();
            if number == WAKE {
                let _ = rustix::io::read(&common.wake, &mut [0u8; 8]);
                continue;
            }
            let door = lock(&common.doors).get(&number).cloned();
            if let Some(door) = door {
                accept_all(&door);
            }
        }
    }
}

/// Take every connection waiting on `door`'s listener (none if it closed
/// meanwhile).
fn accept_all(door: &Arc<Shared>) {
    let listener = lock(&door.listener);
    let Some(listener) = listener.as_ref() else {
        return;
    };
    loop {
        match listener.accept() {
            Ok((stream, _)) => admit(door, stream),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // Out of file descriptors, most likely: the connection stays
            // queued and epoll reports it again; wait a little rather
            // than spin.
            Err(_) => {
                thread::sleep(Duration::from_millis(10));
                return;
            }
        }
    }
}
