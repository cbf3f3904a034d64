//! The API hosts each agent CLI talks to, which the egress proxy lets a
//! worker of that provider reach (docs/confinement.md#network): the hosts of
//! the base URL the CLI is pointed at, where it is; else the vendor's
//! documented hosts for its API and its login.

use super::Provider;
use std::path::Path;

/// The vendor's hosts, when no base URL is set: the API, and where the
/// CLI's own login is refreshed (telemetry and error reporting are left
/// out: the CLIs carry on without them).
pub fn vendor(provider: Provider) -> &'static [&'static str] {
    match provider {
        Provider::Claude => &[
            "api.anthropic.com",
            "console.anthropic.com",
            "platform.claude.com",
            "claude.ai",
        ],
        Provider::Codex => &["api.openai.com", "chatgpt.com", "auth.openai.com"],
        Provider::Gemini => &[
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
            "www.googleapis.com",
            "aiplatform.googleapis.com",
        ],
        Provider::Command => &[],
    }
}

/// Where a provider's API is: base URLs to allow the host and port of, or
/// the vendor's hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiHosts {
    /// The base URLs the CLI is pointed at.
    BaseUrls(Vec<String>),
    /// No base URL set: the vendor's own hosts.
    Vendor(&'static [&'static str]),
}

/// The API hosts of a `provider` worker whose CLI runs as `argv` with the
/// environment `var`.
pub fn api_hosts(
    provider: Provider,
    argv: &[String],
    var: &dyn Fn(&str) -> Option<String>,
) -> ApiHosts {
    let mut urls: Vec<String> = match provider {
        Provider::Claude => var("ANTHROPIC_BASE_URL").into_iter().collect(),
        Provider::Gemini => ["GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL"]
            .iter()
            .filter_map(|v| var(v))
            .collect(),
        Provider::Codex => codex_base_urls(argv, var),
        Provider::Command => Vec::new(),
    };
    urls.retain(|u| !u.is_empty());
    if urls.is_empty() {
        ApiHosts::Vendor(vendor(provider))
    } else {
        ApiHosts::BaseUrls(urls)
    }
}

/// codex's base URLs: `OPENAI_BASE_URL`, and the `base_url` of every
/// `model_providers` entry in its configuration (`$CODEX_HOME/config.toml`)
/// and in the `-c` overrides of its argv.
fn codex_base_urls(argv: &[String], var: &dyn Fn(&str) -> Option<String>) -> Vec<String> {
    let mut urls: Vec<String> = var("OPENAI_BASE_URL").into_iter().collect();
    let home = var("CODEX_HOME").or_else(|| var("HOME").map(|h| format!("{h}/.codex")));
    if let Some(home) = home {
        let config = std::fs::read_to_string(Path::new(&home).join("config.toml"));
        if let Ok(doc) = config.as_deref().unwrap_or("").parse::<toml::Table>() {
            urls.extend(provider_urls(&doc));
        }
    }
    for pair in argv
        .windows(2)
        .filter(|w| w[0] == "-c" || w[0] == "--config")
    {
        // `key=value`, the value in TOML: read as the one line of a table.
        let Some((key, value)) = pair[1].split_once('=') else {
            continue;
        };
        let line = format!("{} = {}", key.trim(), value.trim());
        if let Ok(doc) = line.parse::<toml::Table>() {
            urls.extend(provider_urls(&doc));
        }
    }
    urls
}

/// The `base_url` of each entry of `model_providers` in `doc`.
fn provider_urls(doc: &toml::Table) -> Vec<String> {
    let Some(providers) = doc.get("model_providers").and_then(|p| p.as_table()) else {
        return Vec::new();
    };
    providers
        .values()
        .filter_map(|p| p.get("base_url")?.as_str().map(str::to_string))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn a_base_url_replaces_the_vendor_hosts() {
        let var = env(&[("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")]);
        assert_eq!(
            api_hosts(Provider::Claude, &[], &var),
            ApiHosts::BaseUrls(vec!["http://127.0.0.1:9/".into()])
        );
        let none = env(&[("HOME", "/nonexistent")]);
        assert_eq!(
            api_hosts(Provider::Claude, &[], &none),
            ApiHosts::Vendor(vendor(Provider::Claude))
        );
        assert_eq!(
            api_hosts(Provider::Command, &[], &none),
            ApiHosts::Vendor(&[])
        );
    }

    #[test]
    fn codex_reads_its_model_providers_from_overrides_and_config() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("config.toml"),
            "model_provider = \"corp\"\n[model_providers.corp]\nbase_url = \"https://llm.corp.example/v1\"\n",
        )
        .unwrap();
        let home = dir.path().display().to_string();
        let pairs = [("CODEX_HOME", home.as_str())];
        let var = env(&pairs);
        let argv: Vec<String> = [
            "codex",
            "exec",
            "-c",
            "model_provider=mock",
            "-c",
            "model_providers.mock={name=\"mock\",base_url=\"http://127.0.0.1:4242/v1\"}",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let ApiHosts::BaseUrls(urls) = api_hosts(Provider::Codex, &argv, &var) else {
            panic!("no base urls");
        };
        assert_eq!(
            urls,
            ["https://llm.corp.example/v1", "http://127.0.0.1:4242/v1"]
        );
    }
}
