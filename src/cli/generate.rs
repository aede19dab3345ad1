//! Shell completions and man pages, generated from the same clap definitions as the parser.
//!
//! The files under `completions/` and `man/` are these outputs, committed; a test fails when
//! they are stale (`CONVOY_UPDATE_GENERATED=1 cargo test --test cli` rewrites them).

use clap::CommandFactory;

use super::Cli;

/// Shells `convoy completions` supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
    Powershell,
    Elvish,
}

impl Shell {
    pub const ALL: [Shell; 5] = [
        Shell::Bash,
        Shell::Zsh,
        Shell::Fish,
        Shell::Powershell,
        Shell::Elvish,
    ];

    /// The file name of the committed completion script.
    pub fn file_name(self) -> &'static str {
        match self {
            Shell::Bash => "convoy.bash",
            Shell::Zsh => "_convoy",
            Shell::Fish => "convoy.fish",
            Shell::Powershell => "_convoy.ps1",
            Shell::Elvish => "convoy.elv",
        }
    }

    fn generator(self) -> clap_complete::Shell {
        match self {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
            Shell::Powershell => clap_complete::Shell::PowerShell,
            Shell::Elvish => clap_complete::Shell::Elvish,
        }
    }
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> String {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell.generator(), &mut command, "convoy", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Man pages: `convoy.1` and one `convoy-<command>.1` per command, as (file name, content).
pub fn man_pages() -> Vec<(String, Vec<u8>)> {
    let command = Cli::command().version(env!("CARGO_PKG_VERSION"));
    let mut pages = Vec::new();
    let mut render = |cmd: clap::Command, file: String| {
        let mut out = Vec::new();
        // Rendering into a Vec cannot fail for lack of space; a failure would be clap's bug.
        if clap_mangen::Man::new(cmd).render(&mut out).is_ok() {
            pages.push((file, out));
        }
    };
    render(command.clone(), "convoy.1".to_string());
    for sub in command.get_subcommands() {
        if sub.is_hide_set() {
            continue;
        }
        let name = format!("convoy-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(name.clone())
            .version(env!("CARGO_PKG_VERSION"));
        render(sub, format!("{name}.1"));
    }
    pages
}
