//! The plan digest is RFC 8785 (JCS) canonical JSON, so anyone can recompute
//! it: here two independent implementations do, on a plan the real binary
//! made (a Rust crate, and the Python recipe of docs/plan-format.md with
//! the `rfc8785` package, skipped, saying so, when that is not installed,
//! unless REQUIRE_RFC8785 is set: CI installs it and sets it); and exec and
//! validate judge a plan's format before its digest, and refuse integers
//! canonical JSON cannot keep exact.

use crate::common::*;
use serde_json::{json, Value};

fn jcs_digest(v: &Value) -> String {
    let text = serde_json_canonicalizer::to_vec(v).expect("canonical JSON");
    format!("sha256:{}", okstra::canonical::sha256_hex(&text))
}

/// The v2 fixture, its first worker given keys where UTF-8 and UTF-16
/// order part (U+FB33 against the surrogate pair of U+1F600: in its
/// metadata's digests, which the plan carries as a map), escapes and
/// non-ASCII text (an env value; env names are plain ASCII).
fn project() -> Project {
    let p = v2_project();
    let spec = p.read("spec.toml").replacen(
        "role = \"implementer\"",
        "role = \"implementer\"\nenv = { \"A\" = \"tab\\there \\u0001 </script> \u{e9} \u{20ac}\" }",
        1,
    );
    p.write("spec.toml", &spec);
    let mut meta = p.read_json("prompts/impl.md.meta.json");
    let digests = meta["digests"].as_object_mut().unwrap();
    for (k, v) in [
        ("\u{fb33}", "dalet"),
        ("\u{1f600}", "grin"),
        ("\u{20ac}", "euro"),
    ] {
        digests.insert(k.into(), json!(v));
    }
    p.write_json("prompts/impl.md.meta.json", &meta);
    p
}

#[test]
fn a_real_plans_digest_is_recomputed_by_another_jcs_implementation() {
    let p = project();
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let mut plan = p.read_json("plan.json");
    assert_eq!(plan["formatVersion"], okstra::plan::FORMAT_VERSION);
    let env = plan["stages"][0]["jobs"][0]["invocation"]["digests"].clone();
    assert_eq!(env["\u{1f600}"], "grin", "the fixture reached the plan");
    let recorded = plan["digest"].as_str().expect("a digest").to_string();
    plan.as_object_mut().unwrap().remove("digest");
    assert_eq!(jcs_digest(&plan), recorded);
    // The astral key sorts before U+FB33 as JCS wants, unlike UTF-8 order.
    let text = String::from_utf8(serde_json_canonicalizer::to_vec(&env).unwrap()).unwrap();
    assert!(text.find('\u{1f600}') < text.find('\u{fb33}'), "{text}");

    // modelSpecDigest, the other canonical digest, by the same rule.
    let manifest = p.read_json("run/run-manifest.json");
    let re = &manifest["roleExecutions"][0];
    let model = &manifest["models"][re["modelRef"].as_str().unwrap()];
    assert_eq!(
        jcs_digest(&json!({"binding": re["binding"], "model": model})),
        re["modelSpecDigest"].as_str().unwrap()
    );
}

/// The Python recipe of docs/plan-format.md, run as written on a real plan.
#[test]
fn the_documented_recipe_recomputes_a_real_plans_digest_in_python() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/plan-format.md"))
        .unwrap();
    let section = &doc[doc
        .find("\n## Canonical JSON\n")
        .expect("the section of docs/plan-format.md")..];
    let start = section.find("```python\n").expect("a Python recipe") + "```python\n".len();
    let recipe = &section[start..start + section[start..].find("```").unwrap()];
    let found = std::process::Command::new("python3")
        .args(["-c", "import rfc8785"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        missing(
            "REQUIRE_RFC8785",
            "python3 -c 'import rfc8785' failed (pip install rfc8785)",
        );
        return;
    }
    let p = project();
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let out = std::process::Command::new("python3")
        .args(["-c", recipe])
        .current_dir(p.root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the recipe failed:\n{recipe}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Near miss: an edited plan fails the same recipe.
    let mut plan = p.read_json("plan.json");
    plan["stages"][0]["name"] = json!("edited");
    p.write_json("plan.json", &plan);
    let out = std::process::Command::new("python3")
        .args(["-c", recipe])
        .current_dir(p.root())
        .output()
        .unwrap();
    assert!(!out.status.success(), "an edited plan passed the recipe");
}

fn planned() -> Project {
    let p = v2_project();
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    p
}

fn reseal(plan: &mut Value) {
    plan.as_object_mut().unwrap().remove("digest");
    plan["digest"] = json!(jcs_digest(plan));
}

#[test]
fn a_plan_of_format_1_is_refused_for_its_version_not_its_digest() {
    let p = planned();
    // A format-1 plan digested its canonical form another way, so its digest
    // would not match either: the version is what to report.
    let mut plan = p.read_json("plan.json");
    plan["formatVersion"] = json!(1);
    p.write_json("plan.json", &plan);
    for args in [
        &["exec", "plan.json", "--format", "json"][..],
        &[
            "validate",
            "--kind",
            "plan",
            "plan.json",
            "--format",
            "json",
        ][..],
    ] {
        let run = p.okstra(args);
        assert_eq!(run.codes(), ["plan/version"], "{args:?}: {}", run.stdout);
        assert_eq!(run.code, 3, "{args:?}");
    }
    // Near miss: the plan as written validates.
    let p = planned();
    let run = p.okstra(&[
        "validate",
        "--kind",
        "plan",
        "plan.json",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn a_plan_holding_an_integer_canonical_json_cannot_keep_is_refused() {
    let p = planned();
    // 2^53 + 1 reads as the double 2^53, so a digest over it cannot tell
    // it from 2^53: refused whatever the digest says.
    let mut plan = p.read_json("plan.json");
    plan["stages"][0]["jobs"][0]["idleTimeoutSeconds"] = json!(9_007_199_254_740_993_u64);
    reseal(&mut plan);
    p.write_json("plan.json", &plan);
    let run = p.okstra(&["exec", "plan.json", "--format", "json"]);
    assert_eq!(run.codes(), ["plan/digest-mismatch"], "{}", run.stdout);
    let message = run.error("plan/digest-mismatch")["message"].to_string();
    assert!(
        message.contains("/stages/0/jobs/0/idleTimeoutSeconds"),
        "{message}"
    );
    assert!(
        !p.exists("run/team-state.json"),
        "a refused exec writes nothing"
    );

    // Near miss: the largest integer that stays exact, re-sealed, passes the
    // digest check (and then runs, since nothing else changed).
    let p = planned();
    let mut plan = p.read_json("plan.json");
    plan["stages"][0]["jobs"][0]["idleTimeoutSeconds"] =
        json!(okstra::canonical::MAX_EXACT_INTEGER);
    reseal(&mut plan);
    p.write_json("plan.json", &plan);
    let run = p.okstra(&[
        "validate",
        "--kind",
        "plan",
        "plan.json",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}

#[test]
fn a_spec_integer_beyond_what_canonical_json_keeps_is_refused_at_its_source() {
    let p = v2_project();
    let spec = p.read("spec.toml");
    let with = |n: u64| {
        spec.replacen(
            "attempt = 1\nrole = \"implementer\"",
            &format!("attempt = 1\nidleTimeoutSeconds = {n}\nrole = \"implementer\""),
            1,
        )
    };
    p.write("spec.toml", &with(okstra::canonical::MAX_EXACT_INTEGER + 1));
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 2, "{}", run.stdout);
    let e = &run.json()["errors"][0];
    assert!(e["code"].as_str().unwrap().starts_with("schema/"), "{e}");
    assert_eq!(e["pointer"], "/stages/0/workers/0/idleTimeoutSeconds");
    assert!(!p.exists("plan.json"));
    // Near miss: the largest exact integer plans, and survives in the plan.
    p.write("spec.toml", &with(okstra::canonical::MAX_EXACT_INTEGER));
    let run = plan_json(&p, "spec.toml");
    assert_eq!(run.code, 0, "{}", run.stdout);
    let plan = p.read_json("plan.json");
    assert_eq!(
        plan["stages"][0]["jobs"][0]["idleTimeoutSeconds"],
        okstra::canonical::MAX_EXACT_INTEGER
    );
    let run = p.okstra(&[
        "validate",
        "--kind",
        "plan",
        "plan.json",
        "--format",
        "json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stdout);
}
