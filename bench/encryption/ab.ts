/**
 * What encryption costs a whole operation: one client, one operation at a time, against a
 * real 4-server cluster (t = 1, fsync on), taking turns between the same value stored
 * three ways — outside every namespace (stored as given, as before encryption), in a
 * namespace `{ public: true }` (the envelope, no cipher) and encrypted — so a shared
 * machine's noise hits all three alike. Reports median and p90 per operation; then
 * throughput with `--clients` concurrent operations (one store, as an application has),
 * the modes taking turns for `--rounds` rounds: the median round's operations per second.
 *
 *   pnpm exec tsx --conditions=@powerstore/source bench/encryption/ab.ts [--bytes 262144] [--reads 300] [--writes 150] [--clients 4] [--rounds 8]
 *
 * Appends its table to bench/results/encryption-ab.md.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect, Identity, type PutOptions } from '@powerstore/client';
import { CliCluster, ensureBuilt } from '../../test/server/harness.js';

const { values: flags } = parseArgs({
  options: {
    bytes: { type: 'string', default: '262144' },
    reads: { type: 'string', default: '300' },
    writes: { type: 'string', default: '150' },
    clients: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '8' },
  },
});
const bytes = Number(flags.bytes);

await ensureBuilt();
const cluster = await CliCluster.create(1);
await cluster.startAll();
try {
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(cluster.dir, 'admin.json'), 'utf8')));
  const store = await connect({ cluster: cluster.clusterJson(), identity: admin });
  const value = new Uint8Array(bytes);
  for (let o = 0; o < bytes; o += 65_536) crypto.getRandomValues(value.subarray(o, Math.min(bytes, o + 65_536)));
  const modes: [string, string, PutOptions][] = [
    ['outside namespaces (as given)', 'bench/ab', {}],
    ['public (envelope only)', `${admin.namespace}bench/ab-public`, { public: true }],
    ['encrypted', `${admin.namespace}bench/ab-encrypted`, {}],
  ];
  for (const [, key, options] of modes) await store.put(key, value, options);
  const samples = new Map(modes.map(([name]) => [name, { get: [] as number[], put: [] as number[] }]));
  // Warm-up, then turns: every mode once per turn.
  for (let i = 0; i < 20; i++) for (const [, key] of modes) await store.get(key);
  for (let i = 0; i < Number(flags.reads); i++) {
    for (const [name, key] of modes) {
      const t0 = performance.now();
      const got = await store.get(key);
      samples.get(name)!.get.push(performance.now() - t0);
      if (got?.length !== bytes) throw new Error(`${name}: read ${got?.length} bytes`);
    }
  }
  for (let i = 0; i < Number(flags.writes); i++) {
    for (const [name, key, options] of modes) {
      const t0 = performance.now();
      await store.put(key, value, options);
      samples.get(name)!.put.push(performance.now() - t0);
    }
  }
  // Throughput: `clients` loops at once on keys of their own, each mode in turn per round.
  const clients = Number(flags.clients);
  const keyOf = (key: string, j: number) => `${key}/c${j}`;
  for (const [, key, options] of modes) for (let j = 0; j < clients; j++) await store.put(keyOf(key, j), value, options);
  const rates = new Map(
    modes.map(([name]) => [name, { get: [] as number[], put: [] as number[], getCpu: [] as number[], putCpu: [] as number[] }]),
  );
  // Client CPU per operation (user + system, this process): what encryption adds to the
  // client, far less disturbed by other jobs on the machine than wall-clock rates.
  const burst = async (op: 'get' | 'put', key: string, options: PutOptions, perClient: number): Promise<[number, number]> => {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: clients }, async (_, j) => {
        for (let i = 0; i < perClient; i++) {
          if (op === 'get') await store.get(keyOf(key, j));
          else await store.put(keyOf(key, j), value, options);
        }
      }),
    );
    const ops = clients * perClient;
    const cpu = process.cpuUsage(cpu0);
    return [ops / ((performance.now() - t0) / 1000), (cpu.user + cpu.system) / 1000 / ops];
  };
  for (let r = 0; r < Number(flags.rounds); r++) {
    // Each round starts with another mode, so what one leaves behind (garbage to collect)
    // does not always land on the same next one.
    const turn = [...modes.slice(r % modes.length), ...modes.slice(0, r % modes.length)];
    for (const [name, key, options] of turn) {
      const [rate, cpu] = await burst('get', key, options, 25);
      rates.get(name)!.get.push(rate);
      rates.get(name)!.getCpu.push(cpu);
    }
    for (const [name, key, options] of turn) {
      const [rate, cpu] = await burst('put', key, options, 6);
      rates.get(name)!.put.push(rate);
      rates.get(name)!.putCpu.push(cpu);
    }
  }
  store.close();
  const q = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor(p * (xs.length - 1))]!;
  const base = samples.get(modes[0]![0])!;
  const baseRate = rates.get(modes[0]![0])!;
  const lines = [
    `## ${new Date().toISOString()}: ${bytes} bytes, ${flags.reads} reads and ${flags.writes} writes per mode, Node ${process.version}`,
    '',
    '| stored | get p50 ms | get p90 ms | get p50 × as given | put p50 ms | put p90 ms | put p50 × as given |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...modes.map(([name]) => {
      const s = samples.get(name)!;
      return `| ${name} | ${q(s.get, 0.5).toFixed(2)} | ${q(s.get, 0.9).toFixed(2)} | ${(q(s.get, 0.5) / q(base.get, 0.5)).toFixed(3)} | ${q(s.put, 0.5).toFixed(2)} | ${q(s.put, 0.9).toFixed(2)} | ${(q(s.put, 0.5) / q(base.put, 0.5)).toFixed(3)} |`;
    }),
    '',
    `${clients} concurrent operations, ${flags.rounds} rounds (25 gets, then 6 puts, per client and mode): median round`,
    '',
    '| stored | get op/s | get × as given | client CPU ms per get | put op/s | put × as given | client CPU ms per put |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...modes.map(([name]) => {
      const r = rates.get(name)!;
      return `| ${name} | ${q(r.get, 0.5).toFixed(0)} | ${(q(r.get, 0.5) / q(baseRate.get, 0.5)).toFixed(3)} | ${q(r.getCpu, 0.5).toFixed(2)} | ${q(r.put, 0.5).toFixed(0)} | ${(q(r.put, 0.5) / q(baseRate.put, 0.5)).toFixed(3)} | ${q(r.putCpu, 0.5).toFixed(2)} |`;
    }),
    '',
  ];
  console.log(lines.join('\n'));
  appendFileSync(join(dirname(fileURLToPath(import.meta.url)), '../results/encryption-ab.md'), `${lines.join('\n')}\n`);
} finally {
  await cluster.stop();
}
