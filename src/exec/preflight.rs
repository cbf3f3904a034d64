//! Before anything starts (docs/exec.md#before-anything-starts): a plan is
//! refused, with nothing started and nothing written, when its format is
//! unknown, it was edited, an input changed or vanished, or a v2 job's
//! authority moved.

use super::jobs::Jobs;
use crate::diag::{Code, Diagnostic, Diagnostics};
use crate::model::{binding_problem, str_of, Manifest};
use crate::paths;
use crate::plan::{self, Plan};
use serde_json::Value;
use std::path::Path;

/// Every input whose digest changed or that vanished, one diagnostic each.
pub fn stale_inputs(plan: &Plan, root: &Path) -> Vec<Diagnostic> {
    use rayon::prelude::*;
    // Two inputs per job (prompt and metadata): read and hashed in parallel,
    // reported in plan order.
    plan.inputs
        .par_iter()
        .filter_map(|input| {
            let path = paths::abs_of(root, &input.path);
            // Streamed: memory does not grow with the input.
            let digest = std::fs::File::open(&path).and_then(crate::canonical::sha256_hex_of);
            let message = match digest {
                Ok(sha256) if sha256 == input.sha256 => return None,
                Ok(_) => format!(
                    "{} `{}` changed since the plan was made",
                    input.kind, input.path
                ),
                Err(_) => format!(
                    "{} `{}` vanished since the plan was made",
                    input.kind, input.path
                ),
            };
            Some(
                Diagnostic::new(Code::PlanStale, message)
                    .in_file(input.path.clone())
                    .help("review the change, then make a new plan: okstra plan SPEC --manifest M"),
            )
        })
        .collect()
}

/// A v2 job's role execution, participant, label and model binding as the
/// manifest holds them now; None when they still authorise the job.
pub fn binding_change(manifest: &Manifest, job: &plan::Job) -> Option<String> {
    let id = job.identity.v2()?;
    if !manifest.is_v2() {
        return None;
    }
    let Some(re) = manifest.role_execution(&id.role_execution_ref) else {
        return Some(format!(
            "role execution `{}` is no longer in the manifest",
            id.role_execution_ref
        ));
    };
    if str_of(re, "participantRef") != id.participant_ref
        || str_of(re, "executionLabel") != id.execution_label
    {
        return Some(format!(
            "role execution `{}` now names participant `{}` and label `{}`",
            id.role_execution_ref,
            str_of(re, "participantRef"),
            str_of(re, "executionLabel")
        ));
    }
    if manifest.participant(&id.participant_ref).is_none() {
        return Some(format!(
            "participant `{}` is no longer in the manifest",
            id.participant_ref
        ));
    }
    binding_problem(manifest, re).map(|p| format!("role execution `{}` {p}", id.role_execution_ref))
}

/// A job with `confinement = "required"` on a machine that cannot confine
/// it as planned (docs/confinement.md#kernel-confinement): no Landlock, or
/// for a confined network no seccomp (docs/confinement.md#network); exec
/// refuses before anything starts.
pub fn unconfinable(job: &plan::Job, offer: &crate::confine::Offer) -> Option<Diagnostic> {
    let wanted = job.write_enforcement.confinement;
    if let Err(why) = crate::confine::decide(wanted, offer) {
        return Some(
            Diagnostic::new(
                Code::ExecConfinementUnavailable,
                format!("{}: confinement is required, but {why}", job.label()),
            )
            .worker(job.label().to_string())
            .help("run it on a kernel with Landlock ABI 6 or newer (Linux 6.12+, `lsm=...,landlock`), or plan it with confinement = \"auto\" to run unconfined here"),
        );
    }
    let network = job.network.as_ref()?.mode();
    let why = crate::confine::decide_net(wanted, network, offer).err()?;
    Some(
        Diagnostic::new(
            Code::ExecConfinementUnavailable,
            format!(
                "{}: confinement is required with network = \"{network}\", but {why}",
                job.label()
            ),
        )
        .worker(job.label().to_string())
        .help("run it on a kernel with seccomp, or plan it with network = \"open\" (its writes and reads stay confined)"),
    )
}

/// All of docs/exec.md#before-anything-starts but the lock and what
/// [`super::load`] checks (format and digest). Returns the manifest's identity
/// (modification time and length) as it was when every binding was found
/// intact, so the runner checks again only once the manifest moved; `None` when
/// it could not be read.
pub fn verify(
    plan: &Plan,
    jobs: &Jobs,
    root: &Path,
) -> Result<Option<(std::time::SystemTime, u64)>, Diagnostics> {
    let mut diags = Diagnostics::default();
    diags.extend(stale_inputs(plan, root));
    let manifest_path = paths::abs_of(root, &plan.run.manifest_path);
    let stamp = std::fs::metadata(&manifest_path)
        .ok()
        .and_then(|m| Some((m.modified().ok()?, m.len())));
    let manifest = std::fs::read(&manifest_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
    let bindings = manifest.as_ref().map(Manifest::new);
    // One pass over the jobs (each parsed once); the kernel is asked only
    // when some job requires confinement.
    let offer = std::cell::OnceCell::new();
    let mut bases = std::collections::BTreeSet::new();
    for (_, job) in jobs.each() {
        if let Some(g) = &job.git_worktree {
            bases.insert(g.base.clone());
        }
        if let Some(why) = bindings.as_ref().and_then(|m| binding_change(m, &job)) {
            diags.push(
                Diagnostic::new(Code::ExecBindingChanged, format!("{}: {why}", job.label()))
                    .worker(job.label().to_string())
                    .in_file(plan.run.manifest_path.clone())
                    .help("the model binding changed after planning; re-plan to run with the new binding"),
            );
        }
        if job.write_enforcement.confinement == crate::vocab::Confinement::Required {
            diags.extend(unconfinable(&job, offer.get_or_init(crate::confine::offer)));
        }
    }
    diags.extend(missing_bases(&bases, root));
    if diags.is_empty() {
        Ok(stamp.filter(|_| manifest.is_some()))
    } else {
        Err(diags)
    }
}

/// The base commits of the plan's worktree jobs that the repository no
/// longer holds, or the repository itself gone (docs/worktrees.md#planning):
/// the plan is stale.
fn missing_bases(bases: &std::collections::BTreeSet<String>, root: &Path) -> Vec<Diagnostic> {
    if bases.is_empty() {
        return Vec::new();
    }
    let stale = |message: String| {
        Diagnostic::new(Code::PlanStale, message)
            .help("make a new plan where the repository is: okstra plan SPEC --manifest M")
    };
    let repo = match crate::worktree::Repo::find(root) {
        Ok(Some(repo)) => repo,
        Ok(None) => {
            return vec![stale(format!(
                "the plan has worktree jobs, but {} is no longer in a git repository",
                root.display()
            ))]
        }
        Err(e) => return vec![stale(format!("the plan has worktree jobs, but {e}"))],
    };
    bases
        .iter()
        .filter(|b| !repo.commit_exists(b))
        .map(|b| {
            stale(format!(
                "the base commit {b} of the plan's worktree jobs is no longer in the repository"
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::model_spec_digest;
    use serde_json::json;

    fn job(version: &str) -> plan::Job {
        let identity = if version == "2" {
            json!({"version": "2", "participantRef": "p", "roleExecutionRef": "re", "executionLabel": "l",
                   "dutyId": "analysis", "invocationRef": "i", "assignmentRef": "a/k", "attempt": 1})
        } else {
            json!({"version": "1", "workerId": "w"})
        };
        serde_json::from_value(json!({
            "key": "k", "identity": identity, "provider": "command", "backend": "cli-wrapper",
            "role": "analyst", "dispatchKind": "initial", "round": 1, "promptPath": "p.md", "resultPath": "r.md",
            "workerResultPath": "r.md", "completionPaths": ["r.md"], "command": [], "providerCommand": [],
            "takesSessionId": false, "idleTimeoutSeconds": 600, "livenessMode": "wrapper-status",
            "writePolicy": {"role": "analyst", "allow": [], "digest": ""}, "writeEnforcement": {"mutationAudit": "none"}
        }))
        .unwrap()
    }

    fn manifest() -> Value {
        let binding = json!({"runner": "cli-wrapper", "resolvedExecutionValue": "m"});
        let model = json!({"provider": "command", "modelId": "m", "versionKind": "pinned", "channelFamily": "m"});
        json!({
            "schemaVersion": "2.0", "executionIdentityVersion": 2,
            "roleExecutions": [{"roleExecutionRef": "re", "participantRef": "p", "executionLabel": "l",
                "binding": binding, "modelRef": "m1", "modelSpecDigest": model_spec_digest(&binding, &model)}],
            "participantAssignments": [{"participantRef": "p"}],
            "models": {"m1": model}
        })
    }

    #[test]
    fn only_required_jobs_are_refused_and_only_without_landlock() {
        let plan = |mode: &str| -> Plan {
            let mut j = serde_json::to_value(job("1")).unwrap();
            j["writeEnforcement"]["confinement"] = json!(mode);
            serde_json::from_value(json!({
                "formatVersion": 2, "okstraVersion": "0", "createdAt": "t", "projectRoot": "/p",
                "run": {"taskKey": "t", "manifestPath": "m", "teamStatePath": "ts", "leadEventsPath": "e",
                        "errorLogPath": "x", "terminalBackend": "cli-wrapper", "mode": "spec"},
                "inputs": [], "policy": {"maxAttempts": 2}, "stages": [{"name": "s", "jobs": [j]}]
            }))
            .unwrap()
        };
        let none = crate::confine::Offer::Unavailable("no Landlock".into());
        let here = crate::confine::Offer::Landlock { abi: 7 };
        let first = |p: Plan| p.jobs().next().cloned().unwrap();
        let refused = unconfinable(&first(plan("required")), &none).unwrap();
        assert_eq!(refused.code, Code::ExecConfinementUnavailable);
        assert!(
            refused.message.contains("no Landlock"),
            "{}",
            refused.message
        );
        assert!(unconfinable(&first(plan("required")), &here).is_none());
        assert!(unconfinable(&first(plan("auto")), &none).is_none());
        assert!(unconfinable(&first(plan("none")), &none).is_none());
    }

    #[test]
    fn binding_change_each_case_and_near_misses() {
        let doc = manifest();
        assert_eq!(binding_change(&Manifest::new(&doc), &job("2")), None);
        // Near misses: a v1 job, or a v1 manifest, is not gated.
        let mut moved = doc.clone();
        moved["models"]["m1"]["modelId"] = json!("other");
        assert_eq!(binding_change(&Manifest::new(&moved), &job("1")), None);
        let mut v1 = moved.clone();
        v1.as_object_mut().unwrap().remove("schemaVersion");
        assert_eq!(binding_change(&Manifest::new(&v1), &job("2")), None);
        // The catalog entry moved under the recorded digest.
        assert!(binding_change(&Manifest::new(&moved), &job("2"))
            .unwrap()
            .contains("digest to"));
        let mut relabelled = doc.clone();
        relabelled["roleExecutions"][0]["executionLabel"] = json!("l2");
        assert!(binding_change(&Manifest::new(&relabelled), &job("2"))
            .unwrap()
            .contains("label `l2`"));
        let mut gone = doc.clone();
        gone["participantAssignments"] = json!([]);
        assert!(binding_change(&Manifest::new(&gone), &job("2"))
            .unwrap()
            .contains("participant `p`"));
        let mut no_re = doc.clone();
        no_re["roleExecutions"] = json!([]);
        assert!(binding_change(&Manifest::new(&no_re), &job("2"))
            .unwrap()
            .contains("no longer in the manifest"));
    }
}
