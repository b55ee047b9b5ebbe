/**
 * Large fragments outside the LSM tree: an append-only log of segment files beside LevelDB
 * (key–value separation, as in WiscKey). LevelDB writes a value to its log, again to a
 * level-0 table and again at every compaction that merges it down, and the deletes of the
 * bounded history make those compactions rewrite live fragments next to dead ones: 4–6
 * bytes on disk per byte of fragment (`pnpm bench:storage`). A value log writes a fragment
 * once, and LevelDB keeps only a small {@link ValueLogPointer} to it.
 *
 * Durability: {@link ValueLog.append} writes a group of records and fdatasyncs the segment
 * before it resolves, and the caller writes the pointers in a later synced LevelDB batch,
 * so no durable pointer names bytes that are not on disk. Records written whose pointers
 * never became durable (a crash in between) are garbage, reclaimed with their segment.
 * Offsets are never reused: a new segment is started at every open and after a failed
 * write, and segment numbers only grow, so a pointer cannot name a later record's bytes.
 *
 * A record is a 16-byte header (magic, the name's and the data's lengths, the data's
 * CRC-32) followed by the entry's name (its LevelDB key suffix, so a collector walking a
 * segment knows whose record it is) and the data. {@link ValueLog.erase} overwrites a
 * record's CRC, name and data with zeros but keeps the rest of its header (lengths), so a
 * walk can still step over it.
 */
import { mkdir, open as openFile, readdir, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';
import { syncDirectory } from './files.js';

/** Where a record is: segment, offset of its header, and its name's and data's lengths. */
export interface ValueLogPointer {
  readonly segment: number;
  readonly offset: number;
  readonly nameLength: number;
  readonly dataLength: number;
  /** CRC-32 of the data, checked on every read. */
  readonly crc: number;
}

/** Bytes of an encoded {@link ValueLogPointer}. */
export const POINTER_BYTES = 24;
/** Bytes of a record header. */
export const HEADER_BYTES = 16;
const MAGIC = 0x50535631; // "PSV1"
/** The header's last field: the data's CRC-32. */
const CRC_BYTES = 4;

/** The bytes a record takes in its segment. */
export function recordBytes(p: Pick<ValueLogPointer, 'nameLength' | 'dataLength'>): number {
  return HEADER_BYTES + p.nameLength + p.dataLength;
}

export function encodePointer(p: ValueLogPointer): Uint8Array {
  const b = new Uint8Array(POINTER_BYTES);
  const v = new DataView(b.buffer);
  v.setUint32(0, p.segment);
  // Offsets pass 4 GiB only in segments larger than anyone configures, but cost nothing to allow.
  v.setFloat64(4, p.offset);
  v.setUint32(12, p.nameLength);
  v.setUint32(16, p.dataLength);
  v.setUint32(20, p.crc);
  return b;
}

/** The pointer in `b`, or `undefined` when `b` is not one (a damaged record). */
export function decodePointer(b: Uint8Array): ValueLogPointer | undefined {
  if (b.length !== POINTER_BYTES) return undefined;
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const p = {
    segment: v.getUint32(0),
    offset: v.getFloat64(4),
    nameLength: v.getUint32(12),
    dataLength: v.getUint32(16),
    crc: v.getUint32(20),
  };
  return Number.isSafeInteger(p.offset) && p.offset >= 0 ? p : undefined;
}

/** A record that cannot be read as its pointer says: the segment is gone, short, or its bytes are damaged. */
export class ValueLogDamage extends Error {}

/** A record as {@link ValueLog.records} finds it walking a segment. */
export interface SegmentRecord {
  readonly offset: number;
  readonly name: string;
  readonly nameLength: number;
  readonly dataLength: number;
}

/** How to open a {@link ValueLog}. */
export interface ValueLogOptions {
  /** Directory of the segment files; created if missing. */
  readonly dir: string;
  /** A segment takes appends until it holds this many bytes. Default 64 MiB. */
  readonly segmentBytes?: number;
  /** `false` skips fdatasync (benchmarks only). */
  readonly sync?: boolean;
  /** Segment files kept open for reading at once. Default 64. */
  readonly openFiles?: number;
  /**
   * New segments are numbered past this one too: the highest segment the caller's records
   * may still name although its file is gone (a removed segment's erasure markers).
   */
  readonly after?: number;
}

/** Default size at which a segment stops taking appends. */
export const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;

interface Append {
  readonly name: Uint8Array;
  readonly data: Uint8Array;
  resolve(p: ValueLogPointer): void;
  reject(err: unknown): void;
}

interface Handle {
  readonly file: FileHandle;
  users: number;
  /** Out of the cache: closed once its last user is done. */
  retired?: boolean;
}

const segmentFile = (n: number) => `${String(n).padStart(8, '0')}.vlog`;
const SEGMENT_NAME = /^(\d{8})\.vlog$/;

/** The log: appends in groups (one write and one fdatasync for everything waiting), reads by pointer. */
export class ValueLog {
  readonly #dir: string;
  readonly #segmentBytes: number;
  readonly #sync: boolean;
  readonly #openFiles: number;
  /** The segment taking appends, once one was started at this open. */
  #active: { segment: number; file: FileHandle; size: number } | undefined;
  /** The segment whose file {@link #startSegment} is creating: it counts as active already. */
  #starting: number | undefined;
  #next: number;
  #queue: Append[] = [];
  #writing: Promise<void> | undefined;
  #scheduled = false;
  /** Read handles, least recently used first. */
  readonly #handles = new Map<number, Handle>();
  /** Segments removed so far: a handle opened across a removal is not cached. */
  #removals = 0;
  #closed = false;

  private constructor(options: ValueLogOptions, next: number) {
    this.#dir = options.dir;
    this.#segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    this.#sync = options.sync ?? true;
    this.#openFiles = Math.max(2, options.openFiles ?? 64);
    this.#next = next;
  }

  /** Opens the log in `options.dir`; appends go to a new segment numbered past every existing one. */
  static async open(options: ValueLogOptions): Promise<ValueLog> {
    await mkdir(options.dir, { recursive: true });
    const existing = await ValueLog.#list(options.dir);
    return new ValueLog(options, Math.max(existing.at(-1) ?? 0, options.after ?? 0) + 1);
  }

  static async #list(dir: string): Promise<number[]> {
    const out: number[] = [];
    for (const f of await readdir(dir)) {
      const m = SEGMENT_NAME.exec(f);
      if (m) out.push(Number(m[1]));
    }
    return out.sort((a, b) => a - b);
  }

  /** The segment files present, in order. */
  segments(): Promise<number[]> {
    return ValueLog.#list(this.#dir);
  }

  /** The segment taking appends now (`undefined` before the first append of this open). */
  get active(): number | undefined {
    return this.#active?.segment ?? this.#starting;
  }

  /**
   * Appends `data` under `name` and resolves once it is durable (with everything appended
   * in the same event-loop turn, or while the previous group was syncing). A failed write
   * rejects every record of its group and retires the segment: the next append starts a
   * new one, so no offset is reused.
   */
  append(name: string, data: Uint8Array): Promise<ValueLogPointer> {
    if (this.#closed) return Promise.reject(new Error('value log closed'));
    return new Promise<ValueLogPointer>((resolve, reject) => {
      this.#queue.push({ name: new TextEncoder().encode(name), data, resolve, reject });
      if (this.#writing || this.#scheduled) return;
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        this.#flush();
      });
    });
  }

  #flush(): void {
    if (this.#writing || this.#queue.length === 0) return;
    const group = this.#queue;
    this.#queue = [];
    this.#writing = this.#write(group).then(
      (pointers) => group.forEach((a, i) => a.resolve(pointers[i]!)),
      (err: unknown) => group.forEach((a) => a.reject(err)),
    );
    void this.#writing.finally(() => {
      this.#writing = undefined;
      this.#flush();
    });
  }

  async #write(group: readonly Append[]): Promise<ValueLogPointer[]> {
    const bytes = group.reduce((sum, a) => sum + HEADER_BYTES + a.name.length + a.data.length, 0);
    if (!this.#active || (this.#active.size > 0 && this.#active.size + bytes > this.#segmentBytes)) await this.#startSegment();
    const active = this.#active!;
    const pointers: ValueLogPointer[] = [];
    const buffers: Uint8Array[] = [];
    let at = active.size;
    for (const a of group) {
      const header = new Uint8Array(HEADER_BYTES);
      const v = new DataView(header.buffer);
      const crc = crc32(a.data);
      v.setUint32(0, MAGIC);
      v.setUint32(4, a.name.length);
      v.setUint32(8, a.data.length);
      v.setUint32(12, crc);
      buffers.push(header, a.name, a.data);
      pointers.push({ segment: active.segment, offset: at, nameLength: a.name.length, dataLength: a.data.length, crc });
      at += HEADER_BYTES + a.name.length + a.data.length;
    }
    try {
      await writeFully(active.file, buffers, active.size);
      if (this.#sync) await active.file.datasync();
    } catch (err) {
      // What reached the file is unknown: nothing more goes to this segment.
      this.#active = undefined;
      await active.file.close().catch(() => undefined);
      throw err;
    }
    active.size = at;
    return pointers;
  }

  async #startSegment(): Promise<void> {
    const old = this.#active;
    this.#active = undefined;
    if (old) await old.file.close();
    const segment = this.#next++;
    // Listed from here on, but holding no record yet: no pass may take it for a dead one.
    this.#starting = segment;
    try {
      const file = await openFile(join(this.#dir, segmentFile(segment)), 'wx');
      try {
        // The file's name must be durable before a pointer into it is.
        if (this.#sync) await syncDirectory(this.#dir);
      } catch (err) {
        await file.close();
        throw err;
      }
      this.#active = { segment, file, size: 0 };
    } finally {
      this.#starting = undefined;
    }
  }

  /** Resolves when no append is waiting or being written. */
  async idle(): Promise<void> {
    while (this.#writing || this.#queue.length > 0 || this.#scheduled) {
      await (this.#writing ?? new Promise((r) => setImmediate(r)));
    }
  }

  /**
   * The data `p` points to, whose record must be named `name`. Rejects with
   * {@link ValueLogDamage} when the segment is gone or short, or the header or name do not
   * match, and with `verify` when the data fails its CRC; with the file system's error when
   * reading fails.
   *
   * The CRC is not checked unless asked: it costs a third of a 128 KiB read's CPU, and what
   * a server serves is checked end to end anyway (readers, scrub and the start check hash
   * every fragment against its cross-checksum, as for fragments in LevelDB, whose reads
   * check nothing). Collection asks, so that it does not copy damage silently.
   */
  async read(p: ValueLogPointer, name: string, options: { readonly verify?: boolean } = {}): Promise<Uint8Array> {
    const length = recordBytes(p);
    // Not zero-filled: the read overwrites all of it, or the record is refused as short.
    const record = new Uint8Array(Buffer.allocUnsafeSlow(length).buffer, 0, length);
    const bytesRead = await this.#use(
      p.segment,
      `record ${name}`,
      async (file) => (await file.read(record, 0, length, p.offset)).bytesRead,
    );
    if (bytesRead !== length) throw new ValueLogDamage(`segment ${p.segment} ends inside the record at ${p.offset}`);
    const v = new DataView(record.buffer);
    if (v.getUint32(0) !== MAGIC || v.getUint32(4) !== p.nameLength || v.getUint32(8) !== p.dataLength) {
      throw new ValueLogDamage(`segment ${p.segment} holds no record header at ${p.offset}`);
    }
    const stored = new TextDecoder().decode(record.subarray(HEADER_BYTES, HEADER_BYTES + p.nameLength));
    if (stored !== name) throw new ValueLogDamage(`segment ${p.segment} at ${p.offset} holds another record (${JSON.stringify(stored)})`);
    const data = record.subarray(HEADER_BYTES + p.nameLength);
    if (v.getUint32(12) !== p.crc) throw new ValueLogDamage(`segment ${p.segment} at ${p.offset}: the header's CRC is not the pointer's`);
    if (options.verify && crc32(data) !== p.crc) throw new ValueLogDamage(`segment ${p.segment} at ${p.offset}: the data fails its CRC`);
    return data;
  }

  /**
   * The records of `segment`, in order, up to the first that does not parse (the unsynced
   * tail of a crash). Erased records come back with names of zeros, which no pointer has.
   */
  async *records(segment: number): AsyncIterable<SegmentRecord> {
    let offset = 0;
    const header = new Uint8Array(HEADER_BYTES);
    // A record reaching past the end is the torn tail; lengths are never trusted beyond it.
    const end = await this.size(segment);
    for (;;) {
      const got = await this.#use(segment, 'walk', async (file) => (await file.read(header, 0, HEADER_BYTES, offset)).bytesRead);
      if (got < HEADER_BYTES) return;
      const v = new DataView(header.buffer);
      if (v.getUint32(0) !== MAGIC) return;
      const nameLength = v.getUint32(4);
      const dataLength = v.getUint32(8);
      if (offset + HEADER_BYTES + nameLength + dataLength > end) return;
      const nameBytes = new Uint8Array(nameLength);
      const n = await this.#use(
        segment,
        'walk',
        async (file) => (await file.read(nameBytes, 0, nameLength, offset + HEADER_BYTES)).bytesRead,
      );
      if (n < nameLength) return;
      yield { offset, name: new TextDecoder().decode(nameBytes), nameLength, dataLength };
      offset += HEADER_BYTES + nameLength + dataLength;
    }
  }

  /** Bytes `segment`'s file holds (0 when it is gone). */
  async size(segment: number): Promise<number> {
    if (this.#active?.segment === segment) return this.#active.size;
    try {
      return await this.#use(segment, 'size', async (file) => (await file.stat()).size);
    } catch (err) {
      if (err instanceof ValueLogDamage) return 0;
      throw err;
    }
  }

  /**
   * Overwrites the CRCs, names and data of records with zeros and makes that durable: the bytes
   * of collected fragments leave the file without waiting for their segment to go. Records
   * in segments that are gone are skipped.
   */
  async erase(records: readonly Pick<ValueLogPointer, 'segment' | 'offset' | 'nameLength' | 'dataLength'>[]): Promise<void> {
    const bySegment = new Map<number, (typeof records)[number][]>();
    for (const r of records) bySegment.set(r.segment, [...(bySegment.get(r.segment) ?? []), r]);
    for (const [segment, rs] of bySegment) {
      try {
        await this.#use(
          segment,
          'erase',
          async (file) => {
            for (const r of rs) {
              // The header's CRC too: it would confirm a guess of the erased data.
              const length = CRC_BYTES + r.nameLength + r.dataLength;
              // In pieces of at most 1 MiB of zeros: a record may be megabytes.
              const zeros = new Uint8Array(Math.min(length, 1 << 20));
              for (let done = 0; done < length; done += zeros.length) {
                const n = Math.min(zeros.length, length - done);
                await writeFully(file, [zeros.subarray(0, n)], r.offset + HEADER_BYTES - CRC_BYTES + done);
              }
            }
            if (this.#sync) await file.datasync();
          },
          'r+',
        );
      } catch (err) {
        // The segment is gone (also when it was removed while this ran): nothing to erase.
        if (!(err instanceof ValueLogDamage)) throw err;
      }
    }
  }

  /** Deletes `segment`'s file (never the active one) and makes that durable. */
  async remove(segment: number): Promise<void> {
    if (this.active === segment) throw new Error(`value log: segment ${segment} takes appends`);
    const h = this.#handles.get(segment);
    if (h) this.#retire(segment, h);
    try {
      await unlink(join(this.#dir, segmentFile(segment)));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    // A read that opened the file while it was being unlinked may have cached a handle,
    // which would keep the file's space and serve its records: retire it too.
    this.#removals++;
    const late = this.#handles.get(segment);
    if (late) this.#retire(segment, late);
    if (this.#sync) await syncDirectory(this.#dir);
  }

  /** Runs `fn` with an open handle of `segment` (read-only unless `flags` says otherwise). */
  async #use<T>(segment: number, what: string, fn: (file: FileHandle) => Promise<T>, flags = 'r'): Promise<T> {
    if (flags !== 'r') {
      // Writes (erasure) use a handle of their own, closed after.
      let file: FileHandle;
      try {
        file = await openFile(join(this.#dir, segmentFile(segment)), flags);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new ValueLogDamage(`segment ${segment} is gone (${what})`);
        throw err;
      }
      try {
        return await fn(file);
      } finally {
        await file.close();
      }
    }
    let h = this.#handles.get(segment);
    if (h) {
      this.#handles.delete(segment);
      this.#handles.set(segment, h);
    } else {
      const removals = this.#removals;
      let file: FileHandle;
      try {
        file = await openFile(join(this.#dir, segmentFile(segment)), 'r');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new ValueLogDamage(`segment ${segment} is gone (${what})`);
        throw err;
      }
      // Another caller may have opened it meanwhile. Take its handle before any await: an
      // eviction in between would close it under us.
      const raced = this.#handles.get(segment);
      if (raced) {
        void file.close().catch(() => undefined);
        h = raced;
      } else if (this.#removals !== removals) {
        // Opened across a removal (perhaps of this segment): used once, not cached.
        h = { file, users: 0, retired: true };
      } else {
        h = { file, users: 0 };
        this.#handles.set(segment, h);
      }
      this.#evict();
    }
    const handle = h;
    handle.users++;
    try {
      return await fn(handle.file);
    } finally {
      if (--handle.users === 0 && handle.retired) void handle.file.close().catch(() => undefined);
    }
  }

  #evict(): void {
    for (const [segment, h] of this.#handles) {
      if (this.#handles.size <= this.#openFiles) return;
      this.#retire(segment, h);
    }
  }

  #retire(segment: number, h: Handle): void {
    this.#handles.delete(segment);
    h.retired = true;
    if (h.users === 0) void h.file.close().catch(() => undefined);
  }

  /** Waits for appends in flight, then closes every file. */
  async close(): Promise<void> {
    await this.idle();
    this.#closed = true;
    await this.#active?.file.close();
    this.#active = undefined;
    for (const h of this.#handles.values()) await h.file.close();
    this.#handles.clear();
  }
}

async function writeFully(file: FileHandle, buffers: readonly Uint8Array[], position: number): Promise<void> {
  let pending = buffers.filter((b) => b.length > 0);
  let at = position;
  while (pending.length > 0) {
    const { bytesWritten } = await file.writev(pending, at);
    at += bytesWritten;
    let skip = bytesWritten;
    const rest: Uint8Array[] = [];
    for (const b of pending) {
      if (skip >= b.length) {
        skip -= b.length;
        continue;
      }
      rest.push(skip > 0 ? b.subarray(skip) : b);
      skip = 0;
    }
    if (bytesWritten === 0 && rest.length > 0) throw new Error('value log: write made no progress');
    pending = rest;
  }
}
