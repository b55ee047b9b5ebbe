/**
 * The value envelope: what the client stores for a key in a namespace (`~<ownerId>/…`).
 * Values are encrypted at the client, before erasure coding, so no server (and no `t`
 * servers together) sees plaintext; `{ public: true }` stores plaintext on purpose. Both
 * forms start with the same magic and a format byte, so a reader tells them apart from
 * the bytes alone, and the whole envelope is covered by the writer's signed certificate:
 * no server can turn one form into the other.
 *
 * ```
 * public:     F5 50 53 | 00 | plaintext
 * encrypted:  F5 50 53 | 01 | epoch u32 | stripe u32 | stripes u32 | key check (8) | write nonce (24) | AES-256-GCM ciphertext | tag (16)
 * ```
 *
 * - `F5 50 53`: 0xF5 never occurs in UTF-8, so no text value starts with the magic, and a
 *   value written raw (before this format, or with `{ raw: true }`) is very unlikely to.
 * - AES-256-GCM under a key of its own per write: `valueKey(L(key), write nonce)` with `L`
 *   the key-tree key of the key name at `epoch`; the 96-bit GCM nonce is the stripe index,
 *   unique under that key.
 * - Associated data: the whole 48-byte header (format, epoch, stripe index and count, key
 *   check, write nonce) and the key name. A ciphertext moved to another key, another
 *   stripe position or another version (write nonce) fails authentication.
 * - Stripes: a value written whole is stripe 0 of 1. A value streamed in stripes
 *   (`putStream`) seals each stripe on its own under the write's one nonce, with its index;
 *   the count is 0 in every stripe but the last, which holds the real count, so a stripe
 *   sealed as "more follow" never passes for the end.
 * - One value, one write. Each stripe authenticates on its own, and the write certificate
 *   that binds the stripes' order and number is signed by whoever wrote the value, who may
 *   be a grantee without the key: it can re-store stripes of the owner's earlier versions,
 *   which anyone can read, as a value of its own. So readers check every stripe's header
 *   against the value's stripe 0 ({@link stripeMismatch}): an encrypted stripe must carry
 *   stripe 0's key epoch and write nonce (it then opens only if the owner sealed it in that
 *   very write), and a public stripe goes only with public ones. Stripe 0 is the reference
 *   because every value has one and a read can always fetch it: a read of a range that
 *   starts later reads stripe 0 too (`value-stream.ts`). With the index and the
 *   count field, a value's stripes are then all of one write and each in the place it was
 *   sealed for, and a read that reaches the value's end reads a stripe sealed as the last:
 *   no splice of versions, no truncation, no extension passes.
 *
 * AES-GCM (`node:crypto` in Node, WebCrypto in browsers) rather than XChaCha20-Poly1305 in
 * JavaScript: several times the throughput at 256 KiB (bench/encryption), native everywhere.
 */
import { concatBytes, utf8ToBytes } from '@noble/hashes/utils.js';
import { aesGcmOpen, aesGcmSeal } from '#aead';
import { GCM_TAG_LENGTH } from './aead.js';
import { KEY_CHECK_LENGTH, keyCheck, valueKey } from '../identity/key-tree.js';

/** The envelope's magic. */
export const MAGIC = Uint8Array.of(0xf5, 0x50, 0x53);
/** Format byte of a public value. */
export const FORMAT_PUBLIC = 0x00;
/** Format byte of an encrypted value (AES-256-GCM, one key per write). */
export const FORMAT_ENCRYPTED_V1 = 0x01;
/** Bytes of a write nonce. */
export const WRITE_NONCE_LENGTH = 24;
/** Bytes of the encrypted header. */
export const HEADER_LENGTH = MAGIC.length + 1 + 4 + 4 + 4 + KEY_CHECK_LENGTH + WRITE_NONCE_LENGTH;
/** Bytes of the GCM tag. */
export const TAG_LENGTH = GCM_TAG_LENGTH;
/** Bytes an encrypted value adds to its plaintext. */
export const ENCRYPTED_OVERHEAD = HEADER_LENGTH + TAG_LENGTH;
/** Bytes a public value adds. */
export const PUBLIC_OVERHEAD = MAGIC.length + 1;
/** The largest overhead of any envelope: readers accept stored values this much over their limit. */
export const MAX_OVERHEAD = ENCRYPTED_OVERHEAD;

const AD_LABEL = utf8ToBytes('powerstore/v1/value');

/** What a stored value is. */
export type Envelope =
  | { readonly kind: 'public'; readonly value: Uint8Array }
  | {
      readonly kind: 'encrypted';
      readonly epoch: number;
      readonly stripe: number;
      readonly stripes: number;
      readonly keyCheck: Uint8Array;
      readonly header: Uint8Array;
      readonly nonce: Uint8Array;
      /** Ciphertext and tag. */
      readonly sealed: Uint8Array;
      /** Bytes of plaintext it holds. */
      readonly size: number;
    }
  /** Not an envelope this client reads: no magic (written raw), or a format it does not know. */
  | { readonly kind: 'unknown'; readonly reason: string };

/** The public envelope of `value`. */
export function sealPublic(value: Uint8Array): Uint8Array {
  const out = new Uint8Array(PUBLIC_OVERHEAD + value.length);
  out.set(MAGIC);
  out[MAGIC.length] = FORMAT_PUBLIC;
  out.set(value, PUBLIC_OVERHEAD);
  return out;
}

/** The associated data of a value: its header and the key name, length-prefixed. */
function associatedData(header: Uint8Array, key: string): Uint8Array {
  const name = utf8ToBytes(key);
  const len = new Uint8Array(4);
  new DataView(len.buffer).setUint32(0, name.length);
  return concatBytes(header, AD_LABEL, len, name);
}

function gcmNonce(stripe: number): Uint8Array {
  const iv = new Uint8Array(12);
  new DataView(iv.buffer).setUint32(8, stripe);
  return iv;
}

/** Where a stripe of a streamed value sits: the write's nonce (shared by its stripes), its index, whether it is the last. */
export interface StripePosition {
  readonly nonce: Uint8Array;
  readonly index: number;
  readonly last: boolean;
}

/** A fresh write nonce. */
export function writeNonce(): Uint8Array {
  return globalThis.crypto.getRandomValues(new Uint8Array(WRITE_NONCE_LENGTH));
}

/** The `stripes` header field a stripe carries: 0 while more follow, the count in the last. */
export function stripesField(position: { readonly index: number; readonly last: boolean }): number {
  return position.last ? position.index + 1 : 0;
}

/**
 * The encrypted envelope of `value` for `key`, under `leaf` (the key-tree key of `key` at
 * `epoch`): a whole value with a fresh random write nonce, or one stripe of a streamed value.
 */
export async function sealEncrypted(
  key: string,
  value: Uint8Array,
  leaf: Uint8Array,
  epoch: number,
  position: StripePosition = { nonce: writeNonce(), index: 0, last: true },
): Promise<Uint8Array> {
  const nonce = position.nonce;
  const header = new Uint8Array(HEADER_LENGTH);
  header.set(MAGIC);
  header[MAGIC.length] = FORMAT_ENCRYPTED_V1;
  const view = new DataView(header.buffer);
  view.setUint32(4, epoch);
  view.setUint32(8, position.index);
  view.setUint32(12, stripesField(position));
  header.set(keyCheck(leaf), 16);
  header.set(nonce, 16 + KEY_CHECK_LENGTH);
  return aesGcmSeal(valueKey(leaf, nonce), gcmNonce(position.index), associatedData(header, key), value, header);
}

/**
 * The write a stripe comes from, as its envelope says: its form and, for an encrypted stripe,
 * the key epoch and write nonce. All stripes of one value share it (see {@link stripeMismatch}).
 */
export type WriteOrigin = { readonly kind: 'public' } | { readonly kind: 'encrypted'; readonly epoch: number; readonly nonce: Uint8Array };

/** The write `envelope` comes from (a copy: it does not keep the stored bytes alive). */
export function writeOrigin(envelope: Exclude<Envelope, { kind: 'unknown' }>): WriteOrigin {
  return envelope.kind === 'public' ? { kind: 'public' } : { kind: 'encrypted', epoch: envelope.epoch, nonce: envelope.nonce.slice() };
}

/**
 * Why `envelope`, read as stripe `position.index` of the `position.count` stripes of a value
 * (0 of 1 for a value written whole), does not belong there, or `undefined` when it does.
 * An encrypted stripe must have been sealed for that index, and as the last stripe exactly
 * when it is the last (else the value was cut short, or extended past its end). With
 * `origin`, the write of the value's stripe 0, it must also come from that write: the same
 * form and, encrypted, the same key epoch and write nonce (else it was spliced in from
 * another version). The header is checked before it is authenticated: the stripe then opens
 * only under that write's key, so a header that merely copies stripe 0's fails to open.
 */
export function stripeMismatch(
  envelope: Exclude<Envelope, { kind: 'unknown' }>,
  position: { readonly index: number; readonly count: number },
  origin?: WriteOrigin,
): string | undefined {
  if (envelope.kind === 'encrypted') {
    const last = position.index === position.count - 1;
    if (envelope.stripe !== position.index) return `says it is stripe ${envelope.stripe}: it was moved from another place`;
    if (envelope.stripes !== stripesField({ index: position.index, last })) {
      if (last && envelope.stripes === 0) return 'was sealed with more stripes after it: the value was cut short';
      if (!last) return `was sealed as the last of ${envelope.stripes} stripes: the value was extended past its end`;
      return `says there are ${envelope.stripes} stripes, not ${position.count}`;
    }
  }
  if (origin === undefined) return undefined;
  if (envelope.kind !== origin.kind) return `is ${envelope.kind} and stripe 0 is ${origin.kind}: it is from another write`;
  if (envelope.kind === 'encrypted' && origin.kind === 'encrypted') {
    if (envelope.epoch !== origin.epoch) {
      return `is at key epoch ${envelope.epoch} and stripe 0 at ${origin.epoch}: it is from another write`;
    }
    if (!bytesEqual(envelope.nonce, origin.nonce)) {
      return 'has another write nonce than stripe 0: it is from another write (another version of the value)';
    }
  }
  return undefined;
}

/** What `stored` is, without decrypting it. */
export function parseEnvelope(stored: Uint8Array): Envelope {
  if (stored.length < PUBLIC_OVERHEAD || stored[0] !== MAGIC[0] || stored[1] !== MAGIC[1] || stored[2] !== MAGIC[2]) {
    return { kind: 'unknown', reason: 'it is not in the envelope format (written raw, or by a client older than encryption)' };
  }
  const format = stored[MAGIC.length]!;
  if (format === FORMAT_PUBLIC) return { kind: 'public', value: stored.subarray(PUBLIC_OVERHEAD) };
  if (format !== FORMAT_ENCRYPTED_V1) return { kind: 'unknown', reason: `its format ${format} is newer than this client` };
  if (stored.length < ENCRYPTED_OVERHEAD) return { kind: 'unknown', reason: 'it is shorter than an encrypted header and tag' };
  const view = new DataView(stored.buffer, stored.byteOffset, stored.byteLength);
  return {
    kind: 'encrypted',
    epoch: view.getUint32(4),
    stripe: view.getUint32(8),
    stripes: view.getUint32(12),
    keyCheck: stored.subarray(16, 16 + KEY_CHECK_LENGTH),
    header: stored.subarray(0, HEADER_LENGTH),
    nonce: stored.subarray(16 + KEY_CHECK_LENGTH, HEADER_LENGTH),
    sealed: stored.subarray(HEADER_LENGTH),
    size: stored.length - ENCRYPTED_OVERHEAD,
  };
}

/** Plaintext bytes of a stored value (whatever its form); pass its envelope if already parsed. */
export function plaintextSize(stored: Uint8Array, e: Envelope = parseEnvelope(stored)): number {
  return e.kind === 'public' ? e.value.length : e.kind === 'encrypted' ? e.size : stored.length;
}

/** Why an encrypted value did not open. */
export type OpenFailure = 'wrong-key' | 'tampered';

/**
 * The plaintext of an encrypted envelope of `key`, or why not: `wrong-key` when `leaf` is not
 * the key it was sealed under (its key check differs), `tampered` when the key is right
 * and authentication fails (the ciphertext, header or key name differ from what was sealed).
 */
export async function openEncrypted(
  key: string,
  envelope: Extract<Envelope, { kind: 'encrypted' }>,
  leaf: Uint8Array,
): Promise<Uint8Array | OpenFailure> {
  if (!bytesEqual(keyCheck(leaf), envelope.keyCheck)) return 'wrong-key';
  const plain = await aesGcmOpen(
    valueKey(leaf, envelope.nonce),
    gcmNonce(envelope.stripe),
    associatedData(envelope.header, key),
    envelope.sealed,
  );
  return plain ?? 'tampered';
}

function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}
