/**
 * Replacing a server whose machine was lost with its `server-<id>.json`, on CLI-started
 * servers, by the documented procedure: `powerstore-server rotate-key`, the new
 * `cluster.json` on every host, SIGHUP, and the new server started on an empty data
 * directory. Every value written before still reads (and its candidate still verifies),
 * new writes are signed under the new key epoch, clients with the old cluster file and
 * writes signed under the old epoch are refused, and the retired server file cannot start.
 */
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, Identity, type Store } from '@powerstore/client';
import {
  CertificateVerifier,
  computeCrossChecksum,
  crossChecksumDigest,
  makeWriterId,
  nonceHash,
  signCertificate,
  writerTagOf,
} from '@powerstore/protocol';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import { loadClusterFile, type StatusReport } from '../../packages/server/src/index.js';
import { crypto } from './driver.js';
import { CliCluster, cli, collectLc, ensureBuilt, openWebSocket, requestOnce } from './harness.js';

const VALUES = 12;
let cluster: CliCluster;
let identity: Identity;
const stores: Store[] = [];
const decode = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : undefined);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1, ['--log-level', 'info']);
  await cluster.startAll();
  identity = await Identity.generate();
}, 240_000);

afterAll(async () => {
  for (const s of stores) s.close();
  await cluster?.stop();
});

async function open(clusterJson: object): Promise<Store> {
  const store = await connect({ cluster: clusterJson, identity, timeoutMs: 10_000 });
  stores.push(store);
  return store;
}

/** Server `id`'s `/healthz`. */
async function health(id: number): Promise<{ status: string; epoch: number }> {
  return (await (await fetch(`${cluster.http(id)}/healthz`, { signal: AbortSignal.timeout(2000) })).json()) as {
    status: string;
    epoch: number;
  };
}

async function waitForEpoch(id: number, epoch: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while ((await health(id)).epoch !== epoch) {
    if (Date.now() > deadline) throw new Error(`server ${id} did not reach epoch ${epoch}`);
    await sleep(50);
  }
}

describe('replacing a lost server', () => {
  it('rotate-key, SIGHUP and an empty replacement: old values read and verify, new writes use the new epoch, the old epoch is refused', async () => {
    const before = cluster.clusterJson();
    const old = await open(before);
    const key = (i: number) => `${identity.namespace}doc-${i}`;
    for (let i = 0; i < VALUES; i++) await old.put(key(i), `value ${i}`);
    const { n } = cluster.config;
    const oldCandidate = (await collectLc(cluster.urls[0]!, key(0), n))!;
    expect(oldCandidate.cert.epoch).toBeUndefined();

    // Server 2's machine is lost, with its data and its server file.
    const retiredFile = join(mkdtempSync(join(tmpdir(), 'powerstore-retired-')), 'server-2.json');
    copyFileSync(join(cluster.dir, 'server-2.json'), retiredFile);
    await cluster.signal(2, 'SIGKILL');
    rmSync(join(cluster.dir, 'data-2'), { recursive: true, force: true });
    rmSync(join(cluster.dir, 'server-2.json'));

    const rotated = cli(['rotate-key', '--dir', cluster.dir, '--server', '2']);
    expect(rotated.status, rotated.stderr).toBe(0);
    expect(rotated.stdout).toMatch(/server 2 has a new receipt key in key epoch 1/);
    expect(rotated.stdout).toMatch(/SIGHUP/);
    const after = loadClusterFile(cluster.clusterFile);
    expect(after.identity.epoch).toBe(1);
    // The other servers take the new file on SIGHUP (their key is unchanged).
    for (const id of [1, 3, 4]) {
      cluster.process(id)!.kill('SIGHUP');
      await waitForEpoch(id, 1);
    }
    expect(readFileSync(join(cluster.dir, 'server-1.log'), 'utf8')).toMatch(/key epoch changed/);

    // The retired server file cannot start a server, and does not say what its key is.
    const refused = cli(['start', '--config', retiredFile, '--cluster', cluster.clusterFile, '--data', join(cluster.dir, 'data-retired')]);
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/server 2's retired key .* replaced in epoch 1/);
    expect(refused.stderr).not.toContain((JSON.parse(readFileSync(retiredFile, 'utf8')) as { secretKey: string }).secretKey);

    // The replacement starts on an empty data directory with the new server file.
    await cluster.start(2);
    expect((await health(2)).epoch).toBe(1);

    // A client with the old cluster file is told to reload it, for reads and writes alike.
    const stale: unknown = await old.get(key(0)).catch((e: unknown) => e);
    expect(stale).toMatchObject({ code: 'CLUSTER_OUTDATED' });
    expect((stale as Error).message).toMatch(/load the cluster file again/);
    await expect(old.put(key(0), 'stale')).rejects.toMatchObject({ code: 'CLUSTER_OUTDATED' });

    // With the new file: every old value reads (server 2 may hold none of them yet), and the old
    // candidates still verify — validity is timeless.
    const fresh = await open(cluster.clusterJson());
    for (let i = 0; i < VALUES; i++) expect(decode(await fresh.get(key(i)))).toBe(`value ${i}`);
    // The replacement rebuilds them from its peers (it started empty: rebuilding until then).
    const status = async (id: number) =>
      (await (await fetch(`${cluster.http(id)}/status`, { signal: AbortSignal.timeout(5000) })).json()) as StatusReport;
    const deadline = Date.now() + 60_000;
    while ((await status(2)).heal?.catchUp.state !== 'caught-up') {
      if (Date.now() > deadline) throw new Error('the replacement did not finish rebuilding within 60 s');
      await new Promise((r) => setTimeout(r, 250));
    }
    expect((await status(2)).keys).toBe((await status(3)).keys);
    const verifier = new CertificateVerifier(crypto, after.identity);
    expect(await verifier.valid(key(0), oldCandidate)).toBe(true);
    expect(await verifier.valid(key(0), (await collectLc(cluster.urls[1]!, key(0), n, 1))!)).toBe(true);
    expect(await new CertificateVerifier(crypto, cluster.cluster.identity).valid(key(0), oldCandidate)).toBe(true);
    expect((await fresh.list(identity.namespace)).keys).toHaveLength(VALUES);

    // New writes succeed under epoch 1, with the replacement's receipt.
    await fresh.put(key(0), 'rewritten');
    expect(decode(await fresh.get(key(0)))).toBe('rewritten');
    const rewritten = (await collectLc(cluster.urls[1]!, key(0), n, 1))!;
    expect(rewritten.cert.epoch).toBe(1);
    expect(await verifier.valid(key(0), rewritten)).toBe(true);
    await fresh.put(`${identity.namespace}new`, 'after the rotation');

    // A write signed under the old epoch is refused by every server, whatever epoch its
    // request names; one naming the new epoch in its certificate is admitted.
    const sockets = await Promise.all(cluster.urls.map((u) => openWebSocket(u)));
    try {
      for (const [certEpoch, requestEpoch] of [
        [0, 0],
        [0, 1],
      ] as const) {
        const store = await handStore(`${identity.namespace}forged`, certEpoch);
        for (const [i, ws] of sockets.entries()) {
          const reply = await requestOnce(ws, { ...store(i), ...(requestEpoch ? { epoch: requestEpoch } : {}) }, n);
          expect(reply, `server ${i + 1}, certificate epoch ${certEpoch}, request epoch ${requestEpoch}`).toMatchObject({
            type: 'ERROR',
            code: 'CLUSTER_OUTDATED',
          });
        }
      }
      const current = await handStore(`${identity.namespace}hand`, 1);
      for (const [i, ws] of sockets.entries()) {
        expect(await requestOnce(ws, { ...current(i), epoch: 1 }, n), `server ${i + 1}`).toMatchObject({ type: 'STORE_ACK', epoch: 1 });
      }
    } finally {
      for (const ws of sockets) ws.close();
    }

    // One more fault: server 1 stops too. Servers 3 and 4 still hold every old value and
    // the replacement answers, so reads and writes go on.
    await cluster.signal(1, 'SIGTERM');
    for (let i = 1; i < VALUES; i++) expect(decode(await fresh.get(key(i)))).toBe(`value ${i}`);
    await fresh.put(key(1), 'while server 1 is down');
    expect(decode(await fresh.get(key(1)))).toBe('while server 1 is down');
    // Server 1 restarts on its data with its unchanged server file, at the new epoch.
    await cluster.start(1);
    expect((await health(1)).epoch).toBe(1);
    expect(decode(await fresh.get(key(0)))).toBe('rewritten');

    // A server never goes back to the retired epoch: server 3 given the old cluster file
    // (a stale copy on its host) refuses to start, and starts with the current one.
    const oldClusterFile = join(dirname(retiredFile), 'cluster.json');
    writeFileSync(oldClusterFile, JSON.stringify(before));
    await cluster.signal(3, 'SIGTERM');
    const back = cli([
      'start',
      '--config',
      join(cluster.dir, 'server-3.json'),
      '--cluster',
      oldClusterFile,
      '--data',
      join(cluster.dir, 'data-3'),
    ]);
    expect(back.status).toBe(2);
    expect(back.stderr).toMatch(/was at key epoch 1 .* the cluster file is at epoch 0/);
    await cluster.start(3);
    expect(decode(await fresh.get(key(2)))).toBe('value 2');
  }, 120_000);
});

/** STORE requests (per server) of a write by this test's identity, its certificate signed under `epoch`. */
async function handStore(key: string, epoch: number) {
  const codec = createReferenceCodec({ k: 2, n: 4 });
  const value = new TextEncoder().encode(`signed under epoch ${epoch}`);
  const fragments = codec.encode(value);
  const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
  const ts = { num: 1, writerId: makeWriterId(writerTagOf(crypto, identity.signer.publicKey), new Uint8Array(16).fill(epoch + 1)) };
  const cert = await signCertificate(crypto, cluster.cluster.identity.id, identity.signer, {
    key,
    ts,
    nonceHash: nonceHash(crypto, new Uint8Array(32).fill(9)),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: false,
    grant: undefined,
    epoch,
  });
  return (i: number) => ({ type: 'STORE' as const, key, opId: 1, ts, stripe: 0, fragment: fragments[i]!, cc, cert });
}
