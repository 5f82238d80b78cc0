/**
 * Host services that differ between runtimes: reading local files, the file cache directory,
 * environment variables. Node built-ins come through `nodeBuiltin` (see env.ts), so nothing here
 * is imported in browsers or Cloudflare Workers.
 */
import { env, nodeBuiltin } from "./env.js";

interface FsPromises {
  readFile(path: string | URL): Promise<Uint8Array>;
  writeFile(path: string, data: Uint8Array | string): Promise<void>;
  mkdir(path: string, options: { recursive: boolean }): Promise<unknown>;
  rename(from: string, to: string): Promise<void>;
  rm(path: string, options: { force: boolean }): Promise<void>;
  stat(path: string): Promise<{ size: number }>;
}

interface NodeFs {
  promises: FsPromises;
}

interface NodePath {
  join(...parts: string[]): string;
}

interface NodeProcess {
  env: Record<string, string | undefined>;
  pid: number;
}

interface NodeOs {
  homedir(): string;
  tmpdir(): string;
}

export function fsPromises(): FsPromises | undefined {
  return env.fileSystem ? nodeBuiltin<NodeFs>("node:fs")?.promises : undefined;
}

/** A file's bytes as a plain Uint8Array (not Node's Buffer subclass). */
export async function readFileBytes(path: string): Promise<Uint8Array> {
  const b = await fsPromises()!.readFile(path);
  return b.constructor === Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

export function joinPath(...parts: string[]): string {
  const path = nodeBuiltin<NodePath>("node:path");
  return path ? path.join(...parts) : parts.join("/");
}

/** An environment variable of the process (server runtimes only). */
export function envVar(name: string): string | undefined {
  try {
    return nodeBuiltin<NodeProcess>("node:process")?.env[name];
  } catch {
    return undefined; // Deno without --allow-env
  }
}

export function processId(): number {
  return nodeBuiltin<NodeProcess>("node:process")?.pid ?? 0;
}

/**
 * The directory of the bundle file cache: `$EDGEMBED_CACHE`, else `$XDG_CACHE_HOME/edgembed/js`,
 * else `~/.cache/edgembed/js`. Undefined where there is no file system.
 */
export function defaultCacheDir(): string | undefined {
  if (!env.fileSystem) return undefined;
  const explicit = envVar("EDGEMBED_CACHE");
  if (explicit) return explicit;
  const xdg = envVar("XDG_CACHE_HOME");
  if (xdg) return joinPath(xdg, "edgembed", "js");
  try {
    const home = nodeBuiltin<NodeOs>("node:os")?.homedir();
    return home ? joinPath(home, ".cache", "edgembed", "js") : undefined;
  } catch {
    return undefined; // Deno without --allow-sys/--allow-env: no cache rather than no model
  }
}

/** True for a string that names a local file rather than a URL. */
export function isLocalPath(s: string): boolean {
  if (/^[a-zA-Z][a-zA-Z0-9+.-]+:/.test(s)) return false; // a scheme of two or more letters
  return true;
}

/** The local path of a file: URL or path string. */
export function toPath(u: string | URL): string {
  if (typeof u === "string" && isLocalPath(u)) return u;
  const url = typeof u === "string" ? new URL(u) : u;
  const nodeUrl = nodeBuiltin<{ fileURLToPath(u: URL): string }>("node:url");
  return nodeUrl ? nodeUrl.fileURLToPath(url) : decodeURIComponent(url.pathname);
}
