//! The sections of the man pages that clap knows nothing of
//! (docs/cli.md#commands): EXIT STATUS with the error-code table (from
//! [`Code`], the table the README's is checked against), ENVIRONMENT (every
//! `OKSTRA_*` variable) and EXAMPLES (per command).

use okstra::diag::{Code, ExitStatus};
use roff::{bold, italic, roman, Roff};

/// A variable okstra reads or sets, and what it does.
pub struct Var {
    pub name: &'static str,
    pub what: &'static str,
}

/// Every environment variable okstra reads, or sets for its workers. The
/// `OKSTRA_*` ones are held to the source by a test (`every_okstra_variable_is_documented`).
pub const ENVIRONMENT: &[Var] = &[
    Var {
        name: "OKSTRA_STOP_GRACE_SECONDS",
        what: "exec and run: how long a stopped worker's process group has between SIGTERM and SIGKILL (one grace for all the workers stopped at once); default 5.",
    },
    Var {
        name: "OKSTRA_LOCK_TIMEOUT_SECONDS",
        what: "how long a writer of team-state waits for the lock another writer (the lead, another okstra) holds before it gives up naming the holder; default 30.",
    },
    Var {
        name: "OKSTRA_DOCTOR_PROBE_SECONDS",
        what: "doctor: how long a Slurm probe job may wait for a node and run; default 60.",
    },
    Var {
        name: "OKSTRA_PROJECT_ROOT",
        what: "set for every worker: the project root, its working directory (unless it has a git worktree: see OKSTRA_WORKTREE).",
    },
    Var {
        name: "OKSTRA_WORKTREE",
        what: "set for a worktree = \"git\" worker: its git worktree (absolute), its working directory; its result files are still under OKSTRA_PROJECT_ROOT.",
    },
    Var {
        name: "OKSTRA_PROMPT_PATH",
        what: "set for every worker: its prompt file (also given on its stdin).",
    },
    Var {
        name: "OKSTRA_RESULT_PATH",
        what: "set for every worker: the result file it must write; the attempt completes only once this attempt wrote it.",
    },
    Var {
        name: "OKSTRA_WORKER_RESULT_PATH",
        what: "set for every worker: its worker result file (by default the result file).",
    },
    Var {
        name: "OKSTRA_ATTEMPT",
        what: "set for every worker: the attempt number, from 1.",
    },
    Var {
        name: "OKSTRA_DISPATCH_ID",
        what: "set for a worker whose job has an invocation id: the attempt's dispatch id, <invocationId>:attempt-<n>.",
    },
    Var {
        name: "OKSTRA_SESSION_ID",
        what: "set for a worker whose CLI takes a session id (claude): the UUID okstra minted for this attempt.",
    },
    Var {
        name: "OKSTRA_WORKER_KEY",
        what: "set for every worker: its state key (the workerId, or the last segment of a v2 assignmentRef).",
    },
    Var {
        name: okstra::worker::SLOT_VAR,
        what: "set for a cli-wrapper worker: the pid of the wrapper slot that started it, by which exec finds and stops the worker should the slot die before reporting the worker's pid.",
    },
    Var {
        name: "OKSTRA_FAULT_TRACE",
        what: "debug builds only (the crash tests): each fault-injection point exec reaches is appended to this file. A release build ignores it.",
    },
    Var {
        name: "OKSTRA_FAULT_AT",
        what: "debug builds only (the crash tests): the n-th fault-injection point kills exec with SIGKILL. A release build ignores it.",
    },
    Var {
        name: "OKSTRA_FAULT_FAIL",
        what: "debug builds only (the crash tests): the named fault point answers an I/O error. A release build ignores it.",
    },
    Var {
        name: "OKSTRA_FAULT_PAUSE",
        what: "debug builds only (the tests): NAME@K holds exec the K-th time it reaches the named point, until the file go appears in OKSTRA_FAULT_PAUSE_DIR (it creates reached there first). A release build ignores it.",
    },
    Var {
        name: "OKSTRA_FAULT_PAUSE_DIR",
        what: "debug builds only (the tests): where OKSTRA_FAULT_PAUSE's reached and go files are. A release build ignores it.",
    },
    Var {
        name: "OKSTRA_FAULT_DIE",
        what: "debug builds only (the tests): a wrapper reaching the named point kills itself with SIGKILL. A release build ignores it.",
    },
    Var {
        name: okstra::confine::SIMULATE_UNAVAILABLE_ENV,
        what: "debug builds only (the tests): the kernel looks as if it had no Landlock. A release build ignores it.",
    },
    Var {
        name: okstra::confine::seccomp::SIMULATE_UNAVAILABLE_ENV,
        what: "debug builds only (the tests): the kernel looks as if it had no seccomp, so no network can be confined. A release build ignores it.",
    },
    Var {
        name: okstra::confine::TEST_ALSO_WRITABLE_ENV,
        what: "debug builds only (the tests): an absolute directory a confined worker may also write. A release build ignores it.",
    },
    Var {
        name: "SOURCE_DATE_EPOCH",
        what: "plan and run: the plan's createdAt, in seconds since the epoch, for reproducible plans; default now.",
    },
    Var {
        name: "NO_COLOR",
        what: "with --color auto (the default): no colour in diagnostics.",
    },
    Var {
        name: "CLICOLOR_FORCE",
        what: "with --color auto: colour even where stderr is not a terminal.",
    },
    Var {
        name: "TMPDIR",
        what: "set for a confined worker: a private temporary directory okstra made for the attempt, outside the project, removed once it settles.",
    },
];

/// The examples of a command's page (`None`: okstra(1)): what each does,
/// then its command line.
fn examples(command: Option<&str>) -> &'static [(&'static str, &'static str)] {
    match command {
        Some("init") => &[
            ("Start a run in the current project, with a worker for each agent CLI found and logged in (else one command worker):", "okstra init"),
            ("Choose the workers, in a project elsewhere:", "okstra init --project-root ~/src/app --provider claude --provider codex"),
        ],
        Some("plan") => &[
            ("Plan the spec okstra init wrote, and review it:", "okstra plan okstra.toml --manifest .okstra/run/run-manifest.json --out .okstra/run/plan.json"),
            ("Plan two workers of the manifest's roster (no spec), for a program:", "okstra plan --manifest run/run-manifest.json --workers claude,codex --out plan.json --format json"),
        ],
        Some("exec") => &[
            ("Run a plan; after Ctrl-C or a crash, the same line continues the run:", "okstra exec .okstra/run/plan.json"),
            ("Two jobs at a time, with a JUnit report for CI:", "okstra exec plan.json --concurrency 2 --junit okstra-junit.xml"),
        ],
        Some("run") => &[
            ("Plan and run in one step; the plan is kept as <run dir>/plans/<digest>.json, and the exec line shown runs it again:", "okstra run okstra.toml --manifest .okstra/run/run-manifest.json"),
        ],
        Some("status") => &[
            ("The run's workers, dispatches and spending:", "okstra status --manifest .okstra/run/run-manifest.json"),
            ("The same, for a program:", "okstra status --manifest .okstra/run/run-manifest.json --format json"),
        ],
        Some("watch") => &[
            ("Watch a run from another terminal while exec runs it (Enter follows a worker's log, q quits):", "okstra watch --manifest .okstra/run/run-manifest.json"),
            ("One plain table of it, for a script:", "okstra watch --manifest .okstra/run/run-manifest.json --once"),
        ],
        Some("show") => &[("Review a plan before running it:", "okstra show .okstra/run/plan.json")],
        Some("validate") => &[
            ("Check a spec without planning:", "okstra validate okstra.toml"),
            ("Check a manifest, and a spec from stdin:", "okstra validate --kind manifest .okstra/run/run-manifest.json && okstra validate - < okstra.toml"),
        ],
        Some("schema") => &[
            ("Print the job spec's schema:", "okstra schema jobs"),
            ("Write every schema, for editors:", "okstra schema --out .okstra/schemas"),
        ],
        Some("doctor") => &[
            ("Check the machine and every agent CLI:", "okstra doctor"),
            ("Check exactly what a plan needs:", "okstra doctor .okstra/run/plan.json"),
        ],
        Some("completions") => &[
            ("Complete okstra in the current bash:", "source <(okstra completions bash)"),
            ("For zsh, in a directory of fpath:", "okstra completions zsh > ~/.zfunc/_okstra"),
        ],
        Some("man") => &[
            ("Read the page of a command:", "okstra man exec | man -l -"),
            ("Install every page:", "for c in '' plan exec; do okstra man $c > okstra${c:+-$c}.1; done"),
        ],
        Some("worker" | "worker-slot") => &[(
            "exec starts the wrapper itself; a plan's review shows each job's wrapper line:",
            "okstra show .okstra/run/plan.json",
        )],
        _ => &[
            ("The first hour: start a run, check it, plan it, run it, look at it:", "okstra init"),
            ("", "okstra doctor okstra.toml --manifest .okstra/run/run-manifest.json"),
            ("", "okstra plan okstra.toml --manifest .okstra/run/run-manifest.json --out .okstra/run/plan.json"),
            ("", "okstra exec .okstra/run/plan.json"),
            ("", "okstra status --manifest .okstra/run/run-manifest.json"),
        ],
    }
}

/// Append EXIT STATUS, ENVIRONMENT and EXAMPLES to the page of `command`
/// (`None`: okstra(1)).
pub fn sections(roff: &mut Roff, command: Option<&str>) {
    // Codes, variables and command lines are not words to hyphenate.
    roff.control("nh", []);
    exit_status(roff);
    environment(roff);
    roff.control("SH", ["EXAMPLES"]);
    for (what, line) in examples(command) {
        if !what.is_empty() {
            roff.control("PP", []).text([roman(*what)]);
        }
        roff.control("RS", ["4"])
            .control("nf", [])
            .text([bold(*line)])
            .control("fi", [])
            .control("RE", []);
    }
}

fn exit_status(roff: &mut Roff) {
    roff.control("SH", ["EXIT STATUS"]);
    for status in ExitStatus::ALL {
        roff.control("TP", [])
            .text([bold(status.code().to_string())])
            .text([roman(status.meaning())]);
    }
    roff.control("SS", ["Error codes"]).text([roman(
        "Every refusal names its code (error[CODE] in text, \"code\" in JSON); each ends the command with the exit status beside it:",
    )]);
    for code in Code::ALL {
        roff.control("TP", []).text([bold(code.as_str())]).text([
            italic(format!("exit {}", code.exit_status().code())),
            roman(format!(": {}", code.summary())),
        ]);
    }
}

fn environment(roff: &mut Roff) {
    roff.control("SH", ["ENVIRONMENT"]);
    for var in ENVIRONMENT {
        roff.control("TP", [])
            .text([bold(var.name)])
            .text([roman(var.what)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `OKSTRA_*` name in the source is a documented variable, or one
    /// of the few that are not variables of okstra's (listed with why).
    #[test]
    fn every_okstra_variable_is_documented() {
        // Names the unit tests give their own children, and a heredoc
        // delimiter: none is read by the okstra a person runs.
        const NOT_OURS: &[&str] = &[
            "OKSTRA_GATE",
            "OKSTRA_T",
            "OKSTRA_TEST_X",
            "OKSTRA_TEST_TAG",
            "OKSTRA_TEST_TEAM_STATE",
            "OKSTRA_AUDIT_UNREADABLE_ROOT",
            "OKSTRA_TEST_MARK",
        ];
        let documented: Vec<&str> = ENVIRONMENT.iter().map(|v| v.name).collect();
        let mut found = std::collections::BTreeSet::new();
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (at, _) in text.match_indices("OKSTRA_") {
                    let name: String = text[at..]
                        .chars()
                        .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                        .collect();
                    found.insert(name.trim_end_matches('_').to_string());
                }
            }
        }
        let undocumented: Vec<&String> = found
            .iter()
            .filter(|n| {
                *n != "OKSTRA"
                    && !documented.contains(&n.as_str())
                    && !NOT_OURS.contains(&n.as_str())
            })
            .collect();
        assert!(
            undocumented.is_empty(),
            "not in the man pages' ENVIRONMENT: {undocumented:?}"
        );
        // The list names real variables: the worker's, and exec's grace.
        for name in ["OKSTRA_RESULT_PATH", "OKSTRA_STOP_GRACE_SECONDS"] {
            assert!(found.contains(name) && documented.contains(&name), "{name}");
        }
    }

    #[test]
    fn the_sections_carry_every_code_and_exit_status() {
        let mut roff = Roff::new();
        sections(&mut roff, Some("exec"));
        let text = roff.to_roff();
        // As roff writes them: a minus sign escaped.
        let roffed = |s: &str| s.replace('-', "\\-");
        for heading in ["EXIT STATUS", "ENVIRONMENT", "EXAMPLES"] {
            assert!(
                text.contains(&format!(".SH \"{heading}\"\n"))
                    || text.contains(&format!(".SH {heading}\n")),
                "{heading}: {text}"
            );
        }
        for code in Code::ALL {
            let line = format!(
                "\\fB{}\\fR\n\\fIexit {}\\fR",
                roffed(code.as_str()),
                code.exit_status().code()
            );
            assert!(text.contains(&line), "{code}: {line}");
        }
        for status in ExitStatus::ALL {
            assert!(
                text.contains(&format!("\\fB{}\\fR\n", status.code())),
                "{status:?}"
            );
        }
    }

    #[test]
    fn every_exit_status_of_a_code_is_listed() {
        for code in Code::ALL {
            assert!(ExitStatus::ALL.contains(&code.exit_status()), "{code}");
        }
    }
}
