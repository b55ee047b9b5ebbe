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
   * The server's fsync and fdatasync fail with EIO (libfiu, `test/fiu.ts`): its next synced
   * batch fails, it acknowledges nothing more and exits (74); at the end of the fault the
   * failure point is turned off and the server restarted on the same data directory.
   */
  | { readonly kind: 'disk'; readonly server: number };

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

/** The kinds drawn by default. */
export const FAULT_KINDS: readonly FaultKind[] = ['isolate', 'clients-cut', 'bridge', 'pause', 'kill'];

/** Every kind, `disk` included: it needs libfiu and is drawn only when asked for (`--faults`). */
export const ALL_FAULT_KINDS: readonly FaultKind[] = [...FAULT_KINDS, 'disk'];

/** How long each kind lasts (ms, inclusive range): pauses as long GC stalls, cuts long enough for timeouts to fire. */
const DURATION: Readonly<Record<FaultKind, readonly [number, number]>> = {
  isolate: [3000, 12_000],
  'clients-cut': [3000, 12_000],
  bridge: [5000, 15_000],
  pause: [2000, 10_000],
  kill: [1000, 8000],
  disk: [2000, 10_000],
};

/** How often each kind is drawn, relatively. */
const WEIGHT: Readonly<Record<FaultKind, number>> = { isolate: 2, 'clients-cut': 2, bridge: 1, pause: 2, kill: 2, disk: 2 };

/**
 * Headroom the plan leaves after a fault on a server before another may start there: a
 * killed server needs a second or two to start again and a resumed one to drain what
 * waited, and the runner waits for either anyway (see run.ts), so this only keeps the
 * plan close to what happens.
 */
export const RECOVERY_MS = 2000;

/** Whether a fault makes its server faulty (spends budget). */
export function faultyServer(f: Fault): number | undefined {
  return f.kind === 'bridge' ? undefined : f.server;
}

/** One line for logs. */
export function describeFault(f: Fault): string {
  switch (f.kind) {
    case 'isolate':
      return `isolate s${f.server}`;
    case 'clients-cut':
      return `cut s${f.server} from clients ${f.clients.map((c) => `c${c}`).join(',')}`;
    case 'bridge':
      return `bridge via s${f.bridge}: ${f.halves[0].map((s) => `s${s}`).join(',')} | ${f.halves[1].map((s) => `s${s}`).join(',')}`;
    case 'pause':
      return `pause s${f.server}`;
    case 'kill':
      return `kill -9 s${f.server}`;
    case 'disk':
      return `fail s${f.server}'s fsync (EIO)`;
  }
}

/**
 * Draws a schedule: faults one after another with gaps of 0.5–4 s, overlapping when the
 * budget allows (t ≥ 2, or a bridge beside a faulty server), never more than `t` faulty
 * servers at once and never two faults on one server, each over before `durationMs`.
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
  let at = 500 + prng.int(1500);
  for (let guard = 0; guard < 10_000; guard++) {
    const kind = pickWeighted(prng, kinds);
    const [lo, hi] = DURATION[kind];
    const d = Math.min(prng.range(lo, hi), durationMs - at);
    if (d < lo) break;
    const busy = servers.filter((s) => (busyUntil.get(s) ?? 0) > at);
    let fault: Fault | undefined;
    if (kind === 'bridge') {
      if (bridgeUntil <= at) {
        const [bridge, ...rest] = prng.shuffle(servers);
        const cut = Math.floor(rest.length / 2);
        fault = { kind, bridge: bridge!, halves: [rest.slice(0, cut).sort(byNumber), rest.slice(cut).sort(byNumber)] };
        bridgeUntil = at + d;
      }
    } else if (busy.length < t) {
      const server = prng.pick(servers.filter((s) => !busy.includes(s)));
      if (kind === 'clients-cut') {
        const all = Array.from({ length: clients }, (_, i) => i + 1);
        // All clients, or a proper subset: some clients see the server, others do not.
        const some = prng.chance(0.5) ? all : prng.shuffle(all).slice(0, 1 + prng.int(Math.max(1, clients - 1)));
        fault = { kind, server, clients: some.sort(byNumber) };
      } else fault = { kind, server };
      busyUntil.set(server, at + d + RECOVERY_MS);
    }
    if (fault) {
      plan.push({ at, durationMs: d, fault });
      at += 500 + prng.int(3500);
    } else {
      // Nothing of this kind fits now: move on to when the next server frees up.
      const next = Math.min(...[...busyUntil.values(), bridgeUntil].filter((u) => u > at));
      at = Number.isFinite(next) ? next : at + 500;
    }
    if (at >= durationMs) break;
  }
  return plan;
}

const byNumber = (a: number, b: number) => a - b;

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
