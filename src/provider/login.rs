//! Whether an agent CLI is logged in, told without the network: from the
//! variables a worker would inherit and the files each CLI keeps its login
//! in (`okstra doctor`, docs/cli.md#okstra-doctor). Each CLI's own rule lives
//! in its module (`claude.rs`, `codex.rs`, `gemini.rs`, behind
//! `Adapter::login`); this file holds the vocabulary and the file readers they
//! share.
//!
//! The rules were found by asking the real CLIs with fake homes: claude
//! 2.1.197 (`claude auth status`), codex 0.171 (`codex login status`, and
//! which credential `codex exec` sends), gemini 0.61 (its auth check, exit
//! 41). `tests/real_clis/login.rs` holds each rule to its CLI where installed.

use serde_json::Value;
use std::path::{Path, PathBuf};

/// What a worker's CLI would see: its environment, its home, the project
/// root it runs in, and the argv it runs.
pub struct Where<'a> {
    /// A variable of the worker's environment; `None` when unset or empty
    /// (an empty key logs nobody in).
    pub var: &'a dyn Fn(&str) -> Option<String>,
    /// The project root, the worker's working directory.
    pub project_root: &'a Path,
    /// The CLI's argv as the plan has it (empty without a plan).
    pub argv: &'a [String],
}

impl Where<'_> {
    /// `HOME`, where every CLI looks by default.
    pub fn home(&self) -> Option<PathBuf> {
        (self.var)("HOME").map(PathBuf::from)
    }

    /// A directory a CLI takes from `var`, else `home/default`.
    pub fn dir(&self, var: &str, default: &str) -> Option<PathBuf> {
        (self.var)(var)
            .map(PathBuf::from)
            .or_else(|| Some(self.home()?.join(default)))
    }

    /// A flag variable a CLI treats as on (`1`, `true`, `yes`, `on`).
    pub fn truthy(&self, name: &str) -> bool {
        (self.var)(name).is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
    }
}

/// Whether a CLI is logged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Login {
    /// Logged in: how (the variable or file that does it).
    Yes(String),
    /// Not logged in: what was looked at, and how to log in.
    No { looked: String, fix: String },
    /// It cannot be told without the network or a keyring: why.
    Unknown(String),
}

impl Login {
    pub fn no(looked: impl Into<String>, fix: impl Into<String>) -> Login {
        Login::No {
            looked: looked.into(),
            fix: fix.into(),
        }
    }

    /// The wire word for `--format json`.
    pub fn word(&self) -> &'static str {
        match self {
            Login::Yes(_) => "yes",
            Login::No { .. } => "no",
            Login::Unknown(_) => "unknown",
        }
    }
}

/// A file a CLI keeps its login or settings in, as found.
#[derive(Debug, Clone, PartialEq)]
pub enum Found<T> {
    Absent,
    /// It exists but cannot be read or parsed: why.
    Broken(String),
    Read(T),
}

/// Read a JSON file.
pub fn json_file(path: &Path) -> Found<Value> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Absent,
        Err(e) => Found::Broken(format!("cannot read {}: {e}", path.display())),
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(v) => Found::Read(v),
            Err(e) => Found::Broken(format!("{} is not JSON: {e}", path.display())),
        },
    }
}

/// Read a TOML file.
pub fn toml_file(path: &Path) -> Found<toml::Table> {
    match std::fs::read_to_string(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Found::Absent,
        Err(e) => Found::Broken(format!("cannot read {}: {e}", path.display())),
        Ok(text) => match text.parse::<toml::Table>() {
            Ok(t) => Found::Read(t),
            Err(e) => Found::Broken(format!("{} is not TOML: {e}", path.display())),
        },
    }
}

/// A non-empty string at `pointer` in `doc`.
pub fn text_at<'v>(doc: &'v Value, pointer: &str) -> Option<&'v str> {
    doc.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// `name`'s non-empty value in a dotenv file (`NAME=value`, optionally
/// `export`ed and quoted), as the CLIs that read one parse it.
pub fn dotenv_value(path: &Path, name: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().rev().find_map(|line| {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line);
        let (key, value) = line.split_once('=')?;
        if key.trim() != name {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .or_else(|| value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')))
            .unwrap_or(value);
        (!value.is_empty()).then(|| value.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_reads_the_last_assignment_exported_or_quoted() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".env");
        std::fs::write(
            &p,
            "# comment\nOTHER=1\nKEY=first\nexport KEY=\"second\"\nEMPTY=\n",
        )
        .unwrap();
        assert_eq!(dotenv_value(&p, "KEY").as_deref(), Some("second"));
        assert_eq!(dotenv_value(&p, "EMPTY"), None);
        assert_eq!(dotenv_value(&p, "NONE"), None);
        assert_eq!(dotenv_value(&dir.path().join("absent"), "KEY"), None);
    }

    #[test]
    fn files_are_absent_broken_or_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.json");
        assert_eq!(json_file(&p), Found::Absent);
        std::fs::write(&p, "{not json").unwrap();
        assert!(matches!(json_file(&p), Found::Broken(_)));
        std::fs::write(&p, r#"{"a": {"b": " x "}, "c": ""}"#).unwrap();
        let Found::Read(v) = json_file(&p) else {
            panic!()
        };
        assert_eq!(text_at(&v, "/a/b"), Some(" x "));
        assert_eq!(text_at(&v, "/c"), None);
    }

    /// A fake home and project, and the variables a worker would see.
    struct Fake {
        home: tempfile::TempDir,
        project: tempfile::TempDir,
        vars: std::collections::HashMap<String, String>,
        argv: Vec<String>,
    }

    impl Fake {
        fn new() -> Fake {
            let home = tempfile::tempdir().unwrap();
            let mut vars = std::collections::HashMap::new();
            vars.insert("HOME".into(), home.path().display().to_string());
            // Not this machine's /etc/gemini-cli/settings.json.
            let system = home.path().join("no-system-settings.json");
            vars.insert(
                "GEMINI_CLI_SYSTEM_SETTINGS_PATH".into(),
                system.display().to_string(),
            );
            Fake {
                home,
                project: tempfile::tempdir().unwrap(),
                vars,
                argv: Vec::new(),
            }
        }
        fn set(&mut self, k: &str, v: &str) -> &mut Self {
            self.vars.insert(k.into(), v.into());
            self
        }
        fn file(&self, rel: &str, text: &str) -> &Self {
            let p = self.home.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn project_file(&self, rel: &str, text: &str) -> &Self {
            let p = self.project.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
            self
        }
        fn login(&self, p: crate::provider::Provider) -> Login {
            let var = |n: &str| self.vars.get(n).cloned().filter(|v| !v.is_empty());
            p.login(&Where {
                var: &var,
                project_root: self.project.path(),
                argv: &self.argv,
            })
            .unwrap()
        }
        fn word(&self, p: crate::provider::Provider) -> &'static str {
            self.login(p).word()
        }
    }

    use crate::provider::Provider::{Claude, Codex, Command, Gemini};

    #[test]
    fn command_needs_no_login() {
        let f = Fake::new();
        let var = |n: &str| f.vars.get(n).cloned();
        assert!(Command
            .login(&Where {
                var: &var,
                project_root: f.project.path(),
                argv: &[]
            })
            .is_none());
    }

    #[test]
    fn claude_as_claude_auth_status_tells_it() {
        let mut f = Fake::new();
        let Login::No { looked, fix } = f.login(Claude) else {
            panic!()
        };
        assert!(looked.contains(".credentials.json"), "{looked}");
        assert!(fix.contains("claude auth login"), "{fix}");
        for var in [
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_AUTH_TOKEN",
            "CLAUDE_CODE_OAUTH_TOKEN",
        ] {
            let mut g = Fake::new();
            g.set(var, "k");
            assert_eq!(g.login(Claude), Login::Yes(format!("{var} is set")));
        }
        // An empty key logs nobody in; a cloud provider cannot be told.
        f.set("ANTHROPIC_API_KEY", "");
        assert_eq!(f.word(Claude), "no");
        f.set("CLAUDE_CODE_USE_BEDROCK", "0");
        assert_eq!(f.word(Claude), "no");
        f.set("CLAUDE_CODE_USE_BEDROCK", "1");
        assert_eq!(f.word(Claude), "unknown");

        let login = r#"{"claudeAiOauth":{"accessToken":"a","refreshToken":"r","scopes":["user:inference"]}}"#;
        let f = Fake::new();
        f.file(".claude/.credentials.json", login);
        assert_eq!(f.word(Claude), "yes");
        for not in [
            r#"{"claudeAiOauth":{"accessToken":"a","scopes":["user:profile"]}}"#,
            r#"{"claudeAiOauth":{"accessToken":"","scopes":["user:inference"]}}"#,
            r#"{"claudeAiOauth":{"refreshToken":"r","scopes":["user:inference"]}}"#,
            "{}",
            "garbage",
        ] {
            f.file(".claude/.credentials.json", not);
            assert_eq!(f.word(Claude), "no", "{not}");
        }
        f.file(
            ".claude/settings.json",
            r#"{"apiKeyHelper": "pass show anthropic"}"#,
        );
        assert_eq!(f.word(Claude), "yes");
        f.file(
            ".claude/settings.json",
            r#"{"env": {"ANTHROPIC_API_KEY": "k"}}"#,
        );
        assert_eq!(f.word(Claude), "yes");
        f.file(".claude/settings.json", "{}");
        f.file(".claude.json", r#"{"primaryApiKey": "sk-ant-x"}"#);
        assert_eq!(f.word(Claude), "yes");

        // CLAUDE_CONFIG_DIR moves every file into it.
        let mut f = Fake::new();
        f.file(".claude/.credentials.json", login);
        let dir = f.home.path().join("elsewhere").display().to_string();
        f.set("CLAUDE_CONFIG_DIR", &dir);
        assert_eq!(f.word(Claude), "no");
        f.file("elsewhere/.credentials.json", login);
        assert_eq!(f.word(Claude), "yes");
    }

    #[test]
    fn codex_as_codex_exec_picks_its_credential() {
        let mut f = Fake::new();
        assert_eq!(f.word(Codex), "no");
        // `codex exec` reads CODEX_API_KEY, not OPENAI_API_KEY.
        f.set("OPENAI_API_KEY", "sk");
        let Login::No { looked, .. } = f.login(Codex) else {
            panic!()
        };
        assert!(looked.contains("does not read it"), "{looked}");
        f.set("CODEX_API_KEY", "sk");
        assert_eq!(f.word(Codex), "yes");

        let f = Fake::new();
        for (auth, word) in [
            (r#"{"OPENAI_API_KEY": "sk-x"}"#, "yes"),
            (
                r#"{"tokens": {"access_token": "a", "refresh_token": "r", "id_token": "x"}}"#,
                "yes",
            ),
            (r#"{"OPENAI_API_KEY": ""}"#, "no"),
            ("{}", "no"),
            ("garbage", "no"),
        ] {
            f.file(".codex/auth.json", auth);
            assert_eq!(f.word(Codex), word, "{auth}");
        }
        let mut f = Fake::new();
        f.file("ch/auth.json", r#"{"OPENAI_API_KEY": "sk-x"}"#);
        assert_eq!(f.word(Codex), "no");
        let dir = f.home.path().join("ch").display().to_string();
        f.set("CODEX_HOME", &dir);
        assert_eq!(f.word(Codex), "yes");

        // A keyring store cannot be read here.
        let f = Fake::new();
        f.file(
            ".codex/config.toml",
            "cli_auth_credentials_store = \"keyring\"\n",
        );
        assert_eq!(f.word(Codex), "unknown");

        // Another model provider logs in with its own env_key, given on the
        // command line (as the mock-API tests do) or in config.toml.
        let mut f = Fake::new();
        f.argv = ["codex", "exec", "-c", "model_provider=mock", "-c"]
            .iter()
            .map(|s| s.to_string())
            .chain([r#"model_providers.mock={name="mock",base_url="http://127.0.0.1:1/v1",env_key="MOCK_KEY",wire_api="responses"}"#.to_string()])
            .collect();
        let Login::No { looked, fix } = f.login(Codex) else {
            panic!()
        };
        assert!(
            looked.contains("MOCK_KEY") && fix.contains("MOCK_KEY"),
            "{looked}"
        );
        f.set("MOCK_KEY", "k");
        assert_eq!(f.word(Codex), "yes");
        let f = Fake::new();
        f.file(
            ".codex/config.toml",
            "model_provider = \"az\"\n[model_providers.az]\nenv_key = \"AZ_KEY\"\n",
        );
        assert_eq!(f.word(Codex), "no");
        f.file(".codex/config.toml", "model_provider = \"oss\"\n");
        assert_eq!(f.word(Codex), "unknown");
    }

    #[test]
    fn gemini_as_its_auth_check_tells_it() {
        let mut f = Fake::new();
        assert_eq!(f.word(Gemini), "no");
        f.set("GEMINI_API_KEY", "k");
        assert_eq!(f.word(Gemini), "yes");
        // A base URL alone picks the `gateway` type, refused without a terminal.
        f.set("GOOGLE_GEMINI_BASE_URL", "http://127.0.0.1:1");
        assert_eq!(f.word(Gemini), "no");
        // ... but not once the settings select the Gemini API.
        f.file(
            ".gemini/settings.json",
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
        );
        assert_eq!(f.word(Gemini), "yes");
        f.set("GEMINI_API_KEY", "");
        let Login::No { looked, .. } = f.login(Gemini) else {
            panic!()
        };
        assert!(looked.contains("GEMINI_API_KEY is not set"), "{looked}");
        // A .env file from the project root up, as gemini reads one.
        f.project_file(".env", "GEMINI_API_KEY=from-dotenv\n");
        let Login::Yes(how) = f.login(Gemini) else {
            panic!()
        };
        assert!(how.contains(".env"), "{how}");

        let f = Fake::new();
        f.file(
            ".gemini/settings.json",
            r#"{"security": {"auth": {"selectedType": "oauth-personal"}}}"#,
        );
        assert_eq!(f.word(Gemini), "no");
        f.file(
            ".gemini/oauth_creds.json",
            r#"{"access_token": "a", "refresh_token": "r"}"#,
        );
        assert_eq!(f.word(Gemini), "yes");
        // The project's settings win over the user's.
        f.project_file(
            ".gemini/settings.json",
            r#"{"security": {"auth": {"selectedType": "vertex-ai"}}}"#,
        );
        assert_eq!(f.word(Gemini), "no");
        let mut f = f;
        f.set("GOOGLE_API_KEY", "k");
        assert_eq!(f.word(Gemini), "yes");
        f.file(".gemini/settings.json", "{not json");
        f.project_file(".gemini/settings.json", "{}");
        assert_eq!(f.word(Gemini), "no");

        let mut f = Fake::new();
        f.set("GOOGLE_GENAI_USE_GCA", "true");
        assert_eq!(f.word(Gemini), "no");
        f.set("CLOUD_SHELL", "true").set("GOOGLE_GENAI_USE_GCA", "");
        assert_eq!(f.word(Gemini), "unknown");
        // GEMINI_CLI_HOME moves ~/.gemini.
        let mut f = Fake::new();
        f.file(
            "gh/.gemini/settings.json",
            r#"{"security": {"auth": {"selectedType": "gemini-api-key"}}}"#,
        );
        f.set("GEMINI_API_KEY", "k")
            .set("GOOGLE_GEMINI_BASE_URL", "http://x");
        assert_eq!(f.word(Gemini), "no");
        let dir = f.home.path().join("gh").display().to_string();
        f.set("GEMINI_CLI_HOME", &dir);
        assert_eq!(f.word(Gemini), "yes");
    }
}
