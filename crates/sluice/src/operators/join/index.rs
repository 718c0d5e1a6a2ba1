//! Both sides' join state in memory ([`JoinIndex`]): the stored rows by join key and, through a
//! [`TimeIndex`] per side, by the time the side's state bound judges. It is read from the stores
//! once per run ([`build`]) and then kept in step with them batch by batch; the state key and
//! value layout is here too.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::row::RowConverter;

use super::bounds::{term_times, StateBound};
use super::{LEFT, RIGHT};
use crate::error::{class, Result, SluiceError};
use crate::state::indexed::TimeIndex;
use crate::state::StateStore;

/// One stored row of either side.
#[derive(Debug)]
pub(super) struct Slot {
    pub side: u8,
    /// The encoded join key (empty for a null key: such rows never match).
    pub key: Arc<[u8]>,
    /// The state key suffix; rows of a key are kept in sequence order.
    pub seq: u64,
    /// The row, encoded by the side's row converter.
    pub row: Box<[u8]>,
    pub matched: bool,
    /// Whether the state store holds this row (false for rows added by the running batch).
    pub persisted: bool,
}

/// One side's rows.
#[derive(Debug, Default)]
pub(super) struct SideIndex {
    /// Slots of each join key, in sequence order. All live rows of a key share its `Arc`.
    pub by_key: HashMap<Arc<[u8]>, Vec<usize>, foldhash::fast::RandomState>,
    /// Slots by the time the side's state bound judges (µs), in sequence order within a time;
    /// rows without one (no bound, or a null time) are never evicted and are not here.
    by_time: TimeIndex<usize>,
}

/// Both sides' state in memory: the store's rows, read once per run and then kept in step with
/// it batch by batch.
#[derive(Debug, Default)]
pub(super) struct JoinIndex {
    pub slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    pub sides: [SideIndex; 2],
    /// The sequence number of the next row added.
    pub next_seq: u64,
}

impl JoinIndex {
    #[allow(clippy::too_many_arguments)]
    pub fn insert(
        &mut self,
        side: u8,
        key: &[u8],
        seq: u64,
        row: Box<[u8]>,
        matched: bool,
        persisted: bool,
        time: Option<i64>,
    ) -> usize {
        let s = &mut self.sides[side as usize];
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let key: Arc<[u8]> = match s.by_key.get_mut(key) {
            Some(list) => {
                let shared = list
                    .first()
                    .and_then(|first| self.slots[*first].as_ref())
                    .map(|first| first.key.clone());
                list.push(id);
                shared.unwrap_or_else(|| Arc::from(key))
            }
            None => {
                let k: Arc<[u8]> = Arc::from(key);
                s.by_key.insert(k.clone(), vec![id]);
                k
            }
        };
        self.slots[id] = Some(Slot {
            side,
            key,
            seq,
            row,
            matched,
            persisted,
        });
        if let Some(t) = time {
            s.by_time.insert(t, id);
        }
        id
    }

    pub fn slot(&self, id: usize) -> Result<&Slot> {
        self.slots
            .get(id)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| SluiceError::internal("join state slot"))
    }

    pub fn slot_mut(&mut self, id: usize) -> Result<&mut Slot> {
        self.slots
            .get_mut(id)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| SluiceError::internal("join state slot"))
    }

    /// Takes out a side's rows whose time is before `threshold` (or at it, when `inclusive`),
    /// in time order. Only the expired range of the time index is touched.
    pub fn evict(&mut self, side: u8, threshold: i64, inclusive: bool) -> Vec<Slot> {
        let expired = self.sides[side as usize]
            .by_time
            .expire(threshold, inclusive);
        let mut out = Vec::with_capacity(expired.size_hint().0);
        for id in expired {
            if let Some(slot) = self.slots.get_mut(id).and_then(|s| s.take()) {
                self.free.push(id);
                out.push(slot);
            }
        }
        // Drop the taken slots from their keys' lists, once per key (a key's rows share its
        // `Arc`, so the pointer identifies the key).
        let s = &mut self.sides[side as usize];
        let mut keys: Vec<&Arc<[u8]>> = out.iter().map(|s| &s.key).collect();
        keys.sort_unstable_by_key(|k| Arc::as_ptr(k) as *const u8 as usize);
        keys.dedup_by_key(|k| Arc::as_ptr(k) as *const u8 as usize);
        for key in keys {
            if let Some(list) = s.by_key.get_mut(&**key) {
                list.retain(|id| self.slots[*id].is_some());
                if list.is_empty() {
                    s.by_key.remove(&**key);
                }
            }
        }
        out
    }
}

/// The state key of a row: side, key length (LE u32), key, sequence number (BE u64).
pub(super) fn state_key(side: u8, key: &[u8], seq: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 13);
    write_state_key(&mut k, side, key, seq);
    k
}

/// Writes [`state_key`] into `k`.
pub(super) fn write_state_key(k: &mut Vec<u8>, side: u8, key: &[u8], seq: u64) {
    k.clear();
    k.push(side);
    k.extend_from_slice(&(key.len() as u32).to_le_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&seq.to_be_bytes());
}

/// (side, key, sequence number) of a state key; `None` when it is malformed.
pub(super) fn parse_state_key(k: &[u8]) -> Option<(u8, Vec<u8>, u64)> {
    let side = *k.first()?;
    let len = u32::from_le_bytes(k.get(1..5)?.try_into().ok()?) as usize;
    let key = k.get(5..5 + len)?.to_vec();
    let seq = u64::from_be_bytes(k.get(5 + len..13 + len)?.try_into().ok()?);
    Some((side, key, seq))
}

/// The state value of a row: the `matched` flag, then the encoded row.
pub(super) fn write_value(v: &mut Vec<u8>, matched: bool, row: &[u8]) {
    v.clear();
    v.push(matched as u8);
    v.extend_from_slice(row);
}

/// Reads both sides' state from the stores into memory. `bounds` and `converters` are each
/// side's state bound (its rows are indexed by the time it judges) and row converter.
pub(super) fn build(
    stores: &[&mut dyn StateStore],
    bounds: [Option<StateBound>; 2],
    converters: [&RowConverter; 2],
) -> Result<JoinIndex> {
    let corrupt = |what: &str| {
        SluiceError::checkpoint(
            class::STATE_STORE_CORRUPT,
            format!("{what}; use a new checkpoint location"),
        )
    };
    // (seq, side, key, matched, row)
    type Entry<'a> = (u64, u8, Vec<u8>, bool, &'a [u8]);
    let mut entries: Vec<Entry> = Vec::new();
    for store in stores {
        for (k, v) in store.iter() {
            let (side, key, seq) = parse_state_key(k)
                .filter(|(side, _, _)| *side <= RIGHT)
                .ok_or_else(|| corrupt("a stream-stream join state key is malformed"))?;
            let (matched, row) = v
                .split_first()
                .ok_or_else(|| corrupt("a stream-stream join state value is empty"))?;
            entries.push((seq, side, key, *matched == 1, row));
        }
    }
    entries.sort_unstable_by_key(|e| e.0);
    // Each side's bound times, decoding its rows once.
    let mut times: [Vec<Option<i64>>; 2] = [Vec::new(), Vec::new()];
    for side in [LEFT, RIGHT] {
        let Some(b) = bounds[side as usize] else {
            continue;
        };
        let conv = converters[side as usize];
        let parser = conv.parser();
        let rows: Vec<&[u8]> = entries
            .iter()
            .filter(|e| e.1 == side)
            .map(|e| e.4)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let cols = conv.convert_rows(rows.iter().map(|r| parser.parse(r)))?;
        times[side as usize] = term_times(b.term, &cols[b.term.column])?;
    }
    let mut index = JoinIndex::default();
    let mut nth = [0usize; 2];
    let mut next_seq = 0u64;
    for (seq, side, key, matched, row) in entries {
        let n = &mut nth[side as usize];
        let time = times[side as usize].get(*n).copied().flatten();
        *n += 1;
        index.insert(side, &key, seq, row.into(), matched, true, time);
        next_seq = next_seq.max(seq + 1);
    }
    index.next_seq = next_seq;
    Ok(index)
}
