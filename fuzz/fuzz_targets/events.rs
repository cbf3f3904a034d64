//! A lead events log as resume reads it: okstra::state::journal::Lines of
//! okstra::exec::event::Event (a torn, foreign or unknown line is skipped,
//! never an error or a panic), replayed against a plan of three jobs
//! (okstra::exec::replay::replay) as exec replays it on resume: forged or
//! out-of-order records are named, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::exec::event::Event;
use okstra::exec::jobs::Jobs;
use okstra::plan::Plan;
use okstra::state::journal::Lines;
use okstra_fuzz::project;

/// The plan the log is replayed against (tests/it/fixtures/plans).
const PLAN: &str = include_str!("../../tests/it/fixtures/plans/v2-pipeline.json");

fuzz_target!(|data: &[u8]| {
    let path = project().write("run/lead-events.jsonl", data);
    let mut lines = Lines::<Event>::open(&path).expect("the log is there");
    let events: Vec<Event> = lines.by_ref().collect();
    let _ = lines.finish();
    for event in &events {
        // Every event read back writes again as one line.
        let line = serde_json::to_string(event).expect("an event read is an event written");
        assert!(!line.contains('\n'));
    }
    let mut plan: Plan = serde_json::from_str(PLAN).expect("the fixture plan reads");
    let jobs = Jobs::take(&mut plan);
    let replayed = okstra::exec::replay::replay(&plan, &jobs, events);
    assert_eq!(replayed.histories.len(), jobs.len());
});
