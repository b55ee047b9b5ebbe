/**
 * What the parts of one simulation run share (`simulation.ts` builds it): the options, the
 * random streams, the network and the clients' clock, the cast, the checker, the scheduled
 * events; and what every run shares, the simulated cluster's crypto and codecs.
 */
import { createReferenceCodec } from '@powerstore/erasure/reference';
import type { ErasureCodec } from '@powerstore/erasure';
import { toHex, type ClusterConfig, type CryptoProvider, type Message } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import type { Cast } from './cast.js';
import type { Checker } from './checkers.js';
import type { SimClock } from './client-host.js';
import type { Network } from './network.js';
import type { HostFaultOptions, SimOptions, SimulationOptions, Streams } from './options.js';
import type { Prng } from './prng.js';
import type { ProtocolFactories } from './protocol-factories.js';

/** Everything the parts of a run (servers, clients, adversary, rebuilds) draw on. */
export interface World {
  /** What the caller asked for. */
  readonly options: SimOptions;
  readonly protocol: ProtocolFactories;
  readonly config: ClusterConfig;
  /** What the seed drew for this run. */
  readonly drawn: SimulationOptions;
  readonly hostFaults: HostFaultOptions;
  /** The main stream: the world is built from it in a fixed order, and the clients go on drawing from it. */
  readonly prng: Prng;
  readonly streams: Streams;
  readonly network: Network;
  /** The clients' hosts' timers (and their clients' give-ups), on the network's virtual time. */
  readonly clock: SimClock;
  readonly cast: Cast;
  readonly crypto: CryptoProvider;
  readonly codec: ErasureCodec;
  readonly checker: Checker;
  /** The honest clients' keys, all in the owner's namespace. */
  readonly keys: readonly string[];
  /** Indices of the Byzantine servers. */
  readonly byzantine: ReadonlySet<number>;
  /** Indices of the correct servers. */
  readonly correct: readonly number[];
  readonly agenda: Agenda;
  /** Wall-clock time now (each server adds its skew). */
  readonly time: () => number;
  /** Puts `message` on the network, through the wire codec; `slow`: see {@link Network.send}. */
  readonly send: (from: string, to: string, message: Message, slow?: boolean) => void;
}

/** Something due at a virtual time that is neither a message nor a timer. */
export interface ScheduledEvent {
  readonly at: number;
  readonly run: () => Promise<void> | void;
}

/**
 * Events due at given virtual times: policy changes, authority ending, key rotation steps,
 * disk losses. They alone do not keep a run going.
 */
export class Agenda {
  readonly #events: ScheduledEvent[] = [];

  /** Adds `events`; events due at the same time run in the order they were added. */
  add(...events: ScheduledEvent[]): void {
    this.#events.push(...events);
    this.#events.sort((a, b) => a.at - b.at);
  }

  /** When the next event is due, if any is left. */
  get nextAt(): number | undefined {
    return this.#events[0]?.at;
  }

  /** Takes the next event out and runs it. */
  runNext(): Promise<void> | void {
    return this.#events.shift()!.run();
  }
}

/**
 * node:crypto, with Ed25519 verification memoized across the whole simulated cluster.
 * Verification is a pure function of (key, message, signature), so sharing results
 * between simulated processes changes no outcome; every simulated server still asks, and
 * real ones verify for themselves. Without it, the same certificates and receipts are
 * verified by every server and client of a run, which dominates its time.
 */
function memoizedCrypto(inner: CryptoProvider): CryptoProvider {
  const memo = new Map<string, boolean>();
  return {
    ...inner,
    name: `${inner.name}, memoized`,
    async verifyEd25519(publicKey, message, signature) {
      const id = `${toHex(publicKey)}${toHex(signature)}${toHex(inner.sha256Sync([message]))}`;
      let ok = memo.get(id);
      if (ok === undefined) {
        ok = await inner.verifyEd25519(publicKey, message, signature);
        if (memo.size > 200_000) memo.clear();
        memo.set(id, ok);
      }
      return ok;
    },
  };
}

/** The crypto of every simulated process, in every run of this process. */
export const sharedCrypto = memoizedCrypto(createCryptoProvider());

const codecs = new Map<number, ErasureCodec>();

/** The erasure codec of `config` (one per `t`, shared by every run). */
export function codecFor(config: ClusterConfig): ErasureCodec {
  let c = codecs.get(config.t);
  if (!c) {
    c = createReferenceCodec({ k: config.t + 1, n: config.n });
    codecs.set(config.t, c);
  }
  return c;
}
