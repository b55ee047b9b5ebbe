/**
 * Disk losses, rebuilds and catch-ups (`rebuild`): a correct server loses its disk and
 * rebuilds from the others (`rebuild.ts`) while the workload runs, one more after each
 * rebuild finishes, the faulty servers never more than `t`; correct servers cut off by a
 * partition catch up once it heals; and at the end of some runs every correct server
 * catches up. One host per server at a time, on the network as `rb<index>`, cut off by
 * partitions with its server.
 */
import { CertificateVerifier, decodeMessage, type Reply } from '@powerstore/protocol';
import type { Cluster } from './cluster.js';
import type { InFlight } from './network.js';
import type { Prng } from './prng.js';
import { Rebuild } from './rebuild.js';
import type { World } from './world.js';

/** The rebuilding and catching-up hosts of a run, and the disk losses that start rebuilds. */
export class RebuildHosts {
  readonly #world: World;
  readonly #cluster: Cluster;
  /** Hosts at work, by their name on the network. */
  readonly #hosts = new Map<string, Rebuild>();
  /** Servers that lost their disk and have not finished rebuilding: they count against t. */
  readonly #lost = new Set<number>();
  /** Disks lost and rebuilds finished, when, and what each rebuild repaired. */
  readonly log: string[] = [];
  #nextOpId = 1;
  /** Disk losses still to come, each some time after the last rebuild finished. */
  #lossesLeft = 0;

  constructor(world: World, cluster: Cluster) {
    this.#world = world;
    this.#cluster = cluster;
  }

  /**
   * With `rebuild`, from the rebuild stream: how many disks are lost, the first loss, and
   * when `forge` (given a stream of its own, forked when it runs) stores its inconsistent write.
   */
  plan(forge: (rng: Prng) => Promise<void>): void {
    const { options, streams, correct, agenda } = this.#world;
    if (!options.rebuild) return;
    const rng = streams.rebuild;
    this.#lossesLeft = rng.range(1, 3);
    this.#lossesLeft--;
    const j = rng.pick(correct);
    agenda.add({ at: rng.range(50, 1200), run: () => this.loseDisk(j) }, { at: rng.range(0, 1500), run: () => forge(rng.fork()) });
  }

  /** The host whose timer is due first, if any is armed. */
  nextTimer(): Rebuild | undefined {
    let host: Rebuild | undefined;
    for (const h of this.#hosts.values()) if (h.timerAt !== undefined && (!host || h.timerAt < host.timerAt!)) host = h;
    return host;
  }

  /** A reply from a server to host `m.to` (dropped if that host has finished). */
  receive(m: InFlight): Promise<void> | undefined {
    return this.#hosts.get(m.to)?.receive(Number(m.from.slice(1)), decodeMessage(m.frame, { n: this.#world.config.n }) as Reply);
  }

  /** Starts a rebuild or catch-up of server `j`, checked against an honest verifier of the newest cluster file. */
  async start(j: number, kind: 'rebuild' | 'catch-up'): Promise<void> {
    const { config, crypto, codec, protocol, network, streams, checker } = this.#world;
    const cluster = this.#cluster;
    const rng = streams.rebuild;
    const name = `rb${j}`;
    network.alias(name, `s${j}`);
    const honest = new CertificateVerifier(crypto, cluster.newestIdentity());
    const host = new Rebuild(
      name,
      kind,
      {
        config,
        crypto,
        codec,
        protocol,
        verifier: protocol.rebuildVerifier(crypto, cluster.newestIdentity()),
        index: j,
        server: () => cluster.inners[j]!,
        storage: () => cluster.storages[j]!,
        send: (to, request) => this.#world.send(name, `s${to}`, { ...request, opId: request.opId }),
        now: () => network.now,
        pageLimit: rng.chance(0.5) ? rng.range(1, 3) : 1000,
        nextOpId: () => this.#nextOpId++,
        reports: {
          repairStarted: async (server, key, c) => {
            if (!(await honest.valid(key, c)))
              checker.violations.push(`repair: ${server} set out to repair ${key} at ${c.ts.num}, a candidate that is not valid`);
          },
          pendingRepairStarted: async (server, key, c) => {
            if (!(await honest.check(key, c.ts, c.cert)).ok)
              checker.violations.push(
                `repair: ${server} set out to repair ${key} at ${c.ts.num}, a write under way whose certificate does not check out`,
              );
          },
          repairEnded: (server, key, c, error) => checker.repairEnded(server, key, c, error),
          repairStored: (server, key, c, stripe, outcome) => checker.repairStored(server, key, c, stripe, outcome),
          repairTimedOut: (server, key, c) => checker.repairTimedOut(server, key, c),
          violation: (message) => checker.violations.push(message),
        },
      },
      (done) => {
        if (this.#hosts.get(name) === done) this.#hosts.delete(name);
        if (done.kind === 'rebuild') {
          this.#lost.delete(j);
          this.log.push(
            `s${j} rebuilt at ${network.now} (${done.passes} passes, ${done.repaired} writes repaired, ${done.pendingRepaired} of them under way, ${done.pendingUnfinished} under way unfinished)`,
          );
          this.#scheduleLoss();
        }
      },
    );
    this.#hosts.set(name, host);
    await host.start();
  }

  /**
   * Server `j` loses its disk: a new server with the same key on an empty one, rebuilding
   * from the others. Only while the faulty servers stay within t.
   */
  async loseDisk(j: number): Promise<void> {
    const { byzantine, config, network } = this.#world;
    if (byzantine.size + this.#lost.size + 1 > config.t || this.#lost.has(j)) return;
    this.#lost.add(j);
    this.log.push(`s${j} lost its disk at ${network.now}`);
    this.#cluster.loseDisk(j);
    await this.start(j, 'rebuild');
  }

  /**
   * Once a partition heals, the correct servers on its smaller side catch up (those not
   * rebuilding already): they may have missed writes the other side completed.
   */
  async partitionHealed(cut: { readonly a: ReadonlySet<string>; readonly b: ReadonlySet<string> }): Promise<void> {
    const { correct } = this.#world;
    const side = (x: ReadonlySet<string>) => correct.filter((i) => x.has(`s${i}`));
    const a = side(cut.a);
    const b = side(cut.b);
    for (const j of a.length <= b.length ? a : b) if (!this.#hosts.has(`rb${j}`)) await this.start(j, 'catch-up');
  }

  /** Reports every host still at work as never finished (`what`: what it was doing), and forgets them and the disks lost. */
  abandon(what?: string): void {
    for (const h of this.#hosts.values())
      this.#world.checker.violations.push(`${what ?? h.kind}: s${h.ctx.index}'s never finished (${h.passes} passes, ${h.state})`);
    this.#hosts.clear();
    this.#lost.clear();
  }

  /** The next loss, some time after the last rebuild finished (a correct server, possibly one rebuilt before). */
  #scheduleLoss(): void {
    if (this.#lossesLeft === 0) return;
    this.#lossesLeft--;
    const { streams, correct, agenda, network } = this.#world;
    const j = streams.rebuild.pick(correct.filter((i) => !this.#lost.has(i)));
    agenda.add({ at: network.now + streams.rebuild.range(0, 400), run: () => this.loseDisk(j) });
  }
}
