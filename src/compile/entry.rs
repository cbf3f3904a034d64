//! A worker entry (docs/spec-format.md#worker-keys), read once into typed
//! fields wherever it came from: a spec entry with `defaults` applied, a
//! team-state row in roster mode, or a translator reservation. Every key keeps
//! the pointer of the value it was read from, so a diagnostic points at what
//! the user wrote.
//!
//! Reading never fails. The JSON Schema check reports a value of the wrong
//! type; here such a value reads as absent, so the rules past this point
//! report what they would for a missing key, and nothing twice. The
//! identity keys are kept raw: `identity::parse` judges their presence,
//! types and versions together and reports every problem at once.

use crate::plan::SlurmOptions;
use crate::vocab::{Backend, Confinement, MutationAudit};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// One worker entry and where each of its values came from.
pub struct Entry {
    pub stage: usize,
    pub pointer: String,
    pub fields: WorkerFields,
    /// Where its keys' values were written. Pointers are made when asked
    /// for: a string per key of every entry was once most of a large
    /// spec's memory.
    origin: Origin,
    /// Built from a translator reservation
    /// (docs/manifest.md#translator-reservations), the one way a translator job
    /// may be planned.
    pub reserved: bool,
}

/// Which keys an entry wrote itself (`pointer/<key>`) and which it took
/// from `defaults` (`/defaults/<key>`); any other key points at the entry.
struct Origin {
    own: Box<[Box<str>]>,
    /// The spec's `defaults` keys, shared by every entry of the spec.
    defaults: Arc<[Box<str>]>,
}

/// The keys of a worker entry, typed. Wire names are the JSON keys.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerFields {
    // Identity (docs/spec-format.md#execution-identity), raw: present (even as
    // null) or absent.
    #[serde(default, deserialize_with = "raw")]
    pub schema_version: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub execution_identity_version: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub worker_id: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub participant_ref: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub role_execution_ref: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub execution_label: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub duty_id: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub invocation_ref: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub assignment_ref: Option<Value>,
    #[serde(default, deserialize_with = "raw")]
    pub attempt: Option<Value>,

    /// As written: a name okstra has no adapter for was reported by whoever
    /// read it (the schema, roster or translator checks), and the job
    /// builder drops the job without repeating it.
    #[serde(default, deserialize_with = "text")]
    pub provider: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub role: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub audience: Option<String>,
    /// As written; `DispatchKind::parse` judges it where a rule needs it.
    #[serde(default, deserialize_with = "text")]
    pub dispatch_kind: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub prompt_path: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub result_path: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub worker_result_path: Option<String>,
    /// `Some` whenever the key is present: an empty or ill-typed list still
    /// replaces the default.
    #[serde(default, deserialize_with = "texts_if_present")]
    pub completion_paths: Option<Vec<String>>,
    #[serde(default, deserialize_with = "text")]
    pub worktree_path: Option<String>,
    /// `worktree = "git"` (docs/worktrees.md#planning), as written: another
    /// word is the schema's to report, and reads as no git worktree.
    #[serde(default, deserialize_with = "text")]
    pub worktree: Option<String>,
    /// `"head"` (the default), `"index"` or a commit-ish.
    #[serde(default, deserialize_with = "text")]
    pub worktree_base: Option<String>,
    #[serde(default, deserialize_with = "flag")]
    pub worktree_keep: Option<bool>,
    #[serde(default, deserialize_with = "text")]
    pub model_execution_value: Option<String>,
    #[serde(default, deserialize_with = "texts")]
    pub command: Vec<String>,
    #[serde(default, deserialize_with = "text_map")]
    pub env: TextMap,
    #[serde(default, deserialize_with = "texts")]
    pub planned_paths: Vec<String>,
    #[serde(default, deserialize_with = "texts")]
    pub auxiliary_roots: Vec<String>,
    #[serde(default, deserialize_with = "count")]
    pub idle_timeout_seconds: Option<u64>,
    #[serde(default, deserialize_with = "count")]
    pub timeout_seconds: Option<u64>,
    /// `budget = { maxCostUsd, maxTokens }` (docs/exec.md#budgets); a table
    /// that sets no usable limit reads as absent (the schema reports it).
    #[serde(default, deserialize_with = "budget")]
    pub budget: Option<crate::budget::Budget>,
    #[serde(default, deserialize_with = "word")]
    pub mutation_audit: Option<MutationAudit>,
    #[serde(default, deserialize_with = "word")]
    pub confinement: Option<Confinement>,
    /// `"provider"`, `"none"`, `"open"` or `{ allow = [...] }`; any other
    /// shape reads as absent (the schema reports it).
    #[serde(default, deserialize_with = "network")]
    pub network: Option<crate::plan::Network>,
    #[serde(default, deserialize_with = "texts")]
    pub read_paths: Vec<String>,
    #[serde(default, deserialize_with = "word")]
    pub backend: Option<Backend>,
    #[serde(default, deserialize_with = "text")]
    pub permission_mode: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub sandbox_mode: Option<String>,
    #[serde(default, deserialize_with = "text")]
    pub approval_mode: Option<String>,
    #[serde(default, deserialize_with = "texts")]
    pub extra_args: Vec<String>,
    /// The `sbatch` options of a `slurm` job: the defaults' table with the
    /// entry's own keys over it.
    #[serde(default, deserialize_with = "slurm_table")]
    pub slurm: Option<SlurmOptions>,
}

impl WorkerFields {
    /// Read an entry's keys (unknown keys are the schema's business).
    pub fn read(values: Map<String, Value>) -> WorkerFields {
        WorkerFields::deserialize(Value::Object(values)).unwrap_or_default()
    }

    /// Whether the entry asks for a git worktree of its own
    /// (`worktree = "git"`).
    pub fn git_worktree(&self) -> bool {
        self.worktree.as_deref() == Some("git")
    }

    /// The v2-only identity keys (`identity::V2_ONLY_KEYS`) that are present.
    pub fn v2_only_present(&self) -> Vec<&'static str> {
        [
            ("executionIdentityVersion", &self.execution_identity_version),
            ("participantRef", &self.participant_ref),
            ("roleExecutionRef", &self.role_execution_ref),
            ("executionLabel", &self.execution_label),
            ("dutyId", &self.duty_id),
            ("invocationRef", &self.invocation_ref),
        ]
        .into_iter()
        .filter_map(|(key, v)| v.is_some().then_some(key))
        .collect()
    }

    /// How the entry names its worker, the way its own identity version
    /// does: v2 by execution label, v1 by worker id, else its assignment.
    pub fn worker_name(&self) -> Option<&str> {
        let order = if raw_str(&self.schema_version) == "2.0" {
            [&self.execution_label, &self.worker_id, &self.assignment_ref]
        } else {
            [&self.worker_id, &self.execution_label, &self.assignment_ref]
        };
        order.into_iter().map(raw_str).find(|s| !s.is_empty())
    }
}

/// A raw value's string, or "".
fn raw_str(v: &Option<Value>) -> &str {
    v.as_ref().and_then(Value::as_str).unwrap_or("")
}

impl Entry {
    /// An entry read from somewhere other than a spec (a team-state row, a
    /// reservation): `located` keys point at `pointer/<key>`, the others
    /// (derived values) at `pointer` itself.
    pub fn synthetic(
        pointer: &str,
        values: Map<String, Value>,
        located: &[&str],
        reserved: bool,
    ) -> Entry {
        let own = values
            .keys()
            .filter(|k| located.contains(&k.as_str()))
            .map(|k| escape(k).into())
            .collect();
        Entry {
            stage: 0,
            pointer: pointer.to_string(),
            fields: WorkerFields::read(values),
            origin: Origin {
                own,
                defaults: Arc::new([]),
            },
            reserved,
        }
    }

    /// The pointer of a key's value (its own or the default's), or of the
    /// entry itself when the key is absent.
    /// A key of the `slurm` table is asked for as `slurm/<key>`.
    pub fn ptr(&self, key: &str) -> String {
        let suffix = match key.strip_prefix("slurm/") {
            Some(sub) => format!("{SLURM}/{}", escape(sub)),
            None => escape(key),
        };
        let has = |keys: &[Box<str>]| keys.iter().any(|k| **k == *suffix);
        if has(&self.origin.own) {
            format!("{}/{suffix}", self.pointer)
        } else if has(&self.origin.defaults) {
            format!("/defaults/{suffix}")
        } else {
            self.pointer.clone()
        }
    }
}

/// The pointer suffixes of an object's keys, and of the keys of its
/// `slurm` table.
fn pointer_keys(object: &Map<String, Value>) -> Vec<Box<str>> {
    let sub = object.get(SLURM).and_then(Value::as_object);
    let sub = sub.into_iter().flat_map(|m| m.keys());
    object
        .keys()
        .map(|k| escape(k).into())
        .chain(sub.map(|k| format!("{SLURM}/{}", escape(k)).into()))
        .collect()
}

/// A spec's `defaults`, given to each of its worker entries.
pub struct Defaults {
    values: Map<String, Value>,
    /// The pointer suffixes of its keys, shared by every entry.
    keys: Arc<[Box<str>]>,
}

impl Defaults {
    /// The `defaults` table of a spec document (none when it is not a table).
    pub fn of(doc: &Value) -> Defaults {
        let values = doc
            .get("defaults")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let keys = pointer_keys(&values).into();
        Defaults { values, keys }
    }

    /// The entry an item of stage `stage`'s workers makes, at `pointer`,
    /// with the defaults applied; `None` when the item is not a table (the
    /// schema says so). The item's own values are moved into the entry,
    /// not copied.
    pub fn entry(&self, stage: usize, pointer: String, item: Value) -> Option<Entry> {
        let Value::Object(mut values) = item else {
            return None;
        };
        let own_keys = pointer_keys(&values).into();
        for (k, v) in &self.values {
            match values.get_mut(k) {
                // A worker's `slurm` table adds to the defaults' one, key by
                // key: `cpus` for one worker keeps the run's partition.
                Some(Value::Object(over)) if k == SLURM => {
                    if let Value::Object(base) = v {
                        for (sk, sv) in base {
                            if !over.contains_key(sk) {
                                over.insert(sk.clone(), sv.clone());
                            }
                        }
                    }
                }
                // Otherwise an entry's own value wins over the default.
                Some(_) => {}
                None => {
                    values.insert(k.clone(), v.clone());
                }
            }
        }
        Some(Entry {
            stage,
            pointer,
            fields: WorkerFields::read(values),
            origin: Origin {
                own: own_keys,
                defaults: Arc::clone(&self.keys),
            },
            reserved: false,
        })
    }
}

/// The key of the `sbatch` options; `Entry::ptr("slurm/partition")` points
/// at one of them.
pub const SLURM: &str = "slurm";

/// A key as a JSON pointer segment.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

// The readers below take any value: one of the wrong type reads as absent.

fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::String(s) if !s.is_empty() => Some(s),
        _ => None,
    })
}

fn strings_of(v: Value) -> Vec<String> {
    match v {
        Value::Array(items) => items
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn texts<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Value::deserialize(d).map(strings_of)
}

fn texts_if_present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    Value::deserialize(d).map(|v| Some(strings_of(v)))
}

/// Names to texts, as a worker's `env` is written.
pub type TextMap = BTreeMap<String, String>;

/// The string members of an object (any other member, or any other value,
/// reads as absent).
fn text_map<'de, D: Deserializer<'de>>(d: D) -> Result<TextMap, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Object(m) => m
            .into_iter()
            .filter_map(|(k, v)| match v {
                Value::String(s) => Some((k, s)),
                _ => None,
            })
            .collect(),
        _ => BTreeMap::new(),
    })
}

fn flag<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    Value::deserialize(d).map(|v| v.as_bool())
}

fn count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Value::deserialize(d).map(|v| v.as_u64())
}

/// A closed vocabulary's word; an unknown word reads as absent (the schema
/// names the words it allows).
fn word<'de, D: Deserializer<'de>, T: std::str::FromStr>(d: D) -> Result<Option<T>, D::Error> {
    Ok(text(d)?.and_then(|s| s.parse().ok()))
}

fn budget<'de, D: Deserializer<'de>>(d: D) -> Result<Option<crate::budget::Budget>, D::Error> {
    Ok(crate::budget::Budget::from_value(&Value::deserialize(d)?))
}

fn network<'de, D: Deserializer<'de>>(d: D) -> Result<Option<crate::plan::Network>, D::Error> {
    Ok(crate::plan::Network::deserialize(Value::deserialize(d)?).ok())
}

/// The `slurm` table, each key read on its own (one of the wrong type reads
/// as absent); anything but a table reads as no table.
fn slurm_table<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SlurmOptions>, D::Error> {
    let Value::Object(m) = Value::deserialize(d)? else {
        return Ok(None);
    };
    let text = |k: &str| match m.get(k) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    Ok(Some(SlurmOptions {
        partition: text("partition"),
        account: text("account"),
        time_limit: text("timeLimit"),
        cpus: m.get("cpus").and_then(Value::as_u64).filter(|n| *n >= 1),
        memory: text("memory"),
        extra_args: m
            .get("extraArgs")
            .cloned()
            .map(strings_of)
            .unwrap_or_default(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> WorkerFields {
        WorkerFields::read(v.as_object().unwrap().clone())
    }

    /// The entries of a spec's first stage (or of its `workers`).
    fn entries_of(doc: &Value) -> Vec<Entry> {
        let defaults = Defaults::of(doc);
        let (base, items) = match doc.get("stages") {
            Some(stages) => ("/stages/0/workers", &stages[0]["workers"]),
            None => ("/workers", &doc["workers"]),
        };
        items
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .filter_map(|(i, item)| defaults.entry(0, format!("{base}/{i}"), item.clone()))
            .collect()
    }

    #[test]
    fn typed_keys_read_their_values() {
        let f = fields(json!({
            "provider": "codex", "role": "verifier", "dispatchKind": "reverify-r2",
            "completionPaths": ["a", "b"], "env": {"A": "1"}, "idleTimeoutSeconds": 30,
            "mutationAudit": "none", "backend": "pane", "extraArgs": ["--x"],
            "confinement": "required", "unknownKey": true
        }));
        assert_eq!(f.provider.as_deref(), Some("codex"));
        assert_eq!(f.dispatch_kind.as_deref(), Some("reverify-r2"));
        assert_eq!(f.completion_paths, Some(vec!["a".into(), "b".into()]));
        assert_eq!(f.env.get("A").map(String::as_str), Some("1"));
        assert_eq!(f.idle_timeout_seconds, Some(30));
        assert_eq!(f.mutation_audit, Some(MutationAudit::Off));
        assert_eq!(f.confinement, Some(Confinement::Required));
        assert_eq!(f.backend, Some(Backend::Pane));
        assert_eq!(f.extra_args, vec!["--x".to_string()]);
    }

    #[test]
    fn wrong_types_read_as_absent_and_empty_strings_too() {
        let f = fields(json!({
            "provider": 5, "role": "", "command": ["true", 3], "completionPaths": "x",
            "env": {"A": 1, "B": "b"}, "idleTimeoutSeconds": "x", "timeoutSeconds": -1,
            "mutationAudit": "bogus", "backend": 3, "plannedPaths": "src/**"
        }));
        assert_eq!(f.provider, None);
        assert_eq!(f.role, None);
        assert_eq!(f.command, vec!["true".to_string()]);
        // Present, so it replaces the default, though it holds nothing.
        assert_eq!(f.completion_paths, Some(vec![]));
        assert_eq!(f.env.len(), 1);
        assert_eq!((f.idle_timeout_seconds, f.timeout_seconds), (None, None));
        assert_eq!((f.mutation_audit, f.backend), (None, None));
        assert!(f.planned_paths.is_empty());
        assert_eq!(fields(json!({})).completion_paths, None);
        let w = fields(json!({"worktree": "svn", "worktreeBase": 3, "worktreeKeep": "no"}));
        assert_eq!(
            (
                w.worktree.as_deref(),
                w.worktree_base.as_deref(),
                w.worktree_keep
            ),
            (Some("svn"), None, None)
        );
        assert!(!w.git_worktree());
        let w = fields(json!({"worktree": "git", "worktreeBase": "index", "worktreeKeep": false}));
        assert!(w.git_worktree());
        assert_eq!(
            (w.worktree_base.as_deref(), w.worktree_keep),
            (Some("index"), Some(false))
        );
    }

    #[test]
    fn identity_keys_stay_raw_and_present_even_as_null() {
        let f = fields(json!({"participantRef": null, "attempt": true, "dutyId": 3}));
        assert_eq!(f.participant_ref, Some(Value::Null));
        assert_eq!(f.attempt, Some(json!(true)));
        assert_eq!(f.v2_only_present(), ["participantRef", "dutyId"]);
    }

    #[test]
    fn the_v2_only_keys_are_identitys() {
        let all = super::super::identity::V2_ONLY_KEYS;
        let entry: Map<String, Value> = all.iter().map(|k| (k.to_string(), json!("x"))).collect();
        assert_eq!(WorkerFields::read(entry).v2_only_present(), all);
    }

    #[test]
    fn worker_names_follow_the_identity_version() {
        let v1 = fields(json!({"workerId": "w", "executionLabel": "l"}));
        assert_eq!(v1.worker_name(), Some("w"));
        let v2 = fields(json!({"schemaVersion": "2.0", "workerId": "w", "executionLabel": "l"}));
        assert_eq!(v2.worker_name(), Some("l"));
        let bare = fields(json!({"assignmentRef": "a/b", "workerId": ""}));
        assert_eq!(bare.worker_name(), Some("a/b"));
        assert_eq!(fields(json!({})).worker_name(), None);
    }

    #[test]
    fn defaults_apply_and_own_values_win_with_their_pointers() {
        let doc = json!({
            "defaults": {"provider": "command", "role": "analyst"},
            "stages": [{"name": "a", "workers": [{"workerId": "x", "role": "verifier", "a/b": 1}, 7]}]
        });
        let entries = entries_of(&doc);
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(e.pointer, "/stages/0/workers/0");
        assert_eq!(e.fields.provider.as_deref(), Some("command"));
        assert_eq!(e.fields.role.as_deref(), Some("verifier"));
        assert_eq!(e.ptr("provider"), "/defaults/provider");
        assert_eq!(e.ptr("role"), "/stages/0/workers/0/role");
        assert_eq!(e.ptr("a/b"), "/stages/0/workers/0/a~1b");
        assert_eq!(e.ptr("resultPath"), "/stages/0/workers/0");

        let values = json!({"provider": "codex", "derived": 1});
        let e = Entry::synthetic(
            "/workers/3",
            values.as_object().unwrap().clone(),
            &["provider"],
            false,
        );
        assert_eq!(e.ptr("provider"), "/workers/3/provider");
        assert_eq!(e.ptr("derived"), "/workers/3");
    }

    #[test]
    fn a_workers_slurm_table_adds_to_the_defaults_key_by_key() {
        let doc = json!({
            "defaults": {"backend": "slurm", "slurm": {"partition": "gpu", "cpus": 2, "timeLimit": "10"}},
            "workers": [
                {"workerId": "x", "slurm": {"cpus": 8, "memory": "4G", "extraArgs": ["--qos=x", 3]}},
                {"workerId": "y"},
                {"workerId": "z", "slurm": {"cpus": "many", "account": ""}}
            ]
        });
        let entries = entries_of(&doc);
        let x = entries[0].fields.slurm.clone().unwrap();
        assert_eq!(x.partition.as_deref(), Some("gpu"));
        assert_eq!(x.time_limit.as_deref(), Some("10"));
        assert_eq!(x.cpus, Some(8));
        assert_eq!(x.memory.as_deref(), Some("4G"));
        assert_eq!(x.extra_args, ["--qos=x"]);
        assert_eq!(entries[0].ptr("slurm/cpus"), "/workers/0/slurm/cpus");
        assert_eq!(
            entries[0].ptr("slurm/partition"),
            "/defaults/slurm/partition"
        );
        assert_eq!(entries[1].fields.slurm.as_ref().unwrap().cpus, Some(2));
        assert_eq!(entries[1].ptr("slurm/cpus"), "/defaults/slurm/cpus");
        // Ill-typed values read as absent; the schema reports them.
        let z = entries[2].fields.slurm.clone().unwrap();
        assert_eq!((z.cpus, z.account), (None, None));
        assert_eq!(z.partition.as_deref(), Some("gpu"));
        assert_eq!(fields(json!({"slurm": "gpu"})).slurm, None);
    }
}
