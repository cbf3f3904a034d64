//! Invocation metadata and authority
//! (docs/manifest.md#invocation-metadata-and-authority): a job must agree with
//! the metadata the lead wrote beside its prompt, and a v2 job with the run
//! manifest's role executions, participants and model catalog.

use super::{raw, with_worker, Ctx, Entry, Loaded};
use crate::diag::{Code, Diagnostic};
use crate::model::{self, binding_problem, metadata_version, str_of, Manifest, MetaVersion};
use crate::paths::{self, Field};
use crate::plan::{Identity, Invocation, V2Identity};
use crate::schema::SchemaKind;
use crate::source::{Format, SourceFile};
use crate::vocab::{DispatchKind, Role};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// What a job claims to be, checked against its metadata and the manifest
/// before the job is assembled.
pub struct Claim<'a> {
    pub identity: &'a Identity,
    /// As the entry names it: a name okstra has no adapter for is compared
    /// like any other (the schema reported it already).
    pub provider: &'a str,
    pub role: &'a Role,
    pub prompt_path: &'a str,
    pub model_execution_value: &'a str,
    pub dispatch_kind: &'a DispatchKind,
}

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
    let loaded = ctx.load("metadata", &display, &abs, paths::Base::Root, Format::Json)?;
    // Judged as written before anything compares it
    // (docs/spec-format.md#paths).
    if let Some(why) = prompt_path_problem(&loaded.doc) {
        let value = meta_prompt_path(&loaded.doc);
        let d = raw::invalid_path(ctx, &loaded.src, value, "/prompt/path", &why);
        ctx.push(d);
    }
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

/// The metadata's `prompt.path`, "" when absent.
fn meta_prompt_path(doc: &Value) -> &str {
    doc.get("prompt").map(|p| str_of(p, "path")).unwrap_or("")
}

/// Why the metadata's `prompt.path` is refused as written, if it is.
fn prompt_path_problem(doc: &Value) -> Option<String> {
    let value = meta_prompt_path(doc);
    if value.is_empty() {
        return None;
    }
    paths::syntax_problem(value, Field::File)
}

pub fn metadata_model_value(doc: &Value) -> &str {
    doc.get("modelAssignment")
        .map(|m| str_of(m, "modelExecutionValue"))
        .unwrap_or("")
}

/// The invocation fields a job carries from its metadata; None when the
/// metadata is incomplete (reported by `check_metadata`).
pub fn invocation_of(meta: &Meta) -> Option<Invocation> {
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

/// Checks of the metadata on its own (any manifest version), each problem
/// naming the claiming job's worker.
pub fn check_metadata(ctx: &mut Ctx, manifest: &Manifest, meta: &Meta, claim: &Claim) {
    let doc = &meta.loaded.doc;
    let src = &meta.loaded.src;
    let mut out = Vec::new();
    incomplete(ctx, doc, src, &mut out);
    out.extend(host_model_problem(ctx, doc, src));
    out.extend(version_problem(ctx, manifest, doc, src));
    for d in out {
        ctx.push(d.worker(claim.identity.label().to_string()));
    }
}

/// `metadata/incomplete`: no `digests` or `modelAssignment` object, or no
/// `invocationId` (docs/manifest.md#invocation-metadata-and-authority).
fn incomplete(ctx: &Ctx, doc: &Value, src: &SourceFile, out: &mut Vec<Diagnostic>) {
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
}

/// `metadata/invalid`: a `hostModelValue` that is neither a string nor null.
fn host_model_problem(ctx: &Ctx, doc: &Value, src: &SourceFile) -> Option<Diagnostic> {
    let host = doc
        .get("modelAssignment")
        .and_then(|m| m.get("hostModelValue"))?;
    if host.is_string() || host.is_null() {
        return None;
    }
    Some(
        ctx.at(
            src,
            Code::MetadataInvalid,
            format!("`hostModelValue` must be a string or null, found {host}"),
            "/modelAssignment/hostModelValue",
        )
        .help("write the host's model name as a string, or null when there is none"),
    )
}

/// Metadata of neither identity version, or v2 metadata whose
/// `roleExecutionRef` names no role execution of the manifest with the
/// same participant and label.
fn version_problem(
    ctx: &Ctx,
    manifest: &Manifest,
    doc: &Value,
    src: &SourceFile,
) -> Option<Diagnostic> {
    match metadata_version(doc) {
        MetaVersion::Mixed => Some(
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
        MetaVersion::V2 => unknown_role_execution(ctx, manifest, doc, src),
        MetaVersion::V1 => None,
    }
}

/// `authority/role-execution` for v2 metadata: the role execution its
/// `roleExecutionRef` names must exist with the same participant and label.
fn unknown_role_execution(
    ctx: &Ctx,
    manifest: &Manifest,
    doc: &Value,
    src: &SourceFile,
) -> Option<Diagnostic> {
    let re_ref = str_of(doc, "roleExecutionRef");
    let matches = manifest.role_execution(re_ref).is_some_and(|re| {
        str_of(re, "participantRef") == str_of(doc, "participantRef")
            && str_of(re, "executionLabel") == str_of(doc, "executionLabel")
    });
    if matches {
        return None;
    }
    Some(
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
    )
}

fn show(v: Option<&Value>) -> String {
    v.map(|v| v.to_string())
        .unwrap_or_else(|| "(absent)".into())
}

/// One disagreement of a v2 job with its metadata or the manifest, at the
/// entry key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Finding {
    code: Code,
    key: String,
    message: String,
    help: &'static str,
}

fn finding(code: Code, key: &str, message: String, help: &'static str) -> Finding {
    Finding {
        code,
        key: key.to_string(),
        message,
        help,
    }
}

/// A v2 job under a v2 manifest agrees with its metadata and the manifest.
/// Every disagreement is reported, in the order of the table at
/// docs/manifest.md#invocation-metadata-and-authority.
pub fn check_v2_job(
    ctx: &mut Ctx,
    manifest: &Manifest,
    meta: &Meta,
    claim: &Claim,
    entry: &Entry,
    src: &SourceFile,
) {
    let Some(id) = claim.identity.v2() else {
        return;
    };
    let doc = &meta.loaded.doc;
    let findings: Vec<Finding> = if metadata_version(doc) != MetaVersion::V2 {
        vec![finding(
            Code::AuthorityMetadataVersion,
            "promptPath",
            format!(
                "v2 worker `{}` has v1 invocation metadata ({})",
                id.execution_label, meta.display
            ),
            "regenerate the prompt's metadata with the v2 identity, or plan this worker as v1",
        )]
    } else {
        let execution = manifest.role_execution(&id.role_execution_ref);
        [
            invocation_mismatch(doc, id),
            identity_mismatch(doc, id),
            prompt_mismatch(&ctx.root, doc, claim),
            role_execution_problem(manifest, execution, id, claim),
            model_mismatch(doc, claim),
            kind_mismatch(doc, claim),
            execution.and_then(|re| binding_finding(manifest, re, id)),
        ]
        .into_iter()
        .flatten()
        .collect()
    };
    for f in findings {
        let d = ctx
            .at(src, f.code, f.message, &entry.ptr(&f.key))
            .help(f.help);
        ctx.push(with_worker(d, entry));
    }
}

fn invocation_mismatch(doc: &Value, id: &V2Identity) -> Option<Finding> {
    let theirs = str_of(doc, "invocationRef");
    (theirs != id.invocation_ref).then(|| {
        finding(
            Code::AuthorityInvocationMismatch,
            "invocationRef",
            format!(
                "invocationRef `{}` differs from the metadata's `{theirs}`",
                id.invocation_ref
            ),
            "the job and its prompt's metadata must name the same invocation",
        )
    })
}

/// The identity refs and attempt, all compared; the finding points at the
/// first that differs.
fn identity_mismatch(doc: &Value, id: &V2Identity) -> Option<Finding> {
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
    if doc.get("attempt").and_then(model::int_of) != Some(id.attempt as i64) {
        differing.push(format!(
            "attempt {} vs {}",
            id.attempt,
            doc.get("attempt")
                .map(|v| v.to_string())
                .unwrap_or_else(|| "(absent)".into())
        ));
    }
    let key = differing
        .first()?
        .split(' ')
        .next()
        .unwrap_or("participantRef");
    Some(finding(
        Code::AuthorityIdentityMismatch,
        key,
        format!(
            "identity differs from the invocation metadata: {}",
            differing.join("; ")
        ),
        "the spec entry and <prompt>.meta.json must carry the same v2 identity",
    ))
}

/// `promptPath` and the metadata's `prompt.path` must be the same file,
/// however each is spelled.
fn prompt_mismatch(root: &Path, doc: &Value, claim: &Claim) -> Option<Finding> {
    let meta_prompt = meta_prompt_path(doc);
    if prompt_path_problem(doc).is_some() {
        // Refused as written (`path/invalid`) when the metadata was loaded.
        return None;
    }
    // Both are real paths once resolved: the same file however spelled.
    let same_prompt = !meta_prompt.is_empty()
        && paths::resolve(root, meta_prompt, Field::File)
            .is_ok_and(|r| r.display == claim.prompt_path);
    (!same_prompt).then(|| {
        finding(
            Code::AuthorityPromptMismatch,
            "promptPath",
            format!(
                "promptPath `{}` and the metadata's prompt.path `{}` are different files",
                claim.prompt_path, meta_prompt
            ),
            "point promptPath at the prompt the metadata describes",
        )
    })
}

/// The role execution and participant exist and match the job, and the
/// execution's role is the one its duty asks for.
fn role_execution_problem(
    manifest: &Manifest,
    execution: Option<&Value>,
    id: &V2Identity,
    claim: &Claim,
) -> Option<Finding> {
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
                ("role", claim.role.as_str()),
                ("provider", claim.provider),
            ] {
                if str_of(re, key) != mine {
                    problems.push(format!(
                        "its {key} is `{}`, the job's `{mine}`",
                        str_of(re, key)
                    ));
                }
            }
            match manifest.role_for_duty(&id.duty_id) {
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
    if manifest.participant(&id.participant_ref).is_none() {
        problems.push(format!(
            "the manifest has no participant `{}`",
            id.participant_ref
        ));
    }
    (!problems.is_empty()).then(|| finding(
        Code::AuthorityRoleExecution,
        "roleExecutionRef",
        format!("role execution `{}` does not authorise this job: {}", id.role_execution_ref, problems.join("; ")),
        "make the job's role, provider, label and duty match its roleExecutions[] row (duties: docs/manifest.md#duty-catalog, or the manifest's duties{})",
    ))
}

fn model_mismatch(doc: &Value, claim: &Claim) -> Option<Finding> {
    let meta_model = metadata_model_value(doc);
    (doc.get("modelAssignment").is_some() && meta_model != claim.model_execution_value).then(|| {
        finding(
            Code::AuthorityAssignment,
            "modelExecutionValue",
            format!(
                "modelExecutionValue `{}` differs from the metadata's `{meta_model}`",
                claim.model_execution_value
            ),
            "use the model the metadata assigns, or drop modelExecutionValue to take it from the metadata",
        )
    })
}

fn kind_mismatch(doc: &Value, claim: &Claim) -> Option<Finding> {
    let meta_kind = str_of(doc, "dispatchKind");
    (meta_kind != claim.dispatch_kind.as_str()).then(|| {
        finding(
            Code::AuthorityAssignment,
            "dispatchKind",
            format!(
                "dispatchKind `{}` differs from the metadata's `{meta_kind}`",
                claim.dispatch_kind
            ),
            "the spec's dispatchKind (default initial) must equal the metadata's",
        )
    })
}

fn binding_finding(manifest: &Manifest, execution: &Value, id: &V2Identity) -> Option<Finding> {
    binding_problem(manifest, execution).map(|problem| {
        finding(
            Code::AuthorityBinding,
            "roleExecutionRef",
            format!("role execution `{}` {problem}", id.role_execution_ref),
            "the lead binds each role execution to a catalog model: binding{...}, modelRef, modelSpecDigest = sha256 of canonical {\"binding\",\"model\"}",
        )
    })
}

/// Translators come only from reservations
/// (docs/manifest.md#translator-reservations).
pub fn check_translator(
    ctx: &mut Ctx,
    manifest: &Manifest,
    claim: &Claim,
    entry: &Entry,
    src: &SourceFile,
) {
    let Some(id) = claim.identity.v2() else {
        return;
    };
    let is_translator = manifest
        .role_execution(&id.role_execution_ref)
        .is_some_and(|re| str_of(re, "role") == Role::Translator.as_str());
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn id() -> V2Identity {
        V2Identity {
            participant_ref: "p".into(),
            role_execution_ref: "re".into(),
            execution_label: "l".into(),
            duty_id: "implementation-verifier".into(),
            invocation_ref: "inv".into(),
            assignment_ref: "a/w".into(),
            attempt: 1,
        }
    }

    fn metadata() -> Value {
        json!({"participantRef": "p", "roleExecutionRef": "re", "executionLabel": "l",
               "dutyId": "implementation-verifier", "invocationRef": "inv", "attempt": 1,
               "dispatchKind": "initial", "modelAssignment": {"modelExecutionValue": "m"}})
    }

    fn with_claim<R>(f: impl FnOnce(&Claim) -> R) -> R {
        let identity = Identity::V2(id());
        let kind = DispatchKind::initial();
        f(&Claim {
            identity: &identity,
            provider: "codex",
            role: &Role::Verifier,
            prompt_path: "p.md",
            model_execution_value: "m",
            dispatch_kind: &kind,
        })
    }

    #[test]
    fn agreeing_metadata_finds_nothing() {
        let doc = metadata();
        assert_eq!(invocation_mismatch(&doc, &id()), None);
        assert_eq!(identity_mismatch(&doc, &id()), None);
        with_claim(|c| {
            assert_eq!(model_mismatch(&doc, c), None);
            assert_eq!(kind_mismatch(&doc, c), None);
        });
    }

    #[test]
    fn an_identity_mismatch_lists_every_difference_at_the_first() {
        let mut doc = metadata();
        doc["executionLabel"] = json!("other");
        doc["attempt"] = json!(true);
        let f = identity_mismatch(&doc, &id()).unwrap();
        assert_eq!(f.key, "executionLabel");
        assert_eq!(
            f.message,
            "identity differs from the invocation metadata: executionLabel `l` vs `other`; attempt 1 vs true"
        );
        doc["executionLabel"] = json!("l");
        assert_eq!(identity_mismatch(&doc, &id()).unwrap().key, "attempt");
    }

    #[test]
    fn assignment_mismatches_point_at_their_keys() {
        let mut doc = metadata();
        doc["dispatchKind"] = json!("reverify-r2");
        doc["modelAssignment"]["modelExecutionValue"] = json!("n");
        with_claim(|c| {
            assert_eq!(kind_mismatch(&doc, c).unwrap().key, "dispatchKind");
            assert_eq!(model_mismatch(&doc, c).unwrap().key, "modelExecutionValue");
        });
        // No model assignment: nothing to disagree with (metadata/incomplete says why).
        doc.as_object_mut().unwrap().remove("modelAssignment");
        with_claim(|c| assert_eq!(model_mismatch(&doc, c), None));
    }

    #[test]
    fn the_role_execution_must_match_the_job_and_its_duty() {
        let manifest_doc = json!({
            "roleExecutions": [{"roleExecutionRef": "re", "participantRef": "p", "executionLabel": "l",
                                "role": "verifier", "provider": "codex"}],
            "participantAssignments": [{"participantRef": "p"}]
        });
        let manifest = Manifest::new(&manifest_doc);
        let re = manifest.role_execution("re");
        with_claim(|c| assert_eq!(role_execution_problem(&manifest, re, &id(), c), None));
        let identity = Identity::V2(id());
        let kind = DispatchKind::initial();
        let claim = Claim {
            identity: &identity,
            provider: "aider",
            role: &Role::Implementer,
            prompt_path: "p.md",
            model_execution_value: "m",
            dispatch_kind: &kind,
        };
        let f = role_execution_problem(&manifest, re, &id(), &claim).unwrap();
        assert_eq!(f.code, Code::AuthorityRoleExecution);
        assert!(f
            .message
            .contains("its role is `verifier`, the job's `implementer`"));
        assert!(f
            .message
            .contains("its provider is `codex`, the job's `aider`"));
        let missing = role_execution_problem(&manifest, None, &id(), &claim).unwrap();
        assert!(missing.message.contains("no role execution `re`"));
    }
}
