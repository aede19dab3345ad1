//! YAML read into values no larger than the text allows.
//!
//! An alias (`*name`) repeats the node its anchor marks, and aliases of nodes that hold
//! aliases multiply: a few hundred bytes of text can stand for gigabytes of values (a
//! "billion laughs"). serde-saphyr counts the events and aliases it reads, but a replayed
//! scalar costs it one event however long it is, while it costs convoy all its bytes each
//! time; and every document, file and layer is parsed with a fresh budget. So values are
//! built here by a visitor that counts what it builds, and a text may build at most
//! [`EXPANSION`] times its own size. Without aliases a value is never that much larger than
//! its text; with them, a render's memory stays proportional to what the source holds.
//!
//! A merge key (`<<: [*a, *b]`) is expanded inside serde-saphyr, before any visitor sees it,
//! and the entries a later key overrides are dropped there: the visitor is never charged for
//! them, while serde-saphyr's fixed default budget (250,000 nodes per text) let 600 bytes cost
//! a second of CPU, and each document of a chart's output got that budget anew. So
//! serde-saphyr's own budget is scaled to the same text: no more nodes, events or scalar bytes
//! than the visitor's bytes would allow, replayed or dropped ones included.

use std::cell::Cell;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// How many bytes of values one byte of YAML text may build. Each node counts
/// [`NODE_BYTES`] on top of its strings: a flow list of one-digit numbers (`[1,1,1]`, two
/// bytes of text a node) stays near 17×, which leaves aliases room for about 4× more.
pub const EXPANSION: usize = 64;

/// What one node counts for, besides its strings (about a `serde_json::Value`'s size).
const NODE_BYTES: usize = 32;

thread_local! {
    /// Bytes the parse running on this thread may still build.
    static LEFT: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Read every document of `text` into values.
pub fn from_multiple(
    text: &str,
    options: serde_saphyr::Options,
) -> Result<Vec<Value>, serde_saphyr::Error> {
    bounded(text, options, |options| {
        serde_saphyr::from_multiple_with_options::<Bounded>(text, options)
            .map(|docs| docs.into_iter().map(|Bounded(v)| v).collect())
    })
}

/// Read the one document of `text` into a value.
pub fn from_str(text: &str, options: serde_saphyr::Options) -> Result<Value, serde_saphyr::Error> {
    bounded(text, options, |options| {
        serde_saphyr::from_str_with_options::<Bounded>(text, options).map(|Bounded(v)| v)
    })
}

fn bounded<T>(
    text: &str,
    mut options: serde_saphyr::Options,
    parse: impl FnOnce(serde_saphyr::Options) -> Result<T, serde_saphyr::Error>,
) -> Result<T, serde_saphyr::Error> {
    let bytes = allowance(text);
    options.budget = Some(scaled(
        options.budget.take().unwrap_or_default(),
        text,
        bytes,
    ));
    let before = LEFT.replace(bytes);
    let result = parse(options);
    LEFT.set(before);
    result
}

/// Bytes of values `text` may build.
fn allowance(text: &str) -> usize {
    text.len().saturating_mul(EXPANSION).max(NODE_BYTES * 64)
}

/// serde-saphyr's budget, lowered to what `bytes` of values pay for: a node costs the visitor
/// [`NODE_BYTES`], and a node is at most two events (a collection's start and end), plus a
/// document's own events, each of which takes some of the text.
fn scaled(mut budget: serde_saphyr::Budget, text: &str, bytes: usize) -> serde_saphyr::Budget {
    let nodes = bytes / NODE_BYTES;
    let events = nodes
        .saturating_mul(2)
        .saturating_add(text.len())
        .saturating_add(4);
    budget.max_nodes = budget.max_nodes.min(nodes);
    budget.max_events = budget.max_events.min(events);
    budget.max_total_scalar_bytes = budget.max_total_scalar_bytes.min(bytes);
    budget.max_recorded_anchor_events = budget.max_recorded_anchor_events.min(events);
    budget.max_recorded_anchor_bytes = budget.max_recorded_anchor_bytes.min(bytes);
    // Its guess at a bomb (more than ten aliases an anchor, once there are 100) refuses
    // manifests kubectl reads; the bounds above already keep a bomb to the text's size.
    budget.enforce_alias_anchor_ratio = false;
    budget
}

fn charge<E: serde::de::Error>(bytes: usize) -> Result<(), E> {
    let left = LEFT.get();
    match left.checked_sub(bytes) {
        Some(rest) => {
            LEFT.set(rest);
            Ok(())
        }
        None => Err(E::custom(expansion_message())),
    }
}

const EXPANDS: &str = "the YAML expands to more than";

/// Whether `error` refuses a text that builds too much: this module's visitor stopped it, or
/// serde-saphyr's budget as [`scaled`] sets it did.
pub fn expands(error: &serde_saphyr::Error) -> bool {
    use serde_saphyr::budget::BudgetBreach;
    let mut inner = error;
    while let serde_saphyr::Error::AliasError { error, .. }
    | serde_saphyr::Error::WithSnippet { error, .. } = inner
    {
        inner = error;
    }
    match inner {
        serde_saphyr::Error::Budget { breach, .. } => matches!(
            breach,
            BudgetBreach::Nodes { .. }
                | BudgetBreach::Events { .. }
                | BudgetBreach::ScalarBytes { .. }
                | BudgetBreach::RecordedAnchorEvents { .. }
                | BudgetBreach::RecordedAnchorBytes { .. }
        ),
        _ => error.to_string().contains(EXPANDS),
    }
}

/// What to tell of an [`expands`] error, in one line without the parser's location.
pub fn expansion_message() -> String {
    format!(
        "{EXPANDS} {EXPANSION} times its size (aliases of aliases, or merge keys?); convoy reads no more of it"
    )
}

/// A value built under the thread's budget.
struct Bounded(Value);

impl<'de> serde::Deserialize<'de> for Bounded {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BoundedVisitor).map(Bounded)
    }
}

/// Builds what `serde_json::Value`'s own visitor builds, charging each node and string.
struct BoundedVisitor;

impl<'de> Visitor<'de> for BoundedVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        Ok(Value::Number(v.into()))
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        let number: Number =
            serde::Deserialize::deserialize(serde::de::value::I128Deserializer::<E>::new(v))?;
        Ok(Value::Number(number))
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        let number: Number =
            serde::Deserialize::deserialize(serde::de::value::U128Deserializer::<E>::new(v))?;
        Ok(Value::Number(number))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        charge(NODE_BYTES + v.len())?;
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        charge(NODE_BYTES + v.len())?;
        Ok(Value::String(v))
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        charge(NODE_BYTES)?;
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        charge(NODE_BYTES)?;
        let mut items = Vec::new();
        while let Some(Bounded(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        charge(NODE_BYTES)?;
        let mut values = Map::new();
        while let Some(key) = map.next_key_seed(Key)? {
            let Bounded(value) = map.next_value()?;
            values.insert(key, value);
        }
        Ok(Value::Object(values))
    }
}

/// A map key, as `serde_json::Value` reads one (a string), charged like one.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = String;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<String, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        charge(NODE_BYTES + v.len())?;
        Ok(v.to_owned())
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<String, E> {
        charge(NODE_BYTES + v.len())?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::render::manifests::yaml_options;

    /// What serde_json's own value reads, this reads too: scalars of every kind, keys that
    /// are not strings, merge keys, nulls, aliases that stay within bounds.
    #[test]
    fn values_are_what_serde_json_reads() {
        let text = "\
a: 1
b: -2
c: 18446744073709551615
d: 1.5
f: true
g: ~
h: ''
i: [1, two, {three: 3}]
1: int key
true: bool key
base: &base {x: 1, y: [a, b]}
merged:
  <<: *base
  y: [c]
again: *base
long: 0o17
";
        let expected: Value = serde_saphyr::from_str_with_options(text, yaml_options()).unwrap();
        assert_eq!(from_str(text, yaml_options()).unwrap(), expected);
        let docs = "a: 1\n---\n- x\n---\n";
        let expected: Vec<Value> =
            serde_saphyr::from_multiple_with_options(docs, yaml_options()).unwrap();
        assert_eq!(from_multiple(docs, yaml_options()).unwrap(), expected);
    }

    /// Aliases of aliases: 10 × 10 × 10 × 10 copies of a 6,000-byte string (60 MB) from
    /// about 6 KB of text. serde-saphyr alone builds it all; this stops at 64× the text.
    #[test]
    fn aliases_of_aliases_stop_at_the_budget() {
        let mut text = format!("a: &a \"{}\"\n", "x".repeat(6000));
        for (name, of) in [("b", "a"), ("c", "b"), ("d", "c"), ("e", "d")] {
            text.push_str(&format!(
                "{name}: &{name} [{}]\n",
                vec![format!("*{of}"); 10].join(", ")
            ));
        }
        let Err(err) = from_str(&text, yaml_options()) else {
            panic!("the value was built");
        };
        assert!(expands(&err), "{err}");
        assert!(
            err.to_string()
                .contains("the YAML expands to more than 64 times its size"),
            "{err}"
        );
        // The same anchors named a few times are fine.
        let text = format!("a: &a \"{}\"\nb: [*a, *a, *a]\n", "x".repeat(6000));
        assert_eq!(
            from_str(&text, yaml_options()).unwrap()["b"][2],
            Value::String("x".repeat(6000))
        );
    }

    /// Merge keys of merge keys: each level merges ten copies of the one before, whose keys
    /// all override one another, so the value is ten short keys however deep it goes, while
    /// serde-saphyr expands every copy first: about 220,000 nodes from 300 bytes of text,
    /// under its default budget of 250,000. The text's own budget stops it at the third line.
    #[test]
    fn merge_keys_of_merge_keys_stop_at_the_budget() {
        let bomb = |levels: usize| {
            let keys: Vec<String> = (0..10).map(|k| format!("k{k}: v")).collect();
            let mut text = format!("a0: &a0 {{{}}}\n", keys.join(", "));
            for level in 1..=levels {
                let copies = vec![format!("*a{}", level - 1); 10].join(", ");
                text.push_str(&format!("a{level}: &a{level} {{<<: [{copies}]}}\n"));
            }
            text
        };
        let text = bomb(4);
        let Err(err) = from_str(&text, yaml_options()) else {
            panic!("the merges were expanded");
        };
        assert!(expands(&err), "{err}");
        assert_eq!(err.location().map(|l| l.line()), Some(3), "{err}");
        // One level of merges, as values files use them, reads as serde-saphyr reads it.
        let text = bomb(1);
        let value = from_str(&text, yaml_options()).unwrap();
        assert_eq!(value["a1"], value["a0"]);
        assert_eq!(value["a1"].as_object().map(|m| m.len()), Some(10));
    }

    /// One anchor named by many aliases, as hand-written manifests and values files do
    /// (`resources: *defaults` in each of 200 Deployments), reads as kubectl and Helm read
    /// it: serde-saphyr's heuristic refused more than ten aliases an anchor once there were
    /// 100, which the text's own budget makes needless.
    #[test]
    fn an_anchor_named_by_many_aliases_is_read() {
        let mut text = String::from(
            "defaults: &defaults {cpu: 100m, memory: 128Mi}
",
        );
        for i in 0..200 {
            text.push_str(&format!(
                "app{i}: *defaults
"
            ));
        }
        let value = from_str(&text, yaml_options()).unwrap();
        assert_eq!(value["app199"], value["defaults"]);
    }

    /// A budget belongs to one text: the next parse on the thread starts afresh.
    #[test]
    fn each_text_has_its_own_budget() {
        let text = "a: 1\n";
        for _ in 0..10_000 {
            from_str(text, yaml_options()).unwrap();
        }
        assert_eq!(LEFT.get(), usize::MAX);
    }
}
