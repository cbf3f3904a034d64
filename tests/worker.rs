//! `okstra worker` run by hand, as exec runs it: on glibc Linux the wrapper
//! starts before `main` (src/start.rs), so these pin what it must still do
//! there: read exec's command line, fall back to clap's help and errors, and
//! give the child open standard streams.

mod common;

use common::Project;
use serde_json::Value;
use std::process::Command;

/// exec's form of the wrapper's command line for attempt `attempt` of a
/// `command` job running `script`, in project `p`.
fn wrapper_at(p: &Project, attempt: &str, script: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_okstra"));
    cmd.arg("worker")
        .arg("--project-root")
        .arg(p.root())
        .args(["--provider", "command", "--model", "m"])
        .args(["--prompt", "prompts/w.md", "--result", "results/w.md"])
        .args(["--worker-result", "results/w.md", "--worker-key", "w"])
        .args(["--presentation", "quiet", "--attempt", attempt])
        .args(["--dispatch-id", "inv-w:attempt-1", "--", "sh", "-c", script])
        .current_dir(p.root());
    cmd
}

fn wrapper(p: &Project, script: &str) -> Command {
    wrapper_at(p, "1", script)
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
    let p = project();
    let out = wrapper(&p, r#"cat > "$OKSTRA_RESULT_PATH"; exit 3"#)
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

#[test]
fn the_child_gets_open_standard_streams_when_the_wrappers_were_closed() {
    let p = project();
    // The child checks its own descriptors 1 and 2 (inherited from the
    // wrapper); the wrapper was started with 0, 1 and 2 closed.
    let script = r#"{ [ -e /proc/self/fd/1 ] && [ -e /proc/self/fd/2 ] && echo open || echo closed; } > "$OKSTRA_RESULT_PATH" 2>/dev/null; echo to-stdout; echo to-stderr >&2"#;
    let inner = wrapper(&p, script);
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

#[test]
fn help_and_bad_arguments_get_clap_from_before_main() {
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

    let p = project();
    let out = wrapper_at(&p, "0", "exit 0").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--attempt <N>"), "{err}");
    assert!(!p.exists("prompts/w.md.status.json"));
}

#[test]
fn a_command_that_cannot_be_executed_exits_126_and_one_not_found_127() {
    // The wrapper starts its child with posix_spawn (src/process/spawn.rs):
    // its errors must still map to the shell's two codes.
    let p = project();
    p.write("not-executable.sh", "#!/bin/sh\nexit 0\n");
    for (program, code, says) in [
        ("./not-executable.sh", 126, "permission denied"),
        ("okstra-no-such-program", 127, "command not found"),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_okstra"));
        cmd.arg("worker")
            .arg("--project-root")
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
