//! The daemon's watches of live objects (issue 21, "reads bounded by watches"): the drift and
//! health loops read the Release's objects from them. They follow the cluster, hold only
//! convoy's labelled objects, and see no more than the identity they run as.

use std::sync::Arc;
use std::time::Duration;

use convoy::daemon::live::LiveTargets;
use convoy::engine::api::labels::{RELEASE_NAME, RELEASE_NAMESPACE};
use convoy::engine::apply::WatchedObjects;
use convoy::engine::tenant_cache::Holder;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ApiResource;
use serde_json::json;

use crate::support::{TestEnv, client_for, eventually, unique_namespace};

fn config_map(namespace: &str, name: &str, value: &str, labelled: bool) -> String {
    let labels = if labelled {
        json!({RELEASE_NAME: "web", RELEASE_NAMESPACE: namespace})
    } else {
        json!({})
    };
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "data": {"value": value}})
    .to_string()
}

fn value_of(watched: &dyn WatchedObjects, namespace: &str, name: &str) -> Option<String> {
    let object = watched.get(&ApiResource::erase::<ConfigMap>(&()), Some(namespace), name)?;
    Some(object.data["data"]["value"].as_str()?.to_string())
}

#[tokio::test]
async fn watched_live_objects_follow_the_cluster_and_see_no_more_than_their_identity() {
    let env = TestEnv::new("live-watch").await;
    let ns = env.namespace.clone();
    let other = unique_namespace(&env.client, "live-watch-other").await;
    for text in [
        config_map(&ns, "b", "1", false),
        config_map(&ns, "a", "1", true),
        config_map(&other, "x", "1", true),
    ] {
        env.kubectl_apply_text(&text, &[]);
    }
    let targets = LiveTargets::new(Arc::new(|_, _| true));
    let ours = targets.objects_for(&env.client, "https://ours", &Holder::Convoy);
    let cm = ApiResource::erase::<ConfigMap>(&());
    let wait = Duration::from_secs(30);

    // The first read starts the watch and goes to the API server; once it has listed, reads
    // are answered from it, and only for labelled objects.
    eventually("a from convoy's watch", wait, || async {
        (value_of(ours.as_ref(), &ns, "a")? == "1").then_some(())
    })
    .await;
    assert_eq!(
        value_of(ours.as_ref(), &ns, "b"),
        None,
        "an object without convoy's label is not watched"
    );
    // A change and a deletion are followed.
    env.kubectl_apply_text(&config_map(&ns, "a", "2", true), &[]);
    eventually("a changed", wait, || async {
        (value_of(ours.as_ref(), &ns, "a")? == "2").then_some(())
    })
    .await;
    assert!(
        env.kubectl(&["delete", "configmap", "a", "-n", &ns])
            .status
            .success()
    );
    eventually("a deleted", wait, || async {
        value_of(ours.as_ref(), &ns, "a").is_none().then_some(())
    })
    .await;
    let state = ours.state(&cm, None).unwrap();
    assert!(state.current && !state.forbidden, "{state:?}");

    // A ServiceAccount that may read its own namespace only: its watch across the cluster is
    // refused, so it watches that namespace; the other namespace stays refused, and its reads
    // there go to the API server (where RBAC refuses them as before).
    env.kubectl_apply_text(
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "reader", "namespace": ns}})
        .to_string(),
        &[],
    );
    env.kubectl_apply_text(
        &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "reader", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]})
        .to_string(),
        &[],
    );
    env.kubectl_apply_text(&config_map(&ns, "c", "1", true), &[]);
    let kubeconfig = env.service_account_kubeconfig(&ns, "reader");
    let theirs = targets.objects_for(
        &client_for(kubeconfig.path()).await,
        "https://theirs",
        &Holder::Convoy,
    );
    eventually("c from the reader's own namespace", wait, || async {
        (value_of(theirs.as_ref(), &ns, "c")? == "1").then_some(())
    })
    .await;
    assert!(theirs.state(&cm, None).unwrap().forbidden);
    assert!(!theirs.state(&cm, Some(&ns)).unwrap().forbidden);
    eventually(
        "the reader's watch of the other namespace refused",
        wait,
        || async {
            let _ = value_of(theirs.as_ref(), &other, "x");
            theirs.state(&cm, Some(&other))?.forbidden.then_some(())
        },
    )
    .await;
    assert_eq!(value_of(theirs.as_ref(), &other, "x"), None);
    assert_eq!(
        value_of(ours.as_ref(), &other, "x").as_deref(),
        Some("1"),
        "convoy's own identity sees it"
    );
}

/// A read from the API server's watch cache (the drift loop's, for a Release that leaves
/// fields to other managers) LISTs the objects that carry the Release's labels, not every
/// object of the kind in the namespace, and reads by name a wanted object without them
/// (removed by hand: still read) or gone (absent). When more than 16 lack them, it LISTs the
/// whole kind as before. The requests are read off the client.
#[tokio::test]
async fn a_watch_cache_read_lists_the_releases_labelled_objects_and_reads_the_rest_by_name() {
    use convoy::engine::apply::Applier;
    use convoy::engine::render::Object;
    let env = TestEnv::new("live-owned").await;
    let ns = env.namespace.clone();
    let mut text: Vec<String> = (0..40)
        .map(|i| config_map(&ns, &format!("cm-{i:02}"), "1", true))
        .collect();
    text.extend((0..100).map(|i| config_map(&ns, &format!("other-{i:03}"), "x", false)));
    env.kubectl_apply_text(&text.join("\n"), &[]);
    env.kubectl_ok(&[
        "label",
        "configmap",
        "cm-05",
        "-n",
        &ns,
        &format!("{RELEASE_NAME}-"),
    ]);
    env.kubectl_ok(&["delete", "configmap", "cm-19", "-n", &ns]);
    let (client, requests) = crate::support::recording_client(&env.kubeconfig).await;
    let applier = Applier::new(client, 4);
    let wanted = |range: std::ops::Range<usize>| -> Vec<Object> {
        range
            .map(|i| {
                Object(
                    serde_json::from_str(&config_map(&ns, &format!("cm-{i:02}"), "1", true))
                        .unwrap(),
                )
            })
            .collect()
    };
    let (applier, requests, ns_ref) = (&applier, &requests, ns.as_str());
    let expected: Vec<String> = (0..19).map(|i| format!("cm-{i:02}")).collect();
    let expected = &expected;
    let sent = eventually(
        "the watch cache to hold the label removal and the deletion",
        Duration::from_secs(10),
        || async move {
            let (names, sent) = read_config_maps(applier, requests, ns_ref, wanted(0..20)).await;
            (&names == expected).then_some(sent)
        },
    )
    .await;
    let selector = "labelSelector=convoy.kumodo.io%2Frelease%3Dweb%2Cconvoy.kumodo.io%2Frelease-namespace%3DNS";
    let mut sent = sent;
    sent.sort();
    assert_eq!(
        sent,
        [
            "GET /api/v1/namespaces/NS/configmaps/cm-05?&resourceVersion=0".to_string(),
            "GET /api/v1/namespaces/NS/configmaps/cm-19?&resourceVersion=0".to_string(),
            format!(
                "GET /api/v1/namespaces/NS/configmaps?&{selector}&resourceVersion=0&resourceVersionMatch=NotOlderThan"
            ),
        ]
    );
    // 17 of 20 without the labels: the whole kind, after the labelled LIST.
    for i in 20..37 {
        env.kubectl_ok(&[
            "label",
            "configmap",
            &format!("cm-{i:02}"),
            "-n",
            &ns,
            &format!("{RELEASE_NAME}-"),
        ]);
    }
    let expected: Vec<String> = (20..40).map(|i| format!("cm-{i:02}")).collect();
    let expected = &expected;
    let sent = eventually(
        "the watch cache to hold the label removals",
        Duration::from_secs(10),
        || async move {
            let (names, sent) = read_config_maps(applier, requests, ns_ref, wanted(20..40)).await;
            let unlabelled = &names == expected && sent.len() == 2;
            unlabelled.then_some(sent)
        },
    )
    .await;
    assert_eq!(
        sent,
        [
            format!("GET /api/v1/namespaces/NS/configmaps?&{selector}&resourceVersion=0&resourceVersionMatch=NotOlderThan"),
            "GET /api/v1/namespaces/NS/configmaps?&resourceVersion=0&resourceVersionMatch=NotOlderThan".to_string(),
        ]
    );
}

/// One watch-cache read of `objects`: the names found, and the requests for ConfigMaps it sent
/// (the namespace written NS).
async fn read_config_maps(
    applier: &convoy::engine::apply::Applier,
    requests: &std::sync::Mutex<Vec<String>>,
    ns: &str,
    objects: Vec<convoy::engine::render::Object>,
) -> (Vec<String>, Vec<String>) {
    requests.lock().unwrap().clear();
    let live = applier
        .live_objects_as(&objects, convoy::engine::apply::Freshness::ServerWatchCache)
        .await
        .unwrap();
    let mut names: Vec<String> = live.keys().map(|k| k.name.clone()).collect();
    names.sort();
    let sent: Vec<String> = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.contains("/configmaps"))
        .map(|r| r.replace(ns, "NS"))
        .collect();
    (names, sent)
}

/// A read of the latest state of 20 objects not created yet, beside 600 others of the kind
/// listed before them: one LIST of 40, then a metadata scan that goes on from where that LIST
/// stopped (its continue token, no resourceVersion), and no GET of the 20, which the scan
/// shows absent.
#[tokio::test]
async fn a_latest_read_beside_many_others_scans_on_from_where_its_list_stopped() {
    use convoy::engine::apply::Applier;
    use convoy::engine::render::Object;
    use futures::StreamExt;
    let env = TestEnv::new("live-scan").await;
    let ns = env.namespace.clone();
    let api: kube::Api<ConfigMap> = kube::Api::namespaced(env.client.clone(), &ns);
    futures::stream::iter(0..600)
        .map(|i| {
            let (api, ns) = (api.clone(), ns.clone());
            async move {
                let cm: ConfigMap =
                    serde_json::from_str(&config_map(&ns, &format!("a-other-{i:03}"), "x", false))
                        .unwrap();
                api.create(&Default::default(), &cm).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let (client, requests) = crate::support::recording_client(&env.kubeconfig).await;
    let applier = Applier::new(client, 4);
    let objects: Vec<Object> = (0..20)
        .map(|i| {
            Object(
                serde_json::from_str(&config_map(&ns, &format!("cm-{i:02}"), "1", true)).unwrap(),
            )
        })
        .collect();
    let live = applier.live_objects(&objects).await.unwrap();
    assert!(live.is_empty(), "{:?}", live.keys().collect::<Vec<_>>());
    let sent: Vec<String> = requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.contains("/configmaps"))
        .map(|r| {
            // The continue token is opaque: only that there is one.
            let r = r.replace(&ns, "NS");
            match r.split_once("&continue=") {
                Some((head, _)) => format!("{head}&continue=TOKEN"),
                None => r,
            }
        })
        .collect();
    assert_eq!(
        sent,
        [
            "GET /api/v1/namespaces/NS/configmaps?&limit=40",
            "GET /api/v1/namespaces/NS/configmaps?&limit=100&continue=TOKEN",
            "GET /api/v1/namespaces/NS/configmaps?&limit=500&continue=TOKEN",
        ]
    );
}
