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
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::{datetime, nested};
use crate::schema::spark_type_name;

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
pub fn datetime_formats(opts: &Options) -> Result<datetime::DatetimeFormats> {
    let compile = |key: &str| {
        opts.get(key)
            .map(|v| datetime::SparkPattern::compile(key, v))
            .transpose()
            .map_err(SluiceError::not_supported_yet)
    };
    let fallback = match opts.get("enableDateTimeParsingFallback") {
        None => None,
        Some(_) => Some(opts.bool("enableDateTimeParsingFallback", false)?),
    };
    Ok(datetime::DatetimeFormats {
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

/// How bad records are handled (Spark's `mode` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseMode {
    /// `PERMISSIVE` (the default): a bad record is a row of nulls (or its bad fields null), counted.
    Permissive,
    /// `DROPMALFORMED`: a bad record is dropped, counted.
    DropMalformed,
    /// `FAILFAST`: a bad record fails the query, naming its file and line.
    FailFast,
}

/// JSON reader options (Spark's `JSONOptions` that matter when a schema is given).
#[derive(Debug, Clone)]
pub struct JsonOptions {
    /// `multiLine`: a file is one document (or an array of them), not JSON lines.
    pub multi_line: bool,
    /// `allowSingleQuotes` (default true).
    pub allow_single_quotes: bool,
    /// `allowNonNumericNumbers`: `NaN`, `Infinity`, `-Infinity` (default true).
    pub allow_non_numeric_numbers: bool,
    /// `allowComments`: Java/C++ comments.
    pub allow_comments: bool,
    /// `allowUnquotedFieldNames`.
    pub allow_unquoted_field_names: bool,
    /// `allowNumericLeadingZeros`.
    pub allow_numeric_leading_zeros: bool,
    /// `allowUnquotedControlChars`.
    pub allow_unquoted_control_chars: bool,
    /// `allowBackslashEscapingAnyCharacter`.
    pub allow_backslash_escaping_any_character: bool,
    /// `lineSep`: the record separator (none: `\n`, `\r\n` or `\r`).
    pub line_sep: Option<String>,
    /// `timestampFormat`, `dateFormat`, `timestampNTZFormat`, `enableDateTimeParsingFallback`.
    pub datetime: datetime::DatetimeFormats,
}

/// CSV reader options (Spark's `CSVOptions`).
#[derive(Debug, Clone)]
pub struct CsvOptions {
    /// `header`: the first line of each file names the columns.
    pub header: bool,
    /// `sep` / `delimiter` (default `,`).
    pub sep: u8,
    /// 0: no quoting.
    pub quote: u8,
    /// 0: no escape character.
    pub escape: u8,
    /// 0: none.
    pub escape_escape: u8,
    /// `comment`: lines starting with this character are skipped.
    pub comment: Option<u8>,
    /// `nullValue`: the text of a null (default empty).
    pub null_value: String,
    /// `emptyValue`: the text of an empty string.
    pub empty_value: String,
    /// `nanValue` (default `NaN`).
    pub nan_value: String,
    /// `positiveInf` (default `Inf`).
    pub positive_inf: String,
    /// `negativeInf` (default `-Inf`).
    pub negative_inf: String,
    /// `ignoreLeadingWhiteSpace`.
    pub ignore_leading_ws: bool,
    /// `ignoreTrailingWhiteSpace`.
    pub ignore_trailing_ws: bool,
    /// `enforceSchema=false`: each file's header must name the schema's columns, by position,
    /// ignoring case (Spark's `CSVHeaderChecker`).
    pub check_header: bool,
    /// `lineSep`: the record separator (none: `\n`, `\r\n` or `\r`).
    pub line_sep: Option<String>,
    /// `multiLine`: a quoted value may span lines (records are split outside quotes only).
    pub multi_line: bool,
    /// `timestampFormat`, `dateFormat`, `timestampNTZFormat`, `enableDateTimeParsingFallback`.
    pub datetime: datetime::DatetimeFormats,
}

#[derive(Debug, Clone)]
/// Text reader options (Spark's `TextOptions`).
pub struct TextOptions {
    /// `wholetext`: a file is one row.
    pub whole_text: bool,
    /// `lineSep`: the line separator (none: `\n`, `\r\n` or `\r`).
    pub line_sep: Option<String>,
}

#[derive(Debug, Clone)]
/// The record format and its options.
pub enum FormatKind {
    /// JSON lines or (`multiLine`) JSON documents.
    Json(JsonOptions),
    /// CSV.
    Csv(CsvOptions),
    /// Text: one `value` column per line (or file).
    Text(TextOptions),
    /// Parquet: batches come decoded; only the schema is adapted.
    Parquet,
}

/// Everything a reader needs: the format options, the output schema and the parse mode.
#[derive(Debug, Clone)]
pub struct ParseOptions {
    /// The format and its options.
    pub kind: FormatKind,
    /// The output schema: the given schema with every field nullable.
    pub schema: SchemaRef,
    /// What a bad record does (`mode`).
    pub mode: ParseMode,
    /// The column that receives the raw text of bad records (json/csv), if the schema has it.
    pub corrupt_idx: Option<usize>,
    /// The schema columns filled from the data, in order (all but the corrupt-record column).
    pub data_fields: Vec<usize>,
    /// `ignoreMissingFiles`: a listed file that vanished is skipped.
    pub ignore_missing_files: bool,
    /// `ignoreCorruptFiles`: a file that cannot be read or decoded is skipped.
    pub ignore_corrupt_files: bool,
}

/// The schema with every field nullable, inside nested types too (the readers' output
/// schema, Spark's `asNullable`).
pub fn nullable_schema(schema: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| nested::nullable_field(f))
        .collect();
    if fields
        .iter()
        .zip(schema.fields().iter())
        .all(|(a, b)| a == b.as_ref())
    {
        return schema.clone();
    }
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// The schema of the `text` format.
pub fn text_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("value", DataType::Utf8, true)]))
}

fn opt_char_ascii(key: &str, c: char) -> Result<u8> {
    if c == '\0' {
        return Ok(0);
    }
    if !c.is_ascii() {
        return Err(SluiceError::not_supported_yet(format!(
            "the option '{key}' = {c:?}: only ASCII characters are supported yet"
        )));
    }
    Ok(c as u8)
}

/// Spark's `CSVExprUtils.toChar` for `sep`: one character or an escape such as `\t`.
fn parse_sep(v: &str) -> Result<u8> {
    let c = match v {
        "" => {
            return Err(Options::invalid(
                "sep",
                v,
                "the delimiter cannot be an empty string",
            ))
        }
        "\\t" => '\t',
        "\\r" => '\r',
        "\\b" => '\u{8}',
        "\\f" => '\u{c}',
        "\\\"" => '"',
        "\\'" => '\'',
        "\\n" => '\n',
        "\\\\" => '\\',
        "\\" => {
            return Err(Options::invalid(
                "sep",
                v,
                "a single backslash is not allowed; use two backslashes for the backslash \
                 character",
            ))
        }
        s if s.chars().count() == 1 => s.chars().next().unwrap_or(','),
        s => {
            return Err(SluiceError::not_supported_yet(format!(
                "the CSV delimiter {s:?} has more than one character; multi-character \
                 delimiters are not supported yet"
            )))
        }
    };
    if !c.is_ascii() {
        return Err(SluiceError::not_supported_yet(format!(
            "the CSV delimiter {c:?} is not ASCII; only ASCII delimiters are supported yet"
        )));
    }
    Ok(c as u8)
}

impl ParseOptions {
    /// Validates the options of `format` against `schema` (the given, not yet nullable one).
    pub fn new(format: &str, schema: &SchemaRef, opts: &Options) -> Result<Self> {
        let schema = nullable_schema(schema);
        let mode = match opts.get("mode") {
            None => ParseMode::Permissive,
            Some(m) => match m.trim().to_ascii_uppercase().as_str() {
                "PERMISSIVE" => ParseMode::Permissive,
                "DROPMALFORMED" => ParseMode::DropMalformed,
                "FAILFAST" => ParseMode::FailFast,
                _ => {
                    return Err(Options::invalid(
                        "mode",
                        m,
                        "expected PERMISSIVE, DROPMALFORMED or FAILFAST",
                    ))
                }
            },
        };
        let datetime = datetime_formats(opts)?;
        check_documented(format, opts)?;
        for key in ["encoding", "charset"] {
            if let Some(v) = opts.get(key) {
                let norm = v.trim().to_ascii_lowercase().replace(['-', '_'], "");
                if norm != "utf8" {
                    return Err(SluiceError::not_supported_yet(format!(
                        "the option '{key}' = {v:?}: only UTF-8 files are supported yet"
                    )));
                }
            }
        }
        let line_sep = match opts.get("lineSep") {
            Some("") => return Err(Options::invalid("lineSep", "", "it cannot be empty")),
            Some(s) => Some(s.to_string()),
            None => None,
        };
        let ignore_missing_files = opts.bool("ignoreMissingFiles", false)?;
        let ignore_corrupt_files = opts.bool("ignoreCorruptFiles", false)?;
        let kind = match format {
            "json" => {
                if opts.bool("multiLine", false)? && line_sep.is_some() {
                    return Err(Options::invalid(
                        "lineSep",
                        opts.get("lineSep").unwrap_or(""),
                        "it cannot be combined with multiLine=true",
                    ));
                }
                FormatKind::Json(JsonOptions {
                    multi_line: opts.bool("multiLine", false)?,
                    allow_single_quotes: opts.bool("allowSingleQuotes", true)?,
                    allow_non_numeric_numbers: opts.bool("allowNonNumericNumbers", true)?,
                    allow_comments: opts.bool("allowComments", false)?,
                    allow_unquoted_field_names: opts.bool("allowUnquotedFieldNames", false)?,
                    allow_numeric_leading_zeros: opts.bool("allowNumericLeadingZeros", false)?,
                    allow_unquoted_control_chars: opts.bool("allowUnquotedControlChars", false)?,
                    allow_backslash_escaping_any_character: opts
                        .bool("allowBackslashEscapingAnyCharacter", false)?,
                    line_sep,
                    datetime,
                })
            }
            "csv" => {
                let sep = match opts.get("sep").or_else(|| opts.get("delimiter")) {
                    None => b',',
                    Some(v) => parse_sep(v)?,
                };
                let quote_c = opts.char_or("quote", '"')?;
                let quote = opt_char_ascii("quote", quote_c)?;
                let escape_c = opts.char_or("escape", '\\')?;
                let escape = opt_char_ascii("escape", escape_c)?;
                let escape_escape = match opts.get("charToEscapeQuoteEscaping") {
                    Some(_) => {
                        let c = opts.char_or("charToEscapeQuoteEscaping", '\0')?;
                        opt_char_ascii("charToEscapeQuoteEscaping", c)?
                    }
                    // univocity: the escape character itself, unless it equals the quote.
                    None if quote == escape => 0,
                    None => escape,
                };
                let comment = match opts.get("comment") {
                    None | Some("") => None,
                    Some(_) => {
                        let c = opts.char_or("comment", '#')?;
                        if c == '\0' {
                            None
                        } else {
                            Some(opt_char_ascii("comment", c)?)
                        }
                    }
                };
                if let Some(h) = opts.get("unescapedQuoteHandling") {
                    if !h.eq_ignore_ascii_case("STOP_AT_DELIMITER") {
                        return Err(SluiceError::not_supported_yet(format!(
                            "the CSV option unescapedQuoteHandling={h}: only STOP_AT_DELIMITER \
                             (the default) is supported yet"
                        )));
                    }
                }
                if let Some(ls) = &line_sep {
                    if ls.chars().count() != 1 {
                        return Err(Options::invalid(
                            "lineSep",
                            ls,
                            "the CSV line separator must be a single character",
                        ));
                    }
                }
                FormatKind::Csv(CsvOptions {
                    header: opts.bool("header", false)?,
                    sep,
                    quote,
                    escape,
                    escape_escape,
                    comment,
                    null_value: opts.get("nullValue").unwrap_or("").to_string(),
                    empty_value: opts.get("emptyValue").unwrap_or("").to_string(),
                    nan_value: opts.get("nanValue").unwrap_or("NaN").to_string(),
                    positive_inf: opts.get("positiveInf").unwrap_or("Inf").to_string(),
                    negative_inf: opts.get("negativeInf").unwrap_or("-Inf").to_string(),
                    ignore_leading_ws: opts.bool("ignoreLeadingWhiteSpace", false)?,
                    ignore_trailing_ws: opts.bool("ignoreTrailingWhiteSpace", false)?,
                    check_header: !opts.bool("enforceSchema", true)?,
                    multi_line: opts.bool("multiLine", false)?,
                    line_sep,
                    datetime,
                })
            }
            "text" => FormatKind::Text(TextOptions {
                whole_text: opts.bool("wholetext", false)?,
                line_sep,
            }),
            "parquet" => FormatKind::Parquet,
            other => {
                return Err(SluiceError::query(
                    class::UNSUPPORTED_DATA_SOURCE,
                    format!("{other} is not a file format; use json, csv, parquet or text"),
                ))
            }
        };

        let mut corrupt_idx = None;
        if matches!(kind, FormatKind::Json(_))
            && schema
                .fields()
                .iter()
                .any(|f| nested::non_string_map_key(f.data_type()))
        {
            return Err(SluiceError::query(
                class::INVALID_JSON_SCHEMA_MAP_TYPE,
                format!(
                    "Input schema \"{}\" can only contain STRING as a key type for a MAP.",
                    spark_type_name(&DataType::Struct(schema.fields().clone()))
                ),
            ));
        }
        match &kind {
            FormatKind::Json(_) | FormatKind::Csv(_) => {
                let corrupt_name = opts
                    .get("columnNameOfCorruptRecord")
                    .unwrap_or("_corrupt_record");
                for (i, f) in schema.fields().iter().enumerate() {
                    if f.name() == corrupt_name {
                        if f.data_type() != &DataType::Utf8 {
                            return Err(SluiceError::query(
                                class::INVALID_CORRUPT_RECORD_TYPE,
                                format!(
                                    "the column `{corrupt_name}` for corrupt records must have \
                                     the nullable STRING type, but got {}",
                                    spark_type_name(f.data_type())
                                ),
                            ));
                        }
                        corrupt_idx = Some(i);
                        continue;
                    }
                    check_parsable_type(format, f)?;
                }
            }
            FormatKind::Text(_) => {
                if schema.fields().len() != 1 || schema.field(0).data_type() != &DataType::Utf8 {
                    return Err(SluiceError::query(
                        class::INVALID_SCHEMA,
                        format!(
                            "the text format reads a single STRING column (value STRING), but \
                             the schema is {}",
                            crate::schema::schema_to_ddl(&schema)
                        ),
                    ));
                }
            }
            FormatKind::Parquet => {}
        }
        let data_fields = (0..schema.fields().len())
            .filter(|i| Some(*i) != corrupt_idx)
            .collect();
        Ok(Self {
            kind,
            schema,
            mode,
            corrupt_idx,
            data_fields,
            ignore_missing_files,
            ignore_corrupt_files,
        })
    }
}

fn check_parsable_type(format: &str, f: &Field) -> Result<()> {
    if nested::is_nested(f.data_type()) {
        if format != "json" {
            // Spark 3.5: the CSV (and text) data sources refuse nested columns.
            return Err(unsupported_for_datasource(format, f));
        }
        if nested::readable(f.data_type()) {
            return Ok(());
        }
    }
    match f.data_type() {
        DataType::Utf8
        | DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal128(_, _)
        | DataType::Date32
        | DataType::Timestamp(TimeUnit::Microsecond, _) => Ok(()),
        other => Err(SluiceError::not_supported_yet(format!(
            "column `{}` has the type {} ({other}), which the {format} reader does not \
             support yet",
            f.name(),
            spark_type_name(other)
        ))),
    }
}

/// Spark's `UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE` for column `f` of a `format` source or sink.
pub fn unsupported_for_datasource(format: &str, f: &Field) -> SluiceError {
    SluiceError::query(
        class::UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE,
        format!(
            "The {} datasource doesn't support the column `{}` of the type \"{}\".",
            format.to_ascii_uppercase(),
            f.name(),
            spark_type_name(f.data_type())
        ),
    )
}
