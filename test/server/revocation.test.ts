/**
 * Revocation and expiry that take effect, on CLI-started servers: a grantee that planted
 * writes (STOREd with receipts, never completed) at numbers of its choosing while its grant
 * was good cannot bring them back after it was revoked (cluster.json + SIGHUP) or its grant
 * expired, cannot burn the key's numbers, and does not keep the owner's quota; a deleted key
 * gives its key-quota slot back; stripes no writer makes are refused.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type WebSocket from 'ws';
import { createReferenceCodec } from '@powerstore/erasure/reference';
import {
  computeCrossChecksum,
  crossChecksumDigest,
  encodePublicKey,
  makeWriterId,
  namespacePrefix,
  nonceHash,
  ownerIdOf,
  signCertificate,
  signGrant,
  TIMESTAMP_WINDOW,
  writerTagOf,
  type Candidate,
  type Grant,
  type Reply,
  type Signer,
  type StoreReceipt,
} from '@powerstore/protocol';
import { crypto, TestClient } from './driver.js';
import { CliCluster, ensureBuilt, openWebSocket, requestOnce } from './harness.js';

const W = TIMESTAMP_WINDOW;
/** Per owner and server (init --quota-bytes / --quota-keys): small enough to reach in a test. */
const QUOTA_BYTES = 1024 * 1024;
const QUOTA_KEYS = 20;

let cluster: CliCluster;
let sockets: WebSocket[];
let opId = 1;
const codec = createReferenceCodec({ k: 2, n: 4 });
const rand = (n: number) => new Uint8Array(randomBytes(n));
const text = (s: string) => new TextEncoder().encode(s);
const decode = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : undefined);
const identity = (byte: number) => crypto.signerFromSeed(new Uint8Array(32).fill(byte));

beforeAll(async () => {
  await ensureBuilt();
  cluster = await CliCluster.create(1, [], ['--writers', 'open', '--quota-bytes', String(QUOTA_BYTES), '--quota-keys', String(QUOTA_KEYS)]);
  await cluster.startAll();
  sockets = await Promise.all(cluster.urls.map((u) => openWebSocket(u)));
}, 240_000);

afterAll(async () => {
  for (const ws of sockets ?? []) ws.close();
  await cluster?.stop();
});

/** One request to server `i` (0-based) over its own connection. */
async function ask(i: number, m: Parameters<typeof requestOnce>[1]): Promise<Reply> {
  return (await requestOnce(sockets[i]!, m, cluster.config.n)) as Reply;
}

/**
 * What a grantee that never completes does: STORE `value` for `key` at `num` on every
 * server and keep the receipts. Returns the candidate it could COMPLETE with later, or the
 * servers' refusals.
 */
async function plant(signer: Signer, grant: Grant, key: string, value: Uint8Array, num: number) {
  const ts = { num, writerId: makeWriterId(writerTagOf(crypto, signer.publicKey), rand(16)) };
  const fragments = codec.encode(value);
  const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
  const nonce = rand(32);
  const cert = await signCertificate(crypto, cluster.cluster.identity.id, signer, {
    key,
    ts,
    nonceHash: nonceHash(crypto, nonce),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: false,
    grant,
  });
  const replies = await Promise.all(
    fragments.map((fragment, i) => ask(i, { type: 'STORE', key, opId: opId++, ts, stripe: 0, fragment, cc, cert })),
  );
  const proof: StoreReceipt[] = [];
  for (const [i, r] of replies.entries()) if (r.type === 'STORE_ACK') proof.push({ server: i, signature: r.receipt });
  const candidate: Candidate = { ts, nonce, cert, proof: proof.slice(0, cluster.config.n - cluster.config.t) };
  return { candidate, replies };
}

async function completeEverywhere(key: string, candidate: Candidate): Promise<Reply[]> {
  return Promise.all(sockets.map((_, i) => ask(i, { type: 'COMPLETE', key, opId: opId++, candidate })));
}

/** Edits cluster.json's policy and sends every server SIGHUP, as an operator does. */
function setPolicy(edit: (policy: Record<string, unknown>) => Record<string, unknown>): void {
  const json = JSON.parse(readFileSync(cluster.clusterFile, 'utf8')) as { policy: Record<string, unknown> };
  writeFileSync(cluster.clusterFile, JSON.stringify({ ...json, policy: edit(json.policy) }));
  for (let id = 1; id <= cluster.config.n; id++) cluster.process(id)!.kill('SIGHUP');
}

/** Retries `write` until it fails with `code` (the servers have read the new policy), within 10 s. */
async function untilRefused(write: () => Promise<unknown>, code: string): Promise<void> {
  const deadline = Date.now() + 10_000;
  let got: string | undefined;
  while (Date.now() < deadline) {
    got = await write().then(
      () => 'written',
      (e: { code?: string }) => e.code,
    );
    if (got === code) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  expect(got).toBe(code);
}

async function usage(owner: string): Promise<{ bytes: number; keys: number }[]> {
  return Promise.all(
    cluster.urls.map(async (_, i) => {
      const u = (await (await fetch(`${cluster.http(i + 1)}/usage`)).json()) as {
        owners: { owner: string; bytes: number; keys: number }[];
      };
      return u.owners.find((o) => o.owner === owner) ?? { bytes: 0, keys: 0 };
    }),
  );
}

describe('a revoked or expired grantee cannot bring its planted writes back', () => {
  it('revocation: after the owner deletes and rewrites, the grantee’s late COMPLETEs change nothing; its writes no longer hold the owner’s quota', async () => {
    const alice = await identity(71);
    const bob = await identity(72);
    const ns = namespacePrefix(ownerIdOf(crypto, alice.publicKey));
    const owner = await TestClient.open(cluster, alice);
    const grant = await signGrant(crypto, cluster.cluster.identity, alice, {
      grantee: bob.publicKey,
      prefix: ns,
      expiresAt: Date.now() + 3_600_000,
    });
    const grantee = await TestClient.open(cluster, bob, [grant]);
    const key = `${ns}diary`;
    await owner.write(key, { kind: 'value', value: text('v1') });
    // Numbers far above the key's last write are refused: nobody can burn them to 2^53.
    for (const num of [1_000_000, Number.MAX_SAFE_INTEGER]) {
      const { replies } = await plant(bob, grant, key, text('burn'), num);
      for (const r of replies) expect(r).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    }
    // What the grantee can still plant: numbers inside its window, and writes that fill the owner's quota.
    const planted: { key: string; candidate: Candidate }[] = [];
    for (const num of [5, W / 2, W])
      planted.push({ key, candidate: (await plant(bob, grant, key, text(`planted ${num}`), num)).candidate });
    for (let i = 0; i < 7; i++) {
      const k = `${ns}filler-${i}`;
      planted.push({ key: k, candidate: (await plant(bob, grant, k, rand(200 * 1024), 1)).candidate });
    }
    for (const p of planted) expect(p.candidate.proof).toHaveLength(3);
    const aliceId = ownerIdOf(crypto, alice.publicKey);
    for (const u of await usage(aliceId)) expect(u.bytes).toBeGreaterThan(0.6 * QUOTA_BYTES);

    setPolicy((p) => ({ ...p, revoked: { keys: [encodePublicKey(bob.publicKey)], grants: [] } }));
    await untilRefused(() => grantee.write(key, { kind: 'value', value: text('after revocation') }), 'REVOKED');
    // The owner does what the protocol README says: delete, and write a clean value.
    for (const k of new Set(planted.map((p) => p.key))) await owner.write(k, { kind: 'tombstone' });
    await owner.write(key, { kind: 'value', value: text('clean') });
    for (const p of planted) {
      for (const r of await completeEverywhere(p.key, p.candidate)) expect(r).toMatchObject({ type: 'COMPLETE_ACK' });
    }
    expect(decode((await owner.read(key)).value)).toBe('clean');
    for (let i = 0; i < 7; i++) expect((await owner.read(`${ns}filler-${i}`)).value).toBeUndefined();
    // Nothing of the grantee's is charged any more: the owner's next large write fits its quota.
    for (const u of await usage(aliceId)) expect(u.bytes).toBeLessThan(0.1 * QUOTA_BYTES);
    await owner.write(`${ns}large`, { kind: 'value', value: rand(600 * 1024) });
    owner.close();
    grantee.close();
  }, 120_000);

  it('expiry: a grant that ran out fences the same way', async () => {
    const alice = await identity(81);
    const bob = await identity(82);
    const ns = namespacePrefix(ownerIdOf(crypto, alice.publicKey));
    const owner = await TestClient.open(cluster, alice);
    const expiresAt = Date.now() + 3000;
    const grant = await signGrant(crypto, cluster.cluster.identity, alice, { grantee: bob.publicKey, prefix: ns, expiresAt });
    const key = `${ns}k`;
    await owner.write(key, { kind: 'value', value: text('v1') });
    const { candidate } = await plant(bob, grant, key, text('planted'), W);
    expect(candidate.proof).toHaveLength(3);
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now()) + 200));
    await owner.write(key, { kind: 'value', value: text('clean') });
    for (const r of await completeEverywhere(key, candidate)) expect(r).toMatchObject({ type: 'COMPLETE_ACK' });
    expect(decode((await owner.read(key)).value)).toBe('clean');
    owner.close();
  }, 60_000);
});

describe('what deleted keys and unfinished stripes cost', () => {
  it('a deleted key gives its key-quota slot back', async () => {
    const carol = await identity(91);
    const ns = namespacePrefix(ownerIdOf(crypto, carol.publicKey));
    const c = await TestClient.open(cluster, carol);
    for (let i = 0; i < QUOTA_KEYS; i++) await c.write(`${ns}k${i}`, { kind: 'value', value: text(`v${i}`) });
    await expect(c.write(`${ns}one-more`, { kind: 'value', value: text('x') })).rejects.toMatchObject({ code: 'QUOTA_EXCEEDED' });
    for (let i = 0; i < QUOTA_KEYS; i++) await c.write(`${ns}k${i}`, { kind: 'tombstone' });
    await c.write(`${ns}one-more`, { kind: 'value', value: text('x') });
    expect(decode((await c.read(`${ns}one-more`)).value)).toBe('x');
    for (const u of await usage(ownerIdOf(crypto, carol.publicKey))) expect(u.keys).toBe(1);
    c.close();
  }, 60_000);

  it('empty stripes, and a short stripe below another, are refused', async () => {
    const dave = await identity(92);
    const key = `${namespacePrefix(ownerIdOf(crypto, dave.publicKey))}upload`;
    const ts = { num: 1, writerId: makeWriterId(writerTagOf(crypto, dave.publicKey), rand(16)) };
    const stripeStore = async (stripe: number, bytes: Uint8Array) => {
      const fragments = codec.encode(bytes);
      const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
      const cert = await signCertificate(crypto, cluster.cluster.identity.id, dave, {
        key,
        ts,
        nonceHash: nonceHash(crypto, rand(32)),
        ccDigest: crossChecksumDigest(crypto, cc),
        tombstone: false,
        grant: undefined,
        stripe,
      });
      return ask(0, { type: 'STORE', key, opId: opId++, ts, stripe, fragment: fragments[0]!, cc, cert });
    };
    expect(await stripeStore(1, new Uint8Array(0))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    expect(await stripeStore(5, rand(64 * 1024))).toMatchObject({ type: 'STORE_ACK' });
    expect(await stripeStore(2, rand(100))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    expect(await stripeStore(6, rand(100))).toMatchObject({ type: 'STORE_ACK' });
    expect(await stripeStore(7, rand(64 * 1024))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
  }, 60_000);
});
