#!/usr/bin/env bash
# The vendor files committed under web/vendor/ (so that the daemon builds
# without npm) must be exactly those of the packages pinned in
# web/package-lock.json: installs them with `npm ci` and compares.
set -euo pipefail

WEB=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../web" && pwd)
if command -v flock >/dev/null 2>&1; then
    exec 9<"${BASH_SOURCE[0]}"
    flock 9
fi
(cd "$WEB" && npm ci --no-audit --no-fund --silent) >&2

status=0
check() {
    if cmp -s "$WEB/vendor/$1" "$WEB/node_modules/$2"; then
        echo "ok: web/vendor/$1 is $2 of $(node -p "require('$WEB/node_modules/${2%%/*}/package.json').version")"
    else
        echo "FAIL: web/vendor/$1 differs from node_modules/$2" >&2
        status=1
    fi
}
check marked.umd.js marked/lib/marked.umd.js
check purify.min.js dompurify/dist/purify.min.js
exit $status
