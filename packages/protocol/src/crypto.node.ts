/**
 * Node provider: `node:crypto` (OpenSSL) for SHA-256 and HMAC, which hashes fragments
 * several times faster than JavaScript and without copying the parts together.
 */
import { createHash, createHmac } from 'node:crypto';
import type { CryptoProvider } from './crypto.js';

/** A provider backed by `node:crypto`. */
export function createCryptoProvider(): CryptoProvider {
  const digest = (parts: readonly Uint8Array[]): Uint8Array => {
    const h = createHash('sha256');
    for (const p of parts) h.update(p);
    return new Uint8Array(h.digest());
  };
  return {
    name: 'node',
    sha256: (parts) => Promise.resolve(digest(parts)),
    sha256Sync: digest,
    hmacSha256(key, parts) {
      const h = createHmac('sha256', key);
      for (const p of parts) h.update(p);
      return new Uint8Array(h.digest());
    },
  };
}
