//! Stateful operators and watermarks (streaming aggregation, deduplication, joins,
//! flatMapGroupsWithState). Arrive with issues 3 and 4; until then `plan::analysis` refuses
//! stateful plans with a `SLUICE_NOT_SUPPORTED_YET` error.
