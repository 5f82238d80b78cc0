// env: the host is detected once, as a frozen object that says what the host can do.
import assert from "node:assert/strict";
import { test } from "node:test";
import { pkg } from "../helpers.mjs";

const { env } = pkg;

test("env is frozen and names this host", () => {
  assert.ok(Object.isFrozen(env));
  assert.throws(() => {
    "use strict";
    env.runtime = "browser";
  }, TypeError);
  const expected = globalThis.Deno ? "deno" : globalThis.Bun ? "bun" : "node";
  assert.equal(env.runtime, expected);
  assert.equal(env.fileSystem, true);
  assert.equal(env.compileWasm, true);
  assert.equal(env.sharedMemory, true);
  assert.equal(env.threads, expected === "node" ? "worker_threads" : "web");
  assert.ok(env.cores >= 1);
  assert.match(env.version, /^\d+\.\d+/);
  assert.equal(env.arch, { x64: "x64", arm64: "arm64" }[process.arch] ?? process.arch);
});

test("the public API is listed by name", () => {
  const names = Object.keys(pkg).sort();
  assert.deepEqual(names, [
    "AdaptiveBatcher", "BackendUnavailable", "BatcherClosed", "BatcherError", "BundleError", "ChecksumMismatch",
    "DeadlineExceeded", "DownloadError", "EdgembedError", "Embedder", "EmbedderDisposed", "EmbedderPool", "EngineError",
    "InputError", "InputTooLong", "ModelError", "ModelNotFound", "Overloaded", "Reranker", "WASM_FILES", "WorkerCrashed",
    "env", "estimateTokens", "loadBytes", "provideModules", "sha256Hex", "sparseDot",
  ]);
  assert.ok(new pkg.ModelNotFound("x") instanceof pkg.ModelError);
  assert.ok(new pkg.Overloaded("x", 5) instanceof pkg.BatcherError);
  assert.ok(new pkg.InputTooLong("x") instanceof pkg.EdgembedError);
  assert.equal(new pkg.DeadlineExceeded("x").name, "DeadlineExceeded");
});
