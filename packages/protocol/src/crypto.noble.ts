/**
 * Pure-JavaScript provider (@noble/hashes): the portable default, synchronous throughout,
 * used where neither `node:crypto` nor WebCrypto is known to exist.
 */
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import type { CryptoProvider } from './crypto.js';

/** A provider that hashes in JavaScript; identical bytes to the native ones. */
export function createCryptoProvider(): CryptoProvider {
  const digest = (parts: readonly Uint8Array[]): Uint8Array => {
    const h = sha256.create();
    for (const p of parts) h.update(p);
    return h.digest();
  };
  return {
    name: 'noble',
    sha256: (parts) => Promise.resolve(digest(parts)),
    sha256Sync: digest,
    hmacSha256(key, parts) {
      const h = hmac.create(sha256, key);
      for (const p of parts) h.update(p);
      return h.digest();
    },
  };
}
