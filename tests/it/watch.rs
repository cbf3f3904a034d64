//! `okstra watch` (docs/cli.md#okstra-watch): the terminal view driven in
//! a real tmux (send-keys, capture-pane) while a real exec runs a two-stage
//! plan, the plain table where there is no cursor control, and a snapshot
//! of that table for a run written out by hand.

use crate::common::*;
use std::path::Path;
use std::process::Command;

/// A tmux server on its own socket, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// A server whose one 80×24 window runs `command` in `dir`; `None`
    /// (having said so) where tmux is missing and not required.
    fn start(dir: &Path, command: &str) -> Option<Tmux> {
        if Command::new("tmux").arg("-V").output().is_err() {
            missing(
                "REQUIRE_TMUX",
                "SKIPPED: tmux is not installed (.ci/run installs it)",
            );
            return None;
        }
        let t = Tmux {
            socket: format!("okstra-watch-{}", uuid::Uuid::new_v4()),
        };
        let dir = dir.to_str().unwrap();
        let args = [
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "-c",
            dir,
            command,
        ];
        assert!(t.cmd(&args).status().unwrap().success(), "tmux new-session");
        Some(t)
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]).args(args).env_remove("TMUX");
        c
    }

    fn screen(&self) -> String {
        let out = self.cmd(&["capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &str) {
        assert!(self.cmd(&["send-keys", keys]).status().unwrap().success());
    }

    /// Wait until the screen satisfies `cond`; the screen then.
    #[track_caller]
    fn wait(&self, what: &str, cond: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            last = self.screen();
            if cond(&last) {
                return last;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}; the screen:\n{last}");
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]).status();
    }
}

/// The screen line of job `id`'s row.
fn row<'a>(screen: &'a str, id: &str) -> Option<&'a str> {
    screen.lines().find(|l| {
        let mut cells = l.split_whitespace();
        matches!((cells.next(), cells.next()), (Some("one" | "two"), Some(w)) if w == id)
    })
}

fn status_of<'a>(screen: &'a str, id: &str) -> Option<&'a str> {
    row(screen, id).and_then(|l| l.split_whitespace().nth(2))
}

/// Two stages of `command` workers that print a line, wait for the test's
/// gate, then print their last line.
fn two_stages() -> Fx {
    let fx = Fx::new();
    fx.mkdir("results");
    let script = |id: &str| {
        format!(
            "echo started-{id}\nwhile [ ! -f \"$SCRATCH/go\" ]; do sleep 0.05; done\necho last-line-{id}\necho done > results/{id}.md\n"
        )
    };
    fx.v1()
        .commands()
        .scratch_env()
        .stage("one", [job("a", script("a")), job("b", script("b"))])
        .stage("two", [job("c", script("c"))])
        .plan();
    fx
}

#[test]
fn watch_shows_a_live_exec_in_tmux_and_quits_with_q() {
    let fx = two_stages();
    let mut exec = fx.spawn_exec(&[]);
    wait_for("the dispatches", 30, || fx.p.exists("run/team-state.json"));
    let okstra = env!("CARGO_BIN_EXE_okstra");
    let exit = fx.scratch("watch.exit");
    let command = format!(
        "sh -c '{okstra} watch --manifest run/run-manifest.json; echo $? > {}; sleep 60'",
        exit.display()
    );
    let Some(tmux) = Tmux::start(&fx.root(), &command) else {
        std::fs::write(fx.scratch("go"), "").unwrap();
        wait_child(&mut exec, 60);
        return;
    };
    // A plain watcher beside it, as where TERM=dumb.
    let plain = fx
        .run_env("TERM", "dumb")
        .spawn(&["watch", "--manifest", "run/run-manifest.json"], "plain");
    let running = tmux.wait("a and b running", |s| {
        status_of(s, "a") == Some("running") && status_of(s, "b") == Some("running")
    });
    assert!(running.contains("exec running"), "{running}");
    assert!(
        row(&running, "c").is_none(),
        "stage two has not started:\n{running}"
    );
    std::fs::write(fx.scratch("go"), "").unwrap();
    assert_eq!(wait_child(&mut exec, 60), 0, "exec");
    let done = tmux.wait("every job completed, no exec", |s| {
        ["a", "b", "c"]
            .iter()
            .all(|id| status_of(s, id) == Some("completed"))
            && s.contains("no exec running")
    });
    assert!(row(&done, "a").unwrap().contains("last-line-a"), "{done}");
    assert!(done.contains("3 jobs: 3 completed"), "{done}");
    let total = done.lines().find(|l| l.starts_with("total")).unwrap();
    assert_eq!(
        total.split_whitespace().collect::<Vec<_>>(),
        ["total", "3", "3", "-", "-"],
        "{done}"
    );
    assert!(done.lines().count() <= 24 && done.lines().all(|l| l.chars().count() <= 80));
    // Follow the selected (first) job's log, and back.
    tmux.keys("Enter");
    let log = tmux.wait("a's log", |s| s.contains("log of a"));
    assert!(
        log.contains("started-a") && log.contains("last-line-a"),
        "{log}"
    );
    tmux.keys("Escape");
    tmux.wait("the table again", |s| row(s, "c").is_some());
    tmux.keys("q");
    wait_for("watch to exit", 10, || {
        std::fs::read_to_string(&exit).is_ok_and(|s| s.ends_with('\n'))
    });
    assert_eq!(std::fs::read_to_string(&exit).unwrap().trim(), "0");
    assert_plain_watch(&fx, plain);
}

/// The plain watcher printed a table while a and b ran and another once
/// every job completed, then exited 0 by itself.
fn assert_plain_watch(fx: &Fx, mut plain: std::process::Child) {
    assert_eq!(
        wait_child(&mut plain, 30),
        0,
        "the plain watch ends with the run"
    );
    let out = std::fs::read_to_string(fx.scratch("plain.stdout")).unwrap();
    assert!(!out.contains('\u{1b}'), "no cursor control:\n{out}");
    let tables: Vec<&str> = out.split("── ").filter(|t| !t.is_empty()).collect();
    assert!(tables.len() >= 2, "{out}");
    assert!(tables[0].contains("stage  worker  status"), "{out}");
    assert_eq!(status_of(tables[0], "a"), Some("running"), "{out}");
    let last = tables.last().unwrap();
    for id in ["a", "b", "c"] {
        assert_eq!(status_of(last, id), Some("completed"), "{out}");
    }
    assert!(last.contains("no exec running"), "{out}");
}

/// A finished run written by hand: two stages, a retry, usage with and
/// without cost, a job that never ran.
fn hand_written_run() -> Fx {
    let fx = Fx::new();
    fx.v1();
    let head = |ty: &str, key: &str, attempt: u64, ts: &str, stage: &str| {
        serde_json::json!({"type": ty, "ts": ts, "workerId": key, "attempt": attempt,
            "workerKey": key, "planDigest": "sha256:0123456789abcdef", "maxAttempts": 2,
            "dispatchMode": "cli-wrapper", "stage": stage})
    };
    let dispatched = |key: &str, attempt: u64, ts: &str, stage: &str| {
        let mut e = head("worker-dispatched", key, attempt, ts, stage);
        e["pid"] = 1.into();
        e["promptPath"] = format!("prompts/{key}.md").into();
        e["resultPath"] = format!("results/{key}.md").into();
        e
    };
    let settled =
        |ty: &str, key: &str, attempt: u64, ts: &str, stage: &str, usage: serde_json::Value| {
            let mut e = head(ty, key, attempt, ts, stage);
            e["status"] = if ty == "worker-failed" {
                "error"
            } else {
                "completed"
            }
            .into();
            e["reason"] = "".into();
            e["usage"] = usage;
            e
        };
    let usage = |i: u64, o: u64, cost: Option<f64>| {
        let mut u = serde_json::json!({"inputTokens": i, "outputTokens": o, "totalTokens": i + o, "tokensFrom": "cli-output"});
        if let Some(c) = cost {
            u["costUsd"] = c.into();
        }
        u
    };
    let events = [
        dispatched("a", 1, "2026-01-01T10:00:00Z", "build"),
        dispatched("b", 1, "2026-01-01T10:00:00Z", "build"),
        settled(
            "worker-failed",
            "a",
            1,
            "2026-01-01T10:00:30Z",
            "build",
            usage(1000, 200, Some(0.012)),
        ),
        dispatched("a", 2, "2026-01-01T10:00:31Z", "build"),
        settled(
            "worker-result-collected",
            "b",
            1,
            "2026-01-01T10:01:05Z",
            "build",
            usage(20000, 4000, Some(0.2)),
        ),
        settled(
            "worker-result-collected",
            "a",
            2,
            "2026-01-01T10:02:31Z",
            "build",
            usage(3000, 500, None),
        ),
        dispatched("review", 1, "2026-01-01T10:02:40Z", "review"),
    ];
    let lines: Vec<String> = events.iter().map(|e| e.to_string() + "\n").collect();
    fx.p.write("run/lead-events.jsonl", &lines.concat());
    fx.p.write_json(
        "run/team-state.json",
        &serde_json::json!({"workers": [
            {"workerId": "a", "status": "completed"},
            {"workerId": "late", "status": "not-run", "reason": "stage review did not complete"},
        ], "workerDispatches": []}),
    );
    fx.p.write("prompts/a.md.log", "working\n\u{1b}[32mall done\u{1b}[0m\n");
    fx.p.write(
        "prompts/review.md.log",
        &format!("{}\n", "a very long line ".repeat(10)),
    );
    fx
}

#[test]
fn watch_once_prints_the_plain_table_of_a_run() {
    let fx = hand_written_run();
    let run = fx.okstra(&["watch", "--manifest", "run/run-manifest.json", "--once"]);
    assert_code(&run, 0);
    // The review job's exec is gone: its attempt is unsettled, and its
    // clock stopped at the run's last event.
    insta::with_settings!({prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("watch_once", run.stdout);
    });
    // Once the review settled (and no exec holds the run), a piped watch
    // prints its table once and ends by itself.
    let mut events = fx.p.read("run/lead-events.jsonl");
    events.push_str(&format!(
        "{}\n",
        serde_json::json!({"type": "worker-failed", "ts": "2026-01-01T10:03:00Z",
            "workerId": "review", "attempt": 1, "workerKey": "review",
            "planDigest": "sha256:0123456789abcdef", "maxAttempts": 2,
            "dispatchMode": "cli-wrapper", "stage": "review", "status": "error",
            "reason": "exit 3"})
    ));
    fx.p.write("run/lead-events.jsonl", &events);
    let mut plain = fx.spawn(&["watch", "--manifest", "run/run-manifest.json"], "plain");
    assert_eq!(wait_child(&mut plain, 30), 0);
    let out = std::fs::read_to_string(fx.scratch("plain.stdout")).unwrap();
    assert_eq!(out.matches("── ").count(), 1, "{out}");
    assert_eq!(status_of_stage(&out, "review"), Some("error"), "{out}");
}

/// The status of the row of stage `stage`'s first job.
fn status_of_stage<'a>(screen: &'a str, stage: &str) -> Option<&'a str> {
    let line = screen
        .lines()
        .find(|l| l.starts_with(&format!("{stage} ")))?;
    line.split_whitespace().nth(2)
}

#[test]
fn watch_of_a_run_not_started_names_team_state_and_the_root() {
    let fx = Fx::new();
    fx.v1();
    let run = fx.okstra(&["watch", "--manifest", "run/run-manifest.json"]);
    assert_code(&run, 2);
    assert!(
        run.stderr.contains("error[input/missing]"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("team-state run/team-state.json does not exist"),
        "{}",
        run.stderr
    );
    let root = fx.root();
    assert!(
        run.stderr.contains(root.to_str().unwrap()),
        "{}",
        run.stderr
    );
}

#[test]
fn a_watch_whose_run_turns_unreadable_ends_with_exec_state() {
    // The review attempt is open and no exec holds the run: a plain watch
    // keeps watching. Team-state garbled under it ends the watch with
    // exec/state (exit 2), not a table that stopped moving in silence.
    let fx = hand_written_run();
    let mut watch = fx
        .command(&["watch", "--manifest", "run/run-manifest.json", "--plain"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert!(watch.try_wait().unwrap().is_none(), "the watch goes on");
    fx.p.write("run/team-state.json", "{ not json");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while watch.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "the watch never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = watch.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("exec/state") && stderr.contains("team-state"),
        "{stderr}"
    );
}
