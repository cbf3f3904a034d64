//! The process's memory allocator, chosen once per process by its command.
//!
//! Planning builds and drops millions of small strings and maps, and
//! mimalloc does that about a quarter faster than glibc's malloc (10,000
//! workers: 0.95 s against 1.26 s). The worker wrapper is the opposite case:
//! it is started once per job, allocates almost nothing, and is over in a
//! millisecond, so mimalloc's set-up (a 1 GiB arena reservation whose first
//! touch faults in and zeroes a 2 MiB transparent huge page) and tear-down
//! cost more than the whole wrapper does otherwise. So `okstra worker` uses
//! the system allocator and every other command mimalloc.
//!
//! The choice is made before `main`, from `argv[1]` ([`choose_for`], called
//! from src/start.rs), and is sticky: whichever of that call and the first
//! allocation comes first fixes the allocator for the life of the process,
//! so a block is always freed by the allocator that made it. Elsewhere than
//! glibc Linux every command uses mimalloc.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// The subcommand that runs on the system allocator.
const SYSTEM_COMMAND: &[u8] = b"worker";

/// The allocator, decided at most once.
#[inline]
fn choice() -> u8 {
    match CHOICE.load(Ordering::Relaxed) {
        UNDECIDED => decide(MIMALLOC),
        fixed => fixed,
    }
}

/// Fix the allocator to `wanted` unless it is fixed already; the one in force.
fn decide(wanted: u8) -> u8 {
    match CHOICE.compare_exchange(UNDECIDED, wanted, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => wanted,
        Err(fixed) => fixed,
    }
}

/// The allocator for a process started with `first_arg` as `argv[1]`.
fn for_command(first_arg: Option<&[u8]>) -> u8 {
    if first_arg == Some(SYSTEM_COMMAND) {
        SYSTEM
    } else {
        MIMALLOC
    }
}

/// Fix the allocator for a process started with `first_arg` as `argv[1]`,
/// unless an allocation fixed it already. Called before `main` (src/start.rs).
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
pub fn choose_for(first_arg: Option<&[u8]>) {
    decide(for_command(first_arg));
}

/// mimalloc or the system allocator, as chosen for this process.
pub struct ByCommand;

// SAFETY: every call forwards to one allocator, the same for the life of the
// process (the choice never changes once made), so each block is freed and
// resized by the allocator that made it; both uphold `GlobalAlloc`'s contract.
unsafe impl GlobalAlloc for ByCommand {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match choice() {
            SYSTEM => System.alloc(layout),
            _ => mimalloc::MiMalloc.alloc(layout),
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match choice() {
            SYSTEM => System.alloc_zeroed(layout),
            _ => mimalloc::MiMalloc.alloc_zeroed(layout),
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match choice() {
            SYSTEM => System.dealloc(ptr, layout),
            _ => mimalloc::MiMalloc.dealloc(ptr, layout),
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        match choice() {
            SYSTEM => System.realloc(ptr, layout, new_size),
            _ => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_worker_runs_on_the_system_allocator() {
        assert_eq!(for_command(Some(b"worker")), SYSTEM);
        for other in [&b"plan"[..], b"exec", b"run", b"workers", b"--help", b""] {
            assert_eq!(for_command(Some(other)), MIMALLOC, "{other:?}");
        }
        assert_eq!(for_command(None), MIMALLOC);
    }

    #[test]
    fn the_choice_is_made_once() {
        // The test binary has allocated long before this runs: the choice is
        // fixed, and asking for the other allocator does not change it.
        let fixed = choice();
        let other = if fixed == SYSTEM { MIMALLOC } else { SYSTEM };
        assert_eq!(decide(other), fixed);
        assert_eq!(choice(), fixed);
    }
}
