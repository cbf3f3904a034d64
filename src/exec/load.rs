//! Reading a plan file (docs/exec.md#before-anything-starts): the one place
//! exec, `okstra show` and `okstra validate --kind plan` turn `plan.json` into
//! a [`Plan`].
//!
//! The format version and the digest are checked on the document as written,
//! before it is read into typed fields, so a plan from a newer okstra gets
//! `plan/version` and an edited one `plan/digest-mismatch` (an added key
//! too), never a confusing `plan/unreadable`.
//!
//! A plan of 10,000 jobs is tens of megabytes. It is read as a stream, never
//! held whole, and never turned into one `serde_json::Value` tree (several
//! times the file's size): each job's text is taken as it goes by, a chunk of
//! jobs at a time is parsed (in parallel), and of each job only its canonical
//! text (for the digest) and what the caller keeps of its typed form remain.
//! A document whose stages do not have the plan's shape is still read to its
//! end, so that its `formatVersion` is judged first.

use super::jobs::Jobs;
use crate::canonical;
use crate::diag::{Code, Diagnostic};
use crate::json_past;
use crate::plan::{self, Job, Plan, Stage};
use rayon::prelude::*;
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

/// A plan whose format and digest were checked. Inputs, bindings and the
/// lock are checked by preflight.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub plan: Plan,
}

/// Why a plan document is not read as a plan
/// (docs/exec.md#before-anything-starts): another format version
/// (`plan/version`, the whole message), or a part without the plan's shape
/// (`plan/unreadable`, after the plan's name).
#[derive(Debug, thiserror::Error)]
enum PlanError {
    /// A `formatVersion` other than this okstra's, as written (`None`:
    /// absent).
    #[error(
        "plan formatVersion {} is not supported by okstra {} (it reads format {})",
        .0.as_deref().unwrap_or("(absent)"),
        crate::VERSION,
        plan::FORMAT_VERSION
    )]
    Version(Option<String>),
    /// `stages` is not an array of objects: what it is instead.
    #[error("`stages` must be an array of stage objects; it is {0}")]
    Stages(&'static str),
    /// A stage's `jobs` is not an array: what it is instead.
    #[error("`stages[{si}].jobs` must be an array of jobs; it is {what}")]
    Jobs { si: usize, what: &'static str },
    /// A value of the head or of a stage's shell (named as in messages,
    /// `stages[0].name`) that does not parse.
    #[error("`{at}`: {why}")]
    Value { at: String, why: String },
    /// The head does not have the plan's typed shape.
    #[error("{0}")]
    Head(serde_json::Error),
    /// A stage holds a key besides `name` and `jobs`.
    #[error("a stage holds an unknown key `{0}`")]
    StageKey(String),
    /// A stage's `name` is absent or not a string.
    #[error("a stage without a string `name`")]
    StageName,
    /// Job `ji` of stage `si` does not have the job shape.
    #[error("`stages[{si}].jobs[{ji}]`: {source}")]
    Job {
        si: usize,
        ji: usize,
        source: serde_json::Error,
    },
}

/// An object's keys (the plan's head, a stage's shell), each with its
/// value as read.
type RawObject = BTreeMap<String, Member>;

/// A value of the plan's head or of a stage's shell, as read: its text as
/// written (for the typed parse), and its canonical text with the first
/// integer in it canonical JSON cannot keep exact (its pointer below the
/// value), or why it does not parse.
///
/// The canonical text is made as the value goes by, so that a large value
/// is a tree only for that moment: `inputs` holds two entries a job, and
/// as a tree it weighs several times its text (20 MB for a 10,000-job plan,
/// which would otherwise sit beside the jobs' texts at the end of the read).
struct Member {
    raw: Box<RawValue>,
    canonical: Result<(String, Option<(String, serde_json::Number)>), String>,
}

impl Member {
    fn read(raw: Box<RawValue>) -> Member {
        let canonical = serde_json::from_str::<Value>(raw.get())
            .map(|value| {
                let wide = canonical::first_inexact_integer(&value);
                (canonical::to_canonical_string(&value), wide)
            })
            .map_err(|e| e.to_string());
        Member { raw, canonical }
    }
}

/// Read, check and parse the plan at `path`.
pub fn load(path: &Path) -> Result<Loaded, Diagnostic> {
    let (plan, stages) = read(path, |job| job)?;
    Ok(Loaded {
        plan: with_jobs(plan, stages),
    })
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
    let (plan, stages) = read(path, |job| (job.key.into_boxed_str(), job.backend))?;
    let stages = stages
        .into_iter()
        .map(|jobs| {
            jobs.into_iter()
                .map(|(text, (key, backend))| (text, key, backend))
                .collect()
        })
        .collect();
    Ok(Lean {
        plan,
        jobs: Jobs::from_stages(stages),
    })
}

/// Check the plan at `path` as [`load`] does, keeping nothing of its jobs
/// (`okstra validate`): a plan of 10,000 jobs is checked in the memory of
/// one job's text at a time, plus the canonical texts the digest needs.
pub fn check(path: &Path) -> Result<(), Diagnostic> {
    read(path, |_| ()).map(drop)
}

/// [`load`], of a plan's bytes already read (`okstra validate -`), named
/// `shown` in messages.
pub fn load_bytes(shown: &str, bytes: &[u8]) -> Result<Loaded, Diagnostic> {
    let de = serde_json::Deserializer::from_slice(bytes);
    let (plan, stages) = read_from(shown.to_string(), Ok(de), |job| job)?;
    Ok(Loaded {
        plan: with_jobs(plan, stages),
    })
}

fn with_jobs(mut plan: Plan, stages: Vec<Vec<(Box<str>, Job)>>) -> Plan {
    for (stage, jobs) in plan.stages.iter_mut().zip(stages) {
        stage.jobs = jobs.into_iter().map(|(_, job)| job).collect();
    }
    plan
}

/// Read and check the plan at `path`: its head (stages named, jobs empty),
/// and each job's canonical text with what `keep` makes of its typed form,
/// stage by stage.
#[allow(clippy::type_complexity)]
fn read<U: Send>(
    path: &Path,
    keep: impl Fn(Job) -> U + Sync,
) -> Result<(Plan, Vec<Vec<(Box<str>, U)>>), Diagnostic> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| e.to_string());
    let de = file.map(|f| {
        serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 20, f))
    });
    read_from(shown, de, keep)
}

/// [`read`], from a JSON reader (or why the file could not be opened).
#[allow(clippy::type_complexity)]
fn read_from<'de, R: serde_json::de::Read<'de>, U: Send>(
    shown: String,
    de: Result<serde_json::Deserializer<R>, String>,
    keep: impl Fn(Job) -> U + Sync,
) -> Result<(Plan, Vec<Vec<(Box<str>, U)>>), Diagnostic> {
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
    let cannot_read = |e: String| {
        refuse(
            Code::PlanUnreadable,
            format!("cannot read plan {shown}: {e}"),
        )
    };
    let mut de = de.map_err(cannot_read)?;
    let doc = DocSeed { keep: &keep }
        .deserialize(&mut de)
        .and_then(|doc| de.end().map(|()| doc))
        .map_err(|e| {
            if e.is_io() {
                cannot_read(e.to_string())
            } else {
                refuse(
                    Code::PlanUnreadable,
                    format!("plan {shown} is not a JSON object: {e}"),
                )
            }
        })?;
    check_version(&doc.head).map_err(|m| refuse(Code::PlanVersion, m.to_string()))?;
    let recorded = doc
        .head
        .get("digest")
        .and_then(|m| serde_json::from_str::<String>(m.raw.get()).ok())
        .unwrap_or_default();
    let head = head_text(&doc.head);
    let read =
        digest(doc).map_err(|m| refuse(Code::PlanUnreadable, format!("plan {shown}: {m}")))?;
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
fn head_text(head: &RawObject) -> String {
    let mut text = String::from("{");
    for (k, v) in head {
        text.push_str(&Value::from(k.as_str()).to_string());
        text.push(':');
        text.push_str(v.raw.get());
        text.push(',');
    }
    text.push_str("\"stages\":[]}");
    text
}

fn check_version(head: &RawObject) -> Result<(), PlanError> {
    let version = head.get("formatVersion").map(|m| m.raw.get());
    if version.and_then(|v| v.parse::<u64>().ok()) == Some(plan::FORMAT_VERSION) {
        return Ok(());
    }
    Err(PlanError::Version(version.map(str::to_string)))
}

/// One job as read: its canonical text, and what the caller keeps of its
/// typed form, or why it does not have the job shape.
type ReadJob<U> = (Box<str>, Result<U, PlanError>);

/// The first integer canonical JSON cannot keep exact: its pointer and its
/// text.
type Inexact = Option<(String, String)>;

/// The document as streamed: every top-level key but `stages` as written,
/// and the stages as read (`None`: no `stages` key).
struct Doc<U> {
    head: RawObject,
    stages: Option<Shaped<Vec<ReadStage<U>>>>,
}

/// A stage as read: its keys but `jobs` as written, and its jobs (`None`:
/// no `jobs` key), with the first integer among them that canonical JSON
/// cannot keep exact (its pointer below the job and its text).
struct ReadStage<U> {
    shell: RawObject,
    jobs: Option<Shaped<Vec<ReadJob<U>>>>,
    inexact: Inexact,
}

/// A part of the document that has the plan's shape, or what it is instead.
type Shaped<T> = Result<T, &'static str>;

/// Reads past an object that should have been an array.
fn past_object<'de, A: MapAccess<'de>, T>(map: A) -> Result<Shaped<T>, A::Error> {
    json_past::past_map::<IgnoredAny, _>(map).map(|()| Err("an object"))
}

/// Reads past an array that should have been an object.
fn past_array<'de, A: SeqAccess<'de>, T>(seq: A) -> Result<Shaped<T>, A::Error> {
    json_past::past_seq::<IgnoredAny, _>(seq).map(|()| Err("an array"))
}

struct DocSeed<'k, K> {
    keep: &'k K,
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> DeserializeSeed<'de> for DocSeed<'_, K> {
    type Value = Doc<U>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Doc<U>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> Visitor<'de> for DocSeed<'_, K> {
    type Value = Doc<U>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc<U>, A::Error> {
        let mut doc = Doc {
            head: RawObject::new(),
            stages: None,
        };
        // A key given twice counts once, as written last.
        while let Some(key) = map.next_key::<String>()? {
            if key == "stages" {
                doc.stages = Some(map.next_value_seed(StagesSeed { keep: self.keep })?);
            } else {
                doc.head.insert(key, Member::read(map.next_value()?));
            }
        }
        Ok(doc)
    }
}

struct StagesSeed<'k, K> {
    keep: &'k K,
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> DeserializeSeed<'de> for StagesSeed<'_, K> {
    type Value = Shaped<Vec<ReadStage<U>>>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> Visitor<'de> for StagesSeed<'_, K> {
    type Value = Shaped<Vec<ReadStage<U>>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of stages")
    }
    // A scalar where an array or object belongs: named.
    json_past::scalar_visits!(what => Err(what));
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        past_object(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut stages = Vec::new();
        let mut shaped = true;
        while let Some(stage) = seq.next_element_seed(StageSeed {
            keep: self.keep,
            si: stages.len(),
        })? {
            match stage {
                Ok(stage) => stages.push(stage),
                Err(_) => shaped = false,
            }
        }
        Ok(if shaped {
            Ok(stages)
        } else {
            Err("an array holding something other than objects")
        })
    }
}

struct StageSeed<'k, K> {
    keep: &'k K,
    si: usize,
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> DeserializeSeed<'de> for StageSeed<'_, K> {
    type Value = Shaped<ReadStage<U>>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> Visitor<'de> for StageSeed<'_, K> {
    type Value = Shaped<ReadStage<U>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a stage object")
    }
    // A scalar where an array or object belongs: named.
    json_past::scalar_visits!(what => Err(what));
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        past_array(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut stage = ReadStage {
            shell: RawObject::new(),
            jobs: None,
            inexact: None,
        };
        while let Some(key) = map.next_key::<String>()? {
            if key == "jobs" {
                let jobs = map.next_value_seed(JobsSeed {
                    keep: self.keep,
                    si: self.si,
                    inexact: &mut stage.inexact,
                })?;
                stage.jobs = Some(jobs);
            } else {
                stage.shell.insert(key, Member::read(map.next_value()?));
            }
        }
        Ok(Ok(stage))
    }
}

struct JobsSeed<'k, 'i, K> {
    keep: &'k K,
    si: usize,
    inexact: &'i mut Inexact,
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> DeserializeSeed<'de> for JobsSeed<'_, '_, K> {
    type Value = Shaped<Vec<ReadJob<U>>>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: Fn(Job) -> U + Sync, U: Send> Visitor<'de> for JobsSeed<'_, '_, K> {
    type Value = Shaped<Vec<ReadJob<U>>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of jobs")
    }
    // A scalar where an array or object belongs: named.
    json_past::scalar_visits!(what => Err(what));
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        past_object(map)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // A chunk of jobs is parsed (as trees) at once, in parallel: small
        // enough that the trees and texts in flight never weigh much next
        // to the texts kept.
        const CHUNK: usize = 128;
        let mut jobs = Vec::new();
        let mut chunk: Vec<Box<RawValue>> = Vec::with_capacity(CHUNK);
        loop {
            let next = seq.next_element::<Box<RawValue>>()?;
            let end = next.is_none();
            chunk.extend(next);
            if chunk.len() == CHUNK || (end && !chunk.is_empty()) {
                let first = jobs.len();
                let parsed: Vec<(ReadJob<U>, Inexact)> = chunk
                    .par_iter()
                    .enumerate()
                    .map(|(n, raw)| read_job(self.keep, self.si, first + n, raw))
                    .collect();
                chunk.clear();
                for (job, wide) in parsed {
                    if self.inexact.is_none() {
                        *self.inexact = wide;
                    }
                    jobs.push(job);
                }
            }
            if end {
                return Ok(Ok(jobs));
            }
        }
    }
}

/// Job `ji` of stage `si`, parsed once: its canonical text, what `keep`
/// makes of its typed form, and the first integer in it canonical JSON
/// cannot keep exact.
fn read_job<U>(
    keep: &impl Fn(Job) -> U,
    si: usize,
    ji: usize,
    raw: &RawValue,
) -> (ReadJob<U>, Inexact) {
    let value: Value = match serde_json::from_str(raw.get()) {
        Ok(v) => v,
        // Text the reader took as one JSON value parses as one.
        Err(source) => {
            let why = PlanError::Job { si, ji, source };
            return ((raw.get().into(), Err(why)), None);
        }
    };
    let text = canonical::to_canonical_string(&value).into_boxed_str();
    let wide = canonical::first_inexact_integer(&value)
        .map(|(at, n)| (format!("/stages/{si}/jobs/{ji}{at}"), n.to_string()));
    let job = serde_json::from_value::<Job>(value)
        .map(keep)
        .map_err(|source| PlanError::Job { si, ji, source });
    ((text, job), wide)
}

/// A stage as [`typed`] takes it: its name, its other keys, and each job's
/// text with what the caller keeps of it, or why it does not have the job
/// shape.
type ParsedStage<U> = (Value, Vec<String>, Vec<ReadJob<U>>);

/// What [`digest`] made of the document: the digest, the stages, and the
/// first integer canonical JSON cannot keep exact (its pointer and text).
struct Read<U> {
    digest: String,
    stages: Vec<ParsedStage<U>>,
    inexact: Inexact,
}

/// The digest of the document without `digest`, from what was streamed.
/// A document whose stages do not have the plan's shape is an error here;
/// a job that does not have the job shape is reported by [`typed`], once
/// the digest matched (only then is it not an edit).
///
/// The canonical text is never held whole: the head's and each stage's
/// are made around the jobs' texts, which were kept, and hashed in turn.
fn digest<U>(doc: Doc<U>) -> Result<Read<U>, PlanError> {
    use sha2::{Digest, Sha256};
    let mut inexact: Inexact = None;
    let stages_read = match doc.stages {
        None => None,
        Some(Ok(stages)) => Some(stages),
        Some(Err(what)) => return Err(PlanError::Stages(what)),
    };
    let place = Place {
        named: "",
        pointer: "",
        list: "stages",
    };
    let has_stages = stages_read.is_some();
    let (head_before, head_after) =
        shell(&doc.head, &place, Some("digest"), has_stages, &mut inexact)?;
    let mut hasher = Sha256::new();
    hasher.update(head_before.as_bytes());
    let mut stages = Vec::new();
    if let Some(read) = stages_read {
        hasher.update(b"[");
        for (si, stage) in read.into_iter().enumerate() {
            let jobs = match stage.jobs {
                None => None,
                Some(Ok(jobs)) => Some(jobs),
                Some(Err(what)) => return Err(PlanError::Jobs { si, what }),
            };
            let (named, pointer) = (format!("stages[{si}]."), format!("/stages/{si}"));
            let place = Place {
                named: &named,
                pointer: &pointer,
                list: "jobs",
            };
            let (stage_before, stage_after) =
                shell(&stage.shell, &place, None, jobs.is_some(), &mut inexact)?;
            if si > 0 {
                hasher.update(b",");
            }
            hasher.update(stage_before.as_bytes());
            if let Some(jobs) = &jobs {
                hasher.update(b"[");
                for (n, (text, _)) in jobs.iter().enumerate() {
                    if n > 0 {
                        hasher.update(b",");
                    }
                    hasher.update(text.as_bytes());
                }
                hasher.update(b"]");
                if inexact.is_none() {
                    inexact = stage.inexact;
                }
            }
            hasher.update(stage_after.as_bytes());
            // Its value parsed when `shell` made its canonical text.
            let name = (stage.shell.get("name"))
                .and_then(|m| serde_json::from_str(m.raw.get()).ok())
                .unwrap_or(Value::Null);
            let extra = stage.shell.into_keys().filter(|k| k != "name").collect();
            stages.push((name, extra, jobs.unwrap_or_default()));
        }
        hasher.update(b"]");
    }
    hasher.update(head_after.as_bytes());
    Ok(Read {
        digest: format!("sha256:{}", canonical::hex(&hasher.finalize())),
        stages,
        inexact,
    })
}

/// Where an object lies in the plan: how messages name it (`stages[0].`),
/// its JSON pointer (`/stages/0`), and the key of the list spliced into it
/// (`stages` of the plan, `jobs` of a stage).
struct Place<'a> {
    named: &'a str,
    pointer: &'a str,
    list: &'a str,
}

/// The canonical text of an object of the document without its spliced
/// list (and without `leave_out`), before and after the list's place (all
/// of it before, when the object has no list); each value's first integer
/// canonical JSON cannot keep exact is looked for on the way. The members'
/// canonical texts were made as they were read ([`Member`]); here they are
/// put in canonical order (RFC 8785: by the keys' UTF-16 code units).
fn shell(
    raw: &RawObject,
    place: &Place,
    leave_out: Option<&str>,
    has_list: bool,
    inexact: &mut Inexact,
) -> Result<(String, String), PlanError> {
    // Each key with its canonical value; `None` is the list's place.
    let mut members: Vec<(&str, Option<&str>)> = Vec::with_capacity(raw.len() + 1);
    for (k, m) in raw.iter().filter(|(k, _)| Some(k.as_str()) != leave_out) {
        let (text, wide) = (m.canonical.as_ref()).map_err(|e| PlanError::Value {
            at: format!("{}{k}", place.named),
            why: e.clone(),
        })?;
        if inexact.is_none() {
            if let Some((at, n)) = wide {
                let at = format!("{}/{}{at}", place.pointer, pointer_token(k));
                *inexact = Some((at, n.to_string()));
            }
        }
        members.push((k, Some(text)));
    }
    if has_list {
        members.push((place.list, None));
    }
    members.sort_by(|a, b| canonical::utf16_cmp(a.0, b.0));
    let (mut before, mut after) = (String::from("{"), String::new());
    let mut out = &mut before;
    for (i, (key, text)) in members.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&canonical::to_canonical_string(&Value::from(key)));
        out.push(':');
        match text {
            Some(text) => out.push_str(text),
            None => out = &mut after,
        }
    }
    out.push('}');
    Ok((before, after))
}

/// A key as one token of a JSON pointer.
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// The typed plan head (each stage named, no jobs) and each stage's jobs.
#[allow(clippy::type_complexity)]
fn typed<U>(
    head: &str,
    stages: Vec<ParsedStage<U>>,
) -> Result<(Plan, Vec<Vec<(Box<str>, U)>>), PlanError> {
    let mut plan: Plan = serde_json::from_str(head).map_err(PlanError::Head)?;
    let mut all = Vec::with_capacity(stages.len());
    for (name, extra, jobs) in stages {
        if let Some(k) = extra.first() {
            return Err(PlanError::StageKey(k.clone()));
        }
        let name = name
            .as_str()
            .map(str::to_string)
            .ok_or(PlanError::StageName)?;
        plan.stages.push(Stage {
            name,
            jobs: Vec::new(),
        });
        let jobs = jobs
            .into_iter()
            .map(|(text, job)| job.map(|job| (text, job)))
            .collect::<Result<Vec<_>, PlanError>>()?;
        all.push(jobs);
    }
    Ok((plan, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(doc: &str) -> Diagnostic {
        match load_bytes("plan.json", doc.as_bytes()) {
            Ok(_) => panic!("read: {doc}"),
            Err(d) => d,
        }
    }

    #[test]
    fn a_shell_is_the_canonical_object_cut_at_its_list() {
        // Keys in UTF-8 byte order differ from UTF-16 order where a
        // character from U+E000 meets one above U+FFFF; the list's key
        // falls between the others.
        let keys = ["zeta", "\u{e000}", "\u{1f600}", "alpha", "mid", "k\"q"];
        let mut raw = RawObject::new();
        let mut whole = serde_json::Map::new();
        for (n, k) in keys.iter().enumerate() {
            let text = format!("{{\"b\": [1, 2.50, \"x\"], \"a\": {n}}}");
            let value: Value = serde_json::from_str(&text).unwrap();
            whole.insert(k.to_string(), value);
            raw.insert(
                k.to_string(),
                Member::read(RawValue::from_string(text).unwrap()),
            );
        }
        let place = Place {
            named: "",
            pointer: "",
            list: "jobs",
        };
        let mut inexact = None;
        let (before, after) = shell(&raw, &place, Some("mid"), true, &mut inexact).unwrap();
        whole.remove("mid");
        whole.insert("jobs".into(), serde_json::json!([{"x": 1}, []]));
        let spliced = format!("{before}{}{after}", r#"[{"x":1},[]]"#);
        assert_eq!(
            spliced,
            canonical::to_canonical_string(&Value::Object(whole.clone()))
        );
        assert_eq!(inexact, None);

        // Without its list, all of it is before.
        let (before, after) = shell(&raw, &place, Some("mid"), false, &mut inexact).unwrap();
        whole.remove("jobs");
        assert_eq!(
            before,
            canonical::to_canonical_string(&Value::Object(whole))
        );
        assert_eq!(after, "");
    }

    #[test]
    fn an_inexact_integer_is_found_in_the_head_first_then_in_a_stage() {
        let big = "9007199254740993";
        let version = plan::FORMAT_VERSION;
        let doc = format!(
            r#"{{"formatVersion": {version}, "stages": [{{"name": "s", "x": [0, {big}], "jobs": []}}],
                "inputs": [{{"n": {big}}}], "digest": "sha256:0"}}"#
        );
        let d = refusal(&doc);
        assert_eq!(d.code, Code::PlanDigestMismatch, "{}", d.message);
        assert_eq!(d.pointer.as_deref(), Some("/inputs/0/n"), "{}", d.message);
        // Near miss: the head's integer exact, the stage's is found.
        let d = refusal(&doc.replace(&format!("{{\"n\": {big}}}"), "{\"n\": 1}"));
        assert_eq!(d.code, Code::PlanDigestMismatch, "{}", d.message);
        assert_eq!(d.pointer.as_deref(), Some("/stages/0/x/1"), "{}", d.message);
    }

    #[test]
    fn stages_and_jobs_of_another_shape_are_named_for_what_they_are() {
        let version = plan::FORMAT_VERSION;
        let doc = |stages: &str| {
            format!(r#"{{"formatVersion": {version}, "digest": "sha256:0", "stages": {stages}}}"#)
        };
        for (stages, said) in [
            ("true", "`stages` must be an array of stage objects; it is a boolean"),
            ("-1.5", "`stages` must be an array of stage objects; it is a number"),
            ("\"s\"", "`stages` must be an array of stage objects; it is a string"),
            ("null", "`stages` must be an array of stage objects; it is null"),
            ("{\"a\": [1]}", "`stages` must be an array of stage objects; it is an object"),
            (
                "[{\"name\": \"s\", \"jobs\": []}, [2]]",
                "`stages` must be an array of stage objects; it is an array holding something other than objects",
            ),
            (
                "[{\"name\": \"s\", \"jobs\": 7}]",
                "`stages[0].jobs` must be an array of jobs; it is a number",
            ),
            (
                "[{\"name\": \"s\", \"jobs\": {}}]",
                "`stages[0].jobs` must be an array of jobs; it is an object",
            ),
        ] {
            let d = refusal(&doc(stages));
            assert_eq!(d.code, Code::PlanUnreadable, "{stages}: {}", d.message);
            assert!(d.message.ends_with(said), "{stages}: {}", d.message);
        }
        // Near miss: stages of the plan's shape get as far as the digest.
        let d = refusal(&doc("[{\"name\": \"s\", \"jobs\": []}]"));
        assert_eq!(d.code, Code::PlanDigestMismatch, "{}", d.message);
    }

    #[test]
    fn a_plan_error_reads_as_it_always_did() {
        let json_error = || serde_json::from_str::<u8>("true").unwrap_err();
        let said = [
            PlanError::Version(Some("999".into())),
            PlanError::Version(None),
            PlanError::Stages("a boolean"),
            PlanError::Jobs {
                si: 1,
                what: "a number",
            },
            PlanError::Value {
                at: "stages[0].x".into(),
                why: "number out of range".into(),
            },
            PlanError::Head(json_error()),
            PlanError::StageKey("kind".into()),
            PlanError::StageName,
            PlanError::Job {
                si: 0,
                ji: 2,
                source: json_error(),
            },
        ]
        .map(|e| e.to_string());
        let (okstra, format) = (crate::VERSION, plan::FORMAT_VERSION);
        assert_eq!(
            said,
            [
                format!("plan formatVersion 999 is not supported by okstra {okstra} (it reads format {format})"),
                format!("plan formatVersion (absent) is not supported by okstra {okstra} (it reads format {format})"),
                "`stages` must be an array of stage objects; it is a boolean".into(),
                "`stages[1].jobs` must be an array of jobs; it is a number".into(),
                "`stages[0].x`: number out of range".into(),
                "invalid type: boolean `true`, expected u8 at line 1 column 4".into(),
                "a stage holds an unknown key `kind`".into(),
                "a stage without a string `name`".into(),
                "`stages[0].jobs[2]`: invalid type: boolean `true`, expected u8 at line 1 column 4".into(),
            ]
        );
    }

    #[test]
    fn a_head_value_that_cannot_be_read_is_judged_after_the_version() {
        // 1e400 is JSON, but no number serde_json reads.
        let version = plan::FORMAT_VERSION;
        let doc = format!(r#"{{"formatVersion": {version}, "run": {{"x": 1e400}}, "stages": []}}"#);
        let d = refusal(&doc);
        assert_eq!(d.code, Code::PlanUnreadable, "{}", d.message);
        assert!(d.message.contains("`run`"), "{}", d.message);
        let d = refusal(&doc.replace(&format!(": {version},"), ": 999,"));
        assert_eq!(d.code, Code::PlanVersion, "{}", d.message);
    }
}
