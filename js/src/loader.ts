/**
 * Getting a bundle's bytes: from a URL (with progress, an sha256 integrity check and a cache),
 * a local file (Node, Deno, Bun) or bytes the caller already has.
 *
 * Cache: in browsers the Cache API (one entry per URL); in Node, Deno and Bun a directory of files
 * (see host.ts's defaultCacheDir), written atomically. Cloudflare Workers do not cache (their
 * Cache API is per data centre; keep bundles in a binding such as R2 or a data module instead).
 */
import { env } from "./env.js";
import { ChecksumMismatch, DownloadError, InputError, ModelNotFound } from "./errors.js";
import { defaultCacheDir, fsPromises, isLocalPath, joinPath, processId, readFileBytes, toPath } from "./host.js";

/** Where a bundle comes from: a URL (string or URL), a local path, or its bytes. */
export type BundleSource = string | URL | ArrayBuffer | ArrayBufferView;

export interface LoadProgress {
  /** Bytes received so far. */
  readonly loaded: number;
  /** Bytes expected, when the server said (Content-Length), else null. */
  readonly total: number | null;
  /** The URL or path being read. */
  readonly source: string;
  /** True when the bytes come from the cache. */
  readonly cached: boolean;
}

export interface LoadOptions {
  /** Expected sha256 of the bundle: 64 hex digits, or a subresource-integrity string "sha256-<base64>". */
  integrity?: string;
  /** Called as bytes arrive (and once at the end). */
  onProgress?: (progress: LoadProgress) => void;
  /**
   * Cache downloaded bundles: true (default), false, or a location — a directory in Node, Deno
   * and Bun, a Cache API cache name in browsers.
   */
  cache?: boolean | string;
  /** The fetch to use (default: the global fetch). */
  fetch?: typeof fetch;
  signal?: AbortSignal;
}

const CACHE_NAME = "edgembed-bundles-v1";

function hex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

/** The sha256 of `bytes` as 64 lower-case hex digits (WebCrypto). */
export async function sha256Hex(bytes: Uint8Array): Promise<string> {
  // WebCrypto refuses views on SharedArrayBuffer: hash a copy then.
  const data = bytes.buffer instanceof ArrayBuffer ? bytes : bytes.slice();
  const digest = await crypto.subtle.digest("SHA-256", data as Uint8Array<ArrayBuffer>);
  return hex(new Uint8Array(digest));
}

/** Normalizes an integrity option to 64 lower-case hex digits. */
export function parseIntegrity(integrity: string): string {
  const s = integrity.trim();
  if (/^[0-9a-fA-F]{64}$/.test(s)) return s.toLowerCase();
  const m = /^sha256-([A-Za-z0-9+/]{43}=)$/.exec(s);
  if (m) {
    const bin = atob(m[1]);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return hex(out);
  }
  throw new InputError(`integrity must be 64 hex digits or "sha256-<base64>", got ${JSON.stringify(integrity)}`);
}

async function verify(bytes: Uint8Array, expected: string | undefined, source: string): Promise<void> {
  if (expected === undefined) return;
  const actual = await sha256Hex(bytes);
  if (actual !== expected) {
    throw new ChecksumMismatch(
      `${source}: sha256 is ${actual} but ${expected} was expected; the file is corrupt or another version ` +
        `(download it again, or update the expected checksum if the bundle was rebuilt)`,
      expected,
      actual,
    );
  }
}

function asBytes(source: ArrayBuffer | ArrayBufferView): Uint8Array {
  if (source instanceof Uint8Array) return source;
  if (ArrayBuffer.isView(source)) return new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
  return new Uint8Array(source);
}

/** Reads a bundle from any source; see LoadOptions. */
export async function loadBytes(source: BundleSource, options: LoadOptions = {}): Promise<Uint8Array> {
  const expected = options.integrity === undefined ? undefined : parseIntegrity(options.integrity);
  if (typeof source !== "string" && !(source instanceof URL)) {
    const bytes = asBytes(source);
    await verify(bytes, expected, "the bundle bytes");
    return bytes;
  }
  const text = source instanceof URL ? source.href : source;
  if (env.fileSystem && (source instanceof URL ? source.protocol === "file:" : isLocalPath(text) || text.startsWith("file:"))) {
    const bytes = await readLocal(text);
    options.onProgress?.({ loaded: bytes.length, total: bytes.length, source: text, cached: false });
    await verify(bytes, expected, text);
    return bytes;
  }
  // Without a file system a string without a scheme is a URL relative to the page (browsers).
  const page = (globalThis as { location?: { href: string } }).location?.href;
  if (isLocalPath(text) && page === undefined) {
    throw new InputError(
      `${JSON.stringify(text)} is a path, but this ${env.runtime} host has no file system: pass a full URL or the bundle's bytes`,
    );
  }
  const url = new URL(text, page);
  const cacheable = options.cache !== false && (url.protocol === "http:" || url.protocol === "https:");
  if (cacheable) {
    const hit = await cacheGet(url.href, options.cache, expected);
    if (hit) {
      options.onProgress?.({ loaded: hit.length, total: hit.length, source: url.href, cached: true });
      return hit;
    }
  }
  const bytes = await download(url, options);
  await verify(bytes, expected, url.href);
  if (cacheable) await cachePut(url.href, options.cache, bytes).catch(() => undefined);
  return bytes;
}

async function readLocal(pathOrUrl: string): Promise<Uint8Array> {
  const path = toPath(pathOrUrl);
  try {
    return await readFileBytes(path);
  } catch (e) {
    const code = (e as { code?: string }).code;
    if (code === "ENOENT" || (e as Error).name === "NotFound") {
      throw new ModelNotFound(`no bundle file at ${path}: check the path, or write one with \`embed bundle MODEL\``, { cause: e });
    }
    throw new DownloadError(`cannot read ${path}: ${(e as Error).message}`, { cause: e });
  }
}

async function download(url: URL, options: LoadOptions): Promise<Uint8Array> {
  const fetchFn = options.fetch ?? globalThis.fetch;
  let res: Response;
  try {
    res = await fetchFn(url.href, { signal: options.signal });
  } catch (e) {
    throw new DownloadError(`cannot fetch ${url.href}: ${(e as Error).message}; check the URL and the network`, { cause: e });
  }
  if (res.status === 404 || res.status === 410) {
    throw new ModelNotFound(`no bundle at ${url.href} (HTTP ${res.status}): check the URL, or publish the bundle there`);
  }
  if (!res.ok) {
    throw new DownloadError(`downloading ${url.href} failed: HTTP ${res.status} ${res.statusText}`.trim(), { status: res.status });
  }
  // With a content encoding, Content-Length counts the compressed bytes: no exact total then.
  const length = res.headers.get("content-length");
  const encoded = (res.headers.get("content-encoding") ?? "identity") !== "identity";
  const total = length !== null && !encoded && /^\d+$/.test(length) ? Number(length) : null;
  const report = (loaded: number): void =>
    options.onProgress?.({ loaded, total, source: url.href, cached: false });
  const truncated = (loaded: number, cause?: unknown): DownloadError =>
    new DownloadError(
      `download of ${url.href} was cut off after ${loaded} of ${total ?? "?"} bytes; try again (a proxy or server may limit the size)`,
      { status: res.status, truncated: true, cause },
    );

  const chunks: Uint8Array[] = [];
  let loaded = 0;
  let into: Uint8Array | null = total !== null ? new Uint8Array(total) : null;
  if (res.body === null) {
    const all = new Uint8Array(await res.arrayBuffer());
    chunks.push(all);
    loaded = all.length;
  } else {
    const reader = res.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (into !== null && loaded + value.length <= into.length) into.set(value, loaded);
        else {
          if (into !== null) {
            chunks.push(into.subarray(0, loaded));
            into = null;
          }
          chunks.push(value);
        }
        loaded += value.length;
        report(loaded);
      }
    } catch (e) {
      if ((e as Error).name === "AbortError") throw e;
      throw truncated(loaded, e);
    }
  }
  if (total !== null && loaded !== total) {
    if (loaded < total) throw truncated(loaded);
    throw new DownloadError(`${url.href} sent ${loaded} bytes, more than its Content-Length of ${total}`, { status: res.status });
  }
  if (into !== null) return into;
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  report(loaded);
  return out;
}

// ── cache ──────────────────────────────────────────────────────────────────────────────────

interface CacheStorageLike {
  open(name: string): Promise<Cache>;
}

function cacheStorage(): CacheStorageLike | undefined {
  if (env.runtime !== "browser") return undefined;
  return (globalThis as { caches?: CacheStorageLike }).caches;
}

async function cacheKey(url: string): Promise<string> {
  return (await sha256Hex(new TextEncoder().encode(url))).slice(0, 32);
}

function cacheDir(location: LoadOptions["cache"]): string | undefined {
  return typeof location === "string" ? location : defaultCacheDir();
}

async function cacheGet(url: string, location: LoadOptions["cache"], expected: string | undefined): Promise<Uint8Array | null> {
  let bytes: Uint8Array | null = null;
  let recorded: string | undefined;
  const storage = cacheStorage();
  if (storage) {
    const cache = await storage.open(typeof location === "string" ? location : CACHE_NAME);
    const res = await cache.match(url);
    if (!res) return null;
    recorded = res.headers.get("x-edgembed-sha256") ?? undefined;
    bytes = new Uint8Array(await res.arrayBuffer());
  } else if (env.fileSystem) {
    const dir = cacheDir(location);
    const fs = fsPromises();
    if (!dir || !fs) return null;
    const base = joinPath(dir, await cacheKey(url));
    try {
      const meta = JSON.parse(new TextDecoder().decode(await fs.readFile(base + ".json"))) as { url: string; sha256: string; size: number };
      if (meta.url !== url) return null;
      bytes = await readFileBytes(base + ".emb");
      recorded = meta.sha256;
      if (bytes.length !== meta.size) return null;
    } catch {
      return null;
    }
  } else {
    return null;
  }
  // Without an expected checksum the entry is trusted (it was verified when written).
  if (expected !== undefined && recorded !== expected) return null;
  if (expected !== undefined && (await sha256Hex(bytes)) !== expected) return null;
  return bytes;
}

async function cachePut(url: string, location: LoadOptions["cache"], bytes: Uint8Array): Promise<void> {
  const sha = await sha256Hex(bytes);
  const storage = cacheStorage();
  if (storage) {
    const cache = await storage.open(typeof location === "string" ? location : CACHE_NAME);
    await cache.put(
      url,
      new Response(bytes.slice(), { headers: { "content-type": "application/octet-stream", "x-edgembed-sha256": sha } }),
    );
    return;
  }
  const dir = cacheDir(location);
  const fs = fsPromises();
  if (!dir || !fs) return;
  await fs.mkdir(dir, { recursive: true });
  const base = joinPath(dir, await cacheKey(url));
  const tmp = `${base}.${processId()}.${Date.now()}.tmp`;
  await fs.writeFile(tmp, bytes);
  await fs.rename(tmp, base + ".emb");
  await fs.writeFile(tmp, JSON.stringify({ url, sha256: sha, size: bytes.length }));
  await fs.rename(tmp, base + ".json");
}
