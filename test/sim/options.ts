/**
 * What a simulation run looks like, drawn from its seed and printed with it (in the
 * manner of TigerBeetle's packet-simulator options): the network's fault rates, the
 * adversary's strength and the workload's shape, each a named field with its meaning.
 */
import type { Prng } from './prng.js';
import { BEHAVIOURS, type Behaviour } from './byzantine.js';
import { ATTACKS, type Attack } from './hostile-clients.js';

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
