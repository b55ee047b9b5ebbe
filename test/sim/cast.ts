/**
 * Who is who in a simulated cluster: the admin, the owner of the keys under test, the
 * honest writers' identities and grants, and the hostile client's identities and grants
 * (an expired one, a revoked one, and a turncoat grantee revoked mid-run). Everything is
 * derived from the run's seed.
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
  /**
   * A grantee with a live grant on the owner's namespace that the operator revokes mid-run
   * (its key or its grant, by {@link Cast.revokedPolicy}): server `i` takes the new policy
   * at virtual time `turncoatRevokedAt + revocationDelays[i]` (a rolling cluster.json edit).
   */
  readonly turncoat: Signer;
  readonly turncoatGrant: Grant;
  readonly turncoatRevokedAt: number;
  readonly revocationDelays: readonly number[];
  /** {@link Cast.policy} with the turncoat revoked. */
  readonly revokedPolicy: WritePolicy;
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
  const otherClusterId = prng.bytes(16);
  // Drawn last, so every draw above is what it was before the turncoat existed.
  const turncoat = await signer();
  const turncoatGrant = await grant(turncoat, EPOCH + 10 ** 9);
  const turncoatRevokedAt = prng.range(300, 2000);
  const revocationDelays = Array.from({ length: n }, () => (prng.chance(0.5) ? 0 : prng.range(1, 200)));
  const revokedPolicy: WritePolicy = prng.chance(0.5)
    ? { ...policy, revokedKeys: [...policy.revokedKeys, encodePublicKey(turncoat.publicKey)] }
    : { ...policy, revokedGrants: [...policy.revokedGrants, grantId(crypto, turncoatGrant)] };
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
    turncoat,
    turncoatGrant,
    turncoatRevokedAt,
    revocationDelays,
    revokedPolicy,
    otherClusterId,
    malloryQuota,
    policy,
    prefix,
  };
}
