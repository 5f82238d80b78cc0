// The package in a Cloudflare Worker: workerd (npm) serves tests/js/workerd/ on 127.0.0.1 and
// answers POST /embed. Writes the Worker's corpus vectors for the cross-runtime check.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { ROOT, VECTORS_DIR, cosine, crossHostCases, packVectors, reference } from "./helpers.mjs";
import { WORKERD, freePort, start, waitFor } from "./hosts.mjs";

let base;
let server;

before(async () => {
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  fs.mkdirSync(path.join(ROOT, "build/js"), { recursive: true });
  server = start(WORKERD, ["serve", "tests/js/workerd/config.capnp", "--socket-addr", `http=127.0.0.1:${port}`], {
    log: path.join(ROOT, "build/js/workerd.log"),
  });
  await waitFor(`${base}/env`, 30000, server.child);
});

after(async () => {
  await server?.stop();
});

async function embed(route, body) {
  const res = await fetch(`${base}${route}`, { method: "POST", body: JSON.stringify(body) });
  const json = await res.json();
  return { status: res.status, json };
}

test("the Worker sees a host without threads or wasm compilation", async () => {
  const env = await (await fetch(`${base}/env`)).json();
  assert.equal(env.runtime, "workerd");
  assert.equal(env.compileWasm, false);
  assert.equal(env.threads, "none");
  assert.equal(env.fileSystem, false);
});

test("POST /embed: SIMD128 vectors of the corpus match sentence-transformers", async () => {
  const { status, json } = await embed("/embed", { texts: reference.texts, variant: "simd128" });
  assert.equal(status, 200, JSON.stringify(json).slice(0, 300));
  assert.equal(json.model, "all-minilm-l6-v2");
  assert.equal(json.variant, "simd128");
  assert.equal(json.vectors.length, reference.texts.length);
  let min = 1;
  json.vectors.forEach((v, i) => (min = Math.min(min, cosine(v, reference.embeddings[i]))));
  assert.ok(min >= 0.995, `min cosine ${min}`);
  fs.mkdirSync(VECTORS_DIR, { recursive: true });
  fs.writeFileSync(path.join(VECTORS_DIR, "workerd.normalized.f32"), packVectors(json.vectors.map((v) => Float32Array.from(v))));
  const raw = await embed("/embed", { texts: reference.texts, variant: "simd128", normalize: false });
  fs.writeFileSync(path.join(VECTORS_DIR, "workerd.raw.f32"), packVectors(raw.json.vectors.map((v) => Float32Array.from(v))));
});

test("relaxed SIMD runs after its probe and gives SIMD128's bits; the in-process pool and batcher agree", async () => {
  const texts = reference.texts.slice(30, 46);
  const auto = await embed("/embed", { texts });
  assert.equal(auto.json.variant, "simd128");
  const relaxed = await embed("/embed", { texts, variant: "relaxed" });
  assert.equal(relaxed.json.variant, "relaxed");
  assert.deepEqual(relaxed.json.vectors, auto.json.vectors);
  const pool = await embed("/pool", { texts });
  assert.equal(pool.json.mode, "in-process");
  assert.equal(pool.json.size, 1);
  assert.deepEqual(pool.json.vectors, auto.json.vectors);
});

test("bad input is answered with the package's error", async () => {
  const { status, json } = await embed("/embed", { texts: [1, 2] });
  assert.equal(status, 400);
  assert.match(json.error, /^InputError: texts\[0\] is number/);
});

test("every architecture's bundle in the Worker (cross-host vectors)", async () => {
  const { texts, cases } = crossHostCases();
  fs.mkdirSync(VECTORS_DIR, { recursive: true });
  for (const c of cases) {
    const form = new FormData();
    form.set("bundle", new Blob([fs.readFileSync(path.join(ROOT, c.bundle))]));
    form.set("texts", JSON.stringify(texts));
    const res = await fetch(`${base}/case`, { method: "POST", body: form });
    const json = await res.json();
    assert.equal(res.status, 200, JSON.stringify(json).slice(0, 300));
    assert.equal(json.name, c.name);
    assert.equal(json.variant, "simd128");
    for (const kind of ["raw", "normalized"]) {
      fs.writeFileSync(path.join(VECTORS_DIR, `workerd.${c.name}.${kind}.f32`), Buffer.from(json[kind], "base64"));
    }
  }
});

test("every reranker and SPLADE model in the Worker (cross-host scores and sparse vectors)", async () => {
  const { texts, heads } = crossHostCases();
  fs.mkdirSync(VECTORS_DIR, { recursive: true });
  for (const h of heads) {
    const form = new FormData();
    form.set("bundle", new Blob([fs.readFileSync(path.join(ROOT, h.bundle))]));
    form.set("task", h.task);
    form.set("texts", JSON.stringify(texts));
    if (h.task === "rerank") form.set("pairs", JSON.stringify(h.pairs));
    const res = await fetch(`${base}/head`, { method: "POST", body: form });
    const json = await res.json();
    assert.equal(res.status, 200, JSON.stringify(json).slice(0, 300));
    assert.equal(json.name, h.name);
    fs.writeFileSync(path.join(VECTORS_DIR, `workerd.${h.name}.${h.task === "rerank" ? "scores" : "sparse"}.f32`), Buffer.from(json.rows, "base64"));
  }
});
