//! Spark's `hash(expr, ...)`: Murmur3 x86 32-bit with seed 42 over every argument in turn, as
//! Spark's `Murmur3Hash` expression computes it (`HashExpression.computeHash`).
//!
//! Each value's hash seeds the next: an INT-like value (BOOLEAN as 0/1, TINYINT, SMALLINT, INT,
//! DATE, YEAR-MONTH interval) is hashed as a 4-byte int, a BIGINT-like one (BIGINT, TIMESTAMP,
//! TIMESTAMP_NTZ, DAY-TIME interval) as an 8-byte long, FLOAT/DOUBLE by their bits (`-0.0` as 0,
//! NaN canonical), DECIMAL with precision up to 18 by its unscaled long and beyond by the bytes of
//! its unscaled big integer, STRING/BINARY by their bytes with Spark's tail rule (each trailing
//! byte mixed as a signed int: Spark's `hashUnsafeBytes`, not standard Murmur3); arrays, maps
//! and structs hash their elements, entries (key then value) and fields in order. A null leaves
//! the running hash as it is.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Int32Array};
use arrow::datatypes::*;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

const SEED: u32 = 42;

fn mix_k1(k: u32) -> u32 {
    k.wrapping_mul(0xcc9e_2d51)
        .rotate_left(15)
        .wrapping_mul(0x1b87_3593)
}

fn mix_h1(h: u32, k: u32) -> u32 {
    (h ^ k)
        .rotate_left(13)
        .wrapping_mul(5)
        .wrapping_add(0xe654_6b64)
}

fn fmix(mut h: u32, len: u32) -> u32 {
    h ^= len;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

fn hash_int(v: i32, seed: u32) -> u32 {
    fmix(mix_h1(seed, mix_k1(v as u32)), 4)
}

fn hash_long(v: i64, seed: u32) -> u32 {
    let h = mix_h1(seed, mix_k1(v as u32));
    fmix(mix_h1(h, mix_k1((v >> 32) as u32)), 8)
}

/// Spark's `Murmur3_x86_32.hashUnsafeBytes`: whole little-endian ints, then each remaining
/// byte as a sign-extended int.
fn hash_bytes(b: &[u8], seed: u32) -> u32 {
    let aligned = b.len() - b.len() % 4;
    let mut h = seed;
    for w in b[..aligned].chunks_exact(4) {
        h = mix_h1(h, mix_k1(u32::from_le_bytes([w[0], w[1], w[2], w[3]])));
    }
    for &x in &b[aligned..] {
        h = mix_h1(h, mix_k1(x as i8 as i32 as u32));
    }
    fmix(h, b.len() as u32)
}

/// The minimal big-endian two's complement bytes of `v` (Java's `BigInteger.toByteArray`).
fn big_integer_bytes(v: i128) -> Vec<u8> {
    let all = v.to_be_bytes();
    let mut start = 0;
    while start + 1 < all.len() {
        let (b, next) = (all[start], all[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    all[start..].to_vec()
}

/// The running hash `seed` updated with row `i` of `a`.
fn hash_value(a: &dyn Array, i: usize, seed: u32) -> DfResult<u32> {
    if a.is_null(i) {
        return Ok(seed);
    }
    Ok(match a.data_type() {
        DataType::Null => seed,
        DataType::Boolean => hash_int(a.as_boolean().value(i) as i32, seed),
        DataType::Int8 => hash_int(a.as_primitive::<Int8Type>().value(i) as i32, seed),
        DataType::Int16 => hash_int(a.as_primitive::<Int16Type>().value(i) as i32, seed),
        DataType::Int32 => hash_int(a.as_primitive::<Int32Type>().value(i), seed),
        DataType::Date32 => hash_int(a.as_primitive::<Date32Type>().value(i), seed),
        DataType::Interval(IntervalUnit::YearMonth) => {
            hash_int(a.as_primitive::<IntervalYearMonthType>().value(i), seed)
        }
        DataType::Int64 => hash_long(a.as_primitive::<Int64Type>().value(i), seed),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            hash_long(a.as_primitive::<TimestampMicrosecondType>().value(i), seed)
        }
        DataType::Duration(TimeUnit::Microsecond) => {
            hash_long(a.as_primitive::<DurationMicrosecondType>().value(i), seed)
        }
        DataType::Float32 => {
            let f = a.as_primitive::<Float32Type>().value(i);
            let bits = if f == 0.0 {
                0
            } else if f.is_nan() {
                0x7fc0_0000
            } else {
                f.to_bits() as i32
            };
            hash_int(bits, seed)
        }
        DataType::Float64 => {
            let d = a.as_primitive::<Float64Type>().value(i);
            let bits = if d == 0.0 {
                0
            } else if d.is_nan() {
                0x7ff8_0000_0000_0000
            } else {
                d.to_bits() as i64
            };
            hash_long(bits, seed)
        }
        DataType::Decimal128(p, _) => {
            let v = a.as_primitive::<Decimal128Type>().value(i);
            if *p <= 18 {
                hash_long(v as i64, seed)
            } else {
                hash_bytes(&big_integer_bytes(v), seed)
            }
        }
        DataType::Utf8 => hash_bytes(a.as_string::<i32>().value(i).as_bytes(), seed),
        DataType::LargeUtf8 => hash_bytes(a.as_string::<i64>().value(i).as_bytes(), seed),
        DataType::Utf8View => hash_bytes(a.as_string_view().value(i).as_bytes(), seed),
        DataType::Binary => hash_bytes(a.as_binary::<i32>().value(i), seed),
        DataType::LargeBinary => hash_bytes(a.as_binary::<i64>().value(i), seed),
        DataType::BinaryView => hash_bytes(a.as_binary_view().value(i), seed),
        DataType::List(_) => fold(&a.as_list::<i32>().value(i), seed)?,
        DataType::LargeList(_) => fold(&a.as_list::<i64>().value(i), seed)?,
        DataType::FixedSizeList(_, _) => fold(&a.as_fixed_size_list().value(i), seed)?,
        DataType::Struct(_) => {
            let s = a.as_struct();
            let mut h = seed;
            for c in s.columns() {
                h = hash_value(c.as_ref(), i, h)?;
            }
            h
        }
        DataType::Map(_, _) => {
            let entries = a.as_map().value(i);
            let (k, v) = (entries.column(0), entries.column(1));
            let mut h = seed;
            for j in 0..entries.len() {
                h = hash_value(k.as_ref(), j, h)?;
                h = hash_value(v.as_ref(), j, h)?;
            }
            h
        }
        DataType::Dictionary(_, _) => {
            let values = arrow::compute::cast(&a.slice(i, 1), &dictionary_value_type(a))?;
            hash_value(values.as_ref(), 0, seed)?
        }
        other => {
            return Err(DataFusionError::Plan(format!(
                "hash: Sluice cannot hash a value of type {other} yet (not supported yet); cast \
                 it to a string first"
            )))
        }
    })
}

/// Whether `t` is or holds a MAP.
fn has_map(t: &DataType) -> bool {
    match t {
        DataType::Map(_, _) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            has_map(f.data_type())
        }
        DataType::Struct(fs) => fs.iter().any(|f| has_map(f.data_type())),
        DataType::Dictionary(_, v) => has_map(v),
        _ => false,
    }
}

fn dictionary_value_type(a: &dyn Array) -> DataType {
    match a.data_type() {
        DataType::Dictionary(_, v) => v.as_ref().clone(),
        other => other.clone(),
    }
}

fn fold(values: &ArrayRef, seed: u32) -> DfResult<u32> {
    let mut h = seed;
    for j in 0..values.len() {
        h = hash_value(values.as_ref(), j, h)?;
    }
    Ok(h)
}

/// Spark's `hash(expr1, expr2, ...)`: an INT.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SparkHash {
    signature: Signature,
}

impl ScalarUDFImpl for SparkHash {
    fn name(&self) -> &str {
        "hash"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        if arg_types.is_empty() {
            return Err(DataFusionError::Plan(
                "[WRONG_NUM_ARGS.WITHOUT_SUGGESTION] The `hash` requires at least one argument \
                 (> 0 parameters) but the actual number is 0: give it the values to hash, e.g. \
                 hash(col)"
                    .into(),
            ));
        }
        if arg_types.iter().any(has_map) {
            return Err(DataFusionError::Plan(
                "[DATATYPE_MISMATCH.HASH_MAP_TYPE] Input to the function `hash` cannot contain \
                 elements of the \"MAP\" type: in Spark, equal maps may have different hash \
                 codes, so hash is refused on maps. Hash map_entries(m) (sorted with \
                 array_sort) instead."
                    .into(),
            ));
        }
        Ok(DataType::Int32)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(rows))
            .collect::<DfResult<Vec<_>>>()?;
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            let mut h = SEED;
            for a in &arrays {
                h = hash_value(a.as_ref(), i, h)?;
            }
            out.push(h as i32);
        }
        super::columnar(Arc::new(Int32Array::from(out)), scalar)
    }
}

pub(super) fn udfs() -> Vec<ScalarUDF> {
    vec![ScalarUDF::new_from_impl(SparkHash {
        signature: Signature::one_of(
            vec![TypeSignature::VariadicAny, TypeSignature::Nullary],
            Volatility::Immutable,
        ),
    })]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spark_hash(sql: &str) -> Vec<Option<i32>> {
        let s = sluice::Session::builder().build().unwrap();
        let batches = s.sql(sql).unwrap().collect().unwrap();
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_primitive::<Int32Type>().clone();
                (0..c.len())
                    .map(move |i| (!c.is_null(i)).then(|| c.value(i)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn hash_matches_spark() {
        // Values from PySpark 3.5.7: SELECT hash(...).
        assert_eq!(
            spark_hash("SELECT hash('Spark', array(123), 2)"),
            vec![Some(-1321691492)]
        );
        // A null argument leaves the hash as it is: hash(NULL) is the seed, 42.
        assert_eq!(spark_hash("SELECT hash(NULL)"), vec![Some(42)]);
        // Murmur3 of the unaligned tail, byte by byte as Spark does.
        assert_eq!(hash_bytes(b"Spark", SEED) as i32, 228_093_765);
    }

    #[test]
    fn hash_of_a_column_is_per_row() {
        let got = spark_hash("SELECT hash(x) FROM (VALUES (1), (NULL), (1)) AS t(x)");
        assert_eq!(got[0], got[2]);
        assert_eq!(got[1], Some(42));
        assert_eq!(got[0], Some(hash_int(1, SEED) as i32));
    }

    #[test]
    fn hash_without_arguments_is_refused() {
        let s = sluice::Session::builder().build().unwrap();
        let e = s.sql("SELECT hash()").unwrap_err();
        assert!(
            e.message().contains("requires at least one argument"),
            "{e}"
        );
        // Spark 3.5.7: DATATYPE_MISMATCH.HASH_MAP_TYPE.
        let e = s.sql("SELECT hash(map(1, 'a'))").unwrap_err();
        assert!(e.message().contains("HASH_MAP_TYPE"), "{e}");
    }

    #[test]
    fn big_integer_bytes_are_javas() {
        assert_eq!(big_integer_bytes(0), vec![0]);
        assert_eq!(big_integer_bytes(127), vec![0x7f]);
        assert_eq!(big_integer_bytes(128), vec![0, 0x80]);
        assert_eq!(big_integer_bytes(-1), vec![0xff]);
        assert_eq!(big_integer_bytes(-129), vec![0xff, 0x7f]);
    }
}
