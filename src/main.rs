//! `okstra`, the command line: the library's commands behind clap
//! (src/cli/, this binary's own module, not the library's).

#![forbid(unsafe_code)]

mod cli;

// Planning builds and drops millions of small strings and maps; mimalloc
// does that about a quarter faster than glibc's malloc (benches/plan.sh).
// The per-job wrapper is its own binary (src/bin/okstra-worker.rs), on the
// system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    cli::main()
}
