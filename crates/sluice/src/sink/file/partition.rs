//! Hive-style partition folders (Spark's `partitionBy`): `<path>/user=alice/day=2024-01-01/`.
//!
//! Writing ([`PartitionColumns::split`]): rows are grouped by the text of their partition
//! values (Spark's cast to string, escaped as Hive's `escapePathName`, null or empty as
//! `__HIVE_DEFAULT_PARTITION__`); the data files hold the other columns only.
//!
//! Reading ([`discover`]): the `k=v` folders between the base path and each file become
//! columns after the data columns, typed as the reader's schema says or, without one, inferred
//! as Spark infers them (`spark.sql.sources.partitionColumnTypeInference.enabled`): int, bigint,
//! decimal, double, timestamp, date, else string; conflicting types widen as Spark's
//! `findWiderTypeWithoutStringPromotion`, or become string.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, RecordBatch, StringArray, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{class, Result, SluiceError};

/// The folder name of a null (or empty string) partition value.
pub const DEFAULT_PARTITION_NAME: &str = "__HIVE_DEFAULT_PARTITION__";

/// The `partitionBy` option: column names separated by commas (a JSON array of names, as
/// Spark's `__partition_columns` holds them, is accepted too). Empty when unset.
pub fn partition_by_option(options: &HashMap<String, String>) -> Result<Vec<String>> {
    let Some(value) = options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("partitionBy"))
        .map(|(_, v)| v.trim())
    else {
        return Ok(Vec::new());
    };
    if value.starts_with('[') {
        return serde_json::from_str::<Vec<String>>(value).map_err(|e| {
            SluiceError::query(
                class::INVALID_OPTION_VALUE,
                format!("option partitionBy is not a JSON array of column names ({e}): {value}"),
            )
        });
    }
    Ok(value
        .split(',')
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect())
}

/// `names` (from `partitionBy`) resolved in `schema` (case-insensitively) and checked as
/// Spark's `validatePartitionColumn` checks them (each exists and is atomic, one column is
/// left for the data files): the columns' names as the schema spells them.
pub fn resolve_partition_columns(schema: &Schema, names: &[String]) -> Result<Vec<String>> {
    Ok(PartitionColumns::resolve(schema, names)?.names(schema))
}

/// The partition columns of a write, resolved against the written schema.
#[derive(Debug, Clone)]
pub(crate) struct PartitionColumns {
    /// Indices of the partition columns in the written schema, in `partitionBy` order.
    indices: Vec<usize>,
    /// The columns the data files hold (the written schema without the partition columns).
    data_schema: SchemaRef,
}

impl PartitionColumns {
    /// Resolves `names` in `schema` (case-insensitively, as Spark by default) and checks them as
    /// Spark's `PartitioningUtils.validatePartitionColumn`: each exists, has an atomic type,
    /// and at least one column is left for the data files.
    pub(crate) fn resolve(schema: &Schema, names: &[String]) -> Result<PartitionColumns> {
        let mut indices = Vec::with_capacity(names.len());
        for name in names {
            let i = schema
                .fields()
                .iter()
                .position(|f| f.name() == name)
                .or_else(|| {
                    schema
                        .fields()
                        .iter()
                        .position(|f| f.name().eq_ignore_ascii_case(name))
                })
                .ok_or_else(|| {
                    SluiceError::query(
                        class::PARTITION_COLUMN_NOT_FOUND_IN_SCHEMA,
                        format!(
                            "Partition column `{name}` not found in schema {}: partitionBy \
                             names a column of the written query",
                            crate::schema::spark_simple_string(&DataType::Struct(
                                schema.fields().clone()
                            ))
                        ),
                    )
                })?;
            let field = schema.field(i);
            if !is_atomic(field.data_type()) {
                return Err(SluiceError::query(
                    class::INVALID_PARTITION_COLUMN_DATA_TYPE,
                    format!(
                        "Cannot use \"{}\" for partition column `{}`: partition values must be \
                         of an atomic type (cast it, or partition by one of its fields)",
                        crate::schema::spark_type_name(field.data_type()),
                        field.name()
                    ),
                ));
            }
            if indices.contains(&i) {
                return Err(SluiceError::query(
                    class::COLUMN_ALREADY_EXISTS,
                    format!("The column `{}` appears twice in partitionBy", field.name()),
                ));
            }
            indices.push(i);
        }
        if !indices.is_empty() && indices.len() == schema.fields().len() {
            return Err(SluiceError::query(
                class::ALL_PARTITION_COLUMNS_NOT_ALLOWED,
                "Cannot use all columns for partition columns: keep at least one column out of \
                 partitionBy, it is what the data files hold",
            ));
        }
        let data_schema = Arc::new(Schema::new_with_metadata(
            schema
                .fields()
                .iter()
                .enumerate()
                .filter(|(i, _)| !indices.contains(i))
                .map(|(_, f)| f.clone())
                .collect::<Vec<_>>(),
            schema.metadata().clone(),
        ));
        Ok(PartitionColumns {
            indices,
            data_schema,
        })
    }

    /// The partition columns' names as `schema` (the resolved one) spells them.
    pub(crate) fn names(&self, schema: &Schema) -> Vec<String> {
        self.indices
            .iter()
            .map(|&i| schema.field(i).name().clone())
            .collect()
    }

    /// The schema of the data files.
    pub(crate) fn data_schema(&self) -> &SchemaRef {
        &self.data_schema
    }

    /// Splits `batches` by partition value: `(folder, rows without the partition columns)` per
    /// distinct value, in the order each value first appears; rows keep their order. The
    /// folder is relative (`user=alice/day=2024-01-01`); without partition columns it is
    /// empty and the batches are returned whole.
    pub(crate) fn split(&self, batches: &[RecordBatch]) -> Result<Vec<(String, Vec<RecordBatch>)>> {
        if self.indices.is_empty() {
            let all: Vec<RecordBatch> = batches
                .iter()
                .filter(|b| b.num_rows() > 0)
                .cloned()
                .collect();
            return Ok(if all.is_empty() {
                Vec::new()
            } else {
                vec![(String::new(), all)]
            });
        }
        let mut order: Vec<(String, Vec<RecordBatch>)> = Vec::new();
        let mut slot: HashMap<String, usize> = HashMap::new();
        for batch in batches.iter().filter(|b| b.num_rows() > 0) {
            let mut rows: Vec<(usize, Vec<u32>)> = Vec::new();
            let mut folder = String::new();
            for row in 0..batch.num_rows() {
                folder.clear();
                for (n, &c) in self.indices.iter().enumerate() {
                    if n > 0 {
                        folder.push('/');
                    }
                    let name = batch.schema_ref().field(c).name().clone();
                    folder.push_str(&escape_path_name(&name));
                    folder.push('=');
                    folder.push_str(&value_fragment(batch.column(c).as_ref(), row)?);
                }
                let s = match slot.get(folder.as_str()) {
                    Some(&s) => s,
                    None => {
                        slot.insert(folder.clone(), order.len());
                        order.push((folder.clone(), Vec::new()));
                        order.len() - 1
                    }
                };
                match rows.iter_mut().find(|(t, _)| *t == s) {
                    Some((_, r)) => r.push(row as u32),
                    None => rows.push((s, vec![row as u32])),
                }
            }
            for (s, r) in rows {
                let take = UInt32Array::from(r);
                let columns: Vec<ArrayRef> = (0..batch.num_columns())
                    .filter(|i| !self.indices.contains(i))
                    .map(|i| arrow::compute::take(batch.column(i).as_ref(), &take, None))
                    .collect::<std::result::Result<_, _>>()?;
                order[s]
                    .1
                    .push(RecordBatch::try_new(self.data_schema.clone(), columns)?);
            }
        }
        Ok(order)
    }
}

fn is_atomic(t: &DataType) -> bool {
    !matches!(
        t,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::Map(..)
            | DataType::Union(..)
            | DataType::Null
            | DataType::Duration(_)
            | DataType::Interval(_)
    )
}

/// The folder text of value `row` of `column`: Spark's string cast, escaped; null and the
/// empty string are [`DEFAULT_PARTITION_NAME`].
fn value_fragment(column: &dyn Array, row: usize) -> Result<String> {
    if column.is_null(row) {
        return Ok(DEFAULT_PARTITION_NAME.to_string());
    }
    let mut text = String::new();
    crate::value_text::write_show(&mut text, column, row)?;
    if text.is_empty() {
        return Ok(DEFAULT_PARTITION_NAME.to_string());
    }
    Ok(escape_path_name(&text))
}

/// Hive's `FileUtils.escapePathName` as Spark has it: `"#%'*/:=?\{[]^`, DEL and the control
/// characters become `%XX`.
pub(crate) fn escape_path_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        let escape = matches!(
            ch,
            '"' | '#'
                | '%'
                | '\''
                | '*'
                | '/'
                | ':'
                | '='
                | '?'
                | '\\'
                | '\u{7F}'
                | '{'
                | '['
                | ']'
                | '^'
        ) || ('\u{01}'..='\u{1F}').contains(&ch);
        if escape {
            out.push_str(&format!("%{:02X}", ch as u32));
        } else {
            out.push(ch);
        }
    }
    out
}

/// The inverse of [`escape_path_name`]: `%XX` (two hex digits) is the character `XX`.
pub(crate) fn unescape_path_name(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    while let Some((i, ch)) = chars.next() {
        if ch == '%' {
            if let Some(v) = s
                .get(i + 1..i + 3)
                .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v as char);
                chars.next();
                chars.next();
                continue;
            }
        }
        out.push(ch);
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Reading: partition discovery.

/// The partition columns found in the folders of a set of files.
#[derive(Debug, Clone)]
pub(crate) struct Discovered {
    /// The partition columns, with their resolved types, in folder order.
    pub(crate) fields: Vec<Field>,
    /// Per file (in the order given to [`discover`]): each column's raw value, `None` for
    /// [`DEFAULT_PARTITION_NAME`].
    pub(crate) values: Vec<Vec<Option<String>>>,
}

impl Discovered {
    /// `data_schema` followed by the partition columns, as Spark's `HadoopFsRelation.schema`.
    pub(crate) fn full_schema(&self, data_schema: &Schema) -> SchemaRef {
        let mut fields: Vec<Field> = data_schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.extend(self.fields.iter().cloned());
        Arc::new(Schema::new_with_metadata(
            fields,
            data_schema.metadata().clone(),
        ))
    }

    /// Whether `name` is one of the partition columns (case-insensitively).
    pub(crate) fn has(&self, name: &str) -> bool {
        self.fields
            .iter()
            .any(|f| f.name().eq_ignore_ascii_case(name))
    }

    /// `batch` (a batch of file `file`) with the partition columns appended, as `schema`
    /// (from [`Discovered::full_schema`]).
    pub(crate) fn append(
        &self,
        batch: &RecordBatch,
        file: usize,
        schema: &SchemaRef,
    ) -> Result<RecordBatch> {
        let mut columns = batch.columns().to_vec();
        for (field, value) in self.fields.iter().zip(&self.values[file]) {
            columns.push(constant(field, value.as_deref(), batch.num_rows())?);
        }
        let data_fields = &schema.fields()[..batch.num_columns()];
        let mut fields: Vec<Field> = data_fields
            .iter()
            .zip(batch.schema().fields())
            .map(|(s, b)| s.as_ref().clone().with_data_type(b.data_type().clone()))
            .collect();
        fields.extend(self.fields.iter().cloned());
        let target = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
        Ok(RecordBatch::try_new(target, columns)?)
    }
}

/// A column of `rows` copies of the partition value `raw` (Spark's cast from string).
fn constant(field: &Field, raw: Option<&str>, rows: usize) -> Result<ArrayRef> {
    let Some(raw) = raw else {
        return Ok(new_null_array(field.data_type(), rows));
    };
    let text: ArrayRef = Arc::new(StringArray::from(vec![raw; rows.max(1)]));
    let options = arrow::compute::CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast =
        arrow::compute::cast_with_options(&text, field.data_type(), &options).map_err(|e| {
            SluiceError::query(
                class::PARTITION_VALUE_CAST_FAILED,
                format!(
                "Failed to cast value `{raw}` to \"{}\" for partition column `{}` ({e}): give the \
                 column the type its folders hold in the reader's schema",
                crate::schema::spark_type_name(field.data_type()),
                field.name()
            ),
            )
        })?;
    Ok(cast.slice(0, rows))
}

/// The partition columns in the folders between `base` and each of `files`: for each file the
/// `k=v` names from its parent folder up, stopping at `base` or at the first folder that is
/// not `k=v` (Spark's `parsePartition`). `None` when no file has any. Types come from `schema`
/// for the columns it has (case-insensitively), else they are inferred.
pub(crate) fn discover(
    base: &Path,
    files: &[PathBuf],
    schema: Option<&Schema>,
) -> Result<Option<Discovered>> {
    let mut names: Option<Vec<String>> = None;
    let mut values = Vec::with_capacity(files.len());
    for file in files {
        let mut spec: Vec<(String, String)> = Vec::new();
        let mut dir = file.parent();
        while let Some(d) = dir {
            if d == base || !d.starts_with(base) {
                break;
            }
            let Some(name) = d.file_name().map(|n| n.to_string_lossy().into_owned()) else {
                break;
            };
            let Some((k, v)) = name.split_once('=') else {
                break;
            };
            if k.is_empty() {
                break;
            }
            spec.push((unescape_path_name(k), v.to_string()));
            dir = d.parent();
        }
        spec.reverse();
        let these: Vec<String> = spec.iter().map(|(k, _)| k.clone()).collect();
        match &names {
            None => names = Some(these),
            Some(n) if !same_names(n, &these) => {
                return Err(SluiceError::input(
                    class::CONFLICTING_PARTITION_COLUMN_NAMES,
                    format!(
                        "Conflicting partition column names detected under {}: [{}] for {} but \
                         [{}] for others. Partition folders must name the same columns in the \
                         same order for every file: move the odd files out, or read one \
                         partition folder on its own",
                        base.display(),
                        these.join(", "),
                        file.display(),
                        n.join(", ")
                    ),
                ));
            }
            Some(_) => {}
        }
        values.push(
            spec.into_iter()
                .map(|(_, v)| (v != DEFAULT_PARTITION_NAME).then(|| unescape_path_name(&v)))
                .collect::<Vec<_>>(),
        );
    }
    let names = match names {
        Some(n) if !n.is_empty() => n,
        _ => return Ok(None),
    };
    let fields = names
        .iter()
        .enumerate()
        .map(|(c, name)| {
            let given = schema.and_then(|s| {
                s.fields()
                    .iter()
                    .find(|f| f.name().eq_ignore_ascii_case(name))
                    .map(|f| f.as_ref().clone().with_nullable(true))
            });
            given.unwrap_or_else(|| {
                let t = values
                    .iter()
                    .map(|v: &Vec<Option<String>>| {
                        v[c].as_deref().map_or(DataType::Null, infer_type)
                    })
                    .reduce(|a, b| wider_type(&a, &b))
                    .unwrap_or(DataType::Null);
                let t = if t == DataType::Null {
                    DataType::Utf8
                } else {
                    t
                };
                Field::new(name, t, true)
            })
        })
        .collect();
    Ok(Some(Discovered { fields, values }))
}

fn same_names(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.eq_ignore_ascii_case(y))
}

/// Spark's `inferPartitionColumnValue`: int, bigint, decimal(p, 0), double, timestamp, date,
/// else string.
fn infer_type(raw: &str) -> DataType {
    if raw.parse::<i32>().is_ok() {
        return DataType::Int32;
    }
    if raw.parse::<i64>().is_ok() {
        return DataType::Int64;
    }
    let digits = raw.strip_prefix(['-', '+']).unwrap_or(raw);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let significant = digits.trim_start_matches('0').len().max(1);
        if significant <= 38 {
            return DataType::Decimal128(significant as u8, 0);
        }
    }
    if is_java_double(raw) {
        return DataType::Float64;
    }
    if is_partition_timestamp(raw) {
        return DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    }
    if is_date(raw) {
        return DataType::Date32;
    }
    DataType::Utf8
}

/// Whether Java's `Double.parseDouble` accepts `s` (decimal forms, `NaN`, `Infinity`, an
/// optional `d`/`f` suffix; not Rust's `inf`).
fn is_java_double(s: &str) -> bool {
    let t = s.trim();
    let unsigned = t.strip_prefix(['-', '+']).unwrap_or(t);
    if unsigned == "NaN" || unsigned == "Infinity" {
        return true;
    }
    let body = unsigned
        .strip_suffix(['d', 'D', 'f', 'F'])
        .unwrap_or(unsigned);
    !body.is_empty()
        && body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'-' | b'+'))
        && body.bytes().any(|b| b.is_ascii_digit())
        && body.parse::<f64>().is_ok()
}

/// `yyyy-MM-dd HH:mm:ss[.S...]` (Spark's `timestampPartitionPattern`).
fn is_partition_timestamp(s: &str) -> bool {
    let Some((date, time)) = s.split_once(' ') else {
        return false;
    };
    let (hms, fraction) = match time.split_once('.') {
        Some((h, f)) => (h, Some(f)),
        None => (time, None),
    };
    let parts: Vec<&str> = hms.split(':').collect();
    is_date(date)
        && parts.len() == 3
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_digit()))
        && parts[0] < "24"
        && parts[1] < "60"
        && parts[2] < "60"
        && fraction
            .is_none_or(|f| (1..=9).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()))
}

/// `yyyy-MM-dd`, a real calendar date.
fn is_date(s: &str) -> bool {
    s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
}

/// Spark's `findWiderTypeWithoutStringPromotionForTwo` on partition types, else string.
fn wider_type(a: &DataType, b: &DataType) -> DataType {
    use DataType::*;
    if a == b {
        return a.clone();
    }
    match (a, b) {
        (Null, t) | (t, Null) => t.clone(),
        (Int32, Int64) | (Int64, Int32) => Int64,
        (Int32 | Int64 | Decimal128(..), Float64) | (Float64, Int32 | Int64 | Decimal128(..)) => {
            Float64
        }
        (Decimal128(p1, _), Decimal128(p2, _)) => Decimal128((*p1).max(*p2), 0),
        (Int32, Decimal128(p, _)) | (Decimal128(p, _), Int32) => Decimal128((*p).max(10), 0),
        (Int64, Decimal128(p, _)) | (Decimal128(p, _), Int64) => Decimal128((*p).max(20), 0),
        (Date32, Timestamp(..)) | (Timestamp(..), Date32) => {
            Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        _ => Utf8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_hive() {
        assert_eq!(escape_path_name("a b/c:d=e%"), "a b%2Fc%3Ad%3De%25");
        assert_eq!(unescape_path_name("a b%2Fc%3Ad%3De%25"), "a b/c:d=e%");
        assert_eq!(unescape_path_name("100%"), "100%");
        assert_eq!(
            escape_path_name("2024-01-01 00:00:00"),
            "2024-01-01 00%3A00%3A00"
        );
    }

    #[test]
    fn infers_types_as_spark() {
        assert_eq!(infer_type("1"), DataType::Int32);
        assert_eq!(infer_type("3000000000"), DataType::Int64);
        assert_eq!(
            infer_type("123456789012345678901"),
            DataType::Decimal128(21, 0)
        );
        assert_eq!(infer_type("1.5"), DataType::Float64);
        assert_eq!(infer_type("inf"), DataType::Utf8);
        assert_eq!(infer_type("2024-02-30"), DataType::Utf8);
        assert_eq!(infer_type("2024-02-03"), DataType::Date32);
        assert!(matches!(
            infer_type("2024-02-03 10:00:00"),
            DataType::Timestamp(..)
        ));
        assert_eq!(infer_type("alice"), DataType::Utf8);
        assert_eq!(
            wider_type(&DataType::Int32, &DataType::Float64),
            DataType::Float64
        );
        assert_eq!(
            wider_type(&DataType::Int32, &DataType::Date32),
            DataType::Utf8
        );
        assert_eq!(
            wider_type(&DataType::Null, &DataType::Date32),
            DataType::Date32
        );
    }

    #[test]
    fn discovers_folders_up_to_the_first_plain_one() {
        let base = Path::new("/out");
        let files = vec![
            PathBuf::from("/out/k=1/d=2024-01-01/f1.json"),
            PathBuf::from("/out/k=__HIVE_DEFAULT_PARTITION__/d=2024-01-02/f2.json"),
        ];
        let d = discover(base, &files, None).unwrap().unwrap();
        assert_eq!(d.fields[0], Field::new("k", DataType::Int32, true));
        assert_eq!(d.fields[1], Field::new("d", DataType::Date32, true));
        assert_eq!(d.values[1][0], None);
        // A plain folder under the base ends the walk: no partition columns.
        let plain = vec![PathBuf::from("/out/k=1/x/f.json")];
        assert!(discover(base, &plain, None).unwrap().is_none());
        let mixed = vec![
            PathBuf::from("/out/k=1/f.json"),
            PathBuf::from("/out/f.json"),
        ];
        let err = discover(base, &mixed, None).unwrap_err();
        assert!(err.is(class::CONFLICTING_PARTITION_COLUMN_NAMES), "{err}");
    }

    #[test]
    fn validates_partition_columns_as_spark() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int32, false),
            Field::new("User", DataType::Utf8, true),
        ]);
        let p = PartitionColumns::resolve(&schema, &["user".to_string()]).unwrap();
        assert_eq!(p.data_schema().fields().len(), 1);
        let all = ["id".to_string(), "user".to_string()];
        let err = PartitionColumns::resolve(&schema, &all).unwrap_err();
        assert!(err.is(class::ALL_PARTITION_COLUMNS_NOT_ALLOWED), "{err}");
        let err = PartitionColumns::resolve(&schema, &["nope".to_string()]).unwrap_err();
        assert!(err.is(class::PARTITION_COLUMN_NOT_FOUND_IN_SCHEMA), "{err}");
    }
}
