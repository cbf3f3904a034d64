//! A team-state file: the store's reader (what exec and `okstra status`
//! read, an error becoming `exec/state`) and `okstra validate --kind
//! team-state`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::diag::{Code, Diagnostic, Diagnostics};
use okstra::document::Kind as DocumentKind;
use okstra::state::team_state::{dispatch_ids, find_worker, TeamStateStore};
use okstra::state::StateError;
use okstra_fuzz::{project, render, validate};

/// An error as a category, without its place: the streamed check may
/// place a column (or a line, at a line's end) one byte off the parse of
/// the whole file.
fn category(e: &StateError) -> String {
    match e {
        StateError::Parse { source, .. } => {
            let text = source.to_string();
            let message = text.split(" at line ").next().unwrap_or_default();
            format!("parse {:?}: {message}", source.classify())
        }
        StateError::NotAnArray { key, .. } => format!("not an array: {key}"),
        other => other.to_string(),
    }
}

fuzz_target!(|data: &[u8]| {
    let path = project().write("run/team-state.json", data);
    let store = TeamStateStore::open(path);
    // exec checks the file by streaming it (`check`), and the other readers
    // build it (`read`): the same files pass, and fail alike.
    let checked = store.check().map_err(|e| category(&e));
    let read = store.read();
    assert_eq!(
        checked,
        read.as_ref().map(drop).map_err(category),
        "check and read disagree on {:?}",
        String::from_utf8_lossy(data)
    );
    match read {
        Ok(doc) => {
            let _ = find_worker(&doc, "a");
            let _ = dispatch_ids(&doc);
        }
        Err(e) => render(&Diagnostics::from(
            Diagnostic::new(Code::ExecState, format!("cannot read team-state: {e}"))
                .in_file("run/team-state.json"),
        )),
    }
    validate("team-state.json", data, DocumentKind::TeamState);
});
