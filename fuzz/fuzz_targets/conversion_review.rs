#![no_main]
//! See `crr_fuzz::conversion`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crr_fuzz::conversion::run(data));
