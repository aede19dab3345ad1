//! The names helm gives a chart archive's entries, read as Go's `archive/tar` reads them.
//!
//! The values schema check must see the files helm loads, and the `tar` crate does not take
//! an archive apart as Go does: it ignores a GNU long name or PAX header in a header without
//! the `ustar` magic (Go applies it to the next entry), keeps the first of two PAX `path`
//! records (Go the last), reads a STAR header's times as part of its name, and skips the
//! data a directory or link header claims (Go reads the next header right after it). Each
//! hid a `values.schema.json` from the check. So the raw headers are read here with Go's
//! rules, and what the two readers could still disagree on (sparse files, PAX sizes, GNU
//! headers with times, sizes written differently) is refused: `helm package` writes none
//! of it.

use std::io::Read;

/// Go's limit on a GNU long name or PAX header's data (`maxSpecialFileSize`).
const MOST_SPECIAL_BYTES: u64 = 1 << 20;

/// Why an entry's name could not be told.
#[derive(Debug)]
pub enum NameError {
    Io(std::io::Error),
    /// The archive holds what Go and the `tar` crate read differently.
    Ambiguous(String),
}

impl From<std::io::Error> for NameError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// What the headers before an entry said about its name.
#[derive(Default)]
pub struct Names {
    long_name: Option<String>,
    pax_path: Option<String>,
}

impl Names {
    /// The name helm gives `entry` (a raw entry: `Entries::raw(true)`), relative to the
    /// chart's root; `None` for what helm does not read as a file (directories, GNU and PAX
    /// headers).
    pub fn name_of<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<Option<String>, NameError> {
        let block = *entry.header().as_bytes();
        let header = Header::read(&block).map_err(NameError::Ambiguous)?;
        if entry.header().entry_size().ok() != Some(header.size) {
            return Err(NameError::Ambiguous(format!(
                "{:?} writes its size in a way tar readers read differently",
                header.name
            )));
        }
        match header.kind {
            b'L' => {
                self.long_name = Some(parse_string(&read_special(entry)?));
                return Ok(None);
            }
            b'K' => {
                read_special(entry)?;
                return Ok(None);
            }
            b'x' => {
                self.pax_path = pax_path(&read_special(entry)?)?;
                return Ok(None);
            }
            b'g' => {
                // Go hands a global header back as an entry of its own (helm skips it): what
                // came before it describes nothing.
                pax_path(&read_special(entry)?)?;
                *self = Self::default();
                return Ok(None);
            }
            b'S' => {
                return Err(NameError::Ambiguous(format!(
                    "{:?} is a GNU sparse file",
                    header.name
                )));
            }
            _ => {}
        }
        let mut name = header.name;
        if let Some(path) = self.pax_path.take() {
            name = path;
        }
        if let Some(long) = self.long_name.take().filter(|n| !n.is_empty()) {
            name = long;
        }
        let kind = match header.kind {
            0 if name.ends_with('/') => b'5',
            k => k,
        };
        if matches!(kind, b'1'..=b'6') && header.size != 0 {
            return Err(NameError::Ambiguous(format!(
                "{name:?} is a link or directory with {} bytes of data, which tar readers skip differently",
                header.size
            )));
        }
        // helm skips directories by type or by mode (`c_ISDIR`).
        if kind == b'5' || header.mode & !0o7777 == 0o40000 {
            return Ok(None);
        }
        Ok(Some(helm_name(&name)))
    }
}

/// The name helm loads an archive entry under: split at backslashes if it holds one (else at
/// slashes), its first part (the chart's directory) dropped, cleaned as Go's `path.Clean`.
pub fn helm_name(name: &str) -> String {
    let delimiter = if name.contains('\\') { '\\' } else { '/' };
    let rest = name.split_once(delimiter).map_or("", |(_, rest)| rest);
    clean(&rest.replace(delimiter, "/"))
}

/// Go's `path.Clean` (`filepath.Clean` on Unix): what helm makes of an entry's name, and
/// kustomize of a path a kustomization names.
pub(super) fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// One header block, as Go's `readHeader` reads it.
struct Header {
    kind: u8,
    name: String,
    size: u64,
    mode: u64,
}

impl Header {
    fn read(block: &[u8; 512]) -> Result<Self, String> {
        let mut name = parse_string(&block[..100]);
        let magic = &block[257..263];
        let prefix = if magic == b"ustar\0" && &block[508..512] == b"tar\0" {
            // STAR: a shorter prefix, then times.
            parse_string(&block[345..476])
        } else if magic == b"ustar\0" {
            parse_string(&block[345..500])
        } else if magic == b"ustar " && &block[263..265] == b" \0" {
            // GNU: Go reads the prefix area as times, and as a prefix again when they do
            // not parse; either way, no archive helm writes sets them.
            if block[345] != 0 || block[357] != 0 {
                return Err(format!(
                    "{name:?} has a GNU header with access or change times, which tar readers take apart differently"
                ));
            }
            String::new()
        } else {
            String::new()
        };
        if !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
        let size = parse_octal(&block[124..136])
            .ok_or_else(|| format!("{name:?} has a size that is not plain octal"))?;
        Ok(Self {
            kind: block[156],
            size,
            mode: parse_octal(&block[100..108]).unwrap_or(0),
            name,
        })
    }
}

/// Go's `parseString`: up to the first NUL.
fn parse_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Go's `parseOctal`, without base-256 (sizes past 8 GiB): spaces and NULs trimmed at both
/// ends, then up to the first NUL, in octal digits only.
fn parse_octal(field: &[u8]) -> Option<u64> {
    let trim = |b: &u8| *b == b' ' || *b == 0;
    let start = field.iter().position(|b| !trim(b)).unwrap_or(field.len());
    let end = field
        .iter()
        .rposition(|b| !trim(b))
        .map_or(start, |i| i + 1);
    let digits = &field[start..end];
    let digits = &digits[..digits.iter().position(|b| *b == 0).unwrap_or(digits.len())];
    if digits.is_empty() {
        return Some(0);
    }
    if !digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(digits).ok()?, 8).ok()
}

fn read_special<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Vec<u8>, NameError> {
    let mut data = Vec::new();
    entry.take(MOST_SPECIAL_BYTES + 1).read_to_end(&mut data)?;
    if data.len() as u64 > MOST_SPECIAL_BYTES {
        return Err(NameError::Ambiguous(format!(
            "a GNU or PAX header holds more than {MOST_SPECIAL_BYTES} bytes"
        )));
    }
    Ok(data)
}

/// A PAX header's `path`, read as Go's `parsePAX` reads its records (a later record of a key
/// replaces an earlier one); records that change where the next header starts (`size`,
/// sparse maps) are refused.
fn pax_path(data: &[u8]) -> Result<Option<String>, NameError> {
    let malformed = || NameError::Ambiguous("a PAX header's records are malformed".into());
    let mut rest = data;
    let mut path = None;
    while !rest.is_empty() {
        let space = rest.iter().position(|b| *b == b' ').ok_or_else(malformed)?;
        let length: usize = std::str::from_utf8(&rest[..space])
            .ok()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .ok_or_else(malformed)?;
        if length < 5 || length > rest.len() || length <= space + 1 {
            return Err(malformed());
        }
        let record = &rest[space + 1..length];
        let (record, newline) = record.split_at(record.len() - 1);
        if newline != b"\n" {
            return Err(malformed());
        }
        let equals = record
            .iter()
            .position(|b| *b == b'=')
            .ok_or_else(malformed)?;
        let (key, value) = (&record[..equals], &record[equals + 1..]);
        if key.is_empty() || key.contains(&0) || value.contains(&0) {
            return Err(malformed());
        }
        if key == b"size" || key.starts_with(b"GNU.sparse.") {
            return Err(NameError::Ambiguous(format!(
                "a PAX header sets {}, which tar readers apply differently",
                String::from_utf8_lossy(key)
            )));
        }
        if key == b"path" {
            path = Some(String::from_utf8_lossy(value).into_owned());
        }
        rest = &rest[length..];
    }
    // Go's mergePAX leaves the header's name where the last `path` record is empty.
    Ok(path.filter(|p: &String| !p.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cleaned_as_go_cleans_them() {
        for (name, helm) in [
            ("web/values.schema.json", "values.schema.json"),
            ("db/values.schema.json/x/..", "values.schema.json"),
            ("web/charts/./db.tgz", "charts/db.tgz"),
            ("db\\values.schema.json", "values.schema.json"),
            ("x/y\\charts/db.tgz", "charts/db.tgz"),
            ("web//a/../../b", "/b"),
            ("web/a/../../b", "../b"),
            ("Chart.yaml", "."),
        ] {
            assert_eq!(helm_name(name), helm, "{name}");
        }
    }

    #[test]
    fn octal_fields_are_read_as_go_reads_them() {
        assert_eq!(parse_octal(b"00000000012\0"), Some(10));
        assert_eq!(parse_octal(b" \0\x0012 \0"), Some(10));
        assert_eq!(parse_octal(b"12\x0034\0\0\0\0\0\0"), Some(10));
        assert_eq!(parse_octal(b"\0\0\0\0\0\0\0\0\0\0\0\0"), Some(0));
        assert_eq!(parse_octal(b"+12\0"), None);
        assert_eq!(parse_octal(b"19\0"), None);
    }

    #[test]
    fn a_later_pax_path_replaces_an_earlier_one() {
        let data = b"16 path=db/zzz2\n30 path=db/values.schema.json\n";
        assert_eq!(
            pax_path(data).unwrap().as_deref(),
            Some("db/values.schema.json")
        );
        assert!(matches!(
            pax_path(b"13 size=1024\n"),
            Err(NameError::Ambiguous(_))
        ));
        assert!(matches!(
            pax_path(b"99 path=x\n"),
            Err(NameError::Ambiguous(_))
        ));
        // An empty last path leaves the header's name (an empty name hid the entry).
        assert_eq!(pax_path(b"8 path=\n").unwrap(), None);
        assert_eq!(pax_path(b"11 path=db\n8 path=\n").unwrap(), None);
    }
}
