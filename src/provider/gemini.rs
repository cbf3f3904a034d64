//! gemini (`@google/gemini-cli`): stream-json output, approval modes.

use super::failure::Credentials;
use super::login::{self, Found, Login, Where};
use super::usage::{count, TokensFrom, Usage};
use super::{
    field, or_default, push_model, state, strings, Adapter, ArgvRequest, FailureKind, Output,
    Program, Session, API_SIGNS,
};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

pub struct Gemini;

/// The variable the CLI takes its state directory from (found by running
/// it: with it set, nothing is written in the home).
const STATE_VAR: &str = "GEMINI_CLI_HOME";

/// The approval mode a job gets when it names none: edits approved,
/// nothing else.
pub const DEFAULT_APPROVAL_MODE: &str = "auto_edit";

impl Adapter for Gemini {
    fn program(&self) -> Option<Program> {
        Some(Program {
            name: "gemini",
            install: "install it (npm install -g @google/gemini-cli) and put it on PATH",
        })
    }

    fn argv(&self, req: &ArgvRequest) -> Vec<String> {
        let mut argv = strings(&["gemini"]);
        push_model(&mut argv, "-m", req.model);
        argv.push("--approval-mode".into());
        argv.push(or_default(
            &req.options.approval_mode,
            DEFAULT_APPROVAL_MODE,
        ));
        // In a folder gemini has not been told to trust, every approval mode
        // that lets it act (yolo, and auto_edit too, as measured with 0.61.0:
        // "Approval mode overridden to \"default\" because the current folder
        // is not trusted") silently drops to `default`, which cannot approve
        // anything unattended: trust the project for this run.
        let mode = req
            .options
            .approval_mode
            .as_deref()
            .unwrap_or(DEFAULT_APPROVAL_MODE);
        if !matches!(mode, "default" | "plan")
            && !req.options.extra_args.iter().any(|a| a == "--skip-trust")
        {
            argv.push("--skip-trust".into());
        }
        argv.extend(strings(&["--output-format", "stream-json"]));
        let dirs: Vec<String> = req.extra_dirs().map(|d| d.display().to_string()).collect();
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

    /// gemini has `--session-id`, but okstra resumes nothing with it: only
    /// claude is given one (docs/providers.md#the-worker-wrapper).
    fn takes_session_id(&self) -> bool {
        false
    }

    /// The final `result` event's `stats.models` is keyed by the models
    /// that served (the API's `modelVersion`). The `init` event names only
    /// what was asked for (`auto` by default), so it is not evidence. Where
    /// several models served (with `auto`, the router's model answers the
    /// routing question), the one that did the work is the one that spent
    /// the most tokens.
    fn served_model(&self, event: &Value) -> Option<String> {
        result_models(event)?
            .iter()
            .max_by_key(|(_, m)| count(m, "total_tokens").unwrap_or(0))
            .map(|(name, _)| name.clone())
    }

    fn cli_session_id(&self, event: &Value) -> Option<String> {
        field(event, "session_id").map(str::to_string)
    }

    /// `GEMINI_CLI_HOME` names the home whose `.gemini/` gemini keeps
    /// everything in (settings, OAuth files, chats). Seeded with its login
    /// (`oauth_creds.json`, `google_accounts.json`), the settings and the
    /// folders the user trusts, the user's GEMINI.md, commands and
    /// `.gemini/.env` (not `~/.env`, which is not gemini's alone).
    fn private_state(
        &self,
        home: &Path,
        var: &dyn Fn(&str) -> Option<OsString>,
    ) -> Option<state::Layout> {
        let dir = var("GEMINI_CLI_HOME")
            .map_or_else(|| home.to_path_buf(), PathBuf::from)
            .join(".gemini");
        let from_dir = |name: &'static str| state::Seed {
            from: dir.join(&name[".gemini/".len()..]),
            to: name,
        };
        Some(state::Layout {
            seeds: [
                ".gemini/settings.json",
                ".gemini/trustedFolders.json",
                ".gemini/google_accounts.json",
                ".gemini/GEMINI.md",
                ".gemini/.env",
                ".gemini/commands",
            ]
            .into_iter()
            .map(from_dir)
            .collect(),
            credentials: Some(from_dir(".gemini/oauth_creds.json")),
        })
    }

    /// A Google login: an access token, and when it expires
    /// (`expiry_date`, milliseconds), which a refresh moves on.
    fn credentials_stamp(&self, doc: &Value) -> Option<i128> {
        field(doc, "access_token")?;
        doc.get("expiry_date")?.as_i64().map(i128::from)
    }

    fn state_var(&self) -> Option<&'static str> {
        Some(STATE_VAR)
    }

    fn login(&self, at: &Where) -> Option<Login> {
        Some(login_of(at))
    }

    /// gemini has exit codes of its own (41 auth; 42, 44, 52, 53 other
    /// fatal errors); argument errors exit 1 and print "Unknown arguments"
    /// first; an API error exits with the HTTP status modulo 256, so a
    /// refused key (401, or 400 `API_KEY_INVALID`) is told by its words.
    fn failure_kind(&self, exit_code: i32, output: &Output) -> Option<FailureKind> {
        match exit_code {
            41 => Some(FailureKind::NotLoggedIn),
            42 | 44 | 52 | 53 => Some(FailureKind::CliError),
            _ if output.mentions(ARGUMENT_SIGNS) => Some(FailureKind::ArgumentError),
            _ if output.mentions(REFUSED_SIGNS) => Some(FailureKind::CredentialsRefused),
            _ if output.mentions(MISSING_SIGNS) => Some(FailureKind::NotLoggedIn),
            _ if output.mentions(API_SIGNS) => Some(FailureKind::ApiError),
            _ => None,
        }
    }

    /// The final `result` event's `stats`, also after an API error (partial
    /// stats kept): `input_tokens` includes `cached`; `output_tokens`
    /// leaves thoughts out, which are what `total_tokens` has beyond both.
    /// No cost: gemini prints none.
    fn usage(&self, event: &Value) -> Option<Usage> {
        if field(event, "type") != Some("result") {
            return None;
        }
        let stats = event.get("stats")?;
        let input = count(stats, "input_tokens").unwrap_or(0);
        let output = count(stats, "output_tokens").unwrap_or(0);
        let total = count(stats, "total_tokens").unwrap_or(input + output);
        let thoughts = total.saturating_sub(input + output);
        Some(Usage {
            cached_input_tokens: count(stats, "cached"),
            reasoning_tokens: Some(thoughts),
            model: self.served_model(event),
            ..Usage::new(input, output + thoughts, TokensFrom::CliOutput)
        })
    }

    /// A stopped gemini printed no result; its chat,
    /// `~/.gemini/tmp/<project>/chats/session-<time>-<first 8 of the session
    /// id>.jsonl`, holds each answer's tokens. Records are rewritten in
    /// place by appending them again: the last record of an id counts.
    fn session_usage(&self, session: &Session) -> Option<Usage> {
        let id = session.cli_session_id;
        if !super::safe_file_stem(id) || id.len() < 8 {
            return None;
        }
        let suffix = format!("-{}.jsonl", &id[..8]);
        let tmp = session
            .dir("GEMINI_CLI_HOME", "")
            .join(".gemini")
            .join("tmp");
        let chat = std::fs::read_dir(tmp)
            .ok()?
            .flatten()
            .filter_map(|project| std::fs::read_dir(project.path().join("chats")).ok())
            .flat_map(|chats| chats.flatten().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("session-") && n.ends_with(&suffix))
            })?;
        chat_usage(BufReader::new(std::fs::File::open(chat).ok()?), id)
    }

    /// The argument it refused (first, before the usage text); its auth
    /// check's message; else the failed result's error, the API's own
    /// message taken out of the JSON gemini wraps it in.
    fn said(&self, kind: &FailureKind, output: &Output) -> Option<String> {
        match kind {
            FailureKind::ArgumentError => return output.line_with(ARGUMENT_SIGNS),
            FailureKind::NotLoggedIn => {
                if let Some(line) = output.line_with(MISSING_SIGNS) {
                    return Some(line);
                }
            }
            _ => {}
        }
        output
            .events_backwards()
            .filter(|e| field(e, "type") == Some("result"))
            .find_map(|e| field(e.get("error")?, "message").map(api_words))
            .or_else(|| output.last_error_line())
    }

    fn credentials(&self) -> Option<Credentials> {
        Some(Credentials {
            login: LOGIN_FIX,
            sources: "GEMINI_API_KEY (or, for Vertex AI, GOOGLE_API_KEY or application default credentials; or the Google login its settings select)",
        })
    }
}

/// gemini's words for no auth (0.61, exit 41): "Please set an Auth method
/// in your .../settings.json or specify one of the following environment
/// variables before running: GEMINI_API_KEY, ...".
const MISSING_SIGNS: &[&str] = &["please set an auth method"];

/// gemini's words (the API's, relayed) for credentials the API refused
/// (0.61): the Gemini API's answer to a bad key, 400 with reason
/// `API_KEY_INVALID` ("API key not valid. Please pass a valid API key."),
/// and a 401 `UNAUTHENTICATED` ("Request had invalid authentication
/// credentials.").
const REFUSED_SIGNS: &[&str] = &[
    "api_key_invalid",
    "api key not valid",
    "unauthenticated",
    "invalid authentication credentials",
];

/// The API's own message in gemini's `[API Error: {"error": {...}}]`, with
/// its code, status and reason: `API key not valid. Please pass a valid
/// API key. (400 INVALID_ARGUMENT, API_KEY_INVALID)`; the text as it is
/// where it holds no such error.
fn api_words(message: &str) -> String {
    let inner = message
        .trim()
        .strip_prefix("[API Error: ")
        .and_then(|m| m.strip_suffix(']'))
        .and_then(|m| serde_json::from_str::<Value>(m).ok());
    let Some(error) = inner.as_ref().and_then(|v| v.get("error")) else {
        return message.to_string();
    };
    let Some(text) = field(error, "message") else {
        return message.to_string();
    };
    let mut about: Vec<String> = Vec::new();
    let code = error
        .get("code")
        .and_then(Value::as_u64)
        .map(|c| c.to_string());
    let head = [code, field(error, "status").map(str::to_string)];
    let head: Vec<String> = head.into_iter().flatten().collect();
    if !head.is_empty() {
        about.push(head.join(" "));
    }
    let reasons = error
        .get("details")
        .and_then(Value::as_array)
        .into_iter()
        .flatten();
    about.extend(
        reasons
            .filter_map(|d| field(d, "reason"))
            .map(str::to_string),
    );
    if about.is_empty() {
        text.to_string()
    } else {
        format!("{text} ({})", about.join(", "))
    }
}

/// gemini's argument errors (yargs' words).
const ARGUMENT_SIGNS: &[&str] = &[
    "unknown argument",
    "unknown arguments",
    "not enough arguments",
    "cannot use both",
    "invalid values",
    "missing required argument",
];

/// `stats.models` of a `result` event, where it names any model.
fn result_models(event: &Value) -> Option<&Map<String, Value>> {
    if field(event, "type") != Some("result") {
        return None;
    }
    event
        .get("stats")?
        .get("models")?
        .as_object()
        .filter(|m| !m.is_empty())
}

/// The usage of a gemini chat file: the answers' (`type: "gemini"`)
/// `tokens`, each id counted once as last written. `None` when the file is
/// another session's or holds no answer.
fn chat_usage(reader: impl BufRead, session_id: &str) -> Option<Usage> {
    let mut answers: HashMap<String, (usize, Value, String)> = HashMap::new();
    for (n, line) in reader.lines().map_while(Result::ok).enumerate() {
        let Some(record) = super::parse_event(&line) else {
            continue;
        };
        if n == 0 && field(&record, "sessionId").is_some_and(|s| s != session_id) {
            return None;
        }
        if field(&record, "type") != Some("gemini") {
            continue;
        }
        let (Some(id), Some(tokens)) = (field(&record, "id"), record.get("tokens")) else {
            continue;
        };
        let model = field(&record, "model").unwrap_or_default().to_string();
        let first = answers.get(id).map_or(n, |(at, _, _)| *at);
        answers.insert(id.to_string(), (first, tokens.clone(), model));
    }
    let mut answers: Vec<(usize, Value, String)> = answers.into_values().collect();
    answers.sort_by_key(|(at, _, _)| *at);
    let (mut input, mut cached, mut output, mut thoughts) = (0, 0, 0, 0);
    for (_, t, _) in &answers {
        let n = |k: &str| count(t, k).unwrap_or(0);
        input += n("input");
        cached += n("cached");
        output += n("output");
        thoughts += n("thoughts");
    }
    let (_, _, model) = answers.last()?;
    Some(Usage {
        cached_input_tokens: Some(cached),
        reasoning_tokens: Some(thoughts),
        model: (!model.is_empty()).then(|| model.clone()),
        ..Usage::new(input, output + thoughts, TokensFrom::SessionFile)
    })
}

const LOGIN_FIX: &str = "log in once as the user who runs okstra: run `gemini` in a terminal and choose Login with Google; or set GEMINI_API_KEY (in the environment or a .env file gemini reads) and select it with `\"security\": {\"auth\": {\"selectedType\": \"gemini-api-key\"}}` in ~/.gemini/settings.json";

/// The auth type gemini's settings select: system settings over the
/// project's over the user's (`security.auth.selectedType`, or the older
/// `selectedAuthType`); with the file that says it. `Absent` where none
/// selects one; `Broken` where a settings file cannot be read.
fn selected_type(at: &Where, gemini_dir: &Path) -> Found<(String, PathBuf)> {
    let system = (at.var)("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/gemini-cli/settings.json"));
    let files = [
        system,
        at.project_root.join(".gemini/settings.json"),
        gemini_dir.join("settings.json"),
    ];
    for file in files {
        match login::json_file(&file) {
            Found::Read(doc) => {
                let chosen = login::text_at(&doc, "/security/auth/selectedType")
                    .or_else(|| login::text_at(&doc, "/selectedAuthType"));
                if let Some(t) = chosen {
                    return Found::Read((t.to_string(), file));
                }
            }
            Found::Broken(why) => return Found::Broken(why),
            Found::Absent => {}
        }
    }
    Found::Absent
}

/// A variable as gemini sees it in a worker: its environment, else the
/// first `.env` it finds from the project root up to `/`. (gemini's last
/// resort, `.env` in its home, is the attempt's private home there
/// (docs/confinement.md#provider-state), which holds none; `.gemini/.env`
/// files count only in a folder gemini trusts, which cannot be told here.)
fn gemini_var(at: &Where, name: &str) -> Option<(String, String)> {
    if let Some(v) = (at.var)(name) {
        return Some((v, "the environment".into()));
    }
    let file = at
        .project_root
        .ancestors()
        .map(|d| d.join(".env"))
        .find(|p| p.is_file())?;
    let value = login::dotenv_value(&file, name)?;
    Some((value, file.display().to_string()))
}

/// The auth type gemini runs with, and why: the one the settings select,
/// else the one the environment implies; or, where there is none (or the
/// settings cannot be read), the login's verdict.
fn auth_type(at: &Where, gemini_dir: &Path) -> Result<(String, String), Login> {
    let var = |name: &str| gemini_var(at, name);
    let is_true = |name: &str| var(name).is_some_and(|(v, _)| v == "true");
    let chosen = match selected_type(at, gemini_dir) {
        Found::Broken(why) => return Err(Login::no(why, "fix the settings file's JSON")),
        Found::Read((t, file)) => {
            let why = format!("{} selects `{t}`", file.display());
            (t, why)
        }
        Found::Absent if is_true("GOOGLE_GENAI_USE_GCA") => {
            ("oauth-personal".into(), "GOOGLE_GENAI_USE_GCA=true".into())
        }
        Found::Absent if is_true("GOOGLE_GENAI_USE_VERTEXAI") => {
            ("vertex-ai".into(), "GOOGLE_GENAI_USE_VERTEXAI=true".into())
        }
        Found::Absent if var("GOOGLE_GEMINI_BASE_URL").is_some() => {
            ("gateway".into(), "GOOGLE_GEMINI_BASE_URL is set and no auth type is selected, so gemini picks `gateway`".into())
        }
        Found::Absent if var("GEMINI_API_KEY").is_some() => {
            ("gemini-api-key".into(), "GEMINI_API_KEY is set".into())
        }
        Found::Absent if is_true("CLOUD_SHELL") || is_true("GEMINI_CLI_USE_COMPUTE_ADC") => {
            ("compute-default-credentials".into(), "CLOUD_SHELL or GEMINI_CLI_USE_COMPUTE_ADC is true".into())
        }
        Found::Absent => {
            return Err(Login::no(
                "no auth type: settings select none, and none of GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA is set",
                LOGIN_FIX,
            ))
        }
    };
    Ok(chosen)
}

/// Whether gemini passes its own auth check (exit 41 when not) and has a
/// credential: the auth type the settings select, else the one the
/// environment implies (`GOOGLE_GENAI_USE_GCA=true`: Google login;
/// `GOOGLE_GENAI_USE_VERTEXAI=true`: Vertex AI; `GOOGLE_GEMINI_BASE_URL`:
/// a gateway, which gemini refuses without a terminal; `GEMINI_API_KEY`: the
/// Gemini API), then that type's credential: `GEMINI_API_KEY`;
/// `GOOGLE_API_KEY` or a project, location and application default
/// credentials; `oauth_creds.json`. gemini's files are under
/// `GEMINI_CLI_HOME` (default `HOME`), in `.gemini/`.
fn login_of(at: &Where) -> Login {
    let Some(dir) = (at.var)("GEMINI_CLI_HOME")
        .map(PathBuf::from)
        .or_else(|| at.home())
        .map(|h| h.join(".gemini"))
    else {
        return Login::Unknown("HOME is not set, so gemini's files cannot be found".into());
    };
    let (auth, why) = match auth_type(at, &dir) {
        Ok(chosen) => chosen,
        Err(login) => return login,
    };
    let var = |name: &str| gemini_var(at, name);
    match auth.as_str() {
        "gemini-api-key" => match var("GEMINI_API_KEY") {
            Some((_, from)) => Login::Yes(format!("{why}; GEMINI_API_KEY from {from}")),
            None if dir.join("gemini-credentials.json").is_file() => Login::Unknown(format!(
                "{why} and GEMINI_API_KEY is not set; a key may be stored (encrypted) in {}",
                dir.join("gemini-credentials.json").display()
            )),
            None => Login::no(format!("{why}, but GEMINI_API_KEY is not set"), LOGIN_FIX),
        },
        "vertex-ai" => {
            if let Some((_, from)) = var("GOOGLE_API_KEY") {
                return Login::Yes(format!("{why}; GOOGLE_API_KEY from {from}"));
            }
            if var("GOOGLE_CLOUD_PROJECT").is_none() || var("GOOGLE_CLOUD_LOCATION").is_none() {
                return Login::no(
                    format!("{why}, but neither GOOGLE_API_KEY nor GOOGLE_CLOUD_PROJECT with GOOGLE_CLOUD_LOCATION is set"),
                    "set GOOGLE_API_KEY, or GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION with application default credentials (`gcloud auth application-default login`)",
                );
            }
            let adc = (at.var)("GOOGLE_APPLICATION_CREDENTIALS")
                .map(PathBuf::from)
                .or_else(|| Some(at.home()?.join(".config/gcloud/application_default_credentials.json")));
            match adc.filter(|p| p.is_file()) {
                Some(p) => Login::Yes(format!("{why}; application default credentials in {}", p.display())),
                None => Login::Unknown(format!(
                    "{why} with a project and location; its application default credentials may come from the metadata server"
                )),
            }
        }
        "oauth-personal" => {
            let creds = dir.join("oauth_creds.json");
            match login::json_file(&creds) {
                Found::Read(doc)
                    if ["/refresh_token", "/access_token"]
                        .iter()
                        .any(|p| login::text_at(&doc, p).is_some()) =>
                {
                    Login::Yes(format!("{why}; Google login in {}", creds.display()))
                }
                Found::Read(_) => Login::no(
                    format!("{why}, but {} holds no token", creds.display()),
                    LOGIN_FIX,
                ),
                Found::Broken(e) => Login::no(format!("{why}, but {e}"), LOGIN_FIX),
                Found::Absent => Login::no(
                    format!("{why}, but there is no {} (gemini cannot log in without a terminal)", creds.display()),
                    LOGIN_FIX,
                ),
            }
        }
        "compute-default-credentials" | "cloud-shell" => Login::Unknown(format!(
            "{why}: credentials from the machine's metadata server, which cannot be asked without the network"
        )),
        other => Login::no(
            format!("{why}; gemini refuses the auth type `{other}` when run without a terminal (\"Invalid auth method selected\")"),
            LOGIN_FIX,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{build_argv, dirs, request, strings, Provider, ProviderOptions, Session};
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn gemini_argv_defaults() {
        let options = ProviderOptions::default();
        let dirs = dirs();
        let argv = build_argv(&request(Provider::Gemini, &dirs, &options));
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
        let argv = build_argv(&request(Provider::Gemini, &[], &options));
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
        let argv = build_argv(&request(Provider::Gemini, &odd, &options));
        assert!(argv.contains(&"--include-directories=/a,b".to_string()));
        assert!(argv.contains(&"--include-directories=/c".to_string()));
    }

    #[test]
    fn gemini_yolo_skips_trust_once() {
        let options = ProviderOptions {
            approval_mode: Some("yolo".into()),
            ..Default::default()
        };
        let argv = build_argv(&request(Provider::Gemini, &[], &options));
        assert_eq!(argv.iter().filter(|a| *a == "--skip-trust").count(), 1);
        for mode in ["default", "plan"] {
            let options = ProviderOptions {
                approval_mode: Some(mode.into()),
                ..Default::default()
            };
            let argv = build_argv(&request(Provider::Gemini, &[], &options));
            assert!(!argv.contains(&"--skip-trust".to_string()), "{mode}");
        }
    }

    #[test]
    fn session_from_the_init_event_the_served_model_from_the_result() {
        let p = Provider::Gemini;
        let init = r#"{"type":"init","timestamp":"t","session_id":"g-1","model":"gemini-2.5-pro"}"#;
        // The init event's model is the one asked for (PROVIDERS.md); what
        // served is in the result's `stats.models`.
        assert_eq!(p.served_model_from_line(init), None);
        assert_eq!(
            p.served_model_from_line(RESULT_OK).as_deref(),
            Some("gemini-2.5-pro")
        );
        let init = r#"{"type":"init","session_id":"g-1","model":"m"}"#;
        assert_eq!(p.cli_session_id_from_line(init).as_deref(), Some("g-1"));
        assert_eq!(p.cli_session_id_from_line(r#"{"type":"init"}"#), None);
    }

    #[test]
    fn failure_kinds() {
        use FailureKind::*;
        let k = |code, out| Provider::Gemini.failure_kind(code, out);
        assert_eq!(k(41, ""), Some(NotLoggedIn));
        assert_eq!(k(52, ""), Some(CliError));
        assert_eq!(k(1, "Unknown argument: bogus"), Some(ArgumentError));
        assert_eq!(k(1, "something else"), None);
    }

    // Lines recorded from gemini 0.61 against a loopback API.
    const RESULT_OK: &str = r#"{"type":"result","timestamp":"2026-12-01T17:19:39.260Z","status":"success","stats":{"total_tokens":270,"input_tokens":200,"output_tokens":40,"cached":60,"input":140,"duration_ms":603,"tool_calls":1,"models":{"gemini-2.5-pro":{"total_tokens":270,"input_tokens":200,"output_tokens":40,"cached":60,"input":140}}}}"#;
    const RESULT_API_ERROR: &str = r#"{"type":"result","timestamp":"2026-12-01T17:20:10.900Z","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":400,\"message\":\"mock refuses\"}}]"},"stats":{"total_tokens":135,"input_tokens":100,"output_tokens":20,"cached":30,"input":70,"duration_ms":0,"tool_calls":1,"models":{"gemini-mock-served":{"total_tokens":135,"input_tokens":100,"output_tokens":20,"cached":30,"input":70}}}}"#;

    #[test]
    fn usage_of_a_finished_run_counts_thoughts_as_output() {
        let u = Provider::Gemini.usage_from_line(RESULT_OK).unwrap();
        assert_eq!((u.input_tokens, u.cached_input_tokens), (200, Some(60)));
        assert_eq!(u.cache_write_tokens, None, "gemini does not say");
        assert_eq!(u.output_tokens, 70, "40 answered + 30 thought");
        assert_eq!(u.reasoning_tokens, Some(30));
        assert_eq!(u.total_tokens, 270);
        assert_eq!(u.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(u.cost_usd, None);
    }

    #[test]
    fn a_failed_run_keeps_its_partial_stats_and_names_what_served() {
        let p = Provider::Gemini;
        let u = p.usage_from_line(RESULT_API_ERROR).unwrap();
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.total_tokens),
            (100, 35, 135)
        );
        assert_eq!(
            p.served_model_from_line(RESULT_API_ERROR).as_deref(),
            Some("gemini-mock-served")
        );
        assert_eq!(
            p.failure_kind(144, RESULT_API_ERROR),
            Some(FailureKind::ApiError)
        );
        // The router's model beside the one that did the work.
        let routed = r#"{"type":"result","status":"success","stats":{"total_tokens":1000,"input_tokens":900,"output_tokens":100,"models":{"gemini-2.5-flash-lite":{"total_tokens":40},"gemini-2.5-pro":{"total_tokens":960}}}}"#;
        assert_eq!(
            p.served_model_from_line(routed).as_deref(),
            Some("gemini-2.5-pro")
        );
        // The init event names what was asked for: not evidence.
        let init = r#"{"type":"init","session_id":"g-1","model":"auto"}"#;
        assert_eq!(p.served_model_from_line(init), None);
        assert_eq!(p.usage_from_line(init), None);
    }

    #[test]
    fn a_killed_run_is_read_from_its_chat() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let id = "c36e55d3-54c0-4c36-8fe8-65482adb2452";
        let chats = home.join(".gemini/tmp/proj/chats");
        std::fs::create_dir_all(&chats).unwrap();
        std::fs::create_dir_all(home.join(".gemini/tmp/other")).unwrap();
        let answer = |id: &str, tool: &str| {
            format!(
                r#"{{"id":"{id}","timestamp":"t","type":"gemini","content":"","thoughts":[],"tokens":{{"input":100,"output":20,"cached":30,"thoughts":15,"tool":0,"total":135}},"model":"gemini-2.5-pro"{tool}}}"#
            )
        };
        let chat = [
            format!(r#"{{"sessionId":"{id}","projectHash":"h","startTime":"t","kind":"main"}}"#),
            r#"{"$set":{"messages":[]}}"#.to_string(),
            r#"{"id":"4cda","timestamp":"t","type":"user","content":[{"text":"Write out.md"}]}"#
                .to_string(),
            answer("8143", ""),
            r#"{"$set":{"lastUpdated":"t"}}"#.to_string(),
            // The same answer written again with its tool calls: once.
            answer("8143", r#","toolCalls":[{"id":"w","name":"write_file"}]"#),
            answer("9999", ""),
        ]
        .join("\n");
        std::fs::write(chats.join("session-2026-12-01T17-20-c36e55d3.jsonl"), chat).unwrap();
        let var = |_: &str| None;
        let session = |cli_session_id| Session {
            home,
            var: &var,
            cli_session_id,
        };
        let u = Provider::Gemini.usage_from_session(&session(id)).unwrap();
        assert_eq!((u.input_tokens, u.cached_input_tokens), (200, Some(60)));
        assert_eq!((u.output_tokens, u.reasoning_tokens), (70, Some(30)));
        assert_eq!(u.model.as_deref(), Some("gemini-2.5-pro"));
        assert_eq!(u.tokens_from, TokensFrom::SessionFile);
        // Same first eight characters, another session: refused by its header.
        let twin = "c36e55d3-0000-0000-0000-000000000000";
        assert_eq!(Provider::Gemini.usage_from_session(&session(twin)), None);
        assert_eq!(Provider::Gemini.usage_from_session(&session("short")), None);
    }

    // Output recorded from gemini 0.61 (`--output-format stream-json`):
    // with no auth (exit 41, on stderr); and against an API answering a
    // bad key as the Gemini API does (400, `API_KEY_INVALID`: exit 144) or
    // with a 401 (exit 145), the result event then gemini's stderr.
    const NO_AUTH: &str = "Please set an Auth method in your /tmp/h/.gemini/settings.json or specify one of the following environment variables before running: GEMINI_API_KEY, GOOGLE_GENAI_USE_VERTEXAI, GOOGLE_GENAI_USE_GCA\n";
    const KEY_INVALID: &str = r#"{"type":"init","timestamp":"2026-12-04T12:29:06.203Z","session_id":"d62a9cf4-a73a-4acd-a528-1301a79961df","model":"gemini-2.5-pro"}
{"type":"result","timestamp":"2026-12-04T12:29:06.531Z","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":400,\"message\":\"API key not valid. Please pass a valid API key.\",\"status\":\"INVALID_ARGUMENT\",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.ErrorInfo\",\"reason\":\"API_KEY_INVALID\",\"domain\":\"googleapis.com\"}]}}]"},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,"duration_ms":0,"tool_calls":0,"models":{"gemini-2.5-pro":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0}}}}
Error when talking to Gemini API Full report available at: /tmp/gemini-client-error-Turn.run-sendMessageStream-2026-12-04T12-29-06-477Z.json _ApiError: {"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}
    at throwErrorIfNotOK (file:///x/bundle/chunk-JDPZ4CE3.js:267833:24) {
  status: 400
}
"#;
    const UNAUTHENTICATED: &str = r#"{"type":"result","timestamp":"2026-12-04T12:28:56.695Z","status":"error","error":{"type":"unknown","message":"[API Error: {\"error\":{\"code\":401,\"message\":\"Request had invalid authentication credentials.\",\"status\":\"UNAUTHENTICATED\"}}]"},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"cached":0,"input":0,"duration_ms":0,"tool_calls":0,"models":{}}}
Error when talking to Gemini API Full report available at: /tmp/gemini-client-error.json _ApiError: {"error":{"code":401,"message":"Request had invalid authentication credentials.","status":"UNAUTHENTICATED"}}
"#;

    #[test]
    fn missing_and_refused_credentials_are_told_apart() {
        use FailureKind::*;
        let p = Provider::Gemini;
        assert_eq!(p.failure_kind(41, NO_AUTH), Some(NotLoggedIn));
        assert_eq!(
            p.said(&NotLoggedIn, NO_AUTH).as_deref(),
            Some(NO_AUTH.trim())
        );
        assert_eq!(p.failure_kind(144, KEY_INVALID), Some(CredentialsRefused));
        assert_eq!(
            p.said(&CredentialsRefused, KEY_INVALID).as_deref(),
            Some("API key not valid. Please pass a valid API key. (400 INVALID_ARGUMENT, API_KEY_INVALID)")
        );
        assert_eq!(
            p.failure_kind(145, UNAUTHENTICATED),
            Some(CredentialsRefused)
        );
        assert_eq!(
            p.said(&CredentialsRefused, UNAUTHENTICATED).as_deref(),
            Some("Request had invalid authentication credentials. (401 UNAUTHENTICATED)")
        );
        // The near miss: another 400 is an API error, quoted alike.
        assert_eq!(p.failure_kind(144, RESULT_API_ERROR), Some(ApiError));
        assert_eq!(
            p.said(&ApiError, RESULT_API_ERROR).as_deref(),
            Some("mock refuses (400)")
        );
        // gemini gives up on a refused key at once: nothing to stop.
        for line in KEY_INVALID.lines() {
            assert_eq!(p.refused_retry_from_line(line), None);
        }
    }

    #[test]
    fn the_apis_words_are_taken_out_of_geminis_wrapping() {
        assert_eq!(api_words("plain words"), "plain words");
        assert_eq!(api_words("[API Error: not json]"), "[API Error: not json]");
        assert_eq!(api_words(r#"[API Error: {"error":{"message":"m"}}]"#), "m");
        assert_eq!(
            api_words(r#"[API Error: {"error":{"code":429}}]"#),
            r#"[API Error: {"error":{"code":429}}]"#
        );
    }

    #[test]
    fn the_refused_argument_is_quoted_from_the_head() {
        let out = format!(
            "Unknown arguments: bogus, other\nUsage: gemini [options] [command]\n{}",
            "  --flag  text\n".repeat(300)
        );
        assert_eq!(
            Provider::Gemini.failure_kind(1, &out),
            Some(FailureKind::ArgumentError)
        );
        assert_eq!(
            Provider::Gemini
                .said(&FailureKind::ArgumentError, &out)
                .as_deref(),
            Some("Unknown arguments: bogus, other")
        );
    }
}
