/**
 * The key tree: every key name in a namespace has a key of its own, derived from the
 * owner's encryption root along the name's `/`-separated path, so a key for a prefix
 * (a capability) can derive the keys below it and nothing else.
 *
 * ```
 * root ──epoch e──▶ N(~owner/) ──dir "photos"──▶ N(~owner/photos/) ──key "cat.jpg"──▶ L(~owner/photos/cat.jpg)
 * ```
 *
 * Each arrow is HMAC-SHA256 under the parent with a domain-separated label and exactly
 * one path segment, so `photos/` and `photos2/` are siblings (neither derives the other)
 * and a directory key never equals a key's own ("dir" and "key" labels differ). The root
 * is the only step that may run inside WebCrypto: in browsers it is a non-extractable
 * HMAC key, so nothing a page script holds exports it; everything below it is ordinary
 * bytes, which is what makes prefixes shareable.
 */
import { hkdf } from '@noble/hashes/hkdf.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha256 } from '@noble/hashes/sha2.js';
import { concatBytes, utf8ToBytes } from '@noble/hashes/utils.js';

/** Bytes of every key in the tree (HMAC-SHA256 output, an AES-256 key). */
export const TREE_KEY_LENGTH = 32;
/** Bytes of a key check: what tells a wrong key from a tampered value. */
export const KEY_CHECK_LENGTH = 8;

/** Domain labels; changing one changes every key, so it is a format version change. */
const LABEL = {
  root: 'powerstore/v1/encryption-root',
  epoch: 'powerstore/v1/key-tree/epoch',
  dir: 'powerstore/v1/key-tree/dir',
  key: 'powerstore/v1/key-tree/key',
  check: 'powerstore/v1/key-tree/check',
  value: 'powerstore/v1/value-key',
} as const;

/**
 * An owner's encryption root: HMAC-SHA256 under a secret that may be a non-extractable
 * WebCrypto key (browsers) or bytes derived from the identity's seed (Node, identity files).
 */
export interface EncryptionRoot {
  /** HMAC-SHA256 of `data` under the root key. */
  mac(data: Uint8Array): Promise<Uint8Array>;
}

/**
 * The root of an identity whose Ed25519 seed is known: HKDF-SHA256 of the seed with its own
 * label, so the encryption root and the signing key are independent uses of one secret, and
 * an identity file (which holds the seed) restores both.
 */
export function rootFromSeed(seed: Uint8Array): EncryptionRoot {
  const key = hkdf(sha256, seed, undefined, utf8ToBytes(LABEL.root), TREE_KEY_LENGTH);
  return { mac: (data) => Promise.resolve(hmac(sha256, key, data)) };
}

/** The root of a WebCrypto HMAC-SHA256 key (kept non-extractable in IndexedDB by browsers). */
export function rootFromCryptoKey(subtle: SubtleCrypto, key: CryptoKey): EncryptionRoot {
  return { mac: async (data) => new Uint8Array(await subtle.sign('HMAC', key, data as Uint8Array<ArrayBuffer>)) };
}

function u32(x: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, x);
  return b;
}

/** A label, length-prefixed so no label is a prefix of another input, then the payload. */
function labelled(label: string, payload: Uint8Array): Uint8Array {
  const l = utf8ToBytes(label);
  return concatBytes(u32(l.length), l, payload);
}

/** `N(~owner/)` at key epoch `epoch`: the namespace's node. */
export function namespaceNode(root: EncryptionRoot, epoch: number): Promise<Uint8Array> {
  return root.mac(labelled(LABEL.epoch, u32(epoch)));
}

/** The node of directory `segment` below `parent`. */
export function dirNode(parent: Uint8Array, segment: string): Uint8Array {
  return hmac(sha256, parent, labelled(LABEL.dir, utf8ToBytes(segment)));
}

/** The key of name `segment` (the last path segment, possibly empty) below `parent`. */
export function leafKey(parent: Uint8Array, segment: string): Uint8Array {
  return hmac(sha256, parent, labelled(LABEL.key, utf8ToBytes(segment)));
}

/**
 * From the node of `scope` (a prefix ending in `/`) down to the node of `prefix`, another
 * prefix ending in `/` that starts with `scope`.
 */
export function descendToPrefix(node: Uint8Array, scope: string, prefix: string): Uint8Array {
  const rest = prefix.slice(scope.length, -1);
  if (rest === '' && prefix.length === scope.length) return node;
  for (const segment of rest.split('/')) node = dirNode(node, segment);
  return node;
}

/** From the node of `scope` (a prefix ending in `/`) down to the key of `key`, which starts with `scope`. */
export function descendToKey(node: Uint8Array, scope: string, key: string): Uint8Array {
  const segments = key.slice(scope.length).split('/');
  const last = segments.pop()!;
  for (const segment of segments) node = dirNode(node, segment);
  return leafKey(node, last);
}

/**
 * The key check of a key: stored beside each ciphertext so a reader holding a key for
 * another epoch or another owner is told so (`NOT_AUTHORIZED`) instead of blaming the value.
 * A PRF output: it tells nothing about the key.
 */
export function keyCheck(leaf: Uint8Array): Uint8Array {
  return hmac(sha256, leaf, labelled(LABEL.check, new Uint8Array(0))).subarray(0, KEY_CHECK_LENGTH);
}

/**
 * The AES-256 key of one write: HKDF-SHA256 of the key's tree key, salted with the write's
 * random nonce. Each write (each version of a value) gets a key of its own, so AES-GCM's
 * 96-bit nonce can simply be the stripe index and never repeats under one key.
 */
export function valueKey(leaf: Uint8Array, writeNonce: Uint8Array): Uint8Array {
  return hkdf(sha256, leaf, writeNonce, utf8ToBytes(LABEL.value), TREE_KEY_LENGTH);
}
