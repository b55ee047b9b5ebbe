/** The error of an operation that did not reach its quorum in time, saying server by server why. */
import { serverName, type ClusterConfig, type ErrorReply } from '@powerstore/protocol';
import { PowerStoreError } from '../errors.js';
import type { Link } from './link.js';
import type { Round } from './rounds.js';

/**
 * "need 3 of 4 servers, 2 reachable: s2 rejected (…), s4 timed out": for each server that
 * did not acknowledge `round` (if any), its refusal, its oversized frame, why its link is
 * down, or else `pending` (what it was doing: `timed out`, `connecting`). `waiting` is
 * what the operation itself says it waits for (`ClientOperation.waiting`): with every
 * server answering, the reason is there, not in who answered.
 */
export function unreachable(
  config: ClusterConfig,
  links: readonly Link[],
  need: number,
  round: Round<unknown> | undefined,
  pending: string,
  waiting?: string,
): PowerStoreError {
  const reasons: string[] = [];
  let reachable = 0;
  links.forEach((c, i) => {
    const name = serverName(i);
    if (c.state === 'open') reachable++;
    if (round?.acked.has(i)) return;
    const refusal: ErrorReply | undefined = round?.refused.get(i);
    const oversized = round?.oversized.get(i);
    if (refusal) reasons.push(`${name} rejected (${refusal.code}: ${refusal.message})`);
    else if (oversized) reasons.push(`${name} ${oversized}`);
    else if (c.state !== 'open')
      reasons.push(`${name} ${c.status().lastError ?? (c.state === 'connecting' ? 'connecting' : 'not connected')}`);
    else reasons.push(`${name} ${pending}`);
  });
  const who = reasons.length > 0 ? `: ${reasons.join(', ')}` : '';
  const why = waiting ? `; ${waiting}` : reasons.length === 0 ? '; every server answered, but the answers did not complete it' : '';
  return new PowerStoreError('QUORUM_UNREACHABLE', `need ${need} of ${config.n} servers, ${reachable} reachable${who}${why}`);
}
