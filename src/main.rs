// Planning builds and drops many small values (a 10,000-job plan is millions
// of strings and maps); mimalloc's allocator does that markedly faster than
// the system's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    okstra::cli::main().into()
}
