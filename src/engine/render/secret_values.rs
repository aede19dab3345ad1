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
    /// another is not left half-shown); a short one only where quoted. Each value also as helm
    /// and its schema library quote it (Go's `%q`, a single-quoted form with `\'`, Rust's
    /// escapes), and each line of a multi-line value on its own (helm's error joins or indents
    /// lines; found by a review: a PEM in a chart's `fail` was shown whole), and as `b64enc`
    /// gives it (how a chart puts a value into a Secret's `data`, which an error quoting the
    /// rendered object would show).
    pub fn redact(&self, text: &str) -> String {
        use base64::Engine as _;
        let mut forms: Vec<String> = Vec::new();
        for value in &self.0 {
            forms.push(value.clone());
            forms.extend(quoted_forms(value));
            forms.push(base64::engine::general_purpose::STANDARD.encode(value));
            if value.contains('\n') {
                forms.extend(
                    value
                        .lines()
                        .map(str::trim)
                        .filter(|l| l.chars().count() >= SHORTEST_ANYWHERE)
                        .map(str::to_string),
                );
            }
        }
        forms.sort_by_key(|v| std::cmp::Reverse(v.len()));
        forms.dedup();
        let mut text = text.to_string();
        for form in forms {
            if form.chars().count() >= SHORTEST_ANYWHERE {
                text = text.replace(form.as_str(), REDACTED);
            } else {
                for quote in ['\'', '"'] {
                    text = text.replace(
                        &format!("{quote}{form}{quote}"),
                        &format!("{quote}{REDACTED}{quote}"),
                    );
                }
            }
        }
        text
    }
}

/// `value` as the tools quote it, where that differs from the value.
fn quoted_forms(value: &str) -> Vec<String> {
    let escape = |quote: char| {
        let mut out = String::new();
        for c in value.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c == quote => {
                    out.push('\\');
                    out.push(c);
                }
                c => out.push(c),
            }
        }
        out
    };
    let mut forms = vec![
        escape('"'),
        escape('\''),
        value.escape_default().to_string(),
        value.escape_debug().to_string(),
    ];
    forms.retain(|f| f != value);
    forms
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

    /// A chart's `b64enc` of a value (a Secret's `data`) is the value too.
    #[test]
    fn a_value_as_b64enc_gives_it_is_redacted() {
        let mut secret = SecretValues::default();
        secret.add(&json!({"password": "Sup3r-S3cret-Value", "pin": "42"}));
        let message = "Secret \"db\" is invalid: data: {\"password\": \"U3VwM3ItUzNjcmV0LVZhbHVl\", \"pin\": \"NDI=\"}";
        assert_eq!(
            secret.redact(message),
            "Secret \"db\" is invalid: data: {\"password\": \"<redacted>\", \"pin\": \"<redacted>\"}"
        );
    }

    /// Found by a review, with helm's own output: a PEM in a chart's `fail` (lines joined by
    /// the message), and passwords with quotes and backslashes as helm's schema errors quote
    /// them.
    #[test]
    fn a_value_is_redacted_however_helm_quotes_or_splits_it() {
        let mut secret = SecretValues::default();
        secret.add(&json!({"pem": "-----BEGIN KEY-----\nMIIsecretLINEone\nTopSecretLineTwo\n-----END KEY-----\n",
            "a": "Ab\"c\\d9xyz", "b": "pä\"ss\nwo'rd"}));
        let joined =
            "bad key: -----BEGIN KEY-----; MIIsecretLINEone; TopSecretLineTwo; -----END KEY-----";
        let shown = secret.redact(joined);
        assert!(
            !shown.contains("secretLINE") && !shown.contains("SecretLine"),
            "{shown}"
        );
        for quoted in [
            "at '/a': 'Ab\"c\\\\d9xyz' does not match",
            "at '/a': \"Ab\\\"c\\\\d9xyz\" does not match",
            "at '/b': 'pä\"ss\\nwo\\'rd' does not match",
        ] {
            let shown = secret.redact(quoted);
            assert!(
                shown.contains(REDACTED) && !shown.contains("9xyz") && !shown.contains("wo"),
                "{quoted} -> {shown}"
            );
        }
    }
}
