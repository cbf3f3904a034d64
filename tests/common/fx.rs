//! The one fixture of the suites that run okstra on a project, built
//! fluently in the manner of `just`'s test builder: say what the project
//! holds (a manifest, a spec of stages of workers), then run okstra in it
//! and read what it left.
//!
//! ```ignore
//! let fx = Fx::new();
//! fx.v1()
//!     .commands()
//!     .defaults("confinement = \"none\"")
//!     .stage("one", [job("a", WRITE)])
//!     .stage("two", [job("b", WRITE)])
//!     .plan();
//! let run = fx.exec(&["--format", "json"]);
//! assert_eq!(fx.worker_row("a")["status"], "completed");
//! ```
//!
//! Every method takes `&self`, so a test can add to the fixture between
//! two runs as well as before the first (a fake CLI that now answers, one
//! more variable for okstra). Beside the project, outside it and so never
//! seen by the mutation audit, the fixture keeps `scratch/` (where workers
//! report to the test), `home/` and `bin/` (a fake HOME, fake CLIs), and
//! whatever other directory a suite names.

use super::{lines_of, v1_manifest, Project, Run};
use serde_json::Value;
use std::cell::{Cell, RefCell};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One worker of a stage: a `command` job running `sh -c` on the spec's
/// prelude and its script, or a worker entry written as it is.
pub struct Job {
    id: String,
    script: String,
    /// More TOML lines for the worker's table (role, plannedPaths, ...).
    extra: String,
    result: String,
    prompt: String,
    /// The whole entry, when it is not a `sh -c` command job.
    entry: Option<String>,
}

/// A `command` job `id` running `script` (after the spec's prelude), its
/// prompt `prompts/<id>.md`, its result `results/<id>.md`.
pub fn job(id: &str, script: impl Into<String>) -> Job {
    Job {
        id: id.to_string(),
        script: script.into(),
        extra: String::new(),
        result: format!("results/{id}.md"),
        prompt: "# work\n".to_string(),
        entry: None,
    }
}

impl Job {
    /// A worker entry (`[[stages.workers]]` and its lines) written as it
    /// is; its prompt `prompts/<id>.md` is still written.
    pub fn entry(id: &str, toml: impl Into<String>) -> Job {
        Job {
            entry: Some(toml.into()),
            ..job(id, "")
        }
    }

    /// One more TOML line for the worker's table.
    pub fn with(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self.extra.push('\n');
        self
    }

    /// An implementer allowed to write `planned`.
    pub fn implementer(self, planned: &[&str]) -> Self {
        let list: Vec<String> = planned.iter().map(|p| format!("\"{p}\"")).collect();
        self.with("role = \"implementer\"")
            .with(&format!("plannedPaths = [{}]", list.join(", ")))
    }

    /// The result at `path` instead of `results/<id>.md`.
    pub fn result(mut self, path: &str) -> Self {
        self.result = path.to_string();
        self
    }

    /// The prompt's text instead of `# work`.
    pub fn prompt(mut self, text: &str) -> Self {
        self.prompt = text.to_string();
        self
    }

    fn toml(&self, prelude: &str) -> String {
        match &self.entry {
            Some(entry) => entry.clone(),
            None => format!(
                "[[stages.workers]]\nworkerId = \"{id}\"\npromptPath = \"prompts/{id}.md\"\nresultPath = \"{result}\"\ncommand = [\"sh\", \"-c\", '''\n{prelude}{script}''']\n{extra}\n",
                id = self.id,
                result = self.result,
                script = self.script,
                extra = self.extra
            ),
        }
    }
}

/// What `spec.toml` is made of.
#[derive(Default)]
struct Spec {
    defaults: Vec<String>,
    /// The `[defaults]` `env` table, in order.
    env: Vec<(String, String)>,
    /// What every `command` job's script starts with.
    prelude: String,
    stages: Vec<(String, Vec<Job>)>,
    /// Top-level tables written after the stages (`[budget]`).
    tail: String,
}

impl Spec {
    fn render(&self) -> String {
        let mut out = String::from("[defaults]\n");
        for line in &self.defaults {
            out.push_str(line);
            out.push('\n');
        }
        if !self.env.is_empty() {
            let entries: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{k} = \"{v}\""))
                .collect();
            out.push_str(&format!("env = {{ {} }}\n", entries.join(", ")));
        }
        out.push('\n');
        for (name, jobs) in &self.stages {
            out.push_str(&format!("[[stages]]\nname = \"{name}\"\n\n"));
            for j in jobs {
                out.push_str(&j.toml(&self.prelude));
            }
        }
        out.push_str(&self.tail);
        out
    }
}

/// A project in a temp dir, directories beside it, the spec it is given and
/// the environment okstra runs in.
pub struct Fx {
    pub p: Project,
    /// Holds `scratch/`, `home/`, `bin/` and the suite's own directories.
    _outside: tempfile::TempDir,
    /// `_outside`'s path, canonical (what a worker sees as its path).
    outside: PathBuf,
    spec: RefCell<Spec>,
    /// Variables set (`Some`) or removed (`None`) for every okstra run.
    env: RefCell<Vec<(OsString, Option<OsString>)>>,
    /// Whether okstra runs in an environment of only those variables.
    clean: Cell<bool>,
}

impl Default for Fx {
    fn default() -> Self {
        Fx::new()
    }
}

impl Fx {
    /// An empty project, and empty `scratch/`, `home/` and `bin/` beside it.
    pub fn new() -> Fx {
        let outside = tempfile::tempdir().expect("a temp dir beside the project");
        let path = outside.path().canonicalize().unwrap();
        for d in ["scratch", "home", "bin"] {
            std::fs::create_dir(path.join(d)).unwrap();
        }
        Fx {
            p: Project::new(),
            _outside: outside,
            outside: path,
            spec: RefCell::default(),
            env: RefCell::default(),
            clean: Cell::new(false),
        }
    }

    // --- the project ---------------------------------------------------

    /// `run/run-manifest.json` (the team-state then goes to `run/`).
    pub fn manifest(&self, manifest: &Value) -> &Self {
        self.p.write_json("run/run-manifest.json", manifest);
        self
    }

    /// The plain v1 manifest, [`v1_manifest`].
    pub fn v1(&self) -> &Self {
        self.manifest(&v1_manifest())
    }

    /// A directory of the project, made before any run.
    pub fn mkdir(&self, rel: &str) -> &Self {
        std::fs::create_dir_all(self.p.path(rel)).unwrap();
        self
    }

    // --- the spec (`spec.toml`, rewritten on every change) ---------------

    /// One more line of `[defaults]`.
    pub fn defaults(&self, line: &str) -> &Self {
        self.spec.borrow_mut().defaults.push(line.to_string());
        self.respec()
    }

    /// `command` workers of role `analyst` by default.
    pub fn commands(&self) -> &Self {
        self.defaults("provider = \"command\"")
            .defaults("role = \"analyst\"")
    }

    /// A variable in every worker's environment (`[defaults]` `env`).
    pub fn worker_env(&self, name: &str, value: impl AsRef<Path>) -> &Self {
        let value = value.as_ref().display().to_string();
        self.spec.borrow_mut().env.push((name.to_string(), value));
        self.respec()
    }

    /// Workers may report through `scratch/`: `SCRATCH` names it, and a
    /// debug build lets a confined worker write it (see `scratch_env`).
    pub fn scratch_env(&self) -> &Self {
        let scratch = self.scratch_dir();
        self.worker_env("SCRATCH", &scratch)
            .worker_env(okstra::confine::TEST_ALSO_WRITABLE_ENV, &scratch)
    }

    /// A top-level table of the spec (`[budget]` and its lines), written
    /// after the stages.
    pub fn table(&self, toml: &str) -> &Self {
        self.spec.borrow_mut().tail.push_str(&format!("\n{toml}\n"));
        self.respec()
    }

    /// What every `command` job's script starts with.
    pub fn prelude(&self, prelude: &str) -> &Self {
        self.spec.borrow_mut().prelude = prelude.to_string();
        self.respec()
    }

    /// One more stage of `jobs`, their prompts written.
    pub fn stage(&self, name: &str, jobs: impl IntoIterator<Item = Job>) -> &Self {
        let jobs: Vec<Job> = jobs.into_iter().collect();
        for j in &jobs {
            self.p.write(&format!("prompts/{}.md", j.id), &j.prompt);
        }
        self.spec.borrow_mut().stages.push((name.to_string(), jobs));
        self.respec()
    }

    /// Stages as `(name, jobs)` pairs.
    pub fn stages<'a>(&self, stages: impl IntoIterator<Item = (&'a str, Vec<Job>)>) -> &Self {
        for (name, jobs) in stages {
            self.stage(name, jobs);
        }
        self
    }

    /// `spec.toml` as the fixture now says, once it has a stage.
    fn respec(&self) -> &Self {
        let spec = self.spec.borrow();
        if !spec.stages.is_empty() {
            self.p.write("spec.toml", &spec.render());
        }
        self
    }

    // --- beside the project ----------------------------------------------

    /// The project's root as okstra names it (canonical).
    pub fn root(&self) -> PathBuf {
        self.p.root().canonicalize().unwrap()
    }

    /// A directory beside the project (made if new).
    pub fn outside(&self, name: &str) -> PathBuf {
        let dir = self.outside.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Where workers report to the test.
    pub fn scratch_dir(&self) -> PathBuf {
        self.outside.join("scratch")
    }

    /// File `name` in `scratch/`.
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.scratch_dir().join(name)
    }

    /// A fake HOME.
    pub fn home(&self) -> PathBuf {
        self.outside.join("home")
    }

    /// A file under the fake HOME.
    pub fn home_file(&self, rel: &str, text: &str) -> &Self {
        let path = self.home().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        self
    }

    /// Where fake programs go (see [`Fx::bin_then`]).
    pub fn bin(&self) -> PathBuf {
        self.outside.join("bin")
    }

    /// An executable `name` in `bin/`, replacing any before it.
    pub fn bin_script(&self, name: &str, text: &str) -> &Self {
        use std::os::unix::fs::PermissionsExt;
        let path = self.bin().join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        self
    }

    // --- okstra's environment -------------------------------------------

    /// `name=value` for every okstra run.
    pub fn run_env(&self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &Self {
        let name = name.as_ref().to_os_string();
        let mut env = self.env.borrow_mut();
        env.retain(|(k, _)| *k != name);
        env.push((name, Some(value.as_ref().to_os_string())));
        self
    }

    /// `name` unset for every okstra run.
    pub fn run_env_remove(&self, name: &str) -> &Self {
        let name = OsString::from(name);
        let mut env = self.env.borrow_mut();
        env.retain(|(k, _)| *k != name);
        env.push((name, None));
        self
    }

    /// What [`Fx::run_env`] set `name` to.
    pub fn run_env_of(&self, name: &str) -> Option<OsString> {
        self.env
            .borrow()
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.clone())
    }

    /// okstra runs with only the variables [`Fx::run_env`] set (else with
    /// the test's environment, `SOURCE_DATE_EPOCH` fixed and a 1 s stop
    /// grace).
    pub fn clean_env(&self) -> &Self {
        self.clean.set(true);
        self
    }

    /// `PATH` for okstra: `bin/`, then `rest`.
    pub fn bin_then(&self, rest: impl AsRef<OsStr>) -> &Self {
        let mut path = self.bin().into_os_string();
        path.push(":");
        path.push(rest);
        self.run_env("PATH", path)
    }

    // --- running okstra --------------------------------------------------

    /// `okstra ARGS` in the project, in the fixture's environment, not yet
    /// started.
    pub fn command(&self, args: &[&str]) -> Command {
        self.command_via(&[], args)
    }

    /// [`Fx::command`] run by `wrapper` (e.g. `setpriv ... --`).
    pub fn command_via(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let okstra = env!("CARGO_BIN_EXE_okstra");
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(okstra);
                c
            }
            None => Command::new(okstra),
        };
        cmd.current_dir(self.p.root()).args(args);
        if self.clean.get() {
            cmd.env_clear();
        } else {
            cmd.env("SOURCE_DATE_EPOCH", "1764460800")
                .env("OKSTRA_STOP_GRACE_SECONDS", "1");
        }
        for (k, v) in self.env.borrow().iter() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        cmd
    }

    /// Run `okstra ARGS` to its end.
    pub fn okstra(&self, args: &[&str]) -> Run {
        run(self.command(args))
    }

    /// Plan `spec.toml`, which must plan cleanly.
    #[track_caller]
    pub fn plan(&self) -> &Self {
        let run = self.okstra(&[
            "plan",
            "spec.toml",
            "--manifest",
            "run/run-manifest.json",
            "--out",
            "plan.json",
            "--format",
            "json",
        ]);
        assert_eq!(
            run.code, 0,
            "the fixture must plan cleanly:\n{}\n{}",
            run.stdout, run.stderr
        );
        self
    }

    /// `okstra exec plan.json EXTRA...` to its end.
    pub fn exec(&self, extra: &[&str]) -> Run {
        let mut args = vec!["exec", "plan.json"];
        args.extend_from_slice(extra);
        self.okstra(&args)
    }

    /// `okstra ARGS` in the background, its output in `LOG.stdout` and
    /// `LOG.stderr` in `scratch/`.
    pub fn spawn(&self, args: &[&str], log: &str) -> Child {
        let out = std::fs::File::create(self.scratch(&format!("{log}.stdout"))).unwrap();
        let err = std::fs::File::create(self.scratch(&format!("{log}.stderr"))).unwrap();
        self.command(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap()
    }

    /// `okstra exec plan.json EXTRA...` in the background, its output in
    /// `exec.stdout` and `exec.stderr` in `scratch/`.
    pub fn spawn_exec(&self, extra: &[&str]) -> Child {
        let mut args = vec!["exec", "plan.json"];
        args.extend_from_slice(extra);
        self.spawn(&args, "exec")
    }

    // --- what a run left ---------------------------------------------------

    /// How many times job `id` ran, where its script counts its runs in
    /// `scratch/<id>.runs` (each run appends its attempt number).
    pub fn runs(&self, id: &str) -> Vec<String> {
        lines_of(&self.scratch(&format!("{id}.runs")))
    }

    /// The run's team-state.
    pub fn team(&self) -> Value {
        self.p.team()
    }

    /// The run's lead events.
    pub fn events(&self) -> Vec<Value> {
        self.p.run_events()
    }

    /// Events of one type for one worker.
    pub fn events_of(&self, ty: &str, key: &str) -> Vec<Value> {
        self.p.events_of(ty, key)
    }

    /// The run's error-log records.
    pub fn errors(&self) -> Vec<Value> {
        self.p.run_errors()
    }

    /// Worker `key`'s `workers[]` row.
    pub fn worker_row(&self, key: &str) -> Value {
        self.p.worker_row(key)
    }

    /// Worker `key`'s `workerDispatches[]` rows, in order.
    pub fn dispatch_rows(&self, key: &str) -> Vec<Value> {
        self.p.dispatch_rows(key)
    }

    /// Worker `key`'s settled reason ("" when none).
    pub fn reason(&self, key: &str) -> String {
        self.worker_row(key)["reason"]
            .as_str()
            .unwrap_or("")
            .to_string()
    }

    /// The attempt records of `key`, in attempt order.
    pub fn attempts(&self, key: &str) -> Vec<Value> {
        let mut rows: Vec<Value> = self.team()["attempts"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|a| a["key"] == key)
            .collect();
        rows.sort_by_key(|a| a["attempt"].as_u64());
        rows
    }
}

/// Run `cmd` to its end, its input empty.
pub fn run(mut cmd: Command) -> Run {
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
