//! Every Spark-recorded function case through `Session::sql`, and `FUNCTIONS.md` computed from
//! the results.
//!
//! A case passes when Sluice returns Spark's rows (FORMAT.md's canonical values: timestamps UTC,
//! floats within a relative 1e-9, decimals by value) and Spark's result types; when Spark failed,
//! Sluice must fail too. For functions whose value depends on the run (`rand`,
//! `current_timestamp`, ...) only the types and the row count are compared. A function is
//! supported when it has cases and all pass.
//!
//! `spark_function_table` fails when `FUNCTIONS.md` differs from the computed table;
//! `SLUICE_BLESS=1 cargo test -p sluice --lib spark_function_table` rewrites it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use bigdecimal::BigDecimal;
use serde_json::{json, Value};

use super::catalog::spark_functions;

#[derive(Debug, serde::Deserialize)]
struct Case {
    function: String,
    sql: String,
    deterministic: bool,
    #[serde(default)]
    types: Option<Vec<String>>,
    #[serde(default)]
    ordered: bool,
    #[serde(default)]
    rows: Option<Vec<Vec<Value>>>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(serde::Deserialize)]
struct CasesFile {
    cases: Vec<Case>,
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load_cases() -> Vec<Case> {
    let text = std::fs::read_to_string(crate_dir().join("spark-functions/cases.json"))
        .expect("spark-functions/cases.json");
    serde_json::from_str::<CasesFile>(&text)
        .expect("cases.json parses")
        .cases
}

/// Spark's `DataType.simpleString` of an Arrow type, as Sluice maps types
/// ([`crate::schema::spark_simple_string`]); an unsigned integer says so, so the table shows a
/// result DataFusion typed unsigned where Spark has none.
fn simple_string(dt: &DataType) -> String {
    match dt {
        DataType::UInt8 => "tinyint unsigned".into(),
        DataType::UInt16 => "smallint unsigned".into(),
        DataType::UInt32 => "int unsigned".into(),
        DataType::UInt64 => "bigint unsigned".into(),
        other => crate::schema::spark_simple_string(other),
    }
}

/// Spark's type name, with `timestamp_ntz` read as `timestamp` (Sluice has one timestamp type,
/// zone-less UTC).
fn spark_type(t: &str) -> String {
    t.replace("timestamp_ntz", "timestamp")
}

fn float(v: f64) -> Value {
    if v.is_nan() {
        json!("NaN")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(v)
    }
}

fn timestamp_text(us: i64) -> Value {
    let Some(t) = chrono::DateTime::from_timestamp_micros(us) else {
        return Value::Null;
    };
    let mut s = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let frac = us.rem_euclid(1_000_000);
    if frac != 0 {
        s.push_str(format!(".{frac:06}").trim_end_matches('0'));
    }
    json!(s)
}

/// `v` as Python's `json.dumps` writes it (`, ` and `: ` separators): the text of a map key that
/// is not a string in `scripts/spark-functions`' canonical form.
fn python_json(v: &Value) -> String {
    match v {
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(python_json).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, x)| format!("{}: {}", Value::String(k.clone()), python_json(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// One cell in the canonical form `scripts/spark-functions` writes.
fn cell(a: &ArrayRef, i: usize) -> Value {
    use arrow::datatypes::*;
    if a.is_null(i) {
        return Value::Null;
    }
    match a.data_type() {
        DataType::Null => Value::Null,
        DataType::Boolean => json!(a.as_boolean().value(i)),
        DataType::Int8 => json!(a.as_primitive::<Int8Type>().value(i)),
        DataType::Int16 => json!(a.as_primitive::<Int16Type>().value(i)),
        DataType::Int32 => json!(a.as_primitive::<Int32Type>().value(i)),
        DataType::Int64 => json!(a.as_primitive::<Int64Type>().value(i)),
        DataType::UInt8 => json!(a.as_primitive::<UInt8Type>().value(i)),
        DataType::UInt16 => json!(a.as_primitive::<UInt16Type>().value(i)),
        DataType::UInt32 => json!(a.as_primitive::<UInt32Type>().value(i)),
        DataType::UInt64 => json!(a.as_primitive::<UInt64Type>().value(i)),
        DataType::Float32 => float(a.as_primitive::<Float32Type>().value(i) as f64),
        DataType::Float64 => float(a.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, s) => {
            let v = a.as_primitive::<Decimal128Type>().value(i);
            json!({"decimal": BigDecimal::new(v.into(), *s as i64).to_string()})
        }
        DataType::Date32 => {
            let d = a.as_primitive::<Date32Type>().value(i);
            let date = chrono::NaiveDate::from_num_days_from_ce_opt(d + 719_163);
            date.map(|d| json!(d.format("%Y-%m-%d").to_string()))
                .unwrap_or(Value::Null)
        }
        DataType::Timestamp(_, _) => {
            let c = arrow::compute::cast(a, &DataType::Timestamp(TimeUnit::Microsecond, None));
            match c {
                Ok(c) => timestamp_text(c.as_primitive::<TimestampMicrosecondType>().value(i)),
                Err(_) => Value::Null,
            }
        }
        DataType::Duration(_) => {
            match arrow::compute::cast(a, &DataType::Duration(TimeUnit::Microsecond)) {
                Ok(c) => {
                    json!({"interval_us": c.as_primitive::<DurationMicrosecondType>().value(i)})
                }
                Err(_) => Value::Null,
            }
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            json!(a.as_primitive::<IntervalYearMonthType>().value(i))
        }
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => {
            match arrow::compute::cast(a, &DataType::Binary) {
                Ok(c) => {
                    let b = c.as_binary::<i32>().value(i);
                    json!({"binary": b.iter().map(|x| format!("{x:02x}")).collect::<String>()})
                }
                Err(_) => Value::Null,
            }
        }
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            let c = arrow::compute::cast(
                a,
                &DataType::List(match a.data_type() {
                    DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                        f.clone()
                    }
                    _ => unreachable!(),
                }),
            );
            match c {
                Ok(c) => {
                    let v = c.as_list::<i32>().value(i);
                    Value::Array((0..v.len()).map(|j| cell(&v, j)).collect())
                }
                Err(_) => Value::Null,
            }
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let mut m = serde_json::Map::new();
            for (j, f) in fields.iter().enumerate() {
                m.insert(f.name().clone(), cell(s.column(j), i));
            }
            Value::Object(m)
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let entries = m.value(i);
            let (k, v) = (entries.column(0), entries.column(1));
            let mut out = serde_json::Map::new();
            for j in 0..entries.len() {
                let key = match cell(k, j) {
                    Value::String(s) => s,
                    other => python_json(&other),
                };
                out.insert(key, cell(v, j));
            }
            Value::Object(out)
        }
        _ => match arrow::compute::cast(a, &DataType::Utf8) {
            Ok(c) => json!(c.as_string::<i32>().value(i)),
            Err(_) => json!(format!("<{}>", a.data_type())),
        },
    }
}

/// Values equal under FORMAT.md's rules (floats relative 1e-9, decimals by value).
fn same(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(e), Value::Number(a)) => {
            if let (Some(e), Some(a)) = (e.as_i64(), a.as_i64()) {
                return e == a;
            }
            match (e.as_f64(), a.as_f64()) {
                (Some(e), Some(a)) => e == a || (e - a).abs() <= 1e-9 * e.abs().max(a.abs()),
                _ => false,
            }
        }
        // DataFusion types `1.5` as DOUBLE where Spark says DECIMAL: compare the numbers.
        (Value::Object(e), Value::Number(a)) if e.contains_key("decimal") => {
            let e = e
                .get("decimal")
                .and_then(|v| v.as_str())
                .and_then(|s| s.parse::<f64>().ok());
            match (e, a.as_f64()) {
                (Some(e), Some(a)) => e == a || (e - a).abs() <= 1e-9 * e.abs().max(a.abs()),
                _ => false,
            }
        }
        (Value::Object(e), Value::Object(a)) if e.contains_key("decimal") => {
            let parse = |v: Option<&Value>| {
                v.and_then(|v| v.as_str())
                    .and_then(|s| s.parse::<BigDecimal>().ok())
            };
            matches!((parse(e.get("decimal")), parse(a.get("decimal"))), (Some(x), Some(y)) if x == y)
        }
        (Value::Array(e), Value::Array(a)) => {
            e.len() == a.len() && e.iter().zip(a).all(|(e, a)| same(e, a))
        }
        (Value::Object(e), Value::Object(a)) => {
            e.len() == a.len()
                && e.iter()
                    .zip(a)
                    .all(|((ek, ev), (ak, av))| ek == ak && same(ev, av))
        }
        _ => expected == actual,
    }
}

fn short(text: &str) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    if line.chars().count() > 110 {
        format!("{}…", line.chars().take(110).collect::<String>())
    } else {
        line.to_string()
    }
}

/// A type with integral widths and exact/inexact fractions folded together: DataFusion types
/// the literal `1` as BIGINT and `1.5` as DOUBLE where Spark says INT and DECIMAL(2,1), so a
/// function over literals can differ from Spark in width only. Such a difference is shown in
/// the table; any other type difference fails the case.
fn type_class(t: &str) -> String {
    let mut out = String::new();
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let w = match word.as_str() {
            "tinyint" | "smallint" | "int" | "bigint" => "integral",
            "float" | "double" => "fractional",
            w if w.starts_with("decimal") => "fractional",
            w => w,
        };
        out.push_str(w);
        word.clear();
    };
    let mut depth = 0;
    for c in t.chars() {
        if word.starts_with("decimal") && (c == '(' || depth > 0) {
            depth += usize::from(c == '(');
            if c == ')' {
                depth -= 1;
            }
            word.push(c);
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '_' || c == ' ' && !word.is_empty() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Runs one case; `Err` says how Sluice differs from Spark, `Ok(Some(..))` notes a result type
/// that differs from Spark's in width only (see [`type_class`]).
fn run_case(session: &sluice::Session, case: &Case) -> Result<Option<String>, String> {
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        session.sql(&case.sql).and_then(|f| f.collect())
    }));
    let batches: Vec<RecordBatch> = match run {
        Err(_) => return Err("panics".into()),
        Ok(Err(e)) => {
            return match &case.error {
                Some(_) => Ok(None),
                None => Err(format!("error: {}", short(&e.to_string()))),
            }
        }
        Ok(Ok(b)) => b,
    };
    if let Some(err) = &case.error {
        return Err(format!("Spark fails ({}), Sluice returns rows", short(err)));
    }
    let types = case.types.as_deref().unwrap_or_default();
    let expected_rows = case.rows.as_deref().unwrap_or_default();
    let schema = match batches.first() {
        Some(b) => b.schema(),
        None => return Err("no result batch".into()),
    };
    let actual_types: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| simple_string(f.data_type()))
        .collect();
    let want_types: Vec<String> = types.iter().map(|t| spark_type(t)).collect();
    let note = (actual_types != want_types).then(|| {
        format!(
            "{} (Spark: {})",
            actual_types.join(", "),
            want_types.join(", ")
        )
    });
    let classes = |v: &[String]| v.iter().map(|t| type_class(t)).collect::<Vec<_>>();
    if classes(&actual_types) != classes(&want_types) {
        return Err(format!("result type {}", note.unwrap_or_default()));
    }
    let mut rows: Vec<Vec<Value>> = Vec::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            rows.push(b.columns().iter().map(|c| cell(c, i)).collect());
        }
    }
    if rows.len() != expected_rows.len() {
        return Err(format!(
            "{} rows (Spark: {})",
            rows.len(),
            expected_rows.len()
        ));
    }
    if !case.deterministic {
        return Ok(note);
    }
    let mut want: Vec<Vec<Value>> = expected_rows.to_vec();
    if !case.ordered {
        let key = |r: &Vec<Value>| serde_json::to_string(r).unwrap_or_default();
        want.sort_by_key(key);
        rows.sort_by_key(key);
    }
    for (w, a) in want.iter().zip(&rows) {
        if !w.iter().zip(a).all(|(w, a)| same(w, a)) {
            return Err(format!(
                "value {} (Spark: {})",
                short(&Value::Array(a.clone()).to_string()),
                short(&Value::Array(w.clone()).to_string())
            ));
        }
    }
    Ok(note)
}

/// Why a function that fails its cases does so by design, where a short reason says more than
/// the first failing case.
fn known_reason(name: &str) -> Option<&'static str> {
    Some(match name {
        "reflect" | "java_method" | "try_reflect" => "calls a Java method; Sluice has no JVM",
        "aes_encrypt" => {
            "3 of 6 cases have no IV, so a random one (recorded as deterministic); those decrypt \
             back and the other 3 match (aes::tests::sparks_recorded_encryptions)"
        }
        _ => return None,
    })
}

struct Status {
    supported: bool,
    cases: usize,
    reason: String,
    /// A result type that differs from Spark's in width only.
    type_note: Option<String>,
}

fn compute() -> BTreeMap<String, Status> {
    let session = sluice::Session::builder()
        .shuffle_partitions(1)
        .build()
        .expect("session");
    let mut by_function: BTreeMap<String, Vec<Result<Option<String>, String>>> = BTreeMap::new();
    for case in load_cases() {
        let r = run_case(&session, &case).map_err(|e| {
            let sql: String = case.sql.chars().take(60).collect();
            let more = if sql.len() < case.sql.len() {
                "…"
            } else {
                ""
            };
            format!("{e} — in `{sql}{more}`")
        });
        by_function
            .entry(case.function.clone())
            .or_default()
            .push(r);
    }
    let mut out = BTreeMap::new();
    for f in spark_functions() {
        let results = by_function.remove(&f.name).unwrap_or_default();
        let failing: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        let supported = !results.is_empty() && failing.is_empty();
        let type_note = results
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned().flatten())
            .next();
        let reason = if supported {
            String::new()
        } else if let Some(r) = known_reason(&f.name) {
            r.to_string()
        } else if results.is_empty() {
            "no Spark-recorded case".to_string()
        } else {
            failing[0].clone()
        };
        out.insert(
            f.name.clone(),
            Status {
                supported,
                cases: results.len(),
                reason,
                type_note,
            },
        );
    }
    out
}

fn render(status: &BTreeMap<String, Status>) -> String {
    let functions = spark_functions();
    let sensible = |k: &str| matches!(k, "scalar" | "aggregate");
    let counted: Vec<_> = functions
        .iter()
        .filter(|f| f.stream && sensible(&f.kind))
        .collect();
    let supported = counted
        .iter()
        .filter(|f| status.get(&f.name).is_some_and(|s| s.supported))
        .count();
    let mut kinds: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for f in functions {
        let e = kinds.entry(f.kind.as_str()).or_default();
        e.0 += 1;
        if status.get(&f.name).is_some_and(|s| s.supported) {
            e.1 += 1;
        }
    }
    let mut s = String::new();
    s.push_str("# Spark 3.5 built-in functions in Sluice\n\n");
    s.push_str(
        "Generated: `scripts/spark-functions` records every Spark 3.5.7 built-in and probe \
         queries with Spark's results into `crates/spark/spark-functions/`; the test \
         `functions::table_tests::spark_function_table` (sluice-spark) runs every probe through \
         `Session::sql` and writes this table (`SLUICE_BLESS=1`), or fails when it disagrees \
         with the code. Do not edit by hand.\n\n",
    );
    s.push_str(&format!(
        "**Scalar and aggregate functions that make sense in a stream: {supported} of {} \
         supported ({:.1}%).**\n\n",
        counted.len(),
        100.0 * supported as f64 / counted.len().max(1) as f64
    ));
    s.push_str("| kind | functions | supported |\n|---|---|---|\n");
    for (k, (n, ok)) in &kinds {
        s.push_str(&format!("| {k} | {n} | {ok} |\n"));
    }
    s.push_str(
        "\nA function is *supported* when every recorded case gives Spark's values and result \
         types. *In a stream* says whether the function makes sense in a streaming query \
         (nondeterministic and session functions such as `current_timestamp` do).\n\n",
    );
    s.push_str(
        "*Type* notes a supported function whose result type differs from Spark's in width only \
         (DataFusion types the literal `1` as BIGINT where Spark says INT, and `1.5` as DOUBLE \
         where Spark says DECIMAL(2,1)).\n\n",
    );
    s.push_str(
        "| function | kind | in a stream | cases | Sluice | type |\n|---|---|---|---|---|---|\n",
    );
    for f in functions {
        let st = &status[&f.name];
        let stream = if f.stream {
            "yes".to_string()
        } else {
            format!("no: {}", f.why_not_in_stream.as_deref().unwrap_or(""))
        };
        let sluice = if st.supported {
            "supported".to_string()
        } else {
            format!("unsupported: {}", st.reason.replace('|', "\\|"))
        };
        let note = match (&st.type_note, st.supported) {
            (Some(n), true) => short(n).replace('|', "\\|"),
            _ => String::new(),
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            f.name.replace('|', "\\|"),
            f.kind,
            stream,
            st.cases,
            sluice,
            note
        ));
    }
    s
}

#[test]
fn spark_function_table() {
    let table = render(&compute());
    let path = crate_dir().join("../../FUNCTIONS.md");
    if std::env::var_os("SLUICE_BLESS").is_some() {
        std::fs::write(&path, &table).expect("write FUNCTIONS.md");
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    if on_disk != table {
        let diff: Vec<String> = on_disk
            .lines()
            .zip(table.lines())
            .filter(|(a, b)| a != b)
            .take(10)
            .map(|(a, b)| format!("FUNCTIONS.md: {a}\ncomputed:     {b}"))
            .collect();
        panic!(
            "FUNCTIONS.md disagrees with what the code does; run SLUICE_BLESS=1 cargo test -p \
             sluice --lib spark_function_table and commit the table.\n{}",
            diff.join("\n")
        );
    }
}

#[test]
fn canonical_cells_match_the_recorders_form() {
    let ts: ArrayRef = std::sync::Arc::new(arrow::array::TimestampMicrosecondArray::from(vec![
        1_771_063_200_120_000,
    ]));
    assert_eq!(cell(&ts, 0), json!("2026-02-14T10:00:00.12"));
    assert!(same(&json!(0.1 + 0.2), &json!(0.3)));
    assert!(!same(&json!(1), &json!(2)));
    assert!(same(
        &json!({"decimal": "1.50"}),
        &json!({"decimal": "1.5"})
    ));
    assert_eq!(type_class("array<decimal(10,2)>"), "array<fractional>");
    assert_eq!(
        type_class("struct<a:int,b:string>"),
        "struct<a:integral,b:string>"
    );
    assert_eq!(
        type_class("interval day to second"),
        "interval day to second"
    );
}
