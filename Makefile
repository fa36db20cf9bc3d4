# A thin wrapper over CMake: `make run` and `make test` are the two
# commands the README promises.
BUILD		?= build
BUILD_ASAN	?= build-asan
JOBS		?= $(shell nproc 2>/dev/null || echo 2)
QUICKSTART	?= packaging/quickstart.conf

.PHONY: all deps build build-asan run test test-release test-sanitize clean

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

# Everything, plain and under ASan+UBSan; ctest's summary is the last word.
test: test-sanitize test-release

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
