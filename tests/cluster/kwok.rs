//! The control plane is complete enough for health tests: pods progress through kwok.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::PostParams;
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;

use crate::support::TestEnv;

#[tokio::test]
async fn a_deployment_becomes_available_and_a_job_completes() {
    let env = TestEnv::new("kwok").await;
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), &env.namespace);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]},
            },
        },
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();

    let jobs: Api<Job> = Api::namespaced(env.client.clone(), &env.namespace);
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "once"},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "once", "image": "busybox", "command": ["true"]}],
        }}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();

    let available = await_condition(
        deployments.clone(),
        "web",
        conditions::is_deployment_completed(),
    );
    tokio::time::timeout(Duration::from_secs(60), available)
        .await
        .expect("the Deployment becomes Available within 60s")
        .unwrap();
    let live = deployments.get("web").await.unwrap();
    assert_eq!(live.status.unwrap().available_replicas, Some(2));

    let complete = await_condition(jobs, "once", conditions::is_job_completed());
    tokio::time::timeout(Duration::from_secs(60), complete)
        .await
        .expect("the Job completes within 60s")
        .unwrap();
}
