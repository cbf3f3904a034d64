//! Reading a plan file (SPEC §5.1): the one place exec, `okstra show` and
//! `okstra validate --kind plan` turn `plan.json` into a [`Plan`].
//!
//! The format version and the digest are checked on the document as written,
//! before it is read into typed fields, so a plan from a newer okstra gets
//! `plan/version` and an edited one `plan/digest-mismatch` (an added key
//! too), never a confusing `plan/unreadable`.
//!
//! A plan of 10,000 jobs is tens of megabytes. It is not turned into one
//! `serde_json::Value` tree (several times the file's size): the jobs stay
//! borrowed slices of the file's bytes until each is parsed once, its
//! canonical text made for the digest and its typed `Job` taken from the
//! same parse, in parallel.

use crate::canonical;
use crate::diag::{Code, Diagnostic};
use crate::plan::{self, Job, Plan, Stage};
use rayon::prelude::*;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::path::Path;

/// A plan whose format and digest were checked. Inputs, bindings and the
/// lock are checked by preflight.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub plan: Plan,
}

type RawObject<'a> = BTreeMap<Cow<'a, str>, &'a RawValue>;

/// Read, check and parse the plan at `path`.
pub fn load(path: &Path) -> Result<Loaded, Diagnostic> {
    let shown = path.display().to_string();
    let refuse = |code: Code, message: String| {
        let help = match code {
            Code::PlanVersion => {
                "make the plan again with this okstra: okstra plan SPEC --manifest M"
            }
            Code::PlanDigestMismatch => {
                "a plan is frozen: make a new one with `okstra plan` instead of editing it"
            }
            _ => "a plan is written by `okstra plan`; make it again rather than editing it",
        };
        Diagnostic::new(code, message)
            .in_file(shown.clone())
            .help(help)
    };
    let bytes = std::fs::read(path).map_err(|e| {
        refuse(
            Code::PlanUnreadable,
            format!("cannot read plan {shown}: {e}"),
        )
    })?;
    let top: RawObject = serde_json::from_slice(&bytes).map_err(|e| {
        refuse(
            Code::PlanUnreadable,
            format!("plan {shown} is not a JSON object: {e}"),
        )
    })?;
    check_version(&top).map_err(|m| refuse(Code::PlanVersion, m))?;
    let recorded = top
        .get("digest")
        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
        .unwrap_or_default();
    let (actual, stages) = digest_and_jobs(&top)
        .map_err(|m| refuse(Code::PlanUnreadable, format!("plan {shown}: {m}")))?;
    if recorded.is_empty() {
        return Err(refuse(
            Code::PlanDigestMismatch,
            "the plan has no digest".into(),
        ));
    }
    if recorded != actual {
        return Err(refuse(
            Code::PlanDigestMismatch,
            format!("the plan records digest {recorded}, but its content digests to {actual}: it was edited after `okstra plan` wrote it"),
        ));
    }
    let plan = typed(&top, stages).map_err(|m| {
        refuse(
            Code::PlanUnreadable,
            format!("plan {shown} does not have the plan shape: {m}"),
        )
    })?;
    Ok(Loaded { plan })
}

fn check_version(top: &RawObject) -> Result<(), String> {
    let version = top.get("formatVersion").map(|r| r.get());
    if version.and_then(|v| v.parse::<u64>().ok()) == Some(plan::FORMAT_VERSION) {
        return Ok(());
    }
    Err(format!(
        "plan formatVersion {} is not supported by okstra {} (it reads format {})",
        version.unwrap_or("(absent)"),
        crate::VERSION,
        plan::FORMAT_VERSION
    ))
}

/// A marker no plan holds: its canonical text shows where spliced text goes.
const MARK: &str = "\u{0}okstra:splice\u{0}";

/// A stage as read: its name, its other keys, and each job or why it does
/// not have the job shape.
type ParsedStage = (Value, Vec<String>, Vec<Result<Job, String>>);

/// The digest of the document without `digest`, and every stage as read, in
/// order. Only a document that is not JSON at all is an error here; a job
/// that does not have the job shape is reported by [`typed`], once the
/// digest matched (only then is it not an edit).
fn digest_and_jobs(top: &RawObject) -> Result<(String, Vec<ParsedStage>), String> {
    let stages_raw: Vec<RawObject> = match top.get("stages") {
        Some(r) => serde_json::from_str(r.get()).map_err(|e| format!("`stages`: {e}"))?,
        None => Vec::new(),
    };
    let mut head = Map::new();
    for (k, v) in top {
        if k == "digest" {
            continue;
        }
        let value = if k == "stages" && top.contains_key("stages") {
            Value::from(MARK)
        } else {
            serde_json::from_str(v.get()).map_err(|e| format!("`{k}`: {e}"))?
        };
        head.insert(k.to_string(), value);
    }
    let mut stages_text = String::from("[");
    let mut stages = Vec::with_capacity(stages_raw.len());
    for (si, stage) in stages_raw.iter().enumerate() {
        let jobs_raw: Vec<&RawValue> = match stage.get("jobs") {
            Some(r) => {
                serde_json::from_str(r.get()).map_err(|e| format!("`stages[{si}].jobs`: {e}"))?
            }
            None => Vec::new(),
        };
        // Each job parsed once: its canonical text and its typed form.
        let parsed: Vec<(String, Result<Job, String>)> = jobs_raw
            .par_iter()
            .enumerate()
            .map(|(ji, raw)| {
                let value: Value = serde_json::from_str(raw.get())
                    .map_err(|e| format!("`stages[{si}].jobs[{ji}]`: {e}"))?;
                let text = canonical::to_canonical_string(&value);
                let job = serde_json::from_value::<Job>(value)
                    .map_err(|e| format!("`stages[{si}].jobs[{ji}]`: {e}"));
                Ok((text, job))
            })
            .collect::<Result<_, String>>()?;
        let mut shell = Map::new();
        let mut name = Value::Null;
        let mut extra = Vec::new();
        for (k, v) in stage {
            if k != "jobs" && k != "name" {
                extra.push(k.to_string());
            }
            let value = if k == "jobs" {
                Value::from(MARK)
            } else {
                serde_json::from_str(v.get()).map_err(|e| format!("`stages[{si}].{k}`: {e}"))?
            };
            if k == "name" {
                name = value.clone();
            }
            shell.insert(k.to_string(), value);
        }
        let mut jobs_text = String::from("[");
        let mut jobs = Vec::with_capacity(parsed.len());
        for (i, (text, job)) in parsed.into_iter().enumerate() {
            if i > 0 {
                jobs_text.push(',');
            }
            jobs_text.push_str(&text);
            jobs.push(job);
        }
        jobs_text.push(']');
        if si > 0 {
            stages_text.push(',');
        }
        stages_text.push_str(&splice(&Value::Object(shell), &jobs_text));
        stages.push((name, extra, jobs));
    }
    stages_text.push(']');
    let text = splice(&Value::Object(head), &stages_text);
    let digest = format!("sha256:{}", canonical::sha256_hex(text.as_bytes()));
    Ok((digest, stages))
}

/// The canonical text of `value` with the marker replaced by `inner`.
fn splice(value: &Value, inner: &str) -> String {
    let marker = canonical::to_canonical_string(&Value::from(MARK));
    canonical::to_canonical_string(value).replacen(&marker, inner, 1)
}

/// The typed plan: the head fields from the document, the stages as parsed.
fn typed(top: &RawObject, stages: Vec<ParsedStage>) -> Result<Plan, String> {
    let mut head = Map::new();
    for (k, v) in top {
        if k != "stages" {
            head.insert(
                k.to_string(),
                serde_json::from_str(v.get()).map_err(|e| e.to_string())?,
            );
        }
    }
    head.insert("stages".into(), Value::Array(Vec::new()));
    let mut plan: Plan = serde_json::from_value(Value::Object(head)).map_err(|e| e.to_string())?;
    plan.stages = stages
        .into_iter()
        .map(|(name, extra, jobs)| {
            if let Some(k) = extra.first() {
                return Err(format!("a stage holds an unknown key `{k}`"));
            }
            let name = name
                .as_str()
                .map(str::to_string)
                .ok_or("a stage without a string `name`")?;
            let jobs = jobs.into_iter().collect::<Result<Vec<Job>, String>>()?;
            Ok(Stage { name, jobs })
        })
        .collect::<Result<_, String>>()?;
    Ok(plan)
}
