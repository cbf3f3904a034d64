//! gemini (`@google/gemini-cli`): stream-json output, approval modes.

use super::{
    field, or_default, push_model, strings, Adapter, ArgvRequest, FailureKind, Output, Program,
    API_SIGNS, LOGIN_SIGNS,
};
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub struct Gemini;

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
    /// claude is given one (SPEC §6).
    fn takes_session_id(&self) -> bool {
        false
    }

    /// The stream-json `init` event names the model.
    fn served_model(&self, event: &Value) -> Option<String> {
        if field(event, "type") == Some("init") {
            field(event, "model").map(str::to_string)
        } else {
            None
        }
    }

    fn cli_session_id(&self, event: &Value) -> Option<String> {
        field(event, "session_id").map(str::to_string)
    }

    /// gemini has exit codes of its own (41 auth; 42, 44, 52, 53 other
    /// fatal errors); argument errors exit 1 and print "Unknown arguments"
    /// first.
    /// `~/.gemini`: settings, chats, the project's temp files.
    fn state_dirs(&self, home: &Path, _var: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
        vec![home.join(".gemini")]
    }

    fn failure_kind(&self, exit_code: i32, output: &Output) -> Option<FailureKind> {
        const ARGUMENT_SIGNS: &[&str] = &[
            "unknown argument",
            "unknown arguments",
            "not enough arguments",
            "cannot use both",
            "invalid values",
            "missing required argument",
        ];
        match exit_code {
            41 => Some(FailureKind::NotLoggedIn),
            42 | 44 | 52 | 53 => Some(FailureKind::CliError),
            _ if output.mentions(ARGUMENT_SIGNS) => Some(FailureKind::ArgumentError),
            _ if output.mentions(LOGIN_SIGNS) => Some(FailureKind::NotLoggedIn),
            _ if output.mentions(API_SIGNS) => Some(FailureKind::ApiError),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{build_argv, dirs, request, strings, Provider, ProviderOptions};
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
    fn served_model_and_session_from_the_init_event() {
        let p = Provider::Gemini;
        let init = r#"{"type":"init","timestamp":"t","session_id":"g-1","model":"gemini-2.5-pro"}"#;
        assert_eq!(
            p.served_model_from_line(init).as_deref(),
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
}
