//! Spark's AES functions: `aes_encrypt(input, key[, mode[, padding[, iv[, aad]]]])`,
//! `aes_decrypt(input, key[, mode[, padding[, aad]]])` and `try_aes_decrypt` (null where
//! `aes_decrypt` fails).
//!
//! Spark 3.5's rules (`ExpressionImplUtils.aesInternal`):
//! - keys of 16, 24 or 32 bytes (AES-128/192/256), else `INVALID_PARAMETER_VALUE.AES_KEY_LENGTH`;
//! - mode and padding are case-insensitive: `GCM` with `NONE`/`DEFAULT` (the default mode: a
//!   12-byte IV, a 16-byte tag, output `iv || ciphertext || tag`), `CBC` with `PKCS`/`DEFAULT`
//!   (a 16-byte IV, PKCS#7 padding, output `iv || ciphertext`), `ECB` with `PKCS`/`DEFAULT` (no
//!   IV); anything else is `UNSUPPORTED_FEATURE.AES_MODE`;
//! - an empty or absent IV makes a random one (so `aes_encrypt` without an IV differs per call and
//!   per row); an IV for ECB is `UNSUPPORTED_FEATURE.AES_MODE_IV`, an IV of the wrong length
//!   `INVALID_PARAMETER_VALUE.AES_IV_LENGTH`; a non-empty AAD is GCM-only
//!   (`UNSUPPORTED_FEATURE.AES_MODE_AAD` for CBC; ECB decryption ignores it, as Spark does);
//! - a failed decryption (bad padding, tag mismatch, wrong length) is
//!   `INVALID_PARAMETER_VALUE.AES_CRYPTO_ERROR`;
//! - a null argument gives null. Input, key, IV and AAD are BINARY (a STRING is cast to its UTF-8
//!   bytes); mode and padding are STRING and may differ per row.
//!
//! The ciphers are RustCrypto's (`aes`, `aes-gcm`, `cbc`, `ecb`); random IVs come from the OS
//! (`getrandom`).

use std::sync::Arc;

use aes::cipher::block_padding::Pkcs7;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyInit, KeyIvInit};
use aes_gcm::aead::{Aead, Payload};
use arrow::array::{Array, ArrayRef, AsArray, BinaryBuilder};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::error::{class, SluiceError};
use crate::schema::spark_type_name;

/// The three functions.
pub(super) fn udfs() -> Vec<ScalarUDF> {
    [Op::Encrypt, Op::Decrypt, Op::TryDecrypt]
        .into_iter()
        .map(|op| {
            // `aes_encrypt` draws a fresh IV on every call unless given one.
            let volatility = match op {
                Op::Encrypt => Volatility::Volatile,
                _ => Volatility::Immutable,
            };
            ScalarUDF::new_from_impl(Aes {
                op,
                signature: Signature::user_defined(volatility),
            })
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Encrypt,
    Decrypt,
    TryDecrypt,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Encrypt => "aes_encrypt",
            Op::Decrypt => "aes_decrypt",
            Op::TryDecrypt => "try_aes_decrypt",
        }
    }
    /// The arguments in order; `true` = BINARY, `false` = STRING.
    fn params(self) -> &'static [(&'static str, bool)] {
        match self {
            Op::Encrypt => &[
                ("input", true),
                ("key", true),
                ("mode", false),
                ("padding", false),
                ("iv", true),
                ("aad", true),
            ],
            _ => &[
                ("input", true),
                ("key", true),
                ("mode", false),
                ("padding", false),
                ("aad", true),
            ],
        }
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Aes {
    op: Op,
    signature: Signature,
}

fn query_err(class: &'static str, msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::query(class, msg)))
}

fn input_err(class: &'static str, msg: String) -> DataFusionError {
    DataFusionError::External(Box::new(SluiceError::input(class, msg)))
}

impl ScalarUDFImpl for Aes {
    fn name(&self) -> &str {
        self.op.name()
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        // DataFusion hides a coercion error's class in its own message: the types are checked
        // again in `return_field_from_args`, whose error reaches the user as it is.
        Ok(self
            .checked_types(arg_types)
            .unwrap_or_else(|_| arg_types.to_vec()))
    }
    fn return_type(&self, _arg_types: &[DataType]) -> DfResult<DataType> {
        Ok(DataType::Binary)
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> DfResult<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        self.checked_types(&types)?;
        Ok(Arc::new(Field::new(self.name(), DataType::Binary, true)))
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        self.invoke(args)
    }
}

impl Aes {
    /// The types `arg_types` are coerced to, or Spark's error for them.
    fn checked_types(&self, arg_types: &[DataType]) -> DfResult<Vec<DataType>> {
        let name = self.op.name();
        let params = self.op.params();
        if arg_types.len() < 2 || arg_types.len() > params.len() {
            let counts: Vec<String> = (2..=params.len()).map(|n| n.to_string()).collect();
            return Err(query_err(
                class::WRONG_NUM_ARGS,
                format!(
                    "The `{name}` requires [{}] parameters but the actual number is {}: \
                     {name}({}).",
                    counts.join(", "),
                    arg_types.len(),
                    params
                        .iter()
                        .map(|(p, _)| *p)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        arg_types
            .iter()
            .zip(params)
            .enumerate()
            .map(|(i, (t, (param, binary)))| {
                use DataType as D;
                let ok_binary = matches!(
                    t,
                    D::Null
                        | D::Utf8
                        | D::LargeUtf8
                        | D::Utf8View
                        | D::Binary
                        | D::LargeBinary
                        | D::BinaryView
                        | D::FixedSizeBinary(_)
                );
                let ok_string = !t.is_nested() && !matches!(t, D::Dictionary(..));
                match (binary, ok_binary, ok_string) {
                    (true, true, _) => Ok(D::Binary),
                    (false, _, true) => Ok(D::Utf8),
                    _ => Err(query_err(
                        class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE,
                        format!(
                            "Cannot resolve \"{name}\" due to data type mismatch: parameter {} \
                             (`{param}`) requires the \"{}\" type, however it has the type \
                             \"{}\". Pass a {}.",
                            i + 1,
                            if *binary { "BINARY" } else { "STRING" },
                            spark_type_name(t),
                            if *binary {
                                "BINARY or STRING value (e.g. unhex('...') or unbase64('...'))"
                            } else {
                                "STRING such as 'GCM'"
                            },
                        ),
                    )),
                }
            })
            .collect()
    }

    fn invoke(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        let rows = args.number_rows;
        // One value per row for aes_encrypt (a random IV each); a scalar when every argument is
        // one otherwise.
        let scalar = self.op != Op::Encrypt
            && args
                .args
                .iter()
                .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if scalar { 1 } else { rows };
        let cols: Vec<ArrayRef> = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<DfResult<_>>()?;
        let params = self.op.params();
        let mut binary = Vec::new();
        let mut strings = Vec::new();
        for (col, (_, is_binary)) in cols.iter().zip(params) {
            if *is_binary {
                binary.push(Some(cast(col, &DataType::Binary)?));
                strings.push(None);
            } else {
                strings.push(Some(cast(col, &DataType::Utf8)?));
                binary.push(None);
            }
        }
        let bin = |k: usize, row: usize| -> Option<Option<&[u8]>> {
            match binary.get(k).and_then(|c| c.as_ref()) {
                None => Some(Some(&[][..])), // absent: empty (Spark's default '')
                Some(c) => {
                    let c = c.as_binary::<i32>();
                    (!c.is_null(row)).then(|| Some(c.value(row)))
                }
            }
        };
        let text = |k: usize, row: usize, default: &'static str| -> Option<&str> {
            match strings.get(k).and_then(|c| c.as_ref()) {
                None => Some(default),
                Some(c) => {
                    let c = c.as_string::<i32>();
                    (!c.is_null(row)).then(|| c.value(row))
                }
            }
        };
        let mut out = BinaryBuilder::with_capacity(n, 0);
        for row in 0..n {
            let (Some(Some(input)), Some(Some(key))) = (bin(0, row), bin(1, row)) else {
                out.append_null();
                continue;
            };
            let (Some(mode), Some(padding)) = (text(2, row, "GCM"), text(3, row, "DEFAULT")) else {
                out.append_null();
                continue;
            };
            let result = match self.op {
                Op::Encrypt => {
                    let (Some(Some(iv)), Some(Some(aad))) = (bin(4, row), bin(5, row)) else {
                        out.append_null();
                        continue;
                    };
                    encrypt(input, key, mode, padding, iv, aad)
                }
                Op::Decrypt | Op::TryDecrypt => {
                    let Some(Some(aad)) = bin(4, row) else {
                        out.append_null();
                        continue;
                    };
                    decrypt(input, key, mode, padding, aad)
                }
            };
            match result {
                Ok(bytes) => out.append_value(bytes),
                Err(_) if self.op == Op::TryDecrypt => out.append_null(),
                Err(e) => return Err(e.into_df(self.op.name())),
            }
        }
        super::columnar(Arc::new(out.finish()), scalar)
    }
}

/// Spark's three supported (mode, padding) pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ecb,
    Cbc,
    Gcm,
}

impl Mode {
    fn iv_len(self) -> usize {
        match self {
            Mode::Ecb => 0,
            Mode::Cbc => 16,
            Mode::Gcm => 12,
        }
    }
}

/// Why a row failed, in Spark's classes.
#[derive(Debug, Clone, PartialEq)]
enum AesError {
    KeyLength(usize),
    Mode(String, String),
    IvUnsupported(String),
    IvLength(String, usize),
    AadUnsupported(String),
    Crypto(String),
    Random(String),
}

impl AesError {
    fn into_df(self, name: &str) -> DataFusionError {
        match self {
            AesError::KeyLength(n) => query_err(
                class::INVALID_PARAMETER_VALUE_AES_KEY_LENGTH,
                format!(
                    "The value of parameter(s) `key` in `{name}` is invalid: expects a binary \
                     value with 16, 24 or 32 bytes, but got {n} bytes. Use a key of 16 \
                     (AES-128), 24 (AES-192) or 32 (AES-256) bytes."
                ),
            ),
            AesError::Mode(mode, padding) => query_err(
                class::UNSUPPORTED_FEATURE_AES_MODE,
                format!(
                    "The feature is not supported: AES-{mode} with the padding {padding} by the \
                     `{name}` function. Use mode 'GCM' (padding 'NONE' or 'DEFAULT'), or 'CBC' \
                     or 'ECB' (padding 'PKCS' or 'DEFAULT')."
                ),
            ),
            AesError::IvUnsupported(mode) => query_err(
                class::UNSUPPORTED_FEATURE_AES_MODE_IV,
                format!(
                    "The feature is not supported: `{name}` with AES-{mode} does not support \
                     initialization vectors (IVs). Pass an empty IV, or use 'GCM' or 'CBC'."
                ),
            ),
            AesError::IvLength(mode, n) => query_err(
                class::INVALID_PARAMETER_VALUE_AES_IV_LENGTH,
                format!(
                    "The value of parameter(s) `iv` in `{name}` is invalid: supports 16-byte \
                     CBC IVs and 12-byte GCM IVs, but got {n} bytes for {mode}."
                ),
            ),
            AesError::AadUnsupported(mode) => query_err(
                class::UNSUPPORTED_FEATURE_AES_MODE_AAD,
                format!(
                    "The feature is not supported: `{name}` with AES-{mode} does not support \
                     additional authenticated data (AAD). Pass an empty AAD, or use 'GCM'."
                ),
            ),
            AesError::Crypto(detail) => input_err(
                class::INVALID_PARAMETER_VALUE_AES_CRYPTO_ERROR,
                format!(
                    "The value of parameter(s) `expr`, `key` in `{name}` is invalid: detail \
                     message: {detail}. Check that the input was encrypted with this key, mode \
                     and AAD, or use try_aes_decrypt to get null instead."
                ),
            ),
            AesError::Random(detail) => {
                DataFusionError::External(Box::new(SluiceError::internal(format!(
                    "{name}: the operating system gave no random bytes for the IV ({detail}); \
                     pass an explicit IV"
                ))))
            }
        }
    }
}

fn mode_of(mode: &str, padding: &str) -> Result<Mode, AesError> {
    let is = |a: &str, b: &str| a.eq_ignore_ascii_case(b);
    let pkcs = is(padding, "PKCS") || is(padding, "DEFAULT");
    let none = is(padding, "NONE") || is(padding, "DEFAULT");
    match () {
        _ if is(mode, "ECB") && pkcs => Ok(Mode::Ecb),
        _ if is(mode, "CBC") && pkcs => Ok(Mode::Cbc),
        _ if is(mode, "GCM") && none => Ok(Mode::Gcm),
        _ => Err(AesError::Mode(mode.to_string(), padding.to_string())),
    }
}

fn check_key(key: &[u8]) -> Result<(), AesError> {
    match key.len() {
        16 | 24 | 32 => Ok(()),
        n => Err(AesError::KeyLength(n)),
    }
}

/// Runs `$body` with `$c` bound to the AES type of `$key`'s length (checked before).
macro_rules! with_aes {
    ($key:expr, $c:ident => $body:expr) => {
        match $key.len() {
            16 => {
                type $c = aes::Aes128;
                $body
            }
            24 => {
                type $c = aes::Aes192;
                $body
            }
            _ => {
                type $c = aes::Aes256;
                $body
            }
        }
    };
}

fn crypto(e: impl std::fmt::Display) -> AesError {
    AesError::Crypto(e.to_string())
}

/// `aes_encrypt` of one row.
fn encrypt(
    input: &[u8],
    key: &[u8],
    mode_name: &str,
    padding: &str,
    iv: &[u8],
    aad: &[u8],
) -> Result<Vec<u8>, AesError> {
    check_key(key)?;
    let mode = mode_of(mode_name, padding)?;
    let iv: Vec<u8> = if iv.is_empty() {
        let mut fresh = vec![0u8; mode.iv_len()];
        getrandom::fill(&mut fresh).map_err(|e| AesError::Random(e.to_string()))?;
        fresh
    } else if mode == Mode::Ecb {
        return Err(AesError::IvUnsupported(mode_name.to_string()));
    } else {
        iv.to_vec()
    };
    if iv.len() != mode.iv_len() {
        return Err(AesError::IvLength(mode_name.to_string(), iv.len()));
    }
    if !aad.is_empty() && mode != Mode::Gcm {
        return Err(AesError::AadUnsupported(mode_name.to_string()));
    }
    let body = match mode {
        Mode::Ecb => with_aes!(key, C => ecb::Encryptor::<C>::new_from_slice(key)
            .map_err(crypto)?
            .encrypt_padded_vec_mut::<Pkcs7>(input)),
        Mode::Cbc => with_aes!(key, C => cbc::Encryptor::<C>::new_from_slices(key, &iv)
            .map_err(crypto)?
            .encrypt_padded_vec_mut::<Pkcs7>(input)),
        Mode::Gcm => {
            with_aes!(key, C => aes_gcm::AesGcm::<C, aes_gcm::aead::consts::U12>::new_from_slice(key)
            .map_err(crypto)?
            .encrypt(aes_gcm::Nonce::from_slice(&iv), Payload { msg: input, aad })
            .map_err(|_| AesError::Crypto("encryption failed".into()))?)
        }
    };
    let mut out = iv;
    out.extend_from_slice(&body);
    Ok(out)
}

/// `aes_decrypt` of one row.
fn decrypt(
    input: &[u8],
    key: &[u8],
    mode_name: &str,
    padding: &str,
    aad: &[u8],
) -> Result<Vec<u8>, AesError> {
    check_key(key)?;
    let mode = mode_of(mode_name, padding)?;
    if !aad.is_empty() && mode == Mode::Cbc {
        return Err(AesError::AadUnsupported(mode_name.to_string()));
    }
    let need = mode.iv_len() + if mode == Mode::Gcm { 16 } else { 0 };
    if input.len() < need {
        return Err(AesError::Crypto(format!(
            "the input has {} bytes, fewer than the {} of the {mode_name} IV{}",
            input.len(),
            need,
            if mode == Mode::Gcm { " and tag" } else { "" }
        )));
    }
    let (iv, body) = input.split_at(mode.iv_len());
    let not_blocks = || {
        AesError::Crypto(
            "Input length must be multiple of 16 when decrypting with padded cipher".into(),
        )
    };
    let bad_padding = |_| {
        AesError::Crypto(
            "Given final block not properly padded. Such issues can arise if a bad key is used \
             during decryption"
                .into(),
        )
    };
    match mode {
        Mode::Ecb | Mode::Cbc if body.len() % 16 != 0 || body.is_empty() => Err(not_blocks()),
        Mode::Ecb => with_aes!(key, C => ecb::Decryptor::<C>::new_from_slice(key)
            .map_err(crypto)?
            .decrypt_padded_vec_mut::<Pkcs7>(body)
            .map_err(bad_padding)),
        Mode::Cbc => with_aes!(key, C => cbc::Decryptor::<C>::new_from_slices(key, iv)
            .map_err(crypto)?
            .decrypt_padded_vec_mut::<Pkcs7>(body)
            .map_err(bad_padding)),
        Mode::Gcm => {
            with_aes!(key, C => aes_gcm::AesGcm::<C, aes_gcm::aead::consts::U12>::new_from_slice(key)
            .map_err(crypto)?
            .decrypt(aes_gcm::Nonce::from_slice(iv), Payload { msg: body, aad })
            .map_err(|_| AesError::Crypto("Tag mismatch!".into())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> sluice::Session {
        sluice::Session::builder().build().unwrap()
    }

    /// The single value of a one-row, one-column query, rendered as text.
    fn one(sql: &str) -> Option<String> {
        let batches = session().sql(sql).unwrap().collect().unwrap();
        let col = batches[0].column(0);
        if col.is_null(0) {
            return None;
        }
        let v = cast(col, &DataType::Utf8).unwrap();
        Some(v.as_string::<i32>().value(0).to_string())
    }

    fn err(sql: &str) -> SluiceError {
        let s = session();
        match s.sql(sql) {
            Err(e) => e,
            Ok(df) => df.collect().unwrap_err(),
        }
    }

    const K16: &[u8] = b"0000111122223333";
    const K24: &[u8] = b"abcdefghijklmnop12345678";
    const K32: &[u8] = b"abcdefghijklmnop12345678ABCDEFGH";

    #[test]
    fn every_mode_and_key_size_round_trips() {
        for key in [K16, K24, K32] {
            for (mode, padding) in [("GCM", "NONE"), ("CBC", "PKCS"), ("ECB", "DEFAULT")] {
                for msg in [
                    &b""[..],
                    b"Spark",
                    b"exactly 16 bytes",
                    b"a longer message here",
                ] {
                    let ct = encrypt(msg, key, mode, padding, &[], &[]).unwrap();
                    let expected_len = match mode {
                        "GCM" => 12 + msg.len() + 16,
                        "CBC" => 16 + (msg.len() / 16 + 1) * 16,
                        _ => (msg.len() / 16 + 1) * 16,
                    };
                    assert_eq!(ct.len(), expected_len, "{mode} {}", msg.len());
                    assert_eq!(decrypt(&ct, key, mode, padding, &[]).unwrap(), msg);
                }
            }
        }
    }

    #[test]
    fn a_random_iv_differs_per_call_and_an_explicit_one_is_used() {
        let a = encrypt(b"Spark", K16, "GCM", "DEFAULT", &[], &[]).unwrap();
        let b = encrypt(b"Spark", K16, "GCM", "DEFAULT", &[], &[]).unwrap();
        assert_ne!(a, b);
        // Spark 3.5.7's values with a given IV.
        let iv = [0u8; 12];
        let ct = encrypt(b"Spark", K16, "GCM", "DEFAULT", &iv, &[]).unwrap();
        assert_eq!(
            hex(&ct),
            "00000000000000000000000046C4EF1C6A7041A6BEAD289645459AF972E4153D03"
        );
        let ct = encrypt(b"Spark", K16, "ecb", "pkcs", &[], &[]).unwrap();
        assert_eq!(hex(&ct), "348FF37EBDE05B7880BA339068FBDA5E");
    }

    #[test]
    fn gcm_aad_must_match_on_decryption() {
        let iv = [7u8; 12];
        let ct = encrypt(b"Spark", K32, "GCM", "DEFAULT", &iv, b"aad").unwrap();
        assert_eq!(
            decrypt(&ct, K32, "GCM", "DEFAULT", b"aad").unwrap(),
            b"Spark"
        );
        assert_eq!(
            decrypt(&ct, K32, "GCM", "DEFAULT", b"other"),
            Err(AesError::Crypto("Tag mismatch!".into()))
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02X}")).collect()
    }

    #[test]
    fn sql_round_trips_and_spark_values() {
        assert_eq!(
            one(
                "SELECT CAST(aes_decrypt(aes_encrypt('Spark SQL', '1234567890abcdef'), \
                 '1234567890abcdef') AS STRING)"
            )
            .as_deref(),
            Some("Spark SQL")
        );
        assert_eq!(
            one("SELECT base64(aes_encrypt('Spark SQL', '1234567890abcdef', 'ECB', 'PKCS'))")
                .as_deref(),
            Some("3lmwu+Mw0H3fi5NDvcu9lg==")
        );
        assert_eq!(
            one(
                "SELECT CAST(aes_decrypt(aes_encrypt('x', '1234567890abcdef', 'CBC'), \
                 '1234567890abcdef', 'cbc', 'default') AS STRING)"
            )
            .as_deref(),
            Some("x")
        );
        // Over a column: each row its own IV, each decrypts back.
        let s = session();
        let batches = s
            .sql(
                "SELECT CAST(aes_decrypt(aes_encrypt(x, '0000111122223333'), \
                 '0000111122223333') AS STRING) AS d, hex(aes_encrypt('same', \
                 '0000111122223333')) AS h FROM VALUES ('a'), ('b'), (NULL) AS t(x)",
            )
            .unwrap()
            .collect()
            .unwrap();
        let d = cast(batches[0].column(0), &DataType::Utf8).unwrap();
        let d = d.as_string::<i32>();
        assert_eq!(
            (0..3)
                .map(|i| (!d.is_null(i)).then(|| d.value(i)))
                .collect::<Vec<_>>(),
            [Some("a"), Some("b"), None]
        );
        let h = cast(batches[0].column(1), &DataType::Utf8).unwrap();
        let h = h.as_string::<i32>();
        assert_ne!(h.value(0), h.value(1));
    }

    /// The six `aes_encrypt` cases Spark 3.5.7 recorded (spark-functions/cases.json): three have
    /// no IV, so a random one; their outputs must decrypt back, the other three match exactly.
    #[test]
    fn sparks_recorded_encryptions() {
        for (sql, plain) in [
            (
                "SELECT CAST(aes_decrypt(unhex('E289CB32A3311FE992D749542AF52890028CC308E6993C29C4155D5AF7C57B735D'), '0000111122223333') AS STRING)",
                "Spark",
            ),
            (
                "SELECT CAST(aes_decrypt(unhex('C383107468B6C4AB992141473684CA19B915036EA227227865A5DDFD24F2DAF747B89FEE2C'), '0000111122223333', 'GCM') AS STRING)",
                "Spark SQL",
            ),
            (
                "SELECT CAST(aes_decrypt(unbase64('zT0zTSsJD5uLmOlxF2w/MiFqyEyAis6gcyBzcs/e+N4='), '1234567890abcdef', 'CBC', 'DEFAULT') AS STRING)",
                "Apache Spark",
            ),
            (
                "SELECT base64(aes_encrypt('Spark SQL', '1234567890abcdef', 'ECB', 'PKCS'))",
                "3lmwu+Mw0H3fi5NDvcu9lg==",
            ),
            (
                "SELECT base64(aes_encrypt('Spark', 'abcdefghijklmnop12345678ABCDEFGH', 'CBC', 'DEFAULT', unhex('00000000000000000000000000000000')))",
                "AAAAAAAAAAAAAAAAAAAAAPSd4mWyMZ5mhvjiAPQJnfg=",
            ),
            (
                "SELECT base64(aes_encrypt('Spark', 'abcdefghijklmnop12345678ABCDEFGH', 'GCM', 'DEFAULT', unhex('000000000000000000000000'), 'This is an AAD mixed into the input'))",
                "AAAAAAAAAAAAAAAAQiYi+sTLm7KD9UcZ2nlRdYDe/PX4",
            ),
        ] {
            assert_eq!(one(sql).as_deref(), Some(plain), "{sql}");
        }
    }

    #[test]
    fn nulls_give_null() {
        for sql in [
            "SELECT aes_encrypt(NULL, '0000111122223333')",
            "SELECT aes_encrypt('a', NULL)",
            "SELECT aes_encrypt('a', '0000111122223333', NULL)",
            "SELECT aes_encrypt('a', '0000111122223333', 'GCM', NULL)",
            "SELECT aes_encrypt('a', '0000111122223333', 'GCM', 'NONE', NULL)",
            "SELECT aes_encrypt('a', '0000111122223333', 'GCM', 'NONE', unhex('000000000000000000000000'), NULL)",
            "SELECT aes_decrypt(NULL, '0000111122223333')",
            "SELECT try_aes_decrypt(NULL, '0000111122223333')",
        ] {
            assert_eq!(one(sql), None, "{sql}");
        }
    }

    #[test]
    fn errors_have_sparks_classes_and_try_gives_null() {
        let cases = [
            (
                "SELECT aes_encrypt('Spark', 'short')",
                class::INVALID_PARAMETER_VALUE_AES_KEY_LENGTH,
                "got 5 bytes",
            ),
            (
                "SELECT aes_decrypt(unhex('00'), 'short')",
                class::INVALID_PARAMETER_VALUE_AES_KEY_LENGTH,
                "16, 24 or 32 bytes",
            ),
            (
                "SELECT aes_encrypt('Spark', '0000111122223333', 'CTR')",
                class::UNSUPPORTED_FEATURE_AES_MODE,
                "AES-CTR with the padding DEFAULT",
            ),
            (
                "SELECT aes_encrypt('Spark', '0000111122223333', 'GCM', 'PKCS')",
                class::UNSUPPORTED_FEATURE_AES_MODE,
                "AES-GCM with the padding PKCS",
            ),
            (
                "SELECT aes_encrypt('Spark', '0000111122223333', 'ECB', 'PKCS', unhex('00000000000000000000000000000000'))",
                class::UNSUPPORTED_FEATURE_AES_MODE_IV,
                "AES-ECB does not support initialization vectors",
            ),
            (
                "SELECT aes_encrypt('Spark', '0000111122223333', 'CBC', 'PKCS', unhex('0000'))",
                class::INVALID_PARAMETER_VALUE_AES_IV_LENGTH,
                "got 2 bytes for CBC",
            ),
            (
                "SELECT aes_encrypt('Spark', '0000111122223333', 'CBC', 'PKCS', unhex('00000000000000000000000000000000'), 'aad')",
                class::UNSUPPORTED_FEATURE_AES_MODE_AAD,
                "AES-CBC",
            ),
            (
                "SELECT aes_decrypt(unhex('00112233'), '0000111122223333', 'ECB')",
                class::INVALID_PARAMETER_VALUE_AES_CRYPTO_ERROR,
                "Input length must be multiple of 16",
            ),
            (
                "SELECT aes_decrypt(unhex('00112233445566778899AABBCCDDEEFF'), '0000111122223333', 'ECB')",
                class::INVALID_PARAMETER_VALUE_AES_CRYPTO_ERROR,
                "not properly padded",
            ),
            (
                "SELECT aes_decrypt(unhex('00112233445566778899AABBCCDDEEFF00112233445566778899AABBCCDDEEFF'), '0000111122223333', 'GCM')",
                class::INVALID_PARAMETER_VALUE_AES_CRYPTO_ERROR,
                "Tag mismatch!",
            ),
            (
                "SELECT aes_decrypt(unhex('0011'), '0000111122223333')",
                class::INVALID_PARAMETER_VALUE_AES_CRYPTO_ERROR,
                "fewer than the 28",
            ),
        ];
        for (sql, class, text) in cases {
            let e = err(sql);
            assert!(e.is(class), "{sql}: {e}");
            assert!(e.message().contains(text), "{sql}: {e}");
            if sql.contains("aes_decrypt") {
                let t = sql.replace("aes_decrypt", "try_aes_decrypt");
                assert_eq!(one(&t), None, "{t}");
            }
        }
        // ECB decryption ignores an AAD, as Spark's does.
        assert_eq!(
            one(
                "SELECT CAST(aes_decrypt(aes_encrypt('Spark', '0000111122223333', 'ECB'), \
                 '0000111122223333', 'ECB', 'PKCS', 'aad') AS STRING)"
            )
            .as_deref(),
            Some("Spark")
        );
    }

    #[test]
    fn bad_argument_types_and_counts_are_analysis_errors() {
        let e = err("SELECT aes_encrypt(1, '0000111122223333')");
        assert!(e.is(class::DATATYPE_MISMATCH_UNEXPECTED_INPUT_TYPE), "{e}");
        assert!(e.message().contains("\"BINARY\""), "{e}");
        let e = err("SELECT aes_encrypt('a', 'x', 'ECB', 'PKCS', unhex(''), unhex(''), 1)");
        assert!(e.is(class::WRONG_NUM_ARGS), "{e}");
        assert!(e.message().contains("[2, 3, 4, 5, 6]"), "{e}");
        let e = err("SELECT aes_decrypt(unhex('00'), 'x', 'ECB', 'PKCS', unhex(''), unhex(''))");
        assert!(e.is(class::WRONG_NUM_ARGS), "{e}");
        assert!(e.message().contains("[2, 3, 4, 5]"), "{e}");
    }
}
