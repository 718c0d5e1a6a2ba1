//! Stateful operators and event time: watermarks (`watermark`), windows (`window`), streaming
//! aggregation (`aggregate`). Deduplication, joins and flatMapGroupsWithState arrive with
//! issue 4; `plan::analysis` refuses them until then with a `SLUICE_NOT_SUPPORTED_YET` error.

pub mod aggregate;
pub mod dedup;
pub mod flat_map_groups_with_state;
pub mod join;
pub mod stateful;
pub mod watermark;
pub mod window;
