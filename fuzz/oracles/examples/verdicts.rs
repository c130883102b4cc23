use arbitrary::{Arbitrary, Unstructured};
use std::collections::BTreeMap;
fn main() {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for dir in std::env::args().skip(1) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let key =
                match crr_fuzz::admission::Input::arbitrary_take_rest(Unstructured::new(&data)) {
                    Ok(mut input) => {
                        if input.coherent {
                            input.cohere();
                        }
                        format!("{:?}", crr_fuzz::admission::run_structured(&input))
                    }
                    Err(_) => "unstructured".into(),
                };
            *counts.entry(key).or_default() += 1;
        }
    }
    println!("{counts:#?}");
}
