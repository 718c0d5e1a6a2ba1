//! Session windows (Spark's `SessionWindowStateStoreRestoreExec` /
//! `SessionWindowStateStoreSaveExec`): each row opens a session `[ts, ts + gap)`; overlapping
//! sessions of the same other keys merge, with the sessions already in state. A row next to a
//! session that was already emitted (and evicted) starts a new session.
//!
//! A session's state key is the full grouping key, and it lives in the partition of its other
//! keys. The stores find a batch's sessions to merge by those other keys (a key group read from
//! the key, [`StateStore::scan_group`], wherever the session column is among the keys) and the
//! sessions to evict by their event time (the session's end, or the watermarked column among the
//! other keys: the store's time index, as for other aggregations). Nothing about the sessions
//! is kept in memory between batches, so their number is bounded by the state store, not by
//! memory, on the on-disk provider.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow::compute::take;
use arrow::row::{RowConverter, SortField};

use super::keys::KeyPart;
use super::StreamingAggregate;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::event_time::to_micros;
use crate::operators::stateful::{partition_of, OperatorOutput};
use crate::operators::window::window_array;
use crate::state::layout::KeyLayout;
use crate::state::{KeyGroups, StateStore};
use crate::types::OutputMode;

/// How the session key's other grouping keys are encoded, and the stores' key groups by them.
pub(super) struct SessionIndex {
    /// Encodes the other grouping keys (None when the session is the only key).
    other_converter: Option<Arc<RowConverter>>,
    /// A stored key's group: its other grouping keys, encoded as `other_converter` does.
    groups: KeyGroups,
}

/// A session in state: (start µs, end µs, full state key, stored state).
type StoredSession = (i64, i64, Vec<u8>, Vec<u8>);

/// One session after merging a batch's rows with the stored sessions of the same other keys.
struct Merged {
    start: i64,
    end: i64,
    /// A row of the session (its other keys are the session's).
    rep_row: usize,
    /// The batch's rows in the session.
    rows: Vec<usize>,
    /// The full state keys and states of the stored sessions merged into it.
    old: Vec<(Vec<u8>, Vec<u8>)>,
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
            Some(Arc::new(RowConverter::new(others)?))
        };
        let types: Vec<_> = self
            .key_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let key = KeyLayout::new(&types)?;
        let (converter, location) = (other_converter.clone(), self.location.clone());
        let groups = KeyGroups::by(move |k: &[u8]| {
            let Some(converter) = &converter else {
                return Ok(Some(Vec::new()));
            };
            let mut arrays = key
                .decode_trusted(&[k])
                .map_err(|e| location.corrupt(None, "a session window key", e))?;
            arrays.remove(pos);
            let rows = converter.convert_columns(&arrays)?;
            Ok(Some(rows.row(0).data().to_vec()))
        });
        self.sessions = Some(SessionIndex {
            other_converter,
            groups,
        });
        Ok(self)
    }

    /// The stores' key groups for session windows.
    pub(super) fn session_key_groups(&self) -> Option<KeyGroups> {
        self.sessions.as_ref().map(|s| s.groups.clone())
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
        let mut merged = self.merge_sessions(stores, pos, &rows, gap)?;
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
        let other_arrays: Vec<ArrayRef> = self
            .other_keys(batch, pos)?
            .iter()
            .map(|a| take(a, &keep, None))
            .collect::<Result<_, _>>()?;
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

    /// The grouping keys other than the session window (at `pos`) of every row of `batch`.
    fn other_keys(&self, batch: &RecordBatch, pos: usize) -> Result<Vec<ArrayRef>> {
        let n = batch.num_rows();
        let mut arrays: Vec<ArrayRef> = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            if i == pos {
                continue;
            }
            let KeyPart::Expr(e) = k else {
                return Err(SluiceError::not_supported_yet(
                    "a session window together with another window",
                ));
            };
            arrays.push(e.evaluate(batch)?.into_array(n)?);
        }
        Ok(arrays)
    }

    /// The state partition of each row of `batch`: its other keys' (a session's key group).
    pub(super) fn session_partitions(&self, batch: &RecordBatch) -> Result<Vec<usize>> {
        let pos = self
            .session_position()
            .ok_or_else(|| SluiceError::internal("session key"))?;
        let n = batch.num_rows();
        let arrays = self.other_keys(batch, pos)?;
        let idx = self
            .sessions
            .as_ref()
            .ok_or_else(|| SluiceError::internal("session index"))?;
        Ok(match &idx.other_converter {
            None => vec![partition_of(&[], self.partitions); n],
            Some(c) => {
                let rows = c.convert_columns(&arrays)?;
                (0..n)
                    .map(|i| partition_of(rows.row(i).data(), self.partitions))
                    .collect()
            }
        })
    }

    /// The stored sessions of each of `others` (encoded other keys), from the store of its
    /// partition: one key group each.
    fn stored_sessions<'o>(
        &self,
        stores: &[&mut dyn StateStore],
        pos: usize,
        others: &[&'o [u8]],
    ) -> Result<HashMap<&'o [u8], Vec<StoredSession>>> {
        let mut pairs: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
        for (i, other) in others.iter().enumerate() {
            let p = partition_of(other, self.partitions);
            for (k, v) in stores[p].scan_group(other)? {
                pairs.push((i, k, v));
            }
        }
        let mut out: HashMap<&[u8], Vec<StoredSession>> = HashMap::new();
        if pairs.is_empty() {
            return Ok(out);
        }
        let arrays =
            self.decode_keys(None, &pairs.iter().map(|(_, k, _)| k).collect::<Vec<_>>())?;
        let w = arrays[pos]
            .as_any()
            .downcast_ref::<StructArray>()
            .ok_or_else(|| SluiceError::internal("session struct"))?;
        let (starts, ends) = (to_micros(w.column(0))?, to_micros(w.column(1))?);
        for (j, (i, k, v)) in pairs.into_iter().enumerate() {
            out.entry(others[i])
                .or_default()
                .push((starts.value(j), ends.value(j), k, v));
        }
        Ok(out)
    }

    /// Merges the rows of each other key with that key's stored sessions (overlapping intervals
    /// become one session), other keys in byte order.
    fn merge_sessions(
        &self,
        stores: &[&mut dyn StateStore],
        pos: usize,
        rows: &SessionRows,
        gap: i64,
    ) -> Result<Vec<Merged>> {
        let mut rows_of: HashMap<&[u8], Vec<usize>> = HashMap::new();
        for (r, b) in rows.other_bytes.iter().enumerate() {
            rows_of.entry(b.as_slice()).or_default().push(r);
        }
        let mut other_keys_sorted: Vec<&[u8]> = rows_of.keys().copied().collect();
        other_keys_sorted.sort();
        let stored = self.stored_sessions(stores, pos, &other_keys_sorted)?;
        let mut merged: Vec<Merged> = Vec::new();
        for other in other_keys_sorted {
            let of_other = &rows_of[other];
            // (start, end, Some(row) | None for a stored session with its key and state)
            #[allow(clippy::type_complexity)]
            let mut intervals: Vec<(
                i64,
                i64,
                Option<usize>,
                Option<(&Vec<u8>, &Vec<u8>)>,
            )> = of_other
                .iter()
                .map(|r| (rows.ts[*r], rows.ts[*r] + gap, Some(*r), None))
                .collect();
            if let Some(existing) = stored.get(other) {
                intervals.extend(
                    existing
                        .iter()
                        .map(|(s, e, k, v)| (*s, *e, None, Some((k, v)))),
                );
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
                        if let Some((k, v)) = old {
                            c.old.push((k.clone(), v.clone()));
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
                            old: old
                                .into_iter()
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
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
    /// them in state. Returns the number of sessions written.
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
            for (_, v) in &g.old {
                old_groups.push(gi);
                old_states.push(v.clone());
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
        for (gi, g) in merged.iter().enumerate() {
            let p = partition_of(&g.other, self.partitions);
            for (k, _) in &g.old {
                stores[p].remove(k);
            }
            stores[p].put(full_keys.row(gi).data(), state_rows.row(gi).data());
        }
        Ok(n_groups as u64)
    }

    /// Removes the sessions whose event time is at or before `evict_us` (through the stores'
    /// time index: only expired sessions are read) and returns them as rows, partition by
    /// partition.
    fn evict(
        &self,
        stores: &mut [&mut dyn StateStore],
        evict_us: i64,
    ) -> Result<(Option<RecordBatch>, u64)> {
        let mut out = Vec::new();
        let mut removed = 0;
        for (p, store) in stores.iter_mut().enumerate() {
            let (rows, n) = self.evict_partition(p, &mut **store, evict_us, true)?;
            out.extend(rows);
            removed += n;
        }
        if out.is_empty() {
            return Ok((None, removed));
        }
        Ok((
            Some(arrow::compute::concat_batches(&self.output_schema, &out)?),
            removed,
        ))
    }
}
