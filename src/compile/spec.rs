//! A job spec as planning reads it: the document without its worker
//! entries (`defaults`, the stages' names, anything else it holds), and the
//! entries apart, each made a value only when its turn comes.
//!
//! A JSON spec is read that way from its text: the rest of the document is
//! parsed, each entry is kept as the bytes it was written in. A spec of ten
//! megabytes of small entries once took six times its size as one
//! `serde_json::Value` (a B-tree node per entry), before anything was
//! checked. A TOML spec is parsed whole, then taken apart.
//!
//! Its schema check is made of parts that add up to the check of the whole
//! document: the document without its entries, then each entry with the
//! spec's `defaults` beside it (the jobs schema relates an entry to nothing
//! else; see its `$comment`).

use super::Ctx;
use crate::paths;
use crate::schema::{self, SchemaError, SchemaKind};
use crate::source::{Format, SourceFile};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::ops::Range;
use std::path::Path;

/// A spec document and its worker entries.
pub struct Spec {
    /// The document, with the `workers` array that holds the entries left
    /// empty (`stages[].workers` for a pipeline, else `workers`).
    pub rest: Value,
    /// Whether the entries are the stages' (`stages[].workers`).
    staged: bool,
    items: Vec<Item>,
}

/// One item of a `workers` array: a worker entry when it is a table.
pub struct Item {
    pub stage: usize,
    /// Its index in its `workers` array.
    index: usize,
    held: Held,
}

enum Held {
    /// These bytes of the spec's text, which parsed as a value when the
    /// spec was read.
    Text(Range<usize>),
    Value(Value),
}

impl Item {
    /// The item's value, borrowed where it is held as one.
    pub fn value<'a>(&'a self, text: &str) -> Cow<'a, Value> {
        match &self.held {
            Held::Text(span) => Cow::Owned(parse_again(&text[span.clone()])),
            Held::Value(v) => Cow::Borrowed(v),
        }
    }

    /// The item's value, moved out (it is not held any more).
    fn take(&mut self, text: &str) -> Value {
        match &mut self.held {
            Held::Text(span) => parse_again(&text[span.clone()]),
            Held::Value(v) => std::mem::take(v),
        }
    }
}

/// Parse again bytes of a spec that parsed, the same way, when it was read
/// (as a value of their own, nested well inside serde_json's depth limit:
/// see `split_json`). It does not fail; were it to, the item would read
/// as `null`, which the schema refuses.
fn parse_again(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

/// Read the spec at `path` (problems go to `ctx`), recording its digest.
pub fn load(ctx: &mut Ctx, display: &str, path: &Path) -> Option<(Spec, SourceFile)> {
    let format = Format::for_path(path);
    if format != Format::Json {
        let loaded = ctx.load("spec", display, path, paths::Base::CurrentDir, format)?;
        return Some((Spec::of_value(loaded.doc), loaded.src));
    }
    let src = match SourceFile::read(display, path, format) {
        Ok(src) => src,
        Err(d) => {
            ctx.push(paths::name_root(d, &ctx.root, paths::Base::CurrentDir));
            return None;
        }
    };
    // Anything unusual about the text (a syntax error above all) is for
    // the whole document's parse to report, as it would without the split.
    let spec = match split_json(src.text()) {
        Some(spec) => spec,
        None => match src.value() {
            Ok(doc) => Spec::of_value(doc),
            Err(d) => {
                ctx.push(d);
                return None;
            }
        },
    };
    ctx.record_input("spec", display, src.text().as_bytes());
    Some((spec, src))
}

impl Spec {
    /// A spec parsed whole: its entries are moved out of the document.
    pub fn of_value(mut doc: Value) -> Spec {
        let mut items = Vec::new();
        let mut take = |stage: usize, list: Option<&mut Value>| {
            if let Some(list) = list.and_then(Value::as_array_mut) {
                let held = std::mem::take(list).into_iter().map(Held::Value);
                items.extend(
                    held.enumerate()
                        .map(|(index, held)| Item { stage, index, held }),
                );
            }
        };
        let staged = doc.get("stages").is_some_and(Value::is_array);
        if let Some(stages) = doc.get_mut("stages").and_then(Value::as_array_mut) {
            for (si, stage) in stages.iter_mut().enumerate() {
                take(si, stage.get_mut("workers"));
            }
        } else {
            take(0, doc.get_mut("workers"));
        }
        Spec {
            rest: doc,
            staged,
            items,
        }
    }

    /// The items, in the order written.
    pub fn items(&self) -> &[Item] {
        &self.items
    }

    /// Where an item is.
    pub fn pointer(&self, item: &Item) -> String {
        if self.staged {
            format!("/stages/{}/workers/{}", item.stage, item.index)
        } else {
            format!("/workers/{}", item.index)
        }
    }

    /// Every item in turn, moved out as a value with its pointer and the
    /// schema's complaints about it (see [`Spec::schema_errors`]).
    pub fn take_each(
        &mut self,
        text: &str,
        mut each: impl FnMut(usize, String, Value, Vec<SchemaError>),
    ) {
        let mut check = ItemCheck::new(&self.rest, self.staged);
        let mut items = std::mem::take(&mut self.items);
        for batch in items.chunks_mut(CHECKED_TOGETHER) {
            let values = batch.iter_mut().map(|item| item.take(text)).collect();
            let pointers: Vec<String> = batch.iter().map(|item| self.pointer(item)).collect();
            let (values, errors) = check.errors(values, &pointers);
            for (((item, pointer), value), errors) in
                batch.iter().zip(pointers).zip(values).zip(errors)
            {
                each(item.stage, pointer, value, errors);
            }
        }
    }

    /// The schema's complaints about the document without its entries:
    /// with [`Spec::take_each`]'s about each entry, those of the whole.
    pub fn schema_errors(&self) -> Vec<SchemaError> {
        schema::validate(SchemaKind::Jobs, &self.rest)
    }
}

/// How many items are checked in one document: the rules the schema
/// applies from the root (`defaults`' `after-defaults-*`) are judged once
/// for them all, as for the whole spec, while few are held at a time.
const CHECKED_TOGETHER: usize = 64;

/// The schema check of items: the items in a document of their own, as
/// the spec places them, beside the spec's `defaults`.
struct ItemCheck {
    doc: Value,
    /// Where the items' list sits in `doc`.
    at: &'static str,
}

impl ItemCheck {
    fn new(rest: &Value, staged: bool) -> ItemCheck {
        let mut doc = Map::new();
        if let Some(d) = rest.get("defaults") {
            doc.insert("defaults".into(), d.clone());
        }
        let at = if staged {
            let stage = serde_json::json!({"name": "-", "workers": []});
            doc.insert("stages".into(), Value::Array(vec![stage]));
            "/stages/0/workers"
        } else {
            doc.insert("workers".into(), Value::Array(Vec::new()));
            "/workers"
        };
        ItemCheck {
            doc: Value::Object(doc),
            at,
        }
    }

    /// The complaints about each of `items`, pointing where each is
    /// (`pointers`, in the same order).
    fn errors(
        &mut self,
        items: Vec<Value>,
        pointers: &[String],
    ) -> (Vec<Value>, Vec<Vec<SchemaError>>) {
        let Some(list) = self.doc.pointer_mut(self.at) else {
            return (items, pointers.iter().map(|_| Vec::new()).collect());
        };
        *list = Value::Array(items);
        let errors = schema::validate(SchemaKind::Jobs, &self.doc);
        let items = match self.doc.pointer_mut(self.at).map(std::mem::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        };
        let mut out: Vec<Vec<SchemaError>> = pointers.iter().map(|_| Vec::new()).collect();
        for mut err in errors {
            let Some(below) = err
                .pointer
                .strip_prefix(self.at)
                .and_then(|b| b.strip_prefix('/'))
            else {
                continue;
            };
            let (index, below) = below.split_at(below.find('/').unwrap_or(below.len()));
            let Some(i) = index.parse::<usize>().ok().filter(|i| *i < out.len()) else {
                continue;
            };
            err.pointer = format!("{}{below}", pointers[i]);
            out[i].push(err);
        }
        (items, out)
    }
}

/// Values nested deeper than this anywhere in a JSON spec send it to the
/// whole-document parse: a value parsed on its own may nest as deep as
/// serde_json allows (128) from where it starts, the same value in the
/// document only that minus the levels above it.
const MAX_SPLIT_DEPTH: usize = 64;

/// A JSON spec read apart from its entries, or `None` when anything about
/// the text is unusual (it does not parse, is not an object, nests deeply):
/// then the whole-document parse decides, exactly as it would have. Every
/// piece is parsed as a value here, the entries too (then dropped), so a
/// split spec is one that parses whole, into the same values.
fn split_json(text: &str) -> Option<Spec> {
    if nesting(text) > MAX_SPLIT_DEPTH {
        return None;
    }
    let value = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).ok();
    let offset = |raw: &RawValue| raw.get().as_ptr() as usize - text.as_ptr() as usize;
    let is_array = |raw: &RawValue| raw.get().starts_with('[');
    let mut items: Vec<Item> = Vec::new();
    // The items of a `workers` array, kept as text; the array left empty.
    let mut split = |stage: usize, raw: &RawValue| -> Option<Value> {
        let list: Vec<&RawValue> = serde_json::from_str(raw.get()).ok()?;
        for (index, item) in list.into_iter().enumerate() {
            value(item)?;
            let start = offset(item);
            items.push(Item {
                stage,
                index,
                held: Held::Text(start..start + item.get().len()),
            });
        }
        Some(Value::Array(Vec::new()))
    };
    let top: Members = serde_json::from_str(text).ok()?;
    // As in a parsed object, the last of duplicate keys is the one read.
    let staged = top.last("stages").is_some_and(is_array);
    let mut rest = Map::new();
    for (i, (key, raw)) in top.0.iter().enumerate() {
        let read = top.is_last(i);
        let v = match key.as_str() {
            "stages" if staged && read => {
                let stages: Vec<&RawValue> = serde_json::from_str(raw.get()).ok()?;
                let mut out = Vec::with_capacity(stages.len());
                for (si, stage) in stages.into_iter().enumerate() {
                    if !stage.get().starts_with('{') {
                        out.push(value(stage)?);
                        continue;
                    }
                    let members: Members = serde_json::from_str(stage.get()).ok()?;
                    let mut object = Map::new();
                    for (j, (k, r)) in members.0.iter().enumerate() {
                        let v = if k == "workers" && members.is_last(j) && is_array(r) {
                            split(si, r)?
                        } else {
                            value(r)?
                        };
                        object.insert(k.clone(), v);
                    }
                    out.push(Value::Object(object));
                }
                Value::Array(out)
            }
            "workers" if !staged && read && is_array(raw) => split(0, raw)?,
            _ => value(raw)?,
        };
        rest.insert(key.clone(), v);
    }
    Some(Spec {
        rest: Value::Object(rest),
        staged,
        items,
    })
}

/// How deep arrays and objects nest in JSON text (strings skipped).
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut bytes = text.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'"' => {
                while let Some(c) = bytes.next() {
                    match c {
                        b'\\' => {
                            bytes.next();
                        }
                        b'"' => break,
                        _ => {}
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// An object's members in the order written, duplicates kept, each value
/// left as its text.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'a> Members<'a> {
    /// Whether member `i` is the last with its key.
    fn is_last(&self, i: usize) -> bool {
        let key = &self.0[i].0;
        !self.0[i + 1..].iter().any(|(k, _)| k == key)
    }

    fn last(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, r)| *r)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Of;
        impl<'de> Visitor<'de> for Of {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    out.push(member);
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(Of)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The spec's items as values, with their pointers.
    fn items_of(spec: &Spec, text: &str) -> Vec<(String, Value)> {
        spec.items()
            .iter()
            .map(|i| (spec.pointer(i), i.value(text).into_owned()))
            .collect()
    }

    /// The same spec read whole and split: the same rest and items.
    fn both(text: &str) -> (Spec, Spec) {
        let whole = Spec::of_value(serde_json::from_str(text).unwrap());
        let split = split_json(text).expect("splits");
        assert_eq!(split.rest, whole.rest, "{text}");
        assert_eq!(split.staged, whole.staged, "{text}");
        assert_eq!(items_of(&split, text), items_of(&whole, text), "{text}");
        (whole, split)
    }

    #[test]
    fn a_split_spec_reads_as_the_whole_document_does() {
        let (_, split) = both(
            r#"{"defaults": {"role": "r"}, "workers": [{"workerId": "a"}, 7, {"x": [1, {"y": "}"}]}], "z": "\"["}"#,
        );
        assert_eq!(
            split.rest,
            json!({"defaults": {"role": "r"}, "workers": [], "z": "\"["})
        );
        assert_eq!(split.items().len(), 3);
        let (_, split) = both(
            r#"{"stages": [{"name": "a", "workers": [{"workerId": "a"}]}, 3, {"workers": 5}, {"name": "c", "workers": [{}, {}]}], "workers": [{"kept": true}]}"#,
        );
        // With `stages`, a top-level `workers` is not entries: it stays.
        assert_eq!(split.rest["workers"], json!([{"kept": true}]));
        assert_eq!(
            split
                .items()
                .iter()
                .map(|i| split.pointer(i))
                .collect::<Vec<_>>(),
            [
                "/stages/0/workers/0",
                "/stages/3/workers/0",
                "/stages/3/workers/1"
            ]
        );
        // The last of duplicate keys is read, as in a parsed object.
        let (_, split) = both(r#"{"workers": [{"a": 1}], "workers": [{"b": 2}, {"c": 3}]}"#);
        assert_eq!(split.items().len(), 2);
        let (_, split) = both(r#"{"stages": [], "stages": 4, "workers": [{}]}"#);
        assert_eq!(split.items().len(), 1);
        both(r#"{"workers": {"not": "a list"}}"#);
    }

    #[test]
    fn unusual_text_is_left_to_the_whole_parse() {
        // A syntax error, a number JSON cannot hold, a lone surrogate, a
        // document that is not an object, deep nesting.
        let deep = format!(r#"{{"workers": [{}1{}]}}"#, "[".repeat(70), "]".repeat(70));
        for text in [
            r#"{"workers": [{"a": 1},]}"#,
            r#"{"workers": [{"a": 1e999}]}"#,
            r#"{"workers": [{"a": "\ud800"}]}"#,
            r#"{"defaults": {"a": 1e999}, "workers": []}"#,
            r#"{"workers": [{"a": 1e999}], "workers": []}"#,
            r#"[{"workers": []}]"#,
            r#"{"workers": []} x"#,
            &deep,
        ] {
            assert!(split_json(text).is_none(), "{text}");
        }
        assert_eq!(nesting(r#"{"a": "[[[", "b": [[1], {"c": "\"{"}]}"#), 3);
    }

    /// The schema's complaints about a split spec are those about the
    /// whole document.
    #[test]
    fn the_schema_check_in_parts_is_the_check_of_the_whole() {
        let v1 = json!({"workerId": "a", "provider": "command", "role": "analyst",
            "promptPath": "p.md", "resultPath": "r.md", "command": ["true"]});
        let v2 = json!({"schemaVersion": "2.0", "executionIdentityVersion": 2, "participantRef": "p",
            "roleExecutionRef": "re", "executionLabel": "L", "dutyId": "analysis", "invocationRef": "i",
            "provider": "command", "assignmentRef": "a/w", "attempt": 1, "role": "analyst",
            "promptPath": "p.md", "command": ["true"]});
        let bad = [
            json!({"workerId": "a", "attempt": 0, "role": 7, "unknownKey": "x"}),
            json!({"schemaVersion": "2.0", "executionIdentityVersion": 2, "attempt": true, "workerId": "w"}),
            json!({"workerId": "w", "participantRef": "p", "mutationAudit": "sometimes", "idleTimeoutSeconds": "soon"}),
            json!({"provider": "command", "command": [], "env": {"1A": 3}, "dispatchKind": "reverify-rx"}),
            json!({"schemaVersion": "3"}),
            json!(7),
            json!({}),
        ];
        let mut workers = vec![v1.clone(), v2.clone()];
        workers.extend(bad.iter().cloned());
        // More than one batch of `CHECKED_TOGETHER`.
        let workers: Vec<Value> = workers.iter().cycle().take(150).cloned().collect();
        let defaults = [
            None,
            Some(json!({"role": "analyst", "provider": "command"})),
            Some(json!({"schemaVersion": "2.0", "executionIdentityVersion": 2, "attempt": 1})),
            Some(json!({"dutyId": "analysis", "unknown": 1})),
            Some(json!({"attempt": 0, "role": ""})),
            Some(json!("not a table")),
        ];
        for d in &defaults {
            for staged in [false, true] {
                let mut doc = if staged {
                    json!({"stages": [{"name": "s", "workers": workers.clone()}, {"workers": [v1.clone()]}, 3]})
                } else {
                    json!({"workers": workers.clone(), "extra": true})
                };
                if let Some(d) = d {
                    doc["defaults"] = d.clone();
                }
                let text = serde_json::to_string(&doc).unwrap();
                let mut spec = split_json(&text).expect("splits");
                let whole = schema::validate(SchemaKind::Jobs, &doc);
                let mut parts = spec.schema_errors();
                spec.take_each(&text, |_, _, _, errors| parts.extend(errors));
                parts.sort_by(|a, b| {
                    (&a.pointer, &a.keyword, &a.message).cmp(&(&b.pointer, &b.keyword, &b.message))
                });
                assert!(!whole.is_empty());
                assert_eq!(parts, whole, "defaults {d:?}, staged {staged}");
            }
        }
    }
}
