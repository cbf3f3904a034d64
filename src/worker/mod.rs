//! The worker wrapper around one provider CLI run
//! (docs/providers.md#the-worker-wrapper): the program `okstra-worker`
//! (src/bin/okstra-worker.rs), and the same code as `okstra worker`. exec runs
//! `cli-wrapper` attempts through a few of them started as slots
//! (`okstra-worker --serve`, see `slot`), each running attempt after attempt; a
//! pane, a Slurm job or a person starts one per attempt.
//!
//! It runs the provider's argv with the prompt on stdin (eager include), in
//! the project root, with the `OKSTRA_*` environment; keeps
//! `<prompt>.status.json` current (a heartbeat every two seconds while the
//! child runs, the exit code and duration once it ended); enforces the
//! wall-clock timeout; stops a CLI at its first report that it retries a
//! request the API refused for its credentials
//! (docs/providers.md#the-worker-wrapper: claude would retry for minutes); and
//! exits with the child's code.
//!
//! The wrapper does not redirect the child's output: exec already points the
//! wrapper's stdout and stderr at `<prompt>.log`, and by hand the terminal is
//! the right place. The child stays in the wrapper's process group, so exec
//! stopping the wrapper's group stops the agent with it.
//!
//! With `--gated` the wrapper first waits for exec's go (one byte on stdin,
//! docs/exec.md#crash-safety-and-resume), and once released records
//! `state: "running"` before it starts the child. It never panics on a failed
//! write: its stderr is the job's log, which may sit on a full disk.
//!
//! The rooms: this file is the entry (arguments, the gate, signals);
//! `attempt` checks, starts and judges one attempt; `supervise` watches its
//! child; `status` is the sidecar; `output` reads what the CLI prints;
//! `confined` (with `starter`) confines it; `slot` serves attempt after
//! attempt.

pub mod args;
mod attempt;
mod confined;
mod output;
mod private;
mod slot;
mod starter;
mod status;
mod supervise;
#[cfg(test)]
mod tests;

pub use args::{Presentation, WorkerArgs};
pub use slot::{SERVE_FLAG, SLOT_VAR};
pub use status::{SidecarState, StatusSidecar};

use crate::diag::WrapperExit;
use attempt::execute;
use confined::Ahead;
use std::io::{self, Read, Write};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

/// What `okstra worker --help` and `okstra-worker --help` say it is.
pub const ABOUT: &str = "The built-in worker wrapper (started by `okstra exec`)";

/// The wrapper as a program of its own, named `bin_name`: the process's
/// arguments read by clap (its help and errors on a bad one), then [`run`].
pub fn main(bin_name: &'static str) -> std::process::ExitCode {
    let mut raw = std::env::args_os().skip(1);
    if let (Some(flag), None) = (raw.next(), raw.next()) {
        if flag == SERVE_FLAG {
            return exit_code(serve(bin_name));
        }
    }
    match args::parse(bin_name, std::env::args_os().skip(1)) {
        Ok(args) => exit_code(run(&args)),
        // Help and version too: clap prints them, and says how it ended.
        Err(e) => {
            let _ = e.print();
            exit_code(e.exit_code())
        }
    }
}

fn exit_code(code: i32) -> std::process::ExitCode {
    u8::try_from(code).map_or(
        std::process::ExitCode::FAILURE,
        std::process::ExitCode::from,
    )
}

/// Run as a slot (see `slot`): attempt after attempt, as exec sends them.
pub fn serve(bin_name: &'static str) -> i32 {
    slot::serve(bin_name, Timing::REAL)
}

/// Run the wrapper; its exit code. SIGTERM or SIGINT to the wrapper stops the
/// child (SIGTERM, grace, SIGKILL) and the wrapper exits with the child's code.
pub fn run(args: &WorkerArgs) -> i32 {
    // What confining the child needs and makes nothing, done while a gated
    // wrapper waits (see `Ahead`).
    let ahead = Ahead::make(args);
    // Before anything else, even the signal handlers: a gated wrapper that
    // exec stops while it waits just dies, having done nothing.
    if args.gated && !released(&mut io::stdin()) {
        return WrapperExit::NeverReleased.code();
    }
    let (stop, _signals) = match SignalGuard::stop_flag() {
        Ok(installed) => installed,
        Err(exit) => return exit.code(),
    };
    execute(args, &stop, Timing::REAL, ahead, None)
}

/// Whether exec let this attempt go: one byte read from `gate` (stdin).
/// End of input, or an error reading it, means exec closed the pipe (or
/// died) without releasing it.
fn released(gate: &mut impl Read) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match gate.read(&mut byte) {
            Ok(n) => return n == 1,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return false,
        }
    }
}

/// A line on stderr, prefixed as the wrapper's. stderr is usually the job's
/// log: a failed write there (a full disk) is let go, never a panic.
fn say(message: std::fmt::Arguments) {
    let _ = writeln!(io::stderr(), "okstra worker: {message}");
}

/// The wrapper's clocks, given to `execute` so tests can shorten them.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// Between SIGTERM and SIGKILL when the wrapper stops its child.
    grace: Duration,
    /// Between refreshes of the status sidecar's `heartbeatAt`.
    heartbeat: Duration,
}

impl Timing {
    const REAL: Timing = Timing {
        grace: Duration::from_secs(5),
        heartbeat: Duration::from_secs(2),
    };
}

/// Signal handlers that set a flag, removed again when dropped.
struct SignalGuard(Vec<signal_hook::SigId>);

impl SignalGuard {
    /// A flag SIGTERM and SIGINT set, with its handlers; where they cannot
    /// be installed, the wrapper says so and exits as given.
    fn stop_flag() -> Result<(Arc<AtomicBool>, SignalGuard), WrapperExit> {
        let stop = Arc::new(AtomicBool::new(false));
        match SignalGuard::install(&stop) {
            Ok(guard) => Ok((stop, guard)),
            Err(err) => {
                say(format_args!("cannot install signal handlers: {err}"));
                Err(WrapperExit::Usage)
            }
        }
    }

    fn install(flag: &Arc<AtomicBool>) -> io::Result<SignalGuard> {
        let mut ids = Vec::new();
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            ids.push(signal_hook::flag::register(sig, Arc::clone(flag))?);
        }
        Ok(SignalGuard(ids))
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}
