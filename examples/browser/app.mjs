// Semantic search over sentences.json with edgembed, entirely in the page.
//
// On a cross-origin-isolated page (COOP + COEP headers) an EmbedderPool runs the engine in Web
// Workers that share one copy of the weights; elsewhere one Embedder runs in this thread. The
// bundle comes from ?bundle=URL (default ./all-minilm-l6-v2.emb) and is cached by the Cache API.
import { Embedder, EmbedderPool, env } from "edgembed";

const $ = (id) => document.getElementById(id);
const bundle = new URLSearchParams(location.search).get("bundle") ?? "./all-minilm-l6-v2.emb";
const status = (text) => ($("status").textContent = text);

async function main() {
  const started = performance.now();
  const onProgress = (p) => {
    $("progress").value = p.total ? p.loaded / p.total : 0;
    status(p.cached ? "Model loaded from the browser cache." : `Downloading the model: ${(p.loaded / 1e6).toFixed(1)} MB…`);
  };
  const engine = env.sharedMemory
    ? await EmbedderPool.load(bundle, { onProgress, workers: Math.min(4, env.cores) })
    : await Embedder.load(bundle, { onProgress });
  const sentences = await (await fetch("./sentences.json")).json();

  // Embed in chunks so the progress bar moves; vectors are L2-normalized, so a dot product is
  // the cosine similarity.
  const vectors = [];
  for (let i = 0; i < sentences.length; i += 24) {
    vectors.push(...(await engine.embed(sentences.slice(i, i + 24).map((s) => s.text))));
    $("progress").value = vectors.length / sentences.length;
    status(`Indexing: ${vectors.length} of ${sentences.length} sentences…`);
  }
  const how = engine instanceof EmbedderPool ? `${engine.size} workers, shared weights` : `one thread, ${engine.variant}`;
  status(`Ready: ${sentences.length} sentences indexed in ${((performance.now() - started) / 1000).toFixed(1)} s (${how}).`);
  $("query").disabled = false;
  $("go").disabled = false;
  $("query").focus();

  $("search").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const query = $("query").value.trim();
    if (!query) return;
    const t0 = performance.now();
    const [q] = await engine.embed([query]);
    const scored = vectors.map((v, i) => {
      let dot = 0;
      for (let k = 0; k < v.length; k++) dot += v[k] * q[k];
      return { i, score: dot };
    });
    scored.sort((a, b) => b.score - a.score);
    $("results").replaceChildren(
      ...scored.slice(0, 5).map(({ i, score }) => {
        const li = document.createElement("li");
        li.dataset.topic = sentences[i].topic;
        li.innerHTML = `<span class="score"></span><span class="text"></span><span class="topic"></span>`;
        li.querySelector(".score").textContent = score.toFixed(3);
        li.querySelector(".text").textContent = sentences[i].text;
        li.querySelector(".topic").textContent = sentences[i].topic;
        return li;
      }),
    );
    $("results").dataset.query = query;
    status(`Top 5 of ${sentences.length} in ${(performance.now() - t0).toFixed(0)} ms.`);
  });
}

main().catch((e) => status(`${e.name}: ${e.message}`));
