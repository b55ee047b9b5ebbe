/**
 * PowerStore against M-ABD and an unreplicated single server, side by side in one run:
 * real server processes on loopback (LevelDB on disk, fsync on, and a series with
 * --unsafe-no-fsync), closed-loop clients in two forked worker processes, added step by
 * step until throughput stops growing. Systems take turns at every step, so load from
 * other users of the machine hits them alike. Then a per-stage profile (bench/profile).
 * With --net (lib/netns.ts) the same processes run on an emulated, bandwidth-shaped
 * network instead of loopback: a switched 1 Gbit/s LAN (`1gbit`), one shared 1 Gbit/s
 * link (`shared-1gbit`), 100 Mbit/s host links (`wan-100mbit`) or 1 Gbit/s servers with
 * clients on a 20 Mbit/s up, 100 Mbit/s down home uplink (`edge`); root only.
 *
 *   pnpm bench          the matrix below (~45 min)
 *   pnpm bench --net 1gbit   on the network: every size at t = 1, 256 KiB at t = 2, 3 (~20 min)
 *   pnpm bench:quick    t = 1, 4 KiB, 64 KiB and 256 KiB, read and write, fsync on; 256 KiB three times (~4 min)
 *   pnpm bench:quick --net 1gbit
 *   tsx --conditions=@powerstore/source bench/run.ts --t 1 --sizes 4k,1m --ops read --fsync on,off ...
 *
 * Writes bench/results/<out>.json, .md and <out>-throughput-latency.svg, where <out> is
 * `latest` (the full matrix; its chart is throughput-latency.svg), `quick` for --quick,
 * either followed by `-net-<profile>` with --net, or --out NAME.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT, SYSTEMS, TSX_EXEC_ARGV, startSystem, type RunningSystem, type SystemName } from './lib/clusters.js';
import { createNetwork, measureTcp, netProfile, type NetHost, type Network, type QdiscStat, type TcpRate } from './lib/netns.js';
import { connect } from '@powerstore/client';
import { writeReports, type BenchResults, type Cell, type ManyResult, type Row } from './lib/report.js';
import { median, percentile, round } from './lib/stats.js';
import { runProfile } from './profile/profile.js';
import type { KeyPattern, Op, RunRequest, RunResult } from './load/worker.js';

const SIZES: Record<string, number> = { '4k': 4096, '64k': 65536, '256k': 262144, '1m': 1048576, '4m': 4194304 };
/** `--quick`'s sizes, unless --sizes names others: 256 KiB three times, the small ones once (see matrix()). */
const QUICK_SIZES = ['4k', '64k', '256k'];

const { values: flags } = parseArgs({
  // `pnpm bench:quick -- --net 1gbit` hands the script a lone `--`: drop it.
  args: process.argv.slice(2).filter((a) => a !== '--'),
  options: {
    quick: { type: 'boolean', default: false },
    t: { type: 'string' },
    sizes: { type: 'string' },
    ops: { type: 'string' },
    keys: { type: 'string' },
    fsync: { type: 'string' },
    systems: { type: 'string' },
    ladder: { type: 'string' },
    repeats: { type: 'string' },
    'warmup-ms': { type: 'string' },
    'measure-ms': { type: 'string' },
    out: { type: 'string' },
    'no-profile': { type: 'boolean', default: false },
    /** PowerStore keys in the writer's namespace: values encrypted by the client (default: outside, as given). */
    encrypt: { type: 'boolean', default: false },
    /** putMany of this many 4 KiB values (0: none); by default 1000 in a run with a 4 KiB write cell at t = 1, fsync on. */
    many: { type: 'string' },
    /** What-if: clients send unmasked-equivalent frames (see bench/load/worker.ts). */
    'ws-zero-mask': { type: 'boolean', default: false },
    /**
     * The network (lib/netns.ts): loopback (default); lan (switched, unshaped); 1gbit
     * (switched, 1 Gbit/s per host each way); shared-1gbit (one 1 Gbit/s link for all);
     * wan-100mbit (switched, 100 Mbit/s per host each way); edge (switched: servers 1 Gbit/s,
     * client hosts, the load workers' and this process's, 20 Mbit/s up and 100 Mbit/s down).
     */
    net: { type: 'string', default: 'loopback' },
  },
});

const list = (s: string | undefined) =>
  s
    ?.split(',')
    .map((x) => x.trim())
    .filter(Boolean);
const quick = flags.quick;
const ladder = (list(flags.ladder) ?? (quick ? ['1', '2', '4', '8'] : ['1', '2', '4', '8', '16', '32'])).map(Number);
const warmupMs = Number(flags['warmup-ms'] ?? (quick ? 300 : 500));
const measureMs = Number(flags['measure-ms'] ?? (quick ? 1500 : 2000));
const systems = (list(flags.systems) ?? SYSTEMS) as SystemName[];
const netName = netProfile(flags.net).name; // fails on an unknown name before anything starts
/** The putMany row's values, and how many keys fly at once (putMany's bound is 1024). */
const MANY_VALUE_BYTES = 4096;
const MANY_CONCURRENCY = 64;
const MANY_REPEATS = 3;
const manyKeys = Number(flags.many ?? 1000);

/**
 * The matrix. The full cross product (3 t × 5 sizes × 3 mixes × 2 key patterns × 2 fsync
 * × 3 systems × a client ladder) would take hours on 2 cores; `pnpm bench` runs the
 * paper's main axes and samples the rest at 256 KiB, its default size.
 */
function matrix(): Cell[] {
  const cells: Cell[] = [];
  const add = (t: number, valueBytes: number, op: Op, keys: KeyPattern, fsync: boolean, repeats: number) => {
    if (!cells.some((c) => c.t === t && c.valueBytes === valueBytes && c.op === op && c.keys === keys && c.fsync === fsync)) {
      cells.push({ t, valueBytes, op, keys, fsync, repeats });
    }
  };
  const explicit = flags.t || flags.sizes || flags.ops || flags.keys || flags.fsync;
  if (quick || explicit) {
    const ts = (list(flags.t) ?? ['1']).map(Number);
    // --quick alone: the default size three times (the headline, as before), the small sizes
    // once each, as the full matrix samples them; --sizes or --repeats: every size alike.
    const sizes = (list(flags.sizes) ?? (quick ? QUICK_SIZES : ['256k'])).map((s) => SIZES[s.toLowerCase()] ?? Number(s));
    const ops = (list(flags.ops) ?? ['read', 'write']) as Op[];
    const keys = (list(flags.keys) ?? ['distinct']) as KeyPattern[];
    const fsyncs = (list(flags.fsync) ?? ['on']).map((f) => f === 'on');
    const repeatsOf = (valueBytes: number) => {
      if (flags.repeats !== undefined) return Number(flags.repeats);
      if (!quick) return 1;
      return flags.sizes !== undefined || valueBytes === 262144 ? 3 : 1;
    };
    for (const fsync of fsyncs)
      for (const t of ts)
        for (const valueBytes of sizes) for (const k of keys) for (const op of ops) add(t, valueBytes, op, k, fsync, repeatsOf(valueBytes));
    return cells;
  }
  const R = Number(flags.repeats ?? 3);
  if (netName !== 'loopback') {
    // On an emulated network, the paper's comparison: every size at t = 1 and the default
    // size at t = 2 and 3, fsync on, distinct keys (loopback's full matrix covers the rest).
    for (const valueBytes of Object.values(SIZES))
      for (const op of ['read', 'write'] as Op[]) add(1, valueBytes, op, 'distinct', true, valueBytes === 262144 ? R : 1);
    for (const t of [2, 3]) for (const op of ['read', 'write'] as Op[]) add(t, 262144, op, 'distinct', true, 1);
    return cells;
  }
  // Ordered so the most wanted results come first (each (t, fsync) group is written out as
  // soon as it is done): t = 1 with fsync, then t = 1 without, then t = 2 and 3.
  const sizes = Object.values(SIZES);
  for (const valueBytes of sizes)
    for (const op of ['read', 'write'] as Op[]) add(1, valueBytes, op, 'distinct', true, valueBytes === 262144 ? R : 1);
  add(1, 262144, 'mixed', 'distinct', true, 1);
  for (const op of ['read', 'write', 'mixed'] as Op[]) add(1, 262144, op, 'one', true, 1);
  for (const valueBytes of sizes) for (const op of ['read', 'write'] as Op[]) add(1, valueBytes, op, 'distinct', false, 1);
  for (const t of [2, 3]) {
    for (const valueBytes of sizes) for (const op of ['read', 'write'] as Op[]) add(t, valueBytes, op, 'distinct', true, 1);
    add(t, 262144, 'mixed', 'distinct', true, 1);
  }
  return cells;
}

// ---- workers ------------------------------------------------------------------------

const WORKERS = 2;
/** Load worker `w`'s host (1-based): a client host, which `--net edge` puts on a home uplink. */
const loadHost = (w: number) => net.host(`load${w}`, 'client');
let exiting = false;
const workers: ChildProcess[] = [];
let nextRequest = 1;
const pending = new Map<number, { ready: Set<number>; results: RunResult[]; onReady(): void; onDone(): void }>();

function startWorkers(): void {
  for (let w = 0; w < WORKERS; w++) {
    // What fork() does, spelled out, so that on an emulated network the worker can start
    // on its own host through `ip netns exec` (which keeps the IPC fd and the pid).
    const child = net.spawn(loadHost(w + 1), process.execPath, [...TSX_EXEC_ARGV, join(ROOT, 'bench/load/worker.ts')], {
      cwd: ROOT,
      env: { ...process.env, BENCH_WS_ZERO_MASK: flags['ws-zero-mask'] ? '1' : '0' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.once('exit', (code) => {
      if (exiting) return;
      console.error(`load worker ${w} exited (${code}); stopping`);
      process.exit(1); // lib/clusters.ts kills the servers on exit
    });
    child.on('message', (m: { type: 'ready'; id: number } | RunResult) => {
      const p = pending.get(m.id);
      if (!p) return;
      if (m.type === 'ready') {
        p.ready.add(w);
        p.onReady();
      } else {
        p.results.push(m);
        p.onDone();
      }
    });
    workers.push(child);
  }
}

/** One measurement: `clients` closed loops for warm-up + window, spread over the workers. */
async function measure(
  sys: RunningSystem,
  cell: Cell,
  clients: number,
): Promise<{ reads: number[]; writes: number[]; errors: number; firstError?: string }> {
  const id = nextRequest++;
  const share = workers
    .map((_, w) => Array.from({ length: clients }, (_, i) => i).filter((i) => i % WORKERS === w))
    .filter((s) => s.length > 0);
  const p = { ready: new Set<number>(), results: [] as RunResult[], onReady: () => {}, onDone: () => {} };
  pending.set(id, p);
  const allReady = new Promise<void>((r) => (p.onReady = () => p.ready.size === share.length && r()));
  const allDone = new Promise<void>((r) => (p.onDone = () => p.results.length === share.length && r()));
  share.forEach((mine, w) => {
    const req: RunRequest = {
      type: 'run',
      id,
      system: sys.system,
      urls: sys.urls,
      ...(sys.writer ? { writer: sys.writer } : {}),
      ...(flags.encrypt ? { encrypt: true } : {}),
      op: cell.op,
      valueBytes: cell.valueBytes,
      keys: cell.keys,
      clients: mine,
      warmupMs,
      measureMs,
    };
    workers[w]!.send(req);
  });
  await allReady;
  share.forEach((_, w) => workers[w]!.send({ type: 'go', id }));
  await allDone;
  pending.delete(id);
  const reads = p.results.flatMap((r) => r.reads);
  const writes = p.results.flatMap((r) => r.writes);
  const errors = p.results.reduce((a, r) => a + r.errors, 0);
  const firstError = p.results.find((r) => r.firstError)?.firstError;
  return { reads, writes, errors, ...(firstError ? { firstError } : {}) };
}

// ---- main ---------------------------------------------------------------------------

const cells = matrix();
const out = flags.out ?? (quick ? 'quick' : 'latest') + (netName === 'loopback' ? '' : `-net-${netName}`);
mkdirSync(join(ROOT, 'bench/results'), { recursive: true });
const started = Date.now();
const rows: Row[] = [];
const fmtTime = (ms: number) => `${Math.floor(ms / 60000)}m${String(Math.round((ms % 60000) / 1000)).padStart(2, '0')}s`;
const fmtSize = (b: number) => (b >= 1048576 ? `${b / 1048576} MiB` : `${b / 1024} KiB`);
// Rough cost model for the time-left estimate: one step ≈ warm-up + window + 1 s, ~4 steps per ladder.
const stepsPlanned = cells.reduce((a, c) => a + c.repeats * Math.min(ladder.length, 4) * systems.length, 0);
let stepsDone = 0;
const eta = () => {
  const elapsed = Date.now() - started;
  const rate = stepsDone > 0 ? elapsed / stepsDone : warmupMs + measureMs + 1000;
  return fmtTime(Math.max(0, stepsPlanned - stepsDone) * rate);
};

console.log(
  `bench: ${cells.length} cells × ${systems.join(', ')}; ladder ${ladder.join(',')} clients; window ${warmupMs}+${measureMs} ms; ${cpus().length} cores; network ${netName}`,
);
// Built before anything starts on it; closed in the finally below, and on exit or a
// signal by lib/netns.ts itself.
let net: Network;
try {
  net = createNetwork(netName);
} catch (e) {
  console.error(`bench: ${(e as Error).message}`);
  process.exit(1);
}
let linkCheck: TcpRate | undefined;
/** Where client links are asymmetric (`edge`), the check the other way: server → client. */
let linkCheckDown: TcpRate | undefined;
/** Qdisc counters after the link check: the results count the bench's traffic from here. */
let qdiscsAfterCheck: QdiscStat[] | undefined;

const groups = new Map<string, Cell[]>();
for (const c of cells) {
  const k = `${c.t}/${c.fsync}`;
  groups.set(k, [...(groups.get(k) ?? []), c]);
}

let cellNo = 0;
let many: ManyResult | undefined;
try {
  if (net.tbf) {
    console.log(
      `network ${netName}: ${net.profile.description}; tbf burst ${net.tbf.burstBytes} B, limit ${net.tbf.limitBytes} B; subnet ${net.subnet}`,
    );
    if (net.clientTbf)
      console.log(
        `client hosts: ${net.clientTbf.up.rateBit / 1e6} Mbit/s up (tbf burst ${net.clientTbf.up.burstBytes} B, limit ${net.clientTbf.up.limitBytes} B), ${net.clientTbf.down.rateBit / 1e6} Mbit/s down (burst ${net.clientTbf.down.burstBytes} B, limit ${net.clientTbf.down.limitBytes} B)`,
      );
    // About one second of bulk TCP between a worker's host and a server's, at the rate the
    // path should have: is the link what it says? Where client links are asymmetric, both ways.
    const [load1, ps1] = [loadHost(1), net.host('ps1')];
    const check = async (from: NetHost, to: NetHost, rateBit: number) => {
      const r = await measureTcp(net, [from], to, Math.round(rateBit / 8));
      console.log(
        `link check ${from.role} → ${to.role}: ${r.mbitPerSec} Mbit/s of TCP payload (${(r.bytes / 1e6).toFixed(1)} MB in ${r.ms} ms)`,
      );
      return r;
    };
    linkCheck = await check(load1, ps1, net.clientTbf?.up.rateBit ?? net.tbf.rateBit);
    if (net.clientTbf) linkCheckDown = await check(ps1, load1, net.clientTbf.down.rateBit);
    qdiscsAfterCheck = net.qdiscs();
  }
  startWorkers();
  for (const group of groups.values()) {
    const { t, fsync } = group[0]!;
    console.log(`\n== t = ${t}, fsync ${fsync ? 'on' : 'off'}: starting ${systems.join(', ')} servers`);
    const running = new Map<SystemName, RunningSystem>();
    for (const s of systems) running.set(s, await startSystem(s, t, fsync, net));
    try {
      for (const cell of group) {
        cellNo++;
        for (let rep = 1; rep <= cell.repeats; rep++) {
          const label = `[${cellNo}/${cells.length}] t=${t} ${fmtSize(cell.valueBytes)} ${cell.op} keys=${cell.keys} fsync=${fsync ? 'on' : 'off'}${cell.repeats > 1 ? ` rep ${rep}/${cell.repeats}` : ''}`;
          const best = new Map<SystemName, number>();
          const climbing = new Set(systems);
          for (const clients of ladder) {
            // Interleaved: every system measured at this client count before the next count.
            for (const s of systems) {
              if (!climbing.has(s)) continue;
              const r = await measure(running.get(s)!, cell, clients);
              stepsDone++;
              const all = [...r.reads, ...r.writes].sort((a, b) => a - b);
              const opsPerSec = all.length / (measureMs / 1000);
              const row: Row = {
                system: s,
                net: netName,
                op: cell.op,
                t,
                valueBytes: cell.valueBytes,
                clients,
                opsPerSec: round(opsPerSec, 1),
                mbPerSec: round((opsPerSec * cell.valueBytes) / 1e6, 2),
                p50Ms: round(percentile(all, 50)),
                p99Ms: round(percentile(all, 99)),
                fsync,
                keys: cell.keys,
                rep,
                errors: r.errors,
                ...(cell.op === 'mixed' ? { readP50Ms: round(median(r.reads)), writeP50Ms: round(median(r.writes)) } : {}),
              };
              rows.push(row);
              console.log(
                `${label} ${s.padEnd(10)} c=${String(clients).padStart(2)}: ${row.opsPerSec.toFixed(0).padStart(5)} op/s ${row.mbPerSec.toFixed(1).padStart(6)} MB/s p50 ${row.p50Ms} ms p99 ${row.p99Ms} ms${r.errors ? ` errors ${r.errors} (${r.firstError})` : ''}  | elapsed ${fmtTime(Date.now() - started)}, ~${eta()} left`,
              );
              const prev = best.get(s) ?? 0;
              // Stop climbing when another step adds < 5 % (from 4 clients on), or latency explodes.
              if (opsPerSec > prev) best.set(s, opsPerSec);
              if ((clients >= 4 && opsPerSec < prev * 1.05) || row.p50Ms > 5000) climbing.delete(s);
            }
            if (climbing.size === 0) break;
          }
        }
      }
      const ps = running.get('powerstore');
      if (ps && t === 1 && fsync && manyKeys > 0 && group.some((c) => c.valueBytes === MANY_VALUE_BYTES && c.op === 'write'))
        many = await measureMany(ps, manyKeys);
    } finally {
      for (const w of workers) for (const sys of running.values()) w.send({ type: 'drop', pool: sys.urls[0] });
      await Promise.all([...running.values()].map((s) => s.stop()));
    }
    // Partial results after every group, so an interrupted run still leaves its data.
    writeReports(join(ROOT, 'bench/results'), out, { meta: { ...meta(), partial: true }, rows, ...(many ? { many } : {}) });
  }

  let profile: BenchResults['profile'];
  if (!flags['no-profile']) {
    console.log('\n== profile: per-stage time of single operations, t = 1, 256 KiB, fsync on');
    profile = await runProfile({ t: 1, valueBytes: 262144, ops: quick ? 15 : 30, net, log: (s) => console.log(s) });
  }

  const results: BenchResults = {
    meta: meta(),
    rows,
    ...(profile ? { profile } : {}),
    ...(many ? { many } : {}),
  };
  const written = writeReports(join(ROOT, 'bench/results'), out, results);
  console.log(`\nwrote ${written.join(', ')} in ${fmtTime(Date.now() - started)}`);
} finally {
  exiting = true;
  const exited = workers.map(
    (w) => new Promise<void>((r) => (w.exitCode !== null || w.signalCode !== null ? r() : w.once('exit', () => r()))),
  );
  for (const w of workers) if (w.connected) w.send({ type: 'exit' });
  // Workers leave their namespaces before those go (bounded: they exit on 'exit' or disconnect).
  await Promise.race([Promise.all(exited), new Promise((r) => setTimeout(r, 5000))]);
  net.close();
}

/**
 * One client's putMany of `keys` fresh 4 KiB values, from this process (host `bench`, a
 * client host), three times after a warm-up of a tenth as many: the keys/s of each.
 */
async function measureMany(sys: RunningSystem, keys: number): Promise<ManyResult> {
  console.log(`\n== putMany: ${keys} values of ${fmtSize(MANY_VALUE_BYTES)}, ${MANY_CONCURRENCY} in flight, t = ${sys.t}`);
  const store = await connect({ cluster: sys.writer!.cluster, identity: sys.writer!.identity, allowInsecure: true });
  try {
    const value = new Uint8Array(MANY_VALUE_BYTES).fill(7);
    const entries = (round: string, count: number) => Array.from({ length: count }, (_, i) => [`bench-many/${round}/${i}`, value] as const);
    await store.putMany(entries('warm-up', Math.ceil(keys / 10)), { concurrency: MANY_CONCURRENCY });
    const repKeysPerSec: number[] = [];
    let failed = 0;
    for (let rep = 1; rep <= MANY_REPEATS; rep++) {
      const t0 = performance.now();
      const r = await store.putMany(entries(String(rep), keys), { concurrency: MANY_CONCURRENCY });
      const perSec = round(keys / ((performance.now() - t0) / 1000), 1);
      repKeysPerSec.push(perSec);
      failed += r.failed.length;
      console.log(
        `putMany rep ${rep}/${MANY_REPEATS}: ${perSec} keys/s${r.failed.length ? `, ${r.failed.length} failed (${r.failed[0]!.error.message})` : ''}`,
      );
    }
    return {
      net: netName,
      t: sys.t,
      keys,
      valueBytes: MANY_VALUE_BYTES,
      concurrency: MANY_CONCURRENCY,
      repKeysPerSec,
      keysPerSec: round(median(repKeysPerSec), 1),
      failed,
    };
  } finally {
    store.close();
  }
}

function meta(): Record<string, unknown> {
  return {
    invocation: process.env['npm_lifecycle_event']?.startsWith('bench')
      ? `pnpm ${process.env['npm_lifecycle_event']}`
      : 'tsx --conditions=@powerstore/source bench/run.ts',
    command:
      process.argv
        .slice(2)
        .filter((a) => a !== '--')
        .join(' ') || '(full matrix)',
    started: new Date(started).toISOString(),
    finished: new Date().toISOString(),
    node: process.version,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? '',
    memGiB: round(totalmem() / 2 ** 30, 1),
    warmupMs,
    measureMs,
    ladder,
    mbDefinition: 'MB = 10^6 bytes of values per second (payload, not wire bytes)',
    net: { ...net.describe(qdiscsAfterCheck), ...(linkCheck ? { linkCheck } : {}), ...(linkCheckDown ? { linkCheckDown } : {}) },
    ...(flags['ws-zero-mask']
      ? { wsZeroMask: 'WHAT-IF: client frames sent with an all-zero WebSocket mask (ws skips masking), standing in for native masking' }
      : {}),
  };
}
