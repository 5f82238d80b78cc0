/**
 * The JavaScript host, detected once when the package is first imported, as a frozen object.
 * Nothing else in the package looks at `process`, `Deno`, `Bun`, `navigator` or `window`:
 * every runtime-dependent choice reads `env`.
 */

export type Runtime = "node" | "deno" | "bun" | "browser" | "workerd" | "unknown";

export interface Env {
  /** Which host runs the package. A Web Worker inside a browser is "browser". */
  readonly runtime: Runtime;
  /** The host's own version string ("22.23.5", "2.9.6", a browser's user agent …). */
  readonly version: string;
  /** Local files can be read and cached (Node, Deno, Bun). */
  readonly fileSystem: boolean;
  /** How EmbedderPool runs engines in parallel: Node's worker_threads, Web Workers, or not at all. */
  readonly threads: "worker_threads" | "web" | "none";
  /**
   * SharedArrayBuffer and shared WebAssembly.Memory are usable, so pool workers can share one
   * copy of the weights. In browsers this needs a cross-origin-isolated page (COOP + COEP).
   */
  readonly sharedMemory: boolean;
  /** WebAssembly can be compiled from bytes (Cloudflare Workers forbid it: pass a module). */
  readonly compileWasm: boolean;
  /** Logical processors the host reports. */
  readonly cores: number;
  /** CPU architecture, "x64" or "arm64" where the host says, else "unknown" (browsers, Workers). */
  readonly arch: string;
}

// The globals of the hosts, typed loosely: only this module reads them.
type AnyGlobal = typeof globalThis & {
  Deno?: { version?: { deno?: string }; build?: { arch?: string } };
  Bun?: { version?: string };
  process?: { versions?: Record<string, string | undefined>; getBuiltinModule?: (id: string) => unknown };
  navigator?: { userAgent?: string; hardwareConcurrency?: number };
  document?: unknown;
  WorkerGlobalScope?: unknown;
  crossOriginIsolated?: boolean;
};

const g = globalThis as AnyGlobal;

function detectRuntime(): [Runtime, string] {
  const ua = g.navigator?.userAgent ?? "";
  if (ua === "Cloudflare-Workers") return ["workerd", ua];
  if (typeof g.Deno?.version?.deno === "string") return ["deno", g.Deno.version.deno];
  if (typeof g.Bun?.version === "string") return ["bun", g.Bun.version];
  const node = g.process?.versions?.node;
  if (typeof node === "string" && g.document === undefined) return ["node", node];
  if (g.document !== undefined || g.WorkerGlobalScope !== undefined) return ["browser", ua];
  return ["unknown", ua];
}

function canShareMemory(runtime: Runtime): boolean {
  if (typeof SharedArrayBuffer !== "function" || runtime === "workerd") return false;
  if (runtime === "browser" && g.crossOriginIsolated !== true) return false;
  try {
    const m = new WebAssembly.Memory({ initial: 1, maximum: 1, shared: true });
    return m.buffer instanceof SharedArrayBuffer;
  } catch {
    return false;
  }
}

function countCores(): number {
  const n = g.navigator?.hardwareConcurrency;
  if (typeof n === "number" && n > 0) return n;
  const os = nodeBuiltin<{ availableParallelism?: () => number; cpus: () => unknown[] }>("node:os");
  if (os) return os.availableParallelism ? os.availableParallelism() : os.cpus().length || 1;
  return 1;
}

function detectArch(runtime: Runtime): string {
  let arch: string | undefined;
  if (runtime === "deno") arch = g.Deno?.build?.arch;
  else if (runtime === "node" || runtime === "bun") arch = nodeBuiltin<{ arch: string }>("node:process")?.arch;
  else if (/\b(aarch64|arm64|armv8)\b/i.test(g.navigator?.userAgent ?? "")) arch = "arm64";
  if (arch === "x86_64" || arch === "x64") return "x64";
  if (arch === "aarch64" || arch === "arm64") return "arm64";
  return arch ?? "unknown";
}

/**
 * A Node built-in module (also served by Deno and Bun) loaded synchronously, or undefined where
 * there is none. Loading through `process.getBuiltinModule` keeps `node:` imports out of the
 * module graph, so browser bundlers and Cloudflare Workers never see them.
 */
export function nodeBuiltin<T>(id: string): T | undefined {
  const get = g.process?.getBuiltinModule;
  if (typeof get !== "function") return undefined;
  try {
    return get.call(g.process, id) as T | undefined;
  } catch {
    return undefined;
  }
}

function detect(): Env {
  const [runtime, version] = detectRuntime();
  const server = runtime === "node" || runtime === "deno" || runtime === "bun";
  let threads: Env["threads"] = "none";
  if (runtime === "node") threads = "worker_threads";
  else if (typeof (g as { Worker?: unknown }).Worker === "function" && runtime !== "workerd") threads = "web";
  return {
    runtime,
    version,
    fileSystem: server && nodeBuiltin("node:fs") !== undefined,
    threads,
    sharedMemory: canShareMemory(runtime),
    compileWasm: runtime !== "workerd",
    cores: countCores(),
    arch: detectArch(runtime),
  };
}

/** The host, detected once. */
export const env: Env = Object.freeze(detect());
