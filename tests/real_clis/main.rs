//! The real agent CLIs (claude, codex, gemini), installed by
//! `scripts/install-agent-clis.sh`: each accepts the argv okstra builds
//! (`argv`), runs end to end against a mock of its vendor's API (`e2e`,
//! `mock_api`), on private state that keeps the user's own untouched
//! (`private_state`; 16 at once: `concurrency`), and is judged logged in
//! as it judges itself (`login`); as a `worktree = "git"` worker, its edit
//! committed to its branch (`worktree`).
//!
//! A binary of its own, apart from tests/it/: these tests run the vendors'
//! node CLIs (heavy to start) and hold them to wall-clock limits (a refused
//! key settled within 30 s); the timing-bound suites of tests/it/ should
//! not share two cores with them. `cargo test --test real_clis --
//! --nocapture` runs them alone, saying which CLI each skipped.

#[path = "../common/mod.rs"]
mod common;

mod argv;
mod budget;
mod concurrency;
mod e2e;
mod login;
mod mock_api;
mod private_state;
mod worktree;
