//! Translator reservations (docs/manifest.md#translator-reservations):
//! `--workers translator` plans the one canonical translator from its one
//! invocation reservation. The reservation becomes an `Entry` and goes through
//! the same job builder (and the same v2 authority checks) as any spec entry.

use super::{build_job, identity, rules, with_worker, Built, Ctx, Entry, Loaded, RunFacts};
use crate::diag::{Code, Diagnostic, Location, SourceText};
use crate::model::{int_of, str_of, Manifest, TRANSLATOR};
use crate::paths::{self, Field, PathProblem, Resolved};
use crate::plan::{self, Stage};
use crate::provider::Provider;
use crate::source::{Format, SourceFile};
use crate::vocab::Backend;
use serde_json::{json, Map, Value};
use std::collections::HashSet;

/// The exact key set of a translator reservation.
pub const RESERVATION_KEYS: [&str; 13] = [
    "schemaVersion",
    "executionIdentityVersion",
    "invocationId",
    "assignmentRef",
    "audience",
    "dispatchKind",
    "promptPath",
    "metadataPath",
    "invocationRef",
    "participantRef",
    "roleExecutionRef",
    "dutyId",
    "attempt",
];

const RESULT_HEADER: &str = "**Result Path:** ";
const WORKER_RESULT_HEADER: &str = "**Worker Result Path:** ";

/// `--workers translator`, alone.
pub fn requested(workers: &[String]) -> bool {
    workers.len() == 1 && workers[0] == TRANSLATOR
}

/// The one role execution the manifest's translator assignment names, or
/// why there is none.
pub fn canonical_execution<'a>(manifest: &Manifest<'a>) -> Result<&'a Value, String> {
    let Some(assignment) = manifest
        .doc
        .get("invocationAssignments")
        .and_then(|a| a.get(TRANSLATOR))
        .filter(|a| a.is_object())
    else {
        return Err("the manifest has no invocationAssignments.translator".into());
    };
    let provider = str_of(assignment, "provider");
    let model = str_of(assignment, "modelExecutionValue");
    let runner = str_of(assignment, "runner");
    // The binding's runner speaks the backend vocabulary.
    let wrapper = Backend::CliWrapper.as_str();
    if provider.is_empty() || model.is_empty() || runner != wrapper {
        return Err(format!(
            "invocationAssignments.translator needs provider, modelExecutionValue and runner = \"{wrapper}\" (found provider `{provider}`, modelExecutionValue `{model}`, runner `{runner}`)"
        ));
    }
    let matches: Vec<&Value> = manifest
        .rows("roleExecutions")
        .iter()
        .filter(|re| {
            str_of(re, "role") == TRANSLATOR
                && str_of(re, "provider") == provider
                && re.get("binding").is_some_and(|b| {
                    str_of(b, "runner") == runner && str_of(b, "resolvedExecutionValue") == model
                })
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no translator role execution has provider `{provider}` and binding runner `{runner}` / resolvedExecutionValue `{model}`"
        )),
        many => Err(format!(
            "{} translator role executions match the assignment ({}); it must name exactly one",
            many.len(),
            many.iter()
                .map(|re| str_of(re, "roleExecutionRef"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// Whether a reservation is a candidate for the canonical execution.
pub fn is_candidate(reservation: &Value, execution: &Value, dispatched: &HashSet<String>) -> bool {
    let Some(obj) = reservation.as_object() else {
        return false;
    };
    let keys: HashSet<&str> = obj.keys().map(String::as_str).collect();
    if keys != RESERVATION_KEYS.iter().copied().collect() {
        return false;
    }
    let s = |k: &str| str_of(reservation, k);
    let attempt = obj.get("attempt").and_then(int_of).unwrap_or(0);
    s("schemaVersion") == "2.0"
        && obj.get("executionIdentityVersion").and_then(int_of) == Some(2)
        && ["assignmentRef", "audience", "dispatchKind", "dutyId"]
            .iter()
            .all(|k| s(k) == TRANSLATOR)
        && s("participantRef") == str_of(execution, "participantRef")
        && s("roleExecutionRef") == str_of(execution, "roleExecutionRef")
        && attempt >= 1
        && !dispatched.contains(&plan::dispatch_id(s("invocationId"), attempt as u64))
}

/// The result and worker-result paths a translator prompt names: exactly one
/// non-empty line of each header, naming different files.
pub fn prompt_outputs(text: &str) -> Result<(String, String), String> {
    let mut values = Vec::new();
    for header in [RESULT_HEADER, WORKER_RESULT_HEADER] {
        let found: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix(header))
            .map(str::trim)
            .collect();
        match found.as_slice() {
            [one] if !one.is_empty() => values.push(one.to_string()),
            [] => return Err(format!("has no `{}` header line", header.trim_end())),
            [_] => return Err(format!("has an empty `{}` header", header.trim_end())),
            many => {
                return Err(format!(
                    "has {} `{}` header lines; exactly one is allowed",
                    many.len(),
                    header.trim_end()
                ))
            }
        }
    }
    Ok((values[0].clone(), values[1].clone()))
}

/// Translator mode: one stage holding the translator job.
pub fn stages(ctx: &mut Ctx, run: &RunFacts) -> Vec<Stage> {
    let manifest = Manifest::new(&run.manifest.doc);
    let Some(execution) = the_execution(ctx, run, &manifest) else {
        return Vec::new();
    };
    let Some(root) = reservation_root(ctx, run) else {
        return Vec::new();
    };
    let Some(dispatched) = dispatched_ids(ctx, run) else {
        return Vec::new();
    };
    let Some(reservation) = the_reservation(ctx, &root, execution, &dispatched) else {
        return Vec::new();
    };
    translator_job(ctx, run, &manifest, execution, &reservation)
        .map(|job| {
            vec![Stage {
                name: TRANSLATOR.to_string(),
                jobs: vec![job],
            }]
        })
        .unwrap_or_default()
}

/// The canonical execution, with a provider okstra has an adapter for;
/// reported when there is none.
fn the_execution<'a>(ctx: &mut Ctx, run: &RunFacts, manifest: &Manifest<'a>) -> Option<&'a Value> {
    let msrc = &run.manifest.src;
    let execution = match canonical_execution(manifest) {
        Ok(e) => e,
        Err(why) => {
            let pointer = if manifest
                .doc
                .get("invocationAssignments")
                .and_then(|a| a.get(TRANSLATOR))
                .is_some()
            {
                "/invocationAssignments/translator"
            } else {
                ""
            };
            let d = ctx
                .at(msrc, Code::TranslatorNoCanonicalExecution, why, pointer)
                .help("invocationAssignments.translator {provider, modelExecutionValue, runner = \"cli-wrapper\"} must match exactly one roleExecutions[] row with role translator, that provider, and binding {runner, resolvedExecutionValue}");
            ctx.push(d);
            return None;
        }
    };
    let provider_name = str_of(execution, "provider");
    if provider_name.parse::<Provider>().is_err() {
        let d = ctx
            .at(
                msrc,
                Code::InputInvalid,
                format!("the translator's provider `{provider_name}` has no okstra adapter"),
                "/invocationAssignments/translator/provider",
            )
            .help("use claude, codex, gemini or command");
        ctx.push(d);
        return None;
    }
    Some(execution)
}

fn count_problem(message: String) -> Diagnostic {
    Diagnostic::new(Code::TranslatorReservationCount, message).help(
        "exactly one reservation may be a candidate: the exact v2 reservation key set, assignmentRef/audience/dispatchKind/dutyId `translator`, the canonical execution's participantRef and roleExecutionRef, and a dispatch id not yet in team-state",
    )
}

/// `agentContract.invocationReservationRootPath`, resolved with the rest of
/// the manifest (a refused one was reported there).
fn reservation_root(ctx: &mut Ctx, run: &RunFacts) -> Option<Resolved> {
    if let Some(root) = &run.reservation_root {
        return Some(root.clone());
    }
    let named = run
        .manifest
        .doc
        .pointer(super::RESERVATION_ROOT)
        .and_then(Value::as_str)
        .is_some_and(|v| !v.is_empty());
    if !named {
        let d = count_problem(
            "the manifest names no agentContract.invocationReservationRootPath, so there is no reservation to plan".into(),
        )
        .at(run.manifest.src.locate(""));
        ctx.push(d);
    }
    None
}

/// The dispatch ids team-state already holds; none without team-state.
fn dispatched_ids(ctx: &mut Ctx, run: &RunFacts) -> Option<HashSet<String>> {
    if run.info.team_state_path.is_empty() {
        return Some(HashSet::new());
    }
    let path = paths::abs_of(&ctx.root, &run.info.team_state_path);
    match run.records.dispatch_ids(&path) {
        Ok(ids) => Some(ids),
        Err(e) => {
            ctx.push(
                Diagnostic::new(Code::InputInvalid, format!("cannot read team-state: {e}"))
                    .in_file(run.info.team_state_path.clone())
                    .help("a translator's reservation is a candidate only while its dispatch id is not in team-state; fix the file so it can be checked"),
            );
            None
        }
    }
}

/// The one candidate reservation under `root` (`translator/reservation-count`).
fn the_reservation(
    ctx: &mut Ctx,
    root: &Resolved,
    execution: &Value,
    dispatched: &HashSet<String>,
) -> Option<Loaded> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(&root.abs)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let mut candidates: Vec<Loaded> = Vec::new();
    for path in files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let display = format!("{}/{name}", root.display.trim_end_matches('/'));
        let Some(loaded) = ctx.load(
            "reservation",
            &display,
            &path,
            paths::Base::Root,
            Format::Json,
        ) else {
            continue;
        };
        if is_candidate(&loaded.doc, execution, dispatched) {
            candidates.push(loaded);
        }
    }
    if candidates.len() == 1 {
        return candidates.pop();
    }
    let listed: Vec<String> = candidates.iter().map(|c| c.src.display.clone()).collect();
    let d = count_problem(format!(
        "{} candidate translator reservations under {} for role execution `{}`{}",
        candidates.len(),
        root.display,
        str_of(execution, "roleExecutionRef"),
        if listed.is_empty() {
            String::new()
        } else {
            format!(": {}", listed.join(", "))
        }
    ))
    .in_file(root.display.clone());
    ctx.push(d);
    None
}

fn translator_job(
    ctx: &mut Ctx,
    run: &RunFacts,
    manifest: &Manifest,
    execution: &Value,
    res: &Loaded,
) -> Option<plan::Job> {
    let doc = &res.doc;
    let src = &res.src;
    let prompt = ctx.resolve(src, str_of(doc, "promptPath"), "/promptPath", Field::File)?;
    let meta = ctx.resolve(
        src,
        str_of(doc, "metadataPath"),
        "/metadataPath",
        Field::File,
    )?;
    if !check_files(ctx, src, &prompt, &meta) || !check_restates_metadata(ctx, res, &meta) {
        return None;
    }
    let (result, worker_result) = prompt_results(ctx, &prompt)?;
    let values = entry_values(doc, execution, manifest, result, worker_result);
    let entry = Entry::synthetic("", values, &RESERVATION_KEYS, true);
    let parsed = match identity::parse(&entry.fields) {
        Ok(p) => p,
        Err(problems) => {
            for p in problems {
                let ptr = p.key.map(|k| entry.ptr(k)).unwrap_or_default();
                let d = ctx.at(src, p.code, p.message, &ptr).help(p.help);
                ctx.push(with_worker(d, &entry));
            }
            return None;
        }
    };
    let job = build_job(ctx, run, manifest, src, &entry, parsed)?;
    let built = Built {
        job,
        entry_pointer: String::new(),
    };
    let members = vec![vec![rules::Member::of(&built)]];
    rules::check(ctx, &res.src, &[TRANSLATOR.to_string()], &members);
    Some(built.job)
}

/// The metadata beside the prompt (`translator/metadata-path`), and the
/// prompt there.
fn check_files(ctx: &mut Ctx, src: &SourceFile, prompt: &Resolved, meta: &Resolved) -> bool {
    let expected = format!("{}.meta.json", prompt.display);
    if meta.display != expected {
        let d = ctx
            .at(
                src,
                Code::TranslatorMetadataPath,
                format!(
                    "metadataPath `{}` is not beside the prompt: it must be `{expected}`",
                    meta.display
                ),
                "/metadataPath",
            )
            .help("the lead writes the invocation metadata as <promptPath>.meta.json");
        ctx.push(d);
        return false;
    }
    if !prompt.abs.is_file() {
        let d = ctx
            .at(
                src,
                Code::InputMissing,
                format!("the reservation's prompt {} does not exist", prompt.display),
                "/promptPath",
            )
            .help(paths::not_found_help(
                "the lead writes the translator prompt before planning",
                &ctx.root,
                paths::Base::Root,
            ));
        ctx.push(d);
        return false;
    }
    true
}

/// The reservation's fields equal its metadata's
/// (`translator/reservation-mismatch`).
fn check_restates_metadata(ctx: &mut Ctx, res: &Loaded, meta: &Resolved) -> bool {
    let (doc, src) = (&res.doc, &res.src);
    // The metadata is recorded as an input by the job builder.
    let metadata = match SourceFile::load(&meta.display, &meta.abs, Format::Json) {
        Ok((m, _)) => m,
        Err(d) => {
            let d = paths::name_root(d, &ctx.root, paths::Base::Root);
            ctx.push(d);
            return false;
        }
    };
    let differing: Vec<&str> = RESERVATION_KEYS
        .iter()
        .copied()
        .filter(|k| !matches!(*k, "promptPath" | "metadataPath"))
        .filter(|k| doc.get(*k) != metadata.get(*k))
        .collect();
    let Some(first) = differing.first() else {
        return true;
    };
    let shown: Vec<String> = differing
        .iter()
        .map(|k| {
            format!(
                "{k} {} vs {}",
                doc.get(*k).unwrap_or(&Value::Null),
                metadata
                    .get(*k)
                    .map(Value::to_string)
                    .unwrap_or_else(|| "(absent)".into())
            )
        })
        .collect();
    let d = ctx
        .at(
            src,
            Code::TranslatorReservationMismatch,
            format!(
                "the reservation and its invocation metadata {} differ: {}",
                meta.display,
                shown.join("; ")
            ),
            &format!("/{first}"),
        )
        .help("a reservation restates its metadata's identity; regenerate one of them");
    ctx.push(d);
    false
}

/// The result and worker-result paths the translator prompt names
/// (`translator/prompt-headers`): one of each, different files.
fn prompt_results(ctx: &mut Ctx, prompt: &Resolved) -> Option<(String, String)> {
    let text = match std::fs::read_to_string(&prompt.abs) {
        Ok(t) => t,
        Err(e) => {
            ctx.push(
                Diagnostic::new(
                    Code::InputUnreadable,
                    format!("cannot read translator prompt {}: {e}", prompt.display),
                )
                .in_file(prompt.display.clone()),
            );
            return None;
        }
    };
    let headers = |message: String| {
        Diagnostic::new(Code::TranslatorPromptHeaders, message)
            .in_file(prompt.display.clone())
            .help("the translator prompt holds exactly one `**Result Path:** <file>` and one `**Worker Result Path:** <other file>` line")
    };
    let (result, worker_result) = match prompt_outputs(&text) {
        Ok(v) => v,
        Err(why) => {
            ctx.push(headers(format!(
                "translator prompt {} {why}",
                prompt.display
            )));
            return None;
        }
    };
    let resolved = [RESULT_HEADER, WORKER_RESULT_HEADER]
        .into_iter()
        .zip([&result, &worker_result])
        .map(|(header, value)| header_path(ctx, prompt, &text, header, value))
        .collect::<Vec<_>>();
    let [Some(a), Some(b)] = resolved.as_slice() else {
        return None;
    };
    if a.display == b.display {
        ctx.push(headers(format!(
            "translator prompt {} names the same file `{result}` as its Result Path and Worker Result Path",
            prompt.display
        )));
        return None;
    }
    Some((result, worker_result))
}

/// A path a header of the translator prompt names, resolved; a refused one
/// is reported at its line of the prompt.
fn header_path(
    ctx: &mut Ctx,
    prompt: &Resolved,
    text: &str,
    header: &str,
    value: &str,
) -> Option<Resolved> {
    let (code, why) = match paths::resolve(&ctx.root, value, Field::File) {
        Ok(r) => return Some(r),
        Err(PathProblem::Invalid(why)) => (Code::PathInvalid, why),
        Err(PathProblem::EscapesRoot { resolved }) => (
            Code::PathEscapesRoot,
            format!(
                "resolves to {}, outside the project root {}",
                resolved.display(),
                ctx.root.display()
            ),
        ),
        Err(PathProblem::TooBroad(why)) => (Code::PathTooBroad, why),
    };
    // The value's bytes on its header line, when the line is found.
    let mut start = 0;
    let mut span = None;
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix(header) {
            let at = start + header.len() + rest.find(value).unwrap_or(0);
            span = Some(at..at + value.len());
            break;
        }
        start += line.len();
    }
    let location = match span {
        Some(span) => Location::span(
            &SourceText::new(prompt.display.clone(), text.to_string()),
            span,
        ),
        None => Location::file(prompt.display.clone()),
    };
    let d = Diagnostic::new(
        code,
        format!(
            "the translator prompt's `{}` path `{}` {why}",
            header.trim_end(),
            super::raw::shown(value)
        ),
    )
    .at(location)
    .help("name a file inside the project root, written with `/` between non-empty segments (e.g. `out/translation.md`)");
    ctx.push(d);
    None
}

/// The worker entry a reservation stands for: its identity, with the
/// canonical execution's label, provider and model, the translator role,
/// the prompt's result paths, and a `command` translator's argv.
fn entry_values(
    doc: &Value,
    execution: &Value,
    manifest: &Manifest,
    result: String,
    worker_result: String,
) -> Map<String, Value> {
    let mut values: Map<String, Value> = doc.as_object().cloned().unwrap_or_default();
    values.remove("metadataPath");
    values.remove("invocationId");
    values.insert(
        "executionLabel".into(),
        json!(str_of(execution, "executionLabel")),
    );
    values.insert("provider".into(), json!(str_of(execution, "provider")));
    values.insert("role".into(), json!(TRANSLATOR));
    values.insert("resultPath".into(), json!(result));
    values.insert("workerResultPath".into(), json!(worker_result));
    let model = execution
        .get("binding")
        .map(|b| str_of(b, "resolvedExecutionValue"))
        .unwrap_or("");
    values.insert("modelExecutionValue".into(), json!(model));
    // A `command` translator's argv comes with its assignment.
    if let Some(cmd) = manifest
        .doc
        .get("invocationAssignments")
        .and_then(|a| a.get(TRANSLATOR))
        .and_then(|a| a.get("command"))
        .filter(|c| c.is_array())
    {
        values.insert("command".into(), cmd.clone());
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_exactly_one_each_non_empty() {
        let ok = "# t\n**Result Path:** out/a.md\n**Worker Result Path:** out/b.md\n";
        assert_eq!(
            prompt_outputs(ok),
            Ok(("out/a.md".into(), "out/b.md".into()))
        );
        assert!(prompt_outputs("**Result Path:** a\n")
            .unwrap_err()
            .contains("Worker Result Path"));
        assert!(
            prompt_outputs("**Result Path:** \n**Worker Result Path:** b\n")
                .unwrap_err()
                .contains("empty")
        );
        let twice = format!("{ok}**Result Path:** c\n");
        assert!(prompt_outputs(&twice).unwrap_err().contains("2 "));
        // Indented or bolded differently is not the header.
        assert!(prompt_outputs(" **Result Path:** a\n**Worker Result Path:** b\n").is_err());
    }

    fn execution() -> Value {
        json!({"roleExecutionRef": "re-tr", "participantRef": "p-tr", "role": "translator",
               "provider": "command", "binding": {"runner": "cli-wrapper", "resolvedExecutionValue": "m"}})
    }

    fn reservation() -> Value {
        json!({"schemaVersion": "2.0", "executionIdentityVersion": 2, "invocationId": "inv-tr",
               "assignmentRef": "translator", "audience": "translator", "dispatchKind": "translator",
               "promptPath": "p.md", "metadataPath": "p.md.meta.json", "invocationRef": "inv-tr",
               "participantRef": "p-tr", "roleExecutionRef": "re-tr", "dutyId": "translator", "attempt": 1})
    }

    #[test]
    fn candidates() {
        let none = HashSet::new();
        assert!(is_candidate(&reservation(), &execution(), &none));
        let dispatched: HashSet<String> = ["inv-tr:attempt-1".to_string()].into();
        assert!(!is_candidate(&reservation(), &execution(), &dispatched));
        for (key, value) in [
            ("audience", json!("worker")),
            ("executionIdentityVersion", json!("2")),
            ("roleExecutionRef", json!("re-other")),
            ("attempt", json!(true)),
        ] {
            let mut r = reservation();
            r[key] = value;
            assert!(!is_candidate(&r, &execution(), &none), "{key}");
        }
        let mut extra = reservation();
        extra["note"] = json!("x");
        assert!(!is_candidate(&extra, &execution(), &none));
    }

    #[test]
    fn canonical_execution_needs_exactly_one_match() {
        let doc = json!({
            "invocationAssignments": {"translator": {"provider": "command", "modelExecutionValue": "m", "runner": "cli-wrapper"}},
            "roleExecutions": [execution()]
        });
        assert!(canonical_execution(&Manifest::new(&doc)).is_ok());
        let mut two = doc.clone();
        two["roleExecutions"] = json!([execution(), execution()]);
        assert!(canonical_execution(&Manifest::new(&two))
            .unwrap_err()
            .contains("2 translator"));
        let mut pane = doc.clone();
        pane["invocationAssignments"]["translator"]["runner"] = json!("pane");
        assert!(canonical_execution(&Manifest::new(&pane)).is_err());
        let mut other_model = doc.clone();
        other_model["invocationAssignments"]["translator"]["modelExecutionValue"] = json!("n");
        assert!(canonical_execution(&Manifest::new(&other_model)).is_err());
    }
}
