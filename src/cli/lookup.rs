//! Finding a Release by name the way a person types it: a missing one says in which
//! namespace it was looked for and, when one name is close (or the name exists in another
//! namespace), which was meant; an API server without convoy's CRDs says to run `convoy
//! install`. Also the commands the CLI suggests, written so they can be run as printed.

use kube::Api;
use kube::api::ListParams;

use crate::cli::exit::{CliError, ExitStatus};
use crate::engine::api::Release;
use crate::engine::connect::{Connection, is_unreachable};

/// The API group and version of Releases, as discovery names it.
const GROUP_VERSION: &str = "core.convoy.kumodo.io/v1alpha1";

/// The error for a failed Release read or list: unreachable, CRDs missing, or the cause.
pub async fn api_error(conn: &Connection, e: kube::Error, what: String) -> CliError {
    if is_unreachable(&e) {
        return CliError::new(ExitStatus::Unreachable, conn.unreachable(e));
    }
    if matches!(&e, kube::Error::Api(s) if s.code == 404)
        && let Some(missing) = crds_missing(conn).await
    {
        return missing;
    }
    CliError::new(ExitStatus::Invalid, anyhow::Error::new(e).context(what))
}

/// `Some` (the error to report) when the API server does not serve convoy's API group.
pub async fn crds_missing(conn: &Connection) -> Option<CliError> {
    match conn.client.list_api_group_resources(GROUP_VERSION).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Some(CliError::new(
            ExitStatus::Invalid,
            anyhow::anyhow!(
                "the API server at {} does not serve {GROUP_VERSION}: convoy's CRDs are not installed; run `convoy install`",
                conn.server
            ),
        )),
        _ => None,
    }
}

/// Read Release `name` of `namespace`, or the error a person can act on.
pub async fn release(conn: &Connection, namespace: &str, name: &str) -> Result<Release, CliError> {
    let api: Api<Release> = Api::namespaced(conn.client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(not_found(conn, &api, namespace, name).await),
        Err(e) => Err(api_error(conn, e, format!("cannot read Release {namespace}/{name}")).await),
    }
}

/// Release `name` is not in `namespace`: say so, with the closest name when one is close.
pub async fn not_found(
    conn: &Connection,
    api: &Api<Release>,
    namespace: &str,
    name: &str,
) -> CliError {
    if let Some(missing) = crds_missing(conn).await {
        return missing;
    }
    if let Some(elsewhere) = elsewhere(conn, namespace, name).await {
        return CliError::new(
            ExitStatus::Invalid,
            anyhow::anyhow!("Release {name:?} not found in namespace {namespace} ({elsewhere})"),
        );
    }
    let names: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter_map(|m| m.metadata.name)
                .collect()
        })
        .unwrap_or_default();
    let hint = match closest(name, &names) {
        Some(close) => format!("; did you mean {close:?}?"),
        None if names.is_empty() => " (it has no Releases)".to_string(),
        None => format!(
            "; {} lists its {} Releases",
            suggest("get", namespace),
            names.len()
        ),
    };
    CliError::new(
        ExitStatus::Invalid,
        anyhow::anyhow!("Release {name:?} not found in namespace {namespace}{hint}"),
    )
}

/// `a Release "web" exists in namespace demo: add -n demo` when a cluster-wide list finds
/// Releases named `name` outside `namespace`: a forgotten `-n` is the likeliest reason a name
/// someone knows is not found. `None` when there are none, and when this user may not list
/// Releases in every namespace (a tenant's refusal is no reason to fail the answer).
async fn elsewhere(conn: &Connection, namespace: &str, name: &str) -> Option<String> {
    let all: Api<Release> = Api::all(conn.client.clone());
    let found = all
        .list_metadata(&ListParams::default().fields(&format!("metadata.name={name}")))
        .await
        .ok()?;
    let mut namespaces: Vec<String> = found
        .items
        .into_iter()
        .filter_map(|m| m.metadata.namespace)
        .filter(|ns| ns != namespace)
        .collect();
    namespaces.sort();
    match namespaces.as_slice() {
        [] => None,
        [one] => Some(format!(
            "a Release {name:?} exists in namespace {one}: add -n {one}"
        )),
        many => Some(format!(
            "Releases {name:?} exist in namespaces {}: add -n with one of them",
            many.join(", ")
        )),
    }
}

/// A command to suggest, as it can be run: `convoy ARGS -n NAMESPACE`. The namespace is
/// always written out: a hint printed for `-n demo` that leaves it out runs against the
/// kubeconfig's namespace instead (`Release "web" not found in namespace default`).
pub fn suggest(args: &str, namespace: &str) -> String {
    format!("`convoy {args} -n {namespace}`")
}

/// The name closest to `wanted` when it is close enough to be a typo: at most one edit
/// (a transposition counts as one) for short names, two up to eight characters, three beyond.
pub fn closest<'a>(wanted: &str, names: &'a [String]) -> Option<&'a str> {
    let allowed = match wanted.chars().count() {
        0..=4 => 1,
        5..=8 => 2,
        _ => 3,
    };
    names
        .iter()
        .map(|n| (strsim::damerau_levenshtein(wanted, n), n))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, n)| n.as_str())
}

#[cfg(test)]
mod tests {
    use super::closest;

    #[test]
    fn a_close_name_is_suggested_and_a_far_one_is_not() {
        let names = vec![
            "web".to_string(),
            "api-server".to_string(),
            "worker".to_string(),
        ];
        assert_eq!(closest("wbe", &names), Some("web"));
        assert_eq!(closest("api-sever", &names), Some("api-server"));
        assert_eq!(closest("database", &names), None);
    }
}
