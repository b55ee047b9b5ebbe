/**
 * The simulated servers: `3t + 1` in-memory servers, the correct ones on storage the
 * checker watches and running the same frame handler as `powerstore-server`, up to `t`
 * Byzantine ones (`byzantine.ts`) around a protocol server of their own. A server may be
 * replaced mid-run (a lost disk, a new key) and takes policy and cluster file changes.
 */
import {
  decodeMessage,
  encodeMessage,
  isRequest,
  type ClusterIdentity,
  type Reply,
  type Server,
  type ServerOptions,
  type Signer,
  type WritePolicy,
} from '@powerstore/protocol';
import { MemoryStorage } from '@powerstore/protocol/testing';
import { ByzantineServer, REBUILD_LIES, type Behaviour } from './byzantine.js';
import type { Expectation } from './hostile-clients.js';
import type { InFlight } from './network.js';
import { batchWindowOf, UPLOAD_IDLE } from './options.js';
import type { Prng } from './prng.js';
import type { World } from './world.js';

/** Whether a process name is a server's (`s<index>`). */
export const isServer = (name: string): boolean => /^s\d+$/.test(name);

/** The servers of a run, by index. */
export class Cluster {
  readonly #world: World;
  /** What the hostile client expects correct servers to do with each of its requests, by opId. */
  readonly #expectations: ReadonlyMap<number, Expectation>;
  /** Each server's storage now. */
  readonly storages: MemoryStorage[] = [];
  /** How far each server's clock is off. */
  readonly skews: number[] = [];
  /** What handles each server's frames: its protocol server, or the Byzantine server around it. */
  readonly servers: (Server | ByzantineServer)[] = [];
  /** The protocol servers, Byzantine ones' too (what a cluster file reload reaches). */
  readonly inners: Server[] = [];
  /** `s<index>:<behaviour>` of each Byzantine server, with its lie to rebuilding hosts (`rebuild`). */
  readonly byzantine: string[] = [];
  /** Each server's policy now (a server replaced mid-run starts with it). */
  readonly policies: WritePolicy[];
  /** Servers that ever lost their disk: they are held to nothing they may have forgotten. */
  readonly diskLost = new Set<number>();

  /**
   * Draws, in order, each server's clock skew (from the main stream) and each Byzantine
   * server's behaviour and stream (from `adversaryRng`) and lie (from the rebuild stream).
   * `steps` is the simulation's step count, the Byzantine servers' notion of time.
   */
  constructor(world: World, adversaryRng: Prng, steps: () => number, expectations: ReadonlyMap<number, Expectation>) {
    this.#world = world;
    this.#expectations = expectations;
    const { options, protocol, config, drawn, prng, streams, cast, crypto, codec, checker, keys, byzantine } = world;
    const adversary = { config, crypto, codec, clusterId: cast.cluster.id, now: steps, keys };
    for (let i = 0; i < config.n; i++) {
      const storage = new MemoryStorage();
      this.storages.push(storage);
      const skew = prng.range(-drawn.network.clockSkew, drawn.network.clockSkew);
      this.skews.push(skew);
      const server = protocol.server({
        config,
        index: i,
        crypto,
        storage: byzantine.has(i) ? storage : checker.watch(`s${i}`, storage),
        cluster: cast.cluster,
        signer: cast.servers[i]!,
        policy: cast.policy,
        now: () => world.time() + skew,
        history: { keep: drawn.storage.historyKeep, uploadIdleMs: UPLOAD_IDLE },
        ...this.#receiptBatching(byzantine.has(i)),
      });
      this.inners.push(server);
      if (byzantine.has(i)) {
        const behaviour: Behaviour = adversaryRng.pick(drawn.adversary.behaviours);
        this.byzantine.push(`s${i}:${behaviour}`);
        const lie = options.rebuild ? streams.rebuild.pick(REBUILD_LIES) : undefined;
        if (lie) this.byzantine[this.byzantine.length - 1] += `, to rebuilds ${lie}`;
        this.servers.push(new ByzantineServer(i, behaviour, server, cast.servers[i]!, adversary, adversaryRng.fork(), lie));
      } else {
        this.servers.push(server);
      }
    }
    this.policies = this.servers.map(() => cast.policy);
  }

  /**
   * Receipts batched as powerstore-server batches them, in the runs that batch
   * (`batchWindowOf`), with a deterministic window in place of `setImmediate`: STOREs
   * delivered together share a root.
   */
  #receiptBatching(byzantine: boolean): Pick<ServerOptions, 'receiptBatching' | 'onReceiptsSigned'> {
    const checker = this.#world.checker;
    const window = batchWindowOf(this.#world.options.seed);
    if (!window) return {};
    return {
      receiptBatching: window,
      onReceiptsSigned: (n) => {
        if (!byzantine && n > 1) checker.batchedReceipts += n;
      },
    };
  }

  /** The servers' names on the network. */
  get names(): string[] {
    return this.servers.map((_, i) => `s${i}`);
  }

  /** The newest cluster identity any server has (with `rotate`, the new epoch's, which keeps every older one). */
  newestIdentity(): ClusterIdentity {
    return this.inners.map((s) => s.cluster).reduce((a, b) => ((b.epoch ?? 0) > (a.epoch ?? 0) ? b : a));
  }

  /** Correct server `j` is replaced: a new process on `storage`, with `identity` and `signer`, keeping its policy and skew. */
  replace(j: number, storage: MemoryStorage, identity: ClusterIdentity, signer: Signer): void {
    const { protocol, config, crypto, checker, drawn } = this.#world;
    this.storages[j] = storage;
    const server = protocol.server({
      config,
      index: j,
      crypto,
      storage: checker.watch(`s${j}`, storage),
      cluster: identity,
      signer,
      policy: this.policies[j]!,
      now: () => this.#world.time() + this.skews[j]!,
      history: { keep: drawn.storage.historyKeep, uploadIdleMs: UPLOAD_IDLE },
      ...this.#receiptBatching(false),
    });
    this.servers[j] = server;
    this.inners[j] = server;
  }

  /** Correct server `j` loses its disk: the same key on an empty one. */
  loseDisk(j: number): void {
    this.diskLost.add(j);
    this.replace(j, new MemoryStorage(), this.inners[j]!.cluster, this.#world.cast.servers[j]!);
  }

  /** Server `i` takes a new policy (Byzantine ones' protocol servers too). */
  setPolicy(i: number, policy: WritePolicy): void {
    this.policies[i] = policy;
    this.inners[i]!.setPolicy(policy);
  }

  /** A frame reaches its server; what it answers goes back on the connection it came on. */
  async deliver(m: InFlight): Promise<void> {
    const { config, network, checker } = this.#world;
    const { n } = config;
    const index = Number(m.to.slice(1));
    const server = this.servers[index]!;
    if (server instanceof ByzantineServer) {
      const message = decodeMessage(m.frame, { n });
      if (!isRequest(message)) return; // a correct server's reply to this server's own request
      for (const e of await server.receive(m.from, message)) {
        if ('reply' in e) network.send(m.to, m.from, encodeMessage(e.reply), e.slow ?? false, m.connection);
        else this.#world.send(m.to, e.to, e.request);
      }
      return;
    }
    const r = await server.handleFrame(m.frame);
    if (r.failure)
      checker.violations.push(`s${index} failed: ${r.failure instanceof Error ? r.failure.message : JSON.stringify(r.failure)}`);
    network.send(m.to, m.from, r.reply, false, m.connection);
    if (m.from === 'mallory') {
      const reply = decodeMessage(r.reply, { n }) as Reply;
      // A server that lost its disk lost what made some forgeries refusable (a stored stripe,
      // an entry held): it counted against t, and is held to no expectation from then on.
      checker.hostileReply(index, reply, this.diskLost.has(index) ? undefined : this.#expectations.get(reply.opId));
    }
  }
}
