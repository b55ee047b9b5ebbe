/**
 * The cluster a client is given: the JSON of `cluster.json` as `powerstore-server init`
 * writes it, checked by the protocol's one validator so a bad file fails at `connect`
 * with the field that is wrong, and grants as `powerstore grant` prints them.
 */
import {
  ClusterFileError,
  grantFromJson,
  parseClusterFile,
  bytesEqual,
  type Cluster,
  type CryptoProvider,
  type Grant,
} from '@powerstore/protocol';
import { invalidInput } from './errors.js';

export function parseCluster(input: unknown): Cluster {
  try {
    return parseClusterFile(input);
  } catch (err) {
    if (err instanceof ClusterFileError) throw invalidInput('cluster', `cluster: ${err.message}`, err);
    throw err;
  }
}

/** Grants (JSON objects or already parsed) for this cluster. */
export function parseGrants(crypto: CryptoProvider, cluster: Cluster, input: unknown): Grant[] {
  if (input === undefined) return [];
  if (!Array.isArray(input)) throw invalidInput('grants', 'grants must be a list of grant objects (what `powerstore grant` prints)');
  return input.map((g: unknown, i) => {
    let parsed;
    try {
      parsed = grantFromJson(crypto, g);
    } catch (err) {
      throw invalidInput('grants', `grants[${i}]: ${(err as Error).message}`, err);
    }
    if (!bytesEqual(parsed.clusterId, cluster.identity.id)) throw invalidInput('grants', `grants[${i}] was issued for another cluster`);
    return parsed.grant;
  });
}
