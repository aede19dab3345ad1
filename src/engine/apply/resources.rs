//! Which API resource serves a rendered object's kind, and whether it is namespaced.
//!
//! Resolved through discovery once per group-version and cached, so applying a thousand
//! objects of three kinds costs two discovery requests. A CRD applied by the render itself
//! makes its kind appear later: `forget` drops the cached group-version so the next lookup
//! asks again. A miss (a group-version or kind the cluster did not serve) is asked again at
//! most every [`MISS_RETRY`]: a CRD someone installs later is found without a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Client;

use crate::engine::locks;
use kube::core::{ApiResource, GroupVersion};
use kube::discovery::{ApiCapabilities, Scope, oneshot};

/// How to reach one kind.
#[derive(Debug, Clone)]
pub struct Resource {
    pub api: ApiResource,
    pub namespaced: bool,
}

/// Why a kind could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ResolveKindError {
    #[error("the cluster does not serve kind {kind} in {group_version}")]
    Unknown { group_version: String, kind: String },
    #[error("cannot discover {group_version}")]
    Discovery {
        group_version: String,
        #[source]
        source: Box<kube::Error>,
    },
}

/// What discovery said about one group-version: its resources, or `None` when the cluster
/// does not serve it. Shared, because a sync resolves each of its objects several times and
/// copying a group's list each time cost about 40 ms of a 1,000-object sync (issue 21).
type GroupVersionResources = Option<Arc<Vec<(ApiResource, ApiCapabilities)>>>;

/// How long a discovery miss is believed before the cluster is asked again.
pub const MISS_RETRY: Duration = Duration::from_secs(10);

/// How long a group's preferred resource for a kind is believed (a CRD may change which
/// version it prefers, or stop serving one).
pub const PREFERRED_FOR: Duration = Duration::from_secs(300);

/// A group's preferred resource for a kind (`None`: not served), and when it was learned.
type Learned = (Instant, Option<Resource>);

/// A per-cluster cache of discovery answers, each with when it was learned.
pub struct ResourceCache {
    client: Client,
    groups: Mutex<HashMap<String, (Instant, GroupVersionResources)>>,
    /// `(group, kind)` to its preferred resource (`None`: not served), for inventory keys,
    /// which carry no version. Each lookup asked discovery for the whole group (a request per
    /// version and one more) at every health pass, for every entry of a group other than the
    /// core one (found by a run of the daemon on Argo CD's and cert-manager's kinds: 38
    /// discovery requests a minute at rest for three Releases).
    preferred: Mutex<HashMap<(String, String), Learned>>,
    fetch: tokio::sync::Mutex<()>,
}

impl ResourceCache {
    pub fn new(client: Client) -> Self {
        Self {
            client,
            groups: Mutex::new(HashMap::new()),
            preferred: Mutex::new(HashMap::new()),
            fetch: tokio::sync::Mutex::new(()),
        }
    }

    /// The resource serving `kind` of `api_version`.
    pub async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Resource, ResolveKindError> {
        let unknown = || ResolveKindError::Unknown {
            group_version: api_version.to_string(),
            kind: kind.to_string(),
        };
        let serves = |r: &GroupVersionResources| {
            r.as_ref()
                .is_some_and(|list| list.iter().any(|(ar, _)| ar.kind == kind))
        };
        let fresh = |cached: &Option<(Instant, GroupVersionResources)>| match cached {
            Some((at, r)) if serves(r) || at.elapsed() < MISS_RETRY => Some(r.clone()),
            _ => None,
        };
        let resources = match fresh(&self.cached(api_version)) {
            Some(r) => r,
            None => {
                // One discovery request per group-version, even with many concurrent lookups.
                let _guard = self.fetch.lock().await;
                match fresh(&self.cached(api_version)) {
                    Some(r) => r,
                    None => self.discover(api_version).await?,
                }
            }
        };
        let resources = resources.ok_or_else(unknown)?;
        resources
            .iter()
            .find(|(ar, _)| ar.kind == kind)
            .map(|(ar, caps)| Resource {
                api: ar.clone(),
                namespaced: caps.scope == Scope::Namespaced,
            })
            .ok_or_else(unknown)
    }

    /// The preferred resource for `kind` in `group` (inventory entries record no version);
    /// `None` when the cluster no longer serves it.
    pub async fn resolve_group_kind(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<Option<Resource>, ResolveKindError> {
        if group.is_empty() {
            return match self.resolve("v1", kind).await {
                Ok(r) => Ok(Some(r)),
                Err(ResolveKindError::Unknown { .. }) => Ok(None),
                Err(e) => Err(e),
            };
        }
        // An inventory entry's group (whoever may patch the inventory writes it) goes into
        // the discovery request's path as it is (render::object).
        if crate::engine::render::object::group_trouble(group).is_some() {
            return Ok(None);
        }
        self.preferred_now(group, kind).await
    }

    /// [`ResourceCache::resolve_group_kind`] from what was learned in the last 5 minutes (a
    /// miss in the last 10 s): for the health loop's reads, which asked discovery for the
    /// whole group of every entry outside the core group at every pass (found by a run of the
    /// daemon: 38 discovery requests a minute at rest for three Releases). Deletes and
    /// ownership reads ask afresh: an answer 5 minutes old may name a version a CRD no longer
    /// serves, whose 404 would read as "already gone" (found by a review). A reader that finds
    /// nothing calls [`ResourceCache::forget_preferred`] and asks again.
    pub async fn resolve_group_kind_cached(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<Option<Resource>, ResolveKindError> {
        if group.is_empty() || crate::engine::render::object::group_trouble(group).is_some() {
            return self.resolve_group_kind(group, kind).await;
        }
        let key = (group.to_string(), kind.to_string());
        let cached = locks::lock(&self.preferred).get(&key).cloned();
        if let Some((at, resource)) = cached {
            let believed = if resource.is_some() {
                PREFERRED_FOR
            } else {
                MISS_RETRY
            };
            if at.elapsed() < believed {
                return Ok(resource);
            }
        }
        self.preferred_now(group, kind).await
    }

    /// Forget what `group` prefers for `kind` (a read through it found nothing).
    pub fn forget_preferred(&self, group: &str, kind: &str) {
        locks::lock(&self.preferred).remove(&(group.to_string(), kind.to_string()));
    }

    /// Ask discovery what `group` prefers for `kind`, and keep the answer.
    async fn preferred_now(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<Option<Resource>, ResolveKindError> {
        let key = (group.to_string(), kind.to_string());
        let resource = match oneshot::group(&self.client, group).await {
            Ok(g) => g.recommended_kind(kind).map(|(api, caps)| Resource {
                api,
                namespaced: caps.scope == Scope::Namespaced,
            }),
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(source) => {
                return Err(ResolveKindError::Discovery {
                    group_version: group.to_string(),
                    source: Box::new(source),
                });
            }
        };
        locks::lock(&self.preferred).insert(key, (Instant::now(), resource.clone()));
        Ok(resource)
    }

    /// Forget what was learned about `api_version` (a CRD for it was just applied), and what
    /// its group prefers.
    pub fn forget(&self, api_version: &str) {
        self.lock().remove(api_version);
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        locks::lock(&self.preferred).retain(|(g, _), _| g != group);
    }

    fn cached(&self, api_version: &str) -> Option<(Instant, GroupVersionResources)> {
        self.lock().get(api_version).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, GroupVersionResources)>> {
        crate::engine::locks::lock(&self.groups)
    }

    async fn discover(&self, api_version: &str) -> Result<GroupVersionResources, ResolveKindError> {
        let unknown = || ResolveKindError::Unknown {
            group_version: api_version.to_string(),
            kind: String::new(),
        };
        // It goes into the discovery request's path as it is (render::object).
        if crate::engine::render::object::api_version_trouble(api_version).is_some() {
            return Err(unknown());
        }
        let gv: GroupVersion = api_version.parse().map_err(|_| unknown())?;
        let found = match oneshot::pinned_group(&self.client, &gv).await {
            Ok(group) => Some(Arc::new(group.versioned_resources(&gv.version))),
            Err(kube::Error::Api(status)) if status.code == 404 => None,
            Err(source) => {
                return Err(ResolveKindError::Discovery {
                    group_version: api_version.to_string(),
                    source: Box::new(source),
                });
            }
        };
        self.lock()
            .insert(api_version.to_string(), (Instant::now(), found.clone()));
        Ok(found)
    }
}
