//! What the fuzz targets share: a scratch project on disk for the readers
//! that take a path, the checks `okstra validate` and `okstra plan` run on a
//! file, and rendering every diagnostic found, in text (plain and coloured)
//! and JSON, so that a panic anywhere from reading to rendering is found.

use okstra::compile::{self, Ctx, Loaded, Request};
use okstra::diag::{Diagnostic, Diagnostics};
use okstra::document::{self, Kind as DocumentKind};
use okstra::source::{Format, SourceFile};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A project made once per process: a v1 and a v2 manifest, prompts, and a
/// spec that uses them, for the targets that fuzz one file of a plan.
pub struct Project {
    root: PathBuf,
}

const V1_MANIFEST: &str = r#"{"taskKey": "fuzz", "teamStatePath": "run/team-state.json",
  "terminalBackend": "cli-wrapper", "workflow": {"currentPhase": "analysis"},
  "recommendedWorkers": ["a", "codex"]}"#;

const V2_MANIFEST: &str = r#"{"taskKey": "fuzz", "teamStatePath": "run/team-state.json",
  "schemaVersion": "2.0", "executionIdentityVersion": 2, "terminalBackend": "cli-wrapper",
  "roleExecutions": [{"roleExecutionRef": "re-b", "participantRef": "p-b", "executionLabel": "b",
    "role": "analyst", "provider": "command", "modelRef": "m1",
    "binding": {"runner": "cli-wrapper", "resolvedExecutionValue": "model-a"},
    "modelSpecDigest": "sha256:0000000000000000000000000000000000000000000000000000000000000000"}],
  "participantAssignments": [{"participantRef": "p-b"}],
  "models": {"m1": {"provider": "command", "modelId": "model-a", "versionKind": "pinned", "channelFamily": "model"}}}"#;

/// A spec naming both prompts: a v1 worker and a v2 one.
pub const FIXED_SPEC: &str = r#"[[workers]]
workerId = "a"
provider = "command"
role = "analyst"
promptPath = "prompts/a.md"
resultPath = "results/a.md"
command = ["true"]

[[workers]]
schemaVersion = "2.0"
executionIdentityVersion = 2
participantRef = "p-b"
roleExecutionRef = "re-b"
executionLabel = "b"
dutyId = "analysis"
invocationRef = "inv-b"
assignmentRef = "initial/b"
attempt = 1
provider = "command"
role = "analyst"
promptPath = "prompts/b.md"
resultPath = "results/b.md"
command = ["true"]
"#;

pub fn project() -> &'static Project {
    static PROJECT: OnceLock<Project> = OnceLock::new();
    PROJECT.get_or_init(|| {
        let base = std::env::temp_dir().join("okstra-fuzz");
        clean_stale(&base);
        let root = base.join(std::process::id().to_string());
        let _ = std::fs::remove_dir_all(&root);
        let p = Project { root };
        p.write("run/run-manifest.json", V1_MANIFEST.as_bytes());
        p.write("run/v2-manifest.json", V2_MANIFEST.as_bytes());
        p.write("prompts/a.md", b"# a\n");
        p.write("prompts/b.md", b"# b\n");
        p.write("fixed.toml", FIXED_SPEC.as_bytes());
        p
    })
}

/// Removes the projects of fuzz processes that are gone (libFuzzer exits
/// without running destructors, so each process cannot clean up after itself).
fn clean_stale(base: &Path) {
    let Ok(dirs) = std::fs::read_dir(base) else {
        return;
    };
    for d in dirs.flatten() {
        let name = d.file_name();
        let alive = name
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
        if !alive {
            let _ = std::fs::remove_dir_all(d.path());
        }
    }
}

impl Project {
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Writes `bytes` at `rel`; the path written.
    pub fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = self.root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("create the fuzz project");
        }
        std::fs::write(&path, bytes).expect("write into the fuzz project");
        path
    }

    /// `okstra plan` (without writing the plan): the spec (relative to the
    /// root) or, without one, the manifest's roster. A compiled plan is
    /// rendered as `okstra plan` prints it.
    pub fn plan(&self, manifest: &str, spec: Option<&str>) {
        let request = Request {
            project_root: self.root.clone(),
            manifest: self.root.join(manifest),
            spec: spec.map(|s| self.root.join(s)),
            workers: Vec::new(),
            created_at: "2025-01-01T00:00:00Z".to_string(),
            records: &okstra::state::team_state::RUN_RECORDS,
            plan_out: None,
        };
        match compile::compile(&request) {
            Ok(plan) => {
                let _ = okstra::render::summary(&plan, "plan.json");
            }
            Err(diags) => render(&diags),
        }
    }
}

/// `okstra validate --kind KIND` on one file's bytes: read, check, render.
pub fn validate(name: &str, data: &[u8], kind: DocumentKind) {
    let format = Format::for_path(Path::new(name));
    match SourceFile::from_bytes(name, data.to_vec(), format) {
        Ok((doc, src)) => {
            let mut ctx = Ctx::new(okstra::paths::canonical_root(project().root()));
            let mut loaded = Loaded { doc, src };
            let path = project().write(name, data);
            document::check(&mut ctx, &mut loaded, kind, &path);
            render(&ctx.diags);
        }
        Err(d) => render(&Diagnostics::from(d)),
    }
}

/// Renders every diagnostic every way okstra does, and checks what must
/// hold of any rendering.
pub fn render(diags: &Diagnostics) {
    for d in diags.iter() {
        render_one(d);
    }
    let plain = diags.render_text();
    assert!(!plain.contains('\x1b'), "escape in plain text:\n{plain:?}");
    let styled = diags.render_styled(true);
    assert_eq!(strip_ansi(&styled), plain, "colour changed the text");
    let mut json = Vec::new();
    diags.write_json(&mut json).expect("write to a Vec");
    let reread: serde_json::Value = serde_json::from_slice(&json).expect("the JSON report parses");
    assert_eq!(reread, diags.to_json());
}

fn render_one(d: &Diagnostic) {
    let text = d.render_text();
    assert!(
        text.starts_with(&format!("error[{}]", d.code.as_str())),
        "{text}"
    );
    if let Some(loc) = &d.location {
        assert!(loc.line().is_none_or(|l| l >= 1));
        assert!(loc.column().is_none_or(|c| c >= 1));
    }
    let _ = d.render_styled(true);
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
