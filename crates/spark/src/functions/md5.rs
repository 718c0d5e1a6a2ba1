//! Spark's `md5(expr)`: the MD5 digest of a string or binary as 32 lower-case hex digits.
//! (DataFusion's `md5` needs its `crypto_expressions` feature, which Sluice does not build.)

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// MD5 (RFC 1321).
pub(super) fn md5(data: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let (mut a0, mut b0, mut c0, mut d0) =
        (0x67452301u32, 0xefcdab89u32, 0x98badcfeu32, 0x10325476u32);
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_le_bytes());
    for chunk in msg.chunks(64) {
        let m: Vec<u32> = chunk
            .chunks(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(m[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, v) in [a0, b0, c0, d0].iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Md5 {
    signature: Signature,
}

impl ScalarUDFImpl for Md5 {
    fn name(&self) -> &str {
        "md5"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        Ok(arg_types.iter().map(|_| DataType::Binary).collect())
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let scalar = matches!(args.args[0], ColumnarValue::Scalar(_));
        let a = args.args[0].to_array(args.number_rows)?;
        let b = a.as_binary::<i32>();
        let out: StringArray = (0..b.len())
            .map(|i| {
                b.is_valid(i).then(|| {
                    md5(b.value(i))
                        .iter()
                        .map(|x| format!("{x:02x}"))
                        .collect::<String>()
                })
            })
            .collect();
        let out: ArrayRef = Arc::new(out);
        super::columnar(out, scalar)
    }
}

pub(super) fn udf() -> ScalarUDF {
    ScalarUDF::new_from_impl(Md5 {
        signature: Signature::user_defined(Volatility::Immutable),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn md5_matches_rfc_1321() {
        let hex = |d: [u8; 16]| d.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(hex(super::md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(super::md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
    }
}
