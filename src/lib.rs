//! okstra: compile job specs into frozen, reviewable plans and run them
//! crash-safely. README.md is the tour; docs/ holds the rules this code
//! follows, and comments cite them there (docs/exec.md#settling-an-attempt).

#![forbid(unsafe_code)]

pub mod audit;
pub mod beneath;
pub mod budget;
pub mod canonical;
pub mod clock;
pub mod compile;
pub mod confine;
pub mod diag;
pub mod document;
pub mod egress;
pub mod exec;
pub mod fault;
pub mod fsutil;
pub(crate) mod json_past;
pub mod model;
pub mod paths;
pub mod plan;
pub mod policy;
pub mod process;
pub mod provider;
pub mod render;
pub mod schema;
pub mod served_model;
pub mod source;
pub mod state;
pub mod tmpdir;
pub mod vocab;
pub mod watch;
pub mod worker;
pub mod worktree;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
