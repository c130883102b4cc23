//! Generates the CRI v1 client (and the server trait, for the fake runtime in tests) from
//! proto/cri/runtime/v1/api.proto with tonic. Default stubs let the fake implement only the
//! calls the daemon makes; the rest answer `Unimplemented`, as an old runtime would.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../proto/cri/runtime/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .generate_default_stubs(true)
        .compile_protos(&[proto], &["../proto"])?;
    Ok(())
}
