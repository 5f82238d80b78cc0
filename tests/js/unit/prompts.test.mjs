// The model's own choices in this host: prompts (promptName, the default prompt, embedQuery and
// embedDocument, against sentence-transformers' encode_query / encode_document), normalization as
// the model does, and the context sized for a model's max length. The tiny random-weight models
// of tests/fixtures/models/ (their bundles: build/js/, written by tests/fixtures/write_bundles.py;
// their sentence-transformers vectors: tests/fixtures/reference/tiny/, models/tiny/).
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { describe, test } from "node:test";
import { BUNDLE, ROOT, bitsEqual, cosine, crossHostCases, pkg, readJson } from "../helpers.mjs";

const { Embedder, EmbedderPool, InputError } = pkg;
const { cases } = crossHostCases();

function bundleOf(name) {
  const c = cases.find((x) => x.name === name);
  assert.ok(c, `${name} is not a cross-host case (tests/fixtures/write_bundles.py)`);
  return path.join(ROOT, c.bundle);
}

/** sentence-transformers' vectors of a tiny model: set name -> Float32Array rows. */
function referenceSets(name) {
  const ref = readJson(`tests/fixtures/reference/tiny/${name}.json`);
  const sets = {};
  for (const [key, entry] of Object.entries(ref.sets)) {
    const bytes = Buffer.from(entry.vectors, "base64");
    const flat = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
    sets[key] = Array.from({ length: entry.texts }, (_, i) => flat.subarray(i * ref.dim, (i + 1) * ref.dim));
  }
  return sets;
}

function minCosine(got, want) {
  return Math.min(...got.map((v, i) => cosine(v, want[i])));
}

const corpus = readJson("tests/fixtures/reference/corpus.json");
const readText = (rel) => fs.readFileSync(path.join(ROOT, rel), "utf8");
const XLMR = "xlm-roberta-mean-prompts";
// the model's own config_sentence_transformers.json: { query: "query: ", passage: "passage: " }
const st = readJson(`tests/fixtures/models/${XLMR}/config_sentence_transformers.json`);

describe("prompts", () => {
  test("embedQuery and embedDocument give sentence-transformers' encode_query / encode_document", async () => {
    const e = await Embedder.load(bundleOf(XLMR), { variant: "simd128", prompts: st.prompts });
    try {
      assert.deepEqual(e.prompts, { query: "query: ", passage: "passage: " });
      assert.equal(e.defaultPromptName, null);
      assert.equal(e.info.includePrompt, true);
      const sets = referenceSets(XLMR);
      const texts = corpus.slice(0, sets.query.length);
      const queries = await e.embedQuery(texts);
      const documents = await e.embedDocument(texts);
      // the int8 engine against fp32 sentence-transformers on random weights: min cosine measured
      // 0.9988 (query) and 0.9994 (document) on 64 texts
      assert.ok(minCosine(queries, sets.query) >= 0.99, `query: min cosine ${minCosine(queries, sets.query)}`);
      assert.ok(minCosine(documents, sets.document) >= 0.99, `document: min cosine ${minCosine(documents, sets.document)}`);
      // and the prompt matters: without it the vectors are sentence-transformers' plain ones
      const plain = await e.embed(texts);
      assert.ok(minCosine(plain, sets.default.slice(0, texts.length)) >= 0.99);
      assert.ok(minCosine(queries, sets.default.slice(0, texts.length)) < 0.99, "the query prompt changes the vectors");

      // a prompt that is pooled with the text is the text with the prompt before it
      const byName = await e.embed(texts.slice(0, 8), { promptName: "passage" });
      const manual = await e.embed(texts.slice(0, 8).map((t) => "passage: " + t));
      byName.forEach((v, i) => assert.ok(bitsEqual(v, documents[i]) && bitsEqual(v, manual[i]), `text ${i}`));
      assert.equal(e.prompt({ promptName: "query" }), "query: ");
      assert.deepEqual(e.countTokens(["hello"], { promptName: "query" }), e.countTokens(["query: hello"]));
      assert.deepEqual(Array.from(e.tokenize("hello", { promptName: "query" })[0]), Array.from(e.tokenize("query: hello")[0]));

      await assert.rejects(e.embed("x", { promptName: "document" }), (err) => err instanceof InputError && /its prompts: query, passage/.test(err.message));
      await assert.rejects(e.embed("x", { promptName: "query", prefix: "q: " }), (err) => err instanceof InputError && /not both/.test(err.message));
    } finally {
      e.dispose();
    }
  });

  test("the default prompt applies when a call names none; prefix \"\" asks for none", async () => {
    const e = await Embedder.load(bundleOf(XLMR), { variant: "simd128", prompts: st.prompts, defaultPromptName: "query" });
    try {
      const texts = corpus.slice(10, 14);
      const [byDefault, query, none, manual] = await Promise.all([
        e.embed(texts), e.embedQuery(texts), e.embed(texts, { prefix: "" }), e.embed(texts.map((t) => "query: " + t), { prefix: "" }),
      ]);
      byDefault.forEach((v, i) => assert.ok(bitsEqual(v, query[i]) && bitsEqual(v, manual[i])));
      assert.ok(!bitsEqual(none[0], query[0]));
      assert.equal(e.prompt(), "query: ");
      assert.equal(e.prompt({ prefix: "" }), "");
      // embedDocument uses its own prompt, not the default
      const docs = await e.embedDocument(texts);
      const passages = await e.embed(texts, { promptName: "passage" });
      docs.forEach((v, i) => assert.ok(bitsEqual(v, passages[i])));
    } finally {
      e.dispose();
    }
  });

  test("a model that pools without its prompt leaves the prompt's tokens out, as sentence-transformers", async () => {
    const name = "bert-prompts-mean-noprompt";
    const own = readJson(`tests/fixtures/models/${name}/config_sentence_transformers.json`);
    const e = await Embedder.load(bundleOf(name), { variant: "simd128", prompts: own.prompts });
    try {
      assert.equal(e.info.includePrompt, false);
      const sets = referenceSets(name);
      const texts = corpus.slice(0, sets.query.length);
      const queries = await e.embedQuery(texts);
      const documents = await e.embedDocument(texts);
      // measured: min cosine 0.99972 (query) and 0.99969 (document) on 64 texts
      assert.ok(minCosine(queries, sets.query) >= 0.999, `query: min cosine ${minCosine(queries, sets.query)}`);
      assert.ok(minCosine(documents, sets.document) >= 0.999, `document: min cosine ${minCosine(documents, sets.document)}`);
      // the same text with the prompt's tokens pooled is another vector (measured min 0.907)
      const pooledWithPrompt = await e.embed(texts.map((t) => "query: " + t), { prefix: "" });
      assert.ok(minCosine(pooledWithPrompt, sets.query) < 0.99);
      const pool = await EmbedderPool.load(bundleOf(name), { workers: 2, prompts: own.prompts });
      try {
        const fromPool = await pool.embedQuery(texts.slice(0, 8));
        fromPool.forEach((v, i) => assert.ok(bitsEqual(v, queries[i]), `pool text ${i}`));
      } finally {
        pool.dispose();
      }
    } finally {
      e.dispose();
    }
  });

  test("the model's default prompt applies as in sentence-transformers' encode", async () => {
    const name = "bert-prompts-cls-mean-default"; // default_prompt_name "query"; CLS and mean concatenated
    const own = readJson(`tests/fixtures/models/${name}/config_sentence_transformers.json`);
    assert.equal(own.default_prompt_name, "query");
    const e = await Embedder.load(bundleOf(name), { variant: "simd128", prompts: own.prompts, defaultPromptName: own.default_prompt_name });
    try {
      const texts = corpus.slice(0, 64);
      const want = referenceSets(name).default.slice(0, texts.length); // encode(): the default prompt
      const got = await e.embed(texts);
      assert.equal(got[0].length, 64);
      // measured: min cosine 0.99947
      assert.ok(minCosine(got, want) >= 0.999, `min cosine ${minCosine(got, want)}`);
      const without = await e.embed(texts, { prefix: "" });
      assert.ok(minCosine(without, want) < minCosine(got, want), "without the prompt the vectors move away");
    } finally {
      e.dispose();
    }
  });

  test("bad prompts are refused at load, before the bundle is read", async () => {
    await assert.rejects(Embedder.load(BUNDLE, { prompts: { query: 3 } }), (err) => err instanceof InputError && /prompts.query is number/.test(err.message));
    await assert.rejects(Embedder.load(BUNDLE, { prompts: ["query: "] }), InputError);
    await assert.rejects(Embedder.load(BUNDLE, { prompts: { q: "q: " }, defaultPromptName: "query" }), (err) => err instanceof InputError && /not one of the prompts \(q\)/.test(err.message));
    await assert.rejects(EmbedderPool.load(BUNDLE, { prompts: { q: 1 } }), InputError);
  });

  test("a model without prompts: embedQuery is embed", async () => {
    const e = await Embedder.load(BUNDLE, { variant: "simd128" });
    try {
      const texts = corpus.slice(20, 24);
      const [a, b] = await Promise.all([e.embedQuery(texts), e.embed(texts)]);
      a.forEach((v, i) => assert.ok(bitsEqual(v, b[i])));
      await assert.rejects(e.embed("x", { promptName: "query" }), (err) => err instanceof InputError && /its prompts: none given\); pass prompts to load/.test(err.message));
    } finally {
      e.dispose();
    }
  });
});

describe("docs/js.md", () => {
  test("the prompts example runs as written (the tiny XLM-R bundle for multilingual-e5-small's)", async () => {
    const doc = readText("docs/js.md");
    const block = doc.match(/```js\n(const e5 = await Embedder\.load\("multilingual-e5-small\.emb"[\s\S]*?)```/);
    assert.ok(block, "docs/js.md has the e5 prompts example");
    const code = block[1].replace('"multilingual-e5-small.emb"', "bundle");
    const AsyncFunction = (async () => {}).constructor;
    const run = new AsyncFunction("Embedder", "bundle", `${code}\nreturn { e5, q, docs, same, plain };`);
    const { e5, q, docs, same, plain } = await run(Embedder, bundleOf(XLMR));
    try {
      const text = "how are rerankers trained?";
      assert.ok(bitsEqual(q, same), "embedQuery and promptName: \"query\" give the same bits");
      assert.ok(bitsEqual(q, (await e5.embed("query: " + text, { prefix: "" }))[0]));
      assert.ok(bitsEqual(docs[0], (await e5.embed("passage: Cross-encoders read both texts at once."))[0]));
      assert.ok(bitsEqual(plain, (await e5.embed(text, { prefix: "" }))[0]));
      assert.ok(!bitsEqual(plain, q), "the prompt changes the vector");
      assert.equal(e5.prompt({ promptName: "document" }), "passage: ");
    } finally {
      e5.dispose();
    }
  });
});

describe("the model's own choices", () => {
  test("vectors are normalized as the model does: a model without a Normalize module is not", async () => {
    const name = "bert-h40-cls-gelu-new";
    const e = await Embedder.load(bundleOf(name), { variant: "simd128" });
    try {
      assert.equal(e.info.normalize, false);
      assert.equal(e.info.pooling, "cls");
      const texts = corpus.slice(0, 32);
      const byDefault = await e.embed(texts);
      const raw = await e.embed(texts, { normalize: false });
      byDefault.forEach((v, i) => assert.ok(bitsEqual(v, raw[i]), `text ${i} is as the model gives it`));
      assert.ok(byDefault.some((v) => Math.abs(Math.hypot(...v) - 1) > 0.01));
      const unit = await e.embed(texts, { normalize: true });
      unit.forEach((v) => assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-5));
      // sentence-transformers' vectors, unnormalized as well (measured: min cosine 0.9982, norms
      // within 1 % of theirs)
      const want = referenceSets(name).default.slice(0, texts.length);
      assert.ok(minCosine(byDefault, want) >= 0.99, `min cosine ${minCosine(byDefault, want)}`);
      byDefault.forEach((v, i) => {
        const ratio = Math.hypot(...v) / Math.hypot(...want[i]);
        assert.ok(Math.abs(ratio - 1) < 0.05, `text ${i}: norm ${ratio} of sentence-transformers'`);
      });
    } finally {
      e.dispose();
    }
  });

  test("another pooling than the model's gives its own width (CLS and mean concatenated: each half)", async () => {
    const e = await Embedder.load(bundleOf("bert-prompts-cls-mean-default"), { variant: "simd128" });
    try {
      assert.equal(e.dim, 64);
      const texts = corpus.slice(30, 36);
      const both = await e.embed(texts, { normalize: false, prefix: "" });
      const cls = await e.embed(texts, { normalize: false, prefix: "", pooling: "cls" });
      const mean = await e.embed(texts, { normalize: false, prefix: "", pooling: "mean" });
      texts.forEach((_, i) => {
        assert.equal(cls[i].length, 32);
        assert.ok(bitsEqual(cls[i], both[i].subarray(0, 32)), `text ${i}: CLS is the first half`);
        assert.ok(bitsEqual(mean[i], both[i].subarray(32)), `text ${i}: mean is the second half`);
      });
      await assert.rejects(e.embed(texts, { pooling: "mean", dimensions: 48 }), (err) => err instanceof InputError && /more than the 32 values/.test(err.message));
    } finally {
      e.dispose();
    }
  });

  test("the engine's context takes the model's max length (ModernBERT: 8192 tokens) by default", async () => {
    const e = await Embedder.load(bundleOf("modernbert-mean"), { variant: "simd128" });
    try {
      assert.equal(e.maxLength, 8192);
      const long = corpus.slice(0, 90).join(" ");
      assert.ok(e.countTokens([long])[0] > 2048);
      const [v] = await e.embed([long]);
      assert.equal(v.length, e.dim);
    } finally {
      e.dispose();
    }
    await assert.rejects(Embedder.load(bundleOf("modernbert-mean"), { maxTokens: 2048 }), (err) => err instanceof InputError && /at least the model's max length \(8192\)/.test(err.message));
  });
});
