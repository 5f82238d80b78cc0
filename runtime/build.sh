#!/usr/bin/env bash
# runtime/build.sh — builds and tests the C engine. One verb per job:
#
#   native         (the default) build/native/libedgembed.so, test_engine, test_native, embcli
#   asan           build/native-asan/test_engine, test_native with -fsanitize=address,undefined
#   test [BUNDLE]  native + asan, then runs the test binaries; the real-model checks get BUNDLE (a
#                  .emb), or every cross-host bundle (one per architecture) and all-MiniLM-L6-v2's
#                  vocab.txt, written by Python's exporter (tests/fixtures/write_bundles.py;
#                  skipped, saying why, without edgembed installed)
#   tsan           build/native-tsan/test_native, test_engine with -fsanitize=thread, run (the pool)
#   cross [ARCH..] build/native-<arch>/libedgembed.so with zig's clang for Linux x86_64 and aarch64
#                  (glibc 2.17 and later: the manylinux2014 baseline); default both
#   arm64-test [BUNDLE]  aarch64 test binaries (static, musl) run under qemu-aarch64-static, once as
#                  a CPU with the dot product and once as a Cortex-A72 without it
#   wasm           build/wasm/edgembed{,-relaxed,-threads}.wasm (+ test modules, toolchain.txt)
#   fuzz [SECS]    libFuzzer targets (clang) run for SECS seconds in all (default 36; ≤ 60 s with the build)
#
# Environment: CC (native compiler, default cc), PYTHON (default .venv/bin/python or python3),
# WASM_OPT (default build/tools/node_modules/.bin/wasm-opt), ZIG_GLOBAL_CACHE_DIR (default
# build/zig-cache), QEMU_AARCH64 (default qemu-aarch64-static).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CC="${CC:-cc}"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
# warnings, arithmetic (no fused multiply-add) and include paths: runtime/cflags.txt
COMMON="$(sed 's/#.*//' runtime/cflags.txt | xargs)"
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
  "$CC" -shared -pthread -o "$out/libedgembed.so" "${objs[@]}" -lm
  for t in test_engine test_native test_tokenizer; do
    # shellcheck disable=SC2086
    [ -f "tests/runtime/$t.c" ] && "$CC" $COMMON -O3 -pthread -o "$out/$t" "tests/runtime/$t.c" "${objs[@]}" -lm
  done
  # shellcheck disable=SC2086
  "$CC" $COMMON -O3 -pthread -o "$out/embcli" runtime/tools/embcli.c "${objs[@]}" -lm
  echo "built $out/libedgembed.so ($(wc -c <"$out/libedgembed.so") bytes)"
}

asan() {
  local out=build/native-asan
  mkdir -p "$out"
  # shellcheck disable=SC2086
  for t in test_engine test_native test_tokenizer; do
    # shellcheck disable=SC2086
    "$CC" $COMMON -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
      -pthread -o "$out/$t" "tests/runtime/$t.c" $SRCS -lm
  done
  for target in bundle tokenizer tokenizer_general tokenizer_tables; do
    # shellcheck disable=SC2086
    "$CC" $COMMON -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
      -pthread -o "$out/replay_$target" tests/runtime/fuzz/replay.c "tests/runtime/fuzz/fuzz_$target.c" $SRCS -lm
  done
  echo "built $out/test_engine and fuzz replays (sanitizers)"
}

tsan() {
  local out=build/native-tsan
  mkdir -p "$out"
  for t in test_native test_engine; do
    # shellcheck disable=SC2086
    "$CC" $COMMON -O1 -g -fsanitize=thread -pthread -o "$out/$t" "tests/runtime/$t.c" $SRCS -lm
    TSAN_OPTIONS=halt_on_error=1 "./$out/$t" | tail -1
  done
}

# real_model [BUNDLE]: sets BUNDLES and VOCAB for the real-model checks (BUNDLE given: no VOCAB)
real_model() {
  BUNDLES=() VOCAB=""
  if [ -n "${1:-}" ]; then BUNDLES=("$1"); return; fi
  if ! "$PYTHON" -c "import edgembed" 2>/dev/null; then
    echo "runtime/build.sh test: the real-model checks are skipped: $PYTHON cannot import edgembed" \
      "(run ./build.sh setup)"
    return
  fi
  local paths
  paths="$("$PYTHON" tests/fixtures/write_bundles.py --vocab)"  # fails the verb when it fails
  VOCAB="$(sed -n 1p <<<"$paths")"
  mapfile -t BUNDLES < <(sed 1d <<<"$paths")
}

test_() {
  native
  asan
  real_model "${1:-}"
  echo "== test_engine ${BUNDLES[*]}"
  ./build/native/test_engine "${BUNDLES[@]}"
  ./build/native/test_tokenizer ${VOCAB:+"$VOCAB"}
  ./build/native/test_native
  echo "== under ASan/UBSan (without the real bundle: too slow there)"
  ./build/native-asan/test_engine
  ./build/native-asan/test_tokenizer ${VOCAB:+"$VOCAB"}
  ./build/native-asan/test_native
  # every fuzz seed and crasher ever found, replayed under the sanitizers
  ./build/native-asan/replay_bundle tests/fixtures/fuzz/bundle/*
  ./build/native-asan/replay_tokenizer tests/fixtures/fuzz/tokenizer/*
  "$PYTHON" runtime/tools/tokenizer_bundles.py build/fuzz/tokenizers >/dev/null
  EMB_FUZZ_TOKENIZERS=build/fuzz/tokenizers ./build/native-asan/replay_tokenizer_general tests/fixtures/fuzz/tokenizer_general/*
  ./build/native-asan/replay_tokenizer_tables tests/fixtures/fuzz/tokenizer_tables/*
}

# zig's clang: `python -m ziglang cc` (pip install ziglang), its caches inside build/
zig_cc() {
  export ZIG_GLOBAL_CACHE_DIR="${ZIG_GLOBAL_CACHE_DIR:-$ROOT/build/zig-cache}"
  export ZIG_LOCAL_CACHE_DIR="${ZIG_LOCAL_CACHE_DIR:-$ZIG_GLOBAL_CACHE_DIR}"
  if ! "$PYTHON" -c "import ziglang" 2>/dev/null; then
    "$PYTHON" -m pip install --quiet --disable-pip-version-check "ziglang>=0.13"
  fi
  "$PYTHON" -m ziglang cc "$@"
}

# cross_objs TARGET OUT: the engine's objects for a zig target, compiled once into OUT/obj
cross_objs() {
  local target="$1" out="$2" pic="${3:-}"
  mkdir -p "$out/obj"
  OBJS=()
  for src in $SRCS; do
    local obj="$out/obj/$(basename "${src%.c}").o"
    # shellcheck disable=SC2086
    zig_cc -target "$target" $COMMON -O3 $pic -fvisibility=hidden -c "$src" -o "$obj"
    OBJS+=("$obj")
  done
}

cross() {
  local arches=("$@")
  [ ${#arches[@]} -eq 0 ] && arches=(x86_64 aarch64)
  for arch in "${arches[@]}"; do
    local out="build/native-$arch"
    cross_objs "$arch-linux-gnu.2.17" "$out" -fPIC
    zig_cc -target "$arch-linux-gnu.2.17" -shared -s -o "$out/libedgembed.so" "${OBJS[@]}" -lm -lpthread
    echo "built $out/libedgembed.so ($(wc -c <"$out/libedgembed.so") bytes, $arch, glibc >= 2.17)"
  done
}

arm64_test() {
  local bundle="${1:-}" out=build/arm64-test qemu="${QEMU_AARCH64:-qemu-aarch64-static}"
  if ! command -v "$qemu" >/dev/null; then
    echo "arm64-test: $qemu not found (Debian: apt-get install qemu-user-static)" >&2
    exit 2
  fi
  cross_objs aarch64-linux-musl "$out"
  for t in test_engine test_native; do
    # shellcheck disable=SC2086
    zig_cc -target aarch64-linux-musl $COMMON -O3 -static -o "$out/$t" "tests/runtime/$t.c" "${OBJS[@]}" -lm
  done
  for cpu in max cortex-a72; do  # with the dot product (neon-dotprod), and without it (neon)
    echo "== qemu-aarch64 -cpu $cpu"
    "$qemu" -cpu "$cpu" "$out/test_native" | tail -2
    "$qemu" -cpu "$cpu" "$out/test_engine" | tail -2
  done
  if [ -n "$bundle" ]; then  # the real model once: emulation makes it the slow part
    echo "== qemu-aarch64 -cpu max, $bundle"
    "$qemu" -cpu max "$out/test_engine" "$bundle" | tail -2
  fi
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
  tsan) tsan ;;
  cross) cross "$@" ;;
  arm64-test) arm64_test "$@" ;;
  wasm) wasm "$@" ;;
  fuzz) fuzz "$@" ;;
  *) echo "usage: runtime/build.sh native|asan|test [BUNDLE]|tsan|cross [ARCH...]|arm64-test [BUNDLE]|wasm|fuzz [SECS]" >&2; exit 2 ;;
esac
