//! Invocation metadata and authority (SPEC §3.1): a job must agree with the
//! metadata the lead wrote beside its prompt, and a v2 job with the run
//! manifest's role executions, participants and model catalog.

use super::{paths, with_worker, Ctx, Entry, Loaded};
use crate::diag::Code;
use crate::model::{self, binding_problem, metadata_version, str_of, Manifest, MetaVersion};
use crate::plan::{Invocation, Job};
use crate::schema::SchemaKind;
use crate::source::{Format, SourceFile};
use serde_json::Value;
use std::collections::BTreeMap;

/// A prompt's `<prompt>.meta.json`, loaded.
pub struct Meta {
    pub loaded: Loaded,
    pub display: String,
}

/// Keys of the metadata whose problems the rules below report with their own
/// codes; the schema's complaints about them would only repeat those.
const RULE_COVERED: &[&str] = &[
    "digests",
    "modelAssignment",
    "schemaVersion",
    "executionIdentityVersion",
    "attempt",
    "invocationId",
];

/// Load the metadata beside a prompt, if there is one.
pub fn load_metadata(ctx: &mut Ctx, prompt: &paths::Resolved) -> Option<Meta> {
    let abs = prompt.abs.with_file_name(format!(
        "{}.meta.json",
        prompt.abs.file_name()?.to_string_lossy()
    ));
    if !abs.exists() {
        return None;
    }
    let display = format!("{}.meta.json", prompt.display);
    let loaded = ctx.load("metadata", &display, &abs, Format::Json)?;
    ctx.schema_check(SchemaKind::Metadata, &loaded, &|err| {
        let first = err
            .pointer
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("");
        err.pointer.is_empty() || RULE_COVERED.contains(&first)
    });
    Some(Meta { loaded, display })
}

pub fn metadata_model_value(doc: &Value) -> &str {
    doc.get("modelAssignment")
        .map(|m| str_of(m, "modelExecutionValue"))
        .unwrap_or("")
}

/// The invocation fields a job carries from its metadata; None when the
/// metadata is incomplete (reported by `check_metadata`).
pub fn invocation_of(_ctx: &mut Ctx, meta: &Meta) -> Option<Invocation> {
    let doc = &meta.loaded.doc;
    let digests = doc.get("digests")?.as_object()?;
    let assignment = doc.get("modelAssignment")?.as_object()?;
    let invocation_id = str_of(doc, "invocationId");
    if invocation_id.is_empty() {
        return None;
    }
    let host_model_value = match assignment.get("hostModelValue") {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    };
    Some(Invocation {
        invocation_id: invocation_id.to_string(),
        audience: str_of(doc, "audience").to_string(),
        assignment_ref: str_of(doc, "assignmentRef").to_string(),
        digests: digests
            .iter()
            .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
            .collect::<BTreeMap<_, _>>(),
        host_model_value,
    })
}

/// Checks of the metadata on its own (any manifest version).
pub fn check_metadata(ctx: &mut Ctx, manifest: &Manifest, meta: &Meta, job: &Job) {
    let doc = &meta.loaded.doc;
    let src = &meta.loaded.src;
    let mut out = Vec::new();
    for key in ["digests", "modelAssignment"] {
        if !doc.get(key).is_some_and(Value::is_object) {
            out.push(
                ctx.at(
                    src,
                    Code::MetadataIncomplete,
                    format!("invocation metadata has no `{key}` object"),
                    if doc.get(key).is_some() { format!("/{key}") } else { String::new() }.as_str(),
                )
                .help("the lead writes digests{catalogDigest, assignmentDigest, dutyDigest, instructionDigest, promptDigest} and modelAssignment{modelExecutionValue, hostModelValue}"),
            );
        }
    }
    if str_of(doc, "invocationId").is_empty() {
        out.push(
            ctx.at(
                src,
                Code::MetadataIncomplete,
                "invocation metadata has no `invocationId`",
                "",
            )
            .help("every invocation is named by a non-empty invocationId"),
        );
    }
    if let Some(host) = doc
        .get("modelAssignment")
        .and_then(|m| m.get("hostModelValue"))
    {
        if !(host.is_string() || host.is_null()) {
            out.push(
                ctx.at(
                    src,
                    Code::MetadataInvalid,
                    format!("`hostModelValue` must be a string or null, found {host}"),
                    "/modelAssignment/hostModelValue",
                )
                .help("write the host's model name as a string, or null when there is none"),
            );
        }
    }
    match metadata_version(doc) {
        MetaVersion::Mixed => out.push(
            ctx.at(
                src,
                Code::IdentityMixedVersions,
                format!(
                    "invocation metadata is neither v1 (schemaVersion 1, no executionIdentityVersion) nor v2 (schemaVersion \"2.0\", executionIdentityVersion 2): found schemaVersion {} and executionIdentityVersion {}",
                    show(doc.get("schemaVersion")),
                    show(doc.get("executionIdentityVersion"))
                ),
                if doc.get("schemaVersion").is_some() { "/schemaVersion" } else { "" },
            )
            .help("the lead writes one consistent identity version into the metadata"),
        ),
        MetaVersion::V2 => {
            let re_ref = str_of(doc, "roleExecutionRef");
            let matches = manifest.role_execution(re_ref).is_some_and(|re| {
                str_of(re, "participantRef") == str_of(doc, "participantRef")
                    && str_of(re, "executionLabel") == str_of(doc, "executionLabel")
            });
            if !matches {
                out.push(
                    ctx.at(
                        src,
                        Code::AuthorityRoleExecution,
                        format!(
                            "metadata names role execution `{re_ref}`, which the manifest {} ",
                            if manifest.role_execution(re_ref).is_some() {
                                "holds with a different participantRef or executionLabel"
                            } else {
                                "does not hold"
                            }
                        )
                        .trim_end()
                        .to_string(),
                        "/roleExecutionRef",
                    )
                    .help("the metadata's roleExecutionRef, participantRef and executionLabel must name one roleExecutions[] row of the manifest"),
                );
            }
        }
        MetaVersion::V1 => {}
    }
    for d in out {
        ctx.push(d.worker(job.label().to_string()));
    }
}

fn show(v: Option<&Value>) -> String {
    v.map(|v| v.to_string())
        .unwrap_or_else(|| "(absent)".into())
}

/// A v2 job under a v2 manifest agrees with its metadata and the manifest.
pub fn check_v2_job(
    ctx: &mut Ctx,
    manifest: &Manifest,
    meta: &Meta,
    job: &Job,
    entry: &Entry,
    src: &SourceFile,
) {
    let Some(id) = job.identity.v2() else { return };
    let doc = &meta.loaded.doc;
    let push = |ctx: &mut Ctx, code: Code, key: &str, message: String, help: &'static str| {
        let d = ctx.at(src, code, message, &entry.ptr(key)).help(help);
        ctx.push(with_worker(d, entry));
    };
    if metadata_version(doc) != MetaVersion::V2 {
        push(
            ctx,
            Code::AuthorityMetadataVersion,
            "promptPath",
            format!(
                "v2 worker `{}` has v1 invocation metadata ({})",
                id.execution_label, meta.display
            ),
            "regenerate the prompt's metadata with the v2 identity, or plan this worker as v1",
        );
        return;
    }
    if str_of(doc, "invocationRef") != id.invocation_ref {
        push(
            ctx,
            Code::AuthorityInvocationMismatch,
            "invocationRef",
            format!(
                "invocationRef `{}` differs from the metadata's `{}`",
                id.invocation_ref,
                str_of(doc, "invocationRef")
            ),
            "the job and its prompt's metadata must name the same invocation",
        );
    }
    let meta_attempt = doc.get("attempt").and_then(model::int_of);
    let mut differing = Vec::new();
    for (key, mine) in [
        ("participantRef", &id.participant_ref),
        ("roleExecutionRef", &id.role_execution_ref),
        ("executionLabel", &id.execution_label),
        ("dutyId", &id.duty_id),
    ] {
        if str_of(doc, key) != mine {
            differing.push(format!("{key} `{mine}` vs `{}`", str_of(doc, key)));
        }
    }
    if meta_attempt != Some(id.attempt as i64) {
        differing.push(format!(
            "attempt {} vs {}",
            id.attempt,
            doc.get("attempt")
                .map(|v| v.to_string())
                .unwrap_or_else(|| "(absent)".into())
        ));
    }
    if !differing.is_empty() {
        let key = differing[0]
            .split(' ')
            .next()
            .unwrap_or("participantRef")
            .to_string();
        push(
            ctx,
            Code::AuthorityIdentityMismatch,
            &key,
            format!(
                "identity differs from the invocation metadata: {}",
                differing.join("; ")
            ),
            "the spec entry and <prompt>.meta.json must carry the same v2 identity",
        );
    }
    let meta_prompt = doc.get("prompt").map(|p| str_of(p, "path")).unwrap_or("");
    let same_prompt = !meta_prompt.is_empty()
        && paths::resolve(&ctx.root, meta_prompt, true)
            .map(|r| {
                paths::real_path(&r.abs)
                    == paths::real_path(&paths::abs_of(&ctx.root, &job.prompt_path))
            })
            .unwrap_or(false);
    if !same_prompt {
        push(
            ctx,
            Code::AuthorityPromptMismatch,
            "promptPath",
            format!(
                "promptPath `{}` and the metadata's prompt.path `{}` are different files",
                job.prompt_path, meta_prompt
            ),
            "point promptPath at the prompt the metadata describes",
        );
    }
    let execution = manifest.role_execution(&id.role_execution_ref);
    let participant = manifest.participant(&id.participant_ref);
    let duty_role = manifest.role_for_duty(&id.duty_id);
    let mut problems = Vec::new();
    match execution {
        None => problems.push(format!(
            "the manifest has no role execution `{}`",
            id.role_execution_ref
        )),
        Some(re) => {
            for (key, mine) in [
                ("participantRef", id.participant_ref.as_str()),
                ("executionLabel", id.execution_label.as_str()),
                ("role", job.role.as_str()),
                ("provider", job.provider.as_str()),
            ] {
                if str_of(re, key) != mine {
                    problems.push(format!(
                        "its {key} is `{}`, the job's `{mine}`",
                        str_of(re, key)
                    ));
                }
            }
            match &duty_role {
                None => problems.push(format!("duty `{}` is not in the duty catalog", id.duty_id)),
                Some(r) if r != str_of(re, "role") => problems.push(format!(
                    "duty `{}` asks for role `{r}`, the execution has `{}`",
                    id.duty_id,
                    str_of(re, "role")
                )),
                _ => {}
            }
        }
    }
    if participant.is_none() {
        problems.push(format!(
            "the manifest has no participant `{}`",
            id.participant_ref
        ));
    }
    if !problems.is_empty() {
        push(
            ctx,
            Code::AuthorityRoleExecution,
            "roleExecutionRef",
            format!("role execution `{}` does not authorise this job: {}", id.role_execution_ref, problems.join("; ")),
            "make the job's role, provider, label and duty match its roleExecutions[] row (duties: see README, or the manifest's duties{})",
        );
    }
    let meta_model = metadata_model_value(doc);
    if doc.get("modelAssignment").is_some() && meta_model != job.model_execution_value {
        push(
            ctx,
            Code::AuthorityAssignment,
            "modelExecutionValue",
            format!(
                "modelExecutionValue `{}` differs from the metadata's `{meta_model}`",
                job.model_execution_value
            ),
            "use the model the metadata assigns, or drop modelExecutionValue to take it from the metadata",
        );
    }
    let meta_kind = str_of(doc, "dispatchKind");
    if meta_kind != job.dispatch_kind {
        push(
            ctx,
            Code::AuthorityAssignment,
            "dispatchKind",
            format!(
                "dispatchKind `{}` differs from the metadata's `{meta_kind}`",
                job.dispatch_kind
            ),
            "the spec's dispatchKind (default initial) must equal the metadata's",
        );
    }
    if let Some(re) = execution {
        if let Some(problem) = binding_problem(manifest, re) {
            push(
                ctx,
                Code::AuthorityBinding,
                "roleExecutionRef",
                format!("role execution `{}` {problem}", id.role_execution_ref),
                "the lead binds each role execution to a catalog model: binding{...}, modelRef, modelSpecDigest = sha256 of canonical {\"binding\",\"model\"}",
            );
        }
    }
}

/// Translators come only from reservations (SPEC §3.5).
pub fn check_translator(
    ctx: &mut Ctx,
    manifest: &Manifest,
    job: &Job,
    entry: &Entry,
    src: &SourceFile,
) {
    let Some(id) = job.identity.v2() else { return };
    let is_translator = manifest
        .role_execution(&id.role_execution_ref)
        .is_some_and(|re| str_of(re, "role") == "translator");
    if is_translator {
        let d = ctx
            .at(
                src,
                Code::RulesTranslatorNeedsReservation,
                format!("`{}` is a translator role execution; translators are planned only from their reservation", id.role_execution_ref),
                &entry.ptr("roleExecutionRef"),
            )
            .help("remove it from the spec and run: okstra plan --manifest M --workers translator");
        ctx.push(with_worker(d, entry));
    }
}
