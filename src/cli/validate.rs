//! `okstra validate` and `okstra schema`.

use super::report;
use crate::compile::{self, conformance, Ctx, Loaded};
use crate::diag::{Code, Diagnostics, ExitStatus, Format};
use crate::schema::SchemaKind;
use crate::source::Format as SourceFormat;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Jobs,
    Manifest,
    Metadata,
    Plan,
    TeamState,
    ImplementationPlan,
}

#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Files to check.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// What the files are; guessed from the name and content when omitted.
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
    /// The project root paths inside the files are relative to.
    #[arg(long, default_value = ".")]
    pub project_root: PathBuf,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct SchemaArgs {
    /// Print this schema (jobs, manifest, metadata, plan or team-state)
    /// byte for byte; without it, list the schemas (or, with --out, write
    /// them all).
    pub name: Option<String>,
    /// Write the schema files into this directory instead of printing.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

fn guess(path: &Path, doc: Option<&serde_json::Value>) -> Kind {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    if name.ends_with(".meta.json") {
        return Kind::Metadata;
    }
    if name.ends_with(".toml") {
        return Kind::Jobs;
    }
    let has = |k: &str| doc.and_then(|d| d.get(k)).is_some();
    if has("formatVersion") && has("digest") {
        Kind::Plan
    } else if has("implementationPlanning") {
        Kind::ImplementationPlan
    } else if has("taskKey") {
        Kind::Manifest
    } else if has("workerDispatches")
        || (has("workers") && !has("defaults") && name.contains("team"))
    {
        Kind::TeamState
    } else if has("invocationId") {
        Kind::Metadata
    } else {
        Kind::Jobs
    }
}

pub fn validate(args: &ValidateArgs) -> ExitStatus {
    let root = compile::paths::canonical_root(&args.project_root);
    let mut all = Diagnostics::default();
    let mut checked = Vec::new();
    for file in &args.files {
        let mut ctx = Ctx::new(root.clone());
        let display = file.display().to_string();
        let format = SourceFormat::for_path(file);
        let Some(mut loaded) = ctx.load("input", &display, file, format) else {
            all.extend(ctx.diags.0);
            continue;
        };
        let kind = args.kind.unwrap_or_else(|| guess(file, Some(&loaded.doc)));
        check_document(&mut ctx, &mut loaded, kind, file);
        if ctx.diags.is_empty() {
            checked.push((display, kind));
        }
        all.extend(in_line_order(ctx.diags.0));
    }
    if !all.is_empty() {
        return report(&all, args.format);
    }
    match args.format {
        Format::Text => {
            for (file, kind) in &checked {
                outln!("ok: {file} ({})", kind_name(*kind));
            }
        }
        Format::Json => outln!(
            "{}",
            serde_json::json!({"ok": true, "files": checked.iter().map(|(f, k)| serde_json::json!({"file": f, "kind": kind_name(*k)})).collect::<Vec<_>>()})
        ),
    }
    ExitStatus::Success
}

/// The checks `okstra validate` runs on one parsed file of `kind`; problems
/// go to `ctx`. (A jobs document's workers are moved out of `loaded.doc`;
/// a plan is read again from `file`, as exec reads it.)
pub fn check_document(ctx: &mut Ctx, loaded: &mut Loaded, kind: Kind, file: &Path) {
    match kind {
        Kind::Jobs => compile::check_spec_alone(ctx, loaded),
        Kind::Manifest => ctx.schema_check(SchemaKind::Manifest, loaded, &|_| false),
        Kind::Metadata => ctx.schema_check(SchemaKind::Metadata, loaded, &|_| false),
        Kind::TeamState => ctx.schema_check(SchemaKind::TeamState, loaded, &|_| false),
        // The same reading as exec's, so both refuse a plan alike.
        Kind::Plan => {
            if let Err(d) = crate::exec::load::load(file) {
                let pointer = match (&d.pointer, d.code) {
                    (Some(p), _) => p.clone(),
                    (None, Code::PlanVersion) => "/formatVersion".into(),
                    (None, Code::PlanDigestMismatch) => "/digest".into(),
                    _ => String::new(),
                };
                let mut located = ctx.at(&loaded.src, d.code, d.message, &pointer);
                located.help = d.help;
                ctx.push(located);
            }
        }
        Kind::ImplementationPlan => {
            for (index, stage) in conformance::malformed_stages(&loaded.doc) {
                let pointer = format!("/implementationPlanning/stages/{index}/conformanceTests");
                let d = ctx
                    .at(
                        &loaded.src,
                        Code::PlanStagesMalformedConformance,
                        format!("stage {stage}: conformanceTests is not `<script> (requires=[cap,...])`"),
                        &pointer,
                    )
                    .help("write e.g. `<task_root>/tests/stage-1.sh (requires=[db,io])`; capabilities: db, io, http, external, each once");
                ctx.push(d);
            }
        }
    }
}

/// One file's diagnostics in the order a reader meets them: by line, then
/// column (what concerns the whole file first). The rules find problems
/// in their own order; files keep the order they were named in.
fn in_line_order(mut diags: Vec<crate::diag::Diagnostic>) -> Vec<crate::diag::Diagnostic> {
    diags.sort_by_key(|d| {
        let loc = d.location.as_ref();
        (
            loc.and_then(|l| l.line()).unwrap_or(0),
            loc.and_then(|l| l.column()).unwrap_or(0),
        )
    });
    diags
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Jobs => "jobs",
        Kind::Manifest => "manifest",
        Kind::Metadata => "metadata",
        Kind::Plan => "plan",
        Kind::TeamState => "team-state",
        Kind::ImplementationPlan => "implementation-plan",
    }
}

pub fn schema(args: &SchemaArgs) -> ExitStatus {
    let kinds: Vec<SchemaKind> = match &args.name {
        None => SchemaKind::ALL.to_vec(),
        Some(name) => match SchemaKind::from_name(name) {
            Some(k) => vec![k],
            None => {
                let names: Vec<&str> = SchemaKind::ALL.iter().map(|k| k.name()).collect();
                let d = crate::diag::Diagnostic::new(
                    Code::InputInvalid,
                    format!("no schema named `{name}`"),
                )
                .help(format!("choose one of: {}", names.join(", ")));
                return report(&Diagnostics::from(d), Format::Text);
            }
        },
    };
    match &args.out {
        Some(dir) => {
            for k in &kinds {
                let path = dir.join(k.file_name());
                if let Err(e) =
                    std::fs::create_dir_all(dir).and_then(|_| std::fs::write(&path, k.text()))
                {
                    let d = crate::diag::Diagnostic::new(
                        Code::InputUnreadable,
                        format!("cannot write {}: {e}", path.display()),
                    )
                    .help("choose a writable --out directory");
                    return report(&Diagnostics::from(d), Format::Text);
                }
                outln!("wrote {}", path.display());
            }
        }
        None if args.name.is_some() => out!("{}", kinds[0].text()),
        None => {
            for k in &kinds {
                outln!("{:<11} {}", k.name(), k.file_name());
            }
            outln!("\nPrint one with `okstra schema NAME`, or write them all with `okstra schema --out DIR`.");
        }
    }
    ExitStatus::Success
}
