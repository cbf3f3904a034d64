//! The seccomp filter of a network-confined worker
//! (docs/confinement.md#network): what Landlock's network rules, which
//! govern TCP ports only, leave open. It refuses, with `EACCES`, every
//! socket but TCP over IPv4 and IPv6 and (where allowed) unix ones: UDP, so
//! DNS queries too, raw and packet sockets, netlink, vsock, and any other
//! family; and, with `EPERM`, io_uring, whose operations (a `connect`
//! among them) would pass by both. `socketpair` stays: it makes only a
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

const AF_UNIX: u64 = 1;
const AF_INET: u64 = 2;
const AF_INET6: u64 = 10;
const SOCK_STREAM: u64 = 1;
/// The bits of a socket's type that name it (the rest are flags such as
/// `SOCK_NONBLOCK` and `SOCK_CLOEXEC`).
const SOCK_TYPE_MASK: u64 = 0xf;
/// Every socket type above `SOCK_STREAM` the kernel knows (`SOCK_MAX` is 11).
const OTHER_TYPES: std::ops::RangeInclusive<u64> = 2..=10;
const IPPROTO_IP: u64 = 0;
const IPPROTO_TCP: u64 = 6;
const EACCES: u32 = 13;
const EPERM: u32 = 1;

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

/// Whether this kernel filters system calls with seccomp; `Err` says why not.
pub fn available() -> Result<(), String> {
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

/// The filters, compiled ahead; applied with [`Filters::apply_to_this_thread`].
#[derive(Debug, Clone)]
pub struct Filters {
    sockets: BpfProgram,
    io_uring: BpfProgram,
}

impl Filters {
    /// Compile the filters; `unix` says whether `socket(AF_UNIX, ...)` stays
    /// allowed (see [`crate::confine::Net`]).
    pub fn build(unix: bool) -> io::Result<Filters> {
        let n = numbers().ok_or_else(|| io::Error::other(available().unwrap_err()))?;
        let with_x32 = |nr: i64| std::iter::once(nr).chain(n.x32_bit.map(|bit| nr | bit));
        let sockets: BTreeMap<i64, Vec<SeccompRule>> = with_x32(n.socket)
            .map(|nr| Ok((nr, socket_rules(unix)?)))
            .collect::<io::Result<_>>()?;
        let io_uring: BTreeMap<i64, Vec<SeccompRule>> = n
            .io_uring
            .iter()
            .flat_map(|&nr| with_x32(nr))
            .map(|nr| (nr, Vec::new()))
            .collect();
        Ok(Filters {
            sockets: compile(sockets, EACCES)?,
            io_uring: compile(io_uring, EPERM)?,
        })
    }

    /// Filter the calling thread for good, and so every process it starts
    /// from now on (seccompiler sets `no_new_privs` first).
    pub fn apply_to_this_thread(&self) -> io::Result<()> {
        for program in [&self.sockets, &self.io_uring] {
            seccompiler::apply_filter(program).map_err(io::Error::other)?;
        }
        Ok(())
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
/// refuses the call.
fn socket_rules(unix: bool) -> io::Result<Vec<SeccompRule>> {
    let arg = |index: u8, op: Op, value: u64| {
        SeccompCondition::new(index, Len::Dword, op, value).map_err(io::Error::other)
    };
    let rule =
        |conditions: Vec<SeccompCondition>| SeccompRule::new(conditions).map_err(io::Error::other);
    let mut families = vec![arg(0, Op::Ne, AF_INET)?, arg(0, Op::Ne, AF_INET6)?];
    if unix {
        families.push(arg(0, Op::Ne, AF_UNIX)?);
    }
    // A family other than those allowed.
    let mut rules = vec![rule(families)?];
    for family in [AF_INET, AF_INET6] {
        // An IP socket that is not a stream: UDP, raw, packet, ...
        for kind in OTHER_TYPES {
            rules.push(rule(vec![
                arg(0, Op::Eq, family)?,
                arg(1, Op::MaskedEq(SOCK_TYPE_MASK), kind)?,
            ])?);
        }
        // A stream of another protocol than TCP (SCTP, MPTCP).
        rules.push(rule(vec![
            arg(0, Op::Eq, family)?,
            arg(1, Op::MaskedEq(SOCK_TYPE_MASK), SOCK_STREAM)?,
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
    fn the_filters_compile_for_this_machine_either_way() {
        if numbers().is_none() {
            eprintln!("skipped: no seccomp numbers for {}", std::env::consts::ARCH);
            return;
        }
        let with_unix = Filters::build(true).unwrap();
        let without = Filters::build(false).unwrap();
        // The family rule has one condition more where unix stays allowed;
        // each filter stays far below the kernel's 4096 instructions.
        assert!(with_unix.sockets.len() > without.sockets.len());
        assert!(with_unix.sockets.len() < 1000);
        assert!(!with_unix.io_uring.is_empty());
    }

    #[test]
    fn every_refused_socket_type_is_named_and_stream_is_not() {
        assert!(!OTHER_TYPES.contains(&SOCK_STREAM));
        for kind in [2, 3, 4, 5, 6, 10] {
            assert!(OTHER_TYPES.contains(&kind), "{kind}");
        }
    }
}
