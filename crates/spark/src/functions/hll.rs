//! Spark's HyperLogLog functions over Apache DataSketches HLL sketches (the `datasketches`
//! crate, the Apache DataSketches Rust port): `hll_sketch_agg(x[, lgConfigK])`,
//! `hll_union_agg(sketch[, allowDifferentLgConfigK])`, `hll_union(a, b[, allow..])` and
//! `hll_sketch_estimate(sketch)`.
//!
//! As Spark 3.5: sketches are `HLL_8` with `lgConfigK` 4..=21 (default 12); integers are hashed
//! as Java longs, strings as their UTF-8 bytes, binaries as their bytes (DataSketches' default
//! seed), so registers match Spark's; results are DataSketches' *updatable* images, as Spark's
//! `toUpdatableByteArray` writes them (the crate writes compact ones: [`updatable_image`]
//! lays them out as Java does). The aggregates' state is the sketch image (one BINARY field),
//! merged with a DataSketches union, so memory is bounded by `lgConfigK`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, BooleanArray, Int64Array};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datasketches::hash::value::raw_bytes;
use datasketches::hll::{HllSketch, HllType, HllUnion};

use super::aggregates::agg_err;
use super::percentile::constant;

const DEFAULT_LG_K: u8 = 12;

fn sketch_from(bytes: &[u8], name: &str) -> DfResult<HllSketch> {
    HllSketch::deserialize(bytes).map_err(|e| {
        agg_err(
            crate::error::class::HLL_INVALID_INPUT_SKETCH_BUFFER,
            format!(
                "Invalid call to `{name}`; only valid HLL sketch buffers are supported as inputs \
                 (such as those produced by `hll_sketch_agg`): {e}"
            ),
        )
    })
}

fn lg_k_error(name: &str, v: impl std::fmt::Display) -> DataFusionError {
    agg_err(
        crate::error::class::HLL_INVALID_LG_K,
        format!(
            "Invalid call to `{name}`; only valid lgConfigK values between 4 and 21 \
             (inclusive) are supported: {v}"
        ),
    )
}

fn different_lg_k(name: &str, a: u8, b: u8) -> DataFusionError {
    agg_err(
        crate::error::class::HLL_UNION_DIFFERENT_LG_K,
        format!(
            "Sketches have different lgConfigK values: {a} and {b}. Set the \
             allowDifferentLgConfigK parameter of `{name}` to true to union them."
        ),
    )
}

/// Java's open-addressing slot for `coupon` in a table of `1 << lg_arr` ints
/// (DataSketches' `CouponHashSet.find`).
fn java_set_slot(table: &[u32], lg_arr: u32, coupon: u32) -> usize {
    let mask = table.len() - 1;
    let mut probe = coupon as usize & mask;
    loop {
        if table[probe] == 0 || table[probe] == coupon {
            return probe;
        }
        let stride = (((coupon & 0x03FF_FFFF) >> lg_arr) | 1) as usize;
        probe = (probe + stride) & mask;
    }
}

/// A DataSketches compact image as the Java library's updatable one (what Spark returns):
/// the compact flag cleared, list coupons padded to the list's array size, set coupons placed
/// in Java's hash table.
pub(super) fn updatable_image(compact: Vec<u8>) -> Vec<u8> {
    const COMPACT: u8 = 8;
    if compact.len() < 8 {
        return compact;
    }
    let mut b = compact;
    b[5] &= !COMPACT;
    let lg_arr = b[4] as u32;
    let words = |bytes: &[u8]| -> Vec<u32> {
        bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect()
    };
    match b[0] {
        2 => {
            let mut out = b[..8].to_vec();
            let coupons = words(&b[8..]);
            let slots = (1usize << lg_arr).max(coupons.len());
            for k in 0..slots {
                out.extend_from_slice(&coupons.get(k).copied().unwrap_or(0).to_le_bytes());
            }
            out
        }
        3 if b.len() >= 12 => {
            let coupons = words(&b[12..]);
            let mut table = vec![0u32; 1usize << lg_arr];
            for c in coupons {
                let slot = java_set_slot(&table, lg_arr, c);
                table[slot] = c;
            }
            let mut out = b[..12].to_vec();
            for c in table {
                out.extend_from_slice(&c.to_le_bytes());
            }
            out
        }
        _ => b,
    }
}

#[derive(Debug)]
struct SketchAcc {
    lg_k: u8,
    sketch: HllSketch,
    union: Option<HllUnion>,
}

impl SketchAcc {
    fn result(&mut self) -> DfResult<Vec<u8>> {
        Ok(updatable_image(match &mut self.union {
            None => self.sketch.serialize(),
            Some(u) => {
                u.update(&self.sketch);
                let out = u.to_sketch(HllType::Hll8).serialize();
                self.sketch = HllSketch::new(self.lg_k, HllType::Hll8)
                    .map_err(|e| DataFusionError::Execution(e.to_string()))?;
                out
            }
        }))
    }
}

impl Accumulator for SketchAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let a = &values[0];
        match a.data_type() {
            DataType::Int64 => {
                for v in a.as_primitive::<Int64Type>().iter().flatten() {
                    self.sketch.update(v);
                }
            }
            DataType::Utf8 => {
                for v in a.as_string::<i32>().iter().flatten() {
                    self.sketch.update(raw_bytes::from_str(v));
                }
            }
            DataType::Binary => {
                for v in a.as_binary::<i32>().iter().flatten() {
                    self.sketch.update(raw_bytes::from_slice(v));
                }
            }
            _ => {}
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let b = states[0].as_binary::<i32>();
        for i in 0..b.len() {
            if b.is_valid(i) {
                let s = sketch_from(b.value(i), "hll_sketch_agg")?;
                let lg_k = self.lg_k;
                let u = self.union.get_or_insert_with(|| {
                    HllUnion::new(lg_k).unwrap_or_else(|_| unreachable_union())
                });
                u.update(&s);
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        // With a union, `result` moves the sketch into it: nothing is lost or counted twice.
        Ok(vec![ScalarValue::Binary(Some(self.result()?))])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Binary(Some(self.result()?)))
    }
    fn size(&self) -> usize {
        size_of_val(self) + self.sketch.estimated_size()
    }
}

/// `HllUnion::new` fails only for lgMaxK outside 4..=21, which the callers have checked.
fn unreachable_union() -> HllUnion {
    HllUnion::new(DEFAULT_LG_K).expect("lgMaxK 12 is valid")
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct HllSketchAgg {
    signature: Signature,
}

impl AggregateUDFImpl for HllSketchAgg {
    fn name(&self) -> &str {
        "hll_sketch_agg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(1..=2).contains(&arg_types.len()) {
            return Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!(
                    "`hll_sketch_agg` takes (x[, lgConfigK]), not {} arguments",
                    arg_types.len()
                ),
            ));
        }
        let x = match &arg_types[0] {
            t if t.is_integer() => DataType::Int64,
            DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
            DataType::Binary | DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
            DataType::Null => DataType::Int64,
            t => {
                return Err(agg_err(
                    crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!("`hll_sketch_agg` takes an INT, BIGINT, STRING or BINARY, not {t}"),
                ))
            }
        };
        let mut out = vec![x];
        if arg_types.len() == 2 {
            out.push(DataType::Int64);
        }
        Ok(out)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Binary)
    }
    fn is_nullable(&self) -> bool {
        false
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let lg_k = match args.exprs.get(1) {
            None => DEFAULT_LG_K,
            Some(e) => match constant(e)? {
                Some(ScalarValue::Int64(Some(k))) if (4..=21).contains(&k) => k as u8,
                Some(v) => return Err(lg_k_error("hll_sketch_agg", v)),
                None => return Err(lg_k_error("hll_sketch_agg", "not a constant")),
            },
        };
        let sketch =
            HllSketch::new(lg_k, HllType::Hll8).map_err(|e| lg_k_error("hll_sketch_agg", e))?;
        Ok(Box::new(SketchAcc {
            lg_k,
            sketch,
            union: None,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[sketch]", args.name),
            DataType::Binary,
            true,
        ))])
    }
}

/// `hll_union_agg(sketch[, allowDifferentLgConfigK])`.
#[derive(Debug)]
struct UnionAcc {
    allow_different: bool,
    /// The union and the lgConfigK of the first sketch it took.
    union: Option<(HllUnion, u8)>,
}

impl UnionAcc {
    fn take(&mut self, bytes: &[u8]) -> DfResult<()> {
        let s = sketch_from(bytes, "hll_union_agg")?;
        let k = s.lg_config_k();
        match &mut self.union {
            None => {
                let mut u = HllUnion::new(k).map_err(|e| lg_k_error("hll_union_agg", e))?;
                u.update(&s);
                self.union = Some((u, k));
            }
            Some((u, first)) => {
                if *first != k && !self.allow_different {
                    return Err(different_lg_k("hll_union_agg", *first, k));
                }
                u.update(&s);
            }
        }
        Ok(())
    }
    fn image(&self) -> Option<Vec<u8>> {
        self.union
            .as_ref()
            .map(|(u, _)| updatable_image(u.to_sketch(HllType::Hll8).serialize()))
    }
}

impl Accumulator for UnionAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let b = values[0].as_binary::<i32>();
        for i in 0..b.len() {
            if b.is_valid(i) {
                self.take(b.value(i))?;
            }
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        self.update_batch(states)
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(self.image())])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Binary(self.image()))
    }
    fn size(&self) -> usize {
        size_of_val(self)
            + self
                .union
                .as_ref()
                .map(|(u, _)| u.estimated_size())
                .unwrap_or(0)
    }
}

fn allow_argument(
    name: &str,
    e: Option<&Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
) -> DfResult<bool> {
    let Some(e) = e else {
        return Ok(false);
    };
    match constant(e)? {
        Some(ScalarValue::Boolean(Some(b))) => Ok(b),
        _ => Err(agg_err(
            crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
            format!("the second argument of `{name}` (allowDifferentLgConfigK) must be a boolean constant"),
        )),
    }
}

fn binary_args(name: &str, arg_types: &[DataType], n: usize) -> DfResult<Vec<DataType>> {
    let mut out = Vec::new();
    for (i, t) in arg_types.iter().enumerate() {
        if i < n {
            if !matches!(
                t,
                DataType::Binary | DataType::BinaryView | DataType::LargeBinary | DataType::Null
            ) {
                return Err(agg_err(
                    crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                    format!("`{name}` takes BINARY sketches, not {t}"),
                ));
            }
            out.push(DataType::Binary);
        } else {
            out.push(DataType::Boolean);
        }
    }
    Ok(out)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct HllUnionAgg {
    signature: Signature,
}

impl AggregateUDFImpl for HllUnionAgg {
    fn name(&self) -> &str {
        "hll_union_agg"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        if !(1..=2).contains(&arg_types.len()) {
            return Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!(
                    "`hll_union_agg` takes (sketch[, allowDifferentLgConfigK]), not {} arguments",
                    arg_types.len()
                ),
            ));
        }
        binary_args("hll_union_agg", arg_types, 1)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Binary)
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(UnionAcc {
            allow_different: allow_argument("hll_union_agg", args.exprs.get(1))?,
            union: None,
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[sketch]", args.name),
            DataType::Binary,
            true,
        ))])
    }
}

/// `hll_union(a, b[, allowDifferentLgConfigK])` and `hll_sketch_estimate(sketch)`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct HllScalar {
    estimate: bool,
    signature: Signature,
}

impl ScalarUDFImpl for HllScalar {
    fn name(&self) -> &str {
        if self.estimate {
            "hll_sketch_estimate"
        } else {
            "hll_union"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let (n, range) = if self.estimate {
            (1, 1..=1)
        } else {
            (2, 2..=3)
        };
        if !range.contains(&arg_types.len()) {
            return Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!(
                    "`{}` takes {}, not {} arguments",
                    self.name(),
                    if self.estimate {
                        "one sketch"
                    } else {
                        "(first, second[, allowDifferentLgConfigK])"
                    },
                    arg_types.len()
                ),
            ));
        }
        binary_args(self.name(), arg_types, n)
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(if self.estimate {
            DataType::Int64
        } else {
            DataType::Binary
        })
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(args.number_rows))
            .collect::<DfResult<Vec<_>>>()?;
        let name = self.name();
        if self.estimate {
            let b = arrays[0].as_binary::<i32>();
            let out = (0..b.len())
                .map(|i| {
                    if b.is_null(i) {
                        return Ok(None);
                    }
                    Ok(Some(
                        sketch_from(b.value(i), name)?.estimate().round() as i64
                    ))
                })
                .collect::<DfResult<Int64Array>>()?;
            return super::columnar(Arc::new(out), scalar);
        }
        let (a, b) = (arrays[0].as_binary::<i32>(), arrays[1].as_binary::<i32>());
        let allow: Option<&BooleanArray> = arrays.get(2).map(|x| x.as_boolean());
        let out = (0..a.len())
            .map(|i| {
                if a.is_null(i) || b.is_null(i) {
                    return Ok(None);
                }
                let (x, y) = (
                    sketch_from(a.value(i), name)?,
                    sketch_from(b.value(i), name)?,
                );
                let allowed = allow.is_some_and(|f| f.is_valid(i) && f.value(i));
                if x.lg_config_k() != y.lg_config_k() && !allowed {
                    return Err(different_lg_k(name, x.lg_config_k(), y.lg_config_k()));
                }
                let mut u = HllUnion::new(x.lg_config_k().min(y.lg_config_k()))
                    .map_err(|e| lg_k_error(name, e))?;
                u.update(&x);
                u.update(&y);
                Ok(Some(updatable_image(
                    u.to_sketch(HllType::Hll8).serialize(),
                )))
            })
            .collect::<DfResult<Vec<Option<Vec<u8>>>>>()?;
        let out: BinaryArray = out.iter().map(|v| v.as_deref()).collect();
        super::columnar(Arc::new(out), scalar)
    }
}

pub(super) fn udafs() -> Vec<AggregateUDF> {
    vec![
        AggregateUDF::new_from_impl(HllSketchAgg {
            signature: Signature::user_defined(Volatility::Immutable),
        }),
        AggregateUDF::new_from_impl(HllUnionAgg {
            signature: Signature::user_defined(Volatility::Immutable),
        }),
    ]
}

pub(super) fn udfs() -> Vec<ScalarUDF> {
    [true, false]
        .into_iter()
        .map(|estimate| {
            ScalarUDF::new_from_impl(HllScalar {
                estimate,
                signature: Signature::user_defined(Volatility::Immutable),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use arrow::array::RecordBatch;
    use datafusion::common::ScalarValue as S;

    fn one(s: &sluice::Session, sql: &str) -> S {
        let b: Vec<RecordBatch> = s.sql(sql).unwrap().collect().unwrap();
        let b: Vec<&RecordBatch> = b.iter().filter(|b| b.num_rows() > 0).collect();
        S::try_from_array(b[0].column(0), 0).unwrap()
    }

    fn hex(v: &S) -> String {
        let S::Binary(Some(b)) = v else {
            panic!("{v:?}")
        };
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn sketches_are_byte_compatible_with_spark() {
        let s = sluice::Session::builder().build().unwrap();
        let rows = "VALUES (1, 'a'), (CAST(NULL AS INT), CAST(NULL AS STRING)), (3, 'c'), (3, 'b'), (7, 'a') t(i, s)";
        // Spark 3.5.7's images (DataSketches' updatable LIST image, HLL_8, lgConfigK 12).
        let v = one(&s, &format!("SELECT hll_sketch_agg(i) FROM {rows}"));
        assert_eq!(
            hex(&v),
            "0201070c030003082bf2fb0675816607c1e917050000000000000000000000000000000000000000"
        );
        let v = one(&s, &format!("SELECT hll_sketch_agg(s) FROM {rows}"));
        assert_eq!(
            hex(&v),
            "0201070c030003082f823b046f19dc060aff80040000000000000000000000000000000000000000"
        );
        let v = one(&s, "SELECT hll_sketch_estimate(hll_sketch_agg(c, 12)) FROM VALUES (1), (1), (2), (2), (3) t(c)");
        assert_eq!(v, S::Int64(Some(3)));
        let v = one(&s, "SELECT hll_sketch_estimate(hll_union(hll_sketch_agg(a), hll_sketch_agg(b))) FROM VALUES (1, 4), (1, 4), (2, 5), (2, 5), (3, 6) t(a, b)");
        assert_eq!(v, S::Int64(Some(6)));
    }

    #[test]
    fn many_values_pass_set_and_hll_modes_and_merge() {
        use super::*;
        let new = || SketchAcc {
            lg_k: 12,
            sketch: HllSketch::new(12, HllType::Hll8).unwrap(),
            union: None,
        };
        let (mut a, mut b) = (new(), new());
        let xs: ArrayRef = Arc::new(Int64Array::from_iter_values(1..=3000));
        let ys: ArrayRef = Arc::new(Int64Array::from_iter_values(2001..=5000));
        a.update_batch(&[xs]).unwrap();
        b.update_batch(&[ys]).unwrap();
        let st = b.state().unwrap()[0].to_array().unwrap();
        a.merge_batch(&[st]).unwrap();
        let S::Binary(Some(img)) = a.evaluate().unwrap() else {
            panic!()
        };
        let n = HllSketch::deserialize(&img).unwrap().estimate();
        assert!((4800.0..=5200.0).contains(&n), "{n}");
        // A few values: SET mode, the image round-trips.
        let mut c = new();
        let zs: ArrayRef = Arc::new(Int64Array::from_iter_values(1..=40));
        c.update_batch(&[zs]).unwrap();
        let S::Binary(Some(img)) = c.evaluate().unwrap() else {
            panic!()
        };
        assert_eq!(img[0], 3, "SET mode");
        let n = HllSketch::deserialize(&img).unwrap().estimate();
        assert!((39.0..=41.0).contains(&n), "{n}");
    }

    #[test]
    fn bad_arguments_are_spark_errors() {
        let s = sluice::Session::builder().build().unwrap();
        let err = |sql: &str| s.sql(sql).and_then(|f| f.collect()).unwrap_err();
        let e = err("SELECT hll_sketch_agg(c, 2) FROM VALUES (1) t(c)");
        assert!(e.is(crate::error::class::HLL_INVALID_LG_K), "{e}");
        let e = err("SELECT hll_sketch_estimate(unhex('0102'))");
        assert!(
            e.is(crate::error::class::HLL_INVALID_INPUT_SKETCH_BUFFER),
            "{e}"
        );
        let e = err(
            "SELECT hll_union(hll_sketch_agg(c, 12), hll_sketch_agg(c, 13)) FROM VALUES (1) t(c)",
        );
        assert!(e.is(crate::error::class::HLL_UNION_DIFFERENT_LG_K), "{e}");
        let e = err("SELECT hll_sketch_agg(c) FROM VALUES (1.5) t(c)");
        assert!(e.message().contains("hll_sketch_agg"), "{e}");
    }
}
