/**
 * Storage records: how a server keeps `Hist[key][ts]` and a key's record (`lc` and what
 * the key holds) on disk. They are their own format, not wire frames, so a wire change
 * never silently changes the disk format; they reuse the wire's field encoders and
 * bounds checks. Each record starts with {@link RECORD_VERSION} and names its key, so a
 * record read under the wrong key is detected.
 */
import type { Candidate } from '../auth/candidate.js';
import { MAX_KEY_LENGTH } from '../wire/codec.js';
import { MAX_VALUE_LENGTH } from '../core/config.js';
import { ProtocolError } from '../core/errors.js';
import type { HistoryEntry } from '../wire/messages.js';
import { timestampsEqual, type Timestamp } from '../auth/timestamp.js';
import {
  ByteReader,
  ByteWriter,
  certificateSize,
  readCc,
  readCert,
  readOptionalCandidate,
  readTs,
  writeCc,
  writeCert,
  writeOptionalCandidate,
  writeOptionalLayout,
  readOptionalLayout,
  writeTs,
} from '../wire/fields.js';

/**
 * Version of the record layouts below. Version 8 may hold certificates that name their
 * value's envelope (`WriteCertificate.envelope`), which older versions never hold and are
 * otherwise read as before. Version 7 gives every receipt of a store proof a
 * batch field (`receipt-batch.ts`); older records' receipts are read as unbatched.
 * Version 6 may hold certificates of key epochs ≥ 1
 * (`epochs.ts`), which versions 3 to 5 never hold and are otherwise read as before.
 * Version 5 indexes a key's *writes* (one index entry
 * per timestamp, however many stripes it has) instead of every stripe, so storing one more
 * stripe never rewrites an index that grows with the value; version 4 added stripes (the
 * entry index names each entry's stripe, and an entry record may hold a stripe layout),
 * and its key records, like version 3's (values of one stripe), are still read. Version 1
 * (no entry index) and 2 (fragment inside the entry record) are refused.
 */
export const RECORD_VERSION = 8;
/** The oldest record version still read. */
const OLDEST_READ = 3;

/** A history entry without its fragment: everything a server checks without reading the bytes. */
export type EntryMeta = Omit<HistoryEntry, 'fragment'>;

/**
 * What the key's record says about one write stored here (every stripe of one timestamp),
 * so nothing is read to list, charge, bound or collect a key's writes.
 */
export interface WriteInfo {
  readonly ts: Timestamp;
  /**
   * Stripe 0 is stored: the write certificate (and, for a striped value, the layout). Only
   * a write with its head can have earned receipts, so only such a write can ever complete.
   */
  readonly head: boolean;
  /** The write is a delete (a tombstone holds no value, so it takes no key-quota slot). */
  readonly tombstone: boolean;
  /** Stripes ≥ 1 stored. */
  readonly stripes: number;
  /** The highest stripe index stored (0 when only the head is). */
  readonly top: number;
  /** The stripe ≥ 1 shorter than the smallest stripe size, which must be the last; 0 if none is stored. */
  readonly short: number;
  /** Bytes charged for all of it (see {@link historyEntryBytes}). */
  readonly bytes: number;
  /** When its last entry was stored, in ms by the server's clock (0 if unknown): an upload without a head idle too long is deleted. */
  readonly touched: number;
}

/** History entries (stripes) a write's index entry stands for. */
export function entriesOf(w: WriteInfo): number {
  return (w.head ? 1 : 0) + w.stripes;
}

/** What a server keeps per key besides the history entries. */
export interface KeyState {
  /** The last completed candidate `lc`; `undefined` is `c0`. */
  readonly lc: Candidate | undefined;
  /** The owner the key's entries are charged to (set by the first STORE). */
  readonly owner: string;
  /** The writes stored, oldest first, one per timestamp. */
  readonly index: readonly WriteInfo[];
  /**
   * The highest timestamp whose entry was collected (garbage): a STORE at or below it is
   * never stored again, so a collected timestamp cannot be given other content.
   */
  readonly collected: Timestamp | undefined;
}

/** The bytes one history entry is charged for: its fragment and its metadata. */
export function historyEntryBytes(entry: HistoryEntry): number {
  const layout = entry.layout ? 16 + 32 * entry.layout.digests.length : 0;
  return entry.fragment.length + 1 + 8 + 1 + 32 * entry.cc.hashes.length + certificateSize(entry.cert) + 8 + 32 + 4 + layout;
}

function header(w: ByteWriter, key: string) {
  w.u8(RECORD_VERSION);
  w.string(key, MAX_KEY_LENGTH, 'key');
}

function readHeader(raw: Uint8Array, n: number): { r: ByteReader; key: string; version: number } {
  const version = raw[0] ?? 0;
  const r = new ByteReader(raw, n, MAX_VALUE_LENGTH, version >= 7);
  r.u8('record version');
  if (version < OLDEST_READ || version > RECORD_VERSION)
    throw new ProtocolError('UNSUPPORTED_VERSION', `record version ${version}, this server reads ${OLDEST_READ}..${RECORD_VERSION}`);
  return { r, key: r.string(MAX_KEY_LENGTH, 'key'), version };
}

/**
 * `Hist[key][ts]` without its fragment, as bytes; the fragment is stored apart, as is, so
 * checks that need only the metadata never read it. The record keeps the fragment's
 * length so a fragment stored apart can be checked against it.
 */
export function encodeEntryMetaRecord(key: string, e: HistoryEntry): Uint8Array {
  const w = new ByteWriter();
  header(w, key);
  writeTs(w, e.ts);
  w.u32(e.stripe, 'stripe');
  w.u32(e.fragment.length, 'fragment length');
  writeCc(w, e.cc);
  writeCert(w, e.cert);
  writeOptionalLayout(w, e.layout);
  return w.finish();
}

/** Reads {@link encodeEntryMetaRecord}; throws `INVALID_FRAME` or `UNSUPPORTED_VERSION`. */
export function decodeEntryMetaRecord(raw: Uint8Array, n: number): { key: string; meta: EntryMeta; fragmentLength: number } {
  const { r, key, version } = readHeader(raw, n);
  const ts = readTs(r);
  const stripe = r.u32('stripe');
  const fragmentLength = r.u32('fragment length');
  const cc = readCc(r);
  const cert = readCert(r);
  const layout = version >= 4 ? readOptionalLayout(r) : undefined;
  r.end();
  return { key, meta: layout ? { ts, stripe, cc, cert, layout } : { ts, stripe, cc, cert }, fragmentLength };
}

/** {@link WriteInfo.head} and {@link WriteInfo.tombstone} in a key record's index. */
const INDEX_HEAD = 0x01;
const INDEX_TOMBSTONE = 0x02;

/** A key's state as bytes. */
export function encodeKeyRecord(key: string, s: KeyState): Uint8Array {
  const w = new ByteWriter();
  header(w, key);
  w.string(s.owner, 64, 'owner');
  writeOptionalCandidate(w, s.lc);
  w.u8(s.collected ? 1 : 0);
  if (s.collected) writeTs(w, s.collected);
  w.u32(s.index.length, 'writes');
  for (const e of s.index) {
    writeTs(w, e.ts);
    w.u8((e.head ? INDEX_HEAD : 0) | (e.tombstone ? INDEX_TOMBSTONE : 0));
    w.u32(e.stripes, 'stripes');
    w.u32(e.top, 'top stripe');
    w.u32(e.short, 'short stripe');
    w.u64(e.bytes, 'write bytes');
    w.u64(e.touched, 'write time');
  }
  return w.finish();
}

/** Reads {@link encodeKeyRecord}, and the per-stripe indexes of versions 3 and 4. */
export function decodeKeyRecord(raw: Uint8Array, n: number): { key: string; state: KeyState } {
  const { r, key, version } = readHeader(raw, n);
  const owner = r.string(64, 'owner');
  const lc = readOptionalCandidate(r);
  const collected = r.bool('collected flag') ? readTs(r) : undefined;
  const count = r.u32('entries');
  // Each entry takes at least 8 + 32 + 8 bytes: a count the record cannot hold is corrupt.
  if (count > r.remaining / 48) ByteReader.invalid(`key record claims ${count} entries`);
  const index: WriteInfo[] = [];
  for (let i = 0; i < count; i++) {
    const ts = readTs(r);
    if (version >= 5) {
      const flags = r.u8('index flags');
      if ((flags & ~(INDEX_HEAD | INDEX_TOMBSTONE)) !== 0) ByteReader.invalid(`unknown index flags 0x${flags.toString(16)}`);
      const stripes = r.u32('stripes');
      const top = r.u32('top stripe');
      const short = r.u32('short stripe');
      const bytes = r.u64('write bytes');
      const touched = r.u64('write time');
      const head = (flags & INDEX_HEAD) !== 0;
      index.push({ ts, head, tombstone: (flags & INDEX_TOMBSTONE) !== 0, stripes, top, short, bytes, touched });
      continue;
    }
    // Versions 3 and 4: one entry per stripe, in timestamp then stripe order; merged per write.
    // They do not say whether a write is a delete: such a write keeps its key-quota slot.
    const stripe = version >= 4 ? r.u32('stripe') : 0;
    const bytes = r.u64('entry bytes');
    const last = index.at(-1);
    const w =
      last && timestampsEqual(last.ts, ts)
        ? index.pop()!
        : { ts, head: false, tombstone: false, stripes: 0, top: 0, short: 0, bytes: 0, touched: 0 };
    index.push({
      ...w,
      head: w.head || stripe === 0,
      stripes: w.stripes + (stripe > 0 ? 1 : 0),
      top: Math.max(w.top, stripe),
      bytes: w.bytes + bytes,
    });
  }
  r.end();
  return { key, state: { lc, owner, index, collected } };
}
