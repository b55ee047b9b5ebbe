/**
 * Every option of a simulation run, in one place (in the manner of TigerBeetle's simulator
 * options): what a caller asks for ({@link SimOptions}), what the seed draws and prints with
 * a failure (the network's fault rates, the adversary's strength, the workload's shape, the
 * clients' host faults, each a named field with its meaning), the seed's independent
 * random streams, and the constants every run shares.
 */
import { Prng } from './prng.js';
import { BEHAVIOURS, type Behaviour } from './byzantine.js';
import { ATTACKS, type Attack } from './hostile-clients.js';
import type { ProtocolFactories } from './protocol-factories.js';

/** What to simulate. */
export interface SimOptions {
  readonly seed: number;
  readonly t: number;
  /** Protocol classes; mutants swap one. */
  readonly protocol?: ProtocolFactories;
  /** Always field `t` Byzantine servers and several hostile attacks (used for mutants). */
  readonly hostile?: boolean;
  /** Draw Byzantine behaviours only from these (to focus a hunt on one attack). */
  readonly behaviours?: readonly Behaviour[];
  /** Chance an operation is a delete, instead of the usual (a mutant that breaks what deletes do). */
  readonly deleteRate?: number;
  /** Client-host faults that replace those drawn (to focus a hunt on one situation). */
  readonly hostFaults?: Partial<HostFaultOptions>;
  /** Draw hostile attacks only from these. */
  readonly attacks?: readonly Attack[];
  /** Force heavy write contention on one key (otherwise drawn for some seeds). */
  readonly contention?: boolean;
  /**
   * Readers also list the keys (one page of a random size, instead of about one read in
   * four). Off by default so that other runs keep their seeds' schedules.
   */
  readonly lists?: boolean;
  /**
   * Many more writes are striped (about half, instead of a few): values of 2–4 stripes of
   * 64 KiB, read stripe by stripe. Off by default to keep `npm test` fast.
   */
  readonly stripes?: boolean;
  /**
   * A correct server's receipt key is replaced mid-run (key epoch 1, `epochs.ts`): a new
   * server takes its place (on an empty disk when fewer than `t` servers are Byzantine, so
   * the lost data stays within `t` faults; else keeping its data, as for a leaked key), the
   * other servers reload the new cluster file and the clients switch to it, each at its own
   * moment; a thief then tries the retired key. Operations refused by servers of another
   * epoch may fail (`CLUSTER_OUTDATED`, `SERVER_OUTDATED`); everything else is checked as
   * always. Off by default, so other runs keep their seeds' schedules.
   */
  readonly rotate?: boolean;
  /**
   * Servers lose their storage mid-run (a fresh, empty disk, the same key) and rebuild
   * from the others (`rebuild.ts`) while the workload runs, one more after each rebuild
   * finishes, the faulty servers (Byzantine, and lost but not yet rebuilt) never more than
   * `t` (so at most `t − 1` Byzantine servers); Byzantine servers lie to rebuilding hosts
   * in particular (`REBUILD_LIES`); correct servers cut off by a partition catch up once it
   * heals; a writer with a valid identity stores a write encoded inconsistently. Off by
   * default, so other runs keep their seeds' schedules.
   */
  readonly rebuild?: boolean;
}

/** The network between every pair of processes. */
export interface NetworkOptions {
  /** Chance a link is "far": all its messages take `farFactor` times longer. */
  readonly farLinkRate: number;
  /** Slowdown of far links, drawn per link from this range. */
  readonly farFactor: readonly [number, number];
  /** Chance a message is re-sent once more later (duplicates), at most twice per message. */
  readonly duplicateRate: number;
  /** Chance that, when several requests are due at servers, up to three are handled at once (exercises per-key exclusion). */
  readonly concurrentDeliveryRate: number;
  /** Mean virtual time between partitions; each heals after 50–1500 units. 0 = never. */
  readonly partitionEvery: number;
  /** How much each server's clock is off (± units), for grant expiry seen differently by servers. */
  readonly clockSkew: number;
}

/** Who misbehaves, and how. */
export interface AdversaryOptions {
  /** Byzantine servers, at most `t`, each with one behaviour. */
  readonly byzantineServers: number;
  /** Behaviours the Byzantine servers draw from. */
  readonly behaviours: readonly Behaviour[];
  /** Attacks the hostile client makes (each a request sequence to the servers). */
  readonly attacks: readonly Attack[];
  /** Chance an honest writer operation crashes part-way through its STORE or COMPLETE round. */
  readonly writerCrashRate: number;
}

/** The honest clients. */
export interface WorkloadOptions {
  /** Keys, all in one owner's namespace (one of them sometimes written only by the admin). */
  readonly keys: number;
  /** Writer sessions: the owner, a grantee, the admin and a grantee whose grant expires mid-run. */
  readonly writers: number;
  readonly readers: number;
  /** Operations each client runs. */
  readonly opsPerClient: readonly [number, number];
  /** Chance a writer starts its next operation before the previous one finished (same session, often the same key). */
  readonly overlapRate: number;
  /** Chance an operation is a delete. */
  readonly deleteRate: number;
  /** Writes one session may have running at once (with `overlapRate`). */
  readonly maxOverlap: number;
  /**
   * Heavy write contention on one key: every session overlaps many writes of it, so reads
   * meet more than δ concurrent writes and garbage collection moves them forward.
   */
  readonly contention: boolean;
}

/** How correct servers keep history. */
export interface StorageOptions {
  /** δ (`HistoryLimits.keep`): entries kept below `lc`; 0 keeps only `lc`'s. */
  readonly historyKeep: number;
}

/** Everything a run is made of. */
export interface SimulationOptions {
  readonly network: NetworkOptions;
  readonly adversary: AdversaryOptions;
  readonly workload: WorkloadOptions;
  readonly storage: StorageOptions;
}

/** Options for one run; `hostile` always fields `t` Byzantine servers and several attacks. */
export function drawOptions(
  prng: Prng,
  {
    t,
    hostile,
    behaviours,
    attacks,
    contention,
    deleteRate,
  }: {
    t: number;
    hostile: boolean;
    behaviours?: readonly Behaviour[];
    attacks?: readonly Attack[];
    contention?: boolean;
    deleteRate?: number;
  },
): SimulationOptions {
  const network: NetworkOptions = {
    farLinkRate: prng.chance(0.5) ? 0.15 : 0.05,
    farFactor: [5, 40],
    duplicateRate: prng.chance(0.5) ? 0.03 : 0,
    concurrentDeliveryRate: 0.3,
    partitionEvery: prng.chance(0.7) ? prng.range(500, 3000) : 0,
    clockSkew: prng.range(0, 50),
  };
  const byzantineServers = hostile ? t : prng.chance(0.3) ? 0 : prng.range(1, t);
  const allAttacks = attacks ?? ATTACKS;
  const attackCount = hostile ? prng.range(3, 8) : prng.chance(0.5) ? prng.range(1, 4) : 0;
  const adversary: AdversaryOptions = {
    byzantineServers,
    behaviours: behaviours ?? BEHAVIOURS,
    attacks: Array.from({ length: attackCount }, () => prng.pick(allAttacks)),
    // Hostile runs crash writers more often: a write that stops part-way through COMPLETE
    // is what the readers' write-back exists for.
    writerCrashRate: hostile ? 0.3 : prng.chance(0.5) ? 0.15 : 0,
  };
  const heavy = contention ?? prng.chance(0.15);
  const workload: WorkloadOptions = heavy
    ? // Bounded so the linearizability check (exponential in overlapping writes) stays fast.
      {
        keys: 1,
        writers: 4,
        readers: prng.range(2, 4),
        opsPerClient: [4, 7],
        overlapRate: 0.8,
        deleteRate: deleteRate ?? 0.1,
        maxOverlap: 4,
        contention: true,
      }
    : {
        keys: prng.range(1, 2),
        writers: prng.range(2, 4),
        readers: prng.range(2, 4),
        opsPerClient: [2, 4],
        overlapRate: prng.chance(0.6) ? 0.5 : 0,
        deleteRate: deleteRate ?? 0.2,
        maxOverlap: 3,
        contention: false,
      };
  const storage: StorageOptions = { historyKeep: prng.range(0, 3) };
  return { network, adversary, workload, storage };
}

/** One line per group, for `--verbose` and failure reports. */
export function describeOptions(o: SimulationOptions): string {
  const n = o.network;
  const a = o.adversary;
  const w = o.workload;
  return [
    `network: far links ${n.farLinkRate} (×${n.farFactor.join('–')}), duplicates ${n.duplicateRate}, concurrent delivery ${n.concurrentDeliveryRate}, partitions ${n.partitionEvery ? `every ~${n.partitionEvery}` : 'none'}, clock skew ±${n.clockSkew}`,
    `adversary: ${a.byzantineServers} Byzantine servers, attacks [${a.attacks.join(', ')}], writer crash rate ${a.writerCrashRate}`,
    `workload: ${w.keys} keys, ${w.writers} writers, ${w.readers} readers, ${w.opsPerClient.join('–')} ops each, overlap ${w.overlapRate} (up to ${w.maxOverlap}), deletes ${w.deleteRate}${w.contention ? ', heavy contention' : ''}`,
    `storage: history keep δ = ${o.storage.historyKeep}`,
  ].join('\n');
}

/**
 * Faults between honest clients' operation hosts and the servers (`client-host.ts`), drawn
 * from a stream of their own so every other draw of a seed stays as it was.
 */
export interface HostFaultOptions {
  /** Chance a reply to an honest client finds its connection closed: the reply is lost, and the link reopens later. */
  readonly dropRate: number;
  /** How long a closed link stays down (virtual time). */
  readonly reopenAfter: readonly [number, number];
  /** Chance a Byzantine server's reply to an honest client is a frame over the client's size limit. */
  readonly oversizeRate: number;
  /** Chance the platform shows such a frame's header (a browser does; Node's `ws` does not). */
  readonly headShown: number;
  /** Chance a reader starts its next read before the previous one ended (several FILTERs owed by one server). */
  readonly readerOverlapRate: number;
  /** Chance a reader accepts only small frames: correct servers' answers with a large stripe are over its limit. */
  readonly smallReaders: number;
}

/** Host faults for one run; `hostile` always has some of each. */
export function drawHostFaults(prng: Prng, hostile: boolean): HostFaultOptions {
  const drops = hostile || prng.chance(0.6);
  const oversize = hostile || prng.chance(0.5);
  return {
    dropRate: drops ? prng.pick([0.005, 0.02, 0.05]) : 0,
    reopenAfter: [20, 800],
    oversizeRate: oversize ? prng.pick([0.02, 0.1, 0.3]) : 0,
    // Hostile runs mostly as in Node, where the header of a frame over the limit is not shown.
    headShown: prng.pick(hostile ? [0, 0, 0.5] : [0, 0.5, 1]),
    readerOverlapRate: hostile || prng.chance(0.5) ? 0.4 : 0,
    smallReaders: hostile || prng.chance(0.3) ? 0.5 : 0,
  };
}

export function describeHostFaults(h: HostFaultOptions): string {
  return `client hosts: connections closing ${h.dropRate} (down ${h.reopenAfter.join('–')}), Byzantine frames over the limit ${h.oversizeRate} (header shown ${h.headShown}), readers overlapping ${h.readerOverlapRate}, readers with a small frame limit ${h.smallReaders}`;
}

/**
 * The seed's streams of their own. Each feature added after the run's first shape draws
 * from one, so that turning it on (or drawing more for it) leaves every other draw of the
 * seed as it was; the rest of the run draws from the main stream (`new Prng(seed)`) and
 * its forks, in the order the world is built.
 */
export interface Streams {
  /** Faults between the clients' hosts and the servers ({@link HostFaultOptions}), and which readers have a small frame limit. */
  readonly faults: Prng;
  /** Disk losses and rebuilds (`rebuild`), and the lies Byzantine servers tell rebuilding hosts. */
  readonly rebuild: Prng;
  /** Which reads become listings (`lists`). */
  readonly lists: Prng;
  /** The size of each listing page. */
  readonly listLimits: Prng;
  /** Which writes are striped, their stripes, and where reads of them start. */
  readonly stripes: Prng;
  /** The fence attacks' keys, times and honest writers and readers. */
  readonly fences: Prng;
  /** The replaced server, its new key and when each process takes the new cluster file (`rotate`). */
  readonly rotation: Prng;
  /** Whether an ordinary run catches up at its end. */
  readonly catchUp: Prng;
}

/** The streams of `seed` (creating one draws nothing). */
export function streamsOf(seed: number): Streams {
  return {
    faults: new Prng(seed * 7_368_787 + 23),
    rebuild: new Prng(seed * 49_979_687 + 13),
    lists: new Prng(seed * 7919 + 17),
    listLimits: new Prng(seed * 104729 + 3),
    stripes: new Prng(seed * 6151 + 29),
    fences: new Prng(seed * 7243 + 11),
    rotation: new Prng(seed * 15_485_863 + 11),
    catchUp: new Prng(seed * 9973 + 5),
  };
}

/** Steps a run may take (both drains together) before it counts as not terminating. */
export const MAX_STEPS = 250_000;

/** Share of value writes that are striped without, and with, `SimOptions.stripes`. */
export const STRIPED_SHARE = 0.06;
export const STRIPED_SHARE_MANY = 0.5;

/** Share of ordinary seeds (not `rebuild`) that catch up at the end and are checked for it. */
export const CATCH_UP_SHARE = 0.25;

/**
 * How long a striped write some server refused (or any operation a server of another key
 * epoch refused) may go on before its client gives up on it: it may neither reach `n − t`
 * answers nor `t + 1` refusals (a silent Byzantine server), and a real client's timeout
 * would end it. Other allowed refusals are given up at once.
 */
export const WRITE_TIMEOUT = 2000;

/**
 * The operation timeout of the simulated clients' hosts, in virtual time: far beyond what
 * any operation of a correct client takes on the simulated network (its slowest message
 * takes 60 000), so an honest operation that times out is stuck, a violation.
 */
export const SIM_OP_TIMEOUT = 1_200_000;

/** The simulated clients' frame limit: far above any frame of the run. */
export const SIM_MAX_FRAME = 16 * 1024 * 1024;

/**
 * The frame limit of readers with a small one (`HostFaultOptions.smallReaders`): above
 * any answer but a FILTER's of a large stripe, so correct servers' answers to them are
 * sometimes over the limit, and such a read fails with VALUE_TOO_LARGE.
 */
export const SMALL_FRAME = 16 * 1024;

/**
 * Servers' `uploadIdleMs` in simulated time: long enough for a slow honest upload overtaken
 * by a newer write (a tenth of it below `lc`), short enough that the end-of-run sweep is real.
 */
export const UPLOAD_IDLE = 10_000;

/**
 * The simulator's "after this turn" for signature batches (servers' receipts, sessions'
 * certificates) in the runs that batch ({@link batchWindowOf}): a few dozen microtask
 * turns, deterministic, so requests handled in one step (messages delivered together)
 * share a signature.
 */
export function batchWindow(flush: () => void): void {
  let turns = 64;
  const wait = (): void => (--turns > 0 ? void Promise.resolve().then(wait) : flush());
  void Promise.resolve().then(wait);
}

/**
 * The batch window of a run: every fourth seed's servers and sessions batch signatures
 * (the window's microtask turns cost a run about a third more time, so not every run
 * pays them); the others sign each receipt and certificate alone, as hosts without
 * batching do. Chosen by the seed itself, so every other draw stays as it was.
 */
export function batchWindowOf(seed: number): ((flush: () => void) => void) | undefined {
  return seed % 4 === 0 ? batchWindow : undefined;
}
