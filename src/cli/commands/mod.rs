//! One module per command: its clap arguments and a `run` that calls the engine.

pub mod check;
pub mod completions;
pub mod daemon;
pub mod diff;
pub mod get;
pub mod health;
pub mod history;
pub mod install;
pub mod pin;
pub mod render;
pub mod status;
pub mod sync;
