/**
 * Candidates `(ts, N, vec)`: the metadata of a completed (or written-back) write. `vec[i]`
 * is `MAC_{k_i}(key | ts | H(N))`, letting server `i` check a written-back candidate
 * without the history entry (the M-PoWerStore "proof of writing").
 */
import { bytesEqual, toHex, u32, u64 } from './bytes.js';
import { DOMAIN, HASH_LENGTH, domain, keyField, type CryptoProvider } from './crypto.js';
import { TS0, timestampKey, timestampsEqual, type Timestamp } from './timestamp.js';

/** Bytes in a nonce `N`. */
export const NONCE_LENGTH = HASH_LENGTH;

/** A candidate `(ts, N, vec)`. */
export interface Candidate {
  readonly ts: Timestamp;
  /** The nonce revealed by COMPLETE; `H(N)` was stored with the fragments. */
  readonly nonce: Uint8Array;
  /** One MAC per server, `vec[i]` under `k_i`. */
  readonly vec: readonly Uint8Array[];
}

/** `c0 = (ts0, NULL, NULL)`: what a server holds before any write. */
export function initialCandidate(n: number): Candidate {
  return { ts: TS0, nonce: new Uint8Array(NONCE_LENGTH), vec: Array.from({ length: n }, () => new Uint8Array(HASH_LENGTH)) };
}

/** `MAC_{k_i}(key | ts | Nbar)`; it covers the timestamp's own MAC so that one cannot be swapped. */
export function candidateMac(
  crypto: CryptoProvider,
  serverKey: Uint8Array,
  serverIndex: number,
  key: string,
  ts: Timestamp,
  nonceHash: Uint8Array,
): Uint8Array {
  return crypto.hmacSha256(serverKey, [
    ...domain(DOMAIN.candidateMac),
    ...keyField(key),
    u64(ts.num),
    ts.writerId,
    ts.mac,
    u32(serverIndex),
    nonceHash,
  ]);
}

/** Element-wise equality of two MAC vectors. */
export function vecsEqual(a: readonly Uint8Array[], b: readonly Uint8Array[]): boolean {
  return a.length === b.length && a.every((x, i) => bytesEqual(x, b[i]!));
}

/** Field-wise equality. */
export function candidatesEqual(a: Candidate, b: Candidate): boolean {
  return timestampsEqual(a.ts, b.ts) && bytesEqual(a.nonce, b.nonce) && vecsEqual(a.vec, b.vec);
}

/** A string identifying every field, so a candidate set can be a map. */
export function candidateId(c: Candidate): string {
  return `${timestampKey(c.ts)}/${toHex(c.ts.mac)}/${toHex(c.nonce)}/${c.vec.map(toHex).join('')}`;
}
