//! Parsing a 10,000-worker job spec (about 2 MB of TOML) with source spans,
//! then schema validation. Run with `cargo bench --bench parse_spec`.
//! Prints the best of several runs; no external harness needed.

use okstra::schema::{validate, SchemaKind};
use okstra::source::{Format, SourceFile};
use std::time::{Duration, Instant};

fn spec_toml(workers: usize) -> String {
    let mut s = String::from(
        "#:schema ./schemas/jobs.schema.json\n[defaults]\nidleTimeoutSeconds = 30\n\n",
    );
    for i in 0..workers {
        s.push_str(&format!(
            "[[workers]]\nworkerId = \"w{i}\"\nrole = \"analyst\"\nprovider = \"command\"\n\
             promptPath = \".okstra/prompts/w{i}.md\"\nresultPath = \".okstra/results/w{i}.md\"\n\
             command = [\"sh\", \"-c\", \"echo {i} > out-{i}.txt\"]\n\n"
        ));
    }
    s
}

fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> Duration {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            let out = f();
            let d = t.elapsed();
            drop(std::hint::black_box(out));
            d
        })
        .min()
        .unwrap_or_default()
}

fn main() {
    let toml = spec_toml(10_000);
    let (value, _) = SourceFile::parse("spec.toml", toml.clone(), Format::Toml).expect("valid");
    let json = serde_json::to_string_pretty(&value).expect("json");
    println!("spec: {} bytes TOML, {} bytes JSON", toml.len(), json.len());
    let t = best(7, || {
        SourceFile::parse("spec.toml", toml.clone(), Format::Toml).ok()
    });
    println!("parse TOML with spans: {t:?}");
    let t = best(7, || {
        SourceFile::parse("spec.json", json.clone(), Format::Json).ok()
    });
    println!("parse JSON with spans: {t:?}");
    let t = best(7, || validate(SchemaKind::Jobs, &value));
    println!("validate jobs schema:  {t:?}");
}
