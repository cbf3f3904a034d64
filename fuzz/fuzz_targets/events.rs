//! A lead events log: okstra::state::events::read_all, which resume reads
//! (torn and foreign lines are skipped, never an error).
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra_fuzz::project;

fuzz_target!(|data: &[u8]| {
    let path = project().write("run/lead-events.jsonl", data);
    let _ = okstra::state::events::read_all(&path);
});
