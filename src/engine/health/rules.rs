//! Health rules: collecting the rule sets a Release selects, compiling their CEL, and
//! judging one object.
//!
//! Spec: health-loop.txt "Assessment" steps 1–2 (collectRules, health.NewEvaluator). A rule
//! matches objects by group, kind and labels; `healthy` is a CEL expression over `object` that
//! must return a bool; `message` (optional) explains the verdict.

use std::panic::AssertUnwindSafe;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::engine::api::{GlobalHealthRuleSet, HealthRule, HealthRuleSet, Release};

/// A rule that cannot be used, named by its set and name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("health rule {set}/{rule}: {message}")]
pub struct RuleError {
    pub set: String,
    pub rule: String,
    pub message: String,
}

/// Why rules could not be collected.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("invalid {which} on Release {release}: {message}")]
    Selector {
        which: &'static str,
        release: String,
        message: String,
    },
    #[error("cannot list {kind}")]
    List {
        kind: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

/// A rule and the set it came from (`GlobalHealthRuleSet/name` or `HealthRuleSet/ns/name`).
#[derive(Debug, Clone, PartialEq)]
pub struct SourcedRule {
    pub set: String,
    pub rule: HealthRule,
}

/// `collectRules`: the GlobalHealthRuleSets matching `globalRuleSetSelector`, then the
/// HealthRuleSets in the Release's namespace matching `localRuleSetSelector`. A missing
/// selector matches nothing.
pub async fn collect_rules(
    client: &Client,
    release: &Release,
) -> Result<Vec<SourcedRule>, CollectError> {
    let Some(assessment) = &release.spec.health_assessment else {
        return Ok(Vec::new());
    };
    let name = format!(
        "{}/{}",
        release.metadata.namespace.as_deref().unwrap_or_default(),
        release.metadata.name.as_deref().unwrap_or_default()
    );
    let selector_of = |which: &'static str, selector: &LabelSelector| {
        selector_string(selector).map_err(|message| CollectError::Selector {
            which,
            release: name.clone(),
            message,
        })
    };
    let mut rules = Vec::new();
    if let Some(selector) = &assessment.global_rule_set_selector {
        let selector = selector_of("globalRuleSetSelector", selector)?;
        let api: Api<GlobalHealthRuleSet> = Api::all(client.clone());
        for set in list_sorted(api, &selector, "GlobalHealthRuleSet").await? {
            let set_name = format!("GlobalHealthRuleSet/{}", set.name_any());
            rules.extend(sourced(&set_name, set.spec.rules));
        }
    }
    if let Some(selector) = &assessment.local_rule_set_selector {
        let selector = selector_of("localRuleSetSelector", selector)?;
        let namespace = release.metadata.namespace.clone().unwrap_or_default();
        let api: Api<HealthRuleSet> = Api::namespaced(client.clone(), &namespace);
        for set in list_sorted(api, &selector, "HealthRuleSet").await? {
            let set_name = format!("HealthRuleSet/{namespace}/{}", set.name_any());
            rules.extend(sourced(&set_name, set.spec.rules));
        }
    }
    Ok(rules)
}

/// The rule sets of one kind matching `selector`, by name.
async fn list_sorted<K>(
    api: Api<K>,
    selector: &str,
    kind: &'static str,
) -> Result<Vec<K>, CollectError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut sets = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|source| CollectError::List {
            kind,
            source: Box::new(source),
        })?
        .items;
    sets.sort_by_key(|s| s.name_any());
    Ok(sets)
}

fn sourced(set: &str, rules: Vec<HealthRule>) -> impl Iterator<Item = SourcedRule> + '_ {
    rules.into_iter().map(move |rule| SourcedRule {
        set: set.to_string(),
        rule,
    })
}

/// A Kubernetes label selector as the string the API takes.
pub fn selector_string(selector: &LabelSelector) -> Result<String, String> {
    let mut parts = Vec::new();
    for (k, v) in selector.match_labels.iter().flatten() {
        parts.push(format!("{k}={v}"));
    }
    for e in selector.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default();
        let part = match e.operator.as_str() {
            "In" if !values.is_empty() => format!("{} in ({})", e.key, values.join(",")),
            "NotIn" if !values.is_empty() => format!("{} notin ({})", e.key, values.join(",")),
            "Exists" if values.is_empty() => e.key.clone(),
            "DoesNotExist" if values.is_empty() => format!("!{}", e.key),
            op => {
                return Err(format!(
                    "matchExpressions: operator {op:?} with values {values:?} is not valid"
                ));
            }
        };
        parts.push(part);
    }
    Ok(parts.join(","))
}

/// Whether `labels` satisfy `selector` (an empty selector matches everything).
pub fn selector_matches(
    selector: &LabelSelector,
    labels: Option<&serde_json::Map<String, Value>>,
) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| get(k) == Some(v.as_str()))
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.clone().unwrap_or_default();
            match e.operator.as_str() {
                "In" => get(&e.key).is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => get(&e.key).is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => get(&e.key).is_some(),
                "DoesNotExist" => get(&e.key).is_none(),
                _ => false,
            }
        })
}

struct CompiledRule {
    set: String,
    name: String,
    group: String,
    kind: String,
    selector: Option<LabelSelector>,
    healthy: cel::Program,
    message: Option<cel::Program>,
}

/// All rules of a Release, compiled.
pub struct Evaluator {
    rules: Vec<CompiledRule>,
}

/// The verdict of the rules on one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluation {
    /// No rule matches: healthy once it exists.
    NoRule,
    Pass {
        message: Option<String>,
    },
    Fail {
        message: String,
    },
    /// A rule could not be evaluated on this object (a missing field): Unknown for it.
    Error {
        message: String,
    },
}

impl Evaluator {
    /// `health.NewEvaluator`: compile every rule. The first bad rule fails the whole set.
    pub fn new(rules: Vec<SourcedRule>) -> Result<Self, RuleError> {
        let mut compiled = Vec::new();
        for SourcedRule { set, rule } in rules {
            let fail = |message: String| RuleError {
                set: set.clone(),
                rule: rule.name.clone(),
                message,
            };
            if rule.matches.kind.is_empty() {
                return Err(fail(
                    "match.kind is required (use \"*\" for any kind)".into(),
                ));
            }
            let selector = match &rule.matches.label_selector {
                Some(s) => {
                    selector_string(s).map_err(|m| fail(format!("match.labelSelector: {m}")))?;
                    Some(s.clone())
                }
                None => None,
            };
            let healthy = compile(&rule.healthy).map_err(|m| fail(format!("healthy: {m}")))?;
            let message = match &rule.message {
                Some(m) => Some(compile(m).map_err(|e| fail(format!("message: {e}")))?),
                None => None,
            };
            compiled.push(CompiledRule {
                set,
                name: rule.name,
                group: rule.matches.group,
                kind: rule.matches.kind,
                selector,
                healthy,
                message,
            });
        }
        Ok(Self { rules: compiled })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Judge `object` with every rule that matches it: all must pass. A rule that does not
    /// return a bool is a broken rule (`Err`), not an answer about the object.
    pub fn evaluate(&self, object: &Value) -> Result<Evaluation, RuleError> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or_default();
        let labels = object["metadata"]["labels"].as_object();
        let mut matched = false;
        let mut passes = Vec::new();
        let mut failures = Vec::new();
        let mut errors = Vec::new();
        for rule in &self.rules {
            let group_ok = rule.group == "*" || rule.group == group;
            let kind_ok = rule.kind == "*" || rule.kind == kind;
            let labels_ok = rule
                .selector
                .as_ref()
                .is_none_or(|s| selector_matches(s, labels));
            if !(group_ok && kind_ok && labels_ok) {
                continue;
            }
            matched = true;
            let message = rule
                .message
                .as_ref()
                .and_then(|m| match run(m, object) {
                    Ok(cel::Value::String(s)) => Some(s.to_string()),
                    _ => None,
                })
                .map(|m| format!("rule {}: {m}", rule.name));
            match run(&rule.healthy, object) {
                Ok(cel::Value::Bool(true)) => passes.extend(message),
                Ok(cel::Value::Bool(false)) => failures.push(
                    message.unwrap_or_else(|| format!("rule {} is not satisfied", rule.name)),
                ),
                Ok(other) => {
                    return Err(RuleError {
                        set: rule.set.clone(),
                        rule: rule.name.clone(),
                        message: format!("healthy must return a bool, not {:?}", other.type_of()),
                    });
                }
                Err(e) => errors.push(format!("rule {}: {e}", rule.name)),
            }
        }
        // Sorted, so a message only changes when a verdict does.
        failures.sort();
        errors.sort();
        passes.sort();
        Ok(if !matched {
            Evaluation::NoRule
        } else if !errors.is_empty() {
            Evaluation::Error {
                message: errors.join("; "),
            }
        } else if !failures.is_empty() {
            Evaluation::Fail {
                message: failures.join("; "),
            }
        } else {
            Evaluation::Pass {
                message: (!passes.is_empty()).then(|| passes.join("; ")),
            }
        })
    }
}

fn compile(source: &str) -> Result<cel::Program, String> {
    std::panic::catch_unwind(|| cel::Program::compile(source))
        .map_err(|_| "the CEL parser failed on this expression".to_string())?
        .map_err(|e| {
            e.to_string()
                .lines()
                .next()
                .unwrap_or_default()
                .trim()
                .to_string()
        })
}

/// Evaluate `program` with `object` bound, never letting a panic in the interpreter out.
fn run(program: &cel::Program, object: &Value) -> Result<cel::Value, String> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut ctx = cel::Context::default();
        ctx.add_variable("object", object.clone())
            .map_err(|e| e.to_string())?;
        program.execute(&ctx).map_err(|e| e.to_string())
    }))
    .unwrap_or_else(|_| Err("the CEL interpreter failed on this object".to_string()))
}
