/**
 * Cross-checksums: the value's length, whether it is a tombstone, and the hash of every
 * fragment. The writer signs their digest in the write certificate, so a fragment that
 * hashes to its entry is exactly what the writer wrote, whichever server sent it.
 */
import { bytesEqual, u64 } from './bytes.js';
import { DOMAIN, domain, fragmentHash, type CryptoProvider } from './crypto.js';

/** What the writer commits to for a value. */
export interface CrossChecksum {
  /** True for a delete: the value is a tombstone (length 0). */
  readonly tombstone: boolean;
  /** Bytes in the value before erasure coding. */
  readonly valueLength: number;
  /** `hashes[i] = H(fr_i)`, one per server. */
  readonly hashes: readonly Uint8Array[];
}

/** Hashes every fragment (possibly natively, hence async). */
export async function computeCrossChecksum(
  crypto: CryptoProvider,
  fragments: readonly Uint8Array[],
  valueLength: number,
  tombstone: boolean,
): Promise<CrossChecksum> {
  const hashes = await Promise.all(fragments.map((f, i) => fragmentHash(crypto, i, f)));
  return { tombstone, valueLength, hashes };
}

/** Whether `fragment` is entry `index` of `cc`. */
export async function fragmentMatches(crypto: CryptoProvider, cc: CrossChecksum, index: number, fragment: Uint8Array): Promise<boolean> {
  const expected = cc.hashes[index];
  return expected !== undefined && bytesEqual(expected, await fragmentHash(crypto, index, fragment));
}

/**
 * Whether a write certificate signs `cc`: its digest, and its own delete flag agreeing with
 * the cross-checksum's (a writer signs both, so a Byzantine one could make them differ).
 */
export function certificateCovers(
  crypto: CryptoProvider,
  cert: { readonly ccDigest: Uint8Array; readonly tombstone: boolean },
  cc: CrossChecksum,
): boolean {
  return cc.tombstone === cert.tombstone && bytesEqual(crossChecksumDigest(crypto, cc), cert.ccDigest);
}

/** The digest a write certificate signs: covers the flag, the length and every hash. */
export function crossChecksumDigest(crypto: CryptoProvider, cc: CrossChecksum): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.crossChecksum), new Uint8Array([cc.tombstone ? 1 : 0]), u64(cc.valueLength), ...cc.hashes]);
}
