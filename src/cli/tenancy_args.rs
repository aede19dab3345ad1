//! The tenancy flags (engine::tenancy): the same rules for `convoy sync`, `diff`, `render`,
//! `health` and `convoy daemon`, so a preview on a laptop refuses what the daemon refuses.

use clap::Args;

use crate::cli::exit::CliError;
use crate::engine::connect::KubeconfigPolicy;
use crate::engine::render::helm_schema::SchemaRefs;
use crate::engine::source::allowed_urls::AllowedUrls;
use crate::engine::tenancy::Tenancy;

/// As whom Releases act and what they may reach.
#[derive(Debug, Clone, Default, Args)]
pub struct TenancyArgs {
    /// Impersonate this ServiceAccount of each Release's namespace for Releases that name no
    /// spec.serviceAccountName (Releases never act as convoy itself then).
    #[arg(long, value_name = "NAME", env = "CONVOY_DEFAULT_SERVICE_ACCOUNT")]
    pub default_service_account: Option<String>,
    /// Let a Release target, mutate into or render objects for namespaces other than its own.
    #[arg(long)]
    pub allow_cross_namespace_refs: bool,
    /// Let a Cluster's kubeconfig run exec credential and auth-provider plugins (they run
    /// commands as convoy).
    #[arg(long)]
    pub insecure_kubeconfig_exec: bool,
    /// Let a Cluster's kubeconfig turn off TLS verification.
    #[arg(long)]
    pub insecure_kubeconfig_tls: bool,
    /// Let a chart's values schema refer to https files under this prefix (repeatable; e.g.
    /// https://raw.githubusercontent.com/yannh/kubernetes-json-schema/master/): helm fetches
    /// them, and what they refer to, from where convoy runs. Name the branch in a GitHub
    /// prefix: raw.githubusercontent.com serves a repository's forks' commits under it too.
    #[arg(long, value_name = "PREFIX", value_parser = parse_schema_ref)]
    pub allow_values_schema_ref: Vec<String>,
    /// Let a Cluster's kubeconfig name only API servers under this prefix (repeatable; e.g.
    /// https://prod.example.com:6443/), and no proxy-url. Default: any server.
    #[arg(long, value_name = "PREFIX", value_parser = parse_cluster_server)]
    pub allow_cluster_server: Vec<String>,
}

pub(crate) fn parse_cluster_server(prefix: &str) -> Result<String, String> {
    AllowedUrls::cluster_servers(&[prefix.to_string()])
        .map(|_| prefix.to_string())
        .map_err(|e| e.0)
}

fn parse_schema_ref(prefix: &str) -> Result<String, String> {
    SchemaRefs::new(vec![prefix.to_string()])
        .map(|_| prefix.to_string())
        .map_err(|e| e.0)
}

impl TenancyArgs {
    /// The rules these flags set (a prefix clap let through is checked again: a list that
    /// failed to parse must not become one that allows everything).
    pub fn tenancy(&self) -> Result<Tenancy, CliError> {
        let allowed_servers = AllowedUrls::cluster_servers(&self.allow_cluster_server)
            .map_err(|e| CliError::usage(e.0))?;
        Ok(Tenancy::new(
            self.default_service_account.clone(),
            self.allow_cross_namespace_refs,
            KubeconfigPolicy {
                allow_exec: self.insecure_kubeconfig_exec,
                allow_insecure_tls: self.insecure_kubeconfig_tls,
                allowed_servers,
            },
        )
        .with_values_schema_refs(self.schema_refs()))
    }

    /// The allowed values schema prefixes, each checked as it was parsed.
    pub fn schema_refs(&self) -> SchemaRefs {
        SchemaRefs::new(self.allow_values_schema_ref.clone()).unwrap_or_default()
    }
}
