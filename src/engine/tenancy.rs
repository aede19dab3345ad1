//! Tenancy: as whom convoy reads a Release's inputs and writes its objects, and what a
//! Release may reach.
//!
//! Design: DESIGN.md section 7 ("tenancy"). A Release names `spec.serviceAccountName`, or the
//! daemon names a default (`--default-service-account`, as Flux's lockdown does): then every
//! request for that Release to the cluster it lives in — the dry run, the apply, the prune,
//! hook Jobs, the observer's dry runs and reads, and the reads of the Secrets and ConfigMaps it
//! names (value layers, source credentials, a Cluster's kubeconfig) — impersonates that
//! ServiceAccount of the Release's namespace, so Kubernetes RBAC decides what a tenant's
//! Release can do, not convoy's own ServiceAccount. convoy's own identity keeps only its
//! bookkeeping: Releases and sources, status, inventories, Leases, Events and the render store.
//!
//! A Release may also reach into other namespaces only where the operator allows it
//! (`--allow-cross-namespace-refs`, Flux's `--no-cross-namespace-refs` turned around): its
//! `targetNamespace`, a `setNamespace` mutation and the namespace of every namespaced object
//! it renders for the cluster it lives in must be its own namespace.

use crate::engine::api::Release;
use crate::engine::connect::{ConnectError, Connection, KubeconfigPolicy};
use crate::engine::render::Object;
use crate::engine::render::helm_schema::SchemaRefs;
use crate::engine::render::mutations::is_known_cluster_scoped;
use crate::engine::tenant_cache::TenantCache;

/// What the operator allows Releases, and the impersonating connections made so far.
pub struct Tenancy {
    /// The ServiceAccount (of each Release's namespace) to impersonate for Releases that
    /// name none; `None`: such Releases act as convoy itself.
    pub default_service_account: Option<String>,
    /// Let Releases target, mutate into and render objects for other namespaces.
    pub allow_cross_namespace_refs: bool,
    /// What a `Cluster`'s kubeconfig may ask for.
    pub kubeconfig: KubeconfigPolicy,
    /// The https prefixes a chart's values schema may refer to (helm fetches them).
    pub values_schema_refs: SchemaRefs,
    connections: TenantCache<Connection>,
}

/// An impersonating connection unused this long is dropped (its ServiceAccount gone from
/// every Release); a namespace holds at most [`crate::engine::tenant_cache::SERVICE_ACCOUNTS`].
const CONNECTION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);

fn connections() -> TenantCache<Connection> {
    TenantCache::new(CONNECTION_IDLE)
}

impl Default for Tenancy {
    fn default() -> Self {
        Self::new(None, false, KubeconfigPolicy::default())
    }
}

impl std::fmt::Debug for Tenancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenancy")
            .field("default_service_account", &self.default_service_account)
            .field(
                "allow_cross_namespace_refs",
                &self.allow_cross_namespace_refs,
            )
            .field("kubeconfig", &self.kubeconfig)
            .field("connections", &self.connections.len())
            .finish()
    }
}

/// The same rules, with no connections made yet.
impl Clone for Tenancy {
    fn clone(&self) -> Self {
        Self {
            default_service_account: self.default_service_account.clone(),
            allow_cross_namespace_refs: self.allow_cross_namespace_refs,
            kubeconfig: self.kubeconfig.clone(),
            values_schema_refs: self.values_schema_refs.clone(),
            connections: connections(),
        }
    }
}

/// Why a Release is refused by the tenancy rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TenancyError(pub String);

impl Tenancy {
    pub fn new(
        default_service_account: Option<String>,
        allow_cross_namespace_refs: bool,
        kubeconfig: KubeconfigPolicy,
    ) -> Self {
        Self {
            default_service_account,
            allow_cross_namespace_refs,
            kubeconfig,
            values_schema_refs: SchemaRefs::default(),
            connections: connections(),
        }
    }

    /// The same rules, letting charts' values schemas refer to files under `refs`.
    pub fn with_values_schema_refs(mut self, refs: SchemaRefs) -> Self {
        self.values_schema_refs = refs;
        self
    }

    /// The username of the ServiceAccount `release` acts as, if any.
    pub fn service_account_user(&self, release: &Release) -> Result<Option<String>, ConnectError> {
        self.user_in(
            release.metadata.namespace.as_deref().unwrap_or_default(),
            release.spec.service_account_name.as_deref(),
        )
    }

    /// The username of ServiceAccount `named` (or the default one) of `namespace`, if any.
    ///
    /// An empty `named` is an unset one, as in Flux: it takes the default. It once took
    /// convoy's own identity instead (`Some("")` kept the default out, then was filtered to
    /// nothing), so a tenant's `serviceAccountName: ""` acted as convoy-controller and
    /// convoy-observer. A name that cannot be a ServiceAccount's is refused here, before the
    /// API server reads it as part of an impersonated username.
    fn user_in(
        &self,
        namespace: &str,
        named: Option<&str>,
    ) -> Result<Option<String>, ConnectError> {
        let named = named.filter(|n| !n.is_empty());
        let Some(name) = named.or(self.default_service_account.as_deref()) else {
            return Ok(None);
        };
        if !crate::engine::render::object::is_dns_subdomain(name) {
            return Err(ConnectError::ServiceAccount(name.to_string()));
        }
        Ok(Some(format!("system:serviceaccount:{namespace}:{name}")))
    }

    /// The connection `release`'s requests to the cluster it lives in use: `home` itself, or
    /// `home` impersonating the Release's ServiceAccount (made once per ServiceAccount).
    pub fn connection_for(
        &self,
        home: &Connection,
        release: &Release,
    ) -> Result<Connection, ConnectError> {
        self.connection_as(home, self.service_account_user(release)?)
    }

    /// The connection for what a namespace's objects name without a Release (a `Cluster`'s
    /// kubeconfig Secret, read by the Cluster controller): its default ServiceAccount.
    pub fn connection_in(
        &self,
        home: &Connection,
        namespace: &str,
    ) -> Result<Connection, ConnectError> {
        self.connection_as(home, self.user_in(namespace, None)?)
    }

    fn connection_as(
        &self,
        home: &Connection,
        user: Option<String>,
    ) -> Result<Connection, ConnectError> {
        let Some(user) = user else {
            return Ok(home.clone());
        };
        let key = format!("{} {user}", home.cache_key());
        let holder = crate::engine::tenant_cache::Holder::ServiceAccount {
            namespace: crate::engine::connect::service_account_namespace(&user).to_string(),
        };
        self.connections
            .get_or_try_insert(&key, &holder, || home.impersonating(&user))
    }

    /// The Release's own references to other namespaces: `targetNamespace` and `setNamespace`
    /// mutations, when it deploys to the cluster it lives in. `elsewhere`: the target is
    /// another cluster, reached with its own kubeconfig, whose credentials decide what may be
    /// done there (a Cluster with `inCluster: true` is the cluster the Release lives in).
    pub fn check_release(&self, release: &Release, elsewhere: bool) -> Result<(), TenancyError> {
        if self.allow_cross_namespace_refs || elsewhere {
            return Ok(());
        }
        let own = release.metadata.namespace.as_deref().unwrap_or_default();
        if let Some(target) = release.spec.target_namespace.as_deref()
            && target != own
        {
            return Err(cross_namespace(
                own,
                &format!("spec.targetNamespace {target:?}"),
            ));
        }
        for mutation in &release.spec.mutations {
            if let Some(ns) = mutation.set_namespace.as_deref()
                && ns != own
            {
                return Err(cross_namespace(
                    own,
                    &format!("mutation {:?} (setNamespace {ns:?})", mutation.name),
                ));
            }
        }
        Ok(())
    }

    /// The rendered objects: a namespaced object for the cluster the Release lives in must be
    /// in the Release's namespace. `namespaced` answers from discovery when it knows the kind.
    pub fn check_objects(
        &self,
        release: &Release,
        elsewhere: bool,
        objects: &[Object],
        namespaced: impl Fn(&Object) -> Option<bool>,
    ) -> Result<(), TenancyError> {
        if self.allow_cross_namespace_refs || elsewhere {
            return Ok(());
        }
        let own = release.metadata.namespace.as_deref().unwrap_or_default();
        for object in objects {
            let Some(ns) = object.namespace().filter(|ns| !ns.is_empty()) else {
                continue;
            };
            let is_namespaced =
                namespaced(object).unwrap_or_else(|| !is_known_cluster_scoped(object.kind()));
            if is_namespaced && ns != own {
                return Err(cross_namespace(own, &format!("the render's {object}")));
            }
        }
        Ok(())
    }
}

fn cross_namespace(own: &str, what: &str) -> TenancyError {
    TenancyError(format!(
        "{what} is outside the Release's namespace {own:?}: cross-namespace references are refused (--allow-cross-namespace-refs allows them)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn release(spec: serde_json::Value) -> Release {
        let mut value = json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "Release",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"source": {"kind": "GitRepository", "name": "repo"}},
        });
        for (k, v) in spec.as_object().unwrap() {
            value["spec"][k] = v.clone();
        }
        serde_json::from_value(value).unwrap()
    }

    fn object(value: serde_json::Value) -> Object {
        Object(value)
    }

    /// A tenant writing name after name into `serviceAccountName` (none need exist) makes
    /// a connection for each; the namespace keeps only its latest few, another's stay.
    #[tokio::test]
    async fn service_account_names_in_a_loop_hold_a_bounded_number_of_connections() {
        let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        let home = Connection::from_config(config).unwrap();
        let tenancy = Tenancy::default();
        let mut other = release(json!({"serviceAccountName": "deploy"}));
        other.metadata.namespace = Some("team-b".into());
        let kept = tenancy.connection_for(&home, &other).unwrap();
        for n in 0..200 {
            let name = format!("sa-{n}");
            let conn = tenancy
                .connection_for(&home, &release(json!({"serviceAccountName": name})))
                .unwrap();
            assert_eq!(
                conn.identity,
                format!("as system:serviceaccount:team-a:sa-{n}")
            );
        }
        // Each was used just now: the namespace keeps its most, not one per name.
        assert_eq!(
            tenancy.connections.len(),
            crate::engine::tenant_cache::SERVICE_ACCOUNTS_IN_USE + 1
        );
        let again = tenancy.connection_for(&home, &other).unwrap();
        assert_eq!(again.cache_key(), kept.cache_key());
    }

    #[test]
    fn the_service_account_is_the_releases_or_the_default() {
        let tenancy = Tenancy {
            default_service_account: Some("convoy-deployer".into()),
            ..Default::default()
        };
        assert_eq!(
            tenancy
                .service_account_user(&release(json!({})))
                .unwrap()
                .as_deref(),
            Some("system:serviceaccount:team-a:convoy-deployer")
        );
        assert_eq!(
            tenancy
                .service_account_user(&release(json!({"serviceAccountName": "deploy"})))
                .unwrap()
                .as_deref(),
            Some("system:serviceaccount:team-a:deploy")
        );
        assert_eq!(
            Tenancy::default()
                .service_account_user(&release(json!({})))
                .unwrap(),
            None
        );
    }

    #[test]
    fn an_empty_service_account_is_the_default_and_never_convoys_own() {
        let locked = Tenancy {
            default_service_account: Some("convoy-deployer".into()),
            ..Default::default()
        };
        assert_eq!(
            locked
                .service_account_user(&release(json!({"serviceAccountName": ""})))
                .unwrap()
                .as_deref(),
            Some("system:serviceaccount:team-a:convoy-deployer")
        );
        for name in [
            " ",
            "team-b:convoy-deployer",
            "Deploy",
            "a..b",
            "-a",
            "a/b",
            "a\n",
        ] {
            let err = locked
                .service_account_user(&release(json!({"serviceAccountName": name})))
                .unwrap_err();
            assert!(
                matches!(err, ConnectError::ServiceAccount(ref n) if n == name),
                "{name:?}: {err}"
            );
        }
    }

    #[test]
    fn another_namespace_is_refused_unless_allowed() {
        let strict = Tenancy::default();
        let err = strict
            .check_release(&release(json!({"targetNamespace": "team-b"})), false)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.targetNamespace \"team-b\" is outside the Release's namespace \"team-a\": cross-namespace references are refused (--allow-cross-namespace-refs allows them)"
        );
        strict
            .check_release(&release(json!({"targetNamespace": "team-a"})), false)
            .unwrap();
        let objects = [
            object(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "team-a"}}),
            ),
            object(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "r"}}),
            ),
            object(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team-b"}}),
            ),
        ];
        let err = strict
            .check_objects(&release(json!({})), false, &objects, |_| None)
            .unwrap_err();
        assert!(
            err.0.starts_with("the render's Secret/team-b/s is outside"),
            "{err}"
        );
        strict
            .check_objects(&release(json!({})), false, &objects[..2], |_| None)
            .unwrap();
        let open = Tenancy {
            allow_cross_namespace_refs: true,
            ..Default::default()
        };
        open.check_objects(&release(json!({})), false, &objects, |_| None)
            .unwrap();
        // Another cluster's credentials decide there.
        strict
            .check_objects(&release(json!({"cluster": "prod"})), true, &objects, |_| {
                None
            })
            .unwrap();
        // A Cluster that is the cluster the Release lives in (`inCluster: true`) is held to
        // the same rules as no Cluster at all.
        assert!(
            strict
                .check_objects(
                    &release(json!({"cluster": "home"})),
                    false,
                    &objects,
                    |_| None
                )
                .is_err()
        );
        assert!(
            strict
                .check_release(
                    &release(json!({"cluster": "home", "targetNamespace": "team-b"})),
                    false
                )
                .is_err()
        );
    }
}
