//! Sharding: each replica holds shards through `coordination.k8s.io/v1` Leases, and works
//! only on the Releases whose target cluster falls in a shard it holds.
//!
//! Design: DESIGN.md "Sharding". A Cluster's shard is a stable hash of its namespace/name
//! modulo the shard count (a Release without `spec.cluster` belongs to `<namespace>/`).
//! A replica takes a free shard at once while it holds none, a second one only after a lease
//! duration (so starting replicas spread out), and an expired one (its holder died).
//!
//! Ownership is checked against time at the moment of use, as client-go's leader election and
//! kubert do: every successful renewal makes a shard valid for the *renew deadline* (two
//! thirds of the lease duration) from the moment the renewal was sent, and `owns` answers no
//! once that has passed, whatever the lease loop is doing. A renewal that hangs (every Lease
//! call has a deadline too) or a process that was stopped (SIGSTOP) therefore loses the shard
//! before the lease expires and another replica may take it: nothing is applied by two
//! replicas at once.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::PostParams;
use kube::{Api, Client};

use crate::engine::api::Release;
use crate::engine::runtime::ShardGate;

/// The shard of a cluster key (stable across builds and platforms).
pub fn shard_of(cluster_key: &str, shards: u32) -> u32 {
    // The first 8 bytes of a SHA-256: every bit depends on every input byte. (FNV-1a modulo
    // a power of two, used before, kept only the parity of the key's odd bytes for 2 shards,
    // so keys that differ in two digits always landed together.)
    use sha2::Digest;
    let digest = sha2::Sha256::digest(cluster_key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(shards.max(1))) as u32
}

pub use crate::engine::cluster::cluster_key;

/// The shards this replica holds, shared with every loop's gate: each until when it is valid.
#[derive(Clone)]
pub struct HeldShards {
    held: Arc<RwLock<BTreeMap<u32, Hold>>>,
    shards: u32,
}

/// One shard's hold: valid until `until`; `epoch` counts the times it was taken (again), so a
/// lapse shorter than anyone's polling still shows as a new hold.
#[derive(Debug, Clone, Copy)]
struct Hold {
    until: Instant,
    epoch: u64,
}

impl HeldShards {
    pub fn new(shards: u32) -> Self {
        Self {
            held: Arc::default(),
            shards,
        }
    }

    /// The shards held and still valid now.
    pub fn held(&self) -> BTreeSet<u32> {
        self.holds().into_keys().collect()
    }

    /// The shards held and still valid now, each with the number of times it was taken: a
    /// shard whose number changed was lost and taken again in between.
    pub fn holds(&self) -> BTreeMap<u32, u64> {
        let now = Instant::now();
        self.read()
            .iter()
            .filter(|(_, hold)| hold.until > now)
            .map(|(shard, hold)| (*shard, hold.epoch))
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<u32, Hold>> {
        crate::engine::locks::read(&self.held)
    }

    /// Hold `shard` until `until`, or (`None`) not at all.
    fn set(&self, shard: u32, until: Option<Instant>) {
        let mut g = crate::engine::locks::write(&self.held);
        let now = Instant::now();
        match until {
            Some(until) => {
                let epoch = match g.get(&shard) {
                    Some(hold) if hold.until > now => hold.epoch,
                    Some(hold) => hold.epoch + 1,
                    None => 1,
                };
                g.insert(shard, Hold { until, epoch });
            }
            None => {
                // The epoch is kept: a shard taken again later counts as a new hold.
                if let Some(hold) = g.get_mut(&shard) {
                    hold.until = now;
                }
            }
        }
    }

    /// Whether `shard` is held and valid at this moment.
    pub fn owns_shard(&self, shard: u32) -> bool {
        self.read()
            .get(&shard)
            .is_some_and(|hold| hold.until > Instant::now())
    }
}

impl ShardGate for HeldShards {
    fn owns(&self, release: &Release) -> bool {
        self.owns_key(&cluster_key(release))
    }

    fn owns_key(&self, cluster_key: &str) -> bool {
        self.owns_shard(shard_of(cluster_key, self.shards))
    }
}

/// Lease settings.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Leases are `<prefix>-shard-<n>`: one family per role, so a controller replica and an
    /// observer replica hold the same shard side by side.
    pub prefix: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
}

fn lease_name(prefix: &str, shard: u32) -> String {
    format!("{prefix}-shard-{shard}")
}

fn now_micro() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// How long after another replica's lease runs out this one looks at it again.
const EXPIRY_MARGIN: Duration = Duration::from_millis(100);

/// Keep leases until `shutdown`; then release them so another replica takes over at once.
pub async fn run_leases(
    client: Client,
    config: LeaseConfig,
    held: HeldShards,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let renew_every = config.duration / 3;
    // Renew deadline < lease duration: a shard is given up before anyone else may take it.
    let renew_deadline = config.duration * 2 / 3;
    let started = Instant::now();
    loop {
        // The next check comes at the renewal period, or when another replica's lease runs
        // out if that is sooner: a dead replica's shard is taken a moment after its lease
        // expires, not up to a renewal period later.
        let mut next = renew_every;
        for shard in 0..held.shards {
            let sent = Instant::now();
            let stepped = tokio::time::timeout(
                renew_deadline / 2,
                step(
                    &api,
                    &config,
                    shard,
                    held.held().len(),
                    started.elapsed() >= config.duration,
                ),
            )
            .await;
            match stepped {
                // Valid for the renew deadline from when the renewal was sent.
                Ok(Ok(Step::Held)) => held.set(shard, Some(sent + renew_deadline)),
                Ok(Ok(Step::Other { expires_in })) => {
                    held.set(shard, None);
                    if let Some(left) = expires_in {
                        next = next.min(left + EXPIRY_MARGIN);
                    }
                }
                Ok(Err(e)) => tracing::warn!(shard, "lease: {e}"),
                Err(_) => tracing::warn!(
                    shard,
                    "lease: no answer within {}s; the shard lapses unless a renewal succeeds in time",
                    (renew_deadline / 2).as_secs()
                ),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(next) => {}
            _ = shutdown.changed() => break,
        }
    }
    let release_all = async {
        for shard in held.held() {
            held.set(shard, None);
            if let Ok(Some(mut lease)) = api.get_opt(&lease_name(&config.prefix, shard)).await
                && lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.as_deref())
                    == Some(config.identity.as_str())
            {
                if let Some(spec) = lease.spec.as_mut() {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                }
                let _ = api
                    .replace(
                        &lease_name(&config.prefix, shard),
                        &PostParams::default(),
                        &lease,
                    )
                    .await;
            }
        }
    };
    // Releasing is a courtesy (the leases expire anyway): it may not hold up the exit.
    if tokio::time::timeout(renew_deadline, release_all)
        .await
        .is_err()
    {
        tracing::warn!("lease: could not release the leases in time; they expire by themselves");
    }
}

/// How a lease step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// This replica holds the shard.
    Held,
    /// It does not; another replica's lease on it runs out in `expires_in` (if known).
    Other { expires_in: Option<Duration> },
}

/// How long a lease has left from `now`; `None` once expired (or never renewed). Sub-second:
/// whole seconds made a dead replica's shard wait up to one more second.
fn remaining(spec: &LeaseSpec, default_secs: i32, now: jiff::Timestamp) -> Option<Duration> {
    let renewed = spec.renew_time.as_ref()?;
    let seconds = spec.lease_duration_seconds.unwrap_or(default_secs).max(0);
    let lease = Duration::from_secs(seconds as u64);
    // A renewal stamped ahead of this clock counts as just made.
    let age = Duration::try_from(now.duration_since(renewed.0)).unwrap_or(Duration::ZERO);
    lease.checked_sub(age).filter(|d| !d.is_zero())
}

/// One lease step for `shard`.
async fn step(
    api: &Api<Lease>,
    config: &LeaseConfig,
    shard: u32,
    holding: usize,
    patient: bool,
) -> Result<Step, kube::Error> {
    let name = lease_name(&config.prefix, shard);
    let duration_secs = config.duration.as_secs().max(1) as i32;
    let Some(mut lease) = api.get_opt(&name).await? else {
        if holding > 0 && !patient {
            return Ok(Step::Other { expires_in: None });
        }
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now_micro()),
                renew_time: Some(now_micro()),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Step::Held),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::Other { expires_in: None }),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    let remaining = remaining(&spec, duration_secs, jiff::Timestamp::now());
    let ours = holder.as_deref() == Some(config.identity.as_str());
    let take = if ours {
        true
    } else if holder.is_none() {
        holding == 0 || patient
    } else {
        remaining.is_none()
    };
    if !take {
        return Ok(Step::Other {
            expires_in: remaining.filter(|_| holder.is_some()),
        });
    }
    let mut new_spec = spec.clone();
    new_spec.renew_time = Some(now_micro());
    new_spec.lease_duration_seconds = Some(duration_secs);
    if !ours {
        new_spec.holder_identity = Some(config.identity.clone());
        new_spec.acquire_time = Some(now_micro());
        new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    lease.spec = Some(new_spec);
    // The resourceVersion read above makes this a compare-and-swap.
    match api.replace(&name, &PostParams::default(), &lease).await {
        Ok(_) => Ok(Step::Held),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Step::Other { expires_in: None }),
        // Unsure whether a renewal landed: the caller's renewal deadline decides.
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_owned_only_until_its_renew_deadline() {
        let held = HeldShards::new(2);
        held.set(1, Some(Instant::now() + Duration::from_secs(60)));
        held.set(0, Some(Instant::now() - Duration::from_millis(1)));
        assert!(held.owns_shard(1));
        assert!(!held.owns_shard(0), "a lapsed shard is not owned");
        assert_eq!(held.held(), BTreeSet::from([1]));
        held.set(1, None);
        assert!(!held.owns_shard(1));
    }

    /// A lapse between two looks at the held shards (a renewal that came late, then one that
    /// succeeded) is a new hold: the takeover's passes run again for it.
    #[test]
    fn a_shard_lapsed_and_taken_again_is_a_new_hold() {
        let held = HeldShards::new(2);
        let later = || Some(Instant::now() + Duration::from_secs(60));
        held.set(0, later());
        let first = held.holds();
        held.set(0, later());
        assert_eq!(held.holds(), first, "a renewal in time is the same hold");
        held.set(0, Some(Instant::now() - Duration::from_millis(1)));
        held.set(0, later());
        assert_ne!(
            held.holds()[&0],
            first[&0],
            "lapsed, then renewed: a new hold"
        );
        let second = held.holds();
        held.set(0, None);
        assert!(held.holds().is_empty());
        held.set(0, later());
        assert_ne!(
            held.holds()[&0],
            second[&0],
            "given up, then taken: a new hold"
        );
    }

    #[test]
    fn a_lease_expires_to_the_millisecond_of_its_duration() {
        let renewed: jiff::Timestamp = "2026-12-02T10:00:00.250Z".parse().unwrap();
        let spec = LeaseSpec {
            renew_time: Some(MicroTime(renewed)),
            lease_duration_seconds: Some(15),
            ..Default::default()
        };
        let at = |s: &str| remaining(&spec, 15, s.parse().unwrap());
        assert_eq!(
            at("2026-12-02T10:00:15.000Z"),
            Some(Duration::from_millis(250))
        );
        assert_eq!(at("2026-12-02T10:00:15.300Z"), None, "expired");
        assert_eq!(
            at("2026-12-02T09:59:59.000Z"),
            Some(Duration::from_secs(15)),
            "a renewal from a clock ahead counts as just made"
        );
        let never = LeaseSpec::default();
        assert_eq!(remaining(&never, 15, renewed), None);
    }

    #[test]
    fn the_shard_of_a_cluster_is_stable_and_in_range() {
        for key in ["a/", "b/x", "team-1/eu-west", "team-2/eu-west"] {
            assert!(shard_of(key, 3) < 3);
        }
        assert_eq!(shard_of("anything", 1), 0);
        // Pinned values: a change here moves clusters to other shards.
        assert_eq!(
            [
                shard_of("apps/prod", 1000),
                shard_of("apps/", 2),
                shard_of("team-a/eu", 3)
            ],
            [667, 1, 1]
        );
    }

    #[test]
    fn keys_that_differ_in_two_characters_spread_over_two_shards() {
        // Names as tests and people make them: a counter and an attempt number moving
        // together (the parity of odd bytes never changes).
        let shards: Vec<u32> = (0..40)
            .map(|i| shard_of(&format!("shard{}-123-{}/", i % 10, i % 10 + 10), 2))
            .collect();
        let ones = shards.iter().filter(|s| **s == 1).count();
        assert!((8..=32).contains(&ones), "{shards:?}");
        let spread: BTreeSet<u32> = (0..50).map(|i| shard_of(&format!("ns-{i}/"), 2)).collect();
        assert_eq!(spread.len(), 2);
    }
}
