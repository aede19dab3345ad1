use std::os::unix::process::CommandExt;

fn main() -> std::process::ExitCode {
    // kube parses NO_PROXY itself whenever a proxy is in play and refuses what kubectl reads
    // (a trailing comma, `*` among other entries). This crate forbids the `unsafe` that
    // `set_var` needs, so convoy starts itself again with the variables tidied; `exec` keeps
    // the process, its arguments and its descriptors.
    let mut tidied: Vec<(&str, String)> = ["NO_PROXY", "no_proxy"]
        .into_iter()
        .filter_map(|variable| {
            let value = std::env::var(variable).ok()?;
            Some((variable, convoy::engine::env_proxy::tidy_no_proxy(&value)?))
        })
        .collect();
    // Go reads a NO_PROXY of only blanks as set, naming no host: emptied, it would let
    // no_proxy be read in its place.
    if tidied.contains(&("NO_PROXY", String::new())) {
        tidied.retain(|(variable, _)| *variable != "no_proxy");
        tidied.push(("no_proxy", String::new()));
    }
    if !tidied.is_empty()
        && let Ok(exe) = std::env::current_exe()
    {
        let mut args = std::env::args_os();
        let mut again = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            again.arg0(arg0);
        }
        // Returns only if the exec failed: go on with the variables as they are.
        let _ = again.args(args).envs(tidied).exec();
    }
    convoy::cli::main()
}
