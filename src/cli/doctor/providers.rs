//! The agent CLIs a run needs: each on PATH and answering `--version`,
//! and logged in, as far as that can be told without the network
//! (`okstra::provider::login`).

use super::{check, version_of, which, Check, Level, VERSION_TIMEOUT};
use okstra::plan::{Job, Plan};
use okstra::provider::login::{Login, Where};
use okstra::provider::{state, Provider};
use std::path::Path;

/// Which CLIs the checks are for.
pub enum Need<'a> {
    /// Nothing says: every CLI, a miss only a warning.
    Any,
    /// What a run's manifest and team-state name: a miss of these fails,
    /// of the others it warns.
    Run(&'a [Provider]),
    /// Exactly the CLIs a plan's jobs use, each login judged in the
    /// environment and with the argv of every job that uses it.
    Plan(&'a Plan),
}

/// A variable of okstra's own environment, which every worker inherits.
fn own_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn checks(need: &Need, root: &Path) -> Vec<Check> {
    let mut out = Vec::new();
    for provider in Provider::ALL {
        let Some(program) = provider.program() else {
            continue;
        };
        let (in_scope, required) = match need {
            Need::Any => (true, false),
            Need::Run(named) => (true, named.contains(&provider)),
            Need::Plan(plan) => {
                let used = plan.jobs().any(|j| j.provider == provider);
                (used, used)
            }
        };
        if !in_scope {
            continue;
        }
        let miss = if required { Level::Fail } else { Level::Warn };
        let cli = program.name;
        let unused = matches!(need, Need::Run(_)) && !required;
        out.push(match which(cli) {
            None if unused => check(
                format!("provider {cli}"),
                miss,
                format!("`{cli}` is not on PATH (the run's manifest and team-state name no {cli} job; give doctor the plan or spec to check exactly what it uses)"),
                program.install,
            ),
            None => check(format!("provider {cli}"), miss, format!("`{cli}` is not on PATH"), program.install),
            Some(path) => match version_of(&path, VERSION_TIMEOUT) {
                Ok(v) => check(format!("provider {cli}"), Level::Ok, format!("{} ({v})", path.display()), ""),
                Err(e) => check(
                    format!("provider {cli}"),
                    miss,
                    format!("{}: {e}", path.display()),
                    "run it by hand with --version to see what is wrong; reinstall it if it does not start",
                ),
            },
        });
        let login = match need {
            Need::Plan(plan) => plan_login(plan, provider, root),
            _ => provider.login(&Where {
                var: &own_var,
                project_root: root,
                argv: &[],
            }),
        };
        if let Some(login) = login {
            out.push(login_check(cli, login, miss));
        }
        out.extend(state_check(provider, cli, miss));
    }
    out
}

/// Whether each attempt's private state can be seeded from the user's
/// (docs/confinement.md#provider-state): seeded once here, into a temporary
/// directory, as the wrapper will; a seed it cannot copy refuses every
/// attempt of the CLI.
fn state_check(provider: Provider, cli: &str, miss: Level) -> Option<Check> {
    let layout = provider.private_state()?;
    let name = format!("state {cli}");
    let tried = tempfile::tempdir()
        .and_then(|dir| state::Private::seed(dir.path(), provider, &layout).map(|p| (p, dir)));
    Some(match tried {
        Ok((private, _dir)) => {
            let seeded: Vec<&str> = private.seeded().collect();
            let what = if seeded.is_empty() {
                "nothing of the user's to seed".to_string()
            } else {
                format!("seeded with {}", seeded.join(", "))
            };
            check(
                name,
                Level::Ok,
                format!("private per attempt ({}): {what}", private.env().0),
                "",
            )
        }
        Err(e) => check(
            name,
            miss,
            format!("each attempt's private state cannot be seeded: {e}"),
            "make the file readable, or move it away: exec would refuse every attempt of this CLI (confinement-failed)",
        ),
    })
}

/// Whether `provider`'s CLI is ready to run a worker here, as doctor checks
/// it: on PATH, answering `--version`, and logged in (for `okstra init`,
/// which gives a worker to each ready CLI). What was found, or why not.
pub fn ready(provider: Provider, root: &Path) -> Result<String, String> {
    let Some(program) = provider.program() else {
        return Ok("needs no CLI".into());
    };
    let cli = program.name;
    let path = which(cli).ok_or_else(|| format!("`{cli}` is not on PATH"))?;
    let version =
        version_of(&path, VERSION_TIMEOUT).map_err(|e| format!("{}: {e}", path.display()))?;
    let login = provider.login(&Where {
        var: &own_var,
        project_root: root,
        argv: &[],
    });
    match login {
        Some(Login::Yes(how)) => Ok(format!("{} ({version}), logged in: {how}", path.display())),
        Some(Login::No { looked, fix }) => Err(format!(
            "{} is not logged in: {looked} (to log in: {fix})",
            path.display()
        )),
        Some(Login::Unknown(why)) => Err(format!(
            "{}: whether it is logged in cannot be told here: {why}",
            path.display()
        )),
        None => Ok(format!("{} ({version})", path.display())),
    }
}

fn login_check(cli: &str, login: Login, miss: Level) -> Check {
    let name = format!("login {cli}");
    match login {
        Login::Yes(how) => check(name, Level::Ok, format!("logged in: {how}"), ""),
        Login::No { looked, fix } => check(name, miss, format!("not logged in: {looked}"), &fix),
        Login::Unknown(why) => check(
            name,
            Level::Warn,
            format!("cannot be told here: {why}"),
            "make sure the credentials it names are in place before exec",
        ),
    }
}

/// The login every job of `provider` would find, with its own `env` over
/// okstra's environment and its argv: the worst verdict, naming the jobs
/// it holds for when not all share it.
fn plan_login(plan: &Plan, provider: Provider, root: &Path) -> Option<Login> {
    let jobs: Vec<&Job> = plan.jobs().filter(|j| j.provider == provider).collect();
    let mut verdicts: Vec<(Login, Vec<&str>)> = Vec::new();
    for job in &jobs {
        let var = |name: &str| match job.env.get(name) {
            Some(v) => Some(v.clone()).filter(|v| !v.is_empty()),
            None => own_var(name),
        };
        let login = provider.login(&Where {
            var: &var,
            project_root: root,
            argv: &job.provider_command,
        })?;
        match verdicts.iter_mut().find(|(l, _)| *l == login) {
            Some((_, who)) => who.push(job.label()),
            None => verdicts.push((login, vec![job.label()])),
        }
    }
    let rank = |l: &Login| match l {
        Login::No { .. } => 0,
        Login::Unknown(_) => 1,
        Login::Yes(_) => 2,
    };
    verdicts.sort_by_key(|(l, _)| rank(l));
    let (worst, who) = verdicts.first()?.clone();
    if who.len() == jobs.len() {
        return Some(worst);
    }
    let jobs_note = format!(" (for {})", who.join(", "));
    Some(match worst {
        Login::No { looked, fix } => Login::No {
            looked: looked + &jobs_note,
            fix,
        },
        Login::Unknown(why) => Login::Unknown(why + &jobs_note),
        yes => yes,
    })
}
