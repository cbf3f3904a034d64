//! Each agent attempt's private CLI state (docs/confinement.md#provider-state),
//! with the fake CLIs of `providers` (its `FAKE_MODE = "refresh"`: a CLI
//! that refreshes its login while it works, plants a hook and rewrites its
//! settings, all in the state its variable names): what reaches the user's
//! home (the newest whole login, nothing else), what the row lists, and
//! what exec does for a wrapper killed before it finished its state. The
//! real CLIs' side is in tests/real_clis (e2e, concurrency).

use crate::common::*;
use crate::providers::{fixture, worker};
use serde_json::Value;
use std::time::{Duration, Instant};

#[test]
fn eight_workers_refreshing_one_login_leave_the_newest_whole_and_nothing_else() {
    // Each of 8 claude workers refreshes the login several times, plants a
    // hook in its settings and rewrites `.claude.json`. Afterwards the
    // user's login is the newest one written, whole; their settings and
    // `.claude.json` are as they were; nothing else appeared; each row
    // lists what its worker wrote.
    let workers: Vec<String> = (0..8)
        .map(|k| {
            let extra = format!(
                "env = {{ FAKE_MODE = \"refresh\", FAKE_STAMP = \"{}\" }}",
                2000 + 10 * ((k * 3) % 8)
            );
            worker(&format!("w{k}"), "claude", "sonnet", &extra)
        })
        .collect();
    let fx = fixture("cli-wrapper", &workers);
    let old_login = r#"{"claudeAiOauth":{"accessToken":"at-old","refreshToken":"rt-old","expiresAt":1000,"scopes":["user:inference"]}}"#;
    fx.home_file(".claude/.credentials.json", old_login)
        .home_file(".claude/settings.json", "{\"model\": \"sonnet\"}\n")
        .home_file(".claude.json", "{\"numStartups\": 3}\n");
    let before = files_under(&fx.home());
    // A reader of the user's login all through the run, as the user's own
    // claude would be: it never sees a torn or missing file.
    let login = fx.home().join(".claude/.credentials.json");
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (login, done) = (login.clone(), std::sync::Arc::clone(&done));
        std::thread::spawn(move || {
            let (mut reads, mut torn) = (0u32, Vec::new());
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                match std::fs::read(&login) {
                    Ok(b) if serde_json::from_slice::<Value>(&b).is_ok() => reads += 1,
                    other => torn.push(format!("{other:?}")),
                }
            }
            (reads, torn)
        })
    };
    let ran = fx.exec(&[]);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reads, torn) = reader.join().unwrap();
    assert!(
        reads > 0 && torn.is_empty(),
        "{reads} whole reads; torn: {torn:?}"
    );
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let mut after = files_under(&fx.home());
    let login = after.remove(".claude/.credentials.json").unwrap();
    let doc: Value = serde_json::from_slice(&login).expect("a whole JSON document");
    assert_eq!(doc["claudeAiOauth"]["expiresAt"], 2070, "the newest: {doc}");
    assert_eq!(doc["claudeAiOauth"]["refreshToken"], "rt-2070");
    let mut rest = before.clone();
    rest.remove(".claude/.credentials.json");
    assert_eq!(
        after, rest,
        "nothing else of the user's changed or appeared"
    );
    let rows: Vec<Value> = (0..8)
        .flat_map(|k| fx.dispatch_rows(&format!("w{k}")))
        .collect();
    assert_eq!(rows.len(), 8);
    let mut written_back = 0;
    for row in &rows {
        let state = &row["providerState"];
        assert_eq!(state["var"], "CLAUDE_CONFIG_DIR", "{row}");
        let writes: Vec<&str> = state["writes"]
            .as_array()
            .unwrap_or_else(|| panic!("{row}"))
            .iter()
            .map(|w| w.as_str().unwrap())
            .collect();
        for w in [".claude.json", ".credentials.json", "settings.json"] {
            assert!(writes.contains(&w), "{w}: {writes:?}");
        }
        let outcome = state["credentials"]["outcome"].as_str().unwrap();
        assert!(
            ["written-back", "not-newer"].contains(&outcome),
            "{outcome}"
        );
        written_back += usize::from(outcome == "written-back");
    }
    assert!(written_back >= 1);
}

#[test]
fn codex_and_gemini_write_only_their_private_state_confined_or_not() {
    let workers = [
        worker(
            "cx",
            "codex",
            "gpt",
            "env = { FAKE_MODE = \"refresh\", FAKE_STAMP = \"50\" }",
        ),
        worker(
            "gm",
            "gemini",
            "gem-pro",
            // Unconfined: the private state is not the kernel's doing.
            "env = { FAKE_MODE = \"refresh\", FAKE_STAMP = \"5000\" }\nconfinement = \"none\"",
        ),
    ];
    let fx = fixture("cli-wrapper", &workers);
    let codex_login = r#"{"tokens":{"access_token":"a","refresh_token":"r"},"last_refresh":"2026-12-04T09:00:00Z"}"#;
    fx.home_file(".codex/auth.json", codex_login)
        .home_file(".codex/config.toml", "model = \"gpt-5\"\n")
        .home_file(
            ".gemini/settings.json",
            r#"{"security":{"auth":{"selectedType":"oauth-personal"}}}"#,
        )
        .home_file(
            ".gemini/oauth_creds.json",
            r#"{"access_token":"a","refresh_token":"r","expiry_date":1}"#,
        );
    let before = files_under(&fx.home());
    let ran = fx.exec(&[]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let mut after = files_under(&fx.home());
    let codex: Value = serde_json::from_slice(&after.remove(".codex/auth.json").unwrap()).unwrap();
    assert_eq!(codex["last_refresh"], "2026-12-04T10:00:50Z", "{codex}");
    let gemini: Value =
        serde_json::from_slice(&after.remove(".gemini/oauth_creds.json").unwrap()).unwrap();
    assert_eq!(gemini["expiry_date"], 5000, "{gemini}");
    let mut rest = before.clone();
    rest.remove(".codex/auth.json");
    rest.remove(".gemini/oauth_creds.json");
    assert_eq!(after, rest);
    for (key, var, wrote) in [
        ("cx", "CODEX_HOME", "config.toml"),
        ("gm", "GEMINI_CLI_HOME", ".gemini/settings.json"),
    ] {
        let row = fx.dispatch_rows(key).pop().unwrap();
        assert_eq!(row["providerState"]["var"], var, "{row}");
        let writes = row["providerState"]["writes"].as_array().unwrap();
        assert!(writes.iter().any(|w| w == wrote), "{row}");
        assert_eq!(
            row["providerState"]["credentials"]["outcome"], "written-back",
            "{row}"
        );
    }
}

const OLD_LOGIN: &str = r#"{"claudeAiOauth":{"accessToken":"at-old","refreshToken":"rt-old","expiresAt":1000,"scopes":["user:inference"]}}"#;

/// One claude worker whose fake CLI refreshes the login to 4000 and then
/// hangs; the user holding [`OLD_LOGIN`]. exec runs it, `meddle` is given
/// the attempt's private directory once the login is refreshed, then the
/// wrapper is SIGKILLed: exec's output once it ended.
fn kill_after_refresh(meddle: impl FnOnce(&std::path::Path)) -> (Fx, std::process::Output) {
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "w",
            "claude",
            "sonnet",
            "env = { FAKE_MODE = \"refresh\", FAKE_STAMP = \"4000\", FAKE_HANG = \"1\" }",
        )],
    );
    fx.home_file(".claude/.credentials.json", OLD_LOGIN);
    let exec = fx
        .command(&["exec", "plan.json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let refreshed = fx.scratch("w.refreshed");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !refreshed.exists() {
        assert!(Instant::now() < deadline, "the fake CLI never refreshed");
        std::thread::sleep(Duration::from_millis(20));
    }
    meddle(&attempt_dir(&fx));
    let status = fx.p.read_json("prompts/w.md.status.json");
    let wrapper = status["wrapperPid"].as_u64().unwrap() as i32;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(wrapper).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let out = exec.wait_with_output().unwrap();
    (fx, out)
}

/// Worker `w`'s first attempt's private directory, as its dispatch records it.
fn attempt_dir(fx: &Fx) -> std::path::PathBuf {
    let dispatched = fx.events_of("worker-dispatched", "w");
    std::path::PathBuf::from(dispatched[0]["tmpDir"].as_str().unwrap())
}

/// The user's claude login.
fn user_login(fx: &Fx) -> Value {
    let text = std::fs::read_to_string(fx.home().join(".claude/.credentials.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_login_refreshed_by_an_attempt_whose_wrapper_was_killed_is_written_back_by_exec() {
    // The wrapper is SIGKILLed after its CLI refreshed the login: exec,
    // settling the attempt, lists its writes and writes the login back as
    // the wrapper would have, and removes the attempt's directory.
    let (fx, out) = kill_after_refresh(|_| {});
    let rows = fx.dispatch_rows("w");
    assert_eq!(
        rows.len(),
        1,
        "{rows:?}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(rows[0]["status"], "error", "{}", rows[0]);
    let state = &rows[0]["providerState"];
    assert_eq!(state["credentials"]["outcome"], "written-back", "{state}");
    for w in [".credentials.json", "settings.json", ".claude.json"] {
        assert!(
            state["writes"].as_array().unwrap().iter().any(|x| x == w),
            "{w}: {state}"
        );
    }
    let login = user_login(&fx);
    assert_eq!(login["claudeAiOauth"]["expiresAt"], 4000, "{login}");
    let dir = attempt_dir(&fx);
    assert!(!dir.exists(), "{} is left", dir.display());
}

#[test]
fn state_a_killed_wrapper_left_that_exec_cannot_finish_is_kept_and_reported() {
    // Its seed record garbled before the wrapper died: exec cannot tell
    // what was seeded, so it writes nothing back, keeps the directory (the
    // refreshed login is in it) and fails the run with
    // `exec/cleanup-incomplete` naming the record.
    let (fx, out) = kill_after_refresh(|dir| {
        std::fs::write(dir.join("seed.json"), "{").unwrap();
    });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("exec/cleanup-incomplete") && stderr.contains("seed.json"),
        "{stderr}"
    );
    assert_eq!(user_login(&fx)["claudeAiOauth"]["expiresAt"], 1000);
    let dir = attempt_dir(&fx);
    let kept = std::fs::read_to_string(dir.join("state/.credentials.json")).unwrap();
    assert!(kept.contains("\"expiresAt\":4000"), "{kept}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_login_that_cannot_be_copied_refuses_the_attempt_before_the_cli_runs() {
    // The user's settings are a link to itself: the wrapper cannot seed
    // the private state, and never falls back to the shared one.
    let fx = fixture("cli-wrapper", &[worker("w", "claude", "sonnet", "")]);
    std::fs::create_dir_all(fx.home().join(".claude")).unwrap();
    std::os::unix::fs::symlink("settings.json", fx.home().join(".claude/settings.json")).unwrap();
    let ran = fx.exec(&[]);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    let row = fx.dispatch_rows("w").pop().unwrap();
    assert_eq!(row["failureKind"], "confinement-failed", "{row}");
    let reason = row["reason"].as_str().unwrap();
    assert!(reason.contains("settings.json"), "{reason}");
    assert!(!fx.scratch("w.count").exists(), "the CLI never ran");
    // The near miss: a settings file that reads.
    let fx = fixture("cli-wrapper", &[worker("w", "claude", "sonnet", "")]);
    fx.home_file(".claude/settings.json", "{}");
    let ran = fx.exec(&[]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    assert!(fx.scratch("w.count").exists());
}

#[test]
fn a_refreshed_login_that_cannot_be_written_back_in_time_is_kept_and_reported() {
    // Something holds the lock on the user's `~/.claude` all through the run
    // (the user's own tool, say), and locks are waited for 1 s: the wrapper
    // cannot write the refreshed login back and keeps it; exec tries again,
    // cannot either, and fails the run with `exec/cleanup-incomplete`,
    // the login kept in the attempt's directory. The user's is untouched.
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "w",
            "claude",
            "sonnet",
            "env = { FAKE_MODE = \"refresh\", FAKE_STAMP = \"4000\" }",
        )],
    );
    fx.home_file(".claude/.credentials.json", OLD_LOGIN);
    fx.run_env("OKSTRA_LOCK_TIMEOUT_SECONDS", "1");
    let held = std::fs::File::open(fx.home().join(".claude")).unwrap();
    held.lock().unwrap();
    let ran = fx.exec(&[]);
    drop(held);
    assert_eq!(ran.code, 1, "{}\n{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr.contains("exec/cleanup-incomplete") && ran.stderr.contains("is kept"),
        "{}",
        ran.stderr
    );
    let row = fx.dispatch_rows("w").pop().unwrap();
    assert_eq!(row["status"], "completed", "{row}");
    let outcome = &row["providerState"]["credentials"];
    assert_eq!(outcome["outcome"], "failed", "{row}");
    assert!(
        outcome["reason"].as_str().unwrap().contains("not released"),
        "{outcome}"
    );
    assert_eq!(user_login(&fx)["claudeAiOauth"]["expiresAt"], 1000);
    let dir = attempt_dir(&fx);
    let kept = std::fs::read_to_string(dir.join("state/.credentials.json")).unwrap();
    assert!(kept.contains("\"expiresAt\":4000"), "{kept}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_a_home_the_cli_still_runs_on_private_state() {
    // Nothing to seed from, but the CLI is pointed at an empty private
    // state all the same, never left to find a home of its own.
    let fx = fixture(
        "cli-wrapper",
        &[worker(
            "w",
            "claude",
            "sonnet",
            "env = { FAKE_MODE = \"refresh\", FAKE_STAMP = \"4000\" }",
        )],
    );
    fx.run_env_remove("HOME");
    let ran = fx.exec(&[]);
    assert_eq!(ran.code, 0, "{}\n{}", ran.stdout, ran.stderr);
    let row = fx.dispatch_rows("w").pop().unwrap();
    let state = &row["providerState"];
    assert_eq!(state["var"], "CLAUDE_CONFIG_DIR", "{row}");
    assert!(
        state["writes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == "settings.json"),
        "{state}"
    );
    assert!(
        state.get("credentials").is_none(),
        "nothing seeded, nothing back: {state}"
    );
}
