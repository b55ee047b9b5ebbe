import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  candidateMac,
  decodeMessage,
  encodeMessage,
  MemoryStorage,
  makeTimestamp,
  nonceHash,
  type Candidate,
  type KeyRecord,
} from '../src/index.js';
import { message } from './arbitraries.js';
import { crypto, makeCluster } from './cluster.js';

const text = (s: string) => new TextEncoder().encode(s);

describe('writer, reader and server together', () => {
  it('a write takes 3 rounds, a read 2, and returns the value', async () => {
    const c = makeCluster(1);
    expect(await c.read('k')).toMatchObject({ value: undefined, rounds: 2 });
    const w = await c.write('k', { kind: 'value', value: text('hello') });
    expect(w.rounds).toBe(3);
    expect(w.ts.num).toBe(1);
    const r = await c.read('k');
    expect(new TextDecoder().decode(r.value)).toBe('hello');
    expect(r.rounds).toBe(2);
    expect((await c.write('k', { kind: 'value', value: text('again') })).ts.num).toBe(2);
  });

  it('a delete is a tombstone write: later reads find nothing', async () => {
    const c = makeCluster(2);
    await c.write('k', { kind: 'value', value: text('x') });
    const d = await c.write('k', { kind: 'tombstone' });
    expect(d.ts.num).toBe(2);
    expect(await c.read('k')).toMatchObject({ value: undefined, ts: d.ts, rounds: 2 });
  });

  it('keeps working with t servers silent, including empty values', async () => {
    const c = makeCluster(2, { skip: new Set([0, 4]) });
    await c.write('k', { kind: 'value', value: new Uint8Array(0) });
    expect((await c.read('k')).value).toEqual(new Uint8Array(0));
  });

  it('keys are independent', async () => {
    const c = makeCluster(1);
    await c.write('a', { kind: 'value', value: text('A') });
    expect((await c.read('b')).value).toBeUndefined();
  });
});

describe('server', () => {
  async function stored() {
    const c = makeCluster(1);
    const w = await c.write('k', { kind: 'value', value: text('v1') });
    return { c, w };
  }

  it('rejects a STORE whose vec[i] does not verify, and stores nothing', async () => {
    const { c } = await stored();
    const ts = makeTimestamp(crypto, c.credentials.writerKey, 'k', 9, c.credentials.writerId);
    const nbar = nonceHash(crypto, new Uint8Array(32));
    const vec = c.serverKeys.map((k, i) => candidateMac(crypto, k, i, 'other-key', ts, nbar));
    const fragment = new Uint8Array(1);
    const cc = { tombstone: false, valueLength: 2, hashes: vec };
    const reply = await c.servers[0]!.handle({ type: 'STORE', key: 'k', opId: 1, ts, stripe: 0, fragment, cc, nonceHash: nbar, vec });
    expect(reply).toMatchObject({ type: 'ERROR', code: 'UNAUTHENTICATED' });
    expect(await c.storages[0]!.withKey('k', (r) => r.getEntry(ts))).toBeUndefined();
  });

  it('answers malformed requests with typed errors', async () => {
    const { c } = await stored();
    const filter = await c.servers[0]!.handle({ type: 'FILTER', key: 'k', opId: 1, stripe: 3, candidates: [] });
    expect(filter).toMatchObject({ type: 'ERROR', code: 'UNSUPPORTED' });
    const lc = (await c.storages[0]!.withKey('k', (r) => r.getLc()))!;
    const short = await c.servers[0]!.handle({ type: 'COMPLETE', key: 'k', opId: 1, candidate: { ...lc, vec: lc.vec.slice(1) } });
    expect(short).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT' });
  });

  it('changes lc only for valid candidates, and never to a lower one', async () => {
    const { c, w } = await stored();
    const lcOf = (i: number) => c.storages[i]!.withKey('k', (r) => r.getLc());
    const real = (await lcOf(0))!;
    expect(real.ts).toEqual(w.ts);
    const forged: Candidate[] = [
      { ...real, ts: { ...real.ts, num: 50 } },
      { ...real, nonce: new Uint8Array(32).fill(3) },
    ];
    for (const candidate of forged) {
      expect(await c.servers[1]!.handle({ type: 'COMPLETE', key: 'k', opId: 2, candidate })).toMatchObject({ type: 'ERROR', code: 'UNAUTHENTICATED' });
      await c.servers[1]!.handle({ type: 'REPAIR', key: 'k', opId: 2, candidates: [candidate] });
      const f = await c.servers[1]!.handle({ type: 'FILTER', key: 'k', opId: 2, stripe: 0, candidates: [candidate] });
      expect(f).toMatchObject({ type: 'FILTER_ACK', ts: { num: 0 } });
      expect(await lcOf(1)).toEqual(real);
    }
    // Replayed on another key, the real candidate is not valid either (MACs bind the key).
    const other = await c.servers[1]!.handle({ type: 'FILTER', key: 'other', opId: 3, stripe: 0, candidates: [real] });
    expect(other).toMatchObject({ type: 'FILTER_ACK', ts: { num: 0 }, entry: undefined });
    // A newer write, then the old candidate written back: lc stays at the newer one.
    const w2 = await c.write('k', { kind: 'value', value: text('v2') });
    await c.servers[2]!.handle({ type: 'REPAIR', key: 'k', opId: 4, candidates: [real] });
    expect((await c.storages[2]!.withKey('k', (r) => r.getLc()))!.ts).toEqual(w2.ts);
  });

  it('validates a written-back candidate by its MAC without the history entry', async () => {
    const { c } = await stored();
    const real = (await c.storages[0]!.withKey('k', (r) => r.getLc()))!;
    const fresh = makeCluster(1);
    const f = await fresh.servers[3]!.handle({ type: 'FILTER', key: 'k', opId: 1, stripe: 0, candidates: [real] });
    // Same keys in both clusters (derived from the index), so the MAC verifies.
    expect(f).toMatchObject({ type: 'FILTER_ACK', ts: real.ts, entry: undefined });
    expect((await fresh.storages[3]!.withKey('k', (r) => r.getLc()))!.ts).toEqual(real.ts);
  });
});

describe('MemoryStorage', () => {
  it('serializes callbacks on one key and lets other keys run in between', async () => {
    const s = new MemoryStorage();
    const log: string[] = [];
    const slow = (name: string) => async (_r: KeyRecord) => {
      log.push(`${name}:start`);
      for (let i = 0; i < 5; i++) await Promise.resolve();
      log.push(`${name}:end`);
    };
    await Promise.all([s.withKey('a', slow('a1')), s.withKey('a', slow('a2')), s.withKey('b', slow('b1'))]);
    const a1End = log.indexOf('a1:end');
    expect(log.indexOf('a2:start')).toBeGreaterThan(a1End);
    expect(log.indexOf('b1:start')).toBeLessThan(a1End);
  });

  it('a failing callback does not wedge the key', async () => {
    const s = new MemoryStorage();
    await expect(s.withKey('a', async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await s.withKey('a', async (r) => r.getLc())).toBeUndefined();
  });
});

describe('Server.handleFrame', () => {
  it('answers every frame, even garbage, with a decodable frame and never throws', async () => {
    const c = makeCluster(1);
    await c.write('k', { kind: 'value', value: text('v') });
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.uint8Array({ maxLength: 200 }), message(4).map(encodeMessage)), async (frame) => {
        const reply = decodeMessage(await c.servers[0]!.handleFrame(frame), { n: 4 });
        expect(['CLOCK_ACK', 'STORE_ACK', 'COMPLETE_ACK', 'COLLECT_ACK', 'FILTER_ACK', 'REPAIR_ACK', 'ERROR']).toContain(reply.type);
      }),
      { numRuns: 1000 },
    );
    const bad = await c.servers[0]!.handleFrame(Uint8Array.of(9, 1));
    expect(decodeMessage(bad, { n: 4 })).toMatchObject({ type: 'ERROR', code: 'UNSUPPORTED_VERSION', key: '', opId: 0 });
    const ack = encodeMessage({ type: 'REPAIR_ACK', key: 'k', opId: 5 });
    expect(decodeMessage(await c.servers[0]!.handleFrame(ack), { n: 4 })).toMatchObject({ type: 'ERROR', code: 'INVALID_ARGUMENT', opId: 5 });
    const clock = encodeMessage({ type: 'CLOCK', key: 'k', opId: 6 });
    expect(decodeMessage(await c.servers[0]!.handleFrame(clock), { n: 4 })).toMatchObject({ type: 'CLOCK_ACK', opId: 6, ts: { num: 1 } });
  });
});
