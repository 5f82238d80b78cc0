// Embedder in this host: tokenizer parity, vectors against sentence-transformers, batch
// invariance, options, loading paths and errors. Also writes this host's corpus vectors for the
// cross-runtime bit-identity check (tests/js/cross_runtime.test.mjs).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";
import { BUNDLE, ROOT, bitsEqual, cosine, crossHostCases, hostLabel, pkg, reference, writeVectors } from "../helpers.mjs";

const { Embedder, env, BundleError, ChecksumMismatch, EmbedderDisposed, InputError, InputTooLong, ModelNotFound, sha256Hex } = pkg;
const texts = reference.texts;

describe("Embedder (SIMD128 build)", () => {
  let e;
  before(async () => {
    e = await Embedder.load(BUNDLE, { build: "simd128" });
  });
  after(() => e.dispose());

  test("reads the bundle's model info and metadata", () => {
    assert.equal(e.build, "simd128");
    assert.equal(e.dim, 384);
    assert.equal(e.maxLength, 256);
    assert.equal(e.name, "all-minilm-l6-v2");
    assert.equal(e.info.pooling, "mean");
    assert.equal(e.info.normalize, true);
    assert.equal(e.meta("quantization"), "int8-block32");
    assert.equal(e.meta("no such key"), null);
  });

  test("tokenizes the reference corpus exactly like Hugging Face tokenizers", () => {
    const ids = e.tokenize(texts);
    let same = 0;
    ids.forEach((got, i) => {
      if (got.length === reference.token_ids[i].length && got.every((v, j) => v === reference.token_ids[i][j])) same++;
      else assert.fail(`text ${i} ${JSON.stringify(texts[i].slice(0, 40))}: ${got.slice(0, 12)} vs ${reference.token_ids[i].slice(0, 12)}`);
    });
    assert.equal(same, texts.length);
    assert.deepEqual(Array.from(e.tokenize("")[0]), [101, 102]);
    assert.deepEqual(e.countTokens(["hello", ""]), [3, 2]);
  });

  test("token offsets are Hugging Face tokenizers' (UTF-16 offsets, surrogate pairs included)", () => {
    const file = path.join(ROOT, "tests/fixtures/reference/all-minilm-l6-v2.offsets.json");
    const { cases } = JSON.parse(fs.readFileSync(file, "utf8"));
    const got = e.tokenizeWithOffsets(cases.map((c) => c.text));
    cases.forEach((c, i) => {
      assert.deepEqual(Array.from(got[i].ids), c.ids, `ids of text ${i}`);
      assert.deepEqual(Array.from(got[i].offsets), c.offsets, `offsets of text ${i} ${JSON.stringify(c.text.slice(0, 40))}`);
    });
  });

  test("vectors match sentence-transformers at the int8 bar (min cosine >= 0.995)", async () => {
    const vectors = await e.embed(texts);
    assert.equal(vectors.length, texts.length);
    let min = 1;
    let sum = 0;
    vectors.forEach((v, i) => {
      assert.equal(v.length, 384);
      const c = cosine(v, reference.embeddings[i]);
      min = Math.min(min, c);
      sum += c;
    });
    assert.ok(min >= 0.995, `min cosine ${min}`);
    assert.ok(sum / texts.length >= 0.999, `mean cosine ${sum / texts.length}`);
    writeVectors(`${hostLabel()}.normalized.f32`, vectors);
  });

  test("raw pooled vectors (normalize: false) are written for the cross-runtime check", async () => {
    const raw = await e.embed(texts, { normalize: false });
    const norms = raw.map((v) => Math.hypot(...v));
    assert.ok(norms.some((n) => Math.abs(n - 1) > 0.01), "raw vectors are not unit length");
    writeVectors(`${hostLabel()}.raw.f32`, raw);
  });

  test("a text's vector does not depend on its batch or on how calls are packed", async () => {
    const some = texts.slice(100, 124);
    const together = await e.embed(some);
    for (let i = 0; i < some.length; i += 5) {
      const [alone] = await e.embed([some[i]]);
      assert.ok(bitsEqual(alone, together[i]), `text ${i} differs alone`);
    }
    const small = await Embedder.load(BUNDLE, { build: "simd128", maxTokens: 256 });
    try {
      const packed = await small.embed(some);
      packed.forEach((v, i) => assert.ok(bitsEqual(v, together[i]), `text ${i} differs with maxTokens 256`));
    } finally {
      small.dispose();
    }
  });

  test("options: dimensions, prefix, truncate, pooling", async () => {
    const t = ["The quick brown fox jumps over the lazy dog."];
    const [full] = await e.embed(t, { normalize: false });
    const [cut] = await e.embed(t, { dimensions: 128 });
    assert.equal(cut.length, 128);
    assert.ok(Math.abs(Math.hypot(...cut) - 1) < 1e-6);
    const head = full.slice(0, 128);
    const n = Math.hypot(...head);
    cut.forEach((x, i) => assert.ok(Math.abs(x - head[i] / n) < 1e-6));
    const [rawCut] = await e.embed(t, { dimensions: 64, normalize: false });
    assert.ok(bitsEqual(rawCut, full.slice(0, 64)));

    const [prefixed] = await e.embed(t, { prefix: "query: " });
    const [manual] = await e.embed(["query: " + t[0]]);
    assert.ok(bitsEqual(prefixed, manual));

    const long = texts.find((x, i) => reference.token_ids[i].length === 256);
    await assert.rejects(e.embed([long], { truncate: false }), InputTooLong);
    assert.throws(() => e.tokenize([long], { truncate: false }), InputTooLong);
    assert.equal(e.tokenize([long])[0].length, 256);

    const [cls] = await e.embed(t, { pooling: "cls" });
    const [mean] = await e.embed(t, { pooling: "mean" });
    const [model] = await e.embed(t);
    assert.ok(bitsEqual(mean, model));
    assert.ok(cosine(cls, mean) < 0.99);

    await assert.rejects(e.embed(t, { dimensions: 0 }), InputError);
    await assert.rejects(e.embed(t, { dimensions: 385 }), InputError);
    await assert.rejects(e.embed([42]), InputError);
    assert.deepEqual(await e.embed([]), []);
  });
});

// The tiny XLM-RoBERTa (SentencePiece Unigram) and ModernBERT (byte-level BPE) models' bundles
// (tests/fixtures/write_bundles.py) against tokenizers' offsets of the same texts
// (tests/fixtures/reference/<name>.offsets.json, written by make_offsets.py there).
describe("token offsets of Unigram and byte-level BPE bundles", () => {
  const { cases: bundles } = crossHostCases();
  for (const name of ["xlm-roberta-mean-prompts", "modernbert-mean"]) {
    test(`${name}: Hugging Face tokenizers' ids and UTF-16 offsets, surrogate pairs included`, async () => {
      const c = bundles.find((x) => x.name === name);
      assert.ok(c, `${name} is not a cross-host case (tests/fixtures/write_bundles.py)`);
      const file = path.join(ROOT, `tests/fixtures/reference/${name}.offsets.json`);
      const { cases, max_length: maxLength } = JSON.parse(fs.readFileSync(file, "utf8"));
      assert.ok(cases.some((x) => /[\uD800-\uDBFF]/.test(x.text)), "texts outside the BMP");
      const e = await Embedder.load(path.join(ROOT, c.bundle), { build: "simd128" });
      try {
        assert.equal(e.maxLength, maxLength);
        const got = e.tokenizeWithOffsets(cases.map((x) => x.text));
        cases.forEach((x, i) => {
          assert.deepEqual(Array.from(got[i].ids), x.ids, `ids of text ${i}`);
          assert.deepEqual(Array.from(got[i].offsets), x.offsets, `offsets of text ${i} ${JSON.stringify(x.text.slice(0, 40))}`);
        });
      } finally {
        e.dispose();
      }
    });
  }
});

describe("Embedder builds", () => {
  test("auto picks SIMD128 on x86-64; relaxed SIMD runs where exact and gives the same bits", async () => {
    const { BackendUnavailable } = pkg;
    const auto = await Embedder.load(BUNDLE);
    const simd = await Embedder.load(BUNDLE, { build: "simd128" });
    try {
      // relaxed is faster only on arm64 (docs/engine.md, "Speed"); Node 20 computes it wrongly
      const relaxedExact = !(env.runtime === "node" && Number(env.version.split(".")[0]) < 22);
      assert.equal(auto.build, env.arch === "arm64" && relaxedExact ? "relaxed" : "simd128");
      if (!relaxedExact) {
        await assert.rejects(Embedder.load(BUNDLE, { build: "relaxed" }), BackendUnavailable);
        return;
      }
      const relaxed = await Embedder.load(BUNDLE, { build: "relaxed" });
      try {
        assert.equal(relaxed.build, "relaxed");
        const some = texts.slice(40, 70);
        const a = await relaxed.embed(some);
        const b = await simd.embed(some);
        a.forEach((v, i) => assert.ok(bitsEqual(v, b[i]), `text ${i}`));
      } finally {
        relaxed.dispose();
      }
    } finally {
      auto.dispose();
      simd.dispose();
    }
  });

  test("build is the option's name; variant, its old name, still works and must agree", async () => {
    const old = await Embedder.load(BUNDLE, { variant: "simd128" });
    try {
      assert.equal(old.build, "simd128");
      assert.equal(old.variant, "simd128");
    } finally {
      old.dispose();
    }
    const same = await Embedder.load(BUNDLE, { build: "simd128", variant: "simd128" });
    same.dispose();
    await assert.rejects(Embedder.load(BUNDLE, { build: "simd128", variant: "relaxed" }),
      (e) => e instanceof InputError && /variant is the old name of build/.test(e.message));
  });

  test("accepts a compiled engine module, refuses the threads build", async () => {
    const bytes = fs.readFileSync(path.join(ROOT, "js/dist/wasm/edgembed.wasm"));
    const engineModule = await WebAssembly.compile(bytes);
    const e = await Embedder.load(fs.readFileSync(BUNDLE), { engineModule });
    try {
      assert.equal(e.build, "simd128");
      assert.equal((await e.embed(["hello"]))[0].length, 384);
    } finally {
      e.dispose();
    }
    const threads = await WebAssembly.compile(fs.readFileSync(path.join(ROOT, "js/dist/wasm/edgembed-threads.wasm")));
    await assert.rejects(Embedder.load(BUNDLE, { engineModule: threads }), InputError);
  });
});

describe("Embedder.load sources and errors", () => {
  const bytes = new Uint8Array(fs.readFileSync(BUNDLE));
  let expected;
  before(async () => {
    const e = await Embedder.load(bytes, { build: "simd128" });
    [expected] = await e.embed(["sources agree"]);
    e.dispose();
  });

  for (const [name, make] of [
    ["a path", () => BUNDLE],
    ["a file: URL", () => pathToFileURL(BUNDLE)],
    ["a file: URL string", () => pathToFileURL(BUNDLE).href],
    ["an ArrayBuffer", () => bytes.slice().buffer],
    ["a DataView", () => new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength)],
  ]) {
    test(`from ${name}`, async () => {
      const e = await Embedder.load(make(), { build: "simd128" });
      try {
        assert.ok(bitsEqual((await e.embed(["sources agree"]))[0], expected));
      } finally {
        e.dispose();
      }
    });
  }

  test("checks sha256 integrity (hex or SRI) and reports a mismatch", async () => {
    const hex = await sha256Hex(bytes);
    const sri = "sha256-" + btoa(String.fromCharCode(...hex.match(/../g).map((h) => parseInt(h, 16))));
    (await Embedder.load(BUNDLE, { integrity: hex, build: "simd128" })).dispose();
    (await Embedder.load(bytes, { integrity: sri, build: "simd128" })).dispose();
    const wrong = "0".repeat(64);
    const err = await Embedder.load(BUNDLE, { integrity: wrong }).catch((x) => x);
    assert.ok(err instanceof ChecksumMismatch, String(err));
    assert.equal(err.actual, hex);
    assert.match(err.message, /sha256/);
    await assert.rejects(Embedder.load(BUNDLE, { integrity: "md5-abc" }), InputError);
  });

  test("a missing file is ModelNotFound", async () => {
    await assert.rejects(Embedder.load(path.join(ROOT, "build/js/no-such.emb")), ModelNotFound);
  });

  test("corrupt, truncated and foreign bytes are BundleError with the version range", async () => {
    const flipped = bytes.slice();
    flipped[flipped.length - 100] ^= 0xff;
    await assert.rejects(Embedder.load(flipped), (e) => e instanceof BundleError && /corrupt/.test(e.message));
    await assert.rejects(Embedder.load(bytes.slice(0, bytes.length - 4096)), (e) => e instanceof BundleError && /truncated/.test(e.message));
    const err = await Embedder.load(new TextEncoder().encode("x".repeat(5000))).catch((x) => x);
    assert.ok(err instanceof BundleError);
    assert.match(err.message, /not an edgembed bundle.*versions 2 through 2/);
    // an edited configuration value: the checksum covers the header too
    const text = new TextDecoder("latin1").decode(bytes.subarray(0, 4096));
    const at = text.indexOf('"n_heads":"12"');
    assert.ok(at > 0);
    const edited = bytes.slice();
    edited[at + 12] = "6".charCodeAt(0);
    await assert.rejects(Embedder.load(edited), (e) => e instanceof BundleError && /corrupt or was altered/.test(e.message));
    await assert.rejects(Embedder.load(new Uint8Array(0)), BundleError);
  });

  test("dispose frees the engine; later calls say so", async () => {
    const e = await Embedder.load(bytes, { build: "simd128" });
    e.dispose();
    e.dispose();
    assert.equal(e.disposed, true);
    await assert.rejects(e.embed(["x"]), EmbedderDisposed);
    assert.throws(() => e.dim, /disposed; load another/);
  });
});
