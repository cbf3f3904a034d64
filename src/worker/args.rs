//! The arguments of `okstra worker`, and a quick reading of the one form
//! `okstra exec` writes them in.
//!
//! The wrapper starts once per job, and building clap's parser is a
//! measurable part of its start (about a fourteenth of the wrapper's own
//! time on the benchmark machine, by perf). [`parse_canonical`]
//! reads exec's command lines without it and declines everything else
//! (help, an unknown or repeated option, a value that looks like an option
//! or does not parse, a missing required option), which clap then reads
//! with its own help and errors. A property test holds both readings equal
//! wherever the quick one answers.

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
    /// The project root: the child's working directory.
    #[arg(long, value_name = "PATH")]
    pub project_root: PathBuf,
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
    #[arg(long, value_enum, default_value_t = Presentation::Quiet)]
    pub presentation: Presentation,
    /// The prompt's invocation metadata (accepted; the served-model check
    /// reads the catalog through `--manifest` / `--model-ref`).
    #[arg(long, value_name = "PATH")]
    pub invocation_metadata: Option<PathBuf>,
    /// A UUID minted by okstra for this attempt; passed to providers that take one.
    #[arg(long, value_name = "UUID", value_parser = parse_session_id)]
    pub session_id: Option<String>,
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub attempt: u32,
    #[arg(long, value_name = "ID")]
    pub dispatch_id: Option<String>,
    /// The worker's state key.
    #[arg(long, value_name = "KEY")]
    pub worker_key: String,
    /// Stop the child after this many seconds and exit 124.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_seconds: Option<u64>,
    /// A directory the worker may write besides the project root (repeatable).
    #[arg(long = "write-dir", value_name = "PATH")]
    pub write_dirs: Vec<PathBuf>,
    #[arg(long, value_name = "MODE")]
    pub permission_mode: Option<String>,
    #[arg(long, value_name = "MODE")]
    pub sandbox_mode: Option<String>,
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
    /// served (SPEC §6) and exits 86 on a mismatch, stopping the CLI as soon
    /// as it says so.
    #[arg(long, value_name = "REF", requires = "manifest")]
    pub model_ref: Option<String>,
    /// Wait for exec's go-ahead on stdin (one byte) before doing anything;
    /// at end of file exit 75 having started and written nothing (SPEC §5.8).
    #[arg(long)]
    pub gated: bool,
    /// The argv of a `command` job.
    #[arg(last = true, value_name = "ARGV")]
    pub command: Vec<String>,
}

fn parse_session_id(value: &str) -> Result<String, String> {
    uuid::Uuid::parse_str(value)
        .map(|_| value.to_string())
        .map_err(|e| format!("not a UUID: {e}"))
}

/// The options read so far.
#[derive(Default)]
struct Seen {
    project_root: Option<PathBuf>,
    provider: Option<String>,
    model: Option<String>,
    prompt: Option<PathBuf>,
    result: Option<PathBuf>,
    worker_result: Option<PathBuf>,
    presentation: Option<Presentation>,
    invocation_metadata: Option<PathBuf>,
    session_id: Option<String>,
    attempt: Option<u32>,
    dispatch_id: Option<String>,
    worker_key: Option<String>,
    timeout_seconds: Option<u64>,
    write_dirs: Vec<PathBuf>,
    permission_mode: Option<String>,
    sandbox_mode: Option<String>,
    approval_mode: Option<String>,
    extra_args: Vec<String>,
    manifest: Option<PathBuf>,
    model_ref: Option<String>,
}

/// `okstra worker`'s arguments (those after `worker`) when they are plain
/// `--name value` or `--name=value` options followed by `--` and the
/// command, with every value valid; `None` for anything clap should judge.
pub fn parse_canonical(args: &[OsString]) -> Option<WorkerArgs> {
    let mut seen = Seen::default();
    let mut rest = args.iter();
    let mut command = Vec::new();
    while let Some(arg) = rest.next() {
        let arg = arg.to_str()?;
        if arg == "--" {
            for a in rest.by_ref() {
                command.push(a.to_str()?.to_owned());
            }
            break;
        }
        let option = arg.strip_prefix("--")?;
        let (name, value) = match option.split_once('=') {
            Some((name, value)) => (name, value),
            None => {
                let value = rest.next()?.to_str()?;
                // clap reads a following `-x` as an option, not a value.
                if value.starts_with('-') {
                    return None;
                }
                (option, value)
            }
        };
        seen.take(name, value)?;
    }
    if seen.manifest.is_some() != seen.model_ref.is_some() {
        return None;
    }
    Some(WorkerArgs {
        gated: false,
        project_root: seen.project_root?,
        provider: seen.provider?,
        model: seen.model.unwrap_or_default(),
        prompt: seen.prompt?,
        result: seen.result?,
        worker_result: seen.worker_result?,
        presentation: seen.presentation.unwrap_or_default(),
        invocation_metadata: seen.invocation_metadata,
        session_id: seen.session_id,
        attempt: seen.attempt.unwrap_or(1),
        dispatch_id: seen.dispatch_id,
        worker_key: seen.worker_key?,
        timeout_seconds: seen.timeout_seconds,
        write_dirs: seen.write_dirs,
        permission_mode: seen.permission_mode,
        sandbox_mode: seen.sandbox_mode,
        approval_mode: seen.approval_mode,
        extra_args: seen.extra_args,
        manifest: seen.manifest,
        model_ref: seen.model_ref,
        command,
    })
}

impl Seen {
    /// Record option `name` = `value`; `None` when clap would refuse it or
    /// `name` is not an option.
    fn take(&mut self, name: &str, value: &str) -> Option<()> {
        match name {
            "project-root" => once(&mut self.project_root, path(value)?),
            "provider" => once(&mut self.provider, value.to_owned()),
            "model" => once(&mut self.model, value.to_owned()),
            "prompt" => once(&mut self.prompt, path(value)?),
            "result" => once(&mut self.result, path(value)?),
            "worker-result" => once(&mut self.worker_result, path(value)?),
            "presentation" => once(
                &mut self.presentation,
                match value {
                    "live" => Presentation::Live,
                    "quiet" => Presentation::Quiet,
                    _ => return None,
                },
            ),
            "invocation-metadata" => once(&mut self.invocation_metadata, path(value)?),
            "session-id" => once(&mut self.session_id, parse_session_id(value).ok()?),
            "attempt" => once(&mut self.attempt, positive(value)?),
            "dispatch-id" => once(&mut self.dispatch_id, value.to_owned()),
            "worker-key" => once(&mut self.worker_key, value.to_owned()),
            "timeout-seconds" => once(&mut self.timeout_seconds, positive(value)?),
            "write-dir" => {
                self.write_dirs.push(path(value)?);
                Some(())
            }
            "permission-mode" => once(&mut self.permission_mode, value.to_owned()),
            "sandbox-mode" => once(&mut self.sandbox_mode, value.to_owned()),
            "approval-mode" => once(&mut self.approval_mode, value.to_owned()),
            "extra-arg" => {
                self.extra_args.push(value.to_owned());
                Some(())
            }
            "manifest" => once(&mut self.manifest, path(value)?),
            "model-ref" => once(&mut self.model_ref, value.to_owned()),
            _ => None,
        }
    }
}

/// Set a single-valued option; clap refuses a second occurrence.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

/// A path value; clap refuses an empty one.
fn path(value: &str) -> Option<PathBuf> {
    (!value.is_empty()).then(|| PathBuf::from(value))
}

/// A number of at least 1 written in plain digits (clap's ranged parsers
/// also take a sign; those forms are left to clap).
fn positive<T: std::str::FromStr + PartialOrd + From<u8>>(value: &str) -> Option<T> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().filter(|n| *n >= T::from(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Args, FromArgMatches};
    use proptest::prelude::*;

    /// clap's reading of `args` (those after `worker`), as `okstra worker`
    /// does it.
    fn clap_reading(args: &[OsString]) -> Result<WorkerArgs, clap::Error> {
        let command = WorkerArgs::augment_args(clap::Command::new("worker"));
        let matches = command.try_get_matches_from(
            std::iter::once(OsString::from("worker")).chain(args.iter().cloned()),
        )?;
        WorkerArgs::from_arg_matches(&matches)
    }

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    const REQUIRED: [&str; 12] = [
        "--project-root",
        "/p",
        "--provider",
        "command",
        "--prompt",
        "prompts/w.md",
        "--result",
        "results/w.md",
        "--worker-result",
        "results/w.md",
        "--worker-key",
        "w",
    ];

    #[test]
    fn execs_command_lines_are_read_without_clap_and_as_clap_reads_them() {
        // The form compile::wrapper_command and exec's worker_argv write.
        let line = os(&[
            "--project-root",
            "/srv/project",
            "--provider",
            "claude",
            "--model",
            "claude-opus-4-1",
            "--prompt",
            "prompts/a.md",
            "--result",
            "results/a.md",
            "--worker-result",
            "results/a.worker.md",
            "--worker-key",
            "a",
            "--presentation",
            "live",
            "--invocation-metadata",
            "prompts/a.md.meta.json",
            "--timeout-seconds",
            "600",
            "--write-dir",
            "/srv/worktree",
            "--permission-mode",
            "acceptEdits",
            "--extra-arg=--max-turns",
            "--extra-arg=3",
            "--manifest",
            "run/run-manifest.json",
            "--model-ref",
            "opus",
            "--attempt",
            "2",
            "--dispatch-id",
            "inv-a:attempt-2",
            "--session-id",
            "7b6f3c1e-2a4d-4e8f-9c0b-1d2e3f405162",
            "--",
            "sh",
            "-c",
            "echo -- --model x",
        ]);
        let quick = parse_canonical(&line).expect("exec's form is read quickly");
        assert_eq!(quick, clap_reading(&line).unwrap());
        assert_eq!(quick.attempt, 2);
        assert_eq!(quick.extra_args, ["--max-turns", "3"]);
        assert_eq!(quick.command, ["sh", "-c", "echo -- --model x"]);
        assert_eq!(quick.presentation, Presentation::Live);

        let minimal = os(&REQUIRED);
        let quick = parse_canonical(&minimal).unwrap();
        assert_eq!(quick, clap_reading(&minimal).unwrap());
        assert_eq!((quick.attempt, quick.model.as_str()), (1, ""));
        assert_eq!(quick.presentation, Presentation::Quiet);
    }

    #[test]
    fn anything_clap_should_judge_is_declined() {
        let with = |extra: &[&str]| {
            let mut line = os(&REQUIRED);
            line.extend(os(extra));
            line
        };
        for case in [
            with(&["--help"]),
            with(&["-h"]),
            with(&["--bogus", "x"]),
            with(&["--attempt", "0"]),
            with(&["--attempt", "+2"]),
            with(&["--attempt", "99999999999"]),
            with(&["--timeout-seconds", "0"]),
            with(&["--session-id", "not-a-uuid"]),
            with(&["--presentation", "Live"]),
            with(&["--manifest", "m.json"]),
            with(&["--model-ref", "opus"]),
            with(&["--provider", "again"]),
            with(&["--model", "--attempt"]),
            with(&["--prompt="]),
            with(&["positional"]),
            with(&["--attempt"]),
            os(&REQUIRED[2..]),
        ] {
            assert_eq!(parse_canonical(&case), None, "{case:?}");
        }
    }

    #[test]
    fn a_non_utf8_argument_is_left_to_clap() {
        use std::os::unix::ffi::OsStringExt;
        let mut line = os(&REQUIRED);
        line.extend([OsString::from("--"), OsString::from_vec(vec![0xff])]);
        assert_eq!(parse_canonical(&line), None);
    }

    const NAMES: [&str; 20] = [
        "project-root",
        "provider",
        "model",
        "prompt",
        "result",
        "worker-result",
        "presentation",
        "invocation-metadata",
        "session-id",
        "attempt",
        "dispatch-id",
        "worker-key",
        "timeout-seconds",
        "write-dir",
        "permission-mode",
        "sandbox-mode",
        "approval-mode",
        "extra-arg",
        "manifest",
        "model-ref",
    ];
    const VALUES: [&str; 16] = [
        "a",
        "",
        "0",
        "1",
        "007",
        "+3",
        "-1",
        "live",
        "quiet",
        "Live",
        "18446744073709551616",
        "7b6f3c1e-2a4d-4e8f-9c0b-1d2e3f405162",
        "-",
        "a b",
        "x=y",
        "--",
    ];

    /// One piece of a command line: mostly an option with a value, in either
    /// form, sometimes something odd.
    fn piece() -> impl Strategy<Value = Vec<String>> {
        let name = prop::sample::select(NAMES.to_vec());
        let value = prop::sample::select(VALUES.to_vec());
        prop_oneof![
            6 => (name.clone(), value.clone()).prop_map(|(n, v)| vec![format!("--{n}"), v.into()]),
            2 => (name, value.clone()).prop_map(|(n, v)| vec![format!("--{n}={v}")]),
            1 => prop::sample::select(vec!["--help", "--bogus", "-x", "positional", "--attempt"])
                .prop_map(|t| vec![t.to_string()]),
            1 => proptest::collection::vec(value, 0..4).prop_map(|tail| {
                std::iter::once("--".to_string()).chain(tail.into_iter().map(String::from)).collect()
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Wherever the quick reading answers, clap reads the same
        /// arguments the same way.
        #[test]
        fn the_quick_reading_agrees_with_clap(
            pieces in proptest::collection::vec(piece(), 0..6),
            drop_required in proptest::option::weighted(0.2, 0usize..6),
        ) {
            let mut line = os(&REQUIRED);
            if let Some(i) = drop_required {
                line.drain(2 * i..2 * i + 2);
            }
            line.extend(pieces.iter().flatten().map(OsString::from));
            if let Some(quick) = parse_canonical(&line) {
                let clap = clap_reading(&line);
                prop_assert!(clap.is_ok(), "clap refused {line:?}: {clap:?}");
                prop_assert_eq!(quick, clap.unwrap());
            }
        }
    }
}
