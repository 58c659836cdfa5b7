# Reads the output of one or more `cargo test` runs and prints one line per
# failure, then `N passed, N failed` for the whole log as its last line.
#
# A failure is a test reported FAILED, a test binary that ended without its
# `test result:` line (it crashed: a signal, an abort, a stack overflow), or
# a build that did not compile (nothing ran, so its tests are not "passed").
# Lines are `FAILED <binary>::<test>`, `CRASHED <binary>` or `BUILD <what>`,
# the form `.ci/test-stress` counts per test across runs.

function close_binary() {
    if (binary != "" && !reported) {
        print "CRASHED " binary
        failed += 1
    }
    binary = ""
}

# `     Running tests/profiler.rs (target/debug/deps/profiler-0123abcd)`
/^ +Running / {
    close_binary()
    binary = $NF
    gsub(/[()]/, "", binary)
    sub(/.*\//, "", binary)
    sub(/-[0-9a-f]+$/, "", binary)
    reported = 0
}

# `   Doc-tests ferry_wire`
/^ +Doc-tests / {
    close_binary()
    binary = "doctest:" $2
    reported = 0
}

/^test .* \.\.\. FAILED$/ {
    print "FAILED " binary "::" $2
}

# `test result: FAILED. 5 passed; 1 failed; 0 ignored; ...`
/^test result:/ {
    passed += $4
    failed += $6
    reported = 1
}

/^error: could not compile/ {
    print "BUILD " $0
    failed += 1
}

END {
    close_binary()
    printf "%d passed, %d failed\n", passed, failed
}
