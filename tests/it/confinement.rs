//! Kernel confinement end to end (docs/confinement.md#kernel-confinement):
//! `command` workers run by `okstra plan` + `okstra exec` under Landlock try
//! every way tests/it/audit.rs knows of writing outside their policy. The kernel
//! refuses each one in the worker (EACCES; EXDEV for a hard link, Landlock's
//! answer to linking a file in from outside), and the tree is left
//! byte-identical. Where Landlock cannot stop a change (a mode change; a
//! symlink made inside an allowed directory), the test says so and shows the
//! audit still catches it.
//!
//! Workers report what happened in their own result file (a confined
//! worker cannot write a scratch directory outside the project). Skipped,
//! saying so, on a kernel without Landlock ABI 6.

use crate::common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

/// A project of files a worker might try to change, and a fake HOME.
fn fixture() -> Fx {
    let fx = Fx::new();
    fx.v1();
    fx.p.write("README.md", "readme\n");
    fx.p.write("keep.txt", "keep\n");
    fx.p.write("dir/inner.txt", "inner\n");
    fx.p.write("secret.txt", "secret\n");
    fx.p.write("src/a.rs", "fn a() {}\n");
    fx.p.write("real/keep.txt", "keep\n");
    fx.p.write("elsewhere/.keep", "");
    fx.p.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
    fx.p.write(".git/config", "[core]\n");
    fx.p.write(".okstra/state.json", "{}\n");
    fx.p.write("run.sh", "echo hi\n");
    fx.home_file(".profile", "# mine\n");
    symlink("../real", fx.p.path("src/link")).unwrap();
    fx
}

/// `spec.toml`, planned: one stage of `(id, extra TOML, script)` workers,
/// all `confinement = "required"`, `HOME` the fake one, each writing its
/// outcomes to `results/<id>/out.md`.
fn spec(fx: &Fx, workers: &[(&str, &str, String)]) {
    fx.commands()
        .defaults("confinement = \"required\"")
        .worker_env("HOME", fx.home())
        .prelude(TRY_PRELUDE);
    fx.stage(
        "only",
        workers.iter().map(|(id, extra, script)| {
            job(id, script.as_str())
                .with(extra)
                .result(&format!("results/{id}/out.md"))
        }),
    );
    fx.plan();
}

/// `okstra exec plan.json --format json`.
fn exec(fx: &Fx) -> Run {
    fx.exec(&["--format", "json"])
}

fn dispatch(fx: &Fx, id: &str) -> Value {
    fx.dispatch_rows(id).pop().expect("a dispatch row")
}

/// Every entry of the project and of `HOME` outside the places the
/// workers may write or okstra writes: type, mode, and content or link
/// target.
fn tree(fx: &Fx) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(fx.p.root(), fx.p.root(), &mut out);
    walk(&fx.home(), &fx.home(), &mut out);
    out.retain(|k, _| {
        !(k.starts_with("results")
            || k.starts_with("run/")
            || k == "plan.json"
            || k.ends_with(".log")
            || k.ends_with(".status.json"))
    });
    out
}

fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let rel = path.strip_prefix(base).unwrap().display().to_string();
        let what = if meta.file_type().is_symlink() {
            format!("link {}", std::fs::read_link(&path).unwrap().display())
        } else if meta.is_dir() {
            walk(base, &path, out);
            "dir".to_string()
        } else {
            format!("file {:?}", std::fs::read(&path).unwrap())
        };
        out.insert(rel, format!("{:o} {what}", meta.mode()));
    }
}

#[test]
fn every_write_outside_the_policy_fails_with_eacces_and_the_tree_is_unchanged() {
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    let script = r#"
t outside-write 'echo owned >> README.md'
t outside-new-file 'echo x > new.txt'
t outside-new-dir 'mkdir -p hidden/deep'
t delete-file 'rm keep.txt'
t delete-dir 'rm -r dir'
t rename-out 'mv src/a.rs elsewhere/a.rs'
t dot-dot 'echo x > src/../outside.txt'
t through-symlinked-dir 'echo x > src/link/keep.txt'
t new-through-symlinked-dir 'echo x > src/link/new.txt'
t git-hook 'echo evil > .git/hooks/pre-commit'
t git-config 'echo "[alias] x = !evil" >> .git/config'
t okstra-state 'echo "{}" > .okstra/state.json'
t team-state 'echo "{}" > run/team-state.json'
t events-append 'echo "{}" >> run/lead-events.jsonl'
t other-jobs-result 'mkdir -p results/b && echo forged > results/b/out.md.audit.json'
t home 'echo evil >> "$HOME/.profile"'
t home-new 'mkdir "$HOME/.ssh"'
t prompt 'echo changed > prompts/a.md'
t hard-link 'ln secret.txt src/hl'
t tmpdir 'echo fine > "$TMPDIR/scratch" && cat "$TMPDIR/scratch"'
t devnull 'echo fine > /dev/null && echo fine > /dev/stderr'
t own-dir 'echo fine > src/b.rs && rm src/b.rs'
"#;
    spec(
        &fx,
        &[(
            "a",
            "role = \"implementer\"\nplannedPaths = [\"src/**\"]",
            script.to_string(),
        )],
    );
    // b runs in a later stage in real life; here only its directory exists.
    std::fs::create_dir_all(fx.p.path("results/b")).unwrap();
    let before = tree(&fx);
    let run = exec(&fx);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let o = tries(&fx, "a");
    for name in [
        "outside-write",
        "outside-new-file",
        "outside-new-dir",
        "delete-file",
        "delete-dir",
        "rename-out",
        "dot-dot",
        "through-symlinked-dir",
        "new-through-symlinked-dir",
        "git-hook",
        "git-config",
        "okstra-state",
        "team-state",
        "events-append",
        "other-jobs-result",
        "home",
        "home-new",
        "prompt",
    ] {
        assert_try_refused(&o, name, "Permission denied");
    }
    // Linking a file in from outside the allowed hierarchy: EXDEV.
    assert_try_refused(&o, "hard-link", "cross-device");
    for name in ["tmpdir", "devnull", "own-dir"] {
        assert!(!o[name].0, "{name} must work confined: {:?}", o[name]);
    }
    assert_eq!(tree(&fx), before, "the tree is byte-identical");
    assert!(!fx.p.exists("results/b/out.md.audit.json"));
    // Nothing got through, so the audit has nothing to say.
    assert_eq!(fx.p.worker_row("a")["status"], "completed");
    let row = dispatch(&fx, "a");
    assert_eq!(row["confinement"], "landlock-abi7", "{row}");
    assert_eq!(row["writeEnforcement"]["confinement"], "required");
    let status = fx.p.read_json("prompts/a.md.status.json");
    assert_eq!(status["confinement"], "landlock-abi7");
}

#[test]
fn a_symlink_swap_is_made_but_writes_through_it_fail_and_the_audit_catches_the_link() {
    // Landlock governs where a write lands, not what a link points at: a
    // symlink made inside an allowed directory is allowed. Writing through
    // it to outside fails; the audit judges the link by its target.
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    let script = r#"
t swap 'rm src/a.rs && ln -s ../secret.txt src/a.rs'
t write-through 'echo owned > src/a.rs'
"#;
    spec(
        &fx,
        &[(
            "a",
            "role = \"implementer\"\nplannedPaths = [\"src/**\"]",
            script.to_string(),
        )],
    );
    let run = exec(&fx);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let o = tries(&fx, "a");
    assert!(!o["swap"].0, "{:?}", o["swap"]);
    assert_try_refused(&o, "write-through", "Permission denied");
    assert_eq!(fx.p.read("secret.txt"), "secret\n");
    let reason = fx.p.worker_row("a")["reason"].to_string();
    assert!(
        reason.contains("contract-failed-unattributed") && reason.contains("src/a.rs"),
        "{reason}"
    );
}

#[test]
fn landlock_cannot_stop_a_mode_change_and_the_audit_still_catches_it() {
    // chmod, chown and utimes are not Landlock-controlled (ABI 7): the
    // worker succeeds, the audit settles the job error.
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    spec(&fx, &[("a", "", "t chmod 'chmod +x run.sh'\n".to_string())]);
    let run = exec(&fx);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(!tries(&fx, "a")["chmod"].0, "the kernel let it through");
    let w = fx.p.worker_row("a");
    assert_eq!(w["status"], "error");
    let reason = w["reason"].as_str().unwrap();
    assert!(
        reason.contains("contract-failed-unattributed") && reason.contains("run.sh"),
        "{reason}"
    );
}

#[test]
fn a_worker_cannot_signal_or_look_into_exec_or_its_wrapper_and_exec_finishes() {
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    let script = r#"
exec_pid=$(awk '{print $4}' /proc/$PPID/stat)
t kill-exec "kill -TERM $exec_pid"
t kill-wrapper "kill -KILL $PPID"
t kill-exec-group "kill -TERM -$(awk '{print $5}' /proc/$exec_pid/stat)"
t kill-self 'sh -c "kill -TERM \$\$"; true'
t peek-wrapper "readlink -v /proc/$PPID/exe"
t peek-exec "readlink -v /proc/$exec_pid/cwd"
t peek-self "readlink -v /proc/self/exe"
"#;
    spec(&fx, &[("a", "", script.to_string())]);
    let run = exec(&fx);
    assert_eq!(
        run.code, 0,
        "exec was not stopped: {}\n{}",
        run.stdout, run.stderr
    );
    let o = tries(&fx, "a");
    for name in ["kill-exec", "kill-wrapper", "kill-exec-group"] {
        assert_try_refused(&o, name, "not permitted");
    }
    assert!(!o["kill-self"].0, "its own processes it may signal");
    // Landlock refuses ptrace access across domains (attaching, memory,
    // a process's executable and working directory); what /proc shows
    // without it (environ, cmdline, maps) stays readable, as
    // docs/confinement.md#the-threat-model says.
    for name in ["peek-wrapper", "peek-exec"] {
        assert_try_refused(&o, name, "Permission denied");
    }
    assert!(!o["peek-self"].0, "its own it may look into");
    assert_eq!(fx.p.worker_row("a")["status"], "completed");
    assert_eq!(run.json()["jobs"][0]["status"], "completed");
}

#[test]
fn a_confined_make_and_cc_build_inside_the_allowed_directories_completes() {
    // Real work: make runs the C compiler, whose temporary files go to the
    // private TMPDIR, and writes its outputs under the planned directory.
    if !landlock_here() {
        return;
    }
    if on_path("make").is_none() || on_path("cc").is_none() {
        missing("REQUIRE_LANDLOCK", "needs make and cc on PATH");
        return;
    }
    let fx = fixture();
    fx.p.write(
        "build/src/hello.c",
        "#include <stdio.h>\nint main(void){puts(\"hello\");return 0;}\n",
    );
    fx.p.write(
        "build/Makefile",
        "out/hello: src/hello.c\n\tmkdir -p out\n\tcc -o $@ src/hello.c\n\nout/said.txt: out/hello\n\t./out/hello > $@\n",
    );
    let script = "t make 'make -C build out/said.txt && cat build/out/said.txt'\n";
    spec(
        &fx,
        &[(
            "a",
            "role = \"implementer\"\nplannedPaths = [\"build/out/**\"]",
            script.to_string(),
        )],
    );
    let run = exec(&fx);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let o = tries(&fx, "a");
    assert!(!o["make"].0, "{:?}", o["make"]);
    assert_eq!(fx.p.read("build/out/said.txt"), "hello\n");
    assert_eq!(dispatch(&fx, "a")["confinement"], "landlock-abi7");
}

#[test]
fn a_refused_write_is_explained_in_the_log() {
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    spec(&fx, &[("a", "", "echo owned >> README.md\n".to_string())]);
    let run = exec(&fx);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let log = fx.p.read("prompts/a.md.log");
    assert!(log.contains("Permission denied"), "{log}");
    assert!(
        log.contains("the worker is confined (landlock-abi7)") && log.contains("results/a"),
        "{log}"
    );
}

/// `okstra ARGS` in the project with the debug build's no-Landlock seam.
fn okstra_without_landlock(p: &Project, args: &[&str]) -> Run {
    let out = assert_cmd::Command::cargo_bin("okstra")
        .unwrap()
        .current_dir(p.root())
        .env("SOURCE_DATE_EPOCH", "1764460800")
        .env(okstra::confine::SIMULATE_UNAVAILABLE_ENV, "1")
        .args(args)
        .output()
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn listing(root: &Path) -> Vec<String> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out.into_iter().map(|(k, v)| format!("{k} {v}")).collect()
}

#[test]
fn required_confinement_without_landlock_is_refused_writing_nothing() {
    let fx = fixture();
    spec(
        &fx,
        &[("a", "", "echo started > started.txt\n".to_string())],
    );
    let before = listing(fx.p.root());
    let run = okstra_without_landlock(&fx.p, &["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 3, "{}\n{}", run.stdout, run.stderr);
    let e = run.error("exec/confinement-unavailable");
    assert_eq!(e["worker"], "a");
    assert!(e["message"].as_str().unwrap().contains("Landlock"), "{e}");
    assert_eq!(listing(fx.p.root()), before, "nothing written");
    assert!(!fx.p.exists("run/team-state.json"));
    // In text, the rendered error names the code and the help.
    let text = okstra_without_landlock(&fx.p, &["exec", "plan.json"]);
    assert_eq!(text.code, 3);
    assert!(
        text.stderr.contains("exec/confinement-unavailable")
            || text.stdout.contains("exec/confinement-unavailable"),
        "{}{}",
        text.stdout,
        text.stderr
    );
    // The review says the same before anyone runs it.
    let show = okstra_without_landlock(&fx.p, &["show", "plan.json"]);
    assert!(
        show.stdout.contains("this machine cannot confine"),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout.contains("not here: exec will refuse it"),
        "{}",
        show.stdout
    );
}

#[test]
fn auto_confinement_without_landlock_runs_unconfined_and_says_so() {
    // The near miss: `auto` on the same machine runs, and records `none`.
    let fx = fixture();
    let spec_script = "echo ran >> \"$R\"\n".to_string();
    spec(&fx, &[("a", "", spec_script)]);
    let text =
        fx.p.read("spec.toml")
            .replace("confinement = \"required\"", "confinement = \"auto\"");
    fx.p.write("spec.toml", &text);
    std::fs::remove_file(fx.p.path("plan.json")).unwrap();
    assert_eq!(plan_json(&fx.p, "spec.toml").code, 0);
    let run = okstra_without_landlock(&fx.p, &["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let row = dispatch(&fx, "a");
    assert_eq!(row["confinement"], "none", "{row}");
    assert_eq!(row["writeEnforcement"]["confinement"], "auto");
}

#[test]
fn a_write_directory_behind_a_symlink_is_never_granted() {
    // `results/a` is planted as a link to outside the project: the
    // wrapper refuses to confine through it, and nothing runs.
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    let outside = tempfile::tempdir().unwrap();
    spec(&fx, &[("a", "", "echo x > results/a/x.txt\n".to_string())]);
    std::fs::create_dir_all(fx.p.path("results")).unwrap();
    symlink(outside.path(), fx.p.path("results/a")).unwrap();
    let run = exec(&fx);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    let row = dispatch(&fx, "a");
    assert_eq!(row["failureKind"], "confinement-failed", "{row}");
    let log = fx.p.read("prompts/a.md.log");
    assert!(log.contains("symlink"), "{log}");
}

#[test]
fn a_worktree_outside_the_project_is_writable_confined_and_its_neighbours_are_not() {
    if !landlock_here() {
        return;
    }
    let fx = fixture();
    let outside = tempfile::tempdir().unwrap();
    let outside = outside.path().canonicalize().unwrap();
    std::fs::create_dir_all(outside.join("wt")).unwrap();
    std::fs::write(outside.join("wt/lib.rs"), "fn a() {}\n").unwrap();
    std::fs::write(outside.join("neighbour.txt"), "keep\n").unwrap();
    let wt = outside.join("wt").display().to_string();
    let script = format!(
        "t worktree 'echo \"fn b() {{}}\" >> {wt}/lib.rs'\nt neighbour 'echo x >> {}/neighbour.txt'\n",
        outside.display()
    );
    spec(
        &fx,
        &[(
            "a",
            &format!("role = \"implementer\"\nworktreePath = \"{wt}\""),
            script,
        )],
    );
    let run = exec(&fx);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let o = tries(&fx, "a");
    assert!(!o["worktree"].0, "{:?}", o["worktree"]);
    assert_try_refused(&o, "neighbour", "Permission denied");
    assert_eq!(
        std::fs::read_to_string(outside.join("wt/lib.rs")).unwrap(),
        "fn a() {}\nfn b() {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("neighbour.txt")).unwrap(),
        "keep\n"
    );
}
