/**
 * Self-healing, catch-up side: a server that was down while writes completed, or that lost
 * its disk and started on an empty data directory, gets its own fragment of every completed
 * write back from its peers (issue 24).
 *
 * A **catch-up pass** walks the cluster's catalog of completed writes (`catalog.ts`: LIST
 * to every server, `n − t` answers merged, deletes included) page by page and compares
 * each key with what this server holds. A key whose latest completed write this server
 * does not hold (`Server.holds`) is **repaired**: a `RepairOperation` per stripe reads the
 * write pinned to its valid candidate from the peers, checks every fragment against the
 * signed cross-checksum, decodes, re-encodes and requires all `n` hashes to match; the
 * server then stores its own fragment under the write's own timestamp and certificate
 * (`Server.storeRepaired`, which checks it all again). A striped value is repaired stripe
 * by stripe, stripe 0 first (it brings the layout) and stored last, as its writer did. A
 * key whose entry is here but whose newer `lc` this server missed gets that `lc` written
 * back (a COMPLETE to itself), nothing fetched.
 *
 * - `VALUE_CHANGED`: the version being repaired was overwritten and collected meanwhile;
 *   the key's latest write is looked up again and repaired instead.
 * - `INCONSISTENT_ENCODING`: the writer's fragments do not re-encode to its own
 *   cross-checksum (a writer that encoded inconsistently). Logged and counted, never
 *   stored: no server can hold a fragment of that write that agrees with the others.
 *
 * Passes run at start-up and then every `intervalMs`; a pass that could not check every
 * key is retried sooner. Repairs are bounded by `concurrency` (and 64 MiB of stripes in
 * flight) and by `bytesPerSec` read from the peers. The server serves requests throughout.
 *
 * **Rebuilding.** A server whose data directory was created at this start (or at an
 * earlier start whose rebuild never finished: LevelStorage's `m:fresh` marker) holds none
 * of the writes made before: it is *rebuilding* until a pass checks every key without a
 * failure, and then clears the marker. While rebuilding it asks its peers first: its own
 * LIST answer counts only if `n − t` peers do not answer within {@link PEERS_FIRST_MS}.
 */
import type { Logger } from 'pino';
import type { ErasureCodec } from '@powerstore/erasure';
import {
  CertificateVerifier,
  compareTimestamps,
  mustRepair,
  PendingWrites,
  ProtocolError,
  RepairOperation,
  StorageError,
  toHex,
  type Candidate,
  type ClusterConfig,
  type CryptoProvider,
  type RepairOutcome,
  type RepairResult,
  type Reply,
  type Request,
  type Server,
  type StripeLayout,
} from '@powerstore/protocol';
import type { Catalog, CatalogEntry } from './catalog.js';
import { ServerError } from './errors.js';
import type { HealMetrics } from './heal-metrics.js';
import { PeerTimeout, type PeerSet } from './peers.js';

/** How long a rebuilding server waits for `n − t` peers' LIST answers before counting its own. */
export const PEERS_FIRST_MS = 10_000;
/** Stripe bytes repairs may hold in flight at once (one repair always may run). */
export const HEAL_INFLIGHT_BYTES = 64 * 1024 * 1024;
/** What stripe 0 of a value over {@link HEAL_INFLIGHT_BYTES} is guessed to weigh before it is read. */
const STRIPE_ESTIMATE = 8 * 1024 * 1024;
/** Times a key is looked up again after its version changed under a repair. */
const MAX_ATTEMPTS = 4;
/** First retry of a pass that could not check every key; it doubles up to the interval. */
const RETRY_MIN_MS = 5_000;
/** Attempts at one catalog page before the pass gives up. */
const PAGE_ATTEMPTS = 3;
/**
 * How long a write whose COMPLETE came before its STORE waits before it is repaired: a
 * STORE only slower than its COMPLETE still arrives, and then nothing needs fetching.
 */
export const MISSED_GRACE_MS = 5_000;
/**
 * Writes under way one peer may list to a rebuilding server: each costs a signature check
 * and some memory, and a Byzantine peer with a colluding writer could list them without
 * end. A peer listing more counts as one that did not list everything (`mustRepair`).
 */
export const MAX_PENDING_LISTED = 100_000;
/** Missed writes queued for repair at most; more wait for the next pass. */
const MAX_MISSED = 4096;

/** Catch-up settings an operator sets (`powerstore-server start --heal-…`). */
export interface CatchUpSettings {
  /** Time between catch-up passes (ms); 0 turns catch-up off. */
  readonly intervalMs: number;
  /** Repairs in flight at once. */
  readonly concurrency: number;
  /** Bytes per second repairs may read from the peers; 0 = no limit. */
  readonly bytesPerSec: number;
  /** One repair or listing operation's deadline (ms). */
  readonly operationTimeoutMs: number;
}

/** The defaults of {@link CatchUpSettings}. */
export const DEFAULT_CATCH_UP: CatchUpSettings = Object.freeze({
  intervalMs: 10 * 60 * 1000,
  concurrency: 8,
  bytesPerSec: 32 * 1024 * 1024,
  operationTimeoutMs: 60_000,
});

/** setTimeout's longest delay: 2^31 − 1 ms (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Resolves after `ms` (any length: longer waits go in steps), or when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const end = Date.now() + ms;
    let timer = setTimeout(step, Math.min(ms, MAX_TIMER_MS));
    function step() {
      const left = end - Date.now();
      if (left <= 0) return done();
      timer = setTimeout(step, Math.min(left, MAX_TIMER_MS));
    }
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** A token bucket in bytes per second that may go into debt: `ready` waits until it is out of it. */
export class RateLimiter {
  #rate: number;
  #tokens = 0;
  #last = performance.now();

  /** `rate` bytes per second; 0 = unlimited. */
  constructor(rate: number) {
    this.#rate = rate;
    this.#tokens = rate;
  }

  get rate(): number {
    return this.#rate;
  }

  set rate(rate: number) {
    this.#refill();
    this.#rate = rate;
    this.#tokens = Math.min(this.#tokens, rate);
  }

  /** Spends `bytes` (after the fact: a repair's answers are counted as they arrive). */
  charge(bytes: number): void {
    if (this.#rate <= 0) return;
    this.#refill();
    this.#tokens -= bytes;
  }

  /** Resolves once the bucket is out of debt (at once when unlimited), or the signal aborts. */
  async ready(signal?: AbortSignal): Promise<void> {
    while (this.#rate > 0 && !signal?.aborted) {
      this.#refill();
      if (this.#tokens >= 0) return;
      await sleep(Math.max(1, Math.ceil((-this.#tokens / this.#rate) * 1000)), signal);
    }
  }

  #refill(): void {
    const now = performance.now();
    // A second's worth of burst.
    this.#tokens = Math.min(this.#rate, this.#tokens + ((now - this.#last) / 1000) * this.#rate);
    this.#last = now;
  }
}

/** Admits work by slots and by bytes; one piece of work always gets in. */
export class Gate {
  #slots = 0;
  #bytes = 0;
  readonly #waiting: { weight: number; go(): void }[] = [];

  constructor(
    readonly maxSlots: number,
    readonly maxBytes: number,
  ) {}

  get busy(): number {
    return this.#slots;
  }

  async enter(weight: number): Promise<() => void> {
    if (this.#waiting.length > 0 || !this.#fits(weight)) {
      // Counted in by #admit before it is woken.
      await new Promise<void>((go) => this.#waiting.push({ weight, go }));
    } else {
      this.#slots++;
      this.#bytes += weight;
    }
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.#slots--;
      this.#bytes -= weight;
      this.#admit();
    };
  }

  #admit(): void {
    while (this.#waiting.length > 0 && this.#fits(this.#waiting[0]!.weight)) {
      const next = this.#waiting.shift()!;
      this.#slots++;
      this.#bytes += next.weight;
      next.go();
    }
  }

  #fits(weight: number): boolean {
    return this.#slots === 0 || (this.#slots < this.maxSlots && this.#bytes + weight <= this.maxBytes);
  }
}

/** Runs `fn` over `items` with at most `width` at once; the first failure rejects after the running ones settle. */
export async function pool<T>(items: readonly T[], width: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  const worker = async () => {
    while (!failure && next < items.length) {
      const i = next++;
      try {
        await fn(items[i]!, i);
      } catch (err) {
        failure ??= { err };
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker));
  if (failure) throw failure.err;
}

/**
 * `base` with a memory of the large inputs it hashed (the last part of each, 64 KiB or
 * more): a repair hashes each fragment it reads (against the writer's checksum) and then
 * the same bytes again as part of the value it re-encodes. Equal bytes give equal hashes,
 * so a hit is checked by comparing the bytes (a memcmp), never assumed. One per operation:
 * it holds what that operation hashed.
 */
export function rememberingHashes(base: CryptoProvider): CryptoProvider {
  const seen: { prefix: string; bytes: Uint8Array; hash: Uint8Array }[] = [];
  const prefixOf = (parts: readonly Uint8Array[]) =>
    parts
      .slice(0, -1)
      .map((p) => toHex(p))
      .join('.');
  return {
    ...base,
    name: `${base.name}+remembering`,
    async sha256(parts) {
      const last = parts.at(-1);
      if (!last || last.length < 65536) return base.sha256(parts);
      const prefix = prefixOf(parts);
      for (const s of seen) {
        if (s.prefix === prefix && s.bytes.length === last.length && Buffer.compare(s.bytes, last) === 0) return s.hash;
      }
      const hash = await base.sha256(parts);
      seen.push({ prefix, bytes: last, hash });
      return hash;
    },
  };
}

/** Why a repair failed, as a metric label. */
export function failureReason(err: unknown): string {
  if (err instanceof PeerTimeout) return 'timeout';
  if (err instanceof ProtocolError) return err.code.toLowerCase();
  if (err instanceof StorageError || err instanceof ServerError) return 'storage';
  return 'internal';
}

/** What a repair did. */
export interface RepairSummary {
  /** `stored` or `rewritten` if any stripe was; `held` if every stripe was here; `superseded` if this server's `lc` moved past the version. */
  readonly outcome: RepairOutcome;
  /** Stripes stored or rewritten. */
  readonly entries: number;
  /** Fragment bytes stored or rewritten. */
  readonly bytes: number;
}

/** What a {@link Repairer} needs. */
export interface RepairerOptions {
  readonly config: ClusterConfig;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  /** Candidates' checks; shared with the catalog, whose pages verified the candidates repaired. */
  readonly verifier: CertificateVerifier;
  readonly index: number;
  readonly protocol: Server;
  readonly peers: PeerSet;
  readonly opId: () => number;
  readonly settings: CatchUpSettings;
  readonly metrics: HealMetrics;
  readonly log?: Logger;
}

/** Rebuilds this server's entries of completed writes from its peers (catch-up and scrub alike). */
export class Repairer {
  readonly limiter: RateLimiter;
  readonly gate: Gate;
  readonly #o: RepairerOptions;

  constructor(options: RepairerOptions) {
    this.#o = options;
    this.limiter = new RateLimiter(options.settings.bytesPerSec);
    this.gate = new Gate(options.settings.concurrency, HEAL_INFLIGHT_BYTES);
  }

  /**
   * Repairs `candidate` of `key` here: every stripe (or only `stripe`, for scrub), each one
   * stored (`rewrite`: written again over a damaged one) once proven. Rejects with the
   * operation's error (`VALUE_CHANGED`, `INCONSISTENT_ENCODING`, …) or a timeout.
   */
  async repair(
    key: string,
    candidate: Candidate,
    options: {
      readonly rewrite?: boolean;
      readonly stripe?: number;
      readonly sizeHint?: number | undefined;
      readonly signal?: AbortSignal;
      /** `candidate` is a write under way (`pendingCandidate`): checked by its certificate, stored above `lc`. */
      readonly pending?: boolean;
    },
  ): Promise<RepairSummary> {
    const rewrite = options.rewrite ?? false;
    const pending = options.pending ?? false;
    // Stripe 0's size is known only once it is read: a value up to 64 MiB may be one stripe
    // (its size is the estimate), a larger one is in stripes (a client's are 2 MiB).
    const hint = options.sizeHint ?? HEAL_INFLIGHT_BYTES;
    const first = await this.#stripe(
      key,
      candidate,
      0,
      undefined,
      hint <= HEAL_INFLIGHT_BYTES ? hint : STRIPE_ESTIMATE,
      options.signal,
      pending,
    );
    const layout = first.layout;
    let entries = 0;
    let bytes = 0;
    let superseded = false;
    const note = (outcome: RepairOutcome, fragmentBytes: number) => {
      if (outcome === 'stored' || outcome === 'rewritten') {
        entries++;
        bytes += fragmentBytes;
      } else if (outcome === 'superseded') superseded = true;
    };
    if (layout && options.stripe !== 0) {
      const stripes = options.stripe !== undefined ? [options.stripe] : Array.from({ length: layout.digests.length - 1 }, (_, i) => i + 1);
      await pool(stripes, this.#o.settings.concurrency, async (s) => {
        if (superseded) return;
        const r = await this.#stripe(key, candidate, s, layout, layout.stripeSize, options.signal, pending);
        note(await this.#store(key, candidate, r, { layout, rewrite, pending }), r.entry.fragment.length);
      });
    }
    if (!superseded && (options.stripe === undefined || options.stripe === 0)) {
      note(await this.#store(key, candidate, first, { rewrite, pending }), first.entry.fragment.length);
    }
    const outcome: RepairOutcome = superseded ? 'superseded' : entries > 0 ? (rewrite ? 'rewritten' : 'stored') : 'held';
    return { outcome, entries, bytes };
  }

  async #store(
    key: string,
    candidate: Candidate,
    r: RepairResult,
    options: { layout?: StripeLayout; rewrite: boolean; pending: boolean },
  ): Promise<RepairOutcome> {
    const started = performance.now();
    const outcome = await this.#o.protocol.storeRepaired(key, candidate, r.entry, options);
    this.#o.log?.debug({ key, stripe: r.entry.stripe, ms: Math.round(performance.now() - started), outcome }, 'repair store');
    return outcome;
  }

  async #stripe(
    key: string,
    candidate: Candidate,
    stripe: number,
    layout: StripeLayout | undefined,
    weight: number,
    signal: AbortSignal | undefined,
    pending: boolean,
  ): Promise<RepairResult> {
    const { config, crypto, codec, index, peers, settings, metrics, verifier } = this.#o;
    await this.limiter.ready(signal);
    // Spent now, as an estimate (a stripe's answers are about its size), and settled when
    // the answers are in: repairs starting together cannot all pass before the first is counted.
    this.limiter.charge(weight);
    const leave = await this.gate.enter(weight);
    try {
      if (signal?.aborted) throw new Error('stopped');
      const op = new RepairOperation(
        {
          config,
          crypto: rememberingHashes(crypto),
          codec,
          verifier,
          index,
          onEvidence: (server, reason) => peers.evidence(server, reason),
        },
        key,
        candidate,
        this.#o.opId(),
        { stripe, ...(layout ? { layout } : {}), ...(pending ? { pending } : {}) },
      );
      let fetched = 0;
      const started = performance.now();
      try {
        return await peers.run(op, {
          timeoutMs: settings.operationTimeoutMs,
          ...(signal ? { signal } : {}),
          onBytes: (b) => (fetched += b),
        });
      } finally {
        this.limiter.charge(fetched - weight);
        metrics.bytesFetched.inc(fetched);
        this.#o.log?.debug({ key, stripe, ms: Math.round(performance.now() - started), fetched, busy: this.gate.busy }, 'repair read');
      }
    } finally {
      leave();
    }
  }
}

/** One catch-up pass, as `/status` shows it. */
export interface PassReport {
  readonly started: string;
  finished?: string;
  seconds?: number;
  /** Whether it checked every key without a failure (`INCONSISTENT_ENCODING` aside: nothing can fix those). */
  complete?: boolean;
  /** Why it stopped early (the listing failed), if it did. */
  error?: string;
  keysChecked: number;
  /** Writes this server did not hold and stored from its peers. */
  writesRepaired: number;
  /** Keys whose entry was here but whose newer `lc` this server had missed. */
  lcUpdated: number;
  /**
   * While rebuilding: writes still under way at the peers that this server stored (it may
   * have signed receipts for them before it lost its disk), and those left alone because
   * too few peers listed them to ever complete with its old receipt.
   */
  pendingRepaired?: number;
  pendingSkipped?: number;
  /** Fragment bytes stored. */
  bytesRepaired: number;
  /** Keys not repaired, by reason. */
  readonly failures: Record<string, number>;
  /** The last key of the last page done: how far the pass is. */
  position?: string;
}

/** Catch-up's state, for `/status` and `powerstore-server status`. */
export interface CatchUpStatus {
  /** `off` (`--heal-interval-ms 0`), `rebuilding`, `catching-up` (a pass runs), `caught-up` (the last pass was complete), `behind` (it was not: retried soon), `starting`. */
  readonly state: 'off' | 'rebuilding' | 'catching-up' | 'caught-up' | 'behind' | 'starting';
  /** This server started on an empty data directory and no complete pass has ended since: it counts against t. */
  readonly rebuilding: boolean;
  /** When the data directory was created, while rebuilding. */
  readonly rebuildingSince?: string;
  readonly intervalMs: number;
  readonly concurrency: number;
  readonly bytesPerSec: number;
  /** The pass running now. */
  readonly pass?: PassReport;
  readonly lastPass?: PassReport;
  /** When the last complete pass ended. */
  readonly lastCompletePass?: string;
  /** When the next pass starts, between passes. */
  readonly nextPass?: string;
}

/** What a {@link CatchUp} needs. */
export interface CatchUpOptions {
  readonly config: ClusterConfig;
  /** This server's protocol index. */
  readonly index: number;
  readonly protocol: Server;
  readonly peers: PeerSet;
  readonly handleSelf: (request: Request) => Promise<Reply>;
  readonly catalog: Catalog;
  readonly repairer: Repairer;
  readonly settings: CatchUpSettings;
  readonly metrics: HealMetrics;
  readonly log: Logger;
  /** When this server's data directory was created, if it is still rebuilding (the `m:fresh` marker). */
  readonly rebuildingSince: number | undefined;
  /** Clears the rebuild marker once a complete pass ended. */
  readonly rebuilt: () => Promise<void>;
}

const tsText = (c: Candidate) => ({ ts: c.ts.num, writer: toHex(c.ts.writerId).slice(0, 16), delete: c.cert.tombstone });

/** The catch-up loop; see the module comment. */
export class CatchUp {
  readonly #o: CatchUpOptions;
  readonly #stop = new AbortController();
  #rebuildingSince: number | undefined;
  #pass: PassReport | undefined;
  #last: PassReport | undefined;
  #lastComplete: number | undefined;
  #next: number | undefined;
  #loop: Promise<void> | undefined;
  /** Writes completed here whose entry this server missed, by key, repaired after {@link MISSED_GRACE_MS}. */
  #missed = new Map<string, Candidate>();
  #missedTimer: ReturnType<typeof setTimeout> | undefined;
  #missedRun: Promise<void> | undefined;
  /** Whether a rebuilding pass found a write this server lacks, and said so (once per process). */
  #warnedLacking = false;

  constructor(options: CatchUpOptions) {
    this.#o = options;
    this.#rebuildingSince = options.rebuildingSince;
    options.metrics.rebuilding.set(this.rebuilding ? 1 : 0);
  }

  get rebuilding(): boolean {
    return this.#rebuildingSince !== undefined;
  }

  /**
   * A rebuilding pass is about to repair a write its peers hold and this server lacks: the
   * directory that started empty was not a new cluster's (a lost disk, a wiped directory,
   * a server added to a cluster holding data). Said once, as a warning: until the pass
   * completes this server counts against t. A new cluster's servers never get here.
   */
  #lacking(key: string, candidate: Candidate): void {
    if (!this.rebuilding || this.#warnedLacking) return;
    this.#warnedLacking = true;
    this.#o.log.warn(
      { key, ...tsText(candidate), since: new Date(this.#rebuildingSince!).toISOString() },
      'this server started on an empty data directory (a new server, or a lost disk) and its peers hold writes it lacks: it is rebuilding from its peers and counts against t until its first complete catch-up pass',
    );
  }

  /** Starts the loop: a pass now, then one every interval (unless catch-up is off). */
  start(): void {
    if (this.#o.settings.intervalMs <= 0 || this.#loop) return;
    this.#loop = this.#run().catch((err: unknown) => this.#o.log.error({ err }, 'catch-up stopped unexpectedly'));
  }

  /** Stops the loop; a repair in flight is abandoned. */
  async stop(): Promise<void> {
    this.#stop.abort();
    clearTimeout(this.#missedTimer);
    await this.#loop;
    await this.#missedRun;
  }

  /**
   * `lc` of `key` moved to `candidate` here, and this server does not hold its entry (it
   * missed the STORE, or lost it with its disk): repaired after {@link MISSED_GRACE_MS},
   * unless it arrived meanwhile, so a write completed elsewhere is back here within seconds
   * rather than at the next pass. At most {@link MAX_MISSED} wait; the pass finds the rest.
   */
  missed(key: string, candidate: Candidate): void {
    if (this.#o.settings.intervalMs <= 0 || this.#stop.signal.aborted) return;
    const queued = this.#missed.get(key);
    if (queued ? compareTimestamps(candidate.ts, queued.ts) <= 0 : this.#missed.size >= MAX_MISSED) return;
    this.#missed.set(key, candidate);
    this.#armMissed();
  }

  /** Repairs the queued missed writes after {@link MISSED_GRACE_MS}, unless a timer or a batch is already under way. */
  #armMissed(): void {
    this.#missedTimer ??= setTimeout(() => {
      this.#missedRun = this.#repairMissed().finally(() => {
        this.#missedTimer = undefined;
        this.#missedRun = undefined;
        // Writes missed while these were repaired wait their own grace.
        if (this.#missed.size > 0 && !this.#stop.signal.aborted) this.#armMissed();
      });
    }, MISSED_GRACE_MS);
  }

  /** Whether `candidate` of `key` needs no repair here: this server holds it, or its `lc` has passed it. */
  async #needsNoRepair(key: string, candidate: Candidate): Promise<boolean> {
    const own = await this.#ownLc(key);
    return (own !== undefined && compareTimestamps(own.ts, candidate.ts) > 0) || (await this.#o.protocol.holds(key, candidate.ts));
  }

  async #repairMissed(): Promise<void> {
    const batch = [...this.#missed];
    this.#missed.clear();
    const { repairer, metrics, log, settings } = this.#o;
    const signal = this.#stop.signal;
    await pool(batch, settings.concurrency, async ([key, candidate]) => {
      if (signal.aborted) return;
      try {
        if (await this.#needsNoRepair(key, candidate)) return;
        const r = await repairer.repair(key, candidate, { signal });
        if (r.outcome !== 'stored') return;
        metrics.writesRepaired.inc({ cause: 'complete' });
        metrics.bytesRepaired.inc({ cause: 'complete' }, r.bytes);
        log.info(
          { key, ...tsText(candidate), stripes: r.entries, bytes: r.bytes },
          'catch-up: repaired a write that completed here without its STORE',
        );
      } catch (err) {
        if (signal.aborted) return;
        const reason = failureReason(err);
        // Overwritten and collected meanwhile: whatever replaced it is the pass's to check.
        if (reason !== 'value_changed') this.#failed(key, candidate, 'repair of a missed write', reason, err);
      }
    });
    this.#o.peers.release();
  }

  status(): CatchUpStatus {
    const { intervalMs, concurrency, bytesPerSec } = this.#o.settings;
    const state: CatchUpStatus['state'] =
      intervalMs <= 0
        ? 'off'
        : this.rebuilding
          ? 'rebuilding'
          : this.#pass
            ? 'catching-up'
            : !this.#last
              ? 'starting'
              : this.#last.complete
                ? 'caught-up'
                : 'behind';
    const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString());
    return {
      state,
      rebuilding: this.rebuilding,
      ...(this.#rebuildingSince !== undefined ? { rebuildingSince: iso(this.#rebuildingSince)! } : {}),
      intervalMs,
      concurrency,
      bytesPerSec,
      ...(this.#pass ? { pass: { ...this.#pass, failures: { ...this.#pass.failures } } } : {}),
      ...(this.#last ? { lastPass: this.#last } : {}),
      ...(this.#lastComplete !== undefined ? { lastCompletePass: iso(this.#lastComplete)! } : {}),
      ...(this.#next !== undefined && !this.#pass ? { nextPass: iso(this.#next)! } : {}),
    };
  }

  async #run(): Promise<void> {
    const { intervalMs } = this.#o.settings;
    let retry = RETRY_MIN_MS;
    while (!this.#stop.signal.aborted) {
      const report = await this.runPass();
      if (this.#stop.signal.aborted) break;
      const wait = report.complete ? intervalMs : Math.min(intervalMs, retry);
      retry = report.complete ? RETRY_MIN_MS : Math.min(intervalMs, retry * 2);
      this.#next = Date.now() + wait;
      await sleep(wait, this.#stop.signal);
      this.#next = undefined;
    }
  }

  /** One pass over every key of the catalog (exported for tests; the loop calls it). */
  async runPass(): Promise<PassReport> {
    const { metrics, log, settings } = this.#o;
    const signal = this.#stop.signal;
    const rebuilding = this.rebuilding;
    const started = Date.now();
    const report: PassReport = {
      started: new Date(started).toISOString(),
      keysChecked: 0,
      writesRepaired: 0,
      lcUpdated: 0,
      bytesRepaired: 0,
      failures: {},
    };
    this.#pass = report;
    metrics.passRunning.set(1);
    metrics.passKeys.set(0);
    log.info({ rebuilding }, 'catch-up pass started');
    let failed = 0;
    try {
      let after = '';
      for (;;) {
        const page = await this.#page(after, rebuilding, signal);
        await pool(page.entries, settings.concurrency, async (entry) => {
          if (signal.aborted) return;
          const outcome = await this.#checkKey(entry, signal);
          report.keysChecked++;
          metrics.keysChecked.inc();
          metrics.passKeys.set(report.keysChecked);
          if (outcome.kind === 'repaired') {
            report.writesRepaired++;
            report.bytesRepaired += outcome.bytes;
          } else if (outcome.kind === 'lc') report.lcUpdated++;
          else if (outcome.kind === 'failed') {
            report.failures[outcome.reason] = (report.failures[outcome.reason] ?? 0) + 1;
            if (outcome.reason !== 'inconsistent_encoding') failed++;
          }
        });
        if (signal.aborted) throw new Error('stopped');
        if (page.cursor === undefined) break;
        after = page.cursor;
        report.position = after;
      }
      if (rebuilding) failed += await this.#pendingWrites(report, signal);
      report.complete = failed === 0;
    } catch (err) {
      report.complete = false;
      report.error = signal.aborted ? 'stopped' : (err as Error).message;
    }
    const finished = Date.now();
    report.finished = new Date(finished).toISOString();
    report.seconds = (finished - started) / 1000;
    this.#pass = undefined;
    this.#last = report;
    // Between passes this server holds no slot in its peers' connection limits.
    this.#o.peers.release();
    metrics.passRunning.set(0);
    metrics.passKeys.set(0);
    metrics.lastPassSeconds.set(report.seconds);
    metrics.passes.inc({ result: report.complete ? 'complete' : report.error ? 'failed' : 'incomplete' });
    const summary = {
      keysChecked: report.keysChecked,
      writesRepaired: report.writesRepaired,
      lcUpdated: report.lcUpdated,
      bytesRepaired: report.bytesRepaired,
      failures: report.failures,
      seconds: report.seconds,
    };
    if (report.complete) {
      this.#lastComplete = finished;
      metrics.lastCompletePass.set(finished / 1000);
      if (rebuilding) {
        await this.#o.rebuilt();
        this.#rebuildingSince = undefined;
        metrics.rebuilding.set(0);
        if (report.keysChecked === 0 && !report.pendingRepaired) {
          log.info(summary, 'rebuild complete: the cluster holds no data yet, nothing to rebuild');
        } else log.info(summary, 'rebuild complete: this server holds its fragment of every completed write its peers list');
      } else log.info(summary, 'catch-up pass complete');
    } else if (!signal.aborted) {
      log.warn({ ...summary, error: report.error }, 'catch-up pass incomplete; retrying soon');
    }
    return report;
  }

  async #page(after: string, rebuilding: boolean, signal: AbortSignal) {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#o.catalog.page(after, { signal, ...(rebuilding ? { peersFirst: PEERS_FIRST_MS } : {}) });
      } catch (err) {
        if (signal.aborted || attempt >= PAGE_ATTEMPTS) throw err;
        this.#o.log.warn({ err: (err as Error).message, after, attempt }, 'listing the cluster failed; trying again');
        await sleep(1000 * attempt, signal);
      }
    }
  }

  /**
   * A rebuilding server's second part: the writes under way at its peers (PENDING), which it
   * may have signed receipts for before its disk was lost (`pending.ts` in the protocol).
   * Every peer is asked for all its pages; each write `mustRepair` names is repaired unless
   * this server holds it or its `lc` has passed it. Returns the failures, which keep the
   * pass incomplete (and the server rebuilding): too few peers listed everything, or a
   * repair failed. A write that completed or was collected meanwhile (`VALUE_CHANGED`) is
   * no failure: the catalog of a later pass has it, or nothing does.
   */
  async #pendingWrites(report: PassReport, signal: AbortSignal): Promise<number> {
    const { config, index, catalog, repairer, metrics, log, settings } = this.#o;
    report.pendingRepaired = 0;
    report.pendingSkipped = 0;
    const writes = new PendingWrites();
    const peers = Array.from({ length: config.n }, (_, i) => i).filter((i) => i !== index);
    const listed = await Promise.all(
      peers.map(async (peer) => {
        let after = '';
        let count = 0;
        try {
          for (;;) {
            const page = await catalog.pendingPage(peer, after, { signal });
            count += page.entries.length;
            if (count > MAX_PENDING_LISTED) {
              log.warn(
                { peer, listed: count },
                'rebuild: a peer lists more writes under way than a rebuild takes from one; its list does not count',
              );
              return false;
            }
            writes.add(peer, page.entries);
            if (page.cursor === undefined) return true;
            after = page.cursor;
          }
        } catch (err) {
          if (!signal.aborted) log.warn({ peer, err: (err as Error).message }, 'rebuild: listing the writes under way at a peer failed');
          return false;
        }
      }),
    );
    if (signal.aborted) throw new Error('stopped');
    const complete = listed.filter(Boolean).length;
    if (mustRepair(config, 0, complete) === undefined) {
      report.failures.pending_unlisted = (report.failures.pending_unlisted ?? 0) + 1;
      metrics.failures.inc({ reason: 'pending_unlisted' });
      log.warn({ peersListed: complete, needed: 2 * config.t }, 'rebuild: too few peers listed their writes under way; trying again');
      return 1;
    }
    let failed = 0;
    await pool(writes.all(), settings.concurrency, async (w) => {
      if (signal.aborted) return;
      const { key, candidate } = w;
      if (!mustRepair(config, w.listedBy.size, complete)) {
        report.pendingSkipped!++;
        return;
      }
      try {
        if (await this.#needsNoRepair(key, candidate)) return;
        this.#lacking(key, candidate);
        const r = await repairer.repair(key, candidate, { sizeHint: w.size, signal, pending: true });
        if (r.outcome !== 'stored') return;
        report.pendingRepaired!++;
        report.bytesRepaired += r.bytes;
        metrics.writesRepaired.inc({ cause: 'pending' });
        metrics.bytesRepaired.inc({ cause: 'pending' }, r.bytes);
        log.info({ key, ...tsText(candidate), stripes: r.entries, bytes: r.bytes }, 'rebuild: repaired a write still under way');
      } catch (err) {
        if (signal.aborted) return;
        const reason = failureReason(err);
        if (reason === 'value_changed') return;
        this.#failed(key, candidate, 'repair of a write under way', reason, err);
        report.failures[reason] = (report.failures[reason] ?? 0) + 1;
        if (reason !== 'inconsistent_encoding') failed++;
      }
    });
    return failed;
  }

  /** This server's `lc` of `key`. */
  async #ownLc(key: string): Promise<Candidate | undefined> {
    const reply = await this.#o.handleSelf({ type: 'COLLECT', key, opId: 0 });
    return reply.type === 'COLLECT_ACK' ? reply.candidate : undefined;
  }

  async #checkKey(
    entry: CatalogEntry,
    signal: AbortSignal,
  ): Promise<{ kind: 'ok' | 'lc' } | { kind: 'repaired'; bytes: number } | { kind: 'failed'; reason: string }> {
    const { protocol, repairer, catalog, metrics, log } = this.#o;
    const { key } = entry;
    let target: Candidate | undefined = entry.candidate;
    let size = entry.size;
    for (let attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
      try {
        const own = await this.#ownLc(key);
        if (own && (!target || compareTimestamps(own.ts, target.ts) > 0)) target = own;
        if (!target) return { kind: 'ok' };
        if (await protocol.holds(key, target.ts)) {
          if (own && compareTimestamps(own.ts, target.ts) >= 0) return { kind: 'ok' };
          // The entry is here; only its COMPLETE was missed.
          await this.#o.handleSelf({ type: 'COMPLETE', key, opId: 0, candidate: target });
          metrics.lcUpdated.inc();
          log.info({ key, ...tsText(target) }, 'catch-up: wrote back a completed write whose COMPLETE this server missed');
          return { kind: 'lc' };
        }
        this.#lacking(key, target);
        const r = await repairer.repair(key, target, { sizeHint: size, signal });
        if (r.outcome === 'superseded') {
          // This server's lc moved past it meanwhile: look again.
          target = undefined;
          continue;
        }
        if (r.outcome === 'held') return { kind: 'ok' };
        metrics.writesRepaired.inc({ cause: 'catch_up' });
        metrics.bytesRepaired.inc({ cause: 'catch_up' }, r.bytes);
        log.info({ key, ...tsText(target), stripes: r.entries, bytes: r.bytes }, 'catch-up: repaired a write this server did not hold');
        return { kind: 'repaired', bytes: r.bytes };
      } catch (err) {
        if (signal.aborted) return { kind: 'failed', reason: 'stopped' };
        const reason = failureReason(err);
        if (reason === 'value_changed' && attempt + 1 < MAX_ATTEMPTS) {
          // A newer write completed and the version was collected: repair that one.
          try {
            const fresh = await catalog.lookup(key, { signal });
            target = fresh?.candidate;
            size = fresh?.size;
          } catch (lookupErr) {
            return this.#failed(key, target, 'lookup', failureReason(lookupErr), lookupErr);
          }
          continue;
        }
        return this.#failed(key, target, 'repair', reason, err);
      }
    }
    return this.#failed(key, target, 'repair', 'value_changed', new Error('the key kept changing'));
  }

  #failed(key: string, target: Candidate | undefined, what: string, reason: string, err: unknown): { kind: 'failed'; reason: string } {
    this.#o.metrics.failures.inc({ reason });
    const fields = { key, ...(target ? tsText(target) : {}), reason, err: (err as Error).message };
    if (reason === 'inconsistent_encoding') {
      this.#o.log.error(fields, 'catch-up: the writer of this version encoded it inconsistently; nothing stored');
    } else this.#o.log.warn(fields, `catch-up: ${what} failed`);
    return { kind: 'failed', reason };
  }
}
