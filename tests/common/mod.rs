//! A fixture project in a temp dir and a runner for the real binary.
#![allow(dead_code)]

use assert_cmd::Command;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

mod fx;
mod git;
mod tries;
pub use fx::*;
pub use git::*;
#[allow(unused_imports)] // the real-CLI suite tries nothing
pub use tries::*;

pub struct Project {
    pub dir: tempfile::TempDir,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
    /// The first error of a `--format json` error document with `code`.
    pub fn error(&self, code: &str) -> Value {
        self.json()["errors"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["code"] == code).cloned())
            .unwrap_or_else(|| panic!("no {code} error in:\n{}", self.stdout))
    }

    /// The codes of a `--format json` error document.
    pub fn codes(&self) -> Vec<String> {
        self.json()["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| e["code"].as_str().unwrap_or("").to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Project {
    pub fn new() -> Self {
        Project {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, text: &str) -> &Self {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    pub fn write_json(&self, rel: &str, v: &Value) -> &Self {
        self.write(rel, &serde_json::to_string_pretty(v).unwrap())
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    pub fn read_json(&self, rel: &str) -> Value {
        serde_json::from_str(&self.read(rel)).unwrap()
    }

    /// The 1-based number of the first line of `rel` that satisfies `pred`.
    pub fn line_of(&self, rel: &str, pred: impl Fn(&str) -> bool) -> usize {
        self.read(rel)
            .lines()
            .position(pred)
            .unwrap_or_else(|| panic!("no such line in {rel}"))
            + 1
    }

    /// The run's team-state (the fixtures keep it in `run/`).
    pub fn team(&self) -> Value {
        self.read_json("run/team-state.json")
    }

    /// The run's lead events.
    pub fn run_events(&self) -> Vec<Value> {
        self.events("run/lead-events.jsonl")
    }

    /// Events of one type for one worker.
    pub fn events_of(&self, ty: &str, key: &str) -> Vec<Value> {
        self.run_events()
            .into_iter()
            .filter(|e| e["type"] == ty && e["workerKey"] == key)
            .collect()
    }

    /// The run's error-log records (none before the first).
    pub fn run_errors(&self) -> Vec<Value> {
        if !self.exists("run/errors.jsonl") {
            return Vec::new();
        }
        self.events("run/errors.jsonl")
    }

    /// Worker `key`'s `workers[]` row.
    pub fn worker_row(&self, key: &str) -> Value {
        let team = self.team();
        team["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["workerId"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no workers[] row for {key}: {team}"))
    }

    /// Worker `key`'s `workerDispatches[]` rows, in order.
    pub fn dispatch_rows(&self, key: &str) -> Vec<Value> {
        self.team()["workerDispatches"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["workerKey"] == key)
            .cloned()
            .collect()
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// Run okstra in the project root.
    pub fn okstra(&self, args: &[&str]) -> Run {
        let out = Command::cargo_bin("okstra")
            .unwrap()
            .current_dir(self.root())
            .env("SOURCE_DATE_EPOCH", "1764460800")
            .env("OKSTRA_STOP_GRACE_SECONDS", "1")
            .args(args)
            .output()
            .unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    pub fn events(&self, rel: &str) -> Vec<Value> {
        self.read(rel)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// The README's demo (`specs/demo`) copied into `to`, without what running
/// it leaves behind (what `specs/demo/.gitignore` names): whoever ran the
/// demo in place gets the fixture a fresh clone has.
pub fn copy_demo(to: &Path) {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/demo");
    // The ignore file's lines, each anchored at the demo (`/out/`, `/prompts/*.log`).
    let mut left = globset::GlobSetBuilder::new();
    for line in std::fs::read_to_string(demo.join(".gitignore"))
        .unwrap()
        .lines()
    {
        let pattern = line.trim().trim_start_matches('/').trim_end_matches('/');
        if !pattern.is_empty() && !pattern.starts_with('#') {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .unwrap();
            left.add(glob);
        }
    }
    let left = left.build().unwrap();
    fn copy(from: &Path, to: &Path, rel: &Path, left: &globset::GlobSet) {
        std::fs::create_dir_all(to.join(rel)).unwrap();
        for entry in std::fs::read_dir(from.join(rel)).unwrap().flatten() {
            let inner = rel.join(entry.file_name());
            if left.is_match(&inner) {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                copy(from, to, &inner, left);
            } else {
                std::fs::copy(entry.path(), to.join(&inner)).unwrap();
            }
        }
    }
    copy(&demo, to, Path::new(""), &left);
}

/// A job spec's `env` line for fixture workers that report to the test
/// through `scratch`, a directory outside the project (never seen by the
/// mutation audit): `SCRATCH` names it, and the debug build's test seam
/// lets a worker confined by the default `confinement = "auto"` write it.
pub fn scratch_env(scratch: &Path) -> String {
    format!(
        "env = {{ SCRATCH = \"{0}\", {1} = \"{0}\" }}",
        scratch.display(),
        okstra::confine::TEST_ALSO_WRITABLE_ENV
    )
}

/// The lines of a file that may not exist yet (a worker's run counter).
/// Every file below `dir` (symlinks as they are, not followed), by its
/// path under `dir`, with its bytes: a home or tree to compare before and
/// after a run.
pub fn files_under(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                out.insert(rel, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    out
}

pub fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A `plan --format json` run that must be refused with `code` (exit 2)
/// and must not have written `plan.json`.
#[track_caller]
pub fn assert_refused(p: &Project, run: Run, code: &str) -> Run {
    assert_eq!(
        run.code, 2,
        "expected exit 2 for {code}; stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    assert!(
        run.codes().iter().any(|c| c == code),
        "expected {code}, got {:?}\n{}",
        run.codes(),
        run.stdout
    );
    assert!(!p.exists("plan.json"), "a refused plan writes no plan file");
    run
}

/// `sha256:<hex>` of canonical JSON, as okstra computes it.
pub fn digest(v: &Value) -> String {
    okstra::canonical::digest(v)
}

/// A v1 manifest with its team-state under run/.
pub fn v1_manifest() -> Value {
    json!({
        "taskKey": "fixture-task",
        "teamStatePath": "run/team-state.json",
        "terminalBackend": "cli-wrapper",
        "workflow": {"currentPhase": "implementation"},
        "recommendedWorkers": ["claude", "codex"]
    })
}

pub fn binding() -> Value {
    json!({"runner": "cli-wrapper", "resolvedExecutionValue": "model-a"})
}

pub fn model_entry() -> Value {
    json!({"provider": "claude", "modelId": "model-a", "versionKind": "pinned", "channelFamily": "model"})
}

fn role_execution(re: &str, participant: &str, label: &str, role: &str) -> Value {
    let model = model_entry();
    json!({
        "roleExecutionRef": re, "participantRef": participant, "executionLabel": label,
        "role": role, "provider": "command", "modelRef": "m1", "binding": binding(),
        "modelSpecDigest": digest(&json!({"binding": binding(), "model": model}))
    })
}

/// A v2 manifest with an implementer, a verifier and a translator execution.
pub fn v2_manifest() -> Value {
    json!({
        "taskKey": "fixture-task",
        "teamStatePath": "run/team-state.json",
        "schemaVersion": "2.0",
        "executionIdentityVersion": 2,
        "terminalBackend": "cli-wrapper",
        "workflow": {"currentPhase": "implementation"},
        "recommendedWorkers": ["claude", "codex"],
        "roleExecutions": [
            role_execution("re-impl", "p-impl", "impl-1", "implementer"),
            role_execution("re-ver", "p-ver", "ver-1", "verifier"),
            role_execution("re-tr", "p-tr", "tr-1", "translator")
        ],
        "participantAssignments": [{"participantRef": "p-impl"}, {"participantRef": "p-ver"}, {"participantRef": "p-tr"}],
        "models": {"m1": model_entry()}
    })
}

/// v2 invocation metadata for a prompt.
pub fn v2_metadata(
    prompt: &str,
    participant: &str,
    re: &str,
    label: &str,
    duty: &str,
    inv: &str,
    audience: &str,
) -> Value {
    json!({
        "schemaVersion": "2.0", "executionIdentityVersion": 2,
        "invocationId": inv, "invocationRef": inv, "audience": audience,
        "assignmentRef": format!("initial/{label}"), "dispatchKind": "initial",
        "participantRef": participant, "roleExecutionRef": re, "executionLabel": label,
        "dutyId": duty, "attempt": 1,
        "prompt": {"path": prompt},
        "digests": {"catalogDigest": "c", "assignmentDigest": "a", "dutyDigest": "d", "instructionDigest": "i", "promptDigest": "p"},
        "modelAssignment": {"modelExecutionValue": "model-a", "hostModelValue": null}
    })
}

/// A v2 project that plans cleanly: an implementer stage then a verifier
/// stage, `command` workers. Returns the project; the spec is `spec.toml`.
pub fn v2_project() -> Project {
    let p = Project::new();
    p.write_json("run/run-manifest.json", &v2_manifest());
    p.write("prompts/impl.md", "# implement\n");
    p.write("prompts/ver.md", "# verify\n");
    p.write_json(
        "prompts/impl.md.meta.json",
        &v2_metadata(
            "prompts/impl.md",
            "p-impl",
            "re-impl",
            "impl-1",
            "implementation-executor",
            "inv-impl",
            "implementation-executor",
        ),
    );
    p.write_json(
        "prompts/ver.md.meta.json",
        &v2_metadata(
            "prompts/ver.md",
            "p-ver",
            "re-ver",
            "ver-1",
            "implementation-verifier",
            "inv-ver",
            "implementation-verifier",
        ),
    );
    p.write("spec.toml", V2_SPEC);
    p
}

/// `okstra status` of a fixture's run, as JSON.
pub const STATUS_JSON: &[&str] = &[
    "status",
    "--manifest",
    "run/run-manifest.json",
    "--format",
    "json",
];

pub const V2_SPEC: &str = r#"#:schema ./jobs.schema.json
[defaults]
provider = "command"
schemaVersion = "2.0"
executionIdentityVersion = 2
modelExecutionValue = "model-a"

[[stages]]
name = "implement"

[[stages.workers]]
participantRef = "p-impl"
roleExecutionRef = "re-impl"
executionLabel = "impl-1"
dutyId = "implementation-executor"
invocationRef = "inv-impl"
assignmentRef = "initial/impl-1"
attempt = 1
role = "implementer"
promptPath = "prompts/impl.md"
resultPath = "results/impl.md"
command = ["sh", "-c", "mkdir -p results && echo done > results/impl.md"]

[[stages]]
name = "verify"

[[stages.workers]]
participantRef = "p-ver"
roleExecutionRef = "re-ver"
executionLabel = "ver-1"
dutyId = "implementation-verifier"
invocationRef = "inv-ver"
assignmentRef = "initial/ver-1"
attempt = 1
role = "verifier"
promptPath = "prompts/ver.md"
resultPath = "results/ver.md"
command = ["sh", "-c", "mkdir -p results && echo ok > results/ver.md"]
"#;

/// Plan `spec` against `run/run-manifest.json` with JSON output.
pub fn plan_json(p: &Project, spec: &str) -> Run {
    p.okstra(&[
        "plan",
        spec,
        "--manifest",
        "run/run-manifest.json",
        "--out",
        "plan.json",
        "--format",
        "json",
    ])
}

/// What a review snapshot leaves out: the project root, short and long
/// digests, and what this machine's kernel offers for confinement (the
/// review says it; it is not the plan's).
#[allow(dead_code)]
pub fn review_filters(p: &Project) -> Vec<(String, String)> {
    let root = p.root().canonicalize().unwrap().display().to_string();
    vec![
        (regex_escape(&root), "[ROOT]".into()),
        (r"\b[0-9a-f]{12}\b".into(), "[SHA12]".into()),
        (r"sha256:[0-9a-f]{64}".into(), "sha256:[DIGEST]".into()),
        (
            r"confinement this machine .*".into(),
            "confinement [THIS MACHINE]".into(),
        ),
        (
            r"(yes here \(landlock-abi\d\)|not here(: exec will refuse it)?)".into(),
            "[HERE]".into(),
        ),
        // A codex job confined here runs without its own sandbox.
        (
            r"\n      note      confined here, [^\n]*".into(),
            String::new(),
        ),
    ]
}

/// `s` as a regular expression matching itself.
#[allow(dead_code)]
pub fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '_' || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// What a test needs is missing (`why`). Where `.ci/run` requires it (the
/// environment variable `var` is set, e.g. `REQUIRE_LANDLOCK=1`), that is a
/// failure; elsewhere the test says it skipped, and the caller returns.
pub fn missing(var: &str, why: &str) {
    assert!(
        std::env::var_os(var).is_none_or(|v| v.is_empty()),
        "{var} is set, so this is required here: {why}"
    );
    eprintln!("skipped: {why}");
}

/// `program`'s path on PATH.
pub fn on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// The directory holding the agent CLI `program`: on PATH, or where
/// `scripts/install-agent-clis.sh` put it; `None` having said why (see
/// [`missing`]: required under `REQUIRE_AGENT_CLIS`).
pub fn agent_cli(program: &str) -> Option<PathBuf> {
    let installed =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("target/agent-clis/node_modules/.bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dir = std::env::split_paths(&path)
        .chain([installed])
        .find(|d| d.join(program).is_file());
    if dir.is_none() {
        missing(
            "REQUIRE_AGENT_CLIS",
            &format!("`{program}` is neither on PATH nor in target/agent-clis (run scripts/install-agent-clis.sh)"),
        );
    }
    dir
}

/// Whether this kernel confines (Landlock ABI 6 or newer); see [`missing`]:
/// required under `REQUIRE_LANDLOCK`.
pub fn landlock_here() -> bool {
    match okstra::confine::offer() {
        okstra::confine::Offer::Landlock { .. } => true,
        okstra::confine::Offer::Unavailable(why) => {
            missing("REQUIRE_LANDLOCK", &why);
            false
        }
    }
}

/// A run's exit code is `code`; the failure shows its output.
#[track_caller]
pub fn assert_code(run: &Run, code: i32) {
    assert_eq!(
        run.code, code,
        "exit code; stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

/// Poll `cond` every 10 ms until it holds or `secs` pass.
#[track_caller]
pub fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Wait for a spawned okstra to exit, at most `secs` (killed and a failure
/// past that); its exit code, or 128 + the signal that ended it.
pub fn wait_child(child: &mut std::process::Child, secs: u64) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            panic!("okstra did not exit within {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Send `sig` to process `pid` (gone already is no error).
pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}
