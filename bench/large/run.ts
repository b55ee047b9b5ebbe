/**
 * One large object through the `powerstore` CLI, as users run it, on a real cluster of
 * 3t + 1 `powerstore-server` processes (t = 1 by default, loopback, fsync on): a file of
 * `--size` random bytes put with `powerstore put`, read back whole with `powerstore get`
 * to standard output (hashed as it arrives), and 1 MiB read from its middle with
 * `get --range`. Reports MB/s of each, the CLI's peak RSS and its growth over a CLI
 * reading a 1-byte value, and each server's peak RSS during each phase.
 *
 *   pnpm bench:large [--size 1GiB] [--t 1]
 *
 * Writes bench/results/large.{md,json}. While it runs it needs disk for the source file
 * and for what the servers store of it; its cluster directory, the servers' data and the
 * source file are deleted afterwards, whether it succeeds or not.
 */
import { writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { ensureBuiltProjects } from '../../test/server/harness.js';
import { largeTransfer, parseSize, type Phase } from '../../test/cli/large-transfer.js';
import { mib } from '../../test/cli/run.js';
import { startPowerStore } from '../lib/clusters.js';

const { values } = parseArgs({
  options: { size: { type: 'string', default: '1GiB' }, t: { type: 'string', default: '1' }, out: { type: 'string', default: 'large' } },
});
const bytes = parseSize(values.size);
const t = Number(values.t);
if (!(bytes > 0)) throw new Error('--size must be positive');
if (!Number.isInteger(t) || t < 1) throw new Error('--t must be a positive integer');

// The CLI runs from dist, as installed; the servers too (startPowerStore).
await ensureBuiltProjects(['packages/server', 'packages/cli']);
const system = await startPowerStore(t, true);
let result;
try {
  result = await largeTransfer({
    dir: system.dir,
    clusterFile: join(system.dir, 'cluster.json'),
    identityFile: join(system.dir, 'admin.json'),
    serverPids: system.pids,
    bytes,
    timeoutMs: 300_000,
    log: (line) => console.log(line),
  });
} finally {
  await system.stop();
}
if (!result.identical || !result.rangeIdentical)
  throw new Error(
    `the bytes read back differ from those written (full get identical: ${result.identical}, range: ${result.rangeIdentical})`,
  );

const environment = {
  date: new Date().toISOString(),
  node: process.version,
  cpus: `${cpus().length} × ${cpus()[0]?.model ?? '?'}`,
  memory: `${Math.round(totalmem() / 2 ** 30)} GiB`,
  t,
  servers: system.pids.length,
};
const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'results');
writeFileSync(join(out, `${values.out}.json`), JSON.stringify({ environment, result }, null, 2) + '\n');

const servers = (peaks: readonly (number | undefined)[]) => peaks.map((p) => (p === undefined ? '?' : mib(p))).join(' / ');
const row = (name: string, p: Phase) =>
  `| ${name} | ${mib(p.bytes)} | ${p.seconds.toFixed(2)} | ${p.mbPerSecond.toFixed(1)} | ${mib(p.cliPeakRss)} | +${mib(p.cliPeakRssGrowth)} | ${servers(p.serverPeakRss)} | ${servers(p.serverPeakAnon)} |`;
const md = [
  `# Large object through the CLI (\`pnpm bench:large --size ${values.size}\`)`,
  '',
  `${environment.date}: ${mib(bytes)} MiB of random bytes, t = ${t} (${environment.servers} servers), loopback, fsync on, ` +
    `Node ${environment.node}, ${environment.cpus}, ${environment.memory}. Read back SHA-256 identical (${result.sha256.slice(0, 16)}…).`,
  '',
  '`put` from a file (its size known), `get` to standard output (hashed by the bench as it arrives), ' +
    `\`get --range\` of 1 MiB from byte ${result.rangeGet.start}. Times are each \`powerstore\` process's whole life ` +
    '(Node start-up, reading the cluster and identity files, connecting), as a user sees it; MB = 10⁶ bytes.',
  `CLI peak RSS is the process's own \`getrusage\` maximum; growth is over a CLI getting a 1-byte value (${mib(result.cliBaselineRss)} MiB).`,
  `Server peak RSS is each server's VmHWM${result.serverPeaksPerPhase ? ', reset before each phase' : ' since it started (the kernel did not let it be reset)'}; before the put they held ${servers(result.serverRssBefore)} MiB. ` +
    "VmHWM counts the pages of LevelDB's table files a server maps while reading them (the kernel's page cache, given back under memory pressure); " +
    'server peak anon is the highest RssAnon sampled every 100 ms: the memory of its own.',
  '',
  '| phase | MiB | s | MB/s | CLI peak RSS MiB | growth MiB | server peak RSS MiB (s1 / s2 / …) | server peak anon MiB |',
  '|---|---:|---:|---:|---:|---:|---|---|',
  row('put', result.put),
  row('get', result.get),
  row('get --range (1 MiB)', result.rangeGet),
  '',
].join('\n');
writeFileSync(join(out, `${values.out}.md`), md);
console.log(`\n${md}\nwrote ${join(out, `${values.out}.md`)} and ${values.out}.json`);
