//! Evaluation of the higher-order functions over a batch: the elements of all rows' arrays (or
//! maps) are one batch for the lambda body, the outer columns repeated per element (`take` by
//! the element's row); the results are cut back into arrays with the input's offsets and nulls.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BooleanArray, Int32Array, ListArray, MapArray,
    StructArray, UInt32Array,
};
use arrow::buffer::{NullBuffer, OffsetBuffer};
use arrow::compute::{cast, interleave, take};
use arrow::datatypes::{DataType, Field, Int64Type};
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use arrow::row::{RowConverter, SortField};

use super::udf::{Lambda, Planned};
use super::Kind;
use crate::error::{class, SluiceError};

type Result<T> = std::result::Result<T, SluiceError>;

/// The result of a `kind` call over `rows` rows: `data` its data arguments, `outer` the outer
/// columns its lambdas reference.
pub(super) fn run(
    kind: Kind,
    p: &Planned,
    data: &[ArrayRef],
    outer: &[ArrayRef],
    rows: usize,
) -> Result<ArrayRef> {
    let collections = match kind {
        Kind::Aggregate | Kind::Reduce => &data[..1],
        _ => data,
    };
    if collections.iter().any(|a| a.data_type() == &DataType::Null) {
        return Ok(new_null_array(&p.ret, rows));
    }
    let ctx = Ctx { outer, p };
    match kind {
        Kind::Transform => transform(&ctx, &data[0]),
        Kind::Filter => filter(&ctx, &data[0]),
        Kind::Exists => exists_forall(&ctx, &data[0], true),
        Kind::Forall => exists_forall(&ctx, &data[0], false),
        Kind::Aggregate | Kind::Reduce => aggregate(&ctx, &data[0], &data[1]),
        Kind::ArraySort => array_sort(&ctx, &data[0]),
        Kind::ZipWith => zip_with(&ctx, &data[0], &data[1]),
        Kind::MapFilter => map_filter(&ctx, &data[0]),
        Kind::TransformKeys => transform_map(&ctx, &data[0], true),
        Kind::TransformValues => transform_map(&ctx, &data[0], false),
        Kind::MapZipWith => map_zip_with(&ctx, &data[0], &data[1]),
    }
}

struct Ctx<'a> {
    outer: &'a [ArrayRef],
    p: &'a Planned,
}

impl Ctx<'_> {
    /// Evaluates lambda `i` over `params` (one value per element), the outer columns taken at
    /// `parents` (the row of each element).
    fn eval(&self, i: usize, params: Vec<ArrayRef>, parents: &UInt32Array) -> Result<ArrayRef> {
        let l: &Lambda = &self.p.lambdas[i];
        let n = parents.len();
        let arity = l.schema.fields().len() - self.outer.len();
        let mut cols: Vec<ArrayRef> = Vec::new();
        for (a, f) in params.into_iter().take(arity).zip(l.schema.fields()) {
            cols.push(if a.data_type() == f.data_type() {
                a
            } else {
                cast(&a, f.data_type())?
            });
        }
        for o in self.outer {
            cols.push(take(o.as_ref(), parents, None)?);
        }
        let batch = RecordBatch::try_new_with_options(
            l.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(n)),
        )?;
        let out = l.body.evaluate(&batch)?.into_array(n)?;
        Ok(if out.data_type() == &l.ty || l.ty == DataType::Null {
            out
        } else {
            cast(&out, &l.ty)?
        })
    }
}

/// The elements of a list column as one array, offsets rebased to 0, and each element's row.
struct Flat {
    list: ListArray,
    values: ArrayRef,
    offsets: Vec<usize>,
    parents: UInt32Array,
}

impl Flat {
    fn of(a: &ArrayRef) -> Result<Flat> {
        let list = match a.data_type() {
            DataType::List(_) => a.as_list::<i32>().clone(),
            DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                cast(a, &DataType::List(f.clone()))?
                    .as_list::<i32>()
                    .clone()
            }
            other => {
                return Err(SluiceError::internal(format!(
                    "higher-order function over {other}, not an array"
                )))
            }
        };
        let raw = list.value_offsets();
        let start = raw[0] as usize;
        let offsets: Vec<usize> = raw.iter().map(|o| *o as usize - start).collect();
        let len = offsets.last().copied().unwrap_or(0);
        let values = list.values().slice(start, len);
        Ok(Flat {
            parents: parents(&offsets),
            list,
            values,
            offsets,
        })
    }
    fn rows(&self) -> usize {
        self.offsets.len() - 1
    }
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }
}

fn parents(offsets: &[usize]) -> UInt32Array {
    let mut out = Vec::with_capacity(offsets.last().copied().unwrap_or(0));
    for i in 0..offsets.len().saturating_sub(1) {
        out.extend(std::iter::repeat_n(i as u32, offsets[i + 1] - offsets[i]));
    }
    UInt32Array::from(out)
}

fn offset_buffer(offsets: &[usize]) -> Result<OffsetBuffer<i32>> {
    let v: Vec<i32> = offsets
        .iter()
        .map(|o| i32::try_from(*o))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| SluiceError::internal("array offsets beyond i32"))?;
    Ok(OffsetBuffer::new(v.into()))
}

fn list(values: ArrayRef, offsets: &[usize], nulls: Option<NullBuffer>) -> Result<ArrayRef> {
    let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
    Ok(Arc::new(ListArray::try_new(
        field,
        offset_buffer(offsets)?,
        values,
        nulls,
    )?))
}

fn positions(f: &Flat) -> ArrayRef {
    let mut v = Vec::with_capacity(f.values.len());
    for i in 0..f.rows() {
        v.extend((0..f.range(i).len()).map(|k| k as i32));
    }
    Arc::new(Int32Array::from(v))
}

/// A lambda's result as booleans (`null` lambda results stay null).
fn booleans(a: ArrayRef) -> Result<BooleanArray> {
    Ok(match a.data_type() {
        DataType::Boolean => a.as_boolean().clone(),
        _ => cast(&a, &DataType::Boolean)?.as_boolean().clone(),
    })
}

fn transform(c: &Ctx, a: &ArrayRef) -> Result<ArrayRef> {
    let f = Flat::of(a)?;
    let out = c.eval(0, vec![f.values.clone(), positions(&f)], &f.parents)?;
    list(out, &f.offsets, f.list.nulls().cloned())
}

fn filter(c: &Ctx, a: &ArrayRef) -> Result<ArrayRef> {
    let f = Flat::of(a)?;
    let keep = booleans(c.eval(0, vec![f.values.clone(), positions(&f)], &f.parents)?)?;
    let mut idx = Vec::new();
    let mut offsets = vec![0usize];
    for i in 0..f.rows() {
        for j in f.range(i) {
            if keep.is_valid(j) && keep.value(j) {
                idx.push(j as u32);
            }
        }
        offsets.push(idx.len());
    }
    let values = take(f.values.as_ref(), &UInt32Array::from(idx), None)?;
    list(values, &offsets, f.list.nulls().cloned())
}

/// Three-valued: `exists` is true if any is true, else null if any is null; `forall` is false if
/// any is false, else null if any is null.
fn exists_forall(c: &Ctx, a: &ArrayRef, exists: bool) -> Result<ArrayRef> {
    let f = Flat::of(a)?;
    let r = booleans(c.eval(0, vec![f.values.clone()], &f.parents)?)?;
    let out: BooleanArray = (0..f.rows())
        .map(|i| {
            if f.list.is_null(i) {
                return None;
            }
            let mut null = false;
            for j in f.range(i) {
                if r.is_null(j) {
                    null = true;
                } else if r.value(j) == exists {
                    return Some(exists);
                }
            }
            (!null).then_some(!exists)
        })
        .collect();
    Ok(Arc::new(out))
}

/// The fold, position by position over all rows: step `k` merges the `k`-th element of every
/// array that has one.
fn aggregate(c: &Ctx, a: &ArrayRef, zero: &ArrayRef) -> Result<ArrayRef> {
    let f = Flat::of(a)?;
    let acc_type = c.p.lambdas[0].schema.field(0).data_type().clone();
    let mut acc = if zero.data_type() == &acc_type {
        zero.clone()
    } else {
        cast(zero, &acc_type)?
    };
    let rows = f.rows();
    let longest = (0..rows)
        .filter(|i| f.list.is_valid(*i))
        .map(|i| f.range(i).len())
        .max()
        .unwrap_or(0);
    for k in 0..longest {
        let active: Vec<u32> = (0..rows)
            .filter(|i| f.list.is_valid(*i) && f.range(*i).len() > k)
            .map(|i| i as u32)
            .collect();
        let idx = UInt32Array::from(active.clone());
        let elems = UInt32Array::from(
            active
                .iter()
                .map(|i| (f.offsets[*i as usize] + k) as u32)
                .collect::<Vec<_>>(),
        );
        let merged = c.eval(
            0,
            vec![
                take(acc.as_ref(), &idx, None)?,
                take(f.values.as_ref(), &elems, None)?,
            ],
            &idx,
        )?;
        let merged = if merged.data_type() == &acc_type {
            merged
        } else {
            cast(&merged, &acc_type)?
        };
        let mut pos = 0;
        let picks: Vec<(usize, usize)> = (0..rows)
            .map(|i| {
                if active.get(pos) == Some(&(i as u32)) {
                    pos += 1;
                    (1, pos - 1)
                } else {
                    (0, i)
                }
            })
            .collect();
        acc = interleave(&[acc.as_ref(), merged.as_ref()], &picks)?;
    }
    let all = UInt32Array::from((0..rows as u32).collect::<Vec<_>>());
    let out = if c.p.lambdas.len() > 1 {
        c.eval(1, vec![acc], &all)?
    } else {
        acc
    };
    let keep = UInt32Array::from(
        (0..rows)
            .map(|i| f.list.is_valid(i).then_some(i as u32))
            .collect::<Vec<_>>(),
    );
    Ok(take(out.as_ref(), &keep, None)?)
}

/// A stable merge sort whose comparison may fail (Spark sorts with Java's stable TimSort).
fn merge_sort(
    v: &mut Vec<usize>,
    cmp: &mut dyn FnMut(usize, usize) -> Result<Ordering>,
) -> Result<()> {
    if v.len() <= 1 {
        return Ok(());
    }
    let mut right = v.split_off(v.len() / 2);
    merge_sort(v, cmp)?;
    merge_sort(&mut right, cmp)?;
    let left = std::mem::take(v);
    let (mut i, mut j) = (0, 0);
    while i < left.len() && j < right.len() {
        if cmp(right[j], left[i])? == Ordering::Less {
            v.push(right[j]);
            j += 1;
        } else {
            v.push(left[i]);
            i += 1;
        }
    }
    v.extend_from_slice(&left[i..]);
    v.extend_from_slice(&right[j..]);
    Ok(())
}

fn array_sort(c: &Ctx, a: &ArrayRef) -> Result<ArrayRef> {
    let f = Flat::of(a)?;
    let mut order: Vec<u32> = Vec::with_capacity(f.values.len());
    for i in 0..f.rows() {
        let mut v: Vec<usize> = f.range(i).collect();
        if f.list.is_valid(i) {
            let row = UInt32Array::from(vec![i as u32]);
            let mut cmp = |x: usize, y: usize| -> Result<Ordering> {
                let r = c.eval(0, vec![f.values.slice(x, 1), f.values.slice(y, 1)], &row)?;
                let r = cast(&r, &DataType::Int64)?;
                let r = r.as_primitive::<Int64Type>();
                if r.is_null(0) {
                    return Err(SluiceError::input(
                        class::COMPARATOR_RETURNS_NULL,
                        format!(
                            "The comparator `{}` of `array_sort` has returned a NULL for a \
                             comparison between {} and {}. It should return a positive integer \
                             for \"greater than\", 0 for \"equal\" and a negative integer for \
                             \"less than\".",
                            c.p.lambdas[0].written,
                            display(&f.values, x),
                            display(&f.values, y)
                        ),
                    ));
                }
                Ok(r.value(0).cmp(&0))
            };
            merge_sort(&mut v, &mut cmp)?;
        }
        order.extend(v.into_iter().map(|j| j as u32));
    }
    let values = take(f.values.as_ref(), &UInt32Array::from(order), None)?;
    list(values, &f.offsets, f.list.nulls().cloned())
}

fn display(a: &ArrayRef, i: usize) -> String {
    arrow::util::display::array_value_to_string(a, i).unwrap_or_else(|_| "?".into())
}

fn zip_with(c: &Ctx, a: &ArrayRef, b: &ArrayRef) -> Result<ArrayRef> {
    let (l, r) = (Flat::of(a)?, Flat::of(b)?);
    let rows = l.rows();
    let mut li = Vec::new();
    let mut ri = Vec::new();
    let mut offsets = vec![0usize];
    let mut valid = Vec::with_capacity(rows);
    for i in 0..rows {
        let ok = l.list.is_valid(i) && r.list.is_valid(i);
        valid.push(ok);
        if ok {
            let (lr, rr) = (l.range(i), r.range(i));
            for k in 0..lr.len().max(rr.len()) {
                li.push((k < lr.len()).then(|| (lr.start + k) as u32));
                ri.push((k < rr.len()).then(|| (rr.start + k) as u32));
            }
        }
        offsets.push(li.len());
    }
    let left = take(l.values.as_ref(), &UInt32Array::from(li), None)?;
    let right = take(r.values.as_ref(), &UInt32Array::from(ri), None)?;
    let out = c.eval(0, vec![left, right], &parents(&offsets))?;
    list(out, &offsets, Some(NullBuffer::from(valid)))
}

/// The entries of a map column, offsets rebased to 0, and each entry's row.
struct FlatMap {
    map: MapArray,
    keys: ArrayRef,
    values: ArrayRef,
    offsets: Vec<usize>,
    parents: UInt32Array,
}

impl FlatMap {
    fn of(a: &ArrayRef) -> Result<FlatMap> {
        let map = a.as_map_opt().cloned().ok_or_else(|| {
            SluiceError::internal(format!(
                "higher-order map function over {}, not a map",
                a.data_type()
            ))
        })?;
        let raw = map.value_offsets();
        let start = raw[0] as usize;
        let offsets: Vec<usize> = raw.iter().map(|o| *o as usize - start).collect();
        let len = offsets.last().copied().unwrap_or(0);
        Ok(FlatMap {
            keys: map.keys().slice(start, len),
            values: map.values().slice(start, len),
            parents: parents(&offsets),
            map,
            offsets,
        })
    }
    fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.offsets[i]..self.offsets[i + 1]
    }
}

fn map(
    ret: &DataType,
    keys: ArrayRef,
    values: ArrayRef,
    offsets: &[usize],
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let DataType::Map(field, sorted) = ret else {
        return Err(SluiceError::internal(format!("map result typed {ret}")));
    };
    let DataType::Struct(fields) = field.data_type() else {
        return Err(SluiceError::internal(format!("map entries typed {ret}")));
    };
    let entries = StructArray::try_new(fields.clone(), vec![keys, values], None)?;
    Ok(Arc::new(MapArray::try_new(
        field.clone(),
        offset_buffer(offsets)?,
        entries,
        nulls,
        *sorted,
    )?))
}

fn map_filter(c: &Ctx, a: &ArrayRef) -> Result<ArrayRef> {
    let m = FlatMap::of(a)?;
    let keep = booleans(c.eval(0, vec![m.keys.clone(), m.values.clone()], &m.parents)?)?;
    let mut idx = Vec::new();
    let mut offsets = vec![0usize];
    for i in 0..m.map.len() {
        for j in m.range(i) {
            if keep.is_valid(j) && keep.value(j) {
                idx.push(j as u32);
            }
        }
        offsets.push(idx.len());
    }
    let idx = UInt32Array::from(idx);
    map(
        &c.p.ret,
        take(m.keys.as_ref(), &idx, None)?,
        take(m.values.as_ref(), &idx, None)?,
        &offsets,
        m.map.nulls().cloned(),
    )
}

fn transform_map(c: &Ctx, a: &ArrayRef, keys: bool) -> Result<ArrayRef> {
    let m = FlatMap::of(a)?;
    let out = c.eval(0, vec![m.keys.clone(), m.values.clone()], &m.parents)?;
    if !keys {
        return map(
            &c.p.ret,
            m.keys.clone(),
            out,
            &m.offsets,
            m.map.nulls().cloned(),
        );
    }
    if out.null_count() > 0 {
        return Err(SluiceError::input(
            class::NULL_MAP_KEY,
            format!(
                "Cannot use null as map key: the lambda function `{}` of `transform_keys` \
                 returned null. Make it return a key for every entry (e.g. with coalesce).",
                c.p.lambdas[0].written
            ),
        ));
    }
    check_unique_keys(&out, &m.offsets)?;
    map(
        &c.p.ret,
        out,
        m.values.clone(),
        &m.offsets,
        m.map.nulls().cloned(),
    )
}

/// Spark's `spark.sql.mapKeyDedupPolicy=EXCEPTION`: a map may not repeat a key.
fn check_unique_keys(keys: &ArrayRef, offsets: &[usize]) -> Result<()> {
    let conv = RowConverter::new(vec![SortField::new(keys.data_type().clone())])?;
    let rows = conv.convert_columns(std::slice::from_ref(keys))?;
    for w in offsets.windows(2) {
        let mut seen = std::collections::HashSet::new();
        for j in w[0]..w[1] {
            if !seen.insert(rows.row(j)) {
                return Err(SluiceError::input(
                    class::DUPLICATED_MAP_KEY,
                    format!(
                        "Duplicate map key {} was found in the result of `transform_keys`, \
                         please check the input data. Spark's spark.sql.mapKeyDedupPolicy \
                         LAST_WIN is not supported by Sluice; make the lambda return distinct \
                         keys.",
                        display(keys, j)
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn map_zip_with(c: &Ctx, a: &ArrayRef, b: &ArrayRef) -> Result<ArrayRef> {
    let (l, r) = (FlatMap::of(a)?, FlatMap::of(b)?);
    let key_type = l.keys.data_type().clone();
    let rkeys = if r.keys.data_type() == &key_type {
        r.keys.clone()
    } else {
        cast(&r.keys, &key_type)?
    };
    let conv = RowConverter::new(vec![SortField::new(key_type)])?;
    let lrows = conv.convert_columns(std::slice::from_ref(&l.keys))?;
    let rrows = conv.convert_columns(std::slice::from_ref(&rkeys))?;
    let mut keys: Vec<(usize, usize)> = Vec::new();
    let mut lv = Vec::new();
    let mut rv = Vec::new();
    let mut offsets = vec![0usize];
    let mut valid = Vec::new();
    for i in 0..l.map.len() {
        let ok = l.map.is_valid(i) && r.map.is_valid(i);
        valid.push(ok);
        if ok {
            let mut right: HashMap<_, usize> = HashMap::new();
            for j in r.range(i) {
                right.entry(rrows.row(j)).or_insert(j);
            }
            let mut used = std::collections::HashSet::new();
            for j in l.range(i) {
                keys.push((0, j));
                lv.push(Some(j as u32));
                let m = right.get(&lrows.row(j)).copied();
                if let Some(m) = m {
                    used.insert(m);
                }
                rv.push(m.map(|m| m as u32));
            }
            for j in r.range(i) {
                if !used.contains(&j) && right.get(&rrows.row(j)) == Some(&j) {
                    keys.push((1, j));
                    lv.push(None);
                    rv.push(Some(j as u32));
                }
            }
        }
        offsets.push(keys.len());
    }
    let k = interleave(&[l.keys.as_ref(), rkeys.as_ref()], &keys)?;
    let v1 = take(l.values.as_ref(), &UInt32Array::from(lv), None)?;
    let v2 = take(r.values.as_ref(), &UInt32Array::from(rv), None)?;
    let out = c.eval(0, vec![k.clone(), v1, v2], &parents(&offsets))?;
    map(&c.p.ret, k, out, &offsets, Some(NullBuffer::from(valid)))
}
