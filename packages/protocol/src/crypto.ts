/**
 * Hashing and MACs of M-PoWerStore behind an injected provider.
 *
 * Every hash and MAC input starts with its own domain label (length-prefixed), so a
 * fragment hash can never be confused with a nonce hash, a cross-checksum digest or a
 * MAC input, and every MAC binds the key name, so nothing authenticated for one key
 * replays on another.
 */
import { lengthPrefixed, u32, u64, utf8 } from './bytes.js';

/** Bytes in every hash, MAC and nonce (SHA-256). */
export const HASH_LENGTH = 32;

/**
 * SHA-256 and HMAC-SHA-256. Bulk fragment hashing is async so WebCrypto can serve it;
 * small inputs that must be hashed synchronously go through `sha256Sync`.
 * Every method treats `parts` as their concatenation.
 */
export interface CryptoProvider {
  /** For diagnostics and test names. */
  readonly name: string;
  /** SHA-256 of large inputs (fragments); may use a native asynchronous path. */
  sha256(parts: readonly Uint8Array[]): Promise<Uint8Array>;
  /** SHA-256 of small inputs. */
  sha256Sync(parts: readonly Uint8Array[]): Uint8Array;
  /** HMAC-SHA-256 under `key`. */
  hmacSha256(key: Uint8Array, parts: readonly Uint8Array[]): Uint8Array;
}

/** Domain-separation labels; changing one is a protocol version change. */
export const DOMAIN = {
  fragment: 'powerstore/v1/fragment',
  nonce: 'powerstore/v1/nonce',
  crossChecksum: 'powerstore/v1/cross-checksum',
  timestampMac: 'powerstore/v1/mac/timestamp',
  candidateMac: 'powerstore/v1/mac/candidate',
  writerKey: 'powerstore/v1/writer-key',
  digest: 'powerstore/v1/digest',
} as const;

const labels = new Map<string, Uint8Array[]>();
/** Length-prefixed label bytes, computed once per label. */
export function domain(label: (typeof DOMAIN)[keyof typeof DOMAIN]): Uint8Array[] {
  let parts = labels.get(label);
  if (!parts) {
    parts = lengthPrefixed(utf8(label));
    labels.set(label, parts);
  }
  return parts;
}

/** `H(fragment)` as cross-checksum entry `index`; binding the index stops entries moving. */
export function fragmentHash(crypto: CryptoProvider, index: number, fragment: Uint8Array): Promise<Uint8Array> {
  return crypto.sha256([...domain(DOMAIN.fragment), u32(index), u64(fragment.length), fragment]);
}

/** `Nbar = H(N)`, the commitment a writer stores before revealing `N`. */
export function nonceHash(crypto: CryptoProvider, nonce: Uint8Array): Uint8Array {
  return crypto.sha256Sync([...domain(DOMAIN.nonce), nonce]);
}

/** The key name as MAC input, length-prefixed so `("ab", …)` and `("a", "b…")` differ. */
export function keyField(key: string): Uint8Array[] {
  return lengthPrefixed(utf8(key));
}
