//! A plan file: `okstra show` (the plan reader, then the review summary),
//! exec's lean reading of the same file, which must agree with it, and
//! `okstra validate --kind plan`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::diag::Diagnostics;
use okstra::document::Kind as DocumentKind;
use okstra_fuzz::{project, render, validate};

fuzz_target!(|data: &[u8]| {
    let path = project().write("plan.json", data);
    let lean = okstra::exec::load::load_lean(&path);
    match okstra::exec::load::load(&path) {
        Ok(loaded) => {
            let _ = okstra::render::summary(&loaded.plan, "plan.json");
            // exec reads the same plan, job for job.
            let lean = lean.unwrap_or_else(|d| panic!("exec refuses a plan show reads: {d:?}"));
            let keys: Vec<&str> = loaded.plan.jobs().map(|j| j.key.as_str()).collect();
            let lean_keys: Vec<&str> = (0..lean.jobs.len()).map(|i| lean.jobs.key(i)).collect();
            assert_eq!(keys, lean_keys, "exec and show read different jobs");
        }
        Err(d) => {
            let refused = lean.err().map(|l| l.code);
            assert_eq!(
                refused,
                Some(d.code),
                "exec and show judge the plan differently"
            );
            render(&Diagnostics::from(d));
        }
    }
    validate("plan.json", data, DocumentKind::Plan);
});
