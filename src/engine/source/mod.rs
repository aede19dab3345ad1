//! Sources: fetch Git, Helm repository and OCI content into the content-addressed cache.
//!
//! Spec: reconcile-flow.txt stageRender step 1 ("Fetch. coordinator.Ensure resolves and
//! fetches the source. An error is transient. A result that is not ready stops the reconcile
//! with reason Unsupported"); DESIGN.md sections 1 and 3.

pub mod allowed_urls;
pub mod archive;
pub mod cache;
pub mod coordinator;
pub mod git;
pub mod helm_repo;
pub mod oci;
pub mod registry_token;
pub mod resolve;
pub mod retention;
pub mod untrusted;

use std::path::PathBuf;

pub use cache::Cache;
pub use coordinator::{Coordinator, Reuse};

/// What to fetch, fully resolved from a Release and its source object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceRequest {
    Git {
        url: String,
        reference: GitReference,
    },
    Helm {
        url: String,
        chart: String,
        /// An exact version, a semver range, or `None` for the newest stable version.
        version: Option<String>,
    },
    Oci {
        /// `oci://host[:port]/repository`.
        url: String,
        tag: Option<String>,
        digest: Option<String>,
        insecure: bool,
    },
}

/// A Git revision to check out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitReference {
    /// The remote's default branch.
    Head,
    Branch(String),
    Tag(String),
    Commit(String),
}

impl SourceRequest {
    /// A string naming this request; equal requests de-duplicate in the coordinator.
    pub fn key(&self) -> String {
        match self {
            SourceRequest::Git { url, reference } => format!("git:{url}#{reference:?}"),
            SourceRequest::Helm {
                url,
                chart,
                version,
            } => {
                format!("helm:{url}#{chart}@{}", version.as_deref().unwrap_or("*"))
            }
            SourceRequest::Oci {
                url, tag, digest, ..
            } => format!(
                "oci:{url}#{}",
                digest.as_deref().or(tag.as_deref()).unwrap_or("latest")
            ),
        }
    }

    /// The URL, for messages and `status.lastAttempted.resolvedSource.url`.
    pub fn url(&self) -> &str {
        match self {
            SourceRequest::Git { url, .. }
            | SourceRequest::Helm { url, .. }
            | SourceRequest::Oci { url, .. } => url,
        }
    }
}

/// Credentials read from a source's Secret. `Debug` never shows a value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub username: Option<String>,
    pub password: Option<String>,
    pub bearer_token: Option<String>,
    /// An SSH private key (PEM/OpenSSH).
    pub identity: Option<Vec<u8>>,
    pub known_hosts: Option<Vec<u8>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |set: bool| if set { "<redacted>" } else { "<unset>" };
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &shown(self.password.is_some()))
            .field("bearer_token", &shown(self.bearer_token.is_some()))
            .field("identity", &shown(self.identity.is_some()))
            .field("known_hosts", &shown(self.known_hosts.is_some()))
            .finish()
    }
}

impl Credentials {
    /// From a Secret's data: `username`/`password`, `bearerToken`, `identity`/`known_hosts`.
    pub fn from_secret_data(data: &std::collections::BTreeMap<String, Vec<u8>>) -> Self {
        let text = |k: &str| data.get(k).map(|v| String::from_utf8_lossy(v).into_owned());
        Self {
            username: text("username"),
            password: text("password"),
            bearer_token: text("bearerToken"),
            identity: data.get("identity").cloned(),
            known_hosts: data.get("known_hosts").cloned(),
        }
    }
}

/// What sources a process may fetch from. The CLI fetches what its user names; the daemon
/// fetches what tenants name, so it refuses local paths unless told otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePolicy {
    /// `file://` Git URLs (never into convoy's own cache, whatever this says).
    pub allow_file_urls: bool,
    /// The URL prefixes sources may name (`--allow-source-url`; none: any).
    pub allowed_urls: allowed_urls::AllowedUrls,
    /// The deadline of one fetch (git, HTTP, OCI), unpacking included; a fetch past it is
    /// stopped (its git process killed) and fails naming the deadline.
    pub fetch_timeout: std::time::Duration,
    /// Fetch on tasks of their own, waiting for each at most a while (the daemon); `None`:
    /// wait for every fetch (the CLI).
    pub detached: Option<Detached>,
}

/// How the daemon's fetches run beside its passes ([`coordinator::Coordinator`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Detached {
    /// How long a pass waits for a fetch before it is told to come back when it ends.
    pub patience: std::time::Duration,
    /// How many fetches run at once, of all sources and of one namespace's.
    pub total: usize,
    pub per_namespace: usize,
    /// How long a fetch runs before it is slow: it then gives its place among the `total` to
    /// the next fetch and takes one among as many for slow fetches (while one is free).
    pub slow_after: std::time::Duration,
}

impl Detached {
    /// The daemon's: a pass waits 2 s; 8 fetches at once, 2 of them of one namespace's
    /// sources (before, the loops' workers bounded the fetches: 10 at most at once); a fetch
    /// past 5 s is slow (as a pass is, `daemon::queue`).
    pub const DAEMON: Detached = Detached {
        patience: std::time::Duration::from_secs(2),
        total: 8,
        per_namespace: 2,
        slow_after: std::time::Duration::from_secs(5),
    };
}

/// The default deadline of a fetch.
pub const DEFAULT_FETCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

impl Default for SourcePolicy {
    fn default() -> Self {
        Self {
            allow_file_urls: true,
            allowed_urls: allowed_urls::AllowedUrls::default(),
            fetch_timeout: DEFAULT_FETCH_TIMEOUT,
            detached: None,
        }
    }
}

/// A fetched, immutable artifact in the cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// What was fetched: `main@sha1:<commit>`, a chart version, `tag@sha256:<digest>`.
    pub revision: String,
    /// `sha256:<hex>` of the unpacked content.
    pub digest: String,
    /// The unpacked content.
    pub path: PathBuf,
    pub url: String,
}

/// Why a source could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A transient failure (network, auth, missing revision): retried (`SourceNotReady`).
    #[error("cannot fetch {url}: {message}")]
    NotReady { url: String, message: String },
    /// The request uses something convoy does not implement (`Unsupported`, not retried).
    #[error("{0}")]
    Unsupported(String),
    #[error(transparent)]
    Cache(#[from] cache::CacheError),
    #[error("cannot unpack {url}")]
    Archive {
        url: String,
        #[source]
        source: archive::ArchiveError,
    },
    #[error(transparent)]
    ToolMissing(#[from] crate::engine::tools::ToolMissing),
    /// The fetch goes on in the background (the daemon waits for one only a while): come
    /// back when `wait` ends.
    #[error("{url} is still being fetched")]
    Fetching {
        url: String,
        wait: coordinator::FetchWait,
    },
}

impl SourceError {
    pub(crate) fn not_ready(url: &str, message: impl Into<String>) -> Self {
        SourceError::NotReady {
            url: url.to_string(),
            message: message.into(),
        }
    }

    /// Whether this is a configuration problem (`Unsupported`) rather than a fetch error.
    pub fn is_unsupported(&self) -> bool {
        matches!(self, SourceError::Unsupported(_))
    }

    /// The fetch to come back for, when it still runs.
    pub fn fetching(&self) -> Option<&coordinator::FetchWait> {
        match self {
            SourceError::Fetching { wait, .. } => Some(wait),
            _ => None,
        }
    }

    /// The same failure, for another caller of the fetch that failed (the same variant and
    /// message; I/O causes as text).
    pub(crate) fn replay(&self) -> SourceError {
        match self {
            SourceError::NotReady { url, message } => SourceError::not_ready(url, message),
            SourceError::Unsupported(message) => SourceError::Unsupported(message.clone()),
            SourceError::Cache(e) => SourceError::Cache(cache::CacheError {
                action: e.action,
                path: e.path.clone(),
                source: std::io::Error::new(e.source.kind(), e.source.to_string()),
            }),
            SourceError::Archive { url, source } => SourceError::Archive {
                url: url.clone(),
                source: source.replay(),
            },
            SourceError::ToolMissing(e) => SourceError::ToolMissing(e.clone()),
            SourceError::Fetching { url, wait } => SourceError::Fetching {
                url: url.clone(),
                wait: wait.clone(),
            },
        }
    }
}
