/**
 * What a server finds in its data directory at start (the operators' issue: "a server
 * started on a LevelDB directory with 80 corrupted bytes started, served and logged
 * nothing"), on real server processes:
 *
 * - bytes damaged inside a table file: the start check reports them (one log line, `/healthz`
 *   `storageCheck`, `/status` `disk: damaged` and `heal.startCheck`, metrics) and repairs the
 *   fragment from the peers once they are up;
 * - a damaged CURRENT or MANIFEST, or a CURRENT gone: the server refuses to start, with one
 *   line saying what to do, and exit code 65;
 * - a damaged write-ahead log: LevelDB drops records silently; the server says so and
 *   rebuilds from its peers.
 *
 * And the other side of the issue: a brand-new cluster's servers do not warn that they
 * started on an empty data directory.
 */
import { cpSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import type { StatusReport } from '../../packages/server/src/index.js';
import {
  cli,
  CliCluster,
  collectLc,
  ensureBuilt,
  fragmentAt,
  metricValue,
  openWebSocket,
  requestOnce,
  seededBytes as bytes,
} from './harness.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let cluster: CliCluster | undefined;
const stores: Store[] = [];

beforeAll(async () => {
  await ensureBuilt();
}, 240_000);

afterEach(async () => {
  for (const s of stores.splice(0)) s.close();
  await cluster?.stop();
  cluster = undefined;
});

async function open(c: CliCluster): Promise<Store> {
  const admin = await Identity.fromJSON(JSON.parse(readFileSync(join(c.dir, 'admin.json'), 'utf8')));
  const store = await connect({ cluster: c.clusterJson(), identity: admin, timeoutMs: 30_000 });
  stores.push(store);
  return store;
}

async function getJson<T>(c: CliCluster, id: number, path: string): Promise<T> {
  return (await (await fetch(`${c.http(id)}${path}`, { signal: AbortSignal.timeout(5000) })).json()) as T;
}

async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(250);
  }
}

/** Server `id`'s log, as the JSON lines pino wrote. */
function logLines(c: CliCluster, id: number): { level: number; msg: string; [k: string]: unknown }[] {
  return readFileSync(join(c.dir, `server-${id}.log`), 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: number; msg: string });
}

/** `powerstore-server start` of server `id`, run to its end (it must fail at once). */
function startFails(c: CliCluster, id: number) {
  return cli(['start', '--config', join(c.dir, `server-${id}.json`), '--data', join(c.dir, `data-${id}`)]);
}

describe('a new cluster', () => {
  it('no server warns that it started on an empty data directory; each says there is nothing to rebuild', async () => {
    cluster = await CliCluster.create(1);
    const c = cluster;
    await c.startAll();
    for (let id = 1; id <= 4; id++) {
      await until(`server ${id} has done its first pass`, async () => {
        const s = await getJson<StatusReport>(c, id, '/status');
        return s.heal?.catchUp.rebuilding === false;
      });
    }
    for (let id = 1; id <= 4; id++) {
      const lines = logLines(c, id);
      const warned = lines.filter((l) => l.level >= 40 && /empty data directory|counts against t/.test(l.msg));
      expect(warned, `server ${id}: ${JSON.stringify(warned)}`).toEqual([]);
      expect(
        lines.some((l) => l.level === 30 && /started on an empty data directory: checking whether its peers hold data/.test(l.msg)),
      ).toBe(true);
      expect(
        lines.some((l) => /the cluster holds no data yet, nothing to rebuild/.test(l.msg)),
        `server ${id}`,
      ).toBe(true);
    }
  }, 120_000);
});

describe('the start check', () => {
  it('reports bytes damaged in the value log at start (log, /healthz, /status, metrics) and repairs them once the peers are up', async () => {
    // Catch-up and scrub off: only the start check can find the damage.
    cluster = await CliCluster.create(1, ['--heal-interval-ms', '0', '--scrub-period-ms', '0', '--value-log-min-bytes', '16384']);
    const c = cluster;
    await c.startAll();
    const store = await open(c);
    const key = `${store.namespace}one`;
    const value = bytes(300_000, 'one');
    await store.put(key, value);
    const lc = (await collectLc(c.urls[2]!, key, 4))!;
    const ws = await openWebSocket(c.urls[2]!);
    const ack = await requestOnce(ws, { type: 'FILTER', key, opId: 1, stripe: 0, fragment: true, candidates: [lc] }, 4);
    ws.close();
    if (ack.type !== 'FILTER_ACK' || !ack.entry?.fragment) throw new Error('no fragment');
    const fragment = Buffer.from(ack.entry.fragment);
    store.close();
    for (const id of [3, 1, 2]) expect(await c.signal(id, 'SIGTERM')).toBe(0);

    // Server 3's fragment (150 kB: in the value log's segment files), 80 bytes of it damaged
    // there. (Damage in LevelDB's table files is heal.test.ts's scrub case.)
    const dir = join(c.dir, 'data-3');
    const probe = fragment.subarray(50_000, 50_064);
    let damaged = 0;
    const vlog = join(dir, 'vlog');
    for (const f of readdirSync(vlog)
      .filter((f) => f.endsWith('.vlog'))
      .map((f) => join('vlog', f))) {
      const content = readFileSync(join(dir, f));
      const at = content.indexOf(probe);
      if (at < 0) continue;
      for (let i = 0; i < 80; i++) content[at + i]! ^= 0xa5;
      writeFileSync(join(dir, f), content);
      damaged++;
    }
    expect(damaged).toBe(1);

    // Servers 1 and 2 down: the damage cannot be repaired yet, and shows.
    await c.start(3);
    const found = logLines(c, 3).filter((l) => /^start check: 1 stored entry is damaged/.test(l.msg));
    expect(found).toHaveLength(1);
    expect(found[0]!.level).toBe(50);
    expect(found[0]!.msg).toContain("1 of keys' latest writes (being repaired from the peers)");
    const health = await getJson<{ status: string; storageCheck?: string }>(c, 3, '/healthz');
    expect(health).toMatchObject({ status: 'ok', storageCheck: 'damaged' });
    const s3 = await getJson<StatusReport>(c, 3, '/status');
    expect(s3.disk).toBe('damaged');
    expect(s3.heal?.startCheck).toMatchObject({ enabled: true, complete: true, damaged: { lc: 1 }, unrepaired: 1 });
    let m = await c.metrics(3);
    expect(metricValue(m, 'powerstore_start_check_damaged', { kind: 'lc' })).toBe(1);
    expect(metricValue(m, 'powerstore_storage_damaged')).toBe(1);
    const shown = cli(['status', '--cluster', c.clusterFile]);
    expect(shown.stdout).toMatch(/^s3\s+up\s+DAMAGED\s/m);

    // The peers back: the fragment is rebuilt from them.
    await Promise.all([c.start(1), c.start(2)]);
    await until(
      'the damaged fragment is repaired',
      async () => metricValue(await c.metrics(3), 'powerstore_storage_damaged') === 0,
      120_000,
    );
    expect((await fragmentAt({ url: c.urls[2]!, id: 3, n: 4 }, key, lc)).state).toBe('ok');
    expect(await getJson<{ storageCheck?: string }>(c, 3, '/healthz')).toMatchObject({ storageCheck: 'repaired' });
    expect((await getJson<StatusReport>(c, 3, '/status')).disk).toBe('ok');
    m = await c.metrics(3);
    expect(metricValue(m, 'powerstore_scrub_repaired_total')).toBe(1);
    expect(logLines(c, 3).some((l) => /every damaged fragment it found is repaired/.test(l.msg))).toBe(true);
  }, 240_000);

  it('refuses a data directory whose CURRENT or MANIFEST is damaged, or whose CURRENT is gone: one line, exit 65', async () => {
    cluster = await CliCluster.create(1);
    const c = cluster;
    await c.start(1);
    expect(await c.signal(1, 'SIGTERM')).toBe(0);
    const dir = join(c.dir, 'data-1');
    const intact = join(c.dir, 'intact-1');
    cpSync(dir, intact, { recursive: true });
    const restore = () => {
      rmSync(dir, { recursive: true, force: true });
      cpSync(intact, dir, { recursive: true });
    };
    const expectRefused = (what: RegExp) => {
      const r = startFails(c, 1);
      expect(r.status, r.stderr).toBe(65);
      const lines = r.stderr.trimEnd().split('\n');
      expect(lines, r.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(/^powerstore-server: STORAGE_CORRUPT: cannot open LevelDB at /);
      expect(lines[0]).toMatch(what);
      expect(lines[0]).toContain('start this server on an empty data directory, where it rebuilds from its peers');
    };

    // CURRENT with bytes flipped: it no longer names the MANIFEST.
    const current = readFileSync(join(dir, 'CURRENT'));
    for (let i = 0; i < 4; i++) current[i]! ^= 0x5a;
    writeFileSync(join(dir, 'CURRENT'), current);
    expectRefused(/CURRENT file is damaged/);

    // The MANIFEST damaged.
    restore();
    const manifest = readdirSync(dir).find((f) => f.startsWith('MANIFEST-'))!;
    const content = readFileSync(join(dir, manifest));
    for (let i = 10; i < Math.min(content.length, 40); i++) content[i]! ^= 0x5a;
    writeFileSync(join(dir, manifest), content);
    expectRefused(/MANIFEST or another file is damaged \(LevelDB: Corruption/);

    // CURRENT gone: LevelDB would start a new database there and delete the old files.
    restore();
    rmSync(join(dir, 'CURRENT'));
    expectRefused(/CURRENT is missing, but the directory holds \d+ LevelDB files/);
    expect(readdirSync(dir).some((f) => f.startsWith('MANIFEST-'))).toBe(true);

    // Intact again: it starts.
    restore();
    await c.start(1);
  }, 120_000);

  it('a write-ahead log with damaged bytes: LevelDB drops records; the server says so and rebuilds from its peers', async () => {
    // Fragments in LevelDB, so that its log holds them.
    cluster = await CliCluster.create(1, ['--heal-interval-ms', '2000', '--value-log-min-bytes', 'off']);
    const c = cluster;
    await c.startAll();
    const store = await open(c);
    const values = new Map<string, Uint8Array>();
    for (let i = 0; i < 8; i++) values.set(`${store.namespace}k${i}`, bytes(60_000 + i, `k${i}`));
    for (const [key, value] of values) await store.put(key, value);
    expect(await c.signal(2, 'SIGTERM')).toBe(0);
    // A graceful stop leaves the memtable's records in the log: damage its middle.
    const dir = join(c.dir, 'data-2');
    const logs = readdirSync(dir).filter((f) => f.endsWith('.log'));
    const log = logs.map((f) => join(dir, f)).find((f) => readFileSync(f).length > 100_000);
    if (!log) throw new Error(`no log with the writes in ${dir}: ${logs.join(', ')}`);
    const content = readFileSync(log);
    const middle = Math.floor(content.length / 2);
    for (let i = middle; i < middle + 80; i++) content[i]! ^= 0xa5;
    writeFileSync(log, content);

    await c.start(2);
    const lines = logLines(c, 2);
    const dropped = lines.filter((l) => /^LevelDB dropped \d+ bytes of its write-ahead log as damaged/.test(l.msg));
    expect(dropped).toHaveLength(1);
    expect(dropped[0]!.level).toBe(50);
    expect(metricValue(await c.metrics(2), 'powerstore_start_check_damaged', { kind: 'log' })).toBeGreaterThan(0);
    await until('server 2 has rebuilt', async () => (await getJson<StatusReport>(c, 2, '/status')).heal?.catchUp.rebuilding === false);
    expect(logLines(c, 2).some((l) => /rebuild complete: this server holds its fragment/.test(l.msg))).toBe(true);
    for (const key of values.keys()) {
      const lc = (await collectLc(c.urls[0]!, key, 4))!;
      expect((await fragmentAt({ url: c.urls[1]!, id: 2, n: 4 }, key, lc)).state, key).toBe('ok');
    }
    // Its usage totals were summed again from what the log kept: the dropped writes, stored
    // again by the rebuild, count once (without the recount, every key counted twice). A key
    // record kept from a later batch may still name a write whose entry was dropped, which
    // the rebuild then charges again: at most those bytes over.
    type Usage = { owners: { owner: string; bytes: number; keys: number }[] };
    const usage = async (id: number) => (await getJson<Usage>(c, id, '/usage')).owners;
    const [two, one] = [await usage(2), await usage(1)];
    expect(two.map((o) => [o.owner, o.keys])).toEqual(one.map((o) => [o.owner, o.keys]));
    expect(two[0]!.bytes).toBeGreaterThanOrEqual(one[0]!.bytes);
    expect(two[0]!.bytes).toBeLessThan(1.5 * one[0]!.bytes);
  }, 180_000);
});
