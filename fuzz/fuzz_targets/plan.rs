//! A plan file: `okstra show` (exec's reader, then the review summary) and
//! `okstra validate --kind plan`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::cli::DocumentKind;
use okstra::diag::Diagnostics;
use okstra_fuzz::{project, render, validate};

fuzz_target!(|data: &[u8]| {
    let path = project().write("plan.json", data);
    match okstra::exec::load::load(&path) {
        Ok(loaded) => {
            let _ = okstra::render::summary(&loaded.plan, "plan.json");
        }
        Err(d) => render(&Diagnostics::from(d)),
    }
    validate("plan.json", data, DocumentKind::Plan);
});
