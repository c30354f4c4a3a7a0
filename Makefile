# The two commands of the README:
#   make demo   install what is missing, build, run the demo
#   make test   install what is missing, build, run the whole test suite
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: deps build demo test test-cgroup-v2 bench-cgroup-v2 test-kernel-zygote chaos cluster-sim bench clean fuzz fuzz-build test-fuzz test-asan test-asan-short asan-build hot-order

deps:
	@scripts/install-deps

# Line tables only (-g1): backtraces keep their lines, and each source compiles ~25 %
# faster than with full debug information (docs/performance.md, "The test suite's time").
build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O2 -g1 -DNDEBUG' > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo

# Before the suite: a short run of every fuzz target and part of the sanitizer build's
# tests (below). The suite runs TEST_JOBS CTest entries at once (those that share
# host-wide state are kept apart: tests/CMakeLists.txt), the integration tests where a
# kernel's origin matters included a second time with every kernel from a kernel zygote
# (what `nsbox serve` gives its sandboxes by default; "zygote: " entries). It ends with the
# tests skipped on this host and why, and fails if `nsbox doctor` says the host has what a
# skipped test said it lacked (tests/report_skips).
TEST_JOBS ?= 4
test: build
	@$(MAKE) --no-print-directory test-fuzz
	@$(MAKE) --no-print-directory test-asan-short
	@cd $(BUILD) && ctest -j $(TEST_JOBS) --output-on-failure --no-tests=error; status=$$?; \
	  $(CURDIR)/tests/report_skips . || status=1; exit $$status

# The same tests in a Debian 12 VM with cgroup v2 only (the build machines are hybrid).
# Optional: needs qemu and, the first time, the Debian archive; several minutes.
test-cgroup-v2: build
	@scripts/install-deps --vm
	@tests/vm/run-cgroup-v2 $(BUILD)

# bench/startup in that VM: the one-shot against bwrap on cgroup v2 (a ratio only: the
# guest runs under emulation). NSBOX_VM_BENCH_RUNS runs each (100).
bench-cgroup-v2: build
	@scripts/install-deps --vm
	@NSBOX_VM_RUN=bench-startup tests/vm/run-cgroup-v2 $(BUILD)

# The integration tests where a kernel's origin matters (tagged [zygote]) with every
# kernel forked by a kernel zygote (docs/kernel-zygote.md), as `nsbox serve` makes them by
# default, each sandbox checked to have had its kernel from it; skipped, saying why, where
# the host has no zygote (not root, Linux < 6.9). Part of make test (its "zygote: " entries).
test-kernel-zygote: build
	@cd $(BUILD) && ctest -j $(TEST_JOBS) -R '^zygote: ' --output-on-failure --no-tests=error; \
	  status=$$?; $(CURDIR)/tests/report_skips . || status=1; exit $$status

# Chaos (tests/chaos/run): CHAOS_ROUNDS rounds of killed host-side processes and a full
# disk while sandboxes work; make test runs 5. Replay a failure with CHAOS_ARGS="--seed S".
CHAOS_ROUNDS ?= 50
chaos: build
	@tests/chaos/run --rounds $(CHAOS_ROUNDS) --nsbox $(BUILD)/bin/nsbox $(CHAOS_ARGS)

# The multi-server simulation (tests/cluster/run): three sharded servers behind HAProxy
# with s3rver as the snapshot store; make test runs 5 random rounds, this CLUSTER_ROUNDS.
# Replay a failure with CLUSTER_ARGS="--seed S".
CLUSTER_ROUNDS ?= 20
cluster-sim: build
	@NSBOX_TEST_PEERS=required tests/cluster/run --rounds $(CLUSTER_ROUNDS) --nsbox $(BUILD)/bin/nsbox $(CLUSTER_ARGS)

# Fuzzing and sanitizers (docs/design.md, "Build and tests"), each in a build directory of its own.
# make fuzz: every libFuzzer target of tests/fuzz for FUZZ_SECONDS from a random seed, or
# FUZZ_SEED (crashes are kept in build-fuzz/fuzz/crashes); make test runs each for
# FUZZ_TEST_SECONDS from the fixed FUZZ_TEST_SEED, so that its run is the same each time.
# Both first replay every seed of tests/fuzz/corpus whole. make test-asan: the whole suite
# built with ASan + UBSan (g++), less ASAN_EXCLUDE (a CTest regex).
FUZZ_BUILD ?= build-fuzz
ASAN_BUILD ?= build-asan
FUZZ_SECONDS ?= 60
FUZZ_TEST_SECONDS ?= 15
FUZZ_SEED ?=
FUZZ_TEST_SEED ?= 20261206
ASAN_EXCLUDE ?=
SANITIZER_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O1 -g1 -DNDEBUG'
# The ASan build is not optimised: it compiles in ~60 % of -O1's time (the largest part of
# make test from a clean checkout) and its tests run a little slower; the fuzz build keeps
# -O1 for its inputs per second.
ASAN_FLAGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO='-O0 -g1 -DNDEBUG'

fuzz-build: deps
	@cmake -S . -B $(FUZZ_BUILD) $(SANITIZER_FLAGS) -DNSBOX_FUZZ=ON -DCMAKE_C_COMPILER=clang-16 \
	  -DCMAKE_CXX_COMPILER=clang++-16 > /dev/null
	@cmake --build $(FUZZ_BUILD) --target fuzz-targets -j $(JOBS)

fuzz: fuzz-build
	@tests/fuzz/run -b $(FUZZ_BUILD) -s $(FUZZ_SECONDS) $(if $(FUZZ_SEED),-r $(FUZZ_SEED))

test-fuzz: fuzz-build
	@tests/fuzz/run -b $(FUZZ_BUILD) -s $(FUZZ_TEST_SECONDS) -r $(FUZZ_TEST_SEED)

asan-build: deps
	@cmake -S . -B $(ASAN_BUILD) $(ASAN_FLAGS) -DNSBOX_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) -j $(JOBS)

test-asan: asan-build
	@tests/fuzz/test-asan $(ASAN_BUILD) -j $(TEST_JOBS) $(if $(ASAN_EXCLUDE),-E '$(ASAN_EXCLUDE)')

# What make test runs of the sanitizer build (docs/design.md, "Build and tests"): the unit tests, and
# the Python client's suite and a short chaos run against sanitized host programs (nsbox
# serve, supervisors, bucket servers). The integration tests' binary is left to
# make test-asan: building and running it under ASan costs ~10 more minutes.
test-asan-short: deps
	@cmake -S . -B $(ASAN_BUILD) $(ASAN_FLAGS) -DNSBOX_SANITIZE=ON > /dev/null
	@cmake --build $(ASAN_BUILD) --target nsbox nsbox_unit_tests -j $(JOBS)
	@tests/fuzz/test-asan $(ASAN_BUILD) -j $(TEST_JOBS) -R '^(unit:|python: client:|chaos: short$$)'

bench: build
	@bench/startup
	@bench/kernel
	@bench/api
	@bench/files
	@bench/buckets
	@bench/network
	@bench/snapshot
	@bench/cluster

# cmake/hot-functions.order from this build: the functions `nsbox run` and a sandbox's
# create, sh and rm reach, in the order they first run (scripts/trace-hot-functions; root).
# The build links nsbox and the supervisor with them first. Run it when those paths
# changed ("layout: ..." in make test says when).
hot-order: build
	@scripts/trace-hot-functions --build $(BUILD) --out cmake/hot-functions.order
	@cmake --build $(BUILD) -j $(JOBS) --target nsbox nsbox-supervisor

clean:
	rm -rf $(BUILD) $(FUZZ_BUILD) $(ASAN_BUILD)
