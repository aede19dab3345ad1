//! The target cluster of a Release: a `Cluster` with a kubeconfig Secret, `inCluster: true`,
//! or (no `spec.cluster`) the cluster the Release itself lives in.
//!
//! Spec: reconcile-flow.txt stageRender step 2 ("A missing or unreachable cluster stops the
//! reconcile with reason ClusterNotReady and an error").

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use crate::engine::api::{Cluster, Release, ResolvedCluster};
use crate::engine::connect::{ConnectError, Connection};
use crate::engine::locks::lock;
use crate::engine::runtime::{Listers, cached};
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
    /// Another cluster, reached with its Cluster's kubeconfig: its credentials decide what
    /// may be done there. False for the cluster the Release lives in, named or not (a
    /// Cluster with `inCluster: true` is reached with the Release's own identity).
    pub elsewhere: bool,
    /// What goes into `status.lastAttempted.resolvedCluster`.
    pub resolved: ResolvedCluster,
}

/// The cluster a Release deploys to, as `<namespace>/<Cluster name>` (empty name: the cluster
/// the Release lives in). Sharding and cluster waves group Releases by it.
pub fn cluster_key(release: &Release) -> String {
    format!(
        "{}/{}",
        release.metadata.namespace.as_deref().unwrap_or_default(),
        release.spec.cluster.as_deref().unwrap_or_default()
    )
}

/// Resolve and probe the target cluster of `release`. `home` is the cluster the Release lives
/// in (the CLI's kubeconfig cluster, or the daemon's own).
pub async fn resolve_target(
    home: &Connection,
    tenancy: &Tenancy,
    release: &Release,
    lookups: Lookups<'_>,
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
        return probe(tenant, None, false, lookups.probes).await;
    };
    // Read as convoy itself: the name goes into the path as it is (render::object).
    if let Some(why) = crate::engine::render::object::path_segment_trouble(&name) {
        return Err(ClusterError::Invalid {
            namespace: namespace.clone(),
            name: name.clone(),
            message: format!("spec.cluster {name:?} {why}"),
        });
    }
    let cluster = match cached::<Cluster>(lookups.listers, &namespace, &name) {
        Some(cluster) => cluster,
        None => {
            let clusters: Api<Cluster> = Api::namespaced(home.client.clone(), &namespace);
            let read = clusters
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
            std::sync::Arc::new(read)
        }
    };
    connect_cluster_with(&tenant, tenancy, &cluster, lookups.probes).await
}

/// Where [`resolve_target`] may answer from instead of asking the API server: the process's
/// cache of Clusters (reconcile-flow.txt stageRender step 2: "reads the target Cluster from
/// the cache") and the targets that answered a probe lately. The CLI has neither.
#[derive(Clone, Copy, Default)]
pub struct Lookups<'a> {
    pub listers: Option<&'a dyn Listers>,
    pub probes: Option<&'a Probes>,
}

/// How long a target that answered a probe counts as answering. Every pass of every loop
/// resolves its target, and at 10,000 Releases one `/version` request per pass was a steady
/// stream; a target that stops answering within this window fails the pass's next request
/// instead, with the same unreachable error and category.
pub const PROBE_FRESH: Duration = Duration::from_secs(30);

/// The targets (by connection: server and identity) that answered a probe within
/// [`PROBE_FRESH`], with the version they gave. A failed probe is not remembered.
#[derive(Default)]
pub struct Probes(Mutex<HashMap<String, (Instant, String)>>);

impl Probes {
    fn fresh(&self, key: &str) -> Option<String> {
        let probes = lock(&self.0);
        let (at, version) = probes.get(key)?;
        (at.elapsed() < PROBE_FRESH).then(|| version.clone())
    }

    fn answered(&self, key: String, version: String) {
        let mut probes = lock(&self.0);
        // Connections come and go with credentials; old entries go with them.
        if probes.len() > 4096 {
            probes.retain(|_, (at, _)| at.elapsed() < PROBE_FRESH);
        }
        probes.insert(key, (Instant::now(), version));
    }
}

/// Connect to a `Cluster` (its kubeconfig Secret, or in-cluster) and probe it. `tenant` is
/// the identity that reads the Secret and, for `inCluster`, that acts on the cluster convoy
/// runs in; the kubeconfig may ask only what `tenancy.kubeconfig` allows.
pub async fn connect_cluster(
    tenant: &Connection,
    tenancy: &Tenancy,
    cluster: &Cluster,
) -> Result<Target, ClusterError> {
    connect_cluster_with(tenant, tenancy, cluster, None).await
}

/// [`connect_cluster`], skipping the probe of a target that answered one lately.
async fn connect_cluster_with(
    tenant: &Connection,
    tenancy: &Tenancy,
    cluster: &Cluster,
    probes: Option<&Probes>,
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
        return probe(home.clone(), Some(name), false, probes).await;
    }
    let secret_ref = cluster
        .spec
        .kubeconfig_secret_ref
        .clone()
        .ok_or_else(|| invalid("needs kubeconfigSecretRef or inCluster: true".into()))?;
    // The name goes into the read's path as it is (render::object).
    if let Some(why) = crate::engine::render::object::path_segment_trouble(&secret_ref.name) {
        return Err(invalid(format!(
            "kubeconfigSecretRef.name {:?} {why}",
            secret_ref.name
        )));
    }
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
    let conn = Connection::from_kubeconfig_yaml(
        &yaml,
        &tenancy.kubeconfig,
        identity,
        crate::engine::tenant_cache::Holder::Cluster {
            namespace: namespace.clone(),
            name: name.clone(),
        },
        home.api_timeout,
    )
    .await
    .map_err(|source| ClusterError::Connect {
        cluster: format!("{namespace}/{name}"),
        source,
    })?;
    probe(conn, Some(name), true, probes).await
}

/// Ask the target for its version (the cheapest proof that it answers), unless `probes` says
/// it answered lately.
async fn probe(
    conn: Connection,
    name: Option<String>,
    elsewhere: bool,
    probes: Option<&Probes>,
) -> Result<Target, ClusterError> {
    let key = conn.cache_key();
    let version = match probes.and_then(|p| p.fresh(&key)) {
        Some(version) => version,
        None => {
            let version = conn
                .server_version()
                .await
                .map_err(|source| ClusterError::Connect {
                    cluster: name
                        .clone()
                        .unwrap_or_else(|| "(the Release's own cluster)".to_string()),
                    source,
                })?
                .git_version;
            if let Some(probes) = probes {
                probes.answered(key, version.clone());
            }
            version
        }
    };
    Ok(Target {
        elsewhere,
        resolved: ResolvedCluster {
            name,
            server: Some(conn.server.clone()),
            version: Some(version),
        },
        conn,
    })
}
