//! Lifecycle hooks: where their workloads run and how their state is read.
//!
//! Spec: health-loop.txt "Hook polling"; DESIGN.md "pollHookWorkload". A hook's workload is a
//! Job (or a Pod) in the target cluster, in the Release's target namespace.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Api, Client};

use crate::engine::api::{Hook, HookEntry, HookPhase, HookState, Release};
use crate::engine::duration::parse_duration;

/// A hook's timeout when it names none.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(600);

/// The namespace hook workloads run in: `spec.targetNamespace`, else the Release's own.
pub fn workload_namespace(release: &Release) -> String {
    release
        .spec
        .target_namespace
        .clone()
        .unwrap_or_else(|| release.metadata.namespace.clone().unwrap_or_default())
}

/// The hook of `release` with this name and phase.
pub fn find_hook<'a>(release: &'a Release, name: &str, phase: HookPhase) -> Option<&'a Hook> {
    release
        .spec
        .lifecycle
        .as_ref()?
        .hooks
        .iter()
        .find(|h| h.name == name && h.phase == phase)
}

/// A hook's timeout.
pub fn hook_timeout(hook: Option<&Hook>) -> Duration {
    hook.and_then(|h| h.timeout.as_deref())
        .and_then(|t| parse_duration(t).ok())
        .unwrap_or(DEFAULT_HOOK_TIMEOUT)
}

/// Whether a hook entry needs polling: it has a workload and either never finished, or was
/// armed again after it finished.
pub fn needs_poll(entry: &HookEntry) -> bool {
    entry.workload_name.is_some()
        && match (&entry.finished_at, &entry.created_at) {
            (None, _) => true,
            (Some(finished), Some(created)) => created.0 > finished.0,
            (Some(_), None) => false,
        }
}

/// The state of a hook workload and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Polled {
    pub state: HookState,
    pub message: String,
}

/// `pollHookWorkload`: a Job with `Complete` → Succeeded, `Failed` → Failed; a Pod in phase
/// Succeeded/Failed likewise; a missing workload → Failed ("not found"); otherwise Running,
/// or Failed once `now − createdAt ≥ timeout`.
pub async fn poll_hook_workload(
    client: &Client,
    namespace: &str,
    entry: &HookEntry,
    hook: Option<&Hook>,
    now: &Time,
) -> Result<Polled, kube::Error> {
    let name = entry.workload_name.clone().unwrap_or_default();
    let is_pod = hook.is_some_and(|h| h.pod.is_some() && h.job.is_none());
    let finished = if is_pod {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        match api.get_opt(&name).await? {
            None => Some(Polled {
                state: HookState::Failed,
                message: format!("Pod {name} not found"),
            }),
            Some(pod) => match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Succeeded") => Some(Polled {
                    state: HookState::Succeeded,
                    message: format!("Pod {name} succeeded"),
                }),
                Some("Failed") => Some(Polled {
                    state: HookState::Failed,
                    message: format!("Pod {name} failed{}", termination_message_of_pod(&pod)),
                }),
                _ => None,
            },
        }
    } else {
        let api: Api<Job> = Api::namespaced(client.clone(), namespace);
        match api.get_opt(&name).await? {
            None => Some(Polled {
                state: HookState::Failed,
                message: format!("Job {name} not found"),
            }),
            Some(job) => {
                let conditions = job
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                let has = |t: &str| {
                    conditions
                        .iter()
                        .any(|c| c.type_ == t && c.status == "True")
                };
                if has("Complete") {
                    Some(Polled {
                        state: HookState::Succeeded,
                        message: format!("Job {name} completed"),
                    })
                } else if has("Failed") {
                    let reason = conditions
                        .iter()
                        .find(|c| c.type_ == "Failed")
                        .and_then(|c| c.message.clone().or(c.reason.clone()))
                        .unwrap_or_default();
                    Some(Polled {
                        state: HookState::Failed,
                        message: format!("Job {name} failed: {reason}"),
                    })
                } else {
                    None
                }
            }
        }
    };
    if let Some(done) = finished {
        return Ok(done);
    }
    let timeout = hook_timeout(hook);
    let elapsed = entry
        .created_at
        .as_ref()
        .map(|c| Duration::from_secs((now.0.as_second() - c.0.as_second()).max(0) as u64))
        .unwrap_or_default();
    Ok(if elapsed >= timeout {
        Polled {
            state: HookState::Failed,
            message: format!(
                "timeout: {} still running after {}",
                name,
                crate::engine::duration::human(timeout)
            ),
        }
    } else {
        Polled {
            state: HookState::Running,
            message: format!(
                "{name} running for {}",
                crate::engine::duration::human(elapsed)
            ),
        }
    })
}

fn termination_message_of_pod(pod: &Pod) -> String {
    let statuses = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    let messages: Vec<String> = statuses
        .iter()
        .filter_map(|s| s.state.as_ref()?.terminated.as_ref()?.message.clone())
        .map(|m| {
            m.lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" / ")
        })
        .collect();
    if messages.is_empty() {
        String::new()
    } else {
        format!(": {}", messages.join("; "))
    }
}
