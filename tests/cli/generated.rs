//! `completions/` and `man/` are generated from the clap definitions and committed; this test
//! fails when they are stale. `CONVOY_UPDATE_GENERATED=1 cargo test --test cli generated`
//! rewrites them.

use convoy::cli::generate::{Shell, completions, man_pages};

use crate::basics::convoy;
use crate::support::repo_root;

fn check(path: std::path::PathBuf, expected: &[u8], stale: &mut Vec<String>) {
    if std::env::var_os("CONVOY_UPDATE_GENERATED").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, expected).unwrap();
        return;
    }
    if std::fs::read(&path).ok().as_deref() != Some(expected) {
        stale.push(path.display().to_string());
    }
}

#[test]
fn committed_completions_and_man_pages_are_current() {
    let root = repo_root();
    let mut stale = Vec::new();
    for shell in Shell::ALL {
        check(
            root.join("completions").join(shell.file_name()),
            completions(shell).as_bytes(),
            &mut stale,
        );
    }
    let pages = man_pages();
    assert!(pages.iter().any(|(name, _)| name == "convoy-install.1"));
    for (name, content) in pages {
        check(root.join("man").join(name), &content, &mut stale);
    }
    assert!(
        stale.is_empty(),
        "stale generated files (run CONVOY_UPDATE_GENERATED=1 cargo test --test cli generated): {stale:?}"
    );
}

#[test]
fn the_completions_command_prints_the_committed_script() {
    let (code, stdout, _) = convoy(&["completions", "bash"]);
    assert_eq!(code, 0);
    assert_eq!(stdout, completions(Shell::Bash));
    // The script asks convoy for each word's candidates (tests/cli/get.rs runs that side).
    assert!(stdout.contains("COMPLETE=\"bash\""), "{stdout}");
}
