/**
 * The encryption microbenchmark's browser half, bundled by `browser.ts` (esbuild, browser
 * build of the client) and run in Chromium: WebCrypto AES-256-GCM (what the client uses
 * in browsers), XChaCha20-Poly1305 in JavaScript, the client's whole envelope, the codec.
 */
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { createCodec } from '@powerstore/erasure';
import { aesGcmOpen, aesGcmSeal } from '../../packages/client/src/values/aead.browser.js';
import { openEncrypted, parseEnvelope, sealEncrypted } from '../../packages/client/src/values/encryption.js';
import { descendToKey, namespaceNode, rootFromCryptoKey } from '../../packages/client/src/identity/key-tree.js';
import { measure, type Row } from './measure.js';

export type { Row };

function filled(bytes: number): Uint8Array {
  const v = new Uint8Array(bytes);
  for (let off = 0; off < bytes; off += 65_536) crypto.getRandomValues(v.subarray(off, Math.min(bytes, off + 65_536)));
  return v;
}

export async function runBench(sizes: readonly number[]): Promise<Row[]> {
  const rows: Row[] = [];
  // A browser identity's root: a non-extractable HMAC key.
  const hmacKey = await crypto.subtle.generateKey({ name: 'HMAC', hash: 'SHA-256', length: 256 }, false, ['sign']);
  const root = rootFromCryptoKey(crypto.subtle, hmacKey);
  const ns = `~${'a'.repeat(32)}/`;
  const key = `${ns}bench/photos/value`;
  const top = await namespaceNode(root, 0);
  const codec = await createCodec({ k: 2, n: 4 });
  for (const bytes of sizes) {
    const value = filled(bytes);
    const rawKey = filled(32);
    const iv = new Uint8Array(12);
    const ad = filled(80);
    const sealedAes = await aesGcmSeal(rawKey, iv, ad, value, new Uint8Array(0));
    rows.push(
      await measure('AES-256-GCM encrypt (WebCrypto)', bytes, () => aesGcmSeal(rawKey, iv, ad, value, new Uint8Array(0))),
      await measure('AES-256-GCM decrypt (WebCrypto)', bytes, () => aesGcmOpen(rawKey, iv, ad, sealedAes)),
    );
    const xnonce = filled(24);
    const sealedX = xchacha20poly1305(rawKey, xnonce, ad).encrypt(value);
    rows.push(
      await measure('XChaCha20-Poly1305 encrypt (@noble/ciphers)', bytes, () => xchacha20poly1305(rawKey, xnonce, ad).encrypt(value)),
      await measure('XChaCha20-Poly1305 decrypt (@noble/ciphers)', bytes, () => xchacha20poly1305(rawKey, xnonce, ad).decrypt(sealedX)),
    );
    const sealed = await sealEncrypted(key, value, descendToKey(top, ns, key), 0);
    const envelope = parseEnvelope(sealed);
    if (envelope.kind !== 'encrypted') throw new Error('not encrypted');
    rows.push(
      await measure('client seal (derive keys + encrypt + envelope)', bytes, () =>
        sealEncrypted(key, value, descendToKey(top, ns, key), 0),
      ),
      await measure('client open (derive keys + decrypt)', bytes, () => openEncrypted(key, envelope, descendToKey(top, ns, key))),
    );
    const fragments = codec.encode(value);
    rows.push(
      await measure('codec encode, k = 2, n = 4 (t = 1)', bytes, () => codec.encode(value)),
      await measure('codec decode from both parity fragments', bytes, () =>
        codec.decode([undefined, undefined, fragments[2], fragments[3]], bytes),
      ),
    );
  }
  return rows;
}
