//! One input file checked alone, as `okstra validate` checks it
//! (docs/cli.md#okstra-validate): what kind of document it is, guessed from
//! its name and top-level keys where not said, and the schema and rule
//! checks that need no other file.

use crate::compile::{self, conformance, Ctx, Loaded};
use crate::diag::Code;
use crate::schema::SchemaKind;
use std::path::Path;

/// What a file is (`okstra validate --kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    /// A job spec (TOML or JSON).
    Jobs,
    /// A run manifest (run-manifest.json).
    Manifest,
    /// A prompt's invocation metadata (`<prompt>.meta.json`).
    Metadata,
    /// A plan written by `okstra plan`.
    Plan,
    /// A run's team-state.
    TeamState,
    /// An implementation plan with conformance declarations.
    ImplementationPlan,
}

impl Kind {
    /// The kind's name, as `--kind` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Jobs => "jobs",
            Kind::Manifest => "manifest",
            Kind::Metadata => "metadata",
            Kind::Plan => "plan",
            Kind::TeamState => "team-state",
            Kind::ImplementationPlan => "implementation-plan",
        }
    }

    /// What a file is, from its name and its top-level keys (`has`).
    pub fn guess(path: &Path, has: &dyn Fn(&str) -> bool) -> Kind {
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
}

/// The checks `okstra validate` runs on one parsed file of `kind`; problems
/// go to `ctx`. (A jobs document's workers are moved out of `loaded.doc`;
/// a plan is read again from its text, as exec reads it; `file` names it.)
pub fn check(ctx: &mut Ctx, loaded: &mut Loaded, kind: Kind, file: &Path) {
    match kind {
        Kind::Jobs => compile::check_spec_alone(ctx, loaded),
        Kind::Manifest => ctx.schema_check(SchemaKind::Manifest, loaded, &|_| false),
        Kind::Metadata => ctx.schema_check(SchemaKind::Metadata, loaded, &|_| false),
        Kind::TeamState => ctx.schema_check(SchemaKind::TeamState, loaded, &|_| false),
        // The same reading as exec's, so both refuse a plan alike.
        Kind::Plan => {
            let shown = file.display().to_string();
            if let Err(d) = crate::exec::load::load_bytes(&shown, loaded.src.text().as_bytes()) {
                let pointer = match (&d.pointer, d.code) {
                    (Some(p), _) => p.clone(),
                    (None, Code::PlanVersion) => "/formatVersion".into(),
                    (None, Code::PlanDigestMismatch) => "/digest".into(),
                    _ => "".into(),
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
