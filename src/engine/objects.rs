//! Reading the objects a render depends on (source objects, value-layer ConfigMaps and
//! Secrets, Clusters) either from a cluster or from local files.
//!
//! The same render code runs in the daemon (reading the API server) and in `convoy render -f`
//! (reading the files the user passed), so "what you preview locally is what the daemon does"
//! holds for the inputs too.

use std::path::Path;
use std::sync::Arc;

use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::engine::render::manifests::{ManifestError, parse_documents};
use crate::engine::runtime::{Listers, cached};

/// Why an object could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {kind} {namespace}/{name}")]
    Api {
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    /// A name or namespace no request path carries as it is (render::object).
    #[error("{kind} {namespace:?}/{name:?} cannot be read: {why}")]
    Unaddressable {
        kind: String,
        namespace: String,
        name: String,
        why: String,
    },
    #[error("{kind} {namespace}/{name} in the local files is not valid")]
    Invalid {
        kind: String,
        namespace: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ReadError {
    /// Whether the API server could not be reached (as opposed to an answer).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, ReadError::Api { source, .. } if crate::engine::connect::is_unreachable(source))
    }
}

/// Where a render's inputs come from.
#[derive(Clone)]
pub enum ObjectReader {
    /// An API server.
    Cluster(Client),
    /// An API server, reading Secrets and ConfigMaps (what a Release names for its values,
    /// source credentials and kubeconfig) as the Release's tenant and convoy's own kinds as
    /// convoy (see `engine::tenancy`), convoy's own kinds from `listers` when it holds them.
    Tenant {
        own: Client,
        tenant: Client,
        listers: Option<Arc<dyn Listers>>,
    },
    /// Objects from local files (`convoy render -f`).
    Local(LocalObjects),
}

impl ObjectReader {
    /// Read the namespaced object `name` of kind `K` in `namespace`; `None` when absent.
    pub async fn get<K>(&self, namespace: &str, name: &str) -> Result<Option<K>, ReadError>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        // The names come from a Release or a source object a tenant writes, and go into the
        // request's path as they are.
        if let Some((what, why)) = crate::engine::render::object::address_trouble(namespace, name) {
            return Err(ReadError::Unaddressable {
                kind: K::kind(&()).into_owned(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                why: format!("the {what} {why}"),
            });
        }
        let tenants = matches!(K::kind(&()).as_ref(), "Secret" | "ConfigMap");
        let client = match self {
            ObjectReader::Cluster(client) => Some(client),
            ObjectReader::Tenant { tenant, .. } if tenants => Some(tenant),
            ObjectReader::Tenant { own, listers, .. } => {
                if let Some(hit) = cached::<K>(listers.as_deref(), namespace, name) {
                    return Ok(Some(K::clone(&hit)));
                }
                Some(own)
            }
            ObjectReader::Local(_) => None,
        };
        match (self, client) {
            (_, Some(client)) => {
                let api: Api<K> = Api::namespaced(client.clone(), namespace);
                api.get_opt(name).await.map_err(|source| ReadError::Api {
                    kind: K::kind(&()).into_owned(),
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    source: Box::new(source),
                })
            }
            (ObjectReader::Local(local), None) => local.get::<K>(namespace, name),
            (_, None) => Ok(None),
        }
    }

    /// convoy's own client, when reading from a cluster.
    pub fn client(&self) -> Option<&Client> {
        match self {
            ObjectReader::Cluster(client) | ObjectReader::Tenant { own: client, .. } => {
                Some(client)
            }
            ObjectReader::Local(_) => None,
        }
    }
}

/// Objects parsed from local files. An object without a namespace belongs to whichever
/// namespace is asked for, as `kubectl apply -f` would put it in the current one.
#[derive(Debug, Clone, Default)]
pub struct LocalObjects {
    objects: Vec<Value>,
}

impl LocalObjects {
    pub fn new(objects: Vec<Value>) -> Self {
        Self { objects }
    }

    /// Parse every document of the given files.
    pub fn from_files(paths: &[impl AsRef<Path>]) -> Result<Self, LocalFileError> {
        let mut objects = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let text = std::fs::read_to_string(path).map_err(|source| LocalFileError::Read {
                path: path.display().to_string(),
                source,
            })?;
            let parsed = parse_documents(&text, &path.display().to_string())?;
            objects.extend(parsed.into_iter().map(|o| o.0));
        }
        Ok(Self { objects })
    }

    /// All objects of kind `K`.
    pub fn all<K: Resource<DynamicType = ()>>(&self) -> impl Iterator<Item = &Value> {
        let api_version = K::api_version(&()).into_owned();
        let kind = K::kind(&()).into_owned();
        self.objects
            .iter()
            .filter(move |o| o["apiVersion"] == api_version.as_str() && o["kind"] == kind.as_str())
    }

    fn get<K>(&self, namespace: &str, name: &str) -> Result<Option<K>, ReadError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let found = self.all::<K>().find(|o| {
            o["metadata"]["name"] == name
                && o["metadata"]["namespace"]
                    .as_str()
                    .is_none_or(|ns| ns.is_empty() || ns == namespace)
        });
        match found {
            None => Ok(None),
            Some(value) => {
                let mut value = value.clone();
                value["metadata"]["namespace"] = Value::String(namespace.to_string());
                serde_json::from_value(value)
                    .map(Some)
                    .map_err(|source| ReadError::Invalid {
                        kind: K::kind(&()).into_owned(),
                        namespace: namespace.to_string(),
                        name: name.to_string(),
                        source,
                    })
            }
        }
    }
}

/// Why local files could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LocalFileError {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] ManifestError),
}

#[cfg(test)]
mod tests {
    use super::{LocalObjects, ObjectReader, ReadError};
    use k8s_openapi::api::core::v1::Secret;

    /// A name from a Release or a source object is checked before any read (the cluster's
    /// readers build a request path of it).
    #[tokio::test]
    async fn a_name_or_namespace_no_path_carries_is_not_read() {
        let reader = ObjectReader::Local(LocalObjects::new(Vec::new()));
        for (namespace, name, why) in [
            (
                "apps",
                "../../kube-system/secrets/admin",
                "the name may not contain /",
            ),
            ("apps", "x#", "the name may not contain /"),
            (
                "apps/../kube-system",
                "admin",
                "the namespace is not a namespace name",
            ),
        ] {
            match reader.get::<Secret>(namespace, name).await {
                Err(ReadError::Unaddressable { why: got, .. }) => {
                    assert!(got.starts_with(why), "{namespace}/{name}: {got}")
                }
                other => panic!("{namespace}/{name}: {other:?}"),
            }
        }
        assert!(
            reader
                .get::<Secret>("apps", "admin")
                .await
                .unwrap()
                .is_none()
        );
    }
}
