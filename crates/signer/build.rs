//! Compiles `proto/v1/api.proto` (kube-apiserver's external signer, v1) into the gRPC server the
//! plugin serves and the client its tests call it with. protox parses the proto in Rust, so no
//! build machine needs `protoc`; tonic-prost-build writes the code from protox's descriptors.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(["v1/api.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // The client takes any channel: the plugin's code builds none, its tests bring theirs.
        .build_transport(false)
        .emit_rerun_if_changed(false)
        .compile_fds(descriptors)?;
    Ok(())
}
