//! The JSON Schemas of `schemas/`, embedded at build time, and validation that
//! turns the validator's errors into short, human messages.
//!
//! `schemas/` is the single source: editors read the files, `okstra schema`
//! prints them byte for byte, and `validate` compiles the very same text.

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Draft, ValidationError, Validator};
use serde_json::Value;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemaKind {
    Jobs,
    Manifest,
    Metadata,
    Plan,
    TeamState,
}

impl SchemaKind {
    pub const ALL: [SchemaKind; 5] = [
        SchemaKind::Jobs,
        SchemaKind::Manifest,
        SchemaKind::Metadata,
        SchemaKind::Plan,
        SchemaKind::TeamState,
    ];

    /// The name `okstra schema NAME` and `okstra validate --kind NAME` accept.
    pub fn name(self) -> &'static str {
        match self {
            SchemaKind::Jobs => "jobs",
            SchemaKind::Manifest => "manifest",
            SchemaKind::Metadata => "metadata",
            SchemaKind::Plan => "plan",
            SchemaKind::TeamState => "team-state",
        }
    }

    pub fn file_name(self) -> &'static str {
        match self {
            SchemaKind::Jobs => "jobs.schema.json",
            SchemaKind::Manifest => "manifest.schema.json",
            SchemaKind::Metadata => "metadata.schema.json",
            SchemaKind::Plan => "plan.schema.json",
            SchemaKind::TeamState => "team-state.schema.json",
        }
    }

    /// The schema file's text, byte for byte.
    pub fn text(self) -> &'static str {
        match self {
            SchemaKind::Jobs => include_str!("../schemas/jobs.schema.json"),
            SchemaKind::Manifest => include_str!("../schemas/manifest.schema.json"),
            SchemaKind::Metadata => include_str!("../schemas/metadata.schema.json"),
            SchemaKind::Plan => include_str!("../schemas/plan.schema.json"),
            SchemaKind::TeamState => include_str!("../schemas/team-state.schema.json"),
        }
    }

    pub fn from_name(s: &str) -> Option<SchemaKind> {
        SchemaKind::ALL.into_iter().find(|k| k.name() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One violation: where (a JSON pointer into the instance), what, and which
/// schema keyword refused it (`required`, `additionalProperties`, `enum`, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    pub pointer: String,
    pub message: String,
    pub keyword: String,
    /// For `required`: the key that is missing (the pointer names the
    /// object that lacks it), so a rule reporting the same absence under
    /// its own code can claim the complaint.
    pub missing: Option<String>,
}

struct Compiled {
    schema: Value,
    validator: Validator,
}

fn compiled(kind: SchemaKind) -> &'static Compiled {
    static CELLS: [OnceLock<Compiled>; 5] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    CELLS[kind.index()].get_or_init(|| {
        // The schemas are part of the binary and covered by tests: failing
        // here is a bug, not a user error.
        let schema: Value = serde_json::from_str(kind.text())
            .unwrap_or_else(|e| panic!("embedded schema {} is not JSON: {e}", kind.file_name()));
        let validator = jsonschema::options()
            .with_draft(Draft::Draft7)
            .build(&schema)
            .unwrap_or_else(|e| {
                panic!("embedded schema {} does not compile: {e}", kind.file_name())
            });
        Compiled { schema, validator }
    })
}

/// All violations, sorted by pointer then keyword (deterministic).
pub fn validate(kind: SchemaKind, value: &Value) -> Vec<SchemaError> {
    let c = compiled(kind);
    // Most documents are valid; deciding that is much cheaper than
    // collecting errors (a plan of thousands of jobs validates each
    // prompt's metadata).
    if c.validator.is_valid(value) {
        return Vec::new();
    }
    let mut found: Vec<Found> = Vec::new();
    for err in c.validator.iter_errors(value) {
        convert(&err, &c.schema, &mut found);
    }
    // A oneOf/anyOf wrapper says less than any specific error at or below it.
    let specific: Vec<String> = found
        .iter()
        .filter(|f| !f.generic)
        .map(|f| f.error.pointer.clone())
        .collect();
    let mut out: Vec<SchemaError> = found
        .into_iter()
        .filter(|f| !f.generic || !specific.iter().any(|p| is_at_or_below(p, &f.error.pointer)))
        .map(|f| f.error)
        .collect();
    out.sort_by(|a, b| {
        (&a.pointer, &a.keyword, &a.message).cmp(&(&b.pointer, &b.keyword, &b.message))
    });
    out.dedup();
    out
}

struct Found {
    error: SchemaError,
    /// A wrapper error with nothing specific to say.
    generic: bool,
}

fn is_at_or_below(pointer: &str, ancestor: &str) -> bool {
    pointer == ancestor
        || (pointer.starts_with(ancestor) && pointer.as_bytes().get(ancestor.len()) == Some(&b'/'))
}

/// RFC 6901 escaping of one reference token.
pub fn escape_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn last_token(pointer: &str) -> String {
    let raw = pointer.rsplit('/').next().unwrap_or("");
    raw.replace("~1", "/").replace("~0", "~")
}

/// One validator error as complaints appended to `out`: one per unknown
/// key and one for any other error, except that a oneOf/anyOf nothing
/// matched may speak through its closest alternative (`no_shape_matched`).
fn convert(err: &ValidationError<'_>, schema: &Value, out: &mut Vec<Found>) {
    let site = Site {
        pointer: err.instance_path().as_str().to_string(),
        keyword: err.kind().keyword().to_string(),
    };
    let schema_path = err.schema_path().as_str();
    match err.kind() {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let known = known_keys(schema, schema_path);
            out.extend(unexpected.iter().map(|key| unknown_key(&site, key, &known)));
        }
        ValidationErrorKind::Required { property } => out.push(missing_key(&site, property)),
        ValidationErrorKind::OneOfNotValid { context } | ValidationErrorKind::AnyOf { context } => {
            no_shape_matched(&site, err.instance(), context, schema, schema_path, out);
        }
        _ => out.push(site.found(leaf_message(err, schema), false)),
    }
}

/// Where one error stands and which keyword refused it: what every
/// complaint made from that error shares.
struct Site {
    pointer: String,
    keyword: String,
}

impl Site {
    fn found(&self, message: String, generic: bool) -> Found {
        Found {
            error: SchemaError {
                pointer: self.pointer.clone(),
                message,
                keyword: self.keyword.clone(),
                missing: None,
            },
            generic,
        }
    }
}

/// The keys the object refusing an unknown one declares, for suggestions.
fn known_keys<'a>(schema: &'a Value, schema_path: &str) -> Vec<&'a str> {
    parent_schema(schema, schema_path)
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

/// An unknown key is reported at its own pointer, not its object's, so a
/// diagnostic can point at the key itself.
fn unknown_key(site: &Site, key: &str, known: &[&str]) -> Found {
    let mut message = format!("unknown key `{key}`");
    if let Some(s) = suggest(key, known.iter().copied()) {
        message.push_str(&format!(" (did you mean `{s}`?)"));
    }
    Found {
        error: SchemaError {
            pointer: format!("{}/{}", site.pointer, escape_token(key)),
            message,
            keyword: site.keyword.clone(),
            missing: None,
        },
        generic: false,
    }
}

/// A missing key names the key apart from the message, so a rule that
/// reports the same absence under its own code can claim it.
fn missing_key(site: &Site, property: &Value) -> Found {
    let name = property
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| property.to_string());
    let mut found = site.found(format!("missing required key `{name}`"), false);
    found.error.missing = Some(name);
    found
}

/// A oneOf/anyOf that no alternative satisfied. Alternatives that each
/// require one key are named as a choice; otherwise the closest
/// alternative speaks, followed by a generic complaint that `validate`
/// drops when anything it said stands at or below this pointer.
fn no_shape_matched(
    site: &Site,
    instance: &Value,
    context: &[Vec<ValidationError<'static>>],
    schema: &Value,
    schema_path: &str,
    out: &mut Vec<Found>,
) {
    if let Some(keys) = required_alternatives(schema, schema_path) {
        out.push(site.found(format!("needs one of {}", keys), false));
        return;
    }
    if let Some(branch) = closest_branch(context, &site.pointer) {
        for e in branch {
            convert(e, schema, out);
        }
    }
    out.push(site.found(
        format!("{} matches none of the allowed shapes", show(instance)),
        true,
    ));
}

/// The alternative that came closest: the one whose own discriminators
/// (const/type/enum at this very pointer) held, then the one with fewest
/// errors; on a tie, the first.
fn closest_branch<'c>(
    context: &'c [Vec<ValidationError<'static>>],
    pointer: &str,
) -> Option<&'c [ValidationError<'static>]> {
    let best = context.iter().min_by_key(|branch| {
        let at_root = branch
            .iter()
            .filter(|e| {
                e.instance_path().as_str() == pointer
                    && matches!(e.kind().keyword(), "const" | "type" | "enum")
            })
            .count();
        (at_root, branch.len())
    });
    best.map(Vec::as_slice)
}

/// The message for an error about one value: any error but an unknown key,
/// a missing key or an unmatched oneOf/anyOf, which `convert` handles.
fn leaf_message(err: &ValidationError<'_>, schema: &Value) -> String {
    let schema_path = err.schema_path().as_str();
    let instance: &Value = err.instance();
    match err.kind() {
        ValidationErrorKind::Type { .. } => {
            let expected = schema
                .pointer(schema_path)
                .map(describe_types)
                .unwrap_or_else(|| "another type".to_string());
            format!("expected {expected}, found {}", show(instance))
        }
        ValidationErrorKind::Enum { options } => enum_message(options, instance),
        ValidationErrorKind::Constant { expected_value } => format!(
            "expected {}, found {}",
            compact(expected_value),
            show(instance)
        ),
        ValidationErrorKind::Minimum { limit } => {
            format!("expected a value >= {limit}, found {}", show(instance))
        }
        ValidationErrorKind::Maximum { limit } => {
            format!("expected a value <= {limit}, found {}", show(instance))
        }
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("expected a value > {limit}, found {}", show(instance))
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("expected a value < {limit}, found {}", show(instance))
        }
        ValidationErrorKind::MinLength { limit } => too_few(*limit, "characters", &show(instance)),
        ValidationErrorKind::MinItems { limit } => {
            let n = instance.as_array().map(Vec::len).unwrap_or(0);
            too_few(*limit, "items", &n.to_string())
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!("{} does not match `{pattern}`", show(instance))
        }
        ValidationErrorKind::FalseSchema | ValidationErrorKind::Not { .. } => {
            let why = parent_schema(schema, schema_path)
                .and_then(|s| s.get("description"))
                .and_then(Value::as_str);
            not_allowed(err.instance_path().as_str(), instance, why)
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => {
            match required_alternatives(schema, schema_path) {
                Some(keys) => format!("give only one of {keys}"),
                None => "matches more than one of the allowed shapes".to_string(),
            }
        }
        _ => err.to_string(),
    }
}

/// The allowed values, and the nearest of them to a string that missed.
fn enum_message(options: &Value, instance: &Value) -> String {
    let list = options
        .as_array()
        .map(|a| a.iter().map(compact).collect::<Vec<_>>().join(", "))
        .unwrap_or_else(|| compact(options));
    let mut message = format!("expected one of {list}; found {}", show(instance));
    if let (Some(got), Some(opts)) = (instance.as_str(), options.as_array()) {
        if let Some(s) = suggest(got, opts.iter().filter_map(Value::as_str)) {
            message.push_str(&format!(" (did you mean `{s}`?)"));
        }
    }
    message
}

/// `minLength` or `minItems`: a lower limit of one only ever means "not
/// empty", and saying so is plainer than counting.
fn too_few(limit: u64, unit: &str, found: &str) -> String {
    if limit == 1 {
        "must not be empty".to_string()
    } else {
        format!("expected at least {limit} {unit}, found {found}")
    }
}

/// A key (or list item) the schema forbids here, with the schema's
/// `description` of the rule as the reason when it gives one.
fn not_allowed(pointer: &str, instance: &Value, why: Option<&str>) -> String {
    let key = last_token(pointer);
    // An item of a list is named by its value, not its index.
    let key = match instance {
        Value::String(item) if key.parse::<usize>().is_ok() => item.clone(),
        _ => key,
    };
    let mut message = format!("`{key}` is not allowed here");
    if let Some(why) = why {
        message.push_str(&format!(": {why}"));
    }
    message
}

/// The subschema holding the keyword at `schema_path`.
fn parent_schema<'a>(schema: &'a Value, schema_path: &str) -> Option<&'a Value> {
    let cut = schema_path.rfind('/')?;
    schema.pointer(&schema_path[..cut])
}

/// For `oneOf: [{required: [a]}, {required: [b]}]`: "`a` or `b`".
fn required_alternatives(schema: &Value, schema_path: &str) -> Option<String> {
    let branches = schema.pointer(schema_path)?.as_array()?;
    let mut keys = Vec::new();
    for b in branches {
        let obj = b.as_object()?;
        if obj.len() != 1 {
            return None;
        }
        let req = obj.get("required")?.as_array()?;
        if req.len() != 1 {
            return None;
        }
        keys.push(format!("`{}`", req[0].as_str()?));
    }
    Some(keys.join(" or "))
}

fn describe_types(types: &Value) -> String {
    let one = |t: &str| match t {
        "integer" => "an integer",
        "array" => "an array",
        "object" => "an object",
        "string" => "a string",
        "number" => "a number",
        "boolean" => "a boolean",
        "null" => "null",
        _ => "another type",
    };
    match types {
        Value::String(t) => one(t).to_string(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(one)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "another type".to_string(),
    }
}

/// A value as found: its type and, for scalars, the value itself.
fn show(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_i64() || n.is_u64() => format!("integer `{n}`"),
        Value::Number(n) => format!("number `{n}`"),
        Value::String(_) => format!("string `{}`", compact(v)),
        Value::Array(a) => format!(
            "an array of {} item{}",
            a.len(),
            if a.len() == 1 { "" } else { "s" }
        ),
        Value::Object(_) => "an object".to_string(),
    }
}

/// JSON text, cut short for messages.
fn compact(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        let cut: String = s.chars().take(57).collect();
        format!("{cut}...")
    } else {
        s
    }
}

/// The candidate nearest to `word` within edit distance 2 (ties: first in
/// sorted order), or none. The distance is optimal string alignment
/// (`strsim::osa_distance`): insert, delete, substitute, and swap of two
/// neighbours each cost 1, so `rloe` finds `role`; case differences count.
pub fn suggest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(usize, &str)> = None;
    for c in candidates {
        if c == word || c.chars().count().abs_diff(word.chars().count()) > 2 {
            continue;
        }
        let d = strsim::osa_distance(word, c);
        if d <= 2 && best.is_none_or(|(bd, bc)| (d, c) < (bd, bc)) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(kind: SchemaKind, v: &Value) -> Vec<(String, String, String)> {
        validate(kind, v)
            .into_iter()
            .map(|e| (e.pointer, e.keyword, e.message))
            .collect()
    }

    #[test]
    fn names_round_trip_and_files_are_distinct() {
        for k in SchemaKind::ALL {
            assert_eq!(SchemaKind::from_name(k.name()), Some(k));
            // docs/plan-format.md#the-plan-document names the plan's schema
            // `schemas/plan.schema.json`.
            assert_eq!(k.file_name(), format!("{}.schema.json", k.name()));
        }
        assert_eq!(SchemaKind::from_name("nope"), None);
    }

    #[test]
    fn every_schema_is_draft07_json_and_compiles() {
        for k in SchemaKind::ALL {
            let v: Value = serde_json::from_str(k.text()).unwrap();
            assert_eq!(
                v["$schema"],
                "http://json-schema.org/draft-07/schema#",
                "{}",
                k.name()
            );
            assert!(v.get("$defs").is_none());
            if let Err(e) = jsonschema::draft7::meta::validate(&v) {
                panic!("{} is not a valid draft-07 schema: {e}", k.file_name());
            }
            let _ = compiled(k);
        }
    }

    #[test]
    fn embedded_text_is_the_file_on_disk() {
        for k in SchemaKind::ALL {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("schemas")
                .join(k.file_name());
            assert_eq!(std::fs::read_to_string(path).unwrap(), k.text());
        }
    }

    /// Every `properties` entry carries `title`, `description` and
    /// `markdownDescription` (editor hover help; VS Code shows
    /// `description` as plain text, backticks and all), directly or through
    /// the `$ref` it consists of; `$ref` stands alone in its object
    /// (draft-07, Taplo); every `enum` has one description per value for
    /// VS Code (`enumDescriptions`, `markdownEnumDescriptions`) and Taplo
    /// (`x-taplo.docs.enumValues`).
    fn walk(root: &Value, v: &Value, at: &str, problems: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if m.contains_key("$ref") && m.len() != 1 {
                    problems.push(format!("{at}: $ref with siblings"));
                }
                let refining = is_refining(at);
                if let Some(values) = m
                    .get("enum")
                    .and_then(Value::as_array)
                    .filter(|_| !refining)
                {
                    for key in ["enumDescriptions", "markdownEnumDescriptions"] {
                        check_per_value(
                            m.get(key),
                            values.len(),
                            &format!("{at}: {key}"),
                            problems,
                        );
                    }
                    let taplo = m.get("x-taplo").and_then(|x| x.pointer("/docs/enumValues"));
                    check_per_value(
                        taplo,
                        values.len(),
                        &format!("{at}: x-taplo.docs.enumValues"),
                        problems,
                    );
                }
                if let Some(Value::Object(props)) = m.get("properties") {
                    for (name, sub) in props {
                        let here = format!("{at}/properties/{name}");
                        if refining {
                            continue;
                        }
                        let target = match sub.get("$ref").and_then(Value::as_str) {
                            Some(r) => match r.strip_prefix('#').and_then(|p| root.pointer(p)) {
                                Some(t) => t,
                                None => {
                                    problems.push(format!("{here}: $ref {r} does not resolve"));
                                    continue;
                                }
                            },
                            None => sub,
                        };
                        for key in ["title", "description", "markdownDescription"] {
                            if target
                                .get(key)
                                .and_then(Value::as_str)
                                .is_none_or(str::is_empty)
                            {
                                problems.push(format!("{here}: no {key}"));
                            }
                        }
                    }
                }
                for (k, sub) in m {
                    walk(root, sub, &format!("{at}/{k}"), problems);
                }
            }
            Value::Array(a) => {
                for (i, sub) in a.iter().enumerate() {
                    walk(root, sub, &format!("{at}/{i}"), problems);
                }
            }
            _ => {}
        }
    }

    /// Subschemas inside if/then/else/not and the rule definitions only
    /// refine a property documented where it is declared.
    fn is_refining(at: &str) -> bool {
        [
            "/if",
            "/then",
            "/else",
            "/allOf",
            "/anyOf",
            "/not",
            "/definitions/after-defaults-",
            "/definitions/v1-",
            "/definitions/v2-",
            "/definitions/entry-",
            "/definitions/defaults-say",
        ]
        .iter()
        .any(|r| at.contains(r))
    }

    fn check_per_value(found: Option<&Value>, n: usize, what: &str, problems: &mut Vec<String>) {
        match found.and_then(Value::as_array) {
            Some(d)
                if d.len() == n && d.iter().all(|x| x.as_str().is_some_and(|s| !s.is_empty())) => {}
            _ => problems.push(format!("{what}: not one non-empty description per value")),
        }
    }

    #[test]
    fn every_property_has_title_and_descriptions() {
        let mut problems = Vec::new();
        for k in SchemaKind::ALL {
            let v: Value = serde_json::from_str(k.text()).unwrap();
            walk(&v, &v, k.file_name(), &mut problems);
            // The document itself (hover on the file's first line).
            if v.get("markdownDescription")
                .and_then(Value::as_str)
                .is_none()
            {
                problems.push(format!("{}: no markdownDescription", k.file_name()));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    fn v1_worker() -> Value {
        json!({"workerId": "codex", "role": "verifier", "promptPath": "p.md", "resultPath": "r.md"})
    }

    fn v2_worker() -> Value {
        json!({
            "schemaVersion": "2.0", "executionIdentityVersion": 2,
            "participantRef": "p1", "roleExecutionRef": "re1", "executionLabel": "Verifier A",
            "dutyId": "implementation-verifier", "invocationRef": "inv-1", "provider": "codex",
            "assignmentRef": "run/assign/verifier-a", "attempt": 1,
            "role": "verifier", "promptPath": "p.md", "resultPath": "r.md"
        })
    }

    #[test]
    fn jobs_accepts_v1_v2_stages_and_defaults() {
        let spec = json!({"workers": [v1_worker(), v2_worker()]});
        assert_eq!(messages(SchemaKind::Jobs, &spec), vec![]);
        let spec = json!({
            "$schema": "./schemas/jobs.schema.json",
            "defaults": {"role": "analyst", "idleTimeoutSeconds": 30, "provider": "command"},
            "stages": [{"name": "one", "workers": [
                {"workerId": "a", "promptPath": "a.md", "resultPath": "a.out", "command": ["true"]}
            ]}]
        });
        assert_eq!(messages(SchemaKind::Jobs, &spec), vec![]);
    }

    #[test]
    fn jobs_unknown_key_suggests_the_nearest_known_key() {
        let mut w = v1_worker();
        w["promptPth"] = json!("x.md");
        let spec = json!({"workers": [w]});
        assert_eq!(
            messages(SchemaKind::Jobs, &spec),
            vec![(
                "/workers/0/promptPth".into(),
                "additionalProperties".into(),
                "unknown key `promptPth` (did you mean `promptPath`?)".into()
            )]
        );
        let spec = json!({"workers": [], "colour": 1, "defalts": {}});
        let got = messages(SchemaKind::Jobs, &spec);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "/colour");
        assert_eq!(got[0].2, "unknown key `colour`");
        assert_eq!(got[1].2, "unknown key `defalts` (did you mean `defaults`?)");
    }

    #[test]
    fn jobs_leaf_errors_are_specific() {
        let mut w = v2_worker();
        w["attempt"] = json!(0);
        w["provider"] = json!("claud");
        w.as_object_mut().unwrap().remove("dutyId");
        w["workerId"] = json!("x");
        let spec = json!({"workers": [w]});
        let got = messages(SchemaKind::Jobs, &spec);
        assert_eq!(
            got,
            vec![
                // No `defaults` gives it, so the schema says so too.
                ("/workers/0".into(), "required".into(), "missing required key `dutyId`".into()),
                ("/workers/0/attempt".into(), "minimum".into(), "expected a value >= 1, found integer `0`".into()),
                ("/workers/0/provider".into(), "enum".into(),
                 "expected one of \"claude\", \"codex\", \"gemini\", \"command\"; found string `\"claud\"` (did you mean `claude`?)".into()),
                ("/workers/0/workerId".into(), "not".into(),
                 "`workerId` is not allowed here: a v2 entry (schemaVersion \"2.0\") is identified by its refs, not by workerId".into()),
            ]
        );
    }

    #[test]
    fn jobs_slurm_options_are_checked_and_near_misses_pass() {
        let mut w = v1_worker();
        w["backend"] = json!("slurm");
        w["slurm"] = json!({"partition": "gpu", "timeLimit": "1-12:00:00", "cpus": 4, "memory": "16G",
                            "extraArgs": ["--qos=short", "--gres=gpu:1", "--exclusive"]});
        let spec =
            json!({"defaults": {"slurm": {"account": "lab", "timeLimit": "30"}}, "workers": [w]});
        assert_eq!(messages(SchemaKind::Jobs, &spec), vec![]);
        let mut w = v1_worker();
        w["slurm"] = json!({"partiton": "gpu", "timeLimit": "1h", "cpus": 0, "memory": "16GB",
                            "extraArgs": ["--array=0-9", "--output=x.log", "-o", "--wrap"]});
        let got = messages(SchemaKind::Jobs, &json!({"workers": [w]}));
        let pointers: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(
            pointers,
            vec![
                "/workers/0/slurm/cpus",
                "/workers/0/slurm/extraArgs/0",
                "/workers/0/slurm/extraArgs/1",
                "/workers/0/slurm/extraArgs/2",
                "/workers/0/slurm/extraArgs/3",
                "/workers/0/slurm/memory",
                "/workers/0/slurm/partiton",
                "/workers/0/slurm/timeLimit",
            ],
            "{got:?}"
        );
        assert!(
            got[1].2.starts_with("`--array=0-9` is not allowed here: "),
            "{}",
            got[1].2
        );
        assert_eq!(
            got[6].2,
            "unknown key `partiton` (did you mean `partition`?)"
        );
    }

    #[test]
    fn jobs_type_and_requirements() {
        let spec = json!({"workers": [{"workerId": "w", "promptPath": "p", "attempt": true}]});
        let got = messages(SchemaKind::Jobs, &spec);
        assert_eq!(
            got,
            vec![
                // `w` implies no provider (only claude, codex and gemini do).
                (
                    "/workers/0".into(),
                    "required".into(),
                    "missing required key `provider`".into()
                ),
                (
                    "/workers/0".into(),
                    "required".into(),
                    "missing required key `resultPath`".into()
                ),
                (
                    "/workers/0".into(),
                    "required".into(),
                    "missing required key `role`".into()
                ),
                (
                    "/workers/0/attempt".into(),
                    "type".into(),
                    "expected an integer, found boolean `true`".into()
                ),
            ]
        );
        let got = messages(SchemaKind::Jobs, &json!({}));
        assert_eq!(
            got,
            vec![(
                "".into(),
                "oneOf".into(),
                "needs one of `workers` or `stages`".into()
            )]
        );
        let got = messages(SchemaKind::Jobs, &json!({"workers": [], "stages": []}));
        assert_eq!(
            got,
            vec![(
                "".into(),
                "oneOf".into(),
                "give only one of `workers` or `stages`".into()
            )]
        );
        // Neither the entry nor `defaults` gives an identity: a v1 entry
        // needs `workerId`, and one whose id implies no provider, `provider`.
        let got: Vec<String> = messages(
            SchemaKind::Jobs,
            &json!({"workers": [{"role": "r", "promptPath": "p", "resultPath": "r"}]}),
        )
        .into_iter()
        .map(|g| g.2)
        .collect();
        assert_eq!(
            got,
            [
                "missing required key `provider`",
                "missing required key `workerId`"
            ]
        );
        let got = messages(
            SchemaKind::Jobs,
            &json!({"stages": [{"name": "", "workers": []}]}),
        );
        assert_eq!(
            got,
            vec![(
                "/stages/0/name".into(),
                "minLength".into(),
                "must not be empty".into()
            )]
        );
    }

    #[test]
    fn jobs_v2_provider_and_role_may_come_from_defaults() {
        let mut w = v2_worker();
        let m = w.as_object_mut().unwrap();
        m.remove("provider");
        m.remove("role");
        let spec =
            json!({"defaults": {"provider": "codex", "role": "verifier"}, "workers": [w.clone()]});
        assert_eq!(messages(SchemaKind::Jobs, &spec), vec![]);
        let spec = json!({"stages": [{"name": "s", "workers": [w.clone()]}]});
        let got: Vec<String> = messages(SchemaKind::Jobs, &spec)
            .into_iter()
            .map(|g| g.2)
            .collect();
        assert_eq!(
            got,
            vec![
                "missing required key `provider`",
                "missing required key `role`"
            ]
        );
        w["executionIdentityVersion"] = json!(3);
        w["workerId"] = json!("nope");
        let spec = json!({"defaults": {"provider": "codex", "role": "verifier", "workerId": "x"}, "workers": [w]});
        let got = messages(SchemaKind::Jobs, &spec);
        assert_eq!(
            got.iter()
                .map(|g| (g.0.as_str(), g.1.as_str()))
                .collect::<Vec<_>>(),
            vec![
                ("/defaults/workerId", "additionalProperties"),
                ("/workers/0/executionIdentityVersion", "const"),
                ("/workers/0/workerId", "not"),
            ]
        );
        assert_eq!(got[1].2, "expected 2, found integer `3`");
    }

    /// `pointer: message` of each complaint, for the tables below.
    fn complaints(spec: Value) -> Vec<String> {
        validate(SchemaKind::Jobs, &spec)
            .into_iter()
            .map(|e| format!("{}: {}", e.pointer, e.message))
            .collect()
    }

    fn entry(extra: Value) -> Value {
        let mut e = json!({"role": "analyst", "promptPath": "p.md", "resultPath": "r.md"});
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    }

    /// The rules of one spec that depend on what `defaults` gives: each
    /// case beside the near miss that passes (issue 15's four specs first).
    #[test]
    fn jobs_rules_hold_after_defaults() {
        let missing = |key: &str| format!("/workers/0: missing required key `{key}`");
        // A worker id that implies no provider.
        let reviewer = entry(json!({"workerId": "reviewer"}));
        assert_eq!(
            complaints(json!({"workers": [reviewer.clone()]})),
            [missing("provider")]
        );
        assert!(
            complaints(json!({"defaults": {"provider": "codex"}, "workers": [reviewer]}))
                .is_empty()
        );
        assert!(complaints(json!({"workers": [entry(json!({"workerId": "codex"}))]})).is_empty());
        // A command worker with no argv.
        let cmd = entry(json!({"workerId": "w", "provider": "command"}));
        assert_eq!(
            complaints(json!({"workers": [cmd.clone()]})),
            [missing("command")]
        );
        assert!(
            complaints(json!({"defaults": {"command": ["true"]}, "workers": [cmd]})).is_empty()
        );
        let bare = entry(json!({"workerId": "w"}));
        assert_eq!(
            complaints(json!({"defaults": {"provider": "command"}, "workers": [bare]})),
            [missing("command")]
        );
        // An entry's own provider wins over the default's command.
        let own = entry(json!({"workerId": "w", "provider": "codex"}));
        assert!(
            complaints(json!({"defaults": {"provider": "command"}, "workers": [own]})).is_empty()
        );
        // No resultPath.
        let claude = json!({"workerId": "claude", "role": "analyst", "promptPath": "p.md"});
        assert_eq!(
            complaints(json!({"workers": [claude.clone()]})),
            [missing("resultPath")]
        );
        assert!(
            complaints(json!({"defaults": {"resultPath": "r.md"}, "workers": [claude]})).is_empty()
        );
        // A promptPath and role from defaults are enough.
        let thin = json!({"workerId": "claude", "resultPath": "r.md"});
        assert!(complaints(
            json!({"defaults": {"role": "a", "promptPath": "p.md"}, "workers": [thin]})
        )
        .is_empty());

        // A v2 entry missing all its refs.
        let v2 = entry(
            json!({"schemaVersion": "2.0", "executionIdentityVersion": 2,
            "provider": "codex", "dutyId": "analysis", "attempt": 1}),
        );
        let refs = [
            "assignmentRef",
            "executionLabel",
            "invocationRef",
            "participantRef",
            "roleExecutionRef",
        ];
        assert_eq!(
            complaints(json!({"workers": [v2.clone()]})),
            refs.map(missing).to_vec()
        );
        let mut whole = v2.clone();
        for r in refs {
            whole[r] = json!("x/y");
        }
        assert!(complaints(json!({"workers": [whole.clone()]})).is_empty());
        // v2 by `defaults`: the entry's own marker may be absent, and the
        // duty, attempt, provider and version may come from there too.
        let mut own_refs = json!({"role": "analyst", "promptPath": "p.md", "resultPath": "r.md"});
        for r in refs {
            own_refs[r] = json!("x/y");
        }
        let v2_defaults = json!({"schemaVersion": "2.0", "executionIdentityVersion": 2,
            "attempt": 1, "dutyId": "analysis", "provider": "codex"});
        assert!(
            complaints(json!({"defaults": v2_defaults, "workers": [own_refs.clone()]})).is_empty()
        );
        assert_eq!(
            complaints(
                json!({"defaults": {"schemaVersion": "2.0"}, "workers": [own_refs.clone()]})
            ),
            ["attempt", "dutyId", "executionIdentityVersion", "provider"]
                .map(missing)
                .to_vec()
        );
        // Without a v2 default, the same entry is v1: its v2 keys are refused.
        let got = complaints(json!({"defaults": {"provider": "codex"}, "workers": [own_refs]}));
        assert!(got.contains(&missing("workerId")), "{got:?}");
        assert!(
            got.iter().any(|g| g
                .starts_with("/workers/0/participantRef: `participantRef` is not allowed here")),
            "{got:?}"
        );
        // A v2 version marker in `defaults` reaches a v1 entry too.
        let v1 = entry(json!({"workerId": "codex"}));
        assert_eq!(
            complaints(json!({"defaults": {"dutyId": "analysis"}, "workers": [v1.clone()]})),
            [missing("schemaVersion")]
        );
        // `schemaVersion = "2.0"` needs `executionIdentityVersion = 2`.
        let mut no_eiv = whole.clone();
        no_eiv
            .as_object_mut()
            .unwrap()
            .remove("executionIdentityVersion");
        assert_eq!(
            complaints(json!({"workers": [no_eiv.clone()]})),
            [missing("executionIdentityVersion")]
        );
        assert!(complaints(
            json!({"defaults": {"executionIdentityVersion": 2}, "workers": [no_eiv.clone()]})
        )
        .is_empty());
        let got =
            complaints(json!({"defaults": {"executionIdentityVersion": 3}, "workers": [no_eiv]}));
        assert_eq!(
            got,
            [
                "/defaults/executionIdentityVersion: expected 2, found integer `3`".to_string(),
                missing("executionIdentityVersion")
            ]
        );
        // The state key, the last segment of a v2 assignmentRef.
        let mut slash = whole.clone();
        slash["assignmentRef"] = json!("run/");
        assert_eq!(
            complaints(json!({"workers": [slash]})),
            ["/workers/0/assignmentRef: string `\"run/\"` does not match `[^/]$`"]
        );
        // Not a v1 entry's business.
        let v1_slash = entry(json!({"workerId": "codex", "assignmentRef": "run/"}));
        assert!(complaints(json!({"workers": [v1_slash]})).is_empty());
        // The same rules in a pipeline's stages.
        let got = complaints(
            json!({"stages": [{"name": "s", "workers": [entry(json!({"workerId": "reviewer"}))]}]}),
        );
        assert_eq!(
            got,
            ["/stages/0/workers/0: missing required key `provider`"]
        );
    }

    #[test]
    fn jobs_reverify_rounds_and_their_near_misses() {
        for (kind, ok) in [
            ("reverify-r0", false),
            ("reverify-r", false),
            ("reverify-rx", false),
            ("reverify-r00", false),
            ("reverify-r1", true),
            ("reverify-r012", true),
            ("initial", true),
            ("reverify", true),
        ] {
            let spec =
                json!({"workers": [entry(json!({"workerId": "codex", "dispatchKind": kind}))]});
            assert_eq!(
                complaints(spec.clone()).is_empty(),
                ok,
                "{kind}: {:?}",
                complaints(spec)
            );
            // The rule itself agrees.
            assert_eq!(
                crate::vocab::DispatchKind::parse(kind).is_ok(),
                ok,
                "{kind}"
            );
        }
    }

    /// The defaults the schema documents are the ones okstra applies.
    #[test]
    fn jobs_defaults_are_okstras() {
        let v: Value = serde_json::from_str(SchemaKind::Jobs.text()).unwrap();
        let d = |key: &str| v["definitions"][key]["default"].clone();
        // An agent's argv with no option set holds okstra's default.
        use crate::provider::{build_argv, ArgvRequest, Provider, ProviderOptions};
        for (provider, key, flag) in [
            (Provider::Claude, "permissionMode", "--permission-mode"),
            (Provider::Codex, "sandboxMode", "--sandbox"),
            (Provider::Gemini, "approvalMode", "--approval-mode"),
        ] {
            let argv = build_argv(&ArgvRequest {
                provider,
                model: "",
                project_root: std::path::Path::new("/p"),
                write_dirs: &[],
                options: &ProviderOptions::default(),
                command: &[],
                session_id: None,
                project_is_git_repo: true,
            });
            let at = argv
                .iter()
                .position(|a| a == flag)
                .unwrap_or_else(|| panic!("{argv:?}"));
            assert_eq!(json!(argv[at + 1]), d(key), "{key}");
        }
        assert_eq!(
            d("dispatchKind"),
            json!(crate::vocab::DispatchKind::INITIAL)
        );
        assert_eq!(
            d("mutationAudit"),
            json!(crate::vocab::MutationAudit::Batch)
        );
        assert_eq!(
            d("idleTimeoutSeconds"),
            json!(crate::compile::DEFAULT_IDLE_TIMEOUT_SECONDS)
        );
        // Each value a provider CLI accepts has its description.
        for key in [
            "provider",
            "permissionMode",
            "sandboxMode",
            "approvalMode",
            "mutationAudit",
            "backend",
            "schemaVersion",
        ] {
            let def = &v["definitions"][key];
            let n = def["enum"].as_array().unwrap().len();
            assert_eq!(
                def["markdownEnumDescriptions"].as_array().map(Vec::len),
                Some(n),
                "{key}"
            );
        }
    }

    #[test]
    fn manifest_samples() {
        let ok = json!({
            "taskKey": "T-1", "teamStatePath": ".okstra/team-state.json", "extra": {"kept": true},
            "terminalBackend": "tmux-pane", "workflow": {"currentPhase": "verify"},
            "schemaVersion": "2.0", "executionIdentityVersion": 2,
            "roleExecutions": [{"roleExecutionRef": "re1", "participantRef": "p1", "executionLabel": "A",
                "role": "verifier", "provider": "codex", "modelRef": "m",
                "modelSpecDigest": format!("sha256:{}", "a".repeat(64)),
                "binding": {"runner": "cli-wrapper", "resolvedExecutionValue": "gpt", "more": 1}}],
            "participantAssignments": [{"participantRef": "p1"}],
            "invocationAssignments": {"translator": {"provider": "claude", "modelExecutionValue": "s", "runner": "cli-wrapper"}},
            "agentContract": {"invocationReservationRootPath": ".okstra/res"},
            "models": {"m": {"provider": "codex", "modelId": "gpt", "versionKind": "pinned", "channelFamily": "gpt"}},
            "duties": {"x": "analyst"}
        });
        assert_eq!(messages(SchemaKind::Manifest, &ok), vec![]);
        let bad = json!({"taskKey": 3, "models": {"m": {"versionKind": "latest"}},
            "roleExecutions": [{"modelSpecDigest": "sha256:XYZ"}]});
        let got = messages(SchemaKind::Manifest, &bad);
        let pointers: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(
            pointers,
            vec![
                "",
                "/models/m/versionKind",
                "/roleExecutions/0/modelSpecDigest",
                "/taskKey"
            ],
            "{got:?}"
        );
    }

    #[test]
    fn metadata_samples() {
        let ok = json!({"invocationId": "inv", "prompt": {"path": "p.md"}, "schemaVersion": 1,
            "digests": {"promptDigest": "x"}, "modelAssignment": {"modelExecutionValue": "m", "hostModelValue": null}});
        assert_eq!(messages(SchemaKind::Metadata, &ok), vec![]);
        let bad = json!({"schemaVersion": "3", "modelAssignment": {"hostModelValue": 5}});
        let got = messages(SchemaKind::Metadata, &bad);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0].0, "/modelAssignment/hostModelValue");
        assert_eq!(got[0].2, "expected a string or null, found integer `5`");
        assert_eq!(got[1].0, "/schemaVersion");
    }

    #[test]
    fn team_state_samples() {
        let ok = json!({"workers": [{"workerId": "a", "status": "completed", "reason": "ok", "x": 1}],
            "workerDispatches": [{"dispatchId": "i:attempt-1"}], "other": 1});
        assert_eq!(messages(SchemaKind::TeamState, &ok), vec![]);
        let bad = json!({"workers": [{"status": "done"}], "attempts": {}});
        let got = messages(SchemaKind::TeamState, &bad);
        let pointers: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(pointers, vec!["/attempts", "/workers/0/status"]);
    }

    fn sample_plan(full: bool) -> crate::plan::Plan {
        use crate::plan::*;
        use std::collections::BTreeMap;
        let job = |identity: Identity| Job {
            key: "k".into(),
            identity,
            provider: crate::provider::Provider::Codex,
            backend: if full {
                crate::vocab::Backend::Slurm
            } else {
                crate::vocab::Backend::CliWrapper
            },
            role: crate::vocab::Role::Verifier,
            audience: full.then_some(crate::vocab::Audience::ImplementationVerifier),
            dispatch_kind: crate::vocab::DispatchKind::initial(),
            round: 1,
            prompt_path: "p.md".into(),
            metadata_path: full.then(|| "p.md.meta.json".into()),
            result_path: "r.md".into(),
            worker_result_path: "r.md".into(),
            completion_paths: vec!["r.md".into()],
            worktree_path: full.then(|| "wt".into()),
            git_worktree: full.then(|| crate::plan::GitWorktree {
                base: "0".repeat(40),
                base_from: "head".into(),
                branch: "okstra/t/w".into(),
                keep: true,
            }),
            model_execution_value: if full { "gpt".into() } else { String::new() },
            invocation: full.then(|| Invocation {
                invocation_id: "inv".into(),
                audience: "a".into(),
                assignment_ref: "x/k".into(),
                digests: BTreeMap::from([("promptDigest".to_string(), "d".to_string())]),
                host_model_value: None,
            }),
            dispatch_id: full.then(|| dispatch_id("inv", 1)),
            command: vec!["okstra".into(), "worker".into()],
            provider_command: vec!["codex".into(), "exec".into()],
            takes_session_id: false,
            env: if full {
                BTreeMap::from([("A".to_string(), "1".to_string())])
            } else {
                BTreeMap::new()
            },
            idle_timeout_seconds: 600,
            timeout_seconds: full.then_some(60),
            budget: full.then_some(crate::budget::Budget {
                max_cost_usd: Some(2.5),
                max_tokens: Some(400_000),
            }),
            liveness_mode: "log-growth".into(),
            write_policy: WritePolicy {
                role: "verifier".into(),
                allow: vec!["r.md".into()],
                digest: "sha256:x".into(),
            },
            write_enforcement: WriteEnforcement {
                mutation_audit: crate::vocab::MutationAudit::Batch,
                confinement: crate::vocab::Confinement::Required,
            },
            network: full.then(|| crate::plan::Network::Allow {
                allow: vec!["pypi.org".into()],
            }),
            read_paths: if full { vec!["~/data".into()] } else { vec![] },
            slurm: full.then(|| SlurmOptions {
                partition: Some("debug".into()),
                account: Some("lab".into()),
                time_limit: Some("1:00:00".into()),
                cpus: Some(2),
                memory: Some("4G".into()),
                extra_args: vec!["--qos=short".into()],
            }),
            pricing: full.then_some(crate::provider::Pricing {
                input: 1.25,
                cached_input: Some(0.125),
                cache_write: None,
                output: 10.0,
            }),
        };
        let mut plan = Plan {
            format_version: FORMAT_VERSION,
            okstra_version: crate::VERSION.into(),
            created_at: "2025-01-01T00:00:00Z".into(),
            project_root: "/p".into(),
            run: RunInfo {
                task_key: "T".into(),
                manifest_path: "m.json".into(),
                team_state_path: "ts.json".into(),
                lead_events_path: "e.jsonl".into(),
                error_log_path: "err.jsonl".into(),
                terminal_backend: crate::vocab::Backend::CliWrapper,
                workflow_phase: if full { "verify".into() } else { String::new() },
                mode: "spec".into(),
                budget: full.then_some(crate::budget::RunBudget {
                    max_cost_usd: Some(10.0),
                    max_tokens: None,
                    on_budget: crate::budget::OnBudget::Stop,
                }),
            },
            inputs: vec![InputRecord {
                kind: "spec".into(),
                path: "s.toml".into(),
                sha256: "0".repeat(64),
            }],
            policy: RetryPolicy {
                max_attempts: MAX_ATTEMPTS,
            },
            stages: vec![Stage {
                name: "main".into(),
                jobs: vec![
                    job(Identity::V1 {
                        worker_id: "k".into(),
                    }),
                    job(Identity::V2(V2Identity {
                        participant_ref: "p".into(),
                        role_execution_ref: "re".into(),
                        execution_label: "L".into(),
                        duty_id: "analysis".into(),
                        invocation_ref: "i".into(),
                        assignment_ref: "x/k".into(),
                        attempt: 1,
                    })),
                ],
            }],
            digest: String::new(),
        };
        if full {
            plan.seal();
        }
        plan
    }

    #[test]
    fn plan_schema_accepts_exactly_what_plan_serializes() {
        for full in [false, true] {
            let v = serde_json::to_value(sample_plan(full)).unwrap();
            assert_eq!(messages(SchemaKind::Plan, &v), vec![], "full={full}");
        }
        let mut v = serde_json::to_value(sample_plan(true)).unwrap();
        v["stages"][0]["jobs"][0]["identity"]["attempt"] = json!(1);
        v["stages"][0]["jobs"][1]["extra"] = json!(1);
        let got = messages(SchemaKind::Plan, &v);
        let pointers: Vec<&str> = got.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(
            pointers,
            vec![
                "/stages/0/jobs/0/identity/attempt",
                "/stages/0/jobs/1/extra"
            ],
            "{got:?}"
        );
    }

    #[test]
    fn suggestions_stay_close() {
        assert_eq!(
            suggest("promptPth", ["promptPath", "role"]),
            Some("promptPath")
        );
        assert_eq!(suggest("rloe", ["role"]), Some("role"));
        assert_eq!(suggest("zzzzzz", ["role"]), None);
        // The metric: a swap of neighbours is one edit.
        assert_eq!(strsim::osa_distance("abc", "acb"), 1);
        assert_eq!(strsim::osa_distance("", "ab"), 2);
        assert_eq!(suggest("a", ["abcd"]), None);
    }

    /// For the first error, a `oneOf` at `pointer` that `instance` matched
    /// none of: how many errors each alternative has, and the keywords of
    /// the one `closest_branch` picks.
    fn closest(schema: Value, instance: Value, pointer: &str) -> (Vec<usize>, Vec<String>) {
        let validator = jsonschema::validator_for(&schema).unwrap();
        let err = validator.iter_errors(&instance).next().unwrap();
        let ValidationErrorKind::OneOfNotValid { context } = err.kind() else {
            panic!("not an unmatched oneOf: {err}");
        };
        let sizes = context.iter().map(Vec::len).collect();
        let picked = closest_branch(context, pointer)
            .unwrap()
            .iter()
            .map(|e| e.kind().keyword().to_string())
            .collect();
        (sizes, picked)
    }

    #[test]
    fn the_closest_alternative_is_the_shape_the_value_has() {
        // An object is told what the object shape lacks, though the string
        // shape failed in fewer places.
        let got = closest(
            json!({"oneOf": [{"type": "string"}, {"type": "object", "required": ["a", "b"]}]}),
            json!({}),
            "",
        );
        assert_eq!(
            got,
            (vec![1, 2], vec!["required".into(), "required".into()])
        );
        // Only a discriminator at the value itself counts: a `const` failed
        // one level down is an error like any other, and fewest errors wins.
        let got = closest(
            json!({"oneOf": [{"properties": {"k": {"const": "x"}}}, {"required": ["b", "c"]}]}),
            json!({"k": "y"}),
            "",
        );
        assert_eq!(got, (vec![1, 2], vec!["const".into()]));
        // The value itself is the one at the oneOf's pointer, not the root:
        // the `const` fails at `/v`, so the other shape speaks though both
        // failed once (a tie would go to the first).
        let got = closest(
            json!({"properties": {"v": {"oneOf": [{"const": "x"}, {"type": "string", "minLength": 5}]}}}),
            json!({"v": "y"}),
            "/v",
        );
        assert_eq!(got, (vec![1, 1], vec!["minLength".into()]));
        assert!(closest_branch(&[], "").is_none());
    }

    #[test]
    fn not_allowed_names_the_key_or_the_listed_value() {
        assert_eq!(
            not_allowed(
                "/workers/0/workerId",
                &json!("x"),
                Some("refs, not workerId")
            ),
            "`workerId` is not allowed here: refs, not workerId"
        );
        assert_eq!(
            not_allowed("/slurm/extraArgs/2", &json!("-o"), None),
            "`-o` is not allowed here"
        );
        // Only a string item can stand for itself.
        assert_eq!(
            not_allowed("/ids/2", &json!(7), None),
            "`2` is not allowed here"
        );
        assert_eq!(
            not_allowed("/env/a~1b~0", &json!(1), None),
            "`a/b~` is not allowed here"
        );
    }

    #[test]
    fn a_limit_of_one_is_said_as_not_empty() {
        assert_eq!(too_few(1, "items", "0"), "must not be empty");
        assert_eq!(
            too_few(2, "items", "1"),
            "expected at least 2 items, found 1"
        );
        assert_eq!(
            too_few(3, "characters", "string `\"ab\"`"),
            "expected at least 3 characters, found string `\"ab\"`"
        );
    }
}
