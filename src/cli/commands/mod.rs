//! One module per command: its clap arguments and a `run` that calls the engine.

pub mod completions;
pub mod install;
pub mod render;
