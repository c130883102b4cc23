//! `kubectl crr`: recreate containers in place from the command line.
fn main() {}
