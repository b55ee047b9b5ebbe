/** AES-256-GCM through WebCrypto: native in every browser (and what Node's build replaces with `node:crypto`). */
import { GCM_TAG_LENGTH } from './aead.js';

type Bytes = Uint8Array<ArrayBuffer>;

function importKey(key: Uint8Array, usage: 'encrypt' | 'decrypt'): Promise<CryptoKey> {
  return globalThis.crypto.subtle.importKey('raw', key as Bytes, 'AES-GCM', false, [usage]);
}

/** `head`, then the AES-256-GCM ciphertext of `plaintext`, then its tag, in one array. */
export async function aesGcmSeal(
  key: Uint8Array,
  iv: Uint8Array,
  ad: Uint8Array,
  plaintext: Uint8Array,
  head: Uint8Array,
): Promise<Uint8Array> {
  const sealed = await globalThis.crypto.subtle.encrypt(
    { name: 'AES-GCM', iv: iv as Bytes, additionalData: ad as Bytes, tagLength: GCM_TAG_LENGTH * 8 },
    await importKey(key, 'encrypt'),
    plaintext as Bytes,
  );
  const out = new Uint8Array(head.length + sealed.byteLength);
  out.set(head);
  out.set(new Uint8Array(sealed), head.length);
  return out;
}

/** The plaintext of `sealed` (ciphertext then tag), or `undefined` when it does not authenticate. */
export async function aesGcmOpen(key: Uint8Array, iv: Uint8Array, ad: Uint8Array, sealed: Uint8Array): Promise<Uint8Array | undefined> {
  try {
    const plain = await globalThis.crypto.subtle.decrypt(
      { name: 'AES-GCM', iv: iv as Bytes, additionalData: ad as Bytes, tagLength: GCM_TAG_LENGTH * 8 },
      await importKey(key, 'decrypt'),
      sealed as Bytes,
    );
    return new Uint8Array(plain);
  } catch {
    return undefined;
  }
}
