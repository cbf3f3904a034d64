fn main() -> std::process::ExitCode {
    okstra::cli::main().into()
}
