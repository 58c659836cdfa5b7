//! Compiles every `bpf/*.bpf.c` into a BPF object in OUT_DIR with clang.
//! The objects are embedded into the crate with `include_bytes!`, so the
//! binaries carry their BPF programs and need no files at run time.
//!
//! Also generates `abi.rs` in OUT_DIR from `bpf/include/ferry_abi.h` with
//! bindgen: the structs the BPF programs share with user space are defined
//! once, in C, and `src/abi.rs` names and extends the generated types.

use std::{env, path::PathBuf, process::Command};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let bpf_dir = manifest.join("../../../bpf");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let clang = env::var("CLANG").unwrap_or_else(|_| "clang".to_string());
    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    println!("cargo:rerun-if-env-changed=CLANG");

    let mut sources: Vec<PathBuf> = std::fs::read_dir(&bpf_dir)
        .expect("bpf/ directory")
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    for src in sources {
        let stem = src.file_name().unwrap().to_string_lossy().replace(".bpf.c", "");
        let obj = out.join(format!("{stem}.bpf.o"));
        let status = Command::new(&clang)
            .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
            .arg("-I")
            .arg(bpf_dir.join("include"))
            .args(["-I", "/usr/include/x86_64-linux-gnu"])
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(&obj)
            .status()
            .unwrap_or_else(|e| {
                panic!("not supported: needs clang to build BPF programs ({clang}: {e}); run `make deps`")
            });
        assert!(status.success(), "clang failed on {}", src.display());
    }
    generate_abi(&bpf_dir.join("include"), &out.join("abi.rs"));
}

/// The shared layouts: every `ferry_*` struct and `FERRY_*` constant of
/// `ferry_abi.h`, with the derives the Rust side uses. Types whose Rust side
/// has its own `Default` (non-zero defaults) are generated without one.
fn generate_abi(include: &std::path::Path, out: &std::path::Path) {
    let header = include.join("ferry_abi.h");
    println!("cargo:rerun-if-changed={}", header.display());
    bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(["-I/usr/include/x86_64-linux-gnu".to_string(), format!("-I{}", include.display())])
        .allowlist_type("ferry_.*")
        .allowlist_var("FERRY_.*")
        .derive_default(true)
        .derive_eq(true)
        .derive_hash(true)
        .no_default("ferry_gen_config")
        .layout_tests(false)
        .generate()
        .unwrap_or_else(|e| {
            panic!("not supported: needs libclang to read {} ({e}); run `make deps`", include.display())
        })
        .write_to_file(out)
        .expect("writing the generated ABI");
}
