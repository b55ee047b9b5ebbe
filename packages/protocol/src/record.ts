/**
 * Storage records: how a server keeps `Hist[key][ts]` and a key's record (`lc` and what
 * the key holds) on disk. They are their own format, not wire frames, so a wire change
 * never silently changes the disk format; they reuse the wire's field encoders and
 * bounds checks. Each record starts with {@link RECORD_VERSION} and names its key, so a
 * record read under the wrong key is detected.
 */
import type { Candidate } from './candidate.js';
import { MAX_KEY_LENGTH } from './codec.js';
import { MAX_VALUE_LENGTH } from './config.js';
import { ProtocolError } from './errors.js';
import type { HistoryEntry } from './messages.js';
import type { Timestamp } from './timestamp.js';
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
} from './wire.js';

/**
 * Version of the record layouts below. Version 4 added stripes (the entry index names each
 * entry's stripe, and an entry record may hold a stripe layout); version 3 records are
 * read as values of one stripe. Version 1 (no entry index) and 2 (fragment inside the
 * entry record) are refused.
 */
export const RECORD_VERSION = 4;
/** The oldest record version still read. */
const OLDEST_READ = 3;

/** A history entry without its fragment: everything a server checks without reading the bytes. */
export type EntryMeta = Omit<HistoryEntry, 'fragment'>;

/** What the key's record says about one stored history entry, so no entry is read to list them. */
export interface EntryInfo {
  readonly ts: Timestamp;
  /** The stripe (0 for a value of one stripe). */
  readonly stripe: number;
  /** Bytes charged for it (see {@link historyEntryBytes}). */
  readonly bytes: number;
}

/** What a server keeps per key besides the history entries. */
export interface KeyState {
  /** The last completed candidate `lc`; `undefined` is `c0`. */
  readonly lc: Candidate | undefined;
  /** The owner the key's entries are charged to (set by the first STORE). */
  readonly owner: string;
  /** The history entries stored, oldest first. */
  readonly index: readonly EntryInfo[];
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
  const r = new ByteReader(raw, n, MAX_VALUE_LENGTH);
  const version = r.u8('record version');
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

/** A key's state as bytes. */
export function encodeKeyRecord(key: string, s: KeyState): Uint8Array {
  const w = new ByteWriter();
  header(w, key);
  w.string(s.owner, 64, 'owner');
  writeOptionalCandidate(w, s.lc);
  w.u8(s.collected ? 1 : 0);
  if (s.collected) writeTs(w, s.collected);
  w.u32(s.index.length, 'entries');
  for (const e of s.index) {
    writeTs(w, e.ts);
    w.u32(e.stripe, 'stripe');
    w.u64(e.bytes, 'entry bytes');
  }
  return w.finish();
}

/** Reads {@link encodeKeyRecord}. */
export function decodeKeyRecord(raw: Uint8Array, n: number): { key: string; state: KeyState } {
  const { r, key, version } = readHeader(raw, n);
  const owner = r.string(64, 'owner');
  const lc = readOptionalCandidate(r);
  const collected = r.bool('collected flag') ? readTs(r) : undefined;
  const count = r.u32('entries');
  // Each entry takes at least 8 + 32 + 8 bytes: a count the record cannot hold is corrupt.
  if (count > r.remaining / 48) ByteReader.invalid(`key record claims ${count} entries`);
  const index: EntryInfo[] = [];
  for (let i = 0; i < count; i++) {
    const ts = readTs(r);
    const stripe = version >= 4 ? r.u32('stripe') : 0;
    index.push({ ts, stripe, bytes: r.u64('entry bytes') });
  }
  r.end();
  return { key, state: { lc, owner, index, collected } };
}
