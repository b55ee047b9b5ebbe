/**
 * Encryption cost next to the codec's, on one core: the client's envelope (key derivation,
 * AES-256-GCM through node:crypto) and the ciphers it was chosen between (AES-256-GCM
 * through WebCrypto, what browsers use; XChaCha20-Poly1305 in JavaScript), per value size.
 *
 *   pnpm bench:encryption            # writes bench/results/encryption.{json,md}
 *
 * Each row is the median of 7 batches (each at least 200 ms) after a warm-up, with the
 * batches' range; MB/s is of plaintext (10^6 bytes).
 */
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { xchacha20poly1305 } from '@noble/ciphers/chacha.js';
import { createCodec } from '@powerstore/erasure';
import { Identity } from '@powerstore/client';
import { aesGcmOpen, aesGcmSeal } from '../../packages/client/src/values/aead.node.js';
import { openEncrypted, parseEnvelope, sealEncrypted } from '../../packages/client/src/values/encryption.js';
import { KeyRing } from '../../packages/client/src/identity/keyring.js';
import { measure, type Row } from './measure.js';

const here = dirname(fileURLToPath(import.meta.url));
const SIZES = [4096, 262_144, 1_048_576];
/** Measures and prints one row. */
async function timed(what: string, bytes: number, op: () => unknown): Promise<Row> {
  const row = await measure(what, bytes, op);
  console.log(`${what.padEnd(52)} ${String(bytes).padStart(8)} B  ${row.medianMs.toFixed(3)} ms  ${row.mbPerS.toFixed(0)} MB/s`);
  return row;
}

function filled(bytes: number): Uint8Array {
  const v = new Uint8Array(bytes);
  for (let off = 0; off < bytes; off += 65_536) crypto.getRandomValues(v.subarray(off, Math.min(bytes, off + 65_536)));
  return v;
}

const identity = await Identity.generate();
const ring = new KeyRing({ namespace: identity.namespace, root: identity.encryptionRoot! }, []);
const key = `${identity.namespace}bench/photos/value`;
const codec = await createCodec({ k: 2, n: 4 });
const rows: Row[] = [];

for (const bytes of SIZES) {
  const value = filled(bytes);
  const aesKey = await crypto.subtle.importKey('raw', filled(32) as Uint8Array<ArrayBuffer>, 'AES-GCM', false, ['encrypt', 'decrypt']);
  const iv = new Uint8Array(12);
  const ad = filled(80) as Uint8Array<ArrayBuffer>;
  const sealedAes = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: ad }, aesKey, value as Uint8Array<ArrayBuffer>);
  rows.push(
    await timed('AES-256-GCM encrypt (WebCrypto)', bytes, () =>
      crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: ad }, aesKey, value as Uint8Array<ArrayBuffer>),
    ),
    await timed('AES-256-GCM decrypt (WebCrypto)', bytes, () =>
      crypto.subtle.decrypt({ name: 'AES-GCM', iv, additionalData: ad }, aesKey, sealedAes),
    ),
  );
  const rawKey = filled(32);
  const sealedNode = await aesGcmSeal(rawKey, iv, ad, value, new Uint8Array(0));
  rows.push(
    await timed('AES-256-GCM encrypt (node:crypto)', bytes, () => aesGcmSeal(rawKey, iv, ad, value, new Uint8Array(0))),
    await timed('AES-256-GCM decrypt (node:crypto)', bytes, () => aesGcmOpen(rawKey, iv, ad, sealedNode)),
  );
  const xkey = filled(32);
  const xnonce = filled(24);
  const sealedX = xchacha20poly1305(xkey, xnonce, ad).encrypt(value);
  rows.push(
    await timed('XChaCha20-Poly1305 encrypt (@noble/ciphers)', bytes, () => xchacha20poly1305(xkey, xnonce, ad).encrypt(value)),
    await timed('XChaCha20-Poly1305 decrypt (@noble/ciphers)', bytes, () => xchacha20poly1305(xkey, xnonce, ad).decrypt(sealedX)),
  );
  // The client's whole path in Node: key tree (HMACs), per-write HKDF, AES-GCM, envelope.
  const sealed = await sealEncrypted(key, value, ((await ring.leaf(key, 0)) as { leaf: Uint8Array }).leaf, 0);
  const envelope = parseEnvelope(sealed);
  if (envelope.kind !== 'encrypted') throw new Error('not encrypted');
  rows.push(
    await timed('client seal (derive keys + encrypt + envelope)', bytes, async () => {
      const found = (await ring.leaf(key, 0)) as { leaf: Uint8Array };
      return sealEncrypted(key, value, found.leaf, 0);
    }),
    await timed('client open (derive keys + decrypt)', bytes, async () => {
      const found = (await ring.leaf(key, 0)) as { leaf: Uint8Array };
      return openEncrypted(key, envelope, found.leaf);
    }),
  );
  const fragments = codec.encode(value);
  rows.push(
    await timed('codec encode, k = 2, n = 4 (t = 1)', bytes, () => codec.encode(value)),
    await timed('codec decode from both parity fragments', bytes, () =>
      codec.decode([undefined, undefined, fragments[2], fragments[3]], bytes),
    ),
  );
}

const lines = [
  `# Encryption against the codec (${new Date().toISOString().slice(0, 10)}, Node ${process.version}, ${process.arch})`,
  '',
  '`pnpm bench:encryption`: one core, median of 7 batches of ≥ 200 ms (range in brackets); MB/s of plaintext.',
  '',
  '| operation | bytes | median ms [min–max] | MB/s |',
  '|---|---:|---|---:|',
  ...rows.map(
    (r) => `| ${r.what} | ${r.bytes} | ${r.medianMs.toFixed(3)} [${r.minMs.toFixed(3)}–${r.maxMs.toFixed(3)}] | ${r.mbPerS.toFixed(0)} |`,
  ),
  '',
];
writeFileSync(join(here, '../results/encryption.md'), lines.join('\n'));
writeFileSync(join(here, '../results/encryption.json'), `${JSON.stringify({ node: process.version, rows }, null, 2)}\n`);
console.log('wrote bench/results/encryption.{json,md}');
