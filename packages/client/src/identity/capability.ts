/**
 * Read capabilities: a URL-safe string carrying the key-tree node of one key or one prefix
 * (see `key-tree.ts`). Whoever holds it can decrypt (and encrypt) the values under that
 * scope, at one key epoch, and nothing else: a prefix `…/photos/` derives the keys of
 * `…/photos/…` only, never `…/photos2/…`. It is a bearer secret, like a password.
 *
 * Text form: `psr1.` then base64url (no padding) of
 *
 * | bytes | field |
 * |---|---|
 * | 4 | key epoch (u32, big-endian) |
 * | 32 | the node of the scope (a prefix's directory node, or a key's own key) |
 * | rest | the scope, UTF-8: a key, or a prefix ending in `/` |
 */
import { base64urlnopad } from '@scure/base';
import { isOwnerId, MAX_KEY_LENGTH, namespaceOf } from '@powerstore/protocol';
import { TREE_KEY_LENGTH } from './key-tree.js';

/** What starts every capability's text: the format and its version. */
export const CAPABILITY_PREFIX = 'psr1.';

/** A parsed read capability. */
export interface Capability {
  /** A key, or a prefix ending in `/` (which covers the keys starting with it). */
  readonly scope: string;
  readonly epoch: number;
  /** The key-tree node of `scope`. */
  readonly node: Uint8Array;
}

/** Whether `scope` (a key, or a prefix ending in `/`) covers `key`. */
export function scopeCovers(scope: string, key: string): boolean {
  return scope.endsWith('/') ? key.startsWith(scope) : key === scope;
}

/** Why `scope` cannot be shared, or `undefined` when it can. */
export function scopeProblem(scope: unknown): string | undefined {
  if (typeof scope !== 'string' || scope.length === 0) return 'a key or prefix must be a non-empty string';
  const owner = namespaceOf(scope);
  if (owner === undefined || !isOwnerId(owner)) return `${JSON.stringify(scope.slice(0, 80))} is not in a namespace (~<ownerId>/…)`;
  if (new TextEncoder().encode(scope).length > MAX_KEY_LENGTH) return `the scope is over ${MAX_KEY_LENGTH} bytes of UTF-8`;
  return undefined;
}

/** The text form of a capability. */
export function encodeCapability(cap: Capability): string {
  const scope = new TextEncoder().encode(cap.scope);
  const bytes = new Uint8Array(4 + TREE_KEY_LENGTH + scope.length);
  new DataView(bytes.buffer).setUint32(0, cap.epoch);
  bytes.set(cap.node, 4);
  bytes.set(scope, 4 + TREE_KEY_LENGTH);
  return CAPABILITY_PREFIX + base64urlnopad.encode(bytes);
}

/** A capability from its text form; throws an `Error` saying what is wrong (never quoting the secret). */
export function decodeCapability(text: unknown): Capability {
  if (typeof text !== 'string' || !text.startsWith(CAPABILITY_PREFIX)) {
    throw new Error(`a capability is a string starting with "${CAPABILITY_PREFIX}" (what store.share returns)`);
  }
  let bytes: Uint8Array;
  try {
    bytes = base64urlnopad.decode(text.slice(CAPABILITY_PREFIX.length));
  } catch {
    throw new Error('a capability is not base64url after its prefix (truncated or mangled when copied?)');
  }
  if (bytes.length <= 4 + TREE_KEY_LENGTH) throw new Error('a capability is too short (truncated when copied?)');
  let scope: string;
  try {
    scope = new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(4 + TREE_KEY_LENGTH));
  } catch {
    throw new Error('a capability names a scope that is not UTF-8');
  }
  const problem = scopeProblem(scope);
  if (problem) throw new Error(`a capability's scope: ${problem}`);
  return {
    scope,
    epoch: new DataView(bytes.buffer, bytes.byteOffset).getUint32(0),
    node: bytes.slice(4, 4 + TREE_KEY_LENGTH),
  };
}
