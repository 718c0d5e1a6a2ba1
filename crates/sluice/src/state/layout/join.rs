//! `symmetricHashJoin`: the state of a stream-stream join, one pair per buffered input row of
//! either side (Spark keeps the same rows in its `SymmetricHashJoinStateManager`).
//!
//! - key ([`JoinStateKey`]): `side (u8: 0 left, 1 right) | join-key row length (u32 LE) |
//!   join-key row (the equi-join key columns in the row format) | sequence (u64 BE)`, nothing
//!   after. The sequence number tells apart rows with equal join keys.
//! - value ([`JoinStateValue`]): `matched (u8: 0 or 1) | the row` in the row format of its own
//!   side's columns.

use arrow::datatypes::DataType;

use super::{DecodeError, KeyLayout, RowLayout};
use crate::error::Result;

/// Which input of the join a stored row came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum JoinSide {
    /// The left input (stored as 0).
    Left,
    /// The right input (stored as 1).
    Right,
}

impl JoinSide {
    /// Both sides, left first.
    pub(crate) const BOTH: [JoinSide; 2] = [JoinSide::Left, JoinSide::Right];

    /// The stored byte.
    pub(crate) fn as_u8(self) -> u8 {
        match self {
            JoinSide::Left => 0,
            JoinSide::Right => 1,
        }
    }

    /// The side of a stored byte; `None` for anything but 0 and 1.
    pub(crate) fn from_u8(b: u8) -> Option<Self> {
        match b {
            0 => Some(JoinSide::Left),
            1 => Some(JoinSide::Right),
            _ => None,
        }
    }

    /// The other side.
    pub(crate) fn other(self) -> Self {
        match self {
            JoinSide::Left => JoinSide::Right,
            JoinSide::Right => JoinSide::Left,
        }
    }

    /// 0 for left, 1 for right (for per-side arrays).
    pub(crate) fn index(self) -> usize {
        self.as_u8() as usize
    }

    /// `left` or `right`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            JoinSide::Left => "left",
            JoinSide::Right => "right",
        }
    }
}

/// The key of one stored join row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JoinStateKey<'a> {
    /// The input the row came from.
    pub(crate) side: JoinSide,
    /// The row's join key in the row format.
    pub(crate) key: &'a [u8],
    /// The row's sequence number (unique within the operator's state).
    pub(crate) seq: u64,
}

impl<'a> JoinStateKey<'a> {
    /// Writes the stored bytes into `out`, replacing what it held (to reuse one buffer).
    ///
    /// The join-key row's length MUST fit in a u32 (a row of over 4 GiB is not a join key).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.key.len() + 13);
        out.push(self.side.as_u8());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        out.extend_from_slice(&self.seq.to_be_bytes());
    }

    /// The stored bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Reads stored bytes, checked: a side other than 0 or 1, a length past the end, and bytes
    /// after the sequence are errors.
    pub(crate) fn decode(k: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        Self::parse(k).ok_or(DecodeError::MalformedJoinKey { len: k.len() })
    }

    fn parse(k: &'a [u8]) -> Option<Self> {
        let side = JoinSide::from_u8(*k.first()?)?;
        let len = u32::from_le_bytes(k.get(1..5)?.try_into().ok()?) as usize;
        let end = 5usize.checked_add(len)?;
        let key = k.get(5..end)?;
        let seq: [u8; 8] = k.get(end..)?.try_into().ok()?;
        Some(Self {
            side,
            key,
            seq: u64::from_be_bytes(seq),
        })
    }
}

/// The value of one stored join row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JoinStateValue<'a> {
    /// Whether the row has found a match (outer joins emit the unmatched ones with nulls).
    pub(crate) matched: bool,
    /// The row in the row format of its side's columns.
    pub(crate) row: &'a [u8],
}

impl<'a> JoinStateValue<'a> {
    /// Writes the stored bytes into `out`, replacing what it held (to reuse one buffer).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(self.row.len() + 1);
        out.push(self.matched as u8);
        out.extend_from_slice(self.row);
    }

    /// The stored bytes (the operator reuses one buffer with [`JoinStateValue::encode_into`]).
    #[cfg(test)]
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode_into(&mut out);
        out
    }

    /// Reads stored bytes, checked: an empty value and a matched flag other than 0 or 1 are
    /// errors.
    pub(crate) fn decode(v: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let (flag, row) = v.split_first().ok_or(DecodeError::EmptyJoinValue)?;
        if *flag > 1 {
            return Err(DecodeError::BadMatchedFlag(*flag));
        }
        Ok(Self {
            matched: *flag == 1,
            row,
        })
    }
}

/// The row layouts of a stream-stream join's state: the join key and each side's rows.
#[derive(Debug)]
pub(crate) struct JoinLayout {
    key: KeyLayout,
    sides: [RowLayout; 2],
}

impl JoinLayout {
    /// The layout for join-key columns of `key_types` and the two inputs' columns.
    pub(crate) fn new(
        key_types: &[DataType],
        left_types: &[DataType],
        right_types: &[DataType],
    ) -> Result<Self> {
        Ok(Self {
            key: KeyLayout::new(key_types)?,
            sides: [RowLayout::new(left_types)?, RowLayout::new(right_types)?],
        })
    }

    /// The join-key columns ([`JoinStateKey::key`]).
    pub(crate) fn key(&self) -> &KeyLayout {
        &self.key
    }

    /// The columns of one side's rows ([`JoinStateValue::row`]).
    pub(crate) fn side(&self, side: JoinSide) -> &RowLayout {
        &self.sides[side.index()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::layout::golden::JOIN;
    use arrow::array::{
        ArrayRef, Float64Array, Int32Array, StringArray, TimestampMicrosecondArray,
    };
    use arrow::datatypes::TimeUnit;
    use std::sync::Arc;

    const T1000: i64 = 1_793_700_000_000_000; // 2026-11-03T10:00:00Z
    const T1001: i64 = 1_793_700_060_000_000;
    const T1003: i64 = 1_793_700_180_000_000;

    fn ts() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }

    #[test]
    fn bytes_the_operator_wrote_decode_and_encode_back_identically() {
        let layout = JoinLayout::new(
            &[DataType::Utf8],
            &[DataType::Utf8, ts(), DataType::Int32],
            &[DataType::Utf8, ts(), DataType::Float64],
        )
        .unwrap();
        let expected = [
            (JoinSide::Left, "b", 1 << 32 | 1, false),
            (JoinSide::Left, "a", 1 << 32, true),
            (JoinSide::Right, "a", 1 << 32 | 2, true),
        ];
        let mut rows: [Vec<Vec<u8>>; 2] = [Vec::new(), Vec::new()];
        assert_eq!(JOIN.pairs.len(), expected.len());
        let (keys, values) = (JOIN.keys(), JOIN.values());
        for ((k, v), (side, ad, seq, matched)) in keys.iter().zip(&values).zip(expected) {
            let key = JoinStateKey::decode(k).unwrap();
            assert_eq!((key.side, key.seq), (side, seq));
            let ads: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![ad]))];
            assert_eq!(layout.key().decode(&[key.key]).unwrap(), ads);
            assert_eq!(key.encode(), &k[..]);
            let value = JoinStateValue::decode(v).unwrap();
            assert_eq!(value.matched, matched);
            assert_eq!(value.encode(), &v[..]);
            rows[side.index()].push(value.row.to_vec());
        }
        let left: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["b", "a"])),
            Arc::new(TimestampMicrosecondArray::from(vec![T1001, T1000])),
            Arc::new(Int32Array::from(vec![2, 1])),
        ];
        let right: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["a"])),
            Arc::new(TimestampMicrosecondArray::from(vec![T1003])),
            Arc::new(Float64Array::from(vec![2.5])),
        ];
        for (side, columns) in [(JoinSide::Left, left), (JoinSide::Right, right)] {
            let stored = &rows[side.index()];
            assert_eq!(layout.side(side).decode(stored).unwrap(), columns);
            let again = layout.side(side).encode(&columns).unwrap();
            for (i, r) in stored.iter().enumerate() {
                assert_eq!(again.row(i).data(), &r[..]);
            }
        }
    }

    #[test]
    fn keys_and_values_round_trip_and_malformed_bytes_are_errors() {
        let mut buf = vec![9, 9, 9];
        for (side, key, seq) in [
            (JoinSide::Left, &b""[..], 0),
            (JoinSide::Right, &b"\x02abc"[..], u64::MAX),
        ] {
            let k = JoinStateKey { side, key, seq };
            k.encode_into(&mut buf);
            assert_eq!(buf, k.encode());
            assert_eq!(JoinStateKey::decode(&buf).unwrap(), k);
        }
        let good = JoinStateKey {
            side: JoinSide::Right,
            key: b"xy",
            seq: 7,
        }
        .encode();
        let mut bad_side = good.clone();
        bad_side[0] = 2;
        let mut trailing = good.clone();
        trailing.push(0);
        let mut huge_len = good.clone();
        huge_len[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        for bad in [
            &bad_side[..],
            &good[..good.len() - 1],
            &trailing[..],
            &huge_len[..],
            &[][..],
            &[0, 1, 0][..],
        ] {
            assert!(
                matches!(
                    JoinStateKey::decode(bad),
                    Err(DecodeError::MalformedJoinKey { .. })
                ),
                "{bad:?}"
            );
        }
        for matched in [false, true] {
            let v = JoinStateValue { matched, row: b"r" };
            assert_eq!(JoinStateValue::decode(&v.encode()).unwrap(), v);
        }
        assert!(matches!(
            JoinStateValue::decode(&[]),
            Err(DecodeError::EmptyJoinValue)
        ));
        assert!(matches!(
            JoinStateValue::decode(&[2, 0]),
            Err(DecodeError::BadMatchedFlag(2))
        ));
        assert_eq!(JoinSide::from_u8(1), Some(JoinSide::Right));
        assert_eq!(JoinSide::from_u8(2), None);
        assert_eq!(JoinSide::BOTH.map(JoinSide::name), ["left", "right"]);
    }
}
