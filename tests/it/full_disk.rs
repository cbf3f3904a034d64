//! A full disk (docs/exec.md#crash-safety-and-resume, issue "resume that always
//! finishes"): exec whose run directory fills up stops with a clear error and
//! exit 1, never a panic, leaves no torn line and no unreadable state, and a
//! later exec with space again completes the run, starting no attempt twice.
//!
//! The run directory is a small tmpfs mounted by the test (root only).
//! Where mounting is refused the test says so and passes, unless
//! `REQUIRE_SMALL_FS=1` (set by `.ci/run`) makes that a failure.

use crate::common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of `size` mounted at `at`, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(at: &Path, size: &str) -> Option<Mount> {
        std::fs::create_dir_all(at).ok()?;
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mount(at.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn fixture(scratch: &Path) -> Project {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    let mut spec = format!(
        "[defaults]\nprovider = \"command\"\nrole = \"analyst\"\n{}\n\n",
        scratch_env(scratch)
    );
    for stage in ["one", "two"] {
        spec.push_str(&format!("[[stages]]\nname = \"{stage}\"\n\n"));
        for n in 1..=3 {
            let key = format!("{stage}{n}");
            p.write(&format!("prompts/{key}.md"), "# work\n");
            spec.push_str(&format!(
                "[[stages.workers]]\nworkerId = \"{key}\"\npromptPath = \"prompts/{key}.md\"\nresultPath = \"results/{key}.md\"\ncommand = [\"sh\", \"-c\", '''echo \"$OKSTRA_WORKER_KEY $OKSTRA_ATTEMPT\" >> \"$SCRATCH/starts\"; mkdir -p results; echo done > \"$OKSTRA_RESULT_PATH\"''']\n\n"
            ));
        }
    }
    p.write("spec.toml", &spec);
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    p
}

fn exec(p: &Project) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .current_dir(p.root())
        .env("OKSTRA_STOP_GRACE_SECONDS", "1")
        .args(["exec", "plan.json"])
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Fill the filesystem at `dir` but for about `free` bytes. The filler
/// lies in okstra's snapshot directory, which the audit does not walk: its
/// removal is the user freeing space, not a worker's change.
fn fill(dir: &Path, free: u64) -> PathBuf {
    std::fs::create_dir_all(dir.join("snapshots")).unwrap();
    let filler = dir.join("snapshots/filler");
    let st = rustix::fs::statvfs(dir).unwrap();
    let avail = st.f_bavail * st.f_frsize;
    let size = avail.saturating_sub(free);
    std::fs::write(&filler, vec![0u8; size as usize]).ok();
    filler
}

#[track_caller]
fn whole_lines(path: &Path, what: &str) {
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "{what}: a torn line in {}: {line:?}",
            path.display()
        );
    }
}

#[test]
fn a_full_disk_stops_exec_cleanly_and_a_later_exec_completes() {
    let probe = tempfile::tempdir().unwrap();
    let Some(m) = Mount::tmpfs(&probe.path().join("m"), "64k") else {
        missing(
            "REQUIRE_SMALL_FS",
            "mounting a small tmpfs was refused (run as root to test a full disk)",
        );
        return;
    };
    drop(m);
    let mut stopped = 0;
    for free in [0u64, 4096, 8192, 16384] {
        let what = format!("{free} bytes free");
        let scratch = tempfile::tempdir().unwrap();
        let p = fixture(scratch.path());
        let run = p.path("run");
        let manifest = std::fs::read(run.join("run-manifest.json")).unwrap();
        let _mount = Mount::tmpfs(&run, "64k").expect("mounted once already");
        std::fs::write(run.join("run-manifest.json"), &manifest).unwrap();
        let filler = fill(&run, free);
        let (code, err) = exec(&p);
        println!("{what}: exec exited {code}");
        assert!(code == 0 || code == 1, "{what}: exit {code}\n{err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        if code == 1 {
            stopped += 1;
            assert!(
                err.contains("No space left on device"),
                "{what}: the error does not say why:\n{err}"
            );
        }
        whole_lines(&run.join("lead-events.jsonl"), &what);
        whole_lines(&run.join("errors.jsonl"), &what);
        if run.join("team-state.json").exists() && free > 0 {
            let _ = p.team();
        }
        std::fs::remove_file(&filler).unwrap();
        let (code, err) = exec(&p);
        assert_eq!(code, 0, "{what}: with space again:\n{err}");
        let starts: Vec<String> = std::fs::read_to_string(scratch.path().join("starts"))
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        let unique: BTreeSet<&String> = starts.iter().collect();
        assert_eq!(unique.len(), starts.len(), "{what}: {starts:?}");
        assert_eq!(starts.len(), 6, "{what}: {starts:?}");
        whole_lines(&run.join("lead-events.jsonl"), &what);
    }
    assert!(stopped >= 2, "the disk never filled up: {stopped}");
}
