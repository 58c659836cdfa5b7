//! Compiles every `bpf/*.bpf.c` into a BPF object in OUT_DIR with clang.
//! The objects are embedded into the crate with `include_bytes!`, so the
//! binaries carry their BPF programs and need no files at run time.

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
}
