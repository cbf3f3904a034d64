//! The one place that knows each provider CLI
//! (docs/providers.md#the-worker-wrapper, PROVIDERS.md).
//!
//! [`Provider`] is the vocabulary: `claude`, `codex`, `gemini`, `command`,
//! parsed from those wire names at the edge (a spec, a team-state row, the
//! wrapper's `--provider`). What okstra knows about one CLI — the argv it
//! runs, how its failures read, where its output names the served model and
//! its own session id, what the attempt spent (its usage, from the final
//! usage event or, for a CLI stopped before printing one, its session file),
//! whether it takes okstra's session id — lives in that provider's module,
//! behind the `Adapter` trait, so a fact about claude is written in
//! `claude.rs` and nowhere else. [`usage`] is the one vocabulary the three
//! CLIs' token counts are translated into.
//!
//! Every agent reads its prompt on stdin (eager include): the wrapper points
//! the child's stdin at the prompt file. `command` jobs get the prompt on
//! stdin too, so a plain script can `cat` it.

mod claude;
mod codex;
mod command;
mod failure;
mod gemini;
pub mod hosts;
pub mod login;
pub mod state;
pub mod usage;

pub use failure::Failure;
pub use usage::{Pricing, Usage, UsageTotal};

pub use crate::vocab::FailureKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// A provider okstra has an adapter for, serialised as its wire name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    Claude,
    Codex,
    Gemini,
    /// A given argv, for non-agent jobs and demos.
    Command,
}

impl Provider {
    pub const ALL: [Provider; 4] = [
        Provider::Claude,
        Provider::Codex,
        Provider::Gemini,
        Provider::Command,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Provider::Claude => "claude",
            Provider::Codex => "codex",
            Provider::Gemini => "gemini",
            Provider::Command => "command",
        }
    }

    /// The module holding this provider's facts.
    fn adapter(self) -> &'static dyn Adapter {
        match self {
            Provider::Claude => &claude::Claude,
            Provider::Codex => &codex::Codex,
            Provider::Gemini => &gemini::Gemini,
            Provider::Command => &command::Command,
        }
    }

    /// The provider a v1 worker gets when its entry names none
    /// (docs/spec-format.md#execution-identity): the worker ids `claude`,
    /// `codex` and `gemini` imply themselves.
    pub fn for_worker_id(worker_id: &str) -> Option<Provider> {
        match worker_id.parse() {
            Ok(Provider::Command) | Err(_) => None,
            Ok(p) => Some(p),
        }
    }

    /// An agent CLI, as opposed to a `command` job's given argv.
    pub fn is_agent(self) -> bool {
        self.program().is_some()
    }

    /// The executable looked for on PATH; `None` for `command`.
    pub fn program(self) -> Option<Program> {
        self.adapter().program()
    }

    /// Whether the CLI takes the session id okstra mints per attempt.
    pub fn takes_session_id(self) -> bool {
        self.adapter().takes_session_id()
    }

    /// The model the provider says served the run, from one line of its
    /// structured output.
    pub fn served_model_from_line(self, line: &str) -> Option<String> {
        self.adapter().served_model(&parse_event(line)?)
    }

    /// The CLI's own session (or thread) id, from one line of its structured
    /// output.
    pub fn cli_session_id_from_line(self, line: &str) -> Option<String> {
        self.adapter()
            .cli_session_id(&parse_event(line)?)
            .filter(|s| !s.is_empty())
    }

    /// How the CLI's private state per attempt is laid out and seeded
    /// from the user's (docs/confinement.md#provider-state), given the
    /// wrapper's environment (`HOME` and the CLI's own variable); `None` for
    /// `command`. Without `HOME` there is nothing to seed from, and the CLI
    /// still gets its private state, empty: it never falls back to where
    /// it would look by itself (node finds the home in the password file).
    pub fn private_state(self) -> Option<state::Layout> {
        self.state_var()?;
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        match var("HOME") {
            Some(home) => self.adapter().private_state(Path::new(&home), &var),
            None => Some(state::Layout::default()),
        }
    }

    /// The variable that points the CLI at its private state per attempt
    /// (`CLAUDE_CONFIG_DIR`, ...); `None` for `command`.
    pub fn state_var(self) -> Option<&'static str> {
        self.adapter().state_var()
    }

    /// How fresh a credentials document of this CLI's is (larger is newer),
    /// where `doc` is one; `None` where it is not.
    pub fn credentials_stamp(self, doc: &Value) -> Option<i128> {
        self.adapter().credentials_stamp(doc)
    }

    /// Whether the CLI would find itself logged in for a worker that sees
    /// `at` (docs/cli.md#okstra-doctor, `okstra doctor`); `None` for `command`.
    pub fn login(self, at: &login::Where) -> Option<login::Login> {
        self.adapter().login(at)
    }

    /// How the CLI's options change when okstra confines the worker
    /// (docs/confinement.md#kernel-confinement), and why: `None` when they
    /// stand as planned.
    pub fn under_confinement(self, options: &mut ProviderOptions) -> Option<String> {
        self.adapter().under_confinement(options)
    }

    /// Classify a failed run from its exit code and this attempt's output
    /// (stdout and stderr together, as the log holds them). `None` when the
    /// exit was 0 or the CLI gave no sign. [`Provider::failure`] adds the
    /// reason.
    pub fn failure_kind(self, exit_code: i32, output: &str) -> Option<FailureKind> {
        if exit_code == 0 {
            return None;
        }
        self.adapter().failure_kind(exit_code, &Output::new(output))
    }

    /// What the attempt spent so far, if this line of the CLI's structured
    /// output is a usage event. Each provider's usage event covers the
    /// whole attempt up to it, so the last one an attempt printed is its
    /// usage: never add them up.
    pub fn usage_from_line(self, line: &str) -> Option<Usage> {
        self.adapter().usage(&parse_event(line)?)
    }

    /// What a CLI that was stopped before printing its final usage event
    /// had recorded in its own session file, where that file is cheap to
    /// find (PROVIDERS.md).
    pub fn usage_from_session(self, session: &Session) -> Option<Usage> {
        self.adapter().session_usage(session)
    }

    /// One model answer's usage as the CLI streams it, with the answer's
    /// id: an answer may be printed more than once (claude prints one
    /// event per content block), so a running total counts each id once.
    pub fn message_usage_from_line(self, line: &str) -> Option<(String, Usage)> {
        self.adapter().message_usage(&parse_event(line)?)
    }

    /// When the wrapper learns what this CLI is spending
    /// (docs/providers.md#usage-as-it-arrives).
    pub fn live_usage(self) -> LiveUsage {
        self.adapter().live_usage()
    }
}

/// When a running attempt's usage is known, and so when a budget can act
/// on it (docs/exec.md#budgets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiveUsage {
    /// Each model answer's usage in the CLI's output, as it is printed
    /// (claude's `assistant` events).
    Answers,
    /// The CLI's session file, read as it grows (codex's rollout, a
    /// `token_count` record after each model response).
    SessionFile,
    /// Only the CLI's final usage event (gemini's `result`): a budget is
    /// checked at the attempt's end.
    AtEnd,
    /// Whatever the command's output says in a CLI's words: usually
    /// nothing, so a budget never acts on it.
    None,
}

/// Where a CLI keeps its session files, for [`Provider::usage_from_session`].
pub struct Session<'a> {
    /// The home directory the CLI ran with.
    pub home: &'a Path,
    /// The CLI's environment (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, ...).
    pub var: &'a dyn Fn(&str) -> Option<OsString>,
    /// The CLI's own session (or thread) id, from its output.
    pub cli_session_id: &'a str,
}

impl Session<'_> {
    /// `var`, or `home/<default>` where it is unset or empty.
    fn dir(&self, var: &str, default: &str) -> PathBuf {
        (self.var)(var)
            .filter(|v| !v.is_empty())
            .map_or_else(|| self.home.join(default), PathBuf::from)
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider name okstra has no adapter for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown provider `{0}` (expected one of: claude, codex, gemini, command)")]
pub struct UnknownProvider(pub String);

impl FromStr for Provider {
    type Err = UnknownProvider;

    /// Exactly the wire names: `Claude` is not `claude`.
    fn from_str(s: &str) -> Result<Provider, UnknownProvider> {
        Provider::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownProvider(s.to_string()))
    }
}

/// What okstra knows about one provider's CLI. Each provider module
/// implements it once; [`Provider`]'s methods dispatch to it.
trait Adapter: Sync {
    /// The CLI's executable and how to install it; `None` when the job
    /// brings its own argv.
    fn program(&self) -> Option<Program>;

    /// The argv the wrapper runs for a job.
    fn argv(&self, req: &ArgvRequest) -> Vec<String>;

    /// Whether the CLI accepts a session id minted by okstra.
    fn takes_session_id(&self) -> bool;

    /// The served model, if this output event is the one that names it.
    fn served_model(&self, event: &Value) -> Option<String>;

    /// The CLI's own session id, if this output event carries it.
    fn cli_session_id(&self, event: &Value) -> Option<String>;

    /// The attempt's usage up to this event, if it is the CLI's usage event.
    fn usage(&self, _event: &Value) -> Option<Usage> {
        None
    }

    /// The usage a stopped CLI left in its session file.
    fn session_usage(&self, _session: &Session) -> Option<Usage> {
        None
    }

    /// One answer's id and usage, if this event streams one.
    fn message_usage(&self, _event: &Value) -> Option<(String, Usage)> {
        None
    }

    /// When the CLI's usage can be read while it runs.
    fn live_usage(&self) -> LiveUsage {
        LiveUsage::AtEnd
    }

    /// What a non-zero exit was, where the CLI lets it be told apart.
    fn failure_kind(&self, exit_code: i32, output: &Output) -> Option<FailureKind>;

    /// The CLI's own line on a failure of `kind`: for an argument error the
    /// message naming the argument (gemini prints it before 4 KB of usage,
    /// so it is looked for in the output's head), otherwise the text of its
    /// error event or its last error line.
    fn said(&self, _kind: &FailureKind, output: &Output) -> Option<String> {
        output.last_error_line()
    }

    /// The CLI's words, if this output event reports that it retries a
    /// request the API refused for its credentials.
    fn refused_retry(&self, _event: &Value) -> Option<String> {
        None
    }

    /// How the CLI is given credentials; `None` for one that needs none.
    fn credentials(&self) -> Option<failure::Credentials> {
        None
    }

    /// Its private state's variable and seeds, given the home directory and
    /// the environment (found by running it; docs/confinement.md#provider-state).
    fn private_state(
        &self,
        _home: &Path,
        _var: &dyn Fn(&str) -> Option<OsString>,
    ) -> Option<state::Layout> {
        None
    }

    /// The freshness of its credentials document `doc`, where it is a valid
    /// one.
    fn credentials_stamp(&self, _doc: &Value) -> Option<i128> {
        None
    }

    /// The variable that points the CLI at its private state.
    fn state_var(&self) -> Option<&'static str> {
        None
    }

    /// The CLI's options changed for a run under okstra's confinement, with
    /// a note saying what changed and why (for the worker's log and the
    /// review); `None` when the options stand as planned.
    fn under_confinement(&self, _options: &mut ProviderOptions) -> Option<String> {
        None
    }

    /// Whether the CLI is logged in, told without the network; `None` for
    /// a provider that needs no login.
    fn login(&self, _at: &login::Where) -> Option<login::Login> {
        None
    }
}

/// An agent CLI's executable, for `okstra doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// The name looked for on PATH (and `argv[0]`).
    pub name: &'static str,
    /// How to get it.
    pub install: &'static str,
}

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

/// Everything that shapes a job's command line.
#[derive(Debug, Clone, Copy)]
pub struct ArgvRequest<'a> {
    pub provider: Provider,
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

impl ArgvRequest<'_> {
    /// Write directories other than the project root, first occurrence only.
    fn extra_dirs(&self) -> impl Iterator<Item = &PathBuf> + '_ {
        self.write_dirs
            .iter()
            .enumerate()
            .filter_map(move |(i, dir)| {
                let repeated = self.write_dirs[..i].contains(dir);
                (dir.as_path() != self.project_root && !repeated).then_some(dir)
            })
    }
}

/// The argv the wrapper runs. Built without a session id it is what the plan
/// shows for review.
pub fn build_argv(req: &ArgvRequest) -> Vec<String> {
    req.provider.adapter().argv(req)
}

/// `flag model`, unless the model is empty (the CLI's default).
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

/// One line of a CLI's structured output, if it is a JSON object.
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

/// A session id read from a CLI's output, fit to name a file: no separator,
/// no `..`, nothing odd. (The id comes from the child's output, so it is
/// checked before it becomes part of a path.)
fn safe_file_stem(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A failed attempt's output, searched case-insensitively.
struct Output<'a> {
    text: &'a str,
    lower: String,
}

impl<'a> Output<'a> {
    fn new(text: &'a str) -> Self {
        Output {
            text,
            lower: text.to_ascii_lowercase(),
        }
    }

    /// Whether any of `needles` (lowercase) occurs.
    fn mentions(&self, needles: &[&str]) -> bool {
        needles.iter().any(|n| self.lower.contains(n))
    }

    /// Whether any line is a structured output event: the CLI got past its
    /// argument parsing.
    fn has_event(&self) -> bool {
        self.text.lines().any(|l| parse_event(l).is_some())
    }

    /// The first line holding any of `needles` (lowercase), trimmed: a
    /// CLI's own message, quoted in a reason.
    fn line_with(&self, needles: &[&str]) -> Option<String> {
        let line = self.text.lines().find(|l| {
            let lower = l.to_ascii_lowercase();
            needles.iter().any(|n| lower.contains(n))
        })?;
        Some(line.trim().to_string())
    }

    /// The output's structured events, last first.
    fn events_backwards(&self) -> impl Iterator<Item = Value> + '_ {
        self.text.lines().rev().filter_map(parse_event)
    }

    /// The last line that is no structured event and speaks of an error
    /// (a crash, a message on stderr): what a CLI said last, where its
    /// events say nothing.
    fn last_error_line(&self) -> Option<String> {
        self.text
            .lines()
            .rev()
            .map(str::trim)
            .filter(|l| !l.is_empty() && parse_event(l).is_none())
            .find(|l| l.to_ascii_lowercase().contains("error"))
            .map(str::to_string)
    }
}

/// Signs of an API error or an unreachable API.
const API_SIGNS: &[&str] = &[
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

#[cfg(test)]
fn request<'a>(
    provider: Provider,
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

/// The project root, two worktrees and a repeat: what `extra_dirs` sorts out.
#[cfg(test)]
fn dirs() -> Vec<PathBuf> {
    vec![
        PathBuf::from("/proj"),
        PathBuf::from("/wt/a"),
        PathBuf::from("/wt/b"),
        PathBuf::from("/wt/a"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip() {
        for p in Provider::ALL {
            assert_eq!(p.as_str().parse::<Provider>(), Ok(p));
            assert_eq!(serde_json::to_value(p).unwrap(), Value::from(p.as_str()));
            assert_eq!(
                serde_json::from_value::<Provider>(Value::from(p.as_str())).unwrap(),
                p
            );
        }
        assert!("Claude".parse::<Provider>().is_err());
        assert!("nope".parse::<Provider>().is_err());
        assert!(serde_json::from_value::<Provider>(Value::from("aider")).is_err());
        assert_eq!(
            "copilot".parse::<Provider>().unwrap_err().to_string(),
            "unknown provider `copilot` (expected one of: claude, codex, gemini, command)"
        );
    }

    #[test]
    fn provider_facts() {
        assert!(Provider::Claude.takes_session_id());
        assert!(!Provider::Codex.takes_session_id());
        assert!(!Provider::Gemini.takes_session_id());
        assert!(!Provider::Command.takes_session_id());
        assert_eq!(Provider::for_worker_id("codex"), Some(Provider::Codex));
        assert_eq!(Provider::for_worker_id("claude"), Some(Provider::Claude));
        assert_eq!(Provider::for_worker_id("gemini"), Some(Provider::Gemini));
        assert_eq!(Provider::for_worker_id("command"), None);
        assert_eq!(Provider::for_worker_id("report-writer"), None);
        let agents: Vec<&str> = Provider::ALL
            .into_iter()
            .filter_map(Provider::program)
            .map(|p| p.name)
            .collect();
        assert_eq!(agents, ["claude", "codex", "gemini"]);
        assert!(!Provider::Command.is_agent());
    }

    #[test]
    fn empty_model_leaves_the_cli_default() {
        let options = ProviderOptions::default();
        for provider in [Provider::Claude, Provider::Codex, Provider::Gemini] {
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
    fn output_lines_that_are_not_events_say_nothing() {
        for p in Provider::ALL {
            assert_eq!(p.served_model_from_line("not json"), None);
            assert_eq!(p.served_model_from_line("{broken"), None);
            assert_eq!(p.cli_session_id_from_line("[1, 2]"), None);
        }
    }

    #[test]
    fn a_clean_exit_is_no_failure() {
        for p in Provider::ALL {
            assert_eq!(p.failure_kind(0, "Not logged in"), None);
        }
        assert_eq!(FailureKind::NotLoggedIn.as_str(), "not-logged-in");
        assert_eq!(
            FailureKind::CredentialsRefused.as_str(),
            "credentials-refused"
        );
    }

    #[test]
    fn the_last_error_line_is_no_event() {
        let out = Output::new(
            "starting\nTypeError: x is undefined\n    at f (cli.js:1:1)\n{\"type\":\"error\",\"message\":\"in an event\"}\n\n",
        );
        assert_eq!(
            out.last_error_line().as_deref(),
            Some("TypeError: x is undefined")
        );
        assert_eq!(Output::new("all fine\n").last_error_line(), None);
    }
}
