//! `waves::group`: split a render into sync waves.
//!
//! An object's wave is the integer annotation `convoy.kumodo.io/sync-wave` (default 0);
//! waves apply in ascending order (DESIGN.md section 3, "Sync waves").

use std::collections::BTreeMap;

use crate::engine::render::Object;

/// Objects by wave, ascending; each wave keeps the render's apply order.
pub fn group(objects: &[Object]) -> BTreeMap<i32, Vec<Object>> {
    let mut waves: BTreeMap<i32, Vec<Object>> = BTreeMap::new();
    for object in objects {
        waves
            .entry(object.wave().unwrap_or(0))
            .or_default()
            .push(object.clone());
    }
    waves
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, wave: Option<&str>) -> Object {
        let mut v = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}});
        if let Some(w) = wave {
            v["metadata"]["annotations"] = json!({"convoy.kumodo.io/sync-wave": w});
        }
        Object(v)
    }

    #[test]
    fn objects_group_by_their_wave_annotation_in_ascending_order() {
        let objects = [
            obj("a", None),
            obj("b", Some("2")),
            obj("c", Some("-1")),
            obj("d", Some("0")),
            obj("e", Some("2")),
        ];
        let waves = group(&objects);
        let layout: Vec<(i32, Vec<&str>)> = waves
            .iter()
            .map(|(w, objs)| (*w, objs.iter().map(|o| o.name()).collect()))
            .collect();
        assert_eq!(
            layout,
            [(-1, vec!["c"]), (0, vec!["a", "d"]), (2, vec!["b", "e"])]
        );
    }
}
