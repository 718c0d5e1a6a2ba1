//! Reading the next batch's input while the current batch runs.
//!
//! A source whose reads are deterministic for a range (the file source: a log entry names its
//! files) can start reading the range it expects next as soon as the current batch's own read
//! has ended, so the next batch's decoding runs while this batch's stateful work, sink and
//! commit do. Nothing is logged or committed ahead: the next batch is still planned, logged and
//! run as before, and it takes the rows read ahead only when its range is the one read (else
//! they are dropped and the range is read as usual), so exactly-once does not change.
//!
//! - [`ReadGate`]: opens once every partition of the current batch's read has ended (or was
//!   dropped); the read ahead waits for it, so it never slows the current batch's own read.
//! - [`read_ahead`]: runs partitions on threads of their own, each at most `ahead_bytes` of
//!   decoded rows ahead of its reader (the memory budget's share, not the batch's size); a
//!   reader dropped stops its thread after the piece it is reading.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use arrow::array::RecordBatch;

use super::RowIter;
use crate::error::{Result, SluiceError};
use crate::sync::MutexExt;

/// Opens when every partition it counts has ended.
#[derive(Debug, Default)]
pub(crate) struct ReadGate {
    open_partitions: Mutex<usize>,
    ended: Condvar,
}

impl ReadGate {
    /// `partitions` counted by the gate: it opens when each has returned its last item or was
    /// dropped (a gate over no partition is open).
    pub(crate) fn over(partitions: Vec<RowIter>) -> (Arc<ReadGate>, Vec<RowIter>) {
        let gate = Arc::new(ReadGate {
            open_partitions: Mutex::new(partitions.len()),
            ended: Condvar::new(),
        });
        let counted = partitions
            .into_iter()
            .map(|rows| {
                Box::new(Counted {
                    rows,
                    gate: Some(gate.clone()),
                }) as RowIter
            })
            .collect();
        (gate, counted)
    }

    fn end_one(&self) {
        let mut open = self.open_partitions.lock_unpoisoned();
        *open = open.saturating_sub(1);
        if *open == 0 {
            self.ended.notify_all();
        }
    }

    fn wait(&self) {
        let mut open = self.open_partitions.lock_unpoisoned();
        while *open > 0 {
            open = self.ended.wait(open).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A partition counted by a [`ReadGate`].
struct Counted {
    rows: RowIter,
    /// Until the partition ended.
    gate: Option<Arc<ReadGate>>,
}

impl Counted {
    fn end(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.end_one();
        }
    }
}

impl Iterator for Counted {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        let next = self.rows.next();
        if next.is_none() {
            self.end();
        }
        next
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.end();
    }
}

/// One partition's rows between its reading thread and its reader.
#[derive(Default)]
struct Queue {
    items: VecDeque<(Result<RecordBatch>, usize)>,
    bytes: usize,
    /// The thread returned the partition's last item (or panicked).
    ended: bool,
    /// The reader was dropped: the thread stops.
    dropped: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// Runs each of `partitions` on a thread of its own once `gate` opens, at most `ahead_bytes` of
/// rows ahead of its reader (and one batch: a batch larger than that is still passed on).
/// Returns the readers, in order: the same items as the partitions, in the same order.
pub(crate) fn read_ahead(
    partitions: Vec<RowIter>,
    gate: Arc<ReadGate>,
    ahead_bytes: usize,
) -> Vec<RowIter> {
    partitions
        .into_iter()
        .map(|rows| {
            let shared = Arc::new(Shared::default());
            let thread_shared = shared.clone();
            let gate = gate.clone();
            let spawned = std::thread::Builder::new()
                .name("sluice-read-ahead".into())
                .spawn(move || produce(rows, &gate, &thread_shared, ahead_bytes));
            if let Err(e) = spawned {
                let mut q = shared.queue.lock_unpoisoned();
                q.items.push_back((
                    Err(SluiceError::internal(format!(
                        "could not start a read-ahead thread: {e}"
                    ))),
                    0,
                ));
                q.ended = true;
            }
            Box::new(Reader { shared }) as RowIter
        })
        .collect()
}

/// The reading thread of one partition.
fn produce(mut rows: RowIter, gate: &ReadGate, shared: &Shared, ahead_bytes: usize) {
    /// Ends the queue however the thread leaves (a panicking read included).
    struct EndOnExit<'a>(&'a Shared);
    impl Drop for EndOnExit<'_> {
        fn drop(&mut self) {
            let mut q = self.0.queue.lock_unpoisoned();
            if std::thread::panicking() {
                q.items.push_back((
                    Err(SluiceError::internal("a read-ahead thread panicked")),
                    0,
                ));
            }
            q.ended = true;
            self.0.changed.notify_all();
        }
    }
    let _end = EndOnExit(shared);
    gate.wait();
    loop {
        if shared.queue.lock_unpoisoned().dropped {
            return;
        }
        let Some(item) = rows.next() else {
            return;
        };
        let bytes = match &item {
            Ok(b) => b.get_array_memory_size(),
            Err(_) => 0,
        };
        let mut q = shared.queue.lock_unpoisoned();
        while q.bytes > 0 && q.bytes + bytes > ahead_bytes && !q.dropped {
            q = shared.changed.wait(q).unwrap_or_else(|p| p.into_inner());
        }
        if q.dropped {
            return;
        }
        q.items.push_back((item, bytes));
        q.bytes += bytes;
        shared.changed.notify_all();
    }
}

/// The reader of one partition read ahead.
struct Reader {
    shared: Arc<Shared>,
}

impl Iterator for Reader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        let mut q = self.shared.queue.lock_unpoisoned();
        loop {
            if let Some((item, bytes)) = q.items.pop_front() {
                q.bytes -= bytes;
                self.shared.changed.notify_all();
                return Some(item);
            }
            if q.ended {
                return None;
            }
            q = self
                .shared
                .changed
                .wait(q)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let mut q = self.shared.queue.lock_unpoisoned();
        q.dropped = true;
        q.items.clear();
        self.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn batch(v: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![v; 1000]))]).unwrap()
    }

    /// A partition of `n` batches that counts how many were read from it.
    fn counting(n: i64, read: Arc<AtomicUsize>) -> RowIter {
        Box::new((0..n).map(move |v| {
            read.fetch_add(1, Ordering::SeqCst);
            Ok(batch(v))
        }))
    }

    fn values(rows: RowIter) -> Vec<i64> {
        rows.map(|b| {
            let b = b.unwrap();
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            a.value(0)
        })
        .collect()
    }

    fn wait_for(read: &AtomicUsize, n: usize) {
        let start = std::time::Instant::now();
        while read.load(Ordering::SeqCst) < n {
            assert!(
                start.elapsed() < std::time::Duration::from_secs(10),
                "only {} of {n} read",
                read.load(Ordering::SeqCst)
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn the_next_read_waits_for_the_current_one_then_stays_within_its_bytes() {
        let current_read = Arc::new(AtomicUsize::new(0));
        let (gate, current) = ReadGate::over(vec![
            counting(3, current_read.clone()),
            counting(2, current_read.clone()),
        ]);
        let next_read = Arc::new(AtomicUsize::new(0));
        let one = batch(0).get_array_memory_size();
        let mut next = read_ahead(
            vec![
                counting(20, next_read.clone()),
                counting(5, next_read.clone()),
            ],
            gate,
            3 * one,
        );
        // Nothing of the next batch is read while the current one reads.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(next_read.load(Ordering::SeqCst), 0);
        let mut current = current.into_iter();
        assert_eq!(values(current.next().unwrap()), vec![0, 1, 2]);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            next_read.load(Ordering::SeqCst),
            0,
            "one partition still reads"
        );
        // The last partition dropped unread also ends the current read.
        drop(current);
        // Each partition then reads up to its bytes ahead (3 batches queued, and the one read
        // after them waiting for room) and waits.
        wait_for(&next_read, 4 + 4);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(next_read.load(Ordering::SeqCst), 8);
        // Every row, in order.
        let second = next.pop().unwrap();
        let first = next.pop().unwrap();
        assert_eq!(values(first), (0..20).collect::<Vec<_>>());
        assert_eq!(values(second), (0..5).collect::<Vec<_>>());
    }

    #[test]
    fn errors_pass_through_and_a_dropped_reader_stops_its_thread() {
        let (gate, none) = ReadGate::over(vec![]);
        assert!(none.is_empty());
        let failing: RowIter =
            Box::new(vec![Ok(batch(1)), Err(SluiceError::internal("boom"))].into_iter());
        let mut readers = read_ahead(vec![failing], gate.clone(), 1);
        let mut r = readers.pop().unwrap();
        assert!(r.next().unwrap().is_ok());
        assert!(r.next().unwrap().unwrap_err().to_string().contains("boom"));
        assert!(r.next().is_none());
        // A reader dropped after one batch: its thread reads at most one more and stops.
        let read = Arc::new(AtomicUsize::new(0));
        let mut readers = read_ahead(vec![counting(1000, read.clone())], gate, 1);
        let mut r = readers.pop().unwrap();
        assert!(r.next().unwrap().is_ok());
        drop(r);
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            read.load(Ordering::SeqCst) <= 3,
            "{}",
            read.load(Ordering::SeqCst)
        );
    }

    #[test]
    fn a_panicking_read_is_an_error_not_a_hang() {
        let (gate, _) = ReadGate::over(vec![]);
        let panics: RowIter = Box::new((0..2).map(|i| {
            if i == 1 {
                panic!("a decoder bug");
            }
            Ok(batch(i))
        }));
        let mut r = read_ahead(vec![panics], gate, usize::MAX).pop().unwrap();
        assert!(r.next().unwrap().is_ok());
        let e = r.next().unwrap().unwrap_err();
        assert!(e.to_string().contains("panicked"), "{e}");
        assert!(r.next().is_none());
    }
}
