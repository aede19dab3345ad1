//! The values a Release's Secret layers give helm, kept out of what helm says back. helm
//! quotes values in its errors (a values schema's `'Sup3r-S3cret' does not match pattern`, a
//! chart's `fail` with a value in it), and its error becomes the Release's status, an Event and
//! a log line, where a Secret's value never goes (found by a run of real charts).

use serde_json::Value;

/// What a value is shown as in its place.
const REDACTED: &str = "<redacted>";

/// Values shorter than this are replaced only where quoted: a bare `1` or `on` would be
/// replaced in every line number and word of the message, and hides nothing worth hiding.
const SHORTEST_ANYWHERE: usize = 4;

/// The strings and numbers of the Secret layers' values (no `Debug`: it holds them).
#[derive(Default, Clone)]
pub struct SecretValues(Vec<String>);

impl SecretValues {
    /// Add every string and number of `values` (a Secret layer's document).
    pub fn add(&mut self, values: &Value) {
        match values {
            Value::String(s) if !s.is_empty() => self.0.push(s.clone()),
            Value::Number(n) => self.0.push(n.to_string()),
            Value::Array(items) => items.iter().for_each(|v| self.add(v)),
            Value::Object(map) => map.values().for_each(|v| self.add(v)),
            _ => {}
        }
    }

    /// `text` with each value replaced by `<redacted>`: the longest first (a value inside
    /// another is not left half-shown); a short one only where quoted.
    pub fn redact(&self, text: &str) -> String {
        let mut values: Vec<&String> = self.0.iter().collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        let mut text = text.to_string();
        for value in values {
            if value.chars().count() >= SHORTEST_ANYWHERE {
                text = text.replace(value.as_str(), REDACTED);
                // Quoted by helm with its escapes (`\n` in a multi-line value).
                let escaped = value.escape_default().to_string();
                if escaped != *value {
                    text = text.replace(&escaped, REDACTED);
                }
            } else {
                for quote in ['\'', '"'] {
                    text = text.replace(
                        &format!("{quote}{value}{quote}"),
                        &format!("{quote}{REDACTED}{quote}"),
                    );
                }
            }
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_layers_values_are_redacted_from_a_message() {
        let mut secret = SecretValues::default();
        secret.add(
            &json!({"db": {"password": "Sup3r-S3cret-Value", "user": "app",
            "port": 5432, "tls": true, "keys": ["k-one-two", "S3cret"], "pem": "a\nb\nc\nd"}}),
        );
        let message = "values don't meet the specifications of the schema(s) in the following chart(s): mini: at '/db/password': 'Sup3r-S3cret-Value' does not match pattern '^[a-z]+$'; at '/db/user': 'app' is too short; line 5432: k-one-two and Sup3r-S3cret-Value-2; at '/db/pem': \"a\\nb\\nc\\nd\"";
        assert_eq!(
            secret.redact(message),
            "values don't meet the specifications of the schema(s) in the following chart(s): mini: at '/db/password': '<redacted>' does not match pattern '^[a-z]+$'; at '/db/user': '<redacted>' is too short; line <redacted>: <redacted> and <redacted>-2; at '/db/pem': \"<redacted>\""
        );
        assert_eq!(SecretValues::default().redact(message), message);
    }
}
