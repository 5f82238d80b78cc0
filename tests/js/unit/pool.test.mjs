// EmbedderPool: shared and copied weights give the Embedder's exact vectors; a crashed worker is
// replaced and its batch retried once, then rejected with WorkerCrashed; dispose rejects.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { BUNDLE, bitsEqual, pkg, reference } from "../helpers.mjs";

const { Embedder, EmbedderPool, EmbedderDisposed, InputTooLong, WorkerCrashed } = pkg;
const texts = reference.texts.slice(0, 48);

let expected;
before(async () => {
  const e = await Embedder.load(BUNDLE, { variant: "simd128" });
  expected = await e.embed(texts);
  e.dispose();
});

for (const sharedWeights of [true, false]) {
  describe(`EmbedderPool with ${sharedWeights ? "shared" : "copied"} weights`, () => {
    let pool;
    before(async () => {
      pool = await EmbedderPool.load(BUNDLE, { workers: 2, sharedWeights, build: "simd128" });
    });
    after(() => pool.dispose());

    test("runs the expected mode and build", () => {
      assert.equal(pool.size, 2);
      assert.equal(pool.mode, sharedWeights ? "shared" : "copy");
      assert.equal(pool.build, sharedWeights ? "threads" : "simd128");
      assert.equal(pool.variant, pool.build); // the old name
      assert.equal(pool.dim, 384);
    });

    test("vectors are bit-identical to the Embedder's, split across workers and concurrent", async () => {
      const [all, ...singles] = await Promise.all([pool.embed(texts), ...texts.slice(0, 6).map((t) => pool.embed([t]))]);
      assert.equal(all.length, texts.length);
      all.forEach((v, i) => assert.ok(bitsEqual(v, expected[i]), `text ${i}`));
      singles.forEach(([v], i) => assert.ok(bitsEqual(v, expected[i]), `single ${i}`));
    });

    test("counts tokens and reports engine errors as the Embedder does", async () => {
      assert.deepEqual(await pool.countTokens(texts.slice(8, 12)), reference.token_ids.slice(8, 12).map((t) => t.length));
      const long = reference.texts.find((x, i) => reference.token_ids[i].length === 256);
      await assert.rejects(pool.embed([long], { truncate: false }), InputTooLong);
      const [v] = await pool.embed([texts[3]]);
      assert.ok(bitsEqual(v, expected[3]), "the worker still works after an error");
    });
  });
}

describe("EmbedderPool crash recovery", () => {
  test("a worker that dies is replaced and its batch retried once", async () => {
    const pool = await EmbedderPool.load(BUNDLE, { workers: 2, crashText: "crash here", crashTimes: 1 });
    try {
      const [a, b] = await Promise.all([pool.embed(["crash here", texts[1]], { }), pool.embed([texts[2]])]);
      assert.equal(a.length, 2);
      assert.ok(bitsEqual(a[1], expected[1]));
      assert.ok(bitsEqual(b[0], expected[2]));
      const again = await pool.embed(texts.slice(0, 4));
      again.forEach((v, i) => assert.ok(bitsEqual(v, expected[i])));
    } finally {
      pool.dispose();
    }
  });

  test("a batch that kills two workers is rejected; other calls still succeed", async () => {
    const pool = await EmbedderPool.load(BUNDLE, { workers: 2, crashText: "poison" });
    try {
      const bad = pool.embed(["poison"]);
      const good = pool.embed([texts[5]]);
      await assert.rejects(bad, (e) => e instanceof WorkerCrashed && /died twice/.test(e.message));
      assert.ok(bitsEqual((await good)[0], expected[5]));
      assert.ok(bitsEqual((await pool.embed([texts[6]]))[0], expected[6]), "replacement workers serve");
    } finally {
      pool.dispose();
    }
  });

  test("workers that cannot start make load fail instead of respawning forever", async () => {
    const err = await EmbedderPool.load(BUNDLE, { workers: 1, workerUrl: new URL("./no-such-worker.js", import.meta.url) }).catch((e) => e);
    assert.ok(err instanceof WorkerCrashed, String(err));
    assert.match(err.message, /before they are ready/);
  });

  test("dispose rejects pending calls and later ones", async () => {
    const pool = await EmbedderPool.load(BUNDLE, { workers: 1 });
    const pending = pool.embed(texts);
    pool.dispose();
    await assert.rejects(pending, EmbedderDisposed);
    await assert.rejects(pool.embed(["x"]), EmbedderDisposed);
  });
});
