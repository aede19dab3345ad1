//! `renderRef`: the identity of a render.
//!
//! Spec: reconcile-flow.txt stageRender step 6; DESIGN.md section 3. SHA-256 over a canonical
//! serialization: objects sorted by group, kind, namespace and name, each serialized as
//! JSON with sorted keys and no insignificant whitespace. File order, key order, YAML
//! formatting and comments therefore never change the ref; any value does.

use sha2::{Digest, Sha256};

use super::object::Object;

/// The renderRef of a set of objects: 64 lowercase hex characters.
pub fn render_ref(objects: &[Object]) -> String {
    let mut sorted: Vec<&Object> = objects.iter().collect();
    sorted.sort_by_cached_key(|o| o.key());
    let mut hasher = Sha256::new();
    hasher.update(b"convoy.render/v1\n");
    for object in sorted {
        // serde_json's Map is a BTreeMap (the `preserve_order` feature is not enabled), so
        // keys serialize sorted at every level.
        let canonical = serde_json::to_vec(&object.0).unwrap_or_default();
        hasher.update((canonical.len() as u64).to_be_bytes());
        hasher.update(&canonical);
    }
    hex::encode(hasher.finalize())
}

/// A digest of one object (canonical JSON, 32 hex characters): what the inventory records
/// to know whether an object changed since it was applied.
///
/// A Secret's digest is keyed (see `engine::digest_key`), so a reader of the inventory cannot
/// test guesses of its values against it; without the key there is none, and the object is
/// then always compared by a dry run.
pub fn object_digest(
    object: &Object,
    key: Option<&crate::engine::digest_key::DigestKey>,
) -> Option<String> {
    let canonical = serde_json::to_vec(&object.0).unwrap_or_default();
    if object.is_secret() {
        return key.map(|k| k.digest(&canonical, 32));
    }
    Some(hex::encode(&Sha256::digest(&canonical)[..16]))
}

/// Whether `s` has the form of a renderRef (64 lowercase hex characters). Pins come from an
/// annotation anyone with edit rights can set, and the store builds paths and names from them.
pub fn is_render_ref(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The short form shown to people (like a short Git commit).
pub fn short(render_ref: &str) -> &str {
    render_ref.get(..12).unwrap_or(render_ref)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::render::manifests::parse_documents;

    fn objects(yaml: &str) -> Vec<Object> {
        parse_documents(yaml, "test.yaml").unwrap()
    }

    const A: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\ndata:\n  k: v\n  x: z\n";
    const B: &str =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n";

    #[test]
    fn file_order_does_not_matter() {
        let ab = objects(&format!("{A}---\n{B}"));
        let ba = objects(&format!("{B}---\n{A}"));
        assert_eq!(render_ref(&ab), render_ref(&ba));
    }

    #[test]
    fn key_order_formatting_and_comments_do_not_matter() {
        let plain = objects(A);
        let reordered = objects(
            "# a comment\nkind: ConfigMap\ndata: {x: z, k: v}   # inline\nmetadata: {namespace: ns, name: a}\napiVersion: v1\n",
        );
        let json = objects(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"},"data":{"k":"v","x":"z"}}"#,
        );
        assert_eq!(render_ref(&plain), render_ref(&reordered));
        assert_eq!(render_ref(&plain), render_ref(&json));
    }

    #[test]
    fn any_value_change_changes_the_ref() {
        let base = render_ref(&objects(A));
        for changed in [
            A.replace("k: v", "k: w"),
            A.replace("name: a", "name: b"),
            A.replace("namespace: ns", "namespace: other"),
            A.replace("x: z", "x: \"1\""),
            format!("{A}---\n{B}"),
        ] {
            assert_ne!(render_ref(&objects(&changed)), base, "{changed}");
        }
        // A number and the string of that number differ.
        let number = render_ref(&objects(&B.replace("replicas: 2", "replicas: \"2\"")));
        assert_ne!(number, render_ref(&objects(B)));
    }

    #[test]
    fn only_64_lowercase_hex_characters_are_a_render_ref() {
        assert!(is_render_ref(&"ab12".repeat(16)));
        assert!(!is_render_ref(&"AB12".repeat(16)));
        assert!(!is_render_ref("../../etc/passwd"));
        assert!(!is_render_ref(&format!("{}/x", "a".repeat(62))));
    }

    #[test]
    fn the_ref_is_64_hex_chars_and_short_is_12() {
        let r = render_ref(&objects(A));
        assert_eq!(r.len(), 64);
        assert!(
            r.chars()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        );
        assert_eq!(short(&r).len(), 12);
    }

    /// Pinned values, computed outside convoy (Python's hashlib and json with sorted keys):
    /// a change here changes every renderRef and digest users have recorded, so a new
    /// serde_json (key order, escaping) or a new canonical form fails this test first.
    #[test]
    fn the_ref_and_the_digest_are_pinned() {
        assert_eq!(
            render_ref(&[]),
            "6f29195e7890c6746359ca46091a709d3a78e171da0d5b1fb328347cb4756f52"
        );
        assert_eq!(
            render_ref(&objects(&format!("{B}---\n{A}"))),
            "94b87fa99a22a04a8aa2b9055c2358ab47c88cf6387f2d64d69ff896842ef04d"
        );
        assert_eq!(
            object_digest(&objects(A)[0], None).as_deref(),
            Some("032af3e74f76b9aca405636ea62158a2")
        );
    }
}
