#![no_main]
//! See `crr_fuzz::admission`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crr_fuzz::admission::run(data));
