//! convoy's API: the CRD types, the CRDs generated from them, and the names that are part of
//! the contract (condition types, reasons, annotations, field managers).
//!
//! Design: DESIGN.md sections 1 and 2.

// kube's printcolumn(...) attributes repeat `type_ = "string"`, which this lint mistakes for
// a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

mod cluster;
mod constants;
mod health;
mod inventory;
mod release;
mod schema;
mod source;

/// The form of every duration field (a Go duration such as `30s`, `1m30s`, `1.5h`, or `0`):
/// the API server refuses anything else, so a typo is an error at `kubectl apply`, not a
/// silently ignored timeout.
pub const DURATION_PATTERN: &str = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$";

pub use cluster::*;
pub use constants::*;
pub use health::*;
pub use inventory::*;
pub use release::*;
pub use source::*;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Every CRD convoy defines, in install order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        Release::crd(),
        ReleaseInventory::crd(),
        Cluster::crd(),
        GitRepository::crd(),
        HelmRegistry::crd(),
        OCIRegistry::crd(),
        HealthRuleSet::crd(),
        GlobalHealthRuleSet::crd(),
    ]
}

#[cfg(test)]
mod duration_pattern_tests {
    #[test]
    fn the_schema_pattern_accepts_what_parse_duration_accepts() {
        let pattern = regex::Regex::new(super::DURATION_PATTERN).unwrap();
        for ok in [
            "0",
            "30s",
            "1m30s",
            "1.5h",
            "250ms",
            "10us",
            "2µs",
            "1h2m3s4ms",
        ] {
            assert!(pattern.is_match(ok), "{ok}");
            assert!(crate::engine::duration::parse_duration(ok).is_ok(), "{ok}");
        }
        for bad in ["", "5", "5 minutes", "-1s", "1d", "s", "1m 30s"] {
            assert!(!pattern.is_match(bad), "{bad}");
            assert!(
                crate::engine::duration::parse_duration(bad).is_err(),
                "{bad}"
            );
        }
    }
}
