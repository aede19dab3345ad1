//! The informer caches as the engine's listers: the loops read a Release's inventory, its
//! Cluster, its source and the health rule sets from the caches the daemon keeps anyway, as
//! the spec's loops do (health-loop.txt "It reads the ReleaseInventory from the cache",
//! reconcile-flow.txt "It reads the target Cluster from the cache"), instead of one GET or
//! LIST per pass each.
//!
//! A cache answers only once every watch feeding it has listed and while its watches work;
//! otherwise, and for an object it does not hold (an inventory of a shard just taken over,
//! an object not created yet), the engine reads the API server as it would without a cache.

use std::sync::Arc;

use super::informer::Cache;
use crate::engine::api::{
    Cluster, GitRepository, GlobalHealthRuleSet, HealthRuleSet, HelmRegistry, OCIRegistry,
    ReleaseInventory,
};
use crate::engine::runtime::{CachedObject, Listers};

/// The caches the engine may read from.
#[derive(Clone, Default)]
pub struct InformerListers {
    pub inventories: Arc<Cache<ReleaseInventory>>,
    pub clusters: Arc<Cache<Cluster>>,
    pub gits: Arc<Cache<GitRepository>>,
    pub helms: Arc<Cache<HelmRegistry>>,
    pub ocis: Arc<Cache<OCIRegistry>>,
    pub global_rule_sets: Arc<Cache<GlobalHealthRuleSet>>,
    pub rule_sets: Arc<Cache<HealthRuleSet>>,
}

/// Whether `cache` may answer: listed, and its watches working.
fn answers<K>(cache: &Cache<K>) -> bool {
    cache.synced() && cache.watching()
}

fn get<K: Send + Sync + 'static>(cache: &Cache<K>, key: &str) -> Option<CachedObject> {
    if !answers(cache) {
        return None;
    }
    cache.get(key).map(|o| o as CachedObject)
}

fn list<K>(cache: &Cache<K>, namespace: Option<&str>) -> Option<Vec<CachedObject>>
where
    K: kube::Resource + Send + Sync + 'static,
{
    if !answers(cache) {
        return None;
    }
    Some(
        cache
            .all()
            .into_iter()
            .filter(|o| o.meta().namespace.as_deref() == namespace)
            .map(|o| o as CachedObject)
            .collect(),
    )
}

impl Listers for InformerListers {
    fn get(&self, kind: &str, namespace: &str, name: &str) -> Option<CachedObject> {
        let key = format!("{namespace}/{name}");
        match kind {
            "ReleaseInventory" => get(&self.inventories, &key),
            "Cluster" => get(&self.clusters, &key),
            "GitRepository" => get(&self.gits, &key),
            "HelmRegistry" => get(&self.helms, &key),
            "OCIRegistry" => get(&self.ocis, &key),
            _ => None,
        }
    }

    fn list(&self, kind: &str, namespace: Option<&str>) -> Option<Vec<CachedObject>> {
        match kind {
            "GlobalHealthRuleSet" => list(&self.global_rule_sets, None),
            "HealthRuleSet" => list(&self.rule_sets, namespace),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::runtime::{cached, cached_list};

    fn inventory(ns: &str, name: &str) -> ReleaseInventory {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "core.convoy.kumodo.io/v1alpha1", "kind": "ReleaseInventory",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7"},
            "spec": {},
        }))
        .unwrap()
    }

    fn rule_set(ns: &str, name: &str) -> HealthRuleSet {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "health.convoy.kumodo.io/v1alpha1", "kind": "HealthRuleSet",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"rules": []},
        }))
        .unwrap()
    }

    /// A cache that has not listed yet says nothing (the engine then reads the API server);
    /// once listed it answers by kind, and a miss stays a miss.
    #[test]
    fn a_cache_answers_only_once_listed_and_only_for_its_kind() {
        let listers = InformerListers::default();
        listers
            .inventories
            .insert_for_test(inventory("team-a", "web"));
        let l: Option<&dyn Listers> = Some(&listers);
        assert!(cached::<ReleaseInventory>(l, "team-a", "web").is_none());
        listers.inventories.mark_listed_for_test();
        let hit = cached::<ReleaseInventory>(l, "team-a", "web").unwrap();
        assert_eq!(hit.metadata.resource_version.as_deref(), Some("7"));
        assert!(cached::<ReleaseInventory>(l, "team-a", "api").is_none());
        assert!(cached::<ReleaseInventory>(l, "team-b", "web").is_none());
        // A kind asked under another's name does not downcast into the wrong type.
        assert!(cached::<Cluster>(l, "team-a", "web").is_none());
        assert!(cached::<ReleaseInventory>(None, "team-a", "web").is_none());
    }

    /// A namespace's HealthRuleSets never include another namespace's: a tenant's rules judge
    /// only its own Releases.
    #[test]
    fn rule_sets_are_listed_per_namespace() {
        let listers = InformerListers::default();
        listers
            .rule_sets
            .insert_for_test(rule_set("team-a", "mine"));
        listers
            .rule_sets
            .insert_for_test(rule_set("team-b", "theirs"));
        let l: Option<&dyn Listers> = Some(&listers);
        assert!(cached_list::<HealthRuleSet>(l, Some("team-a")).is_none());
        listers.rule_sets.mark_listed_for_test();
        let names = |ns| -> Vec<String> {
            cached_list::<HealthRuleSet>(l, Some(ns))
                .unwrap()
                .iter()
                .map(|s| s.metadata.name.clone().unwrap())
                .collect()
        };
        assert_eq!(names("team-a"), ["mine"]);
        assert_eq!(names("team-b"), ["theirs"]);
        assert!(names("team-c").is_empty());
        assert!(cached_list::<GlobalHealthRuleSet>(l, None).is_none());
    }
}
