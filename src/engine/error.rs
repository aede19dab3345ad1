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

/// An error and its causes on one line.
pub fn chain(error: &(dyn Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn Error + 'static)> = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
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
