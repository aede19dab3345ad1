//! The deadline of one API call (`--request-timeout`, `connect::DEFAULT_API_TIMEOUT`), on
//! a control plane of the test's own (its API server is stopped for a moment).

use std::time::{Duration, Instant};

use convoy::engine::connect::{Connection, KubeconfigSource};

use crate::support::ControlPlane;

/// A call's deadline counts from when it is sent. A pooled connection that sat idle for most
/// of the deadline does not shorten the next call's: without `reset_reader_on_write`, kube's
/// read timeout runs from the connection's last read, and an answer that takes 4 s after an
/// idle of 3 s would fail a 6 s deadline.
#[tokio::test]
async fn a_call_on_a_connection_that_sat_idle_has_its_whole_deadline() {
    const DEADLINE: Duration = Duration::from_secs(6);
    let plane = ControlPlane::own_bare("idle", &["--no-controllers"]);
    let conn = Connection::from_source(&KubeconfigSource {
        path: Some(plane.kubeconfig.clone()),
        context: None,
    })
    .await
    .unwrap()
    .with_api_timeout(DEADLINE)
    .unwrap();
    let version = || {
        let client = conn.client.clone();
        async move { client.apiserver_version().await }
    };
    version().await.expect("the first call");
    // The connection goes back to the pool and sits there for 3 s.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // The next call is sent while the API server is stopped, and answered about 4 s later:
    // inside its own deadline, though 7 s after the connection's last read.
    plane.signal("kube-apiserver", "STOP");
    let sent = Instant::now();
    let call = tokio::spawn(version());
    tokio::time::sleep(Duration::from_secs(4)).await;
    plane.signal("kube-apiserver", "CONT");
    let answer = call.await.unwrap();
    assert!(
        answer.is_ok(),
        "a call answered {:?} after it was sent failed its {DEADLINE:?} deadline: {answer:?}",
        sent.elapsed()
    );
}
