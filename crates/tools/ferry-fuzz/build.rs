//! Builds `c/bpf_user.c`: Ferry's BPF parse header and element decisions
//! for user space, with `c/shim` first on the include path (libbpf's
//! helpers as plain functions). Under `--cfg fuzzing` (the libFuzzer
//! build) the C gets the same coverage instrumentation as the Rust, so
//! the fuzzer steers by the branches of both parsers.

use std::{env, path::PathBuf};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf_include = manifest.join("../../../bpf/include");
    println!("cargo:rerun-if-changed=c");
    println!("cargo:rerun-if-changed={}", bpf_include.display());
    let mut build = cc::Build::new();
    build
        .compiler("clang")
        .file(manifest.join("c/bpf_user.c"))
        .include(manifest.join("c/shim"))
        .include(&bpf_include)
        .flag("-Wno-unused-parameter")
        .warnings_into_errors(true);
    if env::var_os("CARGO_CFG_FUZZING").is_some() {
        build.flag("-fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp");
    }
    build.compile("ferry_bpf_user");
}
