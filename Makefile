# The two commands of the README:
#   make demo   install what is missing, build, run the demo
#   make test   install what is missing, build, run the whole test suite
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: deps build demo test test-cgroup-v2 bench clean

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo

test: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error

# The same tests in a Debian 12 VM with cgroup v2 only (the build machines are hybrid).
# Optional: needs qemu and, the first time, the Debian archive; several minutes.
test-cgroup-v2: build
	@scripts/install-deps --vm
	@tests/vm/run-cgroup-v2 $(BUILD)

bench: build
	@bench/startup
	@bench/kernel
	@bench/files
	@bench/buckets

clean:
	rm -rf $(BUILD)
