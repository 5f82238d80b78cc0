#!/usr/bin/env bash
# edgembed's one build entry point: ./build.sh VERB [args]. Every verb is idempotent.
#
#   setup    create .venv and install edgembed (editable) with its dev tools
#   embed    embed text with the default model (pulls and exports it on first use)
#   test     run every test suite (C engine, fuzzing, wasm, JS, Python) after building what
#            they need; one suite for development: test python [PYTEST ARGS] | test c | test js
#   check    ruff + mypy
#   native   build the C engine as a shared library + C tests (build/native/)
#   fuzz     bounded libFuzzer run of the bundle reader and tokenizer (needs clang)
#   wasm     build the WebAssembly engine variants (build/wasm/)
#   js       build the npm package (js/dist/)
#   py       build the Python wheel (dist/)
#   bench    run the benchmarks in benchmarks/
set -euo pipefail
cd "$(dirname "$0")"
ROOT="$PWD"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
export ZIG_GLOBAL_CACHE_DIR="$ROOT/build/zig-cache"

have_venv() { [[ -x "$PY" ]] && "$PY" -c "import edgembed" 2>/dev/null; }

setup() {
  [[ -x "$PY" ]] || python3 -m venv "$VENV"
  "$PY" -m pip install --quiet --disable-pip-version-check --upgrade pip
  "$PY" -m pip install --quiet --disable-pip-version-check -e ".[dev]"
  # the native CPU engine (the fast int8 backend); without a C compiler edgembed uses onnxruntime
  bash runtime/build.sh native >/dev/null || echo "setup: no native engine built; using onnxruntime" >&2
}

embed() {
  have_venv || setup
  "$VENV/bin/embed" "$@"
}

check() {
  have_venv || setup
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

py() {
  have_venv || setup
  wasm  # the wheel ships build/wasm/*.wasm as edgembed/_wasm/
  native  # and build/native/libedgembed.so as edgembed/_native/: a platform-tagged wheel
  "$PY" -m pip install --quiet --disable-pip-version-check build
  "$PY" -m build --wheel --outdir dist .
}

test_c() { bash runtime/build.sh test; }  # C tests, native and under ASan/UBSan, crashers replayed
test_js() { wasm; bash js/build.sh; bash js/test.sh; }
test_python() {  # builds the engine only where it is missing: after a C change, build it first
  [[ -f build/wasm/edgembed.wasm ]] || wasm
  [[ -f build/native/libedgembed.so ]] || native
  "$PY" -m pytest "$@"
}

run_tests() {  # ./build.sh test [python [PYTEST ARGS] | c | js | PYTEST ARGS]
  have_venv || setup
  case "${1:-}" in
    python) shift; test_python "$@" ;;
    c) test_c ;;
    js) test_js ;;
    *) test_c; fuzz 40; test_js; "$PY" -m pytest "$@" ;;  # the whole thing, as CI runs it
  esac
}

bench() {  # every benchmark: benchmarks/*.py, then *.mjs on the npm package and js/test.sh's hosts
  have_venv || setup
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
  bench) bench ;;
  *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
