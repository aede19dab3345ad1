//! The order people read an object's keys in, for everything convoy prints as YAML
//! (`convoy render`, the YAML view of `convoy diff`): `apiVersion`, `kind`, `metadata` first
//! at the top; `name`, `namespace`, `labels`, `annotations` first in `metadata`; then the
//! rest alphabetically (serde_json's map order).

use serde_json::{Map, Value};

/// Where a mapping sits in an object, which decides the order of its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Top,
    Metadata,
    Other,
}

impl Level {
    /// The keys that go first at this level, in order.
    fn first(self) -> &'static [&'static str] {
        match self {
            Level::Top => &["apiVersion", "kind", "metadata"],
            Level::Metadata => &["name", "namespace", "labels", "annotations"],
            Level::Other => &[],
        }
    }

    /// The level of the mapping under `key` of a mapping at this level.
    pub fn below(self, key: &str) -> Level {
        if self == Level::Top && key == "metadata" {
            Level::Metadata
        } else {
            Level::Other
        }
    }

    /// A mapping's entries in reading order, each with its value's level.
    pub fn entries(
        self,
        map: &Map<String, Value>,
    ) -> impl Iterator<Item = (&String, &Value, Level)> {
        let first = self.first();
        let firsts = first.iter().filter_map(|k| map.get_key_value(*k));
        let rest = map
            .iter()
            .filter(move |(k, _)| !first.contains(&k.as_str()));
        firsts.chain(rest).map(move |(k, v)| (k, v, self.below(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(level: Level, value: &Value) -> Vec<String> {
        let map = value.as_object().unwrap();
        level.entries(map).map(|(k, _, _)| k.clone()).collect()
    }

    #[test]
    fn objects_read_top_down_and_metadata_names_first() {
        let object = json!({"spec": {}, "metadata": {"labels": {}, "name": "a", "uid": "u"}, "kind": "K", "apiVersion": "v1", "data": {}});
        assert_eq!(
            keys(Level::Top, &object),
            ["apiVersion", "kind", "metadata", "data", "spec"]
        );
        assert_eq!(
            keys(Level::Top.below("metadata"), &object["metadata"]),
            ["name", "labels", "uid"]
        );
        // Below anything else, and below metadata, keys are alphabetical.
        let nested = json!({"kind": 1, "apiVersion": 2, "b": 3});
        assert_eq!(
            keys(Level::Top.below("spec"), &nested),
            ["apiVersion", "b", "kind"]
        );
        assert_eq!(Level::Metadata.below("labels"), Level::Other);
    }
}
