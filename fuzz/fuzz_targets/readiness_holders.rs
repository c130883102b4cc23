#![no_main]
//! See `crr_fuzz::readiness`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crr_fuzz::readiness::run(data));
