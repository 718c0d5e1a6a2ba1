#![no_main]
//! Fuzzes sluice::fuzzing::state_file: arbitrary bytes must give an error or a value, never a panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    sluice::fuzzing::state_file(data);
});
