//! codex (`@openai/codex`): `codex exec`, JSON lines output.

use super::failure::Credentials;
use super::login::{self, Found, Login, Where};
use super::usage::{count, TokensFrom, Usage};
use super::{
    field, or_default, push_model, state, strings, Adapter, ArgvRequest, FailureKind, Output,
    Program, ProviderOptions, Session, API_SIGNS,
};
use serde_json::Value;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

pub struct Codex;

/// The variable the CLI takes its state directory from (found by running
/// it: with it set, nothing is written in the home).
const STATE_VAR: &str = "CODEX_HOME";

/// The sandbox a job gets when it names none: writes inside the workspace.
pub const DEFAULT_SANDBOX_MODE: &str = "workspace-write";

/// codex's mode without a sandbox of its own.
const NO_SANDBOX: &str = "danger-full-access";

impl Adapter for Codex {
    fn program(&self) -> Option<Program> {
        Some(Program {
            name: "codex",
            install: "install it (npm install -g @openai/codex) and put it on PATH",
        })
    }

    /// codex's own sandbox runs each tool in bubblewrap, which maps its user
    /// namespace through `/proc/<pid>/uid_map`: a write Landlock refuses, so
    /// inside okstra's confinement every tool (a file edit, a shell
    /// command) would fail. Confined, codex runs without its own sandbox and
    /// okstra's stands in for it: writes are held to the same directories
    /// or fewer; what is lost is codex cutting its tool commands off the
    /// network (docs/confinement.md#the-threat-model).
    fn under_confinement(&self, options: &mut ProviderOptions) -> Option<String> {
        let planned = or_default(&options.sandbox_mode, DEFAULT_SANDBOX_MODE);
        if planned == NO_SANDBOX {
            return None;
        }
        options.sandbox_mode = Some(NO_SANDBOX.into());
        Some(format!(
            "codex runs with --sandbox {NO_SANDBOX} instead of {planned}: its own sandbox (bubblewrap) cannot start inside okstra's Landlock confinement, which holds its writes instead; its tool commands are not cut off the network"
        ))
    }

    fn argv(&self, req: &ArgvRequest) -> Vec<String> {
        let mut argv = strings(&["codex", "exec"]);
        push_model(&mut argv, "-m", req.model);
        argv.push("-C".into());
        argv.push(req.project_root.display().to_string());
        argv.push("--sandbox".into());
        argv.push(or_default(&req.options.sandbox_mode, DEFAULT_SANDBOX_MODE));
        argv.push("--json".into());
        if !req.project_is_git_repo {
            argv.push("--skip-git-repo-check".into());
        }
        for dir in req.extra_dirs() {
            argv.push("--add-dir".into());
            argv.push(dir.display().to_string());
        }
        argv.extend(req.options.extra_args.iter().cloned());
        // `-` reads the prompt from stdin.
        argv.push("-".into());
        argv
    }

    /// `codex exec` has no option for a caller's session id.
    fn takes_session_id(&self) -> bool {
        false
    }

    /// codex's output names no model.
    fn served_model(&self, _event: &Value) -> Option<String> {
        None
    }

    fn cli_session_id(&self, event: &Value) -> Option<String> {
        if field(event, "type") == Some("thread.started") {
            field(event, "thread_id").map(str::to_string)
        } else {
            None
        }
    }

    /// `CODEX_HOME` (default `~/.codex`) holds everything codex keeps.
    /// Seeded with its login (`auth.json`), `config.toml`, the user's
    /// AGENTS.md, prompts, rules and skills.
    fn private_state(
        &self,
        home: &Path,
        var: &dyn Fn(&str) -> Option<OsString>,
    ) -> Option<state::Layout> {
        let dir = var("CODEX_HOME").map_or_else(|| home.join(".codex"), PathBuf::from);
        let from_dir = |name: &'static str| state::Seed {
            from: dir.join(name),
            to: name,
        };
        Some(state::Layout {
            seeds: ["config.toml", "AGENTS.md", "prompts", "rules", "skills"]
                .into_iter()
                .map(from_dir)
                .collect(),
            credentials: Some(from_dir("auth.json")),
        })
    }

    /// A ChatGPT login: tokens with a refresh token, and `last_refresh`
    /// (RFC 3339), which a refresh moves on.
    fn credentials_stamp(&self, doc: &Value) -> Option<i128> {
        field(doc.get("tokens")?, "refresh_token")?;
        let when = humantime::parse_rfc3339_weak(field(doc, "last_refresh")?).ok()?;
        let since = when.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(since.as_nanos() as i128)
    }

    fn state_var(&self) -> Option<&'static str> {
        Some(STATE_VAR)
    }

    fn login(&self, at: &Where) -> Option<Login> {
        Some(login_of(at))
    }

    /// Argument errors exit 2; the rest exit 1 and are told apart by output.
    fn failure_kind(&self, exit_code: i32, output: &Output) -> Option<FailureKind> {
        if exit_code == 2 {
            Some(FailureKind::ArgumentError)
        } else if output.mentions(MISSING_SIGNS) {
            Some(FailureKind::NotLoggedIn)
        } else if output.mentions(REFUSED_SIGNS) {
            Some(FailureKind::CredentialsRefused)
        } else if output.mentions(API_SIGNS) {
            Some(FailureKind::ApiError)
        } else {
            None
        }
    }

    /// `turn.completed` carries the thread's totals so far (cumulative:
    /// `exec resume` counts earlier turns too), so the last one is the
    /// attempt's. cached ⊂ input and reasoning ⊂ output, as in [`Usage`].
    /// No cost and no model: codex prints neither.
    fn usage(&self, event: &Value) -> Option<Usage> {
        if field(event, "type") != Some("turn.completed") {
            return None;
        }
        Some(totals(event.get("usage")?, TokensFrom::CliOutput))
    }

    /// `codex exec` runs one turn, and prints its `turn.completed` only
    /// as it ends (0.171, measured against the mock: four model responses,
    /// one event); its rollout has the thread's totals after each response.
    fn live_usage(&self) -> super::LiveUsage {
        super::LiveUsage::SessionFile
    }

    /// A failed turn (`turn.failed`) or a stopped codex prints no usage; the
    /// thread's rollout, `<CODEX_HOME>/sessions/YYYY/MM/DD/rollout-<time>-<thread
    /// id>.jsonl`, has a `token_count` record with the totals after each
    /// response. The thread started during this attempt, so its file is in
    /// one of the two newest day directories.
    fn session_usage(&self, session: &Session) -> Option<Usage> {
        let id = session.cli_session_id;
        if !super::safe_file_stem(id) {
            return None;
        }
        let sessions = session.dir("CODEX_HOME", ".codex").join("sessions");
        let suffix = format!("-{id}.jsonl");
        let rollout = newest_days(&sessions, 2).into_iter().find_map(|day| {
            std::fs::read_dir(day)
                .ok()?
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
                })
        })?;
        rollout_usage(BufReader::new(std::fs::File::open(rollout).ok()?))
    }

    /// The argument it refused (clap's `error:` line); else the failed
    /// turn's message, or its last `error` event's.
    fn said(&self, kind: &FailureKind, output: &Output) -> Option<String> {
        if *kind == FailureKind::ArgumentError {
            return output.line_with(&["error:"]);
        }
        let message = |e: &Value| match field(e, "type")? {
            "turn.failed" => field(e.get("error")?, "message").map(str::to_string),
            "error" => field(e, "message").map(str::to_string),
            _ => None,
        };
        let failed = output
            .events_backwards()
            .find(|e| field(e, "type") == Some("turn.failed"));
        failed
            .as_ref()
            .and_then(message)
            .or_else(|| output.events_backwards().find_map(|e| message(&e)))
            .or_else(|| output.last_error_line())
    }

    /// codex retries a 401 five times within seconds (0.171), reporting
    /// each as an `error` event, "Reconnecting... 1/5 (unexpected status
    /// 401 Unauthorized: ...)".
    fn refused_retry(&self, event: &Value) -> Option<String> {
        let message = field(event, "message").filter(|_| field(event, "type") == Some("error"))?;
        let lower = message.to_ascii_lowercase();
        (lower.starts_with("reconnecting") && REFUSED_SIGNS.iter().any(|s| lower.contains(s)))
            .then(|| message.to_string())
    }

    fn credentials(&self) -> Option<Credentials> {
        Some(Credentials {
            login: LOGIN_FIX,
            sources: "the variable its model provider's `env_key` names (a provider other than OpenAI's), else CODEX_API_KEY, else the login in auth.json under CODEX_HOME (default ~/.codex; `codex login`)",
        })
    }
}

/// codex's words for no credentials (0.171, a model provider whose
/// `env_key` variable is unset): "Missing environment variable: `KEY`.".
const MISSING_SIGNS: &[&str] = &["missing environment variable"];

/// codex's words for credentials the API refused (0.171, the API answering
/// 401 with OpenAI's body): "unexpected status 401 Unauthorized: Incorrect
/// API key provided: ...".
const REFUSED_SIGNS: &[&str] = &["401 unauthorized", "incorrect api key provided"];

/// codex's token totals (`turn.completed`'s `usage`, a rollout's
/// `total_token_usage`) in okstra's words.
fn totals(u: &Value, from: TokensFrom) -> Usage {
    let n = |k: &str| count(u, k).unwrap_or(0);
    Usage {
        cached_input_tokens: count(u, "cached_input_tokens"),
        cache_write_tokens: count(u, "cache_write_input_tokens"),
        reasoning_tokens: count(u, "reasoning_output_tokens"),
        ..Usage::new(n("input_tokens"), n("output_tokens"), from)
    }
}

/// The last `token_count` totals of a rollout file.
fn rollout_usage(reader: impl BufRead) -> Option<Usage> {
    reader
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains("\"token_count\""))
        .filter_map(|l| super::parse_event(&l))
        .filter_map(|r| {
            let payload = r.get("payload")?;
            (field(payload, "type") == Some("token_count"))
                .then(|| payload.get("info")?.get("total_token_usage").cloned())
                .flatten()
        })
        .last()
        .map(|u| totals(&u, TokensFrom::SessionFile))
}

/// The `count` newest `YYYY/MM/DD` directories under `root`, newest first.
fn newest_days(root: &std::path::Path, count: usize) -> Vec<PathBuf> {
    let children = |dir: &std::path::Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|e| {
                e.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v.reverse();
        v
    };
    let mut days = Vec::new();
    'years: for year in children(root) {
        for month in children(&year) {
            for day in children(&month) {
                days.push(day);
                if days.len() == count {
                    break 'years;
                }
            }
        }
    }
    days
}

const LOGIN_FIX: &str = "log in once as the user who runs okstra: `codex login` (or `printenv OPENAI_API_KEY | codex login --with-api-key`); or set CODEX_API_KEY";

/// The `-c key=value` overrides of an argv, by key.
fn overrides(argv: &[String]) -> Vec<(&str, &str)> {
    let mut out = Vec::new();
    let mut args = argv.iter();
    while let Some(arg) = args.next() {
        let pair = match arg.as_str() {
            "-c" | "--config" => args.next().map(String::as_str),
            a => a.strip_prefix("--config="),
        };
        if let Some((k, v)) = pair.and_then(|p| p.split_once('=')) {
            out.push((k.trim(), v.trim()));
        }
    }
    out
}

/// A `-c` value as codex reads it: TOML, or else the raw string.
fn toml_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Whether `codex exec` has a credential, as it picks one: `CODEX_API_KEY`;
/// for a model provider other than OpenAI's (`model_provider`, from `-c`
/// or `config.toml`), that provider's `env_key`; otherwise `auth.json` in
/// `CODEX_HOME` (default `~/.codex`): an `OPENAI_API_KEY` from `codex login
/// --with-api-key`, or ChatGPT tokens from `codex login`. `OPENAI_API_KEY`
/// in the environment is not read by `codex exec` (0.171).
fn login_of(at: &Where) -> Login {
    if (at.var)("CODEX_API_KEY").is_some() {
        return Login::Yes("CODEX_API_KEY is set".into());
    }
    let Some(dir) = at.dir("CODEX_HOME", ".codex") else {
        return Login::Unknown("HOME is not set, so codex's files cannot be found".into());
    };
    let config_path = dir.join("config.toml");
    let settings = Settings {
        cli: overrides(at.argv),
        config: match login::toml_file(&config_path) {
            Found::Read(t) => t,
            _ => toml::Table::new(),
        },
    };
    let provider = settings
        .get("model_provider")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "openai".into());
    if provider != "openai" {
        return provider_login(at, &settings, &provider);
    }
    openai_login(at, &dir.join("auth.json"), &config_path, &settings)
}

/// codex's settings: its `-c` overrides, then its `config.toml`.
struct Settings<'a> {
    cli: Vec<(&'a str, &'a str)>,
    config: toml::Table,
}

impl Settings<'_> {
    /// The setting at dotted `key` as codex reads it: the last `-c`
    /// override of it, else the value in `config.toml`.
    fn get(&self, key: &str) -> Option<toml::Value> {
        if let Some((_, v)) = self.cli.iter().rev().find(|(k, _)| *k == key) {
            return Some(toml_value(v));
        }
        let mut parts = key.split('.');
        let mut here = self.config.get(parts.next()?)?;
        for p in parts {
            here = here.get(p)?;
        }
        Some(here.clone())
    }
}

/// The credential of a model provider other than OpenAI's: whether the
/// variable its `env_key` names is set.
fn provider_login(at: &Where, settings: &Settings, provider: &str) -> Login {
    let table = settings.get(&format!("model_providers.{provider}"));
    let env_key = table
        .as_ref()
        .and_then(|t| t.get("env_key"))
        .and_then(|k| k.as_str().map(str::to_string))
        .or_else(|| {
            settings
                .get(&format!("model_providers.{provider}.env_key"))
                .and_then(|k| k.as_str().map(str::to_string))
        });
    match env_key {
        Some(key) if (at.var)(&key).is_some() => Login::Yes(format!(
            "model provider `{provider}` reads its key from {key}, which is set"
        )),
        Some(key) => Login::no(
            format!("model provider `{provider}` reads its key from {key}, which is not set"),
            format!("set {key} in the environment okstra runs in"),
        ),
        None => Login::Unknown(format!(
            "model provider `{provider}` names no env_key; whether it needs a login cannot be told"
        )),
    }
}

/// OpenAI's credential, from `auth` (`auth.json`): an API key or ChatGPT
/// tokens. Where it holds none, why not, with a word on an
/// `OPENAI_API_KEY` that `codex exec` will not read; where it is absent and
/// `config.toml` (`config_path`) keeps the login in the system keyring,
/// unknown.
fn openai_login(at: &Where, auth: &Path, config_path: &Path, settings: &Settings) -> Login {
    let mut looked = match login::json_file(auth) {
        Found::Read(doc) => {
            if login::text_at(&doc, "/OPENAI_API_KEY").is_some() {
                return Login::Yes(format!("API key in {}", auth.display()));
            }
            let tokens = ["/tokens/access_token", "/tokens/refresh_token"];
            if tokens.iter().any(|p| login::text_at(&doc, p).is_some()) {
                return Login::Yes(format!("ChatGPT login in {}", auth.display()));
            }
            format!("{} holds no API key and no ChatGPT tokens", auth.display())
        }
        Found::Broken(why) => why,
        Found::Absent => {
            let store = settings.get("cli_auth_credentials_store");
            if let Some(store @ ("keyring" | "auto")) = store.as_ref().and_then(|s| s.as_str()) {
                return Login::Unknown(format!(
                    "{} keeps codex's login in the system keyring (cli_auth_credentials_store = \"{store}\"), which okstra does not read",
                    config_path.display()
                ));
            }
            format!("no {} and CODEX_API_KEY is not set", auth.display())
        }
    };
    if (at.var)("OPENAI_API_KEY").is_some() {
        looked.push_str(
            "; OPENAI_API_KEY is set, but `codex exec` does not read it (`codex login --with-api-key` stores it)",
        );
    }
    Login::no(looked, LOGIN_FIX)
}

#[cfg(test)]
mod tests {
    use super::super::{
        build_argv, dirs, request, strings, ArgvRequest, Provider, ProviderOptions, Session,
    };
    use super::*;

    #[test]
    fn confined_codex_runs_without_its_own_sandbox_and_says_so() {
        for planned in [None, Some("workspace-write"), Some("read-only")] {
            let mut options = ProviderOptions {
                sandbox_mode: planned.map(str::to_string),
                ..ProviderOptions::default()
            };
            let note = Provider::Codex.under_confinement(&mut options).unwrap();
            assert_eq!(options.sandbox_mode.as_deref(), Some("danger-full-access"));
            assert!(note.contains("bubblewrap"), "{note}");
            assert!(
                note.contains(planned.unwrap_or("workspace-write")),
                "{note}"
            );
            let dirs = dirs();
            let argv = build_argv(&request(Provider::Codex, &dirs, &options));
            assert!(argv
                .windows(2)
                .any(|w| w == ["--sandbox", "danger-full-access"]));
        }
        // Near misses: already without a sandbox, or another CLI.
        let mut options = ProviderOptions {
            sandbox_mode: Some("danger-full-access".into()),
            ..ProviderOptions::default()
        };
        assert_eq!(Provider::Codex.under_confinement(&mut options), None);
        let mut options = ProviderOptions::default();
        assert_eq!(Provider::Claude.under_confinement(&mut options), None);
        assert_eq!(Provider::Gemini.under_confinement(&mut options), None);
        assert_eq!(options.sandbox_mode, None);
    }

    #[test]
    fn codex_argv_defaults() {
        let options = ProviderOptions::default();
        let dirs = dirs();
        let argv = build_argv(&request(Provider::Codex, &dirs, &options));
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
            ..request(Provider::Codex, &[], &options)
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
    fn thread_id_is_the_session_and_no_model_is_served() {
        let p = Provider::Codex;
        let started = r#"{"type":"thread.started","thread_id":"th-9"}"#;
        assert_eq!(p.cli_session_id_from_line(started).as_deref(), Some("th-9"));
        assert_eq!(
            p.cli_session_id_from_line(r#"{"type":"turn.started","thread_id":"x"}"#),
            None
        );
        let gemini_init =
            r#"{"type":"init","timestamp":"t","session_id":"g-1","model":"gemini-2.5-pro"}"#;
        assert_eq!(p.served_model_from_line(gemini_init), None);
    }

    #[test]
    fn failure_kinds() {
        use FailureKind::*;
        let k = |code, out| Provider::Codex.failure_kind(code, out);
        assert_eq!(
            k(2, "error: unexpected argument '-a' found"),
            Some(ArgumentError)
        );
        assert_eq!(k(1, MISSING_KEY), Some(NotLoggedIn));
        assert_eq!(k(1, REFUSED), Some(CredentialsRefused));
        assert_eq!(k(1, RETRY_401), Some(CredentialsRefused));
        assert_eq!(k(1, RETRY_529), Some(ApiError));
        assert_eq!(
            k(1, r#"{"type":"error","message":"stream disconnected"}"#),
            Some(ApiError)
        );
        assert_eq!(k(1, "something else"), None);
    }

    // Lines recorded from codex 0.171 against a loopback API.
    const TURN_COMPLETED: &str = r#"{"type":"turn.completed","usage":{"input_tokens":200,"cached_input_tokens":60,"cache_write_input_tokens":10,"output_tokens":40,"reasoning_output_tokens":10}}"#;
    const TURN_FAILED: &str = r#"{"type":"turn.failed","error":{"message":"{\"error\": {\"code\": 400, \"message\": \"mock refuses\"}}"}}"#;

    #[test]
    fn usage_of_a_turn_is_its_totals() {
        let u = Provider::Codex.usage_from_line(TURN_COMPLETED).unwrap();
        assert_eq!(u.input_tokens, 200, "cached ⊂ input already");
        assert_eq!(u.cached_input_tokens, Some(60));
        assert_eq!(u.cache_write_tokens, Some(10));
        assert_eq!((u.output_tokens, u.reasoning_tokens), (40, Some(10)));
        assert_eq!(u.total_tokens, 240);
        assert_eq!((u.cost_usd, u.model.as_deref()), (None, None));
        assert_eq!(Provider::Codex.usage_from_line(TURN_FAILED), None);
        assert_eq!(
            Provider::Codex.usage_from_line(r#"{"type":"turn.started"}"#),
            None
        );
    }

    #[test]
    fn totals_are_cumulative_so_the_last_turn_counts_alone() {
        // `exec resume`: the second turn's totals include the first's.
        let first = r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"output_tokens":20,"reasoning_output_tokens":5}}"#;
        let second = r#"{"type":"turn.completed","usage":{"input_tokens":260,"cached_input_tokens":90,"output_tokens":45,"reasoning_output_tokens":12}}"#;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, format!("{first}\n{second}\n")).unwrap();
        let last = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .rev()
            .find_map(|l| Provider::Codex.usage_from_line(l))
            .unwrap();
        assert_eq!((last.input_tokens, last.output_tokens), (260, 45));
        assert_eq!(last.cache_write_tokens, None, "not in this version's event");
    }

    #[test]
    fn a_failed_or_killed_turn_is_read_from_the_rollout() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let thread = "01a2329e-cfbc-75a2-8e86-1bed07d866aa";
        let token_count = |input: u64, output: u64| {
            format!(
                r#"{{"timestamp":"t","type":"event_msg","payload":{{"type":"token_count","info":{{"total_token_usage":{{"input_tokens":{input},"cached_input_tokens":30,"cache_write_input_tokens":0,"output_tokens":{output},"reasoning_output_tokens":5,"total_tokens":120}},"last_token_usage":{{"input_tokens":1,"output_tokens":1}}}},"rate_limits":null}}}}"#
            )
        };
        let old_day = home.join(".codex/sessions/2026/11/30");
        let day = home.join(".codex/sessions/2026/12/01");
        std::fs::create_dir_all(&old_day).unwrap();
        std::fs::create_dir_all(&day).unwrap();
        std::fs::write(
            day.join(format!("rollout-2026-12-01T17-19-58-{thread}.jsonl")),
            [
                r#"{"type":"session_meta","payload":{"id":"x"}}"#.to_string(),
                r#"{"type":"event_msg","payload":{"type":"token_count","info":null}}"#.to_string(),
                token_count(100, 20),
                token_count(200, 40),
                r#"{"type":"response_item","payload":{"type":"message"}}"#.to_string(),
            ]
            .join("\n"),
        )
        .unwrap();
        std::fs::write(
            old_day.join("rollout-2026-11-30T10-00-00-another.jsonl"),
            token_count(9, 9),
        )
        .unwrap();
        let var = |_: &str| None;
        let session = |cli_session_id| Session {
            home,
            var: &var,
            cli_session_id,
        };
        let u = Provider::Codex
            .usage_from_session(&session(thread))
            .unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (200, 40));
        assert_eq!(u.tokens_from, TokensFrom::SessionFile);
        assert_eq!(
            Provider::Codex.usage_from_session(&session("another-x")),
            None
        );
        assert_eq!(Provider::Codex.usage_from_session(&session("a/b")), None);
        // CODEX_HOME moves it.
        let moved = |n: &str| (n == "CODEX_HOME").then(|| home.join(".codex").into());
        let s = Session {
            home: &home.join("nowhere"),
            var: &moved,
            cli_session_id: thread,
        };
        assert!(Provider::Codex.usage_from_session(&s).is_some());
    }

    #[test]
    fn the_refused_argument_is_quoted() {
        let out = "WARNING: proceeding\nerror: unexpected argument '--bogus' found\n\n  tip: to pass '--bogus' as a value, use '-- --bogus'\n";
        assert_eq!(
            Provider::Codex
                .said(&FailureKind::ArgumentError, out)
                .as_deref(),
            Some("error: unexpected argument '--bogus' found")
        );
    }

    // Lines recorded from codex 0.171 against a loopback API for a model
    // provider with `env_key = "MOCK_KEY"`: the variable unset; the API
    // answering 401 with OpenAI's body (five retries within 8 s, then the
    // failed turn); and, the near miss, answering 529.
    const MISSING_KEY: &str = "{\"type\":\"thread.started\",\"thread_id\":\"01a24108-7066-7f12-a910-d07e72301b3f\"}\n{\"type\":\"turn.started\"}\n{\"type\":\"error\",\"message\":\"Missing environment variable: `MOCK_KEY`.\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"Missing environment variable: `MOCK_KEY`.\"}}\n";
    const RETRY_401: &str = r#"{"type":"error","message":"Reconnecting... 1/5 (unexpected status 401 Unauthorized: Incorrect API key provided: mock-key. You can find your API key at https://platform.openai.com/account/api-keys., url: http://127.0.0.1:18401/v1/responses)"}"#;
    const REFUSED: &str = r#"{"type":"error","message":"unexpected status 401 Unauthorized: Incorrect API key provided: mock-key. You can find your API key at https://platform.openai.com/account/api-keys., url: http://127.0.0.1:18401/v1/responses"}
{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized: Incorrect API key provided: mock-key. You can find your API key at https://platform.openai.com/account/api-keys., url: http://127.0.0.1:18401/v1/responses"}}"#;
    const RETRY_529: &str = r#"{"type":"error","message":"Reconnecting... 1/5 (unexpected status 529 <unknown status code>: Overloaded, url: http://127.0.0.1:18529/v1/responses)"}"#;

    #[test]
    fn the_failed_turn_is_quoted() {
        use FailureKind::*;
        let p = Provider::Codex;
        assert_eq!(
            p.said(&NotLoggedIn, MISSING_KEY).as_deref(),
            Some("Missing environment variable: `MOCK_KEY`.")
        );
        let said = p.said(&CredentialsRefused, REFUSED).unwrap();
        assert!(
            said.starts_with("unexpected status 401 Unauthorized: Incorrect API key provided"),
            "{said}"
        );
        // The failed turn, not a later event of another kind.
        let out = format!("{REFUSED}\n{{\"type\":\"error\",\"message\":\"later\"}}\n");
        assert_eq!(p.said(&CredentialsRefused, &out), Some(said));
        // Stopped before its turn failed: its last error event.
        assert_eq!(
            p.said(&Timeout, RETRY_529).as_deref(),
            Some("Reconnecting... 1/5 (unexpected status 529 <unknown status code>: Overloaded, url: http://127.0.0.1:18529/v1/responses)")
        );
    }

    #[test]
    fn a_retry_of_a_refused_key_is_reported() {
        let p = Provider::Codex;
        let said = p.refused_retry_from_line(RETRY_401).unwrap();
        assert!(
            said.starts_with("Reconnecting... 1/5 (unexpected status 401"),
            "{said}"
        );
        assert_eq!(p.refused_retry_from_line(RETRY_529), None);
        // The failed turn is no retry: codex exits by itself after it.
        for line in REFUSED.lines() {
            assert_eq!(p.refused_retry_from_line(line), None, "{line}");
        }
    }
}
