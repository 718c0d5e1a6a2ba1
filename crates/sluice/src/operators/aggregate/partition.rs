//! One batch's work per state partition, each partition on a thread of its own (as Spark's
//! tasks): group the partition's row instances by key, merge the stored states of the touched
//! keys and update them with the rows, write them back, then emit and evict by output mode
//! through the partition's event-time index.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use arrow::array::UInt32Array;
use arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, TimestampMicrosecondArray};
use arrow::compute::{concat_batches, take};
use arrow::row::Rows;
use datafusion::logical_expr::EmitTo;

use super::keys::key_event_times;
use super::StreamingAggregate;
use crate::error::{Result, SluiceError};
use crate::operators::stateful::partition_of;
use crate::state::StateStore;
use crate::types::OutputMode;
use sluice_common::threads::on_threads;

/// What every partition of a batch reads: the row instances (a row per window it falls in),
/// their key columns and encoded keys, and their event times (for the index).
pub(super) struct BatchInstances<'a> {
    pub rows: &'a RecordBatch,
    pub key_arrays: &'a [ArrayRef],
    pub key_rows: Option<&'a Rows>,
    pub times: Option<&'a TimestampMicrosecondArray>,
    pub evict_us: i64,
}

/// What one partition's share of a batch produced.
#[derive(Default)]
pub(super) struct PartitionOutput {
    pub rows: Option<RecordBatch>,
    pub updated: u64,
    pub removed: u64,
    pub updates_ms: i64,
    pub removals_ms: i64,
}

impl PartitionOutput {
    /// Adds `other`'s counts and times to these, and its rows to `rows`.
    pub(super) fn add(&mut self, other: PartitionOutput, rows: &mut Vec<RecordBatch>) {
        self.updated += other.updated;
        self.removed += other.removed;
        self.updates_ms += other.updates_ms;
        self.removals_ms += other.removals_ms;
        rows.extend(other.rows);
    }
}

/// A chunk's instances split by partition: their encoded keys, each partition's instances, and
/// their keys' event times (when the output mode evicts).
pub(super) type SplitInstances = (
    Option<Rows>,
    Vec<Vec<u32>>,
    Option<TimestampMicrosecondArray>,
);

/// The encoded keys a partition's chunks of one batch updated (a batch larger than a chunk:
/// they are emitted, and counted as updated, once, after the last chunk).
pub(super) type TouchedKeys = HashSet<Vec<u8>, foldhash::fast::RandomState>;

/// The keys of one partition's instances: (each instance's group, each group's first instance,
/// each group's encoded key).
type Groups<'k> = (Vec<usize>, Vec<u32>, Vec<&'k [u8]>);

impl StreamingAggregate {
    /// Sends each instance to its key's partition (Spark's shuffle) and runs the partitions at
    /// the same time; returns their outputs in partition order.
    /// With `touched` (one set per partition), the batch has more chunks: the partitions only
    /// update their state and remember the keys, [`Self::finish_partitions`] emits and evicts.
    pub(super) fn run_partitions(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        instances: &RecordBatch,
        key_arrays: &[ArrayRef],
        evict_us: i64,
        touched: Option<&mut [TouchedKeys]>,
    ) -> Result<Vec<PartitionOutput>> {
        let (key_rows, part_rows, times) =
            self.split_partitions(instances.num_rows(), key_arrays)?;
        let shared = BatchInstances {
            rows: instances,
            key_arrays,
            key_rows: key_rows.as_ref(),
            times: times.as_ref(),
            evict_us,
        };
        let touched: Vec<Option<&mut TouchedKeys>> = match touched {
            Some(sets) => sets.iter_mut().map(Some).collect(),
            None => std::iter::repeat_with(|| None).take(stores.len()).collect(),
        };
        let this = &*self;
        let results = on_threads(
            stores.iter_mut().zip(part_rows.iter()).zip(touched),
            "an aggregation partition thread panicked",
            |p, ((store, rows), touched)| {
                this.process_partition(p, &mut **store, &shared, rows, touched)
            },
        );
        results.into_iter().collect()
    }

    /// The instances' encoded keys, the instances of each partition (Spark's shuffle), and
    /// their keys' event times when the output mode evicts.
    pub(super) fn split_partitions(
        &self,
        rows_in: usize,
        key_arrays: &[ArrayRef],
    ) -> Result<SplitInstances> {
        let key_rows: Option<Rows> = self.layout.key().encode(key_arrays)?;
        let mut part_rows: Vec<Vec<u32>> = vec![Vec::new(); self.partitions];
        match &key_rows {
            Some(rows) => {
                for r in 0..rows_in {
                    part_rows[partition_of(rows.row(r).data(), self.partitions)].push(r as u32);
                }
            }
            None => part_rows[partition_of(&[], self.partitions)] = (0..rows_in as u32).collect(),
        }
        let times = match (self.event_time_key, self.mode) {
            (Some(et), OutputMode::Update | OutputMode::Append) => {
                Some(key_event_times(key_arrays, et)?)
            }
            _ => None,
        };
        Ok((key_rows, part_rows, times))
    }

    /// Groups a partition's instances by key.
    fn group<'k>(&self, p: usize, batch: &BatchInstances<'k>, rows: &[u32]) -> Groups<'k> {
        let mut group_of: HashMap<&[u8], usize, foldhash::fast::RandomState> = HashMap::default();
        let mut group_indices: Vec<usize> = Vec::with_capacity(rows.len());
        let mut first_row: Vec<u32> = Vec::new();
        let mut group_keys: Vec<&[u8]> = Vec::new();
        match batch.key_rows {
            Some(key_rows) => {
                for r in rows {
                    let bytes: &[u8] = key_rows.row(*r as usize).data();
                    let next = group_keys.len();
                    let g = *group_of.entry(bytes).or_insert_with(|| {
                        first_row.push(*r);
                        group_keys.push(bytes);
                        next
                    });
                    group_indices.push(g);
                }
            }
            // Global aggregation: one key, present every batch (Spark emits it every batch).
            None if p == partition_of(&[], self.partitions) => {
                group_keys.push(&[]);
                group_indices.resize(rows.len(), 0);
            }
            None => {}
        }
        (group_indices, first_row, group_keys)
    }

    /// One partition's share of a batch: reads the stored states of its touched keys, merges
    /// and updates them with its rows, writes them back, then emits and evicts by output mode.
    /// With `touched` (a chunk of a larger batch), only updates, and adds the keys to it.
    fn process_partition(
        &self,
        p: usize,
        store: &mut dyn StateStore,
        batch: &BatchInstances<'_>,
        rows: &[u32],
        touched: Option<&mut TouchedKeys>,
    ) -> Result<PartitionOutput> {
        if store.is_elsewhere() {
            // Another worker's partition: none of this task's rows are in it.
            return Ok(PartitionOutput::default());
        }
        let t_updates = Instant::now();
        let (group_indices, first_row, group_keys) = self.group(p, batch, rows);
        let n_groups = group_keys.len();
        let mut out = PartitionOutput {
            updated: n_groups as u64,
            ..Default::default()
        };
        let (finals, direct) = if n_groups > 0 {
            self.update_groups(
                p,
                store,
                batch,
                rows,
                (&group_indices, &first_row, &group_keys),
                touched.is_none(),
            )?
        } else {
            (Vec::new(), Vec::new())
        };
        out.updates_ms = t_updates.elapsed().as_millis() as i64;
        if let Some(touched) = touched {
            for k in group_keys {
                if !touched.contains(k) {
                    touched.insert(k.to_vec());
                }
            }
            out.updated = 0;
            return Ok(out);
        }

        // Output and eviction, by output mode.
        let t_removals = Instant::now();
        match self.mode {
            OutputMode::Update => {
                if n_groups > 0 {
                    let keys: Vec<ArrayRef> = match batch.key_rows {
                        Some(_) => {
                            let first = UInt32Array::from(first_row);
                            batch
                                .key_arrays
                                .iter()
                                .map(|a| take(a, &first, None))
                                .collect::<Result<_, _>>()?
                        }
                        None => vec![],
                    };
                    out.rows = Some(self.output_batch(keys, finals)?);
                }
                if self.event_time_key.is_some() {
                    out.removed = self.evict_partition(p, store, batch.evict_us, false)?.1
                        + direct.len() as u64;
                }
            }
            OutputMode::Append => {
                let (rows, n) = self.evict_partition(p, store, batch.evict_us, true)?;
                out.removed = n + direct.len() as u64;
                out.rows = rows;
                if !direct.is_empty() {
                    let idx = UInt32Array::from(direct);
                    let first = take(&UInt32Array::from(first_row), &idx, None)?;
                    let keys: Vec<ArrayRef> = batch
                        .key_arrays
                        .iter()
                        .map(|a| take(a, &first, None))
                        .collect::<Result<_, _>>()?;
                    let fin: Vec<ArrayRef> = finals
                        .iter()
                        .map(|a| take(a, &idx, None))
                        .collect::<Result<_, _>>()?;
                    let now = self.output_batch(keys, fin)?;
                    out.rows = Some(match out.rows.take() {
                        Some(evicted) => concat_batches(&self.output_schema, &[evicted, now])?,
                        None => now,
                    });
                }
            }
            OutputMode::Complete => {}
        }
        out.removals_ms = t_removals.elapsed().as_millis() as i64;
        Ok(out)
    }

    /// Merges the stored states of a partition's touched keys with its rows and writes the new
    /// states (the store indexes new keys by event time). Returns the final values of every group and
    /// the groups emitted directly (new keys already behind the eviction watermark; only with
    /// `direct_allowed`: a chunk of a larger batch stores them, a later chunk may add to them).
    /// `store` is partition `p`'s.
    fn update_groups(
        &self,
        p: usize,
        store: &mut dyn StateStore,
        batch: &BatchInstances<'_>,
        rows: &[u32],
        (group_indices, first_row, group_keys): (&[usize], &[u32], &[&[u8]]),
        direct_allowed: bool,
    ) -> Result<(Vec<ArrayRef>, Vec<u32>)> {
        let n_groups = group_keys.len();
        // Stored states of the touched keys.
        let mut old_groups: Vec<usize> = Vec::new();
        let old_states: Vec<ArrayRef> = {
            let mut old: Vec<&[u8]> = Vec::new();
            for (g, k) in group_keys.iter().enumerate() {
                if let Some(v) = store.get(k) {
                    old_groups.push(g);
                    old.push(v);
                }
            }
            if old.is_empty() {
                Vec::new()
            } else {
                self.decode_states(Some(p), &old)?
            }
        };
        // Merge stored states and update with this partition's rows.
        let sub = arrow::compute::take_record_batch(batch.rows, &UInt32Array::from(rows.to_vec()))?;
        let (new_states, finals) =
            self.accumulate(&old_states, &old_groups, &sub, group_indices, n_groups)?;
        // A new key whose event time is already behind the eviction watermark would be
        // written and removed again in this batch: it is emitted straight away instead
        // (and counted as removed), never touching the store.
        let mut is_old = vec![false; n_groups];
        for g in &old_groups {
            is_old[*g] = true;
        }
        let mut direct: Vec<u32> = Vec::new();
        if let (Some(times), true) = (batch.times, direct_allowed) {
            for g in 0..n_groups {
                let r = first_row[g] as usize;
                if !is_old[g] && times.is_valid(r) && times.value(r) <= batch.evict_us {
                    direct.push(g as u32);
                }
            }
        }
        let mut is_direct = vec![false; n_groups];
        for g in &direct {
            is_direct[*g as usize] = true;
        }
        // Write the new states.
        let state_rows = self.layout.value().encode(&new_states)?;
        for (g, k) in group_keys.iter().enumerate() {
            if !is_direct[g] {
                store.put(k, state_rows.row(g).as_ref());
            }
        }
        Ok((finals, direct))
    }

    /// For each aggregate: merges the stored states of `old_groups` and updates with the `rows`
    /// (row `i` belongs to group `group_of_row[i]`). Returns the new intermediate states (all
    /// aggregates' state fields, in order) and the final values, one per group.
    ///
    /// DataFusion's accumulators rely on a contract of its hash aggregation: a call without a
    /// filter sees at least one row of every group in `0..total_num_groups`
    /// (`NullState::accumulate` then marks all of them as having seen a value, and a group that
    /// saw only nulls would keep the identity: `min` = `i32::MAX`, `bool_and` = true). So each
    /// call here covers every group: the merge gets a state for every group, a new key's being
    /// the empty state (of an accumulator that saw no row), and the update a filter when some
    /// group has no row (the global key in a batch without rows).
    pub(super) fn accumulate(
        &self,
        old_states: &[ArrayRef],
        old_groups: &[usize],
        rows: &RecordBatch,
        group_of_row: &[usize],
        n_groups: usize,
    ) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let n = rows.num_rows();
        if n_groups == 0 {
            // Nothing touched (some accumulators cannot emit zero groups).
            let mut states = Vec::new();
            let mut finals = Vec::new();
            for a in &self.aggs {
                for f in a.expr.state_fields()? {
                    states.push(arrow::array::new_empty_array(f.data_type()));
                }
                finals.push(arrow::array::new_empty_array(a.expr.field().data_type()));
            }
            return Ok((states, finals));
        }
        let ident: Vec<usize> = (0..n_groups).collect();
        // New keys (no stored state) while other keys have one: merged with the empty state,
        // after the stored states (a group may have several: merged session windows).
        let new_keys = if old_groups.is_empty() {
            Vec::new()
        } else {
            groups_without_rows(old_groups, n_groups)
        };
        let (empty_at, merge_groups): (UInt32Array, Vec<usize>) = {
            let at = (0..old_groups.len() as u32)
                .chain(std::iter::repeat_n(old_groups.len() as u32, new_keys.len()));
            let groups = old_groups.iter().chain(&new_keys).copied();
            (at.collect(), groups.collect())
        };
        let all_rows = (!groups_without_rows(group_of_row, n_groups).is_empty())
            .then(|| BooleanArray::from(vec![true; n]));
        let mut new_states: Vec<ArrayRef> = Vec::new();
        let mut finals: Vec<ArrayRef> = Vec::new();
        let mut offset = 0;
        for a in &self.aggs {
            let mut acc = a.accumulator()?;
            let old: &[ArrayRef] = if old_groups.is_empty() {
                &[]
            } else {
                &old_states[offset..offset + a.n_state]
            };
            if new_keys.is_empty() {
                if !old_groups.is_empty() {
                    acc.merge_batch(old, old_groups, n_groups)?;
                }
            } else {
                let empty = a.empty_state(rows)?;
                let with_empty: Vec<ArrayRef> = old
                    .iter()
                    .zip(&empty)
                    .map(|(o, e)| -> Result<ArrayRef> {
                        let both = arrow::compute::concat(&[o.as_ref(), e.as_ref()])?;
                        Ok(take(&both, &empty_at, None)?)
                    })
                    .collect::<Result<_>>()?;
                acc.merge_batch(&with_empty, &merge_groups, n_groups)?;
            }
            let args = a.update_args(rows)?;
            let filter = match a.filter(rows)? {
                Some(f) => Some(f),
                None => all_rows.clone(),
            };
            acc.update_batch(&args, group_of_row, filter.as_ref(), n_groups)?;
            let st = acc.state(EmitTo::All)?;
            let mut fin = a.accumulator()?;
            fin.merge_batch(&st, &ident, n_groups)?;
            finals.push(fin.evaluate(EmitTo::All)?);
            new_states.extend(st);
            offset += a.n_state;
        }
        Ok((new_states, finals))
    }

    /// After the last chunk of a batch larger than one: each partition emits and evicts as one
    /// pass over the whole batch would have (update mode: the final values of the keys its
    /// chunks touched, then eviction; append mode: the evicted keys), from the state.
    pub(super) fn finish_partitions(
        &mut self,
        stores: &mut [&mut dyn StateStore],
        touched: Vec<TouchedKeys>,
        evict_us: i64,
    ) -> Result<Vec<PartitionOutput>> {
        let this = &*self;
        let results = on_threads(
            stores.iter_mut().zip(touched),
            "an aggregation partition thread panicked",
            |p, (store, touched)| {
                let t = Instant::now();
                let mut out = PartitionOutput {
                    updated: touched.len() as u64,
                    ..Default::default()
                };
                match this.mode {
                    OutputMode::Update => {
                        out.rows = this.emit_keys(p, &**store, touched)?;
                        if this.event_time_key.is_some() {
                            out.removed = this.evict_partition(p, &mut **store, evict_us, false)?.1;
                        }
                    }
                    OutputMode::Append => {
                        (out.rows, out.removed) =
                            this.evict_partition(p, &mut **store, evict_us, true)?;
                    }
                    OutputMode::Complete => {}
                }
                out.removals_ms = t.elapsed().as_millis() as i64;
                Ok(out)
            },
        );
        results.into_iter().collect()
    }

    /// The final values of `keys` as they are in partition `p`'s store, as rows (none without
    /// keys).
    fn emit_keys(
        &self,
        p: usize,
        store: &dyn StateStore,
        keys: TouchedKeys,
    ) -> Result<Option<RecordBatch>> {
        if keys.is_empty() {
            return Ok(None);
        }
        let keys: Vec<Vec<u8>> = keys.into_iter().collect();
        let values = keys
            .iter()
            .map(|k| {
                store.get(k).ok_or_else(|| {
                    SluiceError::internal("a key this batch updated is missing from its store")
                })
            })
            .collect::<Result<Vec<&[u8]>>>()?;
        let key_arrays = match self.layout.key().rows() {
            Some(_) => self.decode_keys(Some(p), &keys)?,
            None => vec![],
        };
        let states = self.decode_states(Some(p), &values)?;
        let finals = self.evaluate_states(&states, values.len())?;
        Ok(Some(self.output_batch(key_arrays, finals)?))
    }

    /// Evicts one partition's keys with event time at or before `evict_us` through the store's
    /// time index (a range scan: only the expired keys are read); with `emit`, returns them as
    /// rows. `store` is partition `p`'s.
    pub(super) fn evict_partition(
        &self,
        p: usize,
        store: &mut dyn StateStore,
        evict_us: i64,
        emit: bool,
    ) -> Result<(Option<RecordBatch>, u64)> {
        let (Some(_), Some(_)) = (self.layout.key().rows(), self.event_time_key) else {
            return Ok((None, 0));
        };
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::new();
        for pair in store.scan_by_time(evict_us, true)? {
            store.remove(&pair.key);
            keys.push(pair.key);
            if emit {
                values.push(pair.value);
            }
        }
        let n = keys.len() as u64;
        if !emit || keys.is_empty() {
            return Ok((None, n));
        }
        let keys_out = self.decode_keys(Some(p), &keys)?;
        let states = self.decode_states(Some(p), &values)?;
        let finals = self.evaluate_states(&states, values.len())?;
        Ok((Some(self.output_batch(keys_out, finals)?), n))
    }
}

/// The groups in `0..n_groups` without a row in `group_of_row`.
fn groups_without_rows(group_of_row: &[usize], n_groups: usize) -> Vec<usize> {
    let mut seen = vec![false; n_groups];
    for g in group_of_row {
        if let Some(s) = seen.get_mut(*g) {
            *s = true;
        }
    }
    (0..n_groups).filter(|g| !seen[*g]).collect()
}
