//! Errors about what a source's server sent, told by where and what shape, never by content.
//!
//! A tenant names the URL, and the daemon fetches it from where the daemon sits: an index
//! URL pointing at an internal service (`http://10.0.0.7/creds?`, the trailing `?` making the
//! appended `/index.yaml` a query) would otherwise have that service's answer quoted into the
//! Release's status by a parser's message (serde-saphyr prints the failing lines; serde's
//! "invalid type: string \"…\"" quotes a value). What is left names the document, the line
//! and the column: enough to find the fault in one's own repository, nothing to read another's.

/// A YAML document from a server that does not read as `what`.
pub fn yaml_error(what: &str, error: &serde_saphyr::Error) -> String {
    let error = error.without_snippet();
    // A budget breach (aliases, depth) names a limit of convoy's, not the content.
    if let serde_saphyr::Error::Budget { .. } = error {
        return format!("{what}: {error}");
    }
    match error.location() {
        Some(at) => format!(
            "{what}: it does not read as one at line {}, column {} (the server's text is not shown)",
            at.line(),
            at.column()
        ),
        None => format!("{what}: it does not read as one (the server's text is not shown)"),
    }
}

/// A JSON document from a server that does not read as `what`.
pub fn json_error(what: &str, error: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let shape = match error.classify() {
        Category::Syntax | Category::Eof => "it is not JSON",
        Category::Data => "it is JSON of another shape",
        Category::Io => "it could not be read",
    };
    if error.line() == 0 {
        format!("{what}: {shape} (the server's text is not shown)")
    } else {
        format!(
            "{what}: {shape} at line {}, column {} (the server's text is not shown)",
            error.line(),
            error.column()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "aws_secret_access_key=wJalrXUtnFEMI";

    #[test]
    fn a_servers_text_is_never_quoted() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Index {
            entries: std::collections::BTreeMap<String, Vec<String>>,
        }
        for text in [
            format!("{SECRET}\ndb_password=x\n"),
            format!("entries: {SECRET}\n"),
            format!("entries:\n  web: [{{a: {SECRET}}}]\n"),
        ] {
            let e = serde_saphyr::from_str::<Index>(&text).unwrap_err();
            assert!(
                e.to_string().contains("wJalr"),
                "the parser's own message quotes it"
            );
            let shown = yaml_error("index.yaml is not a Helm repository index", &e);
            assert!(!shown.contains("wJalr"), "{shown}");
            assert!(shown.contains("line "), "{shown}");
        }
        for text in [format!("{{\"layers\": \"{SECRET}\"}}"), SECRET.to_string()] {
            let e = serde_json::from_str::<Index>(&text).unwrap_err();
            let shown = json_error("the manifest cannot be read", &e);
            assert!(!shown.contains("wJalr"), "{shown}");
        }
        let e =
            serde_json::from_value::<Index>(serde_json::json!({"entries": SECRET})).unwrap_err();
        assert!(e.to_string().contains("wJalr"));
        assert_eq!(
            json_error("the image index cannot be read", &e),
            "the image index cannot be read: it is JSON of another shape (the server's text is not shown)"
        );
    }
}
