/**
 * Which envelope each key's values get, and opening what was read: keys in a namespace are
 * encrypted under the key ring's key of their name (or stored as public plaintext on
 * request), keys outside every namespace are stored as given. The envelope format itself
 * is `encryption.ts`'s; this module decides which one applies and turns what opening finds
 * into the client's errors.
 */
import { encodePublicKey, namespaceOf, type ReadResult, type StripeLayout, type ValueEnvelope } from '@powerstore/protocol';
import { PowerStoreError, invalid } from '../errors.js';
import type { Identity } from '../identity/identity.js';
import type { KeyRing } from '../identity/keyring.js';
import type { PutOptions } from '../types.js';
import {
  ENCRYPTED_OVERHEAD,
  openEncrypted,
  parseEnvelope,
  PUBLIC_OVERHEAD,
  sealEncrypted,
  sealPublic,
  stripeMismatch,
  type StripePosition,
  type WriteOrigin,
} from './encryption.js';

/** How a key's values are stored: the envelope's bytes per stripe, and the function that seals a stripe. */
export interface Sealer {
  readonly overhead: number;
  /** The envelope, as the write certificate names it (listings tell plaintext sizes by it); none for a value stored as given. */
  readonly envelope: ValueEnvelope | undefined;
  /** Seals `value`: one stripe of a streamed value at `position`, or (without) a value written whole. */
  seal(value: Uint8Array, position?: StripePosition): Promise<Uint8Array>;
}

/** What sealing needs of a store: its keys, the key epoch of new encrypted values, and its identity. */
export interface SealingKeys {
  readonly keys: KeyRing;
  readonly keyEpoch: number;
  /** Tells a bare signer's own namespace (no encryption root) from a key the ring lacks. */
  readonly identity: Identity | undefined;
}

/** What is stored for `value` of `key` (see `encryption.ts`), and the envelope it is in. */
export async function sealValue(
  sealing: SealingKeys,
  key: string,
  value: Uint8Array,
  options: Pick<PutOptions, 'raw' | 'public'> | undefined,
): Promise<{ readonly value: Uint8Array; readonly envelope?: ValueEnvelope }> {
  if (options?.raw && options.public) throw invalid('put: { raw } and { public } exclude each other');
  if (options?.raw) return { value };
  const sealer = await sealerFor(sealing, key, options);
  const sealed = await sealer.seal(value);
  return sealer.envelope ? { value: sealed, envelope: sealer.envelope } : { value: sealed };
}

/** How values of `key` are stored: the envelope's overhead per stripe and the function that makes it. */
export async function sealerFor(sealing: SealingKeys, key: string, options: { readonly public?: boolean } | undefined): Promise<Sealer> {
  // Keys outside every namespace are the admin's (cluster-wide settings, not anyone's data): stored as given.
  if (namespaceOf(key) === undefined) return { overhead: 0, envelope: undefined, seal: async (value) => value };
  if (options?.public) return { overhead: PUBLIC_OVERHEAD, envelope: 'public', seal: async (value) => sealPublic(value) };
  const { keys, keyEpoch, identity } = sealing;
  if (identity && !identity.encryptionRoot && key.startsWith(identity.namespace)) {
    throw new PowerStoreError(
      'NOT_AUTHORIZED',
      `cannot encrypt ${JSON.stringify(key)}: this identity was made from a bare signer and has no encryption root (pass its seed or an EncryptionRoot to new Identity); or write it as plaintext with { public: true }`,
    );
  }
  const found = await keys.leaf(key, keyEpoch);
  if ('missing' in found) {
    throw new PowerStoreError(
      'NOT_AUTHORIZED',
      `cannot encrypt ${JSON.stringify(key)}: ${found.missing}; or write it as plaintext with { public: true }`,
    );
  }
  const leaf = found.leaf;
  return {
    overhead: ENCRYPTED_OVERHEAD,
    envelope: 'encrypted',
    seal: (value, position) => sealEncrypted(key, value, leaf, keyEpoch, position),
  };
}

/** The plaintext of what a read returned for `key` (a value written whole): see `encryption.ts`. */
export async function openValue(keys: KeyRing, key: string, result: ReadResult, raw: boolean | undefined): Promise<Uint8Array | undefined> {
  const stored = result.value;
  if (stored === undefined || raw || namespaceOf(key) === undefined) return stored;
  return openStripe(keys, key, stored, result, { index: 0, count: 1 });
}

/**
 * The plaintext of stripe `position.index` of `position.count` (0 of 1 for a value written
 * whole) of what was read for `key`. `origin` is the write of the value's stripe 0, which
 * every other stripe must come from (see `stripeMismatch`); the caller passes it for every
 * stripe but stripe 0 of an encrypted value.
 */
export async function openStripe(
  keys: KeyRing,
  key: string,
  stored: Uint8Array,
  result: ReadResult,
  position: { index: number; count: number },
  origin?: WriteOrigin,
): Promise<Uint8Array> {
  if (namespaceOf(key) === undefined) return stored;
  const envelope = parseEnvelope(stored);
  if (envelope.kind === 'unknown') {
    throw new PowerStoreError(
      'UNKNOWN_FORMAT',
      `the value of ${JSON.stringify(key)} cannot be read: ${envelope.reason}; get it with { raw: true } for the stored bytes`,
    );
  }
  const writer = result.cert ? ` (written by ${encodePublicKey(result.cert.signer)} at timestamp ${result.ts.num})` : '';
  const mismatch = stripeMismatch(envelope, position, origin);
  if (mismatch !== undefined) {
    throw new PowerStoreError(
      'TAMPERED',
      `stripe ${position.index} of ${position.count} of the value of ${JSON.stringify(key)}${writer} ${mismatch}; it is not returned`,
    );
  }
  if (envelope.kind === 'public') return envelope.value;
  const found = await keys.leaf(key, envelope.epoch);
  if ('missing' in found) {
    throw new PowerStoreError('NOT_AUTHORIZED', `the value of ${JSON.stringify(key)} is encrypted and ${found.missing}`);
  }
  const opened = await openEncrypted(key, envelope, found.leaf);
  // The owner's root derives the one right key of this name and epoch, so a key check that
  // differs under it means the value was sealed for another name: moved, i.e. tampered. A
  // capability's key is only as right as the string it came from, so there it may be either.
  if (opened === 'wrong-key' && found.from === 'capability') {
    throw new PowerStoreError(
      'NOT_AUTHORIZED',
      `the value of ${JSON.stringify(key)}${writer} is encrypted under another key than the one the capability covering it gives (a capability not made by the namespace's owner, or a value moved from another key); it is not returned`,
    );
  }
  if (opened !== 'wrong-key' && opened !== 'tampered') return opened;
  throw new PowerStoreError(
    'TAMPERED',
    opened === 'wrong-key'
      ? `the value of ${JSON.stringify(key)}${writer} was encrypted for another key name (moved from another key, or sealed with a key its owner never derived for this one); it is not returned`
      : `the value of ${JSON.stringify(key)}${writer} failed authentication: its ciphertext, header or key name is not what was encrypted (altered, or moved from another key or version); it is not returned`,
  );
}

/** Envelope bytes per stripe of a value of `key` whose (some) stripe is `stored`. */
export function overheadOf(key: string, stored: Uint8Array): number {
  if (namespaceOf(key) === undefined) return 0;
  const e = parseEnvelope(stored);
  if (e.kind === 'unknown') throw new PowerStoreError('UNKNOWN_FORMAT', `the value of ${JSON.stringify(key)} cannot be read: ${e.reason}`);
  return envelopeOverhead(e.kind);
}

/** Bytes an envelope adds to each stripe of a value (none for a value stored as given). */
export function envelopeOverhead(envelope: ValueEnvelope | undefined): number {
  return envelope === 'encrypted' ? ENCRYPTED_OVERHEAD : envelope === 'public' ? PUBLIC_OVERHEAD : 0;
}

/** Plaintext bytes of a striped value whose stripes each carry an envelope of `overhead` bytes. */
export function stripedSize(layout: StripeLayout, overhead: number): number {
  return layout.valueLength - layout.digests.length * overhead;
}
