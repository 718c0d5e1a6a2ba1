//! Session windows (Spark's `SessionWindowStateStoreRestoreExec` /
//! `SessionWindowStateStoreSaveExec`): each row opens a session `[ts, ts + gap)`; overlapping
//! sessions of the same other keys merge, with the sessions already in state. A row next to a
//! session that was already emitted (and evicted) starts a new session.
//!
//! The sessions in state are indexed by the encoded values of the other grouping keys
//! ([`SessionIndex`], read from the stores on the first batch of a run); a session's state key
//! is the full grouping key, and it lives in the partition of its other keys.

use std::collections::HashMap;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, SortField};

use super::keys::{key_event_times, KeyPart};
use super::StreamingAggregate;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::event_time::to_micros;
use crate::operators::stateful::{partition_of, OperatorOutput};
use crate::operators::window::window_array;
use crate::state::StateStore;
use crate::types::OutputMode;

/// Sessions of one value of the other keys: (start µs, end µs, full state key).
type SessionList = Vec<(i64, i64, Vec<u8>)>;

/// Sessions in state, by the encoded values of the grouping keys other than the session.
pub(super) struct SessionIndex {
    /// Encodes the other grouping keys (None when the session is the only key).
    other_converter: Option<RowConverter>,
    /// Built from the state store on the first batch of a run.
    by_other: Option<HashMap<Vec<u8>, SessionList>>,
}

/// One session after merging a batch's rows with the stored sessions of the same other keys.
struct Merged {
    start: i64,
    end: i64,
    /// A row of the session (its other keys are the session's).
    rep_row: usize,
    /// The batch's rows in the session.
    rows: Vec<usize>,
    /// The full state keys of the stored sessions merged into it.
    old: Vec<Vec<u8>>,
    /// The encoded other keys.
    other: Vec<u8>,
}

/// The batch's rows that reach a session: their times and other keys.
struct SessionRows {
    /// The input rows kept (not late, with a time).
    keep: UInt32Array,
    /// Each kept row's time (µs).
    ts: Vec<i64>,
    /// Each kept row's other key columns.
    other_arrays: Vec<ArrayRef>,
    /// Each kept row's encoded other keys.
    other_bytes: Vec<Vec<u8>>,
    dropped: u64,
}

impl StreamingAggregate {
    /// Sets up the session index when the aggregation groups by `session_window(..)`.
    pub(super) fn with_session_index(mut self) -> Result<Self> {
        let Some(pos) = self.session_position() else {
            return Ok(self);
        };
        let others: Vec<SortField> = self
            .key_fields
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != pos)
            .map(|(_, f)| SortField::new(f.data_type().clone()))
            .collect();
        let other_converter = if others.is_empty() {
            None
        } else {
            Some(RowConverter::new(others)?)
        };
        self.sessions = Some(SessionIndex {
            other_converter,
            by_other: None,
        });
        Ok(self)
    }

    fn session_position(&self) -> Option<usize> {
        self.keys
            .iter()
            .position(|k| matches!(k, KeyPart::Session { .. }))
    }

    /// Runs a batch of a session-window aggregation.
    pub(super) fn process_sessions(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        batch: &RecordBatch,
        late_us: i64,
        evict_us: i64,
    ) -> Result<OperatorOutput> {
        let pos = self
            .session_position()
            .ok_or_else(|| SluiceError::internal("session key"))?;
        let KeyPart::Session { gap, .. } = &self.keys[pos] else {
            return Err(SluiceError::internal("session key"));
        };
        let gap = *gap;
        let rows = self.session_rows(batch, pos, gap, late_us)?;
        if self.sessions.as_ref().is_some_and(|s| s.by_other.is_none()) {
            self.build_session_index(stores, pos)?;
        }
        let mut merged = self.merge_sessions(&rows, gap)?;
        // Sessions without new rows are unchanged: leave them in state as they are.
        merged.retain(|g| !g.rows.is_empty());
        for g in &mut merged {
            if g.rep_row == usize::MAX {
                g.rep_row = g.rows[0];
            }
        }
        let updated = self.replace_sessions(stores, batch, pos, &rows, &merged)?;
        let t_removals = Instant::now();
        let (out, removed) = match self.mode {
            OutputMode::Complete => (self.all_rows(stores)?, 0),
            _ => {
                let (out, removed) = self.evict(stores, evict_us, true)?;
                (
                    out.unwrap_or_else(|| RecordBatch::new_empty(self.output_schema.clone())),
                    removed,
                )
            }
        };
        let removals_ms = t_removals.elapsed().as_millis() as i64;
        Ok(self.report(out, (updated, removed, rows.dropped), (0, removals_ms)))
    }

    /// The rows of `batch` that reach a session (late ones dropped and kept for the late-row
    /// output), with their times and other keys.
    fn session_rows(
        &mut self,
        batch: &RecordBatch,
        pos: usize,
        gap: i64,
        late_us: i64,
    ) -> Result<SessionRows> {
        let n = batch.num_rows();
        let KeyPart::Session { time, .. } = &self.keys[pos] else {
            return Err(SluiceError::internal("session key"));
        };
        let ts = to_micros(&time.evaluate(batch)?.into_array(n)?)?;
        let drop_late = self.drops_late_rows();
        let mut keep: Vec<u32> = Vec::with_capacity(n);
        let mut dropped = 0u64;
        let mut late_idx: Vec<u32> = Vec::new();
        for i in 0..n {
            if ts.is_null(i) {
                continue;
            }
            if drop_late && ts.value(i) + gap <= late_us {
                dropped += 1;
                late_idx.push(i as u32);
                continue;
            }
            keep.push(i as u32);
        }
        self.keep_late(batch, late_idx)?;
        let keep = UInt32Array::from(keep);
        let m = keep.len();
        let row_ts: Vec<i64> = keep
            .values()
            .iter()
            .map(|i| ts.value(*i as usize))
            .collect();
        // Other key columns of the kept rows.
        let mut other_arrays: Vec<ArrayRef> = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            if i == pos {
                continue;
            }
            let KeyPart::Expr(e) = k else {
                return Err(SluiceError::not_supported_yet(
                    "a session window together with another window",
                ));
            };
            other_arrays.push(take(&e.evaluate(batch)?.into_array(n)?, &keep, None)?);
        }
        let idx = self
            .sessions
            .as_ref()
            .ok_or_else(|| SluiceError::internal("session index"))?;
        let other_bytes: Vec<Vec<u8>> = match &idx.other_converter {
            None => vec![Vec::new(); m],
            Some(c) => {
                let rows = c.convert_columns(&other_arrays)?;
                (0..m).map(|i| rows.row(i).data().to_vec()).collect()
            }
        };
        Ok(SessionRows {
            keep,
            ts: row_ts,
            other_arrays,
            other_bytes,
            dropped,
        })
    }

    /// Builds the index of sessions in state (the first batch of a run).
    fn build_session_index(&mut self, stores: &[&mut dyn StateStore], pos: usize) -> Result<()> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for store in stores.iter() {
            for (k, _) in store.iter() {
                keys.push(k.to_vec());
            }
        }
        let mut map: HashMap<Vec<u8>, SessionList> = HashMap::new();
        if let (Some(conv), false) = (&self.key_converter, keys.is_empty()) {
            let parser = conv.parser();
            let arrays = conv.convert_rows(keys.iter().map(|k| parser.parse(k)))?;
            let others = self.session_other_keys(&arrays)?.unwrap_or_default();
            let w = arrays[pos]
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| SluiceError::internal("session struct"))?;
            let (starts, ends) = (to_micros(w.column(0))?, to_micros(w.column(1))?);
            for (i, k) in keys.into_iter().enumerate() {
                map.entry(others[i].clone())
                    .or_default()
                    .push((starts.value(i), ends.value(i), k));
            }
        }
        if let Some(s) = &mut self.sessions {
            s.by_other = Some(map);
        }
        Ok(())
    }

    /// Merges the rows of each other key with that key's stored sessions (overlapping intervals
    /// become one session), other keys in byte order.
    fn merge_sessions(&self, rows: &SessionRows, gap: i64) -> Result<Vec<Merged>> {
        let mut rows_of: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (r, b) in rows.other_bytes.iter().enumerate() {
            rows_of.entry(b.as_slice()).or_default().push(r);
        }
        let by_other = self
            .sessions
            .as_ref()
            .and_then(|s| s.by_other.as_ref())
            .ok_or_else(|| SluiceError::internal("session index"))?;
        let mut merged: Vec<Merged> = Vec::new();
        let mut other_keys_sorted: Vec<&[u8]> = rows_of.keys().copied().collect();
        other_keys_sorted.sort();
        for other in other_keys_sorted {
            let of_other = &rows_of[other];
            // (start, end, Some(row) | None for a stored session with its full key)
            #[allow(clippy::type_complexity)]
            let mut intervals: Vec<(i64, i64, Option<usize>, Option<&Vec<u8>>)> = of_other
                .iter()
                .map(|r| (rows.ts[*r], rows.ts[*r] + gap, Some(*r), None))
                .collect();
            if let Some(existing) = by_other.get(other) {
                intervals.extend(existing.iter().map(|(s, e, k)| (*s, *e, None, Some(k))));
            }
            intervals.sort_by_key(|(s, e, _, _)| (*s, *e));
            let mut cur: Option<Merged> = None;
            for (s, e, row, old) in intervals {
                match &mut cur {
                    Some(c) if s < c.end => {
                        c.end = c.end.max(e);
                        if let Some(r) = row {
                            c.rows.push(r);
                        }
                        if let Some(k) = old {
                            c.old.push(k.clone());
                        }
                    }
                    _ => {
                        if let Some(c) = cur.take() {
                            merged.push(c);
                        }
                        cur = Some(Merged {
                            start: s,
                            end: e,
                            rep_row: row.unwrap_or(usize::MAX),
                            rows: row.into_iter().collect(),
                            old: old.into_iter().cloned().collect(),
                            other: other.to_vec(),
                        });
                    }
                }
            }
            if let Some(c) = cur.take() {
                merged.push(c);
            }
        }
        Ok(merged)
    }

    /// Accumulates the merged sessions (their stored states and the batch's rows) and replaces
    /// them in state and in the index. Returns the number of sessions written.
    fn replace_sessions(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        batch: &RecordBatch,
        pos: usize,
        rows: &SessionRows,
        merged: &[Merged],
    ) -> Result<u64> {
        let n_groups = merged.len();
        let mut group_of_row: Vec<usize> = vec![0; rows.keep.len()];
        let mut old_states: Vec<(usize, Vec<u8>)> = Vec::new();
        for (gi, g) in merged.iter().enumerate() {
            for r in &g.rows {
                group_of_row[*r] = gi;
            }
            let p = partition_of(&g.other, self.partitions);
            for k in &g.old {
                if let Some(v) = stores[p].get(k) {
                    old_states.push((gi, v.to_vec()));
                }
            }
        }
        // Key arrays of the merged sessions.
        let rep = UInt32Array::from(merged.iter().map(|g| g.rep_row as u32).collect::<Vec<_>>());
        let mut key_arrays: Vec<ArrayRef> = Vec::new();
        let mut others_iter = rows.other_arrays.iter();
        for i in 0..self.keys.len() {
            if i == pos {
                key_arrays.push(window_array(
                    merged.iter().map(|g| g.start).collect(),
                    merged.iter().map(|g| g.end).collect(),
                    None,
                ));
            } else if let Some(a) = others_iter.next() {
                key_arrays.push(take(a, &rep, None)?);
            }
        }
        // Accumulate: stored states of merged sessions + the rows.
        let old_groups: Vec<usize> = old_states.iter().map(|(g, _)| *g).collect();
        let parser = self.state_converter.parser();
        let old_arrays: Vec<ArrayRef> = if old_states.is_empty() {
            Vec::new()
        } else {
            self.state_converter
                .convert_rows(old_states.iter().map(|(_, b)| parser.parse(b)))?
        };
        let kept_batch = arrow::compute::take_record_batch(batch, &rows.keep)?;
        let (new_states, _finals) = self.accumulate(
            &old_arrays,
            &old_groups,
            &kept_batch,
            &group_of_row,
            n_groups,
        )?;
        // Replace the merged sessions in state.
        let conv = self
            .key_converter
            .as_ref()
            .ok_or_else(|| SluiceError::internal("session keys"))?;
        let full_keys = conv.convert_columns(&key_arrays)?;
        let state_rows = self.state_converter.convert_columns(&new_states)?;
        let index = self
            .sessions
            .as_mut()
            .and_then(|s| s.by_other.as_mut())
            .ok_or_else(|| SluiceError::internal("session index"))?;
        for (gi, g) in merged.iter().enumerate() {
            let p = partition_of(&g.other, self.partitions);
            let list = index.entry(g.other.clone()).or_default();
            for k in &g.old {
                stores[p].remove(k);
                list.retain(|(_, _, full)| full != k);
            }
            let full = full_keys.row(gi).data().to_vec();
            stores[p].put(&full, state_rows.row(gi).data());
            list.push((g.start, g.end, full));
            self.min_event_time_us = self.min_event_time_us.min(g.end);
        }
        Ok(n_groups as u64)
    }

    /// Removes sessions whose end is at or before `evict_us` (one scan of the state, skipped
    /// while `evict_us` is before the earliest end in state); with `emit`, returns them as rows.
    fn evict(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        evict_us: i64,
        emit: bool,
    ) -> Result<(Option<RecordBatch>, u64)> {
        let Some(et) = self.event_time_key else {
            return Ok((None, 0));
        };

        if evict_us < self.min_event_time_us {
            return Ok((None, 0));
        }
        let Some(conv) = &self.key_converter else {
            return Ok((None, 0));
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for store in stores.iter() {
            for (k, v) in store.iter() {
                keys.push(k.to_vec());
                values.push(v.to_vec());
            }
        }
        if keys.is_empty() {
            self.min_event_time_us = i64::MAX;
            return Ok((None, 0));
        }
        let kparser = conv.parser();
        let key_arrays = conv.convert_rows(keys.iter().map(|k| kparser.parse(k)))?;
        let times = key_event_times(&key_arrays, et)?;
        let mut expired: Vec<u32> = Vec::new();
        let mut min_left = i64::MAX;
        for i in 0..keys.len() {
            if times.is_valid(i) && times.value(i) <= evict_us {
                expired.push(i as u32);
            } else if times.is_valid(i) {
                min_left = min_left.min(times.value(i));
            }
        }
        self.min_event_time_us = min_left;
        let session_others = self.session_other_keys(&key_arrays)?;
        for i in &expired {
            let k = &keys[*i as usize];
            let p = match &session_others {
                Some(others) => partition_of(&others[*i as usize], self.partitions),
                None => partition_of(k, self.partitions),
            };
            stores[p].remove(k);
            if let (
                Some(others),
                Some(SessionIndex {
                    by_other: Some(map),
                    ..
                }),
            ) = (&session_others, &mut self.sessions)
            {
                if let Some(list) = map.get_mut(&others[*i as usize]) {
                    list.retain(|(_, _, full)| full != k);
                    if list.is_empty() {
                        map.remove(&others[*i as usize]);
                    }
                }
            }
        }
        let n = expired.len() as u64;
        if !emit || expired.is_empty() {
            return Ok((None, n));
        }
        let idx = UInt32Array::from(expired);
        let keys_out: Vec<ArrayRef> = key_arrays
            .iter()
            .map(|a| take(a, &idx, None))
            .collect::<Result<_, _>>()?;
        let sparser = self.state_converter.parser();
        let chosen: Vec<&Vec<u8>> = idx.values().iter().map(|i| &values[*i as usize]).collect();
        let states = self
            .state_converter
            .convert_rows(chosen.iter().map(|b| sparser.parse(b)))?;
        let finals = self.evaluate_states(&states, chosen.len())?;
        Ok((Some(self.output_batch(keys_out, finals)?), n))
    }

    /// For session windows: the encoded other-key bytes of each decoded key row.
    fn session_other_keys(&self, key_arrays: &[ArrayRef]) -> Result<Option<Vec<Vec<u8>>>> {
        let Some(idx) = &self.sessions else {
            return Ok(None);
        };
        let pos = self.session_position().unwrap_or(0);
        let n = key_arrays.first().map(|a| a.len()).unwrap_or(0);
        match &idx.other_converter {
            None => Ok(Some(vec![Vec::new(); n])),
            Some(conv) => {
                let cols: Vec<ArrayRef> = key_arrays
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| *i != pos)
                    .map(|(_, a)| a.clone())
                    .collect();
                let rows = conv.convert_columns(&cols)?;
                Ok(Some((0..n).map(|i| rows.row(i).data().to_vec()).collect()))
            }
        }
    }
}
