//! A worker's allow list: the hosts its door lets it reach
//! (docs/confinement.md#network).
//!
//! A rule is written as one of
//!
//! - `api.example.com`: that host exactly;
//! - `*.example.com`: any subdomain of `example.com`, at any depth, but not
//!   `example.com` itself;
//! - `10.0.0.7`: that IPv4 address; `[2001:db8::1]`: that IPv6 address;
//!
//! each optionally followed by `:port`. A rule without a port allows 443
//! and 80, the ports of HTTPS and HTTP. Host names compare without regard
//! to case, and a trailing dot (`example.com.`) is the same host.
//!
//! How a host matched matters: a rule naming the host or address exactly
//! ([`Match::Named`]) may lead to a loopback or metadata address, because
//! whoever wrote it asked for exactly that; a wildcard ([`Match::Wildcard`])
//! may not, so a name under it that resolves to 127.0.0.1 (DNS rebinding)
//! is refused. [`AddressClass`] names the addresses concerned.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The ports a rule without one allows: HTTPS's and HTTP's.
const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// What every rule looks like, for the hints of [`RuleError`].
const SHAPES: &str = "a host (\"api.example.com\"), any subdomain of a domain \
(\"*.example.com\"), an IPv4 address (\"10.0.0.7\") or an IPv6 address in \
brackets (\"[2001:db8::1]\"), each with an optional port (\"api.example.com:8443\")";

/// A worker's allow list (docs/confinement.md#network): the rules in the
/// order they were written, without repeats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    rules: Vec<Rule>,
}

/// How a host matched an [`Allow`] list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// A rule names this host or address exactly.
    Named,
    /// Only a `*.domain` rule covers it.
    Wildcard,
}

/// One rule: what it matches, and the text it was written as.
#[derive(Debug, Clone)]
struct Rule {
    written: String,
    host: HostRule,
    /// `None`: the default ports, 443 and 80.
    port: Option<u16>,
}

/// Two rules are the same rule when they match the same things, however
/// they were written (`Example.com` and `example.com.`).
impl PartialEq for Rule {
    fn eq(&self, other: &Rule) -> bool {
        self.host == other.host && self.port == other.port
    }
}

impl Eq for Rule {}

/// The host part of a rule, normalised (lower case, no trailing dot).
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostRule {
    Name(String),
    /// `*.example.com`, held as `example.com`.
    Subdomains(String),
    Ip(IpAddr),
}

/// Why an item of an allow list is not a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{item:?} is not a network allow rule: {problem}; {hint}")]
pub struct RuleError {
    /// The item as written.
    pub item: String,
    /// What is wrong with it.
    pub problem: Problem,
    /// What to write instead: the item corrected where that is clear,
    /// otherwise the shapes a rule may take.
    pub hint: String,
}

/// What is wrong with an allow-list item (see [`RuleError`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    #[error("it is empty")]
    Empty,
    #[error("it starts with a scheme ({0:?}); a rule names a host, not a URL")]
    Scheme(String),
    #[error("it has a path ({0:?}); a rule names a host, not a URL")]
    Path(String),
    #[error("the port {0:?} is not a number from 1 to 65535")]
    Port(String),
    #[error("a \"*\" may only start a rule, as \"*.\" before a domain")]
    Wildcard,
    #[error("an IPv6 address must be written in brackets")]
    BareIpv6,
    #[error("{0:?} in brackets is not an IPv6 address")]
    Ipv6(String),
    #[error("{0:?} is not a host name: {1}")]
    Host(String, &'static str),
}

impl Allow {
    /// Reads an allow list, one rule per item (docs/confinement.md#network);
    /// the first item that is not a rule is the error. A rule given twice
    /// is kept once.
    pub fn parse(items: &[String]) -> Result<Allow, RuleError> {
        let mut allow = Allow::default();
        for item in items {
            let rule = parse_rule(item).map_err(|problem| RuleError {
                hint: hint(item, &problem),
                item: item.clone(),
                problem,
            })?;
            allow.add(rule);
        }
        Ok(allow)
    }

    /// The rule for the host and port of an `http://` or `https://` URL,
    /// such as a provider's API base URL: `http://127.0.0.1:43123/v1`
    /// gives `127.0.0.1:43123`, `https://api.example.com` gives
    /// `api.example.com:443`. `None` for any other URL.
    pub fn from_base_url(url: &str) -> Option<Allow> {
        let (scheme, rest) = url.split_once("://")?;
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return None,
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        let (host, port) = split_host_port(authority).ok()?;
        let port = match port {
            None | Some("") => default_port,
            Some(p) => parse_port(p).ok()?,
        };
        let written = match host {
            HostPart::Bracketed(h) => format!("[{h}]:{port}"),
            HostPart::Plain(h) => format!("{h}:{port}"),
        };
        let rule = parse_rule(&written).ok()?;
        // A URL names one host; `*` in it is no wildcard.
        if matches!(rule.host, HostRule::Subdomains(_)) {
            return None;
        }
        Some(Allow { rules: vec![rule] })
    }

    /// Adds the rules of `other` (a provider's API host to a job's list),
    /// skipping any already here.
    pub fn push(&mut self, other: Allow) {
        for rule in other.rules {
            self.add(rule);
        }
    }

    /// Whether the list has no rule: a worker with it may reach nothing.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules as they were written, in order, for the review.
    pub fn describe(&self) -> Vec<String> {
        self.rules.iter().map(|r| r.written.clone()).collect()
    }

    /// Whether `host` (a name, an IPv4 address, or an IPv6 one with or
    /// without brackets) on `port` is allowed, and how: [`Match::Named`]
    /// when a rule names it exactly, even if a wildcard covers it too.
    pub fn matches(&self, host: &str, port: u16) -> Option<Match> {
        let host = normalise_host(host);
        let ip = host.parse::<IpAddr>().ok();
        let mut found = None;
        for rule in self.rules.iter().filter(|r| r.allows_port(port)) {
            match (&rule.host, ip) {
                (HostRule::Ip(a), Some(b)) if *a == b => return Some(Match::Named),
                (HostRule::Name(n), None) if *n == host => return Some(Match::Named),
                (HostRule::Subdomains(d), None) if is_subdomain(&host, d) => {
                    found = Some(Match::Wildcard)
                }
                _ => {}
            }
        }
        found
    }

    fn add(&mut self, rule: Rule) {
        if !self.rules.contains(&rule) {
            self.rules.push(rule);
        }
    }
}

impl Extend<Allow> for Allow {
    /// Adds the rules of each list in turn, as [`Allow::push`] does.
    fn extend<I: IntoIterator<Item = Allow>>(&mut self, lists: I) {
        for list in lists {
            self.push(list);
        }
    }
}

impl Rule {
    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

/// `host` as rules compare it: lower case, without brackets or a trailing
/// dot.
pub(crate) fn normalise_host(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    host.to_ascii_lowercase()
}

/// Whether `host` is a subdomain of `domain`, at any depth (not `domain`
/// itself).
fn is_subdomain(host: &str, domain: &str) -> bool {
    host.strip_suffix(domain)
        .and_then(|head| head.strip_suffix('.'))
        .is_some_and(|head| !head.is_empty())
}

/// The host of an authority (`host`, `host:port`, `[v6]`, `[v6]:port`),
/// before it is checked.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HostPart<'a> {
    Plain(&'a str),
    /// Was in brackets (the brackets removed).
    Bracketed(&'a str),
}

/// Splits an authority into its host and port text (the port `None`
/// without a colon, `Some("")` with an empty one).
pub(crate) fn split_host_port(s: &str) -> Result<(HostPart<'_>, Option<&str>), Problem> {
    if let Some(rest) = s.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return Err(Problem::Ipv6(rest.to_string()));
        };
        return match after {
            "" => Ok((HostPart::Bracketed(inside), None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((HostPart::Bracketed(inside), Some(port))),
                None => Err(Problem::Port(after.to_string())),
            },
        };
    }
    match s.matches(':').count() {
        0 => Ok((HostPart::Plain(s), None)),
        1 => {
            let (host, port) = s.split_once(':').unwrap_or((s, ""));
            Ok((HostPart::Plain(host), Some(port)))
        }
        _ => Err(Problem::BareIpv6),
    }
}

/// A port: decimal digits only, 1 to 65535.
pub(crate) fn parse_port(s: &str) -> Result<u16, Problem> {
    match s.parse::<u16>() {
        Ok(p) if p > 0 && s.bytes().all(|b| b.is_ascii_digit()) => Ok(p),
        _ => Err(Problem::Port(s.to_string())),
    }
}

/// One allow-list item as a rule.
fn parse_rule(item: &str) -> Result<Rule, Problem> {
    if item.is_empty() {
        return Err(Problem::Empty);
    }
    if let Some(at) = item.find("://") {
        return Err(Problem::Scheme(item[..at + 3].to_string()));
    }
    if let Some(at) = item.find('/') {
        return Err(Problem::Path(item[at..].to_string()));
    }
    let (host, port) = split_host_port(item)?;
    let port = port.map(parse_port).transpose()?;
    let host = match host {
        HostPart::Bracketed(h) => match h.parse::<Ipv6Addr>() {
            Ok(ip) => HostRule::Ip(IpAddr::V6(ip)),
            Err(_) => return Err(Problem::Ipv6(h.to_string())),
        },
        HostPart::Plain(h) => parse_plain_host(h)?,
    };
    Ok(Rule {
        written: item.to_string(),
        host,
        port,
    })
}

/// The host of a rule written without brackets: `*.domain`, an IPv4
/// address or a name.
fn parse_plain_host(h: &str) -> Result<HostRule, Problem> {
    if let Some(domain) = h.strip_prefix("*.") {
        if domain.contains('*') {
            return Err(Problem::Wildcard);
        }
        return Ok(HostRule::Subdomains(check_name(domain)?));
    }
    if h.contains('*') {
        return Err(Problem::Wildcard);
    }
    if let Ok(ip) = h.parse::<Ipv4Addr>() {
        return Ok(HostRule::Ip(IpAddr::V4(ip)));
    }
    if h.parse::<Ipv6Addr>().is_ok() {
        return Err(Problem::BareIpv6);
    }
    Ok(HostRule::Name(check_name(h)?))
}

/// A host name, normalised (lower case, no trailing dot), or why it is
/// not one.
pub(crate) fn check_name(h: &str) -> Result<String, Problem> {
    let bad = |why| Err(Problem::Host(h.to_string(), why));
    let name = h.strip_suffix('.').unwrap_or(h);
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 253 {
        return bad("it is longer than 253 characters");
    }
    for label in name.split('.') {
        if label.is_empty() {
            return bad("it has an empty label (two dots in a row, or a leading dot)");
        }
        if label.len() > 63 {
            return bad("a label is longer than 63 characters");
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return bad("only letters, digits, '-', '_' and '.' may name a host");
        }
    }
    // `127.1` or `10.1.2` would be read as addresses by the resolver.
    if name
        .rsplit('.')
        .next()
        .is_some_and(|last| last.bytes().all(|b| b.is_ascii_digit()))
    {
        return bad("it looks like an IPv4 address but is not one (write all four numbers)");
    }
    Ok(name.to_ascii_lowercase())
}

/// What to write instead of `item`, which has `problem`.
fn hint(item: &str, problem: &Problem) -> String {
    let fixed = match problem {
        // The host (and port) of the URL given.
        Problem::Scheme(_) | Problem::Path(_) => {
            let rest = item.split_once("://").map_or(item, |(_, rest)| rest);
            rest.split(['/', '?', '#']).next().map(str::to_string)
        }
        Problem::BareIpv6 => item.parse::<Ipv6Addr>().ok().map(|ip| format!("[{ip}]")),
        _ => None,
    };
    match fixed {
        Some(f) if parse_rule(&f).is_ok() => format!("write {f:?}"),
        _ => format!("write {SHAPES}"),
    }
}

/// The addresses only a [`Match::Named`] rule may lead to
/// (docs/confinement.md#network): this machine's own, and those that reach
/// a cloud instance's metadata service and its credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressClass {
    /// 127.0.0.0/8, `::1`.
    Loopback,
    /// 0.0.0.0/8, `::` (connecting to them reaches this machine).
    Unspecified,
    /// 169.254.0.0/16, `fe80::/10`.
    LinkLocal,
    /// 169.254.169.254, `fd00:ec2::254` (AWS), 100.100.100.200 (Alibaba).
    CloudMetadata,
}

impl fmt::Display for AddressClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressClass::Loopback => "a loopback address",
            AddressClass::Unspecified => "an unspecified address",
            AddressClass::LinkLocal => "a link-local address",
            AddressClass::CloudMetadata => "a cloud metadata address",
        })
    }
}

impl AddressClass {
    /// The class of `ip`, if it is one of those a wildcard may not reach.
    /// An IPv6 address carrying an IPv4 one (`::ffff:127.0.0.1`, or the
    /// NAT64 prefix `64:ff9b::/96`) is judged by the IPv4 address.
    pub fn of(ip: IpAddr) -> Option<AddressClass> {
        match ip {
            IpAddr::V4(v4) => Self::of_v4(v4),
            IpAddr::V6(v6) => Self::of_v6(v6),
        }
    }

    fn of_v4(ip: Ipv4Addr) -> Option<AddressClass> {
        let [a, b, ..] = ip.octets();
        if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
            Some(AddressClass::CloudMetadata)
        } else if a == 127 {
            Some(AddressClass::Loopback)
        } else if a == 0 {
            Some(AddressClass::Unspecified)
        } else if a == 169 && b == 254 {
            Some(AddressClass::LinkLocal)
        } else {
            None
        }
    }

    fn of_v6(ip: Ipv6Addr) -> Option<AddressClass> {
        if let Some(v4) = ip.to_ipv4_mapped() {
            return Self::of_v4(v4);
        }
        let s = ip.segments();
        if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
            let [a, b, c, d] = ip.octets()[12..] else {
                return None;
            };
            return Self::of_v4(Ipv4Addr::new(a, b, c, d));
        }
        if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
            Some(AddressClass::CloudMetadata)
        } else if ip.is_loopback() {
            Some(AddressClass::Loopback)
        } else if ip.is_unspecified() {
            Some(AddressClass::Unspecified)
        } else if s[0] & 0xffc0 == 0xfe80 {
            Some(AddressClass::LinkLocal)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allow(items: &[&str]) -> Allow {
        let items: Vec<String> = items.iter().map(|s| s.to_string()).collect();
        Allow::parse(&items).unwrap()
    }

    fn problem(item: &str) -> RuleError {
        Allow::parse(&[item.to_string()]).unwrap_err()
    }

    #[test]
    fn a_host_rule_allows_that_host_on_443_and_80_only() {
        let a = allow(&["api.example.com"]);
        assert_eq!(a.matches("api.example.com", 443), Some(Match::Named));
        assert_eq!(a.matches("api.example.com", 80), Some(Match::Named));
        assert_eq!(a.matches("api.example.com", 8443), None);
        assert_eq!(a.matches("example.com", 443), None);
        assert_eq!(a.matches("x.api.example.com", 443), None);
        assert_eq!(a.matches("api.example.com.evil", 443), None);
    }

    #[test]
    fn hosts_compare_without_case_or_trailing_dot() {
        let a = allow(&["API.Example.com."]);
        assert_eq!(a.matches("api.example.COM", 443), Some(Match::Named));
        assert_eq!(a.matches("api.example.com.", 443), Some(Match::Named));
        assert_eq!(a.describe(), ["API.Example.com."]);
    }

    #[test]
    fn a_port_rule_allows_that_port_only() {
        let a = allow(&["example.com:8443", "*.svc.test:9000"]);
        assert_eq!(a.matches("example.com", 8443), Some(Match::Named));
        assert_eq!(a.matches("example.com", 443), None);
        assert_eq!(a.matches("a.svc.test", 9000), Some(Match::Wildcard));
        assert_eq!(a.matches("a.svc.test", 443), None);
    }

    #[test]
    fn a_wildcard_covers_every_subdomain_but_not_the_domain() {
        let a = allow(&["*.example.com"]);
        assert_eq!(a.matches("a.example.com", 443), Some(Match::Wildcard));
        assert_eq!(a.matches("a.b.example.com", 80), Some(Match::Wildcard));
        assert_eq!(a.matches("example.com", 443), None);
        assert_eq!(a.matches("badexample.com", 443), None);
        assert_eq!(a.matches(".example.com", 443), None);
    }

    #[test]
    fn a_named_rule_wins_over_a_wildcard_covering_the_same_host() {
        let a = allow(&["*.example.com", "api.example.com"]);
        assert_eq!(a.matches("api.example.com", 443), Some(Match::Named));
        assert_eq!(a.matches("www.example.com", 443), Some(Match::Wildcard));
    }

    #[test]
    fn address_rules_match_addresses_by_value() {
        let a = allow(&["10.0.0.7", "[2001:db8::1]:8080", "127.0.0.1:43123"]);
        assert_eq!(a.matches("10.0.0.7", 443), Some(Match::Named));
        assert_eq!(a.matches("[2001:db8::1]", 8080), Some(Match::Named));
        assert_eq!(a.matches("2001:db8:0:0:0:0:0:1", 8080), Some(Match::Named));
        assert_eq!(a.matches("[2001:db8::1]", 443), None);
        assert_eq!(a.matches("127.0.0.1", 43123), Some(Match::Named));
        assert_eq!(a.matches("127.0.0.1", 443), None);
        // A name is not an address, even one that resolves to it.
        assert_eq!(allow(&["127.0.0.1"]).matches("localhost", 443), None);
        assert_eq!(allow(&["localhost"]).matches("127.0.0.1", 443), None);
    }

    #[test]
    fn an_empty_list_allows_nothing() {
        let a = Allow::default();
        assert!(a.is_empty());
        assert_eq!(a.matches("example.com", 443), None);
        assert!(!allow(&["example.com"]).is_empty());
    }

    #[test]
    fn push_and_extend_add_rules_once() {
        let mut a = allow(&["example.com", "*.a.test"]);
        a.push(allow(&["Example.com.", "b.test"]));
        assert_eq!(a.describe(), ["example.com", "*.a.test", "b.test"]);
        a.extend([allow(&["c.test"]), allow(&["b.test", "d.test:81"])]);
        assert_eq!(
            a.describe(),
            ["example.com", "*.a.test", "b.test", "c.test", "d.test:81"]
        );
        assert_eq!(a.matches("d.test", 81), Some(Match::Named));
        let twice = allow(&["x.test", "x.test"]);
        assert_eq!(twice.describe(), ["x.test"]);
    }

    #[test]
    fn a_base_url_gives_the_rule_for_its_host_and_port() {
        let d = |u: &str| Allow::from_base_url(u).map(|a| a.describe());
        assert_eq!(d("http://127.0.0.1:43123/v1").unwrap(), ["127.0.0.1:43123"]);
        assert_eq!(
            d("https://api.example.com").unwrap(),
            ["api.example.com:443"]
        );
        assert_eq!(
            d("HTTP://Api.Example.com/x?y#z").unwrap(),
            ["Api.Example.com:80"]
        );
        assert_eq!(d("https://u:p@h.test:8443/").unwrap(), ["h.test:8443"]);
        assert_eq!(d("http://[::1]:9/").unwrap(), ["[::1]:9"]);
        assert_eq!(d("https://h.test:/").unwrap(), ["h.test:443"]);
        let a = Allow::from_base_url("http://127.0.0.1:43123/v1").unwrap();
        assert_eq!(a.matches("127.0.0.1", 43123), Some(Match::Named));
        assert_eq!(a.matches("127.0.0.1", 80), None);
        for bad in [
            "ftp://h.test",
            "h.test",
            "https://",
            "https://h.test:0",
            "https://*.h.test",
        ] {
            assert_eq!(d(bad), None, "{bad}");
        }
    }

    #[test]
    fn each_kind_of_bad_item_is_named_with_a_hint() {
        let cases: &[(&str, &str, &str)] = &[
            ("", "it is empty", "write a host (\"api.example.com\")"),
            (
                "https://api.x.com/v1",
                "scheme (\"https://\")",
                "write \"api.x.com\"",
            ),
            ("api.x.com/v1", "a path (\"/v1\")", "write \"api.x.com\""),
            ("http://h.test:8080", "scheme", "write \"h.test:8080\""),
            ("https://*.h.test/x", "scheme", "write \"*.h.test\""),
            ("https://", "scheme", "write a host"),
            ("h.test:0", "port \"0\"", "write a host"),
            ("h.test:http", "port \"http\"", "write a host"),
            ("h.test:", "port \"\"", "write a host"),
            ("h.test:+1", "port \"+1\"", "write a host"),
            ("h.test:65536", "port \"65536\"", "write a host"),
            ("a.*.test", "may only start", "write a host"),
            ("*", "may only start", "write a host"),
            ("*.*.test", "may only start", "write a host"),
            ("::1", "in brackets", "write \"[::1]\""),
            ("[nope]", "\"nope\" in brackets", "write a host"),
            ("[::1]x", "port \"x\"", "write a host"),
            ("[::1", "in brackets", "write a host"),
            ("a..b", "empty label", "write a host"),
            ("*.", "\"\" is not a host name", "write a host"),
            ("ex ample.com", "only letters", "write a host"),
            ("u@h.test", "only letters", "write a host"),
            ("127.1", "all four numbers", "write a host"),
        ];
        for (item, why, hint) in cases {
            let e = problem(item);
            let text = e.to_string();
            assert_eq!(e.item, *item);
            assert!(text.starts_with(&format!("{item:?} is not a network allow rule: ")));
            assert!(text.contains(why), "{item:?}: {text}");
            assert!(e.hint.starts_with(hint), "{item:?}: {}", e.hint);
        }
        // The first bad item is the error, whatever follows it.
        let items = ["ok.test".to_string(), "bad/".to_string(), "".to_string()];
        assert_eq!(Allow::parse(&items).unwrap_err().item, "bad/");
    }

    #[test]
    fn good_items_of_every_shape_parse() {
        let a = allow(&[
            "a-b_c.example.com",
            "*.example.com:8443",
            "10.1.2.3:22",
            "[fe80::1]",
            "localhost",
            "xn--bcher-kva.example",
        ]);
        assert_eq!(a.describe().len(), 6);
        assert_eq!(a.matches("10.1.2.3", 22), Some(Match::Named));
        assert_eq!(a.matches("fe80::1", 80), Some(Match::Named));
        assert_eq!(a.matches("LOCALHOST", 80), Some(Match::Named));
    }

    #[test]
    fn address_classes_include_their_ipv4_mapped_forms() {
        let class = |s: &str| AddressClass::of(s.parse().unwrap());
        use AddressClass::*;
        let cases = [
            ("127.0.0.1", Some(Loopback)),
            ("127.255.0.9", Some(Loopback)),
            ("::1", Some(Loopback)),
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("0.0.0.0", Some(Unspecified)),
            ("0.1.2.3", Some(Unspecified)),
            ("::", Some(Unspecified)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("169.254.1.1", Some(LinkLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf::1", Some(LinkLocal)),
            ("::ffff:169.254.3.4", Some(LinkLocal)),
            ("169.254.169.254", Some(CloudMetadata)),
            ("::ffff:169.254.169.254", Some(CloudMetadata)),
            ("64:ff9b::169.254.169.254", Some(CloudMetadata)),
            ("fd00:ec2::254", Some(CloudMetadata)),
            ("100.100.100.200", Some(CloudMetadata)),
            ("93.184.216.34", None),
            ("10.0.0.1", None),
            ("100.100.100.201", None),
            ("169.253.1.1", None),
            ("fec0::1", None),
            ("2001:db8::1", None),
            ("::ffff:93.184.216.34", None),
            ("64:ff9b::93.184.216.34", None),
            ("fd00:ec2::253", None),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), want, "{ip}");
        }
        assert_eq!(Loopback.to_string(), "a loopback address");
        assert_eq!(CloudMetadata.to_string(), "a cloud metadata address");
    }

    #[test]
    fn authorities_split_into_host_and_port() {
        use HostPart::*;
        assert_eq!(split_host_port("h:1"), Ok((Plain("h"), Some("1"))));
        assert_eq!(split_host_port("h"), Ok((Plain("h"), None)));
        assert_eq!(
            split_host_port("[::1]:2"),
            Ok((Bracketed("::1"), Some("2")))
        );
        assert_eq!(split_host_port("[::1]"), Ok((Bracketed("::1"), None)));
        assert_eq!(split_host_port("::1"), Err(Problem::BareIpv6));
        assert_eq!(parse_port("443"), Ok(443));
        assert!(parse_port("0").is_err() && parse_port("-1").is_err());
    }
}
