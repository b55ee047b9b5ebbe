/**
 * Repair (`repair.ts`, `Server.storeRepaired`, `Server.scrub`): a server rebuilds its own
 * fragment of a completed write from its peers, proven against the write's certificate and
 * store proof; never from a peer's word, never under a new timestamp, never from a writer
 * that encoded inconsistently.
 */
import { describe, expect, it } from 'vitest';
import {
  computeCrossChecksum,
  crossChecksumDigest,
  MIN_STRIPE_SIZE,
  nonceHash,
  RepairOperation,
  signCertificate,
  type Candidate,
  type HistoryEntry,
  type Reply,
  type StripeLayout,
} from '../src/index.js';
import { repairFragmentServers } from '../src/operations/repair.js';
import { crypto, makeCluster, own } from '../src/testing/cluster.js';

type Cluster = Awaited<ReturnType<typeof makeCluster>>;
const text = (s: string) => new TextEncoder().encode(s);
const decode = (b: Uint8Array | undefined) => (b ? new TextDecoder().decode(b) : undefined);
let opId = 5000;

const lcOf = (c: Cluster, i: number, key: string) => c.storages[i]!.withKey(key, (r) => r.getLc());

function repairOp(c: Cluster, i: number, key: string, candidate: Candidate, target: { stripe?: number; layout?: StripeLayout } = {}) {
  return new RepairOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, index: i }, key, candidate, opId++, target);
}

/** What a host does: stripe 0 first (for the layout), every other stripe stored, stripe 0 last. */
async function repair(c: Cluster, i: number, key: string, candidate: Candidate, rewrite = false) {
  const first = await c.drive(repairOp(c, i, key, candidate));
  const outcomes = [];
  const layout = first.layout;
  if (layout) {
    for (let s = 1; s < layout.digests.length; s++) {
      const r = await c.drive(repairOp(c, i, key, candidate, { stripe: s, layout }));
      outcomes.push(await c.servers[i]!.storeRepaired(key, candidate, r.entry, { layout, rewrite }));
    }
  }
  outcomes.push(await c.servers[i]!.storeRepaired(key, candidate, first.entry, { rewrite }));
  return outcomes;
}

/** A striped write of `value` in stripes of the smallest size. */
function striped(value: Uint8Array) {
  let at = 0;
  const next = async () => (at < value.length ? value.subarray(at, (at += MIN_STRIPE_SIZE)) : undefined);
  return { kind: 'stripes' as const, source: { stripeSize: MIN_STRIPE_SIZE, next } };
}

describe('repair', () => {
  it('a server that missed a write rebuilds its fragment, and the cluster reads it with another server down', async () => {
    const skip = new Set([3]);
    const c = await makeCluster(1, { skip });
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v1') });
    await c.write(key, { kind: 'value', value: text('written while server 4 was away') });
    skip.clear();
    const lc = (await lcOf(c, 0, key))!;
    expect(await c.servers[3]!.holds(key, lc.ts)).toBe(false);
    expect(await repair(c, 3, key, lc)).toEqual(['stored']);
    expect(await c.servers[3]!.holds(key, lc.ts)).toBe(true);
    expect((await lcOf(c, 3, key))?.ts).toEqual(lc.ts);
    // Twice is harmless.
    expect(await repair(c, 3, key, lc)).toEqual(['held']);
    skip.add(0);
    expect(decode((await c.read(key)).value)).toBe('written while server 4 was away');
  });

  it('a striped value is rebuilt stripe by stripe, stripe 0 last; a delete too', async () => {
    const skip = new Set([2]);
    const c = await makeCluster(1, { skip });
    const key = own(c.owner, 'big');
    const value = Uint8Array.from({ length: 3 * MIN_STRIPE_SIZE + 77 }, (_, i) => (i * 31) & 0xff);
    await c.write(key, striped(value));
    const gone = own(c.owner, 'gone');
    await c.write(gone, { kind: 'value', value: text('x') });
    await c.write(gone, { kind: 'tombstone' });
    skip.clear();
    const lc = (await lcOf(c, 0, key))!;
    expect(await repair(c, 2, key, lc)).toEqual(['stored', 'stored', 'stored', 'stored']);
    const deleted = (await lcOf(c, 0, gone))!;
    expect(await repair(c, 2, gone, deleted)).toEqual(['stored']);
    expect(await c.servers[2]!.holds(gone, deleted.ts)).toBe(true);
    // Servers 3 and 4 alone (with 1 Byzantine-silent server 1) now serve every stripe.
    skip.add(0);
    const first = await c.read(key);
    expect(first.layout?.digests).toHaveLength(4);
    expect((await c.read(gone)).value).toBeUndefined();
  });

  it('stores nothing that is not proven: a candidate without its proof, a new timestamp, a foreign fragment, stripe 0 before its stripes', async () => {
    const skip = new Set([3]);
    const c = await makeCluster(1, { skip });
    const key = own(c.owner, 'k');
    await c.write(key, striped(Uint8Array.from({ length: 2 * MIN_STRIPE_SIZE + 5 }, (_, i) => i & 0xff)));
    skip.clear();
    const lc = (await lcOf(c, 0, key))!;
    const s3 = c.servers[3]!;
    const first = await c.drive(repairOp(c, 3, key, lc));
    const layout = first.layout!;
    // A candidate without its store proof is not valid: neither the operation nor the server takes it.
    const unproven = { ...lc, proof: [] };
    await expect(c.drive(repairOp(c, 3, key, unproven))).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });
    await expect(s3.storeRepaired(key, unproven, first.entry)).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });
    // Never under another timestamp.
    const moved = { ...first.entry, ts: { ...lc.ts, num: lc.ts.num + 1 } };
    await expect(s3.storeRepaired(key, lc, moved)).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // Only this server's own fragment, unaltered.
    const flipped = first.entry.fragment.slice();
    flipped[0]! ^= 1;
    await expect(s3.storeRepaired(key, lc, { ...first.entry, fragment: flipped })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
    // Stripe 0 needs every other stripe here first.
    await expect(s3.storeRepaired(key, lc, first.entry)).rejects.toMatchObject({ code: 'STRIPES_MISSING' });
    // A stripe whose layout is not the certificate's.
    const stripe1 = await c.drive(repairOp(c, 3, key, lc, { stripe: 1, layout }));
    const otherLayout = { ...layout, digests: [layout.digests[0]!, layout.digests[2]!, layout.digests[1]!] };
    await expect(s3.storeRepaired(key, lc, stripe1.entry, { layout: otherLayout })).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });
    expect(await s3.storeRepaired(key, lc, stripe1.entry, { layout })).toBe('stored');
  });

  it('Byzantine peers serving corrupted fragments slow a repair, never poison it', async () => {
    const skip = new Set([3]);
    const c = await makeCluster(1, { skip });
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('the real value, long enough to have two fragments') });
    skip.clear();
    const liar = c.servers[0]!;
    const honest = liar.handle.bind(liar);
    liar.handle = async (req) => {
      const reply: Reply = await honest(req);
      if (reply.type !== 'FILTER_ACK' || !reply.entry?.fragment) return reply;
      const fragment = reply.entry.fragment.slice();
      fragment[0]! ^= 0xff;
      return { ...reply, entry: { ...reply.entry, fragment } };
    };
    const lc = (await lcOf(c, 1, key))!;
    expect(await repair(c, 3, key, lc)).toEqual(['stored']);
    liar.handle = honest;
    const [entry] = c.storages[3]!.entries(key);
    expect(entry && decode(entry.fragment)).toBeDefined();
    skip.add(1);
    expect(decode((await c.read(key)).value)).toBe('the real value, long enough to have two fragments');
  });

  it('asks t + 1 other servers for their fragments, never the repairing one (it holds none to give)', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('a value of some length') });
    const lc = (await lcOf(c, 0, key))!;
    for (let i = 0; i < 4; i++) {
      for (let k = 0; k < 3; k++) {
        const step = await repairOp(c, i, key, lc).start();
        const asked = (step.send ?? []).filter((o) => o.message.type === 'FILTER' && o.message.fragment).map((o) => o.to);
        expect(asked).toHaveLength(2);
        expect(asked).not.toContain(i);
      }
    }
    expect(repairFragmentServers(7, 2, 3, 5)).toEqual([6, 0, 1]);
    expect(repairFragmentServers(4, 1, 0, 2)).toEqual([3, 1]);
  });

  it('a repaired entry owns its fragment: repairs reuse their scratch memory, never what an earlier repair returned', async () => {
    const skip = new Set([3]);
    const c = await makeCluster(1, { skip });
    // Large enough for the scratch buffers, of odd lengths (the last data fragment padded).
    const values = [100_001, 300_003, 200_001].map((n, v) => Uint8Array.from({ length: n }, (_, i) => (i * (v + 7) + v) & 0xff));
    const keys = values.map((_, v) => own(c.owner, `scratch${v}`));
    for (let v = 0; v < values.length; v++) await c.write(keys[v]!, { kind: 'value', value: values[v]! });
    skip.clear();
    for (const index of [3, 0]) {
      const entries: HistoryEntry[] = [];
      for (const key of keys) entries.push((await c.drive(repairOp(c, index, key, (await lcOf(c, 0, key))!))).entry);
      for (let v = 0; v < values.length; v++) {
        // Each entry still holds the fragment the writer sent server `index`, after the later repairs ran.
        expect(entries[v]!.fragment).toEqual(c.codec.encode(values[v]!)[index]);
      }
    }
  });

  it('a writer that encoded inconsistently is reported, and nothing is stored', async () => {
    const c = await makeCluster(1, { skip: new Set([3]) });
    const key = own(c.owner, 'k');
    const value = text('the writer encodes this, then swaps fragment 2 for garbage');
    const fragments = c.codec.encode(value);
    fragments[2] = fragments[2]!.map((b) => b ^ 0x5a);
    // Every fragment matches its own hash, so every server stores its own: the lie shows only when decoding.
    const cc = await computeCrossChecksum(crypto, fragments, value.length, false);
    const nonce = new Uint8Array(32).fill(4);
    const ts = { num: 1, writerId: c.session(c.owner).writerId };
    const cert = await signCertificate(crypto, c.cluster.id, c.owner, {
      key,
      ts,
      nonceHash: nonceHash(crypto, nonce),
      ccDigest: crossChecksumDigest(crypto, cc),
      tombstone: false,
      grant: undefined,
    });
    const proof = [];
    for (const i of [0, 1, 2]) {
      const ack = await c.servers[i]!.handle({ type: 'STORE', key, opId: 1, ts, stripe: 0, fragment: fragments[i]!, cc, cert });
      if (ack.type === 'STORE_ACK') proof.push({ server: i, signature: ack.receipt });
    }
    const candidate: Candidate = { ts, nonce, cert, proof };
    for (const i of [0, 1, 2]) await c.servers[i]!.handle({ type: 'COMPLETE', key, opId: 2, candidate });
    await expect(c.drive(repairOp(c, 3, key, candidate))).rejects.toMatchObject({ code: 'INCONSISTENT_ENCODING' });
    expect(await c.servers[3]!.holds(key, ts)).toBe(false);
  });
});

describe('scrub', () => {
  it('finds a damaged fragment of lc and repairs it in place; a damaged older version is dropped', async () => {
    const c = await makeCluster(1, { history: { keep: 1 } });
    const key = own(c.owner, 'k');
    const old = await c.write(key, { kind: 'value', value: text('older version') });
    await c.write(key, { kind: 'value', value: text('current version') });
    const storage = c.storages[0]!;
    const damage = (num: number) => {
      const e = storage.entries(key).find((x: HistoryEntry) => x.ts.num === num)!;
      e.fragment[0]! ^= 0x01;
    };
    const lc = (await lcOf(c, 0, key))!;
    expect(await c.servers[0]!.scrub(key, lc.ts, 0)).toEqual({ status: 'intact' });
    damage(lc.ts.num);
    const found = await c.servers[0]!.scrub(key, lc.ts, 0);
    expect(found).toMatchObject({ status: 'damaged', lc: { ts: lc.ts } });
    expect(await repair(c, 0, key, lc, true)).toEqual(['rewritten']);
    expect(await c.servers[0]!.scrub(key, lc.ts, 0)).toEqual({ status: 'intact' });
    damage(old.ts.num);
    expect(await c.servers[0]!.scrub(key, old.ts, 0)).toEqual({ status: 'dropped' });
    expect(await c.servers[0]!.scrub(key, old.ts, 0)).toEqual({ status: 'absent' });
    expect(decode((await c.read(key)).value)).toBe('current version');
  });
});

describe('onMissedEntry', () => {
  it('names a write whose COMPLETE arrives at a server without its entry, and no other', async () => {
    const skip = new Set([3]);
    const c = await makeCluster(1, { skip });
    const missed: string[] = [];
    const { Server } = await import('../src/index.js');
    c.servers[3] = new Server({
      config: c.config,
      index: 3,
      crypto,
      storage: c.storages[3]!,
      cluster: c.cluster,
      signer: c.serverSigners[3]!,
      now: () => 1_000_000,
      onMissedEntry: (key, candidate) => missed.push(`${key}@${candidate.ts.num}`),
    });
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('stored everywhere but server 4') });
    const lc = (await lcOf(c, 0, key))!;
    expect(missed).toEqual([]);
    await c.servers[3].handle({ type: 'COMPLETE', key, opId: 1, candidate: lc });
    expect(missed).toEqual([`${key}@${lc.ts.num}`]);
    // Again, or once it holds the entry: nothing.
    await c.servers[3].handle({ type: 'COMPLETE', key, opId: 2, candidate: lc });
    skip.clear();
    const next = own(c.owner, 'held');
    await c.write(next, { kind: 'value', value: text('stored at server 4 too') });
    const held = (await lcOf(c, 0, next))!;
    await c.servers[3].handle({ type: 'COMPLETE', key: next, opId: 3, candidate: held });
    expect(missed).toHaveLength(1);
  });
});
