/**
 * An HTTP embedding server on Deno with edgembed:
 *
 *   deno run --allow-read --allow-net --allow-env main.ts [BUNDLE] [--port 8000]
 *
 *   POST /embed  {"texts": ["…", …], "priority"?: "interactive" | "bulk"}
 *                → {"model", "dim", "embeddings": [[…], …]}
 *   GET  /stats  the adaptive batcher's counters and cost model
 *
 * The engine runs in an EmbedderPool of Web Workers that share one copy of the weights
 * (SharedArrayBuffer); an AdaptiveBatcher groups concurrent requests into batches that keep a
 * 100 ms latency target and refuses work it cannot finish in time (HTTP 429 + Retry-After).
 */
import { AdaptiveBatcher, EmbedderPool, InputError, Overloaded } from "edgembed";

const args = [...Deno.args];
const portAt = args.indexOf("--port");
const port = portAt >= 0 ? Number(args.splice(portAt, 2)[1]) : 8000;
const bundle = args[0] ?? new URL("../../build/js/all-minilm-l6-v2.emb", import.meta.url).href;

const pool = await EmbedderPool.load(bundle, { workers: 2 });
const batcher = new AdaptiveBatcher(pool, { latencyTargetMs: 100 });
console.log(`edgembed: ${pool.size} workers (${pool.mode} weights), dim ${pool.dim}`);

function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), { status, headers: { "content-type": "application/json", ...headers } });
}

const server = Deno.serve({ hostname: "127.0.0.1", port, onListen: ({ port }) => console.log(`listening on http://127.0.0.1:${port}`) }, async (req) => {
  const { pathname } = new URL(req.url);
  if (pathname === "/stats") return json(batcher.stats());
  if (pathname !== "/embed" || req.method !== "POST") return json({ error: "POST /embed or GET /stats" }, 404);
  try {
    const body = await req.json().catch(() => null);
    if (!Array.isArray(body?.texts)) throw new InputError('the body must be {"texts": [...]}');
    const vectors = await batcher.embed(body.texts as string[], { priority: body.priority ?? "interactive" });
    return json({ model: "all-minilm-l6-v2", dim: pool.dim, embeddings: vectors.map((v: Float32Array) => Array.from(v)) });
  } catch (e) {
    if (e instanceof Overloaded) return json({ error: e.message }, 429, { "retry-after": String(Math.ceil(e.retryAfterMs / 1000)) });
    if (e instanceof InputError) return json({ error: e.message }, 400);
    return json({ error: String(e) }, 500);
  }
});

// Ctrl-C (or SIGTERM): finish what is queued, then stop the workers.
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(signal, async () => {
    await batcher.close();
    pool.dispose();
    await server.shutdown();
    Deno.exit(0);
  });
}
