/**
 * Who is busy when PowerStore writes small values under load: closed-loop puts from this
 * process (one store per client, as the bench's workers do) against real server processes,
 * and the CPU each process used, per operation.
 *
 *   pnpm exec tsx --conditions=@powerstore/source bench/profile/load-cpu.ts [--clients 16] [--bytes 4096] [--seconds 8]
 *   … load-cpu.ts --many 1000 [--concurrency 16]   one store's putMany of that many values instead
 *   … load-cpu.ts --clients 64 --shared             64 loops of puts through one store
 *
 * (needs `tsc -b packages/server` first, like the bench scripts).
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { connect, type Store } from '@powerstore/client';
import { startSystem, type SystemName } from '../lib/clusters.js';

const { values } = parseArgs({
  options: {
    clients: { type: 'string', default: '16' },
    bytes: { type: 'string', default: '4096' },
    seconds: { type: 'string', default: '8' },
    system: { type: 'string', default: 'powerstore' },
    fsync: { type: 'string', default: 'on' },
    many: { type: 'string' },
    shared: { type: 'boolean', default: false },
    concurrency: { type: 'string', default: '16' },
  },
});
const TICK = 100; // USER_HZ: /proc/<pid>/stat counts in 1/100 s
/** CPU seconds (user + system, every thread) process `pid` has used. */
function cpuOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICK;
}
/** How the servers bundled: messages and frames in bundles, each way, summed over the servers' /metrics. */
async function bundling(urls: readonly string[]): Promise<string> {
  const sums = new Map<string, number>();
  for (const url of urls) {
    const text = await (await fetch(`${url.replace(/^ws/, 'http')}/metrics`)).text();
    for (const m of text.matchAll(/^powerstore_(bundles|bundled_frames)_total\{direction="(\w+)"\} (\d+)/gm))
      sums.set(`${m[1]} ${m[2]}`, (sums.get(`${m[1]} ${m[2]}`) ?? 0) + Number(m[3]));
  }
  const mean = (d: string) => ((sums.get(`bundled_frames ${d}`) ?? 0) / Math.max(1, sums.get(`bundles ${d}`) ?? 0)).toFixed(1);
  return `bundles received ${sums.get('bundles received') ?? 0} (mean ${mean('received')} frames), sent ${sums.get('bundles sent') ?? 0} (mean ${mean('sent')} frames)`;
}
const sys = await startSystem(values.system as SystemName, 1, values.fsync === 'on');
try {
  if (values.system !== 'powerstore') throw new Error('only powerstore for now');
  if (values.many) {
    const store = await connect({ cluster: sys.writer!.cluster, identity: sys.writer!.identity, allowInsecure: true });
    const value = new Uint8Array(Number(values.bytes)).fill(7);
    const entries = (round: number) => Array.from({ length: Number(values.many) }, (_, i) => [`many/${round}/${i}`, value] as const);
    await store.putMany(entries(0), { concurrency: Number(values.concurrency) }); // warm-up
    const before = { me: process.cpuUsage(), servers: sys.pids.map(cpuOf), t: performance.now() };
    const result = await store.putMany(entries(1), { concurrency: Number(values.concurrency) });
    const secs = (performance.now() - before.t) / 1000;
    const me = process.cpuUsage(before.me);
    const n = Number(values.many);
    console.log(
      `putMany of ${n} values of ${values.bytes} B, concurrency ${values.concurrency}: ${(n / secs).toFixed(0)} writes/s (${result.failed.length} failed)`,
    );
    console.log(`client process: ${((me.user + me.system) / 1000 / n).toFixed(2)} ms CPU per write`);
    for (const [i, p] of sys.pids.entries())
      console.log(`server ${i + 1}: ${(((cpuOf(p) - before.servers[i]!) * 1000) / n).toFixed(2)} ms CPU per write`);
    console.log(await bundling(sys.urls));
    store.close();
    process.exitCode = result.failed.length ? 1 : 0;
  } else {
    const stores: Store[] = [];
    for (let i = 0; i < (values.shared ? 1 : Number(values.clients)); i++)
      stores.push(await connect({ cluster: sys.writer!.cluster, identity: sys.writer!.identity, allowInsecure: true }));
    const value = new Uint8Array(Number(values.bytes)).fill(7);
    let ops = 0;
    let stop = false;
    const loop = async (s: Store, i: number) => {
      for (let n = 0; !stop; n++) {
        await s.put(`load/${i}/${n % 64}`, value);
        ops++;
      }
    };
    // Warm up, then measure.
    // --shared: every loop puts through one store (concurrent puts of one writer).
    const loops = Array.from({ length: Number(values.clients) }, (_, i) => loop(stores[values.shared ? 0 : i]!, i));
    await new Promise((r) => setTimeout(r, 2000));
    const before = { ops, me: process.cpuUsage(), servers: sys.pids.map(cpuOf), t: performance.now() };
    await new Promise((r) => setTimeout(r, Number(values.seconds) * 1000));
    const me = process.cpuUsage(before.me);
    const servers = sys.pids.map((p, i) => cpuOf(p) - before.servers[i]!);
    const n = ops - before.ops;
    const secs = (performance.now() - before.t) / 1000;
    stop = true;
    await Promise.all(loops);
    console.log(`${values.clients} clients, ${values.bytes} B: ${(n / secs).toFixed(0)} writes/s`);
    console.log(
      `client process: ${((me.user + me.system) / 1000 / n).toFixed(2)} ms CPU per write (${(((me.user + me.system) / 1e6 / secs) * 100).toFixed(0)} % of a core)`,
    );
    for (const [i, c] of servers.entries())
      console.log(`server ${i + 1}: ${((c * 1000) / n).toFixed(2)} ms CPU per write (${((c / secs) * 100).toFixed(0)} % of a core)`);
    console.log(await bundling(sys.urls));
    for (const s of stores) s.close();
  }
} finally {
  await sys.stop();
}
