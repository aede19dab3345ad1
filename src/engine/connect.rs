//! Connecting to a cluster: from a kubeconfig file, kubeconfig bytes (a `Cluster`'s Secret) or
//! the environment (`KUBECONFIG`, then in-cluster).
//!
//! A [`Connection`] keeps the server address next to the client, so every "cannot reach" error
//! can say which address it tried, and who it acts as, so a connection can be derived that
//! impersonates a Release's ServiceAccount (tenancy) and caches can be keyed by identity.
//!
//! A kubeconfig from a `Cluster`'s Secret is a tenant's input: [`KubeconfigPolicy`] refuses
//! what would make convoy run a command (exec and auth-provider plugins) or read its own
//! files (token, certificate and key paths), and TLS without verification, unless the
//! operator allows them.

use crate::engine::env_proxy;
use crate::engine::source::allowed_urls::AllowedUrls;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// Why a connection could not be made or used.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig could not be read or has no usable context.
    #[error("cannot load the kubeconfig{}", path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Kubeconfig {
        path: Option<PathBuf>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig file named does not exist (or cannot be read).
    #[error("cannot read the kubeconfig {}: {reason}; give --kubeconfig (or KUBECONFIG) a kubeconfig file", path.display())]
    KubeconfigFile { path: PathBuf, reason: String },
    /// Neither a kubeconfig nor an in-cluster service account was found.
    #[error("no kubeconfig found: set --kubeconfig or KUBECONFIG, or run inside a cluster")]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be built from a valid config (TLS material, proxy).
    #[error("cannot build a client for {server}")]
    Client {
        server: String,
        #[source]
        source: kube::Error,
    },
    /// The server did not answer.
    #[error("cannot reach the API server at {server}")]
    Unreachable {
        server: String,
        #[source]
        source: kube::Error,
    },
    /// The environment names a proxy convoy cannot use.
    #[error(transparent)]
    Proxy(crate::engine::env_proxy::EnvProxyError),
    /// A kubeconfig from a Secret asks for something the policy refuses.
    #[error("the kubeconfig {0}")]
    Refused(String),
    /// A Release names a ServiceAccount that cannot be one (empty names are unset ones).
    #[error(
        "spec.serviceAccountName {0:?} is not a ServiceAccount name (lower-case letters, digits, '-' and '.', at most 253)"
    )]
    ServiceAccount(String),
}

impl crate::engine::error::Categorized for ConnectError {
    fn category(&self) -> crate::engine::error::Category {
        use crate::engine::error::Category;
        match self {
            ConnectError::Unreachable { .. } => Category::Unreachable,
            ConnectError::Client { source, .. } => crate::engine::error::kube_category(source),
            ConnectError::Kubeconfig { .. }
            | ConnectError::KubeconfigFile { .. }
            | ConnectError::Infer(_) => Category::Invalid,
            ConnectError::Refused(_) => Category::Refused,
            ConnectError::Proxy(_) => Category::Invalid,
            ConnectError::ServiceAccount(_) => Category::Invalid,
        }
    }
}

/// What a kubeconfig held in a Secret (a `Cluster`'s) may ask for. By default: inline data
/// only. Flux's `--insecure-kubeconfig-exec` and `--insecure-kubeconfig-tls` are the models.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeconfigPolicy {
    /// Exec credential plugins and auth-provider plugins (they run commands as convoy).
    pub allow_exec: bool,
    /// `insecure-skip-tls-verify`.
    pub allow_insecure_tls: bool,
    /// The API servers it may name (`--allow-cluster-server`; none: any). Whoever writes a
    /// Cluster's Secret otherwise chooses where convoy, with its network reach, sends
    /// requests whose bodies the Release's source writes.
    pub allowed_servers: AllowedUrls,
}

impl KubeconfigPolicy {
    /// Refuse what `kubeconfig` asks for beyond the policy, naming the field.
    pub fn check(&self, kubeconfig: &Kubeconfig) -> Result<(), ConnectError> {
        let refuse = |what: String| Err(ConnectError::Refused(what));
        for named in &kubeconfig.auth_infos {
            let Some(user) = &named.auth_info else {
                continue;
            };
            let at = |field: &str| format!("users[{}].user.{field}", named.name);
            if !self.allow_exec && user.exec.is_some() {
                return refuse(format!(
                    "sets {}: exec credential plugins are refused (--insecure-kubeconfig-exec allows them)",
                    at("exec")
                ));
            }
            if !self.allow_exec && user.auth_provider.is_some() {
                return refuse(format!(
                    "sets {}: auth-provider plugins are refused (--insecure-kubeconfig-exec allows them)",
                    at("auth-provider")
                ));
            }
            for (field, set) in [
                ("tokenFile", user.token_file.is_some()),
                ("client-certificate", user.client_certificate.is_some()),
                ("client-key", user.client_key.is_some()),
            ] {
                if set {
                    return refuse(format!(
                        "sets {}: file paths are refused, a kubeconfig in a Secret must carry its credentials inline (token, client-certificate-data, client-key-data)",
                        at(field)
                    ));
                }
            }
        }
        for named in &kubeconfig.clusters {
            let Some(cluster) = &named.cluster else {
                continue;
            };
            let at = |field: &str| format!("clusters[{}].cluster.{field}", named.name);
            if cluster.certificate_authority.is_some() {
                return refuse(format!(
                    "sets {}: file paths are refused, use certificate-authority-data",
                    at("certificate-authority")
                ));
            }
            if !self.allow_insecure_tls && cluster.insecure_skip_tls_verify == Some(true) {
                return refuse(format!(
                    "sets {}: TLS without verification is refused (--insecure-kubeconfig-tls allows it)",
                    at("insecure-skip-tls-verify")
                ));
            }
            if self.allowed_servers.is_restricted() {
                // A proxy forwards where it is told, past the list; a TLS server name other
                // than the host's reaches another backend behind the same address (a load
                // balancer routing by SNI), with a CA the kubeconfig brings.
                let named = |v: &Option<String>| v.as_deref().is_some_and(|v| !v.is_empty());
                if named(&cluster.proxy_url) {
                    return refuse(format!(
                        "sets {}: a proxy is refused while convoy restricts Cluster API servers (--allow-cluster-server)",
                        at("proxy-url")
                    ));
                }
                if named(&cluster.tls_server_name) {
                    return refuse(format!(
                        "sets {}: another TLS server name is refused while convoy restricts Cluster API servers (--allow-cluster-server); name the server by the host its certificate names",
                        at("tls-server-name")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Refuse a config whose server (as the client reads it) is not under the allowed
    /// prefixes. (A proxy the kubeconfig names is refused by [`KubeconfigPolicy::check`]; one
    /// from convoy's environment is the operator's.)
    pub fn check_destination(&self, config: &Config) -> Result<(), ConnectError> {
        self.allowed_servers
            .check_server("server", &config.cluster_url)
            .map_err(ConnectError::Refused)
    }
}

/// How long one API call may wait for the server (kube's read and write timeouts: a call whose
/// answer stalls this long fails with a timeout, which callers treat as unreachable). Watches
/// are long polls the server ends itself; they go through [`Connection::watch_client`].
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the server keeps one watch call open (kube's watcher asks for 290 s by default).
/// kube's watcher gives up on a watch stream that has said nothing for this long plus 5 s,
/// and starts it again from the last resourceVersion it saw. A connection that died without
/// a word (a NAT or load balancer dropped it, a peer vanished) is therefore noticed after
/// about a minute, not five: until then, what the watch feeds its cache is stale. The cost
/// is one watch request per watch and minute, from the server's watch cache.
pub const WATCH_TIMEOUT_SECS: u32 = 60;

/// Builds a client from a config (the daemon adds its request-counting layer).
pub type ClientFactory = Arc<dyn Fn(Config) -> Result<Client, kube::Error> + Send + Sync>;

/// Where to find the kubeconfig, as a user names it.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigSource {
    /// An explicit file; otherwise `KUBECONFIG`, `~/.kube/config`, then in-cluster.
    pub path: Option<PathBuf>,
    /// A context other than the current one.
    pub context: Option<String>,
}

/// A client, the address it talks to, and who it acts as.
#[derive(Clone)]
pub struct Connection {
    pub client: Client,
    pub server: String,
    /// The namespace of the kubeconfig context (or the service account), for commands that
    /// default to it.
    pub default_namespace: String,
    /// Who the client acts as beyond its credentials: empty, or `as <user>` when it
    /// impersonates, or the Cluster and credential version it came from. Caches of clients
    /// (appliers, discovery) are keyed by server and identity.
    pub identity: String,
    /// Who chose this identity (a Release's ServiceAccount, a Cluster's kubeconfig, or
    /// convoy): caches of clients hold a bounded number per holder (`engine::tenant_cache`).
    pub holder: crate::engine::tenant_cache::Holder,
    /// The same server and credentials without the per-call deadline, for watches (long
    /// polls that the server ends after its own timeout).
    pub watch_client: Client,
    /// The deadline of one call of `client`.
    pub api_timeout: Duration,
    config: Config,
    factory: ClientFactory,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("identity", &self.identity)
            .finish()
    }
}

/// A client whose calls have `api_timeout` as their deadline, and one for watches whose
/// reads may wait twice the watch timeout.
fn build_clients(
    factory: &ClientFactory,
    config: &Config,
    api_timeout: Duration,
    server: &str,
) -> Result<(Client, Client), ConnectError> {
    let error = |source| ConnectError::Client {
        server: server.to_string(),
        source,
    };
    let mut calls = config.clone();
    // The connection (TCP and TLS handshake), each read and each write: a server that
    // accepts and says nothing is given up on after `api_timeout` at every step.
    calls.connect_timeout = Some(api_timeout);
    calls.read_timeout = Some(api_timeout);
    calls.write_timeout = Some(api_timeout);
    // The read deadline counts from each request sent, not from when its pooled connection
    // last read: a connection that sat idle for most of `api_timeout` would otherwise give
    // its next answer only what was left of it.
    calls.reset_reader_on_write = true;
    let client = factory(calls).map_err(error)?;
    // A watch reads something at least every minute while its connection lives: the server
    // ends it within `WATCH_TIMEOUT_SECS` and sends a bookmark about every minute. Twice that
    // without a byte is a dead connection: a watch or list sent on a pooled connection that
    // died without a word fails then, instead of waiting forever.
    let mut watches = config.clone();
    watches.connect_timeout = Some(api_timeout);
    watches.read_timeout = Some(Duration::from_secs(2 * u64::from(WATCH_TIMEOUT_SECS)));
    watches.reset_reader_on_write = true;
    let watch_client = factory(watches).map_err(error)?;
    Ok((client, watch_client))
}

impl Connection {
    /// Connect as a user's kubeconfig says. Makes no request yet.
    pub async fn from_source(source: &KubeconfigSource) -> Result<Self, ConnectError> {
        Self::from_config(load_config(source).await?)
    }
}

/// The client configuration a user's kubeconfig (or the environment) describes.
pub async fn load_config(source: &KubeconfigSource) -> Result<Config, ConnectError> {
    {
        let options = KubeConfigOptions {
            context: source.context.clone(),
            ..Default::default()
        };
        // KUBECONFIG naming one file is the same as --kubeconfig.
        let from_env = std::env::var_os("KUBECONFIG")
            .map(PathBuf::from)
            .filter(|p| !p.as_os_str().is_empty() && !p.to_string_lossy().contains(':'));
        let (config, deferred) = match source.path.as_ref().or(from_env.as_ref()) {
            Some(path) => {
                // One line for the commonest first-hour mistake, not kube's error chain (which
                // repeats the operating system's message).
                if let Err(e) = std::fs::metadata(path) {
                    let reason = match e.kind() {
                        std::io::ErrorKind::NotFound => "no such file".to_string(),
                        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
                        _ => e.to_string(),
                    };
                    return Err(ConnectError::KubeconfigFile {
                        path: path.clone(),
                        reason,
                    });
                }
                let mut kubeconfig =
                    Kubeconfig::read_from(path).map_err(|source| ConnectError::Kubeconfig {
                        path: Some(path.clone()),
                        source,
                    })?;
                let deferred = env_proxy::defer(&mut kubeconfig, options.context.as_deref());
                let config = Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|source| ConnectError::Kubeconfig {
                        path: Some(path.clone()),
                        source,
                    })?;
                (config, deferred)
            }
            None if source.context.is_some() => {
                let kubeconfig = |source| ConnectError::Kubeconfig { path: None, source };
                // No kubeconfig: kube names the context it cannot find.
                let mut read = read_default_kubeconfig()
                    .map_err(kubeconfig)?
                    .unwrap_or_default();
                let deferred = env_proxy::defer(&mut read, options.context.as_deref());
                let config = Config::from_custom_kubeconfig(read, &options)
                    .await
                    .map_err(kubeconfig)?;
                (config, deferred)
            }
            // The default kubeconfig, else the in-cluster environment, as kubectl goes: only
            // when there is no kubeconfig at all. A kubeconfig that is there but cannot be used
            // is an error, never a quiet move to the cluster a pod runs in (Config::infer's
            // way, which a CLI in a CI pod took to the wrong cluster).
            None => match read_default_kubeconfig() {
                Ok(Some(mut read)) => {
                    let deferred = env_proxy::defer(&mut read, options.context.as_deref());
                    let mut config = Config::from_custom_kubeconfig(read, &options)
                        .await
                        .map_err(|source| ConnectError::Kubeconfig { path: None, source })?;
                    // As Config::infer does.
                    config.apply_debug_overrides();
                    (config, deferred)
                }
                Ok(None) => (
                    Config::infer().await.map_err(ConnectError::Infer)?,
                    env_proxy::Deferred::default(),
                ),
                Err(source) => return Err(ConnectError::Kubeconfig { path: None, source }),
            },
        };
        with_env_proxy(config, deferred)
    }
}

/// The kubeconfig kubectl would read without `--kubeconfig`: the files a `KUBECONFIG` list
/// names that exist, merged, else `~/.kube/config`; `None` when there is none, or it is empty
/// (kubectl goes to the in-cluster environment then, and only then).
fn read_default_kubeconfig() -> Result<Option<Kubeconfig>, kube::config::KubeconfigError> {
    use kube::config::KubeconfigError;
    let missing = |e: &KubeconfigError| match e {
        KubeconfigError::FindPath => true,
        KubeconfigError::ReadConfig(e, _) => e.kind() == std::io::ErrorKind::NotFound,
        _ => false,
    };
    let listed: Vec<PathBuf> = std::env::var_os("KUBECONFIG")
        .map(|v| {
            std::env::split_paths(&v)
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default();
    let read = if listed.is_empty() {
        match Kubeconfig::read() {
            Ok(read) => Some(read),
            Err(e) if missing(&e) => None,
            Err(e) => return Err(e),
        }
    } else {
        // kubectl passes over a listed file that is not there.
        let mut merged: Option<Kubeconfig> = None;
        for path in listed {
            match Kubeconfig::read_from(&path) {
                Ok(next) => {
                    merged = Some(match merged {
                        Some(m) => m.merge(next)?,
                        None => next,
                    })
                }
                Err(e) if missing(&e) => {}
                Err(e) => return Err(e),
            }
        }
        merged
    };
    Ok(read.filter(|k| {
        k.current_context.is_some() || !k.clusters.is_empty() || !k.contexts.is_empty()
    }))
}

/// `config` with its kubeconfig's proxy, or else the environment's proxy for its server.
fn with_env_proxy(
    mut config: Config,
    deferred: env_proxy::Deferred,
) -> Result<Config, ConnectError> {
    env_proxy::choose(&mut config, deferred).map_err(ConnectError::Proxy)?;
    Ok(config)
}

/// The namespace of a ServiceAccount's username (`system:serviceaccount:NS:NAME`), or "".
pub fn service_account_namespace(user: &str) -> &str {
    user.strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default()
}

impl Connection {
    /// Connect with a kubeconfig held in memory (a `Cluster`'s Secret), as far as `policy`
    /// allows it; `identity` names where it came from (for caches keyed by identity).
    pub async fn from_kubeconfig_yaml(
        yaml: &str,
        policy: &KubeconfigPolicy,
        identity: String,
        holder: crate::engine::tenant_cache::Holder,
        api_timeout: Duration,
    ) -> Result<Self, ConnectError> {
        let mut kubeconfig = Kubeconfig::from_yaml(yaml)
            .map_err(|source| ConnectError::Kubeconfig { path: None, source })?;
        policy.check(&kubeconfig)?;
        let deferred = env_proxy::defer(&mut kubeconfig, None);
        let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| ConnectError::Kubeconfig { path: None, source })?;
        let config = with_env_proxy(config, deferred)?;
        policy.check_destination(&config)?;
        let mut conn = Self::from_config(config)?;
        conn.identity = identity;
        conn.holder = holder;
        if api_timeout != conn.api_timeout {
            conn = conn.with_api_timeout(api_timeout)?;
        }
        Ok(conn)
    }

    /// Wrap a config; convoy's clients are not throttled (kube-rs applies no client-side
    /// rate limit), so concurrent applies and dry runs run at the server's pace.
    pub fn from_config(config: Config) -> Result<Self, ConnectError> {
        Self::with_factory(config, Arc::new(Client::try_from))
    }

    /// Wrap a config whose clients `factory` builds (every derived connection uses it too).
    pub fn with_factory(config: Config, factory: ClientFactory) -> Result<Self, ConnectError> {
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_string();
        let default_namespace = config.default_namespace.clone();
        let (client, watch_client) =
            build_clients(&factory, &config, DEFAULT_API_TIMEOUT, &server)?;
        Ok(Self {
            client,
            server,
            default_namespace,
            identity: String::new(),
            holder: Default::default(),
            watch_client,
            api_timeout: DEFAULT_API_TIMEOUT,
            config,
            factory,
        })
    }

    /// The same connection with another deadline per API call.
    pub fn with_api_timeout(mut self, timeout: Duration) -> Result<Self, ConnectError> {
        let (client, watch_client) =
            build_clients(&self.factory, &self.config, timeout, &self.server)?;
        self.client = client;
        self.watch_client = watch_client;
        self.api_timeout = timeout;
        Ok(self)
    }

    /// The same server and credentials, acting as `user` (Kubernetes impersonation: the
    /// server checks that this connection may impersonate, then authorizes every request as
    /// `user`). A ServiceAccount's username gets its groups from the server.
    pub fn impersonating(&self, user: &str) -> Result<Self, ConnectError> {
        let mut config = self.config.clone();
        config.auth_info.impersonate = Some(user.to_string());
        config.auth_info.impersonate_groups = None;
        let (client, watch_client) =
            build_clients(&self.factory, &config, self.api_timeout, &self.server)?;
        Ok(Self {
            client,
            server: self.server.clone(),
            default_namespace: self.default_namespace.clone(),
            identity: format!("as {user}"),
            holder: crate::engine::tenant_cache::Holder::ServiceAccount {
                namespace: service_account_namespace(user).to_string(),
            },
            watch_client,
            api_timeout: self.api_timeout,
            config,
            factory: self.factory.clone(),
        })
    }

    /// The key of caches that hold something per client: server and identity.
    pub fn cache_key(&self) -> String {
        if self.identity.is_empty() {
            self.server.clone()
        } else {
            format!("{} {}", self.server, self.identity)
        }
    }

    /// Ask the server for its version: the cheapest proof that it answers.
    pub async fn server_version(
        &self,
    ) -> Result<k8s_openapi::apimachinery::pkg::version::Info, ConnectError> {
        self.client
            .apiserver_version()
            .await
            .map_err(|source| self.unreachable(source))
    }

    /// Turn a transport error into one that names this connection's server, and the proxy
    /// it goes through (where the trouble may be; its credentials are not shown).
    pub fn unreachable(&self, source: kube::Error) -> ConnectError {
        let server = match &self.config.proxy_url {
            Some(proxy) => format!(
                "{} through the proxy {}://{}",
                self.server,
                proxy.scheme_str().unwrap_or("http"),
                proxy
                    .authority()
                    .map(|a| a.as_str().rsplit('@').next().unwrap_or_default())
                    .unwrap_or_default()
            ),
            None => self.server.clone(),
        };
        ConnectError::Unreachable { server, source }
    }
}

/// Whether an error from the API means the server could not be reached at all (as opposed to
/// an answer such as 404 or 422).
pub fn is_unreachable(error: &kube::Error) -> bool {
    matches!(
        error,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_)
    )
}
