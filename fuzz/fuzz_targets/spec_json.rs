//! A JSON job spec: `okstra validate` (read, schema, identity, rules that
//! need no manifest) and `okstra plan` (all of it) on the fuzzed file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::document::Kind as DocumentKind;
use okstra_fuzz::{project, validate};

fuzz_target!(|data: &[u8]| {
    validate("spec.json", data, DocumentKind::Jobs);
    let p = project();
    p.write("spec.json", data);
    p.plan("run/run-manifest.json", Some("spec.json"));
    p.plan("run/v2-manifest.json", Some("spec.json"));
});
