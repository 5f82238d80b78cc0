// The SIMD128 build gives bit-identical vectors in every host. Each host's suite wrote its
// corpus vectors to build/js/vectors/ (js/test.sh runs them all first): raw pooled vectors from
// Node 20, Node 22, Deno, Bun, Chromium, workerd and Python's wasmtime backend
// (tests/js/wasmtime_vectors.py); engine-normalized vectors from the six JavaScript hosts.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { VECTORS_DIR, readJson, reference } from "./helpers.mjs";

const JS_HOSTS = ["node20", "node22", "deno", "bun", "chromium", "workerd"];

function read(name) {
  const file = path.join(VECTORS_DIR, name);
  assert.ok(fs.existsSync(file), `${file} is missing: run js/test.sh, which runs every host first`);
  return fs.readFileSync(file);
}

test("the hosts embedded the same reference corpus", () => {
  assert.deepEqual(readJson("tests/fixtures/reference/corpus.json"), reference.texts);
});

test("raw vectors are bit-identical across Node 20, Node 22, Deno, Bun, Chromium, workerd and wasmtime", () => {
  const want = read("node20.raw.f32");
  assert.equal(want.length, reference.texts.length * 384 * 4);
  for (const host of [...JS_HOSTS.slice(1), "wasmtime"]) {
    const got = read(`${host}.raw.f32`);
    assert.ok(got.equals(want), `${host} differs from node20 (first differing byte ${got.findIndex((b, i) => b !== want[i])})`);
  }
});

test("normalized vectors are bit-identical across the JavaScript hosts", () => {
  const want = read("node20.normalized.f32");
  for (const host of JS_HOSTS.slice(1)) {
    assert.ok(read(`${host}.normalized.f32`).equals(want), `${host} differs from node20`);
  }
});
