//! The inputs and oracles of crr's fuzz targets. Each `fuzz/fuzz_targets/*.rs` is one line that
//! calls a `run` here, so the same code replays a crash in a plain test, and `tests/corpus.rs`
//! feeds it every committed seed of `fuzz/corpus/` under `cargo test`, without libFuzzer.
//!
//! Structured inputs derive [`arbitrary::Arbitrary`] and build real JSON (an AdmissionReview, a
//! ConversionReview, a pod condition) so the fuzzer spends its time in the rules rather than in
//! the JSON parser; every target also feeds its raw bytes to the same entry point. Names are
//! drawn mostly from a small set (`c0`..`c3`) so that a request's containers meet the pod's.

pub mod admission;
pub mod certificate;
pub mod conversion;
pub mod objects;
pub mod pre_stop_response;
pub mod readiness;
