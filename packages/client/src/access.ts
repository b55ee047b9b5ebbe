/**
 * Giving others access to an identity's keys: read capabilities (`share`), which carry the
 * keys that decrypt a key or a prefix, and grants (`grant`), which let another identity
 * write under a prefix.
 */
import {
  decodePublicKey,
  grantToJson,
  MAX_EXPIRY,
  signGrant,
  type Cluster,
  type CryptoProvider,
  type GrantJson,
} from '@powerstore/protocol';
import { invalid, PowerStoreError } from './errors.js';
import { scopeProblem } from './identity/capability.js';
import type { Identity } from './identity/identity.js';
import { checkKeyEpoch, type KeyRing } from './identity/keyring.js';
import type { Expiry } from './types.js';

/** A read capability for `keyOrPrefix` at key epoch `epoch`, from what `keys` holds: see `Store.share`. */
export async function shareCapability(keys: KeyRing, keyOrPrefix: string, epoch: number): Promise<string> {
  const problem = scopeProblem(keyOrPrefix);
  if (problem) throw invalid(`share: ${problem}`);
  checkKeyEpoch(epoch);
  const cap = await keys.share(keyOrPrefix, epoch);
  if (cap === undefined) {
    throw new PowerStoreError(
      'NOT_AUTHORIZED',
      `cannot share ${JSON.stringify(keyOrPrefix)} at key epoch ${epoch}: it is outside this identity's namespace and no capability it holds covers it`,
    );
  }
  return cap;
}

/** What signing a grant needs of a store: its identity (the grantor) and the cluster the grant is for. */
export interface Grantor {
  readonly identity: Identity | undefined;
  readonly crypto: CryptoProvider;
  readonly cluster: Cluster;
}

/** A grant signed by `grantor`'s identity letting `grantee` write under `prefix` until `expires`: see `Store.grant`. */
export async function issueGrant(grantor: Grantor, grantee: string, prefix: string, expires: Expiry): Promise<GrantJson> {
  const { identity, crypto, cluster } = grantor;
  if (!identity) throw new PowerStoreError('NO_IDENTITY', 'granting needs an identity: connect({ cluster, identity })');
  let granteeKey: Uint8Array;
  try {
    granteeKey = decodePublicKey(grantee, 'grantee');
  } catch (err) {
    throw invalid((err as Error).message);
  }
  const expiresAt = expires === 'never' ? MAX_EXPIRY : expires instanceof Date ? expires.getTime() : expires;
  try {
    const g = await signGrant(crypto, cluster.identity, identity.signer, { grantee: granteeKey, prefix, expiresAt });
    return grantToJson(crypto, cluster.identity.id, g);
  } catch (err) {
    throw invalid((err as Error).message, err);
  }
}
