//! The real agent CLIs accept the argv okstra builds (PROVIDERS.md).
//!
//! Runs only where `claude`, `codex` or `gemini` is on PATH (install them
//! with `scripts/install-agent-clis.sh`); each missing CLI is skipped, saying
//! so on stderr (`cargo test --test real_clis -- --nocapture`). Each CLI is
//! run through `okstra worker` with the argv okstra builds, a clean `HOME`,
//! no credentials, the prompt on stdin and a wall-clock limit: it must fail
//! for lack of credentials or network, never with an argument error.
//!
//! Each CLI runs twice: unconfined, and confined by Landlock
//! (docs/confinement.md#kernel-confinement) as exec runs it (write access to
//! the project, a private TMPDIR and the CLI's own state directory). Confined,
//! it must get exactly as far, and its output must show no refused write
//! (EACCES) on its own files.

use crate::common;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Ran {
    code: i32,
    status: Value,
    log: String,
    took: Duration,
}

/// `okstra worker` running `provider` in a fresh project with a clean HOME,
/// with `--confinement confinement` (`none` or `required`).
fn run_worker(
    provider: &str,
    model: &str,
    timeout_secs: u64,
    confinement: &str,
    extra_args: &[&str],
) -> Option<Ran> {
    if common::on_path(provider).is_none() {
        common::missing(
            "REQUIRE_AGENT_CLIS",
            &format!("`{provider}` is not on PATH (run scripts/install-agent-clis.sh and add its bin directory to PATH)"),
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    let home = dir.path().join("home");
    let extra = dir.path().join("worktree");
    for d in [&root, &home, &extra] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(root.join("prompt.md"), "Reply with the word ok.\n").unwrap();
    let session = uuid::Uuid::new_v4().to_string();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_okstra"));
    cmd.args(["worker", "--project-root"])
        .arg(&root)
        .args(["--provider", provider, "--model", model])
        .args(["--prompt", "prompt.md", "--result", "r.md"])
        .args(["--worker-result", "r.md", "--worker-key", provider])
        .args(["--timeout-seconds", &timeout_secs.to_string()])
        .arg("--write-dir")
        .arg(&extra)
        .args(["--session-id", &session])
        .args(["--confinement", confinement, "--confine-dir", "."])
        .args(extra_args)
        .arg("--confine-dir")
        .arg(&extra)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &home)
        .current_dir(&root)
        .stdin(Stdio::null());
    // One append-mode file for both streams, as exec opens the log.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(root.join("prompt.md.log"))
        .unwrap();
    cmd.stdout(log.try_clone().unwrap()).stderr(log);
    let started = Instant::now();
    let code = cmd.status().unwrap().code().unwrap_or(-1);
    let took = started.elapsed();
    let status: Value =
        serde_json::from_slice(&std::fs::read(root.join("prompt.md.status.json")).unwrap())
            .unwrap();
    let log = std::fs::read_to_string(root.join("prompt.md.log")).unwrap_or_default();
    eprintln!(
        "{provider} ({confinement}): okstra worker exited {code} after {:.1} s; status: {status}\n--- log (last 1500 bytes) ---\n{}",
        took.as_secs_f64(),
        tail(&log, 1500)
    );
    Some(Ran {
        code,
        status,
        log,
        took,
    })
}

fn tail(s: &str, n: usize) -> &str {
    let mut from = s.len().saturating_sub(n);
    while !s.is_char_boundary(from) {
        from += 1;
    }
    &s[from..]
}

fn kind(r: &Ran) -> &str {
    r.status["failureKind"].as_str().unwrap_or("")
}

/// The wrapper's reason (docs/providers.md#the-worker-wrapper): says what to do
/// and quotes the CLI.
#[track_caller]
fn assert_reason(r: &Ran, says: &[&str]) {
    let error = r.status["error"].as_str().unwrap_or("");
    for needle in says {
        assert!(error.contains(needle), "{needle}: {error}");
    }
}

#[track_caller]
fn assert_not_an_argument_error(provider: &str, r: &Ran) {
    assert_ne!(kind(r), "argument-error", "{provider}: {}", r.log);
    for needle in [
        "unknown option",
        "unexpected argument",
        "Unknown argument",
        "Not enough arguments",
    ] {
        assert!(
            !r.log.contains(needle),
            "{provider} refused its arguments ({needle}):\n{}",
            r.log
        );
    }
}

/// Confined, no write of the CLI's was refused, and the sidecar says it
/// was confined.
#[track_caller]
fn assert_confined_cleanly(provider: &str, r: &Ran) {
    assert_eq!(r.status["confinement"], "landlock-abi7", "{}", r.status);
    for needle in ["EACCES", "Permission denied", "permission denied", "EROFS"] {
        assert!(
            !r.log.contains(needle),
            "{provider} was refused a write of its own ({needle}):\n{}",
            r.log
        );
    }
}

fn check_claude(r: &Ran) {
    assert_not_an_argument_error("claude", r);
    // "Not logged in" arrives within seconds; argument errors would too, so
    // the kind tells them apart.
    assert_eq!(r.code, 1, "{}", r.log);
    assert_eq!(kind(r), "not-logged-in", "{}", r.log);
    assert_reason(
        r,
        &[
            "claude is not logged in",
            "claude auth login",
            "claude said: \"Not logged in · Please run /login\"",
        ],
    );
    // The init event came: the model and the session id okstra minted.
    assert!(r.status["servedModel"].is_string(), "{}", r.status);
    assert_eq!(r.status["cliSessionId"], r.status["sessionId"]);
}

#[test]
fn claude_fails_for_lack_of_credentials_not_arguments() {
    let Some(r) = run_worker("claude", "sonnet", 120, "none", &[]) else {
        return;
    };
    check_claude(&r);
    assert_eq!(r.status["confinement"], "none");
}

#[test]
fn claude_confined_gets_as_far_as_unconfined() {
    if !common::landlock_here() {
        return;
    }
    let Some(r) = run_worker("claude", "sonnet", 120, "required", &[]) else {
        return;
    };
    check_claude(&r);
    assert_confined_cleanly("claude", &r);
}

fn check_codex(r: &Ran) {
    assert_not_an_argument_error("codex", r);
    assert_ne!(r.code, 2, "codex argument errors exit 2:\n{}", r.log);
    assert!(
        r.log.contains("thread.started"),
        "codex started a thread: {}",
        r.log
    );
    assert!(r.status["cliSessionId"].is_string(), "{}", r.status);
    assert!(
        matches!(kind(r), "timeout" | "api-error" | "not-logged-in"),
        "{}",
        r.status
    );
    if kind(r) == "timeout" {
        // What it was stuck on, in its own words.
        assert_reason(r, &["codex last said: \"Reconnecting..."]);
    }
    let _ = r.took;
}

#[test]
fn codex_fails_for_lack_of_network_not_arguments() {
    // Without credentials codex retries forever: the wrapper's wall clock
    // stops it.
    let Some(r) = run_worker("codex", "gpt-5", 20, "none", &[]) else {
        return;
    };
    check_codex(&r);
}

#[test]
fn codex_confined_gets_as_far_as_unconfined() {
    if !common::landlock_here() {
        return;
    }
    let Some(r) = run_worker("codex", "gpt-5", 20, "required", &[]) else {
        return;
    };
    check_codex(&r);
    assert_confined_cleanly("codex", &r);
}

fn check_gemini(r: &Ran) {
    assert_not_an_argument_error("gemini", r);
    assert_eq!(r.code, 41, "gemini's missing-auth code:\n{}", r.log);
    assert_eq!(kind(r), "not-logged-in");
    assert_reason(
        r,
        &[
            "gemini is not logged in",
            "set GEMINI_API_KEY",
            "gemini said: \"Please set an Auth method",
        ],
    );
    assert!(
        !r.log.contains("Approval mode overridden"),
        "the approval mode must survive an untrusted folder:\n{}",
        r.log
    );
}

#[test]
fn gemini_fails_for_lack_of_credentials_not_arguments() {
    let Some(r) = run_worker("gemini", "gemini-2.5-pro", 120, "none", &[]) else {
        return;
    };
    check_gemini(&r);
}

#[test]
fn gemini_confined_gets_as_far_as_unconfined() {
    if !common::landlock_here() {
        return;
    }
    let Some(r) = run_worker("gemini", "gemini-2.5-pro", 120, "required", &[]) else {
        return;
    };
    check_gemini(&r);
    assert_confined_cleanly("gemini", &r);
}

#[test]
fn claude_bypass_permissions_as_root_runs_only_confined() {
    // As root claude refuses bypassPermissions outside a sandbox; confined,
    // the wrapper tells it it is in one (IS_SANDBOX=1).
    if !rustix::process::geteuid().is_root() || !common::landlock_here() {
        eprintln!("skipped: needs root and Landlock");
        return;
    }
    let bypass = ["--permission-mode", "bypassPermissions"];
    let Some(unconfined) = run_worker("claude", "sonnet", 120, "none", &bypass) else {
        return;
    };
    assert!(
        unconfined.log.contains("cannot be used with root"),
        "{}",
        unconfined.log
    );
    let Some(confined) = run_worker("claude", "sonnet", 120, "required", &bypass) else {
        return;
    };
    check_claude(&confined);
    assert_confined_cleanly("claude", &confined);
}
