/**
 * Garbage collection in the protocol core: what a server keeps, what a FILTER for a
 * collected version answers, how readers and writers overtaken by newer writes move on,
 * and the bound on writes under way.
 */
import { describe, expect, it } from 'vitest';
import { ReadOperation, type ClientOperation, type Outgoing, type Reply, type Step } from '../src/index.js';
import { makeCluster, own } from '../src/testing/cluster.js';

const text = (s: string) => new TextEncoder().encode(s);
const value = (s: string) => ({ kind: 'value' as const, value: text(s) });

/** Delivers `sends` to every server and feeds the replies to `op`; returns the messages it sends next. */
async function round<R>(
  c: Awaited<ReturnType<typeof makeCluster>>,
  op: ClientOperation<R>,
  sends: readonly Outgoing[],
): Promise<{ next: Outgoing[]; result?: R; replies: Reply[] }> {
  const next: Outgoing[] = [];
  const replies: Reply[] = [];
  for (const o of sends) {
    const reply = await c.servers[o.to]!.handle(o.message);
    replies.push(reply);
    const step: Step<R> = await op.onReply(o.to, reply);
    if (step.error) throw step.error;
    if (step.result !== undefined) return { next, result: step.result, replies };
    next.push(...(step.send ?? []));
  }
  return { next, replies };
}

describe('garbage collection', () => {
  it('keeps lc and δ entries below it; a completed delete leaves only its own entry', async () => {
    const c = await makeCluster(1, { history: { keep: 1 } });
    const key = own(c.owner, 'k');
    for (let i = 1; i <= 5; i++) await c.write(key, value(`v${i}`));
    // The test cluster finishes each round at n − t answers: server 4 never sees a COMPLETE,
    // but each STORE brings it the writer's basis (the previous write, which completed), so
    // its lc trails by one write: it keeps v3 below lc = v4, and v5 is under way.
    const kept = (i: number) => c.storages[i]!.withKey(key, async (r) => (await r.index()).map((e) => e.ts.num));
    for (const i of [0, 1, 2]) expect(await kept(i)).toEqual([4, 5]);
    expect(await kept(3)).toEqual([3, 4, 5]);
    expect(new TextDecoder().decode((await c.read(key)).value)).toBe('v5');
    await c.write(key, { kind: 'tombstone' });
    for (const i of [0, 1, 2]) {
      const index = await c.storages[i]!.withKey(key, (r) => r.index());
      expect(index.map((e) => e.ts.num)).toEqual([6]);
    }
    expect(await c.read(key)).toMatchObject({ value: undefined, rounds: 2 });
  });

  it('a server that learns a delete only as a candidate (COMPLETE or a FILTER write-back) erases the older versions too', async () => {
    const c = await makeCluster(1, { history: { keep: 2 } });
    const { crypto } = await import('../src/testing/cluster.js');
    const serverThreeFirst = (sends: readonly Outgoing[]) => [...sends].sort((a, b) => (b.to === 3 ? 1 : 0) - (a.to === 3 ? 1 : 0));
    const kept = (key: string) => c.storages[3]!.withKey(key, async (r) => (await r.index()).map((e) => e.ts.num));
    /**
     * Writes `v` to `key` and returns the STORE meant for server 4 (index 3), which gets it
     * unless `withhold`, and the COMPLETE only if `complete`.
     */
    const write = async (key: string, v: Parameters<typeof c.writeOp>[1], { withhold = false, complete = false } = {}) => {
      const op = c.writeOp(key, v);
      const store = await round(c, op, (await op.start()).send!);
      expect(store.next[0]!.message.type).toBe('STORE');
      const completes = await round(
        c,
        op,
        store.next.filter((o) => !withhold || o.to !== 3),
      );
      expect(completes.next[0]!.message.type).toBe('COMPLETE');
      const done = await round(c, op, serverThreeFirst(completes.next.filter((o) => complete || o.to !== 3)));
      expect(done.result).toBeDefined();
      return store.next.find((o) => o.to === 3)!.message;
    };
    const lastStores = new Map<string, Outgoing['message']>();
    for (const key of [own(c.owner, 'by-complete'), own(c.owner, 'by-filter')]) {
      for (let i = 1; i <= 3; i++) lastStores.set(key, await write(key, value(`v${i}`)));
      // Server 4 holds every version (it stored them all and never saw a COMPLETE).
      expect(await kept(key)).toEqual([1, 2, 3]);
    }
    const deletion = await write(own(c.owner, 'by-complete'), { kind: 'tombstone' }, { withhold: true, complete: true });
    expect(await kept(own(c.owner, 'by-complete'))).toEqual([]);
    // Collected versions stay collected: their STORE (a retry) is SUPERSEDED, as after any
    // collection; the delete's own late STORE is lc's entry, and is kept alone.
    expect(await c.servers[3]!.handle(lastStores.get(own(c.owner, 'by-complete'))!)).toMatchObject({ type: 'ERROR', code: 'SUPERSEDED' });
    expect(await c.servers[3]!.handle(deletion)).toMatchObject({ type: 'STORE_ACK' });
    expect(await kept(own(c.owner, 'by-complete'))).toEqual([4]);

    await write(own(c.owner, 'by-filter'), { kind: 'tombstone' }, { withhold: true });
    expect(await kept(own(c.owner, 'by-filter'))).toEqual([1, 2, 3]);
    const read = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier }, own(c.owner, 'by-filter'), 998);
    const filter = await round(c, read, (await read.start()).send!);
    expect(filter.next[0]!.message.type).toBe('FILTER');
    let result = await round(c, read, serverThreeFirst(filter.next));
    // Server 4, asked for its fragment, has no entry for the delete: the others are asked for theirs.
    while (!result.result && result.next.length > 0) result = await round(c, read, result.next);
    expect(result.result).toMatchObject({ value: undefined });
    expect(await kept(own(c.owner, 'by-filter'))).toEqual([]);
    expect((await c.storages[3]!.withKey(own(c.owner, 'by-filter'), (r) => r.getLc()))?.cert.tombstone).toBe(true);
    expect(await c.servers[3]!.handle(lastStores.get(own(c.owner, 'by-filter'))!)).toMatchObject({ type: 'ERROR', code: 'SUPERSEDED' });
  });

  it('a STORE whose certificate contradicts its cross-checksum about being a delete is refused', async () => {
    const c = await makeCluster(1);
    const { crypto } = await import('../src/testing/cluster.js');
    const { signCertificate, crossChecksumDigest } = await import('../src/index.js');
    // A value signed as a delete, and a delete signed as a value.
    for (const [name, v] of [
      ['a-value', value('x')],
      ['a-delete', { kind: 'tombstone' as const }],
    ] as const) {
      const op = c.writeOp(own(c.owner, name), v);
      const store = await round(c, op, (await op.start()).send!);
      const honest = store.next.find((o) => o.to === 0)!.message;
      if (honest.type !== 'STORE') throw new Error('expected a STORE');
      expect(honest.cert.tombstone).toBe(honest.cc.tombstone);
      // Re-signed by the same writer, who may write the key: only the contradiction is wrong.
      const cert = await signCertificate(crypto, c.cluster.id, c.owner, {
        key: honest.key,
        ts: honest.ts,
        nonceHash: honest.cert.nonceHash,
        ccDigest: crossChecksumDigest(crypto, honest.cc),
        tombstone: !honest.cc.tombstone,
        grant: undefined,
      });
      expect(await c.servers[0]!.handle({ ...honest, cert })).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
      expect(await c.storages[0]!.withKey(honest.key, (r) => r.index())).toEqual([]);
      expect(await c.servers[0]!.handle(honest)).toMatchObject({ type: 'STORE_ACK' });
    }
  });

  it('a read whose version is collected before its FILTER arrives moves forward to the newer write', async () => {
    const c = await makeCluster(1, { history: { keep: 0 } });
    const key = own(c.owner, 'k');
    await c.write(key, value('old'));
    const op = new ReadOperation(
      { config: c.config, crypto: (await import('../src/testing/cluster.js')).crypto, codec: c.codec, verifier: c.verifier },
      key,
      999,
    );
    const filter = await round(c, op, (await op.start()).send!);
    expect(filter.next[0]!.message.type).toBe('FILTER');
    // A newer write completes everywhere between the read's COLLECT and its FILTER.
    await c.write(key, value('new'));
    const second = await round(c, op, filter.next);
    // Servers 1–3 collected the old version and name the new one (server 4 never saw a COMPLETE).
    expect(
      second.replies.filter((r) => r.type === 'FILTER_ACK' && r.entry === undefined && r.newer?.ts.num === 2).length,
    ).toBeGreaterThanOrEqual(3);
    expect(second.next[0]!.message.type).toBe('FILTER');
    const third = await round(c, op, second.next);
    expect(third.result).toMatchObject({ rounds: 3, ts: { num: 2 } });
    expect(new TextDecoder().decode(third.result!.value)).toBe('new');
  });

  it('a STORE at a collected timestamp is refused SUPERSEDED; the writer takes a fresh timestamp and completes', async () => {
    const c = await makeCluster(1, { history: { keep: 0 } });
    const key = own(c.owner, 'k');
    const slow = c.writeOp(key, value('slow'), c.session());
    const store = await round(c, slow, (await slow.start()).send!);
    expect(store.next[0]!.message.type).toBe('STORE');
    // Three writes by another session complete while the slow STORE (num 1) is on its way:
    // servers 1–3 collect up to num 2.
    for (const v of ['fast 1', 'fast 2', 'fast 3']) await c.write(key, value(v));
    const refused = await round(c, slow, store.next);
    expect(refused.replies.filter((r) => r.type === 'ERROR' && r.code === 'SUPERSEDED').length).toBeGreaterThanOrEqual(2);
    expect(refused.next[0]!.message.type).toBe('CLOCK');
    let step = await round(c, slow, refused.next);
    while (!step.result) step = await round(c, slow, step.next);
    expect(step.result).toMatchObject({ rounds: 5, ts: { num: 4 } });
    expect(new TextDecoder().decode((await c.read(key)).value)).toBe('slow');
  });

  it('writes under way are bounded per writer and per key (PENDING_LIMIT), and the bound clears as they complete', async () => {
    const c = await makeCluster(1, { history: { maxPendingPerWriter: 2, maxPendingPerKey: 3 } });
    const key = own(c.owner, 'k');
    const stores = async (session = c.session()) => {
      const op = c.writeOp(key, value('pending'), session);
      return { op, store: await round(c, op, (await op.start()).send!) };
    };
    const mine = c.session();
    const a = await stores(mine);
    await round(
      c,
      a.op,
      a.store.next.filter((o) => o.to !== 3),
    ); // stored, never completed
    const b = await stores(mine);
    const bCompletes = (
      await round(
        c,
        b.op,
        b.store.next.filter((o) => o.to !== 3),
      )
    ).next;
    expect(bCompletes[0]!.message.type).toBe('COMPLETE');
    const third = await stores(mine);
    const thirdStore = third.store.next.find((o) => o.to === 0)!.message;
    expect(await c.servers[0]!.handle(thirdStore)).toMatchObject({ type: 'ERROR', code: 'PENDING_LIMIT' });
    // Another identity's writer may still start one (3 per key), not two.
    const d = await stores(c.session(c.admin));
    expect(await c.servers[0]!.handle(d.store.next.find((o) => o.to === 0)!.message)).toMatchObject({ type: 'STORE_ACK' });
    const e = await stores(c.session(c.admin));
    expect(await c.servers[0]!.handle(e.store.next.find((o) => o.to === 0)!.message)).toMatchObject({
      type: 'ERROR',
      code: 'PENDING_LIMIT',
    });
    // b (the highest) completes: lc passes every write under way, and the writer's third is accepted.
    await round(c, b.op, bCompletes);
    expect(await c.servers[0]!.handle(thirdStore)).toMatchObject({ type: 'STORE_ACK' });
  });
});
