/**
 * AdaptiveBatcher: groups concurrent embedding requests into batches that keep a latency target.
 * The same algorithm and options as Python's edgembed.batching.AdaptiveBatcher — the decisions
 * come from batching/scheduler.ts, a line-for-line port of the Python scheduler, so both make
 * the same decisions on the same events (tests/js check this on tests/fixtures/batching/).
 *
 *   request ─► admit (bounded queue, predicted latency) ─► queue (lanes, deadlines)
 *           ─► decide (wait or dispatch, which requests) ─► target.embed(texts)
 *           ─► vectors cut back per request; the batch's service time feeds the cost model
 */
import { costPrior, CostModel, type CostPrior, type CostSnapshot } from "./batching/cost_model.js";
import { laneTargetMs, policyConfig, type Lane, type PolicyConfig } from "./batching/policy.js";
import { Scheduler, splitOutputs, type BatcherStats, type Dispatch, type Outcome } from "./batching/scheduler.js";
import { BatcherClosed, BatcherError, DeadlineExceeded, InputError, Overloaded } from "./errors.js";

/** What the batcher calls: an Embedder, an EmbedderPool, or a function of a list of texts. */
export type BatchTarget =
  | {
      embed(texts: string[]): Promise<Float32Array[]> | Float32Array[];
      countTokens?(texts: string[]): Promise<number[]> | number[];
      size?: number;
    }
  | ((texts: string[]) => Promise<Float32Array[]> | Float32Array[]);

export interface BatcherOptions {
  /** Latency target of interactive requests (ms), kept at `percentile`. Default 50. */
  latencyTargetMs?: number;
  /** Default 0.99. */
  percentile?: number;
  /** Most tokens in one batch. Default 4096. */
  maxBatchTokens?: number;
  /** Most queued requests; beyond, requests are refused with Overloaded. Default 1024. */
  maxQueue?: number;
  /** Batches run at once (default: the target's `size` — an EmbedderPool's workers — else 1). */
  workers?: number;
  /** Latency target of bulk requests (ms). Default 10 × latencyTargetMs. */
  bulkLatencyTargetMs?: number;
  /** Warm start of the cost model (a prior, or `stats().costModel` of an earlier run). */
  costPrior?: Partial<CostPrior> | Partial<CostSnapshot>;
  /** Refuse requests predicted to miss their target (default true). */
  shed?: boolean;
  /** Clock in milliseconds (default performance.now). */
  clock?: () => number;
}

export interface SubmitOptions {
  priority?: Lane;
  /** Fail the request (DeadlineExceeded) unless it can be served within this many ms. */
  deadlineMs?: number;
  /** Withdraws the request while it waits in the queue. */
  signal?: AbortSignal;
}

/** About four characters per WordPiece token, plus [CLS] and [SEP] (Python's estimate_tokens). */
export function estimateTokens(texts: readonly string[]): number[] {
  return texts.map((t) => {
    let n = 0;
    for (const _ of t) n++; // code points, as Python's len()
    return Math.floor(n / 4) + 2;
  });
}

interface Pending {
  rid: number;
  texts: string[];
  single: boolean;
  resolve(v: Float32Array | Float32Array[]): void;
  reject(e: unknown): void;
  detach(): void;
}

export class AdaptiveBatcher {
  readonly config: PolicyConfig;
  private readonly embedFn: (texts: string[]) => Promise<Float32Array[]> | Float32Array[];
  private readonly countFn: (texts: string[]) => Promise<number[]> | number[];
  private readonly clock: () => number;
  private readonly sched: Scheduler;
  private readonly pending = new Map<number, Pending>();
  private nextRid = 0;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private timerAt: number | null = null;
  private isClosed = false;
  private readonly idleWaiters: (() => void)[] = [];

  constructor(target: BatchTarget, options: BatcherOptions = {}) {
    if (typeof target === "function") {
      this.embedFn = target;
      this.countFn = estimateTokens;
    } else if (target && typeof target.embed === "function") {
      this.embedFn = (texts) => target.embed(texts);
      this.countFn = typeof target.countTokens === "function" ? (texts) => target.countTokens!(texts) : estimateTokens;
    } else {
      throw new InputError("target must be an Embedder, an EmbedderPool or a function taking a list of texts");
    }
    const latency = options.latencyTargetMs ?? 50.0;
    const size = typeof target === "function" ? undefined : target.size;
    this.config = policyConfig({
      latencyTargetMs: latency,
      bulkLatencyTargetMs: options.bulkLatencyTargetMs ?? 10.0 * latency,
      maxBatchTokens: options.maxBatchTokens ?? 4096,
      maxQueue: options.maxQueue ?? 1024,
      workers: options.workers ?? size ?? 1,
      shed: options.shed ?? true,
    });
    this.clock = options.clock ?? (() => performance.now());
    this.sched = new Scheduler(this.config, new CostModel(options.costPrior ? costPrior(options.costPrior) : null, options.percentile ?? 0.99));
  }

  /**
   * Queues a request; resolves to its vector (for a string) or vectors (for an array). Rejects
   * with Overloaded (queue full or latency target out of reach; see `retryAfterMs`),
   * DeadlineExceeded, BatcherClosed, or the target's own error.
   */
  embed(texts: string, options?: SubmitOptions): Promise<Float32Array>;
  embed(texts: readonly string[], options?: SubmitOptions): Promise<Float32Array[]>;
  async embed(texts: string | readonly string[], options: SubmitOptions = {}): Promise<Float32Array | Float32Array[]> {
    const single = typeof texts === "string";
    const items: string[] = single ? [texts as string] : Array.from(texts as readonly string[]);
    items.forEach((t, i) => {
      if (typeof t !== "string") throw new InputError(`texts[${i}] is ${typeof t}, not a string`);
    });
    const lane = options.priority ?? "interactive";
    if (lane !== "interactive" && lane !== "bulk") throw new InputError(`priority must be "interactive" or "bulk", got ${JSON.stringify(lane)}`);
    const deadline = options.deadlineMs;
    if (deadline !== undefined && !(deadline > 0 && Number.isFinite(deadline))) {
      throw new InputError(`deadlineMs must be a positive number, got ${String(deadline)}`);
    }
    if (this.isClosed) throw new BatcherClosed("the batcher is closed; create a new AdaptiveBatcher");
    options.signal?.throwIfAborted();
    if (items.length === 0) return [];
    const tokens = (await this.countFn(items)).map((n) => Math.trunc(Number(n)));
    if (tokens.length !== items.length) throw new BatcherError("countTokens returned a count per text of another length");
    if (this.isClosed) throw new BatcherClosed("the batcher is closing; create a new AdaptiveBatcher");
    options.signal?.throwIfAborted();

    const rid = this.nextRid++;
    const adm = this.sched.admit(this.clock(), rid, tokens, { lane, deadlineMs: deadline ?? null });
    if (adm.kind === "overloaded") {
      throw new Overloaded(
        `the batcher is overloaded (${adm.reason}: predicted latency ${adm.predictedLatencyMs.toFixed(1)} ms, ` +
          `target ${laneTargetMs(this.config, lane)} ms); retry after ${(adm.retryAfterMs / 1000).toFixed(3)} s or add capacity`,
        adm.retryAfterMs,
      );
    }
    if (adm.kind === "deadline") {
      throw new DeadlineExceeded(`a deadline of ${deadline} ms cannot be met: computing this request alone is predicted to take longer`);
    }
    if (adm.kind === "closed") throw new BatcherClosed("the batcher is closing; create a new AdaptiveBatcher");

    return new Promise((resolve, reject) => {
      const signal = options.signal;
      const onAbort = (): void => {
        if (this.sched.cancel(this.clock(), rid)) {
          this.pending.delete(rid);
          reject(signal!.reason);
          this.pump();
        }
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.pending.set(rid, {
        rid, texts: items, single, resolve, reject,
        detach: () => signal?.removeEventListener("abort", onAbort),
      });
      this.pump();
    });
  }

  /**
   * Stops taking requests. `drain` (default) computes what is queued; otherwise queued requests
   * reject with BatcherClosed. Running batches always finish. Resolves when all is settled.
   */
  async close(options: { drain?: boolean } = {}): Promise<void> {
    if (!this.isClosed) {
      this.isClosed = true;
      for (const rid of this.sched.close(this.clock(), options.drain ?? true)) {
        const p = this.pending.get(rid)!;
        this.pending.delete(rid);
        p.detach();
        p.reject(new BatcherClosed("the batcher was closed without draining"));
      }
      this.pump();
    }
    if (this.sched.idle) return;
    await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  get closed(): boolean {
    return this.isClosed;
  }

  /** Queue, batches, latency, SLO attainment, throughput and the cost model, now. */
  stats(): BatcherStats {
    return this.sched.stats();
  }

  private pump(): void {
    const now = this.clock();
    const step = this.sched.step(now);
    for (const rid of step.expired) {
      const p = this.pending.get(rid)!;
      this.pending.delete(rid);
      p.detach();
      p.reject(new DeadlineExceeded("the request could no longer meet its deadline and was not computed"));
    }
    for (const d of step.dispatches) void this.run(d);
    this.arm(step.wakeAt, now);
    if (this.sched.idle) for (const w of this.idleWaiters.splice(0)) w();
  }

  private arm(at: number | null, now: number): void {
    if (at === this.timerAt) return;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.timerAt = at;
    if (at === null) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.timerAt = null;
      this.pump();
    }, Math.max(0, at - now));
  }

  private async run(d: Dispatch): Promise<void> {
    const members = d.rids.map((rid) => {
      const p = this.pending.get(rid)!;
      this.pending.delete(rid);
      p.detach();
      return p;
    });
    const notServed = new Map<number, Outcome>();
    let serviceMs: number | null = null;
    const texts = members.flatMap((p) => p.texts);
    const start = performance.now();
    try {
      const vectors = await this.embedFn(texts);
      const parts = splitOutputs(members.map((p) => p.texts.length), Array.from(vectors));
      serviceMs = performance.now() - start;
      members.forEach((p, i) => p.resolve(p.single ? parts[i][0] : parts[i]));
    } catch (e) {
      if (members.length === 1) {
        notServed.set(members[0].rid, "failed");
        members[0].reject(e);
      } else {
        await this.runAlone(members, notServed);
      }
    }
    this.sched.complete(this.clock(), d.batchId, serviceMs, notServed);
    this.pump();
  }

  /** A batch failed: compute each request on its own, so one bad request fails alone. */
  private async runAlone(members: Pending[], notServed: Map<number, Outcome>): Promise<void> {
    for (const p of members) {
      try {
        const vectors = Array.from(await this.embedFn(p.texts));
        const [part] = splitOutputs([p.texts.length], vectors);
        p.resolve(p.single ? part[0] : part);
      } catch (e) {
        notServed.set(p.rid, "failed");
        p.reject(e);
      }
    }
  }
}
