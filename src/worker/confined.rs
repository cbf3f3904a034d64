//! A worker's confinement as the wrapper prepares and applies it
//! (docs/confinement.md#kernel-confinement): the ruleset begun ahead while a
//! gated wrapper waits, the TMPDIR and private state granted, and the
//! start of the child from a thread that restricts itself (see `starter`).

use super::private::AttemptDir;
use super::starter::{Order, Starter};
use super::{say, WorkerArgs};
use crate::confine::{self, RulesetError};
use crate::process::{SpawnSpec, Spawned};
use crate::provider::Provider;
use crate::vocab::{Confinement, NetworkMode};
use std::io;
use std::path::{Path, PathBuf};

/// Why a confined worker was not started
/// ([`crate::diag::WrapperExit::ConfinementFailed`]).
#[derive(Debug, thiserror::Error)]
pub(super) enum ConfineFailure {
    /// `required` where the kernel cannot confine: its words.
    #[error("confinement is required, but {0}")]
    Required(String),
    #[error(transparent)]
    Ruleset(#[from] RulesetError),
    #[error("cannot make the attempt's private directory: {0}")]
    Tmp(io::Error),
    /// Seeding the CLI's private state (docs/confinement.md#provider-state):
    /// never run on the user's shared state instead.
    #[error("cannot seed the CLI's private state from the user's: {0}")]
    State(io::Error),
    #[error("cannot start the thread that confines the worker: {0}")]
    Thread(io::Error),
    #[error("cannot confine the worker: {0}")]
    Restrict(io::Error),
    #[error("the thread that confines the worker ended before it started it")]
    ThreadLost,
}

/// What the worker's ruleset governs besides writes, for a kernel that
/// offers `offer`; `Err` (why) where `required` asks for a network the
/// kernel cannot confine.
fn handled(args: &WorkerArgs, offer: &confine::Offer) -> Result<confine::Handled, String> {
    Ok(confine::Handled {
        reads: args.confine_reads,
        net: confine::decide_net(args.confinement, args.network, offer)?,
    })
}

/// What confining the child needs and makes nothing on disk, done before a
/// gated wrapper waits for its go, while exec records and syncs the
/// dispatch: the thread that will start the child (see `starter`), and the
/// ruleset's files. The TMPDIR and the write directories, which may have
/// to be made, wait for the go.
pub(super) struct Ahead {
    starter: io::Result<Starter>,
    rules: Result<confine::Begun, RulesetError>,
}

impl Ahead {
    /// `None` when `args` ask for no confinement this kernel offers (which
    /// [`prepare`] then decides again, and says).
    pub fn make(args: &WorkerArgs) -> Option<Ahead> {
        if args.confinement == Confinement::None {
            return None;
        }
        let offer = confine::offer();
        match (&offer, handled(args, &offer)) {
            (confine::Offer::Landlock { abi }, Ok(handled)) => Some(Ahead {
                starter: Starter::new(),
                rules: confine::Begun::new(*abi, handled),
            }),
            _ => None,
        }
    }
}

/// A worker's confinement, prepared in the wrapper.
pub(super) struct Confined {
    pub rules: confine::Prepared,
    /// The private TMPDIR, in the attempt's directory.
    tmp: PathBuf,
    /// The thread made ahead to start the child, where one was.
    starter: Option<io::Result<Starter>>,
    net: confine::Net,
}

impl Confined {
    /// Start the child confined, from a thread of its own that restricts
    /// itself (see `starter`): the one made ahead, or one made now. `Err`
    /// when the confinement could not be applied (the child was not
    /// started), else what the start gave.
    pub fn spawn(
        &mut self,
        spec: &SpawnSpec,
        own_group: bool,
    ) -> Result<io::Result<Spawned>, ConfineFailure> {
        // The wrapper hands its child no log of its own (exec points the
        // wrapper's stdout and stderr at it), so none is carried over.
        debug_assert!(spec.log.is_none(), "a confined start carries no log");
        let starter = self
            .starter
            .take()
            .unwrap_or_else(Starter::new)
            .map_err(ConfineFailure::Thread)?;
        let restriction = self.rules.restriction().map_err(ConfineFailure::Restrict)?;
        starter.start(Order {
            restriction,
            argv: spec.argv.to_vec(),
            cwd: spec.cwd.to_path_buf(),
            env: spec.env.to_vec(),
            stdin: spec.stdin.map(Path::to_path_buf),
            own_group,
        })
    }

    /// What the child's environment gains: its TMPDIR, and for claude
    /// `IS_SANDBOX=1`, since it now is in one (so `bypassPermissions` runs
    /// as root).
    pub fn env(&self, provider: Provider) -> Vec<(String, String)> {
        let mut env = vec![("TMPDIR".into(), self.tmp.display().to_string())];
        if provider == Provider::Claude {
            env.push(("IS_SANDBOX".into(), "1".into()));
        }
        if let confine::Net::Proxy(port) = self.net {
            env.extend(proxy_env(port));
        }
        env
    }

    /// The network the child is confined to, as the status sidecar names
    /// it.
    pub fn network(&self) -> NetworkMode {
        match self.net {
            confine::Net::Open => NetworkMode::Open,
            confine::Net::Proxy(_) => NetworkMode::Provider,
            confine::Net::None => NetworkMode::None,
        }
    }

    /// A failed child whose output says a write was refused: say where it
    /// may write, so the log explains its own EACCES.
    pub fn explain_refusals(&self, output: &str) {
        if output.contains("Permission denied") || output.contains("EACCES") {
            let dirs: Vec<String> = self
                .rules
                .dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            say(format_args!(
                "the worker is confined ({}): it may write only under {} and /dev/null-like devices; a write elsewhere fails with EACCES (Permission denied)",
                self.rules.applied,
                dirs.join(", ")
            ));
            if self.rules.reads.is_some() {
                say(format_args!(
                    "it may read only {}, its CLI's private state and the spec's readPaths (docs/confinement.md#reads); add a path the worker needs to readPaths",
                    confine::reads::SUMMARY
                ));
            }
            match self.net {
                confine::Net::Proxy(port) => say(format_args!(
                    "its network goes only through its door in okstra's egress proxy (127.0.0.1:{port}, in HTTPS_PROXY): a direct connection, UDP (DNS too) or a unix socket fails with EACCES, and a host the spec does not allow is answered 403 (docs/confinement.md#network)"
                )),
                confine::Net::None => say(format_args!(
                    "it has no network (network = \"none\", or no door on this node): every connection fails with EACCES (docs/confinement.md#network)"
                )),
                confine::Net::Open => {}
            }
        }
    }
}

/// The variables that point every common HTTP client at the egress proxy's
/// door on `port` (docs/confinement.md#network), with no host exempted.
pub(super) fn proxy_env(port: u16) -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{port}");
    let mut env = Vec::new();
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"] {
        env.push((name.to_string(), url.clone()));
        env.push((name.to_ascii_lowercase(), url.clone()));
    }
    env.push(("NO_PROXY".into(), String::new()));
    env.push(("no_proxy".into(), String::new()));
    env
}

/// The confinement `args` ask for, prepared (from what was made `ahead`,
/// where it was): `None` when the child runs unconfined (`none`, or `auto`
/// on a kernel without Landlock); `Err` when it must not start (`required`
/// where the kernel cannot, or a directory that cannot be made or is
/// reached through a symlink).
pub(super) fn prepare(
    args: &WorkerArgs,
    root: &Path,
    provider: Provider,
    ahead: Option<Ahead>,
    dir: Option<&AttemptDir>,
) -> Result<Option<Confined>, ConfineFailure> {
    let (starter, begun) = match ahead {
        Some(ahead) => (Some(ahead.starter), ahead.rules?),
        None => {
            if args.confinement == Confinement::None {
                return Ok(None);
            }
            let offer = confine::offer();
            match (confine::decide(args.confinement, &offer), &offer) {
                (Ok(true), confine::Offer::Landlock { abi }) => {
                    let handled = handled(args, &offer).map_err(ConfineFailure::Required)?;
                    (None, confine::Begun::new(*abi, handled)?)
                }
                (Err(why), _) => return Err(ConfineFailure::Required(why.to_string())),
                _ => return Ok(None),
            }
        }
    };
    // Made for every worker that may be confined (see `AttemptDir`).
    let dir = dir.ok_or_else(|| ConfineFailure::Tmp(io::ErrorKind::NotFound.into()))?;
    let tmp = dir.make_tmp().map_err(ConfineFailure::Tmp)?;
    // Its provider's private state, never the user's
    // (docs/confinement.md#provider-state).
    let mut outside = vec![tmp.clone()];
    outside.extend(dir.state_dir().map(Path::to_path_buf));
    outside.extend(confine::test_also_writable());
    let reads = if args.confine_reads {
        read_scope(args, root, provider)
    } else {
        Vec::new()
    };
    let net = match (args.network, args.proxy) {
        // Asked for, or `auto` on a kernel that cannot confine it.
        _ if !begun.handles_net() => confine::Net::Open,
        (NetworkMode::Open, _) => confine::Net::Open,
        (NetworkMode::Provider, Some(port)) => confine::Net::Proxy(port),
        // No door named (a Slurm node, or an exec that gave none): none.
        (NetworkMode::Provider, None) | (NetworkMode::None, _) => confine::Net::None,
    };
    let rules = begun.finish(&confine::Grants {
        root,
        confine_dirs: &args.confine_dirs,
        outside: &outside,
        reads: &reads,
        net,
    })?;
    Ok(Some(Confined {
        rules,
        tmp,
        starter,
        net,
    }))
}

/// What the worker may read besides what it may write
/// (docs/confinement.md#reads).
fn read_scope(args: &WorkerArgs, root: &Path, provider: Provider) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let path = std::env::var_os("PATH");
    let program = match provider {
        Provider::Command => args.command.first().map(String::as_str),
        other => other.program().map(|p| p.name),
    };
    let scope = confine::reads::scope_cached(&confine::reads::Inputs {
        root,
        home: home.as_deref(),
        path: path.as_deref(),
        program,
        read_paths: &args.read_paths,
    });
    // `None`: a read path of `/`, every file as before.
    scope.unwrap_or_else(|| vec![PathBuf::from("/")])
}
