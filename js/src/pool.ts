/**
 * EmbedderPool: N engines in worker threads (Node's worker_threads; Web Workers in browsers,
 * Deno and Bun), fed from one queue.
 *
 *   shared weights  where SharedArrayBuffer is usable (Node, Deno, Bun; browsers on a
 *                   cross-origin-isolated page) the threads build runs every worker on ONE shared
 *                   memory holding ONE copy of the model; each worker adds its stack and context.
 *   copied weights  elsewhere each worker loads its own copy of the bundle (memory × N).
 *   in-process      where there are no threads (Cloudflare Workers) the pool is one engine in
 *                   the calling thread.
 *
 * A worker that dies (an uncaught error, an exit) is replaced and its batch retried once on
 * another worker; a batch that kills two workers is rejected with WorkerCrashed. No request is
 * dropped silently: each call resolves with its vectors or rejects with an error that says why.
 */
import { EngineInstance, type ModelInfo } from "./bindings.js";
import { compileVariant, importedMemoryLimits, sharedMemory, wasmBytes, type Build } from "./modules.js";
import { EngineSession } from "./session.js";
import {
  asTexts,
  embedWith,
  Prompts,
  resolveEmbedOptions,
  resolveEngine,
  withPrompt,
  type EmbedOptions,
  type EngineOptions,
  type PromptOptions,
} from "./embedder.js";
import { env, nodeBuiltin } from "./env.js";
import { EmbedderDisposed, errorFromData, InputError, WorkerCrashed } from "./errors.js";
import { loadBytes, type BundleSource, type LoadOptions } from "./loader.js";
import type { FromWorker, ToWorker, WorkerInit } from "./worker.js";

export type PoolMode = "shared" | "copy" | "in-process";

export interface PoolOptions extends LoadOptions, EngineOptions, PromptOptions {
  /** Number of workers (default: the host's cores, at most 4). */
  workers?: number;
  /** Share one copy of the weights between workers: default where the host allows it. */
  sharedWeights?: boolean;
  /** Texts per job when one call is split across workers (default: spread evenly, at most 64). */
  chunkTexts?: number;
  /** URL of the package's worker script, when a bundler moved it (default: dist/worker.js). */
  workerUrl?: string | URL;
  /** For tests of crash recovery only: a worker that receives this text dies. */
  crashText?: string;
  /** For tests of crash recovery only: how many workers may die on crashText (default: unlimited). */
  crashTimes?: number;
}

interface Job {
  id: number;
  type: "embed" | "count";
  texts: string[];
  options?: ReturnType<typeof resolveEmbedOptions>;
  attempts: number;
  resolve(value: Float32Array[] | number[]): void;
  reject(error: Error): void;
}

interface Handle {
  post(msg: ToWorker, transfer?: Transferable[]): void;
  terminate(): void;
  /** Keeps the process alive while the worker has work (Node); an idle pool does not. */
  busy(yes: boolean): void;
}

interface Slot {
  index: number;
  handle: Handle | null;
  ready: boolean;
  job: Job | null;
  generation: number;
  /** Workers of this slot that died before they were ready, in a row. */
  startFailures: number;
}

interface SharedState {
  owner: EngineInstance;
  model: number;
  bundle: number;
  memory: WebAssembly.Memory;
  module: WebAssembly.Module;
  stacks: number[];
  tokenizer: EngineSession;
}

export class EmbedderPool {
  readonly mode: PoolMode;
  /** The engine build the workers run ("threads" when weights are shared). */
  readonly build: Build;
  private modelInfo: ModelInfo | null;
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private nextId = 0;
  private disposed = false;
  private crashes = 0;
  private readonly init: (slot: Slot) => WorkerInit;
  private readonly options: PoolOptions;
  private readonly shared: SharedState | null;
  private readonly local: EngineSession | null;
  private readonly chunkTexts: number | undefined;
  private readonly prompts: Prompts;
  private readonly readyWaiters: { resolve(): void; reject(e: Error): void }[] = [];
  private initError: Error | null = null;

  private constructor(args: {
    mode: PoolMode;
    build: Build;
    info: ModelInfo | null;
    size: number;
    init: (slot: Slot) => WorkerInit;
    options: PoolOptions;
    shared: SharedState | null;
    local: EngineSession | null;
  }) {
    this.mode = args.mode;
    this.build = args.build;
    this.modelInfo = args.info;
    this.init = args.init;
    this.options = args.options;
    this.shared = args.shared;
    this.local = args.local;
    this.chunkTexts = args.options.chunkTexts;
    this.prompts = new Prompts(args.options);
    if (this.mode !== "in-process") {
      for (let i = 0; i < args.size; i++) {
        const slot: Slot = { index: i, handle: null, ready: false, job: null, generation: 0, startFailures: 0 };
        this.slots.push(slot);
        this.spawn(slot);
      }
    }
  }

  /**
   * Loads a bundle once and starts the workers; resolves when every worker is ready.
   * Accepts the options of Embedder.load plus PoolOptions.
   */
  static async load(bundle: BundleSource, options: PoolOptions = {}): Promise<EmbedderPool> {
    const size = options.workers ?? Math.max(1, Math.min(env.cores, 4));
    if (!Number.isInteger(size) || size < 1) throw new InputError(`workers must be a positive integer, got ${size}`);
    const maxTokens = options.maxTokens; // undefined: each session's default for the model
    new Prompts(options); // bad prompts fail before the bundle is fetched
    const bytes = await loadBytes(bundle, options);

    if (env.threads === "none") {
      const engine = await resolveEngine(options);
      const local = await EngineSession.open(engine.module, bytes, maxTokens);
      if (local.info.head !== "none") {
        local.dispose();
        throw headRefusal(local.info.head);
      }
      return new EmbedderPool({
        mode: "in-process", build: engine.build, info: local.info, size: 1, init: () => { throw new Error("no workers"); },
        options, shared: null, local,
      });
    }

    const share = options.sharedWeights ?? env.sharedMemory;
    if (share && !env.sharedMemory) {
      throw new InputError(
        `sharedWeights needs SharedArrayBuffer, which this ${env.runtime} context lacks` +
          (env.runtime === "browser" ? " (serve the page with COOP: same-origin and COEP: require-corp)" : ""),
      );
    }
    let pool: EmbedderPool;
    if (share) {
      const module = await compileVariant("threads", options.wasmBase);
      const memory = sharedMemory(importedMemoryLimits(await wasmBytes("threads", options.wasmBase)));
      const owner = await EngineInstance.create(module, { memory });
      const { model, bundle: at } = owner.loadModel(bytes);
      // The owner's own session tokenizes for countTokens; its context is sized for one text.
      const info = owner.modelInfo(model);
      const tokenizer = new EngineSession(owner, model, null, info.maxLength);
      const stacks: number[] = [];
      const state: SharedState = { owner, model, bundle: at, memory, module, stacks, tokenizer };
      pool = new EmbedderPool({
        mode: "shared", build: "threads", info, size, options, shared: state, local: null,
        init: (slot) => {
          while (stacks.length <= slot.index) stacks.push(owner.allocStack().top);
          return { mode: "shared", module, memory, model, stackTop: stacks[slot.index], maxTokens };
        },
      });
    } else {
      const engine = await resolveEngine(options);
      pool = new EmbedderPool({
        mode: "copy", build: engine.build, info: null, size, options, shared: null, local: null,
        init: () => ({ mode: "copy", module: engine.module, bundle: bytes, maxTokens }),
      });
    }
    await pool.whenReady();
    if (pool.info.head !== "none") {
      pool.dispose();
      throw headRefusal(pool.info.head);
    }
    return pool;
  }

  /** Workers in the pool (1 when in-process). */
  get size(): number {
    return this.mode === "in-process" ? 1 : this.slots.length;
  }

  /** The model's dimensions, lengths and pooling (from its bundle). */
  get info(): ModelInfo {
    if (this.modelInfo === null) throw new EmbedderDisposed("the pool's workers never became ready");
    return this.modelInfo;
  }

  get dim(): number {
    return this.info.dim;
  }

  /** @deprecated the old name of `build`. */
  get variant(): Build {
    return this.build;
  }

  get maxLength(): number {
    return this.info.maxLength;
  }

  /** One Float32Array per text, in order; a large call is split across the workers. */
  async embed(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    this.check();
    const list = asTexts(texts);
    const resolved = resolveEmbedOptions(options, this.info.dim, this.prompts);
    if (this.local) return embedWith(this.local, list, resolved);
    if (list.length === 0) return [];
    const per = this.chunkTexts ?? Math.min(64, Math.max(1, Math.ceil(list.length / this.slots.length)));
    const parts: Promise<Float32Array[]>[] = [];
    for (let i = 0; i < list.length; i += per) {
      parts.push(this.submit("embed", list.slice(i, i + per), resolved) as Promise<Float32Array[]>);
    }
    return (await Promise.all(parts)).flat();
  }

  /** `embed` with the model's query prompt, unless `prefix` or `promptName` is given (Embedder.embedQuery). */
  async embedQuery(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    return this.embed(texts, withPrompt(options, this.prompts.query));
  }

  /** `embed` with the model's document prompt, unless `prefix` or `promptName` is given (Embedder.embedDocument). */
  async embedDocument(texts: string | readonly string[], options: EmbedOptions = {}): Promise<Float32Array[]> {
    return this.embed(texts, withPrompt(options, this.prompts.document));
  }

  /** Tokens per text after truncation, its prompt included (for the adaptive batcher). */
  async countTokens(texts: readonly string[], options: { prefix?: string; promptName?: string } = {}): Promise<number[]> {
    this.check();
    const prompt = this.prompts.resolve(options.prefix, options.promptName);
    const list = prompt ? asTexts(texts).map((t) => prompt + t) : asTexts(texts);
    if (this.local) return this.local.countTokens(list);
    if (this.shared) return this.shared.tokenizer.countTokens(list);
    return this.submit("count", list) as Promise<number[]>;
  }

  /** Stops the workers; queued and running calls reject with EmbedderDisposed. */
  dispose(): void {
    this.fail(new EmbedderDisposed("the EmbedderPool was disposed before this call finished"));
  }

  /** Stops everything; what is waiting (load included) rejects with `err`. */
  private fail(err: Error): void {
    if (this.disposed) return;
    this.disposed = true;
    this.initError = err;
    for (const slot of this.slots) {
      slot.handle?.terminate();
      slot.handle = null;
      slot.job?.reject(err);
      slot.job = null;
    }
    for (const job of this.queue.splice(0)) job.reject(err);
    for (const w of this.readyWaiters.splice(0)) w.reject(err);
    this.local?.dispose();
    // Shared memory: the workers' contexts die with it; the owner frees what it holds.
    if (this.shared) {
      this.shared.tokenizer.dispose();
      this.shared.owner.freeModel(this.shared.model as never, this.shared.bundle);
    }
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  private check(): void {
    if (this.disposed) throw new EmbedderDisposed("this EmbedderPool was disposed; load another with EmbedderPool.load()");
  }

  private submit(type: Job["type"], texts: string[], options?: Job["options"]): Promise<Float32Array[] | number[]> {
    return new Promise((resolve, reject) => {
      this.queue.push({ id: this.nextId++, type, texts, options, attempts: 0, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    for (const slot of this.slots) {
      if (this.queue.length === 0) return;
      if (!slot.ready || slot.job !== null || slot.handle === null) continue;
      const job = this.queue.shift()!;
      slot.job = job;
      slot.handle.busy(true);
      job.attempts += 1;
      if (job.type === "embed") {
        const crash = this.options.crashText !== undefined && job.texts.includes(this.options.crashText) &&
          (this.options.crashTimes === undefined || this.crashes < this.options.crashTimes);
        slot.handle.post({ type: "embed", id: job.id, texts: job.texts, options: job.options!, ...(crash ? { crash } : {}) });
      }
      else slot.handle.post({ type: "count", id: job.id, texts: job.texts });
    }
  }

  private whenReady(): Promise<void> {
    if (this.initError) return Promise.reject(this.initError);
    if (this.slots.every((s) => s.ready)) return Promise.resolve();
    return new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject }));
  }

  private onMessage(slot: Slot, generation: number, msg: FromWorker): void {
    if (slot.generation !== generation || this.disposed) return;
    if (msg.type === "ready") {
      slot.ready = true;
      slot.startFailures = 0;
      this.modelInfo ??= msg.info;
      slot.handle?.busy(false);
      if (this.slots.every((s) => s.ready)) for (const w of this.readyWaiters.splice(0)) w.resolve();
      this.pump();
      return;
    }
    if (msg.type === "error" && msg.id === -1) {
      this.fail(errorFromData(msg.error));
      return;
    }
    const job = slot.job;
    if (job === null || job.id !== msg.id) return;
    slot.job = null;
    slot.handle?.busy(false);
    if (msg.type === "result") {
      const out: Float32Array[] = [];
      for (let i = 0; i < job.texts.length; i++) out.push(msg.data.subarray(i * msg.dim, (i + 1) * msg.dim));
      job.resolve(out);
    } else if (msg.type === "counts") {
      job.resolve(msg.counts);
    } else {
      job.reject(errorFromData(msg.error));
    }
    this.pump();
  }

  private onCrash(slot: Slot, generation: number, reason: string): void {
    if (slot.generation !== generation || this.disposed) return;
    slot.handle?.terminate();
    slot.handle = null;
    if (!slot.ready && ++slot.startFailures >= 2) {
      // A worker that cannot even start (its script missing, no memory) would be replaced forever.
      this.fail(new WorkerCrashed(`pool workers die before they are ready (${reason}); check workerUrl and the host's memory`));
      return;
    }
    slot.ready = false;
    this.crashes += 1;
    const job = slot.job;
    slot.job = null;
    if (job) {
      if (job.attempts < 2) {
        this.queue.unshift(job); // retried once, first in line
      } else {
        job.reject(
          new WorkerCrashed(
            `a pool worker died twice running the same batch of ${job.texts.length} text(s) (${reason}); ` +
              `the batch was not computed. Retry it, or embed its texts separately to find the one at fault`,
          ),
        );
      }
    }
    this.spawn(slot);
  }

  private spawn(slot: Slot): void {
    slot.generation += 1;
    slot.ready = false;
    const generation = slot.generation;
    const init = this.init(slot);
    const handle = startWorker(
      this.options.workerUrl,
      (m) => this.onMessage(slot, generation, m),
      (why) => this.onCrash(slot, generation, why),
    );
    slot.handle = handle;
    handle.post({ type: "init", ...init });
  }
}

type NodeWorker = {
  postMessage(m: unknown, t?: readonly Transferable[]): void;
  on(e: "message", f: (m: FromWorker) => void): void;
  on(e: "error", f: (err: Error) => void): void;
  on(e: "exit", f: (code: number) => void): void;
  terminate(): Promise<number>;
  ref(): void;
  unref(): void;
};

function startWorker(url: string | URL | undefined, onMessage: (m: FromWorker) => void, onCrash: (why: string) => void): Handle {
  if (env.threads === "worker_threads") {
    const wt = nodeBuiltin<{ Worker: new (u: URL) => NodeWorker }>("node:worker_threads")!;
    const w = new wt.Worker(url === undefined ? new URL("./worker.js", import.meta.url) : new URL(String(url), import.meta.url));
    let ended = false;
    w.on("message", onMessage);
    w.on("error", (e) => {
      if (!ended) onCrash(`uncaught error: ${e.message}`);
      ended = true;
    });
    w.on("exit", (code) => {
      if (!ended) onCrash(`exited with code ${code}`);
      ended = true;
    });
    return {
      post: (m, t) => w.postMessage(m, t ?? []),
      terminate: () => {
        ended = true;
        void w.terminate();
      },
      busy: (yes) => (yes ? w.ref() : w.unref()),
    };
  }
  const w =
    url === undefined
      ? new Worker(new URL("./worker.js", import.meta.url), { type: "module" })
      : new Worker(new URL(String(url), import.meta.url), { type: "module" });
  let ended = false;
  w.onmessage = (ev: MessageEvent<FromWorker>) => onMessage(ev.data);
  w.onerror = (ev: ErrorEvent) => {
    ev.preventDefault?.();
    if (!ended) onCrash(`uncaught error: ${ev.message || "unknown"}`);
    ended = true;
  };
  w.onmessageerror = () => {
    if (!ended) onCrash("a message could not be read");
    ended = true;
  };
  return {
    post: (m, t) => w.postMessage(m, t ?? []),
    terminate: () => {
      ended = true;
      w.terminate();
    },
    busy: () => undefined,
  };
}

/** Why a pool does not take a model with a head: EmbedderPool runs embedding models. */
function headRefusal(head: string): InputError {
  return new InputError(
    head === "classifier"
      ? "this bundle is a cross-encoder (reranker), and EmbedderPool runs embedding models: load it with Reranker.load"
      : "this bundle is a sparse (SPLADE) model, and EmbedderPool runs embedding models: load it with Embedder.load and call embedSparse",
  );
}
