/**
 * Browser provider: WebCrypto's native SHA-256 for fragments and Ed25519 for signatures
 * (Chromium, Firefox and Safari all ship it; Node ≥ 20 too), @noble for the small
 * inputs that must be hashed synchronously, and @noble/curves where a platform lacks
 * WebCrypto Ed25519 (detected once).
 */
import { toHex } from '../core/bytes.js';
import { PUBLIC_KEY_LENGTH, SEED_LENGTH, SIGNATURE_LENGTH, type CryptoProvider } from '../core/crypto.js';
import { nobleSha256, nobleSigner, nobleVerifyEd25519 } from './noble.js';
import { signerFromCryptoKey } from './webcrypto-signer.js';

const ED25519 = { name: 'Ed25519' } as const;
/** PKCS #8 wrapping of a raw Ed25519 seed: WebCrypto imports private keys only this way. */
const PKCS8_PREFIX = Uint8Array.from([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);
const KEY_CACHE_SIZE = 1024;
/**
 * Largest joined input kept for reuse between digests (bytes). Above it each digest
 * allocates its own: a 4 MiB buffer is what a tab can hold on to for good.
 */
const SCRATCH_MAX_BYTES = 4 << 20;

/** A provider backed by `crypto.subtle` (browsers, workers, Node ≥ 20). */
export function createCryptoProvider(subtle: SubtleCrypto = globalThis.crypto.subtle): CryptoProvider {
  let native: Promise<boolean> | undefined;
  const hasNativeEd25519 = () => (native ??= detectEd25519(subtle));
  const keys = new Map<string, Promise<CryptoKey | null>>();
  const publicKey = (raw: Uint8Array): Promise<CryptoKey | null> => {
    const id = toHex(raw);
    let key = keys.get(id);
    if (!key) {
      key = subtle.importKey('raw', raw as Uint8Array<ArrayBuffer>, ED25519, false, ['verify']).catch(() => null);
      if (keys.size >= KEY_CACHE_SIZE) keys.delete(keys.keys().next().value!);
      keys.set(id, key);
    }
    return key;
  };
  // Fragment hashes join a short domain prefix to a large fragment. A fresh array per
  // digest costs more than the hashing (in Chromium a 128 KiB fragment took 2.5× as long
  // joined into new memory as into this reused buffer): the allocation, its zeroing and
  // the garbage. Reuse is safe even with digests in flight: digest() copies its input
  // before it returns (WebCrypto: "get a copy of the bytes held by the data parameter").
  let scratch = new Uint8Array(0);
  const joined = (parts: readonly Uint8Array[]): Uint8Array => {
    let len = 0;
    for (const p of parts) len += p.length;
    if (len > SCRATCH_MAX_BYTES) return join(parts, new Uint8Array(len));
    if (scratch.length < len) scratch = new Uint8Array(Math.min(SCRATCH_MAX_BYTES, Math.max(len, scratch.length * 2)));
    return join(parts, scratch.subarray(0, len));
  };
  return {
    name: 'browser',
    async sha256(parts) {
      // One part needs no copy; several must be joined, WebCrypto has no streaming digest.
      // The join and digest()'s copy both run before the first await, so no other call
      // can touch the scratch buffer in between.
      const input = parts.length === 1 ? parts[0]! : joined(parts);
      return new Uint8Array(await subtle.digest('SHA-256', input as Uint8Array<ArrayBuffer>));
    },
    sha256Sync: nobleSha256,
    async verifyEd25519(pub, message, signature) {
      if (pub.length !== PUBLIC_KEY_LENGTH || signature.length !== SIGNATURE_LENGTH) return false;
      if (!(await hasNativeEd25519())) return nobleVerifyEd25519(pub, message, signature);
      const key = await publicKey(pub);
      if (!key) return false;
      try {
        return await subtle.verify(ED25519, key, signature as Uint8Array<ArrayBuffer>, message as Uint8Array<ArrayBuffer>);
      } catch {
        return false;
      }
    },
    async signerFromSeed(seed) {
      if (seed.length !== SEED_LENGTH) throw new RangeError(`an Ed25519 seed is ${SEED_LENGTH} bytes, got ${seed.length}`);
      if (!(await hasNativeEd25519())) return nobleSigner(seed);
      const pkcs8 = new Uint8Array(PKCS8_PREFIX.length + SEED_LENGTH);
      pkcs8.set(PKCS8_PREFIX);
      pkcs8.set(seed, PKCS8_PREFIX.length);
      const privateKey = await subtle.importKey('pkcs8', pkcs8, ED25519, false, ['sign']);
      // The public half is derived in JavaScript once: WebCrypto cannot export it from a
      // non-extractable private key.
      return signerFromCryptoKey(subtle, privateKey, nobleSigner(seed).publicKey);
    },
  };
}

async function detectEd25519(subtle: SubtleCrypto): Promise<boolean> {
  try {
    // RFC 8032 test vector 1's public key: importing it succeeds only where Ed25519 exists.
    const raw = Uint8Array.from(atob('11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo='), (c) => c.charCodeAt(0));
    await subtle.importKey('raw', raw, ED25519, false, ['verify']);
    return true;
  } catch {
    return false;
  }
}

/** Copies `parts` one after another into `out`, which has exactly their total length. */
function join(parts: readonly Uint8Array[], out: Uint8Array): Uint8Array {
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
