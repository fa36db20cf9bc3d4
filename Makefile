# A thin wrapper over CMake: `make run` and `make test` are the two
# commands the README promises.
BUILD		?= build
BUILD_ASAN	?= build-asan
BUILD_FUZZ	?= build-fuzz
JOBS		?= $(shell nproc 2>/dev/null || echo 2)
QUICKSTART	?= packaging/quickstart.conf
# Seconds per fuzz target, JOBS targets at a time: 14 targets, under 2.5
# minutes on 2 cores.  FUZZ_TARGETS picks some (names as in tests/fuzz/corpus).
FUZZ_SECONDS	?= 20
FUZZ_LONG_SECONDS ?= 3600
FUZZ_TARGETS	?=

.PHONY: all deps build build-asan build-fuzz run test test-release \
	test-sanitize test-fuzz fuzz-long clean

all: build

deps:
	@sh packaging/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

build-asan: deps
	@cmake -S . -B $(BUILD_ASAN) -DCMAKE_BUILD_TYPE=Debug \
	    -DSANITIZE=address,undefined >/dev/null
	@cmake --build $(BUILD_ASAN) -j $(JOBS)

# libFuzzer needs clang; every object gets ASan and UBSan (tests/fuzz).
build-fuzz: deps
	@cmake -S . -B $(BUILD_FUZZ) -DCMAKE_C_COMPILER=clang \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFUZZ=ON >/dev/null
	@cmake --build $(BUILD_FUZZ) -j $(JOBS) --target fuzz

# The broker on its quick-start config: 127.0.0.1:8080, state in ./run.
run: build
	@mkdir -p run
	$(BUILD)/bin/mcpbroker -d -f $(QUICKSTART) \
	    -D statedir=$(CURDIR)/run/state -D ctlsock=$(CURDIR)/run/control.sock

test-release: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-sanitize: build-asan
	cd $(BUILD_ASAN) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    ctest --output-on-failure -j $(JOBS)

# Each fuzz target for FUZZ_SECONDS on a copy of its corpus.
test-fuzz: build-fuzz
	@sh tests/fuzz/run.sh $(BUILD_FUZZ) $(FUZZ_SECONDS) $(JOBS) \
	    $(FUZZ_TARGETS)

# On demand: an hour per target.
fuzz-long:
	@$(MAKE) test-fuzz FUZZ_SECONDS=$(FUZZ_LONG_SECONDS)

# Everything, plain and under ASan+UBSan, then the fuzz targets.
test: test-sanitize test-release test-fuzz

clean:
	rm -rf $(BUILD) $(BUILD_ASAN) $(BUILD_FUZZ)
