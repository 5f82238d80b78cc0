#!/usr/bin/env bash
# runtime/build.sh — builds and tests the C engine. One verb per job:
#
#   native         (the default) build/native/libedgembed.so, test_engine, embcli
#   asan           build/native-asan/test_engine with -fsanitize=address,undefined
#   test [BUNDLE]  native + asan, then runs both test binaries (BUNDLE: a real .emb for extra checks)
#   wasm           build/wasm/edgembed{,-relaxed,-threads}.wasm (+ test modules, toolchain.txt)
#   fuzz [SECS]    libFuzzer targets (clang) run for SECS seconds in all (default 36; ≤ 60 s with the build)
#
# Environment: CC (native compiler, default cc), PYTHON (default .venv/bin/python or python3),
# WASM_OPT (default build/tools/node_modules/.bin/wasm-opt).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CC="${CC:-cc}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
WARN="-std=c11 -Wall -Wextra -Wshadow -Wpedantic -Werror"
# -ffp-contract=off: no fused multiply-add, so every build rounds exactly like the reference.
COMMON="$WARN -ffp-contract=off -fno-math-errno -Iruntime/include -Iruntime/src"
# Engine sources: everything in runtime/src except the wasm-only files.
SRCS=$(ls runtime/src/*.c | grep -v -e platform_wasm.c -e kernels_simd128.c -e kernels_relaxed.c)

native() {
  local out=build/native
  mkdir -p "$out/obj"
  local objs=()
  for src in $SRCS; do  # compile once (-fPIC), link the library and every program from it
    local obj="$out/obj/$(basename "${src%.c}").o"
    # shellcheck disable=SC2086
    "$CC" $COMMON -O3 -fPIC -fvisibility=hidden -c "$src" -o "$obj"
    objs+=("$obj")
  done
  "$CC" -shared -o "$out/libedgembed.so" "${objs[@]}" -lm
  # shellcheck disable=SC2086
  "$CC" $COMMON -O3 -o "$out/test_engine" tests/runtime/test_engine.c "${objs[@]}" -lm
  if [ -f tests/runtime/test_tokenizer.c ]; then
    # shellcheck disable=SC2086
    "$CC" $COMMON -O3 -o "$out/test_tokenizer" tests/runtime/test_tokenizer.c "${objs[@]}" -lm
  fi
  # shellcheck disable=SC2086
  "$CC" $COMMON -O3 -o "$out/embcli" runtime/tools/embcli.c "${objs[@]}" -lm
  echo "built $out/libedgembed.so ($(wc -c <"$out/libedgembed.so") bytes)"
}

asan() {
  local out=build/native-asan
  mkdir -p "$out"
  # shellcheck disable=SC2086
  "$CC" $COMMON -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
    -o "$out/test_engine" tests/runtime/test_engine.c $SRCS -lm
  for target in bundle tokenizer; do
    # shellcheck disable=SC2086
    "$CC" $COMMON -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
      -o "$out/replay_$target" tests/runtime/fuzz/replay.c "tests/runtime/fuzz/fuzz_$target.c" $SRCS -lm
  done
  echo "built $out/test_engine and fuzz replays (sanitizers)"
}

test_() {
  local bundle="${1:-}"
  native
  asan
  ./build/native/test_engine ${bundle:+"$bundle"}
  ./build/native-asan/test_engine  # the real bundle is too slow under the sanitizers
  # every fuzz seed and crasher ever found, replayed under the sanitizers
  ./build/native-asan/replay_bundle tests/fixtures/fuzz/bundle/*
  ./build/native-asan/replay_tokenizer tests/fixtures/fuzz/tokenizer/*
}

wasm() {
  bash wasm/build.sh "$@"
}

fuzz() {
  bash runtime/tools/fuzz.sh "${1:-36}"
}

verb="${1:-native}"
shift || true
case "$verb" in
  native) native ;;
  asan) asan ;;
  test) test_ "$@" ;;
  wasm) wasm "$@" ;;
  fuzz) fuzz "$@" ;;
  *) echo "usage: runtime/build.sh native|asan|test [BUNDLE]|wasm|fuzz [SECS]" >&2; exit 2 ;;
esac
