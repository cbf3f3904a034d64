//! The command line's manners: a report whose reader went away, completions
//! a real bash offers, man pages as `man` shows them, `validate -` and JSON
//! output (help on every argument and every man page under groff are unit
//! tests of the binary's, in src/cli/); and a new user's first hour
//! (issue 25): `okstra init` on a fresh repository, the commands it prints
//! run as pasted, `run`'s kept plan, `status` before any exec, and a
//! forgotten `--project-root`.

use crate::common;
use std::process::{Command, Stdio};

#[test]
fn a_report_whose_reader_went_away_ends_quietly() {
    // The read end is gone before okstra writes: every write fails with
    // EPIPE, as in `okstra schema jobs | head -0`.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    for args in [&["schema"][..], &["schema", "jobs"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .args(args)
            .stdout(Stdio::from(writer.try_clone().unwrap()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert_eq!(err, "", "{args:?}");
    }
}

#[test]
fn refused_input_keeps_its_exit_code_when_nobody_reads_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["show", "no-such-plan.json", "--format", "json"])
        .current_dir(dir.path())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// What a real bash offers for `words` (the last one being completed),
/// with okstra's completion script sourced.
fn bash_offers(words: &[&str]) -> Vec<String> {
    let script = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(script.status.success());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("okstra.bash");
    std::fs::write(&path, &script.stdout).unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let program = format!(
        "source '{}'\n\
         spec=$(complete -p okstra) || exit 9\n\
         fn=${{spec#*-F }}; fn=${{fn%% *}}\n\
         COMP_WORDS=({}); COMP_CWORD={cword}; COMP_LINE=\"${{COMP_WORDS[*]}}\"; COMP_POINT=${{#COMP_LINE}}\n\
         \"$fn\" okstra '{}' '{prev}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"\n",
        path.display(),
        quoted.join(" "),
        words[cword],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn bash_completes_the_commands_and_the_format_values() {
    let commands = bash_offers(&["okstra", ""]);
    for c in [
        "plan",
        "exec",
        "run",
        "status",
        "watch",
        "show",
        "validate",
        "schema",
        "doctor",
        "completions",
        "man",
    ] {
        assert!(commands.iter().any(|o| o == c), "no `{c}` in {commands:?}");
    }
    assert_eq!(bash_offers(&["okstra", "pl"]), ["plan"]);
    for cmd in ["plan", "exec", "doctor", "schema", "validate"] {
        let mut values = bash_offers(&["okstra", cmd, "--format", ""]);
        values.sort();
        assert_eq!(values, ["json", "text"], "okstra {cmd} --format");
    }
    let flags = bash_offers(&["okstra", "exec", "--"]);
    assert!(flags.iter().any(|f| f == "--junit"), "{flags:?}");
}

#[test]
fn completions_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("okstra") && text.contains("doctor"),
            "{shell}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `groff` is needed to render the man pages; where REQUIRE_GROFF is set
/// (as .ci/run sets it) its absence fails the test instead of skipping it.
fn groff() -> bool {
    let here = Command::new("groff").arg("--version").output().is_ok();
    if !here {
        common::missing(
            "REQUIRE_GROFF",
            "groff is not installed (apt-get install groff man-db)",
        );
    }
    here
}

/// `okstra man` as the binary prints it: a page `man -l` reads, and an
/// unknown command refused. (That every page renders under groff without a
/// warning is a test of the command line's own, in src/cli/generated.rs.)
#[test]
fn man_prints_a_page_man_reads_and_refuses_an_unknown_command() {
    if !groff() {
        return;
    }
    // As a person reads it: `man -l` on the page, where man-db is installed
    // (required with groff under REQUIRE_GROFF).
    let man = Command::new("man").arg("--version").output().is_ok();
    if !man {
        common::missing(
            "REQUIRE_GROFF",
            "man is not installed (apt-get install man-db)",
        );
    }
    if man {
        let dir = tempfile::tempdir().unwrap();
        let page = dir.path().join("okstra-plan.1");
        let roff = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .args(["man", "plan"])
            .output()
            .unwrap();
        std::fs::write(&page, roff.stdout).unwrap();
        let out = Command::new("man")
            .arg("-l")
            .arg(&page)
            .env("MANPAGER", "cat")
            .env("MANWIDTH", "80")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("--manifest") && text.contains("--format"),
            "{text}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["man", "nope", "--color", "never"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("error[input/invalid]"));
}

/// `okstra man exec`, as a person reads it: how it exits, with every error
/// code (from the table the README is checked against), the environment
/// (every `OKSTRA_*` variable) and examples.
#[test]
fn man_exec_shows_exit_status_environment_and_examples() {
    let roff = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["man", "exec"])
        .output()
        .unwrap();
    assert!(roff.status.success());
    let man = Command::new("man").arg("--version").output().is_ok();
    if !man {
        common::missing(
            "REQUIRE_GROFF",
            "man is not installed (apt-get install man-db)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("okstra-exec.1");
    std::fs::write(&page, &roff.stdout).unwrap();
    let out = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // A section's lines: from its heading to the next heading (the next
    // line that starts in the first column).
    let section = |name: &str| -> String {
        let mut lines = text.lines().skip_while(|l| *l != name);
        assert!(lines.next().is_some(), "no {name} section:\n{text}");
        lines
            .take_while(|l| l.is_empty() || l.starts_with(' '))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let exit = section("EXIT STATUS");
    for code in ["0", "1", "2", "3", "4", "130"] {
        assert!(
            exit.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "exit {code}:\n{exit}"
        );
    }
    for (code, exit_code) in [
        ("plan/stale", 3),
        ("exec/locked", 4),
        ("input/exists", 2),
        ("audit/incomplete", 1),
    ] {
        let at = exit.find(code).unwrap_or_else(|| panic!("{code}:\n{exit}"));
        assert!(
            exit[at..].contains(&format!("exit {exit_code}:")),
            "{code}:\n{exit}"
        );
    }
    let env = section("ENVIRONMENT");
    for var in [
        "OKSTRA_STOP_GRACE_SECONDS",
        "OKSTRA_LOCK_TIMEOUT_SECONDS",
        "OKSTRA_RESULT_PATH",
        "OKSTRA_SESSION_ID",
    ] {
        assert!(env.contains(var), "{var}:\n{env}");
    }
    let examples = section("EXAMPLES");
    assert!(
        examples.contains("okstra exec .okstra/run/plan.json"),
        "{examples}"
    );
}

/// `okstra validate -` reads stdin, names it `<stdin>`, and tells TOML from
/// JSON and the kind from the content.
#[test]
fn validate_reads_stdin() {
    let validate = |input: &str, extra: &[&str]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .args(["validate", "-", "--format", "json"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), doc)
    };
    let spec = "[[workers]]\nworkerId = \"a\"\nprovider = \"command\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\ncommand = [\"true\"]\n";
    let (code, doc) = validate(spec, &[]);
    assert_eq!(code, Some(0), "{doc}");
    assert_eq!(doc["files"][0]["file"], "<stdin>");
    assert_eq!(doc["files"][0]["kind"], "jobs");
    // A mistake is located in `<stdin>`, by line.
    let (code, doc) = validate(
        &spec.replace("role = \"analyst\"", "role = \"analyst\"\nbogus = 1"),
        &[],
    );
    assert_eq!(code, Some(2));
    assert_eq!(doc["errors"][0]["file"], "<stdin>");
    assert_eq!(doc["errors"][0]["line"], 5, "{doc}");
    // JSON, its kind guessed from its keys, or given.
    let manifest = r#"{"taskKey": "t", "teamStatePath": "run/team-state.json"}"#;
    let (_, doc) = validate(manifest, &[]);
    assert_eq!(doc["files"][0]["kind"], "manifest", "{doc}");
    let (code, doc) = validate(
        "{\n  \"taskKey\": 3, \"teamStatePath\": \"t.json\"\n}\n",
        &["--kind", "manifest"],
    );
    assert_eq!(code, Some(2));
    assert_eq!(doc["errors"][0]["line"], 2, "{doc}");
    let (code, doc) = validate("{\n  \"workers\": [,]\n}\n", &[]);
    assert_eq!(code, Some(2));
    assert_eq!(doc["errors"][0]["code"], "input/syntax", "{doc}");
    assert_eq!(doc["errors"][0]["file"], "<stdin>");
    // stdin holds one file.
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["validate", "-", "-", "--format", "json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("named twice"));
}

#[test]
fn schema_lists_in_json_too() {
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["schema", "--format", "json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    let names: Vec<&str> = doc["schemas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"jobs") && names.contains(&"team-state"),
        "{names:?}"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["schema", "--format", "json", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["wrote"].as_array().unwrap().len(), names.len());
    // An --out that cannot be a directory: its own code, its path.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["schema", "--format", "json", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["errors"][0]["code"], "output/unwritable", "{doc}");
    let out = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["schema", "nope", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["errors"][0]["code"], "input/invalid");
}

/// The README's demo command is `cargo run --release -- run ...`: with the
/// wrapper binary beside the command line in one package, cargo needs
/// `default-run` to know which to run (without it, the demo fails).
#[test]
fn cargo_run_runs_the_command_line() {
    let manifest: toml::Table = toml::from_str(include_str!("../../Cargo.toml")).unwrap();
    assert_eq!(
        manifest["package"]
            .get("default-run")
            .and_then(toml::Value::as_str),
        Some("okstra")
    );
}

/// A fake `claude` (PROVIDERS.md's stream-json, cut down): it answers
/// doctor's `--version`; as a worker it reads its prompt on stdin, writes
/// the file the prompt's `**Result Path:**` line names, and prints claude's
/// `system`/`init` and `result` events.
const FAKE_CLAUDE: &str = r#"#!/bin/sh
if [ "$1" = --version ]; then echo "2.1.0 (Claude Code)"; exit 0; fi
sid=""; prev=""
for a in "$@"; do [ "$prev" = --session-id ] && sid="$a"; prev="$a"; done
result=$(sed -n 's/^\*\*Result Path:\*\* //p' | head -n 1)
[ -n "$result" ] || { echo "the prompt names no Result Path" >&2; exit 3; }
mkdir -p "$(dirname "$result")"
printf '# What this project is\n\nA fake claude read its prompt.\n' > "$result"
printf '{"type":"system","subtype":"init","session_id":"%s","model":"claude-sonnet-4-5","tools":[]}\n' "$sid"
printf '{"type":"result","subtype":"success","is_error":false,"session_id":"%s","total_cost_usd":0.001,"usage":{"input_tokens":10,"output_tokens":5}}\n' "$sid"
"#;

/// A new user's machine: a fresh git repository `my app` (in `parent`), a
/// PATH holding a fake `claude` and the okstra under test (so the commands
/// okstra prints run as pasted), and a HOME where claude is logged in,
/// or not.
struct Machine {
    parent: tempfile::TempDir,
    bin: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Machine {
    fn new(logged_in: bool) -> Machine {
        let m = Machine {
            parent: tempfile::tempdir().unwrap(),
            bin: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        };
        let claude = m.bin.path().join("claude");
        std::fs::write(&claude, FAKE_CLAUDE).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).unwrap();
        if logged_in {
            // What `claude auth login` leaves (src/provider/claude.rs).
            let dir = m.home.path().join(".claude");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join(".credentials.json"),
                r#"{"claudeAiOauth": {"accessToken": "t", "scopes": ["user:inference"]}}"#,
            )
            .unwrap();
        }
        std::fs::create_dir(m.root()).unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .current_dir(m.root())
            .output()
            .unwrap();
        assert!(git.status.success(), "{git:?}");
        m
    }

    fn root(&self) -> std::path::PathBuf {
        self.parent.path().join("my app")
    }

    /// `okstra ARGS` in `dir`, with only this machine's environment (no
    /// agent CLI of the machine running the tests is seen).
    fn okstra_in(&self, dir: &std::path::Path, args: &[&str]) -> common::Run {
        self.sh_in(dir, &format!("okstra {}", args.join(" ")))
    }

    /// A command line, as a person pastes it, in `dir`.
    fn sh_in(&self, dir: &std::path::Path, line: &str) -> common::Run {
        let okstra = std::path::Path::new(env!("CARGO_BIN_EXE_okstra"));
        let path = format!(
            "{}:{}:/usr/local/bin:/usr/bin:/bin",
            self.bin.path().display(),
            okstra.parent().unwrap().display()
        );
        let out = Command::new("sh")
            .args(["-c", line])
            .current_dir(dir)
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.home.path())
            .env("OKSTRA_STOP_GRACE_SECONDS", "1")
            .output()
            .unwrap();
        common::Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
    }
}

/// The providers of a spec's workers, in order.
fn providers_of(spec: &str) -> Vec<String> {
    let doc: toml::Table = toml::from_str(spec).unwrap();
    doc["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["provider"].as_str().unwrap().to_string())
        .collect()
}

/// The `okstra ...` command lines a report ends with.
fn printed_commands(text: &str, verb: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| l.starts_with(&format!("okstra {verb} ")))
        .map(str::to_string)
        .collect()
}

/// Issue 25's first hour: `okstra init` in a fresh repository with a
/// logged-in claude writes a run whose printed commands plan and run it
/// as written; a second init refuses, naming each file, writing nothing.
#[test]
fn init_starts_a_run_that_plans_and_runs_as_printed() {
    let m = Machine::new(true);
    let root = m.root();
    let init = m.okstra_in(&root, &["init"]);
    common::assert_code(&init, 0);
    assert!(
        init.stdout.contains("claude  a worker: ")
            && init.stdout.contains("logged in: claude.ai login"),
        "{}",
        init.stdout
    );
    let spec = m.read("okstra.toml");
    assert_eq!(
        spec.lines().next(),
        Some("#:schema .okstra/schemas/jobs.schema.json")
    );
    assert_eq!(providers_of(&spec), ["claude"]);
    // The schema the directive names is the one okstra embeds.
    let embedded = Command::new(env!("CARGO_BIN_EXE_okstra"))
        .args(["schema", "jobs"])
        .output()
        .unwrap();
    assert_eq!(
        m.read(".okstra/schemas/jobs.schema.json").as_bytes(),
        embedded.stdout
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&m.read(".okstra/run/run-manifest.json")).unwrap();
    assert_eq!(manifest["taskKey"], "my-app");
    assert!(m
        .read(".okstra/prompts/claude.md")
        .contains("**Result Path:** .okstra/results/claude.md"));
    // What a run leaves stays out of git, git worktrees of workers too.
    let ignored = m.read(".okstra/.gitignore");
    for line in [
        "/run/*",
        "!/run/run-manifest.json",
        "/results/",
        "/worktrees/",
    ] {
        assert!(ignored.lines().any(|l| l == line), "{line}:\n{ignored}");
    }
    let plan = printed_commands(&init.stdout, "plan");
    let exec = printed_commands(&init.stdout, "exec");
    assert_eq!(
        (plan.len(), exec.len()),
        (1, 1),
        "one plan and one exec line: {}",
        init.stdout
    );
    assert!(!plan[0].contains("--project-root"), "{}", plan[0]);
    let planned = m.sh_in(&root, &plan[0]);
    common::assert_code(&planned, 0);
    let ran = m.sh_in(&root, &exec[0]);
    common::assert_code(&ran, 0);
    assert!(
        ran.stdout.contains("1 of 1 job completed"),
        "{}",
        ran.stdout
    );
    assert!(m
        .read(".okstra/results/claude.md")
        .contains("A fake claude read its prompt"));

    // Again: refused, each file named, nothing written (a file removed
    // meanwhile is not written back).
    std::fs::remove_file(root.join(".okstra/prompts/claude.md")).unwrap();
    let again = m.okstra_in(&root, &["init", "--format", "json"]);
    assert_eq!(again.code, 2, "{}{}", again.stdout, again.stderr);
    let named: Vec<String> = again.json()["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["code"], "input/exists", "{e}");
            e["file"].as_str().unwrap().to_string()
        })
        .collect();
    assert!(named.contains(&"okstra.toml".to_string()), "{named:?}");
    assert!(
        named.contains(&".okstra/run/run-manifest.json".to_string()),
        "{named:?}"
    );
    assert!(!named.iter().any(|f| f.contains("prompts")), "{named:?}");
    assert!(!root.join(".okstra/prompts/claude.md").exists());
    assert_eq!(m.read("okstra.toml"), spec);

    // The near miss: another fresh project takes init.
    let other = m.parent.path().join("other");
    std::fs::create_dir(&other).unwrap();
    common::assert_code(&m.okstra_in(&other, &["init"]), 0);
}

/// Without a logged-in agent CLI, init's spec has one `command` worker,
/// and run from elsewhere its commands name the project root; both run as
/// printed.
#[test]
fn init_without_a_logged_in_cli_writes_a_command_worker_that_runs() {
    let m = Machine::new(false);
    let init = m.okstra_in(m.parent.path(), &["init", "--project-root", "'my app'"]);
    common::assert_code(&init, 0);
    assert!(
        init.stdout.contains("claude  no worker: "),
        "{}",
        init.stdout
    );
    assert!(init.stdout.contains("not logged in"), "{}", init.stdout);
    let spec = m.read("okstra.toml");
    assert_eq!(providers_of(&spec), ["command"]);
    let plan = printed_commands(&init.stdout, "plan");
    assert!(plan[0].contains("--project-root 'my app'"), "{}", plan[0]);
    common::assert_code(&m.sh_in(m.parent.path(), &plan[0]), 0);
    let exec = printed_commands(&init.stdout, "exec");
    let ran = m.sh_in(m.parent.path(), &exec[0]);
    common::assert_code(&ran, 0);
    assert!(m
        .read(".okstra/results/command.md")
        .contains("# command, attempt 1"));
    // Asked for by name, claude gets its worker though it is not ready,
    // and init says so.
    let asked = m.parent.path().join("asked");
    std::fs::create_dir(&asked).unwrap();
    let init = m.okstra_in(
        &asked,
        &["init", "--provider", "claude", "--provider", "command"],
    );
    common::assert_code(&init, 0);
    assert!(
        init.stdout.contains("claude  a worker, but not ready"),
        "{}",
        init.stdout
    );
    let spec = std::fs::read_to_string(asked.join("okstra.toml")).unwrap();
    assert_eq!(providers_of(&spec), ["claude", "command"]);
}

/// `okstra run` keeps its plan under the run directory, and the `okstra
/// exec` line its review prints runs it again: the same plan, continued
/// (its job not run a second time).
#[test]
fn run_keeps_its_plan_and_its_exec_line_runs_it_again() {
    let m = Machine::new(false);
    let root = m.root();
    common::assert_code(&m.okstra_in(&root, &["init"]), 0);
    let run = m.okstra_in(
        &root,
        &[
            "run",
            "okstra.toml",
            "--manifest",
            ".okstra/run/run-manifest.json",
        ],
    );
    common::assert_code(&run, 0);
    let exec = printed_commands(&run.stderr, "exec");
    assert_eq!(exec.len(), 1, "{}", run.stderr);
    let kept = exec[0].strip_prefix("okstra exec ").unwrap();
    let digest = run
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("Plan "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    assert_eq!(kept, format!(".okstra/run/plans/{digest}.json"));
    let plan: serde_json::Value = serde_json::from_str(&m.read(kept)).unwrap();
    assert!(plan["digest"]
        .as_str()
        .unwrap()
        .starts_with(&format!("sha256:{digest}")));
    let again = m.sh_in(&root, &exec[0]);
    common::assert_code(&again, 0);
    assert!(
        again.stdout.contains("completed by an earlier exec"),
        "{}",
        again.stdout
    );
    let events = m.read(".okstra/run/lead-events.jsonl");
    assert_eq!(
        events.matches("\"worker-dispatched\"").count(),
        1,
        "{events}"
    );
}

/// `okstra status` before any exec: team-state does not exist, and it says
/// so with its path and the project root (`input/missing`, exit 2); a run
/// makes it answer. (A blank team-state is a run not started: tests/it/exec.rs.)
#[test]
fn status_without_team_state_says_where_it_looked() {
    let m = Machine::new(false);
    let root = m.root();
    common::assert_code(&m.okstra_in(&root, &["init"]), 0);
    let status = [
        "status",
        "--manifest",
        ".okstra/run/run-manifest.json",
        "--format",
        "json",
    ];
    let before = m.okstra_in(&root, &status);
    assert_eq!(before.code, 2, "{}{}", before.stdout, before.stderr);
    let e = before.error("input/missing");
    assert_eq!(e["file"], ".okstra/run/team-state.json");
    assert!(
        e["message"].as_str().unwrap().contains("does not exist"),
        "{e}"
    );
    let real = root.canonicalize().unwrap();
    assert!(
        e["help"]
            .as_str()
            .unwrap()
            .contains(&format!("project root: {}", real.display())),
        "{e}"
    );
    let text = m.okstra_in(&root, &status[..3]);
    assert!(
        text.stderr.contains(
            "error[input/missing]: team-state .okstra/run/team-state.json does not exist"
        ),
        "{}",
        text.stderr
    );
    // A missing manifest is missing too, named as given.
    let none = m.okstra_in(
        &root,
        &["status", "--manifest", "nope.json", "--format", "json"],
    );
    assert_eq!(none.error("input/missing")["file"], "nope.json");
    // The near miss: once the run ran, status answers.
    common::assert_code(
        &m.okstra_in(
            &root,
            &[
                "run",
                "okstra.toml",
                "--manifest",
                ".okstra/run/run-manifest.json",
            ],
        ),
        0,
    );
    let after = m.okstra_in(&root, &status);
    common::assert_code(&after, 0);
    assert_eq!(after.json()["workers"][0]["status"], "completed");
}

/// A forgotten `--project-root` reads as a missing file: the error names
/// the project root in use, so the cause shows. The near miss, with the
/// root, plans.
#[test]
fn a_missing_file_names_the_project_root_in_use() {
    let m = Machine::new(false);
    common::assert_code(&m.okstra_in(&m.root(), &["init"]), 0);
    let parent = m.parent.path();
    let plan = "plan 'my app/okstra.toml' --manifest 'my app/.okstra/run/run-manifest.json' --out plan.json --format json";
    let forgot = m.okstra_in(parent, &[plan]);
    assert_eq!(forgot.code, 2, "{}{}", forgot.stdout, forgot.stderr);
    let e = forgot.error("input/missing");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains(".okstra/prompts/command.md"),
        "{e}"
    );
    let here = parent.canonicalize().unwrap();
    let help = e["help"].as_str().unwrap();
    assert!(
        help.contains(&format!("project root: {};", here.display())),
        "{help}"
    );
    assert!(help.contains("--project-root"), "{help}");
    // A file named on the command line is taken from the current
    // directory, and says so, naming the root too.
    let spec = m.okstra_in(
        parent,
        &[
            "plan",
            "okstra.toml",
            "--manifest",
            "'my app/.okstra/run/run-manifest.json'",
            "--format",
            "json",
        ],
    );
    let help = spec.error("input/missing")["help"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        help.contains(&format!("current directory, {}", here.display())),
        "{help}"
    );
    assert!(
        help.contains(&format!("project root in use is {}", here.display())),
        "{help}"
    );
    let with_root = m.okstra_in(parent, &[plan, "--project-root", "'my app'"]);
    common::assert_code(&with_root, 0);
}
