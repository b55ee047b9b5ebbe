/** History entries for storage tests: hashes and signatures are placeholders (storage checks none). */
import type { HistoryEntry, Timestamp } from '@powerstore/protocol';

/** Cluster size of the records the storage tests write. */
export const N = 4;

/** Timestamp `num` of one writer. */
export const ts = (num: number): Timestamp => ({ num, writerId: new Uint8Array(32).fill(1) });

/** A history entry at `ts(num)` holding `fragment`. */
export const entry = (num: number, fragment: Uint8Array): HistoryEntry => ({
  ts: ts(num),
  stripe: 0,
  fragment,
  cc: { tombstone: false, valueLength: 2 * fragment.length, hashes: Array.from({ length: N }, () => new Uint8Array(32).fill(7)) },
  cert: {
    nonceHash: new Uint8Array(32),
    ccDigest: new Uint8Array(32),
    signer: new Uint8Array(32),
    signature: new Uint8Array(64),
    tombstone: false,
    grant: undefined,
  },
});
