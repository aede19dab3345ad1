//! Objects that say they outlive their Release: the annotations Helm, Argo CD and Flux
//! honour before they delete an object, honoured by prune and by a Release's deletion.
//!
//! Charts mark PersistentVolumeClaims, CRDs and generated Secrets `helm.sh/resource-policy:
//! keep` so that neither an upgrade that drops them nor an uninstall deletes their data;
//! repositories written for Argo CD and Flux say the same with their own annotations. The
//! spec's pruneRefs deletes every inventoried object the render left; a user moving a chart
//! or a repository to convoy expects these to survive as they did, so they are left in place
//! and dropped from the inventory (orphaned, as Helm leaves them), and the outcome names them.
//! What counts is the live object's annotation, as for Argo CD and Flux: someone who annotates
//! an object by hand protects it too.

use serde_json::Value;

use crate::engine::sync_options::{self, ARGO_SYNC_OPTIONS};

/// Which deletion asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleting {
    /// stageSync step 5: the object left the render.
    Prune,
    /// finalize step 3: the Release is deleted.
    Release,
}

const HELM_RESOURCE_POLICY: &str = "helm.sh/resource-policy";
const FLUX_PRUNE: &str = "kustomize.toolkit.fluxcd.io/prune";

/// Why the live object `live` is not to be deleted by `deleting`, naming the annotation as it
/// reads, or `None`.
///
/// - `helm.sh/resource-policy: keep`: neither (Helm keeps it on upgrade and uninstall).
/// - `kustomize.toolkit.fluxcd.io/prune: disabled`: neither (Flux's garbage collection and
///   deletion).
/// - `kustomize.toolkit.fluxcd.io/ssa: Ignore` or `kustomize.toolkit.fluxcd.io/reconcile:
///   disabled`, an annotation or a label: neither (Flux leaves such an object alone).
/// - `argocd.argoproj.io/sync-options` holding `Prune=false` (or `Prune=confirm`): not
///   pruned; holding `Delete=false` (or `Delete=confirm`): not deleted with the Release.
///   convoy has no confirmation step, so a `confirm` keeps the object.
pub fn keep_reason(live: &Value, deleting: Deleting) -> Option<String> {
    // Read from labels too, as Flux reads them.
    if let Some(paused) = crate::engine::exclusions::flux_paused(live) {
        return Some(paused);
    }
    let annotations = live["metadata"]["annotations"].as_object()?;
    let get = |name: &str| annotations.get(name).and_then(Value::as_str);
    if let Some(value) = get(HELM_RESOURCE_POLICY)
        && value.trim().eq_ignore_ascii_case("keep")
    {
        return Some(format!("{HELM_RESOURCE_POLICY}: {value}"));
    }
    if let Some(value) = get(FLUX_PRUNE)
        && value.trim().eq_ignore_ascii_case("disabled")
    {
        return Some(format!("{FLUX_PRUNE}: {value}"));
    }

    let option = match deleting {
        Deleting::Prune => "Prune",
        Deleting::Release => "Delete",
    };
    sync_options::options(live)
        .find(|(name, setting)| *name == option && matches!(*setting, "false" | "confirm"))
        .map(|(name, setting)| format!("{ARGO_SYNC_OPTIONS}: {name}={setting}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn annotated(annotations: Value) -> Value {
        json!({"metadata": {"name": "data", "annotations": annotations}})
    }

    #[test]
    fn helm_and_flux_keep_an_object_from_both_deletions() {
        for (name, value) in [
            ("helm.sh/resource-policy", "keep"),
            ("helm.sh/resource-policy", " Keep "),
            ("kustomize.toolkit.fluxcd.io/prune", "disabled"),
        ] {
            let live = annotated(json!({ name: value }));
            for deleting in [Deleting::Prune, Deleting::Release] {
                assert_eq!(
                    keep_reason(&live, deleting),
                    Some(format!("{name}: {value}")),
                    "{deleting:?}"
                );
            }
        }
        for (name, value) in [
            ("helm.sh/resource-policy", "delete"),
            ("kustomize.toolkit.fluxcd.io/prune", "enabled"),
            ("example.com/resource-policy", "keep"),
        ] {
            let live = annotated(json!({ name: value }));
            assert_eq!(keep_reason(&live, Deleting::Prune), None, "{name}: {value}");
        }
        assert_eq!(keep_reason(&json!({"metadata": {}}), Deleting::Prune), None);
    }

    #[test]
    fn an_object_flux_leaves_alone_is_kept_from_both_deletions() {
        for (live, said) in [
            (
                json!({"metadata": {"labels": {"kustomize.toolkit.fluxcd.io/ssa": "ignore"}}}),
                "kustomize.toolkit.fluxcd.io/ssa: ignore",
            ),
            (
                annotated(json!({"kustomize.toolkit.fluxcd.io/reconcile": "disabled"})),
                "kustomize.toolkit.fluxcd.io/reconcile: disabled",
            ),
        ] {
            for deleting in [Deleting::Prune, Deleting::Release] {
                assert_eq!(keep_reason(&live, deleting).as_deref(), Some(said));
            }
        }
        let merge = annotated(json!({"kustomize.toolkit.fluxcd.io/ssa": "Merge"}));
        assert_eq!(keep_reason(&merge, Deleting::Prune), None);
    }

    #[test]
    fn argo_cd_keeps_from_a_prune_and_from_a_deletion_each_by_its_own_option() {
        let options = |value: &str| annotated(json!({"argocd.argoproj.io/sync-options": value}));
        let no_prune = options("ServerSideApply=true, Prune=false");
        assert_eq!(
            keep_reason(&no_prune, Deleting::Prune).as_deref(),
            Some("argocd.argoproj.io/sync-options: Prune=false")
        );
        assert_eq!(keep_reason(&no_prune, Deleting::Release), None);
        let no_delete = options("Delete=false");
        assert_eq!(keep_reason(&no_delete, Deleting::Prune), None);
        assert!(keep_reason(&no_delete, Deleting::Release).is_some());
        assert!(keep_reason(&options("Prune=confirm"), Deleting::Prune).is_some());
        assert_eq!(keep_reason(&options("Prune=true"), Deleting::Prune), None);
        assert_eq!(
            keep_reason(&options("PruneLast=false"), Deleting::Prune),
            None
        );
    }
}
