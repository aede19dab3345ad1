//! The engine: everything convoy does, as a library with no CLI or daemon knowledge.
//!
//! The CLI and the daemon call the same functions here, write with the same field managers and
//! so produce the same objects, inventory and status (DESIGN.md, introduction).

pub mod api;
pub mod apply;
pub mod check;
pub mod cluster;
pub mod connect;
pub mod content_hooks;
pub mod digest_key;
pub mod drift;
pub mod duration;
pub mod env_proxy;
pub mod error;
pub mod exclusions;
pub mod explain;
pub mod health;
pub mod hooks;
pub mod http;
pub mod install;
pub mod inventory;
pub mod json_escape;
pub mod keep_policy;
pub mod key_order;
pub mod locks;
pub mod objects;
pub mod ownership;
pub mod parallel;
pub mod reconcile;
pub mod render;
pub mod requests;
pub mod rollout;
pub mod runtime;
pub mod seen_inventories;
pub mod selectors;
pub mod source;
pub mod ssa;
pub mod status;
pub mod store;
pub mod sync_options;
pub mod tenancy;
pub mod tenant_cache;
pub mod tools;
