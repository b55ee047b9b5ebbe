/**
 * What one LIST costs a server: process CPU (user + system, LevelDB's threads included)
 * and wall time around `Server.handle`, on LevelDB, for
 *   - LIST(limit 1) of a prefix holding N keys that have only writes in progress (STOREs
 *     never completed, so no `lc`): what one identity can leave in its namespace;
 *   - LIST(limit 1000) of a prefix holding M completed keys: an ordinary full page.
 * Records are put straight into the storage (copies of one real write), so setting up
 * takes seconds; each LIST runs `--runs` times and the median is printed.
 *   pnpm exec tsx --conditions=@powerstore/source bench/listing/server-cpu.ts [--pending 20000] [--completed 1000] [--runs 5]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { clusterConfig, Server, type ListRequest } from '@powerstore/protocol';
import { LevelStorage } from '../../packages/server/src/index.js';
import { crypto, testCluster } from '@powerstore/protocol/testing';
import { putCompleted, putPending, sampleWrite } from '../../test/fixtures/pending-keys.js';

const { values } = parseArgs({
  options: {
    pending: { type: 'string', default: '20000' },
    completed: { type: 'string', default: '1000' },
    runs: { type: 'string', default: '5' },
  },
});
const pending = Number(values.pending);
const completed = Number(values.completed);
const runs = Number(values.runs);

const dir = mkdtempSync(join(tmpdir(), 'powerstore-list-cpu-'));
const config = clusterConfig(1);
const storage = await LevelStorage.open({ path: join(dir, 'db'), n: config.n, sync: false });
try {
  const sample = await sampleWrite();
  const name = (p: string, i: number) => `${p}${String(i).padStart(7, '0')}`;
  const t0 = performance.now();
  await putPending(
    storage,
    Array.from({ length: pending }, (_, i) => name('pending/', i)),
    sample,
  );
  await putCompleted(
    storage,
    Array.from({ length: completed }, (_, i) => name('done/', i)),
    sample,
  );
  console.log(`stored ${pending} pending-only and ${completed} completed keys in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const { cluster, serverSigners } = await testCluster(1);
  const server = new Server({ config, index: 0, crypto, storage, cluster, signer: serverSigners[0]!, now: Date.now });

  let opId = 1;
  async function measure(label: string, prefix: string, limit: number): Promise<void> {
    const cpu: number[] = [];
    const wall: number[] = [];
    let summary = '';
    for (let i = 0; i < runs; i++) {
      const req: ListRequest = { type: 'LIST', key: prefix, opId: opId++, after: '', limit };
      const c0 = process.cpuUsage();
      const w0 = performance.now();
      const reply = await server.handle(req);
      wall.push(performance.now() - w0);
      const c = process.cpuUsage(c0);
      cpu.push((c.user + c.system) / 1000);
      if (reply.type !== 'LIST_ACK') throw new Error(`${label}: ${reply.type}`);
      const resume = (reply as { resumeAfter?: string }).resumeAfter;
      summary = `${reply.entries.length} keys, more ${reply.more}${resume === undefined ? '' : `, resume after ${JSON.stringify(resume)}`}`;
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    console.log(
      `${label}: CPU ${median(cpu).toFixed(1)} ms, wall ${median(wall).toFixed(1)} ms (median of ${runs}; CPU per run ${cpu.map((x) => x.toFixed(0)).join(', ')}); ${summary}`,
    );
  }
  await measure(`LIST(limit 1) over ${pending} pending-only keys`, 'pending/', 1);
  await measure(`LIST(limit 1000) over ${completed} completed keys`, 'done/', 1000);
} finally {
  await storage.close();
  rmSync(dir, { recursive: true, force: true });
}
