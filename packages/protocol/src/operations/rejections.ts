/**
 * Rejections in a round: a round needs `n − t` acknowledgements, so once more than `t`
 * servers have answered with ERROR it can never finish. The operation then fails at once
 * with the code at least `t + 1` of them agree on (one of those is correct, so the code is
 * true), instead of waiting for a timeout.
 */
import type { ClusterConfig } from '../core/config.js';
import { ProtocolError, type ProtocolErrorCode } from '../core/errors.js';
import type { ErrorReply } from '../wire/messages.js';
import { serverName } from './server-names.js';

const SERVERS = { origin: 'servers' } as const;

/** The ERROR replies of one round, one per server. */
export class Rejections {
  readonly #byServer = new Map<number, ErrorReply>();

  clear(): void {
    this.#byServer.clear();
  }

  /** Records server `from`'s ERROR; returns the operation's failure once the round cannot finish. */
  add(config: ClusterConfig, from: number, reply: ErrorReply): ProtocolError | undefined {
    this.#byServer.set(from, reply);
    if (this.#byServer.size <= config.t) return undefined;
    const counts = new Map<ProtocolErrorCode, number>();
    for (const r of this.#byServer.values()) counts.set(r.code, (counts.get(r.code) ?? 0) + 1);
    const summary = [...this.#byServer].map(([i, r]) => `${serverName(i)}: ${r.code} (${r.message})`).join('; ');
    for (const [code, count] of counts) {
      if (count >= config.t + 1) return new ProtocolError(code, `${count} servers refused: ${summary}`, SERVERS);
    }
    return new ProtocolError('INTERNAL', `${this.#byServer.size} servers refused, for different reasons: ${summary}`, SERVERS);
  }

  /** Whether server `from` rejected this round. */
  has(from: number): boolean {
    return this.#byServer.has(from);
  }
}
