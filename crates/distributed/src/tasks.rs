//! What a query's batches ran on the workers ([`TaskLog`]): each task's worker and duration,
//! recorded by the driver as it reads the task's rows, handed to the query's progress
//! (`workers`) after each batch.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use sluice::distributed::WorkerTasks;
use sluice::progress::WorkerProgress;

/// The tasks run since the last [`WorkerTasks::take`], by `query/stage/task`.
#[derive(Debug, Default)]
pub(crate) struct TaskLog {
    tasks: Mutex<HashMap<String, (String, Duration)>>,
    /// Stateful tasks recorded, to name each one.
    stateful: std::sync::atomic::AtomicU64,
}

impl TaskLog {
    /// Task `task` of the stage `stage` ran on `worker` (`host:port`) and its rows were read
    /// `after` its first was asked for (a task read in several pieces keeps the longest).
    pub(crate) fn record(&self, stage: &str, task: usize, worker: String, after: Duration) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let entry = tasks
            .entry(format!("{stage}/{task}"))
            .or_insert((worker, Duration::ZERO));
        entry.1 = entry.1.max(after);
    }
}

impl WorkerTasks for TaskLog {
    fn take(&self) -> Vec<WorkerProgress> {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        let mut per: BTreeMap<String, WorkerProgress> = BTreeMap::new();
        for (worker, took) in tasks.into_values() {
            let w = per.entry(worker.clone()).or_insert_with(|| WorkerProgress {
                address: worker,
                ..Default::default()
            });
            w.num_tasks += 1;
            w.task_duration_ms += took.as_millis() as u64;
        }
        per.into_values().collect()
    }

    fn ran(&self, worker: &str, took: Duration) {
        let n = self
            .stateful
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.record("stateful", n as usize, worker.to_string(), took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_are_counted_per_worker_once_each_and_taken_once() {
        let log = TaskLog::default();
        let ms = Duration::from_millis;
        log.record("q/1", 0, "a:1".into(), ms(5));
        log.record("q/1", 0, "a:1".into(), ms(9)); // a second piece of the same task
        log.record("q/1", 1, "b:1".into(), ms(3));
        log.record("q/2", 0, "a:1".into(), ms(4));
        let got = log.take();
        assert_eq!(
            got,
            vec![
                WorkerProgress {
                    address: "a:1".into(),
                    num_tasks: 2,
                    task_duration_ms: 13
                },
                WorkerProgress {
                    address: "b:1".into(),
                    num_tasks: 1,
                    task_duration_ms: 3
                },
            ]
        );
        assert!(log.take().is_empty());
    }
}
