//! External programs convoy drives: `git`, `helm`, `kustomize`. Each is found through an
//! environment variable naming it (`CONVOY_GIT`, `CONVOY_HELM`, `CONVOY_KUSTOMIZE`) or on
//! `PATH`; a missing one is an error that says what to install.

use std::path::{Path, PathBuf};

/// A program convoy runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Git,
    Helm,
    Kustomize,
}

/// A program that could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{name}` was not found (looked at ${env} and on PATH): {hint}")]
pub struct ToolMissing {
    pub name: &'static str,
    pub env: &'static str,
    pub hint: &'static str,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Git => "git",
            Tool::Helm => "helm",
            Tool::Kustomize => "kustomize",
        }
    }

    fn env(self) -> &'static str {
        match self {
            Tool::Git => "CONVOY_GIT",
            Tool::Helm => "CONVOY_HELM",
            Tool::Kustomize => "CONVOY_KUSTOMIZE",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            Tool::Git => "install git (apt-get install git)",
            Tool::Helm => {
                "install helm v3.14+ or v4 (https://helm.sh/docs/intro/install/, or `scripts/testenv build`) or set $CONVOY_HELM"
            }
            Tool::Kustomize => {
                "install kustomize v5 (`go install sigs.k8s.io/kustomize/kustomize/v5@latest`, or `scripts/testenv build`) or set $CONVOY_KUSTOMIZE"
            }
        }
    }

    /// The program's path.
    pub fn locate(self) -> Result<PathBuf, ToolMissing> {
        let missing = ToolMissing {
            name: self.name(),
            env: self.env(),
            hint: self.hint(),
        };
        if let Some(path) = std::env::var_os(self.env()) {
            let path = PathBuf::from(path);
            return if is_executable(&path) {
                Ok(path)
            } else {
                Err(missing)
            };
        }
        which(self.name()).ok_or(missing)
    }
}

/// The first executable named `name` on PATH.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}
