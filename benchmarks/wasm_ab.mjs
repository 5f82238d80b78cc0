// Interleaved A/B of engine builds: the same bundle in several edgembed .wasm files (e.g. the
// build before a kernel change and after it), in one Node process, through the raw C ABI.
//
//   node benchmarks/wasm_ab.mjs BUNDLE ROUNDS OLD.wasm NEW.wasm [MORE.wasm ...]
//
// BUNDLE: an all-minilm-l6-v2 engine bundle (.emb); the texts are the reference corpus's token ids
// (tests/fixtures/reference/all-minilm-l6-v2.json): "batch 1" = the first 64 texts one at a time,
// "mixed" = all 262 in corpus order in batches of 32. It first checks that every build gives the
// first one's bits on both workloads, then runs ROUNDS rounds, each workload × build in turn
// (the order rotating per round), and prints the median tokens/s per CPU second of this process
// (less disturbed by a shared machine than wall time) and per wall second. Single-thread builds
// only (edgembed.wasm, edgembed-relaxed.wasm), one context of 8,192 tokens each.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const [bundlePath, roundsS, ...files] = process.argv.slice(2);
if (!bundlePath || !(Number(roundsS) > 0) || files.length === 0) {
  console.error("usage: node benchmarks/wasm_ab.mjs BUNDLE ROUNDS A.wasm [B.wasm ...]");
  process.exit(2);
}
const ref = JSON.parse(fs.readFileSync(path.join(ROOT, "tests/fixtures/reference/all-minilm-l6-v2.json"), "utf8"));
const seqs = ref.token_ids;
const bundle = fs.readFileSync(bundlePath);
const engines = [];
for (const f of files) {
  const { instance } = await WebAssembly.instantiate(fs.readFileSync(f), {});
  const x = instance.exports;
  const u8 = () => new Uint8Array(x.memory.buffer);
  const p = x.emb_alloc_wasm(bundle.length); u8().set(bundle, p);
  const sc = x.emb_alloc_wasm(8);
  if (x.emb_model_init_wasm(sc, p, bundle.length) !== 0) throw new Error("init");
  const model = new Uint32Array(x.memory.buffer, sc, 1)[0];
  if (x.emb_context_init_wasm(sc, model, 8192) !== 0) throw new Error("ctx");
  const ctx = new Uint32Array(x.memory.buffer, sc, 1)[0];
  const ids = x.emb_alloc_wasm(4 * 8192), lens = x.emb_alloc_wasm(4 * 64), out = x.emb_alloc_wasm(4 * 384 * 64);
  const run = (batch) => {
    let n = 0; const I = new Int32Array(x.memory.buffer, ids, 8192), L = new Int32Array(x.memory.buffer, lens, 64);
    batch.forEach((s, i) => { I.set(s, n); n += s.length; L[i] = s.length; });
    const st = x.emb_context_encode_wasm(ctx, ids, lens, batch.length, 0, 1, out, 384 * batch.length);
    if (st !== 0) throw new Error("encode " + st);
    return new Float32Array(x.memory.buffer, out, 384 * batch.length).slice();
  };
  engines.push({ f, run });
}
const b1 = seqs.slice(0, 64).map((s) => [s]);
const mixed = []; for (let i = 0; i < seqs.length; i += 32) mixed.push(seqs.slice(i, i + 32));
const W = { "batch 1": b1, mixed };
// same bits
for (const [w, batches] of Object.entries(W)) {
  const outs = engines.map((e) => batches.map((b) => e.run(b)));
  for (let i = 1; i < outs.length; i++) {
    const same = outs[0].every((o, j) => Buffer.from(o.buffer).equals(Buffer.from(outs[i][j].buffer)));
    console.log(w, files[i], "bit-identical to", files[0], same);
    if (!same) process.exitCode = 1;
  }
}
const toks = (bs) => bs.reduce((a, b) => a + b.reduce((c, s) => c + s.length, 0), 0);
const res = {};
for (let r = 0; r < +roundsS; r++) {
  for (const [w, batches] of Object.entries(W)) {
    for (let i0 = 0; i0 < engines.length; i0++) {
      const i = (i0 + r) % engines.length;
      const t = process.cpuUsage(); const t0 = process.hrtime.bigint();
      for (const b of batches) engines[i].run(b);
      const u = process.cpuUsage(t); const wall = Number(process.hrtime.bigint() - t0) / 1e9;
      ((res[w] ??= {})[i] ??= { cpu: [], wall: [] });
      res[w][i].cpu.push(toks(batches) / ((u.user + u.system) / 1e6));
      res[w][i].wall.push(toks(batches) / wall);
    }
  }
}
const med = (a) => [...a].sort((x, y) => x - y)[a.length >> 1];
for (const w of Object.keys(W)) for (let i = 0; i < engines.length; i++)
  console.log(`${w}\t${files[i]}\tcpu tokens/s ${med(res[w][i].cpu).toFixed(0)}\twall tokens/s ${med(res[w][i].wall).toFixed(0)}`);
