/**
 * Key epochs: the history of the servers' receipt keys, so a server whose machine (and key)
 * is lost can be replaced by one with a new key without touching validity.
 *
 * - Epoch 0 holds the keys `init` made. Replacing server `i`'s key publishes epoch `e + 1`:
 *   every key of epoch `e` but `i`'s. An epoch's keys never change once published; a newer
 *   cluster file only adds epochs ({@link extensionProblem}).
 * - A write certificate names the epoch its writer used (`WriteCertificate.epoch`, signed),
 *   and its receipts are checked against that epoch's keys. So a candidate's validity still
 *   depends on nothing that can change: **validity stays timeless**, and a write completed
 *   under a retired key stays valid.
 * - Correct servers admit writes of their current epoch only, so they never again sign a
 *   receipt that a retired key could complete into a proof; and they answer only requests
 *   that name their current epoch (every frame carries its sender's epoch), so no operation
 *   mixes parties that judge validity by different key sets: a client with an older cluster
 *   file is told `CLUSTER_OUTDATED`, one with a newer file than the server `SERVER_OUTDATED`.
 *
 * The protocol README's trust model says what the holder of a retired key can and cannot do.
 */
import { bytesEqual } from '../core/bytes.js';
import type { ProtocolErrorCode } from '../core/errors.js';
import type { ClusterIdentity } from './grant.js';

/** The largest epoch number (a `u32` on the wire). */
export const MAX_EPOCH = 0xffff_ffff;

/** One receipt key a server has held: its key from epoch `from` on, until the next one's `from`. */
export interface ServerKey {
  readonly from: number;
  readonly key: Uint8Array;
}

/** The epoch `cluster` is at: what its writers sign and its servers admit. */
export function currentEpoch(cluster: ClusterIdentity): number {
  return cluster.epoch ?? 0;
}

/**
 * Server `server`'s receipt key in `epoch`, or `undefined` for a server or an epoch
 * `cluster` does not know (a later one than its current epoch).
 */
export function receiptKey(cluster: ClusterIdentity, epoch: number, server: number): Uint8Array | undefined {
  const current = currentEpoch(cluster);
  if (!Number.isInteger(epoch) || epoch < 0 || epoch > current) return undefined;
  if (epoch === current || !cluster.history) return cluster.servers[server];
  const keys = cluster.history[server];
  if (!keys) return undefined;
  for (let k = keys.length - 1; k >= 0; k--) if (keys[k]!.from <= epoch) return keys[k]!.key;
  return undefined;
}

/** Why `cluster`'s epochs are malformed, or `undefined` when they are sound. */
export function epochsProblem(cluster: ClusterIdentity): string | undefined {
  const epoch = currentEpoch(cluster);
  if (!Number.isSafeInteger(epoch) || epoch < 0 || epoch > MAX_EPOCH) return `the epoch must be an integer in 0..${MAX_EPOCH}`;
  const { history, servers } = cluster;
  if (!history) return undefined;
  if (history.length !== servers.length) return `the key history lists ${history.length} servers, the cluster has ${servers.length}`;
  for (let i = 0; i < servers.length; i++) {
    const keys = history[i]!;
    if (keys.length === 0 || keys[0]!.from !== 0) return `server ${i + 1}'s key history must start at epoch 0`;
    for (let k = 1; k < keys.length; k++) {
      if (!(keys[k]!.from > keys[k - 1]!.from)) return `server ${i + 1}'s key history must go up in epochs`;
    }
    if (keys.at(-1)!.from > epoch) return `server ${i + 1} has a key from epoch ${keys.at(-1)!.from}, after the current epoch ${epoch}`;
    if (!bytesEqual(keys.at(-1)!.key, servers[i]!)) return `server ${i + 1}'s last key must be its current one`;
  }
  return undefined;
}

/**
 * Why `next` may not replace `current` in a running party, or `undefined` when it may:
 * the same cluster id and admin, as many servers, no epoch earlier than `current`'s, and
 * every epoch `current` knows with exactly the same keys. That is all a newer cluster file
 * may do to an identity (besides its policy and URLs): add epochs.
 */
export function extensionProblem(current: ClusterIdentity, next: ClusterIdentity): string | undefined {
  const problem = epochsProblem(next);
  if (problem) return problem;
  if (!bytesEqual(current.id, next.id)) return 'the cluster id changed';
  if (!bytesEqual(current.admin, next.admin)) return 'the admin key changed';
  if (current.servers.length !== next.servers.length) return 'the number of servers changed';
  const from = currentEpoch(current);
  if (currentEpoch(next) < from) return `epoch ${currentEpoch(next)} is older than the current epoch ${from}`;
  for (let i = 0; i < current.servers.length; i++) {
    // Keys are steps in the epoch: comparing them where either history steps covers every epoch.
    const steps = new Set([0, from]);
    for (const h of [current.history?.[i], next.history?.[i]]) for (const k of h ?? []) if (k.from <= from) steps.add(k.from);
    for (const e of [...steps].sort((a, b) => a - b)) {
      if (!bytesEqual(receiptKey(current, e, i)!, receiptKey(next, e, i)!)) {
        return `the key of server ${i + 1} in epoch ${e} changed: a published epoch never changes`;
      }
    }
  }
  return undefined;
}

/**
 * Why a correct server at epoch `ours` refuses what names epoch `theirs` (a request, or a
 * STORE's certificate: `what`), or `undefined` when they are the same epoch.
 */
export function epochRefusal(
  theirs: number,
  ours: number,
  what: string,
): { readonly code: Extract<ProtocolErrorCode, 'CLUSTER_OUTDATED' | 'SERVER_OUTDATED'>; readonly reason: string } | undefined {
  if (theirs === ours) return undefined;
  return theirs < ours
    ? {
        code: 'CLUSTER_OUTDATED',
        reason: `the ${what} names key epoch ${theirs}, this server is at epoch ${ours} (a server was replaced): load the cluster file again`,
      }
    : {
        code: 'SERVER_OUTDATED',
        reason: `the ${what} names key epoch ${theirs}, this server is still at epoch ${ours}: its cluster file has not been reloaded yet`,
      };
}

/** `request` naming key epoch `epoch` (left out for 0, as the wire leaves it). */
export function withEpoch<M extends { readonly epoch?: number }>(request: M, epoch: number): M {
  return epoch ? { ...request, epoch } : request;
}
