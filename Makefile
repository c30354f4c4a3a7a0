# The two commands of the README:
#   make demo   install what is missing, build, run the demo
#   make test   install what is missing, build, run the whole test suite
BUILD ?= build
JOBS  ?= $(shell nproc)

.PHONY: deps build demo test bench clean

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	@scripts/demo

test: build
	@cd $(BUILD) && ctest --output-on-failure --no-tests=error

bench: build
	@bench/startup

clean:
	rm -rf $(BUILD)
