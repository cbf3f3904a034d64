//! `okstra doctor` tells whether each agent CLI is logged in as the real CLI
//! itself tells it (src/provider/login.rs), case by case, in fake homes:
//! claude by `claude auth status`; codex by `codex login status` and, for
//! the variables, by whether `codex exec` sends a credential; gemini by its
//! own auth check (exit 41 at once when it finds none).
//!
//! Each test needs its CLI, on PATH or in `target/agent-clis` (see
//! `scripts/install-agent-clis.sh`); without it the test is skipped, saying
//! so, or fails where `REQUIRE_AGENT_CLIS=1`. Nothing reaches the network:
//! there is none, and every case is judged before a CLI would use it.

use crate::common;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One case: a fresh home and project, with files and variables.
struct Case {
    name: &'static str,
    dir: tempfile::TempDir,
    env: Vec<(String, String)>,
    bin: PathBuf,
}

impl Case {
    fn new(name: &'static str, bin: &Path) -> Case {
        let dir = tempfile::tempdir().unwrap();
        for d in ["home", "project"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Case {
            name,
            dir,
            env: Vec::new(),
            bin: bin.to_path_buf(),
        }
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn project(&self) -> PathBuf {
        self.dir.path().join("project")
    }
    fn file(self, rel: &str, text: &str) -> Case {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }
    fn var(mut self, k: &str, v: &str) -> Case {
        let v = v.replace("$HOME", &self.home().display().to_string());
        self.env.push((k.into(), v));
        self
    }

    /// A command in the case's clean environment, in its project.
    fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut path = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
            .collect::<Vec<_>>();
        path.insert(0, self.bin.clone());
        let mut cmd = Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::join_paths(path).unwrap())
            .env("HOME", self.home())
            .env(
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH",
                self.home().join("no-system-settings.json"),
            )
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(self.project())
            .stdin(Stdio::null());
        cmd
    }

    /// What doctor says of `cli`'s login: `ok`, `fail` or `warn`.
    fn doctor(&self, cli: &str) -> String {
        let out = self
            .command(env!("CARGO_BIN_EXE_okstra"))
            .args(["doctor", "--format", "json", "--project-root"])
            .arg(self.project())
            .output()
            .unwrap();
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == format!("login {cli}"))
            .map(|c| c["status"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no login check: {doc}"))
    }
}

/// Run `cmd` for at most `limit`: its exit code (`None` if still running,
/// then killed) and its output.
fn run_for(cmd: Command, limit: Duration) -> (Option<i32>, String) {
    run_until(cmd, limit, |_| false)
}

/// [`run_for`], stopping early once the output says `done`.
fn run_until(
    mut cmd: Command,
    limit: Duration,
    done: impl Fn(&str) -> bool,
) -> (Option<i32>, String) {
    use std::os::unix::process::CommandExt;
    let out = tempfile::NamedTempFile::new().unwrap();
    // Its own process group: an npm-installed CLI is a node launcher whose
    // native child would outlive a kill of the launcher alone (and go on
    // retrying its request for ever).
    cmd.stdout(out.reopen().unwrap())
        .stderr(out.reopen().unwrap())
        .process_group(0);
    let mut child = cmd.spawn().unwrap();
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let start = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        let so_far = std::fs::read_to_string(out.path()).unwrap_or_default();
        if start.elapsed() > limit || done(&so_far) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    let _ = child.wait();
    (
        code,
        std::fs::read_to_string(out.path()).unwrap_or_default(),
    )
}

const CLAUDE_LOGIN: &str =
    r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r","scopes":["user:inference"]}}"#;

#[test]
fn claude_logins_as_claude_auth_status_tells_them() {
    let Some(bin) = common::agent_cli("claude") else {
        return;
    };
    // Doctor warns where nothing needs the CLI: compare ok with not-fail.
    let cases = [
        Case::new("nothing", &bin),
        Case::new("api key variable", &bin).var("ANTHROPIC_API_KEY", "sk-ant-test"),
        Case::new("empty api key variable", &bin).var("ANTHROPIC_API_KEY", ""),
        Case::new("oauth token variable", &bin).var("CLAUDE_CODE_OAUTH_TOKEN", "t"),
        Case::new("claude.ai login", &bin).file("home/.claude/.credentials.json", CLAUDE_LOGIN),
        Case::new("token without the inference scope", &bin).file(
            "home/.claude/.credentials.json",
            r#"{"claudeAiOauth":{"accessToken":"a","scopes":["user:profile"]}}"#,
        ),
        Case::new("not JSON", &bin).file("home/.claude/.credentials.json", "garbage"),
        Case::new("CLAUDE_CONFIG_DIR", &bin)
            .file("home/cfg/.credentials.json", CLAUDE_LOGIN)
            .var("CLAUDE_CONFIG_DIR", "$HOME/cfg"),
        Case::new("login elsewhere than CLAUDE_CONFIG_DIR", &bin)
            .file("home/.claude/.credentials.json", CLAUDE_LOGIN)
            .var("CLAUDE_CONFIG_DIR", "$HOME/cfg"),
        Case::new("settings env", &bin).file(
            "home/.claude/settings.json",
            r#"{"env": {"ANTHROPIC_API_KEY": "k"}}"#,
        ),
        Case::new("api key helper", &bin).file(
            "home/.claude/settings.json",
            r#"{"apiKeyHelper": "echo k"}"#,
        ),
        Case::new("key from /login", &bin)
            .file("home/.claude.json", r#"{"primaryApiKey": "sk-ant-x"}"#),
    ];
    each(&cases, |case| {
        let mut cmd = case.command("claude");
        cmd.args(["auth", "status"]);
        let (code, out) = run_for(cmd, Duration::from_secs(60));
        let logged_in = code == Some(0);
        let said = case.doctor("claude");
        let want = if logged_in { "ok" } else { "warn" };
        assert_eq!(said, want, "{}: claude auth status said {out}", case.name);
    });
}

#[test]
fn codex_logins_as_codex_tells_them() {
    let Some(bin) = common::agent_cli("codex") else {
        return;
    };
    let chatgpt = r#"{"tokens":{"access_token":"a","refresh_token":"r","id_token":"eyJhbGciOiJub25lIn0.eyJlbWFpbCI6ImFAYi5jIn0.sig","account_id":"acc"}}"#;
    // Files: `codex login status` (its exit code) is the judge.
    let cases = [
        (Case::new("nothing", &bin), false),
        (
            Case::new("api key in auth.json", &bin)
                .file("home/.codex/auth.json", r#"{"OPENAI_API_KEY": "sk-test"}"#),
            true,
        ),
        (
            Case::new("ChatGPT tokens", &bin).file("home/.codex/auth.json", chatgpt),
            true,
        ),
        (
            Case::new("not JSON", &bin).file("home/.codex/auth.json", "garbage"),
            false,
        ),
        (
            Case::new("CODEX_HOME", &bin)
                .file("home/ch/auth.json", r#"{"OPENAI_API_KEY": "sk-test"}"#)
                .var("CODEX_HOME", "$HOME/ch"),
            true,
        ),
    ];
    each(&cases, |(case, _)| {
        let mut cmd = case.command("codex");
        cmd.args(["login", "status"]);
        let (code, out) = run_for(cmd, Duration::from_secs(60));
        let said = case.doctor("codex");
        let want = if code == Some(0) { "ok" } else { "warn" };
        assert_eq!(said, want, "{}: codex login status said {out}", case.name);
    });
    for (case, logged_in) in &cases {
        assert_eq!(case.doctor("codex") == "ok", *logged_in, "{}", case.name);
    }
    // Variables: whether `codex exec` attaches a credential to its first
    // request (which then fails: there is no network).
    let vars = [
        (
            Case::new("CODEX_API_KEY", &bin).var("CODEX_API_KEY", "sk-test"),
            true,
        ),
        (
            Case::new("OPENAI_API_KEY", &bin).var("OPENAI_API_KEY", "sk-test"),
            false,
        ),
    ];
    each(&vars, |(case, sends)| {
        let sends = *sends;
        let mut cmd = case.command("codex");
        cmd.args(["exec", "--skip-git-repo-check", "--ephemeral", "say ok"])
            .env("RUST_LOG", "debug");
        let (_, out) = run_until(cmd, Duration::from_secs(60), |o| {
            o.contains("auth_header_attached=")
        });
        let attached = out.contains("auth_header_attached=true");
        assert!(
            attached || out.contains("auth_header_attached=false"),
            "{}: codex exec never tried a request:\n{}",
            case.name,
            &out[out.len().saturating_sub(2000)..]
        );
        assert_eq!(attached, sends, "{}", case.name);
        let said = case.doctor("codex");
        assert_eq!(said == "ok", attached, "{}: doctor said {said}", case.name);
    });
}

#[test]
fn gemini_logins_as_its_auth_check_tells_them() {
    let Some(bin) = common::agent_cli("gemini") else {
        return;
    };
    let select = |t: &str| format!(r#"{{"security": {{"auth": {{"selectedType": "{t}"}}}}}}"#);
    let cases = [
        Case::new("nothing", &bin),
        Case::new("api key variable", &bin).var("GEMINI_API_KEY", "k"),
        Case::new("api key selected, none given", &bin)
            .file("home/.gemini/settings.json", &select("gemini-api-key")),
        Case::new("api key in the project's .env", &bin)
            .file("home/.gemini/settings.json", &select("gemini-api-key"))
            .file("project/.env", "GEMINI_API_KEY=k\n"),
        Case::new("a base url alone picks the gateway", &bin)
            .var("GEMINI_API_KEY", "k")
            .var("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:9"),
        Case::new("Google login selected, never made", &bin)
            .file("home/.gemini/settings.json", &select("oauth-personal")),
        Case::new("GEMINI_CLI_HOME", &bin)
            .file("home/gh/.gemini/settings.json", &select("vertex-ai"))
            .var("GEMINI_CLI_HOME", "$HOME/gh")
            .var("GEMINI_API_KEY", "k"),
    ];
    each(&cases, |case| {
        let mut cmd = case.command("gemini");
        cmd.args(["-p", "say ok", "--skip-trust"]);
        // Exit 41 is "no auth"; a request that fails (no network) got past it.
        let (code, out) = run_until(cmd, Duration::from_secs(90), |o| {
            o.contains("fetch failed") || o.contains("Attempt 1 failed")
        });
        let logged_in = code != Some(41);
        let said = case.doctor("gemini");
        assert_eq!(
            said,
            if logged_in { "ok" } else { "warn" },
            "{}: gemini exited {code:?}: {}",
            case.name,
            &out[..out.len().min(600)]
        );
    });
}

/// Judge every case at once, each on its own thread: the CLIs start slowly.
fn each<T: Sync>(cases: &[T], judge: impl Fn(&T) + Sync) {
    std::thread::scope(|s| {
        let handles: Vec<_> = cases.iter().map(|c| s.spawn(|| judge(c))).collect();
        for h in handles {
            if let Err(panic) = h.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}
