/**
 * BENCH PROTOTYPES, NOT PRODUCTION STORAGE. Storage backends the amplification bench
 * (`amplification.ts`) compares with the server's `LevelStorage`, each an
 * {@link AbstractStorage} with LevelStorage's record layout (`k:`, `p:`, `h:`, `f:`, totals
 * records in every batch) and LevelStorage's own group commit (`GroupCommitter`, one
 * synced batch per event-loop turn), so only the engine under the records differs:
 *
 * - {@link openRocksEngine}: RocksDB through holepunch's `rocksdb-native`, with or without
 *   its integrated BlobDB (`enableBlobFiles`: values ≥ `minBlobSize` go to blob files, the
 *   LSM tree keeps a reference). rocksdb-native has no synced write: its binding hands
 *   librocksdb no write options and librocksdb writes with RocksDB's default
 *   `WriteOptions` (sync = false); the WAL is written to the page cache. The engine
 *   emulates `sync: true` by fdatasync-ing the current WAL file (and the previous one and
 *   the directory when it changed) after every batch, which is what RocksDB itself does
 *   for a synced write, but from outside: good enough to measure, not to ship.
 * - {@link openValueLogEngine}: classic-level holding `f:` records as pointers (segment,
 *   offset, length, crc32) into append-only segment files; fragments are appended and
 *   fdatasync-ed before the LevelDB batch naming them is (synced) written. Segments whose
 *   live bytes fall under half are collected by copying their live fragments to the active
 *   segment inside a later batch. Left out (what adopting would need): recovery at open
 *   (live bytes per segment, unreferenced tails, segments whose unlink was lost), crc checks
 *   that turn into `STORAGE_CORRUPT`, the 60 s erase bound of `eraser.ts` (a collected
 *   fragment stays in its segment until the segment is collected), disk-full handling.
 */
import { createRequire } from 'node:module';
import { open as openFile, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { ClassicLevel } from 'classic-level';
import {
  AbstractStorage,
  decodeEntryMetaRecord,
  decodeKeyRecord,
  encodeEntryMetaRecord,
  encodeKeyRecord,
  entryId,
  type EntryMeta,
  type HistoryEntry,
  type KeyChanges,
  type KeyState,
  type Timestamp,
} from '@powerstore/protocol';
import { GroupCommitter, LEVELDB_TUNING, type Put } from 'powerstore-server';

/** A key range as the engines take it. */
export interface Range {
  readonly gt?: string;
  readonly gte?: string;
  readonly lt: string;
  readonly limit?: number;
}

/** What {@link KvStorage} needs of an ordered key-value engine. */
export interface KvEngine {
  get(key: string): Promise<Uint8Array | undefined>;
  getMany(keys: readonly string[]): Promise<(Uint8Array | undefined)[]>;
  /** Writes `ops` atomically and durably (synced) before resolving. */
  batch(ops: readonly Put[]): Promise<void>;
  entries(range: Range): AsyncIterable<readonly [string, Uint8Array]>;
  close(): Promise<void>;
  /** Counters for the report. */
  notes?(): Record<string, number>;
}

const json = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const EMPTY = new Uint8Array(0);

/** LevelStorage's layout and commit on any {@link KvEngine}. */
export class KvStorage extends AbstractStorage {
  readonly #engine: KvEngine;
  readonly #n: number;
  readonly #committer: GroupCommitter<KeyChanges>;
  #totals = { keys: 0, entries: 0 };

  constructor(engine: KvEngine, n: number) {
    super({ stateCacheKeys: 10_000 });
    this.#engine = engine;
    this.#n = n;
    // GroupCommitter only calls `batch(ops, { sync })`.
    const db = { batch: (ops: Put[]) => engine.batch(ops) } as unknown as ConstructorParameters<typeof GroupCommitter>[0];
    this.#committer = new GroupCommitter<KeyChanges>(db, true, undefined, (changes) => {
      for (const c of changes) {
        this.#totals.keys += c.keys;
        this.#totals.entries += c.entries;
      }
      // The records LevelStorage persists with every batch: totals, and each owner's usage.
      const owners = new Set(changes.flatMap((c) => c.usage.map((u) => u.owner)));
      const ops: Put[] = [{ type: 'put', key: 'm:totals', value: json(this.#totals) }];
      for (const o of owners) ops.push({ type: 'put', key: `u:${o}`, value: json(this.usage(o)) });
      return { ops, undo: () => {} };
    });
  }

  get engine(): KvEngine {
    return this.#engine;
  }

  #entryKey(prefix: 'h' | 'f', key: string, ts: Timestamp, stripe: number): string {
    return `${prefix}:${key.length}:${key}:${entryId(ts, stripe)}`;
  }

  protected async readState(key: string): Promise<KeyState | undefined> {
    const raw = await this.#engine.get(`k:${key}`);
    return raw === undefined ? undefined : decodeKeyRecord(raw, this.#n).state;
  }

  protected async readEntryMeta(key: string, ts: Timestamp, stripe: number): Promise<EntryMeta | undefined> {
    const raw = await this.#engine.get(this.#entryKey('h', key, ts, stripe));
    return raw === undefined ? undefined : decodeEntryMetaRecord(raw, this.#n).meta;
  }

  protected async readFragment(key: string, ts: Timestamp, stripe: number): Promise<Uint8Array | undefined> {
    return this.#engine.get(this.#entryKey('f', key, ts, stripe));
  }

  protected override async readEntry(key: string, ts: Timestamp, stripe: number): Promise<HistoryEntry | undefined> {
    const [meta, fragment] = await this.#engine.getMany([this.#entryKey('h', key, ts, stripe), this.#entryKey('f', key, ts, stripe)]);
    if (meta === undefined || fragment === undefined) return undefined;
    return { ...decodeEntryMetaRecord(meta, this.#n).meta, fragment };
  }

  protected async readStates(prefix: string, after: string, limit: number): Promise<readonly (readonly [string, KeyState])[]> {
    const range = after >= prefix ? { gt: `k:${after}` } : { gte: `k:${prefix}` };
    const out: [string, KeyState][] = [];
    for await (const [k, raw] of this.#engine.entries({ ...range, lt: 'k;', limit })) {
      const key = k.slice(2);
      if (!key.startsWith(prefix)) break;
      out.push([key, decodeKeyRecord(raw, this.#n).state]);
    }
    return out;
  }

  async *unfinishedKeys(): AsyncIterable<string> {
    for await (const [k] of this.#engine.entries({ gte: 'p:', lt: 'p;' })) yield k.slice(2);
  }

  protected async commit(c: KeyChanges): Promise<void> {
    const ops: Put[] = [];
    for (const d of c.deletes) {
      const stripes = [0];
      if (d.stripes) {
        const prefix = `${this.#entryKey('h', c.key, d.ts, 0)}#`;
        for await (const [k] of this.#engine.entries({ gt: prefix, lt: `${prefix.slice(0, -1)}$` }))
          stripes.push(Number(k.slice(prefix.length)));
      }
      for (const stripe of stripes) {
        ops.push({ type: 'del', key: this.#entryKey('h', c.key, d.ts, stripe) });
        ops.push({ type: 'del', key: this.#entryKey('f', c.key, d.ts, stripe) });
      }
    }
    if (c.state) {
      ops.push({ type: 'put', key: `k:${c.key}`, value: encodeKeyRecord(c.key, c.state) });
      ops.push(c.state.index.some((w) => !w.head) ? { type: 'put', key: `p:${c.key}`, value: EMPTY } : { type: 'del', key: `p:${c.key}` });
    }
    for (const e of c.puts) {
      ops.push({ type: 'put', key: this.#entryKey('h', c.key, e.ts, e.stripe), value: encodeEntryMetaRecord(c.key, e) });
      ops.push({ type: 'put', key: this.#entryKey('f', c.key, e.ts, e.stripe), value: e.fragment });
    }
    await this.#committer.commit(ops, c);
  }

  protected async closeBackend(): Promise<void> {
    await this.#committer.idle();
    await this.#engine.close();
  }
}

async function syncDir(path: string): Promise<void> {
  const d = await openFile(path, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

// ---------------------------------------------------------------------------------------
// RocksDB (rocksdb-native), optionally with BlobDB.

/** The part of rocksdb-native's API used here (it ships no types). */
interface RocksDb {
  ready(): Promise<void>;
  close(): Promise<void>;
  write(opts: { autoDestroy: boolean }): { tryPut(k: Buffer, v: Uint8Array): void; tryDelete(k: Buffer): void; flush(): Promise<void> };
  read(opts: { autoDestroy: boolean }): { get(k: Buffer): Promise<Buffer | null>; tryFlush(): void };
  get(k: Buffer): Promise<Buffer | null>;
  iterator(range: Record<string, unknown>): AsyncIterable<{ key: Buffer; value: Buffer }>;
  currentWalFile(): Promise<{ path: string }>;
}

export interface RocksOptions {
  /** Directory with `node_modules/rocksdb-native` (the workspace does not depend on it). */
  readonly from: string;
  readonly blobs: boolean;
  /** Values of at least this many bytes go to blob files (with `blobs`). */
  readonly minBlobSize: number;
}

/** Loads rocksdb-native from `from`, or says why it cannot. */
export function loadRocks(from: string): { RocksDB: new (path: string, opts: Record<string, unknown>) => RocksDb } | { error: string } {
  try {
    const req = createRequire(join(from, 'package.json'));
    return { RocksDB: req('rocksdb-native') as new (path: string, opts: Record<string, unknown>) => RocksDb };
  } catch (err) {
    return { error: (err as Error).message.split('\n')[0]! };
  }
}

export async function openRocksEngine(path: string, o: RocksOptions): Promise<KvEngine> {
  const loaded = loadRocks(o.from);
  if ('error' in loaded) throw new Error(`rocksdb-native: ${loaded.error}`);
  const db = new loaded.RocksDB(path, {
    // As LEVELDB_TUNING: a 32 MiB memtable; the machine has 2 cores.
    writeBufferSize: LEVELDB_TUNING.writeBufferSize,
    maxBackgroundJobs: 2,
    enableBlobFiles: o.blobs,
    minBlobSize: o.blobs ? o.minBlobSize : 0,
    blobFileSize: o.blobs ? 256 * 1024 * 1024 : 0,
    enableBlobGarbageCollection: true,
  });
  await db.ready();
  await syncDir(path);
  let wal: { path: string; fd: FileHandle } | undefined;
  let walSyncs = 0;
  const syncWal = async () => {
    const now = join(path, (await db.currentWalFile()).path);
    if (wal?.path !== now) {
      if (wal) {
        await wal.fd.datasync();
        await wal.fd.close();
      }
      wal = { path: now, fd: await openFile(now, 'r') };
      await syncDir(path);
    }
    await wal.fd.datasync();
    walSyncs++;
  };
  const value = (b: Buffer | null) => (b === null ? undefined : new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
  return {
    get: async (k) => value(await db.get(Buffer.from(k))),
    getMany: async (keys) => {
      const r = db.read({ autoDestroy: true });
      const ps = keys.map((k) => r.get(Buffer.from(k)));
      r.tryFlush();
      return (await Promise.all(ps)).map(value);
    },
    batch: async (ops) => {
      const w = db.write({ autoDestroy: true });
      for (const op of ops) {
        if (op.type === 'put') w.tryPut(Buffer.from(op.key), op.value);
        else w.tryDelete(Buffer.from(op.key));
      }
      await w.flush();
      await syncWal();
    },
    entries: async function* (range) {
      const r: Record<string, unknown> = { lt: Buffer.from(range.lt) };
      if (range.gt !== undefined) r.gt = Buffer.from(range.gt);
      if (range.gte !== undefined) r.gte = Buffer.from(range.gte);
      if (range.limit !== undefined) r.limit = range.limit;
      for await (const { key, value: v } of db.iterator(r)) yield [key.toString('utf8'), value(v)!] as const;
    },
    close: async () => {
      await wal?.fd.close();
      await db.close();
    },
    notes: () => ({ walSyncs }),
  };
}

// ---------------------------------------------------------------------------------------
// Value log: fragments in append-only segments, LevelDB holding pointers.

/** Segment size at which the active segment is sealed and a new one started. */
const SEGMENT_BYTES = 64 * 1024 * 1024;
/** A sealed segment is collected once less than this share of its bytes is live. */
const COLLECT_BELOW = 0.5;
const POINTER_BYTES = 20;

interface Segment {
  readonly id: number;
  readonly fd: FileHandle;
  size: number;
  live: number;
}

/** `segment u32 | offset f64 | length u32 | crc32 u32`. */
export function encodePointer(segment: number, offset: number, length: number, crc: number): Uint8Array {
  const b = new Uint8Array(POINTER_BYTES);
  const v = new DataView(b.buffer);
  v.setUint32(0, segment);
  v.setFloat64(4, offset);
  v.setUint32(12, length);
  v.setUint32(16, crc);
  return b;
}

export function decodePointer(b: Uint8Array): { segment: number; offset: number; length: number; crc: number } {
  if (b.length !== POINTER_BYTES) throw new Error(`value-log pointer of ${b.length} bytes`);
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  return { segment: v.getUint32(0), offset: v.getFloat64(4), length: v.getUint32(12), crc: v.getUint32(16) };
}

export async function openValueLogEngine(path: string): Promise<KvEngine> {
  const db = new ClassicLevel<string, Uint8Array>(join(path, 'index'), { keyEncoding: 'utf8', valueEncoding: 'view', ...LEVELDB_TUNING });
  await db.open();
  await syncDir(path);
  const segments = new Map<number, Segment>();
  let active: Segment;
  const notes = { segments: 0, segmentsCollected: 0, bytesCopiedByCollection: 0, logSyncs: 0 };
  const startSegment = async (id: number) => {
    const fd = await openFile(join(path, `${String(id).padStart(6, '0')}.vlog`), 'wx+');
    await syncDir(path);
    active = { id, fd, size: 0, live: 0 };
    segments.set(id, active);
    notes.segments++;
  };
  await startSegment(1);
  const isFragment = (k: string) => k.startsWith('f:');
  const read = async (raw: Uint8Array | undefined): Promise<Uint8Array | undefined> => {
    if (raw === undefined) return undefined;
    const p = decodePointer(raw);
    const seg = segments.get(p.segment) ?? retired.get(p.segment);
    if (!seg) throw new Error(`value log: segment ${p.segment} is gone`);
    const out = new Uint8Array(p.length);
    const { bytesRead } = await seg.fd.read(out, 0, p.length, p.offset);
    if (bytesRead !== p.length || crc32(out) !== p.crc) throw new Error('value log: damaged fragment');
    return out;
  };
  /** Collected segments, unlinked: readers that took a pointer before the collection may still read them (closed at close). */
  const retired = new Map<number, Segment>();

  /** Live fragments of the emptiest sealed segment under COLLECT_BELOW, as puts of new copies (appended by the caller). */
  const collection = async (
    touched: ReadonlySet<string>,
  ): Promise<{ victim: Segment; ops: { key: string; value: Uint8Array }[] } | undefined> => {
    let victim: Segment | undefined;
    for (const s of segments.values()) {
      if (s === active || s.size === 0 || s.live / s.size >= COLLECT_BELOW) continue;
      if (!victim || s.live / s.size < victim.live / victim.size) victim = s;
    }
    if (!victim) return undefined;
    const ops: { key: string; value: Uint8Array }[] = [];
    // The segment's live fragments are those whose pointers name it: a full scan of the
    // pointers (an adopted design would keep a per-segment index, or scan segment headers).
    for await (const [k, raw] of db.iterator({ gte: 'f:', lt: 'f;' })) {
      if (touched.has(k) || decodePointer(raw).segment !== victim.id) continue;
      ops.push({ key: k, value: (await read(raw))! });
    }
    return { victim, ops };
  };

  return {
    get: async (k) => (isFragment(k) ? read(await db.get(k)) : db.get(k)),
    getMany: async (keys) => {
      const raws = await db.getMany([...keys]);
      return Promise.all(raws.map((raw, i) => (isFragment(keys[i]!) ? read(raw) : Promise.resolve(raw))));
    },
    batch: async (ops) => {
      if (active.size >= SEGMENT_BYTES) {
        await active.fd.datasync();
        await startSegment(active.id + 1);
      }
      const touched = new Set(ops.filter((o) => isFragment(o.key)).map((o) => o.key));
      const collected = await collection(touched);
      // Deleted fragments: their segments lose live bytes once the batch is durable.
      const deleted = ops.filter((o) => o.type === 'del' && isFragment(o.key)).map((o) => o.key);
      const olds = deleted.length > 0 ? await db.getMany(deleted) : [];
      // Copies first: a fragment the batch deletes or rewrites is not copied, and the batch's own ops come after.
      const appends: { key: string; value: Uint8Array }[] = [...(collected?.ops ?? [])];
      for (const o of ops) if (o.type === 'put' && isFragment(o.key)) appends.push(o);
      const pointers = new Map<string, Uint8Array>();
      const seg = active;
      if (appends.length > 0) {
        let at = seg.size;
        for (const a of appends) {
          pointers.set(a.key, encodePointer(seg.id, at, a.value.length, crc32(a.value)));
          at += a.value.length;
        }
        await seg.fd.writev(
          appends.map((a) => a.value),
          seg.size,
        );
        seg.size = at;
        await seg.fd.datasync();
        notes.logSyncs++;
      }
      const out: Put[] = [];
      for (const c of collected?.ops ?? []) out.push({ type: 'put', key: c.key, value: pointers.get(c.key)! });
      for (const o of ops) out.push(o.type === 'put' && isFragment(o.key) ? { type: 'put', key: o.key, value: pointers.get(o.key)! } : o);
      await db.batch(out, { sync: true });
      for (const a of appends) seg.live += a.value.length;
      for (const raw of olds) {
        if (raw === undefined) continue;
        const p = decodePointer(raw);
        const s = segments.get(p.segment);
        if (s && s !== collected?.victim) s.live -= p.length;
      }
      if (collected) {
        const { victim } = collected;
        notes.segmentsCollected++;
        notes.bytesCopiedByCollection += collected.ops.reduce((sum, c) => sum + c.value.length, 0);
        segments.delete(victim.id);
        await unlink(join(path, `${String(victim.id).padStart(6, '0')}.vlog`));
        retired.set(victim.id, victim);
      }
    },
    entries: async function* (range) {
      for await (const [k, raw] of db.iterator({ ...range })) yield [k, isFragment(k) ? (await read(raw))! : raw] as const;
    },
    close: async () => {
      await db.close();
      for (const s of [...segments.values(), ...retired.values()]) await s.fd.close();
    },
    notes: () => ({ ...notes }),
  };
}
