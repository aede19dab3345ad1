//! Go-style durations (`90s`, `5m`, `1h30m`, `500ms`), the format Kubernetes users write in
//! specs such as `syncPolicy.interval` and `healthAssessment.deadline`.

use std::time::Duration;

/// Why a duration string is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {input:?}: {reason} (examples: 30s, 5m, 1h30m, 500ms)")]
pub struct DurationError {
    pub input: String,
    pub reason: &'static str,
}

/// Parse a Go duration. Units: ns, us, µs, ms, s, m, h; fractions allowed (`1.5h`).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    if s.is_empty() {
        return Err(err("empty"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("missing unit"))?;
        if num_len == 0 {
            return Err(err("expected a number"));
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| err("bad number"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(err("unknown unit")),
        };
        total += value * seconds_per_unit;
        rest = &rest[unit_len..];
    }
    if !total.is_finite() || total > 1e12 {
        return Err(err("too large"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// A duration field of the API (`syncPolicy.interval`, `healthAssessment.deadline`, …):
/// parsed once, when the object is read, so no caller re-parses it or can ignore a parse
/// error. It keeps the text as written: SSA sends it back unchanged and messages quote it.
/// The CRD schema carries [`crate::engine::api::DURATION_PATTERN`], so the API server refuses
/// what this type would not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoDuration {
    text: String,
    value: Duration,
}

impl GoDuration {
    /// The duration.
    pub fn get(&self) -> Duration {
        self.value
    }

    /// The text as written (`5m`, `1h30m`).
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl std::str::FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(text: &str) -> Result<Self, DurationError> {
        Ok(GoDuration {
            value: parse_duration(text)?,
            text: text.to_string(),
        })
    }
}

impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl serde::Serialize for GoDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> serde::Deserialize<'de> for GoDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GoDuration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": crate::engine::api::DURATION_PATTERN,
        })
    }
}

/// Format a duration the way `kubectl` prints ages: `45s`, `3m12s`, `2h5m`, `3d4h`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => {
            let (m, s) = (s / 60, s % 60);
            if s == 0 {
                format!("{m}m")
            } else {
                format!("{m}m{s}s")
            }
        }
        3600..86400 => {
            let (h, m) = (s / 3600, (s % 3600) / 60);
            if m == 0 {
                format!("{h}h")
            } else {
                format!("{h}h{m}m")
            }
        }
        _ => {
            let (d, h) = (s / 86400, (s % 86400) / 3600);
            if h == 0 {
                format!("{d}d")
            } else {
                format!("{d}d{h}h")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "10", "s", "5x", "1h-3m", "m5"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn human_ages_read_like_kubectl() {
        assert_eq!(human(Duration::from_secs(45)), "45s");
        assert_eq!(human(Duration::from_secs(192)), "3m12s");
        assert_eq!(human(Duration::from_secs(7500)), "2h5m");
        assert_eq!(human(Duration::from_secs(3 * 86400 + 4 * 3600)), "3d4h");
    }
}
