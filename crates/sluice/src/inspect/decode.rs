//! Decoding one operator's stored pairs into Arrow rows, from its recorded schema, with the
//! operators' own codecs ([`crate::state::layout`]), checked. The columns by operator are in
//! the [module doc](crate::inspect).

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

use super::probe::operator_name;
use crate::error::class;
use crate::error::{Result, SluiceError};
use crate::schema::parse_spark_type_name;
use crate::state::layout::aggregate::AggregateLayout;
use crate::state::layout::dedup::{decode_expiry, DedupLayout, DedupValue};
use crate::state::layout::group_state::{GroupStateLayout, GroupStateValue};
use crate::state::layout::join::{JoinLayout, JoinSide, JoinStateKey, JoinStateValue};
use crate::state::layout::{DecodeError, KeyLayout, RowLayout};
use crate::state::schema::{StateField, StateSchema};

/// The layout of the operator a schema describes.
enum OperatorLayout {
    /// `stateStoreSave`.
    Aggregate(AggregateLayout),
    /// `dedupe`, `dedupeWithinWatermark`.
    Dedup(DedupLayout),
    /// `flatMapGroupsWithState`.
    GroupState(GroupStateLayout),
    /// `symmetricHashJoin ..`, with each side's column types (for the other side's nulls).
    Join {
        layout: JoinLayout,
        side_types: [Vec<DataType>; 2],
    },
}

/// Decodes one operator's stored pairs into rows, from its recorded [`StateSchema`].
pub(crate) struct StateDecoder {
    operator: String,
    layout: OperatorLayout,
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
    pub(crate) fn new(schema: &StateSchema) -> Result<Self> {
        let name = operator_name(schema);
        let base = name.split_whitespace().next().unwrap_or("");
        let key_types = field_types(&schema.key_schema)?;
        let mut exact_types = all_exact(&schema.key_schema);
        let mut fields: Vec<Field> = vec![Field::new("partition", DataType::UInt32, false)];
        for (f, t) in schema.key_schema.iter().zip(&key_types) {
            fields.push(Field::new(&f.name, t.clone(), true));
        }
        let layout = match base {
            "stateStoreSave" => {
                let types = field_types(&schema.value_schema)?;
                exact_types &= all_exact(&schema.value_schema);
                for (f, t) in schema.value_schema.iter().zip(&types) {
                    fields.push(Field::new(&f.name, t.clone(), true));
                }
                OperatorLayout::Aggregate(AggregateLayout::new(&key_types, &types)?)
            }
            "dedupe" => OperatorLayout::Dedup(DedupLayout::new(&key_types, DedupValue::Empty)?),
            "dedupeWithinWatermark" => {
                let name = schema
                    .value_schema
                    .first()
                    .map_or("expiresAtMicros", |f| f.name.as_str());
                fields.push(Field::new(name, DataType::Int64, true));
                OperatorLayout::Dedup(DedupLayout::new(&key_types, DedupValue::ExpiresAtMicros)?)
            }
            "flatMapGroupsWithState" => {
                fields.push(Field::new("timeoutTimestampMs", DataType::Int64, true));
                fields.push(Field::new("groupState", DataType::Utf8, true));
                OperatorLayout::GroupState(GroupStateLayout::new(&key_types)?)
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
                let (left, right) = types.split_at(left_len);
                OperatorLayout::Join {
                    layout: JoinLayout::new(&key_types, left, right)?,
                    side_types: [left.to_vec(), right.to_vec()],
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
            layout,
            schema: Arc::new(Schema::new(unique_names(fields))),
            exact_types,
        })
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

    /// The error for row-format bytes (`what`: key, value, join key, left row, right row) that
    /// do not decode.
    fn rows_failed(&self, e: DecodeError, what: &str) -> SluiceError {
        self.failed(match e {
            DecodeError::NotRowFormat => {
                format!("a {what} is not in the recorded types' row format")
            }
            DecodeError::Arrow(e) => format!("{what}: {e}"),
            DecodeError::BytesWithoutFields { index, len } => format!(
                "{what} {index} has {len} bytes but the recorded schema has no fields for it"
            ),
            DecodeError::EncodesDifferently { index } => {
                format!("{what} {index} decodes to values that encode differently")
            }
            other => other.to_string(),
        })
    }

    /// Decodes row-format bytes with `layout`, checked.
    fn decode_rows(
        &self,
        layout: &RowLayout,
        rows: &[Box<[u8]>],
        what: &str,
    ) -> Result<Vec<ArrayRef>> {
        layout.decode(rows).map_err(|e| self.rows_failed(e, what))
    }

    /// Decodes the keys of an operator with a grouping key.
    fn decode_keys(&self, layout: &KeyLayout, keys: &[Box<[u8]>]) -> Result<Vec<ArrayRef>> {
        layout.decode(keys).map_err(|e| self.rows_failed(e, "key"))
    }

    /// Decodes pairs (with the partition each came from) into one batch: `partition`, keys,
    /// values (for a join: `partition`, `side`, keys, `seq`, `matched`, left fields, right
    /// fields).
    pub(crate) fn decode(
        &self,
        partitions: &[u32],
        keys: &[Box<[u8]>],
        values: &[Box<[u8]>],
    ) -> Result<RecordBatch> {
        if partitions.len() != keys.len() || keys.len() != values.len() {
            return Err(SluiceError::internal("decode: lengths differ"));
        }
        let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(partitions.to_vec()))];
        match &self.layout {
            OperatorLayout::Join { layout, side_types } => {
                return self.decode_join(partitions, keys, values, layout, side_types)
            }
            OperatorLayout::Aggregate(layout) => {
                columns.extend(self.decode_keys(layout.key(), keys)?);
                columns.extend(self.decode_rows(layout.value(), values, "value")?);
            }
            OperatorLayout::Dedup(layout) => {
                columns.extend(self.decode_keys(layout.key(), keys)?);
                match layout.value() {
                    DedupValue::Empty => {}
                    DedupValue::ExpiresAtMicros => {
                        let mut b = Int64Builder::with_capacity(values.len());
                        for v in values {
                            b.append_value(decode_expiry(v).map_err(|_| {
                                self.failed(format!("a value of {} bytes, not 8", v.len()))
                            })?);
                        }
                        columns.push(Arc::new(b.finish()));
                    }
                }
            }
            OperatorLayout::GroupState(layout) => {
                columns.extend(self.decode_keys(layout.key(), keys)?);
                let mut timeouts = Int64Builder::with_capacity(values.len());
                let mut states = StringBuilder::new();
                for v in values {
                    let value = GroupStateValue::decode(v)
                        .map_err(|_| self.failed(format!("a value of {} bytes", v.len())))?;
                    timeouts.append_option(value.timeout_ms);
                    if value.state_json.is_empty() {
                        states.append_null();
                    } else {
                        let text = std::str::from_utf8(value.state_json)
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
        layout: &JoinLayout,
        side_types: &[Vec<DataType>; 2],
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
            let key = JoinStateKey::decode(k).map_err(|_| {
                self.failed(format!(
                    "key {i} ({} bytes) is not side + length + join key + sequence",
                    k.len()
                ))
            })?;
            let value = JoinStateValue::decode(v).map_err(|e| match e {
                DecodeError::BadMatchedFlag(flag) => {
                    self.failed(format!("value {i} has matched flag {flag}, not 0 or 1"))
                }
                _ => self.failed(format!("value {i} is empty")),
            })?;
            let side = key.side.index();
            side_names.append_value(key.side.name());
            seqs.append_value(key.seq);
            matched.append_value(value.matched);
            join_keys.push(key.key.into());
            at.push((side, rows[side].len()));
            rows[side].push(value.row.into());
        }
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(partitions.to_vec())),
            Arc::new(side_names.finish()),
        ];
        match layout.key().rows() {
            Some(key) => columns.extend(self.decode_rows(key, &join_keys, "join key")?),
            None => return Err(self.failed("the join's schema records no key fields")),
        }
        columns.push(Arc::new(seqs.finish()));
        columns.push(Arc::new(matched.finish()));
        for side in JoinSide::BOTH {
            let s = side.index();
            let what = if s == 0 { "left row" } else { "right row" };
            let decoded = self.decode_rows(layout.side(side), &rows[s], what)?;
            for (col, t) in decoded.iter().zip(side_types[s].iter()) {
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
pub(crate) fn field_types(fields: &[StateField]) -> Result<Vec<DataType>> {
    fields.iter().map(field_type).collect()
}

/// The Arrow type of one recorded state field: its `arrowType` when recorded, else rebuilt from
/// the Spark type name.
pub(crate) fn field_type(f: &StateField) -> Result<DataType> {
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
        None => parse_spark_type_name(&f.data_type).map_err(|e| {
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
