//! The health rules `convoy install` ships: a GlobalHealthRuleSet labelled
//! `health.convoy.kumodo.io/defaults: "true"`, so `globalRuleSetSelector` can pick it.
//!
//! Workload rules require `status.observedGeneration >= metadata.generation`: a workload is
//! never Healthy before its controller has seen the latest spec. An object that no rule
//! matches is Healthy once it exists.

use crate::engine::api::{
    GlobalHealthRuleSet, GlobalHealthRuleSetSpec, HealthRule, RuleMatch, labels,
};

/// The name of the shipped rule set.
pub const DEFAULT_RULE_SET: &str = "convoy-defaults";

/// `has(object.status) && …` guard for a generation-tracking workload.
const OBSERVED: &str = "has(object.status) && has(object.status.observedGeneration) && object.status.observedGeneration >= object.metadata.generation";

fn int(path: &str, default: &str) -> String {
    // `has()` needs the parent to exist; status and spec are checked by the callers.
    let (parent, field) = path.rsplit_once('.').unwrap_or(("object", path));
    format!("(has({parent}.{field}) ? {parent}.{field} : {default})")
}

/// The default rules as a GlobalHealthRuleSet.
pub fn default_rule_set() -> GlobalHealthRuleSet {
    let replicas = int("object.spec.replicas", "1");
    let updated = int("object.status.updatedReplicas", "0");
    let available = int("object.status.availableReplicas", "0");
    let ready = int("object.status.readyReplicas", "0");
    let current = int("object.status.replicas", "0");
    let deployment = format!(
        "{OBSERVED} && {updated} >= {replicas} && {current} == {updated} && {available} >= {replicas} \
&& !(has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Progressing' && c.reason == 'ProgressDeadlineExceeded'))"
    );
    let deployment_message = format!(
        "{OBSERVED} ? ('updatedReplicas ' + string({updated}) + ' of ' + string({replicas}) + ', available ' + string({available})) : 'waiting for the controller to observe generation ' + string(object.metadata.generation)"
    );
    let statefulset = format!(
        "{OBSERVED} && {ready} >= {replicas} && {} >= {replicas} \
&& (!has(object.status.currentRevision) || !has(object.status.updateRevision) || object.status.currentRevision == object.status.updateRevision)",
        int("object.status.updatedReplicas", "0")
    );
    let statefulset_message =
        format!("'readyReplicas ' + string({ready}) + ' of ' + string({replicas})");
    let ds_desired = int("object.status.desiredNumberScheduled", "0");
    let daemonset = format!(
        "{OBSERVED} && {} >= {ds_desired} && {} >= {ds_desired}",
        int("object.status.updatedNumberScheduled", "0"),
        int("object.status.numberAvailable", "0")
    );
    let daemonset_message = format!(
        "'numberAvailable ' + string({}) + ' of ' + string({ds_desired})",
        int("object.status.numberAvailable", "0")
    );
    let replicaset = format!("{OBSERVED} && {ready} >= {replicas}");
    let job = "has(object.status) && has(object.status.conditions) && object.status.conditions.exists(c, (c.type == 'Complete' || c.type == 'SuccessCriteriaMet') && c.status == 'True')";
    let job_message = "has(object.status) && has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Failed' && c.status == 'True') ? 'the Job failed' : 'the Job has not completed'";
    let pod = "has(object.status) && has(object.status.phase) && (object.status.phase == 'Succeeded' || (object.status.phase == 'Running' && has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')))";
    let pod_message = "'phase ' + (has(object.status) && has(object.status.phase) ? object.status.phase : 'unknown')";
    let pvc = "has(object.status) && has(object.status.phase) && object.status.phase == 'Bound'";
    let pvc_message = "'phase ' + (has(object.status) && has(object.status.phase) ? object.status.phase : 'Pending')";
    let lb_service = "!has(object.spec.type) || object.spec.type != 'LoadBalancer' || (has(object.status) && has(object.status.loadBalancer) && has(object.status.loadBalancer.ingress) && size(object.status.loadBalancer.ingress) > 0)";
    let crd = "has(object.status) && has(object.status.conditions) && object.status.conditions.exists(c, c.type == 'Established' && c.status == 'True')";
    let ready_condition = "!has(object.status) || !has(object.status.conditions) || !object.status.conditions.exists(c, c.type == 'Ready') || object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')";
    let rule =
        |name: &str, group: &str, kind: &str, healthy: &str, message: Option<&str>| HealthRule {
            name: name.to_string(),
            matches: RuleMatch {
                group: group.to_string(),
                kind: kind.to_string(),
                label_selector: None,
            },
            healthy: healthy.to_string(),
            message: message.map(str::to_string),
        };
    let mut set = GlobalHealthRuleSet::new(
        DEFAULT_RULE_SET,
        GlobalHealthRuleSetSpec {
            rules: vec![
                rule(
                    "deployment-available",
                    "apps",
                    "Deployment",
                    &deployment,
                    Some(&deployment_message),
                ),
                rule(
                    "statefulset-ready",
                    "apps",
                    "StatefulSet",
                    &statefulset,
                    Some(&statefulset_message),
                ),
                rule(
                    "daemonset-available",
                    "apps",
                    "DaemonSet",
                    &daemonset,
                    Some(&daemonset_message),
                ),
                rule("replicaset-ready", "apps", "ReplicaSet", &replicaset, None),
                rule("job-complete", "batch", "Job", job, Some(job_message)),
                rule("pod-ready", "", "Pod", pod, Some(pod_message)),
                rule(
                    "pvc-bound",
                    "",
                    "PersistentVolumeClaim",
                    pvc,
                    Some(pvc_message),
                ),
                rule("loadbalancer-ingress", "", "Service", lb_service, None),
                rule(
                    "crd-established",
                    "apiextensions.k8s.io",
                    "CustomResourceDefinition",
                    crd,
                    None,
                ),
                rule("ready-condition", "*", "*", ready_condition, None),
            ],
        },
    );
    set.metadata.labels = Some([(labels::DEFAULT_RULES.to_string(), "true".to_string())].into());
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::health::rules::{Evaluation, Evaluator, SourcedRule};

    fn evaluator() -> Evaluator {
        let set = default_rule_set();
        assert_eq!(set.spec.rules.len(), 10, "the defaults parse");
        let rules = set
            .spec
            .rules
            .into_iter()
            .map(|rule| SourcedRule {
                set: "GlobalHealthRuleSet/convoy-defaults".into(),
                rule,
            })
            .collect();
        Evaluator::new(rules).expect("the defaults compile")
    }

    fn judge(yaml: &str) -> Evaluation {
        let object: serde_json::Value = serde_saphyr::from_str(yaml).unwrap();
        evaluator().evaluate(&object).unwrap()
    }

    fn healthy(yaml: &str) -> bool {
        matches!(judge(yaml), Evaluation::Pass { .. } | Evaluation::NoRule)
    }

    const DEPLOY: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, generation: 2}\nspec: {replicas: 3}\n";

    #[test]
    fn deployment_healthy_progressing_and_stale_generation() {
        let ok = format!(
            "{DEPLOY}status: {{observedGeneration: 2, replicas: 3, updatedReplicas: 3, availableReplicas: 3}}\n"
        );
        assert!(healthy(&ok));
        let rolling = format!(
            "{DEPLOY}status: {{observedGeneration: 2, replicas: 4, updatedReplicas: 1, availableReplicas: 3}}\n"
        );
        assert_eq!(
            judge(&rolling),
            Evaluation::Fail {
                message: "rule deployment-available: updatedReplicas 1 of 3, available 3".into()
            }
        );
        let stale = format!(
            "{DEPLOY}status: {{observedGeneration: 1, replicas: 3, updatedReplicas: 3, availableReplicas: 3}}\n"
        );
        assert_eq!(
            judge(&stale),
            Evaluation::Fail {
                message:
                    "rule deployment-available: waiting for the controller to observe generation 2"
                        .into()
            }
        );
        let stuck = format!(
            "{DEPLOY}status: {{observedGeneration: 2, replicas: 3, updatedReplicas: 3, availableReplicas: 3, conditions: [{{type: Progressing, status: 'False', reason: ProgressDeadlineExceeded}}]}}\n"
        );
        assert!(!healthy(&stuck));
        let no_status = DEPLOY.to_string();
        assert!(!healthy(&no_status));
    }

    #[test]
    fn statefulset_rules() {
        let base = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db, generation: 1}\nspec: {replicas: 2}\n";
        assert!(healthy(&format!(
            "{base}status: {{observedGeneration: 1, readyReplicas: 2, updatedReplicas: 2, currentRevision: a, updateRevision: a}}\n"
        )));
        assert!(!healthy(&format!(
            "{base}status: {{observedGeneration: 1, readyReplicas: 1, updatedReplicas: 2}}\n"
        )));
        assert!(!healthy(&format!(
            "{base}status: {{observedGeneration: 0, readyReplicas: 2, updatedReplicas: 2}}\n"
        )));
    }

    #[test]
    fn daemonset_rules() {
        let base = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent, generation: 3}\n";
        assert!(healthy(&format!(
            "{base}status: {{observedGeneration: 3, desiredNumberScheduled: 2, updatedNumberScheduled: 2, numberAvailable: 2}}\n"
        )));
        assert!(!healthy(&format!(
            "{base}status: {{observedGeneration: 3, desiredNumberScheduled: 2, updatedNumberScheduled: 1, numberAvailable: 2}}\n"
        )));
        assert!(!healthy(&format!(
            "{base}status: {{observedGeneration: 2, desiredNumberScheduled: 2, updatedNumberScheduled: 2, numberAvailable: 2}}\n"
        )));
    }

    #[test]
    fn replicaset_rules() {
        let base = "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata: {name: rs, generation: 1}\nspec: {replicas: 2}\n";
        assert!(healthy(&format!(
            "{base}status: {{observedGeneration: 1, readyReplicas: 2}}\n"
        )));
        assert!(!healthy(&format!(
            "{base}status: {{observedGeneration: 1, readyReplicas: 1}}\n"
        )));
        assert!(!healthy(&format!(
            "{base}status: {{observedGeneration: 0, readyReplicas: 2}}\n"
        )));
    }

    #[test]
    fn job_rules() {
        let base = "apiVersion: batch/v1\nkind: Job\nmetadata: {name: migrate}\n";
        assert!(healthy(&format!(
            "{base}status: {{conditions: [{{type: Complete, status: 'True'}}]}}\n"
        )));
        assert_eq!(
            judge(&format!(
                "{base}status: {{conditions: [{{type: Failed, status: 'True'}}]}}\n"
            )),
            Evaluation::Fail {
                message: "rule job-complete: the Job failed".into()
            }
        );
        assert!(!healthy(&format!("{base}status: {{active: 1}}\n")));
    }

    #[test]
    fn pod_pvc_service_and_crd_rules() {
        assert!(healthy(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {phase: Running, conditions: [{type: Ready, status: 'True'}]}\n"
        ));
        assert!(!healthy(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nstatus: {phase: Pending}\n"
        ));
        assert!(healthy(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nstatus: {phase: Bound}\n"
        ));
        assert!(!healthy(
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: c}\nstatus: {phase: Pending}\n"
        ));
        assert!(healthy(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: ClusterIP}\n"
        ));
        assert!(!healthy(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {}}\n"
        ));
        assert!(healthy(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: LoadBalancer}\nstatus: {loadBalancer: {ingress: [{ip: 1.2.3.4}]}}\n"
        ));
        let crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {name: w.example.com}\n";
        assert!(healthy(&format!(
            "{crd}status: {{conditions: [{{type: Established, status: 'True'}}]}}\n"
        )));
        assert!(!healthy(&format!(
            "{crd}status: {{conditions: [{{type: Established, status: 'False'}}]}}\n"
        )));
    }

    #[test]
    fn any_object_with_a_ready_condition_and_objects_without_rules() {
        assert!(!healthy(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nstatus: {conditions: [{type: Ready, status: 'False'}]}\n"
        ));
        assert!(healthy(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nstatus: {conditions: [{type: Ready, status: 'True'}]}\n"
        ));
        assert!(healthy(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"
        ));
    }
}
