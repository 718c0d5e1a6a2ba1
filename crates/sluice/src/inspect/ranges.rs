//! Inclusive id ranges (versions, batches, partitions) and their text (`1-4, 7`).

use std::fmt;

use serde::Serialize;

/// An inclusive range of versions or batch ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IdRange {
    /// The first id of the range.
    pub first: u64,
    /// The last id of the range (equal to `first` for one id).
    pub last: u64,
}

impl fmt::Display for IdRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first == self.last {
            write!(f, "{}", self.first)
        } else {
            write!(f, "{}-{}", self.first, self.last)
        }
    }
}

/// Collapses ascending ids into ranges.
pub(crate) fn to_ranges(ids: impl IntoIterator<Item = u64>) -> Vec<IdRange> {
    let mut out: Vec<IdRange> = Vec::new();
    for id in ids {
        match out.last_mut() {
            Some(r) if r.last.checked_add(1) == Some(id) => r.last = id,
            Some(r) if r.last == id => {}
            _ => out.push(IdRange {
                first: id,
                last: id,
            }),
        }
    }
    out
}

/// `1-4, 7` (or `none`).
pub(crate) fn format_ranges(ranges: &[IdRange]) -> String {
    if ranges.is_empty() {
        return "none".into();
    }
    ranges
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
