fn main() -> std::process::ExitCode {
    convoy::cli::main()
}
