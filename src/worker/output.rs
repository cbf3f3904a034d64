//! What the wrapper reads from its attempt's output as it grows
//! (docs/providers.md#the-worker-wrapper): the model that served, judged
//! against the catalog as soon as it is known
//! (docs/providers.md#the-served-model); the CLI's session id and usage; its
//! report of retrying a request the API refused; and, once a failed attempt
//! ended, an excerpt of its output to tell the failure's kind.

use crate::provider::{self, Provider};
use crate::worker::status::StatusSidecar;
use serde_json::Value;
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How much of the log's new output one look reads: a burst of output is
/// taken in pieces, so the supervising loop stays responsive.
const OUTPUT_CHUNK: u64 = 1 << 20;
/// A line longer than this is no event okstra reads (the CLIs' events are
/// far shorter); it is dropped rather than held.
const LONGEST_EVENT_LINE: usize = 16 << 20;
/// How much of a failed attempt's output (its start, and its end) is read to
/// tell its failure kind and quote what the CLI refused.
const EXCERPT: u64 = 64 * 1024;

#[derive(Debug, Default, PartialEq)]
pub(super) struct OutputFacts {
    /// The model the CLI last said served (claude names one per answer).
    served_model: Option<String>,
    cli_session_id: Option<String>,
    /// The CLI's last usage event: each covers the attempt up to it.
    usage: Option<provider::Usage>,
    /// Each model answer's usage as streamed, by answer id, in order: an
    /// id printed again replaces its earlier snapshot, never adds to it.
    answers: Vec<(String, provider::Usage)>,
    /// The CLI's words where it reported retrying a request the API
    /// refused for its credentials.
    refused: Option<String>,
}

/// What the wrapper needs to check the served model: the selected catalog
/// entry's key and the manifest holding the catalog.
#[derive(Debug, Clone)]
pub(super) struct ServedCheck {
    model_ref: String,
    manifest: Value,
}

/// Why the catalog the served model is to be checked against cannot be
/// used: the attempt is refused before it starts.
#[derive(Debug, thiserror::Error)]
pub(super) enum CatalogError {
    #[error("cannot read the model catalog in {}: {source}", path.display())]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("cannot read the model catalog in {}: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("model `{model_ref}` is not in the catalog `models{{}}` of {}", path.display())]
    NotInCatalog { model_ref: String, path: PathBuf },
}

/// The served model the CLI reported, refused by the catalog: the attempt
/// is no result ([`crate::diag::WrapperExit::ServedModelMismatch`]).
#[derive(Debug, thiserror::Error)]
#[error("served-model check failed for catalog model `{model_ref}`: {why}")]
pub(super) struct ServedMismatch {
    model_ref: String,
    why: crate::served_model::Mismatch,
}

impl ServedCheck {
    /// The catalog entry `model_ref` of the run manifest at `manifest`
    /// (`--manifest`, relative to `root` unless absolute).
    pub fn load(root: &Path, manifest: &Path, model_ref: &str) -> Result<Self, CatalogError> {
        let path = root.join(manifest);
        let bytes = fs::read(&path).map_err(|source| CatalogError::Unreadable {
            path: path.clone(),
            source,
        })?;
        let doc: Value =
            serde_json::from_slice(&bytes).map_err(|source| CatalogError::NotJson {
                path: path.clone(),
                source,
            })?;
        if doc.get("models").and_then(|m| m.get(model_ref)).is_none() {
            return Err(CatalogError::NotInCatalog {
                model_ref: model_ref.to_string(),
                path,
            });
        }
        Ok(ServedCheck {
            model_ref: model_ref.to_string(),
            manifest: doc,
        })
    }
}

/// Reads this attempt's part of the log as it grows: the served model (as
/// each answer names it), the CLI's session id and its usage events, the
/// served model judged against the catalog as soon as it is known.
pub(super) struct OutputWatch {
    pub provider: Provider,
    log: PathBuf,
    start: u64,
    offset: u64,
    partial: Vec<u8>,
    /// The line held in `partial` was too long to be an event: skip to its end.
    skipping: bool,
    facts: OutputFacts,
    check: Option<ServedCheck>,
    /// The variable pointing the CLI at its private state, and its value.
    state_env: Option<(String, String)>,
    /// What the CLI's session file held when last read while it ran
    /// ([`provider::LiveUsage::SessionFile`]), and when that was.
    session_seen: Option<provider::Usage>,
    session_read_at: Option<Instant>,
    /// The running usage last handed out by [`OutputWatch::live`].
    reported: Option<provider::Usage>,
}

/// How often a CLI's session file is read while it runs: each read lists
/// a directory and reads the file whole.
const SESSION_LOOK: Duration = Duration::from_millis(250);

impl OutputWatch {
    pub fn new(provider: Provider, log: &Path, start: u64, check: Option<ServedCheck>) -> Self {
        OutputWatch {
            provider,
            log: log.to_path_buf(),
            start,
            offset: start,
            partial: Vec::new(),
            skipping: false,
            facts: OutputFacts::default(),
            check,
            state_env: None,
            session_seen: None,
            session_read_at: None,
            reported: None,
        }
    }

    /// The variable pointing the CLI at its private state, where it had
    /// one: its session files are there.
    pub fn with_state(mut self, env: Option<(String, String)>) -> Self {
        self.state_env = env;
        self
    }

    /// Read what was appended since the last call (up to [`OUTPUT_CHUNK`]);
    /// whether anything was.
    pub fn scan(&mut self) -> bool {
        if self.provider == Provider::Command {
            return false;
        }
        let Ok(mut file) = File::open(&self.log) else {
            return false;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return false;
        }
        let mut chunk = Vec::new();
        if file.take(OUTPUT_CHUNK).read_to_end(&mut chunk).is_err() || chunk.is_empty() {
            return false;
        }
        self.offset += chunk.len() as u64;
        self.partial.extend_from_slice(&chunk);
        while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=nl).collect();
            if std::mem::take(&mut self.skipping) {
                continue;
            }
            self.line(&String::from_utf8_lossy(&line));
        }
        if self.partial.len() > LONGEST_EVENT_LINE {
            self.partial.clear();
            self.skipping = true;
        }
        true
    }

    /// Read the rest of the output, once the CLI has ended, its last line
    /// too (a CLI killed mid-line leaves no newline).
    fn finish(&mut self) {
        while self.scan() {}
        if !self.partial.is_empty() && !self.skipping {
            let rest = std::mem::take(&mut self.partial);
            self.line(&String::from_utf8_lossy(&rest));
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(model) = self.provider.served_model_from_line(line) {
            self.facts.served_model = Some(model);
        }
        if self.facts.cli_session_id.is_none() {
            self.facts.cli_session_id = self.provider.cli_session_id_from_line(line);
        }
        if let Some(usage) = self.provider.usage_from_line(line) {
            self.facts.usage = Some(usage);
        }
        if let Some((id, usage)) = self.provider.message_usage_from_line(line) {
            let answers = &mut self.facts.answers;
            match answers.iter_mut().find(|(seen, _)| *seen == id) {
                Some((_, earlier)) => *earlier = usage,
                None => answers.push((id, usage)),
            }
        }
        if self.facts.refused.is_none() {
            self.facts.refused = self.provider.refused_retry_from_line(line);
        }
    }

    /// Read the rest of the attempt's output and put what it said on
    /// `status`: the served model, the CLI's session, the usage. Returns
    /// the served-model verdict.
    pub fn close(&mut self, status: &mut StatusSidecar) -> Result<(), ServedMismatch> {
        self.finish();
        status.served_model = self.facts.served_model.clone();
        status.cli_session_id = self.facts.cli_session_id.clone();
        status.usage = self.usage();
        self.verdict()
    }

    /// The CLI's words, once it reported retrying a request the API
    /// refused for its credentials.
    pub fn refused(&self) -> Option<&str> {
        self.facts.refused.as_deref()
    }

    /// `Err` once the CLI reported a served model the catalog refuses.
    pub fn verdict(&self) -> Result<(), ServedMismatch> {
        match (&self.check, &self.facts.served_model) {
            (Some(check), Some(observed)) => {
                let manifest = crate::model::Manifest::new(&check.manifest);
                crate::served_model::check_observed(&manifest, &check.model_ref, observed).map_err(
                    |why| ServedMismatch {
                        model_ref: check.model_ref.clone(),
                        why,
                    },
                )
            }
            _ => Ok(()),
        }
    }

    /// The attempt's usage so far, priced, when it changed since the last
    /// call (docs/providers.md#usage-as-it-arrives): the CLI's last usage
    /// event where it printed one, else its answers' usage added up (each
    /// answer once), else, for a CLI whose session file has it, what that
    /// file held at most [`SESSION_LOOK`] ago. Read after [`Self::scan`].
    pub fn live(&mut self) -> Option<provider::Usage> {
        if self.provider.live_usage() == provider::LiveUsage::SessionFile
            && self.facts.usage.is_none()
            && self
                .session_read_at
                .is_none_or(|at| at.elapsed() >= SESSION_LOOK)
        {
            self.session_read_at = Some(Instant::now());
            if let Some(u) = self.session_usage() {
                self.session_seen = Some(u);
            }
        }
        let running = self
            .facts
            .usage
            .clone()
            .or_else(|| self.answers_total())
            .or_else(|| self.session_seen.clone())
            .map(|u| self.finished(u))?;
        if self.reported.as_ref() == Some(&running) {
            return None;
        }
        self.reported = Some(running.clone());
        Some(running)
    }

    /// The answers' usage added up, each answer once.
    fn answers_total(&self) -> Option<provider::Usage> {
        let mut answers = self.facts.answers.iter().map(|(_, u)| u);
        let first = answers.next()?.clone();
        Some(answers.fold(first, |sum, u| sum.plus(u)))
    }

    /// The attempt's usage: the CLI's last usage event, or where it was
    /// stopped before printing one, what its session file holds (found
    /// through this process's `HOME`, which the CLI inherited), else its
    /// answers' usage as streamed; the model that served filled in where
    /// the event does not name it; priced by the catalog's `pricing` for
    /// the job's model, where it has one.
    fn usage(&self) -> Option<provider::Usage> {
        let usage = self
            .facts
            .usage
            .clone()
            .or_else(|| self.session_usage())
            .or_else(|| self.answers_total())?;
        Some(self.finished(usage))
    }

    /// What the CLI's own session file holds, where it has one.
    fn session_usage(&self) -> Option<provider::Usage> {
        let id = self.facts.cli_session_id.as_deref()?;
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
        // The CLI's private state (docs/confinement.md#provider-state)
        // over this process's environment, as the CLI saw them.
        let var = |name: &str| match &self.state_env {
            Some((k, v)) if k == name => Some(v.into()),
            _ => std::env::var_os(name),
        };
        self.provider.usage_from_session(&provider::Session {
            home: Path::new(&home),
            var: &var,
            cli_session_id: id,
        })
    }

    /// `usage` with the served model filled in and priced as `status`
    /// prices it.
    fn finished(&self, usage: provider::Usage) -> provider::Usage {
        let usage = provider::Usage {
            model: usage.model.or_else(|| self.facts.served_model.clone()),
            ..usage
        };
        let pricing = self
            .check
            .as_ref()
            .and_then(|c| provider::Pricing::of(c.manifest.get("models")?.get(&c.model_ref)?));
        usage.priced(pricing.as_ref())
    }

    /// This attempt's output for telling failure kinds apart: its start
    /// (where an argument error is named, before any usage text) and its
    /// end (where the CLI's last word is), [`EXCERPT`] bytes of each.
    pub fn excerpt(&self) -> String {
        let Ok(mut file) = File::open(&self.log) else {
            return String::new();
        };
        let len = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut read = |from: u64, n: u64| {
            let mut bytes = Vec::new();
            if file.seek(SeekFrom::Start(from)).is_ok() {
                let _ = (&mut file).take(n).read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        };
        let size = len.saturating_sub(self.start);
        if size <= 2 * EXCERPT {
            return read(self.start, size);
        }
        let head = read(self.start, EXCERPT);
        let tail = read(len - EXCERPT, EXCERPT);
        format!("{head}\n{tail}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::FailureKind;

    /// What an agent's structured output says about the run.
    fn output_facts(provider: &str, log: &Path, from: u64) -> OutputFacts {
        let provider = provider.parse().expect("a provider name");
        let mut watch = OutputWatch::new(provider, log, from, None);
        watch.finish();
        watch.facts
    }

    #[test]
    fn output_facts_read_this_attempts_part_of_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let old = "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"old\",\"model\":\"old-model\"}\n";
        let new = "noise\n{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"s-2\",\"model\":\"claude-x\"}\n";
        fs::write(&log, format!("{old}{new}")).unwrap();
        let facts = output_facts("claude", &log, old.len() as u64);
        assert_eq!(
            facts,
            OutputFacts {
                served_model: Some("claude-x".into()),
                cli_session_id: Some("s-2".into()),
                usage: None,
                answers: Vec::new(),
                refused: None,
            }
        );
        assert_eq!(output_facts("command", &log, 0), OutputFacts::default());
        assert_eq!(
            output_facts("claude", &dir.path().join("none.log"), 0),
            OutputFacts::default()
        );
    }

    /// claude's stream as 2.1.197 printed it against a loopback API: the
    /// init event, two answers by the model that served, the result.
    const CLAUDE_STREAM: &str = concat!(
        r#"{"type":"system","subtype":"init","session_id":"s-1","model":"claude-sonnet-4-5"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"msg_1","model":"claude-served-1","usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"s-1"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"msg_9","model":"claude-haiku-sub","usage":{"input_tokens":5,"output_tokens":1}},"parent_tool_use_id":"toolu_1","session_id":"s-1"}"#,
        "\n",
        r#"{"type":"assistant","message":{"id":"msg_2","model":"claude-served-2","usage":{"input_tokens":100,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"s-1"}"#,
        "\n",
        r#"{"type":"result","subtype":"success","is_error":false,"session_id":"s-1","total_cost_usd":0.000978,"usage":{"input_tokens":200,"cache_creation_input_tokens":40,"cache_read_input_tokens":60,"output_tokens":14},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":200,"outputTokens":14,"cacheReadInputTokens":60,"cacheCreationInputTokens":40,"costUSD":0.000978}}}"#,
    );

    #[test]
    fn the_served_model_follows_the_answers_and_usage_is_the_last_event() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        // The result line has no newline: a CLI may end without one.
        fs::write(&log, CLAUDE_STREAM).unwrap();
        let facts = output_facts("claude", &log, 0);
        assert_eq!(
            facts.served_model.as_deref(),
            Some("claude-served-2"),
            "the main loop's last answer; not the sub-agent's"
        );
        assert_eq!(facts.cli_session_id.as_deref(), Some("s-1"));
        let usage = facts.usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            (300, 14, 314),
            "modelUsage, not the answers' snapshots summed"
        );
        assert_eq!(usage.cost_usd, Some(0.000978));
    }

    #[test]
    fn claudes_running_usage_counts_each_answer_once_until_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let answer = |id: &str| {
            format!(
                "{{\"type\":\"assistant\",\"message\":{{\"id\":\"{id}\",\"model\":\"m\",\"usage\":{{\"input_tokens\":100,\"cache_read_input_tokens\":50,\"output_tokens\":1}}}}}}\n"
            )
        };
        let mut watch = OutputWatch::new(Provider::Claude, &log, 0, None);
        // Two content blocks of one message: one answer.
        fs::write(&log, format!("{}{}", answer("msg_1"), answer("msg_1"))).unwrap();
        watch.scan();
        let u = watch.live().unwrap();
        assert_eq!((u.input_tokens, u.total_tokens), (150, 151));
        assert_eq!(watch.live(), None, "unchanged: nothing new to hand out");
        fs::write(
            &log,
            format!("{}{}{}", answer("msg_1"), answer("msg_1"), answer("msg_2")),
        )
        .unwrap();
        watch.scan();
        let u = watch.live().unwrap();
        assert_eq!((u.total_tokens, u.cached_input_tokens), (302, Some(100)));
        let synthetic = r#"{"type":"assistant","message":{"id":"x","model":"<synthetic>","usage":{"input_tokens":9,"output_tokens":9}}}"#;
        assert_eq!(Provider::Claude.message_usage_from_line(synthetic), None);
        // The result is the whole, whatever the answers added up to.
        fs::write(&log, CLAUDE_STREAM).unwrap();
        let mut watch = OutputWatch::new(Provider::Claude, &log, 0, None);
        watch.scan();
        watch.finish();
        assert_eq!(watch.live().unwrap().total_tokens, 314);
    }

    #[test]
    fn codex_totals_are_cumulative_so_the_last_turn_is_the_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        fs::write(
            &log,
            concat!(
                r#"{"type":"thread.started","thread_id":"th-1"}"#,
                "\n",
                r#"{"type":"turn.completed","usage":{"input_tokens":100,"cached_input_tokens":0,"output_tokens":20,"reasoning_output_tokens":5}}"#,
                "\n",
                r#"{"type":"turn.completed","usage":{"input_tokens":260,"cached_input_tokens":90,"output_tokens":45,"reasoning_output_tokens":12}}"#,
                "\n"
            ),
        )
        .unwrap();
        let usage = output_facts("codex", &log, 0).usage.unwrap();
        assert_eq!(
            (usage.input_tokens, usage.output_tokens),
            (260, 45),
            "not 360 / 65"
        );
    }

    #[test]
    fn usage_is_priced_by_the_catalog_and_names_the_served_model() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        fs::write(&log, CLAUDE_STREAM).unwrap();
        let manifest = serde_json::json!({"models": {
            "sonnet": {"provider": "claude", "modelId": "claude-sonnet-4-5", "versionKind": "channel",
                       "channelFamily": "claude-served", "pricing": {"input": 3, "cachedInput": 0.3, "cacheWrite": 3.75, "output": 15}},
            "bare": {"provider": "claude", "modelId": "x", "versionKind": "channel", "channelFamily": "claude-served"}
        }});
        let check = |model_ref: &str| ServedCheck {
            model_ref: model_ref.into(),
            manifest: manifest.clone(),
        };
        let mut watch = OutputWatch::new(Provider::Claude, &log, 0, Some(check("sonnet")));
        watch.finish();
        let usage = watch.usage().unwrap();
        assert_eq!(usage.model.as_deref(), Some("claude-served-2"));
        assert_eq!(
            usage.cost_source,
            Some(provider::usage::CostSource::PriceTable)
        );
        // 200 fresh at 3, 60 cached at 0.3, 40 written at 3.75, 14 out at 15.
        assert_eq!(usage.cost_usd, Some(0.000978));
        let mut watch = OutputWatch::new(Provider::Claude, &log, 0, Some(check("bare")));
        watch.finish();
        let usage = watch.usage().unwrap();
        assert_eq!(
            usage.cost_source,
            Some(provider::usage::CostSource::CliEstimate),
            "no pricing in the catalog: claude's own estimate"
        );
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_excerpt_keeps_both_ends() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("p.log");
        let huge = "x".repeat(LONGEST_EVENT_LINE + 10);
        let init = r#"{"type":"system","subtype":"init","session_id":"s-1","model":"m"}"#;
        fs::write(&log, format!("{{\"type\":\"system\",{huge}\n{init}\n")).unwrap();
        assert_eq!(
            output_facts("claude", &log, 0).cli_session_id.as_deref(),
            Some("s-1")
        );

        let usage_text = "usage: ".repeat(30_000);
        fs::write(
            &log,
            format!(
                "earlier attempt\nUnknown arguments: bogus\n{usage_text}\nokstra worker: the end\n"
            ),
        )
        .unwrap();
        let watch = OutputWatch::new(
            Provider::Gemini,
            &log,
            "earlier attempt\n".len() as u64,
            None,
        );
        let excerpt = watch.excerpt();
        assert!(
            excerpt.starts_with("Unknown arguments: bogus"),
            "{}",
            &excerpt[..40]
        );
        assert!(excerpt.trim_end().ends_with("okstra worker: the end"));
        assert!(excerpt.len() as u64 <= 2 * EXCERPT + 1);
        assert_eq!(
            Provider::Gemini
                .said(&FailureKind::ArgumentError, &excerpt)
                .as_deref(),
            Some("Unknown arguments: bogus")
        );
    }
}
