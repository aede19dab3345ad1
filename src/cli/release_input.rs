//! Where a command's Release comes from: the cluster (`convoy render NAME -n NS`) or local
//! files (`-f release.yaml -f sources.yaml`), with the objects it reads alongside.

use std::path::PathBuf;

use super::GlobalArgs;
use super::exit::{CliError, ExitStatus};
use crate::engine::api::Release;
use crate::engine::connect::Connection;
use crate::engine::objects::{LocalObjects, ObjectReader};

/// A Release and what to read its inputs from.
pub struct ReleaseInput {
    pub release: Release,
    pub reader: ObjectReader,
    /// The cluster the Release lives in, when it came from one.
    pub home: Option<Connection>,
}

/// Load the Release `name` from `files` when any are given, else from the cluster.
pub async fn load(
    global: &GlobalArgs,
    name: Option<&str>,
    files: &[PathBuf],
) -> Result<ReleaseInput, CliError> {
    if !files.is_empty() {
        return load_local(global, name, files);
    }
    let Some(name) = name else {
        return Err(CliError::usage("name a Release, or pass its file with -f"));
    };
    let home = global.connect().await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| home.default_namespace.clone());
    // A missing Release names its namespace and a close name; no CRDs say to install them.
    let release = super::lookup::release(&home, &namespace, name).await?;
    Ok(ReleaseInput {
        release,
        reader: ObjectReader::Cluster(home.client.clone()),
        home: Some(home),
    })
}

fn load_local(
    global: &GlobalArgs,
    name: Option<&str>,
    files: &[PathBuf],
) -> Result<ReleaseInput, CliError> {
    let local =
        LocalObjects::from_files(files).map_err(|e| CliError::new(ExitStatus::Invalid, e))?;
    let candidates: Vec<&serde_json::Value> = local
        .all::<Release>()
        .filter(|r| name.is_none_or(|n| r["metadata"]["name"] == n))
        .collect();
    let value = match candidates.as_slice() {
        [one] => (*one).clone(),
        [] => {
            let what = name
                .map(|n| format!("Release {n:?}"))
                .unwrap_or_else(|| "Release".into());
            return Err(CliError::new(
                ExitStatus::Invalid,
                anyhow::anyhow!("the files given with -f hold no {what}"),
            ));
        }
        many => {
            let names: Vec<&str> = many
                .iter()
                .filter_map(|r| r["metadata"]["name"].as_str())
                .collect();
            return Err(CliError::usage(format!(
                "the files hold several Releases ({}); name one",
                names.join(", ")
            )));
        }
    };
    let mut release: Release = serde_json::from_value(value).map_err(|e| {
        CliError::new(
            ExitStatus::Invalid,
            anyhow::Error::new(e).context("the Release in the files given with -f is not valid"),
        )
    })?;
    if release
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        release.metadata.namespace = Some(
            global
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_string()),
        );
    }
    Ok(ReleaseInput {
        release,
        reader: ObjectReader::Local(local),
        home: None,
    })
}
