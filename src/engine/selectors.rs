//! Label selectors, on kube's [`Selector`]: a Kubernetes `LabelSelector` (rule-set selectors,
//! a health rule's `match.labelSelector`) and kubectl's selector syntax (the targets of
//! mutations and drift exclusions) both become kube's expressions, checked as the API server
//! checks keys, values and operators, and kube matches them against an object's labels.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
pub use kube::core::{Expression, Selector, SelectorExt};
use serde_json::{Map, Value};

/// Why a selector is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(String);

/// A `LabelSelector` as kube's selector: `matchLabels`, then each of `matchExpressions`.
/// `In`/`NotIn` need values, `Exists`/`DoesNotExist` take none (as the API server says).
pub fn from_label_selector(selector: &LabelSelector) -> Result<Selector, SelectorError> {
    let mut expressions = Vec::new();
    for (key, value) in selector.match_labels.iter().flatten() {
        check_key(key)?;
        check_value(value)?;
        expressions.push(Expression::Equal(key.clone(), value.clone()));
    }
    for e in selector.match_expressions.iter().flatten() {
        check_key(&e.key)?;
        let values: BTreeSet<String> = e.values.iter().flatten().cloned().collect();
        for value in &values {
            check_value(value)?;
        }
        let expression = match e.operator.as_str() {
            "In" if !values.is_empty() => Expression::In(e.key.clone(), values),
            "NotIn" if !values.is_empty() => Expression::NotIn(e.key.clone(), values),
            "Exists" if values.is_empty() => Expression::Exists(e.key.clone()),
            "DoesNotExist" if values.is_empty() => Expression::DoesNotExist(e.key.clone()),
            op => {
                let values: Vec<&String> = values.iter().collect();
                return Err(SelectorError(format!(
                    "matchExpressions: operator {op:?} with values {values:?} is not valid"
                )));
            }
        };
        expressions.push(expression);
    }
    Ok(expressions.into_iter().collect())
}

/// A selector in kubectl's syntax: `a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`,
/// `a notin (x,y)`, joined by commas.
pub fn parse(text: &str) -> Result<Selector, SelectorError> {
    let invalid = |part: &str, why: String| {
        SelectorError(format!(
            "invalid label selector {text:?} at {part:?}: {why}"
        ))
    };
    let mut expressions = Vec::new();
    for part in split_top_level(text) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let expression = requirement(part).map_err(|e| invalid(part, e.0))?;
        expressions.push(expression);
    }
    Ok(expressions.into_iter().collect())
}

/// One requirement of kubectl's syntax, its key and values checked.
fn requirement(part: &str) -> Result<Expression, SelectorError> {
    let set = |rest: &str| -> Result<BTreeSet<String>, SelectorError> {
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| SelectorError("a set is written (a,b)".into()))?;
        let values: BTreeSet<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
        values.iter().try_for_each(|v| check_value(v))?;
        Ok(values)
    };
    let pair = |k: &str, v: &str| -> Result<(String, String), SelectorError> {
        check_key(k.trim())?;
        check_value(v.trim())?;
        Ok((k.trim().to_string(), v.trim().to_string()))
    };
    let key = |k: &str| -> Result<String, SelectorError> {
        check_key(k.trim())?;
        Ok(k.trim().to_string())
    };
    Ok(if let Some((k, v)) = part.split_once("!=") {
        let (k, v) = pair(k, v)?;
        Expression::NotEqual(k, v)
    } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
        let (k, v) = pair(k, v)?;
        Expression::Equal(k, v)
    } else if let Some((k, rest)) = part.split_once(" notin ") {
        Expression::NotIn(key(k)?, set(rest)?)
    } else if let Some((k, rest)) = part.split_once(" in ") {
        Expression::In(key(k)?, set(rest)?)
    } else if let Some(k) = part.strip_prefix('!') {
        Expression::DoesNotExist(key(k)?)
    } else {
        Expression::Exists(key(part)?)
    })
}

/// Whether an object's labels (`metadata.labels`) satisfy `selector`; an empty selector
/// matches everything.
pub fn matches(selector: &Selector, labels: Option<&Map<String, Value>>) -> bool {
    let labels: BTreeMap<String, String> = labels
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    selector.matches(&labels)
}

/// Split on commas that are not inside parentheses.
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at most 63
/// characters (Kubernetes' `IsQualifiedName`).
fn check_key(key: &str) -> Result<(), SelectorError> {
    let bad = |why: &str| {
        Err(SelectorError(format!(
            "label key {key:?} is not valid: {why}"
        )))
    };
    let (prefix, name) = match key.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return bad("the prefix must be a DNS subdomain (lowercase, such as example.com)");
        }
    }
    if name.is_empty() {
        return bad("the name part is empty");
    }
    if !is_label_name(name) {
        return bad(
            "at most 63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or digit",
        );
    }
    Ok(())
}

/// A label value: empty, or like a key's name part (Kubernetes' `IsValidLabelValue`).
fn check_value(value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_label_name(value) {
        return Ok(());
    }
    Err(SelectorError(format!(
        "label value {value:?} is not valid: at most 63 characters: letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
    )))
}

fn is_label_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    let edge = |b: &u8| b.is_ascii_alphanumeric();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    #[test]
    fn kubectl_syntax_matches_as_kubectl_does() {
        let labels = json!({"app": "web", "tier": "front"});
        let l = labels.as_object();
        for (selector, expected) in [
            ("app=web", true),
            ("app==web,tier!=back", true),
            ("app in (web, api)", true),
            ("tier notin (front)", false),
            ("!canary", true),
            ("canary", false),
            ("app", true),
            ("", true),
        ] {
            assert_eq!(
                matches(&parse(selector).unwrap(), l),
                expected,
                "{selector}"
            );
        }
    }

    #[test]
    fn keys_values_and_sets_are_checked_as_the_api_server_checks_them() {
        for bad in [
            "app in web",
            "app=we b",
            "-app=web",
            "Example.com/app=web",
            "a/b/c=d",
            "app=-web",
            "app in (web,x y)",
            "=web",
            "app@x",
        ] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(
                error.starts_with(&format!("invalid label selector {bad:?}")),
                "{bad}: {error}"
            );
        }
        let long = "a".repeat(64);
        assert!(parse(&format!("{long}=x")).is_err());
        assert!(parse(&format!("app={long}")).is_err());
        assert!(parse("example.com/app=web,app.kubernetes.io/name in (a,b),x=").is_ok());
    }

    #[test]
    fn label_selectors_print_for_the_api_and_refuse_bad_operators() {
        let selector = LabelSelector {
            match_labels: Some([("team".to_string(), "a".to_string())].into()),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "In".into(),
                    values: Some(vec!["front".into(), "back".into()]),
                },
                LabelSelectorRequirement {
                    key: "canary".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        let kube_selector = from_label_selector(&selector).unwrap();
        assert_eq!(
            kube_selector.to_string(),
            "team=a,tier in (back,front),!canary"
        );
        let labels = json!({"team": "a", "tier": "back"});
        assert!(matches(&kube_selector, labels.as_object()));
        assert!(!matches(&kube_selector, None));
        for (operator, values) in [
            ("In", None),
            ("Exists", Some(vec!["x".to_string()])),
            ("Near", None),
        ] {
            let bad = LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: operator.into(),
                    values,
                }]),
            };
            let error = from_label_selector(&bad).unwrap_err().to_string();
            assert!(error.contains(&format!("operator {operator:?}")), "{error}");
        }
    }
}
