#![no_main]
//! See `crr_fuzz::certificate`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crr_fuzz::certificate::run(data));
