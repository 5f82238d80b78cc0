// AdaptiveBatcher: the same decisions as the Python batcher on the stored traces
// (tests/fixtures/batching/, written by make_traces.py), then the live batcher on this host's
// clock with a scripted target and with the real engine.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { describe, test } from "node:test";
import { BUNDLE, ROOT, bitsEqual, pkg, reference } from "../helpers.mjs";

const { AdaptiveBatcher, Embedder, EmbedderPool, BatcherClosed, DeadlineExceeded, InputError, Overloaded } = pkg;
const { replayFixture } = await import(pathToFileURL(path.join(ROOT, "js/dist/batching/simulator.js")).href);

const FIXTURES = path.join(ROOT, "tests/fixtures/batching");
const traces = fs.readdirSync(FIXTURES).filter((f) => /^trace_.*\.json$/.test(f)).sort();

describe("decisions on the stored traces equal the Python batcher's", () => {
  test("there are trace fixtures", () => assert.ok(traces.length >= 4, traces.join(", ")));
  for (const file of traces) {
    test(file, () => {
      const doc = JSON.parse(fs.readFileSync(path.join(FIXTURES, file), "utf8"));
      const got = replayFixture(doc);
      const want = doc.expected;
      const n = Math.min(got.log.length, want.log.length);
      for (let i = 0; i < n; i++) assert.deepStrictEqual(got.log[i], want.log[i], `decision ${i} differs`);
      assert.equal(got.log.length, want.log.length);
      assert.deepStrictEqual(got.outcomes, want.outcomes);
      assert.deepStrictEqual(got.final, want.final);
    });
  }
  test("a fixture of another format version is refused", () => {
    assert.throws(() => replayFixture({ format: "edgembed-batching-trace", version: 99 }), /make_traces\.py/);
  });
});

/** A target that records its batches and returns [request marker, text index] per text. */
function scripted(delayMs = 5, fail = () => false) {
  const calls = [];
  const fn = async (texts) => {
    calls.push(texts.slice());
    await new Promise((r) => setTimeout(r, delayMs));
    if (texts.some(fail)) throw new Error("the target refused a text");
    return texts.map((t) => Float32Array.of(Number(t.split(":")[0]), Number(t.split(":")[1] ?? 0)));
  };
  return { fn, calls };
}

describe("AdaptiveBatcher on the live clock", () => {
  test("groups concurrent requests and gives each exactly its own vectors", async () => {
    const { fn, calls } = scripted(10);
    const b = new AdaptiveBatcher(fn, { latencyTargetMs: 200, costPrior: { fixedMs: 10, msPerKtoken: 1 } });
    const singles = Array.from({ length: 30 }, (_, i) => b.embed(`${i}:0`));
    const multi = b.embed(["100:0", "100:1", "100:2"]);
    const got = await Promise.all(singles);
    got.forEach((v, i) => {
      assert.ok(v instanceof Float32Array);
      assert.deepEqual(Array.from(v), [i, 0]);
    });
    assert.deepEqual((await multi).map((v) => Array.from(v)), [[100, 0], [100, 1], [100, 2]]);
    assert.ok(calls.length < 31, `${calls.length} batches for 31 requests`);
    const s = b.stats();
    assert.equal(s.completed, 31);
    assert.equal(s.submitted, 31);
    assert.equal(s.batches, calls.length);
    assert.ok(s.meanBatchSize > 1);
    await b.close();
    assert.equal(b.closed, true);
    await assert.rejects(b.embed("1:0"), BatcherClosed);
  });

  test("refuses work it cannot do in time: a full queue, a deadline out of reach", async () => {
    const { fn } = scripted(40);
    const b = new AdaptiveBatcher(fn, { maxQueue: 2, maxBatchTokens: 8, latencyTargetMs: 1000 });
    const results = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => b.embed(`${i}:0`)));
    const refused = results.filter((r) => r.status === "rejected");
    assert.ok(refused.length > 0, "some requests are refused");
    for (const r of refused) {
      assert.ok(r.reason instanceof Overloaded, String(r.reason));
      assert.ok(r.reason.retryAfterMs > 0);
    }
    assert.ok(results.filter((r) => r.status === "fulfilled").length >= 2);
    const slow = new AdaptiveBatcher(fn, { costPrior: { fixedMs: 100 } });
    await assert.rejects(slow.embed("1:0", { deadlineMs: 5 }), DeadlineExceeded);
    await assert.rejects(slow.embed("1:0", { deadlineMs: -1 }), InputError);
    await assert.rejects(slow.embed("1:0", { priority: "urgent" }), InputError);
    await b.close();
    await slow.close();
  });

  test("an aborted request leaves the queue; close without drain fails what waits", async () => {
    const { fn, calls } = scripted(30);
    const b = new AdaptiveBatcher(fn, { maxBatchTokens: 4, latencyTargetMs: 1000 });
    const first = b.embed("1:0");
    const ctl = new AbortController();
    const aborted = b.embed("2:0", { signal: ctl.signal });
    await new Promise((r) => setTimeout(r, 2)); // queued behind the first, which runs for 30 ms
    ctl.abort();
    await assert.rejects(aborted, { name: "AbortError" });
    const waiting = b.embed("3:0");
    await new Promise((r) => setTimeout(r, 2));
    const closing = b.close({ drain: false });
    await assert.rejects(waiting, BatcherClosed);
    assert.deepEqual(Array.from(await first), [1, 0]);
    await closing;
    assert.ok(!calls.flat().includes("2:0") && !calls.flat().includes("3:0"));
    const st = b.stats();
    assert.equal(st.cancelled, 1);
    assert.equal(st.closed, 1);
  });

  test("a failing batch is retried request by request, so only the bad request fails", async () => {
    const { fn } = scripted(5, (t) => t === "13:0");
    const b = new AdaptiveBatcher(fn, { latencyTargetMs: 500, costPrior: { fixedMs: 10 } });
    const all = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => b.embed(`${i}:0`)));
    all.forEach((r, i) => {
      if (i === 13) assert.equal(r.status, "rejected");
      else assert.deepEqual(Array.from(r.value), [i, 0]);
    });
    assert.equal(b.stats().failed, 1);
    await b.close();
  });
});

describe("AdaptiveBatcher with the engine", () => {
  const texts = reference.texts.slice(20, 60);

  test("vectors through the batcher are bit-identical to direct calls (Embedder and pool)", async () => {
    const e = await Embedder.load(BUNDLE, { variant: "simd128" });
    const direct = await e.embed(texts);
    const b = new AdaptiveBatcher(e, { latencyTargetMs: 100, shed: false });
    const viaBatcher = await Promise.all(texts.map((t) => b.embed(t)));
    viaBatcher.forEach((v, i) => assert.ok(bitsEqual(v, direct[i]), `text ${i}`));
    assert.ok(b.stats().costModel.observations >= 1);
    await b.close();

    const pool = await EmbedderPool.load(BUNDLE, { workers: 2 });
    try {
      const pb = new AdaptiveBatcher(pool, { latencyTargetMs: 100, shed: false });
      assert.equal(pb.config.workers, 2);
      const viaPool = await Promise.all(texts.map((t) => pb.embed([t])));
      viaPool.forEach(([v], i) => assert.ok(bitsEqual(v, direct[i]), `text ${i} via pool`));
      await pb.close();
    } finally {
      pool.dispose();
      e.dispose();
    }
  });
});
