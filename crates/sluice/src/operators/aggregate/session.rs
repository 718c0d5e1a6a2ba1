//! Session windows (Spark's `SessionWindowStateStoreRestoreExec` /
//! `SessionWindowStateStoreSaveExec`): each row opens a session `[ts, ts + gap)`; overlapping
//! sessions of the same other keys merge, with the sessions already in state. A row next to a
//! session that was already emitted (and evicted) starts a new session.
//!
//! The sessions in state are indexed by the encoded values of the other grouping keys, to merge,
//! and by their event time (the session's end), to evict (`SessionIndex`, read from the stores on the first batch of a
//! run); a session's state key is the full grouping key, and it lives in the partition of its
//! other keys.

use std::collections::HashMap;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, SortField};

use super::keys::{key_event_times, EventTimeKey, KeyPart};
use super::StreamingAggregate;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::event_time::to_micros;
use crate::operators::stateful::{partition_of, OperatorOutput};
use crate::operators::window::window_array;
use crate::state::indexed::{TimeIndex, Versioned};
use crate::state::StateStore;
use crate::types::OutputMode;

/// Sessions of one value of the other keys: (start µs, end µs, full state key).
type SessionList = Vec<(i64, i64, Vec<u8>)>;

/// Sessions in state, by the encoded values of the grouping keys other than the session, and
/// by end.
pub(super) struct SessionIndex {
    /// Encodes the other grouping keys (None when the session is the only key).
    other_converter: Option<RowConverter>,
    /// Built from the state store on the first batch of a run (and after a failed batch).
    sessions: Versioned<Sessions>,
}

/// The sessions in state.
#[derive(Default)]
struct Sessions {
    /// By the encoded values of the other grouping keys.
    by_other: HashMap<Vec<u8>, SessionList>,
    /// (partition, full state key) of every session with an event time, by that time (µs): the
    /// session's end, or the watermarked column among the other keys when it is the event time.
    by_time: TimeIndex<(usize, Vec<u8>)>,
}

/// One session after merging a batch's rows with the stored sessions of the same other keys.
struct Merged {
    start: i64,
    end: i64,
    /// A row of the session (its other keys are the session's).
    rep_row: usize,
    /// The batch's rows in the session.
    rows: Vec<usize>,
    /// The ends and full state keys of the stored sessions merged into it.
    old: Vec<(i64, Vec<u8>)>,
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
            sessions: Versioned::default(),
        });
        Ok(self)
    }

    fn session_position(&self) -> Option<usize> {
        self.keys
            .iter()
            .position(|k| matches!(k, KeyPart::Session { .. }))
    }

    /// Runs a batch of a session-window aggregation; the stores are open at `version`.
    pub(super) fn process_sessions(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        version: u64,
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
        self.begin_sessions(stores, version, pos)?;
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
                let (out, removed) = self.evict(stores, evict_us)?;
                (
                    out.unwrap_or_else(|| RecordBatch::new_empty(self.output_schema.clone())),
                    removed,
                )
            }
        };
        let removals_ms = t_removals.elapsed().as_millis() as i64;
        if let Some(idx) = &mut self.sessions {
            idx.sessions.finish(version + 1);
        }
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

    /// Starts the batch's session index: kept when it describes the stores' `version`, else
    /// rebuilt with one scan of the state (the first batch of a run, or after a failed batch).
    fn begin_sessions(
        &mut self,
        stores: &[&mut dyn StateStore],
        version: u64,
        pos: usize,
    ) -> Result<()> {
        let current = self
            .sessions
            .as_mut()
            .ok_or_else(|| SluiceError::internal("session index"))?
            .sessions
            .begin(version);
        if !current {
            let built = self.read_sessions(stores, pos)?;
            if let Some(idx) = &mut self.sessions {
                *idx.sessions.get_mut() = built;
            }
        }
        Ok(())
    }

    /// The sessions in state, read from every store.
    fn read_sessions(&self, stores: &[&mut dyn StateStore], pos: usize) -> Result<Sessions> {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut parts: Vec<usize> = Vec::new();
        for (p, store) in stores.iter().enumerate() {
            for (k, _) in store.iter() {
                keys.push(k.to_vec());
                parts.push(p);
            }
        }
        let mut out = Sessions::default();
        if let (Some(_), false) = (self.layout.key().rows(), keys.is_empty()) {
            let arrays = self.decode_keys(None, &keys)?;
            let others = self.session_other_keys(&arrays)?.unwrap_or_default();
            let w = arrays[pos]
                .as_any()
                .downcast_ref::<StructArray>()
                .ok_or_else(|| SluiceError::internal("session struct"))?;
            let (starts, ends) = (to_micros(w.column(0))?, to_micros(w.column(1))?);
            let times = match self.event_time_key {
                Some(et) => Some(key_event_times(&arrays, et)?),
                None => None,
            };
            for (i, k) in keys.into_iter().enumerate() {
                if let Some(t) = times.as_ref().filter(|t| t.is_valid(i)) {
                    out.by_time.insert(t.value(i), (parts[i], k.clone()));
                }
                out.by_other.entry(others[i].clone()).or_default().push((
                    starts.value(i),
                    ends.value(i),
                    k,
                ));
            }
        }
        Ok(out)
    }

    /// The sessions in state, to read and update.
    fn sessions_mut(&mut self) -> Result<&mut Sessions> {
        self.sessions
            .as_mut()
            .map(|s| s.sessions.get_mut())
            .ok_or_else(|| SluiceError::internal("session index"))
    }

    /// Merges the rows of each other key with that key's stored sessions (overlapping intervals
    /// become one session), other keys in byte order.
    fn merge_sessions(&self, rows: &SessionRows, gap: i64) -> Result<Vec<Merged>> {
        let mut rows_of: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (r, b) in rows.other_bytes.iter().enumerate() {
            rows_of.entry(b.as_slice()).or_default().push(r);
        }
        let by_other = &self
            .sessions
            .as_ref()
            .ok_or_else(|| SluiceError::internal("session index"))?
            .sessions
            .get()
            .by_other;
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
                            c.old.push((e, k.clone()));
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
                            old: old.into_iter().map(|k| (e, k.clone())).collect(),
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
        // The stored states of the merged sessions, and the group of each.
        let (mut old_groups, mut old_states): (Vec<usize>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
        for (gi, g) in merged.iter().enumerate() {
            for r in &g.rows {
                group_of_row[*r] = gi;
            }
            let p = partition_of(&g.other, self.partitions);
            for (_, k) in &g.old {
                if let Some(v) = stores[p].get(k) {
                    old_groups.push(gi);
                    old_states.push(v.to_vec());
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
        let old_arrays: Vec<ArrayRef> = if old_states.is_empty() {
            Vec::new()
        } else {
            self.decode_states(None, &old_states)?
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
        let full_keys = self
            .layout
            .key()
            .encode(&key_arrays)?
            .ok_or_else(|| SluiceError::internal("session keys"))?;
        let state_rows = self.layout.value().encode(&new_states)?;
        let et = self.event_time_key;
        let times = match et {
            Some(et) => Some(key_event_times(&key_arrays, et)?),
            None => None,
        };
        let partitions = self.partitions;
        let Sessions { by_other, by_time } = self.sessions_mut()?;
        for (gi, g) in merged.iter().enumerate() {
            let p = partition_of(&g.other, partitions);
            // The event time of the merged session; a stored session merged into it had the
            // same other keys, so the same time unless the time is the session's end.
            let time = times
                .as_ref()
                .filter(|t| t.is_valid(gi))
                .map(|t| t.value(gi));
            let list = by_other.entry(g.other.clone()).or_default();
            for (end, k) in &g.old {
                stores[p].remove(k);
                list.retain(|(_, _, full)| full != k);
                let old_time = match et {
                    Some(EventTimeKey::WindowEnd(_)) => Some(*end),
                    _ => time,
                };
                if let Some(t) = old_time {
                    by_time.remove(t, |(_, key)| key == k);
                }
            }
            let full = full_keys.row(gi).data().to_vec();
            stores[p].put(&full, state_rows.row(gi).data());
            if let Some(t) = time {
                by_time.insert(t, (p, full.clone()));
            }
            list.push((g.start, g.end, full));
        }
        Ok(n_groups as u64)
    }

    /// Removes the sessions whose event time is at or before `evict_us` (through the index by
    /// time: only expired sessions are touched) and returns them as rows, in the order of the
    /// stores' keys.
    fn evict(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        evict_us: i64,
    ) -> Result<(Option<RecordBatch>, u64)> {
        if self.event_time_key.is_none() || self.layout.key().rows().is_none() {
            return Ok((None, 0));
        }
        let mut expired: Vec<(usize, Vec<u8>)> = self
            .sessions_mut()?
            .by_time
            .expire(evict_us, true)
            .collect();
        if expired.is_empty() {
            return Ok((None, 0));
        }
        // Partition by partition, each in key order: the order of a scan of the stores.
        expired.sort_unstable();
        let mut keys: Vec<Vec<u8>> = Vec::with_capacity(expired.len());
        let mut values: Vec<Vec<u8>> = Vec::with_capacity(expired.len());
        for (p, k) in expired {
            if let Some(v) = stores[p].get(&k) {
                values.push(v.to_vec());
                stores[p].remove(&k);
                keys.push(k);
            }
        }
        let n = keys.len() as u64;
        if keys.is_empty() {
            return Ok((None, n));
        }
        let keys_out = self.decode_keys(None, &keys)?;
        if let Some(others) = self.session_other_keys(&keys_out)? {
            let by_other = &mut self.sessions_mut()?.by_other;
            for (k, other) in keys.iter().zip(&others) {
                if let Some(list) = by_other.get_mut(other) {
                    list.retain(|(_, _, full)| full != k);
                    if list.is_empty() {
                        by_other.remove(other);
                    }
                }
            }
        }
        let states = self.decode_states(None, &values)?;
        let finals = self.evaluate_states(&states, values.len())?;
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
