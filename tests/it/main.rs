//! The integration tests: one binary, one module per suite. Each test binary
//! links the whole library, and linking was most of `cargo test`'s time, so
//! the suites share one (tests/real_clis/ is the only other, see there).
//! Run one suite with `cargo test --test it exec::`, one test by its name.
//!
//! Nothing here changes process-wide state (environment, working directory,
//! signal handlers): every suite runs okstra as a child process with its
//! own environment, so the suites can share a process.

#[path = "../common/mod.rs"]
mod common;

mod audit;
mod baseline;
mod budgets;
mod cli;
mod confinement;
mod crash;
mod diagnostics;
mod docs;
mod doctor;
mod editors;
mod exec;
mod fail_closed;
mod full_disk;
mod house;
mod junit;
mod network;
mod plan_digest;
mod plan_format;
mod plan_paths;
mod plan_rules;
mod plan_worktree;
mod private_tmp;
mod provider_state;
mod providers;
mod review;
mod roster;
mod slurm;
mod snapshots;
mod validate_parity;
mod watch;
mod worker;
mod worktrees;
