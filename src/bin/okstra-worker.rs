//! `okstra-worker`: the worker wrapper (docs/providers.md#the-worker-wrapper)
//! as a binary of its own.
//!
//! exec starts the wrapper once per job, so it is kept lean: the wrapper's
//! code and what it calls, nothing of planning (schemas, globbing, the
//! thread pool), and the system allocator, whose start costs nothing where
//! mimalloc would set up its arenas for a process that allocates a few
//! kilobytes. `okstra worker` runs the same code with the same arguments.

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    okstra::worker::main("okstra-worker")
}
