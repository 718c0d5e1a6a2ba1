//! `stateStoreSave`: the state of a streaming aggregation (time windows and session windows
//! included).
//!
//! - key: the grouping columns in the row format, the window (`{start, end}` struct) or
//!   session window being one of them; without grouping columns (a global aggregation) the one
//!   key is the empty byte string.
//! - value: the aggregate functions' intermediate state fields (DataFusion's `state_fields`, in
//!   aggregate order) in the row format, e.g. `count[count]`, or `sum[sum]` and `count[count]`
//!   for an average.

use arrow::datatypes::DataType;

use super::{KeyLayout, RowLayout};
use crate::error::Result;

/// The key and value codec of a streaming aggregation's state.
#[derive(Debug)]
pub(crate) struct AggregateLayout {
    key: KeyLayout,
    value: RowLayout,
}

impl AggregateLayout {
    /// The layout for grouping columns of `key_types` and accumulator state fields of
    /// `state_types`.
    pub(crate) fn new(key_types: &[DataType], state_types: &[DataType]) -> Result<Self> {
        Ok(Self {
            key: KeyLayout::new(key_types)?,
            value: RowLayout::new(state_types)?,
        })
    }

    /// The grouping key.
    pub(crate) fn key(&self) -> &KeyLayout {
        &self.key
    }

    /// The accumulators' state fields.
    pub(crate) fn value(&self) -> &RowLayout {
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::layout::golden::{AGGREGATE, GLOBAL};
    use arrow::array::{ArrayRef, Int64Array, StringArray, StructArray, TimestampMicrosecondArray};
    use arrow::datatypes::{Field, Fields, TimeUnit};
    use std::sync::Arc;

    fn ts() -> DataType {
        DataType::Timestamp(TimeUnit::Microsecond, None)
    }

    fn window_fields() -> Fields {
        Fields::from(vec![
            Field::new("start", ts(), true),
            Field::new("end", ts(), true),
        ])
    }

    fn windows(bounds: &[(i64, i64)]) -> ArrayRef {
        let starts: TimestampMicrosecondArray = bounds.iter().map(|b| Some(b.0)).collect();
        let ends: TimestampMicrosecondArray = bounds.iter().map(|b| Some(b.1)).collect();
        Arc::new(StructArray::new(
            window_fields(),
            vec![Arc::new(starts), Arc::new(ends)],
            None,
        ))
    }

    const T1200: i64 = 1_789_473_600_000_000; // 2026-09-15T12:00:00Z
    const T1205: i64 = 1_789_473_900_000_000;
    const T1210: i64 = 1_789_474_200_000_000;

    fn windowed_layout() -> AggregateLayout {
        AggregateLayout::new(
            &[DataType::Struct(window_fields()), DataType::Utf8],
            &[DataType::Int64, DataType::Int64],
        )
        .unwrap()
    }

    #[test]
    fn bytes_the_operator_wrote_decode_and_encode_back_identically() {
        // `groupBy(window(ts, "5 minutes"), user).agg(count(x), sum(x))`, see the golden data.
        let layout = windowed_layout();
        let (keys, values) = (AGGREGATE.keys(), AGGREGATE.values());
        let key_columns: Vec<ArrayRef> = vec![
            windows(&[(T1200, T1205), (T1200, T1205), (T1205, T1210)]),
            Arc::new(StringArray::from(vec![None, Some("alice"), Some("bob")])),
        ];
        let value_columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![1, 1, 0])),
            Arc::new(Int64Array::from(vec![Some(5), Some(3), None])),
        ];
        assert_eq!(layout.key().decode(&keys).unwrap(), key_columns);
        assert_eq!(layout.value().decode(&values).unwrap(), value_columns);
        let (k, v) = (
            layout.key().encode(&key_columns).unwrap().unwrap(),
            layout.value().encode(&value_columns).unwrap(),
        );
        for i in 0..3 {
            assert_eq!(k.row(i).data(), &keys[i][..], "key {i}");
            assert_eq!(v.row(i).data(), &values[i][..], "value {i}");
        }
    }

    #[test]
    fn a_global_aggregation_has_the_empty_key() {
        // What `groupBy().count()` wrote after two rows.
        let layout = AggregateLayout::new(&[], &[DataType::Int64]).unwrap();
        let (key, value) = (&GLOBAL.keys()[0], &GLOBAL.values()[0]);
        assert_eq!(GLOBAL.pairs.len(), 1);
        assert!(layout.key().decode(&[key]).unwrap().is_empty());
        let counts: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![2]))];
        assert_eq!(layout.value().decode(&[value]).unwrap(), counts);
        assert!(layout.key().encode(&[]).unwrap().is_none());
        assert_eq!(
            layout.value().encode(&counts).unwrap().row(0).data(),
            &value[..]
        );
    }

    #[test]
    fn round_trip_and_a_wrong_type_is_an_error() {
        let layout = windowed_layout();
        let key_columns: Vec<ArrayRef> = vec![
            windows(&[(0, 10), (-5, 5)]),
            Arc::new(StringArray::from(vec![Some(""), Some("é")])),
        ];
        let rows = layout.key().encode(&key_columns).unwrap().unwrap();
        let bytes: Vec<&[u8]> = (0..2).map(|i| rows.row(i).data()).collect();
        assert_eq!(layout.key().decode(&bytes).unwrap(), key_columns);
        // Accumulator states recorded as INT (4 bytes) but stored as BIGINT (8 bytes).
        let narrow = AggregateLayout::new(&[DataType::Utf8], &[DataType::Int32]).unwrap();
        assert!(narrow.value().decode(&AGGREGATE.values()[..1]).is_err());
    }
}
