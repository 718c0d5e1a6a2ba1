//! Spark's lenient string-to-timestamp and string-to-date parsing (`DateTimeUtils.stringToTimestamp`
//! and `stringToDate`), which is what the JSON and CSV readers use when no `timestampFormat` /
//! `dateFormat` option is given. The session time zone is UTC: a timestamp without a zone is UTC.
//!
//! Accepted timestamps (after trimming whitespace):
//! `[+-]yyyy[-[m]m[-[d]d]]`, then optionally `T` or a space and `[h]h:[m]m[:[s]s[.fraction]]`,
//! then (only after the seconds) an optional zone: `Z`, `+hh`, `+hh:mm`, `+hhmm`, `+hh:mm:ss`,
//! `UTC`/`GMT`/`UT` optionally followed by such an offset, or `EST`/`MST`/`HST`. A fraction keeps
//! 6 digits (more are truncated). Region zone ids (`Europe/Paris`) and time-only strings are not
//! supported (null).
//!
//! With `timestampFormat` / `dateFormat` / `timestampNTZFormat`, values are parsed with the
//! option's Spark pattern instead ([`SparkPattern`], [`DatetimeFormats`]): the whole value must
//! match; Spark's lenient forms are tried too only with `enableDateTimeParsingFallback=true`.

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Whether `b` is trimmed by Spark's `UTF8String.trimAll` (whitespace and ISO control chars).
fn is_trim_byte(b: u8) -> bool {
    b <= b' ' || b == 0x7f
}

fn trim_bytes(b: &[u8]) -> &[u8] {
    let mut start = 0;
    let mut end = b.len();
    while start < end && is_trim_byte(b[start]) {
        start += 1;
    }
    while end > start && is_trim_byte(b[end - 1]) {
        end -= 1;
    }
    &b[start..end]
}

/// Days from 1970-01-01 of a proleptic Gregorian date, or None if the date does not exist.
pub fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    // Howard Hinnant's algorithm.
    let y = if month <= 2 { year - 1 } else { year };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 => {
            if is_leap(year) {
                29
            } else {
                28
            }
        }
        _ => 0,
    }
}

/// Spark's `stringToTimestamp` in UTC: microseconds since the epoch, or None.
pub fn parse_timestamp_micros(s: &str) -> Option<i64> {
    let b = trim_bytes(s.as_bytes());
    if let Some(micros) = iso_utc_micros(b) {
        return Some(micros);
    }
    parse_timestamp_general(b)
}

/// The common form `yyyy-mm-ddThh:mm:ss[.fraction][Z]` (or a space for the `T`), read at fixed
/// positions: the same value as [`parse_timestamp_general`] gives it; None for anything else
/// (which the general parser then reads).
fn iso_utc_micros(b: &[u8]) -> Option<i64> {
    if b.len() < 19 || !matches!(b[10], b'T' | b' ') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    // Every digit position of the time checked at once, then read without further checks.
    let digit = |i: usize| i64::from(b[i].wrapping_sub(b'0'));
    if [11, 12, 14, 15, 17, 18]
        .iter()
        .any(|&i| b[i].wrapping_sub(b'0') > 9)
    {
        return None;
    }
    let two = |i: usize| digit(i) * 10 + digit(i + 1);
    let (hour, minute, second) = (two(11), two(14), two(17));
    let mut i = 19;
    let mut micros = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            // Digits past the sixth are dropped, as the general parser drops them.
            if i - start < 6 {
                micros = micros * 10 + (b[i] - b'0') as i64;
            }
            i += 1;
        }
        let n = i - start;
        if n == 0 {
            return None;
        }
        for _ in n.min(6)..6 {
            micros *= 10;
        }
    }
    if !matches!(&b[i..], [] | [b'Z']) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = iso_date_days(b)?;
    Some((days * SECONDS_PER_DAY + hour * 3600 + minute * 60 + second) * MICROS_PER_SECOND + micros)
}

thread_local! {
    /// The date (`yyyy-mm-dd`, as two words) last read by [`iso_date_days`] and its day
    /// number: a file's timestamps mostly share their date, so most reads are one compare.
    static LAST_ISO_DATE: std::cell::Cell<(u64, u16, i64)> =
        const { std::cell::Cell::new((0, 0, 0)) };
}

/// The day number of the `yyyy-mm-dd` at the start of `b` (at least 10 bytes), or None. A
/// date equal to the last one read on this thread is not read again (the zero words it starts
/// with match no text of digits).
fn iso_date_days(b: &[u8]) -> Option<i64> {
    let mut head = [0u8; 8];
    head.copy_from_slice(&b[..8]);
    let key = (u64::from_le_bytes(head), u16::from_le_bytes([b[8], b[9]]));
    let (k8, k2, days) = LAST_ISO_DATE.with(std::cell::Cell::get);
    if (k8, k2) == key {
        return Some(days);
    }
    if b[4] != b'-'
        || b[7] != b'-'
        || [0, 1, 2, 3, 5, 6, 8, 9]
            .iter()
            .any(|&i| b[i].wrapping_sub(b'0') > 9)
    {
        return None;
    }
    let digit = |i: usize| i64::from(b[i] - b'0');
    let two = |i: usize| digit(i) * 10 + digit(i + 1);
    let days = days_from_civil(two(0) * 100 + two(2), two(5), two(8))?;
    LAST_ISO_DATE.with(|last| last.set((key.0, key.1, days)));
    Some(days)
}

/// [`parse_timestamp_micros`] of a trimmed string, any form Spark accepts.
fn parse_timestamp_general(b: &[u8]) -> Option<i64> {
    if b.is_empty() {
        return None;
    }
    // year, month, day, hour, minute, second, micros, zone segments (7, 8)
    let mut seg: [i64; 9] = [1, 1, 1, 0, 0, 0, 0, 0, 0];
    let mut i = 0usize;
    let mut val: i64 = 0;
    let mut digits = 0usize;
    let mut digits_milli = 0usize;
    let mut tz: Option<&[u8]> = None;
    let mut j = 0usize;
    let mut year_sign = 1i64;
    if b[0] == b'-' || b[0] == b'+' {
        if b[0] == b'-' {
            year_sign = -1;
        }
        j = 1;
    }
    fn valid(segment: usize, digits: usize) -> bool {
        segment == 6
            || (segment == 0 && (4..=6).contains(&digits))
            || (segment == 7 && digits <= 2)
            || (segment != 0 && segment != 6 && segment != 7 && digits > 0 && digits <= 2)
    }
    while j < b.len() {
        let c = b[j];
        if c.is_ascii_digit() {
            if i == 6 {
                digits_milli += 1;
            }
            if i != 6 || digits < 6 {
                val = val.saturating_mul(10).saturating_add((c - b'0') as i64);
            }
            digits += 1;
        } else if i < 2 {
            // A time-only string (`hh:mm:ss`, `Thh:mm`) takes today's date in Spark; not
            // supported here (null), as it is not reproducible.
            if c == b'-' {
                if !valid(i, digits) {
                    return None;
                }
                seg[i] = val;
                val = 0;
                digits = 0;
                i += 1;
            } else {
                return None;
            }
        } else if i == 2 {
            if c == b' ' || c == b'T' {
                if !valid(i, digits) {
                    return None;
                }
                seg[i] = val;
                val = 0;
                digits = 0;
                i += 1;
            } else {
                return None;
            }
        } else if i == 3 || i == 4 {
            if c == b':' {
                if !valid(i, digits) {
                    return None;
                }
                seg[i] = val;
                val = 0;
                digits = 0;
                i += 1;
            } else {
                return None;
            }
        } else if i == 5 || i == 6 {
            if c == b'.' && i == 5 {
                if !valid(i, digits) {
                    return None;
                }
                seg[i] = val;
                val = 0;
                digits = 0;
                i += 1;
            } else {
                if !valid(i, digits) {
                    return None;
                }
                seg[i] = val;
                val = 0;
                digits = 0;
                i += 1;
                tz = Some(&b[j..]);
                j = b.len() - 1;
            }
            if i == 6 && c != b'.' {
                i += 1;
            }
        } else if i < 9 && (c == b':' || c == b' ') {
            if !valid(i, digits) {
                return None;
            }
            seg[i] = val;
            val = 0;
            digits = 0;
            i += 1;
        } else {
            return None;
        }
        j += 1;
    }
    if i >= seg.len() || !valid(i, digits) {
        return None;
    }
    seg[i] = val;
    while digits_milli < 6 {
        seg[6] *= 10;
        digits_milli += 1;
    }
    let offset_seconds = match tz {
        None => 0,
        Some(z) => parse_zone_offset_seconds(std::str::from_utf8(trim_bytes(z)).ok()?)?,
    };
    let year = year_sign * seg[0];
    let days = days_from_civil(year, seg[1], seg[2])?;
    if seg[3] > 23 || seg[4] > 59 || seg[5] > 59 {
        return None;
    }
    let secs = days
        .checked_mul(SECONDS_PER_DAY)?
        .checked_add(seg[3] * 3600 + seg[4] * 60 + seg[5])?
        .checked_sub(offset_seconds as i64)?;
    secs.checked_mul(MICROS_PER_SECOND)?.checked_add(seg[6])
}

/// A zone id as Java's `ZoneId.of(id, SHORT_IDS)` reads it, for fixed offsets only: seconds
/// east of UTC.
pub fn parse_zone_offset_seconds(z: &str) -> Option<i32> {
    match z {
        "Z" | "UTC" | "GMT" | "UT" => return Some(0),
        "EST" => return Some(-5 * 3600),
        "MST" => return Some(-7 * 3600),
        "HST" => return Some(-10 * 3600),
        _ => {}
    }
    let offset = ["UTC", "GMT", "UT"]
        .iter()
        .find_map(|p| z.strip_prefix(p).filter(|r| r.starts_with(['+', '-'])))
        .unwrap_or(z);
    parse_offset(offset)
}

/// `+h`, `+hh`, `+h:mm`, `+hh:mm`, `+hh:m`, `+hhmm`, `+hh:mm:ss`, `+hhmmss` (Spark's
/// `getZoneId` pads the one-digit forms before Java parses them).
fn parse_offset(s: &str) -> Option<i32> {
    let b = s.as_bytes();
    let sign = match b.first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let rest = &s[1..];
    let all_digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    let num = |t: &str| -> Option<i32> { t.parse::<i32>().ok() };
    let (h, m, sec) = if rest.contains(':') {
        let parts: Vec<&str> = rest.split(':').collect();
        match parts.as_slice() {
            [h, m] if all_digits(h) && all_digits(m) && h.len() <= 2 && m.len() <= 2 => {
                (num(h)?, num(m)?, 0)
            }
            [h, m, s]
                if all_digits(h)
                    && all_digits(m)
                    && all_digits(s)
                    && h.len() == 2
                    && m.len() == 2
                    && s.len() == 2 =>
            {
                (num(h)?, num(m)?, num(s)?)
            }
            _ => return None,
        }
    } else {
        if !all_digits(rest) {
            return None;
        }
        match rest.len() {
            1 | 2 => (num(rest)?, 0, 0),
            4 => (num(&rest[..2])?, num(&rest[2..])?, 0),
            6 => (num(&rest[..2])?, num(&rest[2..4])?, num(&rest[4..])?),
            _ => return None,
        }
    };
    if h > 18 || m > 59 || sec > 59 {
        return None;
    }
    let total = h * 3600 + m * 60 + sec;
    if total > 18 * 3600 {
        return None;
    }
    Some(sign * total)
}

/// Spark's `stringToDate`: days since the epoch, or None. Accepts `[+-]yyyy`, `yyyy-[m]m`,
/// `yyyy-[m]m-[d]d`, and `yyyy-[m]m-[d]d` followed by a space or `T` and anything.
pub fn parse_date_days(s: &str) -> Option<i32> {
    let b = trim_bytes(s.as_bytes());
    if b.is_empty() {
        return None;
    }
    let mut seg: [i64; 3] = [1, 1, 1];
    let mut sign = 1i64;
    let mut i = 0usize;
    let mut val: i64 = 0;
    let mut digits = 0usize;
    let mut j = 0usize;
    if b[0] == b'-' || b[0] == b'+' {
        if b[0] == b'-' {
            sign = -1;
        }
        j = 1;
    }
    fn valid(segment: usize, digits: usize) -> bool {
        (segment == 0 && (4..=7).contains(&digits)) || (segment != 0 && digits > 0 && digits <= 2)
    }
    while j < b.len() && i < 3 && !(b[j] == b' ' || b[j] == b'T') {
        let c = b[j];
        if i < 2 && c == b'-' {
            if !valid(i, digits) {
                return None;
            }
            seg[i] = val;
            val = 0;
            digits = 0;
            i += 1;
        } else if c.is_ascii_digit() {
            val = val.saturating_mul(10).saturating_add((c - b'0') as i64);
            digits += 1;
        } else {
            return None;
        }
        j += 1;
    }
    if !valid(i, digits) {
        return None;
    }
    if i < 2 && j < b.len() {
        return None;
    }
    seg[i] = val;
    let days = days_from_civil(sign * seg[0], seg[1], seg[2])?;
    i32::try_from(days).ok()
}

/// A Spark datetime pattern (`timestampFormat`, `dateFormat`, `timestampNTZFormat`), compiled
/// for parsing: Spark's pattern letters (`yyyy-MM-dd HH:mm:ss.SSS`, `'quoted'` text, `[optional]`
/// sections, `XXX`/`Z` offsets) translated into chrono's, each optional section expanded into the
/// variants with and without it. The whole value must match, as in Spark's `DateTimeFormatter`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SparkPattern {
    /// The option's value, for messages.
    pub pattern: String,
    variants: Vec<String>,
}

impl SparkPattern {
    /// Compiles `pattern`, the value of the option `option`; an error names a letter Sluice cannot
    /// parse with yet.
    pub fn compile(option: &str, pattern: &str) -> Result<Self, String> {
        let mut plain = vec![String::new()];
        expand_optional(&pattern.chars().collect::<Vec<_>>(), &mut plain)
            .map_err(|e| format!("the option '{option}' = {pattern:?}: {e}"))?;
        let variants = plain
            .iter()
            .map(|p| to_chrono(p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the option '{option}' = {pattern:?}: {e}"))?;
        Ok(Self {
            pattern: pattern.to_string(),
            variants,
        })
    }

    fn parsed(&self, s: &str) -> Option<chrono::format::Parsed> {
        for v in &self.variants {
            let mut p = chrono::format::Parsed::new();
            if chrono::format::parse(&mut p, s, chrono::format::StrftimeItems::new(v)).is_ok() {
                return Some(p);
            }
        }
        None
    }

    /// Days since the epoch, or None when `s` does not match or is no date.
    pub fn parse_date(&self, s: &str) -> Option<i32> {
        let p = self.parsed(s)?;
        let days = days_from_civil(
            p.year()? as i64,
            p.month().unwrap_or(1) as i64,
            p.day().unwrap_or(1) as i64,
        )?;
        i32::try_from(days).ok()
    }

    /// Microseconds since the epoch (a value without an offset is UTC), or None.
    pub fn parse_timestamp(&self, s: &str) -> Option<i64> {
        let p = self.parsed(s)?;
        let days = days_from_civil(
            p.year()? as i64,
            p.month().unwrap_or(1) as i64,
            p.day().unwrap_or(1) as i64,
        )?;
        let hour = match (p.hour_div_12(), p.hour_mod_12()) {
            (Some(d), Some(m)) => (d * 12 + m) as i64,
            (None, Some(m)) => m as i64,
            _ => 0,
        };
        let secs = days * SECONDS_PER_DAY
            + hour * 3600
            + p.minute().unwrap_or(0) as i64 * 60
            + p.second().unwrap_or(0) as i64
            - p.offset().unwrap_or(0) as i64;
        Some(secs * MICROS_PER_SECOND + p.nanosecond().unwrap_or(0) as i64 / 1000)
    }
}

/// Appends the variants of `chars` (with `[...]` sections present and absent) to every prefix.
fn expand_optional(chars: &[char], out: &mut Vec<String>) -> Result<(), String> {
    let mut i = 0;
    let mut in_quote = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\'' {
            in_quote = !in_quote;
        }
        if c == '[' && !in_quote {
            let mut depth = 1;
            let mut j = i + 1;
            while j < chars.len() && depth > 0 {
                match chars[j] {
                    '[' => depth += 1,
                    ']' => depth -= 1,
                    _ => {}
                }
                j += 1;
            }
            if depth != 0 {
                return Err("an optional section '[' is not closed".into());
            }
            let mut with = out.clone();
            expand_optional(&chars[i + 1..j - 1], &mut with)?;
            // The longest form first: `[.SSS]` must not stop before the fraction.
            with.append(out);
            if with.len() > 64 {
                return Err("too many optional sections".into());
            }
            *out = with;
            i = j;
            continue;
        }
        if c == ']' && !in_quote {
            return Err("an optional section ']' is not opened".into());
        }
        for p in out.iter_mut() {
            p.push(c);
        }
        i += 1;
    }
    Ok(())
}

/// One plain Spark pattern (no `[...]`) in chrono's syntax for parsing.
fn to_chrono(pattern: &str) -> Result<String, String> {
    use crate::time_text::{pattern_pieces, push_chrono_literal, PatternPiece};
    let pieces = pattern_pieces(pattern);
    let mut out = String::new();
    let mut i = 0;
    while i < pieces.len() {
        let (c, n) = match pieces[i] {
            // `.SSS`: the dot and any number of fraction digits.
            PatternPiece::Literal {
                c: '.',
                quoted: false,
            } if matches!(pieces.get(i + 1), Some(PatternPiece::Letters('S', _))) => {
                out.push_str("%.f");
                i += 2;
                continue;
            }
            PatternPiece::Literal { c, .. } => {
                push_chrono_literal(&mut out, c);
                i += 1;
                continue;
            }
            PatternPiece::Letters(c, n) => (c, n),
        };
        let spec = match (c, n) {
            ('y' | 'u', 2) => "%y",
            ('y' | 'u', _) => "%Y",
            ('M' | 'L', 1 | 2) => "%m",
            ('M' | 'L', 3) => "%b",
            ('M' | 'L', _) => "%B",
            ('d', 1 | 2) => "%d",
            ('D', _) => "%j",
            ('H', 1 | 2) => "%H",
            ('h', 1 | 2) => "%I",
            ('m', 1 | 2) => "%M",
            ('s', 1 | 2) => "%S",
            ('S', 3) => "%3f",
            ('S', 6) => "%6f",
            ('S', 9) => "%9f",
            ('a', 1) => "%p",
            ('E', 1..=3) => "%a",
            ('E', 4) => "%A",
            ('X' | 'x', 1..=3) => "%#z",
            ('Z', 1..=3) => "%z",
            _ => {
                return Err(format!(
                    "the pattern letter{} '{}' is not supported yet (supported: y, M, L, d, D, H, \
                     h, m, s, S, a, E, X, x, Z, 'quoted' text and [optional] sections)",
                    if n > 1 { "s" } else { "" },
                    c.to_string().repeat(n)
                ))
            }
        };
        out.push_str(spec);
        i += 1;
    }
    Ok(out)
}

/// The datetime options of the JSON and CSV readers, compiled once per source.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatetimeFormats {
    /// `timestampFormat`: TIMESTAMP columns.
    pub timestamp: Option<SparkPattern>,
    /// `timestampNTZFormat`: TIMESTAMP_NTZ columns (a timestamp without a zone).
    pub timestamp_ntz: Option<SparkPattern>,
    /// `dateFormat`: DATE columns.
    pub date: Option<SparkPattern>,
    /// `enableDateTimeParsingFallback`: when a pattern is given and does not match, try Spark's
    /// lenient forms too (Spark's default: only when no pattern is given).
    pub fallback: Option<bool>,
}

impl DatetimeFormats {
    /// A DATE value: the `dateFormat` pattern, else (or as the fallback) Spark's lenient form.
    pub fn date(&self, s: &str) -> Option<i32> {
        match &self.date {
            None => parse_date_days(s),
            Some(p) => p
                .parse_date(s)
                .or_else(|| self.fallback.unwrap_or(false).then(|| parse_date_days(s))?),
        }
    }

    /// A TIMESTAMP value: `timestampFormat` (else, or as the fallback, Spark's lenient form),
    /// then `timestampNTZFormat`. Sluice has one timestamp type (TIMESTAMP and TIMESTAMP_NTZ are
    /// both UTC microseconds), so a column cannot say which of the two patterns is its own.
    pub fn timestamp(&self, s: &str) -> Option<i64> {
        let first = match &self.timestamp {
            None => parse_timestamp_micros(s),
            Some(p) => p.parse_timestamp(s).or_else(|| {
                self.fallback
                    .unwrap_or(false)
                    .then(|| parse_timestamp_micros(s))?
            }),
        };
        first.or_else(|| self.timestamp_ntz.as_ref()?.parse_timestamp(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixed-position reading of the common form gives what the general parser gives, for
    /// every string it accepts, and declines the rest (the general parser reads them).
    #[test]
    fn the_iso_fast_path_agrees_with_the_general_parser() {
        let mut accepted = 0;
        let dates = [
            "2026-01-01",
            "2024-02-29",
            "2023-02-29",
            "1969-12-31",
            "0001-01-01",
            "9999-12-31",
            "2026-13-01",
            "2026-00-10",
            "2026-04-31",
            "2026-1-01",
            "+2026-01-01",
            "-0044-03-15",
            "2026/01/01",
            "20x6-01-01",
        ];
        let times = [
            "T00:00:00",
            " 23:59:59",
            "T24:00:00",
            "T12:60:00",
            "T12:00:60",
            "T1:02:03",
            "t12:00:00",
            "T12:00",
            "T12-00-00",
        ];
        let fractions = [
            "",
            ".",
            ".1",
            ".123",
            ".123456",
            ".1234567",
            ".123456789",
            ".12a",
            ".000001",
        ];
        let zones = ["", "Z", "z", "+01:00", "-0530", "UTC", " ", "ZZ", "Z1"];
        for d in dates {
            for t in times {
                for f in fractions {
                    for z in zones {
                        let text = format!("{d}{t}{f}{z}");
                        let b = trim_bytes(text.as_bytes());
                        let general = parse_timestamp_general(b);
                        if let Some(fast) = iso_utc_micros(b) {
                            accepted += 1;
                            assert_eq!(Some(fast), general, "{text:?}");
                        }
                        assert_eq!(parse_timestamp_micros(&text), general, "{text:?}");
                    }
                }
            }
        }
        assert!(
            accepted >= 200,
            "the fast path took only {accepted} strings"
        );
        assert_eq!(
            parse_timestamp_micros("2026-01-01T00:00:21.635Z"),
            Some(1_767_225_621_635_000)
        );
    }

    fn pattern(p: &str) -> SparkPattern {
        SparkPattern::compile("timestampFormat", p).unwrap()
    }

    #[test]
    fn spark_patterns_parse_the_whole_value() {
        // 2026-02-14T10:05:00Z
        let t = 1_771_063_500_000_000i64;
        assert_eq!(
            pattern("dd/MM/yyyy HH:mm").parse_timestamp("14/02/2026 10:05"),
            Some(t)
        );
        assert_eq!(
            pattern("dd/MM/yyyy HH:mm").parse_timestamp("2026-02-14T10:05:00"),
            None
        );
        assert_eq!(
            pattern("dd/MM/yyyy HH:mm").parse_timestamp("14/02/2026 10:05 x"),
            None
        );
        let opt = pattern("dd/MM/yyyy HH:mm[:ss[.SSS]][XXX]");
        assert_eq!(opt.parse_timestamp("14/02/2026 10:05"), Some(t));
        assert_eq!(
            opt.parse_timestamp("14/02/2026 10:05:30"),
            Some(t + 30_000_000)
        );
        assert_eq!(
            opt.parse_timestamp("14/02/2026 12:05:30.250+02:00"),
            Some(t + 30_250_000)
        );
        assert_eq!(opt.parse_timestamp("14/02/2026 10:05Z"), Some(t));
        assert_eq!(
            pattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS").parse_timestamp("2026-02-14T10:05:00.000001"),
            Some(t + 1)
        );
        assert_eq!(
            pattern("MMM d yyyy h:mm a").parse_timestamp("Feb 14 2026 10:05 AM"),
            Some(t)
        );
        let d = SparkPattern::compile("dateFormat", "dd.MM.yyyy").unwrap();
        assert_eq!(d.parse_date("14.02.2026"), Some(20498));
        assert_eq!(
            d.parse_date("31.02.2026"),
            None,
            "a date that does not exist"
        );
        let e = SparkPattern::compile("dateFormat", "yyyy QQ").unwrap_err();
        assert!(
            e.contains("'dateFormat'") && e.contains("'QQ' is not supported yet"),
            "{e}"
        );
        assert!(SparkPattern::compile("dateFormat", "yyyy[MM").is_err());
    }

    #[test]
    fn formats_fall_back_only_when_asked() {
        let strict = DatetimeFormats {
            date: Some(SparkPattern::compile("dateFormat", "dd.MM.yyyy").unwrap()),
            ..Default::default()
        };
        assert_eq!(strict.date("2026-02-14"), None);
        let lenient = DatetimeFormats {
            fallback: Some(true),
            ..strict.clone()
        };
        assert_eq!(lenient.date("2026-02-14"), Some(20498));
        assert_eq!(DatetimeFormats::default().date("2026-02-14"), Some(20498));
    }

    fn ts(s: &str) -> Option<i64> {
        parse_timestamp_micros(s)
    }

    const T0: i64 = 1_773_480_413; // 2026-03-14T09:26:53Z

    #[test]
    fn timestamps_like_spark() {
        assert_eq!(ts("2026-03-14T09:26:53Z"), Some(T0 * 1_000_000));
        assert_eq!(ts("2026-03-14T09:26:53"), Some(T0 * 1_000_000));
        assert_eq!(
            ts("2026-03-14T09:26:53.250Z"),
            Some(T0 * 1_000_000 + 250_000)
        );
        assert_eq!(ts("2026-03-14T11:26:53+02:00"), Some(T0 * 1_000_000));
        assert_eq!(ts("2026-03-14T09:26:53.5"), Some(T0 * 1_000_000 + 500_000));
        assert_eq!(ts("2026-03-14 09:26:53"), Some(T0 * 1_000_000));
        assert_eq!(ts("  2026-03-14 09:26:53  "), Some(T0 * 1_000_000));
        assert_eq!(
            ts("2026-03-14T09:26:53.123456Z"),
            Some(T0 * 1_000_000 + 123_456)
        );
        assert_eq!(
            ts("2026-03-14T09:26:53.1234567Z"),
            Some(T0 * 1_000_000 + 123_456)
        );
        assert_eq!(ts("2026-03-14"), Some(1_773_446_400 * 1_000_000));
        assert_eq!(
            ts("2026-03-14T23:30:00-03:00"),
            Some(1_773_541_800 * 1_000_000)
        );
        assert_eq!(ts("2026-12-31T23:59:59.999Z"), Some(1_798_761_599_999_000));
        assert_eq!(ts("2026-02-01 08:15"), Some(1_769_933_700 * 1_000_000));
        assert_eq!(ts("2026-03-14T09:26:53 UTC"), Some(T0 * 1_000_000));
        assert_eq!(
            ts("2026-03-14T09:26:53GMT+01:00"),
            Some((T0 - 3600) * 1_000_000)
        );
        assert_eq!(
            ts("2026-03-14T09:26:53+0100"),
            Some((T0 - 3600) * 1_000_000)
        );
        assert_eq!(
            ts("2026-03-14T09:26:53+1:00"),
            Some((T0 - 3600) * 1_000_000)
        );
        assert_eq!(ts("2026-3-4"), ts("2026-03-04"));
        assert_eq!(ts("2026"), ts("2026-01-01"));
        assert_eq!(ts("1969-12-31T23:59:59.5Z"), Some(-500_000));
        for bad in [
            "yesterday",
            "14/03/2026 09:26",
            "",
            "2026-02-30",
            "2026-03-14T25:00:00",
            "2026-03-14T09:26Z",
            "2026-03-14T",
            "2026-03-14T09:26:53+19:00",
            "2026-03-14T09:26:53 Europe/Paris",
            "09:26:53",
            "26-03-14",
        ] {
            assert_eq!(ts(bad), None, "{bad}");
        }
    }

    #[test]
    fn dates_like_spark() {
        assert_eq!(parse_date_days("1970-01-01"), Some(0));
        assert_eq!(parse_date_days("2026-03-14"), Some(20_526));
        assert_eq!(parse_date_days("2026-03-14T09:00:00Z"), Some(20_526));
        assert_eq!(parse_date_days("2026-03-14 whatever"), Some(20_526));
        assert_eq!(parse_date_days("2026-03"), parse_date_days("2026-03-01"));
        assert_eq!(parse_date_days("1969-12-31"), Some(-1));
        for bad in [
            "2026-03 x",
            "2026-13-01",
            "x",
            "",
            "2026/03/14",
            "2026-03-14x",
        ] {
            assert_eq!(parse_date_days(bad), None, "{bad}");
        }
    }
}
