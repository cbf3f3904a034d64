//! The command line's manners: a report whose reader went away, help on every
//! argument, completions a real bash offers, man pages groff renders
//! cleanly, `validate -` and JSON output.

mod common;
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

/// Every flag and positional of every command says what it is for: the
/// text `--help`, the man pages and the zsh / fish completions show.
#[test]
fn every_argument_has_help() {
    use clap::CommandFactory;
    fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let has = arg
                .get_help()
                .or(arg.get_long_help())
                .is_some_and(|h| !h.to_string().trim().is_empty());
            if !has {
                missing.push(format!("{path} {id}"));
            }
        }
        for sub in cmd.get_subcommands() {
            if sub.get_name() == "help" {
                continue;
            }
            if sub.get_about().is_none() {
                missing.push(format!("{path} {} (the command)", sub.get_name()));
            }
            walk(sub, &format!("{path} {}", sub.get_name()), missing);
        }
    }
    let mut cmd = okstra::cli::Cli::command();
    cmd.build();
    let mut missing = Vec::new();
    walk(&cmd, "okstra", &mut missing);
    assert!(missing.is_empty(), "arguments without help: {missing:#?}");
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

#[test]
fn every_man_page_renders_without_a_warning() {
    if !groff() {
        return;
    }
    for page in okstra::cli::man_pages() {
        let mut args = vec!["man".to_string()];
        args.extend(page.clone());
        let roff = Command::new(env!("CARGO_BIN_EXE_okstra"))
            .args(&args)
            .output()
            .unwrap();
        assert!(roff.status.success(), "{args:?}");
        let mut child = Command::new("groff")
            .args(["-man", "-ww", "-z"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child.stdin.take().unwrap().write_all(&roff.stdout).unwrap();
        let out = child.wait_with_output().unwrap();
        let warnings = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && warnings.is_empty(),
            "{page:?}: {warnings}"
        );
        let text = String::from_utf8_lossy(&roff.stdout);
        let name = page.map_or("okstra".to_string(), |p| format!("okstra-{p}"));
        assert!(text.contains(&format!(".TH {name} 1")), "{name}: {text}");
        for section in [
            ".SH \"EXIT STATUS\"\n",
            ".SH ENVIRONMENT\n",
            ".SH EXAMPLES\n",
        ] {
            assert!(text.contains(section), "{name} lacks {section}");
        }
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
    let manifest: toml::Table = toml::from_str(include_str!("../Cargo.toml")).unwrap();
    assert_eq!(
        manifest["package"]
            .get("default-run")
            .and_then(toml::Value::as_str),
        Some("okstra")
    );
}
