//! Kernel confinement of a worker (docs/confinement.md#kernel-confinement),
//! with Linux Landlock and a seccomp filter.
//!
//! The wrapper (unconfined) prepares everything: it creates each directory
//! the worker may write, opens it and what it may read, and builds the
//! ruleset. Then a thread of its own restricts itself (Landlock and seccomp
//! bind the calling thread only) and starts the worker, which inherits the
//! domain before its first instruction, so the worker and everything it
//! starts can write only there, read only what [`reads`] lists, reach the
//! network only through the run's egress proxy ([`Net`]), and cannot signal
//! or reach through an abstract unix socket any process outside its domain
//! (exec, the wrapper, whose main thread stays unconfined).
//! docs/confinement.md#the-threat-model says what that leaves.
//!
//! Which directories it may write: for each write-policy pattern its
//! longest literal directory ([`policy_dirs`], at plan time; the audit
//! still checks the exact patterns), a private `TMPDIR`, the provider's own
//! state directories, `/dev/null`-like devices, and the files the worker's
//! stdout and stderr already are (its log, or its pane's terminal), so
//! `> /dev/stderr` works.

pub mod reads;
pub mod seccomp;

use crate::policy;
use crate::vocab::Confinement;
use landlock::{
    Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    PathBeneath, RestrictSelf, Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope,
    ABI,
};
use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

/// The oldest Landlock ABI okstra confines with: 6, the first with scopes
/// (signals, abstract unix sockets), without which a worker could kill
/// exec.
const MIN_ABI: u8 = 6;

/// The newest ABI whose rights okstra asks for. ABI 7 adds only audit
/// logging to 6; newer ABIs' rights (9 restricts connecting to pathname
/// unix sockets) are left until they are measured against the real CLIs.
const MAX_ABI: u8 = 7;

/// In debug builds only, this variable makes the kernel look as if it had
/// no Landlock, so tests can show what a machine without it does.
pub const SIMULATE_UNAVAILABLE_ENV: &str = "OKSTRA_TEST_NO_LANDLOCK";

/// In debug builds only, an absolute directory a confined worker may also
/// write: the scratch directory outside the project through which the
/// test suites' fixture workers report to the test (run counters, markers),
/// so those suites run under the default confinement. A release build
/// ignores it; tests/it/confinement.rs never sets it.
pub const TEST_ALSO_WRITABLE_ENV: &str = "OKSTRA_TEST_ALSO_WRITABLE";

/// The directory [`TEST_ALSO_WRITABLE_ENV`] names, in a debug build.
pub fn test_also_writable() -> Option<PathBuf> {
    if !cfg!(debug_assertions) {
        return None;
    }
    let dir = PathBuf::from(std::env::var_os(TEST_ALSO_WRITABLE_ENV)?);
    dir.is_absolute().then_some(dir)
}

/// Devices every program expects to write (their directory is never
/// granted, only these files).
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/full", "/dev/tty"];

/// What this kernel offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    /// Landlock at this ABI (at least `MIN_ABI`).
    Landlock { abi: u8 },
    /// No confinement here, and why.
    Unavailable(String),
}

impl Offer {
    /// What a worker would get here: `landlock-abi<N>`, or `none`.
    pub fn applied(&self) -> &'static str {
        match self {
            Offer::Landlock { abi: 6 } => "landlock-abi6",
            Offer::Landlock { .. } => "landlock-abi7",
            Offer::Unavailable(_) => "none",
        }
    }

    /// One line for people (plan review, doctor).
    pub fn describe(&self) -> String {
        match self {
            Offer::Landlock { abi } => format!(
                "Landlock ABI {abi}: workers are confined (writes, signals, abstract unix sockets)"
            ),
            Offer::Unavailable(why) => format!("no confinement: {why}"),
        }
    }
}

/// Ask the kernel which Landlock ABI it offers.
pub fn offer() -> Offer {
    if cfg!(debug_assertions) && std::env::var_os(SIMULATE_UNAVAILABLE_ENV).is_some() {
        return Offer::Unavailable(format!(
            "Landlock reported unavailable ({SIMULATE_UNAVAILABLE_ENV} is set, a debug build's test seam)"
        ));
    }
    // A `RestrictSelf` with nothing to apply and no `no_new_privs` only
    // probes: the crate keeps its own probe private.
    let status = RestrictSelf::default().no_new_privs(false).apply();
    match status.map(|s| s.landlock) {
        Ok(LandlockStatus::Available { effective_abi, .. }) => {
            let abi: u8 = effective_abi.to_string().parse().unwrap_or(0);
            if abi >= MIN_ABI {
                Offer::Landlock {
                    abi: abi.min(MAX_ABI),
                }
            } else {
                Offer::Unavailable(format!(
                    "the kernel offers Landlock ABI {abi}; okstra needs {MIN_ABI} or newer (Linux 6.12), for signal scoping"
                ))
            }
        }
        Ok(LandlockStatus::NotEnabled) => Offer::Unavailable(
            "the kernel has Landlock but it is not enabled (add `landlock` to the `lsm=` boot parameter)"
                .into(),
        ),
        Ok(LandlockStatus::NotImplemented) => {
            Offer::Unavailable("the kernel has no Landlock (Linux 6.12 or newer has it)".into())
        }
        Err(e) => Offer::Unavailable(format!("cannot ask the kernel about Landlock: {e}")),
    }
}

/// Whether a job asking for `wanted` is confined on a machine offering
/// `offer`; for `required` where it cannot be, why not (the offer's words).
pub fn decide(wanted: Confinement, offer: &Offer) -> Result<bool, &str> {
    match (wanted, offer) {
        (Confinement::None, _) => Ok(false),
        (_, Offer::Landlock { .. }) => Ok(true),
        (Confinement::Auto, Offer::Unavailable(_)) => Ok(false),
        (Confinement::Required, Offer::Unavailable(why)) => Err(why),
    }
}

/// Why this kernel cannot confine a worker's network (Landlock's TCP rules,
/// ABI 4, and seccomp): `None` when it can (docs/confinement.md#network).
pub fn net_unavailable(offer: &Offer) -> Option<String> {
    match offer {
        Offer::Unavailable(why) => Some(why.clone()),
        // Every ABI okstra confines with has TCP rules (4 < MIN_ABI).
        Offer::Landlock { .. } => seccomp::available().err(),
    }
}

/// Whether a confined job asking for `network` gets it on a machine
/// offering `offer`: `Ok(false)` where it runs with an open network (asked
/// for, or `auto` on a kernel that cannot); for `required` where it cannot
/// be, why not.
pub fn decide_net(
    wanted: Confinement,
    network: crate::vocab::NetworkMode,
    offer: &Offer,
) -> Result<bool, String> {
    if network == crate::vocab::NetworkMode::Open || wanted == Confinement::None {
        return Ok(false);
    }
    match (net_unavailable(offer), wanted) {
        (None, _) => Ok(true),
        (Some(why), Confinement::Required) => Err(why),
        (Some(_), _) => Ok(false),
    }
}

/// The directories a confined worker may write for a write policy: each
/// pattern's longest literal directory (`src/**` and `src/*.rs` give
/// `src`, `out/r.md` gives `out`, `**/x` gives the project root, written
/// ``), leaving out `skip` (files the wrapper writes, not the worker), and
/// any directory under another one listed.
pub fn policy_dirs(allow: &[String], skip: &[String]) -> Vec<String> {
    let skip: Vec<String> = skip.iter().filter_map(|s| policy::normalise(s)).collect();
    let mut dirs: Vec<String> = allow
        .iter()
        .filter_map(|p| policy::normalise(p))
        .filter(|p| !p.is_empty() && !skip.contains(p))
        .map(|p| literal_dir(&p))
        .collect();
    dirs.sort();
    dirs.dedup();
    // The project root (``) covers every relative directory, not the
    // absolute ones outside it (a worktree elsewhere).
    let covered = |d: &String, by: &String| {
        d != by
            && match by.as_str() {
                "" => !d.starts_with('/'),
                "/" => true,
                by => d.starts_with(&format!("{by}/")),
            }
    };
    let keep: Vec<String> = dirs
        .iter()
        .filter(|d| !dirs.iter().any(|by| covered(d, by)))
        .cloned()
        .collect();
    keep
}

/// The longest literal directory of a normalised pattern: its directory
/// part, cut before the first segment holding a wildcard.
fn literal_dir(pattern: &str) -> String {
    let segments: Vec<&str> = pattern.split('/').collect();
    let dir = &segments[..segments.len() - 1];
    let literal: Vec<&str> = dir
        .iter()
        .take_while(|s| !policy::is_glob(s))
        .copied()
        .collect();
    match literal.as_slice() {
        // `/x` (or a glob right under `/`): the root directory itself.
        [""] => "/".into(),
        parts => parts.join("/"),
    }
}

/// Why a worker's ruleset could not be made; nothing was restricted, and
/// the worker does not start.
#[derive(Debug, thiserror::Error)]
pub enum RulesetError {
    #[error("cannot build the Landlock ruleset: {0}")]
    Landlock(landlock::RulesetError),
    #[error("cannot open the project root: {0}")]
    Root(io::Error),
    /// A policy directory that cannot be made, or is reached through a
    /// symlink.
    #[error("cannot prepare the write directory {}: {source}", dir.display())]
    WriteDir { dir: PathBuf, source: io::Error },
    /// A directory outside the project (the TMPDIR, the provider's state).
    #[error("cannot prepare the directory {}: {source}", dir.display())]
    Outside { dir: PathBuf, source: io::Error },
    #[error("cannot build the seccomp filter: {0}")]
    Seccomp(io::Error),
}

/// A worker's network under confinement (docs/confinement.md#network).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// Not confined.
    Open,
    /// TCP connections to this port alone (the egress proxy's door on
    /// 127.0.0.1), no port bound, and only TCP sockets.
    Proxy(u16),
    /// No TCP connection and no port bound, only TCP sockets.
    None,
}

/// What a worker's ruleset governs besides writes, signals and abstract
/// unix sockets, which it always does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handled {
    /// Reads and execution: only what [`Grants::reads`] lists.
    pub reads: bool,
    /// TCP connect and bind, and (with seccomp) every other kind of socket.
    pub net: bool,
}

/// A ruleset built ahead, applied through [`Prepared::restriction`].
#[derive(Debug)]
pub struct Prepared {
    ruleset: RulesetCreated,
    filters: Option<seccomp::Filters>,
    /// `landlock-abi<N>`: what the dispatch row records.
    pub applied: &'static str,
    /// The directories granted for writing, for the log and the review.
    pub dirs: Vec<PathBuf>,
    /// What may be read, where reads are confined, for the log.
    pub reads: Option<Vec<PathBuf>>,
}

/// Where a confined worker may write.
pub struct Grants<'a> {
    /// The project root: `confine_dirs` are relative to it.
    pub root: &'a Path,
    /// Policy directories (relative to `root`, or absolute), created when
    /// missing, each component opened without following a symlink.
    pub confine_dirs: &'a [PathBuf],
    /// Directories outside the project (the private TMPDIR, the provider's
    /// state), created when missing.
    pub outside: &'a [PathBuf],
    /// What may be read and run besides the directories above, where reads
    /// are handled: directories or files; one that does not exist is left
    /// out (granting nothing).
    pub reads: &'a [PathBuf],
    /// The network, where it is handled.
    pub net: Net,
}

/// The part of a worker's ruleset that makes nothing: the rights handled,
/// the scopes, and the files every worker may write (its stdout and stderr,
/// the `/dev/null`-like devices). A gated wrapper begins it before exec's
/// go, off the attempt's critical path; [`Begun::finish`] adds the
/// directories, which may have to be made, after it.
#[derive(Debug)]
pub struct Begun {
    ruleset: RulesetCreated,
    abi: u8,
    handled: Handled,
    filters: Option<seccomp::Filters>,
}

impl Begun {
    /// Begin the ruleset for Landlock ABI `abi`, governing what `handled`
    /// says besides writes. A hard requirement: a kernel below ABI 6 fails
    /// here rather than confining less than it says.
    pub fn new(abi: u8, handled: Handled) -> Result<Begun, RulesetError> {
        let (stdout, stderr) = (io::stdout(), io::stderr());
        let devices = devices();
        let files = inherited_outputs([stdout.as_fd(), stderr.as_fd()])
            .into_iter()
            .chain(devices.iter().map(|fd| fd.as_fd()));
        let ruleset = ruleset(abi, handled, files).map_err(RulesetError::Landlock)?;
        // Below ABI 9 Landlock cannot tell a pathname unix socket the
        // worker made from another service's: no unix socket() at all then
        // (docs/confinement.md#network).
        let filters = handled
            .net
            .then(seccomp::Filters::cached)
            .transpose()
            .map_err(RulesetError::Seccomp)?;
        Ok(Begun {
            ruleset,
            abi,
            handled,
            filters,
        })
    }

    /// Whether the ruleset governs the network (see [`Handled`]).
    pub fn handles_net(&self) -> bool {
        self.handled.net
    }

    /// Create and open every granted directory and add it to the ruleset.
    /// Nothing is restricted yet.
    pub fn finish(self, grants: &Grants) -> Result<Prepared, RulesetError> {
        let root = std::fs::File::open(grants.root).map_err(RulesetError::Root)?;
        let mut dirs: Vec<(PathBuf, OwnedFd)> = Vec::new();
        for d in grants.confine_dirs {
            let fd =
                open_made_nofollow(root.as_fd(), d).map_err(|source| RulesetError::WriteDir {
                    dir: d.clone(),
                    source,
                })?;
            dirs.push((grants.root.join(d), fd));
        }
        for d in grants.outside {
            // Nearly always there already: made only when missing.
            let fd = match open_path(d) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(d).and_then(|()| open_path(d))
                }
                other => other,
            }
            .map_err(|source| RulesetError::Outside {
                dir: d.clone(),
                source,
            })?;
            dirs.push((d.clone(), fd));
        }
        let rights = Rights::new(self.abi, self.handled);
        let mut ruleset = grant_dirs(
            self.ruleset,
            rights.write | rights.read,
            dirs.iter().map(|(_, fd)| fd.as_fd()),
        )
        .map_err(RulesetError::Landlock)?;
        let mut reads = None;
        if self.handled.reads {
            let opened = reads::open_all(grants.reads);
            ruleset = grant_reads(ruleset, rights.read, &opened).map_err(RulesetError::Landlock)?;
            reads = Some(opened.iter().map(|o| o.path.clone()).collect());
        }
        if let (true, Net::Proxy(port)) = (self.handled.net, grants.net) {
            ruleset = ruleset
                .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
                .map_err(RulesetError::Landlock)?;
        }
        Ok(Prepared {
            ruleset,
            filters: self.filters,
            applied: if self.abi >= 7 {
                "landlock-abi7"
            } else {
                "landlock-abi6"
            },
            dirs: dirs.into_iter().map(|(p, _)| p).collect(),
            reads,
        })
    }
}

/// The file-system rights of a ruleset.
struct Rights {
    write: BitFlags<AccessFs>,
    /// Empty where reads are not handled.
    read: BitFlags<AccessFs>,
}

impl Rights {
    fn new(abi: u8, handled: Handled) -> Rights {
        let level = level(abi);
        Rights {
            write: AccessFs::from_write(level),
            read: if handled.reads {
                AccessFs::from_read(level)
            } else {
                BitFlags::EMPTY
            },
        }
    }
}

impl Prepared {
    /// [`Begun::new`], then [`Begun::finish`].
    pub fn build(grants: &Grants, abi: u8, handled: Handled) -> Result<Prepared, RulesetError> {
        Begun::new(abi, handled)?.finish(grants)
    }

    /// The ruleset, to be handed to the thread that restricts itself.
    pub fn restriction(&self) -> io::Result<Restriction> {
        Ok(Restriction {
            ruleset: self.ruleset.try_clone()?,
            filters: self.filters.clone(),
        })
    }
}

/// A [`Prepared`] ruleset on its way to the thread it binds.
#[derive(Debug)]
pub struct Restriction {
    ruleset: RulesetCreated,
    filters: Option<seccomp::Filters>,
}

impl Restriction {
    /// Restrict the calling thread for good (`no_new_privs`, the ruleset,
    /// then the seccomp filter where the network is confined), and so every
    /// process it starts from now on; the process's other threads are left
    /// as they were (neither all-threads flag is asked for). Call it on a
    /// thread made for the purpose.
    pub fn restrict_this_thread(self) -> io::Result<()> {
        self.ruleset.restrict_self().map_err(io::Error::other)?;
        match self.filters {
            Some(filters) => filters.apply_to_this_thread(),
            None => Ok(()),
        }
    }
}

/// Every write right of ABI 6–7 handled, and granted, as file rights, on
/// `files`; signals and abstract unix sockets scoped. A hard requirement:
/// a kernel below ABI 6 fails here rather than confining less than it says.
fn ruleset<'a>(
    abi: u8,
    handled: Handled,
    files: impl Iterator<Item = BorrowedFd<'a>>,
) -> Result<RulesetCreated, landlock::RulesetError> {
    let level = level(abi);
    let rights = Rights::new(abi, handled);
    let file_rights = (rights.write | rights.read) & AccessFs::from_file(level);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(rights.write | rights.read)?;
    if handled.net {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let mut created = ruleset.scope(Scope::from_all(level))?.create()?;
    for fd in files {
        created = created.add_rule(PathBeneath::new(fd, file_rights))?;
    }
    Ok(created)
}

/// `ruleset` with `rights` granted under `dirs`.
fn grant_dirs<'a>(
    mut ruleset: RulesetCreated,
    rights: BitFlags<AccessFs>,
    dirs: impl Iterator<Item = BorrowedFd<'a>>,
) -> Result<RulesetCreated, landlock::RulesetError> {
    for fd in dirs {
        ruleset = ruleset.add_rule(PathBeneath::new(fd, rights))?;
    }
    Ok(ruleset)
}

/// `ruleset` with the `read` rights granted on each of `paths`: under a
/// directory, or on a file (the rights a file can have).
fn grant_reads(
    mut ruleset: RulesetCreated,
    read: BitFlags<AccessFs>,
    paths: &[std::sync::Arc<reads::Opened>],
) -> Result<RulesetCreated, landlock::RulesetError> {
    for p in paths {
        let rights = if p.is_dir {
            read
        } else {
            read & AccessFs::from_file(ABI::V1)
        };
        ruleset = ruleset.add_rule(PathBeneath::new(p.fd.as_fd(), rights))?;
    }
    Ok(ruleset)
}

fn level(abi: u8) -> ABI {
    if abi >= 7 {
        ABI::V7
    } else {
        ABI::V6
    }
}

/// `dir` (relative to `root`, or absolute) opened as an `O_PATH`
/// descriptor, each missing component created, no component followed if
/// it is a symlink: a rule is never redirected, nor widened to an
/// existing ancestor.
fn open_made_nofollow(root: BorrowedFd, dir: &Path) -> io::Result<OwnedFd> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // A relative walk starts at `root` itself, not at a descriptor of it
    // opened again.
    let mut at: Option<OwnedFd> = if dir.is_absolute() {
        Some(rustix::fs::open("/", flags, Mode::empty())?)
    } else {
        None
    };
    for c in dir.components() {
        let name = match c {
            Component::Normal(name) => name,
            Component::RootDir | Component::CurDir => continue,
            Component::ParentDir | Component::Prefix(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a write directory may not climb with `..`",
                ))
            }
        };
        let parent = at.as_ref().map_or(root, |fd| fd.as_fd());
        let next = match rustix::fs::openat(parent, name, flags, Mode::empty()) {
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => return Err(e.into()),
                }
                rustix::fs::openat(parent, name, flags, Mode::empty())
            }
            other => other,
        };
        let next = next.map_err(|e| match e {
            Errno::LOOP | Errno::NOTDIR => io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "`{}` is a symlink or not a directory: a write directory is never a redirect",
                    name.to_string_lossy()
                ),
            ),
            e => e.into(),
        })?;
        at = Some(next);
    }
    match at {
        Some(fd) => Ok(fd),
        // The project root itself (``).
        None => Ok(rustix::fs::openat(root, ".", flags, Mode::empty())?),
    }
}

/// `path` as an `O_PATH` descriptor, what a Landlock rule is made from.
pub(crate) fn open_path(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Of `outputs` (the wrapper's stdout and stderr, which the worker
/// inherits), those that are regular files (the log) or terminals (a
/// pane): reopening them by path (`/dev/stderr`, `/proc/self/fd/2`) lands
/// on them, and must work. A rule is made from the descriptor itself:
/// Landlock takes the file it is open on, as it would from a descriptor
/// of the same file opened again through `/proc/self/fd`.
fn inherited_outputs(outputs: [BorrowedFd; 2]) -> Vec<BorrowedFd> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    for file in outputs {
        let Ok(stat) = rustix::fs::fstat(file) else {
            continue;
        };
        let kind = rustix::fs::FileType::from_raw_mode(stat.st_mode);
        // stdout and stderr are nearly always the same log: one rule.
        let id = (stat.st_dev, stat.st_ino);
        if matches!(
            kind,
            rustix::fs::FileType::RegularFile | rustix::fs::FileType::CharacterDevice
        ) && !seen.contains(&id)
        {
            seen.push(id);
            out.push(file);
        }
    }
    out
}

/// The `/dev/null`-like devices that exist here.
fn devices() -> Vec<OwnedFd> {
    DEVICES
        .iter()
        .filter_map(|d| open_path(Path::new(d)).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dirs(allow: &[&str], skip: &[&str]) -> Vec<String> {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        policy_dirs(&s(allow), &s(skip))
    }

    #[test]
    fn each_pattern_grants_its_longest_literal_directory() {
        assert_eq!(dirs(&["src/**"], &[]), ["src"]);
        assert_eq!(dirs(&["src/*.rs", "docs/a/b.md"], &[]), ["docs/a", "src"]);
        assert_eq!(dirs(&["src/{a,b}/x.rs"], &[]), ["src"]);
        assert_eq!(dirs(&["/wt/abs/**"], &[]), ["/wt/abs"]);
        assert_eq!(dirs(&["a/*/b/c"], &[]), ["a"]);
        // A wildcard in the first segment, or a file at the top: the root.
        assert_eq!(dirs(&["**/*.rs", "src/**"], &[]), [""]);
        assert_eq!(dirs(&["result.md"], &[]), [""]);
        // The root does not cover a worktree outside the project.
        assert_eq!(dirs(&["r.md", "/wt/**"], &[]), ["", "/wt"]);
    }

    #[test]
    fn nested_and_repeated_directories_fold_and_skipped_files_go() {
        assert_eq!(
            dirs(
                &[
                    "results/a.md",
                    "results/a.md.audit.json",
                    "results/deep/x.md",
                    "prompts/a.md.log",
                    "prompts/a.md.status.json",
                ],
                &["prompts/a.md.log", "./prompts/a.md.status.json"]
            ),
            ["results"]
        );
        // `srcx` is not under `src`.
        assert_eq!(dirs(&["src/**", "srcx/**"], &[]), ["src", "srcx"]);
    }

    #[test]
    fn required_is_refused_only_where_nothing_is_offered() {
        let here = Offer::Landlock { abi: 7 };
        let none = Offer::Unavailable("no".into());
        assert_eq!(decide(Confinement::Auto, &here), Ok(true));
        assert_eq!(decide(Confinement::Required, &here), Ok(true));
        assert_eq!(decide(Confinement::None, &here), Ok(false));
        assert_eq!(decide(Confinement::Auto, &none), Ok(false));
        assert_eq!(decide(Confinement::None, &none), Ok(false));
        assert_eq!(decide(Confinement::Required, &none), Err("no"));
        assert_eq!(here.applied(), "landlock-abi7");
        assert_eq!(Offer::Landlock { abi: 6 }.applied(), "landlock-abi6");
        assert_eq!(none.applied(), "none");
    }

    #[test]
    fn a_write_directory_is_made_but_never_reached_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::File::open(dir.path()).unwrap();
        open_made_nofollow(root.as_fd(), Path::new("a/b/c")).unwrap();
        assert!(dir.path().join("a/b/c").is_dir());
        std::fs::create_dir(dir.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink("elsewhere", dir.path().join("link")).unwrap();
        let err = open_made_nofollow(root.as_fd(), Path::new("link/new")).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");
        assert!(!dir.path().join("elsewhere/new").exists());
        assert!(open_made_nofollow(root.as_fd(), Path::new("a/../x")).is_err());
        // The project root itself (a pattern at the top grants ``).
        let top = open_made_nofollow(root.as_fd(), Path::new("")).unwrap();
        let (a, b) = (
            rustix::fs::fstat(&top).unwrap(),
            rustix::fs::fstat(&root).unwrap(),
        );
        assert_eq!((a.st_dev, a.st_ino), (b.st_dev, b.st_ino));
    }

    #[test]
    fn outputs_that_are_files_or_terminals_are_granted_once() {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let (read, _write) = std::io::pipe().unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        // stdout and stderr the same log: one rule.
        assert_eq!(inherited_outputs([log.as_fd(), log.as_fd()]).len(), 1);
        // A pipe is no file to reopen: no rule.
        assert_eq!(inherited_outputs([read.as_fd(), log.as_fd()]).len(), 1);
        assert_eq!(inherited_outputs([log.as_fd(), null.as_fd()]).len(), 2);
    }
}
