#!/usr/bin/env bash
# js/build.sh — builds the npm package `edgembed` into js/dist/:
#   TypeScript (src/) → dist/*.js + *.d.ts with the tsc of devDependencies,
#   build/wasm/edgembed{,-relaxed,-threads}.wasm (`./build.sh wasm`) → dist/wasm/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
ROOT="$(cd .. && pwd)"

if [[ ! -x node_modules/.bin/tsc ]] || [[ package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
fi

rm -rf dist
node_modules/.bin/tsc -p tsconfig.json
cp "$ROOT/LICENSE" LICENSE  # packed with the package (ignored by js/.gitignore)

mkdir -p dist/wasm
for f in edgembed.wasm edgembed-relaxed.wasm edgembed-threads.wasm; do
  if [[ ! -f "$ROOT/build/wasm/$f" ]]; then
    echo "js/build.sh: $ROOT/build/wasm/$f is missing; run ./build.sh wasm first" >&2
    exit 1
  fi
  cp "$ROOT/build/wasm/$f" dist/wasm/
done
echo "built js/dist ($(du -sk dist | cut -f1) KiB)"
