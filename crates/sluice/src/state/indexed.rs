//! Time-indexed keyed state: an in-memory view of a state store's entries ordered by an event
//! time, so that expiring everything behind the watermark touches only what expired instead of
//! scanning (and decoding) the whole state every batch. In the spirit of Arroyo's
//! `expiring_time_key_map` and differential-dataflow's arrangements, and like them usable outside
//! the operator that writes the state.
//!
//! Two parts:
//! - [`TimeIndex<T>`]: entries (a state key, or a slot of an operator's own rows) by time. An
//!   entry goes in once and comes out once, when [`TimeIndex::expire`] passes its time; entries
//!   of one time come out in the order they went in.
//! - [`Versioned<I>`]: which state version an index describes. A store holds one version per
//!   batch; an index is built with one scan of the store when the batch's version is not the one
//!   it describes (the first batch of a run, or a batch replayed after a failure), and is then
//!   kept in step with the store by the operator, batch by batch.
//!
//! Operators whose state is keyed by time (aggregation by window end, deduplication by expiry,
//! `flatMapGroupsWithState` by timeout) use the state store's own time index instead
//! (`StateStore::scan_by_time`), which lives where the state does, on disk for the on-disk
//! provider; these in-memory indexes serve the operators whose rows are indexed apart from the
//! store's keys (the stream-stream join, session windows).
//!
//! Cost: an entry costs its item plus one B-tree slot; entries of the same time share the slot
//! (the first in place, later ones in one vector), so a unique time allocates nothing beyond the
//! tree and a shared time (a window end) one growing vector. Expiring is `O(log n)` plus the
//! entries taken out.

use std::collections::btree_map::{self, BTreeMap, Entry};

/// The entries of one time: the first in place, later ones in a vector.
#[derive(Debug)]
enum Bucket<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> Bucket<T> {
    fn push(self, item: T) -> Self {
        match self {
            Bucket::One(first) => Bucket::Many(vec![first, item]),
            Bucket::Many(mut items) => {
                items.push(item);
                Bucket::Many(items)
            }
        }
    }
}

/// Entries ordered by a time (µs); see the [module docs](self).
#[derive(Debug)]
pub(crate) struct TimeIndex<T> {
    by_time: BTreeMap<i64, Bucket<T>>,
}

impl<T> Default for TimeIndex<T> {
    fn default() -> Self {
        Self {
            by_time: BTreeMap::new(),
        }
    }
}

impl<T> TimeIndex<T> {
    /// Adds `item` at `time`, after the entries already at that time.
    pub(crate) fn insert(&mut self, time: i64, item: T) {
        match self.by_time.entry(time) {
            Entry::Vacant(v) => {
                v.insert(Bucket::One(item));
            }
            Entry::Occupied(mut o) => {
                let slot = o.get_mut();
                let bucket = std::mem::replace(slot, Bucket::Many(Vec::new()));
                *slot = bucket.push(item);
            }
        }
    }

    /// Takes out every entry whose time is before `time` (or at it, when `inclusive`), in time
    /// order and, within one time, in insertion order. Only the expired range is touched.
    pub(crate) fn expire(&mut self, time: i64, inclusive: bool) -> Expired<T> {
        let first_kept = if inclusive {
            time.checked_add(1)
        } else {
            Some(time)
        };
        let expired = match first_kept {
            Some(at) => {
                let kept = self.by_time.split_off(&at);
                std::mem::replace(&mut self.by_time, kept)
            }
            // Everything is at or before `i64::MAX`.
            None => std::mem::take(&mut self.by_time),
        };
        Expired {
            buckets: expired.into_values(),
            current: None,
        }
    }

    /// Removes the first entry at `time` that `pred` accepts (an entry whose state key went
    /// before its time came); returns whether there was one.
    pub(crate) fn remove(&mut self, time: i64, mut pred: impl FnMut(&T) -> bool) -> bool {
        let Entry::Occupied(mut o) = self.by_time.entry(time) else {
            return false;
        };
        let emptied = match o.get_mut() {
            Bucket::One(item) => {
                if !pred(item) {
                    return false;
                }
                true
            }
            Bucket::Many(items) => {
                let Some(at) = items.iter().position(&mut pred) else {
                    return false;
                };
                items.remove(at);
                items.is_empty()
            }
        };
        if emptied {
            o.remove();
        }
        true
    }

    /// Whether the index holds no entry.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.by_time.is_empty()
    }
}

/// The entries [`TimeIndex::expire`] took out, in order.
pub(crate) struct Expired<T> {
    buckets: btree_map::IntoValues<i64, Bucket<T>>,
    current: Option<std::vec::IntoIter<T>>,
}

impl<T> Iterator for Expired<T> {
    type Item = T;

    fn size_hint(&self) -> (usize, Option<usize>) {
        let current = self.current.as_ref().map_or(0, ExactSizeIterator::len);
        // Every remaining time holds at least one entry.
        (current + self.buckets.len(), None)
    }

    fn next(&mut self) -> Option<T> {
        loop {
            if let Some(item) = self.current.as_mut().and_then(Iterator::next) {
                return Some(item);
            }
            match self.buckets.next()? {
                Bucket::One(item) => {
                    self.current = None;
                    return Some(item);
                }
                Bucket::Many(items) => self.current = Some(items.into_iter()),
            }
        }
    }
}

/// An in-memory index and the state version it describes; see the [module docs](self).
///
/// The protocol, per batch that opens its stores at version `v` and commits `v + 1`:
/// [`begin(v)`](Versioned::begin) says whether the index describes `v` (when it does not, the
/// operator MUST rebuild it from the stores before using it), the operator keeps the index in
/// step with every change it makes to the stores, and [`finish(v + 1)`](Versioned::finish) says
/// that the index describes the state the batch leaves behind. A batch that fails between the two
/// leaves the index describing no version, so the next batch rebuilds it; a batch whose commit
/// fails after `finish` is replayed at version `v`, which the index does not describe either.
#[derive(Debug, Default)]
pub(crate) struct Versioned<I> {
    index: I,
    version: Option<u64>,
}

impl<I> Versioned<I> {
    /// `index`, describing no version yet.
    #[cfg(test)]
    pub(crate) fn new(index: I) -> Self {
        Self {
            index,
            version: None,
        }
    }

    /// Starts a batch at state version `version`: true when the index describes it. Until
    /// [`Versioned::finish`], the index describes no version.
    pub(crate) fn begin(&mut self, version: u64) -> bool {
        self.version.take() == Some(version)
    }

    /// Ends a batch: the index now describes state version `version`.
    pub(crate) fn finish(&mut self, version: u64) {
        self.version = Some(version);
    }

    /// The index.
    pub(crate) fn get(&self) -> &I {
        &self.index
    }

    /// The index, to keep in step with the stores.
    pub(crate) fn get_mut(&mut self) -> &mut I {
        &mut self.index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_takes_the_expired_range_in_time_then_insertion_order() {
        let mut ix = TimeIndex::default();
        for (t, v) in [(5, "a"), (3, "b"), (5, "c"), (9, "d"), (3, "e"), (5, "f")] {
            ix.insert(t, v);
        }
        assert_eq!(ix.expire(2, true).collect::<Vec<_>>(), Vec::<&str>::new());
        assert_eq!(ix.expire(5, false).collect::<Vec<_>>(), ["b", "e"]);
        assert_eq!(ix.expire(5, true).collect::<Vec<_>>(), ["a", "c", "f"]);
        assert!(!ix.is_empty());
        assert_eq!(ix.expire(i64::MAX, true).collect::<Vec<_>>(), ["d"]);
        assert!(ix.is_empty());
        for (t, v) in [(1, "p"), (1, "q"), (1, "r"), (2, "s")] {
            ix.insert(t, v);
        }
        assert!(ix.remove(1, |v| *v == "q"));
        assert!(!ix.remove(1, |v| *v == "q"));
        assert!(ix.remove(2, |v| *v == "s"));
        assert!(!ix.remove(3, |_| true));
        assert_eq!(ix.expire(2, true).collect::<Vec<_>>(), ["p", "r"]);
        assert!(ix.is_empty());
        ix.insert(i64::MAX, "z");
        ix.insert(i64::MIN, "y");
        assert_eq!(ix.expire(i64::MAX, false).collect::<Vec<_>>(), ["y"]);
        assert_eq!(ix.expire(i64::MAX, true).collect::<Vec<_>>(), ["z"]);
    }

    #[test]
    fn an_index_describes_a_version_only_between_batches_that_finished() {
        let mut v = Versioned::new(0u8);
        assert!(!v.begin(0), "a new index describes no version");
        v.finish(1);
        assert!(v.begin(1));
        // A batch that fails before `finish` leaves no version described.
        assert!(!v.begin(2));
        v.finish(2);
        assert!(!v.begin(1), "a replayed batch rebuilds");
    }
}
