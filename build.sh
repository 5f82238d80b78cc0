#!/usr/bin/env bash
# edgembed's one build entry point: ./build.sh VERB [args]. Every verb is idempotent.
#
#   setup    create .venv and install edgembed (editable) with its dev tools
#   embed    embed text with the default model (pulls and exports it on first use)
#   test     run every test suite (Python, C engine, wasm, JS) after building what they need
#   check    ruff + mypy
#   native   build the C engine as a shared library + C tests (build/native/)
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

native() {
  bash runtime/build.sh "$@"
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
  "$PY" -m pip install --quiet --disable-pip-version-check build
  "$PY" -m build --wheel --outdir dist .
}

run_tests() {
  have_venv || setup
  [[ -f runtime/build.sh ]] && native
  [[ -f runtime/build.sh ]] && "$ROOT/build/native/test_engine"
  [[ -f wasm/build.sh ]] && wasm
  [[ -f js/build.sh ]] && { bash js/build.sh; bash js/test.sh; }
  "$PY" -m pytest "$@"
}

bench() {
  have_venv || setup
  for script in benchmarks/*.py; do "$PY" "$script"; done
}

verb="${1:-}"
[[ $# -gt 0 ]] && shift
case "$verb" in
  setup) setup ;;
  embed) embed "$@" ;;
  test) run_tests "$@" ;;
  check) check ;;
  native) native "$@" ;;
  wasm) wasm "$@" ;;
  js) js "$@" ;;
  py) py ;;
  bench) bench ;;
  *) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
