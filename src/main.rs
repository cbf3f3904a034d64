mod alloc;
mod start;

#[global_allocator]
static GLOBAL: alloc::ByCommand = alloc::ByCommand;

fn main() -> std::process::ExitCode {
    okstra::cli::main().into()
}
