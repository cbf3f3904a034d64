//! Many real agent CLIs at once on one user's HOME (issue 28): 16 claude
//! workers in a stage, five stages in a row (and the same for codex),
//! through `okstra plan` and `okstra exec`, against the mock API. Every job
//! completes, and the user's state (`~/.claude.json`, `~/.claude/`,
//! `~/.codex/`, `~/.gemini/`) is left byte for byte as it was: each
//! attempt keeps its CLI's state apart, so none is written by 16 processes
//! at once, none is left invalid, and no `.corrupted` or backup copy
//! appears.
//!
//! The mock holds each round's first requests until all 16 are in
//! ([`Script::together`]): the 16 CLIs were running at once.
//!
//! `mock_for_benches` is the same mock alone, for
//! `benches/provider_state.sh`, which measures 16 CLIs started by hand on
//! one HOME beside these runs.

use crate::e2e::{self, Worker};
use crate::mock_api::{MockApi, Script, Step, StepBy, Tokens, RESULT};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// CLIs at once, in each round.
const WORKERS: usize = 16;
/// Rounds, one stage each.
const ROUNDS: usize = 5;

/// What each worker writes with its CLI's own tool.
const WRITTEN: &str = "written through the CLI's own tool\n";

/// The script every worker goes through, in its own conversation: write
/// the result its prompt names, then end the turn.
fn each_writes_its_result(provider: &str, together: Option<usize>) -> Script {
    let (_, served) = e2e::pinned(provider);
    Script {
        steps: vec![
            Step::WriteFile {
                path: RESULT.into(),
                content: WRITTEN.into(),
            },
            Step::Answer("done".into()),
        ],
        served_model: served.into(),
        tokens: Tokens {
            fresh_input: 1200,
            cache_read: 300,
            output: 80,
            ..Tokens::default()
        },
        step_by: StepBy::Conversation,
        together,
    }
}

/// The user's HOME as the CLIs leave it after they were used by hand:
/// `~/.claude.json` as claude writes it on a first run (and an onboarded
/// user's counters), settings, codex's config and its API-key login, and
/// gemini's settings choosing its API key.
const USER_HOME: [(&str, &str); 5] = [
    (
        ".claude.json",
        r#"{
  "numStartups": 3,
  "hasCompletedOnboarding": true,
  "projects": {},
  "firstStartTime": "2026-11-30T09:00:00.000Z",
  "machineID": "f2993af9e7c4416b6843e0f37920e0bec0b5931929cd33b30786b3179f6c373d",
  "opusProMigrationComplete": true,
  "sonnet1m45MigrationComplete": true,
  "seenNotifications": {},
  "migrationVersion": 13,
  "userID": "83eb60b07f5c23a6a575988e506bd9bc01dda442253e99d310dd606e92ef15f4"
}
"#,
    ),
    (
        ".claude/settings.json",
        "{\n  \"includeCoAuthoredBy\": false,\n  \"permissions\": {\n    \"allow\": [\"Bash(git status)\"]\n  }\n}\n",
    ),
    (
        ".codex/config.toml",
        "model = \"gpt-5\"\nmodel_reasoning_effort = \"medium\"\n",
    ),
    (
        ".codex/auth.json",
        "{\n  \"OPENAI_API_KEY\": \"sk-user-key\"\n}\n",
    ),
    (
        ".gemini/settings.json",
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}}}"#,
    ),
];

fn seed_home(home: &Path) {
    for (rel, text) in USER_HOME {
        let path = home.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// The user's state files: each file under `~/.claude`, `~/.codex` and
/// `~/.gemini`, and `~/.claude.json`, by its path under HOME, with the
/// digest of its bytes.
fn state(home: &Path) -> BTreeMap<PathBuf, String> {
    let state_file = |rel: &str| {
        [".claude", ".codex/", ".gemini/"]
            .iter()
            .any(|p| rel.starts_with(p))
    };
    crate::common::files_under(home)
        .into_iter()
        .filter(|(rel, _)| state_file(rel))
        .map(|(rel, bytes)| (PathBuf::from(rel), format!("{:x}", Sha256::digest(&bytes))))
        .collect()
}

/// The files of `before` changed or removed in `after`, and those added.
fn changes(
    before: &BTreeMap<PathBuf, String>,
    after: &BTreeMap<PathBuf, String>,
) -> (Vec<String>, Vec<String>) {
    let mut changed = Vec::new();
    for (path, digest) in before {
        match after.get(path) {
            None => changed.push(format!("removed {}", path.display())),
            Some(d) if d != digest => changed.push(format!("changed {}", path.display())),
            Some(_) => {}
        }
    }
    let added = after
        .keys()
        .filter(|p| !before.contains_key(*p))
        .map(|p| format!("added {}", p.display()))
        .collect();
    (changed, added)
}

/// The state files that do not parse as their kind (`.json`, `.toml`,
/// `.jsonl` line by line).
fn invalid(home: &Path, state: &BTreeMap<PathBuf, String>) -> Vec<String> {
    let mut out = Vec::new();
    for rel in state.keys() {
        let text = || std::fs::read_to_string(home.join(rel)).unwrap_or_default();
        let bad = match rel.extension().and_then(|e| e.to_str()) {
            Some("json") => serde_json::from_str::<Value>(&text())
                .err()
                .map(|e| e.to_string()),
            Some("toml") => toml::from_str::<toml::Table>(&text())
                .err()
                .map(|e| e.to_string()),
            Some("jsonl") => text()
                .lines()
                .filter(|l| !l.trim().is_empty())
                .find_map(|l| serde_json::from_str::<Value>(l).err())
                .map(|e| e.to_string()),
            _ => None,
        };
        if let Some(why) = bad {
            out.push(format!("{}: {why}", rel.display()));
        }
    }
    out
}

/// Files anywhere under HOME whose names say a CLI set a copy aside: a
/// corrupted file kept, or a backup.
fn set_aside(home: &Path) -> Vec<String> {
    fn walk(home: &Path, dir: &Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let path = e.path();
            if e.file_type().is_ok_and(|k| k.is_dir()) {
                walk(home, &path, out);
                continue;
            }
            let name = e.file_name().to_string_lossy().to_lowercase();
            if name.contains("corrupt")
                || name.contains("backup")
                || name.ends_with(".bak")
                || name.ends_with('~')
            {
                out.push(path.strip_prefix(home).unwrap().display().to_string());
            }
        }
    }
    let mut out = Vec::new();
    walk(home, home, &mut out);
    out.sort();
    out
}

/// At most `n` lines of `items`, and how many more there were.
fn some(items: &[String], n: usize) -> String {
    let mut s: String = items.iter().take(n).map(|i| format!("\n  {i}")).collect();
    if items.len() > n {
        s.push_str(&format!("\n  ... and {} more", items.len() - n));
    }
    s
}

fn sixteen_at_once_leave_the_users_state_alone(provider: &'static str) {
    let keys: Vec<(String, String)> = (1..=ROUNDS)
        .flat_map(|r| (1..=WORKERS).map(move |w| (format!("round{r}"), format!("r{r}w{w:02}"))))
        .collect();
    let workers: Vec<Worker> = keys
        .iter()
        .map(|(stage, key)| Worker {
            key,
            provider,
            stage,
            extra: "",
        })
        .collect();
    let Some((fx, mock)) = e2e::setup(&workers, |_| {
        vec![(provider, each_writes_its_result(provider, Some(WORKERS)))]
    }) else {
        return;
    };
    let home = fx.home();
    seed_home(&home);
    let before = state(&home);
    assert!(invalid(&home, &before).is_empty());

    let started = Instant::now();
    let ran = e2e::exec(&fx);
    let took = started.elapsed();

    let team: Value =
        serde_json::from_str(&e2e::read(&fx, "run/team-state.json")).unwrap_or_default();
    let mut failed = Vec::new();
    for (_, key) in &keys {
        let rows: Vec<&Value> = team["workerDispatches"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|r| r["workerKey"] == key.as_str())
                    .collect()
            })
            .unwrap_or_default();
        let statuses: Vec<&Value> = rows.iter().map(|r| &r["status"]).collect();
        let written = e2e::read(&fx, &format!("out/{key}.md"));
        if statuses != ["completed"] || written != WRITTEN {
            failed.push(format!("{key}: {statuses:?}, result {written:?}"));
        }
    }
    let after = state(&home);
    let invalid = invalid(&home, &after);
    let set_aside = set_aside(&home);
    let (changed, added) = changes(&before, &after);
    let gathered = mock.gathered(provider);
    // One line for benches/provider_state.sh, as it counts its own runs.
    println!(
        "okstra {provider}: {WORKERS} x {ROUNDS} rounds in {:.0} s: failed runs {}/{}, invalid state files {}, set-aside files {}, user's files changed {}/{}, files added {}",
        took.as_secs_f64(),
        failed.len(),
        keys.len(),
        invalid.len(),
        set_aside.len(),
        changed.len(),
        before.len(),
        added.len(),
    );
    eprintln!("first requests let go together: {gathered:?}");

    assert_eq!(
        ran.code,
        0,
        "every job completes; the first failures:{}\n{}",
        some(&failed, 5),
        failed
            .first()
            .map(|f| e2e::log(&fx, f.split(':').next().unwrap()))
            .unwrap_or_default()
    );
    assert!(failed.is_empty(), "{}", some(&failed, 10));
    assert_eq!(
        gathered,
        vec![WORKERS; ROUNDS],
        "each round's {WORKERS} CLIs were running at once"
    );
    assert!(
        invalid.is_empty(),
        "state files left invalid:{}",
        some(&invalid, 10)
    );
    assert!(
        set_aside.is_empty(),
        "copies set aside under HOME:{}",
        some(&set_aside, 10)
    );
    assert!(
        changed.is_empty() && added.is_empty(),
        "the user's state files are as they were; {} changed, {} added:{}{}",
        changed.len(),
        added.len(),
        some(&changed, 10),
        some(&added, 10)
    );
}

#[test]
fn sixteen_claude_workers_leave_the_users_state_alone() {
    sixteen_at_once_leave_the_users_state_alone("claude");
}

#[test]
fn sixteen_codex_workers_leave_the_users_state_alone() {
    sixteen_at_once_leave_the_users_state_alone("codex");
}

/// The mock alone, for `benches/provider_state.sh`: with
/// `OKSTRA_MOCK_URL_FILE` set, it answers every CLI as
/// [`each_writes_its_result`] says, holding each round's first
/// `OKSTRA_MOCK_TOGETHER` requests (default 16) together, writing relative
/// paths under `OKSTRA_MOCK_ROOT`, and writes its URL to that file. It
/// stops when the file is removed (or after an hour), then writes every
/// request it took, a JSON line each, to `OKSTRA_MOCK_REQUESTS` if set.
/// With `OKSTRA_MOCK_SEED_HOME` it first writes the user's files of these
/// tests there ([`USER_HOME`]). Without `OKSTRA_MOCK_URL_FILE` it returns
/// at once.
#[test]
#[ignore = "a server for benches/provider_state.sh, not a test"]
fn mock_for_benches() {
    let Some(url_file) = std::env::var_os("OKSTRA_MOCK_URL_FILE").map(PathBuf::from) else {
        eprintln!("OKSTRA_MOCK_URL_FILE is not set: nothing to serve");
        return;
    };
    let root = std::env::var_os("OKSTRA_MOCK_ROOT")
        .map(PathBuf::from)
        .expect("OKSTRA_MOCK_ROOT: where relative writes go");
    let together = std::env::var("OKSTRA_MOCK_TOGETHER")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(WORKERS);
    let together = (together > 1).then_some(together);
    if let Some(home) = std::env::var_os("OKSTRA_MOCK_SEED_HOME") {
        seed_home(Path::new(&home));
    }
    let mock = MockApi::per_cli(
        &root,
        ["claude", "codex", "gemini"]
            .into_iter()
            .map(|cli| (cli, each_writes_its_result(cli, together)))
            .collect(),
    );
    let written = url_file.with_extension("tmp");
    std::fs::write(&written, mock.url()).unwrap();
    std::fs::rename(&written, &url_file).unwrap();
    let until = Instant::now() + Duration::from_secs(3600);
    while url_file.exists() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(100));
    }
    for cli in ["claude", "codex", "gemini"] {
        eprintln!(
            "{cli}: {} model requests, first requests let go together: {:?}",
            mock.model_requests(cli),
            mock.gathered(cli)
        );
    }
    if let Some(out) = std::env::var_os("OKSTRA_MOCK_REQUESTS") {
        let lines: String = mock
            .requests()
            .iter()
            .map(|r| {
                serde_json::json!({"method": r.method, "path": r.path, "body": r.body}).to_string()
                    + "\n"
            })
            .collect();
        std::fs::write(out, lines).unwrap();
    }
}
