//! What the executor tells the people and programs watching it.
//!
//! The runner hands every [`Notice`] to each [`Reporter`] it was given: the
//! records it wrote (the same [`Event`]s the events log holds) and the
//! moments only a watcher cares about (a stage starting, a worker exiting,
//! a job's final word). Reporters cannot fail the run: a closed terminal or
//! a full pipe costs the report, never a job. [`Terminal`] and
//! [`JsonLines`] report as the run goes; [`junit`] collects the JUnit XML
//! report written once the run ended.

pub mod junit;

use super::event::Event;
use crate::diag::Format;
use crate::state::team_state::WorkerStatus;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

/// What became of one job, for the summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobReport {
    pub stage: String,
    pub key: String,
    pub label: String,
    pub status: WorkerStatus,
    pub attempts: u64,
    pub reason: String,
    #[serde(rename = "durationMs", serialize_with = "millis")]
    pub duration: Duration,
    /// What the job's attempts of this plan spent, where their CLIs said
    /// (absent when none did: `command` jobs, jobs that never ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::provider::UsageTotal>,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(crate::clock::millis(*d))
}

/// One thing the runner reports.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "notice", rename_all = "kebab-case")]
pub enum Notice<'a> {
    StageStarted {
        index: usize,
        of: usize,
        name: &'a str,
        jobs: usize,
    },
    /// A record written to the events log.
    Recorded { event: &'a Event },
    /// A worker's wrapper ended.
    Exited {
        label: &'a str,
        attempt: u64,
        code: i32,
        #[serde(rename = "elapsedMs", serialize_with = "millis")]
        elapsed: Duration,
    },
    /// A worker whose log stopped growing was stopped.
    WentIdle { label: &'a str, attempt: u64 },
    /// Something a person should read, in one line.
    Said { text: String },
    /// A job's final word in this exec.
    Finished { report: &'a JobReport },
    /// Which jobs run now, for a live line.
    Running {
        labels: Vec<&'a str>,
        settled: usize,
        total: usize,
    },
}

pub trait Reporter {
    fn notice(&mut self, notice: &Notice);
}

/// Progress on stderr for a person: one line per dispatch, exit, retry and
/// settle; on a terminal, a live line under them naming what runs now.
pub struct Terminal {
    started: Instant,
    live: Option<ProgressBar>,
}

impl Terminal {
    pub fn new() -> Terminal {
        let live = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Terminal {
            started: Instant::now(),
            live,
        }
    }

    fn line(&self, text: &str) {
        let text = format!(
            "[okstra {:>7.2}s] {text}",
            self.started.elapsed().as_secs_f64()
        );
        match &self.live {
            Some(bar) => bar.println(text),
            // A closed stderr must not stop the run.
            None => drop(writeln!(std::io::stderr(), "{text}")),
        }
    }
}

impl Default for Terminal {
    fn default() -> Self {
        Terminal::new()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        if let Some(bar) = &self.live {
            bar.finish_and_clear();
        }
    }
}

impl Reporter for Terminal {
    fn notice(&mut self, notice: &Notice) {
        match notice {
            Notice::StageStarted {
                index,
                of,
                name,
                jobs,
            } => self.line(&format!(
                "stage {}/{of} `{name}`: {jobs} job{}",
                index + 1,
                if *jobs == 1 { "" } else { "s" }
            )),
            Notice::Recorded { event } => {
                if let Some(text) = describe(event) {
                    self.line(&text);
                }
            }
            Notice::Exited {
                label,
                attempt,
                code,
                elapsed,
            } => self.line(&format!(
                "{label} exited {code} (attempt {attempt}, {:.1}s)",
                elapsed.as_secs_f64()
            )),
            Notice::WentIdle { label, attempt } => self.line(&format!(
                "{label} went idle and was stopped (attempt {attempt})"
            )),
            Notice::Said { text } => self.line(text),
            Notice::Finished { .. } => {}
            Notice::Running {
                labels,
                settled,
                total,
            } => {
                if let Some(bar) = &self.live {
                    const SHOWN: usize = 4;
                    let mut names = labels
                        .iter()
                        .take(SHOWN)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ");
                    if labels.len() > SHOWN {
                        names.push_str(&format!(" and {} more", labels.len() - SHOWN));
                    }
                    bar.set_message(format!(
                        "{settled}/{total} settled · running {}{}",
                        labels.len(),
                        if names.is_empty() {
                            String::new()
                        } else {
                            format!(": {names}")
                        }
                    ));
                }
            }
        }
    }
}

/// The line a person reads for a record, if any.
fn describe(event: &Event) -> Option<String> {
    let label = |h: &super::event::Head| {
        h.who
            .execution_label
            .clone()
            .or_else(|| h.who.worker_id.clone())
            .unwrap_or_else(|| h.worker_key.clone())
    };
    Some(match event {
        Event::WorkerDispatched(d) => format!(
            "dispatched {} (attempt {}, {})",
            label(&d.head),
            d.head.attempt,
            d.handle
        ),
        Event::WorkerResultCollected(s) => format!(
            "{} completed (attempt {}){}",
            label(&s.head),
            s.head.attempt,
            if s.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", s.reason)
            }
        ),
        Event::WorkerFailed(s) => format!(
            "{} {} (attempt {}): {}{}",
            label(&s.head),
            s.status.as_str(),
            s.head.attempt,
            s.reason,
            if s.resumable {
                " (the next exec resumes it)"
            } else {
                ""
            }
        ),
        Event::WorkerRetryScheduled(r) => format!(
            "{} will retry: {} (attempt {} of {})",
            label(&r.head),
            r.reason,
            r.next_attempt,
            r.head.max_attempts
        ),
        Event::EgressRefused(r) => format!(
            "{} was refused egress to {}:{} (attempt {}): {}",
            label(&r.head),
            r.host,
            r.port,
            r.head.attempt,
            r.reason
        ),
        // Bookkeeping of the audit, nothing a person acts on.
        Event::StageSnapshotWritten(_) => return None,
    })
}

/// Every notice as one JSON object a line, for programs that follow a run.
pub struct JsonLines<W: std::io::Write> {
    out: W,
}

impl<W: std::io::Write> JsonLines<W> {
    pub fn new(out: W) -> Self {
        JsonLines { out }
    }
}

impl<W: std::io::Write> Reporter for JsonLines<W> {
    fn notice(&mut self, notice: &Notice) {
        if matches!(notice, Notice::Running { .. }) {
            return;
        }
        if let Ok(line) = serde_json::to_string(notice) {
            let _ = writeln!(self.out, "{line}");
        }
    }
}

/// The reporters for a run in the given output format: a person's
/// progress lines, or one JSON object a line; on stderr either way (the
/// summary alone goes to stdout).
pub fn for_format(format: Format) -> Vec<Box<dyn Reporter>> {
    match format {
        Format::Text => vec![Box::new(Terminal::new())],
        Format::Json => vec![Box::new(JsonLines::new(std::io::stderr()))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_the_notice_kind_and_skip_the_live_line() {
        let mut buf = Vec::new();
        {
            let mut r = JsonLines::new(&mut buf);
            r.notice(&Notice::StageStarted {
                index: 0,
                of: 2,
                name: "impl",
                jobs: 3,
            });
            r.notice(&Notice::Running {
                labels: vec!["a"],
                settled: 0,
                total: 1,
            });
            r.notice(&Notice::Exited {
                label: "a",
                attempt: 1,
                code: 3,
                elapsed: Duration::from_millis(1500),
            });
        }
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["notice"], "stage-started");
        assert_eq!(lines[1]["notice"], "exited");
        assert_eq!(lines[1]["elapsedMs"], 1500);
    }
}
