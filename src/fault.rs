//! Fault injection for the crash tests (docs/exec.md#crash-safety-and-resume).
//!
//! Every durable write and every launch of `okstra exec` passes through a
//! named [`point`]. In a debug build (what `cargo test` builds), two variables
//! drive them:
//! - `OKSTRA_FAULT_TRACE=<file>`: each point reached appends its name to the
//!   file, so a test learns how many points a run passes and in what order;
//! - `OKSTRA_FAULT_AT=<n>`: the n-th point reached (1-based, counted over
//!   the whole process) kills the process on the spot with SIGKILL, as a
//!   power cut or `kill -9` would stop it: no destructor, no flush, no exit
//!   handler.
//!
//! - `OKSTRA_FAULT_PAUSE=<name>@<k>` with `OKSTRA_FAULT_PAUSE_DIR=<dir>`: the
//!   k-th time the point `name` is reached, exec creates `<dir>/reached` and
//!   waits (at most a minute) until `<dir>/go` exists, so a test acts at
//!   that instant of the run without racing a clock.
//!
//! A third, `OKSTRA_FAULT_FAIL=<name>`, makes every [`fails`] of that name
//! answer an I/O error, as a failing disk would (`EIO`), so a test sees
//! what exec does with an error no full disk produces.
//!
//! A release build compiles every point to nothing.

#[cfg(debug_assertions)]
static ARMED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Make this process's points live: exec calls it, so that the points it
/// shares with the wrapper (the durable-write helpers) fire in exec alone.
pub fn arm() {
    #[cfg(debug_assertions)]
    ARMED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// A place where the executor may be stopped for a test.
#[cfg(debug_assertions)]
pub fn point(name: &'static str) {
    use std::io::Write as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;

    if !ARMED.load(Ordering::SeqCst) {
        return;
    }

    struct Setting {
        at: Option<u64>,
        trace: Option<std::path::PathBuf>,
        pause: Option<(String, u64, std::path::PathBuf)>,
    }
    static SETTING: OnceLock<Setting> = OnceLock::new();
    static REACHED: AtomicU64 = AtomicU64::new(0);

    let setting = SETTING.get_or_init(|| Setting {
        at: std::env::var("OKSTRA_FAULT_AT")
            .ok()
            .and_then(|v| v.parse().ok()),
        trace: std::env::var_os("OKSTRA_FAULT_TRACE").map(Into::into),
        pause: pause_setting(),
    });
    if let Some((at, k, dir)) = &setting.pause {
        static PAUSE_REACHED: AtomicU64 = AtomicU64::new(0);
        if at == name && PAUSE_REACHED.fetch_add(1, Ordering::SeqCst) + 1 == *k {
            pause(dir);
        }
    }
    if setting.at.is_none() && setting.trace.is_none() {
        return;
    }
    let n = REACHED.fetch_add(1, Ordering::SeqCst) + 1;
    if let Some(trace) = &setting.trace {
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(trace)
        {
            let _ = writeln!(file, "{n} {name}");
        }
    }
    if setting.at == Some(n) {
        // SIGKILL, as `kill -9` would: no handler, no flush, no core file.
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::process::abort();
    }
}

/// `OKSTRA_FAULT_PAUSE=<name>@<k>` and `OKSTRA_FAULT_PAUSE_DIR`, when both
/// are set and read.
#[cfg(debug_assertions)]
fn pause_setting() -> Option<(String, u64, std::path::PathBuf)> {
    let spec = std::env::var("OKSTRA_FAULT_PAUSE").ok()?;
    let (name, k) = spec.rsplit_once('@')?;
    let dir = std::env::var_os("OKSTRA_FAULT_PAUSE_DIR")?;
    Some((name.to_string(), k.parse().ok()?, dir.into()))
}

/// Say the pause point was reached, and wait for the test's go.
#[cfg(debug_assertions)]
fn pause(dir: &std::path::Path) {
    let _ = std::fs::write(dir.join("reached"), b"");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !dir.join("go").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn point(_name: &'static str) {}

/// A place where a wrapper (not exec: its points are [`point`]s) dies for
/// a test, as `kill -9` would stop it there: in a debug build, where
/// `OKSTRA_FAULT_DIE=<name>` names it.
#[cfg(debug_assertions)]
pub fn die_at(name: &'static str) {
    if std::env::var("OKSTRA_FAULT_DIE").is_ok_and(|v| v == name) {
        let _ =
            rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn die_at(_name: &'static str) {}

/// An injected failure at the point `name`: `Err(EIO)` where the test
/// asked for one (`OKSTRA_FAULT_FAIL=<name>`), else `Ok`.
#[cfg(debug_assertions)]
pub fn fails(name: &'static str) -> std::io::Result<()> {
    use std::sync::atomic::Ordering;
    use std::sync::OnceLock;

    static FAIL: OnceLock<Option<String>> = OnceLock::new();
    if !ARMED.load(Ordering::SeqCst) {
        return Ok(());
    }
    match FAIL.get_or_init(|| std::env::var("OKSTRA_FAULT_FAIL").ok()) {
        Some(wanted) if wanted == name => Err(rustix::io::Errno::IO.into()),
        _ => Ok(()),
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn fails(_name: &'static str) -> std::io::Result<()> {
    Ok(())
}
