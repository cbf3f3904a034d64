//! The arguments of the wrapper (`okstra-worker`, `okstra worker`).

use crate::vocab::{Confinement, NetworkMode};
use std::ffi::OsString;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Presentation {
    /// Print start and end notices on stderr.
    Live,
    /// Print only problems.
    #[default]
    Quiet,
}

/// Arguments of `okstra worker`. Paths are relative to the project root
/// unless absolute.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// The project root: the child's working directory, unless
    /// `--workdir` names another.
    #[arg(long, value_name = "PATH")]
    pub project_root: PathBuf,
    /// The child's working directory instead of the project root (relative
    /// to it unless absolute): a `worktree = "git"` job's worktree
    /// (docs/worktrees.md#running), given to the worker as OKSTRA_WORKTREE.
    /// The provider CLI works there; the prompt and result paths stay the
    /// project's.
    #[arg(long, value_name = "PATH")]
    pub workdir: Option<PathBuf>,
    /// claude, codex, gemini or command.
    #[arg(long, value_name = "P")]
    pub provider: String,
    /// The model execution value handed to the provider CLI.
    #[arg(long, value_name = "M", default_value = "")]
    pub model: String,
    /// The prompt file, given to the child on stdin.
    #[arg(long, value_name = "PATH")]
    pub prompt: PathBuf,
    /// The file the worker must write.
    #[arg(long, value_name = "PATH")]
    pub result: PathBuf,
    /// The worker's own result file.
    #[arg(long, value_name = "PATH")]
    pub worker_result: PathBuf,
    /// `live` prints start and end notices on stderr (a pane); `quiet`
    /// only problems.
    #[arg(long, value_enum, default_value_t = Presentation::Quiet)]
    pub presentation: Presentation,
    /// The prompt's invocation metadata (accepted; the served-model check
    /// reads the catalog through `--manifest` / `--model-ref`).
    #[arg(long, value_name = "PATH")]
    pub invocation_metadata: Option<PathBuf>,
    /// A UUID minted by okstra for this attempt; passed to providers that take one.
    #[arg(long, value_name = "UUID", value_parser = parse_session_id)]
    pub session_id: Option<String>,
    /// The attempt number (1 or more), given to the worker as OKSTRA_ATTEMPT.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: u32,
    /// The dispatch id (`<invocationId>:attempt-<n>`), given to the worker
    /// as OKSTRA_DISPATCH_ID.
    #[arg(long, value_name = "ID")]
    pub dispatch_id: Option<String>,
    /// The worker's state key.
    #[arg(long, value_name = "KEY")]
    pub worker_key: String,
    /// Stop the child after this many seconds and exit 124.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_seconds: Option<u64>,
    /// Stop the child once its usage so far costs more than this many US
    /// dollars (priced as `okstra status` prices) and exit 87
    /// (docs/exec.md#budgets).
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    pub max_cost_usd: Option<Usd>,
    /// Stop the child once its usage so far is more than this many tokens
    /// and exit 87 (docs/exec.md#budgets).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_tokens: Option<u64>,
    /// A directory the worker may write besides the project root (repeatable).
    #[arg(long = "write-dir", value_name = "PATH")]
    pub write_dirs: Vec<PathBuf>,
    /// claude's `--permission-mode` (default: acceptEdits).
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    /// codex's `--sandbox` (default: workspace-write).
    #[arg(long, value_name = "MODE")]
    pub sandbox_mode: Option<String>,
    /// gemini's `--approval-mode` (default: auto_edit).
    #[arg(long, value_name = "MODE")]
    pub approval_mode: Option<String>,
    /// An extra argument for the provider CLI (repeatable).
    #[arg(long = "extra-arg", value_name = "A", allow_hyphen_values = true)]
    pub extra_args: Vec<String>,
    /// The run manifest (relative to the project root unless absolute): its
    /// `models{}` catalog is what the served model is checked against.
    #[arg(long, value_name = "PATH", requires = "model_ref")]
    pub manifest: Option<PathBuf>,
    /// The catalog entry (`models.<REF>`) the job was bound to. With
    /// `--manifest`, the wrapper checks the model the CLI reports having
    /// served (docs/providers.md#the-served-model) and exits 86 on a mismatch,
    /// stopping the CLI as soon as it says so.
    #[arg(long, value_name = "REF", requires = "manifest")]
    pub model_ref: Option<String>,
    /// Wait for one byte on stdin before doing anything (exec's
    /// record-before-launch, docs/exec.md#crash-safety-and-resume); end of
    /// input instead means exec never released this attempt: exit 75 having
    /// written nothing.
    #[arg(long)]
    pub gated: bool,
    /// Kernel confinement of the child and everything it starts
    /// (docs/confinement.md#kernel-confinement): `auto` confines where the
    /// kernel offers Landlock ABI 6 or newer, `required` refuses to start the
    /// child where it cannot, `none` never confines.
    #[arg(long, value_name = "MODE", default_value_t = Confinement::None)]
    pub confinement: Confinement,
    /// A directory a confined child may write, besides its private TMPDIR
    /// and its CLI's private state (repeatable; relative to the project root
    /// unless absolute). Made when missing; never reached through a symlink.
    #[arg(long = "confine-dir", value_name = "DIR")]
    pub confine_dirs: Vec<PathBuf>,
    /// The attempt's private directory, `<temp>/okstra-<uid>/<name>`,
    /// named by exec, which removes it once it settled the attempt (so a
    /// wrapper killed before it cleaned up leaves nothing); made here for
    /// an agent CLI (its private state, `state/`) or a confined child (its
    /// TMPDIR, `tmp/`). Without it the wrapper names one here.
    #[arg(long, value_name = "DIR")]
    pub tmp_dir: Option<PathBuf>,
    /// Confine the child's reads too (docs/confinement.md#reads): it may
    /// read only the project, its write directories, the system's
    /// locations, its PATH and installation, a few named files of the home,
    /// and each `--read-path`.
    #[arg(long)]
    pub confine_reads: bool,
    /// A path a confined child may read besides those (repeatable; `~/` is
    /// the home, relative is the project's; `/` leaves reads open).
    #[arg(long = "read-path", value_name = "PATH")]
    pub read_paths: Vec<String>,
    /// The network of a confined child (docs/confinement.md#network):
    /// `provider` through exec's egress proxy (`--proxy`), `none`, or
    /// `open`.
    #[arg(long, value_name = "MODE", default_value_t = NetworkMode::Open)]
    pub network: NetworkMode,
    /// The port of this attempt's door in exec's egress proxy on
    /// 127.0.0.1, named by exec at launch: the one TCP port a confined
    /// child may connect to. Without it, `--network provider` allows none.
    #[arg(long, value_name = "PORT")]
    pub proxy: Option<u16>,
    /// The argv of a `command` job.
    #[arg(last = true, value_name = "ARGV")]
    pub command: Vec<String>,
}

/// A positive, finite amount of US dollars.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Usd(pub f64);

/// Never NaN: `--max-cost-usd` takes only positive finite amounts.
impl Eq for Usd {}

#[derive(Debug, thiserror::Error)]
#[error("`{0}` is not a positive amount of US dollars")]
struct NotUsd(String);

fn parse_usd(s: &str) -> Result<Usd, NotUsd> {
    match s.parse::<f64>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(Usd(x)),
        _ => Err(NotUsd(s.to_string())),
    }
}

impl WorkerArgs {
    /// The attempt's budget, where it has one.
    pub fn budget(&self) -> Option<crate::budget::Budget> {
        let b = crate::budget::Budget {
            max_cost_usd: self.max_cost_usd.map(|u| u.0),
            max_tokens: self.max_tokens,
        };
        (b.max_cost_usd.is_some() || b.max_tokens.is_some()).then_some(b)
    }
}

/// Read the wrapper's arguments `args` (without the program's name) as
/// `bin_name` does: the one reading, shared by `okstra-worker`, a slot's
/// requests and the plan review (`okstra worker` itself is a subcommand of
/// `okstra`'s parser, with the same [`WorkerArgs`]).
pub fn parse<I>(bin_name: &str, args: I) -> Result<WorkerArgs, clap::Error>
where
    I: IntoIterator,
    I::Item: Into<OsString> + Clone,
{
    Reader::new(bin_name).read(args)
}

/// [`parse`] for many lines: the parser is built once and reads each line
/// afresh (a slot's requests, the review's wrapper lines). Building it
/// costs more than reading one line (benches/README.md, "where planning's
/// time went since 403510e").
pub struct Reader {
    bin_name: String,
    command: clap::Command,
}

impl Reader {
    pub fn new(bin_name: &str) -> Reader {
        use clap::Args;
        let mut command = WorkerArgs::augment_args(clap::Command::new(bin_name.to_string()))
            .bin_name(bin_name.to_string())
            .version(crate::VERSION)
            .about(super::ABOUT)
            .long_about(None);
        command.build();
        Reader {
            bin_name: bin_name.to_string(),
            command,
        }
    }

    /// Read one line's arguments `args` (without the program's name).
    pub fn read<I>(&mut self, args: I) -> Result<WorkerArgs, clap::Error>
    where
        I: IntoIterator,
        I::Item: Into<OsString> + Clone,
    {
        use clap::FromArgMatches;
        let argv =
            std::iter::once(OsString::from(&self.bin_name)).chain(args.into_iter().map(Into::into));
        self.command
            .try_get_matches_from_mut(argv)
            .and_then(|mut m| WorkerArgs::from_arg_matches_mut(&mut m))
    }
}

/// A `--session-id` that is no UUID.
#[derive(Debug, thiserror::Error)]
#[error("not a UUID: {0}")]
struct NotAUuid(uuid::Error);

fn parse_session_id(value: &str) -> Result<String, NotAUuid> {
    uuid::Uuid::parse_str(value)
        .map(|_| value.to_string())
        .map_err(NotAUuid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_rejects_bad_session_id_and_attempt_zero() {
        let base = [
            "--project-root",
            ".",
            "--provider",
            "claude",
            "--prompt",
            "p",
            "--result",
            "r",
            "--worker-result",
            "r",
            "--worker-key",
            "k",
        ];
        let with = |extra: &[&str]| parse("w", base.iter().chain(extra.iter()).copied());
        assert!(with(&["--session-id", "not-a-uuid"]).is_err());
        assert!(with(&["--attempt", "0"]).is_err());
        let ok = with(&[
            "--extra-arg",
            "--max-turns",
            "--extra-arg=3",
            "--write-dir",
            "wt",
            "--presentation",
            "live",
        ])
        .unwrap();
        assert_eq!(ok.extra_args, vec!["--max-turns", "3"]);
        assert_eq!(ok.presentation, Presentation::Live);
        assert_eq!(ok.model, "");
        assert_eq!(ok.attempt, 1);

        // One reader, line after line, reads each as `parse` does: what an
        // earlier line said does not carry over, nor does its refusal.
        let mut reader = Reader::new("w");
        let line =
            |extra: &[&'static str]| base.iter().chain(extra.iter()).copied().collect::<Vec<_>>();
        assert_eq!(reader.read(line(&["--attempt", "3"])).unwrap().attempt, 3);
        assert!(reader.read(line(&["--attempt", "0"])).is_err());
        let again = reader.read(line(&[])).unwrap();
        assert_eq!((again.attempt, again.extra_args.len()), (1, 0));
        assert_eq!(
            reader
                .read(line(&["--presentation", "live"]))
                .unwrap()
                .presentation,
            Presentation::Live
        );
    }
}
