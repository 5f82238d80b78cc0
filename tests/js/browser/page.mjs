// The browser half of tests/js/browser.test.mjs: runs the package in this page (served
// cross-origin isolated) and returns what the Node side checks. window.runSuite() is the entry.
import * as edgembed from "/js/dist/index.js";
import { base64, packVectors as pack } from "/tests/js/vector_bytes.mjs";

const BUNDLE = "/build/js/all-minilm-l6-v2.emb";

function same(a, b) {
  return a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
}

window.runSuite = async () => {
  const { Embedder, EmbedderPool, AdaptiveBatcher, WorkerCrashed, env } = edgembed;
  const out = { env: { ...env }, crossOriginIsolated: globalThis.crossOriginIsolated };
  const corpus = await (await fetch("/tests/fixtures/reference/corpus.json")).json();
  await caches.delete("edgembed-bundles-v1");

  const first = [];
  const e = await Embedder.load(BUNDLE, { variant: "simd128", onProgress: (p) => first.push(p) });
  out.firstLoad = { events: first.length, cached: first.at(-1).cached, loaded: first.at(-1).loaded, total: first.at(-1).total };
  out.variant = e.variant;
  const normalized = await e.embed(corpus);
  const raw = await e.embed(corpus, { normalize: false });
  out.normalized = base64(pack(normalized));
  out.raw = base64(pack(raw));

  const second = [];
  const again = await Embedder.load(BUNDLE, { variant: "simd128", onProgress: (p) => second.push(p) });
  out.secondLoad = { events: second.length, cached: second.at(-1).cached };
  out.cachedSame = same((await again.embed([corpus[9]]))[0], normalized[9]);
  again.dispose();

  const auto = await Embedder.load(BUNDLE);
  out.autoVariant = auto.variant;
  auto.dispose();
  const relaxed = await Embedder.load(BUNDLE, { variant: "relaxed" });
  out.relaxedVariant = relaxed.variant;
  out.relaxedSame = (await relaxed.embed(corpus.slice(0, 40))).every((v, i) => same(v, normalized[i]));
  relaxed.dispose();

  const pool = await EmbedderPool.load(BUNDLE, { workers: 2 });
  out.pool = { mode: pool.mode, variant: pool.variant, size: pool.size };
  const some = corpus.slice(0, 40);
  const pooled = await pool.embed(some);
  out.poolSame = pooled.every((v, i) => same(v, normalized[i]));
  const batcher = new AdaptiveBatcher(pool, { shed: false });
  const batched = await Promise.all(some.map((t) => batcher.embed(t)));
  out.batcherSame = batched.every((v, i) => same(v, normalized[i]));
  out.batcherStats = { batches: batcher.stats().batches, completed: batcher.stats().completed };
  await batcher.close();
  pool.dispose();

  const crashing = await EmbedderPool.load(BUNDLE, { workers: 2, crashText: "crash", crashTimes: 1 });
  const [recovered] = await crashing.embed([corpus[3], "crash"]).then((v) => [v[0]]);
  out.crashRecovered = same(recovered, normalized[3]);
  crashing.dispose();
  const poisoned = await EmbedderPool.load(BUNDLE, { workers: 2, crashText: "poison" });
  out.poisonError = await poisoned.embed(["poison"]).then(() => "resolved", (err) => (err instanceof WorkerCrashed ? "WorkerCrashed" : String(err)));
  poisoned.dispose();
  e.dispose();
  document.querySelector("#status").textContent = "done";
  return out;
};

/** The cross-host cases (build/js/cross_host.json): each bundle's raw and normalized vectors of the texts, base64. */
window.runCases = async (manifest) => {
  const out = {};
  for (const c of manifest.cases) {
    const e = await edgembed.Embedder.load(`/${c.bundle}`, { variant: "simd128", cache: false });
    out[c.name] = {
      name: e.name,
      raw: base64(pack(await e.embed(manifest.texts, { normalize: false }))),
      normalized: base64(pack(await e.embed(manifest.texts, { normalize: true }))),
    };
    e.dispose();
  }
  return out;
};

/** A sparse vector as its dense row over the vocabulary. */
function dense(v) {
  const out = new Float32Array(v.dim);
  v.indices.forEach((x, k) => {
    out[x] = v.values[k];
  });
  return out;
}

/**
 * The cross-host heads (build/js/cross_host.json): each reranker's logits of its pairs and each
 * SPLADE model's sparse vectors of the texts (as dense rows), little-endian float32, base64.
 */
window.runHeads = async (manifest) => {
  const out = {};
  for (const h of manifest.heads) {
    const options = { variant: "simd128", cache: false };
    if (h.task === "rerank") {
      const r = await edgembed.Reranker.load(`/${h.bundle}`, options);
      out[h.name] = { name: r.name, rows: base64(pack(r.logits(h.pairs.map(([q, d]) => [manifest.texts[q], manifest.texts[d]])))) };
      r.dispose();
    } else {
      const e = await edgembed.Embedder.load(`/${h.bundle}`, options);
      out[h.name] = { name: e.name, rows: base64(pack((await e.embedSparse(manifest.texts)).map(dense))) };
      e.dispose();
    }
  }
  return out;
};

document.querySelector("#status").textContent = "ready";
