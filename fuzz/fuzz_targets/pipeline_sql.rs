#![no_main]
//! Fuzzes sluice::fuzzing::pipeline_sql: any pipeline file text must give an error or a
//! pipeline, never a panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice::fuzzing::pipeline_sql(data);
});
