//! Live aggregation state: each state partition holds its groups between batches, each
//! aggregate's state fields as typed columns indexed by a group slot, instead of row-format
//! bytes in the state store read, decoded, merged, encoded and written back every batch.
//!
//! A batch's rows are still aggregated by DataFusion's accumulators, but only over the batch's
//! own groups (`update_batch`, then `state`: one partial state per group); the partial states
//! are merged into the held columns in place (a sum or count adds, a min or max compares). The
//! final values come from DataFusion too (`merge_batch` + `evaluate` over the held states of
//! the groups emitted), so the functions' semantics stay DataFusion's. Eviction pops whole
//! event-time buckets of slots. At the end of the batch only the groups it changed are encoded,
//! column-wise, and staged in the store (`stage_known`, with the slot saying whether the
//! committed version has the key), and the evicted ones that were committed as removals: the
//! delta files, snapshots and state schema are the same as the store-held path writes.
//!
//! The stores are opened `held_by_operator`: they keep no pairs in memory. The held state
//! names the store version it is (the batch's version plus one once the batch ran); a batch
//! that finds its stores at another version (a restart, or a batch run again after a failed
//! commit or sink) rebuilds it from the checkpoint's files (`load_committed`), and a batch that
//! fails part-way leaves it at no version, to be rebuilt.
//!
//! Used when every aggregate's state is made of fields it knows how to merge (`count`, `sum`,
//! `avg` over integers and floats; `min`, `max` over integers, dates and times), with grouping
//! keys, in append or update mode, on the in-memory store kind; every other aggregation keeps
//! its state in the store ([`super::partition`]).

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{make_array, Array, ArrayData, ArrayRef, RecordBatch, StructArray, UInt32Array};
use arrow::buffer::{Buffer, NullBuffer};
use arrow::datatypes::{ArrowNativeType, DataType, Field, Schema};
use datafusion::logical_expr::EmitTo;

use super::keys::{key_event_times, KeyPart};
use super::partition::PartitionOutput;
use super::{AggFn, StreamingAggregate};
use crate::error::{Result, SluiceError};
use crate::operators::stateful::HeldVersion;
use crate::state::StateStore;
use crate::types::OutputMode;
use sluice_common::threads::on_threads;

/// No slot / no local group.
const NONE: u32 = u32::MAX;
/// Pairs decoded at a time while the held state is rebuilt.
const LOAD_CHUNK: usize = 4096;

/// How a held state field takes in another partial state of the same group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Merge {
    Add,
    Min,
    Max,
}

/// How to hold one state field: its type, how it merges, and its value in a group that saw no
/// row (a one-row array).
struct FieldSpec {
    data_type: DataType,
    merge: Merge,
    empty: ArrayRef,
}

/// The held state of every partition of one aggregation.
pub(super) struct LiveAggregation {
    fields: Arc<Vec<FieldSpec>>,
    /// The store version the partitions hold.
    pub(super) version: HeldVersion,
    parts: Vec<LivePartition>,
}

impl LiveAggregation {
    /// The held state for `aggs` over input rows like `rows` (none are read), or `None` when
    /// some aggregate keeps a state field it cannot merge in place.
    pub(super) fn for_aggregates(aggs: &[AggFn], rows: &RecordBatch) -> Result<Option<Self>> {
        let mut fields = Vec::new();
        for a in aggs {
            let name = a.expr.fun().name().to_ascii_lowercase();
            let state = a.expr.state_fields()?;
            let merges: Vec<Merge> = match (name.as_str(), state.len()) {
                ("count", 1) | ("sum", 1) => vec![Merge::Add],
                ("avg", 2) | ("mean", 2) => vec![Merge::Add, Merge::Add],
                ("min", 1) => vec![Merge::Min],
                ("max", 1) => vec![Merge::Max],
                _ => return Ok(None),
            };
            let empties = a.empty_state(rows)?;
            for ((f, merge), e) in state.iter().zip(merges).zip(empties) {
                let dt = f.data_type();
                let ok = match merge {
                    Merge::Add => {
                        matches!(dt, DataType::Int64 | DataType::UInt64 | DataType::Float64)
                    }
                    Merge::Min | Merge::Max => is_ordered_integer(dt),
                };
                if !ok || e.len() != 1 || e.data_type() != dt {
                    return Ok(None);
                }
                fields.push(FieldSpec {
                    data_type: dt.clone(),
                    merge,
                    empty: e,
                });
            }
        }
        Ok(Some(Self {
            fields: Arc::new(fields),
            version: HeldVersion::default(),
            parts: Vec::new(),
        }))
    }
}

/// Types held as integers whose order is their value's.
fn is_ordered_integer(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Date32
            | DataType::Date64
            | DataType::Time32(_)
            | DataType::Time64(_)
            | DataType::Timestamp(_, _)
            | DataType::Duration(_)
    )
}

/// A held state field: one value per slot.
trait LiveColumn: Send + Sync {
    /// A new slot at the end, empty.
    fn push_empty(&mut self);
    /// Slot `slot` (reused) becomes empty.
    fn reset(&mut self, slot: usize);
    /// Merges `partial[i]` into slot `slots[i]`.
    fn merge(&mut self, slots: &[u32], partial: &dyn Array) -> Result<()>;
    /// The values of `slots`, as an array of the field's type.
    fn gather(&self, slots: &[u32]) -> Result<ArrayRef>;
}

/// The arithmetic a held value needs.
trait Native: ArrowNativeType + PartialOrd {
    fn plus(self, other: Self) -> Self;
}

macro_rules! wrapping_native {
    ($($t:ty),*) => {$(
        impl Native for $t {
            fn plus(self, other: Self) -> Self {
                // DataFusion's sum and count add integers wrapping.
                self.wrapping_add(other)
            }
        }
    )*};
}
wrapping_native!(i8, i16, i32, i64, u8, u16, u32, u64);

impl Native for f64 {
    fn plus(self, other: Self) -> Self {
        self + other
    }
}

/// The values of an array of a fixed-width type as `N`s (the caller matched the width).
fn values_of<N: ArrowNativeType>(data: &ArrayData) -> &[N] {
    &data.buffers()[0].typed_data::<N>()[data.offset()..data.offset() + data.len()]
}

struct Column<N: Native> {
    data_type: DataType,
    merge: Merge,
    /// The empty value (`None`: null).
    empty: Option<N>,
    values: Vec<N>,
    valid: Vec<bool>,
}

impl<N: Native> Column<N> {
    fn new(spec: &FieldSpec) -> Self {
        let data = spec.empty.to_data();
        let empty = spec.empty.is_valid(0).then(|| values_of::<N>(&data)[0]);
        Self {
            data_type: spec.data_type.clone(),
            merge: spec.merge,
            empty,
            values: Vec::new(),
            valid: Vec::new(),
        }
    }
}

impl<N: Native> LiveColumn for Column<N> {
    fn push_empty(&mut self) {
        self.values.push(self.empty.unwrap_or_default());
        self.valid.push(self.empty.is_some());
    }

    fn reset(&mut self, slot: usize) {
        self.values[slot] = self.empty.unwrap_or_default();
        self.valid[slot] = self.empty.is_some();
    }

    fn merge(&mut self, slots: &[u32], partial: &dyn Array) -> Result<()> {
        if partial.data_type() != &self.data_type || partial.len() != slots.len() {
            return Err(SluiceError::internal(format!(
                "a partial aggregation state of {} values of {} for {} groups of {}",
                partial.len(),
                partial.data_type(),
                slots.len(),
                self.data_type
            )));
        }
        let data = partial.to_data();
        let values = values_of::<N>(&data);
        let nulls = partial.logical_nulls();
        for (i, (&slot, &v)) in slots.iter().zip(values).enumerate() {
            if nulls.as_ref().is_some_and(|n| n.is_null(i)) {
                continue;
            }
            let s = slot as usize;
            if !self.valid[s] {
                self.values[s] = v;
                self.valid[s] = true;
                continue;
            }
            let held = self.values[s];
            self.values[s] = match self.merge {
                Merge::Add => held.plus(v),
                Merge::Min if v < held => v,
                Merge::Max if v > held => v,
                Merge::Min | Merge::Max => held,
            };
        }
        Ok(())
    }

    fn gather(&self, slots: &[u32]) -> Result<ArrayRef> {
        let values: Vec<N> = slots.iter().map(|s| self.values[*s as usize]).collect();
        let nulls = (!slots.iter().all(|s| self.valid[*s as usize])).then(|| {
            NullBuffer::from(
                slots
                    .iter()
                    .map(|s| self.valid[*s as usize])
                    .collect::<Vec<_>>(),
            )
        });
        let data = ArrayData::builder(self.data_type.clone())
            .len(slots.len())
            .add_buffer(Buffer::from_vec(values))
            .nulls(nulls)
            .build()?;
        Ok(make_array(data))
    }
}

fn new_column(spec: &FieldSpec) -> Result<Box<dyn LiveColumn>> {
    use DataType::*;
    Ok(match &spec.data_type {
        Int8 => Box::new(Column::<i8>::new(spec)),
        Int16 => Box::new(Column::<i16>::new(spec)),
        Int32 | Date32 | Time32(_) => Box::new(Column::<i32>::new(spec)),
        Int64 | Date64 | Time64(_) | Timestamp(_, _) | Duration(_) => {
            Box::new(Column::<i64>::new(spec))
        }
        UInt8 => Box::new(Column::<u8>::new(spec)),
        UInt16 => Box::new(Column::<u16>::new(spec)),
        UInt32 => Box::new(Column::<u32>::new(spec)),
        UInt64 => Box::new(Column::<u64>::new(spec)),
        Float64 => Box::new(Column::<f64>::new(spec)),
        other => {
            return Err(SluiceError::internal(format!(
                "a held aggregation state of type {other}"
            )))
        }
    })
}

/// Hashes a `u64` to itself: the slot index's keys are hashes already.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) | *b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Encoded keys by slot: each key's hash leads to a chain of slots, compared by bytes. A slot
/// freed by eviction is used again.
struct SlotIndex {
    hasher: foldhash::fast::RandomState,
    /// The hash bits used (all but in tests, which make keys collide).
    mask: u64,
    heads: HashMap<u64, u32, BuildHasherDefault<Identity>>,
    keys: Vec<Box<[u8]>>,
    next: Vec<u32>,
    free: Vec<u32>,
}

impl Default for SlotIndex {
    fn default() -> Self {
        Self {
            hasher: Default::default(),
            mask: u64::MAX,
            heads: Default::default(),
            keys: Vec::new(),
            next: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl SlotIndex {
    fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key) & self.mask
    }

    /// `key`'s slot, and whether it is new (then at the end of the slots, or a freed one).
    fn find_or_insert(&mut self, key: &[u8]) -> (u32, bool) {
        let h = self.hash(key);
        let head = self.heads.get(&h).copied().unwrap_or(NONE);
        let mut s = head;
        while s != NONE {
            if *self.keys[s as usize] == *key {
                return (s, false);
            }
            s = self.next[s as usize];
        }
        let slot = match self.free.pop() {
            Some(f) => {
                self.keys[f as usize] = key.into();
                self.next[f as usize] = head;
                f
            }
            None => {
                self.keys.push(key.into());
                self.next.push(head);
                (self.keys.len() - 1) as u32
            }
        };
        self.heads.insert(h, slot);
        (slot, true)
    }

    fn key(&self, slot: u32) -> &[u8] {
        &self.keys[slot as usize]
    }

    /// Frees `slot`; returns its key.
    fn remove(&mut self, slot: u32) -> Box<[u8]> {
        let key = std::mem::take(&mut self.keys[slot as usize]);
        let h = self.hash(&key);
        let after = self.next[slot as usize];
        match self.heads.get(&h).copied() {
            Some(head) if head == slot => {
                if after == NONE {
                    self.heads.remove(&h);
                } else {
                    self.heads.insert(h, after);
                }
            }
            Some(mut s) => {
                while s != NONE {
                    let n = self.next[s as usize];
                    if n == slot {
                        self.next[s as usize] = after;
                        break;
                    }
                    s = n;
                }
            }
            None => {}
        }
        self.next[slot as usize] = NONE;
        self.free.push(slot);
        key
    }
}

/// One partition's held groups.
struct LivePartition {
    slots: SlotIndex,
    /// Slots by their key's event time, to evict whole times at once.
    by_time: BTreeMap<i64, Vec<u32>>,
    columns: Vec<Box<dyn LiveColumn>>,
    /// The slot's key is in the committed version (a removal must be written).
    committed: Vec<bool>,
    /// Slots this batch changed, each once.
    dirty: Vec<u32>,
    is_dirty: Vec<bool>,
    /// Scratch: a slot's group among one chunk's groups.
    local: Vec<u32>,
}

impl LivePartition {
    fn new(fields: &[FieldSpec]) -> Result<Self> {
        Ok(Self {
            slots: SlotIndex::default(),
            by_time: BTreeMap::new(),
            columns: fields.iter().map(new_column).collect::<Result<_>>()?,
            committed: Vec::new(),
            dirty: Vec::new(),
            is_dirty: Vec::new(),
            local: Vec::new(),
        })
    }

    /// `key`'s slot, made (empty, indexed at `time`) when new.
    fn slot(&mut self, key: &[u8], time: Option<i64>) -> (u32, bool) {
        let (slot, new) = self.slots.find_or_insert(key);
        if new {
            let s = slot as usize;
            if s == self.committed.len() {
                for c in &mut self.columns {
                    c.push_empty();
                }
                self.committed.push(false);
                self.is_dirty.push(false);
                self.local.push(NONE);
            } else {
                for c in &mut self.columns {
                    c.reset(s);
                }
                self.committed[s] = false;
            }
            if let Some(t) = time {
                self.by_time.entry(t).or_default().push(slot);
            }
        }
        (slot, new)
    }

    fn gather(&self, slots: &[u32]) -> Result<Vec<ArrayRef>> {
        self.columns.iter().map(|c| c.gather(slots)).collect()
    }

    /// The output rows of `slots`: their keys and final values.
    fn emit(&self, agg: &StreamingAggregate, p: usize, slots: &[u32]) -> Result<RecordBatch> {
        let keys: Vec<&[u8]> = slots.iter().map(|s| self.slots.key(*s)).collect();
        let key_arrays = agg.decode_keys(Some(p), &keys)?;
        let finals = agg.evaluate_states(&self.gather(slots)?, slots.len())?;
        agg.output_batch(key_arrays, finals)
    }

    /// Adds committed pairs (a chunk of them) while the state is rebuilt.
    fn load(
        &mut self,
        agg: &StreamingAggregate,
        p: usize,
        keys: &[Vec<u8>],
        values: &[Vec<u8>],
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let states = agg.decode_states(Some(p), values)?;
        let times = match agg.event_time_key {
            Some(et) => Some(key_event_times(&agg.decode_keys(Some(p), keys)?, et)?),
            None => None,
        };
        let mut slots = Vec::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            let time = times
                .as_ref()
                .and_then(|t| t.is_valid(i).then(|| t.value(i)));
            let (slot, new) = self.slot(k, time);
            if !new {
                // The files' pairs are merged one per key: a key met twice is a bug.
                return Err(SluiceError::internal(format!(
                    "an aggregation key loaded twice into partition {p}"
                )));
            }
            self.committed[slot as usize] = true;
            slots.push(slot);
        }
        for (c, s) in self.columns.iter_mut().zip(&states) {
            c.merge(&slots, s.as_ref())?;
        }
        Ok(())
    }
}

impl StreamingAggregate {
    /// Makes the held state the one of `stores`' version: kept when it is, else rebuilt from
    /// the checkpoint's files, every partition on a thread of its own.
    pub(super) fn live_open(
        &self,
        live: &mut LiveAggregation,
        stores: &mut [&mut dyn StateStore],
    ) -> Result<()> {
        if live.version.is_current(stores, live.parts.len()) {
            return Ok(());
        }
        live.version.clear();
        live.parts.clear();
        let this = self;
        let fields = &live.fields;
        let parts = on_threads(
            stores.iter_mut(),
            "an aggregation partition thread panicked",
            |p, store| {
                let mut part = LivePartition::new(fields)?;
                let (mut keys, mut values) = (Vec::new(), Vec::new());
                store.load_committed(&mut |k, v| {
                    keys.push(k);
                    values.push(v);
                    if keys.len() == LOAD_CHUNK {
                        part.load(this, p, &keys, &values)?;
                        keys.clear();
                        values.clear();
                    }
                    Ok(())
                })?;
                part.load(this, p, &keys, &values)?;
                Ok(part)
            },
        );
        live.parts = parts.into_iter().collect::<Result<_>>()?;
        live.version.built(stores);
        Ok(())
    }

    /// Updates the held groups with one chunk of row instances, each partition on a thread of
    /// its own. The instances are first grouped by their key columns (DataFusion's vectorised
    /// `GroupValues`), so each distinct key of the chunk is encoded, partitioned and looked up
    /// once, not once per instance.
    pub(super) fn live_update(
        &self,
        live: &mut LiveAggregation,
        instances: &RecordBatch,
        key_arrays: &[ArrayRef],
    ) -> Result<i64> {
        let n = instances.num_rows();
        // The distinct keys (`keys`), and each instance's among them (`None`: one per instance).
        let (keys, key_of_row): (Vec<ArrayRef>, Option<Vec<usize>>) =
            match self.distinct_keys(key_arrays)? {
                Some((key_of_row, first)) => {
                    let first = UInt32Array::from(first);
                    let keys = key_arrays
                        .iter()
                        .map(|a| Ok(arrow::compute::take(a, &first, None)?))
                        .collect::<Result<_>>()?;
                    (keys, Some(key_of_row))
                }
                None => (key_arrays.to_vec(), None),
            };
        let n_keys = key_of_row.as_ref().map_or(n, |_| keys[0].len());
        let (key_rows, part_keys, times) = self.split_partitions(n_keys, &keys)?;
        let Some(key_rows) = key_rows.as_ref() else {
            return Err(SluiceError::internal("held aggregation state without keys"));
        };
        // Each key's position in its partition's list, and each partition's instances.
        let mut at = vec![0u32; n_keys];
        for list in &part_keys {
            for (k, key) in list.iter().enumerate() {
                at[*key as usize] = k as u32;
            }
        }
        let part_rows: Vec<Vec<u32>> = match &key_of_row {
            Some(key_of_row) => {
                let mut part_of = vec![0usize; n_keys];
                for (p, list) in part_keys.iter().enumerate() {
                    for key in list {
                        part_of[*key as usize] = p;
                    }
                }
                let mut rows = vec![Vec::new(); part_keys.len()];
                for (r, key) in key_of_row.iter().enumerate() {
                    rows[part_of[*key]].push(r as u32);
                }
                rows
            }
            None => part_keys.clone(),
        };
        let results = on_threads(
            live.parts.iter_mut().zip(part_keys.iter().zip(&part_rows)),
            "an aggregation partition thread panicked",
            |_, (part, (keys, rows))| -> Result<i64> {
                let t = Instant::now();
                if rows.is_empty() {
                    return Ok(0);
                }
                let slots: Vec<u32> = keys
                    .iter()
                    .map(|k| {
                        let k = *k as usize;
                        let time = times
                            .as_ref()
                            .and_then(|t| t.is_valid(k).then(|| t.value(k)));
                        part.slot(key_rows.row(k).data(), time).0
                    })
                    .collect();
                let mut group_of_row = Vec::with_capacity(rows.len());
                let mut groups: Vec<u32> = Vec::new();
                for r in rows {
                    let key = key_of_row.as_ref().map_or(*r as usize, |g| g[*r as usize]);
                    let slot = slots[at[key] as usize];
                    let local = &mut part.local[slot as usize];
                    if *local == NONE {
                        *local = groups.len() as u32;
                        groups.push(slot);
                    }
                    group_of_row.push(*local as usize);
                }
                for s in &groups {
                    let s = *s as usize;
                    part.local[s] = NONE;
                    if !part.is_dirty[s] {
                        part.is_dirty[s] = true;
                        part.dirty.push(s as u32);
                    }
                }
                let sub = arrow::compute::take_record_batch(
                    instances,
                    &UInt32Array::from(rows.to_vec()),
                )?;
                let partials = self.partial_states(&sub, &group_of_row, groups.len())?;
                for (c, s) in part.columns.iter_mut().zip(&partials) {
                    c.merge(&groups, s.as_ref())?;
                }
                Ok(t.elapsed().as_millis() as i64)
            },
        );
        let mut ms = 0;
        for r in results {
            ms += r?;
        }
        Ok(ms)
    }

    /// The partial states of `instances`' groups (by their keys `key_arrays`), every
    /// aggregate's state fields in order, and each group's keys: what a worker that owns the
    /// groups merges ([`Self::live_merge`]).
    pub(super) fn partials(
        &self,
        instances: &RecordBatch,
        key_arrays: &[ArrayRef],
    ) -> Result<(Vec<ArrayRef>, Vec<ArrayRef>)> {
        let n = instances.num_rows();
        let (group_of_row, keys) = match self.distinct_keys(key_arrays)? {
            Some((key_of_row, first)) => {
                let first = UInt32Array::from(first);
                let keys = key_arrays
                    .iter()
                    .map(|a| Ok(arrow::compute::take(a, &first, None)?))
                    .collect::<Result<Vec<_>>>()?;
                (key_of_row, keys)
            }
            None => ((0..n).collect(), key_arrays.to_vec()),
        };
        let n_groups = keys.first().map_or(n, |k| k.len());
        Ok((
            self.partial_states(instances, &group_of_row, n_groups)?,
            keys,
        ))
    }

    /// Merges partial states (`states`, every aggregate's state fields in order, a row per
    /// group of `key_arrays`; a key may come more than once) into the held state, in place.
    /// Returns the milliseconds it took.
    pub(super) fn live_merge(
        &self,
        live: &mut LiveAggregation,
        states: &[ArrayRef],
        key_arrays: &[ArrayRef],
    ) -> Result<i64> {
        let n = key_arrays.first().map_or(0, |k| k.len());
        let (key_rows, part_rows, times) = self.split_partitions(n, key_arrays)?;
        let Some(key_rows) = key_rows.as_ref() else {
            return Err(SluiceError::internal("held aggregation state without keys"));
        };
        let results = on_threads(
            live.parts.iter_mut().zip(&part_rows),
            "an aggregation partition thread panicked",
            |_, (part, rows)| -> Result<i64> {
                let t = Instant::now();
                if rows.is_empty() {
                    return Ok(0);
                }
                let slots: Vec<u32> = rows
                    .iter()
                    .map(|r| {
                        let r = *r as usize;
                        let time = times
                            .as_ref()
                            .and_then(|t| t.is_valid(r).then(|| t.value(r)));
                        part.slot(key_rows.row(r).data(), time).0
                    })
                    .collect();
                for s in &slots {
                    let s = *s as usize;
                    if !part.is_dirty[s] {
                        part.is_dirty[s] = true;
                        part.dirty.push(s as u32);
                    }
                }
                let these = UInt32Array::from(rows.to_vec());
                for (c, s) in part.columns.iter_mut().zip(states) {
                    c.merge(&slots, arrow::compute::take(s, &these, None)?.as_ref())?;
                }
                Ok(t.elapsed().as_millis() as i64)
            },
        );
        let mut ms = 0;
        for r in results {
            ms += r?;
        }
        Ok(ms)
    }

    /// The instances grouped by key: each one's group and each group's first instance, in
    /// order of first appearance; `None` when the key columns are not ones DataFusion's
    /// column-wise group values take (then every instance is encoded). A window key is grouped
    /// by its start (its end follows from it).
    fn distinct_keys(&self, key_arrays: &[ArrayRef]) -> Result<Option<(Vec<usize>, Vec<u32>)>> {
        use datafusion::physical_plan::aggregates::group_values::{
            multi_group_by::supported_schema, new_group_values,
        };
        use datafusion::physical_plan::aggregates::order::GroupOrdering;
        let Some(n) = key_arrays.first().map(|a| a.len()) else {
            return Ok(None);
        };
        let columns: Vec<ArrayRef> = key_arrays
            .iter()
            .zip(&self.keys)
            .map(
                |(a, k)| match (k, a.as_any().downcast_ref::<StructArray>()) {
                    (KeyPart::Window { .. }, Some(w)) if w.null_count() == 0 => w.column(0).clone(),
                    _ => a.clone(),
                },
            )
            .collect();
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .enumerate()
                .map(|(i, c)| Field::new(format!("k{i}"), c.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        if !supported_schema(&schema) {
            return Ok(None);
        }
        let mut values = new_group_values(schema, &GroupOrdering::None)?;
        let mut key_of_row = Vec::with_capacity(n);
        values.intern(&columns, &mut key_of_row)?;
        let mut first = vec![NONE; values.len()];
        for (r, g) in key_of_row.iter().enumerate() {
            if first[*g] == NONE {
                first[*g] = r as u32;
            }
        }
        Ok(Some((key_of_row, first)))
    }

    /// After the batch's last chunk: each partition emits by output mode (update: the groups
    /// the batch changed; append: the evicted ones), evicts the groups whose event time is at
    /// or before `evict_us`, and stages its changes: the changed groups' states, encoded
    /// together, and a removal for each evicted group the committed version has.
    pub(super) fn live_finish(
        &self,
        live: &mut LiveAggregation,
        stores: &mut [&mut dyn StateStore],
        evict_us: i64,
    ) -> Result<Vec<PartitionOutput>> {
        let evicts = self.event_time_key.is_some();
        let results = on_threads(
            live.parts.iter_mut().zip(stores.iter_mut()),
            "an aggregation partition thread panicked",
            |p, (part, store)| -> Result<PartitionOutput> {
                let t = Instant::now();
                let dirty = std::mem::take(&mut part.dirty);
                let mut out = PartitionOutput {
                    updated: dirty.len() as u64,
                    ..Default::default()
                };
                if self.mode == OutputMode::Update && !dirty.is_empty() {
                    out.rows = Some(part.emit(self, p, &dirty)?);
                }
                let mut evicted: Vec<u32> = Vec::new();
                while let Some(first) = part.by_time.first_entry().filter(|_| evicts) {
                    if *first.key() > evict_us {
                        break;
                    }
                    evicted.extend(first.remove());
                }
                if self.mode == OutputMode::Append && !evicted.is_empty() {
                    out.rows = Some(part.emit(self, p, &evicted)?);
                }
                out.removed = evicted.len() as u64;
                for s in &evicted {
                    let key = part.slots.remove(*s);
                    let s = *s as usize;
                    if part.committed[s] {
                        store.stage_known(&key, None, true);
                    }
                    part.committed[s] = false;
                    part.is_dirty[s] = false;
                }
                let changed: Vec<u32> = dirty
                    .into_iter()
                    .filter(|s| part.is_dirty[*s as usize])
                    .collect();
                if !changed.is_empty() {
                    let rows = self.layout.value().encode(&part.gather(&changed)?)?;
                    for (i, s) in changed.iter().enumerate() {
                        let s = *s as usize;
                        store.stage_known(
                            part.slots.key(s as u32),
                            Some(rows.row(i).as_ref()),
                            part.committed[s],
                        );
                        part.committed[s] = true;
                        part.is_dirty[s] = false;
                    }
                }
                out.removals_ms = t.elapsed().as_millis() as i64;
                Ok(out)
            },
        );
        results.into_iter().collect()
    }

    /// The partial state of each of `n_groups` groups over `rows` (row `i` in group
    /// `group_of_row[i]`; every group has a row), every aggregate's state fields in order.
    fn partial_states(
        &self,
        rows: &RecordBatch,
        group_of_row: &[usize],
        n_groups: usize,
    ) -> Result<Vec<ArrayRef>> {
        let mut states = Vec::new();
        for a in &self.aggs {
            let mut acc = a.accumulator()?;
            let args = a.update_args(rows)?;
            let filter = a.filter(rows)?;
            acc.update_batch(&args, group_of_row, filter.as_ref(), n_groups)?;
            states.extend(acc.state(EmitTo::All)?);
        }
        Ok(states)
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
