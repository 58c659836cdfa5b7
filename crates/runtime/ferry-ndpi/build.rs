//! Compiles the C shim that isolates nDPI's ABI and links the system
//! libndpi (Debian 12: libndpi-dev 4.2).

use std::path::Path;

const HEADER: &str = "/usr/include/ndpi/ndpi_api.h";

fn main() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    println!("cargo:rerun-if-changed={HEADER}");
    if !Path::new(HEADER).exists() {
        panic!("not supported: needs libndpi-dev (apt install libndpi-dev); {HEADER} is missing");
    }
    cc::Build::new()
        .file("csrc/shim.c")
        .include("/usr/include/ndpi")
        .warnings(true)
        .extra_warnings(true)
        // nDPI's own headers trip -Wextra (unused parameters in inline helpers).
        .flag_if_supported("-Wno-unused-parameter")
        .compile("ferry_ndpi_shim");
    println!("cargo:rustc-link-lib=ndpi");
}
