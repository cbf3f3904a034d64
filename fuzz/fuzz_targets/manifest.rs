//! A run manifest: `okstra validate --kind manifest`, then `okstra plan`
//! with it, for a spec and in roster mode (no spec).
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::document::Kind as DocumentKind;
use okstra_fuzz::{project, validate};

fuzz_target!(|data: &[u8]| {
    validate("run-manifest.json", data, DocumentKind::Manifest);
    let p = project();
    p.write("run/fuzz-manifest.json", data);
    p.plan("run/fuzz-manifest.json", Some("fixed.toml"));
    p.plan("run/fuzz-manifest.json", None);
});
