# Ferry — two commands on a fresh Debian 12 machine, as root:
#   make demo   build, set up a netns testbed, run a ferryd chain on AF_XDP, tear down
#   make test   lint and run every test (unit, BPF test-run tables, netns e2e,
#               loom models of the shared-memory rings)
SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
APT_PACKAGES := clang llvm libelf-dev libbpf-dev pkg-config iproute2 iputils-ping iputils-arping tshark ethtool \
  clang-format curl nginx-light wrk iperf3 haproxy nftables libndpi-dev python3-prometheus-client tmux \
  protobuf-compiler openvswitch-switch ipvsadm conntrack
FERRY_RELEASE := target/release/ferry
FERRY_DEBUG := target/debug/ferry

.PHONY: all deps build demo deb test test-suite test-stress lint soak fuzz fuzz-all fuzz-merge fuzz-build bench bench-io bench-chain bench-pipeline bench-evnf bench-peers clean sweep

all: build

# Installs what the build and the tests need, once: Debian packages (clang
# for the BPF programs, iproute2 for testbeds, tshark to check pcap files,
# Open vSwitch, nftables, ipvsadm and conntrack for the peers `ferry bench
# peers` runs)
# and a Rust toolchain if none is on the PATH.
deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	@command -v $(CARGO) >/dev/null 2>&1 || { \
	  echo "no cargo on PATH: installing Debian's rustc and cargo (Ferry needs Rust >= 1.80)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cargo rustc >/dev/null; }
	@$(CARGO) --version

build: deps
	$(CARGO) build --release --workspace

demo: build
	$(FERRY_RELEASE) testbed sweep
	$(FERRY_RELEASE) demo

# ferry_<version>_amd64.deb in target/debian (cargo-deb, installed if
# missing): the release binaries, the BPF objects, the systemd unit, man
# pages, completions and examples (the list: crates/tools/ferry-cli/Cargo.toml).
DEB_STAGE := target/release/deb
CARGO_DEB_VERSION := 3.8.0
deb: deps
	$(CARGO) build --release -p ferry-cli -p ferryd -p ferry-host -p ferry-bench
	@command -v cargo-deb >/dev/null 2>&1 || $(CARGO) install cargo-deb --locked --version $(CARGO_DEB_VERSION)
	rm -rf $(DEB_STAGE) && mkdir -p $(DEB_STAGE)/bpf
	cp $$(dirname $$(ls -t target/release/build/ferry-bpf-*/out/pipeline.bpf.o | head -1))/*.bpf.o $(DEB_STAGE)/bpf/
	target/release/ferry generate $(DEB_STAGE)
	gzip -9n $(DEB_STAGE)/man1/*.1 $(DEB_STAGE)/man8/*.8
	rm -f target/debian/ferry_*.deb
	$(CARGO) deb -p ferry-cli --no-build --strip --output target/debian/

lint: deps
	.ci/check-layers
	$(CARGO) fmt --all -- --check
	clang-format --dry-run -Werror bpf/*.c bpf/include/*.h crates/tools/ferry-fuzz/c/*.c crates/tools/ferry-fuzz/c/shim/bpf/*.h
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# An hour (MINUTES) of two chains under traffic while a driver deploys and
# removes a third, reloads, kills NFs, stops a sink, and ends ferryd
# --persist by SIGTERM and SIGKILL for a new one to adopt (`ferry bench
# soak`): a table, target/soak/soak.json and target/soak/soak.png
# (matplotlib, installed here). Not part of `make test`.
MINUTES ?= 60
SOAK_RATE ?= 50000
soak: build
	@dpkg -s python3-matplotlib >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-matplotlib >/dev/null; }
	$(FERRY_RELEASE) bench soak --minutes $(MINUTES) --rate $(SOAK_RATE) --out target/soak

# Coverage-guided fuzzing with libFuzzer (clang's, built by libfuzzer-sys)
# on the stable toolchain: the Rust gets LLVM's SanitizerCoverage by
# -C passes, the C of the differential targets by clang's
# -fsanitize-coverage (crates/tools/ferry-fuzz/build.rs).
#   make fuzz TARGET=frame SECONDS=600   one target
#   make fuzz-all [FUZZ_SECONDS=180]     every target in turn, then a table
#   make fuzz-merge TARGET=frame         keep the new coverage as seeds
# The targets are the directories of fuzz/corpus; `make test` replays
# every committed input (fuzz/corpus, fuzz/findings) as a plain test.
TARGET ?= frame
SECONDS ?= 600
FUZZ_SECONDS ?= 180
FUZZ_RUSTFLAGS := -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
  -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks
fuzz-build: deps
	RUSTFLAGS="$(FUZZ_RUSTFLAGS)" CARGO_TARGET_DIR=target/fuzz $(CARGO) build --release -p ferry-fuzz \
	  --features libfuzzer --bin ferry-fuzz --target x86_64-unknown-linux-gnu

fuzz: fuzz-build
	fuzz/run $(TARGET) $(SECONDS)

fuzz-all: fuzz-build
	fuzz/run --all $(FUZZ_SECONDS)

fuzz-merge: fuzz-build
	fuzz/run --merge $(TARGET)

# Every test binary runs (--no-fail-fast) and every failure is listed; the
# last line is `N passed, N failed` for the whole run, and the exit status is
# non-zero if anything failed (a crashed binary counts as a failure).
test: deps lint test-suite

# The tests alone, without lint: what `make test` and `make test-stress` run.
# Testbeds left by a killed earlier run are swept before and after.
TEST_LOG ?= target/test.log
test-suite: deps deb
	$(CARGO) build --workspace
	$(FERRY_DEBUG) testbed sweep
	@mkdir -p $(dir $(TEST_LOG))
	set -o pipefail; rc=0; \
	FERRY_DEB=$$(ls $(CURDIR)/target/debian/ferry_*_amd64.deb) \
	  $(CARGO) test --workspace --no-fail-fast -- --test-threads=2 2>&1 | tee $(TEST_LOG) || rc=1; \
	$(FERRY_DEBUG) testbed sweep; \
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test -p ferry-ring -p ferry-parallel --release \
	  --no-fail-fast --test loom 2>&1 | tee -a $(TEST_LOG) || rc=1; \
	awk -f .ci/test-summary.awk $(TEST_LOG); \
	exit $$rc

# The test suite RUNS times (default 5) under a CPU hog on every core, with
# a table of failures per test. Not part of `make test`.
RUNS ?= 5
test-stress: deps
	RUNS=$(RUNS) .ci/test-stress

bench: bench-io bench-chain bench-evnf
bench-io: build
	$(FERRY_RELEASE) bench io --json target/ferry-bench/io.json
bench-chain: build
	$(FERRY_RELEASE) testbed sweep
	$(FERRY_RELEASE) bench chain --json target/ferry-bench/chain.json

bench-pipeline: build
	$(FERRY_RELEASE) bench pipeline --json target/ferry-bench/pipeline.json
bench-peers: build
	@mkdir -p target/ferry-bench
	$(FERRY_RELEASE) bench peers --json target/ferry-bench/peers.json
bench-evnf: build
	$(FERRY_RELEASE) testbed sweep
	$(FERRY_RELEASE) bench evnf --json target/ferry-bench/evnf.json

sweep:
	$(FERRY_DEBUG) testbed sweep

clean:
	$(CARGO) clean
