// Shared by the JS test files: paths, fixtures and small numeric helpers. Runs unchanged in
// Node, Deno and Bun (node:fs and node:path exist in all three).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { packVectors } from "./vector_bytes.mjs";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");

/** The package under test: js/dist by default, or an installed copy (EDGEMBED_JS_ENTRY). */
export const ENTRY = process.env.EDGEMBED_JS_ENTRY
  ? pathToFileURL(path.resolve(process.env.EDGEMBED_JS_ENTRY)).href
  : pathToFileURL(path.join(ROOT, "js/dist/index.js")).href;

export const pkg = await import(ENTRY);

/** The bundle of all-minilm-l6-v2 written by js/test.sh (`write_bundle` of the Python exporter). */
export const BUNDLE = process.env.EDGEMBED_TEST_BUNDLE ?? path.join(ROOT, "build/js/all-minilm-l6-v2.emb");

export const VECTORS_DIR = process.env.EDGEMBED_VECTORS_DIR ?? path.join(ROOT, "build/js/vectors");

/**
 * build/js/cross_host.json (tests/fixtures/write_bundles.py): all-minilm-l6-v2 and every tiny
 * model, the short text list every host embeds with each, and the models with a head, for the
 * cross-runtime check.
 */
export function crossHostCases() {
  const file = path.join(ROOT, "build/js/cross_host.json");
  if (!fs.existsSync(file)) throw new Error(`${file} is missing: js/test.sh writes it (tests/fixtures/write_bundles.py)`);
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

export function readJson(rel) {
  return JSON.parse(fs.readFileSync(path.join(ROOT, rel), "utf8"));
}

/** tests/fixtures/reference/all-minilm-l6-v2.json: texts, token ids, sentence-transformers vectors. */
export const reference = readJson("tests/fixtures/reference/all-minilm-l6-v2.json");

export function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

export { packVectors };

/** Host name for vector files: node20, node22, deno, bun, chromium, workerd. */
export function hostLabel() {
  const env = pkg.env;
  return env.runtime === "node" ? `node${env.version.split(".")[0]}` : env.runtime;
}

export function writeVectors(name, vectors) {
  fs.mkdirSync(VECTORS_DIR, { recursive: true });
  fs.writeFileSync(path.join(VECTORS_DIR, name), packVectors(vectors));
}

export function bitsEqual(a, b) {
  if (a.length !== b.length) return false;
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return false;
  return true;
}
