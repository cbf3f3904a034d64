//! `okstra plan` and `okstra show`.

use super::{report, Ended, RunTarget};
use okstra::compile::{self, Request};
use okstra::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use okstra::plan::Plan;
use okstra::render;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The job spec (TOML or JSON). Without it, the manifest's roster is planned.
    pub spec: Option<PathBuf>,
    #[command(flatten)]
    pub target: RunTarget,
    /// Where to write the plan.
    #[arg(long, default_value = "plan.json", value_name = "P")]
    pub out: PathBuf,
    /// Print the summary (or errors) as text, or as one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// The plan to review.
    pub plan: PathBuf,
    /// Print the plan for review as text, or the plan document itself as JSON.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// What to compile; `out`, where the plan will be written (`okstra plan
/// --out`), where that is known before the plan is made.
pub fn request(spec: Option<PathBuf>, target: &RunTarget, out: Option<PathBuf>) -> Request {
    Request {
        project_root: target.project_root.clone(),
        manifest: target.manifest.clone(),
        spec,
        workers: target.workers.clone(),
        created_at: okstra::clock::plan_created_at(),
        records: &okstra::state::team_state::RUN_RECORDS,
        plan_out: out,
    }
}

/// Serialise a plan for its file.
pub fn plan_text(plan: &Plan) -> String {
    plan.to_text()
}

pub fn write_plan(plan: &Plan, out: &Path) -> Result<(), Diagnostic> {
    okstra::fsutil::write_atomic(
        out,
        plan_text(plan).as_bytes(),
        okstra::fsutil::Durability::Fsync,
    )
    .map_err(|e| {
        Diagnostic::new(
            Code::OutputUnwritable,
            format!("cannot write the plan to {}: {e}", out.display()),
        )
        .in_file(out.display().to_string())
        .help("choose a writable --out path")
    })
}

/// A roster plan's pre-run skips, recorded on team-state's pristine rows.
fn record_skips(
    plan: &Plan,
    skips: &[compile::Skip],
) -> Result<Vec<String>, okstra::state::StateError> {
    if skips.is_empty() || plan.run.team_state_path.is_empty() {
        return Ok(Vec::new());
    }
    let root = Path::new(&plan.project_root);
    let path = okstra::paths::abs_of(root, &plan.run.team_state_path);
    let skips: Vec<(String, String)> = skips
        .iter()
        .map(|s| (s.worker.clone(), s.reason.clone()))
        .collect();
    okstra::state::team_state::record_skips(&path, &skips)
}

pub fn plan(args: &PlanArgs) -> Ended {
    let compiled = match compile::compile_full(&request(
        args.spec.clone(),
        &args.target,
        Some(args.out.clone()),
    )) {
        Ok(c) => c,
        Err(diags) => return Ok(report(&diags, args.format)),
    };
    let plan = compiled.plan;
    if let Err(d) = write_plan(&plan, &args.out) {
        return Ok(report(&Diagnostics::from(d), args.format));
    }
    // Roster mode's one documented write besides the plan: pre-run skips on
    // pristine team-state rows (docs/manifest.md#roster-mode).
    let marked = match record_skips(&plan, &compiled.skips) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("okstra: warning: could not record roster skips in team-state: {e}");
            Vec::new()
        }
    };
    if args.format == Format::Text {
        for s in &compiled.skips {
            eprintln!(
                "skipped {}: {}{}",
                s.worker,
                s.reason,
                if marked.contains(&s.worker) {
                    " (recorded not-run in team-state)"
                } else {
                    ""
                }
            );
        }
    }
    let shown = args.out.display().to_string();
    match args.format {
        Format::Text => out!("{}", render::summary(&plan, &shown))?,
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "ok": true,
                "plan": shown,
                "digest": plan.digest,
                "stages": plan.stages.iter().map(|s| serde_json::json!({
                    "name": s.name,
                    "jobs": s.jobs.iter().map(|j| j.key.clone()).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "skipped": compiled.skips.iter().map(|s| serde_json::json!({
                    "worker": s.worker, "reason": s.reason, "recorded": marked.contains(&s.worker),
                })).collect::<Vec<_>>(),
                "exec": ["okstra", "exec", shown],
            }))
            .unwrap_or_default()
        )?,
    }
    Ok(ExitStatus::Success)
}

pub fn show(args: &ShowArgs) -> Ended {
    let plan = match okstra::exec::load::load(&args.plan) {
        Ok(loaded) => loaded.plan,
        Err(d) => return Ok(report(&Diagnostics::from(d), args.format)),
    };
    match args.format {
        Format::Text => out!(
            "{}",
            render::summary(&plan, &args.plan.display().to_string())
        )?,
        Format::Json => super::write_out(format_args!("{}", plan_text(&plan)))?,
    }
    Ok(ExitStatus::Success)
}
