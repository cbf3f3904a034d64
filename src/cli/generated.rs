//! What clap generates from the command line's own definitions, so that it
//! never drifts from them: shell completions (`okstra completions SHELL`)
//! and the man pages (`okstra man [COMMAND]`, roff on stdout).

use super::{Cli, Ended};
use clap::CommandFactory;
use okstra::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for; its script goes to stdout (bash: `source
    /// <(okstra completions bash)`; zsh, fish, elvish and powershell alike).
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// The command whose page to print (`okstra-plan(1)`); without it,
    /// `okstra(1)`. Render one with `okstra man | man -l -`.
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
}

pub fn completions(args: &CompletionsArgs) -> Ended {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "okstra", &mut out);
    out!("{}", String::from_utf8_lossy(&out))?;
    Ok(ExitStatus::Success)
}

/// The top-level command, or the subcommand `name`, named as its man page
/// is (`okstra-plan`).
fn page_of(name: Option<&str>) -> Result<clap::Command, Diagnostic> {
    let mut top = Cli::command();
    top.build();
    let Some(name) = name else {
        return Ok(top);
    };
    let names: Vec<String> = top
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    let found = top
        .get_subcommands()
        .find(|s| s.get_name() == name)
        .cloned()
        .ok_or_else(|| {
            Diagnostic::new(
                Code::InputInvalid,
                format!("okstra has no command `{name}`"),
            )
            .help(format!("choose one of: {}", names.join(", ")))
        })?;
    let version = top.get_version().unwrap_or_default().to_string();
    Ok(found
        .name(format!("okstra-{name}"))
        .bin_name(format!("okstra {name}"))
        .version(version))
}

pub fn man(args: &ManArgs) -> Ended {
    match roff(args.command.as_deref()) {
        Ok(page) => {
            out!("{}", String::from_utf8_lossy(&page))?;
            Ok(ExitStatus::Success)
        }
        Err(d) => Ok(super::report(&Diagnostics::from(d), Format::Text)),
    }
}

/// The man page of `command` (or of okstra itself), in roff.
fn roff(command: Option<&str>) -> Result<Vec<u8>, Diagnostic> {
    let page = page_of(command)?;
    let mut out = Vec::new();
    render(page, command, &mut out).map_err(|e| {
        Diagnostic::new(
            Code::InputInvalid,
            format!("cannot render the man page: {e}"),
        )
    })?;
    Ok(out)
}

/// The page of `page` (the command `command`, or okstra itself): clap's
/// sections in clap_mangen's order, with EXIT STATUS, ENVIRONMENT and
/// EXAMPLES (`super::manual`) before VERSION.
fn render(page: clap::Command, command: Option<&str>, out: &mut Vec<u8>) -> std::io::Result<()> {
    let shown_args = page.get_arguments().any(|a| !a.is_hide_set());
    let shown_subcommands = page.get_subcommands().any(|s| !s.is_hide_set());
    let man = clap_mangen::Man::new(page);
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    if shown_args {
        man.render_options_section(out)?;
    }
    if shown_subcommands {
        man.render_subcommands_section(out)?;
    }
    let mut ours = roff::Roff::new();
    super::manual::sections(&mut ours, command);
    ours.to_writer(out)?;
    man.render_version_section(out)
}

#[cfg(test)]
mod tests {
    use super::{roff, Cli};
    use clap::CommandFactory;
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// Every page `okstra man` prints: the top-level one and one per command.
    fn pages() -> Vec<Option<String>> {
        let top = Cli::command();
        std::iter::once(None)
            .chain(
                top.get_subcommands()
                    .map(|s| Some(s.get_name().to_string())),
            )
            .collect()
    }

    /// `groff` is needed to render the man pages; where REQUIRE_GROFF is set
    /// (as .ci/run sets it) its absence fails the test instead of skipping it.
    fn groff() -> bool {
        let here = Command::new("groff").arg("--version").output().is_ok();
        if !here {
            let why = "groff is not installed (apt-get install groff man-db)";
            assert!(
                std::env::var_os("REQUIRE_GROFF").is_none_or(|v| v.is_empty()),
                "REQUIRE_GROFF is set, so this is required here: {why}"
            );
            eprintln!("skipped: {why}");
        }
        here
    }

    /// Each page as `okstra man [COMMAND]` prints it renders under groff
    /// without a warning, with okstra's own sections (tests/it/cli.rs reads
    /// one through `man -l`, from the binary).
    #[test]
    fn every_man_page_renders_without_a_warning() {
        if !groff() {
            return;
        }
        for page in pages() {
            let roff = roff(page.as_deref()).unwrap_or_else(|d| panic!("{page:?}: {d:?}"));
            let mut child = Command::new("groff")
                .args(["-man", "-ww", "-z"])
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(&roff).unwrap();
            let out = child.wait_with_output().unwrap();
            let warnings = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() && warnings.is_empty(),
                "{page:?}: {warnings}"
            );
            let text = String::from_utf8_lossy(&roff);
            let name = page.map_or("okstra".to_string(), |p| format!("okstra-{p}"));
            assert!(text.contains(&format!(".TH {name} 1")), "{name}: {text}");
            for section in [
                ".SH \"EXIT STATUS\"\n",
                ".SH ENVIRONMENT\n",
                ".SH EXAMPLES\n",
            ] {
                assert!(text.contains(section), "{name} lacks {section}");
            }
        }
    }
}
