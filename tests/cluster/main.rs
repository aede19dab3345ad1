//! Integration tests against a real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok), started once for this binary.

#![allow(clippy::unwrap_used)]

#[path = "../support/mod.rs"]
mod support;

mod api;
mod connect;
mod content_hooks;
mod drift;
mod exclusions;
mod health;
mod hooks;
mod install;
mod inventory;
mod kwok;
mod live;
mod ownership;
mod remote;
mod rollout;
mod secret_digests;
mod spec_items;
mod status;
mod sync;
mod tenancy;
