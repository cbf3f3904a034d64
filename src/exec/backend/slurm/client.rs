//! Calling a Slurm client (`sbatch`, `squeue`, `scancel`, ...): in a
//! process group of its own, its output read whole, within a time limit.

use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Slurm client that does not answer within this long is killed and its
/// call counted as failed: a hung controller must not hang the run.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a Slurm client said.
pub struct Output {
    pub ok: bool,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// `<tool> exited N: <what it said>` on one line, for an error message
    /// (its `<tool>: error: ` prefixes dropped).
    pub fn failure(&self, tool: &str) -> String {
        let text = if self.stderr.trim().is_empty() {
            &self.stdout
        } else {
            &self.stderr
        };
        let prefix = format!("{tool}: error: ");
        let said = text
            .lines()
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map(|l| l.strip_prefix(&prefix).unwrap_or(l))
            .collect::<Vec<_>>()
            .join("; ");
        match self.code {
            Some(c) => format!("{tool} exited {c}: {said}"),
            None => format!("{tool} was killed: {said}"),
        }
    }
}

/// Run a Slurm client with `stdin`, within `CLIENT_TIMEOUT`. It runs in a
/// process group of its own, so a Ctrl-C meant for exec does not cut an
/// `sbatch` between submitting and printing the job's id.
pub fn client(tool: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<Output, String> {
    let mut child = start_client(tool, args, stdin)?;
    // Both pipes are drained on threads of their own, so a client that
    // writes much to one while we read the other cannot stall.
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_within(&mut child, tool, CLIENT_TIMEOUT)?;
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    let Some(status) = status else {
        stderr.push_str(&format!(
            "(no answer within {} s; killed)",
            CLIENT_TIMEOUT.as_secs()
        ));
        return Ok(Output {
            ok: false,
            code: None,
            stdout,
            stderr,
        });
    };
    Ok(Output {
        ok: status.success(),
        code: status.code(),
        stdout,
        stderr,
    })
}

/// Start `tool` in a process group of its own, its output piped, and hand
/// it `stdin`.
fn start_client(tool: &str, args: &[&str], stdin: Option<&[u8]>) -> Result<Child, String> {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                format!("`{tool}` is not on PATH (is this a Slurm login node?)")
            }
            _ => format!("cannot start `{tool}`: {e}"),
        })?;
    if let (Some(bytes), Some(mut input)) = (stdin, child.stdin.take()) {
        input
            .write_all(bytes)
            .map_err(|e| format!("cannot write to `{tool}`: {e}"))?;
    }
    Ok(child)
}

/// Read a client's pipe to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_string(&mut text);
        }
        text
    })
}

/// How `child` (the client `tool`) ended, waiting at most `timeout`;
/// `None`: it did not end in time, and was killed.
fn wait_within(
    child: &mut Child,
    tool: &str,
    timeout: Duration,
) -> Result<Option<std::process::ExitStatus>, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(Some(status)),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => {
                let pid = child.id();
                return Err(format!("cannot wait for `{tool}` (pid {pid}): {e}"));
            }
        }
    }
}
