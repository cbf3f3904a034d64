//! Invocation metadata: `okstra validate --kind metadata`, then `okstra
//! plan` with it beside both prompts of a spec, under a v1 and a v2
//! manifest (the authority checks).
#![no_main]
use libfuzzer_sys::fuzz_target;
use okstra::document::Kind as DocumentKind;
use okstra_fuzz::{project, validate};

fuzz_target!(|data: &[u8]| {
    validate("a.md.meta.json", data, DocumentKind::Metadata);
    let p = project();
    p.write("prompts/a.md.meta.json", data);
    p.write("prompts/b.md.meta.json", data);
    p.plan("run/run-manifest.json", Some("fixed.toml"));
    p.plan("run/v2-manifest.json", Some("fixed.toml"));
});
