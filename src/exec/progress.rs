//! What a person watching `okstra exec` sees on stderr: one line per
//! dispatch, exit, retry and settle; on a terminal, also a live status line
//! under them (indicatif) naming the jobs that are running.

use crate::diag::Format;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal as _;
use std::io::Write as _;
use std::time::{Duration, Instant};

pub struct Progress {
    started: Instant,
    /// The live line, only when stderr is a terminal.
    live: Option<ProgressBar>,
}

impl Progress {
    pub fn new(_format: Format) -> Self {
        let live = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Progress {
            started: Instant::now(),
            live,
        }
    }

    pub fn stage(&self, i: usize, n: usize, name: &str, jobs: usize) {
        self.line(format!(
            "stage {}/{n} `{name}`: {jobs} job{}",
            i + 1,
            if jobs == 1 { "" } else { "s" }
        ));
    }

    pub fn line(&self, text: String) {
        let text = format!(
            "[okstra {:>7.2}s] {text}",
            self.started.elapsed().as_secs_f64()
        );
        match &self.live {
            Some(bar) => bar.println(text),
            // Progress is for a person watching; a closed stderr must not
            // stop the run (eprintln! would panic).
            None => {
                let _ = writeln!(std::io::stderr(), "{text}");
            }
        }
    }

    /// Whether there is a live line to keep up to date.
    pub fn is_live(&self) -> bool {
        self.live.is_some()
    }

    /// The live line: which jobs run now and how far the stage is.
    pub fn running(&self, labels: &[&str], settled: usize, total: usize) {
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

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some(bar) = &self.live {
            bar.finish_and_clear();
        }
    }
}
