#!/usr/bin/env bash
# edgembed's one build entry point: ./build.sh VERB [args]. Every verb is idempotent.
#
#   setup    create .venv and install edgembed (editable) with its dev tools
#   embed    embed text with the default model (pulls and exports it on first use); the first
#            run creates .venv with what embedding needs only (not the dev tools)
#   test     run every test suite (C engine, fuzzing, wasm, JS, Python) after building what
#            they need; one suite for development: test python [PYTEST ARGS] | test c | test js
#   check    ruff + mypy
#   native   build the C engine as a shared library + C tests (build/native/)
#   fuzz     bounded libFuzzer run of the bundle reader and tokenizer (needs clang)
#   wasm     build the WebAssembly engine variants (build/wasm/)
#   js       build the npm package (js/dist/)
#   py       build the wheels and the sdist (dist/): manylinux2014 x86_64 and aarch64 (the
#            engine cross-built for glibc 2.17), the pure wheel for Pyodide, the sdist
#   release  what .github/workflows/release.yml builds and checks before it publishes: py, the
#            npm tarball, each installed in a fresh environment and run, the wheel also with its
#            serve extra as `embed serve` configured by EDGEMBED_* variables (publishes nothing)
#   bench    run the benchmarks in benchmarks/
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$PWD"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
export ZIG_GLOBAL_CACHE_DIR="$ROOT/build/zig-cache"

have_venv() { [[ -x "$PY" ]] && "$PY" -c "import edgembed" 2>/dev/null; }
have_dev() { have_venv && [[ -x "$VENV/bin/pytest" && -x "$VENV/bin/ruff" ]]; }
step() { echo "build.sh: $*" >&2; }

# pip's own lines, one per package it fetches or installs, so a long install shows its progress
pip_install() {
  "$PY" -m pip install --disable-pip-version-check --progress-bar off "$@" 2>&1 \
    | { grep --line-buffered -E '^(Collecting|Installing|Successfully|ERROR|error)' >&2 || true; }
}

make_venv() {
  if [[ ! -x "$PY" ]]; then
    step "creating $VENV"
    python3 -m venv "$VENV"
  fi
}

native_engine() {  # the native CPU engine (the fast int8 backend); without a C compiler: onnxruntime
  step "building the native engine (build/native/libedgembed.so)"
  bash runtime/build.sh native >/dev/null || step "no native engine built; using onnxruntime"
}

setup() {
  make_venv
  step "installing edgembed (editable) with its dev tools into $VENV"
  pip_install --upgrade pip
  pip_install -e ".[dev]"
  native_engine
}

embed_setup() {  # what embedding needs only: numpy, onnx, onnxruntime, tokenizers, safetensors
  make_venv
  step "installing edgembed (editable) and what embedding needs into $VENV"
  pip_install -e .
  native_engine
  step "done; put embed on PATH with: . .venv/bin/activate"
}

embed() {
  have_venv || embed_setup
  "$VENV/bin/embed" "$@"
}

check() {
  have_dev || setup
  "$VENV/bin/ruff" check python tests/python benchmarks
  "$VENV/bin/mypy"
}

native() {  # ./build.sh native [cross [ARCH..] | arm64-test [BUNDLE] | tsan | asan]
  bash runtime/build.sh "${@:-native}"
}

fuzz() {
  if ! command -v clang-19 >/dev/null && ! command -v clang >/dev/null; then
    [[ $(id -u) -eq 0 ]] || { echo "fuzz needs clang: apt-get install clang-19 lld-19 libclang-rt-19-dev" >&2; exit 2; }
    apt-get install -y -qq clang-19 lld-19 libclang-rt-19-dev >/dev/null \
      || { apt-get update -qq && apt-get install -y -qq clang-19 lld-19 libclang-rt-19-dev >/dev/null; }
  fi
  bash runtime/build.sh fuzz "${1:-40}"
}

wasm() {
  have_venv || setup
  bash wasm/build.sh "$@"
}

js() {
  wasm
  bash js/build.sh "$@"
}

py() {  # dist/: a wheel per Linux architecture, the pure wheel (Pyodide), the sdist
  have_venv || setup
  wasm  # every wheel ships build/wasm/*.wasm as edgembed/_wasm/
  # the engine for glibc >= 2.17 (zig's clang) as edgembed/_native/: manylinux2014 wheels
  bash runtime/build.sh cross x86_64 aarch64
  "$PY" -m pip install --quiet --disable-pip-version-check build auditwheel
  local arch
  for arch in x86_64 aarch64; do
    step "wheel for $arch"
    EDGEMBED_NATIVE_LIB="build/native-$arch/libedgembed.so" "$PY" -m build --wheel --outdir dist .
  done
  step "pure wheel (Pyodide, or any host without the native engine)"
  EDGEMBED_WHEEL=pure "$PY" -m build --wheel --outdir dist .
  step "sdist"
  "$PY" -m build --sdist --outdir dist .
  for whl in dist/edgembed-*-manylinux*.whl; do "$VENV/bin/auditwheel" show "$whl"; done
}

release_serve() {  # the wheel with its serve extra: embed serve configured by EDGEMBED_* only
  local smoke="$1" whl="$2" port pid
  step "installing $(basename "$whl")[serve]; embed serve configured by environment variables"
  "$smoke/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$whl[serve]"
  port="$("$smoke/venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  EDGEMBED_HOME="$smoke/home" EDGEMBED_HOST=127.0.0.1 EDGEMBED_PORT="$port" \
    EDGEMBED_BACKEND=native EDGEMBED_API_KEYS=release-key EDGEMBED_NO_ACCESS_LOG=1 \
    "$smoke/venv/bin/embed" serve >"$smoke/serve.log" 2>&1 &
  pid=$!
  # one request with the key (its vector is the wheel's engine's), one without (refused)
  (cd "$smoke" && EDGEMBED_HOME="$smoke/home" "$smoke/venv/bin/python" - "$port" "$pid" <<'PY') \
    || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; cat "$smoke/serve.log" >&2; return 1; }
import json, os, sys, time, urllib.error, urllib.request
import numpy as np
from edgembed import Embedder
url, pid = f"http://127.0.0.1:{sys.argv[1]}", int(sys.argv[2])
deadline = time.monotonic() + 300
while True:
    os.kill(pid, 0)  # still running
    try:
        with urllib.request.urlopen(f"{url}/ready", timeout=5) as r:
            if r.status == 200:
                break
    except (urllib.error.URLError, OSError):
        pass
    assert time.monotonic() < deadline, "embed serve not ready in 300 s"
    time.sleep(0.5)
text = "edgembed runs everywhere"
def post(headers):
    req = urllib.request.Request(f"{url}/embed", json.dumps({"inputs": text}).encode(),
                                 {"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=60) as r:
        return np.asarray(json.load(r)[0], dtype=np.float32)
got = post({"Authorization": "Bearer release-key"})
want = Embedder.load(backend="native").embed([text])[0]
assert got.tobytes() == want.tobytes(), float(got @ want)
try:
    post({})
    raise AssertionError("EDGEMBED_API_KEYS was not applied: a request without a key passed")
except urllib.error.HTTPError as exc:
    assert exc.code == 401, exc.code
print("release: embed serve ok: EDGEMBED_PORT, EDGEMBED_API_KEYS, EDGEMBED_BACKEND applied")
PY
  kill "$pid" && wait "$pid" || true
}

release() {  # dist/: the wheels, the sdist and the npm tarball, each checked after install
  py
  js
  step "npm tarball"
  (cd js && npm pack --pack-destination "$ROOT/dist" --loglevel=error >/dev/null)
  local arch whl smoke="$ROOT/build/release"
  arch="$(uname -m)"
  whl="$(ls dist/edgembed-*-manylinux*_"$arch".whl | head -1)"
  rm -rf "$smoke" && mkdir -p "$smoke"
  step "installing $(basename "$whl") in a fresh environment"
  python3 -m venv "$smoke/venv"
  "$smoke/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$whl[wasm]"
  # the wheel's own engine (glibc 2.17 build) and its wasm engine give the same bits
  (cd "$smoke" && EDGEMBED_HOME="$smoke/home" "$smoke/venv/bin/python" - <<'PY'
from edgembed import Embedder
from edgembed.backends.native import native_available
ok, why = native_available()
assert ok and "/site-packages/edgembed/_native/" in why, why
native = Embedder.load(backend="native")
wasm = Embedder.load(backend="wasm")
texts = ["edgembed runs everywhere", "the same bits on every host"]
assert native.embed(texts).tobytes() == wasm.embed(texts).tobytes()
print("release: wheel ok:", why)
PY
  )
  release_serve "$smoke" "$whl"
  step "installing the npm tarball in a fresh project"
  mkdir -p "$smoke/npm" && (cd "$smoke/npm" && npm init -y >/dev/null \
    && npm install --no-audit --no-fund --loglevel=error "$ROOT"/dist/edgembed-*.tgz >/dev/null \
    && node --input-type=module -e '
import { readFile } from "node:fs/promises";
import * as e from "edgembed";
const bundle = await readFile(process.argv[1]);
const embedder = await e.Embedder.load(bundle);
const [v] = await embedder.embed(["edgembed runs everywhere"]);
if (v.length !== 384) throw new Error("bad vector");
console.log("release: npm package ok:", Object.keys(e).length, "exports");
embedder.dispose();' "$smoke/home/models/all-minilm-l6-v2/all-minilm-l6-v2.int8.emb")
  ls -l dist
}

# Debian's unicode-data (UCD 15.0): the check that runtime/src/unicode_tables.* are what their
# generator writes reads it; without root or apt-get that check skips, saying why
unicode_data() {
  [[ -f /usr/share/unicode/auxiliary/GraphemeBreakProperty.txt ]] && return 0
  { [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; } || return 0
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unicode-data >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1 \
         && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq unicode-data >/dev/null 2>&1; } \
    || step "unicode-data not installed: the unicode tables check will skip"
}

test_c() { bash runtime/build.sh test; }  # C tests, native and under ASan/UBSan, crashers replayed
test_js() { wasm; bash js/build.sh; bash js/test.sh; }
test_python() {  # builds the engine only where it is missing: after a C change, build it first
  [[ -f build/wasm/edgembed.wasm ]] || wasm
  [[ -f build/native/libedgembed.so ]] || native
  unicode_data
  "$PY" -m pytest "$@"
}

run_tests() {  # ./build.sh test [python [PYTEST ARGS] | c | js | PYTEST ARGS]
  have_dev || setup
  case "${1:-}" in
    python) shift; test_python "$@" ;;
    c) test_c ;;
    js) test_js ;;
    *) test_c; fuzz 40; test_js; unicode_data; "$PY" -m pytest "$@" ;;  # the whole thing, as CI runs it
  esac
}

bench() {  # every benchmark: benchmarks/*.py, then *.mjs on the npm package and js/test.sh's hosts
  have_dev || setup
  local failed=() rc js_ready=""
  for script in benchmarks/*.py benchmarks/*.mjs; do
    case "$script" in */st_child.py | */measure_service_time.py) continue ;; esac  # a helper, a fixture maker
    if [[ "$script" == *.mjs && -z "$js_ready" ]]; then js && bash js/test.sh --setup && js_ready=1; fi
    rc=0
    if [[ "$script" == *.mjs ]]; then node "$script" || rc=$?; else "$PY" "$script" || rc=$?; fi
    # cuda_check.py exits 2 where there is no GPU to check
    [[ $rc -eq 0 || ($rc -eq 2 && "$script" == */cuda_check.py) ]] || failed+=("$script")
  done
  [[ ${#failed[@]} -eq 0 ]] || { echo "bench: failed: ${failed[*]}" >&2; exit 1; }
}

verb="${1:-}"
[[ $# -gt 0 ]] && shift
case "$verb" in
  setup) setup ;;
  embed) embed "$@" ;;
  test) run_tests "$@" ;;
  check) check ;;
  native) native "$@" ;;
  fuzz) fuzz "$@" ;;
  wasm) wasm "$@" ;;
  js) js "$@" ;;
  py) py ;;
  release) release ;;
  bench) bench ;;
  *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
