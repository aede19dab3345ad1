//! Render errors, each with the `failure.stage` and `Applied` reason it maps to
//! (status-and-conditions.txt, "Where a reconcile can stop").

use crate::engine::api::{FailureStage, Reason};
use crate::engine::render::manifests::ManifestError;
use crate::engine::render::values::ValuesError;
use crate::engine::source::SourceError;
use crate::engine::source::resolve::ResolveError;
use crate::engine::tools::ToolMissing;

/// Why a Release could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The source object or its Secret could not be read or is not usable.
    #[error("resolve the source")]
    SourceObject(#[source] ResolveError),
    /// Fetching the source failed.
    #[error("fetch {kind} {namespace}/{name}")]
    Fetch {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<SourceError>,
    },
    #[error("read Helm values")]
    Values(#[source] ValuesError),
    /// A feature convoy does not implement.
    #[error("{0}")]
    Unsupported(String),
    #[error("read manifests")]
    Manifests(#[source] ManifestError),
    #[error(transparent)]
    ToolMissing(#[from] ToolMissing),
    #[error("{0}")]
    Tool(String),
    #[error("helm template failed: {0}")]
    Helm(String),
    #[error("kustomize build failed: {0}")]
    Kustomize(String),
    #[error("mutation {name:?} failed: {message}")]
    Mutation { name: String, message: String },
    #[error(transparent)]
    Invalid(#[from] crate::engine::error::Invalid),
}

impl RenderError {
    /// `status.lastAttempted.failure.stage`.
    pub fn stage(&self) -> FailureStage {
        match self {
            RenderError::SourceObject(_) | RenderError::Fetch { .. } => {
                FailureStage::SourceResolution
            }
            _ => FailureStage::Rendering,
        }
    }

    /// The `Applied` reason.
    pub fn reason(&self) -> Reason {
        match self {
            RenderError::SourceObject(e) if e.is_unsupported() => Reason::Unsupported,
            RenderError::Fetch { source, .. } if source.is_unsupported() => Reason::Unsupported,
            RenderError::SourceObject(_) | RenderError::Fetch { .. } => Reason::SourceNotReady,
            RenderError::Values(_) => Reason::ValuesNotReady,
            RenderError::Unsupported(_) => Reason::Unsupported,
            _ => Reason::DeployFailed,
        }
    }

    /// Whether the error is a configuration problem that a retry cannot fix.
    pub fn is_unsupported(&self) -> bool {
        self.reason() == Reason::Unsupported
    }

    /// The fetch to come back for, when it still runs (the daemon's passes).
    pub fn fetching(&self) -> Option<&crate::engine::source::coordinator::FetchWait> {
        match self {
            RenderError::Fetch { source, .. } => source.fetching(),
            RenderError::Values(e) => e.fetching.as_ref(),
            _ => None,
        }
    }

    /// Whether a cluster or a source could not be reached (the CLI exits 3; otherwise 4).
    pub fn is_unreachable(&self) -> bool {
        match self {
            RenderError::SourceObject(ResolveError::Read(e)) => e.is_unreachable(),
            RenderError::Fetch { source, .. } => matches!(**source, SourceError::NotReady { .. }),
            RenderError::Values(e) => e.unreachable,
            _ => false,
        }
    }
}
