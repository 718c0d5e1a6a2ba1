//! Tests of `remote`.

use super::*;

#[test]
fn the_epoch_moves_on_when_the_workers_change_or_a_batch_runs_again() {
    let mut e = Epoch::default();
    let (ab, a) = (
        vec!["a".to_string(), "b".to_string()],
        vec!["a".to_string()],
    );
    let first = e.of(&ab, 0);
    assert_eq!(e.of(&ab, 1), first, "the same workers, the next batch");
    let lost = e.of(&a, 1);
    assert!(lost > first, "batch 1 again, on fewer workers");
    let back = e.of(&ab, 2);
    assert!(back > lost, "a worker back");
    assert!(e.of(&ab, 2) > back, "batch 2 again on the same workers");
    let now = e.of(&ab, 3);
    assert_eq!(e.of(&ab, 4), now);
}

fn numbered(values: &[i64]) -> RecordBatch {
    let schema = Arc::new(arrow::datatypes::Schema::new(vec![
        arrow::datatypes::Field::new("v", arrow::datatypes::DataType::Int64, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![Arc::new(arrow::array::Int64Array::from(values.to_vec()))],
    )
    .unwrap()
}

fn values(rows: crate::types::RowIter) -> Vec<i64> {
    rows.flat_map(|b| {
        let b = b.unwrap();
        let a = b
            .column(0)
            .as_any()
            .downcast_ref::<arrow::array::Int64Array>();
        a.unwrap().values().to_vec()
    })
    .collect()
}

fn task_rows(items: Vec<Result<(usize, RecordBatch)>>) -> StateTaskRows {
    Box::new(items.into_iter())
}

#[test]
fn a_tasks_rows_split_into_its_inputs_in_either_order() {
    let rows = || {
        task_rows(vec![
            Ok((0, numbered(&[1, 2]))),
            Ok((0, numbered(&[3]))),
            Ok((1, numbered(&[10]))),
            Ok((1, numbered(&[11, 12]))),
        ])
    };
    // In order: input 0 ends where input 1 begins.
    let mut inputs = TaskInputs::split(rows(), 2).into_iter();
    let (left, right) = (inputs.next().unwrap(), inputs.next().unwrap());
    assert_eq!(values(left), vec![1, 2, 3]);
    assert_eq!(values(right), vec![10, 11, 12]);
    // Input 1 first: input 0's rows are held for it.
    let mut inputs = TaskInputs::split(rows(), 2).into_iter();
    let (left, right) = (inputs.next().unwrap(), inputs.next().unwrap());
    assert_eq!(values(right), vec![10, 11, 12]);
    assert_eq!(values(left), vec![1, 2, 3]);
    // An input without rows ends at once.
    let only_right = task_rows(vec![Ok((1, numbered(&[5])))]);
    let mut inputs = TaskInputs::split(only_right, 2).into_iter();
    assert_eq!(values(inputs.next().unwrap()), Vec::<i64>::new());
    assert_eq!(values(inputs.next().unwrap()), vec![5]);
}

#[test]
fn a_tasks_rows_that_break_off_or_go_back_fail_the_input() {
    let broken = task_rows(vec![
        Ok((0, numbered(&[1]))),
        Err(SluiceError::internal(
            "the driver ended them before their end",
        )),
    ]);
    let mut input = TaskInputs::split(broken, 1).remove(0);
    assert!(input.next().unwrap().is_ok());
    let e = input.next().unwrap().unwrap_err();
    assert!(e.to_string().contains("before their end"), "{e}");
    let back = task_rows(vec![Ok((1, numbered(&[1]))), Ok((0, numbered(&[2])))]);
    let mut inputs = TaskInputs::split(back, 2).into_iter();
    let _left = inputs.next().unwrap();
    let mut right = inputs.next().unwrap();
    assert!(right.next().unwrap().is_ok());
    let e = right.next().unwrap().unwrap_err();
    assert!(e.to_string().contains("came after input 1"), "{e}");
}

#[test]
fn every_partition_has_one_owner_and_owners_hold_ranges_in_order() {
    for partitions in [1usize, 2, 5, 7, 200] {
        for tasks in 1..=partitions.min(9) {
            let r = Routing { partitions, tasks };
            let ranges: Vec<Range<usize>> = (0..tasks).map(|t| r.owned(t)).collect();
            let mut next = 0;
            for (t, range) in ranges.iter().enumerate() {
                assert_eq!(range.start, next, "{partitions} partitions, {tasks} tasks");
                assert!(!range.is_empty(), "task {t} owns nothing");
                for p in range.clone() {
                    assert_eq!(r.task_of(p), t);
                }
                next = range.end;
            }
            assert_eq!(next, partitions);
        }
    }
}
