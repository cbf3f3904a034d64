//! Snapshots of what people read: the plan review summary and rendered
//! errors. Paths of the temp project and digests (which cover the project
//! root) are filtered out.

use crate::common::*;

fn settings(p: &Project) -> insta::Settings {
    let mut s = insta::Settings::clone_current();
    for (from, to) in review_filters(p) {
        s.add_filter(&from, to);
    }
    s.set_prepend_module_to_snapshot(false);
    s
}

#[test]
fn show_renders_the_review_summary() {
    let p = v2_project();
    let run = p.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let show = p.okstra(&["show", "plan.json"]);
    assert_eq!(show.code, 0);
    // `plan` prints exactly what `show` prints.
    assert_eq!(run.stdout, show.stdout);
    settings(&p).bind(|| insta::assert_snapshot!("show_v2_pipeline", show.stdout));
}

#[test]
fn errors_render_like_rustc() {
    let p = v2_project();
    let text = p
        .read("spec.toml")
        .replacen(
            "attempt = 1\nrole = \"implementer\"",
            "attempt = 0\nrole = \"implementer\"",
            1,
        )
        .replacen(
            "resultPath = \"results/ver.md\"",
            "resultPath = \"results/ver.md\"\nresultPth = \"x\"",
            1,
        )
        .replacen(
            "promptPath = \"prompts/ver.md\"",
            "promptPath = \"prompts/missing.md\"",
            1,
        );
    p.write("spec.toml", &text);
    let run = p.okstra(&[
        "plan",
        "spec.toml",
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
    ]);
    assert_eq!(run.code, 2);
    assert!(run.stdout.is_empty());
    settings(&p).bind(|| insta::assert_snapshot!("errors_text", run.stderr));
}

#[test]
fn exec_refusal_renders_each_stale_input() {
    let p = v2_project();
    assert_eq!(
        p.okstra(&[
            "plan",
            "spec.toml",
            "--manifest",
            "run/run-manifest.json",
            "--out",
            "plan.json"
        ])
        .code,
        0
    );
    p.write("prompts/impl.md", "# changed\n");
    std::fs::remove_file(p.path("prompts/ver.md")).unwrap();
    let run = p.okstra(&["exec", "plan.json"]);
    assert_eq!(run.code, 3);
    assert!(
        !p.exists("run/team-state.json"),
        "a refused exec writes nothing"
    );
    settings(&p).bind(|| insta::assert_snapshot!("exec_stale", run.stderr));
}

#[test]
fn same_inputs_give_the_same_plan_apart_from_created_at() {
    let p = v2_project();
    let plan = |epoch: &str, out: &str| {
        let run = assert_cmd::Command::cargo_bin("okstra")
            .unwrap()
            .current_dir(p.root())
            .env("SOURCE_DATE_EPOCH", epoch)
            .args([
                "plan",
                "spec.toml",
                "--manifest",
                "run/run-manifest.json",
                "--out",
                out,
            ])
            .output()
            .unwrap();
        assert!(run.status.success());
        p.read(out)
    };
    let a = plan("1764460800", "a.json");
    let b = plan("1764460800", "b.json");
    assert_eq!(a, b, "same inputs and time: byte-identical plans");
    let c = plan("1764547200", "c.json");
    let strip = |text: &str| {
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        let m = v.as_object_mut().unwrap();
        m.remove("createdAt");
        m.remove("digest");
        v
    };
    assert_ne!(a, c);
    assert_eq!(strip(&a), strip(&c));
}

#[test]
fn schema_prints_the_files_byte_for_byte() {
    let p = Project::new();
    for (name, file) in [
        ("jobs", "jobs.schema.json"),
        ("manifest", "manifest.schema.json"),
        ("metadata", "metadata.schema.json"),
        ("plan", "plan.schema.json"),
        ("team-state", "team-state.schema.json"),
    ] {
        let run = p.okstra(&["schema", name]);
        assert_eq!(run.code, 0);
        let on_disk = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("schemas")
                .join(file),
        )
        .unwrap();
        assert_eq!(run.stdout, on_disk, "{name}");
    }
}
