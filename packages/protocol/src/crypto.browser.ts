/**
 * Browser provider: WebCrypto's native SHA-256 for fragments (async only), @noble/hashes
 * for the small inputs that must be hashed synchronously and for HMAC (WebCrypto HMAC
 * would need an async key import per MAC key).
 */
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import type { CryptoProvider } from './crypto.js';

/** A provider backed by `crypto.subtle` (browsers, workers, Node ≥ 20). */
export function createCryptoProvider(subtle: SubtleCrypto = globalThis.crypto.subtle): CryptoProvider {
  return {
    name: 'browser',
    async sha256(parts) {
      // One part needs no copy; several must be joined, WebCrypto has no streaming digest.
      const input = parts.length === 1 ? parts[0]! : join(parts);
      return new Uint8Array(await subtle.digest('SHA-256', input as Uint8Array<ArrayBuffer>));
    },
    sha256Sync(parts) {
      const h = sha256.create();
      for (const p of parts) h.update(p);
      return h.digest();
    },
    hmacSha256(key, parts) {
      const h = hmac.create(sha256, key);
      for (const p of parts) h.update(p);
      return h.digest();
    },
  };
}

function join(parts: readonly Uint8Array[]): Uint8Array {
  let len = 0;
  for (const p of parts) len += p.length;
  const out = new Uint8Array(len);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
