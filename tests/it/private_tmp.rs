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
use std::process::{Child, Command, Stdio};
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

struct Fx {
    p: Project,
    /// exec's `TMPDIR`: where the private TMPDIRs' root is made.
    base: tempfile::TempDir,
    /// Outside everything: what the symlinks in each TMPDIR point at.
    victim: tempfile::TempDir,
    /// Where the workers leave notes for the test (outside the project, so
    /// the mutation audit has nothing to say about them).
    scratch: tempfile::TempDir,
}

impl Fx {
    /// One stage of `(id, script)` confined `command` workers.
    fn new(workers: &[(&str, String)]) -> Fx {
        let fx = Fx {
            p: Project::new(),
            base: tempfile::tempdir().unwrap(),
            victim: tempfile::tempdir().unwrap(),
            scratch: tempfile::tempdir().unwrap(),
        };
        std::fs::write(fx.victim.path().join("file"), "keep\n").unwrap();
        fx.p.write_json("run/run-manifest.json", &v1_manifest());
        let mut spec = format!(
            "[defaults]\nprovider = \"command\"\nrole = \"analyst\"\nconfinement = \"required\"\nenv = {{ VICTIM = \"{}\", SCRATCH = \"{1}\", {2} = \"{1}\" }}\n\n[[stages]]\nname = \"only\"\n\n",
            fx.victim.path().display(),
            fx.scratch.path().display(),
            okstra::confine::TEST_ALSO_WRITABLE_ENV,
        );
        for (id, script) in workers {
            fx.p.write(&format!("prompts/{id}.md"), "# work\n");
            spec.push_str(&format!(
                "[[stages.workers]]\nworkerId = \"{id}\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"results/{id}/out.md\"\ncommand = [\"sh\", \"-c\", '''\n{FILL}{script}''']\n\n"
            ));
        }
        fx.p.write("spec.toml", &spec);
        let run = plan_json(&fx.p, "spec.toml");
        assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
        fx
    }

    /// `okstra exec plan.json --format json` in the background; as root,
    /// without the capabilities to ignore permission bits or to change
    /// what is not its own.
    fn spawn_exec(&self) -> Child {
        let mut cmd = if is_root() {
            let mut c = Command::new("setpriv");
            c.arg("--bounding-set=-dac_override,-dac_read_search,-fowner")
                .arg("--inh-caps=-dac_override,-dac_read_search,-fowner")
                .arg("--")
                .arg(env!("CARGO_BIN_EXE_okstra"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_okstra"))
        };
        cmd.args(["exec", "plan.json", "--format", "json"])
            .current_dir(self.p.root())
            .env("TMPDIR", self.base.path())
            .env("SOURCE_DATE_EPOCH", "1764460800")
            .env("OKSTRA_STOP_GRACE_SECONDS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("okstra (and setpriv, as root)")
    }

    /// Worker `id`'s note `name`.
    fn note(&self, id: &str, name: &str) -> PathBuf {
        self.scratch.path().join(id).join(name)
    }

    fn wait_ready(&self, id: &str) {
        let ready = self.note(id, "ready");
        wait_for(&format!("{id} to fill its TMPDIR"), || ready.exists());
    }

    /// The TMPDIR worker `id` was given.
    fn tmpdir(&self, id: &str) -> PathBuf {
        let text = std::fs::read_to_string(self.note(id, "tmpdir")).unwrap();
        PathBuf::from(text.trim())
    }

    fn worker_pid(&self, id: &str) -> u32 {
        let text = std::fs::read_to_string(self.note(id, "pid")).unwrap();
        text.trim().parse().unwrap()
    }

    /// Every private TMPDIR's root under exec's `TMPDIR`, and what each holds.
    fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        for root in std::fs::read_dir(self.base.path()).unwrap() {
            let root = root.unwrap().path();
            for e in std::fs::read_dir(&root).unwrap() {
                out.push(e.unwrap().path().display().to_string());
            }
        }
        out
    }

    /// Nothing left of any TMPDIR; what they linked to is untouched.
    #[track_caller]
    fn assert_nothing_left(&self, ids: &[&str]) {
        for id in ids {
            let dir = self.tmpdir(id);
            assert!(
                dir.starts_with(self.base.path()),
                "{} is not under exec's TMPDIR",
                dir.display()
            );
            assert!(!dir.exists(), "{} is left", dir.display());
            let recorded: Vec<Value> = self
                .p
                .events_of("worker-dispatched", id)
                .into_iter()
                .map(|e| e["tmpDir"].clone())
                .collect();
            assert_eq!(recorded, [Value::from(dir.display().to_string())]);
        }
        assert_eq!(self.leftovers(), Vec::<String>::new());
        assert_eq!(
            std::fs::read_to_string(self.victim.path().join("file")).unwrap(),
            "keep\n"
        );
    }
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
    let fx = Fx::new(&[("a", "while :; do sleep 0.05; done\n".into())]);
    let exec = fx.spawn_exec();
    fx.wait_ready("a");
    let status = fx.p.read_json("prompts/a.md.status.json");
    let wrapper = status["wrapperPid"].as_u64().unwrap() as u32;
    let worker = fx.worker_pid("a");
    assert!(fx.tmpdir("a").join("a/f199").exists());
    signal(wrapper, rustix::process::Signal::KILL);
    let (code, summary, stderr) = finish(exec);
    assert_eq!(code, 1, "{summary}\n{stderr}");
    assert_eq!(summary["jobs"][0]["status"], "error", "{summary}");
    assert_eq!(summary["errors"], Value::Array(vec![]), "{summary}");
    fx.assert_nothing_left(&["a"]);
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
    let fx = Fx::new(&[("a", stubborn.clone()), ("b", stubborn)]);
    let exec = fx.spawn_exec();
    fx.wait_ready("a");
    fx.wait_ready("b");
    let workers = [fx.worker_pid("a"), fx.worker_pid("b")];
    signal(exec.id(), rustix::process::Signal::TERM);
    let (code, summary, stderr) = finish(exec);
    assert_eq!(code, 130, "{summary}\n{stderr}");
    for job in summary["jobs"].as_array().unwrap() {
        assert!(
            job["reason"].as_str().unwrap().contains("interrupted"),
            "{summary}"
        );
    }
    fx.assert_nothing_left(&["a", "b"]);
    for pid in workers {
        assert!(!okstra::process::pid_alive(pid));
    }
}

#[test]
fn a_finished_worker_leaves_no_tmpdir() {
    if !landlock_here() {
        return;
    }
    let fx = Fx::new(&[("a", "echo done > \"$OKSTRA_RESULT_PATH\"\n".into())]);
    let (code, summary, stderr) = finish(fx.spawn_exec());
    assert_eq!(code, 0, "{summary}\n{stderr}");
    fx.assert_nothing_left(&["a"]);
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
    let fx = Fx::new(&[("a", script.into())]);
    let exec = fx.spawn_exec();
    fx.wait_ready("a");
    let planted = fx.tmpdir("a").join("theirs");
    std::fs::create_dir(&planted).unwrap();
    std::fs::write(planted.join("f"), "x").unwrap();
    std::os::unix::fs::chown(planted.join("f"), Some(65534), Some(65534)).unwrap();
    std::os::unix::fs::chown(&planted, Some(65534), Some(65534)).unwrap();
    std::fs::write(fx.note("a", "go"), "").unwrap();
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
            .contains("cannot remove the worker's private TMPDIR"),
        "the wrapper said so too"
    );
    assert!(planted.join("f").exists());
    // Root tidies up what the test planted.
    std::fs::remove_dir_all(fx.tmpdir("a")).unwrap();
}
