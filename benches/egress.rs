//! What a worker's egress proxy door adds to a request
//! (docs/confinement.md#network). On loopback, a tiny HTTP server answers
//! 2,000 sequential requests four ways: directly and through a door, each
//! on a new TCP connection per request (as a CLI that opens a fresh one),
//! and on one kept-alive connection (through the door: one CONNECT tunnel
//! carrying them all). Prints the median and 99th percentile per request
//! and what the door adds to each. Run with `cargo bench --bench egress`.

use okstra::egress::{Allow, Limits, Proxy};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

const ROUNDS: usize = 2000;
const REQUEST: &[u8] = b"GET /v1/ping HTTP/1.1\r\nHost: bench\r\n\r\n";
const RESPONSE: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

/// A server that answers every request of every connection with
/// [`RESPONSE`], a thread per connection.
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            thread::spawn(move || serve(conn));
        }
    });
    port
}

fn serve(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut buf = [0; 1024];
    let mut have = Vec::new();
    loop {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => have.extend_from_slice(&buf[..n]),
        }
        while let Some(end) = find(&have, b"\r\n\r\n") {
            have.drain(..end + 4);
            if conn.write_all(RESPONSE).is_err() {
                return;
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Reads as many bytes as `want` has, which must be `want`.
fn expect(conn: &mut TcpStream, want: &[u8]) -> io::Result<()> {
    let mut got = vec![0; want.len()];
    conn.read_exact(&mut got)?;
    assert_eq!(got, want, "unexpected answer");
    Ok(())
}

fn dial(port: u16) -> TcpStream {
    let conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_nodelay(true).unwrap();
    conn
}

/// One request on a new connection, through `door` with CONNECT if given.
fn fresh(server: u16, door: Option<u16>) {
    let mut conn = match door {
        None => dial(server),
        Some(door) => {
            let mut conn = dial(door);
            let connect = format!("CONNECT 127.0.0.1:{server} HTTP/1.1\r\n\r\n");
            conn.write_all(connect.as_bytes()).unwrap();
            expect(&mut conn, b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
            conn
        }
    };
    conn.write_all(REQUEST).unwrap();
    expect(&mut conn, RESPONSE).unwrap();
}

/// The time of each of [`ROUNDS`] runs of `f`, sorted.
fn timed(mut f: impl FnMut()) -> Vec<Duration> {
    for _ in 0..50 {
        f();
    }
    let mut times: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times
}

fn kept_alive(port: u16, connect_to: Option<u16>) -> Vec<Duration> {
    let mut conn = dial(port);
    if let Some(server) = connect_to {
        let connect = format!("CONNECT 127.0.0.1:{server} HTTP/1.1\r\n\r\n");
        conn.write_all(connect.as_bytes()).unwrap();
        expect(&mut conn, b"HTTP/1.1 200 Connection established\r\n\r\n").unwrap();
    }
    timed(|| {
        conn.write_all(REQUEST).unwrap();
        expect(&mut conn, RESPONSE).unwrap();
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(times: &[Duration], p: f64) -> Duration {
    times[((times.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let server = server();
    let proxy = Proxy::start(Limits::default()).unwrap();
    let allow = Allow::parse(&[format!("127.0.0.1:{server}")]).unwrap();
    let door = proxy.open(allow).unwrap();
    let port = door.port();

    let direct_fresh = timed(|| fresh(server, None));
    let door_fresh = timed(|| fresh(server, Some(port)));
    let direct_kept = kept_alive(server, None);
    let door_kept = kept_alive(port, Some(server));

    println!("{ROUNDS} sequential requests on loopback, per request (ms):");
    println!(
        "{:<40} {:>8} {:>8} {:>12} {:>12}",
        "", "median", "p99", "added med", "added p99"
    );
    let rows = [
        ("new connection each, direct", &direct_fresh, &direct_fresh),
        (
            "new connection each, door (CONNECT)",
            &door_fresh,
            &direct_fresh,
        ),
        ("kept alive, direct", &direct_kept, &direct_kept),
        (
            "kept alive, door (one CONNECT tunnel)",
            &door_kept,
            &direct_kept,
        ),
    ];
    for (name, times, base) in rows {
        let (med, p99) = (percentile(times, 0.5), percentile(times, 0.99));
        let added = |a: Duration, b: Duration| ms(a) - ms(b);
        println!(
            "{name:<40} {:>8.3} {:>8.3} {:>12.3} {:>12.3}",
            ms(med),
            ms(p99),
            added(med, percentile(base, 0.5)),
            added(p99, percentile(base, 0.99)),
        );
    }
    let record = door.close();
    let d = &record.destinations[0];
    println!(
        "door record: {}:{} {} connections, {} bytes out, {} bytes in",
        d.host, d.port, d.connections, d.bytes_out, d.bytes_in
    );
}
