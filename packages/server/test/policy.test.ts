/**
 * Signed policy documents and the server's keeper of them, without a network: the canonical
 * encoding signer and verifier share, which kept document outranks cluster.json (the version
 * rule), that a kept document which does not verify stops the start, and that offers are
 * judged one at a time. The HTTP route and the CLI are tested on real servers in
 * test/server/policy.test.ts.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { identityFromJson, parseClusterFile, parsePolicy, type Cluster, type Signer } from '@powerstore/protocol';
import { createCryptoProvider } from '@powerstore/protocol/crypto';
import {
  canonicalJson,
  initCluster,
  loadClusterFile,
  POLICY_FILE,
  PolicyKeeper,
  PolicyRefusal,
  rotateServerKey,
  ServerError,
  signPolicy,
  verifySignedPolicy,
  type SignedPolicy,
} from '../src/index.js';
import { writeClusterPolicy } from '../src/policy-admin.js';

const crypto = createCryptoProvider();
const root = mkdtempSync(join(tmpdir(), 'powerstore-policy-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
let dirs = 0;

async function freshCluster(): Promise<{ dir: string; cluster: Cluster; admin: Signer }> {
  const dir = join(root, `c${dirs++}`);
  const r = await initCluster({ t: 1, dir });
  const { seed } = identityFromJson(JSON.parse(readFileSync(r.adminFile, 'utf8')));
  return { dir, cluster: loadClusterFile(r.clusterFile), admin: await crypto.signerFromSeed(seed) };
}

/** `cluster` with its file's policy at `version`, owners `owners`. */
function withPolicy(cluster: Cluster, version: number, owners: string[] = []): Cluster {
  return parseClusterFile({ ...cluster.file, policy: { ...cluster.file.policy, version, owners } });
}

const OWNER = 'a'.repeat(32);
const body = (doc: object) => Buffer.from(JSON.stringify(doc));

describe('the signed document', () => {
  it('canonical JSON: one text whatever the key order; no NaN', () => {
    expect(canonicalJson({ b: [1, { d: 'x', c: null }], a: true })).toBe('{"a":true,"b":[1,{"c":null,"d":"x"}]}');
    expect(canonicalJson({ a: 1, b: 2 })).toBe(canonicalJson({ b: 2, a: 1 }));
    expect(() => canonicalJson({ a: NaN })).toThrow();
  });

  it('verifies whatever the order of its fields; refuses one byte changed', async () => {
    const { cluster, admin } = await freshCluster();
    const doc = await signPolicy(admin, cluster.file.id, 3, { ...cluster.file.policy, owners: [OWNER] }, { change: 'admit' });
    const reordered = JSON.parse(canonicalJson(doc)) as SignedPolicy;
    expect((await verifySignedPolicy(crypto, cluster, reordered)).json.owners).toEqual([OWNER]);
    await expect(verifySignedPolicy(crypto, cluster, { ...doc, change: 'admit!' })).rejects.toMatchObject({ code: 'BAD_SIGNATURE' });
    await expect(verifySignedPolicy(crypto, cluster, { ...doc, version: 4 })).rejects.toMatchObject({ code: 'BAD_SIGNATURE' });
  });

  it('a policy version written into cluster.json survives rotate-key, which rewrites the file', async () => {
    const { dir } = await freshCluster();
    const file = join(dir, 'cluster.json');
    writeClusterPolicy(file, { ...loadClusterFile(file).file.policy, owners: [OWNER] }, 3);
    await rotateServerKey({ dir, id: 2 });
    expect(loadClusterFile(file).file.policy).toMatchObject({ version: 3, owners: [OWNER] });
  });

  it('cluster.json keeps a policy version; a bad one names its field', () => {
    expect(parsePolicy({ writers: 'open', version: 7 }).json.version).toBe(7);
    expect(parsePolicy({ writers: 'open' }).json).not.toHaveProperty('version');
    expect(() => parsePolicy({ writers: 'open', version: -1 })).toThrow(/policy\.version/);
  });
});

describe('the keeper: which policy is in force', () => {
  it('an accepted document is kept and outranks an older cluster.json at the next start; a newer or equal cluster.json outranks it', async () => {
    const { dir, cluster, admin } = await freshCluster();
    const file = join(dir, 'data', POLICY_FILE);
    const keeper = await PolicyKeeper.open({ cluster, crypto, file });
    expect(keeper.current).toMatchObject({ version: 0, source: 'cluster-file' });
    const applied: number[] = [];
    const doc = await signPolicy(admin, cluster.file.id, 2, { ...cluster.file.policy, owners: [OWNER] });
    expect(await keeper.offer(body(doc), (c) => applied.push(c.version))).toMatchObject({ status: 'applied', version: 2, previous: 0 });
    expect(applied).toEqual([2]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(doc);

    expect((await PolicyKeeper.open({ cluster, crypto, file })).current).toMatchObject({ version: 2, source: 'signed' });
    expect((await PolicyKeeper.open({ cluster: withPolicy(cluster, 1), crypto, file })).current).toMatchObject({
      version: 2,
      source: 'signed',
    });
    expect((await PolicyKeeper.open({ cluster: withPolicy(cluster, 2), crypto, file })).current).toMatchObject({
      version: 2,
      source: 'cluster-file',
    });
    expect((await PolicyKeeper.open({ cluster: withPolicy(cluster, 3), crypto, file })).current).toMatchObject({
      version: 3,
      source: 'cluster-file',
    });

    // SIGHUP: an older cluster.json is ignored (and says at which version); an equal one takes over.
    expect(keeper.reload(withPolicy(cluster, 1))).toMatchObject({ ignored: 1, current: { version: 2, source: 'signed' } });
    expect(keeper.reload(withPolicy(cluster, 2, []))).toMatchObject({
      current: { version: 2, source: 'cluster-file', json: { owners: [] } },
    });
  });

  it('a kept document that does not verify stops the start, naming the file', async () => {
    const { dir, cluster, admin } = await freshCluster();
    const file = join(dir, POLICY_FILE);
    const doc = await signPolicy(admin, cluster.file.id, 5, cluster.file.policy);
    writeFileSync(file, JSON.stringify({ ...doc, policy: { ...doc.policy, writers: 'open' } }));
    const open = PolicyKeeper.open({ cluster, crypto, file });
    await expect(open).rejects.toBeInstanceOf(ServerError);
    await expect(open).rejects.toThrow(/powerstore-policy\.json: the document is not signed by this cluster's admin key.*delete it/);
    writeFileSync(file, '{"kind": ');
    await expect(PolicyKeeper.open({ cluster, crypto, file })).rejects.toThrow(/not valid JSON/);
  });

  it('offers are judged one at a time: the same document twice applies once; an older one after a newer is refused', async () => {
    const { dir, cluster, admin } = await freshCluster();
    const keeper = await PolicyKeeper.open({ cluster, crypto, file: join(dir, POLICY_FILE) });
    const v1 = await signPolicy(admin, cluster.file.id, 1, { ...cluster.file.policy, owners: [OWNER] });
    const v2 = await signPolicy(admin, cluster.file.id, 2, cluster.file.policy);
    const applied: number[] = [];
    const results = await Promise.allSettled([v1, v1, v2, v1].map((d) => keeper.offer(body(d), (c) => applied.push(c.version))));
    expect(results.map((r) => (r.status === 'fulfilled' ? r.value.status : (r.reason as PolicyRefusal).code))).toEqual([
      'applied',
      'unchanged',
      'applied',
      'STALE_VERSION',
    ]);
    expect(applied).toEqual([1, 2]);
    expect(keeper.current.version).toBe(2);
  });

  it('without a file to keep it in, a document is refused (501): it would not outlive a restart', async () => {
    const { cluster, admin } = await freshCluster();
    const keeper = await PolicyKeeper.open({ cluster, crypto });
    const doc = await signPolicy(admin, cluster.file.id, 1, cluster.file.policy);
    await expect(keeper.offer(body(doc), () => undefined)).rejects.toMatchObject({ status: 501, code: 'NOT_PERSISTENT' });
    expect(keeper.current.version).toBe(0);
  });
});
