//! JSON text with the characters YAML refuses or reads as line breaks written as escapes.
//!
//! serde_json writes DEL, C1 controls (U+0080..U+009F, NEL among them) and the line and
//! paragraph separators U+2028/U+2029 as they are. YAML refuses the first two and breaks
//! lines at the others, and terminals take C1 controls as commands. An API server reads an
//! apply body as YAML, and convoy's `-o json` and JSON logs go to terminals, so all three
//! write them as `\u009b`: inside a JSON string (the only place serde_json puts them) that is
//! the same character.

use std::borrow::Cow;

fn escaped(c: char) -> bool {
    matches!(c, '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}')
}

/// `json` (as serde_json writes it) with those characters as JSON escapes.
pub fn yaml_safe(json: &str) -> Cow<'_, str> {
    if !json.chars().any(escaped) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if escaped(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_escaped_text_holds_the_same_value_and_no_control() {
        let value = serde_json::json!({"message": "a\u{9b}b\u{85}c\u{2028}d\u{7f}e ü\u{1b}",
            "k\u{9f}": [1, "x"]});
        let json = serde_json::to_string(&value).unwrap();
        let text = super::yaml_safe(&json);
        assert!(
            !text.chars().any(|c| c.is_control() || c == '\u{2028}'),
            "{text:?}"
        );
        assert!(text.contains(r"\u009b") && text.contains(r"\u2028") && text.contains('ü'));
        let back: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
        assert!(matches!(
            super::yaml_safe("{\"a\": \"ü\"}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
