//! Batch rules (SPEC §3.2): what may share a stage, and in which order
//! stages may come. Each stage of a pipeline is one batch.

use super::{Built, Ctx};
use crate::diag::{Code, Diagnostic};
use crate::model::{EXECUTOR_AUDIENCE, REPORT_WRITER, VERIFIER_AUDIENCE};
use crate::plan::Job;
use crate::policy;
use crate::source::SourceFile;
use std::collections::HashMap;

/// The round a dispatch kind stands for: `reverify-r<N>` is round N (N >= 1,
/// digits only); any other `reverify-r...` is refused; other kinds are 1.
pub fn dispatch_round(kind: &str) -> Result<u64, String> {
    let Some(rest) = kind.strip_prefix("reverify-r") else {
        return Ok(1);
    };
    if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = rest.parse::<u64>() {
            if n >= 1 {
                return Ok(n);
            }
        }
    }
    Err(format!(
        "dispatchKind `{kind}` is not reverify-r<N> with a round N >= 1"
    ))
}

/// `verifier codex` for one, `verifiers codex, gemini` for several.
pub fn named_role(role: &str, names: &[&str]) -> String {
    format!(
        "{role}{} {}",
        if names.len() > 1 { "s" } else { "" },
        names.join(", ")
    )
}

fn is_report_writer(job: &Job) -> bool {
    job.key == REPORT_WRITER || job.role == REPORT_WRITER
}

fn diag_for(
    ctx: &Ctx,
    src: &SourceFile,
    built: &Built,
    code: Code,
    message: String,
    key: Option<&str>,
) -> Diagnostic {
    let pointer = match key {
        Some(k) => format!("{}/{k}", built.entry_pointer),
        None => built.entry_pointer.clone(),
    };
    ctx.at(src, code, message, &pointer)
        .worker(built.job.label().to_string())
}

/// Every batch rule over the stages of one plan; `src` is the file the jobs'
/// entries point into (the spec, or team-state in roster mode).
pub fn check(ctx: &mut Ctx, src: &SourceFile, names: &[String], stages: &[Vec<Built>]) {
    let mut out: Vec<Diagnostic> = Vec::new();
    let mut dispatch_ids: HashMap<&str, &Built> = HashMap::new();
    let last_non_empty = stages.iter().rposition(|s| !s.is_empty());
    let mut executor_stage: Option<usize> = None;
    let mut verifier_stages: Vec<(usize, &Built)> = Vec::new();

    for (si, stage) in stages.iter().enumerate() {
        let mut keys: HashMap<&str, &Built> = HashMap::new();
        for built in stage {
            if let Some(first) = keys.insert(&built.job.key, built) {
                out.push(
                    diag_for(
                        ctx,
                        src,
                        built,
                        Code::IdentityDuplicate,
                        format!(
                            "state key `{}` is used twice in stage `{}` (also by the entry at {})",
                            built.job.key, names[si], first.entry_pointer
                        ),
                        None,
                    )
                    .help("one worker row per state key and stage: merge the entries, or move one to another stage"),
                );
            }
            if let Some(id) = built.job.dispatch_id.as_deref() {
                if let Some(first) = dispatch_ids.insert(id, built) {
                    out.push(
                        diag_for(
                            ctx,
                            src,
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

        let executors: Vec<&Built> = stage
            .iter()
            .filter(|b| b.job.audience == EXECUTOR_AUDIENCE)
            .collect();
        let verifiers: Vec<&Built> = stage
            .iter()
            .filter(|b| b.job.audience == VERIFIER_AUDIENCE)
            .collect();
        if !executors.is_empty() && !verifiers.is_empty() {
            let e: Vec<&str> = executors.iter().map(|b| b.job.label()).collect();
            let v: Vec<&str> = verifiers.iter().map(|b| b.job.label()).collect();
            out.push(
                diag_for(
                    ctx,
                    src,
                    verifiers[0],
                    Code::RulesPhaseOrder,
                    format!(
                        "stage `{}` holds the implementation {} and the {}: a verifier must see the executor's finished diff",
                        names[si],
                        named_role("executor", &e),
                        named_role("verifier", &v)
                    ),
                    Some("audience"),
                )
                .help(format!(
                    "split it: a stage with the executor alone first, then a later stage with the verifiers, without {}",
                    e.join(", ")
                )),
            );
        }
        if !executors.is_empty() && executor_stage.is_none() {
            executor_stage = Some(si);
        }
        for v in &verifiers {
            verifier_stages.push((si, v));
        }

        if stage.iter().any(|b| is_report_writer(&b.job)) {
            let rw = stage
                .iter()
                .find(|b| is_report_writer(&b.job))
                .unwrap_or(&stage[0]);
            if stage.len() > 1 {
                let others: Vec<&str> = stage
                    .iter()
                    .filter(|b| !is_report_writer(&b.job))
                    .map(|b| b.job.label())
                    .collect();
                out.push(
                    diag_for(
                        ctx,
                        src,
                        rw,
                        Code::RulesReportWriterIsolation,
                        format!(
                            "report-writer shares stage `{}` with {}",
                            names[si],
                            others.join(", ")
                        ),
                        None,
                    )
                    .help("give report-writer a stage of its own, the last of the pipeline"),
                );
            } else if Some(si) != last_non_empty {
                out.push(
                    diag_for(
                        ctx,
                        src,
                        rw,
                        Code::RulesReportWriterIsolation,
                        format!(
                            "report-writer runs in stage `{}`, but later stages follow it",
                            names[si]
                        ),
                        None,
                    )
                    .help("move the report-writer stage to the end: it reports on everything before it"),
                );
            }
        }

        for (a, b, overlap) in batch_conflicts(stage) {
            out.push(
                diag_for(
                    ctx,
                    src,
                    b,
                    Code::RulesWriteConflict,
                    format!(
                        "`{}` and `{}` in stage `{}` may both write `{overlap}`",
                        a.job.label(),
                        b.job.label(),
                        names[si]
                    ),
                    None,
                )
                .label(src.locate(&a.entry_pointer), format!("`{}` is declared here", a.job.label()))
                .help("give each job its own result paths and worktree, or put them in different stages"),
            );
        }
    }
    if let Some(exec_si) = executor_stage {
        for (si, v) in verifier_stages {
            if si < exec_si {
                out.push(
                    diag_for(
                        ctx,
                        src,
                        v,
                        Code::RulesPhaseOrder,
                        format!(
                            "verifier `{}` runs in stage `{}`, before the executor's stage `{}`",
                            v.job.label(),
                            names[si],
                            names[exec_si]
                        ),
                        Some("audience"),
                    )
                    .help("put the verifiers in a stage after the executor's"),
                );
            }
        }
    }
    for d in out {
        ctx.push(d);
    }
}

/// Pairs of jobs of one batch whose write policies overlap. Literal paths
/// are indexed, so a batch of thousands of plain workers costs one pass;
/// only policies with glob patterns are compared pairwise.
fn batch_conflicts(stage: &[Built]) -> Vec<(&Built, &Built, String)> {
    let mut out = Vec::new();
    let mut owner: HashMap<&str, usize> = HashMap::new();
    let mut reported: std::collections::HashSet<(usize, usize)> = Default::default();
    for (i, b) in stage.iter().enumerate() {
        for path in &b.job.write_policy.allow {
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
                .job
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
            if let Some(p) = policy::overlap(&stage[a].job.write_policy, &stage[b].job.write_policy)
            {
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
    fn rounds() {
        assert_eq!(dispatch_round("initial"), Ok(1));
        assert_eq!(dispatch_round("reverify-r1"), Ok(1));
        assert_eq!(dispatch_round("reverify-r12"), Ok(12));
        for bad in [
            "reverify-r",
            "reverify-r0",
            "reverify-rx",
            "reverify-r-1",
            "reverify-r1a",
            "reverify-r+1",
        ] {
            assert!(dispatch_round(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plural_names() {
        assert_eq!(named_role("verifier", &["codex"]), "verifier codex");
        assert_eq!(
            named_role("verifier", &["codex", "gemini"]),
            "verifiers codex, gemini"
        );
    }
}
