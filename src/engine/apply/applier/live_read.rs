//! Reading the live objects a render names, as fresh as asked ([`Freshness`]), without
//! holding what else the namespace holds: a few objects of a kind by name, more with one
//! bounded LIST (the rest by name, after a metadata scan when many may be absent), and from the
//! watch cache the objects that carry the Release's labels.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, stream};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::DynamicObject;
use serde_json::Value;

use super::{Applier, ApplyError, Freshness, Prepared};
use crate::engine::api::ObjectKey;
use crate::engine::apply::resources::Resource;
use crate::engine::connect::is_unreachable;
use crate::engine::selectors::{Expression, Selector};

/// Up to this many objects of one kind and namespace are read with GETs, more with one LIST.
/// A LIST returns every object of the kind in the namespace: with a thousand Releases in one
/// namespace, listing for five objects made each reconcile read thousands.
const GETS_UP_TO: usize = 16;
/// A group's LIST reads at most this many times as many objects as are wanted; past that, the
/// namespace holds mostly others' objects of the kind, and the rest of the wanted are read by
/// name. An unbounded LIST read them all: beside 600 Helm release Secrets of ~150 KB,
/// `convoy diff` of a Release of 20 Secrets held 200 MB and took 1.0–1.2 s (24 MB and 0.6 s
/// now; 23 MB and 0.45 s without them).
const LIST_UP_TO_TIMES_WANTED: usize = 2;
/// About how many bytes of metadata one page of the metadata LIST (which tells which of the
/// rest exist) may hold. An object's metadata holds its last-applied annotation when it was
/// applied client-side (up to 256 KiB: the whole object): beside 600 such Secrets of ~150 KB,
/// pages of 500 made `convoy diff` of a Release of 20 Secrets hold 210 MB (`diff_beside_others`).
/// So a page holds as many objects as this fits at the largest metadata seen so far (the first
/// LIST's others', then each page's), between [`METADATA_PAGE_MIN`] and [`METADATA_PAGE_MAX`],
/// the first at most [`METADATA_FIRST_PAGE`]; large metadata thus makes a GET of each of the
/// rest the quicker choice.
const METADATA_PAGE_BYTES: usize = 4 << 20;
const METADATA_PAGE_MIN: usize = 10;
const METADATA_PAGE_MAX: usize = 500;
/// The first metadata page's most: the objects the first LIST read may weigh less than those
/// after them.
const METADATA_FIRST_PAGE: usize = 100;

/// Objects per page of the metadata LIST for metadata of `largest` bytes each (the largest
/// seen: objects differ, and one page of client-side-applied ones among small ones must not
/// hold hundreds of them).
fn metadata_page(largest: usize) -> usize {
    (METADATA_PAGE_BYTES / largest.max(1)).clamp(METADATA_PAGE_MIN, METADATA_PAGE_MAX)
}

/// The largest serialized metadata among `objects`.
fn largest_metadata<'a>(objects: impl Iterator<Item = &'a ObjectMeta>) -> usize {
    objects
        .map(|m| serde_json::to_vec(m).map_or(0, |v| v.len()))
        .max()
        .unwrap_or(0)
}

/// GETs in flight for one kind and namespace.
const GETS_IN_FLIGHT_PER_GROUP: usize = 4;

/// One LIST of live objects: a kind in a namespace, and the names wanted from it.
struct ListGroup {
    resource: Resource,
    namespace: Option<String>,
    wanted: Vec<(String, ObjectKey)>,
    /// The ownership labels every wanted object is sent with (one Release's), as a selector.
    owner: Option<Selector>,
}

/// The objects among `items` whose names `wanted` holds, under its keys.
fn pick(items: Vec<DynamicObject>, wanted: &BTreeMap<&str, &ObjectKey>) -> Vec<(ObjectKey, Value)> {
    items
        .into_iter()
        .filter_map(|o| {
            let key = (*wanted.get(o.metadata.name.as_deref()?)?).clone();
            Some((key, serde_json::to_value(o).ok()?))
        })
        .collect()
}

/// The wanted entries `found` does not hold.
fn unfound(
    wanted: &[(String, ObjectKey)],
    found: &[(ObjectKey, Value)],
) -> Vec<(String, ObjectKey)> {
    let seen: BTreeSet<&ObjectKey> = found.iter().map(|(k, _)| k).collect();
    wanted
        .iter()
        .filter(|(_, key)| !seen.contains(key))
        .cloned()
        .collect()
}

/// The selector of the ownership labels all of `members` carry, if they carry the same ones
/// (the objects of one Release, as the sync and the drift check read them).
fn owner_selector(members: &[&Prepared]) -> Option<Selector> {
    use crate::engine::api::labels;
    let owner_of = |p: &Prepared| {
        let labels = &p.body["metadata"]["labels"];
        Some((
            labels[labels::RELEASE_NAME].as_str()?.to_string(),
            labels[labels::RELEASE_NAMESPACE].as_str()?.to_string(),
        ))
    };
    let (name, namespace) = owner_of(members.first()?)?;
    if !members
        .iter()
        .all(|p| owner_of(p).is_some_and(|o| o.0 == name && o.1 == namespace))
    {
        return None;
    }
    Some(Selector::from_iter([
        Expression::Equal(labels::RELEASE_NAME.into(), name),
        Expression::Equal(labels::RELEASE_NAMESPACE.into(), namespace),
    ]))
}

impl Applier {
    pub(super) async fn list_live<'a>(
        &self,
        prepared: impl Iterator<Item = &'a Prepared>,
    ) -> Result<std::collections::HashMap<ObjectKey, Value>, ApplyError> {
        self.list_live_as(prepared, Freshness::Latest).await
    }

    pub(super) async fn list_live_as<'a>(
        &self,
        prepared: impl Iterator<Item = &'a Prepared>,
        freshness: Freshness,
    ) -> Result<std::collections::HashMap<ObjectKey, Value>, ApplyError> {
        type Group = (String, String, Option<String>);
        let mut groups: BTreeMap<Group, Vec<&Prepared>> = BTreeMap::new();
        for p in prepared {
            groups
                .entry((
                    p.resource.api.api_version.clone(),
                    p.resource.api.kind.clone(),
                    p.namespace.clone(),
                ))
                .or_default()
                .push(p);
        }
        // Owned per group, so the requests can run concurrently.
        let owned: Vec<ListGroup> = groups
            .into_values()
            .map(|members| ListGroup {
                resource: members[0].resource.clone(),
                namespace: members[0].namespace.clone(),
                wanted: members
                    .iter()
                    .map(|p| (p.name.clone(), p.key.clone()))
                    .collect(),
                owner: owner_selector(&members),
            })
            .collect();
        let results: Vec<Result<Vec<(ObjectKey, Value)>, ApplyError>> = stream::iter(owned)
            .map(|group| self.list_group(group, freshness))
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let mut live = std::collections::HashMap::new();
        for r in results {
            live.extend(r?);
        }
        Ok(live)
    }

    async fn list_group(
        &self,
        mut group: ListGroup,
        freshness: Freshness,
    ) -> Result<Vec<(ObjectKey, Value)>, ApplyError> {
        let api: Api<DynamicObject> = match &group.namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &group.resource.api),
            None => Api::all_with(self.client.clone(), &group.resource.api),
        };
        // What this process's watches hold needs no request; the rest is read as before.
        let mut found = Vec::new();
        group.wanted.retain(|(name, key)| {
            let Some(object) =
                self.watched(&group.resource, group.namespace.as_deref(), name, freshness)
            else {
                return true;
            };
            found.extend(serde_json::to_value(object).ok().map(|v| (key.clone(), v)));
            false
        });
        if group.wanted.is_empty() {
            return Ok(found);
        }
        let mut read = self.list_group_from_server(&api, group, freshness).await?;
        read.extend(found);
        Ok(read)
    }

    async fn list_group_from_server(
        &self,
        api: &Api<DynamicObject>,
        group: ListGroup,
        freshness: Freshness,
    ) -> Result<Vec<(ObjectKey, Value)>, ApplyError> {
        if group.wanted.len() <= GETS_UP_TO {
            return self.get_each(api, &group.wanted, freshness).await;
        }
        // One LIST, of at most twice as many objects as wanted: where they are most of the
        // kind in the namespace it is all of them, as before; beside many others it stops
        // there, and the rest are read by name. Only a read of the latest state can stop: a
        // read from the watch cache (resourceVersion=0) cannot be paged (kube drops the
        // resourceVersion of a LIST given a limit, which would move it to etcd), so it reads
        // the objects that carry the Release's labels instead, or else the whole kind, from
        // the API server's memory.
        if !matches!(freshness, Freshness::Latest | Freshness::Watched) {
            return match &group.owner {
                // From the watch cache, only the objects that carry the Release's labels: the
                // server filters them in its memory, where an unfiltered LIST sent every
                // object of the kind in the namespace at every drift pass (beside 600 Helm
                // release Secrets of ~150 KB, 88 MB for a Release of 20 Secrets).
                Some(owner) => self.list_owned(api, group.wanted, owner, freshness).await,
                None => self.list_whole_kind(api, &group.wanted, freshness).await,
            };
        }
        let params = freshness
            .list_params()
            .limit(u32::try_from(LIST_UP_TO_TIMES_WANTED * group.wanted.len()).unwrap_or(u32::MAX));
        let list = match api.list(&params).await {
            Ok(list) => list,
            Err(e) if is_unreachable(&e) => return Err(ApplyError::Unreachable(Box::new(e))),
            Err(_) => return self.get_each(api, &group.wanted, freshness).await,
        };
        let wanted: BTreeMap<&str, &ObjectKey> =
            group.wanted.iter().map(|(n, k)| (n.as_str(), k)).collect();
        let token = list.metadata.continue_.clone().filter(|c| !c.is_empty());
        // How much the others' metadata weighs, for a scan of the rest (the wanted objects',
        // convoy's own, say little of theirs).
        let others = match token {
            Some(_) => largest_metadata(
                list.items
                    .iter()
                    .filter(|o| {
                        !o.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| wanted.contains_key(n))
                    })
                    .map(|o| &o.metadata),
            ),
            None => 0,
        };
        let mut found = pick(list.items, &wanted);
        let Some(token) = token else {
            return Ok(found);
        };
        let rest = unfound(&group.wanted, &found);
        if rest.is_empty() {
            return Ok(found);
        }
        // Which of the rest exist, from the metadata of the kind's objects after the first
        // page (the continue token reads the same snapshot on), unless paging through them
        // would take longer than a GET of each (a 404 says absent): then a GET each.
        let pages = list
            .metadata
            .remaining_item_count
            .and_then(|n| usize::try_from(n).ok())
            .map_or(usize::MAX, |n| n.div_ceil(metadata_page(others)));
        let rest = if pages.saturating_mul(GETS_IN_FLIGHT_PER_GROUP) >= rest.len() {
            rest
        } else {
            match existing_names(api, &rest, &token, others).await {
                Ok(existing) => rest
                    .into_iter()
                    .filter(|(name, _)| existing.contains(name.as_str()))
                    .collect(),
                Err(e) if is_unreachable(&e) => {
                    return Err(ApplyError::Unreachable(Box::new(e)));
                }
                // Refused, or the token expired (410): a GET each.
                Err(_) => rest,
            }
        };
        found.extend(self.get_each(api, &rest, freshness).await?);
        Ok(found)
    }

    /// The wanted objects among those that carry `owner`'s labels (one LIST), and the rest
    /// read by name.
    async fn list_owned(
        &self,
        api: &Api<DynamicObject>,
        wanted: Vec<(String, ObjectKey)>,
        owner: &Selector,
        freshness: Freshness,
    ) -> Result<Vec<(ObjectKey, Value)>, ApplyError> {
        let params = freshness.list_params().labels_from(owner);
        let Some(mut found) = list_wanted(api, &params, &wanted).await? else {
            return self.get_each(api, &wanted, freshness).await;
        };
        // A wanted object without the labels (removed, another Release's now, or gone) is
        // read by name; many of them (objects deleted by hand, labels a webhook strips) as
        // before, with the whole kind.
        let rest = unfound(&wanted, &found);
        if rest.len() > GETS_UP_TO {
            found.extend(self.list_whole_kind(api, &rest, freshness).await?);
        } else {
            found.extend(self.get_each(api, &rest, freshness).await?);
        }
        Ok(found)
    }

    /// The wanted objects among every object of the kind (one LIST, from the watch cache as
    /// `freshness` asks); a refused LIST reads each by name.
    async fn list_whole_kind(
        &self,
        api: &Api<DynamicObject>,
        wanted: &[(String, ObjectKey)],
        freshness: Freshness,
    ) -> Result<Vec<(ObjectKey, Value)>, ApplyError> {
        match list_wanted(api, &freshness.list_params(), wanted).await? {
            Some(found) => Ok(found),
            None => self.get_each(api, wanted, freshness).await,
        }
    }

    /// GET each wanted object (concurrently); a missing or unreadable one is left out.
    async fn get_each(
        &self,
        api: &Api<DynamicObject>,
        wanted: &[(String, ObjectKey)],
        freshness: Freshness,
    ) -> Result<Vec<(ObjectKey, Value)>, ApplyError> {
        // Owned items and a cloned Api per request keep the futures `Send` for any lifetime.
        let results: Vec<Result<Option<(ObjectKey, Value)>, ApplyError>> =
            stream::iter(wanted.to_vec())
                .map(|(name, key)| {
                    let api = api.clone();
                    async move {
                        match freshness.get(&api, &name).await {
                            Ok(Some(o)) => Ok(serde_json::to_value(o).ok().map(|v| (key, v))),
                            Ok(None) => Ok(None),
                            Err(e) if is_unreachable(&e) => {
                                Err(ApplyError::Unreachable(Box::new(e)))
                            }
                            // Only a 404 means absent; a refused or failed read is not
                            // "to create".
                            Err(e) => Err(ApplyError::Read {
                                key: key.to_string(),
                                source: Box::new(e),
                            }),
                        }
                    }
                })
                // Groups already run `concurrency` at a time; a few GETs each keeps the total
                // in flight bounded.
                .buffer_unordered(GETS_IN_FLIGHT_PER_GROUP)
                .collect()
                .await;
        let mut found = Vec::new();
        for r in results {
            found.extend(r?);
        }
        Ok(found)
    }
}

/// The wanted objects among those one LIST with `params` returns; `None` when the LIST is
/// refused (the caller reads them by name).
async fn list_wanted(
    api: &Api<DynamicObject>,
    params: &kube::api::ListParams,
    wanted: &[(String, ObjectKey)],
) -> Result<Option<Vec<(ObjectKey, Value)>>, ApplyError> {
    match api.list(params).await {
        Ok(list) => {
            let by_name: BTreeMap<&str, &ObjectKey> =
                wanted.iter().map(|(n, k)| (n.as_str(), k)).collect();
            Ok(Some(pick(list.items, &by_name)))
        }
        Err(e) if is_unreachable(&e) => Err(ApplyError::Unreachable(Box::new(e))),
        Err(_) => Ok(None),
    }
}

/// The names among `wanted` that exist, from a metadata-only LIST in pages on from `from` (a
/// LIST's continue token: the same snapshot, where that LIST stopped), each page sized by the
/// largest metadata seen so far (`largest`: the first LIST's others'), see
/// [`METADATA_PAGE_BYTES`]. An object's metadata is small whatever its data, unless it was
/// applied client-side: its last-applied annotation holds all of it.
async fn existing_names(
    api: &Api<DynamicObject>,
    wanted: &[(String, ObjectKey)],
    from: &str,
    mut largest: usize,
) -> Result<std::collections::HashSet<String>, kube::Error> {
    let wanted: std::collections::HashSet<&str> = wanted.iter().map(|(n, _)| n.as_str()).collect();
    let mut token = from.to_string();
    let mut limit = metadata_page(largest).min(METADATA_FIRST_PAGE);
    let mut existing = std::collections::HashSet::new();
    loop {
        let params = kube::api::ListParams::default()
            .limit(u32::try_from(limit).unwrap_or(u32::MAX))
            .continue_token(&token);
        let page = api.list_metadata(&params).await?;
        largest = largest.max(largest_metadata(page.items.iter().map(|o| &o.metadata)));
        existing.extend(
            page.items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .filter(|name| wanted.contains(name.as_str())),
        );
        if existing.len() == wanted.len() {
            return Ok(existing);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(next) => {
                token = next;
                limit = metadata_page(largest);
            }
            None => return Ok(existing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ObjectMeta, largest_metadata, metadata_page};
    use serde_json::json;

    /// Pages of small metadata hold the most objects; metadata carrying a client-side apply's
    /// copy of the object makes them small (4 MiB each, about), never under 10. The largest
    /// metadata counts, not the mean: one heavy object among light ones sizes the page.
    #[test]
    fn a_metadata_page_holds_what_fits_at_the_largest_size_seen() {
        let meta = |annotation: usize| -> ObjectMeta {
            serde_json::from_value(
                json!({"name": "s", "annotations": {"a": "x".repeat(annotation)}}),
            )
            .unwrap()
        };
        let largest = |sizes: &[usize]| {
            let metas: Vec<ObjectMeta> = sizes.iter().map(|s| meta(*s)).collect();
            metadata_page(largest_metadata(metas.iter()))
        };
        assert_eq!(largest(&[]), 500);
        assert_eq!(largest(&[100, 200]), 500);
        assert_eq!(largest(&[200_000, 200_000]), 20);
        assert_eq!(largest(&[100, 100, 100, 200_000]), 20);
        assert_eq!(largest(&[1_000_000]), 10);
    }
}
