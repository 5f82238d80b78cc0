#!/usr/bin/env bash
# wasm/build.sh — the WebAssembly engine variants into build/wasm/ (see runtime/tools/build_wasm.py).
#
# Installs its toolchain when missing: ziglang (pip, into the project's .venv) for
# `python -m ziglang cc --target=wasm32-freestanding`, and binaryen (npm, into build/tools) for
# wasm-opt. Extra arguments go to build_wasm.py (e.g. --only edgembed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$ROOT/build/zig-cache}"
if ! "$PY" -c "import ziglang" 2>/dev/null; then
  "$PY" -m pip install --quiet --disable-pip-version-check "ziglang>=0.13"
fi
if [ -z "${WASM_OPT:-}" ] && [ ! -x build/tools/node_modules/.bin/wasm-opt ] && ! command -v wasm-opt >/dev/null; then
  mkdir -p build/tools
  npm install --silent --no-audit --no-fund --prefix build/tools binaryen
fi
"$PY" runtime/tools/build_wasm.py "$@"
