/**
 * Writes under way at a rebuild (`pending.ts`, FILTER's pending flag, `storeRepaired` with
 * `pending`): a server that lost its disk lists its peers' writes above `lc`, repairs the
 * ones that could still complete with its old receipt, proven against the writer's
 * certificate, and stores them above `lc` without writing anything back.
 */
import { describe, expect, it } from 'vitest';
import { MAX_LIST_LIMIT, mustRepair, PendingListOperation, PendingWrites, RepairOperation, Server } from '../src/index.js';
import { pendingCandidate } from '../src/operations/repair.js';
import type { PendingAck, PendingEntry } from '../src/wire/messages.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { crypto, identity, makeCluster, own, storeEverywhere, storeFor } from '../src/testing/cluster.js';

type Cluster = Awaited<ReturnType<typeof makeCluster>>;
const text = (s: string) => new TextEncoder().encode(s);
const lcOf = (c: Cluster, i: number, key: string) => c.storages[i]!.withKey(key, (r) => r.getLc());

/** Stores `value` at `num` on the servers in `on` only; returns the STORE's write. */
async function storeOn(c: Cluster, key: string, value: Uint8Array, num: number, on: readonly number[]) {
  const w = await storeFor(c, c.owner, key, value, { num });
  for (const i of on) expect(await c.servers[i]!.handle({ ...w.store, fragment: w.fragments[i]! })).toMatchObject({ type: 'STORE_ACK' });
  return w;
}

const pendingOf = async (c: Cluster, i: number, after = ''): Promise<PendingAck> =>
  (await c.servers[i]!.handle({ type: 'PENDING', key: '', opId: 1, after, limit: MAX_LIST_LIMIT })) as PendingAck;

describe('PENDING', () => {
  it('lists the writes stored above lc, oldest first, and not lc itself or keys without any', async () => {
    const c = await makeCluster(1);
    const done = own(c.owner, 'done');
    await c.write(done, { kind: 'value', value: text('complete') });
    const open = own(c.owner, 'open');
    await c.write(open, { kind: 'value', value: text('v1') });
    const lc = (await lcOf(c, 0, open))!;
    const a = await storeOn(c, open, text('under way a'), lc.ts.num + 1, [0, 1]);
    const b = await storeOn(c, open, text('under way b'), lc.ts.num + 2, [0, 1]);
    const reply = await pendingOf(c, 0);
    expect(reply).toMatchObject({ type: 'PENDING_ACK', more: false });
    expect(reply.entries.map((e) => [e.key, e.ts.num])).toEqual([
      [open, a.store.ts.num],
      [open, b.store.ts.num],
    ]);
    expect(reply.entries[0]!.cc).toEqual(a.store.cc);
    expect((await pendingOf(c, 2)).entries).toEqual([]);
  });

  it('FILTER with the pending flag serves exactly that write, writes nothing back, and names its timestamp when it has none', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const w = await storeOn(c, key, text('under way'), 1, [0, 1, 2]);
    const named = pendingCandidate(w.store.ts, w.store.cert);
    const ask = (i: number, cert = w.store.cert) =>
      c.servers[i]!.handle({ type: 'FILTER', key, opId: 1, stripe: 0, fragment: true, pending: true, candidates: [{ ...named, cert }] });
    expect(await ask(0)).toMatchObject({ type: 'FILTER_ACK', ts: w.store.ts, entry: { fragment: w.fragments[0] } });
    expect(await lcOf(c, 0, key)).toBeUndefined();
    // Server 4 never stored it: no entry, but under the write's own timestamp (never "older").
    expect(await ask(3)).toMatchObject({ type: 'FILTER_ACK', ts: w.store.ts, entry: undefined });
    // Another certificate for the same timestamp gets nothing.
    const other = await storeFor(c, c.owner, key, text('another value'), { num: 1 });
    expect(await ask(0, other.store.cert)).toMatchObject({ entry: undefined });
    // Without the flag, the same candidate is not valid, and FILTER answers nothing for it.
    const plain = await c.servers[0]!.handle({ type: 'FILTER', key, opId: 1, stripe: 0, fragment: true, candidates: [named] });
    expect(plain).toMatchObject({ type: 'FILTER_ACK', entry: undefined });
  });

  it('a rebuilt server repairs a write under way from its peers, above lc, and its store proof then holds', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v1') });
    const lc = (await lcOf(c, 0, key))!;
    const w = await storeFor(c, c.owner, key, text('v2, stored before the loss'), { num: lc.ts.num + 1 });
    const complete = await storeEverywhere(c, w);
    // Server 2 (index 1) loses its disk: a fresh storage, lc repaired from the catalog.
    const fresh = new MemoryStorage();
    const signers = c.serverSigners;
    const rebuilt = new Server({
      config: c.config,
      index: 1,
      crypto,
      storage: fresh,
      cluster: c.cluster,
      signer: signers[1]!,
      now: () => 1_000_000,
    });
    c.servers[1] = rebuilt;
    c.storages[1] = fresh;

    const listed = new PendingWrites();
    for (const peer of [0, 2, 3]) {
      const page = await c.drive(new PendingListOperation({ config: c.config, crypto, verifier: c.verifier }, peer, '', 77 + peer));
      expect(page.cursor).toBeUndefined();
      listed.add(peer, page.entries);
    }
    // v1 too, at server 4, which the writer's COMPLETE never reached (it stopped at n − t
    // acknowledgements): listed by one peer of three, it could not complete with server 2's
    // receipt, and is left alone. v2 is listed by all three.
    const all = listed.all();
    expect(all.map((x) => [x.candidate.ts.num, x.listedBy.size])).toEqual([
      [lc.ts.num, 1],
      [w.store.ts.num, 3],
    ]);
    expect(mustRepair(c.config, all[0]!.listedBy.size, 3)).toBe(false);
    const write = all[1];
    expect(mustRepair(c.config, write!.listedBy.size, 3)).toBe(true);
    const op = new RepairOperation(
      { config: c.config, crypto, codec: c.codec, verifier: c.verifier, index: 1 },
      key,
      write!.candidate,
      900,
      {
        pending: true,
      },
    );
    const r = await c.drive(op);
    expect(await rebuilt.storeRepaired(key, write!.candidate, r.entry, { pending: true })).toBe('stored');
    expect(await lcOf(c, 1, key)).toBeUndefined();
    expect(await rebuilt.holds(key, w.store.ts)).toBe(true);
    // Without the pending flag, the same unproven candidate is refused.
    await expect(rebuilt.storeRepaired(key, write!.candidate, r.entry)).rejects.toMatchObject({ code: 'UNAUTHENTICATED' });

    // The write completes with server 2's receipt from before the loss in its proof, and
    // server 2 serves its own fragment of it, the one the writer made.
    expect(complete.proof.map((p) => p.server)).toContain(1);
    for (const s of c.servers)
      expect(await s.handle({ type: 'COMPLETE', key, opId: 3, candidate: complete })).toMatchObject({ type: 'COMPLETE_ACK' });
    const answer = await rebuilt.handle({ type: 'FILTER', key, opId: 4, stripe: 0, fragment: true, candidates: [complete] });
    expect(answer).toMatchObject({ type: 'FILTER_ACK', ts: w.store.ts, entry: { fragment: w.fragments[1] } });
  });

  it('a repair of a write under way refuses a certificate that does not check out, and an inconsistent fragment', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const w = await storeOn(c, key, text('under way'), 1, [0, 2, 3]);
    const stranger = await identity(99);
    const forged = await storeFor(c, stranger, key, text('under way'), { num: 1 });
    const op = new RepairOperation(
      { config: c.config, crypto, codec: c.codec, verifier: c.verifier, index: 1 },
      key,
      pendingCandidate(forged.store.ts, forged.store.cert),
      901,
      { pending: true },
    );
    await expect(c.drive(op)).rejects.toMatchObject({ code: 'NOT_AUTHORIZED' });
    const good = await c.drive(
      new RepairOperation(
        { config: c.config, crypto, codec: c.codec, verifier: c.verifier, index: 1 },
        key,
        pendingCandidate(w.store.ts, w.store.cert),
        902,
        {
          pending: true,
        },
      ),
    );
    const flipped = Uint8Array.from(good.entry.fragment, (b, i) => (i === 0 ? b ^ 1 : b));
    await expect(
      c.servers[1]!.storeRepaired(key, pendingCandidate(w.store.ts, w.store.cert), { ...good.entry, fragment: flipped }, { pending: true }),
    ).rejects.toMatchObject({ code: 'INVALID_ARGUMENT' });
  });

  it("refuses a peer's list that breaks the rules, and reports the peer", async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const w = await storeOn(c, key, text('under way'), 1, [0]);
    const entry: PendingEntry = { key, ts: w.store.ts, cc: w.store.cc, cert: w.store.cert };
    const run = async (ack: Omit<PendingAck, 'type' | 'key' | 'opId'>, after = '') => {
      const evidence: string[] = [];
      const op = new PendingListOperation(
        { config: c.config, crypto, verifier: c.verifier, onEvidence: (_s, r) => evidence.push(r) },
        2,
        after,
        5,
      );
      await op.start();
      const step = await op.onReply(2, { type: 'PENDING_ACK', key: '', opId: 5, ...ack });
      return { step, evidence };
    };
    expect((await run({ entries: [entry], more: false })).step.result?.entries).toHaveLength(1);
    const otherCc = { ...w.store.cc, valueLength: w.store.cc.valueLength + 1 };
    for (const [ack, after] of [
      [{ entries: [{ ...entry, cc: otherCc }], more: false }, ''],
      [{ entries: [entry], more: false }, key],
      [{ entries: [entry, entry], more: false }, ''],
      [{ entries: [], more: true }, ''],
      [{ entries: [{ ...entry, ts: { ...entry.ts, num: 0 } }], more: false }, ''],
    ] as const) {
      const { step, evidence } = await run(ack, after);
      expect(step.error?.code).toBe('INVALID_ARGUMENT');
      expect(evidence).toHaveLength(1);
    }
    // Answers from another server, or to another operation, are ignored.
    const op = new PendingListOperation({ config: c.config, crypto, verifier: c.verifier }, 2, '', 5);
    await op.start();
    expect(await op.onReply(1, { type: 'PENDING_ACK', key: '', opId: 5, entries: [], more: false })).toEqual({});
  });

  it('mustRepair: a write fewer peers list than could complete it is skipped; too few complete lists decide nothing', () => {
    const config = { t: 1, n: 4 } as const;
    // All 3 peers listed everything: a write that can complete is on at least t + 1 = 2 correct peers.
    expect(mustRepair(config, 1, 3)).toBe(false);
    expect(mustRepair(config, 2, 3)).toBe(true);
    // Only 2 peers: one correct holder may be the peer that did not answer.
    expect(mustRepair(config, 1, 2)).toBe(true);
    expect(mustRepair(config, 0, 1)).toBeUndefined();
    const t2 = { t: 2, n: 7 } as const;
    expect(mustRepair(t2, 2, 6)).toBe(false);
    expect(mustRepair(t2, 3, 6)).toBe(true);
    expect(mustRepair(t2, 1, 4)).toBe(true);
    expect(mustRepair(t2, 1, 3)).toBeUndefined();
  });
});
