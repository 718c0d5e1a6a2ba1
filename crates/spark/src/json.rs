//! `from_json(value, 'ddl schema' | 'ARRAY<..>' | 'MAP<..>'[, options])`, `to_json(struct |
//! array | map)` and `schema_of_json('{..}')`, as in Spark SQL: the typical Kafka
//! pipeline (parse JSON values, aggregate, write JSON back) in a few lines of SQL or Rust.
//! `from_json` parses with the file source's Spark PERMISSIVE rules (a malformed document or a
//! wrongly typed field gives nulls, never an error).

use std::sync::Arc;

use std::collections::HashMap;

use arrow::array::{Array, ArrayRef, AsArray, StringArray, StructArray};
use arrow::buffer::NullBuffer;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{plan_err, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::prelude::{lit, Expr};

fn ddl_arg(args: &[Option<&ScalarValue>]) -> DfResult<DataType> {
    match args.get(1) {
        Some(Some(ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s)) | ScalarValue::Utf8View(Some(s)))) => {
            let t = crate::schema::parse_ddl_type(s)
                .map_err(|e| datafusion::error::DataFusionError::Plan(format!("from_json: {}", e.message())))?;
            if crate::records::nested::non_string_map_key(&t) {
                return plan_err!(
                    "[DATATYPE_MISMATCH.INVALID_JSON_MAP_KEY_TYPE] from_json: Input schema \"{}\" can only contain STRING as a key type for a MAP.",
                    crate::schema::spark_type_name(&t)
                );
            }
            Ok(crate::records::nested::nullable_type(&t))
        }
        _ => plan_err!("from_json(value, schema): the schema must be a DDL string literal such as 'user STRING, amount DOUBLE', 'ARRAY<INT>' or schema_of_json('{{\"a\": 1}}')"),
    }
}

/// The options of `from_json(value, schema, map('k', 'v', ..))`.
fn options_arg(args: &[ColumnarValue]) -> DfResult<HashMap<String, String>> {
    let out = options_at(args, 2, "from_json")?;
    check_parse_mode(&out, "from_json")?;
    Ok(out)
}

/// `mode` of `from_json` / `from_csv`: PERMISSIVE or FAILFAST, as Spark.
pub fn check_parse_mode(options: &HashMap<String, String>, function: &str) -> DfResult<()> {
    if let Some(mode) = crate::conf::option(options, "mode") {
        if !mode.eq_ignore_ascii_case("PERMISSIVE") && !mode.eq_ignore_ascii_case("FAILFAST") {
            return plan_err!(
                "{function}() doesn't support the {} mode. Acceptable modes are PERMISSIVE and FAILFAST.",
                mode.to_ascii_uppercase()
            );
        }
    }
    Ok(())
}

/// The options map of a JSON/CSV function, argument `idx` (`map('k', 'v', ..)`, a literal);
/// none when the argument is absent.
pub fn options_at(
    args: &[ColumnarValue],
    idx: usize,
    function: &str,
) -> DfResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    let Some(arg) = args.get(idx) else {
        return Ok(out);
    };
    let ColumnarValue::Scalar(ScalarValue::Map(m)) = arg else {
        return plan_err!(
            "{function}: the options must be a literal map('key', 'value', ..), e.g. \
             map('timestampFormat', 'dd/MM/yyyy')"
        );
    };
    if m.is_empty() || m.is_null(0) {
        return Ok(out);
    }
    let entries = m.value(0);
    let keys = arrow::compute::cast(entries.column(0), &DataType::Utf8)?;
    let values = arrow::compute::cast(entries.column(1), &DataType::Utf8)?;
    let (keys, values) = (keys.as_string::<i32>(), values.as_string::<i32>());
    for i in 0..keys.len() {
        if keys.is_valid(i) && values.is_valid(i) {
            out.insert(keys.value(i).to_string(), values.value(i).to_string());
        }
    }
    Ok(out)
}

fn external(e: crate::error::SluiceError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::External(Box::new(e))
}

/// The datetime patterns of a writing function (`to_json`, `to_csv`), as chrono formats: Spark's
/// `timestampFormat` and `dateFormat`, and the checks of `timeZone` and `locale` (UTC and
/// English only) and of `timestampNTZFormat` (Sluice has one timestamp type).
#[derive(Debug, Default)]
pub struct WriteDatetimes {
    /// `timestampFormat` as a chrono format (none: Spark's ISO default).
    pub timestamp: Option<String>,
    /// `dateFormat` as a chrono format (none: `yyyy-MM-dd`).
    pub date: Option<String>,
}

/// Reads a writing function's datetime options (`function` names it in errors).
pub fn write_datetimes(
    options: &HashMap<String, String>,
    function: &str,
) -> DfResult<WriteDatetimes> {
    let pattern = |key: &str| -> DfResult<Option<String>> {
        match crate::conf::option(options, key) {
            None => Ok(None),
            Some(p) => crate::fixes::spark_pattern_to_chrono(p)
                .map(Some)
                .map_err(|why| {
                    external(crate::error::SluiceError::not_supported_yet(format!(
                        "{function}: the option {key} = {p:?}: {}",
                        why.trim_start_matches("date_format: ")
                    )))
                }),
        }
    };
    if crate::conf::option(options, "timestampNTZFormat").is_some() {
        return Err(external(crate::error::SluiceError::not_supported_yet(
            format!(
                "{function}: the option timestampNTZFormat is not supported yet (Sluice has one \
             timestamp type); use timestampFormat"
            ),
        )));
    }
    if let Some(tz) = crate::conf::option(options, "timeZone") {
        if !matches!(
            tz.trim().to_ascii_uppercase().as_str(),
            "UTC" | "GMT" | "Z" | "+00:00" | "ETC/UTC"
        ) {
            return Err(external(crate::error::SluiceError::not_supported_yet(
                format!("{function}: the option timeZone = {tz:?} is not supported yet (UTC only)"),
            )));
        }
    }
    if let Some(l) = crate::conf::option(options, "locale") {
        if !matches!(l.trim().to_ascii_lowercase().as_str(), "en-us" | "en") {
            return Err(external(crate::error::SluiceError::not_supported_yet(
                format!("{function}: the option locale = {l:?} is not supported yet (en-US only)"),
            )));
        }
    }
    Ok(WriteDatetimes {
        timestamp: pattern("timestampFormat")?,
        date: pattern("dateFormat")?,
    })
}

/// A `true`/`false` option (Spark's `toBoolean`: a value that is neither is refused).
fn flag(
    options: &HashMap<String, String>,
    key: &str,
    default: bool,
    function: &str,
) -> DfResult<bool> {
    match crate::conf::option(options, key) {
        None => Ok(default),
        Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(external(crate::error::SluiceError::query(
            crate::error::class::INVALID_OPTION,
            format!(
                "{function}: invalid value {v:?} for the option '{key}': expected true or false"
            ),
        ))),
    }
}

/// How `to_json` writes: `ignoreNullFields` (null struct fields left out) and `pretty`
/// (Jackson's `DefaultPrettyPrinter`: objects one entry a line, indented by two spaces per
/// object level, `"k" : v`; arrays on one line, `[ 1, 2 ]`; empty ones `{ }` and `[ ]`).
struct JsonStyle {
    ignore_null_fields: bool,
    pretty: bool,
}

/// Writes value `i` of `a` as JSON in `style` (`depth`: the enclosing objects); scalars as
/// [`crate::value_text::write_json`] writes them.
fn write_styled(
    out: &mut String,
    a: &dyn Array,
    i: usize,
    style: &JsonStyle,
    depth: usize,
) -> DfResult<()> {
    if a.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    let object = |out: &mut String,
                  entries: Vec<(String, &dyn Array, usize)>,
                  depth: usize|
     -> DfResult<()> {
        if entries.is_empty() {
            out.push_str(if style.pretty { "{ }" } else { "{}" });
            return Ok(());
        }
        out.push('{');
        for (k, (name, arr, j)) in entries.into_iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            if style.pretty {
                out.push('\n');
                out.push_str(&"  ".repeat(depth + 1));
            }
            crate::value_text::write_json_string(out, &name);
            out.push_str(if style.pretty { " : " } else { ":" });
            write_styled(out, arr, j, style, depth + 1)?;
        }
        if style.pretty {
            out.push('\n');
            out.push_str(&"  ".repeat(depth));
        }
        out.push('}');
        Ok(())
    };
    match a.data_type() {
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let entries = fields
                .iter()
                .zip(s.columns())
                .filter(|(_, c)| !(style.ignore_null_fields && c.is_null(i)))
                .map(|(f, c)| (f.name().clone(), c.as_ref(), i))
                .collect();
            object(out, entries, depth)
        }
        DataType::Map(..) => {
            let e = a.as_map().value(i);
            let mut entries = Vec::with_capacity(e.len());
            for j in 0..e.len() {
                let mut key = String::new();
                key_text(&mut key, e.column(0).as_ref(), j)?;
                entries.push((key, e.column(1).as_ref(), j));
            }
            object(out, entries, depth)
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let l = match a.data_type() {
                DataType::List(_) => a.as_list::<i32>().value(i),
                _ => a.as_list::<i64>().value(i),
            };
            if l.is_empty() {
                out.push_str(if style.pretty { "[ ]" } else { "[]" });
                return Ok(());
            }
            out.push_str(if style.pretty { "[ " } else { "[" });
            for j in 0..l.len() {
                if j > 0 {
                    out.push_str(if style.pretty { ", " } else { "," });
                }
                write_styled(out, l.as_ref(), j, style, depth)?;
            }
            out.push_str(if style.pretty { " ]" } else { "]" });
            Ok(())
        }
        _ => crate::value_text::write_json(out, a, i).map_err(external),
    }
}

/// The text of a map key in `to_json`: Spark writes the key's internal `toString`, so a
/// struct is `[1,x]`, an array `[1,2]`, a date its day number and a timestamp its
/// microseconds; strings, numbers and booleans as they are.
fn key_text(out: &mut String, a: &dyn Array, i: usize) -> DfResult<()> {
    if a.is_null(i) {
        out.push_str("null");
        return Ok(());
    }
    match a.data_type() {
        DataType::Struct(_) => {
            let s = a.as_struct();
            out.push('[');
            for (k, c) in s.columns().iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                key_text(out, c.as_ref(), i)?;
            }
            out.push(']');
        }
        DataType::List(_) | DataType::LargeList(_) => {
            let l = match a.data_type() {
                DataType::List(_) => a.as_list::<i32>().value(i),
                _ => a.as_list::<i64>().value(i),
            };
            out.push('[');
            for j in 0..l.len() {
                if j > 0 {
                    out.push(',');
                }
                key_text(out, l.as_ref(), j)?;
            }
            out.push(']');
        }
        DataType::Date32 => {
            let d = a.as_primitive::<arrow::datatypes::Date32Type>().value(i);
            out.push_str(&d.to_string());
        }
        DataType::Timestamp(..) => {
            let us = arrow::compute::cast(
                &a.slice(i, 1),
                &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            )?;
            let v = us
                .as_primitive::<arrow::datatypes::TimestampMicrosecondType>()
                .value(0);
            out.push_str(&v.to_string());
        }
        _ => crate::value_text::write_show(out, a, i).map_err(external)?,
    }
    Ok(())
}

/// A boolean option of a writing function: Sluice honours `supported` only, and says so for
/// the other value.
fn bool_option(
    options: &HashMap<String, String>,
    key: &str,
    supported: bool,
    function: &str,
) -> DfResult<()> {
    let Some(v) = crate::conf::option(options, key) else {
        return Ok(());
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "true" | "false" if v.trim().eq_ignore_ascii_case("true") == supported => Ok(()),
        "true" | "false" => Err(external(crate::error::SluiceError::not_supported_yet(
            format!("{function}: the option {key} = {v} is not supported yet (only {supported})"),
        ))),
        _ => Err(external(crate::error::SluiceError::query(
            crate::error::class::INVALID_OPTION,
            format!(
                "{function}: invalid value {v:?} for the option '{key}': expected true or false"
            ),
        ))),
    }
}

/// `a` with its timestamps and dates (at any depth) replaced by their text in `formats`' chrono
/// patterns, where one is given: how `to_json`/`to_csv` write them with `timestampFormat` /
/// `dateFormat`. Timestamps are UTC.
pub fn format_datetimes(a: &ArrayRef, formats: &WriteDatetimes) -> DfResult<ArrayRef> {
    use std::fmt::Write as _;
    if formats.timestamp.is_none() && formats.date.is_none() {
        return Ok(a.clone());
    }
    let text = |fmt: &str, v: Option<chrono::NaiveDateTime>| -> DfResult<Option<String>> {
        let Some(v) = v else { return Ok(None) };
        let mut s = String::new();
        write!(s, "{}", v.format(fmt)).map_err(|_| {
            datafusion::error::DataFusionError::Execution(format!(
                "cannot format {v} with the pattern {fmt:?}"
            ))
        })?;
        Ok(Some(s))
    };
    Ok(match a.data_type() {
        DataType::Timestamp(..) if formats.timestamp.is_some() => {
            let fmt = formats.timestamp.as_deref().unwrap_or_default();
            let us = arrow::compute::cast(
                a,
                &DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, None),
            )?;
            let us = us.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
            let out = us
                .iter()
                .map(|v| {
                    text(
                        fmt,
                        v.and_then(chrono::DateTime::from_timestamp_micros)
                            .map(|d| d.naive_utc()),
                    )
                })
                .collect::<DfResult<StringArray>>()?;
            Arc::new(out)
        }
        DataType::Date32 | DataType::Date64 if formats.date.is_some() => {
            let fmt = formats.date.as_deref().unwrap_or_default();
            let days = arrow::compute::cast(a, &DataType::Date32)?;
            let days = days.as_primitive::<arrow::datatypes::Date32Type>();
            let out = days
                .iter()
                .map(|v| {
                    text(
                        fmt,
                        v.and_then(|d| chrono::DateTime::from_timestamp(i64::from(d) * 86_400, 0))
                            .map(|d| d.naive_utc()),
                    )
                })
                .collect::<DfResult<StringArray>>()?;
            Arc::new(out)
        }
        DataType::Struct(_) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(|c| format_datetimes(c, formats))
                .collect::<DfResult<Vec<_>>>()?;
            let fields: Vec<Field> = s
                .fields()
                .iter()
                .zip(&columns)
                .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
                .collect();
            Arc::new(StructArray::try_new(
                fields.into(),
                columns,
                s.nulls().cloned(),
            )?)
        }
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            let values = format_datetimes(l.values(), formats)?;
            let field = Arc::new(
                f.as_ref()
                    .clone()
                    .with_data_type(values.data_type().clone()),
            );
            Arc::new(arrow::array::ListArray::try_new(
                field,
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )?)
        }
        DataType::Map(f, sorted) => {
            let m = a.as_map();
            let entries: ArrayRef = Arc::new(m.entries().clone());
            let entries = format_datetimes(&entries, formats)?;
            let field = Arc::new(
                f.as_ref()
                    .clone()
                    .with_data_type(entries.data_type().clone()),
            );
            let entries = entries.as_struct().clone();
            Arc::new(arrow::array::MapArray::try_new(
                field,
                m.offsets().clone(),
                entries,
                m.nulls().cloned(),
                *sorted,
            )?)
        }
        _ => a.clone(),
    })
}

/// `from_json(value, 'user STRING, amount DOUBLE'[, options])` -> struct; also
/// `from_json(value, 'ARRAY<INT>')` or `'MAP<STRING, INT>'` (Spark's `DataType.fromDDL`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FromJson {
    signature: Signature,
}

impl Default for FromJson {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

/// The argument types of a function of `strings` text arguments and an optional options map
/// (`from_json`/`from_csv`: `(value, schema[, options])`; `schema_of_json`/`schema_of_csv`:
/// `(text[, options])`, written `usage`): the texts as strings, the map as given.
pub fn strings_then_options(
    name: &str,
    usage: &str,
    strings: usize,
    arg_types: &[DataType],
) -> DfResult<Vec<DataType>> {
    if !(strings..=strings + 1).contains(&arg_types.len()) {
        return plan_err!("{name} takes {usage}");
    }
    Ok(arg_types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if i == strings {
                t.clone()
            } else {
                DataType::Utf8
            }
        })
        .collect())
}

impl ScalarUDFImpl for FromJson {
    fn name(&self) -> &str {
        "from_json"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        strings_then_options("from_json", "(value, schema[, options])", 2, arg_types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        plan_err!("from_json needs its schema argument")
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let t = ddl_arg(args.scalar_arguments)?;
        Ok(Arc::new(Field::new("from_json", t, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let dt = args.return_field.data_type().clone();
        let options = options_arg(&args.args)?;
        let values = args.args[0].to_array(args.number_rows)?;
        let values = arrow::compute::cast(&values, &DataType::Utf8)?;
        let strings = values
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| {
                datafusion::error::DataFusionError::Internal("from_json input".into())
            })?;
        let docs: Vec<Option<&str>> = strings.iter().collect();
        let parsed = crate::records::parse_json_values(&docs, &dt, &options)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        // A null document gives a null value.
        let nulls = NullBuffer::from(docs.iter().map(|d| d.is_some()).collect::<Vec<bool>>());
        let out: ArrayRef = match parsed.data_type() {
            DataType::Struct(fields) => {
                let s = parsed.as_struct();
                Arc::new(StructArray::try_new(
                    fields.clone(),
                    s.columns().to_vec(),
                    NullBuffer::union(Some(&nulls), s.nulls()),
                )?)
            }
            _ => parsed,
        };
        Ok(ColumnarValue::Array(out))
    }
}

/// `to_json(struct | array | map[, options])` -> a JSON string per row, as Spark writes it
/// ([`crate::value_text::write_json`]: null struct fields omitted, nested values in full).
/// Options: `timestampFormat`, `dateFormat` (Spark's pattern letters), `timeZone` (UTC),
/// `ignoreNullFields`, `pretty`, and `writeNonAsciiCharacterAsCodePoint` (`false` only); other
/// options are ignored, as Spark ignores the reader's.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct ToJson {
    signature: Signature,
}

impl Default for ToJson {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToJson {
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(1..=2).contains(&arg_types.len()) {
            return plan_err!("to_json takes (value[, options])");
        }
        Ok(arg_types.to_vec())
    }
    fn name(&self) -> &str {
        "to_json"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(DataType::Struct(_) | DataType::List(_) | DataType::LargeList(_) | DataType::Map(..)) => {
                Ok(DataType::Utf8)
            }
            Some(other) => plan_err!(
                "[DATATYPE_MISMATCH.INVALID_JSON_SCHEMA] Cannot resolve \"to_json\" due to data type mismatch: \
                 Input schema \"{}\" must be a struct, an array or a map. Wrap the value, e.g. \
                 to_json(named_struct('value', x))",
                crate::schema::spark_type_name(other)
            ),
            None => plan_err!("to_json takes one argument"),
        }
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let options = options_at(&args.args, 1, "to_json")?;
        let formats = write_datetimes(&options, "to_json")?;
        let style = JsonStyle {
            ignore_null_fields: flag(&options, "ignoreNullFields", true, "to_json")?,
            pretty: flag(&options, "pretty", false, "to_json")?,
        };
        bool_option(
            &options,
            "writeNonAsciiCharacterAsCodePoint",
            false,
            "to_json",
        )?;
        let arr: ArrayRef = args.args[0].to_array(args.number_rows)?;
        let arr = format_datetimes(&arr, &formats)?;
        let mut out = arrow::array::StringBuilder::new();
        let mut text = String::new();
        for i in 0..arr.len() {
            if arr.is_null(i) {
                out.append_null();
                continue;
            }
            text.clear();
            write_styled(&mut text, arr.as_ref(), i, &style, 0)?;
            out.append_value(&text);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `schema_of_json('{"a": 1}')` -> `STRUCT<a: BIGINT>`, Spark's inferred type of a JSON
/// document ([`infer_json_type`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct SchemaOfJson {
    signature: Signature,
}

impl Default for SchemaOfJson {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for SchemaOfJson {
    fn name(&self) -> &str {
        "schema_of_json"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        strings_then_options("schema_of_json", "(json[, options])", 1, arg_types)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let options = options_at(&args.args, 1, "schema_of_json")?;
        let primitives_as_string = schema_options(&options)?;
        let values = args.args[0].to_array(args.number_rows)?;
        let values = arrow::compute::cast(&values, &DataType::Utf8)?;
        let mut out = arrow::array::StringBuilder::new();
        for v in values.as_string::<i32>().iter() {
            match v {
                None => out.append_null(),
                Some(doc) => {
                    let doc = if options.is_empty() {
                        doc.to_string()
                    } else {
                        canonical_json(doc, &options)?
                    };
                    let mut t = infer_json_type(&doc).map_err(external)?;
                    if primitives_as_string {
                        t = all_strings(t);
                    }
                    out.append_value(crate::schema::spark_type_name(&t))
                }
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// The inference options of `schema_of_json(doc, options)`: whether `primitivesAsString`; the
/// parser's options (`allowNumericLeadingZeros`, `allowSingleQuotes`, ..) act through
/// [`canonical_json`]; `prefersDecimal` and `dropFieldIfAllNull` are `false` only.
fn schema_options(options: &HashMap<String, String>) -> DfResult<bool> {
    bool_option(options, "prefersDecimal", false, "schema_of_json")?;
    bool_option(options, "dropFieldIfAllNull", false, "schema_of_json")?;
    match crate::conf::option(options, "primitivesAsString") {
        None => Ok(false),
        Some(v) if v.trim().eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.trim().eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(external(crate::error::SluiceError::query(
            crate::error::class::INVALID_OPTION,
            format!(
                "schema_of_json: invalid value {v:?} for the option 'primitivesAsString': \
                 expected true or false"
            ),
        ))),
    }
}

/// `doc` read by the JSON reader with `options` (leading zeros, single quotes, comments,
/// unquoted names, ..) and written back as standard JSON, for inference. A document the
/// reader refuses even with the options is an error, as in Spark.
fn canonical_json(doc: &str, options: &HashMap<String, String>) -> DfResult<String> {
    let trimmed = doc.trim_start();
    if trimmed.starts_with('"') || trimmed.starts_with('\'') {
        // A top-level string: the reader would give its text, not its JSON.
        return Ok(doc.to_string());
    }
    let mut o = options.clone();
    o.retain(|k, _| !k.eq_ignore_ascii_case("mode"));
    o.insert("mode".into(), "FAILFAST".into());
    let parsed =
        crate::records::parse_json_values(&[Some(doc)], &DataType::Utf8, &o).map_err(|e| {
            external(crate::error::SluiceError::query(
                crate::error::class::MALFORMED_RECORD,
                format!(
                    "schema_of_json: {doc:?} is not a JSON document with these options ({}); \
                     give a literal JSON string such as '{{\"a\": 1}}'",
                    e.message()
                ),
            ))
        })?;
    let parsed = parsed.as_string::<i32>();
    if parsed.is_null(0) {
        return Ok("null".to_string());
    }
    Ok(parsed.value(0).to_string())
}

/// `primitivesAsString`: every primitive type inferred is `STRING`.
fn all_strings(t: DataType) -> DataType {
    match t {
        DataType::List(f) => DataType::new_list(all_strings(f.data_type().clone()), true),
        DataType::Struct(fs) => DataType::Struct(
            fs.iter()
                .map(|f| Field::new(f.name(), all_strings(f.data_type().clone()), true))
                .collect::<Vec<_>>()
                .into(),
        ),
        _ => DataType::Utf8,
    }
}

/// Spark's `schema_of_json(doc)`: the inferred type of one JSON document as Spark prints it
/// (`STRUCT<a: BIGINT, b: ARRAY<STRING>>`). A document that is not valid JSON is refused.
pub fn schema_of_json(doc: &str) -> crate::error::Result<String> {
    Ok(crate::schema::spark_type_name(&infer_json_type(doc)?))
}

/// The type Spark's `JsonInferSchema` gives one JSON document: integers `BIGINT` (wider ones
/// `DECIMAL(p,0)`), other numbers `DOUBLE`, `BOOLEAN`, strings and nulls `STRING`, objects
/// `STRUCT` with fields sorted by name, arrays `ARRAY` of the merged element type (`STRING`
/// when empty or mixed beyond numbers, `DOUBLE` for integers and doubles).
pub fn infer_json_type(doc: &str) -> crate::error::Result<DataType> {
    let v: serde_json::Value = serde_json::from_str(doc).map_err(|e| {
        crate::error::SluiceError::query(
            crate::error::class::MALFORMED_RECORD,
            format!(
                "schema_of_json: {doc:?} is not a JSON document ({e}); give a literal JSON \
                 string such as '{{\"a\": 1}}'"
            ),
        )
    })?;
    Ok(strip_null(infer(&v)))
}

fn infer(v: &serde_json::Value) -> DataType {
    use serde_json::Value as V;
    match v {
        V::Null => DataType::Null,
        V::Bool(_) => DataType::Boolean,
        V::Number(n) => {
            if n.is_i64() {
                DataType::Int64
            } else if n.is_u64() {
                DataType::Decimal128(20, 0)
            } else {
                DataType::Float64
            }
        }
        V::String(_) => DataType::Utf8,
        V::Array(xs) => {
            let item = xs.iter().map(infer).fold(DataType::Null, merge);
            DataType::new_list(item, true)
        }
        V::Object(m) => {
            let mut fields: Vec<(String, DataType)> =
                m.iter().map(|(k, v)| (k.clone(), infer(v))).collect();
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            DataType::Struct(
                fields
                    .into_iter()
                    .map(|(k, t)| Field::new(k, t, true))
                    .collect::<Vec<_>>()
                    .into(),
            )
        }
    }
}

/// Spark's `compatibleType` of two inferred types.
fn merge(a: DataType, b: DataType) -> DataType {
    use DataType as T;
    match (a, b) {
        (T::Null, t) | (t, T::Null) => t,
        (a, b) if a == b => a,
        (T::Int64, T::Float64) | (T::Float64, T::Int64) => T::Float64,
        (T::Decimal128(..), T::Float64) | (T::Float64, T::Decimal128(..)) => T::Float64,
        (T::Int64, d @ T::Decimal128(..)) | (d @ T::Decimal128(..), T::Int64) => d,
        (T::Struct(fa), T::Struct(fb)) => {
            let mut fields: Vec<(String, DataType)> = fa
                .iter()
                .map(|f| (f.name().clone(), f.data_type().clone()))
                .collect();
            for f in fb.iter() {
                match fields.iter_mut().find(|(n, _)| n == f.name()) {
                    Some((_, t)) => *t = merge(t.clone(), f.data_type().clone()),
                    None => fields.push((f.name().clone(), f.data_type().clone())),
                }
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            T::Struct(
                fields
                    .into_iter()
                    .map(|(k, t)| Field::new(k, t, true))
                    .collect::<Vec<_>>()
                    .into(),
            )
        }
        (T::List(a), T::List(b)) => {
            T::new_list(merge(a.data_type().clone(), b.data_type().clone()), true)
        }
        _ => T::Utf8,
    }
}

/// Nulls left after inference are `STRING`, as in Spark.
fn strip_null(t: DataType) -> DataType {
    match t {
        DataType::Null => DataType::Utf8,
        DataType::List(f) => DataType::new_list(strip_null(f.data_type().clone()), true),
        DataType::Struct(fs) => DataType::Struct(
            fs.iter()
                .map(|f| Field::new(f.name(), strip_null(f.data_type().clone()), true))
                .collect::<Vec<_>>()
                .into(),
        ),
        other => other,
    }
}

/// Replaces each `schema_of_json('<literal>')` and `schema_of_csv('<literal>')` in a SQL text
/// by the string literal of its result, so that `from_json(v, schema_of_json('{..}'))` and
/// `from_csv(v, schema_of_csv('1,abc'))` have their schema when the query is planned (Spark
/// requires the argument to be foldable too). Text inside string literals, quoted identifiers
/// and comments is left alone.
pub fn fold_schema_of_json(sql: &str) -> crate::error::Result<String> {
    let b = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    let mut copied = 0;
    while i < b.len() {
        match b[i] {
            q @ (b'\'' | b'"' | b'`') => {
                i = skip_quoted(b, i, q);
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            c if (c.is_ascii_alphabetic() || c == b'_')
                && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let word = &sql[start..i];
                let csv = word.eq_ignore_ascii_case("schema_of_csv");
                if !csv && !word.eq_ignore_ascii_case("schema_of_json") {
                    continue;
                }
                let mut j = i;
                let ws = |j: &mut usize| {
                    while *j < b.len() && b[*j].is_ascii_whitespace() {
                        *j += 1;
                    }
                };
                ws(&mut j);
                if b.get(j) != Some(&b'(') {
                    continue;
                }
                j += 1;
                ws(&mut j);
                if b.get(j) != Some(&b'\'') {
                    continue;
                }
                let lit_start = j;
                let lit_end = skip_quoted(b, j, b'\'');
                let mut k = lit_end;
                ws(&mut k);
                if b.get(k) != Some(&b')') {
                    continue;
                }
                let doc = unquote(&sql[lit_start..lit_end]);
                let ty = if csv {
                    crate::schema::spark_type_name(&crate::records::csv::infer_csv_schema(
                        &doc,
                        &HashMap::new(),
                    )?)
                } else {
                    schema_of_json(&doc)?
                };
                out.push_str(&sql[copied..start]);
                out.push('\'');
                out.push_str(&ty.replace('\\', "\\\\").replace('\'', "\\'"));
                out.push('\'');
                i = k + 1;
                copied = i;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// The index after the quoted text starting at `i` (quote `q`; doubled quotes and backslash
/// escapes inside).
fn skip_quoted(b: &[u8], mut i: usize, q: u8) -> usize {
    i += 1;
    while i < b.len() {
        if b[i] == b'\\' && q != b'`' {
            i += 2;
            continue;
        }
        if b[i] == q {
            if b.get(i + 1) == Some(&q) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    b.len()
}

/// The text of a single-quoted SQL string literal (`''` and `\'` escapes).
fn unquote(lit: &str) -> String {
    let inner = &lit[1..lit.len().saturating_sub(1).max(1)];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    out.push(match n {
                        'n' => '\n',
                        't' => '\t',
                        other => other,
                    });
                }
            }
            '\'' if chars.peek() == Some(&'\'') => {
                chars.next();
                out.push('\'');
            }
            c => out.push(c),
        }
    }
    out
}

/// `from_json`, `to_json` and `schema_of_json`, to register into a session.
pub fn json_udfs() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::new_from_impl(FromJson::default()),
        ScalarUDF::new_from_impl(ToJson::default()),
        ScalarUDF::new_from_impl(SchemaOfJson::default()),
    ]
}

/// `from_json(col("value"), "user STRING, amount DOUBLE")` for the DataFrame API (also
/// `"ARRAY<INT>"`, `"MAP<STRING, BIGINT>"`, or the text [`schema_of_json`] returns).
pub fn from_json(value: Expr, ddl: &str) -> Expr {
    ScalarUDF::new_from_impl(FromJson::default()).call(vec![value, lit(ddl)])
}

/// `to_json(struct_expr | array_expr | map_expr)` for the DataFrame API.
pub fn to_json(value: Expr) -> Expr {
    ScalarUDF::new_from_impl(ToJson::default()).call(vec![value])
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
