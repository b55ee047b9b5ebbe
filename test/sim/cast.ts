/**
 * Who is who in a simulated cluster: the admin, the owner of the keys under test, the
 * honest writers' identities and grants, and the hostile client's identities and grants
 * (an expired one, a revoked one). Everything is derived from the run's seed.
 */
import {
  encodePublicKey,
  grantId,
  namespacePrefix,
  OPEN_POLICY,
  ownerIdOf,
  signGrant,
  type ClusterIdentity,
  type CryptoProvider,
  type Grant,
  type Signer,
  type WritePolicy,
} from '@powerstore/protocol';
import type { Prng } from './prng.js';

/** The simulation's epoch: virtual time 0 is this wall-clock instant (ms). */
export const EPOCH = Date.UTC(2030, 0, 1);

export interface Cast {
  readonly cluster: ClusterIdentity;
  /** Each server's receipt key. */
  readonly servers: readonly Signer[];
  readonly admin: Signer;
  /** Owns every key the honest clients use. */
  readonly owner: Signer;
  /** Holds a long-lived grant on the owner's namespace. */
  readonly grantee: Signer;
  readonly granteeGrant: Grant;
  /** Holds a grant that expires mid-run (virtual time {@link Cast.expiringAt}). */
  readonly expiring: Signer;
  readonly expiringGrant: Grant;
  readonly expiringAt: number;
  /** The hostile client: may write only its own namespace, within a small quota. */
  readonly mallory: Signer;
  /** A grant the owner gave Mallory, long expired. */
  readonly malloryExpiredGrant: Grant;
  /** A revoked identity, still holding a live grant from the owner. */
  readonly revoked: Signer;
  readonly revokedGrant: Grant;
  /** A cluster id of another cluster, where the owner's certificates are also valid. */
  readonly otherClusterId: Uint8Array;
  /** Bytes Mallory may store per server. */
  readonly malloryQuota: number;
  readonly policy: WritePolicy;
  /** `~<owner>/`. */
  readonly prefix: string;
}

export async function makeCast(crypto: CryptoProvider, prng: Prng, n: number): Promise<Cast> {
  const signer = () => crypto.signerFromSeed(prng.bytes(32));
  const [admin, owner, grantee, expiring, mallory, revoked] = await Promise.all([
    signer(),
    signer(),
    signer(),
    signer(),
    signer(),
    signer(),
  ]);
  const servers = await Promise.all(Array.from({ length: n }, signer));
  const cluster: ClusterIdentity = { id: prng.bytes(16), admin: admin.publicKey, servers: servers.map((s) => s.publicKey) };
  const prefix = namespacePrefix(ownerIdOf(crypto, owner.publicKey));
  const grant = (to: Signer, expiresAt: number) => signGrant(crypto, cluster, owner, { grantee: to.publicKey, prefix, expiresAt });
  const expiringAt = prng.range(200, 1500);
  const [granteeGrant, expiringGrant, malloryExpiredGrant, revokedGrant] = await Promise.all([
    grant(grantee, EPOCH + 10 ** 9),
    grant(expiring, EPOCH + expiringAt),
    grant(mallory, EPOCH - 1000),
    grant(revoked, EPOCH + 10 ** 9),
  ]);
  const malloryQuota = 600;
  const policy: WritePolicy = {
    ...OPEN_POLICY,
    revokedKeys: [encodePublicKey(revoked.publicKey)],
    revokedGrants: [grantId(crypto, revokedGrant)].slice(0, prng.int(2)),
    quotas: { default: { bytes: 10 ** 9 }, owners: { [ownerIdOf(crypto, mallory.publicKey)]: { bytes: malloryQuota, keys: 3 } } },
  };
  return {
    cluster,
    servers,
    admin,
    owner,
    grantee,
    granteeGrant,
    expiring,
    expiringGrant,
    expiringAt,
    mallory,
    malloryExpiredGrant,
    revoked,
    revokedGrant,
    otherClusterId: prng.bytes(16),
    malloryQuota,
    policy,
    prefix,
  };
}
