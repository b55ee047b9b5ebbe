/**
 * How {@link LevelStorage} keeps large fragments in a {@link ValueLog}: which fragments go
 * there, the live bytes of every segment, the erasure of records whose pointers were
 * deleted, and the collection of segments that are mostly dead.
 *
 * Records (beside LevelStorage's, in the same batches):
 *   `v:<len>:<key>:<num>:<wid>[#<s>]`  the {@link ValueLogPointer} of an entry's fragment
 *                                      (instead of its `f:` record)
 *   `s:<segment>`                      live bytes of a segment (records some pointer names);
 *                                      absent when none
 *   `z:<segment>:<offset>`             the pointer of a record no pointer names any more,
 *                                      whose bytes are not yet erased
 * Live bytes change only in the batch that writes or deletes the pointers, so they are
 * exactly what the durable pointers name; erasure markers are written in the batch that
 * deletes a pointer and deleted once the record is zeroed (or its segment removed).
 *
 * Erasure within the storage's bound: a pass runs every quarter of it, zeroes the records
 * behind the markers (or removes a segment no pointer names) and fdatasyncs before the
 * markers go. Collection: a sealed segment whose live bytes are under half its size has its
 * live records copied to the active segment, each under its key's lock (a concurrent
 * delete or repair of the entry cannot interleave), and is removed once nothing points
 * into it.
 */
import { decodePointer, encodePointer, recordBytes, ValueLog, ValueLogDamage, type ValueLogPointer } from './value-log.js';
import type { ClassicLevel } from 'classic-level';
import { ServerError } from './errors.js';
import { decodeJson, encodeJson, isCount } from './json-records.js';
import type { Put } from './level-storage.js';

/** What one commit changed in the value log: records its new pointers name, and records whose pointers it removed. */
export interface SpaceChange {
  readonly added: readonly ValueLogPointer[];
  readonly dead: readonly ValueLogPointer[];
}

/** One maintenance pass, as reported to the host. */
export interface ValueLogPass {
  /** Records zeroed in place. */
  readonly erased: number;
  /** Segments removed (no pointer named them). */
  readonly removed: number;
  /** Live records copied out of mostly dead segments. */
  readonly moved: number;
  readonly seconds: number;
  readonly error?: Error;
}

/** How LevelStorage lets a pass commit and lock keys. */
export interface FragmentLogHost {
  commit(ops: readonly Put[], space?: SpaceChange): Promise<void>;
  /** Runs `fn` under `key`'s lock (no other change of the key's entries meanwhile). */
  withKey<T>(key: string, fn: () => Promise<T>): Promise<T>;
  /** The user key of an entry's name (`<len>:<key>:<num>:<wid>[#<s>]`), or `undefined`. */
  keyOf(name: string): string | undefined;
}

/** Default: fragments of at least this many bytes go to the value log. */
export const DEFAULT_VALUE_LOG_MIN_BYTES = 16 * 1024;
/** Markers a pass erases at most (the rest wait for the next pass). */
const PASS_MARKERS = 20_000;
/** Records a collection copies at once. */
const MOVES_IN_FLIGHT = 16;
/** A sealed segment is collected when less than this share of it is live. */
const COLLECT_BELOW = 0.5;

const segmentKey = (segment: number) => `s:${String(segment).padStart(8, '0')}`;
const markerKey = (p: ValueLogPointer) => `z:${String(p.segment).padStart(8, '0')}:${String(p.offset).padStart(16, '0')}`;
/** The lowest `minBytes` this directory's log was ever opened with (a JSON number). */
export const FLOOR_KEY = 'm:vlog-floor';

async function readFloor(db: ClassicLevel<string, Uint8Array>, absent: number): Promise<number> {
  const raw = await db.get(FLOOR_KEY);
  if (raw === undefined) return absent;
  const v = decodeJson(raw);
  return isCount(v) ? v : 0;
}

export class FragmentLog {
  /** Live bytes per segment, as of the last batch handed to LevelDB. */
  readonly #live = new Map<number, number>();
  /** Offsets of records appended whose pointer batch is not durable yet, per segment: such a segment is not removed. */
  readonly #unsettled = new Map<number, Set<number>>();
  #passing: Promise<ValueLogPass> | undefined;

  private constructor(
    readonly log: ValueLog,
    private db: ClassicLevel<string, Uint8Array>,
    /** Fragments of at least this many bytes are appended to the log. */
    readonly minBytes: number,
    /** No fragment shorter than this was ever appended to this directory's log (the lowest `minBytes` it was opened with). */
    private readonly floor: number,
  ) {}

  /**
   * Opens the log in `dir` and loads the live bytes. Segment files no live-bytes record
   * names hold nothing a pointer names (the tail of a crash, or a removal that did not
   * finish): they are removed.
   */
  static async open(
    db: ClassicLevel<string, Uint8Array>,
    dir: string,
    options: {
      minBytes: number;
      segmentBytes?: number;
      sync: boolean;
      /** Sum the live bytes again from the pointers first (LevelDB dropped batches at this open). */
      recount?: boolean;
    },
  ): Promise<FragmentLog> {
    const lives = new Map<number, number>();
    let after = 0;
    for await (const [k, v] of db.iterator({ gte: 's:', lt: 's;' })) {
      const live = decodeJson(v);
      if (!isCount(live)) {
        throw new ServerError('STORAGE_CORRUPT', `${dir}: unreadable value-log record ${k}`);
      }
      lives.set(Number(k.slice(2)), live);
      after = Math.max(after, Number(k.slice(2)));
    }
    // Erasure markers may name a segment already removed (a pass that stopped before deleting
    // them, or left some for the next): a new segment of that number would have live records
    // zeroed by them, so new segments are numbered past every segment a record names.
    const [marker] = await db.keys({ gte: 'z:', lt: 'z;', reverse: true, limit: 1 }).all();
    if (marker !== undefined) after = Math.max(after, Number(marker.slice(2, 10)));
    const log = await ValueLog.open({ dir, segmentBytes: options.segmentBytes, sync: options.sync, after });
    // The floor is recorded before anything is appended below it; a log from before the
    // record (or one whose record is unreadable) may hold fragments of any length.
    const segments = await log.segments();
    let floor = await readFloor(db, segments.length > 0 || lives.size > 0 ? 0 : Infinity);
    if (options.minBytes < floor) {
      floor = options.minBytes;
      await db.put(FLOOR_KEY, encodeJson(floor), { sync: options.sync });
    }
    const f = new FragmentLog(log, db, options.minBytes, floor);
    for (const [segment, live] of lives) f.#live.set(segment, live);
    // Before removing segments no record names: the records may be what was dropped.
    if (options.recount) await f.recount();
    for (const segment of segments) if (!f.#live.has(segment)) await log.remove(segment);
    return f;
  }

  /** Reads from `db` from now on (the storage reopened its database). */
  use(db: ClassicLevel<string, Uint8Array>): void {
    this.db = db;
  }

  /**
   * Whether a write charged `bytes` may have fragments in the log: if not, collecting it
   * needs no look-up of pointers (small writes, the common case, pay no extra read).
   */
  mayHold(bytes: number): boolean {
    return bytes >= this.floor;
  }

  /** Whether a fragment of `length` bytes goes to the log. */
  takes(length: number): boolean {
    return length >= this.minBytes;
  }

  /** Appends a fragment under its entry `name`; the pointer counts as unsettled until {@link prepare} takes it. */
  async append(name: string, fragment: Uint8Array): Promise<ValueLogPointer> {
    // Registered in the continuation of the append's own resolution, before any other I/O
    // can complete: a pass cannot see the segment sealed and this record uncounted.
    const p = await this.log.append(name, fragment);
    const offsets = this.#unsettled.get(p.segment) ?? new Set<number>();
    offsets.add(p.offset);
    this.#unsettled.set(p.segment, offsets);
    return p;
  }

  /** Pointers whose batch is durable, failed, or never ran: no longer unsettled (idempotent). */
  abandon(pointers: readonly ValueLogPointer[]): void {
    for (const p of pointers) {
      const offsets = this.#unsettled.get(p.segment);
      offsets?.delete(p.offset);
      if (offsets?.size === 0) this.#unsettled.delete(p.segment);
    }
  }

  /** The fragment `raw` (a `v:` record) points to, for entry `name`. */
  async read(name: string, raw: Uint8Array): Promise<Uint8Array> {
    const p = decodePointer(raw);
    if (!p) throw new ValueLogDamage(`the value-log pointer of ${name} does not decode`);
    return this.log.read(p, name);
  }

  /** The operations one batch adds for the space changes it carries: live bytes and erasure markers. */
  prepare(changes: readonly SpaceChange[]): { ops: Put[]; undo(): void; done(): void } {
    const before = new Map<number, number | undefined>();
    const touch = (segment: number, delta: number) => {
      if (!before.has(segment)) before.set(segment, this.#live.get(segment));
      this.#live.set(segment, (this.#live.get(segment) ?? 0) + delta);
    };
    const ops: Put[] = [];
    for (const c of changes) {
      for (const p of c.added) touch(p.segment, recordBytes(p));
      for (const p of c.dead) {
        touch(p.segment, -recordBytes(p));
        ops.push({ type: 'put', key: markerKey(p), value: encodePointer(p) });
      }
    }
    for (const segment of before.keys()) {
      const live = this.#live.get(segment)!;
      if (live > 0) ops.push({ type: 'put', key: segmentKey(segment), value: encodeJson(live) });
      else {
        // Never below 0: a pointer counted twice would otherwise hide live records.
        this.#live.delete(segment);
        ops.push({ type: 'del', key: segmentKey(segment) });
      }
    }
    const added = changes.flatMap((c) => c.added);
    return {
      ops,
      undo: () => {
        for (const [segment, live] of before) {
          if (live === undefined) this.#live.delete(segment);
          else this.#live.set(segment, live);
        }
        this.abandon(added);
      },
      done: () => this.abandon(added),
    };
  }

  /** Live bytes per segment as kept, and as summed from every pointer (a full scan, for checks: the two must agree). */
  async checkLive(): Promise<{ kept: Map<number, number>; counted: Map<number, number> }> {
    return { kept: new Map(this.#live), counted: await this.#livePerSegment() };
  }

  /** Bytes of the records every pointer names, per segment (a full scan of the pointers). */
  async #livePerSegment(): Promise<Map<number, number>> {
    const live = new Map<number, number>();
    for await (const [, raw] of this.db.iterator({ gte: 'v:', lt: 'v;' })) {
      const p = decodePointer(raw);
      if (p) live.set(p.segment, (live.get(p.segment) ?? 0) + recordBytes(p));
    }
    return live;
  }

  /**
   * Live bytes summed again from every pointer, replacing the records (after LevelDB
   * dropped batches from its log: the live bytes are cumulative, like the totals).
   */
  async recount(): Promise<void> {
    const live = await this.#livePerSegment();
    const ops: Put[] = [];
    for await (const k of this.db.keys({ gte: 's:', lt: 's;' })) if (!live.has(Number(k.slice(2)))) ops.push({ type: 'del', key: k });
    for (const [segment, bytes] of live) ops.push({ type: 'put', key: segmentKey(segment), value: encodeJson(bytes) });
    await this.db.batch(ops, { sync: true });
    this.#live.clear();
    for (const [segment, bytes] of live) this.#live.set(segment, bytes);
  }

  /** Runs one maintenance pass (erasure, then collection); a pass already running is joined. */
  pass(host: FragmentLogHost): Promise<ValueLogPass> {
    this.#passing ??= this.#pass(host).finally(() => (this.#passing = undefined));
    return this.#passing;
  }

  /** Waits for a pass in flight. */
  async idle(): Promise<void> {
    await this.#passing;
  }

  #removable(segment: number): boolean {
    return segment !== this.log.active && !this.#live.has(segment) && !this.#unsettled.has(segment);
  }

  async #pass(host: FragmentLogHost): Promise<ValueLogPass> {
    const started = performance.now();
    let erased = 0;
    let removed = 0;
    let moved = 0;
    try {
      ({ erased, removed } = await this.#erase(host));
      moved = await this.#collect(host);
      if (moved > 0) {
        // What collection left dead goes now, not a pass later.
        const again = await this.#erase(host);
        erased += again.erased;
        removed += again.removed;
      }
      return { erased, removed, moved, seconds: (performance.now() - started) / 1000 };
    } catch (err) {
      return { erased, removed, moved, seconds: (performance.now() - started) / 1000, error: err as Error };
    }
  }

  /** Zeroes the records behind erasure markers (removing segments no pointer names), then deletes the markers. */
  async #erase(host: FragmentLogHost): Promise<{ erased: number; removed: number }> {
    const markers: [string, ValueLogPointer][] = [];
    for await (const [k, raw] of this.db.iterator({ gte: 'z:', lt: 'z;', limit: PASS_MARKERS })) {
      const p = decodePointer(raw);
      if (p) markers.push([k, p]);
      else markers.push([k, { segment: -1, offset: 0, nameLength: 0, dataLength: 0, crc: 0 }]);
    }
    const gone = new Set<number>();
    for (const segment of new Set(markers.map(([, p]) => p.segment))) if (segment >= 0 && this.#removable(segment)) gone.add(segment);
    // Segments nothing points into that no marker names either (their last records were moved).
    for (const segment of await this.log.segments()) if (this.#removable(segment)) gone.add(segment);
    const zero = markers.filter(([, p]) => p.segment >= 0 && !gone.has(p.segment)).map(([, p]) => p);
    if (zero.length > 0) await this.log.erase(zero);
    for (const segment of gone) await this.log.remove(segment);
    if (markers.length > 0) await host.commit(markers.map(([key]) => ({ type: 'del', key })));
    return { erased: zero.length, removed: gone.size };
  }

  /** Copies the live records of sealed segments under half live to the active segment. */
  async #collect(host: FragmentLogHost): Promise<number> {
    let moved = 0;
    for (const segment of await this.log.segments()) {
      if (segment === this.log.active || this.#unsettled.has(segment)) continue;
      const live = this.#live.get(segment);
      if (live === undefined) continue;
      const size = await this.log.size(segment);
      if (size === 0 || live / size >= COLLECT_BELOW) continue;
      // Several records at once (each under its own key's lock): their appends and pointer
      // batches share group commits instead of paying an fdatasync each.
      const inFlight = new Set<Promise<void>>();
      let failure: Error | undefined;
      for await (const r of this.log.records(segment)) {
        if (failure !== undefined) break;
        const key = host.keyOf(r.name);
        if (key === undefined) continue; // erased (a name of zeros) or not ours
        const move = this.#move(host, key, segment, r.offset, r.name).then(
          (copied) => {
            if (copied) moved++;
          },
          (err: unknown) => {
            failure ??= err instanceof Error ? err : new Error('value-log collection failed', { cause: err });
          },
        );
        const tracked = move.finally(() => inFlight.delete(tracked));
        inFlight.add(tracked);
        if (inFlight.size >= MOVES_IN_FLIGHT) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
      if (failure !== undefined) throw failure;
    }
    return moved;
  }

  /** Copies the record at `segment`/`offset` to the active segment if its pointer still names it; whether it did. */
  async #move(host: FragmentLogHost, key: string, segment: number, offset: number, name: string): Promise<boolean> {
    return host.withKey(key, async () => {
      const raw = await this.db.get(`v:${name}`);
      const p = raw && decodePointer(raw);
      if (!p || p.segment !== segment || p.offset !== offset) return false;
      let data: Uint8Array;
      try {
        data = await this.log.read(p, name, { verify: true });
      } catch (err) {
        // A damaged record stays where it is, for scrub to find and repair.
        if (err instanceof ValueLogDamage) return false;
        throw err;
      }
      const moved = await this.append(name, data);
      try {
        await host.commit([{ type: 'put', key: `v:${name}`, value: encodePointer(moved) }], { added: [moved], dead: [p] });
      } catch (err) {
        this.abandon([moved]);
        throw err;
      }
      return true;
    });
  }
}
