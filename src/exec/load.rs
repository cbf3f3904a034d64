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

use super::jobs::Jobs;
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
    let (mut plan, stages) = read(path, |_text, job| job)?;
    for (stage, jobs) in plan.stages.iter_mut().zip(stages) {
        stage.jobs = jobs;
    }
    Ok(Loaded { plan })
}

/// A plan as exec holds it: the plan without its jobs, and the jobs as a
/// compact [`Jobs`] table, each parsed when it is needed. A run of 10,000
/// jobs then holds a few kilobytes of text a job, not a tree of strings.
pub struct Lean {
    pub plan: Plan,
    pub jobs: Jobs,
}

/// [`load`], keeping each job as its canonical text.
pub fn load_lean(path: &Path) -> Result<Lean, Diagnostic> {
    let (plan, stages) = read(path, |text, job| {
        (text.into_boxed_str(), job.key.into_boxed_str(), job.backend)
    })?;
    Ok(Lean {
        plan,
        jobs: Jobs::from_stages(stages),
    })
}

/// [`load`], of a plan's bytes already read (`okstra validate -`), named
/// `shown` in messages.
pub fn load_bytes(shown: &str, bytes: &[u8]) -> Result<Loaded, Diagnostic> {
    let (mut plan, stages) = read_bytes(shown.to_string(), Ok(bytes.to_vec()), |_text, job| job)?;
    for (stage, jobs) in plan.stages.iter_mut().zip(stages) {
        stage.jobs = jobs;
    }
    Ok(Loaded { plan })
}

/// Read and check the plan at `path`: its head (stages named, jobs empty),
/// and what `keep` makes of each job (its canonical text and typed form),
/// stage by stage.
fn read<T: Send>(
    path: &Path,
    keep: impl Fn(String, Job) -> T + Sync,
) -> Result<(Plan, Vec<Vec<T>>), Diagnostic> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string());
    read_bytes(path.display().to_string(), bytes, keep)
}

/// [`read`], given the file's bytes (or why they could not be read).
fn read_bytes<T: Send>(
    shown: String,
    bytes: Result<Vec<u8>, String>,
    keep: impl Fn(String, Job) -> T + Sync,
) -> Result<(Plan, Vec<Vec<T>>), Diagnostic> {
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
    let bytes = bytes.map_err(|e| {
        refuse(
            Code::PlanUnreadable,
            format!("cannot read plan {shown}: {e}"),
        )
    })?;
    // The file's bytes are held only while they are read: what is kept is
    // each job as `keep` makes it, and the plan's head as text.
    let (recorded, read, head) = {
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
        let read = digest_and_jobs(&top, &keep)
            .map_err(|m| refuse(Code::PlanUnreadable, format!("plan {shown}: {m}")))?;
        (recorded, read, head_text(&top))
    };
    drop(bytes);
    if let Some((at, n)) = read.inexact {
        return Err(refuse(
            Code::PlanDigestMismatch,
            format!(
                "the plan holds {n} at `{at}`, an integer beyond {}, which canonical JSON (RFC 8785) cannot keep exact, so no digest vouches for it",
                canonical::MAX_EXACT_INTEGER
            ),
        )
        .pointer(at));
    }
    let (actual, stages) = (read.digest, read.stages);
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
    typed(&head, stages).map_err(|m| {
        refuse(
            Code::PlanUnreadable,
            format!("plan {shown} does not have the plan shape: {m}"),
        )
    })
}

/// The plan's top-level object without its stages' content, as JSON text
/// (`"stages": []`): parsed straight into a [`Plan`], never into a tree.
fn head_text(top: &RawObject) -> String {
    let mut text = String::from("{");
    for (k, v) in top {
        if k != "stages" {
            text.push_str(&Value::from(k.as_ref()).to_string());
            text.push(':');
            text.push_str(v.get());
            text.push(',');
        }
    }
    text.push_str("\"stages\":[]}");
    text
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
type ParsedStage<T> = (Value, Vec<String>, Vec<Result<T, String>>);

/// What [`digest_and_jobs`] read: the digest, the stages, and the first
/// integer canonical JSON cannot keep exact (its pointer and text).
struct Read<T> {
    digest: String,
    stages: Vec<ParsedStage<T>>,
    inexact: Option<(String, String)>,
}

/// The digest of the document without `digest`, and every stage as read, in
/// order. Only a document that is not JSON at all is an error here; a job
/// that does not have the job shape is reported by [`typed`], once the
/// digest matched (only then is it not an edit).
///
/// The canonical text is never held whole: it is hashed as it is made, the
/// jobs a chunk at a time (each chunk canonicalised in parallel).
fn digest_and_jobs<T: Send>(
    top: &RawObject,
    keep: &(impl Fn(String, Job) -> T + Sync),
) -> Result<Read<T>, String> {
    use sha2::{Digest, Sha256};
    // A chunk of jobs is parsed (as trees) at once, in parallel: small
    // enough that the trees never weigh much next to the texts kept.
    const CHUNK: usize = 128;
    let stages_raw: Vec<RawObject> = match top.get("stages") {
        Some(r) => serde_json::from_str(r.get()).map_err(|e| format!("`stages`: {e}"))?,
        None => Vec::new(),
    };
    let mut inexact: Option<(String, String)> = None;
    fn note(inexact: &mut Option<(String, String)>, prefix: String, value: &Value) {
        if inexact.is_none() {
            if let Some((at, n)) = canonical::first_inexact_integer(value) {
                *inexact = Some((format!("{prefix}{at}"), n.to_string()));
            }
        }
    }
    let mut head = Map::new();
    for (k, v) in top {
        if k == "digest" {
            continue;
        }
        let value = if k == "stages" {
            Value::from(MARK)
        } else {
            serde_json::from_str(v.get()).map_err(|e| format!("`{k}`: {e}"))?
        };
        note(&mut inexact, format!("/{}", pointer_token(k)), &value);
        head.insert(k.to_string(), value);
    }
    let mut hasher = Sha256::new();
    let (head_before, head_after) = around_mark(&Value::Object(head));
    hasher.update(head_before.as_bytes());
    let mut stages = Vec::with_capacity(stages_raw.len());
    if top.contains_key("stages") {
        hasher.update(b"[");
    }
    for (si, stage) in stages_raw.iter().enumerate() {
        let jobs_raw: Vec<&RawValue> = match stage.get("jobs") {
            Some(r) => {
                serde_json::from_str(r.get()).map_err(|e| format!("`stages[{si}].jobs`: {e}"))?
            }
            None => Vec::new(),
        };
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
            note(
                &mut inexact,
                format!("/stages/{si}/{}", pointer_token(k)),
                &value,
            );
            shell.insert(k.to_string(), value);
        }
        if si > 0 {
            hasher.update(b",");
        }
        let (stage_before, stage_after) = around_mark(&Value::Object(shell));
        hasher.update(stage_before.as_bytes());
        if stage.contains_key("jobs") {
            hasher.update(b"[");
        }
        let mut jobs = Vec::with_capacity(jobs_raw.len());
        for (c, chunk) in jobs_raw.chunks(CHUNK).enumerate() {
            // Each job parsed once: its canonical text and its typed form.
            type Parsed = (String, Option<(String, String)>, Result<Job, String>);
            let parsed: Vec<Parsed> = chunk
                .par_iter()
                .enumerate()
                .map(|(n, raw)| {
                    let ji = c * CHUNK + n;
                    let value: Value = serde_json::from_str(raw.get())
                        .map_err(|e| format!("`stages[{si}].jobs[{ji}]`: {e}"))?;
                    let text = canonical::to_canonical_string(&value);
                    let wide = canonical::first_inexact_integer(&value)
                        .map(|(at, n)| (format!("/stages/{si}/jobs/{ji}{at}"), n.to_string()));
                    let job = serde_json::from_value::<Job>(value)
                        .map_err(|e| format!("`stages[{si}].jobs[{ji}]`: {e}"));
                    Ok((text, wide, job))
                })
                .collect::<Result<_, String>>()?;
            for (n, (text, wide, job)) in parsed.into_iter().enumerate() {
                if c + n > 0 {
                    hasher.update(b",");
                }
                hasher.update(text.as_bytes());
                if inexact.is_none() {
                    inexact = wide;
                }
                jobs.push(job.map(|job| keep(text, job)));
            }
        }
        if stage.contains_key("jobs") {
            hasher.update(b"]");
        }
        hasher.update(stage_after.as_bytes());
        stages.push((name, extra, jobs));
    }
    if top.contains_key("stages") {
        hasher.update(b"]");
    }
    hasher.update(head_after.as_bytes());
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(Read {
        digest: format!("sha256:{hex}"),
        stages,
        inexact,
    })
}

/// A key as one token of a JSON pointer.
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The canonical text of `value` before and after the marker's place (all
/// of it before, when it holds no marker).
fn around_mark(value: &Value) -> (String, String) {
    let marker = canonical::to_canonical_string(&Value::from(MARK));
    let text = canonical::to_canonical_string(value);
    match text.find(&marker) {
        Some(at) => (
            text[..at].to_string(),
            text[at + marker.len()..].to_string(),
        ),
        None => (text, String::new()),
    }
}

/// The typed plan head (each stage named, no jobs) and each stage's jobs.
#[allow(clippy::type_complexity)]
fn typed<T>(head: &str, stages: Vec<ParsedStage<T>>) -> Result<(Plan, Vec<Vec<T>>), String> {
    let mut plan: Plan = serde_json::from_str(head).map_err(|e| e.to_string())?;
    let mut all = Vec::with_capacity(stages.len());
    for (name, extra, jobs) in stages {
        if let Some(k) = extra.first() {
            return Err(format!("a stage holds an unknown key `{k}`"));
        }
        let name = name
            .as_str()
            .map(str::to_string)
            .ok_or("a stage without a string `name`")?;
        plan.stages.push(Stage {
            name,
            jobs: Vec::new(),
        });
        all.push(jobs.into_iter().collect::<Result<Vec<T>, String>>()?);
    }
    Ok((plan, all))
}
