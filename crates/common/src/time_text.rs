//! Timestamps as text, in the two forms Sluice writes: Spark's own (`CAST(ts AS STRING)`, the
//! console sink: `2026-02-14 10:00:00.5`, the fraction trimmed) and ISO-8601 with milliseconds
//! (progress JSON and the JSON/CSV file sinks: `2026-02-14T10:00:00.500Z`, as Spark writes them);
//! and Spark's interval strings (`"10 minutes"`, watermark delays, window sizes, trigger
//! intervals) read into microseconds; and the pieces of Spark's datetime patterns
//! (`pattern_pieces`), which `date_format` and the readers translate into chrono's syntax.

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
    // Spark's ANSI forms: `INTERVAL '1:30' MINUTE TO SECOND`, `INTERVAL '10' MINUTE`.
    let rest = s.trim();
    let rest = match rest.get(..8) {
        Some(p) if p.eq_ignore_ascii_case("interval") => rest[8..].trim_start(),
        _ => rest,
    };
    if let Some(quoted) = rest.strip_prefix('\'') {
        if let Some((value, tail)) = quoted.split_once('\'') {
            let tail: Vec<String> = tail
                .split_whitespace()
                .map(|w| w.to_ascii_uppercase())
                .collect();
            if let [from, to_kw, to] = tail.as_slice() {
                if to_kw == "TO" {
                    return parse_interval_micros(&range_interval_text(value, from, to)?);
                }
            }
        }
    }
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

fn bad_range(text: &str, why: impl std::fmt::Display) -> SluiceError {
    SluiceError::query(
        class::INVALID_INTERVAL,
        format!(
            "cannot parse the interval {text}: {why}. Spark's forms are INTERVAL '1:30' MINUTE TO \
             SECOND, INTERVAL '1 2:03:04' DAY TO SECOND, INTERVAL '2-3' YEAR TO MONTH, \
             INTERVAL '10' MINUTE, INTERVAL 10 MINUTES and INTERVAL 1 HOUR 30 MINUTES."
        ),
    )
}

/// A Spark range interval `value FROM TO` (`'1:30'`, `MINUTE`, `SECOND`) as the equivalent
/// multi-unit text, e.g. `1 minutes 30 seconds` (negative: every part negated), following
/// Spark's patterns: `[+|-]y-m` (YEAR TO MONTH), `[+|-]d h[:m[:s[.f]]]` (DAY TO HOUR / MINUTE /
/// SECOND), `[+|-]h:m[:s[.f]]` (HOUR TO MINUTE / SECOND), `[+|-]m:s[.f]` (MINUTE TO SECOND).
pub fn range_interval_text(value: &str, from: &str, to: &str) -> Result<String> {
    let shown = format!("INTERVAL '{value}' {from} TO {to}");
    let v = value.trim();
    let (negative, body) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let units: &[&str] = match (from, to) {
        ("YEAR", "MONTH") => &["years", "months"],
        ("DAY", "HOUR") => &["days", "hours"],
        ("DAY", "MINUTE") => &["days", "hours", "minutes"],
        ("DAY", "SECOND") => &["days", "hours", "minutes", "seconds"],
        ("HOUR", "MINUTE") => &["hours", "minutes"],
        ("HOUR", "SECOND") => &["hours", "minutes", "seconds"],
        ("MINUTE", "SECOND") => &["minutes", "seconds"],
        _ => {
            return Err(bad_range(
                &shown,
                format!("{from} TO {to} is not a Spark interval range"),
            ))
        }
    };
    let parts: Vec<&str> = if from == "YEAR" {
        body.splitn(2, '-').collect()
    } else if from == "DAY" {
        let (d, rest) = body
            .split_once(' ')
            .ok_or_else(|| bad_range(&shown, "expected the days, a space, then the time"))?;
        std::iter::once(d.trim())
            .chain(rest.trim().split(':'))
            .collect()
    } else {
        body.split(':').collect()
    };
    if parts.len() != units.len() {
        return Err(bad_range(
            &shown,
            format!("expected {} parts for {from} TO {to}", units.len()),
        ));
    }
    let sign = if negative { "-" } else { "" };
    let mut out = Vec::new();
    for (i, (p, u)) in parts.iter().zip(units).enumerate() {
        let last = i + 1 == parts.len();
        let ok = if last && *u == "seconds" {
            p.parse::<f64>().is_ok() && !p.starts_with(['-', '+'])
        } else {
            !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())
        };
        if !ok {
            return Err(bad_range(&shown, format!("{p:?} is not a number of {u}")));
        }
        // Spark bounds every part but the leading one (minutes < 60, ...).
        if i > 0 {
            let n: f64 = p.parse().unwrap_or(0.0);
            let max = match *u {
                "months" => 12.0,
                "hours" => 24.0,
                _ => 60.0,
            };
            if n >= max {
                return Err(bad_range(&shown, format!("{u} must be below {max}")));
            }
        }
        out.push(format!("{sign}{p} {u}"));
    }
    Ok(out.join(" "))
}

/// One piece of a Spark datetime pattern (`yyyy-MM-dd 'at' HH:mm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternPiece {
    /// A character written as is; `quoted` when it came from `'text'` (`''` is a quote).
    #[allow(missing_docs)]
    Literal { c: char, quoted: bool },
    /// A run of one pattern letter (`yyyy` is `('y', 4)`).
    Letters(char, usize),
}

/// Splits a Spark datetime pattern into literal characters and runs of pattern letters.
pub fn pattern_pieces(pattern: &str) -> Vec<PatternPiece> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            if chars.get(i + 1) == Some(&'\'') {
                out.push(PatternPiece::Literal { c, quoted: true });
                i += 2;
                continue;
            }
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '\'' {
                out.push(PatternPiece::Literal {
                    c: chars[j],
                    quoted: true,
                });
                j += 1;
            }
            i = j + 1;
            continue;
        }
        if !c.is_ascii_alphabetic() {
            out.push(PatternPiece::Literal { c, quoted: false });
            i += 1;
            continue;
        }
        let mut n = 1;
        while i + n < chars.len() && chars[i + n] == c {
            n += 1;
        }
        out.push(PatternPiece::Letters(c, n));
        i += n;
    }
    out
}

/// A literal character in chrono's syntax (`%` is written `%%`).
pub fn push_chrono_literal(out: &mut String, c: char) {
    if c == '%' {
        out.push('%');
    }
    out.push(c);
}

/// A duration in microseconds as a person writes it: `10 minutes`, `90 seconds`, `1500 ms`.
pub fn describe_micros(us: i64) -> String {
    const UNITS: [(i64, &str); 5] = [
        (86_400_000_000, "days"),
        (3_600_000_000, "hours"),
        (60_000_000, "minutes"),
        (1_000_000, "seconds"),
        (1_000, "ms"),
    ];
    for (n, unit) in UNITS {
        if us != 0 && us % n == 0 {
            return format!("{} {unit}", us / n);
        }
    }
    if us == 0 {
        "0 seconds".to_string()
    } else {
        format!("{us} µs")
    }
}

/// A time string as Spark's `JavaUtils.timeStringAsMs` reads it (`500`, `10s`, `10m`, `1h`: a
/// bare number is milliseconds), in milliseconds; None when it does not parse.
pub fn parse_duration_ms(v: &str) -> Option<i64> {
    let t = v.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: i64 = num.parse().ok()?;
    let unit = unit.trim();
    let factor_us: i64 = match unit {
        "" | "ms" | "msec" | "msecs" | "millis" | "millisecond" | "milliseconds" => 1_000,
        "us" | "usec" | "usecs" | "micros" | "microsecond" | "microseconds" => 1,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000,
        "h" | "hour" | "hours" => 3_600_000_000,
        "d" | "day" | "days" => 86_400_000_000,
        _ => return None,
    };
    Some(n.checked_mul(factor_us)? / 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_forms_follow_sparks_patterns() {
        let t = |v, f, to| range_interval_text(v, f, to).unwrap();
        assert_eq!(t("1:30", "MINUTE", "SECOND"), "1 minutes 30 seconds");
        assert_eq!(
            t("1 2:03:04", "DAY", "SECOND"),
            "1 days 2 hours 03 minutes 04 seconds"
        );
        assert_eq!(t("2-3", "YEAR", "MONTH"), "2 years 3 months");
        assert_eq!(t("-1:30.5", "MINUTE", "SECOND"), "-1 minutes -30.5 seconds");
        assert!(range_interval_text("1:75", "MINUTE", "SECOND").is_err());
        assert!(range_interval_text("1-2", "MINUTE", "SECOND").is_err());
    }

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

    #[test]
    fn watermark_delays_take_sparks_interval_forms() {
        // Spark 3.5 accepts each of these in withWatermark (and refuses "1:30").
        let s = 1_000_000;
        assert_eq!(
            parse_interval_micros("1 minute 30 seconds").unwrap(),
            90 * s
        );
        assert_eq!(parse_interval_micros("interval 1 minute").unwrap(), 60 * s);
        assert_eq!(
            parse_interval_micros("INTERVAL '1:30' MINUTE TO SECOND").unwrap(),
            90 * s
        );
        assert_eq!(parse_interval_micros("10 MINUTES").unwrap(), 600 * s);
        assert_eq!(
            parse_interval_micros("INTERVAL '10' MINUTE").unwrap(),
            600 * s
        );
        assert_eq!(
            parse_interval_micros("interval '1 2:03:04' day to second").unwrap(),
            (86_400 + 7_384) * s
        );
        assert!(parse_interval_micros("1:30").is_err());
    }

    #[test]
    fn datetime_patterns_split_into_quoted_literals_and_letter_runs() {
        use PatternPiece::{Letters, Literal};
        assert_eq!(
            pattern_pieces("yy.MM 'at' ''"),
            [
                Letters('y', 2),
                Literal {
                    c: '.',
                    quoted: false
                },
                Letters('M', 2),
                Literal {
                    c: ' ',
                    quoted: false
                },
                Literal {
                    c: 'a',
                    quoted: true
                },
                Literal {
                    c: 't',
                    quoted: true
                },
                Literal {
                    c: ' ',
                    quoted: false
                },
                Literal {
                    c: '\'',
                    quoted: true
                },
            ]
        );
    }
}
