#!/usr/bin/env bash
# Runs the MCP conformance suite's client scenarios against an MCP client command.
#
#   tests/conformance/run.sh [--] CLIENT_COMMAND [ARGS...]
#   e.g. tests/conformance/run.sh build/bin/mcpbrokerctl mcp conformance
#
# For each scenario the suite (@modelcontextprotocol/conformance, pinned in
# tests/package.json) starts a test server on an ephemeral localhost port and runs
#   CLIENT_COMMAND ARGS... SERVER_URL
# with MCP_CONFORMANCE_SCENARIO=<scenario> in the environment, then checks what the
# client did. The client must exit 0 when it has done its job.
#
# A scenario passes when the suite reports no failed check, no warning, the client exited
# 0 in time, and at least one check ran (the suite itself prints "OVERALL: PASSED" for
# "Passed: 0/0", which this script treats as an error). The outcome must match
# tests/conformance/expected-failures.txt exactly: an unlisted scenario that fails, or a
# listed one that passes (stale baseline), fails the run.
#
# Environment:
#   CONFORMANCE_SCENARIOS   space-separated scenarios (default: initialize tools_call
#                           sse-retry elicitation-sep1034-client-defaults)
#   CONFORMANCE_TIMEOUT_MS  per-scenario client timeout (default 30000)
#   CONFORMANCE_RESULTS     directory to keep logs and checks.json in (default: a temp dir,
#                           removed on success, kept and printed on failure)
#   CONFORMANCE_EXPECTED    expected-failures file (default: beside this script)
#   NODE                    node >= 22 to run the suite with (default: tests/setup-node.sh)
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS_DIR=$(dirname "$HERE")
CLI="$TESTS_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
SCENARIOS=${CONFORMANCE_SCENARIOS:-initialize tools_call sse-retry elicitation-sep1034-client-defaults}
TIMEOUT_MS=${CONFORMANCE_TIMEOUT_MS:-30000}
EXPECTED_FILE=${CONFORMANCE_EXPECTED:-$HERE/expected-failures.txt}

if [ "${1:-}" = "--" ]; then shift; fi
if [ $# -eq 0 ]; then
    echo "usage: $0 [--] CLIENT_COMMAND [ARGS...]" >&2
    exit 2
fi

if [ -z "${NODE:-}" ]; then
    NODE=$("$TESTS_DIR/setup-node.sh") || { echo "conformance: no usable node >= 22" >&2; exit 1; }
fi
if [ ! -f "$CLI" ]; then
    echo "conformance: $CLI missing (run tests/setup-node.sh)" >&2
    exit 1
fi

if [ -n "${CONFORMANCE_RESULTS:-}" ]; then
    OUT=$CONFORMANCE_RESULTS
    mkdir -p "$OUT" || exit 1
    KEEP=1
else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/mcp-conformance.XXXXXX") || exit 1
    KEEP=0
fi
OUT=$(cd "$OUT" && pwd)

# The suite splits --command on spaces and runs it through /bin/sh, so hand it the path
# of a wrapper that execs the exact argv (plus the URL the suite appends). On timeout the
# suite kills only that /bin/sh (dash does not exec the command) and then waits for the
# client's stdout to close, so the wrapper bounds the client itself with timeout(1), one
# second after the suite's own deadline (timeout also kills the client's process group).
WRAPDIR=$(mktemp -d "${TMPDIR:-/tmp}/mcp-conformance-cmd.XXXXXX") || exit 1
trap 'rm -rf "$WRAPDIR"' EXIT
WRAPPER="$WRAPDIR/client"
CLIENT_SECS=$(((TIMEOUT_MS + 999) / 1000 + 1))
{
    echo '#!/usr/bin/env bash'
    printf 'exec timeout -k 2 %s' "$CLIENT_SECS"
    printf ' %q' "$@"
    printf ' "$@"\n'
} >"$WRAPPER"
chmod +x "$WRAPPER"

# scenario -> 1 when listed in the expected-failures file ("name  # comment" lines).
declare -A EXPECTED=()
if [ -f "$EXPECTED_FILE" ]; then
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line%%#*}
        read -r name _ <<<"$line" || true
        [ -n "${name:-}" ] && EXPECTED[$name]=1
    done <"$EXPECTED_FILE"
fi
for name in "${!EXPECTED[@]}"; do
    case " $SCENARIOS " in
    *" $name "*) ;;
    *) echo "conformance: note: expected failure '$name' is not among the scenarios run" >&2 ;;
    esac
done

n_pass=0 n_xfail=0 n_bad=0
declare -a BAD=()
for s in $SCENARIOS; do
    log="$OUT/${s//\//_}.log"
    timeout -k 5 $((CLIENT_SECS + 60)) \
        "$NODE" "$CLI" client --command "$WRAPPER" --scenario "$s" --timeout "$TIMEOUT_MS" \
        -o "$OUT" >"$log" 2>&1
    rc=$?
    counts=$(sed 's/\x1b\[[0-9;]*m//g' "$log" |
        sed -n 's/^Passed: \([0-9]*\)\/\([0-9]*\), \([0-9]*\) failed, \([0-9]*\) warnings.*/\1 \2 \3 \4/p' | tail -n 1)
    if [ -z "$counts" ]; then
        echo "ERROR  $s: the suite printed no result line (exit $rc); see $log"
        n_bad=$((n_bad + 1)); BAD+=("$s"); continue
    fi
    read -r passed total failed warnings <<<"$counts"
    detail="$passed/$total checks, $failed failed, $warnings warnings"
    grep -q 'Client timed out' "$log" && detail="$detail, client timed out"
    crc=$(sed -n 's/^Client exited with code \(-\?[0-9]*\).*/\1/p' "$log" | tail -n 1)
    [ -n "$crc" ] && detail="$detail, client exit $crc"
    if [ "$total" -eq 0 ]; then
        echo "ERROR  $s: ran 0 checks ($detail); see $log"
        n_bad=$((n_bad + 1)); BAD+=("$s"); continue
    fi
    ok=0
    if [ "$rc" -eq 0 ] && [ "$failed" -eq 0 ] && [ "$warnings" -eq 0 ] && [ "$passed" -eq "$total" ]; then
        ok=1
    fi
    if [ -n "${EXPECTED[$s]:-}" ]; then
        if [ "$ok" -eq 1 ]; then
            echo "XPASS  $s ($detail): listed in $(basename "$EXPECTED_FILE") but passes; remove the entry"
            n_bad=$((n_bad + 1)); BAD+=("$s")
        else
            echo "XFAIL  $s ($detail): expected failure"
            n_xfail=$((n_xfail + 1))
        fi
    elif [ "$ok" -eq 1 ]; then
        echo "PASS   $s ($detail)"
        n_pass=$((n_pass + 1))
    else
        echo "FAIL   $s ($detail); see $log"
        sed 's/\x1b\[[0-9;]*m//g' "$log" | sed -n '/^Failed Checks:/,$p;/^Client exited/,/^Checks:/p' | head -n 40 | sed 's/^/       /'
        n_bad=$((n_bad + 1)); BAD+=("$s")
    fi
done

if [ "$n_bad" -gt 0 ] || [ "$KEEP" -eq 1 ]; then
    echo "conformance: logs and checks.json in $OUT"
else
    rm -rf "$OUT"
fi
[ "$n_xfail" -gt 0 ] && echo "conformance: $n_xfail expected failure(s), counted as skipped"
echo "conformance: $n_pass passed, $n_bad failed, $n_xfail skipped"
[ "$n_bad" -eq 0 ]
