//! Timestamps as text, in the two forms Sluice writes: Spark's own (`CAST(ts AS STRING)`, the
//! console sink: `2026-02-14 10:00:00.5`, the fraction trimmed) and ISO-8601 with milliseconds
//! (progress JSON and the JSON/CSV file sinks: `2026-02-14T10:00:00.500Z`, as Spark writes them);
//! and Spark's interval strings (`"10 minutes"`, watermark delays, window sizes, trigger
//! intervals) read into microseconds.

use arrow::datatypes::TimeUnit;

use crate::error::{class, Result, SluiceError};

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

/// Microseconds per unit of Spark interval strings.
fn unit_micros(unit: &str) -> Option<i64> {
    let u = unit.to_ascii_lowercase();
    let u = u.trim_end_matches('s');
    Some(match u {
        "microsecond" | "us" | "micro" => 1,
        "millisecond" | "m" | "milli" => 1_000,
        "second" | "sec" | "" => 1_000_000,
        "minute" | "min" => 60_000_000,
        "hour" | "h" => 3_600_000_000,
        "day" | "d" => 86_400_000_000,
        "week" | "w" => 7 * 86_400_000_000,
        _ => return None,
    })
}

/// Parses Spark interval strings such as `"10 minutes"`, `"1 hour 30 minutes"`,
/// `"interval 5 seconds"` into microseconds. Months and years are refused (they have no fixed
/// length, as in Spark's watermark and window durations).
pub fn parse_interval_micros(s: &str) -> Result<i64> {
    let bad = |why: &str| {
        SluiceError::query(
            class::INVALID_INTERVAL,
            format!("cannot parse the interval {s:?}: {why}. Write it like \"10 minutes\" or \"1 hour 30 seconds\"."),
        )
    };
    let mut words: Vec<&str> = s.split_whitespace().collect();
    if words
        .first()
        .is_some_and(|w| w.eq_ignore_ascii_case("interval"))
    {
        words.remove(0);
    }
    if words.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total: i64 = 0;
    let mut i = 0;
    while i < words.len() {
        let (num, unit) = match words[i].find(|c: char| c.is_ascii_alphabetic()) {
            Some(p) if p > 0 => (&words[i][..p], &words[i][p..]),
            _ => {
                let unit = words
                    .get(i + 1)
                    .ok_or_else(|| bad("a number has no unit"))?;
                i += 1;
                (words[i - 1], *unit)
            }
        };
        i += 1;
        let n: f64 = num
            .trim_matches('\'')
            .parse()
            .map_err(|_| bad("not a number"))?;
        let per = unit_micros(unit.trim_matches('\'')).ok_or_else(|| {
            bad(&format!(
                "unknown unit {unit:?} (months and years have no fixed length)"
            ))
        })?;
        total = total.saturating_add((n * per as f64).round() as i64);
    }
    Ok(total)
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
