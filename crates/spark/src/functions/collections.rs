//! Spark's array and map functions that DataFusion lacks or defines differently:
//! `sort_array` (nulls first ascending, last descending), `element_at` / `try_element_at` /
//! `get` (1-based, negative from the end, 0-based), `array_append` / `array_prepend` (a null
//! array stays null), `array_remove` (every occurrence), `array_position` (BIGINT),
//! `array_size`, `map_contains_key`, `sequence` (numbers, dates and timestamps with an interval
//! step), and `reverse` / `concat` of arrays next to the string ones.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, ListArray};
use arrow::buffer::OffsetBuffer;
use arrow::compute::SortOptions;
use arrow::datatypes::{DataType, Field, FieldRef, IntervalMonthDayNano, TimeUnit};
use chrono::{Months, NaiveDate};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::type_coercion::binary::type_union_resolution;
use datafusion::logical_expr::ScalarUDF;

use super::rowwise::{spark_err, Dispatch, RowFn};

const TS_US: DataType = DataType::Timestamp(TimeUnit::Microsecond, None);

fn list_field(t: &DataType) -> Option<&FieldRef> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Some(f),
        _ => None,
    }
}

fn is_list(t: &DataType) -> bool {
    list_field(t).is_some()
}

fn map_kv(t: &DataType) -> Option<(DataType, DataType)> {
    match t {
        DataType::Map(f, _) => match f.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => {
                Some((kv[0].data_type().clone(), kv[1].data_type().clone()))
            }
            _ => None,
        },
        _ => None,
    }
}

/// The elements of a non-null array value.
fn values(v: &ScalarValue) -> Option<ArrayRef> {
    match v {
        ScalarValue::List(a) if !a.is_null(0) => Some(a.value(0)),
        ScalarValue::LargeList(a) if !a.is_null(0) => Some(a.value(0)),
        ScalarValue::FixedSizeList(a) if !a.is_null(0) => Some(a.value(0)),
        _ => None,
    }
}

/// The (keys, values) of a non-null map value.
fn entries(v: &ScalarValue) -> Option<(ArrayRef, ArrayRef)> {
    match v {
        ScalarValue::Map(m) if !m.is_null(0) => {
            let e = m.value(0);
            Some((e.column(0).clone(), e.column(1).clone()))
        }
        _ => None,
    }
}

/// An array value of type `ret` (a LIST) holding `values`.
fn list_of(ret: &DataType, values: ArrayRef) -> DfResult<ScalarValue> {
    let field = match ret {
        DataType::List(f) => f.clone(),
        other => {
            return Err(spark_err(
                crate::error::class::INTERNAL_ERROR,
                format!("{other} is not a list"),
            ))
        }
    };
    let values = if values.data_type() != field.data_type() {
        arrow::compute::cast(&values, field.data_type())?
    } else {
        values
    };
    let offsets = OffsetBuffer::from_lengths([values.len()]);
    Ok(ScalarValue::List(Arc::new(ListArray::new(
        field, offsets, values, None,
    ))))
}

fn list_type(element: DataType) -> DataType {
    DataType::List(Arc::new(Field::new_list_field(element, true)))
}

/// One type for two element types (Spark's widening), the first when there is none.
fn unify(a: &DataType, b: &DataType) -> DataType {
    match (a, b) {
        (a, b) if a == b => a.clone(),
        (DataType::Null, t) | (t, DataType::Null) => t.clone(),
        (a, b) => type_union_resolution(&[a.clone(), b.clone()]).unwrap_or_else(|| a.clone()),
    }
}

fn usage(name: &str, what: &str) -> datafusion::error::DataFusionError {
    spark_err(
        crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
        format!("{name} takes {what}"),
    )
}

fn array_arg(name: &str, t: &DataType) -> DfResult<DataType> {
    match t {
        DataType::Null => Ok(list_type(DataType::Null)),
        t => match list_field(t) {
            Some(f) => Ok(list_type(f.data_type().clone())),
            None => Err(usage(name, "an ARRAY as its first argument")),
        },
    }
}

fn element_of(t: &DataType) -> DataType {
    list_field(t)
        .map(|f| f.data_type().clone())
        .unwrap_or(DataType::Null)
}

fn scalar_at(a: &ArrayRef, i: usize) -> DfResult<ScalarValue> {
    ScalarValue::try_from_array(a, i)
}

// ---- coercions and result types ----

fn c_array_bool(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [a] => Ok(vec![array_arg(name, a)?]),
        [a, _] => Ok(vec![array_arg(name, a)?, DataType::Boolean]),
        _ => Err(usage(name, "(array[, ascendingOrder])")),
    }
}

fn c_array(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [a] => Ok(vec![array_arg(name, a)?]),
        _ => Err(usage(name, "one ARRAY")),
    }
}

/// `(array, element)`: both to one element type.
fn c_array_elem(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [a, e] => {
            let arr = array_arg(name, a)?;
            let el = unify(&element_of(&arr), e);
            Ok(vec![list_type(el.clone()), el])
        }
        _ => Err(usage(name, "(array, element)")),
    }
}

/// `(array, INT)` or `(map, key)`.
fn c_index(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [m, k] if map_kv(m).is_some() => {
            let (kt, _) = map_kv(m).unwrap_or((DataType::Null, DataType::Null));
            let _ = k;
            Ok(vec![m.clone(), kt])
        }
        [a, k] if k.is_integer() || k.is_null() => Ok(vec![array_arg(name, a)?, DataType::Int32]),
        _ => Err(usage(name, "(array, index) or (map, key)")),
    }
}

fn c_map_key(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [m, _] => match map_kv(m) {
            Some((k, _)) => Ok(vec![m.clone(), k]),
            None => Err(usage(name, "(map, key)")),
        },
        _ => Err(usage(name, "(map, key)")),
    }
}

/// `concat` of arrays: every argument to one array type.
fn c_arrays(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    let mut el = DataType::Null;
    for a in t {
        el = unify(&el, &element_of(&array_arg(name, a)?));
    }
    Ok(vec![list_type(el); t.len()])
}

fn c_sequence(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    let (a, b) = match t {
        [a, b] | [a, b, _] => (a, b),
        _ => return Err(usage(name, "(start, stop[, step])")),
    };
    let bound = match (a, b) {
        (a, b) if a.is_integer() && b.is_integer() => DataType::Int64,
        (DataType::Date32, DataType::Date32) => DataType::Date32,
        (
            DataType::Date32 | DataType::Timestamp(_, _),
            DataType::Date32 | DataType::Timestamp(_, _),
        ) => TS_US,
        _ => {
            return Err(usage(
                name,
                "integral, DATE or TIMESTAMP start and stop of one type",
            ))
        }
    };
    let mut out = vec![bound.clone(), bound.clone()];
    if let Some(step) = t.get(2) {
        out.push(match (&bound, step) {
            (DataType::Int64, s) if s.is_integer() || s.is_null() => DataType::Int64,
            (DataType::Int64, _) => return Err(usage(name, "an integral step for numbers")),
            (_, DataType::Interval(_)) => step.clone(),
            _ => return Err(usage(name, "an INTERVAL step for dates and timestamps")),
        });
    }
    Ok(out)
}

fn r_first(t: &[DataType]) -> DfResult<DataType> {
    Ok(t[0].clone())
}
fn r_bool(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Boolean)
}
fn r_i32(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Int32)
}
fn r_i64(_: &[DataType]) -> DfResult<DataType> {
    Ok(DataType::Int64)
}
fn r_element(t: &[DataType]) -> DfResult<DataType> {
    Ok(match map_kv(&t[0]) {
        Some((_, v)) => v,
        None => element_of(&t[0]),
    })
}
fn r_list_of_first(t: &[DataType]) -> DfResult<DataType> {
    Ok(list_type(t[0].clone()))
}

// ---- the functions ----

fn sort_array(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let Some(v) = values(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    let asc = match a.get(1) {
        Some(ScalarValue::Boolean(Some(b))) => *b,
        Some(ScalarValue::Boolean(None)) => {
            return Err(usage("sort_array", "a non-null ascendingOrder"))
        }
        _ => true,
    };
    let opts = SortOptions {
        descending: !asc,
        nulls_first: asc,
    };
    let idx = arrow::compute::sort_to_indices(&v, Some(opts), None)?;
    list_of(ret, arrow::compute::take(&v, &idx, None)?)
}

/// The 0-based position of a 1-based Spark index (negative: from the end), if in range.
fn position(len: usize, i: i32) -> Option<usize> {
    let len = len as i64;
    let i = i as i64;
    let p = if i > 0 { i - 1 } else { len + i };
    (0..len).contains(&p).then_some(p as usize)
}

fn element_at_impl(a: &[ScalarValue], ret: &DataType, try_: bool) -> DfResult<ScalarValue> {
    if let Some((k, v)) = entries(&a[0]) {
        if a[1].is_null() {
            return ScalarValue::try_from(ret);
        }
        for j in 0..k.len() {
            if scalar_at(&k, j)? == a[1] {
                return scalar_at(&v, j);
            }
        }
        return ScalarValue::try_from(ret);
    }
    let (Some(v), ScalarValue::Int32(Some(i))) = (values(&a[0]), &a[1]) else {
        return ScalarValue::try_from(ret);
    };
    if *i == 0 {
        if try_ {
            return ScalarValue::try_from(ret);
        }
        return Err(spark_err(
            crate::error::class::INVALID_INDEX_OF_ZERO,
            "The index 0 is invalid. An index shall be either < 0 or > 0 (the first element \
             has index 1)."
                .into(),
        ));
    }
    match position(v.len(), *i) {
        Some(p) => scalar_at(&v, p),
        None => ScalarValue::try_from(ret),
    }
}

fn element_at(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    element_at_impl(a, ret, false)
}
fn try_element_at(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    element_at_impl(a, ret, true)
}

fn get(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let (Some(v), ScalarValue::Int32(Some(i))) = (values(&a[0]), &a[1]) else {
        return ScalarValue::try_from(ret);
    };
    if *i < 0 || *i as usize >= v.len() {
        return ScalarValue::try_from(ret);
    }
    scalar_at(&v, *i as usize)
}

fn with_element(a: &[ScalarValue], ret: &DataType, front: bool) -> DfResult<ScalarValue> {
    let Some(v) = values(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    let e = a[1].to_array_of_size(1)?;
    let e = if e.data_type() != v.data_type() {
        arrow::compute::cast(&e, v.data_type())?
    } else {
        e
    };
    let parts: [&dyn Array; 2] = if front { [&e, &v] } else { [&v, &e] };
    list_of(ret, arrow::compute::concat(&parts)?)
}

fn array_append(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    with_element(a, ret, false)
}
fn array_prepend(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    with_element(a, ret, true)
}

fn array_remove(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let Some(v) = values(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    if a[1].is_null() {
        return ScalarValue::try_from(ret);
    }
    let mut keep = Vec::with_capacity(v.len());
    for j in 0..v.len() {
        keep.push(v.is_null(j) || scalar_at(&v, j)? != a[1]);
    }
    let kept = arrow::compute::filter(&v, &arrow::array::BooleanArray::from(keep))?;
    list_of(ret, kept)
}

fn array_position(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let Some(v) = values(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    if a[1].is_null() {
        return ScalarValue::try_from(ret);
    }
    for j in 0..v.len() {
        if !v.is_null(j) && scalar_at(&v, j)? == a[1] {
            return Ok(ScalarValue::Int64(Some(j as i64 + 1)));
        }
    }
    Ok(ScalarValue::Int64(Some(0)))
}

fn array_size(a: &[ScalarValue], _ret: &DataType) -> DfResult<ScalarValue> {
    Ok(ScalarValue::Int32(values(&a[0]).map(|v| v.len() as i32)))
}

fn map_contains_key(a: &[ScalarValue], _ret: &DataType) -> DfResult<ScalarValue> {
    let Some((k, _)) = entries(&a[0]) else {
        return Ok(ScalarValue::Boolean(None));
    };
    if a[1].is_null() {
        return Ok(ScalarValue::Boolean(None));
    }
    for j in 0..k.len() {
        if scalar_at(&k, j)? == a[1] {
            return Ok(ScalarValue::Boolean(Some(true)));
        }
    }
    Ok(ScalarValue::Boolean(Some(false)))
}

fn reverse(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let Some(v) = values(&a[0]) else {
        return ScalarValue::try_from(ret);
    };
    let idx = arrow::array::UInt32Array::from_iter_values((0..v.len() as u32).rev());
    list_of(ret, arrow::compute::take(&v, &idx, None)?)
}

fn concat_arrays(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let mut parts = Vec::with_capacity(a.len());
    for x in a {
        match values(x) {
            Some(v) => parts.push(v),
            None => return ScalarValue::try_from(ret),
        }
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref()).collect();
    if refs.is_empty() {
        return list_of(ret, arrow::array::new_empty_array(&element_of(ret)));
    }
    list_of(ret, arrow::compute::concat(&refs)?)
}

/// Spark's limit on the length of a generated array.
const MAX_SEQUENCE: usize = 2_147_483_632;

fn too_long() -> datafusion::error::DataFusionError {
    spark_err(
        crate::error::class::COLLECTION_SIZE_LIMIT_EXCEEDED_PARAMETER,
        format!("sequence: the result would have more than {MAX_SEQUENCE} elements"),
    )
}

fn bad_bounds() -> datafusion::error::DataFusionError {
    spark_err(
        crate::error::class::INVALID_PARAMETER_VALUE_SEQUENCE_WRONG_INPUT_TYPES,
        "sequence: illegal sequence boundaries: the step must move from start towards stop \
         (a step of 0 only when start equals stop)"
            .into(),
    )
}

fn sequence(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    if a.iter().any(|v| v.is_null()) {
        return ScalarValue::try_from(ret);
    }
    match (&a[0], &a[1]) {
        (ScalarValue::Int64(Some(s)), ScalarValue::Int64(Some(e))) => {
            let step = match a.get(2) {
                Some(ScalarValue::Int64(Some(st))) => *st,
                _ => {
                    if s <= e {
                        1
                    } else {
                        -1
                    }
                }
            };
            if (step == 0 && s != e) || (step > 0 && s > e) || (step < 0 && s < e) {
                return Err(bad_bounds());
            }
            let n = if step == 0 {
                1
            } else {
                ((*e as i128 - *s as i128) / step as i128 + 1) as u128
            };
            if n > MAX_SEQUENCE as u128 {
                return Err(too_long());
            }
            let vals: Vec<i64> = (0..n as i64).map(|i| s + i * step).collect();
            list_of(ret, Arc::new(arrow::array::Int64Array::from(vals)))
        }
        _ => time_sequence(a, ret),
    }
}

/// A step as (months, days, microseconds).
fn step_parts(v: Option<&ScalarValue>) -> DfResult<(i32, i32, i64)> {
    Ok(match v {
        None => (0, 1, 0),
        Some(ScalarValue::IntervalYearMonth(Some(m))) => (*m, 0, 0),
        Some(ScalarValue::IntervalDayTime(Some(d))) => (0, d.days, d.milliseconds as i64 * 1000),
        Some(ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano {
            months,
            days,
            nanoseconds,
        }))) => (*months, *days, nanoseconds / 1000),
        Some(other) => {
            return Err(usage(
                "sequence",
                &format!("an INTERVAL step, not {}", other.data_type()),
            ))
        }
    })
}

fn add_months(d: chrono::NaiveDateTime, months: i64) -> Option<chrono::NaiveDateTime> {
    if months >= 0 {
        d.checked_add_months(Months::new(u32::try_from(months).ok()?))
    } else {
        d.checked_sub_months(Months::new(u32::try_from(-months).ok()?))
    }
}

fn time_sequence(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .ok_or_else(|| spark_err(crate::error::class::INTERNAL_ERROR, "epoch".into()))?;
    let to_dt = |v: &ScalarValue| -> Option<chrono::NaiveDateTime> {
        match v {
            ScalarValue::Date32(Some(d)) => {
                epoch.checked_add_signed(chrono::Duration::days(*d as i64))
            }
            ScalarValue::TimestampMicrosecond(Some(us), _) => {
                epoch.checked_add_signed(chrono::Duration::microseconds(*us))
            }
            _ => None,
        }
    };
    let dates = matches!(a[0], ScalarValue::Date32(_));
    let (Some(start), Some(stop)) = (to_dt(&a[0]), to_dt(&a[1])) else {
        return ScalarValue::try_from(ret);
    };
    let (months, days, micros) = step_parts(a.get(2))?;
    let forward = start <= stop;
    let approx = months as i64 * 31 * 86_400_000_000 + days as i64 * 86_400_000_000 + micros;
    if a.get(2).is_none() && !forward {
        return time_sequence(
            &[
                a[0].clone(),
                a[1].clone(),
                ScalarValue::new_interval_mdn(0, -1, 0),
            ],
            ret,
        );
    }
    if (approx == 0 && start != stop)
        || (approx > 0 && !forward && start != stop)
        || (approx < 0 && forward && start != stop)
    {
        return Err(bad_bounds());
    }
    let mut out: Vec<ScalarValue> = Vec::new();
    let mut i: i64 = 0;
    loop {
        let t = add_months(start, months as i64 * i)
            .and_then(|t| t.checked_add_signed(chrono::Duration::days(days as i64 * i)))
            .and_then(|t| t.checked_add_signed(chrono::Duration::microseconds(micros * i)));
        let Some(t) = t else { break };
        if (approx >= 0 && t > stop) || (approx < 0 && t < stop) {
            break;
        }
        let since = t - epoch;
        out.push(if dates {
            ScalarValue::Date32(Some(since.num_days() as i32))
        } else {
            ScalarValue::TimestampMicrosecond(since.num_microseconds(), None)
        });
        if out.len() > MAX_SEQUENCE {
            return Err(too_long());
        }
        if approx == 0 {
            break;
        }
        i += 1;
    }
    let el = element_of(ret);
    let arr = if out.is_empty() {
        arrow::array::new_empty_array(&el)
    } else {
        ScalarValue::iter_to_array(out)?
    };
    list_of(ret, arr)
}

fn c_maps(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    let first = t
        .iter()
        .find(|x| !x.is_null())
        .cloned()
        .ok_or_else(|| usage(name, "MAPs"))?;
    if map_kv(&first).is_none() || t.iter().any(|x| !x.is_null() && *x != first) {
        return Err(usage(name, "MAPs of one key and value type"));
    }
    Ok(vec![first; t.len()])
}

fn map_concat(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let DataType::Map(field, sorted) = ret else {
        return Err(usage("map_concat", "MAPs"));
    };
    let mut parts: Vec<ArrayRef> = Vec::with_capacity(a.len());
    for m in a {
        match m {
            ScalarValue::Map(m) if !m.is_null(0) => parts.push(Arc::new(m.value(0))),
            _ => return ScalarValue::try_from(ret),
        }
    }
    let refs: Vec<&dyn Array> = parts.iter().map(|p| p.as_ref()).collect();
    let all = if refs.is_empty() {
        arrow::array::new_empty_array(field.data_type())
    } else {
        arrow::compute::concat(&refs)?
    };
    let entries = arrow::array::AsArray::as_struct(&all).clone();
    let keys = entries.column(0);
    let mut seen: Vec<ScalarValue> = Vec::with_capacity(keys.len());
    for j in 0..keys.len() {
        let k = scalar_at(keys, j)?;
        if seen.contains(&k) {
            return Err(spark_err(
                crate::error::class::DUPLICATED_MAP_KEY,
                format!(
                    "Duplicate map key {k} was found, please check the input data. To remove                      duplicated keys, set spark.sql.mapKeyDedupPolicy to LAST_WIN (not                      supported by Sluice yet) or make the keys distinct."
                ),
            ));
        }
        seen.push(k);
    }
    let offsets = OffsetBuffer::from_lengths([entries.len()]);
    let map = arrow::array::MapArray::try_new(field.clone(), offsets, entries, None, *sorted)?;
    Ok(ScalarValue::Map(Arc::new(map)))
}

fn c_array_insert(name: &str, t: &[DataType]) -> DfResult<Vec<DataType>> {
    match t {
        [a, _, e] => {
            let arr = array_arg(name, a)?;
            let el = unify(&element_of(&arr), e);
            Ok(vec![list_type(el.clone()), DataType::Int32, el])
        }
        _ => Err(usage(name, "(array, pos, element)")),
    }
}

/// Spark 3.5's `array_insert`: 1-based, negative from the end (-1 appends), nulls pad.
fn array_insert(a: &[ScalarValue], ret: &DataType) -> DfResult<ScalarValue> {
    let (Some(v), ScalarValue::Int32(Some(pos))) = (values(&a[0]), &a[1]) else {
        return ScalarValue::try_from(ret);
    };
    if *pos == 0 {
        return Err(spark_err(
            crate::error::class::INVALID_INDEX_OF_ZERO,
            "array_insert: the index 0 is invalid. An index shall be either < 0 or > 0 (the \
             first element has index 1)."
                .into(),
        ));
    }
    let len = v.len() as i64;
    let e = a[2].to_array_of_size(1)?;
    let e = if e.data_type() != v.data_type() {
        arrow::compute::cast(&e, v.data_type())?
    } else {
        e
    };
    let nulls = |n: i64| arrow::array::new_null_array(v.data_type(), n as usize);
    let pos = *pos as i64;
    let out = if pos > 0 {
        let at = pos - 1;
        if at <= len {
            let (l, r) = (
                v.slice(0, at as usize),
                v.slice(at as usize, (len - at) as usize),
            );
            arrow::compute::concat(&[&l, &e, &r])?
        } else {
            arrow::compute::concat(&[&v, &nulls(at - len), &e])?
        }
    } else {
        let at = len + 1 + pos;
        if at >= 0 {
            let (l, r) = (
                v.slice(0, at as usize),
                v.slice(at as usize, (len - at) as usize),
            );
            arrow::compute::concat(&[&l, &e, &r])?
        } else {
            arrow::compute::concat(&[&e, &nulls(-at), &v])?
        }
    };
    list_of(ret, out)
}

/// The collection functions, and the wrapped ones that take arrays (`existing` looks up
/// `reverse` and `concat`).
pub(super) fn udfs(existing: impl Fn(&str) -> Option<Arc<ScalarUDF>>) -> Vec<ScalarUDF> {
    let mut out = vec![
        RowFn::new("sort_array", c_array_bool, r_first, sort_array).udf(),
        RowFn::new("element_at", c_index, r_element, element_at).udf(),
        RowFn::new("try_element_at", c_index, r_element, try_element_at).udf(),
        RowFn::new("get", c_index, r_element, get).udf(),
        RowFn::new("array_append", c_array_elem, r_first, array_append).udf(),
        RowFn::new("array_prepend", c_array_elem, r_first, array_prepend).udf(),
        RowFn::new("array_remove", c_array_elem, r_first, array_remove).udf(),
        RowFn::new("array_position", c_array_elem, r_i64, array_position).udf(),
        RowFn::new("array_size", c_array, r_i32, array_size).udf(),
        RowFn::new("map_contains_key", c_map_key, r_bool, map_contains_key).udf(),
        RowFn::new("sequence", c_sequence, r_list_of_first, sequence).udf(),
        RowFn::new("map_concat", c_maps, r_first, map_concat).udf(),
        RowFn::new("array_insert", c_array_insert, r_first, array_insert).udf(),
    ];
    if let Some(inner) = existing("reverse") {
        out.push(Dispatch::udf(
            inner,
            RowFn::new("reverse", c_array, r_first, reverse),
            is_list,
        ));
    }
    if let Some(inner) = existing("concat") {
        out.push(Dispatch::udf(
            inner,
            RowFn::new("concat", c_arrays, r_first, concat_arrays),
            is_list,
        ));
    }
    out
}
