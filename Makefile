# The README's two commands: `make run` and `make test`. Both install missing Debian packages,
# configure and build first.
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
MESHCAST := $(BUILD)/tools/meshcast/meshcast

.PHONY: all deps configure build run test test-asan test-no-mpi test-tsan fuzz format clean

all: build

deps:
	@scripts/install-deps

$(BUILD)/build.ninja: | deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DPython_EXECUTABLE=/usr/bin/python3

configure: deps $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	scripts/run-main $(MESHCAST)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The unit tests again under AddressSanitizer and UndefinedBehaviorSanitizer, then every libFuzzer
# harness of fuzz/ for SHORT_FUZZ_SECONDS: one clang build serves both (its libraries carry the
# fuzzers' coverage instrumentation too), built without MPI (no unit test needs it), so that they
# are also the unit tests of a machine without Open MPI. -O1 keeps the sanitizers' reports exact
# and runs the property tests several times faster than -O0; -g1 (line tables) is all their stack
# traces print. Only the unit tests' binaries and the harnesses are built: the command line's
# tests run in the other builds. The heaviest property tests run the first quarter of their random
# cases here (tests/corpus.h, sanitized_count), all of them in `make test`.
SHORT_FUZZ_SECONDS ?= 3
test-asan: deps
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++-16 \
	  -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DMESHCAST_SANITIZE=ON -DMESHCAST_FUZZ=ON \
	  -DMESHCAST_BUILD_BENCH=OFF -DMESHCAST_WITH_MPI=OFF
	cmake --build $(BUILD)-asan -j $(JOBS) --target unit_tests fuzz_harnesses
	cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -L unit
	scripts/fuzz $(BUILD)-asan $(SHORT_FUZZ_SECONDS)

# The command line built without the MPI backend (as on a machine without Open MPI): its tests,
# the documents' examples, and `--backend mpi` refused with a clear message (the unit tests of
# such a build are test-asan's).
test-no-mpi: deps
	cmake -S . -B $(BUILD)-no-mpi -G Ninja -DCMAKE_BUILD_TYPE=Release -DMESHCAST_WITH_MPI=OFF \
	  -DMESHCAST_BUILD_BENCH=OFF -DMESHCAST_WITH_PYTHON=OFF
	cmake --build $(BUILD)-no-mpi -j $(JOBS) --target meshcast_cli readme_consumer
	cd $(BUILD)-no-mpi && ctest --output-on-failure -j $(JOBS) -L cli

# The sanitizers' reports need file and line, not variables: line tables build faster than -g.
LINE_TABLES := -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"

# The local executor's tests and the watchdog's under ThreadSanitizer (gcc's: clang's links its
# own operator new, which the executor's allocation test replaces): data races in the worker pool,
# the executor's dependency tracking or the watchdog's thread fail the target.
test-tsan: deps
	cmake -S . -B $(BUILD)-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(LINE_TABLES) -DMESHCAST_TSAN=ON \
	  -DMESHCAST_BUILD_BENCH=OFF -DMESHCAST_WITH_MPI=OFF -DMESHCAST_WITH_PYTHON=OFF
	cmake --build $(BUILD)-tsan -j $(JOBS) --target runtime_local_test runtime_watchdog_test
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)-tsan/tests/runtime_local_test
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)-tsan/tests/runtime_watchdog_test --gtest_filter='WatchdogTest.*'

# Every libFuzzer harness of fuzz/ for FUZZ_SECONDS each (clang, ASan, UBSan; docs/reliability.md).
FUZZ_SECONDS ?= 60
fuzz: deps
	cmake -S . -B $(BUILD)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo $(LINE_TABLES) \
	  -DCMAKE_CXX_COMPILER=clang++-16 -DMESHCAST_FUZZ=ON -DMESHCAST_BUILD_TESTS=OFF \
	  -DMESHCAST_BUILD_BENCH=OFF -DMESHCAST_WITH_MPI=OFF
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target fuzz_harnesses
	scripts/fuzz $(BUILD)-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp')

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-no-mpi $(BUILD)-tsan $(BUILD)-fuzz
