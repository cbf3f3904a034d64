//! Batch rules (docs/spec-format.md#batch-rules): what may share a stage, and
//! in which order stages may come. Each stage of a pipeline is one batch. The
//! dispatch-kind rule (`reverify-r<N>`) lives with its type,
//! `vocab::DispatchKind`.

use super::{Built, Ctx};
use crate::diag::{Code, Diagnostic};
use crate::model::REPORT_WRITER;
use crate::policy;
use crate::source::SourceFile;
use crate::vocab::{Audience, Role};
use std::collections::HashMap;

/// `verifier codex` for one, `verifiers codex, gemini` for several.
pub fn named_role(role: &str, names: &[&str]) -> String {
    format!(
        "{role}{} {}",
        if names.len() > 1 { "s" } else { "" },
        names.join(", ")
    )
}

/// What the batch rules look at of one job: a planned job, or (for
/// `okstra validate`, which reads no manifest or metadata) what the spec
/// alone says of it.
pub struct Member<'a> {
    pub key: &'a str,
    pub label: &'a str,
    pub role: &'a Role,
    pub audience: Option<&'a Audience>,
    pub dispatch_id: Option<&'a str>,
    /// What its write policy allows.
    pub allow: Allow<'a>,
    /// The entry the job came from, where its diagnostics point.
    pub entry_pointer: &'a str,
}

impl<'a> Member<'a> {
    pub fn of(built: &'a Built) -> Member<'a> {
        let job = &built.job;
        Member {
            key: &job.key,
            label: job.label(),
            role: &job.role,
            audience: job.audience.as_ref(),
            dispatch_id: job.dispatch_id.as_deref(),
            allow: Allow::Job(&job.write_policy.allow),
            entry_pointer: &built.entry_pointer,
        }
    }
}

/// A job's write policy's allow-list, as the rules read it.
#[derive(Clone, Copy)]
pub enum Allow<'a> {
    /// A built job's.
    Job(&'a [String]),
    /// Kept apart from its job ([`Facts`]).
    Kept(&'a [Box<str>]),
}

impl<'a> Allow<'a> {
    pub fn paths(self) -> impl Iterator<Item = &'a str> {
        let (job, kept): (&[String], &[Box<str>]) = match self {
            Allow::Job(paths) => (paths, &[]),
            Allow::Kept(paths) => (&[], paths),
        };
        job.iter()
            .map(String::as_str)
            .chain(kept.iter().map(|p| &**p))
    }
}

/// A [`Member`] of its own: what `okstra validate` knows of a job from the
/// spec alone, and what planning keeps of a job once the plan is refused
/// anyway (the job itself, its commands above all, is dropped). Of its
/// write policy it keeps the allow-list: the rules read nothing else.
pub struct Facts {
    pub key: Box<str>,
    pub label: Box<str>,
    pub role: Role,
    pub audience: Option<Audience>,
    pub dispatch_id: Option<Box<str>>,
    pub allow: Box<[Box<str>]>,
    pub entry_pointer: Box<str>,
}

impl Facts {
    /// What the rules need of a built job.
    pub fn of(built: Built) -> Facts {
        let Built { job, entry_pointer } = built;
        let label = job.label().into();
        let allow = job.write_policy.allow.into_iter().map(Into::into).collect();
        Facts {
            label,
            key: job.key.into(),
            role: job.role,
            audience: job.audience,
            dispatch_id: job.dispatch_id.map(String::into_boxed_str),
            allow,
            entry_pointer: entry_pointer.into(),
        }
    }

    pub fn member(&self) -> Member<'_> {
        Member {
            key: &self.key,
            label: &self.label,
            role: &self.role,
            audience: self.audience.as_ref(),
            dispatch_id: self.dispatch_id.as_deref(),
            allow: Allow::Kept(&self.allow),
            entry_pointer: &self.entry_pointer,
        }
    }
}

fn is_report_writer(job: &Member) -> bool {
    job.key == REPORT_WRITER || *job.role == Role::ReportWriter
}

/// Makes the diagnostics of one plan's rules, each at a job's entry, and
/// reports them as they are found (a plan of many thousand conflicting
/// jobs once held them all twice).
struct At<'a> {
    ctx: &'a mut Ctx,
    src: &'a SourceFile,
}

impl At<'_> {
    fn report(&mut self, d: Diagnostic) {
        self.ctx.push(d);
    }

    fn job(&self, job: &Member, code: Code, message: String, key: Option<&str>) -> Diagnostic {
        let pointer = match key {
            Some(k) => format!("{}/{k}", job.entry_pointer),
            None => job.entry_pointer.to_string(),
        };
        self.ctx
            .at(self.src, code, message, &pointer)
            .worker(job.label.to_string())
    }
}

/// Every batch rule over the stages of one plan; `src` is the file the jobs'
/// entries point into (the spec, or team-state in roster mode).
pub fn check(ctx: &mut Ctx, src: &SourceFile, names: &[String], stages: &[Vec<Member>]) {
    let mut at = At { ctx, src };
    let mut dispatch_ids: HashMap<&str, &Member> = HashMap::new();
    let last_non_empty = stages.iter().rposition(|s| !s.is_empty());
    for (si, stage) in stages.iter().enumerate() {
        let name = &names[si];
        duplicates(&mut at, name, stage, &mut dispatch_ids);
        if let Some(d) = executor_beside_verifiers(&at, name, stage) {
            at.report(d);
        }
        let last = Some(si) == last_non_empty;
        if let Some(d) = report_writer_alone(&at, name, stage, last) {
            at.report(d);
        }
        write_conflicts(&mut at, name, stage);
    }
    verifiers_before_executor(&mut at, names, stages);
}

/// `identity/duplicate`: a state key twice in one stage, or a dispatch id
/// twice anywhere (`dispatch_ids` carries the ids of earlier stages).
fn duplicates<'a>(
    at: &mut At,
    name: &str,
    stage: &'a [Member<'a>],
    dispatch_ids: &mut HashMap<&'a str, &'a Member<'a>>,
) {
    let mut keys: HashMap<&str, &Member> = HashMap::new();
    for built in stage {
        if let Some(first) = keys.insert(built.key, built) {
            let d = at
                .job(
                    built,
                    Code::IdentityDuplicate,
                    format!(
                        "state key `{}` is used twice in stage `{name}` (also by the entry at {})",
                        built.key, first.entry_pointer
                    ),
                    None,
                )
                .help("one worker row per state key and stage: merge the entries, or move one to another stage");
            at.report(d);
        }
        if let Some(id) = built.dispatch_id {
            if let Some(first) = dispatch_ids.insert(id, built) {
                let d = at
                    .job(
                        built,
                        Code::IdentityDuplicate,
                        format!(
                            "dispatch id `{id}` is planned twice (also by the entry at {})",
                            first.entry_pointer
                        ),
                        None,
                    )
                    .help("each invocation attempt is dispatched once; give the second its own prompt and metadata");
                at.report(d);
            }
        }
    }
}

fn with_audience<'a>(stage: &'a [Member<'a>], audience: Audience) -> Vec<&'a Member<'a>> {
    stage
        .iter()
        .filter(|b| b.audience == Some(&audience))
        .collect()
}

/// `rules/phase-order`: an executor and a verifier never share a batch.
fn executor_beside_verifiers(at: &At, name: &str, stage: &[Member]) -> Option<Diagnostic> {
    let executors = with_audience(stage, Audience::ImplementationExecutor);
    let verifiers = with_audience(stage, Audience::ImplementationVerifier);
    if executors.is_empty() || verifiers.is_empty() {
        return None;
    }
    let e: Vec<&str> = executors.iter().map(|b| b.label).collect();
    let v: Vec<&str> = verifiers.iter().map(|b| b.label).collect();
    Some(
        at.job(
            verifiers[0],
            Code::RulesPhaseOrder,
            format!(
                "stage `{name}` holds the implementation {} and the {}: a verifier must see the executor's finished diff",
                named_role("executor", &e),
                named_role("verifier", &v)
            ),
            Some("audience"),
        )
        .help(format!(
            "split it: a stage with the executor alone first, then a later stage with the verifiers, without {}",
            e.join(", ")
        )),
    )
}

/// `rules/phase-order` across stages: no verifier stage before the first
/// executor's.
fn verifiers_before_executor(at: &mut At, names: &[String], stages: &[Vec<Member>]) {
    let has_executor =
        |s: &Vec<Member>| !with_audience(s, Audience::ImplementationExecutor).is_empty();
    let Some(exec_si) = stages.iter().position(has_executor) else {
        return;
    };
    for (si, stage) in stages.iter().enumerate().take(exec_si) {
        for v in with_audience(stage, Audience::ImplementationVerifier) {
            let d = at
                .job(
                    v,
                    Code::RulesPhaseOrder,
                    format!(
                        "verifier `{}` runs in stage `{}`, before the executor's stage `{}`",
                        v.label, names[si], names[exec_si]
                    ),
                    Some("audience"),
                )
                .help("put the verifiers in a stage after the executor's");
            at.report(d);
        }
    }
}

/// `rules/report-writer-isolation`: the report writer alone, in the last
/// stage.
fn report_writer_alone(at: &At, name: &str, stage: &[Member], last: bool) -> Option<Diagnostic> {
    let rw = stage.iter().find(|b| is_report_writer(b))?;
    if stage.len() > 1 {
        let others: Vec<&str> = stage
            .iter()
            .filter(|b| !is_report_writer(b))
            .map(|b| b.label)
            .collect();
        return Some(
            at.job(
                rw,
                Code::RulesReportWriterIsolation,
                format!(
                    "report-writer shares stage `{name}` with {}",
                    others.join(", ")
                ),
                None,
            )
            .help("give report-writer a stage of its own, the last of the pipeline"),
        );
    }
    (!last).then(|| {
        at.job(
            rw,
            Code::RulesReportWriterIsolation,
            format!("report-writer runs in stage `{name}`, but later stages follow it"),
            None,
        )
        .help("move the report-writer stage to the end: it reports on everything before it")
    })
}

/// `rules/write-conflict`: two jobs of a batch that may write one path.
fn write_conflicts(at: &mut At, name: &str, stage: &[Member]) {
    batch_conflicts(stage, |a, b, overlap| {
        let d = at
            .job(
                b,
                Code::RulesWriteConflict,
                format!(
                    "`{}` and `{}` in stage `{name}` may both write `{overlap}`",
                    a.label, b.label,
                ),
                None,
            )
            .label(
                at.src.locate(a.entry_pointer),
                format!("`{}` is declared here", a.label),
            )
            .help(
                "give each job its own result paths and worktree, or put them in different stages",
            );
        at.report(d);
    });
}

/// Pairs of jobs of one batch whose write policies overlap, each given to
/// `found` with a path or pattern both may write, as it is found. Literal
/// paths are indexed, so a batch of thousands of plain workers costs one
/// pass; only policies with glob patterns are compared pairwise.
fn batch_conflicts<'a>(
    stage: &'a [Member<'a>],
    mut found: impl FnMut(&'a Member<'a>, &'a Member<'a>, &str),
) {
    let mut owner: HashMap<&str, usize> = HashMap::new();
    let mut reported: std::collections::HashSet<(usize, usize)> = Default::default();
    for (i, b) in stage.iter().enumerate() {
        for path in b.allow.paths() {
            if policy::is_glob(path) {
                continue;
            }
            match owner.get(path) {
                Some(&j) if j != i => {
                    if reported.insert((j, i)) {
                        found(&stage[j], b, path);
                    }
                }
                _ => {
                    owner.insert(path, i);
                }
            }
        }
    }
    let globbed: Vec<usize> = (0..stage.len())
        .filter(|&i| stage[i].allow.paths().any(policy::is_glob))
        .collect();
    for &g in &globbed {
        for j in 0..stage.len() {
            if j == g || (globbed.contains(&j) && j < g) {
                continue;
            }
            let (a, b) = if j < g { (j, g) } else { (g, j) };
            if reported.contains(&(a, b)) {
                continue;
            }
            if let Some(p) = policy::overlap_of(stage[a].allow.paths(), stage[b].allow.paths()) {
                reported.insert((a, b));
                found(&stage[a], &stage[b], &p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plural_names() {
        assert_eq!(named_role("verifier", &["codex"]), "verifier codex");
        assert_eq!(
            named_role("verifier", &["codex", "gemini"]),
            "verifiers codex, gemini"
        );
    }
}
