/**
 * Policy changes without editing files: `powerstore-server policy …` signs a new policy with
 * the admin identity and pushes it to every server (`PUT /policy`), on one cluster of
 * CLI-started servers. One command reaches every server (an admitted owner writes, a quota
 * takes effect, a revoked key is refused by each server); documents not signed by the
 * admin, for another cluster, replayed, tampered with, malformed or oversized change
 * nothing; the accepted policy outlives a restart and outranks an older cluster.json; and
 * `policy show` / `policy sync` report and repair disagreement. The tests run in order and
 * build on each other's policy versions.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import {
  computeCrossChecksum,
  crossChecksumDigest,
  encodePublicKey,
  identityToJson,
  makeWriterId,
  namespacePrefix,
  nonceHash,
  ownerIdOf,
  signCertificate,
  writerTagOf,
  type Message,
  type Signer,
} from '@powerstore/protocol';
import { policySigningBytes, signPolicy, type SignedPolicy } from '../../packages/server/src/policy.js';
import { crypto, TestClient } from './driver.js';
import { cli, CliCluster, ensureBuilt, metricValue, openWebSocket, requestOnce } from './harness.js';

/** Default keys per owner and server (init --quota-keys): small enough to reach in a test. */
const QUOTA_KEYS = 2;

let cluster: CliCluster;
let alice: Signer;
let aliceId: string;
/** cluster.json as init wrote it: what a host the policy commands never ran on still has. */
let originalClusterFile: string;
const codec = createReferenceCodec({ k: 2, n: 4 });
const rand = (n: number) => new Uint8Array(randomBytes(n));
const text = (s: string) => new TextEncoder().encode(s);

beforeAll(async () => {
  await ensureBuilt();
  // writers: owners (init's default): only the admitted owners and the admin write.
  cluster = await CliCluster.create(1, ['--heal-interval-ms', '0', '--scrub-period-ms', '0'], ['--quota-keys', String(QUOTA_KEYS)]);
  originalClusterFile = readFileSync(cluster.clusterFile, 'utf8');
  alice = await crypto.signerFromSeed(rand(32));
  aliceId = ownerIdOf(crypto, alice.publicKey);
  await cluster.startAll();
}, 240_000);

afterAll(async () => {
  await cluster?.stop();
});

/** Every signed document the servers have shown, by version: kept after each test for the replays of later ones. */
const documents = new Map<number, SignedPolicy>();
afterEach(async () => {
  for (const r of await reports()) if (r.signed) documents.set(r.signed.version, r.signed);
});

/** `powerstore-server policy <args> --cluster <file> --json`, parsed. */
function policy(...args: string[]): { status: number | null; json: Record<string, unknown>; stderr: string } {
  const r = cli(['policy', ...args, '--cluster', cluster.clusterFile, '--json']);
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(r.stdout) as Record<string, unknown>;
  } catch {
    // a refusal prints nothing on stdout; the caller checks status and stderr
  }
  return { status: r.status, json, stderr: r.stderr };
}

interface Report {
  version: number;
  source: string;
  digest: string;
  policy: { owners: string[]; revoked: { keys: string[] }; quotas: { owners: Record<string, object> } };
  signed?: SignedPolicy;
}

async function report(id: number): Promise<Report> {
  return (await (await fetch(`${cluster.http(id)}/policy`)).json()) as Report;
}

async function reports(): Promise<Report[]> {
  return Promise.all(cluster.urls.map((_, i) => report(i + 1)));
}

/** A `PUT /policy` of `body` to server `id`: the status and the JSON answer. */
async function put(id: number, body: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${cluster.http(id)}/policy`, {
    method: 'PUT',
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** What each server answers to its own STORE of a fresh write of `key` by `signer` (not completed). */
async function storeEach(signer: Signer, key: string): Promise<string[]> {
  const value = rand(100);
  const ts = { num: 1, writerId: makeWriterId(writerTagOf(crypto, signer.publicKey), rand(16)) };
  const fragments = codec.encode(value);
  const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
  const cert = await signCertificate(crypto, cluster.cluster.identity.id, signer, {
    key,
    ts,
    nonceHash: nonceHash(crypto, rand(32)),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: false,
    grant: undefined,
  });
  return Promise.all(
    cluster.urls.map(async (url, i) => {
      const ws = await openWebSocket(url);
      try {
        const m: Message = { type: 'STORE', key, opId: 1, ts, stripe: 0, fragment: fragments[i]!, cc, cert };
        const reply = await requestOnce(ws, m, cluster.config.n);
        return reply.type === 'ERROR' ? reply.code : reply.type;
      } finally {
        ws.close();
      }
    }),
  );
}

const key = (name: string) => `${namespacePrefix(aliceId)}${name}`;

describe('one command changes the policy of every server', () => {
  it('policy show: a new cluster agrees on cluster.json’s policy, version 0', () => {
    const r = policy('show');
    expect(r.status).toBe(0);
    expect(r.json).toMatchObject({ agree: true, version: 0, n: 4, quorum: 3, local: { version: 0 } });
    expect(r.json.servers).toHaveLength(4);
    for (const s of r.json.servers as { source: string; signature: string }[])
      expect(s).toMatchObject({ source: 'cluster-file', signature: 'unsigned' });
  });

  it('admit: an owner refused by every server writes once one command admitted it; cluster.json follows', async () => {
    const c = await TestClient.open(cluster, alice);
    try {
      await expect(c.write(key('a'), { kind: 'value', value: text('before') })).rejects.toMatchObject({ code: 'NOT_AUTHORIZED' });
      const r = policy('admit', encodePublicKey(alice.publicKey));
      expect(r.status, r.stderr).toBe(0);
      expect(r.json).toMatchObject({ version: 1, previous: 0, applied: 4, clusterFile: { written: true } });
      for (const s of r.json.servers as object[]) expect(s).toMatchObject({ result: 'applied', previous: 0 });
      // Applied before each server answered: no wait, no SIGHUP.
      await c.write(key('a'), { kind: 'value', value: text('admitted') });
      const file = cluster.clusterJson() as { policy: { version: number; owners: string[] } };
      expect(file.policy).toMatchObject({ version: 1, owners: [aliceId] });
      for (const rep of await reports()) expect(rep).toMatchObject({ version: 1, source: 'signed', policy: { owners: [aliceId] } });
    } finally {
      c.close();
    }
  });

  it('set-quota: an override of bytes alone keeps the default key limit; a new default takes effect at once', async () => {
    const r = policy('set-quota', aliceId, '--bytes', '10MiB');
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ version: 2, policy: { quotas: { owners: { [aliceId]: { bytes: 10 * 2 ** 20 } } } } });
    const c = await TestClient.open(cluster, alice);
    try {
      // `a` is one key; the default allows QUOTA_KEYS = 2, and the override of bytes must not lift that.
      await c.write(key('b'), { kind: 'value', value: text('second key') });
      await expect(c.write(key('c'), { kind: 'value', value: text('third key') })).rejects.toMatchObject({ code: 'QUOTA_EXCEEDED' });
      const usage = (await (await fetch(`${cluster.http(1)}/usage`)).json()) as { owners: { owner: string; quota: object }[] };
      expect(usage.owners.find((o) => o.owner === aliceId)?.quota).toEqual({ bytes: 10 * 2 ** 20, keys: QUOTA_KEYS });
      const raised = policy('set-quota', 'default', '--keys', '10');
      expect(raised.status, raised.stderr).toBe(0);
      expect(raised.json).toMatchObject({ version: 3, applied: 4 });
      await c.write(key('c'), { kind: 'value', value: text('third key') });
      // Asking for what is already so signs nothing.
      const again = policy('set-quota', 'default', '--keys', '10');
      expect(again).toMatchObject({ status: 0, json: { version: 3, change: null } });
    } finally {
      c.close();
    }
  });

  it('revoke: every server refuses the key’s STOREs (REVOKED); its completed writes stay readable; logged once with the reason', async () => {
    expect(await storeEach(alice, key('d'))).toEqual(['STORE_ACK', 'STORE_ACK', 'STORE_ACK', 'STORE_ACK']);
    const r = policy('revoke', encodePublicKey(alice.publicKey), '--reason', 'laptop stolen');
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ version: 4, change: `revoke key ${encodePublicKey(alice.publicKey)}: laptop stolen`, applied: 4 });
    expect(await storeEach(alice, key('e'))).toEqual(['REVOKED', 'REVOKED', 'REVOKED', 'REVOKED']);
    const reader = await TestClient.open(cluster);
    try {
      expect(new TextDecoder().decode((await reader.read(key('a'))).value)).toBe('admitted');
    } finally {
      reader.close();
    }
    for (let id = 1; id <= 4; id++) {
      expect(metricValue(await cluster.metrics(id), 'powerstore_policy_version')).toBe(4);
      expect(((await (await fetch(`${cluster.http(id)}/healthz`)).json()) as { policyVersion: number }).policyVersion).toBe(4);
      const log = readFileSync(join(cluster.dir, `server-${id}.log`), 'utf8');
      expect(log.split('\n').filter((l) => l.includes('laptop stolen') && l.includes('signed write policy applied'))).toHaveLength(1);
    }
  });
});

describe('only the admin changes the policy, and never backwards', () => {
  it('refused, with nothing changed: another key, unsigned, tampered, another cluster, replayed, same version other content, malformed, oversized', async () => {
    const before = await reports();
    const current = before[0]!.signed!;
    expect(current.version).toBe(4);
    const admin = cluster.admin;
    const mallory = await crypto.signerFromSeed(rand(32));
    const id = cluster.cluster.file.id;
    const lifted = { ...current.policy, revoked: { keys: [], grants: [] } };
    const cases: [string, unknown, number, string][] = [
      ['signed by another key', await signPolicy(mallory, id, 5, lifted), 403, 'BAD_SIGNATURE'],
      ['unsigned', { ...(await signPolicy(admin, id, 5, lifted)), signature: undefined }, 403, 'BAD_SIGNATURE'],
      ['a signed document with its policy changed', { ...current, version: 5, policy: lifted }, 403, 'BAD_SIGNATURE'],
      ['signed by the admin for another cluster', await signPolicy(admin, 'aaaaaaaaaaaaaaaaaaaaaaaaaa', 5, lifted), 403, 'WRONG_CLUSTER'],
      [
        'the other cluster’s document relabelled for this one',
        { ...(await signPolicy(admin, 'aaaaaaaaaaaaaaaaaaaaaaaaaa', 5, lifted)), cluster: id },
        403,
        'BAD_SIGNATURE',
      ],
      ['an old version replayed', JSON.parse(JSON.stringify(await oldDocument(1))), 409, 'STALE_VERSION'],
      ['the current version with other content', await signPolicy(admin, id, 4, lifted), 409, 'STALE_VERSION'],
      ['not JSON', '{"kind":', 400, 'MALFORMED'],
      ['a field this server does not know', { ...(await signPolicy(admin, id, 5, lifted)), expires: 1 }, 400, 'MALFORMED'],
      ['a policy field this server does not know', await signedWith(admin, id, 5, { ...lifted, readers: [] }), 400, 'MALFORMED'],
      ['an invalid policy', await signedWith(admin, id, 5, { ...lifted, writers: 'everyone' }), 400, 'MALFORMED'],
      ['version 0', await signedWith(admin, id, 0, lifted), 400, 'MALFORMED'],
    ];
    for (const [what, body, status, code] of cases) {
      for (let server = 1; server <= 4; server++) {
        const r = await put(server, body);
        expect({ what, server, status: r.status, code: r.body.error }).toEqual({ what, server, status, code });
      }
    }
    expect(await put(1, await oldDocument(1))).toMatchObject({ body: { current: 4 } });
    // The current document again (a retried push) is no change, and says so.
    expect(await put(2, current)).toMatchObject({ status: 200, body: { status: 'unchanged', version: 4 } });
    expect(await oversized(3)).toBe(413);
    expect(await reports()).toEqual(before);
    expect(await storeEach(alice, key('f'))).toEqual(['REVOKED', 'REVOKED', 'REVOKED', 'REVOKED']);
    expect(metricValue(await cluster.metrics(1), 'powerstore_policy_updates_total', { result: 'bad_signature' })).toBe(4);
    expect(metricValue(await cluster.metrics(1), 'powerstore_policy_updates_total', { result: 'stale_version' })).toBe(3);
  });

  it('the CLI refuses an identity that is not the admin’s, before pushing anything', async () => {
    const other = await crypto.signerFromSeed(rand(32));
    const file = join(cluster.dir, 'not-admin.json');
    writeFileSync(file, JSON.stringify(identityToJson(crypto, other.publicKey, rand(32))), { mode: 0o600 });
    // A seed that is not the file's public key's…
    expect(policy('unrevoke', encodePublicKey(alice.publicKey), '--identity', file)).toMatchObject({ status: 2 });
    const seed = rand(32);
    const impostor = await crypto.signerFromSeed(seed);
    writeFileSync(file, JSON.stringify(identityToJson(crypto, impostor.publicKey, seed)), { mode: 0o600 });
    // …and a real identity that is not this cluster's admin.
    const r = policy('unrevoke', encodePublicKey(alice.publicKey), '--identity', file);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain("not this cluster's admin identity");
    for (const rep of await reports()) expect(rep.version).toBe(4);
  });
});

describe('restarts, older cluster files and servers that missed a change', () => {
  it('a restarted server keeps the signed policy over an older cluster.json, and SIGHUP does not undo it', async () => {
    // As on a host the policy commands never ran on: cluster.json still has version 0.
    writeFileSync(cluster.clusterFile, originalClusterFile);
    await cluster.signal(2, 'SIGTERM');
    await cluster.start(2);
    expect(await report(2)).toMatchObject({
      version: 4,
      source: 'signed',
      policy: { revoked: { keys: [encodePublicKey(alice.publicKey)] } },
    });
    cluster.process(2)!.kill('SIGHUP');
    await waitForLog(2, 'is older than the signed policy in force');
    expect(await report(2)).toMatchObject({ version: 4, source: 'signed' });
    expect(await storeEach(alice, key('g'))).toEqual(['REVOKED', 'REVOKED', 'REVOKED', 'REVOKED']);
  });

  it('a change while a server is down reaches n − t (exit 1); show reports the disagreement, sync repairs it', async () => {
    await cluster.signal(3, 'SIGTERM');
    const r = policy('unrevoke', encodePublicKey(alice.publicKey));
    expect(r.status, r.stderr).toBe(1);
    expect(r.json).toMatchObject({ version: 5, previous: 4, applied: 3 });
    expect((r.json.servers as { result: string }[]).map((s) => s.result)).toEqual(['applied', 'applied', 'unreachable', 'applied']);
    // Server 3 comes back on a cluster.json older than its signed policy (version 4).
    writeFileSync(cluster.clusterFile, originalClusterFile);
    await cluster.start(3);
    expect(await report(3)).toMatchObject({ version: 4, source: 'signed' });
    const show = policy('show');
    expect(show.status).toBe(1);
    expect(show.json).toMatchObject({ agree: false, version: 5, agreeing: [1, 2, 4] });
    const sync = policy('sync');
    expect(sync.status, sync.stderr).toBe(0);
    expect((sync.json.servers as { result: string }[]).map((s) => s.result)).toEqual(['unchanged', 'unchanged', 'applied', 'unchanged']);
    expect(policy('show')).toMatchObject({ status: 0, json: { agree: true, version: 5 } });
    expect(await storeEach(alice, key('h'))).toEqual(['STORE_ACK', 'STORE_ACK', 'STORE_ACK', 'STORE_ACK']);
  });

  it('a public key that begins with "-" (one in 64 do) is the argument of revoke, not an unknown option', async () => {
    let dashed = '';
    while (!dashed.startsWith('-')) dashed = encodePublicKey((await crypto.signerFromSeed(rand(32))).publicKey);
    const r = policy('revoke', dashed);
    expect(r.status, r.stderr).toBe(0);
    expect(r.json).toMatchObject({ version: 6, change: `revoke key ${dashed}` });
    expect((await report(1)).policy.revoked.keys).toContain(dashed);
  });
});

/** The signed document of version `version`, kept from when it was pushed. */
async function oldDocument(version: number): Promise<SignedPolicy> {
  const doc = documents.get(version);
  if (!doc) throw new Error(`no document of version ${version} was seen`);
  return doc;
}

/** A document signed by `signer` exactly as given (no normalization: what a hostile or buggy signer could send). */
async function signedWith(signer: Signer, cluster: string, version: number, policy: object): Promise<object> {
  const unsigned = { kind: 'powerstore-signed-policy' as const, cluster, version, policy: policy as SignedPolicy['policy'] };
  return { ...unsigned, signature: Buffer.from(await signer.sign(policySigningBytes(unsigned))).toString('base64url') };
}

/** A 2 MiB PUT: the status the server answers before reading it all (or 413 when the connection is cut after the answer). */
function oversized(id: number): Promise<number> {
  const url = new URL(`${cluster.http(id)}/policy`);
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path: url.pathname, method: 'PUT' }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end(Buffer.alloc(2 * 1024 * 1024, 0x20));
  });
}

async function waitForLog(id: number, text: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    if (readFileSync(join(cluster.dir, `server-${id}.log`), 'utf8').includes(text)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`server ${id} did not log ${JSON.stringify(text)}`);
}
