//! Roster mode (docs/manifest.md#roster-mode): with no spec, one batch is built
//! from the manifest's `recommendedWorkers` and their team-state `workers[]`
//! rows. Each row becomes an `Entry` and goes through the same job builder as a
//! spec entry, so a roster job means exactly what the same spec entry would.

use super::Skip;
use super::{
    build_job, identity, report_identity, rules, with_worker, Built, Ctx, Entry, Loaded, RunFacts,
};
use crate::diag::{Code, Diagnostic};
use crate::model::{Manifest, REPORT_WRITER};
use crate::paths;
use crate::plan::Stage;
use crate::provider::Provider;
use crate::schema::SchemaKind;
use crate::source::{Format, SourceFile};
use crate::vocab::Role;
use serde_json::{Map, Value};

/// The keys of a team-state row that make a roster job. `command` is
/// okstra's addition: the argv of a `provider = "command"` row, written by
/// the lead like the rest of the row.
pub const ROW_KEYS: &[&str] = &[
    "workerId",
    "provider",
    "role",
    "promptPath",
    "resultPath",
    "workerResultPath",
    "modelExecutionValue",
    "command",
];

/// The stage name of a roster plan.
pub const STAGE: &str = "roster";

/// What a roster worker is, as far as selection cares.
pub struct RosterFacts {
    /// As the row names it (or its worker id implies it); "" for none.
    pub provider: String,
    pub role: Role,
}

/// The workers a roster plan runs, and the ones it leaves out with why.
/// Named workers (`requested`) are taken as named, in roster order; with no
/// names, `report-writer` (which runs alone, later) and workers whose
/// provider okstra has no adapter for are skipped.
pub fn select(
    roster: &[String],
    requested: &[String],
    facts: impl Fn(&str) -> RosterFacts,
) -> (Vec<String>, Vec<Skip>) {
    let mut selected: Vec<String> = Vec::new();
    let mut skips = Vec::new();
    for w in roster {
        if selected.contains(w) || skips.iter().any(|s: &Skip| &s.worker == w) {
            continue;
        }
        if !requested.is_empty() {
            if requested.contains(w) {
                selected.push(w.clone());
            }
            continue;
        }
        let f = facts(w);
        if w == REPORT_WRITER || f.role == Role::ReportWriter {
            skips.push(Skip {
                worker: w.clone(),
                reason: "report-writer runs alone: plan it with --workers report-writer once the others are done".into(),
            });
        } else if !f.provider.is_empty() && f.provider.parse::<Provider>().is_err() {
            skips.push(Skip {
                worker: w.clone(),
                reason: format!("okstra has no adapter for provider `{}`", f.provider),
            });
        } else {
            selected.push(w.clone());
        }
    }
    (selected, skips)
}

fn load_team_state(ctx: &mut Ctx, run: &RunFacts) -> Option<Loaded> {
    let display = &run.info.team_state_path;
    if display.is_empty() {
        let d = ctx
            .at(
                &run.manifest.src,
                Code::InputInvalid,
                "roster mode reads the workers[] rows of team-state, but the manifest has no `teamStatePath`",
                "",
            )
            .help("add teamStatePath to the manifest, or plan a job spec instead");
        ctx.push(d);
        return None;
    }
    let abs = paths::abs_of(&ctx.root, display);
    // Team-state is not a plan input: exec writes it, and the rows a roster
    // plan took are copied into the plan's jobs.
    match SourceFile::load(display, &abs, Format::Json) {
        Ok((doc, src)) => {
            let loaded = Loaded { doc, src };
            ctx.schema_check(SchemaKind::TeamState, &loaded, &|_| false);
            Some(loaded)
        }
        Err(d) => {
            let d = d.help(
                "roster mode builds jobs from team-state workers[] rows (workerId, provider, role, promptPath, resultPath, modelExecutionValue); the lead writes them before planning",
            );
            ctx.push(paths::name_root(d, &ctx.root, paths::Base::Root));
            None
        }
    }
}

/// Roster mode: one stage from the roster, plus the pre-run skips.
pub fn stages(ctx: &mut Ctx, run: &RunFacts, requested: &[String]) -> (Vec<Stage>, Vec<Skip>) {
    let manifest = Manifest::new(&run.manifest.doc);
    let roster = manifest.recommended_workers();
    if !check_request(ctx, run, &roster, requested) {
        return (Vec::new(), Vec::new());
    }
    let Some(team) = load_team_state(ctx, run) else {
        return (Vec::new(), Vec::new());
    };
    let rows = rows_of(&team.doc);
    let row_of = |w: &str| rows.iter().find(|(_, r)| str_of_obj(r, "workerId") == w);
    let (selected, skips) = select(&roster, requested, |w| facts_of(w, row_of(w)));
    if selected.is_empty() {
        report_nothing_selected(ctx, run, &skips);
        return (Vec::new(), Vec::new());
    }
    let mut built = Vec::new();
    for w in &selected {
        match row_of(w) {
            Some(&(index, row)) => {
                built.extend(row_job(ctx, run, &manifest, &team.src, w, index, row));
            }
            None => ctx.push(
                Diagnostic::new(
                    Code::InputMissing,
                    format!("roster worker `{w}` has no row in team-state workers[]"),
                )
                .in_file(team.src.display.clone())
                .worker(w.clone())
                .help("the lead writes a workers[] row (workerId, provider, role, promptPath, resultPath, modelExecutionValue) for every recommended worker"),
            ),
        }
    }
    let names = vec![STAGE.to_string()];
    let members = vec![built.iter().map(rules::Member::of).collect()];
    rules::check(ctx, &team.src, &names, &members);
    let jobs: Vec<_> = built.into_iter().map(|b| b.job).collect();
    let out = if jobs.is_empty() {
        Vec::new()
    } else {
        vec![Stage {
            name: STAGE.to_string(),
            jobs,
        }]
    };
    (out, skips)
}

/// `roster/empty` for an empty roster, `roster/unknown-worker` for names
/// outside it; `false` when refused.
fn check_request(ctx: &mut Ctx, run: &RunFacts, roster: &[String], requested: &[String]) -> bool {
    let msrc = &run.manifest.src;
    if roster.is_empty() {
        let pointer = if run.manifest.doc.get("recommendedWorkers").is_some() {
            "/recommendedWorkers"
        } else {
            ""
        };
        let d = ctx
            .at(
                msrc,
                Code::RosterEmpty,
                "the manifest's recommendedWorkers is empty: roster mode has nothing to plan",
                pointer,
            )
            .help("list the run's workers in recommendedWorkers, or plan a job spec: okstra plan SPEC --manifest M");
        ctx.push(d);
        return false;
    }
    let unknown: Vec<&str> = requested
        .iter()
        .filter(|w| !roster.contains(w))
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        return true;
    }
    let d = ctx
        .at(
            msrc,
            Code::RosterUnknownWorker,
            format!(
                "--workers names {} not in the roster: {}",
                if unknown.len() == 1 {
                    "a worker"
                } else {
                    "workers"
                },
                unknown.join(", ")
            ),
            "/recommendedWorkers",
        )
        .help(format!(
            "the roster (recommendedWorkers) is: {}",
            roster.join(", ")
        ));
    ctx.push(d);
    false
}

/// Team-state's `workers[]` rows that are objects, with their indexes.
fn rows_of(doc: &Value) -> Vec<(usize, &Map<String, Value>)> {
    doc.get("workers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .filter_map(|(i, r)| r.as_object().map(|o| (i, o)))
                .collect()
        })
        .unwrap_or_default()
}

/// What selection needs of worker `w`: its row's provider (or the one its
/// id implies) and role.
fn facts_of(w: &str, row: Option<&(usize, &Map<String, Value>)>) -> RosterFacts {
    let provider = row
        .map(|(_, r)| str_of_obj(r, "provider").to_string())
        .filter(|p| !p.is_empty())
        .or_else(|| Provider::for_worker_id(w).map(|p| p.as_str().to_string()))
        .unwrap_or_default();
    RosterFacts {
        provider,
        role: Role::from(row.map(|(_, r)| str_of_obj(r, "role")).unwrap_or("")),
    }
}

fn report_nothing_selected(ctx: &mut Ctx, run: &RunFacts, skips: &[Skip]) {
    let d = ctx
        .at(
            &run.manifest.src,
            Code::RosterEmpty,
            format!(
                "no worker of the roster can be planned by default: {}",
                skips
                    .iter()
                    .map(|s| format!("{} ({})", s.worker, s.reason))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            "/recommendedWorkers",
        )
        .help("name the workers to plan with --workers a,b");
    ctx.push(d);
}

/// The job of one team-state row, through the same builder as a spec entry.
fn row_job(
    ctx: &mut Ctx,
    run: &RunFacts,
    manifest: &Manifest,
    src: &SourceFile,
    w: &str,
    index: usize,
    row: &Map<String, Value>,
) -> Option<Built> {
    let pointer = format!("/workers/{index}");
    let values: Map<String, Value> = ROW_KEYS
        .iter()
        .filter_map(|k| {
            row.get(*k)
                .filter(|v| !v.is_null())
                .map(|v| (k.to_string(), v.clone()))
        })
        .collect();
    let entry = Entry::synthetic(&pointer, values, ROW_KEYS, false);
    let unknown = entry
        .fields
        .provider
        .as_deref()
        .filter(|p| p.parse::<Provider>().is_err());
    if let Some(provider) = unknown {
        let d = ctx
            .at_key(
                src,
                Code::InputInvalid,
                format!("worker `{w}` has provider `{provider}`, which okstra has no adapter for"),
                &entry.ptr("provider"),
            )
            .help("use claude, codex, gemini or command (with a `command` argv on the row)");
        ctx.push(with_worker(d, &entry));
        return None;
    }
    match identity::parse(&entry.fields) {
        Ok(parsed) => build_job(ctx, run, manifest, src, &entry, parsed).map(|job| Built {
            job,
            entry_pointer: pointer,
        }),
        Err(problems) => {
            report_identity(ctx, src, &entry, problems);
            None
        }
    }
}

fn str_of_obj<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(w: &str) -> RosterFacts {
        let provider = match w {
            "aider" => "aider",
            "script" => "command",
            _ => "claude",
        };
        RosterFacts {
            provider: provider.into(),
            role: if w == "writer" {
                REPORT_WRITER.into()
            } else {
                "reviewer".into()
            },
        }
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn default_selection_drops_report_writer_and_adapterless_providers() {
        let roster = names(&[
            "claude",
            "report-writer",
            "aider",
            "script",
            "writer",
            "claude",
        ]);
        let (selected, skips) = select(&roster, &[], facts);
        assert_eq!(selected, names(&["claude", "script"]));
        let skipped: Vec<&str> = skips.iter().map(|s| s.worker.as_str()).collect();
        assert_eq!(skipped, ["report-writer", "aider", "writer"]);
        assert!(skips[1].reason.contains("no adapter for provider `aider`"));
    }

    #[test]
    fn named_workers_are_taken_as_named_with_no_skips() {
        let roster = names(&["claude", "report-writer", "aider"]);
        let (selected, skips) = select(&roster, &names(&["report-writer"]), facts);
        assert_eq!(selected, names(&["report-writer"]));
        assert!(skips.is_empty());
        // Near miss: the default selection would have skipped it.
        let (selected, _) = select(&roster, &[], facts);
        assert_eq!(selected, names(&["claude"]));
    }
}
