//! The one place that knows each provider CLI's command line (SPEC §6,
//! PROVIDERS.md): which argv it runs, whether it takes a session id, and how
//! to read the served model and the CLI's own session id from its output.
//!
//! Every agent reads its prompt on stdin (eager include): the wrapper points
//! the child's stdin at the prompt file. `command` jobs get the prompt on
//! stdin too, so a plain script can `cat` it.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// Exit code of a worker whose provider served a model other than the one
/// selected (SPEC §6). Settlement never promotes it to `completed`. 86 is
/// outside everything else a worker may exit with: the agent CLIs' own codes
/// (1, 2, gemini's 41–53), the shell's 124–127 (timeout, not executable, not
/// found) and 128 + signal numbers.
pub const SERVED_MODEL_MISMATCH_EXIT_CODE: i32 = 86;

/// Exit code recorded for a worker stopped by a timeout, as GNU `timeout`.
pub const TIMEOUT_EXIT_CODE: i32 = 124;

/// The providers okstra has an adapter for.
pub const KNOWN: [&str; 4] = ["claude", "codex", "gemini", "command"];

/// Per-job knobs for the agent CLIs. Each agent reads only its own:
/// claude `permission_mode`, codex `sandbox_mode`, gemini `approval_mode`.
/// `extra_args` go to any agent after the generated flags.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct ProviderOptions {
    pub permission_mode: Option<String>,
    pub sandbox_mode: Option<String>,
    pub approval_mode: Option<String>,
    pub extra_args: Vec<String>,
}

pub const DEFAULT_CLAUDE_PERMISSION_MODE: &str = "acceptEdits";
pub const DEFAULT_CODEX_SANDBOX_MODE: &str = "workspace-write";
pub const DEFAULT_GEMINI_APPROVAL_MODE: &str = "auto_edit";

pub fn is_known(provider: &str) -> bool {
    KNOWN.contains(&provider)
}

/// Only claude accepts a session id minted by okstra (`--session-id <uuid>`).
pub fn takes_session_id(provider: &str) -> bool {
    provider == "claude"
}

/// The provider a v1 worker gets when its entry names none (SPEC §2).
pub fn default_for_worker_id(worker_id: &str) -> Option<&'static str> {
    match worker_id {
        "claude" => Some("claude"),
        "codex" => Some("codex"),
        "gemini" => Some("gemini"),
        _ => None,
    }
}

/// Everything that shapes a job's command line.
#[derive(Debug, Clone, Copy)]
pub struct ArgvRequest<'a> {
    pub provider: &'a str,
    /// The model execution value; empty leaves the CLI's default model.
    pub model: &'a str,
    pub project_root: &'a Path,
    /// Absolute directories the job may write; the project root among them is
    /// implied by the working directory and not repeated.
    pub write_dirs: &'a [PathBuf],
    pub options: &'a ProviderOptions,
    /// The argv of a `command` job.
    pub command: &'a [String],
    /// Passed only to providers that take one.
    pub session_id: Option<&'a str>,
    /// codex refuses to run outside a git repository unless told to.
    pub project_is_git_repo: bool,
}

/// The argv the wrapper runs. Built without a session id it is what the plan
/// shows for review. An unknown provider gets an empty argv (plan refuses
/// unknown providers long before this).
pub fn build_argv(req: &ArgvRequest) -> Vec<String> {
    match req.provider {
        "claude" => claude_argv(req),
        "codex" => codex_argv(req),
        "gemini" => gemini_argv(req),
        "command" => req.command.to_vec(),
        _ => Vec::new(),
    }
}

fn claude_argv(req: &ArgvRequest) -> Vec<String> {
    let mut argv = strings(&["claude", "-p"]);
    push_model(&mut argv, "--model", req.model);
    argv.extend(strings(&["--output-format", "stream-json", "--verbose"]));
    argv.push("--permission-mode".into());
    argv.push(or_default(
        &req.options.permission_mode,
        DEFAULT_CLAUDE_PERMISSION_MODE,
    ));
    if let Some(id) = req.session_id {
        argv.push("--session-id".into());
        argv.push(id.into());
    }
    // `--add-dir` is variadic: the `=` form keeps it from swallowing whatever
    // follows.
    for dir in extra_dirs(req) {
        argv.push(format!("--add-dir={}", dir.display()));
    }
    argv.extend(req.options.extra_args.iter().cloned());
    argv
}

fn codex_argv(req: &ArgvRequest) -> Vec<String> {
    let mut argv = strings(&["codex", "exec"]);
    push_model(&mut argv, "-m", req.model);
    argv.push("-C".into());
    argv.push(req.project_root.display().to_string());
    argv.push("--sandbox".into());
    argv.push(or_default(
        &req.options.sandbox_mode,
        DEFAULT_CODEX_SANDBOX_MODE,
    ));
    argv.push("--json".into());
    if !req.project_is_git_repo {
        argv.push("--skip-git-repo-check".into());
    }
    for dir in extra_dirs(req) {
        argv.push("--add-dir".into());
        argv.push(dir.display().to_string());
    }
    argv.extend(req.options.extra_args.iter().cloned());
    // `-` reads the prompt from stdin.
    argv.push("-".into());
    argv
}

fn gemini_argv(req: &ArgvRequest) -> Vec<String> {
    let mut argv = strings(&["gemini"]);
    push_model(&mut argv, "-m", req.model);
    argv.push("--approval-mode".into());
    argv.push(or_default(
        &req.options.approval_mode,
        DEFAULT_GEMINI_APPROVAL_MODE,
    ));
    // In a folder gemini has not been told to trust, every approval mode
    // that lets it act (yolo, and auto_edit too, as measured with 0.61.0:
    // "Approval mode overridden to \"default\" because the current folder is
    // not trusted") silently drops to `default`, which cannot approve
    // anything unattended: trust the project for this run.
    let mode = req
        .options
        .approval_mode
        .as_deref()
        .unwrap_or(DEFAULT_GEMINI_APPROVAL_MODE);
    if !matches!(mode, "default" | "plan")
        && !req.options.extra_args.iter().any(|a| a == "--skip-trust")
    {
        argv.push("--skip-trust".into());
    }
    argv.extend(strings(&["--output-format", "stream-json"]));
    let dirs: Vec<String> = extra_dirs(req).map(|d| d.display().to_string()).collect();
    if dirs.iter().any(|d| d.contains(',')) {
        // A comma inside a path would split it: repeat the flag instead.
        for dir in &dirs {
            argv.push(format!("--include-directories={dir}"));
        }
    } else if !dirs.is_empty() {
        argv.push(format!("--include-directories={}", dirs.join(",")));
    }
    argv.extend(req.options.extra_args.iter().cloned());
    argv
}

/// Write directories other than the project root, first occurrence only.
fn extra_dirs<'a>(req: &'a ArgvRequest) -> impl Iterator<Item = &'a PathBuf> + 'a {
    req.write_dirs
        .iter()
        .enumerate()
        .filter_map(move |(i, dir)| {
            let repeated = req.write_dirs[..i].contains(dir);
            (dir.as_path() != req.project_root && !repeated).then_some(dir)
        })
}

fn push_model(argv: &mut Vec<String>, flag: &str, model: &str) {
    if !model.is_empty() {
        argv.push(flag.into());
        argv.push(model.into());
    }
}

fn or_default(value: &Option<String>, default: &str) -> String {
    value.clone().unwrap_or_else(|| default.to_string())
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The model the provider says served the run, from one line of its
/// structured output: claude's stream-json `system`/`init` event, gemini's
/// stream-json `init` event. codex reports none.
pub fn served_model_from_line(provider: &str, line: &str) -> Option<String> {
    let event = parse_event(line)?;
    let is_init = match provider {
        "claude" => {
            field(&event, "type") == Some("system") && field(&event, "subtype") == Some("init")
        }
        "gemini" => field(&event, "type") == Some("init"),
        _ => false,
    };
    is_init
        .then(|| field(&event, "model").map(str::to_string))
        .flatten()
}

/// The CLI's own session (or thread) id, from one line of its structured
/// output: claude's `session_id`, codex's `thread.started` `thread_id`,
/// gemini's `session_id` where it gives one.
pub fn cli_session_id_from_line(provider: &str, line: &str) -> Option<String> {
    let event = parse_event(line)?;
    let id = match provider {
        "claude" | "gemini" => field(&event, "session_id"),
        "codex" if field(&event, "type") == Some("thread.started") => field(&event, "thread_id"),
        _ => None,
    };
    id.filter(|s| !s.is_empty()).map(str::to_string)
}

fn parse_event(line: &str) -> Option<Value> {
    let line = line.trim();
    if !line.starts_with('{') {
        return None;
    }
    serde_json::from_str::<Value>(line)
        .ok()
        .filter(Value::is_object)
}

fn field<'a>(event: &'a Value, key: &str) -> Option<&'a str> {
    event.get(key)?.as_str()
}

/// What kind of failure a provider CLI's non-zero exit was, told apart where
/// the CLI allows it (PROVIDERS.md), from its exit code and this attempt's
/// output (stdout and stderr together, as the log holds them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The CLI refused its command line.
    ArgumentError,
    /// No credentials: log the CLI in first.
    NotLoggedIn,
    /// The model API answered with an error, or could not be reached.
    ApiError,
    /// gemini's fatal codes besides auth: input, sandbox, config, turn limit.
    CliError,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::ArgumentError => "argument-error",
            FailureKind::NotLoggedIn => "not-logged-in",
            FailureKind::ApiError => "api-error",
            FailureKind::CliError => "cli-error",
        }
    }

    /// What to do about it, for the error-log message.
    pub fn hint(self, provider: &str) -> String {
        match self {
            FailureKind::ArgumentError => format!(
                "{provider} refused its arguments (check permissionMode/sandboxMode/approvalMode/extraArgs and the CLI version)"
            ),
            FailureKind::NotLoggedIn => {
                format!("{provider} is not logged in (run `{provider}` once interactively to log in)")
            }
            FailureKind::ApiError => format!("{provider} got an API error or no network"),
            FailureKind::CliError => format!("{provider} stopped with a fatal error"),
        }
    }
}

/// Classify a failed run. `None` when the exit was 0 or the CLI gave no sign.
pub fn failure_kind(provider: &str, exit_code: i32, output: &str) -> Option<FailureKind> {
    if exit_code == 0 {
        return None;
    }
    let has = |needles: &[&str]| {
        let lower = output.to_ascii_lowercase();
        needles
            .iter()
            .any(|n| lower.contains(&n.to_ascii_lowercase()))
    };
    const LOGIN: &[&str] = &[
        "not logged in",
        "please run /login",
        "invalid api key",
        "401 unauthorized",
        "\"status\":401",
        "status: 401",
        "no auth",
        "authentication required",
        "please set an auth method",
    ];
    const API: &[&str] = &[
        "\"is_error\":true",
        "\"is_error\": true",
        "api_error_status",
        "\"type\":\"turn.failed\"",
        "\"type\":\"error\"",
        "api error",
        "apierror",
        "econnrefused",
        "enotfound",
        "fetch failed",
        "stream disconnected",
        "error sending request",
    ];
    match provider {
        "claude" => {
            // An argument error is instant: a message, no structured event.
            let started = output.lines().any(|l| parse_event(l).is_some());
            if has(LOGIN) {
                Some(FailureKind::NotLoggedIn)
            } else if has(API) {
                Some(FailureKind::ApiError)
            } else if !started && has(&["error:", "must be a valid uuid", "already in use"]) {
                Some(FailureKind::ArgumentError)
            } else {
                None
            }
        }
        "codex" => {
            if exit_code == 2 {
                Some(FailureKind::ArgumentError)
            } else if has(LOGIN) {
                Some(FailureKind::NotLoggedIn)
            } else if has(API) {
                Some(FailureKind::ApiError)
            } else {
                None
            }
        }
        "gemini" => match exit_code {
            41 => Some(FailureKind::NotLoggedIn),
            42 | 44 | 52 | 53 => Some(FailureKind::CliError),
            _ if has(&[
                "unknown argument",
                "unknown arguments",
                "not enough arguments",
                "cannot use both",
                "invalid values",
                "missing required argument",
            ]) =>
            {
                Some(FailureKind::ArgumentError)
            }
            _ if has(LOGIN) => Some(FailureKind::NotLoggedIn),
            _ if has(API) => Some(FailureKind::ApiError),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(
        provider: &'a str,
        write_dirs: &'a [PathBuf],
        options: &'a ProviderOptions,
    ) -> ArgvRequest<'a> {
        ArgvRequest {
            provider,
            model: "m-1",
            project_root: Path::new("/proj"),
            write_dirs,
            options,
            command: &[],
            session_id: None,
            project_is_git_repo: true,
        }
    }

    fn dirs() -> Vec<PathBuf> {
        vec![
            PathBuf::from("/proj"),
            PathBuf::from("/wt/a"),
            PathBuf::from("/wt/b"),
            PathBuf::from("/wt/a"),
        ]
    }

    #[test]
    fn claude_argv_defaults() {
        let options = ProviderOptions::default();
        let dirs = dirs();
        let argv = build_argv(&request("claude", &dirs, &options));
        assert_eq!(
            argv,
            strings(&[
                "claude",
                "-p",
                "--model",
                "m-1",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "acceptEdits",
                "--add-dir=/wt/a",
                "--add-dir=/wt/b",
            ])
        );
    }

    #[test]
    fn claude_argv_with_session_mode_and_extra() {
        let options = ProviderOptions {
            permission_mode: Some("plan".into()),
            extra_args: strings(&["--max-turns", "3"]),
            ..Default::default()
        };
        let req = ArgvRequest {
            session_id: Some("0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11"),
            ..request("claude", &[], &options)
        };
        assert_eq!(
            build_argv(&req),
            strings(&[
                "claude",
                "-p",
                "--model",
                "m-1",
                "--output-format",
                "stream-json",
                "--verbose",
                "--permission-mode",
                "plan",
                "--session-id",
                "0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11",
                "--max-turns",
                "3",
            ])
        );
    }

    #[test]
    fn codex_argv_defaults() {
        let options = ProviderOptions::default();
        let dirs = dirs();
        let argv = build_argv(&request("codex", &dirs, &options));
        assert_eq!(
            argv,
            strings(&[
                "codex",
                "exec",
                "-m",
                "m-1",
                "-C",
                "/proj",
                "--sandbox",
                "workspace-write",
                "--json",
                "--add-dir",
                "/wt/a",
                "--add-dir",
                "/wt/b",
                "-",
            ])
        );
    }

    #[test]
    fn codex_argv_outside_git_ignores_session_id() {
        let options = ProviderOptions {
            sandbox_mode: Some("read-only".into()),
            permission_mode: Some("plan".into()),
            extra_args: strings(&["--ephemeral"]),
            ..Default::default()
        };
        let req = ArgvRequest {
            project_is_git_repo: false,
            session_id: Some("0b1c7a52-7d1e-4c4e-9d55-3f0c2b9b8c11"),
            ..request("codex", &[], &options)
        };
        assert_eq!(
            build_argv(&req),
            strings(&[
                "codex",
                "exec",
                "-m",
                "m-1",
                "-C",
                "/proj",
                "--sandbox",
                "read-only",
                "--json",
                "--skip-git-repo-check",
                "--ephemeral",
                "-",
            ])
        );
    }

    #[test]
    fn gemini_argv_defaults() {
        let options = ProviderOptions::default();
        let dirs = dirs();
        let argv = build_argv(&request("gemini", &dirs, &options));
        assert_eq!(
            argv,
            strings(&[
                "gemini",
                "-m",
                "m-1",
                "--approval-mode",
                "auto_edit",
                "--skip-trust",
                "--output-format",
                "stream-json",
                "--include-directories=/wt/a,/wt/b",
            ])
        );
    }

    #[test]
    fn gemini_argv_without_dirs_and_with_comma_dirs() {
        let options = ProviderOptions {
            approval_mode: Some("yolo".into()),
            extra_args: strings(&["--skip-trust"]),
            ..Default::default()
        };
        let argv = build_argv(&request("gemini", &[], &options));
        assert_eq!(
            argv,
            strings(&[
                "gemini",
                "-m",
                "m-1",
                "--approval-mode",
                "yolo",
                "--output-format",
                "stream-json",
                "--skip-trust",
            ])
        );
        let odd = vec![PathBuf::from("/a,b"), PathBuf::from("/c")];
        let argv = build_argv(&request("gemini", &odd, &options));
        assert!(argv.contains(&"--include-directories=/a,b".to_string()));
        assert!(argv.contains(&"--include-directories=/c".to_string()));
    }

    #[test]
    fn empty_model_leaves_the_cli_default() {
        let options = ProviderOptions::default();
        for provider in ["claude", "codex", "gemini"] {
            let req = ArgvRequest {
                model: "",
                ..request(provider, &[], &options)
            };
            let argv = build_argv(&req);
            assert!(
                !argv.iter().any(|a| a == "--model" || a == "-m"),
                "{argv:?}"
            );
        }
    }

    #[test]
    fn command_argv_is_verbatim() {
        let options = ProviderOptions {
            extra_args: strings(&["--ignored"]),
            ..Default::default()
        };
        let command = strings(&["sh", "-c", "echo hi"]);
        let req = ArgvRequest {
            command: &command,
            session_id: Some("x"),
            ..request("command", &[], &options)
        };
        assert_eq!(build_argv(&req), command);
        assert!(build_argv(&request("nope", &[], &options)).is_empty());
    }

    #[test]
    fn provider_facts() {
        for p in KNOWN {
            assert!(is_known(p));
        }
        assert!(!is_known("Claude"));
        assert!(takes_session_id("claude"));
        assert!(!takes_session_id("codex"));
        assert!(!takes_session_id("gemini"));
        assert!(!takes_session_id("command"));
        assert_eq!(default_for_worker_id("codex"), Some("codex"));
        assert_eq!(default_for_worker_id("claude"), Some("claude"));
        assert_eq!(default_for_worker_id("gemini"), Some("gemini"));
        assert_eq!(default_for_worker_id("report-writer"), None);
    }

    #[test]
    fn served_model_from_init_events() {
        let claude = r#"{"type":"system","subtype":"init","cwd":"/p","session_id":"s-1","model":"claude-sonnet-4-5","permissionMode":"acceptEdits"}"#;
        assert_eq!(
            served_model_from_line("claude", claude).as_deref(),
            Some("claude-sonnet-4-5")
        );
        assert_eq!(
            served_model_from_line("claude", r#"{"type":"assistant","model":"x"}"#),
            None
        );
        let gemini =
            r#"{"type":"init","timestamp":"t","session_id":"g-1","model":"gemini-2.5-pro"}"#;
        assert_eq!(
            served_model_from_line("gemini", gemini).as_deref(),
            Some("gemini-2.5-pro")
        );
        assert_eq!(served_model_from_line("codex", gemini), None);
        assert_eq!(served_model_from_line("claude", "not json"), None);
        assert_eq!(served_model_from_line("claude", "{broken"), None);
    }

    #[test]
    fn cli_session_ids() {
        let claude = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;
        assert_eq!(
            cli_session_id_from_line("claude", claude).as_deref(),
            Some("s-1")
        );
        let codex = r#"{"type":"thread.started","thread_id":"th-9"}"#;
        assert_eq!(
            cli_session_id_from_line("codex", codex).as_deref(),
            Some("th-9")
        );
        assert_eq!(
            cli_session_id_from_line("codex", r#"{"type":"turn.started","thread_id":"x"}"#),
            None
        );
        let gemini = r#"{"type":"init","session_id":"g-1","model":"m"}"#;
        assert_eq!(
            cli_session_id_from_line("gemini", gemini).as_deref(),
            Some("g-1")
        );
        assert_eq!(
            cli_session_id_from_line("gemini", r#"{"type":"init"}"#),
            None
        );
        assert_eq!(cli_session_id_from_line("command", claude), None);
    }
    #[test]
    fn gemini_yolo_skips_trust_once() {
        let options = ProviderOptions {
            approval_mode: Some("yolo".into()),
            ..Default::default()
        };
        let argv = build_argv(&request("gemini", &[], &options));
        assert_eq!(argv.iter().filter(|a| *a == "--skip-trust").count(), 1);
        for mode in ["default", "plan"] {
            let options = ProviderOptions {
                approval_mode: Some(mode.into()),
                ..Default::default()
            };
            let argv = build_argv(&request("gemini", &[], &options));
            assert!(!argv.contains(&"--skip-trust".to_string()), "{mode}");
        }
    }

    #[test]
    fn failure_kinds() {
        use FailureKind::*;
        let k = failure_kind;
        assert_eq!(k("claude", 0, "Not logged in"), None);
        assert_eq!(
            k("claude", 1, "Not logged in · Please run /login\n"),
            Some(NotLoggedIn)
        );
        assert_eq!(
            k("claude", 1, "error: unknown option '--bogus'\n"),
            Some(ArgumentError)
        );
        assert_eq!(
            k(
                "claude",
                1,
                r#"{"type":"result","is_error":true,"api_error_status":null}"#
            ),
            Some(ApiError)
        );
        assert_eq!(k("claude", 1, "something else"), None);
        assert_eq!(
            k("codex", 2, "error: unexpected argument '-a' found"),
            Some(ArgumentError)
        );
        assert_eq!(
            k(
                "codex",
                1,
                r#"{"type":"turn.failed","error":{"message":"401 Unauthorized"}}"#
            ),
            Some(NotLoggedIn)
        );
        assert_eq!(
            k(
                "codex",
                1,
                r#"{"type":"error","message":"stream disconnected"}"#
            ),
            Some(ApiError)
        );
        assert_eq!(k("gemini", 41, ""), Some(NotLoggedIn));
        assert_eq!(k("gemini", 52, ""), Some(CliError));
        assert_eq!(
            k("gemini", 1, "Unknown argument: bogus"),
            Some(ArgumentError)
        );
        assert_eq!(k("command", 1, "Not logged in"), None);
        assert_eq!(NotLoggedIn.as_str(), "not-logged-in");
        assert!(NotLoggedIn.hint("claude").contains("log in"));
    }
}
