//! Spark's `histogram_numeric(x, nb)`: an approximate histogram of at most `nb` bins, Spark's
//! `NumericHistogram` (Hive's, after Ben-Haim and Tom-Tov) step for step: bins sorted by
//! centre, a new value inserted as its own bin, the two closest bins merged while there are
//! too many (ties broken by `java.util.Random(31183)`, as Spark). The result is an array of
//! `struct<x, y: double>` with `x` of the input's type (Spark's
//! `spark.sql.legacy.histogramNumericPropagateInputType`, true by default).
//!
//! State: the bins (one BINARY field: `nb`, then each bin's centre and count), merged as
//! Spark merges partial histograms; memory is bounded by `nb`.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Float64Type};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use super::aggregates::agg_err;
use super::percentile::constant;

/// `java.util.Random`, for Spark's tie-breaking.
#[derive(Debug, Clone)]
struct JavaRandom(u64);

impl JavaRandom {
    fn new(seed: u64) -> Self {
        Self((seed ^ 0x5DEE_CE66D) & ((1 << 48) - 1))
    }
    fn next(&mut self, bits: u32) -> i64 {
        self.0 = (self.0.wrapping_mul(0x5DEE_CE66D).wrapping_add(0xB)) & ((1 << 48) - 1);
        (self.0 >> (48 - bits)) as i64
    }
    fn next_double(&mut self) -> f64 {
        (((self.next(26)) << 27) + self.next(27)) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// Spark's `NumericHistogram`.
#[derive(Debug, Clone)]
struct Histogram {
    nbins: usize,
    bins: Vec<(f64, f64)>,
    prng: JavaRandom,
}

impl Histogram {
    fn new(nbins: usize) -> Self {
        Self {
            nbins,
            bins: Vec::new(),
            prng: JavaRandom::new(31183),
        }
    }

    fn add(&mut self, v: f64) {
        let (mut l, mut r) = (0, self.bins.len());
        let mut bin = 0;
        while l < r {
            bin = (l + r) / 2;
            if self.bins[bin].0 > v {
                r = bin;
            } else if self.bins[bin].0 < v {
                bin += 1;
                l = bin;
            } else {
                break;
            }
        }
        if bin < self.bins.len() && self.bins[bin].0 == v {
            self.bins[bin].1 += 1.0;
        } else {
            self.bins.insert(bin, (v, 1.0));
            if self.bins.len() > self.nbins {
                self.trim();
            }
        }
    }

    fn merge(&mut self, other: &Histogram) {
        if other.bins.is_empty() {
            return;
        }
        if self.bins.is_empty() {
            self.nbins = other.nbins;
            self.bins = other.bins.clone();
            return;
        }
        self.bins.extend_from_slice(&other.bins);
        // Java's stable sort by centre.
        self.bins.sort_by(|a, b| a.0.total_cmp(&b.0));
        self.trim();
    }

    fn trim(&mut self) {
        while self.bins.len() > self.nbins {
            let b = &self.bins;
            let mut smallest = b[1].0 - b[0].0;
            let mut loc = 0;
            let mut count = 1;
            for i in 1..b.len() - 1 {
                let diff = b[i + 1].0 - b[i].0;
                if diff < smallest {
                    smallest = diff;
                    loc = i;
                    count = 1;
                } else if diff == smallest {
                    let r = self.prng.next_double();
                    count += 1;
                    if r <= 1.0 / count as f64 {
                        loc = i;
                    }
                }
            }
            let (x1, y1) = self.bins[loc];
            let (x2, y2) = self.bins[loc + 1];
            let d = y1 + y2;
            let mut x = x1 * (y1 / d);
            x += x2 / d * y2;
            self.bins[loc] = (x, d);
            self.bins.remove(loc + 1);
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = (self.nbins as u32).to_le_bytes().to_vec();
        for (x, y) in &self.bins {
            out.extend_from_slice(&x.to_le_bytes());
            out.extend_from_slice(&y.to_le_bytes());
        }
        out
    }

    fn from_bytes(b: &[u8]) -> DfResult<Self> {
        let bad = || {
            DataFusionError::Execution(format!(
                "a histogram_numeric state of {} bytes is not a Sluice histogram",
                b.len()
            ))
        };
        if b.len() < 4 || !(b.len() - 4).is_multiple_of(16) {
            return Err(bad());
        }
        let nbins = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        let f = |s: &[u8]| f64::from_le_bytes(s.try_into().unwrap_or([0; 8]));
        let bins = b[4..]
            .chunks_exact(16)
            .map(|c| (f(&c[..8]), f(&c[8..])))
            .collect();
        Ok(Self {
            nbins,
            bins,
            prng: JavaRandom::new(31183),
        })
    }
}

#[derive(Debug)]
struct HistogramAcc {
    hist: Histogram,
    x_type: DataType,
}

fn bin_fields(x: &DataType) -> Fields {
    Fields::from(vec![
        Field::new("x", x.clone(), true),
        Field::new("y", DataType::Float64, true),
    ])
}

impl Accumulator for HistogramAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> DfResult<()> {
        let v = super::percentile::as_doubles(&values[0])?;
        for x in v.as_primitive::<Float64Type>().iter().flatten() {
            self.hist.add(x);
        }
        Ok(())
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> DfResult<()> {
        let b = states[0].as_binary::<i32>();
        for i in 0..b.len() {
            if b.is_valid(i) {
                let other = Histogram::from_bytes(b.value(i))?;
                self.hist.merge(&other);
            }
        }
        Ok(())
    }
    fn state(&mut self) -> DfResult<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Binary(Some(self.hist.to_bytes()))])
    }
    fn evaluate(&mut self) -> DfResult<ScalarValue> {
        let fields = bin_fields(&self.x_type);
        let item = DataType::Struct(fields.clone());
        if self.hist.bins.is_empty() {
            return ScalarValue::try_from(&DataType::List(Arc::new(Field::new_list_field(
                item, true,
            ))));
        }
        let xs = self
            .hist
            .bins
            .iter()
            .map(|(x, _)| super::percentile::from_double(Some(*x), &self.x_type))
            .collect::<DfResult<Vec<_>>>()?;
        let xs = ScalarValue::iter_to_array(xs)?;
        let ys: ArrayRef = Arc::new(arrow::array::Float64Array::from_iter_values(
            self.hist.bins.iter().map(|(_, y)| *y),
        ));
        let s = arrow::array::StructArray::try_new(fields, vec![xs, ys], None)?;
        let list = arrow::array::ListArray::try_new(
            Arc::new(Field::new_list_field(item, true)),
            arrow::buffer::OffsetBuffer::from_lengths([s.len()]),
            Arc::new(s),
            None,
        )?;
        Ok(ScalarValue::List(Arc::new(list)))
    }
    fn size(&self) -> usize {
        size_of_val(self) + self.hist.bins.capacity() * 16
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct HistogramNumeric {
    signature: Signature,
}

impl AggregateUDFImpl for HistogramNumeric {
    fn name(&self) -> &str {
        "histogram_numeric"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        match arg_types {
            [x, nb] => {
                let x = super::percentile::approx_input("histogram_numeric", x)?;
                if !nb.is_integer() {
                    return Err(agg_err(
                        crate::error::class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                        format!("the nb of `histogram_numeric` must be an INT constant, not {nb}"),
                    ));
                }
                Ok(vec![x, DataType::Int64])
            }
            _ => Err(agg_err(
                crate::error::class::WRONG_NUM_ARGS,
                format!(
                    "`histogram_numeric` takes (expr, nb), not {} arguments",
                    arg_types.len()
                ),
            )),
        }
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::List(Arc::new(Field::new_list_field(
            DataType::Struct(bin_fields(&arg_types[0])),
            true,
        ))))
    }
    fn accumulator(&self, args: AccumulatorArgs) -> DfResult<Box<dyn Accumulator>> {
        let nb = match constant(&args.exprs[1])? {
            Some(ScalarValue::Int64(Some(n))) if (2..=i32::MAX as i64).contains(&n) => n as usize,
            v => {
                return Err(agg_err(
                    crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE,
                    format!(
                        "The nb of `histogram_numeric` must be a constant between [2, {}] \
                         (current value = {v:?})",
                        i32::MAX
                    ),
                ))
            }
        };
        Ok(Box::new(HistogramAcc {
            hist: Histogram::new(nb),
            x_type: args.expr_fields[0].data_type().clone(),
        }))
    }
    fn state_fields(&self, args: StateFieldsArgs) -> DfResult<Vec<FieldRef>> {
        Ok(vec![Arc::new(Field::new(
            format!("{}[bins]", args.name),
            DataType::Binary,
            true,
        ))])
    }
}

pub(super) fn udafs() -> Vec<AggregateUDF> {
    vec![AggregateUDF::new_from_impl(HistogramNumeric {
        signature: Signature::user_defined(Volatility::Immutable),
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values: &[f64], nb: usize) -> Vec<(f64, f64)> {
        let mut h = Histogram::new(nb);
        values.iter().for_each(|v| h.add(*v));
        h.bins
    }

    #[test]
    fn bins_as_spark() {
        // Spark 3.5.7.
        assert_eq!(
            hist(&[0.0, 1.0, 2.0, 10.0], 5),
            vec![(0.0, 1.0), (1.0, 1.0), (2.0, 1.0), (10.0, 1.0)]
        );
        assert_eq!(hist(&[1.0, 2.0, 4.0, 5.0], 2), vec![(1.5, 2.0), (4.5, 2.0)]);
        let h = hist(&[1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0], 3);
        let xs: Vec<i64> = h.iter().map(|b| b.0 as i64).collect();
        assert_eq!(xs, vec![2, 10, 21]);
        assert_eq!(
            h.iter().map(|b| b.1).collect::<Vec<_>>(),
            vec![4.0, 2.0, 1.0]
        );
        // Equal gaps: Spark's java.util.Random(31183) picks the pair to merge.
        assert_eq!(hist(&[1.0, 2.0, 3.0, 4.0], 2), vec![(2.0, 3.0), (4.0, 1.0)]);
        assert_eq!(
            hist(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], 3),
            vec![(2.0, 3.0), (4.5, 2.0), (6.5, 2.0)]
        );
    }

    #[test]
    fn state_round_trips_and_merges() {
        let mut a = Histogram::new(3);
        [1.0, 2.0].iter().for_each(|v| a.add(*v));
        let mut b = Histogram::from_bytes(&a.to_bytes()).unwrap();
        assert_eq!(b.bins, a.bins);
        let mut c = Histogram::new(3);
        [3.0, 10.0].iter().for_each(|v| c.add(*v));
        b.merge(&c);
        assert_eq!(b.bins.len(), 3);
        assert_eq!(b.bins.iter().map(|x| x.1).sum::<f64>(), 4.0);
        assert!(Histogram::from_bytes(&[1, 2]).is_err());
    }

    #[test]
    fn sql_and_errors() {
        let s = sluice::Session::builder().build().unwrap();
        let b = s
            .sql("SELECT histogram_numeric(c, 5) FROM VALUES (0), (1), (2), (10) t(c)")
            .unwrap()
            .collect()
            .unwrap();
        let b: Vec<_> = b.iter().filter(|b| b.num_rows() > 0).collect();
        let l = b[0].column(0).as_list::<i32>().value(0);
        assert_eq!(l.len(), 4);
        let e = s
            .sql("SELECT histogram_numeric(c, 1) FROM VALUES (1) t(c)")
            .and_then(|f| f.collect())
            .unwrap_err();
        assert!(
            e.is(crate::error::class::DATATYPE_MISMATCH_VALUE_OUT_OF_RANGE),
            "{e}"
        );
    }
}
