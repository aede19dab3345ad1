//! Completion candidates from the cluster, as kubectl completes names: the shell asks `convoy`
//! itself (`COMPLETE=<shell> convoy -- convoy status -n apps w`, see `cli::generate`), and
//! these functions list what is there. The words typed so far say where to look (`-n`,
//! `--kubeconfig`, `--context`, the Release); a cluster that does not answer within a
//! moment completes nothing rather than hanging the shell.

use std::ffi::OsString;
use std::time::Duration;

use clap_complete::engine::CompletionCandidate;
use kube::Api;
use kube::api::ListParams;

use crate::engine::api::Release;
use crate::engine::connect::{Connection, KubeconfigSource};

/// How long completion may wait for the cluster.
const DEADLINE: Duration = Duration::from_secs(3);

/// Where the words typed so far say to look.
#[derive(Debug, Default, PartialEq)]
struct Words {
    kubeconfig: Option<String>,
    context: Option<String>,
    namespace: Option<String>,
    /// The first positional word after the command (a Release's name).
    release: Option<String>,
}

/// Read the flags out of the words after `--` (`convoy -- convoy pin -n apps web <TAB>`).
fn words(args: &[OsString]) -> Words {
    let all: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let typed = match all.iter().position(|a| a == "--") {
        Some(i) => &all[i + 1..],
        None => &all[..],
    };
    let mut words = Words::default();
    let mut positionals = Vec::new();
    // The last word is the one being completed.
    let done = typed.len().saturating_sub(1);
    let mut i = 1;
    while i < done {
        let word = &typed[i];
        let mut value = |flag: &str| -> Option<String> {
            if word == flag {
                i += 1;
                return typed.get(i).filter(|_| i < done).cloned();
            }
            word.strip_prefix(&format!("{flag}=")).map(str::to_string)
        };
        if let Some(v) = value("--kubeconfig") {
            words.kubeconfig = Some(v);
        } else if let Some(v) = value("--context") {
            words.context = Some(v);
        } else if let Some(v) = value("-n").or_else(|| value("--namespace")) {
            words.namespace = Some(v);
        } else if !word.starts_with('-') {
            positionals.push(word.clone());
        }
        i += 1;
    }
    // positionals[0] is the command.
    words.release = positionals.get(1).cloned();
    words
}

/// Run `list` against the cluster the words name, within the deadline.
fn ask<F, Fut>(list: F) -> Vec<CompletionCandidate>
where
    F: FnOnce(Connection, Words) -> Fut,
    Fut: std::future::Future<Output = Vec<CompletionCandidate>>,
{
    let words = words(&std::env::args_os().collect::<Vec<_>>());
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    runtime.block_on(async move {
        let source = KubeconfigSource {
            path: words.kubeconfig.clone().map(Into::into),
            context: words.context.clone(),
        };
        let Ok(conn) = Connection::from_source(&source).await else {
            return Vec::new();
        };
        let Ok(conn) = conn.with_api_timeout(DEADLINE) else {
            return Vec::new();
        };
        tokio::time::timeout(DEADLINE, list(conn, words))
            .await
            .unwrap_or_default()
    })
}

fn namespace_of(conn: &Connection, words: &Words) -> String {
    words
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone())
}

/// The Releases of the namespace being typed (or the context's).
pub fn release_names() -> Vec<CompletionCandidate> {
    ask(|conn, words| async move {
        let api: Api<Release> = Api::namespaced(conn.client.clone(), &namespace_of(&conn, &words));
        api.list_metadata(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|m| m.metadata.name)
                    .map(CompletionCandidate::new)
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// The cluster's namespaces.
pub fn namespaces() -> Vec<CompletionCandidate> {
    ask(|conn, _| async move {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(conn.client.clone());
        api.list_metadata(&ListParams::default())
            .await
            .map(|l| {
                l.items
                    .into_iter()
                    .filter_map(|m| m.metadata.name)
                    .map(CompletionCandidate::new)
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// `convoy pin NAME <TAB>`: the history's entry numbers, each with its render and outcome.
pub fn history_entries() -> Vec<CompletionCandidate> {
    ask(|conn, words| async move {
        let Some(name) = words.release.clone() else {
            return Vec::new();
        };
        let id = crate::engine::store::ReleaseId {
            namespace: namespace_of(&conn, &words),
            name,
        };
        let store = crate::engine::store::kube::KubernetesStore::new(
            conn.client.clone(),
            crate::engine::store::DEFAULT_STORE_NAMESPACE,
        );
        use crate::engine::store::RenderStore;
        let Ok(history) = store.history(&id).await else {
            return Vec::new();
        };
        history
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let outcome = e.outcome.map(|o| o.as_str()).unwrap_or("applied");
                CompletionCandidate::new((i + 1).to_string()).help(Some(
                    format!(
                        "render {} ({outcome})",
                        crate::engine::render::render_ref::short(&e.render_ref)
                    )
                    .into(),
                ))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(line: &str) -> Words {
        let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        words(&args)
    }

    #[test]
    fn the_typed_words_say_where_to_look() {
        assert_eq!(
            w("convoy -- convoy status -n apps --kubeconfig=/k we"),
            Words {
                kubeconfig: Some("/k".into()),
                context: None,
                namespace: Some("apps".into()),
                release: None,
            }
        );
        let pin = w("convoy -- convoy pin --context prod web --namespace apps ");
        assert_eq!(pin.release.as_deref(), Some("web"));
        assert_eq!(pin.context.as_deref(), Some("prod"));
        assert_eq!(pin.namespace.as_deref(), Some("apps"));
        // The value being typed is not a flag's value yet.
        assert_eq!(w("convoy -- convoy get -n ap").namespace, None);
    }
}
