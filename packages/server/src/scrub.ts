/**
 * Self-healing, scrub side: finds stored fragments that no longer match their hash
 * (bitrot, a damaged disk, a LevelDB file that reads back wrong) before a reader needs
 * them, and repairs them from the peers.
 *
 * It walks every stored history entry (`LevelStorage.historyEntries`, the `h:` records) in
 * key order, from a random point at the first start and then from where it stopped (the
 * `m:scrub` marker, so restarts do not restart it), and asks the protocol to re-hash each
 * fragment against its cross-checksum (`Server.scrub`). What it finds:
 *
 * - `damaged` with `lc`: the key's latest completed write is damaged here. It is rebuilt
 *   from the peers (`RepairOperation`, as catch-up does) and written again in place
 *   (`Server.storeRepaired` with `rewrite`), then scrubbed again to confirm.
 * - `dropped`: a damaged older version below `lc`, deleted as garbage collection could
 *   have (readers never need it: a newer write completed).
 * - `damaged` without `lc`: a write under way (above `lc`), kept until its writer completes
 *   or it is collected; counted and logged.
 * - the storage cannot read the entry (LevelDB reports corruption, or a record does not
 *   decode): treated as damaged, as above.
 *
 * Reads are limited to `bytesPerSec` (by default the stored bytes over the scrub period, so
 * a full scrub takes about `periodMs`: a month at a tranquil rate), and a pass starts no
 * sooner than `periodMs` after the previous one started.
 */
import { randomInt } from 'node:crypto';
import type { Logger } from 'pino';
import { compareKeys, toHex, type Server, type ScrubOutcome } from '@powerstore/protocol';
import type { HealMetrics } from './heal-metrics.js';
import { failureReason, RateLimiter, sleep, type Repairer } from './heal.js';
import type { LevelStorage } from './level-storage.js';

/** Scrub settings an operator sets (`powerstore-server start --scrub-…`). */
export interface ScrubSettings {
  /** A full scrub every this long (ms); 0 turns scrub off. */
  readonly periodMs: number;
  /** Bytes per second scrub reads; 0 = the stored bytes over the period (at least {@link MIN_AUTO_SCRUB_RATE}). */
  readonly bytesPerSec: number;
}

/** The defaults of {@link ScrubSettings}: a full scrub every 30 days, at the rate that takes. */
export const DEFAULT_SCRUB: ScrubSettings = Object.freeze({ periodMs: 30 * 24 * 60 * 60 * 1000, bytesPerSec: 0 });

/** The slowest automatic rate: 64 KiB/s, about 5 GiB a day. */
export const MIN_AUTO_SCRUB_RATE = 64 * 1024;
/** How often the position is saved (ms). */
const SAVE_EVERY_MS = 30_000;
/** The first pass after start-up waits this long (ms), so a restart does not read the disk at once. */
const FIRST_DELAY_MS = 5_000;

/** Scrub's state, for `/status`. */
export interface ScrubStatus {
  readonly enabled: boolean;
  readonly periodMs: number;
  /** The rate in force (the automatic one, if no rate was set). */
  readonly bytesPerSec: number;
  /** The running pass: when it started, fragments checked so far. */
  readonly pass?: { readonly started: string; readonly fragments: number; readonly bytes: number };
  readonly lastPassFinished?: string;
  /** Since this process started. */
  readonly fragments: number;
  readonly damaged: number;
  readonly repaired: number;
  readonly unrepaired: number;
}

interface Saved {
  /** Where the running pass started (an `h:` record's name, `''` for the beginning). */
  start: string;
  /** The last entry done. */
  cursor: string;
  passStarted: number;
  lastPassFinished?: number;
}

/** What a {@link Scrubber} needs. */
export interface ScrubberOptions {
  readonly protocol: Server;
  readonly storage: LevelStorage;
  readonly repairer: Repairer;
  readonly settings: ScrubSettings;
  readonly metrics: HealMetrics;
  readonly log: Logger;
  /** Bytes stored, for the automatic rate. */
  readonly storedBytes: () => number;
}

/** The scrub loop; see the module comment. */
export class Scrubber {
  readonly #o: ScrubberOptions;
  readonly #stop = new AbortController();
  readonly #limiter: RateLimiter;
  #loop: Promise<void> | undefined;
  #pass: { started: number; fragments: number; bytes: number } | undefined;
  #lastFinished: number | undefined;
  readonly #totals = { fragments: 0, damaged: 0, repaired: 0, unrepaired: 0 };

  constructor(options: ScrubberOptions) {
    this.#o = options;
    this.#limiter = new RateLimiter(options.settings.bytesPerSec || MIN_AUTO_SCRUB_RATE);
  }

  start(): void {
    if (this.#o.settings.periodMs <= 0 || this.#loop) return;
    this.#loop = this.#run().catch((err: unknown) => this.#o.log.error({ err }, 'scrub stopped unexpectedly'));
  }

  async stop(): Promise<void> {
    this.#stop.abort();
    await this.#loop;
  }

  status(): ScrubStatus {
    const iso = (ms: number) => new Date(ms).toISOString();
    return {
      enabled: this.#o.settings.periodMs > 0,
      periodMs: this.#o.settings.periodMs,
      bytesPerSec: this.#limiter.rate,
      ...(this.#pass ? { pass: { started: iso(this.#pass.started), fragments: this.#pass.fragments, bytes: this.#pass.bytes } } : {}),
      ...(this.#lastFinished !== undefined ? { lastPassFinished: iso(this.#lastFinished) } : {}),
      ...this.#totals,
    };
  }

  /** The rate for a pass: the one set, or the stored bytes over the period. */
  #rate(): number {
    const { bytesPerSec, periodMs } = this.#o.settings;
    if (bytesPerSec > 0) return bytesPerSec;
    return Math.max(MIN_AUTO_SCRUB_RATE, Math.ceil(this.#o.storedBytes() / (periodMs / 1000)));
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    const { storage, log, settings } = this.#o;
    await sleep(Math.min(FIRST_DELAY_MS, settings.periodMs), signal);
    let saved = (await storage.getMarker('scrub').catch(() => undefined)) as Saved | undefined;
    if (!saved || typeof saved.start !== 'string' || typeof saved.cursor !== 'string') saved = undefined;
    this.#lastFinished = saved?.lastPassFinished;
    while (!signal.aborted) {
      // A pass starts no sooner than a period after the previous one started.
      if (saved?.lastPassFinished !== undefined && saved.cursor === saved.start) {
        const due = saved.passStarted + settings.periodMs;
        if (due > Date.now()) await sleep(due - Date.now(), signal);
        if (signal.aborted) break;
      }
      if (!saved || saved.cursor === saved.start) {
        // A new pass, from a random point the first time (so servers started together do
        // not all read the same keys at once), then from where the last one ended.
        const start = saved?.start ?? randomStart();
        saved = {
          start,
          cursor: start,
          passStarted: Date.now(),
          ...(saved?.lastPassFinished ? { lastPassFinished: saved.lastPassFinished } : {}),
        };
      }
      this.#limiter.rate = this.#rate();
      try {
        saved = await this.#walk(saved, signal);
      } catch (err) {
        log.error({ err: (err as Error).message }, 'scrub: reading the stored entries failed; trying again later');
        await sleep(60_000, signal);
      }
    }
  }

  /** Walks from `saved.cursor` round to `saved.start`; returns the state to save. */
  async #walk(saved: Saved, signal: AbortSignal): Promise<Saved> {
    const { storage, metrics, log } = this.#o;
    this.#pass = { started: saved.passStarted, fragments: 0, bytes: 0 };
    metrics.scrubPassFragments.set(0);
    let lastSave = Date.now();
    const save = async (s: Saved) => {
      await storage.setMarker('scrub', s).catch((err: unknown) => log.warn({ err }, 'scrub: could not save its position'));
      lastSave = Date.now();
    };
    // From the cursor to the end, then (when it started in the middle) from the beginning back to the start.
    const wrapped = saved.start !== '' && (saved.cursor === saved.start || compareKeys(saved.cursor, saved.start) > 0);
    const legs: { from: string; until: string | undefined }[] = wrapped
      ? [
          { from: saved.cursor, until: undefined },
          { from: '', until: saved.start },
        ]
      : [{ from: saved.cursor, until: saved.start === '' ? undefined : saved.start }];
    for (const leg of legs) {
      for await (const ref of storage.historyEntries(leg.from)) {
        if (signal.aborted) {
          await save(saved);
          return saved;
        }
        if (leg.until !== undefined && compareKeys(ref.cursor, leg.until) > 0) break;
        await this.#limiter.ready(signal);
        await this.#one(ref.key, ref.ts, ref.stripe, ref.fragmentLength, signal);
        this.#limiter.charge(ref.fragmentLength ?? 0);
        this.#pass.fragments++;
        this.#pass.bytes += ref.fragmentLength ?? 0;
        saved = { ...saved, cursor: ref.cursor };
        if (Date.now() - lastSave > SAVE_EVERY_MS) await save(saved);
      }
    }
    const finished = Date.now();
    this.#lastFinished = finished;
    this.#pass = undefined;
    metrics.scrubPasses.inc();
    metrics.scrubPassFragments.set(0);
    // The next pass starts where this one did: every entry once per period.
    const next: Saved = { start: saved.start, cursor: saved.start, passStarted: saved.passStarted, lastPassFinished: finished };
    await save(next);
    log.info({ seconds: (finished - saved.passStarted) / 1000, ...this.#totals }, 'scrub pass complete');
    return next;
  }

  async #one(
    key: string,
    ts: { num: number; writerId: Uint8Array },
    stripe: number,
    length: number | undefined,
    signal: AbortSignal,
  ): Promise<void> {
    const { protocol, repairer, metrics, log } = this.#o;
    const version = { key, ts: ts.num, writer: toHex(ts.writerId).slice(0, 16), stripe };
    let outcome: ScrubOutcome;
    try {
      outcome = await protocol.scrub(key, ts, stripe);
    } catch (err) {
      if (signal.aborted) return;
      // The key's own record cannot be read: nothing here can say which version it is.
      this.#totals.damaged++;
      this.#totals.unrepaired++;
      metrics.scrubDamaged.inc({ kind: 'unreadable' });
      log.error({ ...version, err: (err as Error).message }, 'scrub: the storage cannot read this key; it needs attention');
      return;
    }
    this.#totals.fragments++;
    metrics.scrubbed.inc();
    metrics.scrubBytes.inc(length ?? 0);
    if (this.#pass) metrics.scrubPassFragments.set(this.#pass.fragments + 1);
    if (outcome.status !== 'damaged') {
      if (outcome.status !== 'dropped') return;
      this.#totals.damaged++;
      metrics.scrubDamaged.inc({ kind: 'dropped' });
      log.warn(version, 'scrub: an older version was damaged here; deleted (a newer write completed)');
      return;
    }
    this.#totals.damaged++;
    if (!outcome.lc) {
      this.#totals.unrepaired++;
      metrics.scrubDamaged.inc({ kind: 'pending' });
      log.warn(version, 'scrub: a write under way is damaged here; kept until it completes or is collected');
      return;
    }
    metrics.scrubDamaged.inc({ kind: 'lc' });
    log.warn(version, 'scrub: the latest completed write of this key is damaged here; repairing it from the peers');
    try {
      const r = await repairer.repair(key, outcome.lc, { rewrite: true, stripe, sizeHint: length, signal });
      if (r.outcome === 'superseded') {
        log.info(version, 'scrub: a newer write completed meanwhile; the damaged version is no longer needed');
        return;
      }
      const again = await protocol.scrub(key, ts, stripe);
      if (again.status !== 'intact') throw new Error(`still ${again.status} after the repair`);
      this.#totals.repaired++;
      metrics.scrubRepaired.inc();
      metrics.writesRepaired.inc({ cause: 'scrub' });
      metrics.bytesRepaired.inc({ cause: 'scrub' }, r.bytes);
      log.warn({ ...version, bytes: r.bytes }, 'scrub: repaired a damaged fragment');
    } catch (err) {
      this.#totals.unrepaired++;
      const reason = failureReason(err);
      metrics.failures.inc({ reason });
      log.error(
        { ...version, reason, err: (err as Error).message },
        'scrub: could not repair a damaged fragment; it is tried again next pass',
      );
    }
  }
}

/** A random point in the `h:` records to start the first pass at. */
function randomStart(): string {
  // `h:<length of the key>:…`: lengths spread the start over the keys roughly.
  return `h:${randomInt(1, 64)}:`;
}
