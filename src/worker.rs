//! TEMPORARY stub (replaced by the h-proc branch).
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub rest: Vec<String>,
}
pub fn run(_args: &WorkerArgs) -> i32 {
    1
}
