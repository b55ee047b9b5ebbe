import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  CertificateVerifier,
  computeCrossChecksum,
  decodeMessage,
  encodeMessage,
  encodePublicKey,
  OPEN_POLICY,
  receiptMessage,
  Server,
  StorageError,
  ownerIdOf,
  signGrant,
  type Candidate,
  type CryptoProvider,
} from '../src/index.js';
import { MemoryStorage } from '../src/testing/memory-storage.js';
import { message } from './arbitraries.js';
import { crypto, identity, makeCluster, own, storeEverywhere, storeFor } from '../src/testing/cluster.js';

const text = (s: string) => new TextEncoder().encode(s);
const lcOf = (c: Awaited<ReturnType<typeof makeCluster>>, i: number, key: string) => c.storages[i]!.withKey(key, (r) => r.getLc());

describe('writer, reader and server together', () => {
  it('a write takes 3 rounds, a read 2, and returns the value', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    expect(await c.read(key)).toMatchObject({ value: undefined, rounds: 2 });
    const w = await c.write(key, { kind: 'value', value: text('hello') });
    expect(w.rounds).toBe(3);
    expect(w.ts.num).toBe(1);
    const r = await c.read(key);
    expect(new TextDecoder().decode(r.value)).toBe('hello');
    expect(r.rounds).toBe(2);
    expect(r.cert?.signer).toEqual(c.owner.publicKey);
    expect((await c.write(key, { kind: 'value', value: text('again') })).ts.num).toBe(2);
  });

  it('a delete is a tombstone write: later reads find nothing', async () => {
    const c = await makeCluster(2);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('x') });
    const d = await c.write(key, { kind: 'tombstone' });
    expect(d.ts.num).toBe(2);
    expect(await c.read(key)).toMatchObject({ value: undefined, ts: d.ts, rounds: 2 });
  });

  it('keeps working with t servers silent, including empty values', async () => {
    const c = await makeCluster(2, { skip: new Set([0, 4]) });
    await c.write(own(c.owner, 'k'), { kind: 'value', value: new Uint8Array(0) });
    expect((await c.read(own(c.owner, 'k'))).value).toEqual(new Uint8Array(0));
  });

  it('keys are independent; the admin writes keys outside every namespace', async () => {
    const c = await makeCluster(1);
    await c.write('shared/a', { kind: 'value', value: text('A') }, c.session(c.admin));
    expect(new TextDecoder().decode((await c.read('shared/a')).value)).toBe('A');
    expect((await c.read('shared/b')).value).toBeUndefined();
  });
});

describe('STORE admission', () => {
  it('the forged re-STORE of a completed write is refused with every variation, the genuine retry acknowledged', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const w = await c.write(key, { kind: 'value', value: text('genuine') });
    const lc = (await lcOf(c, 0, key))!;
    const entry = (await c.storages[0]!.withKey(key, (r) => r.getEntry(w.ts)))!;
    // What any client can learn: the completed candidate (COLLECT) and the stored entry (FILTER).
    const forgedValue = text('forged!');
    const fragments = c.codec.encode(forgedValue);
    const cc = await computeCrossChecksum(crypto, fragments, forgedValue.length, false);
    const s0 = c.servers[0]!;
    // 1. The genuine certificate with the attacker's value: the certificate does not cover it.
    expect(await s0.handle({ type: 'STORE', key, opId: 9, ts: w.ts, stripe: 0, fragment: fragments[0]!, cc, cert: lc.cert })).toMatchObject(
      { type: 'ERROR', code: 'UNAUTHENTICATED' },
    );
    // 2. The genuine certificate and cross-checksum with another fragment: it does not match.
    const flipped = entry.fragment.slice();
    flipped[0]! ^= 1;
    expect(await s0.handle({ ...entry, type: 'STORE', key, opId: 9, fragment: flipped })).toMatchObject({
      type: 'ERROR',
      code: 'INVALID_ARGUMENT',
    });
    // 3. The attacker's own certificate for the victim's key: no authority.
    const mallory = await identity(66);
    const own3 = await storeFor(c, mallory, key, forgedValue, { num: w.ts.num });
    expect(await s0.handle({ ...own3.store, ts: w.ts })).toMatchObject({ type: 'ERROR', code: 'NOT_AUTHORIZED' });
    expect(await s0.handle(own3.store)).toMatchObject({ type: 'ERROR', code: 'NOT_AUTHORIZED' });
    // 4. The owner's genuine retry: acknowledged, charged once.
    const before = c.storages[0]!.usage(ownerIdOf(crypto, c.owner.publicKey));
    expect(await s0.handle({ ...entry, type: 'STORE', key, opId: 10 })).toMatchObject({ type: 'STORE_ACK' });
    expect(c.storages[0]!.usage(ownerIdOf(crypto, c.owner.publicKey))).toEqual(before);
    // Nothing changed: every later read returns the genuine value.
    expect(await c.storages[0]!.withKey(key, (r) => r.getEntry(w.ts))).toEqual(entry);
    expect(new TextDecoder().decode((await c.read(key)).value)).toBe('genuine');
  });

  it('history is write-once: a second certificate for a stored timestamp is a CONFLICT', async () => {
    const conflicts: string[] = [];
    const c = await makeCluster(1);
    const server = new Server({
      config: c.config,
      index: 0,
      crypto,
      storage: c.storages[0]!,
      cluster: c.cluster,
      signer: c.serverSigners[0]!,
      now: () => 0,
      onConflict: (k) => conflicts.push(k),
    });
    const key = own(c.owner, 'k');
    const first = await storeFor(c, c.owner, key, text('one'));
    // The same writer signing another value for the same timestamp (only its own key can).
    const second = await storeFor(c, c.owner, key, text('two'), { writerId: first.store.ts.writerId });
    expect(second.store.ts).toEqual(first.store.ts);
    expect(await server.handle(first.store)).toMatchObject({ type: 'STORE_ACK' });
    expect(await server.handle(second.store)).toMatchObject({ type: 'ERROR', code: 'CONFLICT' });
    expect(conflicts).toEqual([key]);
    expect((await c.storages[0]!.withKey(key, (r) => r.getEntry(first.store.ts)))!.fragment).toEqual(first.store.fragment);
  });

  it('grants: admitted while live, refused once expired or revoked, by the server clock', async () => {
    let now = 1000;
    const c = await makeCluster(1, { now: () => now });
    const bob = await identity(2);
    const grant = await signGrant(crypto, c.cluster, c.owner, { grantee: bob.publicKey, prefix: own(c.owner, 'shared/'), expiresAt: 2000 });
    const key = own(c.owner, 'shared/x');
    const a = await storeFor(c, bob, key, text('a'), { grant, num: 1 });
    expect(await c.servers[0]!.handle(a.store)).toMatchObject({ type: 'STORE_ACK' });
    now = 2000;
    const b = await storeFor(c, bob, key, text('b'), { grant, num: 2 });
    expect(await c.servers[0]!.handle(b.store)).toMatchObject({ type: 'ERROR', code: 'GRANT_EXPIRED' });
    // Without the grant, the same identity has no authority at all.
    const noGrant = await storeFor(c, bob, key, text('b'), { num: 3 });
    expect(await c.servers[0]!.handle(noGrant.store)).toMatchObject({ type: 'ERROR', code: 'NOT_AUTHORIZED' });
    now = 1500;
    c.servers[0]!.setPolicy({ ...OPEN_POLICY, revokedKeys: [encodePublicKey(bob.publicKey)] });
    expect(await c.servers[0]!.handle(b.store)).toMatchObject({ type: 'ERROR', code: 'REVOKED' });
  });

  it('validity is timeless: a grant that expires (or is revoked) after STORE changes nothing for COMPLETE and readers', async () => {
    let now = 1000;
    const c = await makeCluster(1, { now: () => now });
    const bob = await identity(2);
    const grant = await signGrant(crypto, c.cluster, c.owner, { grantee: bob.publicKey, prefix: own(c.owner, ''), expiresAt: 2000 });
    const key = own(c.owner, 'k');
    const w = await storeFor(c, bob, key, text('written under a grant'), { grant });
    const candidate = await storeEverywhere(c, w);
    now = 5000; // the grant has expired
    for (const s of c.servers) s.setPolicy({ ...OPEN_POLICY, revokedKeys: [encodePublicKey(bob.publicKey)] });
    for (const s of c.servers)
      expect(await s.handle({ type: 'COMPLETE', key, opId: 2, candidate })).toMatchObject({ type: 'COMPLETE_ACK' });
    const r = await c.read(key);
    expect(new TextDecoder().decode(r.value)).toBe('written under a grant');
    expect(r.ts).toEqual(w.store.ts);
  });

  it('a STORE over quota stores nothing and says QUOTA_EXCEEDED', async () => {
    const c = await makeCluster(1);
    const owner = ownerIdOf(crypto, c.owner.publicKey);
    c.servers[0]!.setPolicy({ ...OPEN_POLICY, quotas: { owners: { [owner]: { keys: 1 } } } });
    const a = await storeFor(c, c.owner, own(c.owner, 'a'), text('a'));
    const b = await storeFor(c, c.owner, own(c.owner, 'b'), text('b'));
    expect(await c.servers[0]!.handle(a.store)).toMatchObject({ type: 'STORE_ACK' });
    expect(await c.servers[0]!.handle(b.store)).toMatchObject({ type: 'ERROR', code: 'QUOTA_EXCEEDED' });
    expect(c.storages[0]!.usage(owner).keys).toBe(1);
    expect(await c.storages[0]!.withKey(own(c.owner, 'b'), (r) => r.getEntry(b.store.ts))).toBeUndefined();
  });

  it('shape errors are typed', async () => {
    const c = await makeCluster(1);
    const a = await storeFor(c, c.owner, own(c.owner, 'a'), text('abc'));
    expect(await c.servers[0]!.handle({ ...a.store, fragment: new Uint8Array(7) })).toMatchObject({ code: 'INVALID_ARGUMENT' });
    // A write certificate is no stripe certificate: it signs another message.
    expect(await c.servers[0]!.handle({ ...a.store, stripe: 1 })).toMatchObject({ code: 'UNAUTHENTICATED' });
    expect(await c.servers[0]!.handle({ ...a.store, stripe: 70_000 })).toMatchObject({ code: 'INVALID_ARGUMENT' });
    expect(await c.servers[0]!.handle({ ...a.store, key: '' })).toMatchObject({ code: 'INVALID_ARGUMENT' });
  });
});

describe('store proofs', () => {
  it('an expired grantee’s write gets no receipt from a correct server, so it can never become valid', async () => {
    // Without store proofs this is a liveness attack: the certificate is valid (validity is
    // timeless), COMPLETE would be accepted everywhere, and readers of the key would wait
    // forever for fragments no correct server has.
    let now = 1000;
    const c = await makeCluster(1, { now: () => now });
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('before') });
    const bob = await identity(2);
    const grant = await signGrant(crypto, c.cluster, c.owner, { grantee: bob.publicKey, prefix: own(c.owner, ''), expiresAt: 2000 });
    now = 3000;
    const w = await storeFor(c, bob, key, text('after expiry'), { grant, num: 9 });
    for (const [i, s] of c.servers.entries())
      expect(await s.handle({ ...w.store, fragment: w.fragments[i]! })).toMatchObject({ code: 'GRANT_EXPIRED' });
    // Even with t Byzantine servers' receipts (here: genuine signatures of server 3), the proof falls short.
    const byzantine = {
      server: 3,
      signature: await c.serverSigners[3]!.sign(receiptMessage(crypto, c.cluster.id, key, w.store.ts, w.store.cert, 3)),
    };
    for (const proof of [[], [byzantine], [byzantine, byzantine]]) {
      for (const s of c.servers)
        expect(await s.handle({ type: 'COMPLETE', key, opId: 3, candidate: { ...w.candidate, proof } })).toMatchObject({
          code: 'UNAUTHENTICATED',
        });
    }
    const r = await c.read(key);
    expect(new TextDecoder().decode(r.value)).toBe('before');
  });

  it('a proof needs n − t valid receipts of distinct servers, for this very write', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const w = await storeFor(c, c.owner, key, text('v'));
    const good = await storeEverywhere(c, w);
    expect(good.proof.map((r) => r.server)).toEqual([0, 1, 2]);
    const valid = (candidate: Candidate) => c.verifier.valid(key, candidate);
    expect(await valid(good)).toBe(true);
    expect(await valid({ ...good, proof: good.proof.slice(0, 2) })).toBe(false);
    expect(await valid({ ...good, proof: [good.proof[0]!, good.proof[0]!, good.proof[1]!] })).toBe(false);
    expect(await valid({ ...good, proof: [good.proof[1]!, good.proof[0]!, good.proof[2]!] })).toBe(false);
    expect(await valid({ ...good, proof: good.proof.map((r, i) => (i === 1 ? { ...r, server: 3 } : r)) })).toBe(false);
    const forged = good.proof[2]!.signature.slice();
    forged[0]! ^= 1;
    expect(await valid({ ...good, proof: [...good.proof.slice(0, 2), { server: 2, signature: forged }] })).toBe(false);
    // Receipts of another write of the same key do not carry over.
    const other = await storeEverywhere(c, await storeFor(c, c.owner, key, text('w'), { num: 2 }));
    expect(await valid({ ...good, proof: other.proof })).toBe(false);
    // More than n − t receipts are fine.
    const all = [
      ...good.proof,
      { server: 3, signature: await c.serverSigners[3]!.sign(receiptMessage(crypto, c.cluster.id, key, w.store.ts, w.store.cert, 3)) },
    ];
    expect(await valid({ ...good, proof: all })).toBe(true);
  });

  it('a candidate found valid is remembered whole: checking it again verifies no signature, any change is checked afresh', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const good = await storeEverywhere(c, await storeFor(c, c.owner, key, text('v')));
    let calls = 0;
    const counting: CryptoProvider = { ...crypto, verifyEd25519: (...args) => (calls++, crypto.verifyEd25519(...args)) };
    const verifier = new CertificateVerifier(counting, c.cluster);
    expect(await verifier.valid(key, good)).toBe(true);
    const first = calls;
    expect(first).toBeGreaterThanOrEqual(4); // the certificate and n − t receipts
    expect(await verifier.valid(key, { ...good, proof: [...good.proof] })).toBe(true);
    expect(calls).toBe(first);
    // Another key, another nonce, a changed signature: none rides on the remembered one.
    expect(await verifier.valid(own(c.owner, 'other'), good)).toBe(false);
    expect(await verifier.valid(key, { ...good, nonce: good.nonce.map((b) => b ^ 1) })).toBe(false);
    const signature = good.cert.signature.slice();
    signature[5]! ^= 1;
    expect(await verifier.valid(key, { ...good, cert: { ...good.cert, signature } })).toBe(false);
    // The delete flag is signed: flipped, the candidate is another one, and not valid.
    expect(await verifier.valid(key, { ...good, cert: { ...good.cert, tombstone: true } })).toBe(false);
    expect(calls).toBeGreaterThan(first);
  });
});

describe('lc changes', () => {
  it('only for valid candidates, never to a lower one, and validity needs no history entry', async () => {
    const invalid: string[] = [];
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    const w = await c.write(key, { kind: 'value', value: text('v1') });
    const real = (await lcOf(c, 0, key))!;
    expect(real.ts).toEqual(w.ts);
    const forged: Candidate[] = [
      { ...real, ts: { ...real.ts, num: 50 } },
      { ...real, nonce: new Uint8Array(32).fill(3) },
      { ...real, cert: { ...real.cert, signature: new Uint8Array(64).fill(1) } },
      { ...real, proof: real.proof.slice(1) },
    ];
    const server = new Server({
      config: c.config,
      index: 1,
      crypto,
      storage: c.storages[1]!,
      cluster: c.cluster,
      signer: c.serverSigners[1]!,
      now: () => 0,
      onInvalidCandidate: (k) => invalid.push(k),
    });
    for (const candidate of forged) {
      expect(await server.handle({ type: 'COMPLETE', key, opId: 2, candidate })).toMatchObject({ type: 'ERROR', code: 'UNAUTHENTICATED' });
      expect(await server.handle({ type: 'FILTER', key, opId: 2, stripe: 0, fragment: true, candidates: [candidate] })).toMatchObject({
        type: 'FILTER_ACK',
        ts: { num: 0 },
      });
      expect(await lcOf(c, 1, key)).toEqual(real);
    }
    expect(invalid.length).toBe(8);
    // The real candidate with its delete flag flipped, at a server that found the real one
    // valid: refused, so no server takes a completed value for a delete or a delete for a value.
    const flippedFlag = { ...real, cert: { ...real.cert, tombstone: !real.cert.tombstone } };
    expect(await c.servers[0]!.handle({ type: 'COMPLETE', key, opId: 2, candidate: flippedFlag })).toMatchObject({
      type: 'ERROR',
      code: 'UNAUTHENTICATED',
    });
    expect(
      await c.servers[0]!.handle({ type: 'FILTER', key, opId: 2, stripe: 0, fragment: true, candidates: [flippedFlag] }),
    ).toMatchObject({
      type: 'FILTER_ACK',
      ts: { num: 0 },
    });
    // Replayed on another key, the real candidate is not valid either (certificates bind the key).
    expect(
      await server.handle({ type: 'FILTER', key: own(c.owner, 'other'), opId: 3, stripe: 0, fragment: true, candidates: [real] }),
    ).toMatchObject({
      ts: { num: 0 },
      entry: undefined,
    });
    // A newer write, then the old candidate written back: lc stays at the newer one.
    const w2 = await c.write(key, { kind: 'value', value: text('v2') });
    await c.servers[2]!.handle({ type: 'COMPLETE', key, opId: 4, candidate: real });
    expect((await lcOf(c, 2, key))!.ts).toEqual(w2.ts);
    // A server that never saw the write accepts the candidate on its certificate alone.
    const fresh = await makeCluster(1);
    expect(await fresh.servers[3]!.handle({ type: 'FILTER', key, opId: 1, stripe: 0, fragment: true, candidates: [real] })).toMatchObject({
      type: 'FILTER_ACK',
      ts: real.ts,
      entry: undefined,
    });
    expect((await lcOf(fresh, 3, key))!.ts).toEqual(real.ts);
  });
});

describe('Server.handleFrame', () => {
  it('answers every frame, even garbage, with a decodable frame and never throws', async () => {
    const c = await makeCluster(1);
    const key = own(c.owner, 'k');
    await c.write(key, { kind: 'value', value: text('v') });
    await fc.assert(
      fc.asyncProperty(fc.oneof(fc.uint8Array({ maxLength: 200 }), message(4).map(encodeMessage)), async (frame) => {
        const r = await c.servers[0]!.handleFrame(frame);
        const reply = decodeMessage(r.reply, { n: 4 });
        expect(['CLOCK_ACK', 'STORE_ACK', 'COMPLETE_ACK', 'COLLECT_ACK', 'FILTER_ACK', 'LIST_ACK', 'PENDING_ACK', 'ERROR']).toContain(
          reply.type,
        );
        expect(r.error).toBe(reply.type === 'ERROR' ? reply.code : undefined);
      }),
      { numRuns: 1000 },
    );
    const bad = await c.servers[0]!.handleFrame(Uint8Array.of(9, 1));
    expect(bad).toMatchObject({ type: undefined, error: 'UNSUPPORTED_VERSION' });
    expect(decodeMessage(bad.reply, { n: 4 })).toMatchObject({ type: 'ERROR', code: 'UNSUPPORTED_VERSION', key: '', opId: 0 });
    const broken = encodeMessage({ type: 'CLOCK', key: 'hdr', opId: 77 });
    expect(decodeMessage((await c.servers[0]!.handleFrame(Uint8Array.from([...broken, 1]))).reply, { n: 4 })).toMatchObject({
      code: 'INVALID_FRAME',
      key: 'hdr',
      opId: 77,
    });
    const ack = encodeMessage({ type: 'COMPLETE_ACK', key: 'k', opId: 5, ts: { num: 1, writerId: new Uint8Array(32) } });
    expect(decodeMessage((await c.servers[0]!.handleFrame(ack)).reply, { n: 4 })).toMatchObject({
      type: 'ERROR',
      code: 'INVALID_ARGUMENT',
      opId: 5,
    });
    const clock = await c.servers[0]!.handleFrame(encodeMessage({ type: 'CLOCK', key, opId: 6 }));
    expect(clock.type).toBe('CLOCK');
    expect(decodeMessage(clock.reply, { n: 4 })).toMatchObject({ type: 'CLOCK_ACK', opId: 6, candidate: { ts: { num: 1 } } });
  });

  it('turns a storage failure into an INTERNAL reply and reports it', async () => {
    const c = await makeCluster(1);
    const failing = new Server({
      config: c.config,
      index: 0,
      crypto,
      cluster: c.cluster,
      signer: c.serverSigners[0]!,
      now: () => 0,
      storage: {
        withKey: () => Promise.reject(new Error('disk on fire')),
        usage: () => ({ bytes: 0, keys: 0 }),
        owners: () => new Map(),
        list: () => Promise.reject(new Error('disk on fire')),
        listPending: () => Promise.reject(new Error('disk on fire')),
        unfinishedKeys: () => new MemoryStorage().unfinishedKeys(),
      },
    });
    const r = await failing.handleFrame(encodeMessage({ type: 'COLLECT', key: 'k', opId: 3 }));
    expect(r).toMatchObject({ type: 'COLLECT', error: 'INTERNAL' });
    expect((r.failure as Error).message).toBe('disk on fire');
    expect(decodeMessage(r.reply, { n: 4 })).toMatchObject({ type: 'ERROR', code: 'INTERNAL', opId: 3 });
  });

  it('turns a backend whose disk failed (STORAGE_FAILED) into an UNAVAILABLE reply with its message', async () => {
    const c = await makeCluster(1);
    const failed = () => Promise.reject(new StorageError('STORAGE_FAILED', 'storage unavailable: the disk is full'));
    const failing = new Server({
      config: c.config,
      index: 0,
      crypto,
      cluster: c.cluster,
      signer: c.serverSigners[0]!,
      now: () => 0,
      storage: {
        withKey: failed,
        usage: () => ({ bytes: 0, keys: 0 }),
        owners: () => new Map(),
        list: failed,
        listPending: failed,
        unfinishedKeys: () => new MemoryStorage().unfinishedKeys(),
      },
    });
    const r = await failing.handleFrame(encodeMessage({ type: 'COLLECT', key: 'k', opId: 4 }));
    expect(r).toMatchObject({ type: 'COLLECT', error: 'UNAVAILABLE' });
    expect(decodeMessage(r.reply, { n: 4 })).toMatchObject({
      type: 'ERROR',
      code: 'UNAVAILABLE',
      opId: 4,
      message: 'storage unavailable: the disk is full',
    });
  });
});
