/**
 * Deterministic simulation of a PowerStore cluster: `3t + 1` in-memory servers (up to
 * `t` Byzantine, some sending requests of their own), honest writers with identities and
 * grants (the owner, a grantee, the admin, a grantee whose grant expires mid-run), each
 * running overlapping operations on the same keys, honest readers, a hostile client
 * forging writes and write-backs, writers crashing mid-round (striped writes too, between
 * stripes), striped values read stripe by stripe, a grantee revoked mid-run by a policy
 * change that reaches servers one by one, and an adversarial network (`network.ts`).
 * Each fence attack of the hostile client brings an owner's (or the admin's) write of its
 * key after the attacker lost its authority, and a reader of that key after the write.
 * Every message crosses the real wire codec; correct servers run the same frame handler
 * as `powerstore-server`, honest clients the client's own operation host. With `rotate`,
 * a correct server's key is replaced mid-run (`epochs.ts`) while everything else goes on.
 *
 * A run is a state machine, in the manner of TigerBeetle's simulator: {@link
 * Simulation.create} builds the world from the options and the seed, {@link
 * Simulation.step} runs the next thing due, {@link Simulation.run} steps until nothing is
 * left, and {@link Simulation.finish} makes the end-of-run checks and reports. One seed
 * fixes everything. The world's parts: the servers (`cluster.ts`), the honest clients
 * (`clients.ts`, their operations' ends judged in `outcomes.ts`), the hostile clients
 * (`adversary.ts`), disk losses and rebuilds (`rebuild-hosts.ts`), key rotation
 * (`rotation.ts`), what they share (`world.ts`); every option is in `options.ts`, the
 * checks in `checkers.ts` and `storage-checks.ts`.
 */
import { CertificateVerifier, clusterConfig, encodeMessage, ownerIdOf } from '@powerstore/protocol';
import type { RegisterOp } from '../lincheck/lincheck.js';
import { Adversary } from './adversary.js';
import { EPOCH, makeCast } from './cast.js';
import { Checker, checkIndexMatchesEntries } from './checkers.js';
import { SimClock } from './client-host.js';
import { HonestClients, type Client } from './clients.js';
import { Cluster, isServer } from './cluster.js';
import type { Expectation } from './hostile-clients.js';
import { Network, type InFlight } from './network.js';
import {
  CATCH_UP_SHARE,
  describeHostFaults,
  describeOptions,
  drawHostFaults,
  drawOptions,
  MAX_STEPS,
  streamsOf,
  UPLOAD_IDLE,
  type HostFaultOptions,
  type SimOptions,
} from './options.js';
import { judgeOutcome } from './outcomes.js';
import { correctProtocol } from './protocol-factories.js';
import { Prng } from './prng.js';
import type { Rebuild } from './rebuild.js';
import { RebuildHosts } from './rebuild-hosts.js';
import { planRotation } from './rotation.js';
import { checkConverged, checkHistoryBound, checkLcAgreement, lcFloors } from './storage-checks.js';
import { Agenda, codecFor, sharedCrypto, type World } from './world.js';

/** Outcome of one run. */
export interface SimReport {
  readonly seed: number;
  readonly t: number;
  readonly ok: boolean;
  readonly violations: string[];
  /** The run's options, as printed with a failure. */
  readonly options: string;
  /** Per-key history of correct clients, for the linearizability checkers. */
  readonly history: RegisterOp[];
  readonly steps: number;
  /** Listing pages finished (with `lists`). */
  readonly lists: number;
  readonly messages: number;
  readonly byzantine: string[];
  /** Attacks the hostile client mounted. */
  readonly attacks: string[];
  readonly crashedWriters: number;
  readonly reads: number;
  readonly writes: number;
  /** Writes of two operations of one session on one key overlapping in time. */
  readonly overlappingWrites: number;
  readonly failedWrites: Record<string, number>;
  /** Hostile requests correct servers refused, by code. */
  readonly refusals: Record<string, number>;
  /** Finished reads by the rounds they took. */
  readonly readRounds: Record<string, number>;
  /** Finished writes by the rounds they took. */
  readonly writeRounds: Record<string, number>;
  /** Whether the run had heavy write contention on one key. */
  readonly contention: boolean;
  /** Striped writes started, and completed. */
  readonly stripedWrites: number;
  readonly stripedWritesDone: number;
  /** Striped writes whose writer crashed in a STORE round of a stripe other than 0 (mid-upload). */
  readonly crashedMidStripe: number;
  /** Striped values read whole. */
  readonly stripedReads: number;
  /** Receipts correct servers signed in batches of two or more. */
  readonly batchedReceipts: number;
  /** Certificates honest writers signed in batches of two or more. */
  readonly batchedCertificates: number;
  /** Reads that gave up with VALUE_CHANGED while fetching further stripes (allowed, counted). */
  readonly valueChanged: number;
  /** Faults the clients' hosts met: links closed, frames over their limit, reads that failed as too large. */
  readonly hostFaults: { readonly linksClosed: number; readonly oversized: number; readonly tooLarge: number };
  /** With `rotate`: what was replaced when, and operations that ended refused by servers of another key epoch. */
  readonly rotation: string | undefined;
  readonly staleOps: number;
  /**
   * With `rebuild`: the servers that lost their disk and when each rebuild finished; and
   * for every run that caught up at its end, what the repairs did.
   */
  readonly rebuilds: string[];
  readonly repairs: Record<string, number>;
  /**
   * The fence at work: the fence attacks' writes planted, planted with their store proof,
   * and completed after the owner wrote; owners' and the admin's writes that jumped; reads
   * the fence check applied to.
   */
  readonly fences: Record<string, number>;
}

/** What a step runs: the earliest thing due (see {@link Simulation.step}). */
type Due =
  | { readonly kind: 'message'; readonly at: number; readonly message: InFlight }
  | { readonly kind: 'start'; readonly at: number; readonly client: Client }
  | { readonly kind: 'attack'; readonly at: number }
  | { readonly kind: 'event'; readonly at: number }
  | { readonly kind: 'client timer'; readonly at: number }
  | { readonly kind: 'rebuild timer'; readonly at: number; readonly host: Rebuild }
  | { readonly kind: 'partition ends'; readonly at: number };

/** One seeded run: the world, stepped until nothing is left, then checked. */
export class Simulation {
  readonly #world: World;
  readonly #cluster: Cluster;
  readonly #clients: HonestClients;
  readonly #adversary: Adversary;
  readonly #rebuilds: RebuildHosts;
  /** With `rotate`: what is replaced when. */
  #rotation: string | undefined;
  /** Every process a partition may cut off. */
  readonly #processes: readonly string[];
  #steps = 0;
  /** Resolves the promise of the run in progress ({@link run}). */
  #endRun: (() => void) | undefined;

  /**
   * Builds the world from the options and the seed. The order is part of the seed's
   * meaning: every part draws from the main stream (and the streams it forks) in turn, the
   * features added later from streams of their own (`Streams`).
   */
  static async create(options: SimOptions): Promise<Simulation> {
    const { seed } = options;
    const config = clusterConfig(options.t);
    const { n, t } = config;
    const prng = new Prng(seed);
    const drawn = drawOptions(prng.fork(), {
      t,
      hostile: options.hostile ?? false,
      ...(options.behaviours ? { behaviours: options.behaviours } : {}),
      ...(options.attacks ? { attacks: options.attacks } : {}),
      ...(options.contention !== undefined ? { contention: options.contention } : {}),
      ...(options.deleteRate !== undefined ? { deleteRate: options.deleteRate } : {}),
    });
    const network = new Network(prng.fork(), drawn.network);
    const streams = streamsOf(seed);
    const hostFaults: HostFaultOptions = { ...drawHostFaults(streams.faults.fork(), options.hostile ?? false), ...options.hostFaults };
    const adversaryRng = prng.fork();
    const cast = await makeCast(sharedCrypto, prng.fork(), n);
    // With `rebuild`, a server that lost its disk counts against t until it has rebuilt: at most t − 1 Byzantine servers.
    const byzantineCount = options.rebuild ? Math.min(drawn.adversary.byzantineServers, t - 1) : drawn.adversary.byzantineServers;
    const byzantine = new Set(prng.shuffle(Array.from({ length: n }, (_, i) => i)).slice(0, byzantineCount));
    const world: World = {
      options,
      protocol: options.protocol ?? correctProtocol,
      config,
      drawn,
      hostFaults,
      prng,
      streams,
      network,
      clock: new SimClock(network),
      cast,
      crypto: sharedCrypto,
      codec: codecFor(config),
      checker: new Checker(drawn.storage.historyKeep),
      keys: Array.from({ length: drawn.workload.keys }, (_, i) => `${cast.prefix}k${i}`),
      byzantine,
      correct: Array.from({ length: n }, (_, i) => i).filter((i) => !byzantine.has(i)),
      agenda: new Agenda(),
      time: () => EPOCH + network.now,
      send: (from, to, message, slow = false) => network.send(from, to, encodeMessage(message), slow),
    };
    const simulation = new Simulation(world, adversaryRng);
    if (options.rotate) simulation.#rotation = await planRotation(world, simulation.#cluster, simulation.#clients, simulation.#adversary);
    simulation.#rebuilds.plan((rng) => simulation.#adversary.forgeUneven(rng));
    return simulation;
  }

  private constructor(world: World, adversaryRng: Prng) {
    this.#world = world;
    const { cast, checker, agenda, correct } = world;
    const expectations = new Map<number, Expectation>();
    this.#cluster = new Cluster(world, adversaryRng, () => this.#steps, expectations);
    this.#clients = new HonestClients(world, this.#cluster);
    this.#adversary = new Adversary(world, expectations);
    // Authority that ends mid-run. The expiring grantee's grant, by each correct server's
    // clock; the turncoat's, by a policy change each server takes at its own time. Once
    // every correct server refuses a grantee, the checker's fence applies to it.
    const { skews } = this.#cluster;
    const lostAt = {
      expiring: Math.max(...correct.map((i) => cast.expiringAt - skews[i]!)),
      turncoat: Math.max(...correct.map((i) => cast.turncoatRevokedAt + cast.revocationDelays[i]!)),
    };
    agenda.add(
      ...this.#cluster.servers.map((_, i) => ({
        at: cast.turncoatRevokedAt + cast.revocationDelays[i]!,
        run: () => this.#cluster.setPolicy(i, cast.revokedPolicy),
      })),
      // After the policy changes due at the same time (events due together keep their order).
      { at: lostAt.turncoat, run: () => checker.authorityLost('turncoat') },
      { at: lostAt.expiring, run: () => checker.authorityLost('expiring') },
    );
    this.#adversary.aimFences(lostAt, (number, key, lost) =>
      this.#clients.addFence(number, key, lost, () => this.#adversary.mallory.lateComplete(number)),
    );
    this.#rebuilds = new RebuildHosts(world, this.#cluster);
    this.#processes = [...this.#cluster.names, ...this.#clients.all.map((c) => c.name), 'mallory'];
  }

  /** Steps taken so far (the Byzantine servers' clock). */
  get steps(): number {
    return this.#steps;
  }

  /**
   * Runs the next thing due, at its virtual time: a message delivered (sometimes with two
   * more server-bound ones, handled concurrently), a client starting its next operation, a
   * hostile attack, a scheduled event, a client host's timer, a rebuild host's timer, or a
   * partition ending. Partitions start and end first; when only partitioned messages are
   * left, the partition heals. Then what it set off settles: the clients' hosts finish
   * their work, and the operations that ended are judged. Resolves to whether anything was
   * left to run (`false` also past the step bound).
   */
  async step(): Promise<boolean> {
    const { network, clock, options, checker, agenda } = this.#world;
    this.#steps++;
    if (this.#steps > MAX_STEPS) {
      checker.violations.push(`no termination within ${MAX_STEPS} steps`);
      return this.#stop();
    }
    const cut = network.partition;
    network.updatePartition(this.#processes);
    if (options.rebuild && cut && !network.partition) await this.#rebuilds.partitionHealed(cut);
    const due = this.#nextDue();
    if (due === undefined) {
      const healed = network.partition;
      if (!network.heal()) return this.#stop();
      if (options.rebuild && healed) await this.#rebuilds.partitionHealed(healed);
    } else {
      network.now = Math.max(network.now, due.at);
      switch (due.kind) {
        case 'start':
          await this.#clients.start(due.client);
          break;
        case 'attack':
          this.#adversary.launchNext();
          break;
        case 'event':
          await agenda.runNext();
          break;
        case 'client timer':
          clock.fireNext();
          break;
        case 'rebuild timer':
          await due.host.fire();
          break;
        case 'partition ends':
          break;
        case 'message': {
          const m = due.message;
          network.take(m);
          const batch = [m, ...network.concurrentWith(m, isServer)];
          if (batch.length > 1) await Promise.all(batch.map((x) => this.#cluster.deliver(x)));
          else if (isServer(m.to)) await this.#cluster.deliver(m);
          else await this.#deliverToClient(m);
        }
      }
    }
    // Settling is written out here rather than called (as `#settle`, which starts a run): a
    // call would put a second turn of the microtask queue between this step and the next.
    // Attacks of the hostile client compute alongside the steps, and where their turns fall
    // among the steps' is part of each seed's run.
    const clients = this.#clients;
    while (true) {
      for (const c of clients.all) await c.host.idle();
      await Promise.resolve();
      const o = clients.outcomes.shift();
      if (!o) break;
      await judgeOutcome(clients, o);
    }
    clients.closeCrashed();
    return true;
  }

  /**
   * Settles, then steps until nothing is left to run (or the step bound). Its promise is
   * resolved by the last step itself, not a turn after that step ends: what follows a run
   * then resumes at a fixed point among the turns of an attack still computing (see `step`).
   */
  run(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#endRun = resolve;
      const steps = async () => {
        await this.#settle();
        while (await this.step());
      };
      steps().catch(reject);
    });
  }

  /**
   * The end-of-run checks, once the run is over: wait-freedom; for some runs a final
   * catch-up of every correct server (more steps) and its convergence; the stored entries;
   * unfinished uploads swept; quotas, `lc` agreement, the history bound, the index, the
   * fence; linearizability. Returns the run's report.
   */
  async finish(): Promise<SimReport> {
    const { options, streams, checker, correct, config, crypto, network, drawn, byzantine, cast } = this.#world;
    const cluster = this.#cluster;
    // Wait-freedom: every operation of a correct client finished (or failed as allowed).
    for (const c of this.#clients.all) {
      if (c.crashed) continue;
      for (const run of c.running.values())
        checker.stuck(c.name, run.record.kind, run.record.key, (run.op as { phase?: string }).phase ?? '?');
      if (c.plan.length > 0) checker.violations.push(`${c.name} never got to start ${c.plan.length} operations`);
    }
    // Catch-up at the end, once the network has healed (it has: nothing is left in flight):
    // every correct server lists the cluster's completed writes and repairs what it misses.
    // After the run, so the run itself is what it was; for some ordinary seeds too (their own
    // stream), and never with `rotate` (a host of another key epoch would be refused).
    const catchUp = !options.rotate && (options.rebuild === true || streams.catchUp.chance(CATCH_UP_SHARE));
    if (catchUp) {
      this.#rebuilds.abandon();
      const floors = await lcFloors(checker, cluster.storages, correct, config.t);
      for (const j of correct) await this.#rebuilds.start(j, 'catch-up');
      await this.run();
      this.#rebuilds.abandon('catch-up');
      await checkConverged(checker, cluster.storages, cluster.inners, correct, floors);
    }
    await checker.verifyStoredEntries(crypto, new CertificateVerifier(crypto, cluster.newestIdentity()));

    // Uploads never finished are gone once idle: the clock moves past uploadIdleMs (and any
    // skew) and every correct server sweeps the keys it lists as unfinished, as hosts do.
    network.now += UPLOAD_IDLE + 2 * drawn.network.clockSkew + 1;
    for (const [i, s] of cluster.storages.entries()) {
      if (byzantine.has(i)) continue;
      const unfinished: string[] = [];
      for await (const key of s.unfinishedKeys()) unfinished.push(key);
      for (const key of unfinished) await cluster.inners[i]!.sweep(key);
      for (const key of s.keys()) await s.withKey(key, (r) => checker.unfinishedKept(`s${i}`, key, r));
    }
    // Quotas held at every correct server. Repairs (a rebuild's, a catch-up's) are charged to
    // the owner but not refused by the quota (the write was admitted where it was made): a
    // server that repaired holds at most what its other servers do.
    const malloryOwner = ownerIdOf(crypto, cast.mallory.publicKey);
    for (const [i, s] of cluster.storages.entries()) {
      if (byzantine.has(i)) continue;
      const repaired = cluster.diskLost.has(i) || catchUp;
      checker.quota(`s${i}`, malloryOwner, s.usage(malloryOwner).bytes, (repaired ? config.n - 1 : 1) * cast.malloryQuota);
    }
    // One valid content per timestamp: correct servers' lc agree wherever their timestamps do.
    await checkLcAgreement(
      checker,
      cluster.storages.filter((_, i) => !byzantine.has(i)),
    );
    // Bounded history: below lc, at most δ entries (none below a completed delete).
    for (const [i, s] of cluster.storages.entries())
      if (!byzantine.has(i)) await checkHistoryBound(checker, `s${i}`, s, drawn.storage.historyKeep);
    // Every stored entry is one its key's index lists, and the other way round.
    for (const [i, s] of cluster.storages.entries()) if (!byzantine.has(i)) await checkIndexMatchesEntries(checker, `s${i}`, s);
    checker.fence();
    return this.#report(checker.linearizability(), catchUp);
  }

  /**
   * The earliest thing due, if anything but scheduled events is left (they alone do not
   * keep a run going). Those due together go in a fixed order: a client starting, an
   * attack, an event, a client host's timer, a rebuild host's timer, a message.
   */
  #nextDue(): Due | undefined {
    const { network, clock, agenda } = this.#world;
    const message = network.next();
    const starter = this.#clients.nextToStart();
    const attackAt = this.#adversary.nextAttackAt;
    const eventAt = agenda.nextAt;
    const host = this.#rebuilds.nextTimer();
    const hostAt = host?.timerAt;
    // Clients' hosts' timers (fragment waits, timeouts) and their clients' give-ups.
    const clockAt = clock.nextAt;
    const times = [message?.at, starter?.nextStart, attackAt, clockAt, eventAt, hostAt].filter((x): x is number => x !== undefined);
    if (times.length === 0 || (times.length === 1 && eventAt !== undefined)) return undefined;
    const at = Math.min(...times);
    // Timers reach far (a rebuild host's give-up is 200 000 away, a client's timeout
    // further): a partition ending before one fires ends first, so the answers it held arrive.
    const ends = network.partitionEnds;
    if ((at === hostAt || at === clockAt) && ends !== undefined && ends < at && ends >= network.now)
      return { kind: 'partition ends', at: ends };
    if (starter && starter.nextStart === at) return { kind: 'start', at, client: starter };
    if (attackAt === at) return { kind: 'attack', at };
    if (eventAt === at) return { kind: 'event', at };
    if (clockAt === at) return { kind: 'client timer', at };
    if (host && hostAt === at) return { kind: 'rebuild timer', at, host };
    return { kind: 'message', at, message: message! };
  }

  /** Lets every host finish what it was handed, then handles the operations that ended, until nothing more happens. */
  async #settle(): Promise<void> {
    const clients = this.#clients;
    while (true) {
      for (const c of clients.all) await c.host.idle();
      // Reactions to a host's promise run after its work settled: one more turn for them.
      await Promise.resolve();
      const o = clients.outcomes.shift();
      if (!o) break;
      await judgeOutcome(clients, o);
    }
    clients.closeCrashed();
  }

  /** A frame reaches a process other than a server: the hostile clients, a rebuild host, an honest client. */
  async #deliverToClient(m: InFlight): Promise<void> {
    if (m.to === 'mallory' || m.to === 'forger') return this.#adversary.receive(m);
    if (m.to.startsWith('rb')) return this.#rebuilds.receive(m);
    this.#clients.deliver(m);
  }

  /** Nothing is left to run: the run in progress ends now. */
  #stop(): false {
    this.#endRun?.();
    this.#endRun = undefined;
    return false;
  }

  #report(history: RegisterOp[], catchUp: boolean): SimReport {
    const { options, config, checker, network, drawn, hostFaults } = this.#world;
    const { stats } = this.#clients;
    const { mallory } = this.#adversary;
    return {
      seed: options.seed,
      t: config.t,
      ok: checker.violations.length === 0,
      violations: checker.violations,
      options: `${describeOptions(drawn)}\n${describeHostFaults(hostFaults)}`,
      history,
      steps: this.#steps,
      lists: checker.lists,
      messages: network.sent,
      byzantine: this.#cluster.byzantine,
      attacks: mallory.mounted,
      crashedWriters: stats.crashedWriters,
      reads: checker.history.filter((o) => o.kind === 'read' && o.ret !== undefined).length,
      writes: checker.history.filter((o) => o.kind === 'write' && o.ret !== undefined).length,
      overlappingWrites: stats.overlappingWrites,
      failedWrites: Object.fromEntries(checker.failedWrites),
      refusals: Object.fromEntries(checker.refusals),
      readRounds: Object.fromEntries(checker.readRounds),
      writeRounds: Object.fromEntries(checker.writeRounds),
      contention: drawn.workload.contention,
      stripedWrites: stats.stripedWrites,
      stripedWritesDone: stats.stripedWritesDone,
      crashedMidStripe: stats.crashedMidStripe,
      stripedReads: checker.stripedReads,
      batchedReceipts: checker.batchedReceipts,
      batchedCertificates: stats.batchedCertificates,
      valueChanged: checker.valueChanged,
      hostFaults: { linksClosed: stats.linksClosed, oversized: stats.oversized, tooLarge: stats.tooLarge },
      rotation: this.#rotation,
      staleOps: stats.staleOps,
      rebuilds: this.#rebuilds.log,
      repairs: catchUp || options.rebuild ? { ...checker.repairs, runs: 1 } : {},
      fences: { ...mallory.fenceStats, jumps: checker.jumps, 'fenced reads': checker.fencedReads },
    };
  }
}
