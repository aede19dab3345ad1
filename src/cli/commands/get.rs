//! `convoy get`: list Releases with their signals, as `kubectl get releases` would: one or
//! all, by label, sorted, watched, wide, by name, or as YAML and JSON.

use clap::Args;
use futures::StreamExt;
use kube::Api;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};

use crate::cli::exit::{CliError, CommandResult, ExitStatus};
use crate::cli::output::{OutputFormat, Printer};
use crate::cli::table::plain;
use crate::cli::{GlobalArgs, io_error, lookup};
use crate::engine::api::{Release, condition_types};
use crate::engine::duration::human;
use crate::engine::render::render_ref::short;

/// List Releases (or show one) with State, Applied, InSync, Healthy, the render and Age.
#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
convoy get -n apps                              # every Release of a namespace\n  \
convoy get web -n apps -o wide                  # one, with its source revision and message\n  \
convoy get -A -l team=payments --sort-by .metadata.creationTimestamp\n  \
convoy get -n apps -w                           # then each change as it happens\n  \
convoy get web -n apps -o yaml                  # the object, without managedFields")]
pub struct GetArgs {
    /// A Release to show (default: every Release of the namespace).
    #[arg(add = clap_complete::engine::ArgValueCandidates::new(crate::cli::complete::release_names))]
    pub name: Option<String>,
    /// List Releases in every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Only Releases whose labels match this selector (`team=payments,tier!=db`).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// After listing, print each Release again when it changes (Ctrl-C ends).
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Sort by a field of the object: a dotted path such as `.metadata.creationTimestamp`
    /// (kubectl's `{…}` braces are accepted; list indexes are not).
    #[arg(long, value_name = "JSONPATH")]
    pub sort_by: Option<String>,
    /// Keep `metadata.managedFields` in `-o yaml|json`.
    #[arg(long)]
    pub show_managed_fields: bool,
}

pub async fn run(global: &GlobalArgs, args: GetArgs, printer: &mut Printer) -> CommandResult {
    // A selector is checked here, as kubectl does, before anything connects: the API server's
    // 400 for it would be an answer about the request, not about the user's typing.
    if let Some(selector) = &args.selector {
        crate::engine::selectors::parse(selector).map_err(CliError::usage)?;
    }
    let conn = global.connect().await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| conn.default_namespace.clone());
    let (api, watch_api): (Api<Release>, Api<Release>) = if args.all_namespaces {
        (
            Api::all(conn.client.clone()),
            Api::all(conn.watch_client.clone()),
        )
    } else {
        (
            Api::namespaced(conn.client.clone(), &namespace),
            Api::namespaced(conn.watch_client.clone(), &namespace),
        )
    };
    let mut params = ListParams::default();
    if let Some(selector) = &args.selector {
        params = params.labels(selector);
    }
    if let Some(name) = &args.name {
        params = params.fields(&format!("metadata.name={name}"));
    }
    let list = match api.list(&params).await {
        Ok(list) => list,
        Err(e) => return Err(lookup::api_error(&conn, e, "cannot list Releases".into()).await),
    };
    let mut releases = list.items;
    if let (Some(name), true) = (&args.name, releases.is_empty()) {
        if args.selector.is_none() && !args.all_namespaces {
            return Err(lookup::not_found(&conn, &api, &namespace, name).await);
        }
        return Err(CliError::new(
            ExitStatus::Invalid,
            anyhow::anyhow!("Release {name:?} not found{}", where_(&args, &namespace)),
        ));
    }
    sort(&mut releases, args.sort_by.as_deref())?;
    let view = View {
        with_namespace: args.all_namespaces,
        wide: printer.format == OutputFormat::Wide,
    };
    match printer.format {
        OutputFormat::Json | OutputFormat::Yaml => {
            let text = objects_text(
                &releases,
                args.name.is_some(),
                args.show_managed_fields,
                printer.format,
            )?;
            printer.print_data(&text).map_err(io_error)?;
        }
        OutputFormat::Name => {
            for r in &releases {
                printer.line(&name_of(r)).map_err(io_error)?;
            }
        }
        _ => {
            if releases.is_empty() && !args.watch {
                eprintln!("No Releases found{}.", where_(&args, &namespace));
                return Ok(ExitStatus::Success);
            }
            if !releases.is_empty() {
                printer
                    .print(&view.table(&releases, jiff::Timestamp::now()))
                    .map_err(io_error)?;
            }
        }
    }
    if !args.watch {
        return Ok(ExitStatus::Success);
    }
    watch(watch_api, params, view, releases, printer).await
}

/// " in namespace NS", or nothing for every namespace (with the selector when there is one).
fn where_(args: &GetArgs, namespace: &str) -> String {
    let mut s = if args.all_namespaces {
        String::new()
    } else {
        format!(" in namespace {namespace}")
    };
    if let Some(selector) = &args.selector {
        s.push_str(&format!(" matching {selector}"));
    }
    s
}

/// kubectl's `-o name`.
fn name_of(r: &Release) -> String {
    format!(
        "release.core.convoy.kumodo.io/{}",
        r.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Print each Release again when its row changes, until Ctrl-C: rows only, as `kubectl get
/// -w` does, so the output can be followed or piped.
async fn watch(
    api: Api<Release>,
    params: ListParams,
    view: View,
    seen: Vec<Release>,
    printer: &mut Printer,
) -> CommandResult {
    let now = jiff::Timestamp::now;
    // Rows are compared without their age, which changes with every event.
    let signature = |r: &Release| {
        let created = r
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(now);
        view.row_text(r, created)
    };
    let mut last: std::collections::HashMap<String, String> =
        seen.iter().map(|r| (key(r), signature(r))).collect();
    let mut config = watcher::Config::default().timeout(crate::engine::connect::WATCH_TIMEOUT_SECS);
    if let Some(labels) = &params.label_selector {
        config = config.labels(labels);
    }
    if let Some(fields) = &params.field_selector {
        config = config.fields(fields);
    }
    let stream = watcher::watcher(api, config)
        .default_backoff()
        .applied_objects();
    let mut stream = std::pin::pin!(stream);
    let mut header = last.is_empty();
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = tokio::signal::ctrl_c() => return Ok(ExitStatus::Success),
        };
        let Some(event) = next else {
            return Ok(ExitStatus::Success);
        };
        let release = match event {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!("watch: {}", crate::engine::error::chain(&e));
                continue;
            }
        };
        let sig = signature(&release);
        if last.get(&key(&release)) == Some(&sig) {
            continue;
        }
        last.insert(key(&release), sig);
        let printed = if printer.format == OutputFormat::Name {
            name_of(&release)
        } else {
            view.row_text(&release, now())
        };
        if header && printer.format != OutputFormat::Name {
            printer
                .print(&view.table(std::slice::from_ref(&release), now()))
                .map_err(io_error)?;
            header = false;
            continue;
        }
        printer.line(&printed).map_err(io_error)?;
    }
}

fn key(r: &Release) -> String {
    format!(
        "{}/{}",
        r.metadata.namespace.as_deref().unwrap_or_default(),
        r.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `--sort-by`: a dotted path into the object; objects without the field sort first.
fn sort(releases: &mut [Release], path: Option<&str>) -> Result<(), CliError> {
    let Some(path) = path else {
        releases.sort_by_key(key);
        return Ok(());
    };
    let trimmed = path.trim().trim_start_matches('{').trim_end_matches('}');
    let fields: Vec<&str> = trimmed
        .trim_start_matches('.')
        .split('.')
        .filter(|f| !f.is_empty())
        .collect();
    if fields.is_empty() || fields.iter().any(|f| f.contains(['[', ']', '*', '?', '@'])) {
        return Err(CliError::usage(format!(
            "--sort-by {path:?}: give a dotted field path such as .metadata.creationTimestamp"
        )));
    }
    let value = |r: &Release| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        for f in &fields {
            v = v.get(*f).cloned().unwrap_or(serde_json::Value::Null);
        }
        v
    };
    releases.sort_by(|a, b| compare(&value(a), &value(b)).then_with(|| key(a).cmp(&key(b))));
    Ok(())
}

fn compare(a: &serde_json::Value, b: &serde_json::Value) -> std::cmp::Ordering {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .unwrap_or_default()
            .total_cmp(&y.as_f64().unwrap_or_default()),
        (Value::Null, Value::Null) => std::cmp::Ordering::Equal,
        (Value::Null, _) => std::cmp::Ordering::Less,
        (_, Value::Null) => std::cmp::Ordering::Greater,
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (x, y) => x.to_string().cmp(&y.to_string()),
    }
}

/// `-o yaml|json` as kubectl prints it: the object for `get NAME`, a `List` otherwise;
/// without `managedFields` unless asked for.
fn objects_text(
    releases: &[Release],
    single: bool,
    managed_fields: bool,
    format: OutputFormat,
) -> Result<String, CliError> {
    let invalid = |e: String| CliError::new(ExitStatus::Invalid, anyhow::anyhow!(e));
    let mut items: Vec<serde_json::Value> = Vec::new();
    for r in releases {
        let mut r = r.clone();
        if !managed_fields {
            r.metadata.managed_fields = None;
        }
        items.push(serde_json::to_value(&r).map_err(|e| invalid(e.to_string()))?);
    }
    let value = match (single, items.as_slice()) {
        (true, [one]) => one.clone(),
        _ => serde_json::json!({
            "apiVersion": "v1", "kind": "List", "items": items,
            "metadata": {"resourceVersion": ""},
        }),
    };
    let mut text = if format == OutputFormat::Json {
        serde_json::to_string_pretty(&value).map_err(|e| invalid(e.to_string()))?
    } else {
        crate::cli::output::yaml_value(&value).map_err(invalid)?
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(text)
}

/// Which columns the table has.
#[derive(Debug, Clone, Copy)]
pub struct View {
    pub with_namespace: bool,
    /// `-o wide`: the source revision and the Applied message too.
    pub wide: bool,
}

impl View {
    fn header(&self) -> Vec<&'static str> {
        let mut header = Vec::new();
        if self.with_namespace {
            header.push("namespace");
        }
        header.extend([
            "name", "state", "applied", "insync", "healthy", "render", "age",
        ]);
        if self.wide {
            header.extend(["source revision", "message"]);
        }
        header
    }

    fn row(&self, r: &Release, now: jiff::Timestamp) -> Vec<String> {
        let status = r.status.clone().unwrap_or_default();
        let cond = |t: &str| {
            status
                .condition(t)
                .map(|c| c.status.as_str().to_string())
                .unwrap_or_default()
        };
        let age = r
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| {
                human(std::time::Duration::from_secs(
                    (now.as_second() - t.0.as_second()).max(0) as u64,
                ))
            })
            .unwrap_or_default();
        let mut row = Vec::new();
        if self.with_namespace {
            row.push(r.metadata.namespace.clone().unwrap_or_default());
        }
        row.extend([
            r.metadata.name.clone().unwrap_or_default(),
            status
                .rollout
                .as_ref()
                .map(|x| x.state.as_str().to_string())
                .unwrap_or_default(),
            cond(condition_types::APPLIED),
            cond(condition_types::IN_SYNC),
            cond(condition_types::HEALTHY),
            status
                .applied_render()
                .map(|x| short(x).to_string())
                .unwrap_or_default(),
            age,
        ]);
        if self.wide {
            // What runs came from this revision (a pinned render's own, see resolvePinnedRender).
            row.push(
                status
                    .last_successful
                    .as_ref()
                    .and_then(|a| a.resolved_source.as_ref())
                    .and_then(|s| s.revision.clone())
                    .unwrap_or_default(),
            );
            row.push(
                status
                    .condition(condition_types::APPLIED)
                    .map(|c| c.message.clone())
                    .unwrap_or_default(),
            );
        }
        row
    }

    /// The table (pure, for tests).
    pub fn table(&self, releases: &[Release], now: jiff::Timestamp) -> String {
        let rows: Vec<Vec<String>> = releases.iter().map(|r| self.row(r, now)).collect();
        plain(&self.header(), &rows)
    }

    /// One row as a watch prints it: aligned to the header's widths would need the whole
    /// table again, so columns are separated by three spaces.
    fn row_text(&self, r: &Release, now: jiff::Timestamp) -> String {
        self.row(r, now)
            .into_iter()
            .map(|c| if c.is_empty() { "-".to_string() } else { c })
            .collect::<Vec<_>>()
            .join("   ")
    }
}
