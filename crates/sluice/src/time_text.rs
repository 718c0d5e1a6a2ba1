//! Timestamps as text, in the two forms Sluice writes: Spark's own (`CAST(ts AS STRING)`, the
//! console sink: `2026-02-14 10:00:00.5`, the fraction trimmed) and ISO-8601 with milliseconds
//! (progress JSON and the JSON/CSV file sinks: `2026-02-14T10:00:00.500Z`, as Spark writes them).

use arrow::datatypes::TimeUnit;

/// Spark's text of a timestamp in microseconds: `yyyy-MM-dd HH:mm:ss[.fraction]` (UTC), trailing
/// zeros of the fraction trimmed. `None` outside chrono's range.
pub fn spark_timestamp_text(micros: i64) -> Option<String> {
    let t = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    let mut s = t.format("%Y-%m-%d %H:%M:%S").to_string();
    let frac = micros.rem_euclid(1_000_000);
    if frac != 0 {
        let digits = format!("{frac:06}");
        s.push('.');
        s.push_str(digits.trim_end_matches('0'));
    }
    Some(s)
}

/// ISO-8601 with milliseconds (`2026-02-14T10:00:00.500Z`) of a timestamp in `unit`.
pub fn iso_timestamp(value: i64, unit: TimeUnit) -> Option<String> {
    let (secs, nanos) = match unit {
        TimeUnit::Second => (value, 0),
        TimeUnit::Millisecond => (value.div_euclid(1_000), value.rem_euclid(1_000) * 1_000_000),
        TimeUnit::Microsecond => (
            value.div_euclid(1_000_000),
            value.rem_euclid(1_000_000) * 1_000,
        ),
        TimeUnit::Nanosecond => (
            value.div_euclid(1_000_000_000),
            value.rem_euclid(1_000_000_000),
        ),
    };
    let dt = chrono::DateTime::from_timestamp(secs, nanos as u32)?;
    Some(dt.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
}

/// [`iso_timestamp`] of milliseconds since the epoch; the number itself outside chrono's range.
pub fn iso_timestamp_ms(ms: i64) -> String {
    iso_timestamp(ms, TimeUnit::Millisecond).unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_forms() {
        let t = 1_771_063_200_000_000; // 2026-02-14 10:00:00 UTC
        assert_eq!(spark_timestamp_text(t).unwrap(), "2026-02-14 10:00:00");
        assert_eq!(
            spark_timestamp_text(t + 500_000).unwrap(),
            "2026-02-14 10:00:00.5"
        );
        assert_eq!(
            spark_timestamp_text(-1).unwrap(),
            "1969-12-31 23:59:59.999999"
        );
        assert_eq!(
            iso_timestamp(t, TimeUnit::Microsecond).unwrap(),
            "2026-02-14T10:00:00.000Z"
        );
        assert_eq!(iso_timestamp_ms(1_500), "1970-01-01T00:00:01.500Z");
        assert_eq!(iso_timestamp_ms(i64::MAX), i64::MAX.to_string());
    }
}
