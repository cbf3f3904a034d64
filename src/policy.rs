//! TEMPORARY stub (replaced by the h-policy branch).
use crate::plan::WritePolicy;
pub struct PolicyInputs<'a> {
    pub role: &'a str,
    pub artifacts: &'a [String],
    pub worktree: Option<&'a str>,
    pub planned_paths: &'a [String],
    pub auxiliary_roots: &'a [String],
}
pub fn build(i: &PolicyInputs) -> WritePolicy {
    let mut allow: Vec<String> = i.artifacts.to_vec();
    allow.sort();
    allow.dedup();
    let v = serde_json::json!({"role": i.role, "allow": allow});
    WritePolicy {
        role: i.role.into(),
        allow,
        digest: crate::canonical::digest(&v),
    }
}
pub fn is_glob(p: &str) -> bool {
    p.contains(['*', '?', '[', '{'])
}
pub fn overlap(a: &WritePolicy, b: &WritePolicy) -> Option<String> {
    a.allow.iter().find(|p| b.allow.contains(p)).cloned()
}
