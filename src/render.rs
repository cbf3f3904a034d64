//! Human renderings of a plan: the review summary `okstra plan` and
//! `okstra show` print. Stable and plain, so it diffs well and snapshots
//! well.

use crate::confine::Offer;
use crate::plan::{Identity, Job, Plan};
use crate::provider::Provider;
use crate::vocab::Confinement;
use std::fmt::Write as _;

/// Quote one argv word the way a POSIX shell would need it.
pub fn shell_word(w: &str) -> String {
    if !w.is_empty()
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

pub fn shell_line(argv: &[String]) -> String {
    argv.iter()
        .map(|w| shell_word(w))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A plain text table: a header row and rows, columns padded to their widest
/// cell (in characters), the last column left ragged. Numbers are not
/// special: callers format them.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let cols = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < cols {
                let pad = widths[i].saturating_sub(cell.chars().count());
                text.push_str(cell);
                text.push_str(&" ".repeat(pad + 2));
            } else {
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

fn identity_line(job: &Job) -> String {
    match &job.identity {
        Identity::V1 { worker_id } => format!("v1 workerId {worker_id}"),
        Identity::V2(v) => format!(
            "v2 {} · participant {} · role execution {} · duty {} · invocation {} · attempt {}",
            v.execution_label,
            v.participant_ref,
            v.role_execution_ref,
            v.duty_id,
            v.invocation_ref,
            v.attempt
        ),
    }
}

/// The review summary. `plan_path` is how the plan file is named in the
/// closing `okstra exec` line.
pub fn summary(plan: &Plan, plan_path: &str) -> String {
    let mut out = String::new();
    let jobs = plan.jobs().count();
    let _ = writeln!(
        out,
        "Plan {} · {} stage{} · {} job{} · task {}",
        short(&plan.digest),
        plan.stages.len(),
        if plan.stages.len() == 1 { "" } else { "s" },
        jobs,
        if jobs == 1 { "" } else { "s" },
        plan.run.task_key
    );
    let _ = writeln!(out, "  project    {}", plan.project_root);
    let _ = writeln!(out, "  manifest   {}", plan.run.manifest_path);
    let _ = writeln!(out, "  team-state {}", plan.run.team_state_path);
    let _ = writeln!(out, "  events     {}", plan.run.lead_events_path);
    let _ = writeln!(out, "  error log  {}", plan.run.error_log_path);
    let _ = writeln!(
        out,
        "  retries    at most {} attempts per job; backend default {}",
        plan.policy.max_attempts, plan.run.terminal_backend
    );
    let offer = crate::confine::offer();
    let _ = writeln!(out, "  confinement {}", offer_line(&offer));
    let root = rustix::process::geteuid().is_root();
    for (i, stage) in plan.stages.iter().enumerate() {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "Stage {}/{} `{}` · {} job{}",
            i + 1,
            plan.stages.len(),
            stage.name,
            stage.jobs.len(),
            if stage.jobs.len() == 1 {
                ""
            } else {
                "s, run concurrently"
            }
        );
        for job in &stage.jobs {
            job_block(&mut out, job, &offer, root);
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Inputs ({}), each checked again by exec:",
        plan.inputs.len()
    );
    for input in &plan.inputs {
        let _ = writeln!(
            out,
            "  {:<10} {}  {}",
            input.kind,
            &input.sha256[..input.sha256.len().min(12)],
            input.path
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "To run this plan:");
    let _ = writeln!(out, "  okstra exec {}", shell_word(plan_path));
    out
}

/// What this machine offers, and so what `auto` means here.
fn offer_line(offer: &Offer) -> String {
    match offer {
        Offer::Landlock { abi } => format!(
            "this machine offers Landlock ABI {abi}: jobs with confinement auto or required are confined"
        ),
        Offer::Unavailable(why) => format!(
            "this machine cannot confine ({why}): jobs with confinement auto run unconfined, exec refuses required ones"
        ),
    }
}

/// Whether and how a job will be confined here, with the directories it
/// may write (as the wrapper is told: `.` is the project root).
fn confinement_line(job: &Job, offer: &Offer) -> String {
    let mode = job.write_enforcement.confinement;
    if mode == Confinement::None {
        return "no (confinement none): the audit alone judges its writes".into();
    }
    let wrapper_writes = [job.log_path(), job.status_path()];
    let dirs: Vec<String> = crate::confine::policy_dirs(&job.write_policy.allow, &wrapper_writes)
        .into_iter()
        .map(|d| if d.is_empty() { ".".into() } else { d })
        .collect();
    let state = if job.provider.is_agent() {
        ", its provider's state"
    } else {
        ""
    };
    let here = match crate::confine::decide(mode, offer) {
        Ok(true) => format!("yes here ({})", offer.applied()),
        Ok(false) => "not here".into(),
        Err(_) => "not here: exec will refuse it".into(),
    };
    format!(
        "{mode}, {here} · may write under {} (+ a private TMPDIR{state})",
        dirs.join(", ")
    )
}

/// claude refuses `bypassPermissions` as root unless it is told it runs in
/// a sandbox: confined, the wrapper says so (`IS_SANDBOX=1`); unconfined,
/// the review warns.
fn root_bypass_warning(job: &Job, offer: &Offer, root: bool) -> Option<String> {
    let bypass = job
        .provider_command
        .windows(2)
        .any(|w| w[0] == "--permission-mode" && w[1] == "bypassPermissions")
        || job.provider_command.iter().any(|a| {
            a == "--permission-mode=bypassPermissions" || a == "--dangerously-skip-permissions"
        });
    let confined = crate::confine::decide(job.write_enforcement.confinement, offer) == Ok(true);
    let sandboxed = job.env.get("IS_SANDBOX").is_some_and(|v| v == "1");
    (job.provider == Provider::Claude && bypass && root && !confined && !sandboxed).then(|| {
        "claude refuses bypassPermissions as root outside a sandbox, and this job runs unconfined here: confine it (confinement auto on a kernel with Landlock), or run okstra as another user".to_string()
    })
}

fn job_block(out: &mut String, job: &Job, offer: &Offer, root: bool) {
    let _ = writeln!(out, "  ● {} ({})", job.label(), job.key);
    let _ = writeln!(out, "      identity  {}", identity_line(job));
    let model = if job.model_execution_value.is_empty() {
        "-"
    } else {
        &job.model_execution_value
    };
    let _ = writeln!(
        out,
        "      provider  {} · model {} · backend {} · idle timeout {}s{}",
        job.provider,
        model,
        job.backend,
        job.idle_timeout_seconds,
        job.timeout_seconds
            .map(|t| format!(" · wall clock {t}s"))
            .unwrap_or_default()
    );
    let audience = job.audience.as_ref().map_or("-", |a| a.as_str());
    let _ = writeln!(
        out,
        "      role      {} · audience {} · dispatch {} (round {}){}",
        job.role,
        audience,
        job.dispatch_kind,
        job.round,
        job.dispatch_id
            .as_ref()
            .map(|d| format!(" · id {d}"))
            .unwrap_or_default()
    );
    let _ = writeln!(out, "      prompt    {}", job.prompt_path);
    if let Some(m) = &job.metadata_path {
        let _ = writeln!(out, "      metadata  {m}");
    }
    if job.worker_result_path == job.result_path {
        let _ = writeln!(out, "      result    {}", job.result_path);
    } else {
        let _ = writeln!(
            out,
            "      result    {} (worker result {})",
            job.result_path, job.worker_result_path
        );
    }
    let _ = writeln!(out, "      done when {}", job.completion_paths.join(", "));
    if let Some(w) = &job.worktree_path {
        let _ = writeln!(out, "      worktree  {w}");
    }
    let _ = writeln!(
        out,
        "      runs      {}{}",
        shell_line(&job.provider_command),
        if job.takes_session_id {
            "  (+ a fresh --session-id per attempt)"
        } else {
            ""
        }
    );
    if !job.env.is_empty() {
        let env: Vec<String> = job.env.keys().cloned().collect();
        let _ = writeln!(out, "      env       {}", env.join(", "));
    }
    let _ = writeln!(
        out,
        "      may write {} (policy {}, audit {})",
        job.write_policy.allow.join(", "),
        short(&job.write_policy.digest),
        job.write_enforcement.mutation_audit
    );
    let _ = writeln!(out, "      confined  {}", confinement_line(job, offer));
    if let Some(warning) = root_bypass_warning(job, offer, root) {
        let _ = writeln!(out, "      warning:  {warning}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_every_column_but_the_last() {
        let t = table(
            &["job", "status", "reason"],
            &[
                vec!["a".into(), "completed".into(), "".into()],
                vec!["longer".into(), "error".into(), "it broke".into()],
            ],
        );
        assert_eq!(
            t,
            "job     status     reason\na       completed\nlonger  error      it broke\n"
        );
    }

    fn job(provider: &str, confinement: &str, argv: &[&str]) -> Job {
        serde_json::from_value(serde_json::json!({
            "key": "w", "identity": {"version": "1", "workerId": "w"},
            "provider": provider, "backend": "cli-wrapper", "role": "analyst",
            "dispatchKind": "initial", "round": 1, "promptPath": "p/w.md",
            "resultPath": "out/w.md", "workerResultPath": "out/w.md", "completionPaths": ["out/w.md"],
            "command": [], "providerCommand": argv,
            "takesSessionId": false, "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
            "writePolicy": {"role": "analyst", "allow": ["out/w.md", "p/w.md.log", "p/w.md.status.json"], "digest": ""},
            "writeEnforcement": {"mutationAudit": "batch", "confinement": confinement}
        }))
        .unwrap()
    }

    #[test]
    fn the_review_says_whether_a_job_is_confined_here_and_where_it_may_write() {
        let here = Offer::Landlock { abi: 7 };
        let none = Offer::Unavailable("no Landlock".into());
        let auto = job("command", "auto", &["true"]);
        assert_eq!(
            confinement_line(&auto, &here),
            "auto, yes here (landlock-abi7) · may write under out (+ a private TMPDIR)"
        );
        assert!(confinement_line(&auto, &none).starts_with("auto, not here ·"));
        let required = job("claude", "required", &["claude"]);
        assert_eq!(
            confinement_line(&required, &none),
            "required, not here: exec will refuse it · may write under out (+ a private TMPDIR, its provider's state)"
        );
        assert!(confinement_line(&job("command", "none", &[]), &here)
            .starts_with("no (confinement none)"));
        assert!(offer_line(&none).contains("cannot confine (no Landlock)"));
    }

    #[test]
    fn an_unconfined_root_claude_with_bypass_permissions_is_warned_about() {
        let here = Offer::Landlock { abi: 7 };
        let none = Offer::Unavailable("no".into());
        let argv = ["claude", "-p", "--permission-mode", "bypassPermissions"];
        let auto = job("claude", "auto", &argv);
        assert!(root_bypass_warning(&auto, &none, true).is_some());
        // Near misses: confined here, not root, another mode, or sandboxed.
        assert!(root_bypass_warning(&auto, &here, true).is_none());
        assert!(root_bypass_warning(&auto, &none, false).is_none());
        let plan_mode = job("claude", "auto", &["claude", "--permission-mode", "plan"]);
        assert!(root_bypass_warning(&plan_mode, &none, true).is_none());
        let mut sandboxed = job("claude", "none", &argv);
        sandboxed.env.insert("IS_SANDBOX".into(), "1".into());
        assert!(root_bypass_warning(&sandboxed, &here, true).is_none());
        assert!(root_bypass_warning(&job("claude", "none", &argv), &here, true).is_some());
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_word("plain/path.json"), "plain/path.json");
        assert_eq!(shell_word("two words"), "'two words'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
