//! The tenancy flags (engine::tenancy): the same rules for `convoy sync`, `diff`, `render`,
//! `health` and `convoy daemon`, so a preview on a laptop refuses what the daemon refuses.

use clap::Args;

use crate::engine::connect::KubeconfigPolicy;
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
}

impl TenancyArgs {
    pub fn tenancy(&self) -> Tenancy {
        Tenancy::new(
            self.default_service_account.clone(),
            self.allow_cross_namespace_refs,
            KubeconfigPolicy {
                allow_exec: self.insecure_kubeconfig_exec,
                allow_insecure_tls: self.insecure_kubeconfig_tls,
            },
        )
    }
}
