//! Join state held by the operator between batches: each partition keeps each side's rows as
//! Arrow columns, chunk by chunk (a batch's new rows of that side and partition are a chunk),
//! with an index of the rows by join key and one by the time their side's state bound judges,
//! instead of row-format pairs in the store read back, decoded and written per batch.
//!
//! A batch's candidate pairs take the stored rows straight from the chunks (`interleave`); the
//! matched flags are flipped in place; eviction pops the time index's buckets before the
//! eviction watermark and drops a chunk once none of its rows is alive. At the end of the batch
//! only what changed goes to the store, as the store-held path writes it: each new row still
//! alive (encoded together, with its final matched flag), each older row whose matched flag
//! was set, and a removal for each evicted row the committed version has; rows added and
//! evicted within one batch are never written.
//!
//! The stores are opened `held_by_operator`. The held state names the store version it is; a
//! batch that finds its stores at another version (a restart, a batch run again, a batch that
//! failed part-way) rebuilds it from the checkpoint's files (`StateStore::load_committed`).

use std::collections::{BTreeMap, HashMap};

use arrow::array::{Array, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::interleave;

use super::bounds::term_times;
use super::StreamingJoin;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::{partition_of, HeldVersion};
use crate::state::layout::join::{JoinSide, JoinStateKey, JoinStateValue};
use crate::state::StateStore;

/// Where a held row is: (chunk, row in the chunk).
type Loc = (u32, u32);
type Hasher = foldhash::fast::RandomState;

/// A row being held: its state key, its join key (`None`: not valid, never looked up), its
/// matched flag and its time (`None`: never evicted).
type NewRow<'k> = (Box<[u8]>, Option<&'k [u8]>, bool, Option<i64>);

/// Pairs decoded at a time while the held state is rebuilt.
const LOAD_CHUNK: usize = 4096;
/// A chunk at most half alive is rewritten once it has this many rows.
const COMPACT_MIN: usize = 64;

/// The held join state of every partition.
#[derive(Default)]
pub(super) struct HeldJoin {
    /// The store version held.
    pub(super) version: HeldVersion,
    parts: Vec<[HeldSide; 2]>,
}

/// Rows of one side, added together.
struct Chunk {
    columns: Vec<ArrayRef>,
    /// Each row's state key ([`JoinStateKey`]).
    state_keys: Vec<Box<[u8]>>,
    /// Each row's join key is valid (it is in the key index).
    keyed: Vec<bool>,
    matched: Vec<bool>,
    alive: Vec<bool>,
    /// In the committed version (else added by this batch).
    committed: Vec<bool>,
    /// Its matched flag was set by this batch (written again).
    dirty: Vec<bool>,
    /// Its time in the time index (`None`: not indexed).
    times: Vec<Option<i64>>,
    live: usize,
}

/// One side's rows in one partition.
#[derive(Default)]
struct HeldSide {
    chunks: Vec<Option<Chunk>>,
    by_key: HashMap<Box<[u8]>, Vec<Loc>, Hasher>,
    by_time: BTreeMap<i64, Vec<Loc>>,
    /// Rows removed this batch that the committed version has: their state keys.
    removed: Vec<Box<[u8]>>,
    /// Chunks this batch added or changed.
    touched: Vec<u32>,
}

impl HeldSide {
    fn chunk(&self, c: u32) -> Result<&Chunk> {
        self.chunks
            .get(c as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| SluiceError::internal("a held join row in a dropped chunk"))
    }

    fn chunk_mut(&mut self, c: u32) -> Result<&mut Chunk> {
        self.chunks
            .get_mut(c as usize)
            .and_then(Option::as_mut)
            .ok_or_else(|| SluiceError::internal("a held join row in a dropped chunk"))
    }

    fn touch(&mut self, c: u32) {
        if !self.touched.contains(&c) {
            self.touched.push(c);
        }
    }

    /// Adds a chunk of `columns` and its `rows`, committed or added by this batch.
    fn add(&mut self, columns: Vec<ArrayRef>, rows: Vec<NewRow<'_>>, committed: bool) -> u32 {
        let c = self.chunks.len() as u32;
        let n = rows.len();
        let mut chunk = Chunk {
            columns,
            state_keys: Vec::with_capacity(n),
            keyed: Vec::with_capacity(n),
            matched: Vec::with_capacity(n),
            alive: vec![true; n],
            committed: vec![committed; n],
            dirty: vec![false; n],
            times: Vec::with_capacity(n),
            live: n,
        };
        for (r, (state_key, key, matched, time)) in rows.into_iter().enumerate() {
            let loc = (c, r as u32);
            if let Some(k) = key {
                match self.by_key.get_mut(k) {
                    Some(locs) => locs.push(loc),
                    None => {
                        self.by_key.insert(k.into(), vec![loc]);
                    }
                }
            }
            if let Some(t) = time {
                self.by_time.entry(t).or_default().push(loc);
            }
            chunk.state_keys.push(state_key);
            chunk.times.push(time);
            chunk.keyed.push(key.is_some());
            chunk.matched.push(matched);
        }
        self.chunks.push(Some(chunk));
        if !committed {
            self.touch(c);
        }
        c
    }

    /// Takes out every row whose time is before `before`; returns their locations (their
    /// chunks are dropped by [`Self::drop_dead_chunks`] once read).
    fn evict(&mut self, before: i64) -> Result<Vec<Loc>> {
        let mut out = Vec::new();
        while let Some(first) = self.by_time.first_entry() {
            if *first.key() >= before {
                break;
            }
            out.extend(first.remove());
        }
        // The evicted rows' join keys: each key's list is filtered once (a key can have many
        // rows), after every evicted row is marked dead.
        let mut keys: Vec<Box<[u8]>> = Vec::new();
        for &(c, r) in &out {
            let chunk = self.chunk_mut(c)?;
            let r = r as usize;
            chunk.alive[r] = false;
            chunk.live -= 1;
            let committed = chunk.committed[r];
            let keyed = chunk.keyed[r];
            let state_key = chunk.state_keys[r].clone();
            if keyed {
                let key = JoinStateKey::decode(&state_key)
                    .map_err(|e| SluiceError::internal(format!("a held join key: {e}")))?
                    .key;
                keys.push(key.into());
            }
            if committed {
                self.removed.push(state_key);
            }
            self.touch(c);
        }
        keys.sort_unstable();
        keys.dedup();
        let chunks = &self.chunks;
        let alive = |&(c, r): &Loc| {
            chunks
                .get(c as usize)
                .and_then(Option::as_ref)
                .is_some_and(|chunk| chunk.alive[r as usize])
        };
        for key in keys {
            if let Some(locs) = self.by_key.get_mut(&key) {
                locs.retain(alive);
                if locs.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
        Ok(out)
    }

    /// Drops the chunks without a live row, and rewrites those at most half alive with their
    /// live rows only, so a few long-lived rows do not keep their chunks' dead rows in memory.
    fn drop_dead_chunks(&mut self) -> Result<()> {
        for c in 0..self.chunks.len() {
            let Some(chunk) = &self.chunks[c] else {
                continue;
            };
            if chunk.live == 0 {
                self.chunks[c] = None;
            } else if chunk.live * 2 <= chunk.alive.len() && chunk.alive.len() >= COMPACT_MIN {
                self.compact(c as u32)?;
            }
        }
        while matches!(self.chunks.last(), Some(None)) {
            self.chunks.pop();
        }
        Ok(())
    }

    /// Rewrites chunk `c` with its live rows only (after staging: nothing in it is dirty) and
    /// moves their entries in the key and time indexes.
    fn compact(&mut self, c: u32) -> Result<()> {
        let Some(old) = self.chunks[c as usize].take() else {
            return Ok(());
        };
        let keep: Vec<u32> = (0..old.alive.len() as u32)
            .filter(|r| old.alive[*r as usize])
            .collect();
        let columns = take_rows(&old.columns, &keep)?;
        let pick = |v: &[bool]| keep.iter().map(|r| v[*r as usize]).collect::<Vec<_>>();
        let mut chunk = Chunk {
            columns,
            state_keys: Vec::with_capacity(keep.len()),
            keyed: pick(&old.keyed),
            matched: pick(&old.matched),
            alive: vec![true; keep.len()],
            committed: pick(&old.committed),
            dirty: vec![false; keep.len()],
            times: keep.iter().map(|r| old.times[*r as usize]).collect(),
            live: keep.len(),
        };
        // Each old row's new place; each index list that holds a live row of the chunk is
        // rewritten once (a time bucket can hold a whole window's rows).
        let mut to = vec![u32::MAX; old.alive.len()];
        for (j, r) in keep.iter().enumerate() {
            to[*r as usize] = j as u32;
        }
        let remap = |locs: &mut Vec<Loc>| {
            for l in locs.iter_mut().filter(|l| l.0 == c) {
                l.1 = to[l.1 as usize];
            }
        };
        let mut times: Vec<i64> = chunk.times.iter().flatten().copied().collect();
        times.sort_unstable();
        times.dedup();
        for t in times {
            if let Some(locs) = self.by_time.get_mut(&t) {
                remap(locs);
            }
        }
        let mut state_keys = old.state_keys;
        let mut keys: Vec<&[u8]> = Vec::new();
        for r in &keep {
            if old.keyed[*r as usize] {
                keys.push(
                    JoinStateKey::decode(&state_keys[*r as usize])
                        .map_err(|e| SluiceError::internal(format!("a held join key: {e}")))?
                        .key,
                );
            }
        }
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            if let Some(locs) = self.by_key.get_mut(key) {
                remap(locs);
            }
        }
        for r in &keep {
            chunk
                .state_keys
                .push(std::mem::take(&mut state_keys[*r as usize]));
        }
        self.chunks[c as usize] = Some(chunk);
        Ok(())
    }
}

/// The columns of held rows at `locs` (all of one side), gathered from their chunks.
fn gather(side: &HeldSide, locs: &[Loc], n_columns: usize) -> Result<Vec<ArrayRef>> {
    let mut chunk_at: HashMap<u32, usize, Hasher> = HashMap::default();
    let mut chunks: Vec<&Chunk> = Vec::new();
    let mut indices: Vec<(usize, usize)> = Vec::with_capacity(locs.len());
    for &(c, r) in locs {
        let at = match chunk_at.get(&c) {
            Some(at) => *at,
            None => {
                chunks.push(side.chunk(c)?);
                chunk_at.insert(c, chunks.len() - 1);
                chunks.len() - 1
            }
        };
        indices.push((at, r as usize));
    }
    (0..n_columns)
        .map(|i| {
            let arrays: Vec<&dyn Array> = chunks.iter().map(|c| c.columns[i].as_ref()).collect();
            Ok(interleave(&arrays, &indices)?)
        })
        .collect()
}

/// Candidate pairs of one side's new rows: (new row in the batch, partition, stored row).
pub(super) type Candidates = Vec<(usize, usize, Loc)>;

impl StreamingJoin {
    fn n_columns(&self, side: JoinSide) -> usize {
        match side {
            JoinSide::Left => self.left_schema.fields().len(),
            JoinSide::Right => self.right_schema.fields().len(),
        }
    }

    /// Each row's time as its side's state bound judges it, relative to the bound (the
    /// store-held path's `state_times`); `None` for every row of an unbounded side.
    fn held_times(&self, side: JoinSide, columns: &[ArrayRef]) -> Result<Vec<Option<i64>>> {
        let n = columns.first().map_or(0, |c| c.len());
        let bound = match side {
            JoinSide::Left => self.left_bound,
            JoinSide::Right => self.right_bound,
        };
        let Some(b) = bound else {
            return Ok(vec![None; n]);
        };
        let col = columns
            .get(b.term.column)
            .ok_or_else(|| SluiceError::internal("join state bound column"))?;
        let shift = b.offset.saturating_add(i64::from(b.inclusive));
        Ok(term_times(b.term, col)?
            .into_iter()
            .map(|t| t.map(|t| t.saturating_sub(shift)))
            .collect())
    }

    /// Makes the held state the one of `stores`' version: kept when it is, else rebuilt from
    /// the checkpoint's files.
    pub(super) fn held_open(
        &self,
        held: &mut HeldJoin,
        stores: &mut [&mut dyn StateStore],
    ) -> Result<()> {
        if held.version.is_current(stores, held.parts.len()) {
            return Ok(());
        }
        held.version.clear();
        held.parts.clear();
        for (p, store) in stores.iter().enumerate() {
            let mut sides: [HeldSide; 2] = Default::default();
            let mut pending: [Vec<(Vec<u8>, Vec<u8>)>; 2] = Default::default();
            store.load_committed(&mut |k, v| {
                let side = JoinStateKey::decode(&k)
                    .map_err(|e| {
                        self.location
                            .corrupt(Some(p), "a stream-stream join state key", e)
                    })?
                    .side;
                let i = side.index();
                pending[i].push((k, v));
                if pending[i].len() == LOAD_CHUNK {
                    self.load_rows(p, side, &mut sides[i], &std::mem::take(&mut pending[i]))?;
                }
                Ok(())
            })?;
            for side in JoinSide::BOTH {
                let i = side.index();
                self.load_rows(p, side, &mut sides[i], &std::mem::take(&mut pending[i]))?;
            }
            held.parts.push(sides);
        }
        held.version.built(stores);
        Ok(())
    }

    /// Adds stored pairs of one side as a committed chunk.
    fn load_rows(
        &self,
        p: usize,
        side: JoinSide,
        into: &mut HeldSide,
        pairs: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let mut rows = Vec::with_capacity(pairs.len());
        let mut bytes: Vec<&[u8]> = Vec::with_capacity(pairs.len());
        for (k, v) in pairs {
            let key = JoinStateKey::decode(k).map_err(|e| {
                self.location
                    .corrupt(Some(p), "a stream-stream join state key", e)
            })?;
            let value = JoinStateValue::decode(v).map_err(|e| {
                self.location
                    .corrupt(Some(p), "a stream-stream join state value", e)
            })?;
            bytes.push(value.row);
            rows.push((key, value.matched));
        }
        let columns = self.decode_rows(side, &bytes)?;
        let times = self.held_times(side, &columns)?;
        let rows = rows
            .into_iter()
            .zip(pairs)
            .zip(times)
            .map(|(((key, matched), (k, _)), time)| {
                // A row stored under the empty join key has no valid key (never looked up).
                let join_key = (!key.key.is_empty()).then_some(key.key);
                (k.as_slice().into(), join_key, matched, time)
            })
            .collect();
        into.add(columns, rows, true);
        Ok(())
    }

    /// Holds one side's new rows (a chunk per partition), then finds their candidate pairs
    /// among the other side's held rows of the same join key.
    pub(super) fn held_add_and_probe(
        &self,
        held: &mut HeldJoin,
        side: JoinSide,
        batch: &RecordBatch,
        seq: &mut u64,
    ) -> Result<(Vec<(usize, Loc)>, Candidates)> {
        let exprs = match side {
            JoinSide::Left => &self.left_keys,
            JoinSide::Right => &self.right_keys,
        };
        let (keys, valid) = self.keys(batch, exprs)?;
        let times = self.held_times(side, batch.columns())?;
        // Each new row's partition and state key, in batch order (its sequence number).
        let mut part_rows: Vec<Vec<u32>> = vec![Vec::new(); self.partitions];
        let mut state_keys: Vec<Box<[u8]>> = Vec::with_capacity(batch.num_rows());
        for (i, &valid) in valid.iter().enumerate() {
            let key: &[u8] = if valid { keys.row(i).data() } else { &[] };
            state_keys.push(
                JoinStateKey {
                    side,
                    key,
                    seq: *seq,
                }
                .encode()
                .into(),
            );
            *seq += 1;
            part_rows[partition_of(key, self.partitions)].push(i as u32);
        }
        let mut placed: Vec<(usize, Loc)> = vec![(0, (0, 0)); batch.num_rows()];
        for (p, rows) in part_rows.iter().enumerate() {
            if rows.is_empty() {
                continue;
            }
            let columns = take_rows(batch.columns(), rows)?;
            let entries = rows
                .iter()
                .map(|&i| {
                    let i = i as usize;
                    let key = valid[i].then(|| keys.row(i).data());
                    (std::mem::take(&mut state_keys[i]), key, false, times[i])
                })
                .collect();
            let c = held.parts[p][side.index()].add(columns, entries, false);
            for (r, &i) in rows.iter().enumerate() {
                placed[i as usize] = (p, (c, r as u32));
            }
        }
        // Candidates: each new row with a valid key against the other side's rows of the key.
        let mut candidates: Candidates = Vec::new();
        for (i, &valid) in valid.iter().enumerate() {
            if !valid {
                continue;
            }
            let p = placed[i].0;
            if let Some(locs) = held.parts[p][side.other().index()]
                .by_key
                .get(keys.row(i).data())
            {
                candidates.extend(locs.iter().map(|l| (i, p, *l)));
            }
        }
        Ok((placed, candidates))
    }

    /// The pairs' columns: left then right (`new` are the new rows' places, by batch row).
    pub(super) fn held_pairs(
        &self,
        held: &HeldJoin,
        side: JoinSide,
        new: &[(usize, Loc)],
        candidates: &Candidates,
    ) -> Result<Vec<ArrayRef>> {
        let mut new_cols = None;
        let mut stored_cols = None;
        for s in [side, side.other()] {
            // Gathered per partition, then put back in candidate order.
            let mut by_part: Vec<Vec<(usize, Loc)>> = vec![Vec::new(); self.partitions];
            for (at, (i, p, l)) in candidates.iter().enumerate() {
                let (p, loc) = if s == side { new[*i] } else { (*p, *l) };
                by_part[p].push((at, loc));
            }
            let n = self.n_columns(s);
            let mut parts: Vec<Vec<ArrayRef>> = Vec::new();
            let mut order: Vec<(usize, usize)> = vec![(0, 0); candidates.len()];
            for (p, items) in by_part.iter().enumerate() {
                if items.is_empty() {
                    continue;
                }
                let locs: Vec<Loc> = items.iter().map(|(_, l)| *l).collect();
                for (k, (at, _)) in items.iter().enumerate() {
                    order[*at] = (parts.len(), k);
                }
                parts.push(gather(&held.parts[p][s.index()], &locs, n)?);
            }
            let cols = (0..n)
                .map(|c| {
                    let arrays: Vec<&dyn Array> = parts.iter().map(|p| p[c].as_ref()).collect();
                    Ok(interleave(&arrays, &order)?)
                })
                .collect::<Result<Vec<_>>>()?;
            if s == side {
                new_cols = Some(cols);
            } else {
                stored_cols = Some(cols);
            }
        }
        let (new_cols, stored_cols) = (
            new_cols.unwrap_or_default(),
            stored_cols.unwrap_or_default(),
        );
        Ok(match side {
            JoinSide::Left => [new_cols, stored_cols].concat(),
            JoinSide::Right => [stored_cols, new_cols].concat(),
        })
    }

    /// Sets the matched flag of the row at `loc` of `side` in partition `p`; returns whether it
    /// was not set before.
    pub(super) fn held_match(
        held: &mut HeldJoin,
        p: usize,
        side: JoinSide,
        (c, r): Loc,
    ) -> Result<bool> {
        let s = &mut held.parts[p][side.index()];
        let chunk = s.chunk_mut(c)?;
        let r = r as usize;
        if chunk.matched[r] {
            return Ok(false);
        }
        chunk.matched[r] = true;
        if chunk.committed[r] {
            chunk.dirty[r] = true;
        }
        s.touch(c);
        Ok(true)
    }

    /// Evicts both sides' rows before `evict_us` (times relative to their bounds); returns how
    /// many, and the unmatched ones of each outer side as rows of that side.
    pub(super) fn held_evict(
        &self,
        held: &mut HeldJoin,
        evict_us: i64,
        emit: [bool; 2],
    ) -> Result<(i64, [Vec<Vec<ArrayRef>>; 2])> {
        let mut removed = 0i64;
        let mut unmatched: [Vec<Vec<ArrayRef>>; 2] = Default::default();
        for part in held.parts.iter_mut() {
            for side in JoinSide::BOTH {
                let s = &mut part[side.index()];
                let evicted = s.evict(evict_us)?;
                removed += evicted.len() as i64;
                if emit[side.index()] {
                    let mut lonely = Vec::new();
                    for &(c, r) in &evicted {
                        if !s.chunk(c)?.matched[r as usize] {
                            lonely.push((c, r));
                        }
                    }
                    if !lonely.is_empty() {
                        unmatched[side.index()].push(gather(s, &lonely, self.n_columns(side))?);
                    }
                }
            }
        }
        Ok((removed, unmatched))
    }

    /// Stages what the batch changed in each partition's store: removals of evicted committed
    /// rows, every new row still alive and every older row newly matched (their values
    /// encoded together per chunk); then the held rows are the committed version.
    pub(super) fn held_stage(
        &self,
        held: &mut HeldJoin,
        stores: &mut [&mut dyn StateStore],
    ) -> Result<()> {
        let mut value = Vec::new();
        for (part, store) in held.parts.iter_mut().zip(stores.iter_mut()) {
            for side in JoinSide::BOTH {
                let s = &mut part[side.index()];
                for key in s.removed.drain(..) {
                    store.stage_known(&key, None, true);
                }
                let mut touched = std::mem::take(&mut s.touched);
                touched.sort_unstable();
                for c in touched {
                    let Some(chunk) = s.chunks.get_mut(c as usize).and_then(Option::as_mut) else {
                        continue;
                    };
                    let write: Vec<u32> = (0..chunk.alive.len())
                        .filter(|r| chunk.alive[*r] && (!chunk.committed[*r] || chunk.dirty[*r]))
                        .map(|r| r as u32)
                        .collect();
                    if write.is_empty() {
                        continue;
                    }
                    let columns = take_rows(&chunk.columns, &write)?;
                    let rows = self.layout.side(side).encode(&columns)?;
                    for (k, r) in write.iter().enumerate() {
                        let r = *r as usize;
                        JoinStateValue {
                            matched: chunk.matched[r],
                            row: rows.row(k).as_ref(),
                        }
                        .encode_into(&mut value);
                        store.stage_known(&chunk.state_keys[r], Some(&value), chunk.committed[r]);
                        chunk.committed[r] = true;
                        chunk.dirty[r] = false;
                    }
                }
                s.drop_dead_chunks()?;
            }
        }
        Ok(())
    }
}

/// The `rows` of each of `columns`, in that order.
fn take_rows(columns: &[ArrayRef], rows: &[u32]) -> Result<Vec<ArrayRef>> {
    let idx = UInt32Array::from(rows.to_vec());
    columns
        .iter()
        .map(|c| Ok(arrow::compute::take(c, &idx, None)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use std::sync::Arc;

    fn state_key(key: &[u8], seq: u64) -> Box<[u8]> {
        JoinStateKey {
            side: JoinSide::Left,
            key,
            seq,
        }
        .encode()
        .into()
    }

    /// Every row the indexes point at is alive and is the row its state key says (its value is
    /// its sequence number); returns the values found through the key index.
    fn check(side: &HeldSide) -> Vec<i64> {
        let mut found = Vec::new();
        for locs in side.by_key.values().chain(side.by_time.values()) {
            for &(c, r) in locs {
                let chunk = side.chunk(c).unwrap();
                let r = r as usize;
                assert!(chunk.alive[r]);
                let value = chunk.columns[0]
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .value(r);
                let key = JoinStateKey::decode(&chunk.state_keys[r]).unwrap();
                assert_eq!(key.seq as i64, value);
                found.push(value);
            }
        }
        found.sort_unstable();
        found.dedup();
        found
    }

    #[test]
    fn a_chunk_mostly_evicted_is_rewritten_and_its_live_rows_are_still_found() {
        let mut side = HeldSide::default();
        let keys: Vec<Vec<u8>> = (0..100u8).map(|i| vec![1, i % 7]).collect();
        let values: ArrayRef = Arc::new(Int64Array::from_iter_values(0..100));
        // Every tenth row has no time: never evicted.
        let rows = (0..100)
            .map(|i| {
                let time = (i % 10 != 0).then_some(i as i64);
                (
                    state_key(&keys[i], i as u64),
                    Some(keys[i].as_slice()),
                    false,
                    time,
                )
            })
            .collect();
        let c = side.add(vec![values], rows, true);
        assert_eq!(side.evict(80).unwrap().len(), 72);
        assert_eq!(
            side.removed.len(),
            72,
            "committed rows are removals to write"
        );
        side.drop_dead_chunks().unwrap();
        let chunk = side.chunk(c).unwrap();
        assert_eq!(
            chunk.columns[0].len(),
            28,
            "rewritten with its 28 live rows"
        );
        let live: Vec<i64> = (0..100).filter(|i| i % 10 == 0 || *i >= 80).collect();
        assert_eq!(check(&side), live);
        // Evicting again after the rewrite finds the moved rows by their times.
        let evicted = side.evict(95).unwrap();
        let values: Vec<i64> = evicted
            .iter()
            .map(|&(c, r)| {
                side.chunk(c).unwrap().columns[0]
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .value(r as usize)
            })
            .collect();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (80..95).filter(|i| i % 10 != 0).collect::<Vec<_>>());
        side.drop_dead_chunks().unwrap();
        let live: Vec<i64> = (0..100).filter(|i| i % 10 == 0 || *i >= 95).collect();
        assert_eq!(check(&side), live);
        assert_eq!(
            side.by_key.values().map(Vec::len).sum::<usize>(),
            live.len()
        );
    }
}
