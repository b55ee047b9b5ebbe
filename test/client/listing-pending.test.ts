/**
 * Listing a namespace where an identity left thousands of keys holding only writes never
 * completed (STOREs without COMPLETE, so no `lc`), between keys whose writes completed:
 * four real servers (in-process, LevelDB), the writes in progress put straight into their
 * storage. Each server reads at most MAX_LIST_SCAN key records per LIST and answers where
 * it stopped, so some pages come back empty with a cursor; `store.list` and the CLI's `ls`
 * go on across them and return every completed key, and so does a reader one of whose
 * servers is Byzantine and names a horizon just past the cursor in every LIST answer.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import { compareKeys, encodeMessage, MAX_LIST_SCAN } from '@powerstore/protocol';
import { initCluster, LevelStorage, loadServerConfig, startServer, type RunningServer } from '../../packages/server/src/index.js';
import { runCli } from '../cli/run.js';
import { startProxy, type ByzantineProxy } from '../fixtures/byzantine-proxy.js';
import { putPending, sampleWrite } from '../fixtures/pending-keys.js';
import { freeBasePort } from '../ports.js';
import { ensureBuiltProjects } from '../server/harness.js';

/** Writes never completed at every server, around the middle completed key: four MAX_LIST_SCAN's worth. */
const PENDING = 4 * MAX_LIST_SCAN;
/** More of them at server 3 only, so its answers lag behind the others'. */
const EXTRA = 3000;

const silent = { info() {}, debug() {}, warn() {}, error() {} } as unknown as NonNullable<Parameters<typeof startServer>[0]['logger']>;
const root = mkdtempSync(join(tmpdir(), 'powerstore-list-pending-'));
const servers: RunningServer[] = [];
const stores: Store[] = [];
let clusterFile: string;
let identityFile: string;
let cluster: { t: number; n: number; servers: { id: number; url: string; publicKey: string }[] };
let identity: Identity;
let completed: string[];

beforeAll(async () => {
  const build = ensureBuiltProjects(['packages/cli']);
  const init = await initCluster({ t: 1, dir: join(root, 'cluster'), basePort: await freeBasePort(4), writers: 'open' });
  clusterFile = init.clusterFile;
  cluster = JSON.parse(readFileSync(clusterFile, 'utf8')) as typeof cluster;
  identity = await Identity.generate();
  identityFile = join(root, 'identity.json');
  writeFileSync(identityFile, JSON.stringify(identity.toJSON()));
  chmodSync(identityFile, 0o600);
  const ns = identity.namespace;
  const sample = await sampleWrite();
  const pending = Array.from({ length: PENDING }, (_, i) => `${ns}m/${String(i).padStart(5, '0')}`);
  for (const [i, file] of init.serverFiles.entries()) {
    const config = await loadServerConfig(file);
    const storage = await LevelStorage.open({ path: join(root, `data-${i}`), n: 4, sync: false });
    await putPending(storage, pending, sample);
    if (i === 2)
      await putPending(
        storage,
        Array.from({ length: EXTRA }, (_, j) => `${ns}q/${j}`),
        sample,
      );
    servers.push(
      await startServer({
        cluster: config.cluster,
        index: i,
        seed: config.seed,
        host: config.host,
        port: config.port,
        storage,
        logger: silent,
      }),
    );
  }
  const store = await connect({ cluster, identity, timeoutMs: 30_000 });
  stores.push(store);
  completed = [`${ns}a`, `${ns}m/04000x`, `${ns}z`];
  for (const key of completed) await store.put(key, `value of ${key}`);
  await build;
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await Promise.all(servers.map((s) => s.close()));
  rmSync(root, { recursive: true, force: true });
});

/** Every page of `prefix`, in order. */
async function pages(store: Store, prefix: string, limit?: number): Promise<{ keys: string[]; cursor: string | undefined }[]> {
  const out: { keys: string[]; cursor: string | undefined }[] = [];
  let cursor: string | undefined;
  do {
    expect(out.length, 'pages').toBeLessThan(30);
    const page = await store.list(prefix, { ...(limit === undefined ? {} : { limit }), ...(cursor === undefined ? {} : { cursor }) });
    if (cursor !== undefined && page.cursor !== undefined) expect(compareKeys(page.cursor, cursor)).toBeGreaterThan(0);
    cursor = page.cursor;
    out.push({ keys: page.keys.map((k) => k.key), cursor });
  } while (cursor !== undefined);
  return out;
}

describe('listing across keys whose writes never completed', () => {
  it('store.list returns every completed key, going on across pages that come back empty with a cursor', async () => {
    const listed = await pages(stores[0]!, identity.namespace);
    expect(listed.flatMap((p) => p.keys)).toEqual(completed);
    expect(listed.some((p) => p.keys.length === 0 && p.cursor !== undefined)).toBe(true);
    // The same with small pages.
    const small = await pages(stores[0]!, identity.namespace, 2);
    expect(small.flatMap((p) => p.keys)).toEqual(completed);
  });

  it('the CLI’s ls lists every completed key', async () => {
    const run = await runCli(['--cluster', clusterFile, '--identity', identityFile, 'ls', '@/', '--json'], { cwd: root });
    expect(run.code).toBe(0);
    const keys = run.stdout
      .toString()
      .trim()
      .split('\n')
      .map((line) => (JSON.parse(line) as { key: string }).key);
    expect(keys).toEqual(completed);
  });

  it('a Byzantine server naming a horizon just past the cursor in every answer neither hides keys nor stalls the listing', async () => {
    let lies = 0;
    // In front of server 4, answering every LIST itself, at once: no keys, "read up to the next key".
    const liar: ByzantineProxy = await startProxy(servers[3]!.url, cluster.n, {
      onRequest: (m) => {
        if (m.type !== 'LIST') return undefined;
        lies++;
        const resumeAfter = compareKeys(m.key, m.after) > 0 ? m.key : `${m.after}\u0000`;
        return encodeMessage({ type: 'LIST_ACK', key: m.key, opId: m.opId, entries: [], more: true, resumeAfter });
      },
    });
    try {
      const reader = await connect({
        cluster: { ...cluster, servers: cluster.servers.map((s, i) => (i === 3 ? { ...s, url: liar.url } : s)) },
        timeoutMs: 30_000,
      });
      stores.push(reader);
      const listed = await pages(reader, identity.namespace);
      expect(listed.flatMap((p) => p.keys)).toEqual(completed);
      // About as many pages as without the liar (6 or 7): its horizons are outvoted, not
      // followed, unless another server is slower than the client's wait for it (which this
      // bound leaves room for). Followed, they would move the cursor one key name per page.
      expect(listed.length).toBeLessThanOrEqual(12);
      expect(lies).toBeGreaterThanOrEqual(listed.length);
    } finally {
      await liar.close();
    }
  });
});
