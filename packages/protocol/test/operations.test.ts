/**
 * The writer and reader state machines on their own: timestamps of concurrent writes of
 * one session, authority checked before any traffic, failing fast when servers refuse,
 * and the evidence they report about servers.
 */
import { describe, expect, it } from 'vitest';
import {
  OPEN_POLICY,
  ownerIdOf,
  ReadOperation,
  signGrant,
  type Candidate,
  type Outgoing,
  type Reply,
  type Step,
} from '../src/index.js';
import { crypto, identity, makeCluster, own } from './cluster.js';

const text = (s: string) => new TextEncoder().encode(s);

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
      let queue = [...send];
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
    const narrow = await signGrant(crypto, c.cluster, c.owner, { grantee: bob.publicKey, prefix: own(c.owner, 'photos/'), expiresAt: 3000 });
    const session = c.session(bob, [wide, narrow]);
    expect(session.authorityFor(own(bob, 'x'), now)).toBeUndefined();
    expect(session.authorityFor(own(c.owner, 'photos/a'), now)).toBe(narrow);
    expect(session.authorityFor(own(c.owner, 'notes/a'), now)).toBe(wide);
    now = 4000;
    expect(session.authorityFor(own(c.owner, 'photos/a'), now)).toBe(wide);
    now = 6000;
    expect(() => c.writeOp(own(c.owner, 'photos/a'), { kind: 'tombstone' }, session)).toThrow(expect.objectContaining({ code: 'GRANT_EXPIRED' }));
    expect(() => c.writeOp('shared/x', { kind: 'tombstone' }, session)).toThrow(expect.objectContaining({ code: 'NOT_AUTHORIZED' }));
  });

  it('fails at once with the servers’ code when more than t refuse', async () => {
    const c = await makeCluster(1);
    const owner = ownerIdOf(crypto, c.owner.publicKey);
    for (const s of c.servers.slice(0, 2)) s.setPolicy({ ...OPEN_POLICY, quotas: { owners: { [owner]: { bytes: 10 } } } });
    await expect(c.write(own(c.owner, 'k'), { kind: 'value', value: new Uint8Array(100) })).rejects.toMatchObject({ code: 'QUOTA_EXCEEDED' });
    // One refusal (t = 1) is not enough: the write completes on the other three.
    c.servers[1]!.setPolicy(OPEN_POLICY);
    const w = await c.write(own(c.owner, 'k'), { kind: 'value', value: new Uint8Array(100) });
    expect(w.rounds).toBe(3);
  });
});

describe('ReadOperation', () => {
  it('drops a candidate that is not valid at COLLECT and names the server', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('real') });
    const evidence: [number, string][] = [];
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, onEvidence: (i, r) => evidence.push([i, r]) }, key, 99);
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
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, onEvidence: (i) => evidence.push(i) }, key, 7);
    let queue: Outgoing[] = [...(await op.start()).send!];
    for (;;) {
      const o = queue.shift()!;
      let reply = await c.servers[o.to]!.handle(o.message);
      if (reply.type === 'FILTER_ACK' && reply.entry && o.to === 0) {
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

  /** Runs a read with `maxValueLength`, letting `tamper` replace replies; resolves with its last step. */
  async function readStep(c: Awaited<ReturnType<typeof makeCluster>>, key: string, maxValueLength: number, tamper?: (from: number, reply: Reply) => Promise<Reply>) {
    const op = new ReadOperation({ config: c.config, crypto, codec: c.codec, verifier: c.verifier, maxValueLength }, key, 5);
    let queue: Outgoing[] = [...(await op.start()).send!];
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
    expect(step.error).toMatchObject({ code: 'VALUE_TOO_LARGE', message: expect.stringContaining('5000 bytes') });
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
