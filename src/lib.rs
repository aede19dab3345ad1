//! convoy: continuous delivery for Kubernetes.
//!
//! Dependencies point one way: [`cli`] → [`engine`] ← [`daemon`]. The engine is the product;
//! the CLI and the daemon are two thin ways to drive it.
#![forbid(unsafe_code)]

pub mod cli;
pub mod daemon;
pub mod engine;
