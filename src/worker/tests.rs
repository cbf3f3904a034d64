//! The wrapper end to end, in this process: `run` and `execute` on real
//! children, the sidecar read back as exec reads it.

use super::attempt::Paths;
use super::*;
use crate::confine;
use crate::process;
use crate::vocab::Confinement;
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;

fn args(root: &Path, script: &str) -> WorkerArgs {
    fs::write(root.join("prompt.md"), "the prompt\n").unwrap();
    let parsed = super::args::parse(
        "okstra-worker",
        [
            "--project-root",
            root.to_str().unwrap(),
            "--provider",
            "command",
            "--prompt",
            "prompt.md",
            "--result",
            "out/result.json",
            "--worker-result",
            "out/worker.json",
            "--worker-key",
            "codex",
            "--attempt",
            "2",
            "--",
            "sh",
            "-c",
            script,
        ],
    );
    parsed.unwrap()
}

fn status(root: &Path) -> Value {
    let text = fs::read_to_string(root.join("prompt.md.status.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn env_cwd_stdin_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut a = args(
        &root,
        "cat > stdin.txt; pwd > pwd.txt; env | grep '^OKSTRA_' | sort > env.txt; exit 3",
    );
    a.dispatch_id = Some("inv-1:attempt-2".into());
    a.session_id = Some("0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11".into());
    assert_eq!(run(&a), 3);

    assert_eq!(
        fs::read_to_string(root.join("stdin.txt")).unwrap(),
        "the prompt\n"
    );
    assert_eq!(
        fs::read_to_string(root.join("pwd.txt")).unwrap().trim(),
        root.display().to_string()
    );
    let r = root.display();
    let expected = format!(
        "OKSTRA_ATTEMPT=2\n\
         OKSTRA_DISPATCH_ID=inv-1:attempt-2\n\
         OKSTRA_PROJECT_ROOT={r}\n\
         OKSTRA_PROMPT_PATH={r}/prompt.md\n\
         OKSTRA_RESULT_PATH={r}/out/result.json\n\
         OKSTRA_SESSION_ID=0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11\n\
         OKSTRA_WORKER_KEY=codex\n\
         OKSTRA_WORKER_RESULT_PATH={r}/out/worker.json\n"
    );
    assert_eq!(fs::read_to_string(root.join("env.txt")).unwrap(), expected);

    let s = status(&root);
    assert_eq!(s["state"], "exited");
    assert_eq!(s["exitCode"], 3);
    assert!(s["duration_ms"].is_u64(), "{s}");
    assert!(s["pid"].is_u64());
    assert_eq!(s["provider"], "command");
    assert_eq!(s["attempt"], 2);
    assert_eq!(s["dispatchId"], "inv-1:attempt-2");
    assert_eq!(s["sessionId"], "0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11");
    assert!(s["startedAt"].as_str().unwrap().ends_with('Z'));
    assert!(s["heartbeatAt"].is_string());
    assert!(s.get("timedOut").is_none());
}

#[test]
fn optional_env_absent_when_not_given() {
    let dir = tempfile::tempdir().unwrap();
    let a = args(dir.path(), "env > env.txt");
    assert_eq!(run(&a), 0);
    let env = fs::read_to_string(dir.path().join("env.txt")).unwrap();
    assert!(!env.contains("OKSTRA_DISPATCH_ID="));
    assert!(!env.contains("OKSTRA_SESSION_ID="));
    let s = status(dir.path());
    assert_eq!(s["exitCode"], 0);
    assert!(s.get("dispatchId").is_none());
    assert!(s.get("sessionId").is_none());
}

#[test]
fn a_gate_releases_on_one_byte_only() {
    assert!(released(&mut &b"\n"[..]));
    assert!(released(&mut &b"xy"[..]), "the first byte is enough");
    assert!(!released(&mut &b""[..]), "end of input");
    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::other("gone"))
        }
    }
    assert!(!released(&mut Broken));
}

#[test]
fn relative_project_root_is_made_absolute() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::resolve(&WorkerArgs {
        project_root: PathBuf::from("some/root"),
        ..args(dir.path(), "true")
    })
    .unwrap();
    assert!(paths.root.is_absolute());
    assert!(paths.prompt.ends_with("some/root/prompt.md"));
    assert!(paths.status.ends_with("some/root/prompt.md.status.json"));
    assert!(paths.log.ends_with("some/root/prompt.md.log"));
}

#[test]
fn timeout_stops_the_child_and_exits_124() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path(), "echo $$ > pid.txt; exec sleep 30");
    a.timeout_seconds = Some(1);
    let started = Instant::now();
    assert_eq!(run(&a), WrapperExit::Timeout.code());
    assert!(started.elapsed() < Duration::from_secs(20));
    let pid: u32 = fs::read_to_string(dir.path().join("pid.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!process::pid_alive(pid));
    let s = status(dir.path());
    assert_eq!(s["state"], "exited");
    assert_eq!(s["exitCode"], 124);
    assert_eq!(s["timedOut"], true);
    assert_eq!(
        s["childExitCode"],
        128 + rustix::process::Signal::TERM.as_raw()
    );
    assert!(s["duration_ms"].as_u64().unwrap() >= 1000);
}

#[test]
fn stop_request_is_forwarded_and_the_childs_code_returned() {
    let dir = tempfile::tempdir().unwrap();
    let a = args(
        dir.path(),
        "trap 'exit 42' TERM; touch ready; while :; do sleep 0.05; done",
    );
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let ready = dir.path().join("ready");
    let trigger = std::thread::spawn(move || {
        let give_up = Instant::now() + Duration::from_secs(10);
        while !ready.exists() && Instant::now() < give_up {
            std::thread::sleep(Duration::from_millis(10));
        }
        flag.store(true, Ordering::Relaxed);
    });
    assert_eq!(execute(&a, &stop, fast(), None, None), 42);
    trigger.join().unwrap();
    assert_eq!(status(dir.path())["exitCode"], 42);
}

#[test]
fn a_confined_child_is_bound_and_the_wrapper_is_not() {
    if let confine::Offer::Unavailable(why) = confine::offer() {
        eprintln!("skipped: {why}");
        return;
    }
    // What the child needs prepared when needed, and prepared ahead
    // (as `run` prepares it before a gated wrapper's wait).
    for made_ahead in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let script = r#"
            echo in > out/in.txt
            if echo x 2>/dev/null > outside.txt; then echo allowed; else echo refused; fi > out/write
            if kill -0 $PPID 2>/dev/null; then echo allowed; else echo refused; fi > out/signal
            echo "$TMPDIR" > out/tmpdir; echo t > "$TMPDIR/t"
        "#;
        let mut a = args(&root, script);
        a.confinement = Confinement::Required;
        a.confine_dirs = vec!["out".into()];
        let ahead = if made_ahead { Ahead::make(&a) } else { None };
        assert_eq!(ahead.is_some(), made_ahead);
        let stop = AtomicBool::new(false);
        assert_eq!(execute(&a, &stop, fast(), ahead, None), 0);
        let read = |p: &str| fs::read_to_string(root.join(p)).unwrap();
        assert_eq!(read("out/in.txt"), "in\n");
        assert_eq!(read("out/write"), "refused\n");
        assert!(!root.join("outside.txt").exists());
        assert_eq!(read("out/signal"), "refused\n", "the wrapper is outside");
        // The wrapper's thread wrote the sidecar outside the child's
        // directories, and removed the TMPDIR; this thread writes anywhere.
        let s = status(&root);
        assert_eq!(s["state"], "exited");
        assert!(s["confinement"]
            .as_str()
            .unwrap()
            .starts_with("landlock-abi"));
        assert!(!Path::new(read("out/tmpdir").trim()).exists());
        fs::write(root.join("after.txt"), "unbound\n").unwrap();
    }
}

#[test]
fn a_confinement_prepared_ahead_that_cannot_be_finished_starts_nothing() {
    if let confine::Offer::Unavailable(why) = confine::offer() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let mut a = args(&root, "echo ran > ran.txt");
    a.confinement = Confinement::Required;
    // Not a TMPDIR of okstra's shape: refused after the thread was made.
    a.tmp_dir = Some(root.join("tmp"));
    let ahead = Ahead::make(&a);
    assert!(ahead.is_some());
    let stop = AtomicBool::new(false);
    assert_eq!(
        execute(&a, &stop, fast(), ahead, None),
        WrapperExit::ConfinementFailed.code()
    );
    assert!(!root.join("ran.txt").exists());
    assert_eq!(status(&root)["failureKind"], "confinement-failed");
    // The thread that was to restrict itself never did: this one writes.
    fs::write(root.join("after.txt"), "unbound\n").unwrap();
}

fn fast() -> Timing {
    Timing {
        grace: Duration::from_secs(5),
        heartbeat: Duration::from_millis(50),
    }
}

#[test]
fn status_says_running_and_the_heartbeat_moves() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        s=prompt.md.status.json; i=0
        while [ ! -s $s ]; do i=$((i+1)); [ $i -gt 500 ] && exit 7; sleep 0.01; done
        grep -q '"state": "running"' $s || exit 8
        first=$(grep heartbeatAt $s)
        while [ "$(grep heartbeatAt $s)" = "$first" ]; do
            i=$((i+1)); [ $i -gt 1000 ] && exit 9; sleep 0.01
        done
    "#;
    let a = args(dir.path(), script);
    let stop = AtomicBool::new(false);
    assert_eq!(execute(&a, &stop, fast(), None, None), 0);
    let s = status(dir.path());
    assert_eq!(s["state"], "exited");
    assert_eq!(s["exitCode"], 0);
}

#[test]
fn missing_binary_exits_127() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path(), "unused");
    a.command = vec!["okstra-no-such-binary-xyz".into(), "--flag".into()];
    assert_eq!(run(&a), 127);
    let s = status(dir.path());
    assert_eq!(s["state"], "exited");
    assert_eq!(s["exitCode"], 127);
    assert!(s["pid"].is_null());
    assert!(s["error"]
        .as_str()
        .unwrap()
        .contains("okstra-no-such-binary-xyz"));
}

#[test]
fn unusable_arguments_exit_2_without_starting() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(dir.path(), "touch started");
    a.provider = "copilot".into();
    assert_eq!(run(&a), 2);
    assert!(status(dir.path())["error"]
        .as_str()
        .unwrap()
        .contains("unknown provider"));

    let mut a = args(dir.path(), "touch started");
    a.command.clear();
    assert_eq!(run(&a), 2);

    let mut a = args(dir.path(), "touch started");
    a.prompt = PathBuf::from("missing.md");
    assert_eq!(run(&a), 2);
    assert!(!dir.path().join("started").exists());
}
