//! Where a Kafka read starts and where a batch read ends, as Spark's options say it:
//! `startingOffsets` (`earliest`, `latest` or `{"t":{"0":23,"1":-2}}`), `startingTimestamp`
//! (milliseconds, every partition) and `startingOffsetsByTimestamp` (`{"t":{"0":1700000000000}}`),
//! with Spark's precedence (timestamp, then by timestamp, then offsets), and the `ending*`
//! options of batch reads. [`resolve`] turns a spec into an offset per partition.

use std::collections::{BTreeMap, HashMap};

use crate::conf::option as opt;
use crate::error::{class, Result, SluiceError};

use super::{parse_offsets, PartitionOffsets};

/// A position per partition, as the options give it.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum OffsetSpec {
    Earliest,
    Latest,
    /// Offsets per partition; -2 is earliest, -1 latest.
    Specific(PartitionOffsets),
    /// The first record at or after this time (ms), in every partition.
    Timestamp(i64),
    /// The first record at or after each partition's time (ms).
    ByTimestamp(PartitionOffsets),
}

/// Which end of a read a spec is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Starting,
    Ending,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Starting => "starting",
            Side::Ending => "ending",
        }
    }
}

fn bad(msg: impl Into<String>) -> SluiceError {
    SluiceError::query(class::KAFKA_INVALID_OPTION, msg)
}

fn json_map(key: &str, text: &str, example: &str) -> Result<PartitionOffsets> {
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| bad(format!("{key} must be JSON like {example}: {e}")))?;
    parse_offsets(&v).map_err(|e| {
        bad(format!(
            "{key} must be JSON like {example}: {}",
            e.message()
        ))
    })
}

/// The spec of `side` in `options`, if one is given: `<side>Timestamp` first, then
/// `<side>OffsetsByTimestamp`, then `<side>Offsets` (Spark's precedence).
pub(super) fn parse(options: &HashMap<String, String>, side: Side) -> Result<Option<OffsetSpec>> {
    let n = side.name();
    let key = |s: &str| format!("{n}{s}");
    if let Some(v) = opt(options, &key("Timestamp")) {
        let ts = v.trim().parse::<i64>().map_err(|_| {
            bad(format!(
                "{} must be a time in milliseconds since the epoch, got {v:?}",
                key("Timestamp")
            ))
        })?;
        return Ok(Some(OffsetSpec::Timestamp(ts)));
    }
    if let Some(v) = opt(options, &key("OffsetsByTimestamp")) {
        let m = json_map(
            &key("OffsetsByTimestamp"),
            v,
            r#"{"topic":{"0":1700000000000}}"#,
        )?;
        return Ok(Some(OffsetSpec::ByTimestamp(m)));
    }
    Ok(match opt(options, &key("Offsets")).map(str::trim) {
        None => None,
        Some(v) if v.eq_ignore_ascii_case("earliest") => Some(OffsetSpec::Earliest),
        Some(v) if v.eq_ignore_ascii_case("latest") => Some(OffsetSpec::Latest),
        Some(v) => Some(OffsetSpec::Specific(json_map(
            &key("Offsets"),
            v,
            r#"earliest, latest or {"topic":{"0":23,"1":-2}}"#,
        )?)),
    })
}

/// `startingOffsetsByTimestampStrategy`: whether a partition without a record at or after its
/// starting time starts at its latest offset (`latest`) or fails the query (`error`, default).
pub(super) fn latest_when_unmatched(options: &HashMap<String, String>) -> Result<bool> {
    match opt(options, "startingOffsetsByTimestampStrategy").map(str::trim) {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("error") => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("latest") => Ok(true),
        Some(v) => Err(bad(format!(
            "startingOffsetsByTimestampStrategy must be error or latest, got {v:?}"
        ))),
    }
}

/// Spark's checks of a batch read's specs: it cannot start at latest nor end at earliest.
pub(super) fn check_batch(spec: &OffsetSpec, side: Side) -> Result<()> {
    let (refused, offset, word) = match side {
        Side::Starting => (OffsetSpec::Latest, -1, "latest"),
        Side::Ending => (OffsetSpec::Earliest, -2, "earliest"),
    };
    let n = side.name();
    if *spec == refused {
        return Err(bad(format!(
            "{n} offset can't be {word} for batch queries on Kafka"
        )));
    }
    if let OffsetSpec::Specific(m) = spec {
        for (t, parts) in m {
            for (p, o) in parts {
                if *o == offset {
                    return Err(bad(format!(
                        "{n}Offsets for {t}-{p} can't be {word} for batch queries on Kafka"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// The ranges of the assigned partitions: (low, high) watermarks per (topic, partition).
pub(super) type Ranges = BTreeMap<(String, i32), (i64, i64)>;

/// The offset per partition of `ranges` that `spec` names. `by_time` finds, per (topic,
/// partition, time), the first offset at or after the time (None when no record is that late).
/// A starting time without such a record fails, or takes the latest offset when
/// `latest_when_unmatched`; an ending time without one is the latest offset (Spark's rules).
pub(super) fn resolve(
    spec: &OffsetSpec,
    side: Side,
    ranges: &Ranges,
    latest_when_unmatched: bool,
    by_time: impl FnOnce(&[(String, i32, i64)]) -> Result<Vec<Option<i64>>>,
) -> Result<PartitionOffsets> {
    let mut out = PartitionOffsets::new();
    let mut put = |t: &str, p: i32, o: i64| {
        out.entry(t.to_string()).or_default().insert(p, o);
    };
    let times: Vec<(String, i32, i64)> = match spec {
        OffsetSpec::Earliest | OffsetSpec::Latest => {
            for ((t, p), (low, high)) in ranges {
                put(
                    t,
                    *p,
                    if *spec == OffsetSpec::Earliest {
                        *low
                    } else {
                        *high
                    },
                );
            }
            return Ok(out);
        }
        OffsetSpec::Specific(m) => {
            all_partitions_given(m, ranges, &format!("{}Offsets", side.name()))?;
            for ((t, p), (low, high)) in ranges {
                let o = m[t][p];
                put(
                    t,
                    *p,
                    match o {
                        -2 => *low,
                        -1 => *high,
                        o => o,
                    },
                );
            }
            return Ok(out);
        }
        OffsetSpec::Timestamp(ts) => ranges.keys().map(|(t, p)| (t.clone(), *p, *ts)).collect(),
        OffsetSpec::ByTimestamp(m) => {
            all_partitions_given(m, ranges, &format!("{}OffsetsByTimestamp", side.name()))?;
            ranges
                .keys()
                .map(|(t, p)| (t.clone(), *p, m[t][p]))
                .collect()
        }
    };
    let found = by_time(&times)?;
    for ((t, p, ts), o) in times.iter().zip(found) {
        let high = ranges[&(t.clone(), *p)].1;
        let o = match (o, side) {
            (Some(o), _) => o,
            (None, Side::Ending) => high,
            (None, Side::Starting) if latest_when_unmatched => high,
            (None, Side::Starting) => {
                return Err(bad(format!(
                    "No offset matched from request of topic-partition {t}-{p} and timestamp \
                     {ts}: no record of it is that recent. To start such partitions at their \
                     latest offset instead, set startingOffsetsByTimestampStrategy to latest."
                )))
            }
        };
        put(t, *p, o);
    }
    Ok(out)
}

/// Spark's rule for specific offsets: they name exactly the assigned partitions.
fn all_partitions_given(m: &PartitionOffsets, ranges: &Ranges, key: &str) -> Result<()> {
    let given: Vec<String> = m
        .iter()
        .flat_map(|(t, ps)| ps.keys().map(move |p| format!("{t}-{p}")))
        .collect();
    let assigned: Vec<String> = ranges.keys().map(|(t, p)| format!("{t}-{p}")).collect();
    let mut g = given.clone();
    g.sort();
    let mut a = assigned.clone();
    a.sort();
    if g != a {
        return Err(bad(format!(
            "If {key} contains specific offsets, you must specify all TopicPartitions. Use -1 \
             for latest, -2 for earliest. Specified: {} Assigned: {}",
            g.join(", "),
            a.join(", ")
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(kv: &[(&str, &str)]) -> HashMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn ranges() -> Ranges {
        [
            (("t".to_string(), 0), (5, 50)),
            (("t".to_string(), 1), (0, 10)),
        ]
        .into_iter()
        .collect()
    }

    #[test]
    fn timestamp_comes_before_by_timestamp_before_offsets() {
        let o = options(&[
            ("startingOffsets", "earliest"),
            ("startingOffsetsByTimestamp", r#"{"t":{"0":7,"1":8}}"#),
            ("startingTimestamp", "1000"),
        ]);
        assert_eq!(
            parse(&o, Side::Starting).unwrap(),
            Some(OffsetSpec::Timestamp(1000))
        );
        let o = options(&[
            ("startingOffsets", "earliest"),
            ("startingOffsetsByTimestamp", r#"{"t":{"0":7}}"#),
        ]);
        assert!(matches!(
            parse(&o, Side::Starting).unwrap(),
            Some(OffsetSpec::ByTimestamp(_))
        ));
        assert_eq!(parse(&options(&[]), Side::Ending).unwrap(), None);
        assert!(parse(&options(&[("startingTimestamp", "soon")]), Side::Starting).is_err());
    }

    #[test]
    fn specs_resolve_per_partition_with_sparks_rules() {
        let none = |_: &[(String, i32, i64)]| -> Result<Vec<Option<i64>>> { unreachable!() };
        let r = ranges();
        let e = resolve(&OffsetSpec::Earliest, Side::Starting, &r, false, none).unwrap();
        assert_eq!(e["t"][&0], 5);
        let spec = OffsetSpec::Specific([("t".into(), [(0, -1), (1, -2)].into())].into());
        let s = resolve(&spec, Side::Starting, &r, false, none).unwrap();
        assert_eq!((s["t"][&0], s["t"][&1]), (50, 0));
        // Every assigned partition must be named.
        let partial = OffsetSpec::Specific([("t".into(), [(0, 7)].into())].into());
        let err = resolve(&partial, Side::Starting, &r, false, none).unwrap_err();
        assert!(
            err.message().contains("must specify all TopicPartitions"),
            "{err}"
        );
        // A time without a later record: an error, latest with the strategy, latest at the end.
        let by_time = |_: &[(String, i32, i64)]| Ok(vec![Some(9), None]);
        let spec = OffsetSpec::Timestamp(123);
        let err = resolve(&spec, Side::Starting, &r, false, by_time).unwrap_err();
        assert!(err.message().contains("t-1 and timestamp 123"), "{err}");
        let s = resolve(&spec, Side::Starting, &r, true, by_time).unwrap();
        assert_eq!((s["t"][&0], s["t"][&1]), (9, 10));
        let s = resolve(&spec, Side::Ending, &r, false, by_time).unwrap();
        assert_eq!(s["t"][&1], 10);
    }

    #[test]
    fn batch_reads_cannot_start_at_latest_or_end_at_earliest() {
        assert!(check_batch(&OffsetSpec::Latest, Side::Starting).is_err());
        assert!(check_batch(&OffsetSpec::Earliest, Side::Ending).is_err());
        let spec = OffsetSpec::Specific([("t".into(), [(0, -2)].into())].into());
        let err = check_batch(&spec, Side::Ending).unwrap_err();
        assert!(
            err.message()
                .contains("endingOffsets for t-0 can't be earliest"),
            "{err}"
        );
        assert!(check_batch(&spec, Side::Starting).is_ok());
    }
}
