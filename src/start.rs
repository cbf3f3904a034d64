//! What the binary does before `main`, on glibc Linux.
//!
//! One function in `.init_array` (glibc passes it `argc` and `argv`, as the
//! Rust runtime's own argument capture relies on) picks the allocator for
//! the command (src/alloc.rs) and, for `okstra worker`, runs the wrapper
//! there and then, and exits.
//!
//! The wrapper starts once per job, and most of what a process does before
//! `main` is not for it: mimalloc's constructor (it reads `/proc` and `/sys`,
//! reserves its page map, and is undone again by its destructor, although
//! the wrapper runs on the system allocator) and the Rust runtime's start-up
//! (it reads `/proc/self/maps` to place a stack guard and installs a
//! stack-overflow handler). Together they were about a seventh of the
//! wrapper's own time on the benchmark machine (perf; the effect on whole
//! runs is in benches/README.md). The
//! function sits in `.init_array.00100`: after the runtime's argument
//! capture (`.init_array.00099`), before mimalloc's constructor (plain
//! `.init_array`, or priority 101 when built with clang).
//!
//! What the runtime's start-up would have given the wrapper is done here:
//! file descriptors 0-2 are opened on `/dev/null` when closed (so no file the
//! wrapper opens lands on them), SIGPIPE is ignored (a failed write is an
//! error, not death), and a panic exits 101 after the usual message. A stack
//! overflow in the wrapper ends it with SIGSEGV instead of the runtime's
//! message. It ends with `_exit` once stdout is flushed: exit handlers are
//! for a process whose constructors all ran.

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod before_main {
    use std::ffi::{c_char, c_int, CStr, OsString};
    use std::io::Write;
    use std::os::unix::ffi::OsStringExt;

    #[used]
    #[link_section = ".init_array.00100"]
    static START: extern "C" fn(c_int, *const *const c_char, *const *const c_char) = start;

    extern "C" fn start(argc: c_int, argv: *const *const c_char, _env: *const *const c_char) {
        // SAFETY: glibc calls `.init_array` functions with the process's own
        // argc and argv, which stay valid for its whole life; each of the
        // argc entries is a NUL-terminated string.
        let arg = |i: usize| unsafe {
            let p = *argv.add(i);
            (!p.is_null()).then(|| CStr::from_ptr(p).to_bytes())
        };
        let argc = if argv.is_null() {
            0
        } else {
            argc.max(0) as usize
        };
        let first = if argc >= 2 { arg(1) } else { None };
        crate::alloc::choose_for(first);
        // A test binary's first argument is a test filter, never a command.
        if cfg!(test) || first != Some(b"worker") {
            return;
        }
        let argv: Vec<OsString> = (0..argc)
            .filter_map(arg)
            .map(|a| OsString::from_vec(a.to_vec()))
            .collect();
        standard_streams();
        // SAFETY: setting a signal disposition before any thread exists.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        // Unwinding out of this `extern "C"` function would abort; end as a
        // panicking `main` does (the panic hook has printed the message).
        let code = std::panic::catch_unwind(|| okstra::cli::worker(&argv)).unwrap_or(101);
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: ends the process. No exit handler may run: the rest of
        // `.init_array` never ran, and in a static build the C runtime's
        // destructor aborts on unwind tables its constructor never registered.
        unsafe { libc::_exit(code) }
    }

    /// Open `/dev/null` on each of fds 0-2 that is closed, in order, so each
    /// lands on the lowest free descriptor: the closed one.
    fn standard_streams() {
        for fd in 0..3 {
            // SAFETY: F_GETFD only asks about the descriptor.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
                // SAFETY: a NUL-terminated path; the descriptor is kept open
                // for the life of the process on purpose.
                unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
            }
        }
    }
}
