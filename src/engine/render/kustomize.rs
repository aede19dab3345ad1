//! kustomize content through the `kustomize` binary (`kustomize build`).

use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

use super::error::RenderError;
use super::helm::tool_message;
use super::manifests::parse_documents;
use super::object::Object;
use crate::engine::tools::Tool;

/// Run `kustomize build dir` and parse what it prints.
pub async fn build(dir: &Path) -> Result<Vec<Object>, RenderError> {
    let kustomize = Tool::Kustomize.locate()?;
    let out = Command::new(&kustomize)
        .arg("build")
        .arg(dir)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| RenderError::Tool(format!("cannot run {}: {e}", kustomize.display())))?;
    if !out.status.success() {
        return Err(RenderError::Kustomize(tool_message(&out.stderr, &[])));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    parse_documents(&text, "kustomize build output").map_err(RenderError::Manifests)
}
