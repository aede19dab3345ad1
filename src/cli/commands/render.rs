//! `convoy render`: render a Release and print its objects and renderRef.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer, yaml_documents};
use crate::cli::release_input::{ReleaseInput, load};
use crate::cli::{GlobalArgs, io_error};
use crate::engine::cluster::resolve_target;
use crate::engine::render::helm_schema::SchemaRefs;
use crate::engine::render::{ClusterInfo, RenderContext, RenderError, Rendered, render_release};
use crate::engine::source::{Cache, Coordinator};
use crate::engine::tenancy::Tenancy;

/// Render a Release: print its objects in apply order and its renderRef.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy render web -n apps                                  # a Release on the cluster\n  \
convoy render -f examples/waves/release.yaml --source-dir examples/waves   # from files, no cluster needed\n  \
convoy render -f release.yaml -f sources.yaml --source-dir ./checkout\n  \
convoy render web -n apps --ref-only")]
pub struct RenderArgs {
    /// The Release's name (optional with -f when the files hold one Release).
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: Option<String>,
    /// Read the Release, its source objects and value layers from these files instead of the cluster.
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Use this local directory as the source's root (spec.source.path applies inside it).
    #[arg(long, value_name = "DIR")]
    pub source_dir: Option<PathBuf>,
    /// Print only the renderRef.
    #[arg(long)]
    pub ref_only: bool,
    /// Where fetched sources are cached (default: $CONVOY_CACHE_DIR or ~/.cache/convoy).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    #[command(flatten)]
    pub tenancy: crate::cli::tenancy_args::TenancyArgs,
}

pub async fn run(global: &GlobalArgs, args: RenderArgs, printer: &mut Printer) -> CommandResult {
    let input = load(global, args.name.as_deref(), &args.files).await?;
    let tenancy = args.tenancy.tenancy()?;
    let cluster = cluster_info(&input, &tenancy).await;
    let cache = Cache::new(args.cache_dir.clone().unwrap_or_else(Cache::default_root));
    let rendered = render_input(
        &input,
        cache,
        args.source_dir.as_deref(),
        cluster.as_ref(),
        &tenancy.values_schema_refs,
    )
    .await?;
    if args.ref_only {
        printer.line(&rendered.render_ref).map_err(io_error)?;
        return Ok(ExitStatus::Success);
    }
    let text = match printer.format {
        OutputFormat::Json => {
            let items: Vec<&serde_json::Value> = rendered.objects.iter().map(|o| &o.0).collect();
            let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
            let mut s = serde_json::to_string_pretty(&list)
                .map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
            s.push('\n');
            s
        }
        _ => yaml_documents(rendered.objects.iter().map(|o| &o.0))
            .map_err(|e| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e)))?,
    };
    printer.print_data(&text).map_err(io_error)?;
    eprintln!("renderRef: {}", rendered.render_ref);
    // The process ends here: freeing a large render object by object costs milliseconds
    // the operating system spends no time on.
    std::mem::forget((rendered, text));
    Ok(ExitStatus::Success)
}

/// Fetch (or take `source_dir` for) the Release's source and render it, as the CLI reports it.
pub async fn render_input(
    input: &ReleaseInput,
    cache: Cache,
    source_dir: Option<&Path>,
    cluster: Option<&ClusterInfo>,
    schema_refs: &SchemaRefs,
) -> Result<Rendered, CliError> {
    let coordinator = Coordinator::new(cache);
    let ctx = RenderContext {
        reader: &input.reader,
        coordinator: &coordinator,
        source_dir,
        cluster,
        timeout: crate::engine::render::DEFAULT_RENDER_TIMEOUT,
        reuse_fetches: false,
        schema_refs,
        caller: "cli",
    };
    let (_, rendered) = render_release(&ctx, &input.release)
        .await
        .map_err(|e| render_failure(input, e))?;
    Ok(rendered)
}

/// The target cluster's version and APIs, when the Release came from a cluster. A cluster
/// that cannot be reached only costs Helm's capability checks, so it is a warning.
async fn cluster_info(input: &ReleaseInput, tenancy: &Tenancy) -> Option<ClusterInfo> {
    let home = input.home.as_ref()?;
    let target = match resolve_target(home, tenancy, &input.release, Default::default()).await {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(
                "rendering without the target cluster's version: {}",
                crate::engine::error::chain(&e)
            );
            return None;
        }
    };
    ClusterInfo::discover(&target.conn.client).await.ok()
}

/// A render error as the CLI reports it: the Release, the step and reason, then the cause.
pub fn render_failure(input: &ReleaseInput, e: RenderError) -> CliError {
    let release = &input.release.metadata;
    let status = if e.is_unreachable() {
        ExitStatus::Unreachable
    } else {
        ExitStatus::Invalid
    };
    let context = format!(
        "render Release {}/{} (step {}, reason {})",
        release.namespace.as_deref().unwrap_or_default(),
        release.name.as_deref().unwrap_or_default(),
        e.stage(),
        e.reason()
    );
    CliError::new(status, anyhow::Error::new(e).context(context))
}
