//! Helpers of the tests that build C NFs against libferry and run them in
//! ferryd chains.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// Skips (returns false) or, under CI=true, fails.
pub fn can_run(test: &str, why: &str) -> bool {
    if ci() {
        panic!("CI=true but {test} cannot run: {why}");
    }
    eprintln!("SKIP {test}: {why}");
    false
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..").canonicalize().expect("workspace root")
}

/// The profile directory this test was built into (target/release for
/// `cargo test --release`): where cargo puts libferry.so, ferryd and ferry.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    // target/<profile>/deps/c_example-<hash>
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// Runs `cargo build` for `packages` in this test's profile.
pub fn cargo_build(packages: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.arg("build").current_dir(workspace());
    if profile_dir().file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    for p in packages {
        cmd.args(["-p", p]);
    }
    let st = cmd.status().expect("running cargo build");
    assert!(st.success(), "cargo build {packages:?} failed");
}

/// Makes sure the artifacts the chain needs exist, and that libferry.so is
/// the library this test was built with: `cargo test` rebuilds only the copy
/// in deps/, `cargo build` also the one in the profile directory.
pub fn ensure_built() -> PathBuf {
    let dir = profile_dir();
    cargo_build(&["ferry-capi"]);
    if !dir.join("ferryd").is_file() || !dir.join("ferry").is_file() {
        cargo_build(&["ferryd", "ferry-cli"]);
    }
    for f in ["libferry.so", "ferryd", "ferry"] {
        assert!(dir.join(f).is_file(), "{} missing after cargo build", dir.join(f).display());
    }
    dir
}

/// The C compiler, if there is one.
pub fn c_compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    Command::new(&cc).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| cc)
}

/// Compiles `src` the way the example's build comment says, into `out`
/// (mode 0755).
pub fn compile(cc: &str, src: &Path, out: &Path, libdir: &Path) {
    let include = workspace().join("crates/runtime/ferry-capi/include");
    let output = Command::new(cc)
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-D_DEFAULT_SOURCE"])
        .arg("-I")
        .arg(&include)
        .arg(src)
        .arg("-L")
        .arg(libdir)
        .arg("-lferry")
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-lpthread")
        .arg("-o")
        .arg(out)
        .output()
        .expect("running the C compiler");
    assert!(output.status.success(), "{cc} {} failed:\n{}", src.display(), String::from_utf8_lossy(&output.stderr));
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// What a C-NF test needs: root (ferryd runs NFs as unprivileged uids), a
/// C compiler, and libferry, ferryd and ferry built. Returns the compiler
/// and the directory of the build, or None when test `test` is skipped
/// (under CI=true it fails instead).
pub fn build_setup(test: &str) -> Option<(String, PathBuf)> {
    // SAFETY: plain getter.
    if unsafe { libc::geteuid() } != 0 && !can_run(test, "needs root (ferryd runs NFs as unprivileged uids)") {
        return None;
    }
    let Some(cc) = c_compiler() else {
        can_run(test, "no C compiler: install one (apt-get install gcc) or set CC");
        return None;
    };
    Some((cc, ensure_built()))
}
