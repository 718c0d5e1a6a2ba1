//! `dedupe` and `dedupeWithinWatermark`: the state of streaming deduplication.
//!
//! - key: the deduplication columns in the row format.
//! - value: `dedupe` stores nothing (the empty byte string); `dedupeWithinWatermark` stores
//!   when the key expires, in microseconds since the epoch (i64 little-endian; `i64::MAX` for a
//!   row without event time, which never expires).

use arrow::datatypes::DataType;

use super::{DecodeError, KeyLayout};
use crate::error::Result;

/// The value of a `dedupe` key: empty.
pub(crate) const EMPTY_VALUE: &[u8] = &[];

/// What a deduplication stores as the value of a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DedupValue {
    /// `dedupe`: nothing ([`EMPTY_VALUE`]).
    Empty,
    /// `dedupeWithinWatermark`: the expiry in µs ([`encode_expiry`]).
    ExpiresAtMicros,
}

/// The key and value codec of a deduplication's state.
#[derive(Debug)]
pub(crate) struct DedupLayout {
    key: KeyLayout,
    value: DedupValue,
}

impl DedupLayout {
    /// The layout for deduplication columns of `key_types`.
    pub(crate) fn new(key_types: &[DataType], value: DedupValue) -> Result<Self> {
        Ok(Self {
            key: KeyLayout::new(key_types)?,
            value,
        })
    }

    /// The deduplication columns.
    pub(crate) fn key(&self) -> &KeyLayout {
        &self.key
    }

    /// What the values hold.
    pub(crate) fn value(&self) -> DedupValue {
        self.value
    }
}

/// The value of a `dedupeWithinWatermark` key: its expiry (µs) as i64 little-endian.
pub(crate) fn encode_expiry(expires_at_us: i64) -> [u8; 8] {
    expires_at_us.to_le_bytes()
}

/// The expiry (µs) of a `dedupeWithinWatermark` value; exactly 8 bytes.
pub(crate) fn decode_expiry(value: &[u8]) -> std::result::Result<i64, DecodeError> {
    let bytes: [u8; 8] = value.try_into().map_err(|_| DecodeError::WrongLength {
        len: value.len(),
        expected: 8,
    })?;
    Ok(i64::from_le_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::layout::golden::{unhex, DEDUP, DEDUP_WITHIN};
    use arrow::array::{ArrayRef, Int32Array, TimestampMicrosecondArray};
    use arrow::datatypes::TimeUnit;
    use std::sync::Arc;

    const T1000: i64 = 1_783_418_400_000_000; // 2026-07-07T10:00:00Z
    const T1005: i64 = 1_783_418_700_000_000;

    #[test]
    fn bytes_the_operator_wrote_decode_and_encode_back_identically() {
        // `dropDuplicates(id, ts)` over (1, 10:00), (2, 10:05), (-7, null): keys, empty values.
        let layout = DedupLayout::new(
            &[
                DataType::Int32,
                DataType::Timestamp(TimeUnit::Microsecond, None),
            ],
            DedupValue::Empty,
        )
        .unwrap();
        let keys = DEDUP.keys();
        assert!(DEDUP.values().iter().all(|v| **v == *EMPTY_VALUE));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![-7, 1, 2])),
            Arc::new(TimestampMicrosecondArray::from(vec![
                None,
                Some(T1000),
                Some(T1005),
            ])),
        ];
        assert_eq!(layout.key().decode(&keys).unwrap(), columns);
        let rows = layout.key().encode(&columns).unwrap().unwrap();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(rows.row(i).data(), &k[..]);
        }
        assert_eq!(layout.value(), DedupValue::Empty);

        // `dropDuplicatesWithinWatermark(id)` with a 10 minutes delay over the same rows: the
        // expiry is the event time plus the delay, `i64::MAX` without an event time.
        let within = DedupLayout::new(&[DataType::Int32], DedupValue::ExpiresAtMicros).unwrap();
        let expiries = [i64::MAX, T1005 + 600_000_000, T1000 + 600_000_000];
        assert_eq!(DEDUP_WITHIN.pairs.len(), expiries.len());
        for ((_, k, v), expires) in DEDUP_WITHIN.pairs.iter().zip(expiries) {
            assert_eq!(decode_expiry(&unhex(v)).unwrap(), expires);
            assert_eq!(encode_expiry(expires).to_vec(), unhex(v));
            let ids = within.key().decode(&[unhex(k)]).unwrap();
            let rows = within.key().encode(&ids).unwrap().unwrap();
            assert_eq!(rows.row(0).data(), &unhex(k)[..]);
        }
    }

    #[test]
    fn round_trip_and_a_short_expiry_is_an_error() {
        for t in [i64::MIN, -1, 0, 1, i64::MAX] {
            assert_eq!(decode_expiry(&encode_expiry(t)).unwrap(), t);
        }
        assert!(matches!(
            decode_expiry(&[1, 2, 3]),
            Err(DecodeError::WrongLength {
                len: 3,
                expected: 8
            })
        ));
        assert!(decode_expiry(&[0; 9]).is_err());
        assert!(EMPTY_VALUE.is_empty());
    }
}
