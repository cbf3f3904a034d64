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

use crate::compile::paths;
use crate::diag::{Diagnostics, ExitStatus, Format};
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
    crate::process::find_program(name, &std::env::var_os("PATH")?).ok()
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

pub fn doctor(args: &DoctorArgs) -> ExitStatus {
    let mut root = paths::canonical_root(&args.project_root);
    let mut checks = vec![machine::schemas()];
    let mut errors = Diagnostics::default();
    let mut plan = None;
    let absolute = |m: &PathBuf| {
        if m.is_absolute() {
            m.clone()
        } else {
            std::env::current_dir().unwrap_or_default().join(m)
        }
    };
    let mut manifest = args.manifest.as_ref().map(absolute);
    let mut kind = None;
    if let Some(path) = &args.target {
        let shown = path.display().to_string();
        let found = target::classify(path)
            .map_err(Diagnostics::from)
            .and_then(|k| {
                kind = Some(k);
                target::plan_of(path, k, manifest.as_deref(), &root)
            });
        let word = kind.map_or("target", target::Kind::word);
        match found {
            Ok(p) => {
                if kind == Some(target::Kind::Plan) {
                    root = PathBuf::from(&p.project_root);
                    manifest.get_or_insert_with(|| paths::abs_of(&root, &p.run.manifest_path));
                }
                let how = match kind {
                    Some(target::Kind::Spec) => "plans in memory",
                    _ => "format and digest intact",
                };
                checks.push(check(
                    format!("{word} {shown}"),
                    Level::Ok,
                    format!(
                        "{how}: {} in {}",
                        plural(p.jobs().count(), "job"),
                        plural(p.stages.len(), "stage")
                    ),
                    "",
                ));
                plan = Some(p);
            }
            Err(diags) => {
                let first = diags.iter().next();
                checks.push(check(
                    format!("{word} {shown}"),
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
                        _ => "fix what the errors say; `okstra validate FILE` shows each with its line".to_string(),
                    },
                ));
                errors.extend(diags);
            }
        }
    }
    let mut named = None;
    if let Some(path) = &manifest {
        let (c, n) = run::checks(&root, path);
        checks.extend(c);
        named = n;
    }
    match &plan {
        Some(p) => {
            checks.push(machine::confinement_for(p));
            checks.extend(machine::pane_for(p));
            checks.extend(slurm::checks(p, &root));
            checks.extend(providers::checks(&providers::Need::Plan(p), &root));
        }
        None => {
            checks.push(machine::confinement());
            let need = match &named {
                Some(n) => providers::Need::Run(n),
                None => providers::Need::Any,
            };
            checks.extend(providers::checks(&need, &root));
        }
    }
    let failed = checks.iter().filter(|c| c.status == Level::Fail).count();
    report(args, &checks, &errors, failed);
    if failed == 0 {
        ExitStatus::Success
    } else {
        ExitStatus::InvalidInput
    }
}

fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn report(args: &DoctorArgs, checks: &[Check], errors: &Diagnostics, failed: usize) {
    match args.format {
        Format::Json => {
            let mut doc = json!({"ok": failed == 0, "checks": checks});
            if !errors.is_empty() {
                doc["errors"] = errors.to_json()["errors"].clone();
            }
            outln!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default())
        }
        Format::Text => {
            for c in checks {
                let tag = match c.status {
                    Level::Ok => "ok  ",
                    Level::Warn => "warn",
                    Level::Fail => "FAIL",
                };
                outln!("{tag}  {}: {}", c.name, c.detail);
                if c.status != Level::Ok && !c.fix.is_empty() {
                    outln!("      fix: {}", c.fix);
                }
            }
            if !errors.is_empty() {
                let mut err = std::io::stderr().lock();
                for d in errors.iter() {
                    let _ = writeln!(err, "{}", d.render_styled(crate::cli::stderr_color()));
                }
            }
            if args.manifest.is_none() && args.target.is_none() {
                outln!("      (pass a PLAN or SPEC, or --manifest M, to check what a run needs: its manifest, team-state, lock, run directory, backends and logins)");
            }
            if failed == 0 {
                outln!("all is well");
            } else {
                outln!(
                    "{failed} problem{} found",
                    if failed == 1 { "" } else { "s" }
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
