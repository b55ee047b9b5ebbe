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
import { compareKeys, toHex, type Candidate, type Server, type ScrubOutcome } from '@powerstore/protocol';
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

/**
 * The start check (`powerstore-server start --start-check-…`): at start-up, before the
 * server listens, scrub's check of stored fragments against their hash, over as much of
 * the store as this budget allows (continuing where the previous start's check stopped),
 * so damage in LevelDB's files is reported at start rather than found by a reader.
 */
export interface StartCheckSettings {
  /** Fragment bytes it reads at most; 0 turns the start check off. */
  readonly maxBytes: number;
  /** How long it may take (ms). */
  readonly maxMs: number;
}

/** The defaults of {@link StartCheckSettings}: at most 1 GiB of fragments and 10 s. */
export const DEFAULT_START_CHECK: StartCheckSettings = Object.freeze({ maxBytes: 1024 * 1024 * 1024, maxMs: 10_000 });

/** What the start check found, for `/status` (`heal.startCheck`) and `/healthz`. */
export interface StartCheckStatus {
  readonly enabled: boolean;
  /** Stored entries checked (one per stripe) and their fragment bytes. */
  readonly fragments: number;
  readonly bytes: number;
  readonly seconds: number;
  /** Whether it covered every stored entry; if not, the next start continues where it stopped (scrub covers all in time). */
  readonly complete: boolean;
  /** Damaged entries by kind: `lc` (a key's latest write: repaired from the peers), `pending` (a write under way: kept), `dropped` (an older version: deleted), `unreadable` (LevelDB cannot read the records). */
  readonly damaged: { readonly lc: number; readonly pending: number; readonly dropped: number; readonly unreadable: number };
  /** Bytes of its write-ahead log LevelDB dropped as damaged at open (the server then rebuilds from its peers). */
  readonly logDroppedBytes: number;
  /** Damaged `lc` fragments repaired since. */
  readonly repaired: number;
  /** Damage not repaired yet: `lc` fragments still to repair, and unreadable records (which need an operator). */
  readonly unrepaired: number;
  /** LevelDB stopped the walk itself (a damaged table block): its message. */
  readonly error?: string;
}

/** A damaged fragment of a key's latest write found by the start check, to repair. */
interface Found {
  readonly key: string;
  readonly ts: { num: number; writerId: Uint8Array };
  readonly stripe: number;
  readonly length: number | undefined;
  readonly lc: Candidate;
}

/** Damaged entries the start check names one by one in the log; it counts the rest. */
const START_CHECK_LOGGED = 20;
/** How often a long start check logs its progress (ms). */
const START_CHECK_PROGRESS_MS = 5_000;

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
  #startCheck: StartCheckStatus | undefined;
  /** Damaged `lc` fragments the start check found and not yet repaired. */
  #found: Found[] = [];
  #repairing: Promise<void> | undefined;

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
    await this.#repairing;
  }

  /** What the start check found (`undefined` before it ran). */
  get startCheck(): StartCheckStatus | undefined {
    return this.#startCheck;
  }

  /**
   * The start check ({@link StartCheckSettings}): walks the stored entries from where the
   * previous start's check stopped (the `m:start-check` marker), re-hashing each fragment
   * as scrub does (`Server.scrub`), until every entry is done or the budget is spent; logs
   * one line with what it found. Damaged fragments of keys' latest writes are repaired from
   * the peers afterwards ({@link repairFound}), not here: the peers may not be up yet.
   * `logDroppedBytes` is what LevelDB dropped from its log at open, reported alongside.
   */
  async checkAtStart(budget: StartCheckSettings, logDroppedBytes = 0): Promise<StartCheckStatus> {
    const { storage, log, metrics } = this.#o;
    const damaged = { lc: 0, pending: 0, dropped: 0, unreadable: 0 };
    const started = Date.now();
    let fragments = 0;
    let bytes = 0;
    let complete = false;
    let error: string | undefined;
    if (budget.maxBytes > 0) {
      const saved = (await storage.getMarker('start-check').catch(() => undefined)) as { cursor?: unknown } | undefined;
      const from = typeof saved?.cursor === 'string' ? saved.cursor : '';
      let cursor = from;
      let lastProgress = started;
      let logged = 0;
      const legs = walkLegs(from, from);
      try {
        walk: for (const leg of legs) {
          for await (const ref of storage.historyEntries(leg.from)) {
            if (leg.until !== undefined && compareKeys(ref.cursor, leg.until) > 0) break;
            if (bytes >= budget.maxBytes || Date.now() - started >= budget.maxMs || this.#stop.signal.aborted) break walk;
            const kind = await this.#inspect(
              ref.key,
              ref.ts,
              ref.stripe,
              ref.fragmentLength,
              logged < START_CHECK_LOGGED ? 'warn' : 'debug',
            );
            fragments++;
            bytes += ref.fragmentLength ?? 0;
            cursor = ref.cursor;
            if (kind !== 'intact' && kind !== 'absent') {
              logged++;
              damaged[kind.kind]++;
              if (kind.kind === 'lc')
                this.#found.push({ key: ref.key, ts: ref.ts, stripe: ref.stripe, length: ref.fragmentLength, lc: kind.lc });
            }
            if (Date.now() - lastProgress >= START_CHECK_PROGRESS_MS) {
              lastProgress = Date.now();
              log.info(
                { fragments, bytes, seconds: (lastProgress - started) / 1000, budget },
                'start check: still checking stored fragments',
              );
            }
          }
          // This leg ran to its end: the walk from `from` is whole once the last leg is.
          if (leg === legs[legs.length - 1]) complete = true;
        }
      } catch (err) {
        // LevelDB cannot read past a damaged table block: nothing after it can be walked here.
        error = (err as Error).message;
        damaged.unreadable++;
        metrics.scrubDamaged.inc({ kind: 'unreadable' });
      }
      await storage
        .setMarker('start-check', { cursor: complete || error ? from : cursor })
        .catch((err: unknown) => log.warn({ err }, 'start check: could not save where it stopped'));
    }
    const seconds = (Date.now() - started) / 1000;
    const status: StartCheckStatus = {
      enabled: budget.maxBytes > 0,
      fragments,
      bytes,
      seconds,
      complete,
      damaged,
      logDroppedBytes,
      repaired: 0,
      unrepaired: damaged.lc + damaged.unreadable,
      ...(error !== undefined ? { error } : {}),
    };
    this.#startCheck = status;
    metrics.startCheckFragments.set(fragments);
    metrics.startCheckComplete.set(complete ? 1 : 0);
    for (const [kind, count] of Object.entries(damaged)) metrics.startCheckDamaged.set({ kind }, count);
    metrics.startCheckDamaged.set({ kind: 'log' }, logDroppedBytes);
    metrics.storageDamaged.set(status.unrepaired);
    const found = damaged.lc + damaged.pending + damaged.dropped + damaged.unreadable;
    const summary = { fragments, bytes, seconds, complete, damaged, ...(error !== undefined ? { error } : {}) };
    if (!status.enabled) log.info('start check: off (--start-check-bytes 0); scrub finds damaged fragments over time');
    else if (found === 0) {
      log.info(
        summary,
        complete
          ? 'start check: every stored fragment matches its checksum'
          : 'start check: the fragments checked match their checksums; its budget ended before the rest (the next start continues, scrub covers all)',
      );
    } else {
      const parts = [
        damaged.lc > 0 ? `${damaged.lc} of keys' latest writes (being repaired from the peers)` : '',
        damaged.pending > 0 ? `${damaged.pending} of writes under way (kept until they complete or are collected)` : '',
        damaged.dropped > 0 ? `${damaged.dropped} of older versions (deleted: newer writes completed)` : '',
        damaged.unreadable > 0
          ? `${damaged.unreadable} that LevelDB cannot read${error !== undefined ? ` (${error})` : ''}, which need an operator: stop the server, move its data directory aside and start it on an empty one, where it rebuilds from its peers (check first that they are healthy)`
          : '',
      ].filter(Boolean);
      log.error(
        summary,
        `start check: ${found} stored ${found === 1 ? 'entry is' : 'entries are'} damaged in the data directory's files: ${parts.join('; ')}. ` +
          'Until repaired this server counts as faulty for those keys; if damage recurs, check the disk (dmesg, SMART)',
      );
    }
    return status;
  }

  /**
   * Repairs from the peers the damaged `lc` fragments the start check found, in the
   * background, retrying failures (5 s, doubling up to 5 min) until each is repaired or no
   * longer needed (a newer write completed, the entry was collected).
   */
  repairFound(): void {
    if (this.#found.length === 0 || this.#repairing) return;
    this.#repairing = this.#repairFoundLoop().catch((err: unknown) =>
      this.#o.log.error({ err }, 'start check: repairs stopped unexpectedly'),
    );
  }

  async #repairFoundLoop(): Promise<void> {
    const signal = this.#stop.signal;
    let wait = 5_000;
    while (this.#found.length > 0 && !signal.aborted) {
      const left: Found[] = [];
      for (const f of this.#found) {
        if (signal.aborted) return;
        const done = await this.#repair(f.key, f.ts, f.stripe, f.length, f.lc, signal, wait === 5_000);
        if (!done) left.push(f);
        else if (this.#startCheck) {
          this.#startCheck = { ...this.#startCheck, repaired: this.#startCheck.repaired + 1, unrepaired: this.#startCheck.unrepaired - 1 };
          this.#o.metrics.storageDamaged.set(this.#startCheck.unrepaired);
        }
      }
      this.#found = left;
      if (left.length === 0) {
        if (this.#startCheck?.unrepaired === 0) this.#o.log.info('start check: every damaged fragment it found is repaired');
        return;
      }
      await sleep(wait, signal);
      wait = Math.min(5 * 60_000, wait * 2);
    }
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
    for (const leg of walkLegs(saved.cursor, saved.start)) {
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
    const found = await this.#inspect(key, ts, stripe, length, 'warn', signal);
    if (typeof found === 'object' && found.kind === 'lc') await this.#repair(key, ts, stripe, length, found.lc, signal);
  }

  /**
   * Re-hashes one stored fragment (`Server.scrub`), counts and logs what it found (at
   * `level` for damage); a damaged older version is deleted by the protocol on the way.
   */
  async #inspect(
    key: string,
    ts: { num: number; writerId: Uint8Array },
    stripe: number,
    length: number | undefined,
    level: 'warn' | 'debug',
    signal?: AbortSignal,
  ): Promise<'intact' | 'absent' | { kind: 'unreadable' | 'dropped' | 'pending' } | { kind: 'lc'; lc: Candidate }> {
    const { protocol, metrics, log } = this.#o;
    const version = { key, ts: ts.num, writer: toHex(ts.writerId).slice(0, 16), stripe };
    let outcome: ScrubOutcome;
    try {
      outcome = await protocol.scrub(key, ts, stripe);
    } catch (err) {
      if (signal?.aborted) return 'absent';
      // The key's own record cannot be read: nothing here can say which version it is.
      this.#totals.damaged++;
      this.#totals.unrepaired++;
      metrics.scrubDamaged.inc({ kind: 'unreadable' });
      log.error({ ...version, err: (err as Error).message }, 'scrub: the storage cannot read this key; it needs attention');
      return { kind: 'unreadable' };
    }
    this.#totals.fragments++;
    metrics.scrubbed.inc();
    metrics.scrubBytes.inc(length ?? 0);
    if (this.#pass) metrics.scrubPassFragments.set(this.#pass.fragments + 1);
    if (outcome.status === 'intact' || outcome.status === 'absent') return outcome.status;
    this.#totals.damaged++;
    if (outcome.status !== 'damaged') {
      metrics.scrubDamaged.inc({ kind: 'dropped' });
      log[level](version, 'scrub: an older version was damaged here; deleted (a newer write completed)');
      return { kind: 'dropped' };
    }
    if (!outcome.lc) {
      this.#totals.unrepaired++;
      metrics.scrubDamaged.inc({ kind: 'pending' });
      log[level](version, 'scrub: a write under way is damaged here; kept until it completes or is collected');
      return { kind: 'pending' };
    }
    metrics.scrubDamaged.inc({ kind: 'lc' });
    log[level](version, 'scrub: the latest completed write of this key is damaged here; repairing it from the peers');
    return { kind: 'lc', lc: outcome.lc };
  }

  /** Rebuilds a damaged fragment of `lc` from the peers, rewrites it and checks it again; whether it is done with (repaired, or no longer needed). */
  async #repair(
    key: string,
    ts: { num: number; writerId: Uint8Array },
    stripe: number,
    length: number | undefined,
    lc: Candidate,
    signal: AbortSignal,
    /** Whether a failure counts as unrepaired in the totals (not again on a retry). */
    count = true,
  ): Promise<boolean> {
    const { protocol, repairer, metrics, log } = this.#o;
    const version = { key, ts: ts.num, writer: toHex(ts.writerId).slice(0, 16), stripe };
    try {
      const r = await repairer.repair(key, lc, { rewrite: true, stripe, sizeHint: length, signal });
      if (r.outcome === 'superseded') {
        log.info(version, 'scrub: a newer write completed meanwhile; the damaged version is no longer needed');
        return true;
      }
      const again = await protocol.scrub(key, ts, stripe);
      if (again.status !== 'intact') throw new Error(`still ${again.status} after the repair`);
      this.#totals.repaired++;
      metrics.scrubRepaired.inc();
      metrics.writesRepaired.inc({ cause: 'scrub' });
      metrics.bytesRepaired.inc({ cause: 'scrub' }, r.bytes);
      log.warn({ ...version, bytes: r.bytes }, 'scrub: repaired a damaged fragment');
      return true;
    } catch (err) {
      if (signal.aborted) return false;
      if (count) this.#totals.unrepaired++;
      const reason = failureReason(err);
      metrics.failures.inc({ reason });
      log.error({ ...version, reason, err: (err as Error).message }, 'scrub: could not repair a damaged fragment; it is tried again later');
      return false;
    }
  }
}

/** A random point in the `h:` records to start the first pass at. */
function randomStart(): string {
  // `h:<length of the key>:…`: lengths spread the start over the keys roughly.
  return `h:${randomInt(1, 64)}:`;
}

/**
 * The stretches of a walk over the stored entries that is at `cursor` and began at
 * `start`: from the cursor to the end, then (when it began in the middle and has not yet
 * wrapped) from the beginning back to the start.
 */
function walkLegs(cursor: string, start: string): { readonly from: string; readonly until: string | undefined }[] {
  const wrapped = start !== '' && (cursor === start || compareKeys(cursor, start) > 0);
  return wrapped
    ? [
        { from: cursor, until: undefined },
        { from: '', until: start },
      ]
    : [{ from: cursor, until: start === '' ? undefined : start }];
}
