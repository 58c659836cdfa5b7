//! Every committed fuzz input, replayed through its target: the seed
//! corpora (`fuzz/corpus/TARGET`) and every input a fuzzer ever found
//! failing (`fuzz/findings/TARGET`, kept after the fix). Deterministic:
//! the targets are plain functions of their bytes.

use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../fuzz")
}

/// The files of `dir`, sorted; none if it does not exist.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    files.sort();
    files
}

#[test]
fn every_committed_input_passes_its_target() {
    let mut replayed = 0;
    for t in ferry_fuzz::TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(t.name));
        assert!(!corpus.is_empty(), "target {} has no seed corpus in fuzz/corpus/{}", t.name, t.name);
        for file in corpus.iter().chain(&inputs(&fuzz_dir().join("findings").join(t.name))) {
            let data = std::fs::read(file).unwrap();
            let outcome = std::panic::catch_unwind(|| (t.check)(&data));
            assert!(outcome.is_ok(), "target {} fails on {}", t.name, file.display());
            replayed += 1;
        }
    }
    println!("{replayed} inputs replayed");
}

#[test]
fn every_corpus_directory_is_a_target() {
    for kind in ["corpus", "findings"] {
        for dir in inputs(&fuzz_dir().join(kind)).iter().chain(&dirs(&fuzz_dir().join(kind))) {
            let name = dir.file_name().unwrap().to_string_lossy();
            assert!(ferry_fuzz::target(&name).is_some(), "fuzz/{kind}/{name} is no target's");
        }
    }
}

fn dirs(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect()).unwrap_or_default()
}
