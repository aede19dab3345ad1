use std::os::unix::process::CommandExt;

fn main() -> std::process::ExitCode {
    // kube parses NO_PROXY itself whenever a proxy is in play and refuses what kubectl reads
    // (a trailing comma, `*` among other entries). This crate forbids the `unsafe` that
    // `set_var` needs, so convoy starts itself again with the variables tidied; `exec` keeps
    // the process, its arguments and its descriptors.
    let tidied = convoy::engine::env_proxy::tidied_environment(|v| std::env::var(v).ok());
    if !tidied.is_empty() {
        let mut args = std::env::args_os();
        // This very binary, even if its file was replaced or removed meanwhile.
        let mut again = std::process::Command::new("/proc/self/exe");
        if let Some(arg0) = args.next() {
            again.arg0(arg0);
        }
        // Returns only if the exec failed: go on with the variables as they are.
        let _ = again.args(args).envs(tidied).exec();
    }
    convoy::cli::main()
}
