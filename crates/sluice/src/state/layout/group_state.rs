//! `flatMapGroupsWithState`: the state of `mapGroupsWithState` / `flatMapGroupsWithState`.
//!
//! - key: the grouping columns in the row format.
//! - value: the timeout in epoch milliseconds (i64 little-endian; [`NO_TIMEOUT`] = none), then
//!   the user's state serialized as JSON (the rest of the value, possibly empty).

use arrow::datatypes::DataType;

use super::{DecodeError, KeyLayout};
use crate::error::Result;

/// The timeout stored for a group without one (the first 8 bytes of its value).
pub(crate) const NO_TIMEOUT: i64 = i64::MIN;

/// The key codec of `flatMapGroupsWithState`'s state (values are [`GroupStateValue`]s).
#[derive(Debug)]
pub(crate) struct GroupStateLayout {
    key: KeyLayout,
}

impl GroupStateLayout {
    /// The layout for grouping columns of `key_types`.
    pub(crate) fn new(key_types: &[DataType]) -> Result<Self> {
        Ok(Self {
            key: KeyLayout::new(key_types)?,
        })
    }

    /// The grouping columns.
    pub(crate) fn key(&self) -> &KeyLayout {
        &self.key
    }
}

/// One group's stored value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GroupStateValue<'a> {
    /// When the group times out (epoch ms; processing or event time, as the query's timeout
    /// says); `None` without a timeout. `Some(NO_TIMEOUT)` is stored as, and reads back as,
    /// `None`.
    pub(crate) timeout_ms: Option<i64>,
    /// The user's state as JSON bytes.
    pub(crate) state_json: &'a [u8],
}

impl<'a> GroupStateValue<'a> {
    /// The stored bytes: timeout (i64 LE) + JSON.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(8 + self.state_json.len());
        v.extend_from_slice(&self.timeout_ms.unwrap_or(NO_TIMEOUT).to_le_bytes());
        v.extend_from_slice(self.state_json);
        v
    }

    /// Reads stored bytes; fewer than 8 is an error.
    pub(crate) fn decode(value: &'a [u8]) -> std::result::Result<Self, DecodeError> {
        let (t, state_json) = value
            .split_first_chunk::<8>()
            .ok_or(DecodeError::Truncated {
                len: value.len(),
                min: 8,
            })?;
        let t = i64::from_le_bytes(*t);
        Ok(Self {
            timeout_ms: (t != NO_TIMEOUT).then_some(t),
            state_json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::layout::golden::GROUP_STATE;
    use arrow::array::{ArrayRef, StringArray};
    use std::sync::Arc;

    #[test]
    fn bytes_the_operator_wrote_decode_and_encode_back_identically() {
        // `groupByKey(user).mapGroupsWithState(ProcessingTimeTimeout)` counting rows, with a
        // one-hour timeout set for alice only: alice -> 2, bob -> 1.
        let layout = GroupStateLayout::new(&[DataType::Utf8]).unwrap();
        let expected = [("alice", Some(1_796_126_198_293), "2"), ("bob", None, "1")];
        assert_eq!(GROUP_STATE.pairs.len(), expected.len());
        let (keys, values) = (GROUP_STATE.keys(), GROUP_STATE.values());
        for ((k, v), (user, timeout_ms, json)) in keys.iter().zip(&values).zip(expected) {
            let users: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec![user]))];
            assert_eq!(layout.key().decode(&[k]).unwrap(), users);
            assert_eq!(
                layout.key().encode(&users).unwrap().unwrap().row(0).data(),
                &k[..]
            );
            let value = GroupStateValue::decode(v).unwrap();
            assert_eq!(
                value,
                GroupStateValue {
                    timeout_ms,
                    state_json: json.as_bytes()
                }
            );
            assert_eq!(value.encode(), &v[..]);
        }
    }

    #[test]
    fn round_trip_and_a_truncated_value_is_an_error() {
        for (timeout_ms, state_json) in [
            (None, &b"{\"n\":1}"[..]),
            (Some(0), &b""[..]),
            (Some(-5), &b"[]"[..]),
            (Some(i64::MAX), &b"null"[..]),
        ] {
            let v = GroupStateValue {
                timeout_ms,
                state_json,
            };
            assert_eq!(GroupStateValue::decode(&v.encode()).unwrap(), v);
        }
        let none = GroupStateValue {
            timeout_ms: Some(NO_TIMEOUT),
            state_json: b"1",
        };
        assert_eq!(
            GroupStateValue::decode(&none.encode()).unwrap().timeout_ms,
            None
        );
        assert!(matches!(
            GroupStateValue::decode(&[0; 7]),
            Err(DecodeError::Truncated { len: 7, min: 8 })
        ));
    }
}
