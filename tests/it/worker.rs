//! The wrapper run as exec runs it: `okstra-worker` (what exec starts when
//! it is installed beside okstra) and `okstra worker` (the same code, the
//! fallback), each on exec's command line; gated, as exec will start it
//! (docs/exec.md#crash-safety-and-resume); and on a disk that cannot take its
//! status file.

use crate::common::Project;
use okstra::process::{self, SpawnSpec};
use serde_json::Value;
use std::process::{Command, Stdio};

/// The wrapper's two programs: `okstra-worker ...` and `okstra worker ...`.
fn wrappers() -> [Command; 2] {
    let mut sub = Command::new(env!("CARGO_BIN_EXE_okstra"));
    sub.arg("worker");
    [Command::new(env!("CARGO_BIN_EXE_okstra-worker")), sub]
}

/// The command line of `okstra-worker` / `okstra worker` (`cmd`) for
/// attempt `attempt` of a `command` job running `script` in project `p`,
/// as exec writes it.
fn exec_form(mut cmd: Command, p: &Project, attempt: &str, script: &str) -> Command {
    cmd.arg("--project-root")
        .arg(p.root())
        .args(["--provider", "command", "--model", "m"])
        .args(["--prompt", "prompts/w.md", "--result", "results/w.md"])
        .args(["--worker-result", "results/w.md", "--worker-key", "w"])
        .args(["--presentation", "quiet", "--attempt", attempt])
        .args(["--dispatch-id", "inv-w:attempt-1", "--", "sh", "-c", script])
        .current_dir(p.root());
    cmd
}

fn project() -> Project {
    let p = Project::new();
    p.write("prompts/w.md", "the prompt\n");
    std::fs::create_dir_all(p.path("results")).unwrap();
    p
}

fn status(p: &Project) -> Value {
    p.read_json("prompts/w.md.status.json")
}

#[test]
fn the_wrapper_runs_execs_command_line_and_exits_with_the_childs_code() {
    for cmd in wrappers() {
        let p = project();
        let out = exec_form(cmd, &p, "1", r#"cat > "$OKSTRA_RESULT_PATH"; exit 3"#)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{out:?}");
        assert_eq!(p.read("results/w.md"), "the prompt\n");
        let s = status(&p);
        assert_eq!(s["state"], "exited");
        assert_eq!(s["exitCode"], 3);
        assert_eq!(s["attempt"], 1);
        assert_eq!(s["dispatchId"], "inv-w:attempt-1");
    }
}

#[test]
fn the_child_gets_open_standard_streams_when_the_wrappers_were_closed() {
    for cmd in wrappers() {
        let p = project();
        // The child checks its own descriptors 1 and 2 (inherited from the
        // wrapper); the wrapper was started with 0, 1 and 2 closed.
        let script = r#"{ [ -e /proc/self/fd/1 ] && [ -e /proc/self/fd/2 ] && echo open || echo closed; } > "$OKSTRA_RESULT_PATH" 2>/dev/null; echo to-stdout; echo to-stderr >&2"#;
        let inner = exec_form(cmd, &p, "1", script);
        let mut argv: Vec<String> = vec![inner.get_program().to_string_lossy().into_owned()];
        argv.extend(inner.get_args().map(|a| a.to_string_lossy().into_owned()));
        let out = Command::new("sh")
            .arg("-c")
            .arg(r#"exec "$@" <&- >&- 2>&-"#)
            .arg("sh")
            .args(&argv)
            .current_dir(p.root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(p.read("results/w.md"), "open\n");
        // The child's output went to /dev/null, not into a file the wrapper
        // opened on a free low descriptor.
        let s = status(&p);
        assert_eq!(s["exitCode"], 0);
        assert_eq!(s["state"], "exited");
    }
}

#[test]
fn help_and_bad_arguments_get_claps() {
    let help = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["worker", "--help"])
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: okstra worker [OPTIONS] --project-root <PATH>"),
        "{text}"
    );
    let help = Command::new(env!("CARGO_BIN_EXE_okstra-worker"))
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(
        text.contains("Usage: okstra-worker [OPTIONS] --project-root <PATH>"),
        "{text}"
    );

    for cmd in wrappers() {
        let p = project();
        let out = exec_form(cmd, &p, "0", "exit 0").output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--attempt <N>"), "{err}");
        assert!(!p.exists("prompts/w.md.status.json"));
    }
}

#[test]
fn a_command_that_cannot_be_executed_exits_126_and_one_not_found_127() {
    let p = project();
    p.write("not-executable.sh", "#!/bin/sh\nexit 0\n");
    for (program, code, says) in [
        ("./not-executable.sh", 126, "permission denied"),
        ("okstra-no-such-program", 127, "command not found"),
    ] {
        for mut cmd in wrappers() {
            cmd.arg("--project-root")
                .arg(p.root())
                .args(["--provider", "command", "--prompt", "prompts/w.md"])
                .args([
                    "--result",
                    "results/w.md",
                    "--worker-result",
                    "results/w.md",
                ])
                .args(["--worker-key", "w", "--", program])
                .current_dir(p.root());
            let out = cmd.output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{program}: {err}");
            assert!(err.contains(says), "{program}: {err}");
            let s = status(&p);
            assert_eq!(s["exitCode"], code);
            assert!(s["error"].as_str().unwrap().contains(program), "{s}");
        }
    }
}

/// exec's form of `okstra-worker --gated ...` as argv, the command writing
/// `ran` and then checking the sidecar said `running` before it started.
fn gated_argv(p: &Project) -> Vec<String> {
    let script =
        r#"grep -q '"state": "running"' prompts/w.md.status.json && echo ran > results/w.md"#;
    let cmd = exec_form(
        Command::new(env!("CARGO_BIN_EXE_okstra-worker")),
        p,
        "1",
        script,
    );
    let mut argv = vec![cmd.get_program().to_string_lossy().into_owned()];
    argv.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    argv.insert(1, "--gated".into());
    argv
}

#[test]
fn a_gated_wrapper_released_records_running_then_runs() {
    let p = project();
    let argv = gated_argv(&p);
    let log = p.path("prompts/w.md.log");
    let spec = SpawnSpec {
        argv: &argv,
        cwd: p.root(),
        env: &[],
        log: Some(process::Log::Path(&log)),
        stdin: None,
    };
    let (mut child, mut gate) = process::spawn_gated(&spec).unwrap();
    // Held at the gate: nothing written yet.
    assert!(!p.exists("prompts/w.md.status.json"));
    gate.release().unwrap();
    assert_eq!(child.wait().unwrap(), 0, "{}", p.read("prompts/w.md.log"));
    assert_eq!(p.read("results/w.md"), "ran\n");
    let s = status(&p);
    assert_eq!(s["state"], "exited");
    assert_eq!(s["exitCode"], 0);
    assert_eq!(s["wrapperPid"], child.pid());
}

#[test]
fn a_gated_wrapper_never_released_exits_75_having_done_nothing() {
    let p = project();
    let argv = gated_argv(&p);
    let log = p.path("prompts/w.md.log");
    let spec = SpawnSpec {
        argv: &argv,
        cwd: p.root(),
        env: &[],
        log: Some(process::Log::Path(&log)),
        stdin: None,
    };
    let (mut child, gate) = process::spawn_gated(&spec).unwrap();
    drop(gate);
    assert_eq!(
        child.wait().unwrap(),
        okstra::diag::WrapperExit::NeverReleased.code()
    );
    assert!(!p.exists("prompts/w.md.status.json"));
    assert!(!p.exists("results/w.md"), "the command never ran");
    assert_eq!(p.read("prompts/w.md.log"), "", "nothing said either");
}

#[test]
fn a_status_file_that_cannot_be_written_is_a_clear_failure_not_a_panic() {
    for cmd in wrappers() {
        let p = project();
        // A directory where the sidecar goes: every write of it fails, as
        // on a full disk.
        p.write("prompts/w.md.status.json/keep", "");
        let out = exec_form(cmd, &p, "1", "echo ran > results/w.md")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{err}");
        assert!(err.contains("cannot write the status file"), "{err}");
        assert!(err.contains("could not be recorded"), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(p.read("results/w.md"), "ran\n");
    }
    // Gated, the attempt does not start without its `running` record.
    let p = project();
    p.write("prompts/w.md.status.json/keep", "");
    let argv = gated_argv(&p);
    let log = p.path("prompts/w.md.log");
    let spec = SpawnSpec {
        argv: &argv,
        cwd: p.root(),
        env: &[],
        log: Some(process::Log::Path(&log)),
        stdin: None,
    };
    let (mut child, mut gate) = process::spawn_gated(&spec).unwrap();
    gate.release().unwrap();
    assert_eq!(child.wait().unwrap(), 74);
    assert!(!p.exists("results/w.md"), "not started");
    let said = p.read("prompts/w.md.log");
    assert!(said.contains("not starting command"), "{said}");
}

#[test]
fn a_full_disk_under_stderr_too_ends_in_an_exit_code_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    for cmd in wrappers() {
        let p = project();
        p.write("prompts/w.md.status.json/keep", "");
        // stderr, where the wrapper says what went wrong, is full as well.
        let out = exec_form(cmd, &p, "1", "exit 0")
            .stderr(Stdio::from(full.try_clone().unwrap()))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(74), "{out:?}");
    }
}

#[test]
fn the_wrapper_never_writes_its_sidecar_through_a_symlink() {
    // A link planted at the sidecar, or at the directory holding it, to
    // somewhere outside the project: the wrapper's writes are refused (it
    // exits 74, its child's success unrecorded), and nothing outside moves.
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.json");
    for cmd in wrappers() {
        let p = project();
        std::fs::write(&victim, "keep\n").unwrap();
        std::os::unix::fs::symlink(&victim, p.path("prompts/w.md.status.json")).unwrap();
        let out = exec_form(cmd, &p, "1", "echo ran > results/w.md")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{err}");
        assert!(err.contains("symlink"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
        let link = p.path("prompts/w.md.status.json");
        assert!(
            link.symlink_metadata().unwrap().is_symlink(),
            "left as found"
        );
        let names: Vec<_> = std::fs::read_dir(p.path("prompts")).unwrap().collect();
        assert_eq!(names.len(), 2, "no temporary left: {names:?}");
    }
    for cmd in wrappers() {
        // The prompt's directory itself a link to outside: read through,
        // never written through.
        let p = Project::new();
        let elsewhere = outside.path().join("prompts");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("w.md"), "the prompt\n").unwrap();
        std::os::unix::fs::symlink(&elsewhere, p.path("prompts")).unwrap();
        std::fs::create_dir_all(p.path("results")).unwrap();
        let out = exec_form(cmd, &p, "1", "cat > results/w.md")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{err}");
        assert!(err.contains("symlink"), "{err}");
        assert_eq!(p.read("results/w.md"), "the prompt\n");
        let names: Vec<_> = std::fs::read_dir(&elsewhere).unwrap().collect();
        assert_eq!(names.len(), 1, "nothing written outside: {names:?}");
        std::fs::remove_dir_all(&elsewhere).unwrap();
    }
    // Gated, as exec starts it: the attempt does not start.
    let p = project();
    std::fs::write(&victim, "keep\n").unwrap();
    std::os::unix::fs::symlink(&victim, p.path("prompts/w.md.status.json")).unwrap();
    let argv = gated_argv(&p);
    let log = p.path("prompts/w.md.log");
    let spec = SpawnSpec {
        argv: &argv,
        cwd: p.root(),
        env: &[],
        log: Some(process::Log::Path(&log)),
        stdin: None,
    };
    let (mut child, mut gate) = process::spawn_gated(&spec).unwrap();
    gate.release().unwrap();
    assert_eq!(child.wait().unwrap(), 74);
    assert!(!p.exists("results/w.md"), "not started");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    // The near miss: a plain sidecar left by an earlier run by hand is
    // replaced.
    for cmd in wrappers() {
        let p = project();
        p.write("prompts/w.md.status.json", "{\"state\": \"old\"}\n");
        let out = exec_form(cmd, &p, "1", "exit 0").output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(status(&p)["state"], "exited");
    }
}

/// A wrapper slot's request: `args` as a JSON line, with `fds` as
/// `SCM_RIGHTS` (what exec's slots send, src/exec/backend/slots.rs).
fn send_request(
    socket: &std::os::unix::net::UnixStream,
    args: &[String],
    fds: &[std::os::fd::BorrowedFd],
) {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut line = serde_json::to_vec(args).unwrap();
    line.push(b'\n');
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(2))];
    let mut ancillary = SendAncillaryBuffer::new(&mut space);
    assert!(ancillary.push(SendAncillaryMessage::ScmRights(fds)));
    let n = rustix::net::sendmsg(
        socket,
        &[std::io::IoSlice::new(&line)],
        &mut ancillary,
        SendFlags::empty(),
    )
    .unwrap();
    assert_eq!(n, line.len());
}

/// One answer line from a slot.
fn answer(socket: &std::os::unix::net::UnixStream) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(socket)
        .read_line(&mut line)
        .unwrap();
    line
}

#[test]
fn a_slot_runs_attempt_after_attempt_each_in_its_own_log_and_group() {
    use std::os::fd::AsFd;
    let serve = [
        vec![
            env!("CARGO_BIN_EXE_okstra-worker").to_string(),
            "--serve".into(),
        ],
        vec![
            env!("CARGO_BIN_EXE_okstra").to_string(),
            "worker-slot".into(),
        ],
    ];
    for argv in serve {
        let p = project();
        let slot_log = p.path("slot.log");
        let (mut slot, socket) = process::spawn_with_socket(&SpawnSpec {
            argv: &argv,
            cwd: p.root(),
            env: &[],
            log: Some(process::Log::Path(&slot_log)),
            stdin: None,
        })
        .unwrap();
        let (pids, pids_end) = rustix::pipe::pipe().unwrap();
        let scripts = [
            // Leaves a process in its group, which must not outlive it.
            "echo \"one $(ps -o pgid= -p $$ | tr -d ' ')\"; sleep 60 & echo $! > bg.pid; exit 3",
            "echo two; cat > results/w.md",
        ];
        let mut reported = Vec::new();
        for (i, script) in scripts.iter().enumerate() {
            let cmd = exec_form(
                Command::new("okstra-worker"),
                &p,
                &(i + 1).to_string(),
                script,
            );
            let mut args: Vec<String> = cmd
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            args.insert(0, "--gated".into());
            let log = std::fs::File::create(p.path(&format!("attempt-{i}.log"))).unwrap();
            send_request(&socket, &args, &[log.as_fd(), pids_end.as_fd()]);
            let want = if i == 0 { "exit 3\n" } else { "exit 0\n" };
            assert_eq!(
                answer(&socket),
                want,
                "{argv:?}: {}",
                p.read(&format!("attempt-{i}.log"))
            );
            let mut buf = [0u8; 64];
            let n = rustix::io::read(&pids, &mut buf).unwrap();
            let pid: u32 = std::str::from_utf8(&buf[..n])
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            reported.push(pid);
            let s = status(&p);
            assert_eq!(s["wrapperPid"], slot.pid(), "{argv:?}");
            assert_eq!(s["pid"], pid, "{argv:?}");
        }
        let first = p.read("attempt-0.log");
        assert_eq!(
            first,
            format!("one {}\n", reported[0]),
            "the worker leads its own group"
        );
        assert_eq!(p.read("attempt-1.log"), "two\n");
        assert_eq!(p.read("results/w.md"), "the prompt\n");
        let bg: u32 = p.read("bg.pid").trim().parse().unwrap();
        assert!(
            !okstra::process::pid_alive(bg),
            "the first worker's leftover outlived its attempt"
        );
        // The end of its input ends it.
        socket.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(slot.wait().unwrap(), 0);
        assert_eq!(p.read("slot.log"), "", "nothing said outside an attempt");
    }
}

#[test]
fn a_slot_given_a_request_it_cannot_read_runs_nothing_and_ends() {
    use std::io::Write;
    for request in [&b"not json\n"[..], &b"[\"--project-root\"]\n"[..]] {
        let p = project();
        let argv = vec![
            env!("CARGO_BIN_EXE_okstra-worker").to_string(),
            "--serve".into(),
        ];
        let (mut slot, socket) = process::spawn_with_socket(&SpawnSpec {
            argv: &argv,
            cwd: p.root(),
            env: &[],
            log: Some(process::Log::Path(&p.path("slot.log"))),
            stdin: None,
        })
        .unwrap();
        // Without its log and pid pipe, as no exec sends it.
        (&socket).write_all(request).unwrap();
        assert_eq!(slot.wait().unwrap(), 0);
        assert!(
            p.read("slot.log").contains("exec sent"),
            "{}",
            p.read("slot.log")
        );
        assert!(!p.exists("prompts/w.md.status.json"));
    }
}
