//! A confined worker's private TMPDIR goes however its attempt ends
//! (docs/confinement.md#its-private-tmpdir): the wrapper killed with `kill -9`
//! mid-attempt, a run stopped while its workers ignore SIGTERM (exec's SIGKILL
//! ends the wrappers too), or a clean finish. Each worker fills its TMPDIR with
//! what makes a removal hard: files, nested directories, a read-only directory,
//! one with no permissions at all, and symlinks to a file and a directory
//! outside, which must survive. A TMPDIR exec cannot remove is reported, and
//! fails the run.
//!
//! exec runs with `TMPDIR` pointing at a directory of the test's, so the
//! test sees every private TMPDIR the run made. As root, exec runs without
//! the capabilities that let root ignore permission bits, so a `chmod 000`
//! directory stops it as it would stop anyone else. Skipped, saying so, on
//! a kernel without Landlock ABI 6.

use crate::common::*;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Fills `$TMPDIR`, says where it is and who the worker is in its own
/// directory of the test's scratch, then `ready`; the rest of the script
/// decides how it ends.
const FILL: &str = r#"set -u
D="$SCRATCH/$OKSTRA_WORKER_KEY"
mkdir -p "$D"
echo "$TMPDIR" > "$D/tmpdir"
echo $$ > "$D/pid"
mkdir -p "$TMPDIR/a/b/c" "$TMPDIR/ro" "$TMPDIR/closed/in"
i=0; while [ $i -lt 200 ]; do echo x > "$TMPDIR/a/f$i"; i=$((i+1)); done
echo x > "$TMPDIR/a/b/c/deep"
echo x > "$TMPDIR/ro/kept"; chmod 500 "$TMPDIR/ro"
echo x > "$TMPDIR/closed/in/f"; chmod 000 "$TMPDIR/closed/in" "$TMPDIR/closed"
ln -s "$VICTIM/file" "$TMPDIR/to-file"
ln -s "$VICTIM" "$TMPDIR/to-dir"
touch "$D/ready"
"#;

/// One stage of `(id, script)` confined `command` workers, planned. exec's
/// `TMPDIR` is `base/` beside the project, where the private TMPDIRs' root
/// is made; what the symlinks in each TMPDIR point at is `victim/`, outside
/// everything; the workers leave notes for the test in `scratch/` (outside
/// the project, so the mutation audit has nothing to say about them).
fn fixture(workers: &[(&str, String)]) -> Fx {
    let fx = Fx::new();
    let victim = fx.outside("victim");
    std::fs::write(victim.join("file"), "keep\n").unwrap();
    fx.v1()
        .commands()
        .defaults("confinement = \"required\"")
        .worker_env("VICTIM", &victim)
        .scratch_env()
        .prelude(FILL)
        .stage(
            "only",
            workers.iter().map(|(id, script)| {
                job(id, script.as_str()).result(&format!("results/{id}/out.md"))
            }),
        )
        .plan();
    // exec's TMPDIR, not plan's.
    fx.run_env("TMPDIR", fx.outside("base"));
    fx
}

/// `okstra exec plan.json --format json` in the background; as root,
/// without the capabilities to ignore permission bits or to change
/// what is not its own.
fn spawn_exec(fx: &Fx) -> Child {
    let args = ["exec", "plan.json", "--format", "json"];
    let mut cmd = if is_root() {
        let setpriv = [
            "setpriv",
            "--bounding-set=-dac_override,-dac_read_search,-fowner",
            "--inh-caps=-dac_override,-dac_read_search,-fowner",
            "--",
        ];
        fx.command_via(&setpriv, &args)
    } else {
        fx.command(&args)
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("okstra (and setpriv, as root)")
}

/// Worker `id`'s note `name`.
fn note(fx: &Fx, id: &str, name: &str) -> PathBuf {
    fx.scratch(id).join(name)
}

fn wait_ready(fx: &Fx, id: &str) {
    let ready = note(fx, id, "ready");
    wait_for(&format!("{id} to fill its TMPDIR"), || ready.exists());
}

/// The TMPDIR worker `id` was given.
fn tmpdir(fx: &Fx, id: &str) -> PathBuf {
    let text = std::fs::read_to_string(note(fx, id, "tmpdir")).unwrap();
    PathBuf::from(text.trim())
}

fn worker_pid(fx: &Fx, id: &str) -> u32 {
    let text = std::fs::read_to_string(note(fx, id, "pid")).unwrap();
    text.trim().parse().unwrap()
}

/// Every private TMPDIR's root under exec's `TMPDIR`, and what each holds.
fn leftovers(fx: &Fx) -> Vec<String> {
    let mut out = Vec::new();
    for root in std::fs::read_dir(fx.outside("base")).unwrap() {
        let root = root.unwrap().path();
        for e in std::fs::read_dir(&root).unwrap() {
            out.push(e.unwrap().path().display().to_string());
        }
    }
    out
}

/// Nothing left of any TMPDIR; what they linked to is untouched.
#[track_caller]
fn assert_nothing_left(fx: &Fx, ids: &[&str]) {
    for id in ids {
        let dir = tmpdir(fx, id);
        assert!(
            dir.starts_with(fx.outside("base")),
            "{} is not under exec's TMPDIR",
            dir.display()
        );
        assert!(!dir.exists(), "{} is left", dir.display());
        // The TMPDIR is `tmp/` in the attempt's private directory, which
        // the dispatch records.
        assert_eq!(dir.file_name().unwrap(), "tmp");
        let attempt_dir = dir.parent().unwrap();
        assert!(!attempt_dir.exists(), "{} is left", attempt_dir.display());
        let recorded: Vec<Value> = fx
            .events_of("worker-dispatched", id)
            .into_iter()
            .map(|e| e["tmpDir"].clone())
            .collect();
        assert_eq!(recorded, [Value::from(attempt_dir.display().to_string())]);
    }
    assert_eq!(leftovers(fx), Vec::<String>::new());
    assert_eq!(
        std::fs::read_to_string(fx.outside("victim").join("file")).unwrap(),
        "keep\n"
    );
}

fn wait_for(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait for exec to end: its exit code and its JSON summary.
fn finish(child: Child) -> (i32, Value, String) {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let summary = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}\n{stderr}"));
    (out.status.code().unwrap_or(-1), summary, stderr)
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

#[test]
fn a_wrapper_killed_with_kill_9_mid_attempt_leaves_no_tmpdir_and_no_worker() {
    if !landlock_here() {
        return;
    }
    let fx = fixture(&[("a", "while :; do sleep 0.05; done\n".into())]);
    let exec = spawn_exec(&fx);
    wait_ready(&fx, "a");
    let status = fx.p.read_json("prompts/a.md.status.json");
    let wrapper = status["wrapperPid"].as_u64().unwrap() as u32;
    let worker = worker_pid(&fx, "a");
    assert!(tmpdir(&fx, "a").join("a/f199").exists());
    signal(wrapper, rustix::process::Signal::KILL);
    let (code, summary, stderr) = finish(exec);
    assert_eq!(code, 1, "{summary}\n{stderr}");
    assert_eq!(summary["jobs"][0]["status"], "error", "{summary}");
    assert_eq!(summary["errors"], Value::Array(vec![]), "{summary}");
    assert_nothing_left(&fx, &["a"]);
    // What the dead wrapper left running in its group is stopped with it.
    wait_for("the orphaned worker to go", || {
        !okstra::process::pid_alive(worker)
    });
}

#[test]
fn a_run_stopped_while_its_workers_ignore_sigterm_leaves_no_tmpdir() {
    // exec's stop ends in SIGKILL to each whole group, the wrappers with
    // their workers: no wrapper gets to clean up after itself.
    if !landlock_here() {
        return;
    }
    let stubborn = "trap '' TERM\nwhile :; do sleep 0.05; done\n".to_string();
    let fx = fixture(&[("a", stubborn.clone()), ("b", stubborn)]);
    let exec = spawn_exec(&fx);
    wait_ready(&fx, "a");
    wait_ready(&fx, "b");
    let workers = [worker_pid(&fx, "a"), worker_pid(&fx, "b")];
    signal(exec.id(), rustix::process::Signal::TERM);
    let (code, summary, stderr) = finish(exec);
    assert_eq!(code, 130, "{summary}\n{stderr}");
    for job in summary["jobs"].as_array().unwrap() {
        assert!(
            job["reason"].as_str().unwrap().contains("interrupted"),
            "{summary}"
        );
    }
    assert_nothing_left(&fx, &["a", "b"]);
    for pid in workers {
        assert!(!okstra::process::pid_alive(pid));
    }
}

#[test]
fn a_finished_worker_leaves_no_tmpdir() {
    if !landlock_here() {
        return;
    }
    let fx = fixture(&[("a", "echo done > \"$OKSTRA_RESULT_PATH\"\n".into())]);
    let (code, summary, stderr) = finish(spawn_exec(&fx));
    assert_eq!(code, 0, "{summary}\n{stderr}");
    assert_nothing_left(&fx, &["a"]);
    assert!(
        !fx.p.read("prompts/a.md.log").contains("TMPDIR"),
        "the wrapper removed it without a word"
    );
}

#[test]
fn a_tmpdir_exec_cannot_remove_is_reported_and_fails_the_run() {
    // Something the worker's user cannot remove (a directory of another
    // user's in it, put there by root): the wrapper says so in the log,
    // exec reports `exec/cleanup-incomplete` and exits 1, though the job
    // itself completed.
    if !landlock_here() {
        return;
    }
    if !is_root() {
        eprintln!("skipped: only root can plant another user's directory");
        return;
    }
    let script = r#"while [ ! -e "$D/go" ]; do sleep 0.02; done
echo done > "$OKSTRA_RESULT_PATH"
"#;
    let fx = fixture(&[("a", script.into())]);
    let exec = spawn_exec(&fx);
    wait_ready(&fx, "a");
    let planted = tmpdir(&fx, "a").join("theirs");
    std::fs::create_dir(&planted).unwrap();
    std::fs::write(planted.join("f"), "x").unwrap();
    std::os::unix::fs::chown(planted.join("f"), Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    std::fs::write(note(&fx, "a", "go"), "").unwrap();
    let (code, summary, stderr) = finish(exec);
    assert_eq!(code, 1, "{summary}\n{stderr}");
    assert_eq!(summary["ok"], false);
    assert_eq!(summary["jobs"][0]["status"], "completed", "{summary}");
    let errors = summary["errors"].as_array().unwrap();
    let error = errors
        .iter()
        .find(|e| e["code"] == "exec/cleanup-incomplete")
        .unwrap_or_else(|| panic!("{summary}"));
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("theirs"), "{message}");
    assert!(
        fx.p.read("prompts/a.md.log")
            .contains("cannot remove the attempt's private directory"),
        "the wrapper said so too"
    );
    assert!(planted.join("f").exists());
    // Root tidies up what the test planted.
    std::fs::remove_dir_all(tmpdir(&fx, "a").parent().unwrap()).unwrap();
}
