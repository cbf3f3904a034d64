//! Checks on a spec's values as written, before anything reads them: the
//! spelling of every path (`path/invalid`, docs/spec-format.md#paths) and the
//! `env` table (names and values a process environment can carry). They need no
//! manifest and no file, so `okstra validate` runs them as `okstra plan` does,
//! on `defaults` and on every worker entry, each problem once, at the key or
//! value it is about.
//!
//! The jobs schema carries the same rules as `pattern` / `propertyNames`,
//! so editors flag them; the schema's complaints about a value reported
//! here are dropped, since these messages say more.

use super::Ctx;
use crate::diag::{Code, Diagnostic};
use crate::paths::{self, Field};
use crate::schema::{self, SchemaError};
use crate::source::SourceFile;
use serde_json::{Map, Value};
use std::collections::HashSet;

/// The path keys of a worker entry (and of `defaults`), with what each names
/// and whether it holds a list.
pub const PATH_KEYS: &[(&str, Field, bool)] = &[
    ("promptPath", Field::File, false),
    ("resultPath", Field::File, false),
    ("workerResultPath", Field::File, false),
    ("completionPaths", Field::File, true),
    ("worktreePath", Field::Scope, false),
    ("plannedPaths", Field::File, true),
    ("auxiliaryRoots", Field::Scope, true),
];

/// The rule for an environment variable's name, as the jobs schema's
/// `propertyNames` pattern: what POSIX calls a portable name (XBD 8.1:
/// letters, digits and `_`, not starting with a digit), the names every
/// shell can set and `env NAME=value` passes on unambiguously.
pub const ENV_NAME_PATTERN: &str = "^[A-Za-z_][A-Za-z0-9_]*$";

/// The rule for an environment variable's value, as the jobs schema's
/// `pattern`: anything but NUL, which ends a C string.
pub const ENV_VALUE_PATTERN: &str = "^[^\\x00]*$";

/// Why `name` cannot be an environment variable's name, or `None`.
pub fn env_name_problem(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    let first = chars.next()?;
    if name.contains('\0') {
        return Some("holds a NUL byte");
    }
    if name.contains('=') {
        return Some("holds `=`, which ends a name in an environment");
    }
    if first.is_ascii_digit() {
        return Some("starts with a digit");
    }
    let portable = |c: char| c.is_ascii_alphanumeric() || c == '_';
    (!portable(first) || !chars.all(portable))
        .then_some("holds a character other than ASCII letters, digits and `_`")
}

/// A value shown in a message: control characters (a NUL) escaped, the
/// rest as written, so `\` reads as the `\` that was written.
pub fn shown(value: &str) -> String {
    value
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The `path/invalid` diagnostic of `value` at `pointer`: one wording for
/// every place a path is judged, so the same problem found twice (here and
/// when the path is resolved) is one diagnostic.
pub fn invalid_path(
    ctx: &Ctx,
    src: &SourceFile,
    value: &str,
    pointer: &str,
    why: &str,
) -> Diagnostic {
    ctx.at(
        src,
        Code::PathInvalid,
        format!("path `{}` {why}", shown(value)),
        pointer,
    )
    .help("write paths with `/` between non-empty segments, relative to the project root (e.g. `out/result.md`); for everything under a directory in plannedPaths, write `dir/**`")
}

/// What the spec-alone rules reported (these checks, and the steps of
/// `job::check_alone`), so the schema's complaints about the same values
/// can be dropped. Sets, not lists: a spec of thousands of entries asks
/// once per complaint.
#[derive(Default)]
pub struct Reported {
    paths: HashSet<String>,
    /// `.../env` tables with a refused name or value.
    envs: HashSet<String>,
    /// (entry pointer, key): a key the entry needs and does not have.
    missing: HashSet<(String, String)>,
    /// Values refused by a rule whose schema twin is a `pattern`.
    values: HashSet<String>,
}

impl Reported {
    /// A rule reported that the entry at `entry` lacks `key`.
    pub fn missing(&mut self, entry: &str, key: &str) {
        self.missing.insert((entry.to_string(), key.to_string()));
    }

    /// A rule refused the value at `pointer`.
    pub fn value(&mut self, pointer: &str) {
        self.values.insert(pointer.to_string());
    }

    /// Whether a schema complaint is about something reported here.
    pub fn covers(&self, err: &SchemaError) -> bool {
        if let Some(key) = &err.missing {
            return self.missing.contains(&(err.pointer.clone(), key.clone()));
        }
        // The complaint's pointer and each of its ancestors.
        let mut at_or_above = std::iter::once(err.pointer.as_str()).chain(
            err.pointer
                .match_indices('/')
                .map(|(i, _)| &err.pointer[..i]),
        );
        (err.keyword == "pattern"
            && (self.paths.contains(&err.pointer) || self.values.contains(&err.pointer)))
            || at_or_above.any(|p| self.envs.contains(p))
    }
}

/// Check one object of a spec document at `pointer`: `defaults`, or a
/// worker entry as written (before `defaults` is applied).
pub fn check_object(
    ctx: &mut Ctx,
    src: &SourceFile,
    pointer: &str,
    object: &Map<String, Value>,
    reported: &mut Reported,
) {
    check_paths(ctx, src, pointer, object, reported);
    check_env(ctx, src, pointer, object, reported);
}

/// The worker a diagnostic is about: none for `defaults` (it is every one).
fn named(d: Diagnostic, pointer: &str, entry: &Map<String, Value>) -> Diagnostic {
    if pointer == "/defaults" {
        return d;
    }
    let fields = super::entry::WorkerFields::read(entry.clone());
    match fields.worker_name() {
        Some(n) => d.worker(n),
        None => d,
    }
}

fn check_paths(
    ctx: &mut Ctx,
    src: &SourceFile,
    pointer: &str,
    entry: &Map<String, Value>,
    reported: &mut Reported,
) {
    let mut report = |ctx: &mut Ctx, ptr: String, value: &str, why: String| {
        let d = invalid_path(ctx, src, value, &ptr, &why);
        ctx.push(named(d, pointer, entry));
        reported.paths.insert(ptr);
    };
    for (key, field, list) in PATH_KEYS {
        match (entry.get(*key), list) {
            // An empty single value reads as absent; whoever needs it says so.
            (Some(Value::String(value)), false) if !value.is_empty() => {
                if let Some(why) = paths::syntax_problem(value, *field) {
                    report(ctx, format!("{pointer}/{key}"), value, why);
                }
            }
            (Some(Value::Array(items)), true) => {
                for (i, item) in items.iter().enumerate() {
                    let Some(value) = item.as_str() else { continue };
                    if let Some(why) = paths::syntax_problem(value, *field) {
                        report(ctx, format!("{pointer}/{key}/{i}"), value, why);
                    }
                }
            }
            _ => {}
        }
    }
}

fn check_env(
    ctx: &mut Ctx,
    src: &SourceFile,
    pointer: &str,
    entry: &Map<String, Value>,
    reported: &mut Reported,
) {
    let Some(env) = entry.get("env").and_then(Value::as_object) else {
        return;
    };
    let base = format!("{pointer}/env");
    let help = "environment names are ASCII letters, digits and `_`, not starting with a digit (e.g. `MY_VAR`); values hold no NUL byte";
    let mut found = false;
    for (name, value) in env {
        let ptr = format!("{base}/{}", schema::escape_token(name));
        let why = if name.is_empty() {
            Some("is empty")
        } else {
            env_name_problem(name)
        };
        if let Some(why) = why {
            let d = ctx
                .at_key(
                    src,
                    Code::SchemaViolation,
                    format!("env name `{}` {why}", shown(name)),
                    &ptr,
                )
                .help(help);
            ctx.push(named(d, pointer, entry));
            found = true;
        }
        if value.as_str().is_some_and(|v| v.contains('\0')) {
            let d = ctx
                .at(
                    src,
                    Code::SchemaViolation,
                    format!("the value of env `{}` holds a NUL byte", shown(name)),
                    &ptr,
                )
                .help(help);
            ctx.push(named(d, pointer, entry));
            found = true;
        }
    }
    if found {
        reported.envs.insert(base);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn env_names_are_portable_shell_names() {
        for bad in ["1A", "A=B", "A B", "A-B", "A\0", "Ä", "=", "A.B"] {
            assert!(env_name_problem(bad).is_some(), "{bad:?}");
        }
        for good in ["A", "_", "_A1", "PATH", "my_var", "A1_B2"] {
            assert_eq!(env_name_problem(good), None, "{good:?}");
        }
        // The empty name is judged by the caller (it has no first char).
        assert_eq!(env_name_problem(""), None);
    }

    #[test]
    fn the_schema_patterns_are_the_rules() {
        let name = jsonschema::validator_for(&json!({"pattern": ENV_NAME_PATTERN})).unwrap();
        let value = jsonschema::validator_for(&json!({"pattern": ENV_VALUE_PATTERN})).unwrap();
        for s in [
            "", "1A", "A=B", "A B", "A-B", "A\0", "Ä", "A", "_", "_A1", "PATH",
        ] {
            let rule_ok = !s.is_empty() && env_name_problem(s).is_none();
            assert_eq!(name.is_valid(&json!(s)), rule_ok, "name {s:?}");
        }
        for s in ["", "x", "a\0b", "\0", "line\nbreak"] {
            assert_eq!(value.is_valid(&json!(s)), !s.contains('\0'), "value {s:?}");
        }
    }

    #[test]
    fn the_jobs_schema_carries_the_rules_on_every_path_and_env() {
        let schema: Value = serde_json::from_str(schema::SchemaKind::Jobs.text()).unwrap();
        // Each key is defined once, and both tables refer to it.
        let defs = &schema["definitions"];
        for def in ["worker", "defaults"] {
            for (key, _, _) in PATH_KEYS.iter().chain([&("env", Field::File, false)]) {
                let want = format!("#/definitions/{key}");
                assert_eq!(
                    defs[def]["properties"][key]["$ref"],
                    json!(want),
                    "{def}.{key}"
                );
            }
        }
        for (key, field, list) in PATH_KEYS {
            let p = if *list {
                &defs[key]["items"]
            } else {
                &defs[key]
            };
            let want = match field {
                Field::File => paths::FILE_PATTERN,
                _ => paths::DIR_PATTERN,
            };
            assert_eq!(p["pattern"], json!(want), "{key}");
        }
        let env = &defs["env"];
        assert_eq!(env["propertyNames"]["pattern"], json!(ENV_NAME_PATTERN));
        assert_eq!(
            env["additionalProperties"]["pattern"],
            json!(ENV_VALUE_PATTERN)
        );
    }

    #[test]
    fn control_characters_are_shown_escaped_and_backslashes_as_written() {
        assert_eq!(shown("a\0b"), "a\\u{0}b");
        assert_eq!(shown("a\\b"), "a\\b");
    }
}
