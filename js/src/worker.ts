/**
 * The script of one EmbedderPool worker (worker_threads in Node, a module Web Worker elsewhere).
 *
 * It runs one EngineSession: on the pool's shared memory (threads build: the model is the pool's,
 * the worker brings its own stack and context), or on a private copy of the bundle. Messages:
 *
 *   pool → worker  {type: "init", …WorkerInit}  {type: "embed", id, texts, options}  {type: "count", id, texts}
 *   worker → pool  {type: "ready", variant, info}  {type: "result", id, data, dim}  {type: "counts", id, counts}
 *                  {type: "error", id, error}   (id -1: init failed)
 *
 * A result's vectors travel as one transferred Float32Array of n × dim values.
 */
import { EngineInstance, type ModelInfo, type Ptr } from "./bindings.js";
import { EngineSession } from "./session.js";
import { embedWith, type ResolvedEmbedOptions } from "./embedder.js";
import { env, nodeBuiltin } from "./env.js";
import { errorToData } from "./errors.js";

export type WorkerInit =
  | { mode: "shared"; module: WebAssembly.Module; memory: WebAssembly.Memory; model: number; stackTop: number; maxTokens?: number }
  | { mode: "copy"; module: WebAssembly.Module; bundle: Uint8Array; maxTokens?: number };

export type ToWorker =
  | ({ type: "init" } & WorkerInit)
  | { type: "embed"; id: number; texts: string[]; options: ResolvedEmbedOptions; crash?: boolean }
  | { type: "count"; id: number; texts: string[] };

export type FromWorker =
  | { type: "ready"; variant: string; info: ModelInfo }
  | { type: "result"; id: number; data: Float32Array; dim: number }
  | { type: "counts"; id: number; counts: number[] }
  | { type: "error"; id: number; error: ReturnType<typeof errorToData> };

interface Port {
  post(msg: FromWorker, transfer?: Transferable[]): void;
  listen(fn: (msg: ToWorker) => void): void;
}

function port(): Port {
  if (env.runtime === "node") {
    const wt = nodeBuiltin<{ parentPort: { postMessage(m: unknown, t?: Transferable[]): void; on(e: "message", f: (m: ToWorker) => void): void } | null }>(
      "node:worker_threads",
    );
    const p = wt?.parentPort;
    if (!p) throw new Error("edgembed/worker runs only as an EmbedderPool worker");
    return { post: (m, t) => p.postMessage(m, t ?? []), listen: (f) => p.on("message", f) };
  }
  const scope = globalThis as unknown as {
    postMessage(m: unknown, t?: Transferable[]): void;
    addEventListener(e: "message", f: (ev: MessageEvent<ToWorker>) => void): void;
  };
  return { post: (m, t) => scope.postMessage(m, t ?? []), listen: (f) => scope.addEventListener("message", (ev) => f(ev.data)) };
}

const io = port();
let session: EngineSession | null = null;

async function init(msg: WorkerInit): Promise<void> {
  if (msg.mode === "shared") {
    const instance = await EngineInstance.create(msg.module, { memory: msg.memory, stackTop: msg.stackTop });
    session = new EngineSession(instance, msg.model as Ptr, null, msg.maxTokens);
  } else {
    session = await EngineSession.open(msg.module, msg.bundle, msg.maxTokens);
  }
  io.post({ type: "ready", variant: msg.mode === "shared" ? "threads" : session.instance.kernels, info: session.info });
}

function handle(msg: ToWorker): void {
  if (msg.type === "init") {
    init(msg).catch((e) => io.post({ type: "error", id: -1, error: errorToData(e) }));
    return;
  }
  try {
    if (session === null) throw new Error("the worker received work before it was ready");
    if (msg.type === "count") {
      io.post({ type: "counts", id: msg.id, counts: session.countTokens(msg.texts) });
      return;
    }
    if (msg.crash) {
      // Test hook of the pool's crash recovery: die the way a fault in the engine would.
      setTimeout(() => {
        throw new Error("worker crash requested by the test hook");
      });
      return;
    }
    const vectors = embedWith(session, msg.texts, msg.options);
    const dim = vectors.length ? vectors[0].length : 0;
    const data = new Float32Array(vectors.length * dim);
    vectors.forEach((v, i) => data.set(v, i * dim));
    io.post({ type: "result", id: msg.id, data, dim }, [data.buffer]);
  } catch (e) {
    io.post({ type: "error", id: msg.id, error: errorToData(e) });
  }
}

io.listen(handle);
