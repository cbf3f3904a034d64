//! What `okstra watch` shows, as text: a job's cells, the header, the
//! totals, and the plain table printed where the terminal has no cursor
//! control. The terminal view (super::ui) lays out the same cells.

use super::model::{Job, Model, Sum, Totals};
use crate::provider::UsageTotal;
use crate::render;

/// The columns of the jobs table.
pub const HEADS: [&str; 8] = [
    "stage", "worker", "status", "att", "elapsed", "tokens", "cost", "log",
];

/// `1m05s`, `2h03m`: a duration at a glance.
pub fn duration(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// How a job stands, as shown: an open attempt that no exec holds any
/// more is `unsettled` (the next exec settles it).
pub fn status(job: &Job, exec_running: bool) -> &'static str {
    job.phase.shown(exec_running)
}

/// The time the clocks of open jobs run to: now while an exec holds the
/// run; else the run's last event (a run left behind stands still).
pub fn clock(model: &Model, now: i64, exec_running: bool) -> i64 {
    match exec_running {
        true => now,
        false => model.last_ts.unwrap_or(now),
    }
}

/// A job's cells, the log's last line as given; `now` as [`clock`] says.
pub fn cells(model: &Model, job: &Job, now: i64, exec_running: bool, log: String) -> Vec<String> {
    let spent = job.spent();
    vec![
        job.stage.map_or("-", |s| model.stage_name(s)).to_string(),
        job.label.clone(),
        status(job, exec_running).to_string(),
        match job.attempt {
            0 => "-".into(),
            n => n.to_string(),
        },
        job.elapsed(now).map_or("-".into(), duration),
        spent.as_ref().map_or("-".into(), UsageTotal::tokens_text),
        spent.as_ref().map_or("-".into(), UsageTotal::cost_text),
        log,
    ]
}

/// The header line: task, plan, how long the run has gone, whether an exec
/// holds it.
pub fn header(task: &str, model: &Model, now: i64, exec_running: bool) -> String {
    let plan = match model.plan_digest.as_str() {
        "" => "no dispatch yet".to_string(),
        d => format!("plan {}", render::short(d)),
    };
    let end = if exec_running {
        Some(now)
    } else {
        model.last_ts
    };
    let elapsed = match (model.first_ts, end) {
        (Some(a), Some(b)) => format!(", {}", duration((b - a).max(0))),
        _ => String::new(),
    };
    let exec = if exec_running {
        "exec running"
    } else {
        "no exec running"
    };
    format!("{task}: {plan}{elapsed}, {exec}")
}

/// The totals table: one line per stage and the run's: jobs, how many
/// completed, and what they spent (`okstra status`'s numbers, with
/// running attempts so far).
pub fn totals_rows(t: &Totals) -> Vec<Vec<String>> {
    let line = |name: &str, s: &Sum| {
        let spent = s.spent.as_ref();
        vec![
            name.to_string(),
            s.jobs.to_string(),
            s.completed.to_string(),
            spent.map_or("-".into(), UsageTotal::tokens_text),
            spent.map_or("-".into(), UsageTotal::cost_text),
        ]
    };
    let mut rows: Vec<Vec<String>> = t.stages.iter().map(|s| line(&s.name, s)).collect();
    rows.push(line("total", &t.run));
    rows
}

pub const TOTAL_HEADS: [&str; 5] = ["stage", "jobs", "completed", "tokens", "cost"];

/// `line` cut to `width` columns, an ellipsis marking the cut.
pub fn cut(line: &str, width: usize) -> String {
    use unicode_width::UnicodeWidthChar;
    if unicode_width::UnicodeWidthStr::width(line) <= width {
        return line.to_string();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in line.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

/// The plain table: header, counts, jobs (each with its log's last line,
/// `log` reading it), totals.
pub fn plain(
    task: &str,
    model: &mut Model,
    now: i64,
    exec_running: bool,
    log: &mut dyn FnMut(&Job) -> String,
) -> String {
    let totals = model.totals();
    let model = &*model;
    let now = clock(model, now, exec_running);
    let rows: Vec<Vec<String>> = model
        .listed()
        .map(|j| cells(model, j, now, exec_running, cut(&log(j), 40)))
        .collect();
    format!(
        "{}\n{}\n\n{}\n{}",
        header(task, model, now, exec_running),
        totals.counts_text(exec_running),
        render::table(&HEADS, &rows),
        render::table(&TOTAL_HEADS, &totals_rows(&totals)),
    )
}
