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

    fn completer(self) -> &'static dyn clap_complete::env::EnvCompleter {
        match self {
            Shell::Bash => &clap_complete::env::Bash,
            Shell::Zsh => &clap_complete::env::Zsh,
            Shell::Fish => &clap_complete::env::Fish,
            Shell::Powershell => &clap_complete::env::Powershell,
            Shell::Elvish => &clap_complete::env::Elvish,
        }
    }
}

/// The completion script for `shell`: a registration that asks `convoy` itself for the
/// candidates of each word (`COMPLETE=<shell> convoy -- …`), so Release names, namespaces and
/// history entries complete from the cluster, as kubectl's do (see `cli::complete`).
pub fn completions(shell: Shell) -> String {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = shell
        .completer()
        .write_registration("COMPLETE", "convoy", "convoy", "convoy", &mut out);
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
    // Built, so every subcommand carries the global options (--kubeconfig, -n, -o, …) its
    // page must list.
    let mut built = command.clone();
    built.build();
    for sub in built.get_subcommands() {
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
