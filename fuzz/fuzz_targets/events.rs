//! A lead events log as resume replays it: okstra::state::journal::Lines of
//! okstra::exec::event::Event (a torn, foreign or unknown line is skipped,
//! never an error or a panic).
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::exec::event::Event;
use okstra::state::journal::Lines;
use okstra_fuzz::project;

fuzz_target!(|data: &[u8]| {
    let path = project().write("run/lead-events.jsonl", data);
    let mut lines = Lines::<Event>::open(&path).expect("the log is there");
    for event in lines.by_ref() {
        // Every event read back writes again as one line.
        let line = serde_json::to_string(&event).expect("an event read is an event written");
        assert!(!line.contains('\n'));
    }
    let _ = lines.finish();
});
