//! Errors at the engine's edges: the one way the engine writes an error with its causes (on
//! one line, outermost first, joined by ": ", what `anyhow`'s `{:#}` prints at the CLI's
//! edge, leaving out a cause whose text an outer error already repeats), and the
//! [`Category`] each error has, which the daemon counts failures by and the CLI turns into its
//! exit code (as stackable's operators do).

use std::error::Error;

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    /// A cluster, a source or the API server could not be reached, or did not answer in time:
    /// waiting can fix it (the CLI exits 3).
    Unreachable,
    /// The input is not valid (bad YAML, an unknown kind, a CEL compile error, a feature convoy
    /// does not have): only a change to it can fix it (the CLI exits 4).
    Invalid,
    /// The server refused the request (no permission, a conflict): exit 1.
    Refused,
    /// Anything else that failed: exit 1.
    Failed,
}

impl Category {
    /// The label the daemon's metrics use.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Unreachable => "unreachable",
            Category::Invalid => "invalid",
            Category::Refused => "refused",
            Category::Failed => "failed",
        }
    }
}

/// An error that knows its [`Category`].
pub trait Categorized {
    fn category(&self) -> Category;
}

/// Input that is not valid. The message names the object, the field and the fix; its
/// category is always [`Category::Invalid`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Invalid(pub String);

impl From<String> for Invalid {
    fn from(message: String) -> Self {
        Invalid(message)
    }
}

impl Categorized for Invalid {
    fn category(&self) -> Category {
        Category::Invalid
    }
}

/// The category of an API error: no answer (transport, timeout, 5xx, 429) is unreachable;
/// 400 and 422 mean what was sent is invalid; 401 and 403 are refusals, as is a conflict.
pub fn kube_category(error: &kube::Error) -> Category {
    match error {
        e if crate::engine::connect::is_unreachable(e) => Category::Unreachable,
        kube::Error::Api(s) => match s.code {
            429 | 500..=599 => Category::Unreachable,
            400 | 422 => Category::Invalid,
            401 | 403 | 409 => Category::Refused,
            _ => Category::Failed,
        },
        _ => Category::Failed,
    }
}

impl Categorized for kube::Error {
    fn category(&self) -> Category {
        kube_category(self)
    }
}

/// An error and its causes on one line, each cause once, and an answer of the API server in
/// the server's words.
///
/// kube's `Error::Api` displays as `ApiError: {status} ({status:?})`: the server's message,
/// then a `{:?}` dump of every field of the `Status` (`Status { status: Some(Failure), code:
/// 400, … }`), and the `Status` follows it as its cause, saying the message a third time.
/// Condition messages and the CLI's errors carry the message and the reason instead (kubectl:
/// `Error from server (BadRequest): <message>`); a cause that quotes such an error (a watch's
/// "failed to perform initial object list: {0}") quotes the server's words too.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    fn source<'a>(e: &&'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
        (*e).source()
    }
    let causes: Vec<&(dyn Error + 'static)> = std::iter::successors(Some(error), source).collect();
    // An error kept boxed (`source: Box<kube::Error>`, to keep its holder small) is the Box
    // in the chain, not the kube::Error.
    fn as_kube<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a kube::Error> {
        e.downcast_ref::<kube::Error>()
            .or_else(|| e.downcast_ref::<Box<kube::Error>>().map(|b| &**b))
    }
    let answers: Vec<(String, String)> = causes
        .iter()
        .filter_map(|e| match as_kube(*e) {
            Some(kube::Error::Api(status)) => Some((e.to_string(), status_text(status))),
            _ => None,
        })
        .collect();
    let mut parts: Vec<String> = Vec::new();
    let mut after_api_error = false;
    for cause in causes {
        let is_status = cause.downcast_ref::<Box<kube::core::Status>>().is_some()
            || cause.downcast_ref::<kube::core::Status>().is_some();
        if after_api_error && is_status {
            // The Status an API error wraps: said already, as the error.
            after_api_error = false;
            continue;
        }
        after_api_error = matches!(as_kube(cause), Some(kube::Error::Api(_)));
        let mut text = cause.to_string();
        for (raw, answer) in &answers {
            text = text.replace(raw.as_str(), answer);
        }
        // A cause an earlier part ends with (an error that prints its source as its last
        // words) is said once; a shorter text inside another is kept, it may say more.
        let said = |p: &String| {
            *p == text || p.ends_with(&format!(": {text}")) || p.ends_with(&format!("({text})"))
        };
        if !parts.iter().any(said) {
            parts.push(text);
        }
    }
    parts.join(": ")
}

/// What kube makes the reason of an error answer that is not a Kubernetes `Status`, whose
/// whole body it then puts in the message.
const NOT_A_STATUS: &str = "Failed to parse error data";

/// The server's answer: its message and, when it gives one, the reason (`NotFound`,
/// `BadRequest`); the HTTP code when it gives neither. An answer that is not a Kubernetes
/// `Status` is not quoted: a tenant's Cluster may name any server the daemon can reach (a
/// metadata endpoint, another team's service), and its error page would be written into the
/// Release's status (found by an attack).
pub fn status_text(status: &kube::core::Status) -> String {
    // (Any JSON object reads as a Status, every field being optional; an API server's says
    // `status: Failure`.)
    if status.reason == NOT_A_STATUS || status.status.is_none() {
        return format!(
            "the server answered HTTP {} with a body that is not a Kubernetes Status (not shown; is it an API server?)",
            status.code
        );
    }
    match (status.message.is_empty(), status.reason.is_empty()) {
        (false, false) => format!("{} ({})", status.message, status.reason),
        (false, true) => status.message.clone(),
        (true, false) => format!("{} (HTTP {})", status.reason, status.code),
        (true, true) => format!("the API server answered HTTP {}", status.code),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum Inner {
        #[error("connection refused")]
        Refused,
    }

    #[derive(Debug, thiserror::Error)]
    enum Outer {
        #[error("cannot read the inventory")]
        Read(#[source] Inner),
        #[error("cannot write: {0}")]
        Repeats(#[source] Inner),
    }

    #[test]
    fn causes_follow_the_error_once_each() {
        assert_eq!(
            chain(&Outer::Read(Inner::Refused)),
            "cannot read the inventory: connection refused"
        );
        assert_eq!(
            chain(&Outer::Repeats(Inner::Refused)),
            "cannot write: connection refused"
        );
    }

    fn bad_request() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            status: Some(kube::core::response::StatusSummary::Failure),
            code: 400,
            message: "unable to parse requirement: found '(', expected: identifier".into(),
            reason: "BadRequest".into(),
            ..Default::default()
        }))
    }

    /// An error page that is not a Kubernetes Status (a tenant's Cluster naming another
    /// service) is reported by its HTTP code, never its text.
    #[test]
    fn an_answer_that_is_not_a_status_is_not_quoted() {
        let page = kube::Error::Api(
            kube::core::Status::failure("db_password=team-b-s3cr3t", NOT_A_STATUS)
                .with_code(500)
                .boxed(),
        );
        let error = anyhow::Error::new(page).context("cannot reach Cluster team-a/prod");
        assert_eq!(
            chain(error.as_ref()),
            "cannot reach Cluster team-a/prod: the server answered HTTP 500 with a body that is not a Kubernetes Status (not shown; is it an API server?)"
        );
        // A JSON answer with a message, as many services give: not an API server's Status.
        let json: kube::core::Status =
            serde_json::from_str(r#"{"message": "token=team-b-s3cr3t", "code": 403}"#).unwrap();
        assert_eq!(
            status_text(&json),
            "the server answered HTTP 403 with a body that is not a Kubernetes Status (not shown; is it an API server?)"
        );
    }

    #[test]
    fn an_api_error_says_the_servers_message_not_a_debug_dump() {
        let error = anyhow::Error::new(bad_request()).context("cannot list Releases");
        assert_eq!(
            chain(error.as_ref()),
            "cannot list Releases: unable to parse requirement: found '(', expected: identifier (BadRequest)"
        );
        // A cause that quotes one quotes the server's message.
        let watch = kube::runtime::watcher::Error::InitialListFailed(bad_request());
        assert_eq!(
            chain(&watch),
            "failed to perform initial object list: unable to parse requirement: found '(', expected: identifier (BadRequest)"
        );
        // An error that keeps it boxed (engine::objects::ReadError) says the same, once
        // (found by a run of real charts: the Status's debug dump, the message three times).
        let read = crate::engine::objects::ReadError::Api {
            kind: "Secret".into(),
            namespace: "sec".into(),
            name: "dbvals".into(),
            source: Box::new(bad_request()),
        };
        assert_eq!(
            chain(&read),
            "cannot read Secret sec/dbvals: unable to parse requirement: found '(', expected: identifier (BadRequest)"
        );
        // Other errors: their chain as anyhow prints it.
        let error = anyhow::anyhow!("connection refused").context("cannot reach the API server");
        assert_eq!(chain(error.as_ref()), format!("{error:#}"));
    }

    #[test]
    fn api_errors_fall_in_the_category_a_person_would_act_on() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        assert_eq!(kube_category(&api(503)), Category::Unreachable);
        assert_eq!(kube_category(&api(429)), Category::Unreachable);
        assert_eq!(kube_category(&api(422)), Category::Invalid);
        assert_eq!(kube_category(&api(403)), Category::Refused);
        assert_eq!(kube_category(&api(404)), Category::Failed);
    }
}
