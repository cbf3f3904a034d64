//! The command line: clap definitions and one small handler per command.

/// `println!` for a command's report: `Err` (to pass on with `?`) when the
/// command must end here (see [`write_out`]).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for a command's report (see [`write_out`] and [`outln`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_out(format_args!($($arg)*))
    };
}

mod doctor;
mod exec;
mod generated;
mod init;
mod manual;
mod plan;
mod status;
mod validate;
mod watch;

use clap::{Parser, Subcommand};
use okstra::diag::{Diagnostics, ExitStatus, Format};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Colour a terminal, unless NO_COLOR is set (CLICOLOR_FORCE forces it).
    #[default]
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
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
    /// Start a run in a project: a run manifest, a commented job spec and its schema, a prompt per worker; then the commands that plan and run it.
    Init(init::InitArgs),
    /// Compile a job spec (or the manifest's roster) into plan.json and print its summary.
    Plan(plan::PlanArgs),
    /// Verify a plan and run it: progress on stderr, a summary at the end.
    Exec(exec::ExecArgs),
    /// Plan a spec to a temporary file, show it, and run it: the one-command demo.
    Run(exec::RunArgs),
    /// The run's workers and dispatches, from team-state.
    Status(status::StatusArgs),
    /// A live view of a run: a row per job, the stage and run totals, a worker's log; refreshed as the run changes.
    Watch(watch::WatchArgs),
    /// Print a plan for review.
    Show(plan::ShowArgs),
    /// Check files against their schemas and rules, without planning.
    Validate(validate::ValidateArgs),
    /// List the embedded JSON Schemas, print one, or write them all.
    Schema(validate::SchemaArgs),
    /// Check what a run needs (provider CLIs, manifest, team-state, schemas, lock, run directory) and say how to fix each miss.
    Doctor(doctor::DoctorArgs),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions(generated::CompletionsArgs),
    /// Print the man page (roff) of okstra or of one command.
    Man(generated::ManArgs),
    #[command(about = okstra::worker::ABOUT)]
    Worker(okstra::worker::WorkerArgs),
    /// The worker wrapper as a slot of exec's, attempt after attempt
    /// (started by `okstra exec` where `okstra-worker` is missing).
    #[command(hide = true)]
    WorkerSlot,
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

/// Parse the command line, run the command, and return its exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    STDERR_COLOR.store(cli.color.for_stderr(), std::sync::atomic::Ordering::Relaxed);
    let ended = match cli.command {
        Command::Init(args) => init::init(&args),
        Command::Plan(args) => plan::plan(&args),
        Command::Show(args) => plan::show(&args),
        Command::Exec(args) => Ok(exec::exec(&args)),
        Command::Run(args) => Ok(exec::run(&args)),
        Command::Status(args) => status::status(&args),
        Command::Watch(args) => watch::watch(&args),
        Command::Validate(args) => validate::validate(&args),
        Command::Schema(args) => validate::schema(&args),
        Command::Doctor(args) => doctor::doctor(&args),
        Command::Completions(args) => generated::completions(&args),
        Command::Man(args) => generated::man(&args),
        // The same wrapper as `okstra-worker`, for an okstra without it.
        Command::Worker(args) => return wrapper_exit(okstra::worker::run(&args)),
        Command::WorkerSlot => return wrapper_exit(okstra::worker::serve("okstra worker-slot")),
    };
    match ended {
        Ok(status) => status.into(),
        Err(Cut(code)) => code,
    }
}

/// The wrapper's exit code as the process's: its low eight bits, as
/// `exit(2)` keeps them.
fn wrapper_exit(code: i32) -> ExitCode {
    ExitCode::from(code as u8)
}

/// How a command ends: with its exit status, or cut short where stdout
/// would not take its report (see [`write_out`]).
pub(crate) type Ended = Result<ExitStatus, Cut>;

/// A report stdout would not take: the command ends at once, with this
/// exit code.
#[derive(Debug)]
pub(crate) struct Cut(ExitCode);

/// Write part of a command's report to stdout, flushed at once; `Err` when
/// the command must end here, with the code it carries.
///
/// The Rust runtime ignores SIGPIPE, so a report piped into `head` gets an
/// error once `head` has gone; that ends the command quietly, with success,
/// as ripgrep ends. (exec and run write their progress and summary on their
/// own and let a failed write go: a closed pipe must not end a run half-way;
/// only a refusal, before anything started, comes through here.) Any other
/// failure to write is said on stderr and ends the command with exit code 1.
pub(crate) fn write_out(text: std::fmt::Arguments) -> Result<(), Cut> {
    let mut out = io::stdout().lock();
    wrote(out.write_fmt(text).and_then(|()| out.flush()))
}

/// [`write_out`] for a report written piece by piece, through a buffer:
/// one too large to be held whole first.
pub(crate) fn write_out_with(
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), Cut> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let result = write(&mut out).and_then(|()| out.flush());
    wrote(result)
}

/// How writing a report ended: see [`write_out`].
fn wrote(result: io::Result<()>) -> Result<(), Cut> {
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(Cut(ExitStatus::Success.into())),
        Err(e) => {
            let _ = writeln!(io::stderr(), "okstra: cannot write the report: {e}");
            Err(Cut(ExitCode::from(1)))
        }
    }
}

/// Print diagnostics in the chosen format and return their exit status.
pub fn report(diags: &Diagnostics, format: Format) -> ExitStatus {
    match format {
        // Written as rendered: thousands of problems are never one string.
        Format::Text => {
            let mut err = io::BufWriter::new(io::stderr().lock());
            let _ = diags
                .write_text(&mut err, stderr_color())
                .and_then(|_| err.flush());
        }
        // Refused input keeps its exit status when nobody reads the report
        // (or stdout fails otherwise).
        Format::Json => {
            let mut out = io::BufWriter::new(io::stdout().lock());
            let _ = diags.write_json(&mut out).and_then(|_| out.flush());
        }
    }
    diags.exit_status()
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every flag and positional of every command says what it is for: the
    /// text `--help`, the man pages and the zsh / fish completions show.
    #[test]
    fn every_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                let has = arg
                    .get_help()
                    .or(arg.get_long_help())
                    .is_some_and(|h| !h.to_string().trim().is_empty());
                if !has {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                if sub.get_name() == "help" {
                    continue;
                }
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "okstra", &mut missing);
        assert!(missing.is_empty(), "arguments without help: {missing:#?}");
    }
}
