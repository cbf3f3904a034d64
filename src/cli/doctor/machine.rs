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

/// Whether this machine can confine a worker's network
/// (docs/confinement.md#network): Landlock's TCP rules and seccomp.
pub fn network() -> Check {
    match okstra::confine::net_unavailable(&okstra::confine::offer()) {
        None => check(
            "network",
            Level::Ok,
            "confined workers reach the network only through okstra's egress proxy (Landlock TCP rules, seccomp)",
            "",
        ),
        Some(why) => check(
            "network",
            Level::Warn,
            format!("{why}: jobs with network other than \"open\" run with an open network (confinement auto), or are refused (required)"),
            "use a kernel with seccomp and Landlock ABI 6 or newer",
        ),
    }
}

/// What a plan's confined jobs may reach over the network here
/// (docs/confinement.md#network), job by job; `None` when no job is
/// confined with a network.
pub fn network_for(plan: &Plan) -> Option<Check> {
    let offer = okstra::confine::offer();
    let mut lines = Vec::new();
    let mut refused = Vec::new();
    for job in plan.jobs() {
        use okstra::egress::job::Here;
        let here = match okstra::egress::job::here(job, &offer) {
            Here::Unconfined => continue,
            Here::Refused(why) => {
                refused.push(job.label().to_string());
                format!("refused ({why})")
            }
            Here::Open => "open".to_string(),
            Here::OpenHere(why) => format!("open here ({why})"),
            Here::None => "none".to_string(),
            Here::NoDoor => "none (a Slurm node has no door)".to_string(),
            Here::Door(Ok(allow)) => allow.describe().join(", "),
            Here::Door(Err(e)) => format!("unusable: {e}"),
        };
        lines.push(format!("{}: {here}", job.label()));
    }
    if lines.is_empty() {
        return None;
    }
    let level = if refused.is_empty() {
        Level::Ok
    } else {
        Level::Fail
    };
    Some(check(
        "network",
        level,
        some_of(&lines),
        if refused.is_empty() {
            ""
        } else {
            "run on a kernel with seccomp, or plan those jobs with network = \"open\""
        },
    ))
}

/// What a plan's confined jobs may read besides what okstra grants
/// (docs/confinement.md#reads); `None` when no job is confined.
pub fn reads_for(plan: &Plan) -> Option<Check> {
    let offer = okstra::confine::offer();
    let lines: Vec<String> = plan
        .jobs()
        .filter(|j| okstra::confine::decide(j.write_enforcement.confinement, &offer) == Ok(true))
        .map(|j| {
            let reads = okstra::confine::reads::describe(&j.read_paths);
            format!("{}: {reads}", j.label())
        })
        .collect();
    (!lines.is_empty()).then(|| check("reads", Level::Ok, some_of(&lines), ""))
}

/// Per-job lines joined, the first dozen of a large plan and a count of
/// the rest (the review lists every job).
fn some_of(lines: &[String]) -> String {
    const SHOWN: usize = 12;
    let mut text = lines[..lines.len().min(SHOWN)].join("; ");
    if lines.len() > SHOWN {
        text.push_str(&format!(
            "; and {} more (see the review)",
            lines.len() - SHOWN
        ));
    }
    text
}

/// A plan's `worktree = "git"` jobs need the user's git (2.36 or later, on
/// PATH), the repository they were planned in, and each base commit
/// (docs/worktrees.md#running); `None` when no job has a worktree.
pub fn git_for(plan: &Plan, root: &std::path::Path) -> Option<Check> {
    let jobs: Vec<&okstra::plan::Job> = plan.jobs().filter(|j| j.git_worktree.is_some()).collect();
    if jobs.is_empty() {
        return None;
    }
    let fail = |detail: String, fix: &str| Some(check("git", Level::Fail, detail, fix));
    let version = match okstra::worktree::git_version() {
        Ok(v) => v,
        Err(e) => {
            return fail(
                e.to_string(),
                "install git 2.36 or later and put it on PATH",
            )
        }
    };
    if !git_new_enough(&version) {
        return fail(
            format!("git {version} is older than 2.36, which worktree jobs need"),
            "install git 2.36 or later",
        );
    }
    let repo = match okstra::worktree::Repo::find(root) {
        Ok(Some(repo)) => repo,
        Ok(None) => {
            return fail(
                format!("{} is not in a git repository", root.display()),
                "run exec where the plan was made",
            )
        }
        Err(e) => return fail(e.to_string(), "check that git works in the project"),
    };
    let mut missing: Vec<String> = jobs
        .iter()
        .filter_map(|j| j.git_worktree.as_ref())
        .map(|g| g.base.clone())
        .filter(|b| !repo.commit_exists(b))
        .collect();
    missing.sort();
    missing.dedup();
    if !missing.is_empty() {
        return fail(
            format!(
                "the planned base commit(s) {} are not in the repository",
                missing.join(", ")
            ),
            "plan again: the base is fixed when the plan is made",
        );
    }
    Some(check(
        "git",
        Level::Ok,
        format!(
            "git {version}; {} worktree job(s) in {}",
            jobs.len(),
            repo.top().display()
        ),
        "",
    ))
}

/// Whether `git --version`'s number is 2.36 or later.
fn git_new_enough(version: &str) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor) >= (2, 36)
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

#[cfg(test)]
mod tests {
    use super::git_new_enough;

    #[test]
    fn git_236_or_later_does_worktrees() {
        assert!(git_new_enough("2.47.3"));
        assert!(git_new_enough("2.36.0"));
        assert!(git_new_enough("3.0"));
        assert!(!git_new_enough("2.35.9"));
        assert!(!git_new_enough("2.9.5"));
        assert!(!git_new_enough("garbled"));
    }
}
