//! claude (`@anthropic-ai/claude-code`): print mode, stream-json output.

use super::failure::Credentials;
use super::login::{self, Found, Login, Where};
use super::usage::{count, CostSource, TokensFrom, Usage};
use super::{
    field, or_default, push_model, state, strings, Adapter, ArgvRequest, FailureKind, Output,
    Program, Session, API_SIGNS,
};
use serde_json::Value;
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

pub struct Claude;

/// The variable the CLI takes its state directory from (found by running
/// it: with it set, nothing is written in the home).
const STATE_VAR: &str = "CLAUDE_CONFIG_DIR";

/// The permission mode a job gets when it names none: edits without asking,
/// nothing else.
pub const DEFAULT_PERMISSION_MODE: &str = "acceptEdits";

impl Adapter for Claude {
    fn program(&self) -> Option<Program> {
        Some(Program {
            name: "claude",
            install: "install it (npm install -g @anthropic-ai/claude-code) and put it on PATH",
        })
    }

    fn argv(&self, req: &ArgvRequest) -> Vec<String> {
        let mut argv = strings(&["claude", "-p"]);
        push_model(&mut argv, "--model", req.model);
        argv.extend(strings(&["--output-format", "stream-json", "--verbose"]));
        argv.push("--permission-mode".into());
        argv.push(or_default(
            &req.options.permission_mode,
            DEFAULT_PERMISSION_MODE,
        ));
        if let Some(id) = req.session_id {
            argv.push("--session-id".into());
            argv.push(id.into());
        }
        // `--add-dir` is variadic: the `=` form keeps it from swallowing
        // whatever follows.
        for dir in req.extra_dirs() {
            argv.push(format!("--add-dir={}", dir.display()));
        }
        argv.extend(req.options.extra_args.iter().cloned());
        argv
    }

    /// `--session-id <uuid>`; an id is refused once used, so exec mints one
    /// per attempt.
    fn takes_session_id(&self) -> bool {
        true
    }

    /// The model that served is in each `assistant` event's
    /// `message.model`: the main loop's only (a sub-agent, whose events
    /// name the tool call that started it, may run on another model by
    /// design), and never claude's own `<synthetic>` stand-in for an API
    /// error. Before the first answer, the `system`/`init` event names the
    /// model the CLI resolved the request to: checked early, so a wrong
    /// selection is stopped before it spends anything.
    fn served_model(&self, event: &Value) -> Option<String> {
        match field(event, "type")? {
            "system" if field(event, "subtype") == Some("init") => {
                field(event, "model").map(str::to_string)
            }
            "assistant" if event.get("parent_tool_use_id").is_none_or(Value::is_null) => {
                let model = field(event.get("message")?, "model")?;
                (!model.is_empty() && model != SYNTHETIC).then(|| model.to_string())
            }
            _ => None,
        }
    }

    fn cli_session_id(&self, event: &Value) -> Option<String> {
        field(event, "session_id").map(str::to_string)
    }

    /// `CLAUDE_CONFIG_DIR` moves everything claude keeps (its
    /// `.credentials.json`, `settings.json`, and `.claude.json`, otherwise
    /// in `~/`) into one directory. Seeded with the login, the settings and
    /// `.claude.json` (which holds an API key from /login), the user's
    /// CLAUDE.md, agents, commands and skills.
    fn private_state(
        &self,
        home: &Path,
        var: &dyn Fn(&str) -> Option<OsString>,
    ) -> Option<state::Layout> {
        let (dir, global) = match var("CLAUDE_CONFIG_DIR") {
            Some(d) => (PathBuf::from(&d), PathBuf::from(d).join(".claude.json")),
            None => (home.join(".claude"), home.join(".claude.json")),
        };
        let from_dir = |name: &'static str| state::Seed {
            from: dir.join(name),
            to: name,
        };
        let mut seeds: Vec<state::Seed> =
            ["settings.json", "CLAUDE.md", "agents", "commands", "skills"]
                .into_iter()
                .map(from_dir)
                .collect();
        seeds.push(state::Seed {
            from: global,
            to: ".claude.json",
        });
        Some(state::Layout {
            seeds,
            credentials: Some(from_dir(".credentials.json")),
        })
    }

    /// A claude.ai login: an access and a refresh token, and when the
    /// access token expires (milliseconds), which a refresh moves on.
    fn credentials_stamp(&self, doc: &Value) -> Option<i128> {
        let oauth = doc.get("claudeAiOauth")?;
        field(oauth, "accessToken")?;
        field(oauth, "refreshToken")?;
        oauth.get("expiresAt")?.as_i64().map(i128::from)
    }

    fn state_var(&self) -> Option<&'static str> {
        Some(STATE_VAR)
    }

    fn login(&self, at: &Where) -> Option<Login> {
        Some(login_of(at))
    }

    /// Every claude failure exits 1: tell them apart by the output. No
    /// credentials before refused ones: "Not logged in" comes with
    /// `"error":"authentication_failed"` too. An argument error is instant:
    /// a message, no structured event.
    fn failure_kind(&self, _exit_code: i32, output: &Output) -> Option<FailureKind> {
        if output.mentions(MISSING_SIGNS) {
            Some(FailureKind::NotLoggedIn)
        } else if output.mentions(REFUSED_SIGNS) {
            Some(FailureKind::CredentialsRefused)
        } else if output.mentions(API_SIGNS) {
            Some(FailureKind::ApiError)
        } else if !output.has_event() && output.mentions(ARGUMENT_SIGNS) {
            Some(FailureKind::ArgumentError)
        } else {
            None
        }
    }

    /// The final `result` event: `modelUsage` covers every model the
    /// attempt used (sub-agents included), so it is what is counted; `usage`
    /// (the main loop only) where a result has no `modelUsage`. The
    /// `assistant` events' usage is a snapshot taken as each message
    /// starts: never summed. `total_cost_usd` is claude's own estimate.
    fn usage(&self, event: &Value) -> Option<Usage> {
        if field(event, "type") != Some("result") {
            return None;
        }
        let per_model = event
            .get("modelUsage")
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty());
        let mut tokens = Tokens::default();
        match per_model {
            Some(models) => {
                for m in models.values() {
                    tokens.add(
                        m,
                        [
                            "inputTokens",
                            "cacheReadInputTokens",
                            "cacheCreationInputTokens",
                            "outputTokens",
                        ],
                    );
                }
            }
            None => tokens.add(event.get("usage")?, WIRE_KEYS),
        }
        let mut usage = tokens.usage(TokensFrom::CliOutput);
        if let Some(cost) = event.get("total_cost_usd").and_then(Value::as_f64) {
            usage.cost_usd = Some(cost);
            usage.cost_source = Some(CostSource::CliEstimate);
        }
        Some(usage)
    }

    /// An `assistant` event (the main loop's or a sub-agent's): its
    /// message's usage as claude printed it, one event per content block,
    /// each with the snapshot taken as the message started (input and cache
    /// counts whole, output from its first token): the running total until
    /// the `result` gives the whole. A synthetic answer spent nothing.
    fn message_usage(&self, event: &Value) -> Option<(String, Usage)> {
        if field(event, "type") != Some("assistant") {
            return None;
        }
        let message = event.get("message")?;
        let model = field(message, "model").filter(|m| *m != SYNTHETIC);
        let id = field(message, "id")?;
        let mut tokens = Tokens::default();
        tokens.add(message.get("usage")?, WIRE_KEYS);
        let usage = Usage {
            model: Some(model?.to_string()),
            ..tokens.usage(TokensFrom::CliOutput)
        };
        Some((id.to_string(), usage))
    }

    fn live_usage(&self) -> super::LiveUsage {
        super::LiveUsage::Answers
    }

    /// A stopped claude printed no result; its transcript,
    /// `<config>/projects/<cwd slug>/<session id>.jsonl`, holds each
    /// message's final usage (one record per content block, so the same
    /// message id repeats: counted once).
    fn session_usage(&self, session: &Session) -> Option<Usage> {
        let id = session.cli_session_id;
        if !super::safe_file_stem(id) {
            return None;
        }
        let projects = session.dir("CLAUDE_CONFIG_DIR", ".claude").join("projects");
        let transcript = std::fs::read_dir(projects)
            .ok()?
            .flatten()
            .map(|d| d.path().join(format!("{id}.jsonl")))
            .find(|p| p.is_file())?;
        transcript_usage(BufReader::new(std::fs::File::open(transcript).ok()?))
    }

    /// The argument it refused; else the failed result's text ("Not
    /// logged in · Please run /login", "Invalid API key · Fix external API
    /// key", "API Error: ..."), or its last retry report.
    fn said(&self, kind: &FailureKind, output: &Output) -> Option<String> {
        if *kind == FailureKind::ArgumentError {
            return refused_argument(output);
        }
        output
            .events_backwards()
            .find_map(|e| match field(&e, "type")? {
                "result" if e.get("is_error") == Some(&Value::Bool(true)) => {
                    field(&e, "result").map(str::to_string)
                }
                "system" if field(&e, "subtype") == Some("api_retry") => Some(retry_words(&e)),
                _ => None,
            })
            .or_else(|| output.last_error_line())
    }

    /// claude retries a 401 ten times, backing off, for about three minutes
    /// (2.1.197), reporting each retry as a `system`/`api_retry` event with
    /// `error_status` 401 and `error` "authentication_failed".
    fn refused_retry(&self, event: &Value) -> Option<String> {
        let retry =
            field(event, "type") == Some("system") && field(event, "subtype") == Some("api_retry");
        let refused = event.get("error_status").and_then(Value::as_u64) == Some(401)
            || field(event, "error") == Some("authentication_failed");
        (retry && refused).then(|| retry_words(event))
    }

    fn credentials(&self) -> Option<Credentials> {
        Some(Credentials {
            login: LOGIN_FIX,
            sources: "ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN, CLAUDE_CODE_OAUTH_TOKEN, or the login of `claude auth login`)",
        })
    }
}

/// The argument claude refused, from an output with no structured event
/// (argument errors come before any).
fn refused_argument(output: &Output) -> Option<String> {
    if output.has_event() {
        return None;
    }
    let line = output.line_with(ARGUMENT_SIGNS)?;
    Some(if line.contains("cannot be used with root") {
        format!("{line} (as root, claude takes bypassPermissions only where IS_SANDBOX=1 says it runs in a sandbox: confine the job, or set env IS_SANDBOX=1 if it is sandboxed otherwise)")
    } else {
        line
    })
}

/// An `api_retry` event in a line: which retry, and what the API answered.
fn retry_words(event: &Value) -> String {
    let n = |k: &str| event.get(k).and_then(Value::as_u64).unwrap_or(0);
    format!(
        "api_retry {} of {}: {} {}",
        n("attempt"),
        n("max_retries"),
        n("error_status"),
        field(event, "error").unwrap_or("error")
    )
}

/// claude's words for no credentials at all (2.1.197: the result "Not
/// logged in · Please run /login", at once).
const MISSING_SIGNS: &[&str] = &["not logged in"];

/// claude's words for credentials the API refused (2.1.197, the API
/// answering 401): each retry's `"error_status":401`, and the result it
/// gives up with, "Invalid API key · Fix external API key" with
/// `"api_error_status":401`.
const REFUSED_SIGNS: &[&str] = &[
    "invalid api key",
    "\"api_error_status\":401",
    "\"error_status\":401",
];

/// The model claude names on a message it made up itself (an API error
/// turned into an answer): it served nothing.
const SYNTHETIC: &str = "<synthetic>";

/// claude's argument errors: commander's `error: ...`, its own session-id
/// checks, and its refusal of bypassPermissions as root.
const ARGUMENT_SIGNS: &[&str] = &[
    "error:",
    "must be a valid uuid",
    "already in use",
    "cannot be used with root",
];

/// The Messages API's usage keys, as `usage` and transcripts hold them:
/// input (without cache), cache read, cache write, output.
const WIRE_KEYS: [&str; 4] = [
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
];

/// claude's counts, summed: its input leaves cache reads and writes out.
#[derive(Default)]
struct Tokens {
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
}

impl Tokens {
    /// Add the counts at `keys` (input, cache read, cache write, output).
    fn add(&mut self, v: &Value, keys: [&str; 4]) {
        let n = |k: &str| count(v, k).unwrap_or(0);
        self.input += n(keys[0]);
        self.cache_read += n(keys[1]);
        self.cache_write += n(keys[2]);
        self.output += n(keys[3]);
    }

    fn usage(&self, from: TokensFrom) -> Usage {
        Usage {
            cached_input_tokens: Some(self.cache_read),
            cache_write_tokens: Some(self.cache_write),
            ..Usage::new(
                self.input + self.cache_read + self.cache_write,
                self.output,
                from,
            )
        }
    }
}

/// The usage of a claude transcript: each main-loop message's last record,
/// counted once; `None` when it holds no message with usage.
fn transcript_usage(reader: impl BufRead) -> Option<Usage> {
    let mut last: HashMap<String, (usize, Value, String)> = HashMap::new();
    for (n, line) in reader.lines().map_while(Result::ok).enumerate() {
        let Some(record) = super::parse_event(&line) else {
            continue;
        };
        if field(&record, "type") != Some("assistant")
            || record.get("isSidechain").and_then(Value::as_bool) == Some(true)
        {
            continue;
        }
        let Some(message) = record.get("message") else {
            continue;
        };
        let model = field(message, "model").unwrap_or_default();
        let (Some(id), Some(usage)) = (field(message, "id"), message.get("usage")) else {
            continue;
        };
        if model == SYNTHETIC {
            continue;
        }
        let first = last.get(id).map_or(n, |(at, _, _)| *at);
        last.insert(id.to_string(), (first, usage.clone(), model.to_string()));
    }
    let mut messages: Vec<(usize, Value, String)> = last.into_values().collect();
    messages.sort_by_key(|(at, _, _)| *at);
    let mut tokens = Tokens::default();
    for (_, usage, _) in &messages {
        tokens.add(usage, WIRE_KEYS);
    }
    let (_, _, model) = messages.last()?;
    Some(Usage {
        model: (!model.is_empty()).then(|| model.clone()),
        ..tokens.usage(TokensFrom::SessionFile)
    })
}

/// The variables that log claude in, each alone.
const KEY_VARS: [&str; 3] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
];

/// The variables that send claude to another cloud, whose credentials
/// (AWS, Google Cloud, Azure) are that cloud's business.
const CLOUD_VARS: [(&str, &str); 3] = [
    ("CLAUDE_CODE_USE_BEDROCK", "Amazon Bedrock"),
    ("CLAUDE_CODE_USE_VERTEX", "Google Vertex AI"),
    ("CLAUDE_CODE_USE_FOUNDRY", "Microsoft Foundry"),
];

const LOGIN_FIX: &str = "log in once as the user who runs okstra: `claude auth login` (or `claude`, then /login); or set ANTHROPIC_API_KEY";

/// Whether claude is logged in, as `claude auth status` tells it: a cloud
/// provider chosen by variable; an API key or token variable; the same in
/// the `env` of `settings.json`, or an `apiKeyHelper` there; a claude.ai
/// login in `.credentials.json` (an access token with the
/// `user:inference` scope); a key from `/login` (`primaryApiKey` in
/// `.claude.json`). `CLAUDE_CONFIG_DIR` moves the first two files and
/// `.claude.json` into it; otherwise they are `~/.claude/` and `~/`.
fn login_of(at: &Where) -> Login {
    for (var, cloud) in CLOUD_VARS {
        if at.truthy(var) {
            return Login::Unknown(format!(
                "{var} is set: claude uses {cloud}, whose credentials cannot be checked without the network"
            ));
        }
    }
    if let Some(var) = KEY_VARS.iter().find(|v| (at.var)(v).is_some()) {
        return Login::Yes(format!("{var} is set"));
    }
    let Some(dir) = at.dir("CLAUDE_CONFIG_DIR", ".claude") else {
        return Login::Unknown("HOME is not set, so claude's files cannot be found".into());
    };
    let mut notes = Vec::new();
    let settings = dir.join("settings.json");
    match login::json_file(&settings) {
        Found::Read(doc) => {
            if let Some(var) = KEY_VARS
                .iter()
                .find(|v| login::text_at(&doc, &format!("/env/{v}")).is_some())
            {
                return Login::Yes(format!("{var} is set in {}", settings.display()));
            }
            for (var, cloud) in CLOUD_VARS {
                let on = login::text_at(&doc, &format!("/env/{var}"))
                    .is_some_and(|v| matches!(v.trim(), "1" | "true" | "yes" | "on"));
                if on {
                    return Login::Unknown(format!(
                        "{} sets {var}: claude uses {cloud}, whose credentials cannot be checked without the network",
                        settings.display()
                    ));
                }
            }
            if login::text_at(&doc, "/apiKeyHelper").is_some() {
                return Login::Yes(format!("apiKeyHelper in {}", settings.display()));
            }
        }
        Found::Broken(why) => notes.push(why),
        Found::Absent => {}
    }
    let credentials = dir.join(".credentials.json");
    match login::json_file(&credentials) {
        Found::Read(doc) => {
            let token = login::text_at(&doc, "/claudeAiOauth/accessToken").is_some();
            let scoped = doc
                .pointer("/claudeAiOauth/scopes")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|s| s == "user:inference"));
            if token && scoped {
                return Login::Yes(format!("claude.ai login in {}", credentials.display()));
            }
            notes.push(format!(
                "{} holds no access token with the user:inference scope",
                credentials.display()
            ));
        }
        Found::Broken(why) => notes.push(why),
        Found::Absent => notes.push(format!("no {}", credentials.display())),
    }
    let global = match (at.var)("CLAUDE_CONFIG_DIR") {
        Some(d) => PathBuf::from(d).join(".claude.json"),
        None => dir.parent().unwrap_or(&dir).join(".claude.json"),
    };
    if let Found::Read(doc) = login::json_file(&global) {
        if login::text_at(&doc, "/primaryApiKey").is_some() {
            return Login::Yes(format!("the API key from /login in {}", global.display()));
        }
    }
    Login::no(
        format!(
            "none of {} is set; {}",
            KEY_VARS.join(", "),
            notes.join("; ")
        ),
        LOGIN_FIX,
    )
}

#[cfg(test)]
mod tests {
    use super::super::{
        build_argv, dirs, request, strings, ArgvRequest, Provider, ProviderOptions,
    };
    use super::*;

    #[test]
    fn claude_argv_defaults() {
        let options = ProviderOptions::default();
        let dirs = dirs();
        let argv = build_argv(&request(Provider::Claude, &dirs, &options));
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
            ..request(Provider::Claude, &[], &options)
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
    fn served_model_and_session_from_the_init_event() {
        let claude = r#"{"type":"system","subtype":"init","cwd":"/p","session_id":"s-1","model":"claude-sonnet-4-5","permissionMode":"acceptEdits"}"#;
        let p = Provider::Claude;
        assert_eq!(
            p.served_model_from_line(claude).as_deref(),
            Some("claude-sonnet-4-5")
        );
        assert_eq!(
            p.served_model_from_line(r#"{"type":"assistant","model":"x"}"#),
            None
        );
        assert_eq!(p.served_model_from_line("not json"), None);
        assert_eq!(p.served_model_from_line("{broken"), None);
        let init = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;
        assert_eq!(p.cli_session_id_from_line(init).as_deref(), Some("s-1"));
        assert_eq!(p.cli_session_id_from_line(r#"{"session_id":""}"#), None);
    }

    #[test]
    fn failure_kinds() {
        use FailureKind::*;
        let k = |code, out| Provider::Claude.failure_kind(code, out);
        assert_eq!(k(0, "Not logged in"), None);
        assert_eq!(
            k(1, "Not logged in · Please run /login\n"),
            Some(NotLoggedIn)
        );
        assert_eq!(
            k(1, "error: unknown option '--bogus'\n"),
            Some(ArgumentError)
        );
        assert_eq!(
            k(
                1,
                r#"{"type":"result","is_error":true,"api_error_status":null}"#
            ),
            Some(ApiError)
        );
        assert_eq!(k(1, "something else"), None);
        // Past argument parsing, an `error:` line is not an argument error.
        assert_eq!(k(1, "{\"type\":\"system\"}\nerror: later\n"), None);
    }

    // Lines recorded from claude 2.1.197 (trimmed of the usage fields):
    // with no credentials at all; and with a key the API refuses (401,
    // `authentication_error`), ten retries, then the result after 3 min.
    const NOT_LOGGED_IN_ANSWER: &str = r#"{"type":"assistant","message":{"id":"3cb1cc23-2aa2-4aa7-b44c-0e306bfab3b0","model":"<synthetic>","role":"assistant","stop_reason":"stop_sequence","type":"message","content":[{"type":"text","text":"Not logged in · Please run /login"}]},"parent_tool_use_id":null,"session_id":"bec709ea-c272-4b2e-a0f3-934eb3e7f503","uuid":"5cd2c0c5-5d21-4ee5-8bc8-4c7ce41c1093","error":"authentication_failed"}"#;
    const NOT_LOGGED_IN: &str = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"duration_ms":100,"duration_api_ms":0,"num_turns":1,"result":"Not logged in · Please run /login","stop_reason":"stop_sequence","session_id":"bec709ea-c272-4b2e-a0f3-934eb3e7f503","total_cost_usd":0,"modelUsage":{},"permission_denials":[],"terminal_reason":"completed"}"#;
    const RETRY_401: &str = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":572.1769441451178,"error_status":401,"error":"authentication_failed","session_id":"f3c514b6-ee81-4796-b58c-a491064c1a18","uuid":"275a7dc9-4b16-47d9-a558-5ecab847fa93"}"#;
    const GAVE_UP_401: &str = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":401,"duration_ms":180668,"duration_api_ms":0,"num_turns":1,"result":"Invalid API key · Fix external API key","stop_reason":"stop_sequence","session_id":"e53841c3-c29e-4c3d-8026-244f5d4cccfe","total_cost_usd":0,"modelUsage":{},"permission_denials":[],"terminal_reason":"completed"}"#;
    // The near miss: an overloaded API (529), retried as well, rightly.
    const RETRY_529: &str = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":10,"retry_delay_ms":542.6094701120119,"error_status":529,"error":"overloaded","session_id":"5542c6cd-c3ab-49bd-bf02-10659aa9677c","uuid":"d60f378b-f9b2-4c89-91d6-0bc8667b89c8"}"#;

    #[test]
    fn missing_and_refused_credentials_are_told_apart() {
        use FailureKind::*;
        let p = Provider::Claude;
        let missing = format!("{NOT_LOGGED_IN_ANSWER}\n{NOT_LOGGED_IN}\n");
        assert_eq!(p.failure_kind(1, &missing), Some(NotLoggedIn));
        assert_eq!(
            p.said(&NotLoggedIn, &missing).as_deref(),
            Some("Not logged in · Please run /login")
        );
        let refused = format!(
            "{RETRY_401}\n{}\n{GAVE_UP_401}\n",
            RETRY_401.replace("\"attempt\":1", "\"attempt\":10")
        );
        assert_eq!(p.failure_kind(1, &refused), Some(CredentialsRefused));
        assert_eq!(
            p.said(&CredentialsRefused, &refused).as_deref(),
            Some("Invalid API key · Fix external API key")
        );
        // Stopped at its first retry: the retry is its last word.
        assert_eq!(p.failure_kind(143, RETRY_401), Some(CredentialsRefused));
        assert_eq!(
            p.said(&CredentialsRefused, RETRY_401).as_deref(),
            Some("api_retry 1 of 10: 401 authentication_failed")
        );
        assert_eq!(
            p.failure_kind(1, RETRY_529),
            None,
            "not refused credentials"
        );
    }

    #[test]
    fn a_retry_of_a_refused_key_is_reported_the_first_time() {
        let p = Provider::Claude;
        assert_eq!(
            p.refused_retry_from_line(RETRY_401).as_deref(),
            Some("api_retry 1 of 10: 401 authentication_failed")
        );
        // An overloaded API is worth retrying; no retry is no report.
        assert_eq!(p.refused_retry_from_line(RETRY_529), None);
        assert_eq!(p.refused_retry_from_line(GAVE_UP_401), None);
        assert_eq!(p.refused_retry_from_line(NOT_LOGGED_IN_ANSWER), None);
        assert_eq!(p.refused_retry_from_line("api_retry 401"), None);
    }

    // Lines recorded from claude 2.1.197 against a loopback API (a Write
    // tool call, then an answer), trimmed of fields okstra does not read.
    const RESULT_OK: &str = r#"{"type":"result","subtype":"success","is_error":false,"api_error_status":null,"num_turns":2,"result":"done","session_id":"d8e41ba5-02ed-4139-aac0-f341423c5ab1","total_cost_usd":0.0009780000000000001,"usage":{"input_tokens":200,"cache_creation_input_tokens":40,"cache_read_input_tokens":60,"output_tokens":14,"server_tool_use":{"web_search_requests":0,"web_fetch_requests":0},"service_tier":"standard"},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":200,"outputTokens":14,"cacheReadInputTokens":60,"cacheCreationInputTokens":40,"webSearchRequests":0,"costUSD":0.0009780000000000001,"contextWindow":200000,"maxOutputTokens":32000}},"permission_denials":[],"terminal_reason":"completed"}"#;
    const RESULT_API_ERROR: &str = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":400,"num_turns":2,"result":"API Error: 400 mock refuses","session_id":"ada7f905-c331-43af-a93b-aa0e4bd9adf1","total_cost_usd":0.0004890000000000001,"usage":{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":7},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":100,"outputTokens":7,"cacheReadInputTokens":30,"cacheCreationInputTokens":20,"costUSD":0.0004890000000000001}}}"#;
    const ASSISTANT: &str = r#"{"type":"assistant","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-mock-served","content":[{"type":"tool_use","id":"toolu_1","name":"Write","input":{}}],"stop_reason":null,"usage":{"input_tokens":100,"output_tokens":1,"cache_creation_input_tokens":20,"cache_read_input_tokens":30}},"parent_tool_use_id":null,"session_id":"d8e41ba5"}"#;
    const SYNTHETIC_ANSWER: &str = r#"{"type":"assistant","message":{"id":"fec6add5","model":"<synthetic>","role":"assistant","usage":{"input_tokens":0,"output_tokens":0},"content":[{"type":"text","text":"API Error: 400 mock refuses"}]},"parent_tool_use_id":null,"session_id":"ada7f905","error":"unknown"}"#;

    #[test]
    fn usage_of_a_finished_run_is_model_usage_with_the_clis_estimate() {
        let u = Provider::Claude.usage_from_line(RESULT_OK).unwrap();
        assert_eq!(u.input_tokens, 300, "input + cache read + cache write");
        assert_eq!(u.cached_input_tokens, Some(60));
        assert_eq!(u.cache_write_tokens, Some(40));
        assert_eq!((u.output_tokens, u.total_tokens), (14, 314));
        assert_eq!(u.reasoning_tokens, None, "claude does not say");
        assert_eq!(u.cost_usd, Some(0.0009780000000000001));
        assert_eq!(u.cost_source, Some(CostSource::CliEstimate));
        assert_eq!(u.tokens_from, TokensFrom::CliOutput);
        assert_eq!(u.model, None, "modelUsage is keyed by the requested model");
    }

    #[test]
    fn a_failed_run_keeps_the_usage_it_spent() {
        let u = Provider::Claude.usage_from_line(RESULT_API_ERROR).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (150, 7));
        assert_eq!(
            Provider::Claude.failure_kind(1, RESULT_API_ERROR),
            Some(FailureKind::ApiError)
        );
        // Not logged in: a result with nothing spent.
        let not_logged_in = r#"{"type":"result","is_error":true,"result":"Not logged in · Please run /login","total_cost_usd":0,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},"modelUsage":{}}"#;
        let u = Provider::Claude.usage_from_line(not_logged_in).unwrap();
        assert_eq!((u.total_tokens, u.cost_usd), (0, Some(0.0)));
        // Several models (a sub-agent on another): all counted.
        let two = r#"{"type":"result","modelUsage":{"a":{"inputTokens":1,"outputTokens":2},"b":{"inputTokens":10,"outputTokens":20,"cacheReadInputTokens":5}}}"#;
        let u = Provider::Claude.usage_from_line(two).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (16, 22));
        assert_eq!(u.cost_usd, None);
        // The answers' snapshots are never usage.
        assert_eq!(Provider::Claude.usage_from_line(ASSISTANT), None);
    }

    #[test]
    fn the_served_model_is_the_main_loops_answer_never_a_synthetic_one() {
        let p = Provider::Claude;
        assert_eq!(
            p.served_model_from_line(ASSISTANT).as_deref(),
            Some("claude-mock-served")
        );
        assert_eq!(p.served_model_from_line(SYNTHETIC_ANSWER), None);
        let sub = ASSISTANT.replace(
            r#""parent_tool_use_id":null"#,
            r#""parent_tool_use_id":"toolu_1""#,
        );
        assert_eq!(p.served_model_from_line(&sub), None);
        assert_eq!(p.served_model_from_line(RESULT_OK), None);
    }

    #[test]
    fn a_killed_run_is_read_from_its_transcript() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let id = "76315f69-13f6-492c-9de2-d171b4b18b40";
        let project = home.join(".claude/projects/-tmp-usage-x-proj");
        std::fs::create_dir_all(&project).unwrap();
        // As 2.1.197 writes it: one record per content block of a message
        // (msg_1 twice), each with the message's final usage; a synthetic
        // answer; a sub-agent's record; and records without usage.
        let record = |id: &str, model: &str, out: u64, extra: &str| {
            format!(
                r#"{{"type":"assistant","uuid":"u","message":{{"id":"{id}","model":"{model}","usage":{{"input_tokens":100,"cache_creation_input_tokens":20,"cache_read_input_tokens":30,"output_tokens":{out}}}}}{extra}}}"#
            )
        };
        let transcript = [
            r#"{"type":"queue-operation","operation":"enqueue"}"#.to_string(),
            r#"{"type":"user","message":{"role":"user","content":"Write out.md"}}"#.to_string(),
            record("msg_1", "claude-mock-served", 7, ""),
            record("msg_1", "claude-mock-served", 7, ""),
            r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result"}]}}"#
                .to_string(),
            record("msg_2", "claude-mock-served", 9, ""),
            record("msg_3", "<synthetic>", 0, ""),
            record("msg_4", "claude-haiku", 50, r#","isSidechain":true"#),
            "{torn".to_string(),
        ]
        .join("\n");
        std::fs::write(project.join(format!("{id}.jsonl")), transcript).unwrap();
        let var = |_: &str| None;
        let session = |cli_session_id| Session {
            home,
            var: &var,
            cli_session_id,
        };
        let u = Provider::Claude.usage_from_session(&session(id)).unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (300, 16));
        assert_eq!(u.cached_input_tokens, Some(60));
        assert_eq!(u.model.as_deref(), Some("claude-mock-served"));
        assert_eq!(u.tokens_from, TokensFrom::SessionFile);
        assert_eq!(u.cost_usd, None);
        // Another session, or an id that is no file name: nothing.
        assert_eq!(Provider::Claude.usage_from_session(&session("other")), None);
        assert_eq!(Provider::Claude.usage_from_session(&session("../x")), None);
        // CLAUDE_CONFIG_DIR moves it.
        let moved =
            |name: &str| (name == "CLAUDE_CONFIG_DIR").then(|| home.join("elsewhere").into());
        let s = Session {
            home,
            var: &moved,
            cli_session_id: id,
        };
        assert_eq!(Provider::Claude.usage_from_session(&s), None);
    }

    #[test]
    fn the_refused_argument_is_quoted() {
        let p = Provider::Claude;
        let refused = |out| p.said(&FailureKind::ArgumentError, out);
        assert_eq!(
            refused("error: unknown option '--bogus'\n").as_deref(),
            Some("error: unknown option '--bogus'")
        );
        let root = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons\n";
        assert_eq!(p.failure_kind(1, root), Some(FailureKind::ArgumentError));
        assert!(refused(root).unwrap().contains("IS_SANDBOX=1"));
        assert_eq!(refused(RESULT_OK), None, "past argument parsing");
    }

    #[test]
    fn an_api_error_quotes_the_result() {
        assert_eq!(
            Provider::Claude
                .said(&FailureKind::ApiError, RESULT_API_ERROR)
                .as_deref(),
            Some("API Error: 400 mock refuses")
        );
        // A crash prints no event: its last error line.
        let crash = "file:///x/cli.js:1\nTypeError: Cannot read properties of undefined\n";
        assert_eq!(
            Provider::Claude.said(&FailureKind::Exit, crash).as_deref(),
            Some("TypeError: Cannot read properties of undefined")
        );
    }
}
