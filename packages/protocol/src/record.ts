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
import {
  ByteReader,
  ByteWriter,
  certificateSize,
  readCc,
  readCert,
  readFragment,
  readOptionalCandidate,
  readTs,
  writeCc,
  writeCert,
  writeFragment,
  writeOptionalCandidate,
  writeTs,
} from './wire.js';

/** Version of the record layouts below. */
export const RECORD_VERSION = 1;

/** What a server keeps per key besides the history entries. */
export interface KeyState {
  /** The last completed candidate `lc`; `undefined` is `c0`. */
  readonly lc: Candidate | undefined;
  /** The owner the key's entries are charged to (set by the first STORE). */
  readonly owner: string;
  /** History entries stored. */
  readonly entries: number;
  /** Bytes charged for them (see {@link historyEntryBytes}). */
  readonly bytes: number;
}

/** The bytes one history entry is charged for: its fragment and its metadata. */
export function historyEntryBytes(entry: HistoryEntry): number {
  return entry.fragment.length + 1 + 8 + 1 + 32 * entry.cc.hashes.length + certificateSize(entry.cert) + 8 + 32 + 4;
}

function header(w: ByteWriter, key: string) {
  w.u8(RECORD_VERSION);
  w.string(key, MAX_KEY_LENGTH, 'key');
}

function readHeader(raw: Uint8Array, n: number): { r: ByteReader; key: string } {
  const r = new ByteReader(raw, n, MAX_VALUE_LENGTH);
  const version = r.u8('record version');
  if (version !== RECORD_VERSION) throw new ProtocolError('UNSUPPORTED_VERSION', `record version ${version}, this server reads ${RECORD_VERSION}`);
  return { r, key: r.string(MAX_KEY_LENGTH, 'key') };
}

/** `Hist[key][ts]` as bytes. */
export function encodeEntryRecord(key: string, e: HistoryEntry): Uint8Array {
  const w = new ByteWriter();
  header(w, key);
  writeTs(w, e.ts);
  w.u32(e.stripe, 'stripe');
  writeFragment(w, e.fragment);
  writeCc(w, e.cc);
  writeCert(w, e.cert);
  return w.finish();
}

/** Reads {@link encodeEntryRecord}; throws `INVALID_FRAME` or `UNSUPPORTED_VERSION`. */
export function decodeEntryRecord(raw: Uint8Array, n: number): { key: string; entry: HistoryEntry } {
  const { r, key } = readHeader(raw, n);
  const ts = readTs(r);
  const stripe = r.u32('stripe');
  const fragment = readFragment(r);
  const cc = readCc(r);
  const cert = readCert(r);
  r.end();
  return { key, entry: { ts, stripe, fragment, cc, cert } };
}

/** A key's state as bytes. */
export function encodeKeyRecord(key: string, s: KeyState): Uint8Array {
  const w = new ByteWriter();
  header(w, key);
  w.string(s.owner, 64, 'owner');
  w.u64(s.entries, 'entries');
  w.u64(s.bytes, 'bytes');
  writeOptionalCandidate(w, s.lc);
  return w.finish();
}

/** Reads {@link encodeKeyRecord}. */
export function decodeKeyRecord(raw: Uint8Array, n: number): { key: string; state: KeyState } {
  const { r, key } = readHeader(raw, n);
  const owner = r.string(64, 'owner');
  const entries = r.u64('entries');
  const bytes = r.u64('bytes');
  const lc = readOptionalCandidate(r);
  r.end();
  return { key, state: { lc, owner, entries, bytes } };
}
