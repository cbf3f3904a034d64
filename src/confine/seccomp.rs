//! The seccomp filter of a network-confined worker
//! (docs/confinement.md#network): what Landlock's network rules, which
//! govern TCP ports only, leave open. It refuses, with `EACCES`, every
//! socket but TCP over IPv4 and IPv6 and (where allowed) unix ones: UDP, so
//! DNS queries too, raw and packet sockets, netlink, vsock, and any other
//! family; and io_uring, whose operations (a `connect` among them) would
//! pass by both. One filter, kept short: the kernel compiles it anew for
//! every worker it is installed for. `socketpair` stays: it makes only a
//! connected pair of unix sockets, the pipes node and others start their
//! children with.
//!
//! The filter is built with `seccompiler` and applied by the thread that
//! starts the worker, after its Landlock restriction: the worker inherits
//! both, and the wrapper's main thread neither.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen as Len, SeccompCmpOp as Op, SeccompCondition,
    SeccompFilter, SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::io;

/// In debug builds only, this variable makes the kernel look as if it had
/// no seccomp, so tests can show what `required` does there.
pub const SIMULATE_UNAVAILABLE_ENV: &str = "OKSTRA_TEST_NO_SECCOMP";

const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
/// `SOCK_STREAM` as `socket(2)` takes it: alone, or with `SOCK_NONBLOCK`
/// (0x800), `SOCK_CLOEXEC` (0x80000) or both. Any other type (UDP, raw,
/// ...) or flag is refused.
const STREAMS: [u64; 4] = [1, 1 | 0x800, 1 | 0x80000, 1 | 0x800 | 0x80000];
const IPPROTO_IP: u64 = 0;
const IPPROTO_TCP: u64 = 6;
const EACCES: u32 = 13;

/// The system call numbers the filter names, for this machine's
/// architecture.
struct Numbers {
    socket: i64,
    io_uring: [i64; 3],
    /// x86_64's x32 ABI reaches the same calls with this bit set: the same
    /// rules are keyed by those numbers too.
    x32_bit: Option<i64>,
}

fn numbers() -> Option<Numbers> {
    match std::env::consts::ARCH {
        "x86_64" => Some(Numbers {
            socket: 41,
            io_uring: [425, 426, 427],
            x32_bit: Some(0x4000_0000),
        }),
        "aarch64" => Some(Numbers {
            socket: 198,
            io_uring: [425, 426, 427],
            x32_bit: None,
        }),
        _ => None,
    }
}

/// Whether this kernel filters system calls with seccomp; `Err` says why
/// not. Asked once per process.
pub fn available() -> Result<(), String> {
    static ANSWER: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ANSWER.get_or_init(ask).clone()
}

fn ask() -> Result<(), String> {
    if cfg!(debug_assertions) && std::env::var_os(SIMULATE_UNAVAILABLE_ENV).is_some() {
        return Err(format!(
            "seccomp reported unavailable ({SIMULATE_UNAVAILABLE_ENV} is set, a debug build's test seam)"
        ));
    }
    if numbers().is_none() {
        return Err(format!(
            "okstra has no seccomp filter for {} (only x86_64 and aarch64)",
            std::env::consts::ARCH
        ));
    }
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot read /proc/self/status to ask about seccomp: {e}"))?;
    if status.lines().any(|l| l.starts_with("Seccomp:")) {
        Ok(())
    } else {
        Err("the kernel has no seccomp (CONFIG_SECCOMP_FILTER)".into())
    }
}

/// The filter, compiled ahead; applied with [`Filters::apply_to_this_thread`].
#[derive(Debug, Clone)]
pub struct Filters {
    program: BpfProgram,
}

impl Filters {
    /// Compile the filter.
    pub fn build() -> io::Result<Filters> {
        let n = numbers().ok_or_else(|| io::Error::other(available().unwrap_err()))?;
        let with_x32 = |nr: i64| std::iter::once(nr).chain(n.x32_bit.map(|bit| nr | bit));
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
        for nr in with_x32(n.socket) {
            rules.insert(nr, socket_rules()?);
        }
        // An empty list: refused whatever the arguments.
        for nr in n.io_uring.iter().flat_map(|&nr| with_x32(nr)) {
            rules.insert(nr, Vec::new());
        }
        Ok(Filters {
            program: compile(rules, EACCES)?,
        })
    }

    /// [`Filters::build`] once per process: a slot's wrapper confines many
    /// attempts with the same filter.
    pub fn cached() -> io::Result<Filters> {
        static FILTERS: std::sync::OnceLock<Filters> = std::sync::OnceLock::new();
        if let Some(filters) = FILTERS.get() {
            return Ok(filters.clone());
        }
        let filters = Filters::build()?;
        Ok(FILTERS.get_or_init(|| filters).clone())
    }

    /// Filter the calling thread for good, and so every process it starts
    /// from now on (seccompiler sets `no_new_privs` first).
    pub fn apply_to_this_thread(&self) -> io::Result<()> {
        seccompiler::apply_filter(&self.program).map_err(io::Error::other)
    }
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, errno: u32) -> io::Result<BpfProgram> {
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(io::Error::other)?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno),
        arch,
    )
    .map_err(io::Error::other)?;
    BpfProgram::try_from(filter).map_err(io::Error::other)
}

/// The `socket(domain, type, protocol)` calls refused: any rule matching
/// refuses the call (each rule's conditions all hold). Every family but
/// IPv4 and IPv6, unix included: below Landlock ABI 9 the kernel cannot
/// tell a socket the worker made from another service's
/// (docs/confinement.md#network).
fn socket_rules() -> io::Result<Vec<SeccompRule>> {
    let arg = |index: u8, op: Op, value: u64| {
        SeccompCondition::new(index, Len::Dword, op, value).map_err(io::Error::other)
    };
    let rule =
        |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(io::Error::other);
    // A family other than those allowed.
    let mut rules = vec![rule(vec![
        arg(0, Op::Ne, AF_INET)?,
        arg(0, Op::Ne, AF_INET6)?,
    ])?];
    for family in [AF_INET, AF_INET6] {
        // An IP socket that is not a stream: UDP, raw, packet, ...
        let mut not_stream = vec![arg(0, Op::Eq, family)?];
        for stream in STREAMS {
            not_stream.push(arg(1, Op::Ne, stream)?);
        }
        rules.push(rule(not_stream)?);
        // A stream of another protocol than TCP (SCTP, MPTCP).
        rules.push(rule(vec![
            arg(0, Op::Eq, family)?,
            arg(2, Op::Ne, IPPROTO_IP)?,
            arg(2, Op::Ne, IPPROTO_TCP)?,
        ])?);
    }
    Ok(rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_compiles_for_this_machine_and_stays_short() {
        if numbers().is_none() {
            eprintln!("skipped: no seccomp numbers for {}", std::env::consts::ARCH);
            return;
        }
        // The kernel compiles it for every worker: a few dozen
        // instructions, not hundreds.
        let len = Filters::build().unwrap().program.len();
        assert!(len > 20 && len < 200, "{len}");
    }

    #[test]
    fn only_stream_types_pass() {
        for stream in STREAMS {
            assert_eq!(stream & 0xf, 1, "{stream:#x}");
        }
    }
}
