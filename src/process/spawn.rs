//! Starting a child with posix_spawn(3).
//!
//! std's `Command` uses posix_spawn on glibc too, but only after finding
//! glibc's version through `dlsym`, which a static executable cannot do
//! (`scripts/build-static.sh`): there it falls back to fork and exec, and
//! forking `okstra exec` (large, several threads) copies its page tables and
//! takes copy-on-write faults for every job. Calling posix_spawn here keeps
//! one path for both builds: glibc starts the child with
//! `clone(CLONE_VM | CLONE_VFORK)`, so nothing is copied, and reports a
//! failed exec as the call's error.
//!
//! The child gets `argv` (the program looked up on `PATH` when it has no
//! slash), the inherited environment with `spec.env` on top, the working
//! directory `spec.cwd`, the given stdin and stdout/stderr (or ours), an
//! empty signal mask, SIGPIPE back to its default (okstra ignores it; a
//! child should not inherit that), and optionally a process group of its
//! own. Every descriptor okstra opens is close-on-exec, so no other leaks.

use super::SpawnSpec;
use std::ffi::{c_char, c_int, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

/// Start `spec.argv` (not empty: the caller checks) with `stdin` as its
/// standard input and `out` (when given) as its stdout and stderr; the
/// child's pid.
pub(super) fn posix_spawn(
    spec: &SpawnSpec,
    own_group: bool,
    stdin: &File,
    out: Option<&File>,
) -> io::Result<u32> {
    let program = &spec.argv[0];
    let argv = spec
        .argv
        .iter()
        .map(|a| c_string(a.as_bytes()))
        .collect::<io::Result<Vec<_>>>()?;
    let envp = environment(spec.env)?;
    let cwd = c_string(spec.cwd.as_os_str().as_bytes())?;

    let mut actions = FileActions::new()?;
    actions.dup2(stdin.as_raw_fd(), 0)?;
    if let Some(out) = out {
        actions.dup2(out.as_raw_fd(), 1)?;
        actions.dup2(out.as_raw_fd(), 2)?;
    }
    // SAFETY: valid actions object and a NUL-terminated path that outlives
    // the spawn call below.
    check(unsafe { libc::posix_spawn_file_actions_addchdir_np(&mut actions.0, cwd.as_ptr()) })?;

    let mut attr = Attr::new()?;
    attr.configure(own_group)?;

    let argv_ptrs = null_terminated(&argv);
    let envp_ptrs = null_terminated(&envp);
    let mut pid: libc::pid_t = 0;
    // A PATH of the child's own is the one to search, as a shell would;
    // posix_spawnp searches ours, so look it up here in that case. Both
    // functions take the same arguments.
    let path_override = spec.env.iter().rev().find(|(k, _)| k == "PATH");
    let (start, program): (SpawnFn, CString) = match path_override {
        Some((_, path)) if !program.contains('/') => {
            let found = super::find_program(program, OsStr::new(path))?;
            (libc::posix_spawn, c_string(found.as_os_str().as_bytes())?)
        }
        _ => (libc::posix_spawnp, argv[0].clone()),
    };
    // SAFETY: every pointer is valid and NUL-terminated (argv and envp are
    // NULL-terminated arrays) for the duration of the call.
    let rc = unsafe {
        start(
            &mut pid,
            program.as_ptr(),
            &actions.0,
            &attr.0,
            argv_ptrs.as_ptr(),
            envp_ptrs.as_ptr(),
        )
    };
    check(rc)?;
    Ok(pid as u32)
}

/// posix_spawn(3) and posix_spawnp(3).
type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    *const c_char,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    *const *mut c_char,
    *const *mut c_char,
) -> c_int;

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument, environment entry or path holds a NUL byte",
        )
    })
}

/// `KEY=VALUE` entries: ours, with `overrides` replacing or adding.
fn environment(overrides: &[(String, String)]) -> io::Result<Vec<CString>> {
    let replaced = |key: &OsStr| overrides.iter().any(|(k, _)| OsStr::new(k) == key);
    let inherited: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| !replaced(k)).collect();
    let mut entries = Vec::with_capacity(inherited.len() + overrides.len());
    let mut push = |key: &[u8], value: &[u8]| -> io::Result<()> {
        let mut entry = Vec::with_capacity(key.len() + value.len() + 1);
        entry.extend_from_slice(key);
        entry.push(b'=');
        entry.extend_from_slice(value);
        entries.push(c_string(&entry)?);
        Ok(())
    };
    for (k, v) in &inherited {
        push(k.as_bytes(), v.as_bytes())?;
    }
    // A key given twice keeps its last value, as std's Command does.
    for (i, (k, v)) in overrides.iter().enumerate() {
        if !overrides[i + 1..].iter().any(|(later, _)| later == k) {
            push(k.as_bytes(), v.as_bytes())?;
        }
    }
    Ok(entries)
}

fn null_terminated(items: &[CString]) -> Vec<*mut c_char> {
    items
        .iter()
        .map(|s| s.as_ptr() as *mut c_char)
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// posix_spawn's functions return the error number itself.
fn check(rc: c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        let mut raw = MaybeUninit::uninit();
        // SAFETY: init writes the whole object; it is used only after success.
        check(unsafe { libc::posix_spawn_file_actions_init(raw.as_mut_ptr()) })?;
        // SAFETY: initialised just above. glibc's object holds no pointer to
        // itself, so it may move.
        Ok(FileActions(unsafe { raw.assume_init() }))
    }

    fn dup2(&mut self, from: c_int, to: c_int) -> io::Result<()> {
        // SAFETY: a valid, initialised actions object.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, from, to) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

struct Attr(libc::posix_spawnattr_t);

impl Attr {
    fn new() -> io::Result<Self> {
        let mut raw = MaybeUninit::uninit();
        // SAFETY: as for FileActions::new.
        check(unsafe { libc::posix_spawnattr_init(raw.as_mut_ptr()) })?;
        // SAFETY: initialised just above; plain data.
        Ok(Attr(unsafe { raw.assume_init() }))
    }

    fn configure(&mut self, own_group: bool) -> io::Result<()> {
        // SAFETY: sigset_t is plain data, filled by sigemptyset before use;
        // every call gets a valid, initialised attribute object.
        unsafe {
            let mut none = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(none.as_mut_ptr());
            let none = none.assume_init();
            let mut pipe = none;
            libc::sigaddset(&mut pipe, libc::SIGPIPE);
            check(libc::posix_spawnattr_setsigmask(&mut self.0, &none))?;
            check(libc::posix_spawnattr_setsigdefault(&mut self.0, &pipe))?;
            let mut flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            if own_group {
                // setpgid(0, 0) in the child before exec: the group exists
                // before posix_spawn returns, so anyone may signal it at once.
                check(libc::posix_spawnattr_setpgroup(&mut self.0, 0))?;
                flags |= libc::POSIX_SPAWN_SETPGROUP;
            }
            check(libc::posix_spawnattr_setflags(
                &mut self.0,
                flags as libc::c_short,
            ))
        }
    }
}

impl Drop for Attr {
    fn drop(&mut self) {
        // SAFETY: initialised in `new`, destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}
