/**
 * M-PoWerStore timestamps `(num, writerId, MAC_kW(key | num | writerId))`, ordered by
 * `(num, writerId)` (see {@link compareTimestamps}). The MAC is what makes timestamps
 * non-skipping: a server (or anyone without `kW`) cannot fabricate a high `num` that a
 * writer would adopt in CLOCK.
 */
import { bytesEqual, compareBytes, toHex, u64 } from './bytes.js';
import { DOMAIN, HASH_LENGTH, domain, keyField, type CryptoProvider } from './crypto.js';

/** Bytes in a writer id. */
export const WRITER_ID_LENGTH = 16;

/** A write's timestamp; `ts0` is `num = 0`. */
export interface Timestamp {
  /** Logical clock; a new write takes the highest authenticated `num` seen plus one. */
  readonly num: number;
  /** Breaks ties between concurrent writers; random, fixed per writer. */
  readonly writerId: Uint8Array;
  /** `MAC_kW` over key, num and writerId; zeros for `ts0`. */
  readonly mac: Uint8Array;
}

/** The initial timestamp, lower than every written one. */
export const TS0: Timestamp = Object.freeze({
  num: 0,
  writerId: new Uint8Array(WRITER_ID_LENGTH),
  mac: new Uint8Array(HASH_LENGTH),
});

/**
 * Order by `(num, writerId)`, then by MAC. Only a forgery shares `(num, writerId)` with
 * a real timestamp, and no correct server ever holds one; ranking it apart (rather than
 * equal) keeps it from passing as the real one in a reader's candidate set, where it is
 * excluded like any other timestamp no correct server vouches for.
 */
export function compareTimestamps(a: Timestamp, b: Timestamp): number {
  if (a.num !== b.num) return a.num < b.num ? -1 : 1;
  return compareBytes(a.writerId, b.writerId) || compareBytes(a.mac, b.mac);
}

/** Same `(num, writerId)` and same MAC. */
export function timestampsEqual(a: Timestamp, b: Timestamp): boolean {
  return a.num === b.num && bytesEqual(a.writerId, b.writerId) && bytesEqual(a.mac, b.mac);
}

/** A string naming `(num, writerId)`, for map keys and storage keys; sorts like the timestamp only per num. */
export function timestampKey(ts: Timestamp): string {
  return `${ts.num}:${toHex(ts.writerId)}`;
}

function timestampMacInput(key: string, num: number, writerId: Uint8Array): Uint8Array[] {
  return [...domain(DOMAIN.timestampMac), ...keyField(key), u64(num), writerId];
}

/** The authenticated timestamp `(num, writerId)` for `key`. */
export function makeTimestamp(
  crypto: CryptoProvider,
  writerKey: Uint8Array,
  key: string,
  num: number,
  writerId: Uint8Array,
): Timestamp {
  return { num, writerId, mac: crypto.hmacSha256(writerKey, timestampMacInput(key, num, writerId)) };
}

/** Whether `ts` was made by a writer holding `kW` for `key`; `ts0` always verifies. */
export function verifyTimestamp(crypto: CryptoProvider, writerKey: Uint8Array, key: string, ts: Timestamp): boolean {
  if (ts.num === 0) return timestampsEqual(ts, TS0);
  return bytesEqual(ts.mac, crypto.hmacSha256(writerKey, timestampMacInput(key, ts.num, ts.writerId)));
}
