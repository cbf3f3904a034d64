//! The schemas serve editors: an independent draft-07 validator
//! (check-jsonschema, which reads TOML and JSON instances as editors'
//! tooling does) accepts the example specs and flags a typo. Skipped, saying
//! so, when the tool is not installed, unless REQUIRE_CHECK_JSONSCHEMA is
//! set (CI installs it and sets it).

use std::path::Path;
use std::process::Command;

fn tool() -> Option<&'static str> {
    let found = Command::new("check-jsonschema")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Some("check-jsonschema");
    }
    assert!(
        std::env::var_os("REQUIRE_CHECK_JSONSCHEMA").is_none(),
        "check-jsonschema is required here (REQUIRE_CHECK_JSONSCHEMA is set) but not on PATH"
    );
    eprintln!("skipped: check-jsonschema is not on PATH (pip install check-jsonschema)");
    None
}

fn check(schema: &Path, file: &Path) -> (bool, String) {
    let out = Command::new("check-jsonschema")
        .arg("--schemafile")
        .arg(schema)
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn an_independent_validator_accepts_the_examples_and_flags_a_typo() {
    if tool().is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let schema = root.join("schemas/jobs.schema.json");
    let mut specs = vec![root.join("specs/demo/pipeline.toml")];
    for e in std::fs::read_dir(root.join("specs/examples")).unwrap() {
        specs.push(e.unwrap().path());
    }
    for spec in &specs {
        let (ok, out) = check(&schema, spec);
        assert!(ok, "{}: {out}", spec.display());
    }
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(&specs[0]).unwrap().replace(
        "idleTimeoutSeconds = 60",
        "idleTimeoutSeconds = 60\ncolour = 1",
    );
    std::fs::write(&bad, text).unwrap();
    let (ok, out) = check(&schema, &bad);
    assert!(!ok, "a typo must be flagged: {out}");
    assert!(out.contains("colour"), "{out}");
}

#[test]
fn an_independent_validator_accepts_a_plan_okstra_wrote() {
    if tool().is_none() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.json");
    let out = assert_cmd::Command::cargo_bin("okstra")
        .unwrap()
        .current_dir(root.join("specs/demo"))
        .args([
            "plan",
            "pipeline.toml",
            "--manifest",
            "run-manifest.json",
            "--out",
        ])
        .arg(&plan)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (ok, text) = check(&root.join("schemas/plan.schema.json"), &plan);
    assert!(ok, "{text}");
}
