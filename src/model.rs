//! Read-only views over the lead-owned documents: the run manifest and a
//! prompt's invocation metadata, plus the duty catalog. These documents carry
//! more than okstra reads, so they stay `serde_json::Value`s behind typed
//! accessors rather than closed structs.

use crate::canonical;
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// What planning may learn of a run's records, from whoever calls it:
/// compiling reads no run state itself. A translator's reservation is a
/// candidate only while team-state does not hold its dispatch id
/// (docs/manifest.md#translator-reservations); `okstra plan` answers from
/// the team-state file (`crate::state::RUN_RECORDS`).
pub trait Records: Sync {
    /// Every dispatch id the team-state at `path` records: none where it is
    /// not written yet; why not, where it cannot be read.
    fn dispatch_ids(&self, path: &Path) -> Result<HashSet<String>, String>;
}

/// `dutyId -> role`, built in (docs/manifest.md#duty-catalog); the manifest's
/// `duties{}` extends or overrides it.
pub const BUILTIN_DUTIES: &[(&str, &str)] = &[
    ("implementation-executor", "implementer"),
    ("implementation-verifier", "verifier"),
    ("translator", "translator"),
    ("report-writer", "report-writer"),
    ("analysis", "analyst"),
    ("convergence", "analyst"),
    ("plan-verification", "verifier"),
];

/// The translator's name (docs/manifest.md#translator-reservations): the
/// worker `--workers` selects translator mode with, the manifest's
/// `invocationAssignments` key, and the key of the one job planned for it.
pub const TRANSLATOR: &str = "translator";

/// The worker id of the report writer, which runs alone
/// (docs/spec-format.md#batch-rules). The role of the same name is
/// `vocab::Role::ReportWriter`.
pub const REPORT_WRITER: &str = "report-writer";

pub fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

pub fn str_of_map<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

/// An integer that is really an integer (not a float, not a boolean).
pub fn int_of(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => n.as_i64(),
        _ => None,
    }
}

pub struct Manifest<'a> {
    pub doc: &'a Value,
    // Indexes, so a plan of thousands of v2 jobs looks each row up once.
    role_executions: HashMap<&'a str, &'a Value>,
    participants: HashMap<&'a str, &'a Value>,
}

fn index<'a>(doc: &'a Value, list: &str, key: &str) -> HashMap<&'a str, &'a Value> {
    let mut out = HashMap::new();
    for row in doc
        .get(list)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        // The first row of a ref wins, as a linear search would find it.
        out.entry(str_of(row, key)).or_insert(row);
    }
    out
}

impl<'a> Manifest<'a> {
    pub fn new(doc: &'a Value) -> Self {
        Manifest {
            doc,
            role_executions: index(doc, "roleExecutions", "roleExecutionRef"),
            participants: index(doc, "participantAssignments", "participantRef"),
        }
    }

    pub fn str(&self, key: &str) -> &'a str {
        str_of(self.doc, key)
    }

    pub fn task_key(&self) -> &'a str {
        str_of(self.doc, "taskKey")
    }

    pub fn is_v2(&self) -> bool {
        self.doc.get("schemaVersion").and_then(Value::as_str) == Some("2.0")
            && self
                .doc
                .get("executionIdentityVersion")
                .and_then(int_of_ref)
                == Some(2)
    }

    pub fn terminal_backend(&self) -> &'a str {
        str_of(self.doc, "terminalBackend")
    }

    pub fn workflow_phase(&self) -> &'a str {
        self.doc
            .get("workflow")
            .map(|w| str_of(w, "currentPhase"))
            .unwrap_or("")
    }

    pub fn rows(&self, key: &str) -> &'a [Value] {
        self.doc
            .get(key)
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    pub fn role_execution(&self, role_execution_ref: &str) -> Option<&'a Value> {
        self.role_executions.get(role_execution_ref).copied()
    }

    pub fn participant(&self, participant_ref: &str) -> Option<&'a Value> {
        self.participants.get(participant_ref).copied()
    }

    pub fn model(&self, model_ref: &str) -> Option<&'a Value> {
        self.doc.get("models").and_then(|m| m.get(model_ref))
    }

    /// The role a duty asks for: the manifest's `duties{}` first, then the
    /// built-in catalog.
    pub fn role_for_duty(&self, duty: &str) -> Option<String> {
        if let Some(role) = self
            .doc
            .get("duties")
            .and_then(|d| d.get(duty))
            .and_then(Value::as_str)
        {
            return Some(role.to_string());
        }
        BUILTIN_DUTIES
            .iter()
            .find(|(d, _)| *d == duty)
            .map(|(_, r)| r.to_string())
    }

    pub fn recommended_workers(&self) -> Vec<String> {
        self.rows("recommendedWorkers")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    }

    pub fn planned_paths(&self) -> Vec<String> {
        self.rows("plannedPaths")
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    }
}

fn int_of_ref(v: &Value) -> Option<i64> {
    int_of(v)
}

/// What is wrong with a role execution's model binding, if anything
/// (`authority/binding` at plan time, `exec/binding-changed` at exec time).
pub fn binding_problem(manifest: &Manifest, execution: &Value) -> Option<String> {
    let binding = execution.get("binding").filter(|b| b.is_object());
    let model_ref = str_of(execution, "modelRef");
    let recorded = str_of(execution, "modelSpecDigest");
    let Some(binding) = binding else {
        return Some("has no `binding`".into());
    };
    if model_ref.is_empty() {
        return Some("has no `modelRef`".into());
    }
    if recorded.is_empty() {
        return Some("has no `modelSpecDigest`".into());
    }
    let Some(model) = manifest.model(model_ref) else {
        return Some(format!(
            "names model `{model_ref}`, which is not in the catalog `models{{}}`"
        ));
    };
    let actual = model_spec_digest(binding, model);
    if actual != recorded {
        return Some(format!(
            "records modelSpecDigest {recorded}, but its binding and catalog entry `{model_ref}` digest to {actual}"
        ));
    }
    None
}

/// `sha256:<hex>` of the canonical JSON (RFC 8785, [`canonical`]) of
/// `{"binding": ..., "model": ...}`: the one canonical form of the tree, so
/// the lead can compute it with any JCS library.
pub fn model_spec_digest(binding: &Value, model: &Value) -> String {
    let mut m = Map::new();
    m.insert("binding".into(), binding.clone());
    m.insert("model".into(), model.clone());
    canonical::digest(&Value::Object(m))
}

/// How a catalog model names its version (docs/manifest.md#the-model-catalog):
/// `pinned`, one exact version; `channel`, a moving alias within a channel
/// family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionKind {
    Pinned,
    Channel,
}

impl VersionKind {
    /// A catalog entry's `versionKind`; `None` when it has neither word.
    pub fn of(model: &Value) -> Option<VersionKind> {
        match str_of(model, "versionKind") {
            "pinned" => Some(VersionKind::Pinned),
            "channel" => Some(VersionKind::Channel),
            _ => None,
        }
    }
}

/// Identity version of a metadata document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaVersion {
    V1,
    V2,
    Mixed,
}

pub fn metadata_version(meta: &Value) -> MetaVersion {
    let schema = meta.get("schemaVersion");
    let eiv = meta.get("executionIdentityVersion");
    let is_one = matches!(schema, Some(v) if int_of(v) == Some(1));
    if is_one && eiv.is_none() {
        return MetaVersion::V1;
    }
    if schema.and_then(Value::as_str) == Some("2.0") && eiv.and_then(int_of) == Some(2) {
        return MetaVersion::V2;
    }
    MetaVersion::Mixed
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duty_catalog_is_extendable() {
        let doc = json!({"duties": {"security-review": "verifier", "analysis": "reviewer"}});
        let m = Manifest::new(&doc);
        assert_eq!(
            m.role_for_duty("security-review").as_deref(),
            Some("verifier")
        );
        assert_eq!(m.role_for_duty("analysis").as_deref(), Some("reviewer"));
        assert_eq!(m.role_for_duty("translator").as_deref(), Some("translator"));
        assert_eq!(m.role_for_duty("nope"), None);
    }

    #[test]
    fn binding_digest_checks() {
        let binding = json!({"runner": "cli-wrapper", "resolvedExecutionValue": "sonnet"});
        let model = json!({"provider": "claude", "modelId": "sonnet", "versionKind": "channel", "channelFamily": "sonnet"});
        let digest = model_spec_digest(&binding, &model);
        let doc = json!({"models": {"m": model}});
        let m = Manifest::new(&doc);
        let good = json!({"binding": binding, "modelRef": "m", "modelSpecDigest": digest});
        assert_eq!(binding_problem(&m, &good), None);
        let mut bad = good.clone();
        bad["modelSpecDigest"] = json!("sha256:00");
        assert!(binding_problem(&m, &bad).unwrap().contains("digest to"));
        let mut unknown = good.clone();
        unknown["modelRef"] = json!("x");
        assert!(binding_problem(&m, &unknown)
            .unwrap()
            .contains("not in the catalog"));
        assert!(binding_problem(&m, &json!({})).unwrap().contains("binding"));
    }

    #[test]
    fn metadata_versions() {
        assert_eq!(
            metadata_version(&json!({"schemaVersion": 1})),
            MetaVersion::V1
        );
        assert_eq!(
            metadata_version(&json!({"schemaVersion": "2.0", "executionIdentityVersion": 2})),
            MetaVersion::V2
        );
        assert_eq!(
            metadata_version(&json!({"schemaVersion": 1, "executionIdentityVersion": 2})),
            MetaVersion::Mixed
        );
        assert_eq!(metadata_version(&json!({})), MetaVersion::Mixed);
    }
}
