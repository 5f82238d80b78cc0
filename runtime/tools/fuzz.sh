#!/usr/bin/env bash
# fuzz.sh SECS — bounded libFuzzer run of the bundle reader and the tokenizers (ASan + UBSan).
#
# Needs clang with libFuzzer (Debian: apt-get install clang-19 lld-19 libclang-rt-19-dev; CLANG
# overrides the compiler) and the project's Python (PYTHON, default .venv/bin/python) to write the
# tokenizer-only bundles fuzz_tokenizer_general reads. Each target gets a quarter of SECS. Seeds and every crasher found are kept
# under tests/fixtures/fuzz/<target>/ (crashers as crash-*), where `runtime/build.sh test` replays
# them on every run. Exit status 1 when a target crashed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
SECS="${1:-36}"
CLANG="${CLANG:-$(command -v clang-19 || command -v clang || true)}"
if [ -z "$CLANG" ]; then
  echo "fuzz.sh: no clang found (apt-get install clang-19 lld-19 libclang-rt-19-dev)" >&2
  exit 2
fi
OUT=build/fuzz
mkdir -p "$OUT"
PYTHON="${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}"
"$PYTHON" runtime/tools/tokenizer_bundles.py "$OUT/tokenizers" >/dev/null
SRCS=$(ls runtime/src/*.c | grep -v -e platform_wasm.c -e kernels_simd128.c -e kernels_relaxed.c)
# the engine's shared flags (runtime/cflags.txt), then the fuzzing ones
FLAGS="$(sed 's/#.*//' runtime/cflags.txt | xargs) -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all"
status=0
for target in bundle tokenizer tokenizer_general tokenizer_tables; do
  # shellcheck disable=SC2086
  "$CLANG" $FLAGS -o "$OUT/fuzz_$target" "tests/runtime/fuzz/fuzz_$target.c" $SRCS -lm
  corpus="$OUT/corpus_$target"
  mkdir -p "$corpus" "tests/fixtures/fuzz/$target"
  cp -n tests/fixtures/fuzz/$target/* "$corpus/" 2>/dev/null || true
  dict=()
  [ "$target" = bundle ] && dict=(-dict=tests/runtime/fuzz/bundle.dict)
  case "$target" in bundle) max_len=32768 ;; tokenizer_tables) max_len=16384 ;; *) max_len=4096 ;; esac
  if ! EMB_FUZZ_TOKENIZERS="$OUT/tokenizers" "./$OUT/fuzz_$target" "${dict[@]}" -max_total_time=$((SECS / 4)) \
      -timeout=10 -rss_limit_mb=2048 -max_len=$max_len \
      -artifact_prefix="tests/fixtures/fuzz/$target/" "$corpus" 2>"$OUT/fuzz_$target.log"; then
    echo "fuzz_$target: crashed; input kept under tests/fixtures/fuzz/$target/ (log: $OUT/fuzz_$target.log)"
    status=1
  fi
  grep -E "^#[0-9]+.*(DONE|pulse)" "$OUT/fuzz_$target.log" | tail -1 || true
done
exit $status
