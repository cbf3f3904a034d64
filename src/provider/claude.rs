//! claude (`@anthropic-ai/claude-code`): print mode, stream-json output.

use super::{
    field, or_default, push_model, strings, Adapter, ArgvRequest, FailureKind, Output, Program,
    API_SIGNS, LOGIN_SIGNS,
};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub struct Claude;

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

    /// The stream-json `system`/`init` event names the resolved model.
    fn served_model(&self, event: &Value) -> Option<String> {
        let init =
            field(event, "type") == Some("system") && field(event, "subtype") == Some("init");
        init.then(|| field(event, "model").map(str::to_string))
            .flatten()
    }

    fn cli_session_id(&self, event: &Value) -> Option<String> {
        field(event, "session_id").map(str::to_string)
    }

    /// Every claude failure exits 1: tell them apart by the output. An
    /// argument error is instant: a message, no structured event.
    /// `~/.claude` (or `CLAUDE_CONFIG_DIR`): sessions, settings, todos.
    fn state_dirs(&self, home: &Path, var: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
        vec![var("CLAUDE_CONFIG_DIR").map_or_else(|| home.join(".claude"), PathBuf::from)]
    }

    fn failure_kind(&self, _exit_code: i32, output: &Output) -> Option<FailureKind> {
        if output.mentions(LOGIN_SIGNS) {
            Some(FailureKind::NotLoggedIn)
        } else if output.mentions(API_SIGNS) {
            Some(FailureKind::ApiError)
        } else if !output.has_event()
            && output.mentions(&["error:", "must be a valid uuid", "already in use"])
        {
            Some(FailureKind::ArgumentError)
        } else {
            None
        }
    }
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
}
