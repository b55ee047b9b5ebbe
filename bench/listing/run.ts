/**
 * How fast `list` pages through a prefix on a real 4-server cluster (t = 1, fsync on,
 * loopback): N small keys written, then every page timed, at two page sizes, by a reader
 * whose verifier is fresh (every certificate and store proof checked: four Ed25519
 * verifications a key) and then by the same reader again (each candidate found valid
 * before costs a hash).
 *   pnpm exec tsx --conditions=@powerstore/source bench/listing/run.ts [--keys 5000] [--concurrency 32]
 * Appends a section to bench/results/listing.md.
 */
import { appendFileSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { connect, Identity } from '@powerstore/client';
import { CliCluster, ensureBuilt } from '../../test/server/harness.js';

const { values } = parseArgs({ options: { keys: { type: 'string', default: '5000' }, concurrency: { type: 'string', default: '32' } } });
const keys = Number(values.keys);
const concurrency = Number(values.concurrency);
if (!(keys > 0) || !(concurrency > 0)) throw new Error('--keys and --concurrency must be positive');

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
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < names.length) await store.put(names[next++]!, 'x');
    }),
  );
  const writeS = (performance.now() - t0) / 1000;
  console.log(`wrote ${keys} keys in ${writeS.toFixed(1)} s`);
  lines.push(
    `\n## ${new Date().toISOString()}: ${keys} keys of 1 byte, t = 1, loopback, Node ${process.version}\n`,
    '| page size | verifier | pages | total s | keys/s | ms per page (median) |',
    '|---:|---|---:|---:|---:|---:|',
  );
  const cluster_ = cluster.clusterJson();
  for (const limit of [100, 1000]) {
    // A fresh store: its verifier has checked none of these certificates yet (cold); then
    // the same store again, whose verifier remembers every candidate it found valid (warm).
    const reader = await connect({ cluster: cluster_, timeoutMs: 60_000 });
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
    reader.close();
  }
  store.close();
} finally {
  await cluster.stop();
}
const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'results', 'listing.md');
appendFileSync(out, lines.join('\n') + '\n');
console.log(`appended to ${out}`);
