#![no_main]
//! See `crr_fuzz::pre_stop_response`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| crr_fuzz::pre_stop_response::run(data));
