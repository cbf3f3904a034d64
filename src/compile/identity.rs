//! Execution identity (docs/spec-format.md#execution-identity): which version a
//! worker entry is, and the refusals that keep a partial or mixed identity from
//! going further. Code past this parser only ever sees a whole
//! `plan::Identity`.

use super::entry::WorkerFields;
use crate::diag::Code;
use crate::model::int_of;
use crate::plan::{Identity, V2Identity};
use serde_json::Value;

/// Keys only a v2 entry may carry.
pub const V2_ONLY_KEYS: &[&str] = &[
    "executionIdentityVersion",
    "participantRef",
    "roleExecutionRef",
    "executionLabel",
    "dutyId",
    "invocationRef",
];

/// Keys whose schema complaints the identity rules answer with their own code.
pub const IDENTITY_KEYS: &[&str] = &[
    "schemaVersion",
    "executionIdentityVersion",
    "workerId",
    "participantRef",
    "roleExecutionRef",
    "executionLabel",
    "dutyId",
    "invocationRef",
    "assignmentRef",
    "attempt",
    "provider",
    "promptPath",
    "role",
];

/// One identity problem: its code, message, the key it is about (None: the
/// entry as a whole) and a hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub code: Code,
    pub message: String,
    pub key: Option<&'static str>,
    pub help: &'static str,
}

fn problem(code: Code, key: Option<&'static str>, message: String, help: &'static str) -> Problem {
    Problem {
        code,
        message,
        key,
        help,
    }
}

/// The identity of a worker entry, with its state key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    pub identity: Identity,
    pub state_key: String,
}

/// A string that is not blank.
fn non_empty(value: Option<&str>) -> Option<&str> {
    value.filter(|s| !s.trim().is_empty())
}

/// A raw value's string, if it is one.
fn text(value: &Option<Value>) -> Option<&str> {
    value.as_ref().and_then(Value::as_str)
}

fn is_v1_marker(v: Option<&Value>) -> bool {
    match v {
        None => true,
        Some(Value::String(s)) => s == "1" || s == "1.0",
        Some(v) => int_of(v) == Some(1),
    }
}

/// Parse the identity of one (defaults-merged) worker entry.
pub fn parse(entry: &WorkerFields) -> Result<Parsed, Vec<Problem>> {
    let mut problems = Vec::new();
    for (key, value) in [("promptPath", &entry.prompt_path), ("role", &entry.role)] {
        if non_empty(value.as_deref()).is_none() {
            problems.push(missing(key));
        }
    }
    let schema = entry.schema_version.as_ref();
    let eiv = entry.execution_identity_version.as_ref();
    let identity = if is_v1_marker(schema) {
        parse_v1(entry, &mut problems)
    } else if schema.and_then(Value::as_str) == Some("2.0") && eiv.and_then(int_of) == Some(2) {
        parse_v2(entry, &mut problems)
    } else {
        problems.push(problem(
            Code::IdentityUnsupportedVersion,
            Some(if schema.and_then(Value::as_str) == Some("2.0") {
                "executionIdentityVersion"
            } else {
                "schemaVersion"
            }),
            format!(
                "unsupported identity version: schemaVersion {} with executionIdentityVersion {}",
                show(schema),
                show(eiv)
            ),
            "use v1 (no schemaVersion, or 1) or v2 (schemaVersion = \"2.0\" and executionIdentityVersion = 2)",
        ));
        None
    };
    match identity {
        Some(parsed) if problems.is_empty() => Ok(parsed),
        _ => Err(problems),
    }
}

fn show(v: Option<&Value>) -> String {
    v.map(|v| v.to_string())
        .unwrap_or_else(|| "(absent)".into())
}

fn missing(key: &'static str) -> Problem {
    problem(
        Code::IdentityMissingField,
        Some(key),
        format!("`{key}` is required and must not be empty"),
        "add the key with a non-empty value",
    )
}

fn parse_v1(entry: &WorkerFields, problems: &mut Vec<Problem>) -> Option<Parsed> {
    let mut mixed = false;
    for key in entry.v2_only_present() {
        mixed = true;
        problems.push(problem(
            Code::IdentityMixedVersions,
            Some(key),
            format!("a v1 worker entry carries the v2 key `{key}`"),
            "for v2 set schemaVersion = \"2.0\" and executionIdentityVersion = 2 (and drop workerId); for v1 remove the v2 keys",
        ));
    }
    let worker_id = non_empty(text(&entry.worker_id));
    if worker_id.is_none() {
        problems.push(missing("workerId"));
    }
    if mixed {
        return None;
    }
    worker_id.map(|id| Parsed {
        identity: Identity::V1 {
            worker_id: id.to_string(),
        },
        state_key: id.to_string(),
    })
}

fn parse_v2(entry: &WorkerFields, problems: &mut Vec<Problem>) -> Option<Parsed> {
    let before = problems.len();
    if entry.worker_id.is_some() {
        problems.push(problem(
            Code::IdentityMixedVersions,
            Some("workerId"),
            "a v2 worker entry carries the v1 key `workerId`".into(),
            "a v2 worker's state key is the last segment of assignmentRef; remove workerId",
        ));
    }
    let attempt = match &entry.attempt {
        Some(v) => match int_of(v) {
            Some(n) if n >= 1 => Some(n as u64),
            _ => {
                problems.push(problem(
                    Code::IdentityBadAttempt,
                    Some("attempt"),
                    format!("`attempt` must be an integer >= 1, found {v}"),
                    "the first attempt is 1",
                ));
                None
            }
        },
        None => {
            problems.push(problem(
                Code::IdentityBadAttempt,
                None,
                "a v2 worker entry needs `attempt`, an integer >= 1".into(),
                "add attempt = 1 for a first attempt",
            ));
            None
        }
    };
    let mut field = |key: &'static str, value: Option<&str>| -> String {
        match non_empty(value) {
            Some(s) => s.to_string(),
            None => {
                problems.push(missing(key));
                String::new()
            }
        }
    };
    let participant_ref = field("participantRef", text(&entry.participant_ref));
    let role_execution_ref = field("roleExecutionRef", text(&entry.role_execution_ref));
    let execution_label = field("executionLabel", text(&entry.execution_label));
    let duty_id = field("dutyId", text(&entry.duty_id));
    let invocation_ref = field("invocationRef", text(&entry.invocation_ref));
    let _provider = field("provider", entry.provider.as_deref());
    let assignment_ref = field("assignmentRef", text(&entry.assignment_ref));
    let state_key = assignment_ref.rsplit('/').next().unwrap_or("").to_string();
    if !assignment_ref.is_empty() && state_key.is_empty() {
        problems.push(problem(
            Code::IdentityNoStateKey,
            Some("assignmentRef"),
            format!("assignmentRef `{assignment_ref}` ends with `/`, leaving no state key"),
            "the last `/`-separated segment names the worker, e.g. \"initial/claude\"",
        ));
    }
    if problems.len() > before {
        return None;
    }
    Some(Parsed {
        identity: Identity::V2(V2Identity {
            participant_ref,
            role_execution_ref,
            execution_label,
            duty_id,
            invocation_ref,
            assignment_ref,
            attempt: attempt?,
        }),
        state_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Map};

    /// The parser, given an entry as JSON.
    fn parse(entry: &Map<String, Value>) -> Result<Parsed, Vec<Problem>> {
        super::parse(&WorkerFields::read(entry.clone()))
    }

    fn v2() -> Map<String, Value> {
        json!({
            "schemaVersion": "2.0", "executionIdentityVersion": 2,
            "participantRef": "p1", "roleExecutionRef": "re1", "executionLabel": "impl-1",
            "dutyId": "implementation-executor", "invocationRef": "inv-1", "provider": "claude",
            "assignmentRef": "initial/claude", "attempt": 1, "promptPath": "p.md", "role": "implementer"
        })
        .as_object()
        .unwrap()
        .clone()
    }

    fn codes(r: Result<Parsed, Vec<Problem>>) -> Vec<Code> {
        r.err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.code)
            .collect()
    }

    #[test]
    fn v2_parses_with_state_key() {
        let p = parse(&v2()).unwrap();
        assert_eq!(p.state_key, "claude");
        assert!(matches!(p.identity, Identity::V2(ref v) if v.attempt == 1));
    }

    #[test]
    fn v1_defaults() {
        let e = json!({"workerId": "codex", "promptPath": "p", "role": "r"});
        let p = parse(e.as_object().unwrap()).unwrap();
        assert_eq!(p.state_key, "codex");
        for marker in [json!(1), json!("1"), json!("1.0")] {
            let mut e = e.as_object().unwrap().clone();
            e.insert("schemaVersion".into(), marker);
            assert!(parse(&e).is_ok());
        }
    }

    #[test]
    fn each_refusal_and_its_near_miss() {
        let mut e = v2();
        e.insert("workerId".into(), json!("x"));
        assert_eq!(codes(parse(&e)), vec![Code::IdentityMixedVersions]);

        let v1 = json!({"workerId": "w", "promptPath": "p", "role": "r", "dutyId": "analysis"});
        assert_eq!(
            codes(parse(v1.as_object().unwrap())),
            vec![Code::IdentityMixedVersions]
        );

        let mut e = v2();
        e.insert("executionIdentityVersion".into(), json!(3));
        assert_eq!(codes(parse(&e)), vec![Code::IdentityUnsupportedVersion]);
        let mut e = v2();
        e.insert("schemaVersion".into(), json!("3.0"));
        assert_eq!(codes(parse(&e)), vec![Code::IdentityUnsupportedVersion]);

        for bad in [json!(0), json!(true), json!(1.5), json!("1"), json!(-2)] {
            let mut e = v2();
            e.insert("attempt".into(), bad);
            assert_eq!(codes(parse(&e)), vec![Code::IdentityBadAttempt]);
        }
        let mut e = v2();
        e.remove("attempt");
        assert_eq!(codes(parse(&e)), vec![Code::IdentityBadAttempt]);
        let mut e = v2();
        e.insert("attempt".into(), json!(2));
        assert!(parse(&e).is_ok());

        let mut e = v2();
        e.insert("executionLabel".into(), json!(""));
        assert_eq!(codes(parse(&e)), vec![Code::IdentityMissingField]);

        let mut e = v2();
        e.insert("assignmentRef".into(), json!("initial/"));
        assert_eq!(codes(parse(&e)), vec![Code::IdentityNoStateKey]);
        let mut e = v2();
        e.insert("assignmentRef".into(), json!("solo"));
        assert_eq!(parse(&e).unwrap().state_key, "solo");
    }

    proptest! {
        #[test]
        fn a_boolean_attempt_is_never_an_integer(b in any::<bool>()) {
            let mut e = v2();
            e.insert("attempt".into(), json!(b));
            prop_assert_eq!(codes(parse(&e)), vec![Code::IdentityBadAttempt]);
        }

        #[test]
        fn positive_integer_attempts_parse(n in 1i64..1_000_000) {
            let mut e = v2();
            e.insert("attempt".into(), json!(n));
            let parsed = parse(&e).unwrap();
            prop_assert_eq!(parsed.identity.v2().unwrap().attempt, n as u64);
        }

        #[test]
        fn non_positive_attempts_refused(n in -1_000_000i64..1) {
            let mut e = v2();
            e.insert("attempt".into(), json!(n));
            prop_assert_eq!(codes(parse(&e)), vec![Code::IdentityBadAttempt]);
        }

        #[test]
        fn state_key_is_last_segment(segs in prop::collection::vec("[a-z0-9-]{1,8}", 1..5)) {
            let mut e = v2();
            e.insert("assignmentRef".into(), json!(segs.join("/")));
            prop_assert_eq!(parse(&e).unwrap().state_key, segs.last().unwrap().clone());
        }

        #[test]
        fn any_v2_key_makes_a_v1_entry_mixed(idx in 0usize..6, val in "[a-z]{1,5}") {
            let mut e = json!({"workerId": "w", "promptPath": "p", "role": "r"}).as_object().unwrap().clone();
            e.insert(V2_ONLY_KEYS[idx].into(), json!(val));
            prop_assert!(codes(parse(&e)).contains(&Code::IdentityMixedVersions));
        }
    }
}
