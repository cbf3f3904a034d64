//! The words a job is described in: backend, mutation audit, confinement,
//! dispatch kind, role and audience; and the word an attempt's failure is
//! told by (failure kind). Each is a type serialised to its wire name, parsed once
//! where an input is read (compile) and matched on everywhere past it.
//!
//! Backend, mutation audit and confinement are closed vocabularies. Dispatch kind, role
//! and audience are open: users may write any kind, role or audience, so
//! the types name the words okstra acts on and carry any other word as
//! written. The provider vocabulary is [`crate::provider::Provider`]; the
//! status vocabularies are [`crate::state::WorkerStatus`] and
//! [`crate::state::attempts::AttemptStatus`].

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// How a job's wrapper is started (docs/exec.md#running-a-stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// A child process in its own process group.
    CliWrapper,
    /// A terminal multiplexer pane, where the manifest allows; degrades to
    /// `cli-wrapper` when no multiplexer answers.
    Pane,
    /// A Slurm batch job (docs/slurm.md#running-on-slurm): the wrapper runs on
    /// a compute node, submitted with `sbatch`, the project root on a shared
    /// filesystem.
    Slurm,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::CliWrapper => "cli-wrapper",
            Backend::Pane => "pane",
            Backend::Slurm => "slurm",
        }
    }

    /// The backend a job gets when it names none: panes where the manifest's
    /// `terminalBackend` asks for them, the CLI wrapper otherwise.
    pub fn for_terminal(terminal_backend: &str) -> Backend {
        match terminal_backend {
            "pane" | "tmux-pane" | "cmux-pane" => Backend::Pane,
            _ => Backend::CliWrapper,
        }
    }
}

/// When the mutation audit runs (docs/audit.md#the-mutation-audit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MutationAudit {
    /// Snapshot the project before the batch, compare after (the default).
    #[serde(rename = "batch")]
    Batch,
    /// No audit. Wire name `none`.
    #[serde(rename = "none")]
    Off,
}

impl MutationAudit {
    pub fn as_str(self) -> &'static str {
        match self {
            MutationAudit::Batch => "batch",
            MutationAudit::Off => "none",
        }
    }
}

/// Whether a job's worker is confined by the kernel
/// (docs/confinement.md#kernel-confinement).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confinement {
    /// Confined where the kernel offers Landlock ABI 6 or newer, otherwise
    /// not (said in the plan review and by doctor).
    #[default]
    Auto,
    /// Confined, or not run at all: exec refuses the plan
    /// (`exec/confinement-unavailable`) where the kernel cannot.
    Required,
    /// Never confined; the mutation audit alone judges the writes.
    None,
}

impl Confinement {
    pub fn as_str(self) -> &'static str {
        match self {
            Confinement::Auto => "auto",
            Confinement::Required => "required",
            Confinement::None => "none",
        }
    }
}

impl fmt::Display for Confinement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Confinement {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        from_wire(s).ok_or_else(|| UnknownWord::closed("confinement", s))
    }
}

/// The network a confined worker may reach (docs/confinement.md#network);
/// a spec's `{ allow = [...] }` is `provider` with hosts added.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkMode {
    /// Through the run's egress proxy, to the provider's API hosts (and
    /// those the spec adds) alone: the default of a confined job.
    #[default]
    Provider,
    /// No connection at all.
    None,
    /// Not confined.
    Open,
}

impl NetworkMode {
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::Provider => "provider",
            NetworkMode::None => "none",
            NetworkMode::Open => "open",
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NetworkMode {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        from_wire(s).ok_or_else(|| UnknownWord::closed("network", s))
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for MutationAudit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parse a closed vocabulary from its wire name (serde's own reading, so the
/// names are written once, in the derive).
fn from_wire<T: serde::de::DeserializeOwned>(s: &str) -> Option<T> {
    T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s)).ok()
}

impl FromStr for Backend {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        from_wire(s).ok_or_else(|| UnknownWord::closed("backend", s))
    }
}

impl FromStr for MutationAudit {
    type Err = UnknownWord;
    fn from_str(s: &str) -> Result<Self, UnknownWord> {
        from_wire(s).ok_or_else(|| UnknownWord::closed("mutation audit", s))
    }
}

/// A word a vocabulary does not hold: a closed vocabulary's unknown word, or
/// a `dispatchKind` that starts `reverify-r` without a round
/// (`rules/reverify-kind`, docs/spec-format.md#batch-rules). It names the word as written
/// and what was expected in its place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnknownWord {
    /// Not a wire name of the closed vocabulary `vocabulary`.
    #[error("unknown {vocabulary} `{word}`")]
    Closed {
        vocabulary: &'static str,
        word: String,
    },
    /// A `reverify-r...` kind whose round is not digits making N >= 1.
    #[error("dispatchKind `{0}` is not reverify-r<N> with a round N >= 1")]
    ReverifyKind(String),
}

impl UnknownWord {
    fn closed(vocabulary: &'static str, word: &str) -> Self {
        UnknownWord::Closed {
            vocabulary,
            word: word.to_string(),
        }
    }
}

/// What a dispatch is for (`dispatchKind`): `initial`, `reverify-r<N>` for
/// re-verification round N, or any other kind, which is round 1. The text
/// is kept as written (`reverify-r02` stays `reverify-r02`): the metadata's
/// kind is compared with it, and a plan must serialise as it was written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DispatchKind {
    text: String,
    round: u64,
}

impl DispatchKind {
    pub const INITIAL: &'static str = "initial";

    /// The default kind.
    pub fn initial() -> Self {
        DispatchKind {
            text: Self::INITIAL.into(),
            round: 1,
        }
    }

    /// Any kind but a malformed `reverify-r...` (`rules/reverify-kind`,
    /// whose message this returns): `reverify-r<N>` needs N >= 1, digits
    /// only.
    pub fn parse(text: &str) -> Result<Self, UnknownWord> {
        let round = match text.strip_prefix("reverify-r") {
            None => 1,
            Some(rest) => rest
                .bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| rest.parse::<u64>().ok())
                .flatten()
                .filter(|n| *n >= 1)
                .ok_or_else(|| UnknownWord::ReverifyKind(text.to_string()))?,
        };
        Ok(DispatchKind {
            text: text.to_string(),
            round,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The re-verification round: N for `reverify-r<N>`, else 1.
    pub fn round(&self) -> u64 {
        self.round
    }
}

impl fmt::Display for DispatchKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for DispatchKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for DispatchKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        DispatchKind::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Declares an open vocabulary: the words okstra acts on as variants, any
/// other word kept as written in `Other`. Built only through `From`, so a
/// known word is never an `Other`.
macro_rules! open_vocabulary {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $wire:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
            /// Any other word, as written.
            Other(String),
        }

        impl $name {
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $wire,)+
                    $name::Other(s) => s,
                }
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                match s {
                    $($wire => $name::$variant,)+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                match $name::from(s.as_str()) {
                    $name::Other(_) => $name::Other(s),
                    known => known,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d).map($name::from)
            }
        }
    };
}

open_vocabulary! {
    /// A job's role: what its write policy and batch rules go by.
    Role {
        /// Writes its worktree and planned paths besides its artifacts.
        Implementer = "implementer",
        /// May write below its declared auxiliary roots.
        Verifier = "verifier",
        /// May write only under `.okstra/`.
        Leader = "leader",
        /// Runs alone, in the last stage.
        ReportWriter = "report-writer",
        /// Planned only from its reservation; has no workers[] row.
        Translator = "translator",
    }
}

open_vocabulary! {
    /// Whom a job's result is for: what the phase-order rule goes by.
    Audience {
        ImplementationExecutor = "implementation-executor",
        ImplementationVerifier = "implementation-verifier",
    }
}

open_vocabulary! {
    /// What kind of failure ended an attempt, in one word
    /// (docs/providers.md#failure-kinds): on the wrapper's status sidecar, the
    /// `worker-failed` event and the dispatch row. Open, since a sidecar or log
    /// written by another okstra may name a kind this one does not.
    FailureKind {
        /// The CLI refused its command line, or the wrapper its arguments.
        ArgumentError = "argument-error",
        /// No credentials: log the CLI in first.
        NotLoggedIn = "not-logged-in",
        /// The model API refused the credentials the CLI sent (a wrong,
        /// expired or revoked key or token): check that key.
        CredentialsRefused = "credentials-refused",
        /// The model API answered with an error, or could not be reached.
        ApiError = "api-error",
        /// gemini's fatal codes besides auth: input, sandbox, config, turn limit.
        CliError = "cli-error",
        /// The command was not found or could not be executed.
        CliNotFound = "cli-not-found",
        /// The confinement asked for, or the attempt's private directory
        /// and CLI state, could not be made: nothing started.
        ConfinementFailed = "confinement-failed",
        /// The provider reported a model the selection does not allow.
        ServedModelMismatch = "served-model-mismatch",
        /// A wall-clock or idle timeout, or the backend's time limit.
        Timeout = "timeout",
        /// Its spend crossed its own budget or the run's
        /// (docs/exec.md#budgets): stopped, never retried.
        BudgetExceeded = "budget-exceeded",
        /// exec was interrupted while the attempt ran.
        Interrupted = "interrupted",
        /// The attempt ended while no exec watched it, without an exit code.
        Lost = "lost",
        /// The attempt's wrapper could not be started.
        LaunchFailed = "launch-failed",
        /// The backend cancelled it (a Slurm `scancel`).
        Cancelled = "cancelled",
        /// It exited 0 without every completion artifact.
        MissingArtifact = "missing-artifact",
        /// A non-zero exit whose audit-sidecar contract does not hold.
        AuditSidecar = "audit-sidecar",
        /// The mutation audit could not vouch for the tree.
        AuditIncomplete = "audit-incomplete",
        /// The mutation audit found writes outside the write policy.
        WritePolicy = "write-policy",
        /// exec could not make, commit or keep the attempt's git worktree
        /// (docs/worktrees.md#running).
        Worktree = "worktree",
        /// A non-zero exit of no kind more precise.
        Exit = "exit",
    }
}

impl FailureKind {
    /// Whether the harness, not the worker, is to blame: the attempt was
    /// stopped, lost, never started, or could not be judged (JUnit calls
    /// these errors, the rest failures).
    pub fn is_harness(&self) -> bool {
        matches!(
            self,
            FailureKind::Interrupted
                | FailureKind::LaunchFailed
                | FailureKind::Lost
                | FailureKind::AuditIncomplete
                | FailureKind::CliNotFound
                | FailureKind::Worktree
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    #[test]
    fn a_failure_kind_keeps_its_wire_word_and_any_other_word_as_written() {
        for word in [
            "timeout",
            "not-logged-in",
            "credentials-refused",
            "write-policy",
            "exit",
        ] {
            let kind = FailureKind::from(word);
            assert!(!matches!(kind, FailureKind::Other(_)), "{word}");
            assert_eq!(json!(kind), json!(word));
        }
        let newer: FailureKind = serde_json::from_value(json!("quota-exceeded")).unwrap();
        assert_eq!(newer, FailureKind::Other("quota-exceeded".into()));
        assert_eq!(json!(newer), json!("quota-exceeded"));
        assert!(FailureKind::Lost.is_harness() && !FailureKind::Timeout.is_harness());
    }

    #[test]
    fn closed_vocabularies_use_their_wire_names() {
        for (b, wire) in [
            (Backend::CliWrapper, "cli-wrapper"),
            (Backend::Pane, "pane"),
            (Backend::Slurm, "slurm"),
        ] {
            assert_eq!(b.as_str(), wire);
            assert_eq!(serde_json::to_value(b).unwrap(), json!(wire));
            assert_eq!(wire.parse::<Backend>(), Ok(b));
        }
        for (m, wire) in [
            (MutationAudit::Batch, "batch"),
            (MutationAudit::Off, "none"),
        ] {
            assert_eq!(m.as_str(), wire);
            assert_eq!(serde_json::to_value(m).unwrap(), json!(wire));
            assert_eq!(wire.parse::<MutationAudit>(), Ok(m));
        }
        for (c, wire) in [
            (Confinement::Auto, "auto"),
            (Confinement::Required, "required"),
            (Confinement::None, "none"),
        ] {
            assert_eq!(c.as_str(), wire);
            assert_eq!(serde_json::to_value(c).unwrap(), json!(wire));
            assert_eq!(wire.parse::<Confinement>(), Ok(c));
        }
        assert_eq!(Confinement::default(), Confinement::Auto);
        assert!("tmux".parse::<Backend>().is_err());
        assert!("Batch".parse::<MutationAudit>().is_err());
    }

    #[test]
    fn an_unknown_word_reads_as_it_always_did() {
        let said = |e: UnknownWord| e.to_string();
        assert_eq!(
            said("tmux".parse::<Backend>().unwrap_err()),
            "unknown backend `tmux`"
        );
        assert_eq!(
            said("Batch".parse::<MutationAudit>().unwrap_err()),
            "unknown mutation audit `Batch`"
        );
        assert_eq!(
            said("strict".parse::<Confinement>().unwrap_err()),
            "unknown confinement `strict`"
        );
        assert_eq!(
            said(DispatchKind::parse("reverify-rx").unwrap_err()),
            "dispatchKind `reverify-rx` is not reverify-r<N> with a round N >= 1"
        );
    }

    #[test]
    fn terminal_backends_that_mean_panes() {
        for t in ["pane", "tmux-pane", "cmux-pane"] {
            assert_eq!(Backend::for_terminal(t), Backend::Pane);
        }
        for t in ["", "cli-wrapper", "tmux", "Pane"] {
            assert_eq!(Backend::for_terminal(t), Backend::CliWrapper);
        }
    }

    #[test]
    fn rounds() {
        let round = |k: &str| DispatchKind::parse(k).map(|k| k.round());
        assert_eq!(round("initial"), Ok(1));
        assert_eq!(round("reverify-r1"), Ok(1));
        assert_eq!(round("reverify-r12"), Ok(12));
        assert_eq!(round("follow-up"), Ok(1));
        assert_eq!(round(""), Ok(1));
        for bad in [
            "reverify-r",
            "reverify-r0",
            "reverify-rx",
            "reverify-r-1",
            "reverify-r1a",
            "reverify-r+1",
        ] {
            assert!(DispatchKind::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            DispatchKind::parse("reverify-r0").unwrap_err().to_string(),
            "dispatchKind `reverify-r0` is not reverify-r<N> with a round N >= 1"
        );
    }

    #[test]
    fn dispatch_kinds_keep_their_text() {
        let k = DispatchKind::parse("reverify-r02").unwrap();
        assert_eq!((k.as_str(), k.round()), ("reverify-r02", 2));
        assert_eq!(serde_json::to_value(&k).unwrap(), json!("reverify-r02"));
        let back: DispatchKind = serde_json::from_value(json!("reverify-r02")).unwrap();
        assert_eq!(back, k);
        assert!(serde_json::from_value::<DispatchKind>(json!("reverify-r0")).is_err());
        assert_eq!(
            DispatchKind::initial(),
            DispatchKind::parse("initial").unwrap()
        );
    }

    #[test]
    fn open_vocabularies_know_their_words_and_keep_the_rest() {
        assert_eq!(Role::from("implementer"), Role::Implementer);
        assert_eq!(Role::from("report-writer".to_string()), Role::ReportWriter);
        assert_eq!(Role::from("analyst"), Role::Other("analyst".into()));
        // Case matters, as it always did.
        assert_eq!(Role::from("Verifier"), Role::Other("Verifier".into()));
        for wire in ["leader", "translator", "reviewer", ""] {
            let role = Role::from(wire);
            assert_eq!(role.as_str(), wire);
            assert_eq!(serde_json::to_value(&role).unwrap(), Value::from(wire));
            assert_eq!(serde_json::from_value::<Role>(json!(wire)).unwrap(), role);
        }
        assert_eq!(
            Audience::from("implementation-verifier"),
            Audience::ImplementationVerifier
        );
        assert_eq!(Audience::from("analysis").as_str(), "analysis");
    }
}
