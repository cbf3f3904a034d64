//! TEMPORARY stub (replaced by the h-proc branch).
use std::path::{Path, PathBuf};
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct ProviderOptions {
    pub permission_mode: Option<String>,
    pub sandbox_mode: Option<String>,
    pub approval_mode: Option<String>,
    pub extra_args: Vec<String>,
}
pub fn is_known(p: &str) -> bool {
    matches!(p, "claude" | "codex" | "gemini" | "command")
}
pub fn takes_session_id(p: &str) -> bool {
    p == "claude"
}
pub fn default_for_worker_id(w: &str) -> Option<&'static str> {
    match w {
        "claude" => Some("claude"),
        "codex" => Some("codex"),
        "gemini" => Some("gemini"),
        _ => None,
    }
}
pub struct ArgvRequest<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub project_root: &'a Path,
    pub write_dirs: &'a [PathBuf],
    pub options: &'a ProviderOptions,
    pub command: &'a [String],
    pub session_id: Option<&'a str>,
    pub project_is_git_repo: bool,
}
pub fn build_argv(r: &ArgvRequest) -> Vec<String> {
    if r.provider == "command" {
        r.command.to_vec()
    } else {
        vec![r.provider.to_string()]
    }
}
