//! The proxy end to end, with real sockets on 127.0.0.1: a worker's side
//! (the test), a door, and small upstream servers run by the test.
//! Timeouts here are guards against a hang, never what is asserted.

use super::proxy::{Limits, Proxy};
use super::*;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

const GUARD: Duration = Duration::from_secs(10);

fn allow(items: &[String]) -> Allow {
    Allow::parse(items).unwrap()
}

/// Names the tests resolve without DNS: two under `*.rebind.test` and one
/// named exactly, all on 127.0.0.1 (and one also on the metadata address);
/// one that does not resolve. Anything else goes to the system.
fn test_resolve(host: &str, port: u16) -> io::Result<Vec<SocketAddr>> {
    let local = SocketAddr::from(([127, 0, 0, 1], port));
    match host {
        "a.rebind.test" | "named.test" => Ok(vec![local]),
        "b.rebind.test" => Ok(vec![SocketAddr::from(([169, 254, 169, 254], port)), local]),
        "nowhere.test" => Err(io::Error::new(io::ErrorKind::NotFound, "no such name")),
        _ => Ok(std::net::ToSocketAddrs::to_socket_addrs(&(host, port))?.collect()),
    }
}

fn proxy(limits: Limits) -> Proxy {
    Proxy::start_resolving(limits, test_resolve).unwrap()
}

/// An upstream that echoes each of its next `n` connections until the
/// other side ends it, then ends its own half.
fn echo_server(n: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for _ in 0..n {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            thread::spawn(move || {
                let mut r = s.try_clone().unwrap();
                let _ = io::copy(&mut r, &mut s);
                let _ = s.shutdown(Shutdown::Write);
            });
        }
    });
    port
}

/// A port on 127.0.0.1 where nothing listens (just closed).
fn dead_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn dial(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    s.set_write_timeout(Some(GUARD)).unwrap();
    s
}

/// Reads up to the end of a head (`\r\n\r\n`), a byte at a time so that
/// nothing after it is taken.
fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!(
                "head cut short ({other:?}): {:?}",
                String::from_utf8_lossy(&head)
            ),
        }
    }
    String::from_utf8(head).unwrap()
}

fn read_rest(s: &mut TcpStream) -> String {
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

fn status(head: &str) -> u16 {
    head[9..12].parse().unwrap()
}

/// Sends `request` to the door and reads the answer's head.
fn ask(door: u16, request: &str) -> (TcpStream, String) {
    let mut s = dial(door);
    s.write_all(request.as_bytes()).unwrap();
    let head = read_head(&mut s);
    (s, head)
}

fn tunnel(door: u16, target: &str) -> (TcpStream, String) {
    ask(
        door,
        &format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n"),
    )
}

/// Sends `msg` through an open tunnel to an echo server and reads it back.
fn echo(s: &mut TcpStream, msg: &str) {
    s.write_all(msg.as_bytes()).unwrap();
    let mut back = vec![0; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg.as_bytes());
}

fn refused_to_connect(port: u16) -> bool {
    matches!(TcpStream::connect(("127.0.0.1", port)),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused)
}

fn dest(host: &str, port: u16, allowed: bool, connections: u64, out: u64, inn: u64) -> Destination {
    Destination {
        host: host.into(),
        port,
        allowed,
        connections,
        bytes_out: out,
        bytes_in: inn,
    }
}

#[test]
fn a_connect_tunnel_relays_both_ways_and_counts_the_bytes() {
    let up = echo_server(1);
    let p = proxy(Limits::default());
    let door = p.open(allow(&[format!("127.0.0.1:{up}")])).unwrap();
    // The first bytes of the tunnel come in the same write as the head.
    let (mut s, head) = ask(
        door.port(),
        &format!("CONNECT 127.0.0.1:{up} HTTP/1.1\r\n\r\nearly"),
    );
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    let mut early = [0; 5];
    s.read_exact(&mut early).unwrap();
    assert_eq!(&early, b"early");
    echo(&mut s, "hello");
    // Half-closed: the upstream still answers what came before the end.
    s.write_all(b"world!").unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    assert_eq!(read_rest(&mut s), "world!");
    let e = door.close();
    assert_eq!(e.destinations, [dest("127.0.0.1", up, true, 1, 16, 16)]);
    assert!(e.refusals.is_empty());
}

#[test]
fn a_host_not_in_the_list_is_refused_naming_the_rule_that_would_allow_it() {
    let p = proxy(Limits::default());
    let door = p.open(allow(&["allowed.test".into()])).unwrap();
    let (mut s, head) = tunnel(door.port(), "Example.COM.:443");
    assert_eq!(status(&head), 403, "{head}");
    assert!(head.contains("\r\nContent-Type: text/plain"), "{head}");
    let body = read_rest(&mut s);
    assert!(body.contains("egress to example.com:443 refused"), "{body}");
    assert!(
        body.contains(r#"network = { allow = ["example.com"] }"#),
        "{body}"
    );
    assert!(body.contains("docs/confinement.md#network"), "{body}");
    // A port other than 443 and 80 is part of the rule to add.
    let (mut s, head) = tunnel(door.port(), "allowed.test:8443");
    assert_eq!(status(&head), 403);
    assert!(read_rest(&mut s).contains(r#"allow = ["allowed.test:8443"]"#));
    let e = door.close();
    assert_eq!(
        e.destinations,
        [
            dest("allowed.test", 8443, false, 1, 0, 0),
            dest("example.com", 443, false, 1, 0, 0)
        ]
    );
    let refusal = |host: &str, port| Refusal {
        host: host.into(),
        port,
        reason: "not in this worker's allow list".into(),
    };
    assert_eq!(
        e.refusals,
        [refusal("example.com", 443), refusal("allowed.test", 8443)]
    );
}

/// A one-request HTTP server: sends back what it received (head and
/// `Content-Length` body) and answers `ok`.
fn http_server() -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(GUARD)).unwrap();
        let head = read_head(&mut s);
        let len = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |n| n.parse().unwrap());
        let mut body = vec![0; len];
        s.read_exact(&mut body).unwrap();
        tx.send(head + &String::from_utf8(body).unwrap()).unwrap();
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .unwrap();
    });
    (port, rx)
}

#[test]
fn an_absolute_http_request_goes_upstream_in_origin_form() {
    let (up, got) = http_server();
    let p = proxy(Limits::default());
    let door = p.open(allow(&[format!("127.0.0.1:{up}")])).unwrap();
    let request = format!(
        "POST http://127.0.0.1:{up}/v1/x?y=1 HTTP/1.1\r\nHost: wrong.test\r\n\
         Proxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\n\
         Connection: keep-alive\r\nUser-Agent: t/1\r\nContent-Length: 5\r\n\r\nhello"
    );
    let (mut s, head) = ask(door.port(), &request);
    let sent = got.recv_timeout(GUARD).unwrap();
    let want = format!(
        "POST /v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:{up}\r\nUser-Agent: t/1\r\n\
         Content-Length: 5\r\nConnection: close\r\n\r\nhello"
    );
    assert_eq!(sent, want);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert_eq!(read_rest(&mut s), "ok");
    let e = door.close();
    let answer = head.len() as u64 + 2;
    assert_eq!(
        e.destinations,
        [dest("127.0.0.1", up, true, 1, want.len() as u64, answer)]
    );
}

#[test]
fn a_wildcard_may_not_lead_to_a_loopback_address_but_a_named_rule_may() {
    let up = echo_server(1);
    let p = proxy(Limits::default());
    let door = p
        .open(allow(&[
            format!("*.rebind.test:{up}"),
            format!("named.test:{up}"),
        ]))
        .unwrap();
    let (mut s, head) = tunnel(door.port(), &format!("a.rebind.test:{up}"));
    assert_eq!(status(&head), 403, "{head}");
    let body = read_rest(&mut s);
    assert!(
        body.contains("resolved to 127.0.0.1, a loopback address"),
        "{body}"
    );
    assert!(
        body.contains(&format!(r#"allow = ["a.rebind.test:{up}"]"#)),
        "{body}"
    );
    // Every address it has is one a wildcard may not reach.
    let (mut s, head) = tunnel(door.port(), &format!("b.rebind.test:{up}"));
    assert_eq!(status(&head), 403, "{head}");
    assert!(read_rest(&mut s).contains("169.254.169.254, a cloud metadata address"));
    let (mut s, head) = tunnel(door.port(), &format!("named.test:{up}"));
    assert_eq!(status(&head), 200, "{head}");
    echo(&mut s, "through");
    drop(s);
    let e = door.close();
    let hosts: Vec<_> = e
        .destinations
        .iter()
        .map(|d| (d.host.as_str(), d.allowed))
        .collect();
    assert_eq!(
        hosts,
        [
            ("a.rebind.test", false),
            ("b.rebind.test", false),
            ("named.test", true)
        ]
    );
    assert_eq!(e.refusals.len(), 2);
    assert!(e.refusals[0].reason.contains("a loopback address"));
    assert!(e.refusals[0]
        .reason
        .contains("only a rule naming the host exactly"));
}

#[test]
fn heads_that_are_not_proxy_requests_are_answered_400() {
    let p = proxy(Limits::default());
    let door = p.open(allow(&["a.test".into()])).unwrap();
    let cases = [
        ("GARBAGE\r\n\r\n", "could not read this request"),
        (
            "GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n",
            "this is an HTTP proxy",
        ),
        ("GET https://a.test/ HTTP/1.1\r\n\r\n", "with CONNECT"),
        ("CONNECT a.test HTTP/1.1\r\n\r\n", "needs a port"),
    ];
    for (request, says) in cases {
        let (mut s, head) = ask(door.port(), request);
        assert_eq!(status(&head), 400, "{request:?}: {head}");
        let body = read_rest(&mut s);
        assert!(body.contains(says), "{request:?}: {body}");
    }
    // None of them is a destination.
    assert_eq!(door.close(), Egress::default());
}

#[test]
fn an_oversize_head_is_answered_431_and_a_slow_one_408() {
    let limits = Limits {
        head_bytes: 1024,
        head_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let p = proxy(limits);
    let door = p.open(allow(&["a.test".into()])).unwrap();
    let big = format!(
        "CONNECT a.test:443 HTTP/1.1\r\nX: {}\r\n\r\n",
        "y".repeat(4000)
    );
    let (mut s, head) = ask(door.port(), &big);
    assert_eq!(status(&head), 431, "{head}");
    assert!(read_rest(&mut s).contains("over 1024 bytes"));
    let many = format!(
        "CONNECT a.test:443 HTTP/1.1\r\n{}\r\n",
        "X: y\r\n".repeat(120)
    );
    let (_, head) = ask(door.port(), &many);
    assert_eq!(status(&head), 431, "{head}");
    // Half a head, then nothing: answered once the head's time is up.
    let (mut s, head) = ask(door.port(), "CONNECT a.test:443 HTTP/1.1\r\n");
    assert_eq!(status(&head), 408, "{head}");
    assert!(read_rest(&mut s).contains("did not arrive within 0.3 s"));
}

#[test]
fn unresolvable_and_unreachable_destinations_are_answered_502() {
    let dead = dead_port();
    let p = proxy(Limits::default());
    let door = p
        .open(allow(&["nowhere.test".into(), format!("127.0.0.1:{dead}")]))
        .unwrap();
    let (mut s, head) = tunnel(door.port(), "nowhere.test:443");
    assert_eq!(status(&head), 502, "{head}");
    assert!(read_rest(&mut s).contains("could not resolve nowhere.test: no such name"));
    let (mut s, head) = ask(
        door.port(),
        &format!("GET http://127.0.0.1:{dead}/ HTTP/1.1\r\n\r\n"),
    );
    assert_eq!(status(&head), 502, "{head}");
    assert!(read_rest(&mut s).contains(&format!("could not connect to 127.0.0.1:{dead}")));
    let e = door.close();
    assert_eq!(
        e.destinations,
        [
            dest("127.0.0.1", dead, true, 1, 0, 0),
            dest("nowhere.test", 443, true, 1, 0, 0)
        ]
    );
    assert!(e.refusals.is_empty());
}

#[test]
fn a_door_over_its_connection_limit_answers_503_while_others_serve() {
    let up = echo_server(5);
    let p = proxy(Limits {
        connections_per_door: 2,
        ..Limits::default()
    });
    let rule = allow(&[format!("127.0.0.1:{up}")]);
    let full = p.open(rule.clone()).unwrap();
    let other = p.open(rule).unwrap();
    let target = format!("127.0.0.1:{up}");
    let (mut first, head) = tunnel(full.port(), &target);
    assert_eq!(status(&head), 200);
    let (mut second, head) = tunnel(full.port(), &target);
    assert_eq!(status(&head), 200);
    for _ in 0..3 {
        let (mut s, head) = tunnel(full.port(), &target);
        assert_eq!(status(&head), 503, "{head}");
        let body = read_rest(&mut s);
        assert!(body.contains("already has 2 connections open"), "{body}");
        assert!(body.contains("connection limit was reached"), "{body}");
    }
    // The tunnels already open, and another door, are not affected.
    echo(&mut first, "one");
    echo(&mut second, "two");
    let (mut s, head) = tunnel(other.port(), &target);
    assert_eq!(status(&head), 200);
    echo(&mut s, "other door");
    // Once a tunnel ends, its place is free again.
    drop(first);
    let deadline = Instant::now() + GUARD;
    let mut again = loop {
        let (s, head) = tunnel(full.port(), &target);
        if status(&head) == 200 {
            break s;
        }
        assert!(Instant::now() < deadline, "no place freed: {head}");
        thread::sleep(Duration::from_millis(20));
    };
    echo(&mut again, "again");
    let e = full.close();
    assert_eq!(e.destinations.len(), 1);
    assert!(e.destinations[0].connections >= 3);
    assert!(e.refusals.len() >= 3);
    assert!(e.refusals[0].reason.contains("already had 2 connections"));
}

#[test]
fn closing_a_door_stops_its_port_and_cuts_its_tunnels_only() {
    let up = echo_server(2);
    let p = proxy(Limits::default());
    let rule = allow(&[format!("127.0.0.1:{up}")]);
    let door = p.open(rule.clone()).unwrap();
    let other = p.open(rule).unwrap();
    let port = door.port();
    let target = format!("127.0.0.1:{up}");
    let (mut live, _) = tunnel(port, &target);
    echo(&mut live, "ping");
    let (mut kept, _) = tunnel(other.port(), &target);
    let e = door.close();
    // What passed before the close is in the record.
    assert_eq!(e.destinations, [dest("127.0.0.1", up, true, 1, 4, 4)]);
    assert!(refused_to_connect(port));
    let mut byte = [0];
    match live.read(&mut byte) {
        Ok(0) => {}
        Err(e) => assert!(
            !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "the tunnel was left open: {e}"
        ),
        Ok(_) => panic!("the tunnel still carried data"),
    }
    echo(&mut kept, "still here");
}

#[test]
fn dropping_the_proxy_closes_every_door() {
    let up = echo_server(1);
    let p = proxy(Limits::default());
    let a = p.open(allow(&[format!("127.0.0.1:{up}")])).unwrap();
    let b = p.open(Allow::default()).unwrap();
    let (mut live, _) = tunnel(a.port(), &format!("127.0.0.1:{up}"));
    echo(&mut live, "x");
    drop(p);
    assert!(refused_to_connect(a.port()));
    assert!(refused_to_connect(b.port()));
    assert_eq!(live.read(&mut [0]).unwrap_or(0), 0);
    // The doors still give their records.
    assert_eq!(a.close().destinations[0].bytes_out, 1);
    assert_eq!(b.close(), Egress::default());
}

#[test]
fn an_empty_allow_list_refuses_everything() {
    let p = proxy(Limits::default());
    let door = p.open(Allow::default()).unwrap();
    let (_, head) = tunnel(door.port(), "127.0.0.1:443");
    assert_eq!(status(&head), 403);
    let (_, head) = ask(door.port(), "GET http://a.test/ HTTP/1.1\r\n\r\n");
    assert_eq!(status(&head), 403);
    assert_eq!(door.close().refusals.len(), 2);
}

#[test]
fn limits_must_be_more_than_zero() {
    let zero = [
        Limits {
            connections_per_door: 0,
            ..Limits::default()
        },
        Limits {
            head_bytes: 0,
            ..Limits::default()
        },
        Limits {
            connect_timeout: Duration::ZERO,
            ..Limits::default()
        },
        Limits {
            head_timeout: Duration::ZERO,
            ..Limits::default()
        },
    ];
    for limits in zero {
        let e = Proxy::start(limits).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
    assert!(Proxy::start(Limits::default()).is_ok());
}

#[test]
fn the_proxy_and_its_doors_may_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<Proxy>();
    shared::<Door>();
    shared::<Egress>();
}
