/**
 * The batcher's decisions as pure functions of the clock and the queue — the port of
 * python/edgembed/batching/policy.py. Nothing here reads a clock or keeps state; `now` is in
 * milliseconds on the caller's clock. Arithmetic is double precision in the Python order, so a
 * trace replayed through these functions gives the same decisions in both languages.
 *
 * A request's due time is min(arrival + lane target, deadline); it is urgent when interactive or
 * due within one interactive latency target; the queue is served urgent first, then earliest
 * due, then first come.
 */
import type { CostModel } from "./cost_model.js";

export const ARRIVAL_RATE = 0.125; // EWMA rate of the inter-arrival gap and of the request size
export const DISPATCH_RATE = 0.125; // EWMA rate of the padding per token of dispatched batches
export const MAX_PLAN_BATCHES = 32; // admission plans at most this many batches ahead
export const RETRY_CAP_MS = 60_000.0; // longest retry-after hint
export const MISS_BUDGET_CAP = 2.0; // bound of the miss budget, in requests
export const CALIBRATION_RATE = 0.05; // relative step of the admission calibration per served request
export const CALIBRATION_MIN = 0.85; // the calibration stays within [CALIBRATION_MIN, CALIBRATION_MAX]
export const CALIBRATION_MAX = 4.0;
export const URGENT_HORIZON_BATCHES = 2.0; // a request due within this many full batches is served first

/** Priority lane of a request. */
export type Lane = "interactive" | "bulk";

/** Everything the decisions depend on besides the queue, the clock and the cost model. */
export interface PolicyConfig {
  readonly latencyTargetMs: number;
  readonly bulkLatencyTargetMs: number;
  readonly maxBatchTokens: number;
  readonly maxQueue: number;
  readonly workers: number;
  readonly shed: boolean;
}

export function policyConfig(c: Partial<PolicyConfig> = {}): PolicyConfig {
  const cfg: PolicyConfig = {
    latencyTargetMs: c.latencyTargetMs ?? 50.0,
    bulkLatencyTargetMs: c.bulkLatencyTargetMs ?? 500.0,
    maxBatchTokens: c.maxBatchTokens ?? 4096,
    maxQueue: c.maxQueue ?? 1024,
    workers: c.workers ?? 1,
    shed: c.shed ?? true,
  };
  if (!(cfg.latencyTargetMs > 0)) throw new RangeError("latencyTargetMs must be positive");
  if (!(cfg.bulkLatencyTargetMs >= cfg.latencyTargetMs)) {
    throw new RangeError("bulkLatencyTargetMs must be at least latencyTargetMs");
  }
  for (const k of ["maxBatchTokens", "maxQueue", "workers"] as const) {
    if (!Number.isInteger(cfg[k]) || cfg[k] < 1) throw new RangeError(`${k} must be an integer of at least 1`);
  }
  return Object.freeze(cfg);
}

export function laneTargetMs(cfg: PolicyConfig, lane: Lane): number {
  return lane === "interactive" ? cfg.latencyTargetMs : cfg.bulkLatencyTargetMs;
}

/** What the policy knows of a queued request. Times are absolute ms on the caller's clock. */
export interface Request {
  readonly rid: number;
  readonly arrivalMs: number;
  readonly lane: Lane;
  readonly dueMs: number;
  readonly deadlineMs: number | null;
  readonly tokens: number;
  readonly nTexts: number;
  readonly maxLen: number;
}

/** Running view of the batches started, updated on each dispatch. */
export interface DispatchStats {
  /** EWMA of padding / tokens of a batch. */
  readonly padRatio: number;
}

export const NO_DISPATCHES: DispatchStats = Object.freeze({ padRatio: 0.0 });

export function updateDispatches(stats: DispatchStats, tokens: number, padding: number): DispatchStats {
  if (tokens <= 0) return stats;
  return { padRatio: stats.padRatio + DISPATCH_RATE * (padding / tokens - stats.padRatio) };
}

/** Running view of the arrival process, updated on each admitted interactive request. */
export interface ArrivalStats {
  readonly lastMs: number | null;
  readonly gapMs: number | null;
  readonly tokens: number | null;
}

export const NO_ARRIVALS: ArrivalStats = Object.freeze({ lastMs: null, gapMs: null, tokens: null });

export function updateArrivals(stats: ArrivalStats, now: number, tokens: number): ArrivalStats {
  const size = stats.tokens === null ? tokens : stats.tokens + ARRIVAL_RATE * (tokens - stats.tokens);
  if (stats.lastMs === null) return { lastMs: now, gapMs: null, tokens: size };
  let gap = now - stats.lastMs;
  if (gap < 0.0) gap = 0.0;
  const meanGap = stats.gapMs === null ? gap : stats.gapMs + ARRIVAL_RATE * (gap - stats.gapMs);
  return { lastMs: now, gapMs: meanGap, tokens: size };
}

export function urgent(req: Request, now: number, cfg: PolicyConfig): boolean {
  return req.lane === "interactive" || now >= req.dueMs - cfg.latencyTargetMs;
}

type Key = [number, number, number];

export function orderKey(req: Request, now: number, cfg: PolicyConfig): Key {
  return [urgent(req, now, cfg) ? 0 : 1, req.dueMs, req.rid];
}

function compareKeys(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < a.length; i++) {
    if (a[i] < b[i]) return -1;
    if (a[i] > b[i]) return 1;
  }
  return 0;
}

/** Power-of-two length class: the number of bits of `maxLen` (0 for 0). */
export function lengthBucket(maxLen: number): number {
  return maxLen <= 0 ? 0 : 32 - Math.clz32(maxLen);
}

export function paddingOf(nTexts: number, maxLen: number, tokens: number): number {
  return nTexts * maxLen - tokens;
}

export interface Batch {
  readonly requests: readonly Request[];
  readonly tokens: number;
  readonly padding: number;
  /** A queued request was left out for token budget or time. */
  readonly full: boolean;
}

function batchPadding(reqs: readonly Request[], tokens: number): number {
  let n = 0;
  let longest = 0;
  for (const r of reqs) {
    n += r.nTexts;
    longest = Math.max(longest, r.maxLen);
  }
  return paddingOf(n, longest, tokens);
}

function sortByKey(reqs: Request[], now: number, cfg: PolicyConfig): Request[] {
  const keyed = reqs.map((r) => ({ r, k: orderKey(r, now, cfg) }));
  keyed.sort((a, b) => compareKeys(a.k, b.k));
  return keyed.map((x) => x.r);
}

/**
 * The batch to run next (see policy.py's form_batch): the seed (first in key order) always goes
 * in; then the urgent class, then the others offer their requests, in key order when the whole
 * class fits the budget, else those due within two full batches first, then by closeness of
 * length class to the seed. A candidate joins while the batch fits the token budget, stays
 * (with the margin) within the tightest lane target of its members and ends before every
 * member's deadline.
 */
export function formBatch(now: number, queue: readonly Request[], model: CostModel, cfg: PolicyConfig): Batch | null {
  if (queue.length === 0) return null;
  const order = sortByKey(queue.slice(), now, cfg);
  const seed = order[0];
  const chosen: Request[] = [seed];
  let tokens = seed.tokens;
  const budget = cfg.maxBatchTokens;
  if (tokens >= budget) {
    return { requests: [seed], tokens, padding: batchPadding(chosen, tokens), full: order.length > 1 };
  }
  const classes: [Request[], Request[]] = [[], []];
  for (let i = 1; i < order.length; i++) classes[urgent(order[i], now, cfg) ? 0 : 1].push(order[i]);

  const horizon = now + URGENT_HORIZON_BATCHES * model.predictMargin(budget);
  const seedBucket = lengthBucket(seed.maxLen);
  let nTexts = seed.nTexts;
  let longest = seed.maxLen;
  let minDeadline = seed.deadlineMs;
  let cap = laneTargetMs(cfg, seed.lane);
  let full = false;
  for (let cls = 0; cls < 2; cls++) {
    const members = classes[cls];
    if (cls === 1 && full) break;
    let total = 0;
    for (const r of members) total += r.tokens;
    let candidates: Request[];
    if (tokens + total <= budget) {
      candidates = members;
    } else {
      const soon = members.filter((r) => r.dueMs <= horizon);
      const later = members
        .filter((r) => r.dueMs > horizon)
        .map((r) => ({ r, k: [Math.abs(lengthBucket(r.maxLen) - seedBucket), ...orderKey(r, now, cfg)] }));
      later.sort((a, b) => compareKeys(a.k, b.k));
      candidates = soon.concat(later.map((x) => x.r));
    }
    for (const r of candidates) {
      if (tokens + r.tokens > budget) {
        full = true;
        continue;
      }
      const newN = nTexts + r.nTexts;
      const newLongest = Math.max(longest, r.maxLen);
      const newTokens = tokens + r.tokens;
      const predicted = model.predict(newTokens, paddingOf(newN, newLongest, newTokens));
      const newCap = Math.min(cap, laneTargetMs(cfg, r.lane));
      if (model.margin * predicted > newCap) {
        full = true;
        continue;
      }
      let deadline = minDeadline;
      if (r.deadlineMs !== null && (deadline === null || r.deadlineMs < deadline)) deadline = r.deadlineMs;
      if (deadline !== null && now + predicted > deadline) continue;
      chosen.push(r);
      tokens = newTokens;
      nTexts = newN;
      longest = newLongest;
      minDeadline = deadline;
      cap = newCap;
    }
  }
  return { requests: chosen, tokens, padding: paddingOf(nTexts, longest, tokens), full };
}

/** `batch` to dispatch now, or (`batch` null) wait until `waitUntil` at the latest. */
export interface Decision {
  readonly batch: Batch | null;
  readonly waitUntil: number | null;
  readonly reason: string;
}

/**
 * With a worker free: dispatch a batch now or wait for more requests, and until when. Waiting
 * pays while the expected gap g < g* = (P(B) + P(x) - P(B+x) - n (P(B+x) - P(B))) / (n + 1),
 * capped at P(B); it also ends when one more gap would make the batch's most urgent request
 * miss its due time under the margined prediction.
 */
export function decide(
  now: number,
  queue: readonly Request[],
  model: CostModel,
  arrivals: ArrivalStats,
  cfg: PolicyConfig,
  closing = false,
): Decision {
  const batch = formBatch(now, queue, model, cfg);
  if (batch === null) return { batch: null, waitUntil: null, reason: "empty" };
  if (closing) return { batch, waitUntil: null, reason: "closing" };
  if (batch.full) return { batch, waitUntil: null, reason: "full" };
  const gap = arrivals.gapMs;
  const last = arrivals.lastMs;
  const typical = arrivals.tokens;
  if (gap === null || last === null || typical === null) return { batch, waitUntil: null, reason: "no-rate" };
  if (batch.tokens + typical > cfg.maxBatchTokens) return { batch, waitUntil: null, reason: "full" };

  const n = batch.requests.length;
  const pB = model.predict(batch.tokens, batch.padding);
  const pBx = model.predict(batch.tokens + typical, batch.padding);
  const pX = model.predict(typical, 0.0);
  let gStar = (pB + pX - pBx - n * (pBx - pB)) / (n + 1.0);
  if (gStar > pB) gStar = pB;
  if (!(gap < gStar)) return { batch, waitUntil: null, reason: "waiting-cannot-pay" };

  let due = batch.requests[0].dueMs;
  for (const r of batch.requests) if (r.dueMs < due) due = r.dueMs;
  const slackEnd = due - model.margin * pBx;
  const tSlack = slackEnd - gap <= last + gap ? slackEnd - gap : (slackEnd + last) / 2.0;
  const tPay = last + gStar;
  const latest = Math.min(tPay, tSlack);
  if (now < latest) return { batch: null, waitUntil: latest, reason: "wait" };
  return { batch, waitUntil: null, reason: tSlack <= tPay ? "slack" : "silence" };
}

/**
 * Requests that can no longer meet their deadline when started alone at `earliestStart` (or, with
 * every worker `busy`, once `now + alone` reaches the deadline), and the earliest future time at
 * which a remaining request would expire.
 */
export function expired(
  now: number,
  queue: readonly Request[],
  model: CostModel,
  earliestStart: number,
  busy = false,
): [Request[], number | null] {
  const gone: Request[] = [];
  let nextAt: number | null = null;
  for (const r of queue) {
    if (r.deadlineMs === null) continue;
    const alone = model.predict(r.tokens, paddingOf(r.nTexts, r.maxLen, r.tokens));
    if (earliestStart + alone > r.deadlineMs || (busy && now + alone >= r.deadlineMs)) {
      gone.push(r);
      continue;
    }
    const t = r.deadlineMs - alone;
    if (t > now && (nextAt === null || t < nextAt)) nextAt = t;
  }
  return [gone, nextAt];
}

export type AdmissionKind = "accept" | "overloaded" | "deadline" | "closed";

/** Accept, or refuse with a reason (`queue`, `slo`, `deadline`, `closed`). */
export interface Admission {
  readonly kind: AdmissionKind;
  readonly retryAfterMs: number;
  readonly predictedLatencyMs: number;
  readonly reason: string;
}

/**
 * Updates the miss budget after a request is served: every served request adds 1 - percentile,
 * a miss costs 1; a request admitted although predicted to miss (`reserved`) paid 1 up front and
 * is refunded if it met its target after all. Bounded by ±MISS_BUDGET_CAP.
 */
export function settleMissBudget(budget: number, missed: boolean, reserved: boolean, percentile: number): number {
  budget = budget + (1.0 - percentile);
  if (reserved && !missed) budget = budget + 1.0;
  else if (missed && !reserved) budget = budget - 1.0;
  return Math.min(Math.max(budget, -MISS_BUDGET_CAP), MISS_BUDGET_CAP);
}

/**
 * Updates the admission calibration (the factor on planned latencies) after a request: up by
 * CALIBRATION_RATE * percentile on a miss, down by CALIBRATION_RATE * (1 - percentile) on a hit,
 * within [CALIBRATION_MIN, CALIBRATION_MAX] (below 1: the margined plan over-predicts at steady load).
 */
export function calibrate(factor: number, missed: boolean, percentile: number): number {
  if (missed) factor = factor * (1.0 + CALIBRATION_RATE * percentile);
  else factor = factor * (1.0 - CALIBRATION_RATE * (1.0 - percentile));
  return Math.min(Math.max(factor, CALIBRATION_MIN), CALIBRATION_MAX);
}

/** Predicted latency of `req` if it joined `queue` now (plans the batches formBatch would form). */
export function planLatency(
  now: number,
  req: Request,
  queue: readonly Request[],
  model: CostModel,
  cfg: PolicyConfig,
  workerFreeMs: readonly number[],
  arrivals: ArrivalStats,
  dispatches: DispatchStats,
): number {
  const free = workerFreeMs.map((t) => (t > now ? t : now)).sort((a, b) => a - b);
  let pending: Request[] = [...queue, req];
  for (let step = 0; step < MAX_PLAN_BATCHES; step++) {
    const start = free[0];
    const batch = formBatch(start, pending, model, cfg);
    if (batch === null) break;
    const mean = model.predict(batch.tokens, batch.padding);
    if (batch.requests.some((r) => r.rid === req.rid)) {
      let extra = 0.0;
      if (arrivals.gapMs !== null && arrivals.tokens !== null && start > now) {
        if (arrivals.gapMs > 0.0) extra = ((start - now) / arrivals.gapMs) * arrivals.tokens;
        else extra = cfg.maxBatchTokens;
        const room = cfg.maxBatchTokens - batch.tokens;
        if (extra > room) extra = room > 0.0 ? room : 0.0;
      }
      const grown = model.predict(batch.tokens + extra, batch.padding + extra * dispatches.padRatio);
      return start + model.margin * grown - now;
    }
    free[0] = start + mean;
    free.sort((a, b) => a - b);
    const taken = new Set(batch.requests.map((r) => r.rid));
    pending = pending.filter((r) => !taken.has(r.rid));
  }
  return Infinity;
}

/**
 * Accept `req` or refuse it at once: queue full, predicted to miss its target, deadline. A
 * request predicted to miss is still accepted (reason "miss-budget") while the miss budget holds
 * a whole request; a request that would start at once is never shed.
 */
export function admit(
  now: number,
  req: Request,
  queue: readonly Request[],
  model: CostModel,
  cfg: PolicyConfig,
  workerFreeMs: readonly number[],
  arrivals: ArrivalStats,
  dispatches: DispatchStats,
  missBudget: number,
  calibration = 1.0,
): Admission {
  const fullBatchMs = model.predict(cfg.maxBatchTokens);
  if (queue.length >= cfg.maxQueue) {
    return { kind: "overloaded", retryAfterMs: fullBatchMs, predictedLatencyMs: 0.0, reason: "queue" };
  }
  const key = orderKey(req, now, cfg);
  let startsNow = false;
  for (const t of workerFreeMs) if (t <= now) startsNow = true;
  for (const r of queue) {
    if (compareKeys(orderKey(r, now, cfg), key) < 0) {
      startsNow = false;
      break;
    }
  }
  let latency = 0.0;
  let reserved = false;
  const target = laneTargetMs(cfg, req.lane);
  if (cfg.shed && !startsNow) {
    const plan = planLatency(now, req, queue, model, cfg, workerFreeMs, arrivals, dispatches);
    latency = calibration * plan;
    if (latency > target) {
      if (missBudget < 1.0) {
        const excess = latency - target;
        const retry = excess < RETRY_CAP_MS ? excess : RETRY_CAP_MS;
        return { kind: "overloaded", retryAfterMs: Math.max(retry, fullBatchMs), predictedLatencyMs: latency, reason: "slo" };
      }
      reserved = true;
    }
  }
  if (req.deadlineMs !== null) {
    const alone = model.predict(req.tokens, paddingOf(req.nTexts, req.maxLen, req.tokens));
    if (now + alone > req.deadlineMs) {
      return { kind: "deadline", retryAfterMs: 0.0, predictedLatencyMs: latency, reason: "deadline" };
    }
  }
  return { kind: "accept", retryAfterMs: 0.0, predictedLatencyMs: latency, reason: reserved ? "miss-budget" : "" };
}
