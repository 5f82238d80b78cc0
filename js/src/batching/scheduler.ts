/**
 * The batcher's state machine on any clock — the port of python/edgembed/batching/scheduler.py.
 *
 * `Scheduler` owns no timer and reads no clock: its caller says what happened and when (`admit`,
 * `cancel`, `complete`, `close`) and asks what to do now (`step`). The simulator drives it from a
 * virtual clock, `AdaptiveBatcher` from `performance.now()`. With `record` every decision is
 * appended to `log` in the JSON format of tests/fixtures/batching/*.json (docs/batching.md).
 */
import { CostModel, type CostSnapshot } from "./cost_model.js";
import {
  admit,
  calibrate,
  decide,
  expired,
  laneTargetMs,
  MISS_BUDGET_CAP,
  NO_ARRIVALS,
  NO_DISPATCHES,
  settleMissBudget,
  updateArrivals,
  updateDispatches,
  type DispatchStats,
  type Admission,
  type ArrivalStats,
  type Lane,
  type PolicyConfig,
  type Request,
} from "./policy.js";
import { BatcherError } from "../errors.js";

/** How a request ended. */
export type Outcome = "ok" | "overloaded" | "deadline" | "cancelled" | "closed" | "failed";

/** Start `rids` (in this order) as batch `batchId` on `worker`. */
export interface Dispatch {
  readonly batchId: number;
  readonly worker: number;
  readonly rids: readonly number[];
  readonly tokens: number;
  readonly padding: number;
  /** Mean prediction, before the margin. */
  readonly predictedMs: number;
  readonly reason: string;
}

/** What to do now: fail `expired`, start `dispatches`; ask again at `wakeAt`. */
export interface Step {
  readonly expired: readonly number[];
  readonly dispatches: readonly Dispatch[];
  readonly wakeAt: number | null;
}

/** One decision of the log, as JSON (snake_case keys, as the Python scheduler writes them). */
export type LogEntry = Record<string, unknown> & { t: number; event: string };

interface InFlight {
  worker: number;
  requests: readonly Request[];
  tokens: number;
  padding: number;
  startedMs: number;
  predictedEndMs: number;
}

export const BATCH_SIZE_BOUNDS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
export const BATCH_TOKEN_BOUNDS = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768];
export const LATENCY_BOUNDS_MS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000];
const RECENT = 2048;

/** Counts per inclusive upper bound plus one overflow bucket, and the running sum. */
export interface Histogram {
  bounds: number[];
  counts: number[];
  count: number;
  sum: number;
}

function histogram(bounds: number[]): Histogram {
  return { bounds, counts: new Array<number>(bounds.length + 1).fill(0), count: 0, sum: 0 };
}

function observe(h: Histogram, value: number): void {
  let i = 0;
  while (i < h.bounds.length && value > h.bounds[i]) i++;
  h.counts[i] += 1;
  h.sum += value;
  h.count += 1;
}

function percentileOf(ordered: number[], p: number): number {
  if (ordered.length === 0) return 0.0;
  const i = Math.min(Math.max(Math.ceil(p * ordered.length) - 1, 0), ordered.length - 1);
  return ordered[i];
}

/** A snapshot of the batcher (the fields of Python's BatcherStats, in camelCase). */
export interface BatcherStats {
  queueDepth: number;
  queueTokens: number;
  inFlightBatches: number;
  workers: number;
  submitted: number;
  completed: number;
  overloaded: number;
  deadlineExceeded: number;
  cancelled: number;
  closed: number;
  failed: number;
  batches: number;
  batchSizeHistogram: Histogram;
  batchTokensHistogram: Histogram;
  latencyHistogramMs: Histogram;
  meanBatchSize: number;
  meanBatchTokens: number;
  latencyMs: { mean: number; p50: number; p90: number; p99: number; max: number };
  latencyTargetMs: number;
  percentile: number;
  sloAttainment: number;
  recentSloAttainment: number;
  throughputRps: number;
  throughputTokensPerS: number;
  arrivalGapMs: number | null;
  costModel: CostSnapshot;
}

class Recorder {
  outcomes = new Map<Outcome, number>();
  submitted = 0;
  batches = 0;
  batchSize = histogram(BATCH_SIZE_BOUNDS);
  batchTokens = histogram(BATCH_TOKEN_BOUNDS);
  latency = histogram(LATENCY_BOUNDS_MS);
  withinTarget = 0;
  judged = 0;
  /** [completion ms, latency ms, tokens, within target] */
  recent: [number, number, number, boolean][] = [];

  outcome(name: Outcome, n = 1): void {
    this.outcomes.set(name, (this.outcomes.get(name) ?? 0) + n);
  }
  dispatched(nRequests: number, tokens: number): void {
    this.batches += 1;
    observe(this.batchSize, nRequests);
    observe(this.batchTokens, tokens);
  }
  served(now: number, latencyMs: number, tokens: number, targetMs: number): void {
    this.outcome("ok");
    observe(this.latency, latencyMs);
    const ok = latencyMs <= targetMs;
    this.judged += 1;
    if (ok) this.withinTarget += 1;
    this.recent.push([now, latencyMs, tokens, ok]);
    if (this.recent.length > RECENT) this.recent.shift();
  }
}

export class Scheduler {
  readonly config: PolicyConfig;
  readonly model: CostModel;
  readonly record: boolean;
  readonly log: LogEntry[] = [];
  arrivals: ArrivalStats = NO_ARRIVALS;
  readonly queue = new Map<number, Request>();
  readonly workers: (number | null)[];
  readonly inFlight = new Map<number, InFlight>();
  closing = false;
  /** Misses the percentile still allows, in requests (see settleMissBudget). */
  missBudget = MISS_BUDGET_CAP;
  dispatches: DispatchStats = NO_DISPATCHES;
  calibration = 1.0;
  private readonly reserved = new Set<number>();
  private readonly recorder = new Recorder();
  private nextBatch = 0;
  private lastWake: number | null = null;
  private queueTokens = 0;

  constructor(config: PolicyConfig, model?: CostModel, options: { record?: boolean } = {}) {
    this.config = config;
    this.model = model ?? new CostModel();
    this.record = options.record ?? false;
    this.workers = new Array<number | null>(config.workers).fill(null);
  }

  /** A request of texts with `tokens` arrives; queue it or refuse it. `deadlineMs` is relative. */
  admit(
    now: number,
    rid: number,
    tokens: readonly number[],
    options: { lane?: Lane; deadlineMs?: number | null } = {},
  ): Admission {
    const lane = options.lane ?? "interactive";
    const deadlineMs = options.deadlineMs ?? null;
    if (this.queue.has(rid)) throw new Error(`request id ${rid} is already queued`);
    this.recorder.submitted += 1;
    let total = 0;
    let longest = 0;
    for (const t of tokens) {
      total += t;
      longest = Math.max(longest, t);
    }
    const deadline = deadlineMs === null ? null : now + deadlineMs;
    let due = now + laneTargetMs(this.config, lane);
    if (deadline !== null && deadline < due) due = deadline;
    const req: Request = {
      rid, arrivalMs: now, lane, dueMs: due, deadlineMs: deadline, tokens: total, nTexts: tokens.length, maxLen: longest,
    };
    let result: Admission;
    if (this.closing) {
      result = { kind: "closed", retryAfterMs: 0.0, predictedLatencyMs: 0.0, reason: "closed" };
    } else {
      result = admit(
        now, req, [...this.queue.values()], this.model, this.config, this.workerFree(now), this.arrivals,
        this.dispatches, this.missBudget, this.calibration,
      );
    }
    if (result.kind === "accept") {
      if (result.reason === "miss-budget") {
        this.missBudget -= 1.0;
        this.reserved.add(rid);
      }
      this.queue.set(rid, req);
      this.queueTokens += req.tokens;
      if (lane === "interactive") this.arrivals = updateArrivals(this.arrivals, now, total); // bulk: paced by its submitter
    } else {
      this.recorder.outcome(result.kind === "overloaded" ? "overloaded" : result.kind === "deadline" ? "deadline" : "closed");
    }
    if (this.record) {
      const planned = result.predictedLatencyMs;
      const entry: LogEntry = {
        t: now, event: "admit", rid, result: result.kind, reason: result.reason,
        planned_ms: Number.isFinite(planned) ? planned : null,
      };
      if (result.kind === "overloaded") entry.retry_after_ms = result.retryAfterMs;
      this.log.push(entry);
    }
    return result;
  }

  /** Withdraws a queued request; false if it is not queued (running, done or unknown). */
  cancel(now: number, rid: number): boolean {
    const req = this.queue.get(rid);
    if (req !== undefined) {
      this.queue.delete(rid);
      this.queueTokens -= req.tokens;
      this.recorder.outcome("cancelled");
      this.release(rid);
    }
    if (this.record) this.log.push({ t: now, event: "cancel", rid, removed: req !== undefined });
    return req !== undefined;
  }

  /**
   * Batch `batchId` ended after `serviceMs` of compute (null: do not learn from it).
   * `notServed` names the requests of the batch that got no vector and how they ended.
   */
  complete(now: number, batchId: number, serviceMs: number | null, notServed?: ReadonlyMap<number, Outcome>): void {
    const fl = this.inFlight.get(batchId);
    if (fl === undefined) throw new Error(`batch ${batchId} is not running`);
    this.inFlight.delete(batchId);
    this.workers[fl.worker] = null;
    if (serviceMs !== null) this.model.observe(fl.tokens, fl.padding, serviceMs);
    for (const r of fl.requests) {
      const missing = notServed?.get(r.rid);
      if (missing !== undefined) {
        this.recorder.outcome(missing);
        this.release(r.rid);
      } else {
        const target = laneTargetMs(this.config, r.lane);
        const latency = now - r.arrivalMs;
        this.recorder.served(now, latency, r.tokens, target);
        const reserved = this.reserved.delete(r.rid);
        this.missBudget = settleMissBudget(this.missBudget, latency > target, reserved, this.model.percentile);
        this.calibration = calibrate(this.calibration, latency > target && !reserved, this.model.percentile);
      }
    }
    if (this.record) this.log.push({ t: now, event: "complete", batch: batchId, service_ms: serviceMs });
  }

  /** Stops admitting. With `drain` queued work still runs; without, the queued ids are returned. */
  close(now: number, drain: boolean): number[] {
    this.closing = true;
    let failed: number[] = [];
    if (!drain) {
      failed = [...this.queue.keys()];
      this.queue.clear();
      this.queueTokens = 0;
      this.recorder.outcome("closed", failed.length);
      for (const rid of failed) this.release(rid);
    }
    if (this.record) this.log.push({ t: now, event: "close", drain, failed: failed.slice() });
    return failed;
  }

  /** Expires what cannot make its deadline, starts every batch that should start now. */
  step(now: number): Step {
    const gone: number[] = [];
    const dispatches: Dispatch[] = [];
    let wake: number | null = null;
    for (;;) {
      const free: number[] = [];
      this.workers.forEach((b, i) => {
        if (b === null) free.push(i);
      });
      const start = free.length > 0 ? now : this.earliestFree(now);
      const [dead, nextExpiry] = expired(now, [...this.queue.values()], this.model, start, free.length === 0);
      for (const r of dead) {
        this.queue.delete(r.rid);
        this.queueTokens -= r.tokens;
        this.recorder.outcome("deadline");
        this.release(r.rid);
        gone.push(r.rid);
        if (this.record) this.log.push({ t: now, event: "expire", rid: r.rid });
      }
      if (free.length === 0 || this.queue.size === 0) {
        wake = nextExpiry;
        break;
      }
      const decision = decide(now, [...this.queue.values()], this.model, this.arrivals, this.config, this.closing);
      if (decision.batch === null) {
        wake = decision.waitUntil;
        if (nextExpiry !== null && (wake === null || nextExpiry < wake)) wake = nextExpiry;
        break;
      }
      const batch = decision.batch;
      const worker = free[0];
      const batchId = this.nextBatch++;
      const predicted = this.model.predict(batch.tokens, batch.padding);
      for (const r of batch.requests) {
        this.queue.delete(r.rid);
        this.queueTokens -= r.tokens;
      }
      this.workers[worker] = batchId;
      this.inFlight.set(batchId, {
        worker, requests: batch.requests, tokens: batch.tokens, padding: batch.padding, startedMs: now, predictedEndMs: now + predicted,
      });
      this.recorder.dispatched(batch.requests.length, batch.tokens);
      this.dispatches = updateDispatches(this.dispatches, batch.tokens, batch.padding);
      const rids = batch.requests.map((r) => r.rid);
      dispatches.push({ batchId, worker, rids, tokens: batch.tokens, padding: batch.padding, predictedMs: predicted, reason: decision.reason });
      if (this.record) {
        this.log.push({
          t: now, event: "dispatch", batch: batchId, worker, rids: rids.slice(), tokens: batch.tokens,
          padding: batch.padding, predicted_ms: predicted, reason: decision.reason,
        });
      }
    }
    if (this.record && wake !== null && wake !== this.lastWake) this.log.push({ t: now, event: "wake", at: wake });
    if (wake !== null) this.lastWake = wake;
    return { expired: gone, dispatches, wakeAt: wake };
  }

  /** Nothing queued and nothing running. */
  get idle(): boolean {
    return this.queue.size === 0 && this.inFlight.size === 0;
  }

  requestsOf(batchId: number): readonly Request[] {
    return this.inFlight.get(batchId)?.requests ?? [];
  }

  /** Refunds the miss budget paid for a request that ends without being served. */
  private release(rid: number): void {
    if (this.reserved.delete(rid)) this.missBudget = Math.min(this.missBudget + 1.0, MISS_BUDGET_CAP);
  }

  private workerFree(now: number): number[] {
    return this.workers.map((b) => {
      const end = b === null ? now : this.inFlight.get(b)!.predictedEndMs;
      return end > now ? end : now;
    });
  }

  private earliestFree(now: number): number {
    if (this.workers.includes(null) || this.inFlight.size === 0) return now;
    let end = Infinity;
    for (const fl of this.inFlight.values()) end = Math.min(end, fl.predictedEndMs);
    return end > now ? end : now;
  }

  stats(): BatcherStats {
    const rec = this.recorder;
    const o = (k: Outcome): number => rec.outcomes.get(k) ?? 0;
    const values = rec.recent.map((x) => x[1]).sort((a, b) => a - b);
    let mean = 0.0;
    for (const v of values) mean += v;
    mean = values.length ? mean / values.length : 0.0;
    let rps = 0.0;
    let tps = 0.0;
    if (rec.recent.length >= 2) {
      const span = rec.recent[rec.recent.length - 1][0] - rec.recent[0][0];
      if (span > 0.0) {
        let tokens = 0;
        for (let i = 1; i < rec.recent.length; i++) tokens += rec.recent[i][2];
        rps = ((rec.recent.length - 1) * 1000.0) / span;
        tps = (tokens * 1000.0) / span;
      }
    }
    let ok = 0;
    for (const x of rec.recent) if (x[3]) ok += 1;
    const copy = (h: Histogram): Histogram => ({ bounds: h.bounds.slice(), counts: h.counts.slice(), count: h.count, sum: h.sum });
    return {
      queueDepth: this.queue.size,
      queueTokens: this.queueTokens,
      inFlightBatches: this.inFlight.size,
      workers: this.config.workers,
      submitted: rec.submitted,
      completed: o("ok"),
      overloaded: o("overloaded"),
      deadlineExceeded: o("deadline"),
      cancelled: o("cancelled"),
      closed: o("closed"),
      failed: o("failed"),
      batches: rec.batches,
      batchSizeHistogram: copy(rec.batchSize),
      batchTokensHistogram: copy(rec.batchTokens),
      latencyHistogramMs: copy(rec.latency),
      meanBatchSize: rec.batchSize.count ? rec.batchSize.sum / rec.batchSize.count : 0.0,
      meanBatchTokens: rec.batchTokens.count ? rec.batchTokens.sum / rec.batchTokens.count : 0.0,
      latencyMs: {
        mean,
        p50: percentileOf(values, 0.5),
        p90: percentileOf(values, 0.9),
        p99: percentileOf(values, 0.99),
        max: values.length ? values[values.length - 1] : 0.0,
      },
      latencyTargetMs: this.config.latencyTargetMs,
      percentile: this.model.percentile,
      sloAttainment: rec.judged ? rec.withinTarget / rec.judged : 1.0,
      recentSloAttainment: rec.recent.length ? ok / rec.recent.length : 1.0,
      throughputRps: rps,
      throughputTokensPerS: tps,
      arrivalGapMs: this.arrivals.gapMs,
      costModel: this.model.snapshot(),
    };
  }
}

/** Cuts a batch's outputs (one per text, requests in batch order) back into requests. */
export function splitOutputs<T>(counts: readonly number[], outputs: readonly T[]): T[][] {
  let total = 0;
  for (const c of counts) total += c;
  if (outputs.length !== total) {
    throw new BatcherError(`the target returned ${outputs.length} vectors for ${total} texts; it must return one vector per text, in order`);
  }
  const out: T[][] = [];
  let start = 0;
  for (const c of counts) {
    out.push(outputs.slice(start, start + c));
    start += c;
  }
  return out;
}
