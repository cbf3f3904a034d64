//! Human renderings of a plan: the review summary `okstra plan` and
//! `okstra show` print. Stable and plain, so it diffs well and snapshots
//! well.
//!
//! The review shows what exec will run and nothing else: the wrapper line
//! exec starts (the plan's `command`, with the per-attempt flags exec adds),
//! the provider argv that wrapper line makes the wrapper run (read back from
//! the wrapper line by the wrapper's own parser, never from the plan's
//! `providerCommand`), and every `env` entry with its value, a secret-looking
//! one as a short digest.

use crate::confine::Offer;
use crate::plan::{Identity, Job, Plan};
use crate::provider::{self, ArgvRequest, Provider, ProviderOptions};
use crate::vocab::Confinement;
use std::fmt::{self, Write as _};

/// Quote one argv word the way a POSIX shell would need it. A word holding
/// a control character (a newline, an escape) is written `$'...'` with the
/// character escaped, so it can neither break a line of the review nor
/// drive the terminal.
pub fn shell_word(w: &str) -> String {
    ShellWord(w).to_string()
}

/// [`shell_word`], written where it is shown: the review quotes every word
/// of every job's lines, and a string apiece was a measurable part of it.
struct ShellWord<'a>(&'a str);

impl fmt::Display for ShellWord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = self.0;
        if !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
        {
            f.write_str(w)
        } else if w.chars().any(char::is_control) {
            f.write_str("$'")?;
            for c in w.chars() {
                match c {
                    '\\' => f.write_str("\\\\")?,
                    '\'' => f.write_str("\\'")?,
                    '\n' => f.write_str("\\n")?,
                    '\t' => f.write_str("\\t")?,
                    c if c.is_control() => {
                        let mut buf = [0u8; 4];
                        for b in c.encode_utf8(&mut buf).bytes() {
                            write!(f, "\\x{b:02x}")?;
                        }
                    }
                    c => f.write_char(c)?,
                }
            }
            f.write_char('\'')
        } else {
            f.write_char('\'')?;
            for (i, part) in w.split('\'').enumerate() {
                if i > 0 {
                    f.write_str("'\\''")?;
                }
                f.write_str(part)?;
            }
            f.write_char('\'')
        }
    }
}

/// One line of the review, written into `out`: control characters in what
/// a plan says (a newline in a path or label) are shown escaped, so an
/// edited plan cannot forge lines of the review or drive the terminal.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {{
        let out: &mut String = $out;
        let start = out.len();
        let _ = std::fmt::Write::write_fmt(out, format_args!($($arg)*));
        end_line(out, start);
    }};
}

/// End the line begun at `start`, escaping its control characters.
fn end_line(out: &mut String, start: usize) {
    // C0 controls and DEL are single bytes; C1 controls start with 0xC2.
    // Scanned without stopping early, which the compiler vectorises. 0xC2
    // also starts `·`, which most lines hold: those are looked at again by
    // character before being rewritten.
    let suspect = out.as_bytes()[start..].iter().fold(false, |hit, &b| {
        hit | (b < 0x20) | (b == 0x7f) | (b == 0xc2)
    });
    if suspect && out[start..].contains(char::is_control) {
        let line = out.split_off(start);
        for c in line.chars() {
            if c.is_control() {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
    }
    out.push('\n');
}

pub fn shell_line(argv: &[String]) -> String {
    ShellLine(argv).to_string()
}

/// [`shell_line`], written where it is shown.
struct ShellLine<'a>(&'a [String]);

impl fmt::Display for ShellLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, w) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_char(' ')?;
            }
            ShellWord(w).fmt(f)?;
        }
        Ok(())
    }
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

/// The first 12 hex digits of a digest: how the review names a plan, and
/// the name `okstra run` keeps its plan under.
pub fn short(digest: &str) -> &str {
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
    say!(
        &mut out,
        "Plan {} · {} stage{} · {} job{} · task {}",
        short(&plan.digest),
        plan.stages.len(),
        if plan.stages.len() == 1 { "" } else { "s" },
        jobs,
        if jobs == 1 { "" } else { "s" },
        plan.run.task_key
    );
    say!(&mut out, "  project    {}", plan.project_root);
    say!(&mut out, "  manifest   {}", plan.run.manifest_path);
    say!(&mut out, "  team-state {}", plan.run.team_state_path);
    say!(&mut out, "  events     {}", plan.run.lead_events_path);
    say!(&mut out, "  error log  {}", plan.run.error_log_path);
    say!(
        &mut out,
        "  retries    at most {} attempts per job; backend default {}",
        plan.policy.max_attempts,
        plan.run.terminal_backend
    );
    if let Some(b) = &plan.run.budget {
        say!(
            &mut out,
            "  budget     {} for the run, every attempt added up; past it nothing new starts, running attempts {} (docs/exec.md#budgets)",
            b.limit().describe(),
            match b.on_budget {
                crate::budget::OnBudget::Finish => "finish",
                crate::budget::OnBudget::Stop => "are stopped",
            }
        );
    }
    let offer = crate::confine::offer();
    say!(&mut out, "  confinement {}", offer_line(&offer));
    let root = rustix::process::geteuid().is_root();
    for (i, stage) in plan.stages.iter().enumerate() {
        out.push('\n');
        say!(
            &mut out,
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
        for block in job_blocks(&stage.jobs, &offer, root) {
            out.push_str(&block);
        }
    }
    out.push('\n');
    say!(
        &mut out,
        "Inputs ({}), each checked again by exec:",
        plan.inputs.len()
    );
    for input in &plan.inputs {
        say!(
            &mut out,
            "  {:<10} {}  {}",
            input.kind,
            &input.sha256[..input.sha256.len().min(12)],
            input.path
        );
    }
    out.push('\n');
    say!(&mut out, "To run this plan:");
    say!(&mut out, "  okstra exec {}", shell_word(plan_path));
    out
}

/// A Slurm job's `sbatch` options for review; what is absent is the
/// cluster's default.
fn slurm_line(s: &crate::plan::SlurmOptions) -> String {
    let mut parts: Vec<String> = [
        ("partition", &s.partition),
        ("account", &s.account),
        ("time limit", &s.time_limit),
        ("memory", &s.memory),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.as_ref().map(|v| format!("{name} {v}")))
    .collect();
    if let Some(c) = s.cpus {
        parts.push(format!("cpus {c}"));
    }
    if !s.extra_args.is_empty() {
        parts.push(format!("sbatch {}", shell_line(&s.extra_args)));
    }
    if parts.is_empty() {
        "the cluster's defaults (default partition, no limits given)".into()
    } else {
        parts.join(" · ")
    }
}

/// How an agent job's attempts will be priced, and when they cannot be:
/// codex and gemini report no cost, so only the catalog's `pricing` gives
/// them one (issue 17). `None` for `command` jobs, which spend no tokens
/// okstra can see.
fn cost_line(job: &Job) -> Option<String> {
    if !job.provider.is_agent() {
        return None;
    }
    Some(match (&job.pricing, job.provider) {
        (Some(p), _) => format!("from the catalog's pricing ({})", p.describe()),
        (None, Provider::Claude) => {
            "claude's own estimate (the catalog prices nothing for this model)".into()
        }
        (None, provider) => format!(
            "unknown: {provider} reports no cost and the catalog prices nothing for this model (add `pricing` to its entry in the manifest's models{{}})"
        ),
    })
}

/// What this machine offers, and so what `auto` means here.
/// A job's budget and when it is checked: as usage arrives, or, for a CLI
/// that reports it only at its end, then (docs/providers.md#usage-as-it-arrives).
fn budget_line(job: &Job) -> Option<String> {
    use crate::provider::LiveUsage;
    let budget = job.budget.as_ref()?.describe();
    let when = match job.provider.live_usage() {
        LiveUsage::Answers => "checked as each answer's usage arrives".to_string(),
        LiveUsage::SessionFile => {
            format!("checked as its session file records each response ({} prints usage only at its end)", job.provider)
        }
        LiveUsage::AtEnd => format!(
            "checked at its end: {} reports usage only then",
            job.provider
        ),
        LiveUsage::None => "never acts: a command job reports no usage okstra reads".to_string(),
    };
    Some(format!("{budget} per attempt; {when}"))
}

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
        ", its CLI's private state"
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

/// What a job confined here may read (docs/confinement.md#reads); `None`
/// when it is not confined here.
fn reads_line(job: &Job, offer: &Offer) -> Option<String> {
    if crate::confine::decide(job.write_enforcement.confinement, offer) != Ok(true) {
        return None;
    }
    Some(crate::confine::reads::describe(&job.read_paths))
}

/// Where a job confined here may connect (docs/confinement.md#network):
/// its door in the egress proxy and what the door lets through; `None`
/// when it is not confined here.
fn network_line(job: &Job, offer: &Offer) -> Option<String> {
    use crate::egress::job::Here;
    Some(match crate::egress::job::here(job, offer) {
        Here::Unconfined => return None,
        Here::Open => "open".into(),
        Here::OpenHere(why) => format!("asked confined, open here: {why}"),
        Here::Refused(why) => format!("not here: exec will refuse it ({why})"),
        Here::None => "none: no connection".into(),
        Here::NoDoor => {
            "none on a Slurm node (exec's proxy is not reachable there): set network = \"open\""
                .into()
        }
        Here::Door(Ok(allow)) if allow.is_empty() => {
            "through the egress proxy to no host (`network = { allow = [...] }` adds some)".into()
        }
        Here::Door(Ok(allow)) => format!(
            "through the egress proxy to {}",
            allow.describe().join(", ")
        ),
        Here::Door(Err(e)) => format!("through the egress proxy, but {e}"),
    })
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

/// Each job's block of the review, in order, rendered on every core: a
/// block reads the job's wrapper line back with the wrapper's own parser
/// (about 14 µs a job, most of the review's time at 10,000 jobs), and each
/// thread keeps its own parser and git lookups ([`Asked`]).
fn job_blocks(jobs: &[Job], offer: &Offer, root: bool) -> Vec<String> {
    use rayon::prelude::*;
    jobs.par_iter()
        .map_init(Asked::default, |asked, job| {
            let mut block = String::new();
            job_block(&mut block, job, asked, offer, root);
            block
        })
        .collect()
}

/// One job of the review: what runs it, where its files are, the lines exec
/// and the wrapper will run, its environment, and what it may write.
fn job_block(out: &mut String, job: &Job, asked: &mut Asked, offer: &Offer, root: bool) {
    job_runner_lines(out, job);
    job_path_lines(out, job);
    job_command_lines(out, job, asked, offer);
    job_env_lines(out, job);
    job_write_lines(out, job, offer, root);
}

/// The job's name and identity, and who runs it how: provider, model,
/// backend and limits, Slurm options, pricing, role and dispatch.
fn job_runner_lines(out: &mut String, job: &Job) {
    say!(out, "  ● {} ({})", job.label(), job.key);
    say!(out, "      identity  {}", identity_line(job));
    let model = if job.model_execution_value.is_empty() {
        "-"
    } else {
        &job.model_execution_value
    };
    say!(
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
    if let Some(slurm) = &job.slurm {
        say!(out, "      slurm     {}", slurm_line(slurm));
    }
    if let Some(cost) = cost_line(job) {
        say!(out, "      cost      {cost}");
    }
    if let Some(budget) = budget_line(job) {
        say!(out, "      budget    {budget}");
    }
    let audience = job.audience.as_ref().map_or("-", |a| a.as_str());
    say!(
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
}

/// The files the job reads and writes: prompt, metadata, result, the
/// completion paths, its worktree.
fn job_path_lines(out: &mut String, job: &Job) {
    say!(out, "      prompt    {}", job.prompt_path);
    if let Some(m) = &job.metadata_path {
        say!(out, "      metadata  {m}");
    }
    if job.worker_result_path == job.result_path {
        say!(out, "      result    {}", job.result_path);
    } else {
        say!(
            out,
            "      result    {} (worker result {})",
            job.result_path,
            job.worker_result_path
        );
    }
    say!(out, "      done when {}", job.completion_paths.join(", "));
    if let Some(w) = &job.worktree_path {
        say!(out, "      worktree  {w}");
    }
    if let Some(g) = &job.git_worktree {
        say!(
            out,
            "      branch    {}  from {} ({}){}",
            g.branch,
            g.base.get(..12).unwrap_or(&g.base),
            g.base_from,
            if g.keep {
                ""
            } else {
                " · worktree removed once committed (worktreeKeep = false)"
            }
        );
    }
}

/// The wrapper line exec starts, and the provider argv that line makes the
/// wrapper run, read back with the wrapper's own parser (never from the
/// plan's `providerCommand`), with a note where confinement or the plan
/// says otherwise.
fn job_command_lines(out: &mut String, job: &Job, asked: &mut Asked, offer: &Offer) {
    const FRESH: &str = "  (+ a fresh --session-id per attempt)";
    let line = job.worker_argv(job.first_attempt(), None);
    say!(
        out,
        "      wrapper   {}{}",
        ShellLine(&line),
        if job.takes_session_id { FRESH } else { "" }
    );
    let confined = crate::confine::decide(job.write_enforcement.confinement, offer) == Ok(true);
    match wrapper_runs(line, asked, confined) {
        Ok((argv, takes_session_id, confined_note)) => {
            let fresh = job.takes_session_id && takes_session_id;
            say!(
                out,
                "      runs      {}{}",
                ShellLine(&argv),
                if fresh { FRESH } else { "" }
            );
            match confined_note {
                Some(note) => say!(out, "      note      confined here, {note}"),
                None if argv != job.provider_command => {
                    say!(out, "      note      the plan's providerCommand differs: shown is what the wrapper line runs");
                }
                None => {}
            }
        }
        Err(why) => {
            say!(out, "      runs      ({why})");
        }
    }
}

/// Every `env` entry with its value, a secret-looking one as a short
/// digest.
fn job_env_lines(out: &mut String, job: &Job) {
    for (i, (key, value)) in job.env.iter().enumerate() {
        say!(
            out,
            "      {}{key}={}",
            if i == 0 { "env       " } else { "          " },
            env_value(key, value)
        );
    }
}

/// What the job may write, whether it is confined here, and the warning
/// for a claude job that bypasses permissions as root unconfined.
fn job_write_lines(out: &mut String, job: &Job, offer: &Offer, root: bool) {
    say!(
        out,
        "      may write {} (policy {}, audit {})",
        job.write_policy.allow.join(", "),
        short(&job.write_policy.digest),
        job.write_enforcement.mutation_audit
    );
    say!(out, "      confined  {}", confinement_line(job, offer));
    if let Some(reads) = reads_line(job, offer) {
        say!(out, "      reads     {reads}");
    }
    if let Some(network) = network_line(job, offer) {
        say!(out, "      network   {network}");
    }
    if let Some(var) = job.provider.state_var() {
        say!(
            out,
            "      state     private per attempt ({var}): the user's login and settings copied in, the rest gone with the attempt"
        );
    }
    if let Some(warning) = root_bypass_warning(job, offer, root) {
        say!(out, "      warning:  {warning}");
    }
}

/// What the review asks once and uses for every job: whether a project
/// root lies in a git repository (any ancestor holds `.git`, as the wrapper
/// asks), per root; and the wrapper's parser, which reads each job's line.
struct Asked {
    git: std::collections::HashMap<std::path::PathBuf, bool>,
    wrapper: crate::worker::args::Reader,
}

impl Default for Asked {
    fn default() -> Asked {
        Asked {
            git: Default::default(),
            wrapper: crate::worker::args::Reader::new("okstra worker"),
        }
    }
}

impl Asked {
    fn in_git(&mut self, root: &std::path::Path) -> bool {
        // Looked up before a key is made: every job asks, few roots differ.
        if let Some(&held) = self.git.get(root) {
            return held;
        }
        let held = root.ancestors().any(|d| d.join(".git").exists());
        self.git.insert(root.to_path_buf(), held);
        held
    }
}

/// The provider argv a wrapper `line` (as exec starts it) makes
/// `okstra worker` run, and whether that provider takes a session id; or
/// why it runs none. Read with the wrapper's own parser and assembled as
/// the wrapper assembles it (src/worker/mod.rs), with the project's git
/// state as it is now.
/// `confined`: the worker will run under okstra's confinement here, which
/// may change the CLI's options (the note says how).
type Runs = (Vec<String>, bool, Option<String>);

fn wrapper_runs(line: Vec<String>, asked: &mut Asked, confined: bool) -> Result<Runs, String> {
    if line.first().map(String::as_str) != Some("okstra")
        || line.get(1).map(String::as_str) != Some("worker")
    {
        return Err(
            "not an `okstra worker` line: exec starts the wrapper line itself, as shown".into(),
        );
    }
    let args = asked.wrapper.read(&line[2..]).map_err(|e| {
        let first = e.to_string().lines().next().unwrap_or_default().to_string();
        format!("the wrapper refuses this line, so it runs nothing: {first}")
    })?;
    let provider: Provider = args
        .provider
        .parse()
        .map_err(|e| format!("the wrapper refuses this line, so it runs nothing: {e}"))?;
    if provider == Provider::Command && args.command.is_empty() {
        return Err("the wrapper refuses a command job without an argv after `--`".into());
    }
    let root = std::path::absolute(&args.project_root).unwrap_or(args.project_root.clone());
    let write_dirs: Vec<_> = args.write_dirs.iter().map(|d| root.join(d)).collect();
    // The CLI works where the wrapper starts it: `--workdir`, else the root.
    let cwd = args.workdir.as_ref().map_or(root.clone(), |w| root.join(w));
    let mut options = ProviderOptions {
        permission_mode: args.permission_mode.clone(),
        sandbox_mode: args.sandbox_mode.clone(),
        approval_mode: args.approval_mode.clone(),
        extra_args: args.extra_args.clone(),
    };
    let note = if confined {
        provider.under_confinement(&mut options)
    } else {
        None
    };
    let argv = provider::build_argv(&ArgvRequest {
        provider,
        model: &args.model,
        project_root: &cwd,
        write_dirs: &write_dirs,
        options: &options,
        command: &args.command,
        session_id: None,
        project_is_git_repo: asked.in_git(&cwd),
    });
    Ok((argv, provider.takes_session_id(), note))
}

/// Whether an environment name looks like it holds a secret.
pub fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["TOKEN", "KEY", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| upper.contains(w))
}

/// An `env` value as the review shows it: quoted for a shell, or for a
/// secret-looking name a short digest (enough to tell two values apart,
/// not to show one).
pub fn env_value(name: &str, value: &str) -> String {
    if looks_secret(name) {
        let hex = crate::canonical::sha256_hex(value.as_bytes());
        format!("sha256:{}…", &hex[..8])
    } else {
        shell_word(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_looking_names_show_a_digest() {
        for name in [
            "GITHUB_TOKEN",
            "api_key",
            "MySecret",
            "DB_PASSWORD",
            "KEYRING",
        ] {
            let shown = env_value(name, "hunter2");
            assert!(
                shown.starts_with("sha256:") && shown.ends_with('…'),
                "{name}"
            );
            assert!(!shown.contains("hunter2"));
        }
        assert_ne!(env_value("TOKEN", "a"), env_value("TOKEN", "b"));
        assert_eq!(env_value("PATH", "/opt/evil bin"), "'/opt/evil bin'");
        assert_eq!(env_value("TOKENISH", ""), env_value("A_TOKEN", ""));
    }

    #[test]
    fn the_review_says_how_each_agent_job_is_priced() {
        let job = |provider: &str, pricing: serde_json::Value| -> Job {
            serde_json::from_value(serde_json::json!({
                "key": "w", "identity": {"version": "1", "workerId": "w"},
                "provider": provider, "backend": "cli-wrapper", "role": "analyst",
                "dispatchKind": "initial", "round": 1, "promptPath": "p.md",
                "resultPath": "r.md", "workerResultPath": "r.md", "completionPaths": ["r.md"],
                "command": [], "providerCommand": [], "takesSessionId": false,
                "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
                "writePolicy": {"role": "analyst", "allow": [], "digest": ""},
                "writeEnforcement": {"mutationAudit": "batch"},
                "pricing": pricing
            }))
            .unwrap()
        };
        let none = serde_json::Value::Null;
        let priced = serde_json::json!({"input": 1.25, "cachedInput": 0.125, "output": 10});
        assert_eq!(cost_line(&job("command", none.clone())), None);
        assert_eq!(
            cost_line(&job("codex", priced)).unwrap(),
            "from the catalog's pricing (USD per million tokens: input 1.25, cached input 0.125, output 10)"
        );
        assert!(cost_line(&job("claude", none.clone()))
            .unwrap()
            .starts_with("claude's own estimate"));
        for provider in ["codex", "gemini"] {
            assert!(
                cost_line(&job(provider, none.clone()))
                    .unwrap()
                    .starts_with(&format!("unknown: {provider} reports no cost")),
                "{provider}"
            );
        }
    }

    #[test]
    fn the_review_says_when_each_jobs_budget_is_checked() {
        let with = |provider: &str| -> Job {
            let mut j = job(provider, "none", &["x"]);
            j.budget = Some(crate::budget::Budget {
                max_cost_usd: None,
                max_tokens: Some(1000),
            });
            j
        };
        let line = |p: &str| budget_line(&with(p)).unwrap();
        assert!(line("claude").starts_with("maxTokens 1000 per attempt; checked as each answer"));
        assert!(line("codex").contains("session file"));
        assert_eq!(
            line("gemini"),
            "maxTokens 1000 per attempt; checked at its end: gemini reports usage only then"
        );
        assert!(line("command").contains("never acts"));
        assert_eq!(budget_line(&job("claude", "none", &["x"])), None);
    }

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
            "required, not here: exec will refuse it · may write under out (+ a private TMPDIR, its CLI's private state)"
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
        assert_eq!(shell_word("a\nb'c\\"), "$'a\\nb\\'c\\\\'");
        assert_eq!(shell_word("\u{1b}[2J"), "$'\\x1b[2J'");
    }

    #[test]
    fn a_review_line_never_breaks_or_drives_the_terminal() {
        let mut out = String::new();
        say!(
            &mut out,
            "  prompt    a\n      runs      fake\u{1b}[2J\u{85}é"
        );
        assert_eq!(
            out,
            "  prompt    a\\n      runs      fake\\u{1b}[2J\\u{85}é\n"
        );
        let mut out = String::new();
        say!(&mut out, "plain · é");
        assert_eq!(out, "plain · é\n");
        // `·` and a C1 control share their first byte.
        let mut out = String::new();
        say!(&mut out, "a · b\u{9b}2J");
        assert_eq!(out, "a · b\\u{9b}2J\n");
    }

    /// A wrapper line of `--project-root /r`, a command job running
    /// `true`, with `extra` before its `--`.
    fn wrapper_line(extra: &[&str]) -> Vec<String> {
        let head = [
            "okstra",
            "worker",
            "--project-root",
            "/r",
            "--provider",
            "command",
        ];
        let files = [
            "--prompt",
            "p.md",
            "--result",
            "r.md",
            "--worker-result",
            "r.md",
        ];
        let tail = ["--worker-key", "k", "--", "true"];
        let words = head.iter().chain(&files).chain(extra).chain(&tail);
        words.map(|w| w.to_string()).collect()
    }

    #[test]
    fn a_line_the_wrapper_refuses_runs_nothing_and_the_next_line_reads_anew() {
        let mut asked = Asked::default();
        let refused = wrapper_runs(wrapper_line(&["--bogus"]), &mut asked, false).unwrap_err();
        assert!(
            refused.starts_with(
                "the wrapper refuses this line, so it runs nothing: error: unexpected argument '--bogus'"
            ),
            "{refused}"
        );
        let (argv, takes_session_id, note) =
            wrapper_runs(wrapper_line(&["--attempt", "2"]), &mut asked, false).unwrap();
        assert_eq!(
            (argv, takes_session_id, note),
            (vec!["true".to_string()], false, None)
        );
        let refused =
            wrapper_runs(wrapper_line(&["--attempt", "0"]), &mut asked, false).unwrap_err();
        assert!(refused.contains("--attempt"), "{refused}");
    }
}
