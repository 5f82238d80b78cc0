// Runs edgembed in Pyodide on a browser's main thread: headless Chromium (Debian's, driven by
// npm playwright-core from tests/js/hosts), offline.
//
//   node tests/pyodide/browser.mjs WORKDIR
//
// WORKDIR is the one tests/python/test_pyodide.py prepared for run.mjs (wheels/, the bundle,
// corpus.json). A loopback server serves Pyodide from node_modules, WORKDIR and a page whose
// module script loads Pyodide, installs micropip and packaging from the local wheels and the
// edgembed wheel by URL with micropip, then, on the main thread: `await edgembed.web.load(URL)`
// (asynchronous compilation, the documented way there), embeds the first 40 corpus texts, and
// tries the synchronous `Embedder.load(bytes)`. The vectors go to WORKDIR/out/browser.f32; the
// last line printed is `RESULT <json>`.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { CHROMIUM, PLAYWRIGHT } from "../js/hosts.mjs";
import { serve } from "../js/server.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const work = path.resolve(process.argv[2] ?? "");
if (!process.argv[2]) {
  console.error("usage: node tests/pyodide/browser.mjs WORKDIR");
  process.exit(2);
}
const site = path.join(work, "site");
fs.rmSync(site, { recursive: true, force: true });
fs.mkdirSync(site);
fs.symlinkSync(path.join(here, "node_modules", "pyodide"), path.join(site, "pyodide"));
fs.symlinkSync(work, path.join(site, "work"));
const wheels = fs.readdirSync(path.join(work, "wheels"));
const pick = (re) => wheels.find((f) => re.test(f));
const PAGE_PY = String.raw`
import json, micropip
from pyodide.http import pyfetch
await micropip.install(BASE + "/work/wheels/" + WHEEL)
import edgembed.web
from edgembed import Embedder
texts = json.loads(await (await pyfetch(BASE + "/work/corpus.json")).string())[:40]
emb = await edgembed.web.load(BASE + "/work/all-minilm-l6-v2.emb")
rows = emb.embed(texts)
out = {"backend": [emb.backend, emb._backend.variant], "n": len(rows), "dim": len(rows[0]),
       "vectors": b"".join(r.tobytes() for r in rows).hex()}
data = await (await pyfetch(BASE + "/work/all-minilm-l6-v2.emb")).bytes()
try:
    sync = Embedder.load(data)
except Exception as exc:
    out["sync_load"] = [type(exc).__name__, str(exc)]
else:
    out["sync_load"] = ["ok", all(a.tobytes() == b.tobytes() for a, b in zip(sync.embed(texts[:8]), rows[:8]))]
json.dumps(out)
`;
fs.writeFileSync(
  path.join(site, "index.html"),
  `<!doctype html><meta charset="utf-8"><title>edgembed in Pyodide</title>
<script type="module">
import { loadPyodide } from "./pyodide/pyodide.mjs";
window.run = async () => {
  const py = await loadPyodide({ indexURL: "./pyodide/" });
  await py.loadPackage(${JSON.stringify([pick(/^micropip-/), pick(/^packaging-/)].map((f) => "./work/wheels/" + f))}, { messageCallback: () => {} });
  py.globals.set("BASE", location.origin);
  py.globals.set("WHEEL", ${JSON.stringify(pick(/^edgembed-/))});
  return [py.version, await py.runPythonAsync(${JSON.stringify(PAGE_PY)})];
};
document.title = "ready";
</script>`,
);

const { chromium } = await import(PLAYWRIGHT);
const server = await serve(site, { isolate: false });
const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu"] });
try {
  const page = await browser.newPage();
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("response", (r) => r.status() >= 400 && problems.push(`HTTP ${r.status()} for ${r.url()}`));
  await page.goto(`${server.url}/index.html`);
  await page.waitForFunction(() => document.title === "ready");
  const t0 = performance.now();
  const [version, json] = await page.evaluate(() => window.run());
  const report = JSON.parse(json);
  fs.mkdirSync(path.join(work, "out"), { recursive: true });
  fs.writeFileSync(path.join(work, "out", "browser.f32"), Buffer.from(report.vectors, "hex"));
  delete report.vectors;
  Object.assign(report, { pyodide: version, seconds: (performance.now() - t0) / 1000, problems, userAgent: await page.evaluate(() => navigator.userAgent) });
  console.log(`RESULT ${JSON.stringify(report)}`);
} finally {
  await browser.close();
  await server.close();
}
