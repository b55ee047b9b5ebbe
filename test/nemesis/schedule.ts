/**
 * The nemesis's fault schedule: which faults, on which servers and clients, when and for
 * how long, all drawn from one seed before the run starts, so a seed names the same
 * schedule every time (the exact interleaving with the clients' operations is the real
 * machine's, and is not replayed). Pure: no processes, no network.
 *
 * Fault budget: a server that is paused, killed (until it answers /healthz again), cut
 * off from every host, or cut off from clients counts as faulty, and at most `t` are
 * faulty at once: beyond that the protocol promises nothing about liveness, and a
 * schedule that takes the quorum away only measures timeouts. A bridge partition cuts
 * servers off from each other only; clients still reach every server, so it spends no
 * budget.
 */
import { Prng } from '../sim/prng.js';

/** One fault; servers and clients are 1-based. */
export type Fault =
  /** The server's link is down at the switch: no host reaches it, it reaches none. */
  | { readonly kind: 'isolate'; readonly server: number }
  /** The server and these clients drop each other's packets; servers still reach it. */
  | { readonly kind: 'clients-cut'; readonly server: number; readonly clients: readonly number[] }
  /**
   * Servers split in two halves that drop each other's packets, except the bridge, which
   * reaches both (Jepsen's "bridge"); clients reach every server.
   */
  | { readonly kind: 'bridge'; readonly bridge: number; readonly halves: readonly [readonly number[], readonly number[]] }
  /** SIGSTOP, then SIGCONT: a long GC pause or a VM migration, with the connections left open. */
  | { readonly kind: 'pause'; readonly server: number }
  /** kill -9, then a restart on the same data directory. */
  | { readonly kind: 'kill'; readonly server: number }
  /**
   * An asymmetric cut: packets one way between the server and these clients are lost, the
   * other way they arrive. `to-clients`: requests reach the server, which acts on them, and
   * its answers are lost; `from-clients`: nothing reaches it, its own packets still leave.
   */
  | {
      readonly kind: 'one-way';
      readonly server: number;
      readonly clients: readonly number[];
      readonly direction: 'to-clients' | 'from-clients';
    }
  /** SIGSTOP, then SIGCONT, of a client process: its timers and connections frozen mid-operation. */
  | { readonly kind: 'client-pause'; readonly client: number }
  /**
   * Power loss (data directories on lazyfs, test/nemesis/lazyfs/): kill -9, everything not
   * yet durable dropped, the file system mounted again, then a restart; with `again`, a
   * second power loss that many milliseconds after the restart (LevelDB has just switched
   * to a new MANIFEST), and a restart.
   */
  | { readonly kind: 'power'; readonly server: number; readonly again?: number }
  /**
   * The server's fsync and fdatasync fail with EIO (libfiu, `test/fiu.ts`): its next synced
   * batch fails, it acknowledges nothing more and exits (74); at the end of the fault the
   * failure point is turned off and the server restarted on the same data directory.
   */
  | { readonly kind: 'disk'; readonly server: number }
  /**
   * The server's disk is full (lazyfs, `setFull`): writes and new files fail with ENOSPC
   * and statfs reports no room. The server refuses writes (`UNAVAILABLE`), serves reads,
   * and once the fault ends and its probe finds room, reopens its storage by itself: it
   * must not exit.
   */
  | { readonly kind: 'disk-full'; readonly server: number }
  /**
   * Every server loses power at once (a data centre's power cut): as `power`, on all of them
   * together, then all restarted. No server is faulty in the protocol's sense (a correct
   * server loses nothing it acknowledged), but none answers until they are back, so it
   * never overlaps a fault that spends budget, and operations meanwhile time out.
   */
  | { readonly kind: 'blackout' };

export type FaultKind = Fault['kind'];

/** A fault and when it happens, in milliseconds from the start of the faults. */
export interface PlannedFault {
  readonly at: number;
  readonly durationMs: number;
  readonly fault: Fault;
}

/** Options of {@link drawSchedule}. */
export interface ScheduleOptions {
  readonly seed: number;
  /** Fault threshold; the cluster has 3t + 1 servers. */
  readonly t: number;
  /** How many client hosts there are. */
  readonly clients: number;
  /** Faults start and end within this many milliseconds. */
  readonly durationMs: number;
  /** Fault kinds to draw from; default all. */
  readonly kinds?: readonly FaultKind[];
}

export const FAULT_KINDS: readonly FaultKind[] = ['isolate', 'clients-cut', 'bridge', 'pause', 'kill', 'one-way', 'client-pause'];

/**
 * Kinds that need more than namespaces: `power` and `blackout` need FUSE and lazyfs's Go
 * build, `disk` libfiu. `drawSchedule` draws them only when asked for; `pnpm nemesis`
 * asks for every kind unless told otherwise.
 */
export const OPT_IN_KINDS: readonly FaultKind[] = ['power', 'disk', 'disk-full', 'blackout'];

/** Kinds whose runs put the data directories on lazyfs. */
export const LAZYFS_KINDS: readonly FaultKind[] = ['power', 'disk-full', 'blackout'];

/** Every kind there is. */
export const ALL_FAULT_KINDS: readonly FaultKind[] = [...FAULT_KINDS, ...OPT_IN_KINDS];

/** How long each kind lasts (ms, inclusive range): pauses as long GC stalls, cuts long enough for timeouts to fire. */
const DURATION: Readonly<Record<FaultKind, readonly [number, number]>> = {
  isolate: [3000, 12_000],
  'clients-cut': [3000, 12_000],
  bridge: [5000, 15_000],
  pause: [2000, 10_000],
  kill: [1000, 8000],
  'one-way': [3000, 12_000],
  'client-pause': [1000, 8000],
  power: [1000, 8000],
  disk: [2000, 10_000],
  'disk-full': [3000, 12_000],
  blackout: [1000, 4000],
};

/** How often each kind is drawn, relatively. */
const WEIGHT: Readonly<Record<FaultKind, number>> = {
  isolate: 2,
  'clients-cut': 2,
  bridge: 1,
  pause: 2,
  kill: 2,
  'one-way': 1,
  'client-pause': 1,
  power: 2,
  disk: 2,
  'disk-full': 2,
  blackout: 1,
};

/**
 * Headroom the plan leaves after a fault on a server before another may start there: a
 * killed server needs a second or two to start again and a resumed one to drain what
 * waited, and the runner waits for either anyway (see run.ts), so this only keeps the
 * plan close to what happens.
 */
export const RECOVERY_MS = 2000;

/** The same after a blackout: every server starting at once, each mounting its disk again, takes longer. */
export const BLACKOUT_RECOVERY_MS = 6000;

/** Whether a fault makes its server faulty (spends budget). */
export function faultyServer(f: Fault): number | undefined {
  return f.kind === 'bridge' || f.kind === 'client-pause' || f.kind === 'blackout' ? undefined : f.server;
}

/** One line for logs. */
export function describeFault(f: Fault): string {
  switch (f.kind) {
    case 'isolate':
      return `isolate s${f.server}`;
    case 'clients-cut':
      return `cut s${f.server} from clients ${clientList(f.clients)}`;
    case 'bridge':
      return `bridge via s${f.bridge}: ${f.halves[0].map((s) => `s${s}`).join(',')} | ${f.halves[1].map((s) => `s${s}`).join(',')}`;
    case 'pause':
      return `pause s${f.server}`;
    case 'kill':
      return `kill -9 s${f.server}`;
    case 'one-way':
      return f.direction === 'to-clients'
        ? `drop s${f.server}'s packets to clients ${clientList(f.clients)}`
        : `drop packets of clients ${clientList(f.clients)} to s${f.server}`;
    case 'client-pause':
      return `pause client c${f.client}`;
    case 'power':
      return `power loss s${f.server}${f.again !== undefined ? `, again ${f.again} ms after it restarts` : ''}`;
    case 'disk':
      return `fail s${f.server}'s fsync (EIO)`;
    case 'disk-full':
      return `fill s${f.server}'s disk (ENOSPC)`;
    case 'blackout':
      return 'blackout: every server loses power at once';
  }
}

/**
 * Draws a schedule: faults one after another with gaps of 0.5–4 s, overlapping when the
 * budget allows (t ≥ 2, or a bridge beside a faulty server), never more than `t` faulty
 * servers at once, never two faults on one server and a blackout only while no server is
 * faulty, each over before `durationMs`.
 */
export function drawSchedule(options: ScheduleOptions): PlannedFault[] {
  const { t, clients, durationMs } = options;
  const n = 3 * t + 1;
  const prng = new Prng(options.seed);
  const kinds = options.kinds ?? FAULT_KINDS;
  if (kinds.length === 0) throw new Error('no fault kinds to draw from');
  const servers = Array.from({ length: n }, (_, i) => i + 1);
  const plan: PlannedFault[] = [];
  // Until when each server is busy with a fault (recovery included), and the bridge.
  const busyUntil = new Map<number, number>();
  let bridgeUntil = 0;
  const clientBusyUntil = new Map<number, number>();
  const allClients = Array.from({ length: clients }, (_, i) => i + 1);
  // All clients, or a proper subset: some clients see the server, others do not.
  const someClients = () =>
    (prng.chance(0.5) ? allClients : prng.shuffle(allClients).slice(0, 1 + prng.int(Math.max(1, clients - 1)))).sort(byNumber);
  let at = 500 + prng.int(1500);
  for (let guard = 0; guard < 10_000; guard++) {
    const kind = pickWeighted(prng, kinds);
    const [lo, hi] = DURATION[kind];
    const d = Math.min(prng.range(lo, hi), durationMs - at);
    if (d < lo) break;
    const busy = servers.filter((s) => (busyUntil.get(s) ?? 0) > at);
    let fault: Fault | undefined;
    if (kind === 'client-pause') {
      const free = allClients.filter((c) => (clientBusyUntil.get(c) ?? 0) <= at);
      if (free.length > 0) {
        const client = prng.pick(free);
        fault = { kind, client };
        clientBusyUntil.set(client, at + d + RECOVERY_MS);
      }
    } else if (kind === 'bridge') {
      if (bridgeUntil <= at) {
        const [bridge, ...rest] = prng.shuffle(servers);
        const cut = Math.floor(rest.length / 2);
        fault = { kind, bridge: bridge!, halves: [rest.slice(0, cut).sort(byNumber), rest.slice(cut).sort(byNumber)] };
        bridgeUntil = at + d;
      }
    } else if (kind === 'blackout') {
      if (busy.length === 0) {
        fault = { kind };
        for (const s of servers) busyUntil.set(s, at + d + BLACKOUT_RECOVERY_MS);
      }
    } else if (busy.length < t) {
      const server = prng.pick(servers.filter((s) => !busy.includes(s)));
      if (kind === 'clients-cut') fault = { kind, server, clients: someClients() };
      else if (kind === 'one-way')
        fault = { kind, server, clients: someClients(), direction: prng.chance(0.5) ? 'to-clients' : 'from-clients' };
      else if (kind === 'power') fault = { kind, server, ...(prng.chance(0.5) ? { again: prng.int(500) } : {}) };
      else fault = { kind, server };
      busyUntil.set(server, at + d + RECOVERY_MS);
    }
    if (fault) {
      plan.push({ at, durationMs: d, fault });
      at += 500 + prng.int(3500);
    } else {
      // Nothing of this kind fits now: move on to when the next server frees up.
      const next = Math.min(...[...busyUntil.values(), ...clientBusyUntil.values(), bridgeUntil].filter((u) => u > at));
      at = Number.isFinite(next) ? next : at + 500;
    }
    if (at >= durationMs) break;
  }
  return plan;
}

const byNumber = (a: number, b: number) => a - b;
const clientList = (clients: readonly number[]) => clients.map((c) => `c${c}`).join(',');

function pickWeighted(prng: Prng, kinds: readonly FaultKind[]): FaultKind {
  const total = kinds.reduce((a, k) => a + WEIGHT[k], 0);
  let x = prng.float() * total;
  for (const k of kinds) {
    x -= WEIGHT[k];
    if (x < 0) return k;
  }
  return kinds[kinds.length - 1]!;
}

/** The most servers faulty at any one instant of `plan` (counting each fault's recovery headroom), for checks. */
export function peakFaulty(plan: readonly PlannedFault[]): number {
  const edges: [number, number][] = [];
  for (const p of plan) {
    if (faultyServer(p.fault) === undefined) continue;
    edges.push([p.at, 1], [p.at + p.durationMs + RECOVERY_MS, -1]);
  }
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let peak = 0;
  for (const [, d] of edges) peak = Math.max(peak, (now += d));
  return peak;
}

/**
 * With power losses in a run: which server loses power moments after its first start
 * (`delayMs` after its /healthz first answers, before the clients connect), when LevelDB
 * has just created its database. Drawn from the seed apart from the schedule.
 */
export function drawBootPowerLoss(seed: number, t: number): { readonly server: number; readonly delayMs: number } {
  const prng = new Prng(seed ^ 0x5eed_b007);
  return { server: 1 + prng.int(3 * t + 1), delayMs: prng.int(300) };
}
