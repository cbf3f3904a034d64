//! The HTTP side of a door: reading a request head, telling what it asks
//! for, rewriting a plain HTTP request for its server, and the proxy's own
//! answers (docs/confinement.md#network). All of it pure, on bytes.

use super::rules::{self, AddressClass, HostPart};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

/// The most header lines a request head may have; more is answered 431,
/// as a head over the byte limit is.
const MAX_HEADERS: usize = 100;

/// Headers that concern one connection, not the request: the proxy drops
/// them when it forwards a plain HTTP request, and adds its own
/// `Connection: close` (RFC 9110, section 7.6.1). `Upgrade` goes too: the
/// proxy relays bytes, it does not switch protocols.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "te",
    "trailer",
    "upgrade",
];

/// Headers a `Connection` header may not make the proxy drop: the ones
/// that say where the request goes and where its body ends.
const KEPT: [&str; 3] = ["host", "content-length", "transfer-encoding"];

/// A request head, copied out of the bytes it was parsed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) method: String,
    pub(super) target: String,
    /// The `1` of `HTTP/1.1`.
    pub(super) minor: u8,
    pub(super) headers: Vec<(String, Vec<u8>)>,
}

/// Why the bytes read so far are no request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HeadError {
    /// Longer than the limit, or more than [`MAX_HEADERS`] lines.
    TooBig,
    /// Not HTTP/1.x; the parser's word for why.
    Malformed(String),
}

/// Parses the head at the start of `bytes`, `limit` bytes at most: the head
/// and its length, or `None` while it is incomplete and within the limit.
pub(super) fn parse(bytes: &[u8], limit: usize) -> Result<Option<(Head, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(bytes) {
        Ok(httparse::Status::Complete(len)) if len <= limit => {
            let head = Head {
                method: req.method.unwrap_or_default().to_string(),
                target: req.path.unwrap_or_default().to_string(),
                minor: req.version.unwrap_or(1),
                headers: req
                    .headers
                    .iter()
                    .map(|h| (h.name.to_string(), h.value.to_vec()))
                    .collect(),
            };
            Ok(Some((head, len)))
        }
        Ok(httparse::Status::Complete(_)) => Err(HeadError::TooBig),
        Ok(httparse::Status::Partial) if bytes.len() >= limit => Err(HeadError::TooBig),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooBig),
        Err(e) => Err(HeadError::Malformed(e.to_string())),
    }
}

/// Where a request goes, as the proxy serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// `CONNECT host:port`: a tunnel.
    Tunnel { host: String, port: u16 },
    /// `GET http://host[:port]/path`: one plain HTTP exchange, sent on in
    /// origin form (`GET /path`) with `Host: authority`.
    Forward {
        host: String,
        port: u16,
        authority: String,
        path: String,
    },
}

impl Target {
    /// The host (normalised as rules compare it) and port.
    pub(super) fn host_port(&self) -> (&str, u16) {
        match self {
            Target::Tunnel { host, port } | Target::Forward { host, port, .. } => (host, *port),
        }
    }
}

/// What a request head asks the proxy for, or the 400 it gets.
pub(super) fn target(head: &Head) -> Result<Target, Reply> {
    if head.method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = authority(&head.target, None)?;
        return Ok(Target::Tunnel { host, port });
    }
    let t = head.target.as_str();
    let scheme = t.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme.as_deref() {
        Some("http") => {}
        Some("https") => return Err(Reply::HttpsUrl),
        _ if t.starts_with('/') || t == "*" => return Err(Reply::NotAProxyRequest(t.into())),
        _ => return Err(Reply::BadTarget(t.into(), "not an absolute http:// URL")),
    }
    let rest = &t[t.find("://").map_or(0, |i| i + 3)..];
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (auth, path) = rest.split_at(end);
    let (host, port) = authority(auth, Some(80))?;
    let path = match path.strip_prefix('?') {
        Some(_) => format!("/{path}"),
        None if path.is_empty() => "/".to_string(),
        None => path.to_string(),
    };
    Ok(Target::Forward {
        host,
        port,
        authority: auth.to_string(),
        path,
    })
}

/// The host (normalised) and port of `auth`, a CONNECT target or a URL's
/// authority; `default_port` `None` where the port is required.
fn authority(auth: &str, default_port: Option<u16>) -> Result<(String, u16), Reply> {
    let bad = |why| Reply::BadTarget(auth.to_string(), why);
    if auth.contains('@') {
        return Err(bad("user information does not belong in it"));
    }
    let (host, port) = rules::split_host_port(auth).map_err(|_| bad("not host:port"))?;
    let port = match (port, default_port) {
        (Some(p), _) if !p.is_empty() => {
            rules::parse_port(p).map_err(|_| bad("the port is not 1 to 65535"))?
        }
        (_, Some(d)) => d,
        (_, None) => return Err(bad("a CONNECT target needs a port (host:443)")),
    };
    let host = match host {
        HostPart::Bracketed(h) => h,
        HostPart::Plain(h) => h,
    };
    if host.parse::<IpAddr>().is_err() && rules::check_name(host).is_err() {
        return Err(bad("its host is not a host name or address"));
    }
    Ok((rules::normalise_host(host), port))
}

/// The head of a plain HTTP request as its server gets it: origin form,
/// `Host` from the URL, the hop-by-hop and proxy headers (and any the
/// `Connection` header names) left out, `Connection: close` at the end so
/// the server ends the exchange and the worker opens a new connection for
/// its next request.
pub(super) fn origin_form(head: &Head, authority: &str, path: &str) -> Vec<u8> {
    let named = connection_options(head);
    let mut out = format!("{} {path} HTTP/1.{}\r\n", head.method, head.minor).into_bytes();
    out.extend_from_slice(format!("Host: {authority}\r\n").as_bytes());
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if lower == "host" || HOP_BY_HOP.contains(&lower.as_str()) || named.contains(&lower) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// The header names the `Connection` (or `Proxy-Connection`) headers list,
/// in lower case: hop-by-hop too, except those in [`KEPT`].
fn connection_options(head: &Head) -> Vec<String> {
    let mut names = Vec::new();
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        if lower != "connection" && lower != "proxy-connection" {
            continue;
        }
        for token in String::from_utf8_lossy(value).split(',') {
            let token = token.trim().to_ascii_lowercase();
            if !token.is_empty() && !KEPT.contains(&token.as_str()) {
                names.push(token);
            }
        }
    }
    names
}

/// The answer to a CONNECT the proxy let through.
pub(super) const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";

/// The proxy's own answers, each a short text for the worker (or the
/// agent reading its tool's output) saying what happened and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reply {
    /// 400: the head is not HTTP.
    Malformed(String),
    /// 400: the target is not one the proxy can serve.
    BadTarget(String, &'static str),
    /// 400: `GET /path`, as to a web server.
    NotAProxyRequest(String),
    /// 400: `GET https://...`, which needs a tunnel.
    HttpsUrl,
    /// 408: the head did not arrive in time.
    HeadTimeout(Duration),
    /// 431: the head is over the limit.
    HeadTooBig(usize),
    /// 403: not in the allow list.
    NotAllowed { host: String, port: u16 },
    /// 403: allowed by a wildcard, but it resolved to an address only a
    /// named rule may reach.
    Reserved {
        host: String,
        port: u16,
        ip: IpAddr,
        class: AddressClass,
    },
    /// 503: the door already holds as many connections as it may.
    Busy(usize),
    /// 502: the name did not resolve.
    NoName { host: String, error: String },
    /// 502: no address of it accepted a connection.
    NoConnect {
        host: String,
        port: u16,
        error: String,
    },
}

impl Reply {
    /// The status code.
    pub(super) fn status(&self) -> u16 {
        match self {
            Reply::Malformed(_)
            | Reply::BadTarget(..)
            | Reply::NotAProxyRequest(_)
            | Reply::HttpsUrl => 400,
            Reply::HeadTimeout(_) => 408,
            Reply::HeadTooBig(_) => 431,
            Reply::NotAllowed { .. } | Reply::Reserved { .. } => 403,
            Reply::Busy(_) => 503,
            Reply::NoName { .. } | Reply::NoConnect { .. } => 502,
        }
    }

    /// For a refusal, the one sentence the record keeps as its reason.
    pub(super) fn reason(&self) -> Option<String> {
        match self {
            Reply::NotAllowed { .. } => Some("not in this worker's allow list".into()),
            Reply::Reserved { ip, class, .. } => Some(format!(
                "it resolved to {ip}, {class}, which only a rule naming the host exactly may reach"
            )),
            _ => None,
        }
    }

    /// The body: one or two lines of text.
    pub(super) fn body(&self) -> String {
        match self {
            Reply::NotAllowed { host, port } | Reply::Reserved { host, port, .. } => {
                let why = self.reason().unwrap_or_default();
                format!(
                    "okstra: egress to {} refused: {why}.\nTo allow it, add it to the worker in \
                     the job spec: network = {{ allow = [\"{}\"] }} (docs/confinement.md#network)\n",
                    host_port(host, *port),
                    rule_for(host, *port)
                )
            }
            _ => format!("okstra: {}\n", self.problem()),
        }
    }

    /// What went wrong, for the answers that are not refusals.
    fn problem(&self) -> String {
        match self {
            Reply::Malformed(why) => {
                format!("the egress proxy could not read this request ({why})")
            }
            Reply::BadTarget(t, why) => format!("the request target {t:?} is {why}"),
            Reply::NotAProxyRequest(t) => format!(
                "this is an HTTP proxy, the egress of an okstra worker; ask it for \
                 \"CONNECT host:443\" or for an absolute http:// URL, not for {t:?}"
            ),
            Reply::HttpsUrl => "reach https:// URLs through the proxy with CONNECT (a tunnel), \
                                not as an absolute https:// URL"
                .into(),
            Reply::HeadTimeout(d) => {
                format!(
                    "the request head did not arrive within {} s",
                    d.as_secs_f64()
                )
            }
            Reply::HeadTooBig(n) => format!(
                "the request head is over {n} bytes (or {MAX_HEADERS} header lines), \
                 the egress proxy's limit"
            ),
            Reply::Busy(n) => format!(
                "this worker already has {n} connections open through its egress proxy, the \
                 per-worker connection limit was reached; close some before opening more"
            ),
            Reply::NoName { host, error } => format!("could not resolve {host}: {error}"),
            Reply::NoConnect { host, port, error } => {
                format!("could not connect to {}: {error}", host_port(host, *port))
            }
            Reply::NotAllowed { .. } | Reply::Reserved { .. } => String::new(),
        }
    }

    /// The whole response, ready to write.
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let body = self.body();
        let status = self.status();
        let mut out = String::new();
        let _ = write!(
            out,
            "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            status_text(status),
            body.len()
        );
        out.into_bytes()
    }
}

fn status_text(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

/// `host:port`, with an IPv6 address in brackets.
fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The allow rule that would let `host:port` through, as short as it can
/// be written: without the port where it is 443 or 80.
fn rule_for(host: &str, port: u16) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    match port {
        443 | 80 => host,
        _ => format!("{host}:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        parse(text.as_bytes(), 16384).unwrap().unwrap().0
    }

    #[test]
    fn a_head_is_parsed_once_complete_and_its_length_given() {
        let text = "CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\nBODY";
        let (h, len) = parse(text.as_bytes(), 1024).unwrap().unwrap();
        assert_eq!(&text[len..], "BODY");
        assert_eq!(h.method, "CONNECT");
        assert_eq!(h.target, "a.test:443");
        assert_eq!(h.minor, 1);
        assert_eq!(h.headers, [("Host".to_string(), b"a.test:443".to_vec())]);
        assert_eq!(parse(&text.as_bytes()[..20], 1024), Ok(None));
        assert_eq!(parse(b"", 1024), Ok(None));
    }

    #[test]
    fn a_head_over_the_limit_or_with_too_many_lines_is_too_big() {
        let text = format!(
            "GET http://a.test/ HTTP/1.1\r\nX: {}\r\n\r\n",
            "y".repeat(100)
        );
        assert_eq!(parse(text.as_bytes(), 64), Err(HeadError::TooBig));
        assert_eq!(parse(&text.as_bytes()[..64], 64), Err(HeadError::TooBig));
        assert!(parse(text.as_bytes(), text.len()).unwrap().is_some());
        let many = format!(
            "GET / HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(parse(many.as_bytes(), 1 << 20), Err(HeadError::TooBig));
    }

    #[test]
    fn a_head_that_is_not_http_is_malformed() {
        for bad in [
            "GARBAGE\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "GET / HTTP/1.1\r\nNo colon\r\n\r\n",
        ] {
            assert!(
                matches!(parse(bad.as_bytes(), 1024), Err(HeadError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn connect_targets_need_a_host_and_a_port() {
        let t = |s: &str| target(&head(&format!("CONNECT {s} HTTP/1.1\r\n\r\n")));
        let tunnel = |h: &str, port| {
            Ok(Target::Tunnel {
                host: h.into(),
                port,
            })
        };
        assert_eq!(t("API.Example.com.:443"), tunnel("api.example.com", 443));
        assert_eq!(t("[::1]:8443"), tunnel("::1", 8443));
        assert_eq!(t("10.0.0.1:22"), tunnel("10.0.0.1", 22));
        for bad in [
            "a.test",
            "a.test:",
            "a.test:0",
            "a.test:x",
            "u@a.test:443",
            "a..b:443",
            "::1:443",
            "127.1:443",
        ] {
            let r = t(bad);
            assert!(matches!(r, Err(Reply::BadTarget(..))), "{bad}: {r:?}");
            assert_eq!(r.unwrap_err().status(), 400);
        }
    }

    #[test]
    fn absolute_http_urls_are_forwarded_and_others_refused() {
        let t = |s: &str| target(&head(&format!("GET {s} HTTP/1.1\r\n\r\n")));
        let fwd = |host: &str, port, authority: &str, path: &str| {
            Ok(Target::Forward {
                host: host.into(),
                port,
                authority: authority.into(),
                path: path.into(),
            })
        };
        assert_eq!(
            t("http://A.test/x?y=1"),
            fwd("a.test", 80, "A.test", "/x?y=1")
        );
        assert_eq!(
            t("HTTP://a.test:8080"),
            fwd("a.test", 8080, "a.test:8080", "/")
        );
        assert_eq!(t("http://a.test?q"), fwd("a.test", 80, "a.test", "/?q"));
        assert_eq!(t("http://[::1]:81/p"), fwd("::1", 81, "[::1]:81", "/p"));
        assert_eq!(t("https://a.test/"), Err(Reply::HttpsUrl));
        assert_eq!(
            t("/index.html"),
            Err(Reply::NotAProxyRequest("/index.html".into()))
        );
        assert!(matches!(t("ftp://a.test/"), Err(Reply::BadTarget(..))));
        assert!(matches!(t("http://u:p@a.test/"), Err(Reply::BadTarget(..))));
        assert!(matches!(t("http:///x"), Err(Reply::BadTarget(..))));
        assert_eq!(t("http://a.test/x").unwrap().host_port(), ("a.test", 80));
    }

    #[test]
    fn a_forwarded_head_is_in_origin_form_without_proxy_headers() {
        let h = head(concat!(
            "POST http://a.test:8080/p?q HTTP/1.1\r\n",
            "Host: elsewhere.test\r\n",
            "Proxy-Authorization: Basic eA==\r\n",
            "Proxy-Connection: keep-alive\r\n",
            "Connection: keep-alive, X-Private, Content-Length\r\n",
            "X-Private: 1\r\n",
            "Keep-Alive: timeout=5\r\n",
            "TE: trailers\r\n",
            "Trailer: X-Sum\r\n",
            "Upgrade: websocket\r\n",
            "User-Agent: t/1\r\n",
            "Content-Length: 5\r\n",
            "\r\n"
        ));
        let out = origin_form(&h, "a.test:8080", "/p?q");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            concat!(
                "POST /p?q HTTP/1.1\r\n",
                "Host: a.test:8080\r\n",
                "User-Agent: t/1\r\n",
                "Content-Length: 5\r\n",
                "Connection: close\r\n\r\n"
            )
        );
        let old = head("GET http://a.test/ HTTP/1.0\r\n\r\n");
        assert_eq!(
            origin_form(&old, "a.test", "/"),
            b"GET / HTTP/1.0\r\nHost: a.test\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn a_refusal_names_the_host_and_the_rule_that_would_allow_it() {
        let r = Reply::NotAllowed {
            host: "example.com".into(),
            port: 443,
        };
        assert_eq!(
            r.body(),
            "okstra: egress to example.com:443 refused: not in this worker's allow list.\n\
             To allow it, add it to the worker in the job spec: \
             network = { allow = [\"example.com\"] } (docs/confinement.md#network)\n"
        );
        let v6 = Reply::NotAllowed {
            host: "2001:db8::1".into(),
            port: 8443,
        };
        assert!(v6.body().contains("egress to [2001:db8::1]:8443 refused"));
        assert!(v6.body().contains("allow = [\"[2001:db8::1]:8443\"]"));
        let reserved = Reply::Reserved {
            host: "a.rebind.test".into(),
            port: 80,
            ip: "127.0.0.1".parse().unwrap(),
            class: AddressClass::Loopback,
        };
        assert_eq!(
            reserved.reason().unwrap(),
            "it resolved to 127.0.0.1, a loopback address, which only a rule naming the host \
             exactly may reach"
        );
        assert!(reserved.body().contains("allow = [\"a.rebind.test\"]"));
        assert_eq!(Reply::Busy(3).reason(), None);
    }

    #[test]
    fn every_reply_is_a_complete_response_of_its_status() {
        let replies = [
            (Reply::Malformed("bad".into()), 400, "could not read"),
            (Reply::BadTarget("x".into(), "odd"), 400, "\"x\" is odd"),
            (
                Reply::NotAProxyRequest("/x".into()),
                400,
                "this is an HTTP proxy",
            ),
            (Reply::HttpsUrl, 400, "CONNECT"),
            (
                Reply::HeadTimeout(Duration::from_millis(1500)),
                408,
                "within 1.5 s",
            ),
            (Reply::HeadTooBig(16384), 431, "over 16384 bytes"),
            (Reply::Busy(64), 503, "64 connections"),
            (
                Reply::NoName {
                    host: "n.test".into(),
                    error: "e".into(),
                },
                502,
                "resolve n.test",
            ),
            (
                Reply::NoConnect {
                    host: "::1".into(),
                    port: 9,
                    error: "e".into(),
                },
                502,
                "[::1]:9",
            ),
        ];
        for (reply, status, says) in replies {
            let text = String::from_utf8(reply.to_bytes()).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with(&format!("HTTP/1.1 {status} ")), "{head}");
            assert!(head.contains("\r\nContent-Type: text/plain"), "{head}");
            assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
            assert!(head.ends_with("\r\nConnection: close"), "{head}");
            assert!(
                body.starts_with("okstra: ") && body.contains(says),
                "{body}"
            );
            assert!(body.ends_with('\n') && body.lines().count() <= 2, "{body}");
        }
    }
}
