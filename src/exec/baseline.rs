//! A stage's audit baseline across execs (docs/audit.md#the-stages-baseline):
//! where its file is kept, and what an exec does with the file it finds
//! there, given what the events log recorded of it.
//!
//! Exec writes the file and syncs it, then records the sha256 of its bytes
//! in a `stage-snapshot-written` event ahead of the stage's first dispatch
//! record, durable with it before anything of the stage runs. A file is used only where that record vouches for its
//! bytes. A file without a record (exec died between the two) was never
//! vouched for and is not even read: a fresh walk replaces it, which is sound
//! only while nothing of the stage was dispatched, since until then no
//! worker of the stage can have changed the tree. Anything else is
//! `audit/incomplete`: a baseline taken after the workers ran would take
//! their changes in.

use crate::plan::Plan;

/// Where stage `si`'s baseline is kept, as the plan names paths:
/// `snapshots/` beside team-state, the file named by the plan and the stage.
pub fn path_of(plan: &Plan, si: usize) -> String {
    let short = plan.digest.trim_start_matches("sha256:");
    let name = format!("{}-stage-{}.json", &short[..short.len().min(16)], si + 1);
    match plan.run.team_state_path.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/snapshots/{name}"),
        None => format!("snapshots/{name}"),
    }
}

/// What exec found where a stage's baseline is kept.
#[derive(Debug)]
pub enum OnDisk<S> {
    Missing,
    /// It could not be opened or read to its end: why.
    Unreadable(String),
    /// Read to its end: the sha256 of its bytes, and the snapshot they hold.
    Read {
        sha256: String,
        snapshot: S,
    },
    /// Read to its end, but its bytes hold no snapshot this okstra reads:
    /// their sha256, and why.
    Unparsable {
        sha256: String,
        why: String,
    },
}

/// What exec does for a stage's baseline.
#[derive(Debug, PartialEq)]
pub enum Choice<S> {
    /// The stored one: the record vouches for it.
    Use(S),
    /// Walk the tree now, then store and record the walk.
    Fresh,
    /// The audit cannot vouch for the stage: why.
    Incomplete(String),
}

/// The choice for a stage whose file the events log records with sha256
/// `recorded` (if at all), where `on_disk` looks at the file (asked only
/// when there is a record) and `dispatched_before` says whether an earlier
/// exec dispatched any job of the stage.
pub fn choose<S>(
    recorded: Option<&str>,
    on_disk: impl FnOnce() -> OnDisk<S>,
    dispatched_before: bool,
) -> Choice<S> {
    let Some(want) = recorded else {
        return if dispatched_before {
            Choice::Incomplete(
                "none was recorded, and an earlier exec dispatched jobs of the stage \
                 (the tree may already hold their changes)"
                    .into(),
            )
        } else {
            Choice::Fresh
        };
    };
    match on_disk() {
        OnDisk::Missing => {
            Choice::Incomplete("it is missing, though recorded before the stage started".into())
        }
        OnDisk::Unreadable(why) => Choice::Incomplete(why),
        OnDisk::Read { sha256, .. } | OnDisk::Unparsable { sha256, .. } if sha256 != want => {
            Choice::Incomplete(format!(
                "it changed since exec wrote it (sha256 {sha256}, recorded {want})"
            ))
        }
        OnDisk::Unparsable { why, .. } => Choice::Incomplete(why),
        OnDisk::Read { snapshot, .. } => Choice::Use(snapshot),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaa";

    fn read(sha256: &str) -> impl FnOnce() -> OnDisk<&'static str> + '_ {
        move || OnDisk::Read {
            sha256: sha256.into(),
            snapshot: "stored",
        }
    }

    fn never() -> OnDisk<&'static str> {
        panic!("a file without a record is never read")
    }

    fn incomplete<S>(c: Choice<S>) -> String {
        match c {
            Choice::Incomplete(why) => why,
            Choice::Use(_) => panic!("used"),
            Choice::Fresh => panic!("fresh"),
        }
    }

    #[test]
    fn a_recorded_file_whose_bytes_match_is_used_whatever_ran_before() {
        for dispatched in [false, true] {
            assert_eq!(choose(Some(A), read(A), dispatched), Choice::Use("stored"));
        }
    }

    #[test]
    fn a_recorded_file_missing_changed_or_unreadable_is_incomplete_never_fresh() {
        for dispatched in [false, true] {
            let why = incomplete(choose(Some(A), || OnDisk::<()>::Missing, dispatched));
            assert!(why.contains("missing"), "{why}");
            let why = incomplete(choose(Some(A), read("bbbb"), dispatched));
            assert!(why.contains("changed") && why.contains("bbbb"), "{why}");
            let why = incomplete(choose(
                Some(A),
                || OnDisk::<()>::Unreadable("EIO".into()),
                dispatched,
            ));
            assert_eq!(why, "EIO");
        }
        // Bytes as recorded that no longer parse (another okstra's format),
        // and bytes that do not parse and are not as recorded.
        let old = |sha256: &str| {
            let sha256 = sha256.to_string();
            move || OnDisk::<()>::Unparsable {
                sha256,
                why: "snapshot version 1".into(),
            }
        };
        let why = incomplete(choose(Some(A), old(A), false));
        assert_eq!(why, "snapshot version 1");
        let why = incomplete(choose(Some(A), old("bbbb"), false));
        assert!(why.contains("changed"), "{why}");
    }

    #[test]
    fn without_a_record_a_fresh_walk_only_before_the_stage_dispatched_anything() {
        // Exec died between the file and its record, or never got that far:
        // no worker of the stage ran, so the tree is still the stage's.
        assert_eq!(choose(None, never, false), Choice::Fresh);
        // Some job of the stage was dispatched: its worker may have changed
        // the tree, and a fresh walk would take that in.
        let why = incomplete(choose(None, never, true));
        assert!(why.contains("dispatched"), "{why}");
    }

    #[test]
    fn the_file_sits_beside_team_state_named_by_plan_and_stage() {
        let mut plan: Plan = serde_json::from_value(serde_json::json!({
            "formatVersion": crate::plan::FORMAT_VERSION, "okstraVersion": "0", "createdAt": "t",
            "projectRoot": "/", "run": {"taskKey": "k", "manifestPath": "m",
                "teamStatePath": "run/team-state.json", "leadEventsPath": "e", "errorLogPath": "x",
                "terminalBackend": "cli-wrapper", "mode": "spec"},
            "inputs": [], "policy": {"maxAttempts": 2}, "stages": [],
            "digest": format!("sha256:{}", "0123456789abcdef".repeat(4))
        }))
        .unwrap();
        assert_eq!(
            path_of(&plan, 1),
            "run/snapshots/0123456789abcdef-stage-2.json"
        );
        plan.run.team_state_path = "team-state.json".into();
        assert_eq!(path_of(&plan, 0), "snapshots/0123456789abcdef-stage-1.json");
    }
}
