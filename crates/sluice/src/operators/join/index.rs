//! Both sides' join state in memory ([`JoinIndex`]): the stored rows by join key and, through a
//! [`TimeIndex`] per side, by the time the side's state bound judges. It is read from the stores
//! once per run ([`build`]) and then kept in step with them batch by batch. The stored keys and
//! values are `crate::state::layout::join`'s.

use std::collections::HashMap;
use std::sync::Arc;

use super::bounds::{term_times, StateBound};
use crate::error::{Result, SluiceError};
use crate::operators::stateful::context::StateLocation;
use crate::state::indexed::TimeIndex;
use crate::state::layout::join::{JoinLayout, JoinSide, JoinStateKey, JoinStateValue};
use crate::state::StateStore;

/// One stored row of either side.
#[derive(Debug)]
pub(super) struct Slot {
    pub side: JoinSide,
    /// The encoded join key (empty for a null key: such rows never match).
    pub key: Arc<[u8]>,
    /// The state key suffix; rows of a key are kept in sequence order.
    pub seq: u64,
    /// The row, in the row layout of its side.
    pub row: Box<[u8]>,
    pub matched: bool,
    /// Whether the state store holds this row (false for rows added by the running batch).
    pub persisted: bool,
}

impl Slot {
    /// The row's state key.
    pub(super) fn state_key(&self) -> JoinStateKey<'_> {
        JoinStateKey {
            side: self.side,
            key: &self.key,
            seq: self.seq,
        }
    }

    /// The row's state value.
    pub(super) fn state_value(&self) -> JoinStateValue<'_> {
        JoinStateValue {
            matched: self.matched,
            row: &self.row,
        }
    }
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
    pub(super) fn insert(
        &mut self,
        side: JoinSide,
        key: &[u8],
        seq: u64,
        row: Box<[u8]>,
        matched: bool,
        persisted: bool,
        time: Option<i64>,
    ) -> usize {
        let s = &mut self.sides[side.index()];
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

    pub(super) fn slot(&self, id: usize) -> Result<&Slot> {
        self.slots
            .get(id)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| SluiceError::internal("join state slot"))
    }

    pub(super) fn slot_mut(&mut self, id: usize) -> Result<&mut Slot> {
        self.slots
            .get_mut(id)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| SluiceError::internal("join state slot"))
    }

    /// Takes out a side's rows whose time is before `threshold` (or at it, when `inclusive`),
    /// in time order. Only the expired range of the time index is touched.
    pub(super) fn evict(&mut self, side: JoinSide, threshold: i64, inclusive: bool) -> Vec<Slot> {
        let expired = self.sides[side.index()]
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
        let s = &mut self.sides[side.index()];
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

/// Reads both sides' state from the stores into memory. `bounds` are each side's state bound
/// (its rows are indexed by the time it judges), `layout` the state's layout; a pair that does
/// not decode is `STATE_STORE_CORRUPT`, naming its store (`location`).
pub(super) fn build(
    stores: &[&mut dyn StateStore],
    bounds: [Option<StateBound>; 2],
    layout: &JoinLayout,
    location: &StateLocation,
) -> Result<JoinIndex> {
    // (seq, side, key, matched, row)
    type Entry<'a> = (u64, JoinSide, &'a [u8], bool, &'a [u8]);
    let mut entries: Vec<Entry> = Vec::new();
    for (p, store) in stores.iter().enumerate() {
        for (k, v) in store.iter() {
            let key = JoinStateKey::decode(k)
                .map_err(|e| location.corrupt(Some(p), "a stream-stream join state key", e))?;
            let value = JoinStateValue::decode(v)
                .map_err(|e| location.corrupt(Some(p), "a stream-stream join state value", e))?;
            entries.push((key.seq, key.side, key.key, value.matched, value.row));
        }
    }
    entries.sort_unstable_by_key(|e| e.0);
    // Each side's bound times, decoding its rows once.
    let mut times: [Vec<Option<i64>>; 2] = [Vec::new(), Vec::new()];
    for side in JoinSide::BOTH {
        let Some(b) = bounds[side.index()] else {
            continue;
        };
        let rows: Vec<&[u8]> = entries
            .iter()
            .filter(|e| e.1 == side)
            .map(|e| e.4)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let cols = layout
            .side(side)
            .decode_trusted(&rows)
            .map_err(|e| location.corrupt(None, "a stream-stream join row", e))?;
        let col = cols
            .get(b.term.column)
            .ok_or_else(|| SluiceError::internal("join state bound column"))?;
        times[side.index()] = term_times(b.term, col)?;
    }
    let mut index = JoinIndex::default();
    let mut nth = [0usize; 2];
    let mut next_seq = 0u64;
    for (seq, side, key, matched, row) in entries {
        let n = &mut nth[side.index()];
        let time = times[side.index()].get(*n).copied().flatten();
        *n += 1;
        index.insert(side, key, seq, row.into(), matched, true, time);
        next_seq = next_seq.max(seq + 1);
    }
    index.next_seq = next_seq;
    Ok(index)
}
