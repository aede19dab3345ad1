//! Which exit code (DESIGN.md section 4) an engine stop means when its `Applied` reason alone
//! does not say: a source object that does not exist, a kind the cluster does not serve.
//!
//! The engine's outcome carries these only as words (a `SourceNotReady` reason, a dry-run
//! rejection's message), so the CLI asks the cluster the one question that tells them apart.

use std::collections::{BTreeSet, HashSet};

use crate::cli::exit::ExitStatus;
use crate::engine::api::{Reason, Release};
use crate::engine::render::Object;

/// A `SourceNotReady` stop whose source object (or its Secret) does not exist is input that
/// names what is not there: exit 4, as a mistyped Release name is, not 3 (a source that could
/// not be reached). The spec keeps it transient for the daemon (status-and-conditions.txt
/// "Fetch the source: error": it may be created in a moment), but a person running a command
/// needs to hear that the name is wrong. Any other `status` is returned as it is.
pub async fn missing_source(
    client: &kube::Client,
    release: &Release,
    reason: Option<Reason>,
    status: ExitStatus,
) -> ExitStatus {
    use crate::engine::source::resolve::{ResolveError, release_request};
    if reason != Some(Reason::SourceNotReady) {
        return status;
    }
    let reader = crate::engine::objects::ObjectReader::Cluster(client.clone());
    match release_request(&reader, release).await {
        Err(ResolveError::NotFound { .. }) => ExitStatus::Invalid,
        _ => status,
    }
}

/// The kinds of `objects` the cluster of `client` does not serve, as `Kind in group/version`,
/// sorted. Kinds a CustomResourceDefinition among `objects` defines are left out: the apply
/// installs those first (the dry-run gate accepts them too). A discovery request that fails
/// says nothing about a kind, so it is not counted.
pub async fn unserved_kinds(client: &kube::Client, objects: &[Object]) -> Vec<String> {
    use crate::engine::apply::resources::{ResolveKindError, ResourceCache};
    let defined: HashSet<(&str, &str)> = objects
        .iter()
        .filter(|o| o.kind() == "CustomResourceDefinition" && o.group() == "apiextensions.k8s.io")
        .filter_map(|o| {
            let spec = o.0.get("spec")?;
            Some((
                spec.get("group")?.as_str()?,
                spec.get("names")?.get("kind")?.as_str()?,
            ))
        })
        .collect();
    let cache = ResourceCache::new(client.clone());
    let mut asked = HashSet::new();
    let mut unserved = BTreeSet::new();
    for object in objects {
        let (api_version, kind) = (object.api_version(), object.kind());
        if defined.contains(&(object.group(), kind)) || !asked.insert((api_version, kind)) {
            continue;
        }
        if let Err(ResolveKindError::Unknown { .. }) = cache.resolve(api_version, kind).await {
            unserved.insert(format!("{kind} in {api_version}"));
        }
    }
    unserved.into_iter().collect()
}
