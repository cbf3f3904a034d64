//! Budgets against the real CLIs (docs/exec.md#budgets).

use crate::e2e::{exec, log, one, pinned, read};
use crate::mock_api::Step;

#[test]
fn budget_probe_streams() {
    for provider in ["claude"] {
        let (_, model) = pinned(provider);
        let steps = vec![
            Step::Shell("echo one".into()),
            Step::Shell("echo two".into()),
            Step::Shell("echo three".into()),
            Step::Answer("done".into()),
        ];
        let Some((fx, _mock)) = one(provider, steps, model, "") else {
            continue;
        };
        let ran = exec(&fx);
        eprintln!("==== {provider} exited {}\n{}", ran.code, log(&fx, "w"));
        let _ = read(&fx, "x");
        // codex's rollout
        let _ = std::process::Command::new("sh").arg("-c").arg(format!("find {} -name 'rollout-*' -exec cat {{}} \\; | grep token_count | head -5", fx.home().display())).status();
    }
}
