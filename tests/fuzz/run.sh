#!/bin/sh
# Run each fuzz target for a bounded time on a copy of its committed corpus
# (tests/fuzz/corpus/NAME), so that nothing the fuzzer finds is written
# into the source tree.  Fails if any target finds a crash, a sanitizer
# report, a leak, a timeout or runs out of memory.
#
# usage: run.sh BUILD-DIR SECONDS JOBS [TARGET...]
#
# Everything a run leaves is under BUILD-DIR/fuzz-run/NAME/: the grown
# corpus, the log, and any crashing input (crash-*, leak-*, timeout-*,
# oom-*), which the failure message names with the command to replay it.
set -eu

# One target: its own directory, a fresh copy of the corpus, one log.
one() {
	t=$1
	dir=$run/$t
	rm -rf "$dir"
	mkdir -p "$dir/corpus"
	cp "$src/corpus/$t/"* "$dir/corpus/"
	if "$build/fuzz/fuzz_$t" -max_total_time="$secs" -timeout=10 \
	    -rss_limit_mb=2048 -print_final_stats=1 \
	    -artifact_prefix="$dir/" "$dir/corpus" >"$dir/log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' \
		    "$dir/log")
		echo "fuzz $t: ok, $runs inputs in ${secs}s," \
		    "corpus $(ls "$dir/corpus" | wc -l) files"
		return 0
	fi
	{
		echo "fuzz $t: FAILED"
		grep -v -e '^#' -e '^INFO:' "$dir/log" | tail -n 60
		for a in "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* \
		    "$dir"/oom-*; do
			[ -e "$a" ] && echo "replay: $build/fuzz/fuzz_$t $a"
		done
	} | cat		# one write burst, not interleaved line by line
	return 1
}

# xargs runs this script again for each target: --one BUILD SECONDS NAME.
if [ "${1:-}" = "--one" ]; then
	build=$2
	secs=$3
	src=$(cd "$(dirname "$0")" && pwd)
	run=$build/fuzz-run
	export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
	one "$4"
	exit
fi

[ $# -ge 3 ] || { echo "usage: $0 BUILD-DIR SECONDS JOBS [TARGET...]" >&2
	exit 2; }
build=$(cd "$1" && pwd)
secs=$2
jobs=$3
shift 3
src=$(cd "$(dirname "$0")" && pwd)
run=$build/fuzz-run

if [ $# -eq 0 ]; then
	set -- $(cd "$src/corpus" && ls)
fi
for t in "$@"; do
	[ -x "$build/fuzz/fuzz_$t" ] || { echo "fuzz: no target $t in" \
	    "$build/fuzz" >&2; exit 2; }
done
mkdir -p "$run"
# Up to JOBS targets at a time.
if ! printf '%s\n' "$@" | xargs -P "$jobs" -n 1 sh "$src/run.sh" --one \
    "$build" "$secs"; then
	echo "fuzz: FAILED (logs and inputs under $run)"
	exit 1
fi
echo "fuzz: all $# targets ok"
