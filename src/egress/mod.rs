//! The run's egress proxy (docs/confinement.md#network).
//!
//! exec runs one [`Proxy`] per run and opens a [`Door`] for each attempt it
//! launches: a listener on its own port of 127.0.0.1, the only place the
//! kernel lets the confined worker connect to, which it reaches through
//! `HTTPS_PROXY`, `HTTP_PROXY` and `ALL_PROXY`. The door lets through only
//! what the attempt's [`Allow`] list names, and keeps a record of every
//! destination; closing it when the attempt settles yields that record, an
//! [`Egress`], for the dispatch row and the run's events.

mod acceptor;
pub mod job;
pub mod proxy;
pub mod rules;

mod head;
mod record;

pub use proxy::{Door, Limits, Proxy};
pub use rules::{Allow, Match, RuleError};

/// One destination an attempt reached, or was refused, through its door
/// (an entry of the dispatch row's `egress`). A host and port that was
/// allowed one time and refused another (a wildcard's name resolving to a
/// loopback address) has one entry for each.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    /// As the worker asked for it, in lower case and without brackets or
    /// a trailing dot.
    pub host: String,
    pub port: u16,
    /// Whether the proxy let the connections through.
    pub allowed: bool,
    /// Requests the worker made for it (each a tunnel or one HTTP
    /// exchange), including those that failed to connect.
    pub connections: u64,
    /// Bytes sent to it: a tunnel's bytes, or a plain HTTP request as the
    /// proxy rewrote it and its body.
    pub bytes_out: u64,
    /// Bytes it sent back and the proxy passed on to the worker.
    pub bytes_in: u64,
}

/// One request the door refused (an `egress-refused` event).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub host: String,
    pub port: u16,
    /// Why, in one sentence.
    pub reason: String,
}

/// A door's record, taken when it closes: each destination once, sorted
/// by host, port and then refused before allowed; the refusals in the
/// order they happened, the first [`Egress::REFUSALS_KEPT`] of them, with a
/// count of the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Egress {
    pub destinations: Vec<Destination>,
    pub refusals: Vec<Refusal>,
    /// Refusals past the first [`Egress::REFUSALS_KEPT`], counted only.
    pub refusals_dropped: u64,
}

impl Egress {
    /// How many refusals a record keeps; a worker retrying a refused host
    /// in a loop must not grow it without bound.
    pub const REFUSALS_KEPT: usize = 100;
}

/// Reads `bytes` as a door reads a worker's request (the head, where it
/// goes, whether `allow` lets it through, and a plain request's head as its
/// server would get it), panicking where an invariant fails: for the fuzz
/// target `proxy_head`. A worker's bytes are untrusted input.
pub fn check_request(bytes: &[u8], allow: &[String]) {
    let allow = Allow::parse(allow).unwrap_or_default();
    let Ok(Some((parsed, len))) = head::parse(bytes, 16 * 1024) else {
        return;
    };
    assert!(len <= bytes.len() && len <= 16 * 1024);
    let Ok(target) = head::target(&parsed) else {
        return;
    };
    let (host, port) = target.host_port();
    assert_eq!(host, host.to_ascii_lowercase(), "hosts compare lowercased");
    assert!(port > 0);
    let _ = allow.matches(host, port);
    if let head::Target::Forward {
        authority, path, ..
    } = &target
    {
        let sent = head::origin_form(&parsed, authority, path);
        // What goes upstream is one whole head, without the proxy's own
        // headers, asking the server to close.
        // (Room for the two headers the rewrite may add: the proxy's own
        // limit on what it reads is no limit on what it sends.)
        let mut headers = vec![httparse::EMPTY_HEADER; parsed.headers.len() + 2];
        let mut again = httparse::Request::new(&mut headers);
        match again.parse(&sent) {
            Ok(httparse::Status::Complete(n)) => {
                assert_eq!(n, sent.len(), "the rewritten head is all head")
            }
            other => panic!(
                "the rewritten head does not parse ({other:?}): {:?}",
                String::from_utf8_lossy(&sent)
            ),
        }
        assert!(again
            .headers
            .iter()
            .all(|h| !h.name.eq_ignore_ascii_case("proxy-authorization")));
        assert!(sent.ends_with(b"Connection: close\r\n\r\n"));
    }
}

#[cfg(test)]
mod tests;
