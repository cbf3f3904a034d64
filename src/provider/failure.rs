//! A provider CLI's failure in words a person can act on
//! (docs/providers.md#failure-kinds): its kind, told from the exit code and
//! output by the provider's own rules (in its module, behind
//! `Adapter::failure_kind`), what to do about it, and the CLI's own line quoted
//! (`Adapter::said`).
//!
//! Missing credentials and refused ones are told apart because the fix
//! differs: a CLI that found no credentials is logged in (or given a
//! key); a CLI whose key the API refused has a key, the wrong one, and
//! logging in again may not touch it (a key in the environment wins over
//! a login). Which credential the CLI sent is told the way `okstra doctor`
//! tells it (`Adapter::login`), so the reason names the variable or file.

use super::login::{Login, Where};
use super::{FailureKind, Output, Provider};

/// The longest quote of a CLI's line, in bytes: enough for the message,
/// short enough for a reason on one dispatch row.
const QUOTE: usize = 300;

/// How a CLI is given credentials, in words for a reason.
pub(super) struct Credentials {
    /// How to log it in, when it found none.
    pub login: &'static str,
    /// What it may have sent, when the API refused it.
    pub sources: &'static str,
}

/// A failed run, told: its kind and the reason to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    /// What happened and what to do, ending with the CLI's own line where
    /// it printed one.
    pub reason: String,
}

impl Provider {
    /// What a failed run was, from its exit code and this attempt's output
    /// (the log's head and tail): `None` when the exit was 0 or the CLI
    /// gave no sign. `at` is what the CLI saw, to name its credentials.
    pub fn failure(self, exit_code: i32, output: &str, at: &Where) -> Option<Failure> {
        let Some(kind) = self.failure_kind(exit_code, output) else {
            // No sign of what went wrong: the CLI's own last words are the
            // most a person gets, where it printed any.
            let kind = FailureKind::Exit;
            let said = (exit_code != 0)
                .then(|| self.said(&kind, output))
                .flatten()?;
            return Some(Failure {
                reason: format!("{self} said: \"{said}\""),
                kind,
            });
        };
        let said = self.said(&kind, output);
        Some(Failure {
            reason: advice(self, &kind, said.as_deref(), at),
            kind,
        })
    }

    /// A run stopped at the CLI's first report that it retries a request
    /// the API refused for its credentials; `said` is that report
    /// ([`Provider::refused_retry_from_line`]).
    pub fn refused(self, said: &str, at: &Where) -> Failure {
        let kind = FailureKind::CredentialsRefused;
        Failure {
            reason: advice(self, &kind, Some(said), at),
            kind,
        }
    }

    /// The CLI's own line on a failure of `kind`, from its output: the
    /// argument it refused, the text of its error event, its last error.
    pub fn said(self, kind: &FailureKind, output: &str) -> Option<String> {
        self.adapter()
            .said(kind, &Output::new(output))
            .map(|s| clip(s.trim()))
            .filter(|s| !s.is_empty())
    }

    /// If this line of the CLI's output reports that it will retry a
    /// request the API refused for its credentials (a retry that cannot
    /// help): the CLI's words. The wrapper stops the CLI there rather
    /// than wait minutes for it to give up.
    pub fn refused_retry_from_line(self, line: &str) -> Option<String> {
        let said = self.adapter().refused_retry(&super::parse_event(line)?)?;
        Some(clip(said.trim()))
    }
}

/// What to do about a failure of `kind`, with the CLI's line quoted.
fn advice(provider: Provider, kind: &FailureKind, said: Option<&str>, at: &Where) -> String {
    let p = provider;
    let creds = provider.adapter().credentials();
    let what = match kind {
        // The refused argument is the point: it goes inside the advice.
        FailureKind::ArgumentError => {
            return format!(
                "{p} refused its arguments{} (check permissionMode/sandboxMode/approvalMode/extraArgs and the CLI version)",
                said.map(|r| format!(": {r}")).unwrap_or_default()
            )
        }
        FailureKind::NotLoggedIn => match (provider.login(at), creds) {
            (Some(Login::No { looked, fix }), _) => {
                format!("{p} is not logged in ({looked}): {fix}")
            }
            (_, Some(c)) => format!("{p} is not logged in: {}", c.login),
            (_, None) => format!("{p} is not logged in"),
        },
        FailureKind::CredentialsRefused => {
            let sources = creds.map_or("its credentials", |c| c.sources);
            match provider.login(at) {
                Some(Login::Yes(how)) => format!(
                    "the API refused the credentials {p} sent: check the one it used ({how}), or give it another; {p} takes {sources}"
                ),
                _ => format!("the API refused the credentials {p} sent: check {sources}"),
            }
        }
        FailureKind::ApiError => format!("{p} got an API error or no network"),
        FailureKind::CliError => format!("{p} stopped with a fatal error"),
        other => format!("{p} failed ({other})"),
    };
    match said {
        Some(line) => format!("{what}; {p} said: \"{line}\""),
        None => what,
    }
}

/// At most [`QUOTE`] bytes of `line`, cut at a character boundary.
pub(super) fn clip(line: &str) -> String {
    let mut end = line.len().min(QUOTE);
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    line[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// A worker's view with these variables set and nothing on disk.
    fn at<'a>(vars: &'a dyn Fn(&str) -> Option<String>) -> Where<'a> {
        Where {
            var: vars,
            project_root: Path::new("/nonexistent/project"),
            argv: &[],
        }
    }

    #[test]
    fn a_refused_key_names_the_one_sent_and_quotes_the_cli() {
        let key = |n: &str| (n == "ANTHROPIC_API_KEY").then(|| "sk-bad".to_string());
        let f = Provider::Claude.refused("Invalid API key · Fix external API key", &at(&key));
        assert_eq!(f.kind, FailureKind::CredentialsRefused);
        assert!(
            f.reason.starts_with(
                "the API refused the credentials claude sent: check the one it used (ANTHROPIC_API_KEY is set)"
            ),
            "{}",
            f.reason
        );
        assert!(
            f.reason
                .ends_with("; claude said: \"Invalid API key · Fix external API key\""),
            "{}",
            f.reason
        );
        assert!(!f.reason.contains("log in"), "{}", f.reason);
        // Nothing that sends a key is known: every source is named.
        let none = |_: &str| None;
        let f = Provider::Gemini.refused("API key not valid.", &at(&none));
        assert!(
            f.reason
                .starts_with("the API refused the credentials gemini sent: check GEMINI_API_KEY"),
            "{}",
            f.reason
        );
    }

    #[test]
    fn missing_credentials_say_how_to_log_in() {
        let none = |_: &str| None;
        let out = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":null,"result":"Not logged in · Please run /login"}"#;
        let f = Provider::Claude.failure(1, out, &at(&none)).unwrap();
        assert_eq!(f.kind, FailureKind::NotLoggedIn);
        assert!(f.reason.contains("claude auth login"), "{}", f.reason);
        assert!(
            f.reason
                .ends_with("; claude said: \"Not logged in · Please run /login\""),
            "{}",
            f.reason
        );
        // A variable codex's model provider reads, unset: that is the fix.
        let argv: Vec<String> = [
            "codex",
            "exec",
            "-c",
            "model_provider=mock",
            "-c",
            r#"model_providers.mock={name="mock",base_url="http://127.0.0.1:1/v1",env_key="MOCK_KEY",wire_api="responses"}"#,
        ]
        .map(String::from)
        .to_vec();
        let home = |n: &str| (n == "HOME").then(|| "/nonexistent/home".to_string());
        let codex_at = Where {
            argv: &argv,
            ..at(&home)
        };
        let out = "{\"type\":\"error\",\"message\":\"Missing environment variable: `MOCK_KEY`.\"}\n{\"type\":\"turn.failed\",\"error\":{\"message\":\"Missing environment variable: `MOCK_KEY`.\"}}\n";
        let f = Provider::Codex.failure(1, out, &codex_at).unwrap();
        assert_eq!(f.kind, FailureKind::NotLoggedIn);
        assert!(
            f.reason.contains("set MOCK_KEY in the environment"),
            "{}",
            f.reason
        );
        assert!(
            f.reason
                .ends_with("codex said: \"Missing environment variable: `MOCK_KEY`.\""),
            "{}",
            f.reason
        );
    }

    #[test]
    fn an_argument_error_quotes_the_refused_argument_inside() {
        let none = |_: &str| None;
        let f = Provider::Gemini
            .failure(1, "Unknown arguments: bogus\nUsage: gemini\n", &at(&none))
            .unwrap();
        assert_eq!(
            f.reason,
            "gemini refused its arguments: Unknown arguments: bogus (check permissionMode/sandboxMode/approvalMode/extraArgs and the CLI version)"
        );
    }

    #[test]
    fn a_quote_is_clipped_at_a_character_boundary() {
        let long = "é".repeat(400);
        let q = clip(&long);
        assert!(q.len() <= QUOTE && q.len() >= QUOTE - 1);
        assert!(long.starts_with(&q));
        assert_eq!(clip("short"), "short");
    }

    #[test]
    fn no_sign_no_failure() {
        let none = |_: &str| None;
        assert_eq!(
            Provider::Claude.failure(0, "Not logged in", &at(&none)),
            None
        );
        assert_eq!(
            Provider::Codex.failure(1, "something else", &at(&none)),
            None
        );
    }

    #[test]
    fn an_exit_of_no_known_kind_still_quotes_the_clis_last_error() {
        let none = |_: &str| None;
        let out =
            "working\nTypeError: cannot read properties of undefined\n    at main (cli.js:1)\n";
        let f = Provider::Command.failure(7, out, &at(&none)).unwrap();
        assert_eq!(f.kind, FailureKind::Exit);
        assert_eq!(
            f.reason,
            "command said: \"TypeError: cannot read properties of undefined\""
        );
        assert_eq!(Provider::Command.failure(0, out, &at(&none)), None);
    }
}
