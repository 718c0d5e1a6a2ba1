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
            if crate::source::file::nested_type_has_non_string_map_key(&t) {
                return plan_err!(
                    "[DATATYPE_MISMATCH.INVALID_JSON_MAP_KEY_TYPE] from_json: Input schema \"{}\" can only contain STRING as a key type for a MAP.",
                    crate::schema::spark_type_name(&t)
                );
            }
            Ok(crate::source::file::nullable_type(&t))
        }
        _ => plan_err!("from_json(value, schema): the schema must be a DDL string literal such as 'user STRING, amount DOUBLE', 'ARRAY<INT>' or schema_of_json('{{\"a\": 1}}')"),
    }
}

/// The options of `from_json(value, schema, map('k', 'v', ..))`.
fn options_arg(args: &[ColumnarValue]) -> DfResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    let Some(arg) = args.get(2) else {
        return Ok(out);
    };
    let ColumnarValue::Scalar(ScalarValue::Map(m)) = arg else {
        return plan_err!("from_json: the options must be a literal map('key', 'value', ..)");
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
    if let Some(mode) = crate::conf::option(&out, "mode") {
        if !mode.eq_ignore_ascii_case("PERMISSIVE") && !mode.eq_ignore_ascii_case("FAILFAST") {
            return plan_err!(
                "from_json() doesn't support the {} mode. Acceptable modes are PERMISSIVE and FAILFAST.",
                mode.to_ascii_uppercase()
            );
        }
    }
    Ok(out)
}

/// `from_json(value, 'user STRING, amount DOUBLE'[, options])` -> struct; also
/// `from_json(value, 'ARRAY<INT>')` or `'MAP<STRING, INT>'` (Spark's `DataType.fromDDL`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct FromJson {
    signature: Signature,
}

impl Default for FromJson {
    fn default() -> Self {
        Self {
            signature: Signature::user_defined(Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for FromJson {
    fn name(&self) -> &str {
        "from_json"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(2..=3).contains(&arg_types.len()) {
            return plan_err!("from_json takes (value, schema[, options])");
        }
        Ok(arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| if i == 2 { t.clone() } else { DataType::Utf8 })
            .collect())
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
        let parsed = crate::source::file::parse_json_values(&docs, &dt, &options)
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

/// `to_json(struct | array | map)` -> a JSON string per row, as Spark writes it
/// ([`crate::value_text::write_json`]: null struct fields omitted, nested values in full).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct ToJson {
    signature: Signature,
}

impl Default for ToJson {
    fn default() -> Self {
        Self {
            signature: Signature::any(1, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for ToJson {
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
        let arr: ArrayRef = args.args[0].to_array(args.number_rows)?;
        let mut out = arrow::array::StringBuilder::new();
        let mut text = String::new();
        for i in 0..arr.len() {
            if arr.is_null(i) {
                out.append_null();
                continue;
            }
            text.clear();
            crate::value_text::write_json(&mut text, arr.as_ref(), i)
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
            out.append_value(&text);
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
    }
}

/// `schema_of_json('{"a": 1}')` -> `STRUCT<a: BIGINT>`, Spark's inferred type of a JSON
/// document ([`infer_json_type`]).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct SchemaOfJson {
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
        if !(1..=2).contains(&arg_types.len()) {
            return plan_err!("schema_of_json takes (json[, options])");
        }
        Ok(arg_types
            .iter()
            .enumerate()
            .map(|(i, t)| if i == 1 { t.clone() } else { DataType::Utf8 })
            .collect())
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let values = args.args[0].to_array(args.number_rows)?;
        let values = arrow::compute::cast(&values, &DataType::Utf8)?;
        let mut out = arrow::array::StringBuilder::new();
        for v in values.as_string::<i32>().iter() {
            match v {
                None => out.append_null(),
                Some(doc) => out.append_value(
                    schema_of_json(doc)
                        .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?,
                ),
            }
        }
        Ok(ColumnarValue::Array(Arc::new(out.finish())))
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
pub(crate) fn infer_json_type(doc: &str) -> crate::error::Result<DataType> {
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

/// Replaces each `schema_of_json('<literal>')` in a SQL text by the string literal of its
/// result, so that `from_json(v, schema_of_json('{..}'))` has its schema when the query is
/// planned (Spark requires the argument to be foldable too). Text inside string literals,
/// quoted identifiers and comments is left alone.
pub(crate) fn fold_schema_of_json(sql: &str) -> crate::error::Result<String> {
    const NAME: &str = "schema_of_json";
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
                if !sql[start..i].eq_ignore_ascii_case(NAME) {
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
                let ty = schema_of_json(&doc)?;
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

pub(crate) fn json_udfs() -> Vec<ScalarUDF> {
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
