//! The command line: clap definitions and one small handler per command.

mod doctor;
mod exec;
mod plan;
mod validate;

pub use plan::read_plan;

use crate::diag::{Diagnostics, ExitStatus, Format};
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "okstra",
    version,
    about = "Dispatch AI coding-agent workers from a frozen, reviewable plan",
    long_about = "okstra compiles a job spec (or a run's roster) into a frozen, digested plan you can review (`okstra plan`), then runs it crash-safely (`okstra exec`)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Compile a job spec (or the manifest's roster) into plan.json and print its summary.
    Plan(plan::PlanArgs),
    /// Verify a plan and run it: progress on stderr, a summary at the end.
    Exec(exec::ExecArgs),
    /// Plan a spec to a temporary file, show it, and run it: the one-command demo.
    Run(exec::RunArgs),
    /// The run's workers and dispatches, from team-state.
    Status(exec::StatusArgs),
    /// Print a plan for review.
    Show(plan::ShowArgs),
    /// Check files against their schemas and rules, without planning.
    Validate(validate::ValidateArgs),
    /// Print or write the embedded JSON Schemas.
    Schema(validate::SchemaArgs),
    /// Check what a run needs (provider CLIs, manifest, team-state, schemas, lock, run directory) and say how to fix each miss.
    Doctor(doctor::DoctorArgs),
    #[command(about = WORKER_ABOUT)]
    Worker(crate::worker::WorkerArgs),
}

/// Options every planning command shares.
#[derive(clap::Args, Debug, Clone)]
pub struct RunTarget {
    /// The run manifest (run-manifest.json).
    #[arg(long, value_name = "M")]
    pub manifest: PathBuf,
    /// Only these workers (state keys), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "a,b")]
    pub workers: Vec<String>,
    /// The project root all input paths are relative to.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
}

/// Parse the command line, run the command, and return the exit status.
pub fn main() -> ExitStatus {
    if std::env::args_os().nth(1).is_some_and(|a| a == "worker") {
        std::process::exit(worker(&std::env::args_os().collect::<Vec<_>>()));
    }
    let cli = Cli::parse();
    if !matches!(
        cli.command,
        Command::Exec(_) | Command::Run(_) | Command::Worker(_)
    ) {
        // A report piped into `head` ends quietly, as Unix tools do. exec,
        // run and the wrapper keep SIGPIPE ignored: a closed pipe must not
        // kill a run half-way; they ignore failed writes instead.
        // SAFETY: resetting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match cli.command {
        Command::Plan(args) => plan::plan(&args),
        Command::Show(args) => plan::show(&args),
        Command::Exec(args) => exec::exec(&args),
        Command::Run(args) => exec::run(&args),
        Command::Status(args) => exec::status(&args),
        Command::Validate(args) => validate::validate(&args),
        Command::Schema(args) => validate::schema(&args),
        Command::Doctor(args) => doctor::doctor(&args),
        // `okstra worker` is normally taken by the fast path above, before
        // this parse; the variant is here for `okstra --help`.
        Command::Worker(args) => std::process::exit(crate::worker::run(&args)),
    }
}

const WORKER_ABOUT: &str = "The built-in worker wrapper (started by `okstra exec`)";

/// `okstra worker` on the whole command line `argv` (program name first):
/// the wrapper's exit code, or clap's (0 after `--help`, 2 for unusable
/// arguments, its message printed). The wrapper starts once per job, so its
/// arguments are read on their own: exec's command lines by
/// [`crate::worker::parse_canonical`], anything else by clap with only the
/// wrapper's arguments built (same arguments, help and errors as through
/// [`Cli`]). On glibc Linux the binary calls this before `main`
/// (src/start.rs), which is why it returns instead of exiting.
pub fn worker(argv: &[std::ffi::OsString]) -> i32 {
    match worker_args(argv) {
        Ok(args) => crate::worker::run(&args),
        Err(e) => {
            let _ = e.print();
            e.exit_code()
        }
    }
}

/// How `okstra worker` reads its command line `argv` (program name first):
/// the one reading, shared by the wrapper and the plan review.
pub fn worker_args(argv: &[std::ffi::OsString]) -> Result<crate::worker::WorkerArgs, clap::Error> {
    if let Some(args) = crate::worker::parse_canonical(argv.get(2..).unwrap_or_default()) {
        return Ok(args);
    }
    use clap::{Args, FromArgMatches};
    let command = crate::worker::WorkerArgs::augment_args(clap::Command::new("worker"))
        .bin_name("okstra worker")
        .about(WORKER_ABOUT)
        .long_about(None);
    command
        .try_get_matches_from(argv.iter().skip(1))
        .and_then(|m| crate::worker::WorkerArgs::from_arg_matches(&m))
}

/// Print diagnostics in the chosen format and return their exit status.
pub fn report(diags: &Diagnostics, format: Format) -> ExitStatus {
    match format {
        Format::Text => eprint!("{}", diags.render_text()),
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&diags.to_json()).unwrap_or_default()
        ),
    }
    diags.exit_status()
}

/// The timestamp stamped on a new plan: SOURCE_DATE_EPOCH when set (for
/// reproducible output), else now.
pub fn now_rfc3339() -> String {
    let time = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|secs| std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .unwrap_or_else(std::time::SystemTime::now);
    humantime::format_rfc3339_seconds(time).to_string()
}
