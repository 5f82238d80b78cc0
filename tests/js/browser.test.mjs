// The package in headless Chromium (Debian's, driven by npm playwright-core): a page served
// cross-origin isolated from 127.0.0.1 runs the Embedder (both builds), the Cache API cache, the pool with
// shared weights and its crash recovery (tests/js/browser/page.mjs); then examples/browser is
// searched and photographed. Writes Chromium's corpus vectors for the cross-runtime check.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { ROOT, VECTORS_DIR, cosine, crossHostCases, reference } from "./helpers.mjs";
import { CHROMIUM, PLAYWRIGHT } from "./hosts.mjs";
import { serve } from "./server.mjs";

const { chromium } = await import(PLAYWRIGHT);
let site;
let browser;
const problems = [];

before(async () => {
  site = await serve(ROOT);
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
  await site?.close();
});

async function open(url) {
  const page = await browser.newPage({ viewport: { width: 1000, height: 800 } });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
  page.on("response", (r) => r.status() >= 400 && problems.push(`HTTP ${r.status()} for ${r.url()}`));
  await page.goto(url);
  return page;
}

function vectorsOf(b64) {
  const bytes = Buffer.from(b64, "base64");
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
}

test("the package in a cross-origin-isolated page", { timeout: 240000 }, async () => {
  const page = await open(`${site.url}/tests/js/browser/index.html`);
  await page.waitForFunction(() => document.querySelector("#status")?.textContent === "ready");
  const out = await page.evaluate(() => window.runSuite());
  assert.deepEqual(problems, []);
  assert.equal(out.crossOriginIsolated, true);
  assert.equal(out.env.runtime, "browser");
  assert.equal(out.env.sharedMemory, true);
  assert.equal(out.env.threads, "web");
  assert.equal(out.variant, "simd128");
  assert.equal(out.autoVariant, "simd128", "a page does not know its CPU: SIMD128");
  assert.equal(out.relaxedVariant, "relaxed", "Chromium computes relaxed SIMD exactly");
  assert.equal(out.relaxedSame, true, "relaxed and SIMD128 vectors are bit-identical");
  assert.equal(out.firstLoad.cached, false);
  assert.equal(out.firstLoad.loaded, out.firstLoad.total);
  assert.ok(out.firstLoad.events > 1, "download progress is reported");
  assert.equal(out.secondLoad.cached, true, "the second load comes from the Cache API");
  assert.equal(out.cachedSame, true);
  assert.deepEqual(out.pool, { mode: "shared", variant: "threads", size: 2 });
  assert.equal(out.poolSame, true, "pool vectors are bit-identical");
  assert.equal(out.batcherSame, true, "batcher vectors are bit-identical");
  assert.equal(out.batcherStats.completed, 40);
  assert.equal(out.crashRecovered, true);
  assert.equal(out.poisonError, "WorkerCrashed");

  const normalized = vectorsOf(out.normalized);
  let min = 1;
  for (let i = 0; i < reference.texts.length; i++) {
    min = Math.min(min, cosine(normalized.subarray(i * 384, (i + 1) * 384), reference.embeddings[i]));
  }
  assert.ok(min >= 0.995, `min cosine ${min}`);
  fs.mkdirSync(VECTORS_DIR, { recursive: true });
  fs.writeFileSync(path.join(VECTORS_DIR, "chromium.normalized.f32"), Buffer.from(out.normalized, "base64"));
  fs.writeFileSync(path.join(VECTORS_DIR, "chromium.raw.f32"), Buffer.from(out.raw, "base64"));
  await page.close();
});

test("every architecture's bundle in the page (cross-host vectors)", { timeout: 240000 }, async () => {
  const manifest = crossHostCases();
  const page = await open(`${site.url}/tests/js/browser/index.html`);
  await page.waitForFunction(() => document.querySelector("#status")?.textContent === "ready");
  const out = await page.evaluate((m) => window.runCases(m), manifest);
  assert.deepEqual(problems, []);
  fs.mkdirSync(VECTORS_DIR, { recursive: true });
  for (const c of manifest.cases) {
    assert.equal(out[c.name].name, c.name);
    for (const kind of ["raw", "normalized"]) {
      fs.writeFileSync(path.join(VECTORS_DIR, `chromium.${c.name}.${kind}.f32`), Buffer.from(out[c.name][kind], "base64"));
    }
  }
  const heads = await page.evaluate((m) => window.runHeads(m), manifest);
  assert.deepEqual(problems, []);
  for (const h of manifest.heads) {
    assert.equal(heads[h.name].name, h.name);
    fs.writeFileSync(path.join(VECTORS_DIR, `chromium.${h.name}.${h.task === "rerank" ? "scores" : "sparse"}.f32`), Buffer.from(heads[h.name].rows, "base64"));
  }
  await page.close();
});

test("examples/browser: semantic search finds the right sentences (screenshot in build/js/screenshots/)", { timeout: 180000 }, async () => {
  const page = await open(`${site.url}/examples/browser/?bundle=/build/js/all-minilm-l6-v2.emb`);
  await page.waitForFunction(() => /^Ready|Error/.test(document.querySelector("#status").textContent), null, { timeout: 150000 });
  const ready = await page.textContent("#status");
  assert.match(ready, /^Ready: 240 sentences indexed in [\d.]+ s \(2 workers, shared weights\)\.$/);
  const search = async (query) => {
    await page.fill("#query", query);
    await page.press("#query", "Enter");
    await page.waitForFunction((q) => document.querySelector("#results").dataset.query === q, query);
    return page.$$eval("#results li", (lis) => lis.map((li) => ({ topic: li.dataset.topic, text: li.querySelector(".text").textContent, score: Number(li.querySelector(".score").textContent) })));
  };
  for (const [query, topic] of [
    ["which planet is the biggest", "astronomy"],
    ["my dog keeps chewing the sofa", "pets"],
    ["how should I save for retirement", "finance"],
  ]) {
    const top = await search(query);
    assert.equal(top[0].topic, topic, `${query}: ${JSON.stringify(top[0])}`);
  }
  const top = await search("How do I keep my houseplants alive?");
  assert.equal(top.length, 5);
  assert.equal(top[0].topic, "gardening");
  assert.equal(top[0].text, "Most houseplants die from too much water rather than too little.");
  assert.ok(top.every((r, i) => i === 0 || r.score <= top[i - 1].score));
  assert.deepEqual(problems, []);
  const shots = path.join(ROOT, "build/js/screenshots");
  fs.mkdirSync(shots, { recursive: true });
  await page.screenshot({ path: path.join(shots, "examples-browser.png"), fullPage: true });
  assert.ok(fs.statSync(path.join(shots, "examples-browser.png")).size > 10000);
  await page.close();
});
