//! The target cluster of a Release: a `Cluster` with a kubeconfig Secret, `inCluster: true`,
//! or (no `spec.cluster`) the cluster the Release itself lives in.
//!
//! Spec: reconcile-flow.txt stageRender step 2 ("A missing or unreachable cluster stops the
//! reconcile with reason ClusterNotReady and an error").

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::engine::api::{Cluster, Release, ResolvedCluster};
use crate::engine::connect::{ConnectError, Connection};
use crate::engine::source::resolve::secret_data;
use crate::engine::tenancy::Tenancy;

/// Why the target cluster is not ready.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("Cluster {namespace}/{name} not found")]
    NotFound { namespace: String, name: String },
    #[error("cannot read Cluster {namespace}/{name}")]
    Read {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Cluster {namespace}/{name}: {message}")]
    Invalid {
        namespace: String,
        name: String,
        message: String,
    },
    #[error("Cluster {cluster}")]
    Connect {
        cluster: String,
        #[source]
        source: ConnectError,
    },
}

impl crate::engine::error::Categorized for ClusterError {
    fn category(&self) -> crate::engine::error::Category {
        use crate::engine::error::Category;
        match self {
            ClusterError::NotFound { .. } | ClusterError::Invalid { .. } => Category::Invalid,
            ClusterError::Read { source, .. } => crate::engine::error::kube_category(source),
            ClusterError::Connect { source, .. } => source.category(),
        }
    }
}

/// A connected target cluster.
#[derive(Debug, Clone)]
pub struct Target {
    pub conn: Connection,
    /// What goes into `status.lastAttempted.resolvedCluster`.
    pub resolved: ResolvedCluster,
}

/// Resolve and probe the target cluster of `release`. `home` is the cluster the Release lives
/// in (the CLI's kubeconfig cluster, or the daemon's own).
/// The cluster a Release deploys to, as `<namespace>/<Cluster name>` (empty name: the cluster
/// the Release lives in). Sharding and cluster waves group Releases by it.
pub fn cluster_key(release: &Release) -> String {
    format!(
        "{}/{}",
        release.metadata.namespace.as_deref().unwrap_or_default(),
        release.spec.cluster.as_deref().unwrap_or_default()
    )
}

pub async fn resolve_target(
    home: &Connection,
    tenancy: &Tenancy,
    release: &Release,
) -> Result<Target, ClusterError> {
    let namespace = release.metadata.namespace.clone().unwrap_or_default();
    // The Release's identity on the cluster it lives in (see engine::tenancy).
    let tenant = tenancy
        .connection_for(home, release)
        .map_err(|source| ClusterError::Connect {
            cluster: "(the Release's own cluster)".to_string(),
            source,
        })?;
    let Some(name) = release.spec.cluster.clone() else {
        return probe(tenant, None).await;
    };
    let clusters: Api<Cluster> = Api::namespaced(home.client.clone(), &namespace);
    let cluster = clusters
        .get_opt(&name)
        .await
        .map_err(|source| ClusterError::Read {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?
        .ok_or_else(|| ClusterError::NotFound {
            namespace: namespace.clone(),
            name: name.clone(),
        })?;
    connect_cluster(&tenant, tenancy, &cluster).await
}

/// Connect to a `Cluster` (its kubeconfig Secret, or in-cluster) and probe it. `tenant` is
/// the identity that reads the Secret and, for `inCluster`, that acts on the cluster convoy
/// runs in; the kubeconfig may ask only what `tenancy.kubeconfig` allows.
pub async fn connect_cluster(
    tenant: &Connection,
    tenancy: &Tenancy,
    cluster: &Cluster,
) -> Result<Target, ClusterError> {
    let home = tenant;
    let namespace = cluster.metadata.namespace.clone().unwrap_or_default();
    let name = cluster.metadata.name.clone().unwrap_or_default();
    let invalid = |message: String| ClusterError::Invalid {
        namespace: namespace.clone(),
        name: name.clone(),
        message,
    };
    if cluster.spec.in_cluster {
        return probe(home.clone(), Some(name)).await;
    }
    let secret_ref = cluster
        .spec
        .kubeconfig_secret_ref
        .clone()
        .ok_or_else(|| invalid("needs kubeconfigSecretRef or inCluster: true".into()))?;
    let secrets: Api<Secret> = Api::namespaced(home.client.clone(), &namespace);
    let secret = secrets
        .get_opt(&secret_ref.name)
        .await
        .map_err(|source| ClusterError::Read {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?
        .ok_or_else(|| invalid(format!("kubeconfig Secret {:?} not found", secret_ref.name)))?;
    let key = secret_ref
        .key
        .clone()
        .unwrap_or_else(|| "kubeconfig".to_string());
    let data = secret_data(&secret);
    let bytes = data
        .get(&key)
        .ok_or_else(|| invalid(format!("Secret {:?} has no key {key:?}", secret_ref.name)))?;
    let yaml = String::from_utf8_lossy(bytes);
    let identity = format!(
        "Cluster {namespace}/{name} Secret {}@{}",
        secret_ref.name,
        secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    );
    let conn =
        Connection::from_kubeconfig_yaml(&yaml, &tenancy.kubeconfig, identity, home.api_timeout)
            .await
            .map_err(|source| ClusterError::Connect {
                cluster: format!("{namespace}/{name}"),
                source,
            })?;
    probe(conn, Some(name)).await
}

async fn probe(conn: Connection, name: Option<String>) -> Result<Target, ClusterError> {
    let version = conn
        .server_version()
        .await
        .map_err(|source| ClusterError::Connect {
            cluster: name
                .clone()
                .unwrap_or_else(|| "(the Release's own cluster)".to_string()),
            source,
        })?;
    Ok(Target {
        resolved: ResolvedCluster {
            name,
            server: Some(conn.server.clone()),
            version: Some(version.git_version),
        },
        conn,
    })
}
