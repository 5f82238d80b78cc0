// An embedding API on Cloudflare Workers with edgembed.
//
//   POST /embed   {"texts": ["…", …]}   →   {"model", "dim", "embeddings": [[…], …]}
//
// The package's Workers entry (the "workerd" export condition, which wrangler selects) imports
// the engine's .wasm files as modules: Workers cannot compile WebAssembly from bytes. The model
// bundle (~26 MB, too large to ship inside the Worker) is read once per isolate from an R2
// bucket bound as MODELS, or else downloaded from BUNDLE_URL and checked against BUNDLE_SHA256.
// Concurrent requests of one isolate are grouped by an AdaptiveBatcher.
import { AdaptiveBatcher, Embedder, EdgembedError, InputError } from "edgembed";

let ready; // Promise<{ embedder, batcher }>, one per isolate

function engine(env) {
  ready ??= (async () => {
    let source = env.BUNDLE_URL;
    if (env.MODELS) {
      const object = await env.MODELS.get(env.BUNDLE_KEY || "all-minilm-l6-v2.emb");
      if (object === null) throw new Error(`no ${env.BUNDLE_KEY || "all-minilm-l6-v2.emb"} in the MODELS bucket`);
      source = await object.arrayBuffer();
    }
    if (!source) throw new Error("configure a MODELS R2 binding or BUNDLE_URL in wrangler.toml");
    const embedder = await Embedder.load(source, { integrity: env.BUNDLE_SHA256 || undefined, cache: false });
    const batcher = new AdaptiveBatcher(embedder, { latencyTargetMs: Number(env.LATENCY_TARGET_MS || 200) });
    return { embedder, batcher };
  })();
  ready.catch(() => (ready = undefined)); // a failed load is retried by the next request
  return ready;
}

export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname !== "/embed") return new Response("POST /embed {\"texts\": [...]}\n", { status: 404 });
    if (request.method !== "POST") return new Response("use POST\n", { status: 405, headers: { allow: "POST" } });
    try {
      const body = await request.json().catch(() => null);
      const texts = body?.texts;
      if (!Array.isArray(texts) || texts.length === 0 || texts.length > 256) {
        throw new InputError('the body must be {"texts": [...]} with 1 to 256 strings');
      }
      const { embedder, batcher } = await engine(env);
      const vectors = await batcher.embed(texts);
      return Response.json({ model: embedder.name, dim: embedder.dim, embeddings: vectors.map((v) => Array.from(v)) });
    } catch (e) {
      const status = e instanceof InputError ? 400 : e.name === "Overloaded" ? 429 : 500;
      const headers = e.retryAfterMs ? { "retry-after": String(Math.ceil(e.retryAfterMs / 1000)) } : {};
      const message = e instanceof EdgembedError ? `${e.name}: ${e.message}` : `internal error: ${e.message}`;
      return Response.json({ error: message }, { status, headers });
    }
  },
};
