//! The command line: clap definitions and one small handler per command.

mod doctor;
mod exec;
mod plan;
mod validate;

pub use plan::read_plan;
pub use validate::{check_document, Kind as DocumentKind};

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
    /// When to colour diagnostics on stderr: `auto` colours only a terminal
    /// (and honours NO_COLOR and CLICOLOR_FORCE); `always`; `never`.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t = ColorChoice::Auto,
        value_name = "WHEN"
    )]
    pub color: ColorChoice,
    #[command(subcommand)]
    pub command: Command,
}

/// The `--color` choice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    #[default]
    Auto,
    Always,
    Never,
}

impl ColorChoice {
    /// Whether what goes to stderr gets ANSI colour. `auto` decides as
    /// anstream (and so clap) does: not when NO_COLOR is set, yes when
    /// CLICOLOR_FORCE is, otherwise only on a terminal that takes colour.
    pub fn for_stderr(self) -> bool {
        match self {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                anstream::AutoStream::choice(&std::io::stderr()) != anstream::ColorChoice::Never
            }
        }
    }
}

/// Set once from `--color` before any command runs; read by whatever
/// renders diagnostics to stderr.
static STDERR_COLOR: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether diagnostics written to stderr are coloured (see `--color`).
pub fn stderr_color() -> bool {
    STDERR_COLOR.load(std::sync::atomic::Ordering::Relaxed)
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
    STDERR_COLOR.store(cli.color.for_stderr(), std::sync::atomic::Ordering::Relaxed);
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
    let args = match crate::worker::parse_canonical(argv.get(2..).unwrap_or_default()) {
        Some(args) => args,
        None => {
            use clap::{Args, FromArgMatches};
            let command = crate::worker::WorkerArgs::augment_args(clap::Command::new("worker"))
                // Every command takes `--color`; the wrapper prints no
                // diagnostics, so it only accepts it.
                .arg(
                    clap::Arg::new("color")
                        .long("color")
                        .value_name("WHEN")
                        .value_parser(["auto", "always", "never"])
                        .help("Accepted for symmetry with every other command; the wrapper prints no diagnostics"),
                )
                .bin_name("okstra worker")
                .about(WORKER_ABOUT)
                .long_about(None);
            let parsed = command
                .try_get_matches_from(argv.iter().skip(1))
                .and_then(|m| crate::worker::WorkerArgs::from_arg_matches(&m));
            match parsed {
                Ok(args) => args,
                Err(e) => {
                    let _ = e.print();
                    return e.exit_code();
                }
            }
        }
    };
    crate::worker::run(&args)
}

/// Print diagnostics in the chosen format and return their exit status.
pub fn report(diags: &Diagnostics, format: Format) -> ExitStatus {
    match format {
        // Written as rendered: thousands of problems are never one string.
        Format::Text => {
            let mut err = std::io::BufWriter::new(std::io::stderr().lock());
            let _ = diags
                .write_text(&mut err, stderr_color())
                .and_then(|_| std::io::Write::flush(&mut err));
        }
        Format::Json => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let _ = diags
                .write_json(&mut out)
                .and_then(|_| std::io::Write::flush(&mut out));
        }
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
