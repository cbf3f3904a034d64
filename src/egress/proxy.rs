//! The proxy and its doors (docs/confinement.md#network).
//!
//! Threads, not an async runtime: one accept thread waits on every door's
//! listener at once (see `acceptor`), so opening and closing a door, once
//! per attempt, starts and joins no thread. Each connection is served by a
//! thread of its own (and, while it relays, a second one for the other
//! direction), with small stacks and fixed buffers, and a door holds at
//! most [`Limits::connections_per_door`] of them, so a worker that opens
//! connections in a loop costs a bounded amount of memory. Every socket of
//! a connection is registered with its door, which shuts them all down
//! when it closes: no thread is left blocked on a closed door's socket.

use super::acceptor::{Acceptor, Registry};
use super::head::{self, Head, HeadError, Reply, Target, ESTABLISHED};
use super::record::{Counters, Record};
use super::rules::{AddressClass, Allow, Match};
use super::Egress;
use rustix::io::Errno;
use rustix::net::SendFlags;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

/// The buffer of each direction of a relay.
const RELAY_BUFFER: usize = 16 * 1024;

/// The stack of a thread that resolves names: the C library's resolver
/// (NSS modules included) gets more room than a relay needs.
const SERVE_STACK: usize = 256 * 1024;

/// The stack of a relay's second direction.
const SMALL_STACK: usize = 64 * 1024;

/// How many connections over the limit a door answers 503 at a time;
/// beyond these it closes them unanswered.
const TURN_AWAY_AT_ONCE: usize = 8;

/// How long a connection over the limit may take to send its head before
/// it is answered 503 anyway.
const TURN_AWAY_WAIT: Duration = Duration::from_secs(2);

/// After answering with an error, how long and how much the proxy reads
/// and discards of what the worker still sends, so that closing does not
/// reset the connection before the worker read the answer.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// How long closing a door waits for its connection threads to finish
/// counting, once their sockets are shut down. Only a thread still
/// resolving a name or connecting (neither can be interrupted) takes
/// longer; it finds the door closed when it is done and ends.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// How a door resolves a name to addresses (the system's resolver; tests
/// put their own names in its place).
pub(super) type Resolve = fn(&str, u16) -> io::Result<Vec<SocketAddr>>;

/// What each door allows itself (docs/confinement.md#network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections a door holds at once; more are answered 503.
    pub connections_per_door: usize,
    /// The longest request head read; longer is answered 431.
    pub head_bytes: usize,
    /// How long connecting to one address of a destination may take.
    pub connect_timeout: Duration,
    /// How long a worker has to send a whole request head; then 408.
    pub head_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections_per_door: 64,
            head_bytes: 16 * 1024,
            connect_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(30),
        }
    }
}

/// A run's egress proxy: one per exec, a [`Door`] per attempt. Dropping it
/// closes every door it opened that is still open.
pub struct Proxy {
    limits: Limits,
    resolve: Resolve,
    acceptor: Acceptor,
}

/// One attempt's way out: a port on 127.0.0.1 that lets through what its
/// [`Allow`] list names. Closing it (or dropping it) stops it at once; doors
/// are independent of one another.
pub struct Door {
    shared: Arc<Shared>,
    port: u16,
}

/// What a door's threads share.
pub(super) struct Shared {
    allow: Allow,
    limits: Limits,
    resolve: Resolve,
    record: Record,
    conns: Mutex<Conns>,
    /// Signalled whenever a connection ends.
    ended: Condvar,
    /// The door's listener, until it closes.
    pub(super) listener: Mutex<Option<TcpListener>>,
    /// Its number with the accept thread, and where it is registered.
    number: u64,
    registry: Weak<Registry>,
}

/// A door's open connections.
#[derive(Default)]
struct Conns {
    closed: bool,
    next_id: u64,
    /// Each connection's sockets (copies of them), to shut down on close.
    open: HashMap<u64, (Kind, Vec<TcpStream>)>,
    serving: usize,
    turning_away: usize,
}

/// What a connection thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Serving,
    /// Over the limit: reads the head and answers 503.
    TurningAway,
}

impl Proxy {
    /// A proxy with these limits, with no door yet. Each limit must be more
    /// than zero.
    pub fn start(limits: Limits) -> io::Result<Proxy> {
        Proxy::start_resolving(limits, system_resolve)
    }

    pub(super) fn start_resolving(limits: Limits, resolve: Resolve) -> io::Result<Proxy> {
        let zero = limits.connections_per_door == 0
            || limits.head_bytes == 0
            || limits.connect_timeout.is_zero()
            || limits.head_timeout.is_zero();
        if zero {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("every egress proxy limit must be more than zero: {limits:?}"),
            ));
        }
        Ok(Proxy {
            limits,
            resolve,
            acceptor: Acceptor::start()?,
        })
    }

    /// Opens a door for `allow`: a new listener on 127.0.0.1, on a port the
    /// kernel picks, served until the door closes.
    pub fn open(&self, allow: Allow) -> io::Result<Door> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let port = listener.local_addr()?.port();
        let number = self.acceptor.number();
        let shared = Arc::new(Shared {
            allow,
            limits: self.limits,
            resolve: self.resolve,
            record: Record::default(),
            conns: Mutex::new(Conns::default()),
            ended: Condvar::new(),
            listener: Mutex::new(Some(listener)),
            number,
            registry: Arc::downgrade(self.acceptor.registry()),
        });
        {
            let listener = lock(&shared.listener);
            let listener = listener.as_ref().expect("just put there");
            self.acceptor.add(number, &shared, listener)?;
        }
        Ok(Door { shared, port })
    }
}

impl Drop for Proxy {
    /// Closes every door still open; their records stay with them.
    fn drop(&mut self) {
        for door in self.acceptor.open_doors() {
            door.close();
        }
    }
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Door {
    /// The port on 127.0.0.1 the worker's proxy variables name.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes the door: when this returns its port no longer listens and
    /// every connection through it has been cut. Gives what the door
    /// recorded, the bytes of a transfer cut short included.
    pub fn close(self) -> Egress {
        self.shared.close();
        self.shared.record.snapshot()
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl fmt::Debug for Door {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Door")
            .field("port", &self.port)
            .field("allow", &self.shared.allow.describe())
            .finish()
    }
}

impl Shared {
    /// Stops accepting (the listener is closed when this returns), shuts
    /// down every connection and waits, a little, for their threads. A
    /// second call does nothing more.
    fn close(&self) {
        // Closing its one descriptor takes the listener out of the accept
        // thread's epoll set; the lock waits for an accept under way.
        drop(lock(&self.listener).take());
        if let Some(registry) = self.registry.upgrade() {
            lock(&registry).remove(&self.number);
        }
        let mut conns = lock(&self.conns);
        if conns.closed {
            return;
        }
        conns.closed = true;
        for (_, sockets) in conns.open.values() {
            for s in sockets {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let deadline = Instant::now() + CLOSE_WAIT;
        while !conns.open.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            conns = self
                .ended
                .wait_timeout(conns, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// A connection's place in its door: registers its sockets, and frees the
/// place when dropped, however the thread ends.
struct Slot {
    shared: Arc<Shared>,
    id: u64,
}

impl Slot {
    /// Registers one more socket of the connection, to be shut down if the
    /// door closes; `false` (and the socket shut down) if it already has.
    fn attach(&self, socket: &TcpStream) -> bool {
        let mut conns = lock(&self.shared.conns);
        let copy = socket.try_clone();
        match (conns.closed, copy, conns.open.get_mut(&self.id)) {
            (false, Ok(copy), Some((_, sockets))) => {
                sockets.push(copy);
                true
            }
            _ => {
                let _ = socket.shutdown(Shutdown::Both);
                false
            }
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut conns = lock(&self.shared.conns);
        if let Some((kind, _)) = conns.open.remove(&self.id) {
            match kind {
                Kind::Serving => conns.serving -= 1,
                Kind::TurningAway => conns.turning_away -= 1,
            }
        }
        self.shared.ended.notify_all();
    }
}

/// Gives a new connection its thread: serving it, or turning it away with
/// a 503 when the door is full (closing it unanswered when even the threads
/// that turn connections away are all busy).
pub(super) fn admit(shared: &Arc<Shared>, stream: TcpStream) {
    let Ok(copy) = stream.try_clone() else {
        return;
    };
    let _ = stream.set_nonblocking(false);
    let (id, kind) = {
        let mut conns = lock(&shared.conns);
        let kind = if conns.closed {
            return;
        } else if conns.serving < shared.limits.connections_per_door {
            conns.serving += 1;
            Kind::Serving
        } else if conns.turning_away < TURN_AWAY_AT_ONCE {
            conns.turning_away += 1;
            Kind::TurningAway
        } else {
            drop(conns);
            let _ = stream.set_nonblocking(true);
            let _ = send_all(
                &stream,
                &Reply::Busy(shared.limits.connections_per_door).to_bytes(),
            );
            return;
        };
        let id = conns.next_id;
        conns.next_id += 1;
        conns.open.insert(id, (kind, vec![copy]));
        (id, kind)
    };
    let slot = Slot {
        shared: Arc::clone(shared),
        id,
    };
    // If the thread cannot start, the closure (slot and stream with it) is
    // dropped: the place is freed and the connection closed.
    let _ = thread::Builder::new()
        .name("egress-conn".into())
        .stack_size(SERVE_STACK)
        .spawn(move || match kind {
            Kind::Serving => serve(&slot, stream),
            Kind::TurningAway => turn_away(&slot, stream),
        });
}

/// Serves one connection: reads its head, checks its destination, and
/// relays it there, or answers why not.
fn serve(slot: &Slot, mut client: TcpStream) {
    let shared = &slot.shared;
    let limits = &shared.limits;
    let mut buf = vec![0; limits.head_bytes.max(RELAY_BUFFER)];
    let (head, used, filled) = match read_head(&mut client, &mut buf, limits, limits.head_timeout) {
        Ok(read) => read,
        Err(reply) => return answer(client, reply),
    };
    let target = match head::target(&head) {
        Ok(t) => t,
        Err(reply) => return answer(client, reply),
    };
    let (host, port) = target.host_port();
    let upstream = match shared.allow.matches(host, port) {
        None => Err(Reply::NotAllowed {
            host: host.to_string(),
            port,
        }),
        Some(how) => open_upstream(shared, host, port, how),
    };
    let upstream = match upstream {
        Ok(u) => u,
        Err(reply) => {
            match reply.reason() {
                Some(reason) => shared.record.refused(host, port, reason),
                None => drop(shared.record.connection(host, port, true)),
            }
            return answer(client, reply);
        }
    };
    let counters = shared.record.connection(host, port, true);
    // The worker and the server chose where their writes end; holding a
    // small one back (Nagle) would only add a round trip's delay.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    if !slot.attach(&upstream) {
        return;
    }
    // What goes upstream first: a plain request's rewritten head, then
    // whatever the worker sent after its head.
    let mut first = match &target {
        Target::Tunnel { .. } => {
            if send_all(&client, ESTABLISHED).is_err() {
                return;
            }
            Vec::new()
        }
        Target::Forward {
            authority, path, ..
        } => head::origin_form(&head, authority, path),
    };
    first.extend_from_slice(&buf[used..filled]);
    relay(client, upstream, &counters, &first, buf);
}

/// Reads a request head into `buf` (within [`Limits::head_bytes`] and
/// `wait`): the head, its length, and how much of `buf` was filled (the
/// bytes past the head are the start of what follows it). `Err` holds the
/// answer to give; a worker that closed or reset before a whole head gets
/// one it will not read.
fn read_head(
    client: &mut TcpStream,
    buf: &mut [u8],
    limits: &Limits,
    wait: Duration,
) -> Result<(Head, usize, usize), Reply> {
    let deadline = Instant::now() + wait;
    let limit = limits.head_bytes;
    let mut filled = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || client.set_read_timeout(Some(left)).is_err() {
            return Err(Reply::HeadTimeout(wait));
        }
        match client.read(&mut buf[filled..limit]) {
            Ok(0) => return Err(Reply::Malformed("the connection closed mid-head".into())),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err(Reply::HeadTimeout(wait))
            }
            Err(e) => return Err(Reply::Malformed(e.to_string())),
        }
        match head::parse(&buf[..filled], limit) {
            Ok(Some((head, used))) => {
                let _ = client.set_read_timeout(None);
                return Ok((head, used, filled));
            }
            Ok(None) => {}
            Err(HeadError::TooBig) => return Err(Reply::HeadTooBig(limit)),
            Err(HeadError::Malformed(why)) => return Err(Reply::Malformed(why)),
        }
    }
}

/// Resolves `host` and connects to the first of its addresses that
/// answers. Under a wildcard rule, the addresses a wildcard may not lead to
/// are left out, and if nothing else is left the request is refused.
fn open_upstream(shared: &Shared, host: &str, port: u16, how: Match) -> Result<TcpStream, Reply> {
    let addrs = match (shared.resolve)(host, port) {
        Ok(addrs) if !addrs.is_empty() => addrs,
        Ok(_) => return Err(no_name(host, "it has no address")),
        Err(e) => return Err(no_name(host, e)),
    };
    let (usable, reserved): (Vec<SocketAddr>, Vec<SocketAddr>) = addrs
        .into_iter()
        .partition(|a| how == Match::Named || AddressClass::of(a.ip()).is_none());
    if usable.is_empty() {
        let ip = reserved[0].ip();
        return Err(Reply::Reserved {
            host: host.to_string(),
            port,
            ip,
            class: AddressClass::of(ip).unwrap_or(AddressClass::Loopback),
        });
    }
    let mut last = None;
    for addr in usable {
        match TcpStream::connect_timeout(&addr, shared.limits.connect_timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(format!("{addr}: {e}")),
        }
    }
    Err(Reply::NoConnect {
        host: host.to_string(),
        port,
        error: last.unwrap_or_default(),
    })
}

fn no_name(host: &str, error: impl fmt::Display) -> Reply {
    Reply::NoName {
        host: host.to_string(),
        error: error.to_string(),
    }
}

/// The system's resolver (`getaddrinfo`), which also takes IP literals.
fn system_resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    Ok((host, port).to_socket_addrs()?.collect())
}

/// Relays a connection both ways until each side has closed its half:
/// `first` goes to `upstream` before anything else (a rewritten head, the
/// bytes that followed the head). Counts bytes as they pass.
fn relay(
    client: TcpStream,
    upstream: TcpStream,
    counters: &Arc<Counters>,
    first: &[u8],
    mut buf: Vec<u8>,
) {
    if send_all(&upstream, first).is_err() {
        return;
    }
    counters
        .bytes_out
        .fetch_add(first.len() as u64, Ordering::Relaxed);
    let (Ok(client_back), Ok(upstream_back)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    let back = Arc::clone(counters);
    let inbound = thread::Builder::new()
        .name("egress-relay".into())
        .stack_size(SMALL_STACK)
        .spawn(move || {
            let mut buf = vec![0; RELAY_BUFFER];
            pump(&upstream_back, &client_back, &back.bytes_in, &mut buf);
        });
    let Ok(inbound) = inbound else {
        return;
    };
    pump(&client, &upstream, &counters.bytes_out, &mut buf);
    let _ = inbound.join();
}

/// Copies `from` to `to` until `from` ends, then closes `to`'s writing
/// half, so the other side sees the end and can still answer. If either
/// breaks, both are shut down, which ends the other direction too.
fn pump(mut from: &TcpStream, to: &TcpStream, count: &AtomicU64, buf: &mut [u8]) {
    loop {
        match from.read(buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => {
                if send_all(to, &buf[..n]).is_err() {
                    break;
                }
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// A connection over the door's limit: reads its head (briefly), records
/// where it wanted to go, and answers 503.
fn turn_away(slot: &Slot, mut client: TcpStream) {
    let shared = &slot.shared;
    let limit = shared.limits.connections_per_door;
    let mut buf = vec![0; shared.limits.head_bytes];
    let wait = shared.limits.head_timeout.min(TURN_AWAY_WAIT);
    if let Ok((head, ..)) = read_head(&mut client, &mut buf, &shared.limits, wait) {
        if let Ok(target) = head::target(&head) {
            let (host, port) = target.host_port();
            let reason = format!(
                "the worker already had {limit} connections open through its door, the most it may"
            );
            shared.record.refusal(host, port, reason);
        }
    }
    answer(client, Reply::Busy(limit));
}

/// Writes the proxy's answer and closes the connection gracefully: its
/// writing half first, then, after reading what the worker still sends
/// (within [`LINGER`]), the rest.
fn answer(mut client: TcpStream, reply: Reply) {
    if send_all(&client, &reply.to_bytes()).is_err() {
        return;
    }
    let _ = client.shutdown(Shutdown::Write);
    let _ = client.set_read_timeout(Some(LINGER));
    let deadline = Instant::now() + LINGER;
    let mut sink = [0; 4096];
    let mut read = 0;
    while read < LINGER_BYTES && Instant::now() < deadline {
        match client.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => read += n,
        }
    }
}

/// Writes all of `bytes` to `to`. With `MSG_NOSIGNAL`: a worker or server
/// that went away makes the write fail, and never raises SIGPIPE, whatever
/// the process does with that signal.
fn send_all(to: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        match rustix::net::send(to, bytes, SendFlags::NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Locks a mutex; one poisoned by a panicking thread still holds usable
/// state (counters, sockets to shut down), so carry on with it.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
