//! Spark's CSV expressions: `from_csv(text, 'a INT, b DOUBLE'[, options])`,
//! `to_csv(struct[, options])` and `schema_of_csv('1,abc'[, options])`.
//!
//! They reuse the CSV reader (`source/file/format/csv.rs`): its tokenizer (quotes, escapes,
//! `sep`, `nullValue`, ..), its conversions and parse modes, and its option checks
//! (`source/file/options.rs`), so a CSV column parses exactly as a CSV file would.
//!
//! - `from_csv`: one record per text (its first line); `mode` PERMISSIVE (Spark's default: a
//!   field that does not fit its type is null, the other fields kept; missing fields null) or
//!   FAILFAST (an error); DROPMALFORMED is refused as Spark refuses it. A null text is a null
//!   struct, a blank one a struct of nulls.
//! - `to_csv`: Spark's `UnivocityGenerator` with its write defaults: `sep` `,`, `quote` `"`,
//!   `escape` `\`, `nullValue` empty, `emptyValue` `""`, `quoteAll` false, `escapeQuotes` true,
//!   `ignoreLeadingWhiteSpace`/`ignoreTrailingWhiteSpace` true, timestamps as
//!   `yyyy-MM-dd'T'HH:mm:ss.SSSXXX` and dates as `yyyy-MM-dd` unless `timestampFormat` /
//!   `dateFormat` say otherwise. A field is quoted when it holds the separator, a quote, a line
//!   break, or is empty. Nested fields are not supported yet (Spark writes their internal
//!   `toString`).
//! - `schema_of_csv`: Spark's `CSVInferSchema` over one line (`format::csv::infer_csv_schema`);
//!   the text must be a literal, as in Spark.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringBuilder, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::error::{class, SluiceError};
use crate::json::{check_parse_mode, format_datetimes, options_at, write_datetimes};

fn external(e: SluiceError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

fn string_literal(v: Option<&ScalarValue>) -> Option<&str> {
    match v {
        Some(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => Some(s),
        _ => None,
    }
}

/// The struct type of `from_csv`'s DDL schema (flat: CSV has no nested values).
fn csv_schema(args: &[Option<&ScalarValue>]) -> DfResult<DataType> {
    let Some(ddl) = string_literal(args.get(1).copied().flatten()) else {
        return plan_err!(
            "from_csv(value, schema): the schema must be a DDL string literal such as \
             'a INT, b DOUBLE' or schema_of_csv('1,abc')"
        );
    };
    let t = crate::schema::parse_ddl_type(ddl)
        .map_err(|e| DataFusionError::Plan(format!("from_csv: {}", e.message())))?;
    let DataType::Struct(fields) = t else {
        return Err(external(SluiceError::query(
            class::INVALID_SCHEMA_NON_STRUCT_TYPE,
            format!(
                "from_csv: the input schema \"{}\" is not a struct type; give the columns, \
                 e.g. 'a INT, b DOUBLE'",
                crate::schema::spark_type_name(&t)
            ),
        )));
    };
    let schema = Schema::new(fields);
    if let Some(f) = schema
        .fields()
        .iter()
        .find(|f| crate::records::nested::is_nested(f.data_type()))
    {
        return Err(external(SluiceError::query(
            class::UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE,
            format!(
                "from_csv: the CSV datasource doesn't support the column `{}` of the type \"{}\". \
                 Parse it as STRING and convert it afterwards.",
                f.name(),
                crate::schema::spark_type_name(f.data_type())
            ),
        )));
    }
    Ok(crate::records::nested::nullable_type(&DataType::Struct(
        schema.fields().clone(),
    )))
}

/// `from_csv(text, 'a INT, b DOUBLE'[, options])` -> struct.
#[derive(Debug, PartialEq, Eq, Hash)]
struct FromCsv {
    signature: Signature,
}

impl ScalarUDFImpl for FromCsv {
    fn name(&self) -> &str {
        "from_csv"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        crate::json::strings_then_options("from_csv", "(value, schema[, options])", 2, arg_types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        plan_err!("from_csv needs its schema argument")
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let t = csv_schema(args.scalar_arguments)?;
        Ok(Arc::new(Field::new("from_csv", t, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let DataType::Struct(fields) = args.return_field.data_type().clone() else {
            return plan_err!("from_csv returns a struct");
        };
        let options = options_at(&args.args, 2, "from_csv")?;
        check_parse_mode(&options, "from_csv")?;
        let values = args.args[0].to_array(args.number_rows)?;
        let values = arrow::compute::cast(&values, &DataType::Utf8)?;
        let texts: Vec<Option<&str>> = values.as_string::<i32>().iter().collect();
        let schema = Arc::new(Schema::new(fields.clone()));
        let parsed =
            crate::records::csv::parse_csv_values(&texts, &schema, &options).map_err(external)?;
        let nulls = NullBuffer::from(texts.iter().map(|d| d.is_some()).collect::<Vec<bool>>());
        let s = parsed.as_struct();
        Ok(ColumnarValue::Array(Arc::new(StructArray::try_new(
            fields,
            s.columns().to_vec(),
            NullBuffer::union(Some(&nulls), s.nulls()),
        )?)))
    }
}

/// `to_csv`'s writer settings.
struct CsvWrite {
    sep: String,
    quote: Option<char>,
    escape: Option<char>,
    null_value: String,
    empty_value: String,
    quote_all: bool,
    escape_quotes: bool,
    trim_leading: bool,
    trim_trailing: bool,
}

fn char_option(
    options: &HashMap<String, String>,
    key: &str,
    default: char,
) -> DfResult<Option<char>> {
    match crate::conf::option(options, key) {
        None => Ok(Some(default)),
        Some(v) => {
            let mut it = v.chars();
            match (it.next(), it.next()) {
                (None, _) => Ok(None),
                (Some(c), None) => Ok(Some(c)),
                _ => Err(external(SluiceError::query(
                    class::INVALID_OPTION,
                    format!("to_csv: invalid value {v:?} for the option '{key}': must be a single character"),
                ))),
            }
        }
    }
}

fn bool_of(options: &HashMap<String, String>, key: &str, default: bool) -> DfResult<bool> {
    match crate::conf::option(options, key) {
        None => Ok(default),
        Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(external(SluiceError::query(
            class::INVALID_OPTION,
            format!("to_csv: invalid value {v:?} for the option '{key}': expected true or false"),
        ))),
    }
}

impl CsvWrite {
    fn new(options: &HashMap<String, String>) -> DfResult<Self> {
        let sep = crate::conf::option(options, "sep")
            .or_else(|| crate::conf::option(options, "delimiter"))
            .unwrap_or(",")
            .to_string();
        if sep.is_empty() {
            return Err(external(SluiceError::query(
                class::INVALID_OPTION,
                "to_csv: the option 'sep' cannot be empty; give a separator such as ',' or ';'",
            )));
        }
        if let Some(e) = crate::conf::option(options, "charToEscapeQuoteEscaping") {
            return Err(external(SluiceError::not_supported_yet(format!(
                "to_csv: the option charToEscapeQuoteEscaping = {e:?} is not supported yet"
            ))));
        }
        Ok(Self {
            sep,
            quote: char_option(options, "quote", '"')?,
            escape: char_option(options, "escape", '\\')?,
            null_value: crate::conf::option(options, "nullValue")
                .unwrap_or("")
                .to_string(),
            empty_value: crate::conf::option(options, "emptyValue")
                .unwrap_or("\"\"")
                .to_string(),
            quote_all: bool_of(options, "quoteAll", false)?,
            escape_quotes: bool_of(options, "escapeQuotes", true)?,
            trim_leading: bool_of(options, "ignoreLeadingWhiteSpace", true)?,
            trim_trailing: bool_of(options, "ignoreTrailingWhiteSpace", true)?,
        })
    }

    /// Appends one non-null field's text, quoted when it must be.
    fn field(&self, out: &mut String, text: &str) {
        let mut t = text;
        if self.trim_leading {
            t = t.trim_start_matches(|c: char| c <= ' ');
        }
        if self.trim_trailing {
            t = t.trim_end_matches(|c: char| c <= ' ');
        }
        if t.is_empty() {
            out.push_str(&self.empty_value);
            return;
        }
        let Some(q) = self.quote else {
            out.push_str(t);
            return;
        };
        let has_quote = t.contains(q);
        let needs = self.quote_all
            || t.contains(self.sep.as_str())
            || t.contains(['\n', '\r'])
            || (has_quote && self.escape_quotes);
        if !needs {
            out.push_str(t);
            return;
        }
        out.push(q);
        for c in t.chars() {
            if c == q {
                out.push(self.escape.unwrap_or(q));
            }
            out.push(c);
        }
        out.push(q);
    }
}

/// The text of value `i` of `a` in a CSV field (not null): Spark's `toString` of the value
/// (Java doubles, plain decimals), timestamps in `yyyy-MM-dd'T'HH:mm:ss.SSSXXX` (UTC).
fn value_text(a: &dyn Array, i: usize) -> DfResult<String> {
    use arrow::datatypes::TimestampMicrosecondType;
    Ok(match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value(i).to_string(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(i).to_string(),
        DataType::Utf8View => a.as_string_view().value(i).to_string(),
        DataType::Timestamp(..) => {
            let one = a.slice(i, 1);
            let us = arrow::compute::cast(
                &one,
                &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            )?;
            let v = us.as_primitive::<TimestampMicrosecondType>().value(0);
            let d = chrono::DateTime::from_timestamp_micros(v).ok_or_else(|| {
                DataFusionError::Execution(format!("to_csv: timestamp {v} out of range"))
            })?;
            d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
        }
        _ => {
            let mut s = String::new();
            crate::value_text::write_show(&mut s, a, i).map_err(external)?;
            s
        }
    })
}

/// `to_csv(struct[, options])` -> one CSV line per row.
#[derive(Debug, PartialEq, Eq, Hash)]
struct ToCsv {
    signature: Signature,
}

impl ScalarUDFImpl for ToCsv {
    fn name(&self) -> &str {
        "to_csv"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(1..=2).contains(&arg_types.len()) {
            return plan_err!("to_csv takes (struct[, options])");
        }
        Ok(arg_types.to_vec())
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(DataType::Struct(fields)) => match fields
                .iter()
                .find(|f| crate::records::nested::is_nested(f.data_type()))
            {
                // Spark writes the internal `toString` of such values (`keys: [k], values:
                // [1]` for a map), nothing a reader can parse back.
                Some(f) => Err(external(SluiceError::not_supported_yet(format!(
                    "to_csv: the field `{}` of the type {} is not supported yet (CSV has no \
                     nested values); write it with to_json(..) or CAST(.. AS STRING) first",
                    f.name(),
                    crate::schema::spark_type_name(f.data_type())
                )))),
                None => Ok(DataType::Utf8),
            },
            Some(other) => Err(external(SluiceError::query(
                class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!(
                    "Cannot resolve \"to_csv\" due to data type mismatch: Parameter 1 requires \
                     the \"STRUCT\" type, however it has the type \"{}\". Wrap the values, e.g. \
                     to_csv(named_struct('a', x, 'b', y))",
                    crate::schema::spark_type_name(other)
                ),
            ))),
            None => plan_err!("to_csv takes (struct[, options])"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let options = options_at(&args.args, 1, "to_csv")?;
        let formats = write_datetimes(&options, "to_csv")?;
        let w = CsvWrite::new(&options)?;
        let arr: ArrayRef = args.args[0].to_array(args.number_rows)?;
        let arr = format_datetimes(&arr, &formats)?;
        let s = arr.as_struct();
        let mut out = StringBuilder::new();
        let mut line = String::new();
        for i in 0..s.len() {
            if s.is_null(i) {
                out.append_null();
                continue;
            }
            line.clear();
            for (k, c) in s.columns().iter().enumerate() {
                if k > 0 {
                    line.push_str(&w.sep);
                }
                if c.is_null(i) {
                    line.push_str(&w.null_value);
                } else {
                    w.field(&mut line, &value_text(c.as_ref(), i)?);
                }
            }
            out.append_value(&line);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `schema_of_csv('1,abc'[, options])` -> `STRUCT<_c0: INT, _c1: STRING>`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SchemaOfCsv {
    signature: Signature,
}

impl ScalarUDFImpl for SchemaOfCsv {
    fn name(&self) -> &str {
        "schema_of_csv"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        crate::json::strings_then_options("schema_of_csv", "(csv[, options])", 1, arg_types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let options = options_at(&args.args, 1, "schema_of_csv")?;
        let text =
            match &args.args[0] {
                ColumnarValue::Scalar(v) => match v.cast_to(&DataType::Utf8)? {
                    ScalarValue::Utf8(Some(s)) => s,
                    _ => return Err(external(SluiceError::query(
                        class::DATATYPE_MISMATCH_UNEXPECTED_NULL,
                        "Cannot resolve \"schema_of_csv(NULL)\" due to data type mismatch: The \
                         csv must not be null. Give a literal CSV line such as '1,abc'.",
                    ))),
                },
                ColumnarValue::Array(_) => return Err(external(SluiceError::query(
                    class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT,
                    "Cannot resolve \"schema_of_csv\" due to data type mismatch: the input csv \
                     should be a foldable \"STRING\" expression. Give a literal CSV line such \
                     as '1,abc'.",
                ))),
            };
        let t = crate::records::csv::infer_csv_schema(&text, &options).map_err(external)?;
        Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(
            crate::schema::spark_type_name(&t),
        ))))
    }
}

/// The CSV functions, for `functions::register`.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    let sig = || Signature::user_defined(Volatility::Immutable);
    vec![
        ScalarUDF::new_from_impl(FromCsv { signature: sig() }),
        ScalarUDF::new_from_impl(ToCsv { signature: sig() }),
        ScalarUDF::new_from_impl(SchemaOfCsv { signature: sig() }),
    ]
}

#[cfg(test)]
mod tests {
    use arrow::util::display::{ArrayFormatter, FormatOptions};

    use crate::error::class;
    use sluice::Session;

    fn session() -> Session {
        Session::builder().shuffle_partitions(1).build().unwrap()
    }

    /// The values of the first column of `sql` (nulls `null`).
    fn values(s: &Session, sql: &str) -> sluice::Result<Vec<String>> {
        let opts = FormatOptions::default()
            .with_null("null")
            .with_timestamp_format(Some("%Y-%m-%d %H:%M:%S"));
        let mut out = Vec::new();
        for b in s.sql(sql)?.collect()? {
            let f = ArrayFormatter::try_new(b.column(0).as_ref(), &opts).unwrap();
            for r in 0..b.num_rows() {
                out.push(f.value(r).to_string());
            }
        }
        Ok(out)
    }

    fn one(s: &Session, sql: &str) -> String {
        let v = values(s, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(v.len(), 1, "{sql}");
        v[0].clone()
    }

    fn error(s: &Session, sql: &str) -> crate::error::SluiceError {
        match values(s, sql) {
            Ok(v) => panic!("{sql} ran: {v:?}"),
            Err(e) => e,
        }
    }

    // Every expectation below was returned by Spark 3.5.7.

    #[test]
    fn from_csv_parses_with_the_readers_rules_and_permissive_mode() {
        let s = session();
        let q = |t: &str| format!("SELECT from_csv({t}, 'a INT, b INT')");
        assert_eq!(one(&s, &q("'1,2'")), "{a: 1, b: 2}");
        // A field that does not fit is null, the rest kept; a short record's missing fields
        // are null; extra fields are ignored; a blank text is a struct of nulls.
        assert_eq!(one(&s, &q("'1,abc'")), "{a: 1, b: null}");
        assert_eq!(one(&s, &q("'1'")), "{a: 1, b: null}");
        assert_eq!(one(&s, &q("'1,2,3'")), "{a: 1, b: 2}");
        assert_eq!(one(&s, &q("''")), "{a: null, b: null}");
        assert_eq!(one(&s, &q("CAST(NULL AS STRING)")), "null");
        assert_eq!(
            one(&s, "SELECT from_csv(' 1 , x ', 'a INT, b STRING')"),
            "{a: null, b:  x }"
        );
        assert_eq!(
            one(&s, "SELECT from_csv('\"a,b\",2', 's STRING, x INT')"),
            "{s: a,b, x: 2}"
        );
        assert_eq!(
            one(&s, "SELECT from_csv('1, 0.8', 'a INT, b DOUBLE')"),
            "{a: 1, b: 0.8}"
        );
        // The corrupt-record column takes the text of a partial record.
        assert_eq!(
            one(
                &s,
                "SELECT from_csv('1,x', 'a INT, b INT, _corrupt_record STRING')"
            ),
            "{a: 1, b: null, _corrupt_record: 1,x}"
        );
    }

    #[test]
    fn from_csv_honours_the_readers_options() {
        let s = session();
        assert_eq!(
            one(
                &s,
                "SELECT from_csv('1;2', 'a INT, b INT', map('sep', ';'))"
            ),
            "{a: 1, b: 2}"
        );
        assert_eq!(
            one(
                &s,
                "SELECT from_csv('1,NA', 'a INT, b INT', map('nullValue', 'NA'))"
            ),
            "{a: 1, b: null}"
        );
        assert_eq!(
            one(
                &s,
                "SELECT from_csv('26/08/2015 10:30', 't TIMESTAMP, x INT', \
                 map('timestampFormat', 'dd/MM/yyyy HH:mm'))"
            ),
            "{t: 2015-08-26 10:30:00, x: null}"
        );
    }

    #[test]
    fn from_csv_failfast_errors_and_bad_arguments_are_refused() {
        let s = session();
        let e = error(
            &s,
            "SELECT from_csv('1,abc', 'a INT, b INT', map('mode', 'FAILFAST'))",
        );
        assert!(e.to_string().contains("abc"), "{e}");
        let e = error(
            &s,
            "SELECT from_csv('1,2', 'a INT, b INT', map('mode', 'DROPMALFORMED'))",
        );
        assert!(
            e.to_string().contains(
                "from_csv() doesn't support the DROPMALFORMED mode. Acceptable modes are \
                 PERMISSIVE and FAILFAST."
            ),
            "{e}"
        );
        let e = error(&s, "SELECT from_csv('1', 'a ARRAY<INT>')");
        assert!(e.is(class::UNSUPPORTED_DATA_TYPE_FOR_DATASOURCE), "{e}");
        let e = error(&s, "SELECT from_csv('1', 'INT')");
        assert!(e.is(class::INVALID_SCHEMA_NON_STRUCT_TYPE), "{e}");
        let e = error(&s, "SELECT from_csv('1', 42)");
        assert!(e.to_string().contains("from_csv"), "{e}");
        let e = error(&s, "SELECT from_csv('1', 'a INT', map('quote', 'ab'))");
        assert!(e.is(class::INVALID_OPTION), "{e}");
    }

    #[test]
    fn to_csv_writes_with_sparks_write_defaults() {
        let s = session();
        assert_eq!(
            one(&s, "SELECT to_csv(named_struct('a', 1, 'b', 2))"),
            "1,2"
        );
        // Null is empty, a separator quotes, whitespace is trimmed, an empty string is "".
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('a', 1, 'b', CAST(NULL AS INT), 'c', 'x,y', \
                 'd', ' s ', 'e', ''))"
            ),
            "1,,\"x,y\",s,\"\""
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('a', CAST(1.5 AS DOUBLE), 'b', CAST(1.0 AS FLOAT), \
                 'd', DATE'2020-01-02', 't', TIMESTAMP'2020-01-02 03:04:05.123', \
                 'dec', CAST(1.50 AS DECIMAL(3, 2)), 'bo', true))"
            ),
            "1.5,1.0,2020-01-02,2020-01-02T03:04:05.123Z,1.50,true"
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('t', TIMESTAMP'2020-01-02 03:04:05'))"
            ),
            "2020-01-02T03:04:05.000Z"
        );
        assert_eq!(
            one(&s, "SELECT to_csv(CAST(NULL AS STRUCT<a: INT>))"),
            "null"
        );
    }

    #[test]
    fn to_csv_honours_its_options() {
        let s = session();
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('a', 1, 'b', 'q\"t'), map('quoteAll', 'true'))"
            ),
            "\"1\",\"q\\\"t\""
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('a', 'x\"y'), map('escapeQuotes', 'false'))"
            ),
            "x\"y"
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('a', 'x;y', 'b', 2), map('sep', ';'))"
            ),
            "\"x;y\";2"
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('a', 1, 'b', CAST(NULL AS STRING)), \
                 map('nullValue', 'NA'))"
            ),
            "1,NA"
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('time', to_timestamp('2015-08-26', 'yyyy-MM-dd')), \
                 map('timestampFormat', 'dd/MM/yyyy'))"
            ),
            "26/08/2015"
        );
        assert_eq!(
            one(
                &s,
                "SELECT to_csv(named_struct('d', DATE'2015-08-26'), map('dateFormat', 'dd/MM/yyyy'))"
            ),
            "26/08/2015"
        );
    }

    #[test]
    fn to_csv_refuses_what_it_cannot_write() {
        let s = session();
        let e = error(&s, "SELECT to_csv(array(1))");
        assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE), "{e}");
        let e = error(&s, "SELECT to_csv(named_struct('a', map('k', 1)))");
        assert!(e.is(class::SLUICE_NOT_SUPPORTED_YET), "{e}");
        assert!(e.to_string().contains("`a`"), "{e}");
        let e = error(
            &s,
            "SELECT to_csv(named_struct('a', 1), map('quoteAll', 'maybe'))",
        );
        assert!(e.is(class::INVALID_OPTION), "{e}");
        let e = error(
            &s,
            "SELECT to_csv(named_struct('a', 1), map('timestampNTZFormat', 'yyyy'))",
        );
        assert!(e.is(class::SLUICE_NOT_SUPPORTED_YET), "{e}");
        assert!(e.to_string().contains("timestampNTZFormat"), "{e}");
    }

    #[test]
    fn schema_of_csv_infers_as_sparks_csv_inference() {
        let s = session();
        assert_eq!(
            one(&s, "SELECT schema_of_csv('1,abc')"),
            "STRUCT<_c0: INT, _c1: STRING>"
        );
        assert_eq!(
            one(
                &s,
                "SELECT schema_of_csv('1,2147483648,99999999999999999999,1.5,abc,true,\
                 2020-01-01,2020-01-01T10:00:00Z,NaN,\"q\"')"
            ),
            "STRUCT<_c0: INT, _c1: BIGINT, _c2: DECIMAL(20,0), _c3: DOUBLE, _c4: STRING, \
             _c5: BOOLEAN, _c6: DATE, _c7: TIMESTAMP, _c8: DOUBLE, _c9: STRING>"
        );
        assert_eq!(
            one(&s, "SELECT schema_of_csv('1E5,+3,-4,1.5d,001')"),
            "STRUCT<_c0: DOUBLE, _c1: INT, _c2: INT, _c3: DOUBLE, _c4: INT>"
        );
        assert_eq!(
            one(
                &s,
                "SELECT schema_of_csv('1,abc,2.5,true,2020-01-01,2020-01-01 10:00:00,,\
                 12345678901,1.0E10')"
            ),
            "STRUCT<_c0: INT, _c1: STRING, _c2: DOUBLE, _c3: BOOLEAN, _c4: DATE, \
             _c5: TIMESTAMP, _c6: STRING, _c7: BIGINT, _c8: DOUBLE>"
        );
        assert_eq!(
            one(&s, "SELECT schema_of_csv('1|abc', map('sep', '|'))"),
            "STRUCT<_c0: INT, _c1: STRING>"
        );
        assert_eq!(
            one(
                &s,
                "SELECT schema_of_csv('26/08/2015', map('dateFormat', 'dd/MM/yyyy'))"
            ),
            "STRUCT<_c0: DATE>"
        );
    }

    #[test]
    fn from_csv_takes_the_schema_schema_of_csv_infers() {
        let s = session();
        assert_eq!(
            one(&s, "SELECT from_csv('1,abc', schema_of_csv('7,xyz'))"),
            "{_c0: 1, _c1: abc}"
        );
    }

    #[test]
    fn schema_of_csv_needs_a_literal_text() {
        let s = session();
        let e = error(&s, "SELECT schema_of_csv(CAST(NULL AS STRING))");
        assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_NULL), "{e}");
        let e = error(
            &s,
            "SELECT schema_of_csv(v) FROM VALUES ('1,2'), ('a') AS t(v)",
        );
        assert!(e.is(class::DATATYPE_MISMATCH_NON_FOLDABLE_INPUT), "{e}");
    }
}
