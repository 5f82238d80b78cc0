// Loading bundles over HTTP from a server on 127.0.0.1: progress, sha256 integrity, the file
// cache, and clear errors for 404, truncated downloads and checksum mismatches.
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { BUNDLE, pkg } from "../helpers.mjs";

const { Embedder, loadBytes, sha256Hex, ChecksumMismatch, DownloadError, ModelNotFound } = pkg;

const payload = new Uint8Array(300_000).map((_, i) => (i * 7919) % 251);
const bundle = new Uint8Array(fs.readFileSync(BUNDLE));
const hits = new Map();
let server;
let base;
let cacheDir;

before(async () => {
  cacheDir = fs.mkdtempSync(path.join(os.tmpdir(), "edgembed-cache-"));
  server = http.createServer((req, res) => {
    hits.set(req.url, (hits.get(req.url) ?? 0) + 1);
    if (req.url === "/payload.bin" || req.url === "/payload2.bin") {
      res.writeHead(200, { "content-length": payload.length, "content-type": "application/octet-stream" });
      // in pieces a few milliseconds apart, so that every runtime's fetch sees more than one
      // chunk and progress is reported more than once (written at once, Bun may coalesce them)
      const pieces = [];
      for (let i = 0; i < payload.length; i += 65536) pieces.push(payload.subarray(i, i + 65536));
      const next = () => {
        const piece = pieces.shift();
        if (piece === undefined) res.end();
        else res.write(piece, () => setTimeout(next, 5));
      };
      next();
    } else if (req.url === "/model.emb") {
      res.writeHead(200, { "content-length": bundle.length });
      res.end(bundle);
    } else if (req.url === "/truncated.bin") {
      res.writeHead(200, { "content-length": payload.length });
      res.write(payload.subarray(0, 100_000), () => res.socket.destroy());
    } else if (req.url === "/error.bin") {
      res.writeHead(503);
      res.end("busy");
    } else {
      res.writeHead(404);
      res.end("no such file");
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  base = `http://127.0.0.1:${server.address().port}`;
});

after(async () => {
  await new Promise((resolve) => server.close(resolve));
  fs.rmSync(cacheDir, { recursive: true, force: true });
});

describe("loadBytes over HTTP", () => {
  test("downloads with progress and verifies sha256", async () => {
    const events = [];
    const sha = await sha256Hex(payload);
    const got = await loadBytes(`${base}/payload.bin`, { integrity: sha, cache: false, onProgress: (p) => events.push(p) });
    assert.deepEqual(got, payload);
    assert.ok(events.length >= 2, `${events.length} progress events`);
    assert.deepEqual(events.at(-1), { loaded: payload.length, total: payload.length, source: `${base}/payload.bin`, cached: false });
    for (let i = 1; i < events.length; i++) assert.ok(events[i].loaded >= events[i - 1].loaded);
  });

  test("caches in a directory and serves the second load from it", async () => {
    const opts = { cache: cacheDir };
    const first = await loadBytes(`${base}/payload2.bin`, opts);
    const events = [];
    const second = await loadBytes(`${base}/payload2.bin`, { ...opts, onProgress: (p) => events.push(p) });
    assert.deepEqual(second, first);
    assert.equal(hits.get("/payload2.bin"), 1);
    assert.equal(events.length, 1);
    assert.equal(events[0].cached, true);
    assert.equal(fs.readdirSync(cacheDir).filter((f) => f.endsWith(".emb")).length, 1);
    // an expected checksum the cached file does not have sends the load back to the server
    await assert.rejects(loadBytes(`${base}/payload2.bin`, { ...opts, integrity: "1".repeat(64) }), ChecksumMismatch);
    assert.equal(hits.get("/payload2.bin"), 2);
  });

  test("a 404 is ModelNotFound, another HTTP error a DownloadError with its status", async () => {
    await assert.rejects(loadBytes(`${base}/missing.emb`, { cache: false }), (e) => e instanceof ModelNotFound && /HTTP 404/.test(e.message));
    const err = await loadBytes(`${base}/error.bin`, { cache: false }).catch((e) => e);
    assert.ok(err instanceof DownloadError);
    assert.equal(err.status, 503);
  });

  test("a download cut short is a DownloadError marked truncated", async () => {
    const err = await loadBytes(`${base}/truncated.bin`, { cache: false }).catch((e) => e);
    assert.ok(err instanceof DownloadError, String(err));
    assert.equal(err.truncated, true);
    assert.match(err.message, /cut off after \d+ of 300000 bytes/);
  });

  test("a checksum mismatch names both digests", async () => {
    const err = await loadBytes(`${base}/payload.bin`, { integrity: "f".repeat(64), cache: false }).catch((e) => e);
    assert.ok(err instanceof ChecksumMismatch);
    assert.equal(err.expected, "f".repeat(64));
    assert.equal(err.actual, await sha256Hex(payload));
  });

  test("a refused connection is a DownloadError", async () => {
    const closed = http.createServer();
    await new Promise((r) => closed.listen(0, "127.0.0.1", r));
    const port = closed.address().port;
    await new Promise((r) => closed.close(r));
    await assert.rejects(loadBytes(`http://127.0.0.1:${port}/x.emb`, { cache: false }), DownloadError);
  });

  test("Embedder.load from a URL with integrity, cached on disk", async () => {
    const sha = await sha256Hex(bundle);
    const e = await Embedder.load(`${base}/model.emb`, { integrity: `sha256-${btoa(String.fromCharCode(...sha.match(/../g).map((h) => parseInt(h, 16))))}`, cache: cacheDir });
    const again = await Embedder.load(`${base}/model.emb`, { integrity: sha, cache: cacheDir });
    try {
      assert.equal(hits.get("/model.emb"), 1);
      const [a] = await e.embed(["from the network"]);
      const [b] = await again.embed(["from the network"]);
      assert.deepEqual(a, b);
    } finally {
      e.dispose();
      again.dispose();
    }
  });
});
