// The engine gives bit-identical vectors in every host. Each host's suite wrote its vectors to
// build/js/vectors/ (js/test.sh runs them all first):
//   the reference corpus through all-minilm-l6-v2: raw pooled vectors from Node 20, Node 22,
//     Deno, Bun, Chromium, workerd and Python's wasmtime backend; normalized ones from the six
//     JavaScript hosts;
//   every case of build/js/cross_host.json (all-minilm-l6-v2 and every tiny model, one short text list):
//     raw vectors from the six JavaScript hosts, wasmtime and the native engine
//     (tests/js/python_vectors.py) and Pyodide (tests/pyodide/vectors.mjs); normalized ones from
//     the JavaScript hosts;
//   every head of build/js/cross_host.json (tiny cross-encoders and SPLADE models): rerankers'
//     logits of their pairs and SPLADE models' sparse vectors of the texts, from the six
//     JavaScript hosts (tests/js/unit/heads.test.mjs, the page, the Worker), wasmtime and the
//     native engine, and the SPLADE models' from Pyodide too (its rerankers need Python's pair
//     tokenizer).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";
import { VECTORS_DIR, crossHostCases, readJson, reference } from "./helpers.mjs";

const JS_HOSTS = ["node20", "node22", "deno", "bun", "chromium", "workerd"];
const ENGINE_HOSTS = [...JS_HOSTS, "wasmtime", "native", "pyodide"];

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

/** Where two hosts' vector files first differ, by byte and vector. */
function firstDifference(got, want, rowBytes) {
  if (got.length !== want.length) return `${got.length} bytes instead of ${want.length}`;
  const byte = got.findIndex((b, i) => b !== want[i]);
  return `first differing byte ${byte}, in vector ${Math.floor(byte / rowBytes)}`;
}

const { texts, cases, heads = [] } = crossHostCases();
const HEAD_HOSTS = [...JS_HOSTS, "wasmtime", "native"];
for (const h of heads) {
  const kind = h.task === "rerank" ? "scores" : "sparse";
  const rows = h.task === "rerank" ? h.pairs.length : texts.length;
  const hosts = h.task === "rerank" ? HEAD_HOSTS : [...HEAD_HOSTS, "pyodide"];
  test(`${h.name}: ${h.task === "rerank" ? "logits" : "sparse vectors"} are bit-identical across ${hosts.join(", ")}`, () => {
    const want = read(`node20.${h.name}.${kind}.f32`);
    assert.ok(want.length > 0 && want.length % rows === 0, "one row per pair or text");
    for (const host of hosts.slice(1)) {
      const got = read(`${host}.${h.name}.${kind}.f32`);
      assert.ok(got.equals(want), `${host} differs from node20: ${firstDifference(got, want, want.length / rows)}`);
    }
  });
}
for (const c of cases) {
  test(`${c.name}: raw vectors are bit-identical across ${ENGINE_HOSTS.join(", ")}`, () => {
    const want = read(`node20.${c.name}.raw.f32`);
    assert.ok(want.length > 0 && want.length % texts.length === 0, "one vector per text");
    for (const host of ENGINE_HOSTS.slice(1)) {
      const got = read(`${host}.${c.name}.raw.f32`);
      assert.ok(got.equals(want), `${host} differs from node20: ${firstDifference(got, want, want.length / texts.length)}`);
    }
  });

  test(`${c.name}: normalized vectors are bit-identical across the JavaScript hosts`, () => {
    const want = read(`node20.${c.name}.normalized.f32`);
    for (const host of JS_HOSTS.slice(1)) {
      const got = read(`${host}.${c.name}.normalized.f32`);
      assert.ok(got.equals(want), `${host} differs from node20: ${firstDifference(got, want, want.length / texts.length)}`);
    }
  });
}
