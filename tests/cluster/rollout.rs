//! Progressive delivery against the real control plane: pins, the rollout state machine with
//! rollback to the last healthy render, wave health gates and cluster waves.

use std::time::Duration;

use convoy::engine::api::{
    FailureStage, Reason, Release, ReleaseInventory, RolloutState, condition_types,
};
use convoy::engine::health::{HealthMemory, health_pass};
use convoy::engine::reconcile::HandlerResult;
use convoy::engine::store::{ReleaseId, RenderStore};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

use crate::support::eventually;
use crate::support::fixture::{Fixture, config_map, deployment};

fn render_of(result: &HandlerResult) -> String {
    result
        .outcome
        .as_ref()
        .unwrap()
        .attempt
        .render_ref
        .clone()
        .unwrap()
}

fn applied(release: &Release) -> (String, String) {
    let c = release
        .status
        .as_ref()
        .unwrap()
        .condition(condition_types::APPLIED)
        .unwrap();
    (c.status.to_string(), c.reason.clone())
}

fn condition(release: &Release, type_: &str) -> Option<(String, String)> {
    release
        .status
        .as_ref()?
        .condition(type_)
        .map(|c| (c.status.to_string(), c.reason.clone()))
}

fn successful_render(release: &Release) -> Option<String> {
    release
        .status
        .as_ref()?
        .last_successful
        .as_ref()?
        .render_ref
        .clone()
}

async fn value_of(f: &Fixture, name: &str) -> Option<String> {
    f.config_map(name)
        .await
        .map(|c| c["data"]["value"].as_str().unwrap().to_string())
}

/// The renderRef of `status.lastHealthy`.
async fn last_healthy(f: &Fixture) -> String {
    f.release()
        .await
        .status
        .unwrap()
        .last_healthy
        .unwrap()
        .render_ref
}

/// A Deployment the scheduler can never place: it stays Progressing, then Degraded.
fn unschedulable(name: &str, wave: i32) -> String {
    deployment(name, wave, 1).replace(
        "    spec:\n      containers:",
        "    spec:\n      nodeSelector: {convoy-test: nowhere}\n      containers:",
    )
}

/// Health passes until the Release's Healthy condition is True.
async fn until_healthy(f: &Fixture, name: &str) {
    let memory = HealthMemory::default();
    eventually(
        "the Release to be Healthy",
        Duration::from_secs(90),
        || async {
            let release = f.releases().get(name).await.unwrap();
            let pass = health_pass(&f.ctx, &memory, &release).await.unwrap()?;
            (pass.condition?.status.as_str() == "True").then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_pin_applies_an_older_render_and_unpin_returns_to_the_source() {
    let f = Fixture::new(
        "pin",
        &[("cm.yaml", &config_map("conf", 0, "one"))],
        json!({}),
    )
    .await
    .with_dir_store();
    let first = render_of(&f.sync().await);
    f.commit(&[("cm.yaml", &config_map("conf", 0, "two"))]);
    let second = render_of(&f.sync().await);
    assert_ne!(first, second);
    assert_eq!(value_of(&f, "conf").await.as_deref(), Some("two"));

    f.annotate(json!({"convoy.kumodo.io/pin": first})).await;
    f.sync().await;
    let release = f.release().await;
    assert_eq!(
        value_of(&f, "conf").await.as_deref(),
        Some("one"),
        "the pinned render runs"
    );
    assert_eq!(applied(&release), ("True".into(), Reason::Applied.into()));
    let status = release.status.clone().unwrap();
    assert_eq!(status.pin.unwrap().render_ref, first);
    assert_eq!(successful_render(&release), Some(first.clone()));
    let desired = convoy::engine::drift::render_desired(&f.ctx, &release)
        .await
        .ok()
        .unwrap();
    assert_eq!(
        desired.render_ref, first,
        "the drift loop compares against the pinned render"
    );

    f.annotate(json!({"convoy.kumodo.io/pin": null})).await;
    f.sync().await;
    let release = f.release().await;
    assert_eq!(
        value_of(&f, "conf").await.as_deref(),
        Some("two"),
        "the source's render runs again"
    );
    assert_eq!(
        release.status.clone().unwrap().pin,
        None,
        "unpin clears status.pin"
    );
    assert_eq!(successful_render(&release), Some(second));

    // A render the store does not hold: Pinned, not retried, nothing changes.
    f.annotate(json!({"convoy.kumodo.io/pin": "0123456789abcdef"}))
        .await;
    let result = f.sync().await;
    let outcome = result.outcome.unwrap();
    assert_eq!((outcome.reason, outcome.retry), (Reason::Pinned, false));
    let release = f.release().await;
    assert_eq!(applied(&release), ("False".into(), Reason::Pinned.into()));
    let failure = release
        .status
        .unwrap()
        .last_attempted
        .unwrap()
        .failure
        .unwrap();
    assert_eq!(failure.stage, FailureStage::Rendering);
    assert_eq!(value_of(&f, "conf").await.as_deref(), Some("two"));
}

#[tokio::test]
async fn a_pin_without_a_render_store_is_pinned() {
    let f = Fixture::new(
        "pin-nostore",
        &[("cm.yaml", &config_map("conf", 0, "one"))],
        json!({}),
    )
    .await;
    f.sync().await;
    let f = &f;
    let pin_message = |pin: String| async move {
        f.annotate(json!({"convoy.kumodo.io/pin": pin})).await;
        f.sync().await;
        let release = f.release().await;
        assert_eq!(applied(&release), ("False".into(), Reason::Pinned.into()));
        release
            .status
            .unwrap()
            .condition(condition_types::APPLIED)
            .unwrap()
            .message
            .clone()
    };
    let message = pin_message("0123456789abcdef".repeat(4)).await;
    assert!(message.contains("no render store"), "{message}");
    // A pin that is not a renderRef is refused before any store sees it.
    let message = pin_message("../../etc".into()).await;
    assert!(
        message.contains("\"../../etc\", which is not a renderRef"),
        "{message}"
    );
}

#[tokio::test]
async fn a_render_that_never_becomes_healthy_rolls_back_and_a_good_commit_rolls_forward() {
    let mut extra = Fixture::default_health("1m");
    json_patch::merge(
        &mut extra,
        &json!({"failurePolicy": {"deadline": "3s", "rollback": "OnWaveFailure"}}),
    );
    let f = Fixture::new("rollback", &[("d.yaml", &deployment("web", 0, 1))], extra)
        .await
        .with_dir_store();
    f.install_default_rules().await;
    let good = render_of(&f.sync().await);
    let release = f.release().await;
    assert_eq!(
        release.status.unwrap().rollout.unwrap().state,
        RolloutState::Progressing
    );
    until_healthy(&f, "web").await;
    f.sync().await;
    let release = f.release().await;
    let status = release.status.clone().unwrap();
    assert_eq!(status.rollout.unwrap().state, RolloutState::Succeeded);
    assert_eq!(status.last_healthy.unwrap().render_ref, good);
    assert_eq!(
        condition(&release, condition_types::ROLLOUT_SUCCEEDED),
        Some(("True".into(), "Succeeded".into()))
    );

    // A bad commit: Progressing until the deadline, then the last healthy render again.
    f.commit(&[("d.yaml", &unschedulable("web", 0))]);
    let bad = render_of(&f.sync().await);
    // Healthy=True still speaks for the good render: a sync before the health loop looked at
    // the bad one must not call it healthy.
    f.sync().await;
    let status = f.release().await.status.unwrap();
    assert_eq!(status.rollout.unwrap().state, RolloutState::Progressing);
    assert_eq!(status.last_healthy.unwrap().render_ref, good);
    let memory = HealthMemory::default();
    eventually(
        "the rollout to roll back",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let result = f.sync().await;
            (result.outcome?.reason == Reason::RolledBack).then_some(())
        },
    )
    .await;
    let release = f.release().await;
    assert_eq!(
        applied(&release),
        ("True".into(), Reason::RolledBack.into())
    );
    assert_eq!(
        condition(&release, condition_types::ROLLOUT_SUCCEEDED),
        Some(("False".into(), "RolledBack".into()))
    );
    let status = release.status.clone().unwrap();
    assert_eq!(status.rollout.as_ref().unwrap().render_ref, bad);
    assert_eq!(status.last_attempted.unwrap().render_ref, Some(bad));
    assert_eq!(
        successful_render(&release),
        Some(good.clone()),
        "lastSuccessful holds the last healthy render"
    );
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let live = deployments.get("web").await.unwrap();
    assert_eq!(
        live.spec.unwrap().template.spec.unwrap().node_selector,
        None,
        "the cluster runs the last healthy render again"
    );

    // Automatic sync stays on: the next good commit rolls forward without a manual step.
    f.commit(&[("d.yaml", &deployment("web", 0, 2))]);
    let fixed = render_of(&f.sync().await);
    let release = f.release().await;
    assert_eq!(applied(&release), ("True".into(), Reason::Applied.into()));
    assert_eq!(successful_render(&release), Some(fixed.clone()));
    let rollout = release.status.unwrap().rollout.unwrap();
    assert_eq!(
        (rollout.state, rollout.render_ref),
        (RolloutState::Progressing, fixed)
    );
    assert_eq!(
        deployments.get("web").await.unwrap().spec.unwrap().replicas,
        Some(2)
    );
}

#[tokio::test]
async fn the_deadline_does_not_run_while_the_manual_gate_holds_the_render() {
    let f = Fixture::new(
        "rollout-gate",
        &[("cm.yaml", &config_map("conf", 0, "one"))],
        json!({"syncPolicy": {"mode": "Manual"},
               "failurePolicy": {"deadline": "1s", "rollback": "OnWaveFailure"}}),
    )
    .await;
    let held = f.sync().await.outcome.unwrap();
    assert_eq!(held.reason, Reason::WaitingForSync);
    let rollout = f.release().await.status.unwrap().rollout.unwrap();
    assert_eq!(
        (rollout.state, rollout.started_at),
        (RolloutState::Progressing, None),
        "a held render has not started rolling out"
    );
    f.annotate(json!({"convoy.kumodo.io/sync-requested-at": "2026-01-01T00:00:00Z"}))
        .await;
    let synced = f.sync().await.outcome.unwrap();
    assert_eq!(synced.reason, Reason::Applied);
    let rollout = f.release().await.status.unwrap().rollout.unwrap();
    assert_eq!(rollout.state, RolloutState::Progressing);
    assert!(
        rollout.started_at.is_some(),
        "the clock starts at the apply"
    );
    assert_eq!(value_of(&f, "conf").await.as_deref(), Some("one"));
}

#[tokio::test]
async fn without_health_assessment_the_wave_gate_is_open() {
    let f = Fixture::new(
        "waves-unassessed",
        &[
            ("a.yaml", &config_map("first", 0, "a")),
            ("b.yaml", &config_map("second", 1, "b")),
        ],
        json!({"syncPolicy": {"waves": {"waitForHealth": true, "timeout": "1m"}},
               "healthAssessment": {"builtinRules": false}}),
    )
    .await;
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(value_of(&f, "second").await.as_deref(), Some("b"));
    let waves = f.release().await.status.unwrap().waves;
    assert!(
        waves.iter().all(|w| w.applied && w.healthy),
        "NotConfigured: applied waves are healthy: {waves:?}"
    );
}

/// Health is on by default: a Release that names no rules has its objects judged by the
/// built-in rules, so a Deployment that never becomes Available is Progressing, then Degraded
/// past the deadline, and the rollout rolls back.
#[tokio::test]
async fn without_a_health_assessment_the_built_in_rules_judge_and_a_stuck_rollout_rolls_back() {
    let f = Fixture::new(
        "health-default",
        &[("d.yaml", &deployment("web", 0, 1))],
        json!({"failurePolicy": {"deadline": "5s", "rollback": "OnWaveFailure"}}),
    )
    .await
    .with_dir_store();
    let good = render_of(&f.sync().await);
    until_healthy(&f, "web").await;
    f.sync().await;
    let status = f.release().await.status.unwrap();
    assert_eq!(status.rollout.unwrap().state, RolloutState::Succeeded);
    assert_eq!(status.last_healthy.unwrap().render_ref, good);
    let inventory: Api<ReleaseInventory> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let entry = inventory.get("web").await.unwrap().spec.inventory[0].clone();
    assert_eq!(
        entry.rule.as_deref(),
        Some("built-in/deployment-available, built-in/ready-condition")
    );

    f.commit(&[("d.yaml", &unschedulable("web", 0))]);
    f.sync().await;
    let memory = HealthMemory::default();
    let progressing = eventually(
        "Healthy to turn Progressing",
        Duration::from_secs(30),
        || async {
            let pass = health_pass(&f.ctx, &memory, &f.release().await)
                .await
                .ok()??;
            let c = pass.condition?;
            (c.reason == "Progressing").then_some(c)
        },
    )
    .await;
    assert_eq!(progressing.status.as_str(), "False");
    eventually(
        "the rollout to roll back",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let result = f.sync().await;
            (result.outcome?.reason == Reason::RolledBack).then_some(())
        },
    )
    .await;
    assert_eq!(
        f.release()
            .await
            .status
            .unwrap()
            .last_successful
            .unwrap()
            .render_ref,
        Some(good)
    );
}

/// With only a deadline (no rule selected), the built-in rules take a stuck Deployment from
/// Progressing to Degraded.
#[tokio::test]
async fn a_deadline_alone_degrades_a_stuck_deployment_by_the_built_in_rules() {
    let f = Fixture::new(
        "health-default-deadline",
        &[("d.yaml", &unschedulable("web", 0))],
        json!({"healthAssessment": {"deadline": "2s"}}),
    )
    .await;
    f.sync().await;
    let memory = HealthMemory::default();
    let seen = std::sync::Mutex::new(Vec::<String>::new());
    eventually(
        "Healthy to turn Degraded",
        Duration::from_secs(30),
        || async {
            let pass = health_pass(&f.ctx, &memory, &f.release().await)
                .await
                .ok()??;
            let reason = pass.condition?.reason;
            let mut seen = seen.lock().unwrap();
            if seen.last() != Some(&reason) {
                seen.push(reason.clone());
            }
            (reason == "Degraded").then_some(())
        },
    )
    .await;
    let seen = seen.into_inner().unwrap();
    assert_eq!(
        seen.first().map(String::as_str),
        Some("Progressing"),
        "{seen:?}"
    );
}

/// wave 0: a Deployment that never becomes healthy; wave 1: a ConfigMap.
fn held_waves() -> Vec<(&'static str, String)> {
    vec![
        ("d.yaml", unschedulable("web", 0)),
        ("cm.yaml", config_map("after", 1, "x")),
    ]
}

async fn wave_timeout(test: &str, extra: serde_json::Value) -> Fixture {
    let mut spec = Fixture::default_health("1m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true, "timeout": "2s"}}}),
    );
    json_patch::merge(&mut spec, &extra);
    let files = held_waves();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    let f = Fixture::new(test, &refs, spec).await;
    f.install_default_rules().await;
    let first = f.sync().await.outcome.unwrap();
    assert_eq!(first.reason, Reason::WaitingForWaveHealth);
    eventually("the wave to time out", Duration::from_secs(30), || async {
        let outcome = f.sync().await.outcome?;
        (outcome.reason != Reason::WaitingForWaveHealth).then_some(())
    })
    .await;
    assert_eq!(
        f.config_map("after").await,
        None,
        "wave 1 was never applied"
    );
    f
}

#[tokio::test]
async fn a_wave_timeout_without_rollback_fails_the_rollout() {
    let f = wave_timeout(
        "wave-rolloutfailed",
        json!({"failurePolicy": {"deadline": "10m", "rollback": "Never"}}),
    )
    .await;
    let release = f.release().await;
    assert_eq!(
        applied(&release),
        ("False".into(), Reason::RolloutFailed.into())
    );
    assert_eq!(
        condition(&release, condition_types::ROLLOUT_SUCCEEDED),
        Some(("False".into(), "Failed".into()))
    );
    let status = release.status.unwrap();
    assert_eq!(status.rollout.unwrap().state, RolloutState::Failed);
    assert_eq!(
        status.last_attempted.unwrap().failure.unwrap().stage,
        FailureStage::Syncing
    );
    let message = applied_message(&f.release().await);
    // The next passes over the same render time out again: still RolloutFailed, same words.
    let again = eventually("the next pass to end", Duration::from_secs(30), || async {
        let outcome = f.sync().await.outcome?;
        (outcome.reason != Reason::WaitingForWaveHealth).then_some(outcome)
    })
    .await;
    assert_eq!(again.reason, Reason::RolloutFailed);
    let release = f.release().await;
    assert_eq!(
        applied(&release),
        ("False".into(), Reason::RolloutFailed.into())
    );
    assert_eq!(applied_message(&release), message);
}

fn applied_message(release: &convoy::engine::api::Release) -> String {
    release
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == condition_types::APPLIED)
        .unwrap()
        .message
        .clone()
}

#[tokio::test]
async fn a_wave_timeout_with_rollback_rolls_back_to_the_last_healthy_render() {
    let mut spec = Fixture::default_health("1m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true, "timeout": "2s"}},
                "failurePolicy": {"deadline": "10m", "rollback": "OnWaveFailure"}}),
    );
    let f = Fixture::new(
        "wave-rollback",
        &[
            ("d.yaml", &deployment("web", 0, 1)),
            ("cm.yaml", &config_map("after", 1, "x")),
        ],
        spec,
    )
    .await
    .with_dir_store();
    f.install_default_rules().await;
    let memory = HealthMemory::default();
    let good = eventually(
        "the good render applied in both waves",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let result = f.sync().await;
            (result.outcome.as_ref()?.reason == Reason::Applied).then(|| render_of(&result))
        },
    )
    .await;
    until_healthy(&f, "web").await;
    f.sync().await;
    assert_eq!(last_healthy(&f).await, good);

    // Wave 0 of the next render never becomes healthy: past waves.timeout it rolls back.
    let files = held_waves();
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (*p, c.as_str())).collect();
    f.commit(&refs);
    let bad = render_of(&f.sync().await);
    eventually(
        "the wave timeout to roll back",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let outcome = f.sync().await.outcome?;
            (outcome.reason == Reason::RolledBack).then_some(())
        },
    )
    .await;
    let release = f.release().await;
    assert_eq!(
        applied(&release),
        ("True".into(), Reason::RolledBack.into())
    );
    let rollout = release.status.clone().unwrap().rollout.unwrap();
    assert_eq!(
        (rollout.state, rollout.render_ref),
        (RolloutState::RolledBack, bad.clone())
    );
    assert_eq!(successful_render(&release), Some(good.clone()));
    // The render rolled back stopped before recordHistory; its history entry says how it
    // ended all the same (`convoy history` marks it rolled back).
    let history = f
        .ctx
        .store
        .as_ref()
        .unwrap()
        .history(&ReleaseId::of(&release))
        .await
        .unwrap();
    assert_eq!(
        history
            .iter()
            .map(|h| (h.render_ref.clone(), h.outcome))
            .collect::<Vec<_>>(),
        [
            (good.clone(), history[0].outcome),
            (
                bad.clone(),
                Some(convoy::engine::store::HistoryOutcome::RolledBack)
            )
        ]
    );
    assert!(history[1].source_revision.is_some());
    // Healthy describes what runs, the last healthy render, not Pending while RolledBack.
    let healthy = eventually(
        "Healthy True while RolledBack",
        Duration::from_secs(60),
        || async {
            let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
            let release = f.release().await;
            let c = release
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == condition_types::HEALTHY)?;
            (c.status.as_str() == "True").then_some(c)
        },
    )
    .await;
    assert_eq!(healthy.reason, "Healthy");
    assert!(
        healthy.message.ends_with(&format!(
            "(render {} runs; render {} is not applied)",
            convoy::engine::render::render_ref::short(&good),
            convoy::engine::render::render_ref::short(&bad)
        )),
        "{}",
        healthy.message
    );
    let get = f.env.convoy(&["get"]);
    let get = String::from_utf8_lossy(&get.stdout).to_string();
    let row: Vec<&str> = get.lines().nth(1).unwrap().split_whitespace().collect();
    let header: Vec<&str> = get.lines().next().unwrap().split_whitespace().collect();
    let column = header.iter().position(|h| *h == "HEALTHY").unwrap();
    // (STATE is empty for a Release that is not paused: one column fewer in the row.)
    assert_eq!(
        row[column - 1],
        "True",
        "convoy get shows HEALTHY True:\n{get}"
    );
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    assert_eq!(
        deployments
            .get("web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .node_selector,
        None,
        "the last healthy render runs again"
    );
}

#[tokio::test]
async fn a_wave_timeout_without_a_failure_policy_is_wave_failed_and_no_rollout() {
    let f = wave_timeout("wave-wavefailed", json!({})).await;
    let release = f.release().await;
    assert_eq!(
        applied(&release),
        ("False".into(), Reason::WaveFailed.into())
    );
    assert_eq!(
        condition(&release, condition_types::ROLLOUT_SUCCEEDED),
        None
    );
    let status = release.status.unwrap();
    assert_eq!(status.rollout, None);
    let message = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition_types::APPLIED)
        .unwrap()
        .message
        .clone();
    assert!(
        message.contains("Deployment") && message.contains("/web"),
        "names the object: {message}"
    );
    assert_eq!(
        status
            .waves
            .iter()
            .map(|w| (w.wave, w.applied))
            .collect::<Vec<_>>(),
        [(0, true)]
    );
    // A render that fails leaves no wave table of the render before it.
    f.commit(&[("bad.yaml", "kind: [unclosed\n")]);
    let outcome = f.sync().await.outcome.unwrap();
    assert_eq!(
        outcome.attempt.failure.map(|x| x.stage),
        Some(FailureStage::Rendering.to_string())
    );
    assert_eq!(f.release().await.status.unwrap().waves, vec![]);
}

#[tokio::test]
async fn wave_one_waits_for_wave_zero_to_be_healthy() {
    let mut spec = Fixture::default_health("1m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true}}}),
    );
    let cm = config_map("after", 1, "x");
    let d = deployment("web", 0, 1);
    let f = Fixture::new("wave-order", &[("d.yaml", &d), ("cm.yaml", &cm)], spec).await;
    f.install_default_rules().await;
    let held = f.sync().await.outcome.unwrap();
    assert_eq!(held.reason, Reason::WaitingForWaveHealth);
    assert!(
        held.message.contains("wave 1 waits for wave 0"),
        "{}",
        held.message
    );
    assert_eq!(f.config_map("after").await, None);
    let release = f.release().await;
    let waiting = release.status.clone().unwrap().waiting.unwrap();
    assert_eq!(waiting.target, "wave 0");

    // kwok readies the pods; the health loop marks wave 0 Healthy; wave 1 goes.
    let memory = HealthMemory::default();
    eventually("wave 0 to be healthy", Duration::from_secs(90), || async {
        let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
        let outcome = f.sync().await.outcome?;
        (outcome.reason == Reason::Applied).then_some(())
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let available_at = deployments
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Available" && c.status.as_str() == "True")
        .unwrap()
        .last_transition_time
        .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(f.env.client.clone(), &f.env.namespace);
    let created = configmaps
        .get("after")
        .await
        .unwrap()
        .metadata
        .creation_timestamp
        .unwrap();
    assert!(
        created.0 >= available_at.0,
        "wave 1 created at {created:?}, wave 0 available at {available_at:?}"
    );
    let status = f.release().await.status.unwrap();
    assert_eq!(status.waiting, None);
    assert_eq!(
        status
            .waves
            .iter()
            .map(|w| (w.wave, w.applied))
            .collect::<Vec<_>>(),
        [(0, true), (1, true)]
    );
}

/// A commit that takes an object out of a waited-on wave, and moves another to the next wave:
/// the gate judges the wave of the render being applied, so neither the object about to be
/// pruned nor the one applied later holds it (both were in wave 0 of the inventory's
/// previous render, and neither is ever assessed for the new one there).
#[tokio::test]
async fn objects_that_left_a_waited_on_wave_do_not_hold_it() {
    let mut spec = Fixture::default_health("1m");
    json_patch::merge(
        &mut spec,
        &json!({"syncPolicy": {"waves": {"waitForHealth": true, "timeout": "30s"}}}),
    );
    let f = Fixture::new(
        "wave-left",
        &[
            ("stay.yaml", &config_map("stay", 0, "a")),
            ("gone.yaml", &config_map("gone", 0, "a")),
            ("moves.yaml", &config_map("moves", 0, "a")),
            ("after.yaml", &config_map("after", 1, "a")),
        ],
        spec,
    )
    .await;
    f.install_default_rules().await;
    let memory = HealthMemory::default();
    let until_applied = || async {
        eventually(
            "the sync to be Applied",
            Duration::from_secs(60),
            || async {
                let _ = health_pass(&f.ctx, &memory, &f.release().await).await;
                let outcome = f.sync().await.outcome?;
                assert_ne!(outcome.reason, Reason::WaveFailed, "{}", outcome.message);
                assert_ne!(outcome.reason, Reason::RolledBack, "{}", outcome.message);
                (outcome.reason == Reason::Applied).then_some(())
            },
        )
        .await
    };
    until_applied().await;

    f.commit(&[
        ("stay.yaml", &config_map("stay", 0, "b")),
        ("moves.yaml", &config_map("moves", 1, "b")),
        ("after.yaml", &config_map("after", 1, "b")),
    ]);
    let held = f.sync().await.outcome.unwrap();
    assert_eq!(held.reason, Reason::WaitingForWaveHealth);
    assert_eq!(
        held.message,
        format!(
            "wave 1 waits for wave 0 to be healthy: ConfigMap {}/stay is not assessed yet",
            f.env.namespace
        )
    );
    until_applied().await;
    assert_eq!(f.config_map("gone").await, None, "pruned");
    for name in ["stay", "moves", "after"] {
        assert_eq!(
            f.config_map(name).await.unwrap()["data"]["value"],
            "b",
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_cluster_wave_waits_for_the_lower_wave_times_out_then_proceeds() {
    let f = Fixture::new(
        "cluster-wave",
        &[("cm.yaml", &config_map("first", 0, "a"))],
        json!({"clusterWave": {"wave": 0}}),
    )
    .await;
    f.repo
        .commit(&[("late/cm.yaml", &config_map("second", 0, "b"))], "late");
    f.add_release(
        "late",
        "late",
        json!({"clusterWave": {"wave": 1, "timeout": "2s"}}),
    )
    .await;

    let held = f.sync_named("late").await.outcome.unwrap();
    assert_eq!(held.reason, Reason::WaitingForClusterWave);
    assert!(
        held.message.contains("Release web (cluster wave 0)"),
        "{}",
        held.message
    );
    assert_eq!(f.config_map("second").await, None);

    eventually(
        "the cluster wave to time out",
        Duration::from_secs(30),
        || async {
            let outcome = f.sync_named("late").await.outcome?;
            (outcome.reason == Reason::ClusterWaveFailed).then_some(())
        },
    )
    .await;
    let late = f.releases().get("late").await.unwrap();
    assert_eq!(
        applied(&late),
        ("False".into(), Reason::ClusterWaveFailed.into())
    );
    assert_eq!(
        late.status
            .unwrap()
            .last_attempted
            .unwrap()
            .failure
            .unwrap()
            .stage,
        FailureStage::Syncing
    );

    // Wave 0 becomes Applied and Healthy (no health assessment: NotConfigured is healthy).
    f.sync().await;
    until_healthy(&f, "web").await;
    let outcome = f.sync_named("late").await.outcome.unwrap();
    assert_eq!(outcome.reason, Reason::Applied, "{}", outcome.message);
    assert_eq!(value_of(&f, "second").await.as_deref(), Some("b"));
}

#[tokio::test]
async fn gc_keeps_max_history_entries_and_every_referenced_render() {
    let f = Fixture::new("gc", &[("cm.yaml", &config_map("conf", 0, "r1"))], {
        let mut spec = Fixture::default_health("1m");
        json_patch::merge(&mut spec, &json!({"retentionPolicy": {"maxHistory": 2}}));
        spec
    })
    .await
    .with_dir_store();
    f.install_default_rules().await;
    let r1 = render_of(&f.sync().await);
    // r1 is assessed healthy and becomes lastHealthy; the later renders are never assessed.
    until_healthy(&f, "web").await;
    f.sync().await;
    assert_eq!(last_healthy(&f).await, r1);
    let mut refs = vec![r1.clone()];
    for value in ["r2", "r3", "r4"] {
        f.commit(&[("cm.yaml", &config_map("conf", 0, value))]);
        refs.push(render_of(&f.sync().await));
    }
    let store = f.ctx.store.as_ref().unwrap();
    let id = ReleaseId::of(&f.release().await);
    let history: Vec<String> = store
        .history(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.render_ref)
        .collect();
    assert_eq!(
        history,
        [refs[2].clone(), refs[3].clone()],
        "exactly maxHistory entries, newest last"
    );
    let mut stored = store.list_renders(&id).await.unwrap();
    stored.sort();
    let mut expected = vec![r1, refs[2].clone(), refs[3].clone()];
    expected.sort();
    assert_eq!(stored, expected, "r2 is gone; r1 stays as lastHealthy");

    // Deleting the Release deletes its renders and history (finalize step 6).
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    f.sync().await;
    assert_eq!(store.list_renders(&id).await.unwrap(), Vec::<String>::new());
    assert_eq!(store.history(&id).await.unwrap(), []);
}

/// A render stored for a sync that failed later (persistRender runs beside the dry-run gate)
/// is collected at the next history change, even the first. runGC lists the store only when
/// something may be collected: one left by another process (or before a restart) goes when
/// the history next drops an entry, once this process has listed the Release's renders.
#[tokio::test]
async fn a_render_left_by_a_failed_sync_is_collected_at_the_next_history_change() {
    use convoy::engine::render::Object;
    use convoy::engine::store::kube::KubernetesStore;
    // A first render the API server refuses: stored all the same, never recorded.
    let mut f = Fixture::new(
        "gc-leftover",
        &[(
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\ndata:\n  value: [1]\n",
        )],
        json!({"retentionPolicy": {"maxHistory": 3}}),
    )
    .await;
    let store = std::sync::Arc::new(KubernetesStore::new(f.env.client.clone(), &f.env.namespace));
    f.ctx.store = Some(store.clone());
    let refused = f.sync().await;
    assert_eq!(
        refused.outcome.as_ref().unwrap().reason,
        Reason::Unappliable
    );
    let refused = render_of(&refused);
    let id = ReleaseId::of(&f.release().await);
    let stored = || async {
        let mut stored = store.list_renders(&id).await.unwrap();
        stored.sort();
        stored
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    assert_eq!(stored().await, [refused]);
    let sync_value = async |value: &str| {
        f.commit(&[("cm.yaml", &config_map("conf", 0, value))]);
        render_of(&f.sync().await)
    };
    // The history's first entry: collected then, though nothing else was listed before.
    let r1 = sync_value("r1").await;
    assert_eq!(
        stored().await,
        vec![r1.clone()],
        "the refused render is collected at the next history change"
    );
    // Left by another process: kept while the history only grows...
    let theirs = "b".repeat(64);
    let objects = vec![Object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "conf"}, "data": {"value": "x"}}))];
    store.put_render(&id, &theirs, &objects).await.unwrap();
    // Objects stored under a ref that is not theirs are never read back as that render.
    let e = store
        .get_render(&id, &theirs)
        .await
        .unwrap_err()
        .to_string();
    assert!(e.ends_with("not the render it is stored as"), "{e}");
    let r2 = sync_value("r2").await;
    let r3 = sync_value("r3").await;
    assert_eq!(
        stored().await,
        sorted(vec![r1, r2.clone(), r3.clone(), theirs])
    );
    // ...and collected when it drops an entry.
    let r4 = sync_value("r4").await;
    assert_eq!(stored().await, sorted(vec![r2, r3, r4]));
}

/// A Release deleted without its finalizer (whoever may write it can remove that) leaves its
/// renders and history; the daemon's sweep deletes them once they have settled, and only
/// theirs.
#[tokio::test]
async fn the_store_sweep_deletes_what_a_release_deleted_without_its_finalizer_left() {
    use convoy::engine::store::kube::KubernetesStore;
    use convoy::engine::store::orphans::sweep_settled;
    let mut f = Fixture::new(
        "store-sweep",
        &[("cm.yaml", &config_map("conf", 0, "a"))],
        json!({}),
    )
    .await;
    let store = std::sync::Arc::new(KubernetesStore::new(f.env.client.clone(), &f.env.namespace));
    f.ctx.store = Some(store.clone());
    f.repo
        .commit(&[("other/cm.yaml", &config_map("other", 0, "b"))], "other");
    f.add_release("keep", "other", json!({})).await;
    let web = render_of(&f.sync().await);
    let keep = render_of(&f.sync_named("keep").await);
    let web_id = ReleaseId::of(&f.release().await);
    let keep_id = ReleaseId::of(&f.releases().get("keep").await.unwrap());
    assert_eq!(
        store.list_renders(&web_id).await.unwrap(),
        std::slice::from_ref(&web)
    );

    f.releases()
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    f.releases()
        .delete("web", &Default::default())
        .await
        .unwrap();
    eventually(
        "the Release to be gone",
        Duration::from_secs(30),
        || async {
            f.releases()
                .get_opt("web")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await;
    assert_eq!(
        store.list_renders(&web_id).await.unwrap(),
        std::slice::from_ref(&web),
        "left behind"
    );

    // Written within the settling time: left alone.
    let swept = sweep_settled(&f.env.client, store.as_ref(), Duration::from_secs(3600))
        .await
        .unwrap();
    assert_eq!(swept, Vec::<String>::new());
    assert_eq!(store.list_renders(&web_id).await.unwrap(), [web]);

    let swept = sweep_settled(&f.env.client, store.as_ref(), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(swept, [format!("{}/web", f.env.namespace)]);
    assert_eq!(
        store.list_renders(&web_id).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.history(&web_id).await.unwrap(), []);
    assert_eq!(
        store.list_renders(&keep_id).await.unwrap(),
        std::slice::from_ref(&keep)
    );
    assert_eq!(store.history(&keep_id).await.unwrap().len(), 1);
}

/// A Release whose renders the dry run always refuses, edited in a loop (what a tenant can
/// do to fill convoy's namespace with render Secrets, outside its own quota): the store keeps
/// the applied render and the last two refused ones (the one being stored, and lastAttempted
/// before it), not every one.
#[tokio::test]
async fn refused_renders_do_not_pile_up_in_the_store() {
    use convoy::engine::store::kube::KubernetesStore;
    let mut f = Fixture::new(
        "gc-refused",
        &[("cm.yaml", &config_map("conf", 0, "ok"))],
        json!({"retentionPolicy": {"maxHistory": 3}}),
    )
    .await;
    let store = std::sync::Arc::new(KubernetesStore::new(f.env.client.clone(), &f.env.namespace));
    f.ctx.store = Some(store.clone());
    let applied = render_of(&f.sync().await);
    let id = ReleaseId::of(&f.release().await);
    let mut refused_renders = Vec::new();
    for n in 0..5 {
        f.commit(&[(
            "cm.yaml",
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\ndata:\n  value: [{n}]\n"
            ),
        )]);
        let refused = f.sync().await;
        assert_eq!(
            refused.outcome.as_ref().unwrap().reason,
            Reason::Unappliable
        );
        refused_renders.push(render_of(&refused));
    }
    let mut stored = store.list_renders(&id).await.unwrap();
    stored.sort();
    let mut expected = vec![applied];
    expected.extend(refused_renders[3..].iter().cloned());
    expected.sort();
    assert_eq!(
        stored, expected,
        "the applied render and the last two refused ones"
    );
}

/// A Release of large renders keeps only the newest history that fits the store's budget
/// per Release, whatever its maxHistory: 100 renders of 44 MiB were 4.4 GiB of Secrets in
/// convoy's namespace, past etcd's default quota, from one tenant's Release (found by an
/// attack). Each entry records what its render takes in the store.
#[tokio::test]
async fn the_history_keeps_what_fits_the_store_budget() {
    use convoy::engine::store::kube::KubernetesStore;
    use sha2::{Digest, Sha256};
    // A ConfigMap of 8 KiB of hex that gzip cannot shrink much, different at each commit.
    let blob = |n: u8| {
        let mut seed = Sha256::digest([n]).to_vec();
        let mut data = String::new();
        for _ in 0..128 {
            seed = Sha256::digest(&seed).to_vec();
            data.push_str(&hex::encode(&seed));
        }
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: conf\ndata:\n  blob: {data}\n")
    };
    let mut f = Fixture::new(
        "gc-budget",
        &[("cm.yaml", &blob(0))],
        json!({"retentionPolicy": {"maxHistory": 10}}),
    )
    .await;
    let store = std::sync::Arc::new(KubernetesStore::new(f.env.client.clone(), &f.env.namespace));
    f.ctx.store = Some(store.clone());
    let mut renders = vec![render_of(&f.sync().await)];
    let id = ReleaseId::of(&f.release().await);
    let one = store.render_bytes(&id, &renders[0]).await.unwrap().unwrap();
    assert!(one > 4096, "the render is stored whole: {one} bytes");
    // Two renders fit, a third does not.
    f.ctx.store_budget = one * 5 / 2;
    for n in 1..4 {
        f.commit(&[("cm.yaml", &blob(n))]);
        renders.push(render_of(&f.sync().await));
    }
    let history = store.history(&id).await.unwrap();
    let kept: Vec<&str> = history.iter().map(|h| h.render_ref.as_str()).collect();
    assert_eq!(kept, [&renders[2], &renders[3]], "the newest two");
    for entry in &history {
        assert_eq!(
            entry.stored_bytes,
            store.render_bytes(&id, &entry.render_ref).await.unwrap(),
            "the entry says what its render takes"
        );
    }
    let mut stored = store.list_renders(&id).await.unwrap();
    stored.sort();
    let status = f.release().await.status.unwrap_or_default();
    let mut expected: Vec<String> = renders[2..].to_vec();
    expected.extend(status.last_healthy.map(|h| h.render_ref));
    expected.sort();
    expected.dedup();
    assert_eq!(stored, expected, "what the history and the status refer to");
}

#[tokio::test]
async fn the_kubernetes_store_round_trips_a_render_larger_than_one_mebibyte() {
    use convoy::engine::render::Object;
    use convoy::engine::store::kube::KubernetesStore;
    use k8s_openapi::api::core::v1::Secret;
    use kube::ResourceExt;
    use sha2::{Digest, Sha256};

    let env = crate::support::TestEnv::new("kube-store").await;
    let store = KubernetesStore::new(env.client.clone(), &env.namespace);
    // Hashes chained into hex: text gzip cannot shrink much below half, so ~3 MiB of it
    // stays well above 1 MiB stored.
    let mut seed = Sha256::digest(b"convoy").to_vec();
    let objects: Vec<Object> = (0..300)
        .map(|i| {
            let mut data = String::new();
            for _ in 0..160 {
                seed = Sha256::digest(&seed).to_vec();
                data.push_str(&hex::encode(&seed));
            }
            Object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("c{i}")}, "data": {"blob": data}}))
        })
        .collect();
    let id = ReleaseId {
        namespace: "apps".into(),
        name: "big".into(),
    };
    let encoded = convoy::engine::store::encode(&objects);
    assert!(
        encoded.len() > 1024 * 1024,
        "the stored render is {} bytes",
        encoded.len()
    );
    let r = convoy::engine::render::render_ref::render_ref(&objects);
    store.put_render(&id, &r, &objects).await.unwrap();
    assert!(store.has_render(&id, &r).await.unwrap());
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), &env.namespace);
    let chunks = secrets.list(&Default::default()).await.unwrap().items;
    assert!(chunks.len() >= 2, "chunked into {} Secrets", chunks.len());
    for chunk in &chunks {
        let managers: Vec<&str> = chunk
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter_map(|m| m.manager.as_deref())
            .collect();
        assert_eq!(
            managers,
            ["convoy-release"],
            "the controller is the store's one writer"
        );
        let size: usize = chunk
            .data
            .as_ref()
            .unwrap()
            .values()
            .map(|b| b.0.len())
            .sum();
        assert!(size < 1024 * 1024, "a chunk holds {size} bytes");
    }
    assert_eq!(
        store.get_render(&id, &r).await.unwrap(),
        Some(objects.clone())
    );
    assert_eq!(store.list_renders(&id).await.unwrap(), vec![r.clone()]);

    // The chunks are read by name. One gone: the render is not stored (persistRender writes
    // it again), and reading it says what is missing.
    let n = chunks.len();
    let chunk_named = |i: usize| {
        chunks
            .iter()
            .find(|c| c.annotations().get("convoy.kumodo.io/chunk") == Some(&format!("{i}/{n}")))
            .unwrap()
            .name_any()
    };
    secrets
        .delete(&chunk_named(1), &Default::default())
        .await
        .unwrap();
    assert!(!store.has_render(&id, &r).await.unwrap());
    let e = store.get_render(&id, &r).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "render store: apps/big/renders/{r} is damaged: chunk 1 of {n} is missing or not this render's"
        )
    );
    store.put_render(&id, &r, &objects).await.unwrap();
    assert!(store.has_render(&id, &r).await.unwrap());
    // A first chunk that claims more chunks than a render may have is damaged, not a count
    // of reads to make.
    secrets
        .patch(
            &chunk_named(0),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"convoy.kumodo.io/chunk": "0/4000000000"}}}),
            ),
        )
        .await
        .unwrap();
    assert!(!store.has_render(&id, &r).await.unwrap());
    let e = store.get_render(&id, &r).await.unwrap_err();
    assert!(
        e.to_string()
            .ends_with("does not say it is chunk 0 of at most 64"),
        "{e}"
    );
    store.delete_prefix(&id).await.unwrap();
    assert_eq!(store.get_render(&id, &r).await.unwrap(), None);
    assert!(
        secrets
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
