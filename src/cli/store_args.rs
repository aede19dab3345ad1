//! `--render-store`: which render store a command reads and writes.

use std::sync::Arc;

use clap::Args;

use crate::engine::store::{DEFAULT_STORE_NAMESPACE, RenderStore, StoreSpec};

/// The render store flag shared by the commands that use the store.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Where renders and history are kept: kubernetes (Secrets in convoy-system, as the
    /// daemon keeps them), kubernetes:NAMESPACE, dir:PATH, or none.
    #[arg(long, value_name = "STORE", default_value = "kubernetes", value_parser = clap::value_parser!(StoreSpec))]
    pub render_store: StoreSpec,
}

impl StoreArgs {
    pub fn open(&self, client: &kube::Client) -> Option<Arc<dyn RenderStore>> {
        self.render_store.open(client, DEFAULT_STORE_NAMESPACE)
    }
}
