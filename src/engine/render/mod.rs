//! Rendering: turn a fetched source into Kubernetes objects (manifests, kustomize, Helm),
//! apply mutations and compute the renderRef.
//!
//! Spec: reconcile-flow.txt stageRender steps 3–6.

pub mod bounded_yaml;
pub mod error;
mod go_tar;
pub mod helm;
pub mod helm_schema;
pub mod kustomize;
pub mod manifests;
pub mod mutations;
pub mod no_network;
pub mod object;
pub mod order;
pub mod plain_yaml;
pub mod release;
pub mod render_ref;
pub mod secret_values;
pub mod tool_output;
pub mod values;

pub use error::RenderError;
pub use helm::ClusterInfo;
pub use object::Object;
pub use release::{
    DEFAULT_RENDER_TIMEOUT, Fetched, RenderContext, Rendered, content_needs_cluster, fetch_source,
    finish_render, render_content, render_fetched, render_release,
};
