//! Health rules: collecting the rule sets a Release selects, compiling their CEL, and
//! judging one object.
//!
//! Spec: health-loop.txt "Assessment" steps 1–2 (collectRules, health.NewEvaluator). A rule
//! matches objects by group, kind and labels; `healthy` is a CEL expression over `object` that
//! must return a bool; `message` (optional) explains the verdict.
//!
//! A tenant writes HealthRuleSets, so a rule is untrusted code run by the daemon. The `cel`
//! crate has no execution budget of its own, so convoy bounds each evaluation before it runs:
//! [`estimated_cost`] counts the expression's nodes, multiplying the body of every
//! comprehension (`all`, `exists`, `map`, `filter`…) by the size of the largest list or map
//! in the object (the most it can iterate), and a rule whose estimate for an object exceeds
//! [`COST_BUDGET`] is not run: that object is Unknown, naming the rule. Evaluations run off
//! the async threads ([`Evaluator::evaluate_off_runtime`]), one CEL thread at a time, so a
//! slow rule delays only health assessments, never the probes or the controller.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::engine::api::{GlobalHealthRuleSet, HealthRule, HealthRuleSet, Release};
use crate::engine::locks;
use crate::engine::runtime::{Listers, cached_list};
use crate::engine::selectors::{self, Selector, SelectorExt};

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
    #[error("invalid {which} on Release {release}")]
    Selector {
        which: &'static str,
        release: String,
        #[source]
        source: selectors::SelectorError,
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
    listers: Option<&dyn Listers>,
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
        selectors::from_label_selector(selector).map_err(|source| CollectError::Selector {
            which,
            release: name.clone(),
            source,
        })
    };
    let mut rules = Vec::new();
    if let Some(selector) = &assessment.global_rule_set_selector {
        let selector = selector_of("globalRuleSetSelector", selector)?;
        let api: Api<GlobalHealthRuleSet> = Api::all(client.clone());
        for set in list_sorted(api, listers, None, &selector, "GlobalHealthRuleSet").await? {
            let set_name = format!("GlobalHealthRuleSet/{}", set.name_any());
            rules.extend(sourced(&set_name, &set.spec.rules));
        }
    }
    if let Some(selector) = &assessment.local_rule_set_selector {
        let selector = selector_of("localRuleSetSelector", selector)?;
        let namespace = release.metadata.namespace.clone().unwrap_or_default();
        let api: Api<HealthRuleSet> = Api::namespaced(client.clone(), &namespace);
        let sets = list_sorted(api, listers, Some(&namespace), &selector, "HealthRuleSet").await?;
        for set in sets {
            let set_name = format!("HealthRuleSet/{namespace}/{}", set.name_any());
            rules.extend(sourced(&set_name, &set.spec.rules));
        }
    }
    Ok(rules)
}

/// The rule sets of one kind (in `namespace`) matching `selector`, by name: from the
/// process's cache when it holds the kind (health-loop.txt's listers), else listed.
async fn list_sorted<K>(
    api: Api<K>,
    listers: Option<&dyn Listers>,
    namespace: Option<&str>,
    selector: &Selector,
    kind: &'static str,
) -> Result<Vec<Arc<K>>, CollectError>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut sets: Vec<Arc<K>> = match cached_list::<K>(listers, namespace) {
        Some(all) => all
            .into_iter()
            .filter(|set| selector.matches(set.labels()))
            .collect(),
        None => api
            .list(&ListParams::default().labels(&selector.to_string()))
            .await
            .map_err(|source| CollectError::List {
                kind,
                source: Box::new(source),
            })?
            .items
            .into_iter()
            .map(Arc::new)
            .collect(),
    };
    sets.sort_by_key(|s| s.name_any());
    Ok(sets)
}

fn sourced<'a>(set: &'a str, rules: &'a [HealthRule]) -> impl Iterator<Item = SourcedRule> + 'a {
    rules.iter().map(move |rule| SourcedRule {
        set: set.to_string(),
        rule: rule.clone(),
    })
}

/// Rules compiled so far, by their set and text (`compiled_key`).
static COMPILED: std::sync::LazyLock<Mutex<HashMap<[u8; 32], Arc<CompiledRule>>>> =
    std::sync::LazyLock::new(Default::default);

/// How many compiled rules [`COMPILED`] keeps at most.
const COMPILED_MAX: usize = 4096;

/// A rule's identity in [`COMPILED`]: the SHA-256 of its set's name and its whole text
/// (`None` if it cannot be serialized, which only means it is not cached).
fn compiled_key(sourced: &SourcedRule) -> Option<[u8; 32]> {
    use sha2::Digest;
    let text = serde_json::to_vec(&sourced.rule).ok()?;
    let mut hasher = sha2::Sha256::new();
    hasher.update(sourced.set.as_bytes());
    hasher.update([0]);
    hasher.update(&text);
    Some(hasher.finalize().into())
}

/// One rule, checked and compiled.
fn compile_rule(SourcedRule { set, rule }: SourcedRule) -> Result<CompiledRule, RuleError> {
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
        Some(s) => Some(
            selectors::from_label_selector(s)
                .map_err(|m| fail(format!("match.labelSelector: {m}")))?,
        ),
        None => None,
    };
    let healthy = compile(&rule.healthy).map_err(|m| fail(format!("healthy: {m}")))?;
    let message = match &rule.message {
        Some(m) => Some(compile(m).map_err(|e| fail(format!("message: {e}")))?),
        None => None,
    };
    Ok(CompiledRule {
        set,
        name: rule.name,
        group: rule.matches.group,
        kind: rule.matches.kind,
        selector,
        healthy,
        message,
    })
}

struct CompiledRule {
    set: String,
    name: String,
    group: String,
    kind: String,
    selector: Option<Selector>,
    healthy: cel::Program,
    message: Option<cel::Program>,
}

/// All rules of a Release, compiled.
pub struct Evaluator {
    rules: Vec<Arc<CompiledRule>>,
    /// Judge objects no rule matches with the built-in rules.
    builtin: bool,
}

/// The set name the built-in rules are reported under.
pub const BUILTIN_SET: &str = "built-in";

/// The built-in rules (the default rule set `convoy install` ships), compiled once.
fn builtin_evaluator() -> &'static Evaluator {
    static BUILTIN: std::sync::OnceLock<Evaluator> = std::sync::OnceLock::new();
    BUILTIN.get_or_init(|| {
        let rules = crate::engine::health::defaults::default_rule_set()
            .spec
            .rules
            .into_iter()
            .map(|rule| SourcedRule {
                set: BUILTIN_SET.to_string(),
                rule,
            })
            .collect();
        Evaluator::new(rules).unwrap_or(Evaluator {
            rules: Vec::new(),
            builtin: false,
        })
    })
}

/// The most estimated work one rule may do on one object (Kubernetes allows a CEL validation
/// rule a per-call cost of 1,000,000 as well).
pub const COST_BUDGET: u64 = 1_000_000;

/// Longest source text of one rule expression.
pub const MAX_EXPRESSION_CHARS: usize = 4096;

/// One rule evaluation at a time for the whole process: CEL is CPU work, and a tenant's rule
/// must not take every core.
static CEL_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

/// An estimate of the work evaluating `expr` does when no list or map it iterates has more
/// than `largest` items: one per node, with comprehension bodies counted once per item.
pub fn estimated_cost(expr: &cel::IdedExpr, largest: u64) -> u64 {
    use cel::common::ast::{EntryExpr, Expr};
    let cost = |e: &cel::IdedExpr| estimated_cost(e, largest);
    let sum = |items: &mut dyn Iterator<Item = u64>| items.fold(0u64, u64::saturating_add);
    match &expr.expr {
        Expr::Unspecified | Expr::Ident(_) | Expr::Literal(_) => 1,
        Expr::Select(s) => cost(&s.operand).saturating_add(1),
        Expr::Call(c) => sum(&mut c
            .target
            .iter()
            .map(|t| cost(t))
            .chain(c.args.iter().map(cost)))
        .saturating_add(1),
        Expr::List(l) => sum(&mut l.elements.iter().map(cost)).saturating_add(1),
        Expr::Map(m) => sum(&mut m.entries.iter().map(|e| match &e.expr {
            EntryExpr::MapEntry(me) => cost(&me.key).saturating_add(cost(&me.value)),
            EntryExpr::StructField(f) => cost(&f.value),
        }))
        .saturating_add(1),
        Expr::Struct(st) => sum(&mut st.entries.iter().map(|e| match &e.expr {
            EntryExpr::MapEntry(me) => cost(&me.key).saturating_add(cost(&me.value)),
            EntryExpr::StructField(f) => cost(&f.value),
        }))
        .saturating_add(1),
        Expr::Comprehension(c) => {
            let items = match &c.iter_range.expr {
                Expr::List(l) => l.elements.len() as u64,
                _ => largest,
            };
            let body = cost(&c.loop_cond)
                .saturating_add(cost(&c.loop_step))
                .saturating_add(1);
            cost(&c.iter_range)
                .saturating_add(cost(&c.accu_init))
                .saturating_add(items.saturating_mul(body))
                .saturating_add(cost(&c.result))
        }
    }
}

/// The number of items of the largest list or map anywhere in `value` (at least 1).
pub fn largest_collection(value: &Value) -> u64 {
    match value {
        Value::Array(items) => {
            (items.len() as u64).max(items.iter().map(largest_collection).max().unwrap_or(1))
        }
        Value::Object(map) => {
            (map.len() as u64).max(map.values().map(largest_collection).max().unwrap_or(1))
        }
        _ => 1,
    }
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
    /// A rule compiled before (the same set and the same text) is taken from [`COMPILED`]:
    /// every health pass of every Release collects its rules again, and compiling CEL is most
    /// of what a pass costs in CPU.
    pub fn new(rules: Vec<SourcedRule>) -> Result<Self, RuleError> {
        let mut compiled = Vec::with_capacity(rules.len());
        for sourced in rules {
            let key = compiled_key(&sourced);
            if let Some(rule) = key
                .as_ref()
                .and_then(|k| locks::lock(&COMPILED).get(k).cloned())
            {
                compiled.push(rule);
                continue;
            }
            let rule = Arc::new(compile_rule(sourced)?);
            if let Some(key) = key {
                let mut cache = locks::lock(&COMPILED);
                // Bounded: rule sets edited again and again must not grow it for ever.
                if cache.len() >= COMPILED_MAX {
                    cache.clear();
                }
                cache.insert(key, rule.clone());
            }
            compiled.push(rule);
        }
        Ok(Self {
            rules: compiled,
            builtin: false,
        })
    }

    /// The same rules, with the built-in rules judging what none of them matches.
    pub fn with_builtin(mut self, builtin: bool) -> Self {
        self.builtin = builtin;
        self
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// [`Evaluator::evaluate`] on the blocking pool, one evaluation at a time for the process,
    /// so neither the async threads (probes, the controller's passes) nor other Releases'
    /// reconciles wait on a tenant's rules beyond their turn.
    pub async fn evaluate_off_runtime(
        self: &std::sync::Arc<Self>,
        object: Value,
    ) -> Result<(Evaluation, Vec<String>), RuleError> {
        let _slot = CEL_SLOTS.acquire().await;
        let evaluator = self.clone();
        tokio::task::spawn_blocking(move || evaluator.judge(&object))
            .await
            .unwrap_or_else(|_| {
                Ok((
                    Evaluation::Error {
                        message: "the CEL evaluation stopped unexpectedly".into(),
                    },
                    Vec::new(),
                ))
            })
    }

    /// Judge `object` with every rule that matches it: all must pass. A rule that does not
    /// return a bool is a broken rule (`Err`), not an answer about the object.
    pub fn evaluate(&self, object: &Value) -> Result<Evaluation, RuleError> {
        self.judge(object).map(|(evaluation, _)| evaluation)
    }

    /// `evaluate`, and the rules that judged (`set/rule`, `built-in/rule`), sorted.
    pub fn judge(&self, object: &Value) -> Result<(Evaluation, Vec<String>), RuleError> {
        let (evaluation, judges) = self.judge_own(object)?;
        if evaluation == Evaluation::NoRule && self.builtin {
            return builtin_evaluator().judge_own(object);
        }
        Ok((evaluation, judges))
    }

    fn judge_own(&self, object: &Value) -> Result<(Evaluation, Vec<String>), RuleError> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let group = api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or_default();
        let labels = object["metadata"]["labels"].as_object();
        let largest = largest_collection(object);
        let mut matched = false;
        let mut judges = Vec::new();
        let mut passes = Vec::new();
        let mut failures = Vec::new();
        let mut errors = Vec::new();
        for rule in &self.rules {
            let group_ok = rule.group == "*" || rule.group == group;
            let kind_ok = rule.kind == "*" || rule.kind == kind;
            let labels_ok = rule
                .selector
                .as_ref()
                .is_none_or(|s| selectors::matches(s, labels));
            if !(group_ok && kind_ok && labels_ok) {
                continue;
            }
            matched = true;
            judges.push(format!("{}/{}", rule.set, rule.name));
            let cost = [Some(&rule.healthy), rule.message.as_ref()]
                .into_iter()
                .flatten()
                .map(|p| estimated_cost(p.expression(), largest))
                .fold(0u64, u64::saturating_add);
            if cost > COST_BUDGET {
                errors.push(format!(
                    "rule {} of {} is over its cost budget on this object (estimated {cost} > {COST_BUDGET}), so it was not evaluated",
                    rule.name, rule.set
                ));
                continue;
            }
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
        judges.sort();
        let evaluation = if !matched {
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
        };
        Ok((evaluation, judges))
    }
}

/// Why a CEL expression could not be compiled or evaluated. cel's own errors are kept as
/// their text: the parser's reaches a condition message (first line only, the rest is an
/// ASCII-art caret), and neither is `Clone`, which compiled rules and verdicts need.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    #[error("the expression is {0} characters long; at most {MAX_EXPRESSION_CHARS} are allowed")]
    TooLong(usize),
    #[error("{0}")]
    Syntax(String),
    #[error("the CEL parser failed on this expression")]
    ParserPanicked,
    #[error("{0}")]
    Evaluation(String),
    #[error("the CEL interpreter failed on this object")]
    InterpreterPanicked,
}

fn compile(source: &str) -> Result<cel::Program, CelError> {
    if source.len() > MAX_EXPRESSION_CHARS {
        return Err(CelError::TooLong(source.len()));
    }
    std::panic::catch_unwind(|| cel::Program::compile(source))
        .map_err(|_| CelError::ParserPanicked)?
        .map_err(|e| {
            let text = e.to_string();
            CelError::Syntax(text.lines().next().unwrap_or_default().trim().to_string())
        })
}

/// Evaluate `program` with `object` bound, never letting a panic in the interpreter out.
fn run(program: &cel::Program, object: &Value) -> Result<cel::Value, CelError> {
    std::panic::catch_unwind(AssertUnwindSafe(|| {
        let mut ctx = cel::Context::default();
        ctx.add_variable("object", object.clone())
            .map_err(|e| CelError::Evaluation(e.to_string()))?;
        program
            .execute(&ctx)
            .map_err(|e| CelError::Evaluation(e.to_string()))
    }))
    .unwrap_or(Err(CelError::InterpreterPanicked))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::api::RuleMatch;
    use serde_json::json;

    #[test]
    fn a_rule_compiled_once_is_reused_and_an_edited_one_is_compiled_again() {
        let expr = "has(object.data) && object.data.size() > 123456";
        let first = Evaluator::new(vec![rule("reused", expr)]).unwrap();
        let again = Evaluator::new(vec![rule("reused", expr)]).unwrap();
        assert!(Arc::ptr_eq(&first.rules[0], &again.rules[0]));
        let edited = Evaluator::new(vec![rule("reused", &format!("{expr} + 0 >= 0"))]);
        assert!(!Arc::ptr_eq(&first.rules[0], &edited.unwrap().rules[0]));
        // The same rule in another set is that set's own (its name is in every judgement).
        let mut elsewhere = rule("reused", expr);
        elsewhere.set = "HealthRuleSet/team-b/rules".into();
        let other = Evaluator::new(vec![elsewhere]).unwrap();
        assert!(!Arc::ptr_eq(&first.rules[0], &other.rules[0]));
        assert_eq!(other.rules[0].set, "HealthRuleSet/team-b/rules");
    }

    fn rule(name: &str, healthy: &str) -> SourcedRule {
        SourcedRule {
            set: "HealthRuleSet/team-a/rules".into(),
            rule: HealthRule {
                name: name.into(),
                matches: RuleMatch {
                    group: String::new(),
                    kind: "ConfigMap".into(),
                    label_selector: None,
                },
                healthy: healthy.into(),
                message: None,
            },
        }
    }

    fn config_map(items: usize) -> Value {
        let data: serde_json::Map<String, Value> = (0..items)
            .map(|i| (format!("k{i}"), Value::String("v".into())))
            .collect();
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": data})
    }

    #[test]
    fn a_nested_comprehension_over_a_large_object_is_over_budget_and_never_run() {
        let evaluator = Evaluator::new(vec![rule(
            "starve",
            "object.data.all(a, object.data.all(b, object.data.all(c, a != b || b != c)))",
        )])
        .unwrap();
        let started = std::time::Instant::now();
        let verdict = evaluator.evaluate(&config_map(2000)).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        match verdict {
            Evaluation::Error { message } => assert!(
                message.contains(
                    "rule starve of HealthRuleSet/team-a/rules is over its cost budget on this object"
                ),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_same_rule_on_a_small_object_runs() {
        let evaluator = Evaluator::new(vec![rule(
            "small",
            "object.data.all(a, object.data.all(b, true))",
        )])
        .unwrap();
        assert_eq!(
            evaluator.evaluate(&config_map(10)).unwrap(),
            Evaluation::Pass { message: None }
        );
    }

    #[test]
    fn the_estimate_multiplies_nested_comprehensions_by_the_largest_collection() {
        let flat = cel::Program::compile("object.a.exists(x, x == 1)").unwrap();
        let nested =
            cel::Program::compile("object.a.exists(x, object.a.exists(y, x == y))").unwrap();
        let small = estimated_cost(flat.expression(), 10);
        assert!(small > 10 && small < 100, "{small}");
        assert!(estimated_cost(nested.expression(), 1000) > 1_000_000);
        assert_eq!(
            largest_collection(&json!({"a": [1, 2, 3], "b": {"c": [1, 2, 3, 4, 5]}})),
            5
        );
    }

    #[test]
    fn objects_no_selected_rule_matches_are_judged_by_the_built_in_rules() {
        let stuck = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "api", "generation": 1},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 0}});
        let selected = Evaluator::new(vec![rule("cm", "true")]).unwrap();
        assert_eq!(
            selected.judge(&stuck).unwrap(),
            (Evaluation::NoRule, Vec::new())
        );
        let (verdict, judges) = Evaluator::new(vec![rule("cm", "true")])
            .unwrap()
            .with_builtin(true)
            .judge(&stuck)
            .unwrap();
        assert!(matches!(verdict, Evaluation::Fail { .. }), "{verdict:?}");
        assert_eq!(
            judges,
            ["built-in/deployment-available", "built-in/ready-condition"]
        );
        // A selected rule that matches wins over the built-in ones.
        let (verdict, judges) = Evaluator::new(vec![rule("cm", "true")])
            .unwrap()
            .with_builtin(true)
            .judge(&config_map(1))
            .unwrap();
        assert_eq!(verdict, Evaluation::Pass { message: None });
        assert_eq!(judges, ["HealthRuleSet/team-a/rules/cm"]);
    }

    #[test]
    fn an_overlong_expression_does_not_compile() {
        let long = format!("{} == 1", "1 + ".repeat(2000));
        let err = Evaluator::new(vec![rule("long", &long)]).err().unwrap();
        assert!(
            err.to_string().contains("at most 4096 are allowed"),
            "{err}"
        );
    }
}
