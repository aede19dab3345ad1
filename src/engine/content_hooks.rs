//! Hooks that charts and repositories carry: objects annotated `helm.sh/hook` or
//! `argocd.argoproj.io/hook` are lifecycle hooks of the render, not objects to apply.
//!
//! Design: DESIGN.md section 7 ("hooks in content"). A hook object is armed once per render
//! in its phase (the same machinery as `spec.lifecycle.hooks`: state in the ReleaseInventory's
//! `hooks` list, shown by `convoy status` and `convoy health`), ordered by its weight; it is
//! never an inventory member, never drift and never pruned as an object. Its entry is named
//! `Kind/namespace/name`, which is how the health loop knows what to poll.
//!
//! | annotation value | phase |
//! | --- | --- |
//! | helm `pre-install`, `pre-upgrade`; argo `PreSync` | preSync |
//! | helm `post-install`, `post-upgrade`; argo `PostSync` | postSync |
//! | argo `Sync` | sync (run with its wave) |
//! | argo `SyncFail` | syncFailed |
//! | helm `pre-delete`; argo `PreDelete` | preDelete |
//! | helm `post-delete`; argo `PostDelete` | postDelete |
//! | helm `test*`, argo `Skip` | left out of the render |
//! | helm `pre-rollback`, `post-rollback` | not run (convoy's rollback re-applies a stored render) |

use crate::engine::error::Invalid;
use std::collections::BTreeSet;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::engine::api::HookPhase;
use crate::engine::render::Object;

pub const HELM_HOOK: &str = "helm.sh/hook";
pub const HELM_WEIGHT: &str = "helm.sh/hook-weight";
pub const HELM_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";
pub const ARGO_HOOK: &str = "argocd.argoproj.io/hook";
pub const ARGO_DELETE_POLICY: &str = "argocd.argoproj.io/hook-delete-policy";
pub const ARGO_SYNC_WAVE: &str = "argocd.argoproj.io/sync-wave";

const HELM_HOOKS: &str = "pre-install, pre-upgrade, post-install, post-upgrade, pre-delete, post-delete, pre-rollback, post-rollback, test";
const ARGO_HOOKS: &str = "PreSync, Sync, PostSync, SyncFail, PreDelete, PostDelete, Skip";

/// When a hook object is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DeletePolicy {
    /// Before the next arming creates it again (the default, as in Helm and Argo CD).
    BeforeHookCreation,
    /// Once it succeeded.
    HookSucceeded,
    /// Once it failed.
    HookFailed,
}

/// A hook object of a render.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentHook {
    /// `Kind/namespace/name`: the hook entry's name.
    pub id: String,
    pub phase: HookPhase,
    /// Order within the phase: lower first; a weight waits for the one before it.
    pub weight: i32,
    /// The sync wave (for `sync` hooks, which run with their wave).
    pub wave: i32,
    pub delete_policies: BTreeSet<DeletePolicy>,
    pub object: Object,
}

impl ContentHook {
    /// Jobs and Pods run; other hook objects (a ServiceAccount, a ConfigMap) just exist.
    pub fn is_workload(&self) -> bool {
        is_workload_kind(self.object.group(), self.object.kind())
    }
}

pub fn is_workload_kind(group: &str, kind: &str) -> bool {
    (group == "batch" && kind == "Job") || (group.is_empty() && kind == "Pod")
}

/// The entry name of a hook object: `Kind/namespace/name`.
pub fn hook_id(object: &Object) -> String {
    format!(
        "{}/{}/{}",
        object.kind(),
        object.namespace().unwrap_or_default(),
        object.name()
    )
}

/// A hook entry name of a content hook, split: (kind, namespace, name). Lifecycle hooks'
/// names hold no `/`.
pub fn parse_id(id: &str) -> Option<(&str, &str, &str)> {
    use crate::engine::render::object::{address_trouble, path_segment_trouble};
    let mut parts = id.splitn(3, '/');
    let (kind, namespace, name) = (parts.next()?, parts.next()?, parts.next()?);
    // The entry is read from the inventory, which whoever may patch it can write: its parts
    // go into request paths as they are (render::object).
    let addressable =
        path_segment_trouble(kind).is_none() && address_trouble(namespace, name).is_none();
    addressable.then_some((kind, namespace, name))
}

/// Whether a hook entry's name is a content hook's (`Kind/namespace/name`; lifecycle hook
/// names hold no `/`), addressable or not.
pub fn is_content_id(id: &str) -> bool {
    id.contains('/')
}

/// Whether the object carries a hook annotation (Helm's or Argo CD's).
pub fn has_hook_annotation(object: &Value) -> bool {
    let annotations = &object["metadata"]["annotations"];
    annotations[HELM_HOOK].is_string() || annotations[ARGO_HOOK].is_string()
}

/// What the annotations make of an object.
#[derive(Debug, Clone, PartialEq)]
enum Role {
    /// An ordinary object: applied.
    Apply,
    /// Left out of the render (tests, `Skip`, rollback-only hooks).
    Omit,
    Hook {
        phases: Vec<HookPhase>,
        weight: i32,
        delete_policies: BTreeSet<DeletePolicy>,
    },
}

fn split_list(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty())
}

fn role(object: &Object) -> Result<Role, Invalid> {
    let bad = |annotation: &str, value: &str, accepted: &str| {
        Invalid(format!(
            "{object}: annotation {annotation} has {value:?}; accepted values are {accepted}"
        ))
    };
    let (mut phases, omit_only, weight, policies) = if let Some(helm) = object.annotation(HELM_HOOK)
    {
        let mut phases = Vec::new();
        let mut omitted = false;
        for hook in split_list(helm) {
            match hook {
                "pre-install" | "pre-upgrade" => phases.push(HookPhase::PreSync),
                "post-install" | "post-upgrade" => phases.push(HookPhase::PostSync),
                "pre-delete" => phases.push(HookPhase::PreDelete),
                "post-delete" => phases.push(HookPhase::PostDelete),
                "pre-rollback" | "post-rollback" | "test" | "test-success" | "test-failure"
                | "crd-install" => omitted = true,
                other => return Err(bad(HELM_HOOK, other, HELM_HOOKS)),
            }
        }
        let weight = match object.annotation(HELM_WEIGHT) {
            None => 0,
            Some(raw) => raw.trim().parse::<i32>().map_err(|_| {
                format!("{object}: annotation {HELM_WEIGHT} must be an integer, not {raw:?}")
            })?,
        };
        let policies = policies(
            object,
            HELM_DELETE_POLICY,
            &[
                ("before-hook-creation", DeletePolicy::BeforeHookCreation),
                ("hook-succeeded", DeletePolicy::HookSucceeded),
                ("hook-failed", DeletePolicy::HookFailed),
            ],
        )?;
        (phases, omitted, weight, policies)
    } else if let Some(argo) = object.annotation(ARGO_HOOK) {
        let mut phases = Vec::new();
        let mut omitted = false;
        for hook in split_list(argo) {
            match hook {
                "PreSync" => phases.push(HookPhase::PreSync),
                "Sync" => phases.push(HookPhase::Sync),
                "PostSync" => phases.push(HookPhase::PostSync),
                "SyncFail" => phases.push(HookPhase::SyncFailed),
                "PreDelete" => phases.push(HookPhase::PreDelete),
                "PostDelete" => phases.push(HookPhase::PostDelete),
                "Skip" => omitted = true,
                other => return Err(bad(ARGO_HOOK, other, ARGO_HOOKS)),
            }
        }
        let policies = policies(
            object,
            ARGO_DELETE_POLICY,
            &[
                ("BeforeHookCreation", DeletePolicy::BeforeHookCreation),
                ("HookSucceeded", DeletePolicy::HookSucceeded),
                ("HookFailed", DeletePolicy::HookFailed),
            ],
        )?;
        // Argo CD orders hooks by their sync wave.
        (phases, omitted, object.wave()?, policies)
    } else {
        return Ok(Role::Apply);
    };
    if phases.is_empty() {
        return Ok(if omit_only { Role::Omit } else { Role::Apply });
    }
    phases.sort();
    phases.dedup();
    Ok(Role::Hook {
        phases,
        weight,
        delete_policies: policies,
    })
}

fn policies(
    object: &Object,
    annotation: &str,
    accepted: &[(&str, DeletePolicy)],
) -> Result<BTreeSet<DeletePolicy>, String> {
    let Some(raw) = object.annotation(annotation) else {
        return Ok(BTreeSet::from([DeletePolicy::BeforeHookCreation]));
    };
    let mut out = BTreeSet::new();
    for value in split_list(raw) {
        match accepted.iter().find(|(name, _)| *name == value) {
            Some((_, policy)) => {
                out.insert(*policy);
            }
            None => {
                let names: Vec<&str> = accepted.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "{object}: annotation {annotation} has {value:?}; accepted values are {}",
                    names.join(", ")
                ));
            }
        }
    }
    if out.is_empty() {
        out.insert(DeletePolicy::BeforeHookCreation);
    }
    Ok(out)
}

/// Give hook objects that use `generateName` a name: the prefix and a short hash of the
/// object, so the same render always names it the same and a re-sync finds what it created.
/// Run before a render is ordered and hashed.
pub fn name_generated(objects: &mut [Object]) {
    for object in objects.iter_mut() {
        if !object.name().is_empty() || !has_hook_annotation(&object.0) {
            continue;
        }
        let Some(prefix) = object.0["metadata"]["generateName"]
            .as_str()
            .map(str::to_string)
        else {
            continue;
        };
        let digest = hex::encode(Sha256::digest(
            serde_json::to_vec(&object.0).unwrap_or_default(),
        ));
        if let Some(meta) = object.metadata_mut() {
            meta.remove("generateName");
            meta.insert(
                "name".into(),
                Value::String(format!("{prefix}{}", &digest[..8])),
            );
        }
    }
}

/// Check every object's hook annotations (stageRender: a bad one fails the render, naming
/// the object, the annotation and the accepted values).
pub fn validate(objects: &[Object]) -> Result<(), Invalid> {
    for object in objects {
        role(object)?;
    }
    Ok(())
}

/// A render split into what is applied and its hooks.
#[derive(Debug, Clone, Default)]
pub struct Split {
    pub objects: Vec<Object>,
    pub hooks: Vec<ContentHook>,
}

/// Split a (validated) render. Objects left out (tests, `Skip`) are in neither list.
pub fn split(objects: &[Object]) -> Split {
    let mut out = Split::default();
    for object in objects {
        match role(object) {
            Ok(Role::Apply) | Err(_) => out.objects.push(object.clone()),
            Ok(Role::Omit) => {}
            Ok(Role::Hook {
                phases,
                weight,
                delete_policies,
            }) => {
                for phase in phases {
                    out.hooks.push(ContentHook {
                        id: hook_id(object),
                        phase,
                        weight,
                        wave: object.wave().unwrap_or(0),
                        delete_policies: delete_policies.clone(),
                        object: object.clone(),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, name: &str, annotations: Value) -> Object {
        let api_version = if kind == "Job" { "batch/v1" } else { "v1" };
        Object(json!({"apiVersion": api_version, "kind": kind,
            "metadata": {"name": name, "namespace": "apps", "annotations": annotations}}))
    }

    #[test]
    fn helm_and_argo_annotations_map_to_phases_weights_and_policies() {
        let objects = vec![
            object(
                "Job",
                "migrate",
                json!({HELM_HOOK: "pre-install,pre-upgrade", HELM_WEIGHT: "-5"}),
            ),
            object(
                "ServiceAccount",
                "hook-sa",
                json!({HELM_HOOK: "pre-install", HELM_DELETE_POLICY: "before-hook-creation,hook-succeeded"}),
            ),
            object("Pod", "smoke", json!({HELM_HOOK: "test"})),
            object(
                "Job",
                "notify",
                json!({ARGO_HOOK: "PostSync", ARGO_SYNC_WAVE: "2"}),
            ),
            object(
                "Job",
                "cleanup",
                json!({ARGO_HOOK: "SyncFail", ARGO_DELETE_POLICY: "HookSucceeded"}),
            ),
            object("ConfigMap", "skipped", json!({ARGO_HOOK: "Skip"})),
            object("ConfigMap", "plain", json!({})),
        ];
        validate(&objects).unwrap();
        let split = split(&objects);
        let applied: Vec<&str> = split.objects.iter().map(|o| o.name()).collect();
        assert_eq!(applied, ["plain"]);
        let hooks: Vec<(String, HookPhase, i32)> = split
            .hooks
            .iter()
            .map(|h| (h.id.clone(), h.phase, h.weight))
            .collect();
        assert_eq!(
            hooks,
            [
                ("Job/apps/migrate".into(), HookPhase::PreSync, -5),
                ("ServiceAccount/apps/hook-sa".into(), HookPhase::PreSync, 0),
                ("Job/apps/notify".into(), HookPhase::PostSync, 2),
                ("Job/apps/cleanup".into(), HookPhase::SyncFailed, 0),
            ]
        );
        assert_eq!(
            split.hooks[1].delete_policies,
            BTreeSet::from([
                DeletePolicy::BeforeHookCreation,
                DeletePolicy::HookSucceeded
            ])
        );
        assert_eq!(
            split.hooks[0].delete_policies,
            BTreeSet::from([DeletePolicy::BeforeHookCreation])
        );
        assert_eq!(
            parse_id("Job/apps/migrate"),
            Some(("Job", "apps", "migrate"))
        );
        assert_eq!(parse_id("db-migrate"), None);
        for unaddressable in ["Job/apps/../../x", "Job/a/../b/x", "Job/apps/x#", "Job//"] {
            assert_eq!(parse_id(unaddressable), None, "{unaddressable}");
            assert!(is_content_id(unaddressable));
        }
    }

    #[test]
    fn bad_hook_annotations_name_the_object_and_the_accepted_values() {
        let err = validate(&[object("Job", "j", json!({HELM_HOOK: "pre-instal"}))])
            .unwrap_err()
            .0;
        assert_eq!(
            err,
            "Job.batch/apps/j: annotation helm.sh/hook has \"pre-instal\"; accepted values are pre-install, pre-upgrade, post-install, post-upgrade, pre-delete, post-delete, pre-rollback, post-rollback, test"
        );
        let err = validate(&[object(
            "Job",
            "j",
            json!({HELM_HOOK: "pre-install", HELM_WEIGHT: "first"}),
        )])
        .unwrap_err()
        .0;
        assert_eq!(
            err,
            "Job.batch/apps/j: annotation helm.sh/hook-weight must be an integer, not \"first\""
        );
        let err = validate(&[object("Job", "j", json!({ARGO_HOOK: "Presync"}))])
            .unwrap_err()
            .0;
        assert!(
            err.contains("accepted values are PreSync, Sync, PostSync"),
            "{err}"
        );
    }

    #[test]
    fn generate_name_becomes_a_name_that_depends_on_the_object() {
        let mut objects = vec![Object(json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "migrate-", "annotations": {ARGO_HOOK: "PreSync"}},
            "spec": {"template": {}}}))];
        let mut again = objects.clone();
        name_generated(&mut objects);
        name_generated(&mut again);
        let name = objects[0].name().to_string();
        assert!(
            name.starts_with("migrate-") && name.len() == "migrate-".len() + 8,
            "{name}"
        );
        assert_eq!(name, again[0].name());
        assert!(objects[0].0["metadata"].get("generateName").is_none());
    }
}
