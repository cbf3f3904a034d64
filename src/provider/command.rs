//! `command`: a job that brings its own argv (non-agent jobs, demos). No
//! CLI of okstra's choosing, so nothing to read from its output.

use super::{Adapter, ArgvRequest, FailureKind, Output, Program};
use serde_json::Value;

pub struct Command;

impl Adapter for Command {
    fn program(&self) -> Option<Program> {
        None
    }

    /// The given argv, verbatim: no model, options or session id.
    fn argv(&self, req: &ArgvRequest) -> Vec<String> {
        req.command.to_vec()
    }

    fn takes_session_id(&self) -> bool {
        false
    }

    fn served_model(&self, _event: &Value) -> Option<String> {
        None
    }

    fn cli_session_id(&self, _event: &Value) -> Option<String> {
        None
    }

    /// okstra reads no usage from a command's output.
    fn live_usage(&self) -> super::LiveUsage {
        super::LiveUsage::None
    }

    /// A command's exit code means what the command says it means.
    fn failure_kind(&self, _exit_code: i32, _output: &Output) -> Option<FailureKind> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::{build_argv, request, strings, ArgvRequest, Provider, ProviderOptions};

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
            ..request(Provider::Command, &[], &options)
        };
        assert_eq!(build_argv(&req), command);
    }

    #[test]
    fn its_output_says_nothing() {
        let p = Provider::Command;
        let claude = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;
        assert_eq!(p.cli_session_id_from_line(claude), None);
        assert_eq!(p.served_model_from_line(claude), None);
        assert_eq!(p.failure_kind(1, "Not logged in"), None);
    }
}
