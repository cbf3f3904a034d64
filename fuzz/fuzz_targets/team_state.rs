//! A team-state file: the store's reader (what exec and `okstra status`
//! read, an error becoming `exec/state`) and `okstra validate --kind
//! team-state`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::cli::DocumentKind;
use okstra::diag::{Code, Diagnostic, Diagnostics};
use okstra::state::team_state::{dispatch_ids, find_worker, TeamStateStore};
use okstra_fuzz::{project, render, validate};

fuzz_target!(|data: &[u8]| {
    let path = project().write("run/team-state.json", data);
    match TeamStateStore::open(path).read() {
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
