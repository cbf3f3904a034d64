//! Private provider state per attempt (docs/confinement.md#provider-state).
//!
//! An agent CLI keeps its login, settings, hooks, history and caches in
//! directories of the user's (`~/.claude` and `~/.claude.json`, `~/.codex`,
//! `~/.gemini`), written as if by one CLI at a time. okstra gives every
//! attempt of an agent worker its own instead, confined or not, through the
//! variable each CLI honours (`Provider::state_var`, found by running them): a
//! directory seeded with copies of the user's login and of the settings the
//! user chose, the rest empty. What the worker writes there (a hook planted
//! in `settings.json`, an MCP server, history) dies with the attempt and is
//! listed on its row ([`Report`]). The one thing that goes back is a
//! credentials file the CLI refreshed: under a lock on the user's directory,
//! and only where it is a valid credentials document newer than the user's
//! (`write_back`), so N workers never tear it and a rotated refresh token
//! is not lost.
//!
//! The attempt's directory holds `state/` (what the variable names) and
//! `seed.json` (what was copied in, with digests), which the worker cannot
//! reach when confined; exec reads it to write back a refreshed login for a
//! wrapper that was killed before it could.

use crate::canonical::sha256_hex;
use crate::fsutil;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How one CLI's private state is laid out and seeded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// The user's files and directories copied in, each to its place
    /// below the private state directory.
    pub seeds: Vec<Seed>,
    /// The user's credentials file, which a refresh during the attempt
    /// may replace (`write_back`).
    pub credentials: Option<Seed>,
}

/// One of the user's files (or directories), and where its copy goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seed {
    pub from: PathBuf,
    /// Relative to the private state directory.
    pub to: &'static str,
}

/// The private state directory in an attempt's directory.
const STATE: &str = "state";
/// What was seeded, in an attempt's directory.
const SEED_RECORD: &str = "seed.json";

/// The most bytes a seeded directory may hold: a user's commands or
/// skills, never a cache.
const SEED_LIMIT: u64 = 64 << 20;
/// The most written paths a row lists (it counts the rest).
const LISTED: usize = 50;

/// What was copied into an attempt's private state: enough for whoever
/// finishes the attempt to list its writes and write a refreshed login
/// back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SeedRecord {
    provider: super::Provider,
    /// Each seeded file, relative to the state directory, and the sha256
    /// of what was copied.
    files: BTreeMap<String, String>,
    /// The credentials file: where it is below the state directory, and
    /// the user's it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    credentials: Option<CredentialsSeed>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CredentialsSeed {
    at: String,
    user: PathBuf,
}

/// What an attempt did with its private state, for its row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The variable the CLI was pointed with (`CLAUDE_CONFIG_DIR`, ...).
    pub var: String,
    /// Paths below the private state directory the attempt created,
    /// changed or removed (the first 50, sorted); none of them
    /// reached the user's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// How many more there were.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more_writes: usize,
    /// What became of a credentials file the CLI rewrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<WriteBack>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What became of a rewritten credentials file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum WriteBack {
    /// Copied over the user's, which it was newer than.
    WrittenBack { file: PathBuf },
    /// The user's was as new or newer (another attempt wrote back first).
    NotNewer { file: PathBuf },
    /// Not written back, and why: not a login this CLI's user may be given.
    Refused { file: PathBuf, reason: String },
    /// Not written back because the write could not be done (the lock not
    /// had in time, an I/O error): the attempt's copy is kept for another
    /// try, and the run fails if that cannot be done either.
    Failed { file: PathBuf, reason: String },
}

impl WriteBack {
    /// Whether the attempt's login is still to be written back.
    pub fn failed(&self) -> bool {
        matches!(self, WriteBack::Failed { .. })
    }
}

/// An attempt's private state, seeded.
#[derive(Debug)]
pub struct Private {
    dir: PathBuf,
    record: SeedRecord,
}

impl Private {
    /// Make `<attempt_dir>/state` and copy the user's seeds into it, then
    /// record them in `<attempt_dir>/seed.json`. A seed the user does not
    /// have is left out; one that cannot be read is an error (the attempt
    /// must not start on shared state instead).
    pub fn seed(
        attempt_dir: &Path,
        provider: super::Provider,
        layout: &Layout,
    ) -> io::Result<Private> {
        let dir = attempt_dir.join(STATE);
        fs::create_dir(&dir).map_err(|e| at(&dir, "cannot make", e))?;
        let mut files = BTreeMap::new();
        for seed in layout.seeds.iter().chain(&layout.credentials) {
            copy_in(&seed.from, &dir.join(seed.to), seed.to, &mut files)?;
        }
        let credentials = layout.credentials.as_ref().and_then(|c| {
            files.contains_key(c.to).then(|| CredentialsSeed {
                at: c.to.to_string(),
                user: c.from.clone(),
            })
        });
        let record = SeedRecord {
            provider,
            files,
            credentials,
        };
        let path = attempt_dir.join(SEED_RECORD);
        let text = serde_json::to_vec(&record).map_err(io::Error::other)?;
        fs::write(&path, text).map_err(|e| at(&path, "cannot write", e))?;
        Ok(Private { dir, record })
    }

    /// The seeded files, by their paths below the state directory.
    pub fn seeded(&self) -> impl Iterator<Item = &str> {
        self.record.files.keys().map(String::as_str)
    }

    /// The private state directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The variable, and its value, that point the CLI here.
    pub fn env(&self) -> (String, String) {
        (var_of(&self.record).into(), self.dir.display().to_string())
    }

    /// List what the attempt wrote, and write a refreshed login back.
    pub fn finish(&self) -> Report {
        finish(&self.dir, &self.record)
    }
}

/// [`Private::finish`] for the attempt directory `attempt_dir` whose
/// wrapper did not (killed first): `Ok(None)` when it holds no seed record
/// (the wrapper died before it seeded anything); `Err` when the record is
/// there but cannot be read, so a refreshed login may be lost.
pub fn finish_recorded(attempt_dir: &Path) -> io::Result<Option<Report>> {
    let path = attempt_dir.join(SEED_RECORD);
    let text = match fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(at(&path, "cannot read", e)),
    };
    let record: SeedRecord = serde_json::from_slice(&text).map_err(|e| {
        at(
            &path,
            "cannot read",
            io::Error::new(io::ErrorKind::InvalidData, e),
        )
    })?;
    Ok(Some(finish(&attempt_dir.join(STATE), &record)))
}

/// The variable that points the record's CLI at its state.
fn var_of(record: &SeedRecord) -> &'static str {
    record.provider.state_var().unwrap_or_default()
}

fn finish(dir: &Path, record: &SeedRecord) -> Report {
    let mut writes = written(dir, &record.files);
    let more_writes = writes.len().saturating_sub(LISTED);
    writes.truncate(LISTED);
    let credentials = record.credentials.as_ref().and_then(|c| {
        let seeded = record.files.get(&c.at)?;
        write_back(&dir.join(&c.at), seeded, &c.user, record.provider)
    });
    Report {
        var: var_of(record).into(),
        writes,
        more_writes,
        credentials,
    }
}

/// Copy the user's `from` (a file, or a directory of them; symlinks
/// followed, as the CLI would) to `to`, noting each file's digest under
/// its path `rel`. Nothing at `from`: nothing copied.
fn copy_in(
    from: &Path,
    to: &Path,
    rel: &str,
    files: &mut BTreeMap<String, String>,
) -> io::Result<()> {
    let meta = match fs::metadata(from) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(at(from, "cannot read", e)),
    };
    if meta.is_dir() {
        let mut budget = SEED_LIMIT;
        copy_dir(from, to, rel, files, &mut budget, 0)
    } else if meta.is_file() {
        copy_file(from, to, &meta, rel, files)
    } else {
        Ok(())
    }
}

/// Copy the file `from` (`meta` its metadata) to `to`, keeping its mode
/// (a 0600 login stays 0600).
fn copy_file(
    from: &Path,
    to: &Path,
    meta: &fs::Metadata,
    rel: &str,
    files: &mut BTreeMap<String, String>,
) -> io::Result<()> {
    let bytes = fs::read(from).map_err(|e| at(from, "cannot read", e))?;
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(|e| at(parent, "cannot make", e))?;
    }
    let mode = meta.permissions().mode() & 0o777;
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode | 0o600)
        .open(to)
        .map_err(|e| at(to, "cannot write", e))?;
    out.write_all(&bytes)
        .map_err(|e| at(to, "cannot write", e))?;
    files.insert(rel.to_string(), sha256_hex(&bytes));
    Ok(())
}

fn copy_dir(
    from: &Path,
    to: &Path,
    rel: &str,
    files: &mut BTreeMap<String, String>,
    budget: &mut u64,
    depth: usize,
) -> io::Result<()> {
    if depth > 16 {
        return Err(at(from, "cannot copy", io::Error::other("nested too deep")));
    }
    fs::create_dir_all(to).map_err(|e| at(to, "cannot make", e))?;
    let mut entries: Vec<_> = fs::read_dir(from)
        .map_err(|e| at(from, "cannot list", e))?
        .collect::<Result<_, _>>()
        .map_err(|e| at(from, "cannot list", e))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        let (src, dst) = (entry.path(), to.join(&name));
        // The record's key; the copy keeps the name's own bytes.
        let sub = format!("{rel}/{}", name.to_string_lossy());
        let meta = match fs::metadata(&src) {
            Ok(meta) => meta,
            // A dangling link: the CLI would not see it either.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(at(&src, "cannot read", e)),
        };
        if meta.is_dir() {
            copy_dir(&src, &dst, &sub, files, budget, depth + 1)?;
        } else if meta.is_file() {
            *budget = budget.checked_sub(meta.len()).ok_or_else(|| {
                at(
                    from,
                    "will not copy",
                    io::Error::other(format!(
                        "more than {} MiB to seed an attempt with",
                        SEED_LIMIT >> 20
                    )),
                )
            })?;
            copy_file(&src, &dst, &meta, &sub, files)?;
        }
    }
    Ok(())
}

/// Paths below `dir` that are not as seeded: created, changed (files and
/// symlinks) or removed; sorted.
fn written(dir: &Path, seeded: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = BTreeMap::new();
    walk(dir, "", &mut found);
    let mut out: Vec<String> = found
        .iter()
        .filter(|(rel, digest)| seeded.get(*rel) != Some(digest))
        .map(|(rel, _)| rel.clone())
        .collect();
    out.extend(seeded.keys().filter(|k| !found.contains_key(*k)).cloned());
    out.sort();
    out
}

/// Every file (its digest) and symlink (its target's) below `dir`, by
/// path; directories are walked, never followed through a link. What
/// cannot be read (a worker's `chmod 000`) is listed as written: it is not
/// as seeded, as far as anyone can tell.
fn walk(dir: &Path, rel: &str, found: &mut BTreeMap<String, String>) {
    let Ok(entries) = fs::read_dir(dir) else {
        let shown = if rel.is_empty() { "." } else { rel };
        found.insert(shown.to_string(), UNREADABLE.into());
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let sub = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            walk(&entry.path(), &sub, found);
        } else if kind.is_symlink() {
            let target = fs::read_link(entry.path()).unwrap_or_default();
            found.insert(sub, format!("link:{}", target.display()));
        } else {
            let digest = digest_file(&entry.path()).unwrap_or_else(|_| UNREADABLE.into());
            found.insert(sub, digest);
        }
    }
}

/// What [`walk`] notes of a path it could not read: never a digest.
const UNREADABLE: &str = "unreadable";

fn digest_file(path: &Path) -> io::Result<String> {
    crate::canonical::sha256_hex_of(fs::File::open(path)?)
}

/// Write the credentials file `private` back over the user's `user` if the
/// CLI rewrote it (its digest is no longer `seeded`) into a valid
/// credentials document newer than the user's. Under an exclusive lock on
/// the user's directory (waited for at most `OKSTRA_LOCK_TIMEOUT_SECONDS`),
/// written beside it and renamed into place with its mode
/// ([`fsutil::write_atomic_mode`]), so concurrent attempts and the user's
/// own CLI never read a torn one. `None`: the CLI left it as seeded, or
/// removed it.
fn write_back(
    private: &Path,
    seeded: &str,
    user: &Path,
    provider: super::Provider,
) -> Option<WriteBack> {
    let ours = fs::read(private).ok()?;
    if sha256_hex(&ours) == seeded {
        return None;
    }
    let refused = |reason: String| {
        Some(WriteBack::Refused {
            file: user.to_path_buf(),
            reason,
        })
    };
    let Some(our_stamp) = stamp_of(provider, &ours) else {
        return refused("the attempt's copy is not a valid credentials document".into());
    };
    // Written through a symlink to where the user keeps it.
    let Ok(target) = user.canonicalize() else {
        return refused("the user's credentials file is gone".into());
    };
    let dir = target.parent().unwrap_or(Path::new("/"));
    let replaced = (|| {
        let handle = fs::File::open(dir)?;
        let _lock =
            fsutil::FileLock::file_within(handle, dir, crate::state::team_state::lock_timeout())?;
        // A temporary of ours that a killed okstra left beside it.
        fsutil::remove_stale_temporaries(&target)?;
        let theirs = fs::read(&target)?;
        // The user's own not valid: a valid refresh replaces it.
        if stamp_of(provider, &theirs).is_some_and(|their| our_stamp <= their) {
            return Ok(false);
        }
        let mode = fs::metadata(&target)?.permissions().mode() & 0o777;
        fsutil::write_atomic_mode(&target, &ours, mode)?;
        Ok::<_, io::Error>(true)
    })();
    match replaced {
        Ok(true) => Some(WriteBack::WrittenBack {
            file: user.to_path_buf(),
        }),
        Ok(false) => Some(WriteBack::NotNewer {
            file: user.to_path_buf(),
        }),
        Err(e) => Some(WriteBack::Failed {
            file: user.to_path_buf(),
            reason: format!("cannot write it back: {e}"),
        }),
    }
}

/// How fresh a credentials document of `provider` is, where it is one.
fn stamp_of(provider: super::Provider, bytes: &[u8]) -> Option<i128> {
    let doc: Value = serde_json::from_slice(bytes).ok()?;
    provider.credentials_stamp(&doc)
}

fn at(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::Provider;
    use serde_json::json;

    fn claude_login(expires: i64, refresh: &str) -> Vec<u8> {
        serde_json::to_vec(&json!({"claudeAiOauth": {
            "accessToken": format!("at-{expires}"), "refreshToken": refresh,
            "expiresAt": expires, "scopes": ["user:inference"]}}))
        .unwrap()
    }

    struct Home {
        _dir: tempfile::TempDir,
        home: PathBuf,
        attempt: PathBuf,
    }

    fn home() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let attempt = dir.path().join("attempt");
        fs::create_dir_all(home.join(".claude/commands/nested")).unwrap();
        fs::create_dir(&attempt).unwrap();
        Home {
            _dir: dir,
            home,
            attempt,
        }
    }

    fn layout(home: &Path) -> Layout {
        let var = |_: &str| None;
        Provider::Claude
            .adapter()
            .private_state(home, &var)
            .unwrap()
    }

    fn write(path: &Path, bytes: &[u8]) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn the_users_login_and_settings_are_copied_and_nothing_else() {
        let h = home();
        write(&h.home.join(".claude/settings.json"), b"{}");
        write(&h.home.join(".claude/commands/nested/x.md"), b"do x");
        write(
            &h.home.join(".claude/.credentials.json"),
            &claude_login(1, "r"),
        );
        write(&h.home.join(".claude.json"), br#"{"primaryApiKey":"k"}"#);
        write(&h.home.join(".claude/history.jsonl"), b"secret history");
        write(&h.home.join(".claude/projects/p/s.jsonl"), b"old session");
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        assert_eq!(p.env().0, "CLAUDE_CONFIG_DIR");
        let state = h.attempt.join(STATE);
        assert_eq!(p.dir(), state);
        for (rel, want) in [
            ("settings.json", b"{}".to_vec()),
            ("commands/nested/x.md", b"do x".to_vec()),
            (".credentials.json", claude_login(1, "r")),
            (".claude.json", br#"{"primaryApiKey":"k"}"#.to_vec()),
        ] {
            assert_eq!(fs::read(state.join(rel)).unwrap(), want, "{rel}");
        }
        assert!(!state.join("history.jsonl").exists());
        assert!(!state.join("projects").exists());
        let record: SeedRecord =
            serde_json::from_slice(&fs::read(h.attempt.join(SEED_RECORD)).unwrap()).unwrap();
        assert_eq!(record.files.len(), 4, "{record:?}");
        // A seed the user lacks is left out; nothing written yet.
        let report = p.finish();
        assert_eq!(report.writes, Vec::<String>::new());
        assert_eq!(report.credentials, None);
    }

    #[test]
    fn writes_are_listed_and_never_reach_the_user() {
        let h = home();
        write(&h.home.join(".claude/settings.json"), b"{}");
        write(&h.home.join(".claude.json"), b"{}");
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        let hook = br#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"curl evil"}]}]}}"#;
        fs::write(p.dir().join("settings.json"), hook).unwrap();
        fs::remove_file(p.dir().join(".claude.json")).unwrap();
        write(&p.dir().join("projects/x/s.jsonl"), b"{}");
        let report = p.finish();
        assert_eq!(
            report.writes,
            [".claude.json", "projects/x/s.jsonl", "settings.json"]
        );
        assert_eq!(
            fs::read(h.home.join(".claude/settings.json")).unwrap(),
            b"{}"
        );
        assert_eq!(fs::read(h.home.join(".claude.json")).unwrap(), b"{}");
    }

    #[test]
    fn a_long_list_of_writes_is_cut_and_counted() {
        let h = home();
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        for i in 0..(LISTED + 7) {
            write(&p.dir().join(format!("todos/{i:03}.json")), b"[]");
        }
        let report = p.finish();
        assert_eq!(report.writes.len(), LISTED);
        assert_eq!(report.more_writes, 7);
    }

    #[test]
    fn a_refreshed_login_goes_back_only_when_valid_and_newer() {
        let h = home();
        let user = h.home.join(".claude/.credentials.json");
        write(&user, &claude_login(100, "r1"));
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        let ours = p.dir().join(".credentials.json");
        // Not valid: refused, the user's kept.
        fs::write(&ours, b"{\"claudeAiOauth\": {").unwrap();
        let got = p.finish().credentials.unwrap();
        assert!(matches!(got, WriteBack::Refused { .. }), "{got:?}");
        assert_eq!(fs::read(&user).unwrap(), claude_login(100, "r1"));
        // Valid and newer: written back, the mode kept.
        fs::set_permissions(&user, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&ours, claude_login(200, "r2")).unwrap();
        let got = p.finish().credentials.unwrap();
        assert!(matches!(got, WriteBack::WrittenBack { .. }), "{got:?}");
        assert_eq!(fs::read(&user).unwrap(), claude_login(200, "r2"));
        let mode = fs::metadata(&user).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // The user's now newer (another attempt's refresh): kept.
        write(&user, &claude_login(300, "r3"));
        let got = p.finish().credentials.unwrap();
        assert!(matches!(got, WriteBack::NotNewer { .. }), "{got:?}");
        assert_eq!(fs::read(&user).unwrap(), claude_login(300, "r3"));
        // Nothing of ours left beside it.
        let names: Vec<_> = fs::read_dir(h.home.join(".claude"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.contains("okstra") && !n.ends_with(".tmp")),
            "{names:?}"
        );
    }

    #[test]
    fn no_login_is_planted_where_the_user_had_none() {
        let h = home();
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        fs::write(p.dir().join(".credentials.json"), claude_login(999, "x")).unwrap();
        // Not seeded, so not a credentials file of the record's: nothing
        // goes back.
        assert_eq!(p.finish().credentials, None);
        assert!(!h.home.join(".claude/.credentials.json").exists());
    }

    #[test]
    fn a_symlinked_login_is_refreshed_where_it_points() {
        let h = home();
        let real = h.home.join("dotfiles/claude-credentials.json");
        write(&real, &claude_login(1, "a"));
        std::os::unix::fs::symlink(&real, h.home.join(".claude/.credentials.json")).unwrap();
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        fs::write(p.dir().join(".credentials.json"), claude_login(2, "b")).unwrap();
        let got = p.finish().credentials.unwrap();
        assert!(matches!(got, WriteBack::WrittenBack { .. }), "{got:?}");
        assert!(
            fs::symlink_metadata(h.home.join(".claude/.credentials.json"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(fs::read(&real).unwrap(), claude_login(2, "b"));
    }

    #[test]
    fn exec_finishes_the_state_a_killed_wrapper_left() {
        let h = home();
        let user = h.home.join(".claude/.credentials.json");
        write(&user, &claude_login(1, "a"));
        let p = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap();
        fs::write(p.dir().join(".credentials.json"), claude_login(5, "b")).unwrap();
        drop(p);
        let report = finish_recorded(&h.attempt).unwrap().unwrap();
        assert_eq!(report.writes, [".credentials.json"]);
        assert!(matches!(
            report.credentials,
            Some(WriteBack::WrittenBack { .. })
        ));
        assert_eq!(fs::read(&user).unwrap(), claude_login(5, "b"));
        assert_eq!(finish_recorded(&h.home).unwrap(), None, "no record there");
        // A record that does not read: an error, never a silent pass.
        fs::write(h.attempt.join(SEED_RECORD), "{").unwrap();
        let err = finish_recorded(&h.attempt).unwrap_err();
        assert!(err.to_string().contains(SEED_RECORD), "{err}");
    }

    #[test]
    fn each_cli_dates_its_own_login() {
        let codex = json!({"tokens": {"refresh_token": "r", "access_token": "a"},
                           "last_refresh": "2026-12-04T10:00:00.123456Z"});
        let later = json!({"tokens": {"refresh_token": "r2"},
                           "last_refresh": "2026-12-04T11:00:00Z"});
        let a = Provider::Codex.credentials_stamp(&codex).unwrap();
        let b = Provider::Codex.credentials_stamp(&later).unwrap();
        assert!(b > a);
        assert_eq!(
            Provider::Codex.credentials_stamp(&json!({"OPENAI_API_KEY": "k"})),
            None
        );
        let gemini = json!({"access_token": "a", "refresh_token": "r", "expiry_date": 5});
        assert_eq!(Provider::Gemini.credentials_stamp(&gemini), Some(5));
        assert_eq!(
            Provider::Gemini.credentials_stamp(&json!({"expiry_date": 5})),
            None
        );
        assert_eq!(Provider::Command.credentials_stamp(&gemini), None);
    }

    #[test]
    fn a_seed_that_cannot_be_copied_stops_the_attempt() {
        // Never a fallback to the shared state: a link loop in the user's
        // commands, or a link that cannot be resolved, is an error naming it.
        let h = home();
        std::os::unix::fs::symlink("../commands", h.home.join(".claude/commands/loop")).unwrap();
        let err = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap_err();
        assert!(err.to_string().contains("nested too deep"), "{err}");
        let h = home();
        std::os::unix::fs::symlink("settings.json", h.home.join(".claude/settings.json")).unwrap();
        let err = Private::seed(&h.attempt, Provider::Claude, &layout(&h.home)).unwrap_err();
        assert!(err.to_string().contains("settings.json"), "{err}");
    }
}
