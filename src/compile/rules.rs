//! Batch rules (SPEC §3.2): what may share a stage, and in which order
//! stages may come. Each stage of a pipeline is one batch. The
//! dispatch-kind rule (`reverify-r<N>`) lives with its type,
//! `vocab::DispatchKind`.

use super::{Built, Ctx};
use crate::diag::{Code, Diagnostic};
use crate::model::REPORT_WRITER;
use crate::plan::WritePolicy;
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
    pub write_policy: &'a WritePolicy,
    /// The entry the job came from, where its diagnostics point.
    pub entry_pointer: &'a str,
}

impl<'a> Member<'a> {
    fn of(built: &'a Built) -> Member<'a> {
        let job = &built.job;
        Member {
            key: &job.key,
            label: job.label(),
            role: &job.role,
            audience: job.audience.as_ref(),
            dispatch_id: job.dispatch_id.as_deref(),
            write_policy: &job.write_policy,
            entry_pointer: &built.entry_pointer,
        }
    }
}

fn is_report_writer(job: &Member) -> bool {
    job.key == REPORT_WRITER || *job.role == Role::ReportWriter
}

/// Makes the diagnostics of one plan's rules, each at a job's entry.
struct At<'a> {
    ctx: &'a Ctx,
    src: &'a SourceFile,
}

impl At<'_> {
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
pub fn check(ctx: &mut Ctx, src: &SourceFile, names: &[String], stages: &[Vec<Built>]) {
    let stages: Vec<Vec<Member>> = stages
        .iter()
        .map(|s| s.iter().map(Member::of).collect())
        .collect();
    check_members(ctx, src, names, &stages);
}

/// [`check`] over the members of each stage.
pub fn check_members(ctx: &mut Ctx, src: &SourceFile, names: &[String], stages: &[Vec<Member>]) {
    let at = At { ctx, src };
    let mut out: Vec<Diagnostic> = Vec::new();
    let mut dispatch_ids: HashMap<&str, &Member> = HashMap::new();
    let last_non_empty = stages.iter().rposition(|s| !s.is_empty());
    for (si, stage) in stages.iter().enumerate() {
        let name = &names[si];
        out.extend(duplicates(&at, name, stage, &mut dispatch_ids));
        out.extend(executor_beside_verifiers(&at, name, stage));
        let last = Some(si) == last_non_empty;
        out.extend(report_writer_alone(&at, name, stage, last));
        out.extend(write_conflicts(&at, name, stage));
    }
    out.extend(verifiers_before_executor(&at, names, stages));
    for d in out {
        ctx.push(d);
    }
}

/// `identity/duplicate`: a state key twice in one stage, or a dispatch id
/// twice anywhere (`dispatch_ids` carries the ids of earlier stages).
fn duplicates<'a>(
    at: &At,
    name: &str,
    stage: &'a [Member<'a>],
    dispatch_ids: &mut HashMap<&'a str, &'a Member<'a>>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let mut keys: HashMap<&str, &Member> = HashMap::new();
    for built in stage {
        if let Some(first) = keys.insert(built.key, built) {
            out.push(
                at.job(
                    built,
                    Code::IdentityDuplicate,
                    format!(
                        "state key `{}` is used twice in stage `{name}` (also by the entry at {})",
                        built.key, first.entry_pointer
                    ),
                    None,
                )
                .help("one worker row per state key and stage: merge the entries, or move one to another stage"),
            );
        }
        if let Some(id) = built.dispatch_id {
            if let Some(first) = dispatch_ids.insert(id, built) {
                out.push(
                    at.job(
                        built,
                        Code::IdentityDuplicate,
                        format!(
                            "dispatch id `{id}` is planned twice (also by the entry at {})",
                            first.entry_pointer
                        ),
                        None,
                    )
                    .help("each invocation attempt is dispatched once; give the second its own prompt and metadata"),
                );
            }
        }
    }
    out
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
fn verifiers_before_executor(at: &At, names: &[String], stages: &[Vec<Member>]) -> Vec<Diagnostic> {
    let has_executor =
        |s: &Vec<Member>| !with_audience(s, Audience::ImplementationExecutor).is_empty();
    let Some(exec_si) = stages.iter().position(has_executor) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (si, stage) in stages.iter().enumerate().take(exec_si) {
        for v in with_audience(stage, Audience::ImplementationVerifier) {
            out.push(
                at.job(
                    v,
                    Code::RulesPhaseOrder,
                    format!(
                        "verifier `{}` runs in stage `{}`, before the executor's stage `{}`",
                        v.label, names[si], names[exec_si]
                    ),
                    Some("audience"),
                )
                .help("put the verifiers in a stage after the executor's"),
            );
        }
    }
    out
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
fn write_conflicts(at: &At, name: &str, stage: &[Member]) -> Vec<Diagnostic> {
    batch_conflicts(stage)
        .into_iter()
        .map(|(a, b, overlap)| {
            at.job(
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
            )
        })
        .collect()
}

/// Pairs of jobs of one batch whose write policies overlap. Literal paths
/// are indexed, so a batch of thousands of plain workers costs one pass;
/// only policies with glob patterns are compared pairwise.
fn batch_conflicts<'a>(stage: &'a [Member<'a>]) -> Vec<(&'a Member<'a>, &'a Member<'a>, String)> {
    let mut out = Vec::new();
    let mut owner: HashMap<&str, usize> = HashMap::new();
    let mut reported: std::collections::HashSet<(usize, usize)> = Default::default();
    for (i, b) in stage.iter().enumerate() {
        for path in &b.write_policy.allow {
            if policy::is_glob(path) {
                continue;
            }
            match owner.get(path.as_str()) {
                Some(&j) if j != i => {
                    if reported.insert((j, i)) {
                        out.push((&stage[j], b, path.clone()));
                    }
                }
                _ => {
                    owner.insert(path, i);
                }
            }
        }
    }
    let globbed: Vec<usize> = (0..stage.len())
        .filter(|&i| {
            stage[i]
                .write_policy
                .allow
                .iter()
                .any(|p| policy::is_glob(p))
        })
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
            if let Some(p) = policy::overlap(stage[a].write_policy, stage[b].write_policy) {
                reported.insert((a, b));
                out.push((&stage[a], &stage[b], p));
            }
        }
    }
    out
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
