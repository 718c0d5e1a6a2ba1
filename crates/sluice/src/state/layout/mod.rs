//! The byte layout of each stateful operator's keys and values in the state store: one codec
//! per operator, encode *and* decode, for the operator that writes its state and for
//! `sluice state read` ([`crate::inspect`]) that reads it back without the query.
//!
//! The store itself sees opaque bytes (see the [module doc](crate::state)); these layouts give
//! them meaning. They are part of the checkpoint format: a layout never changes a byte on disk,
//! and each file's tests pin the bytes today's operators write.
//!
//! | operator (schema `operator`) | key | value | codec |
//! |---|---|---|---|
//! | `stateStoreSave` (aggregation, windows and session windows included) | grouping columns (arrow row format; none = the empty key) | the accumulators' state fields (arrow row format) | [`aggregate::AggregateLayout`] |
//! | `dedupe` | the deduplication columns | empty | [`dedup::DedupLayout`] |
//! | `dedupeWithinWatermark` | the deduplication columns | the expiry in µs (i64 LE) | [`dedup::DedupLayout`] |
//! | `flatMapGroupsWithState` | the grouping columns | timeout ms (i64 LE, [`group_state::NO_TIMEOUT`] = none) + the user's state as JSON | [`group_state::GroupStateValue`] |
//! | `symmetricHashJoin ..` | side (u8) + join-key row length (u32 LE) + join-key row + sequence (u64 BE) | matched (u8) + the row of its side (arrow row format) | [`join::JoinStateKey`], [`join::JoinStateValue`] |
//!
//! Row-format bytes decode *checked* ([`RowLayout::decode`]): every decoded row is encoded
//! again and compared with the stored bytes, so bytes that do not fit the types are an error,
//! never wrong values. An operator reads back the state it wrote with
//! [`RowLayout::decode_trusted`]: arrow's decoding alone, on the hot path (bytes arrow refuses
//! are an error there too, never a panic).

pub(crate) mod aggregate;
pub(crate) mod dedup;
pub(crate) mod group_state;
pub(crate) mod join;

use std::fmt;

use arrow::array::ArrayRef;
use arrow::datatypes::DataType;
use arrow::error::ArrowError;
use arrow::row::{RowConverter, Rows, SortField};

use crate::error::Result;

/// Why stored bytes do not decode with a layout. The caller says which pair and what to do
/// (an operator: `STATE_STORE_CORRUPT`; inspection: `STATE_DECODE_FAILED`).
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// The bytes are not in the row format of the layout's types (arrow's decoder gave up).
    NotRowFormat,
    /// Arrow refused the decoded rows or their encoding.
    Arrow(ArrowError),
    /// Row `index` has `len` bytes but the layout has no fields for it.
    BytesWithoutFields { index: usize, len: usize },
    /// Row `index` decodes to values that encode to other bytes.
    EncodesDifferently { index: usize },
    /// A key of `len` bytes where the operator has no key columns (only the empty key).
    KeyWithoutColumns { index: usize, len: usize },
    /// A value of `len` bytes where a fixed-size value of `expected` bytes is stored.
    WrongLength { len: usize, expected: usize },
    /// A value of `len` bytes, shorter than the `min` bytes its header needs.
    Truncated { len: usize, min: usize },
    /// A join state key that is not side + length + join key + sequence.
    MalformedJoinKey { len: usize },
    /// A join state value without its matched flag.
    EmptyJoinValue,
    /// A join state value whose matched flag is neither 0 nor 1.
    BadMatchedFlag(u8),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotRowFormat => write!(f, "bytes not in the row format of the state's types"),
            Self::Arrow(e) => write!(f, "{e}"),
            Self::BytesWithoutFields { index, len } => {
                write!(
                    f,
                    "row {index} has {len} bytes but the layout has no fields"
                )
            }
            Self::EncodesDifferently { index } => {
                write!(f, "row {index} decodes to values that encode differently")
            }
            Self::KeyWithoutColumns { index, len } => {
                write!(
                    f,
                    "the operator has no key columns but key {index} has {len} bytes"
                )
            }
            Self::WrongLength { len, expected } => {
                write!(f, "a value of {len} bytes, not {expected}")
            }
            Self::Truncated { len, min } => {
                write!(f, "a value of {len} bytes (at least {min} expected)")
            }
            Self::MalformedJoinKey { len } => write!(
                f,
                "a join state key of {len} bytes is not side + length + join key + sequence"
            ),
            Self::EmptyJoinValue => write!(f, "a join state value is empty"),
            Self::BadMatchedFlag(flag) => {
                write!(f, "a join state value has matched flag {flag}, not 0 or 1")
            }
        }
    }
}

/// Columns of fixed types in arrow's row format (compact and order-preserving: bytewise order
/// of the rows is the order of the values). Keys and values of aggregations, deduplication and
/// joins are stored this way.
pub(crate) struct RowLayout {
    converter: RowConverter,
}

impl fmt::Debug for RowLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RowLayout").finish_non_exhaustive()
    }
}

impl RowLayout {
    /// The layout of columns of `types`, in this order (no types: every row is empty).
    pub(crate) fn new(types: &[DataType]) -> Result<Self> {
        Ok(Self {
            converter: RowConverter::new(
                types.iter().map(|t| SortField::new(t.clone())).collect(),
            )?,
        })
    }

    /// Encodes columns (one per type, equal lengths): row `i`'s bytes are `rows.row(i).data()`.
    pub(crate) fn encode(&self, columns: &[ArrayRef]) -> Result<Rows> {
        Ok(self.converter.convert_columns(columns)?)
    }

    /// Decodes stored rows into one column per type, checked: bytes that are not this layout's
    /// row format, or that decode to values encoding differently, are an error.
    pub(crate) fn decode<B: AsRef<[u8]>>(
        &self,
        rows: &[B],
    ) -> std::result::Result<Vec<ArrayRef>, DecodeError> {
        let decoded = self.decode_trusted(rows)?;
        if rows.is_empty() {
            return Ok(decoded);
        }
        if decoded.is_empty() {
            // No fields: every row must be empty.
            return match rows.iter().position(|r| !r.as_ref().is_empty()) {
                Some(index) => Err(DecodeError::BytesWithoutFields {
                    index,
                    len: rows[index].as_ref().len(),
                }),
                None => Ok(decoded),
            };
        }
        let again = self
            .converter
            .convert_columns(&decoded)
            .map_err(DecodeError::Arrow)?;
        for (index, r) in rows.iter().enumerate() {
            if again.row(index).data() != r.as_ref() {
                return Err(DecodeError::EncodesDifferently { index });
            }
        }
        Ok(decoded)
    }

    /// Decodes rows that this layout encoded (an operator reading back the state it wrote), as
    /// [`RowLayout::decode`] but without encoding the values again to compare: the operators'
    /// path, at the cost of arrow's decoding alone. Bytes arrow's decoder refuses are still an
    /// error ([`DecodeError::NotRowFormat`], never a panic), but bytes that happen to decode to
    /// other values go unnoticed: reading state from outside its query uses `decode`.
    pub(crate) fn decode_trusted<B: AsRef<[u8]>>(
        &self,
        rows: &[B],
    ) -> std::result::Result<Vec<ArrayRef>, DecodeError> {
        let conv = &self.converter;
        if rows.is_empty() {
            // Empty arrays of the layout's types.
            return conv
                .convert_rows(std::iter::empty())
                .map_err(DecodeError::Arrow);
        }
        let parser = conv.parser();
        // Arrow's row decoder trusts its input and panics on bytes it did not write.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            conv.convert_rows(rows.iter().map(|r| parser.parse(r.as_ref())))
        }))
        .map_err(|_| DecodeError::NotRowFormat)?
        .map_err(DecodeError::Arrow)
    }
}

/// An operator's grouping key: its columns in the row format ([`RowLayout`]), or, for an
/// operator without key columns (a global aggregation), the one empty key.
#[derive(Debug)]
pub(crate) struct KeyLayout {
    rows: Option<RowLayout>,
}

impl KeyLayout {
    /// The key of columns of `types` (none: the empty key).
    pub(crate) fn new(types: &[DataType]) -> Result<Self> {
        Ok(Self {
            rows: if types.is_empty() {
                None
            } else {
                Some(RowLayout::new(types)?)
            },
        })
    }

    /// The row layout of the key columns; `None` without key columns.
    pub(crate) fn rows(&self) -> Option<&RowLayout> {
        self.rows.as_ref()
    }

    /// Encodes key columns; `None` without key columns (every key is the empty byte string).
    pub(crate) fn encode(&self, columns: &[ArrayRef]) -> Result<Option<Rows>> {
        self.rows.as_ref().map(|r| r.encode(columns)).transpose()
    }

    /// Decodes stored keys into the key columns, checked (without key columns: no columns,
    /// and every key must be empty).
    pub(crate) fn decode<B: AsRef<[u8]>>(
        &self,
        keys: &[B],
    ) -> std::result::Result<Vec<ArrayRef>, DecodeError> {
        match &self.rows {
            Some(r) => r.decode(keys),
            None => match keys.iter().position(|k| !k.as_ref().is_empty()) {
                Some(index) => Err(DecodeError::KeyWithoutColumns {
                    index,
                    len: keys[index].as_ref().len(),
                }),
                None => Ok(Vec::new()),
            },
        }
    }

    /// Decodes keys that this layout encoded, as [`KeyLayout::decode`] but through
    /// [`RowLayout::decode_trusted`] (the operators' path).
    pub(crate) fn decode_trusted<B: AsRef<[u8]>>(
        &self,
        keys: &[B],
    ) -> std::result::Result<Vec<ArrayRef>, DecodeError> {
        match &self.rows {
            Some(r) => r.decode_trusted(keys),
            None => self.decode(keys),
        }
    }
}

#[cfg(test)]
pub(crate) mod golden;

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use std::sync::Arc;

    #[test]
    fn rows_round_trip_and_foreign_bytes_are_errors() {
        let layout = RowLayout::new(&[DataType::Utf8, DataType::Int64]).unwrap();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![Some("a"), None])),
            Arc::new(Int64Array::from(vec![Some(-1), Some(7)])),
        ];
        let rows = layout.encode(&columns).unwrap();
        let bytes: Vec<Vec<u8>> = (0..2).map(|i| rows.row(i).data().to_vec()).collect();
        assert_eq!(layout.decode(&bytes).unwrap(), columns);
        assert_eq!(layout.decode::<Vec<u8>>(&[]).unwrap()[0].len(), 0);
        // An Int64 stored where a row of (Utf8, Int64) is expected.
        let other = RowLayout::new(&[DataType::Int64]).unwrap();
        let wrong = other
            .encode(&[Arc::new(Int64Array::from(vec![3])) as ArrayRef])
            .unwrap();
        assert!(layout.decode(&[wrong.row(0).data()]).is_err());
        // The operators' path: the same columns, and bytes arrow refuses are an error.
        assert_eq!(layout.decode_trusted(&bytes).unwrap(), columns);
        assert_eq!(layout.decode_trusted::<Vec<u8>>(&[]).unwrap()[0].len(), 0);
        assert!(matches!(
            layout.decode_trusted(&[&b"\x01"[..]]),
            Err(DecodeError::NotRowFormat)
        ));
        // No fields: only empty rows.
        let none = RowLayout::new(&[]).unwrap();
        assert!(none.decode(&[&b""[..]]).unwrap().is_empty());
        assert!(none.decode(&[&b""[..], &b"x"[..]]).is_err());
    }

    #[test]
    fn no_key_columns_is_the_empty_key() {
        let key = KeyLayout::new(&[]).unwrap();
        assert!(key.rows().is_none());
        assert!(key.encode(&[]).unwrap().is_none());
        assert!(key.decode(&[&b""[..]]).unwrap().is_empty());
        assert!(key.decode_trusted(&[&b""[..]]).unwrap().is_empty());
        assert!(matches!(
            key.decode(&[&b"k"[..]]),
            Err(DecodeError::KeyWithoutColumns { index: 0, len: 1 })
        ));
        assert!(matches!(
            key.decode_trusted(&[&b""[..], &b"k"[..]]),
            Err(DecodeError::KeyWithoutColumns { index: 1, len: 1 })
        ));
    }
}
