//! `convoy install`: put convoy into a cluster (CRDs, RBAC, default health rules, the
//! daemon), or print what it would put there.

use std::time::Duration;

use clap::Args;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer, yaml_documents};
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api;
use crate::engine::install::{
    InstallError, InstallOptions, apply_objects, install_crds, install_manifests,
    refuse_other_install, tenant_manifests,
};

/// The image of a release build.
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/kumodo/convoy:", env!("CARGO_PKG_VERSION"));

/// Install convoy: CRDs, RBAC, the default health rules and the daemon's Deployments.
///
/// By default the daemon is locked down: it deploys each Release as a ServiceAccount of the
/// Release's namespace (spec.serviceAccountName, else convoy-deployer), which
/// `convoy install --tenant NS` creates with admin rights in NS only. --cluster-admin instead
/// lets the daemon deploy anything anywhere as itself: then whoever can create a Release or
/// push to its source can change the whole cluster.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy install --dry-run > convoy.yaml                  # everything, as YAML\n  \
convoy install --crds-only                              # just the API: render, diff, get\n  \
convoy install --wait                                   # then wait until the daemon runs\n  \
convoy install --tenant team-a                          # let team-a's Releases deploy in team-a\n  \
convoy install --image registry.local/convoy:dev -n convoy-system")]
pub struct InstallArgs {
    /// Install only the CRDs: enough for `convoy render`, `diff` and `get`. `convoy sync` also
    /// keeps its renders in convoy's namespace and digests Secrets with the installation's key,
    /// both of which a full install makes: after this alone, sync with `--render-store dir:PATH`
    /// (or `none`); each CLI process then digests Secrets with a key of its own, so Secrets are
    /// sent again at every sync.
    #[arg(long)]
    pub crds_only: bool,
    /// Print what would be installed instead of applying it.
    #[arg(long)]
    pub dry_run: bool,
    /// Image of the daemon.
    #[arg(long, default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// Give the daemon write access to every kind in every namespace and let Releases without
    /// a ServiceAccount act as convoy (anyone who can write a Release or its source then
    /// controls the cluster).
    #[arg(long, conflicts_with = "tenant")]
    pub cluster_admin: bool,
    /// Only set up namespace NS for a locked-down daemon: the convoy-deployer ServiceAccount,
    /// bound to the built-in admin role in NS.
    #[arg(long, value_name = "NS", conflicts_with = "crds_only")]
    pub tenant: Option<String>,
    /// After applying, wait until the daemon's Deployments are Available, then say what to
    /// do next.
    #[arg(long, conflicts_with_all = ["dry_run", "crds_only"])]
    pub wait: bool,
    /// How long to wait for the CRDs to become Established (and, with --wait, for the
    /// Deployments to become Available).
    #[arg(long, default_value = "2m", value_parser = crate::engine::duration::parse_duration)]
    pub timeout: Duration,
    /// When convoy is installed in another namespace, move its cluster-wide objects
    /// (ClusterRoles, bindings, admission policies) to this install; the other one then runs
    /// without them. Without it, such an install is refused and nothing is applied.
    #[arg(long = "move", conflicts_with_all = ["dry_run", "crds_only", "tenant"])]
    pub move_install: bool,
    /// Have the daemon fetch sources only from URLs under this prefix (repeatable; see
    /// `convoy daemon --allow-source-url`).
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["crds_only", "tenant"],
          value_parser = crate::cli::commands::daemon::parse_source_prefix)]
    pub allow_source_url: Vec<String>,
    /// Have the daemon connect only to Clusters whose API server is under this prefix
    /// (repeatable; see `convoy daemon --allow-cluster-server`).
    #[arg(long, value_name = "PREFIX", conflicts_with_all = ["crds_only", "tenant"],
          value_parser = crate::cli::tenancy_args::parse_cluster_server)]
    pub allow_cluster_server: Vec<String>,
}

pub async fn run(global: &GlobalArgs, args: InstallArgs, printer: &mut Printer) -> CommandResult {
    let options = InstallOptions {
        // `-n` names the daemon's namespace here; the CRDs are cluster-wide.
        namespace: global
            .namespace
            .clone()
            .unwrap_or_else(|| "convoy-system".to_string()),
        image: args.image.clone(),
        cluster_admin: args.cluster_admin,
        allowed_source_urls: args.allow_source_url.clone(),
        allowed_cluster_servers: args.allow_cluster_server.clone(),
    };
    if let Some(tenant) = &args.tenant {
        let objects = tenant_manifests(tenant);
        if args.dry_run {
            let text = yaml_documents(objects.iter())
                .map_err(|e| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e)))?;
            printer.print_data(&text).map_err(io_error)?;
            return Ok(ExitStatus::Success);
        }
        let conn = global.connect().await?;
        for name in apply_objects(&conn, &objects)
            .await
            .map_err(install_failed)?
        {
            printer.line(&format!("{name} applied")).map_err(io_error)?;
        }
        return Ok(ExitStatus::Success);
    }
    let rest = if args.crds_only {
        Vec::new()
    } else {
        install_manifests(&options)
    };
    if args.dry_run {
        print_all(printer, &rest)?;
        return Ok(ExitStatus::Success);
    }
    let conn = global.connect().await?;
    let failed = install_failed;
    if !args.crds_only {
        refuse_other_install(&conn, &options.namespace, args.move_install)
            .await
            .map_err(failed)?;
    }
    let installed = install_crds(&conn, args.timeout).await.map_err(failed)?;
    for crd in installed {
        printer
            .line(&format!(
                "customresourcedefinition/{} established",
                crd.name
            ))
            .map_err(io_error)?;
    }
    for name in apply_objects(&conn, &rest).await.map_err(failed)? {
        printer.line(&format!("{name} applied")).map_err(io_error)?;
    }
    if !args.crds_only {
        // The key of Secret digests: created once, never replaced (engine::digest_key).
        let created = crate::engine::digest_key::ensure(&conn.client, &options.namespace)
            .await
            .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
        if created {
            printer
                .line(&format!(
                    "Secret/{}/{} created",
                    options.namespace,
                    crate::engine::digest_key::KEY_SECRET
                ))
                .map_err(io_error)?;
        }
    }
    if args.wait {
        wait_for_daemon(&conn, &options.namespace, args.timeout, printer).await?;
        printer
            .line(&format!(
                "\nconvoy runs in {ns}. Next:\n  convoy install --tenant NS          # let Releases of namespace NS deploy there\n  kubectl apply -f release.yaml       # a GitRepository and a Release (README: Getting started)\n  convoy get -n NS -w                 # watch them converge\n  convoy check -n {ns}       # everything in order?",
                ns = options.namespace
            ))
            .map_err(io_error)?;
    }
    Ok(ExitStatus::Success)
}

/// Wait until the daemon's Deployments are Available, saying which ones it waits for.
async fn wait_for_daemon(
    conn: &crate::engine::connect::Connection,
    namespace: &str,
    timeout: Duration,
    printer: &mut Printer,
) -> Result<(), CliError> {
    use k8s_openapi::api::apps::v1::Deployment;
    let api: kube::Api<Deployment> = kube::Api::namespaced(conn.client.clone(), namespace);
    let deadline = tokio::time::Instant::now() + timeout;
    let available = |d: &Deployment| {
        d.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "Available" && c.status == "True")
            })
    };
    for name in crate::engine::check::DEPLOYMENTS {
        loop {
            match api.get_opt(name).await {
                Ok(Some(d)) if available(&d) => break,
                Ok(_) => {}
                Err(e) if crate::engine::connect::is_unreachable(&e) => {
                    return Err(CliError::new(ExitStatus::Unreachable, conn.unreachable(e)));
                }
                Err(e) => tracing::debug!(
                    "reading deployment {name}: {}",
                    crate::engine::error::chain(&e)
                ),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(CliError::new(
                    ExitStatus::No,
                    anyhow::anyhow!(
                        "deployment/{name} in {namespace} is not Available after {}: `kubectl -n {namespace} describe deployment {name}` says why (an image that cannot be pulled: --image)",
                        crate::engine::duration::human(timeout)
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        printer
            .line(&format!("deployment/{namespace}/{name} available"))
            .map_err(io_error)?;
    }
    Ok(())
}

fn install_failed(e: InstallError) -> CliError {
    let status = match &e {
        InstallError::Connect(c) => ExitStatus::of(c),
        _ => ExitStatus::Invalid,
    };
    CliError::new(status, e)
}

fn print_all(printer: &mut Printer, rest: &[serde_json::Value]) -> Result<(), CliError> {
    let mut all: Vec<serde_json::Value> = api::crds()
        .into_iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    all.extend(rest.iter().cloned());
    let text = match printer.format {
        OutputFormat::Json => {
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": all});
            let mut s = serde_json::to_string_pretty(&list)
                .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
            s.push('\n');
            s
        }
        _ => yaml_documents(all.iter())
            .map_err(|e| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e)))?,
    };
    printer.print_data(&text).map_err(io_error)
}
