//! The one way the engine writes an error with its causes: on one line, outermost first,
//! joined by ": " (what `anyhow`'s `{:#}` prints at the CLI's edge), leaving out a cause whose
//! text an outer error already repeats (`#[error("… {0}")]` with `#[source]` would otherwise
//! print it twice).

use std::error::Error;

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
    use super::chain;

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
}
