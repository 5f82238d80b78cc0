// Every cross-host bundle (build/js/cross_host.json: all-minilm-l6-v2 and each tiny model),
// embedded in this host with the SIMD128 build: writes
// build/js/vectors/<host>.<case>.{raw,normalized}.f32 for the bit-identity check of
// tests/js/cross_runtime.test.mjs, after checking what every host must agree on by itself.
import assert from "node:assert/strict";
import path from "node:path";
import { describe, test } from "node:test";
import { BUNDLE, ROOT, bitsEqual, crossHostCases, hostLabel, pkg, writeVectors } from "../helpers.mjs";

const { Embedder } = pkg;
const { texts, cases } = crossHostCases();

describe("every architecture's bundle in this host", () => {
  test("the manifest names the bundles and the texts", () => {
    assert.ok(cases.length >= 1 && texts.length >= 10);
    assert.ok(cases.some((c) => path.join(ROOT, c.bundle) === BUNDLE), "all-minilm-l6-v2 is a case");
  });

  for (const c of cases) {
    test(c.name, async () => {
      const e = await Embedder.load(path.join(ROOT, c.bundle), { variant: "simd128" });
      try {
        assert.equal(e.name, c.name);
        const raw = await e.embed(texts, { normalize: false });
        const normalized = await e.embed(texts, { normalize: true });
        assert.equal(raw.length, texts.length);
        raw.forEach((v) => assert.equal(v.length, e.dim));
        // a text's vector is the same alone as among the others
        const [alone] = await e.embed([texts[3]], { normalize: false });
        assert.ok(bitsEqual(alone, raw[3]), "batch-invariant");
        writeVectors(`${hostLabel()}.${c.name}.raw.f32`, raw);
        writeVectors(`${hostLabel()}.${c.name}.normalized.f32`, normalized);
      } finally {
        e.dispose();
      }
    });
  }
});
