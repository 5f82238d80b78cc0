// A Cloudflare Worker that embeds text with edgembed, for tests/js/workerd.test.mjs.
// The package is imported through its Workers entry (the "workerd" export condition), which
// hands the engine's .wasm modules to the package: Workers cannot compile WebAssembly from bytes.
import { AdaptiveBatcher, Embedder, EmbedderPool, Reranker, env } from "edgembed";
import simd128 from "edgembed/wasm/edgembed.wasm";
import bundle from "all-minilm-l6-v2.emb";
import { base64, packVectors as pack } from "vector_bytes.mjs";

let auto; // the build the package picks (SIMD128 where the CPU is not known to be arm64)
let relaxed; // the relaxed-SIMD build, after its probe
let simd; // the SIMD128 build, passed explicitly as engineModule

export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === "/env") return Response.json(env);
    if (request.method !== "POST") return new Response("POST /embed, /pool, /case or /head", { status: 405 });
    if (url.pathname === "/case") return embedCase(await request.formData());
    if (url.pathname === "/head") return headCase(await request.formData());
    let body;
    try {
      body = await request.json();
    } catch {
      return Response.json({ error: "the body must be JSON: {\"texts\": [...]}" }, { status: 400 });
    }
    const { texts, variant = "auto", normalize = true } = body;
    try {
      if (url.pathname === "/embed") {
        const e = variant === "simd128"
          ? await (simd ??= Embedder.load(bundle, { engineModule: simd128 }))
          : variant === "relaxed"
            ? await (relaxed ??= Embedder.load(bundle, { variant: "relaxed" }))
            : await (auto ??= Embedder.load(bundle));
        const vectors = await e.embed(texts, { normalize });
        return Response.json({ model: e.name, variant: e.variant, dim: e.dim, vectors: vectors.map((v) => Array.from(v)) });
      }
      if (url.pathname === "/pool") {
        // No threads in Workers: the pool runs one engine in-process; the batcher still batches.
        const pool = await EmbedderPool.load(bundle, { workers: 4 });
        const batcher = new AdaptiveBatcher(pool, { shed: false });
        const vectors = await Promise.all(texts.map((t) => batcher.embed(t)));
        await batcher.close();
        pool.dispose();
        return Response.json({ mode: pool.mode, size: pool.size, vectors: vectors.map((v) => Array.from(v)) });
      }
    } catch (e) {
      return Response.json({ error: `${e.name}: ${e.message}` }, { status: e.name === "InputError" || e.name === "InputTooLong" ? 400 : 500 });
    }
    return new Response("not found", { status: 404 });
  },
};

// A cross-host case (build/js/cross_host.json): the form's bundle and texts, embedded raw and
// normalized with the SIMD128 build; the vectors as little-endian float32, base64.
async function embedCase(form) {
  try {
    const bytes = new Uint8Array(await form.get("bundle").arrayBuffer());
    const texts = JSON.parse(form.get("texts"));
    const e = await Embedder.load(bytes, { engineModule: simd128 });
    try {
      const raw = await e.embed(texts, { normalize: false });
      const normalized = await e.embed(texts, { normalize: true });
      return Response.json({ name: e.name, variant: e.variant, raw: base64(pack(raw)), normalized: base64(pack(normalized)) });
    } finally {
      e.dispose();
    }
  } catch (e) {
    return Response.json({ error: `${e.name}: ${e.message}` }, { status: 500 });
  }
}

// A cross-host head (build/js/cross_host.json): a reranker's logits of the form's pairs, or a
// SPLADE model's sparse vectors of its texts as dense rows; little-endian float32, base64.
async function headCase(form) {
  try {
    const bytes = new Uint8Array(await form.get("bundle").arrayBuffer());
    const texts = JSON.parse(form.get("texts"));
    if (form.get("task") === "rerank") {
      const pairs = JSON.parse(form.get("pairs")).map(([q, d]) => [texts[q], texts[d]]);
      const r = await Reranker.load(bytes, { engineModule: simd128 });
      try {
        return Response.json({ name: r.name, rows: base64(pack(r.logits(pairs))) });
      } finally {
        r.dispose();
      }
    }
    const e = await Embedder.load(bytes, { engineModule: simd128 });
    try {
      const rows = (await e.embedSparse(texts)).map((v) => {
        const row = new Float32Array(v.dim);
        v.indices.forEach((x, k) => {
          row[x] = v.values[k];
        });
        return row;
      });
      return Response.json({ name: e.name, rows: base64(pack(rows)) });
    } finally {
      e.dispose();
    }
  } catch (e) {
    return Response.json({ error: `${e.name}: ${e.message}` }, { status: 500 });
  }
}
