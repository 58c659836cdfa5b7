//! The libFuzzer driver: runs the target `FERRY_FUZZ_TARGET` names.
//! `make fuzz TARGET=… SECONDS=…` builds and runs it.
#![no_main]

use std::sync::OnceLock;

fn chosen() -> &'static ferry_fuzz::Target {
    static TARGET: OnceLock<&'static ferry_fuzz::Target> = OnceLock::new();
    TARGET.get_or_init(|| {
        let name = std::env::var("FERRY_FUZZ_TARGET").unwrap_or_default();
        ferry_fuzz::target(&name).unwrap_or_else(|| {
            let names: Vec<&str> = ferry_fuzz::TARGETS.iter().map(|t| t.name).collect();
            eprintln!("FERRY_FUZZ_TARGET={name:?}: not a target; one of {}", names.join(", "));
            std::process::exit(2)
        })
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| (chosen().check)(data));
