//! How a worker is started (docs/exec.md#running-a-stage): `cli-wrapper` runs
//! the wrapper as exec's child in its own process group; `pane` runs it in a
//! pane of the terminal multiplexer okstra itself runs in, so a person can
//! watch it. Both start the same wrapper executable ([`super::WorkerExe`]):
//! `okstra-worker` beside the running okstra, or `okstra worker` where there is
//! none.
//!
//! The multiplexer is detected once per exec ([`detect`]), never mid-run:
//! tmux when `$TMUX` is set and the server answers; cmux when
//! `$CMUX_WORKSPACE_ID` / `$CMUX_SOCKET_PATH` is set and `cmux ping`
//! answers. Anywhere else a `pane` job degrades to `cli-wrapper` and its
//! dispatch row and events record `degradedFrom: "pane"`.
//!
//! A worker in a pane is not exec's child. It runs a launcher script (in the
//! temp directory, never in the project, removed by itself once read) that
//! restores exec's environment, enters the project root and runs the wrapper
//! with its output teed to `<prompt>.log`. Exec learns a pid to watch (the
//! pane's process for tmux; the wrapper's, from the status sidecar, for
//! cmux), polls it for exit and takes the exit code from the status sidecar;
//! idleness is judged from the log as for any worker; stopping signals the
//! pid's process group.

use crate::process;
use crate::worker::SidecarState;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The multiplexer a `pane` job runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pane {
    /// The tmux session to open windows in (`#{session_id}`).
    Tmux {
        session: String,
    },
    Cmux,
}

impl Pane {
    pub fn name(&self) -> &'static str {
        match self {
            Pane::Tmux { .. } => "tmux",
            Pane::Cmux => "cmux",
        }
    }
}

/// The multiplexer okstra runs in, if any answers. Called once per exec.
pub fn detect() -> Option<Pane> {
    if std::env::var_os("TMUX").is_some_and(|v| !v.is_empty()) {
        let mut args = vec!["display-message", "-p"];
        let pane = std::env::var("TMUX_PANE").unwrap_or_default();
        if !pane.is_empty() {
            args.extend(["-t", pane.as_str()]);
        }
        args.push("#{session_id}");
        if let Some(out) = answer("tmux", &args) {
            let session = out.trim().to_string();
            if !session.is_empty() {
                return Some(Pane::Tmux { session });
            }
        }
    }
    let in_cmux = ["CMUX_WORKSPACE_ID", "CMUX_SOCKET_PATH"]
        .iter()
        .any(|k| std::env::var_os(k).is_some_and(|v| !v.is_empty()));
    if in_cmux && answer("cmux", &["ping"]).is_some() {
        return Some(Pane::Cmux);
    }
    None
}

/// stdout of a command that exited 0 within a few seconds.
fn answer(program: &str, args: &[&str]) -> Option<String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let mut out = String::new();
    use std::io::Read;
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out)
}

/// One worker to start in a pane.
pub struct PaneLaunch<'a> {
    pub argv: &'a [String],
    pub cwd: &'a Path,
    /// Added to exec's own environment.
    pub env: &'a [(String, String)],
    pub log: &'a Path,
    pub status: &'a Path,
    /// The execution label, or `<workerId>-worker`.
    pub title: &'a str,
}

/// Start the worker in a pane, held at its gate (a FIFO the launcher feeds
/// the wrapper's stdin from); the pid exec watches, and the gate. A thread
/// sends its exit notice through `notices` once it ended, as for a child.
pub fn launch(
    pane: &Pane,
    spec: &PaneLaunch,
    notices: &crate::exec::notices::NoticeSender,
) -> io::Result<(u32, crate::process::Gate)> {
    let (gate, fifo) = gate_fifo()?;
    let script = write_launcher(spec, &fifo)?;
    let script_arg = script.display().to_string();
    let started = match pane {
        Pane::Tmux { session } => tmux_launch(session, spec, &script_arg),
        Pane::Cmux => cmux_launch(spec, &script_arg),
    };
    let pid = match started {
        Ok(pid) => pid,
        Err(e) => {
            let _ = std::fs::remove_file(&script);
            return Err(e);
        }
    };
    let status = spec.status.to_path_buf();
    let notices = notices.clone();
    std::thread::spawn(move || {
        let code = watch_pid(pid, &status);
        notices.send(pid, code);
        drop(fifo);
    });
    Ok((pid, gate))
}

/// A FIFO in a private temporary directory, opened for reading and writing
/// (which never blocks), as a gate: the pane's shell feeds the wrapper's
/// stdin from it. The directory goes when the returned guard drops.
fn gate_fifo() -> io::Result<(crate::process::Gate, FifoDir)> {
    let dir = tempfile::Builder::new().prefix("okstra-gate-").tempdir()?;
    let path = dir.path().join("gate");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::RUSR | rustix::fs::Mode::WUSR,
        0,
    )?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    Ok((crate::process::Gate::new(file), FifoDir { dir, path }))
}

/// The private directory of a pane's gate FIFO.
struct FifoDir {
    #[allow(dead_code)]
    dir: tempfile::TempDir,
    path: PathBuf,
}

fn tmux_launch(session: &str, spec: &PaneLaunch, script: &str) -> io::Result<u32> {
    let target = format!("{session}:");
    let cwd = spec.cwd.display().to_string();
    let out = run(
        "tmux",
        &[
            "new-window",
            "-d",
            "-P",
            "-F",
            "#{pane_pid} #{pane_id}",
            "-t",
            &target,
            "-n",
            spec.title,
            "-c",
            &cwd,
            "sh",
            script,
        ],
    )?;
    let mut parts = out.split_whitespace();
    let pid: u32 = parts
        .next()
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| other(format!("tmux new-window printed `{}`", out.trim())))?;
    if let Some(pane_id) = parts.next() {
        // The pane title, besides the window name; cosmetic.
        let _ = run("tmux", &["select-pane", "-t", pane_id, "-T", spec.title]);
    }
    Ok(pid)
}

fn cmux_launch(spec: &PaneLaunch, script: &str) -> io::Result<u32> {
    let cwd = spec.cwd.display().to_string();
    let command = format!("exec sh {}", quote(script));
    let out = run(
        "cmux",
        &[
            "new-surface",
            "--type",
            "terminal",
            "--working-directory",
            &cwd,
            "--command",
            &command,
        ],
    )?;
    if let Some(surface) = out.split_whitespace().find(|w| w.starts_with("surface:")) {
        let _ = run("cmux", &["rename-tab", "--surface", surface, spec.title]);
    }
    // cmux names no process: the wrapper's pid comes from its status sidecar.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pid = crate::worker::StatusSidecar::read(spec.status).and_then(|d| d.wrapper_pid);
        if let Some(pid) = pid {
            return Ok(pid);
        }
        if Instant::now() >= deadline {
            return Err(other(
                "the cmux surface did not start the worker within 30 s".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run(program: &str, args: &[&str]) -> io::Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        return Err(other(format!(
            "`{program} {}` failed: {}",
            args.first().copied().unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn other(msg: String) -> io::Error {
    io::Error::other(msg)
}

/// `'...'` for sh.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Exec's environment, the job's additions, the working directory and the
/// teed wrapper command, as an sh script that deletes itself once read.
fn write_launcher(spec: &PaneLaunch, gate: &FifoDir) -> io::Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut text = String::from("# okstra pane launcher\nrm -f \"$0\"\n");
    let valid = |k: &str| {
        !k.is_empty()
            && !k.starts_with(|c: char| c.is_ascii_digit())
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let mut vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        // The pane's own tmux/cmux identity stays the pane's.
        .filter(|(k, _)| !matches!(k.as_str(), "TMUX_PANE" | "CMUX_SURFACE_ID" | "PWD"))
        .collect();
    vars.extend(spec.env.iter().cloned());
    for (k, v) in vars.iter().filter(|(k, _)| valid(k)) {
        text.push_str(&format!("export {k}={}\n", quote(v)));
    }
    text.push_str(&format!(
        "cd {} || exit 1\n",
        quote(&spec.cwd.display().to_string())
    ));
    // The pane's title (OSC 2), set before anything runs in it.
    let title: String = spec.title.chars().filter(|c| !c.is_control()).collect();
    text.push_str(&format!("printf '\\033]2;%s\\033\\\\' {}\n", quote(&title)));
    let argv: Vec<String> = spec.argv.iter().map(|a| quote(a)).collect();
    text.push_str(&format!(
        "{} < {} 2>&1 | tee -a {}\n",
        argv.join(" "),
        quote(&gate.path.display().to_string()),
        quote(&spec.log.display().to_string())
    ));
    let path = std::env::temp_dir().join(format!("okstra-pane-{}.sh", uuid::Uuid::new_v4()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(text.as_bytes())?;
    Ok(path)
}

/// Wait for a wrapper an earlier exec started (not our child): poll until
/// it is gone; its exit code from the status sidecar (1 when it recorded
/// none).
pub fn watch_foreign(pid: u32, pid_start: Option<u64>, status: &Path) -> i32 {
    while crate::process::same_process_alive(pid, pid_start) {
        std::thread::sleep(Duration::from_millis(100));
    }
    recorded_exit(status)
}

/// The exit code the wrapper recorded in its status sidecar; 1 where it
/// recorded none.
fn recorded_exit(status: &Path) -> i32 {
    crate::worker::StatusSidecar::read(status)
        .and_then(|d| d.exited_with())
        .unwrap_or(1)
}

/// How long a pane's stragglers get between SIGTERM and SIGKILL.
const STRAGGLER_GRACE: Duration = Duration::from_secs(2);

/// Wait for a process that is not our child; its exit code from the status
/// sidecar (1 when the wrapper recorded none).
fn watch_pid(pid: u32, status: &Path) -> i32 {
    let mut exited_at: Option<Instant> = None;
    loop {
        let doc = crate::worker::StatusSidecar::read(status);
        let exited = doc.is_some_and(|d| d.state == SidecarState::Exited);
        if exited && exited_at.is_none() {
            exited_at = Some(Instant::now());
        }
        // The pane's shell outlives the wrapper by a moment (tee draining);
        // anything still in the pane's group a second after the wrapper
        // recorded its exit is a straggler of this worker (a grandchild the
        // stopped CLI left behind, holding the pipe open): stop it.
        let since = exited_at.map(|t| t.elapsed()).unwrap_or_default();
        if since > Duration::from_secs(1) && process::pid_alive(pid) {
            let target = process::StopTarget::group_of(pid);
            process::stop_all(&[target], STRAGGLER_GRACE, &mut process::NotOurChildren);
        }
        let lingering = since > Duration::from_secs(5);
        if !process::pid_alive(pid) || lingering {
            return recorded_exit(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::super::WorkerExe;
    use super::*;

    #[test]
    fn the_lean_wrapper_beside_okstra_runs_the_plans_wrapper_command() {
        let dir = tempfile::tempdir().unwrap();
        let okstra = dir.path().join("okstra");
        let planned: Vec<String> = ["okstra", "worker", "--attempt", "1", "--", "okstra", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let tail = &planned[2..];
        // None beside it: `okstra worker`.
        let exe = WorkerExe::beside(&okstra);
        assert_eq!(exe.lean(), None);
        assert_eq!(exe.argv(&planned)[0], okstra.display().to_string());
        assert_eq!(&exe.argv(&planned)[1..], &planned[1..]);
        // Not executable: still `okstra worker`.
        let lean = dir.path().join("okstra-worker");
        std::fs::write(&lean, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&lean, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(WorkerExe::beside(&okstra).lean(), None);
        // Executable: `okstra-worker`, the same arguments after it.
        std::fs::set_permissions(&lean, std::fs::Permissions::from_mode(0o755)).unwrap();
        let exe = WorkerExe::beside(&okstra);
        assert_eq!(exe.lean(), Some(lean.as_path()));
        let argv = exe.argv(&planned);
        assert_eq!(argv[0], lean.display().to_string());
        assert_eq!(&argv[1..], tail);
        // Another okstra command runs under okstra; anything else as it is.
        let other: Vec<String> = vec!["okstra".into(), "status".into()];
        assert_eq!(
            exe.argv(&other),
            [okstra.display().to_string(), "status".into()]
        );
        let plain: Vec<String> = vec!["sh".into(), "-c".into(), "true".into()];
        assert_eq!(exe.argv(&plain), plain);
        assert_eq!(WorkerExe::subcommand(&okstra).argv(&planned)[1], "worker");
    }

    #[test]
    fn quoting_survives_the_shell() {
        assert_eq!(quote("a'b"), "'a'\\''b'");
        let out = Command::new("sh")
            .args(["-c", &format!("printf %s {}", quote("it's $HOME"))])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "it's $HOME");
    }

    #[test]
    fn launcher_runs_the_argv_in_cwd_with_env_and_tees_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("w.log");
        let argv: Vec<String> = ["sh", "-c", "echo \"$OKSTRA_TEST_X $(pwd)\"; echo err >&2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let env = vec![("OKSTRA_TEST_X".to_string(), "x'y".to_string())];
        let (mut gate, fifo) = gate_fifo().unwrap();
        let script = write_launcher(
            &PaneLaunch {
                argv: &argv,
                cwd: dir.path(),
                env: &env,
                log: &log,
                status: &dir.path().join("s.json"),
                title: "t",
            },
            &fifo,
        )
        .unwrap();
        gate.release().unwrap();
        let out = Command::new("sh").arg(&script).output().unwrap();
        assert!(out.status.success());
        assert!(!script.exists(), "the launcher removes itself");
        let text = std::fs::read_to_string(&log).unwrap();
        let cwd = dir.path().canonicalize().unwrap();
        assert!(text.contains(&format!("x'y {}", cwd.display())), "{text}");
        assert!(text.contains("err"));
    }

    #[test]
    fn watch_pid_takes_the_code_from_the_status_sidecar() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("s.json");
        std::fs::write(&status, r#"{"state":"exited","exitCode":7}"#).unwrap();
        // A pid that is not alive.
        assert_eq!(watch_pid(u32::MAX, &status), 7);
        std::fs::write(&status, r#"{"state":"running"}"#).unwrap();
        assert_eq!(watch_pid(u32::MAX, &status), 1);
    }

    /// An exit code no `i32` holds is no code: 1, as for one never
    /// recorded, and not 2^32 wrapped to 0 (a success), on both watches.
    #[test]
    fn an_exit_code_out_of_range_reads_as_none_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let status = dir.path().join("s.json");
        std::fs::write(&status, r#"{"state":"exited","exitCode":4294967296}"#).unwrap();
        assert_eq!(watch_pid(u32::MAX, &status), 1);
        assert_eq!(watch_foreign(u32::MAX, None, &status), 1);
        std::fs::write(&status, r#"{"state":"exited","exitCode":-2147483648}"#).unwrap();
        assert_eq!(watch_foreign(u32::MAX, None, &status), i32::MIN);
    }
}
