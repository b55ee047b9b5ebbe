/**
 * The keys a store holds: its identity's encryption root (every key of its own namespace,
 * at every epoch) and the capabilities it was given (a key or a prefix of someone's
 * namespace, at one epoch). Finds the key-tree key of a key name, and makes capabilities.
 */
import { invalid } from '../errors.js';
import { encodeCapability, scopeCovers, type Capability } from './capability.js';
import { descendToKey, descendToPrefix, namespaceNode, type EncryptionRoot } from './key-tree.js';

/**
 * The key-tree key of a key name and where it came from (the identity's own root derives
 * the one right key; a capability only what it was made with), or why the store has none.
 */
export type LeafLookup = { readonly leaf: Uint8Array; readonly from: 'own' | 'capability' } | { readonly missing: string };

/** `epoch` if it is a key epoch: an integer from 0 to 2³² − 1, as envelopes and capabilities carry it; `INVALID_ARGUMENT` otherwise. */
export function checkKeyEpoch(epoch: unknown): number {
  if (Number.isSafeInteger(epoch) && (epoch as number) >= 0 && (epoch as number) < 2 ** 32) return epoch as number;
  throw invalid(`keyEpoch must be an integer from 0 to ${2 ** 32 - 1}`);
}

/** Namespace nodes kept per store (one per key epoch in use). */
const NODE_CACHE_SIZE = 16;

/** What a store may decrypt and encrypt with. */
export class KeyRing {
  readonly #own: { readonly namespace: string; readonly root: EncryptionRoot } | undefined;
  readonly #capabilities: readonly Capability[];
  /** Namespace nodes by epoch: the root may be a WebCrypto key, so each is computed once. */
  readonly #nodes = new Map<number, Promise<Uint8Array>>();

  constructor(own: { readonly namespace: string; readonly root: EncryptionRoot } | undefined, capabilities: readonly Capability[]) {
    this.#own = own;
    // Longest scope first: the fewest derivation steps.
    this.#capabilities = [...capabilities].sort((a, b) => b.scope.length - a.scope.length);
  }

  #namespaceNode(epoch: number): Promise<Uint8Array> {
    let node = this.#nodes.get(epoch);
    if (!node) {
      node = namespaceNode(this.#own!.root, epoch);
      // Epochs come from stored headers too: keep a few, not one per epoch ever seen.
      if (this.#nodes.size >= NODE_CACHE_SIZE) this.#nodes.delete(this.#nodes.keys().next().value!);
      this.#nodes.set(epoch, node);
    }
    return node;
  }

  /** The key-tree key of `key` at `epoch`. */
  async leaf(key: string, epoch: number): Promise<LeafLookup> {
    const own = this.#own;
    if (own && key.startsWith(own.namespace))
      return { leaf: descendToKey(await this.#namespaceNode(epoch), own.namespace, key), from: 'own' };
    const covering = this.#capabilities.filter((c) => scopeCovers(c.scope, key));
    const cap = covering.find((c) => c.epoch === epoch);
    if (cap) return { leaf: cap.scope.endsWith('/') ? descendToKey(cap.node, cap.scope, key) : cap.node, from: 'capability' };
    if (covering.length > 0) {
      const epochs = [...new Set(covering.map((c) => c.epoch))].join(', ');
      return {
        missing: `the capabilities for it are for key epoch ${epochs}, the value was written at key epoch ${epoch} (access was revoked, or ask for a new capability)`,
      };
    }
    return { missing: "this store holds no key for it: connect with the owner's identity, or with a capability (store.share) covering it" };
  }

  /**
   * A capability for `scope` (a key, or a prefix ending in `/`) at `epoch`, if this ring can
   * derive one: in its own namespace, or below a prefix capability it holds at that epoch.
   */
  async share(scope: string, epoch: number): Promise<string | undefined> {
    const own = this.#own;
    const prefix = scope.endsWith('/');
    let node: Uint8Array | undefined;
    if (own && scope.startsWith(own.namespace)) {
      const top = await this.#namespaceNode(epoch);
      node = prefix ? descendToPrefix(top, own.namespace, scope) : descendToKey(top, own.namespace, scope);
    } else {
      const cap = this.#capabilities.find((c) => c.epoch === epoch && scopeCovers(c.scope, scope));
      if (cap?.scope === scope) node = cap.node;
      else if (cap) node = prefix ? descendToPrefix(cap.node, cap.scope, scope) : descendToKey(cap.node, cap.scope, scope);
    }
    return node && encodeCapability({ scope, epoch, node });
  }
}
