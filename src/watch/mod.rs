//! `okstra watch`: a live view of a run from the files exec leaves
//! (docs/cli.md#okstra-watch). [`model`] is the run as its events and
//! team-state tell it; [`source`] reads those files incrementally;
//! [`changes`] says when they change; [`view`] turns the model into text;
//! [`ui`] draws it in a terminal.

pub mod changes;
pub mod model;
pub mod source;
pub mod ui;
pub mod view;

pub use model::{Job, Model, Phase, Sum, Totals};
pub use source::{RunFiles, Source};
