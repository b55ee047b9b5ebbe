/**
 * {@link ServerStorage} on LevelDB (classic-level), durable before acknowledgement: a
 * backend of the protocol's {@link AbstractStorage}, which owns per-key exclusion,
 * buffering a callback's writes, usage accounting and closing. This module only reads
 * records and commits them.
 *
 * Group commit: each callback's writes reach {@link GroupCommitter}, which writes
 * everything handed to it during one turn of the event loop, or while the previous batch
 * was syncing, as a single LevelDB batch with `{ sync: true }`, and resolves every
 * contributing callback once that batch is durable. One fsync then covers many
 * concurrent requests, which is what makes synchronous durability affordable.
 *
 * Totals (keys, entries, the longest fragment, usage per owner) are persisted in the same
 * batches as the writes that change them, so opening a database reads a few records
 * instead of every key's.
 *
 * Layout (string keys; binary values in the protocol's record format, `record.ts`):
 *   `m:meta`                     JSON {format, n, cluster, identity}
 *   `m:epoch`                    JSON number: the highest key epoch the server was at
 *                                (absent: 0), so it never goes back to a retired one
 *   `m:totals`                   JSON {keys, entries, largest}: keys holding entries,
 *                                entries, and the longest fragment ever stored (room the
 *                                server reserves for a FILTER reply before reading one)
 *   `m:fresh`                    JSON {createdAt}: written with `m:meta` when the database
 *                                is created, deleted once the server has caught up with its
 *                                peers (`heal.ts`): a directory that started empty holds none
 *                                of the writes made before, so it is rebuilding until then
 *   `m:<name>`                   other small JSON markers of the host ({@link LevelStorage.setMarker})
 *   `u:<owner>`                  JSON {bytes, keys}: what the owner has stored
 *   `k:<key>`                    the key's state: lc, owner, the collected mark, and an
 *                                index of its writes (timestamp, stripes, bytes charged)
 *   `p:<key>`                    empty: the key holds an upload without its stripe 0,
 *                                which the server deletes once idle (its sweep reads these)
 *   `h:<len>:<key>:<num>:<wid>`  Hist[ts] without its fragment (timestamp, stripe, cc,
 *                                certificate, fragment length, a striped value's layout)
 *   `f:<len>:<key>:<num>:<wid>`  Hist[ts]'s fragment, as is
 *   `h:…:<wid>#<s>`, `f:…#<s>`   the same for stripe s ≥ 1 of a striped value
 *   `e:<key>`                    empty: garbage collection deleted records of the key that
 *                                the {@link Eraser} has not yet erased from the files
 *   `v:…`, `s:<segment>`, `z:…`  a fragment kept in the value log (`vlog/`) instead of an
 *                                `f:` record, and the log's bookkeeping (`fragment-log.ts`)
 * Checks that need only metadata (a retried STORE) never read a fragment, and a fragment
 * is written from the request's bytes without being copied into a record first.
 */
import { statfsSync } from 'node:fs';
import { access, open as openFile, readdir, readFile, statfs, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { ClassicLevel } from 'classic-level';
import {
  AbstractStorage,
  compareKeys,
  StorageError,
  decodeEntryMetaRecord,
  decodeKeyRecord,
  encodeEntryMetaRecord,
  encodeKeyRecord,
  entriesOf,
  entryId,
  type EntryMeta,
  type HistoryEntry,
  type KeyChanges,
  type KeyState,
  type Timestamp,
  type Usage,
} from '@powerstore/protocol';
import { Eraser, pastPrefix, type ErasePass } from './eraser.js';
import { ServerError } from './errors.js';
import { syncDirectory } from './files.js';
import { decodeJson, encodeJson, isCount } from './json-records.js';
import { DEFAULT_VALUE_LOG_MIN_BYTES, FragmentLog, type SpaceChange, type ValueLogPass } from './fragment-log.js';
import { decodePointer, encodePointer, ValueLogDamage, type ValueLogPointer } from './value-log.js';

/**
 * Version of the on-disk layout above. Format 4 (every fragment in LevelDB) is read and
 * marked 5 at open, since fragments may then go to the value log, which a format-4 server
 * would not find. Formats 1 (PowerStore 0.1, MAC-authenticated writes), 2 (history kept
 * forever) and 3 (fragments inside history records, totals summed at open) are refused.
 */
export const STORAGE_FORMAT = 5;

/** Where large fragments go: see {@link LevelStorageOptions.valueLog}. */
export interface ValueLogSettings {
  /** Fragments of at least this many bytes go to the value log. Default {@link DEFAULT_VALUE_LOG_MIN_BYTES}. */
  readonly minBytes?: number;
  /** Bytes a segment file takes before the next one starts. Default 64 MiB. */
  readonly segmentBytes?: number;
}

/** How to open a {@link LevelStorage}. */
export interface LevelStorageOptions {
  /** Directory of the LevelDB database; created if missing. */
  readonly path: string;
  /** Servers in the cluster; stored cross-checksums have `n` entries. */
  readonly n: number;
  /** The cluster id (base32): a database of another cluster is refused. */
  readonly cluster?: string;
  /**
   * Names the server and key this database belongs to; opening it under another identity
   * fails with `STORAGE_MISMATCH` instead of mixing two servers' data.
   */
  readonly identity?: string;
  /** `false` skips fsync (benchmarks only): acknowledged writes can be lost on power failure. */
  readonly sync?: boolean;
  /** Called after every batch, for metrics. */
  readonly onCommit?: (info: CommitInfo) => void;
  /** Key records kept decoded in memory (most recently used). Default 10 000; 0 disables. */
  readonly stateCacheKeys?: number;
  /** LevelDB's memtable and table-file sizes; default {@link LEVELDB_TUNING}. */
  readonly leveldb?: LevelTuning;
  /**
   * Records garbage collection deletes are erased from the data directory's files (by
   * compacting their key ranges) within this many ms of the delete being durable, as long
   * as a compaction pass takes at most a quarter of it. Default {@link DEFAULT_ERASE_WITHIN_MS};
   * 0 leaves it to LevelDB's own compactions, which may never run on a quiet server.
   */
  readonly eraseWithinMs?: number;
  /** Keys a pass compacts one by one; with more pending, it compacts every history record. Default 64. */
  readonly eraseMaxKeys?: number;
  /** Called after every erase pass (metrics, logs); a failed pass carries `error` and is retried. */
  readonly onErase?: (info: ErasePass) => void;
  /**
   * Called when the disk's state changes ({@link DiskHealth}): once on entering `full` or
   * `failed`, once on recovering from `full` (`ok`). The storage refuses writes on its own;
   * the host logs, counts, answers `/healthz`, and exits on `failed`.
   */
  readonly onDisk?: (health: DiskHealth, error?: unknown) => void;
  /** How often a full disk is probed for space again (ms). Default 5 000. */
  readonly diskProbeMs?: number;
  /**
   * Key–value separation: fragments of at least `minBytes` are appended to a log of segment
   * files in `<path>/vlog` and LevelDB keeps a pointer, so they are written once instead of
   * again at every compaction (`fragment-log.ts`). `{}` turns it on with
   * {@link DEFAULT_VALUE_LOG_MIN_BYTES}. Default `false`: new fragments stay in LevelDB
   * (fragments already in the log are still read, erased and collected). Off by default
   * because reads of fragments in the log cost a second trip to the thread pool, and 256 KiB
   * reads measured 15–25 % slower end to end on loopback (the server README).
   */
  readonly valueLog?: ValueLogSettings | false;
  /** Called after every value-log maintenance pass (metrics, logs); a failed pass carries `error`. */
  readonly onValueLogPass?: (info: ValueLogPass) => void;
  /**
   * Free bytes the data directory's filesystem must have before a full storage reopens:
   * reopening writes the log's records out as a table. Default the memtable size + 8 MiB.
   */
  readonly diskProbeFreeBytes?: number;
}

/**
 * What the storage knows of its disk. `ok`; `full`: a LevelDB write failed with ENOSPC or
 * EDQUOT, writes are refused (`STORAGE_FAILED`), reads are served, and the storage reopens
 * itself once the filesystem has room again; `failed`: a write, fsync or file creation
 * failed otherwise (EIO…), writes are refused for good: this process must not write again
 * (after a failed fsync the kernel may have dropped the pages and a retry can report them
 * durable), the host exits and a restart recovers from what is on disk.
 */
export interface DiskHealth {
  readonly state: 'ok' | 'full' | 'failed';
  /** LevelDB's message for the failure (`full`, `failed`), or what recovered (`ok`). */
  readonly reason?: string;
  /** When it entered this state (ms since the epoch). */
  readonly since: number;
}

/**
 * Whether `err` is LevelDB reporting a failed file operation (`LEVEL_IO_ERROR`, "IO
 * error: <file>: <strerror>"), and of which kind: `full` for ENOSPC and EDQUOT, `failed`
 * for every other errno (EIO above all); `undefined` when it is no I/O error.
 */
export function diskFailureOf(err: unknown): 'full' | 'failed' | undefined {
  for (
    let e = err as { code?: unknown; message?: unknown; cause?: unknown } | undefined, depth = 0;
    e && typeof e === 'object' && depth < 5;
    e = e.cause as typeof e, depth++
  ) {
    const message = typeof e.message === 'string' ? e.message : '';
    if (e.code === 'LEVEL_IO_ERROR' || /^IO error\b/.test(message)) {
      return /No space left on device|Disk quota exceeded|ENOSPC|EDQUOT/i.test(message) ? 'full' : 'failed';
    }
    // The value log's writes fail with Node's file-system errors.
    if (e.code === 'ENOSPC' || e.code === 'EDQUOT') return 'full';
    if (e.code === 'EIO' || e.code === 'EROFS') return 'failed';
  }
  return undefined;
}

/** What a refused request is told while the disk is not `ok` ({@link DiskHealth}), or while a full storage reopens. */
const UNAVAILABLE_BECAUSE = {
  full: 'storage unavailable: the disk is full; writes are refused until there is space again',
  failed: 'storage unavailable: the disk failed (a write or fsync failed); the server must restart',
  reopening: 'storage unavailable: reopening after the disk was full',
} as const;

/** Default bound on erasing collected records from the files: 60 s. */
export const DEFAULT_ERASE_WITHIN_MS = 60_000;

/** LevelDB sizes that matter for fragment-sized values. */
export interface LevelTuning {
  /** Bytes buffered in the memtable (and its write-ahead log) before it is written out as a table; LevelDB keeps up to two. */
  readonly writeBufferSize: number;
  /** Target size of one table file. */
  readonly maxFileSize: number;
}

/**
 * LevelDB's defaults (4 MiB memtable, 2 MiB files) suit small values; a server stores
 * fragments of up to megabytes, so a default memtable holds a few dozen before it is
 * written out and compacted again and again. Process CPU per synced put of a 128 KiB
 * fragment under a new key (4 writers, LevelDB's threads included; `pnpm exec tsx
 * bench/leveldb-tuning.ts`, medians of 3): default 1.65 ms, 16 MiB / 16 MiB 1.44,
 * 32 MiB / 32 MiB 1.40, 64 MiB / 32 MiB 1.26. LevelDB may hold two memtables, so this
 * default bounds them at 64 MiB; embedders short of memory pass smaller sizes.
 */
export const LEVELDB_TUNING: LevelTuning = { writeBufferSize: 32 * 1024 * 1024, maxFileSize: 32 * 1024 * 1024 };

/** One group commit, as reported to {@link LevelStorageOptions.onCommit}. */
export interface CommitInfo {
  /** Callbacks whose writes the batch carried. */
  readonly callbacks: number;
  /** LevelDB operations in the batch. */
  readonly operations: number;
  /** Bytes of values in the batch. */
  readonly bytes: number;
  /** Wall time of the synced write. */
  readonly seconds: number;
}

/** One operation of a {@link GroupCommitter} batch: a put, or a delete (garbage collection). */
export type Put = { type: 'put'; key: string; value: Uint8Array } | { type: 'del'; key: string };

/** What one LevelStorage commit hands its group commit: a key's changes, the value log's, or both. */
interface Committed {
  readonly changes?: KeyChanges;
  readonly space?: SpaceChange;
}

interface Waiter<D> {
  resolve(): void;
  reject(err: unknown): void;
  readonly data: D | undefined;
}

/**
 * Turns the data of every commit in one batch into extra operations written with it
 * (e.g. totals), and undoes its own bookkeeping if the batch fails (`done` runs once it is
 * durable). Batches are prepared in the order they are written.
 */
export type PrepareBatch<D> = (data: readonly D[]) => { readonly ops: readonly Put[]; undo(): void; done?(): void };

/**
 * What a {@link GroupCommitter} asks before writing and on failure: `refuse` returns the
 * error to fail a batch with instead of writing it (the disk failed before), `failed`
 * turns LevelDB's error into the one the batch's callers get (and records the failure).
 */
export interface CommitGuard {
  refuse(): Error | undefined;
  failed(err: unknown): Error;
}

/**
 * Accumulates batches from concurrent callbacks and writes them as one synced LevelDB
 * batch; at most one write is outstanding, and whatever arrives meanwhile goes into the
 * next one. Exported so the benchmark baselines store exactly as the server does.
 */
export class GroupCommitter<D = never> {
  #ops: Put[] = [];
  #bytes = 0;
  #waiters: Waiter<D>[] = [];
  #writing: Promise<void> | undefined;
  #scheduled = false;

  constructor(
    private db: ClassicLevel<string, Uint8Array>,
    private readonly sync: boolean,
    private readonly onCommit: ((info: CommitInfo) => void) | undefined,
    private readonly prepare?: PrepareBatch<D>,
    private readonly guard?: CommitGuard,
  ) {}

  /** Writes to `db` from now on (the storage reopened its database). */
  use(db: ClassicLevel<string, Uint8Array>): void {
    this.db = db;
  }

  /** Resolves once `ops` are durable (or written, without sync); `data` goes to `prepare`. */
  commit(ops: readonly Put[], data?: D): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      for (const op of ops) {
        this.#ops.push(op);
        if (op.type === 'put') this.#bytes += op.value.length;
      }
      this.#waiters.push({ resolve, reject, data });
      this.#schedule();
    });
  }

  /** Resolves when nothing is pending or being written. */
  async idle(): Promise<void> {
    while (this.#writing || this.#waiters.length > 0 || this.#scheduled) {
      await (this.#writing ?? new Promise((r) => setImmediate(r)));
    }
  }

  #schedule(): void {
    if (this.#writing || this.#scheduled) return;
    this.#scheduled = true;
    // One event-loop turn lets every callback that finishes "now" join this batch.
    setImmediate(() => {
      this.#scheduled = false;
      this.#flush();
    });
  }

  #flush(): void {
    if (this.#writing || this.#waiters.length === 0) return;
    const ops = this.#ops;
    const waiters = this.#waiters;
    const bytes = this.#bytes;
    this.#ops = [];
    this.#waiters = [];
    this.#bytes = 0;
    // Checked for every batch: after a failed write none is written again by this process
    // (LevelDB carries on after a failed log write, misaligning the records after it).
    const refused = this.guard?.refuse();
    if (refused) {
      for (const w of waiters) w.reject(refused);
      return;
    }
    const extra = this.prepare?.(waiters.flatMap((w) => (w.data === undefined ? [] : [w.data])));
    if (extra) ops.push(...extra.ops);
    const started = performance.now();
    this.#writing = this.db.batch(ops, { sync: this.sync }).then(
      () => {
        this.onCommit?.({ callbacks: waiters.length, operations: ops.length, bytes, seconds: (performance.now() - started) / 1000 });
        extra?.done?.();
        for (const w of waiters) w.resolve();
      },
      (err: unknown) => {
        extra?.undo();
        const wrapped = this.guard
          ? this.guard.failed(err)
          : new ServerError('STORAGE_FAILED', `LevelDB write failed: ${(err as Error).message}`, { cause: err });
        for (const w of waiters) w.reject(wrapped);
      },
    );
    void this.#writing.finally(() => {
      this.#writing = undefined;
      if (this.#waiters.length > 0) this.#flush();
    });
  }
}

/** What `m:totals` and the `u:` records hold. */
interface Totals {
  keys: number;
  entries: number;
  largest: number;
  readonly owners: Map<string, { bytes: number; keys: number }>;
}

const EMPTY = new Uint8Array(0);

/** One stored history entry (stripe) as {@link LevelStorage.historyEntries} finds it. */
export interface StoredEntryRef {
  /** Where the walk is: pass it as `after` to continue behind this entry. */
  readonly cursor: string;
  readonly key: string;
  readonly ts: Timestamp;
  readonly stripe: number;
  /** The fragment's length its metadata records; `undefined` when the metadata does not decode. */
  readonly fragmentLength: number | undefined;
}

/** Entries {@link LevelStorage.historyEntries} reads per LevelDB iterator. */
const HISTORY_BATCH = 64;

/** Markers the storage itself uses: {@link LevelStorage.setMarker} refuses them. */
const RESERVED_MARKERS = new Set(['meta', 'totals', 'vlog-floor']);

/**
 * Whether `err` is LevelDB reporting damaged files (a checksum or a block that does not
 * decode): `LEVEL_CORRUPTION` from classic-level, or "Corruption: …" in its message.
 */
export function isLevelCorruption(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown; cause?: unknown } | undefined;
  if (!e || typeof e !== 'object') return false;
  if (e.code === 'LEVEL_CORRUPTION' || (typeof e.message === 'string' && /\bCorruption\b/.test(e.message))) return true;
  return e.cause !== undefined && e.cause !== err && isLevelCorruption(e.cause);
}

/** LevelDB-backed {@link ServerStorage}; see the module comment for the layout and guarantees. */
export class LevelStorage extends AbstractStorage {
  #db: ClassicLevel<string, Uint8Array>;
  readonly #n: number;
  #created = false;
  readonly #committer: GroupCommitter<Committed>;
  #fragmentLog: FragmentLog | undefined;
  #logTimer: NodeJS.Timeout | undefined;
  readonly #sync: boolean;
  /** The totals as of the last batch handed to LevelDB (what the disk says once it is durable). */
  readonly #written: Totals = { keys: 0, entries: 0, largest: 0, owners: new Map() };
  #eraser: Eraser | undefined;
  readonly #options: LevelStorageOptions;
  #health: DiskHealth = { state: 'ok', since: Date.now() };
  /** While a full storage closes and reopens its database: reads are refused too. */
  #reopening = false;
  #probe: NodeJS.Timeout | undefined;
  #recovering: Promise<void> | undefined;
  #closed = false;
  #recovery: OpenRecovery = { droppedBytes: 0, messages: [] };

  private constructor(db: ClassicLevel<string, Uint8Array>, options: LevelStorageOptions) {
    super({ stateCacheKeys: options.stateCacheKeys ?? 10_000 });
    this.#db = db;
    this.#options = options;
    this.#n = options.n;
    this.#sync = options.sync ?? true;
    this.#eraser = this.#newEraser(db);
    const guard: CommitGuard = { refuse: () => this.#refusal(), failed: (err) => this.#writeFailed(err) };
    this.#committer = new GroupCommitter(
      db,
      options.sync ?? true,
      options.onCommit,
      (committed) => {
        const changes = committed.flatMap((c) => (c.changes ? [c.changes] : []));
        const parts = [
          this.#totalsFor(changes),
          this.#eraser?.prepare(changes),
          this.#fragmentLog?.prepare(committed.flatMap((c) => (c.space ? [c.space] : []))),
        ].filter((p) => p !== undefined) as { ops: readonly Put[]; undo(): void; done?(): void }[];
        return {
          ops: parts.flatMap((p) => p.ops),
          undo: () => parts.forEach((p) => p.undo()),
          done: () => parts.forEach((p) => p.done?.()),
        };
      },
      guard,
    );
  }

  #newEraser(db: ClassicLevel<string, Uint8Array>): Eraser | undefined {
    const options = this.#options;
    const withinMs = options.eraseWithinMs ?? DEFAULT_ERASE_WITHIN_MS;
    return withinMs > 0
      ? new Eraser({
          db,
          path: options.path,
          withinMs,
          maxKeys: options.eraseMaxKeys ?? 64,
          // A key's entries and fragments: `h:<len>:<key>:` and `f:<len>:<key>:` (see #entryKey).
          ranges: (key) => (['f', 'h', 'v'] as const).map((p) => this.#prefixRange(`${p}:${key.length}:${key}:`)),
          all: [this.#prefixRange('f:'), this.#prefixRange('h:'), this.#prefixRange('v:')],
          marker: 'e:',
          commit: (ops) => this.#committer.commit(ops),
          onPass: options.onErase,
        })
      : undefined;
  }

  /** What the storage knows of its disk; see {@link DiskHealth}. */
  get disk(): DiskHealth {
    return this.#health;
  }

  /** The error a write gets while the disk is not `ok`, or `undefined`. */
  #refusal(): StorageError | undefined {
    if (this.#health.state !== 'ok') return new StorageError('STORAGE_FAILED', UNAVAILABLE_BECAUSE[this.#health.state]);
    return this.#reopening ? new StorageError('STORAGE_FAILED', UNAVAILABLE_BECAUSE.reopening) : undefined;
  }

  /** A LevelDB write failed: records what it says of the disk, and returns the error its callers get. */
  #writeFailed(err: unknown): StorageError {
    const kind = diskFailureOf(err);
    if (kind) this.#enter(kind, err);
    return new StorageError('STORAGE_FAILED', kind ? UNAVAILABLE_BECAUSE[kind] : `LevelDB write failed: ${(err as Error).message}`, {
      cause: err,
    });
  }

  #enter(kind: 'full' | 'failed', err: unknown): void {
    const now = this.#health.state;
    // `failed` is final; a second `full` changes nothing.
    if (now === 'failed' || now === kind) return;
    this.#health = { state: kind, reason: (err as Error).message, since: Date.now() };
    if (kind === 'full') this.#startProbing();
    else this.#stopProbing();
    this.#options.onDisk?.(this.#health, err);
  }

  #startProbing(): void {
    if (this.#probe || this.#closed) return;
    this.#probe = setInterval(() => {
      this.#recovering ??= this.#tryRecover().finally(() => (this.#recovering = undefined));
    }, this.#options.diskProbeMs ?? 5000);
    this.#probe.unref();
  }

  #stopProbing(): void {
    clearInterval(this.#probe);
    this.#probe = undefined;
  }

  /**
   * Once the filesystem has room again (statfs, then a probe file written and synced),
   * closes the database and opens it again, then accepts writes. Safe because no write was
   * acknowledged after the failed one (the log past it may be misaligned) and LevelDB's
   * recovery writes the log's records to a table and syncs it: what the reopened database
   * holds is durable. An open that fails for lack of space leaves it `full` (reads are
   * refused until an open succeeds); any other failure makes it `failed`.
   */
  async #tryRecover(): Promise<void> {
    if (this.#health.state !== 'full' || this.#closed) return;
    if (!(await this.#hasRoom())) return;
    this.#reopening = true;
    try {
      await this.#eraser?.close();
      this.#eraser = undefined;
      await this.#committer.idle();
      if (this.#db.status === 'open') await this.#db.close();
      if (this.#closed) return;
      const db = this.#newDb();
      try {
        await db.open();
        // As after the first open: CURRENT now names the new MANIFEST, by a rename LevelDB does not make durable.
        await syncDirectory(this.#options.path);
      } catch (err) {
        const kind = diskFailureOf(err) ?? 'failed';
        if (kind === 'failed') this.#enter('failed', err);
        return;
      }
      this.#db = db;
      this.#committer.use(db);
      this.#fragmentLog?.use(db);
      this.#eraser = this.#newEraser(db);
      await this.#eraser?.load();
      this.#stopProbing();
      this.#health = { state: 'ok', reason: 'the disk has room again: storage reopened, writes accepted', since: Date.now() };
      this.#options.onDisk?.(this.#health);
    } finally {
      this.#reopening = false;
    }
  }

  /** Whether the data directory's filesystem has room for reopening, and takes a synced write. */
  async #hasRoom(): Promise<boolean> {
    const path = this.#options.path;
    try {
      const fs = await statfs(path);
      const tuning = this.#options.leveldb ?? LEVELDB_TUNING;
      if (fs.bavail * fs.bsize < (this.#options.diskProbeFreeBytes ?? tuning.writeBufferSize + 8 * 1024 * 1024)) return false;
      // statfs knows nothing of quotas (or of a failure injected into writes): try one.
      const file = join(path, 'powerstore-disk-probe');
      const handle = await openFile(file, 'w');
      try {
        await handle.write(new Uint8Array(1024 * 1024));
        await handle.sync();
      } finally {
        await handle.close();
        await unlink(file);
      }
      return true;
    } catch {
      return false;
    }
  }

  #newDb(): ClassicLevel<string, Uint8Array> {
    return new ClassicLevel<string, Uint8Array>(this.#options.path, {
      keyEncoding: 'utf8',
      valueEncoding: 'view',
      ...(this.#options.leveldb ?? LEVELDB_TUNING),
    });
  }

  /** A direct (not group-committed) write: refused while the disk is not `ok`, its failure recorded like a batch's. */
  async #write(write: () => Promise<void>): Promise<void> {
    const refused = this.#refusal();
    if (refused) throw refused;
    try {
      await write();
    } catch (err) {
      throw this.#writeFailed(err);
    }
  }

  /**
   * A read's failure as the caller gets it: damage LevelDB reports is `STORAGE_CORRUPT`
   * (for `key`, when given); a failed file operation, or the database closed while a full
   * storage reopens, is `STORAGE_FAILED` (the server answers `UNAVAILABLE`).
   */
  #readFailed(err: unknown, key?: string): unknown {
    const where = key === undefined ? '' : `key ${JSON.stringify(key)}: `;
    if (isLevelCorruption(err)) return new StorageError('STORAGE_CORRUPT', `${where}LevelDB: ${(err as Error).message}`, { cause: err });
    const code = (err as { code?: unknown }).code;
    if (diskFailureOf(err) || this.#reopening || code === 'LEVEL_DATABASE_NOT_OPEN' || this.#db.status !== 'open') {
      return new StorageError('STORAGE_FAILED', `storage unavailable: ${where}LevelDB read failed: ${(err as Error).message}`, {
        cause: err,
      });
    }
    return err;
  }

  /** The keys that start with `prefix`, as an inclusive range: `prefix` and `pastPrefix(prefix)` name no record. */
  #prefixRange(prefix: string): readonly [string, string] {
    return [prefix, pastPrefix(prefix)];
  }

  /**
   * Opens (creating if needed) the database at `options.path`. Fails with
   * `STORAGE_MISMATCH` when it belongs to another cluster, a cluster of another size,
   * another server, or an older storage format.
   */
  static async open(options: LevelStorageOptions): Promise<LevelStorage> {
    // LevelDB opened with createIfMissing on a directory whose CURRENT is gone makes a new,
    // empty database and deletes the old tables as obsolete: refuse before it can.
    const headless = await orphanedFiles(options.path);
    if (headless) throw damagedDatabase(options.path, headless);
    const db = new ClassicLevel<string, Uint8Array>(options.path, {
      keyEncoding: 'utf8',
      valueEncoding: 'view',
      ...(options.leveldb ?? LEVELDB_TUNING),
    });
    try {
      await db.open();
      // Every LevelDB open writes a new MANIFEST and points CURRENT at it by a rename that
      // LevelDB 1.20 (the one classic-level bundles) does not make durable: until the next
      // MANIFEST sync (a memtable flush) a power loss brings back the old CURRENT. After the
      // first open that names MANIFEST-000001, which LevelDB 1.20 never syncs (NewDB), so the
      // server could not start again ("Corruption: no meta-nextfile entry in descriptor";
      // found by the nemesis's power losses, test/nemesis/power.test.ts).
      await syncDirectory(options.path);
    } catch (err) {
      const cause = (err as { cause?: { message?: string } }).cause?.message ?? (err as Error).message;
      const locked = /lock/i.test(cause);
      const damage = locked ? undefined : await openDamage(options.path, cause);
      if (damage) throw damagedDatabase(options.path, damage, err);
      throw new ServerError(
        'STORAGE_FAILED',
        locked
          ? `cannot open LevelDB at ${options.path}: another process (a running server?) holds its lock`
          : `cannot open LevelDB at ${options.path}: ${cause}`,
        { cause: err },
      );
    }
    let storage: LevelStorage | undefined;
    try {
      storage = new LevelStorage(db, options);
      storage.#recovery = await readRecovery(options.path);
      await storage.#checkMeta(options);
      if (storage.#recovery.droppedBytes > 0) {
        // Records LevelDB dropped from its log may be writes this server acknowledged: it
        // counts against t, and rebuilds what its peers hold, as after a lost disk.
        if (!storage.#created && (await db.get('m:fresh')) === undefined) {
          await db.put('m:fresh', encodeJson({ createdAt: Date.now(), cause: 'log' }), { sync: true });
        }
        // The totals are cumulative, kept in each batch: a dropped batch's changes live on in
        // the totals of every later batch kept. Summed again from the key records instead.
        await storage.#rewriteTotals();
      }
      await storage.#openFragmentLog();
      await storage.#load(options.path);
      await storage.#eraser?.load();
      storage.#startLogPasses();
      return storage;
    } catch (err) {
      if (storage) {
        await storage.#eraser?.close();
        await storage.#fragmentLog?.log.close();
      }
      await db.close();
      throw err;
    }
  }

  /**
   * What LevelDB's recovery reported at this open (from its info log): bytes of its
   * write-ahead log it dropped as damaged. Such records are lost, acknowledged or not, and
   * the open still succeeds; the storage then marks itself fresh (`m:fresh` with
   * `cause: "log"`) so the host rebuilds from its peers.
   */
  get recovery(): OpenRecovery {
    return this.#recovery;
  }

  /**
   * Opens the value log when it is on or its directory exists (fragments already in it are
   * read whatever the setting). After LevelDB dropped batches from its log, the live bytes
   * are summed again from the pointers.
   */
  async #openFragmentLog(): Promise<void> {
    const settings = this.#options.valueLog ?? false;
    const dir = join(this.#options.path, 'vlog');
    const exists = await access(dir).then(
      () => true,
      () => false,
    );
    if (settings === false && !exists) return;
    this.#fragmentLog = await FragmentLog.open(this.#db, dir, {
      minBytes: settings === false ? Infinity : (settings.minBytes ?? DEFAULT_VALUE_LOG_MIN_BYTES),
      segmentBytes: settings === false ? undefined : settings.segmentBytes,
      sync: this.#sync,
      recount: this.#recovery.droppedBytes > 0,
    });
  }

  /** Value-log erasure and collection, every quarter of the erase bound (every 15 s without one). */
  #startLogPasses(): void {
    const log = this.#fragmentLog;
    if (!log) return;
    const withinMs = this.#options.eraseWithinMs ?? DEFAULT_ERASE_WITHIN_MS;
    const everyMs = withinMs > 0 ? Math.max(50, Math.floor(withinMs / 4)) : 15_000;
    this.#logTimer = setInterval(() => void this.valueLogPass(), everyMs);
    this.#logTimer.unref();
  }

  /**
   * The value log's live bytes per segment, as kept and as summed from its pointers (a full
   * scan, for checks: after any crash the two must agree); `undefined` without a value log.
   */
  valueLogLive(): Promise<{ kept: Map<number, number>; counted: Map<number, number> }> | undefined {
    return this.#fragmentLog?.checkLive();
  }

  /**
   * One value-log maintenance pass now (the storage runs them on its own): records whose
   * pointers were deleted are zeroed or their segments removed, and mostly dead segments
   * are collected. `undefined` without a value log or while the disk is not `ok`.
   */
  async valueLogPass(): Promise<ValueLogPass | undefined> {
    const log = this.#fragmentLog;
    if (!log || this.#closed || this.#refusal()) return undefined;
    const pass = await log.pass({
      commit: (ops, space) => this.#committer.commit(ops, { space }),
      withKey: (key, fn) => this.withKey(key, () => fn()),
      keyOf: (name) => parseEntryName(`h:${name}`)?.key,
    });
    this.#options.onValueLogPass?.(pass);
    return pass;
  }

  async #checkMeta(options: LevelStorageOptions): Promise<void> {
    const raw = await this.#db.get('m:meta');
    const identity = options.identity ?? '';
    if (raw === undefined) {
      const meta = { format: STORAGE_FORMAT, n: options.n, cluster: options.cluster ?? '', identity };
      await this.#db.batch(
        [
          { type: 'put', key: 'm:meta', value: encodeJson(meta) },
          { type: 'put', key: 'm:totals', value: encodeJson({ keys: 0, entries: 0, largest: 0 }) },
          // In the same batch: a crash right after creating the database cannot leave one
          // that looks as if it had always been here.
          { type: 'put', key: 'm:fresh', value: encodeJson({ createdAt: Date.now() }) },
        ],
        { sync: true },
      );
      this.#created = true;
      return;
    }
    const meta = decodeJson(raw) as { format?: unknown; n?: unknown; cluster?: unknown; identity?: unknown } | undefined;
    if (meta === undefined) throw new ServerError('STORAGE_CORRUPT', `${options.path}: unreadable metadata record`);
    const older: Record<number, string> = {
      1: 'written by PowerStore 0.1 (storage format 1, MAC-authenticated writes)',
      2: 'storage format 2 (history kept forever, no entry index)',
      3: 'storage format 3 (fragments inside history records, totals summed at startup)',
    };
    const what = typeof meta.format === 'number' ? older[meta.format] : undefined;
    if (what) {
      throw new ServerError(
        'STORAGE_MISMATCH',
        `${options.path}: ${what}; this server reads format ${STORAGE_FORMAT}. Start it on an empty data directory and write the values again through a client; the old directory can be deleted.`,
      );
    }
    if (meta.format === 4) {
      // Format 5 only adds the value log's records; a format-4 server must not open it after.
      await this.#db.put('m:meta', encodeJson({ ...meta, format: STORAGE_FORMAT }), { sync: true });
      meta.format = STORAGE_FORMAT;
    }
    if (meta.format !== STORAGE_FORMAT) {
      throw new ServerError(
        'STORAGE_MISMATCH',
        `${options.path}: storage format ${String(meta.format)}, this server reads ${STORAGE_FORMAT}`,
      );
    }
    if (meta.n !== options.n) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to a cluster of ${String(meta.n)} servers, not ${options.n}`);
    }
    if (options.cluster !== undefined && meta.cluster !== options.cluster) {
      throw new ServerError('STORAGE_MISMATCH', `${options.path}: belongs to cluster ${String(meta.cluster)}, not ${options.cluster}`);
    }
    if (options.identity !== undefined && meta.identity !== identity) {
      throw new ServerError(
        'STORAGE_MISMATCH',
        `${options.path}: belongs to another server or key (${String(meta.identity)}), not ${identity}`,
      );
    }
  }

  /** Reads the persisted totals: one record, plus one per owner. */
  async #load(path: string): Promise<void> {
    const corrupt = (what: string): never => {
      throw new ServerError('STORAGE_CORRUPT', `${path}: unreadable ${what}`);
    };
    const count = (v: unknown, what: string): number => (isCount(v) ? v : corrupt(what));
    const raw = await this.#db.get('m:totals');
    if (raw === undefined) return corrupt('totals record (m:totals is missing)');
    const t = decodeJson(raw) as { keys?: unknown; entries?: unknown; largest?: unknown } | undefined;
    if (t === undefined) return corrupt('totals record');
    const w = this.#written;
    w.keys = count(t.keys, 'totals record');
    w.entries = count(t.entries, 'totals record');
    w.largest = count(t.largest, 'totals record');
    for await (const [k, v] of this.#db.iterator({ gte: 'u:', lt: 'u;' })) {
      const u = decodeJson(v) as { bytes?: unknown; keys?: unknown } | undefined;
      if (u === undefined) return corrupt(`usage record ${k}`);
      w.owners.set(k.slice(2), { bytes: count(u.bytes, `usage record ${k}`), keys: count(u.keys, `usage record ${k}`) });
    }
    this.restore({
      keys: w.keys,
      entries: w.entries,
      largestFragment: w.largest,
      owners: [...w.owners].map(([o, u]) => [o, { ...u }] as const),
    });
  }

  /** Replaces the persisted totals with {@link recount}'s, before they are loaded; the largest fragment stays an upper bound. */
  async #rewriteTotals(): Promise<void> {
    const counted = await this.recount();
    const raw = await this.#db.get('m:totals');
    // An unreadable totals record is replaced whole; #load would refuse it anyway.
    const l = raw && (decodeJson(raw) as { largest?: unknown } | undefined)?.largest;
    const largest = isCount(l) ? l : 0;
    const ops: Put[] = [];
    for await (const k of this.#db.keys({ gte: 'u:', lt: 'u;' })) if (!counted.owners.has(k.slice(2))) ops.push({ type: 'del', key: k });
    for (const [owner, u] of counted.owners) ops.push({ type: 'put', key: `u:${owner}`, value: encodeJson(u) });
    ops.push({ type: 'put', key: 'm:totals', value: encodeJson({ keys: counted.keys, entries: counted.entries, largest }) });
    await this.#db.batch(ops, { sync: true });
  }

  /**
   * The totals summed from every key record: a full scan, for checks (the totals kept and
   * persisted must always equal it; tests compare the two after crashes).
   */
  async recount(): Promise<{ keys: number; entries: number; owners: Map<string, Usage> }> {
    const owners = new Map<string, Usage>();
    let keys = 0;
    let entries = 0;
    for await (const [k, raw] of this.#db.iterator({ gte: 'k:', lt: 'k;' })) {
      const state = this.#decodeState(k.slice(2), raw);
      if (state.index.length === 0) continue;
      keys++;
      entries += state.index.reduce((sum, w) => sum + entriesOf(w), 0);
      const u = owners.get(state.owner) ?? { bytes: 0, keys: 0 };
      const bytes = u.bytes + state.index.reduce((sum, w) => sum + w.bytes, 0);
      owners.set(state.owner, { bytes, keys: u.keys + (state.index.some((w) => !w.tombstone) ? 1 : 0) });
    }
    return { keys, entries, owners };
  }

  /** The totals records one batch writes, from the changes it carries. */
  #totalsFor(changes: readonly KeyChanges[]): { ops: Put[]; undo(): void } {
    const w = this.#written;
    const before = { keys: w.keys, entries: w.entries, largest: w.largest };
    const owners = new Map<string, { bytes: number; keys: number } | undefined>();
    for (const c of changes) {
      w.keys += c.keys;
      w.entries += c.entries;
      for (const e of c.puts) w.largest = Math.max(w.largest, e.fragment.length);
      for (const u of c.usage) {
        if (!owners.has(u.owner)) owners.set(u.owner, w.owners.has(u.owner) ? { ...w.owners.get(u.owner)! } : undefined);
        const now = w.owners.get(u.owner) ?? { bytes: 0, keys: 0 };
        w.owners.set(u.owner, { bytes: now.bytes + u.bytes, keys: now.keys + u.keys });
      }
    }
    const ops: Put[] = [{ type: 'put', key: 'm:totals', value: encodeJson({ keys: w.keys, entries: w.entries, largest: w.largest }) }];
    for (const owner of owners.keys()) {
      const u = w.owners.get(owner)!;
      if (u.bytes === 0 && u.keys === 0) {
        w.owners.delete(owner);
        ops.push({ type: 'del', key: `u:${owner}` });
      } else ops.push({ type: 'put', key: `u:${owner}`, value: encodeJson(u) });
    }
    return {
      ops,
      undo: () => {
        Object.assign(w, before);
        for (const [owner, u] of owners) {
          if (u) w.owners.set(owner, u);
          else w.owners.delete(owner);
        }
      },
    };
  }

  /**
   * Whether this open created the database (the directory was empty or new). See also the
   * `m:fresh` marker, which outlives restarts until the host clears it.
   */
  get created(): boolean {
    return this.#created;
  }

  /** The JSON marker `m:<name>`, or `undefined`. */
  async getMarker(name: string): Promise<unknown> {
    const raw = await this.#db.get(`m:${name}`);
    if (raw === undefined) return undefined;
    const marker = decodeJson(raw);
    if (marker === undefined) throw new ServerError('STORAGE_CORRUPT', `unreadable marker m:${name}`);
    return marker;
  }

  /** Writes (synced) the JSON marker `m:<name>`, or deletes it for `undefined`. */
  async setMarker(name: string, value: unknown): Promise<void> {
    if (RESERVED_MARKERS.has(name) || !/^[a-z][a-z0-9-]*$/.test(name)) throw new ServerError('CONFIG_INVALID', `marker name ${name}`);
    await this.#write(() =>
      value === undefined ? this.#db.del(`m:${name}`, { sync: true }) : this.#db.put(`m:${name}`, encodeJson(value), { sync: true }),
    );
  }

  /**
   * Every stored history entry (one per stripe), in key order from behind `after` (a
   * {@link StoredEntryRef.cursor}; `''` for the start), as committed: what scrub walks.
   * Reads only the small metadata records. A record whose name does not parse is skipped;
   * LevelDB failing to read its files rejects (`STORAGE_CORRUPT` when it reports damage).
   */
  async *historyEntries(after = ''): AsyncIterable<StoredEntryRef> {
    let cursor = after;
    for (;;) {
      // Read in small batches, each iterator closed before its entries are handed out: a
      // LevelDB iterator pins the files it reads, and a walk that waits between entries
      // (scrub is rate-limited) would otherwise keep compaction from freeing space.
      const batch: StoredEntryRef[] = [];
      const range = cursor > 'h:' ? { gt: cursor } : { gte: 'h:' };
      let read = 0;
      try {
        for await (const [k, raw] of this.#db.iterator({ ...range, lt: 'h;', limit: HISTORY_BATCH, fillCache: false })) {
          read++;
          cursor = k;
          const ref = parseEntryName(k);
          if (!ref) continue;
          let fragmentLength: number | undefined;
          try {
            const r = decodeEntryMetaRecord(this.#view(raw), this.#n);
            fragmentLength = r.key === ref.key ? r.fragmentLength : undefined;
          } catch {
            fragmentLength = undefined;
          }
          batch.push({ cursor: k, ...ref, fragmentLength });
        }
      } catch (err) {
        throw this.#readFailed(err);
      }
      yield* batch;
      if (read < HISTORY_BATCH) return;
    }
  }

  #corrupt(key: string, message: string): StorageError {
    // The protocol's storage error: its server tells damaged entries (scrub, repair) by it.
    return new StorageError('STORAGE_CORRUPT', `key ${JSON.stringify(key)}: ${message}`);
  }

  /** A LevelDB read, with damage it reports turned into `STORAGE_CORRUPT` for `key`. */
  async #read<T>(key: string, read: () => Promise<T>): Promise<T> {
    try {
      if (this.#reopening) throw new StorageError('STORAGE_FAILED', UNAVAILABLE_BECAUSE.reopening);
      return await read();
    } catch (err) {
      if (err instanceof StorageError) throw err;
      throw this.#readFailed(err, key);
    }
  }

  /** LevelDB hands back Buffers; a plain view keeps callers' comparisons independent of Node's Buffer subclass, without copying. */
  #view(raw: Uint8Array): Uint8Array {
    return new Uint8Array(raw.buffer, raw.byteOffset, raw.byteLength);
  }

  #entryKey(prefix: 'h' | 'f' | 'v', key: string, ts: Timestamp, stripe: number): string {
    return `${prefix}:${key.length}:${key}:${entryId(ts, stripe)}`;
  }

  async *unfinishedKeys(): AsyncIterable<string> {
    for await (const k of this.#db.keys({ gte: 'p:', lt: 'p;' })) yield k.slice(2);
  }

  protected async readStates(prefix: string, after: string, limit: number): Promise<readonly (readonly [string, KeyState])[]> {
    // Strings are stored as UTF-8, whose byte order is `compareKeys`'s code point order.
    const range = compareKeys(after, prefix) >= 0 ? { gt: `k:${after}` } : { gte: `k:${prefix}` };
    const out: [string, KeyState][] = [];
    try {
      // Records in chunks (`nextv`), not one `next` each: a LIST reads a thousand, and each
      // `next` cost more than decoding its record. Chunks grow from a few, so reading past
      // the prefix's last key reads at most as many records again as were in it. (A chunk
      // may come back short of what was asked, its bytes bounded by `highWaterMarkBytes`;
      // only an empty one is the end.)
      const it = this.#db.iterator({ ...range, lt: 'k;', limit, highWaterMarkBytes: 256 * 1024 });
      try {
        for (let chunk = Math.min(limit, 16); out.length < limit; chunk = Math.min(limit - out.length, 2 * chunk)) {
          const records = await it.nextv(chunk);
          if (records.length === 0) break;
          for (const [k, raw] of records) {
            const key = k.slice(2);
            if (!key.startsWith(prefix)) return out;
            out.push([key, this.#decodeState(key, raw)]);
          }
        }
      } finally {
        await it.close();
      }
    } catch (err) {
      if (err instanceof StorageError) throw err;
      throw this.#readFailed(err);
    }
    return out;
  }

  protected async readState(key: string): Promise<KeyState | undefined> {
    const raw = await this.#read(key, () => this.#db.get(`k:${key}`));
    return raw === undefined ? undefined : this.#decodeState(key, raw);
  }

  /** The state in `key`'s record, which must name `key`; `STORAGE_CORRUPT` otherwise. */
  #decodeState(key: string, raw: Uint8Array): KeyState {
    let r;
    try {
      r = decodeKeyRecord(this.#view(raw), this.#n);
    } catch (err) {
      throw this.#corrupt(key, (err as Error).message);
    }
    if (r.key !== key) throw this.#corrupt(key, `record names key ${JSON.stringify(r.key)}`);
    return r.state;
  }

  #decodeMeta(key: string, raw: Uint8Array): { meta: EntryMeta; fragmentLength: number } {
    let r;
    try {
      r = decodeEntryMetaRecord(this.#view(raw), this.#n);
    } catch (err) {
      throw this.#corrupt(key, (err as Error).message);
    }
    if (r.key !== key) throw this.#corrupt(key, `record names key ${JSON.stringify(r.key)}`);
    return r;
  }

  protected async readEntryMeta(key: string, ts: Timestamp, stripe: number): Promise<EntryMeta | undefined> {
    const raw = await this.#read(key, () => this.#db.get(this.#entryKey('h', key, ts, stripe)));
    return raw === undefined ? undefined : this.#decodeMeta(key, raw).meta;
  }

  protected override async readEntryMetas(
    reads: readonly { readonly key: string; readonly ts: Timestamp }[],
  ): Promise<(EntryMeta | undefined)[]> {
    if (reads.length === 0) return [];
    // One call for the whole batch: one hop to LevelDB's thread, not one a key.
    const raws = await this.#read(reads[0]!.key, () => this.#db.getMany(reads.map((r) => this.#entryKey('h', r.key, r.ts, 0))));
    return raws.map((raw, i) => (raw === undefined ? undefined : this.#decodeMeta(reads[i]!.key, raw).meta));
  }

  protected async readFragment(key: string, ts: Timestamp, stripe: number): Promise<Uint8Array | undefined> {
    if (!this.#fragmentLog) {
      const raw = await this.#read(key, () => this.#db.get(this.#entryKey('f', key, ts, stripe)));
      return raw === undefined ? undefined : this.#view(raw);
    }
    const [raw, pointer] = await this.#read(key, () =>
      this.#db.getMany([this.#entryKey('f', key, ts, stripe), this.#entryKey('v', key, ts, stripe)]),
    );
    return this.#fragmentOf(key, ts, stripe, raw, pointer);
  }

  /** An entry's fragment from its `f:` record or, failing that, from the value log its `v:` record points into. */
  async #fragmentOf(
    key: string,
    ts: Timestamp,
    stripe: number,
    raw: Uint8Array | undefined,
    pointer: Uint8Array | undefined,
  ): Promise<Uint8Array | undefined> {
    if (raw !== undefined || pointer === undefined || !this.#fragmentLog) return raw === undefined ? undefined : this.#view(raw);
    try {
      return await this.#fragmentLog.read(this.#entryKey('v', key, ts, stripe).slice(2), pointer);
    } catch (err) {
      // A damaged record is the entry's damage: scrub and repair find it by this code.
      if (err instanceof ValueLogDamage) throw this.#corrupt(key, `value log: ${err.message}`);
      throw new StorageError(
        'STORAGE_FAILED',
        `storage unavailable: key ${JSON.stringify(key)}: value log read failed: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  }

  protected override async readEntry(key: string, ts: Timestamp, stripe: number): Promise<HistoryEntry | undefined> {
    // One call for every record: one hop to LevelDB's thread instead of two or three.
    const names = [this.#entryKey('h', key, ts, stripe), this.#entryKey('f', key, ts, stripe)];
    if (this.#fragmentLog) names.push(this.#entryKey('v', key, ts, stripe));
    const [meta, raw, pointer] = await this.#read(key, () => this.#db.getMany(names));
    if (meta === undefined) return undefined;
    const m = this.#decodeMeta(key, meta);
    const fragment = await this.#fragmentOf(key, ts, stripe, raw, pointer);
    if (fragment === undefined || fragment.length !== m.fragmentLength) {
      throw this.#corrupt(
        key,
        `fragment of entry ${ts.num} is ${fragment === undefined ? 'missing' : `${fragment.length} bytes, not ${m.fragmentLength}`}`,
      );
    }
    return { ...m.meta, fragment };
  }

  protected async commit(c: KeyChanges): Promise<void> {
    // Refused before reading stripe names from a database that may be closed for reopening.
    const refused = this.#refusal();
    if (refused) throw refused;
    const ops: Put[] = [];
    const log = this.#fragmentLog;
    /** `v:` records this commit deletes or replaces: their records in the log become dead. */
    const replaced: string[] = [];
    for (const d of c.deletes) {
      // A write too small for the log ever to have taken a fragment of it is not looked up.
      const mayBeInLog = log !== undefined && (d.bytes === undefined || log.mayHold(d.bytes));
      for (const stripe of d.stripes ? [0, ...(await this.#storedStripes(c.key, d.ts))] : [0]) {
        ops.push({ type: 'del', key: this.#entryKey('h', c.key, d.ts, stripe) });
        ops.push({ type: 'del', key: this.#entryKey('f', c.key, d.ts, stripe) });
        if (mayBeInLog) replaced.push(this.#entryKey('v', c.key, d.ts, stripe));
      }
    }
    if (c.state) {
      ops.push({ type: 'put', key: `k:${c.key}`, value: encodeKeyRecord(c.key, c.state) });
      ops.push(c.state.index.some((w) => !w.head) ? { type: 'put', key: `p:${c.key}`, value: EMPTY } : { type: 'del', key: `p:${c.key}` });
    }
    // A repair rewrites a damaged entry: its old copy in the log, if any, is dead.
    if (log) for (const e of c.restored ?? []) replaced.push(this.#entryKey('v', c.key, e.ts, e.stripe));
    const old = replaced.length > 0 ? await this.#read(c.key, () => this.#db.getMany(replaced)) : [];
    const dead: ValueLogPointer[] = [];
    old.forEach((raw, i) => {
      const p = raw && decodePointer(raw);
      if (!p) return;
      dead.push(p);
      ops.push({ type: 'del', key: replaced[i]! });
    });
    // Every fragment of the commit appended at once: one group, one fdatasync.
    const appends: { key: string; pointer: Promise<ValueLogPointer> }[] = [];
    for (const e of c.puts) {
      ops.push({ type: 'put', key: this.#entryKey('h', c.key, e.ts, e.stripe), value: encodeEntryMetaRecord(c.key, e) });
      const f = this.#entryKey('f', c.key, e.ts, e.stripe);
      if (log?.takes(e.fragment.length)) {
        const v = this.#entryKey('v', c.key, e.ts, e.stripe);
        ops.push({ type: 'del', key: f });
        appends.push({ key: v, pointer: this.#appendFragment(log, v.slice(2), e.fragment) });
      } else ops.push({ type: 'put', key: f, value: e.fragment });
    }
    const settled = await Promise.allSettled(appends.map((a) => a.pointer));
    const added = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    try {
      const failed = settled.find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      appends.forEach((a, i) => ops.push({ type: 'put', key: a.key, value: encodePointer(added[i]!) }));
      await this.#committer.commit(ops, { changes: c, space: log && (added.length > 0 || dead.length > 0) ? { added, dead } : undefined });
    } catch (err) {
      log?.abandon(added);
      throw err;
    }
  }

  async #appendFragment(log: FragmentLog, name: string, fragment: Uint8Array): Promise<ValueLogPointer> {
    try {
      return await log.append(name, fragment);
    } catch (err) {
      throw this.#writeFailed(err);
    }
  }

  /**
   * The stripes ≥ 1 of `Hist[key][ts]` on disk: the index counts a write's stripes but does
   * not list them, so collecting a write reads its stripe records' names (no values).
   */
  async #storedStripes(key: string, ts: Timestamp): Promise<number[]> {
    // `h:…:<wid>#<s>` for every stripe s ≥ 1; '$' is the character after '#'.
    const prefix = `${this.#entryKey('h', key, ts, 0)}#`;
    const stripes: number[] = [];
    for await (const k of this.#db.keys({ gt: prefix, lt: `${prefix.slice(0, -1)}$` })) stripes.push(Number(k.slice(prefix.length)));
    return stripes;
  }

  /**
   * The highest key epoch (`epochs.ts` in the protocol) the server was at on this
   * database, 0 if none was recorded. A server must not go back to an older epoch, where it
   * would answer clients of a retired one: the host refuses to start below it.
   */
  async keyEpoch(): Promise<number> {
    const raw = await this.#db.get('m:epoch');
    if (raw === undefined) return 0;
    const epoch = decodeJson(raw);
    if (!isCount(epoch)) {
      throw new ServerError('STORAGE_CORRUPT', 'unreadable key epoch record (m:epoch)');
    }
    return epoch;
  }

  /** Records that the server is at key epoch `epoch` (durably, before it answers a request of it); never lowers it. */
  async recordKeyEpoch(epoch: number): Promise<void> {
    if (epoch <= (await this.keyEpoch())) return;
    await this.#write(() => this.#db.put('m:epoch', encodeJson(epoch), { sync: this.#sync }));
  }

  protected async closeBackend(): Promise<void> {
    this.#closed = true;
    this.#stopProbing();
    clearInterval(this.#logTimer);
    await this.#recovering;
    await this.#fragmentLog?.idle();
    await this.#eraser?.close();
    await this.#committer.idle();
    await this.#fragmentLog?.log.close();
    await this.#db.close();
  }
}

/**
 * `h:<len>:<key>:<num>:<writerId hex>[#<stripe>]` back into its parts, or `undefined`
 * for a name of another shape (`<len>` is the key's length in UTF-16 code units, as
 * JavaScript counts it).
 */
export function parseEntryName(name: string): { key: string; ts: Timestamp; stripe: number } | undefined {
  const m = /^h:(\d+):/.exec(name);
  if (!m) return undefined;
  const start = m[0].length;
  const end = start + Number(m[1]);
  if (end > name.length || name[end] !== ':') return undefined;
  const key = name.slice(start, end);
  const rest = /^:(\d+):([0-9a-f]{64})(?:#(\d+))?$/.exec(name.slice(end));
  if (!rest) return undefined;
  const num = Number(rest[1]);
  const stripe = rest[3] === undefined ? 0 : Number(rest[3]);
  if (!Number.isSafeInteger(num) || !Number.isSafeInteger(stripe) || (rest[3] !== undefined && stripe === 0)) return undefined;
  const writerId = new Uint8Array(32);
  for (let i = 0; i < 32; i++) writerId[i] = parseInt(rest[2]!.slice(2 * i, 2 * i + 2), 16);
  return { key, ts: { num, writerId }, stripe };
}

/** Bytes an unprivileged writer may still write on `dir`'s filesystem, or `undefined` if statfs fails (`/status`, the metrics). */
export function freeBytes(dir: string): number | undefined {
  try {
    const fs = statfsSync(dir);
    return fs.bavail * fs.bsize;
  } catch {
    return undefined;
  }
}

/** What LevelDB's recovery reported when the database opened ({@link LevelStorage.recovery}). */
export interface OpenRecovery {
  /** Bytes of the write-ahead log (`*.log`) LevelDB dropped because they failed their checksum. */
  readonly droppedBytes: number;
  /** LevelDB's own lines about it (at most 10). */
  readonly messages: readonly string[];
}

/**
 * Reads what LevelDB logged while opening (its info log, `LOG`, which each open starts
 * afresh): a damaged write-ahead log is not an open error, LevelDB drops the records that
 * fail their checksum and says so only there ("…: dropping 4104 bytes; Corruption:
 * checksum mismatch"). A crash's torn tail is not reported this way.
 */
async function readRecovery(path: string): Promise<OpenRecovery> {
  let text: string;
  try {
    text = await readFile(join(path, 'LOG'), 'utf8');
  } catch {
    return { droppedBytes: 0, messages: [] };
  }
  let droppedBytes = 0;
  const messages: string[] = [];
  for (const line of text.split('\n')) {
    const m = /dropping (\d+) bytes/.exec(line);
    if (!m) continue;
    droppedBytes += Number(m[1]);
    if (messages.length < 10) messages.push(line.replace(/^\S+ \S+ /, '').trim());
  }
  return { droppedBytes, messages };
}

/**
 * A data directory that holds LevelDB's files without the CURRENT that names its
 * MANIFEST, or `undefined`: LevelDB would start a new database there and delete the old
 * files.
 */
async function orphanedFiles(path: string): Promise<string | undefined> {
  let files: string[];
  try {
    files = await readdir(path);
  } catch {
    return undefined;
  }
  if (files.includes('CURRENT')) return undefined;
  const level = files.filter((f) => /^(\d+\.(ldb|sst|log)|MANIFEST-\d+)$/.test(f));
  return level.length > 0
    ? `CURRENT is missing, but the directory holds ${level.length} LevelDB files (${level.slice(0, 3).join(', ')}…)`
    : undefined;
}

/**
 * Why LevelDB could not open `path`, when its files are damaged (rather than unreadable for
 * a passing reason): CURRENT not naming an existing MANIFEST, a MANIFEST that fails its
 * checksum, table files the MANIFEST lists that are gone. `undefined` otherwise.
 */
async function openDamage(path: string, cause: string): Promise<string | undefined> {
  let current: string | undefined;
  try {
    current = await readFile(join(path, 'CURRENT'), 'utf8');
  } catch {
    current = undefined;
  }
  if (current !== undefined) {
    const name = /^(MANIFEST-\d+)\n$/.exec(current)?.[1];
    if (!name) return `its CURRENT file is damaged (it must name a MANIFEST; it holds ${JSON.stringify(current.slice(0, 40))})`;
    let present = true;
    try {
      await access(join(path, name));
    } catch {
      present = false;
    }
    if (!present) return `its CURRENT file names ${name}, which is missing`;
  }
  if (/\bCorruption\b/.test(cause)) {
    return /missing files/.test(cause)
      ? `table files its MANIFEST lists are missing (LevelDB: ${cause})`
      : `its MANIFEST or another file is damaged (LevelDB: ${cause})`;
  }
  return undefined;
}

/** The error for a data directory whose files are damaged: one line, with what to do. */
function damagedDatabase(path: string, what: string, cause?: unknown): ServerError {
  return new ServerError(
    'STORAGE_CORRUPT',
    `cannot open LevelDB at ${path}: ${what}. The server cannot start on it: move the directory aside (keep it to inspect) ` +
      'and start this server on an empty data directory, where it rebuilds from its peers (check first with ' +
      '`powerstore-server status` that the others are healthy)',
    cause === undefined ? undefined : { cause },
  );
}
