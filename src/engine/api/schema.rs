//! Schema helpers for the CRD types: list-map markers and free-form fields.
//!
//! Without `x-kubernetes-list-type: map` and its keys, SSA replaces whole lists and the
//! one-writer-per-field design breaks (DESIGN.md section 1), so these markers are part of the
//! contract and are asserted by tests against the generated CRDs.

use schemars::{Schema, SchemaGenerator, json_schema};

/// A free-form object (Helm values, merge patches, hook templates): stored as given.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A free-form value of any JSON type (JSON 6902 patch values).
pub fn preserve_unknown_any(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A string→string map (labels, annotations).
pub fn string_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
    })
}

/// An object name as the API server requires for Secrets, ConfigMaps, ServiceAccounts and
/// custom resources (RFC 1123 subdomain, at most 253): a reference to any other name could
/// never resolve, and one with `/` or `..` would change a request's path. The engine checks
/// the same in code (`render::object::is_dns_subdomain`), for `-f` files and stored objects.
pub const OBJECT_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// [`OBJECT_NAME`], or empty (a field where empty means unset).
pub const OBJECT_NAME_OR_EMPTY: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$";

/// A namespace's name (RFC 1123 label, at most 63).
pub const NAMESPACE_NAME: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
