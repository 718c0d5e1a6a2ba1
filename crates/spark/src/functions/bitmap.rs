//! Spark's bitmaps: `bitmap_construct_agg(position)` (a 4096-byte bitmap with the bit of each
//! position set, least significant bit first, as `BitmapExpressionUtils`), `bitmap_or_agg(b)`
//! (the bitwise OR of bitmaps) and `bitmap_count(b)` (the number of set bits).
//! `bitmap_bit_position` / `bitmap_bucket_number` come from `datafusion-spark`.
//!
//! The aggregates' state is the bitmap itself (one BINARY field), ORed on merge.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use arrow::datatypes::{DataType, Field, FieldRef, Int64Type};
use datafusion::common::ScalarValue;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, ColumnarValue, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};

use super::aggregates::agg_err;

/// Spark's `BitmapExpressionUtils.NUM_BYTES`.
const NUM_BYTES: usize = 4096;

fn is_binary(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::Null
    )
}

#[derive(Debug)]
struct BitmapAcc {
    /// `bitmap_construct_agg` (positions) or `bitmap_or_agg` (bitmaps).
    construct: bool,
    bits: Vec<u8>,
}

impl BitmapAcc {
    fn or(&mut self, b: &[u8]) {
        for (x, y) in self.bits.iter_mut().zip(b) {
            *x |= y;
        }
    }
}

impl Accumulator for BitmapAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        if !self.construct {
            return self.merge_batch(values);
        }
        let p = arrow::compute::cast(&values[0], &DataType::Int64)?;
        for pos in p.as_primitive::<Int64Type>().iter().flatten() {
            if pos < 0 || pos >= (NUM_BYTES * 8) as i64 {
                return Err(agg_err(
                    crate::error::class::INVALID_BITMAP_POSITION,
                    format!(
                        "The 0-indexed bitmap position {pos} is out of bounds. The bitmap has {} \
                         bits ({NUM_BYTES} bytes); use bitmap_bit_position(..) for a position.",
                        NUM_BYTES * 8
                    ),
                ));
            }
            self.bits[pos as usize / 8] |= 1 << (pos % 8);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let b = arrow::compute::cast(&states[0], &DataType::Binary)?;
        let b = b.as_binary::<i32>();
        for i in 0..b.len() {
            if b.is_valid(i) {
                self.or(b.value(i));
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(Some(self.bits.clone()))])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Binary(Some(self.bits.clone())))
    }
    fn size(&self) -> usize {
        size_of_val(self) + self.bits.capacity()
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct BitmapAgg {
    construct: bool,
    signature: Signature,
}

impl AggregateUDFImpl for BitmapAgg {
    fn name(&self) -> &str {
        if self.construct {
            "bitmap_construct_agg"
        } else {
            "bitmap_or_agg"
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let name = self.name();
        match arg_types {
            [t] if self.construct => {
                if t.is_integer() || t.is_null() || matches!(t, DataType::Utf8 | DataType::Utf8View)
                {
                    Ok(vec![DataType::Int64])
                } else {
                    Err(agg_err(
                        crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                        format!("`{name}` takes a BIGINT bit position, not {t}"),
                    ))
                }
            }
            [t] if is_binary(t) => Ok(vec![DataType::Binary]),
            [t] => Err(agg_err(
                crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!("`{name}` takes a BINARY bitmap, not {t}"),
            )),
            _ => Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!("`{name}` takes one argument, not {}", arg_types.len()),
            )),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Binary)
    }
    fn is_nullable(&self) -> bool {
        false
    }
    fn default_value(&self, _data_type: &DataType) -> DfResult<ScalarValue> {
        Ok(ScalarValue::Binary(Some(vec![0; NUM_BYTES])))
    }
    fn accumulator(&self, _args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        Ok(Box::new(BitmapAcc {
            construct: self.construct,
            bits: vec![0; NUM_BYTES],
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[bitmap]", args.name),
            DataType::Binary,
            true,
        ))])
    }
}

/// `bitmap_count(b)`: the number of set bits (BIGINT; null for null).
#[derive(Debug, PartialEq, Eq, Hash)]
struct BitmapCount {
    signature: Signature,
}

impl ScalarUDFImpl for BitmapCount {
    fn name(&self) -> &str {
        "bitmap_count"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [t] if is_binary(t) => Ok(vec![DataType::Binary]),
            [t] => Err(agg_err(
                crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                format!("`bitmap_count` takes a BINARY bitmap, not {t}"),
            )),
            _ => Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!("`bitmap_count` takes one argument, not {}", arg_types.len()),
            )),
        }
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let a = arrow::compute::cast(&a, &DataType::Binary)?;
        let b = a.as_binary::<i32>();
        let out: Int64Array = (0..b.len())
            .map(|i| {
                b.is_valid(i)
                    .then(|| b.value(i).iter().map(|x| x.count_ones() as i64).sum())
            })
            .collect();
        super::columnar(Arc::new(out), scalar)
    }
}

pub(super) fn udafs() -> Vec<AggregateUDF> {
    [true, false]
        .into_iter()
        .map(|construct| {
            AggregateUDF::new_from_impl(BitmapAgg {
                construct,
                signature: Signature::user_defined(Volatility::Immutable),
            })
        })
        .collect()
}

pub(super) fn udfs() -> Vec<ScalarUDF> {
    vec![ScalarUDF::new_from_impl(BitmapCount {
        signature: Signature::user_defined(Volatility::Immutable),
    })]
}

#[cfg(test)]
mod tests {
    use arrow::array::RecordBatch;

    fn one(s: &sluice::Session, sql: &str) -> datafusion::common::ScalarValue {
        let b: Vec<RecordBatch> = s.sql(sql).unwrap().collect().unwrap();
        let b: Vec<&RecordBatch> = b.iter().filter(|b| b.num_rows() > 0).collect();
        datafusion::common::ScalarValue::try_from_array(b[0].column(0), 0).unwrap()
    }

    #[test]
    fn bitmaps_as_spark() {
        use datafusion::common::ScalarValue as S;
        let s = sluice::Session::builder().build().unwrap();
        // Spark 3.5.7's values.
        let v = one(&s, "SELECT substring(hex(bitmap_construct_agg(bitmap_bit_position(c))), 0, 6) FROM VALUES (1), (2), (3) t(c)");
        assert_eq!(v, S::Utf8(Some("070000".into())));
        let v = one(&s, "SELECT substring(hex(bitmap_or_agg(c)), 0, 6) FROM VALUES (unhex('10')), (unhex('20')), (unhex('40')) t(c)");
        assert_eq!(v, S::Utf8(Some("700000".into())));
        assert_eq!(
            one(&s, "SELECT bitmap_count(unhex('1010'))"),
            S::Int64(Some(2))
        );
        assert_eq!(
            one(&s, "SELECT bitmap_count(unhex('FFFF'))"),
            S::Int64(Some(16))
        );
        assert_eq!(
            one(&s, "SELECT bitmap_count(unhex(CAST(NULL AS STRING)))"),
            S::Int64(None)
        );
        let v = one(&s, "SELECT bitmap_construct_agg(i) FROM VALUES (1), (CAST(NULL AS INT)), (3), (3), (7) t(i)");
        let S::Binary(Some(b)) = v else {
            panic!("{v:?}")
        };
        assert_eq!(b.len(), 4096);
        assert_eq!(b[0], 0x8a);
        assert!(b[1..].iter().all(|x| *x == 0));
        let e = s
            .sql("SELECT bitmap_construct_agg(c) FROM VALUES (40000) t(c)")
            .and_then(|f| f.collect())
            .unwrap_err();
        assert!(e.is(crate::error::class::INVALID_BITMAP_POSITION), "{e}");
        let e = s
            .sql("SELECT bitmap_count(1.5)")
            .and_then(|f| f.collect())
            .unwrap_err();
        assert!(e.message().contains("bitmap_count"), "{e}");
    }
}
