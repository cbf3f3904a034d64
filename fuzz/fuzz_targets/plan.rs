//! A plan file: `okstra show` (okstra::cli::read_plan, then the review
//! summary) and `okstra validate --kind plan` (schema and digest).
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::cli::DocumentKind;
use okstra::diag::Diagnostics;
use okstra_fuzz::{project, render, validate};

fuzz_target!(|data: &[u8]| {
    let path = project().write("plan.json", data);
    match okstra::cli::read_plan(&path) {
        Ok((_, plan)) => {
            let _ = okstra::render::summary(&plan, "plan.json");
        }
        Err(d) => render(&Diagnostics::from(d)),
    }
    validate("plan.json", data, DocumentKind::Plan);
});
