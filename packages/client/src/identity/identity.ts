/**
 * Identities: an Ed25519 key pair a client writes with. Its owner id names its namespace:
 * keys `~<ownerId>/…` belong to it. Make one with {@link Identity.generate}, keep it with
 * {@link Identity.toJSON} (a secret: whoever holds it writes as this identity) and load it
 * with {@link Identity.fromJSON}; in browsers, `openBrowserIdentity()` keeps a
 * non-extractable key in IndexedDB instead.
 *
 * An identity also has an encryption root, the secret its values are encrypted under (see
 * `key-tree.ts`): derived from the seed when the seed is known, so an identity file restores
 * it; a separate non-extractable key for browser identities, whose seed nobody can read.
 */
import {
  encodePublicKey,
  identityFromJson,
  identityToJson,
  namespacePrefix,
  ownerIdOf,
  type IdentityJson,
  type Signer,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { invalidInput, PowerStoreError } from '../errors.js';
import { rootFromSeed, type EncryptionRoot } from './key-tree.js';

const crypto = createCryptoProvider();

/** A writer identity. */
export class Identity {
  /** The public key, base64url: what grants name. */
  readonly publicKey: string;
  /** Owner id: the identity's namespace is `~<ownerId>/`. */
  readonly ownerId: string;
  /** `~<ownerId>/`: prefix of every key this identity owns. */
  readonly namespace: string;
  /** Signs write certificates and grants; the private key never leaves it. */
  readonly signer: Signer;
  /**
   * The root of the keys this identity's values are encrypted under; `undefined` for an
   * identity made from a bare signer, which can only write `{ public: true }` values.
   */
  readonly encryptionRoot: EncryptionRoot | undefined;
  readonly #seed: Uint8Array | undefined;

  /**
   * From a signer and its seed, when it may be exported (the encryption root is then
   * derived from the seed), or a signer and an encryption root kept elsewhere.
   */
  constructor(signer: Signer, seed?: Uint8Array, encryptionRoot?: EncryptionRoot) {
    this.signer = signer;
    this.publicKey = encodePublicKey(signer.publicKey);
    this.ownerId = ownerIdOf(crypto, signer.publicKey);
    this.namespace = namespacePrefix(this.ownerId);
    this.#seed = seed;
    this.encryptionRoot = encryptionRoot ?? (seed && rootFromSeed(seed));
  }

  /** A new random identity. */
  static async generate(): Promise<Identity> {
    const seed = globalThis.crypto.getRandomValues(new Uint8Array(32));
    return new Identity(await crypto.signerFromSeed(seed), seed);
  }

  /** The identity of an identity file's JSON; `INVALID_ARGUMENT` (never echoing the secret) when it is not one. */
  static async fromJSON(json: unknown): Promise<Identity> {
    let parsed;
    try {
      parsed = identityFromJson(json);
    } catch (err) {
      throw invalidInput('identity', `identity: ${(err as Error).message}`);
    }
    const signer = await crypto.signerFromSeed(parsed.seed);
    if (encodePublicKey(signer.publicKey) !== encodePublicKey(parsed.publicKey))
      throw invalidInput('identity', 'identity: "secretKey" does not belong to "publicKey"');
    return new Identity(signer, parsed.seed);
  }

  /** The identity file's JSON: a secret. Throws for a non-extractable (browser) identity. */
  toJSON(): IdentityJson {
    if (!this.#seed) throw new PowerStoreError('INVALID_ARGUMENT', 'this identity keeps its key non-extractable and cannot be exported');
    return identityToJson(crypto, this.signer.publicKey, this.#seed);
  }
}
