//! Reader options: keys are case-insensitive (as in Spark's `CaseInsensitiveMap`), values are
//! validated with an `INVALID_OPTION` error naming the option.
//!
//! Every read option Spark 3.5 documents for JSON and CSV
//! (`sql-data-sources-json.html`, `sql-data-sources-csv.html`), and what Sluice does with it.
//! An option Spark does not know is ignored, as Spark ignores it; a documented one Sluice does
//! not implement is refused with a "not supported yet" error naming it ([`check_documented`]).
//!
//! | option | format | Sluice |
//! |---|---|---|
//! | `mode`, `columnNameOfCorruptRecord` | both | supported (`format/mod.rs`) |
//! | `timestampFormat`, `dateFormat` | both | supported: Spark's pattern letters (`datetime::SparkPattern`) |
//! | `timestampNTZFormat` | both | supported, tried after `timestampFormat` (Sluice has one timestamp type) |
//! | `enableDateTimeParsingFallback` | both | supported (`true`/`false`) |
//! | `timeZone` | both | `UTC`, `GMT`, `Z`, `+00:00` only; another zone is not supported yet |
//! | `locale` | both | `en-US`/`en` only; another locale is not supported yet |
//! | `encoding` / `charset` | both | UTF-8 only |
//! | `lineSep` | both | supported |
//! | `multiLine` | both | supported (CSV: a quoted value may span lines) |
//! | `primitivesAsString`, `prefersDecimal`, `samplingRatio`, `dropFieldIfAllNull` | JSON | schema inference only: no effect with a schema (as in Spark); Sluice always has one |
//! | `inferSchema`, `preferDate`, `samplingRatio` | CSV | schema inference only: `inferSchema=true` is not supported yet (give a schema) |
//! | `allowComments`, `allowUnquotedFieldNames`, `allowSingleQuotes`, `allowNumericLeadingZeros`, `allowBackslashEscapingAnyCharacter`, `allowUnquotedControlChars`, `allowNonNumericNumbers` | JSON | supported |
//! | `sep` / `delimiter`, `quote`, `escape`, `charToEscapeQuoteEscaping`, `comment`, `header`, `ignoreLeadingWhiteSpace`, `ignoreTrailingWhiteSpace`, `nullValue`, `nanValue`, `positiveInf`, `negativeInf`, `emptyValue`, `unescapedQuoteHandling` | CSV | supported |
//! | `enforceSchema` | CSV | supported: `true` (Spark's default) reads by position; `false` checks each file's header against the schema's names by position, ignoring case, and fails naming the file on a mismatch |
//! | `maxColumns`, `maxCharsPerColumn` | CSV | not enforced: a value other than Spark's default (20480, -1) is not supported yet |
//! | `compression`, `ignoreNullFields`, `quoteAll`, `escapeQuotes` | write options | ignored by a reader, as in Spark |

use crate::error::class;
pub use crate::time_text::parse_duration_ms;
use std::collections::HashMap;

use crate::error::{Result, SluiceError};

#[derive(Debug, Clone, Default)]
/// A reader's options, looked up without regard to case (as Spark's `CaseInsensitiveMap`).
pub struct Options {
    /// lower-cased key -> (key as written, value)
    map: HashMap<String, (String, String)>,
}

impl Options {
    /// The options as given (keys of any case).
    pub fn new(options: &HashMap<String, String>) -> Self {
        let mut keys: Vec<&String> = options.keys().collect();
        // Deterministic when two keys differ only in case: the last in sorted order wins.
        keys.sort();
        let mut map = HashMap::new();
        for k in keys {
            let v = &options[k];
            map.insert(k.to_ascii_lowercase(), (k.clone(), v.clone()));
        }
        Self { map }
    }

    /// The value of `key`, in any case.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map
            .get(&key.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }

    /// The error for a value of `key` that does not parse (`INVALID_OPTION`).
    pub fn invalid(key: &str, value: &str, expected: &str) -> SluiceError {
        SluiceError::query(
            class::INVALID_OPTION,
            format!("invalid value {value:?} for the option '{key}': {expected}"),
        )
    }

    /// `true`/`false` (case-insensitive), else the default.
    pub fn bool(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(key) {
            None => Ok(default),
            Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
            Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
            Some(v) => Err(Self::invalid(key, v, "expected true or false")),
        }
    }

    /// A positive integer.
    pub fn positive(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.trim().parse::<u64>() {
                Ok(n) if n > 0 && n <= i64::MAX as u64 => Ok(Some(n)),
                _ => Err(Self::invalid(key, v, "must be a positive integer")),
            },
        }
    }

    /// A single character (`""` means none, `\0`); Spark's `CSVOptions.getChar`.
    pub fn char_or(&self, key: &str, default: char) -> Result<char> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => {
                let mut it = v.chars();
                match (it.next(), it.next()) {
                    (None, _) => Ok('\0'),
                    (Some(c), None) => Ok(c),
                    _ => Err(Self::invalid(key, v, "must be a single character")),
                }
            }
        }
    }

    /// A duration like `7d`, `12h`, `30m`, `10s`, `500ms` (no unit: milliseconds), as Spark's
    /// `Utils.timeStringAsMs`.
    pub fn duration_ms(&self, key: &str) -> Result<Option<i64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        parse_duration_ms(v).map(Some).ok_or_else(|| {
            Self::invalid(
                key,
                v,
                "expected a duration such as 7d, 12h, 30m, 10s or 500ms",
            )
        })
    }
}

/// The datetime options of the JSON and CSV readers, compiled; a pattern letter Sluice cannot
/// parse with is refused, naming the option.
pub fn datetime_formats(opts: &Options) -> Result<super::datetime::DatetimeFormats> {
    let compile = |key: &str| {
        opts.get(key)
            .map(|v| super::datetime::SparkPattern::compile(key, v))
            .transpose()
            .map_err(SluiceError::not_supported_yet)
    };
    let fallback = match opts.get("enableDateTimeParsingFallback") {
        None => None,
        Some(_) => Some(opts.bool("enableDateTimeParsingFallback", false)?),
    };
    Ok(super::datetime::DatetimeFormats {
        timestamp: compile("timestampFormat")?,
        timestamp_ntz: compile("timestampNTZFormat")?,
        date: compile("dateFormat")?,
        fallback,
    })
}

/// Refuses the documented JSON/CSV read options whose value asks for something Sluice does not
/// do yet (see the table in the module doc); accepts their defaults.
pub fn check_documented(format: &str, opts: &Options) -> Result<()> {
    let refuse = |key: &str, v: &str, what: &str| {
        Err(SluiceError::not_supported_yet(format!(
            "the {format} option '{key}' = {v:?} is not supported yet: {what}"
        )))
    };
    if let Some(v) = opts.get("timeZone") {
        let t = v.trim().to_ascii_uppercase();
        if !matches!(
            t.as_str(),
            "UTC" | "GMT" | "Z" | "+00:00" | "UTC+00:00" | "ETC/UTC"
        ) {
            return refuse(
                "timeZone",
                v,
                "values without an offset are read as UTC (remove the option, or give the                  offset in the data)",
            );
        }
    }
    if let Some(v) = opts.get("locale") {
        let t = v.trim().to_ascii_lowercase().replace('_', "-");
        if !matches!(t.as_str(), "en-us" | "en") {
            return refuse(
                "locale",
                v,
                "month and day names are read in English (en-US)",
            );
        }
    }
    if format == "csv" {
        if opts.bool("inferSchema", false)? {
            return refuse(
                "inferSchema",
                "true",
                "give the schema with .schema(\"a INT, b STRING\")",
            );
        }
        if let Some(v) = opts.get("maxColumns") {
            if v.trim() != "20480" {
                return refuse("maxColumns", v, "the number of columns is not limited");
            }
        }
        if let Some(v) = opts.get("maxCharsPerColumn") {
            if v.trim() != "-1" {
                return refuse(
                    "maxCharsPerColumn",
                    v,
                    "the length of a value is not limited",
                );
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn case_insensitive_and_validated() {
        let mut m = HashMap::new();
        m.insert("MaxFilesPerTrigger".to_string(), "3".to_string());
        m.insert("header".to_string(), "TRUE".to_string());
        m.insert("latestFirst".to_string(), "yes".to_string());
        m.insert("maxBytesPerTrigger".to_string(), "-1".to_string());
        let o = Options::new(&m);
        assert_eq!(o.positive("maxfilespertrigger").unwrap(), Some(3));
        assert!(o.bool("HEADER", false).unwrap());
        let e = o.bool("latestFirst", false).unwrap_err();
        assert_eq!(e.class(), "INVALID_OPTION");
        assert!(e.message().contains("latestFirst"));
        assert!(o.positive("maxBytesPerTrigger").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("7d"), Some(7 * 86_400_000));
        assert_eq!(parse_duration_ms("1h"), Some(3_600_000));
        assert_eq!(parse_duration_ms("30 min"), Some(1_800_000));
        assert_eq!(parse_duration_ms("1500"), Some(1500));
        assert_eq!(parse_duration_ms("2 weeks"), None);
    }
}
