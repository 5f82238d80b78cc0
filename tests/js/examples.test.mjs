// The examples run as their READMEs say: examples/cloudflare-worker in workerd (its bundle
// downloaded from a server on 127.0.0.1 with an sha256 check) and examples/deno as a server.
// examples/browser is checked in tests/js/browser.test.mjs (with a screenshot).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { BUNDLE, ROOT, bitsEqual, pkg, reference } from "./helpers.mjs";
import { WORKERD, freePort, start, waitFor } from "./hosts.mjs";
import { serve } from "./server.mjs";

const DENO = path.join(ROOT, "tests/js/hosts/node_modules/.bin/deno");
const texts = reference.texts.slice(60, 72);
let expected;
let site;

before(async () => {
  const e = await pkg.Embedder.load(BUNDLE, { variant: "simd128" });
  expected = await e.embed(texts);
  e.dispose();
  site = await serve(ROOT, { isolate: false });
});

after(() => site?.close());

async function post(url, body) {
  const res = await fetch(url, { method: "POST", body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, json: await res.json() };
}

describe("examples/cloudflare-worker in workerd", () => {
  let worker;
  let base;
  before(async () => {
    const dir = path.join(ROOT, "build/js/examples-worker");
    fs.mkdirSync(dir, { recursive: true });
    const dist = path.join(ROOT, "js/dist");
    const rel = (p) => path.relative(dir, p);
    const js = fs.readdirSync(dist, { recursive: true }).filter((f) => f.endsWith(".js") && f !== "workerd.js" && f !== "worker.js");
    const sha = await pkg.sha256Hex(new Uint8Array(fs.readFileSync(BUNDLE)));
    fs.writeFileSync(
      path.join(dir, "config.capnp"),
      `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .worker),
    (name = "local", network = (allow = ["local"])),
  ],
  sockets = [(name = "http", address = "127.0.0.1:8787", http = (), service = "main")],
);
const worker :Workerd.Worker = (
  compatibilityDate = "2026-11-01",
  globalOutbound = "local",
  modules = [
    (name = "index.mjs", esModule = embed "${rel(path.join(ROOT, "examples/cloudflare-worker/src/index.js"))}"),
    (name = "edgembed", esModule = embed "${rel(path.join(dist, "workerd.js"))}"),
    ${js.map((f) => `(name = "${f}", esModule = embed "${rel(path.join(dist, f))}")`).join(",\n    ")},
    (name = "wasm/edgembed.wasm", wasm = embed "${rel(path.join(dist, "wasm/edgembed.wasm"))}"),
    (name = "wasm/edgembed-relaxed.wasm", wasm = embed "${rel(path.join(dist, "wasm/edgembed-relaxed.wasm"))}"),
  ],
  bindings = [
    (name = "BUNDLE_URL", text = "${site.url}/build/js/all-minilm-l6-v2.emb"),
    (name = "BUNDLE_SHA256", text = "${sha}"),
    (name = "LATENCY_TARGET_MS", text = "2000"),
  ],
);
`,
    );
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    worker = start(WORKERD, ["serve", path.join(dir, "config.capnp"), "--socket-addr", `http=127.0.0.1:${port}`], { log: path.join(dir, "workerd.log") });
    await waitFor(`${base}/`, 30000, worker.child);
  });
  after(() => worker?.stop());

  test("POST /embed answers concurrent requests with the engine's vectors", async () => {
    const answers = await Promise.all(texts.map((t) => post(`${base}/embed`, { texts: [t] })));
    answers.forEach((a, i) => {
      assert.equal(a.status, 200, JSON.stringify(a.json));
      assert.equal(a.json.model, "all-minilm-l6-v2");
      assert.equal(a.json.dim, 384);
      assert.ok(bitsEqual(Float32Array.from(a.json.embeddings[0]), expected[i]), `text ${i}`);
    });
  });

  test("bad requests get 400 with the package's error", async () => {
    const a = await post(`${base}/embed`, { text: "no" });
    assert.equal(a.status, 400);
    assert.match(a.json.error, /^InputError:/);
    assert.equal((await fetch(`${base}/embed`)).status, 405);
  });
});

describe("examples/deno", () => {
  let server;
  let base;
  before(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    server = start(DENO, ["run", "--allow-read", "--allow-net", "--allow-env", "main.ts", BUNDLE, "--port", String(port)], {
      cwd: path.join(ROOT, "examples/deno"),
      log: path.join(ROOT, "build/js/examples-deno.log"),
    });
    await waitFor(`${base}/stats`, 30000, server.child);
  });
  after(() => server?.stop());

  test("POST /embed through the pool and the batcher gives the engine's exact vectors", async () => {
    const answers = await Promise.all(texts.map((t) => post(`${base}/embed`, { texts: [t] })));
    answers.forEach((a, i) => {
      assert.equal(a.status, 200, JSON.stringify(a.json));
      assert.ok(bitsEqual(Float32Array.from(a.json.embeddings[0]), expected[i]), `text ${i}`);
    });
    const stats = await (await fetch(`${base}/stats`)).json();
    assert.equal(stats.completed, texts.length);
    assert.equal(stats.workers, 2);
    assert.equal((await post(`${base}/embed`, { texts: "no" })).status, 400);
  });
});
