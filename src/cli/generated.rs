//! What clap generates from the command line's own definitions, so that it
//! never drifts from them: shell completions (`okstra completions SHELL`)
//! and the man pages (`okstra man [COMMAND]`, roff on stdout).

use super::{Cli, Ended};
use crate::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use clap::CommandFactory;

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
    let page = match page_of(args.command.as_deref()) {
        Ok(p) => p,
        Err(d) => return Ok(super::report(&Diagnostics::from(d), Format::Text)),
    };
    let mut out = Vec::new();
    if let Err(e) = render(page, args.command.as_deref(), &mut out) {
        let d = Diagnostic::new(
            Code::InputInvalid,
            format!("cannot render the man page: {e}"),
        );
        return Ok(super::report(&Diagnostics::from(d), Format::Text));
    }
    out!("{}", String::from_utf8_lossy(&out))?;
    Ok(ExitStatus::Success)
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

/// Every page `okstra man` prints: the top-level one and one per command.
pub fn pages() -> Vec<Option<String>> {
    let top = Cli::command();
    std::iter::once(None)
        .chain(
            top.get_subcommands()
                .map(|s| Some(s.get_name().to_string())),
        )
        .collect()
}
