//! Conformance declarations of an implementation plan
//! (docs/cli.md#conformance-declarations):
//! `implementationPlanning.stages[].conformanceTests` is
//! `<script> (requires=[cap,...])`.

use serde_json::Value;

pub const CAPABILITIES: &[&str] = &["db", "io", "http", "external"];

/// The script (without a leading `<task_root>/`) and its capabilities, or
/// None when the declaration does not parse.
pub fn parse(declared: &str) -> Option<(String, Vec<String>)> {
    let text = declared.trim();
    let open = text.find(" (requires=[").or_else(|| {
        // Any run of whitespace may separate the script from its clause.
        let idx = text.find("(requires=[")?;
        text[..idx].ends_with(char::is_whitespace).then_some(idx)
    })?;
    let script = text[..open].trim_end();
    if script.is_empty() || script.chars().any(char::is_whitespace) {
        return None;
    }
    let clause = text[open..].trim_start();
    let inner = clause.strip_prefix("(requires=[")?.strip_suffix("])")?;
    if inner.contains(']') {
        return None;
    }
    let caps: Vec<String> = inner.split(',').map(|c| c.trim().to_string()).collect();
    let mut seen = std::collections::HashSet::new();
    if caps
        .iter()
        .any(|c| c.is_empty() || !CAPABILITIES.contains(&c.as_str()) || !seen.insert(c.clone()))
    {
        return None;
    }
    let script = script.strip_prefix("<task_root>/").unwrap_or(script);
    if script.is_empty() {
        return None;
    }
    Some((script.to_string(), caps))
}

/// Stages whose non-empty declaration does not parse: (array index, stage number).
pub fn malformed_stages(doc: &Value) -> Vec<(usize, i64)> {
    let stages = doc
        .get("implementationPlanning")
        .and_then(|p| p.get("stages"))
        .and_then(Value::as_array);
    let mut out = Vec::new();
    for (i, stage) in stages.into_iter().flatten().enumerate() {
        let Some(declared) = stage.get("conformanceTests").and_then(Value::as_str) else {
            continue;
        };
        if declared.trim().is_empty() {
            continue;
        }
        let Some(n) = stage
            .get("stage")
            .and_then(crate::model::int_of)
            .filter(|n| *n >= 1)
        else {
            continue;
        };
        if parse(declared).is_none() {
            out.push((i, n));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_and_strips_task_root() {
        assert_eq!(
            parse("<task_root>/tests/run.sh (requires=[db, io])"),
            Some(("tests/run.sh".into(), vec!["db".into(), "io".into()]))
        );
        assert_eq!(parse("t.sh (requires=[external])").unwrap().0, "t.sh");
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "t.sh",
            "t.sh (requires=[])",
            "t.sh (requires=[db,,io])",
            "t.sh (requires=[db, db])",
            "t.sh (requires=[gpu])",
            "(requires=[db])",
            "a b (requires=[db])",
            "<task_root>/ (requires=[db])",
            "t.sh (requires=[db]) trailing",
        ] {
            assert!(parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn stages_reported_by_number_only_when_declared() {
        let doc = json!({"implementationPlanning": {"stages": [
            {"stage": 1, "conformanceTests": "ok.sh (requires=[io])"},
            {"stage": 2, "conformanceTests": "bad"},
            {"stage": 3},
            {"stage": 4, "conformanceTests": ""},
            {"stage": 0, "conformanceTests": "bad"},
            {"stage": true, "conformanceTests": "bad"},
            {"stage": 7, "conformanceTests": "x.sh (requires=[http,external])"}
        ]}});
        assert_eq!(malformed_stages(&doc), vec![(1, 2)]);
    }
}
