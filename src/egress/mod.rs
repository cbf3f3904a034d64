//! The run's egress proxy (docs/confinement.md#network).

pub mod rules;

pub use rules::{Allow, Match, RuleError};
