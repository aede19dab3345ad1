//! Argo CD's per-object `argocd.argoproj.io/sync-options` annotation, as repositories written
//! for Argo CD carry it: comma-separated `Name=value` options, each read as Argo CD reads it
//! (names and values exact, case included; spaces around an option and its `=` ignored).
//!
//! convoy honours the options that say what may happen to an object: `Prune=false` and
//! `Delete=false` (engine::keep_policy), `SkipDryRunOnMissingResource=true` (the dry-run gate
//! leaves out such an object while the cluster does not serve its kind) and `Force=true`
//! (re-created when it cannot change in place: engine::apply's applier::recreate). The others
//! (`ServerSideApply`, `PruneLast`, `Replace`…) ask for what convoy does anyway or instead.

use serde_json::Value;

/// The annotation's name.
pub const ARGO_SYNC_OPTIONS: &str = "argocd.argoproj.io/sync-options";

/// The options `object` carries, as `(name, value)`, in order.
pub fn options(object: &Value) -> impl Iterator<Item = (&str, &str)> {
    object["metadata"]["annotations"][ARGO_SYNC_OPTIONS]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter_map(|option| {
            let (name, value) = option.split_once('=')?;
            Some((name.trim(), value.trim()))
        })
}

/// The option that says so, as a message names it.
pub const SKIP_DRY_RUN_ON_MISSING_RESOURCE: &str = "SkipDryRunOnMissingResource=true";

/// Whether `object` asks to be left out of the dry run while the cluster does not serve its
/// kind: a custom resource whose CRD something else installs during the sync (an operator
/// applied in an earlier wave installs its CRDs when it starts), which no dry run before the
/// first wave can accept. Argo CD's reading: only a kind the cluster does not serve skips;
/// a served kind is dry-run, and rejected, like any other object.
pub fn skips_dry_run_when_missing(object: &Value) -> bool {
    options(object).any(|option| option == ("SkipDryRunOnMissingResource", "true"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn annotated(value: &str) -> Value {
        json!({"metadata": {"annotations": {ARGO_SYNC_OPTIONS: value}}})
    }

    #[test]
    fn options_are_read_as_argo_cd_reads_them() {
        let object = annotated("ServerSideApply=true, Prune=false,Validate, =x");
        let read: Vec<_> = options(&object).collect();
        assert_eq!(
            read,
            [("ServerSideApply", "true"), ("Prune", "false"), ("", "x")]
        );
        assert_eq!(options(&json!({"metadata": {}})).count(), 0);
        assert_eq!(
            options(&json!({"metadata": {"annotations": {ARGO_SYNC_OPTIONS: 3}}})).count(),
            0
        );
    }

    #[test]
    fn only_the_option_set_to_true_skips_the_dry_run() {
        for yes in [
            "SkipDryRunOnMissingResource=true",
            "Prune=false, SkipDryRunOnMissingResource=true ",
        ] {
            assert!(skips_dry_run_when_missing(&annotated(yes)), "{yes}");
        }
        for no in [
            "SkipDryRunOnMissingResource=false",
            "SkipDryRunOnMissingResource=True",
            "skipDryRunOnMissingResource=true",
            "SkipDryRunOnMissingResource",
            "Prune=false",
        ] {
            assert!(!skips_dry_run_when_missing(&annotated(no)), "{no}");
        }
        assert!(!skips_dry_run_when_missing(&json!({"metadata": {}})));
    }
}
