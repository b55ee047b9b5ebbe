/**
 * Pure-JavaScript provider (@noble/hashes, @noble/curves): the portable default, used
 * where neither `node:crypto` nor WebCrypto's Ed25519 is known to exist.
 */
import { ed25519 } from '@noble/curves/ed25519.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { PUBLIC_KEY_LENGTH, SEED_LENGTH, SIGNATURE_LENGTH, type CryptoProvider, type Signer } from '../core/crypto.js';

/** SHA-256 of the concatenation of `parts`. */
export function nobleSha256(parts: readonly Uint8Array[]): Uint8Array {
  const h = sha256.create();
  for (const p of parts) h.update(p);
  return h.digest();
}

/**
 * RFC 8032 verification with canonical encodings only (`zip215: false`), the rule
 * OpenSSL and WebCrypto apply, so every provider accepts exactly the same signatures.
 */
export function nobleVerifyEd25519(pub: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
  if (pub.length !== PUBLIC_KEY_LENGTH || signature.length !== SIGNATURE_LENGTH) return false;
  try {
    return ed25519.verify(signature, message, pub, { zip215: false });
  } catch {
    return false;
  }
}

/** A signer holding `seed` in memory. */
export function nobleSigner(seed: Uint8Array): Signer {
  if (seed.length !== SEED_LENGTH) throw new RangeError(`an Ed25519 seed is ${SEED_LENGTH} bytes, got ${seed.length}`);
  const secret = Uint8Array.from(seed);
  return { publicKey: ed25519.getPublicKey(secret), sign: async (message) => ed25519.sign(message, secret) };
}

/** A provider that hashes and signs in JavaScript; identical bytes to the native ones. */
export function createCryptoProvider(): CryptoProvider {
  return {
    name: 'noble',
    sha256: (parts) => Promise.resolve(nobleSha256(parts)),
    sha256Sync: nobleSha256,
    verifyEd25519: async (pub, message, signature) => nobleVerifyEd25519(pub, message, signature),
    signerFromSeed: async (seed) => nobleSigner(seed),
  };
}
