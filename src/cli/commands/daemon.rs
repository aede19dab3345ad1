//! `convoy daemon`: run the controller and observer loops.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::cli::GlobalArgs;
use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::daemon::{DaemonConfig, Role, run};
use crate::engine::connect::{KubeconfigSource, load_config};
use crate::engine::source::Cache;
use crate::engine::source::allowed_urls::AllowedUrls;

/// Which loops to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// The Release controller and the Cluster and source controllers.
    Controller,
    /// The drift loop and the health loop.
    Observer,
    /// Everything in one process.
    All,
}

/// Run convoy in a cluster: the Release controller and the observer's drift and health loops.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy daemon                                   # every loop, one process\n  \
convoy daemon --role controller --shards 2      # a sharded controller replica\n  \
convoy daemon --role observer --listen 0.0.0.0:8081\n\n\
Endpoints: /healthz, /readyz (once caches synced), /metrics (Prometheus).\n\
SIGTERM or Ctrl-C: finish the passes in flight, release the Leases, exit 0.")]
pub struct DaemonArgs {
    /// Which loops to run.
    #[arg(long, value_enum, default_value_t = RoleArg::All)]
    pub role: RoleArg,
    /// Number of shards to split Clusters into (0: no sharding, this replica does everything).
    #[arg(long, default_value_t = 0)]
    pub shards: u32,
    /// Namespace of the shard Leases.
    #[arg(long, default_value = "convoy-system", env = "POD_NAMESPACE")]
    pub lease_namespace: String,
    /// This replica's identity in the Leases (default: hostname and pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a Lease lasts without renewal.
    #[arg(long, default_value = "15s", value_parser = crate::engine::duration::parse_duration)]
    pub lease_duration: Duration,
    /// Address of /healthz, /readyz and /metrics.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Workers per loop.
    #[arg(long, default_value_t = 4)]
    pub workers: usize,
    /// Requests in flight per apply, dry run and prune.
    #[arg(long, default_value_t = crate::engine::apply::DEFAULT_CONCURRENCY)]
    pub concurrency: usize,
    /// Where fetched sources are cached.
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// How long fetched content no Release uses stays in the cache (the trees of older
    /// commits, the mirrors of deleted sources); what is used stays. At least the render and
    /// fetch timeouts.
    #[arg(long, default_value = "1h", value_parser = crate::engine::duration::parse_duration)]
    pub cache_retention: Duration,
    /// Watch only these namespaces (comma-separated or repeated; default: all).
    #[arg(long = "watch-namespace", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,
    /// Where renders and history are kept: kubernetes (Secrets in the Lease namespace),
    /// kubernetes:NAMESPACE, dir:PATH, or none (no pins, rollbacks or history).
    #[arg(long, default_value = "kubernetes", value_parser = clap::value_parser!(crate::engine::store::StoreSpec))]
    pub render_store: crate::engine::store::StoreSpec,
    /// How often every Release is looked at again even without events.
    #[arg(long, default_value = "10m", value_parser = crate::engine::duration::parse_duration)]
    pub resync: Duration,
    /// Let GitRepositories name file:// URLs (local paths on the daemon's machine; never
    /// convoy's own cache).
    #[arg(long)]
    pub allow_file_urls: bool,
    /// Fetch sources only from URLs under this prefix (repeatable; e.g.
    /// https://github.com/my-org/, oci://ghcr.io/my-org/, git@github.com:my-org/ is
    /// ssh://github.com/my-org/): source objects' URLs, the chart URLs a Helm repository's
    /// index names and its redirects (git follows none). A registry is trusted with its token
    /// endpoint and blob storage; kustomize remote bases are refused. Default: any URL.
    #[arg(long, value_name = "PREFIX", value_parser = parse_source_prefix)]
    pub allow_source_url: Vec<String>,
    /// The deadline of one source fetch (git, a chart repository, an OCI registry).
    #[arg(long, default_value = "2m", value_parser = crate::engine::duration::parse_duration)]
    pub fetch_timeout: Duration,
    /// The deadline of one render (helm template, kustomize build); the tool is killed past it.
    #[arg(long, default_value = "2m", value_parser = crate::engine::duration::parse_duration)]
    pub render_timeout: Duration,
    /// How long SIGTERM waits for the passes in flight before it cancels them (keep it under
    /// the Pod's terminationGracePeriodSeconds).
    #[arg(long, default_value = "20s", value_parser = crate::engine::duration::parse_duration)]
    pub shutdown_grace: Duration,
    #[command(flatten)]
    pub tenancy: crate::cli::tenancy_args::TenancyArgs,
}

pub(crate) fn parse_source_prefix(prefix: &str) -> Result<String, String> {
    AllowedUrls::new(&[prefix.to_string()])
        .map(|_| prefix.to_string())
        .map_err(|e| e.0)
}

pub async fn run_daemon(global: &GlobalArgs, args: DaemonArgs) -> CommandResult {
    // A fetch writes into the cache and a render reads its source's tree from it: nothing
    // they use may go while they run.
    let longest = args.render_timeout.max(args.fetch_timeout);
    if args.cache_retention < longest {
        let (flag, what) = if args.render_timeout >= args.fetch_timeout {
            (
                "--render-timeout",
                "a render reads its source from the cache",
            )
        } else {
            ("--fetch-timeout", "a fetch writes into the cache")
        };
        return Err(CliError::usage(format!(
            "--cache-retention {} is shorter than {flag} {}: {what} for up to that long; give --cache-retention at least {}",
            crate::engine::duration::human(args.cache_retention),
            crate::engine::duration::human(longest),
            crate::engine::duration::human(longest),
        )));
    }
    let config = load_config(&KubeconfigSource {
        path: global.kubeconfig.clone(),
        context: global.context.clone(),
    })
    .await
    .map_err(|e| CliError::new(ExitStatus::Unreachable, e))?;
    let identity = args.identity.unwrap_or_else(|| {
        let host = std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "convoy".into());
        format!("{host}-{}", std::process::id())
    });
    let daemon = DaemonConfig {
        role: match args.role {
            RoleArg::Controller => Role::Controller,
            RoleArg::Observer => Role::Observer,
            RoleArg::All => Role::All,
        },
        shards: args.shards,
        lease_namespace: args.lease_namespace,
        identity,
        lease_duration: args.lease_duration,
        listen: args.listen,
        workers: args.workers,
        concurrency: args.concurrency,
        cache_dir: args.cache_dir.unwrap_or_else(Cache::default_root),
        cache_retention: args.cache_retention,
        resync: args.resync,
        namespaces: args.watch_namespaces,
        render_store: args.render_store,
        tenancy: args.tenancy.tenancy()?,
        sources: crate::engine::source::SourcePolicy {
            allow_file_urls: args.allow_file_urls,
            allowed_urls: AllowedUrls::new(&args.allow_source_url)
                .map_err(|e| CliError::usage(e.0))?,
            fetch_timeout: args.fetch_timeout,
            detached: Some(crate::engine::source::Detached::DAEMON),
        },
        render_timeout: args.render_timeout,
        api_timeout: global.request_timeout,
        shutdown_grace: args.shutdown_grace,
    };
    run(config, daemon)
        .await
        .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
    Ok(ExitStatus::Success)
}
