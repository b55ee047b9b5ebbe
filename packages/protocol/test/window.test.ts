/**
 * The timestamp window and the fence it gives owners (`window.ts`), the bounded work of
 * stripes of unfinished writes, and what pending and deleted writes cost their owner.
 */
import { describe, expect, it } from 'vitest';
import {
  computeCrossChecksum,
  crossChecksumDigest,
  encodeKeyRecord,
  encodePublicKey,
  MIN_STRIPE_SIZE,
  nonceHash,
  OPEN_POLICY,
  ownerIdOf,
  signCertificate,
  signGrant,
  TIMESTAMP_WINDOW,
  type Candidate,
  type Grant,
  type Reply,
  type Signer,
  type StoreRequest,
  type Timestamp,
  type WritePolicy,
} from '../src/index.js';
import { crypto, identity, makeCluster, own, storeEverywhere, storeFor } from '../src/testing/cluster.js';

const W = TIMESTAMP_WINDOW;
const text = (s: string) => new TextEncoder().encode(s);
const decode = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : undefined);
type Cluster = Awaited<ReturnType<typeof makeCluster>>;

async function grantee(c: Cluster, prefix = own(c.owner, ''), expiresAt = 10 ** 12): Promise<{ bob: Signer; grant: Grant }> {
  const bob = await identity(2);
  return { bob, grant: await signGrant(crypto, c.cluster, c.owner, { grantee: bob.publicKey, prefix, expiresAt }) };
}

/** Every server's policy, as an operator's SIGHUP sets it. */
function setPolicy(c: Cluster, policy: WritePolicy): void {
  for (const s of c.servers) s.setPolicy(policy);
}

/** A write STOREd everywhere with its receipts, never completed: what a writer keeps to COMPLETE later. */
async function plant(c: Cluster, signer: Signer, key: string, value: string, num: number, grant?: Grant): Promise<Candidate> {
  return storeEverywhere(c, await storeFor(c, signer, key, text(value), { num, nonce: new Uint8Array(32).fill(num % 251), grant }));
}

async function completeEverywhere(c: Cluster, key: string, candidate: Candidate): Promise<Reply[]> {
  return Promise.all(c.servers.map((s) => s.handle({ type: 'COMPLETE', key, opId: 7, candidate })));
}

/** A stripe ≥ 1 STORE for server `index` of `signer`'s write at `ts`, holding `bytes`. */
async function stripeStore(c: Cluster, signer: Signer, key: string, ts: Timestamp, stripe: number, bytes: Uint8Array, index = 0) {
  const fragments = c.codec.encode(bytes);
  const cc = await computeCrossChecksum(crypto, fragments, bytes.length, false);
  const cert = await signCertificate(crypto, c.cluster.id, signer, {
    key,
    ts,
    nonceHash: nonceHash(crypto, new Uint8Array(32).fill(3)),
    ccDigest: crossChecksumDigest(crypto, cc),
    tombstone: false,
    grant: undefined,
    stripe,
  });
  const store: StoreRequest = { type: 'STORE', key, opId: 5, ts, stripe, fragment: fragments[index]!, cc, cert };
  return store;
}

describe('the timestamp window', () => {
  it('a STORE may take a number at most rank · W above lc: a grantee W, the owner 2W, the admin 3W', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const { bob, grant } = await grantee(c);
    for (const [signer, rank, g] of [
      [bob, 1, grant],
      [c.owner, 2, undefined],
      [c.admin, 3, undefined],
    ] as const) {
      const inside = await storeFor(c, signer, key, text('in'), { num: rank * W, grant: g });
      expect(await c.servers[0]!.handle(inside.store)).toMatchObject({ type: 'STORE_ACK' });
      const outside = await storeFor(c, signer, key, text('out'), { num: rank * W + 1, grant: g });
      const refused = await c.servers[0]!.handle(outside.store);
      expect(refused).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
      expect(refused.type === 'ERROR' && refused.message).toMatch(/window/);
    }
    // Nobody reaches the end of the numbers: 2^53 − 1 is far outside every window.
    const burn = await storeFor(c, c.admin, key, text('burn'), { num: Number.MAX_SAFE_INTEGER });
    expect(await c.servers[0]!.handle(burn.store)).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
  });

  it('a revoked grantee’s pending writes, however high, end below the owner’s next write, and their late COMPLETE changes nothing', async () => {
    const c = await makeCluster(1, { history: { keep: 0 } });
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v1') });
    const { bob, grant } = await grantee(c);
    // While its grant is good, the grantee plants writes at numbers of its choosing, receipts kept.
    const planted = [];
    // (W is the top of its window at every server, the one that missed v1's COMPLETE included.)
    for (const num of [3, W / 2, W]) planted.push(await plant(c, bob, key, `planted ${num}`, num, grant));
    setPolicy(c, { ...OPEN_POLICY, revokedKeys: [encodePublicKey(bob.publicKey)] });
    const clean = await c.write(key, { kind: 'value', value: text('clean') });
    expect(clean.ts.num).toBe(W + 1);
    for (const p of planted) {
      const acks = await completeEverywhere(c, key, p);
      for (const a of acks) expect(a).toMatchObject({ type: 'COMPLETE_ACK' });
      expect(decode((await c.read(key)).value)).toBe('clean');
    }
    // Below lc now, and δ = 0: collected everywhere, so nothing of the grantee's is left to count.
    for (const [i, s] of c.storages.entries()) {
      const kept = await s.withKey(key, async (r) => (await r.index()).map((w) => w.ts.num));
      expect(kept, `server ${i}`).toEqual([W + 1]);
    }
  });

  it('expiry fences the same way, and a delete after it frees the owner’s quota of every pending write', async () => {
    let now = 1000;
    const c = await makeCluster(1, { now: () => now, history: { keep: 0 } });
    const owner = ownerIdOf(crypto, c.owner.publicKey);
    const { bob, grant } = await grantee(c, own(c.owner, ''), 2000);
    const keys = [own(c.owner, 'a'), own(c.owner, 'b')];
    const planted = [];
    for (const key of keys) for (const num of [5, 9]) planted.push({ key, c: await plant(c, bob, key, 'x'.repeat(1000), num, grant) });
    expect(c.storages[0]!.usage(owner).keys).toBe(2);
    now = 3000; // the grant has expired
    for (const key of keys) await c.write(key, { kind: 'tombstone' });
    for (const p of planted) await completeEverywhere(c, p.key, p.c);
    for (const key of keys) expect((await c.read(key)).value).toBeUndefined();
    // What is left is each key's delete: a few hundred bytes, and no key-quota slot.
    const usage = c.storages[0]!.usage(owner);
    expect(usage.keys).toBe(0);
    expect(usage.bytes).toBeLessThan(2 * 400);
  });

  it('the admin jumps over the owner’s own pending writes: a revoked owner’s key can be recovered', async () => {
    const c = await makeCluster(1, { history: { keep: 0 } });
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v1') });
    const late = await plant(c, c.owner, key, 'the owner, late', 2 * W);
    setPolicy(c, { ...OPEN_POLICY, revokedKeys: [encodePublicKey(c.owner.publicKey)] });
    const recovered = await c.write(key, { kind: 'value', value: text('recovered') }, c.session(c.admin));
    expect(recovered.ts.num).toBe(2 * W + 1);
    await completeEverywhere(c, key, late);
    expect(decode((await c.read(key)).value)).toBe('recovered');
  });

  it('a Byzantine server’s pending number moves a write at most W, and only an owner’s or the admin’s', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v1') });
    const { bob, grant } = await grantee(c);
    const lie = (reply: Reply): Reply => (reply.type === 'CLOCK_ACK' ? { ...reply, pending: 2 ** 50 } : reply);
    // Server 1 answers every CLOCK first, so its answer is always among the n − t counted.
    const liar = c.servers[0]!;
    const honest = liar.handle.bind(liar);
    liar.handle = async (req) => lie(await honest(req));
    const owners = await c.write(key, { kind: 'value', value: text('owner') });
    expect(owners.ts.num).toBe(1 + W + 1);
    const bobs = await c.write(key, { kind: 'value', value: text('grantee') }, c.session(bob, [grant]));
    expect(bobs.ts.num).toBe(owners.ts.num + 1);
    expect(decode((await c.read(key)).value)).toBe('grantee');
  });

  it('a server that missed completed writes takes the writer’s basis, so it stores a number inside everyone else’s window', async () => {
    const skip = new Set([3]);
    const c = await makeCluster(1, { skip });
    const key = own(c.owner, 'k');
    // The owner's write jumps W above a pending one; server 4 (index 3) hears nothing of either.
    await plant(c, c.owner, key, 'pending', W);
    const first = await c.write(key, { kind: 'value', value: text('v1') });
    expect(first.ts.num).toBe(W + 1);
    skip.clear();
    const { bob, grant } = await grantee(c);
    // Server 4's lc is still c0: without the basis, W + 2 would be outside a grantee's window there.
    const lagging = await storeFor(c, bob, key, text('v2'), { num: W + 2, grant, index: 3 });
    expect(await c.servers[3]!.handle(lagging.store)).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    await c.write(key, { kind: 'value', value: text('v2') }, c.session(bob, [grant]));
    const lc = await c.storages[3]!.withKey(key, (r) => r.getLc());
    expect(lc?.ts.num).toBeGreaterThanOrEqual(W + 1);
    expect((await c.storages[3]!.withKey(key, (r) => r.index())).some((w) => w.ts.num === W + 2 && w.head)).toBe(true);
    // A basis that is not valid is a forgery.
    const forged = { ...first, nonce: new Uint8Array(32) };
    const withForgedBasis = await storeFor(c, c.owner, key, text('v3'), { num: W + 9 });
    const basis = { ts: forged.ts, nonce: forged.nonce, cert: lc!.cert, proof: lc!.proof };
    expect(await c.servers[0]!.handle({ ...withForgedBasis.store, basis })).toMatchObject({ type: 'ERROR', code: 'UNAUTHENTICATED' });
  });
});

describe('stripes of unfinished writes', () => {
  const S = MIN_STRIPE_SIZE;
  const full = new Uint8Array(S).fill(1);
  const ts = (c: Cluster, num: number): Timestamp => ({ num, writerId: new Uint8Array(c.session(c.owner).writerId).fill(0, 16) });

  it('an empty stripe, a short stripe below another, a second short one and a stripe after the short one are refused', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const s0 = c.servers[0]!;
    const t = ts(c, 1);
    const store = (stripe: number, length: number) => stripeStore(c, c.owner, key, t, stripe, full.subarray(0, length));
    expect(await s0.handle(await store(1, 0))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    expect(await s0.handle(await store(3, S))).toMatchObject({ type: 'STORE_ACK' });
    expect(await s0.handle(await store(2, 10))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    expect(await s0.handle(await store(4, 10))).toMatchObject({ type: 'STORE_ACK' });
    expect(await s0.handle(await store(5, S))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    expect(await s0.handle(await store(6, 10))).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
    expect(await s0.handle(await store(1, S))).toMatchObject({ type: 'STORE_ACK' });
    // A retry of a stored stripe is still acknowledged.
    expect(await s0.handle(await store(4, 10))).toMatchObject({ type: 'STORE_ACK' });
  });

  it('a write of many stripes is one index entry: the key record does not grow with the stripes', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const t = ts(c, 1);
    const sizes: number[] = [];
    for (let s = 1; s <= 40; s++) {
      expect(await c.servers[0]!.handle(await stripeStore(c, c.owner, key, t, s, full))).toMatchObject({ type: 'STORE_ACK' });
      const state = await c.storages[0]!.withKey(key, async (r) => ({
        lc: await r.getLc(),
        owner: ownerIdOf(crypto, c.owner.publicKey),
        index: await r.index(),
        collected: await r.getCollected(),
      }));
      sizes.push(encodeKeyRecord(key, state).length);
    }
    expect(new Set(sizes).size).toBe(1);
    expect(await c.storages[0]!.withKey(key, (r) => r.index())).toMatchObject([{ head: false, stripes: 40, top: 40 }]);
  });

  it('an abandoned upload is deleted once idle: a tenth of the idle time after a newer write, the whole of it otherwise', async () => {
    let now = 1_000_000;
    const idle = 60_000;
    const c = await makeCluster(1, { now: () => now, history: { keep: 2, uploadIdleMs: idle } });
    const owner = ownerIdOf(crypto, c.owner.publicKey);
    const [retried, forgotten] = [own(c.owner, 'retried'), own(c.owner, 'forgotten')];
    for (const key of [retried, forgotten])
      for (let s = 1; s <= 4; s++) await c.servers[0]!.handle(await stripeStore(c, c.owner, key, ts(c, 1), s, full));
    expect(c.storages[0]!.usage(owner).bytes).toBeGreaterThan(2 * 4 * (S / 2));
    const unfinished = async () => {
      const keys = [];
      for await (const k of c.storages[0]!.unfinishedKeys()) keys.push(k);
      return keys.sort();
    };
    expect(await unfinished()).toEqual([forgotten, retried].sort());
    // The owner's next write of one key jumps over the upload (CLOCK reports it as pending).
    const next = await c.write(retried, { kind: 'value', value: text('small') });
    expect(next.ts.num).toBe(2);
    const stripesOf = (key: string) => c.storages[0]!.withKey(key, async (r) => (await r.index()).map((w) => w.stripes));
    // Just overtaken, it may still be arriving: kept.
    expect(await stripesOf(retried)).toEqual([4, 0]);
    now += idle / 10;
    for (const key of await unfinished()) await c.servers[0]!.sweep(key);
    expect(await stripesOf(retried)).toEqual([0]);
    expect(await stripesOf(forgotten)).toEqual([4]);
    now += idle;
    for (const key of await unfinished()) await c.servers[0]!.sweep(key);
    expect(await stripesOf(forgotten)).toEqual([]);
    expect(await unfinished()).toEqual([]);
    expect(c.storages[0]!.usage(owner).bytes).toBeLessThan(1000);
  });

  it.each(['a small write', 'a delete'] as const)(
    'an upload overtaken by %s still completes, superseded, instead of failing',
    async (overtaker) => {
      const c = await makeCluster(1);
      const key = own(c.owner, 'k');
      const value = new Uint8Array(3 * S).fill(9);
      let at = 0;
      const source = { stripeSize: S, next: async () => (at < value.length ? value.subarray(at, (at += S)) : undefined) };
      const upload = c.writeOp(key, { kind: 'stripes', source });
      // Every round but stripe 0's, delivered; then a small write of the key completes.
      let queue = [...((await upload.start()).send ?? [])];
      let seal: typeof queue = [];
      while (queue.length > 0) {
        const next: typeof queue = [];
        for (const o of queue) next.push(...((await upload.onReply(o.to, await c.servers[o.to]!.handle(o.message))).send ?? []));
        if (next[0]?.message.type === 'STORE' && next[0].message.stripe === 0) seal = next;
        queue = seal.length > 0 ? [] : next;
      }
      // Below a delete too: its stripes stay while they keep arriving (they were erased at once
      // once, and the upload failed with STRIPES_MISSING, which the nemesis found).
      const small = await c.write(key, overtaker === 'a delete' ? { kind: 'tombstone' } : { kind: 'value', value: text('small') });
      let result;
      queue = seal;
      while (queue.length > 0 && !result) {
        const next: typeof queue = [];
        for (const o of queue) {
          const step = await upload.onReply(o.to, await c.servers[o.to]!.handle(o.message));
          if (step.error) throw step.error;
          result ??= step.result;
          next.push(...(step.send ?? []));
        }
        queue = next;
      }
      expect(result?.ts.num).toBeLessThan(small.ts.num);
      if (overtaker === 'a small write') expect(decode((await c.read(key)).value)).toBe('small');
      else expect((await c.read(key)).value).toBeUndefined();
      // Completed below the delete, it is erased at once wherever the delete completed; a
      // server that got only its other stripes keeps them until they are idle.
      if (overtaker === 'a delete') {
        let erased = 0;
        for (const st of c.storages) {
          const [lc, heads] = await st.withKey(key, async (r) => [
            (await r.getLc())?.ts.num,
            (await r.index()).filter((w) => w.head).map((w) => w.ts.num),
          ]);
          if (lc !== small.ts.num) continue;
          expect(heads).toEqual([small.ts.num]);
          erased++;
        }
        expect(erased).toBeGreaterThanOrEqual(c.servers.length - 1);
      }
    },
  );
});

describe('collecting stripes without a head', () => {
  it('raises no collected mark: a write below them still stores (it is not SUPERSEDED by an upload it overlapped)', async () => {
    let now = 1_000_000;
    const c = await makeCluster(1, { now: () => now, history: { uploadIdleMs: 1000 } });
    const key = own(c.owner, 'k');
    const s0 = c.servers[0]!;
    const writerId = (instance: number) => new Uint8Array(c.session(c.owner).writerId).fill(instance, 16);
    // An upload at (5, 0x99…) that will never get its head here, and a plain write at (5, 0x01…)
    // below it whose STORE is late at this server.
    const upload = { num: 5, writerId: writerId(0x99) };
    expect(await s0.handle(await stripeStore(c, c.owner, key, upload, 1, new Uint8Array(MIN_STRIPE_SIZE)))).toMatchObject({
      type: 'STORE_ACK',
    });
    const late = await storeFor(c, c.owner, key, text('late'), { num: 5, writerId: writerId(0x01) });
    // A write above both completes, and the upload, idle, is collected here.
    now += 1000;
    const done = await plant(c, c.owner, key, 'newer', 6);
    await completeEverywhere(c, key, done);
    expect((await c.storages[0]!.withKey(key, (r) => r.index())).map((w) => w.ts.num)).toEqual([6]);
    expect(await c.storages[0]!.withKey(key, (r) => r.getCollected())).toBeUndefined();
    expect(await s0.handle(late.store)).toMatchObject({ type: 'STORE_ACK' });
  });
});

describe('what deleted keys cost', () => {
  it('a deleted key gives its key-quota slot back', async () => {
    const c = await makeCluster(1);
    const owner = ownerIdOf(crypto, c.owner.publicKey);
    setPolicy(c, { ...OPEN_POLICY, quotas: { owners: { [owner]: { keys: 10 } } } });
    for (let i = 0; i < 10; i++) await c.write(own(c.owner, `k${i}`), { kind: 'value', value: text(`v${i}`) });
    await expect(c.write(own(c.owner, 'eleventh'), { kind: 'value', value: text('x') })).rejects.toMatchObject({ code: 'QUOTA_EXCEEDED' });
    for (let i = 0; i < 10; i++) await c.write(own(c.owner, `k${i}`), { kind: 'tombstone' });
    await c.write(own(c.owner, 'eleventh'), { kind: 'value', value: text('x') });
    expect(decode((await c.read(own(c.owner, 'eleventh'))).value)).toBe('x');
    expect(c.storages[0]!.usage(owner).keys).toBe(1);
    // Writing a deleted key again takes a slot again.
    await c.write(own(c.owner, 'k0'), { kind: 'value', value: text('again') });
    expect(c.storages[0]!.usage(owner).keys).toBe(2);
  });
});
