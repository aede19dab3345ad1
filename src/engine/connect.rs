//! Connecting to a cluster: from a kubeconfig file, kubeconfig bytes (a `Cluster`'s Secret) or
//! the environment (`KUBECONFIG`, then in-cluster).
//!
//! A [`Connection`] keeps the server address next to the client, so every "cannot reach" error
//! can say which address it tried.

use std::path::PathBuf;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why a connection could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig could not be read or has no usable context.
    #[error("cannot load the kubeconfig{}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Kubeconfig {
        path: Option<PathBuf>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("no kubeconfig found: set --kubeconfig or KUBECONFIG, or run inside a cluster")]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built from a valid config (TLS material, proxy).
    #[error("cannot build a client for {server}")]
    Client {
        server: String,
        #[source]
        source: kube::Error,
    },
    /// The server did not answer.
    #[error("cannot reach the API server at {server}")]
    Unreachable {
        server: String,
        #[source]
        source: kube::Error,
    },
}

/// Where to find the kubeconfig, as a user names it.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigSource {
    /// An explicit file; otherwise `KUBECONFIG`, `~/.kube/config`, then in-cluster.
    pub path: Option<PathBuf>,
    /// A context other than the current one.
    pub context: Option<String>,
}

/// A client and the address it talks to.
#[derive(Clone)]
pub struct Connection {
    pub client: Client,
    pub server: String,
    /// The namespace of the kubeconfig context (or the service account), for commands that
    /// default to it.
    pub default_namespace: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .finish()
    }
}

impl Connection {
    /// Connect as a user's kubeconfig says. Makes no request yet.
    pub async fn from_source(source: &KubeconfigSource) -> Result<Self, ConnectError> {
        Self::from_config(load_config(source).await?)
    }
}

/// The client configuration a user's kubeconfig (or the environment) describes.
pub async fn load_config(source: &KubeconfigSource) -> Result<Config, ConnectError> {
    {
        let options = KubeConfigOptions {
            context: source.context.clone(),
            ..Default::default()
        };
        let config = match &source.path {
            Some(path) => {
                let kubeconfig =
                    Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                        path: Some(path.clone()),
                        source,
                    })?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|source| ConnectError::Kubeconfig {
                        path: Some(path.clone()),
                        source,
                    })?
            }
            None if source.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ConnectError::Kubeconfig { path: None, source })?,
            None => Config::infer().await.map_err(ConnectError::Infer)?,
        };
        Ok(config)
    }
}

impl Connection {
    /// Connect with a kubeconfig held in memory (a `Cluster`'s Secret).
    pub async fn from_kubeconfig_yaml(yaml: &str) -> Result<Self, ConnectError> {
        let kubeconfig = Kubeconfig::from_yaml(yaml)
            .map_err(|source| ConnectError::Kubeconfig { path: None, source })?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| ConnectError::Kubeconfig { path: None, source })?;
        Self::from_config(config)
    }

    /// Wrap a config; convoy's clients are not throttled (kube-rs applies no client-side
    /// rate limit), so concurrent applies and dry runs run at the server's pace.
    pub fn from_config(config: Config) -> Result<Self, ConnectError> {
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let default_namespace = config.default_namespace.clone();
        let client = Client::try_from(config).map_err(|source| ConnectError::Client {
            server: server.clone(),
            source,
        })?;
        Ok(Self {
            client,
            server,
            default_namespace,
        })
    }

    /// Ask the server for its version: the cheapest proof that it answers.
    pub async fn server_version(
        &self,
    ) -> Result<k8s_openapi::apimachinery::pkg::version::Info, ConnectError> {
        self.client
            .apiserver_version()
            .await
            .map_err(|source| self.unreachable(source))
    }

    /// Turn a transport error into one that names this connection's server.
    pub fn unreachable(&self, source: kube::Error) -> ConnectError {
        ConnectError::Unreachable {
            server: self.server.clone(),
            source,
        }
    }
}

/// Whether an error from the API means the server could not be reached at all (as opposed to
/// an answer such as 404 or 422).
pub fn is_unreachable(error: &kube::Error) -> bool {
    matches!(
        error,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_)
    )
}
