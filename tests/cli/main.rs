//! Snapshot tests of real `convoy` command output (the binary, run as a user runs it).

#[path = "../support/mod.rs"]
mod support;

mod basics;
mod generated;
