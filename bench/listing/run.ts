/**
 * How fast `list` pages through a prefix on a real 4-server cluster (t = 1, fsync on,
 * loopback): N small keys written, then every page timed, at two page sizes, by a reader
 * whose verifier is fresh (every certificate and store proof checked: four Ed25519
 * verifications a key) and then by the same reader again (each candidate found valid
 * before costs a hash).
 *   pnpm exec tsx --conditions=@powerstore/source bench/listing/run.ts [--keys 5000] [--concurrency 32] [--write one|many] [--profile DIR]
 * `--write one` (the default) writes the keys one `put` at a time, `--concurrency` in
 * flight; `--write many` in one `putMany`, whose writes sign in the same turn and so share
 * certificate signatures (one per batch root), as servers' receipts share theirs per
 * group commit: a cold reader then verifies a root once for all its keys.
 * `--profile DIR`: the servers are restarted after writing with `--cpu-prof` into DIR
 * (written when they stop), and the reader's listing passes are profiled into
 * DIR/client-<page size>.cpuprofile.
 * Appends a section to bench/results/listing.md.
 */
import { appendFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect, Identity } from '@powerstore/client';
import { CliCluster, ensureBuilt } from '../../test/server/harness.js';

const { values } = parseArgs({
  options: {
    keys: { type: 'string', default: '5000' },
    concurrency: { type: 'string', default: '32' },
    write: { type: 'string', default: 'one' },
    profile: { type: 'string' },
  },
});
const keys = Number(values.keys);
const concurrency = Number(values.concurrency);
const write = values.write;
if (!(keys > 0) || !(concurrency > 0)) throw new Error('--keys and --concurrency must be positive');
if (write !== 'one' && write !== 'many') throw new Error('--write must be one or many');
const profileDir = values.profile && resolve(values.profile);
if (profileDir) mkdirSync(profileDir, { recursive: true });

await ensureBuilt();
const cluster = await CliCluster.create(1);
await cluster.startAll();
const lines: string[] = [];
try {
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(cluster.dir, 'admin.json'), 'utf8')));
  const store = await connect({ cluster: cluster.clusterJson(), identity: admin, timeoutMs: 60_000 });
  const prefix = 'listing/';
  const names = Array.from({ length: keys }, (_, i) => `${prefix}${String(i).padStart(7, '0')}`);
  let next = 0;
  const t0 = performance.now();
  if (write === 'many') {
    const result = await store.putMany(names.map((name) => [name, 'x'] as const));
    if (result.failed.length > 0) throw new Error(`putMany: ${result.failed.length} keys failed`);
  } else {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < names.length) await store.put(names[next++]!, 'x');
      }),
    );
  }
  const writeS = (performance.now() - t0) / 1000;
  console.log(
    `wrote ${keys} keys (${write === 'many' ? 'one putMany' : `put one at a time, ${concurrency} in flight`}) in ${writeS.toFixed(1)} s`,
  );
  if (profileDir) {
    // Profile the servers' listing only: restart them with the profiler on, and without
    // the catch-up pass a start runs (it lists every key too, which the servers' first
    // start did not: their stores were empty then).
    await cluster.stop(false);
    process.env.PS_CPU_PROF = profileDir;
    await Promise.all(cluster.urls.map((_, i) => cluster.start(i + 1, ['--heal-interval-ms', '0'])));
  }
  lines.push(
    `\n## ${new Date().toISOString()}: ${keys} keys of 1 byte written ${write === 'many' ? 'by one putMany' : `one at a time (${concurrency} in flight)`}, t = 1, loopback, Node ${process.version}\n`,
    `\`pnpm exec tsx --conditions=@powerstore/source bench/listing/run.ts ${process.argv.slice(2).join(' ')}\`\n`,
    '| page size | verifier | pages | total s | keys/s | ms per page (median) |',
    '|---:|---|---:|---:|---:|---:|',
  );
  const cluster_ = cluster.clusterJson();
  for (const limit of [100, 1000]) {
    // A fresh store: its verifier has checked none of these certificates yet (cold); then
    // the same store again, whose verifier remembers every candidate it found valid (warm).
    const reader = await connect({ cluster: cluster_, timeoutMs: 60_000 });
    const session = profileDir ? new Session() : undefined;
    if (session) {
      session.connect();
      await session.post('Profiler.enable');
      await session.post('Profiler.start');
    }
    for (const pass of ['cold', 'warm'] as const) {
      const pageMs: number[] = [];
      let listed = 0;
      let cursor: string | undefined;
      const start = performance.now();
      do {
        const p0 = performance.now();
        const page = await reader.list(prefix, { limit, ...(cursor === undefined ? {} : { cursor }) });
        pageMs.push(performance.now() - p0);
        listed += page.keys.length;
        cursor = page.cursor;
      } while (cursor !== undefined);
      const total = (performance.now() - start) / 1000;
      if (listed !== keys) throw new Error(`listed ${listed} keys, wrote ${keys}`);
      const median = [...pageMs].sort((a, b) => a - b)[Math.floor(pageMs.length / 2)]!;
      const row = `| ${limit} | ${pass} | ${pageMs.length} | ${total.toFixed(2)} | ${Math.round(keys / total)} | ${median.toFixed(1)} |`;
      console.log(row);
      lines.push(row);
    }
    if (session) {
      const { profile } = await session.post('Profiler.stop');
      writeFileSync(join(profileDir!, `client-${limit}.cpuprofile`), JSON.stringify(profile));
      session.disconnect();
    }
    reader.close();
  }
  store.close();
} finally {
  await cluster.stop();
}
const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'results', 'listing.md');
appendFileSync(out, lines.join('\n') + '\n');
console.log(`appended to ${out}`);
