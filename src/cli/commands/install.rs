//! `convoy install`: put convoy into a cluster (CRDs, RBAC, default health rules, the
//! daemon), or print what it would put there.

use std::time::Duration;

use clap::Args;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer, yaml_documents};
use crate::cli::{GlobalArgs, io_error};
use crate::engine::api;
use crate::engine::install::{
    InstallError, InstallOptions, apply_objects, install_crds, install_manifests, tenant_manifests,
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
convoy install --crds-only                              # just the API, for the CLI alone\n  \
convoy install --tenant team-a                          # let team-a's Releases deploy in team-a\n  \
convoy install --image registry.local/convoy:dev -n convoy-system")]
pub struct InstallArgs {
    /// Install only the CRDs (enough for `convoy sync` from a laptop).
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
    /// How long to wait for the CRDs to become Established.
    #[arg(long, default_value = "60s", value_parser = crate::engine::duration::parse_duration)]
    pub timeout: Duration,
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
    };
    if let Some(tenant) = &args.tenant {
        let objects = tenant_manifests(tenant);
        if args.dry_run {
            let text = yaml_documents(objects.iter())
                .map_err(|e| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e)))?;
            printer.print(&text).map_err(io_error)?;
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
    Ok(ExitStatus::Success)
}

fn install_failed(e: InstallError) -> CliError {
    let status = match &e {
        InstallError::Connect(_) => ExitStatus::Unreachable,
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
    printer.print(&text).map_err(io_error)
}
