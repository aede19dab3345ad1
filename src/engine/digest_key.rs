//! The installation's digest key: every digest of Secret data convoy stores or prints is an
//! HMAC-SHA-256 under it, so equal values still compare equal within one installation but
//! nothing offline can test guesses against a digest (a 4-digit PIN's unkeyed SHA-256 falls
//! in a millisecond).
//!
//! `convoy install` creates the key once, as Secret [`KEY_SECRET`] in convoy's namespace
//! (never overwritten: a new key would make every recorded digest "changed"). The daemon and
//! the CLI read it; a process that cannot read it records no digest for a Secret (the object is
//! then compared by a dry run, never skipped) and shows only whether each value changed.

use std::sync::Mutex;

use crate::engine::locks::lock;
use std::time::{Duration, Instant};

use hmac::{KeyInit, Mac};
use k8s_openapi::api::core::v1::Secret;
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::Sha256;

/// The Secret that holds the key, in convoy's namespace.
pub const KEY_SECRET: &str = "convoy-digest-key";
/// Its data key.
const KEY_FIELD: &str = "key";
/// Prefix of a keyed digest (an old unkeyed one never equals it, so it reads as "changed"
/// once and is rewritten).
pub const KEYED_PREFIX: &str = "hmac:";

/// A key for HMAC-SHA-256. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct DigestKey([u8; 32]);

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(<redacted>)")
    }
}

impl DigestKey {
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// A fresh random key.
    pub fn generate() -> Result<Self, getrandom::Error> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)?;
        Ok(Self(bytes))
    }

    /// `hmac:` and the first `hex_chars` hex digits of HMAC-SHA-256(key, bytes).
    pub fn digest(&self, bytes: &[u8], hex_chars: usize) -> String {
        let mut mac = <hmac::Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .expect("HMAC takes a key of any length");
        mac.update(bytes);
        let full = hex::encode(mac.finalize().into_bytes());
        format!("{KEYED_PREFIX}{}", &full[..hex_chars.min(full.len())])
    }
}

/// A key of this process alone, for digests that are only compared within it (an inventory
/// written by a process that cannot read the installation's key): they reveal nothing, and a
/// later process sees them as "changed" once.
pub fn ephemeral() -> &'static DigestKey {
    static KEY: std::sync::OnceLock<DigestKey> = std::sync::OnceLock::new();
    KEY.get_or_init(|| {
        DigestKey::generate().unwrap_or_else(|_| {
            // No randomness at all: a key no one else holds (the address and time of this
            // process) still beats an unkeyed digest.
            let seed = format!("{:?}{:?}", std::time::SystemTime::now(), &KEY as *const _);
            let mut bytes = [0u8; 32];
            bytes.copy_from_slice(&<Sha256 as sha2::Digest>::digest(seed.as_bytes()));
            DigestKey(bytes)
        })
    })
}

/// Why the key could not be read or created.
#[derive(Debug, thiserror::Error)]
pub enum DigestKeyError {
    #[error("cannot read Secret {namespace}/{KEY_SECRET}")]
    Read {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("cannot create Secret {namespace}/{KEY_SECRET}")]
    Create {
        namespace: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("Secret {namespace}/{KEY_SECRET} has no 32-byte value under {KEY_FIELD:?}")]
    Invalid { namespace: String },
    #[error("cannot draw a random key")]
    Random(#[source] getrandom::Error),
}

/// Read the key from `namespace`; `None` when the Secret does not exist.
pub async fn load(client: &Client, namespace: &str) -> Result<Option<DigestKey>, DigestKeyError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api
        .get_opt(KEY_SECRET)
        .await
        .map_err(|source| DigestKeyError::Read {
            namespace: namespace.to_string(),
            source: Box::new(source),
        })?;
    let Some(secret) = secret else {
        return Ok(None);
    };
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(KEY_FIELD))
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let key: [u8; 32] = bytes.try_into().map_err(|_| DigestKeyError::Invalid {
        namespace: namespace.to_string(),
    })?;
    Ok(Some(DigestKey(key)))
}

/// Create the key in `namespace` unless it exists (never replaced). Returns whether it was
/// created.
pub async fn ensure(client: &Client, namespace: &str) -> Result<bool, DigestKeyError> {
    if load(client, namespace).await?.is_some() {
        return Ok(false);
    }
    let key = DigestKey::generate().map_err(DigestKeyError::Random)?;
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": KEY_SECRET,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "convoy", "app.kubernetes.io/part-of": "convoy"},
        },
        "type": "Opaque",
        "data": {KEY_FIELD: base64_of(&key.0)},
    }))
    .map_err(|_| DigestKeyError::Invalid {
        namespace: namespace.to_string(),
    })?;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), &secret).await {
        Ok(_) => Ok(true),
        // Another install got there first: theirs stays.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(source) => Err(DigestKeyError::Create {
            namespace: namespace.to_string(),
            source: Box::new(source),
        }),
    }
}

fn base64_of(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The key as a long-running process holds it: read once found, looked for again at most
/// once a minute while missing or unreadable.
pub struct KeyCell {
    client: Client,
    namespace: String,
    state: Mutex<(Option<DigestKey>, Option<Instant>)>,
}

/// How long a missing key is not asked for again.
const RETRY: Duration = Duration::from_secs(60);

impl KeyCell {
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            state: Mutex::new((None, None)),
        }
    }

    /// The key, if this process can read it.
    pub async fn get(&self) -> Option<DigestKey> {
        {
            let state = lock(&self.state);
            if let Some(key) = &state.0 {
                return Some(key.clone());
            }
            if state.1.is_some_and(|at| at.elapsed() < RETRY) {
                return None;
            }
        }
        let loaded = match load(&self.client, &self.namespace).await {
            Ok(key) => key,
            Err(e) => {
                tracing::debug!(
                    "Secret digests are unkeyed for now: {}",
                    crate::engine::error::chain(&e)
                );
                None
            }
        };
        let mut state = lock(&self.state);
        state.0 = loaded.clone();
        state.1 = Some(Instant::now());
        loaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_values_have_equal_digests_under_one_key_and_other_keys_differ() {
        let a = DigestKey::from_bytes([1; 32]);
        let b = DigestKey::from_bytes([2; 32]);
        assert_eq!(a.digest(b"1234", 12), a.digest(b"1234", 12));
        assert_ne!(a.digest(b"1234", 12), a.digest(b"1235", 12));
        assert_ne!(a.digest(b"1234", 12), b.digest(b"1234", 12));
        assert!(a.digest(b"x", 12).starts_with("hmac:"));
        assert_eq!(a.digest(b"x", 12).len(), "hmac:".len() + 12);
        assert_eq!(format!("{a:?}"), "DigestKey(<redacted>)");
    }
}
