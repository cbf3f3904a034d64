//! Write policies (docs/audit.md#write-policies): what one job may change, as a
//! glob allow-list over project-relative paths (absolute for paths outside the
//! project root).
//!
//! This module is the only place a policy is built, matched or compared, so
//! the plan-time `rules/write-conflict` check and the exec-time mutation audit
//! read the same patterns the same way and cannot disagree.

use crate::canonical;
use crate::plan::WritePolicy;
use crate::vocab::Role;
use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::json;

/// Everything a policy is built from. Paths are project-relative, or absolute
/// where they lie outside the project root.
pub struct PolicyInputs<'a> {
    pub role: &'a Role,
    /// The job's own files: result, worker result, completion paths, audit
    /// sidecar, status sidecar, log, error sidecar. Exact paths.
    pub artifacts: &'a [String],
    /// Implementer only: the worktree directory.
    pub worktree: Option<&'a str>,
    /// Implementer only: globs from the run's plan.
    pub planned_paths: &'a [String],
    /// Verifier only: directories it may write below.
    pub auxiliary_roots: &'a [String],
}

/// The one directory a leader may write below.
pub const LEADER_ROOT: &str = ".okstra";

/// Build a job's policy: its artifacts; plus worktree and planned paths for an
/// implementer; plus `<root>/**` per auxiliary root for a verifier. A leader
/// gets only `.okstra/**`. Patterns are normalised, sorted and deduplicated;
/// the digest covers role and allow-list.
pub fn build(inputs: &PolicyInputs) -> WritePolicy {
    let mut allow: Vec<String> = Vec::new();
    if *inputs.role == Role::Leader {
        allow.push(format!("{LEADER_ROOT}/**"));
    } else {
        allow.extend(inputs.artifacts.iter().map(|p| tidy(p)));
        if *inputs.role == Role::Implementer {
            if let Some(wt) = inputs.worktree {
                allow.push(below(wt));
            }
            allow.extend(inputs.planned_paths.iter().map(|p| tidy(p)));
        }
        if *inputs.role == Role::Verifier {
            allow.extend(inputs.auxiliary_roots.iter().map(|r| below(r)));
        }
    }
    allow.retain(|p| !p.is_empty());
    allow.sort();
    allow.dedup();
    let mut policy = WritePolicy {
        role: inputs.role.as_str().to_string(),
        allow,
        digest: String::new(),
    };
    policy.digest = digest_of(&policy);
    policy
}

/// The digest a policy should carry: canonical JSON of role and allow-list.
/// Exec recomputes it when an attempt settles and compares with the record.
pub fn digest_of(policy: &WritePolicy) -> String {
    canonical::digest(&json!({"role": policy.role, "allow": policy.allow}))
}

/// `<dir>/**`, for a directory given with or without a trailing slash.
fn below(dir: &str) -> String {
    let d = tidy(dir);
    if d.is_empty() {
        return d;
    }
    format!("{}/**", d.trim_end_matches('/'))
}

/// Lexical clean-up of a path or pattern: `\` is not special, `.` and empty
/// components go, `x/..` collapses. A pattern that still climbs above its
/// start is kept as written; `normalise` refuses it when matching.
fn tidy(p: &str) -> String {
    normalise(p).unwrap_or_else(|| p.trim().to_string())
}

/// Normalise a path or pattern lexically. `None` when it escapes: a leading
/// `..` (above the project root or `/`), or a `..` right after a component
/// holding a glob metacharacter, which cannot be resolved without knowing
/// what the glob matched.
pub fn normalise(p: &str) -> Option<String> {
    let p = p.trim();
    // Most paths are clean already: kept as written, without taking them
    // apart (planning normalises every allow entry of every job, twice).
    let body = p.strip_prefix('/').unwrap_or(p);
    if !body.is_empty() && body.split('/').all(|c| !matches!(c, "" | "." | "..")) {
        return Some(p.to_string());
    }
    fold(p)
}

/// [`normalise`] of a trimmed path, component by component.
fn fold(p: &str) -> Option<String> {
    if p.is_empty() {
        return Some(String::new());
    }
    let absolute = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for comp in p.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                let last = parts.pop()?;
                if is_glob(last) {
                    return None;
                }
            }
            c => parts.push(c),
        }
    }
    let joined = parts.join("/");
    Some(if absolute {
        format!("/{joined}")
    } else {
        joined
    })
}

/// Whether an allow-list entry is a pattern rather than one literal path.
pub fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '[', ']', '{', '}', '\\'])
}

/// Why a write policy's patterns do not compile
/// (docs/audit.md#write-policies).
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    /// One pattern, as normalised, that globset cannot parse.
    #[error("write policy pattern `{pattern}`: {source}")]
    Pattern {
        pattern: String,
        source: globset::Error,
    },
    /// The patterns, each parsed, that globset cannot build into one set.
    #[error("write policy: {0}")]
    Set(globset::Error),
}

fn compile(pattern: &str) -> Result<Glob, PatternError> {
    GlobBuilder::new(pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|source| PatternError::Pattern {
            pattern: pattern.to_string(),
            source,
        })
}

/// A compiled policy. `*` stays within one directory, `**` crosses them.
#[derive(Debug, Clone)]
pub struct Matcher {
    set: GlobSet,
}

impl Matcher {
    /// Compile every pattern. A pattern that escapes (see [`normalise`])
    /// matches nothing rather than something wider than written; a pattern
    /// globset cannot parse is an error.
    pub fn new(p: &WritePolicy) -> Result<Matcher, PatternError> {
        Self::from_patterns(&p.allow)
    }

    pub(crate) fn from_patterns(patterns: &[String]) -> Result<Matcher, PatternError> {
        let mut b = GlobSetBuilder::new();
        for pattern in patterns {
            match normalise(pattern) {
                Some(n) if !n.is_empty() => {
                    b.add(compile(&n)?);
                }
                _ => {}
            }
        }
        let set = b.build().map_err(PatternError::Set)?;
        Ok(Matcher { set })
    }

    /// Whether the policy allows writing `rel` (project-relative, or absolute
    /// outside the project root). A path that escapes is never allowed.
    pub fn allows(&self, rel: &str) -> bool {
        match normalise(rel) {
            Some(n) if !n.is_empty() => self.set.is_match(&n),
            _ => false,
        }
    }
}

/// Plan-time `rules/write-conflict`: a path or pattern both policies may
/// write, or `None`. Literal against literal: equal. Literal against glob:
/// the glob matches the literal. Glob against glob: conservatively, overlap
/// when one's literal directory prefix is a prefix of the other's (`src/*.rs`
/// and `src/*.md` are reported although they share no file).
pub fn overlap(a: &WritePolicy, b: &WritePolicy) -> Option<String> {
    overlap_of(
        a.allow.iter().map(String::as_str),
        b.allow.iter().map(String::as_str),
    )
}

/// [`overlap`] of two allow-lists.
pub fn overlap_of<'a>(
    a: impl IntoIterator<Item = &'a str>,
    b: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let pa = usable(a);
    let pb = usable(b);
    for x in &pa {
        for y in &pb {
            if let Some(hit) = pair_overlap(x, y) {
                return Some(hit);
            }
        }
    }
    None
}

fn usable<'a>(patterns: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut v: Vec<String> = patterns
        .into_iter()
        .filter_map(normalise)
        .filter(|p| !p.is_empty())
        .collect();
    v.sort();
    v.dedup();
    v
}

fn pair_overlap(x: &str, y: &str) -> Option<String> {
    match (is_glob(x), is_glob(y)) {
        (false, false) => (x == y).then(|| x.to_string()),
        (false, true) => glob_matches(y, x).then(|| x.to_string()),
        (true, false) => glob_matches(x, y).then(|| y.to_string()),
        (true, true) => {
            let px = literal_prefix(x);
            let py = literal_prefix(y);
            if py.starts_with(&px[..]) {
                Some(y.to_string())
            } else if px.starts_with(&py[..]) {
                Some(x.to_string())
            } else {
                None
            }
        }
    }
}

fn glob_matches(pattern: &str, path: &str) -> bool {
    compile(pattern)
        .map(|g| g.compile_matcher().is_match(path))
        // An unparsable pattern is reported when the plan compiles the
        // matcher; for conflict purposes assume the worst.
        .unwrap_or(true)
}

/// The directory components before the first one holding a metacharacter.
/// The root of an absolute pattern counts as a component, so absolute and
/// relative patterns never share a prefix.
fn literal_prefix(p: &str) -> Vec<&str> {
    let mut out = Vec::new();
    if p.starts_with('/') {
        out.push("/");
    }
    for c in p.split('/').filter(|c| !c.is_empty()) {
        if is_glob(c) {
            break;
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn policy(role: &str, allow: &[&str]) -> WritePolicy {
        let mut p = WritePolicy {
            role: role.into(),
            allow: s(allow),
            digest: String::new(),
        };
        p.digest = digest_of(&p);
        p
    }

    fn inputs<'a>(
        role: &'a Role,
        artifacts: &'a [String],
        worktree: Option<&'a str>,
        planned: &'a [String],
        aux: &'a [String],
    ) -> PolicyInputs<'a> {
        PolicyInputs {
            role,
            artifacts,
            worktree,
            planned_paths: planned,
            auxiliary_roots: aux,
        }
    }

    #[test]
    fn implementer_gets_artifacts_worktree_and_planned_paths() {
        let arts = s(&["out/r.json", "out/r.json", "./p/prompt.md.log"]);
        let planned = s(&["src/**/*.rs", "docs/a.md"]);
        let aux = s(&["ignored"]);
        let p = build(&inputs(
            &Role::Implementer,
            &arts,
            Some("/wt/x/"),
            &planned,
            &aux,
        ));
        assert_eq!(
            p.allow,
            s(&[
                "/wt/x/**",
                "docs/a.md",
                "out/r.json",
                "p/prompt.md.log",
                "src/**/*.rs"
            ])
        );
        assert_eq!(p.digest, digest_of(&p));
        assert!(p.digest.starts_with("sha256:"));
    }

    #[test]
    fn verifier_gets_auxiliary_roots_but_not_worktree_or_plan() {
        let arts = s(&["v/result.md"]);
        let planned = s(&["src/**"]);
        let aux = s(&["scratch/v1", "tmp/"]);
        let p = build(&inputs(&Role::Verifier, &arts, Some("/wt"), &planned, &aux));
        assert_eq!(p.allow, s(&["scratch/v1/**", "tmp/**", "v/result.md"]));
    }

    #[test]
    fn leader_gets_only_okstra() {
        let arts = s(&["elsewhere/result.md"]);
        let p = build(&inputs(&Role::Leader, &arts, None, &[], &[]));
        assert_eq!(p.allow, s(&[".okstra/**"]));
    }

    #[test]
    fn digest_depends_on_role_and_allow_only() {
        let a = policy("analyst", &["a"]);
        let b = policy("analyst", &["b"]);
        let c = policy("verifier", &["a"]);
        assert_ne!(a.digest, b.digest);
        assert_ne!(a.digest, c.digest);
        assert_eq!(a.digest, policy("analyst", &["a"]).digest);
    }

    #[test]
    fn star_stays_in_its_directory() {
        let m = Matcher::new(&policy("x", &["src/*.rs", "wt/**", "exact.txt"])).unwrap();
        assert!(m.allows("src/a.rs"));
        assert!(!m.allows("src/sub/a.rs"));
        assert!(m.allows("wt/a/b/c"));
        assert!(m.allows("exact.txt"));
        assert!(!m.allows("exact.txt.bak"));
        assert!(!m.allows("other"));
    }

    #[test]
    fn dot_dot_never_widens() {
        // Escaping patterns match nothing; a path climbing out is refused.
        let m = Matcher::new(&policy(
            "x",
            &["../**", "wt/*/../../../etc/**", "a/../b/**"],
        ))
        .unwrap();
        assert!(!m.allows("etc/passwd"));
        assert!(!m.allows("../outside"));
        assert!(m.allows("b/x"));
        assert!(!m.allows("a/x"));
        let m = Matcher::new(&policy("x", &["wt/**"])).unwrap();
        assert!(!m.allows("wt/../secret"));
        assert!(!m.allows("wt/../../secret"));
        assert!(m.allows("wt/./a"));
        assert_eq!(normalise("/a/../../x"), None);
        assert_eq!(normalise("a/./b//c/.."), Some("a/b".into()));
    }

    #[test]
    fn a_pattern_error_reads_as_it_always_did() {
        let e = Matcher::new(&policy("x", &["ok/**", "src/[a"])).unwrap_err();
        assert!(matches!(e, PatternError::Pattern { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "write policy pattern `src/[a`: error parsing glob 'src/[a': \
             unclosed character class; missing ']'"
        );
        // globset's own text after the prefix, whatever made the set fail.
        let set = PatternError::Set(Glob::new("[a").unwrap_err());
        assert_eq!(
            set.to_string(),
            "write policy: error parsing glob '[a': unclosed character class; missing ']'"
        );
    }

    proptest::proptest! {
        /// A clean path kept as written is what folding it gives.
        #[test]
        fn clean_paths_normalise_as_folded(p in "[ a*./]{0,12}") {
            proptest::prop_assert_eq!(normalise(&p), fold(p.trim()));
        }
    }

    #[test]
    fn overlap_literal_cases() {
        let a = policy("x", &["out/a.json", "shared.md"]);
        let b = policy("y", &["out/b.json", "shared.md"]);
        assert_eq!(overlap(&a, &b), Some("shared.md".into()));
        let b = policy("y", &["out/b.json"]);
        assert_eq!(overlap(&a, &b), None);
    }

    #[test]
    fn overlap_literal_against_glob() {
        let a = policy("x", &["src/lib.rs"]);
        let b = policy("y", &["src/*.rs"]);
        assert_eq!(overlap(&a, &b), Some("src/lib.rs".into()));
        assert_eq!(overlap(&b, &a), Some("src/lib.rs".into()));
        let b = policy("y", &["src/*/*.rs"]);
        assert_eq!(overlap(&a, &b), None);
    }

    #[test]
    fn overlap_glob_against_glob_is_conservative() {
        let a = policy("x", &["src/**"]);
        let b = policy("y", &["src/lib/*.rs"]);
        assert_eq!(overlap(&a, &b), Some("src/lib/*.rs".into()));
        let b = policy("y", &["srcx/**"]);
        assert_eq!(overlap(&a, &b), None, "prefix is by directory, not by byte");
        let a = policy("x", &["/wt/a/**"]);
        let b = policy("y", &["/wt/b/**"]);
        assert_eq!(overlap(&a, &b), None);
        let b = policy("y", &["/wt/**"]);
        assert_eq!(overlap(&a, &b), Some("/wt/a/**".into()));
        let b = policy("y", &["wt/a/**"]);
        assert_eq!(overlap(&a, &b), None, "absolute and relative never meet");
    }

    #[test]
    fn overlap_ignores_escaping_patterns() {
        let a = policy("x", &["a/../../b/**"]);
        let b = policy("y", &["**"]);
        assert_eq!(overlap(&a, &b), None);
    }

    #[test]
    fn two_leaders_overlap() {
        let l = build(&inputs(&Role::Leader, &[], None, &[], &[]));
        assert_eq!(overlap(&l, &l), Some(".okstra/**".into()));
    }
}
