/** Signers over WebCrypto keys, for hosts that keep a non-extractable key (a browser's IndexedDB). */
import type { Signer } from '../core/crypto.js';

/** A signer over a WebCrypto Ed25519 private key; `publicKey` is its raw 32-byte public half. */
export function signerFromCryptoKey(subtle: SubtleCrypto, privateKey: CryptoKey, publicKey: Uint8Array): Signer {
  return {
    publicKey,
    sign: async (message) => new Uint8Array(await subtle.sign({ name: 'Ed25519' }, privateKey, message as Uint8Array<ArrayBuffer>)),
  };
}
