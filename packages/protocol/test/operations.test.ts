/**
 * The writer and reader state machines on their own, fed replies one at a time: which
 * replies count (each server once per round, this key and opId, receipts that verify),
 * timestamps of concurrent writes of one session, authority checked before any traffic,
 * failing fast when servers refuse, and the evidence they report about servers. Whole
 * runs, message by message, are the transcripts in `testdata/` (`scenarios.test.ts`).
 */
import { describe, expect, it, vi } from 'vitest';
import {
  OPEN_POLICY,
  ownerIdOf,
  ReadOperation,
  signGrant,
  WriteOperation,
  type Candidate,
  type Outgoing,
  type Reply,
  type Step,
  whoDidWhat,
} from '../src/index.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { crypto, identity, makeCluster, own, random } from '../src/testing/cluster.js';

const text = (s: string) => new TextEncoder().encode(s);

describe('whoDidWhat', () => {
  it('names servers 1-based, grouped by what they did in the order given, each group in ascending order', () => {
    expect(whoDidWhat([])).toBe('');
    expect(
      whoDidWhat([
        [2, 'sent one'],
        [1, 'sent one'],
        [0, 'sent one that fails verification'],
        [3, 'did not answer'],
      ]),
    ).toBe('s2, s3 sent one; s1 sent one that fails verification; s4 did not answer');
  });
});

describe('WriterSession', () => {
  it('gives concurrent writes of one key distinct timestamps even when their CLOCK rounds see the same state', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const session = c.session();
    const a = c.writeOp(key, { kind: 'value', value: text('a') }, session);
    const b = c.writeOp(key, { kind: 'value', value: text('b') }, session);
    // Both CLOCK rounds are answered before either STORE goes out.
    const clockOf = async (op: typeof a) => {
      const start = await op.start();
      let stores: readonly Outgoing[] | undefined;
      for (const o of start.send!) stores ??= (await op.onReply(o.to, await c.servers[o.to]!.handle(o.message))).send;
      return stores!;
    };
    const storesA = await clockOf(a);
    const storesB = await clockOf(b);
    const tsA = (storesA[0]!.message as { ts: { num: number } }).ts;
    const tsB = (storesB[0]!.message as { ts: { num: number } }).ts;
    expect(tsA.num).toBe(1);
    expect(tsB.num).toBe(2);
    // Finish both; a later write still goes above both.
    const finish = async (op: typeof a, send: readonly Outgoing[]) => {
      const queue = [...send];
      while (queue.length) {
        const o = queue.shift()!;
        const step = await op.onReply(o.to, await c.servers[o.to]!.handle(o.message));
        if (step.result) return step.result;
        queue.push(...(step.send ?? []));
      }
      throw new Error('unfinished');
    };
    await finish(b, storesB);
    await finish(a, storesA);
    expect((await c.write(key, { kind: 'value', value: text('c') }, session)).ts.num).toBe(3);
    expect(new TextDecoder().decode((await c.read(key)).value)).toBe('c');
  });

  it('never reuses the number of an abandoned write whose STORE went out (its servers would answer CONFLICT)', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const session = c.session();
    const op = c.writeOp(key, { kind: 'value', value: text('abandoned') }, session);
    // CLOCK, then STORE at two servers only; then the host gives up (a timeout).
    let stores: readonly Outgoing[] | undefined;
    for (const o of (await op.start()).send!) stores ??= (await op.onReply(o.to, await c.servers[o.to]!.handle(o.message))).send;
    for (const o of stores!.slice(0, 2)) await c.servers[o.to]!.handle(o.message);
    op.abandon();
    const next = await c.write(key, { kind: 'value', value: text('next') }, session);
    expect(next.ts.num).toBe(2);
    expect(new TextDecoder().decode((await c.read(key)).value)).toBe('next');
  });

  it('refuses a key it may not write before any traffic, and picks the longest live grant', async () => {
    let now = 1000;
    const c = await makeCluster(1, { now: () => now });
    const bob = await identity(2);
    const wide = await signGrant(crypto, c.cluster, c.owner, { grantee: bob.publicKey, prefix: own(c.owner, ''), expiresAt: 5000 });
    const narrow = await signGrant(crypto, c.cluster, c.owner, {
      grantee: bob.publicKey,
      prefix: own(c.owner, 'photos/'),
      expiresAt: 3000,
    });
    const session = c.session(bob, [wide, narrow]);
    expect(session.authorityFor(own(bob, 'x'), now)).toBeUndefined();
    expect(session.authorityFor(own(c.owner, 'photos/a'), now)).toBe(narrow);
    expect(session.authorityFor(own(c.owner, 'notes/a'), now)).toBe(wide);
    now = 4000;
    expect(session.authorityFor(own(c.owner, 'photos/a'), now)).toBe(wide);
    now = 6000;
    expect(() => c.writeOp(own(c.owner, 'photos/a'), { kind: 'tombstone' }, session)).toThrow(
      expect.objectContaining({ code: 'GRANT_EXPIRED' }),
    );
    expect(() => c.writeOp('shared/x', { kind: 'tombstone' }, session)).toThrow(expect.objectContaining({ code: 'NOT_AUTHORIZED' }));
  });

  it('counts each server once per round, for this key and opId only, and only receipts that verify', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const evidence: [number, string][] = [];
    const op = new WriteOperation(
      {
        config: c.config,
        crypto,
        codec: c.codec,
        random,
        session: c.session(),
        now: () => 1_000_000,
        onEvidence: (i, r) => evidence.push([i, r]),
      },
      key,
      { kind: 'value', value: text('v') },
      41,
    );
    expect(op.waiting()).toBeUndefined();
    const clocks = (await op.start()).send!;
    const ack = (i: number) => c.servers[i]!.handle(clocks[i]!.message);
    const first = await ack(0);
    // Another operation's reply, another key's, a duplicate: none counts towards n − t.
    expect(await op.onReply(0, { ...first, opId: 42 })).toEqual({});
    expect(await op.onReply(0, { ...first, key: own(c.owner, 'other') })).toEqual({});
    expect(await op.onReply(0, first)).toEqual({});
    expect(await op.onReply(0, first)).toEqual({});
    expect(await op.onReply(1, await ack(1))).toEqual({});
    const stores = (await op.onReply(2, await ack(2))).send!;
    expect(stores.map((o) => o.message.type)).toEqual(['STORE', 'STORE', 'STORE', 'STORE']);
    // A CLOCK_ACK arriving during STORE is another round's: ignored.
    expect(await op.onReply(3, await ack(3))).toEqual({});
    // s1's receipt is garbage: acknowledged, but not part of the proof and reported.
    const storeAck = async (i: number) => c.servers[i]!.handle(stores[i]!.message);
    const bad = await storeAck(0);
    expect(bad.type).toBe('STORE_ACK');
    expect(await op.onReply(0, { ...bad, receipt: new Uint8Array(64) } as Reply)).toEqual({});
    expect(evidence).toEqual([[0, 'acknowledged a STORE with a receipt that does not verify']]);
    expect(await op.onReply(1, await storeAck(1))).toEqual({});
    expect(await op.onReply(2, await storeAck(2))).toEqual({});
    // Were s4 silent, the write's timeout would say why three answers were not enough.
    expect(op.waiting()).toBe('the STORE needs 3 receipts that verify: s2, s3 sent one; s1 sent one that fails verification');
    const completes = (await op.onReply(3, await storeAck(3))).send!;
    const proof = completes[0]!.message.type === 'COMPLETE' ? completes[0]!.message.candidate.proof.map((r) => r.server) : [];
    expect(proof).toEqual([1, 2, 3]);
    let step: Step<unknown> = {};
    for (const i of [0, 1, 2]) step = await op.onReply(i, await c.servers[i]!.handle(completes[i]!.message));
    expect(step.result).toMatchObject({ ts: { num: 1 }, rounds: 3 });
    expect(op.waiting()).toBeUndefined();
    // After the end, nothing counts.
    expect(await op.onReply(3, await c.servers[3]!.handle(completes[3]!.message))).toEqual({});
  });

  it('adopts no CLOCK candidate that is not valid, so a Byzantine server cannot make it skip numbers', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('one') });
    const evidence: number[] = [];
    const op = new WriteOperation(
      { config: c.config, crypto, codec: c.codec, random, session: c.session(), now: () => 1_000_000, onEvidence: (i) => evidence.push(i) },
      key,
      { kind: 'value', value: text('two') },
      43,
    );
    let stores: readonly Outgoing[] | undefined;
    for (const o of (await op.start()).send!) {
      let reply = await c.servers[o.to]!.handle(o.message);
      if (o.to === 0 && reply.type === 'CLOCK_ACK')
        reply = { ...reply, candidate: { ...reply.candidate!, ts: { ...reply.candidate!.ts, num: 1000 } } };
      stores ??= (await op.onReply(o.to, reply)).send;
    }
    expect(evidence).toEqual([0]);
    expect((stores![0]!.message as { ts: { num: number } }).ts.num).toBe(2);
  });

  it('fails at once with the servers’ code when more than t refuse', async () => {
    const c = await makeCluster(1);
    const owner = ownerIdOf(crypto, c.owner.publicKey);
    for (const s of c.servers.slice(0, 2)) s.setPolicy({ ...OPEN_POLICY, quotas: { owners: { [owner]: { bytes: 10 } } } });
    await expect(c.write(own(c.owner, 'k'), { kind: 'value', value: new Uint8Array(100) })).rejects.toMatchObject({
      code: 'QUOTA_EXCEEDED',
    });
    // One refusal (t = 1) is not enough: the write completes on the other three.
    c.servers[1]!.setPolicy(OPEN_POLICY);
    const w = await c.write(own(c.owner, 'k'), { kind: 'value', value: new Uint8Array(100) });
    expect(w.rounds).toBe(3);
  });
});

describe('ReadOperation: t + 1 fragments', () => {
  /**
   * Reads `key` asking servers `chosen` for fragments first: `reply` may tamper with or
   * withhold (undefined) a server's answer; when nothing is left to deliver, the host's
   * timer fires once (`stalled`). Returns the result and every FILTER sent, in order.
   */
  async function fetchRead(
    c: Awaited<ReturnType<typeof makeCluster>>,
    key: string,
    chosen: number[],
    reply: (to: number, r: Reply) => Reply | undefined = (_to, r) => r,
  ) {
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, fragmentServers: () => chosen }, key, 3);
    const filters: { to: number; fragment: boolean; supplement: boolean }[] = [];
    const queue: Outgoing[] = [];
    const take = (step: Step<unknown>) => {
      for (const o of step.send ?? [])
        if (o.message.type === 'FILTER') filters.push({ to: o.to, fragment: o.message.fragment, supplement: !!step.supplement });
      queue.push(...(step.send ?? []));
    };
    take(await op.start());
    let timerFired = false;
    for (;;) {
      if (queue.length === 0) {
        expect(timerFired, 'the read stalled twice').toBe(false);
        expect(op.awaitingFragments).toBe(true);
        timerFired = true;
        take(op.stalled());
        continue;
      }
      const o = queue.shift()!;
      const r = reply(o.to, await c.servers[o.to]!.handle(o.message));
      if (!r) continue;
      const step = await op.onReply(o.to, r);
      if (step.result) return { result: step.result, filters, timerFired };
      take(step);
    }
  }

  it('asks t + 1 servers for fragments and the others for metadata only, and reads from those t + 1', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    const { result, filters, timerFired } = await fetchRead(c, key, [1, 2]);
    expect(new TextDecoder().decode(result.value)).toBe('real value');
    expect(filters).toEqual([0, 1, 2, 3].map((to) => ({ to, fragment: to === 1 || to === 2, supplement: false })));
    expect(timerFired).toBe(false);
  });

  it('asks the other servers for fragments at once when a chosen server’s fragment does not verify', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    const { result, filters } = await fetchRead(c, key, [0, 1], (to, r) => {
      if (to !== 0 || r.type !== 'FILTER_ACK' || !r.entry?.fragment) return r;
      const fragment = r.entry.fragment.slice();
      fragment[0]! ^= 0xff;
      return { ...r, entry: { ...r.entry, fragment } };
    });
    expect(new TextDecoder().decode(result.value)).toBe('real value');
    expect(filters.filter((f) => f.supplement)).toEqual([
      { to: 2, fragment: true, supplement: true },
      { to: 3, fragment: true, supplement: true },
    ]);
  });

  it('waits for a silent chosen server until the host’s timer, then asks the others; metadata answers never make a read safe', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    // Server 0 never answers FILTER: n − t metadata and fragment answers are in, one fragment short.
    const { result, filters, timerFired } = await fetchRead(c, key, [0, 1], (to, r) =>
      to === 0 && r.type === 'FILTER_ACK' ? undefined : r,
    );
    expect(timerFired).toBe(true);
    expect(new TextDecoder().decode(result.value)).toBe('real value');
    expect(filters.filter((f) => f.supplement).map((f) => f.to)).toEqual([2, 3]);
  });

  it('says, server by server, why it waits when the answers cannot complete it', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, fragmentServers: () => [0, 1] }, key, 3);
    expect(op.waiting()).toBeUndefined(); // not in FILTER yet
    const queue: Outgoing[] = [...((await op.start()).send ?? [])];
    const deliver = async () => {
      while (queue.length > 0) {
        const o = queue.shift()!;
        let r = await c.servers[o.to]!.handle(o.message);
        // s2 and s3 (indices 1, 2) corrupt their fragments; s4 (index 3) has none to give.
        if (r.type === 'FILTER_ACK' && r.entry?.fragment && (o.to === 1 || o.to === 2)) {
          const fragment = r.entry.fragment.slice();
          fragment[0]! ^= 0xff;
          r = { ...r, entry: { ...r.entry, fragment } };
        }
        if (r.type === 'FILTER_ACK' && o.to === 3) r = { ...r, entry: r.entry && { ...r.entry, fragment: undefined } };
        const step = await op.onReply(o.to, r);
        expect(step.result).toBeUndefined();
        queue.push(...(step.send ?? []));
      }
    };
    await deliver();
    queue.push(...(op.stalled().send ?? []));
    await deliver();
    expect(op.waiting()).toMatch(
      /^the newest version \(timestamp \d+\) needs 2 fragments that verify: s1 sent one; s2, s3 sent a fragment that fails verification; s4 answered without a fragment of it$/,
    );
  });

  it('a server asked for metadata only does not read the fragment from storage', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    const reads = vi.spyOn(MemoryStorage.prototype as unknown as { readFragment(): unknown }, 'readFragment');
    try {
      await fetchRead(c, key, [1, 2]);
      // Servers 1 and 2 read their fragments; 0 and 3 answered from metadata.
      expect(reads.mock.contexts.map((s) => c.storages.indexOf(s as MemoryStorage)).sort()).toEqual([1, 2]);
    } finally {
      reads.mockRestore();
    }
  });
});

describe('ReadOperation', () => {
  it('waits out t refusals in a round; t + 1 end the read with the code they share, or INTERNAL', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const refuse = (i: number, code: 'INTERNAL' | 'QUOTA_EXCEEDED', opId: number): Reply => ({
      type: 'ERROR',
      key,
      opId,
      code,
      message: `s${i + 1} says no`,
    });
    const run = async (codes: ('INTERNAL' | 'QUOTA_EXCEEDED')[], opId: number) => {
      const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier }, key, opId);
      await op.start();
      const steps = [];
      for (const [i, code] of codes.entries()) steps.push(await op.onReply(i, refuse(i, code, opId)));
      return steps;
    };
    const [one, two] = await run(['QUOTA_EXCEEDED', 'QUOTA_EXCEEDED'], 1);
    expect(one).toEqual({});
    expect(two!.error).toMatchObject({ code: 'QUOTA_EXCEEDED', message: expect.stringContaining('2 servers refused') as string });
    const [, mixed] = await run(['QUOTA_EXCEEDED', 'INTERNAL'], 2);
    expect(mixed!.error).toMatchObject({ code: 'INTERNAL', message: expect.stringContaining('different reasons') as string });
    // One refusal, then three answers: the read finishes (a key never written).
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier }, key, 3);
    const queue: Outgoing[] = [...(await op.start()).send!];
    expect(await op.onReply(0, refuse(0, 'INTERNAL', 3))).toEqual({});
    let result: unknown;
    while (queue.length > 0 && result === undefined) {
      const o = queue.shift()!;
      if (o.to === 0) continue;
      const step = await op.onReply(o.to, await c.servers[o.to]!.handle(o.message));
      result = step.result;
      queue.push(...(step.send ?? []));
    }
    expect(result).toMatchObject({ value: undefined, ts: { num: 0 }, rounds: 2 });
  });

  it('drops a candidate that is not valid at COLLECT and names the server', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real') });
    const evidence: [number, string][] = [];
    const op = new ReadOperation(
      { config: c.config, crypto, codec: c.codec, verifier: c.verifier, onEvidence: (i, r) => evidence.push([i, r]) },
      key,
      99,
    );
    const start = await op.start();
    let step: Step<unknown> = {};
    for (const o of start.send!) {
      let reply: Reply = await c.servers[o.to]!.handle(o.message);
      if (o.to === 2 && reply.type === 'COLLECT_ACK') {
        const inflated: Candidate = { ...reply.candidate!, ts: { ...reply.candidate!.ts, num: 1000 } };
        reply = { ...reply, candidate: inflated };
      }
      step = await op.onReply(o.to, reply);
      if (step.send) break;
    }
    expect(evidence).toEqual([[2, 'sent a candidate that is not valid']]);
    const filter = step.send![0]!.message;
    expect(filter.type === 'FILTER' && filter.candidates.map((x) => x.ts.num)).toEqual([1]);
  });

  it('reports a server whose fragment does not match, and still reads', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    const evidence: number[] = [];
    const op = new ReadOperation(
      { config: c.config, crypto, codec: c.codec, verifier: c.verifier, onEvidence: (i) => evidence.push(i) },
      key,
      7,
    );
    const queue: Outgoing[] = [...(await op.start()).send!];
    for (;;) {
      const o = queue.shift()!;
      let reply = await c.servers[o.to]!.handle(o.message);
      if (reply.type === 'FILTER_ACK' && reply.entry?.fragment && o.to === 0) {
        const fragment = reply.entry.fragment.slice();
        fragment[0]! ^= 0xff;
        reply = { ...reply, entry: { ...reply.entry, fragment } };
      }
      const step = await op.onReply(o.to, reply);
      if (step.result) {
        expect(new TextDecoder().decode(step.result.value)).toBe('real value');
        break;
      }
      queue.push(...(step.send ?? []));
    }
    expect(evidence).toEqual([0]);
  });

  it('does not count an entry whose certificate contradicts its cross-checksum about being a delete', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real value') });
    const evidence: number[] = [];
    const op = new ReadOperation(
      { config: c.config, crypto, codec: c.codec, verifier: c.verifier, onEvidence: (i) => evidence.push(i) },
      key,
      8,
    );
    const queue: Outgoing[] = [...(await op.start()).send!];
    for (;;) {
      const o = queue.shift()!;
      let reply = await c.servers[o.to]!.handle(o.message);
      // The genuine fragment and cross-checksum (a value), beside the certificate with its flag flipped.
      if (reply.type === 'FILTER_ACK' && reply.entry && o.to === 1)
        reply = { ...reply, entry: { ...reply.entry, cert: { ...reply.entry.cert, tombstone: true } } };
      const step = await op.onReply(o.to, reply);
      if (step.result) {
        expect(new TextDecoder().decode(step.result.value)).toBe('real value');
        expect(step.result.cert?.tombstone).toBe(false);
        break;
      }
      queue.push(...(step.send ?? []));
    }
    expect(evidence).toEqual([1]);
  });

  /** Runs a read with `maxValueLength`, letting `tamper` replace replies; resolves with its last step. */
  async function readStep(
    c: Awaited<ReturnType<typeof makeCluster>>,
    key: string,
    maxValueLength: number,
    tamper?: (from: number, reply: Reply) => Promise<Reply>,
  ) {
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, maxValueLength }, key, 5);
    const queue: Outgoing[] = [...(await op.start()).send!];
    while (queue.length > 0) {
      const o = queue.shift()!;
      const reply = await c.servers[o.to]!.handle(o.message);
      const step = await op.onReply(o.to, tamper ? await tamper(o.to, reply) : reply);
      if (step.result || step.error) return step;
      queue.push(...(step.send ?? []));
    }
    throw new Error('read did not finish');
  }

  it('fails with VALUE_TOO_LARGE at the first FILTER answer showing the value is over maxValueLength', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: new Uint8Array(5000) });
    const step = await readStep(c, key, 4999);
    expect(step.error).toMatchObject({ code: 'VALUE_TOO_LARGE', message: expect.stringContaining('5000 bytes') as string });
    expect((await readStep(c, key, 5000)).result?.value?.length).toBe(5000);
    // Tombstones and empty values are never too large.
    await c.write(key, { kind: 'tombstone' });
    expect((await readStep(c, key, 0)).result).toMatchObject({ value: undefined });
  });

  it('is not made to fail by an older, longer value a server answers FILTER with', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const old = await c.write(key, { kind: 'value', value: new Uint8Array(5000) });
    await c.write(key, { kind: 'value', value: text('short') });
    const oldEntry = (await c.storages[0]!.withKey(key, (r) => r.getEntry(old.ts)))!;
    const step = await readStep(c, key, 100, async (from, reply) =>
      from === 0 && reply.type === 'FILTER_ACK'
        ? { ...reply, ts: old.ts, entry: { fragment: oldEntry.fragment, cc: oldEntry.cc, cert: oldEntry.cert } }
        : reply,
    );
    expect(new TextDecoder().decode(step.result!.value)).toBe('short');
  });
});
