/**
 * Candidates `(ts, N, cert, proof)`: the metadata of a completed (or written-back) write.
 * The certificate proves who wrote `ts` and commits to `H(N)`; the store proof shows
 * `n − t` servers stored it; the revealed nonce proves the writer finished its STORE
 * round (the paper's "proof of writing"). See `certificate.ts` for `valid(c)`.
 */
import { bytesEqual, toHex } from '../core/bytes.js';
import type { StoreProof, WriteCertificate } from './certificate.js';
import { HASH_LENGTH } from '../core/crypto.js';
import type { Grant } from './grant.js';
import { timestampKey, timestampsEqual, type Timestamp } from './timestamp.js';

/** Bytes in a nonce `N`. */
export const NONCE_LENGTH = HASH_LENGTH;

/** A candidate `(ts, N, cert, proof)`. */
export interface Candidate {
  readonly ts: Timestamp;
  /** The nonce revealed by COMPLETE; `cert.nonceHash = H(N)` was stored with the fragments. */
  readonly nonce: Uint8Array;
  readonly cert: WriteCertificate;
  /** `n − t` servers' receipts that they stored the write. */
  readonly proof: StoreProof;
}

/** Field-wise equality of two grants. */
export function grantsEqual(a: Grant | undefined, b: Grant | undefined): boolean {
  if (!a || !b) return a === b;
  return (
    bytesEqual(a.issuer, b.issuer) &&
    bytesEqual(a.grantee, b.grantee) &&
    a.prefix === b.prefix &&
    a.expiresAt === b.expiresAt &&
    bytesEqual(a.signature, b.signature)
  );
}

/** Field-wise equality of two certificates. */
export function certificatesEqual(a: WriteCertificate, b: WriteCertificate): boolean {
  return (
    bytesEqual(a.signature, b.signature) &&
    bytesEqual(a.signer, b.signer) &&
    bytesEqual(a.nonceHash, b.nonceHash) &&
    bytesEqual(a.ccDigest, b.ccDigest) &&
    a.tombstone === b.tombstone &&
    a.envelope === b.envelope &&
    (a.epoch ?? 0) === (b.epoch ?? 0) &&
    grantsEqual(a.grant, b.grant)
  );
}

/** Field-wise equality of two store proofs. */
export function proofsEqual(a: StoreProof, b: StoreProof): boolean {
  return a.length === b.length && a.every((r, i) => r.server === b[i]!.server && bytesEqual(r.signature, b[i]!.signature));
}

/** Field-wise equality. */
export function candidatesEqual(a: Candidate, b: Candidate): boolean {
  return timestampsEqual(a.ts, b.ts) && bytesEqual(a.nonce, b.nonce) && certificatesEqual(a.cert, b.cert) && proofsEqual(a.proof, b.proof);
}

/**
 * Whether two candidates name the same write (what {@link candidateId} tells apart): the
 * same timestamp, nonce and certificate; their proofs may differ.
 */
export function sameWrite(a: Candidate, b: Candidate): boolean {
  return timestampsEqual(a.ts, b.ts) && bytesEqual(a.nonce, b.nonce) && certificatesEqual(a.cert, b.cert);
}

/** A string identifying the certificate's every field. */
export function certificateId(c: WriteCertificate): string {
  const g = c.grant;
  const grant = g ? `${toHex(g.issuer)}.${toHex(g.grantee)}.${g.expiresAt}.${toHex(g.signature)}.${JSON.stringify(g.prefix)}` : '-';
  return `${toHex(c.signer)}/${toHex(c.nonceHash)}/${toHex(c.ccDigest)}/${c.tombstone ? 'delete' : (c.envelope ?? 'value')}/${toHex(c.signature)}/${grant}/${c.epoch ?? 0}`;
}

/**
 * A string identifying the write a candidate names, so a candidate set can be a map: two
 * candidates that differ in timestamp, nonce or certificate never share an id. (Two valid
 * proofs of one write may differ in which servers signed; they name the same write.)
 */
export function candidateId(c: Candidate): string {
  return `${timestampKey(c.ts)}/${toHex(c.nonce)}/${certificateId(c.cert)}`;
}
