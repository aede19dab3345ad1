//! Rendering: turn a fetched source into Kubernetes objects (manifests, kustomize, Helm),
//! apply mutations and compute the renderRef.
//!
//! Spec: reconcile-flow.txt stageRender steps 3–6.

pub mod manifests;
pub mod object;
pub mod order;
pub mod render_ref;

pub use object::Object;
