//! codex (`@openai/codex`): `codex exec`, JSON lines output.

use super::{
    field, or_default, push_model, strings, Adapter, ArgvRequest, FailureKind, Output, Program,
    API_SIGNS, LOGIN_SIGNS,
};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub struct Codex;

/// The sandbox a job gets when it names none: writes inside the workspace.
pub const DEFAULT_SANDBOX_MODE: &str = "workspace-write";

impl Adapter for Codex {
    fn program(&self) -> Option<Program> {
        Some(Program {
            name: "codex",
            install: "install it (npm install -g @openai/codex) and put it on PATH",
        })
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

    /// Argument errors exit 2; the rest exit 1 and are told apart by output.
    /// `~/.codex` (or `CODEX_HOME`): sessions, logs, auth.
    fn state_dirs(&self, home: &Path, var: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
        vec![var("CODEX_HOME").map_or_else(|| home.join(".codex"), PathBuf::from)]
    }

    fn failure_kind(&self, exit_code: i32, output: &Output) -> Option<FailureKind> {
        if exit_code == 2 {
            Some(FailureKind::ArgumentError)
        } else if output.mentions(LOGIN_SIGNS) {
            Some(FailureKind::NotLoggedIn)
        } else if output.mentions(API_SIGNS) {
            Some(FailureKind::ApiError)
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
        assert_eq!(
            k(
                1,
                r#"{"type":"turn.failed","error":{"message":"401 Unauthorized"}}"#
            ),
            Some(NotLoggedIn)
        );
        assert_eq!(
            k(1, r#"{"type":"error","message":"stream disconnected"}"#),
            Some(ApiError)
        );
        assert_eq!(k(1, "something else"), None);
    }
}
