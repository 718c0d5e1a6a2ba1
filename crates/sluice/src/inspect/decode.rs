//! Decoding one operator's stored pairs into Arrow rows, from its recorded schema.
//!
//! # Decoding
//!
//! The operator's recorded schema (`state/<op>/_metadata/schema`, a
//! [`StateSchema`]) names the operator and its key and value fields. Each field's exact Arrow
//! type is its `arrowType` (recorded since state inspection exists); for schema files without
//! it, the type is rebuilt from the Spark type name (`BIGINT`, `STRUCT<start: TIMESTAMP, ..>`).
//! Every decoded row is encoded again and compared with the stored bytes, so a type that does
//! not fit is an error, never wrong values.
//!
//! | operator (schema `operator`) | key | value |
//! |---|---|---|
//! | `stateStoreSave` (aggregation, windows and session windows included) | grouping columns (arrow row format) | the accumulators' state fields (arrow row format), e.g. `count[count]` |
//! | `dedupe` | the deduplication columns | none |
//! | `dedupeWithinWatermark` | the deduplication columns | `expiresAtMicros` |
//! | `flatMapGroupsWithState` | the grouping columns | `timeoutTimestampMs`, `groupState` (the user's state as JSON) |
//! | `symmetricHashJoin ..` (stream-stream join) | `side` (`left`/`right`), the join-key columns (arrow row format), `seq` (the row's sequence number) | `matched`, then the left side's fields and the right side's fields (arrow row format of the row's own side; the other side's columns are null) |
//!
//! A join's value schema is the left fields followed by the right fields; where the left ones
//! end is the schema's `leftFields`. Join schema files written before it was recorded are
//! refused with `SLUICE_NOT_SUPPORTED_YET` (the file is written once, when the operator first
//! runs, and is not rewritten on restart).

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arrow::array::{
    new_null_array, ArrayRef, BooleanBuilder, Int64Builder, RecordBatch, StringBuilder,
    UInt32Array, UInt64Builder,
};
use arrow::compute::interleave;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::row::{RowConverter, SortField};

use super::probe::operator_name;
use crate::error::class;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::{StateField, StateSchema};
use crate::schema::spark_type;

/// `fmgws`' marker for "no timeout" in the first 8 bytes of a value.
pub(super) const NO_TIMEOUT: i64 = i64::MIN;

/// How one operator's values are laid out.
enum ValueLayout {
    /// Arrow row format of the value fields (aggregation: accumulator states).
    Rows(RowConverter),
    /// No value (deduplication).
    Empty,
    /// One little-endian i64 (deduplication within watermark: the expiry in µs).
    I64,
    /// Timeout (i64 LE, `i64::MIN` = none) + the user's state as JSON (flatMapGroupsWithState).
    GroupState,
    /// Stream-stream join: keys are `side (u8) + u32 LE length + join-key row + u64 BE
    /// sequence`, values `matched (u8) + that side's row` (arrow row format of its fields).
    Join {
        left: RowConverter,
        right: RowConverter,
        left_types: Vec<DataType>,
        right_types: Vec<DataType>,
    },
}

/// Decodes one operator's stored pairs into rows, from its recorded [`StateSchema`].
pub struct StateDecoder {
    operator: String,
    keys: Option<RowConverter>,
    values: ValueLayout,
    schema: SchemaRef,
    /// Whether every type came from a recorded `arrowType` (for error messages).
    exact_types: bool,
}

impl fmt::Debug for StateDecoder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateDecoder")
            .field("operator", &self.operator)
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl StateDecoder {
    /// A decoder for the operator the schema describes. Stream-stream joins whose schema does
    /// not record where the left side's fields end (`leftFields`, absent in files written
    /// before it was recorded) are `SLUICE_NOT_SUPPORTED_YET`, as are operators this build does
    /// not know.
    pub fn new(schema: &StateSchema) -> Result<Self> {
        let name = operator_name(schema);
        let base = name.split_whitespace().next().unwrap_or("");
        let key_types = field_types(&schema.key_schema)?;
        let mut exact_types = all_exact(&schema.key_schema);
        let keys = if key_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                key_types
                    .iter()
                    .map(|t| SortField::new(t.clone()))
                    .collect(),
            )?)
        };
        let mut fields: Vec<Field> = vec![Field::new("partition", DataType::UInt32, false)];
        for (f, t) in schema.key_schema.iter().zip(&key_types) {
            fields.push(Field::new(&f.name, t.clone(), true));
        }
        let values = match base {
            "stateStoreSave" => {
                let types = field_types(&schema.value_schema)?;
                exact_types &= all_exact(&schema.value_schema);
                for (f, t) in schema.value_schema.iter().zip(&types) {
                    fields.push(Field::new(&f.name, t.clone(), true));
                }
                ValueLayout::Rows(RowConverter::new(
                    types.into_iter().map(SortField::new).collect(),
                )?)
            }
            "dedupe" => ValueLayout::Empty,
            "dedupeWithinWatermark" => {
                let name = schema
                    .value_schema
                    .first()
                    .map_or("expiresAtMicros", |f| f.name.as_str());
                fields.push(Field::new(name, DataType::Int64, true));
                ValueLayout::I64
            }
            "flatMapGroupsWithState" => {
                fields.push(Field::new("timeoutTimestampMs", DataType::Int64, true));
                fields.push(Field::new("groupState", DataType::Utf8, true));
                ValueLayout::GroupState
            }
            "symmetricHashJoin" => {
                let Some(left_len) = schema.left_fields else {
                    return Err(SluiceError::not_supported_yet(format!(
                        "reading the state of the stream-stream join operator {:?}: its schema \
                         file predates Sluice recording where the left side's fields end in the \
                         value schema (`leftFields`), so the rows of the two sides cannot be \
                         decoded. The schema file is written once, when the operator first runs, \
                         and restarting the query on this checkpoint does not rewrite it: run the \
                         query with this build on a new checkpoint location to inspect its join \
                         state; `sluice checkpoint describe` shows this one's schema and versions",
                        schema.operator
                    )));
                };
                if left_len > schema.value_schema.len() {
                    return Err(SluiceError::checkpoint(
                        class::STATE_DECODE_FAILED,
                        format!(
                            "the schema of the stream-stream join operator {:?} records {left_len} \
                             left-side fields but only {} value fields: restore the checkpoint, \
                             or start the query with a new checkpoint location",
                            schema.operator,
                            schema.value_schema.len()
                        ),
                    ));
                }
                let types = field_types(&schema.value_schema)?;
                exact_types &= all_exact(&schema.value_schema);
                // partition, side, the key columns, seq, matched, left fields, right fields.
                fields.insert(1, Field::new("side", DataType::Utf8, false));
                fields.push(Field::new("seq", DataType::UInt64, false));
                fields.push(Field::new("matched", DataType::Boolean, false));
                for (f, t) in schema.value_schema.iter().zip(&types) {
                    fields.push(Field::new(&f.name, t.clone(), true));
                }
                let conv = |ts: &[DataType]| {
                    RowConverter::new(ts.iter().map(|t| SortField::new(t.clone())).collect())
                };
                ValueLayout::Join {
                    left: conv(&types[..left_len])?,
                    right: conv(&types[left_len..])?,
                    left_types: types[..left_len].to_vec(),
                    right_types: types[left_len..].to_vec(),
                }
            }
            _ => {
                return Err(SluiceError::not_supported_yet(format!(
                    "reading the state of operator {:?}: this build does not know how it encodes \
                     its state",
                    schema.operator
                )))
            }
        };
        Ok(Self {
            operator: schema.operator.clone(),
            keys,
            values,
            schema: Arc::new(Schema::new(unique_names(fields))),
            exact_types,
        })
    }

    /// The schema of [`decode`](Self::decode)'s batches: `partition`, keys, values (for a
    /// join: `partition`, `side`, keys, `seq`, `matched`, left fields, right fields).
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn failed(&self, detail: impl fmt::Display) -> SluiceError {
        let hint = if self.exact_types {
            "the state files do not match the recorded schema: restore the checkpoint, or start \
             the query with a new checkpoint location"
        } else {
            "the schema file was written before Sluice recorded exact Arrow types, and the types \
             rebuilt from the Spark type names do not fit; run the query once with this build \
             on a new checkpoint location to inspect its state"
        };
        SluiceError::checkpoint(
            class::STATE_DECODE_FAILED,
            format!(
                "the state of operator {:?} does not decode with its recorded schema ({detail}): \
                 {hint}",
                self.operator
            ),
        )
    }

    /// Decodes pairs (with the partition each came from) into one batch.
    pub fn decode(
        &self,
        partitions: &[u32],
        keys: &[Box<[u8]>],
        values: &[Box<[u8]>],
    ) -> Result<RecordBatch> {
        if partitions.len() != keys.len() || keys.len() != values.len() {
            return Err(SluiceError::internal("decode: lengths differ"));
        }
        if let ValueLayout::Join {
            left,
            right,
            left_types,
            right_types,
        } = &self.values
        {
            return self.decode_join(
                partitions,
                keys,
                values,
                [(left, left_types), (right, right_types)],
            );
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(partitions.to_vec()))];
        if let Some(conv) = &self.keys {
            columns.extend(self.decode_rows(conv, keys, "key")?);
        } else if let Some(i) = keys.iter().position(|k| !k.is_empty()) {
            return Err(self.failed(format!(
                "the operator has no key columns but key {i} has {} bytes",
                keys[i].len()
            )));
        }
        match &self.values {
            ValueLayout::Rows(conv) => columns.extend(self.decode_rows(conv, values, "value")?),
            ValueLayout::Empty => {}
            ValueLayout::I64 => {
                let mut b = Int64Builder::with_capacity(values.len());
                for v in values {
                    let bytes: [u8; 8] = (**v)
                        .try_into()
                        .map_err(|_| self.failed(format!("a value of {} bytes, not 8", v.len())))?;
                    b.append_value(i64::from_le_bytes(bytes));
                }
                columns.push(Arc::new(b.finish()));
            }
            ValueLayout::Join { .. } => return Err(SluiceError::internal("decode: join layout")),
            ValueLayout::GroupState => {
                let mut timeouts = Int64Builder::with_capacity(values.len());
                let mut states = StringBuilder::new();
                for v in values {
                    let (t, json) = v
                        .split_first_chunk::<8>()
                        .ok_or_else(|| self.failed(format!("a value of {} bytes", v.len())))?;
                    let t = i64::from_le_bytes(*t);
                    timeouts.append_option((t != NO_TIMEOUT).then_some(t));
                    if json.is_empty() {
                        states.append_null();
                    } else {
                        let text = std::str::from_utf8(json)
                            .map_err(|e| self.failed(format!("a group state is not UTF-8: {e}")))?;
                        states.append_value(text);
                    }
                }
                columns.push(Arc::new(timeouts.finish()));
                columns.push(Arc::new(states.finish()));
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Decodes stream-stream join pairs: one row per stored row of either side, with the other
    /// side's columns null.
    fn decode_join(
        &self,
        partitions: &[u32],
        keys: &[Box<[u8]>],
        values: &[Box<[u8]>],
        sides: [(&RowConverter, &Vec<DataType>); 2],
    ) -> Result<RecordBatch> {
        let n = keys.len();
        let mut side_names = StringBuilder::new();
        let mut seqs = UInt64Builder::with_capacity(n);
        let mut matched = BooleanBuilder::with_capacity(n);
        let mut join_keys: Vec<Box<[u8]>> = Vec::with_capacity(n);
        let mut rows: [Vec<Box<[u8]>>; 2] = [Vec::new(), Vec::new()];
        // Per stored row: (side, index among that side's rows).
        let mut at: Vec<(usize, usize)> = Vec::with_capacity(n);
        for (i, (k, v)) in keys.iter().zip(values).enumerate() {
            let (side, key, seq) = parse_join_key(k).ok_or_else(|| {
                self.failed(format!(
                    "key {i} ({} bytes) is not side + length + join key + sequence",
                    k.len()
                ))
            })?;
            let (flag, row) = v
                .split_first()
                .ok_or_else(|| self.failed(format!("value {i} is empty")))?;
            if *flag > 1 {
                return Err(self.failed(format!("value {i} has matched flag {flag}, not 0 or 1")));
            }
            side_names.append_value(if side == 0 { "left" } else { "right" });
            seqs.append_value(seq);
            matched.append_value(*flag == 1);
            join_keys.push(key.into());
            at.push((side as usize, rows[side as usize].len()));
            rows[side as usize].push(row.into());
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(partitions.to_vec())),
            Arc::new(side_names.finish()),
        ];
        match &self.keys {
            Some(conv) => columns.extend(self.decode_rows(conv, &join_keys, "join key")?),
            None => return Err(self.failed("the join's schema records no key fields")),
        }
        columns.push(Arc::new(seqs.finish()));
        columns.push(Arc::new(matched.finish()));
        for (s, (conv, types)) in sides.into_iter().enumerate() {
            let what = if s == 0 { "left row" } else { "right row" };
            let decoded = self.decode_rows(conv, &rows[s], what)?;
            for (col, t) in decoded.iter().zip(types.iter()) {
                // Source 0: this side's rows; source 1: one null for the other side's rows.
                let null = new_null_array(t, 1);
                let indices: Vec<(usize, usize)> = at
                    .iter()
                    .map(|(side, j)| if *side == s { (0, *j) } else { (1, 0) })
                    .collect();
                columns.push(interleave(&[col.as_ref(), null.as_ref()], &indices)?);
            }
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }

    /// Decodes row-format bytes and checks that they encode back to the same bytes.
    fn decode_rows(
        &self,
        conv: &RowConverter,
        rows: &[Box<[u8]>],
        what: &str,
    ) -> Result<Vec<ArrayRef>> {
        if rows.is_empty() {
            // Empty arrays of the converter's types.
            return Ok(conv.convert_rows(std::iter::empty())?);
        }
        let parser = conv.parser();
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            conv.convert_rows(rows.iter().map(|r| parser.parse(r)))
        }))
        .map_err(|_| self.failed(format!("a {what} is not in the recorded types' row format")))?
        .map_err(|e| self.failed(format!("{what}: {e}")))?;
        if decoded.is_empty() {
            // No fields: every row must be empty.
            return match rows.iter().position(|r| !r.is_empty()) {
                Some(i) => Err(self.failed(format!(
                    "{what} {i} has {} bytes but the recorded schema has no fields for it",
                    rows[i].len()
                ))),
                None => Ok(decoded),
            };
        }
        let again = conv
            .convert_columns(&decoded)
            .map_err(|e| self.failed(format!("{what}: {e}")))?;
        for (i, r) in rows.iter().enumerate() {
            if again.row(i).data() != &**r {
                return Err(self.failed(format!(
                    "{what} {i} decodes to values that encode differently"
                )));
            }
        }
        Ok(decoded)
    }
}

/// A stream-stream join state key (as `StreamingJoin` writes it): `side (u8: 0 left, 1 right)
/// + u32 LE length + join-key row + u64 BE sequence`, nothing after.
fn parse_join_key(k: &[u8]) -> Option<(u8, &[u8], u64)> {
    let side = *k.first()?;
    if side > 1 {
        return None;
    }
    let len = u32::from_le_bytes(k.get(1..5)?.try_into().ok()?) as usize;
    let key = k.get(5..5usize.checked_add(len)?)?;
    let seq: [u8; 8] = k.get(5 + len..)?.try_into().ok()?;
    Some((side, key, u64::from_be_bytes(seq)))
}

fn all_exact(fields: &[StateField]) -> bool {
    fields.iter().all(|f| f.arrow_type.is_some())
}

/// Column names made unique (`partition` first): a repeated name gets its position appended.
fn unique_names(fields: Vec<Field>) -> Vec<Field> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    fields
        .into_iter()
        .enumerate()
        .map(|(i, f)| {
            let mut name = f.name().clone();
            if seen.contains(&name) {
                name = format!("{name}#{i}");
            }
            seen.insert(name.clone());
            f.with_name(name)
        })
        .collect()
}

/// The Arrow types of recorded state fields.
pub fn field_types(fields: &[StateField]) -> Result<Vec<DataType>> {
    fields.iter().map(field_type).collect()
}

/// The Arrow type of one recorded state field: its `arrowType` when recorded, else rebuilt from
/// the Spark type name.
pub fn field_type(f: &StateField) -> Result<DataType> {
    match &f.arrow_type {
        Some(t) => DataType::from_str(t).map_err(|e| {
            SluiceError::checkpoint(
                class::STATE_DECODE_FAILED,
                format!(
                    "the recorded Arrow type {t:?} of state field {:?} does not parse ({e})",
                    f.name
                ),
            )
        }),
        None => spark_type(&f.data_type).map_err(|e| {
            SluiceError::checkpoint(
                class::STATE_DECODE_FAILED,
                format!(
                    "the Spark type {:?} of state field {:?} cannot be turned into an Arrow type \
                     ({}); the schema file has no arrowType (it was written before Sluice \
                     recorded them)",
                    f.data_type,
                    f.name,
                    e.message()
                ),
            )
        }),
    }
}
