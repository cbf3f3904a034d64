//! `okstra doctor`: check what a run needs before planning or executing it,
//! and say how to fix each miss. Given a plan or a job spec (planned in
//! memory, as `okstra plan` plans it), exactly the providers, backends and
//! confinement its jobs use. Reads only; never writes, but for the file a
//! Slurm probe job writes under the project root, which it removes.

mod machine;
mod providers;
mod run;
mod slurm;
mod target;

/// Whether an agent CLI is ready for a worker (`okstra init`).
pub(super) use providers::ready;

use super::{Cut, Ended};
use okstra::diag::{Diagnostics, ExitStatus, Format};
use okstra::paths;
use okstra::plan::Plan;
use okstra::provider::Provider;
use serde::Serialize;
use serde_json::json;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// A plan (`okstra plan --out`) or a job spec (TOML or JSON, planned in
    /// memory against --manifest, writing nothing), told apart by content:
    /// check exactly the providers, logins, backends (pane, Slurm) and
    /// confinement its jobs use.
    #[arg(value_name = "PLAN|SPEC")]
    pub target: Option<PathBuf>,
    /// The run manifest to check (with its team-state, lock and run
    /// directory); with a plan, the plan's manifest by default; with a
    /// spec, required.
    #[arg(long, value_name = "M")]
    pub manifest: Option<PathBuf>,
    /// The project root the manifest's and a spec's paths are relative to.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
    /// Print the checks as text, or as one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// How long `<cli> --version` may take: some CLIs start a runtime first.
pub(crate) const VERSION_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    /// Worth knowing, not a reason to fail (a CLI no job of the run uses).
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Level,
    pub detail: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

fn check(name: impl Into<String>, status: Level, detail: impl Into<String>, fix: &str) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: fix.to_string(),
    }
}

/// The first executable named `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    okstra::process::find_program(name, &std::env::var_os("PATH")?).ok()
}

/// `<program> --version`, first line of its output, within `timeout`.
pub fn version_of(program: &Path, timeout: Duration) -> Result<String, String> {
    let mut child = Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`--version` did not answer within {}s",
                    timeout.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = if out.stdout.iter().any(|b| !b.is_ascii_whitespace()) {
        out.stdout
    } else {
        out.stderr
    };
    let line = String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("")
        .to_string();
    if !out.status.success() {
        return Err(format!("`--version` exited {}: {line}", out.status));
    }
    Ok(if line.is_empty() {
        "(no version printed)".into()
    } else {
        line
    })
}

/// Check what a run needs, in this order: okstra's own schemas, the target
/// (a plan, or a spec planned in memory), the run's manifest and its
/// state, then the machine, backends and providers the jobs use.
pub fn doctor(args: &DoctorArgs) -> Ended {
    let mut root = paths::canonical_root(&args.project_root);
    let mut manifest = args.manifest.as_deref().map(absolute);
    let mut checks = vec![machine::schemas()];
    let mut errors = Diagnostics::default();
    let mut plan = None;
    if let Some(path) = &args.target {
        let (check, read) = target_check(path, manifest.as_deref(), &root);
        checks.push(check);
        match read {
            // A plan says where its project is and which manifest it was
            // planned against (where --manifest does not say otherwise).
            Ok((target::Kind::Plan, p)) => {
                root = PathBuf::from(&p.project_root);
                manifest.get_or_insert_with(|| paths::abs_of(&root, &p.run.manifest_path));
                plan = Some(p);
            }
            Ok((target::Kind::Spec, p)) => plan = Some(p),
            Err(diags) => errors.extend(diags),
        }
    }
    let mut named = None;
    if let Some(path) = &manifest {
        let (c, n) = run::checks(&root, path);
        checks.extend(c);
        named = n;
    }
    checks.extend(used_checks(plan.as_ref(), named.as_deref(), &root));
    let failed = checks.iter().filter(|c| c.status == Level::Fail).count();
    report(args, &checks, &errors, failed)?;
    Ok(if failed == 0 {
        ExitStatus::Success
    } else {
        ExitStatus::InvalidInput
    })
}

/// `path` as given, taken from the current directory if relative.
fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    }
}

/// The target's check, with what it is and the plan it is or plans to; or
/// the problems that stand in the way.
fn target_check(
    path: &Path,
    manifest: Option<&Path>,
    root: &Path,
) -> (Check, Result<(target::Kind, Plan), Diagnostics>) {
    let shown = path.display().to_string();
    let kind = match target::classify(path) {
        Ok(kind) => kind,
        Err(d) => {
            let d = paths::name_root(d, root, paths::Base::CurrentDir);
            let diags = Diagnostics::from(d);
            return (unread_check(format!("target {shown}"), &diags), Err(diags));
        }
    };
    let name = format!("{} {shown}", kind.word());
    match target::plan_of(path, kind, manifest, root) {
        Ok(p) => {
            let planned = planned_check(name, kind, p.jobs().count(), p.stages.len());
            (planned, Ok((kind, p)))
        }
        Err(diags) => (unread_check(name, &diags), Err(diags)),
    }
}

/// A target that is a plan, or plans to one, with its size.
fn planned_check(name: String, kind: target::Kind, jobs: usize, stages: usize) -> Check {
    let how = match kind {
        target::Kind::Spec => "plans in memory",
        target::Kind::Plan => "format and digest intact",
    };
    check(
        name,
        Level::Ok,
        format!(
            "{how}: {} in {}",
            plural(jobs, "job"),
            plural(stages, "stage")
        ),
        "",
    )
}

/// A target that neither is a plan nor plans to one: its first problem
/// (the report lists every one below the checks), with that problem's help
/// where it is the only one.
fn unread_check(name: String, diags: &Diagnostics) -> Check {
    let first = diags.iter().next();
    check(
        name,
        Level::Fail,
        format!(
            "{}{}",
            first.map_or(String::new(), |d| format!("[{}] {}", d.code, d.message)),
            match diags.len() {
                0 | 1 => String::new(),
                n => format!(" (and {} more, listed below)", n - 1),
            }
        ),
        &match (diags.len(), first.and_then(|d| d.help.as_deref())) {
            (1, Some(help)) => help.to_string(),
            _ => "fix what the errors say; `okstra validate FILE` shows each with its line"
                .to_string(),
        },
    )
}

/// The machine, backends and providers: exactly what a plan's jobs use;
/// without one, confinement and the providers the run names (or, with no
/// run either, every provider).
fn used_checks(plan: Option<&Plan>, named: Option<&[Provider]>, root: &Path) -> Vec<Check> {
    let Some(p) = plan else {
        let need = match named {
            Some(n) => providers::Need::Run(n),
            None => providers::Need::Any,
        };
        let mut out = vec![machine::confinement(), machine::network()];
        out.extend(providers::checks(&need, root));
        return out;
    };
    let mut out = vec![machine::confinement_for(p)];
    out.extend(machine::network_for(p));
    out.extend(machine::reads_for(p));
    out.extend(machine::pane_for(p));
    out.extend(machine::git_for(p, root));
    out.extend(slurm::checks(p, root));
    out.extend(providers::checks(&providers::Need::Plan(p), root));
    out
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn report(
    args: &DoctorArgs,
    checks: &[Check],
    errors: &Diagnostics,
    failed: usize,
) -> Result<(), Cut> {
    match args.format {
        Format::Json => {
            let mut doc = json!({"ok": failed == 0, "checks": checks});
            if !errors.is_empty() {
                doc["errors"] = errors.to_json()["errors"].clone();
            }
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default())?
        }
        Format::Text => {
            for c in checks {
                let tag = match c.status {
                    Level::Ok => "ok  ",
                    Level::Warn => "warn",
                    Level::Fail => "FAIL",
                };
                outln!("{tag}  {}: {}", c.name, c.detail)?;
                if c.status != Level::Ok && !c.fix.is_empty() {
                    outln!("      fix: {}", c.fix)?;
                }
            }
            if !errors.is_empty() {
                let mut err = std::io::stderr().lock();
                for d in errors.iter() {
                    let _ = writeln!(err, "{}", d.render_styled(crate::cli::stderr_color()));
                }
            }
            if args.manifest.is_none() && args.target.is_none() {
                outln!("      (pass a PLAN or SPEC, or --manifest M, to check what a run needs: its manifest, team-state, lock, run directory, backends and logins)")?;
            }
            if failed == 0 {
                outln!("all is well")?;
            } else {
                outln!(
                    "{failed} problem{} found",
                    if failed == 1 { "" } else { "s" }
                )?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_that_plans_says_how_it_was_read_and_how_big_it_is() {
        let spec = planned_check("spec s".into(), target::Kind::Spec, 1, 1);
        assert_eq!(
            (spec.status, spec.detail.as_str()),
            (Level::Ok, "plans in memory: 1 job in 1 stage")
        );
        let plan = planned_check("plan p".into(), target::Kind::Plan, 13, 2);
        assert_eq!(plan.detail, "format and digest intact: 13 jobs in 2 stages");
    }

    #[test]
    fn a_target_that_does_not_plan_shows_its_first_problem_and_its_help_only_alone() {
        use okstra::diag::{Code, Diagnostic};
        let missing = || Diagnostic::new(Code::InputMissing, "`p.md` does not exist");
        let general = "fix what the errors say; `okstra validate FILE` shows each with its line";
        let one = unread_check("spec s".into(), &missing().help("create it").into());
        assert_eq!(one.status, Level::Fail);
        assert_eq!(
            (one.detail.as_str(), one.fix.as_str()),
            ("[input/missing] `p.md` does not exist", "create it")
        );
        let three = vec![missing().help("create it"), missing(), missing()];
        let many = unread_check("spec s".into(), &three.into());
        assert_eq!(
            many.detail,
            "[input/missing] `p.md` does not exist (and 2 more, listed below)"
        );
        assert_eq!(many.fix, general);
        // The near miss: one problem, but without help of its own.
        assert_eq!(
            unread_check("spec s".into(), &missing().into()).fix,
            general
        );
    }

    #[test]
    fn version_times_out_and_reads_the_first_line() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let p = dir.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let good = write("good", "echo 'tool 1.2.3'; echo more");
        assert_eq!(
            version_of(&good, Duration::from_secs(5)).unwrap(),
            "tool 1.2.3"
        );
        let slow = write("slow", "exec sleep 30");
        assert!(version_of(&slow, Duration::from_millis(200))
            .unwrap_err()
            .contains("did not answer"));
        let bad = write("bad", "echo broken >&2; exit 3");
        assert!(version_of(&bad, Duration::from_secs(5))
            .unwrap_err()
            .contains("broken"));
    }
}
