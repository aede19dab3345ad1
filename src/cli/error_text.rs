//! An error and its causes as the CLI prints them: one line, each cause once, and an answer
//! of the API server in the server's words.
//!
//! kube's `Error::Api` displays as `ApiError: {status} ({status:?})`: the server's message,
//! then a `{:?}` dump of every field of the `Status` (`Status { status: Some(Failure), code:
//! 400, … }`), and the `Status` follows it in the cause chain and says its message a third
//! time. kubectl prints `Error from server (BadRequest): <message>`; convoy prints the
//! message and the reason.

use std::error::Error;

/// `error` and its causes on one line (as `{:#}` prints them), each API server answer as
/// [`status_text`] and each cause once.
pub fn error_text(error: &anyhow::Error) -> String {
    causes_text(error.chain())
}

/// [`error_text`] of an error that is not an `anyhow::Error` (a watch's, for a log line).
pub fn std_error_text(error: &(dyn Error + 'static)) -> String {
    fn source<'a>(e: &&'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
        (*e).source()
    }
    causes_text(std::iter::successors(Some(error), source))
}

/// The server's answer: its message and, when it gives one, the reason (`NotFound`,
/// `BadRequest`); the HTTP code when it gives neither.
pub fn status_text(status: &kube::core::Status) -> String {
    match (status.message.is_empty(), status.reason.is_empty()) {
        (false, false) => format!("{} ({})", status.message, status.reason),
        (false, true) => status.message.clone(),
        (true, false) => format!("{} (HTTP {})", status.reason, status.code),
        (true, true) => format!("the API server answered HTTP {}", status.code),
    }
}

fn causes_text<'a>(causes: impl Iterator<Item = &'a (dyn Error + 'static)>) -> String {
    let causes: Vec<&(dyn Error + 'static)> = causes.collect();
    // Every API error's own text, and what to print for it; a cause that quotes one (a
    // watch error's "failed to perform initial object list: {0}") quotes the server's words.
    let answers: Vec<(String, String)> = causes
        .iter()
        .filter_map(|e| match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(status)) => Some((e.to_string(), status_text(status))),
            _ => None,
        })
        .collect();
    let mut parts: Vec<String> = Vec::new();
    let mut skip_status = false;
    for cause in causes {
        let is_status = cause.downcast_ref::<Box<kube::core::Status>>().is_some()
            || cause.downcast_ref::<kube::core::Status>().is_some();
        if skip_status && is_status {
            // The Status an API error wraps: printed already, as the error.
            skip_status = false;
            continue;
        }
        skip_status = matches!(
            cause.downcast_ref::<kube::Error>(),
            Some(kube::Error::Api(_))
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    fn bad_request() -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            status: Some(kube::core::response::StatusSummary::Failure),
            code: 400,
            message: "unable to parse requirement: found '(', expected: identifier".into(),
            reason: "BadRequest".into(),
            ..Default::default()
        }))
    }

    #[test]
    fn an_api_error_prints_the_servers_message_not_a_debug_dump() {
        let error = anyhow::Error::new(bad_request()).context("cannot list Releases");
        assert_eq!(
            error_text(&error),
            "cannot list Releases: unable to parse requirement: found '(', expected: identifier (BadRequest)"
        );
    }

    #[test]
    fn an_error_that_quotes_an_api_error_quotes_the_servers_message() {
        let watch = kube::runtime::watcher::Error::InitialListFailed(bad_request());
        assert_eq!(
            std_error_text(&watch),
            "failed to perform initial object list: unable to parse requirement: found '(', expected: identifier (BadRequest)"
        );
    }

    #[test]
    fn other_errors_print_their_chain_as_before() {
        let error = anyhow::anyhow!("connection refused").context("cannot reach the API server");
        assert_eq!(error_text(&error), format!("{error:#}"));
    }
}
