//! What this machine offers a run: okstra's own schemas, kernel
//! confinement (docs/confinement.md#kernel-confinement) and, for `pane` jobs, a
//! terminal multiplexer.

use super::{check, Check, Level};
use okstra::confine::Offer;
use okstra::plan::Plan;
use okstra::schema::SchemaKind;
use okstra::vocab::{Backend, Confinement};
use serde_json::Value;

pub fn schemas() -> Check {
    let broken: Vec<&str> = SchemaKind::ALL
        .iter()
        .filter(|k| serde_json::from_str::<Value>(k.text()).is_err())
        .map(|k| k.file_name())
        .collect();
    if broken.is_empty() {
        check(
            "schemas",
            Level::Ok,
            format!("{} schemas embedded", SchemaKind::ALL.len()),
            "",
        )
    } else {
        check(
            "schemas",
            Level::Fail,
            format!("embedded schemas do not parse: {}", broken.join(", ")),
            "this okstra build is broken; rebuild or reinstall it",
        )
    }
}

const LANDLOCK_FIX: &str =
    "use a kernel with Landlock ABI 6 or newer (Linux 6.12+) with `landlock` in its `lsm=` list";

/// What kernel confinement this machine offers: the Landlock ABI, or why
/// there is none; a warning without a plan, since `auto` then runs
/// workers unconfined and only `required` jobs are refused.
pub fn confinement() -> Check {
    match okstra::confine::offer() {
        offer @ Offer::Landlock { .. } => check(
            "confinement",
            Level::Ok,
            format!("{} ({})", offer.describe(), offer.applied()),
            "",
        ),
        offer => check(
            "confinement",
            Level::Warn,
            format!(
                "{}; jobs with confinement auto run unconfined, required ones are refused",
                offer.describe()
            ),
            LANDLOCK_FIX,
        ),
    }
}

/// The confinement a plan's jobs ask for, against what the machine offers:
/// a `required` job where there is none fails (exec would refuse it with
/// `exec/confinement-unavailable`); `auto` jobs there run unconfined.
pub fn confinement_for(plan: &Plan) -> Check {
    let asked = |c: Confinement| -> Vec<&str> {
        plan.jobs()
            .filter(|j| j.write_enforcement.confinement == c)
            .map(|j| j.label())
            .collect()
    };
    let (required, auto) = (asked(Confinement::Required), asked(Confinement::Auto));
    if required.is_empty() && auto.is_empty() {
        return check(
            "confinement",
            Level::Ok,
            "not used: every job says confinement = \"none\"",
            "",
        );
    }
    match okstra::confine::offer() {
        offer @ Offer::Landlock { .. } => check(
            "confinement",
            Level::Ok,
            format!(
                "{} of {} jobs confined here: {} ({})",
                required.len() + auto.len(),
                plan.jobs().count(),
                offer.describe(),
                offer.applied()
            ),
            "",
        ),
        offer if !required.is_empty() => check(
            "confinement",
            Level::Fail,
            format!(
                "{}; exec refuses the jobs that require it (exec/confinement-unavailable): {}",
                offer.describe(),
                required.join(", ")
            ),
            "run on a machine whose kernel offers Landlock ABI 6 or newer, or set confinement = \"auto\" on those jobs",
        ),
        offer => check(
            "confinement",
            Level::Warn,
            format!(
                "{}; these jobs run unconfined (confinement auto): {}",
                offer.describe(),
                auto.join(", ")
            ),
            LANDLOCK_FIX,
        ),
    }
}

/// A plan's `pane` jobs need the terminal multiplexer okstra runs in to
/// answer (tmux through `$TMUX`, cmux); without one they degrade to
/// `cli-wrapper`, recorded as `degradedFrom: "pane"`.
pub fn pane_for(plan: &Plan) -> Option<Check> {
    let jobs: Vec<&str> = plan
        .jobs()
        .filter(|j| j.backend == Backend::Pane)
        .map(|j| j.label())
        .collect();
    if jobs.is_empty() {
        return None;
    }
    Some(match okstra::exec::backend::pane::detect() {
        Some(pane) => check(
            "backend pane",
            Level::Ok,
            format!(
                "{} answers: {} pane job(s) open windows there",
                pane.name(),
                jobs.len()
            ),
            "",
        ),
        None => {
            let why = if std::env::var_os("TMUX").is_some_and(|v| !v.is_empty()) {
                "$TMUX is set but `tmux display-message` did not answer"
            } else {
                "okstra does not run inside tmux or cmux"
            };
            check(
                "backend pane",
                Level::Warn,
                format!(
                    "{why}: the pane jobs ({}) will run as cli-wrapper (degradedFrom: pane)",
                    jobs.join(", ")
                ),
                "run okstra exec inside a tmux session to watch pane jobs in windows",
            )
        }
    })
}
