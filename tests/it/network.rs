//! Read and network confinement end to end (docs/confinement.md#reads,
//! docs/confinement.md#network): a confined `command` worker, run by
//! `okstra plan` + `okstra exec`, tries each way a talked-into-it agent
//! would leak: reading the user's keys and another project, connecting
//! straight to a local service, asking the proxy for a host it does not
//! allow, a UDP datagram, a DNS query, a raw socket, io_uring, another
//! service's unix socket. Each fails in the worker, and the test's own
//! listeners show nothing reached them; the proxy's refusal is on the
//! dispatch row and in the events log. The near misses pass: the project,
//! `/usr`, an allowed host through the proxy, git, python, cc and make.
//!
//! Workers report in their own result file, one line per try. Skipped,
//! saying so, on a kernel without Landlock ABI 6 (required in CI).

use crate::common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counts connections to a TCP listener, answering each with a small
/// HTTP response (the "allowed host" and the "local service").
fn http_listener(body: &'static str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, count)
}

/// A UDP socket on 127.0.0.1 that counts datagrams (the "listener" and the
/// "DNS resolver stub").
fn udp_listener() -> (u16, Arc<AtomicUsize>) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        while socket.recv_from(&mut buf).is_ok() {
            seen.fetch_add(1, Ordering::SeqCst);
        }
    });
    (port, count)
}

/// `python3 -c` of the system's python (a version manager's shim reads a
/// home the test does not give the worker).
fn py(code: &str) -> String {
    format!("/usr/bin/python3 -c \"{code}\"")
}

/// The tries of the adversarial worker, given the ports and paths it aims at.
struct Targets {
    direct: u16,
    allowed: u16,
    udp: u16,
    dns: u16,
    sibling: String,
    socket: String,
}

fn hostile_script(t: &Targets) -> String {
    let dns_query = "b'\\\\x12\\\\x34\\\\x01\\\\x00\\\\x00\\\\x01\\\\x00\\\\x00\\\\x00\\\\x00\\\\x00\\\\x00\\\\x07example\\\\x03com\\\\x00\\\\x00\\\\x01\\\\x00\\\\x01'";
    let tries = [
        ("read_ssh", "cat \"$HOME/.ssh/id_ed25519\"".to_string()),
        ("read_aws", "cat \"$HOME/.aws/credentials\"".to_string()),
        ("read_sibling", format!("cat \"{}\"", t.sibling)),
        ("list_home", "ls \"$HOME\"".to_string()),
        (
            "direct_curl",
            format!("curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{}/", t.direct),
        ),
        (
            "direct_python",
            py(&format!(
                "import socket; socket.create_connection(('127.0.0.1', {}), timeout=5)",
                t.direct
            )),
        ),
        (
            "proxy_refused",
            "curl -sS --max-time 10 -o /dev/stdout -w ' status=%{http_code}' http://blocked.example/secret; exit 1".to_string(),
        ),
        (
            "udp",
            py(&format!(
                "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b'leak', ('127.0.0.1', {}))",
                t.udp
            )),
        ),
        (
            "dns",
            py(&format!(
                "import socket; s=socket.socket(socket.AF_INET6 if False else socket.AF_INET, socket.SOCK_DGRAM); s.sendto({dns_query}, ('127.0.0.1', {}))",
                t.dns
            )),
        ),
        (
            "raw",
            py("import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)"),
        ),
        (
            "io_uring",
            py("import ctypes, os, sys; libc=ctypes.CDLL(None, use_errno=True); p=ctypes.create_string_buffer(120); r=libc.syscall(425, 4, p); e=ctypes.get_errno(); print(os.strerror(e) if r < 0 else 'ring made'); sys.exit(1 if r < 0 else 0)"),
        ),
        (
            "unix_other",
            py(&format!(
                "import socket; s=socket.socket(socket.AF_UNIX); s.connect('{}')",
                t.socket
            )),
        ),
        ("read_project", "cat README.md".to_string()),
        ("read_usr", "ls /usr/bin | head -1 && cat /etc/hostname >/dev/null".to_string()),
        (
            "proxy_allowed",
            format!("curl -sS --max-time 10 -f http://127.0.0.1:{}/hello", t.allowed),
        ),
        ("python", py("print(6 * 7)")),
        (
            "git",
            "D=\"$(dirname \"$OKSTRA_RESULT_PATH\")/repo\" && git init -q \"$D\" && cd \"$D\" && echo x > f && git add f && git -c user.name=w -c user.email=w@example.com commit -qm one && git status --short && git log --oneline | wc -l".to_string(),
        ),
        (
            "cc_make",
            "D=\"$(dirname \"$OKSTRA_RESULT_PATH\")/build\" && mkdir -p \"$D\" && cd \"$D\" && printf 'int main(void){return 0;}\\n' > m.c && printf 'm: m.c\\n\\tcc -o m m.c\\n' > Makefile && make -s && ./m && echo built".to_string(),
        ),
    ];
    tries
        .iter()
        .map(|(name, cmd)| format!("t {name} '{}'\n", cmd.replace('\'', "'\\''")))
        .collect()
}

#[test]
fn a_confined_worker_cannot_read_secrets_nor_reach_the_network_but_its_near_misses_pass() {
    if !landlock_here() {
        return;
    }
    let (direct, direct_hits) = http_listener("local service\n");
    let (allowed, allowed_hits) = http_listener("hello from the allowed host\n");
    let (udp, udp_hits) = udp_listener();
    let (dns, dns_hits) = udp_listener();
    let fx = Fx::new();
    fx.v1();
    fx.p.write("README.md", "readme\n");
    fx.home_file(".ssh/id_ed25519", "PRIVATE KEY\n");
    fx.home_file(".aws/credentials", "[default]\naws_secret_access_key = x\n");
    let sibling = fx.outside("sibling").join("notes.txt");
    std::fs::write(&sibling, "another project\n").unwrap();
    let socket_path = fx.outside("service").join("svc.sock");
    let unix = UnixListener::bind(&socket_path).unwrap();
    unix.set_nonblocking(true).unwrap();
    let targets = Targets {
        direct,
        allowed,
        udp,
        dns,
        sibling: sibling.display().to_string(),
        socket: socket_path.display().to_string(),
    };
    fx.commands()
        .defaults("confinement = \"required\"")
        .worker_env("HOME", fx.home())
        .worker_env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .prelude(TRY_PRELUDE);
    fx.stage(
        "only",
        [job("h", hostile_script(&targets))
            .implementer(&["results/h/**"])
            .with(&format!(
                "network = {{ allow = [\"127.0.0.1:{allowed}\"] }}"
            ))
            .result("results/h/out.md")],
    );
    fx.plan();
    let run = fx.exec(&["--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let o = tries(&fx, "h");

    assert_try_refused(&o, "read_ssh", "Permission denied");
    assert_try_refused(&o, "read_aws", "Permission denied");
    assert_try_refused(&o, "read_sibling", "Permission denied");
    assert_try_refused(&o, "list_home", "Permission denied");
    assert_try_refused(&o, "direct_curl", "");
    assert_try_refused(&o, "direct_python", "Permission denied");
    assert_try_refused(&o, "proxy_refused", "status=403");
    // The 403 names the host and the spec key that would allow it.
    assert_try_refused(&o, "proxy_refused", "blocked.example");
    assert_try_refused(&o, "proxy_refused", "network = { allow");
    assert_try_refused(&o, "udp", "Permission denied");
    assert_try_refused(&o, "dns", "Permission denied");
    assert_try_refused(&o, "raw", "Permission denied");
    assert_try_refused(&o, "io_uring", "Permission denied");
    assert_try_refused(&o, "unix_other", "Permission denied");

    assert_try_allowed(&o, "read_project", "readme");
    assert_try_allowed(&o, "read_usr", "");
    assert_try_allowed(&o, "proxy_allowed", "hello from the allowed host");
    assert_try_allowed(&o, "python", "42");
    assert_try_allowed(&o, "git", "1");
    assert_try_allowed(&o, "cc_make", "built");

    // Nothing reached the test's listeners but through the proxy.
    assert_eq!(direct_hits.load(Ordering::SeqCst), 0, "direct TCP arrived");
    assert_eq!(
        allowed_hits.load(Ordering::SeqCst),
        1,
        "the allowed request"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(udp_hits.load(Ordering::SeqCst), 0, "a datagram arrived");
    assert_eq!(dns_hits.load(Ordering::SeqCst), 0, "a DNS query arrived");
    assert!(unix.accept().is_err(), "the unix socket was reached");

    // The egress record: the allowed destination with its bytes, the
    // refused one, and the refusal as an event.
    let row = fx.dispatch_rows("h").pop().expect("a dispatch row");
    let egress = row["egress"].as_array().expect("egress on the row");
    let find = |host: &str| -> &Value {
        egress
            .iter()
            .find(|d| d["host"] == host)
            .unwrap_or_else(|| panic!("no {host} in {egress:?}"))
    };
    let ok = find("127.0.0.1");
    assert_eq!(ok["port"], allowed);
    assert_eq!(ok["allowed"], true);
    assert_eq!(ok["connections"], 1);
    assert!(ok["bytesOut"].as_u64().unwrap() > 0, "{ok}");
    assert!(ok["bytesIn"].as_u64().unwrap() > 0, "{ok}");
    let refused = find("blocked.example");
    assert_eq!(refused["allowed"], false);
    assert_eq!(refused["port"], 80);
    let events = fx.events_of("egress-refused", "h");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["host"], "blocked.example");
    // And `okstra status` says so.
    let status = fx.okstra(&["status", "--manifest", "run/run-manifest.json"]);
    assert!(
        status.stdout.contains("blocked.example:80"),
        "{}",
        status.stdout
    );
}

#[test]
fn network_none_allows_no_connection_and_open_allows_any() {
    if !landlock_here() {
        return;
    }
    let (port, hits) = http_listener("local service\n");
    let fx = Fx::new();
    fx.v1();
    fx.commands()
        .defaults("confinement = \"required\"")
        .worker_env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .prelude(TRY_PRELUDE);
    let try_it =
        format!("t direct 'curl -sS --max-time 5 --noproxy \"*\" http://127.0.0.1:{port}/'\n");
    fx.stage(
        "only",
        [
            job("none", try_it.as_str())
                .with("network = \"none\"")
                .result("results/none/out.md"),
            job("open", try_it.as_str())
                .with("network = \"open\"")
                .result("results/open/out.md"),
        ],
    );
    fx.plan();
    let run = fx.exec(&["--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_try_refused(&tries(&fx, "none"), "direct", "");
    assert_try_allowed(&tries(&fx, "open"), "direct", "local service");
    assert_eq!(hits.load(Ordering::SeqCst), 1, "only the open worker's");
}

#[test]
fn required_with_a_confined_network_is_refused_where_the_kernel_has_no_seccomp() {
    if !landlock_here() {
        return;
    }
    let fx = Fx::new();
    fx.v1();
    fx.commands()
        .defaults("confinement = \"required\"")
        .prelude(TRY_PRELUDE);
    fx.stage("only", [job("w", "t x true\n").result("results/w/out.md")]);
    fx.plan();
    let mut cmd = fx.command(&["exec", "plan.json", "--format", "json"]);
    cmd.env(okstra::confine::seccomp::SIMULATE_UNAVAILABLE_ENV, "1");
    let refused = run(cmd);
    assert_eq!(refused.code, 3, "{}\n{}", refused.stdout, refused.stderr);
    assert!(
        refused.stdout.contains("exec/confinement-unavailable"),
        "{}",
        refused.stdout
    );
    assert!(refused.stdout.contains("seccomp"), "{}", refused.stdout);
    assert!(!fx.p.exists("results/w/out.md"), "nothing ran");

    // `auto` there runs the job with an open network, and says so on its
    // row.
    fx.p.write(
        "spec.toml",
        &fx.p
            .read("spec.toml")
            .replace("confinement = \"required\"", "confinement = \"auto\""),
    );
    fx.plan();
    let mut cmd = fx.command(&["exec", "plan.json", "--format", "json"]);
    cmd.env(okstra::confine::seccomp::SIMULATE_UNAVAILABLE_ENV, "1");
    let ran = run(cmd);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let row = fx.dispatch_rows("w").pop().expect("a row");
    assert_eq!(row["network"], "open", "{row}");
    assert_ne!(row["confinement"], "none", "{row}");
    fx.p.write(
        "spec.toml",
        &fx.p
            .read("spec.toml")
            .replace("confinement = \"auto\"", "confinement = \"required\""),
    );

    // Its near miss: `network = "open"` needs no seccomp, and runs.
    fx.p.write(
        "spec.toml",
        &fx.p.read("spec.toml").replace(
            "confinement = \"required\"",
            "confinement = \"required\"\nnetwork = \"open\"",
        ),
    );
    fx.plan();
    let mut cmd = fx.command(&["exec", "plan.json", "--format", "json"]);
    cmd.env(okstra::confine::seccomp::SIMULATE_UNAVAILABLE_ENV, "1");
    let ran = run(cmd);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
}

/// Opens 100 tunnels through the door at once: how many the proxy let
/// through and how many it turned away; then, with them closed, one more.
const FLOOD: &str = r#"import os, socket, sys
door = int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])
target = sys.argv[1]
held, statuses = [], []
for _ in range(100):
    s = socket.create_connection(("127.0.0.1", door), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    held.append(s)
for s in held:
    try:
        line = s.recv(64).split(b"\r\n")[0].decode()
    except OSError as e:
        line = "reset " + str(e)
    statuses.append(line.split(" ")[1] if line.startswith("HTTP/") else "closed")
print("200=%d 503=%d other=%d" % (statuses.count("200"), statuses.count("503"),
      len(statuses) - statuses.count("200") - statuses.count("503")))
for s in held:
    s.close()
"#;

#[test]
fn a_flood_is_bounded_per_worker_and_a_killed_exec_leaves_nothing_listening() {
    if !landlock_here() {
        return;
    }
    let (allowed, _) = http_listener("after the flood\n");
    let fx = Fx::new();
    fx.v1();
    fx.p.write("flood.py", FLOOD);
    fx.commands()
        .defaults("confinement = \"required\"")
        .worker_env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .prelude(TRY_PRELUDE);
    let script = format!(
        "t flood '/usr/bin/python3 flood.py 127.0.0.1:{allowed}'\n\
         t after 'curl -sS --max-time 10 -f http://127.0.0.1:{allowed}/'\n\
         echo \"$HTTPS_PROXY\" > results/f/door.txt\n\
         sleep 5\n"
    );
    fx.stage(
        "only",
        [job("f", script)
            .implementer(&["results/f/**"])
            .with(&format!(
                "network = {{ allow = [\"127.0.0.1:{allowed}\"] }}"
            ))
            .result("results/f/out.md")],
    );
    fx.plan();
    let mut exec = fx.spawn_exec(&[]);
    let door = fx.p.path("results/f/door.txt");
    wait_for("the worker's door", 60, || {
        std::fs::read_to_string(&door).is_ok_and(|d| d.ends_with('\n'))
    });
    let o = tries(&fx, "f");
    // 64 tunnels a worker at once; the rest turned away, the proxy intact.
    assert_try_allowed(&o, "flood", "200=64 503=36 other=0");
    assert_try_allowed(&o, "after", "after the flood");
    let url = std::fs::read_to_string(&door).unwrap();
    let port: u16 = url.trim().rsplit(':').next().unwrap().parse().unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
    // exec killed: its doors die with it, though the worker lives on (no
    // door was handed down to it).
    exec.kill().unwrap();
    exec.wait().unwrap();
    let refused = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(
        refused.is_err(),
        "port {port} still listens after exec died"
    );
}
