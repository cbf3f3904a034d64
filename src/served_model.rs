//! Served-model verification (docs/providers.md#the-served-model): where a
//! provider reports the model that actually served an attempt, it must be the
//! selected one — exactly for a pinned selection, by provider and channel
//! family for a channel. Pure, over the manifest's model catalog, so the
//! wrapper can call it with what it observed and exit
//! [`WrapperExit::ServedModelMismatch`](crate::diag::WrapperExit) on `Err`.

use crate::model::{str_of, Manifest, VersionKind};

/// How precisely the provider told us what served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttestationLevel {
    /// The provider does not say: nothing to check.
    Unknown,
    /// An exact model version (a pinned catalog entry).
    Exact,
    /// A channel (a moving alias such as `sonnet`).
    Channel,
}

impl AttestationLevel {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "unknown" => Some(Self::Unknown),
            "exact" => Some(Self::Exact),
            "channel" => Some(Self::Channel),
            _ => None,
        }
    }
}

/// What the wrapper observed: the level, and the catalog key (`models{}`)
/// the reported model normalises to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attestation {
    pub level: AttestationLevel,
    pub observed_model_ref: String,
}

/// Why a served model is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    /// No selected model, no observed model, or either is not in the catalog.
    #[error("served model differs from the selected model: {0}")]
    Unresolvable(String),
    /// The attestation claims a level the observed catalog entry cannot have
    /// (`exact` for a channel entry, `channel` for a pinned one).
    #[error("served-model attestation level {claimed:?} is inconsistent with the observed model's versionKind `{observed_kind}`")]
    InconsistentLevel {
        claimed: AttestationLevel,
        observed_kind: String,
    },
    /// A pinned selection served by another model.
    #[error("pinned model `{selected}` was selected but `{observed}` served")]
    PinnedDiffers { selected: String, observed: String },
    /// A channel selection served by another provider or channel family.
    #[error("channel model `{selected}` was selected but `{observed}` served, from another provider or channel family")]
    ChannelDiffers { selected: String, observed: String },
}

/// Check an attempt's served model against its selection (`selected_ref`,
/// the role execution's `modelRef`).
pub fn verify(manifest: &Manifest, selected_ref: &str, att: &Attestation) -> Result<(), Mismatch> {
    if att.level == AttestationLevel::Unknown {
        return Ok(());
    }
    if selected_ref.is_empty() || att.observed_model_ref.is_empty() {
        return Err(Mismatch::Unresolvable(
            "the selection or the observation names no model".into(),
        ));
    }
    let selected = manifest.model(selected_ref).ok_or_else(|| {
        Mismatch::Unresolvable(format!(
            "selected model `{selected_ref}` is not in the catalog"
        ))
    })?;
    let observed = manifest.model(&att.observed_model_ref).ok_or_else(|| {
        Mismatch::Unresolvable(format!(
            "observed model `{}` is not in the catalog",
            att.observed_model_ref
        ))
    })?;
    let expected = level_of(observed);
    if att.level != expected {
        return Err(Mismatch::InconsistentLevel {
            claimed: att.level,
            observed_kind: str_of(observed, "versionKind").to_string(),
        });
    }
    if VersionKind::of(selected) == Some(VersionKind::Pinned) {
        return if selected_ref == att.observed_model_ref {
            Ok(())
        } else {
            Err(Mismatch::PinnedDiffers {
                selected: selected_ref.to_string(),
                observed: att.observed_model_ref.clone(),
            })
        };
    }
    if selected_ref == att.observed_model_ref {
        // The selected channel entry itself served.
        return Ok(());
    }
    let family = str_of(selected, "channelFamily");
    if str_of(selected, "provider") != str_of(observed, "provider")
        || family.is_empty()
        || family != str_of(observed, "channelFamily")
    {
        return Err(Mismatch::ChannelDiffers {
            selected: selected_ref.to_string(),
            observed: att.observed_model_ref.clone(),
        });
    }
    Ok(())
}

/// The level a catalog entry attests when it is what served: a channel
/// entry a channel, anything else an exact version.
fn level_of(entry: &serde_json::Value) -> AttestationLevel {
    match VersionKind::of(entry) {
        Some(VersionKind::Channel) => AttestationLevel::Channel,
        Some(VersionKind::Pinned) | None => AttestationLevel::Exact,
    }
}

/// What a provider CLI's report of the model that served (`observed`, the
/// name it printed) attests, normalised against the catalog: the catalog
/// entry it names (by key or `modelId`, preferring the selection's provider)
/// at that entry's level; or, for a channel selection, a name of the
/// channel's family (`<channelFamily>` or `<channelFamily>-...`) that the CLI
/// resolved the channel to; anything else names an uncatalogued model.
pub fn attest(manifest: &Manifest, selected_ref: &str, observed: &str) -> Attestation {
    let observed = observed.trim();
    if observed.is_empty() || observed.eq_ignore_ascii_case("unknown") {
        return Attestation {
            level: AttestationLevel::Unknown,
            observed_model_ref: String::new(),
        };
    }
    let selected = manifest.model(selected_ref);
    let provider = selected.map(|m| str_of(m, "provider")).unwrap_or("");
    let models = manifest.doc.get("models").and_then(|m| m.as_object());
    let mut named: Vec<(&String, &serde_json::Value)> = models
        .into_iter()
        .flatten()
        .filter(|(key, m)| key.as_str() == observed || str_of(m, "modelId") == observed)
        .collect();
    named.sort_by_key(|(key, m)| (str_of(m, "provider") != provider, key.as_str() != observed));
    if let Some((key, entry)) = named.first() {
        return Attestation {
            level: level_of(entry),
            observed_model_ref: key.to_string(),
        };
    }
    if let Some(sel) = selected.filter(|m| VersionKind::of(m) == Some(VersionKind::Channel)) {
        let family = str_of(sel, "channelFamily");
        let in_family = !family.is_empty()
            && observed
                .strip_prefix(family)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'));
        if in_family {
            return Attestation {
                level: AttestationLevel::Channel,
                observed_model_ref: selected_ref.to_string(),
            };
        }
    }
    Attestation {
        level: AttestationLevel::Exact,
        observed_model_ref: observed.to_string(),
    }
}

/// The wrapper's check: the model a CLI reported against the selection.
pub fn check_observed(
    manifest: &Manifest,
    selected_ref: &str,
    observed: &str,
) -> Result<(), Mismatch> {
    verify(
        manifest,
        selected_ref,
        &attest(manifest, selected_ref, observed),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use AttestationLevel::*;

    fn catalog() -> serde_json::Value {
        json!({"models": {
            "opus-4":      {"provider": "claude", "modelId": "claude-opus-4-0", "versionKind": "pinned", "channelFamily": "opus"},
            "opus-4-1":    {"provider": "claude", "modelId": "claude-opus-4-1", "versionKind": "pinned", "channelFamily": "opus"},
            "sonnet":      {"provider": "claude", "modelId": "sonnet", "versionKind": "channel", "channelFamily": "sonnet"},
            "sonnet-next": {"provider": "claude", "modelId": "sonnet-next", "versionKind": "channel", "channelFamily": "sonnet"},
            "opus":        {"provider": "claude", "modelId": "opus", "versionKind": "channel", "channelFamily": "opus"},
            "gpt-sonnet":  {"provider": "codex", "modelId": "gpt", "versionKind": "channel", "channelFamily": "sonnet"},
            "nofamily":    {"provider": "claude", "modelId": "x", "versionKind": "channel", "channelFamily": ""},
            "nofamily-2":  {"provider": "claude", "modelId": "y", "versionKind": "channel", "channelFamily": ""}
        }})
    }

    fn check(selected: &str, level: AttestationLevel, observed: &str) -> Result<(), Mismatch> {
        let doc = catalog();
        let m = Manifest::new(&doc);
        verify(
            &m,
            selected,
            &Attestation {
                level,
                observed_model_ref: observed.into(),
            },
        )
    }

    /// The whole table of docs/providers.md#the-served-model, one row per case.
    #[test]
    fn the_served_model_table() {
        type Row = (&'static str, AttestationLevel, &'static str, bool);
        let table: &[Row] = &[
            // unknown passes, whatever was selected or reported
            ("opus-4", Unknown, "", true),
            ("opus-4", Unknown, "sonnet", true),
            ("", Unknown, "", true),
            // pinned: exactly the same catalog entry
            ("opus-4", Exact, "opus-4", true),
            ("opus-4", Exact, "opus-4-1", false),
            ("opus-4", Channel, "opus", false),
            // channel: same provider and channel family
            ("sonnet", Channel, "sonnet", true),
            ("sonnet", Channel, "sonnet-next", true),
            ("sonnet", Channel, "opus", false),
            ("sonnet", Channel, "gpt-sonnet", false),
            ("nofamily", Channel, "nofamily-2", false),
            // a channel selection served by a pinned version of the family:
            // the family decides
            ("opus", Exact, "opus-4", true),
            ("sonnet", Exact, "opus-4", false),
            // attestation level inconsistent with the observed entry
            ("opus-4", Channel, "opus-4", false),
            ("sonnet", Exact, "sonnet", false),
            // unresolvable
            ("opus-4", Exact, "", false),
            ("", Exact, "opus-4", false),
            ("opus-4", Exact, "not-in-catalog", false),
            ("not-in-catalog", Exact, "opus-4", false),
        ];
        for &(selected, level, observed, passes) in table {
            let got = check(selected, level, observed);
            assert_eq!(
                got.is_ok(),
                passes,
                "{selected} / {level:?} / {observed}: {got:?}"
            );
        }
    }

    #[test]
    fn mismatch_kinds() {
        assert!(matches!(
            check("opus-4", Channel, "opus-4"),
            Err(Mismatch::InconsistentLevel { .. })
        ));
        assert!(matches!(
            check("opus-4", Exact, "opus-4-1"),
            Err(Mismatch::PinnedDiffers { .. })
        ));
        assert!(matches!(
            check("sonnet", Channel, "gpt-sonnet"),
            Err(Mismatch::ChannelDiffers { .. })
        ));
        assert!(matches!(
            check("opus-4", Exact, "nope"),
            Err(Mismatch::Unresolvable(_))
        ));
        assert!(check("opus-4", Exact, "opus-4-1")
            .unwrap_err()
            .to_string()
            .contains("`opus-4-1` served"));
        assert_eq!(AttestationLevel::parse("channel"), Some(Channel));
        assert_eq!(AttestationLevel::parse("pinned"), None);
    }

    #[test]
    fn observed_names_are_attested_against_the_catalog() {
        let doc = json!({"models": {
            "pinned": {"provider": "claude", "modelId": "claude-sonnet-4-5-20250929", "versionKind": "pinned", "channelFamily": "claude-sonnet"},
            "channel": {"provider": "claude", "modelId": "sonnet", "versionKind": "channel", "channelFamily": "claude-sonnet"},
            "opus": {"provider": "claude", "modelId": "claude-opus-4-1", "versionKind": "pinned", "channelFamily": "claude-opus"},
            "other": {"provider": "gemini", "modelId": "claude-sonnet-x", "versionKind": "pinned", "channelFamily": "claude-sonnet"},
            "bare": {"provider": "claude", "modelId": "plain", "versionKind": "channel"}
        }});
        let m = Manifest::new(&doc);
        let ok = |sel: &str, obs: &str| check_observed(&m, sel, obs).is_ok();
        // unknown passes
        assert!(ok("pinned", "") && ok("pinned", "unknown"));
        // pinned: exactly
        assert!(ok("pinned", "claude-sonnet-4-5-20250929") && ok("pinned", "pinned"));
        assert!(!ok("pinned", "claude-sonnet-4-5"));
        // channel: same provider and family, catalogued or resolved
        assert!(ok("channel", "sonnet"));
        assert!(ok("channel", "claude-sonnet-4-5-20250929"));
        assert!(ok("channel", "claude-sonnet-4-6"));
        assert!(!ok("channel", "claude-opus-4-1"));
        // catalogued under another provider: refused
        assert!(!ok("channel", "claude-sonnet-x"));
        // a prefix that is not a family boundary
        assert!(!ok("channel", "claude-sonnetish"));
        // a channel without a family attests nothing it does not name
        assert!(!ok("bare", "plain-2"));
        assert!(ok("bare", "plain"));
    }
}
