/**
 * Where a listing page's time goes, without the network or the noise of four processes:
 * the servers' LevelDB stores of a real cluster (written by real clients, so signatures are
 * batched as they really are) opened in this process, and a whole listing paged through
 * the protocol's `ListOperation`: each page's LIST handled by every server and encoded (the
 * servers' cost), and the first `n − t` answers decoded and given to the operation (the
 * reader's cost), by a fresh verifier (cold) and then the same one again (warm).
 *
 *   pnpm exec tsx --conditions=@powerstore/source bench/listing/page-cpu.ts --dir DIR [--keys 5000] [--write one|many] [--limit 1000] [--runs 3]
 *
 * DIR is made on the first run (a cluster started, the keys written, the cluster stopped)
 * and reused after, so runs of two builds compare on the same data.
 */
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { connect, Identity } from '@powerstore/client';
import {
  CertificateVerifier,
  decodeMessage,
  encodeMessage,
  ListOperation,
  Server,
  type ListPage,
  type Reply,
  type Request,
} from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import { LevelStorage } from '../../packages/server/src/index.js';
import { loadServerConfig } from '../../packages/server/src/config.js';
import { CliCluster, ensureBuilt } from '../../test/server/harness.js';

const { values } = parseArgs({
  options: {
    dir: { type: 'string' },
    keys: { type: 'string', default: '5000' },
    write: { type: 'string', default: 'one' },
    limit: { type: 'string', default: '1000' },
    runs: { type: 'string', default: '3' },
  },
});
if (!values.dir) throw new Error('--dir is required');
const dir = values.dir;
const keys = Number(values.keys);
const limit = Number(values.limit);
const runs = Number(values.runs);
const prefix = 'listing/';

if (!existsSync(join(dir, 'cluster.json'))) {
  await ensureBuilt();
  const cluster = await CliCluster.create(1);
  await cluster.startAll();
  try {
    const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(cluster.dir, 'admin.json'), 'utf8')));
    const store = await connect({ cluster: cluster.clusterJson(), identity: admin, timeoutMs: 60_000 });
    const names = Array.from({ length: keys }, (_, i) => `${prefix}${String(i).padStart(7, '0')}`);
    if (values.write === 'many') {
      const r = await store.putMany(names.map((name) => [name, 'x'] as const));
      if (r.failed.length > 0) throw new Error(`putMany: ${r.failed.length} failed`);
    } else {
      let next = 0;
      await Promise.all(
        Array.from({ length: 32 }, async () => {
          while (next < names.length) await store.put(names[next++]!, 'x');
        }),
      );
    }
    store.close();
  } finally {
    await cluster.stop(false);
  }
  renameSync(cluster.dir, dir);
  console.log(`wrote ${keys} keys (${values.write}) into ${dir}`);
}

const crypto = createCryptoProvider();
const configs = await Promise.all([1, 2, 3, 4].map((id) => loadServerConfig(join(dir, `server-${id}.json`))));
const { cluster } = configs[0]!;
const storages = await Promise.all(
  configs.map((c) => LevelStorage.open({ path: join(dir, `data-${c.id}`), n: cluster.config.n, cluster: cluster.file.id, sync: false })),
);
const servers = await Promise.all(
  configs.map(
    async (c, i) =>
      new Server({
        config: cluster.config,
        index: c.index,
        crypto,
        storage: storages[i]!,
        cluster: cluster.identity,
        signer: await crypto.signerFromSeed(c.seed),
        now: Date.now,
      }),
  ),
);

/** CPU time of the process (its LevelDB threads and GC helpers too), in ms: less disturbed than wall time on a shared machine. */
function cpuMs(): number {
  const { user, system } = process.cpuUsage();
  return (user + system) / 1000;
}

let opId = 1;
/** One listing, page by page: server and reader CPU milliseconds, summed over pages. */
async function listing(verifier: CertificateVerifier): Promise<{ server: number; reader: number; listed: number }> {
  let server = 0;
  let reader = 0;
  let listed = 0;
  let cursor = '';
  for (;;) {
    const op = new ListOperation({ config: cluster.config, crypto, verifier }, prefix, cursor, limit, opId++);
    let t = cpuMs();
    const sent = (await op.start()).send!;
    reader += cpuMs() - t;
    // What every server sends (all n of them work, whoever is answered first).
    const frames: Uint8Array[] = [];
    for (const { to, message } of sent) {
      t = cpuMs();
      const reply = await servers[to]!.handle(decodeMessage(encodeMessage(message), { n: cluster.config.n }) as Request);
      frames.push(encodeMessage(reply));
      server += cpuMs() - t;
    }
    let page: ListPage | undefined;
    t = cpuMs();
    for (let from = 0; from < frames.length && !page; from++) {
      const step = await op.onReply(from, decodeMessage(frames[from]!, { n: cluster.config.n }) as Reply);
      if (step.error) throw step.error;
      page = step.result;
    }
    reader += cpuMs() - t;
    if (!page) throw new Error('the page did not finish');
    listed += page.keys.length;
    if (page.cursor === undefined) return { server, reader, listed };
    cursor = page.cursor;
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const rows: Record<string, { server: number[]; reader: number[] }> = { cold: { server: [], reader: [] }, warm: { server: [], reader: [] } };
for (let run = 0; run < runs; run++) {
  const verifier = new CertificateVerifier(crypto, cluster.identity);
  for (const pass of ['cold', 'warm'] as const) {
    const r = await listing(verifier);
    if (r.listed !== keys) throw new Error(`listed ${r.listed} keys, expected ${keys}`);
    rows[pass]!.server.push(r.server);
    rows[pass]!.reader.push(r.reader);
    console.log(`run ${run + 1} ${pass}: servers ${r.server.toFixed(0)} ms (all 4), reader ${r.reader.toFixed(0)} ms`);
  }
}
for (const [pass, r] of Object.entries(rows)) {
  const s = median(r.server);
  const c = median(r.reader);
  console.log(
    `${pass} (median of ${runs}, limit ${limit}): servers ${s.toFixed(0)} ms (${((s / keys) * 1000).toFixed(0)} µs a key, 4 servers), ` +
      `reader ${c.toFixed(0)} ms (${((c / keys) * 1000).toFixed(0)} µs a key; alone it would list ${Math.round((keys / c) * 1000)} keys/s)`,
  );
}
await Promise.all(storages.map((s) => s.close()));
