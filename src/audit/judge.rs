//! Judging a batch's changes against its jobs' write policies
//! (docs/audit.md#write-policies): each change is attributed once to the
//! policies that allow it, then each job's attempt gets its verdict from that
//! one attribution.

use super::compare::{ChangeKind, ChangedPath, Changes};
use crate::plan::{sidecar, WritePolicy};
use crate::policy::{self, Matcher};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs;
use std::path::Path;

/// The four verdicts of the mutation audit, by their wire names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Nothing outside the batch's policies changed, and the attempt
    /// succeeded (or failed for another reason the audit does not judge).
    Ok,
    /// The attempt failed and changed nothing: a retry is allowed.
    FailedNoMutation,
    /// A change outside every policy of the batch.
    ContractFailedUnattributed,
    /// A failed attempt that left changes of its own.
    MutationPresentUnresolved,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::FailedNoMutation => "failed-no-mutation",
            Outcome::ContractFailedUnattributed => "contract-failed-unattributed",
            Outcome::MutationPresentUnresolved => "mutation-present-unresolved",
        }
    }

    /// Whether the job settles `error` with the violating paths, not retried.
    pub fn blocks(self) -> bool {
        matches!(
            self,
            Outcome::ContractFailedUnattributed | Outcome::MutationPresentUnresolved
        )
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The audit's verdict on one job's attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditResult {
    pub status: Outcome,
    pub changed_paths: Vec<String>,
    /// Who the changes belong to: `none`, or `+`-joined parts of `own`,
    /// `batch` (another job of the batch), `out-of-plan` (declared by an
    /// implementer), `unattributed`.
    pub attribution: String,
    pub retry_allowed: bool,
    /// The paths that make the status what it is: changes outside every
    /// policy, or a failed attempt's own changes.
    pub violations: Vec<String>,
    /// Changed paths allowed only because an implementer declared them.
    pub out_of_plan_edits: Vec<String>,
    pub before_digest: String,
    pub after_digest: String,
}

impl AuditResult {
    /// The change summary for the event and the attempt record.
    pub fn change_summary(&self) -> Value {
        json!({
            "mutationStatus": self.status,
            "changedPaths": self.changed_paths,
            "attribution": self.attribution,
            "retryAllowed": self.retry_allowed,
            "violations": self.violations,
            "outOfPlanEdits": self.out_of_plan_edits,
            "beforeDigest": self.before_digest,
            "afterDigest": self.after_digest,
        })
    }
}

/// Judge one job's attempt against the batch's policies (`batch` may or may
/// not include `own`). `out_of_plan_edits` are the edits declared by the
/// batch's implementers (read with [`out_of_plan_edits`]); they count only
/// when an implementer is in the batch, and never for a path that escapes.
/// For a whole batch, [`attribute`] once and [`judge_in`] per job instead.
pub fn judge(
    changes: &Changes,
    own: &WritePolicy,
    batch: &[WritePolicy],
    out_of_plan_edits: &[String],
    attempt_succeeded: bool,
    result_present: bool,
) -> AuditResult {
    let mut policies: Vec<WritePolicy> = vec![own.clone()];
    policies.extend(batch.iter().filter(|p| *p != own).cloned());
    // Declarations count for the batch's implementers; attribute them to the
    // first implementer so the own job gets them when it is one.
    let declarer = policies.iter().position(|p| p.role == "implementer");
    let declared: Vec<(usize, Vec<String>)> = declarer
        .map(|i| vec![(i, out_of_plan_edits.to_vec())])
        .unwrap_or_default();
    let view = attribute(changes, &policies, &declared);
    judge_in(&view, 0, attempt_succeeded, result_present)
}

/// The changes of one settle round, each attributed once to the policies of
/// the batch that may have made it. Built in one pass over the changes
/// (literal allow-list entries are looked up, only glob policies are tried
/// one by one), so judging every job of a large batch stays linear.
pub struct Attributed<'a> {
    changes: &'a Changes,
    batch: &'a [WritePolicy],
    /// For each change, the indices of the policies covering it.
    owners: Vec<Vec<usize>>,
    /// For each policy, the changes it covers.
    by_policy: Vec<Vec<usize>>,
    /// For each change no policy covers, the implementers that declared it
    /// an out-of-plan edit (empty: unattributed).
    declared_by: HashMap<usize, Vec<usize>>,
    /// Per policy, the out-of-plan changes it declared.
    declared_of: Vec<Vec<usize>>,
    unattributed: Vec<usize>,
    covered: usize,
}

/// Attribute `changes` to `batch`. `declared` lists, per implementer policy
/// index, the out-of-plan edits its result declares.
pub fn attribute<'a>(
    changes: &'a Changes,
    batch: &'a [WritePolicy],
    declared: &[(usize, Vec<String>)],
) -> Attributed<'a> {
    let index = PolicyIndex::new(batch);
    let declarations = declarations(batch, declared);
    let mut view = Attributed {
        changes,
        batch,
        owners: Vec::with_capacity(changes.changed.len()),
        by_policy: vec![Vec::new(); batch.len()],
        declared_by: HashMap::new(),
        declared_of: vec![Vec::new(); batch.len()],
        unattributed: Vec::new(),
        covered: 0,
    };
    for (ci, c) in changes.changed.iter().enumerate() {
        let key = policy::normalise(&c.path).unwrap_or_default();
        let owners = index.owners(c, &key);
        // No declaration covers a symlink: a link is only as allowed as its
        // target (docs/audit.md#the-mutation-audit).
        let declared_by = declarations.get(&key).filter(|_| c.resolved.is_none());
        view.place(ci, owners, declared_by);
    }
    view
}

/// The batch's policies indexed so that a change is tried only against the
/// policies that may allow it: literal entries are looked up, glob
/// policies are tried one by one.
struct PolicyIndex {
    /// Each policy compiled; one that does not compile allows nothing, so
    /// its changes show up.
    matchers: Vec<Option<Matcher>>,
    /// The policies listing each normalised literal entry.
    literal: HashMap<String, Vec<usize>>,
    /// The policies that may create each directory above one of their
    /// entries (`out/result.md`, or `out/**`, may create `out/`).
    ancestors: HashMap<String, Vec<usize>>,
    /// The policies with at least one glob entry.
    globbed: Vec<usize>,
}

impl PolicyIndex {
    /// Index every entry of every policy of `batch`.
    fn new(batch: &[WritePolicy]) -> Self {
        let mut index = PolicyIndex {
            matchers: batch.iter().map(|p| Matcher::new(p).ok()).collect(),
            literal: HashMap::new(),
            ancestors: HashMap::new(),
            globbed: Vec::new(),
        };
        for (i, p) in batch.iter().enumerate() {
            let mut has_glob = false;
            for entry in &p.allow {
                if policy::is_glob(entry) {
                    has_glob = true;
                } else if let Some(n) = policy::normalise(entry) {
                    index.literal.entry(n).or_default().push(i);
                }
                index.add_ancestors(entry, i);
            }
            if has_glob {
                index.globbed.push(i);
            }
        }
        index
    }

    /// Record that policy `i` may create every directory above `entry`.
    fn add_ancestors(&mut self, entry: &str, i: usize) {
        let mut dir = entry;
        while let Some(cut) = dir.rfind('/') {
            dir = &dir[..cut];
            let list = self.ancestors.entry(dir.to_string()).or_default();
            if list.last() != Some(&i) {
                list.push(i);
            }
        }
    }

    /// The policies that allow change `c` (its path normalised to `key`),
    /// in index order; an atomic write's leftover temporary that none
    /// allows goes to whoever may write what it stands in for.
    fn owners(&self, c: &ChangedPath, key: &str) -> Vec<usize> {
        let p = c.path.as_str();
        let mut candidates: Vec<usize> = self.literal.get(key).cloned().unwrap_or_default();
        candidates.extend(self.globbed.iter().copied());
        if c.is_dir {
            candidates.extend(self.ancestors.get(p).into_iter().flatten().copied());
        }
        candidates.sort_unstable();
        candidates.dedup();
        let probe = format!("{p}/_");
        let owners: Vec<usize> = candidates
            .into_iter()
            .filter(|&i| self.allows(i, c, &probe))
            .collect();
        if owners.is_empty() && !c.is_dir && c.resolved.is_none() {
            if let Some(stand) = temp_stand_in(p) {
                return self.literal_owners(&stand);
            }
        }
        owners
    }

    /// Whether policy `i` allows change `c`: a symlink where both it and
    /// what it points at are allowed, a directory where something below it
    /// (`probe`, the path with `/_` added) may be written.
    fn allows(&self, i: usize, c: &ChangedPath, probe: &str) -> bool {
        let Some(m) = &self.matchers[i] else {
            return false;
        };
        let p = c.path.as_str();
        let here = m.allows(p)
            || (c.is_dir
                && (m.allows(probe) || self.ancestors.get(p).is_some_and(|l| l.contains(&i))));
        here && c.resolved.as_deref().is_none_or(|t| m.allows(t))
    }

    /// The policies that list `path` literally and allow it. A regular file
    /// `.<name>.<pid>.<hex>.tmp` is what an atomic write of `name` (the
    /// wrapper's status sidecar) leaves when it is killed between writing
    /// and renaming: it belongs to whoever may write `name` itself.
    fn literal_owners(&self, path: &str) -> Vec<usize> {
        let key = policy::normalise(path).unwrap_or_default();
        self.literal
            .get(&key)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&i| self.matchers[i].as_ref().is_some_and(|m| m.allows(path)))
            .collect()
    }
}

/// The declared out-of-plan edits, normalised, each with the implementers
/// that declared it; none count unless an implementer is in the batch.
fn declarations(
    batch: &[WritePolicy],
    declared: &[(usize, Vec<String>)],
) -> HashMap<String, Vec<usize>> {
    let mut declarations: HashMap<String, Vec<usize>> = HashMap::new();
    if !batch.iter().any(|p| p.role == "implementer") {
        return declarations;
    }
    for (i, paths) in declared {
        for p in paths
            .iter()
            .filter_map(|p| policy::normalise(p))
            .filter(|p| !p.is_empty())
        {
            declarations.entry(p).or_default().push(*i);
        }
    }
    declarations
}

impl Attributed<'_> {
    /// Record change `ci` under the policies that own it; one that no
    /// policy covers belongs to the implementers that declared it
    /// (`declared_by`), or else to no one: unattributed.
    fn place(&mut self, ci: usize, owners: Vec<usize>, declared_by: Option<&Vec<usize>>) {
        if owners.is_empty() {
            match declared_by {
                Some(by) => {
                    for &i in by {
                        self.declared_of[i].push(ci);
                    }
                    self.declared_by.insert(ci, by.clone());
                }
                None => self.unattributed.push(ci),
            }
        } else {
            self.covered += 1;
            for &i in &owners {
                self.by_policy[i].push(ci);
            }
        }
        self.owners.push(owners);
    }

    /// Who the changes job `own` sees belong to, as its summary names them:
    /// `none`, or the `+`-joined parts in name order.
    fn attribution(&self, own: usize) -> String {
        let mine = &self.by_policy[own];
        let mut parts: BTreeSet<&str> = BTreeSet::new();
        if !mine.is_empty() {
            parts.insert("own");
        }
        if self.covered > mine.len() || mine.iter().any(|&ci| self.owners[ci].len() > 1) {
            parts.insert("batch");
        }
        if !self.declared_by.is_empty() {
            parts.insert("out-of-plan");
        }
        if !self.unattributed.is_empty() {
            parts.insert("unattributed");
        }
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.into_iter().collect::<Vec<_>>().join("+")
        }
    }
}

/// The path an atomic write's leftover temporary `dir/.<name>.<pid>.<hex>.tmp`
/// stands in for: `dir/<name>`.
fn temp_stand_in(path: &str) -> Option<String> {
    let (dir, file) = match path.rfind('/') {
        Some(cut) => (&path[..=cut], &path[cut + 1..]),
        None => ("", path),
    };
    let name = super::own::own_temp_of(file.as_bytes())?;
    Some(format!("{dir}{}", std::str::from_utf8(name).ok()?))
}

/// Judge the attempt of the job whose policy is `batch[own]`, in time
/// proportional to its own changes and the batch's unattributed ones. Its
/// summary lists those changes, not the whole batch's.
pub fn judge_in(
    view: &Attributed,
    own: usize,
    attempt_succeeded: bool,
    result_present: bool,
) -> AuditResult {
    let policy = &view.batch[own];
    let changed = &view.changes.changed;
    let mut own_mutations = own_work(view, own);
    let mut mine: Vec<usize> = view.by_policy[own].clone();
    let mut out_of_plan = Vec::new();
    for &ci in &view.declared_of[own] {
        out_of_plan.push(changed[ci].path.clone());
        mine.push(ci);
        if policy.role == "implementer" {
            own_mutations.push(changed[ci].path.clone());
        }
    }
    let violations: Vec<String> = view
        .unattributed
        .iter()
        .map(|&ci| changed[ci].path.clone())
        .collect();
    mine.extend(view.unattributed.iter().copied());
    mine.sort_unstable();
    mine.dedup();
    let failed = !attempt_succeeded || !result_present;
    let (status, violations) = outcome(violations, own_mutations, failed);
    AuditResult {
        status,
        changed_paths: mine.iter().map(|&ci| changed[ci].path.clone()).collect(),
        attribution: view.attribution(own),
        retry_allowed: status == Outcome::FailedNoMutation,
        violations,
        out_of_plan_edits: out_of_plan,
        before_digest: view.changes.before_digest.clone(),
        after_digest: view.changes.after_digest.clone(),
    }
}

/// The paths among job `own`'s covered changes that show its worker did
/// something: not the log and status sidecar the wrapper writes for every
/// attempt (nor the temporary of a sidecar write it was killed in), and not
/// a directory that merely appeared.
fn own_work(view: &Attributed, own: usize) -> Vec<String> {
    let bookkeeping: HashSet<&str> = view.batch[own]
        .allow
        .iter()
        .filter(|p| p.ends_with(sidecar::LOG) || p.ends_with(sidecar::STATUS))
        .map(String::as_str)
        .collect();
    let mut work = Vec::new();
    for &ci in &view.by_policy[own] {
        let c = &view.changes.changed[ci];
        // A directory that appeared holds no content of its own: making the
        // ancestors of an allowed path (`mkdir -p out`) is no sign a failed
        // attempt left work behind. Files below it are reported in their own
        // right, and a directory outside every policy is still a violation.
        let bare_dir = c.is_dir && c.kind == ChangeKind::Added;
        let kept_book = bookkeeping.contains(c.path.as_str())
            || (!c.is_dir
                && temp_stand_in(&c.path).is_some_and(|s| bookkeeping.contains(s.as_str())));
        if !kept_book && !bare_dir {
            work.push(c.path.clone());
        }
    }
    work
}

/// The verdict (docs/audit.md#the-mutation-audit), with the paths that make
/// it: any change outside every policy fails the contract; otherwise a
/// failed attempt that left work of its own is unresolved, and one that
/// left none may retry.
fn outcome(
    unattributed: Vec<String>,
    own_mutations: Vec<String>,
    failed: bool,
) -> (Outcome, Vec<String>) {
    if !unattributed.is_empty() {
        (Outcome::ContractFailedUnattributed, unattributed)
    } else if failed && !own_mutations.is_empty() {
        (Outcome::MutationPresentUnresolved, own_mutations)
    } else if failed {
        (Outcome::FailedNoMutation, unattributed)
    } else {
        (Outcome::Ok, unattributed)
    }
}

/// `implementation.outOfPlanEdits[].file` of an implementer's JSON result;
/// empty for anything else.
pub fn out_of_plan_edits(result_file: &Path) -> Vec<String> {
    let Ok(text) = fs::read_to_string(result_file) else {
        return Vec::new();
    };
    let Ok(doc) = serde_json::from_str::<Value>(&text) else {
        return Vec::new();
    };
    doc.pointer("/implementation/outOfPlanEdits")
        .and_then(Value::as_array)
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r.get("file").and_then(Value::as_str))
                .filter(|f| !f.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::compare::change;

    fn pol(role: &str, allow: &[&str]) -> WritePolicy {
        let mut p = WritePolicy {
            role: role.into(),
            allow: allow.iter().map(|s| s.to_string()).collect(),
            digest: String::new(),
        };
        p.digest = policy::digest_of(&p);
        p
    }

    fn changes_of(paths: &[&str]) -> Changes {
        Changes {
            changed: paths
                .iter()
                .map(|p| change(p.to_string(), ChangeKind::Modified))
                .collect(),
            before_digest: "sha256:b".into(),
            after_digest: "sha256:a".into(),
        }
    }

    fn worker() -> WritePolicy {
        pol(
            "analyst",
            &["p/w1.md.log", "p/w1.md.status.json", "r/w1.json"],
        )
    }

    /// A wrapper killed mid-write leaves its sidecar's temporary: its job's
    /// (issue 12: it failed every job of the stage, for ever). Near misses:
    /// another name's temporary, a directory, a file not shaped so.
    #[test]
    fn a_left_temporary_of_an_allowed_file_is_that_files_owners() {
        let batch = vec![worker(), pol("analyst", &["p/w2.md.status.json"])];
        let temp = "p/.w1.md.status.json.21974.6578c8a5b983433fa2931fe61530e700.tmp";
        let c = changes_of(&[temp]);
        let view = attribute(&c, &batch, &[]);
        let r = judge_in(&view, 0, true, true);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.changed_paths, [temp]);
        // Bookkeeping, as the sidecar is: a failed attempt that left only
        // it may be retried.
        let failed = judge_in(&view, 0, false, false);
        assert_ne!(failed.status.as_str(), "mutation-present-unresolved");
        for near in [
            "p/.w3.md.status.json.1.ab.tmp",
            "p/.w1.md.status.json.x.ab.tmp",
            "p/w1.md.status.json.1.ab.tmp",
            ".w1.md.status.json.1.ab.tmp",
        ] {
            let c = changes_of(&[near]);
            let view = attribute(&c, &batch, &[]);
            let r = judge_in(&view, 0, true, true);
            assert_eq!(r.violations, [near], "{near}");
        }
        let mut dir = change(temp.to_string(), ChangeKind::Added);
        dir.is_dir = true;
        let c = Changes {
            changed: vec![dir],
            ..changes_of(&[])
        };
        let view = attribute(&c, &batch, &[]);
        assert_eq!(judge_in(&view, 0, true, true).violations, [temp]);
    }

    #[test]
    fn one_attribution_serves_every_job_of_the_batch() {
        let policies: Vec<WritePolicy> = (0..50)
            .map(|i| {
                pol(
                    "analyst",
                    &[&format!("r/w{i}.json"), &format!("p/w{i}.md.log")],
                )
            })
            .chain([pol("implementer", &["src/**"])])
            .collect();
        let mut paths: Vec<String> = (0..50).map(|i| format!("r/w{i}.json")).collect();
        paths.extend([
            "src/a.rs".to_string(),
            "notes.txt".to_string(),
            "docs/x.md".to_string(),
        ]);
        let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
        let c = changes_of(&refs);
        let declared = vec![(50, vec!["docs/x.md".to_string()])];
        let view = attribute(&c, &policies, &declared);
        let r = judge_in(&view, 7, true, true);
        assert_eq!(r.status.as_str(), "contract-failed-unattributed");
        assert_eq!(r.violations, ["notes.txt"]);
        assert_eq!(r.changed_paths, ["r/w7.json", "notes.txt"]);
        let imp = judge_in(&view, 50, true, true);
        assert_eq!(imp.out_of_plan_edits, ["docs/x.md"]);
        assert!(imp.changed_paths.contains(&"src/a.rs".to_string()));
        assert!(
            imp.attribution.contains("out-of-plan"),
            "{}",
            imp.attribution
        );
    }

    #[test]
    fn outcome_ok_with_batch_attribution() {
        let other = pol("analyst", &["r/w2.json"]);
        let c = changes_of(&["r/w1.json", "r/w2.json"]);
        let r = judge(&c, &worker(), &[worker(), other], &[], true, true);
        assert_eq!(r.status.as_str(), "ok");
        assert_eq!(r.attribution, "batch+own");
        assert!(!r.retry_allowed);
        let s = r.change_summary();
        assert_eq!(s["mutationStatus"], "ok");
        // A job's summary lists its own changes (and any unattributed ones),
        // not the whole batch's: a batch of N jobs logs N summaries.
        assert_eq!(s["changedPaths"], json!(["r/w1.json"]));
        assert_eq!(s["beforeDigest"], "sha256:b");
        assert_eq!(s["afterDigest"], "sha256:a");
        for k in ["attribution", "retryAllowed", "violations"] {
            assert!(s.get(k).is_some(), "{k}");
        }
    }

    #[test]
    fn outcome_failed_no_mutation_allows_retry() {
        // Only the wrapper's own log and status changed.
        let c = changes_of(&["p/w1.md.log", "p/w1.md.status.json"]);
        let r = judge(&c, &worker(), &[worker()], &[], true, false);
        assert_eq!(r.status.as_str(), "failed-no-mutation");
        assert!(r.retry_allowed);
        let r = judge(&changes_of(&[]), &worker(), &[worker()], &[], false, true);
        assert_eq!(r.status.as_str(), "failed-no-mutation");
    }

    #[test]
    fn outcome_mutation_present_unresolved() {
        let c = changes_of(&["p/w1.md.log", "r/w1.json"]);
        let r = judge(&c, &worker(), &[worker()], &[], true, false);
        assert_eq!(r.status.as_str(), "mutation-present-unresolved");
        assert_eq!(r.violations, vec!["r/w1.json"]);
        assert!(!r.retry_allowed);
        // Another job's writes are not this failed attempt's mutation.
        let other = pol("analyst", &["r/w2.json"]);
        let c = changes_of(&["r/w2.json"]);
        let r = judge(&c, &worker(), &[worker(), other], &[], false, true);
        assert_eq!(r.status.as_str(), "failed-no-mutation");
    }

    #[test]
    fn a_failed_attempt_that_only_made_directories_left_nothing() {
        let mut c = changes_of(&[]);
        for d in ["r", "r/sub"] {
            let mut x = change(d.to_string(), ChangeKind::Added);
            x.is_dir = true;
            c.changed.push(x);
        }
        let own = pol("analyst", &["r/sub/w1.json"]);
        let r = judge(&c, &own, std::slice::from_ref(&own), &[], true, false);
        assert_eq!(r.status.as_str(), "failed-no-mutation");
        assert!(r.retry_allowed);
        // Outside every policy a new directory is still a violation.
        let other = pol("analyst", &["elsewhere.json"]);
        let r = judge(&c, &other, std::slice::from_ref(&other), &[], true, false);
        assert_eq!(r.status.as_str(), "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["r", "r/sub"]);
    }

    #[test]
    fn outcome_unattributed_wins_over_failure() {
        let c = changes_of(&["r/w1.json", "README.md"]);
        let r = judge(&c, &worker(), &[worker()], &[], false, false);
        assert_eq!(r.status.as_str(), "contract-failed-unattributed");
        assert_eq!(r.violations, vec!["README.md"]);
        assert!(!r.retry_allowed);
    }

    #[test]
    fn declared_out_of_plan_edits_are_allowed_and_recorded() {
        let tmp = tempfile::tempdir().unwrap();
        let result = tmp.path().join("r.json");
        fs::write(
            &result,
            r#"{"implementation":{"outOfPlanEdits":[{"file":"docs/x.md","why":"typo"},{"file":""},{"nofile":1}]}}"#,
        )
        .unwrap();
        let declared = out_of_plan_edits(&result);
        assert_eq!(declared, vec!["docs/x.md"]);
        let own = pol("implementer", &["src/**"]);
        let c = changes_of(&["docs/x.md", "src/a.rs"]);
        let r = judge(&c, &own, std::slice::from_ref(&own), &declared, true, true);
        assert_eq!(r.status.as_str(), "ok");
        assert_eq!(r.attribution, "out-of-plan+own");
        assert_eq!(r.out_of_plan_edits, vec!["docs/x.md"]);
        assert_eq!(r.change_summary()["outOfPlanEdits"], json!(["docs/x.md"]));
        // Declarations count only where an implementer is in the batch.
        let v = pol("verifier", &["src/**"]);
        let r = judge(&c, &v, std::slice::from_ref(&v), &declared, true, true);
        assert_eq!(r.violations, vec!["docs/x.md"]);
        // Unparsable or non-JSON results declare nothing.
        fs::write(&result, "not json").unwrap();
        assert!(out_of_plan_edits(&result).is_empty());
        assert!(out_of_plan_edits(&tmp.path().join("missing.json")).is_empty());
    }

    #[test]
    fn outcomes_serialise_to_their_wire_names() {
        for (o, wire) in [
            (Outcome::Ok, "ok"),
            (Outcome::FailedNoMutation, "failed-no-mutation"),
            (
                Outcome::ContractFailedUnattributed,
                "contract-failed-unattributed",
            ),
            (
                Outcome::MutationPresentUnresolved,
                "mutation-present-unresolved",
            ),
        ] {
            assert_eq!(serde_json::to_value(o).unwrap(), json!(wire));
            assert_eq!(o.as_str(), wire);
            assert_eq!(o.to_string(), wire);
            assert_eq!(serde_json::from_value::<Outcome>(json!(wire)).unwrap(), o);
            assert_eq!(
                o.blocks(),
                wire.contains('-') && wire != "failed-no-mutation"
            );
        }
    }
}
