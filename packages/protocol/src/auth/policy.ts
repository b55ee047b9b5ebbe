/**
 * The cluster's write policy and the admission checks servers apply to STORE. These may
 * depend on the server's clock and change when the operator edits the cluster file;
 * validity (`certificate.ts`) never does. A STORE must also be of the cluster's current
 * key epoch (`epochs.ts`). Refusing a STORE is always safe: a write that
 * cannot reach `n − t` servers simply fails.
 */
import type { WriteCertificate } from './certificate.js';
import type { CryptoProvider } from '../core/crypto.js';
import type { ProtocolErrorCode } from '../core/errors.js';
import { grantId, type ClusterIdentity } from './grant.js';
import { encodePublicKey, isOwnerId, namespaceOf, ownerIdOf } from './identity.js';
import { bytesEqual } from '../core/bytes.js';
import { currentEpoch, epochRefusal } from './epochs.js';

/** Limits on what one owner may store on one server; an absent field is unlimited. */
export interface Quota {
  /** Bytes of history entries (fragments and their metadata) stored for the owner. */
  readonly bytes?: number;
  /** Keys holding at least one history entry of the owner. */
  readonly keys?: number;
}

/** Who may write, what is revoked, and how much each owner may store. */
export interface WritePolicy {
  /**
   * `open`: any identity may write its own namespace (and what it is granted);
   * `owners`: only the owners listed in {@link owners} (and the admin) may write.
   */
  readonly writers: 'open' | 'owners';
  /** Owner ids admitted when `writers` is `owners`. */
  readonly owners: readonly string[];
  /** Public keys (base64url) that may neither write nor have their grants honoured. */
  readonly revokedKeys: readonly string[];
  /** Grant ids no longer honoured. */
  readonly revokedGrants: readonly string[];
  /** `default` applies to every owner without an entry of its own; the admin is unlimited unless listed. */
  readonly quotas: { readonly default?: Quota; readonly owners?: Readonly<Record<string, Quota>> };
}

/** Anyone may write their own namespace; nothing revoked; no quotas. */
export const OPEN_POLICY: WritePolicy = Object.freeze({ writers: 'open', owners: [], revokedKeys: [], revokedGrants: [], quotas: {} });

/** A refused STORE: the code the ERROR reply carries and a sentence for humans. */
export interface Refusal {
  readonly code: ProtocolErrorCode;
  readonly reason: string;
}

/** A policy ready for admission checks (lists turned into sets once). */
export class WritePolicyCheck {
  readonly policy: WritePolicy;
  readonly #crypto: CryptoProvider;
  readonly #cluster: ClusterIdentity;
  readonly #adminOwner: string;
  readonly #owners: ReadonlySet<string>;
  readonly #revokedKeys: ReadonlySet<string>;
  readonly #revokedGrants: ReadonlySet<string>;

  constructor(crypto: CryptoProvider, cluster: ClusterIdentity, policy: WritePolicy) {
    this.policy = policy;
    this.#crypto = crypto;
    this.#cluster = cluster;
    this.#adminOwner = ownerIdOf(crypto, cluster.admin);
    this.#owners = new Set(policy.owners);
    this.#revokedKeys = new Set(policy.revokedKeys);
    this.#revokedGrants = new Set(policy.revokedGrants);
  }

  /** The owner a key's bytes are charged to: its namespace's owner, or the admin's for keys outside namespaces. */
  ownerOfKey(key: string): string {
    const ns = namespaceOf(key);
    return ns !== undefined && isOwnerId(ns) ? ns : this.#adminOwner;
  }

  /** Whether `owner` is the admin's owner id. */
  isAdminOwner(owner: string): boolean {
    return owner === this.#adminOwner;
  }

  /**
   * The quota of `owner`: its override in `quotas.owners`, field by field over the default
   * (an override of `bytes` alone keeps the default's `keys`). The admin has no default:
   * it is unlimited but for what an override of its own names.
   */
  quotaFor(owner: string): Quota {
    const base = owner === this.#adminOwner ? {} : (this.policy.quotas.default ?? {});
    return { ...base, ...this.policy.quotas.owners?.[owner] };
  }

  /**
   * Why a STORE of `key` under `cert` is refused at time `now` (ms since the epoch), or
   * `undefined` to admit it. `cert` has already been checked (signatures, authority).
   */
  refusal(key: string, cert: WriteCertificate, now: number): Refusal | undefined {
    // Only the current epoch: no correct server signs a receipt a retired key could complete.
    const stale = epochRefusal(cert.epoch ?? 0, currentEpoch(this.#cluster), "write's certificate");
    if (stale) return stale;
    if (this.#revokedKeys.has(encodePublicKey(cert.signer))) return { code: 'REVOKED', reason: "the signer's key is revoked" };
    const g = cert.grant;
    if (g) {
      if (this.#revokedKeys.has(encodePublicKey(g.issuer))) return { code: 'REVOKED', reason: "the grant's issuer is revoked" };
      const id = grantId(this.#crypto, g);
      if (this.#revokedGrants.has(id)) return { code: 'REVOKED', reason: `grant ${id} is revoked` };
      if (now >= g.expiresAt) return { code: 'GRANT_EXPIRED', reason: `grant ${id} expired at ${new Date(g.expiresAt).toISOString()}` };
    }
    if (this.policy.writers === 'owners' && !bytesEqual(cert.signer, this.#cluster.admin)) {
      const owner = this.ownerOfKey(key);
      if (owner !== this.#adminOwner && !this.#owners.has(owner)) {
        return { code: 'NOT_AUTHORIZED', reason: `owner ${owner} is not admitted by this cluster's policy` };
      }
    }
    return undefined;
  }
}
