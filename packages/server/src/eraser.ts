/**
 * Erasure of collected records from the data directory within a stated time.
 *
 * Garbage collection deletes LevelDB records (a key's history entries and fragments), but
 * a delete in LevelDB only writes a tombstone: the old bytes stay in the write-ahead log
 * and in table files until a compaction rewrites them, which a lightly used server may
 * never run. The {@link Eraser} remembers the keys whose records a durable batch deleted
 * and, within `withinMs`, compacts their key ranges so that the deleted bytes leave every
 * file of the directory.
 *
 * Why a pass is more than `compactRange(start, end)` (LevelDB 1.20, `DBImpl::CompactRange`,
 * checked by experiment): it first writes the memtable out (retiring the log that held it),
 * then compacts each level `0 … L − 1` that overlaps the range into the next, where `L` is
 * the deepest level holding the range. The table a memtable is written to holds every
 * version the memtable had, deleted and overwritten ones included, and LevelDB may put it
 * straight into level 1 or 2; if that is the deepest level holding the range, nothing
 * compacts it (on a fresh database, 300 overwritten versions and their tombstones all
 * survive a `compactRange`). So a pass
 *   1. writes the memtable out first (`compactRange` over an empty range), so what it held
 *      is in a table;
 *   2. for each range, writes tombstones of two keys that never exist, at the range's two
 *      ends ("sentinels"), then compacts the range: the memtable holding the sentinels
 *      becomes a table spanning the whole range, placed above every table overlapping it,
 *      and compacting it down merges every such table, dropping what is deleted or
 *      overwritten;
 *   3. repeats step 2 for a range whose sentinels ended in a table of their own that no
 *      compaction took (nothing below held the range), so such tables do not pile up;
 *   4. checks that the table and log files present when it started are gone unless still
 *      live: a reader (an iterator, a get) pins the tables it reads, which LevelDB deletes
 *      only at its next compaction; the pass waits and writes the memtable out again
 *      (which deletes obsolete files) a few times, then gives up and retries next time.
 * A compaction keeps whatever an open snapshot can still read, and classic-level takes
 * one for every get, getMany and iterator: a pass covers the deletes durable `graceMs`
 * before it starts, and first waits (at most `graceMs`) for every read that began before
 * then to finish; a read running longer fails the pass, which is retried.
 *
 * Which keys are pending survives restarts: every batch that deletes a key's records also
 * writes a marker record naming the key (in the same atomic batch), and markers are
 * deleted, through the same group commit, only once a pass covered them.
 */
import { readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ClassicLevel } from 'classic-level';
import type { KeyChanges } from '@powerstore/protocol';
import type { Put } from './level-storage.js';

/** An inclusive range of LevelDB keys: `[start, end]`. */
export type KeyRange = readonly [start: string, end: string];

/** One erase pass, as reported to {@link EraserOptions.onPass}. */
export interface ErasePass {
  /** Keys whose ranges the pass compacted; 0 when it compacted every history record (`all`). */
  readonly keys: number;
  /** The pass compacted every history record: more keys were pending than `maxKeys`. */
  readonly all: boolean;
  /** Wall time of the pass. */
  readonly seconds: number;
  /** Set when the pass failed; its keys are pending again and retried by the next pass. */
  readonly error?: Error;
}

export interface EraserOptions {
  readonly db: ClassicLevel<string, Uint8Array>;
  /** The database's directory (its files are checked after a pass). */
  readonly path: string;
  /** Bound on the time from a durable delete to its bytes being gone from the directory. */
  readonly withinMs: number;
  /** Keys remembered one by one; beyond, the next pass compacts {@link all}. */
  readonly maxKeys: number;
  /** The LevelDB key ranges holding a key's collectable records. */
  ranges(key: string): readonly KeyRange[];
  /** Ranges holding every collectable record. */
  readonly all: readonly KeyRange[];
  /** Prefix of the marker records (`<marker><key>`), which must sort outside {@link all}. */
  readonly marker: string;
  /** Hands operations to the group commit (markers are written and deleted in its order). */
  commit(ops: readonly Put[]): Promise<void>;
  onPass?(info: ErasePass): void;
}

interface Pending {
  /** A time at or before the earliest delete of the key not yet covered by a pass. */
  since: number;
  /** When a durable batch last deleted the key's records. */
  last: number;
}

/** Below every key the server writes: compacting it only writes the memtable out. */
const NOTHING: KeyRange = ['\u0001', '\u0001'];
/** Tries of the check that the files a pass started with are gone. */
const FILE_CHECKS = 6;
const EMPTY = new Uint8Array(0);

class Aborted extends Error {}

/** The key just past every key that starts with `prefix` (its last character, incremented). */
export function pastPrefix(prefix: string): string {
  return prefix.slice(0, -1) + String.fromCharCode(prefix.charCodeAt(prefix.length - 1) + 1);
}

/**
 * Wraps `db`'s read methods to know when the oldest read still running began: each holds a
 * LevelDB snapshot (classic-level takes one per get and getMany, and per iterator until it
 * is closed), through which compactions keep what it can see.
 */
function trackReads(db: ClassicLevel<string, Uint8Array>): () => number | undefined {
  const running = new Map<object, number>();
  const methods = db as unknown as Record<string, (...args: unknown[]) => unknown>;
  const tracked = <T>(start: () => T, settle: (result: T, done: () => void) => T): T => {
    const token = {};
    running.set(token, Date.now());
    const done = () => running.delete(token);
    try {
      return settle(start(), done);
    } catch (err) {
      done();
      throw err;
    }
  };
  for (const name of ['get', 'getMany']) {
    const read = methods[name]!.bind(db);
    methods[name] = (...args) =>
      tracked(
        () => read(...args) as Promise<unknown>,
        (p, done) => p.finally(done),
      );
  }
  for (const name of ['iterator', 'keys', 'values']) {
    const open = methods[name]!.bind(db);
    methods[name] = (...args) =>
      tracked(
        () => open(...args) as { close(): Promise<void> },
        (it, done) => {
          const close = it.close.bind(it);
          it.close = () => close().finally(done);
          return it;
        },
      );
  }
  return () => {
    let oldest: number | undefined;
    for (const t of running.values()) if (oldest === undefined || t < oldest) oldest = t;
    return oldest;
  };
}

/** LevelDB's `EscapeString`, as `leveldb.sstables` prints user keys. */
function escaped(key: string): string {
  let out = '';
  for (const b of Buffer.from(key, 'utf8'))
    out += b >= 0x20 && b <= 0x7e ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`;
  return out;
}

/** Sorted, with overlapping or touching ranges merged. */
export function mergeRanges(ranges: readonly KeyRange[]): KeyRange[] {
  const sorted = [...ranges].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const out: [string, string][] = [];
  for (const [start, end] of sorted) {
    const prev = out.at(-1);
    if (prev && start <= prev[1]) {
      if (end > prev[1]) prev[1] = end;
    } else out.push([start, end]);
  }
  return out;
}

/** Compacts the key ranges of collected records within a bounded time; see the module comment. */
export class Eraser {
  readonly #o: EraserOptions;
  /** Waiting between the first delete of a key and its pass: the bound's first half. */
  readonly #delayMs: number;
  /** Deletes this recent at a pass's start are left to the next pass (open snapshots). */
  readonly #graceMs: number;
  readonly #pending = new Map<string, Pending>();
  /** Every collectable record is pending (more keys than `maxKeys`). */
  #all: Pending | undefined;
  /** Keys a pass covered whose markers the next batch deletes (unless deleted again). */
  readonly #covered = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #closed = false;
  /** When the oldest read still running began. */
  readonly #oldestRead: () => number | undefined;

  constructor(options: EraserOptions) {
    this.#o = options;
    this.#oldestRead = trackReads(options.db);
    this.#delayMs = options.withinMs / 2;
    this.#graceMs = Math.min(options.withinMs / 4, 1000);
  }

  /** Reads the markers left by the last run: what it had not erased yet is erased now. */
  async load(): Promise<void> {
    const { marker } = this.#o;
    for await (const k of this.#o.db.keys({ gte: marker, lt: pastPrefix(marker) })) {
      this.#note(k.slice(marker.length));
    }
  }

  /**
   * The operations a batch carrying `changes` writes for erasure: a marker for each key
   * whose records it deletes, and the deletion of markers a pass covered. `done` runs once
   * the batch is durable, `undo` if it failed.
   */
  prepare(changes: readonly KeyChanges[]): { ops: Put[]; undo(): void; done(): void } {
    const { marker } = this.#o;
    const keys = new Set<string>();
    for (const c of changes) if (c.deletes.length > 0) keys.add(c.key);
    const ops: Put[] = [];
    for (const key of keys) ops.push({ type: 'put', key: marker + key, value: EMPTY });
    const unmarked: string[] = [];
    // With every record pending, a key deleted again is not tracked by name: keep all markers.
    if (!this.#all) {
      for (const key of this.#covered) {
        if (keys.has(key) || this.#pending.has(key)) continue;
        ops.push({ type: 'del', key: marker + key });
        unmarked.push(key);
      }
      for (const key of unmarked) this.#covered.delete(key);
    }
    return {
      ops,
      undo: () => {
        for (const key of unmarked) this.#covered.add(key);
      },
      done: () => {
        for (const key of keys) this.#note(key);
      },
    };
  }

  /** Stops passes: a pass under way stops after its current LevelDB call, which close waits for. */
  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#running;
  }

  #note(key: string): void {
    if (this.#closed) return;
    const now = Date.now();
    if (this.#all) this.#all.last = now;
    else {
      const p = this.#pending.get(key);
      if (p) p.last = now;
      else if (this.#pending.size < this.#o.maxKeys) this.#pending.set(key, { since: now, last: now });
      else {
        let since = now;
        for (const q of this.#pending.values()) since = Math.min(since, q.since);
        this.#all = { since, last: now };
        this.#pending.clear();
      }
    }
    this.#arm();
  }

  #arm(): void {
    if (this.#closed || this.#running || this.#timer) return;
    let since = this.#all?.since ?? Infinity;
    for (const p of this.#pending.values()) since = Math.min(since, p.since);
    if (since === Infinity) return;
    this.#timer = setTimeout(
      () => {
        this.#timer = undefined;
        this.#running = this.#pass().finally(() => {
          this.#running = undefined;
          this.#arm();
        });
      },
      Math.max(0, since + this.#delayMs - Date.now()),
    );
    this.#timer.unref();
  }

  /** One pass over the pending keys whose deletes are at least `graceMs` old. */
  async #pass(): Promise<void> {
    const cutoff = Date.now() - this.#graceMs;
    const take = (p: Pending): boolean => {
      if (p.since > cutoff) return false;
      // Deletes after the cutoff are not covered: the key stays pending from the cutoff on.
      p.since = cutoff;
      return true;
    };
    let all = false;
    const keys: string[] = [];
    if (this.#all) all = take(this.#all);
    else for (const [key, p] of this.#pending) if (take(p)) keys.push(key);
    if (!all && keys.length === 0) return;
    const done = () => {
      if (this.#all && this.#all.last <= cutoff) this.#all = undefined;
      for (const key of keys) if ((this.#pending.get(key)?.last ?? Infinity) <= cutoff) this.#pending.delete(key);
    };
    const t0 = performance.now();
    try {
      // Reads begun before the cutoff may hold snapshots older than the deletes covered.
      for (const until = Date.now() + this.#graceMs; (this.#oldestRead() ?? Infinity) <= cutoff; await sleep(10)) {
        if (Date.now() > until)
          throw new Error(`a read running since ${new Date(this.#oldestRead()!).toISOString()} holds a snapshot from before the deletes`);
      }
      await this.#compact(all ? this.#o.all : mergeRanges(keys.flatMap((k) => this.#o.ranges(k))));
    } catch (err) {
      if (err instanceof Aborted || this.#closed) return;
      // Still pending (markers kept): a pass half a bound later tries again (not at once:
      // a reader that pinned files may still be reading).
      const now = Date.now();
      for (const p of all ? [this.#all] : keys.map((k) => this.#pending.get(k))) if (p) p.since = Math.max(p.since, now);
      this.#o.onPass?.({ keys: keys.length, all, seconds: (performance.now() - t0) / 1000, error: err as Error });
      return;
    }
    done();
    this.#o.onPass?.({ keys: keys.length, all, seconds: (performance.now() - t0) / 1000 });
    // The markers go with the next batch (one is started here); should it fail, with a later one.
    try {
      if (all) await this.#sweep();
      else {
        for (const key of keys) this.#covered.add(key);
        await this.#o.commit([]);
      }
    } catch {
      // Markers left are only more work for a later pass.
    }
  }

  /** After a pass over every record: deletes every marker (in chunks), unless deletes came meanwhile. */
  async #sweep(): Promise<void> {
    const { marker, db } = this.#o;
    const end = pastPrefix(marker);
    let after: string | undefined;
    for (;;) {
      if (this.#closed || this.#all) return;
      const chunk = await db.keys({ ...(after === undefined ? { gte: marker } : { gt: after }), lt: end, limit: 1000 }).all();
      if (chunk.length === 0) return;
      for (const k of chunk) this.#covered.add(k.slice(marker.length));
      await this.#o.commit([]);
      after = chunk.at(-1)!;
    }
  }

  async #compact(ranges: readonly KeyRange[]): Promise<void> {
    const { db, path } = this.#o;
    const step = async <T>(p: () => Promise<T>): Promise<T> => {
      if (this.#closed) throw new Aborted();
      return p();
    };
    const files = (): string[] => readdirSync(path).filter((f) => /^\d+\.(ldb|sst|log)$/.test(f));
    const before = files();
    const sentinelsThenCompact = async ([start, end]: KeyRange) => {
      await step(() =>
        db.batch(
          [
            { type: 'del', key: start },
            { type: 'del', key: end },
          ],
          { sync: false },
        ),
      );
      await step(() => db.compactRange(start, end));
    };
    await step(() => db.compactRange(...NOTHING));
    for (const r of ranges) await sentinelsThenCompact(r);
    // A table holding only a range's sentinels (nothing below held the range) is compacted
    // away by a second round; the second round's own sentinels meet it and vanish with it.
    const tables = db.getProperty('leveldb.sstables').split('\n');
    for (const r of ranges) {
      const [start, end] = [`['${escaped(r[0])}' @ `, `.. '${escaped(r[1])}' @ `];
      if (tables.some((t) => t.includes(start) && t.includes(end))) await sentinelsThenCompact(r);
    }
    for (let i = 0; ; i++) {
      const live = new Set([...db.getProperty('leveldb.sstables').matchAll(/^\s*(\d+):\d+\[/gm)].map((m) => Number(m[1])));
      const present = new Set(files());
      const left = before.filter((f) => present.has(f) && !(/\.(ldb|sst)$/.test(f) && live.has(Number.parseInt(f, 10))));
      if (left.length === 0) return;
      if (i + 1 === FILE_CHECKS) throw new Error(`files still on disk after compaction (held by a reader?): ${left.join(', ')}`);
      // A reader pinned them; LevelDB deletes obsolete files after its next compaction.
      await sleep(25 * 2 ** i);
      await step(() => db.compactRange(...NOTHING));
    }
  }
}
