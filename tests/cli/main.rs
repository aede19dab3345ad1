//! Snapshot tests of real `convoy` command output (the binary, run as a user runs it).

#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

mod basics;
mod diff;
mod generated;
mod get;
mod health;
mod history;
mod render;
mod sync_exits;
mod sync_status;
