/**
 * Rebuild of a lost disk on a real cluster (issue 24): 3t + 1 `powerstore-server`
 * processes (t = 1, loopback, fsync on) filled with `--fill` bytes of values of
 * `--min-value`..`--max-value` bytes; then server 4 is stopped, its data directory deleted,
 * and it is started again on an empty one, which it rebuilds from its peers (catch-up).
 *
 * Three phases, each with its own numbers:
 *
 * 1. **baseline**: honest clients (closed loops, `--clients`, 80 % reads / 20 % writes of
 *    `--load-value` bytes, each on a key of its own) for `--load-seconds`, nothing else;
 * 2. **rebuild alone**: server 4 wiped and rebuilt with no client load;
 * 3. **rebuild under load**: server 4 wiped again and rebuilt while the same clients run;
 *    their throughput and latency are counted over the rebuild's own window.
 *
 * The rebuild rate is the fragment bytes server 4 stored (its catch-up pass's
 * `bytesRepaired`) over the pass's wall time; MB = 10⁶ bytes.
 *
 *   pnpm bench:rebuild                              # quick: 256 MiB
 *   pnpm bench:rebuild --fill 2GiB                  # the full run (the fill takes minutes)
 *   pnpm bench:rebuild --heal-bytes-per-sec 67108864 --heal-concurrency 2
 *
 * Writes bench/results/<out>.{json,md} (default `rebuild`). The cluster's directory is
 * deleted afterwards, whether the run succeeds or not.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect, Identity, type Store } from '@powerstore/client';
import { ensureBuiltProjects } from '../../test/server/harness.js';
import { parseSize } from '../../test/cli/large-transfer.js';
import { freeBasePort } from '../../test/ports.js';
import { DEFAULT_CATCH_UP } from '../../packages/server/src/heal.js';
import { SERVER_CLI, track } from '../lib/clusters.js';
import { percentile, round } from '../lib/stats.js';

const { values: flags } = parseArgs({
  options: {
    fill: { type: 'string', default: '256MiB' },
    'min-value': { type: 'string', default: '1MiB' },
    'max-value': { type: 'string', default: '4MiB' },
    clients: { type: 'string', default: '2' },
    'load-value': { type: 'string', default: '256KiB' },
    'load-seconds': { type: 'string', default: '20' },
    'heal-bytes-per-sec': { type: 'string' },
    /** The rebuilds under client load, one per rate (the rebuilt server's --heal-bytes-per-sec): 'default', 0 (no limit) or a size. */
    'loaded-rates': { type: 'string', default: 'default,16MiB' },
    'heal-concurrency': { type: 'string' },
    /** Rebuilds alone, one after another on the same fill; the table shows the median (by MB/s), the JSON every one. */
    'alone-runs': { type: 'string', default: '1' },
    fsync: { type: 'string', default: 'on' },
    out: { type: 'string', default: 'rebuild' },
    /** More `start` flags for the rebuilt server, space-separated (e.g. "--log-level debug"). */
    'server-args': { type: 'string' },
    /** Keep the cluster's directory (servers' logs and data) instead of deleting it. */
    keep: { type: 'boolean', default: false },
    /** More Node flags for the rebuilt server, space-separated (e.g. "--trace-gc"). */
    'node-args': { type: 'string' },
    /** Write V8 CPU profiles of every server into this directory (node --cpu-prof). */
    profile: { type: 'string' },
  },
});
const fillBytes = parseSize(flags.fill);
const minValue = parseSize(flags['min-value']);
const maxValue = parseSize(flags['max-value']);
const clients = Number(flags.clients);
const loadValue = parseSize(flags['load-value']);
const loadSeconds = Number(flags['load-seconds']);
const fsync = flags.fsync !== 'off';
// The rebuild alone runs without a rate limit unless one is given: it shows what the servers can do.
const healArgs = [
  '--heal-bytes-per-sec',
  flags['heal-bytes-per-sec'] ? String(parseSize(flags['heal-bytes-per-sec'])) : '0',
  ...(flags['heal-concurrency'] ? ['--heal-concurrency', flags['heal-concurrency']] : []),
  ...(flags['server-args'] ? flags['server-args'].split(/\s+/).filter(Boolean) : []),
];
if (!(fillBytes > 0 && minValue > 0 && maxValue >= minValue))
  throw new Error('--fill, --min-value, --max-value must be positive, min ≤ max');
if (!(Number.isInteger(clients) && clients >= 1 && loadSeconds > 0)) throw new Error('--clients ≥ 1 and --load-seconds > 0');

const T = 1;
const N = 3 * T + 1;
const REBUILT = N; // the server whose disk is "lost"
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const mb = (bytes: number) => bytes / 1e6;
const log = (line: string) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`);

await ensureBuiltProjects(['packages/server']);
const loadStart = loadavg()[0]!;
const dir = mkdtempSync(join(tmpdir(), 'powerstore-bench-rebuild-'));
const children = new Map<number, ChildProcess>();

interface StatusJson {
  keys: number;
  entries: number;
  bytes: number;
  heal?: {
    catchUp: {
      state: string;
      rebuilding: boolean;
      lastPass?: {
        started: string;
        finished: string;
        seconds: number;
        keysChecked: number;
        writesRepaired: number;
        bytesRepaired: number;
        failures: Record<string, number>;
      };
    };
  };
}

const base = await freeBasePort(N);
const url = (id: number) => `http://127.0.0.1:${base + id - 1}`;

async function status(id: number): Promise<StatusJson> {
  return (await (await fetch(`${url(id)}/status`, { signal: AbortSignal.timeout(5000) })).json()) as StatusJson;
}

async function start(id: number, extra: readonly string[] = []): Promise<void> {
  const out = openSync(join(dir, `server-${id}.log`), 'a');
  const args = [SERVER_CLI, 'start', '--config', join(dir, `server-${id}.json`), '--data', join(dir, `data-${id}`), '--log-level', 'warn'];
  if (!fsync) args.push('--unsafe-no-fsync');
  const prof = flags.profile
    ? ['--cpu-prof', '--cpu-prof-dir', flags.profile, '--cpu-prof-name', `server-${id}-${Date.now()}.cpuprofile`]
    : [];
  const nodeArgs = id === REBUILT && flags['node-args'] ? flags['node-args'].split(/\s+/).filter(Boolean) : [];
  const child = track(spawn(process.execPath, [...nodeArgs, ...prof, ...args, ...extra], { stdio: ['ignore', out, out] }));
  closeSync(out);
  children.set(id, child);
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`server ${id} exited; see ${dir}/server-${id}.log`);
    try {
      if ((await fetch(`${url(id)}/healthz`, { signal: AbortSignal.timeout(1000) })).ok) return;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`server ${id} did not start`);
    await sleep(50);
  }
}

async function stop(id: number): Promise<void> {
  const child = children.get(id);
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await exited;
  children.delete(id);
}

/** Closed loops: 80 % reads, 20 % writes, each client on its own key, until `until()` says stop. */
async function load(stores: readonly Store[], value: Uint8Array, until: () => boolean) {
  const samples: { at: number; ms: number; read: boolean }[] = [];
  let errors = 0;
  let firstError: string | undefined;
  await Promise.all(
    stores.map(async (store, i) => {
      const key = `load/c${i}`;
      while (!until()) {
        const read = Math.random() < 0.8;
        const t0 = performance.now();
        try {
          if (read) {
            const got = await store.get(key);
            if (got?.length !== value.length) throw new Error(`read ${got?.length ?? 'nothing'} bytes`);
          } else await store.put(key, value);
          samples.push({ at: Date.now(), ms: performance.now() - t0, read });
        } catch (err) {
          errors++;
          firstError ??= (err as Error).message;
          await sleep(20);
        }
      }
    }),
  );
  return { samples, errors, firstError };
}

interface LoadNumbers {
  readonly seconds: number;
  readonly ops: number;
  readonly opsPerSec: number;
  readonly mbPerSec: number;
  readonly p50Ms: number;
  readonly p99Ms: number;
  readonly readP99Ms: number;
  readonly writeP99Ms: number;
  readonly errors: number;
}

function summarize(samples: readonly { at: number; ms: number; read: boolean }[], from: number, to: number, errors: number): LoadNumbers {
  const inside = samples.filter((s) => s.at >= from && s.at <= to);
  const sorted = (xs: number[]) => xs.sort((a, b) => a - b);
  const all = sorted(inside.map((s) => s.ms));
  const seconds = (to - from) / 1000;
  return {
    seconds: round(seconds, 1),
    ops: inside.length,
    opsPerSec: round(inside.length / seconds, 1),
    mbPerSec: round(mb(inside.length * loadValue) / seconds, 1),
    p50Ms: round(percentile(all, 50), 1),
    p99Ms: round(percentile(all, 99), 1),
    readP99Ms: round(percentile(sorted(inside.filter((s) => s.read).map((s) => s.ms)), 99), 1),
    writeP99Ms: round(percentile(sorted(inside.filter((s) => !s.read).map((s) => s.ms)), 99), 1),
    errors,
  };
}

interface RebuildNumbers {
  readonly seconds: number;
  readonly startToCaughtUpSeconds: number;
  readonly keys: number;
  readonly writesRepaired: number;
  readonly fragmentBytes: number;
  readonly mbPerSec: number;
  readonly failures: Record<string, number>;
  readonly started: number;
  readonly finished: number;
  /** CPU seconds per GB (10⁹ bytes) of fragments stored, of the rebuilt server and of its peers together. */
  readonly cpuPerGb: { readonly rebuilt: number; readonly peers: number };
}

/** CPU seconds (user + system) server `id`'s process has used, from /proc. */
function cpuSeconds(id: number): number {
  const pid = children.get(id)?.pid;
  if (!pid) return 0;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** CPU seconds per thread name (`node`, `libuv-worker`, LevelDB's background thread, …) of server `id`, from /proc. */
function threadCpu(id: number): Record<string, number> {
  const pid = children.get(id)?.pid;
  const out: Record<string, number> = {};
  if (!pid) return out;
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
      const name = `${stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'))}/${tid === String(pid) ? 'main' : tid}`;
      const fields = stat.slice(stat.lastIndexOf(') ') + 2).split(' ');
      const cpu = (Number(fields[11]) + Number(fields[12])) / 100;
      if (cpu >= 0.05) out[name] = round(cpu, 2);
    }
  } catch {
    // the process is gone
  }
  return out;
}

/** Stops server 4, deletes its data, starts it again and waits for its rebuild to end. */
async function rebuild(args: readonly string[] = healArgs): Promise<RebuildNumbers> {
  await stop(REBUILT);
  rmSync(join(dir, `data-${REBUILT}`), { recursive: true, force: true });
  const spawned = Date.now();
  const peersBefore = [1, 2, 3].reduce((sum, id) => sum + cpuSeconds(id), 0);
  await start(REBUILT, args);
  for (;;) {
    const s = await status(REBUILT);
    const c = s.heal?.catchUp;
    if (c && !c.rebuilding && c.lastPass) {
      const p = c.lastPass;
      const gb = p.bytesRepaired / 1e9;
      const peers = [1, 2, 3].reduce((sum, id) => sum + cpuSeconds(id), 0) - peersBefore;
      log(`  CPU s by thread: rebuilt ${JSON.stringify(threadCpu(REBUILT))}; peer 1 ${JSON.stringify(threadCpu(1))}`);
      return {
        cpuPerGb: { rebuilt: round(cpuSeconds(REBUILT) / gb, 1), peers: round(peers / gb, 1) },
        seconds: round(p.seconds, 2),
        startToCaughtUpSeconds: round((Date.now() - spawned) / 1000, 2),
        keys: p.keysChecked,
        writesRepaired: p.writesRepaired,
        fragmentBytes: p.bytesRepaired,
        mbPerSec: round(mb(p.bytesRepaired) / p.seconds, 1),
        failures: p.failures,
        started: Date.parse(p.started),
        finished: Date.parse(p.finished),
      };
    }
    if (Date.now() - spawned > 3_600_000) throw new Error('the rebuild took over an hour');
    await sleep(200);
  }
}

let result: Record<string, unknown>;
const stores: Store[] = [];
try {
  const init = spawnSync(process.execPath, [SERVER_CLI, 'init', '--t', String(T), '--dir', dir, '--base-port', String(base)], {
    encoding: 'utf8',
  });
  if (init.status !== 0) throw new Error(`init failed: ${init.stderr}`);
  for (let id = 1; id <= N; id++) await start(id, id === REBUILT ? healArgs : []);
  const cluster = JSON.parse(readFileSync(join(dir, 'cluster.json'), 'utf8')) as object;
  const identity = await Identity.fromJSON(JSON.parse(readFileSync(join(dir, 'admin.json'), 'utf8')));
  const open = () => connect({ cluster, identity, timeoutMs: 120_000 });

  // ---- fill ----------------------------------------------------------------------------
  log(`filling with ${mb(fillBytes).toFixed(0)} MB of values of ${minValue}..${maxValue} bytes`);
  const writers = await Promise.all(Array.from({ length: 4 }, open));
  stores.push(...writers);
  const pattern = new Uint8Array(randomBytes(maxValue + 65536));
  let filled = 0;
  let keys = 0;
  const fillStarted = performance.now();
  await Promise.all(
    writers.map(async (w) => {
      while (filled < fillBytes) {
        const size = minValue + Math.floor(Math.random() * (maxValue - minValue + 1));
        const i = keys++;
        filled += size;
        // A distinct value per key: a window of the random pattern, its first bytes the key number.
        const value = pattern.slice(i % 65536, (i % 65536) + size);
        new DataView(value.buffer).setUint32(0, i);
        await w.put(`fill/${i}`, value);
        if (i % 100 === 0) log(`  ${keys} keys, ${mb(filled).toFixed(0)} MB`);
      }
    }),
  );
  const fillSeconds = (performance.now() - fillStarted) / 1000;
  log(`filled ${keys} keys, ${mb(filled).toFixed(0)} MB in ${fillSeconds.toFixed(1)} s`);

  // ---- honest clients ------------------------------------------------------------------
  const loaders = await Promise.all(Array.from({ length: clients }, open));
  stores.push(...loaders);
  const value = new Uint8Array(randomBytes(loadValue));
  await Promise.all(loaders.map((s, i) => s.put(`load/c${i}`, value)));

  // A baseline right before each rebuild under load: other work on a shared machine comes and goes.
  const measureBaseline = async () => {
    log(`baseline: ${clients} clients for ${loadSeconds} s`);
    const baseStart = Date.now() + 2000; // 2 s of warm-up
    const baseEnd = baseStart + loadSeconds * 1000;
    const baseline = await load(loaders, value, () => Date.now() > baseEnd);
    const numbers = summarize(baseline.samples, baseStart, baseEnd, baseline.errors);
    log(`  ${JSON.stringify(numbers)}`);
    return numbers;
  };

  const aloneRuns: RebuildNumbers[] = [];
  for (let i = 0; i < Math.max(1, Number(flags['alone-runs'])); i++) {
    log('rebuild alone: server 4 wiped and restarted');
    aloneRuns.push(await rebuild());
    log(`  ${JSON.stringify(aloneRuns.at(-1))}`);
  }
  const alone = [...aloneRuns].sort((a, b) => a.mbPerSec - b.mbPerSec)[Math.floor((aloneRuns.length - 1) / 2)]!;
  if (aloneRuns.length > 1) {
    const med = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]!;
    log(
      `rebuild alone, ${aloneRuns.length} runs: MB/s ${aloneRuns.map((r) => r.mbPerSec).join(' ')} (median ${alone.mbPerSec}); ` +
        `CPU s/GB rebuilt median ${med(aloneRuns.map((r) => r.cpuPerGb.rebuilt))}, peers median ${med(aloneRuns.map((r) => r.cpuPerGb.peers))}`,
    );
  }

  const underLoad: {
    rate: string;
    rebuild: RebuildNumbers;
    baseline: LoadNumbers;
    clients: LoadNumbers;
    p99Ratio: number;
    opsRatio: number;
  }[] = [];
  for (const rate of flags['loaded-rates']
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    const args = [...healArgs.filter((_, i, a) => a[i] !== '--heal-bytes-per-sec' && a[i - 1] !== '--heal-bytes-per-sec')];
    if (rate !== 'default') args.push('--heal-bytes-per-sec', String(parseSize(rate)));
    const baselineNumbers = await measureBaseline();
    log(`rebuild under load, --heal-bytes-per-sec ${rate}`);
    const finished = { yes: false };
    const loaded = load(loaders, value, () => finished.yes);
    await sleep(2000);
    const rebuilt = await rebuild(args).finally(() => (finished.yes = true));
    const during = await loaded;
    const clientsDuring = summarize(during.samples, rebuilt.started, rebuilt.finished, during.errors);
    log(`  rebuild ${JSON.stringify(rebuilt)}`);
    log(`  clients ${JSON.stringify(clientsDuring)}`);
    underLoad.push({
      rate: rate === 'default' ? 'default' : `${parseSize(rate)}`,
      rebuild: rebuilt,
      baseline: baselineNumbers,
      clients: clientsDuring,
      p99Ratio: round(clientsDuring.p99Ms / baselineNumbers.p99Ms, 2),
      opsRatio: round(clientsDuring.opsPerSec / baselineNumbers.opsPerSec, 2),
    });
  }
  const after = await Promise.all(Array.from({ length: N }, (_, i) => status(i + 1)));
  result = {
    environment: {
      date: new Date().toISOString(),
      node: process.version,
      cpus: `${cpus().length} × ${cpus()[0]?.model ?? '?'}`,
      memory: `${Math.round(totalmem() / 2 ** 30)} GiB`,
      t: T,
      servers: N,
      fsync,
      heal: healArgs.length ? healArgs.join(' ') : 'defaults',
      // Other work on the machine: the 1-minute load average at the start and at the end.
      loadAverage: [round(loadStart, 1), round(loadavg()[0]!, 1)],
    },
    fill: { keys, bytes: filled, seconds: round(fillSeconds, 1), mbPerSec: round(mb(filled) / fillSeconds, 1) },
    load: { clients, valueBytes: loadValue, reads: 0.8 },
    rebuildAlone: alone,
    ...(aloneRuns.length > 1 ? { rebuildAloneRuns: aloneRuns } : {}),
    underLoad,
    serversAfter: after.map((s, i) => ({ id: i + 1, keys: s.keys, entries: s.entries, bytes: s.bytes, state: s.heal?.catchUp.state })),
  };
} finally {
  for (const s of stores) s.close();
  await Promise.all([...children.keys()].map(stop));
  if (flags.keep) console.log(`kept ${dir}`);
  else rmSync(dir, { recursive: true, force: true });
}

const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'results');
writeFileSync(join(out, `${flags.out}.json`), JSON.stringify(result, null, 2) + '\n');
const r = result as {
  environment: Record<string, unknown>;
  fill: { keys: number; bytes: number; seconds: number; mbPerSec: number };
  rebuildAlone: RebuildNumbers;
  underLoad: { rate: string; rebuild: RebuildNumbers; baseline: LoadNumbers; clients: LoadNumbers; p99Ratio: number; opsRatio: number }[];
};
const rateText = (rate: string) =>
  rate === 'default'
    ? `default (${DEFAULT_CATCH_UP.bytesPerSec / 2 ** 20} MiB/s)`
    : rate === '0'
      ? 'unlimited'
      : `${(Number(rate) / 2 ** 20).toFixed(0)} MiB/s`;
const rb = (x: RebuildNumbers) =>
  `${x.keys} | ${x.writesRepaired} | ${mb(x.fragmentBytes).toFixed(0)} | ${x.seconds} | **${x.mbPerSec}** | ${x.startToCaughtUpSeconds} | ${x.cpuPerGb.rebuilt} / ${x.cpuPerGb.peers} | ${Object.keys(x.failures).length ? JSON.stringify(x.failures) : 'none'}`;
const cl = (x: LoadNumbers) =>
  `${x.seconds} | ${x.ops} | ${x.opsPerSec} | ${x.mbPerSec} | ${x.p50Ms} | **${x.p99Ms}** | ${x.readP99Ms} | ${x.writeP99Ms} | ${x.errors}`;
const md = [
  `# Rebuild of a lost disk (\`pnpm bench:rebuild --fill ${flags.fill}\`)`,
  '',
  `${String(r.environment.date)}: t = ${T} (${N} servers), loopback, fsync ${fsync ? 'on' : 'off'}, Node ${String(r.environment.node)}, ${String(r.environment.cpus)}, ${String(r.environment.memory)}; catch-up settings of the rebuilt server: ${String(r.environment.heal)}. ` +
    `Load average of the machine (other work included) at the start and the end: ${(r.environment.loadAverage as number[]).join(' and ')}.`,
  `Filled with ${r.fill.keys} values of ${minValue / 2 ** 20}–${maxValue / 2 ** 20} MiB, ${mb(r.fill.bytes).toFixed(0)} MB, in ${r.fill.seconds} s (${r.fill.mbPerSec} MB/s of values).`,
  `Then server ${REBUILT} was stopped, its data directory deleted, and it was started on an empty one; it rebuilt its fragment of every value from its peers.`,
  "Rebuild rate = fragment bytes it stored / its catch-up pass's wall time (MB = 10⁶ bytes); it reads about t + 1 = 2 times that from the peers.",
  `Honest clients: ${clients} closed loops, 80 % reads / 20 % writes of ${loadValue / 1024} KiB on keys of their own; "during" counts only operations that ended inside the rebuild's pass.`,
  '',
  '| rebuild | keys checked | writes repaired | fragment MB stored | pass s | MB/s | start → caught up s | CPU s per GB: rebuilt / peers | failures |',
  '|---|---:|---:|---:|---:|---:|---:|---:|---|',
  `| alone, rate ${rateText(healArgs[1]!)} | ${rb(r.rebuildAlone)} |`,
  ...r.underLoad.map((u) => `| under client load, rate ${rateText(u.rate)} | ${rb(u.rebuild)} |`),
  '',
  '| honest clients | window s | ops | ops/s | MB/s | p50 ms | p99 ms | read p99 ms | write p99 ms | errors |',
  '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ...r.underLoad.flatMap((u) => [
    `| without a rebuild, just before | ${cl(u.baseline)} |`,
    `| during the rebuild at rate ${rateText(u.rate)} | ${cl(u.clients)} |`,
  ]),
  '',
  ...r.underLoad.map(
    (u) => `During the rebuild at rate ${rateText(u.rate)}: p99 ${u.p99Ratio}× and throughput ${u.opsRatio}× the values without it.`,
  ),
  '',
  `Targets: rebuild ≥ 50 MB/s of fragment data; clients' p99 during it ≤ 2× without it. The rate is the rebuilt server's \`--heal-bytes-per-sec\` (bytes read from its peers; the default is ${DEFAULT_CATCH_UP.bytesPerSec / 2 ** 20} MiB/s; 0 = no limit). ` +
    'CPU s per GB: CPU seconds (user + system, all threads, from /proc) per 10⁹ bytes of fragments stored, of the rebuilt server (its start-up included) and of its three peers together; under client load both include serving the clients.',
  '',
].join('\n');
writeFileSync(join(out, `${flags.out}.md`), md);
console.log(`\n${md}\nwrote ${join(out, `${flags.out}.md`)} and ${flags.out}.json`);
