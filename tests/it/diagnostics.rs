//! How errors look from the command line: colour (`--color`, NO_COLOR,
//! CLICOLOR_FORCE), secondary labels, wide characters, minified input, and
//! inputs that once crashed the reader.

use crate::common::*;

fn run_env(p: &Project, env: &[(&str, &str)], args: &[&str]) -> Run {
    let mut cmd = assert_cmd::Command::cargo_bin("okstra").unwrap();
    cmd.current_dir(p.root())
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn bad_spec() -> Project {
    let p = Project::new();
    p.write(
        "spec.toml",
        "[[workers]]\nworkerId = \"a\"\nrole = \"r\"\npromptPth = \"p.md\"\n",
    );
    p
}

const ESC: char = '\x1b';

#[test]
fn color_always_colours_and_never_does_not() {
    let p = bad_spec();
    for args in [
        &["--color", "always", "validate", "spec.toml"][..],
        &["validate", "spec.toml", "--color", "always"][..],
        &["validate", "spec.toml", "--color=always"][..],
    ] {
        let run = run_env(&p, &[], args);
        assert_eq!(run.code, 2);
        assert!(run.stderr.contains(ESC), "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("promptPth"), "{}", run.stderr);
    }
    // A pipe is no terminal: auto means plain, and so does never even
    // when colour is forced from the environment.
    let run = run_env(&p, &[], &["validate", "spec.toml"]);
    assert_eq!(run.code, 2);
    assert!(!run.stderr.contains(ESC), "{}", run.stderr);
    let run = run_env(
        &p,
        &[("CLICOLOR_FORCE", "1")],
        &["validate", "spec.toml", "--color", "never"],
    );
    assert!(!run.stderr.contains(ESC), "{}", run.stderr);
    // JSON is never coloured.
    let run = run_env(
        &p,
        &[],
        &[
            "validate",
            "spec.toml",
            "--color",
            "always",
            "--format",
            "json",
        ],
    );
    assert!(!run.stdout.contains(ESC), "{}", run.stdout);
    assert!(run.codes().contains(&"schema/violation".to_string()));
}

#[test]
fn no_color_wins_over_a_forced_auto() {
    let p = bad_spec();
    let run = run_env(&p, &[("CLICOLOR_FORCE", "1")], &["validate", "spec.toml"]);
    assert!(run.stderr.contains(ESC), "CLICOLOR_FORCE colours auto");
    let run = run_env(
        &p,
        &[("NO_COLOR", "1"), ("CLICOLOR_FORCE", "1")],
        &["validate", "spec.toml"],
    );
    assert_eq!(run.code, 2);
    assert!(!run.stderr.contains(ESC), "{}", run.stderr);
    assert!(run.stderr.contains("error[schema/violation]"));
    // An explicit --color always is the user's word, over the environment.
    let run = run_env(
        &p,
        &[("NO_COLOR", "1")],
        &["--color", "always", "validate", "spec.toml"],
    );
    assert!(run.stderr.contains(ESC));
}

#[test]
fn every_command_takes_color() {
    let p = Project::new();
    for args in [
        &["schema", "--color", "never"][..],
        &["--color", "never", "schema"][..],
        &["show", "missing.json", "--color", "never"][..],
        &["doctor", "--color", "never"][..],
        &["status", "--manifest", "m.json", "--color", "never"][..],
    ] {
        let run = run_env(&p, &[], args);
        assert!(
            !run.stderr.contains("unexpected argument"),
            "{args:?}: {}",
            run.stderr
        );
    }
    let run = run_env(&p, &[], &["validate", "x.toml", "--color", "sometimes"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("sometimes"), "{}", run.stderr);
}

#[test]
fn a_write_conflict_points_at_both_entries() {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v1_manifest());
    p.write("prompts/a.md", "# a\n")
        .write("prompts/b.md", "# b\n");
    let entry = |id: &str| {
        format!(
            "[[workers]]\nworkerId = \"{id}\"\nprovider = \"command\"\nrole = \"analyst\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"results/same.md\"\ncommand = [\"true\"]\n"
        )
    };
    p.write("spec.toml", &format!("{}\n{}", entry("a"), entry("b")));
    let run = p.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    let text = run.stderr;
    assert!(
        text.contains("error[rules/write-conflict]: `a` and `b` in stage `main` may both write `results/same.md`\n"),
        "{text}"
    );
    assert!(
        text.contains(
            " --> spec.toml:9:1\n  |\n9 | [[workers]]\n  | ^^^^^^^^^^^\n  |\n \
             ::: spec.toml:1:1\n  |\n1 | [[workers]]\n  | ----------- `a` is declared here\n  \
             = worker: b\n"
        ),
        "{text}"
    );
    // The JSON form is as before: the second job's entry, no labels.
    let run = p.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
        "--format",
        "json",
    ]);
    let e = run.error("rules/write-conflict");
    assert_eq!(
        (e["line"].as_u64(), e["column"].as_u64()),
        (Some(9), Some(1))
    );
    assert_eq!(e["pointer"], "/workers/1");
    let keys: Vec<&str> = e.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(
        keys,
        ["code", "column", "file", "help", "line", "message", "pointer", "worker"]
    );
}

#[test]
fn carets_sit_under_wide_characters_from_the_command_line() {
    let p = Project::new();
    p.write(
        "spec.toml",
        "[[workers]]\nworkerId = \"a\"\nrole = \"分析 🎉\"\npromptPath = \"p.md\"\n\"説明🎉\" = 1\n",
    );
    let run = p.okstra(&["validate", "spec.toml"]);
    assert_eq!(run.code, 2);
    assert!(
        run.stderr.contains(" --> spec.toml:5:1\n"),
        "{}",
        run.stderr
    );
    // `"説明🎉"` takes 8 columns: two quotes, two CJK characters, an emoji.
    assert!(
        run.stderr.contains("5 | \"説明🎉\" = 1\n  | ^^^^^^^^\n"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_minified_spec_renders_a_window_of_its_one_line() {
    let p = Project::new();
    let mut workers = Vec::new();
    for i in 0..300 {
        workers.push(format!(
            "{{\"workerId\":\"w{i}\",\"role\":\"r\",\"promptPath\":\"p{i}.md\"}}"
        ));
    }
    workers.push("{\"workerId\":\"z\",\"role\":\"r\",\"promptPath\":\"z.md\",\"atempt\":1}".into());
    let text = format!("{{\"workers\":[{}]}}", workers.join(","));
    p.write("spec.json", &text);
    let run = p.okstra(&["validate", "spec.json"]);
    assert_eq!(run.code, 2);
    let col = text.find("\"atempt\"").unwrap() + 1;
    assert!(
        run.stderr.contains(&format!(" --> spec.json:1:{col}\n")),
        "{}",
        run.stderr
    );
    for line in run.stderr.lines() {
        assert!(line.chars().count() <= 140, "too wide: {line}");
    }
    assert!(
        run.stderr.contains(
            "\n1 | ...{\"workerId\":\"w299\",\"role\":\"r\",\"promptPath\":\"p299.md\"},{\"workerId\":\"z\""
        ),
        "{}",
        run.stderr
    );
    let run = p.okstra(&["validate", "spec.json", "--format", "json"]);
    let errors = run.json()["errors"].as_array().cloned().unwrap_or_default();
    let e = errors
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("`atempt`"))
        })
        .unwrap_or_else(|| panic!("no error about `atempt` in:\n{}", run.stdout));
    assert_eq!(e["code"], "schema/violation");
    assert_eq!(e["column"].as_u64(), Some(col as u64));
}

/// issue 13: a TOML string left open at a CRLF line end crashed the reader.
#[test]
fn an_open_string_at_a_crlf_line_end_is_a_syntax_error() {
    let p = Project::new();
    p.write("spec.toml", "x = \"a\r\n");
    let run = p.okstra(&["validate", "spec.toml"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("error[input/syntax]: TOML syntax error"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(" --> spec.toml:1:7\n"),
        "{}",
        run.stderr
    );
    let run = p.okstra(&["validate", "spec.toml", "--format", "json"]);
    assert_eq!(run.codes(), ["input/syntax"]);
    let e = run.error("input/syntax");
    assert_eq!(
        (e["line"].as_u64(), e["column"].as_u64()),
        (Some(1), Some(7))
    );

    // The near miss: closed, the same line is a value, and the spec's
    // remaining problems are its own.
    p.write("spec.toml", "x = \"a\"\r\n");
    let run = p.okstra(&["validate", "spec.toml", "--format", "json"]);
    assert!(
        !run.codes().contains(&"input/syntax".to_string()),
        "{}",
        run.stdout
    );
    assert!(run.codes().contains(&"schema/violation".to_string()));
}

/// `input/unreadable`: a named input that exists but cannot be read (here a
/// directory where a spec should be), exit 2, with the file named. Near
/// miss: the same name as a readable spec validates.
#[test]
fn an_input_that_cannot_be_read_is_input_unreadable() {
    let p = Project::new();
    std::fs::create_dir_all(p.path("spec.toml")).unwrap();
    let run = p.okstra(&["validate", "spec.toml", "--format", "json"]);
    assert_eq!(run.code, 2, "{}", run.stdout);
    let e = run.error("input/unreadable");
    assert_eq!(e["file"], "spec.toml");
    assert!(e["help"].as_str().is_some_and(|h| !h.is_empty()), "{e}");

    std::fs::remove_dir(p.path("spec.toml")).unwrap();
    p.write(
        "spec.toml",
        "[[workers]]\nworkerId = \"claude\"\nrole = \"analyst\"\npromptPath = \"p.md\"\nresultPath = \"r.md\"\n",
    );
    let run = p.okstra(&["validate", "spec.toml"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}
