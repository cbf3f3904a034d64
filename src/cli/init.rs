//! `okstra init`: a run for a project in one command (docs/cli.md#commands). It
//! writes a run manifest, a job spec whose first line names its schema (written
//! beside it, for editors), a prompt per worker and a `.gitignore` for the
//! run's state; never over a file that exists: every target is looked at before
//! the first is written. Then it prints the commands that plan and run what it
//! wrote.
//!
//! The workers are v1 (a `workerId`), which needs no invocation metadata:
//! one per `--provider`, or per agent CLI that doctor's checks find ready
//! (on PATH, answering, logged in), else one `command` worker that runs
//! without any agent.

use super::doctor;
use super::{report, Ended};
use clap::builder::TypedValueParser as _;
use okstra::beneath::Beneath;
use okstra::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use okstra::paths;
use okstra::provider::Provider;
use okstra::render::shell_word;
use okstra::schema::SchemaKind;
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct InitArgs {
    /// The project to start a run in (its directory's name becomes the
    /// task key); what init writes goes there.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
    /// A worker for this provider; repeat for more. Default: one for each
    /// agent CLI (claude, codex, gemini) on PATH and logged in, as doctor
    /// checks them; with none, one `command` worker that needs no agent.
    #[arg(
        long = "provider",
        value_name = "P",
        value_parser = clap::builder::PossibleValuesParser::new(Provider::ALL.map(Provider::as_str))
            .try_map(|s| s.parse::<Provider>())
    )]
    pub providers: Vec<Provider>,
    /// Print what was written and the next commands as text, or as one JSON
    /// document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// Where init puts things, relative to the project root.
const SPEC: &str = "okstra.toml";
const MANIFEST: &str = ".okstra/run/run-manifest.json";
const TEAM_STATE: &str = ".okstra/run/team-state.json";
const PLAN: &str = ".okstra/run/plan.json";
const GITIGNORE: &str = ".okstra/.gitignore";
/// The spec's `#:schema` target, relative to the spec (the project root).
const JOBS_SCHEMA: &str = ".okstra/schemas/jobs.schema.json";
const MANIFEST_SCHEMA: &str = ".okstra/schemas/manifest.schema.json";

/// A worker init writes.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Worker {
    id: String,
    provider: Provider,
}

impl Worker {
    fn prompt(&self) -> String {
        format!(".okstra/prompts/{}.md", self.id)
    }
    fn result(&self) -> String {
        format!(".okstra/results/{}.md", self.id)
    }
}

/// One worker per provider, named for it; a provider named again gets
/// `-2`, `-3`, ... (two workers of one provider, each with its own files).
fn workers(providers: &[Provider]) -> Vec<Worker> {
    let mut out: Vec<Worker> = Vec::new();
    for &provider in providers {
        let n = out.iter().filter(|w| w.provider == provider).count();
        let id = match n {
            0 => provider.as_str().to_string(),
            n => format!("{}-{}", provider.as_str(), n + 1),
        };
        out.push(Worker { id, provider });
    }
    out
}

/// The task key of a project whose directory is called `name`. The
/// manifest schema takes any string, but the key also names files (and,
/// with worktrees, git branches), so it keeps to ASCII letters, digits, `_` and
/// `-`: every other run of characters becomes one `-`, none at either end,
/// at most 64 characters; `run` when nothing is left.
fn task_key(name: &str) -> String {
    let mut key = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            key.push(c);
        } else if !key.is_empty() && !key.ends_with('-') {
            key.push('-');
        }
    }
    key.truncate(64);
    let key = key.trim_end_matches('-');
    if key.is_empty() {
        "run".to_string()
    } else {
        key.to_string()
    }
}

/// `s` as a TOML basic string.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// The job spec: commented, so that a person new to okstra knows what each
/// key does and what to change next.
fn spec_text(key: &str, workers: &[Worker]) -> String {
    let names: Vec<&str> = workers.iter().map(|w| w.id.as_str()).collect();
    let mut out = format!(
        "#:schema {JOBS_SCHEMA}
# The job spec of run `{key}`, written by `okstra init`: the workers okstra
# runs ({names}). Editors that follow the line above (VS Code or Zed with
# Even Better TOML / taplo) check every key against okstra's schema and
# show its documentation on hover. Every path is relative to the project
# root, the directory of this file.
#
# Next, from the project root:
#   1. Edit each worker's prompt (.okstra/prompts/), and this file.
#   2. okstra plan {SPEC} --manifest {MANIFEST} --out {PLAN}
#      checks everything, writes a frozen plan and prints it for review.
#   3. okstra exec {PLAN}
#      runs it; after Ctrl-C or a crash, the same command continues the run.
#   okstra status --manifest {MANIFEST} shows the run;
#   okstra doctor {SPEC} --manifest {MANIFEST} checks what it needs.

# What every worker gets, unless its own table says otherwise.
[defaults]
# What the workers are for; it decides what they may write (hover `role`
# for the choices). An analyst may write only its own result files: to let
# a worker change the project, make it role = \"implementer\" and list what
# it may change, e.g. plannedPaths = [\"src/**\"]. Any other change is a
# violation the audit reports.
role = \"analyst\"
# Stop a worker whose log has not grown for this many seconds (status
# `timeout`); agents can think quietly for a while.
idleTimeoutSeconds = 600
# Stop a worker that has run this long, silent or not.
# timeoutSeconds = 3600

# One [[workers]] table per worker: they run at the same time, as one stage.
# For steps in order, use [[stages]] tables instead, each with a `name` and
# its own [[stages.workers]] tables.
",
        names = names.join(", ")
    );
    for w in workers {
        out.push('\n');
        out.push_str(&worker_table(w));
    }
    out
}

/// One `[[workers]]` table, commented for its provider.
fn worker_table(w: &Worker) -> String {
    let mut out = format!(
        "[[workers]]
# The worker's name: its row in the run's state, and how okstra shows it.
workerId = {id}
# What runs it: claude, codex, gemini (their CLIs), or command (a program).
provider = {provider}
# Its prompt, given on its stdin: write the task there.
promptPath = {prompt}
# The file it must write: an attempt completes only once it wrote this
# file (the prompt tells the worker where it is).
resultPath = {result}
",
        id = toml_str(&w.id),
        provider = toml_str(w.provider.as_str()),
        prompt = toml_str(&w.prompt()),
        result = toml_str(&w.result()),
    );
    out.push_str(match w.provider {
        Provider::Claude => "# The model claude is given (--model); without it, claude's default.
# modelExecutionValue = \"sonnet\"
# claude edits files without asking (acceptEdits, the default); `plan`
# changes nothing.
# permissionMode = \"acceptEdits\"
",
        Provider::Codex => "# The model codex is given (--model); without it, codex's default.
# modelExecutionValue = \"gpt-5-codex\"
# codex's own sandbox (workspace-write, the default; read-only changes nothing).
# sandboxMode = \"workspace-write\"
",
        Provider::Gemini => "# The model gemini is given (--model); without it, gemini's default.
# modelExecutionValue = \"gemini-2.5-pro\"
# gemini edits files without asking (auto_edit, the default).
# approvalMode = \"auto_edit\"
",
        // A harmless stand-in for an agent, so a first run completes on any
        // machine: it writes the prompt it read into its result.
        Provider::Command => "# The program and its arguments (no shell, unless you run one). This one
# stands in for an agent: it writes the prompt it reads into its result.
# Replace it with your own program, or this worker with an agent
# (provider = \"claude\", and no command).
command = [\"sh\", \"-c\", 'mkdir -p \"$(dirname \"$OKSTRA_RESULT_PATH\")\" && { printf \"# %s, attempt %s\\n\\n\" \"$OKSTRA_WORKER_KEY\" \"$OKSTRA_ATTEMPT\"; cat; } > \"$OKSTRA_RESULT_PATH\"']
",
    });
    out
}

/// The run manifest: the task key and where the run's state goes.
fn manifest_text(key: &str) -> String {
    let doc = json!({
        "$schema": "../schemas/manifest.schema.json",
        "taskKey": key,
        "teamStatePath": TEAM_STATE,
        "terminalBackend": "cli-wrapper",
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// A first prompt: a task that changes nothing, and where to write.
fn prompt_text(w: &Worker) -> String {
    let note = format!(
        "<!-- The prompt of worker `{id}`, written by `okstra init`: okstra gives it to
the worker on its stdin. Replace the task with yours; keep the Result
Path line, or change it together with `resultPath` in okstra.toml. -->",
        id = w.id
    );
    let task = match w.provider {
        Provider::Command => "# Hello from okstra

This worker's program writes the prompt it reads (this file) into its
result, so a whole run can be seen working before any agent is involved.
Once it does, give the run an agent worker (okstra.toml says how)."
            .to_string(),
        _ => "# A first task: get to know this project

Read this project (its README and the files at its top level) and write,
in at most ten lines of Markdown: what it is, how it is built and tested,
and one thing a newcomer would find confusing. Change no other file."
            .to_string(),
    };
    format!(
        "{note}\n\n{task}\n\nWrite your answer to this file, creating its directory if needed; the\nrun counts as done only once it exists:\n\n**Result Path:** {}\n",
        w.result()
    )
}

/// What a run leaves under `.okstra/` that is not worth committing; the
/// manifest, spec schema and prompts stay. `worktrees/` holds the git
/// worktrees of `worktree = "git"` workers (docs/worktrees.md#planning):
/// their work is on their branches.
const GITIGNORE_TEXT: &str =
    "# Written by `okstra init`: the run's state, logs, results and worktrees stay out of git.
/run/*
!/run/run-manifest.json
/results/
/prompts/*.log
/prompts/*.status.json
/worktrees/
";

/// A file init writes: where (relative to the project root), its text,
/// and what it is, for the report.
struct Target {
    rel: String,
    text: String,
    what: String,
}

fn targets(key: &str, workers: &[Worker]) -> Vec<Target> {
    let target = |rel: &str, text: String, what: String| Target {
        rel: rel.to_string(),
        text,
        what,
    };
    let names: Vec<&str> = workers.iter().map(|w| w.id.as_str()).collect();
    let mut out = vec![target(
        SPEC,
        spec_text(key, workers),
        format!("the job spec ({}): edit it, then plan it", names.join(", ")),
    )];
    for w in workers {
        out.push(target(
            &w.prompt(),
            prompt_text(w),
            format!("the prompt of `{}`: write your task there", w.id),
        ));
    }
    out.push(target(
        MANIFEST,
        manifest_text(key),
        format!("the run manifest: task key `{key}`, the run's state under .okstra/run/"),
    ));
    out.push(target(
        JOBS_SCHEMA,
        SchemaKind::Jobs.text().to_string(),
        "the spec's schema, named by its `#:schema` line, for editors".to_string(),
    ));
    out.push(target(
        MANIFEST_SCHEMA,
        SchemaKind::Manifest.text().to_string(),
        "the manifest's schema, named by its `$schema`".to_string(),
    ));
    out.push(target(
        GITIGNORE,
        GITIGNORE_TEXT.to_string(),
        "keeps the run's state, logs and results out of git".to_string(),
    ));
    out
}

/// Why `rel` cannot be written without touching what exists: the file is
/// there (a symlink too, even a dangling one), or a directory on its way
/// is a file or a symlink. `None`: nothing is in the way.
fn in_the_way(root: &Path, rel: &str) -> Option<(String, String)> {
    let mut at = PathBuf::new();
    let parts: Vec<&str> = rel.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let shown = at.display().to_string();
        let last = i + 1 == parts.len();
        match root.join(&at).symlink_metadata() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return Some((shown, format!("cannot be looked at: {e}"))),
            Ok(_) if last => return Some((shown, "exists already".to_string())),
            Ok(m) if m.file_type().is_symlink() => {
                return Some((
                    shown,
                    "is a symlink, which okstra never writes through".into(),
                ))
            }
            Ok(m) if !m.is_dir() => return Some((shown, "exists, and is not a directory".into())),
            Ok(_) => {}
        }
    }
    None
}

/// Every target in the way, each named once: nothing is written then.
fn refusals(root: &Path, targets: &[Target]) -> Diagnostics {
    let mut seen = Vec::new();
    let mut diags = Diagnostics::default();
    for t in targets {
        let Some((path, why)) = in_the_way(root, &t.rel) else {
            continue;
        };
        if seen.contains(&path) {
            continue;
        }
        diags.push(
            Diagnostic::new(
                Code::InputExists,
                format!("{path} {why} (in {})", root.display()),
            )
            .in_file(path.clone())
            .help("okstra init never overwrites a file, and wrote nothing: move it away, or run init in another project"),
        );
        seen.push(path);
    }
    diags
}

/// Write every target, each whole and only where nothing is; on a failure
/// the ones written are removed again.
fn write_all(root: &Path, targets: &[Target]) -> Result<(), Diagnostic> {
    let unwritable = |rel: &str, e: &dyn std::fmt::Display| {
        Diagnostic::new(Code::OutputUnwritable, format!("cannot write {rel}: {e}"))
            .in_file(rel.to_string())
            .help("make the project root writable; init removed what it had written")
    };
    let own = Beneath::open(root).map_err(|e| unwritable(".", &e))?;
    for (i, t) in targets.iter().enumerate() {
        if let Err(e) = own.create_atomic(Path::new(&t.rel), t.text.as_bytes()) {
            for done in &targets[..i] {
                let _ = own.remove_file(Path::new(&done.rel));
            }
            return Err(unwritable(&t.rel, &e));
        }
    }
    Ok(())
}

/// The commands that plan and run what init wrote, as typed in the current
/// directory: paths below `prefix` (the project root as given) with
/// `--project-root`, or as they are where the root is here.
fn next_commands(prefix: Option<&Path>) -> Vec<Vec<String>> {
    let at = |rel: &str| prefix.map_or(rel.to_string(), |p| p.join(rel).display().to_string());
    let mut plan: Vec<String> = vec!["okstra".into(), "plan".into(), at(SPEC)];
    plan.extend(["--manifest".into(), at(MANIFEST)]);
    if let Some(p) = prefix {
        plan.extend(["--project-root".into(), p.display().to_string()]);
    }
    plan.extend(["--out".into(), at(PLAN)]);
    vec![plan, vec!["okstra".into(), "exec".into(), at(PLAN)]]
}

/// What was found of each agent CLI looked at: how it is ready, or why not.
type Found = Vec<(Provider, Result<String, String>)>;

/// The workers, and what was found of each agent CLI: with `--provider`,
/// those named (their CLIs checked, to warn); else every ready agent CLI,
/// or one `command` worker where none is.
fn choose(asked: &[Provider], root: &Path) -> (Vec<Worker>, Found) {
    let agents = Provider::ALL.into_iter().filter(|p| p.is_agent());
    let found: Found = agents
        .filter(|p| asked.is_empty() || asked.contains(p))
        .map(|p| (p, doctor::ready(p, root)))
        .collect();
    let chosen: Vec<Provider> = if !asked.is_empty() {
        asked.to_vec()
    } else {
        let ready: Vec<Provider> = found
            .iter()
            .filter(|(_, r)| r.is_ok())
            .map(|(p, _)| *p)
            .collect();
        if ready.is_empty() {
            vec![Provider::Command]
        } else {
            ready
        }
    };
    (workers(&chosen), found)
}

/// A run init started: what it wrote, and what comes next.
struct Started {
    root: PathBuf,
    key: String,
    targets: Vec<Target>,
    workers: Vec<Worker>,
    found: Found,
    /// Whether the workers were chosen by init (no `--provider`).
    defaulted: bool,
    next: Vec<Vec<String>>,
}

pub fn init(args: &InitArgs) -> Ended {
    let root = paths::canonical_root(&args.project_root);
    if !root.is_dir() {
        let d = Diagnostic::new(
            Code::InputMissing,
            format!(
                "the project root {} does not exist, or is not a directory",
                root.display()
            ),
        )
        .help("create it first, or pass --project-root the project's directory");
        return Ok(report(&Diagnostics::from(d), args.format));
    }
    let name = root.file_name().map(|n| n.to_string_lossy());
    let key = task_key(&name.unwrap_or_default());
    let (workers, found) = choose(&args.providers, &root);
    let targets = targets(&key, &workers);
    let refused = refusals(&root, &targets);
    if !refused.is_empty() {
        return Ok(report(&refused, args.format));
    }
    if let Err(d) = write_all(&root, &targets) {
        return Ok(report(&Diagnostics::from(d), args.format));
    }
    // The commands name the root only where it is not here.
    let here = std::env::current_dir().and_then(|d| d.canonicalize()).ok();
    let prefix = (here.as_deref() != Some(root.as_path())).then_some(args.project_root.as_path());
    let started = Started {
        next: next_commands(prefix),
        root,
        key,
        targets,
        workers,
        found,
        defaulted: args.providers.is_empty(),
    };
    match args.format {
        Format::Text => out!("{}", started.text())?,
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&started.json()).unwrap_or_default()
        )?,
    }
    Ok(ExitStatus::Success)
}

impl Started {
    /// What init says it did, and what to do next.
    fn text(&self) -> String {
        let mut out = format!("Started run `{}` in {}:\n", self.key, self.root.display());
        let width = self.targets.iter().map(|t| t.rel.len()).max().unwrap_or(0);
        for t in &self.targets {
            out.push_str(&format!("  {:<width$}  {}\n", t.rel, t.what));
        }
        if !self.found.is_empty() {
            out.push_str("\nAgent CLIs:\n");
        }
        for (p, r) in &self.found {
            let used = self.workers.iter().any(|w| w.provider == *p);
            let line = match (r, used) {
                (Ok(how), true) => format!("a worker: {how}"),
                (Ok(how), false) => format!("ready, not asked for: {how}"),
                (Err(why), true) => format!(
                    "a worker, but not ready: {why} (exec fails until it is; `okstra doctor` says how)"
                ),
                (Err(why), false) => format!("no worker: {why}"),
            };
            out.push_str(&format!("  {:<7} {line}\n", p.as_str()));
        }
        if self.defaulted && self.workers.iter().all(|w| w.provider == Provider::Command) {
            out.push_str("\nNo agent CLI is ready, so the spec has one `command` worker, which runs\nwithout one. Once an agent CLI is installed and logged in, give it a\nworker in okstra.toml (provider = \"claude\", say).\n");
        }
        out.push_str(
            "\nNext: edit the prompts, then plan the run (and review the plan), then run it:\n",
        );
        for argv in &self.next {
            let words: Vec<String> = argv.iter().map(|w| shell_word(w)).collect();
            out.push_str(&format!("  {}\n", words.join(" ")));
        }
        out
    }

    /// `okstra init --format json`.
    fn json(&self) -> serde_json::Value {
        json!({
            "ok": true,
            "projectRoot": self.root.display().to_string(),
            "taskKey": self.key,
            "wrote": self.targets.iter().map(|t| &t.rel).collect::<Vec<_>>(),
            "workers": self.workers.iter().map(|w| json!({"workerId": w.id, "provider": w.provider})).collect::<Vec<_>>(),
            "agents": self.found.iter().map(|(p, r)| match r {
                Ok(how) => json!({"provider": p, "ready": true, "detail": how}),
                Err(why) => json!({"provider": p, "ready": false, "detail": why}),
            }).collect::<Vec<_>>(),
            "next": self.next,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_key_keeps_to_letters_digits_dash_and_underscore() {
        for (name, key) in [
            ("my-project", "my-project"),
            ("My_App2", "My_App2"),
            ("my project (copy)", "my-project-copy"),
            ("app.v2..final", "app-v2-final"),
            ("..hidden", "hidden"),
            ("-x-", "x"),
            ("café", "caf"),
            ("名前", "run"),
            ("", "run"),
        ] {
            assert_eq!(task_key(name), key, "{name}");
        }
        let long = "a".repeat(100);
        assert_eq!(task_key(&long).len(), 64);
        // Cut at 64 where a dash fell: no dash at the end.
        let cut = format!("{}-b", "a".repeat(63));
        assert_eq!(task_key(&cut), "a".repeat(63));
    }

    #[test]
    fn workers_are_named_for_their_providers() {
        let ws = workers(&[Provider::Claude, Provider::Command, Provider::Claude]);
        let ids: Vec<&str> = ws.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids, ["claude", "command", "claude-2"]);
        assert_eq!(ws[2].prompt(), ".okstra/prompts/claude-2.md");
        assert_eq!(ws[2].result(), ".okstra/results/claude-2.md");
    }

    /// The spec is TOML whose first line is the schema directive, and its
    /// workers are what the schema accepts and okstra plans.
    #[test]
    fn the_spec_names_its_schema_first_and_is_valid() {
        let ws = workers(&[
            Provider::Claude,
            Provider::Codex,
            Provider::Gemini,
            Provider::Command,
        ]);
        let text = spec_text("k", &ws);
        assert_eq!(
            text.lines().next(),
            Some("#:schema .okstra/schemas/jobs.schema.json")
        );
        let doc: toml::Table = text.parse().unwrap();
        let value = serde_json::to_value(&doc).unwrap();
        let errors = okstra::schema::validate(SchemaKind::Jobs, &value);
        assert!(errors.is_empty(), "{errors:?}");
        let entries = value["workers"].as_array().unwrap();
        assert_eq!(entries.len(), 4);
        for (entry, w) in entries.iter().zip(&ws) {
            assert_eq!(entry["workerId"], w.id.as_str());
            assert_eq!(entry["provider"], w.provider.as_str());
            assert_eq!(entry["promptPath"], w.prompt().as_str());
            assert_eq!(entry["resultPath"], w.result().as_str());
        }
        // Only the command worker has a command; its shell line survives TOML.
        assert!(entries[..3].iter().all(|e| e.get("command").is_none()));
        let argv = entries[3]["command"].as_array().unwrap();
        assert_eq!(argv[..2], [json!("sh"), json!("-c")]);
        assert!(argv[2]
            .as_str()
            .unwrap()
            .contains("> \"$OKSTRA_RESULT_PATH\""));
        // Every key set is explained by a comment line just above it.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !line.starts_with('#') && !line.starts_with('[') && line.contains(" = ") {
                assert!(lines[i - 1].starts_with('#'), "{line} has no comment");
            }
        }
    }

    #[test]
    fn each_prompt_names_its_result_path() {
        for w in workers(&[Provider::Claude, Provider::Command]) {
            let text = prompt_text(&w);
            let named: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("**Result Path:** "))
                .collect();
            assert_eq!(named, [w.result().as_str()], "{text}");
        }
    }

    #[test]
    fn the_manifest_is_valid_and_keeps_state_under_okstra() {
        let doc: serde_json::Value = serde_json::from_str(&manifest_text("my-app")).unwrap();
        assert!(okstra::schema::validate(SchemaKind::Manifest, &doc).is_empty());
        assert_eq!(doc["taskKey"], "my-app");
        assert_eq!(doc["teamStatePath"], ".okstra/run/team-state.json");
        // `$schema` is relative to the manifest, as editors resolve it.
        assert_eq!(
            Path::new(MANIFEST)
                .parent()
                .unwrap()
                .join(doc["$schema"].as_str().unwrap()),
            Path::new(".okstra/run/../schemas/manifest.schema.json")
        );
    }

    #[test]
    fn the_next_commands_name_the_root_only_where_it_is_elsewhere() {
        let here = next_commands(None);
        assert_eq!(
            here[0],
            [
                "okstra",
                "plan",
                "okstra.toml",
                "--manifest",
                ".okstra/run/run-manifest.json",
                "--out",
                ".okstra/run/plan.json"
            ]
        );
        assert_eq!(here[1], ["okstra", "exec", ".okstra/run/plan.json"]);
        let there = next_commands(Some(Path::new("../app")));
        assert_eq!(
            there[0],
            [
                "okstra",
                "plan",
                "../app/okstra.toml",
                "--manifest",
                "../app/.okstra/run/run-manifest.json",
                "--project-root",
                "../app",
                "--out",
                "../app/.okstra/run/plan.json"
            ]
        );
        assert_eq!(there[1], ["okstra", "exec", "../app/.okstra/run/plan.json"]);
    }

    #[test]
    fn what_is_in_the_way_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(in_the_way(root, ".okstra/run/run-manifest.json"), None);
        std::fs::write(root.join(".okstra"), "").unwrap();
        assert_eq!(
            in_the_way(root, ".okstra/run/run-manifest.json"),
            Some((".okstra".into(), "exists, and is not a directory".into()))
        );
        std::fs::remove_file(root.join(".okstra")).unwrap();
        std::os::unix::fs::symlink("/nowhere", root.join("okstra.toml")).unwrap();
        assert_eq!(
            in_the_way(root, "okstra.toml"),
            Some(("okstra.toml".into(), "exists already".into()))
        );
        std::fs::create_dir(root.join("real")).unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join(".okstra")).unwrap();
        assert_eq!(
            in_the_way(root, ".okstra/run/run-manifest.json").map(|(p, _)| p),
            Some(".okstra".into())
        );
    }
}
