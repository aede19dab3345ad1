//! A rendered Kubernetes object: JSON with the accessors convoy needs (identity, wave).
//!
//! Objects stay as JSON from render to apply: convoy must send exactly what the source says
//! (SSA owns what it sends), so they are never round-tripped through typed structs.

use crate::engine::error::Invalid;
use serde_json::Value;

use crate::engine::api::{ObjectKey, annotations};

/// One object of a render.
#[derive(Debug, Clone, PartialEq)]
pub struct Object(pub Value);

impl Object {
    pub fn api_version(&self) -> &str {
        self.0["apiVersion"].as_str().unwrap_or_default()
    }

    pub fn kind(&self) -> &str {
        self.0["kind"].as_str().unwrap_or_default()
    }

    /// The API group: the part of apiVersion before `/`, empty for the core group.
    pub fn group(&self) -> &str {
        match self.api_version().split_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }

    pub fn version(&self) -> &str {
        match self.api_version().split_once('/') {
            Some((_, version)) => version,
            None => self.api_version(),
        }
    }

    pub fn name(&self) -> &str {
        self.0["metadata"]["name"].as_str().unwrap_or_default()
    }

    pub fn namespace(&self) -> Option<&str> {
        self.0["metadata"]["namespace"]
            .as_str()
            .filter(|s| !s.is_empty())
    }

    /// The inventory key (namespace empty for cluster-scoped or not-yet-namespaced objects).
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            group: self.group().to_string(),
            kind: self.kind().to_string(),
            namespace: self.namespace().unwrap_or_default().to_string(),
            name: self.name().to_string(),
        }
    }

    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.0["metadata"]["annotations"][key].as_str()
    }

    pub fn labels(&self) -> Option<&serde_json::Map<String, Value>> {
        self.0["metadata"]["labels"].as_object()
    }

    /// The sync wave: the integer annotation `convoy.kumodo.io/sync-wave`, else Argo CD's
    /// `argocd.argoproj.io/sync-wave` (so a repository written for Argo CD keeps its order),
    /// default 0.
    pub fn wave(&self) -> Result<i32, Invalid> {
        let (name, raw) = match self.annotation(annotations::SYNC_WAVE) {
            Some(raw) => (annotations::SYNC_WAVE, raw),
            None => match self.annotation(crate::engine::content_hooks::ARGO_SYNC_WAVE) {
                Some(raw) => (crate::engine::content_hooks::ARGO_SYNC_WAVE, raw),
                None => return Ok(0),
            },
        };
        raw.trim().parse().map_err(|_| {
            Invalid(format!(
                "{}: annotation {name} must be an integer, not {raw:?}",
                self.key()
            ))
        })
    }

    /// Set `metadata.namespace`.
    pub fn set_namespace(&mut self, namespace: &str) {
        if let Some(meta) = self.metadata_mut() {
            meta.insert("namespace".into(), Value::String(namespace.to_string()));
        }
    }

    /// `metadata`, created if missing. `None` only when the object is not a JSON object.
    pub fn metadata_mut(&mut self) -> Option<&mut serde_json::Map<String, Value>> {
        let obj = self.0.as_object_mut()?;
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if !meta.is_object() {
            *meta = Value::Object(Default::default());
        }
        meta.as_object_mut()
    }

    /// Whether this is a Secret, whose values must never reach a log or a diff.
    pub fn is_secret(&self) -> bool {
        self.group().is_empty() && self.kind() == "Secret"
    }
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.key().fmt(f)
    }
}

/// Why `name` cannot be put in a request's path, if it cannot: kube puts names into URLs as
/// they are, so `..` segments, a `/`, a `%` escape, `?` or `#` (which would end the path
/// and drop the dry-run flag after it) would send the request elsewhere than the object
/// (found by an attack). kube cannot address an object so named (a space already made its
/// URL invalid), and Kubernetes itself refuses `.`, `..`, `/` and `%` for every kind.
pub fn path_segment_trouble(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        Some("may not be empty")
    } else if name == "." || name == ".." {
        Some("may not be . or ..")
    } else if name.contains(['/', '%', '?', '#']) {
        Some("may not contain /, %, ? or #")
    } else if name.chars().any(|c| c.is_control() || c.is_whitespace()) {
        Some("may not contain a space or a control character")
    } else if format!("/{name}")
        .parse::<http::uri::PathAndQuery>()
        .is_err()
    {
        // `<`, `>`, a backtick…: kube's request for it cannot be built, and the whole diff
        // or sync failed on it ("invalid uri character") instead of this object being refused.
        Some("has a character a request's path cannot carry (such as <, > or `)")
    } else {
        None
    }
}

/// Why `api_version` (`version` or `group/version`) cannot go into a discovery request's path
/// as it is, if it cannot: kube's parser splits it at its first `/` and the rest is sent as
/// the version, so `/v1/namespaces/kube-system/secrets/x` had convoy GET that Secret (found
/// by an attack). A group is a DNS subdomain and a version a DNS label, as the API server
/// requires of every API it serves.
pub fn api_version_trouble(api_version: &str) -> Option<&'static str> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if !is_dns_label(version) {
        return Some("is not group/version with a version of lower-case letters, digits and '-'");
    }
    if api_version.contains('/') && group_trouble(group).is_some() {
        return Some(
            "is not group/version with a group of lower-case letters, digits, '-' and '.'",
        );
    }
    None
}

/// Why `group` (an API group, from an apiVersion or an inventory entry) cannot go into a
/// discovery request's path as it is, if it cannot.
pub fn group_trouble(group: &str) -> Option<&'static str> {
    (!is_dns_subdomain(group))
        .then_some("is not an API group (lower-case letters, digits, '-' and '.')")
}

/// Which of an object's address, its name or its namespace (empty: cluster-scoped), cannot go
/// into a request's path as it is, and why: ("name", why) or ("namespace", why).
pub fn address_trouble(namespace: &str, name: &str) -> Option<(&'static str, &'static str)> {
    path_segment_trouble(name)
        .map(|why| ("name", why))
        .or_else(|| {
            (!namespace.is_empty())
                .then(|| namespace_trouble(namespace))
                .flatten()
                .map(|why| ("namespace", why))
        })
}

/// An RFC 1123 label of at most 63 characters (a namespace, a version).
fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && crate::engine::render::helm::is_dns_label_text(s)
}

/// An RFC 1123 subdomain (a ServiceAccount's name, an API group), as the API server requires.
pub fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name
            .split('.')
            .all(crate::engine::render::helm::is_dns_label_text)
}

/// Why `namespace` is not a namespace's name (an RFC 1123 label), if it is not.
pub fn namespace_trouble(namespace: &str) -> Option<&'static str> {
    (!is_dns_label(namespace))
        .then_some("is not a namespace name (lower-case letters, digits and '-', at most 63)")
}

#[cfg(test)]
mod tests {
    use super::{api_version_trouble, group_trouble, namespace_trouble, path_segment_trouble};

    #[test]
    fn names_a_request_path_carries_as_they_are_pass_and_others_are_refused() {
        for ok in [
            "web",
            "system:controller:x",
            "a.b-c_d",
            "ns..x",
            "..x",
            "x..",
        ] {
            assert_eq!(path_segment_trouble(ok), None, "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "x%2f",
            "x?dryRun=",
            "x#",
            "a b",
            "x\n",
            "a<b",
            "a>b",
            "a`b",
        ] {
            assert!(path_segment_trouble(bad).is_some(), "{bad:?}");
        }
        for ok in [
            "v1",
            "apps/v1",
            "networking.k8s.io/v1beta1",
            "example.com/v1alpha1",
        ] {
            assert_eq!(api_version_trouble(ok), None, "{ok}");
        }
        for bad in [
            "/v1/namespaces/kube-system/secrets/x",
            "apps/v1/namespaces/kube-system/deployments?labelSelector=x",
            "apps/v1/../../api/v1",
            "v1#x",
            "Apps/v1",
            "",
            "apps/",
        ] {
            assert!(api_version_trouble(bad).is_some(), "{bad:?}");
        }
        assert_eq!(group_trouble("apps"), None);
        assert!(group_trouble("apps/v1/x").is_some() && group_trouble("").is_some());
        assert_eq!(namespace_trouble("team-a"), None);
        for bad in ["Team", "a/../b", "-a", &"a".repeat(64), ""] {
            assert!(namespace_trouble(bad).is_some(), "{bad:?}");
        }
    }
}
