/**
 * Identities and namespaces. A writer is an Ed25519 key pair; its **owner id** is derived
 * from the public key, and keys `~<ownerId>/…` belong to that owner. The same digest
 * gives the **writer tag** that starts every writer id the identity uses, so a timestamp
 * names who may have made it and no identity can take another's timestamps.
 *
 * Text forms (JSON files, CLI, key names): public keys are base64url without padding (43
 * characters); owner ids, cluster ids and grant ids are lower-case base32 without padding.
 */
import { base32nopad, base64urlnopad } from '@scure/base';
import { DOMAIN, PUBLIC_KEY_LENGTH, domain, type CryptoProvider } from '../core/crypto.js';
import { check } from '../core/errors.js';

/** Bytes of the identity digest kept in an owner id (160 bits: second preimages are out of reach). */
export const OWNER_ID_BYTES = 20;
/** Characters in an owner id. */
export const OWNER_ID_LENGTH = 32;
/** Bytes of a writer id that name its identity (the writer tag). */
export const WRITER_TAG_LENGTH = 16;
/** The character that starts a namespaced key: `~<ownerId>/…`. */
export const NAMESPACE_MARK = '~';

const OWNER_ID_PATTERN = /^[a-z2-7]{32}$/;

/** `H(identity label | publicKey)`: the root of the owner id and the writer tag. */
export function identityDigest(crypto: CryptoProvider, publicKey: Uint8Array): Uint8Array {
  check(publicKey.length === PUBLIC_KEY_LENGTH, `a public key is ${PUBLIC_KEY_LENGTH} bytes, got ${publicKey.length}`);
  return crypto.sha256Sync([...domain(DOMAIN.identity), publicKey]);
}

/** The owner id of `publicKey`: 32 base32 characters. */
export function ownerIdOf(crypto: CryptoProvider, publicKey: Uint8Array): string {
  return toBase32(identityDigest(crypto, publicKey).subarray(0, OWNER_ID_BYTES));
}

/** The first {@link WRITER_TAG_LENGTH} bytes of every writer id `publicKey` may use. */
export function writerTagOf(crypto: CryptoProvider, publicKey: Uint8Array): Uint8Array {
  return identityDigest(crypto, publicKey).subarray(0, WRITER_TAG_LENGTH);
}

/** `~<ownerId>/`, the prefix of every key the owner holds. */
export function namespacePrefix(ownerId: string): string {
  return `${NAMESPACE_MARK}${ownerId}/`;
}

/** The owner id a key's name places it under, or `undefined` for a key outside every namespace. */
export function namespaceOf(key: string): string | undefined {
  if (!key.startsWith(NAMESPACE_MARK)) return undefined;
  const slash = key.indexOf('/');
  return slash > 1 ? key.slice(1, slash) : undefined;
}

/** Whether `s` has the shape of an owner id. */
export function isOwnerId(s: string): boolean {
  return OWNER_ID_PATTERN.test(s);
}

/** Lower-case base32 without padding. */
export function toBase32(bytes: Uint8Array): string {
  return base32nopad.encode(bytes).toLowerCase();
}

/** Bytes of a lower- or upper-case base32 string; throws `INVALID_ARGUMENT` on anything else. */
export function fromBase32(s: string, what: string): Uint8Array {
  try {
    return base32nopad.decode(s.toUpperCase());
  } catch {
    return check(false, `${what} is not base32`) as never;
  }
}

/** A public key as text: base64url without padding. */
export function encodePublicKey(publicKey: Uint8Array): string {
  check(publicKey.length === PUBLIC_KEY_LENGTH, `a public key is ${PUBLIC_KEY_LENGTH} bytes`);
  return base64urlnopad.encode(publicKey);
}

/** Bytes of base64url text (no padding) of exactly `length` bytes; throws `INVALID_ARGUMENT` otherwise. */
export function decodeBase64url(s: unknown, length: number, what: string): Uint8Array {
  check(typeof s === 'string', `${what} must be a base64url string`);
  let bytes: Uint8Array;
  try {
    bytes = base64urlnopad.decode(s);
  } catch {
    return check(false, `${what} is not base64url (no padding)`) as never;
  }
  check(bytes.length === length, `${what} must be ${length} bytes, got ${bytes.length}`);
  return bytes;
}

/** Base64url text (no padding) of `bytes`. */
export function encodeBase64url(bytes: Uint8Array): string {
  return base64urlnopad.encode(bytes);
}

/** An Ed25519 seed as text (base64url), for identity and server files. */
export function encodeBase64urlSeed(seed: Uint8Array): string {
  check(seed.length === 32, 'a seed is 32 bytes');
  return base64urlnopad.encode(seed);
}

/** A public key from its text form. */
export function decodePublicKey(s: unknown, what = 'public key'): Uint8Array {
  return decodeBase64url(s, PUBLIC_KEY_LENGTH, what);
}

/** An identity file (`powerstore id`, `init`'s `admin.json`): a secret, kept with mode 0600. */
export interface IdentityJson {
  readonly kind: 'powerstore-identity';
  readonly version: 2;
  /** base64url. */
  readonly publicKey: string;
  /** For humans: the namespace is `~<ownerId>/`. */
  readonly ownerId: string;
  /**
   * The Ed25519 seed, base64url. Whoever holds it can write as this identity, and read its
   * encrypted values: `@powerstore/client` derives the identity's encryption root from it.
   */
  readonly secretKey: string;
}

/** The JSON of an identity file. */
export function identityToJson(crypto: CryptoProvider, publicKey: Uint8Array, seed: Uint8Array): IdentityJson {
  return {
    kind: 'powerstore-identity',
    version: 2,
    publicKey: encodePublicKey(publicKey),
    ownerId: ownerIdOf(crypto, publicKey),
    secretKey: encodeBase64url(seed),
  };
}

/**
 * The seed and public key of an identity file's JSON; throws `INVALID_ARGUMENT` naming
 * the field, and never echoes the secret. The caller checks that the seed gives the
 * public key (that needs a signer, which may be asynchronous).
 */
export function identityFromJson(json: unknown): { seed: Uint8Array; publicKey: Uint8Array } {
  check(typeof json === 'object' && json !== null && !Array.isArray(json), 'an identity must be a JSON object');
  const o = json as Record<string, unknown>;
  check(o.kind === 'powerstore-identity', 'not an identity: field "kind" must be "powerstore-identity"');
  // Describes, never quotes, what a field holds: a hand-edited file may have the secret
  // key in the wrong place, and error messages end up in terminals and logs.
  check(o.version === 2, `identity field "version" must be 2 (this client reads version 2), got ${describeValue(o.version)}`);
  const publicKey = decodePublicKey(o.publicKey, 'identity field "publicKey"');
  let seed: Uint8Array;
  try {
    seed = decodeBase64url(o.secretKey, 32, 'secretKey');
  } catch {
    return check(false, 'identity field "secretKey" must be 32 bytes of base64url') as never;
  }
  return { seed, publicKey };
}

/**
 * What a JSON value is, without its content: for messages about secret-bearing files,
 * where the value may be (part of) a key. Booleans and small integers (a version, a port)
 * cannot hold one, so they are shown.
 */
export function describeValue(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null || typeof v === 'boolean') return String(v);
  if (typeof v === 'number') return Number.isInteger(v) && Math.abs(v) < 1e6 ? String(v) : 'a number';
  if (typeof v === 'string') return `a string of ${v.length} characters`;
  return Array.isArray(v) ? 'a list' : 'an object';
}
